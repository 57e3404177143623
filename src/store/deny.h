/* store/deny.h: a remote store's cache of denials (deny.c): after the
 * server denies a (policy, key), later requests of the same cost are
 * denied locally, exactly as the server would while nothing else changes
 * its state, until the denial would end. */
#ifndef SLUICE_STORE_DENY_H
#define SLUICE_STORE_DENY_H

#include "policy.h"
#include "shared.h"

#define SLUICE__DENY_KEY_MAX 64     /* longer keys are not cached */
#define SLUICE__DENY_DEFAULT 4096   /* entries */

/* What the server says of one part beside a denial of cost n at a
 * reading: how long the part denies a request of cost 1 (0: it admits
 * one now), how long it denies cost n, and how long until it is fresh. */
typedef struct {
    int64_t retry1_ms, retry_ms, reset_ms;
} sluice__deny_part;

typedef struct sluice__deny_cache sluice__deny_cache;

/* A cache of entries entries (rounded up to whole sets; 0: NULL, none).
 * SLUICE_ENOMEM. */
SLUICE__SHARED int sluice__deny_new(size_t entries, sluice__deny_cache **out);
SLUICE__SHARED void sluice__deny_free(sluice__deny_cache *c);
/* Remembers the server's denial of cost at at_ms for (policy id, key),
 * with each part's figures (p's parts, in order), when it can be answered
 * again: some enforced part denies cost 1 (so nothing of any cost is free:
 * remaining 0) and the key is short enough. Else forgets the key. */
SLUICE__SHARED void sluice__deny_put(sluice__deny_cache *c, const sluice_policy *p, unsigned pid, const void *key,
                                     size_t len, int64_t at_ms, int64_t cost, const sluice__deny_part *parts);
/* The same, unless *epoch (when not NULL) is no longer seen, read under
 * the entry's lock: a caller that bumps *epoch after a refund or reset
 * takes effect, then drops the key, never leaves behind a denial made
 * before it (decide.c, redis). */
SLUICE__SHARED void sluice__deny_put_since(sluice__deny_cache *c, const sluice_policy *p, unsigned pid,
                                           const void *key, size_t len, int64_t at_ms, int64_t cost,
                                           const sluice__deny_part *parts, const _Atomic uint64_t *epoch,
                                           uint64_t seen);
/* The server's denial of a request of cost for (p, key) at now_ms, as it
 * would say it: 1 with *d filled, or 0 when the cache cannot tell (no
 * entry, another cost, a reading before it, or the denial is over: the
 * entry is dropped). */
SLUICE__SHARED int sluice__deny_get(sluice__deny_cache *c, const sluice_policy *p, unsigned pid, const void *key,
                                    size_t len, int64_t cost, int64_t now_ms, sluice_decision *d);
/* Forgets the key (a refund or reset through this store). */
SLUICE__SHARED void sluice__deny_drop(sluice__deny_cache *c, unsigned pid, const void *key, size_t len);
/* Denials answered (the stats' cached_denials). */
SLUICE__SHARED int64_t sluice__deny_answered(const sluice__deny_cache *c);
/* Each part's figures for a denial of cost at now_ms on states (what the
 * server computes; the tests' reference). */
SLUICE__SHARED void sluice__deny_parts_of(const sluice_policy *p, sluice__state *states, int64_t now_ms,
                                          int64_t cost, sluice__deny_part *out);

#endif /* SLUICE_STORE_DENY_H */
