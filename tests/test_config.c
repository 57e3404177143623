/* test_config.c: configurations: constructors, validation against the
 * accepted ranges, precomputed parameters, the text form (parse, format,
 * positions in messages), and the error codes. */
#include "check.h"
#include "internal.h"

#define LIM SLUICE_LIMIT_MAX
#define PMAX SLUICE_PERIOD_MAX_MS
#define DAY_MS 86400000LL

static int eq_config(const sluice_config *a, const sluice_config *b) {
    return a->algorithm == b->algorithm && a->limit == b->limit && a->rate == b->rate &&
           a->period_ms == b->period_ms;
}

/* ---- constructors ---- */

TEST(constructors) {
    sluice_config c = sluice_token_bucket(3, 1, 1000);
    CHECK(c.algorithm == SLUICE_TOKEN_BUCKET);
    CHECK_EQ(c.limit, 3);
    CHECK_EQ(c.rate, 1);
    CHECK_EQ(c.period_ms, 1000);

    c = sluice_leaky_bucket(5, 10, 2000);
    CHECK(c.algorithm == SLUICE_LEAKY_BUCKET);
    CHECK_EQ(c.limit, 5);
    CHECK_EQ(c.rate, 10);
    CHECK_EQ(c.period_ms, 2000);

    c = sluice_sliding_window(10, 1000);
    CHECK(c.algorithm == SLUICE_SLIDING_WINDOW);
    CHECK_EQ(c.limit, 10);
    CHECK_EQ(c.rate, 0);
    CHECK_EQ(c.period_ms, 1000);

    c = sluice_fixed_window(1000, 3600000);
    CHECK(c.algorithm == SLUICE_FIXED_WINDOW);
    CHECK_EQ(c.limit, 1000);
    CHECK_EQ(c.rate, 0);
    CHECK_EQ(c.period_ms, 3600000);

    c = sluice_sliding_log(7, 60000);
    CHECK(c.algorithm == SLUICE_SLIDING_LOG);
    CHECK_EQ(c.limit, 7);
    CHECK_EQ(c.rate, 0);
    CHECK_EQ(c.period_ms, 60000);

    /* Constructors do not validate. */
    c = sluice_token_bucket(-1, 0, -5);
    CHECK_EQ(c.limit, -1);
    CHECK_EQ(c.rate, 0);
    CHECK_EQ(c.period_ms, -5);
}

/* ---- validation ---- */

static void expect_invalid(sluice_config c, const char *want, int line) {
    char err[256] = "untouched";
    int rc = sluice_config_validate(&c, err, sizeof err);
    CHECK_EQ(rc, SLUICE_EINVAL);
    if (strcmp(err, want) != 0) {
        check_failures_++;
        fprintf(stderr, "line %d: message\n  got:  \"%s\"\n  want: \"%s\"\n", line, err, want);
    }
    sluice__params p;
    CHECK_EQ(sluice__params_init(&c, &p, NULL, 0), SLUICE_EINVAL);
}
#define EXPECT_INVALID(c, want) expect_invalid((c), (want), __LINE__)

TEST(validate_rejects) {
    /* Each field at 0, negative, just above the max. */
    EXPECT_INVALID(sluice_token_bucket(0, 1, 1000), "capacity 0 is outside 1..1000000000");
    EXPECT_INVALID(sluice_token_bucket(-1, 1, 1000), "capacity -1 is outside 1..1000000000");
    EXPECT_INVALID(sluice_token_bucket(INT64_MIN, 1, 1000),
                   "capacity -9223372036854775808 is outside 1..1000000000");
    EXPECT_INVALID(sluice_token_bucket(LIM + 1, 1, 1000),
                   "capacity 1000000001 is outside 1..1000000000");
    EXPECT_INVALID(sluice_leaky_bucket(0, 1, 1000), "capacity 0 is outside 1..1000000000");
    EXPECT_INVALID(sluice_leaky_bucket(LIM + 1, 1, 1000),
                   "capacity 1000000001 is outside 1..1000000000");
    EXPECT_INVALID(sluice_sliding_window(0, 1000), "limit 0 is outside 1..1000000000");
    EXPECT_INVALID(sluice_fixed_window(-7, 1000), "limit -7 is outside 1..1000000000");
    EXPECT_INVALID(sluice_sliding_log(LIM + 1, 1000), "limit 1000000001 is outside 1..1000000000");

    EXPECT_INVALID(sluice_token_bucket(1, 0, 1000), "rate 0 is outside 1..1000000000000");
    EXPECT_INVALID(sluice_token_bucket(1, -1, 1000), "rate -1 is outside 1..1000000000000");
    EXPECT_INVALID(sluice_leaky_bucket(1, SLUICE_RATE_MAX + 1, PMAX),
                   "rate 1000000000001 is outside 1..1000000000000");
    EXPECT_INVALID(sluice_token_bucket(1, INT64_MAX, PMAX),
                   "rate 9223372036854775807 is outside 1..1000000000000");

    EXPECT_INVALID(sluice_token_bucket(1, 1, 0),
                   "period 0 ms is outside 1..2592000000 ms (1 ms to 30 days)");
    EXPECT_INVALID(sluice_token_bucket(1, 1, -1000),
                   "period -1000 ms is outside 1..2592000000 ms (1 ms to 30 days)");
    EXPECT_INVALID(sluice_leaky_bucket(1, 1, PMAX + 1),
                   "period 2592000001 ms is outside 1..2592000000 ms (1 ms to 30 days)");
    EXPECT_INVALID(sluice_sliding_window(1, 0),
                   "window 0 ms is outside 1..2592000000 ms (1 ms to 30 days)");
    EXPECT_INVALID(sluice_fixed_window(1, -1),
                   "window -1 ms is outside 1..2592000000 ms (1 ms to 30 days)");
    EXPECT_INVALID(sluice_sliding_log(1, PMAX + 1),
                   "window 2592000001 ms is outside 1..2592000000 ms (1 ms to 30 days)");
    EXPECT_INVALID(sluice_sliding_log(1, INT64_MAX),
                   "window 9223372036854775807 ms is outside 1..2592000000 ms (1 ms to 30 days)");

    /* The rate bound: 10^9 per second, just past it. */
    EXPECT_INVALID(sluice_token_bucket(1, 1000000001, 1000),
                   "rate 1000000001/1s is faster than 1000000000 per second");
    EXPECT_INVALID(sluice_token_bucket(1, 2000000000, 1000),
                   "rate 2000000000/1s is faster than 1000000000 per second");
    EXPECT_INVALID(sluice_leaky_bucket(1, 1000001, 1),
                   "rate 1000001/1ms is faster than 1000000000 per second");
    EXPECT_INVALID(sluice_token_bucket(1, 1500000001, 1500),
                   "rate 1500000001/1500ms is faster than 1000000000 per second");
    /* 10^12 per 999 s is just over 10^9/s. */
    EXPECT_INVALID(sluice_token_bucket(1, SLUICE_RATE_MAX, 999000),
                   "rate 1000000000000/999s is faster than 1000000000 per second");

    /* Windows have no rate. */
    sluice_config c = sluice_sliding_window(10, 1000);
    c.rate = 5;
    EXPECT_INVALID(c, "rate 5 must be 0 for sliding-window (a window has no rate)");
    c = sluice_fixed_window(10, 1000);
    c.rate = -1;
    EXPECT_INVALID(c, "rate -1 must be 0 for fixed-window (a window has no rate)");
    c = sluice_sliding_log(10, 1000);
    c.rate = 1;
    EXPECT_INVALID(c, "rate 1 must be 0 for sliding-log (a window has no rate)");

    /* Unknown algorithms. */
    c = sluice_token_bucket(1, 1, 1000);
    c.algorithm = (sluice_algorithm)0;
    EXPECT_INVALID(c, "algorithm 0 is unknown (expected 1..5, SLUICE_TOKEN_BUCKET..SLUICE_SLIDING_LOG)");
    c.algorithm = (sluice_algorithm)6;
    EXPECT_INVALID(c, "algorithm 6 is unknown (expected 1..5, SLUICE_TOKEN_BUCKET..SLUICE_SLIDING_LOG)");
    c.algorithm = (sluice_algorithm)-1;
    EXPECT_INVALID(c, "algorithm -1 is unknown (expected 1..5, SLUICE_TOKEN_BUCKET..SLUICE_SLIDING_LOG)");
}

TEST(validate_accepts_boundaries) {
    const sluice_config ok[] = {
        sluice_token_bucket(1, 1, 1),
        sluice_token_bucket(LIM, 1, 1000),
        sluice_token_bucket(1, 1, PMAX),                       /* 1 per 30 days         */
        sluice_token_bucket(LIM, 1000000000, 1000),            /* 10^9 per second       */
        sluice_token_bucket(1, 1000000, 1),                    /* 10^9 per second, 1 ms */
        sluice_leaky_bucket(LIM, SLUICE_RATE_MAX, 1000000),    /* 10^12 per 1000 s      */
        sluice_leaky_bucket(1, SLUICE_RATE_MAX, PMAX),         /* the largest numerator */
        sluice_token_bucket(LIM, 1500000000, 1500),
        sluice_sliding_window(1, 1),
        sluice_sliding_window(LIM, PMAX),
        sluice_fixed_window(LIM, 1),
        sluice_sliding_log(1, PMAX),
    };
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        char err[128] = "untouched";
        CHECK_EQ(sluice_config_validate(&ok[i], err, sizeof err), 0);
        CHECK_STR(err, "untouched");
    }
}

TEST(validate_message_buffer) {
    sluice_config c = sluice_token_bucket(0, 1, 1000);
    CHECK_EQ(sluice_config_validate(&c, NULL, 0), SLUICE_EINVAL);
    CHECK_EQ(sluice_config_validate(&c, NULL, 100), SLUICE_EINVAL);
    char err[8] = "xxxxxxx";
    CHECK_EQ(sluice_config_validate(&c, err, 0), SLUICE_EINVAL);
    CHECK_STR(err, "xxxxxxx");
    CHECK_EQ(sluice_config_validate(&c, err, sizeof err), SLUICE_EINVAL);
    CHECK_STR(err, "capacit"); /* truncated, NUL-terminated */
    char one[1] = {'x'};
    CHECK_EQ(sluice_config_validate(&c, one, 1), SLUICE_EINVAL);
    CHECK_EQ(one[0], '\0');
    char big[64];
    CHECK_EQ(sluice_config_validate(NULL, big, sizeof big), SLUICE_EINVAL);
    CHECK_STR(big, "config is NULL");
}

/* ---- parameters ---- */

TEST(params_init) {
    sluice__params p;
    sluice_config c = sluice_token_bucket(5, 10, 1000);
    REQUIRE(sluice__params_init(&c, &p, NULL, 0) == 0);
    CHECK(eq_config(&p.cfg, &c));
    CHECK_EQ(p.limit, 5);
    CHECK_EQ(p.p, 100);
    CHECK_EQ(p.r, 1);
    CHECK_EQ(p.tau, 500);
    CHECK_EQ(p.window_ms, 0);

    c = sluice_token_bucket(LIM, 1000000000, 1000);
    REQUIRE(sluice__params_init(&c, &p, NULL, 0) == 0);
    CHECK_EQ(p.p, 1);
    CHECK_EQ(p.r, 1000000);
    CHECK_EQ(p.tau, LIM);

    c = sluice_leaky_bucket(4, 7, 3000);
    REQUIRE(sluice__params_init(&c, &p, NULL, 0) == 0);
    CHECK_EQ(p.p, 3000);
    CHECK_EQ(p.r, 7);
    CHECK_EQ(p.tau, 12000);

    c = sluice_token_bucket(LIM, 1, PMAX); /* the largest tau */
    REQUIRE(sluice__params_init(&c, &p, NULL, 0) == 0);
    CHECK_EQ(p.p, PMAX);
    CHECK_EQ(p.r, 1);
    CHECK_EQ(p.tau, LIM * PMAX);
    CHECK(p.tau < (INT64_C(1) << 62));

    c = sluice_token_bucket(2, 6, 4); /* 6/4 = 3/2 */
    REQUIRE(sluice__params_init(&c, &p, NULL, 0) == 0);
    CHECK_EQ(p.p, 2);
    CHECK_EQ(p.r, 3);
    CHECK_EQ(p.tau, 4);

    const sluice_config windows[] = {sluice_sliding_window(10, 1000), sluice_fixed_window(3, 60000),
                                     sluice_sliding_log(9, 7)};
    for (size_t i = 0; i < 3; i++) {
        REQUIRE(sluice__params_init(&windows[i], &p, NULL, 0) == 0);
        CHECK(eq_config(&p.cfg, &windows[i]));
        CHECK_EQ(p.limit, windows[i].limit);
        CHECK_EQ(p.window_ms, windows[i].period_ms);
        CHECK_EQ(p.p, 0);
        CHECK_EQ(p.r, 0);
        CHECK_EQ(p.tau, 0);
    }

    /* Random buckets: r/p is R/P in lowest terms. */
    uint64_t seed = 42;
    for (int i = 0; i < 20000; i++) {
        int64_t P = check_range_(&seed, 1, PMAX);
        int64_t rmax = SLUICE_RATE_MAX < 1000000 * P ? SLUICE_RATE_MAX : 1000000 * P;
        int64_t R = i % 2 ? check_range_(&seed, 1, rmax) : check_range_(&seed, 1, 1000);
        c = sluice_token_bucket(check_range_(&seed, 1, LIM), R, P);
        REQUIRE(sluice__params_init(&c, &p, NULL, 0) == 0);
        CHECK((__int128)p.r * P == (__int128)p.p * R);
        int64_t a = p.r, b = p.p;
        while (b) {
            int64_t t = a % b;
            a = b;
            b = t;
        }
        CHECK_EQ(a, 1);
        CHECK_EQ(p.tau, c.limit * p.p);
    }

    /* An error writes nothing. */
    memset(&p, 0x5a, sizeof p);
    c = sluice_token_bucket(0, 1, 1);
    char err[64];
    CHECK_EQ(sluice__params_init(&c, &p, err, sizeof err), SLUICE_EINVAL);
    CHECK_STR(err, "capacity 0 is outside 1..1000000000");
    CHECK_EQ(p.limit, 0x5a5a5a5a5a5a5a5aLL);
}

TEST(algo_of) {
    CHECK(sluice__algo_of(SLUICE_TOKEN_BUCKET) == &sluice__token_bucket);
    CHECK(sluice__algo_of(SLUICE_SLIDING_WINDOW) == &sluice__sliding_window);
    CHECK(sluice__algo_of(SLUICE_FIXED_WINDOW) == &sluice__fixed_window);
    CHECK(sluice__algo_of(SLUICE_LEAKY_BUCKET) == &sluice__leaky_bucket);
    CHECK(sluice__algo_of(SLUICE_SLIDING_LOG) == &sluice__sliding_log);
    CHECK(sluice__algo_of((sluice_algorithm)0) == NULL);
    CHECK(sluice__algo_of((sluice_algorithm)6) == NULL);
    /* The vtables' names are the text form's. */
    const sluice_config cs[] = {sluice_token_bucket(1, 1, 1), sluice_sliding_window(1, 1),
                                sluice_fixed_window(1, 1), sluice_leaky_bucket(1, 1, 1),
                                sluice_sliding_log(1, 1)};
    for (size_t i = 0; i < 5; i++) {
        char buf[80];
        REQUIRE(sluice_config_format(&cs[i], buf, sizeof buf) > 0);
        *strchr(buf, ' ') = '\0';
        CHECK_STR(sluice__algo_of(cs[i].algorithm)->name, buf);
    }
}

/* ---- parsing ---- */

static void expect_parse(const char *text, sluice_config want, int line) {
    sluice_config got;
    char err[256] = "";
    int rc = sluice_config_parse(text, &got, err, sizeof err);
    if (rc != 0 || !eq_config(&got, &want)) {
        check_failures_++;
        fprintf(stderr, "line %d: parse \"%s\": rc %d, err \"%s\"\n", line, text, rc, err);
    }
    check_count_++;
}
#define EXPECT_PARSE(text, want) expect_parse((text), (want), __LINE__)

TEST(parse_examples) {
    EXPECT_PARSE("token-bucket capacity=3 rate=1/s", sluice_token_bucket(3, 1, 1000));
    EXPECT_PARSE("leaky-bucket capacity=5 rate=10/s", sluice_leaky_bucket(5, 10, 1000));
    EXPECT_PARSE("sliding-window limit=10 window=1s", sluice_sliding_window(10, 1000));
    EXPECT_PARSE("fixed-window limit=1000 window=1h", sluice_fixed_window(1000, 3600000));
    EXPECT_PARSE("sliding-log limit=10 window=1m", sluice_sliding_log(10, 60000));
    EXPECT_PARSE("gcra rate=100/s burst=20", sluice_token_bucket(20, 100, 1000));
    EXPECT_PARSE("token-bucket capacity=3 rate=5/15m", sluice_token_bucket(3, 5, 900000));
    EXPECT_PARSE("sliding-window limit=10 window=1500ms", sluice_sliding_window(10, 1500));
}

TEST(parse_variants) {
    /* Units, bare units, counts. */
    EXPECT_PARSE("fixed-window limit=1 window=ms", sluice_fixed_window(1, 1));
    EXPECT_PARSE("fixed-window limit=1 window=1ms", sluice_fixed_window(1, 1));
    EXPECT_PARSE("fixed-window limit=1 window=s", sluice_fixed_window(1, 1000));
    EXPECT_PARSE("fixed-window limit=1 window=m", sluice_fixed_window(1, 60000));
    EXPECT_PARSE("fixed-window limit=1 window=h", sluice_fixed_window(1, 3600000));
    EXPECT_PARSE("fixed-window limit=1 window=d", sluice_fixed_window(1, DAY_MS));
    EXPECT_PARSE("fixed-window limit=1 window=30d", sluice_fixed_window(1, PMAX));
    EXPECT_PARSE("fixed-window limit=1 window=720h", sluice_fixed_window(1, PMAX));
    EXPECT_PARSE("fixed-window limit=1 window=2592000000ms", sluice_fixed_window(1, PMAX));
    EXPECT_PARSE("fixed-window limit=1 window=90s", sluice_fixed_window(1, 90000));
    EXPECT_PARSE("fixed-window limit=1 window=007s", sluice_fixed_window(1, 7000));
    EXPECT_PARSE("sliding-log limit=1000000000 window=1s", sluice_sliding_log(LIM, 1000));
    EXPECT_PARSE("token-bucket capacity=1 rate=1/ms", sluice_token_bucket(1, 1, 1));
    EXPECT_PARSE("token-bucket capacity=1 rate=1/30d", sluice_token_bucket(1, 1, PMAX));
    EXPECT_PARSE("token-bucket capacity=1 rate=1000000000/s", sluice_token_bucket(1, 1000000000, 1000));
    EXPECT_PARSE("token-bucket capacity=1 rate=1000000/ms", sluice_token_bucket(1, 1000000, 1));
    EXPECT_PARSE("token-bucket capacity=1 rate=1000000000000/1000s",
                 sluice_token_bucket(1, SLUICE_RATE_MAX, 1000000));
    EXPECT_PARSE("leaky-bucket capacity=2 rate=7/3s", sluice_leaky_bucket(2, 7, 3000));
    EXPECT_PARSE("leaky-bucket capacity=2 rate=1/1500ms", sluice_leaky_bucket(2, 1, 1500));

    /* Whitespace: spaces and tabs, any amount, leading and trailing. */
    EXPECT_PARSE("  token-bucket capacity=3 rate=1/s  ", sluice_token_bucket(3, 1, 1000));
    EXPECT_PARSE("\ttoken-bucket\t\tcapacity=3 \t rate=1/s\t", sluice_token_bucket(3, 1, 1000));

    /* Any order. */
    EXPECT_PARSE("token-bucket rate=1/s capacity=3", sluice_token_bucket(3, 1, 1000));
    EXPECT_PARSE("leaky-bucket rate=10/s capacity=5", sluice_leaky_bucket(5, 10, 1000));
    EXPECT_PARSE("gcra burst=20 rate=100/s", sluice_token_bucket(20, 100, 1000));
    EXPECT_PARSE("sliding-window window=1s limit=10", sluice_sliding_window(10, 1000));

    /* *out is written only on success. */
    sluice_config out = sluice_fixed_window(77, 77);
    char err[128];
    CHECK_EQ(sluice_config_parse("token-bucket capacity=0 rate=1/s", &out, err, sizeof err),
             SLUICE_EINVAL);
    CHECK(eq_config(&out, &(sluice_config){SLUICE_FIXED_WINDOW, 77, 0, 77}));
    CHECK_EQ(sluice_config_parse("nonsense", &out, NULL, 0), SLUICE_EINVAL);
    CHECK_EQ(out.limit, 77);

    /* NULL arguments. */
    CHECK_EQ(sluice_config_parse(NULL, &out, err, sizeof err), SLUICE_EINVAL);
    CHECK_STR(err, "text is NULL");
    CHECK_EQ(sluice_config_parse("sliding-log limit=1 window=1s", NULL, err, sizeof err),
             SLUICE_EINVAL);
    CHECK_STR(err, "out is NULL");
    CHECK_EQ(out.limit, 77);
}

static void expect_parse_error(const char *text, const char *want, int line) {
    sluice_config out = sluice_fixed_window(-3, -3);
    char err[512] = "";
    int rc = sluice_config_parse(text, &out, err, sizeof err);
    check_count_++;
    if (rc != SLUICE_EINVAL || strcmp(err, want) != 0) {
        check_failures_++;
        fprintf(stderr, "line %d: parse \"%s\": rc %d\n  got:  \"%s\"\n  want: \"%s\"\n", line, text,
                rc, err, want);
    }
    CHECK(out.limit == -3 && out.period_ms == -3);
}
#define EXPECT_PARSE_ERROR(text, want) expect_parse_error((text), (want), __LINE__)

TEST(parse_errors) {
    /* Algorithm names. */
    EXPECT_PARSE_ERROR("", "at 0: expected an algorithm name (token-bucket, leaky-bucket, gcra, "
                           "sliding-window, fixed-window or sliding-log)");
    EXPECT_PARSE_ERROR(" \t ", "at 3: expected an algorithm name (token-bucket, leaky-bucket, gcra, "
                               "sliding-window, fixed-window or sliding-log)");
    EXPECT_PARSE_ERROR("token_bucket capacity=3 rate=1/s",
                       "at 0: unknown algorithm \"token_bucket\": did you mean \"token-bucket\"? "
                       "(expected token-bucket, leaky-bucket, gcra, sliding-window, fixed-window or "
                       "sliding-log)");
    EXPECT_PARSE_ERROR("  Token-Bucket capacity=3 rate=1/s",
                       "at 2: unknown algorithm \"Token-Bucket\": did you mean \"token-bucket\"? "
                       "(expected token-bucket, leaky-bucket, gcra, sliding-window, fixed-window or "
                       "sliding-log)");
    EXPECT_PARSE_ERROR("capacity=3 token-bucket rate=1/s",
                       "at 0: unknown algorithm \"capacity=3\" (expected token-bucket, "
                       "leaky-bucket, gcra, sliding-window, fixed-window or sliding-log)");

    /* Tokens and parameter names. */
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=1/s extra",
                       "at 33: expected NAME=VALUE, got \"extra\"");
    EXPECT_PARSE_ERROR("token-bucket capacity = 3 rate=1/s",
                       "at 13: expected NAME=VALUE, got \"capacity\"");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 limit=5 rate=1/s",
                       "at 24: unknown parameter \"limit\" (token-bucket takes capacity=N "
                       "rate=N/DURATION)");
    EXPECT_PARSE_ERROR("token-bucket =3 rate=1/s",
                       "at 13: unknown parameter \"\" (token-bucket takes capacity=N rate=N/DURATION)");
    EXPECT_PARSE_ERROR("token-bucket Capacity=3 rate=1/s",
                       "at 13: unknown parameter \"Capacity\": did you mean \"capacity\"? "
                       "(token-bucket takes capacity=N rate=N/DURATION)");
    EXPECT_PARSE_ERROR("sliding-window limit=10 window=1s rate=1/s",
                       "at 34: unknown parameter \"rate\" (sliding-window takes limit=N "
                       "window=DURATION)");
    EXPECT_PARSE_ERROR("gcra rate=100/s capacity=20",
                       "at 16: unknown parameter \"capacity\" (gcra takes rate=N/DURATION burst=N)");
    EXPECT_PARSE_ERROR("leaky-bucket capacity=5 burst=5 rate=1/s",
                       "at 24: unknown parameter \"burst\" (leaky-bucket takes capacity=N "
                       "rate=N/DURATION)");

    /* Duplicates and missing parameters (missing: at the end of the text). */
    EXPECT_PARSE_ERROR("token-bucket capacity=3 capacity=4 rate=1/s",
                       "at 24: capacity given twice (first at 13)");
    EXPECT_PARSE_ERROR("leaky-bucket capacity=5 rate=10/s rate=10/s",
                       "at 34: rate given twice (first at 24)");
    EXPECT_PARSE_ERROR("fixed-window window=1s limit=1 window=1s",
                       "at 31: window given twice (first at 13)");
    EXPECT_PARSE_ERROR("token-bucket capacity=3",
                       "at 23: missing parameter rate (token-bucket takes capacity=N rate=N/DURATION)");
    EXPECT_PARSE_ERROR("token-bucket rate=1/s",
                       "at 21: missing parameter capacity (token-bucket takes capacity=N "
                       "rate=N/DURATION)");
    EXPECT_PARSE_ERROR("fixed-window window=1s",
                       "at 22: missing parameter limit (fixed-window takes limit=N window=DURATION)");
    EXPECT_PARSE_ERROR("fixed-window limit=5  ",
                       "at 22: missing parameter window (fixed-window takes limit=N window=DURATION)");
    EXPECT_PARSE_ERROR("gcra rate=1/s",
                       "at 13: missing parameter burst (gcra takes rate=N/DURATION burst=N)");
    EXPECT_PARSE_ERROR("sliding-log",
                       "at 11: missing parameter limit (sliding-log takes limit=N window=DURATION)");

    /* Counts: digits only, no sign, no overflow. */
    EXPECT_PARSE_ERROR("token-bucket capacity= rate=1/s", "at 22: capacity has no value");
    EXPECT_PARSE_ERROR("token-bucket capacity=-3 rate=1/s",
                       "at 22: capacity \"-3\" is not a decimal integer");
    EXPECT_PARSE_ERROR("token-bucket capacity=+3 rate=1/s",
                       "at 22: capacity \"+3\" is not a decimal integer");
    EXPECT_PARSE_ERROR("token-bucket capacity=3x rate=1/s",
                       "at 22: capacity \"3x\" is not a decimal integer");
    EXPECT_PARSE_ERROR("token-bucket capacity=0x10 rate=1/s",
                       "at 22: capacity \"0x10\" is not a decimal integer");
    EXPECT_PARSE_ERROR("sliding-log limit=1e3 window=1s", "at 18: limit \"1e3\" is not a decimal integer");
    EXPECT_PARSE_ERROR("token-bucket capacity=99999999999999999999 rate=1/s",
                       "at 22: capacity \"99999999999999999999\" is too large");
    EXPECT_PARSE_ERROR("token-bucket capacity=9223372036854775808 rate=1/s",
                       "at 22: capacity \"9223372036854775808\" is too large");
    EXPECT_PARSE_ERROR("token-bucket capacity=9223372036854775807 rate=1/s",
                       "at 22: capacity 9223372036854775807 is outside 1..1000000000");

    /* Rates. */
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=", "at 29: rate has no value");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=5", "at 29: rate \"5\" needs a period, as in 5/s");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=fast",
                       "at 29: rate \"fast\" is not a rate (as in 100/s or 5/15m)");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=/s", "at 29: rate \"/s\" has no count before '/'");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=5/", "at 31: rate \"5/\" has no period after '/'");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=-5/s", "at 29: rate \"-5\" is not a decimal integer");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=5/1000",
                       "at 31: rate period \"1000\" needs a unit (ms, s, m, h or d)");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=5/5x",
                       "at 31: rate period \"5x\" has an unknown unit \"x\" (expected ms, s, m, h or d)");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=5/sec",
                       "at 31: rate period \"sec\" is not a duration (as in 1500ms, 10s, 15m, 1h or 1d)");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=1/s/s",
                       "at 31: rate period \"s/s\" is not a duration (as in 1500ms, 10s, 15m, 1h or 1d)");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=1/S",
                       "at 31: rate period \"S\" is not a duration (as in 1500ms, 10s, 15m, 1h or 1d)");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=1/s\n",
                       "at 31: rate period \"s\\x0a\" is not a duration (as in 1500ms, 10s, 15m, 1h "
                       "or 1d)");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=0/s", "at 29: rate 0 is outside 1..1000000000000");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=1000000000001/30d",
                       "at 29: rate 1000000000001 is outside 1..1000000000000");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=1000000001/s",
                       "at 29: rate 1000000001/1s is faster than 1000000000 per second");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=1000001/ms",
                       "at 29: rate 1000001/1ms is faster than 1000000000 per second");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=1/0s",
                       "at 31: period 0 ms is outside 1..2592000000 ms (1 ms to 30 days)");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=1/31d",
                       "at 31: period 2678400000 ms is outside 1..2592000000 ms (1 ms to 30 days)");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=1/999999999999999d",
                       "at 31: rate period \"999999999999999d\" is longer than 30 days");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=1/99999999999999999999ms",
                       "at 31: rate period \"99999999999999999999ms\" is too large");
    EXPECT_PARSE_ERROR("gcra rate=100/s burst=0", "at 22: burst 0 is outside 1..1000000000");
    EXPECT_PARSE_ERROR("gcra burst=1000000001 rate=100/s",
                       "at 11: burst 1000000001 is outside 1..1000000000");

    /* Windows. */
    EXPECT_PARSE_ERROR("sliding-window limit=10 window=1000",
                       "at 31: window \"1000\" needs a unit (ms, s, m, h or d)");
    EXPECT_PARSE_ERROR("sliding-window limit=10 window=0ms",
                       "at 31: window 0 ms is outside 1..2592000000 ms (1 ms to 30 days)");
    EXPECT_PARSE_ERROR("sliding-window limit=10 window=2592000001ms",
                       "at 31: window 2592000001 ms is outside 1..2592000000 ms (1 ms to 30 days)");
    EXPECT_PARSE_ERROR("sliding-window limit=10 window=-1s",
                       "at 31: window \"-1s\" is not a duration (as in 1500ms, 10s, 15m, 1h or 1d)");
    EXPECT_PARSE_ERROR("fixed-window limit=10 window=1.5s",
                       "at 29: window \"1.5s\": durations are integers; write 1500ms");
    EXPECT_PARSE_ERROR("fixed-window limit=0 window=1s", "at 19: limit 0 is outside 1..1000000000");
    EXPECT_PARSE_ERROR("sliding-log window=1h limit=1000000001",
                       "at 28: limit 1000000001 is outside 1..1000000000");

    /* A long token is quoted with its end cut. */
    char text[300];
    memset(text, 'x', 299);
    text[299] = '\0';
    sluice_config out;
    char err[300];
    CHECK_EQ(sluice_config_parse(text, &out, err, sizeof err), SLUICE_EINVAL);
    CHECK(strncmp(err, "at 0: unknown algorithm \"xxxx", 29) == 0);
    CHECK(strstr(err, "xxx...\" (expected") != NULL);
    CHECK(strlen(err) < 200);

    /* A small buffer gets a truncated, terminated message. */
    char small[6] = "zzzzz";
    CHECK_EQ(sluice_config_parse("bogus", &out, small, sizeof small), SLUICE_EINVAL);
    CHECK_STR(small, "at 0:");
}

/* A name close to a valid one (edit distance, letter case aside) is named
 * in the message; one far from every valid name is not. */
TEST(parse_suggests_the_nearest_name) {
    static const char *const tail =
        "(expected token-bucket, leaky-bucket, gcra, sliding-window, fixed-window or sliding-log)";
    static const struct {
        const char *text, *unknown, *nearest;
    } algos[] = {
        {"fixd-window limit=1 window=1s", "fixd-window", "fixed-window"},
        {"fixedwindow limit=1 window=1s", "fixedwindow", "fixed-window"},
        {"sliding-widnow limit=1 window=1s", "sliding-widnow", "sliding-window"}, /* a swap */
        {"slidng-log limit=1 window=1s", "slidng-log", "sliding-log"},
        {"sliding_log limit=1 window=1s", "sliding_log", "sliding-log"},
        {"leaky-buckets capacity=1 rate=1/s", "leaky-buckets", "leaky-bucket"},
        {"tokn-bucket capacity=1 rate=1/s", "tokn-bucket", "token-bucket"},
        {"GCRA rate=1/s burst=1", "GCRA", "gcra"},
        {"gcr rate=1/s burst=1", "gcr", "gcra"},
    };
    for (size_t i = 0; i < sizeof algos / sizeof algos[0]; i++) {
        char want[512];
        snprintf(want, sizeof want, "at 0: unknown algorithm \"%s\": did you mean \"%s\"? %s", algos[i].unknown,
                 algos[i].nearest, tail);
        expect_parse_error(algos[i].text, want, __LINE__);
    }
    /* far from every name: the list alone */
    EXPECT_PARSE_ERROR("bucket capacity=1 rate=1/s", "at 0: unknown algorithm \"bucket\" (expected token-bucket, "
                                                    "leaky-bucket, gcra, sliding-window, fixed-window or sliding-log)");
    EXPECT_PARSE_ERROR("limiter x=1", "at 0: unknown algorithm \"limiter\" (expected token-bucket, "
                                      "leaky-bucket, gcra, sliding-window, fixed-window or sliding-log)");

    static const struct {
        const char *text, *unknown, *nearest, *takes;
    } params[] = {
        {"fixed-window limt=2 window=1m", "limt", "limit", "fixed-window takes limit=N window=DURATION"},
        {"fixed-window lmiit=2 window=1m", "lmiit", "limit", "fixed-window takes limit=N window=DURATION"},
        {"fixed-window limit=2 windw=1m", "windw", "window", "fixed-window takes limit=N window=DURATION"},
        {"sliding-log limit=2 Window=1m", "Window", "window", "sliding-log takes limit=N window=DURATION"},
        {"token-bucket capcity=2 rate=1/s", "capcity", "capacity", "token-bucket takes capacity=N rate=N/DURATION"},
        {"token-bucket capacity=2 rat=1/s", "rat", "rate", "token-bucket takes capacity=N rate=N/DURATION"},
        {"gcra rate=1/s bust=3", "bust", "burst", "gcra takes rate=N/DURATION burst=N"},
    };
    for (size_t i = 0; i < sizeof params / sizeof params[0]; i++) {
        char want[512];
        const char *at = strstr(params[i].text, params[i].unknown);
        snprintf(want, sizeof want, "at %d: unknown parameter \"%s\": did you mean \"%s\"? (%s)",
                 (int)(at - params[i].text), params[i].unknown, params[i].nearest, params[i].takes);
        expect_parse_error(params[i].text, want, __LINE__);
    }
    /* another algorithm's parameter, far from this one's: no guess */
    EXPECT_PARSE_ERROR("leaky-bucket capacity=5 burst=5 rate=1/s",
                       "at 24: unknown parameter \"burst\" (leaky-bucket takes capacity=N rate=N/DURATION)");
}

/* A decimal fraction where an integer goes: the message says integers, and
 * gives the same value in whole units when there is one. */
TEST(parse_fractions_suggest_integers) {
    EXPECT_PARSE_ERROR("fixed-window limit=10 window=1.5s",
                       "at 29: window \"1.5s\": durations are integers; write 1500ms");
    EXPECT_PARSE_ERROR("fixed-window limit=10 window=0.5m", "at 29: window \"0.5m\": durations are integers; write 30s");
    EXPECT_PARSE_ERROR("sliding-log limit=10 window=1.25h", "at 28: window \"1.25h\": durations are integers; write 75m");
    EXPECT_PARSE_ERROR("sliding-log limit=10 window=.5d", "at 28: window \".5d\": durations are integers; write 12h");
    EXPECT_PARSE_ERROR("sliding-log limit=10 window=2.0s", "at 28: window \"2.0s\": durations are integers; write 2s");
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=1/0.25s",
                       "at 31: rate period \"0.25s\": durations are integers; write 250ms");
    /* no whole number of ms: no rewrite to offer */
    EXPECT_PARSE_ERROR("fixed-window limit=10 window=1.5ms",
                       "at 29: window \"1.5ms\": durations are integers (of ms, s, m, h or d; 1ms is the least)");
    EXPECT_PARSE_ERROR("fixed-window limit=10 window=0.0001s",
                       "at 29: window \"0.0001s\": durations are integers (of ms, s, m, h or d; 1ms is the least)");
    EXPECT_PARSE_ERROR("fixed-window limit=10 window=0.0s",
                       "at 29: window \"0.0s\": durations are integers (of ms, s, m, h or d; 1ms is the least)");
    EXPECT_PARSE_ERROR("fixed-window limit=10 window=1.s", "at 29: window \"1.s\": durations are integers; write 1s");
    /* not a fraction and a unit: as before */
    EXPECT_PARSE_ERROR("fixed-window limit=10 window=.s",
                       "at 29: window \".s\" is not a duration (as in 1500ms, 10s, 15m, 1h or 1d)");
    EXPECT_PARSE_ERROR("fixed-window limit=10 window=1.5",
                       "at 29: window \"1.5\" has an unknown unit \".5\" (expected ms, s, m, h or d)");
    /* a rate's count: the same rate in integers */
    EXPECT_PARSE_ERROR("token-bucket capacity=3 rate=0.5/s",
                       "at 29: rate \"0.5/s\": counts are integers; write 1/2s");
    EXPECT_PARSE_ERROR("gcra rate=2.5/s burst=3", "at 10: rate \"2.5/s\": counts are integers; write 5/2s");
    EXPECT_PARSE_ERROR("leaky-bucket capacity=3 rate=1.5/100ms",
                       "at 29: rate \"1.5/100ms\": counts are integers; write 3/200ms");
    EXPECT_PARSE_ERROR("leaky-bucket capacity=3 rate=0.0/s", "at 29: rate \"0.0\" is not a decimal integer");
    /* what the messages advise parses */
    sluice_config c;
    char err[256];
    CHECK_EQ(sluice_config_parse("fixed-window limit=10 window=1500ms", &c, err, sizeof err), SLUICE_OK);
    CHECK_EQ(c.period_ms, 1500);
    CHECK_EQ(sluice_config_parse("token-bucket capacity=3 rate=3/200ms", &c, err, sizeof err), SLUICE_OK);
}

/* Every message starts "at N: " with N within the text. */
static long error_position(const char *err) {
    if (strncmp(err, "at ", 3) != 0) return -1;
    char *end;
    long n = strtol(err + 3, &end, 10);
    return end != err + 3 && end[0] == ':' && end[1] == ' ' ? n : -1;
}

static sluice_config random_config(uint64_t *s);

/* Random texts: pieces of the grammar strung together, and valid texts with
 * a few bytes inserted, deleted or replaced. Every failure names a position
 * within the text and leaves *out alone; every success is a valid config
 * that formats and parses back to itself. */
TEST(parse_fuzz) {
    static const char *const pieces[] = {
        "token-bucket", "leaky-bucket", "gcra", "sliding-window", "fixed-window", "sliding-log",
        "capacity=", "rate=", "limit=", "window=", "burst=", " ", "  ", "\t", "=", "/", "0", "1",
        "7", "1000", "999999999999", "99999999999999999999", "ms", "s", "m", "h", "d", "x", "-", "+",
        ";", "\n", "\xff",
    };
    const size_t n_pieces = sizeof pieces / sizeof pieces[0];
    uint64_t seed = 7;
    int n_ok = 0, n_bad = 0;
    for (int iter = 0; iter < 200000; iter++) {
        char text[256] = "";
        size_t len = 0;
        if (iter % 2 == 0) {
            int n = (int)check_range_(&seed, 0, 12);
            for (int k = 0; k < n; k++) {
                const char *p = pieces[check_range_(&seed, 0, (int64_t)n_pieces - 1)];
                if (len + strlen(p) + 1 > sizeof text) break;
                memcpy(text + len, p, strlen(p) + 1);
                len += strlen(p);
            }
        } else {
            sluice_config c = random_config(&seed);
            REQUIRE(sluice_config_format(&c, text, 128) > 0);
            len = strlen(text);
            for (int m = (int)check_range_(&seed, 0, 2); m > 0 && len > 0; m--) {
                size_t at = (size_t)check_range_(&seed, 0, (int64_t)len - 1);
                switch (check_range_(&seed, 0, 2)) {
                case 0: { /* insert a piece */
                    const char *p = pieces[check_range_(&seed, 0, (int64_t)n_pieces - 1)];
                    size_t k = strlen(p);
                    memmove(text + at + k, text + at, len - at + 1);
                    memcpy(text + at, p, k);
                    len += k;
                    break;
                }
                case 1: /* delete a byte */
                    memmove(text + at, text + at + 1, len - at);
                    len--;
                    break;
                default: /* replace a byte */
                    text[at] = "0123456789=/ smhdx-"[check_range_(&seed, 0, 18)];
                    break;
                }
            }
        }
        sluice_config out = sluice_fixed_window(-9, -9);
        char err[256] = "";
        int rc = sluice_config_parse(text, &out, err, sizeof err);
        if (rc == 0) {
            n_ok++;
            CHECK_EQ(sluice_config_validate(&out, NULL, 0), 0);
            char buf[128];
            sluice_config back;
            CHECK(sluice_config_format(&out, buf, sizeof buf) > 0);
            CHECK_EQ(sluice_config_parse(buf, &back, NULL, 0), 0);
            CHECK(eq_config(&out, &back));
        } else {
            n_bad++;
            CHECK_EQ(rc, SLUICE_EINVAL);
            long pos = error_position(err);
            CHECK(pos >= 0 && pos <= (long)len);
            CHECK(out.limit == -9 && out.period_ms == -9);
        }
    }
    /* the fuzz reached both sides */
    CHECK(n_ok > 10000);
    CHECK(n_bad > 10000);
}

/* ---- formatting ---- */

static void expect_format(sluice_config c, const char *want, int line) {
    char buf[128];
    int n = sluice_config_format(&c, buf, sizeof buf);
    check_count_++;
    if (n != (int)strlen(want) || strcmp(buf, want) != 0) {
        check_failures_++;
        fprintf(stderr, "line %d: format: %d\n  got:  \"%s\"\n  want: \"%s\"\n", line, n, buf, want);
    }
    sluice_config back;
    CHECK_EQ(sluice_config_parse(buf, &back, NULL, 0), 0);
    CHECK(eq_config(&back, &c));
}
#define EXPECT_FORMAT(c, want) expect_format((c), (want), __LINE__)

TEST(format) {
    EXPECT_FORMAT(sluice_token_bucket(3, 1, 1000), "token-bucket capacity=3 rate=1/s");
    EXPECT_FORMAT(sluice_leaky_bucket(5, 10, 1000), "leaky-bucket capacity=5 rate=10/s");
    EXPECT_FORMAT(sluice_token_bucket(20, 100, 1000), "token-bucket capacity=20 rate=100/s");
    EXPECT_FORMAT(sluice_token_bucket(3, 5, 900000), "token-bucket capacity=3 rate=5/15m");
    EXPECT_FORMAT(sluice_token_bucket(2, 7, 3000), "token-bucket capacity=2 rate=7/3s");
    EXPECT_FORMAT(sluice_token_bucket(2, 1, 1), "token-bucket capacity=2 rate=1/ms");
    EXPECT_FORMAT(sluice_token_bucket(2, 1, 1500), "token-bucket capacity=2 rate=1/1500ms");
    EXPECT_FORMAT(sluice_token_bucket(2, 1, DAY_MS), "token-bucket capacity=2 rate=1/d");
    EXPECT_FORMAT(sluice_token_bucket(2, 1, PMAX), "token-bucket capacity=2 rate=1/30d");
    EXPECT_FORMAT(sluice_token_bucket(2, 1, 25 * 3600000LL), "token-bucket capacity=2 rate=1/25h");
    EXPECT_FORMAT(sluice_token_bucket(2, 1, 90000), "token-bucket capacity=2 rate=1/90s");
    EXPECT_FORMAT(sluice_token_bucket(2, 1, 5400000), "token-bucket capacity=2 rate=1/90m");
    EXPECT_FORMAT(sluice_token_bucket(LIM, SLUICE_RATE_MAX, PMAX),
                  "token-bucket capacity=1000000000 rate=1000000000000/30d");
    EXPECT_FORMAT(sluice_token_bucket(LIM, 999999999999, 2591999999),
                  "token-bucket capacity=1000000000 rate=999999999999/2591999999ms");
    EXPECT_FORMAT(sluice_sliding_window(10, 1000), "sliding-window limit=10 window=1s");
    EXPECT_FORMAT(sluice_fixed_window(1000, 3600000), "fixed-window limit=1000 window=1h");
    EXPECT_FORMAT(sluice_sliding_log(10, 60000), "sliding-log limit=10 window=1m");
    EXPECT_FORMAT(sluice_sliding_window(10, 1500), "sliding-window limit=10 window=1500ms");
    EXPECT_FORMAT(sluice_sliding_window(10, 1), "sliding-window limit=10 window=1ms");
    EXPECT_FORMAT(sluice_fixed_window(10, PMAX), "fixed-window limit=10 window=30d");
    EXPECT_FORMAT(sluice_fixed_window(10, DAY_MS), "fixed-window limit=10 window=1d");

    /* Invalid configurations and arguments. */
    char buf[64] = "untouched";
    sluice_config bad = sluice_token_bucket(0, 1, 1000);
    CHECK_EQ(sluice_config_format(&bad, buf, sizeof buf), SLUICE_EINVAL);
    bad = sluice_sliding_window(1, 1000);
    bad.rate = 1;
    CHECK_EQ(sluice_config_format(&bad, buf, sizeof buf), SLUICE_EINVAL);
    bad.algorithm = (sluice_algorithm)9;
    CHECK_EQ(sluice_config_format(&bad, buf, sizeof buf), SLUICE_EINVAL);
    CHECK_EQ(sluice_config_format(NULL, buf, sizeof buf), SLUICE_EINVAL);
    sluice_config ok = sluice_token_bucket(3, 1, 1000);
    CHECK_EQ(sluice_config_format(&ok, NULL, 10), SLUICE_EINVAL);
    CHECK_STR(buf, "untouched");
}

TEST(format_truncation) {
    const char *full = "token-bucket capacity=3 rate=5/15m";
    sluice_config c = sluice_token_bucket(3, 5, 900000);
    int n = (int)strlen(full);
    CHECK_EQ(sluice_config_format(&c, NULL, 0), n);
    for (int len = 0; len <= n + 2; len++) {
        char buf[64];
        memset(buf, '#', sizeof buf);
        CHECK_EQ(sluice_config_format(&c, buf, (size_t)len), n);
        if (len == 0) {
            CHECK_EQ(buf[0], '#');
            continue;
        }
        int kept = len - 1 < n ? len - 1 : n;
        CHECK(strncmp(buf, full, (size_t)kept) == 0);
        CHECK_EQ(buf[kept], '\0');
        CHECK_EQ(buf[len], '#'); /* nothing written past len */
    }
}

/* A random valid configuration, weighted towards edges and round units. */
static sluice_config random_config(uint64_t *s) {
    static const int64_t unit_ms[] = {1, 1000, 60000, 3600000, DAY_MS};
    int64_t limit, period, rate = 0;
    switch (check_range_(s, 0, 3)) {
    case 0: limit = check_range_(s, 1, 100); break;
    case 1: limit = check_range_(s, 1, LIM); break;
    case 2: limit = check_range_(s, 0, 1) ? 1 : LIM; break;
    default: limit = check_range_(s, 1, 1000000); break;
    }
    switch (check_range_(s, 0, 3)) {
    case 0: period = check_range_(s, 1, PMAX); break;
    case 1: period = check_range_(s, 0, 1) ? 1 : PMAX; break;
    default: {
        int64_t u = unit_ms[check_range_(s, 0, 4)];
        period = u * check_range_(s, 1, check_range_(s, 0, 1) ? PMAX / u : 100 < PMAX / u ? 100 : PMAX / u);
        break;
    }
    }
    sluice_algorithm a = (sluice_algorithm)check_range_(s, SLUICE_TOKEN_BUCKET, SLUICE_SLIDING_LOG);
    if (a == SLUICE_TOKEN_BUCKET || a == SLUICE_LEAKY_BUCKET) {
        int64_t rmax = SLUICE_RATE_MAX < 1000000 * period ? SLUICE_RATE_MAX : 1000000 * period;
        switch (check_range_(s, 0, 3)) {
        case 0: rate = check_range_(s, 1, rmax); break;
        case 1: rate = check_range_(s, 0, 1) ? 1 : rmax; break;
        default: rate = check_range_(s, 1, rmax < 1000 ? rmax : 1000); break;
        }
    }
    return (sluice_config){a, limit, rate, period};
}

TEST(round_trip_random) {
    uint64_t seed = 2024;
    for (int i = 0; i < 100000; i++) {
        sluice_config c = random_config(&seed), back;
        REQUIRE(sluice_config_validate(&c, NULL, 0) == 0);
        char buf[128], err[256] = "";
        int n = sluice_config_format(&c, buf, sizeof buf);
        REQUIRE(n > 0 && n < (int)sizeof buf);
        CHECK_EQ(n, (int)strlen(buf));
        int rc = sluice_config_parse(buf, &back, err, sizeof err);
        if (rc != 0 || !eq_config(&c, &back)) {
            check_failures_++;
            fprintf(stderr, "round trip of \"%s\" failed: %s\n", buf, err);
            return;
        }
        char again[128];
        CHECK_EQ(sluice_config_format(&back, again, sizeof again), n);
        CHECK_STR(again, buf);
    }
}

/* ---- error codes ---- */

TEST(errors) {
    CHECK_STR(sluice_strerror(SLUICE_OK), "success");
    CHECK_STR(sluice_strerror(SLUICE_EINVAL), "invalid argument");
    CHECK_STR(sluice_strerror(SLUICE_ECOST), "cost outside what the limiter can ever admit");
    CHECK_STR(sluice_strerror(SLUICE_ENOMEM), "out of memory");
    CHECK_STR(sluice_strerror(SLUICE_EFULL), "store is full");
    CHECK_STR(sluice_strerror(SLUICE_ESTORE), "store failure");
    CHECK_STR(sluice_strerror(SLUICE_ETIMEDOUT), "timed out");
    CHECK_STR(sluice_strerror(SLUICE_ECANCELED), "canceled");
    CHECK_STR(sluice_strerror(-8), "unknown error");
    CHECK_STR(sluice_strerror(1), "unknown error");
    CHECK_STR(sluice_strerror(INT32_MIN), "unknown error");
    CHECK_STR(sluice_err_name(SLUICE_OK), "SLUICE_OK");
    CHECK_STR(sluice_err_name(SLUICE_EINVAL), "SLUICE_EINVAL");
    CHECK_STR(sluice_err_name(SLUICE_ECOST), "SLUICE_ECOST");
    CHECK_STR(sluice_err_name(SLUICE_ENOMEM), "SLUICE_ENOMEM");
    CHECK_STR(sluice_err_name(SLUICE_EFULL), "SLUICE_EFULL");
    CHECK_STR(sluice_err_name(SLUICE_ESTORE), "SLUICE_ESTORE");
    CHECK_STR(sluice_err_name(SLUICE_ETIMEDOUT), "SLUICE_ETIMEDOUT");
    CHECK_STR(sluice_err_name(SLUICE_ECANCELED), "SLUICE_ECANCELED");
    CHECK_STR(sluice_err_name(42), "SLUICE_UNKNOWN");
    CHECK_STR(sluice_version(), SLUICE_VERSION_STRING);
    CHECK_STR(sluice_version(), "0.1.0");

    char err[8] = "xxxxxxx";
    sluice__errf(err, 0, "%s", "hello");
    CHECK_STR(err, "xxxxxxx");
    sluice__errf(NULL, 8, "%s", "hello");
    sluice__errf(err, sizeof err, "%d-%s", 12, "hello");
    CHECK_STR(err, "12-hell");
}

TEST_MAIN(constructors, validate_rejects, validate_accepts_boundaries, validate_message_buffer,
          parse_suggests_the_nearest_name, parse_fractions_suggest_integers,
          params_init, algo_of, parse_examples, parse_variants, parse_errors, parse_fuzz, format,
          format_truncation, round_trip_random, errors)
