/* store/kinds.c: from a URL to a store. The kinds of store in one table
 * (scheme, operations, where the operations come from); the URL taken
 * apart ("scheme:path?name=value&..."); and every parameter read once,
 * against the declaration of the kind that takes it (name, type, range):
 * the options struct first, the URL over it. Every message about a URL or
 * an option is written here; a kind gets a filled configuration
 * (sluice__store_config) and never reads the URL. Messages name the store
 * first ("shm:/run/x.shm: ..."). */
#define _GNU_SOURCE /* dladdr */
#include "internal.h"

#include <dlfcn.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/auxv.h>

/* ---- the kinds ---- */

/* The Redis store lives in libsluice-redis, so that only its users link
 * hiredis. Its tables are found through weak references when it is linked
 * in (its pkg-config files and CMake targets make sure the linker keeps
 * it), else by loading libsluice-redis.so.N when a Redis URL is opened:
 * first from the directory libsluice.so was loaded from (installed side by
 * side, whatever the prefix), then by the dynamic loader's own search. */
extern const sluice__store_ops sluice_redis_store __attribute__((weak));
extern const sluice__store_ops sluice_redis_cluster_store __attribute__((weak));

static const struct kind {
    const char *scheme;
    const sluice__store_ops *ops; /* built in, or linked in (weak: NULL when not) */
    const char *symbol;           /* else found in REDIS_LIBRARY under this name */
} kinds[] = {
    {"memory", &sluice__memory_store, NULL},
    {"shm", &sluice__shm_store, NULL},
    {"redis", &sluice_redis_store, "sluice_redis_store"},
    {"redis-cluster", &sluice_redis_cluster_store, "sluice_redis_cluster_store"},
};
#define N_KINDS (sizeof kinds / sizeof kinds[0])
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

/* A kind's operations, when they are of this store interface (why: what
 * was tried, and what each gave). */
static const sluice__store_ops *checked(const sluice__store_ops *ops, const char *from, char *why, size_t whylen,
                                        size_t *at) {
    if (ops->version == SLUICE__STORE_INTERFACE) return ops;
    if (*at < whylen)
        *at += (size_t)snprintf(why + *at, whylen - *at, "%s%s implements store interface version %u, and this "
                                "libsluice version %d: the two libraries are of different sluice versions (install "
                                "them together)", *at ? "; " : "", from, (unsigned)ops->version,
                                SLUICE__STORE_INTERFACE);
    return NULL;
}

static const sluice__store_ops *load(const struct kind *k, char *why, size_t whylen) {
    size_t at = 0;
    why[0] = 0;
    if (k->ops) return checked(k->ops, "the libsluice-redis linked in", why, whylen, &at);
    char dir[PATH_MAX], beside[PATH_MAX + sizeof REDIS_LIBRARY];
    const char *tried[2];
    int n = 0;
    own_directory(dir, sizeof dir);
    if (dir[0] && (size_t)snprintf(beside, sizeof beside, "%s/%s", dir, REDIS_LIBRARY) < sizeof beside)
        tried[n++] = beside;
    tried[n++] = REDIS_LIBRARY;
    for (int i = 0; i < n; i++) {
        void *lib = dlopen(tried[i], RTLD_NOW | RTLD_GLOBAL); /* kept */
        const sluice__store_ops *ops = lib ? dlsym(lib, k->symbol) : NULL;
        if (ops) return checked(ops, tried[i], why, whylen, &at);
        const char *what = dlerror();
        if (at < whylen)
            at += (size_t)snprintf(why + at, whylen - at, "%s%s", at ? "; " : "", what ? what : "no such symbol");
    }
    return NULL;
}

/* ---- the URL taken apart ---- */

typedef struct {
    char scheme[16];
    const char *path;
    size_t path_len;
    struct {
        const char *name, *value;
        size_t name_len, value_len;
    } params[SLUICE__PARAMS_MAX];
    size_t n_params;
} url_parts;

static int parse_url(const char *text, url_parts *url, char *err, size_t errlen) {
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
        if (url->n_params == SLUICE__PARAMS_MAX) {
            sluice__errf(err, errlen, "store URL has more than %d parameters", SLUICE__PARAMS_MAX);
            return SLUICE_EINVAL;
        }
        size_t name_len = (size_t)(eq - p);
        for (size_t i = 0; i < url->n_params; i++)
            if (url->params[i].name_len == name_len && !memcmp(url->params[i].name, p, name_len)) {
                sluice__errf(err, errlen, "store URL parameter \"%.*s\" is given twice", (int)name_len, p);
                return SLUICE_EINVAL;
            }
        url->params[url->n_params].name = p;
        url->params[url->n_params].name_len = name_len;
        url->params[url->n_params].value = eq + 1;
        url->params[url->n_params].value_len = len - name_len - 1;
        url->n_params++;
        p += len + (amp != NULL);
    }
    return 0;
}

/* ---- parameters, against their declarations ---- */

static int named(const char *name, const char *s, size_t len) {
    return strlen(name) == len && !memcmp(name, s, len);
}

/* "a, b or c" of a kind's parameters, or of a choice's names */
static void list_of(const char *const *names, size_t n, char *out, size_t len) {
    out[0] = 0;
    for (size_t k = 0; k < n; k++)
        snprintf(out + strlen(out), len - strlen(out), "%s%s", k == 0 ? "" : k == n - 1 ? " or " : ", ", names[k]);
}

static void param_names(const sluice__store_ops *ops, char *out, size_t len) {
    const char *names[SLUICE__PARAMS_MAX];
    for (size_t i = 0; i < ops->n_params; i++) names[i] = ops->params[i].name;
    list_of(names, ops->n_params, out, len);
}

/* A URL parameter the kind does not take: said so, with the kinds that do. */
static int unknown_param(const sluice__store_ops *ops, const char *name, size_t len, char *err, size_t errlen) {
    char takes[256], others[128] = "";
    param_names(ops, takes, sizeof takes);
    for (size_t k = 0; k < N_KINDS; k++) {
        const sluice__store_ops *o = kinds[k].ops;
        if (!o || o == ops || o->version != SLUICE__STORE_INTERFACE) continue;
        for (size_t i = 0; i < o->n_params; i++)
            if (named(o->params[i].name, name, len))
                snprintf(others + strlen(others), sizeof others - strlen(others), "%s%s:", others[0] ? ", " : "",
                         kinds[k].scheme);
    }
    sluice__errf(err, errlen, "store URL parameter \"%.*s\" is unknown to %s: (it takes %s)%s%s", (int)len, name,
                 ops->scheme, ops->n_params ? takes : "none", others[0] ? "; it is a parameter of " : "", others);
    return SLUICE_EINVAL;
}

/* The value of URL parameter text[0..len) for declaration d: 0, or an error. */
static int read_value(const sluice__param *d, const char *text, size_t len, int64_t *value, char *err,
                      size_t errlen) {
    switch (d->type) {
    case SLUICE__PARAM_INT: {
        int64_t x = 0;
        size_t k = 0;
        for (; k < len && text[k] >= '0' && text[k] <= '9' && x <= (INT64_MAX - 9) / 10; k++) x = x * 10 + (text[k] - '0');
        if (len == 0 || k < len || x < d->lo || x > d->hi) {
            sluice__errf(err, errlen, "store URL parameter %s=%.*s: expected an integer in %lld..%lld", d->name,
                         (int)len, text, (long long)d->lo, (long long)d->hi);
            return SLUICE_EINVAL;
        }
        *value = x;
        return 0;
    }
    case SLUICE__PARAM_CHOICE: {
        size_t n = 0;
        for (; d->choices[n]; n++)
            if (named(d->choices[n], text, len)) {
                *value = (int64_t)n;
                return 0;
            }
        char choices[128];
        list_of(d->choices, n, choices, sizeof choices);
        sluice__errf(err, errlen, "store URL parameter %s=%.*s: expected %s", d->name, (int)len, text, choices);
        return SLUICE_EINVAL;
    }
    case SLUICE__PARAM_TEXT:
        if ((int64_t)len < d->lo || (int64_t)len > d->hi || (d->refuse && strcspn(text, d->refuse) < len)) {
            sluice__errf(err, errlen, "store URL parameter %s: %lld..%lld bytes%s%s", d->name, (long long)d->lo,
                         (long long)d->hi, d->refuse ? ", none of " : "", d->refuse ? d->refuse : "");
            return SLUICE_EINVAL;
        }
        return 0;
    }
    return SLUICE_EINVAL;
}

/* The options struct, checked, with defaults for what it leaves 0. */
static int read_options(const sluice_store_options *opts, sluice_store_options *o, char *err, size_t errlen) {
    *o = (sluice_store_options)SLUICE_STORE_OPTIONS_INIT;
    if (opts) {
        if (opts->size < sizeof(size_t) || opts->size > 4096) {
            sluice__errf(err, errlen, "options.size is %zu: set it with SLUICE_STORE_OPTIONS_INIT", opts->size);
            return SLUICE_EINVAL;
        }
        memcpy(o, opts, opts->size < sizeof *o ? opts->size : sizeof *o);
    }
    if (o->on_error < SLUICE_ON_ERROR_ALLOW || o->on_error > SLUICE_ON_ERROR_LOCAL) {
        sluice__errf(err, errlen, "options.on_error %d is not a sluice_on_error", (int)o->on_error);
        return SLUICE_EINVAL;
    }
    if (o->connect_timeout_ms < 0 || o->connect_timeout_ms > 3600000 || o->timeout_ms < 0 || o->timeout_ms > 3600000) {
        sluice__errf(err, errlen, "options timeouts must be 1..3600000 ms");
        return SLUICE_EINVAL;
    }
    if (o->max_keys < 0 || o->max_keys > SLUICE_MAX_KEYS_MAX) {
        sluice__errf(err, errlen, "options.max_keys %lld is outside 1..%d", (long long)o->max_keys, SLUICE_MAX_KEYS_MAX);
        return SLUICE_EINVAL;
    }
    if (o->on_full != SLUICE_ON_FULL_EVICT && o->on_full != SLUICE_ON_FULL_REFUSE) {
        sluice__errf(err, errlen, "options.on_full %d is neither SLUICE_ON_FULL_EVICT nor _REFUSE", (int)o->on_full);
        return SLUICE_EINVAL;
    }
    return 0;
}

/* What the options struct says for a parameter's field: 1 with *v when it
 * sets it (non-zero), else 0. */
static int from_options(const sluice_store_options *o, sluice__param_opt opt, int64_t *v) {
    switch (opt) {
    case SLUICE__OPT_MAX_KEYS: *v = o->max_keys; break;
    case SLUICE__OPT_ON_FULL: *v = (int64_t)o->on_full; break;
    case SLUICE__OPT_ON_ERROR: *v = (int64_t)o->on_error; break;
    case SLUICE__OPT_TIMEOUT: *v = o->timeout_ms; break;
    case SLUICE__OPT_CONNECT_TIMEOUT: *v = o->connect_timeout_ms; break;
    case SLUICE__OPT_CALLER_CLOCK: *v = o->caller_clock ? 1 : 0; break;
    case SLUICE__OPT_NONE: return 0;
    }
    return *v != 0;
}

/* cfg for kind ops: every declared parameter from the defaults, then the
 * options struct, then the URL. */
static int fill(const sluice__store_ops *ops, const url_parts *url, const sluice_store_options *o,
                sluice__store_config *cfg, char *err, size_t errlen) {
    if (ops->n_params > SLUICE__PARAMS_MAX) return SLUICE_EINVAL;
    for (size_t i = 0; i < ops->n_params; i++) {
        const sluice__param *d = &ops->params[i];
        cfg->value[i] = d->def;
        cfg->text[i] = d->text_def;
        cfg->text_len[i] = d->text_def ? strlen(d->text_def) : 0;
        int64_t v = 0;
        if (from_options(o, d->opt, &v)) {
            cfg->value[i] = v;
            cfg->given |= 1u << i;
        }
    }
    for (size_t k = 0; k < url->n_params; k++) {
        const char *name = url->params[k].name, *text = url->params[k].value;
        size_t len = url->params[k].name_len, vlen = url->params[k].value_len;
        size_t i = 0;
        while (i < ops->n_params && !named(ops->params[i].name, name, len)) i++;
        if (i == ops->n_params) return unknown_param(ops, name, len, err, errlen);
        int rc = read_value(&ops->params[i], text, vlen, &cfg->value[i], err, errlen);
        if (rc) return rc;
        cfg->text[i] = text;
        cfg->text_len[i] = vlen;
        cfg->given |= 1u << i;
    }
    return 0;
}

/* Puts "base: " before a message that does not begin with the store's name. */
static void name_the_store(const char *base, char *err, size_t errlen) {
    size_t n = strlen(base);
    if (!err || !errlen || !err[0] || !strncmp(err, base, n)) return;
    char msg[512];
    snprintf(msg, sizeof msg, "%s", err);
    snprintf(err, errlen, "%s: %s", base, msg);
}

/* Opens url as a store of kind ops (its scheme: scheme, named kinds[k] or
 * a test's kind), once the URL is taken apart. */
static int open_kind(const sluice__store_ops *ops, const char *scheme, const url_parts *url,
                     const sluice_store_options *opts, sluice_store **out, char *err, size_t errlen) {
    sluice_store_options o;
    sluice__store_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.scheme = scheme;
    cfg.path = url->path;
    cfg.path_len = url->path_len;
    snprintf(cfg.base, sizeof cfg.base, "%s:%.*s", scheme, (int)(url->path_len < 300 ? url->path_len : 300),
             url->path);
    int rc;
    if ((rc = read_options(opts, &o, err, errlen)) == 0 && (rc = fill(ops, url, &o, &cfg, err, errlen)) == 0) {
        cfg.clock = o.clock ? o.clock : sluice_clock_monotonic();
        cfg.must_exist = o.must_exist;
        cfg.caller_clock = o.caller_clock;
        rc = ops->open(&cfg, out, err, errlen);
    }
    if (rc) {
        name_the_store(cfg.base, err, errlen);
        return rc;
    }
    (*out)->ops = ops;
    (*out)->clock = cfg.clock;
    memset(&(*out)->loop, 0, sizeof (*out)->loop);
    (*out)->loop_state = SLUICE__LOOP_NONE;
    return 0;
}

int sluice__store_open_kind(const sluice__store_ops *ops, const char *url_text, const sluice_store_options *opts,
                            sluice_store **out, char *err, size_t errlen) {
    url_parts url;
    if (err && errlen) err[0] = 0;
    if (!out || !ops || !url_text) return SLUICE_EINVAL;
    *out = NULL;
    int rc = parse_url(url_text, &url, err, errlen);
    if (rc) return rc;
    if (strcmp(url.scheme, ops->scheme) != 0) {
        sluice__errf(err, errlen, "store URL scheme \"%s\" is not the kind's (%s)", url.scheme, ops->scheme);
        return SLUICE_EINVAL;
    }
    return open_kind(ops, ops->scheme, &url, opts, out, err, errlen);
}

int sluice_store_open_err(const char *url_text, const sluice_store_options *opts, sluice_store **out, char *err,
                          size_t errlen) {
    url_parts url;
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
    const struct kind *k = NULL;
    for (size_t i = 0; i < N_KINDS && !k; i++)
        if (!strcmp(url.scheme, kinds[i].scheme)) k = &kinds[i];
    if (!k) {
        sluice__errf(err, errlen, "store URL scheme \"%s\" is unknown (expected memory:, shm:PATH, redis:// or "
                     "redis-cluster://)", url.scheme);
        return SLUICE_EINVAL;
    }
    char why[2 * PATH_MAX];
    const sluice__store_ops *ops = load(k, why, sizeof why);
    if (!ops) {
        sluice__errf(err, errlen, "store URL scheme \"%s\" needs libsluice-redis, which is not linked into the "
                     "program, and loading it failed: %s", url.scheme, why);
        return SLUICE_EINVAL;
    }
    return open_kind(ops, k->scheme, &url, opts, out, err, errlen);
}

int sluice_store_open(const char *url, const sluice_store_options *opts, sluice_store **out) {
    return sluice_store_open_err(url, opts, out, NULL, 0);
}
