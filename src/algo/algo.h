/* algo/algo.h: the algorithm interface. An algorithm is a pure state
 * transition, decide(params, state, now_ms, cost) -> decision, new state,
 * with no clock reads, locks, allocation or I/O (one file each in this
 * directory); its descriptor (sluice__algo) is the one place that knows
 * it: stores, the limiter and the headers ask it, and never name an
 * algorithm. Also here: the validated parameters every decision reads,
 * the states, and the GCRA arithmetic the buckets share, inline. */
#ifndef SLUICE_ALGO_H
#define SLUICE_ALGO_H

#include "sluice.h"

#include <stdint.h>
#include <string.h>

typedef __int128 sluice__i128;

/* ---- division by an invariant divisor, as a multiply (Granlund and
 * Montgomery, "Division by invariant integers using multiplication", 1994,
 * fig. 4.1): exact for every uint64_t n, about a third of a divide's time. */
typedef struct {
    uint64_t m;
    uint8_t s1, s2;
} sluice__div;

static inline void sluice__div_init(sluice__div *v, uint64_t d) { /* d >= 1 */
    unsigned l = d == 1 ? 0 : 64 - (unsigned)__builtin_clzll(d - 1); /* ceil(log2 d) */
    unsigned __int128 two_l = (unsigned __int128)1 << l;
    v->m = (uint64_t)((((two_l - d) << 64) / d) + 1);
    v->s1 = l < 1 ? (uint8_t)l : 1;
    v->s2 = l < 1 ? 0 : (uint8_t)(l - 1);
}
static inline uint64_t sluice__div_q(const sluice__div *v, uint64_t n) {
    uint64_t t = (uint64_t)(((unsigned __int128)v->m * n) >> 64);
    return (t + ((n - t) >> v->s1)) >> v->s2;
}

/* ---- parameters: a validated configuration, precomputed for decisions ---- */

typedef struct sluice__params {
    sluice_config cfg;
    int64_t limit;     /* C or L                                              */
    int64_t window_ms; /* windows and log: W                                  */
    /* buckets (GCRA), in scaled units where 1 ms = r units and one token (one
     * unit of cost) = p units, r/p = R/P in lowest terms. tau = C*p is the
     * largest backlog a full-to-empty bucket holds. All < 2^62. */
    int64_t p, r, tau;
    sluice__div by_p, by_r; /* division by p and by r */
} sluice__params;

/* ---- state ---- */

/* One sliding-log entry: the newest admissions at ts_ms; cum is the running
 * total of admitted cost up to and including this entry. */
typedef struct {
    int64_t ts_ms, cum;
} sluice__log_entry;

/* A ring of entries, oldest first; cap is 0 or a power of two. base is the
 * running total before the oldest entry, so the cost of entries i..last is
 * cum(last) - cum(i-1). */
typedef struct {
    sluice__log_entry *e;
    uint32_t cap, head, len;
    int64_t base;
} sluice__log;

typedef union sluice__state {
    sluice__i128 tat; /* buckets: theoretical arrival time, 1/r ms units; the
                         bucket is full at any ts >= tat                      */
    struct {
        int64_t index, cur;
    } fw; /* fixed window: window index (now / W, floored) and its count     */
    struct {
        int64_t index, prev, cur;
    } sw; /* sliding window: index, previous and current windows' counts     */
    sluice__log log;
} sluice__state;

/* The lowest theoretical arrival time: a fresh, full bucket. */
#define SLUICE__TAT_FRESH ((sluice__i128)INT64_MIN * ((sluice__i128)1 << 62))

/* Returned by decide() when the log needs a larger ring: nothing changed;
 * grow the ring (sluice__log_reserve) and decide again. */
#define SLUICE__EGROW 1

/* What an algorithm is, besides its transitions (sluice__algo.flags). */
#define SLUICE__ALGO_GCRA 1u   /* a bucket: a capacity and a rate; its state a GCRA TAT */
#define SLUICE__ALGO_DELAYS 2u /* an admitted request may be told to wait (delay_ms) */
#define SLUICE__ALGO_GROWS 4u  /* its state owns memory that grows with use */

/* word_decide's result when the new state does not fit a word. */
#define SLUICE__WORD_OUTGROWN 2

typedef struct sluice__algo {
    sluice_algorithm id; /* its value in sluice_config.algorithm */
    const char *name;    /* its name in the text form */
    unsigned flags;      /* SLUICE__ALGO_* */
    unsigned state_bytes; /* of sluice__state its states use (a store may keep them inline) */

    /* ---- transitions ---- */
    /* Fills *d for a request of cost (1 <= cost <= limit) at now_ms. When
     * allowed and commit is set, updates *s; otherwise leaves *s untouched.
     * Returns 0, or SLUICE__EGROW when the request would be admitted but the
     * state needs room first (nothing changed, whatever commit). Sets
     * d->part = 0, d->enforced = true, d->shadow_denied = d->local = false. */
    int (*decide)(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost,
                  sluice_decision *d, int commit);
    /* Fills *d for the state as it is at now_ms, with no request: allowed =
     * false, retry_after_ms = 0, remaining = what is available now. */
    void (*peek)(const sluice__params *p, const sluice__state *s, int64_t now_ms, sluice_decision *d);
    /* True when the state at now_ms (and at any later reading) decides exactly
     * as a fresh state would: it may be forgotten. */
    int (*is_fresh)(const sluice__params *p, const sluice__state *s, int64_t now_ms);
    /* Sets *s to a fresh state (owning no memory). */
    void (*init)(const sluice__params *p, sluice__state *s);

    /* ---- the verbs beside decide (docs/semantics.md) ---- */
    /* Gives cost back to *s at now_ms, as far as it still counts, never
     * beyond a fresh state: a refund of an admission at the same reading
     * undoes it exactly. */
    void (*refund)(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost);
    /* A state s of from's as a state of to's (the same algorithm), at
     * now_ms: 1 when to keeps it exactly (the same window or rate period;
     * counts capped at to's limit), with *t the state; 0 when it cannot
     * (the caller then charges what s has in use); -1 when *t, fresh,
     * needs more room first (reserve, then again). */
    int (*carry)(const sluice__params *from, const sluice__state *s, const sluice__params *to, sluice__state *t,
                 int64_t now_ms);

    /* ---- a state that owns memory (SLUICE__ALGO_GROWS; NULL otherwise) ---- */
    /* Makes room in *s for one more admission (at most what p ever needs):
     * 0, or SLUICE_ENOMEM with *s unchanged. */
    int (*reserve)(const sluice__params *p, sluice__state *s);
    /* Frees what *s owns; *s is then a fresh state. */
    void (*release)(sluice__state *s);

    /* ---- a fixed byte layout, for stores that keep states as bytes ---- */
    /* The bytes of a state of p, a multiple of 8: enough for every state p
     * reaches (a state that grows, at its largest). */
    uint64_t (*layout_bytes)(const sluice__params *p);
    /* Writes a fresh state's layout at at. */
    void (*layout_init)(const sluice__params *p, uint8_t *at);
    /* Reads the state in the layout at at: 0, or -1 when the bytes are no
     * state p's decisions ever leave (a damaged store). A state that grows
     * keeps its entries in the layout: decide then writes them there. */
    int (*layout_read)(const sluice__params *p, uint8_t *at, sluice__state *s);
    /* Writes *s (read from at, then decided on) back at at. */
    void (*layout_write)(const sluice__params *p, const sluice__state *s, uint8_t *at);

    /* ---- one word, for a lock-free update (NULL when it has none) ---- */
    /* A word holds the state relative to an epoch (a reading no later than
     * any it is decided at: when the key was added). */
    int (*word_fits)(const sluice__params *p); /* whether p's states fit */
    uint64_t word_fresh;                       /* a fresh state's word */
    /* Decides cost on word w at now_ms: 1 admitted (*nw: the new word), 0
     * denied, SLUICE__WORD_OUTGROWN (the new state, or now_ms, lies too far
     * from the epoch: decide on the full state), or -1 when w is no word a
     * decision leaves (a damaged store). Fills *d as decide does. The
     * buckets' word is decided inline instead (sluice__gcra_word_step),
     * where speed matters. */
    int (*word_decide)(const sluice__params *p, uint64_t w, int64_t epoch_ms, int64_t now_ms, int64_t cost,
                       sluice_decision *d, uint64_t *nw);
    /* What a store keeps beside a word to judge it without p (a bucket's r,
     * a window's W). */
    int64_t (*word_unit)(const sluice__params *p);
    /* The full state word w stands for. */
    void (*word_state)(int64_t unit, uint64_t w, int64_t epoch_ms, sluice__state *s);
    /* The word of state s (the inverse): 1, or SLUICE__WORD_OUTGROWN when
     * s lies too far from the epoch (decided at no reading before it). */
    int (*word_of)(const sluice__params *p, const sluice__state *s, int64_t epoch_ms, uint64_t *w);
    /* Whether word w is fresh at now_ms: 1 or 0, or -1 when unit can be no
     * unit of this algorithm's (a damaged store). */
    int (*word_is_fresh)(int64_t unit, uint64_t w, int64_t epoch_ms, int64_t now_ms);
    /* Gives cost back to word w at now_ms: 1 with *nw the new word, 0 when
     * nothing counts to give back (w stays), or SLUICE__WORD_OUTGROWN. The
     * buckets' word is refunded inline instead (sluice__gcra_word_refund). */
    int (*word_refund)(const sluice__params *p, uint64_t w, int64_t epoch_ms, int64_t now_ms, int64_t cost,
                       uint64_t *nw);

    /* ---- what others ask of it ---- */
    /* The quota an HTTP RateLimit-Policy field gives for c: q per w_s
     * seconds (w_s rounded up, at least 1), each at most most. */
    void (*quota)(const sluice_config *c, uint64_t most, uint64_t *q, uint64_t *w_s);
    /* The size of its arithmetic for p: it forms no integer above 4 times
     * this (which an implementation in doubles, Redis's Lua, must hold
     * exactly). */
    sluice__i128 (*largest)(const sluice__params *p);
} sluice__algo;

/* floor(a / b) for b > 0 */
static inline int64_t sluice__floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}
static inline int64_t sluice__ceil_div(int64_t a, int64_t b) { /* a >= 0, b > 0 */
    return a / b + (a % b != 0);
}

/* ---- "algo/token_bucket.c" ---- */
extern const sluice__algo sluice__token_bucket;
/* The bucket core in 64 bits, inline so the lock-free path can decide in
 * registers, compare-and-swap, and only then write the decision (whose
 * divisions would otherwise delay the CAS). b is the backlog tat - now in
 * scaled units, clamped at 0; cost <= C, so cost*p <= tau < 2^62. */
/* ceil(x / r) for x >= 0 */
static inline int64_t sluice__gcra_ceil_r(const sluice__params *p, int64_t x) {
    uint64_t q = sluice__div_q(&p->by_r, (uint64_t)x);
    return (int64_t)(q + (q * (uint64_t)p->r != (uint64_t)x));
}
static inline int sluice__gcra_room(const sluice__params *p, int64_t b, int64_t cost) {
    return b <= p->tau - cost * p->p; /* b + need <= tau */
}
static inline void sluice__gcra_allowed(const sluice__params *p, int64_t b, int64_t nb, int shaper,
                                        sluice_decision *d) {
    d->allowed = true;
    d->enforced = true;
    d->shadow_denied = false;
    d->local = false;
    d->part = 0;
    /* plain divisions here measured faster than the multiplies (they run
     * after the CAS, overlapped with the caller's next work) */
    d->remaining = (p->tau - nb) / p->p;
    d->retry_after_ms = 0;
    d->reset_ms = d->part_reset_ms = sluice__ceil_div(nb, p->r);
    d->delay_ms = shaper ? sluice__ceil_div(b, p->r) : 0;
    d->limit = p->limit;
}
static inline void sluice__gcra_denied(const sluice__params *p, int64_t b, int64_t cost,
                                       sluice_decision *d) {
    d->allowed = false;
    d->enforced = true;
    d->shadow_denied = false;
    d->local = false;
    d->part = 0;
    d->remaining = b <= p->tau ? (int64_t)sluice__div_q(&p->by_p, (uint64_t)(p->tau - b)) : 0;
    /* b - tau > -need, so the sum is positive, and it fits (b <= INT64_MAX) */
    d->retry_after_ms = sluice__gcra_ceil_r(p, (b - p->tau) + cost * p->p);
    d->reset_ms = d->part_reset_ms = sluice__gcra_ceil_r(p, b);
    d->delay_ms = 0;
    d->limit = p->limit;
}
/* Decides and fills *d; returns 1 and sets *new_backlog when admitted. */
static inline int sluice__gcra_core(const sluice__params *p, int64_t backlog, int64_t cost,
                                    int shaper, sluice_decision *d, int64_t *new_backlog) {
    int64_t b = backlog > 0 ? backlog : 0;
    if (!sluice__gcra_room(p, b, cost)) {
        sluice__gcra_denied(p, b, cost, d);
        return 0;
    }
    *new_backlog = b + cost * p->p;
    sluice__gcra_allowed(p, b, *new_backlog, shaper, d);
    return 1;
}
/* The GCRA decision on a word: a TAT relative to an epoch, in scaled
 * units, at ts = (now - epoch) * r. A word at or below ts is a full bucket
 * (INT64_MIN: fresh). Returns 1 when admitted (*b the backlog before, *nb
 * after, *nw the new word), 0 when denied (*b), or -1 when the backlog or
 * the new TAT does not fit 64 bits (decide on the full state instead).
 * The one word step of the limiter and of shm:'s FAST keys; the decision
 * is written after (sluice__gcra_allowed, _denied), once it is made. */
static inline int sluice__gcra_word_step(const sluice__params *p, int64_t w, int64_t ts, int64_t cost,
                                         int64_t *b, int64_t *nb, int64_t *nw) {
    if (w <= ts) *b = 0;
    else if (__builtin_sub_overflow(w, ts, b)) return -1;
    if (!sluice__gcra_room(p, *b, cost)) return 0;
    *nb = *b + cost * p->p;
    if (__builtin_add_overflow(ts, *nb, nw) || *nw <= INT64_MIN + 1) return -1; /* two words are kept apart */
    return 1;
}
/* A refund on a bucket's word (as sluice__gcra_word_step's): the TAT back
 * by cost, not below ts (a full bucket). */
static inline int64_t sluice__gcra_word_refund(const sluice__params *p, int64_t w, int64_t ts, int64_t cost) {
    int64_t nw;
    if (w <= ts) return w;
    if (__builtin_sub_overflow(w, cost * p->p, &nw) || nw < ts) return ts;
    return nw;
}
int sluice__gcra_decide(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost,
                        int shaper, sluice_decision *d, int commit);
void sluice__gcra_peek(const sluice__params *p, const sluice__state *s, int64_t now_ms,
                       sluice_decision *d);
int sluice__gcra_is_fresh(const sluice__params *p, const sluice__state *s, int64_t now_ms);
void sluice__gcra_init(const sluice__params *p, sluice__state *s);
/* What the two buckets share besides their decide: their layout, word,
 * quota and largest integer (token_bucket.c). */
#define SLUICE__GCRA_SHARED                                                                                   \
    .state_bytes = sizeof(sluice__i128), .peek = sluice__gcra_peek, .is_fresh = sluice__gcra_is_fresh,        \
    .init = sluice__gcra_init, .layout_bytes = sluice__gcra_layout_bytes, .layout_init = sluice__gcra_layout_init, \
    .layout_read = sluice__gcra_layout_read, .layout_write = sluice__gcra_layout_write,                         \
    .word_fits = sluice__gcra_word_fits, .word_fresh = (uint64_t)INT64_MIN, .word_unit = sluice__gcra_word_unit, \
    .word_state = sluice__gcra_word_state, .word_of = sluice__gcra_word_of, .word_is_fresh = sluice__gcra_word_is_fresh,                        \
    .quota = sluice__gcra_quota, .largest = sluice__gcra_largest, .refund = sluice__gcra_refund,              \
    .carry = sluice__gcra_carry
uint64_t sluice__gcra_layout_bytes(const sluice__params *p);
void sluice__gcra_layout_init(const sluice__params *p, uint8_t *at);
int sluice__gcra_layout_read(const sluice__params *p, uint8_t *at, sluice__state *s);
void sluice__gcra_layout_write(const sluice__params *p, const sluice__state *s, uint8_t *at);
int sluice__gcra_word_fits(const sluice__params *p);
int64_t sluice__gcra_word_unit(const sluice__params *p);
void sluice__gcra_word_state(int64_t unit, uint64_t w, int64_t epoch_ms, sluice__state *s);
int sluice__gcra_word_of(const sluice__params *p, const sluice__state *s, int64_t epoch_ms, uint64_t *w);
int sluice__gcra_word_is_fresh(int64_t unit, uint64_t w, int64_t epoch_ms, int64_t now_ms);
void sluice__gcra_quota(const sluice_config *c, uint64_t most, uint64_t *q, uint64_t *w_s);
sluice__i128 sluice__gcra_largest(const sluice__params *p);
void sluice__gcra_refund(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost);
int sluice__gcra_carry(const sluice__params *from, const sluice__state *s, const sluice__params *to, sluice__state *t,
                       int64_t now_ms);

/* ---- "algo/leaky_bucket.c" ---- */
extern const sluice__algo sluice__leaky_bucket;

/* ---- "algo/fixed_window.c", "algo/sliding_window.c" ---- */
extern const sluice__algo sluice__fixed_window;
extern const sluice__algo sluice__sliding_window;

/* ---- "algo/sliding_log.c" ---- */
extern const sluice__algo sluice__sliding_log;

/* ---- "algo/algo.c": the descriptors by id, and what the windows share ---- */
/* q = L per ceil(W / 1000) seconds. */
void sluice__window_quota(const sluice_config *c, uint64_t most, uint64_t *q, uint64_t *w_s);
/* A window's word_is_fresh: its word's state (a's word_state), fresh by
 * a's is_fresh, the unit being the window. */
int sluice__window_word_is_fresh(const sluice__algo *a, int64_t unit, uint64_t w, int64_t epoch_ms, int64_t now_ms);

/* The descriptor of algorithm a (NULL when a is none), and every one in
 * turn (a: NULL for the first; NULL after the last): algo/algo.c. */
const sluice__algo *sluice__algo_of(sluice_algorithm a);
const sluice__algo *sluice__algo_next(const sluice__algo *a);

#endif /* SLUICE_ALGO_H */
