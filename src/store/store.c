/* store/store.c: choosing a store by URL, and what all stores share: the
 * argument checks, options (struct first, then URL query parameters), the
 * clock, and the error message channel. Each kind (memory.c, ...) provides a
 * small const table of operations (sluice__store_ops). */
#define _GNU_SOURCE /* dladdr */
#include "internal.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/auxv.h>

/* The Redis store lives in libsluice-redis, so that only its users link
 * hiredis. Its tables are found through weak references when it is linked
 * in (its pkg-config files and CMake targets make sure the linker keeps
 * it), else by loading libsluice-redis.so.N when a Redis URL is opened:
 * first from the directory libsluice.so was loaded from (installed side by
 * side, whatever the prefix), then by the dynamic loader's own search.
 * When neither works, why says what was tried and what each gave. */
extern const sluice__store_ops sluice_redis_store __attribute__((weak));
extern const sluice__store_ops sluice_redis_cluster_store __attribute__((weak));

#define REDIS_LIBRARY "libsluice-redis.so." SLUICE__SOVERSION

/* The directory this code was loaded from when it is a shared library,
 * else "" (the core linked into the program: nothing lies beside it). */
static void own_directory(char *dir, size_t len) {
    Dl_info self, program;
    dir[0] = 0;
    if (!dladdr((void *)&own_directory, &self) || !self.dli_fname) return;
    if (dladdr((void *)getauxval(AT_PHDR), &program) && program.dli_fbase == self.dli_fbase) return;
    const char *slash = strrchr(self.dli_fname, '/');
    if (slash) snprintf(dir, len, "%.*s", (int)(slash - self.dli_fname), self.dli_fname);
}

static const sluice__store_ops *redis_kind(const sluice__store_ops *linked, const char *symbol,
                                           char *why, size_t whylen) {
    if (linked) return linked;
    char dir[PATH_MAX], beside[PATH_MAX + sizeof REDIS_LIBRARY];
    const char *tried[2];
    int n = 0;
    own_directory(dir, sizeof dir);
    if (dir[0] && (size_t)snprintf(beside, sizeof beside, "%s/%s", dir, REDIS_LIBRARY) < sizeof beside)
        tried[n++] = beside;
    tried[n++] = REDIS_LIBRARY;
    size_t at = 0;
    for (int i = 0; i < n; i++) {
        void *lib = dlopen(tried[i], RTLD_NOW | RTLD_GLOBAL); /* kept */
        const sluice__store_ops *ops = lib ? dlsym(lib, symbol) : NULL;
        if (ops) return ops;
        const char *what = dlerror();
        if (at < whylen)
            at += (size_t)snprintf(why + at, whylen - at, "%s%s", i ? "; " : "",
                                   what ? what : "no such symbol");
    }
    return NULL;
}

static const sluice__store_ops *kind_named(const char *scheme, char *why, size_t whylen) {
    why[0] = 0;
    if (strcmp(scheme, "memory") == 0) return &sluice__memory_store;
    if (strcmp(scheme, "shm") == 0) return &sluice__shm_store;
    if (strcmp(scheme, "redis") == 0) return redis_kind(&sluice_redis_store, "sluice_redis_store", why, whylen);
    if (strcmp(scheme, "redis-cluster") == 0)
        return redis_kind(&sluice_redis_cluster_store, "sluice_redis_cluster_store", why, whylen);
    return NULL;
}

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

static int parse_url(const char *text, sluice__url *url, char *err, size_t errlen) {
    memset(url, 0, sizeof *url);
    const char *colon = strchr(text, ':');
    size_t n = colon ? (size_t)(colon - text) : 0;
    if (!colon || n == 0 || n >= sizeof url->scheme) {
        sluice__errf(err, errlen, "store URL \"%.64s\" has no scheme (expected e.g. \"memory:\")", text);
        return SLUICE_EINVAL;
    }
    memcpy(url->scheme, text, n);
    url->path = colon + 1;
    const char *q = strchr(url->path, '?');
    url->path_len = q ? (size_t)(q - url->path) : strlen(url->path);
    if (!q || !q[1]) return 0;
    for (const char *p = q + 1; *p;) {
        const char *amp = strchr(p, '&');
        size_t len = amp ? (size_t)(amp - p) : strlen(p);
        const char *eq = memchr(p, '=', len);
        if (!eq || eq == p) {
            sluice__errf(err, errlen, "store URL parameter \"%.*s\" is not NAME=VALUE", (int)len, p);
            return SLUICE_EINVAL;
        }
        if (url->n_params == SLUICE__URL_MAX_PARAMS) {
            sluice__errf(err, errlen, "store URL has more than %d parameters", SLUICE__URL_MAX_PARAMS);
            return SLUICE_EINVAL;
        }
        url->params[url->n_params].key = p;
        url->params[url->n_params].key_len = (size_t)(eq - p);
        url->params[url->n_params].value = eq + 1;
        url->params[url->n_params].value_len = len - (size_t)(eq - p) - 1;
        for (size_t i = 0; i < url->n_params; i++)
            if (url->params[i].key_len == (size_t)(eq - p) && !memcmp(url->params[i].key, p, (size_t)(eq - p))) {
                sluice__errf(err, errlen, "store URL parameter \"%.*s\" is given twice", (int)(eq - p), p);
                return SLUICE_EINVAL;
            }
        url->n_params++;
        p += len + (amp != NULL);
    }
    return 0;
}

int sluice__url_is(const sluice__url *url, size_t i, const char *name) {
    return url->params[i].key_len == strlen(name) && !memcmp(url->params[i].key, name, strlen(name));
}

int sluice__url_int(const sluice__url *url, size_t i, int64_t lo, int64_t hi, int64_t *out,
                    char *err, size_t errlen) {
    const char *v = url->params[i].value;
    size_t n = url->params[i].value_len;
    int64_t x = 0;
    for (size_t k = 0; k < n; k++) {
        if (v[k] < '0' || v[k] > '9' || x > (INT64_MAX - 9) / 10) n = 0;
        else x = x * 10 + (v[k] - '0');
        if (n == 0) break;
    }
    if (n == 0 || x < lo || x > hi) {
        sluice__errf(err, errlen, "store URL parameter %.*s=%.*s: expected an integer in %lld..%lld",
                     (int)url->params[i].key_len, url->params[i].key, (int)url->params[i].value_len,
                     v, (long long)lo, (long long)hi);
        return SLUICE_EINVAL;
    }
    *out = x;
    return 0;
}

int sluice__url_choice(const sluice__url *url, size_t i, const char *const *names, int n, int *out,
                       char *err, size_t errlen) {
    const char *v = url->params[i].value;
    size_t len = url->params[i].value_len;
    for (int k = 0; k < n; k++) {
        if (strlen(names[k]) == len && !memcmp(v, names[k], len)) {
            *out = k;
            return 0;
        }
    }
    char choices[128] = ""; /* "a, b or c" */
    for (int k = 0; k < n; k++)
        snprintf(choices + strlen(choices), sizeof choices - strlen(choices), "%s%s",
                 k == 0 ? "" : k == n - 1 ? " or " : ", ", names[k]);
    sluice__errf(err, errlen, "store URL parameter %.*s=%.*s: expected %s", (int)url->params[i].key_len,
                 url->params[i].key, (int)len, v, choices);
    return SLUICE_EINVAL;
}

/* The options struct, then the URL's common parameters over it. The kinds
 * read their own parameters; common ones are marked handled by zeroing.
 * The remote stores' parameters (timeout_ms, connect_timeout_ms, on_error)
 * are common only to remote kinds: a local kind finds them unhandled and
 * names them as unknown. */
static int read_options(const sluice_store_options *opts, sluice__url *url, int remote,
                        sluice__store_config *cfg, char *err, size_t errlen) {
    sluice_store_options o = SLUICE_STORE_OPTIONS_INIT;
    if (opts) {
        if (opts->size < sizeof(size_t) || opts->size > 4096) {
            sluice__errf(err, errlen, "options.size is %zu: set it with SLUICE_STORE_OPTIONS_INIT", opts->size);
            return SLUICE_EINVAL;
        }
        memcpy(&o, opts, opts->size < sizeof o ? opts->size : sizeof o);
    }
    cfg->max_keys = o.max_keys ? o.max_keys : SLUICE_MAX_KEYS_DEFAULT;
    cfg->max_keys_given = o.max_keys != 0;
    cfg->on_full = o.on_full;
    cfg->clock = o.clock ? o.clock : sluice_clock_monotonic();
    cfg->on_error = o.on_error;
    cfg->connect_timeout_ms = o.connect_timeout_ms ? o.connect_timeout_ms : 200;
    cfg->timeout_ms = o.timeout_ms ? o.timeout_ms : 100;
    cfg->must_exist = o.must_exist;
    cfg->caller_clock = o.caller_clock;
    if (cfg->on_error < SLUICE_ON_ERROR_ALLOW || cfg->on_error > SLUICE_ON_ERROR_ERROR) {
        sluice__errf(err, errlen, "options.on_error %d is not a sluice_on_error", (int)cfg->on_error);
        return SLUICE_EINVAL;
    }
    if (cfg->connect_timeout_ms < 1 || cfg->connect_timeout_ms > 3600000 || cfg->timeout_ms < 1 ||
        cfg->timeout_ms > 3600000) {
        sluice__errf(err, errlen, "options timeouts must be 1..3600000 ms");
        return SLUICE_EINVAL;
    }
    if (cfg->max_keys < 1 || cfg->max_keys > SLUICE_MAX_KEYS_MAX) {
        sluice__errf(err, errlen, "options.max_keys %lld is outside 1..%d", (long long)cfg->max_keys,
                     SLUICE_MAX_KEYS_MAX);
        return SLUICE_EINVAL;
    }
    if (cfg->on_full != SLUICE_ON_FULL_EVICT && cfg->on_full != SLUICE_ON_FULL_REFUSE) {
        sluice__errf(err, errlen, "options.on_full %d is neither SLUICE_ON_FULL_EVICT nor _REFUSE", (int)cfg->on_full);
        return SLUICE_EINVAL;
    }
    for (size_t i = 0; i < url->n_params; i++) {
        if (sluice__url_is(url, i, "max_keys")) {
            int rc = sluice__url_int(url, i, 1, SLUICE_MAX_KEYS_MAX, &cfg->max_keys, err, errlen);
            if (rc) return rc;
            cfg->max_keys_given = 1;
        } else if (remote && sluice__url_is(url, i, "timeout_ms")) {
            int rc = sluice__url_int(url, i, 1, 3600000, &cfg->timeout_ms, err, errlen);
            if (rc) return rc;
        } else if (remote && sluice__url_is(url, i, "connect_timeout_ms")) {
            int rc = sluice__url_int(url, i, 1, 3600000, &cfg->connect_timeout_ms, err, errlen);
            if (rc) return rc;
        } else if (remote && sluice__url_is(url, i, "on_error")) { /* in sluice_on_error's order */
            static const char *const names[] = {"allow", "deny", "error"};
            int k, rc = sluice__url_choice(url, i, names, 3, &k, err, errlen);
            if (rc) return rc;
            cfg->on_error = (sluice_on_error)k;
        } else if (sluice__url_is(url, i, "on_full")) { /* in sluice_on_full's order */
            static const char *const names[] = {"evict", "refuse"};
            int k, rc = sluice__url_choice(url, i, names, 2, &k, err, errlen);
            if (rc) return rc;
            cfg->on_full = (sluice_on_full)k;
        } else {
            continue;
        }
        url->params[i].key_len = 0; /* handled */
    }
    return 0;
}

int sluice_store_open_err(const char *url_text, const sluice_store_options *opts, sluice_store **out,
                          char *err, size_t errlen) {
    sluice__url url;
    sluice__store_config cfg;
    if (err && errlen) err[0] = 0;
    if (!out) {
        sluice__errf(err, errlen, "out is NULL");
        return SLUICE_EINVAL;
    }
    *out = NULL;
    if (!url_text) {
        sluice__errf(err, errlen, "store URL is NULL");
        return SLUICE_EINVAL;
    }
    int rc = parse_url(url_text, &url, err, errlen);
    if (rc) return rc;
    char why[2 * PATH_MAX];
    const sluice__store_ops *kind = kind_named(url.scheme, why, sizeof why);
    if (!kind) {
        if (why[0])
            sluice__errf(err, errlen, "store URL scheme \"%s\" needs libsluice-redis, which is not "
                         "linked into the program, and loading it failed: %s", url.scheme, why);
        else
            sluice__errf(err, errlen, "store URL scheme \"%s\" is unknown (expected memory:, "
                         "shm:PATH, redis:// or redis-cluster://)", url.scheme);
        return SLUICE_EINVAL;
    }
    int remote = kind != &sluice__memory_store && kind != &sluice__shm_store;
    rc = read_options(opts, &url, remote, &cfg, err, errlen);
    if (rc) return rc;
    rc = kind->open(&url, &cfg, out, err, errlen);
    if (rc == 0) {
        (*out)->ops = kind;
        (*out)->clock = cfg.clock;
    }
    return rc;
}

int sluice_store_open(const char *url, const sluice_store_options *opts, sluice_store **out) {
    return sluice_store_open_err(url, opts, out, NULL, 0);
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
    if (last_error.store == s) last_error.store = NULL;
    s->ops->close(s);
}
