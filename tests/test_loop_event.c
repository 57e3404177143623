/* test_loop_event.c: libsluice-event (src/loop/event.c) runs the
 * scenarios of loop_scenarios.h on a real libevent base: the fake remote
 * store's two fds watched both ways, WRITE and READ unwatched when no
 * longer wanted (an event's flags changed from within its own callback),
 * its timer armed, re-armed sooner, re-armed after each fire and disarmed,
 * detach and close cancelling and leaving no event behind. Also: a
 * memory: store on the base completes at once and never touches it. */
#define _GNU_SOURCE
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

TEST(event_completes_later) { scenario_completes_later(&event_driver); }
TEST(event_pipelined_burst) { scenario_pipelined_burst(&event_driver); }
TEST(event_timeouts_rearm) { scenario_timeouts_rearm(&event_driver); }
TEST(event_next_turn) { scenario_next_turn(&event_driver); }
TEST(event_detach_cancels) { scenario_detach_cancels(&event_driver); }
TEST(event_chained_calls) { scenario_chained_calls(&event_driver); }
TEST(event_watch_refused) { scenario_watch_refused(&event_driver); }

TEST(event_memory_store) {
    setup();
    sluice_store *s = open_store("memory:", NULL);
    sluice_policy *p = policy("m", "token-bucket capacity=1 rate=1/h");
    REQUIRE(s && p);
    CHECK_EQ(sluice_event_attach(NULL, base), SLUICE_EINVAL);
    CHECK_EQ(sluice_event_attach(s, NULL), SLUICE_EINVAL);
    CHECK_EQ(sluice_event_attach(s, base), 0);
    CHECK_EQ(sluice_event_attach(s, base), SLUICE_EINVAL);
    call_rec r[2];
    memset(r, 0, sizeof r);
    CHECK_EQ(sluice_store_acquire_async(s, p, "k", 1, 1, rec_cb, &r[0]), 0);
    CHECK_EQ(sluice_store_acquire_async(s, p, "k", 1, 1, rec_cb, &r[1]), 0);
    CHECK_EQ(r[0].calls, 1);
    CHECK_EQ(r[1].calls, 1);
    CHECK(r[0].d.allowed);
    CHECK(!r[1].d.allowed);
    CHECK(ev_idle());
    CHECK_EQ(sluice_event_detach(s), 0);
    CHECK(ev_idle());
    CHECK_EQ(sluice_event_attach(s, base), 0);
    sluice_store_close(s);
    CHECK(ev_idle());
    sluice_policy_free(p);
}

/* Last: the base is freed (ASan: nothing of the adapters' is left). */
TEST(event_base_frees) {
    setup();
    CHECK(ev_idle());
    event_free(watchdog);
    event_base_free(base);
    base = NULL;
}

TEST_MAIN(event_completes_later, event_pipelined_burst, event_timeouts_rearm, event_next_turn, event_detach_cancels,
          event_chained_calls, event_watch_refused, event_memory_store, event_base_frees)
