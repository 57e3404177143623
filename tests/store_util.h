/* store_util.h: what the store tests share: making policies and stores
 * (printing why when it fails), comparing and printing decisions, stats. */
#ifndef SLUICE_TEST_STORE_UTIL_H
#define SLUICE_TEST_STORE_UTIL_H

#include <stdio.h>
#include <string.h>

#include "sluice.h"

static inline sluice_policy *policy(const char *name, const char *spec) {
    sluice_policy *p = NULL;
    char err[256];
    if (sluice_policy_parse(name, spec, &p, err, sizeof err)) fprintf(stderr, "%s: %s\n", spec, err);
    return p;
}

/* A store at url whose clock is clock (NULL: monotonic). */
static inline sluice_store *open_store(const char *url, const sluice_clock *clock) {
    sluice_store_options o = SLUICE_STORE_OPTIONS_INIT;
    o.clock = clock;
    sluice_store *s = NULL;
    char err[256];
    if (sluice_store_open_err(url, &o, &s, err, sizeof err)) fprintf(stderr, "%s: %s\n", url, err);
    return s;
}

/* Equal in every field. */
static inline int same(const sluice_decision *a, const sluice_decision *b) {
    return a->allowed == b->allowed && a->remaining == b->remaining &&
           a->retry_after_ms == b->retry_after_ms && a->reset_ms == b->reset_ms &&
           a->delay_ms == b->delay_ms && a->limit == b->limit && a->part == b->part &&
           a->enforced == b->enforced;
}

static inline void print_decision(const char *who, const sluice_decision *d) {
    fprintf(stderr, "  %s: allowed=%d enforced=%d remaining=%lld retry=%lld reset=%lld delay=%lld limit=%lld part=%d\n",
            who, d->allowed, d->enforced, (long long)d->remaining, (long long)d->retry_after_ms,
            (long long)d->reset_ms, (long long)d->delay_ms, (long long)d->limit, d->part);
}

static inline sluice_stats stats(sluice_store *s) {
    sluice_stats st;
    memset(&st, 0, sizeof st);
    sluice_store_stats(s, &st);
    return st;
}

/* Policies every store's differential test runs: each algorithm, small and
 * at the edges of the accepted ranges, and composites. */
#define STORE_TEST_SPECS                                                                           \
    "token-bucket capacity=3 rate=1/7ms", "leaky-bucket capacity=4 rate=2/9ms",                    \
        "fixed-window limit=5 window=13ms", "sliding-window limit=6 window=11ms",                  \
        "sliding-log limit=5 window=17ms",                                                         \
        "token-bucket capacity=4 rate=1/5ms; fixed-window limit=6 window=20ms",                    \
        "sliding-window limit=3 window=7ms; sliding-log limit=4 window=15ms; "                     \
        "leaky-bucket capacity=2 rate=1/3ms",                                                      \
        "gcra rate=3/10ms burst=2; sliding-log limit=9 window=40ms",                               \
        "token-bucket capacity=1000000000 rate=1000000000/s",                                      \
        "sliding-window limit=1000000000 window=30d",                                              \
        "token-bucket capacity=2 rate=1/30d; fixed-window limit=1 window=1ms",

#endif
