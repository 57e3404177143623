/* test_headers.c: sluice_headers_format, byte for byte.
 *
 * Exact expected field lines for one-part and composite policies, allowed and
 * denied decisions, the rounding of every duration up to whole seconds, every
 * buffer length below the needed one, and bad arguments. Decisions are built
 * by hand (the function only formats), except in the end-to-end tests at the
 * bottom, which format what a real limiter decided. */
#include "check.h"
#include "sluice.h"
#include "internal.h" /* sluice__limiter_peek_part: a part's own state */

/* ---- helpers ---- */

/* check.h's REQUIRE evaluates its expression twice: make the call once. */
#define REQUIRE_OK(call)                                                       \
    do {                                                                       \
        int rc_ = (call);                                                      \
        CHECK_EQ(rc_, SLUICE_OK);                                              \
        if (rc_ != SLUICE_OK) return;                                          \
    } while (0)

static sluice_policy *policy1(const char *name, sluice_config c) {
    sluice_policy *p = NULL;
    int rc = sluice_policy_new(name, &c, 1, &p);
    CHECK_EQ(rc, SLUICE_OK);
    return p;
}

/* A one-part decision: the part's own reset is the policy's. */
static sluice_decision allowed(int64_t remaining, int64_t reset_ms) {
    sluice_decision d = {0};
    d.allowed = true;
    d.enforced = true;
    d.remaining = remaining;
    d.reset_ms = d.part_reset_ms = reset_ms;
    return d;
}

static sluice_decision denied(int64_t remaining, int64_t retry_after_ms, int64_t reset_ms) {
    sluice_decision d = {0};
    d.allowed = false;
    d.enforced = true;
    d.remaining = remaining;
    d.retry_after_ms = retry_after_ms;
    d.reset_ms = d.part_reset_ms = reset_ms;
    return d;
}

/* Formats into a roomy buffer; checks the return value is the length. */
static const char *fmt(const sluice_policy *p, const sluice_decision *d) {
    static char buf[2048];
    int n = sluice_headers_format(p, d, buf, sizeof buf);
    CHECK(n >= 0);
    if (n < 0) return "<error>";
    CHECK_EQ(n, strlen(buf));
    return buf;
}

/* The policy line alone, for the quota/window tables. */
static const char *policy_line(sluice_config c) {
    static char line[256];
    sluice_policy *p = policy1("p", c);
    line[0] = 0;
    if (!p) return "<no policy>";
    sluice_decision d = allowed(0, 0);
    const char *all = fmt(p, &d);
    const char *end = strstr(all, "\r\n");
    size_t n = end ? (size_t)(end - all) : strlen(all);
    if (n >= sizeof line) n = sizeof line - 1;
    memcpy(line, all, n);
    line[n] = 0;
    sluice_policy_free(p);
    return line;
}

/* ---- one part ---- */

TEST(one_part_allowed) {
    sluice_policy *p = policy1("api", sluice_fixed_window(10, 1000));
    REQUIRE(p);
    sluice_decision d = allowed(9, 400);
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"api\";q=10;w=1\r\n"
                          "RateLimit: \"api\";r=9;t=1\r\n");
    sluice_policy_free(p);
}

TEST(one_part_denied) {
    sluice_policy *p = policy1("api", sluice_fixed_window(10, 60000));
    REQUIRE(p);
    sluice_decision d = denied(0, 42500, 42500);
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"api\";q=10;w=60\r\n"
                          "RateLimit: \"api\";r=0;t=43\r\n"
                          "Retry-After: 43\r\n");
    sluice_policy_free(p);
}

TEST(one_part_denied_with_remaining) {
    /* a request of cost 5 denied while 2 are free: r says what is free now */
    sluice_policy *p = policy1("uploads", sluice_token_bucket(10, 1, 1000));
    REQUIRE(p);
    sluice_decision d = denied(2, 3000, 8000);
    /* t on a denial: when this request gets in, as Retry-After */
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"uploads\";q=10;w=10\r\n"
                          "RateLimit: \"uploads\";r=2;t=3\r\n"
                          "Retry-After: 3\r\n");
    sluice_policy_free(p);
}

TEST(name_characters_pass_through) {
    sluice_policy *p = policy1("tier-1_api.v2:read", sluice_sliding_window(5, 1000));
    REQUIRE(p);
    sluice_decision d = allowed(4, 2000);
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"tier-1_api.v2:read\";q=5;w=1\r\n"
                          "RateLimit: \"tier-1_api.v2:read\";r=4;t=2\r\n");
    sluice_policy_free(p);
}

/* ---- quota and window per algorithm ---- */

TEST(window_algorithms_quota_and_window) {
    CHECK_STR(policy_line(sluice_fixed_window(1000, 3600000)), "RateLimit-Policy: \"p\";q=1000;w=3600");
    CHECK_STR(policy_line(sluice_sliding_window(10, 1000)), "RateLimit-Policy: \"p\";q=10;w=1");
    CHECK_STR(policy_line(sluice_sliding_log(10, 60000)), "RateLimit-Policy: \"p\";q=10;w=60");
    /* the window rounds up to whole seconds */
    CHECK_STR(policy_line(sluice_fixed_window(3, 1)), "RateLimit-Policy: \"p\";q=3;w=1");
    CHECK_STR(policy_line(sluice_fixed_window(3, 999)), "RateLimit-Policy: \"p\";q=3;w=1");
    CHECK_STR(policy_line(sluice_sliding_window(3, 1001)), "RateLimit-Policy: \"p\";q=3;w=2");
    CHECK_STR(policy_line(sluice_sliding_log(3, 1500)), "RateLimit-Policy: \"p\";q=3;w=2");
    CHECK_STR(policy_line(sluice_fixed_window(SLUICE_LIMIT_MAX, SLUICE_PERIOD_MAX_MS)),
              "RateLimit-Policy: \"p\";q=1000000000;w=2592000");
}

TEST(bucket_quota_and_window) {
    /* w = C*P/R ms (a drained bucket's time to refill), in seconds rounded
     * up; q = what refills in w, R*w/P (so q per w is the rate) */
    CHECK_STR(policy_line(sluice_token_bucket(3, 1, 1000)), "RateLimit-Policy: \"p\";q=3;w=3");
    CHECK_STR(policy_line(sluice_token_bucket(100, 100, 1000)), "RateLimit-Policy: \"p\";q=100;w=1");
    CHECK_STR(policy_line(sluice_token_bucket(20, 100, 1000)), "RateLimit-Policy: \"p\";q=100;w=1");  /* 200 ms: 100 refill in 1 s */
    CHECK_STR(policy_line(sluice_token_bucket(7, 3, 2000)), "RateLimit-Policy: \"p\";q=7;w=5");       /* 4666.7 ms */
    CHECK_STR(policy_line(sluice_token_bucket(5, 1, 900000)), "RateLimit-Policy: \"p\";q=5;w=4500"); /* 5/15m */
    CHECK_STR(policy_line(sluice_token_bucket(1, 1000, 1000)), "RateLimit-Policy: \"p\";q=1000;w=1"); /* 1 ms: at least 1 s */
    CHECK_STR(policy_line(sluice_token_bucket(3, 3, 3000)), "RateLimit-Policy: \"p\";q=3;w=3");      /* exactly 3000 ms */
    CHECK_STR(policy_line(sluice_token_bucket(3, 3, 3001)), "RateLimit-Policy: \"p\";q=3;w=4");      /* 3001 ms */
    CHECK_STR(policy_line(sluice_leaky_bucket(5, 10, 1000)), "RateLimit-Policy: \"p\";q=10;w=1");    /* 500 ms */
    CHECK_STR(policy_line(sluice_leaky_bucket(60, 1, 1000)), "RateLimit-Policy: \"p\";q=60;w=60");
    /* the extremes: the largest C*P (2.592e15 s: past an sf-integer's 15
     * digits, so the window is cut there, with what refills in it), and the
     * fastest rate */
    CHECK_STR(policy_line(sluice_token_bucket(SLUICE_LIMIT_MAX, 1, SLUICE_PERIOD_MAX_MS)),
              "RateLimit-Policy: \"p\";q=385802469;w=999999999999999");
    CHECK_STR(policy_line(sluice_token_bucket(1, SLUICE_RATE_MAX_PER_S, 1000)),
              "RateLimit-Policy: \"p\";q=1000000000;w=1");
}

/* ---- rounding of t and Retry-After ---- */

TEST(reset_rounds_up) {
    sluice_policy *p = policy1("r", sluice_fixed_window(5, 1000));
    REQUIRE(p);
    static const struct {
        int64_t ms;
        const char *want;
    } cases[] = {
        {0, "RateLimit-Policy: \"r\";q=5;w=1\r\nRateLimit: \"r\";r=5;t=0\r\n"},
        {1, "RateLimit-Policy: \"r\";q=5;w=1\r\nRateLimit: \"r\";r=5;t=1\r\n"},
        {999, "RateLimit-Policy: \"r\";q=5;w=1\r\nRateLimit: \"r\";r=5;t=1\r\n"},
        {1000, "RateLimit-Policy: \"r\";q=5;w=1\r\nRateLimit: \"r\";r=5;t=1\r\n"},
        {1001, "RateLimit-Policy: \"r\";q=5;w=1\r\nRateLimit: \"r\";r=5;t=2\r\n"},
        {86400000, "RateLimit-Policy: \"r\";q=5;w=1\r\nRateLimit: \"r\";r=5;t=86400\r\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sluice_decision d = allowed(5, cases[i].ms);
        CHECK_STR(fmt(p, &d), cases[i].want);
    }
    sluice_policy_free(p);
}

TEST(retry_after_rounds_up) {
    sluice_policy *p = policy1("r", sluice_fixed_window(5, 1000));
    REQUIRE(p);
    /* t is the same number, as an sf-integer: at most 15 digits */
    static const struct {
        int64_t ms;
        const char *t, *retry;
    } cases[] = {
        {0, "0", "Retry-After: 0\r\n"}, /* never from a limiter; formatted as given */
        {1, "1", "Retry-After: 1\r\n"},
        {999, "1", "Retry-After: 1\r\n"},
        {1000, "1", "Retry-After: 1\r\n"},
        {1001, "2", "Retry-After: 2\r\n"},
        {1999, "2", "Retry-After: 2\r\n"},
        {2000, "2", "Retry-After: 2\r\n"},
        {INT64_C(1) << 61, "999999999999999", "Retry-After: 2305843009213694\r\n"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        sluice_decision d = denied(0, cases[i].ms, 0);
        char want[256];
        snprintf(want, sizeof want, "RateLimit-Policy: \"r\";q=5;w=1\r\nRateLimit: \"r\";r=0;t=%s\r\n%s",
                 cases[i].t, cases[i].retry);
        CHECK_STR(fmt(p, &d), want);
    }
    sluice_policy_free(p);
}

/* A decision a remote store could not make (on_error=allow or deny): no
 * RateLimit field, which would tell of quota the store never saw. */
TEST(unenforced_has_no_ratelimit) {
    sluice_policy *p = policy1("api", sluice_fixed_window(10, 60000));
    REQUIRE(p);
    sluice_decision d = allowed(0, 0);
    d.enforced = false;
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"api\";q=10;w=60\r\n");
    d = denied(0, 100, 0);
    d.enforced = false;
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"api\";q=10;w=60\r\nRetry-After: 1\r\n");
    sluice_policy_free(p);
}

TEST(no_retry_after_when_allowed) {
    sluice_policy *p = policy1("r", sluice_leaky_bucket(5, 1, 1000));
    REQUIRE(p);
    /* an admitted leaky-bucket request with a delay: still no Retry-After */
    sluice_decision d = allowed(2, 3000);
    d.delay_ms = 2000;
    CHECK(strstr(fmt(p, &d), "Retry-After") == NULL);
    sluice_policy_free(p);
}

/* ---- composite policies ---- */

static sluice_policy *composite(void) {
    sluice_config parts[3] = {
        sluice_token_bucket(10, 1, 1000),      /* 10 s to refill  */
        sluice_sliding_window(100, 60000),     /* 100 per minute  */
        sluice_fixed_window(1000, 86400000),   /* 1000 per day    */
    };
    sluice_policy *p = NULL;
    CHECK_EQ(sluice_policy_new("api", parts, 3, &p), SLUICE_OK);
    return p;
}

#define COMPOSITE_POLICY_LINE \
    "RateLimit-Policy: \"api\";q=10;w=10, \"api.1\";q=100;w=60, \"api.2\";q=1000;w=86400\r\n"

TEST(composite_allowed_each_part) {
    sluice_policy *p = composite();
    REQUIRE(p);
    sluice_decision d = allowed(7, 3000);
    d.part = 0;
    d.limit = 10;
    CHECK_STR(fmt(p, &d), COMPOSITE_POLICY_LINE "RateLimit: \"api\";r=7;t=3\r\n");
    d = allowed(3, 60000);
    d.part = 1;
    d.limit = 100;
    CHECK_STR(fmt(p, &d), COMPOSITE_POLICY_LINE "RateLimit: \"api.1\";r=3;t=60\r\n");
    d = allowed(0, 86399001);
    d.part = 2;
    d.limit = 1000;
    CHECK_STR(fmt(p, &d), COMPOSITE_POLICY_LINE "RateLimit: \"api.2\";r=0;t=86400\r\n");
    sluice_policy_free(p);
}

/* BUG: t named the part with the least remaining but gave the whole
 * policy's reset (a 1 s bucket beside a minute's window said t=56). It is
 * the named part's own, the decision's part_reset_ms (seconds rounded up),
 * which a decision that claims more than the policy's reset cannot have. */
TEST(composite_t_is_the_named_part_own_reset) {
    sluice_config parts[2] = {sluice_token_bucket(10, 10, 1000), sluice_fixed_window(100, 60000)};
    sluice_policy *p = NULL;
    REQUIRE_OK(sluice_policy_new("api", parts, 2, &p));
    const char *policy_line = "RateLimit-Policy: \"api\";q=10;w=1, \"api.1\";q=100;w=60\r\n";
    char want[256], buf[512];
    sluice_decision d = allowed(0, 56000); /* the window resets in 56 s */
    d.limit = 10;
    d.part_reset_ms = 1000; /* the bucket, in 1 s */
    snprintf(want, sizeof want, "%sRateLimit: \"api\";r=0;t=1\r\n", policy_line);
    CHECK_STR(fmt(p, &d), want);
    d.remaining = 7, d.part_reset_ms = 300; /* rounded up */
    snprintf(want, sizeof want, "%sRateLimit: \"api\";r=7;t=1\r\n", policy_line);
    CHECK_STR(fmt(p, &d), want);
    d.remaining = 10, d.part_reset_ms = 0; /* fresh */
    snprintf(want, sizeof want, "%sRateLimit: \"api\";r=10;t=0\r\n", policy_line);
    CHECK_STR(fmt(p, &d), want);
    d = allowed(0, 30000); /* the window named, its own reset the policy's */
    d.part = 1;
    snprintf(want, sizeof want, "%sRateLimit: \"api.1\";r=0;t=30\r\n", policy_line);
    CHECK_STR(fmt(p, &d), want);
    d.part_reset_ms = 30001; /* later than every part's: no decision says so */
    CHECK_EQ(sluice_headers_format(p, &d, buf, sizeof buf), SLUICE_EINVAL);
    d.part_reset_ms = -1;
    CHECK_EQ(sluice_headers_format(p, &d, buf, sizeof buf), SLUICE_EINVAL);
    sluice_policy_free(p);
}

TEST(composite_denied) {
    sluice_policy *p = composite();
    REQUIRE(p);
    sluice_decision d = denied(0, 30001, 90000);
    d.part = 1;
    d.limit = 100;
    CHECK_STR(fmt(p, &d), COMPOSITE_POLICY_LINE "RateLimit: \"api.1\";r=0;t=31\r\nRetry-After: 31\r\n");
    sluice_policy_free(p);
}

TEST(composite_eight_parts) {
    sluice_config parts[SLUICE_POLICY_MAX_PARTS];
    for (int i = 0; i < SLUICE_POLICY_MAX_PARTS; i++) parts[i] = sluice_fixed_window(i + 1, 1000 * (i + 1));
    sluice_policy *p = NULL;
    REQUIRE_OK(sluice_policy_new("x", parts, SLUICE_POLICY_MAX_PARTS, &p));
    sluice_decision d = denied(0, 1, 1);
    d.part = 7;
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"x\";q=1;w=1, \"x.1\";q=2;w=2, \"x.2\";q=3;w=3, "
                          "\"x.3\";q=4;w=4, \"x.4\";q=5;w=5, \"x.5\";q=6;w=6, \"x.6\";q=7;w=7, "
                          "\"x.7\";q=8;w=8\r\n"
                          "RateLimit: \"x.7\";r=0;t=1\r\nRetry-After: 1\r\n");
    sluice_policy_free(p);
}

/* ---- buffer sizes ---- */

/* As snprintf: every len returns the length of the whole text; below
 * strlen+1 it leaves "" (nothing cut in the middle of a field) and touches
 * nothing past len; len = strlen+1 writes it all. */
static void check_every_length(const sluice_policy *p, const sluice_decision *d) {
    char full[2048];
    int n = sluice_headers_format(p, d, full, sizeof full);
    REQUIRE(n > 0);
    CHECK_EQ(sluice_headers_format(p, d, NULL, 0), n); /* how much room it needs */
    char buf[2048 + 16];
    for (size_t len = 0; len <= (size_t)n; len++) {
        memset(buf, 'X', sizeof buf);
        int rc = sluice_headers_format(p, d, buf, len);
        CHECK_EQ(rc, n);
        if (len > 0) CHECK_EQ(buf[0], 0);
        else CHECK_EQ(buf[0], 'X');
        int clean = 1;
        for (size_t i = len; i < sizeof buf; i++)
            if (buf[i] != 'X') clean = 0;
        CHECK(clean);
    }
    memset(buf, 'X', sizeof buf);
    CHECK_EQ(sluice_headers_format(p, d, buf, (size_t)n + 1), n);
    CHECK_STR(buf, full);
    CHECK_EQ(buf[n + 1], 'X');
}

TEST(buffer_too_small_one_part) {
    sluice_policy *p = policy1("api", sluice_token_bucket(3, 1, 1000));
    REQUIRE(p);
    sluice_decision a = allowed(2, 1000);
    check_every_length(p, &a);
    sluice_decision d = denied(0, 1000, 3000);
    check_every_length(p, &d);
    sluice_policy_free(p);
}

TEST(buffer_too_small_composite) {
    sluice_policy *p = composite();
    REQUIRE(p);
    sluice_decision d = denied(0, 30001, 90000);
    d.part = 2;
    check_every_length(p, &d);
    sluice_policy_free(p);
}

/* ---- bad arguments ---- */

TEST(null_arguments) {
    sluice_policy *p = policy1("api", sluice_fixed_window(10, 1000));
    REQUIRE(p);
    sluice_decision d = allowed(1, 1);
    char buf[256] = "untouched";
    CHECK_EQ(sluice_headers_format(NULL, &d, buf, sizeof buf), SLUICE_EINVAL);
    CHECK_EQ(sluice_headers_format(p, NULL, buf, sizeof buf), SLUICE_EINVAL);
    CHECK_EQ(sluice_headers_format(p, &d, NULL, sizeof buf), SLUICE_EINVAL);
    CHECK_EQ(sluice_headers_format(NULL, NULL, NULL, 0), SLUICE_EINVAL);
    CHECK_EQ(sluice_headers_format(NULL, &d, NULL, 0), SLUICE_EINVAL);
    CHECK_STR(buf, "untouched");
    sluice_policy_free(p);
}

TEST(decision_not_from_this_policy) {
    sluice_policy *p = policy1("api", sluice_fixed_window(10, 1000));
    REQUIRE(p);
    char buf[256];
    sluice_decision d = allowed(1, 1);
    d.part = 1; /* a one-part policy has only part 0 */
    CHECK_EQ(sluice_headers_format(p, &d, buf, sizeof buf), SLUICE_EINVAL);
    d.part = -1;
    CHECK_EQ(sluice_headers_format(p, &d, buf, sizeof buf), SLUICE_EINVAL);
    d = allowed(-1, 0);
    CHECK_EQ(sluice_headers_format(p, &d, buf, sizeof buf), SLUICE_EINVAL);
    d = allowed(1, -5);
    CHECK_EQ(sluice_headers_format(p, &d, buf, sizeof buf), SLUICE_EINVAL);
    d = denied(0, -1, 0);
    CHECK_EQ(sluice_headers_format(p, &d, buf, sizeof buf), SLUICE_EINVAL);
    sluice_policy_free(p);
}

/* ---- end to end: what a real limiter decided ---- */

TEST(from_a_token_bucket) {
    sluice_clock *clk = sluice_clock_manual_new(0);
    REQUIRE(clk);
    sluice_config c = sluice_token_bucket(3, 1, 1000);
    sluice_limiter *l = NULL;
    REQUIRE_OK(sluice_limiter_new(&c, clk, &l));
    const sluice_policy *p = sluice_limiter_policy(l);
    sluice_decision d;
    REQUIRE_OK(sluice_acquire(l, 1, &d));
    /* one token spent: back to full in 1 s */
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"default\";q=3;w=3\r\n"
                          "RateLimit: \"default\";r=2;t=1\r\n");
    REQUIRE_OK(sluice_acquire(l, 1, &d));
    REQUIRE_OK(sluice_acquire(l, 1, &d));
    REQUIRE_OK(sluice_acquire(l, 1, &d));
    CHECK(!d.allowed);
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"default\";q=3;w=3\r\n"
                          "RateLimit: \"default\";r=0;t=1\r\n"
                          "Retry-After: 1\r\n");
    sluice_clock_manual_set(clk, 500);
    REQUIRE_OK(sluice_acquire(l, 1, &d));
    CHECK(!d.allowed);
    CHECK_EQ(d.retry_after_ms, 500);
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"default\";q=3;w=3\r\n"
                          "RateLimit: \"default\";r=0;t=1\r\n"
                          "Retry-After: 1\r\n");
    sluice_limiter_free(l);
    sluice_clock_free(clk);
}

TEST(from_a_composite_limiter) {
    sluice_clock *clk = sluice_clock_manual_new(0);
    REQUIRE(clk);
    sluice_config parts[2] = {sluice_fixed_window(5, 1000), sluice_fixed_window(2, 60000)};
    sluice_policy *p = NULL;
    REQUIRE_OK(sluice_policy_new("api", parts, 2, &p));
    sluice_limiter *l = NULL;
    REQUIRE_OK(sluice_limiter_new_policy(p, clk, &l));
    sluice_decision d;
    REQUIRE_OK(sluice_acquire(l, 1, &d));
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"api\";q=5;w=1, \"api.1\";q=2;w=60\r\n"
                          "RateLimit: \"api.1\";r=1;t=60\r\n");
    REQUIRE_OK(sluice_acquire(l, 1, &d));
    sluice_clock_manual_set(clk, 1500);
    REQUIRE_OK(sluice_acquire(l, 1, &d));
    CHECK(!d.allowed);
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"api\";q=5;w=1, \"api.1\";q=2;w=60\r\n"
                          "RateLimit: \"api.1\";r=0;t=59\r\n"
                          "Retry-After: 59\r\n");
    sluice_limiter_free(l);
    sluice_policy_free(p);
    sluice_clock_free(clk);
}

/* The case, from a real limiter: a 1 s bucket beside a minute's
 * window named the bucket with the window's reset (t=56). */
TEST(from_a_bucket_beside_a_window) {
    sluice_clock *clk = sluice_clock_manual_new(4000);
    REQUIRE(clk);
    sluice_config parts[2] = {sluice_token_bucket(10, 10, 1000), sluice_fixed_window(100, 60000)};
    sluice_policy *p = NULL;
    REQUIRE_OK(sluice_policy_new("api", parts, 2, &p));
    sluice_limiter *l = NULL;
    REQUIRE_OK(sluice_limiter_new_policy(p, clk, &l));
    sluice_decision d;
    for (int i = 0; i < 10; i++) REQUIRE_OK(sluice_acquire(l, 1, &d));
    CHECK(d.allowed);
    CHECK_EQ(d.part, 0);
    CHECK_EQ(d.reset_ms, 56000);
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"api\";q=10;w=1, \"api.1\";q=100;w=60\r\n"
                          "RateLimit: \"api\";r=0;t=1\r\n");
    sluice_limiter_free(l);
    sluice_policy_free(p);
    sluice_clock_free(clk);
}

/* Every part named in turn, from a real limiter: t is that part's own
 * reset (what its algorithm alone says, through the limiter's peek). */
TEST(from_a_composite_of_every_kind) {
    sluice_clock *clk = sluice_clock_manual_new(1000);
    REQUIRE(clk);
    sluice_config parts[4] = {sluice_token_bucket(5, 1, 60000), sluice_sliding_window(50, 10000),
                              sluice_sliding_log(20, 5000), sluice_fixed_window(1000, 86400000)};
    sluice_policy *p = NULL;
    REQUIRE_OK(sluice_policy_new("s", parts, 4, &p));
    sluice_limiter *l = NULL;
    REQUIRE_OK(sluice_limiter_new_policy(p, clk, &l));
    sluice_decision d;
    int64_t costs[] = {2, 3, 5, 1};
    for (size_t i = 0; i < sizeof costs / sizeof costs[0]; i++) {
        REQUIRE_OK(sluice_acquire(l, costs[i], &d));
        if (!d.allowed) break;
        sluice_decision own;
        sluice__limiter_peek_part(l, (size_t)d.part, sluice_clock_now_ms(clk), &own);
        CHECK_EQ(d.part_reset_ms, own.reset_ms);
        CHECK(d.part_reset_ms <= d.reset_ms);
        char want[32];
        snprintf(want, sizeof want, ";t=%lld\r\n", (long long)((own.reset_ms + 999) / 1000));
        const char *got = fmt(p, &d);
        if (!strstr(got, want)) fprintf(stderr, "part %d: %s, want %s\n", d.part, got, want);
        CHECK(strstr(got, want) != NULL);
        sluice_clock_manual_advance(clk, 700);
    }
    sluice_limiter_free(l);
    sluice_policy_free(p);
    sluice_clock_free(clk);
}

/* Shadow parts are no limits a client meets: RateLimit-Policy leaves them
 * out (the others keep their names), a decision cannot name one, and a
 * policy of shadow parts only gets no fields. From a real limiter too. */
TEST(shadow_parts_are_left_out) {
    sluice_policy *p = NULL, *all = NULL;
    char err[256];
    REQUIRE_OK(sluice_policy_parse("api", "shadow token-bucket capacity=5 rate=1/s; fixed-window limit=100 window=1m",
                                   &p, err, sizeof err));
    sluice_decision d = allowed(99, 60000);
    d.part = 1;
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"api.1\";q=100;w=60\r\nRateLimit: \"api.1\";r=99;t=60\r\n");
    d.part = 0; /* a shadow part: no decision names it */
    char buf[256];
    CHECK_EQ(sluice_headers_format(p, &d, buf, sizeof buf), SLUICE_EINVAL);
    sluice_limiter *l;
    REQUIRE_OK(sluice_limiter_new_policy(p, NULL, &l));
    for (int k = 0; k < 7; k++) REQUIRE_OK(sluice_acquire_at(l, 1, 0, &d));
    CHECK(d.allowed && d.shadow_denied && d.part == 1);
    CHECK_STR(fmt(p, &d), "RateLimit-Policy: \"api.1\";q=100;w=60\r\nRateLimit: \"api.1\";r=93;t=60\r\n");
    sluice_limiter_free(l);
    REQUIRE_OK(sluice_policy_parse("try", "shadow fixed-window limit=1 window=1m", &all, err, sizeof err));
    REQUIRE_OK(sluice_limiter_new_policy(all, NULL, &l));
    REQUIRE_OK(sluice_acquire_at(l, 1, 0, &d));
    CHECK_EQ(sluice_headers_format(all, &d, buf, sizeof buf), 0);
    CHECK_STR(buf, "");
    sluice_limiter_free(l);
    sluice_policy_free(p);
    sluice_policy_free(all);
}

TEST_MAIN(one_part_allowed, one_part_denied, one_part_denied_with_remaining,
          name_characters_pass_through, window_algorithms_quota_and_window,
          bucket_quota_and_window, reset_rounds_up, retry_after_rounds_up, unenforced_has_no_ratelimit,
          no_retry_after_when_allowed, composite_allowed_each_part, composite_t_is_the_named_part_own_reset,
          composite_denied, composite_eight_parts, buffer_too_small_one_part, buffer_too_small_composite,
          null_arguments, decision_not_from_this_policy, from_a_token_bucket,
          from_a_composite_limiter, from_a_bucket_beside_a_window,
          from_a_composite_of_every_kind, shadow_parts_are_left_out)
