/* composite.c: a policy's parts decided together, all or nothing ("10/s and
 * 1000/h"). Every part is asked first without changing anything; only when
 * all the enforced ones admit are they committed. A shadow part is asked
 * too, and counts the request when it is admitted and it would itself have
 * admitted it; it never denies, and only says so (shadow_denied). Also the
 * verbs beside deciding, over every part: peek, refund, reset, and the
 * conversion of a key's states when its policy's configuration changed. The
 * caller holds whatever makes the states atomic (a lock). */
#include "policy.h"

/* The decision of the enforced parts (a policy of shadow parts only:
 * allowed, nothing in force). */
static void combine(const sluice_policy *p, const sluice_decision *parts, int allowed, sluice_decision *d) {
    int first = 1;
    for (size_t i = 0; i < p->n_parts; i++) {
        const sluice_decision *x = &parts[i];
        if (p->shadow[i]) continue;
        if (first) { /* a later part takes over only with less remaining */
            *d = *x;
            d->part = (int32_t)i;
            first = 0;
            continue;
        }
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
    if (first) {
        memset(d, 0, sizeof *d);
        d->remaining = SLUICE_LIMIT_MAX;
    }
    d->allowed = allowed;
    d->enforced = true;
    d->shadow_denied = false;
    d->local = false;
}

/* Asks every part about cost without changing anything: parts[i] and
 * ok[i] (part i would admit); *grow the first part that would admit but
 * needs room first (SLUICE_POLICY_MAX_PARTS: none). A shadow part whose
 * limit is below cost would deny (it could never admit). Returns whether
 * every enforced part admits. */
static int ask(const sluice_policy *p, sluice__state *states, int64_t now_ms, int64_t cost, sluice_decision *parts,
               int *ok, size_t *grow) {
    int all = 1;
    *grow = SLUICE_POLICY_MAX_PARTS;
    for (size_t i = 0; i < p->n_parts; i++) {
        if (cost > p->params[i].limit) { /* a shadow part's (an enforced one's is SLUICE_ECOST) */
            p->algo[i]->peek(&p->params[i], &states[i], now_ms, &parts[i]);
            ok[i] = 0;
        } else {
            int rc = p->algo[i]->decide(&p->params[i], &states[i], now_ms, cost, &parts[i], 0);
            ok[i] = parts[i].allowed;
            if (rc == SLUICE__EGROW && *grow == SLUICE_POLICY_MAX_PARTS) *grow = i;
        }
        if (!p->shadow[i]) all &= ok[i];
    }
    return all;
}

int sluice__policy_decide_grow(const sluice_policy *p, sluice__state *states, int64_t now_ms, int64_t cost,
                               sluice_decision *d) {
    for (;;) {
        size_t g = 0;
        int rc = sluice__policy_decide(p, states, now_ms, cost, d, &g);
        if (rc != SLUICE__EGROW) return rc;
        rc = p->algo[g]->reserve(&p->params[g], &states[g]); /* EGROW: only from a state that grows */
        if (rc) return rc;
    }
}

int sluice__policy_decide(const sluice_policy *p, sluice__state *states, int64_t now_ms, int64_t cost,
                          sluice_decision *d, size_t *grow_part) {
    if (p->n_parts == 1 && !p->n_shadow) {
        int rc = p->algo[0]->decide(&p->params[0], &states[0], now_ms, cost, d, 1);
        if (rc == SLUICE__EGROW) *grow_part = 0;
        return rc;
    }
    sluice_decision parts[SLUICE_POLICY_MAX_PARTS];
    int ok[SLUICE_POLICY_MAX_PARTS];
    size_t grow;
    int all = ask(p, states, now_ms, cost, parts, ok, &grow);
    /* a part that needs room (it would admit) is grown only when the
     * request is admitted: a request another part denies is a denial,
     * whether or not memory could be had for it */
    if (all && grow != SLUICE_POLICY_MAX_PARTS) {
        *grow_part = grow;
        return SLUICE__EGROW;
    }
    int shadow_denied = 0;
    for (size_t i = 0; i < p->n_parts; i++) {
        shadow_denied |= p->shadow[i] && !ok[i];
        if (all && ok[i]) /* cannot need room now: the dry run said it had it */
            p->algo[i]->decide(&p->params[i], &states[i], now_ms, cost, &parts[i], 1);
        else if (ok[i])
            p->algo[i]->peek(&p->params[i], &states[i], now_ms, &parts[i]);
    }
    combine(p, parts, all, d);
    d->shadow_denied = shadow_denied;
    return 0;
}

void sluice__policy_peek(const sluice_policy *p, sluice__state *states, int64_t now_ms, int64_t cost,
                         sluice_decision *d) {
    sluice_decision parts[SLUICE_POLICY_MAX_PARTS];
    int ok[SLUICE_POLICY_MAX_PARTS];
    size_t grow;
    int all = ask(p, states, now_ms, cost, parts, ok, &grow); /* a state that would need room: as if it had it */
    int shadow_denied = 0;
    for (size_t i = 0; i < p->n_parts; i++) {
        shadow_denied |= p->shadow[i] && !ok[i];
        if (!all && ok[i]) p->algo[i]->peek(&p->params[i], &states[i], now_ms, &parts[i]);
    }
    combine(p, parts, all, d);
    d->shadow_denied = shadow_denied;
}

void sluice__policy_peek_fresh(const sluice_policy *p, int64_t now_ms, int64_t cost, sluice_decision *d) {
    sluice__state st[SLUICE_POLICY_MAX_PARTS];
    for (size_t i = 0; i < p->n_parts; i++) p->algo[i]->init(&p->params[i], &st[i]);
    sluice__policy_peek(p, st, now_ms, cost, d);
}

void sluice__policy_refund(const sluice_policy *p, sluice__state *states, int64_t now_ms, int64_t cost) {
    for (size_t i = 0; i < p->n_parts; i++) p->algo[i]->refund(&p->params[i], &states[i], now_ms, cost);
}

int64_t sluice__policy_reset_ms(const sluice_policy *p, const sluice__state *states, int64_t now_ms) {
    int64_t most = 0;
    for (size_t i = 0; i < p->n_parts; i++) {
        sluice_decision d;
        p->algo[i]->peek(&p->params[i], &states[i], now_ms, &d);
        if (d.reset_ms > most) most = d.reset_ms;
    }
    return most;
}

int sluice__policy_convert(const sluice_policy *from, const sluice__state *old, const sluice_policy *to,
                           sluice__state *states, int64_t now_ms) {
    for (size_t i = 0; i < to->n_parts && i < from->n_parts; i++) {
        const sluice__algo *a = to->algo[i];
        if (from->algo[i] == a) { /* its own state, kept as it is where it can be */
            int carried;
            while ((carried = a->carry(&from->params[i], &old[i], &to->params[i], &states[i], now_ms)) < 0)
                if (!a->reserve || a->reserve(&to->params[i], &states[i]) != 0) break; /* room for it, if any */
            if (carried > 0) continue;
        }
        /* what part i has in use, charged to a fresh state of the new part */
        sluice_decision d;
        from->algo[i]->peek(&from->params[i], &old[i], now_ms, &d);
        int64_t used = from->params[i].limit - d.remaining;
        if (used > to->params[i].limit) used = to->params[i].limit;
        if (used < 1) continue;
        int rc = a->decide(&to->params[i], &states[i], now_ms, used, &d, 1);
        if (rc == SLUICE__EGROW && (rc = a->reserve(&to->params[i], &states[i])) == 0)
            rc = a->decide(&to->params[i], &states[i], now_ms, used, &d, 1);
        if (rc) return rc; /* SLUICE_ENOMEM (a log's ring) */
    }
    return 0;
}
