/* store/redis/pool.c: connections to the nodes, each node's pool of them,
 * and commands run within a call's deadline (the time bound at the top of
 * redis.c). A node that fails is marked down for RETRY_MS: callers then
 * fail fast instead of each waiting out a timeout. */
#define _GNU_SOURCE
#include "redis_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- time ---- */

static struct timeval tv_of(int64_t ms) {
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

/* limit_ms, or what is left until until_ms when that is less (at least 1). */
static int64_t within(int64_t limit_ms, int64_t until_ms) {
    int64_t left_ms = until_ms - sluice__redis_real_ms();
    return left_ms < limit_ms ? (left_ms > 1 ? left_ms : 1) : limit_ms;
}

/* Waits on cond until until_ms (CLOCK_MONOTONIC); ETIMEDOUT when it passed. */
static int wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t until_ms) {
    if (until_ms >= NO_DEADLINE / 2) return pthread_cond_wait(cond, mu);
    struct timespec ts = {.tv_sec = (time_t)(until_ms / 1000), .tv_nsec = (long)(until_ms % 1000) * 1000000L};
    return pthread_cond_timedwait(cond, mu, &ts);
}

/* ---- connections ---- */

node *sluice__redis_node_new(const char *host, size_t host_len, int port) {
    node *n = calloc(1, sizeof *n);
    if (!n) return NULL;
    if (host_len >= sizeof n->host) host_len = sizeof n->host - 1;
    memcpy(n->host, host, host_len);
    n->port = port;
    pthread_condattr_t attr;
    pthread_condattr_init(&attr);
    pthread_condattr_setclock(&attr, CLOCK_MONOTONIC);
    pthread_mutex_init(&n->mu, NULL);
    pthread_cond_init(&n->freed, &attr);
    pthread_condattr_destroy(&attr);
    return n;
}

void sluice__redis_node_free(node *n) {
    for (int i = 0; i < n->n_idle; i++) redisFree(n->idle[i]);
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->freed);
    free(n);
}

/* Before c's next command of a call that ends by deadline_ms: its
 * timeout is timeout_ms, or what is left when that is less. 1 when it was
 * shortened: sluice__redis_restore_timeout() then puts timeout_ms back. */
int sluice__redis_shorten_timeout(const redis_store *r, redisContext *c, int64_t deadline_ms) {
    int64_t ms = within(r->timeout_ms, deadline_ms);
    if (ms == r->timeout_ms) return 0;
    redisSetTimeout(c, tv_of(ms));
    return 1;
}

void sluice__redis_restore_timeout(const redis_store *r, redisContext *c) {
    redisSetTimeout(c, tv_of(r->timeout_ms));
}

/* Runs one command on c by deadline_ms; NULL and why on failure (c is
 * then unusable). */
redisReply *sluice__redis_run(const redis_store *r, redisContext *c, int64_t deadline_ms, int argc,
                              const char **argv, const size_t *lens, char *why, size_t whylen) {
    int shortened = sluice__redis_shorten_timeout(r, c, deadline_ms);
    redisReply *reply = redisCommandArgv(c, argc, argv, lens);
    if (!reply) snprintf(why, whylen, "%s", c->errstr[0] ? c->errstr : "connection lost");
    else if (shortened) sluice__redis_restore_timeout(r, c);
    return reply;
}

/* A new connection to n, made by until_ms, its SELECT done by deadline_ms. */
static redisContext *connect_node(redis_store *r, node *n, int64_t until_ms, int64_t deadline_ms, char *why,
                                  size_t whylen) {
    redisContext *c = redisConnectWithTimeout(n->host, n->port, tv_of(within(r->connect_timeout_ms, until_ms)));
    if (!c || c->err) {
        snprintf(why, whylen, "cannot connect to %.100s:%d: %.100s", n->host, n->port,
                 c ? c->errstr : "out of memory");
        if (c) redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv_of(r->timeout_ms));
    if (r->db) {
        char db[16];
        int len = snprintf(db, sizeof db, "%d", r->db);
        const char *argv[] = {"SELECT", db};
        size_t lens[] = {6, (size_t)len};
        redisReply *reply = sluice__redis_run(r, c, deadline_ms, 2, argv, lens, why, whylen);
        int ok = reply && reply->type != REDIS_REPLY_ERROR;
        if (reply && !ok) snprintf(why, whylen, "SELECT %d: %s", r->db, reply->str);
        if (reply) freeReplyObject(reply);
        if (!ok) {
            redisFree(c);
            return NULL;
        }
    }
    return c;
}

/* A connection to n for a call that ends by deadline_ms: an idle one, a
 * new one, or (pool full) the next one given back, by timeout_ms before
 * the deadline. NULL with why when n is down (at once, even while waiting)
 * or when none came in time. */
redisContext *sluice__redis_take(redis_store *r, node *n, int64_t deadline_ms, char *why, size_t whylen) {
    int64_t until_ms = deadline_ms - r->timeout_ms;
    pthread_mutex_lock(&n->mu);
    for (;;) {
        if (n->failed && sluice__redis_real_ms() < atomic_load(&n->retry_at_ms)) {
            pthread_mutex_unlock(&n->mu);
            snprintf(why, whylen, "%.100s:%d is down (retrying every %d ms)", n->host, n->port, RETRY_MS);
            return NULL;
        }
        if (n->n_idle > 0) {
            redisContext *c = n->idle[--n->n_idle];
            pthread_mutex_unlock(&n->mu);
            return c;
        }
        if (n->n_open < r->pool) break;
        if (wait_until(&n->freed, &n->mu, until_ms) == ETIMEDOUT) {
            pthread_mutex_unlock(&n->mu);
            snprintf(why, whylen, "%.100s:%d: all pool=%d connections stayed in use for connect_timeout_ms=%lld",
                     n->host, n->port, r->pool, (long long)r->connect_timeout_ms);
            return NULL;
        }
    }
    n->n_open++;
    pthread_mutex_unlock(&n->mu);
    redisContext *c = connect_node(r, n, until_ms, deadline_ms, why, whylen);
    pthread_mutex_lock(&n->mu);
    if (!c) {
        n->n_open--;
        n->failed = 1;
        atomic_store(&n->retry_at_ms, sluice__redis_real_ms() + RETRY_MS);
        pthread_cond_broadcast(&n->freed); /* the waiters: down */
    } else if (n->failed) {
        n->failed = 0;
        atomic_fetch_add(&r->reconnects, 1);
    }
    pthread_mutex_unlock(&n->mu);
    return c;
}

/* Whether c broke because the server closed it (a restart, an idle
 * timeout), not because it failed to answer in time. */
static int closed_by_server(const redisContext *c) {
    return c->err == REDIS_ERR_EOF ||
           (c->err == REDIS_ERR_IO && (!strcmp(c->errstr, strerror(ECONNRESET)) || !strcmp(c->errstr, strerror(EPIPE))));
}

/* Gives c back to n's pool; broken: drop it. A connection the server
 * closed says only that the server went away meanwhile (a restart): the
 * idle ones, as stale, are dropped too, and new ones are tried at once.
 * Any other failure (no answer in time: the server is slow or stopped)
 * marks the node down for RETRY_MS, so that callers fail fast instead of
 * each waiting out the timeout, those waiting for a connection too. */
void sluice__redis_give(node *n, redisContext *c, int broken) {
    pthread_mutex_lock(&n->mu);
    if (broken) {
        int closed = closed_by_server(c);
        redisFree(c);
        n->n_open--;
        if (closed) {
            while (n->n_idle > 0) {
                redisFree(n->idle[--n->n_idle]);
                n->n_open--;
            }
        } else {
            n->failed = 1;
            atomic_store(&n->retry_at_ms, sluice__redis_real_ms() + RETRY_MS);
        }
        pthread_cond_broadcast(&n->freed); /* places in the pool, or down */
    } else {
        n->idle[n->n_idle++] = c;
        pthread_cond_signal(&n->freed);
    }
    pthread_mutex_unlock(&n->mu);
}

/* why, for a call sent on c to n that got no reply: it may have run. */
void sluice__redis_lost_reply(const redis_store *r, const node *n, const redisContext *c, char *why,
                              size_t whylen) {
    char what[160];
    if (c->err == REDIS_ERR_IO && !strcmp(c->errstr, strerror(EAGAIN)))
        snprintf(what, sizeof what, "no reply within timeout_ms=%lld (or what was left of the call's "
                 "connect_timeout_ms + timeout_ms)", (long long)r->timeout_ms);
    else
        snprintf(what, sizeof what, "%s", c->errstr[0] ? c->errstr : "connection lost");
    snprintf(why, whylen, "%.100s:%d: %.100s (the call was sent: it may have taken effect)", n->host, n->port, what);
}

/* A command of one word outside any decision (DBSIZE, PING) on node n by
 * deadline_ms: its reply, or NULL with why, which names n. */
redisReply *sluice__redis_ask(redis_store *r, node *n, const char *cmd, int64_t deadline_ms, char *why,
                              size_t whylen) {
    redisContext *c = sluice__redis_take(r, n, deadline_ms, why, whylen);
    if (!c) return NULL;
    const char *argv[] = {cmd};
    size_t lens[] = {strlen(cmd)};
    char what[160];
    redisReply *reply = sluice__redis_run(r, c, deadline_ms, 1, argv, lens, what, sizeof what);
    if (!reply && c->err == REDIS_ERR_IO && !strcmp(c->errstr, strerror(EAGAIN)))
        snprintf(what, sizeof what, "no reply within timeout_ms=%lld", (long long)r->timeout_ms);
    else if (reply && reply->type == REDIS_REPLY_ERROR)
        snprintf(what, sizeof what, "%.150s", reply->str);
    sluice__redis_give(n, c, reply == NULL);
    if (reply && reply->type == REDIS_REPLY_ERROR) {
        freeReplyObject(reply);
        reply = NULL;
    }
    if (!reply) snprintf(why, whylen, "%.100s:%d: %s: %s", n->host, n->port, cmd, what);
    return reply;
}
