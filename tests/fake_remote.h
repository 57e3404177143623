/* fake_remote.h: a remote store kind for the tests of the non-blocking
 * side and the loop adapters ("fake:"), with no server to start. It does
 * what a remote store does through the loop interface, for real: its
 * "connection" is one end of a socketpair (cfd), and its "server" is the
 * other end (sfd), served on the same loop, deciding with a memory: store
 * of its own (so its decisions are memory:'s, to compare).
 *
 *   client  a call is a request record queued for cfd (WRITE watched while
 *           bytes are unsent), then in flight (READ watched) until its
 *           reply is read; calls complete in order as replies come: they
 *           are pipelined on the connection.
 *   server  reads sfd (READ watched while calls are in flight, unless the
 *           test holds it), decides each request, writes the replies
 *           (WRITE watched while bytes are unsent).
 *   timer   each call has a deadline (timeout_ms, or what
 *           fake_next_timeout set for the next call); the timer is armed
 *           for the earliest; a call past it completes with
 *           SLUICE_ETIMEDOUT and its reply, when it comes, is dropped.
 *           Once every call in flight has timed out the connection is
 *           dropped and a new one made (new fds, often of the same
 *           numbers). A call on a key that starts with "local:" is
 *           answered without the server, on the loop's next turn (timer
 *           armed for 0 ms).
 * The socket buffers are small (4 KiB), so that a burst of calls fills
 * them and the client must wait for WRITE.
 *
 * It counts what the loop did (fake_counts): readiness per direction,
 * readiness it did not ask for, timer fires, fires of a timer it had not
 * armed, waits for WRITE, the most fds watched at once. Open it with
 * fake_open(); the loop attached is the test's. */
#ifndef SLUICE_TEST_FAKE_REMOTE_H
#define SLUICE_TEST_FAKE_REMOTE_H

#include "internal.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    long ready_read, ready_write; /* loop_ready calls, by direction     */
    long unwanted;                /* readiness for what was not watched */
    long unknown_fd;              /* loop_ready for an fd not watched   */
    long fires, fires_unarmed;    /* loop_timeout calls; ones not armed */
    long write_waits;             /* a write that had to wait (EAGAIN)  */
    long watches, arms, disarms;  /* what the fake asked of the loop    */
    long watch_errors;            /* watch calls that failed            */
    long timeouts, canceled, reconnects, dropped_replies;
    int max_watched;              /* the most fds watched at once       */
} fake_counts;

typedef struct {
    char *p;
    size_t off, len, cap; /* bytes p[off..len) */
} fake_buf;

typedef struct {
    sluice_store_cb cb;
    void *user;
    uint64_t id;
    int64_t deadline_ms; /* real ms */
    int done;            /* completed (timed out) before its reply came */
} fake_call;

typedef struct {
    sluice_store_cb cb;
    void *user;
    int rc;
    sluice_decision d;
} fake_local;

typedef struct {
    uint64_t id;
    const sluice_policy *p;
    int32_t verb, key_len;
    int64_t cost, now_ms;
} fake_request; /* then key_len bytes */

typedef struct {
    uint64_t id;
    int32_t rc, pad;
    sluice_decision d;
} fake_reply;

typedef struct {
    struct sluice_store head;
    sluice_store *inner; /* the server's state */
    int cfd, sfd;
    int want_c, want_s;  /* what each is watched for now */
    int held;            /* the server reads nothing */
    int64_t timeout_ms, next_timeout_ms;
    fake_call *calls;    /* in flight, in order: calls[0..n) */
    size_t n, cap;
    fake_local *locals;  /* answered without the server, for the next turn */
    size_t n_locals, cap_locals;
    uint64_t next_id;
    fake_buf cout, cin, sin, sout;
    int64_t armed_ms;    /* the deadline the timer is armed for; -1: not armed */
    fake_counts c;
} fake_store;

static inline int64_t fake_real_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static inline void fake_buf_add(fake_buf *b, const void *data, size_t len) {
    if (b->off && b->off == b->len) b->off = b->len = 0;
    if (b->len + len > b->cap) {
        if (b->off) {
            memmove(b->p, b->p + b->off, b->len - b->off);
            b->len -= b->off;
            b->off = 0;
        }
        while (b->len + len > b->cap) b->cap = b->cap ? 2 * b->cap : 4096;
        b->p = realloc(b->p, b->cap);
        if (!b->p) abort();
    }
    memcpy(b->p + b->len, data, len);
    b->len += len;
}

static inline size_t fake_buf_size(const fake_buf *b) { return b->len - b->off; }

static inline void fake_buf_clear(fake_buf *b) { b->off = b->len = 0; }

/* Writes what b holds to fd as far as it goes; 1 when it had to stop. */
static inline int fake_flush(fake_store *f, int fd, fake_buf *b) {
    while (fake_buf_size(b)) {
        ssize_t w = send(fd, b->p + b->off, fake_buf_size(b), MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK) f->c.write_waits++;
            return 1;
        }
        b->off += (size_t)w;
    }
    return 0;
}

/* Reads what fd has into b. */
static inline void fake_fill(int fd, fake_buf *b) {
    char chunk[65536];
    for (;;) {
        ssize_t r = recv(fd, chunk, sizeof chunk, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return;
        fake_buf_add(b, chunk, (size_t)r);
    }
}

static inline int fake_watch(fake_store *f, int fd, int *want, int events) {
    if (*want == events || f->head.loop_state == SLUICE__LOOP_NONE) return 0;
    int rc = sluice__loop_watch(&f->head, fd, events);
    f->c.watches++;
    if (rc) {
        f->c.watch_errors++;
        return rc;
    }
    *want = events;
    int n = (f->want_c != 0) + (f->want_s != 0);
    if (n > f->c.max_watched) f->c.max_watched = n;
    return 0;
}

/* The timer armed for the earliest deadline (0 ms when a local answer
 * waits), disarmed when there is none; only when that changes. */
static inline void fake_rearm(fake_store *f) {
    if (f->head.loop_state == SLUICE__LOOP_NONE) return;
    int64_t at = -1;
    if (f->n_locals) at = 0;
    for (size_t i = 0; i < f->n && at != 0; i++)
        if (!f->calls[i].done && (at < 0 || f->calls[i].deadline_ms < at)) at = f->calls[i].deadline_ms;
    if (at == f->armed_ms) return;
    f->armed_ms = at;
    if (at < 0) {
        f->c.disarms++;
        sluice__loop_timer(&f->head, -1);
        return;
    }
    int64_t ms = at == 0 ? 0 : at - fake_real_ms();
    f->c.arms++;
    sluice__loop_timer(&f->head, ms > 0 ? ms : 0);
}

static inline void fake_rewatch(fake_store *f) {
    int live = f->n > 0;
    fake_watch(f, f->cfd, &f->want_c, (fake_buf_size(&f->cout) ? SLUICE_LOOP_WRITE : 0) | (live ? SLUICE_LOOP_READ : 0));
    fake_watch(f, f->sfd, &f->want_s,
               (fake_buf_size(&f->sout) ? SLUICE_LOOP_WRITE : 0) | (live && !f->held ? SLUICE_LOOP_READ : 0));
    fake_rearm(f);
}

static inline int fake_connect(fake_store *f) {
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sv)) return SLUICE_ESTORE;
    int small = 4096;
    for (int i = 0; i < 2; i++) {
        setsockopt(sv[i], SOL_SOCKET, SO_SNDBUF, &small, sizeof small);
        setsockopt(sv[i], SOL_SOCKET, SO_RCVBUF, &small, sizeof small);
    }
    f->cfd = sv[0];
    f->sfd = sv[1];
    return 0;
}

/* Drops the connection (unwatched first, as the loop interface wants) and
 * makes a new one; what was queued or in flight is gone. */
static inline void fake_reconnect(fake_store *f) {
    fake_watch(f, f->cfd, &f->want_c, 0);
    fake_watch(f, f->sfd, &f->want_s, 0);
    close(f->cfd);
    close(f->sfd);
    fake_buf_clear(&f->cout);
    fake_buf_clear(&f->cin);
    fake_buf_clear(&f->sin);
    fake_buf_clear(&f->sout);
    f->n = 0;
    f->c.reconnects++;
    if (fake_connect(f)) abort();
}

static inline void fake_complete(fake_store *f, sluice_store_cb cb, void *user, int rc, const sluice_decision *d) {
    sluice_decision zero;
    if (rc < 0) {
        memset(&zero, 0, sizeof zero);
        d = &zero;
    }
    (void)f;
    cb(user, rc, d);
}

/* The server: every whole request in sin decided, its reply queued. */
static inline void fake_serve(fake_store *f) {
    while (fake_buf_size(&f->sin) >= sizeof(fake_request)) {
        fake_request q;
        memcpy(&q, f->sin.p + f->sin.off, sizeof q);
        if (fake_buf_size(&f->sin) < sizeof q + (size_t)q.key_len) break;
        const char *key = f->sin.p + f->sin.off + sizeof q;
        fake_reply r;
        memset(&r, 0, sizeof r);
        r.id = q.id;
        switch (q.verb) {
        case SLUICE__VERB_PEEK: r.rc = sluice_store_peek_at(f->inner, q.p, key, (size_t)q.key_len, q.cost, q.now_ms, &r.d); break;
        case SLUICE__VERB_REFUND:
            r.rc = sluice_store_refund_at(f->inner, q.p, key, (size_t)q.key_len, q.cost, q.now_ms, &r.d);
            break;
        case SLUICE__VERB_RESET: r.rc = sluice_store_reset(f->inner, q.p, key, (size_t)q.key_len, &r.d); break;
        default: r.rc = sluice_store_acquire_at(f->inner, q.p, key, (size_t)q.key_len, q.cost, q.now_ms, &r.d);
        }
        f->sin.off += sizeof q + (size_t)q.key_len;
        fake_buf_add(&f->sout, &r, sizeof r);
    }
}

/* The client: every whole reply in cin completes its call, in order. */
static inline void fake_replies(fake_store *f) {
    while (fake_buf_size(&f->cin) >= sizeof(fake_reply)) {
        fake_reply r;
        memcpy(&r, f->cin.p + f->cin.off, sizeof r);
        f->cin.off += sizeof r;
        if (f->n == 0 || f->calls[0].id != r.id) abort(); /* replies come in order */
        fake_call call = f->calls[0];
        memmove(f->calls, f->calls + 1, (f->n - 1) * sizeof *f->calls);
        f->n--;
        if (call.done) {
            f->c.dropped_replies++;
            continue;
        }
        if (r.rc < 0) sluice__store_errf(&f->head, "fake: the server said %s", sluice_err_name(r.rc));
        fake_complete(f, call.cb, call.user, r.rc, &r.d);
    }
}

static inline void fake_loop_ready(sluice_store *s, int fd, int events) {
    fake_store *f = (fake_store *)s;
    int want = fd == f->cfd ? f->want_c : fd == f->sfd ? f->want_s : -1;
    if (want < 0) {
        f->c.unknown_fd++;
        return;
    }
    if (events & ~want) f->c.unwanted++;
    events &= want;
    if (events & SLUICE_LOOP_READ) f->c.ready_read++;
    if (events & SLUICE_LOOP_WRITE) f->c.ready_write++;
    if (fd == f->sfd) {
        if (events & SLUICE_LOOP_READ) {
            fake_fill(f->sfd, &f->sin);
            fake_serve(f);
        }
        if (fake_buf_size(&f->sout)) fake_flush(f, f->sfd, &f->sout);
    } else {
        if (events & SLUICE_LOOP_WRITE) fake_flush(f, f->cfd, &f->cout);
        if (events & SLUICE_LOOP_READ) {
            fake_fill(f->cfd, &f->cin);
            fake_replies(f); /* callbacks: they may make calls */
        }
    }
    fake_rewatch(f);
}

static inline void fake_loop_timeout(sluice_store *s) {
    fake_store *f = (fake_store *)s;
    f->c.fires++;
    if (f->armed_ms < 0) f->c.fires_unarmed++;
    f->armed_ms = -1; /* it fired: armed no more */
    /* local answers first (they were due on this turn), then deadlines */
    size_t n_locals = f->n_locals;
    fake_local *locals = NULL;
    if (n_locals) {
        locals = malloc(n_locals * sizeof *locals);
        if (!locals) abort();
        memcpy(locals, f->locals, n_locals * sizeof *locals);
        f->n_locals = 0;
    }
    for (size_t i = 0; i < n_locals; i++) fake_complete(f, locals[i].cb, locals[i].user, locals[i].rc, &locals[i].d);
    free(locals);
    int64_t now = fake_real_ms();
    for (size_t i = 0; i < f->n; i++) {
        fake_call *call = &f->calls[i];
        if (call->done || call->deadline_ms > now) continue;
        call->done = 1;
        f->c.timeouts++;
        sluice__store_errf(&f->head, "fake: call %llu timed out", (unsigned long long)call->id);
        fake_complete(f, call->cb, call->user, SLUICE_ETIMEDOUT, NULL); /* may add calls: by index */
    }
    int live = 0;
    for (size_t i = 0; i < f->n; i++) live |= !f->calls[i].done;
    if (f->n && !live) fake_reconnect(f);
    fake_rewatch(f);
}

static inline int fake_async_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                                sluice__verb verb, int64_t cost, int64_t now_ms, sluice_store_cb cb, void *user) {
    fake_store *f = (fake_store *)s;
    if (key_len >= 6 && !memcmp(key, "local:", 6)) {
        if (f->n_locals == f->cap_locals) {
            f->cap_locals = f->cap_locals ? 2 * f->cap_locals : 16;
            f->locals = realloc(f->locals, f->cap_locals * sizeof *f->locals);
            if (!f->locals) abort();
        }
        fake_local *l = &f->locals[f->n_locals++];
        l->cb = cb;
        l->user = user;
        l->rc = verb == SLUICE__VERB_ACQUIRE ? sluice_store_acquire_at(f->inner, p, key, key_len, cost, now_ms, &l->d)
                                              : verb == SLUICE__VERB_PEEK
                                                    ? sluice_store_peek_at(f->inner, p, key, key_len, cost, now_ms, &l->d)
                                              : verb == SLUICE__VERB_REFUND
                                                    ? sluice_store_refund_at(f->inner, p, key, key_len, cost, now_ms, &l->d)
                                                    : sluice_store_reset(f->inner, p, key, key_len, &l->d);
        fake_rearm(f);
        return 0;
    }
    if (f->n == f->cap) {
        f->cap = f->cap ? 2 * f->cap : 64;
        f->calls = realloc(f->calls, f->cap * sizeof *f->calls);
        if (!f->calls) abort();
    }
    int64_t timeout_ms = f->next_timeout_ms > 0 ? f->next_timeout_ms : f->timeout_ms;
    f->next_timeout_ms = 0;
    fake_call *call = &f->calls[f->n++];
    call->cb = cb;
    call->user = user;
    call->id = ++f->next_id;
    call->deadline_ms = fake_real_ms() + timeout_ms;
    call->done = 0;
    fake_request q = {call->id, p, (int32_t)verb, (int32_t)key_len, cost, now_ms};
    fake_buf_add(&f->cout, &q, sizeof q);
    fake_buf_add(&f->cout, key, key_len);
    fake_flush(f, f->cfd, &f->cout); /* as far as it goes now; the loop says when it can go on */
    fake_rewatch(f);
    return 0;
}

static inline int fake_loop_attach(sluice_store *s) {
    fake_store *f = (fake_store *)s;
    f->want_c = f->want_s = 0;
    f->armed_ms = -1;
    fake_rewatch(f); /* nothing in flight: nothing to watch */
    return 0;
}

static inline void fake_loop_detach(sluice_store *s) {
    fake_store *f = (fake_store *)s;
    while (f->n_locals || f->n) {
        sluice_store_cb cb;
        void *user;
        if (f->n_locals) {
            cb = f->locals[0].cb;
            user = f->locals[0].user;
            memmove(f->locals, f->locals + 1, --f->n_locals * sizeof *f->locals);
        } else {
            fake_call call = f->calls[0];
            memmove(f->calls, f->calls + 1, --f->n * sizeof *f->calls);
            if (call.done) continue;
            cb = call.cb;
            user = call.user;
        }
        f->c.canceled++;
        sluice__store_errf(s, "fake: canceled: the loop was detached");
        fake_complete(f, cb, user, SLUICE_ECANCELED, NULL);
    }
    fake_reconnect(f); /* unwatches both */
    if (f->armed_ms >= 0) {
        f->c.disarms++;
        sluice__loop_timer(s, -1);
        f->armed_ms = -1;
    }
}

static inline int fake_open_kind(const sluice__store_config *cfg, sluice_store **out, char *err, size_t errlen) {
    fake_store *f = calloc(1, sizeof *f);
    if (!f) return SLUICE_ENOMEM;
    sluice_store_options o = SLUICE_STORE_OPTIONS_INIT;
    o.clock = cfg->clock;
    int rc = sluice_store_open_err("memory:", &o, &f->inner, err, errlen);
    if (rc == 0 && fake_connect(f)) rc = SLUICE_ESTORE;
    if (rc) {
        sluice_store_close(f->inner);
        free(f);
        return rc;
    }
    f->timeout_ms = cfg->value[0];
    f->armed_ms = -1;
    *out = &f->head;
    return 0;
}

static inline void fake_close(sluice_store *s) {
    fake_store *f = (fake_store *)s;
    close(f->cfd);
    close(f->sfd);
    sluice_store_close(f->inner);
    free(f->calls);
    free(f->locals);
    free(f->cout.p);
    free(f->cin.p);
    free(f->sin.p);
    free(f->sout.p);
    free(f);
}

/* Blocking calls: made on the server's state directly (the tests of the
 * non-blocking side compare with memory: instead). */
static inline int fake_acquire_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                                  int64_t cost, int64_t now_ms, sluice_decision *out) {
    return sluice_store_acquire_at(((fake_store *)s)->inner, p, key, key_len, cost, now_ms, out);
}

static inline void fake_stats(sluice_store *s, sluice_stats *out) {
    sluice_store_stats(((fake_store *)s)->inner, out);
}

static const sluice__param fake_params[] = {
    {"timeout_ms", SLUICE__PARAM_INT, 1, 3600000, 1000, NULL, NULL, NULL, SLUICE__OPT_TIMEOUT},
};

static const sluice__store_ops fake_ops = {
    .version = SLUICE__STORE_INTERFACE,
    .scheme = "fake",
    .params = fake_params,
    .n_params = 1,
    .open = fake_open_kind,
    .acquire_at = fake_acquire_at,
    .stats = fake_stats,
    .close = fake_close,
    .async_at = fake_async_at,
    .loop_attach = fake_loop_attach,
    .loop_detach = fake_loop_detach,
    .loop_ready = fake_loop_ready,
    .loop_timeout = fake_loop_timeout,
};

/* A fake store whose decisions read clock (NULL: monotonic). */
static inline sluice_store *fake_open(const char *url, const sluice_clock *clock) {
    sluice_store_options o = SLUICE_STORE_OPTIONS_INIT;
    o.clock = clock;
    sluice_store *s = NULL;
    char err[256];
    if (sluice__store_open_kind(&fake_ops, url, &o, &s, err, sizeof err)) fprintf(stderr, "%s: %s\n", url, err);
    return s;
}

static inline fake_counts *fake_counts_of(sluice_store *s) { return &((fake_store *)s)->c; }
/* The server reads nothing while held (calls in flight time out). */
static inline void fake_hold(sluice_store *s, int held) {
    fake_store *f = (fake_store *)s;
    f->held = held;
    fake_rewatch(f);
}
/* The next call's timeout, in place of the store's timeout_ms. */
static inline void fake_next_timeout(sluice_store *s, int64_t ms) { ((fake_store *)s)->next_timeout_ms = ms; }
/* Calls in flight (sent or queued, not replied to), and local answers waiting. */
static inline size_t fake_in_flight(sluice_store *s) {
    fake_store *f = (fake_store *)s;
    return f->n + f->n_locals;
}
/* Asks the loop to watch fd for events, as the store would: its answer. */
static inline int fake_watch_raw(sluice_store *s, int fd, int events) { return sluice__loop_watch(s, fd, events); }
/* The connection's fds (they change when it is made anew). */
static inline void fake_fds(sluice_store *s, int *cfd, int *sfd) {
    *cfd = ((fake_store *)s)->cfd;
    *sfd = ((fake_store *)s)->sfd;
}

#endif /* SLUICE_TEST_FAKE_REMOTE_H */
