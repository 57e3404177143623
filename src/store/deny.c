/* store/deny.c: a remote store's cache of denials. After the server denies
 * a request of cost n for (policy, key) at reading t, with each part's
 * figures beside it (how long the part denies a request of cost 1, how
 * long cost n, how long until it is fresh), a request of cost n for the key
 * at a later reading t' is denied here, with no round trip, while some
 * enforced part still denies cost 1: while nothing else changes the
 * server's state, that is exactly the server's answer, field for field
 * (docs/semantics.md: usage never grows with time alone, so each part's
 * denials form a prefix of the time line and its fresh time is fixed):
 *
 *   remaining  0 (a part denies cost 1); part, limit: the first enforced
 *              part that still denies cost 1 (the least remaining, the
 *              first on a tie); part_reset_ms its fresh time less t'
 *   retry      the latest end of the enforced parts' denials of cost n
 *   reset      the latest fresh time of the enforced parts, less t'
 *   shadow_denied  a shadow part still denies cost n
 *
 * Another client's admissions can only make the server's answer a later
 * retry, never an earlier one; a refund or reset through this store drops
 * the key's entry. A request of another cost, or at a reading before the
 * denial, goes to the server.
 *
 * Memory: a fixed table of entries of 320 bytes (keys of up to
 * SLUICE__DENY_KEY_MAX bytes; longer ones are not cached), split into
 * stripes of sets of four, each stripe under its own small lock, so that
 * threads on different keys rarely meet; a new entry takes an empty or
 * ended way of its set, else the one whose denial ends first. */
#include "internal.h"

#include <stdlib.h>
#include <string.h>

#define WAYS 4
#define STRIPES_MAX 64

typedef struct {
    uint64_t hash; /* 0: empty */
    int64_t at_ms, cost;
    int64_t end_ms; /* no enforced part denies cost 1 from here on */
    uint32_t pid;
    uint16_t key_len, n_parts;
    int64_t until1[SLUICE_POLICY_MAX_PARTS]; /* part i denies cost 1 before this reading */
    int64_t until[SLUICE_POLICY_MAX_PARTS];  /* ... cost n */
    int64_t fresh[SLUICE_POLICY_MAX_PARTS];  /* ... is fresh from here on */
    uint8_t key[SLUICE__DENY_KEY_MAX];
} entry;

typedef struct {
    _Alignas(64) sluice__lock lock;
    entry *sets; /* n_sets * WAYS */
    int64_t answered;
} stripe;

struct sluice__deny_cache {
    uint64_t seed[2];
    unsigned n_stripes; /* a power of 2 */
    size_t n_sets;      /* per stripe */
    stripe stripes[STRIPES_MAX];
};

int sluice__deny_new(size_t entries, sluice__deny_cache **out) {
    *out = NULL;
    if (entries == 0) return 0;
    sluice__deny_cache *c = aligned_alloc(64, sizeof *c);
    if (!c) return SLUICE_ENOMEM;
    memset(c, 0, sizeof *c);
    sluice__random_words(c->seed, 2);
    c->n_stripes = 1;
    while (c->n_stripes < STRIPES_MAX && (size_t)c->n_stripes * 2 * WAYS * 4 <= entries) c->n_stripes *= 2;
    size_t per = (entries + c->n_stripes - 1) / c->n_stripes;
    c->n_sets = (per + WAYS - 1) / WAYS;
    for (unsigned i = 0; i < c->n_stripes; i++) {
        if (!(c->stripes[i].sets = calloc(c->n_sets * WAYS, sizeof(entry)))) {
            sluice__deny_free(c);
            return SLUICE_ENOMEM;
        }
        atomic_init(&c->stripes[i].lock.held, 0);
    }
    *out = c;
    return 0;
}

void sluice__deny_free(sluice__deny_cache *c) {
    if (!c) return;
    for (unsigned i = 0; i < c->n_stripes; i++) free(c->stripes[i].sets);
    free(c);
}

static uint64_t hash_of(const sluice__deny_cache *c, unsigned pid, const void *key, size_t len) {
    uint64_t k[2] = {c->seed[0] ^ ((uint64_t)(pid + 1) * UINT64_C(0x9e3779b97f4a7c15)), c->seed[1]};
    return sluice__siphash13(k, key, len) | 1; /* never 0: empty */
}

/* The key's set, and in *st the stripe whose lock guards it. */
static entry *set_of(sluice__deny_cache *c, uint64_t h, stripe **st) {
    *st = &c->stripes[h & (c->n_stripes - 1)];
    return &(*st)->sets[(h >> 8) % c->n_sets * WAYS];
}

static entry *find(entry *set, uint64_t h, unsigned pid, const void *key, size_t len) {
    for (int w = 0; w < WAYS; w++) {
        entry *e = &set[w];
        if (e->hash == h && e->pid == pid && e->key_len == len && memcmp(e->key, key, len) == 0) return e;
    }
    return NULL;
}

void sluice__deny_put(sluice__deny_cache *c, const sluice_policy *p, unsigned pid, const void *key, size_t len,
                      int64_t at_ms, int64_t cost, const sluice__deny_part *parts) {
    sluice__deny_put_since(c, p, pid, key, len, at_ms, cost, parts, NULL, 0);
}

void sluice__deny_put_since(sluice__deny_cache *c, const sluice_policy *p, unsigned pid, const void *key,
                            size_t len, int64_t at_ms, int64_t cost, const sluice__deny_part *parts,
                            const _Atomic uint64_t *epoch, uint64_t seen) {
    if (!c) return;
    if (len > SLUICE__DENY_KEY_MAX) return;
    int64_t end = at_ms;
    for (size_t i = 0; i < p->n_parts; i++)
        if (!p->shadow[i] && parts[i].retry1_ms > 0 && at_ms + parts[i].retry1_ms > end) end = at_ms + parts[i].retry1_ms;
    uint64_t h = hash_of(c, pid, key, len);
    stripe *st;
    entry *set = set_of(c, h, &st);
    sluice__lock_take(&st->lock);
    entry *e = find(set, h, pid, key, len);
    if (epoch && atomic_load(epoch) != seen) { /* a refund or reset since: the denial may be stale */
        if (e) e->hash = 0;
    } else if (end == at_ms) { /* nothing to answer: cost 1 is free somewhere */
        if (e) e->hash = 0;
    } else {
        if (!e) { /* an empty or ended way, else the one that ends first */
            e = &set[0];
            for (int w = 0; w < WAYS; w++) {
                if (set[w].hash == 0 || set[w].end_ms <= at_ms) {
                    e = &set[w];
                    break;
                }
                if (set[w].end_ms < e->end_ms) e = &set[w];
            }
        }
        e->hash = h;
        e->pid = pid;
        e->key_len = (uint16_t)len;
        e->n_parts = (uint16_t)p->n_parts;
        memcpy(e->key, key, len);
        e->at_ms = at_ms;
        e->cost = cost;
        e->end_ms = end;
        for (size_t i = 0; i < p->n_parts; i++) { /* the server's waits are below 2^62: no overflow */
            e->until1[i] = at_ms + parts[i].retry1_ms;
            e->until[i] = parts[i].retry_ms == INT64_MAX ? INT64_MAX : at_ms + parts[i].retry_ms;
            e->fresh[i] = at_ms + parts[i].reset_ms;
        }
    }
    sluice__lock_give(&st->lock);
}

static int64_t left(int64_t until, int64_t now_ms) {
    return until > now_ms ? until - now_ms : 0;
}

int sluice__deny_get(sluice__deny_cache *c, const sluice_policy *p, unsigned pid, const void *key, size_t len,
                     int64_t cost, int64_t now_ms, sluice_decision *d) {
    if (!c || len > SLUICE__DENY_KEY_MAX) return 0;
    uint64_t h = hash_of(c, pid, key, len);
    stripe *st;
    entry *set = set_of(c, h, &st);
    int answered = 0;
    sluice__lock_take(&st->lock);
    entry *e = find(set, h, pid, key, len);
    if (e && e->n_parts == p->n_parts && e->cost == cost && now_ms >= e->at_ms) {
        size_t zero = p->n_parts;
        for (size_t i = 0; i < p->n_parts && zero == p->n_parts; i++)
            if (!p->shadow[i] && now_ms < e->until1[i]) zero = i;
        if (zero == p->n_parts) {
            e->hash = 0; /* over: the server decides again */
        } else {
            memset(d, 0, sizeof *d);
            d->enforced = true;
            d->part = (int32_t)zero;
            d->limit = p->parts[zero].limit;
            d->part_reset_ms = left(e->fresh[zero], now_ms);
            for (size_t i = 0; i < p->n_parts; i++) {
                if (p->shadow[i]) {
                    d->shadow_denied |= now_ms < e->until[i];
                    continue;
                }
                if (left(e->until[i], now_ms) > d->retry_after_ms) d->retry_after_ms = left(e->until[i], now_ms);
                if (left(e->fresh[i], now_ms) > d->reset_ms) d->reset_ms = left(e->fresh[i], now_ms);
            }
            st->answered++;
            answered = 1;
        }
    }
    sluice__lock_give(&st->lock);
    return answered;
}

void sluice__deny_drop(sluice__deny_cache *c, unsigned pid, const void *key, size_t len) {
    if (!c || len > SLUICE__DENY_KEY_MAX) return;
    uint64_t h = hash_of(c, pid, key, len);
    stripe *st;
    entry *set = set_of(c, h, &st);
    sluice__lock_take(&st->lock);
    entry *e = find(set, h, pid, key, len);
    if (e) e->hash = 0;
    sluice__lock_give(&st->lock);
}

int64_t sluice__deny_answered(const sluice__deny_cache *c) {
    int64_t n = 0;
    for (unsigned i = 0; c && i < c->n_stripes; i++) {
        stripe *st = (stripe *)&c->stripes[i];
        sluice__lock_take(&st->lock);
        n += st->answered;
        sluice__lock_give(&st->lock);
    }
    return n;
}

void sluice__deny_parts_of(const sluice_policy *p, sluice__state *states, int64_t now_ms, int64_t cost,
                           sluice__deny_part *out) {
    for (size_t i = 0; i < p->n_parts; i++) {
        const sluice__algo *a = p->algo[i];
        sluice_decision d;
        a->decide(&p->params[i], &states[i], now_ms, 1, &d, 0); /* a log that needs room: decided all the same */
        out[i].retry1_ms = d.allowed ? 0 : d.retry_after_ms;
        if (cost > p->params[i].limit) { /* a shadow part's: it never admits it */
            out[i].retry_ms = INT64_MAX;
        } else {
            a->decide(&p->params[i], &states[i], now_ms, cost, &d, 0);
            out[i].retry_ms = d.allowed ? 0 : d.retry_after_ms;
        }
        a->peek(&p->params[i], &states[i], now_ms, &d);
        out[i].reset_ms = d.reset_ms;
    }
}
