/* test_loop_event.c: libsluice-event (src/loop/event.c) runs the
 * scenarios of loop_scenarios.h on a real libevent base: the fake remote
 * store's two fds watched both ways, WRITE and READ unwatched when no
 * longer wanted (an event's flags changed from within its own callback),
 * its timer armed, re-armed sooner, re-armed after each fire and disarmed,
 * detach and close cancelling and leaving no event behind. Also: a
 * memory: store on the base completes at once and never touches it. */
#define _GNU_SOURCE
#include "loop_event_driver.h"

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
