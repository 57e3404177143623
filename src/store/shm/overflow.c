/* store/shm/overflow.c: blocks for states larger than a slot, in the
 * file's overflow area (format.h draws it). A block is 2^k bytes (k >= 12):
 * a head, then the key's two state copies, which the protocol of shm.c
 * reads and writes as it does a slot's. Blocks come from a free list per
 * class, else from the never-used end of the area (the bump), else from a
 * collection: the area walked block by block (each head names its class),
 * every block no slot holds made free, runs of free blocks cut into the
 * largest blocks they hold, and a free run at the end given back to the
 * bump. Every change of the area takes its lock (owner.c), after the
 * buckets' locks of the slot it is for.
 *
 * Ownership is what the slot says: a block belongs to the slot whose
 * overflow field names it; the head's owner field only says which slot to
 * ask. So a process killed at any step leaks at most the block it was
 * moving, which the next collection finds: a slot's field is cleared
 * before its block goes on a free list, and set before the area's lock is
 * given back (a collection, under that lock, never meets a block given but
 * not yet named). A block is taken for an add before room is made for the
 * key (so that a full area changes nothing), naming the add's bucket as
 * its owner and the add's process as its taker: held while the taker
 * holds that bucket's lock, and after, once a slot names it, while that
 * slot holds a key. A block named by a slot without a key (an add cut
 * short) is collected once its taker no longer holds the slot's bucket.
 *
 * Versions: a late writer of a key (shm.c) writes only over older
 * versions of its words, and a block moves between slots, whose versions
 * are their own. So the area keeps a version no word of a freed block
 * passes (high), and a key given a block starts above it. */
#include "shm.h"

#include <string.h>

#define VERSION_SANE (UINT64_C(1) << 60) /* a version above this was never written: damage */

static shm_block_head *block_at(const shm_store *m, uint64_t off) { /* off: in the area */
    return (shm_block_head *)(m->map + m->g.overflow_off + off);
}

static _Atomic uint64_t *free_list(const shm_store *m, unsigned k) {
    return &shm_overflow(m)->free[k - SHM_OVERFLOW_CLASS_MIN];
}

unsigned sluice__shm_block_class(const shm_store *m, uint32_t words) {
    uint64_t need = SHM_BLOCK_HEAD + 2 * (uint64_t)words * sizeof(shm_pair);
    unsigned k = SHM_OVERFLOW_CLASS_MIN;
    while (k < SHM_OVERFLOW_CLASS_MAX && (UINT64_C(1) << k) < need) k++;
    if ((UINT64_C(1) << k) < need || m->g.overflow_bytes < SHM_OVERFLOW_HEAD ||
        (UINT64_C(1) << k) > m->g.overflow_bytes - SHM_OVERFLOW_HEAD)
        return 0;
    return k;
}

/* Whether [off, off + 2^k) can be a block below end. */
static int block_fits(const shm_store *m, uint64_t off, unsigned k, uint64_t end) {
    return k >= SHM_OVERFLOW_CLASS_MIN && k <= SHM_OVERFLOW_CLASS_MAX && off >= SHM_OVERFLOW_HEAD &&
           off % SHM_BLOCK_HEAD == 0 && end <= m->g.overflow_bytes && off < end && (UINT64_C(1) << k) <= end - off;
}

/* The class of the block at file offset at, when one can lie there; else 0. */
static unsigned class_at(const shm_store *m, uint64_t at) {
    if (at < m->g.overflow_off + SHM_OVERFLOW_HEAD || at >= m->g.file_bytes || at % SHM_BLOCK_HEAD) return 0;
    uint64_t off = at - m->g.overflow_off;
    unsigned k = atomic_load_explicit(&block_at(m, off)->klass, memory_order_relaxed);
    return block_fits(m, off, k, m->g.overflow_bytes) ? k : 0;
}

static uint64_t slot_offset(const shm_store *m, shm_slot *sl) {
    return (uint64_t)((uint8_t *)sl - m->map);
}

/* Whether the block at area offset off is sl's (its field and the block's
 * owner name each other). */
static int belongs(const shm_store *m, uint64_t off, shm_slot *sl) {
    return atomic_load_explicit(&shm_tail_of(m, sl)->overflow, memory_order_acquire) == m->g.overflow_off + off &&
           atomic_load_explicit(&block_at(m, off)->owner, memory_order_relaxed) == slot_offset(m, sl);
}

shm_pair *sluice__shm_block_words(const shm_store *m, shm_slot *sl, unsigned k) {
    uint64_t at = atomic_load_explicit(&shm_tail_of(m, sl)->overflow, memory_order_acquire);
    if (class_at(m, at) != k || !belongs(m, at - m->g.overflow_off, sl)) return NULL;
    return (shm_pair *)(m->map + at + SHM_BLOCK_HEAD);
}

/* Whether the block at off is held: reserved for an add in a bucket whose
 * lock its taker still holds, or named by its owner slot, which holds a
 * key, or whose bucket's lock its taker still holds (an add under way; a
 * lock taken over from a dead taker holds nothing of it). */
static int held(const shm_store *m, uint64_t off) {
    uint64_t so = atomic_load_explicit(&block_at(m, off)->owner, memory_order_relaxed);
    uint64_t span = (uint64_t)m->g.spb * m->g.slot_bytes;
    uint64_t taker = atomic_load_explicit(&block_at(m, off)->next, memory_order_relaxed);
    if (so >= m->g.heads_off && so < m->g.heads_off + m->g.buckets * m->g.head_bytes &&
        (so - m->g.heads_off) % m->g.head_bytes == 0) /* reserved for an add in that bucket */
        return taker && atomic_load_explicit(&((shm_bucket_head *)(m->map + so))->lock, memory_order_acquire) == taker;
    if (so < m->g.slots_off || so >= m->g.slots_off + m->g.buckets * span || (so - m->g.slots_off) % span % m->g.slot_bytes)
        return 0;
    shm_slot *sl = (shm_slot *)(m->map + so);
    if (!belongs(m, off, sl)) return 0;
    return (atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire) & SHM_LIVE) ||
           (taker && atomic_load_explicit(&shm_head_at(m, (so - m->g.slots_off) / span)->lock,
                                          memory_order_acquire) == taker);
}

static void raise_high(const shm_store *m, uint64_t v) {
    _Atomic uint64_t *high = &shm_overflow(m)->high;
    if (v < VERSION_SANE && v > atomic_load_explicit(high, memory_order_relaxed))
        atomic_store_explicit(high, v, memory_order_relaxed);
}

/* The area's lock is held for everything below. */

static void push(const shm_store *m, uint64_t off, unsigned k) {
    shm_block_head *h = block_at(m, off);
    atomic_store_explicit(&h->klass, k, memory_order_relaxed);
    atomic_store_explicit(&h->owner, 0, memory_order_relaxed);
    atomic_store_explicit(&h->next, atomic_load_explicit(free_list(m, k), memory_order_relaxed), memory_order_relaxed);
    atomic_store_explicit(free_list(m, k), off, memory_order_release);
}

/* Cuts the free run [from, to) into the largest blocks it holds, onto the
 * free lists. */
static void free_run(const shm_store *m, uint64_t from, uint64_t to) {
    while (from < to) {
        unsigned k = SHM_OVERFLOW_CLASS_MAX;
        while ((UINT64_C(1) << k) > to - from) k--;
        push(m, from, k);
        from += UINT64_C(1) << k;
    }
}

/* Raises high to the versions in the block at off of class k. */
static void note_versions(const shm_store *m, uint64_t off, unsigned k) {
    shm_pair *w = (shm_pair *)((uint8_t *)block_at(m, off) + SHM_BLOCK_HEAD);
    size_t n = ((UINT64_C(1) << k) - SHM_BLOCK_HEAD) / sizeof *w;
    uint64_t most = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t v = atomic_load_explicit(&w[i].hi, memory_order_relaxed);
        if (v < VERSION_SANE && v > most) most = v;
    }
    raise_high(m, most + 1);
}

/* The collection: 0, or -1 when a block's head is damaged (the walk stops
 * there; the blocks before it are collected). */
static int collect(const shm_store *m) {
    shm_overflow_head *a = shm_overflow(m);
    uint64_t bump = atomic_load_explicit(&a->bump, memory_order_relaxed);
    for (unsigned k = SHM_OVERFLOW_CLASS_MIN; k <= SHM_OVERFLOW_CLASS_MAX; k++)
        atomic_store_explicit(free_list(m, k), 0, memory_order_relaxed);
    uint64_t off = SHM_OVERFLOW_HEAD, run = 0;
    int in_run = 0, rc = 0;
    while (off < bump) {
        unsigned k = atomic_load_explicit(&block_at(m, off)->klass, memory_order_relaxed);
        if (!block_fits(m, off, k, bump)) {
            rc = -1;
            break;
        }
        if (held(m, off)) {
            if (in_run) free_run(m, run, off);
            in_run = 0;
        } else {
            note_versions(m, off, k);
            if (!in_run) run = off, in_run = 1;
        }
        off += UINT64_C(1) << k;
    }
    if (in_run && rc == 0) atomic_store_explicit(&a->bump, run, memory_order_release); /* the free end */
    else if (in_run) free_run(m, run, off);
    return rc;
}

/* A free block of class k: its area offset, or 0 with *rc and the store's
 * message. */
static uint64_t take(shm_store *m, unsigned k, int *rc) {
    shm_overflow_head *a = shm_overflow(m);
    for (int pass = 0; pass < 2; pass++) {
        uint64_t bump = atomic_load_explicit(&a->bump, memory_order_relaxed);
        uint64_t off = atomic_load_explicit(free_list(m, k), memory_order_acquire);
        if (off) {
            if (block_fits(m, off, k, bump) && atomic_load_explicit(&block_at(m, off)->klass, memory_order_relaxed) == k &&
                !held(m, off)) {
                atomic_store_explicit(free_list(m, k), atomic_load_explicit(&block_at(m, off)->next, memory_order_relaxed),
                                      memory_order_relaxed);
                return off;
            }
            atomic_store_explicit(free_list(m, k), 0, memory_order_relaxed); /* damaged: collected below */
        } else if (bump >= SHM_OVERFLOW_HEAD && bump <= m->g.overflow_bytes &&
                   (UINT64_C(1) << k) <= m->g.overflow_bytes - bump) {
            if (sluice__shm_allocate(m, m->g.overflow_off + bump, UINT64_C(1) << k)) {
                *rc = SLUICE_ENOMEM;
                return 0;
            }
            /* a run the collection gave back may hold old words: high covers them */
            atomic_store_explicit(&block_at(m, bump)->klass, k, memory_order_relaxed);
            atomic_store_explicit(&block_at(m, bump)->owner, 0, memory_order_relaxed);
            atomic_store_explicit(&a->bump, bump + (UINT64_C(1) << k), memory_order_release);
            return bump;
        }
        if (pass == 0 && collect(m) != 0) {
            sluice__store_errf(&m->head, "shm:%s: its overflow area is damaged (a block's head is impossible)", m->path);
            *rc = SLUICE_ESTORE;
            return 0;
        }
    }
    sluice__store_errf(&m->head, "shm:%s: its overflow area (overflow_bytes=%llu) is full: make the file with a "
                                 "larger ?overflow_bytes=N, or a ?state_bytes=N that holds the state in its slot",
                       m->path, (unsigned long long)m->g.overflow_bytes);
    *rc = SLUICE_EFULL;
    return 0;
}

int sluice__shm_block_reserve(shm_store *m, unsigned k, uint64_t b, uint64_t *at) {
    sluice__shm_lock(&shm_overflow(m)->lock);
    int rc = 0;
    uint64_t got = take(m, k, &rc);
    if (got) { /* held while its taker holds the add's bucket's lock (see held) */
        atomic_store_explicit(&block_at(m, got)->next, sluice__shm_self(), memory_order_relaxed);
        atomic_store_explicit(&block_at(m, got)->owner, (uint64_t)((uint8_t *)shm_head_at(m, b) - m->map),
                              memory_order_relaxed);
        *at = m->g.overflow_off + got;
    }
    sluice__shm_unlock(&shm_overflow(m)->lock);
    return rc;
}

void sluice__shm_block_attach(shm_store *m, shm_slot *sl, unsigned k, uint64_t reserved, uint64_t *version_floor) {
    _Atomic uint64_t *field = &shm_tail_of(m, sl)->overflow;
    *version_floor = 0;
    if (atomic_load_explicit(field, memory_order_relaxed) == 0 && reserved == 0) return;
    sluice__shm_lock(&shm_overflow(m)->lock);
    uint64_t at = atomic_load_explicit(field, memory_order_relaxed);
    unsigned had = at ? class_at(m, at) : 0;
    int ours = had && belongs(m, at - m->g.overflow_off, sl);
    if (ours && had == k) { /* the slot keeps its block (its versions only grow); the reserved one goes back */
        if (reserved) push(m, reserved - m->g.overflow_off, k);
    } else {
        if (at) {
            /* the field first: a kill after it leaks the block to the next
             * collection, never gives it to two slots */
            atomic_store_explicit(field, 0, memory_order_release);
            if (ours) { /* a late writer of its key writes no version above the slot's next */
                raise_high(m, SHM_VERSION(atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire)) + 1);
                push(m, at - m->g.overflow_off, had);
            }
        }
        if (reserved) { /* its taker (next) is this process still */
            atomic_store_explicit(&block_at(m, reserved - m->g.overflow_off)->owner, slot_offset(m, sl),
                                  memory_order_relaxed);
            atomic_store_explicit(field, reserved, memory_order_release); /* before the lock is given */
            *version_floor = atomic_load_explicit(&shm_overflow(m)->high, memory_order_relaxed) + 1;
        }
    }
    sluice__shm_unlock(&shm_overflow(m)->lock);
}

void sluice__shm_block_release(shm_store *m, uint64_t reserved, unsigned k) {
    if (!reserved) return;
    sluice__shm_lock(&shm_overflow(m)->lock);
    push(m, reserved - m->g.overflow_off, k);
    sluice__shm_unlock(&shm_overflow(m)->lock);
}
