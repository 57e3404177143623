/* store/redis/redis_internal.h: what the files of libsluice-redis share:
 * the store, its nodes and their pools, what it knows of a policy, one
 * call of the decision script; and each file's functions, under its name.
 *
 *   redis.c    the store: its URL, open, stats, close, the operations tables
 *   pool.c     connections: each node's pool, commands within a deadline
 *   route.c    where a call goes: the nodes by address, a cluster's slot
 *              map, sending one call through redirections
 *   decide.c   policies and decisions: decide.lua's arguments and reply
 *   async.c    the non-blocking calls on the caller's loop (and conn.c,
 *              their connections: async_internal.h)
 *   decide.lua the decision itself, on the server
 *   local.c    on_error=local: the local limit, the instance registry (local.h)
 *   slot.c     a key name's cluster slot
 *   sha1.c     the script's SHA-1, for EVALSHA */
#ifndef SLUICE_REDIS_INTERNAL_H
#define SLUICE_REDIS_INTERNAL_H

#include "internal.h"

#include <hiredis/hiredis.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#define POOL_MAX 64
#define NODES_MAX 64
#define RETRY_MS 100                  /* a down node is tried again after this */
#define NO_DEADLINE INT64_MAX         /* open: each step has its own timeouts */
#define CLIENT_TIME_MAX_MS (INT64_C(1) << 50) /* exact in Lua's doubles */
#define NAME_MAX_BYTES (64 + SLUICE_POLICY_NAME_MAX + 48 + SLUICE_KEY_MAX)
#define ARGS_MAX (3 + 1 + SLUICE_POLICY_MAX_PARTS + 4)
#define CFG_MAX (64 * SLUICE_POLICY_MAX_PARTS) /* a configuration's text for the script (decide.lua's CFG) */
#define ALL_LOGS ((1u << SLUICE_POLICY_MAX_PARTS) - 1)

/* A server (a cluster's master, or the one server), and its pool. */
typedef struct {
    char host[256];
    int port;
    pthread_mutex_t mu; /* guards the pool */
    pthread_cond_t freed; /* a connection came back, or a place in the pool (CLOCK_MONOTONIC) */
    redisContext *idle[POOL_MAX];
    int n_idle, n_open;
    int failed;                  /* the last connect or command failed */
    _Atomic int64_t retry_at_ms; /* while down: no connect before this  */
} node;

/* What the store knows of a policy: the start of its key names (its name
 * alone: every configuration of a name shares its keys), its
 * configuration as decide.lua takes it (and keeps it beside a key's
 * state), and which of its parts keep a sorted set of their own (a
 * state that grows: SLUICE__ALGO_GROWS). */
typedef struct {
    sluice_policy policy;
    char name[64 + SLUICE_POLICY_NAME_MAX + 4]; /* PREFIX{NAME| */
    size_t name_len;
    unsigned logs; /* bit i: part i has a sorted set of its own */
    char cfg[CFG_MAX]; /* decide.lua's CFG */
    size_t cfg_len;
    /* another configuration of the name is known to the store (a retune
     * through it converts keys, which may end a denial early): the cache
     * of denials is not used for it; set once, at a twin's registration */
    atomic_int twins;
} rpolicy;

typedef struct {
    struct sluice_store head;
    int cluster;
    int db;
    int client_clock;
    sluice_on_error on_error;
    int64_t connect_timeout_ms, timeout_ms, ttl_grace_ms;
    int pool;
    int verify; /* open: PING every node it needs */
    char prefix[64];
    char sha[41];
    sluice__policy_set policies; /* items: rpolicy */
    _Atomic int64_t now_ms;      /* clock=client: the store's time */
    pthread_mutex_t nodes_mu;    /* guards n_nodes growing and slots */
    node *nodes[NODES_MAX];
    _Atomic int n_nodes;
    _Atomic uint8_t slots[16384]; /* cluster: slot -> node */
    atomic_llong allowed, denied, failures, reconnects, shadow_denied;
    struct sluice__redis_local *local; /* on_error=local (local.c); else NULL */
    sluice__deny_cache *deny;          /* deny_cache=N entries; NULL: off (decide.c) */
    _Atomic uint64_t deny_epoch;       /* refunds and resets made: see decide.c */
    struct redis_async *async;         /* the non-blocking side (async.c): the loop thread's */
} redis_store;
typedef struct redis_async redis_async;

/* One call of the script: what it asks (a decision, or a verb), EVALSHA's
 * arguments, and where it goes. */
typedef struct {
    const rpolicy *rp;
    const void *key;
    size_t key_len;
    char verb;         /* a(cquire), p(eek), r(efund), x (reset): decide.lua's ARGV[2] */
    unsigned logs;     /* bit i: the sorted set of part i is among its names */
    int64_t cost, now_ms; /* now_ms: the store's time (clock=client) */
    const char *argv[ARGS_MAX];
    size_t lens[ARGS_MAX];
    int argc;
    char names[1 + SLUICE_POLICY_MAX_PARTS][NAME_MAX_BYTES + 8];
    char now[24], cost_text[32], grace[24], numkeys[8];
    unsigned slot;
    int64_t reading_ms; /* clock=client: the caller's reading */
    /* the cache of denials (decide.c): the policy's id, the refunds and
     * resets made before the call, and clock=server: this host's
     * monotonic ms before it was sent */
    unsigned pid;
    uint64_t deny_epoch;
    int64_t sent_ms;
} call;

/* ---- time ---- */

static inline int64_t sluice__redis_real_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* The deadline of a call that starts now (see the top of redis.c). */
static inline int64_t sluice__redis_deadline(const redis_store *r) {
    return sluice__redis_real_ms() + r->connect_timeout_ms + r->timeout_ms;
}

/* ---- "pool.c" ---- */
node *sluice__redis_node_new(const char *host, size_t host_len, int port);
void sluice__redis_node_free(node *n);
/* c's timeout for a call that ends by deadline_ms (1: shortened), and back. */
int sluice__redis_shorten_timeout(const redis_store *r, redisContext *c, int64_t deadline_ms);
void sluice__redis_restore_timeout(const redis_store *r, redisContext *c);
/* One command on c by deadline_ms: its reply, or NULL with why. */
redisReply *sluice__redis_run(const redis_store *r, redisContext *c, int64_t deadline_ms, int argc,
                              const char **argv, const size_t *lens, char *why, size_t whylen);
/* A connection to n for a call that ends by deadline_ms, or NULL with why;
 * given back with sluice__redis_give (broken: dropped). */
redisContext *sluice__redis_take(redis_store *r, node *n, int64_t deadline_ms, char *why, size_t whylen);
void sluice__redis_give(node *n, redisContext *c, int broken);
/* why, for a call sent on c to n that got no reply: it may have run. */
void sluice__redis_lost_reply(const redis_store *r, const node *n, const redisContext *c, char *why,
                              size_t whylen);
/* A command of one word outside any decision (DBSIZE, PING) on node n by
 * deadline_ms: its reply, or NULL with why, which names n. */
redisReply *sluice__redis_ask(redis_store *r, node *n, const char *cmd, int64_t deadline_ms, char *why,
                              size_t whylen);

/* ---- "route.c" ---- */
/* The index of node host:port, added when new (-1: no room or memory). */
int sluice__redis_node_index(redis_store *r, const char *host, size_t host_len, int port);
/* Reads the slot map (CLUSTER SLOTS) from the first node that answers, by
 * deadline_ms: 0, or -1 with why. */
int sluice__redis_refresh_slots(redis_store *r, int64_t deadline_ms, char *why, size_t whylen);
/* The node that serves slot (the one server when not a cluster). */
static inline node *sluice__redis_node_for(redis_store *r, unsigned slot) {
    return r->nodes[r->cluster ? atomic_load_explicit(&r->slots[slot], memory_order_acquire) : 0];
}
/* Whether a reply proves the server did not run the call (so it may be
 * sent again): NOSCRIPT, MOVED, ASK, TRYAGAIN. */
int sluice__redis_not_run(const redisReply *reply);
/* Sends call k by deadline_ms, following what proves it did not run: its
 * reply, or NULL with why. */
redisReply *sluice__redis_send(redis_store *r, call *k, int64_t deadline_ms, char *why, size_t whylen);

/* ---- "decide.c" ---- */
/* The policy registry's init: an rpolicy for the policy it starts with. */
int sluice__redis_policy_init(void *item, void *ctx);
int sluice__redis_acquire_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                             int64_t cost, int64_t now_ms, sluice_decision *d);
int sluice__redis_operate_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                             sluice__verb verb, int64_t cost, int64_t now_ms, sluice_decision *d);
void sluice__redis_acquire_many(sluice_store *s, const sluice_request *reqs, size_t n, int64_t now_ms,
                                sluice_decision *out, int *results);

/* The steps of one call, for async.c: prepare (0 or an error), build
 * (after k->logs grew), read_reply (0; 1: the script asks for the names in
 * *need; -1 with why), failed (what on_error says, the message set),
 * count (a decision counted in the stats). */
int sluice__redis_prepare(redis_store *r, const sluice_policy *p, const void *key, size_t key_len, char verb,
                          int64_t cost, int64_t now_ms, call *k);
void sluice__redis_build(redis_store *r, call *k);
int sluice__redis_read_reply(redis_store *r, const call *k, redisReply *reply, sluice_decision *d, unsigned *need,
                             char *why, size_t whylen);
/* on_error's decision (on_error=local: the local limit's) for call k */
int sluice__redis_failed(redis_store *r, const char *why, const call *k, sluice_decision *d);
/* The cache of denials: k's decision from it (1, counted) or 0; after a
 * refund or reset k made (or may have), the key's entry dropped */
int sluice__redis_deny_answer(redis_store *r, const call *k, sluice_decision *d);
void sluice__redis_deny_forget(redis_store *r, const call *k);
void sluice__redis_count(redis_store *r, const call *k, const sluice_decision *d);

/* ---- "async.c": the store's non-blocking entries (store.h) ---- */
int sluice__redis_async_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                           sluice__verb verb, int64_t cost, int64_t now_ms, sluice_store_cb cb, void *user);
int sluice__redis_loop_attach(sluice_store *s);
void sluice__redis_loop_detach(sluice_store *s);
void sluice__redis_loop_ready(sluice_store *s, int fd, int events);
void sluice__redis_loop_timeout(sluice_store *s);
/* Frees what the non-blocking side keeps (the loop detached already). */
void sluice__redis_async_free(redis_store *r);

/* ---- "sha1.c": the SHA-1 of data, as 40 hex digits and a NUL ---- */
void sluice__sha1_hex(const void *data, size_t len, char out[41]);

/* ---- "slot.c": the Redis Cluster slot of a key name (CRC16 of its hash tag) ---- */
unsigned sluice__redis_slot(const char *name, size_t len);

/* decide.lua, embedded at build time (cmake/embed.cmake) */
extern const char sluice__redis_decide_lua[];

#endif
