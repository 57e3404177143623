/* store/memory/table.c: the memory store's table shape, under a shard's
 * lock: a policy registered, a key added (FAST in its slot, or in an
 * entry), removed (the keys after it moved back: no tombstones), moved to
 * an entry when its word outgrows the epoch's range, converted to another
 * configuration of its name, and room made for a new key (fresh keys
 * first, then on_full). FAST keys change under the shard's lock only by a
 * 16-byte compare-and-swap of their {word, meta} pair, which moves the
 * slot's version on whenever the key changes hands, so that a decision
 * racing it (without the lock) fails its own and looks again. memory.c
 * has the design. */
#include "memory.h"

/* (Called with the registry's lock held, before the item is added: its id
 * is the registry's count.) */
int sluice__mem_registered_init(void *item, void *ctx) {
    registered *r = item;
    const memory_store *m = ctx;
    r->name_id = m->policies.n;
    for (unsigned i = 0; i < m->policies.n; i++)
        if (strcmp(reg(m, i)->policy.name, r->policy.name) == 0) {
            r->name_id = reg(m, i)->name_id;
            break;
        }
    const sluice__algo *a = r->policy.algo[0];
    const sluice__params *pp = &r->policy.params[0];
    /* one enforced part: decided straight by its algorithm (a shadow part
     * is decided by the policy's, composite.c) */
    int one = r->policy.n_parts == 1 && !r->policy.n_shadow;
    r->inline_state = one && a->state_bytes <= sizeof(sluice__i128) && !(a->flags & SLUICE__ALGO_GROWS);
    r->fast = one && m->cas16 && a->word_fits && a->word_fits(pp);
    r->gcra = (a->flags & SLUICE__ALGO_GCRA) != 0;
    r->shaper = (a->flags & SLUICE__ALGO_DELAYS) != 0;
    r->unit = r->fast ? a->word_unit(pp) : 0;
    r->fresh_word = a->word_fresh;
    return 0;
}

uint64_t sluice__mem_key_hash(const memory_store *m, unsigned nid, const key_ref *k) {
    if (m->collide) return 0;
    if (k->len <= 16 && m->aes)
        return sluice__aeshash16_words(m->seed + 2, nid + 1, k->pad[0], k->pad[1], k->len);
    uint64_t sk[2] = {m->seed[0] ^ ((uint64_t)(nid + 1) * UINT64_C(0x9e3779b97f4a7c15)), m->seed[1]};
    return sluice__siphash13(sk, k->bytes, k->len);
}

void sluice__mem_entry_lock_slow(entry *e) {
    for (unsigned spins = 0; atomic_exchange_explicit(&e->busy, 1, memory_order_acquire);)
        while (atomic_load_explicit(&e->busy, memory_order_relaxed)) sluice__lock_wait(spins++);
}

/* With the lock held no key moves: the probe is exact. */
slot *sluice__mem_find_locked(shard *sh, uint64_t h, unsigned nid, const key_ref *k, uint32_t *at) {
    uint64_t seen;
    slot *s = find_slot(sh, h, nid, k, &seen);
    if (s) *at = (uint32_t)(s - sh->slots);
    return s;
}

/* ---- entries: allocated in chunks as keys that are not FAST need them ---- */

static int entry_take(shard *sh, uint32_t *idx) {
    if (sh->free_head) {
        *idx = sh->free_head - 1;
        sh->free_head = entry_at(sh, *idx)->hash;
        return 0;
    }
    uint32_t c = sh->n_entries / CHUNK_ENTRIES;
    if (!(sh->chunks[c] = calloc(CHUNK_ENTRIES, sizeof(entry)))) return SLUICE_ENOMEM;
    for (uint32_t i = 1; i < CHUNK_ENTRIES; i++) { /* the chunk's others: free, in order */
        entry *e = &sh->chunks[c][CHUNK_ENTRIES - i];
        e->hash = sh->free_head;
        sh->free_head = sh->n_entries + (CHUNK_ENTRIES - i) + 1;
    }
    *idx = sh->n_entries;
    sh->n_entries += CHUNK_ENTRIES;
    return 0;
}

static void entry_give(shard *sh, uint32_t idx) {
    entry *e = entry_at(sh, idx);
    e->policy = 0;
    e->hash = sh->free_head;
    sh->free_head = idx + 1;
}

void sluice__mem_free_parts(const registered *r, sluice__state *parts) {
    for (size_t i = 0; parts && i < r->policy.n_parts; i++)
        if (r->policy.algo[i]->release) r->policy.algo[i]->release(&parts[i]);
    free(parts);
}

int sluice__mem_new_parts(const registered *r, sluice__state **out) {
    sluice__state *parts = NULL;
    *out = NULL;
    if (r->inline_state) return 0;
    int rc = (parts = calloc(r->policy.n_parts, sizeof *parts)) ? 0 : SLUICE_ENOMEM;
    for (size_t i = 0; rc == 0 && i < r->policy.n_parts; i++) {
        r->policy.algo[i]->init(&r->policy.params[i], &parts[i]);
        if (r->policy.algo[i]->reserve) rc = r->policy.algo[i]->reserve(&r->policy.params[i], &parts[i]);
    }
    if (rc) sluice__mem_free_parts(r, parts);
    else *out = parts;
    return rc;
}

/* Frees what e holds (its key, its states). */
static void entry_release(const memory_store *m, entry *e) {
    const registered *r = reg(m, e->policy - 1u);
    if (e->key_len > INLINE_KEY) free(e->key.heap);
    if (!r->inline_state) sluice__mem_free_parts(r, e->st.parts);
    e->policy = 0;
}

/* A locked entry's state, as r's parts (its own, or written back: put). */
static void entry_put_state(const registered *r, entry *e, sluice__state *parts, const sluice__state *inline_st) {
    if (r->inline_state) memcpy(&e->st.word, inline_st, sizeof e->st.word);
    else e->st.parts = parts;
}

/* ---- a slot changing hands ---- */

/* The slot's {lo, hi}, with hi made dead (not live, its version on):
 * after this no decision that read it live can change it. */
static void take_dead(slot *s, uint64_t *lo, uint64_t *hi) {
    do sluice__pair_read(&s->st, lo, hi);
    while (!sluice__cas16(&s->st, *lo, *hi, *lo, M_META(M_VERSION(*hi) + 1, 0, 0, 0, 0)));
}

/* Writes a key into empty slot d: its key words, then {lo, hi} with d's
 * version on (so a stale compare-and-swap of an earlier key there fails). */
static void slot_fill(slot *d, uint64_t k0, uint64_t k1, uint64_t lo, uint64_t meta_no_version) {
    atomic_store_explicit(&d->key[0], k0, memory_order_relaxed);
    atomic_store_explicit(&d->key[1], k1, memory_order_relaxed);
    uint64_t old = atomic_load_explicit(&d->st.hi, memory_order_relaxed);
    sluice__pair_set(&d->st, lo, (uint64_t)(M_VERSION(old) + 1) << 32 | (meta_no_version & 0xffffffffu));
}

/* The home of the key in live slot s (its hash again: inline keys are
 * hashed from their words, a long key's hash is in its slot). */
static uint32_t home_of_slot(const memory_store *m, const shard *sh, const slot *s, uint64_t meta) {
    uint64_t h;
    if (M_LEN(meta) == M_LONG_KEY) {
        h = atomic_load_explicit(&s->key[0], memory_order_relaxed);
    } else {
        key_ref k;
        uint64_t w[2] = {atomic_load_explicit(&s->key[0], memory_order_relaxed),
                         atomic_load_explicit(&s->key[1], memory_order_relaxed)};
        k.bytes = w;
        k.len = M_LEN(meta);
        k.pad[0] = w[0], k.pad[1] = w[1];
        h = sluice__mem_key_hash(m, M_NAME(meta), &k);
    }
    return home_of(sh, h);
}

void sluice__mem_remove(memory_store *m, shard *sh, uint32_t i) {
    uint64_t lo, hi;
    take_dead(&sh->slots[i], &lo, &hi);
    if (!(hi & M_FAST)) { /* its entry, locked by the caller */
        entry *e = entry_at(sh, (uint32_t)lo);
        entry_release(m, e);
        entry_give(sh, (uint32_t)lo);
        entry_unlock(e);
    }
    sh->count--;
    /* the keys after it move back when their home is not in (hole, j] */
    uint32_t hole = i;
    for (uint32_t j = next_slot(sh, hole);; j = next_slot(sh, j)) {
        slot *s = &sh->slots[j];
        uint64_t mj = atomic_load_explicit(&s->st.hi, memory_order_acquire);
        if (!(mj & M_LIVE)) break;
        uint32_t home = home_of_slot(m, sh, s, mj);
        int stays = hole <= j ? (home > hole && home <= j) : (home > hole || home <= j);
        if (stays) continue;
        uint64_t k0 = atomic_load_explicit(&s->key[0], memory_order_relaxed);
        uint64_t k1 = atomic_load_explicit(&s->key[1], memory_order_relaxed);
        take_dead(s, &lo, &hi);
        slot_fill(&sh->slots[hole], k0, k1, lo, hi);
        hole = j;
    }
}

/* ---- freshness ---- */

/* Slot i's key's states (FAST: from its word, read as {*lo, *hi}; else its
 * entry's, which the caller holds locked), into tmp (parts: pointed to). */
static const sluice__state *states_of(const memory_store *m, shard *sh, uint32_t i, sluice__state *tmp,
                                      uint64_t *lo, uint64_t *hi, const registered **r) {
    slot *s = &sh->slots[i];
    sluice__pair_read(&s->st, lo, hi);
    *r = reg(m, M_POLICY(*hi));
    if (*hi & M_FAST) {
        (*r)->policy.algo[0]->word_state((*r)->unit, *lo, atomic_load_explicit(&m->epoch_ms, memory_order_relaxed), tmp);
        return tmp;
    }
    return parts_of(*r, entry_at(sh, (uint32_t)*lo), tmp);
}

int64_t sluice__mem_reset_ms(const memory_store *m, shard *sh, uint32_t i, int64_t now_ms) {
    sluice__state tmp;
    uint64_t lo, hi;
    const registered *r;
    const sluice__state *st = states_of(m, sh, i, &tmp, &lo, &hi, &r);
    return sluice__policy_reset_ms(&r->policy, st, now_ms);
}

/* ---- room ---- */

/* Slot i's entry, locked (NULL for a FAST key). */
static entry *lock_entry_of(shard *sh, uint32_t i) {
    uint64_t m = atomic_load_explicit(&sh->slots[i].st.hi, memory_order_acquire);
    if (m & M_FAST) return NULL;
    entry *e = entry_at(sh, (uint32_t)atomic_load_explicit(&sh->slots[i].st.lo, memory_order_relaxed));
    entry_lock(e);
    return e;
}

/* Removes slot i's key when it is fresh at now_ms: 1, else 0; *reset: its
 * wait until fresh otherwise. */
static int forget_if_fresh(memory_store *m, shard *sh, uint32_t i, int64_t now_ms, int64_t *reset) {
    entry *e = lock_entry_of(sh, i);
    *reset = sluice__mem_reset_ms(m, sh, i, now_ms);
    if (*reset == 0) {
        sluice__mem_remove(m, sh, i); /* gives e back */
        sh->forgotten++;
        return 1;
    }
    if (e) entry_unlock(e);
    return 0;
}

/* Whether slot i's key was decided since the hand last passed, clearing
 * the mark (CLOCK, second chance). */
static int used_since(shard *sh, uint32_t i) {
    slot *s = &sh->slots[i];
    uint64_t lo, hi;
    for (;;) {
        sluice__pair_read(&s->st, &lo, &hi);
        if (!(hi & M_FAST)) {
            entry *e = entry_at(sh, (uint32_t)lo);
            entry_lock(e);
            int ref = e->ref;
            e->ref = 0;
            entry_unlock(e);
            return ref;
        }
        if (!(hi & M_REF)) return 0;
        if (sluice__cas16(&s->st, lo, hi, lo, hi & ~(uint64_t)M_REF)) return 1;
    }
}

/* Finds room for one more key in a full shard; see the top of memory.c.
 * next_fresh_ms is a lower bound on when any key here becomes fresh
 * (admissions only push a key's time later; new keys lower it), so before
 * it nothing is looked at. Removals move keys back: the hands are hints. */
static int make_room(memory_store *m, shard *sh, int64_t now_ms) {
    int64_t reset;
    if (now_ms < atomic_load_explicit(&sh->next_fresh_ms, memory_order_relaxed)) goto none_fresh;
    sh->now_ms = now_ms; /* keys forgotten now: no later first request is earlier */
    for (uint32_t k = 0; k < SWEEP && k < sh->n_slots; k++) {
        uint32_t i = sh->sweep_hand;
        sh->sweep_hand = next_slot(sh, i);
        if ((atomic_load_explicit(&sh->slots[i].st.hi, memory_order_acquire) & M_LIVE) &&
            forget_if_fresh(m, sh, i, now_ms, &reset))
            return 0;
    }
    /* none near the hand: look at all, and learn when the next one is due
     * (what a refund lowers it to meanwhile counts too) */
    atomic_store_explicit(&sh->next_fresh_ms, INT64_MAX, memory_order_relaxed);
    int64_t next = INT64_MAX;
    int freed = 0;
    for (uint32_t i = 0; i < sh->n_slots; i++) {
        while ((atomic_load_explicit(&sh->slots[i].st.hi, memory_order_acquire) & M_LIVE) &&
               forget_if_fresh(m, sh, i, now_ms, &reset))
            freed = 1; /* a key moved back into i: look at it too */
        if ((atomic_load_explicit(&sh->slots[i].st.hi, memory_order_acquire) & M_LIVE) && now_ms + reset < next)
            next = now_ms + reset;
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
    for (;;) { /* CLOCK: the first key not decided since the hand last passed */
        uint32_t i = sh->evict_hand;
        sh->evict_hand = next_slot(sh, i);
        if (!(atomic_load_explicit(&sh->slots[i].st.hi, memory_order_acquire) & M_LIVE) || used_since(sh, i))
            continue;
        lock_entry_of(sh, i);
        sluice__mem_remove(m, sh, i);
        sh->evicted++;
        return 0;
    }
}

/* ---- adding ---- */

int sluice__mem_insert(memory_store *m, shard *sh, const registered *r, uint64_t h, unsigned pid,
                       const key_ref *k, int64_t now_ms, uint32_t *at) {
    size_t len = k->len;
    int fast = r->fast && len <= INLINE_KEY;
    /* memory first: a failure must not have evicted anything */
    uint8_t *heap_key = NULL;
    sluice__state *parts = NULL;
    if (!fast) {
        if (len > INLINE_KEY && !(heap_key = malloc(len))) return SLUICE_ENOMEM;
        int rc = sluice__mem_new_parts(r, &parts);
        if (rc) {
            free(heap_key);
            return rc;
        }
    }
    if (sh->count == sh->cap) {
        int rc = make_room(m, sh, now_ms);
        if (rc) {
            sluice__mem_free_parts(r, parts);
            free(heap_key);
            return rc;
        }
    }
    uint32_t idx = 0;
    if (!fast && entry_take(sh, &idx) != 0) {
        sluice__mem_free_parts(r, parts);
        free(heap_key);
        return SLUICE_ENOMEM;
    }
    int64_t unset = EPOCH_UNSET; /* the first key's time: the epoch of every word */
    atomic_compare_exchange_strong_explicit(&m->epoch_ms, &unset, now_ms, memory_order_relaxed, memory_order_relaxed);
    if (!fast) {
        entry *e = entry_at(sh, idx);
        entry_lock(e); /* a lookup that saw it before it was freed may hold it */
        e->hash = (uint32_t)h;
        e->policy = (uint16_t)(pid + 1);
        e->name = (uint16_t)(r->name_id + 1);
        e->key_len = (uint16_t)len;
        e->ref = 0; /* added cold: see make_room */
        if (heap_key) {
            memcpy(heap_key, k->bytes, len);
            e->key.heap = heap_key;
        } else {
            memcpy(e->key.bytes, k->pad, INLINE_KEY);
        }
        sluice__state fresh;
        if (!parts) r->policy.algo[0]->init(&r->policy.params[0], &fresh);
        entry_put_state(r, e, parts, &fresh);
        entry_unlock(e);
    }
    uint32_t i = home_of(sh, h);
    while (atomic_load_explicit(&sh->slots[i].st.hi, memory_order_relaxed) & M_LIVE) i = next_slot(sh, i);
    uint64_t flags = M_LIVE | (fast ? M_FAST : 0); /* added cold: see make_room */
    slot_fill(&sh->slots[i], len <= INLINE_KEY ? k->pad[0] : h, len <= INLINE_KEY ? k->pad[1] : 0,
              fast ? r->fresh_word : idx, M_META(0, pid, r->name_id, meta_len(k), flags));
    sh->count++;
    *at = i;
    return 0;
}

/* ---- a key changing form: its word outgrown, or another configuration ---- */

/* Puts states st (r's, at now_ms) in slot i, read at {lo, hi}: FAST when
 * r's keys are and the state is a word, else in an entry (e: the key's,
 * locked, when it has one; else one is made). 1 when done, 0 when {lo,
 * hi} moved meanwhile (a FAST key's decision: read again), or
 * SLUICE_ENOMEM. parts: st on the heap (r not inline), taken over. */
static int put_states(memory_store *m, shard *sh, uint32_t i, uint64_t lo, uint64_t hi, const registered *r,
                      unsigned pid, entry *e, sluice__state *parts, const sluice__state *st) {
    slot *s = &sh->slots[i];
    uint64_t epoch = (uint64_t)atomic_load_explicit(&m->epoch_ms, memory_order_relaxed), w;
    uint64_t meta = M_META(M_VERSION(hi) + 1, pid, r->name_id, M_LEN(hi), M_LIVE | M_REF);
    if (r->fast && M_LEN(hi) != M_LONG_KEY &&
        r->policy.algo[0]->word_of(&r->policy.params[0], st, (int64_t)epoch, &w) == 1) {
        if (!sluice__cas16(&s->st, lo, hi, w, meta | M_FAST)) return 0;
        if (e) { /* its entry is no more: given back (its old states are the caller's to free) */
            entry_give(sh, (uint32_t)lo);
            entry_unlock(e);
        }
        sluice__mem_free_parts(r, parts);
        return 1;
    }
    uint32_t idx = e ? (uint32_t)lo : 0;
    if (!e) {
        if (entry_take(sh, &idx)) return SLUICE_ENOMEM;
        e = entry_at(sh, idx);
        entry_lock(e);
        uint64_t key[2] = {atomic_load_explicit(&s->key[0], memory_order_relaxed),
                           atomic_load_explicit(&s->key[1], memory_order_relaxed)};
        memcpy(e->key.bytes, key, INLINE_KEY);
        e->key_len = (uint16_t)M_LEN(hi); /* a FAST key is inline */
        key_ref k = {key, M_LEN(hi), {key[0], key[1]}};
        e->hash = (uint32_t)sluice__mem_key_hash(m, M_NAME(hi), &k);
        e->name = (uint16_t)(M_NAME(hi) + 1);
        e->ref = 1;
        e->policy = (uint16_t)(pid + 1);
        entry_put_state(r, e, parts, st);
        if (!sluice__cas16(&s->st, lo, hi, idx, meta)) {
            e->policy = 0;
            entry_give(sh, idx);
            entry_unlock(e);
            return 0; /* parts: the caller's again */
        }
        entry_unlock(e);
        return 1;
    }
    /* a key in an entry changes only under the shard's lock (held) and
     * the entry's: the swap cannot fail */
    if (!sluice__cas16(&s->st, lo, hi, idx, meta)) return 0;
    e->policy = (uint16_t)(pid + 1);
    entry_put_state(r, e, parts, st);
    entry_unlock(e);
    return 1;
}

int sluice__mem_unfast(memory_store *m, shard *sh, uint32_t i) {
    for (;;) {
        sluice__state st;
        uint64_t lo, hi;
        const registered *r;
        states_of(m, sh, i, &st, &lo, &hi, &r);
        if (!(hi & M_FAST)) return 0;
        sluice__state *parts = NULL;
        if (!r->inline_state && sluice__mem_new_parts(r, &parts)) return SLUICE_ENOMEM;
        if (parts) parts[0] = st;
        registered plain = *r; /* the same configuration, never FAST */
        plain.fast = 0;
        int rc = put_states(m, sh, i, lo, hi, &plain, M_POLICY(hi), NULL, parts, &st);
        if (rc == 1) return 0;
        sluice__mem_free_parts(r, parts);
        if (rc) return rc;
    }
}

int sluice__mem_convert(memory_store *m, shard *sh, uint32_t i, const registered *r, unsigned pid,
                        int64_t now_ms) {
    for (;;) {
        sluice__state tmp, fresh, *parts;
        uint64_t lo, hi;
        const registered *from;
        entry *e = lock_entry_of(sh, i);
        const sluice__state *old = states_of(m, sh, i, &tmp, &lo, &hi, &from);
        int rc = sluice__mem_new_parts(r, &parts);
        if (rc) {
            if (e) entry_unlock(e);
            return rc;
        }
        if (!parts) r->policy.algo[0]->init(&r->policy.params[0], &fresh);
        if ((rc = sluice__policy_convert(&from->policy, old, &r->policy, parts ? parts : &fresh, now_ms)) == 0) {
            sluice__state *old_parts = e && !from->inline_state ? e->st.parts : NULL;
            int64_t reset = sluice__policy_reset_ms(&r->policy, parts ? parts : &fresh, now_ms); /* put_states may free parts */
            rc = put_states(m, sh, i, lo, hi, r, pid, e, parts, parts ? parts : &fresh);
            if (rc == 1) {
                sluice__mem_free_parts(from, old_parts);
                fresh_by(sh, now_ms + reset);
                return 0;
            }
        }
        sluice__mem_free_parts(r, parts);
        if (e) entry_unlock(e);
        if (rc) return rc;
    }
}

void sluice__mem_shard_free(memory_store *m, shard *sh) {
    for (uint32_t i = 0; sh->slots && i < sh->n_slots; i++) {
        uint64_t hi = atomic_load_explicit(&sh->slots[i].st.hi, memory_order_relaxed);
        if ((hi & M_LIVE) && !(hi & M_FAST))
            entry_release(m, entry_at(sh, (uint32_t)atomic_load_explicit(&sh->slots[i].st.lo, memory_order_relaxed)));
    }
    for (uint32_t c = 0; sh->chunks && c * CHUNK_ENTRIES < sh->n_entries; c++) free(sh->chunks[c]);
    free(sh->chunks);
    free(sh->slots_mem);
}
