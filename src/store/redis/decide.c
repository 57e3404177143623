/* store/redis/decide.c: policies, decisions and the verbs. What the store
 * keeps of a policy (its names' start, its configuration's text and
 * decide.lua's arguments, asked of each part's algorithm descriptor), one
 * request made into a call of the script, its reply read into a decision,
 * and the store's acquire, peek, refund, reset and batch. */
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
    size_t at = 0;
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
        /* the script's configuration, which it also keeps beside a key's
         * state: per part the algorithm (negated: a shadow part), limit,
         * then (p, r), a bucket's scaled units, or (W, 0), and the period
         * as configured (so that it tells apart every configuration that
         * sluice_config does) */
        int kind = p->shadow[i] ? -(int)a->id : (int)a->id;
        at += (size_t)snprintf(rp->cfg + at, sizeof rp->cfg - at, "%s%d,%lld,%lld,%lld,%lld", i ? "/" : "", kind,
                               (long long)q->limit, (long long)(gcra ? q->p : q->window_ms),
                               (long long)(gcra ? q->r : 0), (long long)p->parts[i].period_ms);
        if (a->flags & SLUICE__ALGO_GROWS) rp->logs |= 1u << i; /* a sorted set of its own */
    }
    rp->cfg_len = at;
    /* another configuration of the name: neither uses the cache of
     * denials from now on (the registry's lock is held: items are stable) */
    atomic_init(&rp->twins, 0);
    for (unsigned id = 0; id < r->policies.n; id++) {
        rpolicy *other = sluice__policy_item(&r->policies, id);
        if (strcmp(other->policy.name, p->name) == 0) {
            atomic_store(&other->twins, 1);
            atomic_store(&rp->twins, 1);
        }
    }
    /* a key is known by the policy's name alone: another configuration of
     * the name finds it, and converts it (docs/semantics.md, "Retune") */
    int len = snprintf(rp->name, sizeof rp->name, "%s{%s|", r->prefix, p->name);
    rp->name_len = (size_t)len;
    return 0;
}

/* ---- one call ---- */

/* EVALSHA's arguments for call k (its policy, key, verb, cost and store
 * time set): the key's names (its state, and the sorted sets of k->logs),
 * then the arguments decide.lua reads. */
static void build(redis_store *r, call *k) {
    const rpolicy *rp = k->rp;
    int n = 0;
    k->argv[n] = "EVALSHA", k->lens[n++] = 7;
    k->argv[n] = r->sha, k->lens[n++] = 40;
    k->lens[n] = (size_t)snprintf(k->numkeys, sizeof k->numkeys, "%d", 1 + __builtin_popcount(k->logs));
    k->argv[n++] = k->numkeys;
    char *name = k->names[0];
    size_t len = rp->name_len;
    memcpy(name, rp->name, len);
    len += (size_t)sprintf(name + len, "%zu:", k->key_len);
    memcpy(name + len, k->key, k->key_len);
    len += k->key_len;
    name[len++] = '}';
    k->slot = r->cluster ? sluice__redis_slot(name, len) : 0;
    k->argv[n] = name, k->lens[n++] = len;
    for (unsigned i = 0, logs = 0; i < SLUICE_POLICY_MAX_PARTS; i++) {
        if (!(k->logs >> i & 1)) continue; /* a sorted set, named by its part's index */
        char *log = k->names[++logs];
        memcpy(log, name, len);
        k->argv[n] = log, k->lens[n++] = len + (size_t)sprintf(log + len, ":%u", i);
    }
    k->lens[n] = r->client_clock ? (size_t)snprintf(k->now, sizeof k->now, "%lld", (long long)k->now_ms) : 0;
    k->argv[n++] = k->now;
    /* a decision's cost, or a verb's letter and cost ("p3", "r1", "x0") */
    k->lens[n] = k->verb == 'a' ? (size_t)snprintf(k->cost_text, sizeof k->cost_text, "%lld", (long long)k->cost)
                                : (size_t)snprintf(k->cost_text, sizeof k->cost_text, "%c%lld", k->verb,
                                                   (long long)k->cost);
    k->argv[n++] = k->cost_text;
    k->lens[n] = (size_t)snprintf(k->grace, sizeof k->grace, "%lld", (long long)r->ttl_grace_ms);
    k->argv[n++] = k->grace;
    k->argv[n] = rp->cfg, k->lens[n++] = rp->cfg_len;
    k->argc = n;
}

/* ---- the cache of denials (store/deny.h) ----
 *
 * A denial decide.lua made, with each part's figures, is kept in r->deny
 * by (policy id, key) and answers later requests of the same cost with no
 * round trip while it lasts, at the store's time:
 *
 *   clock=client  the store's time (the caller's reading, never below what
 *                 it admitted at), as the server would decide: exact, field
 *                 for field, for a store alone on its keys;
 *   clock=server  this host's monotonic clock: the denial counts from
 *                 before the call was sent (less 2 ms for the two clocks'
 *                 whole milliseconds), so it ends no later than the
 *                 server's (while its TIME does not run faster or jump
 *                 forward), and its waits are at most the server's, short
 *                 by up to the round trip.
 *
 * A refund or reset through this store bumps r->deny_epoch once the server
 * made it, then drops the key: a denial read before it is not kept (the
 * put checks the epoch under its entry's lock). A policy whose name has
 * another configuration in the store (twins) does not use the cache: a
 * call under one converts the key, which may end the other's denial. */

/* Keeps the denial the script gave for call k, decided at eff_ms (the
 * script's element 7), with figures: per part retry1, retry (-1: never),
 * reset (the reply's elements from 10 on). */
static void deny_remember(redis_store *r, const call *k, int64_t eff_ms, redisReply *const *figures) {
    if (!r->deny || atomic_load_explicit(&k->rp->twins, memory_order_relaxed)) return;
    const sluice_policy *p = &k->rp->policy;
    sluice__deny_part parts[SLUICE_POLICY_MAX_PARTS];
    for (size_t i = 0; i < p->n_parts; i++) {
        parts[i].retry1_ms = figures[3 * i]->integer;
        parts[i].retry_ms = figures[3 * i + 1]->integer < 0 ? INT64_MAX : figures[3 * i + 1]->integer;
        parts[i].reset_ms = figures[3 * i + 2]->integer;
    }
    int64_t at_ms = r->client_clock ? eff_ms : k->sent_ms - 2;
    sluice__deny_put_since(r->deny, p, k->pid, k->key, k->key_len, at_ms, k->cost, parts, &r->deny_epoch,
                           k->deny_epoch);
}

/* Call k's decision from the cache, when it holds one: 1 with d filled
 * (counted), else 0. With the client's clock, its waits count from the
 * caller's reading, as read_reply's do. */
static int deny_answer(redis_store *r, const call *k, sluice_decision *d) {
    if (!r->deny || k->verb != 'a' || atomic_load_explicit(&k->rp->twins, memory_order_relaxed)) return 0;
    int64_t now_ms = r->client_clock ? k->now_ms : sluice__redis_real_ms();
    if (!sluice__deny_get(r->deny, &k->rp->policy, k->pid, k->key, k->key_len, k->cost, now_ms, d)) return 0;
    if (r->client_clock) sluice__decision_lag(d, k->now_ms - k->reading_ms);
    atomic_fetch_add_explicit(&r->denied, 1, memory_order_relaxed);
    if (d->shadow_denied) atomic_fetch_add_explicit(&r->shadow_denied, 1, memory_order_relaxed);
    return 1;
}

/* After the server made a refund or reset of call k (or may have): no
 * denial of the key made before it stays. */
static void deny_forget(redis_store *r, const call *k) {
    if (!r->deny || (k->verb != 'r' && k->verb != 'x')) return;
    atomic_fetch_add(&r->deny_epoch, 1);
    sluice__deny_drop(r->deny, k->pid, k->key, k->key_len);
}

#define NAMES 1 /* read_reply: the script asks for more names */

/* Reads the script's reply into d: 0; NAMES, with the sorted sets the
 * script needs besides k's in *need (the key is kept by a configuration
 * with logs elsewhere: nothing changed); or -1 with why. With the
 * client's clock, waits count from the caller's reading (the script's
 * element 8 is the time it decided at), and an admission raises the
 * store's time. */
static int read_reply(redis_store *r, const call *k, redisReply *reply, sluice_decision *d, unsigned *need,
                      char *why, size_t whylen) {
    if (reply->type == REDIS_REPLY_ERROR) {
        snprintf(why, whylen, "%s", reply->str);
        return -1;
    }
    size_t n = reply->type == REDIS_REPLY_ARRAY ? reply->elements : 0;
    for (size_t i = 0; i < n; i++)
        if (reply->element[i]->type != REDIS_REPLY_INTEGER) n = 0;
    if (n == 2 && reply->element[0]->integer == -1 && reply->element[1]->integer > 0 &&
        reply->element[1]->integer <= ALL_LOGS && (reply->element[1]->integer & ~(long long)k->logs)) {
        *need = (unsigned)reply->element[1]->integer;
        return NAMES;
    }
    int figures = n == 10 + 3 * k->rp->policy.n_parts && k->verb == 'a' && reply->element[0]->integer == 0;
    if (n != 10 && !figures) {
        snprintf(why, whylen, "unexpected reply to the decision script");
        return -1;
    }
    d->allowed = reply->element[0]->integer != 0;
    d->enforced = true;
    d->shadow_denied = reply->element[9]->integer != 0;
    d->local = false;
    d->remaining = reply->element[1]->integer;
    d->retry_after_ms = reply->element[2]->integer;
    d->reset_ms = reply->element[3]->integer;
    d->delay_ms = reply->element[4]->integer;
    d->limit = reply->element[5]->integer;
    d->part = (int32_t)reply->element[6]->integer;
    d->part_reset_ms = reply->element[8]->integer;
    if (r->client_clock) {
        if (d->allowed && k->verb == 'a') sluice__store_time_raise(&r->now_ms, reply->element[7]->integer);
        sluice__decision_lag(d, reply->element[7]->integer - k->reading_ms);
    }
    if (figures) deny_remember(r, k, reply->element[7]->integer, reply->element + 10);
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

/* The same for a call: on_error=local makes it on the local limit
 * (local.c); any other on_error as above. */
static int failed_call(redis_store *r, const char *why, const call *k, sluice_decision *d) {
    if (r->local)
        return sluice__redis_local_decide(r, why, k->verb, &k->rp->policy, k->key, k->key_len, k->cost, k->reading_ms, d);
    return failed(r, why, d);
}

/* Store time, policy and arguments of one call (verb, cost at now_ms): 0
 * or an error. */
static int prepare(redis_store *r, const sluice_policy *p, const void *key, size_t key_len, char verb,
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
    k->rp = sluice__policy_item(&r->policies, id);
    k->pid = id;
    k->deny_epoch = atomic_load(&r->deny_epoch);
    k->sent_ms = r->client_clock ? 0 : sluice__redis_real_ms();
    k->key = key, k->key_len = key_len;
    k->verb = verb;
    /* a reset deletes every name the key may have, under any configuration */
    k->logs = verb == 'x' ? ALL_LOGS : k->rp->logs;
    k->cost = cost, k->now_ms = now_ms;
    build(r, k);
    return 0;
}

/* A decision counted (verbs are not decisions). */
static void count(redis_store *r, const call *k, const sluice_decision *d) {
    sluice__redis_local_answered(r); /* on_error=local: the server is back, local states go */
    if (k->verb != 'a') return;
    atomic_fetch_add_explicit(d->allowed ? &r->allowed : &r->denied, 1, memory_order_relaxed);
    if (d->shadow_denied) atomic_fetch_add_explicit(&r->shadow_denied, 1, memory_order_relaxed);
}

/* Sends call k by deadline_ms and reads its decision into d, calling again
 * with the names the script asks for (a key a configuration with other
 * logs keeps: then two round trips, or more when the key changes hands
 * meanwhile): 0, or what on_error says. */
static int run(redis_store *r, call *k, int64_t deadline_ms, sluice_decision *d) {
    char why[256];
    for (int round = 0;; round++) {
        redisReply *reply = sluice__redis_send(r, k, deadline_ms, why, sizeof why);
        if (!reply) return failed_call(r, why, k, d);
        unsigned need = 0;
        int rc = read_reply(r, k, reply, d, &need, why, sizeof why);
        freeReplyObject(reply);
        if (rc == 0) {
            count(r, k, d);
            return 0;
        }
        if (rc < 0) return failed_call(r, why, k, d);
        if (round == 3) return failed_call(r, "the key's configuration kept changing", k, d);
        k->logs |= need;
        build(r, k);
    }
}

int sluice__redis_acquire_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                             int64_t cost, int64_t now_ms, sluice_decision *d) {
    redis_store *r = (redis_store *)s;
    call k;
    int64_t deadline_ms = sluice__redis_deadline(r);
    int rc = prepare(r, p, key, key_len, 'a', cost, now_ms, &k);
    if (rc) return rc;
    return deny_answer(r, &k, d) ? 0 : run(r, &k, deadline_ms, d);
}

/* Peek and refund as the script's verbs, in one round trip as a decision;
 * a reset deletes every name the key may have (the script's DEL of all
 * nine, then a peek of cost 1 on a fresh state at its time). */
int sluice__redis_operate_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                             sluice__verb verb, int64_t cost, int64_t now_ms, sluice_decision *d) {
    redis_store *r = (redis_store *)s;
    call k;
    int64_t deadline_ms = sluice__redis_deadline(r);
    char v = verb == SLUICE__VERB_PEEK ? 'p' : verb == SLUICE__VERB_REFUND ? 'r' : 'x';
    int rc = prepare(r, p, key, key_len, v, cost, now_ms, &k);
    if (rc) return rc;
    rc = run(r, &k, deadline_ms, d);
    deny_forget(r, &k); /* made, or may have been */
    return rc;
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
        sluice__store_errf(s, "redis: out of memory for a batch of %zu", n);
        free(calls);
        free(pending);
        free(dest);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        if (results[i]) continue;
        results[i] = prepare(r, reqs[i].policy, reqs[i].key, reqs[i].key_len, 'a', reqs[i].cost, now_ms, &calls[i]);
        pending[i] = results[i] == 0 && !deny_answer(r, &calls[i], &out[i]);
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
                results[i] = failed_call(r, why, &calls[i], &out[i]);
                pending[i] = 0;
                continue;
            }
            redisReply *reply = v;
            unsigned need = 0;
            int rc = read_reply(r, &calls[i], reply, &out[i], &need, why, sizeof why);
            if (rc == 0) {
                count(r, &calls[i], &out[i]);
                pending[i] = 0;
            } else if (rc == NAMES) { /* again below, with the names it needs */
                calls[i].logs |= need;
                build(r, &calls[i]);
            } else if (!sluice__redis_not_run(reply)) { /* an error the script may have met mid-way */
                results[i] = failed_call(r, why, &calls[i], &out[i]);
                pending[i] = 0;
            }
            freeReplyObject(reply);
        }
        if (shortened && !broken) sluice__redis_restore_timeout(r, c);
        sluice__redis_give(nd, c, broken);
    }
    for (size_t i = 0; i < n; i++)
        if (pending[i]) results[i] = run(r, &calls[i], deadline_ms, &out[i]);
    free(dest);
    free(calls);
    free(pending);
}

/* ---- the same steps one at a time, for the non-blocking calls (async.c) ---- */

int sluice__redis_prepare(redis_store *r, const sluice_policy *p, const void *key, size_t key_len, char verb,
                          int64_t cost, int64_t now_ms, call *k) {
    return prepare(r, p, key, key_len, verb, cost, now_ms, k);
}

void sluice__redis_build(redis_store *r, call *k) { build(r, k); }

int sluice__redis_read_reply(redis_store *r, const call *k, redisReply *reply, sluice_decision *d, unsigned *need,
                             char *why, size_t whylen) {
    return read_reply(r, k, reply, d, need, why, whylen);
}

int sluice__redis_failed(redis_store *r, const char *why, const call *k, sluice_decision *d) {
    return failed_call(r, why, k, d);
}

int sluice__redis_deny_answer(redis_store *r, const call *k, sluice_decision *d) { return deny_answer(r, k, d); }

void sluice__redis_deny_forget(redis_store *r, const call *k) { deny_forget(r, k); }

void sluice__redis_count(redis_store *r, const call *k, const sluice_decision *d) { count(r, k, d); }
