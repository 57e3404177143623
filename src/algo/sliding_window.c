/* sliding_window.c: the sliding-window counter, exactly. With the counts of
 * the current fixed window (cur) and the previous one (prev), and e ms into
 * the current window of W, a request of cost n is admitted when
 *     prev*(W - e) + (cur + n)*W <= L*W
 * which is the seed's estimate prev*(W-e)/W + cur + n <= L, cross-multiplied
 * so that nothing is rounded. Every product is < 2^63: L*W <= 2.6e18 and
 * cur + n <= 2L. A backward reading is taken as the start of the newest window
 * counted in, where the previous window weighs most: never more capacity.
 *
 * Its word, for a limit below 2^16: index - k0 << 32 | prev << 16 | cur,
 * k0 being the epoch's window (the key's first): 2^32 windows past it (49
 * days of 1 ms windows). A word of 0 is fresh. */
#include "algo.h"

#define WORD_LIMIT 0xffff /* the most a count may be, in a word */

/* The state rolled to the effective time: window K, counts P (previous) and
 * Cn (current), e ms into the window. */
typedef struct {
    int64_t K, P, Cn, e;
} sw_view;

static sw_view sw_at(const sluice__params *p, const sluice__state *s, int64_t now_ms) {
    int64_t W = p->window_ms;
    int fresh = s->sw.prev == 0 && s->sw.cur == 0;
    int64_t start = s->sw.index * W;
    int64_t te = (fresh || now_ms > start) ? now_ms : start;
    sw_view v;
    v.K = sluice__floor_div(te, W);
    v.e = te - v.K * W;
    if (fresh || v.K > s->sw.index + 1) {
        v.P = v.Cn = 0;
    } else if (v.K == s->sw.index + 1) {
        v.P = s->sw.cur;
        v.Cn = 0;
    } else {
        v.P = s->sw.prev;
        v.Cn = s->sw.cur;
    }
    return v;
}

/* The least reading at which cost is admitted, for a view that denies it. */
static int64_t sw_admit_at(const sluice__params *p, const sw_view *v, int64_t cost) {
    int64_t W = p->window_ms, L = p->limit;
    if (v->Cn + cost <= L) { /* maybe later in this window, as prev fades */
        int64_t x = W - ((L - v->Cn - cost) * W) / v->P; /* P > 0, or it was admitted */
        if (x < W) return v->K * W + x;
    }
    /* in the next window, where the previous count is Cn (e2 = W: the one after) */
    int64_t e2 = v->Cn == 0 ? 0 : W - ((L - cost) * W) / v->Cn;
    if (e2 < 0) e2 = 0;
    return (v->K + 1) * W + e2;
}

static void sw_fill(const sluice__params *p, const sw_view *v, int64_t cur, int64_t now_ms,
                    sluice_decision *d) {
    int64_t W = p->window_ms;
    int64_t carried = sluice__ceil_div(v->P * (W - v->e), W);
    int64_t rem = p->limit - cur - carried;
    d->enforced = true;
    d->shadow_denied = false;
    d->local = false;
    d->part = 0;
    d->limit = p->limit;
    d->remaining = rem > 0 ? rem : 0;
    d->reset_ms = d->part_reset_ms = cur > 0 ? (v->K + 2) * W - now_ms : v->P > 0 ? (v->K + 1) * W - now_ms : 0;
    d->delay_ms = 0;
}

static int sw_decide(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost,
                     sluice_decision *d, int commit) {
    int64_t W = p->window_ms;
    sw_view v = sw_at(p, s, now_ms);
    d->allowed = v.P * (W - v.e) + (v.Cn + cost) * W <= p->limit * W;
    if (d->allowed) {
        if (commit) {
            s->sw.index = v.K;
            s->sw.prev = v.P;
            s->sw.cur = v.Cn + cost;
        }
        d->retry_after_ms = 0;
        sw_fill(p, &v, v.Cn + cost, now_ms, d);
    } else {
        d->retry_after_ms = sw_admit_at(p, &v, cost) - now_ms;
        sw_fill(p, &v, v.Cn, now_ms, d);
    }
    return 0;
}

static void sw_peek(const sluice__params *p, const sluice__state *s, int64_t now_ms,
                    sluice_decision *d) {
    sw_view v = sw_at(p, s, now_ms);
    d->allowed = false;
    d->retry_after_ms = 0;
    sw_fill(p, &v, v.Cn, now_ms, d);
}

static int sw_is_fresh(const sluice__params *p, const sluice__state *s, int64_t now_ms) {
    sw_view v = sw_at(p, s, now_ms);
    return v.P == 0 && v.Cn == 0;
}

static void sw_init(const sluice__params *p, sluice__state *s) {
    (void)p;
    s->sw.index = 0;
    s->sw.prev = 0;
    s->sw.cur = 0;
}

/* ---- the verbs ---- */

/* Rolled to the reading's window (its effective one: sw_at), the cost
 * given back from the current count first, then the previous one's. */
static void sw_refund(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost) {
    sw_view v = sw_at(p, s, now_ms);
    if (v.P == 0 && v.Cn == 0) return;
    int64_t from_cur = v.Cn < cost ? v.Cn : cost;
    int64_t from_prev = v.P < cost - from_cur ? v.P : cost - from_cur;
    s->sw.index = v.K;
    s->sw.prev = v.P - from_prev;
    s->sw.cur = v.Cn - from_cur;
}

static int sw_carry(const sluice__params *from, const sluice__state *s, const sluice__params *to, sluice__state *t,
                    int64_t now_ms) {
    (void)now_ms;
    if (from->window_ms != to->window_ms) return 0;
    t->sw.index = s->sw.index;
    t->sw.prev = s->sw.prev < to->limit ? s->sw.prev : to->limit;
    t->sw.cur = s->sw.cur < to->limit ? s->sw.cur : to->limit;
    return 1;
}

/* ---- layout: i64 index, prev, cur ---- */

static uint64_t sw_layout_bytes(const sluice__params *p) {
    (void)p;
    return 24;
}

static void sw_layout_init(const sluice__params *p, uint8_t *at) {
    (void)p;
    memset(at, 0, 24);
}

static int sw_layout_read(const sluice__params *p, uint8_t *at, sluice__state *s) {
    memcpy(&s->sw, at, 24);
    return s->sw.prev < 0 || s->sw.prev > p->limit || s->sw.cur < 0 || s->sw.cur > p->limit ? -1 : 0;
}

static void sw_layout_write(const sluice__params *p, const sluice__state *s, uint8_t *at) {
    (void)p;
    memcpy(at, &s->sw, 24);
}

/* ---- the word ---- */

static int sw_word_fits(const sluice__params *p) {
    return p->limit <= WORD_LIMIT;
}

static int64_t sw_word_unit(const sluice__params *p) {
    return p->window_ms;
}

static void sw_word_state(int64_t unit, uint64_t w, int64_t epoch_ms, sluice__state *s) {
    s->sw.index = sluice__floor_div(epoch_ms, unit) + (int64_t)(w >> 32);
    s->sw.prev = (int64_t)(w >> 16 & 0xffff);
    s->sw.cur = (int64_t)(w & 0xffff);
}

/* The word of state s: 1, or SLUICE__WORD_OUTGROWN when it lies too far
 * past the epoch's window. */
static int sw_word_of(const sluice__params *p, const sluice__state *s, int64_t epoch_ms, uint64_t *nw) {
    int64_t delta = s->sw.index - sluice__floor_div(epoch_ms, p->window_ms); /* >= 0: never before the epoch */
    if (delta < 0 || delta >= INT64_C(1) << 32) return SLUICE__WORD_OUTGROWN;
    *nw = (uint64_t)delta << 32 | (uint64_t)s->sw.prev << 16 | (uint64_t)s->sw.cur; /* counts <= limit < 2^16 */
    return 1;
}

static int sw_word_decide(const sluice__params *p, uint64_t w, int64_t epoch_ms, int64_t now_ms, int64_t cost,
                          sluice_decision *d, uint64_t *nw) {
    sluice__state s;
    sw_word_state(p->window_ms, w, epoch_ms, &s);
    if (s.sw.prev > p->limit || s.sw.cur > p->limit) return -1;
    sw_decide(p, &s, now_ms, cost, d, 1);
    return d->allowed ? sw_word_of(p, &s, epoch_ms, nw) : 0;
}

static int sw_word_refund(const sluice__params *p, uint64_t w, int64_t epoch_ms, int64_t now_ms, int64_t cost,
                          uint64_t *nw) {
    sluice__state s;
    sw_word_state(p->window_ms, w, epoch_ms, &s);
    sluice__state before = s;
    sw_refund(p, &s, now_ms, cost);
    if (s.sw.prev == before.sw.prev && s.sw.cur == before.sw.cur && s.sw.index == before.sw.index) return 0;
    return sw_word_of(p, &s, epoch_ms, nw);
}

static int sw_word_is_fresh(int64_t unit, uint64_t w, int64_t epoch_ms, int64_t now_ms) {
    return sluice__window_word_is_fresh(&sluice__sliding_window, unit, w, epoch_ms, now_ms);
}

/* L * W: the admission test cross-multiplies, prev*(W-e) + (cur+n)*W <= L*W,
 * so no term passes 3 * L * W */
static sluice__i128 sw_largest(const sluice__params *p) {
    return (sluice__i128)p->limit * p->window_ms;
}

const sluice__algo sluice__sliding_window = {
    .id = SLUICE_SLIDING_WINDOW,
    .name = "sliding-window",
    .state_bytes = sizeof(((sluice__state *)0)->sw),
    .decide = sw_decide,
    .peek = sw_peek,
    .is_fresh = sw_is_fresh,
    .init = sw_init,
    .refund = sw_refund,
    .carry = sw_carry,
    .layout_bytes = sw_layout_bytes,
    .layout_init = sw_layout_init,
    .layout_read = sw_layout_read,
    .layout_write = sw_layout_write,
    .word_fits = sw_word_fits,
    .word_fresh = 0,
    .word_decide = sw_word_decide,
    .word_unit = sw_word_unit,
    .word_state = sw_word_state,
    .word_of = sw_word_of,
    .word_is_fresh = sw_word_is_fresh,
    .word_refund = sw_word_refund,
    .quota = sluice__window_quota,
    .largest = sw_largest,
};
