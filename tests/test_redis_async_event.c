/* test_redis_async_event.c: the Redis store's non-blocking calls against a
 * real redis-server on a libevent base through libsluice-event: the
 * scenarios of redis_async_scenarios.h (loop_event_driver.h is the loop). */
#define _GNU_SOURCE
#pragma GCC diagnostic ignored "-Wunused-function" /* the headers' helpers this test does not use */
#include "loop_event_driver.h"
#include "redis_async_scenarios.h"

RA_SCENARIOS(event, event_driver)

TEST_MAIN(event_trace_equals_blocking, event_script_flush_mid_run, event_pipelined_burst, event_retune, event_detach_cancels,
          event_chained_calls, event_server_faults, event_stop_servers)
