/* loop_scenarios.h: the non-blocking calls of a remote store, through a
 * loop, told as scenarios any loop can run: the test's own poll() loop
 * (test_store_async), libuv's adapter (test_loop_uv), libevent's
 * (test_loop_event). The store is the fake remote kind (fake_remote.h),
 * which really watches two fds and arms its timer through the loop; each
 * scenario checks what the callbacks got against memory:'s blocking calls
 * and what the loop did (readiness both ways, nothing watched after, the
 * timer re-armed and disarmed, the store detached cleanly).
 *
 * A driver (test_loop) gives the loop under test: attach and detach, run
 * it until a condition holds (or max_ms pass: the scenario then fails,
 * instead of hanging), whether it holds nothing of the store's any more,
 * and an fd its loop cannot watch. The loop's timers run on real time: a
 * scenario asserts what fired and in which order, never how long it took. */
#ifndef SLUICE_TEST_LOOP_SCENARIOS_H
#define SLUICE_TEST_LOOP_SCENARIOS_H

#include "check.h"
#include "fake_remote.h"
#include "store_util.h"

#include <fcntl.h>

typedef struct {
    const char *name;
    int (*attach)(sluice_store *s);
    int (*detach)(sluice_store *s);
    /* runs the loop until done(ctx) or max_ms pass: 1 when done */
    int (*run_until)(int (*done)(void *ctx), void *ctx, int64_t max_ms);
    /* the loop holds nothing of the store's: no fd watched, no timer
     * armed, and what a detached store left is closed (it may run the loop
     * for that, without waiting) */
    int (*idle)(void);
    /* an fd its loop refuses to watch (the caller closes it; -1 is fine) */
    int (*bad_fd)(void);
} test_loop;

/* ---- what the callbacks got ---- */

typedef struct {
    int calls, rc, order;
    sluice_decision d;
    char msg[128];
    sluice_store *s;    /* when set: try a call from within the callback */
    int inner_rc;       /* what that call returned */
} call_rec;

static int order_counter_;

static void rec_cb(void *user, int rc, const sluice_decision *d) {
    call_rec *r = user;
    CHECK(d != NULL);
    r->calls++;
    r->rc = rc;
    if (d) r->d = *d;
    r->order = ++order_counter_;
    if (r->s) {
        snprintf(r->msg, sizeof r->msg, "%s", sluice_store_errmsg(r->s));
        r->inner_rc = 1;
    }
}

/* records, and when r->s is set makes one more call from within (its
 * answer in inner_rc; its own callback is rec_cb on a record of its own) */
static call_rec chained_rec_;
static void try_call_cb(void *user, int rc, const sluice_decision *d) {
    call_rec *r = user;
    rec_cb(user, rc, d);
    static sluice_policy *p;
    if (!p) p = policy("inner", "token-bucket capacity=5 rate=1/s");
    r->inner_rc = sluice_store_acquire_async(r->s, p, "inner", 5, 1, rec_cb, &chained_rec_);
}

typedef struct {
    call_rec *recs;
    size_t n;
} recs_ctx;

static int all_called(void *ctx) {
    recs_ctx *c = ctx;
    for (size_t i = 0; i < c->n; i++)
        if (c->recs[i].calls == 0) return 0;
    return 1;
}

static int all_zero(const sluice_decision *d) {
    sluice_decision z;
    memset(&z, 0, sizeof z);
    return same(d, &z) && !d->local;
}

/* A call of a trace step on the fake (non-blocking) or on the twin (blocking). */
static int verb_async(sluice_store *s, const sluice_policy *p, const char *key, int verb, int64_t cost,
                      call_rec *r) {
    size_t len = strlen(key);
    switch (verb) {
    case TRACE_PEEK: return sluice_store_peek_async(s, p, key, len, cost, rec_cb, r);
    case TRACE_REFUND: return sluice_store_refund_async(s, p, key, len, cost, rec_cb, r);
    case TRACE_RESET: return sluice_store_reset_async(s, p, key, len, rec_cb, r);
    default: return sluice_store_acquire_async(s, p, key, len, cost, rec_cb, r);
    }
}

static int verb_blocking(sluice_store *s, const sluice_policy *p, const char *key, int verb, int64_t cost,
                         int64_t now, sluice_decision *d) {
    memset(d, 0, sizeof *d);
    int rc = store_verb(s, p, key, strlen(key), verb, cost, now, d);
    if (rc < 0) memset(d, 0, sizeof *d);
    return rc;
}

/* ---- the scenarios ---- */

/* Each verb, one at a time and all at once (pipelined): the callback runs
 * once, never before the call returns, with what memory:'s blocking call
 * gives; then nothing is left watched or armed. */
static void scenario_completes_later(const test_loop *L) {
    sluice_clock *clock = sluice_clock_manual_new(1000000);
    sluice_store *s = fake_open("fake:", clock), *twin = open_store("memory:", clock);
    sluice_policy *p = policy("later", "token-bucket capacity=2 rate=1/s");
    REQUIRE(s && twin && p);
    REQUIRE(L->attach(s) == 0);
    static const struct {
        const char *key;
        int verb;
        int64_t cost;
    } steps[] = {
        {"k", TRACE_ACQUIRE, 1}, {"k", TRACE_ACQUIRE, 1}, {"k", TRACE_ACQUIRE, 1}, {"k", TRACE_PEEK, 2},
        {"k", TRACE_REFUND, 1},  {"k", TRACE_ACQUIRE, 1}, {"k", TRACE_RESET, 0},   {"k", TRACE_ACQUIRE, 2},
        {"j", TRACE_PEEK, 1},    {"j", TRACE_REFUND, 2},  {"j", TRACE_ACQUIRE, 2}, {"j", TRACE_ACQUIRE, 1},
    };
    enum { N = sizeof steps / sizeof steps[0] };
    for (int round = 0; round < 2; round++) {
        call_rec recs[N];
        memset(recs, 0, sizeof recs);
        recs_ctx ctx = {recs, 0};
        sluice_store_reset(twin, p, "k", 1, NULL);
        sluice_store_reset(twin, p, "j", 1, NULL);
        sluice_store_reset(((fake_store *)s)->inner, p, "k", 1, NULL);
        sluice_store_reset(((fake_store *)s)->inner, p, "j", 1, NULL);
        for (int i = 0; i < N; i++) {
            CHECK_EQ(verb_async(s, p, steps[i].key, steps[i].verb, steps[i].cost, &recs[i]), 0);
            CHECK_EQ(recs[i].calls, 0); /* never before the call returns */
            ctx.n = i + 1;
            if (round == 0) CHECK(L->run_until(all_called, &ctx, 5000)); /* one at a time */
        }
        if (round == 1) CHECK(L->run_until(all_called, &ctx, 5000)); /* all at once */
        for (int i = 0; i < N; i++) {
            sluice_decision want;
            int want_rc = verb_blocking(twin, p, steps[i].key, steps[i].verb, steps[i].cost,
                                        sluice_clock_now_ms(clock), &want);
            CHECK_EQ(recs[i].calls, 1);
            CHECK_EQ(recs[i].rc, want_rc);
            CHECK_EQ(recs[i].order, recs[0].order + i); /* in order */
            if (!same(&recs[i].d, &want)) {
                fprintf(stderr, "%s round %d step %d:\n", L->name, round, i);
                print_decision("async", &recs[i].d);
                print_decision("blocking", &want);
                CHECK(0);
            }
        }
        sluice_clock_manual_advance(clock, 10);
    }
    CHECK(L->idle());
    fake_counts *c = fake_counts_of(s);
    CHECK(c->ready_read > 0);
    CHECK_EQ(c->unwanted, 0);
    CHECK_EQ(c->unknown_fd, 0);
    CHECK_EQ(c->fires_unarmed, 0);
    CHECK(c->disarms > 0); /* each time nothing was left in flight */
    CHECK_EQ(L->detach(s), 0);
    CHECK(L->idle());
    sluice_store_close(s);
    sluice_store_close(twin);
    sluice_policy_free(p);
    sluice_clock_free(clock);
}

/* A burst of calls with long keys, all made before the loop runs: the
 * small socket buffers fill, so the store waits for WRITE, then READ, on
 * two fds at once; every call completes once, in order, as memory:
 * decides. */
static void scenario_pipelined_burst(const test_loop *L) {
    sluice_clock *clock = sluice_clock_manual_new(5000000);
    sluice_store *s = fake_open("fake:", clock), *twin = open_store("memory:", clock);
    sluice_policy *p = policy("burst", "token-bucket capacity=3 rate=1/s; fixed-window limit=5 window=1m");
    REQUIRE(s && twin && p);
    REQUIRE(L->attach(s) == 0);
    int n = scaled(2000);
    call_rec *recs = calloc((size_t)n, sizeof *recs);
    REQUIRE(recs);
    char key[401];
    for (int i = 0; i < n; i++) {
        memset(key, 'x', 400);
        key[400] = 0;
        snprintf(key, 16, "key-%05d", i % 97);
        key[strlen(key)] = 'x';
        int verb = i % 11 == 5 ? TRACE_PEEK : i % 13 == 7 ? TRACE_REFUND : i % 29 == 3 ? TRACE_RESET : TRACE_ACQUIRE;
        CHECK_EQ(verb_async(s, p, key, verb, 1 + i % 2, &recs[i]), 0);
    }
    recs_ctx ctx = {recs, (size_t)n};
    CHECK(L->run_until(all_called, &ctx, 20000));
    int bad = 0;
    for (int i = 0; i < n; i++) {
        memset(key, 'x', 400);
        key[400] = 0;
        snprintf(key, 16, "key-%05d", i % 97);
        key[strlen(key)] = 'x';
        int verb = i % 11 == 5 ? TRACE_PEEK : i % 13 == 7 ? TRACE_REFUND : i % 29 == 3 ? TRACE_RESET : TRACE_ACQUIRE;
        sluice_decision want;
        int want_rc = verb_blocking(twin, p, key, verb, 1 + i % 2, sluice_clock_now_ms(clock), &want);
        if (recs[i].calls != 1 || recs[i].rc != want_rc || !same(&recs[i].d, &want) ||
            recs[i].order != recs[0].order + i) {
            if (bad++ < 3) {
                fprintf(stderr, "%s: call %d: %d calls, rc %d (want %d), order %d\n", L->name, i, recs[i].calls,
                        recs[i].rc, want_rc, recs[i].order - recs[0].order);
                print_decision("async", &recs[i].d);
                print_decision("blocking", &want);
            }
        }
    }
    CHECK_EQ(bad, 0);
    fake_counts *c = fake_counts_of(s);
    CHECK(c->write_waits > 0); /* the buffers did fill: WRITE was waited for */
    CHECK(c->ready_write > 0);
    CHECK(c->ready_read > 0);
    CHECK_EQ(c->max_watched, 2); /* two fds at once */
    CHECK_EQ(c->unwanted, 0);    /* WRITE unwatched once the bytes went */
    CHECK_EQ(c->unknown_fd, 0);
    CHECK(L->idle());
    free(recs);
    sluice_store_close(s);
    CHECK(L->idle());
    sluice_store_close(twin);
    sluice_policy_free(p);
    sluice_clock_free(clock);
}

/* A server that does not answer: three calls time out on the one timer,
 * earliest deadline first (a later call with an earlier deadline re-arms
 * it sooner; each fire re-arms it for the next), each once with
 * SLUICE_ETIMEDOUT and a message; then the connection is made anew (fds
 * unwatched before they close, the new ones watched) and works. */
static void scenario_timeouts_rearm(const test_loop *L) {
    sluice_store *s = fake_open("fake:", NULL);
    sluice_policy *p = policy("slow", "token-bucket capacity=5 rate=1/s");
    REQUIRE(s && p);
    REQUIRE(L->attach(s) == 0);
    fake_hold(s, 1);
    call_rec recs[3];
    memset(recs, 0, sizeof recs);
    for (int i = 0; i < 3; i++) recs[i].s = s;
    int cfd0, sfd0;
    fake_fds(s, &cfd0, &sfd0);
    fake_next_timeout(s, 60);
    CHECK_EQ(sluice_store_acquire_async(s, p, "a", 1, 1, rec_cb, &recs[0]), 0);
    fake_next_timeout(s, 20);
    CHECK_EQ(sluice_store_acquire_async(s, p, "b", 1, 1, rec_cb, &recs[1]), 0);
    fake_next_timeout(s, 120);
    CHECK_EQ(sluice_store_acquire_async(s, p, "c", 1, 1, rec_cb, &recs[2]), 0);
    recs_ctx ctx = {recs, 3};
    CHECK(L->run_until(all_called, &ctx, 5000));
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(recs[i].calls, 1);
        CHECK_EQ(recs[i].rc, SLUICE_ETIMEDOUT);
        CHECK(all_zero(&recs[i].d));
        CHECK(strstr(recs[i].msg, "timed out") != NULL);
    }
    CHECK(recs[1].order < recs[0].order); /* b (20 ms) before a (60 ms): re-armed sooner */
    CHECK(recs[0].order < recs[2].order); /* a before c (120 ms): re-armed after each fire */
    fake_counts *c = fake_counts_of(s);
    /* one fire per deadline when the loop is on time; a fire late past the
     * next deadline (a loaded machine) ends both calls, in deadline order */
    CHECK(c->fires >= 1);
    CHECK_EQ(c->fires_unarmed, 0);
    CHECK_EQ(c->timeouts, 3);
    CHECK_EQ(c->reconnects, 1);
    CHECK(L->idle());
    /* the new connection works (its fds are often the old numbers) */
    fake_hold(s, 0);
    call_rec after;
    memset(&after, 0, sizeof after);
    recs_ctx one = {&after, 1};
    CHECK_EQ(sluice_store_acquire_async(s, p, "a", 1, 1, rec_cb, &after), 0);
    CHECK(L->run_until(all_called, &one, 5000));
    CHECK_EQ(after.calls, 1);
    CHECK_EQ(after.rc, 0);
    CHECK(after.d.allowed);
    CHECK_EQ(after.d.remaining, 4);
    CHECK(L->idle());
    CHECK_EQ(c->unwanted, 0);
    CHECK_EQ(c->unknown_fd, 0);
    sluice_store_close(s);
    sluice_policy_free(p);
}

/* Answered without the server: on the loop's next turn (the timer armed
 * for 0 ms), never before the call returns. */
static void scenario_next_turn(const test_loop *L) {
    sluice_store *s = fake_open("fake:", NULL);
    sluice_policy *p = policy("local", "fixed-window limit=1 window=1h");
    REQUIRE(s && p);
    REQUIRE(L->attach(s) == 0);
    call_rec recs[2];
    memset(recs, 0, sizeof recs);
    CHECK_EQ(sluice_store_acquire_async(s, p, "local:x", 7, 1, rec_cb, &recs[0]), 0);
    CHECK_EQ(sluice_store_acquire_async(s, p, "local:x", 7, 1, rec_cb, &recs[1]), 0);
    CHECK_EQ(recs[0].calls + recs[1].calls, 0);
    recs_ctx ctx = {recs, 2};
    CHECK(L->run_until(all_called, &ctx, 5000));
    CHECK_EQ(recs[0].calls, 1);
    CHECK_EQ(recs[1].calls, 1);
    CHECK(recs[0].d.allowed);
    CHECK(!recs[1].d.allowed);
    CHECK(recs[1].d.retry_after_ms > 0);
    CHECK(fake_counts_of(s)->arms >= 1);
    CHECK_EQ(fake_counts_of(s)->fires_unarmed, 0);
    CHECK(L->idle());
    sluice_store_close(s);
    sluice_policy_free(p);
}

/* Detaching with calls in flight completes each there, once, with
 * SLUICE_ECANCELED (a call made from those callbacks is refused); the loop
 * is left with nothing of the store's; attaching again works; closing with
 * a call in flight cancels it too. */
static void scenario_detach_cancels(const test_loop *L) {
    sluice_store *s = fake_open("fake:", NULL);
    sluice_policy *p = policy("gone", "token-bucket capacity=5 rate=1/s");
    REQUIRE(s && p);
    REQUIRE(L->attach(s) == 0);
    CHECK_EQ(L->attach(s), SLUICE_EINVAL); /* one loop at a time */
    fake_hold(s, 1);
    call_rec recs[3];
    memset(recs, 0, sizeof recs);
    for (int i = 0; i < 3; i++) recs[i].s = s;
    CHECK_EQ(sluice_store_acquire_async(s, p, "a", 1, 1, try_call_cb, &recs[0]), 0);
    CHECK_EQ(sluice_store_peek_async(s, p, "b", 1, 1, try_call_cb, &recs[1]), 0);
    CHECK_EQ(sluice_store_acquire_async(s, p, "local:c", 7, 1, try_call_cb, &recs[2]), 0);
    CHECK_EQ(fake_in_flight(s), 3);
    memset(&chained_rec_, 0, sizeof chained_rec_);
    CHECK_EQ(L->detach(s), 0);
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(recs[i].calls, 1);
        CHECK_EQ(recs[i].rc, SLUICE_ECANCELED);
        CHECK(all_zero(&recs[i].d));
        CHECK(strstr(recs[i].msg, "canceled") != NULL);
        CHECK_EQ(recs[i].inner_rc, SLUICE_EINVAL); /* no new call while detaching */
    }
    CHECK_EQ(chained_rec_.calls, 0);
    CHECK_EQ(fake_counts_of(s)->canceled, 3);
    CHECK(L->idle());
    /* detached: a non-blocking call is refused; detaching again does nothing */
    call_rec none;
    memset(&none, 0, sizeof none);
    CHECK_EQ(sluice_store_acquire_async(s, p, "a", 1, 1, rec_cb, &none), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(s), "sluice_store_attach_loop") != NULL);
    CHECK_EQ(none.calls, 0);
    CHECK_EQ(L->detach(s), 0);
    /* attached again */
    REQUIRE(L->attach(s) == 0);
    fake_hold(s, 0);
    call_rec again;
    memset(&again, 0, sizeof again);
    recs_ctx one = {&again, 1};
    CHECK_EQ(sluice_store_acquire_async(s, p, "a", 1, 1, rec_cb, &again), 0);
    CHECK(L->run_until(all_called, &one, 5000));
    CHECK_EQ(again.calls, 1);
    CHECK_EQ(again.rc, 0);
    CHECK(again.d.allowed);
    /* closed with a call in flight */
    fake_hold(s, 1);
    call_rec last;
    memset(&last, 0, sizeof last);
    CHECK_EQ(sluice_store_acquire_async(s, p, "z", 1, 1, rec_cb, &last), 0);
    sluice_store_close(s);
    CHECK_EQ(last.calls, 1);
    CHECK_EQ(last.rc, SLUICE_ECANCELED);
    CHECK(L->idle());
    sluice_policy_free(p);
}

/* Callbacks that make calls, from within the loop's calls: each completes
 * later, once. */
typedef struct {
    sluice_store *s;
    const sluice_policy *p;
    int left, done;
    int64_t remaining[8];
} chain_ctx;

static void chain_cb(void *user, int rc, const sluice_decision *d) {
    chain_ctx *c = user;
    CHECK_EQ(rc, 0);
    c->remaining[c->done++ & 7] = d->remaining;
    if (--c->left > 0) CHECK_EQ(sluice_store_acquire_async(c->s, c->p, "chain", 5, 1, chain_cb, c), 0);
}

static int chain_done(void *ctx) { return ((chain_ctx *)ctx)->left == 0; }

static void scenario_chained_calls(const test_loop *L) {
    sluice_clock *clock = sluice_clock_manual_new(0);
    sluice_store *s = fake_open("fake:", clock);
    sluice_policy *p = policy("chain", "token-bucket capacity=8 rate=1/s");
    REQUIRE(s && p);
    REQUIRE(L->attach(s) == 0);
    chain_ctx c = {s, p, 6, 0, {0}};
    CHECK_EQ(sluice_store_acquire_async(s, p, "chain", 5, 1, chain_cb, &c), 0);
    CHECK_EQ(c.done, 0);
    CHECK(L->run_until(chain_done, &c, 5000));
    CHECK_EQ(c.done, 6);
    for (int i = 0; i < 6; i++) CHECK_EQ(c.remaining[i], 7 - i);
    CHECK(L->idle());
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_clock_free(clock);
}

/* An fd the loop cannot watch: watch says so (a negative error), and
 * nothing is left of it in the loop. */
static void scenario_watch_refused(const test_loop *L) {
    sluice_store *s = fake_open("fake:", NULL);
    REQUIRE(s);
    REQUIRE(L->attach(s) == 0);
    int fd = L->bad_fd();
    CHECK(fake_watch_raw(s, fd, SLUICE_LOOP_READ) < 0);
    CHECK(fake_watch_raw(s, fd, SLUICE_LOOP_READ | SLUICE_LOOP_WRITE) < 0);
    CHECK_EQ(fake_watch_raw(s, fd, 0), 0); /* stopping never fails */
    if (fd >= 0) close(fd);
    CHECK(L->idle());
    sluice_store_close(s);
    CHECK(L->idle());
}

#endif /* SLUICE_TEST_LOOP_SCENARIOS_H */
