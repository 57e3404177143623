/* lock.h: the small lock of limiters and stores (lock.c), and a thread's
 * stripe of counters (stripe.c). */
#ifndef SLUICE_LOCK_H
#define SLUICE_LOCK_H

#include <stdatomic.h>
#include <stdint.h>

/* ---- "lock.c" and inline: the small lock of limiters and stores ---- */
/* Test-and-test-and-set: uncontended, one atomic exchange to take and one
 * release store to give; contended, it spins briefly then yields. */
typedef struct {
    atomic_int held;
    atomic_uint contended; /* times a taker found it held (tests read it) */
} sluice__lock;
void sluice__lock_slow(sluice__lock *l);
/* One round of waiting for a lock someone holds (spins: rounds so far):
 * the first 64 pause the CPU, later ones yield it, for a holder preempted
 * on an oversubscribed machine. Every lock of the library waits so: this
 * one, the memory store's entry locks, the shm store's bucket locks. */
void sluice__lock_wait(unsigned spins);
static inline void sluice__lock_take(sluice__lock *l) {
    if (atomic_exchange_explicit(&l->held, 1, memory_order_acquire)) sluice__lock_slow(l);
}
static inline void sluice__lock_give(sluice__lock *l) {
    atomic_store_explicit(&l->held, 0, memory_order_release);
}

/* ---- "stripe.c": a thread's stripe of counters ---- */
#define SLUICE__STRIPES 16
/* The calling thread's stripe index: 0..SLUICE__STRIPES-1, owned by it
 * alone among the threads alive in this process (add with a plain load and
 * store), or SLUICE__STRIPES (shared: add atomically). */
extern _Thread_local unsigned sluice__my_stripe __attribute__((tls_model("initial-exec")));
unsigned sluice__stripe_take(void) __attribute__((cold, noinline));
static inline unsigned sluice__stripe(void) {
    unsigned i = sluice__my_stripe;
    return __builtin_expect(i != UINT32_MAX, 1) ? i : sluice__stripe_take();
}

#endif /* SLUICE_LOCK_H */
