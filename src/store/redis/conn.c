/* store/redis/conn.c: the non-blocking side's connections, one per node,
 * on the loop's readiness: a hiredis redisContext made with
 * redisConnectNonBlock, written with redisBufferWrite when its fd is
 * writable and read with redisBufferRead when readable, every command
 * appended at once (pipelined). Each connection keeps, in the order sent,
 * the replies it still expects: a call's, a SCRIPT LOAD's, a SELECT's, an
 * ASKING's.
 *
 * Its fd is watched for READ while it is open (a server that closes it is
 * seen at once), and for WRITE while connecting or while bytes wait to go.
 * Calls made while it connects (and, with a database, until SELECT comes
 * back) wait on its list, then go in order.
 *
 * A connection breaks on a read or write error, a protocol error, a
 * SELECT refused, a connect that fails or takes connect_timeout_ms, or no
 * reply within timeout_ms: every call sent on it fails (it may have run),
 * every call waiting fails (it never went), and unless the server closed
 * it (a restart) the node is down for RETRY_MS, as in pool.c. The next
 * call after that connects again. (Resolving a host name is hiredis's
 * getaddrinfo, which blocks: use addresses where that matters.) */
#define _GNU_SOURCE
#include "async_internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

static aconn *conn_at(redis_store *r, int i) { return r->async->conns[i]; }

static const node *node_at(redis_store *r, int i) { return r->nodes[i]; }

/* Whether c broke because the server closed it (as pool.c tells). */
static int closed_by_server(const redisContext *c) {
    return c->err == REDIS_ERR_EOF ||
           (c->err == REDIS_ERR_IO && (!strcmp(c->errstr, strerror(ECONNRESET)) || !strcmp(c->errstr, strerror(EPIPE))));
}

/* ---- what a connection expects back ---- */

static int push(aconn *c, int kind, acall *a) {
    if (c->q_len == c->q_cap) {
        size_t cap = c->q_cap ? 2 * c->q_cap : 16;
        expect *q = malloc(cap * sizeof *q);
        if (!q) return -1;
        for (size_t j = 0; j < c->q_len; j++) q[j] = c->q[(c->q_at + j) % c->q_cap];
        free(c->q);
        c->q = q, c->q_cap = cap, c->q_at = 0;
    }
    c->q[(c->q_at + c->q_len++) % c->q_cap] = (expect){kind, a};
    if (kind == EXP_LOAD) c->loads++;
    return 0;
}

static expect pop(aconn *c) {
    expect e = c->q[c->q_at];
    c->q_at = (c->q_at + 1) % c->q_cap;
    c->q_len--;
    if (e.kind == EXP_LOAD) c->loads--;
    return e;
}

/* ---- breaking ---- */

/* Closes node i's connection, its fd unwatched first; its calls stay
 * where they are. */
static void close_fd(redis_store *r, int i) {
    aconn *c = conn_at(r, i);
    if (!c->c) return;
    if (c->events) sluice__loop_watch(&r->head, c->c->fd, 0); /* before the fd closes */
    redisFree(c->c);
    c->c = NULL;
    c->state = C_NONE;
    c->events = 0;
    c->gen++;
    c->load_why[0] = 0;
}

/* Drops node i's connection because of what: every call sent fails (it
 * may have run), every call waiting fails; down unless the server closed
 * it. */
static void broken(redis_store *r, int i, const char *what, int down) {
    aconn *c = conn_at(r, i);
    const node *n = node_at(r, i);
    char sent[256], unsent[256];
    snprintf(sent, sizeof sent, "%.100s:%d: %.100s (the call was sent: it may have taken effect)", n->host, n->port, what);
    snprintf(unsent, sizeof unsent, "%.100s:%d: %.120s", n->host, n->port, what);
    int closed = c->c && closed_by_server(c->c);
    close_fd(r, i);
    if (down && !closed) {
        c->failed = 1;
        c->down_until_ms = sluice__redis_real_ms() + RETRY_MS;
    }
    /* the calls, each failed now */
    for (acall *a = c->wait_head, *next; a; a = next) {
        next = a->wnext;
        sluice__redis_call_fail(r, a, unsent);
    }
    c->wait_head = c->wait_tail = NULL;
    while (c->q_len) {
        expect e = pop(c);
        if (e.kind == EXP_CALL && e.a) sluice__redis_call_fail(r, e.a, sent);
    }
}

static void broken_ctx(redis_store *r, int i) {
    aconn *c = conn_at(r, i);
    char what[160];
    snprintf(what, sizeof what, "%s", c->c->errstr[0] ? c->c->errstr : "connection lost");
    broken(r, i, what, 1);
}

/* Watches c's fd for events; a loop that cannot breaks it. 0 or -1. */
static int watch(redis_store *r, int i, int events) {
    aconn *c = conn_at(r, i);
    if (c->events == events) return 0;
    int rc = sluice__loop_watch(&r->head, c->c->fd, events);
    if (rc < 0) {
        char what[96];
        snprintf(what, sizeof what, "the loop cannot watch the connection's fd (%s)", sluice_strerror(rc));
        broken(r, i, what, 1);
        return -1;
    }
    c->events = events;
    return 0;
}

/* ---- sending ---- */

static void send_call(redis_store *r, int i, acall *a) {
    aconn *c = conn_at(r, i);
    if (a->ask >= 0) {
        const char *argv[] = {"ASKING"};
        size_t lens[] = {6};
        if (redisAppendCommandArgv(c->c, 1, argv, lens) != REDIS_OK || push(c, EXP_ASKING, NULL)) goto oom;
    }
    if (redisAppendCommandArgv(c->c, a->k.argc, a->k.argv, a->k.lens) != REDIS_OK || push(c, EXP_CALL, a)) goto oom;
    a->state = A_SENT;
    a->conn = i;
    watch(r, i, SLUICE_LOOP_READ | SLUICE_LOOP_WRITE);
    return;
oom:
    broken(r, i, "out of memory", 0); /* what went before a's bytes is in the buffer: all of it fails */
    if (a->state != A_DONE) sluice__redis_call_fail(r, a, "out of memory");
}

/* The connection is ready: the waiting calls go, in order. */
static void ready(redis_store *r, int i) {
    aconn *c = conn_at(r, i);
    c->state = C_READY;
    unsigned gen = c->gen;
    while (c->wait_head && c->gen == gen) {
        acall *a = c->wait_head;
        c->wait_head = a->wnext;
        if (!c->wait_head) c->wait_tail = NULL;
        send_call(r, i, a);
    }
}

/* A new connection to node i: 0, or -1 with why. */
static int start(redis_store *r, int i, char *why, size_t whylen) {
    aconn *c = conn_at(r, i);
    const node *n = node_at(r, i);
    redisContext *ctx = redisConnectNonBlock(n->host, n->port);
    if (!ctx || ctx->err) {
        snprintf(why, whylen, "cannot connect to %.100s:%d: %.100s", n->host, n->port, ctx ? ctx->errstr : "out of memory");
        if (ctx) redisFree(ctx);
        c->failed = 1;
        c->down_until_ms = sluice__redis_real_ms() + RETRY_MS;
        return -1;
    }
    c->c = ctx;
    c->state = C_CONNECTING;
    c->events = 0;
    c->connect_deadline_ms = sluice__redis_real_ms() + r->connect_timeout_ms;
    sluice__redis_arm_by(r, c->connect_deadline_ms);
    return 0;
}

void sluice__redis_conn_submit(redis_store *r, int i, acall *a) {
    redis_async *as = r->async;
    if (!as->conns[i] && !(as->conns[i] = calloc(1, sizeof *as->conns[i]))) {
        sluice__redis_call_fail(r, a, "out of memory");
        return;
    }
    aconn *c = as->conns[i];
    const node *n = node_at(r, i);
    if (!c->c) {
        char why[320];
        if (sluice__redis_real_ms() < c->down_until_ms) {
            snprintf(why, sizeof why, "%.100s:%d is down (retrying every %d ms)", n->host, n->port, RETRY_MS);
            sluice__redis_call_fail(r, a, why);
            return;
        }
        if (start(r, i, why, sizeof why)) {
            sluice__redis_call_fail(r, a, why);
            return;
        }
    }
    if (c->state == C_READY) {
        send_call(r, i, a);
        return;
    }
    /* the first command after a connect has all of timeout_ms, as pool.c's */
    if (a->attempts == 0 && a->rounds == 0) a->deadline_ms = a->started_ms + r->connect_timeout_ms + r->timeout_ms;
    a->state = A_WAITING;
    a->conn = i;
    a->wnext = NULL;
    if (c->wait_tail) c->wait_tail->wnext = a;
    else c->wait_head = a;
    c->wait_tail = a;
    if (c->state == C_CONNECTING) watch(r, i, SLUICE_LOOP_WRITE); /* fails a when the loop cannot */
}

void sluice__redis_conn_resend_noscript(redis_store *r, int i, acall *a) {
    aconn *c = conn_at(r, i);
    if (c->load_why[0] && !c->loads) { /* loaded once already since, and that failed */
        sluice__redis_call_fail(r, a, c->load_why);
        return;
    }
    if (!c->loads) { /* one SCRIPT LOAD for every call that got NOSCRIPT before it went */
        const char *argv[] = {"SCRIPT", "LOAD", sluice__redis_decide_lua};
        size_t lens[] = {6, 4, strlen(sluice__redis_decide_lua)};
        if (redisAppendCommandArgv(c->c, 3, argv, lens) != REDIS_OK || push(c, EXP_LOAD, NULL)) {
            broken(r, i, "out of memory", 0);
            sluice__redis_call_fail(r, a, "out of memory");
            return;
        }
    }
    send_call(r, i, a);
}

/* ---- the loop's readiness ---- */

/* One reply read on node i's connection. */
static void on_reply(redis_store *r, int i, redisReply *reply) {
    aconn *c = conn_at(r, i);
    if (!c->q_len) {
        freeReplyObject(reply);
        broken(r, i, "a reply to no command", 1);
        return;
    }
    expect e = pop(c);
    switch (e.kind) {
    case EXP_SELECT:
        if (reply->type == REDIS_REPLY_ERROR) {
            char what[160];
            snprintf(what, sizeof what, "SELECT %d: %.100s", r->db, reply->str);
            broken(r, i, what, 1);
        } else {
            ready(r, i);
        }
        break;
    case EXP_LOAD:
        if (reply->type == REDIS_REPLY_STRING) c->load_why[0] = 0;
        else snprintf(c->load_why, sizeof c->load_why, "SCRIPT LOAD: %.100s",
                      reply->type == REDIS_REPLY_ERROR ? reply->str : "unexpected reply");
        break;
    case EXP_CALL:
        if (e.a) sluice__redis_call_reply(r, i, e.a, reply);
        break;
    default: break; /* ASKING's OK */
    }
    freeReplyObject(reply);
}

/* The connect finished (fd writable): how it went. */
static void connected(redis_store *r, int i) {
    aconn *c = conn_at(r, i);
    int err = 0;
    socklen_t len = sizeof err;
    if (getsockopt(c->c->fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
    if (err) {
        char what[160];
        snprintf(what, sizeof what, "cannot connect: %s", strerror(err));
        broken(r, i, what, 1);
        c->failed = 1;
        c->down_until_ms = sluice__redis_real_ms() + RETRY_MS;
        return;
    }
    if (c->failed) {
        c->failed = 0;
        atomic_fetch_add(&r->reconnects, 1);
    }
    if (watch(r, i, SLUICE_LOOP_READ | SLUICE_LOOP_WRITE)) return;
    if (r->db) {
        char db[16];
        int dl = snprintf(db, sizeof db, "%d", r->db);
        const char *argv[] = {"SELECT", db};
        size_t lens[] = {6, (size_t)dl};
        if (redisAppendCommandArgv(c->c, 2, argv, lens) != REDIS_OK || push(c, EXP_SELECT, NULL)) {
            broken(r, i, "out of memory", 0);
            return;
        }
        c->state = C_SELECTING;
    } else {
        ready(r, i);
    }
}

void sluice__redis_conn_ready(redis_store *r, int fd, int events) {
    redis_async *as = r->async;
    int i;
    for (i = 0; i < NODES_MAX; i++)
        if (as->conns[i] && as->conns[i]->c && as->conns[i]->c->fd == fd) break;
    if (i == NODES_MAX) return;
    aconn *c = as->conns[i];
    unsigned gen = c->gen;
    if (c->state == C_CONNECTING) {
        if (!(events & SLUICE_LOOP_WRITE)) return;
        connected(r, i);
        if (c->gen != gen) return;
    }
    if (events & SLUICE_LOOP_WRITE) {
        int done = 0;
        if (redisBufferWrite(c->c, &done) != REDIS_OK) {
            broken_ctx(r, i);
            return;
        }
        if (done && watch(r, i, SLUICE_LOOP_READ)) return;
    }
    if (events & SLUICE_LOOP_READ) {
        if (redisBufferRead(c->c) != REDIS_OK) {
            broken_ctx(r, i);
            return;
        }
        while (c->gen == gen) {
            void *reply = NULL;
            if (redisGetReplyFromReader(c->c, &reply) != REDIS_OK) {
                broken_ctx(r, i);
                return;
            }
            if (!reply) break;
            on_reply(r, i, reply);
        }
    }
}

/* ---- deadlines ---- */

void sluice__redis_conn_expire(redis_store *r, int64_t now_ms) {
    for (int i = 0; i < NODES_MAX; i++) {
        aconn *c = r->async->conns[i];
        if (!c || c->state != C_CONNECTING || c->connect_deadline_ms > now_ms) continue;
        char what[96];
        snprintf(what, sizeof what, "cannot connect within connect_timeout_ms=%lld", (long long)r->connect_timeout_ms);
        broken(r, i, what, 1);
        c->failed = 1;
        c->down_until_ms = now_ms + RETRY_MS;
    }
}

int64_t sluice__redis_conn_next_deadline(redis_store *r) {
    int64_t at = INT64_MAX;
    for (int i = 0; i < NODES_MAX; i++) {
        aconn *c = r->async->conns[i];
        if (c && c->state == C_CONNECTING && c->connect_deadline_ms < at) at = c->connect_deadline_ms;
    }
    return at;
}

void sluice__redis_conn_timed_out(redis_store *r, int i) {
    char what[160];
    snprintf(what, sizeof what, "no reply within timeout_ms=%lld", (long long)r->timeout_ms);
    broken(r, i, what, 1);
}

void sluice__redis_conn_forget(redis_store *r, acall *a) {
    aconn *c = a->state == A_WAITING && a->conn >= 0 ? conn_at(r, a->conn) : NULL;
    if (!c) return;
    acall **at = &c->wait_head, *last = NULL;
    while (*at && *at != a) last = *at, at = &(*at)->wnext;
    if (!*at) return;
    *at = a->wnext;
    if (c->wait_tail == a) c->wait_tail = last;
}

/* ---- closing ---- */

void sluice__redis_conn_close(redis_store *r, int i) {
    aconn *c = r->async ? r->async->conns[i] : NULL;
    if (!c) return;
    close_fd(r, i);
    c->wait_head = c->wait_tail = NULL;
    c->q_len = 0;
    c->loads = 0;
}

void sluice__redis_conns_free(redis_store *r) {
    for (int i = 0; i < NODES_MAX; i++) {
        aconn *c = r->async->conns[i];
        if (!c) continue;
        if (c->c) redisFree(c->c); /* detached already: nothing watched */
        free(c->q);
        free(c);
        r->async->conns[i] = NULL;
    }
}
