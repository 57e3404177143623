/* store/memory/memory.c: the in-process store, the embedded default.
 *
 * Per-key state in a table split into shards, each a table of 32-byte
 * slots, open addressing with linear probing (about 1.75 slots per key of
 * capacity, so probes stay short), that lookups read without a lock:
 *
 *   FAST    a key of up to 16 bytes of a policy of one part whose state
 *           fits a word (a token or leaky bucket; a fixed window, a sliding
 *           window of a limit below 2^16): the key and its state's word in
 *           its slot, beside the slot's meta word (version, policy, name,
 *           length, flags). A decision reads the slot (one cache line, one
 *           miss at a million keys), decides on the word (the algorithm's
 *           word form, src/algo/; a bucket's inlined) and admits with one
 *           16-byte compare-and-swap of {word, meta}: lock-free, and a
 *           denial writes nothing (the meta, read again, vouches that the
 *           word was the key's). Words are relative to the store's epoch,
 *           the time its first key was added; a state that would not fit
 *           moves the key to an entry (below), for good.
 *   entry   every other key: the slot keeps the key (or, for a longer key,
 *           its hash) and the index of its entry, 48 bytes in chunks made
 *           as they are needed (never moved or freed while the store is
 *           open), with the state (inline when one part of <= 16 bytes,
 *           else on the heap) under the entry's own small lock; a lookup
 *           checks the entry under that lock, so an entry freed or reused
 *           meanwhile is never taken for the key.
 *
 * So a FAST key costs 32 * 1.75 = 56 bytes of capacity, allocated up
 * front (pages touched only as keys arrive); a key in an entry 56 + 48.
 *
 * The shard's lock guards the table's shape: adding, forgetting, evicting,
 * converting keys (table.c), which also take the entry's lock (always
 * after the shard's), so a key is never dropped in the middle of its own
 * update. A slot changes hands (its version moves on) only under the
 * shard's lock, with a 16-byte compare-and-swap, so a FAST decision racing
 * it fails its own and looks again; removal moves the keys after it back
 * (no tombstones), each move again such a swap, so a lookup without the
 * lock may miss a key that is moving and looks again under the lock, where
 * the answer is exact. Counts of decisions go to per-thread stripes.
 *
 * Keys are hashed under a random per-store key (and their policy name's
 * id), so chosen keys cannot flood one chain: keys of up to 16 bytes with
 * three AES rounds where the CPU has AES instructions (about 2 ns), others
 * with SipHash-1-3 (about 9 ns for 16 bytes). Inline keys are kept
 * zero-padded and compared as two words.
 *
 * Room: when a new key meets a full shard, fresh keys (equal to a fresh
 * state, so forgetting them changes nothing) are looked for first, if some
 * key may have become fresh since the last full scan (next_fresh_ms): a
 * sweep of the next 64 slots, then a full scan. Only when no key is fresh
 * does on_full apply: evict the victim of the CLOCK (second chance)
 * algorithm, an approximation of the least recently used key, or refuse
 * the new key. The hand goes round the slots; a key is marked by its
 * decisions after the first, so a key added and never decided again (a
 * flood of one-off keys) goes before one in use.
 *
 * Batches (sluice_store_acquire_many): 16 requests' keys are hashed and
 * their home slots fetched into the cache before the 16 are decided in
 * order, so that with many keys their cache misses overlap.
 *
 * Time: the store decides at the highest reading it has seen (and each
 * shard at the highest it has seen, for readings that race), so a key
 * forgotten as fresh would have decided as a fresh one (sluice.h).
 *
 * Files: memory.h the types and a lookup's inline pieces, table.c the
 * table's shape (adding, removing, moving, converting, making room), this
 * file the decisions, the verbs, batches and the store. */
#include "memory.h"

#define VERB_ACQUIRE 0 /* beside sluice__verb's */
#define AGAIN 2        /* the slot changed hands meanwhile: look again */
#define OUTGROWN 3     /* the state no longer fits a word: in an entry, locked */

/* ---- FAST keys: the state's word in the slot ---- */

/* Applies verb (VERB_ACQUIRE, or SLUICE__VERB_PEEK, _REFUND) of cost to
 * FAST slot s, found holding the key at meta seen (r's, pid's): 0 with *d
 * (a decision counted, store time raised on an admission, waits told
 * from reading_ms), AGAIN or OUTGROWN. A refund gives back on the word
 * (the answer: a request of cost 1 on the new word); a peek, as a denial,
 * writes nothing. */
static inline __attribute__((always_inline)) int fast_verb(memory_store *m, shard *sh, const registered *r, slot *s,
                                                           uint64_t seen, int verb, int64_t cost, int64_t now,
                                                           int64_t reading_ms, int mark, sluice_decision *d) {
    const sluice__params *pp = &r->policy.params[0];
    const sluice__algo *a = r->policy.algo[0];
    int64_t epoch = atomic_load_explicit(&m->epoch_ms, memory_order_relaxed);
    int64_t ts = 0; /* a bucket: (now - epoch) * r */
    if (r->gcra && (__builtin_sub_overflow(now, epoch, &ts) || __builtin_mul_overflow(ts, pp->r, &ts)))
        return OUTGROWN;
    for (;;) {
        uint64_t w = atomic_load_explicit(&s->st.lo, memory_order_acquire);
        uint64_t c = atomic_load_explicit(&s->st.hi, memory_order_acquire);
        if ((c | M_REF) != (seen | M_REF)) { /* identity: all but the mark */
            sluice__pair_read(&s->st, &w, &c);
            if ((c | M_REF) != (seen | M_REF)) return AGAIN;
        }
        int64_t bb = 0, nb = 0, asked = cost;
        uint64_t x = w, nw = w; /* the word decided on; the word written */
        if (__builtin_expect(verb == SLUICE__VERB_REFUND, 0)) {
            if (r->gcra) x = (uint64_t)sluice__gcra_word_refund(pp, (int64_t)w, ts, cost);
            else if (a->word_refund(pp, w, epoch, now, cost, &x) == SLUICE__WORD_OUTGROWN) return OUTGROWN;
            nw = x;
            asked = 1; /* the answer: a request of cost 1, right after */
        }
        int admit;
        uint64_t after = 0; /* the word after admitting asked */
        if (!r->gcra) { /* a window: its algorithm decides on the word */
            admit = a->word_decide(pp, x, epoch, now, asked, d, &after);
            if (admit == SLUICE__WORD_OUTGROWN || admit < 0) return OUTGROWN; /* or a word none writes */
        } else { /* the bucket's word step (algo/algo.h), its decision written after the CAS */
            int64_t nt = 0;
            if ((admit = sluice__gcra_word_step(pp, (int64_t)x, ts, asked, &bb, &nb, &nt)) < 0) return OUTGROWN;
            after = (uint64_t)nt;
        }
        if (verb == VERB_ACQUIRE && admit) nw = after;
        uint64_t nc = mark && verb != SLUICE__VERB_PEEK ? c | M_REF : c;
        if (nw != w || nc != c) {
            if (!sluice__cas16(&s->st, w, c, nw, nc)) continue;
        } else { /* no CAS vouches for what was read: the meta, read again, does */
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&s->st.hi, memory_order_relaxed) != c) continue;
        }
        if (r->gcra) {
            if (admit) sluice__gcra_allowed(pp, bb, nb, r->shaper, d);
            else sluice__gcra_denied(pp, bb, asked, d);
        }
        if (verb == VERB_ACQUIRE) {
            count_decision(m, d);
            if (admit) sluice__store_time_raise(&m->now_ms, now);
        } else if (verb == SLUICE__VERB_REFUND && nw != w) {
            sluice__state st;
            a->word_state(r->unit, nw, epoch, &st);
            fresh_by(sh, now + sluice__policy_reset_ms(&r->policy, &st, now));
        }
        sluice__decision_lag(d, now - reading_ms);
        return 0;
    }
}

/* ---- keys in entries ---- */

static int decide(const registered *r, entry *e, int64_t cost, int64_t now_ms, sluice_decision *d) {
    if (!r->inline_state) return sluice__policy_decide_grow(&r->policy, e->st.parts, now_ms, cost, d);
    /* one part of at most 16 bytes: straight to its algorithm, in place (a
     * copy through the stack cost a stalled 16-byte load of two 8-byte
     * stores); it writes only the state's first 16 bytes. A bucket's
     * common case (a backlog within 64 bits) is inlined here. */
    const sluice__params *pp = &r->policy.params[0];
    if (r->gcra) {
        sluice__i128 ts = (sluice__i128)now_ms * pp->r, b = e->st.word - ts;
        int64_t nb;
        if (b <= INT64_MAX) {
            if (sluice__gcra_core(pp, b > 0 ? (int64_t)b : 0, cost, r->shaper, d, &nb)) e->st.word = ts + nb;
            return 0;
        }
    }
    const sluice__algo *a = r->policy.algo[0];
    return a->decide(pp, (sluice__state *)(void *)&e->st.word, now_ms, cost, d, 1);
}

/* A peek or refund of a locked entry's key (a refund: every part gives
 * back; then a peek of cost 1). */
static void entry_verb(const registered *r, shard *sh, entry *e, int verb, int64_t cost, int64_t now_ms,
                       sluice_decision *d) {
    sluice__state tmp, *st = parts_of(r, e, &tmp);
    if (verb == SLUICE__VERB_REFUND) {
        sluice__policy_refund(&r->policy, st, now_ms, cost);
        if (st == &tmp) memcpy(&e->st.word, &tmp, sizeof e->st.word);
        fresh_by(sh, now_ms + sluice__policy_reset_ms(&r->policy, st, now_ms));
        cost = 1;
    }
    sluice__policy_peek(&r->policy, st, now_ms, cost, d);
}

/* The entry of slot s, found at meta seen, locked and checked to hold the
 * key under configuration pid; NULL when it does not (any more). */
static inline entry *entry_of(shard *sh, slot *s, uint64_t seen, uint64_t h, unsigned nid, unsigned pid,
                              const key_ref *k) {
    uint32_t idx = (uint32_t)atomic_load_explicit(&s->st.lo, memory_order_acquire);
    if (atomic_load_explicit(&s->st.hi, memory_order_acquire) != seen) return NULL;
    entry *e = entry_at(sh, idx);
    entry_lock(e);
    if (holds_key(e, h, nid, k) && e->policy == pid + 1) return e;
    entry_unlock(e);
    return NULL;
}

/* ---- a request ---- */

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
    q->h = sluice__mem_key_hash(m, nid, &q->k);
    q->sh = &m->shards[m->shard_bits ? q->h >> (64 - m->shard_bits) : 0];
    return 0;
}

/* The verb, under the shard's lock: the key found exactly, added for a
 * decision (a peek or refund of a key not held answers as a fresh state),
 * converted from another configuration of its name, moved to an entry
 * when its word outgrew the epoch's range. */
static __attribute__((noinline)) int verb_locked(memory_store *m, prepared *q, int verb, int64_t cost,
                                                 int64_t now_ms, int64_t reading_ms, sluice_decision *d) {
    shard *sh = q->sh;
    const registered *r = q->r;
    int rc = 0, is_new = 0;
    uint32_t i;
    sluice__lock_take(&sh->lock);
    if (now_ms < sh->now_ms) now_ms = sh->now_ms; /* never before a forgetting */
    slot *s = sluice__mem_find_locked(sh, q->h, q->nid, &q->k, &i);
    if (!s && verb != VERB_ACQUIRE) { /* none added: a fresh state's answer */
        sluice__policy_peek_fresh(&r->policy, now_ms, verb == SLUICE__VERB_PEEK ? cost : 1, d);
        goto done;
    }
    if (!s) {
        if ((rc = sluice__mem_insert(m, sh, r, q->h, q->pid, &q->k, now_ms, &i)) != 0) goto out;
        s = &sh->slots[i];
        is_new = 1;
    }
    uint64_t hi = atomic_load_explicit(&s->st.hi, memory_order_acquire);
    if (M_POLICY(hi) != q->pid && (rc = sluice__mem_convert(m, sh, i, r, q->pid, now_ms)) != 0) goto out;
    for (;;) {
        hi = atomic_load_explicit(&s->st.hi, memory_order_acquire);
        if (hi & M_FAST) {
            rc = fast_verb(m, sh, r, s, hi, verb, cost, now_ms, reading_ms, !is_new, d);
            if (rc == OUTGROWN && (rc = sluice__mem_unfast(m, sh, i)) == 0) continue;
            if (rc == AGAIN) continue; /* only its word moved: nobody else changes hands now */
            if (rc == 0 && is_new) fresh_by(sh, now_ms + sluice__mem_reset_ms(m, sh, i, now_ms));
            goto out; /* counted, lag told */
        }
        entry *e = entry_at(sh, (uint32_t)atomic_load_explicit(&s->st.lo, memory_order_relaxed));
        entry_lock(e);
        if (verb != VERB_ACQUIRE) {
            entry_verb(r, sh, e, verb, cost, now_ms, d);
            entry_unlock(e);
            goto done;
        }
        rc = decide(r, e, cost, now_ms, d);
        if (is_new && (rc || !d->allowed)) { /* a failed first request leaves no trace */
            sluice__mem_remove(m, sh, i); /* gives e back */
            goto out;
        }
        if (rc == 0) {
            e->ref = !is_new; /* a key's first decision is no second use */
            count_decision(m, d);
            if (d->allowed) sluice__store_time_raise(&m->now_ms, now_ms);
            if (is_new) fresh_by(sh, now_ms + sluice__mem_reset_ms(m, sh, i, now_ms)); /* every part's, shadow too */
        }
        entry_unlock(e);
        if (rc) goto out;
        goto done;
    }
done:
    sluice__decision_lag(d, now_ms - reading_ms);
out:
    sluice__lock_give(&sh->lock);
    if (rc == SLUICE_ENOMEM) sluice__store_errf(&m->head, "out of memory");
    return rc;
}

/* Applies verb to q: a held key's FAST word, or its entry under the
 * entry's lock; else (a key not held, moving, of another configuration)
 * under the shard's lock. */
static inline __attribute__((always_inline)) int verb_prepared(memory_store *m, prepared *q, int verb, int64_t cost,
                                                               int64_t now_ms, sluice_decision *d) {
    int64_t reading_ms = now_ms;
    now_ms = sluice__store_time(&m->now_ms, now_ms); /* never backwards: the highest reading admitted at */
    uint64_t seen = 0;
    slot *s = find_slot(q->sh, q->h, q->nid, &q->k, &seen);
    if (s && M_POLICY(seen) == q->pid) {
        if (seen & M_FAST) {
            if (fast_verb(m, q->sh, q->r, s, seen, verb, cost, now_ms, reading_ms, 1, d) == 0) return 0;
        } else {
            entry *e = entry_of(q->sh, s, seen, q->h, q->nid, q->pid, &q->k);
            if (e) {
                int rc = 0;
                if (verb == VERB_ACQUIRE) {
                    rc = decide(q->r, e, cost, now_ms, d);
                    if (rc == 0) {
                        e->ref = 1;
                        count_decision(m, d);
                        if (d->allowed) sluice__store_time_raise(&m->now_ms, now_ms);
                    }
                } else {
                    entry_verb(q->r, q->sh, e, verb, cost, now_ms, d);
                }
                entry_unlock(e);
                if (rc == SLUICE_ENOMEM) sluice__store_errf(&m->head, "out of memory");
                if (rc == 0) sluice__decision_lag(d, now_ms - reading_ms);
                return rc;
            }
        }
    }
    return verb_locked(m, q, verb, cost, now_ms, reading_ms, d);
}

static int mem_acquire_at(sluice_store *s, const sluice_policy *p, const void *key, size_t len,
                          int64_t cost, int64_t now_ms, sluice_decision *d) {
    memory_store *m = (memory_store *)s;
    prepared q;
    int rc = prepare(m, p, key, len, &q);
    return rc ? rc : verb_prepared(m, &q, VERB_ACQUIRE, cost, now_ms, d);
}

/* Peek and refund as a decision finds the key (none is ever added); a
 * reset removes it, whichever configuration of the name keeps it, under
 * the shard's lock. Nothing moves store time. */
static int mem_operate_at(sluice_store *s, const sluice_policy *p, const void *key, size_t len, sluice__verb verb,
                          int64_t cost, int64_t now_ms, sluice_decision *d) {
    memory_store *m = (memory_store *)s;
    prepared q;
    int rc = prepare(m, p, key, len, &q);
    if (rc) return rc;
    if (verb != SLUICE__VERB_RESET) return verb_prepared(m, &q, (int)verb, cost, now_ms, d);
    int64_t reading_ms = now_ms;
    now_ms = sluice__store_time(&m->now_ms, now_ms);
    sluice__lock_take(&q.sh->lock);
    if (now_ms < q.sh->now_ms) now_ms = q.sh->now_ms;
    uint32_t i;
    slot *sl = sluice__mem_find_locked(q.sh, q.h, q.nid, &q.k, &i);
    if (sl) {
        if (!(atomic_load_explicit(&sl->st.hi, memory_order_acquire) & M_FAST))
            entry_lock(entry_at(q.sh, (uint32_t)atomic_load_explicit(&sl->st.lo, memory_order_relaxed)));
        sluice__mem_remove(m, q.sh, i);
    }
    sluice__lock_give(&q.sh->lock);
    sluice__policy_peek_fresh(&q.r->policy, now_ms, 1, d);
    sluice__decision_lag(d, now_ms - reading_ms);
    return 0;
}

/* A batch, decided in order as one acquire_at each, BATCH requests at a
 * time: their keys hashed first and their home slots fetched into the
 * cache ahead (prefetch: a hint, so whatever changes meanwhile, each
 * decision finds its key as acquire_at would). With many keys, a
 * decision's cache miss then overlaps the others' instead of following
 * them. */
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
            if (!results[base + i]) __builtin_prefetch(&q[i].sh->slots[home_of(q[i].sh, q[i].h)], 1);
        }
        for (size_t i = 0; i < g; i++)
            if (!results[base + i])
                results[base + i] = verb_prepared(m, &q[i], VERB_ACQUIRE, reqs[base + i].cost, now_ms, &out[base + i]);
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
            sluice__mem_shard_free(m, &m->shards[i]);
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
    m->cas16 = sluice__cas16_lock_free();
    atomic_init(&m->epoch_ms, EPOCH_UNSET);
    unsigned bits = 0;
    while (bits < 6 && (max_keys >> (bits + 1)) >= SHARD_KEYS_MIN) bits++;
    while (((uint64_t)max_keys >> bits) > UINT32_MAX / 2) bits++; /* slots of a shard: 32-bit indexes */
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
        sh->n_slots = sh->cap + sh->cap / 4 * 3 + 2; /* at least one slot always empty: probes end */
        /* zeroed by the system as pages are first touched: calloc, aligned
         * here to a line (two slots a line) */
        sh->slots_mem = calloc((size_t)sh->n_slots * sizeof(slot) + 64, 1);
        sh->chunks = calloc(sh->cap / CHUNK_ENTRIES + 2, sizeof *sh->chunks);
        if (!sh->slots_mem || !sh->chunks) goto nomem;
        sh->slots = (slot *)(((uintptr_t)sh->slots_mem + 63) & ~(uintptr_t)63);
    }
    *out = &m->head;
    return 0;
nomem:
    mem_close(&m->head);
    sluice__errf(err, errlen, "out of memory for max_keys=%lld", (long long)max_keys);
    return SLUICE_ENOMEM;
}

void sluice__memory_store_seed(sluice_store *s, uint64_t seed) {
    memory_store *m = (memory_store *)s;
    for (size_t i = 0; i < sizeof m->seed / sizeof m->seed[0]; i++)
        m->seed[i] = seed = seed * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
}

void sluice__memory_store_collide(sluice_store *s) {
    ((memory_store *)s)->collide = 1;
}

int sluice__memory_store_holds(sluice_store *s, const sluice_policy *p, const void *key, size_t len) {
    memory_store *m = (memory_store *)s;
    prepared q;
    if (prepare(m, p, key, len, &q)) return 0;
    uint32_t i;
    sluice__lock_take(&q.sh->lock);
    slot *sl = sluice__mem_find_locked(q.sh, q.h, q.nid, &q.k, &i);
    sluice__lock_give(&q.sh->lock);
    return sl != NULL;
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
