/* store/redis/redis.c: per-key state in Redis, for limits shared by many
 * hosts. "redis://HOST:PORT[/DB]?..." or "redis-cluster://H:P[,H:P...]?...".
 *
 * One decision, peek, refund or reset is one round trip: EVALSHA of
 * decide.lua, which decides every part of the policy atomically on the
 * server with the same exact semantics as the C algorithms (on NOSCRIPT the
 * script is loaded and the call made once more). Keys travel as
 * binary-safe arguments, never inside a command string. A key's Redis
 * names, by the policy's NAME alone (the state begins with the
 * configuration that wrote it; another configuration of the name converts
 * it in the same call: docs/semantics.md, "Retune"):
 *
 *   PREFIX{NAME|LEN:KEY}        its state
 *   PREFIX{NAME|LEN:KEY}:I      the sorted set of sliding-log part I
 *
 * LEN makes the names unambiguous for any key bytes, and everything up to
 * the first '}' is shared, so all names of one call hash to one slot. (A
 * key kept by a configuration with logs the call did not name costs one
 * more round trip, once: the script asks for them.)
 * Every write sets an expiry: the time until the key is fresh again (plus
 * ttl_grace_ms, by default 60 s with clock=client only).
 *
 * Time: by default the script reads the server's TIME, so hosts with skewed
 * clocks agree; clock=client sends the store's clock reading (tests,
 * simulations), kept from running backwards like every store's time.
 *
 * Faults: connect and command timeouts; when the server cannot decide, the
 * store admits unenforced, denies, returns SLUICE_ESTORE, or decides by a
 * local limit of this host's share (on_error; local.c). A
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
 * caller takes one for the round trip.
 *
 * Denials: a key the server denied is denied again here, with no round
 * trip, until its denial would end (deny_cache=N entries, 0: off; decide.c
 * says when that is exact).
 *
 * Non-blocking calls (async.c, conn.c): on the attached loop's thread, one
 * connection per node of their own, every call pipelined on it.
 *
 * This file: the store's URL, open, stats, close and operations tables;
 * the rest lies beside it (redis_internal.h lists the files). */
#define _GNU_SOURCE
#include "redis_internal.h"
#include "local.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define POOL_DEFAULT 8
#define DENY_CACHE_MAX 1000000 /* entries: 320 MB */

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

/* keys: DBSIZE of every node needed; -1 when one does not answer, with
 * the store's message saying which and why (store.c: SLUICE_ESTORE). */
static void redis_stats(sluice_store *s, sluice_stats *out) {
    redis_store *r = (redis_store *)s;
    int64_t deadline_ms = sluice__redis_deadline(r);
    out->capacity = -1; /* bounded by the server's maxmemory, and by expiry */
    out->allowed = atomic_load(&r->allowed);
    out->denied = atomic_load(&r->denied);
    out->failures = atomic_load(&r->failures);
    out->reconnects = atomic_load(&r->reconnects);
    out->shadow_denied = atomic_load(&r->shadow_denied);
    out->local = sluice__redis_local_count(r);
    out->cached_denials = sluice__deny_answered(r->deny);
    out->keys = 0;
    uint8_t needed[NODES_MAX];
    int count_nodes = needed_nodes(r, needed);
    for (int i = 0; i < count_nodes && out->keys >= 0; i++) {
        if (!needed[i]) continue;
        char why[320];
        redisReply *reply = sluice__redis_ask(r, r->nodes[i], "DBSIZE", deadline_ms, why, sizeof why);
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
        int64_t deadline_ms = sluice__redis_deadline(r);
        redisReply *reply = sluice__redis_ask(r, r->nodes[i], "PING", deadline_ms, why, sizeof why);
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
    sluice__redis_async_free(r);
    for (int i = 0; i < atomic_load(&r->n_nodes); i++) sluice__redis_node_free(r->nodes[i]);
    sluice__policy_set_free(&r->policies);
    sluice__redis_local_free(r);
    sluice__deny_free(r->deny);
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
    if (sluice__redis_node_index(r, text, host_len, (int)port) < 0) return SLUICE_ENOMEM;
    return 0;
}

/* The URL parameters redis:// and redis-cluster:// take (kinds.c reads
 * them). */
enum { P_TIMEOUT, P_CONNECT_TIMEOUT, P_ON_ERROR, P_CLOCK, P_PREFIX, P_POOL, P_TTL_GRACE, P_VERIFY, P_LOCAL_SHARE,
       P_DENY_CACHE };
static const char *const on_error_names[] = {"allow", "deny", "error", "local", NULL}; /* sluice_on_error's order */
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
    /* "1/N", read by local.c */
    [P_LOCAL_SHARE] = {"local_share", SLUICE__PARAM_TEXT, 0, 32, 0, NULL, NULL, NULL, SLUICE__OPT_NONE},
    /* entries of the cache of denials (decide.c), 320 bytes each; 0: off */
    [P_DENY_CACHE] = {"deny_cache", SLUICE__PARAM_INT, 0, DENY_CACHE_MAX, SLUICE__DENY_DEFAULT, NULL, NULL, NULL,
                      SLUICE__OPT_NONE},
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
    r->policies.init = sluice__redis_policy_init;
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
    /* on_error=local: its share and registry (local.c) */
    rc = sluice__redis_local_open(r, (cfg->given >> P_LOCAL_SHARE) & 1 ? cfg->text[P_LOCAL_SHARE] : NULL,
                                  cfg->text_len[P_LOCAL_SHARE], err, errlen);
    if (rc) goto fail;
    if ((rc = sluice__deny_new((size_t)cfg->value[P_DENY_CACHE], &r->deny)) != 0) {
        sluice__errf(err, errlen, "deny_cache=%lld: out of memory", (long long)cfg->value[P_DENY_CACHE]);
        goto fail;
    }
    if (cluster) {
        char why[256];
        if (sluice__redis_refresh_slots(r, NO_DEADLINE, why, sizeof why) != 0) {
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

/* Found by kinds.c through weak references, or by dlsym: exported, though internal. */
__attribute__((visibility("default"))) const sluice__store_ops sluice_redis_store = {
    .version = SLUICE__STORE_INTERFACE,
    .scheme = "redis",
    .params = redis_params,
    .n_params = sizeof redis_params / sizeof redis_params[0],
    .open = redis_open,
    .acquire_at = sluice__redis_acquire_at,
    .operate_at = sluice__redis_operate_at,
    .stats = redis_stats,
    .close = redis_close,
    .acquire_many = sluice__redis_acquire_many,
    .async_at = sluice__redis_async_at,
    .loop_attach = sluice__redis_loop_attach,
    .loop_detach = sluice__redis_loop_detach,
    .loop_ready = sluice__redis_loop_ready,
    .loop_timeout = sluice__redis_loop_timeout,
};

__attribute__((visibility("default"))) const sluice__store_ops sluice_redis_cluster_store = {
    .version = SLUICE__STORE_INTERFACE,
    .scheme = "redis-cluster",
    .params = redis_params,
    .n_params = sizeof redis_params / sizeof redis_params[0],
    .open = cluster_open,
    .acquire_at = sluice__redis_acquire_at,
    .operate_at = sluice__redis_operate_at,
    .stats = redis_stats,
    .close = redis_close,
    .acquire_many = sluice__redis_acquire_many,
    .async_at = sluice__redis_async_at,
    .loop_attach = sluice__redis_loop_attach,
    .loop_detach = sluice__redis_loop_detach,
    .loop_ready = sluice__redis_loop_ready,
    .loop_timeout = sluice__redis_loop_timeout,
};
