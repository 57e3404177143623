/* fixed_window.c: the fixed-window counter. Windows are [k*W, (k+1)*W) on the
 * clock's time line; at most L cost is admitted in each. State: the index of
 * the window counted in and its count; a reading earlier than that window
 * stays in it (a backward step never reopens an old, emptier window).
 *
 * Its word: index - k0 << 30 | count, k0 being the epoch's window (the key's
 * first): 2^34 windows past it (199 days of 1 ms windows), counts in 30 bits
 * (SLUICE_LIMIT_MAX < 2^30). A word of 0 is fresh. */
#include "algo.h"

#define COUNT_BITS 30
#define INDEX_SPAN (INT64_C(1) << (64 - COUNT_BITS)) /* windows past k0 a word holds */
_Static_assert(SLUICE_LIMIT_MAX < (1 << COUNT_BITS), "a count fits its bits");

/* The effective window K and its count at now_ms. */
static void fw_at(const sluice__params *p, const sluice__state *s, int64_t now_ms, int64_t *K,
                  int64_t *count) {
    int64_t k = sluice__floor_div(now_ms, p->window_ms);
    if (s->fw.cur > 0 && s->fw.index >= k) {
        *K = s->fw.index;
        *count = s->fw.cur;
    } else {
        *K = k;
        *count = 0;
    }
}

static void fw_fill(const sluice__params *p, int64_t K, int64_t count, int64_t now_ms,
                    sluice_decision *d) {
    int64_t to_end = (K + 1) * p->window_ms - now_ms;
    d->enforced = true;
    d->shadow_denied = false;
    d->local = false;
    d->part = 0;
    d->limit = p->limit;
    d->remaining = p->limit - count;
    d->reset_ms = d->part_reset_ms = count > 0 ? to_end : 0;
    d->delay_ms = 0;
}

static int fw_decide(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost,
                     sluice_decision *d, int commit) {
    int64_t K, count;
    fw_at(p, s, now_ms, &K, &count);
    d->allowed = count + cost <= p->limit;
    if (d->allowed) {
        count += cost;
        if (commit) {
            s->fw.index = K;
            s->fw.cur = count;
        }
    }
    fw_fill(p, K, count, now_ms, d);
    d->retry_after_ms = d->allowed ? 0 : (K + 1) * p->window_ms - now_ms;
    return 0;
}

static void fw_peek(const sluice__params *p, const sluice__state *s, int64_t now_ms,
                    sluice_decision *d) {
    int64_t K, count;
    fw_at(p, s, now_ms, &K, &count);
    d->allowed = false;
    d->retry_after_ms = 0;
    fw_fill(p, K, count, now_ms, d);
}

static int fw_is_fresh(const sluice__params *p, const sluice__state *s, int64_t now_ms) {
    return s->fw.cur == 0 || s->fw.index < sluice__floor_div(now_ms, p->window_ms);
}

static void fw_init(const sluice__params *p, sluice__state *s) {
    (void)p;
    s->fw.index = 0;
    s->fw.cur = 0;
}

/* ---- the verbs ---- */

/* The count of the reading's window (the effective one: fw_at) down by
 * cost; a window already past counts nothing. */
static void fw_refund(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost) {
    int64_t K, count;
    fw_at(p, s, now_ms, &K, &count);
    if (count == 0) return;
    s->fw.cur = count > cost ? count - cost : 0;
}

static int fw_carry(const sluice__params *from, const sluice__state *s, const sluice__params *to, sluice__state *t,
                    int64_t now_ms) {
    (void)now_ms;
    if (from->window_ms != to->window_ms) return 0;
    t->fw.index = s->fw.index;
    t->fw.cur = s->fw.cur < to->limit ? s->fw.cur : to->limit;
    return 1;
}

/* ---- layout: i64 index, count ---- */

static uint64_t fw_layout_bytes(const sluice__params *p) {
    (void)p;
    return 16;
}

static void fw_layout_init(const sluice__params *p, uint8_t *at) {
    (void)p;
    memset(at, 0, 16);
}

static int fw_layout_read(const sluice__params *p, uint8_t *at, sluice__state *s) {
    memcpy(&s->fw, at, 16);
    return s->fw.cur < 0 || s->fw.cur > p->limit ? -1 : 0;
}

static void fw_layout_write(const sluice__params *p, const sluice__state *s, uint8_t *at) {
    (void)p;
    memcpy(at, &s->fw, 16);
}

/* ---- the word ---- */

static int fw_word_fits(const sluice__params *p) {
    (void)p;
    return 1; /* a state past INDEX_SPAN windows moves to the full form */
}

static int64_t fw_word_unit(const sluice__params *p) {
    return p->window_ms;
}

static void fw_word_state(int64_t unit, uint64_t w, int64_t epoch_ms, sluice__state *s) {
    s->fw.index = sluice__floor_div(epoch_ms, unit) + (int64_t)(w >> COUNT_BITS);
    s->fw.cur = (int64_t)(w & ((UINT64_C(1) << COUNT_BITS) - 1));
}

/* The word of state s: 1, or SLUICE__WORD_OUTGROWN when it lies too far
 * past the epoch's window. */
static int fw_word_of(const sluice__params *p, const sluice__state *s, int64_t epoch_ms, uint64_t *nw) {
    int64_t delta = s->fw.index - sluice__floor_div(epoch_ms, p->window_ms); /* >= 0: never before the epoch */
    if (delta < 0 || delta >= INDEX_SPAN) return SLUICE__WORD_OUTGROWN;
    *nw = (uint64_t)delta << COUNT_BITS | (uint64_t)s->fw.cur;
    return 1;
}

static int fw_word_decide(const sluice__params *p, uint64_t w, int64_t epoch_ms, int64_t now_ms, int64_t cost,
                          sluice_decision *d, uint64_t *nw) {
    sluice__state s;
    fw_word_state(p->window_ms, w, epoch_ms, &s);
    if (s.fw.cur > p->limit) return -1;
    fw_decide(p, &s, now_ms, cost, d, 1);
    return d->allowed ? fw_word_of(p, &s, epoch_ms, nw) : 0;
}

static int fw_word_refund(const sluice__params *p, uint64_t w, int64_t epoch_ms, int64_t now_ms, int64_t cost,
                          uint64_t *nw) {
    sluice__state s;
    fw_word_state(p->window_ms, w, epoch_ms, &s);
    int64_t before = s.fw.cur;
    fw_refund(p, &s, now_ms, cost);
    return s.fw.cur == before ? 0 : fw_word_of(p, &s, epoch_ms, nw);
}

static int fw_word_is_fresh(int64_t unit, uint64_t w, int64_t epoch_ms, int64_t now_ms) {
    return sluice__window_word_is_fresh(&sluice__fixed_window, unit, w, epoch_ms, now_ms);
}

const sluice__algo sluice__fixed_window = {
    .id = SLUICE_FIXED_WINDOW,
    .name = "fixed-window",
    .state_bytes = sizeof(((sluice__state *)0)->fw),
    .decide = fw_decide,
    .peek = fw_peek,
    .is_fresh = fw_is_fresh,
    .init = fw_init,
    .refund = fw_refund,
    .carry = fw_carry,
    .layout_bytes = fw_layout_bytes,
    .layout_init = fw_layout_init,
    .layout_read = fw_layout_read,
    .layout_write = fw_layout_write,
    .word_fits = fw_word_fits,
    .word_fresh = 0,
    .word_decide = fw_word_decide,
    .word_unit = fw_word_unit,
    .word_state = fw_word_state,
    .word_of = fw_word_of,
    .word_is_fresh = fw_word_is_fresh,
    .word_refund = fw_word_refund,
    .quota = sluice__window_quota,
};
