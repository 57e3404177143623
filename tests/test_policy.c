/* test_policy.c: policies: making, parsing and formatting them, names, part
 * counts, the cost check, and that failed calls change nothing. */
#include "check.h"
#include "internal.h"

static int eq_config(const sluice_config *a, const sluice_config *b) {
    return a->algorithm == b->algorithm && a->limit == b->limit && a->rate == b->rate &&
           a->period_ms == b->period_ms;
}

/* A value *out must still hold after a failed call. */
static sluice_policy *const SENTINEL = (sluice_policy *)(uintptr_t)0x5e47;

TEST(new_and_accessors) {
    sluice_config parts[2] = {sluice_token_bucket(10, 10, 1000), sluice_fixed_window(1000, 3600000)};
    sluice_policy *p = NULL;
    REQUIRE(sluice_policy_new("api:v1.read-tier_2", parts, 2, &p) == 0);
    CHECK_STR(sluice_policy_name(p), "api:v1.read-tier_2");
    CHECK_EQ(sluice_policy_n_parts(p), 2);
    CHECK(eq_config(sluice_policy_part(p, 0), &parts[0]));
    CHECK(eq_config(sluice_policy_part(p, 1), &parts[1]));
    CHECK(sluice_policy_part(p, 2) == NULL);
    CHECK(sluice_policy_part(p, (size_t)-1) == NULL);

    /* Precomputed per part. */
    CHECK_EQ(p->params[0].limit, 10);
    CHECK_EQ(p->params[0].p, 100);
    CHECK_EQ(p->params[0].r, 1);
    CHECK_EQ(p->params[0].tau, 1000);
    CHECK_EQ(p->params[1].limit, 1000);
    CHECK_EQ(p->params[1].window_ms, 3600000);
    CHECK(p->algo[0] == &sluice__token_bucket);
    CHECK(p->algo[1] == &sluice__fixed_window);

    /* The policy holds copies: changing the caller's array changes nothing. */
    parts[0].limit = 99;
    CHECK_EQ(sluice_policy_part(p, 0)->limit, 10);

    char buf[128];
    CHECK_EQ(sluice_policy_format(p, buf, sizeof buf),
             (int)strlen("token-bucket capacity=10 rate=10/s; fixed-window limit=1000 window=1h"));
    CHECK_STR(buf, "token-bucket capacity=10 rate=10/s; fixed-window limit=1000 window=1h");
    sluice_policy_free(p);
    sluice_policy_free(NULL);

    /* One part; every algorithm. */
    const sluice_config one[] = {sluice_token_bucket(1, 1, 1), sluice_sliding_window(2, 3),
                                 sluice_fixed_window(4, 5), sluice_leaky_bucket(6, 7, 8),
                                 sluice_sliding_log(9, 10)};
    for (size_t i = 0; i < 5; i++) {
        REQUIRE(sluice_policy_new("x", &one[i], 1, &p) == 0);
        CHECK_EQ(sluice_policy_n_parts(p), 1);
        CHECK(eq_config(sluice_policy_part(p, 0), &one[i]));
        CHECK(p->algo[0] == sluice__algo_of(one[i].algorithm));
        sluice_policy_free(p);
    }
}

TEST(part_counts) {
    sluice_config parts[9];
    for (int i = 0; i < 9; i++) parts[i] = sluice_sliding_window(i + 1, 1000 * (i + 1));
    sluice_policy *p = SENTINEL;
    CHECK_EQ(sluice_policy_new("n", parts, 0, &p), SLUICE_EINVAL);
    CHECK(p == SENTINEL);
    CHECK_EQ(sluice_policy_new("n", parts, 9, &p), SLUICE_EINVAL);
    CHECK(p == SENTINEL);
    CHECK_EQ(sluice_policy_new("n", parts, (size_t)-1, &p), SLUICE_EINVAL);
    CHECK(p == SENTINEL);
    for (size_t n = 1; n <= 8; n++) {
        REQUIRE(sluice_policy_new("n", parts, n, &p) == 0);
        CHECK_EQ(sluice_policy_n_parts(p), n);
        for (size_t i = 0; i < n; i++) CHECK(eq_config(sluice_policy_part(p, i), &parts[i]));
        CHECK(sluice_policy_part(p, n) == NULL);
        sluice_policy_free(p);
    }

    /* The same by text. */
    char text[1024] = "";
    for (int i = 0; i < 9; i++) {
        char one[80];
        sluice_config_format(&parts[i], one, sizeof one);
        if (i > 0) strcat(text, "; ");
        strcat(text, one);
        char err[256] = "";
        p = SENTINEL;
        int rc = sluice_policy_parse("n", text, &p, err, sizeof err);
        if (i < 8) {
            REQUIRE(rc == 0);
            CHECK_EQ(sluice_policy_n_parts(p), i + 1);
            char back[1024];
            CHECK_EQ(sluice_policy_format(p, back, sizeof back), (int)strlen(text));
            CHECK_STR(back, text);
            sluice_policy_free(p);
        } else {
            CHECK_EQ(rc, SLUICE_EINVAL);
            CHECK(p == SENTINEL);
            /* The ninth part starts after the eighth "; ". */
            size_t ninth = (size_t)(strrchr(text, ';') - text) + 2;
            char want[128];
            snprintf(want, sizeof want, "at %zu: more than 8 configurations (a policy has 1..8)",
                     ninth);
            CHECK_STR(err, want);
        }
    }
}

TEST(names) {
    const sluice_config c = sluice_fixed_window(1, 1000);
    static const char *const good[] = {
        "a", "default", "API", "tier-1", "a_b", "v1.2", "ns:name", "0",
        "-_.:", "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        sluice_policy *p = NULL;
        CHECK_EQ(sluice_policy_new(good[i], &c, 1, &p), 0);
        CHECK_STR(sluice_policy_name(p), good[i]);
        sluice_policy_free(p);
        CHECK_EQ(sluice_policy_parse(good[i], "fixed-window limit=1 window=1s", &p, NULL, 0), 0);
        CHECK_STR(sluice_policy_name(p), good[i]);
        sluice_policy_free(p);
    }
    char long_name[80];
    memset(long_name, 'n', 65);
    long_name[65] = '\0';
    static const char *const bad[] = {"", "a b", "tab\t", "slash/", "semi;", "quote\"", "h\xc3\xa9llo",
                                      "comma,", "eq=", "new\nline"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0] + 1; i++) {
        const char *name = i < sizeof bad / sizeof bad[0] ? bad[i] : long_name;
        sluice_policy *p = SENTINEL;
        CHECK_EQ(sluice_policy_new(name, &c, 1, &p), SLUICE_EINVAL);
        CHECK(p == SENTINEL);
        char err[160] = "";
        CHECK_EQ(sluice_policy_parse(name, "fixed-window limit=1 window=1s", &p, err, sizeof err),
                 SLUICE_EINVAL);
        CHECK(p == SENTINEL);
        CHECK(strncmp(err, "policy name ", 12) == 0);
    }
    char err[160];
    sluice_policy *p = SENTINEL;
    CHECK_EQ(sluice_policy_parse("", "fixed-window limit=1 window=1s", &p, err, sizeof err), SLUICE_EINVAL);
    CHECK_STR(err, "policy name is 0 bytes long (it must be 1..64)");
    CHECK_EQ(sluice_policy_parse(long_name, "fixed-window limit=1 window=1s", &p, err, sizeof err),
             SLUICE_EINVAL);
    CHECK_STR(err, "policy name is 65 bytes long (it must be 1..64)");
    CHECK_EQ(sluice_policy_parse("a b", "fixed-window limit=1 window=1s", &p, err, sizeof err),
             SLUICE_EINVAL);
    CHECK_STR(err, "policy name has byte 0x20 at 1 (allowed: letters, digits and \"-_.:\")");
    CHECK(p == SENTINEL);
    long_name[64] = '\0'; /* 64 bytes: the longest name */
    CHECK_EQ(sluice_policy_new(long_name, &c, 1, &p), 0);
    CHECK_STR(sluice_policy_name(p), long_name);
    sluice_policy_free(p);
}

TEST(parse) {
    sluice_policy *p = NULL;
    char err[256] = "";
    REQUIRE(sluice_policy_parse("web", "  gcra rate=1/s burst=5 ;sliding-log limit=3 window=1m  ", &p,
                                err, sizeof err) == 0);
    CHECK_EQ(sluice_policy_n_parts(p), 2);
    sluice_config want0 = sluice_token_bucket(5, 1, 1000), want1 = sluice_sliding_log(3, 60000);
    CHECK(eq_config(sluice_policy_part(p, 0), &want0));
    CHECK(eq_config(sluice_policy_part(p, 1), &want1));
    char buf[256];
    sluice_policy_format(p, buf, sizeof buf);
    CHECK_STR(buf, "token-bucket capacity=5 rate=1/s; sliding-log limit=3 window=1m");
    sluice_policy_free(p);

    REQUIRE(sluice_policy_parse("one", "leaky-bucket capacity=5 rate=10/s", &p, err, sizeof err) == 0);
    CHECK_EQ(sluice_policy_n_parts(p), 1);
    sluice_policy_format(p, buf, sizeof buf);
    CHECK_STR(buf, "leaky-bucket capacity=5 rate=10/s");
    CHECK(p->algo[0] == &sluice__leaky_bucket);
    sluice_policy_free(p);

    REQUIRE(sluice_policy_parse("t", "fixed-window limit=1 window=1s;fixed-window limit=1 window=1s", &p,
                                err, sizeof err) == 0);
    CHECK_EQ(sluice_policy_n_parts(p), 2); /* the same part twice is allowed */
    sluice_policy_free(p);
}

static void expect_policy_error(const char *text, const char *want, int line) {
    sluice_policy *p = SENTINEL;
    char err[512] = "";
    int rc = sluice_policy_parse("pol", text, &p, err, sizeof err);
    check_count_++;
    if (rc != SLUICE_EINVAL || strcmp(err, want) != 0) {
        check_failures_++;
        fprintf(stderr, "line %d: policy \"%s\": rc %d\n  got:  \"%s\"\n  want: \"%s\"\n", line, text,
                rc, err, want);
    }
    CHECK(p == SENTINEL);
}
#define EXPECT_POLICY_ERROR(text, want) expect_policy_error((text), (want), __LINE__)

TEST(parse_errors) {
    EXPECT_POLICY_ERROR("", "at 0: empty configuration (expected \"config; config; ...\")");
    EXPECT_POLICY_ERROR("   ", "at 3: empty configuration (expected \"config; config; ...\")");
    EXPECT_POLICY_ERROR(";fixed-window limit=1 window=1s",
                        "at 0: empty configuration (expected \"config; config; ...\")");
    EXPECT_POLICY_ERROR("fixed-window limit=1 window=1s;",
                        "at 31: empty configuration (expected \"config; config; ...\")");
    EXPECT_POLICY_ERROR("fixed-window limit=1 window=1s;  ",
                        "at 33: empty configuration (expected \"config; config; ...\")");
    EXPECT_POLICY_ERROR("fixed-window limit=1 window=1s;;sliding-log limit=1 window=1s",
                        "at 31: empty configuration (expected \"config; config; ...\")");
    EXPECT_POLICY_ERROR("fixed-window limit=1 window=1s; ; sliding-log limit=1 window=1s",
                        "at 32: empty configuration (expected \"config; config; ...\")");

    /* Positions count from the start of the whole text. */
    EXPECT_POLICY_ERROR("fixed-window limit=5 window=1s; token-bucket capacity=0 rate=1/s",
                        "at 54: capacity 0 is outside 1..1000000000");
    EXPECT_POLICY_ERROR("fixed-window limit=5 window=1s; token-bucket capacity=3 rate=1/0s",
                        "at 63: period 0 ms is outside 1..2592000000 ms (1 ms to 30 days)");
    EXPECT_POLICY_ERROR("fixed-window limit=5 window=1s; bogus limit=1",
                        "at 32: unknown algorithm \"bogus\" (expected token-bucket, leaky-bucket, gcra, "
                        "sliding-window, fixed-window or sliding-log)");
    /* A missing parameter is reported where its part ends. */
    EXPECT_POLICY_ERROR("fixed-window limit=5; sliding-log limit=1 window=1s",
                        "at 20: missing parameter window (fixed-window takes limit=N window=DURATION)");
    EXPECT_POLICY_ERROR("fixed-window limit=5 window=1s; sliding-log limit=1",
                        "at 51: missing parameter window (sliding-log takes limit=N window=DURATION)");
    /* The first error in the text wins. */
    EXPECT_POLICY_ERROR("fixed-window limit=0 window=1s; bogus",
                        "at 19: limit 0 is outside 1..1000000000");

    /* NULL arguments. */
    sluice_policy *p = SENTINEL;
    char err[64];
    CHECK_EQ(sluice_policy_parse(NULL, "fixed-window limit=1 window=1s", &p, err, sizeof err),
             SLUICE_EINVAL);
    CHECK_STR(err, "name is NULL");
    CHECK_EQ(sluice_policy_parse("a", NULL, &p, err, sizeof err), SLUICE_EINVAL);
    CHECK_STR(err, "text is NULL");
    CHECK_EQ(sluice_policy_parse("a", "fixed-window limit=1 window=1s", NULL, err, sizeof err),
             SLUICE_EINVAL);
    CHECK_STR(err, "out is NULL");
    CHECK_EQ(sluice_policy_parse("a", "bogus", &p, NULL, 0), SLUICE_EINVAL);
    CHECK(p == SENTINEL);
}

TEST(new_errors) {
    sluice_config c = sluice_fixed_window(1, 1000);
    sluice_policy *p = SENTINEL;
    CHECK_EQ(sluice_policy_new(NULL, &c, 1, &p), SLUICE_EINVAL);
    CHECK_EQ(sluice_policy_new("a", NULL, 1, &p), SLUICE_EINVAL);
    CHECK_EQ(sluice_policy_new("a", &c, 1, NULL), SLUICE_EINVAL);
    CHECK(p == SENTINEL);

    /* An invalid part, anywhere, rejects the policy. */
    sluice_config parts[3] = {sluice_fixed_window(1, 1000), sluice_token_bucket(5, 1, 1000),
                              sluice_sliding_log(3, 1000)};
    const sluice_config bad[] = {
        sluice_fixed_window(0, 1000),     sluice_token_bucket(5, 0, 1000),
        sluice_token_bucket(5, 1, 0),     sluice_leaky_bucket(5, 2000000000, 1000),
        sluice_sliding_log(1, 2592000001), {(sluice_algorithm)0, 1, 0, 1000},
        {SLUICE_SLIDING_WINDOW, 1, 1, 1000},
    };
    for (size_t b = 0; b < sizeof bad / sizeof bad[0]; b++) {
        for (size_t at = 0; at < 3; at++) {
            sluice_config tmp[3] = {parts[0], parts[1], parts[2]};
            tmp[at] = bad[b];
            CHECK_EQ(sluice_policy_new("a", tmp, 3, &p), SLUICE_EINVAL);
            CHECK(p == SENTINEL);
        }
    }
    CHECK_EQ(sluice_policy_new("a", parts, 3, &p), 0);
    CHECK(p != SENTINEL);
    sluice_policy_free(p);
}

TEST(accessors_null) {
    CHECK(sluice_policy_name(NULL) == NULL);
    CHECK_EQ(sluice_policy_n_parts(NULL), 0);
    CHECK(sluice_policy_part(NULL, 0) == NULL);
    char buf[8] = "x";
    CHECK_EQ(sluice_policy_format(NULL, buf, sizeof buf), SLUICE_EINVAL);
    CHECK_STR(buf, "x");
    CHECK_EQ(sluice__policy_check_cost(NULL, 1), SLUICE_EINVAL);
    sluice_policy_free(NULL);
}

TEST(check_cost) {
    sluice_config parts[3] = {sluice_token_bucket(10, 1, 1000), sluice_sliding_window(5, 1000),
                              sluice_fixed_window(1000000000, 1000)};
    sluice_policy *p;
    REQUIRE(sluice_policy_new("c", parts, 3, &p) == 0);
    CHECK_EQ(sluice__policy_check_cost(p, 1), 0);
    CHECK_EQ(sluice__policy_check_cost(p, 5), 0);
    CHECK_EQ(sluice__policy_check_cost(p, 6), SLUICE_ECOST);  /* above part 1's limit */
    CHECK_EQ(sluice__policy_check_cost(p, 10), SLUICE_ECOST);
    CHECK_EQ(sluice__policy_check_cost(p, 0), SLUICE_ECOST);
    CHECK_EQ(sluice__policy_check_cost(p, -1), SLUICE_ECOST);
    CHECK_EQ(sluice__policy_check_cost(p, INT64_MIN), SLUICE_ECOST);
    CHECK_EQ(sluice__policy_check_cost(p, INT64_MAX), SLUICE_ECOST);
    sluice_policy_free(p);

    REQUIRE(sluice_policy_new("c", &parts[2], 1, &p) == 0);
    CHECK_EQ(sluice__policy_check_cost(p, 1000000000), 0);
    CHECK_EQ(sluice__policy_check_cost(p, 1000000001), SLUICE_ECOST);
    sluice_policy_free(p);
}

TEST(format_truncation) {
    sluice_config parts[2] = {sluice_token_bucket(3, 1, 1000), sluice_sliding_window(10, 1500)};
    sluice_policy *p;
    REQUIRE(sluice_policy_new("f", parts, 2, &p) == 0);
    const char *full = "token-bucket capacity=3 rate=1/s; sliding-window limit=10 window=1500ms";
    int n = (int)strlen(full);
    CHECK_EQ(sluice_policy_format(p, NULL, 0), n);
    for (int len = 0; len <= n + 2; len++) {
        char buf[128];
        memset(buf, '#', sizeof buf);
        CHECK_EQ(sluice_policy_format(p, buf, (size_t)len), n);
        if (len == 0) {
            CHECK_EQ(buf[0], '#');
            continue;
        }
        int kept = len - 1 < n ? len - 1 : n;
        CHECK(strncmp(buf, full, (size_t)kept) == 0);
        CHECK_EQ(buf[kept], '\0');
        CHECK_EQ(buf[len], '#');
    }
    CHECK_EQ(sluice_policy_format(p, NULL, 5), SLUICE_EINVAL);
    sluice_policy_free(p);
}

static sluice_config random_config(uint64_t *s) {
    sluice_algorithm a = (sluice_algorithm)check_range_(s, SLUICE_TOKEN_BUCKET, SLUICE_SLIDING_LOG);
    int64_t limit = check_range_(s, 0, 1) ? check_range_(s, 1, 100) : check_range_(s, 1, SLUICE_LIMIT_MAX);
    int64_t period = check_range_(s, 0, 1) ? 1000 * check_range_(s, 1, 100)
                                           : check_range_(s, 1, SLUICE_PERIOD_MAX_MS);
    int64_t rate = 0;
    if (a == SLUICE_TOKEN_BUCKET || a == SLUICE_LEAKY_BUCKET) {
        int64_t rmax = SLUICE_RATE_MAX < 1000000 * period ? SLUICE_RATE_MAX : 1000000 * period;
        rate = check_range_(s, 1, check_range_(s, 0, 1) ? rmax : (rmax < 100 ? rmax : 100));
    }
    return (sluice_config){a, limit, rate, period};
}

TEST(round_trip_random) {
    uint64_t seed = 99;
    for (int iter = 0; iter < 20000; iter++) {
        sluice_config parts[SLUICE_POLICY_MAX_PARTS];
        size_t n = (size_t)check_range_(&seed, 1, SLUICE_POLICY_MAX_PARTS);
        for (size_t i = 0; i < n; i++) parts[i] = random_config(&seed);
        sluice_policy *p, *q;
        REQUIRE(sluice_policy_new("rt", parts, n, &p) == 0);
        char text[1024], again[1024], err[256] = "";
        int len = sluice_policy_format(p, text, sizeof text);
        REQUIRE(len > 0 && len < (int)sizeof text);
        int rc = sluice_policy_parse("rt", text, &q, err, sizeof err);
        if (rc != 0) {
            check_failures_++;
            fprintf(stderr, "parse of \"%s\" failed: %s\n", text, err);
            sluice_policy_free(p);
            return;
        }
        CHECK_EQ(sluice_policy_n_parts(q), n);
        for (size_t i = 0; i < n; i++) {
            CHECK(eq_config(sluice_policy_part(q, i), &parts[i]));
            const sluice__params *a = &p->params[i], *b = &q->params[i];
            CHECK(eq_config(&a->cfg, &b->cfg));
            CHECK(a->limit == b->limit && a->window_ms == b->window_ms);
            CHECK(a->p == b->p && a->r == b->r && a->tau == b->tau);
            CHECK(p->algo[i] == q->algo[i]);
        }
        CHECK_EQ(sluice_policy_format(q, again, sizeof again), len);
        CHECK_STR(again, text);
        sluice_policy_free(p);
        sluice_policy_free(q);
    }
}

/* A name checked alone, as a policy would check it; and which policies
 * can delay an admitted request. */
TEST(name_check_and_delays) {
    char err[128];
    CHECK_EQ(sluice_policy_name_check("api.v2:read", err, sizeof err), 0);
    CHECK_EQ(sluice_policy_name_check("", err, sizeof err), SLUICE_EINVAL);
    CHECK(strstr(err, "1..64") != NULL);
    CHECK_EQ(sluice_policy_name_check("a b", err, sizeof err), SLUICE_EINVAL);
    CHECK(strstr(err, "0x20") != NULL);
    CHECK_EQ(sluice_policy_name_check(NULL, err, sizeof err), SLUICE_EINVAL);
    CHECK_EQ(sluice_policy_name_check("x", NULL, 0), 0);
    sluice_policy *p = NULL;
    CHECK_EQ(sluice_policy_parse("d", "token-bucket capacity=3 rate=1/s; sliding-log limit=3 window=1s", &p, err,
                                 sizeof err), 0);
    CHECK(!sluice_policy_delays(p));
    sluice_policy_free(p);
    CHECK_EQ(sluice_policy_parse("d", "fixed-window limit=3 window=1s; leaky-bucket capacity=2 rate=1/s", &p, err,
                                 sizeof err), 0);
    CHECK(sluice_policy_delays(p));
    sluice_policy_free(p);
    CHECK(!sluice_policy_delays(NULL));
}

TEST_MAIN(new_and_accessors, part_counts, names, parse, parse_errors, new_errors, accessors_null,
          check_cost, format_truncation, round_trip_random, name_check_and_delays)
