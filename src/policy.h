/* policy.h: policies (a name and 1..8 configurations that must all
 * admit), and the configurations they are made of: validation and the text
 * form (config.c), the policy object (policy.c), and deciding over its
 * parts, all or nothing (composite.c). */
#ifndef SLUICE_POLICY_H
#define SLUICE_POLICY_H

#include "algo/algo.h"

/* ---- "config.c" ---- */
/* Parses text[begin..end), with positions in messages relative to text. */
int sluice__config_parse_span(const char *text, size_t begin, size_t end, sluice_config *out,
                              char *err, size_t errlen);
/* Validates c and fills *p. Returns 0 or SLUICE_EINVAL with a message. */
int sluice__params_init(const sluice_config *c, sluice__params *p, char *err, size_t errlen);

/* ---- "policy.c" ---- */
struct sluice_policy {
    uint64_t serial;  /* unique per policy object made (copies share it) */
    int64_t max_cost; /* the least limit of the enforced parts (SLUICE_LIMIT_MAX: none) */
    char name[SLUICE_POLICY_NAME_MAX + 1];
    size_t n_parts, n_shadow;
    sluice_config parts[SLUICE_POLICY_MAX_PARTS];
    bool shadow[SLUICE_POLICY_MAX_PARTS]; /* a shadow part: decided, never denying */
    sluice__params params[SLUICE_POLICY_MAX_PARTS];
    const sluice__algo *algo[SLUICE_POLICY_MAX_PARTS];
};
/* Checks cost against every part: SLUICE_ECOST when cost < 1 or > a limit. */
int sluice__policy_check_cost(const sluice_policy *p, int64_t cost);
/* Decides cost against every part's state, all or nothing: when every part
 * admits, updates all states; otherwise none. Fills the combined decision.
 * Returns 0 or SLUICE__EGROW (with *grow_part set; nothing changed): only
 * when every part would admit, so a denial never waits on memory. */
int sluice__policy_decide(const sluice_policy *p, sluice__state *states, int64_t now_ms,
                          int64_t cost, sluice_decision *d, size_t *grow_part);
/* The same, growing sliding logs (heap rings) as they need: 0 or
 * SLUICE_ENOMEM (nothing changed). */
int sluice__policy_decide_grow(const sluice_policy *p, sluice__state *states, int64_t now_ms,
                               int64_t cost, sluice_decision *d);
/* The decision sluice__policy_decide would give, nothing changed (a state
 * that would need room first decides as if it had it). */
void sluice__policy_peek(const sluice_policy *p, sluice__state *states, int64_t now_ms, int64_t cost,
                         sluice_decision *d);
/* The decision a request of cost would get from fresh states (what a
 * store answers a peek, or a refund or reset, of a key it does not hold). */
void sluice__policy_peek_fresh(const sluice_policy *p, int64_t now_ms, int64_t cost, sluice_decision *d);
/* Gives cost back to every part (each algorithm's refund). */
void sluice__policy_refund(const sluice_policy *p, sluice__state *states, int64_t now_ms, int64_t cost);
/* How long until every part is fresh, shadow parts too (a decision's
 * reset_ms is the enforced parts'): what a store may forget a key by. */
int64_t sluice__policy_reset_ms(const sluice_policy *p, const sluice__state *states, int64_t now_ms);
/* A key's states under from (old, at now_ms) as states of to (states:
 * fresh, with room for a first admission), a configuration of the same
 * name that changed (docs/semantics.md, "Retune"): part i takes part i's
 * exact state where its algorithm keeps it (carry), else what it had in
 * use, capped at the new limit, charged as admitted at now_ms. Returns 0
 * or SLUICE_ENOMEM (a log's ring). */
int sluice__policy_convert(const sluice_policy *from, const sluice__state *old, const sluice_policy *to,
                           sluice__state *states, int64_t now_ms);

#endif /* SLUICE_POLICY_H */
