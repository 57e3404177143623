/* internal.h: what the files of libsluice share and users never see.
 *
 * The shape: an algorithm (src/algo/) is a pure state transition
 *   decide(params, state, now_ms, cost) -> decision, new state
 * with no clock reads, locks, allocation or I/O; a limiter (limiter.c) or a
 * store applies it to state it keeps atomic. Internal non-static names start
 * with sluice__; prototypes are grouped under the file that defines them. */
#ifndef SLUICE_INTERNAL_H
#define SLUICE_INTERNAL_H

#include "sluice.h"

#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

typedef __int128 sluice__i128;

/* The few internal functions libsluice-redis.so calls in libsluice.so: they
 * are exported (tests/test_symbols.sh lists them), and are no API: the two
 * libraries of one version go together. */
#define SLUICE__SHARED __attribute__((visibility("default")))
/* libsluice-redis.so's SONAME version, loaded on demand (store.c) */
#define SLUICE__SOVERSION "0"

/* ---- division by an invariant divisor, as a multiply (Granlund and
 * Montgomery, "Division by invariant integers using multiplication", 1994,
 * fig. 4.1): exact for every uint64_t n, about a third of a divide's time. */
typedef struct {
    uint64_t m;
    uint8_t s1, s2;
} sluice__div;

static inline void sluice__div_init(sluice__div *v, uint64_t d) { /* d >= 1 */
    unsigned l = d == 1 ? 0 : 64 - (unsigned)__builtin_clzll(d - 1); /* ceil(log2 d) */
    unsigned __int128 two_l = (unsigned __int128)1 << l;
    v->m = (uint64_t)((((two_l - d) << 64) / d) + 1);
    v->s1 = l < 1 ? (uint8_t)l : 1;
    v->s2 = l < 1 ? 0 : (uint8_t)(l - 1);
}
static inline uint64_t sluice__div_q(const sluice__div *v, uint64_t n) {
    uint64_t t = (uint64_t)(((unsigned __int128)v->m * n) >> 64);
    return (t + ((n - t) >> v->s1)) >> v->s2;
}

/* ---- parameters: a validated configuration, precomputed for decisions ---- */

typedef struct sluice__params {
    sluice_config cfg;
    int64_t limit;     /* C or L                                              */
    int64_t window_ms; /* windows and log: W                                  */
    /* buckets (GCRA), in scaled units where 1 ms = r units and one token (one
     * unit of cost) = p units, r/p = R/P in lowest terms. tau = C*p is the
     * largest backlog a full-to-empty bucket holds. All < 2^62. */
    int64_t p, r, tau;
    sluice__div by_p, by_r; /* division by p and by r */
} sluice__params;

/* ---- state ---- */

/* One sliding-log entry: the newest admissions at ts_ms; cum is the running
 * total of admitted cost up to and including this entry. */
typedef struct {
    int64_t ts_ms, cum;
} sluice__log_entry;

/* A ring of entries, oldest first; cap is 0 or a power of two. base is the
 * running total before the oldest entry, so the cost of entries i..last is
 * cum(last) - cum(i-1). */
typedef struct {
    sluice__log_entry *e;
    uint32_t cap, head, len;
    int64_t base;
} sluice__log;

typedef union sluice__state {
    sluice__i128 tat; /* buckets: theoretical arrival time, 1/r ms units; the
                         bucket is full at any ts >= tat                      */
    struct {
        int64_t index, cur;
    } fw; /* fixed window: window index (now / W, floored) and its count     */
    struct {
        int64_t index, prev, cur;
    } sw; /* sliding window: index, previous and current windows' counts     */
    sluice__log log;
} sluice__state;

/* The lowest theoretical arrival time: a fresh, full bucket. */
#define SLUICE__TAT_FRESH ((sluice__i128)INT64_MIN * ((sluice__i128)1 << 62))

/* Returned by decide() when the log needs a larger ring: nothing changed;
 * grow the ring (sluice__log_reserve) and decide again. */
#define SLUICE__EGROW 1

typedef struct sluice__algo {
    const char *name; /* its name in the text form */
    /* Fills *d for a request of cost (1 <= cost <= limit) at now_ms. When
     * allowed and commit is set, updates *s; otherwise leaves *s untouched.
     * Returns 0, or SLUICE__EGROW when the request would be admitted but the
     * state needs room first (nothing changed, whatever commit). Sets
     * d->part = 0, d->enforced = true. */
    int (*decide)(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost,
                  sluice_decision *d, int commit);
    /* Fills *d for the state as it is at now_ms, with no request: allowed =
     * false, retry_after_ms = 0, remaining = what is available now. */
    void (*peek)(const sluice__params *p, const sluice__state *s, int64_t now_ms, sluice_decision *d);
    /* True when the state at now_ms (and at any later reading) decides exactly
     * as a fresh state would: it may be forgotten. */
    int (*is_fresh)(const sluice__params *p, const sluice__state *s, int64_t now_ms);
    /* Sets *s to a fresh state (owning no memory). */
    void (*init)(const sluice__params *p, sluice__state *s);
} sluice__algo;

/* floor(a / b) for b > 0 */
static inline int64_t sluice__floor_div(int64_t a, int64_t b) {
    int64_t q = a / b;
    return (a % b != 0 && a < 0) ? q - 1 : q;
}
static inline int64_t sluice__ceil_div(int64_t a, int64_t b) { /* a >= 0, b > 0 */
    return a / b + (a % b != 0);
}

/* ---- "algo/token_bucket.c" ---- */
extern const sluice__algo sluice__token_bucket;
/* The bucket core in 64 bits, inline so the lock-free path can decide in
 * registers, compare-and-swap, and only then write the decision (whose
 * divisions would otherwise delay the CAS). b is the backlog tat - now in
 * scaled units, clamped at 0; cost <= C, so cost*p <= tau < 2^62. */
/* ceil(x / r) for x >= 0 */
static inline int64_t sluice__gcra_ceil_r(const sluice__params *p, int64_t x) {
    uint64_t q = sluice__div_q(&p->by_r, (uint64_t)x);
    return (int64_t)(q + (q * (uint64_t)p->r != (uint64_t)x));
}
static inline int sluice__gcra_room(const sluice__params *p, int64_t b, int64_t cost) {
    return b <= p->tau - cost * p->p; /* b + need <= tau */
}
static inline void sluice__gcra_allowed(const sluice__params *p, int64_t b, int64_t nb, int shaper,
                                        sluice_decision *d) {
    d->allowed = true;
    d->enforced = true;
    d->part = 0;
    /* plain divisions here measured faster than the multiplies (they run
     * after the CAS, overlapped with the caller's next work) */
    d->remaining = (p->tau - nb) / p->p;
    d->retry_after_ms = 0;
    d->reset_ms = d->part_reset_ms = sluice__ceil_div(nb, p->r);
    d->delay_ms = shaper ? sluice__ceil_div(b, p->r) : 0;
    d->limit = p->limit;
}
static inline void sluice__gcra_denied(const sluice__params *p, int64_t b, int64_t cost,
                                       sluice_decision *d) {
    d->allowed = false;
    d->enforced = true;
    d->part = 0;
    d->remaining = b <= p->tau ? (int64_t)sluice__div_q(&p->by_p, (uint64_t)(p->tau - b)) : 0;
    /* b - tau > -need, so the sum is positive, and it fits (b <= INT64_MAX) */
    d->retry_after_ms = sluice__gcra_ceil_r(p, (b - p->tau) + cost * p->p);
    d->reset_ms = d->part_reset_ms = sluice__gcra_ceil_r(p, b);
    d->delay_ms = 0;
    d->limit = p->limit;
}
/* Decides and fills *d; returns 1 and sets *new_backlog when admitted. */
static inline int sluice__gcra_core(const sluice__params *p, int64_t backlog, int64_t cost,
                                    int shaper, sluice_decision *d, int64_t *new_backlog) {
    int64_t b = backlog > 0 ? backlog : 0;
    if (!sluice__gcra_room(p, b, cost)) {
        sluice__gcra_denied(p, b, cost, d);
        return 0;
    }
    *new_backlog = b + cost * p->p;
    sluice__gcra_allowed(p, b, *new_backlog, shaper, d);
    return 1;
}
int sluice__gcra_decide(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost,
                        int shaper, sluice_decision *d, int commit);
void sluice__gcra_peek(const sluice__params *p, const sluice__state *s, int64_t now_ms,
                       sluice_decision *d);
int sluice__gcra_is_fresh(const sluice__params *p, const sluice__state *s, int64_t now_ms);
void sluice__gcra_init(const sluice__params *p, sluice__state *s);

/* ---- "algo/leaky_bucket.c" ---- */
extern const sluice__algo sluice__leaky_bucket;

/* ---- "algo/fixed_window.c", "algo/sliding_window.c" ---- */
extern const sluice__algo sluice__fixed_window;
extern const sluice__algo sluice__sliding_window;

/* ---- "algo/sliding_log.c" ---- */
extern const sluice__algo sluice__sliding_log;
/* Makes room for one more entry (doubling, at most max_entries). Returns 0 or
 * SLUICE_ENOMEM (the log unchanged). */
int sluice__log_reserve(sluice__log *log, int64_t max_entries);
/* The most entries a log of these parameters ever holds: min(L, W). */
static inline int64_t sluice__log_max_entries(const sluice__params *p) {
    return p->limit < p->window_ms ? p->limit : p->window_ms;
}
void sluice__log_free(sluice__log *log);

/* ---- "config.c" ---- */
/* Parses text[begin..end), with positions in messages relative to text. */
int sluice__config_parse_span(const char *text, size_t begin, size_t end, sluice_config *out,
                              char *err, size_t errlen);
/* Validates c and fills *p. Returns 0 or SLUICE_EINVAL with a message. */
int sluice__params_init(const sluice_config *c, sluice__params *p, char *err, size_t errlen);
const sluice__algo *sluice__algo_of(sluice_algorithm a);

/* ---- "limiter.c" ---- */
/* How often callers of l met each other: CAS retries plus lock waits. Tests
 * use it to show that a concurrency test really raced. */
unsigned long sluice__limiter_contention(const sluice_limiter *l);
/* Part i's state at now_ms, as its algorithm's peek() reports it. */
void sluice__limiter_peek_part(sluice_limiter *l, size_t i, int64_t now_ms, sluice_decision *d);

/* ---- "policy.c" ---- */
struct sluice_policy {
    uint64_t serial;  /* unique per policy object made (copies share it) */
    int64_t max_cost; /* the least limit of the parts */
    char name[SLUICE_POLICY_NAME_MAX + 1];
    size_t n_parts;
    sluice_config parts[SLUICE_POLICY_MAX_PARTS];
    sluice__params params[SLUICE_POLICY_MAX_PARTS];
    const sluice__algo *algo[SLUICE_POLICY_MAX_PARTS];
};
/* Checks cost against every part: SLUICE_ECOST when cost < 1 or > a limit. */
int sluice__policy_check_cost(const sluice_policy *p, int64_t cost);
/* Decides cost against every part's state, all or nothing: when every part
 * admits, updates all states; otherwise none. Fills the combined decision.
 * Returns 0 or SLUICE__EGROW (with *grow_part set; nothing changed): only
 * when every part would admit, so a denial never waits on memory. */
int sluice__policy_decide(const sluice_policy *p, sluice__state *states, int64_t now_ms,
                          int64_t cost, sluice_decision *d, size_t *grow_part);
/* The same, growing sliding logs (heap rings) as they need: 0 or
 * SLUICE_ENOMEM (nothing changed). */
int sluice__policy_decide_grow(const sluice_policy *p, sluice__state *states, int64_t now_ms,
                               int64_t cost, sluice_decision *d);

/* ---- "clock.c" ---- */
/* The blocking wait of limiters and stores: attempt() decides at a reading;
 * on a denial, sleep on c for the retry time, never past timeout_ms, and
 * give up at once (SLUICE_ETIMEDOUT, nothing consumed) when the retry time
 * is beyond it. */
int sluice__wait(const sluice_clock *c, int64_t timeout_ms,
                 int (*attempt)(void *ctx, int64_t now_ms, sluice_decision *d), void *ctx,
                 sluice_decision *out);
/* A reading checked against the accepted range. */
static inline int sluice__time_ok(int64_t now_ms) {
    return now_ms >= SLUICE_TIME_MIN_MS && now_ms <= SLUICE_TIME_MAX_MS;
}

/* ---- "lock.c" and inline: the small lock of limiters and stores ---- */
/* Test-and-test-and-set: uncontended, one atomic exchange to take and one
 * release store to give; contended, it spins briefly then yields. */
typedef struct {
    atomic_int held;
    atomic_uint contended; /* times a taker found it held (tests read it) */
} sluice__lock;
void sluice__lock_slow(sluice__lock *l);
/* One round of waiting for a lock someone holds (spins: rounds so far):
 * the first 64 pause the CPU, later ones yield it, for a holder preempted
 * on an oversubscribed machine. Every lock of the library waits so: this
 * one, the memory store's entry locks, the shm store's bucket locks. */
void sluice__lock_wait(unsigned spins);
static inline void sluice__lock_take(sluice__lock *l) {
    if (atomic_exchange_explicit(&l->held, 1, memory_order_acquire)) sluice__lock_slow(l);
}
static inline void sluice__lock_give(sluice__lock *l) {
    atomic_store_explicit(&l->held, 0, memory_order_release);
}

/* ---- "stripe.c": a thread's stripe of counters ---- */
#define SLUICE__STRIPES 16
/* The calling thread's stripe index: 0..SLUICE__STRIPES-1, owned by it
 * alone among the threads alive in this process (add with a plain load and
 * store), or SLUICE__STRIPES (shared: add atomically). */
extern _Thread_local unsigned sluice__my_stripe __attribute__((tls_model("initial-exec")));
unsigned sluice__stripe_take(void) __attribute__((cold, noinline));
static inline unsigned sluice__stripe(void) {
    unsigned i = sluice__my_stripe;
    return __builtin_expect(i != UINT32_MAX, 1) ? i : sluice__stripe_take();
}

/* ---- "store/store.c": what every store shares ---- */
#define SLUICE__URL_MAX_PARAMS 16

/* A store URL taken apart: "scheme:path?k=v&k=v". Pointers into the URL. */
typedef struct {
    char scheme[16];
    const char *path;
    size_t path_len;
    struct {
        const char *key, *value;
        size_t key_len, value_len;
    } params[SLUICE__URL_MAX_PARAMS];
    size_t n_params;
} sluice__url;

/* Options, after the struct and then the URL have had their say. */
typedef struct {
    int64_t max_keys;
    int max_keys_given; /* by the options struct or the URL */
    sluice_on_full on_full;
    const sluice_clock *clock;
    sluice_on_error on_error;
    int64_t connect_timeout_ms, timeout_ms;
} sluice__store_config;

typedef struct sluice__store_ops {
    const char *scheme;
    /* Opens a store of this kind; unknown URL parameters are errors. */
    int (*open)(const sluice__url *url, const sluice__store_config *cfg, sluice_store **out,
                char *err, size_t errlen);
    /* Arguments are checked (key length, cost, reading) before this is called. */
    int (*acquire_at)(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                      int64_t cost, int64_t now_ms, sluice_decision *out);
    /* Fills out as far as it knows; a store that cannot count its keys (a
     * remote one whose server does not answer) sets keys to -1 and says
     * why in the store's message: sluice_store_stats is then SLUICE_ESTORE. */
    void (*stats)(sluice_store *s, sluice_stats *out);
    void (*close)(sluice_store *s);
    /* optional: a batch (requests already checked, results[i] preset to
     * their check's error or 0); NULL: one acquire_at per request */
    void (*acquire_many)(sluice_store *s, const sluice_request *reqs, size_t n, int64_t now_ms,
                         sluice_decision *out, int *results);
} sluice__store_ops;

/* The head of every store; each kind's struct starts with it. */
struct sluice_store {
    const sluice__store_ops *ops;
    const sluice_clock *clock;
};
/* Sets the calling thread's message for sluice_store_errmsg(s). */
SLUICE__SHARED void sluice__store_errf(const sluice_store *s, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The policies a store has met, each with the store's own data about it.
 * An item starts with a copy of its policy; equal name and configuration,
 * equal item (so a changed configuration is a new item). The first
 * SLUICE__KNOWN_MAX policy objects a store meets are recognised without a
 * lock (by serial); any later one takes the lock and compares contents, so
 * a program should make its policies once, not per request. */
#define SLUICE__POLICIES_MAX 4096
#define SLUICE__POLICY_CHUNK 64 /* items come in chunks that never move */
#define SLUICE__KNOWN_MAX 64
typedef struct {
    sluice__lock lock; /* guards chunks and n, and appends to known */
    void **chunks[SLUICE__POLICIES_MAX / SLUICE__POLICY_CHUNK];
    unsigned n;
    struct {
        _Atomic uint64_t serial;
        unsigned id;
        uint32_t word; /* the item's word at word_offset (32 bits: an entry stays 16 bytes) */
    } known[SLUICE__KNOWN_MAX];
    atomic_uint n_known;
    size_t item_size; /* >= sizeof(sluice_policy) */
    /* the offset in an item of a u32 that known[] keeps beside the id, so a
     * decision that needs it early (shm: the policy's hash tweak, which
     * its key hash takes) has it without waiting for the item's address;
     * a store that needs none leaves it 0 (the cached word then goes unused) */
    size_t word_offset;
    /* fills the item after the policy copy; 0 or an error (not kept) */
    int (*init)(void *item, void *ctx);
    void *ctx;
} sluice__policy_set;
/* The id of p in set, registering it when new (sluice__policy_set_id).
 * Errors: SLUICE_EFULL (too many policies), SLUICE_ENOMEM, or init's error;
 * messages via store s. */
SLUICE__SHARED int sluice__policy_set_add(sluice__policy_set *set, const sluice_store *s,
                                          const sluice_policy *p, unsigned *id);
/* Item id (an id sluice__policy_set_id gave: no lock needed). */
static inline void *sluice__policy_item(const sluice__policy_set *set, unsigned id) {
    return set->chunks[id / SLUICE__POLICY_CHUNK][id % SLUICE__POLICY_CHUNK];
}
/* Item id's word at word_offset (what known[] caches). */
static inline uint32_t sluice__policy_item_word(const sluice__policy_set *set, unsigned id) {
    uint32_t w;
    memcpy(&w, (const char *)sluice__policy_item(set, id) + set->word_offset, sizeof w);
    return w;
}
/* Whether the policy object of this serial is in set's cache of objects
 * met before (its id then in *id, and its item's word at word_offset in
 * *word when word is not NULL). */
static inline int sluice__policy_set_known(const sluice__policy_set *set, uint64_t serial, unsigned *id,
                                           uint32_t *word) {
    unsigned n = atomic_load_explicit(&set->n_known, memory_order_acquire);
    for (unsigned i = 0; i < n; i++) {
        if (atomic_load_explicit(&set->known[i].serial, memory_order_relaxed) == serial) {
            *id = set->known[i].id;
            if (word) *word = set->known[i].word;
            return 1;
        }
    }
    return 0;
}
/* The same as sluice__policy_set_add, inline: a policy object met before is
 * found without a call. word: as in sluice__policy_set_known. */
static inline int sluice__policy_set_id(sluice__policy_set *set, const sluice_store *s,
                                        const sluice_policy *p, unsigned *id, uint32_t *word) {
    if (sluice__policy_set_known(set, p->serial, id, word)) return 0;
    int rc = sluice__policy_set_add(set, s, p, id);
    if (rc == 0 && word) *word = sluice__policy_item_word(set, *id);
    return rc;
}
SLUICE__SHARED void sluice__policy_set_free(sluice__policy_set *set);

/* Store time: the highest reading at which the store admitted something.
 * A decision is made at max(reading, *high); only an admission raises
 * *high (atomically, written only when it grows), so a denied or failed
 * call changes nothing. */
static inline int64_t sluice__store_time(_Atomic int64_t *high, int64_t now_ms) {
    int64_t h = atomic_load_explicit(high, memory_order_relaxed);
    return now_ms > h ? now_ms : h;
}
static inline void sluice__store_time_raise(_Atomic int64_t *high, int64_t now_ms) {
    int64_t h = atomic_load_explicit(high, memory_order_relaxed);
    while (now_ms > h && !atomic_compare_exchange_weak_explicit(high, &h, now_ms, memory_order_relaxed,
                                                                memory_order_relaxed)) {
    }
}
/* A decision made at store time, told from a reading lag_ms behind it: its
 * waits are longer by the lag (zero stays zero), so that sleeping them on
 * the caller's clock is exactly enough. */
static inline void sluice__decision_lag(sluice_decision *d, int64_t lag_ms) {
    if (lag_ms <= 0) return;
    if (d->retry_after_ms) d->retry_after_ms += lag_ms;
    if (d->reset_ms) d->reset_ms += lag_ms;
    if (d->part_reset_ms) d->part_reset_ms += lag_ms;
    if (d->delay_ms) d->delay_ms += lag_ms;
}

/* Reads URL parameter i as an integer in lo..hi into *out, or explains. */
SLUICE__SHARED int sluice__url_int(const sluice__url *url, size_t i, int64_t lo, int64_t hi,
                                   int64_t *out, char *err, size_t errlen);
/* Reads URL parameter i as one of n names ("a", "b", ...): *out gets its
 * index, or explains (naming the choices) and returns SLUICE_EINVAL. */
SLUICE__SHARED int sluice__url_choice(const sluice__url *url, size_t i, const char *const *names,
                                      int n, int *out, char *err, size_t errlen);
/* Whether URL parameter i is named name. */
SLUICE__SHARED int sluice__url_is(const sluice__url *url, size_t i, const char *name);

/* ---- "store/shm.c" ---- */
extern const sluice__store_ops sluice__shm_store;

/* ---- "store/memory.c" ---- */
extern const sluice__store_ops sluice__memory_store;
/* Test hook: from now on every key of s hashes alike (decisions stay right,
 * only slower). */
void sluice__memory_store_collide(sluice_store *s);
/* Test hook (store/shm/shm.c): when set, called at each step of a
 * lock-free admission (1: its change installed, 2: its new state written,
 * 3: the change settled, before the key's version moves on), of adding a
 * key (4: its state written, before it is live; 7: its slot chosen and its
 * overflow block given, before the key is written), of moving a FAST key to
 * the general form (5: its state written, before the switch), and of a
 * FAST denial (6: decided, before the control word is read again to vouch
 * for it), so that a test can stop or kill the process there, or change
 * the slot under it. NULL in real use. */
extern void (*sluice__shm_step_hook)(int step);
/* Test hook (store/shm/shm.c): from now on every key this handle of s looks up or
 * adds hashes alike (one bucket, one tag), so that only the key comparison
 * tells keys apart. Only on a new file: keys added before are not found. */
void sluice__shm_store_collide(sluice_store *s);
/* Test hook: whether s holds state for (p, key) now. */
int sluice__memory_store_holds(sluice_store *s, const sluice_policy *p, const void *key, size_t len);

/* ---- "hash.c" ---- */
/* SipHash of data under the 128-bit key: 1-3 for stores, 2-4 for tests
 * against the published vectors. */
uint64_t sluice__siphash13(const uint64_t key[2], const void *data, size_t len);
SLUICE__SHARED uint64_t sluice__siphash24(const uint64_t key[2], const void *data, size_t len);
/* A keyed hash of keys of 1..16 bytes on three AES rounds (hash.c), for
 * CPUs with AES instructions: sluice__aeshash_available(). key: 8 random
 * words (four 128-bit round keys); tweak < 2^56 tells uses apart. The key
 * comes as its two words (sluice__key_words), in registers: no copy, and
 * no load of words just stored. */
int sluice__aeshash_available(void);
/* n random words for a hash's key (hash.c): the kernel's entropy, or a
 * weaker fallback from the clock when it has none. */
void sluice__random_words(uint64_t *w, size_t n);
uint64_t sluice__aeshash16_words(const uint64_t key[8], uint64_t tweak, uint64_t w0, uint64_t w1,
                                 size_t len);

/* A key of 1..16 bytes zero-padded to 16, as the two words a memcpy into a
 * zeroed 16-byte block gives (w[0]: bytes 0..7), read with a few loads of
 * the key's own bytes: no call to memcpy, and no store that a 16-byte load
 * of the block would then wait for. */
static inline void sluice__key_words(const void *key, size_t len, uint64_t w[2]) {
    const uint8_t *k = key;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t lo = 0, hi = 0;
    if (len >= 8) {
        memcpy(&lo, k, 8);
        if (len > 8) { /* bytes 8..len-1: the top of the last 8 bytes */
            memcpy(&hi, k + len - 8, 8);
            hi >>= 8 * (16 - len);
        }
    } else if (len >= 4) { /* two overlapping 4-byte reads */
        uint32_t a, b;
        memcpy(&a, k, 4);
        memcpy(&b, k + len - 4, 4);
        lo = a | (uint64_t)b << 8 * (len - 4);
    } else if (len > 0) { /* bytes 0, len/2 and len-1 cover all of 1..3 */
        lo = k[0] | (uint64_t)k[len / 2] << 8 * (len / 2) | (uint64_t)k[len - 1] << 8 * (len - 1);
    }
    w[0] = lo;
    w[1] = hi;
#else
    uint8_t block[16] = {0};
    memcpy(block, k, len);
    memcpy(w, block, 16);
#endif
}

/* ---- "error.c" ---- */
/* snprintf into err (when err && errlen), like a message channel. */
SLUICE__SHARED void sluice__errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* SLUICE_INTERNAL_H */
