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
 *  - The library never prints, and reads one environment variable only:
 *    SLUICE_CLOCK (see sluice_clock_monotonic).
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
    XX(ETIMEDOUT, -6, "timed out")                                             \
    XX(ECANCELED, -7, "canceled")

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

/* The process-wide monotonic clock (the default): CLOCK_MONOTONIC's
 * milliseconds from the cheapest honest source, chosen once per process at
 * its first reading (sluice_clock_source() says which):
 *  - "tsc": the CPU's time-stamp counter (x86-64), when the kernel itself
 *    keeps time with it (/sys/devices/system/clocksource/clocksource0/
 *    current_clocksource is "tsc") and the CPU says it is invariant (CPUID
 *    0x80000007 EDX bit 8, or "constant_tsc" and "nonstop_tsc" among the
 *    flags of /proc/cpuinfo). Ticks become ms at a rate measured against
 *    CLOCK_MONOTONIC, re-anchored on it every 50 ms by whichever reading
 *    comes due (no thread of its own): a reading is CLOCK_MONOTONIC's ms,
 *    off by one only within 75 us (a few us in practice) of a ms boundary.
 *    The first 20 ms of a process, while the rate is measured, read
 *    CLOCK_MONOTONIC itself. Readings never go backwards, on any thread.
 *  - "CLOCK_MONOTONIC_COARSE", when the kernel reports a resolution of
 *    1 ms or finer for it (HZ=1000);
 *  - else "CLOCK_MONOTONIC".
 * The environment variable SLUICE_CLOCK=monotonic, read at that first
 * reading, turns the TSC off: the clock then reads one of the last two
 * (any other value, or none, leaves the choice as above).
 * Never NULL; never free it (sluice_clock_free ignores it). */
SLUICE_EXTERN const sluice_clock *sluice_clock_monotonic(void);
/* The source sluice_clock_monotonic() reads in this process: "tsc",
 * "CLOCK_MONOTONIC_COARSE" or "CLOCK_MONOTONIC" (a static string). Makes
 * the choice if no reading has yet. Thread-safe. */
SLUICE_EXTERN const char *sluice_clock_source(void);
/* A manual clock starting at start_ms, for tests and simulations: it moves
 * only when told to, and "sleeping" on it advances it by the sleep's length.
 * Returns NULL when out of memory or when start_ms is outside the accepted
 * time range. */
SLUICE_EXTERN sluice_clock *sluice_clock_manual_new(int64_t start_ms);
/* Moves a manual clock by ms (negative moves it back). No-op on other clocks.
 * The reading saturates at the accepted time range. */
SLUICE_EXTERN void sluice_clock_manual_advance(sluice_clock *c, int64_t ms);
/* Sets a manual clock; it may go backwards. No-op on other clocks. A
 * reading outside the accepted time range is clamped to it. */
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
    SLUICE_SLIDING_WINDOW,   /* limit L per window period_ms W; rate 0       */
    SLUICE_FIXED_WINDOW,     /* limit L per window period_ms W; rate 0       */
    SLUICE_LEAKY_BUCKET,     /* limit = queue capacity C, drains R per P ms  */
    SLUICE_SLIDING_LOG       /* limit L per window period_ms W; rate 0       */
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
 * Durations are an integer and a unit (ms, s, m, h, d); a unit alone means
 * one of it ("rate=10/s", "window=m").
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
 *  part_reset_ms  how long until that part alone is back to its fresh
 *                 state (reset_ms for a one-part policy; at most reset_ms).
 *  enforced       true, except when a remote store could not decide: with
 *                 on_error=allow (its default) the request is admitted
 *                 without being counted, with on_error=deny it is denied
 *                 with retry_after_ms 100; every other field is then 0.
 *                 A decision of the local limit (local) is enforced.
 *  local          true when a remote store could not decide and its local
 *                 limit did (on_error=local): an in-process limit of this
 *                 host's share of the policy (see redis: local_share); every
 *                 field is then the local limit's, exactly as a memory:
 *                 store under the scaled policy would answer, except that a
 *                 request costing more than the share's limit is denied
 *                 with retry_after_ms at least 100, its other fields a
 *                 peek's at cost 1 (remaining: what is available now).
 *                 false whenever the server decided.
 *  shadow_denied  true when a shadow part of the policy would have denied
 *                 the request (it was decided, and counted nothing). The
 *                 other fields come from the enforced parts alone; a
 *                 policy of shadow parts only admits every request, with
 *                 remaining SLUICE_LIMIT_MAX and limit, part, retry, reset
 *                 and delay 0.
 * A peek, or the decision after a refund or reset, is filled alike (see
 * sluice_peek). */
typedef struct {
    bool allowed;
    bool enforced;
    bool shadow_denied;
    bool local;
    int32_t part;
    int64_t remaining, retry_after_ms, reset_ms, delay_ms, limit;
    int64_t part_reset_ms;
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
/* The same, with shadow parts: shadow[i] true makes part i a shadow part
 * (shadow may be NULL: none). A shadow part is decided as if enforced, and
 * counts what it would itself admit of an admitted request, but never
 * denies: a decision it would have denied says so in shadow_denied. A
 * trial of a limit in production, beside the one enforced. */
SLUICE_EXTERN int sluice_policy_new_shadow(const char *name, const sluice_config *parts, const bool *shadow,
                                           size_t n_parts, sluice_policy **out);
/* Parses "config; config; ..." (see sluice_config_parse); a part that
 * starts with "shadow" is a shadow part ("token-bucket capacity=10
 * rate=10/s; shadow fixed-window limit=100 window=1m"). Errors as
 * sluice_config_parse, with the position counted from the start of text;
 * also SLUICE_EINVAL for a bad name (the message names the byte) and
 * SLUICE_ENOMEM. */
SLUICE_EXTERN int sluice_policy_parse(const char *name, const char *text, sluice_policy **out,
                                      char *err, size_t errlen);
/* Writes the policy's text form ("a; b"), as sluice_config_format. */
SLUICE_EXTERN int sluice_policy_format(const sluice_policy *p, char *buf, size_t len);
SLUICE_EXTERN const char *sluice_policy_name(const sluice_policy *p);
SLUICE_EXTERN size_t sluice_policy_n_parts(const sluice_policy *p);
/* The largest cost p can ever admit: the least limit of its enforced parts
 * (SLUICE_LIMIT_MAX when every part is a shadow part; 0 for NULL). A cost
 * above it is SLUICE_ECOST; a shadow part of a lower limit would deny it. */
SLUICE_EXTERN int64_t sluice_policy_max_cost(const sluice_policy *p);
/* The i-th configuration, or NULL when i is out of range. */
SLUICE_EXTERN const sluice_config *sluice_policy_part(const sluice_policy *p, size_t i);
/* Whether the i-th part is a shadow part (false when i is out of range). */
SLUICE_EXTERN bool sluice_policy_part_shadow(const sluice_policy *p, size_t i);
/* Whether decisions under p can tell an admitted request to wait
 * (delay_ms > 0): a part shapes traffic (a leaky bucket). false for NULL. */
SLUICE_EXTERN bool sluice_policy_delays(const sluice_policy *p);
/* Checks a policy name as sluice_policy_new does: 0, or SLUICE_EINVAL with
 * a message in err (when err is not NULL; NUL-terminated). Thread-safe. */
SLUICE_EXTERN int sluice_policy_name_check(const char *name, char *err, size_t errlen);
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
 * Errors: SLUICE_EINVAL (invalid c, or the clock's reading now is outside
 * the accepted time range), SLUICE_ENOMEM. */
SLUICE_EXTERN int sluice_limiter_new(const sluice_config *c, const sluice_clock *clock,
                                     sluice_limiter **out);
/* A limiter for a policy (copied: p may be freed afterwards). Errors:
 * SLUICE_EINVAL (NULL p or out, or a clock reading as above), SLUICE_ENOMEM. */
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
 * clock, so a manual clock makes it instant. Other errors as sluice_acquire,
 * and SLUICE_EINVAL for timeout_ms < 0. Thread-safe. */
SLUICE_EXTERN int sluice_acquire_wait(sluice_limiter *l, int64_t cost, int64_t timeout_ms,
                                      sluice_decision *out);

/* Operating a limit (docs/semantics.md, "Peek, refund, reset"). Each is
 * atomic, as a decision is, and thread-safe.
 *
 * The decision sluice_acquire would give for cost at the clock's reading
 * (or now_ms), every field, with nothing consumed and nothing changed. A
 * peek never waits on memory. Errors as sluice_acquire. */
SLUICE_EXTERN int sluice_peek(sluice_limiter *l, int64_t cost, sluice_decision *out);
SLUICE_EXTERN int sluice_peek_at(sluice_limiter *l, int64_t cost, int64_t now_ms, sluice_decision *out);
/* Gives cost back to every part, as far as it still counts, never beyond a
 * fresh state: a bucket's TAT goes back by cost (not below the reading), a
 * fixed window's count of the reading's window down by cost (not below 0),
 * a sliding window's counts (rolled to the reading's window) from the
 * current one first, a log's newest entries still in the window, newest
 * first. So a refund of an admission at the same reading undoes it
 * exactly. out (may be NULL) gets the decision a request of cost 1 would
 * get right after. Errors as sluice_acquire. */
SLUICE_EXTERN int sluice_refund(sluice_limiter *l, int64_t cost, sluice_decision *out);
SLUICE_EXTERN int sluice_refund_at(sluice_limiter *l, int64_t cost, int64_t now_ms, sluice_decision *out);
/* Makes every part fresh. out (may be NULL) as for refund, at the clock's
 * reading. Errors: SLUICE_EINVAL for NULL l. */
SLUICE_EXTERN int sluice_reset(sluice_limiter *l, sluice_decision *out);
/* The limiter's policy (owned by the limiter) and clock. Thread-safe. */
SLUICE_EXTERN const sluice_policy *sluice_limiter_policy(const sluice_limiter *l);
SLUICE_EXTERN const sluice_clock *sluice_limiter_clock(const sluice_limiter *l);
/* NULL is a no-op. No call may be in progress on l. */
SLUICE_EXTERN void sluice_limiter_free(sluice_limiter *l);

/* ------------------------------------------------------------------------ */
/* Stores: per-key state                                                     */
/* ------------------------------------------------------------------------ */

/* A store holds one state per (policy, key) pair, so one store serves many
 * policies (tiers, endpoints) and the same policy runs on any store. It is
 * chosen by URL, not by code:
 *   "memory:"            in-process (the default), e.g.
 *                        "memory:?max_keys=100000&on_full=refuse"
 *   "shm:PATH"           a shared-memory file: the processes of one host
 *                        share the limits (see below)
 *   "redis://HOST:PORT[/DB]"                     one Redis server, and
 *   "redis-cluster://HOST:PORT[,HOST:PORT...]"   Redis Cluster: many hosts
 *                        share the limits. The Redis store is libsluice-redis
 *                        (the core never links hiredis): link it (pkg-config
 *                        sluice-redis, CMake sluice::sluice_redis), or just
 *                        have it installed: the core loads
 *                        libsluice-redis.so.0 when a Redis URL is opened,
 *                        from the directory libsluice.so was loaded from,
 *                        else by the loader's search (the open's message
 *                        says what was tried when neither works).
 * URL query parameters override the options struct. Unknown or malformed
 * parameters are SLUICE_EINVAL, with a message naming them.
 *   memory:   max_keys=N, on_full=evict|refuse
 *   shm:      max_keys=N (default 100,000), key_bytes=N (longest key,
 *             default 128), state_bytes=N (state per key kept in its
 *             slot, default 256), overflow_bytes=N (beside the slots, for
 *             states larger than state_bytes, such as sliding logs;
 *             default 64 MiB, 0 none, at most 2^40): fixed when the file
 *             is made (a later open that asks for other values is
 *             SLUICE_EINVAL; one that names none takes the file's);
 *             on_full=evict|refuse: each open's own, for the new keys it
 *             adds. A policy whose state per key is larger than any block
 *             the overflow area holds is SLUICE_EINVAL, with the
 *             overflow_bytes that would hold it; a full overflow area is a
 *             full store (on_full). The file is opened without following
 *             a symbolic link, created 0600, and refused before anything
 *             is read or locked when it belongs to another user, is open
 *             to others, or is not a regular file; then refused unless it
 *             is an intact sluice store of this layout (only an empty
 *             file, or one whose set-up sluice itself began and did not
 *             finish, is set up anew: a file that is not a store is left
 *             as it is), or would be larger than its whole filesystem.
 *             One process at a time sets a file up or checks it; an open
 *             waits at most 2 s for that (then SLUICE_ETIMEDOUT). A key
 *             lives in one of two 16-slot buckets (max_keys <= 64: one
 *             bucket of max_keys slots); "full" is those two.
 *             Decisions on a key are lock-free: a process stopped or
 *             killed in the middle of one blocks no other (the next to
 *             meet its update finishes it); adding a key locks its two
 *             buckets, and a dead owner's lock is taken over. The file
 *             takes about 80 + key_bytes + 4 * state_bytes bytes per key
 *             of capacity, plus overflow_bytes, sparse: the pages every
 *             lookup reads (4 bytes a key of capacity, 75 KB of counters)
 *             are the filesystem's at once, a bucket's slots when its
 *             first key comes, an overflow block when a key takes it; a
 *             filesystem that has no pages left makes the new key
 *             SLUICE_ENOMEM (never a SIGBUS). Nothing in the file is
 *             trusted: a key whose state the file shows damaged (words
 *             that contradict each other or its policy) is SLUICE_ESTORE,
 *             naming the key, and never decided on; a damaged header is
 *             refused at open. Truncating the file while processes use it
 *             is not survivable: the kernel sends SIGBUS to a process that
 *             touches a page past the new end, which a library cannot
 *             catch for its caller. sluice itself never shrinks a file
 *             that may be in use; to start over, remove the file (those
 *             that have it open keep using the old one until they close
 *             it). A policy of one part, a bucket, a fixed window or a
 *             sliding window of limit below 65536, admits with one 16-byte
 *             compare-and-swap, about as fast as memory:; any other takes
 *             about five (make bench: bench_shm).
 *   redis:    timeout_ms=N (per command, default 100), connect_timeout_ms=N
 *             (200): see sluice_store_options for the bound they put on
 *             every call; on_error=allow|deny|error|local (allow; see
 *             sluice_on_error), local_share=1/N (on_error=local only: this
 *             host's share, N in 1..1000000; without it N is learned, below),
 *             clock=server|client
 *             (server: the script reads Redis's TIME, so hosts with skewed
 *             clocks agree; client: the store's clock, for tests and
 *             simulations; the default is client when the options ask for
 *             caller_clock), prefix=S (of every Redis key; "sluice:"),
 *             pool=N (connections per server, 8), ttl_grace_ms=N (added to
 *             every expiry; 60000 with clock=client, else 0: expiries run on
 *             the server's clock, so with clock=client a key's state lasts
 *             for its reset_ms plus this much real time, and a trace whose
 *             clock lags real time by more sees keys forgotten early),
 *             verify=0|1 (0: open only checks the URL and connects on first
 *             use; 1: open connects to every server it needs (a cluster's:
 *             every master, as CLUSTER SLOTS names them) and PINGs it, each
 *             within connect_timeout_ms + timeout_ms, and fails with
 *             SLUICE_ESTORE, naming the server, when one does not answer),
 *             deny_cache=N (entries of the cache of denials, 0..1000000,
 *             4096; 0 turns it off; 320 bytes an entry: see below)
 * The Redis store decides in one round trip (a server-side script, the same
 * exact arithmetic in Lua; a key it must convert from another configuration
 * of the policy's name that has sliding-log parts where this one has none
 * takes two, once) and gives every key an expiry equal to the time until
 * it is fresh again, shadow parts included. Lua's numbers are doubles: it refuses
 * (SLUICE_EINVAL) a policy whose arithmetic could pass 2^53 (a bucket's
 * tau = capacity * p, or a sliding window's limit times its window, above
 * 2^51, in the scaled units of docs/semantics.md), and client-clock
 * readings beyond +-2^50 ms.
 *
 * on_error=local: when the server cannot decide (down, a timeout, an error
 * reply such as refused writes), an in-process memory: store decides under
 * the same policy, each part scaled to this host's share 1/N: a limit or
 * capacity L becomes floor(L/N), and a rate R per P becomes R/N per P (when
 * N divides R), else R per N*P (the same rate), else floor(R/N) per P; a
 * share that would fall below 1 keeps 1. N is local_share's, or else the
 * number of store instances that used this server with the same prefix in
 * the last minute, which each store learns by itself: every 3 s at most,
 * commands sent in the same write as an ordinary decision (one round trip)
 * keep a sorted set, PREFIX{instances}, of instance ids and the wall-clock
 * ms they were last seen (it expires 2 minutes after the last; stats' keys
 * count it). N is remembered for when the server is gone; 1 before any is
 * learned. In a cluster the set lives on one node, and a store learns N
 * only from decisions that go to that node (batches, and denials the
 * cache of denials answers, do not carry it). The
 * first local decision of an outage starts the local states fresh; the
 * server's first decision after it drops them: decisions go back to the
 * server by themselves as soon as it answers (a down server is tried again
 * every 100 ms). Local decisions have local = true and enforced = true, are
 * counted in stats (local, failures, and allowed or denied), and
 * sluice_store_errmsg says why the server could not decide and the share
 * used. A peek, refund (capped at the share's limit) or reset the server
 * cannot make is made on the local limit alike (counted in failures only).
 *
 * Denials answered locally (Redis, deny_cache=N): after the server denies
 * a request for (policy, key) with retry_after_ms = X, requests of the
 * same cost for it on this store are denied by the store itself, with no
 * round trip, until X has passed on the store's clock, each with
 * retry_after_ms, reset_ms and part_reset_ms counting down (counted in
 * sluice_stats.cached_denials, and in denied). With clock=client this is
 * exact for a store that is alone: every field is what the server would
 * say at that reading. Other clients' traffic can only postpone the retry,
 * never bring it forward (the store then asks the server at X and is told
 * the new one); a refund or reset made through this store clears the
 * key's entry; one made through another host (or another host converting
 * the key to another configuration) is seen at the latest when the cached
 * retry runs out. With clock=server the store cannot read the server's
 * TIME without a round trip, so it keeps to what it can be sure of: a
 * cached denial counts on this host's monotonic clock from before the call
 * was sent (less 2 ms for the two clocks' whole milliseconds), so it ends
 * no later than the server's denial (while the server's clock does not run
 * faster or jump forward), and its waits may be shorter than the server's
 * by up to a round trip, never longer: a caller sleeping them asks again
 * no later than it would have. Not cached: keys above 64 bytes, a request
 * of another cost than the one denied, a denial that leaves cost 1 free
 * (some enforced part admits one), and a policy name of which the store
 * has met two configurations (a retune converts keys). The cache is a
 * fixed table (rounded up to whole sets of four; a new entry replaces the
 * one whose denial ends first), split in up to 64 stripes with a lock
 * each, so threads on different keys rarely meet.
 *
 * A store is thread-safe: any number of threads may call sluice_store_*()
 * on one store at once (except _close). Each decision is atomic for its key;
 * decisions on different keys do not wait on one another (the memory store
 * is split into independently locked shards).
 *
 * Keys are byte strings (NUL bytes allowed) of 1..SLUICE_KEY_MAX bytes.
 *
 * A store knows a policy by its name: a key keeps its usage when the
 * configuration of its policy's name changes (docs/semantics.md,
 * "Retune"). The first decision, peek or refund of a key under a changed
 * configuration converts its state: part i takes what was in use in old
 * part i (carried exactly where the algorithm and its period or window are
 * the same), capped at the new limit. A key never seen before starts
 * fresh; a new name starts every key fresh. A state is only ever read by
 * the algorithm and parameters that wrote or converted it (the shm store
 * keeps the text of the first 256 configurations it meets in the file, so
 * that any process can read a key kept by one it was not given; a key of
 * a configuration beyond those starts fresh under a changed one; a process
 * killed in the middle of converting a key leaves it fresh). Two processes
 * deciding with two configurations of one name at once (a rolling deploy)
 * convert a key at every switch between them: see "Retune".
 *
 * Time: a store's time never runs backwards: it is the highest reading at
 * which the store admitted a request (denials and errors leave it alone). A
 * reading below it is decided as that time, and the decision's
 * waits (retry_after_ms, reset_ms, delay_ms, when not 0) then count from the
 * reading given, so sleeping them on the caller's clock is exactly enough.
 * (A Redis store with clock=server, its default, decides at the server's
 * TIME instead: the reading given is only checked for range, and the waits
 * count from the decision.)
 * This is what lets a store forget a fresh key without changing any later
 * decision.
 *
 * Memory (memory:): at most max_keys keys are held (default 1,000,000). A key whose
 * state is equal to a fresh state is forgotten, losslessly, when room is
 * needed. When the keys' shard is full of keys that are not fresh,
 * on_full=evict (the default) evicts the least recently used one by the
 * CLOCK approximation (counted as forced), and on_full=refuse returns
 * SLUICE_EFULL for the new key and changes nothing. Keys already held are
 * always decided. */
#define SLUICE_KEY_MAX 512
#define SLUICE_MAX_KEYS_DEFAULT 1000000
#define SLUICE_MAX_KEYS_MAX 1000000000

typedef struct sluice_store sluice_store;

typedef enum { SLUICE_ON_FULL_EVICT = 0, SLUICE_ON_FULL_REFUSE = 1 } sluice_on_full;

/* What a remote store does when it cannot decide (server down, timeout):
 * admit without enforcing (the default: a limiter should not take the
 * service down with it), deny, return SLUICE_ESTORE, or decide by a local
 * limit of this host's share (redis: "on_error=local"). allow and deny mark
 * the decision enforced = false; local marks it local = true.
 *
 * Why allow stays the default, though local is what most deployments want
 * (set it): (1) the options struct's 0 is both "the default" and
 * SLUICE_ON_ERROR_ALLOW, so with local as the default a caller that asks
 * for allow explicitly would silently get local; (2) local keeps per-key
 * state in the process during an outage (up to the memory: store's
 * 1,000,000 keys) and needs the share right: a host started during an
 * outage has learned no N and admits a whole limit, and a cluster store
 * whose keys never reach the registry's node keeps N = 1, so the hosts
 * together may admit up to N times the limit; allow's failure (no limit,
 * no state) is at least plain to see in enforced = false. */
typedef enum {
    SLUICE_ON_ERROR_ALLOW = 0,
    SLUICE_ON_ERROR_DENY = 1,
    SLUICE_ON_ERROR_ERROR = 2,
    SLUICE_ON_ERROR_LOCAL = 3
} sluice_on_error;

/* Options that may grow: set size with SLUICE_STORE_OPTIONS_INIT, so that
 * adding a field never breaks a caller. Zero fields mean defaults. */
typedef struct sluice_store_options {
    size_t size;               /* sizeof(sluice_store_options)              */
    int64_t max_keys;          /* 1..SLUICE_MAX_KEYS_MAX; 0: the default     */
    sluice_on_full on_full;    /* what a full store does with a new key      */
    const sluice_clock *clock; /* for sluice_store_acquire; NULL: monotonic  */
    /* remote stores */
    sluice_on_error on_error;  /* when the server cannot decide             */
    int64_t connect_timeout_ms; /* 0: 200 ms                                */
    int64_t timeout_ms;         /* per command; 0: 100 ms                   */
    /* The bound: every call on a remote store (a decision, a batch, stats)
     * returns within connect_timeout_ms + timeout_ms of its start, however
     * many callers share the pool and whatever the server does (plus the
     * time the system takes to run the thread). Getting a connection, by
     * waiting for one of the pool's or by connecting, takes at most
     * connect_timeout_ms, so that the command has its whole timeout_ms;
     * further round trips of the same call (loading the script, following
     * a cluster redirection) get what is left. A call that runs out of time
     * fails, as on_error says (stats: SLUICE_ESTORE). */
    /* a store kept apart from the process (a shm: file) must be there, and
     * set up, already: none is made (SLUICE_EINVAL, "no such file") */
    bool must_exist;
    /* a remote store decides at the caller's readings (Redis: clock=client)
     * unless its URL says otherwise; else at its server's clock */
    bool caller_clock;
} sluice_store_options;
#define SLUICE_STORE_OPTIONS_INIT \
    {sizeof(sluice_store_options), 0, SLUICE_ON_FULL_EVICT, NULL, SLUICE_ON_ERROR_ALLOW, 0, 0, false, false}

/* A store's counters: since it was opened (memory:, redis://), or since its
 * file was made or last started fresh after a reboot (shm:, where every
 * process's decisions count). */
typedef struct sluice_stats {
    int64_t keys;      /* keys held now (Redis: DBSIZE, every name); -1:
                          unknown (sluice_store_stats: SLUICE_ESTORE)    */
    int64_t capacity;  /* keys it can hold: max_keys (shm: rounded up to
                          whole buckets); -1 for Redis (its maxmemory)   */
    int64_t allowed;   /* decisions that admitted (shm: every process's;
                          one whose process was killed in the middle of
                          it, not, whether it took effect or not; the
                          same for the counts below)                      */
    int64_t denied;    /* decisions that denied                            */
    int64_t forgotten; /* fresh keys dropped, losslessly                   */
    int64_t evicted;   /* keys that were not fresh, evicted by force       */
    int64_t refused;   /* new keys refused with SLUICE_EFULL               */
    int64_t failures;  /* remote stores: decisions the server failed       */
    int64_t reconnects; /* remote stores: connections made after a failure */
    int64_t shadow_denied; /* decisions a shadow part would have denied  */
    int64_t local;     /* remote stores: decisions made by the local limit
                          while the server could not (on_error=local);
                          each counted in failures, and in allowed or
                          denied, too                                    */
    int64_t cached_denials; /* remote stores: denials answered from the
                          cache of denials, with no round trip          */
} sluice_stats;

/* Opens the store named by url. Errors: SLUICE_EINVAL (bad URL or option, a
 * shm file that cannot be used), SLUICE_ENOMEM (also a shm file that cannot
 * be mapped, or whose filesystem is full), SLUICE_ETIMEDOUT (a shm file
 * another process kept locked for its set-up), SLUICE_ESTORE (no Redis
 * Cluster seed answered; with verify=1, a Redis server that did not
 * answer). *out is NULL on failure. */
SLUICE_EXTERN int sluice_store_open(const char *url, const sluice_store_options *opts,
                                    sluice_store **out);
/* The same, with a message saying what was wrong in err (NUL-terminated,
 * truncated to errlen) when it fails. */
SLUICE_EXTERN int sluice_store_open_err(const char *url, const sluice_store_options *opts,
                                        sluice_store **out, char *err, size_t errlen);
/* Decides a request of cost for key under policy p, at the store's clock.
 * Returns 0 with *out filled; SLUICE_ECOST (cost < 1 or above a part's
 * limit), SLUICE_EINVAL (NULL arguments, key length 0 or > SLUICE_KEY_MAX or
 * the store's own limit, a reading outside the accepted range, a policy this
 * store cannot hold: see the parameters above), SLUICE_EFULL (a new key, a
 * full store and on_full=refuse; or more than 4096 policies in one store),
 * SLUICE_ESTORE (a Redis failure with on_error=error; shm: a key whose
 * state the file shows damaged, named in the message), SLUICE_ENOMEM (also:
 * shm's filesystem has no pages for a new key).
 * Errors and denials change no state, with one exception no remote store
 * can avoid: a Redis call that was sent but got no reply (a timeout, a
 * connection lost) may still have run on the server; the message says so,
 * and the call is never sent twice. */
SLUICE_EXTERN int sluice_store_acquire(sluice_store *s, const sluice_policy *p, const void *key,
                                       size_t key_len, int64_t cost, sluice_decision *out);
/* The same at the caller's reading now_ms of the store's clock. */
SLUICE_EXTERN int sluice_store_acquire_at(sluice_store *s, const sluice_policy *p, const void *key,
                                          size_t key_len, int64_t cost, int64_t now_ms,
                                          sluice_decision *out);
/* The verbs beside acquire, on a key (as for a limiter: see sluice_peek,
 * sluice_refund, sluice_reset; the same semantics on every store). A peek
 * or a refund of a key the store does not hold creates nothing, and
 * answers as a fresh state would. A refund or reset is not an admission:
 * the store's time stays as it is. A reset makes the key's state fresh:
 * memory: and shm: forget it, Redis deletes its names in one round trip.
 * out may be NULL for refund and reset. Errors as sluice_store_acquire. */
SLUICE_EXTERN int sluice_store_peek(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                                    int64_t cost, sluice_decision *out);
SLUICE_EXTERN int sluice_store_peek_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                                       int64_t cost, int64_t now_ms, sluice_decision *out);
SLUICE_EXTERN int sluice_store_refund(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                                      int64_t cost, sluice_decision *out);
SLUICE_EXTERN int sluice_store_refund_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                                         int64_t cost, int64_t now_ms, sluice_decision *out);
SLUICE_EXTERN int sluice_store_reset(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                                     sluice_decision *out);
/* Waits until the request is admitted, or returns SLUICE_ETIMEDOUT having
 * consumed nothing, as sluice_acquire_wait does for one limiter: never past
 * timeout_ms, and at once when the wait asked for is longer than what is
 * left. Sleeps on the store's clock (a manual clock makes it instant). */
SLUICE_EXTERN int sluice_store_acquire_wait(sluice_store *s, const sluice_policy *p, const void *key,
                                            size_t key_len, int64_t cost, int64_t timeout_ms,
                                            sluice_decision *out);
/* One request of a batch. */
typedef struct {
    const sluice_policy *policy;
    const void *key;
    size_t key_len;
    int64_t cost;
} sluice_request;
/* Decides n requests at once, in order, at one reading of the store's
 * clock; a remote store sends them in one pipelined round trip, and the
 * memory and shm stores fetch the state of 16 at a time into the cache
 * before deciding them (with many keys, about 2.5x the decisions per second
 * of one call each). results[i] gets what sluice_store_acquire would have
 * returned for request i, and out[i] its decision. Returns 0, or
 * SLUICE_EINVAL for NULL arguments. Each decision is atomic on its own; the
 * batch as a whole is not. After a batch with failed requests,
 * sluice_store_errmsg tells of one of them. */
SLUICE_EXTERN int sluice_store_acquire_many(sluice_store *s, const sluice_request *reqs, size_t n,
                                            sluice_decision *out, int *results);
/* Fills *out. Errors: SLUICE_EINVAL for NULL arguments; SLUICE_ESTORE when
 * a remote store cannot reach a server it needs to count the keys (down,
 * not answering within the bound above): *out is then filled as far as
 * known, keys is -1, and sluice_store_errmsg says which server and why. */
SLUICE_EXTERN int sluice_store_stats(sluice_store *s, sluice_stats *out);
/* The message of the calling thread's last failed call, or of its last
 * decision that a remote store could not enforce (the server's own words),
 * when that call was on s; else "" (so ask right after the call). Per
 * thread, so it is safe while other threads use s; valid until this
 * thread's next call. */
SLUICE_EXTERN const char *sluice_store_errmsg(const sluice_store *s);
/* The store's URL scheme name ("memory"). */
SLUICE_EXTERN const char *sluice_store_kind(const sluice_store *s);
/* NULL is a no-op. No blocking call may be in progress on s, and it is not
 * called from within one of s's callbacks. A loop still attached is
 * detached first, as sluice_store_detach_loop does: the callbacks of
 * non-blocking calls still in flight run, with SLUICE_ECANCELED, before it
 * returns. */
SLUICE_EXTERN void sluice_store_close(sluice_store *s);

/* ------------------------------------------------------------------------ */
/* Non-blocking calls, for event loops                                       */
/* ------------------------------------------------------------------------ */

/* What a non-blocking call hands back, exactly once. result is what the
 * blocking call would have returned: 0, or a negative error (with
 * on_error=error, SLUICE_ESTORE; SLUICE_EFULL; ...); with on_error=allow
 * or deny a server that cannot decide gives 0 and a decision marked
 * enforced = false, as the blocking call does. d is never NULL: it points
 * to the decision the blocking call would have filled, owned by the
 * library and valid only until cb returns (copy it to keep it); when
 * result is negative its fields are all 0 (allowed false) and
 * sluice_store_errmsg(s), asked within cb, says why. For refund and reset
 * d is the decision a request of cost 1 would get right after. */
typedef void (*sluice_store_cb)(void *user, int result, const sluice_decision *d);

/* sluice_store_acquire, _peek, _refund and _reset without waiting for a
 * server: each starts the call and returns at once; cb(user, result, d)
 * then gets what the blocking call would have returned.
 *
 * Returns 0 when the call was taken: cb then runs exactly once. Returns a
 * negative error when it was not: cb never runs. Returned, never given to
 * cb: the blocking call's argument errors (SLUICE_EINVAL for a NULL s, p,
 * key or cb, a key of 0 or more than SLUICE_KEY_MAX bytes, a clock reading
 * outside the accepted range; SLUICE_ECOST for a cost below 1 or above
 * what p can ever admit), SLUICE_EINVAL when s is a remote store with no
 * loop attached (see sluice_store_attach_loop), and SLUICE_ENOMEM when
 * there is no memory to keep the call; sluice_store_errmsg(s) says which.
 * Everything the store itself answers goes to cb.
 *
 * When cb runs:
 *  - memory: and shm: (stores that never wait): before the function
 *    returns, on the calling thread. The call is the blocking one, made at
 *    once; a loop is not needed (and, attached, never used).
 *  - a remote store: never before the function returns. It runs on the
 *    loop's thread, from within sluice_store_loop_ready() when the reply
 *    arrives, or from sluice_store_loop_timeout() when the call runs out of
 *    time or the store answers without the server (a cached denial, a
 *    server known to be down: on the loop's next turn). Timeouts,
 *    on_error, reconnection, reloading the script and following a
 *    Cluster's redirections are those of the blocking call. Calls to one
 *    server are pipelined on one connection (sent at once, whatever
 *    replies are still to come), and their callbacks run in the order the
 *    calls were made. A call still in flight when the loop is detached
 *    (sluice_store_detach_loop, sluice_store_close) completes there, with
 *    SLUICE_ECANCELED: it may still have run on the server.
 *    Redis: one connection per server of the store's own (not the
 *    pool's), opened on the first call that needs it; a call's deadline
 *    is timeout_ms after it is made (plus connect_timeout_ms when its
 *    connection is still being made). When a call gets no reply by then,
 *    the server has answered nothing on that connection for timeout_ms:
 *    the connection is dropped and the server taken as down for 100 ms
 *    (as the blocking calls do), so every call sent on it completes then,
 *    as on_error says ("it may have taken effect"), and calls made while it
 *    is down complete on the next turn. Callbacks run in the order calls
 *    were made even across a Cluster's nodes: a call one node answered
 *    waits for an earlier one to another node. A Cluster's redirections
 *    (MOVED, ASK, TRYAGAIN) are followed; a node lost for good is learnt
 *    of through MOVED replies, or by the blocking calls (CLUSTER SLOTS),
 *    not by the non-blocking side itself. Host names are resolved with
 *    getaddrinfo, which blocks: give addresses on a loop that must not.
 *
 * The store's clock is read when the function is called, as the blocking
 * call reads it. key is copied when the store needs it later: it may
 * change as soon as the function returns; p must stay until cb has run.
 * cb may make further calls on s, blocking or not (with memory: and shm:
 * a call made from cb completes within it), but not detach s's loop nor
 * close s.
 *
 * Threads: memory: and shm: take these calls from any thread, as they take
 * the blocking ones. A remote store's non-blocking side belongs to its
 * loop's thread: the calls, attaching and detaching the loop,
 * sluice_store_loop_ready() and _timeout() are made on that thread only,
 * and the callbacks run there; the blocking calls stay thread-safe beside
 * it (they use connections of their own). */
SLUICE_EXTERN int sluice_store_acquire_async(sluice_store *s, const sluice_policy *p, const void *key,
                                             size_t key_len, int64_t cost, sluice_store_cb cb, void *user);
SLUICE_EXTERN int sluice_store_peek_async(sluice_store *s, const sluice_policy *p, const void *key,
                                          size_t key_len, int64_t cost, sluice_store_cb cb, void *user);
SLUICE_EXTERN int sluice_store_refund_async(sluice_store *s, const sluice_policy *p, const void *key,
                                            size_t key_len, int64_t cost, sluice_store_cb cb, void *user);
SLUICE_EXTERN int sluice_store_reset_async(sluice_store *s, const sluice_policy *p, const void *key,
                                           size_t key_len, sluice_store_cb cb, void *user);

/* The loop interface: how a store plugs into any event loop. The caller
 * fills a sluice_loop with two callbacks through which the store says what
 * it needs, and the loop tells the store what happened by calling
 * sluice_store_loop_ready() and sluice_store_loop_timeout(). libsluice-uv
 * (sluice_uv.h) and libsluice-event (sluice_event.h) fill it for libuv and
 * libevent.
 *
 *  watch(user, fd, events): from now on watch fd for events, a set of
 *    SLUICE_LOOP_READ and SLUICE_LOOP_WRITE, in place of what fd was
 *    watched for before (a fd not watched yet is new); when fd is ready
 *    for any of them, call sluice_store_loop_ready(s, fd, ready), ready
 *    the ones it is ready for (an error or a hang-up on fd counts as ready
 *    for all it is watched for), and again on every turn while it stays
 *    ready (level-triggered). events 0: stop watching fd and forget it:
 *    the store closes fd after, and a later fd of the same number is a new
 *    one. A store watches several fds at once (a connection each: one per
 *    server, a Cluster's nodes). Returns 0, or a negative error when fd
 *    cannot be watched (SLUICE_ENOMEM, SLUICE_EINVAL), which fails what the
 *    store wanted fd for; stopping (0) never fails.
 *  timer(user, ms): arm the store's one timer to fire once, ms
 *    milliseconds from now (0: on the loop's next turn), in place of any
 *    earlier arming; ms < 0: disarm it. When it fires, call
 *    sluice_store_loop_timeout(s). The store keeps every deadline of its
 *    calls (per-call timeouts, reconnecting) on this one timer.
 *  detached(user), optional (NULL): the store is done with the loop
 *    (sluice_store_detach_loop, sluice_store_close): every fd it watched
 *    is unwatched, its timer disarmed, and neither callback is called
 *    again: free what was made for the store.
 * The store calls watch and timer only from within its own functions (the
 * non-blocking calls, attaching and detaching, loop_ready, loop_timeout,
 * close) on the loop's thread, any number of times in one of them; the
 * loop's callbacks must allow that from within loop_ready and
 * loop_timeout too. memory: and shm: never call them. */
#define SLUICE_LOOP_READ 1
#define SLUICE_LOOP_WRITE 2
typedef struct sluice_loop {
    size_t size; /* sizeof(sluice_loop): set with SLUICE_LOOP_INIT */
    void *user;  /* the callbacks' first argument */
    int (*watch)(void *user, int fd, int events);
    void (*timer)(void *user, int64_t ms);
    void (*detached)(void *user);
} sluice_loop;
#define SLUICE_LOOP_INIT {sizeof(sluice_loop), NULL, NULL, NULL, NULL}

/* Attaches loop to s (copied: loop may be freed after). A store has at
 * most one loop. A remote store needs one for its non-blocking calls; may
 * watch fds or arm its timer from within this call. memory: and shm:
 * take a loop and never use it. Errors: SLUICE_EINVAL (NULL s or loop, a
 * size not set with SLUICE_LOOP_INIT, a NULL watch or timer, a loop
 * attached already: detach it first), or what the store could not set up
 * (then nothing is attached, and detached is not called). */
SLUICE_EXTERN int sluice_store_attach_loop(sluice_store *s, const sluice_loop *loop);
/* Detaches s's loop: each non-blocking call still in flight completes, its
 * callback run here with SLUICE_ECANCELED; every fd is unwatched, the
 * timer disarmed, then detached(user) is called. Non-blocking calls made
 * from those callbacks are refused (SLUICE_EINVAL). A loop may be attached
 * again after. 0; also when no loop is attached (nothing to do);
 * SLUICE_EINVAL for NULL s. Not from within one of s's callbacks. */
SLUICE_EXTERN int sluice_store_detach_loop(sluice_store *s);
/* The loop's calls: fd (watched by s) is ready for events
 * (SLUICE_LOOP_READ | SLUICE_LOOP_WRITE); s's timer fired. Callbacks of
 * calls that complete run from within. An fd s does not watch, a timer s
 * did not arm, a store with no loop attached: nothing happens. */
SLUICE_EXTERN void sluice_store_loop_ready(sluice_store *s, int fd, int events);
SLUICE_EXTERN void sluice_store_loop_timeout(sluice_store *s);

/* ------------------------------------------------------------------------ */
/* HTTP headers                                                              */
/* ------------------------------------------------------------------------ */

/* Writes the IETF httpapi rate-limit header fields for a decision made under
 * policy p, as lines "Name: value\r\n":
 *   RateLimit-Policy: "NAME";q=QUOTA;w=WINDOW_S[, ... one item per part]
 *   RateLimit: "NAME";r=REMAINING;t=SECONDS     (the part that set the limit)
 *   Retry-After: SECONDS                         (denials only)
 * (the named-item form of draft-ietf-httpapi-ratelimit-headers 08 and
 * later). A window's QUOTA is its limit per its window; a bucket's WINDOW_S
 * is the time it takes to refill from empty and its QUOTA what refills in
 * that time (at least its capacity). t: on a denial, when this request is
 * admitted (as Retry-After); when allowed, when the named part is fresh
 * again: for a one-part policy reset_ms; for a composite (whose decision
 * carries only the greatest reset of its parts) the most the named part's
 * own reset can be for its remaining r, at most reset_ms: 0 when r is its
 * limit, else for a bucket the time to refill the missing tokens, ceil((C -
 * r) * P / R) ms (late by less than one token's time), for a fixed window
 * or a log one window, for a sliding window two. A decision a remote
 * store could not make (enforced false) gets no RateLimit field. Seconds
 * are rounded up, so no client retries before the real retry time;
 * q, w, r and t stop at 999999999999999 (an sf-integer's 15 digits).
 * A composite policy names its parts "NAME", "NAME.1", "NAME.2", ...
 * Shadow parts are not limits a client meets: RateLimit-Policy leaves them
 * out (the others keep their names), and a policy of shadow parts only
 * gets no fields at all (an empty text, 0).
 * Returns, as snprintf does, the length of the whole text (excluding the
 * NUL) whatever len is: when it is below len, buf holds the text; else buf
 * holds "" when len > 0 (never a text cut in the middle of a field), so a
 * result >= len means "call again with result + 1 bytes"; buf may be NULL
 * when len is 0. SLUICE_EINVAL for NULL p or d, a NULL buf with len > 0,
 * or a decision that cannot come from p (its part out of range or a shadow
 * part, a negative field). Thread-safe. */
SLUICE_EXTERN int sluice_headers_format(const sluice_policy *p, const sluice_decision *d, char *buf,
                                        size_t len);

#ifdef __cplusplus
}
#endif

#endif /* SLUICE_H */
