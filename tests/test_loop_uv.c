/* test_loop_uv.c: libsluice-uv (src/loop/uv.c) runs the scenarios of
 * loop_scenarios.h on a real libuv loop: the fake remote store's two fds
 * polled both ways, WRITE and READ unwatched when no longer wanted, its
 * timer armed, re-armed sooner, re-armed after each fire and disarmed,
 * detach and close cancelling and leaving no handle behind (the loop is
 * not alive afterwards, and closes at the end with nothing left in it).
 * Also: a memory: store on the loop completes at once and never touches
 * it. */
#define _GNU_SOURCE
#include "loop_uv_driver.h"

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
    uv_close((uv_handle_t *)&until_check, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ(uv_loop_close(&loop), 0);
}

TEST_MAIN(uv_completes_later, uv_pipelined_burst, uv_timeouts_rearm, uv_next_turn, uv_detach_cancels, uv_chained_calls,
          uv_watch_refused, uv_memory_store, uv_loop_closes)
