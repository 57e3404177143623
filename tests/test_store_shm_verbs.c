/* test_store_shm_verbs.c: the shm store's peek, refund, reset and retune
 * across processes (the conformance traces of test_store_shm.c mix the
 * verbs within one process).
 *
 *  retune       a process given a changed configuration of a name converts
 *               a key that another process kept under the old one, which
 *               it never met (the file keeps the configurations' text);
 *               two processes alternating two configurations of one name
 *               (a rolling deploy) decide as one memory store converting
 *               at each switch.
 *  reset        forgets the key, whichever configuration keeps it.
 *  not held     a peek or refund of a key not held adds none.
 *  concurrency  processes mixing acquires and refunds on one key at one
 *               reading never take it beyond fresh or below empty, and
 *               what was admitted less what was refunded is what it holds.
 *  shadow       would-be denials are counted by every process. */
#include "shm_test.h"

/* ---- retune ---- */

/* In a fresh child (a store handle of its own, none of the parent's
 * policies met): one request of cost 1 under spec (name "tier") at 1000;
 * its decision through the pipe. */
static int child_decides(const char *url, const char *spec, sluice_decision *d) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        sluice_store *s = open_url(url);
        sluice_policy *p = policy("tier", spec);
        sluice_decision e;
        memset(&e, 0, sizeof e);
        int rc = s && p ? sluice_store_acquire_at(s, p, "user", 4, 1, 1000, &e) : -1;
        if (rc != 0 || write_all(fds[1], &e, sizeof e) != 0) _exit(1);
        _exit(0);
    }
    close(fds[1]);
    int got = read_all(fds[0], d, sizeof *d);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    return got == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

TEST(retune_reads_a_configuration_the_process_never_met) {
    char path[256], url[400];
    sluice_store *s = open_fresh("retune.shm", "max_keys=64", path, url);
    sluice_policy *a = policy("tier", "token-bucket capacity=5 rate=1/h");
    REQUIRE(s && a);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, a, "user", 4, 5, 1000, &d), 0);
    CHECK(d.allowed && d.remaining == 0);
    /* a capacity change alone: the backlog of 5 carried, then 1 more */
    sluice_decision c;
    REQUIRE(child_decides(url, "token-bucket capacity=8 rate=1/h", &c) == 0);
    CHECK(c.allowed && c.remaining == 2 && c.limit == 8 && c.reset_ms == 6 * 3600000);
    /* back in a process that knows only the first: 6 in use, capped at 5 */
    CHECK_EQ(sluice_store_acquire_at(s, a, "user", 4, 1, 1000, &d), 0);
    CHECK(!d.allowed && d.remaining == 0 && d.retry_after_ms == 3600000 && d.reset_ms == 5 * 3600000);
    /* another algorithm: the 5 in use charged to it */
    REQUIRE(child_decides(url, "fixed-window limit=10 window=1h", &c) == 0);
    CHECK(c.allowed && c.remaining == 4 && c.limit == 10);
    /* a shadow part beside it: another configuration; the window carried */
    REQUIRE(child_decides(url, "fixed-window limit=10 window=1h; shadow sliding-log limit=1 window=1h", &c) == 0);
    CHECK(c.allowed && c.remaining == 3 && !c.shadow_denied);
    CHECK_EQ(stats(s).keys, 1); /* one key all along */
    sluice_store_close(s);
    sluice_policy_free(a);
}

/* Pairs of configurations of one name that a rolling deploy alternates. */
static const char *const deploys[][2] = {
    {"token-bucket capacity=4 rate=1/7ms", "token-bucket capacity=9 rate=2/7ms"}, /* a bucket carried */
    {"sliding-window limit=6 window=11ms", "sliding-window limit=3 window=11ms"}, /* windows carried */
    {"fixed-window limit=5 window=13ms", "sliding-log limit=4 window=13ms"},      /* charged */
    {"token-bucket capacity=3 rate=1/5ms; sliding-log limit=5 window=20ms",      /* more parts, fewer */
     "leaky-bucket capacity=2 rate=1/3ms"},
    {"sliding-log limit=6 window=30ms", "sliding-log limit=4 window=30ms; shadow fixed-window limit=2 window=9ms"},
};
#define N_DEPLOYS (sizeof deploys / sizeof deploys[0])

/* One step of the deploy trace, as the parent sends it. */
typedef struct {
    int64_t now, cost;
    int pair, key, verb;
} deploy_step;

/* The child's side: decides each step it is sent with the second
 * configuration of the step's pair, answering the decision and rc. */
static void deploy_child(const char *url, int in, int out) {
    sluice_store *s = open_url(url);
    sluice_policy *pol[N_DEPLOYS];
    for (size_t i = 0; i < N_DEPLOYS; i++) {
        char name[16];
        snprintf(name, sizeof name, "d%zu", i);
        pol[i] = policy(name, deploys[i][1]);
    }
    deploy_step st;
    while (read_all(in, &st, sizeof st) == 0) {
        char kb[8];
        int n = snprintf(kb, sizeof kb, "k%d", st.key);
        struct {
            int rc;
            sluice_decision d;
        } ans;
        memset(&ans, 0, sizeof ans);
        ans.rc = s ? store_verb(s, pol[st.pair], kb, (size_t)n, st.verb, st.cost, st.now, &ans.d) : -100;
        if (write_all(out, &ans, sizeof ans) != 0) break;
    }
    _exit(0);
}

/* The parent decides even steps with the first configurations, the child
 * odd ones with the second; a memory store decides every step in the
 * parent (converting at each switch, as shm must): every decision equal. */
TEST(rolling_deploy_alternates_like_one_memory_store) {
    char path[256], url[400];
    sluice_store *s = open_fresh("deploy.shm", "max_keys=256&state_bytes=512", path, url);
    sluice_store *mem = open_url("memory:");
    REQUIRE(s && mem);
    sluice_policy *pol[N_DEPLOYS][2];
    for (size_t i = 0; i < N_DEPLOYS; i++) {
        char name[16];
        snprintf(name, sizeof name, "d%zu", i);
        pol[i][0] = policy(name, deploys[i][0]);
        pol[i][1] = policy(name, deploys[i][1]);
    }
    int to_child[2], from_child[2];
    REQUIRE(pipe(to_child) == 0 && pipe(from_child) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(to_child[1]);
        close(from_child[0]);
        deploy_child(url, to_child[0], from_child[1]);
    }
    close(to_child[0]);
    close(from_child[1]);
    uint64_t rs = 99;
    int64_t now = 1000;
    long failures = 0, steps = (long)(20000 * scale());
    for (long i = 0; i < steps && failures < 5; i++) {
        deploy_step st = {0, 1, (int)check_range_(&rs, 0, N_DEPLOYS - 1), (int)check_range_(&rs, 0, 2), TRACE_ACQUIRE};
        now += check_range_(&rs, 0, 9) < 7 ? check_range_(&rs, 0, 3) : check_range_(&rs, 0, 40);
        st.now = now;
        int64_t roll = check_range_(&rs, 0, 99);
        st.verb = roll < 80 ? TRACE_ACQUIRE : roll < 90 ? TRACE_PEEK : TRACE_REFUND; /* a reset reads the clock */
        st.cost = check_range_(&rs, 0, 4) ? 1 : 2;
        int side = (int)(i & 1) ^ (check_range_(&rs, 0, 3) == 0); /* mostly alternating */
        sluice_policy *p = pol[st.pair][side];
        char kb[8];
        int n = snprintf(kb, sizeof kb, "k%d", st.key);
        struct {
            int rc;
            sluice_decision d;
        } got;
        if (side == 0) {
            got.rc = store_verb(s, p, kb, (size_t)n, st.verb, st.cost, st.now, &got.d);
        } else if (write_all(to_child[1], &st, sizeof st) != 0 || read_all(from_child[0], &got, sizeof got) != 0) {
            fprintf(stderr, "step %ld: the child is gone\n", i);
            failures++;
            break;
        }
        sluice_decision want;
        int rc = store_verb(mem, p, kb, (size_t)n, st.verb, st.cost, st.now, &want);
        if (rc != got.rc || (rc == 0 && !same(&want, &got.d))) {
            fprintf(stderr, "step %ld: %s %s (%s) key %s cost %lld at %lld: rc %d, memory %d\n", i,
                    side ? "child" : "parent", verb_name(st.verb), deploys[st.pair][side], kb, (long long)st.cost,
                    (long long)st.now, got.rc, rc);
            print_decision("shm", &got.d);
            print_decision("memory", &want);
            failures++;
        }
    }
    close(to_child[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK_EQ(failures, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(stats(s).keys, stats(mem).keys);
    for (size_t i = 0; i < N_DEPLOYS; i++) sluice_policy_free(pol[i][0]), sluice_policy_free(pol[i][1]);
    sluice_store_close(s);
    sluice_store_close(mem);
}

/* ---- reset, and keys not held ---- */

TEST(reset_forgets_the_key_whichever_configuration_keeps_it) {
    char path[256], url[400];
    sluice_clock *clock = sluice_clock_manual_new(1000);
    sluice_store_options o = SLUICE_STORE_OPTIONS_INIT;
    o.clock = clock;
    tmp_path(path, sizeof path, "reset.shm");
    shm_url(url, sizeof url, path, "max_keys=64");
    sluice_store *s = NULL;
    REQUIRE(sluice_store_open(url, &o, &s) == 0);
    sluice_policy *a = policy("login", "sliding-log limit=3 window=1h");
    sluice_policy *b = policy("login", "sliding-log limit=5 window=1h");
    sluice_policy *other = policy("other", "sliding-log limit=3 window=1h");
    REQUIRE(a && b && other);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, a, "u", 1, 3, 1000, &d), 0);
    CHECK_EQ(sluice_store_acquire_at(s, other, "u", 1, 3, 1000, &d), 0);
    CHECK_EQ(stats(s).keys, 2);
    CHECK_EQ(sluice_store_reset(s, b, "u", 1, &d), 0); /* kept by a: forgotten all the same */
    CHECK(d.allowed && d.remaining == 4 && d.limit == 5); /* a request of cost 1 on a fresh key */
    CHECK_EQ(stats(s).keys, 1);
    CHECK_EQ(sluice_store_acquire_at(s, a, "u", 1, 3, 1000, &d), 0);
    CHECK(d.allowed); /* fresh */
    CHECK_EQ(sluice_store_acquire_at(s, other, "u", 1, 1, 1000, &d), 0);
    CHECK(!d.allowed); /* another name: untouched */
    CHECK_EQ(sluice_store_reset(s, a, "nobody", 6, NULL), 0);
    CHECK_EQ(stats(s).keys, 2);
    sluice_store_close(s);
    sluice_clock_free(clock);
    sluice_policy_free(a);
    sluice_policy_free(b);
    sluice_policy_free(other);
}

TEST(peek_and_refund_of_a_key_not_held_add_none) {
    char path[256], url[400];
    sluice_store *s = open_fresh("absent.shm", "max_keys=64", path, url);
    sluice_policy *p = policy("p", "token-bucket capacity=4 rate=1/s");
    sluice_policy *w = policy("w", "sliding-window limit=4 window=1s; shadow fixed-window limit=1 window=1s");
    REQUIRE(s && p && w);
    sluice_decision d;
    CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 4, 1000, &d), 0);
    CHECK(d.allowed && d.remaining == 0 && d.reset_ms == 4000);
    CHECK_EQ(sluice_store_refund_at(s, p, "k", 1, 2, 1000, &d), 0);
    CHECK(d.allowed && d.remaining == 3);
    CHECK_EQ(sluice_store_peek_at(s, w, "k", 1, 2, 1000, &d), 0);
    CHECK(d.allowed && d.shadow_denied && d.remaining == 2);
    CHECK_EQ(stats(s).keys, 0);
    CHECK_EQ(stats(s).allowed + stats(s).denied, 0);
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_policy_free(w);
}

/* ---- concurrency ---- */

enum { PROCS = 4, ROUNDS = 3000 };

/* Each child: ROUNDS requests of cost 1 at one reading, refunding about
 * half of those admitted, peeking between; counts what it was admitted
 * and refunded, and any peek out of 0..limit. */
static void refund_child(const char *url, const char *spec, uint64_t seed, _Atomic long *admitted,
                         _Atomic long *refunded, _Atomic long *bad) {
    sluice_store *s = open_url(url);
    sluice_policy *p = policy("mix", spec);
    if (!s || !p) _exit(1);
    uint64_t rs = seed;
    for (int i = 0; i < ROUNDS; i++) {
        sluice_decision d;
        if (sluice_store_acquire_at(s, p, "hot", 3, 1, 5000, &d) != 0) atomic_fetch_add(bad, 1);
        if (d.allowed) {
            atomic_fetch_add(admitted, 1);
            if (check_range_(&rs, 0, 1)) {
                if (sluice_store_refund_at(s, p, "hot", 3, 1, 5000, &d) != 0) atomic_fetch_add(bad, 1);
                atomic_fetch_add(refunded, 1);
            }
        }
        if (sluice_store_peek_at(s, p, "hot", 3, 1, 5000, &d) != 0 || d.remaining < 0 || d.remaining > d.limit)
            atomic_fetch_add(bad, 1);
    }
    _exit(0);
}

static const char *const mix_specs[] = {
    "token-bucket capacity=50 rate=1/h",                         /* FAST */
    "fixed-window limit=50 window=1h",                           /* FAST */
    "sliding-log limit=50 window=1h",                            /* general */
    "leaky-bucket capacity=60 rate=1/h; sliding-window limit=50 window=1h", /* general, composite */
};

TEST(processes_mixing_acquires_and_refunds_stay_within_the_limit) {
    _Atomic long *shared = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(shared != MAP_FAILED);
    for (size_t k = 0; k < sizeof mix_specs / sizeof mix_specs[0]; k++) {
        char path[256], url[400], name[32];
        snprintf(name, sizeof name, "mix-%zu.shm", k);
        sluice_store *s = open_fresh(name, "max_keys=64&state_bytes=1024", path, url);
        REQUIRE(s);
        atomic_store(&shared[0], 0), atomic_store(&shared[1], 0), atomic_store(&shared[2], 0);
        pid_t pids[PROCS];
        fflush(NULL);
        for (int i = 0; i < PROCS; i++)
            if ((pids[i] = fork()) == 0) refund_child(url, mix_specs[k], 1000 + (uint64_t)i, &shared[0], &shared[1], &shared[2]);
        int ok = 1;
        for (int i = 0; i < PROCS; i++) {
            int status = 0;
            waitpid(pids[i], &status, 0);
            ok &= WIFEXITED(status) && WEXITSTATUS(status) == 0;
        }
        CHECK(ok);
        long admitted = atomic_load(&shared[0]), refunded = atomic_load(&shared[1]);
        CHECK_EQ(atomic_load(&shared[2]), 0);
        CHECK(admitted - refunded <= 50);
        /* at one reading, what it holds is exactly what was kept */
        sluice_policy *p = policy("mix", mix_specs[k]);
        sluice_decision d;
        CHECK_EQ(sluice_store_peek_at(s, p, "hot", 3, 1, 5000, &d), 0);
        if (d.remaining != 50 - (admitted - refunded))
            fprintf(stderr, "%s: %ld admitted, %ld refunded, %lld remaining\n", mix_specs[k], admitted, refunded,
                    (long long)d.remaining);
        CHECK_EQ(d.remaining, 50 - (admitted - refunded));
        CHECK(refunded > 0 && admitted > 50);
        sluice_policy_free(p);
        sluice_store_close(s);
    }
    munmap(shared, 4096);
}

/* A refund is a change as an admission is: a process stopped (or killed)
 * after installing it, at each step, blocks nobody; whoever meets it
 * finishes it as a refund. */
TEST(a_refund_stopped_midway_is_finished_as_a_refund) {
    const char *spec = "token-bucket capacity=100 rate=1/h; sliding-log limit=10 window=1h";
    for (int step = 1; step <= 3; step++) {
        for (int go_on = 0; go_on <= 1; go_on++) {
            char name[64], path[256], url[400];
            snprintf(name, sizeof name, "refund-stop-%d-%d.shm", step, go_on);
            sluice_store *s = open_fresh(name, "max_keys=16&state_bytes=304", path, url);
            sluice_policy *p = policy("stop", spec);
            REQUIRE(s && p);
            sluice_decision d;
            CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 3, 1000, &d), 0);
            CHECK(d.allowed && d.remaining == 7);
            fflush(NULL);
            pid_t a = fork();
            REQUIRE(a >= 0);
            if (a == 0) {
                sluice_store *sa = open_url(url);
                sluice_policy *pa = policy("stop", spec);
                stop_at_step = step;
                sluice__shm_step_hook = stop_here;
                int rc = sa && pa ? sluice_store_refund_at(sa, pa, "k", 1, 2, 1000, &d) : -1;
                _exit(rc == 0 && d.allowed && d.remaining == 8 && stop_at_step == 0 ? 0 : 1);
            }
            int status = 0;
            REQUIRE(waitpid(a, &status, WUNTRACED) == a && WIFSTOPPED(status));
            alarm(10); /* a hang here ends the test */
            CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 1, 1000, &d), 0);
            CHECK(d.allowed && d.remaining == 8); /* 1 left in use, not 5 */
            CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1000, &d), 0);
            CHECK(d.allowed && d.remaining == 8);
            alarm(0);
            kill(a, go_on ? SIGCONT : SIGKILL);
            REQUIRE(waitpid(a, &status, 0) == a);
            if (go_on) CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 1, 1000, &d), 0);
            CHECK(d.allowed && d.remaining == 7); /* the refund once, whoever finished it */
            CHECK_EQ(stats(s).allowed, 2);
            sluice_store_close(s);
            sluice_policy_free(p);
        }
    }
}

/* ---- shadow ---- */

TEST(every_process_counts_shadow_denials) {
    char path[256], url[400];
    sluice_store *s = open_fresh("shadow.shm", "max_keys=64", path, url);
    sluice_policy *p = policy("try", "token-bucket capacity=10 rate=1/h; shadow fixed-window limit=2 window=1h");
    REQUIRE(s && p);
    sluice_decision d;
    for (int i = 0; i < 4; i++) CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1000, &d), 0);
    CHECK(d.allowed && d.shadow_denied && d.remaining == 6 && d.limit == 10);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        sluice_store *c = open_url(url);
        sluice_policy *pc = policy("try", "token-bucket capacity=10 rate=1/h; shadow fixed-window limit=2 window=1h");
        sluice_decision e;
        int rc = c && pc ? sluice_store_acquire_at(c, pc, "k", 1, 1, 1000, &e) : -1;
        _exit(rc == 0 && e.allowed && e.shadow_denied ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    sluice_stats st = stats(s);
    CHECK_EQ(st.shadow_denied, 3); /* the 3rd, 4th and the child's */
    CHECK_EQ(st.allowed, 5);
    sluice_store_close(s);
    sluice_policy_free(p);
}

TEST_MAIN(retune_reads_a_configuration_the_process_never_met, rolling_deploy_alternates_like_one_memory_store,
          reset_forgets_the_key_whichever_configuration_keeps_it, peek_and_refund_of_a_key_not_held_add_none,
          processes_mixing_acquires_and_refunds_stay_within_the_limit, a_refund_stopped_midway_is_finished_as_a_refund,
          every_process_counts_shadow_denials)
