/* test_redis_async_uv.c: the Redis store's non-blocking calls against a
 * real redis-server on a libuv loop through libsluice-uv: the scenarios of
 * redis_async_scenarios.h (loop_uv_driver.h is the loop). */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wunused-function" /* the headers' helpers this test does not use */
#include "loop_uv_driver.h"
#include "redis_async_scenarios.h"

RA_SCENARIOS(uv, uv_driver)

TEST(uv_loop_closes) {
    setup();
    uv_close((uv_handle_t *)&watchdog, NULL);
    uv_close((uv_handle_t *)&until_check, NULL);
    uv_run(&loop, UV_RUN_DEFAULT);
    CHECK_EQ(uv_loop_close(&loop), 0);
}

TEST_MAIN(uv_trace_equals_blocking, uv_script_flush_mid_run, uv_pipelined_burst, uv_retune, uv_detach_cancels, uv_chained_calls,
          uv_server_faults, uv_stop_servers, uv_loop_closes)
