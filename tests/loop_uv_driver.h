/* loop_uv_driver.h: a real libuv loop as a test_loop driver
 * (loop_scenarios.h), through libsluice-uv: test_loop_uv runs the fake
 * remote kind's scenarios on it, test_redis_async_uv the Redis store's. */
#ifndef SLUICE_TEST_LOOP_UV_DRIVER_H
#define SLUICE_TEST_LOOP_UV_DRIVER_H

#include "loop_scenarios.h"
#include "sluice_uv.h"

static uv_loop_t loop;
static uv_timer_t watchdog;
/* run_until's: stops the loop before it polls once the condition holds (a
 * callback run from a timer must not leave the turn blocked in the poll) */
static uv_prepare_t until_check;
static int (*until_done)(void *ctx);
static void *until_ctx;
static int expired, ready_made;

static void setup(void) {
    if (ready_made) return;
    uv_loop_init(&loop);
    uv_timer_init(&loop, &watchdog);
    uv_prepare_init(&loop, &until_check);
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

static void on_until_check(uv_prepare_t *h) {
    if (until_done(until_ctx)) uv_stop(h->loop);
}

static int uv_run_until(int (*done)(void *), void *ctx, int64_t max_ms) {
    setup();
    expired = 0;
    uv_timer_start(&watchdog, on_watchdog, (uint64_t)max_ms, 0);
    until_done = done, until_ctx = ctx;
    uv_prepare_start(&until_check, on_until_check);
    while (!done(ctx) && !expired) uv_run(&loop, UV_RUN_ONCE);
    uv_timer_stop(&watchdog);
    uv_prepare_stop(&until_check);
    return done(ctx);
}

/* handles of the loop's that are active or closing, the watchdog aside
 * (an adapter keeps its timer handle, stopped, while it is attached; the
 * last test closes the loop, which finds any handle left) */
static void count_handle(uv_handle_t *h, void *arg) {
    if (h != (uv_handle_t *)&watchdog && h != (uv_handle_t *)&until_check && (uv_is_active(h) || uv_is_closing(h))) ++*(int *)arg;
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

#endif /* SLUICE_TEST_LOOP_UV_DRIVER_H */
