/* store/shm/counters.c: the shm store's counts of decisions, kept in the
 * file so that every process's count: a block of stripes per process,
 * taken when the store is opened (a free block, or a dead owner's, whose
 * counts it keeps adding to) and given back at close, and in it a stripe
 * per thread (stripe.c), so that no two writers share a line and an add is
 * a plain load and store. Processes beyond the 64 blocks share the last
 * one, and threads beyond 16 the last stripe of a block: those add
 * atomically. A child after fork() takes a block of its own at its next
 * count. Reading them (stats) costs the counters' 75 KB, whatever the
 * file's size. A process killed between an effect and its count loses
 * that one count. */
#include "shm.h"

#include <pthread.h>

_Static_assert(SHM_COUNTER_STRIPES == SLUICE__STRIPES + 1, "a stripe per thread index, and the shared one");

/* In a child after fork(): its parent still adds to the blocks it took. */
atomic_uint sluice__shm_fork_generation;
static pthread_once_t fork_once = PTHREAD_ONCE_INIT;
static void after_fork(void) {
    atomic_fetch_add_explicit(&sluice__shm_fork_generation, 1, memory_order_relaxed);
}
static void fork_watch(void) {
    pthread_atfork(NULL, NULL, after_fork);
}

static shm_counter_block *block_at(const shm_store *m, unsigned i) {
    return (shm_counter_block *)(m->map + m->g.counters_off) + i;
}

void sluice__shm_counters_take(shm_store *m) {
    pthread_once(&fork_once, fork_watch);
    m->block_gen = atomic_load_explicit(&sluice__shm_fork_generation, memory_order_acquire);
    uint64_t me = sluice__shm_self();
    for (unsigned i = 0; i + 1 < SHM_COUNTER_BLOCKS; i++) {
        _Atomic uint64_t *owner = &block_at(m, i)->owner;
        uint64_t o = atomic_load_explicit(owner, memory_order_relaxed);
        if ((o == 0 || (o != me && sluice__shm_owner_dead(o))) &&
            atomic_compare_exchange_strong_explicit(owner, &o, me, memory_order_acquire, memory_order_relaxed)) {
            m->block = block_at(m, i);
            m->stripes = m->block->stripe;
            m->block_shared = 0;
            m->plain_below = SLUICE__STRIPES;
            return;
        }
    }
    m->block = block_at(m, SHM_COUNTER_BLOCKS - 1);
    m->stripes = m->block->stripe;
    m->block_shared = 1;
    m->plain_below = 0;
}

void sluice__shm_counters_give(shm_store *m) {
    if (!m->block || m->block_shared) return;
    if (m->block_gen != atomic_load_explicit(&sluice__shm_fork_generation, memory_order_acquire)) return; /* the parent's */
    uint64_t me = sluice__shm_self();
    atomic_compare_exchange_strong_explicit(&m->block->owner, &me, 0, memory_order_release, memory_order_relaxed);
}

void sluice__shm_counters_again(shm_store *m) {
    sluice__lock_take(&m->block_lock);
    if (m->block_gen != atomic_load_explicit(&sluice__shm_fork_generation, memory_order_acquire))
        sluice__shm_counters_take(m);
    sluice__lock_give(&m->block_lock);
}

void sluice__shm_counters_read(const shm_store *m, sluice_stats *out) {
    for (unsigned b = 0; b < SHM_COUNTER_BLOCKS; b++) {
        const shm_counter_block *k = block_at(m, b);
        for (unsigned i = 0; i < SHM_COUNTER_STRIPES; i++) {
            const shm_stripe *s = &k->stripe[i];
            out->allowed += (int64_t)atomic_load_explicit(&s->allowed, memory_order_relaxed);
            out->denied += (int64_t)atomic_load_explicit(&s->denied, memory_order_relaxed);
            out->forgotten += (int64_t)atomic_load_explicit(&s->forgotten, memory_order_relaxed);
            out->evicted += (int64_t)atomic_load_explicit(&s->evicted, memory_order_relaxed);
            out->refused += (int64_t)atomic_load_explicit(&s->refused, memory_order_relaxed);
            out->shadow_denied += (int64_t)atomic_load_explicit(&s->shadow_denied, memory_order_relaxed);
        }
    }
}
