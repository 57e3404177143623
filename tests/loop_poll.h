/* loop_poll.h: a poll() loop, the smallest loop the interface allows, as a
 * test_loop driver (loop_scenarios.h) for one store at a time:
 * test_store_async runs the fake remote kind's scenarios on it,
 * test_redis_async the Redis store's. */
#ifndef SLUICE_TEST_LOOP_POLL_H
#define SLUICE_TEST_LOOP_POLL_H

#include "loop_scenarios.h"

#include <poll.h>

static struct {
    sluice_store *s;
    struct {
        int fd, events;
    } fds[16];
    int n;
    int64_t deadline_ms; /* -1: not armed */
    long detached;
} pl = {.deadline_ms = -1};

static int pl_watch(void *user, int fd, int events) {
    (void)user;
    int i = 0;
    while (i < pl.n && pl.fds[i].fd != fd) i++;
    if (events == 0) {
        if (i < pl.n) pl.fds[i] = pl.fds[--pl.n];
        return 0;
    }
    if (fd < 0) return SLUICE_EINVAL;
    if (i == pl.n) {
        if (pl.n == (int)(sizeof pl.fds / sizeof pl.fds[0])) return SLUICE_ENOMEM;
        pl.fds[pl.n++].fd = fd;
    }
    pl.fds[i].events = events;
    return 0;
}

static void pl_timer(void *user, int64_t ms) {
    (void)user;
    pl.deadline_ms = ms < 0 ? -1 : fake_real_ms() + ms;
}

static void pl_detached(void *user) {
    (void)user;
    pl.detached++;
    pl.s = NULL;
}

static int pl_attach(sluice_store *s) {
    sluice_loop loop = SLUICE_LOOP_INIT;
    loop.watch = pl_watch;
    loop.timer = pl_timer;
    loop.detached = pl_detached;
    int rc = sluice_store_attach_loop(s, &loop);
    if (rc == 0) pl.s = s;
    return rc;
}

static int pl_detach(sluice_store *s) { return sluice_store_detach_loop(s); }

/* One turn: waits at most max_ms (less when the timer is due sooner). */
static void pl_turn(int64_t max_ms) {
    struct pollfd p[16];
    int n = pl.n;
    for (int i = 0; i < n; i++) {
        p[i].fd = pl.fds[i].fd;
        p[i].events = (short)((pl.fds[i].events & SLUICE_LOOP_READ ? POLLIN : 0) |
                              (pl.fds[i].events & SLUICE_LOOP_WRITE ? POLLOUT : 0));
        p[i].revents = 0;
    }
    int64_t wait = max_ms;
    if (pl.deadline_ms >= 0) {
        int64_t left = pl.deadline_ms - fake_real_ms();
        wait = left < 0 ? 0 : left < wait ? left : wait;
    }
    poll(p, (nfds_t)n, (int)wait);
    for (int i = 0; i < n && pl.s; i++) {
        int k = 0; /* still watched, and for what (the store may have changed it meanwhile) */
        while (k < pl.n && pl.fds[k].fd != p[i].fd) k++;
        if (k == pl.n || !p[i].revents) continue;
        int ev = (p[i].revents & POLLIN ? SLUICE_LOOP_READ : 0) | (p[i].revents & POLLOUT ? SLUICE_LOOP_WRITE : 0);
        if (p[i].revents & (POLLERR | POLLHUP)) ev |= pl.fds[k].events;
        ev &= pl.fds[k].events;
        if (ev) sluice_store_loop_ready(pl.s, p[i].fd, ev);
    }
    if (pl.s && pl.deadline_ms >= 0 && fake_real_ms() >= pl.deadline_ms) {
        pl.deadline_ms = -1;
        sluice_store_loop_timeout(pl.s);
    }
}

static int pl_run_until(int (*done)(void *), void *ctx, int64_t max_ms) {
    int64_t end = fake_real_ms() + max_ms;
    while (!done(ctx)) {
        int64_t left = end - fake_real_ms();
        if (left <= 0) return 0;
        pl_turn(left);
    }
    return 1;
}

static int pl_idle(void) { return pl.n == 0 && pl.deadline_ms < 0; }

static int pl_bad_fd(void) { return -1; }

static const test_loop poll_loop = {"poll", pl_attach, pl_detach, pl_run_until, pl_idle, pl_bad_fd};

#endif /* SLUICE_TEST_LOOP_POLL_H */
