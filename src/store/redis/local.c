/* store/redis/local.c: on_error=local, the local limit. When the server
 * cannot decide (down, a timeout, an error reply such as refused writes),
 * an in-process memory: store decides, under the same policy with each
 * part scaled to this host's share 1/N:
 *
 *   limit, capacity   floor(limit / N), at least 1
 *   rate R per P      R/N per P when N divides R, else R per N*P (the same
 *                     rate, exactly), else (N*P beyond 30 days)
 *                     floor(R/N) per P, at least 1
 *
 * so N hosts each at their share admit at most what the shared limit does
 * (rounding only ever takes away), except where a share would fall below 1
 * and keeps 1. A request (or a peek) costing more than its share's limit
 * (it fits the whole limit, never the share) is denied with retry_after_ms
 * at least 100, when the server may be back, and the other fields of a
 * peek at cost 1. Peeks, refunds (capped at the share's limit) and resets
 * are made on the local limit too; only requests count in stats.local.
 *
 * N: local_share=1/N fixes it; else each store learns it from the instance
 * registry, PREFIX{instances}, a sorted set of store instance ids (host,
 * pid, a random number) scored by the wall-clock ms they were last seen:
 *
 *   ZADD K NOW ID; ZREMRANGEBYSCORE K -inf NOW-60000; PEXPIRE K 120000; ZCARD K
 *
 * sent ahead of an ordinary decision in the same write, replies read in
 * order before the decision's (one round trip, no thread of its own), at
 * most once every REGISTER_EVERY_MS per store. ZCARD (this store counted)
 * is N, kept for when the server is gone; 1 before any is learned. Scores
 * are CLOCK_REALTIME: hosts whose clocks disagree by seconds move the 60 s
 * window by as much. In a cluster the key has a slot, served by one node:
 * the registry goes only with a decision sent to that node (so no request
 * ever waits on a second node); a store whose keys all live elsewhere
 * keeps N=1 (a registry per node, read from all, would count the same
 * instances; its keys would have to be found per slot, for little gain).
 *
 * An episode: from the first local decision until the server decides
 * again, the local states exist (the memory: store, and each policy's
 * scaled copy, made once per policy per episode); the first decision the
 * server makes drops them, so the next outage starts fresh. A
 * reader-writer lock: decisions read; opening and dropping write. */
#define _GNU_SOURCE
#include "local.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#define REGISTER_EVERY_MS 3000
#define SEEN_WITHIN_MS 60000            /* instances counted: seen this recently */
#define REGISTRY_TTL_MS (2 * SEEN_WITHIN_MS)
#define SHARE_N_MAX 1000000
#define REGISTRY_COMMANDS 4

/* A policy the local store met: the policy, and its scaled copy. */
typedef struct {
    sluice_policy policy;
    sluice_policy *scaled;
} scaled_item;

struct sluice__redis_local {
    int64_t fixed_n;                /* local_share=1/N: N; 0: learned */
    _Atomic int64_t learned_n;      /* the registry's last count; 1 before any */
    _Atomic int64_t register_at_ms; /* monotonic ms: the next registration is due */
    char key[64 + 16];              /* PREFIX{instances} */
    size_t key_len;
    unsigned slot;
    char id[160];
    size_t id_len;
    atomic_llong decisions;    /* stats.local */
    atomic_int active;         /* an episode is open (mem != NULL) */
    pthread_rwlock_t lock;     /* guards mem, n, scaled: write to open or drop */
    sluice_store *mem;         /* the episode's local states */
    int64_t n;                 /* the episode's N */
    sluice__policy_set scaled; /* items: scaled_item */
};

/* ---- the share ---- */

static int64_t at_least_1(int64_t x) {
    return x > 0 ? x : 1;
}

/* Part c scaled to the share 1/n (the table at the top). */
static sluice_config scale_part(sluice_config c, int64_t n) {
    c.limit = at_least_1(c.limit / n);
    if (c.rate) { /* a bucket */
        if (c.rate % n == 0) c.rate /= n;
        else if (c.period_ms <= SLUICE_PERIOD_MAX_MS / n) c.period_ms *= n;
        else c.rate = at_least_1(c.rate / n);
    }
    return c;
}

/* The policy set's init: the scaled copy, at the episode's N. */
static int scaled_init(void *item, void *ctx) {
    scaled_item *it = item;
    const struct sluice__redis_local *l = ctx;
    sluice_config parts[SLUICE_POLICY_MAX_PARTS];
    for (size_t i = 0; i < it->policy.n_parts; i++) parts[i] = scale_part(it->policy.parts[i], l->n);
    return sluice_policy_new_shadow(it->policy.name, parts, it->policy.shadow, it->policy.n_parts, &it->scaled);
}

static void scaled_reset(struct sluice__redis_local *l) {
    memset(&l->scaled, 0, sizeof l->scaled);
    l->scaled.item_size = sizeof(scaled_item);
    l->scaled.init = scaled_init;
    l->scaled.ctx = l;
}

/* "1/N", N in 1..SHARE_N_MAX, digits only: N, or 0. */
static int64_t parse_share(const char *text, size_t len) {
    if (len < 3 || len > 9 || text[0] != '1' || text[1] != '/' || text[2] == '0') return 0;
    int64_t n = 0;
    for (size_t i = 2; i < len; i++) {
        if (text[i] < '0' || text[i] > '9') return 0;
        n = n * 10 + (text[i] - '0');
    }
    return n <= SHARE_N_MAX ? n : 0;
}

/* ---- an episode ---- */

/* Under the write lock. */
static int open_episode(redis_store *r, struct sluice__redis_local *l) {
    char err[256];
    sluice_store_options o = SLUICE_STORE_OPTIONS_INIT;
    o.clock = r->head.clock; /* a reset reads it, as the server's reset the store's */
    int rc = sluice_store_open_err("memory:", &o, &l->mem, err, sizeof err);
    if (rc) {
        sluice__store_errf(&r->head, "redis: on_error=local: cannot open the local store: %s", err);
        return rc;
    }
    l->n = l->fixed_n ? l->fixed_n : atomic_load(&l->learned_n);
    scaled_reset(l);
    atomic_store_explicit(&l->active, 1, memory_order_release);
    return 0;
}

/* Under the write lock. */
static void drop_episode(struct sluice__redis_local *l) {
    for (unsigned i = 0; i < l->scaled.n; i++)
        sluice_policy_free(((scaled_item *)sluice__policy_item(&l->scaled, i))->scaled);
    sluice__policy_set_free(&l->scaled);
    scaled_reset(l);
    sluice_store_close(l->mem);
    l->mem = NULL;
    atomic_store_explicit(&l->active, 0, memory_order_release);
}

/* ---- the hooks ---- */

int sluice__redis_local_open(redis_store *r, const char *share, size_t share_len, char *err, size_t errlen) {
    if (r->on_error != SLUICE_ON_ERROR_LOCAL) {
        if (!share) return 0;
        sluice__errf(err, errlen, "store URL parameter local_share=%.*s: only with on_error=local", (int)share_len,
                     share);
        return SLUICE_EINVAL;
    }
    int64_t fixed_n = 0;
    if (share && !(fixed_n = parse_share(share, share_len))) {
        sluice__errf(err, errlen, "store URL parameter local_share=%.*s: expected 1/N, this host's share of each "
                     "limit while the server cannot decide, with N an integer in 1..%d", (int)share_len, share,
                     SHARE_N_MAX);
        return SLUICE_EINVAL;
    }
    struct sluice__redis_local *l = calloc(1, sizeof *l);
    if (!l || pthread_rwlock_init(&l->lock, NULL)) {
        free(l);
        sluice__errf(err, errlen, "out of memory");
        return SLUICE_ENOMEM;
    }
    l->fixed_n = fixed_n;
    atomic_init(&l->learned_n, 1);
    atomic_init(&l->register_at_ms, 0); /* due at the first decision */
    l->key_len = (size_t)snprintf(l->key, sizeof l->key, "%s{instances}", r->prefix);
    l->slot = sluice__redis_slot(l->key, l->key_len);
    char host[64] = "?";
    gethostname(host, sizeof host - 1);
    host[sizeof host - 1] = 0;
    uint64_t nonce = 0;
    if (getrandom(&nonce, sizeof nonce, 0) != (ssize_t)sizeof nonce)
        nonce = (uint64_t)(uintptr_t)l ^ (uint64_t)sluice__redis_real_ms() << 20;
    l->id_len = (size_t)snprintf(l->id, sizeof l->id, "%s:%d:%016llx", host, (int)getpid(), (unsigned long long)nonce);
    scaled_reset(l);
    r->local = l;
    return 0;
}

void sluice__redis_local_free(redis_store *r) {
    struct sluice__redis_local *l = r->local;
    if (!l) return;
    if (l->mem) drop_episode(l);
    pthread_rwlock_destroy(&l->lock);
    free(l);
    r->local = NULL;
}

int64_t sluice__redis_local_count(const redis_store *r) {
    return r->local ? atomic_load(&r->local->decisions) : 0;
}

void sluice__redis_local_answered(redis_store *r) {
    struct sluice__redis_local *l = r->local;
    if (!l || !atomic_load_explicit(&l->active, memory_order_acquire)) return;
    pthread_rwlock_wrlock(&l->lock);
    if (l->mem) drop_episode(l);
    pthread_rwlock_unlock(&l->lock);
}

int sluice__redis_local_decide(redis_store *r, const char *why, char verb, const sluice_policy *p,
                               const void *key, size_t key_len, int64_t cost, int64_t now_ms, sluice_decision *d) {
    struct sluice__redis_local *l = r->local;
    atomic_fetch_add(&r->failures, 1);
    pthread_rwlock_rdlock(&l->lock);
    while (!l->mem) { /* the first local decision of an episode opens it */
        pthread_rwlock_unlock(&l->lock);
        pthread_rwlock_wrlock(&l->lock);
        int rc = l->mem ? 0 : open_episode(r, l);
        pthread_rwlock_unlock(&l->lock);
        if (rc) return rc;
        pthread_rwlock_rdlock(&l->lock);
    }
    unsigned id;
    int64_t n = l->n;
    int rc = sluice__policy_set_id(&l->scaled, &r->head, p, &id, NULL);
    if (rc == 0) {
        const sluice_policy *share = ((const scaled_item *)sluice__policy_item(&l->scaled, id))->scaled;
        int64_t most = sluice_policy_max_cost(share);
        if (verb == 'x') {
            rc = sluice_store_reset(l->mem, share, key, key_len, d); /* at the store's clock, as the server's */
        } else if (verb == 'r') {
            rc = sluice_store_refund_at(l->mem, share, key, key_len, cost < most ? cost : most, now_ms, d);
        } else if (cost <= most) {
            rc = verb == 'p' ? sluice_store_peek_at(l->mem, share, key, key_len, cost, now_ms, d)
                             : sluice_store_acquire_at(l->mem, share, key, key_len, cost, now_ms, d);
        } else if ((rc = sluice_store_peek_at(l->mem, share, key, key_len, 1, now_ms, d)) == 0) {
            /* beyond the share's limit: never admitted here; the fields a
             * peek at cost 1 gives, remaining what is available now */
            if (d->allowed) d->remaining += 1;
            d->allowed = false;
            d->delay_ms = 0;
            if (d->retry_after_ms < RETRY_MS) d->retry_after_ms = RETRY_MS;
        }
        if (rc) {
            char msg[256];
            snprintf(msg, sizeof msg, "%s", sluice_store_errmsg(l->mem));
            sluice__store_errf(&r->head, "redis: %s; the local limit failed too: %s", why, msg);
        }
    }
    pthread_rwlock_unlock(&l->lock);
    if (rc) return rc;
    d->enforced = true;
    d->local = true;
    if (verb == 'a') { /* verbs are not decisions */
        atomic_fetch_add(&l->decisions, 1);
        atomic_fetch_add_explicit(d->allowed ? &r->allowed : &r->denied, 1, memory_order_relaxed);
    }
    sluice__store_errf(&r->head, "redis: %s; decided by the local limit (on_error=local), this host's share 1/%lld%s",
                       why, (long long)n, l->fixed_n ? " (local_share)" : "");
    return 0;
}

/* ---- the instance registry, on the way of a decision ---- */

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* Whether this store registers now, with a call to node n: due, the
 * registry's node, and this thread the one that takes the turn. */
static int registers(redis_store *r, struct sluice__redis_local *l, const node *n, const call *k) {
    if (!l || l->fixed_n) return 0;
    int64_t now = sluice__redis_real_ms(), at = atomic_load_explicit(&l->register_at_ms, memory_order_relaxed);
    if (now < at) return 0;
    if (r->cluster && (sluice__redis_node_for(r, l->slot) != n || sluice__redis_node_for(r, k->slot) != n))
        return 0; /* not the registry's node, or an ASK elsewhere */
    return atomic_compare_exchange_strong(&l->register_at_ms, &at, now + REGISTER_EVERY_MS);
}

redisReply *sluice__redis_local_run(redis_store *r, const node *n, redisContext *c, int64_t deadline_ms,
                                    call *k, char *why, size_t whylen) {
    struct sluice__redis_local *l = r->local;
    if (!registers(r, l, n, k)) return sluice__redis_run(r, c, deadline_ms, k->argc, k->argv, k->lens, why, whylen);
    int64_t wall = wall_ms();
    char seen[24], old[24], ttl[24];
    size_t seen_len = (size_t)snprintf(seen, sizeof seen, "%lld", (long long)wall);
    size_t old_len = (size_t)snprintf(old, sizeof old, "%lld", (long long)(wall - SEEN_WITHIN_MS));
    size_t ttl_len = (size_t)snprintf(ttl, sizeof ttl, "%d", REGISTRY_TTL_MS);
    const char *zadd[] = {"ZADD", l->key, seen, l->id}, *zrem[] = {"ZREMRANGEBYSCORE", l->key, "-inf", old};
    const char *pexpire[] = {"PEXPIRE", l->key, ttl}, *zcard[] = {"ZCARD", l->key};
    size_t zadd_lens[] = {4, l->key_len, seen_len, l->id_len}, zrem_lens[] = {16, l->key_len, 4, old_len};
    size_t pexpire_lens[] = {7, l->key_len, ttl_len}, zcard_lens[] = {5, l->key_len};
    if (redisAppendCommandArgv(c, 4, zadd, zadd_lens) != REDIS_OK ||
        redisAppendCommandArgv(c, 4, zrem, zrem_lens) != REDIS_OK ||
        redisAppendCommandArgv(c, 3, pexpire, pexpire_lens) != REDIS_OK ||
        redisAppendCommandArgv(c, 2, zcard, zcard_lens) != REDIS_OK ||
        redisAppendCommandArgv(c, k->argc, k->argv, k->lens) != REDIS_OK) {
        snprintf(why, whylen, "out of memory");
        return NULL; /* the connection holds part of a pipeline: the caller drops it */
    }
    int shortened = sluice__redis_shorten_timeout(r, c, deadline_ms);
    redisReply *reply = NULL;
    for (int i = 0; i <= REGISTRY_COMMANDS; i++) {
        void *v = NULL;
        if (redisGetReply(c, &v) != REDIS_OK || !v) {
            snprintf(why, whylen, "%s", c->errstr[0] ? c->errstr : "connection lost");
            return NULL;
        }
        redisReply *got = v;
        if (i == REGISTRY_COMMANDS) {
            reply = got;
            break;
        }
        /* the registry's replies: an error (a full server) only means N is not learned this time */
        if (i == REGISTRY_COMMANDS - 1 && got->type == REDIS_REPLY_INTEGER && got->integer >= 1)
            atomic_store(&l->learned_n, got->integer < SHARE_N_MAX ? got->integer : SHARE_N_MAX);
        freeReplyObject(got);
    }
    if (shortened) sluice__redis_restore_timeout(r, c);
    return reply;
}
