/* loop/uv.c: libsluice-uv, the loop interface (sluice.h) on a libuv loop.
 * A uv_poll_t per fd the store watches (found by fd in a table), one
 * uv_timer_t made at the store's first arming. Built on the public API
 * only; links libsluice and libuv.
 *
 * libuv closes a handle on the loop's next turn (uv_close's callback), so
 * a watcher that stops is taken out of the table at once and freed when
 * libuv is done with it; after detach the adapter itself is freed with the
 * last of its handles. */
#include "sluice_uv.h"

#include <stdlib.h>
#include <string.h>

typedef struct adapter adapter;

typedef struct {
    uv_poll_t poll;
    adapter *a;
    int fd, events; /* what the store asked for */
} watcher;

struct adapter {
    sluice_store *s;
    uv_loop_t *loop;
    uv_timer_t timer;
    int timer_open;   /* made (at the first arming) and not closed */
    watcher **by_fd;  /* by_fd[fd]: the watcher of fd, or NULL */
    int n_by_fd;
    int open_handles; /* made and not closed yet */
    int detached;     /* the store is done with it: freed with its last handle */
};

static void maybe_free(adapter *a) {
    if (!a->detached || a->open_handles) return;
    free(a->by_fd);
    free(a);
}

static void on_watcher_closed(uv_handle_t *h) {
    watcher *w = h->data;
    adapter *a = w->a;
    free(w);
    a->open_handles--;
    maybe_free(a);
}

static void on_timer_closed(uv_handle_t *h) {
    adapter *a = h->data;
    a->open_handles--;
    maybe_free(a);
}

static int to_uv(int events) {
    return (events & SLUICE_LOOP_READ ? UV_READABLE : 0) | (events & SLUICE_LOOP_WRITE ? UV_WRITABLE : 0);
}

static void on_poll(uv_poll_t *h, int status, int events) {
    watcher *w = h->data;
    adapter *a = w->a;
    int fd = w->fd;
    /* an error (libuv stops the handle for it) counts as ready for all fd is watched for */
    int ready = status < 0 ? w->events
                           : (events & UV_READABLE ? SLUICE_LOOP_READ : 0) | (events & UV_WRITABLE ? SLUICE_LOOP_WRITE : 0);
    if (ready) sluice_store_loop_ready(a->s, fd, ready);
    /* still watched after an error: watched again, level-triggered */
    if (status < 0 && fd < a->n_by_fd && a->by_fd[fd] == w && !uv_is_active((uv_handle_t *)h))
        uv_poll_start(h, to_uv(w->events), on_poll);
}

static void forget(adapter *a, watcher *w) {
    a->by_fd[w->fd] = NULL;
    uv_poll_stop(&w->poll);
    uv_close((uv_handle_t *)&w->poll, on_watcher_closed);
}

static int watch(void *user, int fd, int events) {
    adapter *a = user;
    watcher *w = fd >= 0 && fd < a->n_by_fd ? a->by_fd[fd] : NULL;
    if (events == 0) {
        if (w) forget(a, w);
        return 0;
    }
    if (fd < 0) return SLUICE_EINVAL;
    if (!w) {
        if (fd >= a->n_by_fd) {
            int n = fd < 16 ? 32 : 2 * fd;
            watcher **grown = realloc(a->by_fd, (size_t)n * sizeof *grown);
            if (!grown) return SLUICE_ENOMEM;
            memset(grown + a->n_by_fd, 0, (size_t)(n - a->n_by_fd) * sizeof *grown);
            a->by_fd = grown;
            a->n_by_fd = n;
        }
        if (!(w = calloc(1, sizeof *w))) return SLUICE_ENOMEM;
        int rc = uv_poll_init(a->loop, &w->poll, fd);
        if (rc) { /* nothing made: libuv refused fd */
            free(w);
            return rc == UV_ENOMEM ? SLUICE_ENOMEM : SLUICE_EINVAL;
        }
        w->poll.data = w;
        w->a = a;
        w->fd = fd;
        a->by_fd[fd] = w;
        a->open_handles++;
    }
    int rc = uv_poll_start(&w->poll, to_uv(events), on_poll);
    if (rc) {
        forget(a, w);
        return rc == UV_ENOMEM ? SLUICE_ENOMEM : SLUICE_EINVAL;
    }
    w->events = events;
    return 0;
}

static void on_timer(uv_timer_t *t) {
    adapter *a = t->data;
    sluice_store_loop_timeout(a->s);
}

static void timer(void *user, int64_t ms) {
    adapter *a = user;
    if (ms < 0) {
        if (a->timer_open) uv_timer_stop(&a->timer);
        return;
    }
    if (!a->timer_open) {
        uv_timer_init(a->loop, &a->timer);
        a->timer.data = a;
        a->timer_open = 1;
        a->open_handles++;
    }
    uv_update_time(a->loop); /* ms from now, not from the turn's start */
    uv_timer_start(&a->timer, on_timer, (uint64_t)ms, 0);
}

/* The store is done with the loop: whatever is left is closed (nothing
 * should be: it unwatched every fd and disarmed the timer first). */
static void detached(void *user) {
    adapter *a = user;
    for (int fd = 0; fd < a->n_by_fd; fd++)
        if (a->by_fd[fd]) forget(a, a->by_fd[fd]);
    if (a->timer_open) {
        uv_timer_stop(&a->timer);
        uv_close((uv_handle_t *)&a->timer, on_timer_closed);
        a->timer_open = 0;
    }
    a->detached = 1;
    maybe_free(a);
}

int sluice_uv_attach(sluice_store *s, uv_loop_t *loop) {
    if (!s || !loop) return SLUICE_EINVAL;
    adapter *a = calloc(1, sizeof *a);
    if (!a) return SLUICE_ENOMEM;
    a->s = s;
    a->loop = loop;
    sluice_loop l = SLUICE_LOOP_INIT;
    l.user = a;
    l.watch = watch;
    l.timer = timer;
    l.detached = detached;
    int rc = sluice_store_attach_loop(s, &l);
    if (rc) detached(a); /* not attached: what the store's attempt made is closed */
    return rc;
}

int sluice_uv_detach(sluice_store *s) {
    return sluice_store_detach_loop(s);
}
