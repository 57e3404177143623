/* test_algorithms.c: each algorithm on small examples worked out by hand
 * from docs/semantics.md, the derivation next to each expected value.
 * Includes the seed's scenarios (/work/shared/seeds/000_*: "Main"), where our
 * answers differ from the seed's only where the seed guessed (its sliding
 * window retry hints) and ours are exact. */
#include "check.h"
#include "internal.h"

/* Decides cost at reading t on limiter l and checks every field. */
#define EXPECT_AT(l, t, cost, want_allowed, want_remaining, want_retry, want_reset, want_delay)       \
    do {                                                                                             \
        sluice_decision d_;                                                                          \
        memset(&d_, 0x5a, sizeof d_);                                                                \
        CHECK_EQ(sluice_acquire_at((l), (cost), (t), &d_), SLUICE_OK);                               \
        CHECK_EQ(d_.allowed, (want_allowed));                                                        \
        CHECK_EQ(d_.remaining, (want_remaining));                                                    \
        CHECK_EQ(d_.retry_after_ms, (want_retry));                                                   \
        CHECK_EQ(d_.reset_ms, (want_reset));                                                         \
        CHECK_EQ(d_.delay_ms, (want_delay));                                                         \
        CHECK(d_.enforced);                                                                          \
    } while (0)

/* The same at the clock's reading (sluice_acquire). */
#define EXPECT_NOW(l, cost, want_allowed, want_remaining, want_retry, want_reset)                     \
    do {                                                                                             \
        sluice_decision d_;                                                                          \
        memset(&d_, 0x5a, sizeof d_);                                                                \
        CHECK_EQ(sluice_acquire((l), (cost), &d_), SLUICE_OK);                                       \
        CHECK_EQ(d_.allowed, (want_allowed));                                                        \
        CHECK_EQ(d_.remaining, (want_remaining));                                                    \
        CHECK_EQ(d_.retry_after_ms, (want_retry));                                                   \
        CHECK_EQ(d_.reset_ms, (want_reset));                                                         \
        CHECK_EQ(d_.delay_ms, 0);                                                                    \
    } while (0)

/* Also the limit and the part that set it (policies). */
#define EXPECT_PART(l, t, cost, want_allowed, want_remaining, want_retry, want_reset, want_limit,     \
                    want_part)                                                                       \
    do {                                                                                             \
        sluice_decision d_;                                                                          \
        memset(&d_, 0x5a, sizeof d_);                                                                \
        CHECK_EQ(sluice_acquire_at((l), (cost), (t), &d_), SLUICE_OK);                               \
        CHECK_EQ(d_.allowed, (want_allowed));                                                        \
        CHECK_EQ(d_.remaining, (want_remaining));                                                    \
        CHECK_EQ(d_.retry_after_ms, (want_retry));                                                   \
        CHECK_EQ(d_.reset_ms, (want_reset));                                                         \
        CHECK_EQ(d_.limit, (want_limit));                                                            \
        CHECK_EQ(d_.part, (want_part));                                                              \
    } while (0)

#define DAY30 INT64_C(2592000000)

static sluice_limiter *make(sluice_config c, sluice_clock *clk) {
    sluice_limiter *l = NULL;
    CHECK_EQ(sluice_limiter_new(&c, clk, &l), SLUICE_OK);
    return l;
}

static sluice_limiter *make_policy(const char *text, sluice_clock *clk) {
    sluice_policy *p = NULL;
    sluice_limiter *l = NULL;
    char err[200] = "";
    int rc = sluice_policy_parse("p", text, &p, err, sizeof err);
    if (rc != SLUICE_OK) fprintf(stderr, "policy \"%s\": %s\n", text, err);
    CHECK_EQ(rc, SLUICE_OK);
    if (p) CHECK_EQ(sluice_limiter_new_policy(p, clk, &l), SLUICE_OK);
    sluice_policy_free(p);
    return l;
}

/* ------------------------------------------------------------------------ */
/* Token bucket                                                              */
/* ------------------------------------------------------------------------ */

/* The seed's bucket: capacity 3, 1 token per second. r = 1, p = 1000,
 * tau = 3000 (scaled units = ms here). */
TEST(token_bucket_seed) {
    sluice_clock *clk = sluice_clock_manual_new(0);
    sluice_limiter *l = make(sluice_token_bucket(3, 1, 1000), clk);
    /* t=0: TAT 1000, 2000, 3000: remaining floor((3000 - b')/1000), reset b' */
    EXPECT_NOW(l, 1, true, 2, 0, 1000);
    EXPECT_NOW(l, 1, true, 1, 0, 2000);
    EXPECT_NOW(l, 1, true, 0, 0, 3000);
    /* b = 3000, b + 1000 > 3000: retry ceil((3000 + 1000 - 3000)/1) = 1000 */
    EXPECT_NOW(l, 1, false, 0, 1000, 3000);
    sluice_clock_manual_advance(clk, 500);
    /* t=500: b = 2500, retry 2500 + 1000 - 3000 = 500; half a token: 0 */
    EXPECT_NOW(l, 1, false, 0, 500, 2500);
    sluice_clock_manual_advance(clk, 500);
    /* t=1000: b = 2000, 2000 + 1000 <= 3000: admitted, TAT 4000, b' 3000 */
    EXPECT_NOW(l, 1, true, 0, 0, 3000);
    sluice_clock_manual_advance(clk, 60000);
    /* t=61000: b = 0 (refill capped at C), cost 3 fits exactly */
    EXPECT_NOW(l, 3, true, 0, 0, 3000);
    sluice_decision d;
    CHECK_EQ(sluice_acquire(l, 5, &d), SLUICE_ECOST); /* "cost 5 is outside 1..3" */
    EXPECT_NOW(l, 1, false, 0, 1000, 3000);            /* and nothing changed */
    sluice_limiter_free(l);
    sluice_clock_free(clk);
}

/* A rate that is not a whole number per ms: 3 tokens per 7 ms, capacity 2.
 * gcd(3, 7) = 1: r = 3 units per ms, p = 7 units per token, tau = 14. */
TEST(token_bucket_fractional_rate) {
    sluice_limiter *l = make(sluice_token_bucket(2, 3, 7), NULL);
    /* t=0 cost 2: b=0, 0+14 <= 14: TAT 14, remaining 0, reset ceil(14/3) = 5 */
    EXPECT_AT(l, 0, 2, true, 0, 0, 5, 0);
    /* t=1: ts 3, b 11, 11+7 = 18 > 14: retry ceil(4/3) = 2, reset ceil(11/3) = 4 */
    EXPECT_AT(l, 1, 1, false, 0, 2, 4, 0);
    /* t=2: ts 6, b 8, 15 > 14: retry ceil(1/3) = 1; remaining floor(6/7) = 0 */
    EXPECT_AT(l, 2, 1, false, 0, 1, 3, 0);
    /* t=3: ts 9, b 5, 12 <= 14: TAT 21, b' 12, remaining 0, reset 4 */
    EXPECT_AT(l, 3, 1, true, 0, 0, 4, 0);
    /* t=5: ts 15, b 6, 13 <= 14: TAT 28, b' 13, reset ceil(13/3) = 5 */
    EXPECT_AT(l, 5, 1, true, 0, 0, 5, 0);
    /* t=10: ts 30 >= 28, full: cost 2, TAT 44, reset 5 */
    EXPECT_AT(l, 10, 2, true, 0, 0, 5, 0);
    /* t=14: ts 42, b 2, 9 <= 14: TAT 51, b' 9, remaining floor(5/7) = 0, reset 3 */
    EXPECT_AT(l, 14, 1, true, 0, 0, 3, 0);
    sluice_limiter_free(l);
}

/* A reading earlier than one already seen only sees a larger backlog. */
TEST(token_bucket_backward_step) {
    sluice_limiter *l = make(sluice_token_bucket(3, 1, 1000), NULL);
    EXPECT_AT(l, 10000, 3, true, 0, 0, 3000, 0); /* TAT 13000 */
    /* t=9000: b = 4000: retry 4000 + 1000 - 3000 = 2000, reset 4000 */
    EXPECT_AT(l, 9000, 1, false, 0, 2000, 4000, 0);
    EXPECT_AT(l, 10999, 1, false, 0, 1, 2001, 0);
    /* t=11000: b = 2000, admitted: b' 3000 */
    EXPECT_AT(l, 11000, 1, true, 0, 0, 3000, 0);
    /* t=13000: TAT 14000, b 1000: cost 1 leaves b' 2000: one more token */
    EXPECT_AT(l, 13000, 1, true, 1, 0, 2000, 0);
    sluice_limiter_free(l);
}

/* Readings at the ends of the range: 10^9 per second (r = 10^6, p = 1 after
 * dividing by gcd 1000), capacity 10^9 (tau = 10^9). The limiter is made at
 * 0, so a reading at 2^61 is far outside its 64-bit word. */
TEST(token_bucket_far_readings) {
    sluice_clock *clk = sluice_clock_manual_new(0);
    sluice_limiter *l = make(sluice_token_bucket(1000000000, 1000000000, 1000), clk);
    /* cost 1: b' = p = 1: remaining 10^9 - 1, reset ceil(1/10^6) = 1 */
    EXPECT_AT(l, SLUICE_TIME_MAX_MS, 1, true, 999999999, 0, 1, 0);
    /* back at 0: b = 2^61 * 10^6 + 1; cost 1 needs b <= tau - p:
     * retry = ceil((2^61*10^6 + 1 - 10^9 + 1) / 10^6) = 2^61 - 999,
     * reset = ceil((2^61*10^6 + 1) / 10^6) = 2^61 + 1 */
    EXPECT_AT(l, 0, 1, false, 0, SLUICE_TIME_MAX_MS - 999, SLUICE_TIME_MAX_MS + 1, 0);
    /* and at the far past: b = 2^62 * 10^6 + 1 */
    EXPECT_AT(l, SLUICE_TIME_MIN_MS, 1, false, 0, 2 * SLUICE_TIME_MAX_MS - 999, 2 * SLUICE_TIME_MAX_MS + 1, 0);
    sluice_limiter_free(l);
    sluice_clock_free(clk);

    /* 1 per 30 days, capacity 1: a wait of 2^62 ms and more */
    l = make(sluice_token_bucket(1, 1, DAY30), NULL);
    EXPECT_AT(l, SLUICE_TIME_MAX_MS, 1, true, 0, 0, DAY30, 0);
    /* b = 2^62 + DAY30 (r = 1): cost 1 needs b = 0 */
    EXPECT_AT(l, SLUICE_TIME_MIN_MS, 1, false, 0, 2 * SLUICE_TIME_MAX_MS + DAY30, 2 * SLUICE_TIME_MAX_MS + DAY30, 0);
    sluice_limiter_free(l);
}

/* The lock-free limiter keeps TAT - epoch*r in a 64-bit word. 4 per ms
 * (r = 4, p = 1), capacity 2, made at 0: at the reading -2^61,
 * (t - epoch)*r = -2^63 exactly, and cost 1 makes TAT - epoch*r = -2^63 + 1,
 * a value the word cannot hold as an ordinary state. The decisions must not
 * notice: cost 1 leaves backlog 1 unit (1/4 ms). */
TEST(token_bucket_word_edge) {
    sluice_clock *clk = sluice_clock_manual_new(0);
    sluice_limiter *l = make(sluice_token_bucket(2, 4, 1), clk);
    /* b' = 1: remaining floor((2 - 1)/1) = 1, reset ceil(1/4) = 1 */
    EXPECT_AT(l, SLUICE_TIME_MIN_MS, 1, true, 1, 0, 1, 0);
    /* cost 2: b = 1, 1 + 2 > 2: retry ceil(1/4) = 1, remaining 1, reset 1 */
    EXPECT_AT(l, SLUICE_TIME_MIN_MS, 2, false, 1, 1, 1, 0);
    EXPECT_AT(l, SLUICE_TIME_MIN_MS + 1, 2, true, 0, 0, 1, 0);
    sluice_limiter_free(l);
    sluice_clock_free(clk);
}

/* "gcra rate=100/s burst=20" is the token bucket of capacity 20. */
TEST(gcra_is_a_token_bucket) {
    sluice_config c;
    char err[200];
    CHECK_EQ(sluice_config_parse("gcra rate=100/s burst=20", &c, err, sizeof err), SLUICE_OK);
    CHECK_EQ(c.algorithm, SLUICE_TOKEN_BUCKET);
    CHECK_EQ(c.limit, 20);
    CHECK_EQ(c.rate * 1000, 100 * c.period_ms); /* 100 per 1000 ms, in any form */
    sluice_limiter *l = make(c, NULL);
    /* r/p = 1/10: 20 at once, then one per 10 ms */
    for (int i = 19; i >= 0; i--) EXPECT_AT(l, 0, 1, true, i, 0, 10 * (20 - i), 0);
    EXPECT_AT(l, 0, 1, false, 0, 10, 200, 0);
    EXPECT_AT(l, 10, 1, true, 0, 0, 200, 0);
    sluice_limiter_free(l);
}

/* ------------------------------------------------------------------------ */
/* Leaky bucket (shaper)                                                     */
/* ------------------------------------------------------------------------ */

/* Capacity 3, drains 1 per second: the queue's TAT as the token bucket's;
 * delay = ceil(b/r), the time until the work ahead has drained. */
TEST(leaky_bucket_delays) {
    sluice_limiter *l = make(sluice_leaky_bucket(3, 1, 1000), NULL);
    EXPECT_AT(l, 0, 1, true, 2, 0, 1000, 0);    /* empty queue: go now        */
    EXPECT_AT(l, 0, 1, true, 1, 0, 2000, 1000); /* behind 1000 ms of work     */
    EXPECT_AT(l, 0, 1, true, 0, 0, 3000, 2000); /* behind 2000 ms             */
    EXPECT_AT(l, 0, 1, false, 0, 1000, 3000, 0); /* full: room in 1000 ms     */
    /* t=1000: b = 2000: delay 2000, queue full again */
    EXPECT_AT(l, 1000, 1, true, 0, 0, 3000, 2000);
    /* t=2500: TAT 4000, b = 1500: delay 1500, TAT 5000, b' 2500 */
    EXPECT_AT(l, 2500, 1, true, 0, 0, 2500, 1500);
    /* t=5000: drained: delay 0 */
    EXPECT_AT(l, 5000, 1, true, 2, 0, 1000, 0);
    /* cost 2 behind 1000 ms: b + 2000 = 3000 <= 3000 */
    EXPECT_AT(l, 5000, 2, true, 0, 0, 3000, 1000);
    sluice_limiter_free(l);
}

/* ------------------------------------------------------------------------ */
/* Fixed window                                                              */
/* ------------------------------------------------------------------------ */

/* The seed's boundary burst: 10 per 1000 ms lets 10 through at 999 and 10
 * more at 1000, twenty within 1 ms (which is why the sliding kinds exist). */
TEST(fixed_window_boundary_burst) {
    sluice_limiter *l = make(sluice_fixed_window(10, 1000), NULL);
    for (int i = 9; i >= 0; i--) EXPECT_AT(l, 999, 1, true, i, 0, 1, 0); /* reset: window ends at 1000 */
    EXPECT_AT(l, 999, 1, false, 0, 1, 1, 0);
    for (int i = 9; i >= 0; i--) EXPECT_AT(l, 1000, 1, true, i, 0, 1000, 0);
    EXPECT_AT(l, 1000, 1, false, 0, 1000, 1000, 0);
    /* back at 999: stays in window 1 (the newest counted in): retry and
     * reset (1+1)*1000 - 999 = 1001 */
    EXPECT_AT(l, 999, 1, false, 0, 1001, 1001, 0);
    EXPECT_AT(l, 2000, 10, true, 0, 0, 1000, 0);
    sluice_limiter_free(l);
}

/* Windows on negative readings are floored: [-1000, 0) is window -1. */
TEST(fixed_window_negative_readings) {
    sluice_limiter *l = make(sluice_fixed_window(2, 1000), NULL);
    EXPECT_AT(l, -1, 2, true, 0, 0, 1, 0);
    EXPECT_AT(l, -1, 1, false, 0, 1, 1, 0);
    EXPECT_AT(l, -1000, 1, false, 0, 1000, 1000, 0);
    EXPECT_AT(l, 0, 2, true, 0, 0, 1000, 0);
    /* back to -500: window 0 still: 1000 - (-500) = 1500 */
    EXPECT_AT(l, -500, 1, false, 0, 1500, 1500, 0);
    sluice_limiter_free(l);
}

/* ------------------------------------------------------------------------ */
/* Sliding window counter                                                    */
/* ------------------------------------------------------------------------ */

/* The seed's window: limit 10 per 1000 ms, admitted when
 * P*(W - e) + (Cn + n)*W <= L*W. Our retry is exact where the seed hinted
 * at the next window boundary (1000 and 500 in the seed's output). */
TEST(sliding_window_seed) {
    sluice_clock *clk = sluice_clock_manual_new(0);
    sluice_limiter *l = make(sluice_sliding_window(10, 1000), clk);
    sluice_clock_manual_advance(clk, 900);
    /* t=900: window 0, e=900, P=0, Cn=0: 10*1000 <= 10000. remaining
     * 10 - 10 - 0 = 0; reset (K+2)*W - t = 2000 - 900 = 1100 */
    EXPECT_NOW(l, 10, true, 0, 0, 1100);
    sluice_clock_manual_advance(clk, 100);
    /* t=1000: window 1, e=0, P=10, Cn=0: 10*1000 + 1*1000 > 10000.
     * retry: least e in window 1 with 10*(1000 - e) + 1000 <= 10000,
     *   1000 - e <= 900, e >= 100: reading 1100, retry 100 (seed: 1000).
     * remaining max(0, 10 - 0 - ceil(10*1000/1000)) = 0.
     * reset: C' = 0, P > 0: (K+1)*W - t = 2000 - 1000 = 1000 */
    EXPECT_NOW(l, 1, false, 0, 100, 1000);
    sluice_clock_manual_advance(clk, 500);
    /* t=1500: e=500: 10*500 + 5*1000 = 10000 <= 10000. remaining
     * 10 - 5 - ceil(5000/1000) = 0; reset (1+2)*1000 - 1500 = 1500 */
    EXPECT_NOW(l, 5, true, 0, 0, 1500);
    /* t=1500 cost 1: 10*500 + 6*1000 = 11000 > 10000.
     * retry: least e with 10*(1000 - e) + 6000 <= 10000: 1000 - e <= 400,
     *   e >= 600: reading 1600, retry 100 (seed: 500).
     * remaining 0; reset: C' = 5 > 0: 3000 - 1500 = 1500 */
    EXPECT_NOW(l, 1, false, 0, 100, 1500);
    /* one ms early: e=599: 10*401 + 6000 = 10010 > 10000 */
    EXPECT_AT(l, 1599, 1, false, 0, 1, 1401, 0);
    /* at 1600: 10*400 + 6000 = 10000: admitted; remaining
     * 10 - 6 - ceil(4000/1000) = 0; reset 3000 - 1600 = 1400 */
    EXPECT_AT(l, 1600, 1, true, 0, 0, 1400, 0);
    sluice_limiter_free(l);
    sluice_clock_free(clk);
}

/* When the current window alone is too full, the wait runs into the next
 * window, where the current count becomes the fading previous one. */
TEST(sliding_window_retry_into_next_window) {
    sluice_limiter *l = make(sluice_sliding_window(10, 1000), NULL);
    EXPECT_AT(l, 100, 10, true, 0, 0, 1900, 0);
    /* t=200: Cn + 1 = 11 > 10 in window 0 whatever e; window 1 (P = 10,
     * Cn = 0): 10*(1000 - e2) + 1000 <= 10000 from e2 = 100: reading 1100.
     * reset: C' = 10 > 0: (0+2)*1000 - 200 = 1800 */
    EXPECT_AT(l, 200, 1, false, 0, 900, 1800, 0);
    /* t=1099: 10*901 + 1000 = 10010 > 10000; remaining
     * 10 - 0 - ceil(9010/1000) = 0; reset: C' = 0, P = 10: 2000 - 1099 */
    EXPECT_AT(l, 1099, 1, false, 0, 1, 901, 0);
    EXPECT_AT(l, 1100, 1, true, 0, 0, 1900, 0);
    sluice_limiter_free(l);

    /* A cost of the whole limit waits for a window free of the past: at
     * t=1500 (P = 10, e = 500) window 1 admits cost 10 only at e = 1000, so
     * the answer is window 2 with nothing carried: reading 2000, retry 500.
     * remaining now: 10 - 0 - ceil(10*500/1000) = 5; reset (1+1)*1000 - 1500. */
    l = make(sluice_sliding_window(10, 1000), NULL);
    EXPECT_AT(l, 100, 10, true, 0, 0, 1900, 0);
    EXPECT_AT(l, 1500, 10, false, 5, 500, 500, 0);
    /* t=1999, e = 999: 10*1 + 10000 > 10000; remaining 10 - ceil(10/1000) */
    EXPECT_AT(l, 1999, 10, false, 9, 1, 1, 0);
    /* t=2000: window 2, nothing carried (window 1 counted nothing); reset
     * (2+2)*1000 - 2000 */
    EXPECT_AT(l, 2000, 10, true, 0, 0, 2000, 0);
    sluice_limiter_free(l);
}

/* A backward reading is taken as the start of the newest window counted in,
 * where the previous window weighs the most. */
TEST(sliding_window_backward_step) {
    sluice_limiter *l = make(sluice_sliding_window(10, 1000), NULL);
    EXPECT_AT(l, 900, 10, true, 0, 0, 1100, 0);
    EXPECT_AT(l, 1500, 5, true, 0, 0, 1500, 0);
    /* t=500: te = 1000 (window 1, e = 0): 10*1000 + 6*1000 > 10000.
     * Admitted from e = 600 (as above): reading 1600, retry 1100.
     * remaining max(0, 10 - 5 - 10) = 0; reset (1+2)*1000 - 500 = 2500 */
    EXPECT_AT(l, 500, 1, false, 0, 1100, 2500, 0);
    sluice_limiter_free(l);
}

/* ------------------------------------------------------------------------ */
/* Sliding log                                                               */
/* ------------------------------------------------------------------------ */

/* Exact: never more than 3 in any 1000 consecutive ms; used counts entries
 * with ts > te - W. */
TEST(sliding_log_exact) {
    sluice_limiter *l = make(sluice_sliding_log(3, 1000), NULL);
    EXPECT_AT(l, 0, 1, true, 2, 0, 1000, 0);   /* reset: newest + W - t */
    EXPECT_AT(l, 100, 1, true, 1, 0, 1000, 0);
    EXPECT_AT(l, 200, 1, true, 0, 0, 1000, 0);
    /* t=999: all three in (-1, 999]. The least j with
     * sum_{i>=j} n_i + 1 <= 3 is j = 2 (entries 100, 200): A = ts_1 + W =
     * 1000, retry 1. reset 200 + 1000 - 999 = 201 */
    EXPECT_AT(l, 999, 1, false, 0, 1, 201, 0);
    /* t=1000: the entry at 0 is out ((0, 1000] excludes it): used 2 */
    EXPECT_AT(l, 1000, 1, true, 0, 0, 1000, 0);
    /* cost 2: entries 100, 200, 1000; j = 3 (1 + 2 <= 3): A = 200 + 1000 */
    EXPECT_AT(l, 1000, 2, false, 0, 200, 1000, 0);
    /* t=1199: used 2 (entries 200, 1000), remaining 1; reset 2000 - 1199 */
    EXPECT_AT(l, 1199, 2, false, 1, 1, 801, 0);
    /* backward to 500: te = 1000 (the newest entry); cost 1: j = 2
     * (200, 1000): A = 100 + 1000 = 1100, retry 600; reset 1000+1000-500 */
    EXPECT_AT(l, 500, 1, false, 0, 600, 1500, 0);
    EXPECT_AT(l, 1200, 2, true, 0, 0, 1000, 0);
    sluice_limiter_free(l);
}

/* The log against the window counter: both limit 2 per 10 ms. At t = 15
 * after two at t = 9, the counter's estimate is 2*(10-5)/10 = 1 so it admits
 * one more; the log still holds both (9 > 15 - 10) and denies until 19. */
TEST(sliding_log_vs_counter) {
    sluice_limiter *lg = make(sluice_sliding_log(2, 10), NULL);
    sluice_limiter *sw = make(sluice_sliding_window(2, 10), NULL);
    EXPECT_AT(lg, 9, 2, true, 0, 0, 10, 0);
    EXPECT_AT(sw, 9, 2, true, 0, 0, 11, 0);
    EXPECT_AT(lg, 15, 1, false, 0, 4, 4, 0);
    /* counter: window 1, e = 5: 2*5 + 1*10 = 20 <= 20; remaining
     * 2 - 1 - ceil(10/10) = 0; reset (1+2)*10 - 15 = 15 */
    EXPECT_AT(sw, 15, 1, true, 0, 0, 15, 0);
    EXPECT_AT(lg, 19, 1, true, 1, 0, 10, 0);
    sluice_limiter_free(lg);
    sluice_limiter_free(sw);
}

/* ------------------------------------------------------------------------ */
/* Composite policies                                                        */
/* ------------------------------------------------------------------------ */

/* Token bucket 3 at 1/s (part 0) and 5 per 10 s fixed window (part 1). A
 * denial by either consumes nothing from the other. */
TEST(composite_denial_consumes_nothing) {
    sluice_limiter *l = make_policy("token-bucket capacity=3 rate=1/s; fixed-window limit=5 window=10s", NULL);
    if (!l) return;
    /* remaining min(bucket, window); reset the greater; limit/part of the least */
    EXPECT_PART(l, 0, 1, true, 2, 0, 10000, 3, 0);
    EXPECT_PART(l, 0, 1, true, 1, 0, 10000, 3, 0);
    EXPECT_PART(l, 0, 1, true, 0, 0, 10000, 3, 0);
    /* the bucket denies (retry 1000); the window would admit (remaining 2,
     * retry 0, reset 10000): greatest retry 1000, least remaining 0 */
    EXPECT_PART(l, 0, 1, false, 0, 1000, 10000, 3, 0);
    /* t=1000: bucket b = 2000 admits (b' 3000, remaining 0); window count 4 */
    EXPECT_PART(l, 1000, 1, true, 0, 0, 9000, 3, 0);
    /* t=3000 cost 2: bucket b = 1000 would admit (free now 2, reset 1000);
     * window 4 + 2 > 5 denies: retry 10000 - 3000 = 7000, remaining 1 */
    EXPECT_PART(l, 3000, 2, false, 1, 7000, 7000, 5, 1);
    /* nothing was taken from the bucket: cost 1 fits (b 1000 -> 2000,
     * remaining 1), the window takes its last (remaining 0, part 1) */
    EXPECT_PART(l, 3000, 1, true, 0, 0, 7000, 5, 1);
    EXPECT_PART(l, 3000, 1, false, 0, 7000, 7000, 5, 1);
    /* t=10000: new window; bucket TAT 5000: full */
    EXPECT_PART(l, 10000, 3, true, 0, 0, 10000, 3, 0);
    sluice_limiter_free(l);
}

/* Ties go to the first part; delay is the greatest (leaky parts only). */
TEST(composite_tie_and_delay) {
    sluice_limiter *l = make_policy("fixed-window limit=3 window=1s; token-bucket capacity=3 rate=1/s", NULL);
    if (!l) return;
    EXPECT_PART(l, 0, 1, true, 2, 0, 1000, 3, 0); /* 2 and 2: part 0 */
    /* t=1000: new window (remaining 2); bucket b = 0 (remaining 2): tie */
    EXPECT_PART(l, 1000, 1, true, 2, 0, 1000, 3, 0);
    EXPECT_PART(l, 1000, 2, true, 0, 0, 3000, 3, 0); /* both 0; bucket reset 3000 */
    sluice_limiter_free(l);

    l = make_policy("leaky-bucket capacity=3 rate=1/s; token-bucket capacity=5 rate=1/s", NULL);
    if (!l) return;
    EXPECT_AT(l, 0, 1, true, 2, 0, 1000, 0);
    EXPECT_AT(l, 0, 1, true, 1, 0, 2000, 1000);
    EXPECT_AT(l, 0, 1, true, 0, 0, 3000, 2000);
    EXPECT_AT(l, 0, 1, false, 0, 1000, 3000, 0); /* queue full; bucket has 2 */
    sluice_limiter_free(l);
}

/* ------------------------------------------------------------------------ */
/* Caller errors change nothing                                              */
/* ------------------------------------------------------------------------ */

/* Every algorithm (limit 3) and a policy: bad costs are SLUICE_ECOST, bad
 * readings SLUICE_EINVAL, and afterwards the limiter decides exactly like a
 * twin that never saw them. */
TEST(bad_costs_and_readings_change_nothing) {
    static const char *const texts[] = {
        "token-bucket capacity=3 rate=1/s", "leaky-bucket capacity=3 rate=1/s",
        "fixed-window limit=3 window=1s",   "sliding-window limit=3 window=1s",
        "sliding-log limit=3 window=1s",    "token-bucket capacity=3 rate=1/s; sliding-log limit=5 window=1s",
    };
    static const int64_t bad_costs[] = {0, -1, 4, INT64_MIN, INT64_MAX, -3};
    static const int64_t bad_times[] = {SLUICE_TIME_MAX_MS + 1, SLUICE_TIME_MIN_MS - 1, INT64_MAX, INT64_MIN};
    for (size_t k = 0; k < sizeof texts / sizeof texts[0]; k++) {
        sluice_limiter *a = make_policy(texts[k], NULL), *b = make_policy(texts[k], NULL);
        if (!a || !b) return;
        int64_t t = 0;
        for (int i = 0; i < 40; i++) {
            sluice_decision da, db;
            for (size_t j = 0; j < sizeof bad_costs / sizeof bad_costs[0]; j++)
                CHECK_EQ(sluice_acquire_at(a, bad_costs[j], t, &da), SLUICE_ECOST);
            for (size_t j = 0; j < sizeof bad_times / sizeof bad_times[0]; j++)
                CHECK_EQ(sluice_acquire_at(a, 1, bad_times[j], &da), SLUICE_EINVAL);
            int64_t cost = 1 + i % 3;
            CHECK_EQ(sluice_acquire_at(a, cost, t, &da), SLUICE_OK);
            CHECK_EQ(sluice_acquire_at(b, cost, t, &db), SLUICE_OK);
            CHECK(da.allowed == db.allowed && da.remaining == db.remaining &&
                  da.retry_after_ms == db.retry_after_ms && da.reset_ms == db.reset_ms &&
                  da.delay_ms == db.delay_ms && da.limit == db.limit && da.part == db.part);
            t += (i % 4) * 150;
        }
        sluice_limiter_free(a);
        sluice_limiter_free(b);
    }
    /* a policy's cost above any part's limit is SLUICE_ECOST */
    sluice_limiter *l = make_policy("fixed-window limit=5 window=1s; token-bucket capacity=3 rate=1/s", NULL);
    sluice_decision d;
    if (!l) return;
    CHECK_EQ(sluice_acquire_at(l, 4, 0, &d), SLUICE_ECOST);
    CHECK_EQ(sluice_acquire_at(l, 5, 0, &d), SLUICE_ECOST);
    EXPECT_PART(l, 0, 3, true, 0, 0, 3000, 3, 1); /* window 2 left, bucket 0 */
    sluice_limiter_free(l);
}

TEST_MAIN(token_bucket_seed, token_bucket_fractional_rate, token_bucket_backward_step, token_bucket_far_readings,
          token_bucket_word_edge,
          gcra_is_a_token_bucket, leaky_bucket_delays, fixed_window_boundary_burst, fixed_window_negative_readings,
          sliding_window_seed, sliding_window_retry_into_next_window, sliding_window_backward_step,
          sliding_log_exact, sliding_log_vs_counter, composite_denial_consumes_nothing, composite_tie_and_delay,
          bad_costs_and_readings_change_nothing)
