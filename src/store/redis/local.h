/* store/redis/local.h: on_error=local, the local limit (local.c). When the
 * server cannot decide, an in-process memory: store decides under the same
 * policy scaled to this host's share 1/N; N is learned from the instance
 * registry, written on the way of ordinary decisions. The hooks the rest of
 * the Redis store calls, each a no-op when r->local is NULL (another
 * on_error). */
#ifndef SLUICE_REDIS_LOCAL_H
#define SLUICE_REDIS_LOCAL_H

#include "redis_internal.h"

/* Sets r->local up for on_error=local (else leaves it NULL); share is the
 * URL's local_share (NULL: not given). 0, or SLUICE_EINVAL / SLUICE_ENOMEM
 * with err. */
int sluice__redis_local_open(redis_store *r, const char *share, size_t share_len, char *err, size_t errlen);
void sluice__redis_local_free(redis_store *r);
/* The server could not make call verb (a, p, r, x: acquire, peek, refund,
 * reset; why): the local limit makes it; an acquire is counted
 * (stats.local, and allowed or denied); the store's message says why. */
int sluice__redis_local_decide(redis_store *r, const char *why, char verb, const sluice_policy *p,
                               const void *key, size_t key_len, int64_t cost, int64_t now_ms, sluice_decision *d);
/* The server decided: the local states, if any, are dropped. O(1) (one
 * atomic load) when there are none. */
void sluice__redis_local_answered(redis_store *r);
/* stats.local: decisions the local limit made. */
int64_t sluice__redis_local_count(const redis_store *r);
/* Call k on c (a connection to n) by deadline_ms, as sluice__redis_run;
 * when the registry is due and its key lives on n, its commands go first in
 * the same write and their replies are read (and N learned) before k's. */
redisReply *sluice__redis_local_run(redis_store *r, const node *n, redisContext *c, int64_t deadline_ms,
                                    call *k, char *why, size_t whylen);

#endif
