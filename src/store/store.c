/* store/store.c: what all stores share: the argument checks every call
 * starts with (before the kind's operations table is called), the blocking
 * wait, batches, stats, the non-blocking calls and the loop interface, the
 * registry of the policies a store has met, and the error message channel.
 * Choosing a kind by URL and reading its options is kinds.c's. */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The message of the calling thread's last failed call, and on which store:
 * per thread, so threads sharing a store never overwrite each other's. */
static _Thread_local struct {
    const sluice_store *store;
    char text[256];
} last_error;

void sluice__store_errf(const sluice_store *s, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error.text, sizeof last_error.text, fmt, ap);
    va_end(ap);
    last_error.store = s;
}

/* The checks every store's decision starts with; 0 or the error, with its
 * message. request_ok() is the same test, inline and without the message. */
static inline int request_ok(const sluice_policy *p, const void *key, size_t key_len, int64_t cost,
                             int64_t now_ms) {
    return p && key && key_len - 1 < SLUICE_KEY_MAX && sluice__time_ok(now_ms) && cost >= 1 &&
           cost <= p->max_cost;
}

static __attribute__((noinline, cold)) int check_request(sluice_store *s, const sluice_policy *p,
                                                         const void *key, size_t key_len,
                                                         int64_t cost, int64_t now_ms) {
    if (!p || !key) {
        sluice__store_errf(s, "%s is NULL", !p ? "policy" : "key");
        return SLUICE_EINVAL;
    }
    if (key_len < 1 || key_len > SLUICE_KEY_MAX) {
        sluice__store_errf(s, "key of %zu bytes: keys are 1..%d bytes", key_len, SLUICE_KEY_MAX);
        return SLUICE_EINVAL;
    }
    if (!sluice__time_ok(now_ms)) {
        sluice__store_errf(s, "reading %lld ms is outside the accepted range", (long long)now_ms);
        return SLUICE_EINVAL;
    }
    if (sluice__policy_check_cost(p, cost)) {
        sluice__store_errf(s, "cost %lld is outside 1..%lld (policy %s)", (long long)cost,
                           (long long)p->max_cost, p->name);
        return SLUICE_ECOST;
    }
    return 0;
}

int sluice_store_acquire_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                            int64_t cost, int64_t now_ms, sluice_decision *out) {
    if (!s) return SLUICE_EINVAL;
    if (!out) {
        sluice__store_errf(s, "decision is NULL");
        return SLUICE_EINVAL;
    }
    if (__builtin_expect(!request_ok(p, key, key_len, cost, now_ms), 0))
        return check_request(s, p, key, key_len, cost, now_ms);
    return s->ops->acquire_at(s, p, key, key_len, cost, now_ms, out);
}

/* The verbs: the same checks as a decision's (a reset has no cost), then
 * the kind's operate_at, with a decision to fill when the caller gave
 * none. */
static int operate(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len, sluice__verb verb,
                   int64_t cost, int64_t now_ms, sluice_decision *out) {
    if (!s) return SLUICE_EINVAL;
    if (!out && verb == SLUICE__VERB_PEEK) {
        sluice__store_errf(s, "decision is NULL");
        return SLUICE_EINVAL;
    }
    int64_t checked_cost = verb == SLUICE__VERB_RESET ? 1 : cost;
    if (!request_ok(p, key, key_len, checked_cost, now_ms))
        return check_request(s, p, key, key_len, checked_cost, now_ms);
    sluice_decision ignored;
    return s->ops->operate_at(s, p, key, key_len, verb, cost, now_ms, out ? out : &ignored);
}

int sluice_store_peek_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len, int64_t cost,
                         int64_t now_ms, sluice_decision *out) {
    return operate(s, p, key, key_len, SLUICE__VERB_PEEK, cost, now_ms, out);
}

int sluice_store_peek(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len, int64_t cost,
                      sluice_decision *out) {
    if (!s) return SLUICE_EINVAL;
    return sluice_store_peek_at(s, p, key, key_len, cost, sluice_clock_now_ms(s->clock), out);
}

int sluice_store_refund_at(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len, int64_t cost,
                           int64_t now_ms, sluice_decision *out) {
    return operate(s, p, key, key_len, SLUICE__VERB_REFUND, cost, now_ms, out);
}

int sluice_store_refund(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len, int64_t cost,
                        sluice_decision *out) {
    if (!s) return SLUICE_EINVAL;
    return sluice_store_refund_at(s, p, key, key_len, cost, sluice_clock_now_ms(s->clock), out);
}

int sluice_store_reset(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                       sluice_decision *out) {
    if (!s) return SLUICE_EINVAL;
    return operate(s, p, key, key_len, SLUICE__VERB_RESET, 0, sluice_clock_now_ms(s->clock), out);
}

typedef struct {
    sluice_store *s;
    const sluice_policy *p;
    const void *key;
    size_t key_len;
    int64_t cost;
} wait_ctx;

static int wait_attempt(void *ctx, int64_t now_ms, sluice_decision *d) {
    wait_ctx *w = ctx;
    return sluice_store_acquire_at(w->s, w->p, w->key, w->key_len, w->cost, now_ms, d);
}

int sluice_store_acquire_wait(sluice_store *s, const sluice_policy *p, const void *key,
                              size_t key_len, int64_t cost, int64_t timeout_ms, sluice_decision *out) {
    if (!s) return SLUICE_EINVAL;
    if (!out || timeout_ms < 0) {
        if (!out) sluice__store_errf(s, "out is NULL");
        else sluice__store_errf(s, "timeout_ms %lld is negative", (long long)timeout_ms);
        return SLUICE_EINVAL;
    }
    wait_ctx w = {s, p, key, key_len, cost};
    return sluice__wait(s->clock, timeout_ms, wait_attempt, &w, out);
}

int sluice_store_acquire_many(sluice_store *s, const sluice_request *reqs, size_t n,
                              sluice_decision *out, int *results) {
    if (!s) return SLUICE_EINVAL;
    if (n && (!reqs || !out || !results)) {
        sluice__store_errf(s, "%s is NULL", !reqs ? "reqs" : !out ? "out" : "results");
        return SLUICE_EINVAL;
    }
    int64_t now_ms = sluice_clock_now_ms(s->clock);
    int any = 0;
    for (size_t i = 0; i < n; i++) {
        const sluice_request *r = &reqs[i];
        results[i] = request_ok(r->policy, r->key, r->key_len, r->cost, now_ms)
                         ? 0
                         : check_request(s, r->policy, r->key, r->key_len, r->cost, now_ms);
        any |= results[i] == 0;
    }
    if (!any) return 0;
    if (s->ops->acquire_many) {
        s->ops->acquire_many(s, reqs, n, now_ms, out, results);
        return 0;
    }
    for (size_t i = 0; i < n; i++)
        if (results[i] == 0)
            results[i] = s->ops->acquire_at(s, reqs[i].policy, reqs[i].key, reqs[i].key_len,
                                            reqs[i].cost, now_ms, &out[i]);
    return 0;
}

/* ---- policies a store has met ---- */

static int same_policy(const sluice_policy *a, const sluice_policy *b) {
    if (strcmp(a->name, b->name) != 0 || a->n_parts != b->n_parts) return 0;
    for (size_t i = 0; i < a->n_parts; i++) {
        if (a->shadow[i] != b->shadow[i]) return 0;
        const sluice_config *x = &a->parts[i], *y = &b->parts[i];
        if (x->algorithm != y->algorithm || x->limit != y->limit || x->rate != y->rate ||
            x->period_ms != y->period_ms)
            return 0;
    }
    return 1;
}

int sluice__policy_set_add(sluice__policy_set *set, const sluice_store *s, const sluice_policy *p,
                           unsigned *id) {
    int rc = 0;
    sluice__lock_take(&set->lock);
    unsigned i;
    for (i = 0; i < set->n && !same_policy((const sluice_policy *)sluice__policy_item(set, i), p); i++) {
    }
    if (i == set->n) {
        void *item = NULL;
        void ***chunk = &set->chunks[set->n / SLUICE__POLICY_CHUNK];
        if (set->n < SLUICE__POLICIES_MAX && !*chunk)
            *chunk = calloc(SLUICE__POLICY_CHUNK, sizeof **chunk);
        if (set->n == SLUICE__POLICIES_MAX) {
            sluice__store_errf(s, "store serves %d distinct policies already", SLUICE__POLICIES_MAX);
            rc = SLUICE_EFULL;
        } else if (!*chunk || !(item = calloc(1, set->item_size))) {
            sluice__store_errf(s, "out of memory");
            rc = SLUICE_ENOMEM;
        } else {
            memcpy(item, p, sizeof *p);
            rc = set->init ? set->init(item, set->ctx) : 0;
            if (rc) free(item);
            else (*chunk)[set->n % SLUICE__POLICY_CHUNK] = item, set->n++;
        }
    }
    if (rc == 0) {
        *id = i;
        /* another thread may have met this policy object at the same time
         * and cached it already: once in known[] is enough */
        unsigned k = atomic_load_explicit(&set->n_known, memory_order_relaxed), cached_id;
        if (!sluice__policy_set_known(set, p->serial, &cached_id, NULL) && k < SLUICE__KNOWN_MAX) {
            set->known[k].id = i;
            set->known[k].word = sluice__policy_item_word(set, i);
            atomic_store_explicit(&set->known[k].serial, p->serial, memory_order_relaxed);
            atomic_store_explicit(&set->n_known, k + 1, memory_order_release);
        }
    }
    sluice__lock_give(&set->lock);
    return rc;
}

void sluice__policy_set_free(sluice__policy_set *set) {
    for (unsigned i = 0; i < set->n; i++) free(sluice__policy_item(set, i));
    for (unsigned c = 0; c < SLUICE__POLICIES_MAX / SLUICE__POLICY_CHUNK; c++) free(set->chunks[c]);
    memset(set->chunks, 0, sizeof set->chunks);
    set->n = 0;
}

int sluice_store_acquire(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                         int64_t cost, sluice_decision *out) {
    if (!s) return SLUICE_EINVAL;
    return sluice_store_acquire_at(s, p, key, key_len, cost, sluice_clock_now_ms(s->clock), out);
}

int sluice_store_stats(sluice_store *s, sluice_stats *out) {
    if (!s || !out) return SLUICE_EINVAL;
    memset(out, 0, sizeof *out);
    s->ops->stats(s, out);
    return out->keys < 0 ? SLUICE_ESTORE : 0; /* the store's message says why */
}

const char *sluice_store_errmsg(const sluice_store *s) {
    return s && last_error.store == s ? last_error.text : "";
}

const char *sluice_store_kind(const sluice_store *s) {
    return s ? s->ops->scheme : NULL;
}

void sluice_store_close(sluice_store *s) {
    if (!s) return;
    sluice_store_detach_loop(s);
    if (last_error.store == s) last_error.store = NULL;
    s->ops->close(s);
}

/* ---- non-blocking calls and the loop interface ----
 *
 * A kind that waits on a server has async_at and the loop entries; a call
 * is checked here, then handed to it. A kind that never waits (memory:,
 * shm:) has none: its non-blocking call is its blocking one, made here at
 * once, and the callback runs before the call returns. */

static int async_call(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len, sluice__verb verb,
                      int64_t cost, sluice_store_cb cb, void *user) {
    if (!s) return SLUICE_EINVAL;
    if (!cb) {
        sluice__store_errf(s, "callback is NULL");
        return SLUICE_EINVAL;
    }
    int64_t now_ms = sluice_clock_now_ms(s->clock);
    int64_t checked_cost = verb == SLUICE__VERB_RESET ? 1 : cost;
    if (__builtin_expect(!request_ok(p, key, key_len, checked_cost, now_ms), 0))
        return check_request(s, p, key, key_len, checked_cost, now_ms);
    if (s->ops->async_at) {
        if (s->loop_state != SLUICE__LOOP_ATTACHED) {
            sluice__store_errf(s, "%s: %s", s->ops->scheme,
                               s->loop_state == SLUICE__LOOP_DETACHING
                                   ? "its loop is being detached: no new non-blocking call"
                                   : "no loop attached: a remote store's non-blocking calls need "
                                     "sluice_store_attach_loop() first");
            return SLUICE_EINVAL;
        }
        return s->ops->async_at(s, p, key, key_len, verb, cost, now_ms, cb, user);
    }
    sluice_decision d;
    int rc = verb == SLUICE__VERB_ACQUIRE ? s->ops->acquire_at(s, p, key, key_len, cost, now_ms, &d)
                                          : s->ops->operate_at(s, p, key, key_len, verb, cost, now_ms, &d);
    if (rc < 0) memset(&d, 0, sizeof d);
    cb(user, rc, &d);
    return 0;
}

int sluice_store_acquire_async(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len, int64_t cost,
                               sluice_store_cb cb, void *user) {
    return async_call(s, p, key, key_len, SLUICE__VERB_ACQUIRE, cost, cb, user);
}

int sluice_store_peek_async(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len, int64_t cost,
                            sluice_store_cb cb, void *user) {
    return async_call(s, p, key, key_len, SLUICE__VERB_PEEK, cost, cb, user);
}

int sluice_store_refund_async(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len, int64_t cost,
                              sluice_store_cb cb, void *user) {
    return async_call(s, p, key, key_len, SLUICE__VERB_REFUND, cost, cb, user);
}

int sluice_store_reset_async(sluice_store *s, const sluice_policy *p, const void *key, size_t key_len,
                             sluice_store_cb cb, void *user) {
    return async_call(s, p, key, key_len, SLUICE__VERB_RESET, 0, cb, user);
}

int sluice_store_attach_loop(sluice_store *s, const sluice_loop *loop) {
    if (!s) return SLUICE_EINVAL;
    if (!loop || loop->size < offsetof(sluice_loop, detached) || loop->size > 4096) {
        if (!loop) sluice__store_errf(s, "loop is NULL");
        else sluice__store_errf(s, "loop.size is %zu: set it with SLUICE_LOOP_INIT", loop->size);
        return SLUICE_EINVAL;
    }
    if (!loop->watch || !loop->timer) {
        sluice__store_errf(s, "loop.%s is NULL", !loop->watch ? "watch" : "timer");
        return SLUICE_EINVAL;
    }
    if (s->loop_state != SLUICE__LOOP_NONE) {
        sluice__store_errf(s, "%s: a loop is attached already (detach it first)", s->ops->scheme);
        return SLUICE_EINVAL;
    }
    sluice_loop copy = SLUICE_LOOP_INIT;
    memcpy(&copy, loop, loop->size < sizeof copy ? loop->size : sizeof copy);
    copy.size = sizeof copy;
    s->loop = copy;
    s->loop_state = SLUICE__LOOP_ATTACHED;
    int rc = s->ops->loop_attach ? s->ops->loop_attach(s) : 0;
    if (rc) {
        memset(&s->loop, 0, sizeof s->loop);
        s->loop_state = SLUICE__LOOP_NONE;
    }
    return rc;
}

int sluice_store_detach_loop(sluice_store *s) {
    if (!s) return SLUICE_EINVAL;
    if (s->loop_state != SLUICE__LOOP_ATTACHED) return 0;
    s->loop_state = SLUICE__LOOP_DETACHING;
    if (s->ops->loop_detach) s->ops->loop_detach(s);
    sluice_loop was = s->loop;
    memset(&s->loop, 0, sizeof s->loop);
    s->loop_state = SLUICE__LOOP_NONE;
    if (was.detached) was.detached(was.user);
    return 0;
}

void sluice_store_loop_ready(sluice_store *s, int fd, int events) {
    if (s && s->loop_state == SLUICE__LOOP_ATTACHED && s->ops->loop_ready) s->ops->loop_ready(s, fd, events);
}

void sluice_store_loop_timeout(sluice_store *s) {
    if (s && s->loop_state == SLUICE__LOOP_ATTACHED && s->ops->loop_timeout) s->ops->loop_timeout(s);
}
