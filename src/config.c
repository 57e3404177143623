/* config.c: configuration as data: constructors, validation, the text form.
 *
 * A sluice_config is plain data. sluice__params_init() checks it against the
 * accepted ranges of sluice.h and precomputes what decisions need (for the
 * buckets, R/P in lowest terms). The text form
 *
 *   token-bucket capacity=3 rate=1/s       gcra rate=100/s burst=20
 *   leaky-bucket capacity=5 rate=10/s      sliding-window limit=10 window=1s
 *   fixed-window limit=1000 window=1h      sliding-log limit=10 window=1m
 *
 * is read by a small hand-written scanner: tokens are separated by spaces and
 * tabs; the first names the algorithm, each other one is NAME=VALUE. Every
 * error names the byte offset of what it rejects ("at 14: ..."), counted
 * from the start of the whole text (a policy's parts are parsed in place).
 * A misspelt algorithm or parameter name is answered with the nearest
 * valid one (edit distance, letter case aside), and a decimal fraction
 * where an integer goes with the same value in integers ("1.5s": write
 * 1500ms). Formatting writes the one canonical text that parses back to the same
 * struct: counts in decimal, durations in the largest unit that divides them
 * exactly ("1500ms", "15m", "1d"), and a count of 1 left out of rate periods
 * only ("1/s", but "window=1s"). */
#include "internal.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* Constructors                                                              */
/* ------------------------------------------------------------------------ */

sluice_config sluice_token_bucket(int64_t capacity, int64_t rate, int64_t period_ms) {
    return (sluice_config){SLUICE_TOKEN_BUCKET, capacity, rate, period_ms};
}

sluice_config sluice_sliding_window(int64_t limit, int64_t window_ms) {
    return (sluice_config){SLUICE_SLIDING_WINDOW, limit, 0, window_ms};
}

sluice_config sluice_fixed_window(int64_t limit, int64_t window_ms) {
    return (sluice_config){SLUICE_FIXED_WINDOW, limit, 0, window_ms};
}

sluice_config sluice_leaky_bucket(int64_t capacity, int64_t rate, int64_t period_ms) {
    return (sluice_config){SLUICE_LEAKY_BUCKET, capacity, rate, period_ms};
}

sluice_config sluice_sliding_log(int64_t limit, int64_t window_ms) {
    return (sluice_config){SLUICE_SLIDING_LOG, limit, 0, window_ms};
}

/* ------------------------------------------------------------------------ */
/* Names and durations                                                       */
/* ------------------------------------------------------------------------ */

/* The algorithm's name in the text form (its descriptor's), or NULL when a
 * is unknown. */
static const char *algo_name(sluice_algorithm a) {
    const sluice__algo *d = sluice__algo_of(a);
    return d ? d->name : NULL;
}

/* Whether a's configuration is a capacity and a rate (a bucket), not a
 * limit and a window. */
static int is_bucket(sluice_algorithm a) {
    const sluice__algo *d = sluice__algo_of(a);
    return d && (d->flags & SLUICE__ALGO_GCRA);
}

/* Duration units, largest first (the order format tries them in). */
static const struct unit {
    const char *name;
    int64_t ms;
} units[] = {
    {"d", 86400000}, {"h", 3600000}, {"m", 60000}, {"s", 1000}, {"ms", 1},
};
#define N_UNITS (sizeof units / sizeof units[0])

/* Writes ms (> 0) in the largest unit that divides it exactly; the count is
 * left out when it is 1 and omit_one is set ("s" rather than "1s").
 * Returns what snprintf returns. */
static int format_duration(char *buf, size_t len, int64_t ms, int omit_one) {
    for (size_t u = 0; u < N_UNITS; u++) {
        if (ms % units[u].ms != 0) continue;
        int64_t n = ms / units[u].ms;
        if (n == 1 && omit_one) return snprintf(buf, len, "%s", units[u].name);
        return snprintf(buf, len, "%" PRId64 "%s", n, units[u].name);
    }
    return snprintf(buf, len, "%" PRId64 "ms", ms); /* not reached for ms > 0 */
}

/* ------------------------------------------------------------------------ */
/* Validation                                                                */
/* ------------------------------------------------------------------------ */

/* Which value a check rejected: the parser reports that value's position. */
enum bad_field { BAD_NONE, BAD_LIMIT, BAD_RATE, BAD_PERIOD };

/* Checks c against the ranges of sluice.h. limit_name is what messages call
 * the limit (NULL: "capacity" for buckets, "limit" for windows). */
static int check(const sluice_config *c, const char *limit_name, enum bad_field *bad, char *err,
                 size_t errlen) {
    *bad = BAD_NONE;
    const char *name = algo_name(c->algorithm);
    if (name == NULL) {
        sluice__errf(err, errlen,
                     "algorithm %d is unknown (expected 1..5, SLUICE_TOKEN_BUCKET..SLUICE_SLIDING_LOG)",
                     (int)c->algorithm);
        return SLUICE_EINVAL;
    }
    int bucket = is_bucket(c->algorithm);
    if (limit_name == NULL) limit_name = bucket ? "capacity" : "limit";

    if (c->limit < 1 || c->limit > SLUICE_LIMIT_MAX) {
        *bad = BAD_LIMIT;
        sluice__errf(err, errlen, "%s %" PRId64 " is outside 1..%lld", limit_name, c->limit,
                     SLUICE_LIMIT_MAX);
        return SLUICE_EINVAL;
    }
    if (bucket && (c->rate < 1 || c->rate > SLUICE_RATE_MAX)) {
        *bad = BAD_RATE;
        sluice__errf(err, errlen, "rate %" PRId64 " is outside 1..%lld", c->rate, SLUICE_RATE_MAX);
        return SLUICE_EINVAL;
    }
    if (c->period_ms < 1 || c->period_ms > SLUICE_PERIOD_MAX_MS) {
        *bad = BAD_PERIOD;
        sluice__errf(err, errlen, "%s %" PRId64 " ms is outside 1..%lld ms (1 ms to 30 days)",
                     bucket ? "period" : "window", c->period_ms, SLUICE_PERIOD_MAX_MS);
        return SLUICE_EINVAL;
    }
    if (bucket) {
        /* R per P ms at most 10^9 per second: R*1000 <= 10^9*P. Within the
         * ranges checked above both sides are below 2.6e18 < 2^63. */
        if (c->rate * 1000 > SLUICE_RATE_MAX_PER_S * c->period_ms) {
            char dur[32];
            format_duration(dur, sizeof dur, c->period_ms, 0);
            *bad = BAD_RATE;
            sluice__errf(err, errlen, "rate %" PRId64 "/%s is faster than %lld per second", c->rate,
                         dur, SLUICE_RATE_MAX_PER_S);
            return SLUICE_EINVAL;
        }
    } else if (c->rate != 0) {
        *bad = BAD_RATE;
        sluice__errf(err, errlen, "rate %" PRId64 " must be 0 for %s (a window has no rate)",
                     c->rate, name);
        return SLUICE_EINVAL;
    }
    return 0;
}

int sluice_config_validate(const sluice_config *c, char *err, size_t errlen) {
    enum bad_field bad;
    if (c == NULL) {
        sluice__errf(err, errlen, "config is NULL");
        return SLUICE_EINVAL;
    }
    return check(c, NULL, &bad, err, errlen);
}

static int64_t gcd64(int64_t a, int64_t b) { /* a, b > 0 */
    while (b != 0) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

int sluice__params_init(const sluice_config *c, sluice__params *p, char *err, size_t errlen) {
    int rc = sluice_config_validate(c, err, errlen);
    if (rc != 0) return rc;
    if (p == NULL) {
        sluice__errf(err, errlen, "params is NULL");
        return SLUICE_EINVAL;
    }
    memset(p, 0, sizeof *p);
    p->cfg = *c;
    p->limit = c->limit;
    if (is_bucket(c->algorithm)) {
        int64_t g = gcd64(c->rate, c->period_ms);
        p->r = c->rate / g;      /* <= 10^12          */
        p->p = c->period_ms / g; /* <= 2.592e9        */
        p->tau = c->limit * p->p; /* <= 2.592e18 < 2^62 */
        sluice__div_init(&p->by_p, (uint64_t)p->p);
        sluice__div_init(&p->by_r, (uint64_t)p->r);
    } else {
        p->window_ms = c->period_ms;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* Formatting                                                                */
/* ------------------------------------------------------------------------ */

int sluice_config_format(const sluice_config *c, char *buf, size_t len) {
    if (c == NULL || (buf == NULL && len > 0) || sluice_config_validate(c, NULL, 0) != 0)
        return SLUICE_EINVAL;
    char dur[32];
    if (is_bucket(c->algorithm)) {
        format_duration(dur, sizeof dur, c->period_ms, 1);
        return snprintf(buf, len, "%s capacity=%" PRId64 " rate=%" PRId64 "/%s",
                        algo_name(c->algorithm), c->limit, c->rate, dur);
    }
    format_duration(dur, sizeof dur, c->period_ms, 0);
    return snprintf(buf, len, "%s limit=%" PRId64 " window=%s", algo_name(c->algorithm), c->limit,
                    dur);
}

/* ------------------------------------------------------------------------ */
/* Parsing                                                                   */
/* ------------------------------------------------------------------------ */

/* The spellings the text form accepts. Parameter 0 is the limit (under
 * limit_name); parameter 1 is "rate" (N/DURATION) for buckets and "window"
 * (DURATION) for the others. */
static const struct form {
    const char *name;
    sluice_algorithm algorithm;
    const char *limit_name;
    const char *usage; /* for messages */
} forms[] = {
    {"token-bucket", SLUICE_TOKEN_BUCKET, "capacity", "capacity=N rate=N/DURATION"},
    {"leaky-bucket", SLUICE_LEAKY_BUCKET, "capacity", "capacity=N rate=N/DURATION"},
    {"gcra", SLUICE_TOKEN_BUCKET, "burst", "rate=N/DURATION burst=N"},
    {"sliding-window", SLUICE_SLIDING_WINDOW, "limit", "limit=N window=DURATION"},
    {"fixed-window", SLUICE_FIXED_WINDOW, "limit", "limit=N window=DURATION"},
    {"sliding-log", SLUICE_SLIDING_LOG, "limit", "limit=N window=DURATION"},
};
#define ALGO_LIST "token-bucket, leaky-bucket, gcra, sliding-window, fixed-window or sliding-log"
#define DURATION_EXAMPLES "as in 1500ms, 10s, 15m, 1h or 1d"

/* What is being parsed: positions are offsets into s; this configuration
 * ends at end (the end of the text, or a policy's ';'). */
struct parser {
    const char *s;
    size_t end;
    char *err;
    size_t errlen;
};

static int is_space(char ch) { return ch == ' ' || ch == '\t'; }
static int is_digit(char ch) { return ch >= '0' && ch <= '9'; }

static size_t skip_space(const struct parser *ps, size_t i) {
    while (i < ps->end && is_space(ps->s[i])) i++;
    return i;
}

static size_t token_end(const struct parser *ps, size_t i) {
    while (i < ps->end && !is_space(ps->s[i])) i++;
    return i;
}

static int span_is(const struct parser *ps, size_t a, size_t b, const char *word) {
    size_t n = strlen(word);
    return b - a == n && memcmp(ps->s + a, word, n) == 0;
}

/* s[a..b) in double quotes for a message: printable ASCII as is, other bytes
 * (and '"', '\\') as \xHH, cut with "..." when long. */
#define QUOTE_SIZE 64
static const char *quote(char out[QUOTE_SIZE], const struct parser *ps, size_t a, size_t b) {
    size_t k = 0;
    out[k++] = '"';
    for (size_t i = a; i < b; i++) {
        unsigned char ch = (unsigned char)ps->s[i];
        if (k + 4 + 5 > QUOTE_SIZE) { /* room for this byte, then `..."` and NUL */
            memcpy(out + k, "...", 3);
            k += 3;
            break;
        }
        if (ch >= 0x20 && ch < 0x7f && ch != '"' && ch != '\\') {
            out[k++] = (char)ch;
        } else {
            static const char hex[] = "0123456789abcdef";
            out[k++] = '\\';
            out[k++] = 'x';
            out[k++] = hex[ch >> 4];
            out[k++] = hex[ch & 15];
        }
    }
    out[k++] = '"';
    out[k] = '\0';
    return out;
}

/* ---- advice for what almost parses ---- */

static char lower(char ch) { return ch >= 'A' && ch <= 'Z' ? (char)(ch - 'A' + 'a') : ch; }

#define NAME_MAX_FOR_ADVICE 32

/* The edit distance of s[0..n) and word, ASCII case aside: insertions,
 * deletions, substitutions and swaps of neighbours count 1 (optimal string
 * alignment). NAME_MAX_FOR_ADVICE + 1 when either is longer than that. */
static size_t edit_distance(const char *s, size_t n, const char *word) {
    size_t m = strlen(word);
    if (n > NAME_MAX_FOR_ADVICE || m > NAME_MAX_FOR_ADVICE) return NAME_MAX_FOR_ADVICE + 1;
    size_t d[NAME_MAX_FOR_ADVICE + 1][NAME_MAX_FOR_ADVICE + 1];
    for (size_t i = 0; i <= n; i++) d[i][0] = i;
    for (size_t j = 0; j <= m; j++) d[0][j] = j;
    for (size_t i = 1; i <= n; i++) {
        for (size_t j = 1; j <= m; j++) {
            size_t sub = d[i - 1][j - 1] + (lower(s[i - 1]) != lower(word[j - 1]));
            size_t del = d[i - 1][j] + 1, ins = d[i][j - 1] + 1;
            size_t best = sub < del ? sub : del;
            if (ins < best) best = ins;
            if (i > 1 && j > 1 && lower(s[i - 1]) == lower(word[j - 2]) && lower(s[i - 2]) == lower(word[j - 1]) &&
                d[i - 2][j - 2] + 1 < best)
                best = d[i - 2][j - 2] + 1;
            d[i][j] = best;
        }
    }
    return d[n][m];
}

/* The word of words[0..n_words) nearest to s[a..b), or NULL when none is
 * near: within a third of the word's length, rounded up (one slip in
 * "limit", two in "window", four in "fixed-window"). The first on a tie. */
static const char *nearest(const struct parser *ps, size_t a, size_t b, const char *const *words, size_t n_words) {
    const char *best = NULL;
    size_t best_d = 0;
    for (size_t k = 0; k < n_words; k++) {
        size_t d = edit_distance(ps->s + a, b - a, words[k]);
        if (d <= (strlen(words[k]) + 2) / 3 && (!best || d < best_d)) {
            best = words[k];
            best_d = d;
        }
    }
    return best;
}

/* Reads s[a..b) as DIGITS.DIGITS (either may be empty, not both): the
 * value is *num / 10^*scale exactly. Returns 0, or 1 when it is not that
 * form or does not fit (18 digits at most). */
static int scan_decimal(const struct parser *ps, size_t a, size_t b, int64_t *num, int64_t *den) {
    const char *dot = memchr(ps->s + a, '.', b - a);
    int64_t n = 0, d = 1;
    if (!dot || b - a < 2 || b - a > 19) return 1;
    for (size_t i = a; i < b; i++) {
        if (ps->s + i == dot) continue;
        if (!is_digit(ps->s[i])) return 1;
        n = n * 10 + (ps->s[i] - '0'); /* at most 18 digits: fits */
        if (ps->s + i > dot) d *= 10;
    }
    *num = n;
    *den = d;
    return 0;
}

/* Reads s[a..b) as a decimal integer. Returns 0, 1 when it is empty or has
 * a byte other than a digit, 2 when it does not fit in int64_t. */
static int scan_uint(const struct parser *ps, size_t a, size_t b, int64_t *v) {
    int64_t n = 0;
    if (a == b) return 1;
    for (size_t i = a; i < b; i++) {
        if (!is_digit(ps->s[i])) return 1;
        if (__builtin_mul_overflow(n, 10, &n) || __builtin_add_overflow(n, ps->s[i] - '0', &n))
            return 2;
    }
    *v = n;
    return 0;
}

/* field=s[a..b): a count. */
static int parse_count(const struct parser *ps, const char *field, size_t a, size_t b, int64_t *v) {
    char q[QUOTE_SIZE];
    switch (scan_uint(ps, a, b, v)) {
    case 0: return 0;
    case 1:
        sluice__errf(ps->err, ps->errlen, "at %zu: %s %s is not a decimal integer", a, field,
                     quote(q, ps, a, b));
        return SLUICE_EINVAL;
    default:
        sluice__errf(ps->err, ps->errlen, "at %zu: %s %s is too large", a, field, quote(q, ps, a, b));
        return SLUICE_EINVAL;
    }
}

/* The unit named by s[a..b), or NULL. */
static const struct unit *unit_of(const struct parser *ps, size_t a, size_t b) {
    for (size_t u = 0; u < N_UNITS; u++)
        if (span_is(ps, a, b, units[u].name)) return &units[u];
    return NULL;
}

/* field=s[a..b) as a decimal fraction and a unit ("1.5s"): an error saying
 * durations are integers, with the same duration in whole units when it is
 * a whole number of ms. 0 when s[a..b) is not of that form. */
static int fractional_duration(const struct parser *ps, const char *field, size_t a, size_t b) {
    char q[QUOTE_SIZE], dur[32];
    size_t i = a;
    int64_t num, den, ms;
    while (i < b && (is_digit(ps->s[i]) || ps->s[i] == '.')) i++;
    const struct unit *unit = unit_of(ps, i, b);
    if (!unit || scan_decimal(ps, a, i, &num, &den) != 0) return 0;
    if (!__builtin_mul_overflow(num, unit->ms, &ms) && ms % den == 0 && ms / den > 0) {
        format_duration(dur, sizeof dur, ms / den, 0);
        sluice__errf(ps->err, ps->errlen, "at %zu: %s %s: durations are integers; write %s", a, field,
                     quote(q, ps, a, b), dur);
    } else {
        sluice__errf(ps->err, ps->errlen,
                     "at %zu: %s %s: durations are integers (of ms, s, m, h or d; 1ms is the least)", a,
                     field, quote(q, ps, a, b));
    }
    return SLUICE_EINVAL;
}

/* field=s[a..b) (not empty): [COUNT]UNIT, a missing count meaning 1. */
static int parse_duration(const struct parser *ps, const char *field, size_t a, size_t b,
                          int64_t *ms) {
    char q[QUOTE_SIZE], qu[QUOTE_SIZE];
    size_t i = a;
    int64_t n = 1;
    int rc = fractional_duration(ps, field, a, b);
    if (rc != 0) return rc;
    while (i < b && is_digit(ps->s[i])) i++;
    if (i > a && scan_uint(ps, a, i, &n) != 0) {
        sluice__errf(ps->err, ps->errlen, "at %zu: %s %s is too large", a, field, quote(q, ps, a, b));
        return SLUICE_EINVAL;
    }
    const struct unit *unit = unit_of(ps, i, b);
    if (unit == NULL) {
        if (i == b)
            sluice__errf(ps->err, ps->errlen, "at %zu: %s %s needs a unit (ms, s, m, h or d)", a,
                         field, quote(q, ps, a, b));
        else if (i > a)
            sluice__errf(ps->err, ps->errlen,
                         "at %zu: %s %s has an unknown unit %s (expected ms, s, m, h or d)", a, field,
                         quote(q, ps, a, b), quote(qu, ps, i, b));
        else
            sluice__errf(ps->err, ps->errlen, "at %zu: %s %s is not a duration (" DURATION_EXAMPLES ")",
                         a, field, quote(q, ps, a, b));
        return SLUICE_EINVAL;
    }
    if (__builtin_mul_overflow(n, unit->ms, ms)) {
        sluice__errf(ps->err, ps->errlen, "at %zu: %s %s is longer than 30 days", a, field,
                     quote(q, ps, a, b));
        return SLUICE_EINVAL;
    }
    return 0;
}

/* rate=s[a..b) (not empty): COUNT/DURATION. *period_pos: where DURATION is. */
static int parse_rate(const struct parser *ps, size_t a, size_t b, int64_t *rate, int64_t *period_ms,
                      size_t *period_pos) {
    char q[QUOTE_SIZE];
    const char *slash = memchr(ps->s + a, '/', b - a);
    if (slash == NULL) {
        int64_t n;
        if (scan_uint(ps, a, b, &n) == 0)
            sluice__errf(ps->err, ps->errlen, "at %zu: rate %s needs a period, as in %" PRId64 "/s", a,
                         quote(q, ps, a, b), n);
        else
            sluice__errf(ps->err, ps->errlen, "at %zu: rate %s is not a rate (as in 100/s or 5/15m)",
                         a, quote(q, ps, a, b));
        return SLUICE_EINVAL;
    }
    size_t s = (size_t)(slash - ps->s);
    if (s == a) {
        sluice__errf(ps->err, ps->errlen, "at %zu: rate %s has no count before '/'", a,
                     quote(q, ps, a, b));
        return SLUICE_EINVAL;
    }
    *period_pos = s + 1;
    if (s + 1 == b) {
        sluice__errf(ps->err, ps->errlen, "at %zu: rate %s has no period after '/'", s + 1,
                     quote(q, ps, a, b));
        return SLUICE_EINVAL;
    }
    int64_t num, den, g;
    if (scan_decimal(ps, a, s, &num, &den) == 0 && num > 0 &&
        parse_duration(ps, "rate period", s + 1, b, period_ms) == 0 && (g = gcd64(num, den)) > 0 &&
        *period_ms <= INT64_MAX / (den / g)) {
        /* num/den per P is num/g per (den/g)*P, the least period that
         * makes the count whole: 2.5/s is 5/2s */
        char dur[32];
        format_duration(dur, sizeof dur, *period_ms * (den / g), 1);
        sluice__errf(ps->err, ps->errlen, "at %zu: rate %s: counts are integers; write %" PRId64 "/%s", a,
                     quote(q, ps, a, b), num / g, dur);
        return SLUICE_EINVAL;
    }
    int rc = parse_count(ps, "rate", a, s, rate);
    if (rc != 0) return rc;
    return parse_duration(ps, "rate period", s + 1, b, period_ms);
}

/* Parses the configuration in text[begin..end); positions in messages are
 * offsets into text. Used by sluice_config_parse and policy.c. */
int sluice__config_parse_span(const char *text, size_t begin, size_t end, sluice_config *out,
                              char *err, size_t errlen) {
    const struct parser ps_ = {text, end, err, errlen}, *ps = &ps_;
    char q[QUOTE_SIZE];
    size_t i = skip_space(ps, begin), j;

    if (i == end) {
        sluice__errf(err, errlen, "at %zu: expected an algorithm name (" ALGO_LIST ")", i);
        return SLUICE_EINVAL;
    }
    j = token_end(ps, i);
    const struct form *f = NULL;
    for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++)
        if (span_is(ps, i, j, forms[k].name)) f = &forms[k];
    if (f == NULL) {
        const char *names[sizeof forms / sizeof forms[0]];
        for (size_t k = 0; k < sizeof forms / sizeof forms[0]; k++) names[k] = forms[k].name;
        const char *near = nearest(ps, i, j, names, sizeof forms / sizeof forms[0]);
        if (near)
            sluice__errf(err, errlen, "at %zu: unknown algorithm %s: did you mean \"%s\"? (expected " ALGO_LIST ")",
                         i, quote(q, ps, i, j), near);
        else
            sluice__errf(err, errlen, "at %zu: unknown algorithm %s (expected " ALGO_LIST ")", i, quote(q, ps, i, j));
        return SLUICE_EINVAL;
    }

    int bucket = is_bucket(f->algorithm);
    const char *pname[2] = {f->limit_name, bucket ? "rate" : "window"};
    int seen[2] = {0, 0};
    size_t seen_at[2] = {0, 0};
    int64_t limit = 0, rate = 0, period_ms = 0;
    size_t limit_pos = 0, rate_pos = 0, period_pos = 0;

    for (;;) {
        i = skip_space(ps, j);
        if (i == end) break;
        j = token_end(ps, i);
        const char *eq = memchr(text + i, '=', j - i);
        if (eq == NULL) {
            sluice__errf(err, errlen, "at %zu: expected NAME=VALUE, got %s", i, quote(q, ps, i, j));
            return SLUICE_EINVAL;
        }
        size_t e = (size_t)(eq - text), a = e + 1;
        int k = span_is(ps, i, e, pname[0]) ? 0 : span_is(ps, i, e, pname[1]) ? 1 : -1;
        if (k < 0) {
            const char *near = nearest(ps, i, e, pname, 2);
            if (near)
                sluice__errf(err, errlen, "at %zu: unknown parameter %s: did you mean \"%s\"? (%s takes %s)", i,
                             quote(q, ps, i, e), near, f->name, f->usage);
            else
                sluice__errf(err, errlen, "at %zu: unknown parameter %s (%s takes %s)", i, quote(q, ps, i, e),
                             f->name, f->usage);
            return SLUICE_EINVAL;
        }
        if (seen[k]) {
            sluice__errf(err, errlen, "at %zu: %s given twice (first at %zu)", i, pname[k], seen_at[k]);
            return SLUICE_EINVAL;
        }
        seen[k] = 1;
        seen_at[k] = i;
        if (a == j) {
            sluice__errf(err, errlen, "at %zu: %s has no value", a, pname[k]);
            return SLUICE_EINVAL;
        }
        int rc;
        if (k == 0) {
            limit_pos = a;
            rc = parse_count(ps, pname[0], a, j, &limit);
        } else if (bucket) {
            rate_pos = a;
            rc = parse_rate(ps, a, j, &rate, &period_ms, &period_pos);
        } else {
            period_pos = a;
            rc = parse_duration(ps, "window", a, j, &period_ms);
        }
        if (rc != 0) return rc;
    }
    for (int k = 0; k < 2; k++) {
        if (!seen[k]) {
            sluice__errf(err, errlen, "at %zu: missing parameter %s (%s takes %s)", end, pname[k],
                         f->name, f->usage);
            return SLUICE_EINVAL;
        }
    }

    sluice_config c = {f->algorithm, limit, rate, period_ms};
    enum bad_field bad;
    char msg[256];
    if (check(&c, f->limit_name, &bad, msg, sizeof msg) != 0) {
        size_t pos = bad == BAD_LIMIT ? limit_pos : bad == BAD_RATE ? rate_pos : period_pos;
        sluice__errf(err, errlen, "at %zu: %s", pos, msg);
        return SLUICE_EINVAL;
    }
    *out = c;
    return 0;
}

int sluice_config_parse(const char *text, sluice_config *out, char *err, size_t errlen) {
    if (text == NULL || out == NULL) {
        sluice__errf(err, errlen, "%s is NULL", text == NULL ? "text" : "out");
        return SLUICE_EINVAL;
    }
    return sluice__config_parse_span(text, 0, strlen(text), out, err, errlen);
}
