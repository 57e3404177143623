/* test_redis_async.c: the Redis store's non-blocking calls against a real
 * redis-server through the test's poll() loop (loop_poll.h): the scenarios
 * of redis_async_scenarios.h, and a loop that refuses to watch the store's
 * fd (every call fails as on_error says, once, and nothing is left). */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wunused-function" /* the headers' helpers this test does not use */
#include "loop_poll.h"
#include "redis_async_scenarios.h"

RA_SCENARIOS(poll, poll_loop)

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

TEST_MAIN(poll_trace_equals_blocking, poll_script_flush_mid_run, poll_pipelined_burst, poll_detach_cancels,
          poll_chained_calls, poll_server_faults, poll_watch_refused, poll_stop_servers)
