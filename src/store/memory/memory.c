/* store/memory/memory.c: the in-process store, the embedded default.
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
 * forgotten as fresh would have decided as a fresh one (sluice.h).
 *
 * Files: memory.h the types and a lookup's inline pieces, table.c the
 * table's shape (adding, removing, making room), this file the decisions,
 * the verbs, batches and the store. */
#include "memory.h"


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
    int rc = sluice__mem_new_parts(r, &parts);
    if (rc) return rc;
    if (!parts) r->policy.algo[0]->init(&r->policy.params[0], &fresh);
    rc = sluice__policy_convert(&from->policy, parts_of(from, e, &tmp), &r->policy, parts ? parts : &fresh, now_ms);
    if (rc) {
        sluice__mem_free_parts(r, parts);
        return rc;
    }
    if (!from->inline_state) sluice__mem_free_parts(from, e->st.parts);
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
        } else if ((rc = sluice__mem_insert(m, sh, r, h, pid, kp, now_ms, &e)) != 0) {
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
        sluice__mem_remove(m, sh, e);
    } else {
        if (rc == 0) {
            e->ref = 1;
            count_decision(m, d);
            if (d->allowed) sluice__store_time_raise(&m->now_ms, now_ms);
            if (is_new) /* a shadow part may be fresh later than the decision says */
                fresh_by(sh, now_ms + (r->policy.n_shadow ? sluice__mem_reset_ms(m, e, now_ms) : d->reset_ms));
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
            sluice__mem_remove(m, q.sh, e);
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
                if (sh->entries[k].policy) sluice__mem_release(m, &sh->entries[k]);
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
    m->policies.init = sluice__mem_registered_init;
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
