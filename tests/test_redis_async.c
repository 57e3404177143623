/* test_redis_async.c: the Redis store's non-blocking calls against a real
 * redis-server through the test's poll() loop (loop_poll.h): the scenarios
 * of redis_async_scenarios.h; a loop that refuses to watch the store's fd
 * (every call fails as on_error says, once, and nothing is left); the
 * cache of denials answering calls with no round trip; on_error=local
 * deciding them while the server is down; a server busy past the calls'
 * timeout (DEBUG SLEEP); and a three-node cluster, where a random trace
 * gives the blocking store's decisions, also with the store's slot map
 * wrong (every slot on the first node: each call follows MOVED, learning
 * the map) and SCRIPT FLUSH. */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wunused-function" /* the headers' helpers this test does not use */
#include "loop_poll.h"
#include "redis_async_scenarios.h"
#include "store/redis/redis_internal.h"

RA_SCENARIOS(poll, poll_loop)

/* One call through the poll loop, waited for (5 s at most). */
static void one_call(sluice_store *s, const sluice_policy *p, const char *key, int verb, int64_t cost, call_rec *r) {
    memset(r, 0, sizeof *r);
    CHECK_EQ(verb_async(s, p, key, verb, cost, r), 0);
    CHECK_EQ(r->calls, 0); /* never before the call returns */
    recs_ctx ctx = {r, 1};
    CHECK(poll_loop.run_until(all_called, &ctx, 5000));
}

/* The cache of denials answers non-blocking calls too: a key the server
 * denied is denied again with no round trip (on the loop's next turn),
 * its wait counting down; a refund through the store clears it. */
TEST(poll_cached_denials) {
    sluice_clock *c = sluice_clock_manual_new(1000000);
    sluice_store *s = ra_open("clock=client&timeout_ms=5000&prefix=dc:", c);
    sluice_policy *p = policy("dc", "fixed-window limit=1 window=1h");
    REQUIRE(c && s && p);
    REQUIRE(poll_loop.attach(s) == 0);
    call_rec r;
    one_call(s, p, "k", TRACE_ACQUIRE, 1, &r);
    CHECK(r.rc == 0 && r.d.allowed);
    one_call(s, p, "k", TRACE_ACQUIRE, 1, &r);
    CHECK(r.rc == 0 && !r.d.allowed && r.d.enforced);
    int64_t retry = r.d.retry_after_ms;
    long long scripts = rs_calls(ra_port(), "evalsha");
    for (int i = 1; i <= 5; i++) {
        sluice_clock_manual_advance(c, 1000);
        one_call(s, p, "k", TRACE_ACQUIRE, 1, &r);
        CHECK(r.rc == 0 && !r.d.allowed && r.d.enforced && !r.d.local);
        CHECK_EQ(r.d.retry_after_ms, retry - 1000 * i);
    }
    CHECK_EQ(rs_calls(ra_port(), "evalsha"), scripts); /* no round trip */
    sluice_stats st;
    CHECK_EQ(sluice_store_stats(s, &st), 0);
    CHECK_EQ(st.cached_denials, 5);
    one_call(s, p, "k", TRACE_REFUND, 1, &r);
    CHECK_EQ(r.rc, 0);
    one_call(s, p, "k", TRACE_ACQUIRE, 1, &r);
    CHECK(r.rc == 0 && r.d.allowed); /* the server's, after the refund */
    CHECK_EQ(rs_calls(ra_port(), "evalsha"), scripts + 2);
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_clock_free(c);
}

/* on_error=local decides non-blocking calls the server cannot: the local
 * limit of the share, local = true. */
TEST(poll_local_limit) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    REQUIRE(a >= 0);
    char url[256];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?clock=client&timeout_ms=500&on_error=local&local_share=1/2",
             g.s[a].port);
    sluice_clock *c = sluice_clock_manual_new(1000000);
    sluice_store *s = open_store(url, c);
    sluice_policy *p = policy("ll", "fixed-window limit=4 window=1h");
    REQUIRE(c && s && p);
    REQUIRE(poll_loop.attach(s) == 0);
    call_rec r;
    one_call(s, p, "k", TRACE_ACQUIRE, 1, &r);
    CHECK(r.rc == 0 && r.d.allowed && !r.d.local && r.d.remaining == 3);
    rs_signal(&g, a, SIGKILL);
    for (int k = 0; k < 2; k++) {
        one_call(s, p, "k", TRACE_ACQUIRE, 1, &r);
        CHECK(r.rc == 0 && r.d.allowed && r.d.local && r.d.enforced && r.d.limit == 2 && r.d.remaining == 1 - k);
    }
    one_call(s, p, "k", TRACE_ACQUIRE, 1, &r);
    CHECK(r.rc == 0 && !r.d.allowed && r.d.local);
    CHECK_EQ(stats(s).local, 3); /* (stats itself fails: no server to count its keys) */
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_clock_free(c);
    rs_group_close(&g);
}

/* A server busy past the calls' timeout (DEBUG SLEEP 5, sent on a
 * connection of the test's own; the server known asleep once a PING on
 * another gets no answer in 50 ms): every call in flight gets on_error's
 * decision once, not before timeout_ms, and while the server still sleeps
 * (the sleep's reply not yet come); later the store decides with the
 * server again. */
TEST(poll_debug_sleep_times_calls_out) {
    enum { TIMEOUT_MS = 200, N = 6 };
    sluice_store *s = ra_open("on_error=deny&timeout_ms=200&connect_timeout_ms=200&prefix=ds:", NULL);
    sluice_policy *p = policy("ds", "token-bucket capacity=100 rate=1/s");
    REQUIRE(s && p);
    REQUIRE(poll_loop.attach(s) == 0);
    call_rec r;
    one_call(s, p, "k", TRACE_ACQUIRE, 1, &r);
    CHECK(r.rc == 0 && r.d.enforced && r.d.allowed);
    redisContext *busy = redisConnect("127.0.0.1", ra_port());
    REQUIRE(busy && !busy->err);
    int done = 0;
    CHECK_EQ(redisAppendCommand(busy, "DEBUG SLEEP 5"), REDIS_OK);
    while (!done) CHECK_EQ(redisBufferWrite(busy, &done), REDIS_OK);
    int asleep = 0;
    for (int tries = 0; tries < 100 && !asleep; tries++) {
        struct timeval tv = {0, 50000};
        redisContext *probe = redisConnectWithTimeout("127.0.0.1", ra_port(), tv);
        if (probe && !probe->err && redisSetTimeout(probe, tv) == REDIS_OK) {
            redisReply *pong = redisCommand(probe, "PING");
            asleep = pong == NULL;
            if (pong) freeReplyObject(pong);
        }
        if (probe) redisFree(probe);
    }
    REQUIRE(asleep);
    int64_t t0 = rs_now_ms();
    call_rec recs[N];
    memset(recs, 0, sizeof recs);
    for (int i = 0; i < N; i++) CHECK_EQ(sluice_store_acquire_async(s, p, "k", 1, 1, rec_cb, &recs[i]), 0);
    recs_ctx ctx = {recs, N};
    CHECK(poll_loop.run_until(all_called, &ctx, 10000));
    int64_t took = rs_now_ms() - t0;
    struct pollfd pf = {.fd = busy->fd, .events = POLLIN};
    int still_asleep = poll(&pf, 1, 0) == 0; /* the sleep's reply not come yet */
    for (int i = 0; i < N; i++) {
        CHECK_EQ(recs[i].calls, 1);
        CHECK(recs[i].rc == 0 && !recs[i].d.allowed && !recs[i].d.enforced);
    }
    if (took < TIMEOUT_MS - 5 || !still_asleep)
        fprintf(stderr, "debug sleep: calls back after %lld ms, the server %s\n", (long long)took,
                still_asleep ? "asleep" : "awake again");
    CHECK(took >= TIMEOUT_MS - 5 && still_asleep); /* by their timeout, not by the server's answer */
    redisReply *reply = NULL;
    CHECK_EQ(redisGetReply(busy, (void **)&reply), REDIS_OK); /* the sleep is over */
    if (reply) freeReplyObject(reply);
    redisFree(busy);
    int back = 0;
    for (int tries = 0; tries < 100 && !back; tries++) {
        one_call(s, p, "k", TRACE_ACQUIRE, 1, &r);
        back = r.rc == 0 && r.d.enforced;
        if (!back) usleep(20000);
    }
    CHECK(back);
    sluice_store_close(s);
    sluice_policy_free(p);
}

/* A loop whose watch always refuses. */
static int refusing_watch(void *user, int fd, int events) {
    (void)user, (void)fd;
    return events ? SLUICE_ENOMEM : 0;
}
static int64_t refusing_armed_ms = -1;
static void refusing_timer(void *user, int64_t ms) {
    (void)user;
    refusing_armed_ms = ms;
}

TEST(poll_watch_refused) {
    sluice_store *s = ra_open("on_error=error&prefix=refused:", NULL);
    sluice_policy *p = policy("refused", "token-bucket capacity=5 rate=1/s");
    REQUIRE(s && p);
    sluice_loop loop = SLUICE_LOOP_INIT;
    loop.watch = refusing_watch;
    loop.timer = refusing_timer;
    CHECK_EQ(sluice_store_attach_loop(s, &loop), 0);
    call_rec recs[3];
    memset(recs, 0, sizeof recs);
    for (int i = 0; i < 3; i++) {
        recs[i].s = s;
        CHECK_EQ(sluice_store_acquire_async(s, p, "k", 1, 1, rec_cb, &recs[i]), 0);
        CHECK_EQ(recs[i].calls, 0);
    }
    CHECK_EQ(refusing_armed_ms, 0); /* failed: called back on the next turn */
    refusing_armed_ms = -1; /* it fires (and is no longer armed) */
    sluice_store_loop_timeout(s);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(recs[i].calls, 1);
        CHECK_EQ(recs[i].rc, SLUICE_ESTORE);
        CHECK(strstr(recs[i].msg, "watch") != NULL || strstr(recs[i].msg, "is down") != NULL);
    }
    CHECK_EQ(refusing_armed_ms, -1); /* nothing left: not armed again */
    sluice_store_close(s);
    sluice_policy_free(p);
}

static rs_group cluster_;
static int cluster_ok_;
static char cluster_url_[256];

static void cluster_start(void) {
    if (cluster_ok_) return;
    int ok = rs_group_open(&cluster_) == 0;
    for (int i = 0; i < 3 && ok; i++) ok = rs_group_add(&cluster_, 1) >= 0;
    ok = ok && rs_cluster_create(&cluster_) == 0;
    REQUIRE(ok);
    snprintf(cluster_url_, sizeof cluster_url_, "redis-cluster://127.0.0.1:%d,127.0.0.1:%d", cluster_.s[0].port,
             cluster_.s[1].port);
    cluster_ok_ = 1;
}

/* The store's slot map made wrong: every slot on node 0. */
static void wrong_slots(sluice_store *s) {
    redis_store *r = (redis_store *)s;
    for (int slot = 0; slot < 16384; slot++) atomic_store(&r->slots[slot], 0);
}

TEST(poll_cluster_trace) {
    cluster_start();
    ra_trace_on(&poll_loop, cluster_url_, 51, 0, NULL);
}

TEST(poll_cluster_moved) {
    cluster_start();
    ra_trace_on(&poll_loop, cluster_url_, 53, 0, wrong_slots);
}

TEST(poll_cluster_stop) {
    if (cluster_ok_) rs_group_close(&cluster_);
    cluster_ok_ = 0;
}

TEST_MAIN(poll_trace_equals_blocking, poll_script_flush_mid_run, poll_pipelined_burst, poll_retune, poll_detach_cancels,
          poll_chained_calls, poll_server_faults, poll_watch_refused, poll_cached_denials, poll_local_limit, poll_debug_sleep_times_calls_out, poll_stop_servers, poll_cluster_trace, poll_cluster_moved, poll_cluster_stop)
