/* token_bucket.c: the token bucket, as GCRA (the generic cell rate
 * algorithm): one number of state, the theoretical arrival time TAT.
 *
 * Units are exact: with r/p = R/P in lowest terms, one ms is r units and one
 * token is p units, so refilling R tokens per P ms is exact integer time and
 * the bucket's content at reading t is (tau - max(0, TAT - t*r)) / p tokens,
 * tau = C*p. The leaky bucket (leaky_bucket.c) shares this core, and all
 * that follows but its decide: layout, word, quota (SLUICE__GCRA_SHARED). */
#include "algo.h"

static sluice__i128 ceil_div128(sluice__i128 a, int64_t b) {
    return a / b + (a % b != 0);
}

/* A backlog beyond 64 bits (a reading far behind the state): denied. */
static void gcra_far(const sluice__params *p, sluice__i128 b, int64_t cost, sluice_decision *d) {
    d->part = 0;
    d->enforced = true;
    d->shadow_denied = false;
    d->local = false;
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
    d->shadow_denied = false;
    d->local = false;
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

/* ---- layout: the TAT, an i128 ---- */

uint64_t sluice__gcra_layout_bytes(const sluice__params *p) {
    (void)p;
    return sizeof(sluice__i128);
}

void sluice__gcra_layout_init(const sluice__params *p, uint8_t *at) {
    sluice__i128 fresh = SLUICE__TAT_FRESH;
    (void)p;
    memcpy(at, &fresh, sizeof fresh);
}

int sluice__gcra_layout_read(const sluice__params *p, uint8_t *at, sluice__state *s) {
    (void)p;
    memcpy(&s->tat, at, sizeof s->tat);
    return 0; /* every TAT is a state (a lagging reader may see any backlog) */
}

void sluice__gcra_layout_write(const sluice__params *p, const sluice__state *s, uint8_t *at) {
    (void)p;
    memcpy(at, &s->tat, sizeof s->tat);
}

/* ---- the word: the TAT - epoch * r, an i64 (sluice__gcra_word_step) ---- */

int sluice__gcra_word_fits(const sluice__params *p) {
    (void)p;
    return 1; /* a TAT that outgrows it moves the key to the full form */
}

int64_t sluice__gcra_word_unit(const sluice__params *p) {
    return p->r;
}

void sluice__gcra_word_state(int64_t unit, uint64_t w, int64_t epoch_ms, sluice__state *s) {
    s->tat = (sluice__i128)(int64_t)w + (sluice__i128)epoch_ms * unit;
}

/* A TAT at or below the epoch's ts is a full bucket at every reading from
 * the epoch on: INT64_MIN (the fresh word). */
int sluice__gcra_word_of(const sluice__params *p, const sluice__state *s, int64_t epoch_ms, uint64_t *w) {
    sluice__i128 x = s->tat - (sluice__i128)epoch_ms * p->r;
    if (x > INT64_MAX) return SLUICE__WORD_OUTGROWN;
    *w = x <= 0 ? (uint64_t)INT64_MIN : (uint64_t)(int64_t)x;
    return 1;
}

int sluice__gcra_word_is_fresh(int64_t unit, uint64_t w, int64_t epoch_ms, int64_t now_ms) {
    if (unit < 1 || unit > SLUICE_RATE_MAX) return -1;
    return (sluice__i128)(int64_t)w <= (sluice__i128)(now_ms - epoch_ms) * unit;
}

/* ---- what others ask ---- */

/* The window is the time a drained bucket takes to refill completely,
 * C*P/R ms in seconds rounded up (at least 1), and the quota what refills
 * in it, R*w/P (at least C), so that q per w is the rate even when w was
 * rounded up (a bucket of 1 at 1000/s: q=1000;w=1). */
void sluice__gcra_quota(const sluice_config *c, uint64_t most, uint64_t *q, uint64_t *w_s) {
    /* ceil(C*P / (1000*R)): with C <= 10^9 and P <= 2.6*10^9 it fits 63 bits */
    uint64_t num = (uint64_t)c->limit * (uint64_t)c->period_ms;
    uint64_t den = (uint64_t)c->rate * 1000u;
    *w_s = num / den + (num % den != 0);
    if (*w_s < 1) *w_s = 1;
    if (*w_s > most) *w_s = most;
    /* what refills in w: floor(R * w * 1000 / P), >= C unless w was cut to
     * most (then the rate over the window written) */
    unsigned __int128 refill = (unsigned __int128)c->rate * *w_s * 1000u / (uint64_t)c->period_ms;
    *q = (uint64_t)c->limit;
    if (refill > *q || *w_s == most) *q = refill > most ? most : (uint64_t)refill;
}

/* tau: the arithmetic forms a backlog and a request's cost beside it, so
 * no more than 2 * tau */
sluice__i128 sluice__gcra_largest(const sluice__params *p) {
    return (sluice__i128)p->tau;
}

/* ---- the verbs ---- */

void sluice__gcra_refund(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost) {
    sluice__i128 ts = (sluice__i128)now_ms * p->r, back = s->tat - (sluice__i128)cost * p->p;
    if (s->tat > ts) s->tat = back > ts ? back : ts;
}

/* The same period: the backlog carries over, in tokens (from's units to
 * to's, rounded up), at most to's capacity. */
int sluice__gcra_carry(const sluice__params *from, const sluice__state *s, const sluice__params *to, sluice__state *t,
                       int64_t now_ms) {
    if (from->cfg.period_ms != to->cfg.period_ms) return 0;
    sluice__i128 b = s->tat - (sluice__i128)now_ms * from->r;
    if (b <= 0) return 1; /* full: t is fresh */
    /* b may be far beyond the capacity (a reading long before the TAT):
     * the new capacity, unless b * p' is within tau' * p (< 2^94) */
    sluice__i128 nb = b > (sluice__i128)to->tau * from->p / to->p ? to->tau : (b * to->p + from->p - 1) / from->p;
    if (nb > to->tau) nb = to->tau;
    t->tat = (sluice__i128)now_ms * to->r + nb;
    return 1;
}

static int tb_decide(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost,
                     sluice_decision *d, int commit) {
    return sluice__gcra_decide(p, s, now_ms, cost, 0, d, commit);
}

const sluice__algo sluice__token_bucket = {
    .id = SLUICE_TOKEN_BUCKET,
    .name = "token-bucket",
    .flags = SLUICE__ALGO_GCRA,
    .decide = tb_decide,
    SLUICE__GCRA_SHARED,
};
