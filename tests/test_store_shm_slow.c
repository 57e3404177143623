/* test_store_shm_slow.c: the shared-memory store (shm:PATH) with real
 * processes, kills and faults (its own ctest entry: these take seconds).
 *
 *  processes     forked processes, each opening its own store on one file
 *                (racing its creation), admit exactly a key's capacity;
 *                processes x threads likewise; a lagging reading never gets
 *                capacity the leading reading would not give.
 *  crashes       workers are SIGKILLed at random moments while others run;
 *                every admission is reported over a pipe as it happens, so a
 *                kill hides at most one; then a new process decides on every
 *                key (promptly: no lock stays held), the counts add up, and
 *                no slot leaked. Also: a lock word left by a dead owner, by
 *                an owner not yet reaped, and by a child of a process that
 *                opened the store before fork().
 *  lock-free     a process stopped (SIGSTOP) at each step of an admission
 *                blocks nobody, and its late writes change nothing when it
 *                goes on; one killed while adding a key, giving it a block,
 *                or moving a FAST key (one word) to the general form, leaves
 *                it whole; a table far too small for its keys, with workers
 *                stopped and killed at random, gives only sane decisions.
 *  hostile       another user's file held locked, a set-up lock held, a full
 *                tmpfs, random and targeted bit flips: never a hang, a
 *                crash, or an admission past the limit the file can tell. */
#include "shm_test.h"

/* A process killed after its new key's slot was given an overflow block,
 * before the key was written, leaks nothing: the block goes back (a
 * collection finds it), over and over, in an area of one block. */
TEST(killed_while_giving_a_block_leaks_nothing) {
    char path[256], url[400], q[128];
    snprintf(q, sizeof q, "max_keys=16&state_bytes=64&overflow_bytes=%d", 4096 + 16384);
    sluice_store *s = open_fresh("block-kill.shm", q, path, url);
    sluice_policy *log = policy("log", "sliding-log limit=100 window=1m");
    REQUIRE(s && log);
    char kb[16];
    for (int i = 0; i < 5; i++) {
        snprintf(kb, sizeof kb, "dead-%d", i);
        CHECK(killed_at_step(url, "log", "sliding-log limit=100 window=1m", kb, 0, 7));
    }
    alarm(10);
    sluice_decision d;
    int rc = sluice_store_acquire_at(s, log, "alive", 5, 1, 0, &d);
    if (rc) fprintf(stderr, "after the kills: %s\n", sluice_store_errmsg(s));
    CHECK_EQ(rc, 0);
    CHECK(rc || (d.allowed && d.remaining == 99));
    alarm(0);
    CHECK_EQ(stats(s).keys, 1);
    sluice_store_close(s);
    sluice_policy_free(log);
}

/* ---- processes ---- */

/* Forks n children; each runs fn(i, arg, results) once all are ready (the
 * parent lets them go together), and its results[0..n_results) come back
 * over a pipe. Returns the number of children that failed. */
typedef int (*child_fn)(int i, void *arg, long *results);

static int run_children(int n, child_fn prepare, child_fn fn, void *arg, long (*results)[64]) {
    int ready[2], go[2], out[32][2];
    pid_t pids[32];
    if (n > 32 || pipe(ready) || pipe(go)) return n;
    fflush(NULL);
    for (int i = 0; i < n; i++) {
        if (pipe(out[i])) return n;
        pids[i] = fork();
        if (pids[i] == 0) {
            alarm(120);
            close(ready[0]);
            close(go[1]);
            close(out[i][0]);
            long res[64] = {0};
            int rc = prepare ? prepare(i, arg, res) : 0;
            char c = rc ? 'x' : 'r';
            write_all(ready[1], &c, 1);
            if (read_all(go[0], &c, 1) != 0) _exit(3);
            if (rc == 0) rc = fn(i, arg, res);
            write_all(out[i][1], res, sizeof res);
            _exit(rc ? 1 : 0);
        }
        close(out[i][1]);
    }
    close(ready[1]);
    close(go[0]);
    int failed = 0;
    for (int i = 0; i < n; i++) {
        char c = 0;
        if (read_all(ready[0], &c, 1) != 0 || c != 'r') failed++;
    }
    char gos[32];
    memset(gos, 'g', sizeof gos);
    write_all(go[1], gos, (size_t)n);
    close(go[1]);
    close(ready[0]);
    for (int i = 0; i < n; i++) {
        if (read_all(out[i][0], results[i], sizeof results[i]) != 0) memset(results[i], 0, sizeof results[i]);
        close(out[i][0]);
        int status = 0;
        waitpid(pids[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "child %d: %s %d\n", i, WIFSIGNALED(status) ? "killed by signal" : "exit",
                    WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status));
            failed++;
        }
    }
    return failed;
}

typedef struct {
    char url[400];
    const char *spec;
    int n_keys, attempts, threads;
    sluice_store *s; /* the child's own, opened in prepare */
    sluice_policy *p;
    int64_t now;
} race_arg;

static int race_prepare(int i, void *arg, long *res) {
    (void)i, (void)res;
    race_arg *a = arg;
    a->s = open_url(a->url); /* racing the file's creation with the others */
    a->p = policy("race", a->spec);
    return a->s && a->p ? 0 : 1;
}

typedef struct {
    race_arg *a;
    uint64_t seed;
    long admitted[64];
    int errors;
} race_thread;

static void *race_loop(void *arg) {
    race_thread *t = arg;
    for (int i = 0; i < t->a->attempts; i++) {
        int key = t->a->n_keys == 1 ? 0 : (int)check_range_(&t->seed, 0, t->a->n_keys - 1);
        char kb[16];
        int kn = snprintf(kb, sizeof kb, "key-%d", key);
        sluice_decision d;
        if (sluice_store_acquire_at(t->a->s, t->a->p, kb, (size_t)kn, 1, t->a->now, &d)) t->errors++;
        else if (d.allowed) t->admitted[key]++;
    }
    return NULL;
}

static int race_run(int i, void *arg, long *res) {
    race_arg *a = arg;
    int nt = a->threads ? a->threads : 1, errors = 0;
    race_thread t[8];
    pthread_t th[8];
    for (int k = 0; k < nt; k++) {
        memset(&t[k], 0, sizeof t[k]);
        t[k].a = a;
        t[k].seed = (uint64_t)(i * 8 + k + 1);
    }
    if (nt == 1) race_loop(&t[0]);
    else {
        for (int k = 0; k < nt; k++) pthread_create(&th[k], NULL, race_loop, &t[k]);
        for (int k = 0; k < nt; k++) pthread_join(th[k], NULL);
    }
    for (int k = 0; k < nt; k++) {
        errors += t[k].errors;
        for (int key = 0; key < a->n_keys; key++) res[key] += t[k].admitted[key];
    }
    sluice_stats st = stats(a->s);
    res[63] = st.evicted;
    sluice_store_close(a->s);
    sluice_policy_free(a->p);
    return errors;
}

static void race_procs(const char *name, const char *query, const char *spec, int n_procs, int threads,
                       int n_keys, long capacity, int attempts) {
    static race_arg a;
    memset(&a, 0, sizeof a);
    char path[256];
    tmp_path(path, sizeof path, name); /* no file: the children make it */
    shm_url(a.url, sizeof a.url, path, query);
    a.spec = spec;
    a.n_keys = n_keys;
    a.attempts = attempts;
    a.threads = threads;
    a.now = 5000;
    static long res[32][64];
    memset(res, 0, sizeof res);
    CHECK_EQ(run_children(n_procs, race_prepare, race_run, &a, res), 0);
    for (int k = 0; k < n_keys; k++) {
        long sum = 0;
        for (int i = 0; i < n_procs; i++) sum += res[i][k];
        if (sum != capacity) fprintf(stderr, "%s key %d: %ld admitted of %ld\n", spec, k, sum, capacity);
        CHECK_EQ(sum, capacity);
    }
    for (int i = 0; i < n_procs; i++) CHECK_EQ(res[i][63], 0);
    sluice_store *s = open_url(a.url);
    REQUIRE(s);
    CHECK_EQ(stats(s).keys, n_keys);
    sluice_store_close(s);
}

TEST(processes_race_one_fresh_key) {
    int attempts = SANITIZED ? 300 : 1000;
    race_procs("race1.shm", "max_keys=64", "token-bucket capacity=500 rate=1/h", 6, 0, 1, 500, attempts);
    race_procs("race2.shm", "max_keys=64&state_bytes=2096",
               "sliding-log limit=100 window=1h; fixed-window limit=400 window=1d", 6, 0, 1, 100, attempts);
    race_procs("race3.shm", "", "sliding-window limit=300 window=1h", 4, 0, 1, 300, attempts);
    race_procs("race4.shm", "", "fixed-window limit=300 window=1h", 4, 0, 1, 300, attempts);
}

TEST(processes_over_many_keys_never_over_admit) {
    int attempts = SANITIZED ? 2000 : 6000;
    race_procs("many1.shm", "max_keys=4096", "token-bucket capacity=50 rate=1/h", 6, 0, 48, 50, attempts);
    race_procs("many2.shm", "max_keys=4096", "sliding-window limit=40 window=1h", 6, 0, 48, 40, attempts);
    race_procs("many3.shm", "max_keys=4096&state_bytes=560",
               "leaky-bucket capacity=30 rate=1/h; sliding-log limit=20 window=1h", 6, 0, 48, 20, attempts);
}

TEST(processes_times_threads_on_one_key) {
    int attempts = SANITIZED ? 200 : 1000;
    race_procs("pt1.shm", "max_keys=16", "token-bucket capacity=700 rate=1/h", 3, 4, 1, 700, attempts);
    race_procs("pt2.shm", "max_keys=4096", "fixed-window limit=25 window=1h; token-bucket capacity=900 rate=1/h",
               2, 4, 48, 25, attempts * 2); /* the general form */
}

/* ---- time: the store's time is the highest reading seen ---- */

/* Two processes take turns: the leader's readings run 3 s ahead of the
 * lagger's. Every decision, the lagger's included, equals a reference
 * decided at the highest reading seen (its waits told from the reading). */
TEST(lagging_process_decides_at_store_time) {
    char path[256], url[400];
    tmp_path(path, sizeof path, "lag.shm");
    shm_url(url, sizeof url, path, "max_keys=16&state_bytes=512"); /* 12 pairs: never full */
    const char *lag_specs[] = {"fixed-window limit=2 window=50ms", "sliding-window limit=3 window=40ms",
                               "token-bucket capacity=2 rate=1/30ms", "sliding-log limit=3 window=45ms"};
    enum { N_LAG_POL = 4, N_LAG_KEYS = 3 };
    sluice_policy *pol[N_LAG_POL];
    for (int i = 0; i < N_LAG_POL; i++) pol[i] = policy_i((size_t)i, lag_specs[i]);
    sluice_store *s = open_url(url);
    REQUIRE(s);
    int to_child[2], from_child[2];
    REQUIRE(pipe(to_child) == 0 && pipe(from_child) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) { /* the lagger: its own store on the file */
        alarm(60);
        close(to_child[1]);
        close(from_child[0]);
        sluice_store *c = open_url(url);
        int64_t msg[4]; /* policy, key, reading, unused */
        while (c && read_all(to_child[0], msg, sizeof msg) == 0) {
            char kb[8];
            int kn = snprintf(kb, sizeof kb, "k%d", (int)msg[1]);
            struct {
                int rc;
                sluice_decision d;
            } r;
            memset(&r, 0, sizeof r);
            r.rc = sluice_store_acquire_at(c, pol[msg[0]], kb, (size_t)kn, 1, msg[2], &r.d);
            write_all(from_child[1], &r, sizeof r);
        }
        sluice_store_close(c);
        _exit(0);
    }
    close(to_child[0]);
    close(from_child[1]);
    sluice_limiter *ref[N_LAG_POL][N_LAG_KEYS];
    for (int i = 0; i < N_LAG_POL; i++)
        for (int k = 0; k < N_LAG_KEYS; k++) sluice_limiter_new_policy(pol[i], NULL, &ref[i][k]);
    uint64_t rs = 31;
    int64_t t = 1000000, high = INT64_MIN;
    long failures = 0, lagger_admitted = 0, steps = (long)(20000 * scale());
    for (long step = 0; step < steps && failures < 5; step++) {
        t += check_range_(&rs, 0, 9);
        int lag = (int)(step % 3 == 2); /* leader, leader, lagger */
        int64_t reading = lag ? t - 3000 : t;
        int pi = (int)check_range_(&rs, 0, N_LAG_POL - 1), key = (int)check_range_(&rs, 0, N_LAG_KEYS - 1);
        int64_t eff = reading > high ? reading : high;
        sluice_decision got, want;
        int rc;
        if (lag) {
            int64_t msg[4] = {pi, key, reading, 0};
            struct {
                int rc;
                sluice_decision d;
            } r;
            if (write_all(to_child[1], msg, sizeof msg) || read_all(from_child[0], &r, sizeof r)) {
                failures++;
                break;
            }
            rc = r.rc;
            got = r.d;
        } else {
            char kb[8];
            int kn = snprintf(kb, sizeof kb, "k%d", key);
            rc = sluice_store_acquire_at(s, pol[pi], kb, (size_t)kn, 1, reading, &got);
        }
        sluice_acquire_at(ref[pi][key], 1, eff, &want);
        expect_lag(&want, eff - reading); /* waits count from the reading */
        if (rc == 0 && got.allowed) high = eff; /* store time: the highest admitted at */
        if (rc != 0 || !same(&got, &want)) {
            fprintf(stderr, "step %ld (%s, reading %lld, store time %lld): %s k%d rc %d\n", step,
                    lag ? "lagger" : "leader", (long long)reading, (long long)eff, lag_specs[pi], key, rc);
            print_decision("shm", &got);
            print_decision("reference", &want);
            failures++;
        }
        lagger_admitted += lag && got.allowed;
    }
    close(to_child[1]);
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    close(from_child[0]);
    CHECK_EQ(failures, 0);
    CHECK(lagger_admitted > 0);
    CHECK_EQ(stats(s).evicted, 0);
    for (int i = 0; i < N_LAG_POL; i++) {
        for (int k = 0; k < N_LAG_KEYS; k++) sluice_limiter_free(ref[i][k]);
        sluice_policy_free(pol[i]);
    }
    sluice_store_close(s);
}

/* The same, racing: once the leader has decided at reading R, the lagger
 * (readings 5 windows earlier) hammers the same new keys concurrently with
 * it; per key no more than the limit of the leader's window is admitted
 * (decided at its own readings, each key would admit twice the limit). */
typedef struct {
    char url[400];
    int lag;
    sluice_store *s;
    sluice_policy *p;
} lag_arg;

static int lag_prepare(int i, void *arg, long *res) {
    (void)res;
    lag_arg *a = (lag_arg *)arg + i;
    a->s = open_url(a->url);
    a->p = policy("lagrace", "fixed-window limit=2 window=1s");
    return a->s && a->p ? 0 : 1;
}

static int lag_run(int i, void *arg, long *res) {
    lag_arg *a = (lag_arg *)arg + i;
    int64_t reading = 10000500 - (a->lag ? 5000 : 0);
    uint64_t rs = (uint64_t)i + 1;
    int errors = 0;
    for (int n = 0; n < (SANITIZED ? 2000 : 20000); n++) {
        int key = (int)check_range_(&rs, 0, 49);
        char kb[16];
        int kn = snprintf(kb, sizeof kb, "key-%d", key);
        sluice_decision d;
        if (sluice_store_acquire_at(a->s, a->p, kb, (size_t)kn, 1, reading, &d)) errors++;
        else res[key] += d.allowed;
    }
    sluice_store_close(a->s);
    sluice_policy_free(a->p);
    return errors;
}

TEST(lagging_process_gets_no_extra_capacity_racing) {
    char path[256];
    tmp_path(path, sizeof path, "lagrace.shm");
    static lag_arg a[2];
    for (int i = 0; i < 2; i++) {
        shm_url(a[i].url, sizeof a[i].url, path, "max_keys=1024");
        a[i].lag = i;
    }
    /* the leader's reading is seen first */
    sluice_store *s = open_url(a[0].url);
    sluice_policy *p = policy("warm", "fixed-window limit=1 window=1s");
    REQUIRE(s && p);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "warm", 4, 1, 10000500, &d), 0);
    sluice_store_close(s);
    sluice_policy_free(p);
    static long res[32][64];
    memset(res, 0, sizeof res);
    CHECK_EQ(run_children(2, lag_prepare, lag_run, a, res), 0);
    for (int k = 0; k < 50; k++) {
        if (res[0][k] + res[1][k] != 2)
            fprintf(stderr, "key-%d: leader %ld + lagger %ld admitted, limit 2\n", k, res[0][k], res[1][k]);
        CHECK_EQ(res[0][k] + res[1][k], 2);
    }
}

/* ---- crashes ---- */

#define CR_KEYS 30
#define CR_MAX_ROUNDS 100 /* rounds 2 h apart: 200 h, well inside 30 days */
#define CR_LOG_LIMIT 20
#define HOUR_MS INT64_C(3600000)
#define CR_T0 INT64_C(1000000000)

typedef struct {
    _Atomic int round;
} crash_shared;

/* The worker: its own store; A is a token bucket that never refills within
 * the test (accounting), B a sliding log (bounds per round). Each admission
 * is written to the pipe at once: 4 bytes {policy, key, round lo, hi}. */
static void crash_worker(const char *url, crash_shared *sh, int wfd, uint64_t seed) {
    sluice_store *s = open_url(url);
    sluice_policy *a = policy("acct", "token-bucket capacity=1000000000 rate=1/30d");
    sluice_policy *b = policy("bound", "sliding-log limit=20 window=1h");
    if (!s || !a || !b) _exit(3);
    char kb[16];
    for (;;) {
        int round = atomic_load(&sh->round);
        int64_t now = CR_T0 + round * 2 * HOUR_MS;
        int pol = (int)(check_rand_(&seed) & 1), key = (int)(check_rand_(&seed) % CR_KEYS);
        int kn = snprintf(kb, sizeof kb, "crash-%d", key);
        sluice_decision d;
        int rc = sluice_store_acquire_at(s, pol ? b : a, kb, (size_t)kn, 1, now, &d);
        if (rc) {
            fprintf(stderr, "crash worker %d: %s\n", (int)getpid(), sluice_store_errmsg(s));
            _exit(4);
        }
        if (d.allowed) {
            /* the round moved on meanwhile: another process may already
             * have raised the store's time to the next round's reading, and
             * this admission counted there (bit 1: "this round or later") */
            int moved = atomic_load(&sh->round) != round;
            uint8_t m[4] = {(uint8_t)(pol | moved << 1), (uint8_t)key, (uint8_t)(round & 0xff), (uint8_t)(round >> 8)};
            if (write_all(wfd, m, 4)) _exit(5);
        }
    }
}

typedef struct {
    pid_t pid;
    int fd;
    uint8_t carry[4];
    int n_carry;
} crash_proc;

/* reports: A per key; B per round and key, those surely in that round and
 * those of a worker that saw the round move on during its decision */
static long rep_a[CR_KEYS], rep_b[CR_MAX_ROUNDS][CR_KEYS], rep_b_moved[CR_MAX_ROUNDS][CR_KEYS];

static void tally(const uint8_t *m) {
    int round = m[2] | m[3] << 8;
    if (m[1] >= CR_KEYS || round >= CR_MAX_ROUNDS) return;
    if ((m[0] & 1) == 0) rep_a[m[1]]++;
    else if (m[0] & 2) rep_b_moved[round][m[1]]++;
    else rep_b[round][m[1]]++;
}

/* Reads what is there (all of it, to EOF, when final). */
static void drain(crash_proc *w, int final) {
    uint8_t buf[4096];
    for (;;) {
        if (!final) {
            struct pollfd pf = {w->fd, POLLIN, 0};
            if (poll(&pf, 1, 0) <= 0) return;
        }
        ssize_t n = read(w->fd, buf, sizeof buf);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return;
        for (ssize_t i = 0; i < n; i++) {
            w->carry[w->n_carry++] = buf[i];
            if (w->n_carry == 4) {
                tally(w->carry);
                w->n_carry = 0;
            }
        }
    }
}

static int spawn_worker(crash_proc *w, const char *url, crash_shared *sh, uint64_t seed, crash_proc *all, int n_all) {
    int fds[2];
    if (pipe(fds)) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        close(fds[0]);
        for (int i = 0; i < n_all; i++)
            if (all[i].pid > 0 && &all[i] != w) close(all[i].fd);
        crash_worker(url, sh, fds[1], seed);
        _exit(0);
    }
    close(fds[1]);
    w->pid = pid;
    w->fd = fds[0];
    w->n_carry = 0;
    return 0;
}

/* What the checker (a new process) found. */
typedef struct {
    int ok;
    int rc_a[CR_KEYS], rc_b[CR_KEYS];
    sluice_decision a[CR_KEYS], b[CR_KEYS];
    sluice_stats before, after;
    int leak_rc[64];
    int64_t ms; /* how long its decisions took */
} crash_check;

static void crash_checker(const char *url, int last_round, int wfd) {
    static crash_check c;
    memset(&c, 0, sizeof c);
    int64_t t0 = mono_ms();
    sluice_store *s = open_url(url);
    sluice_policy *a = policy("acct", "token-bucket capacity=1000000000 rate=1/30d");
    sluice_policy *b = policy("bound", "sliding-log limit=20 window=1h");
    sluice_policy *fresh = policy("leak", "fixed-window limit=1 window=1s");
    if (s && a && b && fresh) {
        int64_t now = CR_T0 + last_round * 2 * HOUR_MS;
        char kb[16];
        for (int k = 0; k < CR_KEYS; k++) {
            int kn = snprintf(kb, sizeof kb, "crash-%d", k);
            c.rc_a[k] = sluice_store_acquire_at(s, a, kb, (size_t)kn, 1, now, &c.a[k]);
            c.rc_b[k] = sluice_store_acquire_at(s, b, kb, (size_t)kn, 1, now, &c.b[k]);
        }
        c.before = stats(s);
        sluice_store_close(s);
        /* long after every reset: every key is fresh, so the 64 slots take
         * 64 new keys without evicting or refusing one */
        char url2[420];
        snprintf(url2, sizeof url2, "%s&on_full=refuse", url);
        s = open_url(url2);
        if (s) {
            now += INT64_C(1) << 55;
            for (int k = 0; k < 64; k++) {
                int kn = snprintf(kb, sizeof kb, "leak-%d", k);
                sluice_decision d;
                c.leak_rc[k] = sluice_store_acquire_at(s, fresh, kb, (size_t)kn, 1, now, &d);
                if (c.leak_rc[k] == 0 && !d.allowed) c.leak_rc[k] = 99;
            }
            c.after = stats(s);
            sluice_store_close(s);
            c.ok = 1;
        }
    }
    c.ms = mono_ms() - t0;
    write_all(wfd, &c, sizeof c);
}

TEST(crashes_leave_a_working_consistent_table) {
    char path[256], url[400];
    tmp_path(path, sizeof path, "crash.shm");
    /* one bucket of 64; 30 keys x 2 policies = 60 pairs, all held: after
     * their first requests every decision is lock-free, so kills land in
     * the middle of lock-free updates (kills inside bucket locks: the
     * killed_while_* tests and fork_after_open_then_crash_does_not_deadlock) */
    shm_url(url, sizeof url, path, "max_keys=64&state_bytes=544");
    sluice_store *s0 = open_url(url); /* make the file before the workers */
    REQUIRE(s0);
    sluice_store_close(s0);
    crash_shared *sh = mmap(NULL, sizeof *sh, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    REQUIRE(sh != MAP_FAILED);
    atomic_store(&sh->round, 0);
    memset(rep_a, 0, sizeof rep_a);
    memset(rep_b, 0, sizeof rep_b);
    memset(rep_b_moved, 0, sizeof rep_b_moved);
    enum { W = 4 };
    crash_proc w[W];
    memset(w, 0, sizeof w);
    uint64_t rs = 2024, seeds = 1;
    for (int i = 0; i < W; i++) REQUIRE(spawn_worker(&w[i], url, sh, seeds++, w, W) == 0);
    int64_t duration = (int64_t)(2000 * (SANITIZED ? 1.0 : scale())), start = mono_ms(), last_round_ms = start;
    long kills = 0, worker_errors = 0;
    int round = 0;
    while (mono_ms() - start < duration) {
        /* let them run a random while, reading their reports */
        int64_t wait_us = check_range_(&rs, 100, 4000), until = mono_ms() * 1000 + wait_us;
        while (mono_ms() * 1000 < until) {
            struct pollfd pf[W];
            for (int i = 0; i < W; i++) pf[i] = (struct pollfd){w[i].fd, POLLIN, 0};
            poll(pf, W, 1);
            for (int i = 0; i < W; i++) drain(&w[i], 0);
        }
        if (mono_ms() - last_round_ms >= 20 && round + 1 < CR_MAX_ROUNDS) {
            atomic_store(&sh->round, ++round);
            last_round_ms = mono_ms();
        }
        int v = (int)check_range_(&rs, 0, W - 1);
        kill(w[v].pid, SIGKILL);
        int status = 0;
        waitpid(w[v].pid, &status, 0);
        if (!WIFSIGNALED(status)) {
            worker_errors++;
            fprintf(stderr, "worker %d exited with %d before it was killed\n", (int)w[v].pid, WEXITSTATUS(status));
        }
        drain(&w[v], 1);
        close(w[v].fd);
        kills++;
        w[v].pid = 0;
        REQUIRE(spawn_worker(&w[v], url, sh, seeds++, w, W) == 0);
    }
    for (int i = 0; i < W; i++) { /* the last ones are killed too */
        kill(w[i].pid, SIGKILL);
        int status = 0;
        waitpid(w[i].pid, &status, 0);
        if (!WIFSIGNALED(status)) worker_errors++;
        drain(&w[i], 1);
        close(w[i].fd);
        kills++;
    }
    munmap(sh, sizeof *sh);
    CHECK_EQ(worker_errors, 0);
    long reported_a = 0, reported_b = 0;
    for (int k = 0; k < CR_KEYS; k++) reported_a += rep_a[k];
    for (int r = 0; r <= round; r++)
        for (int k = 0; k < CR_KEYS; k++) reported_b += rep_b[r][k] + rep_b_moved[r][k];
    CHECK(reported_a > 1000 && reported_b > 100); /* they really ran */
    /* a new process decides on every key, promptly */
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        alarm(10); /* a lock that stays held ends it here */
        crash_checker(url, round, fds[1]);
        _exit(0);
    }
    close(fds[1]);
    static crash_check c;
    memset(&c, 0, sizeof c);
    int got = read_all(fds[0], &c, sizeof c);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status))
        fprintf(stderr, "the checker was killed by signal %d (%s): a decision never returned\n",
                WTERMSIG(status), strsignal(WTERMSIG(status)));
    REQUIRE(got == 0 && WIFEXITED(status) && c.ok);
    CHECK(c.ms < 5000);
    long unreported = 0;
    for (int k = 0; k < CR_KEYS; k++) {
        CHECK_EQ(c.rc_a[k], 0);
        CHECK_EQ(c.rc_b[k], 0);
        /* A: the checker's own request was the (n+1)-th: n = C - 1 - remaining */
        long n = c.a[k].allowed ? (long)(SLUICE_LIMIT_MAX - 1 - c.a[k].remaining) : -1;
        if (n < rep_a[k] || n > rep_a[k] + kills)
            fprintf(stderr, "crash-%d: %ld admitted, %ld reported, %ld kills\n", k, n, rep_a[k], kills);
        CHECK(n >= rep_a[k] && n <= rep_a[k] + kills);
        unreported += n - rep_a[k];
        /* B in the last round: admitted = limit - remaining - the checker's;
         * at least those reported there, at most those plus the ones that
         * saw the round move (they may count there) and one per kill */
        long nb = CR_LOG_LIMIT - c.b[k].remaining - (c.b[k].allowed ? 1 : 0);
        long maybe = rep_b_moved[round][k] + (round > 0 ? rep_b_moved[round - 1][k] : 0);
        if (nb < rep_b[round][k] || nb > rep_b[round][k] + maybe + kills)
            fprintf(stderr, "crash-%d, last round: %ld admitted, %ld + %ld reported, %ld kills\n", k, nb,
                    rep_b[round][k], maybe, kills);
        CHECK(nb >= rep_b[round][k] && nb <= rep_b[round][k] + maybe + kills);
    }
    CHECK(unreported >= 0 && unreported <= kills); /* at most one hidden per kill */
    /* no round ever admitted more than the log's limit on a key (and all
     * rounds together no more than the limit per round) */
    long moved = 0;
    for (int k = 0; k < CR_KEYS; k++) {
        long all = 0;
        for (int r = 0; r <= round; r++) {
            if (rep_b[r][k] > CR_LOG_LIMIT) fprintf(stderr, "round %d crash-%d: %ld admitted\n", r, k, rep_b[r][k]);
            CHECK(rep_b[r][k] <= CR_LOG_LIMIT);
            all += rep_b[r][k] + rep_b_moved[r][k];
            moved += rep_b_moved[r][k];
        }
        CHECK(all <= CR_LOG_LIMIT * (long)(round + 1));
    }
    CHECK_EQ(c.before.keys, 2 * CR_KEYS);
    CHECK_EQ(c.before.evicted, 0);
    for (int k = 0; k < 64; k++) CHECK_EQ(c.leak_rc[k], 0);
    CHECK_EQ(c.after.keys, 64);
    CHECK_EQ(c.after.evicted, 0);
    CHECK_EQ(c.after.refused, 0);
    CHECK_EQ(c.after.forgotten - c.before.forgotten, 2 * CR_KEYS);
    printf("     %ld kills, %ld + %ld admissions reported (%ld across a round change), %ld unreported, "
           "%d rounds, checker %lld ms\n",
           kills, reported_a, reported_b, moved, unreported, round + 1, (long long)c.ms);
}

/* A lock word left by a process that died holding it. */

/* Decides once in a child with a deadline; returns 0 when it did, else
 * the signal (SIGALRM: it was still waiting for the lock). */
static int decide_in_child(const char *url, int seconds) {
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        alarm((unsigned)seconds);
        sluice_store *s = open_url(url);
        sluice_policy *p = policy("lock", "token-bucket capacity=5 rate=1/s");
        sluice_decision d;
        int rc = s && p ? sluice_store_acquire_at(s, p, "k", 1, 1, 1000, &d) : -1;
        _exit(rc == 0 && d.allowed ? 0 : 1);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    return WIFSIGNALED(status) ? WTERMSIG(status) : WEXITSTATUS(status) ? -1 : 0;
}

static int set_lock_word(const char *path, uint64_t owner) {
    return pwrite_at(path, (off_t)file_geometry(path).heads_off, &owner, sizeof owner); /* bucket 0's lock, at +0 */
}

TEST(lock_of_dead_owner_is_taken_over) {
    char path[256], url[400];
    tmp_path(path, sizeof path, "deadlock.shm");
    shm_url(url, sizeof url, path, "max_keys=16"); /* one bucket */
    make_valid(path);
    fflush(NULL);
    pid_t dead = fork();
    if (dead == 0) _exit(0);
    REQUIRE(dead > 0);
    waitpid(dead, NULL, 0); /* dead and reaped */
    REQUIRE(set_lock_word(path, (uint64_t)dead) == 0);
    CHECK_EQ(decide_in_child(url, 5), 0);
}

/* BUG: a process killed holding a bucket lock stays "alive" to kill(pid, 0)
 * until its parent reaps it (a zombie): until then every other process spins
 * on the lock, and if the parent itself is one of them (it decides on that
 * bucket before reaping), they spin forever. */
TEST(lock_of_unreaped_dead_owner_is_taken_over) {
    char path[256], url[400];
    tmp_path(path, sizeof path, "zombie.shm");
    shm_url(url, sizeof url, path, "max_keys=16");
    make_valid(path);
    fflush(NULL);
    pid_t zombie = fork();
    if (zombie == 0) _exit(0);
    REQUIRE(zombie > 0);
    usleep(20000); /* it has exited; not reaped: a zombie */
    REQUIRE(set_lock_word(path, (uint64_t)zombie) == 0);
    int r = decide_in_child(url, 3);
    if (r == SIGALRM) fprintf(stderr, "a decision waited 3 s on a lock whose owner (a zombie) is dead\n");
    CHECK_EQ(r, 0);
    waitpid(zombie, NULL, 0);
}

/* A process whose main thread has exited shows state Z in /proc while its
 * other threads run: its lock is not to be taken (it may be in the middle
 * of adding a key). Once it is gone, the lock is taken over. */
static void *wait_on_pipe(void *arg) {
    char c;
    while (read(*(int *)arg, &c, 1) < 0 && errno == EINTR) {
    }
    _exit(0);
}

TEST(lock_of_a_live_process_without_main_thread_is_kept) {
    char path[256], url[400];
    tmp_path(path, sizeof path, "mainless.shm");
    shm_url(url, sizeof url, path, "max_keys=16");
    make_valid(path);
    int fds[2];
    REQUIRE(pipe(fds) == 0);
    fflush(NULL);
    pid_t owner = fork();
    if (owner == 0) {
        close(fds[1]);
        static int rfd;
        rfd = fds[0];
        pthread_t th;
        if (pthread_create(&th, NULL, wait_on_pipe, &rfd) != 0) _exit(1);
        pthread_exit(NULL); /* the process lives on in th, its main thread gone */
    }
    REQUIRE(owner > 0);
    close(fds[0]);
    usleep(50000);
    REQUIRE(set_lock_word(path, (uint64_t)owner) == 0);
    int r = decide_in_child(url, 1);
    if (r != SIGALRM) fprintf(stderr, "a lock of a live process (main thread exited) was taken: %d\n", r);
    CHECK_EQ(r, SIGALRM);
    close(fds[1]); /* its last thread exits */
    waitpid(owner, NULL, 0);
    CHECK_EQ(decide_in_child(url, 5), 0);
}

/* The host's boot id cannot be read (no fd left): the open fails, and the
 * table, which is not the old boot's, is left as it is. */
TEST(unreadable_boot_id_resets_nothing) {
    char path[256], url[400];
    sluice_store *s = open_fresh("bootid.shm", "max_keys=16", path, url);
    sluice_policy *p = policy("boot", "token-bucket capacity=3 rate=1/h");
    REQUIRE(s && p);
    sluice_decision d;
    for (int i = 0; i < 3; i++) CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1000, &d), 0);
    fflush(NULL);
    pid_t child = fork();
    if (child == 0) {
        /* every fd but one taken: the store file opens, the boot id not
         * (a low limit first, so that taking them all is quick) */
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur > 256) {
            rl.rlim_cur = 256;
            setrlimit(RLIMIT_NOFILE, &rl);
        }
        int last = -1;
        for (;;) {
            int fd = open("/dev/null", O_RDONLY);
            if (fd < 0) break;
            last = fd;
        }
        if (last >= 0) close(last);
        sluice_store *s2 = NULL;
        char err[256] = "";
        int rc = sluice_store_open_err(url, NULL, &s2, err, sizeof err);
        _exit(rc != 0 && strstr(err, "boot id") ? 0 : 1);
    }
    int status = 0;
    waitpid(child, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1000, &d), 0);
    CHECK(!d.allowed); /* still full: nothing was reset */
    sluice_store_close(s);
    sluice_policy_free(p);
}

/* The bug this guards against: a lock word holding the pid read once at
 * open, so that the children of a process that opened the store before
 * fork() (a pre-fork server) lock with their parent's pid; a child killed
 * holding a lock would leave a word naming its live parent, which nobody
 * ever takes over. Decisions on held keys take no lock, so the children
 * add a new key at every request (one bucket of 16, each addition evicting
 * one): kills land inside bucket locks. */
TEST(fork_after_open_then_crash_does_not_deadlock) {
    char path[256], url[400];
    sluice_store *s = open_fresh("prefork.shm", "max_keys=16", path, url); /* opened once, before the forks */
    sluice_policy *p = policy("prefork", "token-bucket capacity=1000000000 rate=1/30d");
    REQUIRE(s && p);
    enum { PW = 2 };
    pid_t kids[PW];
    uint64_t rs = 5;
    int hung = 0, tries = SANITIZED ? 10 : 40;
    for (int i = 0; i < PW; i++) kids[i] = -1;
    for (int attempt = 0; attempt < tries && !hung; attempt++) {
        for (int i = 0; i < PW; i++) {
            if (kids[i] > 0) continue;
            fflush(NULL);
            kids[i] = fork();
            if (kids[i] == 0) {
                sluice_decision d;
                char kb[32];
                for (unsigned n = 0;; n++) {
                    int kn = snprintf(kb, sizeof kb, "k%d-%u", (int)getpid(), n);
                    sluice_store_acquire_at(s, p, kb, (size_t)kn, 1, 1000, &d);
                }
            }
        }
        usleep((useconds_t)check_range_(&rs, 500, 3000));
        int v = (int)check_range_(&rs, 0, PW - 1);
        kill(kids[v], SIGKILL);
        waitpid(kids[v], NULL, 0);
        kids[v] = -1;
        if (decide_in_child(url, 3) == SIGALRM) hung = attempt + 1;
    }
    for (int i = 0; i < PW; i++)
        if (kids[i] > 0) {
            kill(kids[i], SIGKILL);
            waitpid(kids[i], NULL, 0);
        }
    if (hung) fprintf(stderr, "after kill %d a new process waited 3 s for the lock: it stays held\n", hung);
    CHECK_EQ(hung, 0);
    sluice_store_close(s);
    sluice_policy_free(p);
}

/* ---- lock-free updates ---- */

/* A process stopped at any step of an admission (SIGSTOP: alive, so no
 * lock of it would ever be taken over) blocks nobody: another process
 * decides at once, finishing the stopped one's change. When the stopped
 * one goes on, many updates later, its late writes change nothing; killed
 * instead, it leaves nothing behind. A composite with a sliding log: a
 * state of many words. */
TEST(stopped_process_blocks_nobody) {
    const char *spec = "token-bucket capacity=100 rate=1/h; sliding-log limit=10 window=1h";
    for (int step = 1; step <= 3; step++) {
        for (int go_on = 0; go_on <= 1; go_on++) {
            char name[64], path[256], url[400];
            snprintf(name, sizeof name, "stop-%d-%d.shm", step, go_on);
            tmp_path(path, sizeof path, name);
            shm_url(url, sizeof url, path, "max_keys=16&state_bytes=304");
            sluice_store *s = open_url(url);
            sluice_policy *p = policy("stop", spec);
            REQUIRE(s && p);
            sluice_decision d;
            CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1000, &d), 0);
            CHECK(d.allowed);
            fflush(NULL);
            pid_t a = fork();
            REQUIRE(a >= 0);
            if (a == 0) {
                sluice_store *sa = open_url(url);
                sluice_policy *pa = policy("stop", spec);
                stop_at_step = step;
                sluice__shm_step_hook = stop_here;
                int rc = sa && pa ? sluice_store_acquire_at(sa, pa, "k", 1, 1, 1000, &d) : -1;
                _exit(rc == 0 && d.allowed && stop_at_step == 0 ? 0 : 1);
            }
            int status = 0;
            REQUIRE(waitpid(a, &status, WUNTRACED) == a && WIFSTOPPED(status));
            /* stopped mid-admission; a hang here ends the test by SIGALRM */
            alarm(10);
            for (int i = 0; i < 3; i++) {
                CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1000, &d), 0);
                CHECK(d.allowed);
            }
            alarm(0);
            /* 1 + the stopped one's (its change was installed: it counts) + 3 */
            CHECK_EQ(d.remaining, 10 - 5);
            if (go_on) {
                kill(a, SIGCONT);
                REQUIRE(waitpid(a, &status, 0) == a);
                CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
            } else {
                kill(a, SIGKILL);
                REQUIRE(waitpid(a, &status, 0) == a);
            }
            CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1000, &d), 0);
            CHECK(d.allowed);
            CHECK_EQ(d.remaining, 10 - 6);
            sluice_stats st = stats(s);
            CHECK_EQ(st.keys, 1);
            /* its admission counts whoever finished it */
            CHECK_EQ(st.allowed, 6);
            sluice_store_close(s);
            sluice_policy_free(p);
        }
    }
}

/* BUG: a process killed while adding a key, its state written but the key
 * not yet live, left that state's words marked with the version the next
 * key added there then took as well: the next key (of another policy)
 * read the dead one's state as its own. */
TEST(killed_while_adding_a_key_leaves_no_state_behind) {
    char path[256], url[400];
    tmp_path(path, sizeof path, "addkill.shm");
    shm_url(url, sizeof url, path, "max_keys=16&state_bytes=304"); /* one bucket */
    const char *log_spec = "sliding-log limit=10 window=1h; token-bucket capacity=100 rate=1/h";
    sluice_store *s = open_url(url);
    sluice_policy *p = policy("added", log_spec);
    REQUIRE(s && p);
    /* a key of another policy, added to the first free slot */
    CHECK(killed_at_step(url, "other", "fixed-window limit=5 window=1h; token-bucket capacity=9 rate=1/h", "x", 1000,
                         4)); /* the general form: its state is written before the key is live */
    alarm(10); /* its bucket lock is taken over */
    sluice_decision d;
    for (int i = 1; i <= 3; i++) {
        CHECK_EQ(sluice_store_acquire_at(s, p, "y", 1, 1, 1000, &d), 0);
        CHECK(d.allowed);
        CHECK_EQ(d.remaining, 10 - i);
    }
    alarm(0);
    CHECK_EQ(stats(s).keys, 1);
    sluice_store_close(s);
    sluice_policy_free(p);
}

/* A FAST key keeps its state in one word while it fits: a bucket's TAT a
 * reading 2^34 ms after the key was added, at r = 999999937 units per ms,
 * does not, nor does a fixed window 2^34 windows after the key's first, or
 * a sliding window 2^32 windows after it; the key moves to the general
 * form under its buckets' locks. A process killed in the middle of that
 * (after the state's words, before the switch) leaves the key whole: the
 * decisions stay the memory store's. */
static void converting_loses_nothing(const char *name, const char *spec, int64_t later) {
    char url[400];
    sluice_store *s, *mem;
    sluice_policy *p;
    REQUIRE(open_beside_memory(name, "conv", spec, url, &s, &mem, &p));
    sluice_decision d, e;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 2, 1000, &d), 0);
        CHECK_EQ(sluice_store_acquire_at(mem, p, "k", 1, 2, 1000, &e), 0);
        CHECK(same(&d, &e));
    }
    CHECK(killed_at_step(url, "conv", spec, "k", later, 5)); /* it was converting */
    alarm(10);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 2, later + i, &d), 0);
        CHECK_EQ(sluice_store_acquire_at(mem, p, "k", 1, 2, later + i, &e), 0);
        CHECK(same(&d, &e));
    }
    alarm(0);
    CHECK_EQ(stats(s).allowed, stats(mem).allowed);
    sluice_store_close(s);
    sluice_store_close(mem);
    sluice_policy_free(p);
}
TEST(killed_while_converting_a_key_loses_nothing) {
    converting_loses_nothing("convert.shm", "token-bucket capacity=5 rate=999999937/1000ms",
                             1000 + (INT64_C(1) << 34));
    converting_loses_nothing("convert-fw.shm", "fixed-window limit=5 window=1ms", 1000 + (INT64_C(1) << 34));
    converting_loses_nothing("convert-sw.shm", "sliding-window limit=5 window=1ms", 1000 + (INT64_C(1) << 32));
}

/* A sliding window converted while its previous window still weighs: the
 * key is added at 1000 (window 100 of 10 ms), fills 3 of 5 in window
 * 100 + 2^32 - 1 (its word's last), then is admitted 4 ms into the next
 * window, which outgrows the word: the converted state must carry the 3
 * (weighing 6/10), with the conversion finished here or by a process
 * killed in its middle. */
static void converting_keeps_counts(const char *name, const char *spec, int64_t t0, int64_t t1, int kill) {
    char url[400];
    sluice_store *s, *mem;
    sluice_policy *p;
    REQUIRE(open_beside_memory(name, "keep", spec, url, &s, &mem, &p));
    sluice_decision d, e;
    int64_t at[2] = {1000, t0};
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 3, at[i], &d), 0);
        CHECK_EQ(sluice_store_acquire_at(mem, p, "k", 1, 3, at[i], &e), 0);
        CHECK(d.allowed && same(&d, &e));
    }
    if (kill) CHECK(killed_at_step(url, "keep", spec, "k", t1, 5));
    alarm(10);
    long allowed = 0;
    for (int i = 0; i < 6; i++) {
        CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, t1 + i, &d), 0);
        CHECK_EQ(sluice_store_acquire_at(mem, p, "k", 1, 1, t1 + i, &e), 0);
        allowed += e.allowed;
        if (!same(&d, &e)) {
            fprintf(stderr, "%s at %lld:\n", spec, (long long)(t1 + i));
            print_decision("shm", &d);
            print_decision("memory", &e);
            CHECK(0);
        }
    }
    alarm(0);
    CHECK(allowed < 6); /* the carried count denied some */
    CHECK_EQ(stats(s).allowed, stats(mem).allowed);
    sluice_store_close(s);
    sluice_store_close(mem);
    sluice_policy_free(p);
}
TEST(converting_a_sliding_window_keeps_its_previous_count) {
    int64_t A = 100 + (INT64_C(1) << 32) - 1;
    converting_keeps_counts("keep-0.shm", "sliding-window limit=5 window=10ms", A * 10 + 3, (A + 1) * 10 + 4, 0);
    converting_keeps_counts("keep-1.shm", "sliding-window limit=5 window=10ms", A * 10 + 3, (A + 1) * 10 + 4, 1);
}

/* Decides on random keys of three policies, forever, checking every
 * decision's fields; a decision that is wrong in itself (a torn state
 * would give one) ends the process with status 7. */
static void sane_worker(const char *url, uint64_t seed) {
    sluice_store *s = open_url(url);
    sluice_policy *pol[3] = {policy("sane-a", "sliding-log limit=10 window=1h; token-bucket capacity=100 rate=1/h"),
                             policy("sane-b", "fixed-window limit=5 window=1h"),
                             policy("sane-c", "token-bucket capacity=7 rate=1/h")}; /* b, c: FAST keys */
    if (!s || !pol[0] || !pol[1] || !pol[2]) _exit(3);
    char kb[16];
    for (;;) {
        int w = (int)(check_rand_(&seed) % 3), k = (int)(check_rand_(&seed) % 40);
        int kn = snprintf(kb, sizeof kb, "sane-%d", k);
        sluice_decision d;
        int rc = sluice_store_acquire_at(s, pol[w], kb, (size_t)kn, 1, 5000, &d);
        int64_t limit = w == 2 ? 7 : w ? 5 : d.part == 0 ? 10 : 100;
        int ok = rc == 0 && d.limit == limit && d.remaining >= 0 && d.remaining < limit + !d.allowed &&
                 (d.allowed ? d.retry_after_ms == 0 && d.remaining <= limit - 1 : d.retry_after_ms > 0);
        if (!ok) {
            fprintf(stderr, "sane worker %d: policy %d key %d: rc %d allowed %d limit %lld remaining %lld retry %lld\n",
                    (int)getpid(), w, k, rc, d.allowed, (long long)d.limit, (long long)d.remaining,
                    (long long)d.retry_after_ms);
            _exit(7);
        }
    }
}

/* A table far too small for its keys (120 pairs in 16 slots: every new
 * key evicts one, often one with an admission under way), workers stopped
 * and continued and killed at random: every decision stays sane, nobody
 * waits long, and the table keeps working. */
TEST(evictions_stops_and_kills_stay_sane) {
    char path[256], url[400];
    tmp_path(path, sizeof path, "sane.shm");
    shm_url(url, sizeof url, path, "max_keys=16&state_bytes=304");
    sluice_store *s0 = open_url(url);
    REQUIRE(s0);
    sluice_store_close(s0);
    enum { W = 4 };
    pid_t w[W];
    uint64_t rs = 99;
    for (int i = 0; i < W; i++) {
        fflush(NULL);
        if ((w[i] = fork()) == 0) sane_worker(url, (uint64_t)i + 1);
        REQUIRE(w[i] > 0);
    }
    int64_t start = mono_ms(), duration = (int64_t)(1500 * (SANITIZED ? 1.0 : scale()));
    long stops = 0, kills = 0, died = 0;
    while (mono_ms() - start < duration) {
        usleep((useconds_t)check_range_(&rs, 200, 3000));
        int v = (int)check_range_(&rs, 0, W - 1), status = 0;
        if (waitpid(w[v], &status, WNOHANG) == w[v]) { /* it ended by itself: insane */
            died++;
            fprintf(stderr, "worker %d ended with status %d\n", (int)w[v], WIFEXITED(status) ? WEXITSTATUS(status) : -1);
        } else if (check_range_(&rs, 0, 3) > 0) {
            kill(w[v], SIGSTOP);
            usleep((useconds_t)check_range_(&rs, 0, 5000));
            kill(w[v], SIGCONT);
            stops++;
            continue;
        } else {
            kill(w[v], SIGKILL);
            waitpid(w[v], NULL, 0);
            kills++;
        }
        fflush(NULL);
        if ((w[v] = fork()) == 0) sane_worker(url, check_rand_(&rs));
        REQUIRE(w[v] > 0);
    }
    for (int i = 0; i < W; i++) {
        int status = 0;
        if (waitpid(w[i], &status, WNOHANG) == w[i]) died++;
        kill(w[i], SIGKILL);
        waitpid(w[i], NULL, 0);
    }
    CHECK_EQ(died, 0);
    /* afterwards: prompt, sane, bounded */
    sluice_store *s = open_url(url);
    sluice_policy *p = policy("sane-b", "fixed-window limit=5 window=1h");
    REQUIRE(s && p);
    alarm(10);
    for (int k = 0; k < 40; k++) {
        char kb[16];
        int kn = snprintf(kb, sizeof kb, "sane-%d", k);
        sluice_decision d;
        CHECK_EQ(sluice_store_acquire_at(s, p, kb, (size_t)kn, 1, 5000, &d), 0);
        CHECK(d.remaining >= 0 && d.remaining < 5 + !d.allowed);
    }
    alarm(0);
    sluice_stats st = stats(s);
    CHECK(st.keys <= 16 && st.evicted > 1000);
    printf("     %ld stops, %ld kills; %lld evictions, %lld allowed, %lld denied\n", stops, kills,
           (long long)st.evicted, (long long)st.allowed, (long long)st.denied);
    sluice_store_close(s);
    sluice_policy_free(p);
}

/* ---- another user, a full filesystem, damage ---- */

/* A child that holds an flock on path until it is killed: as uid 65534,
 * creating path 0666 for all (as_nobody), or as we are, opening it. Its
 * pid once it holds the lock, or -1. */
static pid_t flock_holder(const char *path, int as_nobody) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        if (as_nobody && (setgid(65534) != 0 || setuid(65534) != 0)) _exit(1);
        umask(0);
        int fd = as_nobody ? open(path, O_RDWR | O_CREAT | O_EXCL, 0666) : open(path, O_RDWR);
        if (fd < 0 || flock(fd, LOCK_EX) != 0) _exit(2);
        write_all(fds[1], "x", 1);
        for (;;) pause();
    }
    close(fds[1]);
    char c;
    int held = pid > 0 && read_all(fds[0], &c, 1) == 0;
    close(fds[0]);
    if (!held && pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    return held ? pid : -1;
}

/* BUG: another user pre-created the file (0666) and held an flock on it:
 * the open blocked forever on the set-up lock before it checked the file's
 * owner. Ownership and mode come first: refused at once, no lock taken. */
TEST(another_users_locked_file_is_refused_at_once) {
    if (geteuid() != 0) {
        printf("     (skipped: needs root, to act as another user)\n");
        return;
    }
    /* a sticky world-writable directory, as /tmp is (not in the test's
     * own directory, which others may not enter) */
    char dir[256] = "/tmp/sluice-sticky-XXXXXX", path[300];
    REQUIRE(mkdtemp(dir) != NULL);
    REQUIRE(chmod(dir, 01777) == 0);
    snprintf(path, sizeof path, "%s/taken.shm", dir);
    pid_t other = flock_holder(path, 1); /* nobody: the file, open to all, locked */
    REQUIRE(other > 0);
    char url[400];
    shm_url(url, sizeof url, path, "");
    open_report rep;
    int64_t t0 = mono_ms();
    int sig = open_in_child(url, &rep);
    int64_t took = elapsed_ms_since(t0);
    kill(other, SIGKILL);
    waitpid(other, NULL, 0);
    if (sig) fprintf(stderr, "the open ended by signal %d (%s) after %lld ms\n", sig, strsignal(sig), (long long)took);
    CHECK_EQ(sig, 0);
    CHECK_EQ(rep.rc, SLUICE_EINVAL);
    if (!strstr(rep.err, "uid 65534")) fprintf(stderr, "message: %s\n", rep.err);
    CHECK(strstr(rep.err, "uid 65534") != NULL);
    CHECK(took < 1000);
    struct stat st;
    CHECK(stat(path, &st) == 0 && st.st_uid == 65534 && st.st_size == 0); /* untouched */
    unlink(path);
    rmdir(dir);
}

/* BUG: the set-up lock was waited for without end: a process of ours
 * stopped (or hung) while holding it blocked every later open. The wait is
 * bounded: SLUICE_ETIMEDOUT, saying so. */
TEST(set_up_lock_wait_is_bounded) {
    char path[256], url[400];
    tmp_path(path, sizeof path, "held.shm");
    make_valid(path);
    shm_url(url, sizeof url, path, "");
    pid_t holder = flock_holder(path, 0);
    REQUIRE(holder > 0);
    open_report rep;
    int64_t t0 = mono_ms();
    int sig = open_in_child(url, &rep);
    int64_t took = elapsed_ms_since(t0);
    kill(holder, SIGKILL);
    waitpid(holder, NULL, 0);
    CHECK_EQ(sig, 0);
    CHECK_EQ(rep.rc, SLUICE_ETIMEDOUT);
    if (!strstr(rep.err, "locked")) fprintf(stderr, "message: %s\n", rep.err);
    CHECK(strstr(rep.err, "locked") != NULL);
    CHECK(took >= 1000 && took < 15000);
    /* once it is given back, the file opens as it was */
    CHECK_EQ(open_in_child(url, &rep), 0);
    CHECK_EQ(rep.rc, 0);
    CHECK_EQ(rep.st.keys, 1);
}

/* Mounts a tmpfs of size_kb at a new directory of the test's: 0, or -1
 * (not root, or no mount). */
static int small_tmpfs(const char *name, int size_kb, char dir[256]) {
    snprintf(dir, 256, "%s/%s", tmp(), name);
    if (geteuid() != 0 || mkdir(dir, 0700) != 0) return -1;
    char opts[64];
    snprintf(opts, sizeof opts, "size=%dk,mode=0700", size_kb);
    if (mount("sluice-test", dir, "tmpfs", 0, opts) != 0) {
        rmdir(dir);
        return -1;
    }
    return 0;
}

static void small_tmpfs_remove(const char *dir) {
    umount2(dir, MNT_DETACH);
    rmdir(dir);
}

/* BUG: on a tmpfs smaller than the file, a process adding keys died of
 * SIGBUS once the filesystem had no pages for them (and stats did too);
 * max_keys=1000000000 silently made a 1.3 TB sparse file. A file larger
 * than its filesystem is refused when it is made; a key whose pages the
 * filesystem cannot give is SLUICE_ENOMEM, saying the filesystem is full;
 * the keys held go on being decided. */
TEST(full_filesystem_is_an_error_not_a_signal) {
    char dir[256];
    if (small_tmpfs("small-fs", 1024, dir) != 0) {
        printf("     (skipped: needs root, to mount a small tmpfs)\n");
        return;
    }
    char path[320], url[400];
    snprintf(path, sizeof path, "%s/huge.shm", dir);
    shm_url(url, sizeof url, path, "max_keys=1000000000");
    open_report rep;
    CHECK_EQ(open_in_child(url, &rep), 0);
    CHECK_EQ(rep.rc, SLUICE_EINVAL);
    if (!strstr(rep.err, "filesystem")) fprintf(stderr, "message: %s\n", rep.err);
    CHECK(strstr(rep.err, "filesystem") != NULL);
    struct stat st;
    CHECK(stat(path, &st) != 0 || st.st_size <= 4096);
    unlink(path);
    /* a file that fits the filesystem, on a filesystem mostly taken */
    char filler[320];
    snprintf(filler, sizeof filler, "%s/filler", dir);
    static uint8_t junk[640 << 10];
    memset(junk, 1, sizeof junk);
    REQUIRE(spit(filler, junk, sizeof junk, 0600) == 0);
    snprintf(path, sizeof path, "%s/fits.shm", dir);
    shm_url(url, sizeof url, path, "max_keys=512&overflow_bytes=0"); /* 32 buckets of 20 KiB slots */
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        sluice_store *s = open_url(url);
        sluice_policy *p = policy("fs", "fixed-window limit=2 window=1h");
        if (!s || !p) _exit(10);
        char kb[16];
        sluice_decision d;
        int i, rc = 0;
        for (i = 0; i < 512 && rc == 0; i++) {
            int n = snprintf(kb, sizeof kb, "key-%d", i);
            rc = sluice_store_acquire_at(s, p, kb, (size_t)n, 1, 0, &d);
        }
        if (rc != SLUICE_ENOMEM || !strstr(sluice_store_errmsg(s), "full")) {
            fprintf(stderr, "after %d keys: %s (%s)\n", i, sluice_err_name(rc), sluice_store_errmsg(s));
            _exit(11);
        }
        /* the keys it holds are decided; stats answers */
        if (sluice_store_acquire_at(s, p, "key-0", 5, 1, 0, &d) != 0 || !d.allowed || d.remaining != 0) _exit(12);
        sluice_stats ss;
        if (sluice_store_stats(s, &ss) != 0 || ss.keys != i - 1) _exit(13);
        _exit(0);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) fprintf(stderr, "killed by signal %d (%s)\n", WTERMSIG(status), strsignal(WTERMSIG(status)));
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    unlink(path);
    unlink(filler);
    small_tmpfs_remove(dir);
}

/* One trial of the bit flips: in a child, one bit of the file at off
 * flipped, then every key decided again at the reading they are all at
 * their limit at; admitted[k] gets what key k admitted (-1: an error). */
enum { FLIP_KEYS = 18 };
static const char *const flip_specs[] = {
    "token-bucket capacity=3 rate=1/h",                                  /* FAST */
    "fixed-window limit=3 window=1h",                                    /* FAST */
    "sliding-window limit=3 window=1h",                                  /* FAST */
    "sliding-window limit=100000 window=1h",                             /* general, in its slot */
    "token-bucket capacity=3 rate=1/h; fixed-window limit=4 window=1h",  /* general, in its slot */
    "sliding-log limit=3 window=1h",                                     /* general, in an overflow block */
};
#define FLIP_SPECS (sizeof flip_specs / sizeof flip_specs[0])

static int flip_trial(const char *url, const char *path, off_t off, int bit, long admitted[FLIP_KEYS]) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        alarm(10); /* a decision that never returns ends it here */
        int fd = open(path, O_RDWR);
        uint8_t b;
        if (fd < 0 || pread(fd, &b, 1, off) != 1) _exit(20);
        b ^= (uint8_t)(1u << bit);
        if (pwrite(fd, &b, 1, off) != 1) _exit(21);
        close(fd);
        sluice_store *s = open_url(url);
        long got[FLIP_KEYS];
        for (int k = 0; k < FLIP_KEYS; k++) got[k] = -2;
        if (s) {
            for (int k = 0; k < FLIP_KEYS; k++) {
                sluice_policy *p = policy("flip", flip_specs[k % FLIP_SPECS]);
                char kb[16];
                int n = snprintf(kb, sizeof kb, "flip-%d", k);
                got[k] = 0;
                for (int i = 0; i < 3; i++) {
                    sluice_decision d;
                    int rc = sluice_store_acquire_at(s, p, kb, (size_t)n, 1, 1000, &d);
                    if (rc) got[k] = -1;
                    else if (d.allowed && got[k] >= 0) got[k]++;
                }
                sluice_policy_free(p);
            }
            sluice_stats st;
            sluice_store_stats(s, &st);
            sluice_store_close(s);
        }
        write_all(fds[1], got, sizeof got);
        _exit(0);
    }
    close(fds[1]);
    int r = read_all(fds[0], admitted, FLIP_KEYS * sizeof(long));
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) return WTERMSIG(status);
    return r == 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0 ? 0 : -1;
}

/* Whether a flipped bit at file offset off, in a slot or an overflow
 * block, is in a field the format can tell is damaged (shm.c, top): a
 * control word, a change word, an overflow field, a version word of a
 * state copy, a block's head. Elsewhere (a key's bytes, its fingerprint,
 * a FAST word, a value word, a tag, a time) a flip is another valid
 * content. */
static int told(const shm_geometry *g, uint64_t off) {
    uint64_t slots_end = g->slots_off + g->buckets * g->spb * (uint64_t)g->slot_bytes;
    if (off >= g->slots_off && off < slots_end) {
        uint64_t in = (off - g->slots_off) % g->slot_bytes, tail = shm_tail_off(g->key_bytes);
        if (in >= 8 && in < 16) return 1;                      /* control */
        if (in >= tail && in < tail + 16) return 1;            /* change */
        if (in >= tail + 24 && in < tail + 32) return 1;       /* overflow */
        if (in >= tail + 32) return (in - tail - 32) % 16 >= 8; /* a copy word's version */
        return 0;
    }
    if (off >= g->overflow_off + SHM_OVERFLOW_HEAD) {
        uint64_t in = (off - g->overflow_off - SHM_OVERFLOW_HEAD) % 16384; /* the log's blocks: 16 KiB */
        if (in < 16) return 1;                                 /* class, owner */
        if (in >= SHM_BLOCK_HEAD) return (in - SHM_BLOCK_HEAD) % 16 >= 8;
    }
    return 0;
}

/* BUG: one flipped bit in a slot could hang every decision on its key (a
 * version bit of a control or state word), read out of bounds (a FAST
 * flag on a sliding log), or admit past the limit (a FAST flag on a
 * composite: only part 0 decided); random flips past the header hung
 * about one trial in six. Now no flip hangs or crashes a process, and no
 * flip the format can tell admits anything past the limit: such a key
 * gets SLUICE_ESTORE instead. */
typedef struct {
    long trials, hangs, crashes, over, told, damaged;
} flip_tally;

/* One flip of bit at off in a copy of path, tallied. */
static void flip_one(const char *path, const char *copy, const char *copy_url, const shm_geometry *g, uint64_t off,
                     int bit, flip_tally *t) {
    unlink(copy);
    if (copy_file(path, copy) != 0) {
        t->crashes++;
        return;
    }
    long admitted[FLIP_KEYS];
    int sig = flip_trial(copy_url, copy, (off_t)off, bit, admitted);
    t->trials++;
    if (sig) {
        if (sig == SIGALRM) t->hangs++;
        else t->crashes++;
        fprintf(stderr, "flip at %llu bit %d: %s\n", (unsigned long long)off, bit, sig > 0 ? strsignal(sig) : "failed");
        return;
    }
    int is_told = told(g, off);
    t->told += is_told;
    for (int k = 0; k < FLIP_KEYS; k++) {
        t->damaged += admitted[k] == -1;
        if (admitted[k] > 0 && is_told) {
            t->over++;
            fprintf(stderr, "flip at %llu bit %d (told): key %d (%s) admitted %ld past its limit\n",
                    (unsigned long long)off, bit, k, flip_specs[k % FLIP_SPECS], admitted[k]);
        }
    }
}

/* BUG: one flipped bit in a slot could hang every decision on its key (a
 * version bit of a control or state word), read out of bounds (a FAST
 * flag on a sliding log), or admit past the limit (a FAST flag on a
 * composite: only part 0 decided); random flips past the header hung
 * about one trial in six. Now no flip hangs or crashes a process, and no
 * flip the format can tell admits anything past the limit: such a key
 * gets SLUICE_ESTORE instead. Random flips over everything in use, then
 * every flag and the low version bits of each key's control word. */
TEST(bit_flips_never_hang_crash_or_over_admit) {
    char path[256], url[400], copy[300], copy_url[400];
    tmp_path(path, sizeof path, "flips.shm");
    snprintf(copy, sizeof copy, "%s.trial", path);
    shm_url(url, sizeof url, path, "max_keys=64&state_bytes=64&overflow_bytes=65536");
    shm_url(copy_url, sizeof copy_url, copy, "");
    sluice_store *s = open_url(url);
    REQUIRE(s);
    for (int k = 0; k < FLIP_KEYS; k++) { /* every key at its limit at 1000 */
        sluice_policy *p = policy("flip", flip_specs[k % FLIP_SPECS]);
        char kb[16];
        int n = snprintf(kb, sizeof kb, "flip-%d", k);
        sluice_decision d;
        CHECK_EQ(sluice_store_acquire_at(s, p, kb, (size_t)n, sluice_policy_max_cost(p), 1000, &d), 0);
        CHECK(d.allowed);
        CHECK_EQ(sluice_store_acquire_at(s, p, kb, (size_t)n, 1, 1000, &d), 0);
        CHECK(!d.allowed);
        sluice_policy_free(p);
    }
    sluice_store_close(s);
    shm_geometry g = file_geometry(path);
    /* the bytes in use: bucket 0's head, the keys' slots (the first ones
     * of its 64), the blocks given */
    uint64_t ranges[3][2] = {{g.heads_off, g.heads_off + g.head_bytes},
                             {g.slots_off, g.slots_off + FLIP_KEYS * (uint64_t)g.slot_bytes},
                             {g.overflow_off, g.overflow_off + SHM_OVERFLOW_HEAD + 3 * 16384}};
    uint64_t total = 0;
    for (int r = 0; r < 3; r++) total += ranges[r][1] - ranges[r][0];
    flip_tally t = {0};
    long trials = (long)(500 * scale()) + 30;
    uint64_t rs = 77;
    for (long i = 0; i < trials; i++) {
        uint64_t x = (uint64_t)check_range_(&rs, 0, (int64_t)total - 1), off = 0;
        for (int r = 0; r < 3; r++) {
            uint64_t len = ranges[r][1] - ranges[r][0];
            if (x < len) {
                off = ranges[r][0] + x;
                break;
            }
            x -= len;
        }
        flip_one(path, copy, copy_url, &g, off, (int)check_range_(&rs, 0, 7), &t);
    }
    long random_damaged = t.damaged;
    /* every key's control word: LIVE, FAST, the version's low six bits */
    for (int k = 0; k < FLIP_KEYS; k++)
        for (int bit = 0; bit < 8; bit++)
            flip_one(path, copy, copy_url, &g, g.slots_off + (uint64_t)k * g.slot_bytes + 8, bit, &t);
    unlink(copy);
    CHECK_EQ(t.hangs, 0);
    CHECK_EQ(t.crashes, 0);
    CHECK_EQ(t.over, 0);
    CHECK(t.told > trials / 10);        /* the told fields were hit */
    CHECK(t.damaged > random_damaged); /* and some said so */
    printf("     %ld flips (%ld in fields the format tells), %ld keys answered damaged\n", t.trials, t.told,
           t.damaged);
}

/* BUG: a slot copy written without its version check passed the suite in
 * most runs (caught in 2 of 7): it needs a writer that wakes up late just
 * when its copy is the current one again. Made so here: a process stopped
 * after installing its change (step 1), two admissions by another (the
 * first finishes the stopped one's), so that the current copy is the one
 * the stopped process writes when it goes on: it must change nothing. */
TEST(late_writer_changes_nothing) {
    const char *spec = "token-bucket capacity=100 rate=1/h; sliding-log limit=10 window=1h";
    char path[256], url[400];
    sluice_store *s = open_fresh("late.shm", "max_keys=16&state_bytes=64", path, url);
    sluice_policy *p = policy("late", spec);
    REQUIRE(s && p);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1000, &d), 0);
    fflush(NULL);
    pid_t a = fork();
    REQUIRE(a >= 0);
    if (a == 0) {
        sluice_store *sa = open_url(url);
        sluice_policy *pa = policy("late", spec);
        stop_at_step = 1;
        sluice__shm_step_hook = stop_here;
        int rc = sa && pa ? sluice_store_acquire_at(sa, pa, "k", 1, 1, 1001, &d) : -1;
        _exit(rc == 0 && d.allowed ? 0 : 1);
    }
    int status = 0;
    REQUIRE(waitpid(a, &status, WUNTRACED) == a && WIFSTOPPED(status));
    alarm(10);
    for (int i = 0; i < 2; i++) {
        CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1002 + i, &d), 0);
        CHECK(d.allowed);
    }
    kill(a, SIGCONT);
    REQUIRE(waitpid(a, &status, 0) == a);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    int rc = sluice_store_acquire_at(s, p, "k", 1, 1, 1004, &d);
    if (rc) fprintf(stderr, "after the late writer: %s\n", sluice_store_errmsg(s));
    CHECK_EQ(rc, 0);
    CHECK(rc || (d.allowed && d.remaining == 10 - 5));
    alarm(0);
    sluice_store_close(s);
    sluice_policy_free(p);
}

TEST_MAIN(killed_while_giving_a_block_leaks_nothing, processes_race_one_fresh_key,
          processes_over_many_keys_never_over_admit, processes_times_threads_on_one_key,
          lagging_process_decides_at_store_time, lagging_process_gets_no_extra_capacity_racing,
          crashes_leave_a_working_consistent_table, lock_of_dead_owner_is_taken_over,
          lock_of_unreaped_dead_owner_is_taken_over, lock_of_a_live_process_without_main_thread_is_kept,
          unreadable_boot_id_resets_nothing, fork_after_open_then_crash_does_not_deadlock,
          stopped_process_blocks_nobody, evictions_stops_and_kills_stay_sane,
          killed_while_adding_a_key_leaves_no_state_behind, killed_while_converting_a_key_loses_nothing,
          converting_a_sliding_window_keeps_its_previous_count, another_users_locked_file_is_refused_at_once,
          set_up_lock_wait_is_bounded, full_filesystem_is_an_error_not_a_signal,
          bit_flips_never_hang_crash_or_over_admit, late_writer_changes_nothing)
