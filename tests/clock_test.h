/* clock_test.h: what the tests of the monotonic clock share: CLOCK_MONOTONIC
 * in ns, and the check of one reading of the clock against the
 * CLOCK_MONOTONIC readings taken just before and just after it. */
#ifndef SLUICE_TEST_CLOCK_H
#define SLUICE_TEST_CLOCK_H

#define _GNU_SOURCE
#include "check.h"
#include "internal.h"

#include <time.h>

/* The TSC clock's error bound by construction is 75 us (src/tsc.c); the
 * tests allow a few times that, and still far less than the 1 ms that
 * would change a reading by more than one boundary. */
#define TSC_ERR_NS INT64_C(250000)

static inline int64_t mono_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

/* Whether a reading r (ms) taken between CLOCK_MONOTONIC's before_ns and
 * after_ns is CLOCK_MONOTONIC's ms give or take err_ns. */
static inline int reading_ok(int64_t r, int64_t before_ns, int64_t after_ns, int64_t err_ns) {
    return r >= (before_ns - err_ns) / 1000000 && r <= (after_ns + err_ns) / 1000000;
}

#endif
