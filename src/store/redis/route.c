/* store/redis/route.c: where a call goes and how it gets there: the
 * nodes by address, a cluster's slot map (CLUSTER SLOTS, and what MOVED
 * teaches), and sending one call, following the replies that prove the
 * server did not run it (NOSCRIPT, MOVED, ASK, TRYAGAIN), never sending
 * again one that may have run. */
#define _GNU_SOURCE
#include "redis_internal.h"
#include "local.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
int sluice__redis_node_index(redis_store *r, const char *host, size_t host_len, int port) {
    int count = atomic_load(&r->n_nodes);
    int i = find_node(r, count, host, host_len, port);
    if (i < count) return i;
    pthread_mutex_lock(&r->nodes_mu);
    count = atomic_load(&r->n_nodes);
    i = find_node(r, count, host, host_len, port);
    if (i == count) {
        node *n = count < NODES_MAX ? sluice__redis_node_new(host, host_len, port) : NULL;
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
    if (!host_len) host = from->host, host_len = strlen(from->host);
    return sluice__redis_node_index(r, host, host_len, port);
}

/* Reads the slot map (CLUSTER SLOTS) from the first node that answers, by
 * deadline_ms. */
int sluice__redis_refresh_slots(redis_store *r, int64_t deadline_ms, char *why, size_t whylen) {
    int count = atomic_load(&r->n_nodes);
    for (int i = 0; i < count; i++) {
        node *n = r->nodes[i];
        redisContext *c = sluice__redis_take(r, n, deadline_ms, why, whylen);
        if (!c) continue;
        const char *argv[] = {"CLUSTER", "SLOTS"};
        size_t lens[] = {7, 5};
        redisReply *reply = sluice__redis_run(r, c, deadline_ms, 2, argv, lens, why, whylen);
        if (!reply || reply->type != REDIS_REPLY_ARRAY) {
            if (reply) {
                snprintf(why, whylen, "CLUSTER SLOTS: %s", reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
                freeReplyObject(reply);
            }
            sluice__redis_give(n, c, reply == NULL);
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
        sluice__redis_give(n, c, 0);
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

static int load_script(const redis_store *r, redisContext *c, int64_t deadline_ms, char *why, size_t whylen) {
    const char *argv[] = {"SCRIPT", "LOAD", sluice__redis_decide_lua};
    size_t lens[] = {6, 4, strlen(sluice__redis_decide_lua)};
    redisReply *reply = sluice__redis_run(r, c, deadline_ms, 3, argv, lens, why, whylen);
    if (!reply) return -1;
    int ok = reply->type == REDIS_REPLY_STRING;
    if (!ok) snprintf(why, whylen, "SCRIPT LOAD: %s", reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
    freeReplyObject(reply);
    return ok ? 0 : 1;
}

/* Whether a reply proves the server did not run the call (so it may be
 * sent again): NOSCRIPT, MOVED, ASK, TRYAGAIN. */
int sluice__redis_not_run(const redisReply *reply) {
    return reply->type == REDIS_REPLY_ERROR &&
           (!strncmp(reply->str, "NOSCRIPT", 8) || !strncmp(reply->str, "MOVED ", 6) ||
            !strncmp(reply->str, "ASK ", 4) || !strncmp(reply->str, "TRYAGAIN", 8));
}

/* Sends one call, following NOSCRIPT (load, again), MOVED (learn, again)
 * and ASK (ASKING there, once), TRYAGAIN (within the timeout): replies that
 * prove the server did not run it. A call that may have run (the
 * connection broke after sending) is never sent again. The reply by
 * deadline_ms, or NULL with why. */
redisReply *sluice__redis_send(redis_store *r, call *k, int64_t deadline_ms, char *why, size_t whylen) {
    int ask = -1;
    int64_t start = sluice__redis_real_ms(), pause = 1;
    node *held_node = NULL;
    redisContext *held = NULL; /* after NOSCRIPT: the same connection again */
    for (int attempt = 0; attempt < 5; attempt++) {
        node *n = held ? held_node : ask >= 0 ? r->nodes[ask] : sluice__redis_node_for(r, k->slot);
        redisContext *c = held ? held : sluice__redis_take(r, n, deadline_ms, why, whylen);
        held = NULL;
        if (!c) {
            if (r->cluster && sluice__redis_refresh_slots(r, deadline_ms, why, whylen) == 0 && attempt < 2) continue;
            return NULL;
        }
        if (ask >= 0) {
            const char *argv[] = {"ASKING"};
            size_t lens[] = {6};
            redisReply *ok = sluice__redis_run(r, c, deadline_ms, 1, argv, lens, why, whylen);
            if (ok) freeReplyObject(ok);
            ask = -1;
        }
        /* the call, with the instance registry ahead of it when due (local.c) */
        redisReply *reply = sluice__redis_local_run(r, n, c, deadline_ms, k, why, whylen);
        if (!reply) {
            /* sent, maybe run: sending it again could charge it twice, so
             * this call fails; a cluster learns its slots for the next */
            sluice__redis_lost_reply(r, n, c, why, whylen);
            sluice__redis_give(n, c, 1);
            if (r->cluster) {
                char ignored[256];
                sluice__redis_refresh_slots(r, deadline_ms, ignored, sizeof ignored);
            }
            return NULL;
        }
        if (reply->type == REDIS_REPLY_ERROR && !strncmp(reply->str, "NOSCRIPT", 8)) {
            freeReplyObject(reply);
            int rc = load_script(r, c, deadline_ms, why, whylen);
            if (rc) {
                sluice__redis_give(n, c, rc < 0);
                return NULL;
            }
            held = c, held_node = n;
            continue;
        }
        if (reply->type == REDIS_REPLY_ERROR && !strncmp(reply->str, "TRYAGAIN", 8) &&
            sluice__redis_real_ms() + pause - start < r->timeout_ms && sluice__redis_real_ms() + pause < deadline_ms) {
            /* a decision of several names while its slot migrates, not all
             * on one node yet: the migration ends soon (bounded by the
             * command timeout) */
            freeReplyObject(reply);
            sluice__redis_give(n, c, 0);
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
            sluice__redis_give(n, c, 0);
            if (target < 0) {
                snprintf(why, whylen, "cannot follow a cluster redirection");
                return NULL;
            }
            if (moved) atomic_store_explicit(&r->slots[k->slot], (uint8_t)target, memory_order_release);
            else ask = target;
            continue;
        }
        sluice__redis_give(n, c, 0);
        return reply;
    }
    snprintf(why, whylen, "too many redirections");
    return NULL;
}
