/* tsc.c: the TSC clock: CLOCK_MONOTONIC in ms for one rdtsc, a multiply and
 * a shift. The monotonic clock reads it on x86-64 when the kernel itself
 * keeps time with the TSC and the CPU says the TSC is invariant (clock.c
 * chooses); elsewhere none of this is built.
 *
 * An anchor ties the counter to CLOCK_MONOTONIC:
 *
 *     ns = ns0 + ((tsc - tsc0) * mult >> 32)     while tsc - tsc0 < fresh
 *
 * (tsc0, ns0) is a pair: a CLOCK_MONOTONIC reading and the tick it was taken
 * at, the middle of two ordered rdtsc around it at most PAIR_TICKS apart;
 * mult is ns per tick in 32.32 fixed point, measured from the previous pair
 * to this one; fresh is REANCHOR_NS in ticks at that rate. A tick outside
 * [tsc0, tsc0 + fresh) gets no TSC reading: it reads CLOCK_MONOTONIC itself,
 * and when the anchor has aged out, the caller who noticed takes a new pair
 * and publishes the next anchor (there is no thread of the clock's own; a
 * caller who finds another at it reads CLOCK_MONOTONIC and goes on). So no
 * anchor serves more than REANCHOR_NS, and a process that reads rarely
 * re-anchors at its next reading, whenever that is.
 *
 * Phases: NONE (no pair yet) -> CALIBRATING (a first pair; readings are
 * CLOCK_MONOTONIC's until, CALIBRATE_NS later, a second pair gives the rate)
 * -> ANCHORED (a new pair, and the rate since the last, every REANCHOR_NS).
 * A rate no TSC has (outside 100 MHz .. 10 GHz), one that moved by more
 * than 1/1024 since the last anchor (NTP moves CLOCK_MONOTONIC's by at most
 * 0.1%), or a counter or clock that went back past the anchor, begins
 * calibrating again.
 *
 * Error, by construction: a pair is off by at most PAIR_TICKS / 2 ticks
 * (4 us at a 1 GHz counter, 2 us at this kind of machine's 2 GHz); a rate
 * measured over >= CALIBRATE_NS by at most PAIR_TICKS / CALIBRATE_NS
 * relative (410 ppm at 1 GHz), and NTP may have moved CLOCK_MONOTONIC's by
 * up to 0.1% since: an anchor is off by at most 4 us + 50 ms * 1.41e-3 =
 * 75 us at the end of the 50 ms it serves (in practice a few us), well under
 * the 1 ms of a reading. A reading is floor(ns / 1e6): CLOCK_MONOTONIC's ms,
 * but for readings within that error of a ms boundary.
 *
 * Publication: a seqlock, sluice__tsc.seq. A writer takes it by a CAS from
 * the even value it read the anchor at to odd (which also proves nobody
 * re-anchored since), stores the fields and then seq + 2, all with release;
 * a reader loads seq, the fields and seq again, with acquire (plain loads on
 * x86), and uses the fields only when the two agree and are even. No reader
 * waits for a writer: while seq is odd it reads CLOCK_MONOTONIC.
 *
 * Monotonicity: high_ms is the highest reading the clock has returned; a
 * reading is max(high_ms, its own), raised with a relaxed CAS (once per ms,
 * by one thread, when readings move on; a compare otherwise). Relaxed is
 * enough: a reading that happens-before another (on the same thread, or
 * published through any synchronization) loaded or stored high_ms, and by
 * coherence the later load sees that value or a later one. This makes one
 * timeline of re-anchorings (a step of some us either way) and of counters
 * a few ticks apart on different CPUs, wherever a thread runs.
 *
 * rdtsc ordering: the fast path's rdtsc is plain, unordered, and may run
 * some instructions early or late. A tick from before the anchor it is used
 * with (one read before the anchor was published) gives tsc - tsc0 < 0: the
 * slow path, never an extrapolation backwards (the vDSO orders its rdtsc
 * against its seqlock for the same reason, having no such check, and
 * clamps). What remains is the tick being taken some ns before or after
 * the instructions around the call, which a reading in ms for a rate limit
 * cannot tell from the call having come that much earlier or later;
 * CLOCK_MONOTONIC gives no more (its readings are stale by the time the
 * call returns). Only the pairs, whose accuracy is every reading's, are
 * taken with lfence; rdtsc; lfence. */
#define _GNU_SOURCE
#include "internal.h"

#ifdef SLUICE__HAVE_TSC
#include <cpuid.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#define REANCHOR_NS UINT64_C(50000000)  /* an anchor serves 50 ms */
#define CALIBRATE_NS UINT64_C(20000000) /* the first rate: over >= 20 ms */
#define PAIR_TICKS 8192                 /* a pair's rdtsc at most this far apart */
#define PAIR_TRIES 4
#define MULT_MIN ((UINT64_C(1) << 32) / 10) /* 0.1 ns per tick: a 10 GHz counter */
#define MULT_MAX (UINT64_C(10) << 32)       /* 10 ns per tick: 100 MHz */
#define RATE_SLACK_SHIFT 10                 /* a rate may move by 1/1024 */

_Static_assert(REANCHOR_NS * MULT_MAX / MULT_MIN < (UINT64_C(1) << 40) &&
                   (REANCHOR_NS << 32) + MULT_MAX < UINT64_MAX / 2,
               "fresh * mult stays far from 2^64");

sluice__tsc sluice__tsc_process;

static uint64_t real_ticks(void *user) {
    (void)user;
    _mm_lfence();
    uint64_t t = __rdtsc();
    _mm_lfence();
    return t;
}

static uint64_t real_mono_ns(void *user) {
    (void)user;
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

const sluice__tsc_source sluice__tsc_real = {real_ticks, real_mono_ns, NULL};

/* ---- is the TSC honest here ---- */

/* The first len - 1 bytes of the file at path, NUL-terminated; 0 when unreadable. */
static int read_head(const char *path, char *buf, size_t len) {
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return 0;
    size_t got = 0;
    while (got + 1 < len) {
        ssize_t n = read(fd, buf + got, len - 1 - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    buf[got] = 0;
    return got > 0;
}

/* Whether the space-separated word is in line [p, end). */
static int has_word(const char *p, const char *end, const char *word) {
    size_t n = strlen(word);
    for (; p + n <= end; p++)
        if ((p[-1] == ' ' || p[-1] == '\t') && !memcmp(p, word, n) &&
            (p + n == end || p[n] == ' ' || p[n] == '\n'))
            return 1;
    return 0;
}

int sluice__tsc_invariant(void) {
    unsigned a, b, c, d;
    if (__get_cpuid(0x80000000u, &a, &b, &c, &d) && a >= 0x80000007u &&
        __get_cpuid(0x80000007u, &a, &b, &c, &d) && (d & (1u << 8)))
        return 1;
    /* a hypervisor may hide the CPUID bit the kernel's flags stand for;
     * the first CPU's flags line is in the file's first 16 KB */
    enum { HEAD = 16384 };
    char *buf = malloc(HEAD);
    int yes = 0;
    if (buf && read_head("/proc/cpuinfo", buf, HEAD)) {
        const char *line = strstr(buf, "\nflags");
        const char *end = line ? strchr(line + 1, '\n') : NULL; /* none: cut off, taken as absent */
        yes = end && has_word(line + 1, end, "constant_tsc") && has_word(line + 1, end, "nonstop_tsc");
    }
    free(buf);
    return yes;
}

int sluice__tsc_kernel_uses(void) {
    char buf[64];
    if (!read_head("/sys/devices/system/clocksource/clocksource0/current_clocksource", buf, sizeof buf))
        return 0;
    return !strcmp(buf, "tsc\n") || !strcmp(buf, "tsc");
}

/* ---- the slow path: re-anchoring ---- */

/* A pair: CLOCK_MONOTONIC's ns and the tick it was read at (the middle of
 * the two ticks around it). 0 when no try kept them within PAIR_TICKS (the
 * thread was interrupted or preempted between them each time). */
static int take_pair(const sluice__tsc_source *src, uint64_t *t, uint64_t *ns) {
    uint64_t best = UINT64_MAX;
    for (int i = 0; i < PAIR_TRIES && best > PAIR_TICKS; i++) {
        uint64_t a = src->ticks(src->user);
        uint64_t n = src->mono_ns(src->user);
        uint64_t b = src->ticks(src->user);
        if (b >= a && b - a < best) {
            best = b - a;
            *t = a + (b - a) / 2;
            *ns = n;
        }
    }
    return best <= PAIR_TICKS;
}

/* ns per tick (32.32) from dn ns over dt ticks; 0 unless a TSC's. */
static uint64_t rate(uint64_t dt, uint64_t dn) {
    if (dt == 0) return 0;
    unsigned __int128 m = ((unsigned __int128)dn << 32) / dt; /* dn < 2^64: no overflow */
    return m >= MULT_MIN && m <= MULT_MAX ? (uint64_t)m : 0;
}

/* The writer's stores (seq is odd, and the caller's). */
static void publish(sluice__tsc *k, uint64_t t, uint64_t ns, uint64_t m, uint64_t phase) {
    atomic_store_explicit(&k->tsc0, t, memory_order_release);
    atomic_store_explicit(&k->ns0, ns, memory_order_release);
    atomic_store_explicit(&k->mult, m, memory_order_release);
    /* m >= MULT_MIN: fresh * m <= REANCHOR_NS << 32 (the fast path's bound) */
    atomic_store_explicit(&k->fresh, m ? (REANCHOR_NS << 32) / m : 0, memory_order_release);
    atomic_store_explicit(&k->phase, phase, memory_order_release);
    _Atomic uint64_t *count = phase == SLUICE__TSC_ANCHORED ? &k->n_anchors : &k->n_restarts;
    atomic_store_explicit(count, atomic_load_explicit(count, memory_order_relaxed) + 1, memory_order_release);
}

/* With seq held: a new pair, and what it makes of the anchor (phase, tsc0,
 * ns0, m0 as read at the even seq taken). The pair's ns, or CLOCK_MONOTONIC's
 * when no pair could be taken (the anchor stays; the next caller tries). */
static uint64_t reanchor(sluice__tsc *k, const sluice__tsc_source *src, uint64_t phase, uint64_t t0,
                         uint64_t n0, uint64_t m0) {
    uint64_t t, ns;
    if (!take_pair(src, &t, &ns)) return src->mono_ns(src->user);
    int64_t dt = (int64_t)(t - t0); /* across a wrap of the counter too */
    if (phase == SLUICE__TSC_NONE || dt <= 0 || ns <= n0) {
        /* the first pair; or the counter or the clock went back past the
         * anchor (a skew of a few ticks never gets here: see the slow path) */
        publish(k, t, ns, 0, SLUICE__TSC_CALIBRATING);
        return ns;
    }
    uint64_t dn = ns - n0, m;
    if (phase == SLUICE__TSC_CALIBRATING) {
        if (dn < CALIBRATE_NS) return ns; /* too soon (a caller before us had it) */
        m = rate((uint64_t)dt, dn);
    } else {
        /* a rate over less than half an anchor's life would be noisier
         * than the bound above allows: keep the last one then */
        m = dn >= REANCHOR_NS / 2 ? rate((uint64_t)dt, dn) : m0;
        uint64_t off = m > m0 ? m - m0 : m0 - m;
        if (off > m0 >> RATE_SLACK_SHIFT) m = 0;
    }
    if (m) publish(k, t, ns, m, SLUICE__TSC_ANCHORED);
    else publish(k, t, ns, 0, SLUICE__TSC_CALIBRATING); /* begin again from this pair */
    return ns;
}

int64_t sluice__tsc_slow_ms(sluice__tsc *k, uint64_t t, const sluice__tsc_source *src) {
    uint64_t s = atomic_load_explicit(&k->seq, memory_order_acquire);
    uint64_t t0 = atomic_load_explicit(&k->tsc0, memory_order_acquire);
    uint64_t n0 = atomic_load_explicit(&k->ns0, memory_order_acquire);
    uint64_t m = atomic_load_explicit(&k->mult, memory_order_acquire);
    uint64_t fresh = atomic_load_explicit(&k->fresh, memory_order_acquire);
    uint64_t phase = atomic_load_explicit(&k->phase, memory_order_acquire);
    uint64_t ns = 0;
    int write = 0, have_ns = 0;
    if (!(s & 1) && atomic_load_explicit(&k->seq, memory_order_relaxed) == s) {
        uint64_t d = t - t0;
        if (phase == SLUICE__TSC_ANCHORED) {
            /* the fast path met a writer; the anchor it left serves t */
            if (d < fresh) return sluice__tsc_raise(k, (int64_t)((n0 + (d * m >> 32)) / 1000000));
            /* aged out, or t is far behind tsc0; a few ticks behind (another
             * CPU's counter, or a tick read early) is no reason to re-anchor */
            write = (int64_t)d >= 0 || 0 - d >= fresh;
        } else if (phase == SLUICE__TSC_CALIBRATING) {
            ns = src->mono_ns(src->user);
            have_ns = 1;
            write = ns < n0 || ns - n0 >= CALIBRATE_NS;
        } else {
            write = 1;
        }
    }
    if (write && atomic_compare_exchange_strong_explicit(&k->seq, &s, s + 1, memory_order_acquire,
                                                         memory_order_relaxed)) {
        ns = reanchor(k, src, phase, t0, n0, m);
        atomic_store_explicit(&k->seq, s + 2, memory_order_release);
    } else if (!have_ns) {
        ns = src->mono_ns(src->user); /* someone else is at it, or t was a few ticks early */
    }
    return sluice__tsc_raise(k, (int64_t)(ns / 1000000));
}

/* A child forked while another thread held seq would find it odd forever
 * (every reading CLOCK_MONOTONIC's): the child starts the clock over. */
static void tsc_after_fork(void) {
    sluice__tsc *k = &sluice__tsc_process;
    uint64_t s = atomic_load_explicit(&k->seq, memory_order_relaxed);
    if (!(s & 1)) return;
    atomic_store_explicit(&k->fresh, 0, memory_order_relaxed);
    atomic_store_explicit(&k->phase, SLUICE__TSC_NONE, memory_order_relaxed);
    atomic_store_explicit(&k->seq, s + 1, memory_order_release);
}

static void tsc_register_fork(void) {
    pthread_atfork(NULL, NULL, tsc_after_fork);
}

void sluice__tsc_begin(void) {
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, tsc_register_fork);
}

uint64_t sluice__tsc_anchor_ns(sluice__tsc *k, uint64_t t) {
    uint64_t s = atomic_load_explicit(&k->seq, memory_order_acquire);
    uint64_t t0 = atomic_load_explicit(&k->tsc0, memory_order_acquire);
    uint64_t n0 = atomic_load_explicit(&k->ns0, memory_order_acquire);
    uint64_t m = atomic_load_explicit(&k->mult, memory_order_acquire);
    uint64_t fresh = atomic_load_explicit(&k->fresh, memory_order_acquire);
    uint64_t d = t - t0;
    if ((s & 1) || d >= fresh || atomic_load_explicit(&k->seq, memory_order_relaxed) != s) return 0;
    return n0 + (d * m >> 32);
}
#endif /* SLUICE__HAVE_TSC */
