/* sluice.h: the whole public API of sluice, an exact rate limiter for C11.
 *
 * A rate limiter answers "may this request of cost n proceed now?" with a
 * decision: allowed (and what is left) or denied (and exactly how long to wait).
 *
 * Conventions, everywhere below:
 *  - Functions return int: 0 (SLUICE_OK) on success, a negative SLUICE_E* code
 *    on failure; results come back through OUT parameters. A denial is an
 *    answer, not an error: sluice_acquire() returns 0 and fills the decision.
 *  - A failed call changes nothing and leaves OUT parameters unspecified unless
 *    stated otherwise.
 *  - Time is an int64_t count of milliseconds ("_ms") read from a clock.
 *    Accepted clock readings lie in [SLUICE_TIME_MIN_MS, SLUICE_TIME_MAX_MS].
 *  - Objects are NOT thread-safe except where stated next to them.
 *  - The library never prints and never reads the environment.
 */
#ifndef SLUICE_H
#define SLUICE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(SLUICE_STATIC)
#  define SLUICE_EXTERN
#elif defined(_WIN32)
#  ifdef SLUICE_BUILDING
#    define SLUICE_EXTERN __declspec(dllexport)
#  else
#    define SLUICE_EXTERN __declspec(dllimport)
#  endif
#else
#  define SLUICE_EXTERN __attribute__((visibility("default")))
#endif

#define SLUICE_VERSION_MAJOR 0
#define SLUICE_VERSION_MINOR 1
#define SLUICE_VERSION_PATCH 0
#define SLUICE_VERSION_STRING "0.1.0"

/* ------------------------------------------------------------------------ */
/* Errors                                                                    */
/* ------------------------------------------------------------------------ */

/* XX(NAME, value, message): the one list the enum, sluice_strerror() and
 * sluice_err_name() are generated from. */
#define SLUICE_ERRNO_MAP(XX)                                                   \
    XX(OK, 0, "success")                                                       \
    XX(EINVAL, -1, "invalid argument")                                         \
    XX(ECOST, -2, "cost outside what the limiter can ever admit")              \
    XX(ENOMEM, -3, "out of memory")                                            \
    XX(EFULL, -4, "store is full")                                             \
    XX(ESTORE, -5, "store failure")                                            \
    XX(ETIMEDOUT, -6, "timed out")

typedef enum {
#define SLUICE__ERR_ENUM(name, value, msg) SLUICE_##name = (value),
    SLUICE_ERRNO_MAP(SLUICE__ERR_ENUM)
#undef SLUICE__ERR_ENUM
} sluice_errno;

/* A static English message for code ("unknown error" for unknown codes).
 * Thread-safe. */
SLUICE_EXTERN const char *sluice_strerror(int code);
/* The code's name, e.g. "SLUICE_ECOST" ("SLUICE_UNKNOWN" when unknown).
 * Thread-safe. */
SLUICE_EXTERN const char *sluice_err_name(int code);
/* The library's version string, e.g. "0.1.0". Thread-safe. */
SLUICE_EXTERN const char *sluice_version(void);

/* ------------------------------------------------------------------------ */
/* Accepted ranges                                                           */
/* ------------------------------------------------------------------------ */

/* A configuration outside these ranges is rejected (SLUICE_EINVAL), never
 * wrapped. Within them no arithmetic of sluice overflows. */
#define SLUICE_LIMIT_MAX 1000000000LL         /* limit, capacity: 1 .. 10^9   */
#define SLUICE_PERIOD_MAX_MS 2592000000LL     /* windows, periods: 1 ms .. 30 d */
#define SLUICE_RATE_MAX 1000000000000LL       /* rate numerator R: 1 .. 10^12 */
#define SLUICE_RATE_MAX_PER_S 1000000000LL    /* R per P: at most 10^9 per s   */
/* The slowest rate is 1 per SLUICE_PERIOD_MAX_MS (one per 30 days). */

/* Clock readings must lie in [-2^61, 2^61] ms (about +-73 million years);
 * a reading outside is SLUICE_EINVAL. */
#define SLUICE_TIME_MAX_MS (INT64_C(1) << 61)
#define SLUICE_TIME_MIN_MS (-(INT64_C(1) << 61))

/* ------------------------------------------------------------------------ */
/* Time                                                                      */
/* ------------------------------------------------------------------------ */

/* A clock: a source of millisecond readings, and a way to wait.
 * All clocks are thread-safe: any thread may read, advance or set them. */
typedef struct sluice_clock sluice_clock;

/* The process-wide monotonic clock (the default). It reads
 * CLOCK_MONOTONIC_COARSE when the kernel reports a resolution of 1 ms or
 * finer for it, else CLOCK_MONOTONIC: the cheapest honest millisecond.
 * Never NULL; never free it (sluice_clock_free ignores it). */
SLUICE_EXTERN const sluice_clock *sluice_clock_monotonic(void);
/* A manual clock starting at start_ms, for tests and simulations: it moves
 * only when told to, and "sleeping" on it advances it by the sleep's length.
 * Returns NULL when out of memory or when start_ms is outside the accepted
 * time range. */
SLUICE_EXTERN sluice_clock *sluice_clock_manual_new(int64_t start_ms);
/* Moves a manual clock by ms (negative moves it back). No-op on other clocks.
 * The reading saturates at the accepted time range. */
SLUICE_EXTERN void sluice_clock_manual_advance(sluice_clock *c, int64_t ms);
/* Sets a manual clock; it may go backwards. No-op on other clocks. */
SLUICE_EXTERN void sluice_clock_manual_set(sluice_clock *c, int64_t now_ms);
/* A clock from callbacks: now_ms(user) gives readings; sleep_ms(user, ms)
 * waits (NULL: a real sleep of the calling thread). The callbacks must be
 * thread-safe if the clock is used from several threads. NULL on bad
 * arguments or out of memory. */
SLUICE_EXTERN sluice_clock *sluice_clock_callback_new(int64_t (*now_ms)(void *user),
                                                      void (*sleep_ms)(void *user, int64_t ms),
                                                      void *user);
/* The clock's reading, in ms. */
SLUICE_EXTERN int64_t sluice_clock_now_ms(const sluice_clock *c);
/* Waits ms milliseconds of this clock (advances a manual clock instead). */
SLUICE_EXTERN void sluice_clock_sleep_ms(const sluice_clock *c, int64_t ms);
/* Frees a clock made by _manual_new or _callback_new. NULL and the monotonic
 * clock are no-ops. Not while a limiter still uses it. */
SLUICE_EXTERN void sluice_clock_free(sluice_clock *c);

/* ------------------------------------------------------------------------ */
/* Configuration as data                                                     */
/* ------------------------------------------------------------------------ */

typedef enum {
    SLUICE_TOKEN_BUCKET = 1, /* limit = capacity C, rate R per period_ms P   */
    SLUICE_SLIDING_WINDOW,   /* limit L per window period_ms W; rate unused  */
    SLUICE_FIXED_WINDOW,     /* limit L per window period_ms W; rate unused  */
    SLUICE_LEAKY_BUCKET,     /* limit = queue capacity C, drains R per P ms  */
    SLUICE_SLIDING_LOG       /* limit L per window period_ms W; rate unused  */
} sluice_algorithm;

/* Plain data; copy it freely. For the window algorithms rate is 0 and
 * period_ms is the window. */
typedef struct {
    sluice_algorithm algorithm;
    int64_t limit, rate, period_ms;
} sluice_config;

/* Constructors: they only fill the struct (no validation). */
SLUICE_EXTERN sluice_config sluice_token_bucket(int64_t capacity, int64_t rate, int64_t period_ms);
SLUICE_EXTERN sluice_config sluice_sliding_window(int64_t limit, int64_t window_ms);
SLUICE_EXTERN sluice_config sluice_fixed_window(int64_t limit, int64_t window_ms);
SLUICE_EXTERN sluice_config sluice_leaky_bucket(int64_t capacity, int64_t rate, int64_t period_ms);
SLUICE_EXTERN sluice_config sluice_sliding_log(int64_t limit, int64_t window_ms);

/* Checks c against the accepted ranges above. Returns 0, or SLUICE_EINVAL
 * with a message naming the bad value and why in err (when err is not NULL;
 * always NUL-terminated, truncated to errlen). Thread-safe. */
SLUICE_EXTERN int sluice_config_validate(const sluice_config *c, char *err, size_t errlen);

/* Parses the text form, as people write limits:
 *   token-bucket capacity=3 rate=1/s        gcra rate=100/s burst=20
 *   sliding-window limit=10 window=1s       fixed-window limit=1000 window=1h
 *   leaky-bucket capacity=5 rate=10/s       sliding-log limit=10 window=1m
 * Durations are an integer and a unit (ms, s, m, h, d); a bare "s" means 1 s.
 * A rate is N/DURATION ("5/15m"). "gcra rate=R burst=B" is the token bucket
 * of capacity B. Parameters may come in any order, once each.
 * Returns 0 and a valid *out, or SLUICE_EINVAL with err saying what is wrong
 * and at which byte position ("at 14: ..."); *out is untouched on error.
 * Thread-safe. */
SLUICE_EXTERN int sluice_config_parse(const char *text, sluice_config *out, char *err, size_t errlen);
/* Writes the canonical text of c into buf (always NUL-terminated when
 * len > 0). Returns the length of the full text (like snprintf; a result >=
 * len means it was truncated), or SLUICE_EINVAL for an invalid c.
 * sluice_config_parse() reads it back to an equal config. Thread-safe. */
SLUICE_EXTERN int sluice_config_format(const sluice_config *c, char *buf, size_t len);

/* ------------------------------------------------------------------------ */
/* Decisions                                                                 */
/* ------------------------------------------------------------------------ */

/* One answer. All durations are exact, in ms, relative to the reading the
 * decision was made at.
 *  allowed        whether the request was admitted (and consumed).
 *  remaining      requests of cost 1 that would be admitted right now, after
 *                 this decision; on a denial, what is available now.
 *  retry_after_ms 0 when allowed; when denied, the exact earliest wait after
 *                 which this same request is admitted if nothing else
 *                 happens (waiting one ms less is still denied).
 *  reset_ms       how long until the limiter is back to its fresh state.
 *  delay_ms       leaky bucket only: how long the admitted request should
 *                 wait before it proceeds; 0 otherwise and on denials.
 *  limit          the limit (capacity) of the configuration in force.
 *  part           index in the policy of the configuration that set limit
 *                 (the one with least remaining, the first on a tie).
 *  enforced       true, except when a remote store failed and its options
 *                 said to admit anyway (fail-open). */
typedef struct {
    bool allowed;
    bool enforced;
    int32_t part;
    int64_t remaining, retry_after_ms, reset_ms, delay_ms, limit;
} sluice_decision;

/* ------------------------------------------------------------------------ */
/* Policies: a name and 1..SLUICE_POLICY_MAX_PARTS configurations            */
/* ------------------------------------------------------------------------ */

#define SLUICE_POLICY_MAX_PARTS 8
#define SLUICE_POLICY_NAME_MAX 64 /* bytes, excluding the NUL */

/* A policy: every part must admit a request for it to be admitted.
 * Immutable once made: share it between threads and limiters freely. */
typedef struct sluice_policy sluice_policy;

/* Makes a policy from n_parts (1..8) valid configurations. name: 1..64 bytes
 * of letters, digits and "-_.:" (it appears in HTTP headers). Errors:
 * SLUICE_EINVAL (bad name, count or configuration), SLUICE_ENOMEM. */
SLUICE_EXTERN int sluice_policy_new(const char *name, const sluice_config *parts, size_t n_parts,
                                    sluice_policy **out);
/* Parses "config; config; ..." (see sluice_config_parse). Errors as
 * sluice_config_parse, with the position counted from the start of text. */
SLUICE_EXTERN int sluice_policy_parse(const char *name, const char *text, sluice_policy **out,
                                      char *err, size_t errlen);
/* Writes the policy's text form ("a; b"), as sluice_config_format. */
SLUICE_EXTERN int sluice_policy_format(const sluice_policy *p, char *buf, size_t len);
SLUICE_EXTERN const char *sluice_policy_name(const sluice_policy *p);
SLUICE_EXTERN size_t sluice_policy_n_parts(const sluice_policy *p);
/* The i-th configuration, or NULL when i is out of range. */
SLUICE_EXTERN const sluice_config *sluice_policy_part(const sluice_policy *p, size_t i);
/* NULL is a no-op. Not while a limiter or store still uses p. */
SLUICE_EXTERN void sluice_policy_free(sluice_policy *p);

/* ------------------------------------------------------------------------ */
/* One limiter                                                               */
/* ------------------------------------------------------------------------ */

/* A limiter: one policy's state. Thread-safe: any number of threads may call
 * sluice_acquire*() on one limiter at once; each decision is atomic.
 *
 * How each kind stays atomic:
 *  - one-part token bucket and leaky bucket: lock-free. The state is one
 *    64-bit word (a GCRA theoretical arrival time in units of 1/r ms, where
 *    r/p = R/P in lowest terms) updated by compare-and-swap. A reading so far
 *    from the limiter's creation that the word would overflow moves the
 *    limiter, once and for good, to a 128-bit state under a lock.
 *  - fixed window, sliding window, sliding log, and every composite policy:
 *    a small per-limiter lock (uncontended: one atomic exchange and a store),
 *    chosen over a 128-bit compare-and-swap by measurement (bench/).
 *
 * A clock reading earlier than one already seen never creates capacity:
 * buckets see the backlog grow, windows stay in the newest window they
 * counted in, the log treats the reading as its newest entry's time. */
typedef struct sluice_limiter sluice_limiter;

/* A one-part limiter named "default". clock NULL: the monotonic clock.
 * Errors: SLUICE_EINVAL (invalid c), SLUICE_ENOMEM. */
SLUICE_EXTERN int sluice_limiter_new(const sluice_config *c, const sluice_clock *clock,
                                     sluice_limiter **out);
/* A limiter for a policy (copied: p may be freed afterwards). */
SLUICE_EXTERN int sluice_limiter_new_policy(const sluice_policy *p, const sluice_clock *clock,
                                            sluice_limiter **out);
/* Decides a request of cost at the clock's reading. Returns 0 with *out
 * filled (allowed or denied), SLUICE_ECOST when cost < 1 or cost exceeds a
 * part's limit (what it could ever admit), SLUICE_EINVAL for NULL arguments
 * or a reading outside the accepted range, SLUICE_ENOMEM when a sliding log
 * cannot grow. Errors and denials change no state. Thread-safe. */
SLUICE_EXTERN int sluice_acquire(sluice_limiter *l, int64_t cost, sluice_decision *out);
/* The same at the caller's reading now_ms of the limiter's clock: an event
 * loop reads the clock once per turn and passes it to every decision. */
SLUICE_EXTERN int sluice_acquire_at(sluice_limiter *l, int64_t cost, int64_t now_ms,
                                    sluice_decision *out);
/* Waits until the request is admitted, or returns SLUICE_ETIMEDOUT having
 * consumed nothing. It never waits past timeout_ms (0: no wait at all), and
 * returns SLUICE_ETIMEDOUT at once when the wait the limiter asks for is
 * longer than what is left of the timeout. *out holds the last decision
 * (allowed, or the denial that made it give up). Sleeps on the limiter's
 * clock, so a manual clock makes it instant. Other errors as sluice_acquire.
 * Thread-safe. */
SLUICE_EXTERN int sluice_acquire_wait(sluice_limiter *l, int64_t cost, int64_t timeout_ms,
                                      sluice_decision *out);
/* The limiter's policy (owned by the limiter) and clock. Thread-safe. */
SLUICE_EXTERN const sluice_policy *sluice_limiter_policy(const sluice_limiter *l);
SLUICE_EXTERN const sluice_clock *sluice_limiter_clock(const sluice_limiter *l);
/* NULL is a no-op. No call may be in progress on l. */
SLUICE_EXTERN void sluice_limiter_free(sluice_limiter *l);

/* ------------------------------------------------------------------------ */
/* HTTP headers                                                              */
/* ------------------------------------------------------------------------ */

/* Writes the IETF httpapi rate-limit header fields for a decision made under
 * policy p, as lines "Name: value\r\n":
 *   RateLimit-Policy: "NAME";q=QUOTA;w=WINDOW_S[, ... one item per part]
 *   RateLimit: "NAME";r=REMAINING;t=RESET_S     (the part that set the limit)
 *   Retry-After: SECONDS                         (denials only)
 * Seconds are rounded up, so no client retries before the real retry time.
 * A composite policy names its parts "NAME", "NAME.1", "NAME.2", ...
 * Returns the number of bytes written (excluding the terminating NUL always
 * written), SLUICE_ENOMEM when len is too small (buf then holds ""), or
 * SLUICE_EINVAL for NULL arguments. Thread-safe. */
SLUICE_EXTERN int sluice_headers_format(const sluice_policy *p, const sluice_decision *d, char *buf,
                                        size_t len);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_H */
