/* composite.c: a policy's parts decided together, all or nothing ("10/s and
 * 1000/h"). Every part is asked first without changing anything; only when
 * all admit are they committed. The caller holds whatever makes the states
 * atomic (a lock). */
#include "policy.h"

static void combine(const sluice_policy *p, const sluice_decision *parts, int allowed,
                    sluice_decision *d) {
    *d = parts[0]; /* part 0; a later part takes over only with less remaining */
    d->allowed = allowed;
    for (size_t i = 1; i < p->n_parts; i++) {
        const sluice_decision *x = &parts[i];
        if (x->remaining < d->remaining) {
            d->remaining = x->remaining;
            d->limit = x->limit;
            d->part = (int32_t)i;
            d->part_reset_ms = x->reset_ms;
        }
        if (x->retry_after_ms > d->retry_after_ms) d->retry_after_ms = x->retry_after_ms;
        if (x->reset_ms > d->reset_ms) d->reset_ms = x->reset_ms;
        if (x->delay_ms > d->delay_ms) d->delay_ms = x->delay_ms;
    }
    d->enforced = true;
}

int sluice__policy_decide_grow(const sluice_policy *p, sluice__state *states, int64_t now_ms,
                               int64_t cost, sluice_decision *d) {
    for (;;) {
        size_t g = 0;
        int rc = sluice__policy_decide(p, states, now_ms, cost, d, &g);
        if (rc != SLUICE__EGROW) return rc;
        rc = p->algo[g]->reserve(&p->params[g], &states[g]); /* EGROW: only from a state that grows */
        if (rc) return rc;
    }
}

int sluice__policy_decide(const sluice_policy *p, sluice__state *states, int64_t now_ms,
                          int64_t cost, sluice_decision *d, size_t *grow_part) {
    sluice_decision parts[SLUICE_POLICY_MAX_PARTS];
    int all = 1;
    if (p->n_parts == 1) {
        int rc = p->algo[0]->decide(&p->params[0], &states[0], now_ms, cost, d, 1);
        if (rc == SLUICE__EGROW) *grow_part = 0;
        return rc;
    }
    /* a part that needs room (it would admit) is grown only when every
     * part admits: a request another part denies is a denial, whether or
     * not memory could be had for it */
    size_t grow = SLUICE_POLICY_MAX_PARTS;
    for (size_t i = 0; i < p->n_parts; i++) {
        if (p->algo[i]->decide(&p->params[i], &states[i], now_ms, cost, &parts[i], 0) == SLUICE__EGROW) {
            parts[i].allowed = true; /* on a denial, peeked below */
            if (grow == SLUICE_POLICY_MAX_PARTS) grow = i;
        }
        all &= parts[i].allowed;
    }
    if (all && grow != SLUICE_POLICY_MAX_PARTS) {
        *grow_part = grow;
        return SLUICE__EGROW;
    }
    for (size_t i = 0; i < p->n_parts; i++) {
        if (all) /* cannot need room now: the dry run said it had it */
            p->algo[i]->decide(&p->params[i], &states[i], now_ms, cost, &parts[i], 1);
        else if (parts[i].allowed)
            p->algo[i]->peek(&p->params[i], &states[i], now_ms, &parts[i]);
    }
    combine(p, parts, all, d);
    return 0;
}
