/* redis_async_scenarios.h: the Redis store's non-blocking calls against a
 * real redis-server (started by the test), through any loop, told as
 * scenarios beside loop_scenarios.h's (which a driver, test_loop, runs on
 * the fake remote kind): the test's poll() loop (test_redis_async),
 * libuv's adapter (test_redis_async_uv), libevent's
 * (test_redis_async_event).
 *  - a random trace of every verb, in bursts of up to 48 calls in flight,
 *    gives what the blocking store gives (a second handle, clock=client,
 *    the same readings), each callback once, never before the call
 *    returns, in the order made;
 *  - a burst of 2000 long-keyed calls made before the loop runs: one
 *    connection, every call in order, as the blocking store decides;
 *  - SCRIPT FLUSH between bursts: reloaded, the same decisions;
 *  - a policy's configuration changing between bursts, sliding-log parts
 *    coming and going (the script's second round trip): the same;
 *  - a server that stops answering (SIGSTOP): every call in flight gets
 *    on_error's decision (deny) or its error (SLUICE_ESTORE) once, by
 *    timeout_ms; a killed server the same at once; each store is back by
 *    itself once the server is;
 *  - detach and close with calls in flight: SLUICE_ECANCELED once each,
 *    calls from those callbacks refused, nothing left in the loop;
 *  - callbacks that make calls; a database other than 0 (SELECT first). */
#ifndef SLUICE_TEST_REDIS_ASYNC_SCENARIOS_H
#define SLUICE_TEST_REDIS_ASYNC_SCENARIOS_H

#include "loop_scenarios.h"
#include "redis_server.h"

/* The one server of the test: started by the first scenario, stopped at exit. */
static rs_group ra_group_;
static int ra_server_ = -1;

static int ra_port(void) {
    if (ra_server_ < 0) {
        if (rs_group_open(&ra_group_) != 0 || (ra_server_ = rs_group_add(&ra_group_, 0)) < 0) {
            fprintf(stderr, "cannot start a redis-server\n");
            exit(1);
        }
    }
    return ra_group_.s[ra_server_].port;
}

static sluice_store *ra_open(const char *params, const sluice_clock *clock) {
    char url[320];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?%s", ra_port(), params);
    return open_store(url, clock);
}

/* ---- a trace through both handles ---- */

typedef struct {
    const sluice_policy *p;
    char key[420];
    int verb;
    int64_t cost;
} ra_step;

static void ra_key(char *key, size_t size, uint64_t *rs, int long_keys) {
    int k = (int)check_range_(rs, 0, 30);
    if (long_keys) {
        memset(key, 'x', 400);
        key[400] = 0;
        int n = snprintf(key, 16, "key-%05d", k);
        key[n] = 'x';
    } else {
        snprintf(key, size, "k%d", k);
    }
}

/* n calls made on a before the loop runs, then the same on b (blocking) at
 * the same reading: the differences (printed, at most 3). */
static long ra_burst(const test_loop *L, sluice_store *a, sluice_store *b, sluice_clock *cb, const ra_step *steps,
                     int n) {
    call_rec *recs = calloc((size_t)n, sizeof *recs);
    if (!recs) abort();
    long bad = 0;
    for (int i = 0; i < n; i++) {
        recs[i].s = a; /* its message kept */
        CHECK_EQ(verb_async(a, steps[i].p, steps[i].key, steps[i].verb, steps[i].cost, &recs[i]), 0);
        if (recs[i].calls) bad++; /* never before the call returns */
    }
    recs_ctx ctx = {recs, (size_t)n};
    CHECK(L->run_until(all_called, &ctx, 20000));
    for (int i = 0; i < n; i++) {
        sluice_decision want;
        int want_rc = verb_blocking(b, steps[i].p, steps[i].key, steps[i].verb, steps[i].cost, sluice_clock_now_ms(cb),
                                    &want);
        if (recs[i].calls != 1 || recs[i].rc != want_rc || !same(&recs[i].d, &want) ||
            recs[i].order != recs[0].order + i) {
            if (bad++ < 3) {
                fprintf(stderr, "%s: call %d (%s %.12s cost %lld, %s): %d calls, rc %d (want %d), order %d\n", L->name,
                        i, verb_name(steps[i].verb), steps[i].key, (long long)steps[i].cost,
                        sluice_policy_name(steps[i].p), recs[i].calls, recs[i].rc, want_rc,
                        recs[i].order - recs[0].order);
                if (recs[i].msg[0]) fprintf(stderr, "  \"%s\"\n", recs[i].msg);
                print_decision("async", &recs[i].d);
                print_decision("blocking", &want);
            }
        }
    }
    free(recs);
    return bad;
}

static int ra_verb(uint64_t *rs) {
    int v = (int)check_range_(rs, 0, 9);
    return v < 6 ? TRACE_ACQUIRE : v - 5 > TRACE_RESET ? TRACE_ACQUIRE : v - 5;
}

/* A random trace in bursts on base ("redis-cluster://..."; NULL: the
 * test's server); flush: SCRIPT FLUSH before every fourth; prepared(a):
 * called once the stores are open. */
static void ra_trace_on(const test_loop *L, const char *base, uint64_t seed, int flush, void (*prepared)(sluice_store *)) {
    sluice_clock *ca = sluice_clock_manual_new(1000000), *cb = sluice_clock_manual_new(1000000);
    char pa[96], pb[96], url[512];
    snprintf(pa, sizeof pa, "clock=client&timeout_ms=5000&prefix=a%llu:", (unsigned long long)seed);
    snprintf(pb, sizeof pb, "clock=client&timeout_ms=5000&prefix=b%llu:", (unsigned long long)seed);
    sluice_store *a, *b;
    if (base) {
        snprintf(url, sizeof url, "%s?%s", base, pa);
        a = open_store(url, ca);
        snprintf(url, sizeof url, "%s?%s", base, pb);
        b = open_store(url, cb);
    } else {
        a = ra_open(pa, ca), b = ra_open(pb, cb);
    }
    REQUIRE(a && b);
    if (prepared) prepared(a);
    REQUIRE(L->attach(a) == 0);
    static const char *const spec[] = {STORE_TEST_SPECS STORE_TEST_SHADOW_SPECS};
    enum { SPECS = sizeof spec / sizeof spec[0] };
    sluice_policy *pol[SPECS];
    for (size_t i = 0; i < SPECS; i++) pol[i] = policy_i(i, spec[i]);
    uint64_t rs = seed;
    ra_step steps[48];
    long bad = 0, calls = 0;
    int bursts = scaled(150);
    for (int burst = 0; burst < bursts; burst++) {
        int64_t dt = check_range_(&rs, 0, 40);
        sluice_clock_manual_advance(ca, dt);
        sluice_clock_manual_advance(cb, dt);
        if (flush && burst % 4 == 3) CHECK(rs_ok(ra_port(), "SCRIPT FLUSH"));
        if (flush && burst % 4 == 3 && prepared) prepared(a);
        int n = (int)check_range_(&rs, 1, 48);
        for (int i = 0; i < n; i++) {
            steps[i].p = pol[check_range_(&rs, 0, SPECS - 1)];
            ra_key(steps[i].key, sizeof steps[i].key, &rs, 0);
            steps[i].verb = ra_verb(&rs);
            steps[i].cost = check_range_(&rs, 1, 3);
            if (steps[i].cost > sluice_policy_max_cost(steps[i].p)) steps[i].cost = 1;
        }
        bad += ra_burst(L, a, b, cb, steps, n);
        calls += n;
    }
    CHECK_EQ(bad, 0);
    sluice_stats st = stats(a);
    CHECK_EQ(st.failures, 0);
    CHECK(st.allowed + st.denied > calls / 2);
    CHECK_EQ(L->detach(a), 0);
    CHECK(L->idle());
    sluice_store_close(a);
    sluice_store_close(b);
    for (size_t i = 0; i < SPECS; i++) sluice_policy_free(pol[i]);
    sluice_clock_free(ca);
    sluice_clock_free(cb);
}

static void ra_scenario_trace(const test_loop *L) { ra_trace_on(L, NULL, 41, 0, NULL); }
static void ra_scenario_script_flush(const test_loop *L) { ra_trace_on(L, NULL, 43, 1, NULL); }

/* One policy name whose configuration changes between bursts (a rolling
 * deploy), with sliding-log parts that come and go: the script asks for the
 * names of the logs a call did not name, and the call goes again with them
 * (decide.c's second round trip), as the blocking store does. */
static void ra_scenario_retune(const test_loop *L) {
    sluice_clock *ca = sluice_clock_manual_new(1000), *cb = sluice_clock_manual_new(1000);
    sluice_store *a = ra_open("clock=client&prefix=rt-a:", ca), *b = ra_open("clock=client&prefix=rt-b:", cb);
    sluice_policy *cfg[3] = {policy("rt", "sliding-log limit=4 window=1m"), policy("rt", "fixed-window limit=3 window=1m"),
                             policy("rt", "token-bucket capacity=3 rate=1/s; sliding-log limit=2 window=10s")};
    REQUIRE(a && b && cfg[0] && cfg[1] && cfg[2]);
    REQUIRE(L->attach(a) == 0);
    uint64_t rs = 5;
    ra_step steps[12];
    long bad = 0;
    for (int burst = 0; burst < 30; burst++) {
        sluice_clock_manual_advance(ca, 300);
        sluice_clock_manual_advance(cb, 300);
        int n = (int)check_range_(&rs, 1, 12);
        for (int i = 0; i < n; i++) {
            steps[i].p = cfg[(burst + i / 4) % 3];
            snprintf(steps[i].key, sizeof steps[i].key, "k%d", (int)check_range_(&rs, 0, 2));
            steps[i].verb = ra_verb(&rs);
            steps[i].cost = 1;
        }
        bad += ra_burst(L, a, b, cb, steps, n);
    }
    CHECK_EQ(bad, 0);
    sluice_store_close(a);
    CHECK(L->idle());
    sluice_store_close(b);
    for (int i = 0; i < 3; i++) sluice_policy_free(cfg[i]);
    sluice_clock_free(ca);
    sluice_clock_free(cb);
}

/* The connections the server accepted so far (this question's own among them). */
static long long ra_connections(void) {
    redisReply *r = rs_cmd(ra_port(), "INFO stats");
    long long n = -1;
    const char *at = r && r->type == REDIS_REPLY_STRING ? strstr(r->str, "total_connections_received:") : NULL;
    if (at) n = atoll(at + strlen("total_connections_received:"));
    if (r) freeReplyObject(r);
    return n;
}

/* 2000 calls with long keys (the buffers fill), all made before the loop
 * runs: all pipelined on one connection, each called back once, in order,
 * as the blocking store decides. */
static void ra_scenario_pipelined_burst(const test_loop *L) {
    sluice_clock *ca = sluice_clock_manual_new(5000000), *cb = sluice_clock_manual_new(5000000);
    sluice_store *a = ra_open("clock=client&timeout_ms=10000&prefix=burst-a:", ca);
    sluice_store *b = ra_open("clock=client&timeout_ms=10000&prefix=burst-b:", cb);
    sluice_policy *p = policy("burst", "token-bucket capacity=3 rate=1/s; fixed-window limit=5 window=1m");
    REQUIRE(a && b && p);
    REQUIRE(L->attach(a) == 0);
    int n = scaled(2000);
    ra_step *steps = calloc((size_t)n, sizeof *steps);
    REQUIRE(steps);
    uint64_t rs = 7;
    for (int i = 0; i < n; i++) {
        steps[i].p = p;
        ra_key(steps[i].key, sizeof steps[i].key, &rs, 1);
        steps[i].verb = i % 11 == 5 ? TRACE_PEEK : i % 13 == 7 ? TRACE_REFUND : i % 29 == 3 ? TRACE_RESET : TRACE_ACQUIRE;
        steps[i].cost = 1 + i % 2;
    }
    sluice_decision d;
    CHECK_EQ(sluice_store_peek(b, p, "warm", 4, 1, &d), 0); /* the twin's connection, made and kept */
    long long before = ra_connections();
    CHECK_EQ(ra_burst(L, a, b, cb, steps, n), 0);
    CHECK_EQ(ra_connections() - before - 1, 1); /* one connection for all the async calls */
    free(steps);
    sluice_store_close(a); /* detaches */
    CHECK(L->idle());
    sluice_store_close(b);
    sluice_policy_free(p);
    sluice_clock_free(ca);
    sluice_clock_free(cb);
}

/* Runs the loop until every call of recs is back: how long it took (ms). */
static int64_t ra_wait(const test_loop *L, call_rec *recs, size_t n, int64_t max_ms) {
    int64_t t0 = rs_now_ms();
    recs_ctx ctx = {recs, n};
    CHECK(L->run_until(all_called, &ctx, max_ms));
    return rs_now_ms() - t0;
}

/* Makes calls until one is enforced again (within max_ms): 1 when so. */
static int ra_recovers(const test_loop *L, sluice_store *s, const sluice_policy *p, int64_t max_ms) {
    int64_t end = rs_now_ms() + max_ms;
    while (rs_now_ms() < end) {
        call_rec r;
        memset(&r, 0, sizeof r);
        r.s = s;
        CHECK_EQ(sluice_store_acquire_async(s, p, "probe", 5, 1, rec_cb, &r), 0);
        int64_t took = ra_wait(L, &r, 1, 5000);
        if (r.calls == 1 && r.rc == 0 && r.d.enforced) return 1;
        if (getenv("RA_DEBUG")) fprintf(stderr, "%s: not back after %lld ms: %d calls \"%s\"\n", L->name, (long long)took, r.calls, r.msg);
        rs_sleep_ms(20);
    }
    return 0;
}

/* A server that stops answering, then one killed: every call in flight is
 * called back once, with on_error's decision or the error, by timeout_ms
 * (a stopped server) or at once (a killed one); calls made while the
 * server is down complete on the next turn; back by themselves after. */
static void ra_scenario_server_faults(const test_loop *L) {
    enum { TIMEOUT_MS = 200, N = 8 };
    sluice_store *deny = ra_open("on_error=deny&timeout_ms=200&connect_timeout_ms=200&prefix=fd:", NULL);
    sluice_store *err = ra_open("on_error=error&timeout_ms=200&connect_timeout_ms=200&prefix=fe:", NULL);
    sluice_policy *p = policy("faults", "token-bucket capacity=100 rate=1/s");
    REQUIRE(deny && err && p);
    REQUIRE(L->attach(deny) == 0);
    call_rec warm;
    memset(&warm, 0, sizeof warm);
    CHECK_EQ(sluice_store_acquire_async(deny, p, "k", 1, 1, rec_cb, &warm), 0);
    ra_wait(L, &warm, 1, 5000);
    CHECK(warm.rc == 0 && warm.d.enforced && warm.d.allowed);
    /* stopped: each call in flight gets deny's decision, on time */
    rs_signal(&ra_group_, ra_server_, SIGSTOP);
    call_rec recs[N];
    memset(recs, 0, sizeof recs);
    for (int i = 0; i < N; i++) CHECK_EQ(sluice_store_acquire_async(deny, p, "k", 1, 1, rec_cb, &recs[i]), 0);
    int64_t took = ra_wait(L, recs, N, 5000);
    for (int i = 0; i < N; i++) {
        CHECK_EQ(recs[i].calls, 1);
        CHECK_EQ(recs[i].rc, 0);
        CHECK(!recs[i].d.allowed && !recs[i].d.enforced && recs[i].d.retry_after_ms > 0);
    }
    /* never early; late only by what the machine's load adds (the bound
     * is generous: this is a test of outcomes, not of timing) */
    if (took < TIMEOUT_MS - 5 || took > TIMEOUT_MS + 3000)
        fprintf(stderr, "%s: calls to a stopped server came back after %lld ms (timeout_ms %d)\n", L->name,
                (long long)took, TIMEOUT_MS);
    CHECK(took >= TIMEOUT_MS - 5);
    CHECK(took <= TIMEOUT_MS + 3000);
    /* down: a call made now fails on the next turn */
    call_rec fast;
    memset(&fast, 0, sizeof fast);
    fast.s = deny;
    CHECK_EQ(sluice_store_acquire_async(deny, p, "k", 1, 1, rec_cb, &fast), 0);
    CHECK_EQ(fast.calls, 0);
    CHECK(ra_wait(L, &fast, 1, 5000) < TIMEOUT_MS); /* not sent: no timeout waited for */
    CHECK(!fast.d.allowed && !fast.d.enforced);
    CHECK(strstr(fast.msg, "is down") != NULL);
    rs_signal(&ra_group_, ra_server_, SIGCONT);
    CHECK(ra_recovers(L, deny, p, 3000));
    CHECK_EQ(L->detach(deny), 0);
    /* on_error=error, the server killed with calls in flight: SLUICE_ESTORE
     * once each, at once, saying the call may have taken effect */
    REQUIRE(L->attach(err) == 0);
    memset(&warm, 0, sizeof warm);
    CHECK_EQ(sluice_store_acquire_async(err, p, "k", 1, 1, rec_cb, &warm), 0);
    ra_wait(L, &warm, 1, 5000);
    CHECK_EQ(warm.rc, 0);
    memset(recs, 0, sizeof recs);
    for (int i = 0; i < N; i++) {
        recs[i].s = err;
        CHECK_EQ(sluice_store_acquire_async(err, p, "k", 1, 1, rec_cb, &recs[i]), 0);
    }
    rs_signal(&ra_group_, ra_server_, SIGKILL);
    took = ra_wait(L, recs, N, 5000);
    CHECK(took <= TIMEOUT_MS + 3000);
    int sent_failures = 0;
    for (int i = 0; i < N; i++) {
        CHECK_EQ(recs[i].calls, 1);
        /* the kill may come after the server answered some */
        CHECK(recs[i].rc == SLUICE_ESTORE || (recs[i].rc == 0 && recs[i].d.enforced));
        if (recs[i].rc == SLUICE_ESTORE) {
            CHECK(all_zero(&recs[i].d));
            CHECK(strstr(recs[i].msg, "redis: ") == recs[i].msg);
            sent_failures += strstr(recs[i].msg, "may have taken effect") != NULL;
        }
    }
    sluice_stats st;
    sluice_store_stats(err, &st); /* SLUICE_ESTORE: the keys are unknown */
    CHECK(st.failures >= sent_failures);
    /* down: the next call cannot connect */
    call_rec refused;
    memset(&refused, 0, sizeof refused);
    refused.s = err;
    CHECK_EQ(sluice_store_acquire_async(err, p, "k", 1, 1, rec_cb, &refused), 0);
    ra_wait(L, &refused, 1, 5000);
    CHECK_EQ(refused.rc, SLUICE_ESTORE);
    if (!strstr(refused.msg, "connect")) fprintf(stderr, "%s: after a kill: \"%s\"\n", L->name, refused.msg);
    CHECK(strstr(refused.msg, "connect") != NULL);
    REQUIRE(rs_restart(&ra_group_, ra_server_) == 0);
    CHECK(ra_recovers(L, err, p, 3000));
    CHECK(stats(err).reconnects >= 1);
    sluice_store_close(err);
    CHECK(L->idle());
    sluice_store_close(deny);
    sluice_policy_free(p);
}

/* Detaching with calls in flight cancels each once (a call made from
 * those callbacks is refused); attached again, it works; closing with
 * calls in flight cancels them too. */
static void ra_scenario_detach_cancels(const test_loop *L) {
    sluice_store *s = ra_open("prefix=gone:", NULL);
    sluice_policy *p = policy("gone", "token-bucket capacity=5 rate=1/s");
    REQUIRE(s && p);
    REQUIRE(L->attach(s) == 0);
    CHECK_EQ(L->attach(s), SLUICE_EINVAL);
    call_rec recs[3];
    memset(recs, 0, sizeof recs);
    for (int i = 0; i < 3; i++) recs[i].s = s;
    CHECK_EQ(sluice_store_acquire_async(s, p, "a", 1, 1, try_call_cb, &recs[0]), 0);
    CHECK_EQ(sluice_store_peek_async(s, p, "b", 1, 1, try_call_cb, &recs[1]), 0);
    CHECK_EQ(sluice_store_reset_async(s, p, "c", 1, try_call_cb, &recs[2]), 0);
    memset(&chained_rec_, 0, sizeof chained_rec_);
    CHECK_EQ(L->detach(s), 0);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(recs[i].calls, 1);
        CHECK_EQ(recs[i].rc, SLUICE_ECANCELED);
        CHECK(all_zero(&recs[i].d));
        CHECK(strstr(recs[i].msg, "canceled") != NULL);
        CHECK_EQ(recs[i].inner_rc, SLUICE_EINVAL);
    }
    CHECK_EQ(chained_rec_.calls, 0);
    CHECK(L->idle());
    REQUIRE(L->attach(s) == 0);
    call_rec again;
    memset(&again, 0, sizeof again);
    CHECK_EQ(sluice_store_acquire_async(s, p, "a", 1, 1, rec_cb, &again), 0);
    ra_wait(L, &again, 1, 5000);
    CHECK(again.calls == 1 && again.rc == 0 && again.d.allowed && again.d.enforced);
    call_rec last[4];
    memset(last, 0, sizeof last);
    for (int i = 0; i < 4; i++) CHECK_EQ(sluice_store_acquire_async(s, p, "z", 1, 1, rec_cb, &last[i]), 0);
    sluice_store_close(s);
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(last[i].calls, 1);
        CHECK_EQ(last[i].rc, SLUICE_ECANCELED);
        if (i) CHECK_EQ(last[i].order, last[i - 1].order + 1);
    }
    CHECK(L->idle());
    sluice_policy_free(p);
}

/* Callbacks that make calls: each completes later, once; and a database
 * other than 0, selected before the first call goes. */
static void ra_scenario_chained_calls(const test_loop *L) {
    sluice_clock *clock = sluice_clock_manual_new(0);
    char url[128];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/3?clock=client&prefix=chain:", ra_port());
    sluice_store *s = open_store(url, clock);
    sluice_policy *p = policy("chain", "token-bucket capacity=8 rate=1/s");
    REQUIRE(s && p);
    REQUIRE(L->attach(s) == 0);
    chain_ctx c = {s, p, 6, 0, {0}};
    CHECK_EQ(sluice_store_acquire_async(s, p, "chain", 5, 1, chain_cb, &c), 0);
    CHECK_EQ(c.done, 0);
    CHECK(L->run_until(chain_done, &c, 5000));
    CHECK_EQ(c.done, 6);
    for (int i = 0; i < 6; i++) CHECK_EQ(c.remaining[i], 7 - i);
    CHECK(rs_int(ra_port(), "EXISTS %s", "chain:{chain|5:chain}") == 0); /* not in db 0 */
    redisContext *db3 = rs_connect(ra_port(), 5000);
    REQUIRE(db3);
    redisReply *r = redisCommand(db3, "SELECT 3");
    if (r) freeReplyObject(r);
    r = redisCommand(db3, "EXISTS %s", "chain:{chain|5:chain}");
    CHECK(r && r->type == REDIS_REPLY_INTEGER && r->integer == 1);
    if (r) freeReplyObject(r);
    redisFree(db3);
    sluice_store_close(s);
    CHECK(L->idle());
    sluice_policy_free(p);
    sluice_clock_free(clock);
}

#define RA_SCENARIOS(prefix, driver)                                                                   \
    TEST(prefix##_trace_equals_blocking) { ra_scenario_trace(&driver); }                               \
    TEST(prefix##_script_flush_mid_run) { ra_scenario_script_flush(&driver); }                         \
    TEST(prefix##_pipelined_burst) { ra_scenario_pipelined_burst(&driver); }                           \
    TEST(prefix##_retune) { ra_scenario_retune(&driver); }                                             \
    TEST(prefix##_detach_cancels) { ra_scenario_detach_cancels(&driver); }                             \
    TEST(prefix##_chained_calls) { ra_scenario_chained_calls(&driver); }                               \
    TEST(prefix##_server_faults) { ra_scenario_server_faults(&driver); }                               \
    TEST(prefix##_stop_servers) {                                                                      \
        if (ra_server_ >= 0) rs_group_close(&ra_group_);                                               \
        ra_server_ = -1;                                                                               \
    }

#endif /* SLUICE_TEST_REDIS_ASYNC_SCENARIOS_H */
