/* store/shm/protocol.h: what the two halves of the shm store's protocol
 * share: the lock-free decisions (shm.c) and the table's shape under the
 * buckets' locks (room.c). The results they pass, where a key's state
 * copies lie and how they are read and written, how a change is
 * published, how a key is found by its tag, and the located request. The
 * protocol itself is told at the top of shm.c. */
#ifndef SLUICE_SHM_PROTOCOL_H
#define SLUICE_SHM_PROTOCOL_H

#include "shm.h"

#include "pair.h"

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
#define VERB_ACQUIRE 0 /* beside sluice__verb's: a decision */

/* The test hook (testing.h) at step n. */
#define STEP(n) (sluice__shm_step_hook ? sluice__shm_step_hook(n) : (void)0)

/* A counter of the calling thread's stripe (counters.c). */
#define COUNT(m, field) SHM_COUNT(m, field)

/* Where sl's two copies lie (NULL: its overflow field names no block of
 * the policy's, a damaged slot), and the words from one to the next. */
typedef struct {
    shm_pair *base;
    size_t stride;
} copies;

static inline copies copies_of(const shm_store *m, const shm_policy *sp, shm_slot *sl) {
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
static inline int copy_read(copies c, uint64_t v, uint64_t *buf, size_t n) {
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
static inline void copy_write(copies c, uint64_t v, const uint64_t *buf, size_t n) {
    shm_pair *w = c.base + (v & 1) * c.stride;
    for (size_t i = 0; i < n; i++) {
        uint64_t lo, hi;
        do sluice__pair_read(&w[i], &lo, &hi);
        while (hi < v && !sluice__cas16(&w[i], lo, hi, buf[i], v));
    }
}

/* Moves the control word c on, once its change (hi) is decided: live
 * when settled (an admission written), dead after a drop. Anyone may; the
 * first does. */
static inline void publish(shm_slot *sl, uint64_t c, uint64_t hi) {
    unsigned kind = SHM_CHANGE_KIND(hi);
    if (SHM_CHANGE_VERSION(hi) != (uint32_t)(SHM_VERSION(c) + 1) || (kind != SHM_KIND_SETTLED && kind != SHM_KIND_DROP))
        return;
    uint64_t next = SHM_CTRL_WORD(SHM_VERSION(c) + 1, kind == SHM_KIND_SETTLED ? SHM_LIVE : 0);
    atomic_compare_exchange_strong_explicit(SHM_CTRL(sl), &c, next, memory_order_acq_rel, memory_order_relaxed);
}

/* Whether sl holds the key (kw: its bytes, zero-padded to whole words). */
static inline int holds(shm_slot *sl, uint64_t fp, const uint64_t *kw, size_t len) {
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
static inline uint64_t tag_matches(const shm_store *m, shm_bucket_head *bh, uint8_t tag) {
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
static inline uint64_t candidates(const shm_store *m, shm_bucket_head *bh, uint8_t tag) {
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

/* Whether a FAST key's word w is fresh at now_ms, judged by the algorithm
 * and unit its slot names (which may be of a policy this process does not
 * know): 1 or 0, or -1 when they name none (a damaged slot). */
static inline int fast_fresh(const shm_slot *sl, int64_t unit, uint64_t w, int64_t now_ms) {
    const sluice__algo *a = sluice__algo_of((sluice_algorithm)atomic_load_explicit(&sl->algo, memory_order_relaxed));
    if (!a || !a->word_is_fresh) return -1;
    return a->word_is_fresh(unit, w, atomic_load_explicit(&sl->born_ms, memory_order_relaxed), now_ms);
}

/* ---- "shm.c" ---- */
void sluice__shm_finish(const shm_store *m, const shm_policy *sp, shm_slot *sl, copies cp, uint64_t c, uint64_t lo,
                        uint64_t hi, uint64_t *buf);

/* ---- "state.c" ---- */
int sluice__shm_load_states(const shm_policy *sp, uint8_t *copy, sluice__state *st);
void sluice__shm_store_states(const shm_policy *sp, uint8_t *copy, const sluice__state *st);
void sluice__shm_fresh_states(const shm_policy *sp, uint8_t *copy);

/* ---- "room.c": the table's shape, under the buckets' locks ---- */
void sluice__shm_lock_buckets(shm_store *m, const located *q);
void sluice__shm_unlock_buckets(const located *q);
shm_slot *sluice__shm_find_locked(const shm_store *m, const located *q, const uint64_t *kw, size_t len,
                                  uint64_t *seen, int *home, int *rc);
int64_t sluice__shm_decision_time(const shm_store *m, const located *q, int64_t reading_ms);
int sluice__shm_add_key(shm_store *m, const located *q, const uint64_t *kw, size_t len, int64_t now_ms,
                        const uint64_t *init, uint64_t *buf, shm_slot **out, int *home);
int sluice__shm_retune(shm_store *m, const located *q, const uint64_t *kw, size_t len, int64_t now_ms, uint64_t *buf,
                       shm_slot **out, int *home);
void sluice__shm_forget(shm_store *m, const located *q, const uint64_t *kw, size_t len);
int sluice__shm_convert(const shm_store *m, const shm_policy *sp, shm_slot *sl, uint64_t *buf);

/* ---- "registry.c": the configurations the file has met ---- */
/* Adds policy text (of fingerprint fp) when it is not there and there is
 * room. */
void sluice__shm_registry_add(shm_store *m, uint64_t fp, const char *text, size_t len);
/* The configuration of fingerprint fp, as this process's policy (made
 * from its text and registered), or NULL when the file has none (or its
 * text is not fp's). */
const shm_policy *sluice__shm_registry_find(shm_store *m, uint64_t fp);

#endif /* SLUICE_SHM_PROTOCOL_H */
