/* store/memory/table.c: the memory store's table shape, under a shard's
 * lock: a policy registered, an entry's release and freshness, removing an
 * entry (shifting the index back: no tombstones), making room (fresh keys
 * first, then on_full), and adding a key. memory.c has the design. */
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
    /* one enforced part: decided straight by its algorithm (a shadow part
     * is decided by the policy's, composite.c) */
    int one = r->policy.n_parts == 1 && !r->policy.n_shadow;
    r->inline_state = one && a->state_bytes <= sizeof(sluice__i128) && !(a->flags & SLUICE__ALGO_GROWS);
    r->gcra = one && (a->flags & SLUICE__ALGO_GCRA) ? (a->flags & SLUICE__ALGO_DELAYS) != 0 : -1;
    return 0;
}

/* The least wait until e is fresh (0: it is fresh now). */
int64_t sluice__mem_reset_ms(const memory_store *m, entry *e, int64_t now_ms) {
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

void sluice__mem_release(const memory_store *m, entry *e) {
    const registered *r = reg(m, e->policy - 1u);
    if (e->key_len > INLINE_KEY) free(e->key.heap);
    if (!r->inline_state) {
        for (size_t i = 0; i < r->policy.n_parts; i++)
            if (r->policy.algo[i]->release) r->policy.algo[i]->release(&e->st.parts[i]);
        free(e->st.parts);
    }
    e->policy = 0;
}

/* Removes entry e from the shard: index (shifting later slots back so no
 * probe sequence breaks), memory, count. The shard's lock and e's lock are
 * held; e's is given back. (Other entries' hashes are read without their
 * locks: a hash never changes while its entry is in the table.) */
void sluice__mem_remove(const memory_store *m, shard *sh, entry *e) {
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
    sluice__mem_release(m, e);
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
            sluice__mem_remove(m, sh, e);
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
        int64_t reset = e->policy ? sluice__mem_reset_ms(m, e, now_ms) : -1;
        if (reset == 0) {
            sluice__mem_remove(m, sh, e);
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
            sluice__mem_remove(m, sh, e);
            sh->evicted++;
            return 0;
        }
        e->ref = 0;
        entry_unlock(e);
    }
}

void sluice__mem_free_parts(const registered *r, sluice__state *parts) {
    for (size_t i = 0; parts && i < r->policy.n_parts; i++)
        if (r->policy.algo[i]->release) r->policy.algo[i]->release(&parts[i]);
    free(parts);
}

/* Fresh states on the heap for r (NULL for one kept inline), with room
 * for a first admission. 0 or SLUICE_ENOMEM. */
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

/* Adds a fresh entry for the key (which is not there). */
int sluice__mem_insert(memory_store *m, shard *sh, const registered *r, uint64_t h, unsigned pid,
                  const key_ref *k, int64_t now_ms, entry **out) {
    size_t len = k->len;
    /* memory first: a failure must not have evicted anything */
    uint8_t *heap_key = NULL;
    sluice__state *parts = NULL;
    if (len > INLINE_KEY && !(heap_key = malloc(len))) return SLUICE_ENOMEM;
    int rc = sluice__mem_new_parts(r, &parts);
    if (rc) {
        free(heap_key);
        return rc;
    }
    if (sh->count == sh->cap) {
        rc = make_room(m, sh, now_ms);
        if (rc) {
            sluice__mem_free_parts(r, parts);
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

