/* check.h: the test harness. One test file is one executable; each TEST is a
 * function run in order by main() (see TEST_MAIN). A failed CHECK prints the
 * file, line and expression and marks the test failed; the run ends with the
 * plain summary line "N passed, N failed" and exits non-zero on any failure.
 * Run one test by name: ./test_x NAME. */
#ifndef SLUICE_TEST_CHECK_H
#define SLUICE_TEST_CHECK_H

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef void (*check_fn)(void);
struct check_test {
    const char *name;
    check_fn fn;
};

static int check_failures_;     /* failures in the current test */
static long long check_count_;  /* checks evaluated, all tests  */

#define CHECK(expr)                                                                    \
    do {                                                                               \
        check_count_++;                                                                \
        if (!(expr)) {                                                                 \
            check_failures_++;                                                         \
            fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #expr);   \
        }                                                                              \
    } while (0)

#define CHECK_EQ(a, b)                                                                 \
    do {                                                                               \
        long long check_a_ = (long long)(a), check_b_ = (long long)(b);                \
        check_count_++;                                                                \
        if (check_a_ != check_b_) {                                                    \
            check_failures_++;                                                         \
            fprintf(stderr, "%s:%d: CHECK_EQ failed: %s == %s (%lld != %lld)\n",      \
                    __FILE__, __LINE__, #a, #b, check_a_, check_b_);                   \
        }                                                                              \
    } while (0)

#define CHECK_STR(a, b)                                                                \
    do {                                                                               \
        const char *check_a_ = (a), *check_b_ = (b);                                   \
        check_count_++;                                                                \
        if (strcmp(check_a_, check_b_) != 0) {                                         \
            check_failures_++;                                                         \
            fprintf(stderr, "%s:%d: CHECK_STR failed: %s == %s\n  got:  \"%s\"\n  want: \"%s\"\n", \
                    __FILE__, __LINE__, #a, #b, check_a_, check_b_);                   \
        }                                                                              \
    } while (0)

/* Stops the current test (after a failure that makes the rest meaningless). */
#define REQUIRE(expr)                                                                  \
    do {                                                                               \
        int check_ok_ = !!(expr); /* evaluated once */                                 \
        check_count_++;                                                                \
        if (!check_ok_) {                                                              \
            check_failures_++;                                                         \
            fprintf(stderr, "%s:%d: REQUIRE failed: %s\n", __FILE__, __LINE__, #expr);   \
            return;                                                                    \
        }                                                                              \
    } while (0)

#define TEST(name) static void name(void)

/* TEST_MAIN(t1, t2, ...) defines main(). */
#define TEST_MAIN(...)                                                                 \
    int main(int argc, char **argv) {                                                  \
        static const check_fn fns_[] = {__VA_ARGS__};                                  \
        static const char names_[] = #__VA_ARGS__;                                     \
        return check_run_(fns_, sizeof fns_ / sizeof fns_[0], names_, argc > 1 ? argv[1] : NULL); \
    }

static int check_run_(const check_fn *fns, size_t n, const char *names, const char *only) {
    int passed = 0, failed = 0;
    const char *p = names;
    for (size_t i = 0; i < n; i++) {
        char name[128];
        size_t k = 0;
        while (*p == ' ' || *p == ',' || *p == '\n' || *p == '\t') p++;
        while (*p && *p != ',' && k + 1 < sizeof name) name[k++] = *p++;
        while (k > 0 && (name[k - 1] == ' ' || name[k - 1] == '\n')) k--;
        name[k] = 0;
        if (only && strcmp(only, name) != 0) continue;
        check_failures_ = 0;
        fns[i]();
        if (check_failures_) {
            failed++;
            fprintf(stderr, "FAIL %s\n", name);
        } else {
            passed++;
            printf("ok   %s\n", name);
        }
    }
    printf("%lld checks\n%d passed, %d failed\n", check_count_, passed, failed);
    return failed ? 1 : 0;
}

/* A small deterministic PRNG (splitmix64) so traces repeat from a seed. */
static inline uint64_t check_rand_(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}
/* Uniform in [lo, hi] (hi - lo < 2^63). */
static inline int64_t check_range_(uint64_t *s, int64_t lo, int64_t hi) {
    uint64_t span = (uint64_t)(hi - lo) + 1;
    return lo + (int64_t)(span ? check_rand_(s) % span : check_rand_(s));
}

/* SLUICE_TEST_SCALE (default 1) multiplies the sizes of random tests. */
static inline double test_scale(void) {
    const char *s = getenv("SLUICE_TEST_SCALE");
    double v = s ? strtod(s, NULL) : 1.0;
    return v > 0 ? v : 1.0;
}
/* Built with ASan or TSan (slower): tests that would take too long there
 * shrink, by test_scale_sanitized(factor) or on SANITIZED. */
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#define SANITIZED 1
#else
#define SANITIZED 0
#endif
static inline double test_scale_sanitized(double factor) {
    return test_scale() * (SANITIZED ? factor : 1.0);
}
static inline int scaled(int n) {
    double v = n * test_scale();
    return v < 1 ? 1 : (int)v;
}

static inline int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }
static inline int64_t max64(int64_t a, int64_t b) { return a > b ? a : b; }

/* Log-uniform in [lo, hi] (1 <= lo <= hi): every bit length equally likely. */
static inline int64_t log_uniform(uint64_t *rs, int64_t lo, int64_t hi) {
    int bits = 64 - __builtin_clzll((unsigned long long)hi);
    int k = (int)check_range_(rs, 1, bits);
    int64_t a = k == 1 ? 1 : INT64_C(1) << (k - 1);
    int64_t b = k >= 63 ? INT64_MAX : (INT64_C(1) << k) - 1;
    a = max64(a, lo);
    b = min64(b, hi);
    if (a > b) return check_range_(rs, lo, hi);
    return check_range_(rs, a, b);
}

#endif
