/* pair.h: two 64-bit words changed together by a 16-byte compare-and-swap,
 * and the reads and writes of a pair built on it: the shm store's words
 * (shared between processes) and the memory store's slots. It must be one
 * instruction (x86-64 cmpxchg16b, aarch64 casp or ldxp/stxp), never a
 * process-local lock, which would not work across processes: elsewhere the
 * shm store refuses to open and the memory store keeps no state in a slot
 * (sluice__cas16_lock_free). */
#ifndef SLUICE_PAIR_H
#define SLUICE_PAIR_H

#include <stdatomic.h>
#include <stdint.h>

/* ThreadSanitizer does not see inside the asm below: under it, each
 * compare-and-swap also tells it of a release and an acquire at both words,
 * which the atomic loads of readers (at those addresses) then pair with. */
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define SLUICE__PAIR_TSAN(op, p) (op((void *)&(p)->lo), op((void *)&(p)->hi))
#else
#define SLUICE__PAIR_TSAN(op, p) ((void)0)
#endif

/* Two 64-bit words changed together by a 16-byte compare-and-swap. */
typedef struct {
    _Alignas(16) _Atomic uint64_t lo;
    _Atomic uint64_t hi;
} sluice__pair;

/* When *p is {lo, hi}, makes it {new_lo, new_hi} and returns 1. */
static inline int sluice__cas16(sluice__pair *p, uint64_t lo, uint64_t hi, uint64_t new_lo, uint64_t new_hi) {
#if defined(__x86_64__)
    uint8_t ok;
    SLUICE__PAIR_TSAN(__tsan_release, p);
    __asm__ __volatile__("lock cmpxchg16b %1\n\tsetz %0"
                         : "=q"(ok), "+m"(*(volatile unsigned __int128 *)p), "+a"(lo), "+d"(hi)
                         : "b"(new_lo), "c"(new_hi)
                         : "memory", "cc");
    SLUICE__PAIR_TSAN(__tsan_acquire, p);
    return ok;
#elif defined(__aarch64__) /* casp, or an ldxp/stxp loop: no lock either way */
    unsigned __int128 e = (unsigned __int128)hi << 64 | lo, n = (unsigned __int128)new_hi << 64 | new_lo;
    return __atomic_compare_exchange_n((unsigned __int128 *)(void *)p, &e, n, 0, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST);
#else
    (void)p, (void)lo, (void)hi, (void)new_lo, (void)new_hi;
    return 0; /* never called: sluice__cas16_lock_free() is 0 (see it) */
#endif
}

/* Whether sluice__cas16 is one instruction (across processes, a lock would not do). */
static inline int sluice__cas16_lock_free(void) {
#if defined(__x86_64__)
    unsigned a = 1, b, c = 0, d;
    __asm__ __volatile__("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    return (c >> 13) & 1; /* CPUID.1:ECX.CX16 */
#elif defined(__aarch64__)
    return 1;
#else
    return 0; /* a 16-byte CAS here may be a process-local lock (libatomic): port sluice__cas16 first */
#endif
}

/* A consistent reading of a pair whose hi changes with every store to it
 * (hi read before and after lo: equal, so lo is of the same store). It
 * repeats only while another writes the pair. */
static inline void sluice__pair_read(sluice__pair *p, uint64_t *lo, uint64_t *hi) {
    for (;;) {
        uint64_t h = atomic_load_explicit(&p->hi, memory_order_acquire);
        *lo = atomic_load_explicit(&p->lo, memory_order_acquire);
        if (atomic_load_explicit(&p->hi, memory_order_acquire) == h) {
            *hi = h;
            return;
        }
    }
}

/* Stores {lo, hi} whole where nobody else writes p now (a late CAS of an
 * older value may still come: it fails, meeting another value). */
static inline void sluice__pair_set(sluice__pair *p, uint64_t lo, uint64_t hi) {
    uint64_t old_lo, old_hi;
    do sluice__pair_read(p, &old_lo, &old_hi);
    while (!sluice__cas16(p, old_lo, old_hi, lo, hi));
}

#endif /* SLUICE_PAIR_H */
