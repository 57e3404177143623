/* test_store_async.c: the non-blocking calls (sluice_store_*_async) and
 * the loop interface, without a loop library.
 *  - memory: and shm: complete before the call returns, exactly once, with
 *    what the blocking call returns (random traces of every verb against
 *    a twin store, errors included); argument errors are returned and the
 *    callback never runs; a loop attached to them is never used.
 *  - the store side of the loop interface: checking the loop struct, one
 *    loop at a time, a remote kind refused without a loop, the loop's
 *    calls on a store with none.
 *  - the scenarios of loop_scenarios.h on the fake remote kind through a
 *    small poll() loop written here (the adapters run them on libuv and
 *    libevent: test_loop_uv, test_loop_event).
 *  - Redis (when libsluice-redis is built): it needs a loop, and takes
 *    one (test_redis_async runs it on real servers). */
#define _GNU_SOURCE
#include "loop_poll.h"

TEST(poll_completes_later) { scenario_completes_later(&poll_loop); }
TEST(poll_pipelined_burst) { scenario_pipelined_burst(&poll_loop); }
TEST(poll_timeouts_rearm) { scenario_timeouts_rearm(&poll_loop); }
TEST(poll_next_turn) { scenario_next_turn(&poll_loop); }
TEST(poll_detach_cancels) { scenario_detach_cancels(&poll_loop); }
TEST(poll_chained_calls) { scenario_chained_calls(&poll_loop); }
TEST(poll_watch_refused) { scenario_watch_refused(&poll_loop); }

/* ---- memory: and shm: complete before returning ---- */

/* A loop that counts what a store asked of it (memory: and shm: ask nothing). */
static long counting_calls, counting_detached;
static int counting_watch(void *user, int fd, int events) {
    (void)user, (void)fd, (void)events;
    counting_calls++;
    return 0;
}
static void counting_timer(void *user, int64_t ms) {
    (void)user, (void)ms;
    counting_calls++;
}
static void counting_gone(void *user) {
    (void)user;
    counting_detached++;
}
static sluice_loop counting_loop(void) {
    sluice_loop l = SLUICE_LOOP_INIT;
    l.watch = counting_watch;
    l.timer = counting_timer;
    l.detached = counting_gone;
    return l;
}

/* Random traces of every verb (errors among them: a full store, a refund
 * of a key never seen) on store a through the non-blocking calls and on its
 * twin b through the blocking ones, at the same readings: each callback
 * runs once, before the call returns, with b's result and decision (all 0
 * on an error, and the message of the error within the callback). */
typedef struct {
    int calls, rc;
    sluice_decision d;
    char msg[160];
    sluice_store *s;
} inline_rec;

static void inline_cb(void *user, int rc, const sluice_decision *d) {
    inline_rec *r = user;
    CHECK(d != NULL);
    r->calls++;
    r->rc = rc;
    if (d) r->d = *d;
    snprintf(r->msg, sizeof r->msg, "%s", sluice_store_errmsg(r->s));
}

static void inline_trace(const char *url, const char *twin_url, uint64_t seed) {
    sluice_clock *ca = sluice_clock_manual_new(1000), *cb = sluice_clock_manual_new(1000);
    sluice_store *a = open_store(url, ca), *b = open_store(twin_url, cb);
    REQUIRE(a && b);
    sluice_loop loop = counting_loop();
    if (seed & 1) CHECK_EQ(sluice_store_attach_loop(a, &loop), 0); /* attached or not: the same */
    static const char *const spec[] = {STORE_TEST_SPECS STORE_TEST_SHADOW_SPECS};
    enum { SPECS = sizeof spec / sizeof spec[0] };
    sluice_policy *pol[SPECS];
    for (size_t i = 0; i < SPECS; i++) pol[i] = policy_i(i, spec[i]);
    uint64_t rs = seed;
    long steps = scaled(6000), differences = 0, errors = 0;
    for (long i = 0; i < steps; i++) {
        int64_t dt = check_range_(&rs, 0, 4);
        sluice_clock_manual_advance(ca, dt);
        sluice_clock_manual_advance(cb, dt);
        const sluice_policy *p = pol[check_range_(&rs, 0, SPECS - 1)];
        char key[8];
        int klen = snprintf(key, sizeof key, "k%d", (int)check_range_(&rs, 0, 40));
        int verb = (int)check_range_(&rs, 0, 9);
        verb = verb < 6 ? TRACE_ACQUIRE : verb - 5 > TRACE_RESET ? TRACE_ACQUIRE : verb - 5;
        int64_t cost = check_range_(&rs, 1, 3);
        if (cost > sluice_policy_max_cost(p)) cost = 1;
        inline_rec r;
        memset(&r, 0, sizeof r);
        r.s = a;
        int rc;
        switch (verb) {
        case TRACE_PEEK: rc = sluice_store_peek_async(a, p, key, (size_t)klen, cost, inline_cb, &r); break;
        case TRACE_REFUND: rc = sluice_store_refund_async(a, p, key, (size_t)klen, cost, inline_cb, &r); break;
        case TRACE_RESET: rc = sluice_store_reset_async(a, p, key, (size_t)klen, inline_cb, &r); break;
        default: rc = sluice_store_acquire_async(a, p, key, (size_t)klen, cost, inline_cb, &r);
        }
        sluice_decision want;
        int want_rc = verb_blocking(b, p, key, verb, cost, sluice_clock_now_ms(cb), &want);
        errors += want_rc < 0;
        if (rc != 0 || r.calls != 1 || r.rc != want_rc || !same(&r.d, &want) || (want_rc < 0 && !all_zero(&r.d)) ||
            (want_rc < 0 && !r.msg[0])) {
            if (differences++ < 3) {
                fprintf(stderr, "%s step %ld (%s %s cost %lld, %s): returned %d, %d calls, rc %d (want %d) \"%s\"\n",
                        url, i, verb_name(verb), key, (long long)cost, sluice_policy_name(p), rc, r.calls, r.rc,
                        want_rc, r.msg);
                print_decision("async", &r.d);
                print_decision("blocking", &want);
            }
        }
    }
    CHECK_EQ(differences, 0);
    CHECK_EQ(counting_calls, 0); /* the loop was never used */
    long detached_before = counting_detached;
    sluice_store_close(a); /* detaches the loop first */
    CHECK_EQ(counting_detached, detached_before + (seed & 1));
    sluice_store_close(b);
    for (size_t i = 0; i < SPECS; i++) sluice_policy_free(pol[i]);
    sluice_clock_free(ca);
    sluice_clock_free(cb);
    if (strstr(url, "refuse")) CHECK(errors > 0); /* the full store's errors were among them */
}

TEST(memory_completes_inline) {
    inline_trace("memory:", "memory:", 11);
    inline_trace("memory:", "memory:", 12);
    inline_trace("memory:?max_keys=20&on_full=refuse", "memory:?max_keys=20&on_full=refuse", 13);
}

static char shm_dir[] = "/tmp/sluice-async-XXXXXX";

TEST(shm_completes_inline) {
    REQUIRE(mkdtemp(shm_dir));
    char url[128], twin[128];
    /* small files: removing a large sparse one takes seconds on some filesystems */
    snprintf(url, sizeof url, "shm:%s/a.shm?max_keys=1000&overflow_bytes=1048576", shm_dir);
    snprintf(twin, sizeof twin, "shm:%s/a-twin.shm?max_keys=1000&overflow_bytes=1048576", shm_dir);
    inline_trace(url, twin, 21);
    snprintf(url, sizeof url, "shm:%s/b.shm?max_keys=16&on_full=refuse&overflow_bytes=1048576", shm_dir);
    snprintf(twin, sizeof twin, "shm:%s/b-twin.shm?max_keys=16&on_full=refuse&overflow_bytes=1048576", shm_dir);
    inline_trace(url, twin, 23);
    char cmd[160];
    snprintf(cmd, sizeof cmd, "rm -rf %s", shm_dir);
    CHECK_EQ(system(cmd), 0);
}

/* The blocking call's argument errors are returned, the callback never
 * runs, nothing changes. */
static void argument_errors(sluice_store *s, const char *what) {
    sluice_policy *p = policy("args", "token-bucket capacity=3 rate=1/s");
    REQUIRE(p);
    inline_rec r;
    memset(&r, 0, sizeof r);
    r.s = s;
    char big[SLUICE_KEY_MAX + 1];
    memset(big, 'k', sizeof big);
    struct {
        int rc, want;
        const char *msg;
    } cases[] = {
        {sluice_store_acquire_async(NULL, p, "k", 1, 1, inline_cb, &r), SLUICE_EINVAL, NULL},
        {sluice_store_acquire_async(s, p, "k", 1, 1, NULL, &r), SLUICE_EINVAL, "callback is NULL"},
        {sluice_store_acquire_async(s, NULL, "k", 1, 1, inline_cb, &r), SLUICE_EINVAL, "policy is NULL"},
        {sluice_store_acquire_async(s, p, NULL, 1, 1, inline_cb, &r), SLUICE_EINVAL, "key is NULL"},
        {sluice_store_acquire_async(s, p, "k", 0, 1, inline_cb, &r), SLUICE_EINVAL, "key of 0 bytes"},
        {sluice_store_acquire_async(s, p, big, sizeof big, 1, inline_cb, &r), SLUICE_EINVAL, "key of 513 bytes"},
        {sluice_store_acquire_async(s, p, "k", 1, 0, inline_cb, &r), SLUICE_ECOST, "cost 0 is outside 1..3"},
        {sluice_store_acquire_async(s, p, "k", 1, 4, inline_cb, &r), SLUICE_ECOST, "cost 4 is outside 1..3"},
        {sluice_store_peek_async(s, p, "k", 1, 0, inline_cb, &r), SLUICE_ECOST, "cost 0"},
        {sluice_store_peek_async(s, p, "k", 1, 1, NULL, &r), SLUICE_EINVAL, "callback is NULL"},
        {sluice_store_refund_async(s, p, "k", 1, 9, inline_cb, &r), SLUICE_ECOST, "cost 9"},
        {sluice_store_refund_async(s, p, "", 0, 1, inline_cb, &r), SLUICE_EINVAL, "key of 0 bytes"},
        {sluice_store_reset_async(s, NULL, "k", 1, inline_cb, &r), SLUICE_EINVAL, "policy is NULL"},
        {sluice_store_reset_async(s, p, "k", 1, NULL, &r), SLUICE_EINVAL, "callback is NULL"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (cases[i].rc != cases[i].want) {
            fprintf(stderr, "%s case %zu: %d, want %d\n", what, i, cases[i].rc, cases[i].want);
            CHECK(0);
        }
    }
    CHECK_EQ(r.calls, 0);
    /* the message of the last: each case's was in place right after its call */
    CHECK(strstr(sluice_store_errmsg(s), "callback is NULL") != NULL);
    sluice_stats st = stats(s);
    CHECK_EQ(st.allowed + st.denied, 0);
    CHECK_EQ(st.keys, 0);
    sluice_policy_free(p);
}

TEST(argument_errors_returned) {
    sluice_store *m = open_store("memory:", NULL);
    REQUIRE(m);
    argument_errors(m, "memory:");
    sluice_store_close(m);
    sluice_store *f = fake_open("fake:", NULL);
    REQUIRE(f);
    REQUIRE(pl_attach(f) == 0);
    argument_errors(f, "fake:");
    CHECK(pl_idle());
    sluice_store_close(f);
    /* the messages themselves, one by one */
    m = open_store("memory:", NULL);
    sluice_policy *p = policy("args", "token-bucket capacity=3 rate=1/s");
    REQUIRE(m && p);
    inline_rec r;
    memset(&r, 0, sizeof r);
    CHECK_EQ(sluice_store_acquire_async(m, p, "k", 0, 1, inline_cb, &r), SLUICE_EINVAL);
    CHECK_STR(sluice_store_errmsg(m), "key of 0 bytes: keys are 1..512 bytes");
    CHECK_EQ(sluice_store_acquire_async(m, p, "k", 1, 4, inline_cb, &r), SLUICE_ECOST);
    CHECK_STR(sluice_store_errmsg(m), "cost 4 is outside 1..3 (policy args)");
    CHECK_EQ(sluice_store_reset_async(m, p, "k", 1, NULL, &r), SLUICE_EINVAL);
    CHECK_STR(sluice_store_errmsg(m), "callback is NULL");
    CHECK_EQ(r.calls, 0);
    sluice_store_close(m);
    sluice_policy_free(p);
}

/* A refund and a reset hand back the decision a request of cost 1 gets
 * right after (the blocking calls' out, which may be NULL there). */
TEST(refund_and_reset_decisions) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_store *s = open_store("memory:", c);
    sluice_policy *p = policy("rr", "fixed-window limit=4 window=1m");
    REQUIRE(s && c && p);
    sluice_decision d;
    for (int i = 0; i < 3; i++) CHECK_EQ(sluice_store_acquire(s, p, "k", 1, 1, &d), 0);
    inline_rec r;
    memset(&r, 0, sizeof r);
    r.s = s;
    /* 1 of 4 left; 2 given back: a request of cost 1 would leave 2 */
    CHECK_EQ(sluice_store_refund_async(s, p, "k", 1, 2, inline_cb, &r), 0);
    CHECK_EQ(r.calls, 1);
    CHECK_EQ(r.rc, 0);
    CHECK(r.d.allowed);
    CHECK_EQ(r.d.remaining, 2);
    CHECK_EQ(sluice_store_reset_async(s, p, "k", 1, inline_cb, &r), 0);
    CHECK_EQ(r.calls, 2);
    CHECK_EQ(r.d.remaining, 3);
    CHECK_EQ(sluice_store_peek_async(s, p, "k", 1, 4, inline_cb, &r), 0);
    CHECK_EQ(r.calls, 3);
    CHECK(r.d.allowed);
    CHECK_EQ(r.d.remaining, 0);
    CHECK_EQ(sluice_store_peek_async(s, p, "k", 1, 1, inline_cb, &r), 0);
    CHECK_EQ(r.d.remaining, 3); /* a peek consumes nothing */
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_clock_free(c);
}

/* A callback that makes a call: with memory: it completes within. */
typedef struct {
    sluice_store *s;
    const sluice_policy *p;
    int depth, calls;
} nest_ctx;

static void nest_cb(void *user, int rc, const sluice_decision *d) {
    nest_ctx *n = user;
    CHECK_EQ(rc, 0);
    CHECK_EQ(d->remaining, 9 - n->calls);
    n->calls++;
    if (n->depth-- > 0) CHECK_EQ(sluice_store_acquire_async(n->s, n->p, "n", 1, 1, nest_cb, n), 0);
}

TEST(memory_callback_makes_calls) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_store *s = open_store("memory:", c);
    sluice_policy *p = policy("nest", "token-bucket capacity=10 rate=1/s");
    REQUIRE(s && p);
    nest_ctx n = {s, p, 4, 0};
    CHECK_EQ(sluice_store_acquire_async(s, p, "n", 1, 1, nest_cb, &n), 0);
    CHECK_EQ(n.calls, 5);
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_clock_free(c);
}

/* ---- the loop struct, and the loop's calls on any store ---- */

TEST(attach_checks_the_loop) {
    sluice_store *s = open_store("memory:", NULL);
    REQUIRE(s);
    sluice_loop loop = counting_loop();
    CHECK_EQ(sluice_store_attach_loop(NULL, &loop), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_attach_loop(s, NULL), SLUICE_EINVAL);
    CHECK_STR(sluice_store_errmsg(s), "loop is NULL");
    sluice_loop bad = loop;
    bad.size = 0;
    CHECK_EQ(sluice_store_attach_loop(s, &bad), SLUICE_EINVAL);
    CHECK_STR(sluice_store_errmsg(s), "loop.size is 0: set it with SLUICE_LOOP_INIT");
    bad = loop;
    bad.watch = NULL;
    CHECK_EQ(sluice_store_attach_loop(s, &bad), SLUICE_EINVAL);
    CHECK_STR(sluice_store_errmsg(s), "loop.watch is NULL");
    bad = loop;
    bad.timer = NULL;
    CHECK_EQ(sluice_store_attach_loop(s, &bad), SLUICE_EINVAL);
    CHECK_STR(sluice_store_errmsg(s), "loop.timer is NULL");
    /* an older, shorter struct (no detached hook) is taken */
    bad = loop;
    bad.size = offsetof(sluice_loop, detached);
    long before = counting_detached;
    CHECK_EQ(sluice_store_attach_loop(s, &bad), 0);
    CHECK_EQ(sluice_store_detach_loop(s), 0);
    CHECK_EQ(counting_detached, before); /* it had none */
    /* one loop at a time; detaching twice is nothing */
    CHECK_EQ(sluice_store_attach_loop(s, &loop), 0);
    CHECK_EQ(sluice_store_attach_loop(s, &loop), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(s), "a loop is attached already") != NULL);
    CHECK_EQ(sluice_store_detach_loop(s), 0);
    CHECK_EQ(counting_detached, before + 1);
    CHECK_EQ(sluice_store_detach_loop(s), 0);
    CHECK_EQ(counting_detached, before + 1);
    CHECK_EQ(sluice_store_detach_loop(NULL), SLUICE_EINVAL);
    /* the loop's calls on a store that watches nothing: nothing happens */
    CHECK_EQ(sluice_store_attach_loop(s, &loop), 0);
    sluice_store_loop_ready(s, 0, SLUICE_LOOP_READ);
    sluice_store_loop_timeout(s);
    sluice_store_loop_ready(NULL, 0, SLUICE_LOOP_READ);
    sluice_store_loop_timeout(NULL);
    CHECK_EQ(counting_calls, 0);
    sluice_store_close(s);
    CHECK_EQ(counting_detached, before + 2);
}

TEST(remote_needs_a_loop) {
    sluice_store *s = fake_open("fake:", NULL);
    sluice_policy *p = policy("remote", "token-bucket capacity=3 rate=1/s");
    REQUIRE(s && p);
    inline_rec r;
    memset(&r, 0, sizeof r);
    CHECK_EQ(sluice_store_acquire_async(s, p, "k", 1, 1, inline_cb, &r), SLUICE_EINVAL);
    CHECK_STR(sluice_store_errmsg(s), "fake: no loop attached: a remote store's non-blocking calls need "
                                      "sluice_store_attach_loop() first");
    CHECK_EQ(sluice_store_reset_async(s, p, "k", 1, inline_cb, &r), SLUICE_EINVAL);
    CHECK_EQ(r.calls, 0);
    /* the loop's calls without a loop: ignored */
    int cfd, sfd;
    fake_fds(s, &cfd, &sfd);
    sluice_store_loop_ready(s, cfd, SLUICE_LOOP_READ);
    sluice_store_loop_timeout(s);
    CHECK_EQ(fake_counts_of(s)->ready_read + fake_counts_of(s)->fires, 0);
    /* the blocking calls need none */
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire(s, p, "k", 1, 1, &d), 0);
    CHECK(d.allowed);
    sluice_store_close(s);
    sluice_policy_free(p);
}

/* libsluice-redis (when built) takes a loop: without one its non-blocking
 * calls are refused; with one a call completes once, never before it
 * returns, and closing the store completes a call still in flight (here
 * the loop never runs: the call is canceled, or, the server at port 1
 * refusing at once, fails as on_error=allow says). test_redis_async runs
 * it against real servers. No server is needed: opening does not connect. */
TEST(redis_takes_a_loop) {
    sluice_store *s = NULL;
    char err[512];
    int rc = sluice_store_open_err("redis://127.0.0.1:1", NULL, &s, err, sizeof err);
    if (rc != 0) {
        printf("     (redis://: %s: skipped)\n", err);
        CHECK(strstr(err, "libsluice-redis") != NULL);
        return;
    }
    sluice_policy *p = policy("r", "token-bucket capacity=3 rate=1/s");
    inline_rec r;
    memset(&r, 0, sizeof r);
    r.s = s;
    CHECK_EQ(sluice_store_acquire_async(s, p, "k", 1, 1, inline_cb, &r), SLUICE_EINVAL);
    CHECK_STR(sluice_store_errmsg(s), "redis: no loop attached: a remote store's non-blocking calls need "
                                      "sluice_store_attach_loop() first");
    CHECK_EQ(sluice_store_reset_async(s, p, "k", 1, inline_cb, &r), SLUICE_EINVAL);
    sluice_loop loop = counting_loop();
    CHECK_EQ(sluice_store_attach_loop(s, &loop), 0);
    CHECK_EQ(sluice_store_acquire_async(s, p, "k", 1, 1, inline_cb, &r), 0);
    CHECK_EQ(r.calls, 0);
    CHECK(counting_calls > 0); /* it asked the loop for something */
    long detached_before = counting_detached;
    sluice_store_close(s);
    CHECK_EQ(counting_detached, detached_before + 1);
    CHECK_EQ(r.calls, 1);
    CHECK(r.rc == SLUICE_ECANCELED || (r.rc == 0 && r.d.allowed && !r.d.enforced));
    counting_calls = 0;
    sluice_policy_free(p);
}

TEST_MAIN(memory_completes_inline, shm_completes_inline, argument_errors_returned, refund_and_reset_decisions,
          memory_callback_makes_calls, attach_checks_the_loop, remote_needs_a_loop, redis_takes_a_loop,
          poll_completes_later, poll_pipelined_burst, poll_timeouts_rearm, poll_next_turn, poll_detach_cancels,
          poll_chained_calls, poll_watch_refused)
