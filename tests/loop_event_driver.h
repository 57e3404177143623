/* loop_event_driver.h: a real libevent loop as a test_loop driver
 * (loop_scenarios.h), through libsluice-event: test_loop_event runs the fake
 * remote kind's scenarios on it, test_redis_async_event the Redis store's. */
#ifndef SLUICE_TEST_LOOP_EVENT_DRIVER_H
#define SLUICE_TEST_LOOP_EVENT_DRIVER_H

#include "loop_scenarios.h"
#include "sluice_event.h"

#include <event2/event.h>

static struct event_base *base;
static struct event *watchdog;
static int expired, baseline_events;

static void on_watchdog(evutil_socket_t fd, short what, void *arg) {
    (void)fd, (void)what, (void)arg;
    expired = 1;
}

static int events_in_base(void) {
    return event_base_get_num_events(base, EVENT_BASE_COUNT_ADDED | EVENT_BASE_COUNT_ACTIVE);
}

/* libevent's own messages (its backend refusing an fd) are kept, not printed */
static int logged;
static void on_log(int severity, const char *msg) {
    (void)severity, (void)msg;
    logged++;
}

static void setup(void) {
    if (base) return;
    event_set_log_callback(on_log);
    base = event_base_new();
    watchdog = evtimer_new(base, on_watchdog, NULL);
    if (!base || !watchdog) abort();
    baseline_events = events_in_base(); /* the base's own, if any */
}

static int ev_attach(sluice_store *s) {
    setup();
    return sluice_event_attach(s, base);
}

static int ev_detach(sluice_store *s) { return sluice_event_detach(s); }

static int ev_run_until(int (*done)(void *), void *ctx, int64_t max_ms) {
    setup();
    expired = 0;
    struct timeval tv = {(time_t)(max_ms / 1000), (suseconds_t)(max_ms % 1000) * 1000};
    evtimer_add(watchdog, &tv);
    while (!done(ctx) && !expired) event_base_loop(base, EVLOOP_ONCE);
    evtimer_del(watchdog);
    return done(ctx);
}

static int ev_idle(void) {
    setup();
    int n = events_in_base() - baseline_events;
    if (n) fprintf(stderr, "event: %d events left in the base\n", n);
    return n == 0;
}

static int ev_bad_fd(void) { return open("/dev/null", O_RDONLY | O_CLOEXEC); /* epoll cannot watch it */ }

static const test_loop event_driver = {"event", ev_attach, ev_detach, ev_run_until, ev_idle, ev_bad_fd};

#endif /* SLUICE_TEST_LOOP_EVENT_DRIVER_H */
