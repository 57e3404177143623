/* fixed_window.c: the fixed-window counter. Windows are [k*W, (k+1)*W) on the
 * clock's time line; at most L cost is admitted in each. State: the index of
 * the window counted in and its count; a reading earlier than that window
 * stays in it (a backward step never reopens an old, emptier window). */
#include "internal.h"

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

const sluice__algo sluice__fixed_window = {
    "fixed-window", fw_decide, fw_peek, fw_is_fresh, fw_init,
};
