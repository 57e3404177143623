/* stripe.c: a thread's stripe, for counters that every decision adds to.
 * Up to SLUICE__STRIPES threads alive at once in the process each own one
 * stripe index, and add to their stripe of a counter with a plain load and
 * store (no other thread writes it), so that threads deciding on different
 * keys write no line in common. A thread gives its index back when it
 * exits, so threads that come and go (pools, a thread per task) take them
 * over; threads beyond SLUICE__STRIPES alive at once share the index
 * SLUICE__STRIPES and add to it atomically. Taking an index (acquire) after
 * its owner gave it back (release) orders the new owner's adds after the
 * old one's. The memory store's counts and the shm store's per-thread
 * stripes (store/shm/counters.c) use it. */
#include "internal.h"

#include <pthread.h>

_Thread_local unsigned sluice__my_stripe = UINT32_MAX;

static atomic_uint stripes_owned;  /* bit i: index i is owned */
static pthread_key_t stripe_key;   /* a thread's index + 1: given back at exit */
static pthread_once_t stripe_once = PTHREAD_ONCE_INIT;
static int stripe_key_made;

/* Also the thread-exit destructor: what the exiting thread still counts
 * (from destructors that run after this one) goes to the shared index. */
static void stripe_give_back(void *v) {
    unsigned i = (unsigned)(uintptr_t)v - 1;
    sluice__my_stripe = SLUICE__STRIPES;
    atomic_fetch_and_explicit(&stripes_owned, ~(1u << i), memory_order_release);
}

/* In a child after fork() only the forking thread is left: the others'
 * indexes are free again. */
static void stripes_after_fork(void) {
    unsigned mine = sluice__my_stripe;
    atomic_store_explicit(&stripes_owned, mine < SLUICE__STRIPES ? 1u << mine : 0, memory_order_relaxed);
}

static void stripe_key_make(void) {
    stripe_key_made = pthread_key_create(&stripe_key, stripe_give_back) == 0;
    if (stripe_key_made) pthread_atfork(NULL, NULL, stripes_after_fork);
}

unsigned sluice__stripe_take(void) {
    pthread_once(&stripe_once, stripe_key_make);
    unsigned owned = atomic_load_explicit(&stripes_owned, memory_order_relaxed);
    while (stripe_key_made && owned != (1u << SLUICE__STRIPES) - 1) {
        unsigned i = (unsigned)__builtin_ctz(~owned);
        if (!atomic_compare_exchange_weak_explicit(&stripes_owned, &owned, owned | 1u << i, memory_order_acquire,
                                                   memory_order_relaxed))
            continue;
        if (pthread_setspecific(stripe_key, (void *)(uintptr_t)(i + 1)) == 0) return sluice__my_stripe = i;
        stripe_give_back((void *)(uintptr_t)(i + 1)); /* no way to give it back at exit: share */
        break;
    }
    return sluice__my_stripe = SLUICE__STRIPES;
}
