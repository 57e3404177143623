/* bench_core.c: what one decision costs, next to the floor it cannot beat.
 *
 *   make bench              builds (-O2) and runs every program in bench/
 *   ./build/bench_core      this one alone, after `make build`
 *
 * Benchmarks report figures; tests assert behaviour. This program prints and
 * exits 0; it exits 1 only when something errors (a call fails, a case
 * leaves the path it is meant to measure, a counter comes out wrong).
 *
 * Every figure is nanoseconds of wall time per operation, timed with
 * CLOCK_MONOTONIC: a pilot sizes N so that one run takes about 60 ms, one
 * run warms up, then 5 runs are timed. "ns/op" is the median of the 5;
 * "min" the fastest; "spread" (slowest - fastest) / median, the noise of
 * this run. On a VM, run it twice before trusting a difference of a few %.
 * With 2 threads the figure is wall time / the operations of both threads:
 * aggregate throughput, so a figure below the 1-thread one means the two
 * threads gained by running in parallel, above it that they got in each
 * other's way. Threads are pinned, one per CPU, when there are two CPUs.
 * Two-thread figures swing between runs (how often the threads collide
 * varies); "met each other" says how often they did on the limiter.
 *
 * Sections:
 *  clocks   one read of each clock source; sluice's TSC clock (rdtsc, the
 *           anchor's multiply-shift, the high-water mark: src/tsc.c) where
 *           the CPU's TSC is invariant; and sluice's default monotonic clock,
 *           naming the source it reads here (sluice_clock_source()), and as
 *           it reads with SLUICE_CLOCK=monotonic (the fallback).
 *  floors   cas64: load a 64-bit word in its own 64-byte line, add, CAS it
 *           back (successful each time): what the token bucket's lock-free
 *           word path does besides arithmetic. rdtsc + cas64: the same with
 *           a raw rdtsc whose value feeds the CAS; clock + cas64: with one
 *           read of the default clock instead. A "via a call" line shows
 *           what an out-of-line call adds. gcra + cas64: a whole token
 *           bucket decision on one word without the library's calls (the
 *           bucket's word step of algo/algo.h, the CAS, the decision's
 *           fields filled), at a reading: the floor of acquire_at; clock +
 *           gcra + cas64, one read of the default clock each: of acquire.
 *  locks    a take + give (around a counter increment) of sluice's lock, of
 *           a pthread mutex, and a 128-bit CAS (lock cmpxchg16b, x86-64
 *           only) on a 16-byte pair, alone and with two threads on one
 *           object: the evidence for the lock of the window algorithms.
 *           (The process starts a thread first: glibc skips a mutex's
 *           atomics while a process has never had one.)
 *  limiters ns per decision of cost 1, for sluice_acquire (reads the
 *           default clock itself) and sluice_acquire_at (the caller passes a
 *           reading), on the allow and the deny path, 1 and 2 threads on one
 *           limiter. Every decision is checked to stay on its path.
 *             allow: token/leaky bucket capacity 1e9, 1e9 per s; fixed and
 *               sliding window limit 1e9 per 1 h; sliding log limit 1e9 per
 *               1 s; composite = that token bucket AND that sliding window.
 *               acquire_at passes one frozen reading for the whole
 *               measurement (an event loop's turn), so buckets and windows
 *               just count up; 1e9 outlasts it. The sliding log's reading
 *               instead advances 1 ms per decision, so its ring holds its
 *               steady state of 1000 entries (one per ms of the window) and
 *               each decision drops the oldest entry and appends one: O(log
 *               1000) searches and bounded memory (with 2 threads, each
 *               advancing its own reading, about half the decisions come at
 *               a reading behind the other's and merge into the newest
 *               entry: cheaper work than 1 thread's). sluice_acquire reads the
 *               real clock: buckets refill 1e6 per ms, far more than is
 *               taken; the log merges each ms's admissions into one entry.
 *             deny: capacity/limit 1, already used, refill 1 per 30 days or
 *               window 30 days: every decision is a denial. The composite's
 *               token bucket is exhausted while its window still admits, so
 *               a denial asks both parts and reports the window's state.
 *  verbs    on the same allow-path limiters, 1 thread, at acquire_at's
 *           readings: sluice_peek_at of cost 1, and acquire_at followed by
 *           the sluice_refund_at that undoes it (a refund of a full bucket
 *           is a compare and a return: this one has work to do).
 *  goals    the ratios the issues set, with PASS/MISS (informational): the
 *           token bucket's acquire allow path <= 1.3x clock + cas64 and
 *           <= 1.3x rdtsc + cas64, its acquire_at <= 1.3x cas64, and deny no
 *           slower than allow; a peek within 1.2x of acquire_at, and a refund
 *           (its pair less the acquire_at) within 1.2x too.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "sluice.h"

#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <stdatomic.h>

#include "bench_util.h"

#if defined(__x86_64__) || defined(__i386__)
#include <x86intrin.h>
#define HAVE_RDTSC 1
#endif
#if defined(__x86_64__)
#define HAVE_CX16 1
#endif

/* ------------------------------------------------------------------------ */
/* Timing                                                                    */
/* ------------------------------------------------------------------------ */

enum { N_RUNS = 5 };
#define RUN_NS 60e6  /* one timed run */
#define PILOT_NS 5e6 /* the pilot that sizes N */

static volatile uint64_t sink; /* results go here: nothing is dead code */
static int failed;             /* something errored: exit 1 */

/* Pilot (doubling n until a run takes PILOT_NS), one warm-up run of the
 * size that takes RUN_NS, then N_RUNS timed runs. */
static result measure(work_fn fn, void *ctx, int nthreads) {
    result r = {0};
    uint64_t n = 256;
    int64_t t;
    for (;;) {
        t = timed(fn, ctx, nthreads, n);
        r.ops += n * (uint64_t)nthreads;
        if (t >= PILOT_NS || n >= (UINT64_C(1) << 40)) break;
        n *= 2;
    }
    double per = (double)(t > 0 ? t : 1) / (double)n;
    n = (uint64_t)(RUN_NS / per);
    if (n < 1) n = 1;
    timed(fn, ctx, nthreads, n);
    r.ops += n * (uint64_t)nthreads;
    double v[N_RUNS];
    for (int i = 0; i < N_RUNS; i++) {
        v[i] = (double)timed(fn, ctx, nthreads, n) / (double)(n * (uint64_t)nthreads);
        r.ops += n * (uint64_t)nthreads;
    }
    qsort(v, N_RUNS, sizeof v[0], cmp_double);
    r.med = v[N_RUNS / 2];
    r.min = v[0];
    r.spread = r.med > 0 ? (v[N_RUNS - 1] - v[0]) / r.med : 0;
    return r;
}

/* One line: a label, then the figures. extra (may be "") goes at the end. */
static void row(const char *label, const char *unit, result r, const char *extra) {
    printf("%-44s %8.2f ns/%-9s min %8.2f  spread %5.1f%%%s%s\n", label, r.med, unit, r.min,
           100 * r.spread, *extra ? "  " : "", extra);
}

/* ------------------------------------------------------------------------ */
/* Clock sources                                                             */
/* ------------------------------------------------------------------------ */

static void work_clock_gettime(void *ctx, int tid, uint64_t n) {
    (void)tid;
    clockid_t id = *(const clockid_t *)ctx;
    struct timespec ts;
    uint64_t acc = 0;
    for (uint64_t i = 0; i < n; i++) {
        clock_gettime(id, &ts);
        acc += (uint64_t)ts.tv_nsec;
    }
    sink += acc;
}

#ifdef HAVE_RDTSC
static void work_rdtsc(void *ctx, int tid, uint64_t n) {
    (void)ctx, (void)tid;
    uint64_t acc = 0;
    for (uint64_t i = 0; i < n; i++) acc += __rdtsc();
    sink += acc;
}
#endif

#ifdef SLUICE__HAVE_TSC
static void work_tsc_clock(void *ctx, int tid, uint64_t n) {
    (void)ctx, (void)tid;
    uint64_t acc = 0;
    for (uint64_t i = 0; i < n; i++)
        acc += (uint64_t)sluice__tsc_ms(&sluice__tsc_process, __rdtsc(), &sluice__tsc_real);
    sink += acc;
}
#endif

static void work_sluice_clock(void *ctx, int tid, uint64_t n) {
    (void)ctx, (void)tid;
    const sluice_clock *c = sluice_clock_monotonic();
    uint64_t acc = 0;
    for (uint64_t i = 0; i < n; i++) acc += (uint64_t)sluice_clock_now_ms(c);
    sink += acc;
}

static void res_text(clockid_t id, char *buf, size_t len) {
    struct timespec res;
    if (clock_getres(id, &res) != 0) snprintf(buf, len, "resolution unknown");
    else if (res.tv_sec == 0 && res.tv_nsec < 1000)
        snprintf(buf, len, "resolution %ld ns", res.tv_nsec);
    else
        snprintf(buf, len, "resolution %.3f ms", (double)res.tv_sec * 1e3 + res.tv_nsec / 1e6);
}

static void bench_clocks(void) {
    char extra[96];
    printf("\n== clock sources: one read (ns/read)\n");
    static const struct {
        clockid_t id;
        const char *name;
    } srcs[] = {
        {CLOCK_MONOTONIC, "clock_gettime(CLOCK_MONOTONIC)"},
#ifdef CLOCK_MONOTONIC_COARSE
        {CLOCK_MONOTONIC_COARSE, "clock_gettime(CLOCK_MONOTONIC_COARSE)"},
#endif
        {CLOCK_REALTIME, "clock_gettime(CLOCK_REALTIME)"},
    };
    for (size_t i = 0; i < sizeof srcs / sizeof srcs[0]; i++) {
        clockid_t id = srcs[i].id;
        res_text(id, extra, sizeof extra);
        row(srcs[i].name, "read", measure(work_clock_gettime, &id, 1), extra);
    }
#ifdef HAVE_RDTSC
    /* the TSC's rate, to turn ns into TSC ticks (not always the core clock) */
    int64_t t0 = now_ns();
    uint64_t c0 = __rdtsc();
    while (now_ns() - t0 < 20000000) {
    }
    double ghz = (double)(__rdtsc() - c0) / (double)(now_ns() - t0);
    snprintf(extra, sizeof extra, "TSC ticks at %.3f GHz", ghz);
    row("rdtsc", "read", measure(work_rdtsc, NULL, 1), extra);
#else
    printf("%-44s (not x86: skipped)\n", "rdtsc");
#endif
#ifdef SLUICE__HAVE_TSC
    if (sluice__tsc_invariant()) {
        /* past its calibration (20 ms) first */
        for (int64_t end = now_ns() + 1000000000;
             atomic_load(&sluice__tsc_process.phase) != SLUICE__TSC_ANCHORED && now_ns() < end;)
            sluice__tsc_ms(&sluice__tsc_process, __rdtsc(), &sluice__tsc_real);
        row("sluice TSC clock: rdtsc, anchor, high mark", "read", measure(work_tsc_clock, NULL, 1),
            "src/tsc.c, inline");
    } else {
        printf("%-44s (no invariant TSC: skipped)\n", "sluice TSC clock");
    }
#endif
    /* the source sluice's default clock reads (src/clock.c chooses) */
    const char *which = sluice_clock_source();
    char why[96] = "";
#ifdef CLOCK_MONOTONIC_COARSE
    struct timespec res;
    if (strcmp(which, "tsc") && clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0)
        snprintf(why, sizeof why, " (COARSE resolution %.3f ms %s 1 ms)", (double)res.tv_sec * 1e3 + res.tv_nsec / 1e6,
                 res.tv_sec == 0 && res.tv_nsec <= 1000000 ? "<=" : ">");
#endif
    snprintf(extra, sizeof extra, "reads %s%s", which, why);
    row("sluice_clock_now_ms(sluice_clock_monotonic())", "read",
        measure(work_sluice_clock, NULL, 1), extra);
    /* and as it reads with SLUICE_CLOCK=monotonic */
    if (!strcmp(which, "tsc")) {
        setenv("SLUICE_CLOCK", "monotonic", 1);
        sluice__clock_force_source(NULL);
        snprintf(extra, sizeof extra, "reads %s", sluice_clock_source());
        row("  the same with SLUICE_CLOCK=monotonic", "read", measure(work_sluice_clock, NULL, 1), extra);
        unsetenv("SLUICE_CLOCK");
        sluice__clock_force_source(NULL);
    }
}

/* ------------------------------------------------------------------------ */
/* Floors: CAS alone, clock + CAS                                            */
/* ------------------------------------------------------------------------ */

typedef struct {
    _Alignas(64) _Atomic uint64_t word;
    atomic_ullong retries; /* failed CASes (contention) */
} cas_ctx;

/* Load, add, CAS back, retrying on failure: the shape of the word path. */
static void work_cas64(void *ctx, int tid, uint64_t n) {
    (void)tid;
    cas_ctx *c = ctx;
    uint64_t fails = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t w = atomic_load_explicit(&c->word, memory_order_acquire);
        while (!atomic_compare_exchange_strong_explicit(&c->word, &w, w + 1, memory_order_acq_rel,
                                                        memory_order_acquire))
            fails++;
    }
    atomic_fetch_add(&c->retries, fails);
}

/* The same, one operation per out-of-line call. */
__attribute__((noinline)) static uint64_t cas64_call(_Atomic uint64_t *word, uint64_t add) {
    uint64_t w = atomic_load_explicit(word, memory_order_acquire);
    while (!atomic_compare_exchange_strong_explicit(word, &w, w + add, memory_order_acq_rel,
                                                    memory_order_acquire)) {
    }
    return w;
}

static void work_cas64_call(void *ctx, int tid, uint64_t n) {
    (void)tid;
    cas_ctx *c = ctx;
    uint64_t acc = 0;
    for (uint64_t i = 0; i < n; i++) acc += cas64_call(&c->word, 1);
    sink += acc;
}

#ifdef HAVE_RDTSC
/* One raw rdtsc, its value added by the CAS. */
static void work_rdtsc_cas64(void *ctx, int tid, uint64_t n) {
    (void)tid;
    cas_ctx *c = ctx;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t t = __rdtsc();
        uint64_t w = atomic_load_explicit(&c->word, memory_order_acquire);
        while (!atomic_compare_exchange_strong_explicit(&c->word, &w, w + t, memory_order_acq_rel,
                                                        memory_order_acquire)) {
        }
    }
}
#endif

/* One read of the default clock, its value added by the CAS. */
static void work_clock_cas64(void *ctx, int tid, uint64_t n) {
    (void)tid;
    cas_ctx *c = ctx;
    const sluice_clock *clk = sluice_clock_monotonic();
    for (uint64_t i = 0; i < n; i++) {
        uint64_t t = (uint64_t)sluice_clock_now_ms(clk);
        uint64_t w = atomic_load_explicit(&c->word, memory_order_acquire);
        while (!atomic_compare_exchange_strong_explicit(&c->word, &w, w + t, memory_order_acq_rel,
                                                        memory_order_acquire)) {
        }
    }
}

/* A token bucket's word (TAT, relative to epoch_ms) decided inline. */
typedef struct {
    _Alignas(64) _Atomic int64_t word;
    sluice__params params;
    int64_t epoch_ms;
} gcra_ctx;

static inline __attribute__((always_inline)) int gcra_decide(gcra_ctx *g, int64_t ts, sluice_decision *d) {
    const sluice__params *p = &g->params;
    int64_t w = atomic_load_explicit(&g->word, memory_order_acquire), b, nb, nw;
    for (;;) {
        int step = sluice__gcra_word_step(p, w, ts, 1, &b, &nb, &nw);
        if (step <= 0) {
            if (step == 0) sluice__gcra_denied(p, b, 1, d);
            return 0;
        }
        if (atomic_compare_exchange_weak_explicit(&g->word, &w, nw, memory_order_acq_rel, memory_order_acquire))
            break;
    }
    sluice__gcra_allowed(p, b, nb, 0, d);
    return 1;
}

/* At one reading a run, as the limiter rows of acquire_at. */
static void work_gcra_cas64(void *ctx, int tid, uint64_t n) {
    (void)tid;
    gcra_ctx *g = ctx;
    sluice_decision d = {0};
    int64_t ts = (sluice_clock_now_ms(sluice_clock_monotonic()) - g->epoch_ms) * g->params.r;
    uint64_t allowed = 0;
    for (uint64_t i = 0; i < n; i++) allowed += (uint64_t)gcra_decide(g, ts, &d);
    sink += allowed + (uint64_t)d.remaining;
}

/* Reading the default clock for each decision, as sluice_acquire. */
static void work_clock_gcra_cas64(void *ctx, int tid, uint64_t n) {
    (void)tid;
    gcra_ctx *g = ctx;
    const sluice_clock *clk = sluice_clock_monotonic();
    sluice_decision d = {0};
    uint64_t allowed = 0;
    for (uint64_t i = 0; i < n; i++)
        allowed += (uint64_t)gcra_decide(g, (sluice_clock_now_ms(clk) - g->epoch_ms) * g->params.r, &d);
    sink += allowed + (uint64_t)d.remaining;
}

static result floor_cas, floor_clock_cas, floor_rdtsc_cas, floor_gcra, floor_clock_gcra;

static void bench_floors(void) {
    printf("\n== floors: 1 thread (ns/op)\n");
    cas_ctx *c = aligned_alloc(64, sizeof(cas_ctx));
    if (!c) exit(1);
    atomic_init(&c->word, 0);
    atomic_init(&c->retries, 0);
    floor_cas = measure(work_cas64, c, 1);
    row("cas64: load, add, CAS (a loop)", "op", floor_cas, "floor of acquire_at");
    row("cas64 via an out-of-line call", "op", measure(work_cas64_call, c, 1),
        "what a call adds to it");
#ifdef HAVE_RDTSC
    floor_rdtsc_cas = measure(work_rdtsc_cas64, c, 1);
    row("rdtsc + cas64: raw rdtsc, CAS", "op", floor_rdtsc_cas, "floor of acquire on a TSC clock");
#endif
    floor_clock_cas = measure(work_clock_cas64, c, 1);
    row("clock + cas64: default clock read, CAS", "op", floor_clock_cas, "");
    free(c);

    /* the token bucket of the limiter rows' allow case: every decision admitted */
    gcra_ctx *g = aligned_alloc(64, sizeof(gcra_ctx));
    char err[128];
    sluice_config tb = sluice_token_bucket(SLUICE_LIMIT_MAX, SLUICE_LIMIT_MAX, 1000);
    if (!g || sluice__params_init(&tb, &g->params, err, sizeof err) != 0) {
        fprintf(stderr, "bench_core: the floor's bucket: %s\n", g ? err : "out of memory");
        exit(1);
    }
    atomic_init(&g->word, INT64_MIN);
    g->epoch_ms = sluice_clock_now_ms(sluice_clock_monotonic());
    floor_gcra = measure(work_gcra_cas64, g, 1);
    row("gcra + cas64: a bucket's decision on one word", "op", floor_gcra, "floor of acquire_at");
    floor_clock_gcra = measure(work_clock_gcra_cas64, g, 1);
    row("clock + gcra + cas64: the same, reading the clock", "op", floor_clock_gcra, "floor of acquire");
    free(g);
}

/* ------------------------------------------------------------------------ */
/* Locks: sluice's lock, pthread mutex, 128-bit CAS                          */
/* ------------------------------------------------------------------------ */

typedef struct {
    _Alignas(64) sluice__lock lk;
    uint64_t count; /* guarded by lk */
} slock_ctx;

static void work_slock(void *ctx, int tid, uint64_t n) {
    (void)tid;
    slock_ctx *c = ctx;
    for (uint64_t i = 0; i < n; i++) {
        sluice__lock_take(&c->lk);
        c->count++;
        sluice__lock_give(&c->lk);
    }
}

typedef struct {
    _Alignas(64) pthread_mutex_t mu;
    uint64_t count; /* guarded by mu */
} mutex_ctx;

static void work_mutex(void *ctx, int tid, uint64_t n) {
    (void)tid;
    mutex_ctx *c = ctx;
    for (uint64_t i = 0; i < n; i++) {
        pthread_mutex_lock(&c->mu);
        c->count++;
        pthread_mutex_unlock(&c->mu);
    }
}

#ifdef HAVE_CX16
typedef struct {
    _Alignas(64) struct {
        uint64_t lo, hi;
    } pair; /* 16-byte aligned (64, its own line) */
    atomic_ullong retries;
} cas128_ctx;

/* lock cmpxchg16b: when *p == (*lo, *hi) stores (nlo, nhi) and returns 1;
 * else loads *p into (*lo, *hi) and returns 0. Inline, so no libatomic. */
static inline int cas128(cas128_ctx *p, uint64_t *lo, uint64_t *hi, uint64_t nlo, uint64_t nhi) {
    unsigned char ok;
    __asm__ __volatile__("lock cmpxchg16b %1\n\tsetz %0"
                         : "=q"(ok), "+m"(p->pair), "+a"(*lo), "+d"(*hi)
                         : "b"(nlo), "c"(nhi)
                         : "memory", "cc");
    return ok;
}

/* Load the pair (two 8-byte loads; a torn pair only fails the CAS), add 1
 * to each half, CAS back, retrying on failure. */
static void work_cas128(void *ctx, int tid, uint64_t n) {
    (void)tid;
    cas128_ctx *c = ctx;
    uint64_t fails = 0;
    for (uint64_t i = 0; i < n; i++) {
        uint64_t lo = __atomic_load_n(&c->pair.lo, __ATOMIC_ACQUIRE);
        uint64_t hi = __atomic_load_n(&c->pair.hi, __ATOMIC_ACQUIRE);
        while (!cas128(c, &lo, &hi, lo + 1, hi + 1)) fails++;
    }
    atomic_fetch_add(&c->retries, fails);
}
#endif

static void check_count(const char *what, uint64_t got, uint64_t want) {
    if (got == want) return;
    fprintf(stderr, "bench_core: %s counted %" PRIu64 " operations, ran %" PRIu64 "\n", what, got,
            want);
    failed = 1;
}

static void bench_locks(void) {
    char label[64], extra[96];
    printf("\n== locks: take + give around a counter increment, or one successful CAS (ns/op)\n");
    for (int nt = 1; nt <= 2; nt++) {
        const char *thr = nt == 1 ? "1 thread" : "2 threads";

        slock_ctx *s = aligned_alloc(64, sizeof *s);
        if (!s) exit(1);
        memset(s, 0, sizeof *s);
        atomic_init(&s->lk.held, 0);
        atomic_init(&s->lk.contended, 0);
        result r = measure(work_slock, s, nt);
        check_count("sluice lock", s->count, r.ops);
        snprintf(label, sizeof label, "sluice lock (xchg; store)     %s", thr);
        snprintf(extra, sizeof extra, nt == 1 ? "" : "found held: %.1f%% of takes",
                 100.0 * atomic_load(&s->lk.contended) / (double)r.ops);
        row(label, "op", r, extra);
        free(s);

        mutex_ctx *m = aligned_alloc(64, sizeof *m);
        if (!m) exit(1);
        memset(m, 0, sizeof *m);
        pthread_mutex_init(&m->mu, NULL);
        r = measure(work_mutex, m, nt);
        check_count("pthread mutex", m->count, r.ops);
        snprintf(label, sizeof label, "pthread_mutex lock/unlock     %s", thr);
        row(label, "op", r, "");
        pthread_mutex_destroy(&m->mu);
        free(m);

#ifdef HAVE_CX16
        cas128_ctx *q = aligned_alloc(64, sizeof *q);
        if (!q) exit(1);
        memset(q, 0, sizeof *q);
        atomic_init(&q->retries, 0);
        r = measure(work_cas128, q, nt);
        check_count("cmpxchg16b", q->pair.lo, r.ops);
        check_count("cmpxchg16b (high half)", q->pair.hi, r.ops);
        snprintf(label, sizeof label, "cas128 (lock cmpxchg16b)      %s", thr);
        snprintf(extra, sizeof extra, nt == 1 ? "" : "retries: %.1f%% of ops",
                 100.0 * atomic_load(&q->retries) / (double)r.ops);
        row(label, "op", r, extra);
        free(q);
#else
        printf("cas128 (lock cmpxchg16b)      %s  (not x86-64: skipped)\n", thr);
#endif

        cas_ctx *c = aligned_alloc(64, sizeof *c);
        if (!c) exit(1);
        atomic_init(&c->word, 0);
        atomic_init(&c->retries, 0);
        r = measure(work_cas64, c, nt);
        check_count("cas64", atomic_load(&c->word), r.ops);
        snprintf(label, sizeof label, "cas64 (lock cmpxchg)          %s", thr);
        snprintf(extra, sizeof extra, nt == 1 ? "" : "retries: %.1f%% of ops",
                 100.0 * atomic_load(&c->retries) / (double)r.ops);
        row(label, "op", r, extra);
        free(c);
    }
}

/* ------------------------------------------------------------------------ */
/* Limiters                                                                  */
/* ------------------------------------------------------------------------ */

#define DAY_MS INT64_C(86400000)

enum { ALGO_TB, ALGO_LB, ALGO_FW, ALGO_SW, ALGO_LOG, ALGO_COMPOSITE, N_ALGOS };
static const char *const algo_names[N_ALGOS] = {"token-bucket", "leaky-bucket", "fixed-window",
                                                "sliding-window", "sliding-log", "composite"};

/* A policy on the allow path (allow = 1) or the deny path, in parts[]. */
static size_t configs(int algo, int allow, sluice_config parts[2]) {
    int64_t big = SLUICE_LIMIT_MAX;
    switch (algo) {
    case ALGO_TB:
        parts[0] = allow ? sluice_token_bucket(big, big, 1000) : sluice_token_bucket(1, 1, 30 * DAY_MS);
        return 1;
    case ALGO_LB:
        parts[0] = allow ? sluice_leaky_bucket(big, big, 1000) : sluice_leaky_bucket(1, 1, 30 * DAY_MS);
        return 1;
    case ALGO_FW:
        parts[0] = allow ? sluice_fixed_window(big, 3600000) : sluice_fixed_window(1, 30 * DAY_MS);
        return 1;
    case ALGO_SW:
        parts[0] = allow ? sluice_sliding_window(big, 3600000) : sluice_sliding_window(1, 30 * DAY_MS);
        return 1;
    case ALGO_LOG:
        parts[0] = allow ? sluice_sliding_log(big, 1000) : sluice_sliding_log(1, 30 * DAY_MS);
        return 1;
    default:
        parts[0] = allow ? sluice_token_bucket(big, big, 1000) : sluice_token_bucket(1, 1, 30 * DAY_MS);
        parts[1] = sluice_sliding_window(big, 3600000);
        return 2;
    }
}

typedef struct {
    sluice_limiter *l;
    int at;                 /* 1: sluice_acquire_at; 0: sluice_acquire     */
    int verb;               /* at: 0 acquire_at, 1 peek_at, 2 acquire_at + refund_at */
    int64_t step_ms;        /* acquire_at: the reading's advance per decision */
    int allow;              /* the path every decision must take            */
    _Atomic int64_t next_ms; /* acquire_at: where the next run's readings start */
    atomic_ullong off_path; /* decisions that took the other path           */
    atomic_int rc;          /* an error code seen, or 0                     */
} lim_ctx;

static void work_limiter(void *ctx, int tid, uint64_t n) {
    (void)tid;
    lim_ctx *c = ctx;
    sluice_decision d;
    uint64_t allowed = 0;
    int rc = 0;
    if (!c->at) {
        for (uint64_t i = 0; i < n; i++) {
            int e = sluice_acquire(c->l, 1, &d);
            if (e) rc = e;
            allowed += d.allowed;
        }
    } else {
        int64_t now = atomic_load(&c->next_ms), step = c->step_ms;
        for (uint64_t i = 0; i < n; i++) {
            int e = c->verb == 1 ? sluice_peek_at(c->l, 1, now, &d) : sluice_acquire_at(c->l, 1, now, &d);
            if (c->verb == 2 && !e) e = sluice_refund_at(c->l, 1, now, &d); /* undoes it: work to do */
            if (e) rc = e;
            allowed += d.allowed;
            now += step;
        }
        /* the next run continues from the latest reading used */
        int64_t seen = atomic_load(&c->next_ms);
        while (seen < now && !atomic_compare_exchange_weak(&c->next_ms, &seen, now)) {
        }
    }
    if (rc) atomic_store(&c->rc, rc);
    atomic_fetch_add(&c->off_path, c->allow ? n - allowed : allowed);
}

/* 1-thread results, for the goals: [algo][at][allow] */
static result lim_1t[N_ALGOS][2][2], lim_2t[N_ALGOS][2][2];

static result lim_verb[N_ALGOS][3]; /* [algo][verb], acquire_at allow 1 thread */

static void bench_one_limiter_verb(int algo, int at, int allow, int nt, int verb) {
    sluice_config parts[2];
    size_t n_parts = configs(algo, allow, parts);
    sluice_policy *p;
    sluice_limiter *l;
    int rc = sluice_policy_new("bench", parts, n_parts, &p);
    if (!rc) rc = sluice_limiter_new_policy(p, NULL, &l);
    if (rc) {
        fprintf(stderr, "bench_core: making the %s limiter: %s\n", algo_names[algo],
                sluice_strerror(rc));
        exit(1);
    }
    sluice_policy_free(p);

    lim_ctx *c = calloc(1, sizeof *c);
    if (!c) exit(1);
    c->l = l;
    c->at = at;
    c->verb = verb;
    c->allow = allow;
    c->step_ms = at && allow && algo == ALGO_LOG ? 1 : 0;
    atomic_init(&c->next_ms, sluice_clock_now_ms(sluice_clock_monotonic()));
    atomic_init(&c->off_path, 0);
    atomic_init(&c->rc, 0);
    if (!allow) { /* exhaust it: every later decision is a denial */
        sluice_decision d;
        rc = at ? sluice_acquire_at(l, 1, atomic_load(&c->next_ms), &d) : sluice_acquire(l, 1, &d);
        if (rc || !d.allowed) {
            fprintf(stderr, "bench_core: the first request to the %s limiter was not admitted\n",
                    algo_names[algo]);
            exit(1);
        }
    }

    unsigned long met0 = sluice__limiter_contention(l);
    result r = measure(work_limiter, c, nt);
    unsigned long met = sluice__limiter_contention(l) - met0;

    char label[64], extra[128];
    static const char *const verbs[] = {"acquire_at", "peek_at", "+ refund_at"};
    snprintf(label, sizeof label, "%-15s %-10s %-5s %s", algo_names[algo], at ? verbs[verb] : "acquire",
             allow ? "allow" : "deny", nt == 1 ? "1 thread" : "2 threads");
    int n = 0;
    if (nt == 2)
        n = snprintf(extra, sizeof extra, "%6.1f M decisions/s  met each other %.1f%%",
                     1e3 / r.med, 100.0 * (double)met / (double)r.ops);
    else
        extra[0] = 0;
    uint64_t off = atomic_load(&c->off_path);
    if (off)
        snprintf(extra + n, sizeof extra - (size_t)n, "%sOFF PATH: %" PRIu64 " of %" PRIu64 " %s",
                 n ? "  " : "", off, r.ops, allow ? "denied" : "admitted");
    row(label, "decision", r, extra);
    if (atomic_load(&c->rc)) {
        fprintf(stderr, "bench_core: %s: %s\n", label, sluice_strerror(atomic_load(&c->rc)));
        failed = 1;
    }
    if (off) failed = 1;
    if (verb) lim_verb[algo][verb] = r;
    else (nt == 1 ? lim_1t : lim_2t)[algo][at][allow] = r;
    sluice_limiter_free(l);
    free(c);
}

static void bench_one_limiter(int algo, int at, int allow, int nt) {
    bench_one_limiter_verb(algo, at, allow, nt, 0);
}

static void bench_limiters(void) {
    printf("\n== limiters: one decision of cost 1 (ns/decision; 2 threads: wall / decisions of both)\n");
    for (int algo = 0; algo < N_ALGOS; algo++)
        for (int at = 0; at <= 1; at++)
            for (int allow = 1; allow >= 0; allow--)
                for (int nt = 1; nt <= 2; nt++) bench_one_limiter(algo, at, allow, nt);
    printf("\n== the verbs beside acquire_at, allow path, 1 thread (\"+ refund_at\": acquire_at, then the refund "
           "that undoes it)\n");
    for (int algo = 0; algo < N_ALGOS; algo++) {
        bench_one_limiter_verb(algo, 1, 1, 1, 1);
        bench_one_limiter_verb(algo, 1, 1, 1, 2);
    }
}

/* ------------------------------------------------------------------------ */
/* Goals                                                                     */
/* ------------------------------------------------------------------------ */

/* One goal: a / b against bound. Flags the ratio as noisy when either
 * figure's runs spread by more than 10% (run it again). */
static void goal(const char *what, result a, result b, double bound) {
    double ratio = a.med / b.med, spread = a.spread > b.spread ? a.spread : b.spread;
    printf("%-56s %6.2fx  goal <= %.2fx  %s", what, ratio, bound, ratio <= bound ? "PASS" : "MISS");
    if (spread > 0.10) printf("  (noisy: spread %.0f%%)", 100 * spread);
    printf("\n");
}

static void print_goals(void) {
    char what[96];
    printf("\n== goals (ratios of medians from this run; informational)\n");
    goal("token-bucket acquire allow 1 thread / (clock + gcra + cas64)", lim_1t[ALGO_TB][0][1],
         floor_clock_gcra, 1.3);
#ifdef HAVE_RDTSC
    goal("token-bucket acquire allow 1 thread / (rdtsc + cas64)", lim_1t[ALGO_TB][0][1], floor_rdtsc_cas, 1.3);
#endif
    goal("token-bucket acquire_at allow 1 thread / (gcra + cas64)", lim_1t[ALGO_TB][1][1], floor_gcra, 1.3);
    for (int algo = 0; algo < N_ALGOS; algo++)
        for (int at = 0; at <= 1; at++)
            for (int nt = 1; nt <= 2; nt++) {
                result(*t)[2][2] = nt == 1 ? lim_1t : lim_2t;
                snprintf(what, sizeof what, "%-15s %-10s %-9s deny / allow", algo_names[algo],
                         at ? "acquire_at" : "acquire", nt == 1 ? "1 thread" : "2 threads");
                goal(what, t[algo][at][0], t[algo][at][1], 1.0);
            }
    for (int algo = 0; algo < N_ALGOS; algo++) {
        snprintf(what, sizeof what, "%-15s peek_at / acquire_at, allow", algo_names[algo]);
        goal(what, lim_verb[algo][1], lim_1t[algo][1][1], 1.2);
        /* a refund's own cost: the pair's less the acquire_at's */
        result a = lim_1t[algo][1][1], only = lim_verb[algo][2];
        only.med -= a.med;
        snprintf(what, sizeof what, "%-15s refund_at (pair - acquire_at) / acquire_at", algo_names[algo]);
        goal(what, only, a, 1.2);
    }
}

/* ------------------------------------------------------------------------ */

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    bench_setup_threads(); /* multi-threaded, pinned: see bench_util.h */
    printf("bench_core: sluice %s, %ld CPUs online, %s; median of %d runs of ~%.0f ms each\n",
           sluice_version(), sysconf(_SC_NPROCESSORS_ONLN),
           n_cpus >= 2 ? "threads pinned one per CPU" : "one CPU usable: 2 threads share it",
           N_RUNS, RUN_NS / 1e6);
    int64_t t0 = now_ns();
    bench_clocks();
    bench_floors();
    bench_locks();
    bench_limiters();
    print_goals();
    printf("\n(%.1f s)\n", (double)(now_ns() - t0) / 1e9);
    return failed;
}
