/* loop/event.c: libsluice-event, the loop interface (sluice.h) on a
 * libevent base. A persistent event per fd the store watches (found by fd
 * in a table; its flags changed by deleting and assigning it again, which
 * libevent allows from within its own callback), one timer event. Built on the public API only; links libsluice
 * and libevent_core. */
#include "sluice_event.h"

#include <event2/event.h>
#include <stdlib.h>
#include <string.h>

typedef struct adapter adapter;

typedef struct {
    struct event *ev;
    adapter *a;
    int fd, events; /* what the store asked for */
} watcher;

struct adapter {
    sluice_store *s;
    struct event_base *base;
    struct event *timer;
    watcher **by_fd;     /* by_fd[fd]: the watcher of fd, or NULL */
    int n_by_fd;
};

static void on_event(evutil_socket_t fd, short what, void *arg) {
    watcher *w = arg;
    int ready = (what & EV_READ ? SLUICE_LOOP_READ : 0) | (what & EV_WRITE ? SLUICE_LOOP_WRITE : 0);
    if (ready) sluice_store_loop_ready(w->a->s, (int)fd, ready);
}

static void forget(adapter *a, watcher *w) {
    a->by_fd[w->fd] = NULL;
    event_free(w->ev); /* deleted first; also from within its own callback */
    free(w);
}

static int watch(void *user, int fd, int events) {
    adapter *a = user;
    watcher *w = fd >= 0 && fd < a->n_by_fd ? a->by_fd[fd] : NULL;
    if (events == 0) {
        if (w) forget(a, w);
        return 0;
    }
    if (fd < 0) return SLUICE_EINVAL;
    short flags = (short)(EV_PERSIST | (events & SLUICE_LOOP_READ ? EV_READ : 0) |
                          (events & SLUICE_LOOP_WRITE ? EV_WRITE : 0));
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
        if (!(w->ev = event_new(a->base, fd, flags, on_event, w))) {
            free(w);
            return SLUICE_ENOMEM;
        }
        w->a = a;
        w->fd = fd;
        a->by_fd[fd] = w;
    } else if (w->events != events) {
        event_del(w->ev);
        event_assign(w->ev, a->base, fd, flags, on_event, w);
    }
    if (event_add(w->ev, NULL) != 0) { /* the backend refused fd */
        forget(a, w);
        return SLUICE_EINVAL;
    }
    w->events = events;
    return 0;
}

static void on_timer(evutil_socket_t fd, short what, void *arg) {
    adapter *a = arg;
    (void)fd, (void)what;
    sluice_store_loop_timeout(a->s);
}

static void timer(void *user, int64_t ms) {
    adapter *a = user;
    if (ms < 0) {
        evtimer_del(a->timer);
        return;
    }
    struct timeval tv = {(time_t)(ms / 1000), (suseconds_t)(ms % 1000) * 1000};
    evtimer_add(a->timer, &tv); /* in place of any earlier arming */
}

/* The store is done with the base: whatever is left is freed (nothing
 * should be watched: it unwatched every fd and disarmed the timer). */
static void detached(void *user) {
    adapter *a = user;
    for (int fd = 0; fd < a->n_by_fd; fd++)
        if (a->by_fd[fd]) forget(a, a->by_fd[fd]);
    event_free(a->timer);
    free(a->by_fd);
    free(a);
}

int sluice_event_attach(sluice_store *s, struct event_base *base) {
    if (!s || !base) return SLUICE_EINVAL;
    adapter *a = calloc(1, sizeof *a);
    if (!a) return SLUICE_ENOMEM;
    a->s = s;
    a->base = base;
    if (!(a->timer = evtimer_new(base, on_timer, a))) {
        free(a);
        return SLUICE_ENOMEM;
    }
    sluice_loop l = SLUICE_LOOP_INIT;
    l.user = a;
    l.watch = watch;
    l.timer = timer;
    l.detached = detached;
    int rc = sluice_store_attach_loop(s, &l);
    if (rc) detached(a); /* not attached */
    return rc;
}

int sluice_event_detach(sluice_store *s) {
    return sluice_store_detach_loop(s);
}
