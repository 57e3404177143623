/* store/redis/async.c: the non-blocking calls (sluice_store_*_async) on
 * the loop the caller attached. Each call is decide.c's call of the
 * script, prepared the same way and read back the same way; it is sent on
 * the one non-blocking connection to its node (conn.c), pipelined behind
 * whatever is still to come back, and followed as the blocking store
 * follows it (route.c): NOSCRIPT loads the script on that connection and
 * sends the call again, MOVED and ASK go to the node named, TRYAGAIN
 * waits on the timer and starts over; a call that may have run is never
 * sent again.
 *
 * Callbacks run in the order the calls were made: a call that completes
 * before an earlier one (another node answered first) waits for it.
 *
 * Time bound: a call ends by its deadline, timeout_ms after it is made
 * (plus connect_timeout_ms when its connection is still to be made), as a
 * blocking call's command does. When it passes, the server has not
 * answered the oldest call on the connection for timeout_ms: the
 * connection is dropped and the node marked down for RETRY_MS, as the
 * blocking store does, and every call sent on it fails as on_error says
 * (it was sent: it may have taken effect). While a node is down a call to
 * it fails on the loop's next turn.
 *
 * The store's one timer holds the earliest of: the calls' deadlines, the
 * connections' connect deadlines, the TRYAGAIN pauses, and "now" when a
 * call completed without the server (it is then called back on the next
 * turn, never from within the call that made it).
 *
 * Everything here runs on the loop's thread; what it shares with the
 * blocking calls of other threads (the policy registry, the slot map, the
 * counters) is theirs to guard. */
#define _GNU_SOURCE
#include "async_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ATTEMPTS_MAX 5 /* redirections and reloads of one call, as route.c */
#define ROUNDS_MAX 3   /* calls again with names the script asks for, as decide.c */

/* ---- the calls in the order made ---- */

static redis_async *async_of(redis_store *r) { return r->async; }

/* Arms the timer for at_ms (real time) unless armed sooner already. */
void sluice__redis_arm_by(redis_store *r, int64_t at_ms) {
    redis_async *as = async_of(r);
    if (as->armed_ms >= 0 && as->armed_ms <= at_ms) return;
    int64_t ms = at_ms - sluice__redis_real_ms();
    as->armed_ms = at_ms;
    sluice__loop_timer(&r->head, ms > 0 ? ms : 0);
}

static void disarm(redis_store *r) {
    redis_async *as = async_of(r);
    if (as->armed_ms < 0) return;
    as->armed_ms = -1;
    sluice__loop_timer(&r->head, -1);
}

/* Call a is done: failed (why set) or answered (d set), or kind's error. */
void sluice__redis_call_done(redis_store *r, acall *a, int how, int rc) {
    a->state = A_DONE;
    a->how = how;
    a->rc = rc;
    a->conn = -1;
    if (how != DONE_ERROR) sluice__redis_deny_forget(r, &a->k); /* a refund or reset: made, or may have been */
}

void sluice__redis_call_fail(redis_store *r, acall *a, const char *why) {
    snprintf(a->why, sizeof a->why, "%s", why);
    sluice__redis_call_done(r, a, DONE_FAILED, 0);
}

/* Calls back, in order, every call at the head of the list that is done;
 * the timer is disarmed when none is left. A callback may make calls (at
 * the tail: called back here too when they are done already). */
static void deliver(redis_store *r) {
    redis_async *as = async_of(r);
    if (as->delivering) return;
    as->delivering = 1;
    while (as->head && as->head->state == A_DONE) {
        acall *a = as->head;
        as->head = a->next;
        if (as->head) as->head->prev = NULL;
        else as->tail = NULL;
        as->n_live--;
        sluice_decision d;
        memset(&d, 0, sizeof d);
        int rc = a->rc;
        switch (a->how) {
        case DONE_ANSWERED: d = a->d; break;
        case DONE_FAILED: rc = sluice__redis_failed(r, a->why, &a->k, &d); break;
        default: sluice__store_errf(&r->head, "%s", a->why); break; /* DONE_ERROR, DONE_CANCELED */
        }
        if (rc < 0) memset(&d, 0, sizeof d);
        a->cb(a->user, rc, &d);
        free(a);
    }
    as->delivering = 0;
    if (!as->head) disarm(r);
}

/* ---- routing ---- */

static int node_of(redis_store *r, const acall *a) {
    if (a->ask >= 0) return a->ask;
    return r->cluster ? atomic_load_explicit(&r->slots[a->k.slot], memory_order_acquire) : 0;
}

/* Sends a (again) to the node it goes to now. */
static void route(redis_store *r, acall *a) {
    sluice__redis_conn_submit(r, node_of(r, a), a);
}

/* "MOVED 3999 127.0.0.1:6381" (or ASK) from node from: the node index
 * named (an empty host is from's own), or -1. */
static int redirect_target(redis_store *r, int from, const char *err) {
    const char *sp = strchr(err, ' ');
    sp = sp ? strchr(sp + 1, ' ') : NULL;
    const char *colon = sp ? strrchr(sp + 1, ':') : NULL;
    if (!colon) return -1;
    const char *host = sp + 1;
    size_t host_len = (size_t)(colon - host);
    if (!host_len) host = r->nodes[from]->host, host_len = strlen(host);
    return sluice__redis_node_index(r, host, host_len, atoi(colon + 1));
}

/* The reply to call a, sent on the connection to node from. */
void sluice__redis_call_reply(redis_store *r, int from, acall *a, redisReply *reply) {
    int64_t now_ms = sluice__redis_real_ms();
    if (reply->type == REDIS_REPLY_ERROR && sluice__redis_not_run(reply)) {
        const char *e = reply->str;
        if (++a->attempts >= ATTEMPTS_MAX && strncmp(e, "TRYAGAIN", 8)) {
            sluice__redis_call_fail(r, a, "too many redirections");
            return;
        }
        if (!strncmp(e, "NOSCRIPT", 8)) { /* the same connection, the script loaded first */
            sluice__redis_conn_resend_noscript(r, from, a);
            return;
        }
        if (!strncmp(e, "TRYAGAIN", 8)) {
            if (now_ms + a->pause_ms - a->started_ms >= r->timeout_ms || now_ms + a->pause_ms >= a->deadline_ms) {
                sluice__redis_call_fail(r, a, e);
                return;
            }
            /* a migrating slot: wait, then the redirections start over */
            a->state = A_PAUSED;
            a->ask = -1;
            a->attempts = 0;
            a->retry_at_ms = now_ms + a->pause_ms;
            if (a->pause_ms < 16) a->pause_ms *= 2;
            sluice__redis_arm_by(r, a->retry_at_ms);
            return;
        }
        int target = redirect_target(r, from, e);
        if (target < 0) {
            sluice__redis_call_fail(r, a, "cannot follow a cluster redirection");
            return;
        }
        if (e[0] == 'M') {
            atomic_store_explicit(&r->slots[a->k.slot], (uint8_t)target, memory_order_release);
            a->ask = -1;
        } else {
            a->ask = target;
        }
        route(r, a);
        return;
    }
    unsigned need = 0;
    char why[256];
    int rc = sluice__redis_read_reply(r, &a->k, reply, &a->d, &need, why, sizeof why);
    if (rc == 0) {
        sluice__redis_count(r, &a->k, &a->d);
        sluice__redis_call_done(r, a, DONE_ANSWERED, 0);
    } else if (rc < 0) {
        sluice__redis_call_fail(r, a, why);
    } else if (++a->rounds > ROUNDS_MAX) {
        sluice__redis_call_fail(r, a, "the key's configuration kept changing");
    } else { /* the names the script asks for, in one more round trip */
        a->k.logs |= need;
        sluice__redis_build(r, &a->k);
        a->ask = -1;
        route(r, a);
    }
}

/* ---- the store's entries (store.h) ---- */

int sluice__redis_async_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                           sluice__verb verb, int64_t cost, int64_t now_ms, sluice_store_cb cb, void *user) {
    redis_store *r = (redis_store *)s;
    redis_async *as = async_of(r);
    acall *a = calloc(1, sizeof *a);
    if (!a) {
        sluice__store_errf(s, "out of memory");
        return SLUICE_ENOMEM;
    }
    memcpy(a->key, key, key_len); /* the caller's may change once this returns */
    a->cb = cb, a->user = user;
    a->ask = -1;
    a->conn = -1;
    a->pause_ms = 1;
    a->started_ms = sluice__redis_real_ms();
    a->deadline_ms = a->started_ms + r->timeout_ms;
    a->prev = as->tail;
    if (as->tail) as->tail->next = a;
    else as->head = a;
    as->tail = a;
    as->n_live++;
    char v = verb == SLUICE__VERB_ACQUIRE ? 'a' : verb == SLUICE__VERB_PEEK ? 'p' : verb == SLUICE__VERB_REFUND ? 'r' : 'x';
    int rc = sluice__redis_prepare(r, p, a->key, key_len, v, cost, now_ms, &a->k);
    if (rc) { /* the blocking call's error (a policy the store cannot keep, ...), on the next turn */
        snprintf(a->why, sizeof a->why, "%s", sluice_store_errmsg(s));
        sluice__redis_call_done(r, a, DONE_ERROR, rc);
    } else {
        /* every log's name, as a reset has: the script never asks for more
         * (decide.c's second round trip), which would send this call again
         * after later calls on its key had run (they are pipelined behind
         * it), out of the order made */
        if (sluice__redis_deny_answer(r, &a->k, &a->d)) { /* denied by the cache: on the next turn */
            sluice__redis_call_done(r, a, DONE_ANSWERED, 0);
        } else {
            if (a->k.logs != ALL_LOGS) {
                a->k.logs = ALL_LOGS;
                sluice__redis_build(r, &a->k);
            }
            route(r, a); /* its deadline grows by connect_timeout_ms there when it must connect first */
        }
    }
    sluice__redis_arm_by(r, a->state == A_DONE ? a->started_ms : a->deadline_ms);
    return 0;
}

int sluice__redis_loop_attach(sluice_store *s) {
    redis_store *r = (redis_store *)s;
    if (!r->async) {
        r->async = calloc(1, sizeof *r->async);
        if (!r->async) {
            sluice__store_errf(s, "out of memory");
            return SLUICE_ENOMEM;
        }
    }
    r->async->armed_ms = -1;
    return 0;
}

/* Every connection closed (fds unwatched first), then every call in order:
 * one done already gets its result, any other SLUICE_ECANCELED. */
void sluice__redis_loop_detach(sluice_store *s) {
    redis_store *r = (redis_store *)s;
    redis_async *as = async_of(r);
    if (!as) return;
    for (int i = 0; i < NODES_MAX; i++) sluice__redis_conn_close(r, i);
    for (acall *a = as->head; a; a = a->next) {
        if (a->state == A_DONE) continue;
        snprintf(a->why, sizeof a->why, "%s: the loop was detached: the call was canceled (it may have taken effect)",
                 r->cluster ? "redis-cluster" : "redis");
        sluice__redis_call_done(r, a, DONE_CANCELED, SLUICE_ECANCELED);
    }
    deliver(r);
    disarm(r);
}

void sluice__redis_loop_ready(sluice_store *s, int fd, int events) {
    redis_store *r = (redis_store *)s;
    sluice__redis_conn_ready(r, fd, events);
    deliver(r);
}

/* The timer fired: connections that did not connect in time, calls past
 * their deadline, pauses that ended; then armed again for the earliest
 * left. */
void sluice__redis_loop_timeout(sluice_store *s) {
    redis_store *r = (redis_store *)s;
    redis_async *as = async_of(r);
    as->armed_ms = -1;
    int64_t now_ms = sluice__redis_real_ms();
    sluice__redis_conn_expire(r, now_ms);
    for (acall *a = as->head; a; a = a->next) {
        if (a->state == A_DONE) continue;
        if (a->state == A_PAUSED && a->retry_at_ms <= now_ms) {
            a->state = A_NEW;
            route(r, a);
        }
        if (a->state == A_SENT && a->deadline_ms <= now_ms) {
            sluice__redis_conn_timed_out(r, a->conn); /* fails every call sent on it, a too */
        } else if (a->state != A_DONE && a->deadline_ms <= now_ms) {
            char why[160];
            snprintf(why, sizeof why, "no connection ready within connect_timeout_ms=%lld + timeout_ms=%lld",
                     (long long)r->connect_timeout_ms, (long long)r->timeout_ms);
            sluice__redis_conn_forget(r, a);
            sluice__redis_call_fail(r, a, why);
        }
    }
    deliver(r);
    if (!as->head) return;
    int64_t next_ms = INT64_MAX;
    for (acall *a = as->head; a; a = a->next) { /* one done waits for the head: not a deadline */
        int64_t at = a->state == A_DONE ? INT64_MAX : a->state == A_PAUSED ? a->retry_at_ms : a->deadline_ms;
        if (at < next_ms) next_ms = at;
    }
    int64_t conn_ms = sluice__redis_conn_next_deadline(r);
    if (conn_ms < next_ms) next_ms = conn_ms;
    if (next_ms < INT64_MAX) sluice__redis_arm_by(r, next_ms);
}

void sluice__redis_async_free(redis_store *r) {
    if (!r->async) return;
    sluice__redis_conns_free(r);
    for (acall *a = r->async->head, *next; a; a = next) { /* none: closing detaches first */
        next = a->next;
        free(a);
    }
    free(r->async);
    r->async = NULL;
}
