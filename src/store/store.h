/* store/store.h: the store interface. A store kind (memory/, shm/,
 * redis/) fills in one const table of operations (sluice__store_ops);
 * store.c chooses the kind by URL, parses its options, checks every
 * request's arguments once, keeps the message channel, and gives the
 * non-blocking calls and the loop interface to the kinds that wait on a
 * server (the others complete them at once, through their blocking
 * entries). Also here: the registry of the policies a store has met, and
 * the store time every store keeps. */
#ifndef SLUICE_STORE_H
#define SLUICE_STORE_H

#include "lock.h"
#include "policy.h"
#include "shared.h"

#include <stdatomic.h>

/* ---- "store/store.c": what every store shares ---- */

/* The store interface's version: a kind found in another library
 * (libsluice-redis) carries the one it was built with, first in its table,
 * and is refused unless it is this one (so two libraries of different
 * versions never misread each other's structs). */
#define SLUICE__STORE_INTERFACE 4

/* ---- URL parameters: each kind declares the ones it takes ---- */

typedef enum {
    SLUICE__PARAM_INT,    /* an integer in lo..hi */
    SLUICE__PARAM_CHOICE, /* one of choices: its index */
    SLUICE__PARAM_TEXT,   /* lo..hi bytes, none of refuse */
} sluice__param_type;

/* The options struct's field a parameter takes its default from (the URL
 * overrides it). */
typedef enum {
    SLUICE__OPT_NONE,
    SLUICE__OPT_MAX_KEYS,
    SLUICE__OPT_ON_FULL,
    SLUICE__OPT_ON_ERROR,
    SLUICE__OPT_TIMEOUT,
    SLUICE__OPT_CONNECT_TIMEOUT,
    SLUICE__OPT_CALLER_CLOCK, /* a choice: 1 when the options ask for it */
} sluice__param_opt;

typedef struct {
    const char *name;
    sluice__param_type type;
    int64_t lo, hi, def;        /* INT: range and default; CHOICE: def the index; TEXT: length range */
    const char *const *choices; /* CHOICE: the names, NULL-terminated */
    const char *text_def;       /* TEXT: the default */
    const char *refuse;         /* TEXT: bytes it may not hold */
    sluice__param_opt opt;
} sluice__param;

#define SLUICE__PARAMS_MAX 16 /* a kind's, and a URL's */

/* What a kind opens a store with: its URL's path, and the value of each
 * parameter it declares (the URL's, else the options struct's, else the
 * default), all checked. A kind never reads the URL itself. */
typedef struct {
    const char *scheme;
    const char *path; /* after "scheme:", up to '?': path_len bytes */
    size_t path_len;
    char base[320];   /* "scheme:path" (cut short), for messages */
    const sluice_clock *clock;
    int must_exist, caller_clock; /* the options struct's */
    uint32_t given;   /* bit i: parameter i was named (in the URL, or set in the options struct) */
    int64_t value[SLUICE__PARAMS_MAX]; /* INT: the value; CHOICE: the index */
    const char *text[SLUICE__PARAMS_MAX]; /* TEXT: text_len bytes (in the URL, or the default) */
    size_t text_len[SLUICE__PARAMS_MAX];
} sluice__store_config;

/* The verbs beside acquire (sluice_store_peek, _refund, _reset); a
 * non-blocking call (async_at) also names acquire, which operate_at never
 * gets. */
typedef enum { SLUICE__VERB_ACQUIRE = 0, SLUICE__VERB_PEEK = 1, SLUICE__VERB_REFUND, SLUICE__VERB_RESET } sluice__verb;

typedef struct sluice__store_ops {
    uint32_t version; /* SLUICE__STORE_INTERFACE: first, read before anything else */
    const char *scheme;
    const sluice__param *params; /* the URL parameters it takes */
    size_t n_params;
    /* Opens a store of this kind. */
    int (*open)(const sluice__store_config *cfg, sluice_store **out, char *err, size_t errlen);
    /* Arguments are checked (key length, cost, reading) before this is called. */
    int (*acquire_at)(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                      int64_t cost, int64_t now_ms, sluice_decision *out);
    /* A verb on a key, arguments checked as for acquire_at (a reset's cost
     * is 0, its now_ms the store clock's reading); out is never NULL. */
    int (*operate_at)(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                      sluice__verb verb, int64_t cost, int64_t now_ms, sluice_decision *out);
    /* Fills out as far as it knows; a store that cannot count its keys (a
     * remote one whose server does not answer) sets keys to -1 and says
     * why in the store's message: sluice_store_stats is then SLUICE_ESTORE. */
    void (*stats)(sluice_store *s, sluice_stats *out);
    void (*close)(sluice_store *s);
    /* optional: a batch (requests already checked, results[i] preset to
     * their check's error or 0); NULL: one acquire_at per request */
    void (*acquire_many)(sluice_store *s, const sluice_request *reqs, size_t n, int64_t now_ms,
                         sluice_decision *out, int *results);

    /* ---- the non-blocking side: only a kind that waits on a server ----
     * NULL in a kind that never waits (memory:, shm:): store.c then makes
     * each non-blocking call its blocking one and calls back before it
     * returns, and a loop attached to it is kept but never used. A kind
     * that waits has all five. Each runs on the loop's thread (sluice.h). */
    /* Starts a call (verb: SLUICE__VERB_ACQUIRE or another; arguments
     * checked as for acquire_at and operate_at, a loop attached, cb not
     * NULL; key copied if it is needed after the return). 0: cb(user, rc,
     * d) is then called exactly once, never from within async_at itself
     * (from loop_ready, loop_timeout or loop_detach), with d never NULL
     * (all 0 when rc < 0, the message set with sluice__store_errf first);
     * or an error (SLUICE_ENOMEM), cb never called. */
    int (*async_at)(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                    sluice__verb verb, int64_t cost, int64_t now_ms, sluice_store_cb cb, void *user);
    /* The loop s->loop was attached (store.c checked and copied it): 0, or
     * an error (nothing left watched or armed; s->loop is then cleared). */
    int (*loop_attach)(sluice_store *s);
    /* The loop is being detached: complete every call in flight with
     * SLUICE_ECANCELED, unwatch every fd (sluice__loop_watch(s, fd, 0)),
     * disarm the timer. store.c refuses new calls meanwhile, then clears
     * s->loop and calls its detached hook. */
    void (*loop_detach)(sluice_store *s);
    /* The loop's calls (sluice_store_loop_ready, _timeout), passed on when
     * a loop is attached; an fd the kind does not watch is ignored. */
    void (*loop_ready)(sluice_store *s, int fd, int events);
    void (*loop_timeout)(sluice_store *s);
} sluice__store_ops;

/* Where a store's loop stands (struct sluice_store's loop_state). */
enum { SLUICE__LOOP_NONE = 0, SLUICE__LOOP_ATTACHED, SLUICE__LOOP_DETACHING };

/* The head of every store; each kind's struct starts with it. */
struct sluice_store {
    const sluice__store_ops *ops;
    const sluice_clock *clock;
    /* the attached loop (sluice_store_attach_loop), and where it stands:
     * the loop thread's (sluice.h), read by store.c only for a kind with
     * async_at */
    sluice_loop loop;
    int loop_state;
};
/* What a kind with async_at tells its loop (sluice.h, "The loop
 * interface"): watch fd for events (0: stop); arm the timer to fire in ms
 * (< 0: disarm). Only while a loop is attached. */
static inline int sluice__loop_watch(sluice_store *s, int fd, int events) {
    return s->loop.watch(s->loop.user, fd, events);
}
static inline void sluice__loop_timer(sluice_store *s, int64_t ms) {
    s->loop.timer(s->loop.user, ms);
}
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

/* The kinds built into libsluice: "store/memory/memory.c", "store/shm/shm.c". */
extern const sluice__store_ops sluice__memory_store;
extern const sluice__store_ops sluice__shm_store;

#endif /* SLUICE_STORE_H */
