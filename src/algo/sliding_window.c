/* sliding_window.c: the sliding-window counter, exactly. With the counts of
 * the current fixed window (cur) and the previous one (prev), and e ms into
 * the current window of W, a request of cost n is admitted when
 *     prev*(W - e) + (cur + n)*W <= L*W
 * which is the seed's estimate prev*(W-e)/W + cur + n <= L, cross-multiplied
 * so that nothing is rounded. Every product is < 2^63: L*W <= 2.6e18 and
 * cur + n <= 2L. A backward reading is taken as the start of the newest window
 * counted in, where the previous window weighs most: never more capacity. */
#include "internal.h"

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

const sluice__algo sluice__sliding_window = {
    "sliding-window", sw_decide, sw_peek, sw_is_fresh, sw_init,
};
