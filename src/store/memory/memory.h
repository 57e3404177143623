/* store/memory/memory.h: what the files of the memory store share: the
 * table's types (an entry, a shard, a registered policy, the store), the
 * inline pieces of a lookup (an entry's lock, the index, finding a key)
 * and what table.c offers (the table's shape: adding, removing, making
 * room). The design is at the top of memory.c. */
#ifndef SLUICE_STORE_MEMORY_H
#define SLUICE_STORE_MEMORY_H

#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define INLINE_KEY 16
#define SWEEP 64                /* entries looked at for fresh keys per new key */
#define SHARD_KEYS_MIN 64       /* fewer keys than twice this: one shard         */
#define SHARDS_MAX 64
#define ENTRY_MAX ((1u << 24) - 2)

typedef struct entry {
    union {
        sluice__i128 word;     /* one part whose state fits 16 bytes           */
        sluice__state *parts;  /* otherwise: one state per part, on the heap   */
    } st;
    union {
        uint8_t bytes[INLINE_KEY];
        uint8_t *heap;         /* keys longer than INLINE_KEY                  */
    } key;
    uint32_t hash;     /* low 32 bits of the key's hash; when free: next free + 1 */
    uint16_t policy;   /* registry id + 1 of the configuration it is kept by;
                          0: the entry is free                              */
    uint16_t name;     /* its policy's name id + 1 (a key is found by name) */
    uint16_t key_len;
    uint8_t ref;       /* CLOCK: decided since the eviction hand last passed  */
    _Atomic uint8_t busy; /* the entry's lock: guards every field above      */
} entry;

_Static_assert(sizeof(entry) == 48, "an entry is 48 bytes");

typedef struct shard {
    _Alignas(64) sluice__lock lock; /* guards the table's shape: below        */
    int64_t now_ms;        /* the highest reading a key was forgotten at      */
    /* no key here is fresh before this reading: lowered (atomically) by
     * whatever makes a key fresh sooner, a new key, a refund, a retune */
    _Atomic int64_t next_fresh_ms;
    uint32_t cap, count;
    uint32_t top;          /* entries [top, cap) were never used              */
    uint32_t free_head;    /* free entry + 1, linked through entry.hash       */
    uint32_t sweep_hand, evict_hand;
    uint32_t mask;         /* index slots - 1                                 */
    _Atomic uint32_t *index; /* read without the lock by lookups              */
    entry *entries;
    int64_t forgotten, evicted, refused;
} shard;

/* Counts of decisions, a line per thread stripe (stripe.c), so that
 * threads deciding on different keys write no line in common. */
typedef struct {
    _Alignas(64) atomic_llong allowed;
    atomic_llong denied, shadow_denied;
} stripe;

typedef struct {
    sluice_policy policy; /* a copy: entries are read with its algorithms */
    uint32_t name_id;     /* the id of the first policy met of this name: the
                             keys of every configuration of one name are one
                             key each (hashed and found by it), converted
                             when another configuration meets them */
    int inline_state;     /* one part whose state fits in entry.st.word  */
    int gcra;             /* that part is a bucket, decided inline: 1 when
                             it delays (a shaper), else 0; -1: no bucket  */
} registered;

typedef struct {
    struct sluice_store head;
    _Alignas(64) _Atomic int64_t now_ms; /* the highest reading seen: store time */
    _Alignas(64) uint64_t seed[10]; /* SipHash's key, then the AES hash's */
    int aes;     /* keys of up to 16 bytes: the AES hash (the CPU has AES) */
    int collide; /* test hook: every key hashes alike */
    sluice_on_full on_full;
    int64_t max_keys;
    unsigned shard_bits;
    shard *shards;
    sluice__policy_set policies; /* items: registered */
    stripe stripes[SLUICE__STRIPES + 1]; /* [SLUICE__STRIPES]: shared, added to atomically */
} memory_store;

static inline void count(atomic_llong *c, unsigned stripe_index) {
    if (stripe_index == SLUICE__STRIPES) atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
    else atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

static inline void count_decision(memory_store *m, const sluice_decision *d) {
    unsigned i = sluice__stripe();
    count(d->allowed ? &m->stripes[i].allowed : &m->stripes[i].denied, i);
    if (d->shadow_denied) count(&m->stripes[i].shadow_denied, i);
}

/* No key of sh is fresh before at_ms any more (next_fresh_ms, lowered). */
static inline void fresh_by(shard *sh, int64_t at_ms) {
    int64_t n = atomic_load_explicit(&sh->next_fresh_ms, memory_order_relaxed);
    while (at_ms < n && !atomic_compare_exchange_weak_explicit(&sh->next_fresh_ms, &n, at_ms, memory_order_relaxed,
                                                               memory_order_relaxed)) {
    }
}

/* ---- an entry's lock: held for one decision, or while the table's shape
 * changes around the entry (always taken after the shard's lock) ---- */

static __attribute__((noinline, unused)) void entry_lock_slow(entry *e) {
    for (unsigned spins = 0; atomic_exchange_explicit(&e->busy, 1, memory_order_acquire);)
        while (atomic_load_explicit(&e->busy, memory_order_relaxed)) sluice__lock_wait(spins++);
}

static inline void entry_lock(entry *e) {
    if (atomic_exchange_explicit(&e->busy, 1, memory_order_acquire)) entry_lock_slow(e);
}

static inline void entry_unlock(entry *e) {
    atomic_store_explicit(&e->busy, 0, memory_order_release);
}

/* ---- policies ---- */

static inline registered *reg(const memory_store *m, unsigned id) {
    return sluice__policy_item(&m->policies, id);
}


/* ---- entries ---- */

static inline sluice__state *parts_of(const registered *r, entry *e, sluice__state *tmp) {
    if (!r->inline_state) return e->st.parts;
    memcpy(tmp, &e->st.word, sizeof e->st.word);
    return tmp;
}


/* ---- the index ---- */

#define TAG(h) ((uint32_t)((h) >> 32) & 0xffu)
#define SLOT_ENTRY(v) (((v) & 0xffffffu) - 1)

/* A key looked for: its bytes and, when inline, the same zero-padded to
 * INLINE_KEY (as entries keep inline keys), compared as two words. */
typedef struct {
    const void *bytes;
    size_t len;
    uint64_t pad[INLINE_KEY / 8];
} key_ref;

static inline void key_ref_init(key_ref *k, const void *key, size_t len) {
    k->bytes = key;
    k->len = len;
    k->pad[0] = k->pad[1] = 0;
    if (len <= INLINE_KEY) sluice__key_words(key, len, k->pad);
}

static inline int holds_key(const entry *e, uint64_t h, unsigned nid, const key_ref *k) {
    if (e->hash != (uint32_t)h || e->name != nid + 1 || e->key_len != k->len) return 0;
    if (k->len > INLINE_KEY) return memcmp(e->key.heap, k->bytes, k->len) == 0;
    uint64_t w[INLINE_KEY / 8];
    memcpy(w, e->key.bytes, sizeof w);
    return ((w[0] ^ k->pad[0]) | (w[1] ^ k->pad[1])) == 0;
}

static inline uint32_t slot_at(shard *sh, uint32_t i) {
    return atomic_load_explicit(&sh->index[i], memory_order_acquire);
}

static inline void slot_set(shard *sh, uint32_t i, uint32_t v) {
    atomic_store_explicit(&sh->index[i], v, memory_order_release);
}

/* The key's entry, locked; NULL when not seen. Without the shard's lock
 * it may miss a key moved by a removal meanwhile (the caller then looks
 * again under the shard's lock, where the answer is exact). An entry is
 * checked under its own lock, so one freed or reused meanwhile is never
 * taken for the key. */
static inline entry *find_locked(shard *sh, uint64_t h, unsigned nid, const key_ref *k) {
    uint32_t tag = TAG(h);
    for (uint32_t i = (uint32_t)h & sh->mask;; i = (i + 1) & sh->mask) {
        uint32_t v = slot_at(sh, i);
        if (v == 0) return NULL;
        if ((v >> 24) != tag) continue;
        entry *e = &sh->entries[SLOT_ENTRY(v)];
        entry_lock(e);
        if (holds_key(e, h, nid, k)) return e;
        entry_unlock(e);
    }
}

/* ---- "table.c": the table's shape, under the shard's lock ---- */

/* The item init of the policy registry (store.h): a registered policy. */
int sluice__mem_registered_init(void *item, void *ctx);
/* The least wait until locked entry e is fresh (0: it is fresh now). */
int64_t sluice__mem_reset_ms(const memory_store *m, entry *e, int64_t now_ms);
/* Frees what e holds; it is free then. */
void sluice__mem_release(const memory_store *m, entry *e);
/* Removes locked entry e (the shard's lock held; e's is given back). */
void sluice__mem_remove(const memory_store *m, shard *sh, entry *e);
/* Fresh states on the heap for r (NULL for one kept inline), with room
 * for a first admission: 0 or SLUICE_ENOMEM; and their release. */
int sluice__mem_new_parts(const registered *r, sluice__state **out);
void sluice__mem_free_parts(const registered *r, sluice__state *parts);
/* Adds a fresh entry for the key, not there (making room), the shard's
 * lock held: 0 with *out locked, SLUICE_EFULL or SLUICE_ENOMEM. */
int sluice__mem_insert(memory_store *m, shard *sh, const registered *r, uint64_t h, unsigned pid,
                       const key_ref *k, int64_t now_ms, entry **out);

#endif /* SLUICE_STORE_MEMORY_H */
