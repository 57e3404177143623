/* clock.h: readings and waits (clock.c), and the TSC clock the monotonic
 * clock reads where it is honest (tsc.c). */
#ifndef SLUICE_CLOCK_H
#define SLUICE_CLOCK_H

#include "sluice.h"

#include <stdatomic.h>
#include <stdint.h>

/* ---- "clock.c" ---- */
/* The blocking wait of limiters and stores: attempt() decides at a reading;
 * on a denial, sleep on c for the retry time, never past timeout_ms, and
 * give up at once (SLUICE_ETIMEDOUT, nothing consumed) when the retry time
 * is beyond it. */
int sluice__wait(const sluice_clock *c, int64_t timeout_ms,
                 int (*attempt)(void *ctx, int64_t now_ms, sluice_decision *d), void *ctx,
                 sluice_decision *out);
/* A reading checked against the accepted range. */
static inline int sluice__time_ok(int64_t now_ms) {
    return now_ms >= SLUICE_TIME_MIN_MS && now_ms <= SLUICE_TIME_MAX_MS;
}

/* ---- "tsc.c" and inline: the TSC clock (tsc.c says how it works) ---- */
#if defined(__x86_64__)
#define SLUICE__HAVE_TSC 1
#include <x86intrin.h>

/* Where a TSC clock takes ticks and CLOCK_MONOTONIC from on its slow path:
 * the real ones (sluice__tsc_real), or a test's. ticks() is ordered against
 * the instructions around it (lfence; rdtsc; lfence). */
typedef struct {
    uint64_t (*ticks)(void *user);
    uint64_t (*mono_ns)(void *user); /* CLOCK_MONOTONIC in ns */
    void *user;
} sluice__tsc_source;

/* A TSC clock's state; all zero is a clock with no anchor yet (the first
 * reading makes one). The first line is what a reading loads. */
typedef struct {
    _Alignas(64) _Atomic uint64_t seq; /* even: the anchor is whole; odd: a writer is at it */
    _Atomic uint64_t tsc0;             /* the anchor: a tick ...                          */
    _Atomic uint64_t ns0;              /* ... and CLOCK_MONOTONIC's ns at it              */
    _Atomic uint64_t mult;             /* ns per tick, 32.32 fixed point                  */
    _Atomic uint64_t fresh;            /* ticks after tsc0 it serves; 0: it serves none   */
    _Atomic int64_t high_ms;           /* the highest reading returned                   */
    _Atomic uint64_t phase;            /* SLUICE__TSC_NONE, _CALIBRATING or _ANCHORED     */
    _Atomic uint64_t n_anchors;        /* anchors published                               */
    _Alignas(64) _Atomic uint64_t n_restarts; /* calibrations begun (the first included) */
} sluice__tsc;
enum { SLUICE__TSC_NONE, SLUICE__TSC_CALIBRATING, SLUICE__TSC_ANCHORED };

/* The process's TSC clock, and the real ticks and CLOCK_MONOTONIC. */
extern sluice__tsc sluice__tsc_process;
extern const sluice__tsc_source sluice__tsc_real;

/* Whether the CPU's TSC is invariant (CPUID 0x80000007 EDX bit 8, or the
 * constant_tsc and nonstop_tsc flags of /proc/cpuinfo). */
int sluice__tsc_invariant(void);
/* Whether the kernel keeps time with the TSC (its current clocksource). */
int sluice__tsc_kernel_uses(void);

/* Called when the process's clock is chosen to read the TSC: a child
 * forked while a thread was re-anchoring starts the clock over. */
void sluice__tsc_begin(void);
/* The reading (ms, raised to high_ms) when the anchor does not serve tick t:
 * CLOCK_MONOTONIC's own, after re-anchoring if it is time to. */
int64_t sluice__tsc_slow_ms(sluice__tsc *k, uint64_t t, const sluice__tsc_source *src);
/* The anchor's ns at tick t, or 0 when it does not serve t (tests). */
uint64_t sluice__tsc_anchor_ns(sluice__tsc *k, uint64_t t);

/* Raises k's high-water mark to ms; the reading to return: the higher. */
static inline int64_t sluice__tsc_raise(sluice__tsc *k, int64_t ms) {
    int64_t high = atomic_load_explicit(&k->high_ms, memory_order_relaxed);
    while (ms > high)
        if (atomic_compare_exchange_weak_explicit(&k->high_ms, &high, ms, memory_order_relaxed,
                                                  memory_order_relaxed))
            return ms;
    return high;
}

/* The reading at tick t, in ms. The fast path: seven loads of one cache
 * line (seq, the anchor, seq again, high_ms), a multiply and a shift, a
 * division by a constant (a multiply), and a compare with high_ms; no
 * fence, no system call. Overflow-free: the anchor serves d < fresh, and
 * fresh * mult <= REANCHOR_NS << 32 (tsc.c), so d * mult < 2^58. */
static inline int64_t sluice__tsc_ms(sluice__tsc *k, uint64_t t, const sluice__tsc_source *src) {
    uint64_t s = atomic_load_explicit(&k->seq, memory_order_acquire);
    uint64_t t0 = atomic_load_explicit(&k->tsc0, memory_order_acquire);
    uint64_t n0 = atomic_load_explicit(&k->ns0, memory_order_acquire);
    uint64_t m = atomic_load_explicit(&k->mult, memory_order_acquire);
    uint64_t fresh = atomic_load_explicit(&k->fresh, memory_order_acquire);
    uint64_t d = t - t0; /* a tick before tsc0 wraps to far beyond fresh */
    if (__builtin_expect((s & 1) || d >= fresh || atomic_load_explicit(&k->seq, memory_order_relaxed) != s, 0))
        return sluice__tsc_slow_ms(k, t, src);
    return sluice__tsc_raise(k, (int64_t)((n0 + (d * m >> 32)) / 1000000));
}
#endif /* __x86_64__ */

#endif /* SLUICE_CLOCK_H */
