/* trace.h: one step of a random trace, as every store's conformance test
 * draws it (test_store_memory.c, test_store_shm.c, test_store_redis.c): the
 * time mostly in small steps, sometimes an idle gap of minutes, days or
 * decades, sometimes back (a store's time then stands still); a policy; a
 * key, mostly one of four hot ones, sometimes one of the rare; a cost,
 * mostly 1, sometimes up to the policy's largest, rarely past it or below
 * 1 (SLUICE_ECOST). Uses check.h's check_range_. */
#ifndef SLUICE_TEST_TRACE_H
#define SLUICE_TEST_TRACE_H

#include <stddef.h>
#include <stdint.h>

#include "sluice.h"
#include "trace_verbs.h"

typedef struct {
    int64_t now;  /* the reading */
    size_t spec;  /* which policy */
    size_t key;   /* which key */
    int64_t cost;
    int verb;     /* TRACE_ACQUIRE, unless trace_verb drew another */
} trace_step;

/* Draws the next step from *rs: readings within +-edge_ms (a Redis store
 * holds +-2^50 exactly), policies from pol[0..n_pol), keys 0..n_keys-1. */
static inline void trace_draw(uint64_t *rs, int64_t *now, int64_t edge_ms, sluice_policy *const *pol, size_t n_pol,
                              size_t n_keys, trace_step *st) {
    int64_t roll = check_range_(rs, 0, 99);
    if (roll < 60) *now += check_range_(rs, 0, 3);
    else if (roll < 88) *now += check_range_(rs, 0, 40);
    else if (roll < 94) *now += check_range_(rs, 0, 100000);
    else if (roll < 95) *now += check_range_(rs, 0, INT64_C(4) << 30);
    else if (roll < 97) *now += check_range_(rs, 0, INT64_C(1) << 40);
    else *now -= check_range_(rs, 0, 50); /* the store's time stands still */
    if (*now > edge_ms) *now = edge_ms;
    if (*now < -edge_ms) *now = -edge_ms;
    st->now = *now;
    st->verb = TRACE_ACQUIRE;
    st->spec = (size_t)check_range_(rs, 0, (int64_t)n_pol - 1);
    st->key = (size_t)(check_range_(rs, 0, 3) == 0 ? check_range_(rs, 0, (int64_t)n_keys - 1) : check_range_(rs, 0, 3));
    int64_t limit = sluice_policy_max_cost(pol[st->spec]);
    int64_t c = check_range_(rs, 0, 199);
    if (c < 140) st->cost = 1;
    else if (c < 180) st->cost = check_range_(rs, 1, limit < 4 ? limit : 4);
    else if (c < 194) st->cost = check_range_(rs, 1, limit);
    else if (c < 197) st->cost = limit;
    else if (c < 198) st->cost = limit + 1; /* SLUICE_ECOST */
    else if (c < 199) st->cost = 0;         /* SLUICE_ECOST */
    else st->cost = -check_range_(rs, 1, 5);
}

/* Draws a verb for st (after trace_draw), for stores that have them:
 * mostly a request, sometimes a peek or a refund (at st's cost), rarely a
 * reset. */
static inline void trace_verb(uint64_t *rs, trace_step *st) {
    int64_t roll = check_range_(rs, 0, 99);
    st->verb = roll < 84 ? TRACE_ACQUIRE : roll < 91 ? TRACE_PEEK : roll < 98 ? TRACE_REFUND : TRACE_RESET;
}

#endif /* SLUICE_TEST_TRACE_H */
