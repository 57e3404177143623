/* sluice_cases.c: sluice's side of `make bench-peers`, the cases that
 * go_rate.go and GuavaRate.java measure for golang.org/x/time/rate and
 * Guava's RateLimiter, with the same workloads and the same timing.
 *
 *   make bench-peers                      builds and runs it (bench/peers/run.sh)
 *   ./build/peers/sluice_cases            this one alone, after that
 *
 * Not in `make bench` (that runs the programs of bench/ itself, not of
 * bench/peers/): it exists to be compared.
 *
 * Timing, as bench/bench_store.c: wall ns per decision with CLOCK_MONOTONIC;
 * a pilot doubles N until a run takes 5 ms and sizes a run to ~60 ms, one
 * run warms up (and sizes the runs instead when it was faster than the
 * pilot, which the shared host may have stopped for a few ms), 9 runs are
 * timed. "ns/op" is their median, "min" the fastest, "spread" (slowest -
 * fastest) / median. One thread, not pinned (as the peers' harnesses are
 * not); the process starts and joins a thread first, as bench/ does, since
 * glibc skips some atomics in a process that never had a second one, which
 * no process sharing a limiter is.
 *
 * Policy: one token bucket of capacity 10^9 refilling 10^9 per s, cost 1,
 * so every decision is on the allow path; each run counts the decisions
 * allowed and the program exits 1 unless that is every one.
 *
 * Cases (the first word of a result line is the name run.sh reads):
 *  sluice_acquire     one limiter, sluice_acquire: reads the default clock
 *                     itself (beside Guava's tryAcquire and Go's Allow).
 *  sluice_acquire_at  one limiter, sluice_acquire_at at a reading taken once
 *                     per run, as an event loop reads once a turn (beside
 *                     Go's AllowN(t, 1) with t taken once per run).
 *  sluice_store_1k    the "memory:" store, sluice_store_acquire (it reads the
 *  sluice_store_1m    clock), 1,000 and 1,000,000 keys: 16-byte keys
 *                     "user:00000000042" in one array, 2^21 indices drawn
 *                     uniformly at random (splitmix64, fixed seed) and
 *                     precomputed, each run going on where the last one
 *                     stopped. The store is set up as bench_store's:
 *                     max_keys = the number of keys, on_full=refuse, every
 *                     key inserted once in a random order before timing; the
 *                     few keys that meet a full shard are refused and left
 *                     out of the order (the count is printed), so every timed
 *                     decision is the allow path on a held key (checked in
 *                     the store's stats). Beside Go's map of limiters.
 */
#define _GNU_SOURCE
#include "sluice.h"

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "../bench_util.h"

enum { N_RUNS = 9 };
#define RUN_NS 60e6  /* one timed run */
#define PILOT_NS 5e6 /* the pilot that sizes N */

#define KEY_LEN 16
#define ORDER_LEN (UINT32_C(1) << 21) /* indices per order, a power of two */

static int failed; /* something errored or left the allow path: exit 1 */

/* ------------------------------------------------------------------------ */
/* The cases' state and work                                                */
/* ------------------------------------------------------------------------ */

typedef struct {
    sluice_limiter *limiter; /* one-limiter cases */
    int at;                  /* sluice_acquire_at at a reading per run */
    sluice_store *store;     /* keyed cases */
    const sluice_policy *policy;
    const uint8_t *keys;     /* n_keys * KEY_LEN bytes */
    const uint32_t *order;   /* ORDER_LEN indices of held keys */
    uint32_t pos;            /* where the next run goes on in order */
    uint64_t denied;         /* must stay 0 */
    int rc;                  /* an error code seen, or 0 */
} cases_ctx;

static void work_limiter(void *ctx, int tid, uint64_t n) {
    (void)tid;
    cases_ctx *c = ctx;
    sluice_decision d;
    uint64_t allowed = 0;
    int rc = 0;
    if (c->at) {
        int64_t now_ms = sluice_clock_now_ms(sluice_clock_monotonic());
        for (uint64_t i = 0; i < n; i++) {
            int e = sluice_acquire_at(c->limiter, 1, now_ms, &d);
            if (e) rc = e;
            allowed += d.allowed;
        }
    } else {
        for (uint64_t i = 0; i < n; i++) {
            int e = sluice_acquire(c->limiter, 1, &d);
            if (e) rc = e;
            allowed += d.allowed;
        }
    }
    c->denied += n - allowed;
    if (rc) c->rc = rc;
}

static void work_store(void *ctx, int tid, uint64_t n) {
    (void)tid;
    cases_ctx *c = ctx;
    sluice_decision d = {0};
    uint64_t allowed = 0;
    uint32_t pos = c->pos;
    int rc = 0;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *key = c->keys + (size_t)c->order[pos] * KEY_LEN;
        pos = (pos + 1) & (ORDER_LEN - 1);
        int e = sluice_store_acquire(c->store, c->policy, key, KEY_LEN, 1, &d);
        if (e) rc = e;
        allowed += d.allowed;
    }
    c->pos = pos;
    c->denied += n - allowed;
    if (rc) c->rc = rc;
}

/* ------------------------------------------------------------------------ */
/* Timing                                                                    */
/* ------------------------------------------------------------------------ */

/* A pilot doubling n until a run takes PILOT_NS, one warm-up run of the n
 * that takes RUN_NS, then N_RUNS timed runs of it (of the n the warm-up run
 * says when it was the faster). */
static result measure(work_fn fn, void *ctx) {
    result r = {0};
    uint64_t n = 256;
    int64_t t;
    for (;;) {
        t = timed(fn, ctx, 1, n);
        r.ops += n;
        if (t >= PILOT_NS || n >= (UINT64_C(1) << 40)) break;
        n *= 2;
    }
    double per = (double)(t > 0 ? t : 1) / (double)n;
    n = (uint64_t)(RUN_NS / per);
    if (n < 1) n = 1;
    /* the warm-up run; when it ran faster than the pilot, it sizes the runs
     * instead (a pilot that the shared host stopped for a while sizes them
     * too short) */
    t = timed(fn, ctx, 1, n);
    r.ops += n;
    if ((double)t / (double)n < per) n = (uint64_t)(RUN_NS / ((double)(t > 0 ? t : 1) / (double)n));
    if (n < 1) n = 1;
    double v[N_RUNS];
    for (int i = 0; i < N_RUNS; i++) {
        v[i] = (double)timed(fn, ctx, 1, n) / (double)n;
        r.ops += n;
    }
    qsort(v, N_RUNS, sizeof v[0], cmp_double);
    r.med = v[N_RUNS / 2];
    r.min = v[0];
    r.spread = r.med > 0 ? (v[N_RUNS - 1] - v[0]) / r.med : 0;
    return r;
}

/* One result line; run.sh reads the first two fields. */
static void report(const char *name, result r, const cases_ctx *c) {
    printf("%-18s %8.2f ns/op  min %8.2f  spread %5.1f%%  %" PRIu64 " decisions, %" PRIu64
           " denied\n",
           name, r.med, r.min, 100 * r.spread, r.ops, c->denied);
    if (c->denied) failed = 1;
    if (c->rc) {
        fprintf(stderr, "sluice_cases: %s: %s\n", name, sluice_strerror(c->rc));
        failed = 1;
    }
}

/* ------------------------------------------------------------------------ */
/* Setup                                                                     */
/* ------------------------------------------------------------------------ */

static void die(const char *what, int rc) {
    fprintf(stderr, "sluice_cases: %s: %s\n", what, sluice_strerror(rc));
    exit(1);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "sluice_cases: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

/* splitmix64: a fixed seed, so every run draws the same order. */
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

/* a uniform draw from 0..len-1 */
static uint32_t draw(uint64_t *rng, uint32_t len) {
    return (uint32_t)(((rng_next(rng) >> 32) * len) >> 32);
}

static sluice_config bucket(void) {
    return sluice_token_bucket(SLUICE_LIMIT_MAX, SLUICE_LIMIT_MAX, 1000);
}

static void bench_limiter(const char *name, int at) {
    sluice_config cfg = bucket();
    cases_ctx c = {.at = at};
    int rc = sluice_limiter_new(&cfg, NULL, &c.limiter);
    if (rc) die("sluice_limiter_new", rc);
    report(name, measure(work_limiter, &c), &c);
    sluice_limiter_free(c.limiter);
}

static void bench_store(const char *name, uint32_t n_keys) {
    uint8_t *keys = xmalloc((size_t)n_keys * KEY_LEN);
    for (uint32_t i = 0; i < n_keys; i++) {
        char buf[KEY_LEN + 1];
        snprintf(buf, sizeof buf, "user:%011" PRIu32, i);
        memcpy(keys + (size_t)i * KEY_LEN, buf, KEY_LEN);
    }
    sluice_config cfg = bucket();
    sluice_policy *policy;
    int rc = sluice_policy_new("peers", &cfg, 1, &policy);
    if (rc) die("sluice_policy_new", rc);
    sluice_store_options o = SLUICE_STORE_OPTIONS_INIT;
    o.max_keys = n_keys;
    o.on_full = SLUICE_ON_FULL_REFUSE;
    sluice_store *store;
    rc = sluice_store_open("memory:", &o, &store);
    if (rc) die("sluice_store_open", rc);

    /* every key once, in a random order (Fisher-Yates), at one reading (so
     * no key is fresh, and none is forgotten to make room for another);
     * held[] gets the indices of the keys the store took */
    uint32_t *perm = xmalloc((size_t)n_keys * sizeof *perm);
    uint32_t *held = xmalloc((size_t)n_keys * sizeof *held), n_held = 0;
    uint64_t rng = UINT64_C(0x5417);
    for (uint32_t i = 0; i < n_keys; i++) perm[i] = i;
    for (uint32_t i = n_keys - 1; i > 0; i--) {
        uint32_t j = draw(&rng, i + 1), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t now_ms = sluice_clock_now_ms(sluice_clock_monotonic());
    for (uint32_t i = 0; i < n_keys; i++) {
        sluice_decision d;
        rc = sluice_store_acquire_at(store, policy, keys + (size_t)perm[i] * KEY_LEN, KEY_LEN, 1,
                                     now_ms, &d);
        if (rc == SLUICE_EFULL) continue;
        if (rc) die("warming the store", rc);
        held[n_held++] = perm[i];
    }
    uint32_t *order = xmalloc(ORDER_LEN * sizeof *order);
    rng = UINT64_C(0x5eed) + n_keys;
    for (uint32_t i = 0; i < ORDER_LEN; i++) order[i] = held[draw(&rng, n_held)];

    printf("# %s: %" PRIu32 " keys, %" PRIu32 " held (%" PRIu32 " refused: their shard was full)\n",
           name, n_keys, n_held, n_keys - n_held);
    cases_ctx c = {.store = store, .policy = policy, .keys = keys, .order = order};
    sluice_stats s0, s1;
    sluice_store_stats(store, &s0);
    result r = measure(work_store, &c);
    sluice_store_stats(store, &s1);
    report(name, r, &c);
    if (s1.allowed - s0.allowed != (int64_t)r.ops || s1.keys != s0.keys || s1.evicted != s0.evicted ||
        s1.forgotten != s0.forgotten || s1.refused != s0.refused) {
        fprintf(stderr,
                "sluice_cases: %s: the store left the allow path on held keys: allowed +%" PRId64
                " of %" PRIu64 ", keys %" PRId64 " -> %" PRId64 ", evicted +%" PRId64
                ", forgotten +%" PRId64 ", refused +%" PRId64 "\n",
                name, s1.allowed - s0.allowed, r.ops, s0.keys, s1.keys, s1.evicted - s0.evicted,
                s1.forgotten - s0.forgotten, s1.refused - s0.refused);
        failed = 1;
    }
    sluice_store_close(store);
    sluice_policy_free(policy);
    free(order);
    free(held);
    free(perm);
    free(keys);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    pthread_t th; /* multi-threaded (see above), not pinned */
    if (pthread_create(&th, NULL, bench_no_op, NULL) != 0 || pthread_join(th, NULL) != 0) {
        fprintf(stderr, "sluice_cases: pthread_create failed\n");
        return 1;
    }
    const char *clock_src = "CLOCK_MONOTONIC";
#ifdef CLOCK_MONOTONIC_COARSE
    struct timespec res;
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 && res.tv_sec == 0 && res.tv_nsec <= 1000000)
        clock_src = "CLOCK_MONOTONIC_COARSE"; /* as src/clock.c chooses */
#endif
    printf("# sluice_cases: sluice %s, token bucket 1e9 per s, capacity 1e9; the default clock reads "
           "%s; median of %d runs of ~%.0f ms\n",
           sluice_version(), clock_src, N_RUNS, RUN_NS / 1e6);
    bench_limiter("sluice_acquire", 0);
    bench_limiter("sluice_acquire_at", 1);
    bench_store("sluice_store_1k", 1000);
    bench_store("sluice_store_1m", 1000000);
    return failed;
}
