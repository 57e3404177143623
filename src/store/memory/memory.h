/* store/memory/memory.h: what the files of the memory store share: the
 * table's types (a slot, an entry, a shard, a registered policy, the
 * store), the inline pieces of a lookup (finding a key's slot, an entry's
 * lock) and what table.c offers (the table's shape: adding, removing,
 * moving, making room). The design is at the top of memory.c. */
#ifndef SLUICE_STORE_MEMORY_H
#define SLUICE_STORE_MEMORY_H

#include "internal.h"
#include "pair.h"

#include <stdlib.h>
#include <string.h>

#define INLINE_KEY 16
#define SWEEP 64                /* slots looked at for fresh keys per new key    */
#define SHARD_KEYS_MIN 64       /* fewer keys than twice this: one shard         */
#define SHARDS_MAX 64
#define CHUNK_ENTRIES 1024      /* entries come in chunks that never move        */

/* ---- a slot: a key, and its state or its entry, in 32 bytes ----
 *
 *   key   the key, zero-padded (a key of up to 16 bytes); a longer key:
 *         its hash, then 0 (the key itself is in its entry)
 *   lo    FAST: the state's word (src/algo/: a bucket's TAT - epoch * r;
 *         a window's index past the epoch's and its counts); else the
 *         index of the key's entry
 *   hi    the meta word: version << 32 | policy id << 20 | name id << 8 |
 *         key length << 3 | REF | FAST | LIVE
 *
 * A slot's version moves on whenever it changes hands (a key added,
 * removed or moved away), so a compare-and-swap of {lo, hi} read for one
 * key never lands on another's. */
typedef struct {
    _Atomic uint64_t key[2];
    sluice__pair st;
} slot;
_Static_assert(sizeof(slot) == 32, "a slot is 32 bytes: two to a line");

#define M_LIVE 1u
#define M_FAST 2u
#define M_REF 4u                /* CLOCK: decided since the eviction hand passed */
#define M_LONG_KEY 31u          /* key length of a key kept in its entry          */
#define M_LEN(m) ((unsigned)((m) >> 3) & 31u)
#define M_NAME(m) ((unsigned)((m) >> 8) & 0xfffu)
#define M_POLICY(m) ((unsigned)((m) >> 20) & 0xfffu)
#define M_VERSION(m) ((uint32_t)((m) >> 32))
#define M_ID_BITS UINT64_C(0xffff8) /* length, name: what a key is found by */
#define M_META(version, pid, nid, len, flags)                                                         \
    ((uint64_t)(uint32_t)(version) << 32 | (uint64_t)(pid) << 20 | (uint64_t)(nid) << 8 |              \
     (uint64_t)(len) << 3 | (flags))
_Static_assert(SLUICE__POLICIES_MAX <= 4096, "a policy id in 12 bits");

/* ---- an entry: the state of a key that is not FAST ---- */
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
    uint32_t cap, count;   /* keys it may hold, holds                         */
    uint32_t n_slots;      /* about 1.75 per key of cap: probes stay short    */
    uint32_t sweep_hand, evict_hand;
    slot *slots;           /* read without the lock by lookups                */
    void *slots_mem;       /* what slots was cut from (line-aligned)          */
    /* entries, for keys that are not FAST: allocated as they are needed */
    entry **chunks;        /* ceil(cap / CHUNK_ENTRIES), NULL until used      */
    uint32_t n_entries;    /* entries in the chunks made so far               */
    uint32_t free_head;    /* free entry + 1, linked through entry.hash       */
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
    int fast;             /* its keys of up to 16 bytes are FAST: one part,
                             not shadow, whose state fits a word */
    int gcra, shaper;     /* that part is a bucket (decided inline), a shaper */
    int64_t unit;         /* FAST: its algorithm's word_unit */
    uint64_t fresh_word;  /* FAST: a fresh key's word */
    int inline_state;     /* an entry: one part whose state fits entry.st.word */
} registered;

typedef struct {
    struct sluice_store head;
    _Alignas(64) _Atomic int64_t now_ms; /* the highest reading seen: store time */
    /* the epoch of every FAST word: the time the first key was added at (no
     * later decision is earlier: store time, an admission's, never falls) */
    _Atomic int64_t epoch_ms;
    _Alignas(64) uint64_t seed[10]; /* SipHash's key, then the AES hash's */
    int aes;     /* keys of up to 16 bytes: the AES hash (the CPU has AES) */
    int cas16;   /* the 16-byte compare-and-swap is one instruction: FAST keys */
    int collide; /* test hook: every key hashes alike */
    sluice_on_full on_full;
    int64_t max_keys;
    unsigned shard_bits;
    shard *shards;
    sluice__policy_set policies; /* items: registered */
    stripe stripes[SLUICE__STRIPES + 1]; /* [SLUICE__STRIPES]: shared, added to atomically */
} memory_store;
#define EPOCH_UNSET INT64_MIN

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

static inline registered *reg(const memory_store *m, unsigned id) {
    return sluice__policy_item(&m->policies, id);
}

/* ---- an entry's lock: held for one decision, or while the table's shape
 * changes around the entry (always taken after the shard's lock) ---- */

void sluice__mem_entry_lock_slow(entry *e) __attribute__((noinline));

static inline void entry_lock(entry *e) {
    if (atomic_exchange_explicit(&e->busy, 1, memory_order_acquire)) sluice__mem_entry_lock_slow(e);
}

static inline void entry_unlock(entry *e) {
    atomic_store_explicit(&e->busy, 0, memory_order_release);
}

/* Entry i of sh (an index a slot holds: its chunk was made). */
static inline entry *entry_at(const shard *sh, uint32_t i) {
    return &sh->chunks[i / CHUNK_ENTRIES][i % CHUNK_ENTRIES];
}

static inline sluice__state *parts_of(const registered *r, entry *e, sluice__state *tmp) {
    if (!r->inline_state) return e->st.parts;
    memcpy(tmp, &e->st.word, sizeof e->st.word);
    return tmp;
}

/* ---- keys ---- */

/* A key looked for: its bytes and, when inline, the same zero-padded to
 * INLINE_KEY (as slots and entries keep inline keys), compared as two
 * words; its hash. */
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

/* The key's length in a meta word. */
static inline unsigned meta_len(const key_ref *k) {
    return k->len <= INLINE_KEY ? (unsigned)k->len : M_LONG_KEY;
}

/* The slot's home: the first slot its probe looks at (the hash's low 32
 * bits; the shard is chosen by its top bits). */
static inline uint32_t home_of(const shard *sh, uint64_t h) {
    return (uint32_t)(((uint64_t)(uint32_t)h * sh->n_slots) >> 32);
}

static inline uint32_t next_slot(const shard *sh, uint32_t i) {
    return i + 1 == sh->n_slots ? 0 : i + 1;
}

/* The slot that holds the key under name nid, without the shard's lock
 * (linear probing from its home to the first empty slot), with *seen its
 * meta word read before its key; or NULL. A key moved or removed meanwhile
 * may be missed (the caller then looks again under the shard's lock, where
 * the answer is exact). */
static inline slot *find_slot(shard *sh, uint64_t h, unsigned nid, const key_ref *k, uint64_t *seen) {
    uint64_t want = (uint64_t)nid << 8 | (uint64_t)meta_len(k) << 3;
    uint64_t k0 = k->len <= INLINE_KEY ? k->pad[0] : h, k1 = k->len <= INLINE_KEY ? k->pad[1] : 0;
    for (uint32_t i = home_of(sh, h);; i = next_slot(sh, i)) {
        slot *s = &sh->slots[i];
        uint64_t m = atomic_load_explicit(&s->st.hi, memory_order_acquire);
        if (!(m & M_LIVE)) return NULL;
        if ((m & M_ID_BITS) != want) continue;
        if ((atomic_load_explicit(&s->key[0], memory_order_relaxed) ^ k0) |
            (atomic_load_explicit(&s->key[1], memory_order_relaxed) ^ k1))
            continue;
        *seen = m;
        return s;
    }
}

/* Whether locked entry e holds the key of name nid. */
static inline int holds_key(const entry *e, uint64_t h, unsigned nid, const key_ref *k) {
    if (e->hash != (uint32_t)h || e->name != nid + 1 || e->key_len != k->len) return 0;
    if (k->len > INLINE_KEY) return memcmp(e->key.heap, k->bytes, k->len) == 0;
    uint64_t w[INLINE_KEY / 8];
    memcpy(w, e->key.bytes, sizeof w);
    return ((w[0] ^ k->pad[0]) | (w[1] ^ k->pad[1])) == 0;
}

/* ---- "table.c": the table's shape, under the shard's lock ---- */

/* The item init of the policy registry (store.h): a registered policy. */
int sluice__mem_registered_init(void *item, void *ctx);
/* The key's hash (the store's keyed hash, under its name id). */
uint64_t sluice__mem_key_hash(const memory_store *m, unsigned nid, const key_ref *k);
/* The slot of the key exactly, with the shard's lock held; *at its index. */
slot *sluice__mem_find_locked(shard *sh, uint64_t h, unsigned nid, const key_ref *k, uint32_t *at);
/* Whether the key in slot i is fresh at now_ms; the least wait until it
 * is (0: now). */
int64_t sluice__mem_reset_ms(const memory_store *m, shard *sh, uint32_t i, int64_t now_ms);
/* Removes the key of slot i (its entry, if any, unlocked; it is given
 * back), moving the keys after it back so that no probe breaks. */
void sluice__mem_remove(memory_store *m, shard *sh, uint32_t i);
/* Fresh states on the heap for r (NULL for one kept inline), with room
 * for a first admission: 0 or SLUICE_ENOMEM; and their release. */
int sluice__mem_new_parts(const registered *r, sluice__state **out);
void sluice__mem_free_parts(const registered *r, sluice__state *parts);
/* Adds the key, not there (making room first when the shard is full), with
 * a fresh state, FAST when r's keys are and it is short: 0 with *at its
 * slot's index; SLUICE_EFULL or SLUICE_ENOMEM. */
int sluice__mem_insert(memory_store *m, shard *sh, const registered *r, uint64_t h, unsigned pid,
                       const key_ref *k, int64_t now_ms, uint32_t *at);
/* Moves slot i's FAST key to an entry of its own, the same state in the
 * full form (its word outgrew the epoch's range): 0 or SLUICE_ENOMEM. */
int sluice__mem_unfast(memory_store *m, shard *sh, uint32_t i);
/* Converts slot i's key, kept by another configuration of its name, to
 * r's (id pid): docs/semantics.md, "Retune". 0 or SLUICE_ENOMEM. */
int sluice__mem_convert(memory_store *m, shard *sh, uint32_t i, const registered *r, unsigned pid,
                        int64_t now_ms);
/* Frees everything a shard holds (close). */
void sluice__mem_shard_free(memory_store *m, shard *sh);

#endif /* SLUICE_STORE_MEMORY_H */
