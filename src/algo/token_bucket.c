/* token_bucket.c: the token bucket, as GCRA (the generic cell rate
 * algorithm): one number of state, the theoretical arrival time TAT.
 *
 * Units are exact: with r/p = R/P in lowest terms, one ms is r units and one
 * token is p units, so refilling R tokens per P ms is exact integer time and
 * the bucket's content at reading t is (tau - max(0, TAT - t*r)) / p tokens,
 * tau = C*p. The leaky bucket (leaky_bucket.c) shares this core. */
#include "internal.h"

static sluice__i128 ceil_div128(sluice__i128 a, int64_t b) {
    return a / b + (a % b != 0);
}

/* A backlog beyond 64 bits (a reading far behind the state): denied. */
static void gcra_far(const sluice__params *p, sluice__i128 b, int64_t cost, sluice_decision *d) {
    d->part = 0;
    d->enforced = true;
    d->limit = p->limit;
    d->allowed = false;
    d->remaining = 0;
    d->retry_after_ms = (int64_t)ceil_div128(b - p->tau + (sluice__i128)cost * p->p, p->r);
    d->reset_ms = d->part_reset_ms = (int64_t)ceil_div128(b, p->r);
    d->delay_ms = 0;
}

int sluice__gcra_decide(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost,
                        int shaper, sluice_decision *d, int commit) {
    sluice__i128 ts = (sluice__i128)now_ms * p->r;
    sluice__i128 b = s->tat - ts;
    int64_t nb;
    if (b > INT64_MAX) {
        gcra_far(p, b, cost, d);
        return 0;
    }
    if (sluice__gcra_core(p, b > 0 ? (int64_t)b : 0, cost, shaper, d, &nb) && commit)
        s->tat = ts + nb;
    return 0;
}

void sluice__gcra_peek(const sluice__params *p, const sluice__state *s, int64_t now_ms,
                       sluice_decision *d) {
    sluice__i128 b = s->tat - (sluice__i128)now_ms * p->r;
    if (b < 0) b = 0;
    d->allowed = false;
    d->enforced = true;
    d->part = 0;
    d->limit = p->limit;
    d->remaining = b <= p->tau ? (int64_t)((p->tau - b) / p->p) : 0;
    d->retry_after_ms = 0;
    d->reset_ms = d->part_reset_ms = (int64_t)ceil_div128(b, p->r);
    d->delay_ms = 0;
}

int sluice__gcra_is_fresh(const sluice__params *p, const sluice__state *s, int64_t now_ms) {
    return s->tat <= (sluice__i128)now_ms * p->r;
}

void sluice__gcra_init(const sluice__params *p, sluice__state *s) {
    (void)p;
    s->tat = SLUICE__TAT_FRESH;
}

static int tb_decide(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost,
                     sluice_decision *d, int commit) {
    return sluice__gcra_decide(p, s, now_ms, cost, 0, d, commit);
}

const sluice__algo sluice__token_bucket = {
    "token-bucket", tb_decide, sluice__gcra_peek, sluice__gcra_is_fresh, sluice__gcra_init,
};
