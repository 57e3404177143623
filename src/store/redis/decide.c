/* store/redis/decide.c: policies and decisions. What the store keeps of a
 * policy (its names' start, decide.lua's arguments, asked of each part's
 * algorithm descriptor), one request made into a call of the script, its
 * reply read into a decision, and the store's acquire and batch. */
#define _GNU_SOURCE
#include "redis_internal.h"
#include "local.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define EXACT_MAX (INT64_C(1) << 51) /* products the script forms stay < 2^53 */

/* ---- policies ---- */

int sluice__redis_policy_init(void *item, void *ctx) {
    rpolicy *rp = item;
    redis_store *r = ctx;
    const sluice_policy *p = &rp->policy;
    char text[SLUICE_POLICY_MAX_PARTS * 80];
    sluice_policy_format(p, text, sizeof text);
    for (size_t i = 0; i < p->n_parts; i++) {
        const sluice__params *q = &p->params[i];
        const sluice__algo *a = p->algo[i];
        int gcra = (a->flags & SLUICE__ALGO_GCRA) != 0;
        /* the script forms no integer above 4 times the algorithm's
         * largest (algo.h), so below 2^53 when that is at most 2^51 */
        if (a->largest && a->largest(q) > EXACT_MAX) {
            char part[80];
            sluice_config_format(&p->parts[i], part, sizeof part);
            sluice__store_errf(&r->head,
                               "policy %s part %zu (%s) needs exact integers beyond 2^53, more than "
                               "Redis's Lua numbers hold: use a smaller limit or a shorter period",
                               p->name, i, part);
            return SLUICE_EINVAL;
        }
        /* the script's arguments: algorithm, limit, then (p, r), a bucket's
         * scaled units, or (W, 0) */
        snprintf(rp->args[4 * i], 24, "%d", (int)a->id);
        snprintf(rp->args[4 * i + 1], 24, "%lld", (long long)q->limit);
        snprintf(rp->args[4 * i + 2], 24, "%lld", (long long)(gcra ? q->p : q->window_ms));
        snprintf(rp->args[4 * i + 3], 24, "%lld", (long long)(gcra ? q->r : 0));
        rp->n_logs += (a->flags & SLUICE__ALGO_GROWS) != 0; /* a sorted set of its own */
    }
    /* the configuration's fingerprint: a changed configuration under the
     * same name is a new policy, with new names (sluice.h) */
    uint64_t zero[2] = {0, 0};
    uint64_t fp = sluice__siphash24(zero, text, strlen(text));
    int len = snprintf(rp->name, sizeof rp->name, "%s{%s|%016llx|", r->prefix, p->name, (unsigned long long)fp);
    rp->name_len = (size_t)len;
    return 0;
}

/* ---- one decision ---- */

/* The call of the script for a request of cost at now_ms (the store's
 * time): the key's names, then the arguments decide.lua reads. */
static void build(redis_store *r, const rpolicy *rp, const void *key, size_t key_len, int64_t cost,
                  int64_t now_ms, call *k) {
    int n = 0;
    k->argv[n] = "EVALSHA", k->lens[n++] = 7;
    k->argv[n] = r->sha, k->lens[n++] = 40;
    k->lens[n] = (size_t)snprintf(k->numkeys, sizeof k->numkeys, "%d", 1 + rp->n_logs);
    k->argv[n++] = k->numkeys;
    char *name = k->names[0];
    size_t len = rp->name_len;
    memcpy(name, rp->name, len);
    len += (size_t)sprintf(name + len, "%zu:", key_len);
    memcpy(name + len, key, key_len);
    len += key_len;
    name[len++] = '}';
    k->slot = r->cluster ? sluice__redis_slot(name, len) : 0;
    k->argv[n] = name, k->lens[n++] = len;
    for (size_t i = 0, logs = 0; i < rp->policy.n_parts; i++) {
        if (!(rp->policy.algo[i]->flags & SLUICE__ALGO_GROWS)) continue; /* a state that grows: its own sorted set */
        char *log = k->names[++logs];
        memcpy(log, name, len);
        k->argv[n] = log, k->lens[n++] = len + (size_t)sprintf(log + len, ":%zu", i);
    }
    k->lens[n] = r->client_clock ? (size_t)snprintf(k->now, sizeof k->now, "%lld", (long long)now_ms) : 0;
    k->argv[n++] = k->now;
    k->lens[n] = (size_t)snprintf(k->cost, sizeof k->cost, "%lld", (long long)cost);
    k->argv[n++] = k->cost;
    k->lens[n] = (size_t)snprintf(k->grace, sizeof k->grace, "%lld", (long long)r->ttl_grace_ms);
    k->argv[n++] = k->grace;
    for (size_t i = 0; i < 4 * rp->policy.n_parts; i++) {
        k->argv[n] = rp->args[i];
        k->lens[n++] = strlen(rp->args[i]);
    }
    k->argc = n;
}

/* Reads the script's reply into d: 0, or -1 with why. With the client's
 * clock, waits count from the caller's reading (the script's element 8 is
 * the time it decided at). */
static int read_decision(redis_store *r, const call *k, redisReply *reply, sluice_decision *d,
                         char *why, size_t whylen) {
    if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(why, whylen, "%s", reply->str);
        return -1;
    }
    if (reply->type != REDIS_REPLY_ARRAY || reply->elements != 9) {
        snprintf(why, whylen, "unexpected reply to the decision script");
        return -1;
    }
    for (int i = 0; i < 9; i++)
        if (reply->element[i]->type != REDIS_REPLY_INTEGER) {
            snprintf(why, whylen, "unexpected reply to the decision script");
            return -1;
        }
    d->allowed = reply->element[0]->integer != 0;
    d->enforced = true;
    d->shadow_denied = false; /* shadow parts: not yet in the script */
    d->local = false;
    d->remaining = reply->element[1]->integer;
    d->retry_after_ms = reply->element[2]->integer;
    d->reset_ms = reply->element[3]->integer;
    d->delay_ms = reply->element[4]->integer;
    d->limit = reply->element[5]->integer;
    d->part = (int32_t)reply->element[6]->integer;
    d->part_reset_ms = reply->element[8]->integer;
    if (r->client_clock) {
        if (d->allowed) sluice__store_time_raise(&r->now_ms, reply->element[7]->integer);
        sluice__decision_lag(d, reply->element[7]->integer - k->reading_ms);
    }
    return 0;
}

/* The server could not decide: what on_error says. */
static int failed(redis_store *r, const char *why, sluice_decision *d) {
    atomic_fetch_add(&r->failures, 1);
    sluice__store_errf(&r->head, "redis: %s", why);
    if (r->on_error == SLUICE_ON_ERROR_ERROR) return SLUICE_ESTORE;
    memset(d, 0, sizeof *d);
    d->allowed = r->on_error == SLUICE_ON_ERROR_ALLOW;
    d->enforced = false;
    d->retry_after_ms = d->allowed ? 0 : RETRY_MS;
    return 0;
}

/* The same for a request: on_error=local decides it by the local limit
 * (local.c); any other on_error as above. */
static int failed_request(redis_store *r, const char *why, const sluice_policy *p, const void *key, size_t key_len,
                          int64_t cost, int64_t now_ms, sluice_decision *d) {
    if (r->local) return sluice__redis_local_decide(r, why, p, key, key_len, cost, now_ms, d);
    return failed(r, why, d);
}

static int failed_in_batch(redis_store *r, const char *why, const sluice_request *q, int64_t now_ms,
                           sluice_decision *d) {
    return failed_request(r, why, q->policy, q->key, q->key_len, q->cost, now_ms, d);
}

/* Store time, policy and arguments of one request: 0 or an error. */
static int prepare(redis_store *r, const sluice_policy *p, const void *key, size_t key_len,
                   int64_t cost, int64_t now_ms, call *k) {
    unsigned id;
    int rc = sluice__policy_set_id(&r->policies, &r->head, p, &id, NULL);
    if (rc) return rc;
    k->reading_ms = now_ms;
    if (r->client_clock) {
        if (now_ms > CLIENT_TIME_MAX_MS || now_ms < -CLIENT_TIME_MAX_MS) {
            sluice__store_errf(&r->head, "reading %lld ms is outside +-2^50 ms, the range Redis's Lua "
                                         "numbers hold exactly", (long long)now_ms);
            return SLUICE_EINVAL;
        }
        now_ms = sluice__store_time(&r->now_ms, now_ms);
    }
    build(r, sluice__policy_item(&r->policies, id), key, key_len, cost, now_ms, k);
    return 0;
}

/* A decision the server made. */
static void count(redis_store *r, const sluice_decision *d) {
    atomic_fetch_add_explicit(d->allowed ? &r->allowed : &r->denied, 1, memory_order_relaxed);
    sluice__redis_local_answered(r); /* on_error=local: the server is back, local states go */
}

int sluice__redis_acquire_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                             int64_t cost, int64_t now_ms, sluice_decision *d) {
    redis_store *r = (redis_store *)s;
    call k;
    char why[256];
    int64_t deadline_ms = sluice__redis_deadline(r);
    int rc = prepare(r, p, key, key_len, cost, now_ms, &k);
    if (rc) return rc;
    redisReply *reply = sluice__redis_send(r, &k, deadline_ms, why, sizeof why);
    if (!reply) return failed_request(r, why, p, key, key_len, cost, now_ms, d);
    rc = read_decision(r, &k, reply, d, why, sizeof why);
    freeReplyObject(reply);
    if (rc) return failed_request(r, why, p, key, key_len, cost, now_ms, d);
    count(r, d);
    return 0;
}

/* A batch: per node, every call appended, then every reply read: one
 * round trip per node. Calls that need more (NOSCRIPT, MOVED, a broken
 * connection) are then sent one by one. */
void sluice__redis_acquire_many(sluice_store *s, const sluice_request *reqs, size_t n, int64_t now_ms,
                                sluice_decision *out, int *results) {
    redis_store *r = (redis_store *)s;
    int64_t deadline_ms = sluice__redis_deadline(r);
    call *calls = malloc(n * sizeof *calls);
    unsigned char *pending = calloc(n, 1);
    node **dest = malloc((n ? n : 1) * sizeof *dest); /* each call's node: see below */
    if (!calls || !pending || !dest) {
        for (size_t i = 0; i < n; i++)
            if (results[i] == 0) results[i] = SLUICE_ENOMEM;
        free(calls);
        free(pending);
        free(dest);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (results[i]) continue;
        results[i] = prepare(r, reqs[i].policy, reqs[i].key, reqs[i].key_len, reqs[i].cost, now_ms, &calls[i]);
        pending[i] = results[i] == 0;
    }
    /* each call's node, looked up once: the slot map may change meanwhile
     * (another thread follows a MOVED), and a call sent to one node must be
     * read back from that node's connection, or a reply stays unread and
     * the next request on the connection gets it */
    for (size_t i = 0; i < n; i++) dest[i] = pending[i] ? sluice__redis_node_for(r, calls[i].slot) : NULL;
    char why[256];
    int count_nodes = r->cluster ? atomic_load(&r->n_nodes) : 1;
    for (int at = 0; at < count_nodes; at++) {
        node *nd = r->nodes[at];
        size_t sent = 0;
        for (size_t i = 0; i < n; i++) sent += pending[i] && dest[i] == nd;
        if (!sent) continue;
        redisContext *c = sluice__redis_take(r, nd, deadline_ms, why, sizeof why);
        if (!c) continue; /* one by one below, where the failure is handled */
        for (size_t i = 0; i < n; i++)
            if (pending[i] && dest[i] == nd) redisAppendCommandArgv(c, calls[i].argc, calls[i].argv, calls[i].lens);
        int broken = 0, shortened = sluice__redis_shorten_timeout(r, c, deadline_ms);
        for (size_t i = 0; i < n; i++) {
            if (!pending[i] || dest[i] != nd) continue;
            void *v = NULL;
            if (broken || redisGetReply(c, &v) != REDIS_OK || !v) {
                /* sent, maybe run: failed, never sent twice */
                if (!broken) sluice__redis_lost_reply(r, nd, c, why, sizeof why);
                broken = 1;
                results[i] = failed_in_batch(r, why, &reqs[i], now_ms, &out[i]);
                pending[i] = 0;
                continue;
            }
            redisReply *reply = v;
            if (read_decision(r, &calls[i], reply, &out[i], why, sizeof why) == 0) {
                count(r, &out[i]);
                pending[i] = 0;
            } else if (!sluice__redis_not_run(reply)) { /* an error the script may have met mid-way */
                results[i] = failed_in_batch(r, why, &reqs[i], now_ms, &out[i]);
                pending[i] = 0;
            }
            freeReplyObject(reply);
        }
        if (shortened && !broken) sluice__redis_restore_timeout(r, c);
        sluice__redis_give(nd, c, broken);
    }
    for (size_t i = 0; i < n; i++) {
        if (!pending[i]) continue;
        redisReply *reply = sluice__redis_send(r, &calls[i], deadline_ms, why, sizeof why);
        if (!reply) {
            results[i] = failed_in_batch(r, why, &reqs[i], now_ms, &out[i]);
            continue;
        }
        int rc = read_decision(r, &calls[i], reply, &out[i], why, sizeof why);
        freeReplyObject(reply);
        if (rc) results[i] = failed_in_batch(r, why, &reqs[i], now_ms, &out[i]);
        else count(r, &out[i]);
    }
    free(dest);
    free(calls);
    free(pending);
}
