/* store/redis/redis.c: per-key state in Redis, for limits shared by many
 * hosts. "redis://HOST:PORT[/DB]?..." or "redis-cluster://H:P[,H:P...]?...".
 *
 * One decision is one round trip: EVALSHA of decide.lua, which decides every
 * part of the policy atomically on the server with the same exact semantics
 * as the C algorithms (on NOSCRIPT the script is loaded and the call made
 * once more). Keys travel as binary-safe arguments, never inside a command
 * string. A key's Redis names:
 *
 *   PREFIX{NAME|FP|LEN:KEY}        its state        (FP: 16 hex digits of the
 *   PREFIX{NAME|FP|LEN:KEY}:I      sliding-log part I  policy's configuration)
 *
 * LEN makes the names unambiguous for any key bytes, and everything up to
 * the first '}' is shared, so all names of one decision hash to one slot.
 * Every write sets an expiry: the time until the key is fresh again (plus
 * ttl_grace_ms, by default 60 s with clock=client only).
 *
 * Time: by default the script reads the server's TIME, so hosts with skewed
 * clocks agree; clock=client sends the store's clock reading (tests,
 * simulations), kept from running backwards like every store's time.
 *
 * Faults: connect and command timeouts; when the server cannot decide, the
 * store admits unenforced, denies, or returns SLUICE_ESTORE (on_error). A
 * broken connection is dropped; the next call connects again, at most once
 * per 100 ms per node while the server stays down, so a dead server costs
 * callers a timeout only now and then.
 *
 * Time bound: a call (a decision, a batch, stats) ends by its deadline,
 * connect_timeout_ms + timeout_ms after it starts. Getting a connection
 * (waiting for one of the pool's, or connecting) may take until
 * timeout_ms before the deadline, so that the first command has all of
 * timeout_ms; every later command (a script load, a redirection) gets
 * timeout_ms or what is left, whichever is less.
 *
 * Threads: each node has a pool of connections (pool=N, default 8); a
 * caller takes one for the round trip. */
#define _GNU_SOURCE
#include "internal.h"
#include "redis_internal.h"

#include <errno.h>
#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define POOL_DEFAULT 8
#define POOL_MAX 64
#define NODES_MAX 64
#define RETRY_MS 100                  /* a down node is tried again after this */
#define NO_DEADLINE INT64_MAX         /* open: each step has its own timeouts */
#define CLIENT_TIME_MAX_MS (INT64_C(1) << 50) /* exact in Lua's doubles */
#define EXACT_MAX (INT64_C(1) << 51)  /* products the script forms stay < 2^53 */
#define NAME_MAX_BYTES (64 + SLUICE_POLICY_NAME_MAX + 48 + SLUICE_KEY_MAX)
#define ARGS_MAX (3 + 1 + SLUICE_POLICY_MAX_PARTS + 3 + 4 * SLUICE_POLICY_MAX_PARTS)

typedef struct {
    char host[256];
    int port;
    pthread_mutex_t mu; /* guards the pool */
    pthread_cond_t freed; /* a connection came back, or a place in the pool (CLOCK_MONOTONIC) */
    redisContext *idle[POOL_MAX];
    int n_idle, n_open;
    int failed;                  /* the last connect or command failed */
    _Atomic int64_t retry_at_ms; /* while down: no connect before this  */
} node;

/* What the store knows of a policy: the start of its key names, its
 * script arguments, and how many of its parts keep a sorted set of their
 * own (a state that grows: SLUICE__ALGO_GROWS). */
typedef struct {
    sluice_policy policy;
    char name[64 + SLUICE_POLICY_NAME_MAX + 24]; /* PREFIX{NAME|FP| */
    size_t name_len;
    int n_logs; /* parts with a sorted set of their own */
    char args[4 * SLUICE_POLICY_MAX_PARTS][24];
} rpolicy;

typedef struct {
    struct sluice_store head;
    int cluster;
    int db;
    int client_clock;
    sluice_on_error on_error;
    int64_t connect_timeout_ms, timeout_ms, ttl_grace_ms;
    int pool;
    int verify; /* open: PING every node it needs */
    char prefix[64];
    char sha[41];
    sluice__policy_set policies; /* items: rpolicy */
    _Atomic int64_t now_ms;      /* clock=client: the store's time */
    pthread_mutex_t nodes_mu;    /* guards n_nodes growing and slots */
    node *nodes[NODES_MAX];
    _Atomic int n_nodes;
    _Atomic uint8_t slots[16384]; /* cluster: slot -> node */
    atomic_llong allowed, denied, failures, reconnects;
} redis_store;

/* ---- time ---- */

static int64_t real_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static struct timeval tv_of(int64_t ms) {
    struct timeval tv = {.tv_sec = (time_t)(ms / 1000), .tv_usec = (suseconds_t)(ms % 1000) * 1000};
    return tv;
}

/* The deadline of a call that starts now (see the top of the file). */
static int64_t deadline_of(const redis_store *r) {
    return real_ms() + r->connect_timeout_ms + r->timeout_ms;
}

/* limit_ms, or what is left until until_ms when that is less (at least 1). */
static int64_t within(int64_t limit_ms, int64_t until_ms) {
    int64_t left_ms = until_ms - real_ms();
    return left_ms < limit_ms ? (left_ms > 1 ? left_ms : 1) : limit_ms;
}

/* Waits on cond until until_ms (CLOCK_MONOTONIC); ETIMEDOUT when it passed. */
static int wait_until(pthread_cond_t *cond, pthread_mutex_t *mu, int64_t until_ms) {
    if (until_ms >= NO_DEADLINE / 2) return pthread_cond_wait(cond, mu);
    struct timespec ts = {.tv_sec = (time_t)(until_ms / 1000), .tv_nsec = (long)(until_ms % 1000) * 1000000L};
    return pthread_cond_timedwait(cond, mu, &ts);
}

/* ---- connections ---- */

static node *node_new(const char *host, size_t host_len, int port) {
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

static void node_free(node *n) {
    for (int i = 0; i < n->n_idle; i++) redisFree(n->idle[i]);
    pthread_mutex_destroy(&n->mu);
    pthread_cond_destroy(&n->freed);
    free(n);
}

/* Before c's next command of a call that ends by deadline_ms: its
 * timeout is timeout_ms, or what is left when that is less. 1 when it was
 * shortened: restore_timeout() then puts timeout_ms back. */
static int shorten_timeout(const redis_store *r, redisContext *c, int64_t deadline_ms) {
    int64_t ms = within(r->timeout_ms, deadline_ms);
    if (ms == r->timeout_ms) return 0;
    redisSetTimeout(c, tv_of(ms));
    return 1;
}

static void restore_timeout(const redis_store *r, redisContext *c) {
    redisSetTimeout(c, tv_of(r->timeout_ms));
}

/* Runs one command on c by deadline_ms; NULL and why on failure (c is
 * then unusable). */
static redisReply *run(const redis_store *r, redisContext *c, int64_t deadline_ms, int argc,
                       const char **argv, const size_t *lens, char *why, size_t whylen) {
    int shortened = shorten_timeout(r, c, deadline_ms);
    redisReply *reply = redisCommandArgv(c, argc, argv, lens);
    if (!reply) snprintf(why, whylen, "%s", c->errstr[0] ? c->errstr : "connection lost");
    else if (shortened) restore_timeout(r, c);
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
        redisReply *reply = run(r, c, deadline_ms, 2, argv, lens, why, whylen);
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
static redisContext *take(redis_store *r, node *n, int64_t deadline_ms, char *why, size_t whylen) {
    int64_t until_ms = deadline_ms - r->timeout_ms;
    pthread_mutex_lock(&n->mu);
    for (;;) {
        if (n->failed && real_ms() < atomic_load(&n->retry_at_ms)) {
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
        atomic_store(&n->retry_at_ms, real_ms() + RETRY_MS);
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
static void give(node *n, redisContext *c, int broken) {
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
            atomic_store(&n->retry_at_ms, real_ms() + RETRY_MS);
        }
        pthread_cond_broadcast(&n->freed); /* places in the pool, or down */
    } else {
        n->idle[n->n_idle++] = c;
        pthread_cond_signal(&n->freed);
    }
    pthread_mutex_unlock(&n->mu);
}

/* ---- cluster: which node serves which slot ---- */

/* The index of node host:port among the first count, or count. */
static int find_node(redis_store *r, int count, const char *host, size_t host_len, int port) {
    int i;
    for (i = 0; i < count; i++)
        if (r->nodes[i]->port == port && strlen(r->nodes[i]->host) == host_len &&
            !memcmp(r->nodes[i]->host, host, host_len))
            break;
    return i;
}

/* The index of node host:port, added when new (-1: no room or memory). */
static int node_index(redis_store *r, const char *host, size_t host_len, int port) {
    int count = atomic_load(&r->n_nodes);
    int i = find_node(r, count, host, host_len, port);
    if (i < count) return i;
    pthread_mutex_lock(&r->nodes_mu);
    count = atomic_load(&r->n_nodes);
    i = find_node(r, count, host, host_len, port);
    if (i == count) {
        node *n = count < NODES_MAX ? node_new(host, host_len, port) : NULL;
        if (!n) i = -1;
        else {
            r->nodes[count] = n;
            atomic_store(&r->n_nodes, count + 1);
        }
    }
    pthread_mutex_unlock(&r->nodes_mu);
    return i;
}

/* The index of node host:port as node from names it (in CLUSTER SLOTS or
 * a redirection); an empty host is from's own: a node that does not know
 * its address (a one-node cluster without announce-ip) names itself so. */
static int node_named_by(redis_store *r, const node *from, const char *host, size_t host_len, int port) {
    return host_len ? node_index(r, host, host_len, port) : node_index(r, from->host, strlen(from->host), port);
}

/* Reads the slot map (CLUSTER SLOTS) from the first node that answers, by
 * deadline_ms. */
static int refresh_slots(redis_store *r, int64_t deadline_ms, char *why, size_t whylen) {
    int count = atomic_load(&r->n_nodes);
    for (int i = 0; i < count; i++) {
        node *n = r->nodes[i];
        redisContext *c = take(r, n, deadline_ms, why, whylen);
        if (!c) continue;
        const char *argv[] = {"CLUSTER", "SLOTS"};
        size_t lens[] = {7, 5};
        redisReply *reply = run(r, c, deadline_ms, 2, argv, lens, why, whylen);
        if (!reply || reply->type != REDIS_REPLY_ARRAY) {
            if (reply) {
                snprintf(why, whylen, "CLUSTER SLOTS: %s", reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
                freeReplyObject(reply);
            }
            give(n, c, reply == NULL);
            continue;
        }
        for (size_t k = 0; k < reply->elements; k++) {
            redisReply *e = reply->element[k];
            if (e->type != REDIS_REPLY_ARRAY || e->elements < 3) continue;
            redisReply *master = e->element[2];
            if (master->type != REDIS_REPLY_ARRAY || master->elements < 2) continue;
            int at = node_named_by(r, n, master->element[0]->str, master->element[0]->len,
                                   (int)master->element[1]->integer);
            if (at < 0) continue;
            for (long long s = e->element[0]->integer; s <= e->element[1]->integer && s < 16384; s++)
                atomic_store_explicit(&r->slots[s], (uint8_t)at, memory_order_release);
        }
        freeReplyObject(reply);
        give(n, c, 0);
        return 0;
    }
    return -1;
}

/* "MOVED 3999 127.0.0.1:6381" from node from: the node index named, or
 * -1. */
static int redirect_target(redis_store *r, const node *from, const char *err) {
    const char *sp = strchr(err, ' ');
    sp = sp ? strchr(sp + 1, ' ') : NULL;
    if (!sp) return -1;
    const char *colon = strrchr(sp + 1, ':');
    if (!colon) return -1;
    return node_named_by(r, from, sp + 1, (size_t)(colon - sp - 1), atoi(colon + 1));
}

/* why, for a call sent on c to n that got no reply: it may have run. */
static void lost_reply(const redis_store *r, const node *n, const redisContext *c, char *why, size_t whylen) {
    char what[160];
    if (c->err == REDIS_ERR_IO && !strcmp(c->errstr, strerror(EAGAIN)))
        snprintf(what, sizeof what, "no reply within timeout_ms=%lld (or what was left of the call's "
                 "connect_timeout_ms + timeout_ms)", (long long)r->timeout_ms);
    else
        snprintf(what, sizeof what, "%s", c->errstr[0] ? c->errstr : "connection lost");
    snprintf(why, whylen, "%.100s:%d: %.100s (the call was sent: it may have taken effect)", n->host, n->port, what);
}

/* ---- policies ---- */

static int rpolicy_init(void *item, void *ctx) {
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

typedef struct {
    const char *argv[ARGS_MAX];
    size_t lens[ARGS_MAX];
    int argc;
    char names[1 + SLUICE_POLICY_MAX_PARTS][NAME_MAX_BYTES + 8];
    char now[24], cost[24], grace[24], numkeys[8];
    unsigned slot;
    int64_t reading_ms; /* clock=client: the caller's reading */
} call;

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
        if (!(rp->policy.algo[i]->flags & SLUICE__ALGO_GROWS)) continue; /* a log: its own sorted set */
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

static int load_script(const redis_store *r, redisContext *c, int64_t deadline_ms, char *why, size_t whylen) {
    const char *argv[] = {"SCRIPT", "LOAD", sluice__redis_decide_lua};
    size_t lens[] = {6, 4, strlen(sluice__redis_decide_lua)};
    redisReply *reply = run(r, c, deadline_ms, 3, argv, lens, why, whylen);
    if (!reply) return -1;
    int ok = reply->type == REDIS_REPLY_STRING;
    if (!ok) snprintf(why, whylen, "SCRIPT LOAD: %s", reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
    freeReplyObject(reply);
    return ok ? 0 : 1;
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

static node *node_for(redis_store *r, unsigned slot) {
    return r->nodes[r->cluster ? atomic_load_explicit(&r->slots[slot], memory_order_acquire) : 0];
}

/* Whether a reply proves the server did not run the call (so it may be
 * sent again): NOSCRIPT, MOVED, ASK, TRYAGAIN. */
static int not_run(const redisReply *reply) {
    return reply->type == REDIS_REPLY_ERROR &&
           (!strncmp(reply->str, "NOSCRIPT", 8) || !strncmp(reply->str, "MOVED ", 6) ||
            !strncmp(reply->str, "ASK ", 4) || !strncmp(reply->str, "TRYAGAIN", 8));
}

/* Sends one call, following NOSCRIPT (load, again), MOVED (learn, again)
 * and ASK (ASKING there, once), TRYAGAIN (within the timeout): replies that
 * prove the server did not run it. A call that may have run (the
 * connection broke after sending) is never sent again. The reply by
 * deadline_ms, or NULL with why. */
static redisReply *send_call(redis_store *r, call *k, int64_t deadline_ms, char *why, size_t whylen) {
    int ask = -1;
    int64_t start = real_ms(), pause = 1;
    node *held_node = NULL;
    redisContext *held = NULL; /* after NOSCRIPT: the same connection again */
    for (int attempt = 0; attempt < 5; attempt++) {
        node *n = held ? held_node : ask >= 0 ? r->nodes[ask] : node_for(r, k->slot);
        redisContext *c = held ? held : take(r, n, deadline_ms, why, whylen);
        held = NULL;
        if (!c) {
            if (r->cluster && refresh_slots(r, deadline_ms, why, whylen) == 0 && attempt < 2) continue;
            return NULL;
        }
        if (ask >= 0) {
            const char *argv[] = {"ASKING"};
            size_t lens[] = {6};
            redisReply *ok = run(r, c, deadline_ms, 1, argv, lens, why, whylen);
            if (ok) freeReplyObject(ok);
            ask = -1;
        }
        redisReply *reply = run(r, c, deadline_ms, k->argc, k->argv, k->lens, why, whylen);
        if (!reply) {
            /* sent, maybe run: sending it again could charge it twice, so
             * this call fails; a cluster learns its slots for the next */
            lost_reply(r, n, c, why, whylen);
            give(n, c, 1);
            if (r->cluster) {
                char ignored[256];
                refresh_slots(r, deadline_ms, ignored, sizeof ignored);
            }
            return NULL;
        }
        if (reply->type == REDIS_REPLY_ERROR && !strncmp(reply->str, "NOSCRIPT", 8)) {
            freeReplyObject(reply);
            int rc = load_script(r, c, deadline_ms, why, whylen);
            if (rc) {
                give(n, c, rc < 0);
                return NULL;
            }
            held = c, held_node = n;
            continue;
        }
        if (reply->type == REDIS_REPLY_ERROR && !strncmp(reply->str, "TRYAGAIN", 8) &&
            real_ms() + pause - start < r->timeout_ms && real_ms() + pause < deadline_ms) {
            /* a decision of several names while its slot migrates, not all
             * on one node yet: the migration ends soon (bounded by the
             * command timeout) */
            freeReplyObject(reply);
            give(n, c, 0);
            struct timespec ts = {0, (long)pause * 1000000L};
            nanosleep(&ts, NULL);
            if (pause < 16) pause *= 2;
            attempt = -1; /* the redirections start over: ASK, then here again */
            continue;
        }
        if (reply->type == REDIS_REPLY_ERROR &&
            (!strncmp(reply->str, "MOVED ", 6) || !strncmp(reply->str, "ASK ", 4))) {
            int moved = reply->str[0] == 'M';
            int target = redirect_target(r, n, reply->str);
            freeReplyObject(reply);
            give(n, c, 0);
            if (target < 0) {
                snprintf(why, whylen, "cannot follow a cluster redirection");
                return NULL;
            }
            if (moved) atomic_store_explicit(&r->slots[k->slot], (uint8_t)target, memory_order_release);
            else ask = target;
            continue;
        }
        give(n, c, 0);
        return reply;
    }
    snprintf(why, whylen, "too many redirections");
    return NULL;
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

static void count(redis_store *r, const sluice_decision *d) {
    atomic_fetch_add_explicit(d->allowed ? &r->allowed : &r->denied, 1, memory_order_relaxed);
}

static int redis_acquire_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                            int64_t cost, int64_t now_ms, sluice_decision *d) {
    redis_store *r = (redis_store *)s;
    call k;
    char why[256];
    int64_t deadline_ms = deadline_of(r);
    int rc = prepare(r, p, key, key_len, cost, now_ms, &k);
    if (rc) return rc;
    redisReply *reply = send_call(r, &k, deadline_ms, why, sizeof why);
    if (!reply) return failed(r, why, d);
    rc = read_decision(r, &k, reply, d, why, sizeof why);
    freeReplyObject(reply);
    if (rc) return failed(r, why, d);
    count(r, d);
    return 0;
}

/* A batch: per node, every call appended, then every reply read: one
 * round trip per node. Calls that need more (NOSCRIPT, MOVED, a broken
 * connection) are then sent one by one. */
static void redis_acquire_many(sluice_store *s, const sluice_request *reqs, size_t n, int64_t now_ms,
                               sluice_decision *out, int *results) {
    redis_store *r = (redis_store *)s;
    int64_t deadline_ms = deadline_of(r);
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
    for (size_t i = 0; i < n; i++) dest[i] = pending[i] ? node_for(r, calls[i].slot) : NULL;
    char why[256];
    int count_nodes = r->cluster ? atomic_load(&r->n_nodes) : 1;
    for (int at = 0; at < count_nodes; at++) {
        node *nd = r->nodes[at];
        size_t sent = 0;
        for (size_t i = 0; i < n; i++) sent += pending[i] && dest[i] == nd;
        if (!sent) continue;
        redisContext *c = take(r, nd, deadline_ms, why, sizeof why);
        if (!c) continue; /* one by one below, where the failure is handled */
        for (size_t i = 0; i < n; i++)
            if (pending[i] && dest[i] == nd) redisAppendCommandArgv(c, calls[i].argc, calls[i].argv, calls[i].lens);
        int broken = 0, shortened = shorten_timeout(r, c, deadline_ms);
        for (size_t i = 0; i < n; i++) {
            if (!pending[i] || dest[i] != nd) continue;
            void *v = NULL;
            if (broken || redisGetReply(c, &v) != REDIS_OK || !v) {
                /* sent, maybe run: failed, never sent twice */
                if (!broken) lost_reply(r, nd, c, why, sizeof why);
                broken = 1;
                results[i] = failed(r, why, &out[i]);
                pending[i] = 0;
                continue;
            }
            redisReply *reply = v;
            if (read_decision(r, &calls[i], reply, &out[i], why, sizeof why) == 0) {
                count(r, &out[i]);
                pending[i] = 0;
            } else if (!not_run(reply)) { /* an error the script may have met mid-way */
                results[i] = failed(r, why, &out[i]);
                pending[i] = 0;
            }
            freeReplyObject(reply);
        }
        if (shortened && !broken) restore_timeout(r, c);
        give(nd, c, broken);
    }
    for (size_t i = 0; i < n; i++) {
        if (!pending[i]) continue;
        redisReply *reply = send_call(r, &calls[i], deadline_ms, why, sizeof why);
        if (!reply) {
            results[i] = failed(r, why, &out[i]);
            continue;
        }
        int rc = read_decision(r, &calls[i], reply, &out[i], why, sizeof why);
        freeReplyObject(reply);
        if (rc) results[i] = failed(r, why, &out[i]);
        else count(r, &out[i]);
    }
    free(dest);
    free(calls);
    free(pending);
}

/* ---- the store ---- */

/* The nodes a decision may need, marked in needed[]: a cluster's that
 * serve slots now, each once (not the seeds under another name, nor nodes
 * that left); else the one server. The count of nodes to look through. */
static int needed_nodes(redis_store *r, uint8_t needed[NODES_MAX]) {
    memset(needed, 0, NODES_MAX);
    if (!r->cluster) {
        needed[0] = 1;
        return 1;
    }
    for (int slot = 0; slot < 16384; slot++)
        needed[atomic_load_explicit(&r->slots[slot], memory_order_acquire)] = 1;
    return atomic_load(&r->n_nodes);
}

/* A command of one word outside any decision (DBSIZE, PING) on node n by
 * deadline_ms: its reply, or NULL with why, which names n. */
static redisReply *ask(redis_store *r, node *n, const char *cmd, int64_t deadline_ms, char *why, size_t whylen) {
    redisContext *c = take(r, n, deadline_ms, why, whylen);
    if (!c) return NULL;
    const char *argv[] = {cmd};
    size_t lens[] = {strlen(cmd)};
    char what[160];
    redisReply *reply = run(r, c, deadline_ms, 1, argv, lens, what, sizeof what);
    if (!reply && c->err == REDIS_ERR_IO && !strcmp(c->errstr, strerror(EAGAIN)))
        snprintf(what, sizeof what, "no reply within timeout_ms=%lld", (long long)r->timeout_ms);
    else if (reply && reply->type == REDIS_REPLY_ERROR)
        snprintf(what, sizeof what, "%.150s", reply->str);
    give(n, c, reply == NULL);
    if (reply && reply->type == REDIS_REPLY_ERROR) {
        freeReplyObject(reply);
        reply = NULL;
    }
    if (!reply) snprintf(why, whylen, "%.100s:%d: %s: %s", n->host, n->port, cmd, what);
    return reply;
}

/* keys: DBSIZE of every node needed; -1 when one does not answer, with
 * the store's message saying which and why (store.c: SLUICE_ESTORE). */
static void redis_stats(sluice_store *s, sluice_stats *out) {
    redis_store *r = (redis_store *)s;
    int64_t deadline_ms = deadline_of(r);
    out->capacity = -1; /* bounded by the server's maxmemory, and by expiry */
    out->allowed = atomic_load(&r->allowed);
    out->denied = atomic_load(&r->denied);
    out->failures = atomic_load(&r->failures);
    out->reconnects = atomic_load(&r->reconnects);
    out->keys = 0;
    uint8_t needed[NODES_MAX];
    int count_nodes = needed_nodes(r, needed);
    for (int i = 0; i < count_nodes && out->keys >= 0; i++) {
        if (!needed[i]) continue;
        char why[320];
        redisReply *reply = ask(r, r->nodes[i], "DBSIZE", deadline_ms, why, sizeof why);
        if (reply && reply->type == REDIS_REPLY_INTEGER) {
            out->keys += reply->integer;
        } else {
            if (reply) snprintf(why, sizeof why, "%.100s:%d: DBSIZE: unexpected reply", r->nodes[i]->host, r->nodes[i]->port);
            sluice__store_errf(&r->head, "redis: cannot count the keys: %s", why);
            out->keys = -1;
        }
        if (reply) freeReplyObject(reply);
    }
}

/* verify=1: every node needed answers PING, each within its own
 * connect_timeout_ms + timeout_ms; 0, or SLUICE_ESTORE with err naming
 * the first that does not. */
static int verify_nodes(redis_store *r, char *err, size_t errlen) {
    uint8_t needed[NODES_MAX];
    int count_nodes = needed_nodes(r, needed);
    for (int i = 0; i < count_nodes; i++) {
        if (!needed[i]) continue;
        char why[320];
        redisReply *reply = ask(r, r->nodes[i], "PING", deadline_of(r), why, sizeof why);
        int ok = reply && reply->type == REDIS_REPLY_STATUS && !strcmp(reply->str, "PONG");
        if (reply && !ok) snprintf(why, sizeof why, "%.100s:%d: PING: unexpected reply", r->nodes[i]->host, r->nodes[i]->port);
        if (reply) freeReplyObject(reply);
        if (!ok) {
            sluice__errf(err, errlen, "%s: verify=1: the server does not answer: %s",
                         r->cluster ? "redis-cluster" : "redis", why);
            return SLUICE_ESTORE;
        }
    }
    return 0;
}

static void redis_close(sluice_store *s) {
    redis_store *r = (redis_store *)s;
    for (int i = 0; i < atomic_load(&r->n_nodes); i++) node_free(r->nodes[i]);
    sluice__policy_set_free(&r->policies);
    pthread_mutex_destroy(&r->nodes_mu);
    free(r);
}

/* "host:port" (port default 6379) into a node; 0 or an error. */
static int add_seed(redis_store *r, const char *text, size_t len, char *err, size_t errlen) {
    const char *colon = memchr(text, ':', len);
    size_t host_len = colon ? (size_t)(colon - text) : len;
    long port = 6379;
    if (colon) {
        char digits[8] = {0};
        size_t dl = len - host_len - 1;
        if (dl == 0 || dl >= sizeof digits) port = -1;
        else {
            memcpy(digits, colon + 1, dl);
            char *end;
            port = strtol(digits, &end, 10);
            if (*end || digits[0] < '0' || digits[0] > '9') port = -1; /* no sign, no space */
        }
    }
    if (host_len == 0 || host_len >= 256 || port < 1 || port > 65535) {
        sluice__errf(err, errlen, "store URL host \"%.*s\" is not HOST[:PORT]", (int)len, text);
        return SLUICE_EINVAL;
    }
    if (node_index(r, text, host_len, (int)port) < 0) return SLUICE_ENOMEM;
    return 0;
}

/* The URL parameters redis:// and redis-cluster:// take (kinds.c reads
 * them). */
enum { P_TIMEOUT, P_CONNECT_TIMEOUT, P_ON_ERROR, P_CLOCK, P_PREFIX, P_POOL, P_TTL_GRACE, P_VERIFY };
static const char *const on_error_names[] = {"allow", "deny", "error", NULL}; /* sluice_on_error's order */
static const char *const clock_names[] = {"server", "client", NULL};
static const sluice__param redis_params[] = {
    [P_TIMEOUT] = {"timeout_ms", SLUICE__PARAM_INT, 1, 3600000, 100, NULL, NULL, NULL, SLUICE__OPT_TIMEOUT},
    [P_CONNECT_TIMEOUT] = {"connect_timeout_ms", SLUICE__PARAM_INT, 1, 3600000, 200, NULL, NULL, NULL,
                           SLUICE__OPT_CONNECT_TIMEOUT},
    [P_ON_ERROR] = {"on_error", SLUICE__PARAM_CHOICE, 0, 0, SLUICE_ON_ERROR_ALLOW, on_error_names, NULL, NULL,
                    SLUICE__OPT_ON_ERROR},
    [P_CLOCK] = {"clock", SLUICE__PARAM_CHOICE, 0, 0, 0, clock_names, NULL, NULL, SLUICE__OPT_CALLER_CLOCK},
    [P_PREFIX] = {"prefix", SLUICE__PARAM_TEXT, 0, 63, 0, NULL, "sluice:", "{}", SLUICE__OPT_NONE},
    [P_POOL] = {"pool", SLUICE__PARAM_INT, 1, POOL_MAX, POOL_DEFAULT, NULL, NULL, NULL, SLUICE__OPT_NONE},
    [P_TTL_GRACE] = {"ttl_grace_ms", SLUICE__PARAM_INT, 0, INT64_C(1) << 40, 0, NULL, NULL, NULL, SLUICE__OPT_NONE},
    [P_VERIFY] = {"verify", SLUICE__PARAM_INT, 0, 1, 0, NULL, NULL, NULL, SLUICE__OPT_NONE},
};

static int open_common(const sluice__store_config *cfg, sluice_store **out, char *err, size_t errlen, int cluster) {
    redis_store *r = calloc(1, sizeof *r);
    if (!r) return SLUICE_ENOMEM;
    r->cluster = cluster;
    r->on_error = (sluice_on_error)cfg->value[P_ON_ERROR];
    r->connect_timeout_ms = cfg->value[P_CONNECT_TIMEOUT];
    r->timeout_ms = cfg->value[P_TIMEOUT];
    r->pool = (int)cfg->value[P_POOL];
    r->verify = (int)cfg->value[P_VERIFY];
    r->client_clock = (int)cfg->value[P_CLOCK];
    /* 60 s of grace with the client's clock, none with the server's */
    r->ttl_grace_ms = (cfg->given >> P_TTL_GRACE) & 1 ? cfg->value[P_TTL_GRACE] : r->client_clock ? 60000 : 0;
    memcpy(r->prefix, cfg->text[P_PREFIX], cfg->text_len[P_PREFIX]);
    r->prefix[cfg->text_len[P_PREFIX]] = 0;
    atomic_init(&r->now_ms, -CLIENT_TIME_MAX_MS); /* no reading yet: the lowest */
    pthread_mutex_init(&r->nodes_mu, NULL);
    r->policies.item_size = sizeof(rpolicy);
    r->policies.init = rpolicy_init;
    r->policies.ctx = r;
    sluice__sha1_hex(sluice__redis_decide_lua, strlen(sluice__redis_decide_lua), r->sha);
    int rc = 0;
    /* //HOST:PORT[,HOST:PORT...][/DB] */
    const char *path = cfg->path;
    size_t plen = cfg->path_len;
    if (plen < 2 || path[0] != '/' || path[1] != '/') {
        sluice__errf(err, errlen, "%s: expected %s://HOST:PORT%s", cfg->base, cfg->scheme,
                     cluster ? "[,HOST:PORT...]" : "[/DB]");
        rc = SLUICE_EINVAL;
        goto fail;
    }
    path += 2, plen -= 2;
    const char *slash = memchr(path, '/', plen);
    size_t hosts_len = slash ? (size_t)(slash - path) : plen;
    if (slash) {
        char *end;
        char digits[16] = {0};
        size_t dl = plen - hosts_len - 1;
        long db = -1;
        if (dl > 0 && dl < sizeof digits) {
            memcpy(digits, slash + 1, dl);
            db = strtol(digits, &end, 10);
            if (*end || digits[0] < '0' || digits[0] > '9') db = -1; /* no sign, no space */
        }
        if (cluster || db < 0 || db > 1000000) {
            sluice__errf(err, errlen, "store URL database \"%.*s\": %s", (int)dl, slash + 1,
                         cluster ? "a cluster has only database 0" : "expected a number");
            rc = SLUICE_EINVAL;
            goto fail;
        }
        r->db = (int)db;
    }
    for (size_t at = 0; at < hosts_len && rc == 0;) {
        const char *comma = memchr(path + at, ',', hosts_len - at);
        size_t len = comma ? (size_t)(comma - path - at) : hosts_len - at;
        if (!cluster && comma) {
            sluice__errf(err, errlen, "store URL redis:// takes one host (use redis-cluster:// for several)");
            rc = SLUICE_EINVAL;
        } else {
            rc = add_seed(r, path + at, len, err, errlen);
        }
        at += len + 1;
    }
    if (rc == 0 && atomic_load(&r->n_nodes) == 0) {
        sluice__errf(err, errlen, "store URL names no host");
        rc = SLUICE_EINVAL;
    }
    if (rc) goto fail;
    if (cluster) {
        char why[256];
        if (refresh_slots(r, NO_DEADLINE, why, sizeof why) != 0) {
            sluice__errf(err, errlen, "redis-cluster: no seed node answered CLUSTER SLOTS (%s)", why);
            rc = SLUICE_ESTORE;
            goto fail;
        }
    }
    if (r->verify && (rc = verify_nodes(r, err, errlen)) != 0) goto fail;
    *out = &r->head;
    return 0;
fail:
    redis_close(&r->head);
    return rc;
}

static int redis_open(const sluice__store_config *cfg, sluice_store **out, char *err, size_t errlen) {
    return open_common(cfg, out, err, errlen, 0);
}

static int cluster_open(const sluice__store_config *cfg, sluice_store **out, char *err, size_t errlen) {
    return open_common(cfg, out, err, errlen, 1);
}

/* Found by store.c through weak references: exported, though internal. */
__attribute__((visibility("default"))) const sluice__store_ops sluice_redis_store = {
    .version = SLUICE__STORE_INTERFACE,
    .scheme = "redis",
    .params = redis_params,
    .n_params = sizeof redis_params / sizeof redis_params[0],
    .open = redis_open,
    .acquire_at = redis_acquire_at,
    .stats = redis_stats,
    .close = redis_close,
    .acquire_many = redis_acquire_many,
};

__attribute__((visibility("default"))) const sluice__store_ops sluice_redis_cluster_store = {
    .version = SLUICE__STORE_INTERFACE,
    .scheme = "redis-cluster",
    .params = redis_params,
    .n_params = sizeof redis_params / sizeof redis_params[0],
    .open = cluster_open,
    .acquire_at = redis_acquire_at,
    .stats = redis_stats,
    .close = redis_close,
    .acquire_many = redis_acquire_many,
};
