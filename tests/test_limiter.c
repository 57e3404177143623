/* test_limiter.c: the single limiter as users see it: many threads on one
 * limiter with a frozen clock admit exactly the capacity (and really raced);
 * composites never over-admit a part; the blocking wait never overstays its
 * deadline and consumes nothing when it gives up; bad input changes nothing,
 * for the verbs too (peek, refund, reset); threads mixing acquires and
 * refunds of what they were admitted never take a state beyond fresh or
 * below empty, nor hold more than the capacity; the clocks. */
#include "check.h"
#include "store_util.h"
#include "internal.h"

#include <pthread.h>
#include <stdatomic.h>

/* ---- helpers ---- */

/* Witness that threads interleaved: every operation bumps one shared
 * counter; a thread whose bump finds the counter moved by others since its
 * own last bump ran between their operations. A compare-and-swap that
 * failed (sluice__limiter_contention) is the stronger proof, but on one
 * CPU, or with most operations read-only (denials, peeks), it can take
 * longer than a test round; interleaving at the grain of one operation
 * still shows the threads shared the state while it changed. */
typedef struct {
    atomic_long ops;
    atomic_int interleaved;
} meet;

static void meet_step(meet *m, long *last) {
    long now = atomic_fetch_add_explicit(&m->ops, 1, memory_order_relaxed);
    if (*last >= 0 && now != *last + 1) atomic_store_explicit(&m->interleaved, 1, memory_order_relaxed);
    *last = now;
}

static sluice_limiter *make(const char *spec, sluice_clock *clock) {
    sluice_policy *p = NULL;
    sluice_limiter *l = NULL;
    char err[256];
    if (sluice_policy_parse("t", spec, &p, err, sizeof err) != 0) {
        fprintf(stderr, "bad spec %s: %s\n", spec, err);
        return NULL;
    }
    if (sluice_limiter_new_policy(p, clock, &l) != 0) l = NULL;
    sluice_policy_free(p);
    return l;
}


/* ---- N threads, one limiter, frozen clock ---- */

enum { N_THREADS = 8 };

typedef struct {
    sluice_limiter *l;
    int64_t now_ms; /* fixed reading (acquire_at) or INT64_MIN: the clock */
    int attempts;
    int64_t cost;
    pthread_barrier_t *go;
    meet *meet;
    long admitted; /* cost admitted */
    int errors;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    long last = -1;
    pthread_barrier_wait(r->go);
    for (int i = 0; i < r->attempts; i++) {
        sluice_decision d;
        meet_step(r->meet, &last);
        int rc = r->now_ms == INT64_MIN ? sluice_acquire(r->l, r->cost, &d)
                                        : sluice_acquire_at(r->l, r->cost, r->now_ms, &d);
        if (rc) r->errors++;
        else if (d.allowed) r->admitted += r->cost;
    }
    return NULL;
}

/* Races N threads on l; returns the total cost admitted. */
static long race_all(sluice_limiter *l, int64_t now_ms, int attempts, int64_t cost, meet *m) {
    pthread_t t[N_THREADS];
    racer r[N_THREADS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N_THREADS);
    for (int i = 0; i < N_THREADS; i++) {
        r[i] = (racer){.l = l, .now_ms = now_ms, .attempts = attempts, .cost = cost, .go = &go, .meet = m};
        pthread_create(&t[i], NULL, race, &r[i]);
    }
    long total = 0;
    int errors = 0;
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(t[i], NULL);
        total += r[i].admitted;
        errors += r[i].errors;
    }
    pthread_barrier_destroy(&go);
    CHECK_EQ(errors, 0);
    return total;
}

/* Admits exactly the capacity, and the threads really met (retried until they
 * did, a few times: a test that cannot have raced proves nothing): a
 * compare-and-swap failed, or, failing that in every round, their
 * operations interleaved (see meet). */
static void check_exact(const char *spec, long capacity, int64_t reading) {
    int raced = 0;
    meet m = {0};
    for (int round = 0; round < 20 && !raced; round++) {
        sluice_clock *c = sluice_clock_manual_new(1000);
        sluice_limiter *l = make(spec, c);
        REQUIRE(l != NULL);
        /* together they try twice the capacity */
        long got = race_all(l, reading, (int)(capacity / 4 + 50), 1, &m);
        if (got != capacity) fprintf(stderr, "%s: admitted %ld of %ld\n", spec, got, capacity);
        CHECK_EQ(got, capacity);
        raced = sluice__limiter_contention(l) > 0;
        sluice_limiter_free(l);
        sluice_clock_free(c);
    }
    if (!raced && !atomic_load(&m.interleaved)) fprintf(stderr, "%s: the threads never met\n", spec);
    CHECK(raced || atomic_load(&m.interleaved));
}

TEST(threads_token_bucket_exact) {
    check_exact("token-bucket capacity=1000000 rate=1/s", 1000000, INT64_MIN);
    check_exact("token-bucket capacity=1000000 rate=1/s", 1000000, 5000);
}
TEST(threads_leaky_bucket_exact) { check_exact("leaky-bucket capacity=1000000 rate=1/h", 1000000, INT64_MIN); }
TEST(threads_fixed_window_exact) { check_exact("fixed-window limit=400000 window=1h", 400000, INT64_MIN); }
TEST(threads_sliding_window_exact) { check_exact("sliding-window limit=400000 window=1h", 400000, INT64_MIN); }
TEST(threads_sliding_log_exact) { check_exact("sliding-log limit=400000 window=1h", 400000, INT64_MIN); }
TEST(threads_composite_exact) {
    check_exact("token-bucket capacity=500000 rate=1/s; fixed-window limit=400000 window=1h", 400000,
                INT64_MIN);
}
/* Far from the limiter's creation the one-word state overflows; every thread
 * moves it to the locked form at once, and the count stays exact. */
TEST(threads_token_bucket_moving_exact) {
    check_exact("token-bucket capacity=400000 rate=999999937/7s", 400000, INT64_C(1) << 60);
}

/* The seed's last scenario: 8 threads x 50 attempts on capacity 100. */
TEST(threads_seed_100_of_400) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_limiter *l = make("token-bucket capacity=100 rate=1/s", c);
    REQUIRE(l != NULL);
    CHECK_EQ(race_all(l, INT64_MIN, 50, 1, &(meet){0}), 100);
    sluice_limiter_free(l);
    sluice_clock_free(c);
}

/* Costs above 1 under contention: never more than the capacity. */
TEST(threads_random_costs_never_over) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_limiter *l = make("token-bucket capacity=997 rate=1/s", c);
    REQUIRE(l != NULL);
    long got = race_all(l, INT64_MIN, 400, 3, &(meet){0});
    CHECK(got <= 997 && got > 997 - 3);
    sluice_limiter_free(l);
    sluice_clock_free(c);
}

/* A composite denial consumes from no part, also under concurrency: the
 * bucket part is left with exactly capacity - admitted. */
TEST(threads_composite_consumes_all_or_nothing) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_limiter *l = make("fixed-window limit=300 window=1h; token-bucket capacity=1000 rate=1/h;"
                             " sliding-log limit=700 window=1h", c);
    REQUIRE(l != NULL);
    CHECK_EQ(race_all(l, INT64_MIN, 200, 1, &(meet){0}), 300);
    /* the bucket part: 1000 - 300 left; the log: 700 - 300 */
    sluice_decision d;
    sluice__limiter_peek_part(l, 1, 0, &d);
    CHECK_EQ(d.remaining, 700);
    sluice__limiter_peek_part(l, 2, 0, &d);
    CHECK_EQ(d.remaining, 400);
    sluice_limiter_free(l);
    sluice_clock_free(c);
}

/* ---- the blocking wait ---- */

TEST(wait_sleeps_exactly_the_retry) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_limiter *l = make("token-bucket capacity=2 rate=1/s", c);
    REQUIRE(l != NULL);
    sluice_decision d;
    CHECK_EQ(sluice_acquire_wait(l, 2, 0, &d), 0);
    CHECK(d.allowed);
    CHECK_EQ(sluice_clock_now_ms(c), 0);
    CHECK_EQ(sluice_acquire_wait(l, 1, 5000, &d), 0);
    CHECK(d.allowed);
    CHECK_EQ(sluice_clock_now_ms(c), 1000); /* slept 1000 ms of manual time */
    CHECK_EQ(sluice_acquire_wait(l, 2, 2000, &d), 0);
    CHECK_EQ(sluice_clock_now_ms(c), 3000);
    sluice_limiter_free(l);
    sluice_clock_free(c);
}

TEST(wait_gives_up_at_once_consuming_nothing) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_limiter *l = make("token-bucket capacity=1 rate=1/s", c);
    REQUIRE(l != NULL);
    sluice_decision d;
    CHECK_EQ(sluice_acquire(l, 1, &d), 0);
    CHECK_EQ(sluice_acquire_wait(l, 1, 999, &d), SLUICE_ETIMEDOUT);
    CHECK(!d.allowed);
    CHECK_EQ(d.retry_after_ms, 1000);
    CHECK_EQ(sluice_clock_now_ms(c), 0); /* did not sleep: the wait was too long */
    CHECK_EQ(sluice_acquire_wait(l, 1, 0, &d), SLUICE_ETIMEDOUT);
    CHECK_EQ(sluice_acquire_wait(l, 1, 1000, &d), 0); /* exactly enough */
    CHECK(d.allowed);
    CHECK_EQ(sluice_clock_now_ms(c), 1000);
    CHECK_EQ(sluice_acquire_wait(l, 1, -1, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_acquire_wait(l, 2, 10000, &d), SLUICE_ECOST);
    sluice_limiter_free(l);
    sluice_clock_free(c);
}

/* A callback clock whose sleeps are stolen from: every sleep oversleeps by
 * 7 ms and, meanwhile, "another caller" takes what was freed. The wait must
 * give up without ever passing its deadline, having consumed nothing. */
typedef struct {
    int64_t now_ms;
    sluice_limiter *thief;
    int sleeps;
} stolen_clock;
static int64_t stolen_now(void *u) { return ((stolen_clock *)u)->now_ms; }
static void stolen_sleep(void *u, int64_t ms) {
    stolen_clock *s = u;
    s->sleeps++;
    s->now_ms += ms + 7;
    sluice_decision d;
    if (s->thief) sluice_acquire_at(s->thief, 1, s->now_ms, &d);
}

TEST(wait_never_passes_the_deadline) {
    stolen_clock sc = {.now_ms = 0};
    sluice_clock *c = sluice_clock_callback_new(stolen_now, stolen_sleep, &sc);
    REQUIRE(c != NULL);
    sluice_limiter *l = make("token-bucket capacity=1 rate=1/s", c);
    REQUIRE(l != NULL);
    sc.thief = l;
    sluice_decision d;
    CHECK_EQ(sluice_acquire(l, 1, &d), 0);
    CHECK_EQ(sluice_acquire_wait(l, 1, 10000, &d), SLUICE_ETIMEDOUT);
    CHECK(sc.sleeps >= 2);
    CHECK(sc.now_ms <= 10000 + 7); /* the last sleep was within the deadline */
    CHECK(!d.allowed);
    sluice_limiter_free(l);
    sluice_clock_free(c);
}

/* A clock that leaves the accepted range: the wait says EINVAL (computing
 * no deadline from the reading: under UBSan an overflow there fails). */
TEST(wait_on_a_reading_out_of_range) {
    stolen_clock sc = {.now_ms = 0};
    sluice_clock *c = sluice_clock_callback_new(stolen_now, stolen_sleep, &sc);
    REQUIRE(c != NULL);
    sluice_limiter *l = make("token-bucket capacity=1 rate=1/s", c);
    sluice_store *s = NULL;
    sluice_store_options o = SLUICE_STORE_OPTIONS_INIT;
    o.clock = c;
    CHECK_EQ(sluice_store_open("memory:", &o, &s), 0);
    sluice_policy *p = NULL;
    CHECK_EQ(sluice_policy_parse("p", "token-bucket capacity=1 rate=1/s", &p, NULL, 0), 0);
    REQUIRE(l && s && p);
    const int64_t far[] = {INT64_MIN, INT64_MAX, SLUICE_TIME_MIN_MS - 1, SLUICE_TIME_MAX_MS + 1};
    for (size_t i = 0; i < sizeof far / sizeof far[0]; i++) {
        sc.now_ms = far[i];
        sluice_decision d;
        CHECK_EQ(sluice_acquire_wait(l, 1, 1000, &d), SLUICE_EINVAL);
        CHECK_EQ(sluice_store_acquire_wait(s, p, "k", 1, 1, 1000, &d), SLUICE_EINVAL);
        CHECK(strstr(sluice_store_errmsg(s), "reading") != NULL);
    }
    CHECK_EQ(sc.sleeps, 0);
    sluice_policy_free(p);
    sluice_store_close(s);
    sluice_limiter_free(l);
    sluice_clock_free(c);
}

TEST(wait_real_clock_short) {
    /* one real wait of a few ms, to exercise the real sleep */
    sluice_limiter *l = make("token-bucket capacity=1 rate=1/5ms", NULL);
    REQUIRE(l != NULL);
    sluice_decision d;
    CHECK_EQ(sluice_acquire(l, 1, &d), 0);
    int64_t t0 = sluice_clock_now_ms(sluice_clock_monotonic());
    CHECK_EQ(sluice_acquire_wait(l, 1, 1000, &d), 0);
    CHECK(d.allowed);
    CHECK(sluice_clock_now_ms(sluice_clock_monotonic()) - t0 >= 4);
    sluice_limiter_free(l);
}

/* ---- bad input changes nothing ---- */

TEST(bad_costs_change_nothing) {
    const char *specs[] = {"token-bucket capacity=5 rate=1/s", "leaky-bucket capacity=5 rate=1/s",
                           "fixed-window limit=5 window=1s", "sliding-window limit=5 window=1s",
                           "sliding-log limit=5 window=1s",
                           "token-bucket capacity=9 rate=1/s; sliding-log limit=5 window=1s"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        sluice_clock *c = sluice_clock_manual_new(0);
        sluice_limiter *a = make(specs[i], c), *b = make(specs[i], c);
        REQUIRE(a && b);
        sluice_decision da, db;
        CHECK_EQ(sluice_acquire(a, 2, &da), 0);
        CHECK_EQ(sluice_acquire(b, 2, &db), 0);
        int64_t bad[] = {0, -1, 6, INT64_MIN, INT64_MAX};
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++)
            CHECK_EQ(sluice_acquire(a, bad[k], &da), SLUICE_ECOST);
        CHECK_EQ(sluice_acquire_at(a, 1, SLUICE_TIME_MAX_MS + 1, &da), SLUICE_EINVAL);
        CHECK_EQ(sluice_acquire_at(a, 1, SLUICE_TIME_MIN_MS - 1, &da), SLUICE_EINVAL);
        CHECK_EQ(sluice_acquire(a, 1, NULL), SLUICE_EINVAL);
        /* a and b must still decide alike */
        for (int k = 0; k < 6; k++) {
            CHECK_EQ(sluice_acquire(a, 1, &da), 0);
            CHECK_EQ(sluice_acquire(b, 1, &db), 0);
            CHECK(same(&da, &db));
        }
        sluice_limiter_free(a);
        sluice_limiter_free(b);
        sluice_clock_free(c);
    }
}

TEST(bad_arguments) {
    sluice_limiter *l = NULL;
    sluice_decision d;
    sluice_config bad = sluice_token_bucket(0, 1, 1000);
    CHECK_EQ(sluice_limiter_new(&bad, NULL, &l), SLUICE_EINVAL);
    CHECK(l == NULL);
    sluice_config good = sluice_token_bucket(1, 1, 1000);
    CHECK_EQ(sluice_limiter_new(NULL, NULL, &l), SLUICE_EINVAL);
    CHECK_EQ(sluice_limiter_new(&good, NULL, NULL), SLUICE_EINVAL);
    CHECK_EQ(sluice_limiter_new_policy(NULL, NULL, &l), SLUICE_EINVAL);
    CHECK_EQ(sluice_acquire(NULL, 1, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_acquire_at(NULL, 1, 0, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_acquire_wait(NULL, 1, 0, &d), SLUICE_EINVAL);
    sluice_limiter_free(NULL); /* harmless */
    CHECK_EQ(sluice_limiter_new(&good, NULL, &l), 0);
    CHECK(sluice_limiter_clock(l) == sluice_clock_monotonic());
    CHECK_STR(sluice_policy_name(sluice_limiter_policy(l)), "default");
    CHECK_EQ(sluice_acquire(l, 1, &d), 0);
    CHECK(d.allowed && d.enforced);
    sluice_limiter_free(l);
}

/* ---- the verbs: bad input changes nothing ---- */

/* Equal in every field, shadow_denied too. */
static int same_all(const sluice_decision *a, const sluice_decision *b) {
    return same(a, b) && a->shadow_denied == b->shadow_denied;
}

/* A clock whose reading the test sets, anywhere (a manual clock clamps). */
static int64_t set_now(void *u) { return *(int64_t *)u; }

/* What l's state decides at now: peeks of a few costs and every part's
 * state; equal snapshots mean nothing changed. */
typedef struct {
    sluice_decision ask[3], part[SLUICE_POLICY_MAX_PARTS];
} verb_snap;

static void snap_verbs(sluice_limiter *l, int64_t now, verb_snap *s) {
    const sluice_policy *p = sluice_limiter_policy(l);
    int64_t costs[3] = {1, 2, sluice_policy_max_cost(p)};
    memset(s, 0, sizeof *s);
    for (int i = 0; i < 3; i++) CHECK_EQ(sluice_peek_at(l, costs[i], now, &s->ask[i]), 0);
    for (size_t i = 0; i < sluice_policy_n_parts(p); i++) sluice__limiter_peek_part(l, i, now, &s->part[i]);
}

static int snap_same(const verb_snap *a, const verb_snap *b) {
    for (int i = 0; i < 3; i++)
        if (!same_all(&a->ask[i], &b->ask[i])) return 0;
    for (int i = 0; i < SLUICE_POLICY_MAX_PARTS; i++)
        if (!same_all(&a->part[i], &b->part[i])) return 0;
    return 1;
}

TEST(verbs_bad_input_changes_nothing) {
    const char *specs[] = {"token-bucket capacity=5 rate=1/s", "leaky-bucket capacity=5 rate=1/s",
                           "fixed-window limit=5 window=1s", "sliding-window limit=5 window=1s",
                           "sliding-log limit=5 window=1s",
                           "token-bucket capacity=9 rate=1/s; sliding-log limit=5 window=1s",
                           "fixed-window limit=5 window=1s; shadow token-bucket capacity=2 rate=1/s",
                           "shadow fixed-window limit=5 window=1s"};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        int64_t now = 1000;
        sluice_clock *c = sluice_clock_callback_new(set_now, NULL, &now);
        sluice_limiter *l = make(specs[i], c);
        REQUIRE(c && l);
        int64_t max = sluice_policy_max_cost(sluice_limiter_policy(l));
        sluice_decision d, e;
        CHECK_EQ(sluice_acquire(l, 2, &d), 0); /* something to give back */
        CHECK_EQ(sluice_acquire(l, 1, &d), 0);
        verb_snap before, after;
        snap_verbs(l, now, &before);
        /* costs: 0, negative, above the largest */
        int64_t bad[] = {0, -1, -max, max + 1, INT64_MIN, INT64_MAX};
        for (size_t k = 0; k < sizeof bad / sizeof bad[0]; k++) {
            CHECK_EQ(sluice_peek(l, bad[k], &d), SLUICE_ECOST);
            CHECK_EQ(sluice_peek_at(l, bad[k], now, &d), SLUICE_ECOST);
            CHECK_EQ(sluice_refund(l, bad[k], &d), SLUICE_ECOST);
            CHECK_EQ(sluice_refund(l, bad[k], NULL), SLUICE_ECOST);
            CHECK_EQ(sluice_refund_at(l, bad[k], now, &d), SLUICE_ECOST);
            CHECK_EQ(sluice_refund_at(l, bad[k], now, NULL), SLUICE_ECOST);
        }
        /* readings outside the accepted range, given or read from the clock */
        int64_t far[] = {SLUICE_TIME_MAX_MS + 1, SLUICE_TIME_MIN_MS - 1, INT64_MAX, INT64_MIN};
        for (size_t k = 0; k < sizeof far / sizeof far[0]; k++) {
            CHECK_EQ(sluice_peek_at(l, 1, far[k], &d), SLUICE_EINVAL);
            CHECK_EQ(sluice_refund_at(l, 1, far[k], &d), SLUICE_EINVAL);
            CHECK_EQ(sluice_refund_at(l, 1, far[k], NULL), SLUICE_EINVAL);
            now = far[k];
            CHECK_EQ(sluice_peek(l, 1, &d), SLUICE_EINVAL);
            CHECK_EQ(sluice_refund(l, 1, &d), SLUICE_EINVAL);
            CHECK_EQ(sluice_refund(l, 1, NULL), SLUICE_EINVAL);
            CHECK_EQ(sluice_reset(l, &d), SLUICE_EINVAL); /* and not reset */
            CHECK_EQ(sluice_reset(l, NULL), SLUICE_EINVAL);
            now = 1000;
        }
        /* NULL: the limiter (every verb), the peek's out (refund and reset
         * take NULL) */
        CHECK_EQ(sluice_peek(NULL, 1, &d), SLUICE_EINVAL);
        CHECK_EQ(sluice_peek_at(NULL, 1, now, &d), SLUICE_EINVAL);
        CHECK_EQ(sluice_refund(NULL, 1, &d), SLUICE_EINVAL);
        CHECK_EQ(sluice_refund_at(NULL, 1, now, NULL), SLUICE_EINVAL);
        CHECK_EQ(sluice_reset(NULL, &d), SLUICE_EINVAL);
        CHECK_EQ(sluice_reset(NULL, NULL), SLUICE_EINVAL);
        CHECK_EQ(sluice_peek(l, 1, NULL), SLUICE_EINVAL);
        CHECK_EQ(sluice_peek_at(l, 1, now, NULL), SLUICE_EINVAL);
        snap_verbs(l, now, &after);
        if (!snap_same(&before, &after)) fprintf(stderr, "%s: bad input changed the state\n", specs[i]);
        CHECK(snap_same(&before, &after));
        /* the good calls still work: a peek says what the acquire does, a
         * refund with NULL out gives back, a reset with NULL out resets */
        CHECK_EQ(sluice_peek(l, 1, &d), 0);
        CHECK_EQ(sluice_acquire(l, 1, &e), 0);
        CHECK(same_all(&d, &e));
        CHECK_EQ(sluice_refund(l, 1, NULL), 0);
        snap_verbs(l, now, &after);
        /* an exact undo at the same reading (but of a shadow part that
         * would have denied it: it gives back what it did not count) */
        if (!e.shadow_denied && !snap_same(&before, &after)) fprintf(stderr, "%s: not undone\n", specs[i]);
        CHECK(e.shadow_denied || snap_same(&before, &after));
        CHECK_EQ(sluice_reset(l, NULL), 0);
        CHECK_EQ(sluice_peek(l, 1, &d), 0);
        CHECK(d.allowed);
        CHECK_EQ(d.remaining, max == SLUICE_LIMIT_MAX ? SLUICE_LIMIT_MAX : max - 1);
        CHECK(!d.shadow_denied);
        sluice_limiter_free(l);
        sluice_clock_free(c);
    }
}

/* ---- the verbs under contention ---- */

enum { N_VERB_THREADS = 4 };

typedef struct {
    sluice_limiter *l;
    int64_t now_ms;
    int attempts;
    uint64_t seed;
    pthread_barrier_t *go;
    meet *meet;
    long admitted, refunded; /* cost */
    int out_of_range;        /* decisions with remaining < 0 or > limit */
    int errors;
} verb_racer;

static int in_range(const sluice_decision *d) { return d->remaining >= 0 && d->remaining <= d->limit; }

/* Acquires (costs 1..3), refunds only what it was admitted itself (often at
 * once, sometimes later), peeks; all at one frozen reading. */
static void *verb_race(void *arg) {
    verb_racer *r = arg;
    int64_t *mine = malloc((size_t)r->attempts * sizeof *mine); /* costs admitted, not yet refunded */
    size_t n_mine = 0;
    uint64_t rs = r->seed;
    long last = -1;
    pthread_barrier_wait(r->go);
    for (int i = 0; i < r->attempts; i++) {
        sluice_decision d;
        meet_step(r->meet, &last);
        int u = (int)check_range_(&rs, 0, 9), rc = 0;
        if (u < 6 || (u < 9 && n_mine == 0)) {
            int64_t cost = check_range_(&rs, 1, 3);
            rc = sluice_acquire_at(r->l, cost, r->now_ms, &d);
            if (rc == 0 && d.allowed) mine[n_mine++] = cost, r->admitted += cost;
        } else if (u < 9) {
            size_t k = check_range_(&rs, 0, 1) ? n_mine - 1 : (size_t)check_range_(&rs, 0, (int64_t)n_mine - 1);
            int64_t cost = mine[k];
            mine[k] = mine[--n_mine];
            bool out = check_range_(&rs, 0, 3) != 0;
            rc = sluice_refund_at(r->l, cost, r->now_ms, out ? &d : NULL);
            if (rc == 0) r->refunded += cost;
            if (rc == 0 && !out) continue;
        } else {
            rc = sluice_peek_at(r->l, check_range_(&rs, 1, 3), r->now_ms, &d);
        }
        if (rc) r->errors++;
        else if (!in_range(&d)) r->out_of_range++;
    }
    free(mine);
    return NULL;
}

/* N threads mixing acquire and refund on one limiter at a frozen reading:
 * no decision sees the state beyond fresh or below empty; what is admitted
 * and not given back never exceeds the capacity, and is at the end exactly
 * what each enforced part holds (nothing drains at one reading). Rounds
 * until the threads really met (as in check_exact). */
static void check_verbs_race(const char *spec, int64_t reading) {
    int raced = 0;
    meet m = {0};
    /* long enough rounds (tens of ms) that the threads overlap even on a
     * busy machine or a single CPU */
    int attempts = (int)(200000 * test_scale_sanitized(0.1));
    for (int round = 0; round < 10 && !raced; round++) {
        sluice_clock *c = sluice_clock_manual_new(1000);
        sluice_limiter *l = make(spec, c);
        REQUIRE(l != NULL);
        const sluice_policy *p = sluice_limiter_policy(l);
        pthread_t t[N_VERB_THREADS];
        verb_racer r[N_VERB_THREADS];
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, N_VERB_THREADS);
        for (int i = 0; i < N_VERB_THREADS; i++) {
            r[i] = (verb_racer){.l = l, .now_ms = reading, .attempts = attempts, .seed = 77 + (uint64_t)(round * 10 + i), .go = &go, .meet = &m};
            pthread_create(&t[i], NULL, verb_race, &r[i]);
        }
        long admitted = 0, refunded = 0;
        int out_of_range = 0, errors = 0;
        for (int i = 0; i < N_VERB_THREADS; i++) {
            pthread_join(t[i], NULL);
            admitted += r[i].admitted;
            refunded += r[i].refunded;
            out_of_range += r[i].out_of_range;
            errors += r[i].errors;
        }
        pthread_barrier_destroy(&go);
        long net = admitted - refunded, cap = (long)sluice_policy_max_cost(p);
        CHECK_EQ(errors, 0);
        CHECK_EQ(out_of_range, 0);
        CHECK(refunded > 0);
        if (net < 0 || net > cap) fprintf(stderr, "%s: %ld admitted, %ld refunded, capacity %ld\n", spec, admitted, refunded, cap);
        CHECK(net >= 0 && net <= cap);
        for (size_t i = 0; i < sluice_policy_n_parts(p); i++) {
            sluice_decision d;
            sluice__limiter_peek_part(l, i, reading, &d);
            CHECK(in_range(&d));
            if (sluice_policy_part_shadow(p, i)) continue; /* it counts only what it would admit */
            if (d.remaining != d.limit - net)
                fprintf(stderr, "%s: part %zu holds %lld, %ld admitted and not refunded\n", spec, i,
                        (long long)(d.limit - d.remaining), net);
            CHECK_EQ(d.remaining, d.limit - net);
        }
        raced = sluice__limiter_contention(l) > 0;
        sluice_limiter_free(l);
        sluice_clock_free(c);
    }
    if (!raced && !atomic_load(&m.interleaved)) fprintf(stderr, "%s: the threads never met\n", spec);
    CHECK(raced || atomic_load(&m.interleaved));
}

TEST(threads_refund_token_bucket) {
    check_verbs_race("token-bucket capacity=300 rate=1/h", 5000);
    /* far from the creation: the word moves to the locked form on the way */
    check_verbs_race("token-bucket capacity=300 rate=999999937/7s", INT64_C(1) << 60);
}
TEST(threads_refund_leaky_bucket) { check_verbs_race("leaky-bucket capacity=300 rate=1/h", 1000); }
TEST(threads_refund_fixed_window) { check_verbs_race("fixed-window limit=300 window=1h", 1000); }
TEST(threads_refund_sliding_window) { check_verbs_race("sliding-window limit=300 window=1h", 1000); }
TEST(threads_refund_sliding_log) { check_verbs_race("sliding-log limit=300 window=1h", 1000); }
TEST(threads_refund_composite) {
    check_verbs_race("token-bucket capacity=500 rate=1/h; fixed-window limit=300 window=1h; sliding-log limit=400 window=1h",
                     1000);
    check_verbs_race("sliding-window limit=300 window=1h; shadow token-bucket capacity=50 rate=1/h", 1000);
}

/* ---- clocks ---- */

static int64_t fixed_now(void *u) { return *(int64_t *)u; }

TEST(clocks) {
    sluice_clock *c = sluice_clock_manual_new(-5);
    REQUIRE(c != NULL);
    CHECK_EQ(sluice_clock_now_ms(c), -5);
    sluice_clock_manual_advance(c, 10);
    CHECK_EQ(sluice_clock_now_ms(c), 5);
    sluice_clock_manual_set(c, 2);
    CHECK_EQ(sluice_clock_now_ms(c), 2); /* backwards is allowed */
    sluice_clock_manual_advance(c, -3);
    CHECK_EQ(sluice_clock_now_ms(c), -1);
    sluice_clock_sleep_ms(c, 100);
    CHECK_EQ(sluice_clock_now_ms(c), 99);
    sluice_clock_manual_advance(c, INT64_MAX);
    CHECK_EQ(sluice_clock_now_ms(c), SLUICE_TIME_MAX_MS); /* saturates */
    sluice_clock_manual_advance(c, INT64_MIN);
    CHECK_EQ(sluice_clock_now_ms(c), SLUICE_TIME_MIN_MS);
    sluice_clock_manual_set(c, INT64_MAX);
    CHECK_EQ(sluice_clock_now_ms(c), SLUICE_TIME_MAX_MS);
    sluice_clock_free(c);
    CHECK(sluice_clock_manual_new(SLUICE_TIME_MAX_MS + 1) == NULL);

    int64_t t = 42;
    sluice_clock *cb = sluice_clock_callback_new(fixed_now, NULL, &t);
    REQUIRE(cb != NULL);
    CHECK_EQ(sluice_clock_now_ms(cb), 42);
    t = 7;
    CHECK_EQ(sluice_clock_now_ms(cb), 7);
    sluice_clock_free(cb);
    CHECK(sluice_clock_callback_new(NULL, NULL, NULL) == NULL);

    const sluice_clock *m = sluice_clock_monotonic();
    int64_t a = sluice_clock_now_ms(m);
    for (int i = 0; i < 100000; i++) {
        int64_t b = sluice_clock_now_ms(m);
        CHECK(b >= a);
        a = b;
    }
    sluice_clock_free((sluice_clock *)m); /* ignored */
    sluice_clock_free(NULL);
}

TEST(errors_have_names) {
    CHECK_STR(sluice_err_name(SLUICE_ECOST), "SLUICE_ECOST");
    CHECK_STR(sluice_strerror(SLUICE_OK), "success");
    CHECK_STR(sluice_err_name(12345), "SLUICE_UNKNOWN");
    CHECK(strlen(sluice_strerror(-999)) > 0);
}

/* Every field of every verb's decision is filled, local (false) too, over
 * whatever the caller's struct held. */
TEST(decisions_are_not_local) {
    static const char *const specs[] = {STORE_TEST_SPECS STORE_TEST_SHADOW_SPECS};
    for (size_t i = 0; i < sizeof specs / sizeof specs[0]; i++) {
        sluice_clock *c = sluice_clock_manual_new(1000);
        sluice_limiter *l = make(specs[i], c);
        REQUIRE(l != NULL);
        for (int verb = 0; verb < 5; verb++) {
            sluice_decision d;
            memset(&d, 0xa5, sizeof d);
            int rc = verb == 0   ? sluice_acquire_at(l, 1, 1000, &d)
                     : verb == 1 ? sluice_peek_at(l, 1, 1000, &d)
                     : verb == 2 ? sluice_refund_at(l, 1, 1000, &d)
                     : verb == 3 ? sluice_acquire(l, 1, &d)
                                 : sluice_reset(l, &d);
            CHECK_EQ(rc, 0);
            if (d.local != false) fprintf(stderr, "%s, verb %d: local is not false\n", specs[i], verb);
            CHECK(d.local == false);
        }
        sluice_limiter_free(l);
        sluice_clock_free(c);
    }
}

TEST_MAIN(decisions_are_not_local, threads_token_bucket_exact, threads_leaky_bucket_exact, threads_fixed_window_exact,
          threads_sliding_window_exact, threads_sliding_log_exact, threads_composite_exact,
          threads_token_bucket_moving_exact, threads_seed_100_of_400, threads_random_costs_never_over,
          threads_composite_consumes_all_or_nothing, wait_sleeps_exactly_the_retry,
          wait_gives_up_at_once_consuming_nothing, wait_never_passes_the_deadline,
          wait_on_a_reading_out_of_range, wait_real_clock_short, bad_costs_change_nothing, bad_arguments,
          verbs_bad_input_changes_nothing, threads_refund_token_bucket, threads_refund_leaky_bucket,
          threads_refund_fixed_window, threads_refund_sliding_window, threads_refund_sliding_log,
          threads_refund_composite, clocks, errors_have_names)
