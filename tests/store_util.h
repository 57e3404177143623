/* store_util.h: what the store tests share: making policies and stores
 * (printing why when it fails), comparing and printing decisions, stats. */
#ifndef SLUICE_TEST_STORE_UTIL_H
#define SLUICE_TEST_STORE_UTIL_H

#include <stdio.h>
#include <string.h>

#include "sluice.h"
#include "trace_verbs.h"

static inline sluice_policy *policy(const char *name, const char *spec) {
    sluice_policy *p = NULL;
    char err[256];
    if (sluice_policy_parse(name, spec, &p, err, sizeof err)) fprintf(stderr, "%s: %s\n", spec, err);
    return p;
}

/* Policy i of a list: its own name ("s<i>"), so that the list's policies
 * are as many limits (configurations of one name would share each key:
 * docs/semantics.md, "Retune"). */
static inline sluice_policy *policy_i(size_t i, const char *spec) {
    char name[24];
    snprintf(name, sizeof name, "s%zu", i);
    return policy(name, spec);
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

/* What a store answers for a reading lag_ms below its time (sluice.h,
 * "Time"): the decision taken at its time, each wait that is not 0
 * lengthened by lag_ms, so that it counts from the reading given. Written
 * here from the documentation, not taken from the library, so a store that
 * gets it wrong does not get the same wrong answer as its reference. */
static inline void expect_lag(sluice_decision *d, int64_t lag_ms) {
    if (lag_ms <= 0) return;
    int64_t *waits[] = {&d->retry_after_ms, &d->reset_ms, &d->delay_ms, &d->part_reset_ms};
    for (size_t i = 0; i < sizeof waits / sizeof waits[0]; i++)
        if (*waits[i] != 0) *waits[i] += lag_ms;
}

/* Equal in every field. */
static inline int same(const sluice_decision *a, const sluice_decision *b) {
    return a->allowed == b->allowed && a->remaining == b->remaining &&
           a->retry_after_ms == b->retry_after_ms && a->reset_ms == b->reset_ms &&
           a->delay_ms == b->delay_ms && a->limit == b->limit && a->part == b->part &&
           a->part_reset_ms == b->part_reset_ms && a->enforced == b->enforced &&
           a->shadow_denied == b->shadow_denied && a->local == b->local;
}

static inline void print_decision(const char *who, const sluice_decision *d) {
    fprintf(stderr, "  %s: allowed=%d enforced=%d remaining=%lld retry=%lld reset=%lld delay=%lld limit=%lld part=%d "
            "part_reset=%lld shadow_denied=%d local=%d\n",
            who, d->allowed, d->enforced, (long long)d->remaining, (long long)d->retry_after_ms,
            (long long)d->reset_ms, (long long)d->delay_ms, (long long)d->limit, d->part, (long long)d->part_reset_ms,
            d->shadow_denied, d->local);
}

/* A trace step's verb (trace.h) on a store at reading now (a reset reads
 * the store's clock: set it to now first). */
static inline int store_verb(sluice_store *s, const sluice_policy *p, const void *key, size_t len, int verb,
                             int64_t cost, int64_t now, sluice_decision *d) {
    switch (verb) {
    case TRACE_PEEK: return sluice_store_peek_at(s, p, key, len, cost, now, d);
    case TRACE_REFUND: return sluice_store_refund_at(s, p, key, len, cost, now, d);
    case TRACE_RESET: return sluice_store_reset(s, p, key, len, d);
    default: return sluice_store_acquire_at(s, p, key, len, cost, now, d);
    }
}

/* The same on a reference limiter at reading at, whose clock c a reset
 * reads (set to at here). */
static inline int limiter_verb(sluice_limiter *l, sluice_clock *c, int verb, int64_t cost, int64_t at,
                               sluice_decision *d) {
    switch (verb) {
    case TRACE_PEEK: return sluice_peek_at(l, cost, at, d);
    case TRACE_REFUND: return sluice_refund_at(l, cost, at, d);
    case TRACE_RESET: sluice_clock_manual_set(c, at); return sluice_reset(l, d);
    default: return sluice_acquire_at(l, cost, at, d);
    }
}

static inline const char *verb_name(int verb) {
    return verb == TRACE_PEEK ? "peek" : verb == TRACE_REFUND ? "refund" : verb == TRACE_RESET ? "reset" : "acquire";
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

/* Policies with shadow parts, for the stores that have them. */
#define STORE_TEST_SHADOW_SPECS                                                                    \
    "token-bucket capacity=3 rate=1/7ms; shadow fixed-window limit=2 window=20ms",                 \
        "shadow sliding-log limit=2 window=30ms", "shadow leaky-bucket capacity=2 rate=1/9ms",      \
        "sliding-window limit=4 window=11ms; shadow token-bucket capacity=1 rate=1/5ms; "          \
        "sliding-log limit=3 window=17ms",

/* Batches against single calls: random batches of 1..40 requests (longer
 * and shorter than a store's prefetch group of 16) over STORE_TEST_SPECS x
 * 24 keys (3 of them of 27..28 bytes, the rest of 2..16), keys repeated
 * within a batch, bad requests (cost 0, an empty key, no policy) among
 * good ones, go to store a through sluice_store_acquire_many and, one
 * sluice_store_acquire_at each at the same reading, to store b. a and b
 * are alike, each on its own manual clock (ca, cb), moved alike between
 * batches. Every result and decision must be equal, and so must the
 * stores' counts after each batch. Returns the number of differences (each
 * printed). Uses check.h's check_range_. */
static inline long batches_equal_singles(sluice_store *a, sluice_clock *ca, sluice_store *b,
                                         sluice_clock *cb, long batches, uint64_t seed) {
    static const char *const spec[] = {STORE_TEST_SPECS};
    enum { SPECS = sizeof spec / sizeof spec[0], KEYS = 24, MAX_BATCH = 40 };
    sluice_policy *pol[SPECS];
    for (size_t i = 0; i < SPECS; i++) pol[i] = policy_i(i, spec[i]);
    char keys[KEYS][32]; /* 2..16 bytes, and 3 longer (hashed and kept otherwise) */
    for (int k = 0; k < KEYS; k++) {
        if (k % 8 == 7) snprintf(keys[k], sizeof keys[k], "a-key-longer-than-16-bytes-%d", k);
        else snprintf(keys[k], sizeof keys[k], "k%0*d", 1 + (k * 5) % 15, k);
    }
    uint64_t rs = seed;
    long failures = 0, decided = 0;
    for (long n_batch = 0; n_batch < batches && failures == 0; n_batch++) {
        sluice_request req[MAX_BATCH];
        sluice_decision got[MAX_BATCH], want;
        int rc[MAX_BATCH];
        size_t n = (size_t)check_range_(&rs, 1, MAX_BATCH);
        for (size_t i = 0; i < n; i++) {
            size_t sp = (size_t)check_range_(&rs, 0, SPECS - 1);
            int key = (int)(check_range_(&rs, 0, 2) == 0 ? check_range_(&rs, 0, KEYS - 1)
                                                          : check_range_(&rs, 0, 3));
            req[i] = (sluice_request){pol[sp], keys[key], strlen(keys[key]), 1};
            int64_t roll = check_range_(&rs, 0, 99);
            if (roll < 10) req[i].cost = check_range_(&rs, 1, 3);
            else if (roll == 10) req[i].cost = 0;      /* SLUICE_ECOST */
            else if (roll == 11) req[i].key_len = 0;   /* SLUICE_EINVAL */
            else if (roll == 12) req[i].policy = NULL; /* SLUICE_EINVAL */
        }
        if (sluice_store_acquire_many(a, req, n, got, rc) != 0) failures++;
        int64_t now = sluice_clock_now_ms(cb);
        for (size_t i = 0; i < n && failures == 0; i++) {
            int want_rc = sluice_store_acquire_at(b, req[i].policy, req[i].key, req[i].key_len,
                                                  req[i].cost, now, &want);
            if (rc[i] != want_rc || (want_rc == 0 && !same(&got[i], &want))) {
                fprintf(stderr, "batch %ld request %zu: rc %d, one at a time %d\n", n_batch, i, rc[i],
                        want_rc);
                if (want_rc == 0) print_decision("batch", &got[i]), print_decision("one", &want);
                failures++;
            }
            decided += want_rc == 0;
        }
        sluice_stats sa = stats(a), sb = stats(b);
        if (memcmp(&sa, &sb, sizeof sa) != 0) {
            fprintf(stderr,
                    "batch %ld: the stores' counts differ: keys %lld/%lld allowed %lld/%lld denied %lld/%lld "
                    "forgotten %lld/%lld evicted %lld/%lld refused %lld/%lld shadow_denied %lld/%lld\n",
                    n_batch, (long long)sa.keys, (long long)sb.keys, (long long)sa.allowed, (long long)sb.allowed,
                    (long long)sa.denied, (long long)sb.denied, (long long)sa.forgotten, (long long)sb.forgotten,
                    (long long)sa.evicted, (long long)sb.evicted, (long long)sa.refused, (long long)sb.refused,
                    (long long)sa.shadow_denied, (long long)sb.shadow_denied);
            failures++;
        }
        int64_t step =
            check_range_(&rs, 0, 9) < 8 ? check_range_(&rs, 0, 5) : check_range_(&rs, 0, 200);
        sluice_clock_manual_advance(ca, step);
        sluice_clock_manual_advance(cb, step);
    }
    sluice_stats st = stats(a);
    printf("     %ld decisions in %ld batches; %lld forgotten, %lld evicted\n", decided, batches,
           (long long)st.forgotten, (long long)st.evicted);
    for (size_t i = 0; i < SPECS; i++) sluice_policy_free(pol[i]);
    return failures;
}

/* batches_equal_singles on two stores opened at url_a and url_b (alike),
 * each on its own manual clock; churn: the run must also have forgotten
 * and evicted keys (a table small enough). Returns the differences, plus
 * one for a store that did not open or a table that did not churn. */
static inline long batches_on(const char *url_a, const char *url_b, long batches, uint64_t seed,
                              int churn) {
    sluice_clock *ca = sluice_clock_manual_new(1000), *cb = sluice_clock_manual_new(1000);
    sluice_store *a = open_store(url_a, ca), *b = open_store(url_b, cb);
    long failures = 1;
    if (a && b) {
        failures = batches_equal_singles(a, ca, b, cb, batches, seed);
        sluice_stats st = stats(a);
        if (churn && (st.forgotten == 0 || st.evicted == 0)) {
            fprintf(stderr, "the table did not churn: %lld forgotten, %lld evicted\n",
                    (long long)st.forgotten, (long long)st.evicted);
            failures++;
        }
    }
    sluice_store_close(a);
    sluice_store_close(b);
    sluice_clock_free(ca);
    sluice_clock_free(cb);
    return failures;
}

/* Keys that differ only past their first 8 bytes (9..16 bytes long, one
 * prefix, NUL bytes in the rest) stay apart: each keeps a limit of its own
 * (capacity 1: its first request allowed, its second denied). s holds at
 * least 40 keys and puts them where their comparison decides (one bucket,
 * or colliding hashes). Returns the number of keys mixed up (printed). */
static inline long prefix_keys_stay_apart(sluice_store *s) {
    sluice_policy *p = policy("one", "token-bucket capacity=1 rate=1/30d");
    enum { PER_LEN = 5 };
    long failures = 0;
    for (int round = 0; round < 2; round++) {
        for (size_t len = 9; len <= 16; len++) {
            for (int j = 0; j < PER_LEN; j++) {
                uint8_t key[16] = {'A', 'B', 'C', 'D', 'E', 'F', 'G', 'H'};
                key[8] = (uint8_t)(j * 3); /* 0 for j = 0 */
                key[len - 1] = (uint8_t)('a' + j);
                sluice_decision d;
                int rc = sluice_store_acquire_at(s, p, key, len, 1, 1000, &d);
                if (rc != 0 || d.allowed != (round == 0)) {
                    fprintf(stderr, "key of %zu bytes #%d, request %d: rc %d allowed %d\n", len, j,
                            round + 1, rc, d.allowed);
                    failures++;
                }
            }
        }
    }
    if (stats(s).keys != 8 * PER_LEN) {
        fprintf(stderr, "%lld keys held, %d expected\n", (long long)stats(s).keys, 8 * PER_LEN);
        failures++;
    }
    sluice_policy_free(p);
    return failures;
}

/* Every verb on a local store (memory:, shm:) fills every field of the
 * decision, local (false) too, over whatever the caller's struct held:
 * for each policy of STORE_TEST_SPECS, a key held and one not. */
static inline void check_decisions_not_local(sluice_store *s) {
    static const char *const specs[] = {STORE_TEST_SPECS STORE_TEST_SHADOW_SPECS};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        sluice_policy *p = policy("not-local", specs[i]);
        if (!p) continue;
        for (int held = 0; held <= 1; held++) {
            const char *key = held ? "held" : "not-held";
            sluice_decision d;
            int64_t t = 1000;
            if (held) sluice_store_acquire_at(s, p, key, strlen(key), 1, t, &d);
            for (int verb = 0; verb < 4; verb++) {
                memset(&d, 0xa5, sizeof d);
                int rc = verb == 0   ? sluice_store_acquire_at(s, p, key, strlen(key), 1, t, &d)
                         : verb == 1 ? sluice_store_peek_at(s, p, key, strlen(key), 1, t, &d)
                         : verb == 2 ? sluice_store_refund_at(s, p, key, strlen(key), 1, t, &d)
                                     : sluice_store_reset(s, p, key, strlen(key), &d);
                CHECK_EQ(rc, 0);
                if (d.local != false) fprintf(stderr, "%s, verb %d, %s: local is not false\n", specs[i], verb, key);
                CHECK(d.local == false && d.enforced == true);
            }
        }
        sluice_policy_free(p);
    }
}

#endif
