/* clock.c: where time comes from. The monotonic clock (the default), a manual
 * clock for tests and simulations, and a clock from user callbacks. A clock
 * also knows how to wait: a manual clock "sleeps" by advancing itself, which
 * is how the blocking wait is tested without sleeping.
 *
 * The monotonic clock reads, chosen once per process at its first reading:
 * the TSC (tsc.c) on x86-64 when the kernel keeps time with it and the CPU
 * says it is invariant, unless SLUICE_CLOCK=monotonic; else
 * CLOCK_MONOTONIC_COARSE when the kernel says its resolution is 1 ms or
 * finer (HZ=1000); else CLOCK_MONOTONIC. The last two come from the vDSO
 * without a system call; the TSC is a few ns cheaper still (bench/ measures
 * them). */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

enum { CLOCK_KIND_MONOTONIC, CLOCK_KIND_MANUAL, CLOCK_KIND_CALLBACK };

struct sluice_clock {
    int kind;
    _Atomic int64_t manual_ms;
    int64_t (*now_fn)(void *user);
    void (*sleep_fn)(void *user, int64_t ms);
    void *user;
};

static const struct sluice_clock monotonic_clock = {.kind = CLOCK_KIND_MONOTONIC};

/* ---- the monotonic clock's source ---- */

enum { SOURCE_UNCHOSEN = -1, SOURCE_TSC, SOURCE_COARSE, SOURCE_MONOTONIC, N_SOURCES };
static const char *const source_names[N_SOURCES] = {"tsc", "CLOCK_MONOTONIC_COARSE", "CLOCK_MONOTONIC"};

/* The source the monotonic clock reads; chosen once (a race only repeats the
 * same choice). */
static atomic_int mono_source = SOURCE_UNCHOSEN;

static int choose_source(void) {
#ifdef SLUICE__HAVE_TSC
    const char *env = getenv("SLUICE_CLOCK");
    if (!(env && !strcmp(env, "monotonic")) && sluice__tsc_kernel_uses() && sluice__tsc_invariant()) {
        sluice__tsc_begin();
        return SOURCE_TSC;
    }
#endif
#ifdef CLOCK_MONOTONIC_COARSE
    struct timespec res;
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &res) == 0 && res.tv_sec == 0 && res.tv_nsec <= 1000000)
        return SOURCE_COARSE;
#endif
    return SOURCE_MONOTONIC;
}

static int mono_source_now(void) {
    int src = atomic_load_explicit(&mono_source, memory_order_relaxed);
    if (src == SOURCE_UNCHOSEN) {
        src = choose_source();
        atomic_store_explicit(&mono_source, src, memory_order_relaxed);
    }
    return src;
}

const char *sluice_clock_source(void) {
    return source_names[mono_source_now()];
}

int sluice__clock_force_source(const char *name) {
    int src = SOURCE_UNCHOSEN;
    if (name) {
        while (++src < N_SOURCES && strcmp(name, source_names[src])) {
        }
        if (src == N_SOURCES) return SLUICE_EINVAL;
#ifdef SLUICE__HAVE_TSC
        if (src == SOURCE_TSC && !sluice__tsc_invariant()) return SLUICE_EINVAL;
        if (src == SOURCE_TSC) sluice__tsc_begin();
#else
        if (src == SOURCE_TSC) return SLUICE_EINVAL;
#endif
#ifndef CLOCK_MONOTONIC_COARSE
        if (src == SOURCE_COARSE) return SLUICE_EINVAL;
#endif
    }
    atomic_store_explicit(&mono_source, src, memory_order_relaxed);
    return 0;
}

/* A reading of the monotonic clock from any source but the TSC's fast path. */
static int64_t mono_now_ms(int src) {
    struct timespec ts;
#ifdef SLUICE__HAVE_TSC
    if (src == SOURCE_TSC) return sluice__tsc_ms(&sluice__tsc_process, __rdtsc(), &sluice__tsc_real);
#endif
#ifdef CLOCK_MONOTONIC_COARSE
    clock_gettime(src == SOURCE_COARSE ? CLOCK_MONOTONIC_COARSE : CLOCK_MONOTONIC, &ts);
#else
    clock_gettime(CLOCK_MONOTONIC, &ts);
#endif
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int64_t clamp_time(int64_t ms) {
    return ms < SLUICE_TIME_MIN_MS ? SLUICE_TIME_MIN_MS : ms > SLUICE_TIME_MAX_MS ? SLUICE_TIME_MAX_MS : ms;
}

const sluice_clock *sluice_clock_monotonic(void) {
    return &monotonic_clock;
}

sluice_clock *sluice_clock_manual_new(int64_t start_ms) {
    if (!sluice__time_ok(start_ms)) return NULL;
    sluice_clock *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->kind = CLOCK_KIND_MANUAL;
    atomic_init(&c->manual_ms, start_ms);
    return c;
}

void sluice_clock_manual_advance(sluice_clock *c, int64_t ms) {
    if (!c || c->kind != CLOCK_KIND_MANUAL) return;
    /* readings stay within +-2^61, so a step cut to +-2^62 cannot overflow */
    int64_t step = ms > (INT64_C(1) << 62) ? (INT64_C(1) << 62) : ms < -(INT64_C(1) << 62) ? -(INT64_C(1) << 62) : ms;
    int64_t old = atomic_load(&c->manual_ms), next;
    do {
        next = clamp_time(old + step);
    } while (!atomic_compare_exchange_weak(&c->manual_ms, &old, next));
}

void sluice_clock_manual_set(sluice_clock *c, int64_t now_ms) {
    if (!c || c->kind != CLOCK_KIND_MANUAL) return;
    atomic_store(&c->manual_ms, clamp_time(now_ms));
}

sluice_clock *sluice_clock_callback_new(int64_t (*now_ms)(void *user),
                                        void (*sleep_ms)(void *user, int64_t ms), void *user) {
    if (!now_ms) return NULL;
    sluice_clock *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->kind = CLOCK_KIND_CALLBACK;
    c->now_fn = now_ms;
    c->sleep_fn = sleep_ms;
    c->user = user;
    return c;
}

int64_t sluice_clock_now_ms(const sluice_clock *c) {
    if (!c || c->kind == CLOCK_KIND_MONOTONIC) {
#ifdef SLUICE__HAVE_TSC
        /* the fast path: a load, a compare, and the TSC clock's inline read */
        if (__builtin_expect(atomic_load_explicit(&mono_source, memory_order_relaxed) == SOURCE_TSC, 1))
            return sluice__tsc_ms(&sluice__tsc_process, __rdtsc(), &sluice__tsc_real);
#endif
        return mono_now_ms(mono_source_now());
    }
    if (c->kind == CLOCK_KIND_MANUAL)
        return atomic_load_explicit(&((sluice_clock *)c)->manual_ms, memory_order_acquire);
    return c->now_fn(c->user);
}

static void real_sleep_ms(int64_t ms) {
    struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

void sluice_clock_sleep_ms(const sluice_clock *c, int64_t ms) {
    if (ms <= 0) return;
    if (c && c->kind == CLOCK_KIND_MANUAL) sluice_clock_manual_advance((sluice_clock *)c, ms);
    else if (c && c->kind == CLOCK_KIND_CALLBACK && c->sleep_fn) c->sleep_fn(c->user, ms);
    else real_sleep_ms(ms);
}

void sluice_clock_free(sluice_clock *c) {
    if (!c || c->kind == CLOCK_KIND_MONOTONIC) return;
    free(c);
}

int sluice__wait(const sluice_clock *c, int64_t timeout_ms,
                 int (*attempt)(void *ctx, int64_t now_ms, sluice_decision *d), void *ctx,
                 sluice_decision *out) {
    if (timeout_ms < 0) return SLUICE_EINVAL;
    int64_t start_ms = sluice_clock_now_ms(c);
    /* a reading outside the accepted range: the attempt says what is wrong
     * (and no arithmetic below overflows) */
    if (!sluice__time_ok(start_ms)) return attempt(ctx, start_ms, out);
    int64_t deadline_ms = timeout_ms > SLUICE_TIME_MAX_MS - start_ms ? SLUICE_TIME_MAX_MS
                                                                     : start_ms + timeout_ms;
    for (int64_t now_ms = start_ms;; now_ms = sluice_clock_now_ms(c)) {
        if (!sluice__time_ok(now_ms)) return attempt(ctx, now_ms, out);
        if (now_ms > deadline_ms) return SLUICE_ETIMEDOUT; /* overslept: never admit late */
        int rc = attempt(ctx, now_ms, out);
        if (rc || out->allowed) return rc;
        if (out->retry_after_ms > deadline_ms - now_ms) return SLUICE_ETIMEDOUT;
        sluice_clock_sleep_ms(c, out->retry_after_ms);
    }
}
