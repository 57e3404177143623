/* store/shm/room.c: the shm store's table shape, under the buckets'
 * locks: finding a key exactly (whatever the live masks say), adding a
 * key, making room for it, moving a FAST key to the general form, a key
 * kept by another configuration of its policy's name converted (retune)
 * or forgotten (reset), and the live masks that stats counts.
 *
 * Only the table's shape takes a lock: adding a key, and making room for
 * it, hold the locks of the key's two buckets (owner.c: a dead owner's is
 * taken over, and its bucket's live mask made true again from the slots).
 * A new key is written whole before its control word says live, and a
 * dropped key's control word says dead before its slot is reused. So a
 * crash leaks no slot and corrupts nothing, and at most the one
 * interrupted request is admitted unused (and uncounted: counters.c).
 *
 * Room: a key lives in one of two buckets chosen by its hash: the first
 * while it has room, else the second (two choices fill a table almost to
 * capacity, where one choice turns keys away from full buckets long
 * before). A new key whose two buckets are full first takes the place of a
 * fresh key there (fresh at <= store time: forgetting it changes nothing),
 * else on_full evicts the least recently used of the two buckets' keys, or
 * refuses; a slot whose words are damaged is never judged fresh, and may
 * be evicted as any key that is not. A bucket's slots get their pages from
 * the filesystem when its first key is added (fallocate): a full
 * filesystem is SLUICE_ENOMEM for that key, never a SIGBUS. A bucket's time
 * is the highest reading it forgot a key at (a key's decisions are never
 * earlier). */
#define _GNU_SOURCE
#include "protocol.h"

#include <stdlib.h>
#include <string.h>

/* ---- drops, finding a key exactly, the time of a new key ---- */

/* Drops the key held at control word c, with its change read as {lo, hi}
 * (none pending, or an admission pending): 1, or 0 when the key changed
 * meanwhile. With the buckets' locks held. */
static int drop(const shm_store *m, shm_slot *sl, uint64_t c, uint64_t lo, uint64_t hi) {
    uint64_t d = SHM_CHANGE(SHM_VERSION(c) + 1, SHM_KIND_DROP, 0);
    if (!sluice__cas16(&shm_tail_of(m, sl)->change, lo, hi, 0, d)) return 0;
    publish(sl, c, d);
    return 1;
}

/* The key's slot, with its buckets' locks held: by its tag whatever the
 * live mask says (a live key the mask missed is put back in it), or NULL.
 * DAMAGED in *rc when a slot the mask says is live holds the key but its
 * control word says it holds none. */
shm_slot *sluice__shm_find_locked(const shm_store *m, const located *q, const uint64_t *kw, size_t len, uint64_t *seen,
                             int *home, int *rc) {
    for (int k = 0; k < q->n; k++) {
        uint64_t live = atomic_load_explicit(&q->bh[k]->live, memory_order_relaxed);
        for (uint64_t mask = tag_matches(m, q->bh[k], q->tag) & live; mask; mask &= mask - 1) {
            uint32_t i = (uint32_t)__builtin_ctzll(mask);
            shm_slot *sl = shm_slot_at(m, q->b[k], i);
            uint64_t c = atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire);
            if (!holds(sl, q->sp->fp, kw, len)) continue;
            if (c & SHM_LIVE) {
                *seen = c;
                *home = k;
                return sl;
            }
            *rc = DAMAGED; /* the mask says live, the control word dead */
            return NULL;
        }
        /* a live key whose live bit was lost: its tag still names it */
        for (uint64_t mask = tag_matches(m, q->bh[k], q->tag) & ~live; mask; mask &= mask - 1) {
            uint32_t i = (uint32_t)__builtin_ctzll(mask);
            if (!(atomic_load_explicit(&q->bh[k]->flags, memory_order_relaxed) & SHM_ALLOCATED)) break;
            shm_slot *sl = shm_slot_at(m, q->b[k], i);
            uint64_t c = atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire);
            if ((c & SHM_LIVE) && holds(sl, q->sp->fp, kw, len)) {
                atomic_fetch_or_explicit(&q->bh[k]->live, UINT64_C(1) << i, memory_order_release);
                *seen = c;
                *home = k;
                return sl;
            }
        }
    }
    return NULL;
}

/* Bucket time, kept as ms - SLUICE_TIME_MIN_MS (0, a new file's: none). */
static void bucket_time_raise(shm_bucket_head *bh, int64_t now_ms) {
    int64_t want = now_ms - SLUICE_TIME_MIN_MS, t = atomic_load_explicit(&bh->now_ms, memory_order_relaxed);
    while (t < want && !atomic_compare_exchange_weak_explicit(&bh->now_ms, &t, want, memory_order_release,
                                                              memory_order_relaxed)) {
    }
}

/* The time a new key of q's buckets is added and first decided at: the
 * reading, raised to the store's time and to the times its buckets forgot
 * keys at (so a key forgotten and added again is never decided earlier
 * than it was forgotten). A bucket time out of range (damage) is not. */
int64_t sluice__shm_decision_time(const shm_store *m, const located *q, int64_t reading_ms) {
    int64_t now = sluice__store_time(&m->hdr->now_ms, reading_ms);
    for (int i = 0; i < q->n; i++) {
        int64_t b = atomic_load_explicit(&q->bh[i]->now_ms, memory_order_acquire);
        if (b > 0 && b <= SLUICE_TIME_MAX_MS - SLUICE_TIME_MIN_MS && b + SLUICE_TIME_MIN_MS > now)
            now = b + SLUICE_TIME_MIN_MS;
    }
    return now;
}

/* ---- a FAST key that outgrew its word ---- */

/* Moves a FAST key whose state outgrew its word to the general form, the
 * same state as copy words, with the buckets' locks held. Killed midway,
 * the key is still FAST and whole: the last compare-and-swap switches. */
int sluice__shm_convert(const shm_store *m, const shm_policy *sp, shm_slot *sl, uint64_t *buf) {
    copies cp = copies_of(m, sp, sl);
    const sluice__algo *a = sp->policy.algo[0];
    const sluice__params *pp = &sp->policy.params[0];
    if (!cp.base || !sp->fast) return DAMAGED;
    for (;;) {
        uint64_t w, c;
        sluice__pair_read(&sl->head, &w, &c);
        if ((c & (SHM_LIVE | SHM_FAST)) != (SHM_LIVE | SHM_FAST)) return 0;
        uint64_t v = SHM_VERSION(c) + 1;
        int64_t born_ms = atomic_load_explicit(&sl->born_ms, memory_order_relaxed);
        sluice__state st;
        a->word_state(sp->fast_unit, w, born_ms, &st); /* the state the word stands for, as words */
        sluice__shm_fresh_states(sp, (uint8_t *)buf);
        sluice__shm_store_states(sp, (uint8_t *)buf, &st);
        /* fresh at: the algorithm's own reset, seen from the store's time */
        sluice_decision peek;
        int64_t now = sluice__store_time(&m->hdr->now_ms, born_ms);
        a->peek(pp, &st, now, &peek);
        int64_t fresh_at = peek.reset_ms ? now + peek.reset_ms : INT64_MIN;
        copy_write(cp, v, buf, sp->words);
        STEP(5);
        sluice__pair_set(&shm_tail_of(m, sl)->change, (uint64_t)fresh_at, SHM_CHANGE(v, SHM_KIND_SETTLED, 0));
        if (sluice__cas16(&sl->head, w, c, 0, SHM_CTRL_WORD(v, SHM_LIVE))) return 0;
    }
}

/* ---- making room, and adding ---- */

/* Drops the FAST key {w, c} (as drop() does the others'). */
static int drop_fast(shm_slot *sl, uint64_t w, uint64_t c) {
    return sluice__cas16(&sl->head, w, c, w, SHM_CTRL_WORD(SHM_VERSION(c) + 1, 0));
}

/* Drops the key read at control word c and {lo, hi} (a FAST key's head,
 * else its change), in either form: 1, or 0 when it changed meanwhile. */
static int drop_key(const shm_store *m, shm_slot *sl, uint64_t c, uint64_t lo, uint64_t hi) {
    return c & SHM_FAST ? drop_fast(sl, lo, c) : drop(m, sl, c, lo, hi);
}

static void live_set(shm_bucket_head *bh, uint32_t i, int on) {
    uint64_t live = atomic_load_explicit(&bh->live, memory_order_relaxed), bit = UINT64_C(1) << i;
    atomic_store_explicit(&bh->live, on ? live | bit : live & ~bit, memory_order_release);
}

/* The live mask of bucket b made true again from its slots (its lock was
 * taken over from a dead owner, who may have left it half written). */
static void live_repair(const shm_store *m, uint64_t b) {
    shm_bucket_head *bh = shm_head_at(m, b);
    uint64_t live = 0;
    if (atomic_load_explicit(&bh->flags, memory_order_relaxed) & SHM_ALLOCATED)
        for (uint32_t i = 0; i < m->g.spb; i++)
            if (atomic_load_explicit(SHM_CTRL(shm_slot_at(m, b, i)), memory_order_acquire) & SHM_LIVE)
                live |= UINT64_C(1) << i;
    atomic_store_explicit(&bh->live, live, memory_order_release);
}

/* How a slot looks to making room: free, fresh (drop it losslessly), in
 * use (evict it if need be), or changing under us (look again). */
enum { SLOT_FREE, SLOT_FRESH, SLOT_USED, SLOT_MOVED };

static int slot_state(const shm_store *m, shm_slot *sl, int64_t now_ms, uint64_t *c, uint64_t *lo, uint64_t *hi) {
    *c = atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire);
    if (!(*c & SHM_LIVE)) return SLOT_FREE;
    if (*c & SHM_FAST) {
        uint64_t c0 = *c;
        sluice__pair_read(&sl->head, lo, c);
        if (*c != c0) return SLOT_MOVED;
        *hi = 0;
        int64_t unit = atomic_load_explicit(&shm_tail_of(m, sl)->unit, memory_order_relaxed);
        return fast_fresh(sl, unit, *lo, now_ms) == 1 ? SLOT_FRESH : SLOT_USED; /* damaged (-1): never fresh */
    }
    sluice__pair_read(&shm_tail_of(m, sl)->change, lo, hi);
    uint64_t v = SHM_VERSION(*c);
    unsigned kind = SHM_CHANGE_KIND(*hi);
    if (SHM_CHANGE_VERSION(*hi) == (uint32_t)(v + 1)) { /* a change pending */
        if (kind == SHM_KIND_ADMIT) return SLOT_USED;   /* not fresh (it may be evicted) */
        publish(sl, *c, *hi);
        return atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire) != *c ? SLOT_MOVED : SLOT_USED;
    }
    if (SHM_CHANGE_VERSION(*hi) != (uint32_t)v || kind != SHM_KIND_SETTLED)
        return atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire) != *c ? SLOT_MOVED : SLOT_USED; /* damaged */
    return (int64_t)*lo <= now_ms ? SLOT_FRESH : SLOT_USED; /* settled: lo is when it is fresh */
}

/* A slot for a new key when q's buckets are full, or NULL (refused): a
 * fresh key's place first, else on_full. need: 0, or the class of the
 * overflow block the slot must come with (the area has none to give), so
 * that only a key whose slot has one may make room. *home and *at say
 * where the slot is. With the buckets' locks held. */
static shm_slot *make_room(shm_store *m, const located *q, int64_t now_ms, unsigned need, int *home, uint32_t *at) {
again:;
    shm_slot *lru = NULL;
    uint64_t lru_c = 0, lru_lo = 0, lru_hi = 0;
    int64_t lru_use = 0;
    for (int b = 0; b < q->n; b++) {
        for (uint32_t i = 0; i < m->g.spb; i++) {
            shm_slot *sl = shm_slot_at(m, q->b[b], i);
            uint64_t c, lo, hi;
            if (need && !sluice__shm_block_words(m, sl, need)) continue;
            switch (slot_state(m, sl, now_ms, &c, &lo, &hi)) {
            case SLOT_MOVED: goto again;
            case SLOT_FREE: /* freed meanwhile (a drop left unpublished by a crash) */
                *home = b, *at = i;
                return sl;
            case SLOT_FRESH:
                bucket_time_raise(q->bh[b], now_ms); /* its key's decisions: never earlier */
                if (!drop_key(m, sl, c, lo, hi)) goto again;
                live_set(q->bh[b], i, 0);
                COUNT(m, forgotten);
                *home = b, *at = i;
                return sl;
            default: break;
            }
            int64_t use = atomic_load_explicit(&sl->last_use_ms, memory_order_relaxed);
            if (!lru || use < lru_use) {
                lru = sl, lru_c = c, lru_lo = lo, lru_hi = hi, lru_use = use;
                *home = b, *at = i;
            }
        }
    }
    if (m->on_full == SLUICE_ON_FULL_REFUSE || !lru) {
        COUNT(m, refused);
        return NULL;
    }
    bucket_time_raise(q->bh[*home], now_ms);
    if (!drop_key(m, lru, lru_c, lru_lo, lru_hi)) goto again;
    live_set(q->bh[*home], *at, 0);
    COUNT(m, evicted);
    return lru;
}

/* A free slot of bucket k of q (by its live mask; NULL when full). */
static shm_slot *free_in(const shm_store *m, const located *q, int k, uint32_t *at) {
    uint64_t full = m->g.spb < 64 ? (UINT64_C(1) << m->g.spb) - 1 : ~UINT64_C(0);
    for (;;) {
        uint64_t live = atomic_load_explicit(&q->bh[k]->live, memory_order_relaxed);
        if ((live & full) == full) return NULL;
        *at = (uint32_t)__builtin_ctzll(~live);
        if (!(atomic_load_explicit(&q->bh[k]->flags, memory_order_relaxed) & SHM_ALLOCATED)) return shm_slot_at(m, q->b[k], *at);
        shm_slot *sl = shm_slot_at(m, q->b[k], *at);
        if (!(atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire) & SHM_LIVE)) return sl;
        live_set(q->bh[k], *at, 1); /* a live key the mask missed */
    }
}

/* Gives bucket k of q its slots' pages, the first time a key goes there. */
static int allocate_bucket(shm_store *m, const located *q, int k) {
    shm_bucket_head *bh = q->bh[k];
    if (atomic_load_explicit(&bh->flags, memory_order_acquire) & SHM_ALLOCATED) return 0;
    if (sluice__shm_allocate(m, (uint64_t)((uint8_t *)shm_slot_at(m, q->b[k], 0) - m->map), (uint64_t)m->g.spb * m->g.slot_bytes)) return -1;
    atomic_fetch_or_explicit(&bh->flags, SHM_ALLOCATED, memory_order_release);
    return 0;
}

/* Adds the key to a free slot (making room when needed) with the state
 * in init (a state copy's words; NULL: a fresh state): 0 with *out its
 * slot and *home its bucket, SLUICE_EFULL (refused), or another error with
 * the store's message. buf: room for the policy's words (init may be it).
 * With the buckets' locks held. */
int sluice__shm_add_key(shm_store *m, const located *q, const uint64_t *kw, size_t len, int64_t now_ms,
                        const uint64_t *init, uint64_t *buf, shm_slot **out, int *home) {
    const shm_policy *sp = q->sp;
    uint32_t i = 0;
    *home = 0;
    shm_slot *sl = free_in(m, q, 0, &i); /* the first bucket while it has room */
    if (!sl && q->n == 2) sl = free_in(m, q, *home = 1, &i);
    if (sl && allocate_bucket(m, q, *home)) return SLUICE_ENOMEM;
    if (sl) sl = free_in(m, q, *home, &i); /* its pages are there now: check the slot itself */
    /* a block for a state larger than a slot: before room is made, so that
     * a full area changes nothing; when the area has none, the slot must
     * come with one (a forgotten or evicted key's) */
    uint64_t block = 0, floor = 0;
    unsigned need = 0;
    if (sp->block_class) {
        int rc = sluice__shm_block_reserve(m, sp->block_class, q->b[0], &block);
        if (rc == SLUICE_EFULL) need = sp->block_class;
        else if (rc) return rc;
    }
    if (sl && need && !sluice__shm_block_words(m, sl, need)) sl = NULL;
    if (!sl && !(sl = make_room(m, q, now_ms, need, home, &i))) {
        sluice__shm_block_release(m, block, sp->block_class);
        if (!need)
            sluice__store_errf(&m->head, "shm:%s is full of keys that are not fresh (buckets of %u)", m->path,
                               m->g.spb);
        return SLUICE_EFULL; /* with need: the area's message */
    }
    sluice__shm_block_attach(m, sl, sp->block_class, block, &floor);
    STEP(7);
    /* whole before live; its control word is dead, so nobody else writes
     * it. The key gets a version of its own, above any that an earlier
     * add killed midway may have written (whose words would otherwise pass
     * for this key's state), and any its block has seen: it is taken first. */
    uint64_t v = SHM_VERSION(atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire)) + 1;
    if (v < floor) v = floor;
    atomic_store_explicit(SHM_CTRL(sl), SHM_CTRL_WORD(v, 0), memory_order_release);
    atomic_store_explicit(&sl->fp, sp->fp, memory_order_relaxed);
    atomic_store_explicit(&sl->key_len, (uint32_t)len, memory_order_relaxed);
    atomic_store_explicit(&sl->born_ms, now_ms, memory_order_relaxed);
    for (size_t k = 0; k < (len + 7) / 8; k++) atomic_store_explicit(&sl->key[k], kw[k], memory_order_relaxed);
    atomic_store_explicit(&sl->last_use_ms, now_ms, memory_order_relaxed);
    shm_bucket_head *bh = q->bh[*home];
    _Atomic uint64_t *tw = &bh->tags[i / 8]; /* written under the lock: no other writer */
    uint64_t t = atomic_load_explicit(tw, memory_order_relaxed) & ~(UINT64_C(0xff) << (i % 8 * 8));
    atomic_store_explicit(tw, t | (uint64_t)q->tag << (i % 8 * 8), memory_order_relaxed);
    /* a FAST key's word: fresh, or init's when it is one (relative to now) */
    uint64_t word = sp->fast_fresh;
    int64_t fresh_at = INT64_MIN;
    sluice__state st[SLUICE_POLICY_MAX_PARTS];
    int fast = sp->fast;
    if (init) {
        sluice__shm_load_states(sp, (uint8_t *)init, st); /* ours: never damaged */
        fresh_at = now_ms + sluice__policy_reset_ms(&sp->policy, st, now_ms);
        if (fast) fast = sp->policy.algo[0]->word_of(&sp->policy.params[0], &st[0], now_ms, &word) == 1;
    }
    if (fast) { /* one word; its algorithm and unit beside it */
        atomic_store_explicit(&sl->algo, (uint32_t)sp->policy.parts[0].algorithm, memory_order_relaxed);
        atomic_store_explicit(&shm_tail_of(m, sl)->unit, sp->fast_unit, memory_order_relaxed);
        STEP(4);
        sluice__pair_set(&sl->head, word, SHM_CTRL_WORD(v, SHM_FAST | SHM_LIVE));
    } else {
        if (!init) sluice__shm_fresh_states(sp, (uint8_t *)buf);
        copy_write(copies_of(m, sp, sl), v, init ? init : buf, sp->words);
        STEP(4);
        sluice__pair_set(&shm_tail_of(m, sl)->change, (uint64_t)fresh_at, SHM_CHANGE(v, SHM_KIND_SETTLED, 0));
        atomic_store_explicit(SHM_CTRL(sl), SHM_CTRL_WORD(v, SHM_LIVE), memory_order_release);
    }
    live_set(bh, i, 1);
    *out = sl;
    return 0;
}

/* ---- another configuration of the name: retune, reset ---- */

/* Slot sl's index in bucket k of q. */
static uint32_t index_in(const shm_store *m, const located *q, int k, shm_slot *sl) {
    return (uint32_t)(((uint8_t *)sl - (uint8_t *)shm_slot_at(m, q->b[k], 0)) / m->g.slot_bytes);
}

/* The slot of q's buckets that holds the key under another configuration
 * of q's policy's name (as the file's configurations tell: a key of a
 * configuration not there, or of another name that hashes alike, is left
 * alone), or NULL; *old: that configuration, *home: its bucket. With the
 * buckets' locks held. */
static shm_slot *find_other(shm_store *m, const located *q, const uint64_t *kw, size_t len, const shm_policy **old,
                            int *home) {
    const shm_policy *sp = q->sp;
    for (int k = 0; k < q->n; k++) {
        uint64_t live = atomic_load_explicit(&q->bh[k]->live, memory_order_relaxed);
        for (uint64_t mask = tag_matches(m, q->bh[k], q->tag) & live; mask; mask &= mask - 1) {
            shm_slot *sl = shm_slot_at(m, q->b[k], (uint32_t)__builtin_ctzll(mask));
            uint64_t fp = atomic_load_explicit(&sl->fp, memory_order_relaxed);
            if (fp == sp->fp || (uint32_t)(fp >> 32) != sp->tweak || !holds(sl, fp, kw, len) ||
                !(atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire) & SHM_LIVE))
                continue;
            const shm_policy *o = sluice__shm_registry_find(m, fp);
            if (!o || strcmp(o->policy.name, sp->policy.name) != 0) continue;
            *old = o;
            *home = k;
            return sl;
        }
    }
    return NULL;
}

/* Reads the state of o's key in sl as o's parts' states (st; a state that
 * grows keeps its entries in obuf, room for o's words): 0 with *c and
 * {*lo, *hi} what it was read at (a FAST key's head, else its change, none
 * pending), AGAIN when it moved on (read again), NOT_HELD or DAMAGED. */
static int read_key(const shm_store *m, const shm_policy *o, shm_slot *sl, uint64_t *obuf, sluice__state *st,
                    uint64_t *c, uint64_t *lo, uint64_t *hi) {
    uint64_t c0 = atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire);
    if (!(c0 & SHM_LIVE)) return NOT_HELD;
    if (c0 & SHM_FAST) {
        if (!o->fast) return DAMAGED;
        sluice__pair_read(&sl->head, lo, c);
        if (*c != c0) return AGAIN;
        *hi = 0;
        o->policy.algo[0]->word_state(o->fast_unit, *lo, atomic_load_explicit(&sl->born_ms, memory_order_relaxed), st);
        return 0;
    }
    *c = c0;
    copies cp = copies_of(m, o, sl);
    if (!cp.base) return DAMAGED;
    uint64_t v = SHM_VERSION(c0), lo2, hi2;
    sluice__pair_read(&shm_tail_of(m, sl)->change, lo, hi);
    if (SHM_CHANGE_VERSION(*hi) == (uint32_t)(v + 1)) /* a change to finish first */
        sluice__shm_finish(m, o, sl, cp, c0, *lo, *hi, obuf);
    else if (SHM_CHANGE_VERSION(*hi) == (uint32_t)v && SHM_CHANGE_KIND(*hi) == SHM_KIND_SETTLED &&
             copy_read(cp, v, obuf, o->words) && atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire) == c0)
        return sluice__shm_load_states(o, (uint8_t *)obuf, st) ? DAMAGED : 0;
    sluice__pair_read(&shm_tail_of(m, sl)->change, &lo2, &hi2);
    return atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire) != c0 || lo2 != *lo || hi2 != *hi ? AGAIN
                                                                                                       : DAMAGED;
}

/* The key kept by another configuration of q's policy's name, converted
 * to q's (docs/semantics.md, "Retune") at now_ms (or its key's birth, if
 * later): dropped, then added again with the converted state, under the
 * buckets' locks (a process killed between the two leaves the key fresh).
 * 0 with *out its new slot (NULL: no such key), or an error (DAMAGED, an
 * add's). buf: room for the policy's words. */
int sluice__shm_retune(shm_store *m, const located *q, const uint64_t *kw, size_t len, int64_t now_ms, uint64_t *buf,
                       shm_slot **out, int *home) {
    const shm_policy *o, *sp = q->sp;
    int k;
    *out = NULL;
    shm_slot *sl = find_other(m, q, kw, len, &o, &k);
    if (!sl) return 0;
    uint64_t *obuf = malloc(((size_t)o->words + 1) * sizeof *obuf);
    if (!obuf) {
        sluice__store_errf(&m->head, "out of memory");
        return SLUICE_ENOMEM;
    }
    sluice__state ost[SLUICE_POLICY_MAX_PARTS], nst[SLUICE_POLICY_MAX_PARTS];
    int rc, fresh = 1;
    for (;;) {
        uint64_t c, lo, hi;
        if ((rc = read_key(m, o, sl, obuf, ost, &c, &lo, &hi)) == AGAIN) continue;
        if (rc) break;
        int64_t born_ms = atomic_load_explicit(&sl->born_ms, memory_order_relaxed);
        if (now_ms < born_ms && born_ms <= SLUICE_TIME_MAX_MS) now_ms = born_ms;
        sluice__shm_fresh_states(sp, (uint8_t *)buf); /* rings at their largest: never short of room */
        sluice__shm_load_states(sp, (uint8_t *)buf, nst);
        if (sluice__policy_convert(&o->policy, ost, &sp->policy, nst, now_ms)) {
            rc = DAMAGED;
            break;
        }
        sluice__shm_store_states(sp, (uint8_t *)buf, nst);
        if (!drop_key(m, sl, c, lo, hi)) continue;
        live_set(q->bh[k], index_in(m, q, k, sl), 0);
        fresh = sluice__policy_reset_ms(&sp->policy, nst, now_ms) == 0;
        break;
    }
    free(obuf);
    if (rc == NOT_HELD) return 0;
    if (rc) return rc;
    return sluice__shm_add_key(m, q, kw, len, now_ms, fresh ? NULL : buf, buf, out, home);
}

/* Forgets the key, kept by q's configuration or another of its name
 * (reset). With the buckets' locks held. */
void sluice__shm_forget(shm_store *m, const located *q, const uint64_t *kw, size_t len) {
    for (;;) {
        uint64_t seen = 0, c, lo, hi;
        int k, rc = 0;
        const shm_policy *o;
        shm_slot *sl = sluice__shm_find_locked(m, q, kw, len, &seen, &k, &rc);
        if (!sl && !(sl = find_other(m, q, kw, len, &o, &k))) return;
        c = atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire);
        if (!(c & SHM_LIVE)) return;
        if (c & SHM_FAST) {
            uint64_t c2;
            sluice__pair_read(&sl->head, &lo, &c2);
            if (c2 != c) continue;
            hi = 0;
        } else {
            sluice__pair_read(&shm_tail_of(m, sl)->change, &lo, &hi);
            /* a settle or drop pending: published first; an admission
             * pending is dropped with the key (as if it came first) */
            if (SHM_CHANGE_VERSION(hi) == (uint32_t)(SHM_VERSION(c) + 1) && SHM_CHANGE_KIND(hi) != SHM_KIND_ADMIT) {
                publish(sl, c, hi);
                continue;
            }
        }
        if (!drop_key(m, sl, c, lo, hi)) continue;
        live_set(q->bh[k], index_in(m, q, k, sl), 0);
        return;
    }
}

/* ---- the buckets' locks ---- */

/* Takes the locks of q's buckets (in order), making their live masks true
 * again where a dead owner's lock was taken over. */
void sluice__shm_lock_buckets(shm_store *m, const located *q) {
    int lower = q->b[0] < q->b[1] ? 0 : 1;
    for (int i = 0; i < q->n; i++) {
        int k = i == 0 ? lower : 1 - lower;
        if (sluice__shm_lock(&q->bh[k]->lock)) live_repair(m, q->b[k]);
    }
}

void sluice__shm_unlock_buckets(const located *q) {
    for (int k = 0; k < q->n; k++) sluice__shm_unlock(&q->bh[k]->lock);
}
