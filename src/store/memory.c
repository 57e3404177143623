/* store/memory.c: the in-process store, the embedded default.
 *
 * Per-key state in a table split into shards. A decision on a key the table
 * holds takes only that key's entry lock: it finds the entry without the
 * shard's lock (checking it under its own lock) and writes only the entry
 * (48 bytes, so neighbours may share its cache lines), its thread's count
 * stripe and, when its reading is the highest yet, the store's time. The
 * shard's lock guards the table's shape: adding,
 * forgetting and evicting keys, which also take the entry's lock (always
 * after the shard's), so a key is never dropped in the middle of its own
 * update. Counts of decisions go to per-thread stripes.
 *
 * A shard holds at most cap keys (the shards' caps add up to max_keys):
 *
 *   index   uint32_t[2^k >= 2*cap]  open addressing, linear probing,
 *                                   (8-bit hash tag << 24) | (entry + 1)
 *   entries entry[cap], 48 bytes    key (inline up to 16 bytes), hash,
 *                                   policy id, CLOCK bit, and the state
 *                                   (inline when one part of <= 16 bytes,
 *                                   else on the heap)
 *
 * so a one-part token bucket with keys up to 16 bytes costs 48 + 8..16
 * bytes per key of capacity, allocated up front (pages are touched only as
 * keys arrive). Deletion shifts later entries back: no tombstones.
 *
 * Keys are hashed under a random per-store key (and a per-policy tweak),
 * so chosen keys cannot flood one chain: keys of up to 16 bytes with three
 * AES rounds where the CPU has AES instructions (about 2 ns), others with
 * SipHash-1-3 (about 9 ns for 16 bytes). Inline keys are kept zero-padded
 * and compared as two words.
 *
 * Room: when a new key meets a full shard, fresh keys (equal to a fresh
 * state, so forgetting them changes nothing) are looked for first, if some
 * key may have become fresh since the last full scan (next_fresh_ms): a
 * sweep of the next 64 entries, then a full scan. Only when no key is fresh does
 * on_full apply: evict the victim of the CLOCK (second chance) algorithm, an
 * approximation of the least recently used key, or refuse the new key.
 *
 * Batches (sluice_store_acquire_many): 16 requests' keys are hashed and
 * their index slots, then entries, fetched into the cache before the 16 are
 * decided in order, so that with many keys their cache misses overlap.
 *
 * Time: the store decides at the highest reading it has seen (and each
 * shard at the highest it has seen, for readings that race), so a key
 * forgotten as fresh would have decided as a fresh one (sluice.h). */
#include "internal.h"

#include <errno.h>
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

static void count(atomic_llong *c, unsigned stripe_index) {
    if (stripe_index == SLUICE__STRIPES) atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
    else atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

static void count_decision(memory_store *m, const sluice_decision *d) {
    unsigned i = sluice__stripe();
    count(d->allowed ? &m->stripes[i].allowed : &m->stripes[i].denied, i);
    if (d->shadow_denied) count(&m->stripes[i].shadow_denied, i);
}

/* No key of sh is fresh before at_ms any more (next_fresh_ms, lowered). */
static void fresh_by(shard *sh, int64_t at_ms) {
    int64_t n = atomic_load_explicit(&sh->next_fresh_ms, memory_order_relaxed);
    while (at_ms < n && !atomic_compare_exchange_weak_explicit(&sh->next_fresh_ms, &n, at_ms, memory_order_relaxed,
                                                               memory_order_relaxed)) {
    }
}

/* ---- an entry's lock: held for one decision, or while the table's shape
 * changes around the entry (always taken after the shard's lock) ---- */

static __attribute__((noinline)) void entry_lock_slow(entry *e) {
    for (unsigned spins = 0; atomic_exchange_explicit(&e->busy, 1, memory_order_acquire);)
        while (atomic_load_explicit(&e->busy, memory_order_relaxed)) sluice__lock_wait(spins++);
}

static inline void entry_lock(entry *e) {
    if (atomic_exchange_explicit(&e->busy, 1, memory_order_acquire)) entry_lock_slow(e);
}

static void entry_unlock(entry *e) {
    atomic_store_explicit(&e->busy, 0, memory_order_release);
}

/* ---- policies ---- */

static registered *reg(const memory_store *m, unsigned id) {
    return sluice__policy_item(&m->policies, id);
}

/* (Called with the registry's lock held, before the item is added: its id
 * is the registry's count.) */
static int registered_init(void *item, void *ctx) {
    registered *r = item;
    const memory_store *m = ctx;
    r->name_id = m->policies.n;
    for (unsigned i = 0; i < m->policies.n; i++)
        if (strcmp(reg(m, i)->policy.name, r->policy.name) == 0) {
            r->name_id = reg(m, i)->name_id;
            break;
        }
    const sluice__algo *a = r->policy.algo[0];
    /* one enforced part: decided straight by its algorithm (a shadow part
     * is decided by the policy's, composite.c) */
    int one = r->policy.n_parts == 1 && !r->policy.n_shadow;
    r->inline_state = one && a->state_bytes <= sizeof(sluice__i128) && !(a->flags & SLUICE__ALGO_GROWS);
    r->gcra = one && (a->flags & SLUICE__ALGO_GCRA) ? (a->flags & SLUICE__ALGO_DELAYS) != 0 : -1;
    return 0;
}

/* ---- entries ---- */

static sluice__state *parts_of(const registered *r, entry *e, sluice__state *tmp) {
    if (!r->inline_state) return e->st.parts;
    memcpy(tmp, &e->st.word, sizeof e->st.word);
    return tmp;
}

/* The least wait until e is fresh (0: it is fresh now). */
static int64_t entry_reset_ms(const memory_store *m, entry *e, int64_t now_ms) {
    const registered *r = reg(m, e->policy - 1u);
    sluice__state tmp;
    return sluice__policy_reset_ms(&r->policy, parts_of(r, e, &tmp), now_ms);
}

static int entry_fresh(const memory_store *m, entry *e, int64_t now_ms) {
    const registered *r = reg(m, e->policy - 1u);
    sluice__state tmp;
    sluice__state *st = parts_of(r, e, &tmp);
    for (size_t i = 0; i < r->policy.n_parts; i++)
        if (!r->policy.algo[i]->is_fresh(&r->policy.params[i], &st[i], now_ms)) return 0;
    return 1;
}

static void entry_release(const memory_store *m, entry *e) {
    const registered *r = reg(m, e->policy - 1u);
    if (e->key_len > INLINE_KEY) free(e->key.heap);
    if (!r->inline_state) {
        for (size_t i = 0; i < r->policy.n_parts; i++)
            if (r->policy.algo[i]->release) r->policy.algo[i]->release(&e->st.parts[i]);
        free(e->st.parts);
    }
    e->policy = 0;
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

static void key_ref_init(key_ref *k, const void *key, size_t len) {
    k->bytes = key;
    k->len = len;
    k->pad[0] = k->pad[1] = 0;
    if (len <= INLINE_KEY) sluice__key_words(key, len, k->pad);
}

static int holds_key(const entry *e, uint64_t h, unsigned nid, const key_ref *k) {
    if (e->hash != (uint32_t)h || e->name != nid + 1 || e->key_len != k->len) return 0;
    if (k->len > INLINE_KEY) return memcmp(e->key.heap, k->bytes, k->len) == 0;
    uint64_t w[INLINE_KEY / 8];
    memcpy(w, e->key.bytes, sizeof w);
    return ((w[0] ^ k->pad[0]) | (w[1] ^ k->pad[1])) == 0;
}

static uint32_t slot_at(shard *sh, uint32_t i) {
    return atomic_load_explicit(&sh->index[i], memory_order_acquire);
}

static void slot_set(shard *sh, uint32_t i, uint32_t v) {
    atomic_store_explicit(&sh->index[i], v, memory_order_release);
}

/* The key's entry, locked; NULL when not seen. Without the shard's lock
 * it may miss a key moved by a removal meanwhile (the caller then looks
 * again under the shard's lock, where the answer is exact). An entry is
 * checked under its own lock, so one freed or reused meanwhile is never
 * taken for the key. */
static entry *find_locked(shard *sh, uint64_t h, unsigned nid, const key_ref *k) {
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

/* Removes entry e from the shard: index (shifting later slots back so no
 * probe sequence breaks), memory, count. The shard's lock and e's lock are
 * held; e's is given back. (Other entries' hashes are read without their
 * locks: a hash never changes while its entry is in the table.) */
static void remove_entry(const memory_store *m, shard *sh, entry *e) {
    uint32_t want = (uint32_t)(e - sh->entries) + 1;
    uint32_t i = e->hash & sh->mask;
    while ((slot_at(sh, i) & 0xffffffu) != want) i = (i + 1) & sh->mask;
    for (uint32_t j = i;;) {
        j = (j + 1) & sh->mask;
        uint32_t v = slot_at(sh, j);
        if (v == 0) break;
        uint32_t home = sh->entries[SLOT_ENTRY(v)].hash & sh->mask;
        /* v may move back to i when its home is not in (i, j] (cyclically) */
        int stays = i <= j ? (home > i && home <= j) : (home > i || home <= j);
        if (!stays) {
            slot_set(sh, i, v);
            i = j;
        }
    }
    slot_set(sh, i, 0);
    entry_release(m, e);
    e->hash = sh->free_head;
    sh->free_head = want;
    sh->count--;
    entry_unlock(e);
}

/* Finds room for one more key in a full shard; see the top of the file.
 * next_fresh_ms is a lower bound on when any key here becomes fresh
 * (admissions only push a key's time later; new keys lower it), so before
 * it nothing is looked at. */
static int make_room(memory_store *m, shard *sh, int64_t now_ms) {
    int freed = 0;
    if (now_ms < atomic_load_explicit(&sh->next_fresh_ms, memory_order_relaxed)) goto none_fresh;
    sh->now_ms = now_ms; /* keys forgotten now: no later first request is earlier */
    for (uint32_t k = 0; k < SWEEP && k < sh->cap; k++) {
        entry *e = &sh->entries[sh->sweep_hand];
        sh->sweep_hand = sh->sweep_hand + 1 == sh->cap ? 0 : sh->sweep_hand + 1;
        entry_lock(e);
        if (e->policy && entry_fresh(m, e, now_ms)) {
            remove_entry(m, sh, e);
            sh->forgotten++;
            freed = 1;
        } else {
            entry_unlock(e);
        }
    }
    if (freed) return 0;
    /* none near the hand: look at all, and learn when the next one is due
     * (what a refund lowers it to meanwhile counts too) */
    atomic_store_explicit(&sh->next_fresh_ms, INT64_MAX, memory_order_relaxed);
    int64_t next = INT64_MAX;
    for (uint32_t i = 0; i < sh->cap; i++) {
        entry *e = &sh->entries[i];
        entry_lock(e);
        int64_t reset = e->policy ? entry_reset_ms(m, e, now_ms) : -1;
        if (reset == 0) {
            remove_entry(m, sh, e);
            sh->forgotten++;
            freed = 1;
            continue;
        }
        if (reset > 0 && now_ms + reset < next) next = now_ms + reset;
        entry_unlock(e);
    }
    fresh_by(sh, next);
    if (freed) return 0;
none_fresh:
    if (m->on_full == SLUICE_ON_FULL_REFUSE) {
        sh->refused++;
        sluice__store_errf(&m->head, "store is full (max_keys=%lld) of keys that are not fresh",
                           (long long)m->max_keys);
        return SLUICE_EFULL;
    }
    for (;;) { /* CLOCK: the first entry not decided since the hand last passed */
        entry *e = &sh->entries[sh->evict_hand];
        sh->evict_hand = sh->evict_hand + 1 == sh->cap ? 0 : sh->evict_hand + 1;
        entry_lock(e);
        if (e->policy && !e->ref) {
            remove_entry(m, sh, e);
            sh->evicted++;
            return 0;
        }
        e->ref = 0;
        entry_unlock(e);
    }
}

static void free_parts(const registered *r, sluice__state *parts) {
    for (size_t i = 0; parts && i < r->policy.n_parts; i++)
        if (r->policy.algo[i]->release) r->policy.algo[i]->release(&parts[i]);
    free(parts);
}

/* Fresh states on the heap for r (NULL for one kept inline), with room
 * for a first admission. 0 or SLUICE_ENOMEM. */
static int new_parts(const registered *r, sluice__state **out) {
    sluice__state *parts = NULL;
    *out = NULL;
    if (r->inline_state) return 0;
    int rc = (parts = calloc(r->policy.n_parts, sizeof *parts)) ? 0 : SLUICE_ENOMEM;
    for (size_t i = 0; rc == 0 && i < r->policy.n_parts; i++) {
        r->policy.algo[i]->init(&r->policy.params[i], &parts[i]);
        if (r->policy.algo[i]->reserve) rc = r->policy.algo[i]->reserve(&r->policy.params[i], &parts[i]);
    }
    if (rc) free_parts(r, parts);
    else *out = parts;
    return rc;
}

/* Adds a fresh entry for the key (which is not there). */
static int insert(memory_store *m, shard *sh, const registered *r, uint64_t h, unsigned pid,
                  const key_ref *k, int64_t now_ms, entry **out) {
    size_t len = k->len;
    /* memory first: a failure must not have evicted anything */
    uint8_t *heap_key = NULL;
    sluice__state *parts = NULL;
    if (len > INLINE_KEY && !(heap_key = malloc(len))) return SLUICE_ENOMEM;
    int rc = new_parts(r, &parts);
    if (rc) {
        free(heap_key);
        return rc;
    }
    if (sh->count == sh->cap) {
        rc = make_room(m, sh, now_ms);
        if (rc) {
            free_parts(r, parts);
            free(heap_key);
            return rc;
        }
    }
    uint32_t idx;
    if (sh->free_head) {
        idx = sh->free_head - 1;
        sh->free_head = sh->entries[idx].hash;
    } else {
        idx = sh->top++;
    }
    entry *e = &sh->entries[idx];
    entry_lock(e); /* a lookup that saw it before it was freed may hold it */
    e->hash = (uint32_t)h;
    e->policy = (uint16_t)(pid + 1);
    e->name = (uint16_t)(r->name_id + 1);
    e->key_len = (uint16_t)len;
    e->ref = 1;
    if (heap_key) {
        memcpy(heap_key, k->bytes, len);
        e->key.heap = heap_key;
    } else {
        memcpy(e->key.bytes, k->pad, INLINE_KEY); /* zero-padded: compared as words */
    }
    if (parts) {
        e->st.parts = parts;
    } else {
        sluice__state fresh;
        r->policy.algo[0]->init(&r->policy.params[0], &fresh);
        memcpy(&e->st.word, &fresh, sizeof e->st.word);
    }
    uint32_t i = (uint32_t)h & sh->mask;
    while (slot_at(sh, i)) i = (i + 1) & sh->mask;
    slot_set(sh, i, (TAG(h) << 24) | (idx + 1));
    sh->count++;
    *out = e; /* locked */
    return 0;
}

/* ---- decisions ---- */

static uint64_t key_hash(const memory_store *m, unsigned nid, const key_ref *k) {
    if (m->collide) return 0;
    if (k->len <= 16 && m->aes)
        return sluice__aeshash16_words(m->seed + 2, nid + 1, k->pad[0], k->pad[1], k->len);
    uint64_t sk[2] = {m->seed[0] ^ ((uint64_t)(nid + 1) * UINT64_C(0x9e3779b97f4a7c15)), m->seed[1]};
    return sluice__siphash13(sk, k->bytes, k->len);
}

static int decide(registered *r, entry *e, int64_t cost, int64_t now_ms, sluice_decision *d) {
    if (!r->inline_state) return sluice__policy_decide_grow(&r->policy, e->st.parts, now_ms, cost, d);
    /* one part of at most 16 bytes: straight to its algorithm, in place (a
     * copy through the stack cost a stalled 16-byte load of two 8-byte
     * stores); it writes only the state's first 16 bytes. A bucket's
     * common case (a backlog within 64 bits) is inlined here. */
    const sluice__params *pp = &r->policy.params[0];
    if (r->gcra >= 0) {
        sluice__i128 ts = (sluice__i128)now_ms * pp->r, b = e->st.word - ts;
        int64_t nb;
        if (b <= INT64_MAX) {
            if (sluice__gcra_core(pp, b > 0 ? (int64_t)b : 0, cost, r->gcra, d, &nb)) e->st.word = ts + nb;
            return 0;
        }
    }
    const sluice__algo *a = r->policy.algo[0];
    return a->decide(pp, (sluice__state *)(void *)&e->st.word, now_ms, cost, d, 1);
}

/* Converts locked entry e, kept by another configuration of r's name, to
 * r's (id pid): docs/semantics.md, "Retune". 0 or SLUICE_ENOMEM (e as it
 * was). */
static __attribute__((noinline, cold)) int convert(memory_store *m, shard *sh, entry *e, const registered *r,
                                                   unsigned pid, int64_t now_ms) {
    const registered *from = reg(m, e->policy - 1u);
    sluice__state tmp, fresh, *parts;
    int rc = new_parts(r, &parts);
    if (rc) return rc;
    if (!parts) r->policy.algo[0]->init(&r->policy.params[0], &fresh);
    rc = sluice__policy_convert(&from->policy, parts_of(from, e, &tmp), &r->policy, parts ? parts : &fresh, now_ms);
    if (rc) {
        free_parts(r, parts);
        return rc;
    }
    if (!from->inline_state) free_parts(from, e->st.parts);
    if (parts) e->st.parts = parts;
    else memcpy(&e->st.word, &fresh, sizeof e->st.word);
    e->policy = (uint16_t)(pid + 1);
    fresh_by(sh, now_ms + sluice__policy_reset_ms(&r->policy, parts ? parts : &fresh, now_ms));
    return 0;
}

/* A request made ready to decide: its policy, key and where the key lives. */
typedef struct {
    unsigned pid, nid; /* the policy's id, its name's */
    registered *r;
    key_ref k;
    uint64_t h;
    shard *sh;
} prepared;

static inline __attribute__((always_inline)) int prepare(memory_store *m, const sluice_policy *p,
                                                         const void *key, size_t len, prepared *q) {
    uint32_t nid;
    int rc = sluice__policy_set_id(&m->policies, &m->head, p, &q->pid, &nid);
    if (rc) return rc;
    q->nid = nid;
    q->r = reg(m, q->pid);
    key_ref_init(&q->k, key, len);
    q->h = key_hash(m, nid, &q->k);
    q->sh = &m->shards[m->shard_bits ? q->h >> (64 - m->shard_bits) : 0];
    return 0;
}

/* Decides q (passed by its fields, which then stay in registers). */
static inline __attribute__((always_inline)) int acquire_prepared(memory_store *m, unsigned pid, unsigned nid,
                                                                  registered *r, const key_ref *kp,
                                                                  uint64_t h, shard *sh, int64_t cost,
                                                                  int64_t now_ms, sluice_decision *d) {
    sluice_store *s = &m->head;
    int rc;
    /* store time never runs backwards: the highest reading admitted at */
    int64_t reading_ms = now_ms;
    now_ms = sluice__store_time(&m->now_ms, now_ms);
    /* a key held: its entry's lock alone; else the shard's, to add it */
    int is_new = 0, shard_held = 0;
    entry *e = find_locked(sh, h, nid, kp);
    if (!e) {
        sluice__lock_take(&sh->lock);
        shard_held = 1;
        if (now_ms < sh->now_ms) now_ms = sh->now_ms; /* never before a forgetting */
        e = find_locked(sh, h, nid, kp);
        if (e) {
            sluice__lock_give(&sh->lock);
            shard_held = 0;
        } else if ((rc = insert(m, sh, r, h, pid, kp, now_ms, &e)) != 0) {
            sluice__lock_give(&sh->lock);
            if (rc == SLUICE_ENOMEM) sluice__store_errf(s, "out of memory");
            return rc;
        } else {
            is_new = 1; /* the shard's lock stays held for its first decision */
        }
    }
    if (__builtin_expect(e->policy != pid + 1, 0) && (rc = convert(m, sh, e, r, pid, now_ms)) != 0) {
        entry_unlock(e);
        if (shard_held) sluice__lock_give(&sh->lock);
        sluice__store_errf(s, "out of memory");
        return rc;
    }
    rc = decide(r, e, cost, now_ms, d);
    if (is_new && (rc || !d->allowed)) { /* a failed first request leaves no trace */
        remove_entry(m, sh, e);
    } else {
        if (rc == 0) {
            e->ref = 1;
            count_decision(m, d);
            if (d->allowed) sluice__store_time_raise(&m->now_ms, now_ms);
            if (is_new) /* a shadow part may be fresh later than the decision says */
                fresh_by(sh, now_ms + (r->policy.n_shadow ? entry_reset_ms(m, e, now_ms) : d->reset_ms));
        }
        entry_unlock(e);
    }
    if (shard_held) sluice__lock_give(&sh->lock);
    if (rc == SLUICE_ENOMEM) sluice__store_errf(s, "out of memory");
    sluice__decision_lag(d, now_ms - reading_ms);
    return rc;
}

static int mem_acquire_at(sluice_store *s, const sluice_policy *p, const void *key, size_t len,
                          int64_t cost, int64_t now_ms, sluice_decision *d) {
    memory_store *m = (memory_store *)s;
    prepared q;
    int rc = prepare(m, p, key, len, &q);
    return rc ? rc : acquire_prepared(m, q.pid, q.nid, q.r, &q.k, q.h, q.sh, cost, now_ms, d);
}

/* The decision a fresh state of r gives cost at now_ms (a key not held). */
static void fresh_peek(const registered *r, int64_t cost, int64_t now_ms, sluice_decision *d) {
    sluice__state st[SLUICE_POLICY_MAX_PARTS];
    for (size_t i = 0; i < r->policy.n_parts; i++) r->policy.algo[i]->init(&r->policy.params[i], &st[i]);
    sluice__policy_peek(&r->policy, st, now_ms, cost, d);
}

/* A peek or refund of a one-part bucket kept inline, as decide() decides
 * it (a refund: the TAT back by cost, not below the reading; then a peek
 * of cost 1): 1, or 0 when its backlog does not fit 64 bits (the policy's
 * path then). The entry's lock is held. */
static int bucket_verb(const registered *r, shard *sh, entry *e, sluice__verb verb, int64_t cost, int64_t now_ms,
                       sluice_decision *d) {
    const sluice__params *pp = &r->policy.params[0];
    sluice__i128 ts = (sluice__i128)now_ms * pp->r, b = e->st.word - ts;
    if (b > INT64_MAX) return 0;
    if (verb == SLUICE__VERB_REFUND) {
        sluice__gcra_refund(pp, (sluice__state *)(void *)&e->st.word, now_ms, cost);
        b = e->st.word - ts;
        fresh_by(sh, now_ms + (b > 0 ? sluice__gcra_ceil_r(pp, (int64_t)b) : 0));
        cost = 1;
    }
    int64_t backlog = b > 0 ? (int64_t)b : 0;
    if (sluice__gcra_room(pp, backlog, cost)) sluice__gcra_allowed(pp, backlog, backlog + cost * pp->p, r->gcra, d);
    else sluice__gcra_denied(pp, backlog, cost, d);
    return 1;
}

/* Peek, refund, reset: the key's entry found as a decision finds it (none
 * is ever added), converted when another configuration of the name keeps
 * it; a reset removes it under the shard's lock. Nothing moves store time. */
static int mem_operate_at(sluice_store *s, const sluice_policy *p, const void *key, size_t len, sluice__verb verb,
                          int64_t cost, int64_t now_ms, sluice_decision *d) {
    memory_store *m = (memory_store *)s;
    prepared q;
    int rc = prepare(m, p, key, len, &q);
    if (rc) return rc;
    int64_t reading_ms = now_ms;
    now_ms = sluice__store_time(&m->now_ms, now_ms);
    entry *e = verb == SLUICE__VERB_RESET ? NULL : find_locked(q.sh, q.h, q.nid, &q.k);
    if (!e) { /* under the shard's lock the answer is exact */
        sluice__lock_take(&q.sh->lock);
        if (now_ms < q.sh->now_ms) now_ms = q.sh->now_ms;
        e = find_locked(q.sh, q.h, q.nid, &q.k);
        if (e && verb == SLUICE__VERB_RESET) {
            remove_entry(m, q.sh, e);
            e = NULL;
        }
        sluice__lock_give(&q.sh->lock);
    }
    if (e && e->policy != q.pid + 1 && (rc = convert(m, q.sh, e, q.r, q.pid, now_ms)) != 0) {
        entry_unlock(e);
        sluice__store_errf(s, "out of memory");
        return rc;
    }
    int64_t asked = verb == SLUICE__VERB_PEEK ? cost : 1;
    if (!e) {
        fresh_peek(q.r, asked, now_ms, d);
    } else if (q.r->gcra >= 0 && bucket_verb(q.r, q.sh, e, verb, cost, now_ms, d)) {
        entry_unlock(e);
    } else {
        sluice__state tmp, *st = parts_of(q.r, e, &tmp);
        if (verb == SLUICE__VERB_REFUND) {
            sluice__policy_refund(&q.r->policy, st, now_ms, cost);
            if (st == &tmp) memcpy(&e->st.word, &tmp, sizeof e->st.word);
            fresh_by(q.sh, now_ms + sluice__policy_reset_ms(&q.r->policy, st, now_ms));
        }
        sluice__policy_peek(&q.r->policy, st, now_ms, asked, d);
        entry_unlock(e);
    }
    sluice__decision_lag(d, now_ms - reading_ms);
    return 0;
}

/* A batch, decided in order as one acquire_at each, BATCH requests at a
 * time: their keys hashed first and their index slots, then their entries,
 * fetched into the cache ahead (prefetch: a hint, so whatever changes
 * meanwhile, each decision finds its key as acquire_at would). With many
 * keys, a decision's cache misses then overlap the others' instead of
 * following them. */
#define BATCH 16
static void mem_acquire_many(sluice_store *s, const sluice_request *reqs, size_t n, int64_t now_ms,
                             sluice_decision *out, int *results) {
    memory_store *m = (memory_store *)s;
    prepared q[BATCH];
    for (size_t base = 0; base < n; base += BATCH) {
        size_t g = n - base < BATCH ? n - base : BATCH;
        for (size_t i = 0; i < g; i++) __builtin_prefetch(reqs[base + i].key);
        for (size_t i = 0; i < g; i++) {
            const sluice_request *rq = &reqs[base + i];
            if (results[base + i]) continue;
            results[base + i] = prepare(m, rq->policy, rq->key, rq->key_len, &q[i]);
            if (!results[base + i]) __builtin_prefetch(&q[i].sh->index[q[i].h & q[i].sh->mask]);
        }
        for (size_t i = 0; i < g; i++) {
            if (results[base + i]) continue;
            uint32_t v = slot_at(q[i].sh, (uint32_t)q[i].h & q[i].sh->mask);
            if (v && (v >> 24) == TAG(q[i].h)) __builtin_prefetch(&q[i].sh->entries[SLOT_ENTRY(v)], 1);
        }
        for (size_t i = 0; i < g; i++)
            if (!results[base + i])
                results[base + i] = acquire_prepared(m, q[i].pid, q[i].nid, q[i].r, &q[i].k, q[i].h, q[i].sh,
                                                     reqs[base + i].cost, now_ms, &out[base + i]);
    }
}

/* ---- the store ---- */

static void mem_stats(sluice_store *s, sluice_stats *out) {
    memory_store *m = (memory_store *)s;
    out->capacity = m->max_keys;
    for (int i = 0; i <= SLUICE__STRIPES; i++) {
        out->allowed += atomic_load_explicit(&m->stripes[i].allowed, memory_order_relaxed);
        out->denied += atomic_load_explicit(&m->stripes[i].denied, memory_order_relaxed);
        out->shadow_denied += atomic_load_explicit(&m->stripes[i].shadow_denied, memory_order_relaxed);
    }
    for (size_t i = 0; i < ((size_t)1 << m->shard_bits); i++) {
        shard *sh = &m->shards[i];
        sluice__lock_take(&sh->lock);
        out->keys += sh->count;
        out->forgotten += sh->forgotten;
        out->evicted += sh->evicted;
        out->refused += sh->refused;
        sluice__lock_give(&sh->lock);
    }
}

static void mem_close(sluice_store *s) {
    memory_store *m = (memory_store *)s;
    if (m->shards) {
        for (size_t i = 0; i < ((size_t)1 << m->shard_bits); i++) {
            shard *sh = &m->shards[i];
            for (uint32_t k = 0; sh->entries && k < sh->top; k++)
                if (sh->entries[k].policy) entry_release(m, &sh->entries[k]);
            free(sh->index);
            free(sh->entries);
        }
        free(m->shards);
    }
    sluice__policy_set_free(&m->policies);
    free(m);
}

/* The URL parameters memory: takes (kinds.c reads them). */
enum { P_MAX_KEYS, P_ON_FULL };
static const char *const on_full_names[] = {"evict", "refuse", NULL}; /* in sluice_on_full's order */
static const sluice__param mem_params[] = {
    [P_MAX_KEYS] = {"max_keys", SLUICE__PARAM_INT, 1, SLUICE_MAX_KEYS_MAX, SLUICE_MAX_KEYS_DEFAULT, NULL, NULL, NULL,
                    SLUICE__OPT_MAX_KEYS},
    [P_ON_FULL] = {"on_full", SLUICE__PARAM_CHOICE, 0, 0, SLUICE_ON_FULL_EVICT, on_full_names, NULL, NULL,
                   SLUICE__OPT_ON_FULL},
};

static int mem_open(const sluice__store_config *cfg, sluice_store **out, char *err, size_t errlen) {
    if (cfg->path_len != 0) {
        sluice__errf(err, errlen, "%s: the memory store takes no path", cfg->base);
        return SLUICE_EINVAL;
    }
    int64_t max_keys = cfg->value[P_MAX_KEYS];
    size_t bytes = (sizeof(memory_store) + 63) / 64 * 64;
    memory_store *m = aligned_alloc(64, bytes); /* it has 64-byte aligned members */
    if (!m) {
        sluice__errf(err, errlen, "memory: out of memory");
        return SLUICE_ENOMEM;
    }
    memset(m, 0, bytes);
    m->max_keys = max_keys;
    m->on_full = (sluice_on_full)cfg->value[P_ON_FULL];
    atomic_init(&m->now_ms, SLUICE_TIME_MIN_MS);
    m->policies.item_size = sizeof(registered);
    m->policies.init = registered_init;
    m->policies.ctx = m;
    m->policies.word_offset = offsetof(registered, name_id);
    sluice__random_words(m->seed, sizeof m->seed / sizeof m->seed[0]);
    m->aes = sluice__aeshash_available();
    unsigned bits = 0;
    while (bits < 6 && (max_keys >> (bits + 1)) >= SHARD_KEYS_MIN) bits++;
    while (((uint64_t)max_keys >> bits) > ENTRY_MAX) bits++;
    m->shard_bits = bits;
    size_t n = (size_t)1 << bits;
    m->shards = aligned_alloc(64, n * sizeof(shard));
    if (!m->shards) goto nomem;
    memset(m->shards, 0, n * sizeof(shard));
    for (size_t i = 0; i < n; i++) {
        shard *sh = &m->shards[i];
        sh->cap = (uint32_t)(max_keys / (int64_t)n + ((int64_t)i < max_keys % (int64_t)n));
        atomic_init(&sh->next_fresh_ms, INT64_MIN);
        sh->now_ms = SLUICE_TIME_MIN_MS;
        uint32_t slots = 2;
        while (slots < 2 * (uint64_t)sh->cap) slots *= 2;
        sh->mask = slots - 1;
        sh->index = calloc(slots, sizeof *sh->index);
        sh->entries = calloc(sh->cap ? sh->cap : 1, sizeof *sh->entries);
        if (!sh->index || !sh->entries) goto nomem;
    }
    *out = &m->head;
    return 0;
nomem:
    mem_close(&m->head);
    sluice__errf(err, errlen, "out of memory for max_keys=%lld", (long long)max_keys);
    return SLUICE_ENOMEM;
}

void sluice__memory_store_collide(sluice_store *s) {
    ((memory_store *)s)->collide = 1;
}

int sluice__memory_store_holds(sluice_store *s, const sluice_policy *p, const void *key, size_t len) {
    memory_store *m = (memory_store *)s;
    prepared q;
    if (prepare(m, p, key, len, &q)) return 0;
    sluice__lock_take(&q.sh->lock);
    entry *e = find_locked(q.sh, q.h, q.nid, &q.k);
    if (e) entry_unlock(e);
    sluice__lock_give(&q.sh->lock);
    return e != NULL;
}

const sluice__store_ops sluice__memory_store = {
    .version = SLUICE__STORE_INTERFACE,
    .scheme = "memory",
    .params = mem_params,
    .n_params = sizeof mem_params / sizeof mem_params[0],
    .open = mem_open,
    .acquire_at = mem_acquire_at,
    .acquire_many = mem_acquire_many,
    .operate_at = mem_operate_at,
    .stats = mem_stats,
    .close = mem_close,
};
