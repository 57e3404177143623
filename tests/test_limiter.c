/* test_limiter.c: the single limiter as users see it: many threads on one
 * limiter with a frozen clock admit exactly the capacity (and really raced);
 * composites never over-admit a part; the blocking wait never overstays its
 * deadline and consumes nothing when it gives up; bad input changes nothing;
 * the clocks. */
#include "check.h"
#include "store_util.h"
#include "internal.h"

#include <pthread.h>

/* ---- helpers ---- */

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
    long admitted; /* cost admitted */
    int errors;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    pthread_barrier_wait(r->go);
    for (int i = 0; i < r->attempts; i++) {
        sluice_decision d;
        int rc = r->now_ms == INT64_MIN ? sluice_acquire(r->l, r->cost, &d)
                                        : sluice_acquire_at(r->l, r->cost, r->now_ms, &d);
        if (rc) r->errors++;
        else if (d.allowed) r->admitted += r->cost;
    }
    return NULL;
}

/* Races N threads on l; returns the total cost admitted. */
static long race_all(sluice_limiter *l, int64_t now_ms, int attempts, int64_t cost) {
    pthread_t t[N_THREADS];
    racer r[N_THREADS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N_THREADS);
    for (int i = 0; i < N_THREADS; i++) {
        r[i] = (racer){.l = l, .now_ms = now_ms, .attempts = attempts, .cost = cost, .go = &go};
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
 * did, a few times: a test that cannot have raced proves nothing). Rounds
 * are long enough (tens of ms) that the threads overlap even when the
 * machine is busy with other tests. */
static void check_exact(const char *spec, long capacity, int64_t reading) {
    int raced = 0;
    for (int round = 0; round < 20 && !raced; round++) {
        sluice_clock *c = sluice_clock_manual_new(1000);
        sluice_limiter *l = make(spec, c);
        REQUIRE(l != NULL);
        /* together they try twice the capacity */
        long got = race_all(l, reading, (int)(capacity / 4 + 50), 1);
        if (got != capacity) fprintf(stderr, "%s: admitted %ld of %ld\n", spec, got, capacity);
        CHECK_EQ(got, capacity);
        raced = sluice__limiter_contention(l) > 0;
        sluice_limiter_free(l);
        sluice_clock_free(c);
    }
    if (!raced) fprintf(stderr, "%s: the threads never met\n", spec);
    CHECK(raced);
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
    CHECK_EQ(race_all(l, INT64_MIN, 50, 1), 100);
    sluice_limiter_free(l);
    sluice_clock_free(c);
}

/* Costs above 1 under contention: never more than the capacity. */
TEST(threads_random_costs_never_over) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_limiter *l = make("token-bucket capacity=997 rate=1/s", c);
    REQUIRE(l != NULL);
    long got = race_all(l, INT64_MIN, 400, 3);
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
    CHECK_EQ(race_all(l, INT64_MIN, 200, 1), 300);
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

TEST_MAIN(threads_token_bucket_exact, threads_leaky_bucket_exact, threads_fixed_window_exact,
          threads_sliding_window_exact, threads_sliding_log_exact, threads_composite_exact,
          threads_token_bucket_moving_exact, threads_seed_100_of_400, threads_random_costs_never_over,
          threads_composite_consumes_all_or_nothing, wait_sleeps_exactly_the_retry,
          wait_gives_up_at_once_consuming_nothing, wait_never_passes_the_deadline,
          wait_on_a_reading_out_of_range, wait_real_clock_short, bad_costs_change_nothing, bad_arguments, clocks, errors_have_names)
