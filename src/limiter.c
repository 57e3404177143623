/* limiter.c: one limiter, many threads. A limiter applies its policy's
 * algorithms (src/algo/) to state it keeps atomic, in one of two ways:
 *
 *  - word: a one-part token or leaky bucket keeps its whole state, the GCRA
 *    theoretical arrival time, in one 64-bit word relative to the limiter's
 *    creation (epoch), and updates it with compare-and-swap: lock-free, and a
 *    denial writes nothing. When a reading lies so far from the epoch that the
 *    word would overflow, the state moves for good to the 128-bit form under
 *    the lock (the word then holds WORD_MOVED).
 *  - locked: every other policy keeps sluice__state per part under a small
 *    lock held for one decision's arithmetic.
 *
 * Also here: the blocking wait, which sleeps on the limiter's clock. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define WORD_MOVED INT64_MIN
#define WORD_FRESH (INT64_MIN + 1) /* a fresh, full bucket: TAT = -infinity */

enum { KIND_WORD, KIND_LOCKED };

struct sluice_limiter {
    /* hot: read by every decision; the word is written by admissions */
    _Alignas(64) _Atomic int64_t word; /* KIND_WORD: TAT - epoch*r, scaled */
    int kind;
    int shaper;      /* KIND_WORD: a leaky bucket (fills delay_ms) */
    int64_t epoch_ms;
    int64_t max_cost; /* policy.max_cost, on the hot line */
    atomic_ulong cas_retries; /* KIND_WORD: failed CASes (contention)   */
    sluice__params fast; /* KIND_WORD: the one part's parameters */
    const sluice_clock *clock;
    /* the locked state */
    _Alignas(64) sluice__lock lock;
    sluice__state st[SLUICE_POLICY_MAX_PARTS];
    sluice_policy policy;
};

/* ---- the locked path ---- */

/* Decides with the lock held. */
static int decide_locked(sluice_limiter *l, int64_t cost, int64_t now_ms, sluice_decision *d) {
    return sluice__policy_decide_grow(&l->policy, l->st, now_ms, cost, d);
}

static __attribute__((noinline)) int acquire_locked(sluice_limiter *l, int64_t cost, int64_t now_ms,
                                                    sluice_decision *d) {
    sluice__lock_take(&l->lock);
    int rc = decide_locked(l, cost, now_ms, d);
    sluice__lock_give(&l->lock);
    return rc;
}

/* A word limiter's TAT as a full state (the word itself: see above). */
static void word_as_state(const sluice_limiter *l, int64_t w, sluice__state *st) {
    st->tat = w == WORD_FRESH ? SLUICE__TAT_FRESH : (sluice__i128)w + (sluice__i128)l->epoch_ms * l->fast.r;
}

/* Moves a word limiter's state to the locked 128-bit form (once), with the
 * lock held. */
static void move_word(sluice_limiter *l) {
    int64_t w = atomic_load_explicit(&l->word, memory_order_acquire);
    while (w != WORD_MOVED) {
        word_as_state(l, w, &l->st[0]);
        if (atomic_compare_exchange_strong_explicit(&l->word, &w, WORD_MOVED, memory_order_acq_rel,
                                                    memory_order_acquire))
            break;
    }
}

/* Moves a word limiter's state (once), then decides in the locked form. */
static __attribute__((noinline, cold)) int move_and_acquire(sluice_limiter *l, int64_t cost,
                                                            int64_t now_ms, sluice_decision *d) {
    sluice__lock_take(&l->lock);
    move_word(l);
    int rc = decide_locked(l, cost, now_ms, d);
    sluice__lock_give(&l->lock);
    return rc;
}

/* ---- the word path: O(1), one CAS on an admission, none on a denial ----
 * The new word is computed in registers and swapped in before the decision
 * is written: its divisions would otherwise hold the CAS back. */

static inline int acquire_word(sluice_limiter *l, int64_t cost, int64_t now_ms, sluice_decision *d) {
    const sluice__params *p = &l->fast;
    int64_t ts, b, nb, nw;
    /* both within +-2^61: the difference fits */
    if (__builtin_mul_overflow(now_ms - l->epoch_ms, p->r, &ts))
        return move_and_acquire(l, cost, now_ms, d);
    int64_t w = atomic_load_explicit(&l->word, memory_order_acquire);
    for (;;) {
        if (w == WORD_MOVED) return acquire_locked(l, cost, now_ms, d);
        int step = sluice__gcra_word_step(p, w == WORD_FRESH ? INT64_MIN : w, ts, cost, &b, &nb, &nw);
        if (step < 0) return move_and_acquire(l, cost, now_ms, d);
        if (step == 0) {
            sluice__gcra_denied(p, b, cost, d);
            return 0;
        }
        if (atomic_compare_exchange_weak_explicit(&l->word, &w, nw, memory_order_acq_rel,
                                                  memory_order_acquire)) {
            sluice__gcra_allowed(p, b, nb, l->shaper, d);
            return 0;
        }
        atomic_fetch_add_explicit(&l->cas_retries, 1, memory_order_relaxed);
    }
}

/* ---- public ---- */

int sluice_limiter_new_policy(const sluice_policy *p, const sluice_clock *clock,
                              sluice_limiter **out) {
    if (!p || !out || p->n_parts < 1 || p->n_parts > SLUICE_POLICY_MAX_PARTS) return SLUICE_EINVAL;
    if (!clock) clock = sluice_clock_monotonic();
    int64_t now_ms = sluice_clock_now_ms(clock);
    if (!sluice__time_ok(now_ms)) return SLUICE_EINVAL;
    size_t size = (sizeof(sluice_limiter) + 63) / 64 * 64;
    sluice_limiter *l = aligned_alloc(64, size);
    if (!l) return SLUICE_ENOMEM;
    memset(l, 0, size);
    l->policy = *p;
    l->clock = clock;
    l->epoch_ms = now_ms;
    l->max_cost = p->max_cost;
    for (size_t i = 0; i < p->n_parts; i++) p->algo[i]->init(&p->params[i], &l->st[i]);
    const sluice__algo *a = p->algo[0];
    if (p->n_parts == 1 && !p->n_shadow && (a->flags & SLUICE__ALGO_GCRA)) {
        l->kind = KIND_WORD;
        l->shaper = (a->flags & SLUICE__ALGO_DELAYS) != 0;
        l->fast = p->params[0];
    } else {
        l->kind = KIND_LOCKED;
    }
    atomic_init(&l->word, WORD_FRESH);
    atomic_init(&l->lock.held, 0);
    atomic_init(&l->lock.contended, 0);
    atomic_init(&l->cas_retries, 0);
    *out = l;
    return SLUICE_OK;
}

int sluice_limiter_new(const sluice_config *c, const sluice_clock *clock, sluice_limiter **out) {
    sluice_policy *p;
    if (!c || !out) return SLUICE_EINVAL;
    int rc = sluice_policy_new("default", c, 1, &p);
    if (rc) return rc;
    rc = sluice_limiter_new_policy(p, clock, out);
    sluice_policy_free(p);
    return rc;
}

int sluice_acquire_at(sluice_limiter *l, int64_t cost, int64_t now_ms, sluice_decision *out) {
    if (!l || !out || !sluice__time_ok(now_ms)) return SLUICE_EINVAL;
    if (cost < 1 || cost > l->max_cost) return SLUICE_ECOST;
    if (l->kind == KIND_WORD) return acquire_word(l, cost, now_ms, out);
    return acquire_locked(l, cost, now_ms, out);
}

int sluice_acquire(sluice_limiter *l, int64_t cost, sluice_decision *out) {
    if (!l) return SLUICE_EINVAL;
    return sluice_acquire_at(l, cost, sluice_clock_now_ms(l->clock), out);
}

typedef struct {
    sluice_limiter *l;
    int64_t cost;
} wait_ctx;

static int wait_attempt(void *ctx, int64_t now_ms, sluice_decision *d) {
    wait_ctx *w = ctx;
    return sluice_acquire_at(w->l, w->cost, now_ms, d);
}

int sluice_acquire_wait(sluice_limiter *l, int64_t cost, int64_t timeout_ms, sluice_decision *out) {
    if (!l || !out) return SLUICE_EINVAL;
    wait_ctx w = {l, cost};
    return sluice__wait(l->clock, timeout_ms, wait_attempt, &w, out);
}

/* ---- the verbs beside acquire ---- */

/* The checks of acquire: 0, or the error. */
static int verb_ok(const sluice_limiter *l, int64_t cost, int64_t now_ms) {
    if (!l || !sluice__time_ok(now_ms)) return SLUICE_EINVAL;
    return cost < 1 || cost > l->max_cost ? SLUICE_ECOST : 0;
}

int sluice_peek_at(sluice_limiter *l, int64_t cost, int64_t now_ms, sluice_decision *out) {
    int rc = verb_ok(l, cost, now_ms);
    if (rc || !out) return rc ? rc : SLUICE_EINVAL;
    int64_t w = l->kind == KIND_WORD ? atomic_load_explicit(&l->word, memory_order_acquire) : WORD_MOVED, ts, b, nb, nw;
    if (w != WORD_MOVED && !__builtin_mul_overflow(now_ms - l->epoch_ms, l->fast.r, &ts)) {
        /* one reading of the word, decided as acquire_word decides it */
        int step = sluice__gcra_word_step(&l->fast, w == WORD_FRESH ? INT64_MIN : w, ts, cost, &b, &nb, &nw);
        if (step > 0) sluice__gcra_allowed(&l->fast, b, nb, l->shaper, out);
        else if (step == 0) sluice__gcra_denied(&l->fast, b, cost, out);
        if (step >= 0) return 0;
    }
    if (w != WORD_MOVED) { /* beyond 64 bits: the full state the word stands for */
        sluice__state st;
        word_as_state(l, w, &st);
        sluice__policy_peek(&l->policy, &st, now_ms, cost, out);
        return 0;
    }
    sluice__lock_take(&l->lock);
    sluice__policy_peek(&l->policy, l->st, now_ms, cost, out);
    sluice__lock_give(&l->lock);
    return 0;
}

int sluice_peek(sluice_limiter *l, int64_t cost, sluice_decision *out) {
    if (!l) return SLUICE_EINVAL;
    return sluice_peek_at(l, cost, sluice_clock_now_ms(l->clock), out);
}

/* The word path's refund: the TAT back by cost with one CAS; 1, or 0 when
 * the word cannot tell (moved, or a reading too far from the epoch). */
static int refund_word(sluice_limiter *l, int64_t cost, int64_t now_ms) {
    int64_t ts, w = atomic_load_explicit(&l->word, memory_order_acquire);
    if (__builtin_mul_overflow(now_ms - l->epoch_ms, l->fast.r, &ts)) return 0;
    for (;;) {
        if (w == WORD_MOVED) return 0;
        if (w == WORD_FRESH) return 1; /* full: nothing counts */
        int64_t nw = sluice__gcra_word_refund(&l->fast, w, ts, cost);
        if (nw == w) return 1;
        if (nw <= WORD_FRESH) nw = WORD_FRESH; /* a TAT that far back is a full bucket */
        if (atomic_compare_exchange_weak_explicit(&l->word, &w, nw, memory_order_acq_rel, memory_order_acquire))
            return 1;
        atomic_fetch_add_explicit(&l->cas_retries, 1, memory_order_relaxed);
    }
}

int sluice_refund_at(sluice_limiter *l, int64_t cost, int64_t now_ms, sluice_decision *out) {
    int rc = verb_ok(l, cost, now_ms);
    if (rc) return rc;
    if (l->kind == KIND_WORD && refund_word(l, cost, now_ms)) return out ? sluice_peek_at(l, 1, now_ms, out) : 0;
    sluice__lock_take(&l->lock);
    if (l->kind == KIND_WORD) move_word(l); /* the word cannot tell: the locked form, for good */
    sluice__policy_refund(&l->policy, l->st, now_ms, cost);
    if (out) sluice__policy_peek(&l->policy, l->st, now_ms, 1, out);
    sluice__lock_give(&l->lock);
    return 0;
}

int sluice_refund(sluice_limiter *l, int64_t cost, sluice_decision *out) {
    if (!l) return SLUICE_EINVAL;
    return sluice_refund_at(l, cost, sluice_clock_now_ms(l->clock), out);
}

int sluice_reset(sluice_limiter *l, sluice_decision *out) {
    if (!l) return SLUICE_EINVAL;
    int64_t now_ms = sluice_clock_now_ms(l->clock);
    if (!sluice__time_ok(now_ms)) return SLUICE_EINVAL;
    int64_t w = atomic_load_explicit(&l->word, memory_order_acquire);
    while (l->kind == KIND_WORD && w != WORD_MOVED &&
           !atomic_compare_exchange_weak_explicit(&l->word, &w, WORD_FRESH, memory_order_acq_rel, memory_order_acquire)) {
    }
    if (l->kind != KIND_WORD || w == WORD_MOVED) {
        sluice__lock_take(&l->lock);
        for (size_t i = 0; i < l->policy.n_parts; i++) {
            if (l->policy.algo[i]->release) l->policy.algo[i]->release(&l->st[i]);
            l->policy.algo[i]->init(&l->policy.params[i], &l->st[i]);
        }
        sluice__lock_give(&l->lock);
    }
    return out ? sluice_peek_at(l, 1, now_ms, out) : 0;
}

unsigned long sluice__limiter_contention(const sluice_limiter *l) {
    return atomic_load_explicit(&l->cas_retries, memory_order_relaxed) +
           atomic_load_explicit(&l->lock.contended, memory_order_relaxed);
}

void sluice__limiter_peek_part(sluice_limiter *l, size_t i, int64_t now_ms, sluice_decision *d) {
    sluice__lock_take(&l->lock);
    if (l->kind == KIND_WORD) {
        int64_t w = atomic_load(&l->word);
        if (w != WORD_MOVED)
            l->st[0].tat = w == WORD_FRESH ? SLUICE__TAT_FRESH
                                           : (sluice__i128)w + (sluice__i128)l->epoch_ms * l->fast.r;
    }
    l->policy.algo[i]->peek(&l->policy.params[i], &l->st[i], now_ms, d);
    sluice__lock_give(&l->lock);
}

const sluice_policy *sluice_limiter_policy(const sluice_limiter *l) {
    return l ? &l->policy : NULL;
}

const sluice_clock *sluice_limiter_clock(const sluice_limiter *l) {
    return l ? l->clock : NULL;
}

void sluice_limiter_free(sluice_limiter *l) {
    if (!l) return;
    for (size_t i = 0; i < l->policy.n_parts; i++)
        if (l->policy.algo[i]->release) l->policy.algo[i]->release(&l->st[i]);
    free(l);
}
