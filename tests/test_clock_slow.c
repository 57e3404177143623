/* test_clock_slow.c: the monotonic clock against CLOCK_MONOTONIC over 3 s
 * of real time (its own ctest entry, labelled slow: it is about real time).
 *
 * The TSC clock (forced on wherever the CPU's TSC is invariant) is sampled
 * in bursts, densely and then with pauses of 0 to 333 ms between them, so
 * that readings come at every age of an anchor and far apart (past an
 * anchor's life: re-anchored at the next reading). Every reading lies
 * within TSC_ERR_NS of CLOCK_MONOTONIC read just before and just after it
 * (in ms, and the anchor's ns too), and none goes back. The machine may be
 * noisy: a preemption only widens the interval a reading is checked
 * against, and no check depends on when the test gets to run. */
#include "clock_test.h"

#include <unistd.h>

typedef struct {
    long n, bad, served;
    int64_t prev_ms, worst_ns, oldest_served_ns;
} tally;

#ifndef SLUICE__HAVE_TSC
#define __rdtsc() 0
#define sluice__tsc_invariant() 0
#endif

static void sample(tally *t, const sluice_clock *c) {
    int64_t before = mono_ns();
    uint64_t tick = __rdtsc();
    int64_t r = sluice_clock_now_ms(c);
    int64_t after = mono_ns();
    int ok = reading_ok(r, before, after, TSC_ERR_NS) && r >= t->prev_ms;
    uint64_t ns = 0;
#ifdef SLUICE__HAVE_TSC
    ns = sluice__tsc_anchor_ns(&sluice__tsc_process, tick);
#endif
    if (ns) {
        /* the tick was read between before and after */
        int64_t e = (int64_t)ns < before ? before - (int64_t)ns : (int64_t)ns > after ? (int64_t)ns - after : 0;
        if (e > t->worst_ns) t->worst_ns = e;
        if (e > TSC_ERR_NS) ok = 0;
#ifdef SLUICE__HAVE_TSC
        int64_t age = (int64_t)ns - (int64_t)atomic_load(&sluice__tsc_process.ns0);
        if (age > t->oldest_served_ns) t->oldest_served_ns = age;
#endif
        t->served++;
    }
    if (!ok && t->bad++ < 5)
        fprintf(stderr, "reading %" PRId64 " ms (previous %" PRId64 "), anchor %" PRIu64 " ns, between %" PRId64
                        " and %" PRId64 " ns\n",
                r, t->prev_ms, ns, before, after);
    if (r > t->prev_ms) t->prev_ms = r;
    t->n++;
}

TEST(tsc_agrees_with_clock_monotonic_for_3_s) {
    if (!sluice__tsc_invariant()) {
        printf("no invariant TSC here: only the fallback is checked\n");
        REQUIRE(sluice__clock_force_source(NULL) == 0);
    } else {
        REQUIRE(sluice__clock_force_source("tsc") == 0);
        CHECK_STR(sluice_clock_source(), "tsc");
    }
    const sluice_clock *c = sluice_clock_monotonic();
    tally t = {.prev_ms = INT64_MIN};
#ifdef SLUICE__HAVE_TSC
    uint64_t anchors0 = atomic_load(&sluice__tsc_process.n_anchors);
#endif
    static const int pause_ms[] = {0, 1, 7, 0, 49, 120, 0, 333, 3, 60};
    int64_t start = mono_ns();
    for (int i = 0; mono_ns() - start < 3000000000; i++) {
        /* a burst of 20 ms, then a pause */
        for (int64_t end = mono_ns() + 20000000; mono_ns() < end;)
            for (int k = 0; k < 50; k++) sample(&t, c);
        int p = pause_ms[i % (int)(sizeof pause_ms / sizeof pause_ms[0])];
        if (p) usleep((useconds_t)p * 1000);
        sample(&t, c); /* the first reading after the pause */
    }
    uint64_t anchors = 0;
#ifdef SLUICE__HAVE_TSC
    anchors = atomic_load(&sluice__tsc_process.n_anchors) - anchors0;
#endif
    printf("%ld readings over %.1f s, %ld served by an anchor (up to %.1f ms old); %" PRIu64
           " anchors; worst error %.1f us (bound %.0f us)\n",
           t.n, (double)(mono_ns() - start) / 1e9, t.served, (double)t.oldest_served_ns / 1e6, anchors,
           (double)t.worst_ns / 1e3, (double)TSC_ERR_NS / 1e3);
    CHECK_EQ(t.bad, 0);
    if (sluice__tsc_invariant()) {
        CHECK(t.served > t.n / 2);
        CHECK(anchors >= 10);                       /* ~23 when nothing stalls the test */
        CHECK(t.oldest_served_ns >= 40000000);     /* readings late in an anchor's life */
        CHECK(t.oldest_served_ns < 50000000 + 1000000); /* none past it */
    }
    CHECK_EQ(sluice__clock_force_source(NULL), 0);
}

TEST_MAIN(tsc_agrees_with_clock_monotonic_for_3_s)
