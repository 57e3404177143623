/* test_loop_uv.c: libsluice-uv (src/loop/uv.c) runs the scenarios of
 * loop_scenarios.h on a real libuv loop: the fake remote store's two fds
 * polled both ways, WRITE and READ unwatched when no longer wanted, its
 * timer armed, re-armed sooner, re-armed after each fire and disarmed,
 * detach and close cancelling and leaving no handle behind (the loop is
 * not alive afterwards, and closes at the end with nothing left in it).
 * Also: a memory: store on the loop completes at once and never touches
 * it. */
#define _GNU_SOURCE
#include "loop_scenarios.h"
#include "sluice_uv.h"

static uv_loop_t loop;
static uv_timer_t watchdog;
static int expired, ready_made;

static void setup(void) {
    if (ready_made) return;
    uv_loop_init(&loop);
    uv_timer_init(&loop, &watchdog);
    ready_made = 1;
}

static int uv_attach_(sluice_store *s) {
    setup();
    return sluice_uv_attach(s, &loop);
}

static int uv_detach_(sluice_store *s) { return sluice_uv_detach(s); }

static void on_watchdog(uv_timer_t *t) {
    (void)t;
    expired = 1;
}

static int uv_run_until(int (*done)(void *), void *ctx, int64_t max_ms) {
    setup();
    expired = 0;
    uv_timer_start(&watchdog, on_watchdog, (uint64_t)max_ms, 0);
    while (!done(ctx) && !expired) uv_run(&loop, UV_RUN_ONCE);
    uv_timer_stop(&watchdog);
    return done(ctx);
}

/* handles of the loop's that are active or closing, the watchdog aside
 * (an adapter keeps its timer handle, stopped, while it is attached; the
 * last test closes the loop, which finds any handle left) */
static void count_handle(uv_handle_t *h, void *arg) {
    if (h != (uv_handle_t *)&watchdog && (uv_is_active(h) || uv_is_closing(h))) ++*(int *)arg;
}

static int uv_idle_(void) {
    setup();
    uv_run(&loop, UV_RUN_NOWAIT); /* libuv finishes closing handles on a turn */
    int handles = 0;
    uv_walk(&loop, count_handle, &handles);
    if (handles) fprintf(stderr, "uv: %d handles active in the loop\n", handles);
    return !uv_loop_alive(&loop) && handles == 0;
}

static int uv_bad_fd(void) { return open("/dev/null", O_RDONLY | O_CLOEXEC); /* epoll cannot poll it */ }

static const test_loop uv_driver = {"uv", uv_attach_, uv_detach_, uv_run_until, uv_idle_, uv_bad_fd};

TEST(uv_completes_later) { scenario_completes_later(&uv_driver); }
TEST(uv_pipelined_burst) { scenario_pipelined_burst(&uv_driver); }
TEST(uv_timeouts_rearm) { scenario_timeouts_rearm(&uv_driver); }
TEST(uv_next_turn) { scenario_next_turn(&uv_driver); }
TEST(uv_detach_cancels) { scenario_detach_cancels(&uv_driver); }
TEST(uv_chained_calls) { scenario_chained_calls(&uv_driver); }
TEST(uv_watch_refused) { scenario_watch_refused(&uv_driver); }

TEST(uv_memory_store) {
    setup();
    sluice_store *s = open_store("memory:", NULL);
    sluice_policy *p = policy("m", "token-bucket capacity=1 rate=1/h");
    REQUIRE(s && p);
    CHECK_EQ(sluice_uv_attach(NULL, &loop), SLUICE_EINVAL);
    CHECK_EQ(sluice_uv_attach(s, NULL), SLUICE_EINVAL);
    CHECK_EQ(sluice_uv_attach(s, &loop), 0);
    CHECK_EQ(sluice_uv_attach(s, &loop), SLUICE_EINVAL); /* one loop at a time */
    call_rec r[2];
    memset(r, 0, sizeof r);
    CHECK_EQ(sluice_store_acquire_async(s, p, "k", 1, 1, rec_cb, &r[0]), 0);
    CHECK_EQ(sluice_store_acquire_async(s, p, "k", 1, 1, rec_cb, &r[1]), 0);
    CHECK_EQ(r[0].calls, 1); /* before the call returned */
    CHECK_EQ(r[1].calls, 1);
    CHECK(r[0].d.allowed);
    CHECK(!r[1].d.allowed);
    CHECK(uv_idle_());
    CHECK_EQ(sluice_uv_detach(s), 0);
    CHECK_EQ(sluice_uv_detach(s), 0);
    CHECK(uv_idle_());
    CHECK_EQ(sluice_uv_attach(s, &loop), 0);
    sluice_store_close(s); /* detaches */
    CHECK(uv_idle_());
    sluice_policy_free(p);
}

/* Last: nothing of any store is left in the loop, which closes. */
TEST(uv_loop_closes) {
    setup();
    uv_close((uv_handle_t *)&watchdog, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ(uv_loop_close(&loop), 0);
}

TEST_MAIN(uv_completes_later, uv_pipelined_burst, uv_timeouts_rearm, uv_next_turn, uv_detach_cancels, uv_chained_calls,
          uv_watch_refused, uv_memory_store, uv_loop_closes)
