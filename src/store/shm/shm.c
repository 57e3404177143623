/* store/shm/shm.c: per-key state in a shared-memory file, for the processes
 * of one host ("shm:PATH?max_keys=N&on_full=evict|refuse&key_bytes=K&
 * state_bytes=S&overflow_bytes=O"): the lock-free protocol on the file that
 * format.h draws. Opening the file is open.c; its locks, owner.c; its
 * counters, counters.c; states larger than a slot, overflow.c.
 *
 * Updates of a key are lock-free. A key of a one-part policy of a bucket
 * (token or leaky), a fixed window, or a sliding window of a limit below
 * 2^16 is FAST: its state is one word next to its control word, and an
 * admission is one 16-byte compare-and-swap of the two, while the state,
 * kept relative to the time the key was added, fits: a TAT in 63 bits (at
 * r units per ms, 2^63 / r ms: 292 million years at r = 1, 107 days at
 * r = 999999937, which a rate like 999999937/1000ms needs); a fixed
 * window's index within 2^34 windows of the first (199 days of 1 ms
 * windows) beside its count in 30 bits; a sliding window's within 2^32 (49
 * days of 1 ms windows) beside two counts in 16 bits. A state that would
 * not fit first moves the key, under its buckets' locks, to the general
 * form below (the same state as words; a process killed midway leaves it
 * FAST and whole).
 *
 * Every other key: the key's version v selects its current copy, v & 1,
 * whose words all carry version v (in its slot, or in its overflow block
 * when the state is larger than state_bytes). An admission (1) reads the
 * copy, (2) installs its change for version v + 1 (its reading and cost)
 * with one 16-byte compare-and-swap, (3) writes the new state into the
 * other copy, each word with a 16-byte compare-and-swap that only raises a
 * word's version, and (4) marks the change settled (with the time the new
 * state is fresh again) and moves the control word to v + 1. The new
 * state depends only on the old one and the change, so any process that
 * meets an installed change finishes it (writing the same values) instead
 * of waiting: a process stopped or killed at any step blocks nobody. A
 * word's version only grows, so a process that wakes up late cannot write
 * over a newer state; a reader takes a copy only when every word it read
 * carries the version of the control word. Dropping a key is a change too
 * (kind 3), so it cannot overtake an admission: a fresh key is dropped
 * only with no change pending, and the least recently used key may be
 * dropped with its admission pending (as if the admission came first). A
 * key being added takes a new version before it writes its state, so words
 * that an add killed midway wrote never pass for a later key's state. The
 * change keeps its version mod 2^32 (the words keep all 64 bits): a process
 * stopped between reading a key and installing its change while its slot
 * took 2^32 updates (of that key, or of keys that held the slot since)
 * could install a stale one. KNOWN, NOT FIXED: the key then answers that
 * its state is damaged (below), as a reviewer showed by forging the 2^32
 * updates. It takes a process stopped in the middle of one decision for as
 * long as 2^32 updates of one slot take (minutes at full speed on one
 * slot); a fix keeps more version bits in the change word.
 *
 * Nothing in the file is trusted: every loop here goes round again only
 * when a word it read has changed (another process made progress), never
 * on what a word says, and a slot whose words contradict each other or its
 * policy (a control word's version that its copy's words do not carry, a
 * change word of another version, a FAST flag on a policy that has none, a
 * window count above its limit, a log's ring out of bounds, an overflow
 * field naming no block of the slot's) is answered SLUICE_ESTORE, naming
 * the key, and is never decided on; making room may evict such a slot, as
 * it may any key that is not fresh. What no word can tell is taken as it
 * is: a flipped bit in a key's bytes makes it another key, one in a count
 * or a TAT another count or TAT (so a damaged file can admit more than a
 * limit only through values that look like valid states).
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
 * refuses. A bucket's slots get their pages from the filesystem when its
 * first key is added (fallocate): a full filesystem is SLUICE_ENOMEM for
 * that key, never a SIGBUS. Time is the store's clock (by default
 * CLOCK_MONOTONIC, one clock for every process of the host); the store's
 * time is the highest reading any process admitted at (never backwards), a
 * bucket's time the highest it forgot a key at (a key's decisions are
 * never earlier), and the boot id detects a reboot, after which the file
 * starts fresh. */
#define _GNU_SOURCE
#include "shm.h"

#include "cas16.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shm needs lock-free 64-bit atomics");
_Static_assert(SLUICE_LIMIT_MAX < (1 << 30), "a change holds a cost in 30 bits");

/* Internal results, beside 0 and the SLUICE_E* codes. */
#define NOT_HELD 2 /* the slot does not (or no longer) hold the key */
#define AGAIN 3    /* the key changed form (FAST no more): look again */
#define CONVERT 4  /* the key's state outgrew its word: convert, locked */
#define DAMAGED 5  /* the slot's words contradict each other or the policy */

void (*sluice__shm_step_hook)(int step);
#define STEP(n) (sluice__shm_step_hook ? sluice__shm_step_hook(n) : (void)0)

/* A counter of the calling thread's stripe changed only by it (bump). */
#define COUNT(m, field) SHM_COUNT(m, field)

/* ---- policies ---- */

int sluice__shm_policy_init(void *item, void *ctx) {
    shm_policy *sp = item;
    shm_store *m = ctx;
    const sluice_policy *p = &sp->policy;
    char text[SLUICE_POLICY_MAX_PARTS * 80 + SLUICE_POLICY_NAME_MAX + 2];
    int n = snprintf(text, sizeof text, "%s\n", p->name);
    sluice_policy_format(p, text + n, sizeof text - (size_t)n);
    uint64_t zero[2] = {0, 0};
    sp->fp = sluice__siphash24(zero, text, strlen(text)) | 1; /* never 0: 0 is "free" */
    sp->tweak = (uint32_t)(sp->fp >> 32);
    uint64_t at = 0;
    for (size_t i = 0; i < p->n_parts && at < (UINT64_C(1) << 40); i++) {
        sp->offset[i] = (uint32_t)at;
        at += shm_align(p->algo[i]->layout_bytes(&p->params[i]), 8); /* too big: refused below */
    }
    const sluice__algo *a = p->algo[0];
    sp->fast = p->n_parts == 1 && a->word_fits && a->word_fits(&p->params[0]);
    sp->gcra = (a->flags & SLUICE__ALGO_GCRA) != 0;
    sp->shaper = (a->flags & SLUICE__ALGO_DELAYS) != 0;
    sp->fast_unit = sp->fast ? a->word_unit(&p->params[0]) : 0;
    sp->fast_fresh = a->word_fresh;
    sp->block_class = 0;
    if (at <= m->g.state_bytes) {
        sp->bytes = (uint32_t)at;
        sp->words = (uint32_t)(at / 8);
        return 0;
    }
    if (at < (UINT64_C(1) << 40)) {
        sp->bytes = (uint32_t)at;
        sp->words = (uint32_t)(at / 8);
        sp->block_class = sluice__shm_block_class(m, sp->words);
    }
    if (sp->block_class) return 0;
    uint64_t area = SHM_OVERFLOW_HEAD + (UINT64_C(1) << 12);
    while (area - SHM_OVERFLOW_HEAD < SHM_BLOCK_HEAD + 4 * at) area = SHM_OVERFLOW_HEAD + 2 * (area - SHM_OVERFLOW_HEAD);
    sluice__store_errf(&m->head, "policy %s needs %llu bytes of state per key: more than shm:%s holds "
                                 "(state_bytes=%u in a slot, overflow_bytes=%llu beside; a file made with "
                                 "?overflow_bytes=%llu would hold it)",
                       p->name, (unsigned long long)at, m->path, m->g.state_bytes,
                       (unsigned long long)m->g.overflow_bytes, (unsigned long long)area);
    return SLUICE_EINVAL;
}

/* ---- a key's state: the policy's parts in a state copy ---- */

/* A state copy's words -> the algorithms' states (a state that grows keeps
 * its entries in buf): 0, or DAMAGED when a state is not one the algorithm
 * ever writes. */
static int load_states(const shm_policy *sp, uint8_t *copy, sluice__state *st) {
    const sluice_policy *p = &sp->policy;
    for (size_t i = 0; i < p->n_parts; i++)
        if (p->algo[i]->layout_read(&p->params[i], copy + sp->offset[i], &st[i])) return DAMAGED;
    return 0;
}

static void store_states(const shm_policy *sp, uint8_t *copy, const sluice__state *st) {
    const sluice_policy *p = &sp->policy;
    for (size_t i = 0; i < p->n_parts; i++) p->algo[i]->layout_write(&p->params[i], &st[i], copy + sp->offset[i]);
}

static void fresh_states(const shm_policy *sp, uint8_t *copy) {
    const sluice_policy *p = &sp->policy;
    memset(copy, 0, sp->bytes);
    for (size_t i = 0; i < p->n_parts; i++) p->algo[i]->layout_init(&p->params[i], copy + sp->offset[i]);
}

/* ---- a key's state copies: in its slot, or in its overflow block ---- */

/* Where sl's two copies lie (NULL: its overflow field names no block of
 * the policy's, a damaged slot), and the words from one to the next. */
typedef struct {
    shm_pair *base;
    size_t stride;
} copies;

static copies copies_of(const shm_store *m, const shm_policy *sp, shm_slot *sl) {
    copies c;
    if (sp->block_class) {
        c.base = sluice__shm_block_words(m, sl, sp->block_class);
        c.stride = sp->words;
    } else {
        c.base = (shm_pair *)(shm_tail_of(m, sl) + 1);
        c.stride = m->g.state_bytes / 8;
    }
    return c;
}

/* Reads copy v's first n words into buf: 0 when one of them is not of
 * version v (the key moved on meanwhile, or the slot is damaged). */
static int copy_read(copies c, uint64_t v, uint64_t *buf, size_t n) {
    shm_pair *w = c.base + (v & 1) * c.stride;
    for (size_t i = 0; i < n; i++) {
        if (atomic_load_explicit(&w[i].hi, memory_order_acquire) != v) return 0;
        buf[i] = atomic_load_explicit(&w[i].lo, memory_order_acquire);
        if (atomic_load_explicit(&w[i].hi, memory_order_acquire) != v) return 0;
    }
    return 1;
}

/* Writes buf as copy v's first n words, each only over an older version:
 * a writer that comes late (v already passed) changes nothing. */
static void copy_write(copies c, uint64_t v, const uint64_t *buf, size_t n) {
    shm_pair *w = c.base + (v & 1) * c.stride;
    for (size_t i = 0; i < n; i++) {
        uint64_t lo, hi;
        do shm_pair_read(&w[i], &lo, &hi);
        while (hi < v && !shm_cas16(&w[i], lo, hi, buf[i], v));
    }
}

/* Decides on the state in buf, updating it when allowed (and *fresh_at:
 * the store time at which the new state is fresh again): 0, or DAMAGED. */
static int decide_words(const shm_policy *sp, uint64_t *buf, int64_t now_ms, int64_t cost, sluice_decision *d,
                        int64_t *fresh_at) {
    sluice__state st[SLUICE_POLICY_MAX_PARTS];
    if (load_states(sp, (uint8_t *)buf, st)) return DAMAGED;
    size_t g = 0;
    int rc = sluice__policy_decide(&sp->policy, st, now_ms, cost, d, &g);
    if (rc == SLUICE__EGROW) return DAMAGED; /* a ring as big as spolicy_init made it never needs room */
    if (rc == 0 && d->allowed) {
        store_states(sp, (uint8_t *)buf, st);
        *fresh_at = now_ms + d->reset_ms;
    }
    return rc;
}

/* ---- changes: the move of a key from version v to v + 1 ---- */

/* Moves the control word c on, once its change (hi) is decided: live
 * when settled (an admission written), dead after a drop. Anyone may; the
 * first does. */
static void publish(shm_slot *sl, uint64_t c, uint64_t hi) {
    unsigned kind = SHM_CHANGE_KIND(hi);
    if (SHM_CHANGE_VERSION(hi) != (uint32_t)(SHM_VERSION(c) + 1) || (kind != SHM_KIND_SETTLED && kind != SHM_KIND_DROP))
        return;
    uint64_t next = SHM_CTRL_WORD(SHM_VERSION(c) + 1, kind == SHM_KIND_SETTLED ? SHM_LIVE : 0);
    atomic_compare_exchange_strong_explicit(SHM_CTRL(sl), &c, next, memory_order_acq_rel, memory_order_relaxed);
}

/* Finishes the admission {lo, hi} installed in sl at control word c, as its
 * maker would (the same values: they depend only on the old state and the
 * change), then publishes. Any process that knows the key's policy may,
 * any number of times; buf is room for the policy's words. */
static void finish(const shm_store *m, const shm_policy *sp, shm_slot *sl, copies cp, uint64_t c, uint64_t lo,
                   uint64_t hi, uint64_t *buf) {
    if (SHM_CHANGE_KIND(hi) == SHM_KIND_ADMIT) {
        if (!copy_read(cp, SHM_VERSION(c), buf, sp->words)) return; /* already moved on */
        sluice_decision d;
        int64_t fresh_at = INT64_MIN;
        int64_t cost = SHM_CHANGE_COST(hi);
        if (cost < 1 || cost > sp->policy.max_cost ||
            decide_words(sp, buf, (int64_t)lo + SLUICE_TIME_MIN_MS, cost, &d, &fresh_at) || !d.allowed)
            return; /* not its maker's decision: the caller finds no progress (damaged) */
        copy_write(cp, SHM_VERSION(c) + 1, buf, sp->words);
        uint64_t settled = SHM_CHANGE(SHM_VERSION(c) + 1, SHM_KIND_SETTLED, 0);
        if (shm_cas16(&shm_tail_of(m, sl)->change, lo, hi, (uint64_t)fresh_at, settled)) hi = settled;
        else shm_pair_read(&shm_tail_of(m, sl)->change, &lo, &hi); /* settled by another, or dropped */
    }
    publish(sl, c, hi);
}

/* Drops the key held at control word c, with its change read as {lo, hi}
 * (none pending, or an admission pending): 1, or 0 when the key changed
 * meanwhile. With the buckets' locks held. */
static int drop(const shm_store *m, shm_slot *sl, uint64_t c, uint64_t lo, uint64_t hi) {
    uint64_t d = SHM_CHANGE(SHM_VERSION(c) + 1, SHM_KIND_DROP, 0);
    if (!shm_cas16(&shm_tail_of(m, sl)->change, lo, hi, 0, d)) return 0;
    publish(sl, c, d);
    return 1;
}

/* ---- finding keys ---- */

/* Whether sl holds the key (kw: its bytes, zero-padded to whole words). */
static int holds(shm_slot *sl, uint64_t fp, const uint64_t *kw, size_t len) {
    if (atomic_load_explicit(&sl->fp, memory_order_relaxed) != fp ||
        atomic_load_explicit(&sl->key_len, memory_order_relaxed) != len)
        return 0;
    uint64_t k0 = atomic_load_explicit(&sl->key[0], memory_order_relaxed);
    if (len <= 8) return k0 == kw[0];
    if (len <= 16) /* the usual key: two words, no loop */
        return ((k0 ^ kw[0]) | (atomic_load_explicit(&sl->key[1], memory_order_relaxed) ^ kw[1])) == 0;
    for (size_t i = 0; i < (len + 7) / 8; i++)
        if (atomic_load_explicit(&sl->key[i], memory_order_relaxed) != kw[i]) return 0;
    return 1;
}

/* The slots of bh whose tag is tag, as a bit mask (bit i: slot i). The
 * tags 8 at a time: a byte of a word is the tag when the word ^ tag
 * repeated has a zero byte there; the bytes' top bits are then gathered
 * by one multiply (each lands on its own bit of the top byte). */
static uint64_t tag_matches(const shm_store *m, shm_bucket_head *bh, uint8_t tag) {
#if defined(__SSE2__)
    if (m->g.spb == 16) { /* the usual bucket: one vector compare */
        __m128i t = _mm_set_epi64x((long long)atomic_load_explicit(&bh->tags[1], memory_order_relaxed),
                                   (long long)atomic_load_explicit(&bh->tags[0], memory_order_relaxed));
        return (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(t, _mm_set1_epi8((char)tag)));
    }
#endif
    const uint64_t ones = UINT64_C(0x0101010101010101), low7 = UINT64_C(0x7f7f7f7f7f7f7f7f);
    uint64_t mask = 0;
    for (uint32_t w = 0; w * 8 < m->g.spb; w++) { /* spb <= 64 */
        uint64_t x = atomic_load_explicit(&bh->tags[w], memory_order_relaxed) ^ (ones * tag);
        uint64_t zero = ~(((x & low7) + low7) | x | low7); /* 0x80 where a byte of x is 0 */
        mask |= ((zero >> 7) * UINT64_C(0x0102040810204080) >> 56) << (8 * w);
    }
    return m->g.spb < 64 ? mask & ((UINT64_C(1) << m->g.spb) - 1) : mask;
}

/* The live slots of bh whose tag is tag: the tags ANDed with the live
 * mask (the same line), so that no slot without a key is read (nor one
 * whose pages the filesystem never gave). */
static uint64_t candidates(const shm_store *m, shm_bucket_head *bh, uint8_t tag) {
    return tag_matches(m, bh, tag) & atomic_load_explicit(&bh->live, memory_order_acquire);
}

/* A request's key located: its policy, hash tag and two buckets. */
typedef struct {
    const shm_policy *sp;
    shm_bucket_head *bh[2]; /* the first choice, the second */
    uint64_t b[2];          /* their indexes */
    int n;                  /* buckets: 1 when both choices are one */
    uint8_t tag;
} located;

/* The key's slot among the slots of bucket k of q in mask, or NULL. *seen:
 * the slot's control word, read before its key: while it stays the same,
 * so does the key (every change of a slot's key moves its version on). */
static shm_slot *find_among(const shm_store *m, const located *q, int k, uint64_t mask, const uint64_t *kw,
                            size_t len, uint64_t *seen) {
    for (; mask; mask &= mask - 1) {
        shm_slot *sl = shm_slot_at(m, q->b[k], (uint32_t)__builtin_ctzll(mask));
        uint64_t c = atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire);
        if ((c & SHM_LIVE) && holds(sl, q->sp->fp, kw, len)) {
            *seen = c;
            return sl;
        }
    }
    return NULL;
}

/* The key's slot in its buckets, or NULL; *home: its bucket (0 or 1).
 * Without a lock. The second bucket's tags are fetched before the first
 * bucket's slots are read, so at 1M keys their cache misses overlap. */
static shm_slot *find_key(const shm_store *m, const located *q, const uint64_t *kw, size_t len, uint64_t *seen,
                          int *home) {
    __builtin_prefetch(q->bh[1]->tags);
    shm_slot *sl = find_among(m, q, 0, candidates(m, q->bh[0], q->tag), kw, len, seen);
    *home = 0;
    if (!sl && q->n == 2) {
        sl = find_among(m, q, 1, candidates(m, q->bh[1], q->tag), kw, len, seen);
        *home = 1;
    }
    return sl;
}

/* The key's slot, with its buckets' locks held: by its tag whatever the
 * live mask says (a live key the mask missed is put back in it), or NULL.
 * DAMAGED in *rc when a slot the mask says is live holds the key but its
 * control word says it holds none. */
static shm_slot *find_locked(const shm_store *m, const located *q, const uint64_t *kw, size_t len, uint64_t *seen,
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
static int64_t decision_time(const shm_store *m, const located *q, int64_t reading_ms) {
    int64_t now = sluice__store_time(&m->hdr->now_ms, reading_ms);
    for (int i = 0; i < q->n; i++) {
        int64_t b = atomic_load_explicit(&q->bh[i]->now_ms, memory_order_acquire);
        if (b > 0 && b <= SLUICE_TIME_MAX_MS - SLUICE_TIME_MIN_MS && b + SLUICE_TIME_MIN_MS > now)
            now = b + SLUICE_TIME_MIN_MS;
    }
    return now;
}

/* Notes a key's use (for the least recently used): a write only when the
 * time moved, so deciding leaves the line clean when it need not write. */
static void touch(shm_slot *sl, int64_t now_ms) {
    if (atomic_load_explicit(&sl->last_use_ms, memory_order_relaxed) != now_ms)
        atomic_store_explicit(&sl->last_use_ms, now_ms, memory_order_relaxed);
}

/* ---- FAST keys: one word of state ---- */

/* Whether a FAST key's word w is fresh at now_ms, judged by the algorithm
 * and unit its slot names (which may be of a policy this process does not
 * know): 1 or 0, or -1 when they name none (a damaged slot). */
static int fast_fresh(const shm_slot *sl, int64_t unit, uint64_t w, int64_t now_ms) {
    const sluice__algo *a = sluice__algo_of((sluice_algorithm)atomic_load_explicit(&sl->algo, memory_order_relaxed));
    if (!a || !a->word_is_fresh) return -1;
    return a->word_is_fresh(unit, w, atomic_load_explicit(&sl->born_ms, memory_order_relaxed), now_ms);
}

/* Decides on a FAST key: its word (a bucket's TAT, relative to born_ms in
 * the bucket's units, r per ms; or a window's index and counts) and its
 * control word change together in one 16-byte compare-and-swap. A bucket
 * is decided with the token bucket's arithmetic (src/algo/token_bucket.c)
 * on the same backlog, a window by its algorithm: the same decisions. */
static int decide_fast(shm_store *m, const shm_policy *sp, shm_slot *sl, const uint64_t *kw, size_t len,
                       int64_t cost, int64_t reading_ms, sluice_decision *d, uint64_t seen) {
    const sluice__params *pp = &sp->policy.params[0];
    for (;; seen = 0) {
        uint64_t w = atomic_load_explicit(&sl->head.lo, memory_order_acquire);
        uint64_t c = atomic_load_explicit(&sl->head.hi, memory_order_acquire);
        if (c != seen) { /* else w was read between two equal readings of c: of version c */
            shm_pair_read(&sl->head, &w, &c);
            if (!(c & SHM_LIVE) || !holds(sl, sp->fp, kw, len)) return NOT_HELD;
        }
        if (!(c & SHM_FAST)) return AGAIN;
        /* store time, and never before the key was added (see decision_time) */
        int64_t born_ms = atomic_load_explicit(&sl->born_ms, memory_order_relaxed);
        int64_t now = sluice__store_time(&m->hdr->now_ms, reading_ms), nb = 0;
        if (now < born_ms) now = born_ms;
        int64_t bb = 0;
        uint64_t nw = 0;
        int admit;
        if (!sp->gcra) { /* a window: its algorithm decides on the word */
            admit = sp->policy.algo[0]->word_decide(pp, w, born_ms, now, cost, d, &nw);
            if (admit == SLUICE__WORD_OUTGROWN) return CONVERT;
            if (admit < 0) return DAMAGED;
        } else {
            /* w is the TAT, relative to born_ms: ts = (now - born) * r;
             * the bucket's word step (algo/algo.h), its decision written
             * after the CAS (its divisions would hold the CAS back) */
            int64_t ts, nt = 0;
            if (__builtin_sub_overflow(now, born_ms, &ts) || __builtin_mul_overflow(ts, pp->r, &ts)) return CONVERT;
            if ((admit = sluice__gcra_word_step(pp, (int64_t)w, ts, cost, &bb, &nb, &nt)) < 0) return CONVERT;
            nw = (uint64_t)nt;
        }
        touch(sl, now);
        if (admit) {
            if (!shm_cas16(&sl->head, w, c, nw, c + SHM_CTRL_WORD(1, 0))) continue;
            if (sp->gcra) sluice__gcra_allowed(pp, bb, nb, sp->shaper, d);
            sluice__store_time_raise(&m->hdr->now_ms, now);
            COUNT(m, allowed);
        } else {
            /* no CAS vouches for a denial: the key, born_ms and word it was
             * worked out from are this key's only if the control word is
             * still c after them (else the slot changed hands meanwhile) */
            STEP(6);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&sl->head.hi, memory_order_relaxed) != c) continue;
            if (sp->gcra) sluice__gcra_denied(pp, bb, cost, d);
            COUNT(m, denied);
        }
        sluice__decision_lag(d, now - reading_ms);
        return 0;
    }
}

/* Moves a FAST key whose state outgrew its word to the general form, the
 * same state as copy words, with the buckets' locks held. Killed midway,
 * the key is still FAST and whole: the last compare-and-swap switches. */
static int convert(const shm_store *m, const shm_policy *sp, shm_slot *sl, uint64_t *buf) {
    copies cp = copies_of(m, sp, sl);
    const sluice__algo *a = sp->policy.algo[0];
    const sluice__params *pp = &sp->policy.params[0];
    if (!cp.base || !sp->fast) return DAMAGED;
    for (;;) {
        uint64_t w, c;
        shm_pair_read(&sl->head, &w, &c);
        if ((c & (SHM_LIVE | SHM_FAST)) != (SHM_LIVE | SHM_FAST)) return 0;
        uint64_t v = SHM_VERSION(c) + 1;
        int64_t born_ms = atomic_load_explicit(&sl->born_ms, memory_order_relaxed);
        sluice__state st;
        a->word_state(sp->fast_unit, w, born_ms, &st); /* the state the word stands for, as words */
        fresh_states(sp, (uint8_t *)buf);
        store_states(sp, (uint8_t *)buf, &st);
        /* fresh at: the algorithm's own reset, seen from the store's time */
        sluice_decision peek;
        int64_t now = sluice__store_time(&m->hdr->now_ms, born_ms);
        a->peek(pp, &st, now, &peek);
        int64_t fresh_at = peek.reset_ms ? now + peek.reset_ms : INT64_MIN;
        copy_write(cp, v, buf, sp->words);
        STEP(5);
        shm_pair_set(&shm_tail_of(m, sl)->change, (uint64_t)fresh_at, SHM_CHANGE(v, SHM_KIND_SETTLED, 0));
        if (shm_cas16(&sl->head, w, c, 0, SHM_CTRL_WORD(v, SHM_LIVE))) return 0;
    }
}

/* Drops the FAST key {w, c} (as drop() does the others'). */
static int drop_fast(shm_slot *sl, uint64_t w, uint64_t c) {
    return shm_cas16(&sl->head, w, c, w, SHM_CTRL_WORD(SHM_VERSION(c) + 1, 0));
}

/* Drops the key read at control word c and {lo, hi} (a FAST key's head,
 * else its change), in either form: 1, or 0 when it changed meanwhile. */
static int drop_key(const shm_store *m, shm_slot *sl, uint64_t c, uint64_t lo, uint64_t hi) {
    return c & SHM_FAST ? drop_fast(sl, lo, c) : drop(m, sl, c, lo, hi);
}

/* ---- the general form ---- */

/* Decides on the key in sl, lock-free (see the top of the file): 0 with *d
 * filled, an error, NOT_HELD, CONVERT or DAMAGED. buf: room for the
 * policy's words. */
static int decide_held(shm_store *m, const shm_policy *sp, shm_slot *sl, const uint64_t *kw, size_t len,
                       int64_t cost, int64_t reading_ms, sluice_decision *d, uint64_t *buf, uint64_t seen) {
    for (;; seen = 0) {
        /* the control word the key was found at, or a new reading */
        uint64_t c = seen ? seen : atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire), lo, hi;
        if (!(c & SHM_LIVE) || (c != seen && !holds(sl, sp->fp, kw, len))) return NOT_HELD;
        if (c & SHM_FAST) {
            if (!sp->fast) return DAMAGED; /* a FAST flag on a policy that has none */
            int rc = decide_fast(m, sp, sl, kw, len, cost, reading_ms, d, c);
            if (rc == AGAIN) continue;
            return rc;
        }
        copies cp = copies_of(m, sp, sl);
        if (!cp.base) return DAMAGED;
        uint64_t v = SHM_VERSION(c);
        shm_pair_read(&shm_tail_of(m, sl)->change, &lo, &hi);
        int moved = 0; /* whether c or the change moved since they were read */
        if (SHM_CHANGE_VERSION(hi) == (uint32_t)(v + 1)) { /* another's change: finish it first */
            finish(m, sp, sl, cp, c, lo, hi, buf);
            uint64_t lo2, hi2;
            shm_pair_read(&shm_tail_of(m, sl)->change, &lo2, &hi2);
            moved = atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire) != c || lo2 != lo || hi2 != hi;
            if (moved) continue;
            return DAMAGED; /* a change nobody can finish */
        }
        if (SHM_CHANGE_VERSION(hi) != (uint32_t)v || SHM_CHANGE_KIND(hi) != SHM_KIND_SETTLED ||
            !copy_read(cp, v, buf, sp->words) || atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire) != c) {
            if (atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire) != c) continue;
            uint64_t lo2, hi2;
            shm_pair_read(&shm_tail_of(m, sl)->change, &lo2, &hi2);
            if (lo2 != lo || hi2 != hi) continue; /* a change came meanwhile */
            return DAMAGED; /* its change or its copy is not of its version */
        }
        /* store time, and never before the key was added (see decision_time) */
        int64_t now = sluice__store_time(&m->hdr->now_ms, reading_ms);
        int64_t born_ms = atomic_load_explicit(&sl->born_ms, memory_order_relaxed);
        if (now < born_ms) now = born_ms;
        int64_t fresh_at = INT64_MIN;
        int rc = decide_words(sp, buf, now, cost, d, &fresh_at);
        if (rc) return rc;
        touch(sl, now);
        if (d->allowed) {
            uint64_t at = (uint64_t)(now - SLUICE_TIME_MIN_MS), mine = SHM_CHANGE(v + 1, SHM_KIND_ADMIT, cost);
            if (!shm_cas16(&shm_tail_of(m, sl)->change, lo, hi, at, mine)) continue; /* another change came first */
            /* the admission is decided: write it, say so, publish (a drop
             * that replaced it meanwhile counts as coming after it) */
            COUNT(m, allowed);
            STEP(1);
            copy_write(cp, v + 1, buf, sp->words);
            STEP(2);
            uint64_t settled = SHM_CHANGE(v + 1, SHM_KIND_SETTLED, 0);
            if (shm_cas16(&shm_tail_of(m, sl)->change, at, mine, (uint64_t)fresh_at, settled)) hi = settled;
            else shm_pair_read(&shm_tail_of(m, sl)->change, &lo, &hi);
            STEP(3);
            publish(sl, c, hi);
            sluice__store_time_raise(&m->hdr->now_ms, now);
        } else {
            COUNT(m, denied);
        }
        sluice__decision_lag(d, now - reading_ms);
        return 0;
    }
}

/* ---- the table's shape: adding keys and making room, locked ---- */

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
        shm_pair_read(&sl->head, lo, c);
        if (*c != c0) return SLOT_MOVED;
        *hi = 0;
        int64_t unit = atomic_load_explicit(&shm_tail_of(m, sl)->unit, memory_order_relaxed);
        return fast_fresh(sl, unit, *lo, now_ms) == 1 ? SLOT_FRESH : SLOT_USED; /* damaged (-1): never fresh */
    }
    shm_pair_read(&shm_tail_of(m, sl)->change, lo, hi);
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

/* Adds the key to a free slot (making room when needed) with a fresh
 * state: 0 with *out its slot and *home its bucket, SLUICE_EFULL
 * (refused), or another error with the store's message. With the buckets'
 * locks held. */
static int add_key(shm_store *m, const located *q, const uint64_t *kw, size_t len, int64_t now_ms, uint64_t *buf,
                   shm_slot **out, int *home) {
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
    if (sp->fast) { /* one word, fresh at any reading; its algorithm and unit beside it */
        atomic_store_explicit(&sl->algo, (uint32_t)sp->policy.parts[0].algorithm, memory_order_relaxed);
        atomic_store_explicit(&shm_tail_of(m, sl)->unit, sp->fast_unit, memory_order_relaxed);
        STEP(4);
        shm_pair_set(&sl->head, sp->fast_fresh, SHM_CTRL_WORD(v, SHM_FAST | SHM_LIVE));
    } else {
        fresh_states(sp, (uint8_t *)buf);
        copy_write(copies_of(m, sp, sl), v, buf, sp->words);
        STEP(4);
        shm_pair_set(&shm_tail_of(m, sl)->change, (uint64_t)INT64_MIN, SHM_CHANGE(v, SHM_KIND_SETTLED, 0)); /* fresh */
        atomic_store_explicit(SHM_CTRL(sl), SHM_CTRL_WORD(v, SHM_LIVE), memory_order_release);
    }
    live_set(bh, i, 1);
    *out = sl;
    return 0;
}

/* ---- a request ---- */

/* Locates the key (kw: room for its words, zero-padded, filled here). */
static inline __attribute__((always_inline)) int locate(shm_store *m, const sluice_policy *p, const void *key,
                                                        size_t len, uint64_t *kw, located *q) {
    if (len > m->g.key_bytes) { /* before the policy is registered: an error changes nothing */
        sluice__store_errf(&m->head, "key of %zu bytes: shm:%s holds keys of up to %u bytes (make the file "
                                     "with ?key_bytes=N)", len, m->path, m->g.key_bytes);
        return SLUICE_EINVAL;
    }
    unsigned id;
    uint32_t tweak; /* the policy's, cached beside its id: the hash need not wait for sp */
    int rc = sluice__policy_set_id(&m->policies, &m->head, p, &id, &tweak);
    if (rc) return rc;
    q->sp = sluice__policy_item(&m->policies, id);
    uint64_t h;
    if (len <= 16) {
        sluice__key_words(key, len, kw);
    } else {
        kw[(len - 1) / 8] = 0;
        memcpy(kw, key, len);
    }
    if (len <= 16 && m->aes) {
        h = sluice__aeshash16_words(m->hdr->aes_key, tweak, kw[0], kw[1], len);
    } else {
        uint64_t k[2] = {m->hdr->seed[0] ^ tweak, m->hdr->seed[1]};
        h = sluice__siphash13(k, key, len);
    }
    if (m->collide) h = 0;
    q->tag = (uint8_t)(h >> 32) | 1; /* never 0 */
    /* two buckets may hold the key: the first choice, where keys go while
     * it has room, and the second */
    q->b[0] = (uint64_t)(((unsigned __int128)h * m->g.buckets) >> 64);
    q->b[1] = (uint64_t)(((unsigned __int128)((h << 32) | (h >> 32)) * m->g.buckets) >> 64);
    q->bh[0] = shm_head_at(m, q->b[0]);
    q->bh[1] = shm_head_at(m, q->b[1]);
    q->n = q->b[1] != q->b[0] ? 2 : 1;
    return 0;
}

/* The usual case, straight: a FAST key in its first bucket. NOT_HELD:
 * anything else, for the general way. */
static inline __attribute__((always_inline)) int acquire_fast(shm_store *m, const located *q, const uint64_t *kw,
                                                              size_t len, int64_t cost, int64_t now_ms,
                                                              sluice_decision *d) {
    uint64_t c = 0;
    shm_slot *sl = find_among(m, q, 0, candidates(m, q->bh[0], q->tag), kw, len, &c);
    if (!sl || !(c & SHM_FAST)) return NOT_HELD;
    int rc = decide_fast(m, q->sp, sl, kw, len, cost, now_ms, d, c);
    return rc == AGAIN || rc == CONVERT ? NOT_HELD : rc;
}

/* Writes the key as text for a message: printable bytes as they are,
 * others as \xNN, at most 48 of them. */
static void key_text(const void *key, size_t len, char *out, size_t outlen) {
    const uint8_t *k = key;
    size_t o = 0;
    for (size_t i = 0; i < len && i < 48 && o + 5 < outlen; i++)
        o += (size_t)snprintf(out + o, outlen - o, k[i] >= 0x20 && k[i] < 0x7f && k[i] != '"' && k[i] != '\\' ? "%c" : "\\x%02x", k[i]);
    snprintf(out + o, outlen - o, "%s", len > 48 ? "..." : "");
}

static __attribute__((cold, noinline)) int damaged(shm_store *m, const shm_policy *sp, const void *key, size_t len) {
    char k[48 * 4 + 8];
    key_text(key, len, k, sizeof k);
    sluice__store_errf(&m->head, "shm:%s: the state of key \"%s\" (policy %s) is damaged: it is not decided "
                                 "(remove the file to start over)", m->path, k, sp->policy.name);
    return SLUICE_ESTORE;
}

/* Takes the locks of q's buckets (in order), making their live masks true
 * again where a dead owner's lock was taken over. */
static void lock_buckets(shm_store *m, const located *q) {
    int lower = q->b[0] < q->b[1] ? 0 : 1;
    for (int i = 0; i < q->n; i++) {
        int k = i == 0 ? lower : 1 - lower;
        if (sluice__shm_lock(&q->bh[k]->lock)) live_repair(m, q->b[k]);
    }
}

static void unlock_buckets(const located *q) {
    for (int k = 0; k < q->n; k++) sluice__shm_unlock(&q->bh[k]->lock);
}

/* Decides on the located key. */
static inline __attribute__((always_inline)) int acquire_located(shm_store *m, const located *q, const void *key,
                                                                 const uint64_t *kw, size_t len, int64_t cost,
                                                                 int64_t now_ms, sluice_decision *d) {
    const shm_policy *sp = q->sp;
    int rc;
    if (sp->fast && (rc = acquire_fast(m, q, kw, len, cost, now_ms, d)) != NOT_HELD) goto out;
    uint64_t stack_buf[160], *buf = stack_buf;
    if (sp->words > sizeof stack_buf / sizeof stack_buf[0] && !(buf = malloc(sp->words * sizeof *buf))) {
        sluice__store_errf(&m->head, "out of memory");
        return SLUICE_ENOMEM;
    }
    for (rc = NOT_HELD; rc == NOT_HELD || rc == CONVERT;) {
        int home;
        uint64_t seen = 0;
        shm_slot *sl = find_key(m, q, kw, len, &seen, &home);
        if (sl && rc != CONVERT) { /* held: no lock */
            rc = decide_held(m, sp, sl, kw, len, cost, now_ms, d, buf, seen);
            continue;
        }
        /* new (or to convert): under both buckets' locks, after a look
         * there (another process may just have added it) */
        lock_buckets(m, q);
        seen = 0;
        rc = 0;
        sl = find_locked(m, q, kw, len, &seen, &home, &rc);
        if (!sl && rc == 0) rc = add_key(m, q, kw, len, decision_time(m, q, now_ms), buf, &sl, &home);
        if (sl && rc == 0)
            while ((rc = decide_held(m, sp, sl, kw, len, cost, now_ms, d, buf, seen)) == CONVERT) {
                if ((rc = convert(m, sp, sl, buf))) break;
                seen = 0;
            }
        unlock_buckets(q);
    }
    if (buf != stack_buf) free(buf);
out:
    return rc == DAMAGED ? damaged(m, sp, key, len) : rc;
}

static int shm_acquire_at(sluice_store *s, const sluice_policy *p, const void *key, size_t len, int64_t cost,
                          int64_t now_ms, sluice_decision *d) {
    shm_store *m = (shm_store *)s;
    uint64_t kw[(SLUICE_KEY_MAX + 7) / 8]; /* the key in words, zero-padded */
    located q;
    int rc = locate(m, p, key, len, kw, &q);
    return rc ? rc : acquire_located(m, &q, key, kw, len, cost, now_ms, d);
}

/* A batch, decided in order as one acquire_at each, BATCH requests at a
 * time, as the memory store does (memory.c): their keys located first and
 * their buckets' heads, then the slots the tags point to, fetched into the
 * cache ahead. Keys longer than 16 bytes are decided one at a time. */
#define BATCH 16
static void shm_acquire_many(sluice_store *s, const sluice_request *reqs, size_t n, int64_t now_ms,
                             sluice_decision *out, int *results) {
    shm_store *m = (shm_store *)s;
    located q[BATCH];
    uint64_t kw[BATCH][2];
    for (size_t base = 0; base < n; base += BATCH) {
        size_t g = n - base < BATCH ? n - base : BATCH;
        const sluice_request *rq = reqs + base;
        int *res = results + base;
        for (size_t i = 0; i < g; i++) __builtin_prefetch(rq[i].key);
        for (size_t i = 0; i < g; i++) {
            if (res[i] || rq[i].key_len > 16) continue;
            res[i] = locate(m, rq[i].policy, rq[i].key, rq[i].key_len, kw[i], &q[i]);
            if (res[i]) continue;
            __builtin_prefetch(q[i].bh[0]);
            __builtin_prefetch(q[i].bh[1]);
        }
        for (size_t i = 0; i < g; i++) {
            if (res[i] || rq[i].key_len > 16) continue;
            uint64_t mask = candidates(m, q[i].bh[0], q[i].tag);
            if (mask) __builtin_prefetch(shm_slot_at(m, q[i].b[0], (uint32_t)__builtin_ctzll(mask)), 1);
        }
        for (size_t i = 0; i < g; i++) {
            if (res[i]) continue;
            res[i] = rq[i].key_len > 16
                         ? shm_acquire_at(s, rq[i].policy, rq[i].key, rq[i].key_len, rq[i].cost, now_ms, &out[base + i])
                         : acquire_located(m, &q[i], rq[i].key, kw[i], rq[i].key_len, rq[i].cost, now_ms,
                                           &out[base + i]);
        }
    }
}

/* ---- the store ---- */

/* What the counters say, and the keys the live masks count: the counter
 * blocks and the bucket heads, never a slot. */
static void shm_stats(sluice_store *s, sluice_stats *out) {
    shm_store *m = (shm_store *)s;
    out->capacity = (int64_t)(m->g.buckets * m->g.spb);
    sluice__shm_counters_read(m, out);
    for (uint64_t b = 0; b < m->g.buckets; b++)
        out->keys += __builtin_popcountll(atomic_load_explicit(&shm_head_at(m, b)->live, memory_order_relaxed));
}

void sluice__shm_store_collide(sluice_store *s) {
    ((shm_store *)s)->collide = 1;
}

const sluice__store_ops sluice__shm_store = {
    .version = SLUICE__STORE_INTERFACE,
    .scheme = "shm",
    .params = sluice__shm_params,
    .n_params = SHM_N_PARAMS,
    .open = sluice__shm_open,
    .acquire_at = shm_acquire_at,
    .acquire_many = shm_acquire_many,
    .stats = shm_stats,
    .close = sluice__shm_close,
};
