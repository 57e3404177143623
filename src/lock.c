/* lock.c: the slow path of the small spin-then-yield lock (internal.h), and
 * the wait every lock of the library spins in. Held only for one decision's
 * arithmetic, so spinning briefly beats sleeping; a holder preempted on an
 * oversubscribed machine is waited for by yielding. */
#include "internal.h"

#include <sched.h>

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

void sluice__lock_wait(unsigned spins) {
    if (spins < 64) cpu_relax();
    else sched_yield();
}

void sluice__lock_slow(sluice__lock *l) {
    atomic_fetch_add_explicit(&l->contended, 1, memory_order_relaxed);
    for (unsigned spins = 0;; spins++) {
        if (!atomic_load_explicit(&l->held, memory_order_relaxed) &&
            !atomic_exchange_explicit(&l->held, 1, memory_order_acquire))
            return;
        sluice__lock_wait(spins);
    }
}
