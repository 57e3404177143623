/* test_store_redis.c: the Redis store (libsluice-redis), against real
 * redis-server processes this test starts and stops itself
 * (tests/redis_server.h).
 *
 *  - conformance: long random multi-key traces over every algorithm and
 *    composite policies (values at the edges of what the store accepts
 *    included), through redis://...?clock=client, equal the memory store
 *    given the same requests: every field of every decision, every return
 *    code; what the store refuses (arithmetic past 2^53 in Lua, readings
 *    past +-2^50) it refuses with SLUICE_EINVAL and a message;
 *  - keys are bytes: NUL, braces, ':' and '|' inside, prefixes, 1 and 512
 *    bytes, all independent, and the names Redis holds are exactly the
 *    documented ones, one hash tag per decision;
 *  - threads and forked processes racing one fresh key admit exactly its
 *    capacity;
 *  - faults: a server killed and restarted (on_error allow, deny, error;
 *    recovery with no reopen; failures and reconnects counted), SCRIPT
 *    FLUSH mid-run, timeouts with a stopped server and a connect that hangs;
 *  - the time bound: more callers than pooled connections, against a
 *    stopped server and a slow one (a proxy that holds replies back), and
 *    every call returns within connect_timeout_ms + timeout_ms;
 *  - stats and verify=1 with a server down or stopped (one server, and one
 *    master of a cluster): SLUICE_ESTORE, naming the server;
 *  - a three-master cluster: conformance, then a slot moved under a running
 *    trace (MOVED, ASK) with decisions still equal to the memory store's;
 *  - expiry with the server's clock: every key has a TTL no longer than the
 *    policy's longest reset, and the database empties by itself;
 *  - batches equal the same requests made one by one;
 *  - bad URLs and parameters.
 * Run one test by name: ./test_store_redis NAME. SLUICE_TEST_SCALE scales
 * the trace lengths. */
#define _GNU_SOURCE /* pthread_timedjoin_np */
#include "check.h"
#include "store_util.h"
#include "trace.h"
#include "internal.h"
#include "redis_server.h"

#include <poll.h>
#include <pthread.h>
#include <sys/wait.h>
#include <unistd.h>

static double scale(void) {
    return test_scale_sanitized(0.25);
}

/* Readings the store takes in client-clock mode: +-2^50 ms. */
#define T_EDGE (INT64_C(1) << 50)

/* "redis://127.0.0.1:PORT?PARAMS". Unless PARAMS says how long to wait or
 * what to do when the server cannot decide (the tests of failures), the
 * store waits up to 10 s: the other tests are of exactness, and a call
 * given up on a loaded machine would be decided unenforced. */
static const char *url_of(char *buf, size_t len, int port, const char *params) {
    int own = params && (strstr(params, "timeout_ms=") || strstr(params, "on_error="));
    const char *wait = own ? "" : "timeout_ms=10000&connect_timeout_ms=10000";
    snprintf(buf, len, "redis://127.0.0.1:%d?%s%s%s", port, wait, !own && params && *params ? "&" : "",
             params ? params : "");
    return buf;
}




static int64_t least_limit(const sluice_policy *p) {
    int64_t least = SLUICE_LIMIT_MAX;
    for (size_t i = 0; i < sluice_policy_n_parts(p); i++)
        if (sluice_policy_part(p, i)->limit < least) least = sluice_policy_part(p, i)->limit;
    return least;
}

/* The longest reset_ms a policy can ever report: the longest of its parts'
 * (bucket: C*P/R rounded up; fixed window and log: W; sliding window: 2W). */
static int64_t longest_reset(const sluice_policy *p) {
    int64_t most = 0;
    for (size_t i = 0; i < sluice_policy_n_parts(p); i++) {
        const sluice_config *c = sluice_policy_part(p, i);
        int64_t r = c->period_ms;
        if (c->algorithm == SLUICE_TOKEN_BUCKET || c->algorithm == SLUICE_LEAKY_BUCKET)
            r = (int64_t)(((__int128)c->limit * c->period_ms + c->rate - 1) / c->rate);
        else if (c->algorithm == SLUICE_SLIDING_WINDOW)
            r = 2 * c->period_ms;
        if (r > most) most = r;
    }
    return most;
}

/* ---- names Redis holds ---- */

typedef struct {
    char **name;
    size_t *len;
    size_t n, cap;
} names;

static void names_free(names *ns) {
    for (size_t i = 0; i < ns->n; i++) free(ns->name[i]);
    free(ns->name);
    free(ns->len);
    memset(ns, 0, sizeof *ns);
}

/* Every key name on the server at port (SCAN, binary safe), appended. */
static int names_scan(int port, names *ns) {
    redisContext *c = rs_connect(port, 5000);
    if (!c) return -1;
    char cursor[32] = "0";
    do {
        redisReply *r = redisCommand(c, "SCAN %s COUNT 1000", cursor);
        if (!r || r->type != REDIS_REPLY_ARRAY || r->elements != 2) {
            if (r) freeReplyObject(r);
            redisFree(c);
            return -1;
        }
        snprintf(cursor, sizeof cursor, "%s", r->element[0]->str);
        redisReply *keys = r->element[1];
        for (size_t i = 0; i < keys->elements; i++) {
            if (ns->n == ns->cap) {
                ns->cap = ns->cap ? 2 * ns->cap : 64;
                ns->name = realloc(ns->name, ns->cap * sizeof *ns->name);
                ns->len = realloc(ns->len, ns->cap * sizeof *ns->len);
            }
            ns->name[ns->n] = malloc(keys->element[i]->len + 1);
            memcpy(ns->name[ns->n], keys->element[i]->str, keys->element[i]->len + 1);
            ns->len[ns->n++] = keys->element[i]->len;
        }
        freeReplyObject(r);
    } while (strcmp(cursor, "0") != 0);
    redisFree(c);
    return 0;
}

static int names_has(const names *ns, const char *name, size_t len) {
    for (size_t i = 0; i < ns->n; i++)
        if (ns->len[i] == len && !memcmp(ns->name[i], name, len)) return 1;
    return 0;
}

/* The hash tag of a name, as Redis Cluster defines it: the bytes between
 * the first '{' and the next '}', when not empty; else the whole name. */
static void hash_tag(const char *name, size_t len, const char **tag, size_t *tag_len) {
    const char *open = memchr(name, '{', len);
    if (open) {
        const char *close = memchr(open + 1, '}', len - (size_t)(open + 1 - name));
        if (close && close > open + 1) {
            *tag = open + 1;
            *tag_len = (size_t)(close - open - 1);
            return;
        }
    }
    *tag = name;
    *tag_len = len;
}

/* The cluster slot of a name (CRC16/XMODEM of its hash tag, mod 16384),
 * written here from the cluster specification; checked against the
 * server's CLUSTER KEYSLOT where it matters. */
static unsigned slot_of(const char *name, size_t len) {
    const char *tag;
    size_t n;
    hash_tag(name, len, &tag, &n);
    uint16_t crc = 0;
    for (size_t i = 0; i < n; i++) {
        crc ^= (uint16_t)((uint8_t)tag[i] << 8);
        for (int k = 0; k < 8; k++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc & 16383;
}

/* The documented state name of (policy, key): PREFIX{NAME|LEN:KEY}; with
 * part >= 0, the sliding-log part's name: that and ":PART". Its length. */
static size_t state_name(char *out, const char *prefix, const char *pname, const void *key, size_t key_len,
                         int part) {
    size_t n = (size_t)sprintf(out, "%s{%s|%zu:", prefix, pname, key_len);
    memcpy(out + n, key, key_len);
    n += key_len;
    out[n++] = '}';
    if (part >= 0) n += (size_t)sprintf(out + n, ":%d", part);
    return n;
}

/* Calls of command cmd (lower case) since CONFIG RESETSTAT, as INFO
 * commandstats counts them on the server at port (commands a script runs
 * included); "total": of every command but INFO and CONFIG. */
static long long cmd_calls(int port, const char *cmd) {
    redisReply *r = rs_cmd(port, "INFO commandstats");
    long long n = 0;
    if (!r || r->type != REDIS_REPLY_STRING) {
        if (r) freeReplyObject(r);
        return -1;
    }
    for (const char *at = r->str; (at = strstr(at, "cmdstat_")) != NULL;) {
        at += 8;
        const char *colon = strchr(at, ':');
        if (!colon) break;
        size_t len = (size_t)(colon - at);
        long long calls = atoll(colon + 7); /* ":calls=" */
        int is_admin = (len == 4 && !memcmp(at, "info", 4)) || (len >= 6 && !memcmp(at, "config", 6));
        if (!strcmp(cmd, "total") ? !is_admin : strlen(cmd) == len && !memcmp(at, cmd, len)) n += calls;
    }
    freeReplyObject(r);
    return n;
}

/* ---- the conformance trace: Redis against the memory store ---- */

static const char *const specs[] = {
    "token-bucket capacity=3 rate=1/7ms",
    "leaky-bucket capacity=4 rate=2/9ms",
    "fixed-window limit=5 window=13ms",
    "sliding-window limit=6 window=11ms",
    "sliding-log limit=5 window=17ms",
    "token-bucket capacity=4 rate=1/5ms; fixed-window limit=6 window=20ms",
    "sliding-window limit=3 window=7ms; sliding-log limit=4 window=15ms; leaky-bucket capacity=2 rate=1/3ms",
    "gcra rate=3/10ms burst=2; sliding-log limit=9 window=40ms",
    "sliding-log limit=3 window=5ms; fixed-window limit=9 window=1s; sliding-log limit=7 window=50ms",
    "token-bucket capacity=5 rate=1/3ms; leaky-bucket capacity=6 rate=1/2ms; fixed-window limit=7 window=10ms; "
    "sliding-window limit=8 window=9ms; sliding-log limit=9 window=12ms; sliding-log limit=4 window=3ms; "
    "gcra rate=1/ms burst=3; fixed-window limit=20 window=1h",
    "token-bucket capacity=2 rate=1/30d; fixed-window limit=1 window=1ms",
    /* eight logs: nine names, the most arguments a decision sends */
    "sliding-log limit=2 window=3ms; sliding-log limit=3 window=5ms; sliding-log limit=4 window=8ms; "
    "sliding-log limit=5 window=13ms; sliding-log limit=6 window=21ms; sliding-log limit=7 window=34ms; "
    "sliding-log limit=8 window=55ms; sliding-log limit=9 window=89ms",
    /* the edges of what the Redis store accepts: products up to 2^51 */
    "token-bucket capacity=1000000000 rate=1000000000/s",
    "token-bucket capacity=2097152 rate=1/1073741824ms",   /* tau = C*p = 2^51 exactly */
    "sliding-window limit=2097152 window=1073741824ms",    /* L*W = 2^51 exactly */
    "leaky-bucket capacity=868749 rate=7/30d",             /* tau just below 2^51 */
    "token-bucket capacity=1000000 rate=999999999989/1000s", /* r near 10^12 */
    "fixed-window limit=1000000000 window=30d",
    "sliding-log limit=1000000000 window=30d",
    "sliding-window limit=1000 window=30d; sliding-log limit=1000000000 window=1ms",
    /* shadow parts (the indices above stay as they were: tests name some) */
    STORE_TEST_SHADOW_SPECS
    "shadow sliding-window limit=3 window=9ms; shadow token-bucket capacity=2 rate=1/4ms",
    "sliding-log limit=6 window=20ms; shadow sliding-log limit=2 window=8ms; shadow fixed-window limit=9 window=1s",
};
#define N_SPECS (sizeof specs / sizeof specs[0])

/* and just past them: refused with SLUICE_EINVAL */
static const char *const refused_specs[] = {
    "token-bucket capacity=2097153 rate=1/1073741824ms",
    "token-bucket capacity=2097152 rate=1/1073741825ms",
    "sliding-window limit=2097152 window=1073741825ms",
    "sliding-window limit=1000000000 window=30d",
    "leaky-bucket capacity=868750 rate=7/30d",
    "fixed-window limit=1 window=1s; token-bucket capacity=1000000000 rate=1/30d",
};
#define N_REFUSED (sizeof refused_specs / sizeof refused_specs[0])

typedef struct {
    const char *b;
    size_t n;
} bkey;

static const bkey trace_keys[] = {
    {"k0", 2}, {"k1", 2}, {"k2", 2}, {"k3", 2}, {"k4", 2}, {"k5", 2}, {"k6", 2}, {"k7", 2},
    {"k8", 2}, {"k9", 2}, {"k10", 3}, {"k11", 3}, {"k12", 3}, {"k13", 3}, {"k1\0", 3}, {"k", 1},
    {"a}b", 3}, {"{x}", 3}, {"|:|", 3}, {"\0", 1}, {"}", 1}, {"{", 1}, {"k0}:0", 5}, {"\xff\xfe", 2},
};
#define N_TRACE_KEYS (sizeof trace_keys / sizeof trace_keys[0])

typedef struct {
    sluice_store *redis, *mem;
    sluice_policy *pol[N_SPECS];
    uint64_t rs;
    int64_t now;
    long decided, failures, errors_seen, verbs_seen;
    int verbs; /* 1: peeks, refunds and resets among the requests; 2: no resets */
    const char *label;
} trace;

/* The clock the stores of a trace read (a reset reads it: set to the
 * step's reading before each step). */
static sluice_clock *trace_clock(void) {
    static sluice_clock *c;
    if (!c) c = sluice_clock_manual_new(0);
    return c;
}

static int trace_init(trace *t, sluice_store *redis, uint64_t seed, int64_t start, const char *label) {
    memset(t, 0, sizeof *t);
    t->redis = redis;
    t->mem = open_store("memory:?max_keys=1000000", trace_clock());
    t->rs = seed;
    t->now = start;
    t->verbs = 1;
    t->label = label;
    for (size_t i = 0; i < N_SPECS; i++) {
        char name[16];
        snprintf(name, sizeof name, "p%zu", i);
        t->pol[i] = policy(name, specs[i]);
        if (!t->pol[i]) return -1;
    }
    return t->redis && t->mem ? 0 : -1;
}

static void trace_free(trace *t) {
    for (size_t i = 0; i < N_SPECS; i++) sluice_policy_free(t->pol[i]);
    sluice_store_close(t->mem);
}

/* One call (a request, or a verb: trace.h) to both stores: they must
 * agree on the return code and, when it is 0, on every field of the
 * decision. */
static int both_verb(trace *t, const sluice_policy *p, const void *key, size_t key_len, int verb, int64_t cost,
                     int64_t now) {
    sluice_decision got, want;
    memset(&got, 0x5a, sizeof got);
    memset(&want, 0x5a, sizeof want);
    sluice_clock_manual_set(trace_clock(), now);
    int rc = store_verb(t->redis, p, key, key_len, verb, cost, now, &got);
    int rc_ref = store_verb(t->mem, p, key, key_len, verb, cost, now, &want);
    t->decided++;
    t->errors_seen += rc != 0;
    t->verbs_seen += verb != TRACE_ACQUIRE;
    if (rc == rc_ref && (rc != 0 || same(&got, &want))) return 0;
    if (t->failures++ < 5) {
        fprintf(stderr, "%s: decision %ld: %s policy %s key \"", t->label, t->decided, verb_name(verb),
                sluice_policy_name(p));
        for (size_t i = 0; i < key_len; i++) {
            unsigned char ch = ((const unsigned char *)key)[i];
            if (ch >= 32 && ch < 127) fputc(ch, stderr);
            else fprintf(stderr, "\\x%02x", ch);
        }
        char text[600];
        sluice_policy_format(p, text, sizeof text);
        fprintf(stderr, "\" (%s) cost %lld at %lld: rc %s, memory store %s\n", text, (long long)cost,
                (long long)now, sluice_err_name(rc), sluice_err_name(rc_ref));
        if (rc == 0) print_decision("redis ", &got);
        if (rc_ref == 0) print_decision("memory", &want);
        fprintf(stderr, "  redis says: %s\n", sluice_store_errmsg(t->redis));
    }
    return -1;
}

/* One request to both stores. */
static int both(trace *t, const sluice_policy *p, const void *key, size_t key_len, int64_t cost, int64_t now) {
    return both_verb(t, p, key, key_len, TRACE_ACQUIRE, cost, now);
}

/* A random request: mostly a few hot keys, small costs and small time
 * steps; sometimes rare keys, costs up to (and past) the least limit, idle
 * gaps of days or decades, readings that go back; and (t->verbs) peeks,
 * refunds and resets among them. Time stays in +-2^50. */
static void random_step(trace *t, size_t only_spec) {
    trace_step st;
    int one = only_spec < N_SPECS; /* that policy alone */
    trace_draw(&t->rs, &t->now, T_EDGE, one ? &t->pol[only_spec] : t->pol, one ? 1 : N_SPECS, N_TRACE_KEYS, &st);
    if (t->verbs) trace_verb(&t->rs, &st);
    if (t->verbs == 2 && st.verb == TRACE_RESET) st.verb = TRACE_PEEK;
    size_t sp = one ? only_spec : st.spec;
    both_verb(t, t->pol[sp], trace_keys[st.key].b, trace_keys[st.key].n, st.verb, st.cost, t->now);
}

/* The per-step hook of a run (faults, migrations), or NULL. */
typedef void (*step_hook)(trace *t, long step, void *ctx);

/* A trace of steps on redis (opened on trace_clock()) against the memory
 * store; the failures. One store saw every call, so the counts of
 * decisions agree too. */
static long run_conformance(sluice_store *redis, uint64_t seed, int64_t start, long steps, const char *label,
                            step_hook hook, void *ctx) {
    trace t;
    if (trace_init(&t, redis, seed, start, label)) {
        trace_free(&t);
        return -1;
    }
    sluice_stats before = stats(redis);
    for (long step = 0; step < steps && t.failures == 0; step++) {
        if (hook) hook(&t, step, ctx);
        random_step(&t, N_SPECS);
    }
    if (t.failures) fprintf(stderr, "%s: seed %llu: %ld of %ld decisions differ\n", label, (unsigned long long)seed,
                            t.failures, t.decided);
    if (!t.failures) {
        CHECK(t.errors_seen > 0); /* the trace did make bad requests */
        CHECK(t.verbs_seen > 0);
        sluice_stats after = stats(redis), mem = stats(t.mem);
        CHECK_EQ(after.allowed - before.allowed, mem.allowed);
        CHECK_EQ(after.denied - before.denied, mem.denied);
        CHECK_EQ(after.shadow_denied - before.shadow_denied, mem.shadow_denied);
        CHECK(mem.shadow_denied > 0);
    }
    long failures = t.failures;
    trace_free(&t);
    return failures;
}

/* ---- a single server ---- */

/* sluice_store_acquire_wait on Redis (client clock) waits exactly as on the
 * memory store: same results, same decisions, same time slept. Each store
 * has its own manual clock (sleeping on it advances it). */
static void wait_body(int port) {
    char url[256];
    sluice_clock *cr = sluice_clock_manual_new(0), *cm = sluice_clock_manual_new(0);
    REQUIRE(cr && cm);
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client&prefix=w:"), cr);
    sluice_store *mem = open_store("memory:", cm);
    REQUIRE(s && mem);
    sluice_policy *pol[N_SPECS];
    for (size_t i = 0; i < N_SPECS; i++) {
        char name[16];
        snprintf(name, sizeof name, "w%zu", i);
        pol[i] = policy(name, specs[i]);
        REQUIRE(pol[i]);
    }
    uint64_t rs = 5;
    long differ = 0, timed_out = 0, waited = 0;
    for (int i = 0; i < 1500; i++) { /* fast: no scaling */
        size_t sp = (size_t)check_range_(&rs, 0, N_SPECS - 1);
        size_t k = (size_t)check_range_(&rs, 0, 2);
        int64_t limit = least_limit(pol[sp]);
        int64_t cost = check_range_(&rs, 0, 3) ? 1 : check_range_(&rs, 1, limit < 6 ? limit : 6);
        int64_t timeout = check_range_(&rs, 0, 3) == 0 ? 0 : check_range_(&rs, 0, 60);
        int64_t step = check_range_(&rs, 0, 5);
        sluice_clock_manual_advance(cr, step);
        sluice_clock_manual_advance(cm, step);
        int64_t before = sluice_clock_now_ms(cr);
        sluice_decision got, want;
        memset(&got, 0, sizeof got);
        memset(&want, 0, sizeof want);
        int rc = sluice_store_acquire_wait(s, pol[sp], trace_keys[k].b, trace_keys[k].n, cost, timeout, &got);
        int rc_ref = sluice_store_acquire_wait(mem, pol[sp], trace_keys[k].b, trace_keys[k].n, cost, timeout, &want);
        int ok = rc == rc_ref && sluice_clock_now_ms(cr) == sluice_clock_now_ms(cm) && (rc != 0 || same(&got, &want));
        if (!ok && differ++ < 3) {
            fprintf(stderr, "acquire_wait %d: %s cost %lld timeout %lld: %s (%lld ms), memory %s (%lld ms)\n", i,
                    specs[sp], (long long)cost, (long long)timeout, sluice_err_name(rc),
                    (long long)(sluice_clock_now_ms(cr) - before), sluice_err_name(rc_ref),
                    (long long)(sluice_clock_now_ms(cm) - before));
            print_decision("redis ", &got);
            print_decision("memory", &want);
        }
        timed_out += rc == SLUICE_ETIMEDOUT;
        waited += sluice_clock_now_ms(cr) > before;
        /* keep the two clocks together even after a difference */
        sluice_clock_manual_set(cm, sluice_clock_now_ms(cr));
    }
    CHECK_EQ(differ, 0);
    CHECK(timed_out > 0 && waited > 0);
    for (size_t i = 0; i < N_SPECS; i++) sluice_policy_free(pol[i]);
    sluice_store_close(s);
    sluice_store_close(mem);
    sluice_clock_free(cr);
    sluice_clock_free(cm);
}

TEST(acquire_wait_equals_the_memory_store) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) wait_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}



TEST(conformance_with_the_memory_store) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) {
        long steps = (long)(10000 * scale());
        /* from the lowest reading the store takes; from below 0 up; from
         * 0; up to (and stuck at) the highest */
        const int64_t starts[] = {-T_EDGE, -5000, 0, T_EDGE - (INT64_C(1) << 42)};
        for (uint64_t seed = 1; seed <= 4; seed++) {
            /* a store and a key space of its own for each trace */
            char url[256], params[64];
            snprintf(params, sizeof params, "clock=client&prefix=s%llu:", (unsigned long long)seed);
            sluice_store *s = open_store(url_of(url, sizeof url, g.s[a].port, params), trace_clock());
            CHECK(s != NULL);
            if (!s) continue;
            CHECK_STR(sluice_store_kind(s), "redis");
            CHECK_EQ(run_conformance(s, seed, starts[seed - 1], steps, "conformance", NULL, NULL), 0);
            sluice_stats st = stats(s);
            CHECK_EQ(st.failures, 0);
            CHECK(st.allowed > 0 && st.denied > 0);
            CHECK(st.keys > 0);
            sluice_store_close(s);
        }
    }
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* What the store cannot do exactly, it refuses, saying why; what it can, at
 * the very edge, it does. */
static void edges_body(int port) {
    char url[256];
    /* the batches below read this clock: the lowest reading, so that they
     * leave the store's time where the single requests find it */
    static sluice_clock *c;
    if (!c) c = sluice_clock_manual_new(-T_EDGE);
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client"), c);
    sluice_store *mem = open_store("memory:", NULL);
    REQUIRE(c && s && mem);
    sluice_decision d;
    for (size_t i = 0; i < N_REFUSED; i++) {
        sluice_policy *p = policy("too-big", refused_specs[i]);
        REQUIRE(p);
        CHECK_EQ(sluice_store_acquire_at(mem, p, "k", 1, 1, 0, &d), 0); /* valid: the memory store takes it */
        for (int again = 0; again < 2; again++) { /* and not only the first time */
            CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 0, &d), SLUICE_EINVAL);
            const char *msg = sluice_store_errmsg(s);
            if (!strstr(msg, "2^53") || !strstr(msg, "too-big"))
                fprintf(stderr, "refused %s: message \"%s\"\n", refused_specs[i], msg);
            CHECK(strstr(msg, "2^53") != NULL);
            CHECK(strstr(msg, "too-big") != NULL);
        }
        /* in a batch too, among good requests */
        sluice_policy *ok = policy("fine", "fixed-window limit=3 window=1h");
        REQUIRE(ok);
        sluice_request reqs[3] = {{ok, "b", 1, 1}, {p, "b", 1, 1}, {ok, "b", 1, 1}};
        sluice_decision out[3];
        int results[3];
        CHECK_EQ(sluice_store_acquire_many(s, reqs, 3, out, results), 0);
        CHECK_EQ(results[0], 0);
        CHECK_EQ(results[1], SLUICE_EINVAL);
        CHECK_EQ(results[2], 0);
        CHECK(results[2] == 0 && out[2].allowed && out[2].remaining == 1); /* 3 - 2 */
        sluice_policy_free(ok);
        sluice_policy_free(p);
        /* the batch's key is used once per refused spec: start afresh */
        redisReply *r = rs_cmd(port, "FLUSHDB");
        if (r) freeReplyObject(r);
    }
    /* readings: +-2^50 are taken, one more is refused, naming the reading,
     * and changing nothing: the rest equals the memory store given the
     * same requests without the refused ones */
    sluice_store_close(mem);
    mem = open_store("memory:", NULL);
    sluice_policy *p = policy("t", "sliding-log limit=2 window=10ms; token-bucket capacity=3 rate=1/ms");
    REQUIRE(p && mem);
    const struct {
        const char *key;
        int64_t cost, now;
    } reqs[] = {{"low", 1, -T_EDGE}, {"low", 1, -T_EDGE - 1}, {"low", 1, -T_EDGE + 3}, {"high", 2, T_EDGE},
                {"high", 1, T_EDGE + 1}, {"high", 1, T_EDGE}, {"low", 1, 0}, {"high", 1, INT64_C(1) << 52},
                {"high", 1, T_EDGE}, {"low", 1, T_EDGE}};
    for (size_t i = 0; i < sizeof reqs / sizeof reqs[0]; i++) {
        sluice_decision want;
        int rc = sluice_store_acquire_at(s, p, reqs[i].key, strlen(reqs[i].key), reqs[i].cost, reqs[i].now, &d);
        if (reqs[i].now > T_EDGE || reqs[i].now < -T_EDGE) {
            char text[32];
            snprintf(text, sizeof text, "%lld", (long long)reqs[i].now);
            CHECK_EQ(rc, SLUICE_EINVAL);
            if (!strstr(sluice_store_errmsg(s), text)) fprintf(stderr, "reading %s: \"%s\"\n", text, sluice_store_errmsg(s));
            CHECK(strstr(sluice_store_errmsg(s), text) != NULL);
            CHECK(strstr(sluice_store_errmsg(s), "2^50") != NULL);
            continue;
        }
        CHECK_EQ(rc, 0);
        CHECK_EQ(sluice_store_acquire_at(mem, p, reqs[i].key, strlen(reqs[i].key), reqs[i].cost, reqs[i].now, &want), 0);
        if (!same(&d, &want)) {
            fprintf(stderr, "readings at the edge, request %zu (%s at %lld):\n", i, reqs[i].key, (long long)reqs[i].now);
            print_decision("redis ", &d);
            print_decision("memory", &want);
        }
        CHECK(same(&d, &want));
    }
    sluice_policy_free(p);
    sluice_store_close(s);
    sluice_store_close(mem);
    sluice_clock_free(c);
    c = NULL;
}

TEST(refuses_what_lua_cannot_compute_exactly) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) edges_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* Keys are bytes: every one of these is its own key, and the names Redis
 * holds are exactly PREFIX{NAME|LEN:KEY} (and ":I" for sliding-log part
 * I), all names of one decision under one hash tag. */
static void keys_body(int port) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client&prefix=t:"), NULL);
    sluice_policy *p = policy("bin", "fixed-window limit=1 window=1h; sliding-log limit=5 window=1h; "
                                     "sliding-log limit=3 window=2h");
    REQUIRE(s && p);
    static char big[SLUICE_KEY_MAX + 1];
    memset(big, 'x', sizeof big);
    big[100] = '}', big[200] = '{', big[300] = 0, big[400] = '|', big[401] = ':';
    const bkey keys[] = {
        {"a\0b", 3}, {"a\0c", 3}, {"a", 1}, {"a\0", 2}, {"", 1}, {"\0\0", 2}, {"ab", 2}, {"abc", 3},
        {"{", 1}, {"}", 1}, {"{}", 2}, {"}{", 2}, {"{a}", 3}, {"a}b", 3}, {"a}c", 3}, {"a}", 2},
        {":", 1}, {"|", 1}, {"1:a", 3}, {"1", 1}, {"a|b", 3}, {"bin|x", 5}, {"}:1", 3}, {"a}:1", 4},
        {"\xff", 1}, {"\r\n", 2}, {"*3\r\n", 4}, {" ", 1},
        {big, SLUICE_KEY_MAX}, {big, SLUICE_KEY_MAX - 1}, {big, 101}, {big, 100}, {big, 1},
    };
    const size_t n = sizeof keys / sizeof keys[0];
    sluice_decision d;
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ(sluice_store_acquire_at(s, p, keys[i].b, keys[i].n, 1, 1000, &d), 0);
        if (!d.allowed) fprintf(stderr, "key %zu shares state with another\n", i);
        CHECK(d.allowed && d.remaining == 0); /* a distinct key each time */
    }
    for (size_t i = 0; i < n; i++) {
        CHECK_EQ(sluice_store_acquire_at(s, p, keys[i].b, keys[i].n, 1, 1000, &d), 0);
        CHECK(!d.allowed); /* and the same key again */
    }
    /* bad keys, as for every store */
    CHECK_EQ(sluice_store_acquire_at(s, p, "", 0, 1, 1000, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_acquire_at(s, p, big, SLUICE_KEY_MAX + 1, 1, 1000, &d), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(s), "key") != NULL);
    /* the names */
    names ns = {0};
    REQUIRE(names_scan(port, &ns) == 0);
    CHECK_EQ(ns.n, 3 * n);
    char name[3][1024];
    size_t len[3];
    for (size_t i = 0; i < n; i++) {
        len[0] = state_name(name[0], "t:", "bin", keys[i].b, keys[i].n, -1);
        len[1] = state_name(name[1], "t:", "bin", keys[i].b, keys[i].n, 1);
        len[2] = state_name(name[2], "t:", "bin", keys[i].b, keys[i].n, 2);
        const char *tag0, *tag;
        size_t tl0, tl;
        hash_tag(name[0], len[0], &tag0, &tl0);
        for (int j = 0; j < 3; j++) {
            if (!names_has(&ns, name[j], len[j])) fprintf(stderr, "key %zu: name %d missing\n", i, j);
            CHECK(names_has(&ns, name[j], len[j]));
            hash_tag(name[j], len[j], &tag, &tl);
            CHECK(tl == tl0 && !memcmp(tag, tag0, tl)); /* one tag per decision */
            CHECK(tag0 == name[0] + 3);                 /* the tag starts right after the prefix */
            CHECK(slot_of(name[j], len[j]) == slot_of(name[0], len[0]));
        }
    }
    /* and every name held is a state name or a log name of these keys:
     * 3n distinct names found above, 3n held */
    names_free(&ns);
    sluice_policy_free(p);
    sluice_store_close(s);
}

TEST(keys_are_binary_safe_and_independent) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) keys_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* The longest names: a 63-byte prefix, a 64-byte policy name, 512-byte
 * keys, eight sliding logs (nine names per decision). */
static void longest_body(int port) {
    char url[256], prefix[64], pname[65];
    memset(prefix, 'P', 63), prefix[63] = 0;
    memset(pname, 'n', 64), pname[64] = 0;
    char params[128];
    snprintf(params, sizeof params, "clock=client&prefix=%s", prefix);
    sluice_store *s = open_store(url_of(url, sizeof url, port, params), NULL);
    sluice_store *mem = open_store("memory:", NULL);
    sluice_policy *p = policy(pname, specs[11]);
    REQUIRE(s && mem && p);
    REQUIRE(sluice_policy_n_parts(p) == 8);
    static char key[SLUICE_KEY_MAX];
    long differ = 0;
    for (int i = 0; i < 300; i++) {
        memset(key, 'a' + i % 3, sizeof key);
        key[i % SLUICE_KEY_MAX] = '}';
        sluice_decision got, want;
        int64_t now = i / 2;
        int rc = sluice_store_acquire_at(s, p, key, sizeof key, 1 + i % 2, now, &got);
        int rc_ref = sluice_store_acquire_at(mem, p, key, sizeof key, 1 + i % 2, now, &want);
        CHECK_EQ(rc, rc_ref);
        if (rc == 0 && !same(&got, &want) && differ++ == 0) {
            fprintf(stderr, "longest names, decision %d: %s\n", i, sluice_store_errmsg(s));
            print_decision("redis ", &got);
            print_decision("memory", &want);
        }
    }
    CHECK_EQ(differ, 0);
    CHECK_EQ(stats(s).failures, 0);
    names ns = {0};
    REQUIRE(names_scan(port, &ns) == 0);
    CHECK(ns.n >= 9);
    for (size_t i = 0; i < ns.n; i++) {
        CHECK(ns.len[i] <= 63 + 1 + 64 + 1 + 4 + SLUICE_KEY_MAX + 1 + 2);
        CHECK(!memcmp(ns.name[i], prefix, 63));
    }
    names_free(&ns);
    sluice_policy_free(p);
    sluice_store_close(s);
    sluice_store_close(mem);
}

TEST(longest_names_and_most_arguments) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) longest_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* A sliding log's running totals restart from its base when they near 2^50
 * (exactness in Lua). Reaching that through requests takes a million
 * admissions, so the state is written as the store would have left it
 * after a long life (the format of decide.lua: the state key holds
 * "TIME 0", the log's sorted set holds its base as member "bBASE" at score
 * -inf, and each entry as member = running total, score = ms),
 * equal to a short history given to the memory store. */
static void rebase_body(int port) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client"), NULL);
    sluice_store *mem = open_store("memory:", NULL);
    sluice_policy *p = policy("old", "sliding-log limit=7 window=100ms");
    REQUIRE(s && mem && p);
    sluice_decision d, want;
    /* the history: cost 2 at 990, cost 3 at 995; running totals end 6
     * below 2^50 */
    const long long base = (1LL << 50) - 11;
    char state[256], log[256], st_val[64], m0[32], m1[32], m2[32];
    size_t sl = state_name(state, "sluice:", "old", "k", 1, -1);
    size_t ll = state_name(log, "sluice:", "old", "k", 1, 0);
    snprintf(st_val, sizeof st_val, "5,7,100,0,100 995 0"); /* its configuration, its time, the log's 0 */
    snprintf(m0, sizeof m0, "b%lld", base);
    snprintf(m1, sizeof m1, "%lld", base + 2);
    snprintf(m2, sizeof m2, "%lld", base + 5);
    CHECK(rs_ok(port, "SET %b %s PX 600000", state, sl, st_val));
    CHECK(rs_ok(port, "ZADD %b -inf %s 990 %s 995 %s", log, ll, m0, m1, m2));
    CHECK(rs_ok(port, "PEXPIRE %b 600000", log, ll));
    CHECK_EQ(sluice_store_acquire_at(mem, p, "k", 1, 2, 990, &want), 0);
    CHECK_EQ(sluice_store_acquire_at(mem, p, "k", 1, 3, 995, &want), 0);
    /* then the same requests to both, across the rebase and long after */
    uint64_t rs = 9;
    int64_t now = 995;
    long differ = 0;
    for (int i = 0; i < 400; i++) {
        now += check_range_(&rs, 0, 30);
        int64_t cost = check_range_(&rs, 1, 4);
        int rc = sluice_store_acquire_at(s, p, "k", 1, cost, now, &d);
        int rc_ref = sluice_store_acquire_at(mem, p, "k", 1, cost, now, &want);
        CHECK_EQ(rc, rc_ref);
        if (rc == 0 && !same(&d, &want) && differ++ < 3) {
            fprintf(stderr, "sliding log near 2^50, decision %d (cost %lld at %lld): %s\n", i, (long long)cost,
                    (long long)now, sluice_store_errmsg(s));
            print_decision("redis ", &d);
            print_decision("memory", &want);
        }
    }
    CHECK_EQ(differ, 0);
    /* the totals did restart: every member is small again */
    redisReply *r = rs_cmd(port, "ZRANGE %b 0 -1", log, ll);
    CHECK(r && r->type == REDIS_REPLY_ARRAY && r->elements > 0);
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements; i++)
        CHECK(atoll(r->element[i]->str + (r->element[i]->str[0] == 'b')) < (1LL << 40));
    if (r) freeReplyObject(r);
    sluice_policy_free(p);
    sluice_store_close(s);
    sluice_store_close(mem);
}

TEST(sliding_log_totals_restart_near_2_50) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) rebase_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* Redis may drop a name before its expiry (maxmemory with a volatile-* or
 * allkeys-* policy evicts keys one by one). Losing state may make a
 * decision more lenient, as a forgotten key is, but never stricter than
 * both the true state and a fresh one: here the true window holds 1 of 3,
 * a fresh one 0, so a request of cost 2 must be admitted whichever names
 * survive. */
static void evicted_body(int port) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client"), NULL);
    sluice_policy *p = policy("ev", "sliding-log limit=3 window=100ms");
    REQUIRE(s && p);
    sluice_decision d;
    const char *victims[] = {"state", "log", "none"};
    for (int v = 0; v < 3; v++) {
        char key[8];
        int kn = snprintf(key, sizeof key, "k%d", v);
        int64_t t0 = 1000 * v;
        for (int i = 0; i < 3; i++) CHECK_EQ(sluice_store_acquire_at(s, p, key, (size_t)kn, 1, t0 + i, &d), 0);
        CHECK(d.allowed && d.remaining == 0);
        CHECK_EQ(sluice_store_acquire_at(s, p, key, (size_t)kn, 1, t0 + 150, &d), 0); /* 1 in the window */
        CHECK(d.allowed && d.remaining == 2);
        char name[128];
        size_t len = state_name(name, "sluice:", "ev", key, (size_t)kn, v == 1 ? 0 : -1);
        if (v < 2) CHECK_EQ(rs_int(port, "DEL %b", name, len), 1); /* as an eviction would */
        CHECK_EQ(sluice_store_acquire_at(s, p, key, (size_t)kn, 2, t0 + 160, &d), 0);
        if (!d.allowed || d.remaining < 0)
            fprintf(stderr, "after losing the %s name: cost 2 %s (remaining %lld, retry %lld ms) with 1 of 3 used\n",
                    victims[v], d.allowed ? "admitted" : "denied", (long long)d.remaining, (long long)d.retry_after_ms);
        CHECK(d.allowed);
        CHECK(d.remaining >= 0 && d.remaining <= 1);
    }
    sluice_policy_free(p);
    sluice_store_close(s);
}

TEST(evicted_names_never_make_decisions_stricter) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) evicted_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* A key is known by its policy's name: a configuration changed under the
 * name keeps its usage (docs/semantics.md, "Retune"); another name, the
 * prefix and the database separate key spaces. */
static void names_body(int port) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client"), NULL);
    sluice_store *other_prefix = open_store(url_of(url, sizeof url, port, "clock=client&prefix=other:"), NULL);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/3?clock=client", port);
    sluice_store *db3 = open_store(url, NULL);
    sluice_policy *a = policy("tier", "token-bucket capacity=2 rate=1/h");
    sluice_policy *a_again = policy("tier", "token-bucket capacity=2 rate=1/h");
    sluice_policy *b = policy("tier", "sliding-window limit=5 window=1h");
    sluice_policy *other = policy("other", "token-bucket capacity=2 rate=1/h");
    REQUIRE(s && other_prefix && db3 && a && a_again && b && other);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, a, "u", 1, 2, 0, &d), 0);
    CHECK(d.allowed && d.remaining == 0);
    CHECK_EQ(sluice_store_acquire_at(s, a_again, "u", 1, 1, 0, &d), 0); /* same name and text: same */
    CHECK(!d.allowed && d.retry_after_ms == 3600000);
    CHECK_EQ(sluice_store_acquire_at(s, b, "u", 1, 1, 0, &d), 0); /* changed: the 2 in use charged, then 1 */
    CHECK(d.allowed && d.remaining == 2 && d.limit == 5);
    CHECK_EQ(sluice_store_acquire_at(s, other, "u", 1, 1, 0, &d), 0); /* other name: its own */
    CHECK(d.allowed && d.remaining == 1);
    CHECK_EQ(sluice_store_acquire_at(other_prefix, a, "u", 1, 1, 0, &d), 0);
    CHECK(d.allowed && d.remaining == 1);
    CHECK_EQ(sluice_store_acquire_at(db3, a, "u", 1, 1, 0, &d), 0);
    CHECK(d.allowed && d.remaining == 1);
    CHECK_EQ(rs_int(port, "DBSIZE"), 3); /* tier's u (one name for both configurations), other's, other:'s */
    sluice_store_close(s);
    sluice_store_close(other_prefix);
    sluice_store_close(db3);
    sluice_policy_free(a);
    sluice_policy_free(a_again);
    sluice_policy_free(b);
    sluice_policy_free(other);
}

TEST(changed_configuration_keeps_usage_prefix_and_db_separate) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) names_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* ---- concurrency ---- */

enum { N_THREADS = 8 };

typedef struct {
    sluice_store *s;
    const sluice_policy *p;
    int attempts;
    pthread_barrier_t *go;
    long admitted, errors, unenforced;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    pthread_barrier_wait(r->go);
    for (int i = 0; i < r->attempts; i++) {
        sluice_decision d;
        if (sluice_store_acquire_at(r->s, r->p, "fresh-key", 9, 1, 5000, &d)) r->errors++;
        else {
            r->admitted += d.allowed;
            r->unenforced += !d.enforced;
        }
    }
    return NULL;
}

static void race_threads(int port, const char *params, const char *spec, long capacity, int attempts) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, params), NULL);
    sluice_policy *p = policy("race", spec);
    REQUIRE(s && p);
    pthread_t t[N_THREADS];
    racer r[N_THREADS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N_THREADS);
    for (int i = 0; i < N_THREADS; i++) {
        memset(&r[i], 0, sizeof r[i]);
        r[i].s = s, r[i].p = p, r[i].attempts = attempts, r[i].go = &go;
        pthread_create(&t[i], NULL, race, &r[i]);
    }
    long admitted = 0;
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(r[i].errors, 0);
        CHECK_EQ(r[i].unenforced, 0);
        admitted += r[i].admitted;
    }
    if (admitted != capacity) fprintf(stderr, "%s (%s): %ld admitted of %ld\n", spec, params, admitted, capacity);
    CHECK_EQ(admitted, capacity);
    sluice_stats st = stats(s);
    CHECK_EQ(st.allowed, capacity);
    CHECK_EQ(st.denied, (long)N_THREADS * attempts - capacity);
    CHECK_EQ(st.failures, 0);
    pthread_barrier_destroy(&go);
    sluice_store_close(s);
    sluice_policy_free(p);
}

TEST(threads_racing_one_fresh_key_admit_exactly_capacity) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) {
        int n = SANITIZED ? 40 : 100;
        /* exactness, not timing: a wait for a connection may be long on a
         * busy machine, and one given up would admit unenforced */
        race_threads(g.s[a].port, "clock=client&timeout_ms=10000", "token-bucket capacity=300 rate=1/h", 300, n);
        /* fewer connections than threads: callers wait for one */
        race_threads(g.s[a].port, "clock=client&pool=3&timeout_ms=10000&prefix=b:",
                     "sliding-log limit=200 window=1h; fixed-window limit=250 window=1d", 200, n);
        race_threads(g.s[a].port, "clock=client&pool=1&timeout_ms=10000&prefix=c:",
                     "sliding-window limit=150 window=1h; leaky-bucket capacity=170 rate=1/m", 150, n);
    }
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* Forked processes, each with its own store, on one fresh key. */
static void race_processes(int port, const char *spec, long capacity, int n_procs, int attempts) {
    int go[2], done[2];
    REQUIRE(pipe(go) == 0 && pipe(done) == 0);
    pid_t pids[16];
    fflush(NULL);
    for (int i = 0; i < n_procs; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            close(go[1]);
            close(done[0]);
            char url[256];
            sluice_store_options o = SLUICE_STORE_OPTIONS_INIT;
            sluice_store *s = NULL;
            sluice_policy *p = NULL;
            long result[2] = {0, 0}; /* admitted, errors */
            if (sluice_store_open(url_of(url, sizeof url, port, "clock=client&timeout_ms=10000&prefix=proc:"), &o, &s) ||
                sluice_policy_parse("race", spec, &p, NULL, 0))
                result[1] = -1;
            char c;
            if (read(go[0], &c, 1) != 1) result[1] = -1; /* all start together */
            for (int k = 0; k < attempts && result[1] >= 0; k++) {
                sluice_decision d;
                if (sluice_store_acquire_at(s, p, "shared", 6, 1, 77, &d) || !d.enforced) result[1]++;
                else result[0] += d.allowed;
            }
            if (write(done[1], result, sizeof result) != sizeof result) _exit(3);
            _exit(0); /* never exit(): the parent owns the servers */
        }
    }
    close(go[0]);
    close(done[1]);
    char start[16] = {0};
    CHECK(write(go[1], start, (size_t)n_procs) == n_procs);
    close(go[1]);
    long admitted = 0;
    for (int i = 0; i < n_procs; i++) {
        long result[2] = {0, -1};
        CHECK(read(done[0], result, sizeof result) == (ssize_t)sizeof result);
        CHECK_EQ(result[1], 0);
        admitted += result[0];
    }
    close(done[0]);
    for (int i = 0; i < n_procs; i++) {
        int status = 0;
        waitpid(pids[i], &status, 0);
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    if (admitted != capacity) fprintf(stderr, "%s: %ld admitted of %ld by %d processes\n", spec, admitted, capacity, n_procs);
    CHECK_EQ(admitted, capacity);
}

TEST(processes_racing_one_fresh_key_admit_exactly_capacity) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) {
        race_processes(g.s[a].port, "gcra rate=1/h burst=250; sliding-log limit=260 window=1h", 250, 6, 100);
        redisReply *r = rs_cmd(g.s[a].port, "FLUSHALL");
        if (r) freeReplyObject(r);
        race_processes(g.s[a].port, "sliding-window limit=99 window=1d", 99, 4, 60);
    }
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* ---- faults ---- */

/* Decides on s until it answers enforced again (bounded: the store waits
 * RETRY_MS between attempts to reach a down server). 1 when it did. */
static int recovers(sluice_store *s, const sluice_policy *p) {
    int64_t deadline = rs_now_ms() + 5000;
    while (rs_now_ms() < deadline) {
        sluice_decision d;
        int rc = sluice_store_acquire_at(s, p, "probe", 5, 1, 0, &d);
        if (rc == 0 && d.enforced) return 1;
        rs_sleep_ms(10);
    }
    return 0;
}

static void killed_body(rs_group *g, int a) {
    int port = g->s[a].port;
    char url[256];
    const char *modes[3] = {"allow", "deny", "error"};
    sluice_store *s[3];
    sluice_clock *c = sluice_clock_manual_new(100); /* the batches' reading */
    REQUIRE(c);
    for (int m = 0; m < 3; m++) {
        char params[128];
        snprintf(params, sizeof params, "clock=client&on_error=%s&timeout_ms=500&connect_timeout_ms=500&prefix=%s:",
                 modes[m], modes[m]);
        s[m] = open_store(url_of(url, sizeof url, port, params), c);
    }
    sluice_policy *p = policy("f", "token-bucket capacity=5 rate=1/s; sliding-log limit=4 window=100ms");
    REQUIRE(s[0] && s[1] && s[2] && p);
    /* a run, killed in its middle */
    sluice_decision d;
    for (int m = 0; m < 3; m++) {
        for (int i = 0; i < 3; i++) {
            CHECK_EQ(sluice_store_acquire_at(s[m], p, "user", 4, 1, 10 * i, &d), 0);
            CHECK(d.allowed && d.enforced && d.remaining == 3 - i);
        }
    }
    rs_signal(g, a, SIGKILL);
    for (int i = 0; i < 4; i++) {
        memset(&d, 0x5a, sizeof d);
        CHECK_EQ(sluice_store_acquire_at(s[0], p, "user", 4, 1, 100, &d), 0);
        CHECK(d.allowed && !d.enforced);
        memset(&d, 0x5a, sizeof d);
        CHECK_EQ(sluice_store_acquire_at(s[1], p, "user", 4, 1, 100, &d), 0);
        CHECK(!d.allowed && !d.enforced);
        CHECK(d.retry_after_ms > 0);
        CHECK_EQ(sluice_store_acquire_at(s[2], p, "user", 4, 1, 100, &d), SLUICE_ESTORE);
        const char *msg = sluice_store_errmsg(s[2]);
        char port_text[16];
        snprintf(port_text, sizeof port_text, "%d", port);
        if (!strstr(msg, "redis")) fprintf(stderr, "errmsg after a kill: \"%s\"\n", msg);
        CHECK(strstr(msg, "redis") != NULL);
        CHECK(strlen(msg) > strlen("redis: "));
        if (i > 0) CHECK(strstr(msg, port_text) != NULL); /* "cannot connect to ...:PORT" or "...:PORT is down" */
        /* batches fail the same way */
        sluice_request reqs[2] = {{p, "user", 4, 1}, {p, "other", 5, 1}};
        sluice_decision out[2];
        int results[2];
        CHECK_EQ(sluice_store_acquire_many(s[2], reqs, 2, out, results), 0);
        CHECK_EQ(results[0], SLUICE_ESTORE);
        CHECK_EQ(results[1], SLUICE_ESTORE);
        CHECK_EQ(sluice_store_acquire_many(s[0], reqs, 2, out, results), 0);
        CHECK(results[0] == 0 && out[0].allowed && !out[0].enforced);
        CHECK(results[1] == 0 && out[1].allowed && !out[1].enforced);
        if (i == 1) rs_sleep_ms(120); /* past the store's retry interval: it tries to connect */
    }
    for (int m = 0; m < 3; m++) {
        sluice_stats st;
        /* a store failure, whatever on_error says: the keys are unknown,
         * the counters are the store's own */
        CHECK_EQ(sluice_store_stats(s[m], &st), SLUICE_ESTORE);
        char port_text[16];
        snprintf(port_text, sizeof port_text, ":%d", port);
        const char *msg = sluice_store_errmsg(s[m]);
        if (!strstr(msg, port_text)) fprintf(stderr, "stats with the server down: \"%s\"\n", msg);
        CHECK(strstr(msg, port_text) != NULL);
        CHECK(st.failures >= 4);
        CHECK_EQ(st.reconnects, 0);
        CHECK_EQ(st.keys, -1); /* unknown while the server is down */
        CHECK_EQ(st.capacity, -1);
        CHECK_EQ(st.allowed, 3);
    }
    CHECK_EQ(stats(s[2]).failures, 12);
    /* back on the same port, empty: each store finds it by itself */
    REQUIRE(rs_restart(g, a) == 0);
    for (int m = 0; m < 3; m++) {
        CHECK(recovers(s[m], p));
        sluice_stats st;
        CHECK_EQ(sluice_store_stats(s[m], &st), 0);
        CHECK(st.keys >= 1);
        CHECK(st.reconnects >= 1);
        CHECK(st.failures >= 4);
        /* and decides exactly again (the server lost the old state) */
        sluice_store *mem = open_store("memory:", NULL);
        REQUIRE(mem);
        for (int i = 0; i < 12; i++) {
            sluice_decision want;
            CHECK_EQ(sluice_store_acquire_at(s[m], p, "after", 5, 1, 1000 + 7 * i, &d), 0);
            CHECK_EQ(sluice_store_acquire_at(mem, p, "after", 5, 1, 1000 + 7 * i, &want), 0);
            if (!same(&d, &want)) {
                fprintf(stderr, "on_error=%s, after the restart, decision %d:\n", modes[m], i);
                print_decision("redis ", &d);
                print_decision("memory", &want);
            }
            CHECK(same(&d, &want));
        }
        sluice_store_close(mem);
    }
    for (int m = 0; m < 3; m++) sluice_store_close(s[m]);
    sluice_policy_free(p);
    sluice_clock_free(c);
}

TEST(server_killed_and_restarted) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) killed_body(&g, a);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* A server restarted between two decisions (up again, empty): the pooled
 * connection it closed fails the first decision (it was sent: it may have
 * run), and the next one connects anew at once, with no wait for the
 * server to come back: it never went away for long. */
TEST(restarted_server_is_used_at_once) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    REQUIRE(a >= 0);
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, g.s[a].port, "clock=client&on_error=error"), NULL);
    sluice_policy *p = policy("rs", "token-bucket capacity=5 rate=1/s");
    REQUIRE(s && p);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 0, &d), 0);
    REQUIRE(rs_restart(&g, a) == 0);
    int rc1 = sluice_store_acquire_at(s, p, "k", 1, 1, 0, &d);
    if (rc1) CHECK(strstr(sluice_store_errmsg(s), "may have taken effect") != NULL);
    int rc2 = sluice_store_acquire_at(s, p, "k", 1, 1, 0, &d); /* no pause in between */
    if (rc2) fprintf(stderr, "the second decision after the restart: %s\n", sluice_store_errmsg(s));
    CHECK_EQ(rc2, 0);
    CHECK(d.allowed && d.enforced);
    sluice_store_close(s);
    sluice_policy_free(p);
    rs_group_close(&g);
}

/* SCRIPT FLUSH under a running trace: the store loads the script again and
 * no error reaches the caller (single requests and batches). */
typedef struct {
    int port;
    long every;
    sluice_clock *clock;
} flush_ctx;

static void flush_hook(trace *t, long step, void *arg) {
    flush_ctx *f = arg;
    if (step % f->every != f->every - 1) return;
    CHECK(rs_ok(f->port, "SCRIPT FLUSH"));
    if (step % (2 * f->every) == 2 * f->every - 1) {
        /* a batch right after the flush: pipelined, every reply NOSCRIPT */
        sluice_request reqs[6];
        sluice_decision got[6], want[6];
        int rc[6], rc_ref[6];
        for (int i = 0; i < 6; i++) {
            reqs[i].policy = t->pol[(size_t)(step + i) % N_SPECS];
            reqs[i].key = trace_keys[i % 3].b;
            reqs[i].key_len = trace_keys[i % 3].n;
            reqs[i].cost = 1;
        }
        sluice_clock_manual_set(f->clock, t->now);
        CHECK_EQ(sluice_store_acquire_many(t->redis, reqs, 6, got, rc), 0);
        /* one by one on the memory store */
        for (int i = 0; i < 6; i++) {
            rc_ref[i] = sluice_store_acquire_at(t->mem, reqs[i].policy, reqs[i].key, reqs[i].key_len, 1, t->now, &want[i]);
            CHECK_EQ(rc[i], rc_ref[i]);
            if (rc[i] == 0 && rc_ref[i] == 0) {
                if (!same(&got[i], &want[i])) t->failures++;
                CHECK(same(&got[i], &want[i]));
            }
        }
    }
}

TEST(script_flush_mid_run) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) {
        char url[256];
        sluice_clock *c = trace_clock();
        sluice_store *s = open_store(url_of(url, sizeof url, g.s[a].port, "clock=client"), c);
        CHECK(s != NULL);
        if (s) {
            flush_ctx f = {g.s[a].port, 97, c};
            CHECK_EQ(run_conformance(s, 21, 0, (long)(3000 * scale()), "script flush", flush_hook, &f), 0);
            CHECK_EQ(stats(s).failures, 0);
        }
        sluice_store_close(s);
    }
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* timeout_ms and connect_timeout_ms are honoured (loosely: well under ten
 * times the timeout; the point is that a call does not hang). */
static void timeouts_body(rs_group *g, int a) {
    int port = g->s[a].port;
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client&timeout_ms=60&connect_timeout_ms=60&on_error=error"), NULL);
    sluice_store *allow = open_store(url_of(url, sizeof url, port, "clock=client&timeout_ms=60&prefix=x:"), NULL);
    sluice_policy *p = policy("to", "fixed-window limit=100 window=1h");
    REQUIRE(s && allow && p);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 0, &d), 0);
    CHECK_EQ(sluice_store_acquire_at(allow, p, "k", 1, 1, 0, &d), 0);
    rs_signal(g, a, SIGSTOP);
    for (int i = 0; i < 3; i++) {
        int64_t t0 = rs_now_ms();
        CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 0, &d), SLUICE_ESTORE);
        int64_t took = rs_now_ms() - t0;
        if (took >= 600) fprintf(stderr, "a call to a stopped server took %lld ms (timeout 60 ms)\n", (long long)took);
        CHECK(took < 600);
        CHECK(sluice_store_errmsg(s)[0] != 0);
        t0 = rs_now_ms();
        CHECK_EQ(sluice_store_acquire_at(allow, p, "k", 1, 1, 0, &d), 0);
        CHECK(d.allowed && !d.enforced);
        CHECK(rs_now_ms() - t0 < 600);
        rs_sleep_ms(110); /* past the store's retry interval: a new connection, a new timeout */
    }
    /* stats: SLUICE_ESTORE, in time, saying the server did not answer */
    sluice_stats st;
    int64_t t0 = rs_now_ms();
    CHECK_EQ(sluice_store_stats(allow, &st), SLUICE_ESTORE);
    CHECK(rs_now_ms() - t0 < 600);
    CHECK_EQ(st.keys, -1);
    CHECK(strstr(sluice_store_errmsg(allow), "DBSIZE") || strstr(sluice_store_errmsg(allow), "is down"));
    /* verify=1: the open fails, naming the server that did not answer */
    sluice_store *v = (sluice_store *)1;
    char err[256] = "", port_text[16];
    snprintf(port_text, sizeof port_text, ":%d", port);
    t0 = rs_now_ms();
    CHECK_EQ(sluice_store_open_err(url_of(url, sizeof url, port, "verify=1&timeout_ms=60&connect_timeout_ms=60"), NULL, &v,
                                   err, sizeof err), SLUICE_ESTORE);
    CHECK(rs_now_ms() - t0 < 600);
    CHECK(v == NULL);
    if (!strstr(err, "PING") || !strstr(err, port_text)) fprintf(stderr, "verify=1, server stopped: \"%s\"\n", err);
    CHECK(strstr(err, "verify=1") && strstr(err, "PING") && strstr(err, port_text));
    rs_signal(g, a, SIGCONT);
    CHECK(recovers(s, p));
    CHECK(recovers(allow, p));
    CHECK_EQ(sluice_store_stats(allow, &st), 0);
    CHECK(st.keys >= 1);
    sluice_store_close(s);
    sluice_store_close(allow);

    /* a connect that hangs: a listener whose backlog is full */
    int lfd = rs_bind_(0);
    REQUIRE(lfd >= 0);
    REQUIRE(listen(lfd, 0) == 0);
    int lport = rs_port_of_(lfd);
    redisContext *fill[8];
    int n_fill = 0;
    while (n_fill < 8) { /* until the kernel stops completing handshakes */
        fill[n_fill] = rs_connect(lport, 50);
        if (!fill[n_fill]) break;
        n_fill++;
    }
    CHECK(n_fill < 8);
    s = open_store(url_of(url, sizeof url, lport, "clock=client&connect_timeout_ms=80&timeout_ms=1000&on_error=error"), NULL);
    REQUIRE(s);
    t0 = rs_now_ms();
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 0, &d), SLUICE_ESTORE);
    int64_t took = rs_now_ms() - t0;
    if (took >= 800) fprintf(stderr, "a hanging connect took %lld ms (connect timeout 80 ms)\n", (long long)took);
    CHECK(took < 800);
    CHECK(strstr(sluice_store_errmsg(s), "connect") != NULL);
    sluice_store_close(s);
    for (int i = 0; i < n_fill; i++) redisFree(fill[i]);
    close(lfd);
    sluice_policy_free(p);
}

TEST(timeouts_are_honoured) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) timeouts_body(&g, a);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* More callers than pooled connections, and the server stopped (SIGSTOP:
 * connections are accepted, nothing is answered): every call, its wait
 * for one of the pool's connections included, returns within the bound
 * sluice.h promises, connect_timeout_ms + timeout_ms (here 200 ms; the
 * check allows 400 ms more for sanitizers and a crowded machine: a bound,
 * not a speed), admitted unenforced as on_error=allow says. Then the
 * server continues and decisions are enforced again. */
#define CROWD_THREADS 16
#define CROWD_BOUND_MS 200
typedef struct {
    sluice_store *s;
    const sluice_policy *p;
    atomic_int *stop;
    int64_t slowest_ms;
    long calls, unenforced, errors;
    long no_connection; /* unenforced: no pooled connection came in time */
} crowd_arg;

static void *crowd(void *arg) {
    crowd_arg *a = arg;
    while (!atomic_load(a->stop)) {
        sluice_decision d;
        int64_t t0 = rs_now_ms();
        int rc = sluice_store_acquire_at(a->s, a->p, "k", 1, 1, 0, &d);
        int64_t took = rs_now_ms() - t0;
        if (took > a->slowest_ms) a->slowest_ms = took;
        a->calls++;
        if (rc) a->errors++;
        else if (!d.enforced) a->unenforced++;
        if (rc == 0 && !d.enforced && strstr(sluice_store_errmsg(a->s), "connections stayed in use")) a->no_connection++;
    }
    return NULL;
}

/* Runs CROWD_THREADS callers of p on s for run_ms; their slowest call,
 * and their counts added into *calls, *unenforced, *errors. A caller that
 * never returns ends the test process (nothing else could be checked, nor
 * the store closed). */
static int64_t run_crowd(rs_group *g, sluice_store *s, const sluice_policy *p, int64_t run_ms, long *calls,
                         long *unenforced, long *errors, long *no_connection) {
    atomic_int stop = 0;
    crowd_arg args[CROWD_THREADS];
    pthread_t t[CROWD_THREADS];
    int started = 0;
    for (int i = 0; i < CROWD_THREADS; i++) {
        args[i] = (crowd_arg){s, p, &stop, 0, 0, 0, 0, 0};
        started += pthread_create(&t[i], NULL, crowd, &args[i]) == 0;
    }
    CHECK_EQ(started, CROWD_THREADS);
    rs_sleep_ms(run_ms); /* the calls' own time is what is measured */
    atomic_store(&stop, 1);
    struct timespec give_up;
    clock_gettime(CLOCK_REALTIME, &give_up);
    give_up.tv_sec += 10;
    int64_t slowest = 0;
    for (int i = 0; i < started; i++) {
        if (pthread_timedjoin_np(t[i], NULL, &give_up) != 0) {
            fprintf(stderr, "a call had not returned 10 s after the callers were told to stop\n");
            CHECK(0);
            rs_group_close(g);
            fflush(NULL);
            _exit(1);
        }
        slowest = max64(slowest, args[i].slowest_ms);
        *calls += args[i].calls;
        *unenforced += args[i].unenforced;
        *errors += args[i].errors;
        *no_connection += args[i].no_connection;
    }
    return slowest;
}

TEST(crowded_pool_and_a_stopped_server_keep_the_time_bound) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    REQUIRE(a >= 0);
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, g.s[a].port,
                                        "clock=client&pool=2&timeout_ms=100&connect_timeout_ms=100"), NULL);
    sluice_policy *p = policy("crowd", "fixed-window limit=1000000000 window=1h");
    sluice_policy *one = policy("one", "fixed-window limit=1 window=1h");
    REQUIRE(s && p && one);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 0, &d), 0);
    CHECK(d.allowed && d.enforced);
    rs_signal(&g, a, SIGSTOP);
    long calls = 0, unenforced = 0, errors = 0, no_connection = 0;
    int64_t slowest = run_crowd(&g, s, p, 1500, &calls, &unenforced, &errors, &no_connection);
    rs_signal(&g, a, SIGCONT);
    if (slowest > CROWD_BOUND_MS + 400)
        fprintf(stderr, "the slowest of %ld calls took %lld ms (bound %d ms)\n", calls, (long long)slowest,
                CROWD_BOUND_MS);
    CHECK(slowest <= CROWD_BOUND_MS + 400);
    CHECK(calls > CROWD_THREADS); /* every thread called, some more than once */
    CHECK_EQ(unenforced, calls);  /* the server answered none */
    CHECK_EQ(errors, 0);
    /* the server is back: decisions are enforced again (a new key: calls
     * sent before may still run on it now) */
    CHECK(recovers(s, p));
    CHECK_EQ(sluice_store_acquire_at(s, one, "after", 5, 1, 0, &d), 0);
    CHECK(d.allowed && d.enforced);
    CHECK_EQ(sluice_store_acquire_at(s, one, "after", 5, 1, 0, &d), 0);
    CHECK(!d.allowed && d.enforced);
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_policy_free(one);
    rs_group_close(&g);
}

/* ---- a slow server: a proxy in front of one that holds every reply back
 * for delay_ms (each command answered, none before delay_ms) ---- */

#define PROXY_PAIRS 16

typedef struct chunk {
    struct chunk *next;
    int64_t due_ms;
    size_t len;
    char bytes[];
} chunk;

typedef struct {
    int listen_fd, target_port;
    int64_t delay_ms;
    atomic_int stop;
    pthread_t thread;
    int n_pairs;
    struct {
        int client, server;
        chunk *head, *tail; /* replies held back, oldest first */
    } pair[PROXY_PAIRS];
} proxy;

static int write_all(int fd, const char *p, size_t len) {
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n <= 0) return -1;
        p += n, len -= (size_t)n;
    }
    return 0;
}

static void proxy_drop(proxy *x, int i) {
    close(x->pair[i].client);
    close(x->pair[i].server);
    while (x->pair[i].head) {
        chunk *next = x->pair[i].head->next;
        free(x->pair[i].head);
        x->pair[i].head = next;
    }
    x->pair[i] = x->pair[--x->n_pairs];
}

static void proxy_accept(proxy *x) {
    int c = accept(x->listen_fd, NULL, NULL);
    if (c < 0) return;
    int sv = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)x->target_port);
    if (x->n_pairs == PROXY_PAIRS || sv < 0 || connect(sv, (struct sockaddr *)&a, sizeof a) != 0) {
        close(c);
        if (sv >= 0) close(sv);
        return;
    }
    x->pair[x->n_pairs].client = c;
    x->pair[x->n_pairs].server = sv;
    x->pair[x->n_pairs].head = x->pair[x->n_pairs].tail = NULL;
    x->n_pairs++;
}

static void *proxy_run(void *arg) {
    proxy *x = arg;
    while (!atomic_load(&x->stop)) {
        struct pollfd fds[1 + 2 * PROXY_PAIRS];
        int n = x->n_pairs;
        int64_t now = rs_now_ms(), wait_ms = 20;
        fds[0] = (struct pollfd){x->listen_fd, POLLIN, 0};
        for (int i = 0; i < n; i++) {
            fds[1 + 2 * i] = (struct pollfd){x->pair[i].client, POLLIN, 0};
            fds[2 + 2 * i] = (struct pollfd){x->pair[i].server, POLLIN, 0};
            if (x->pair[i].head) wait_ms = min64(wait_ms, max64(0, x->pair[i].head->due_ms - now));
        }
        poll(fds, (nfds_t)(1 + 2 * n), (int)wait_ms);
        now = rs_now_ms();
        for (int i = n - 1; i >= 0; i--) { /* from the end: proxy_drop moves the last pair to i */
            char buf[65536];
            int gone = 0;
            if (fds[1 + 2 * i].revents) { /* a command: on to the server at once */
                ssize_t got = read(x->pair[i].client, buf, sizeof buf);
                gone = got <= 0 || write_all(x->pair[i].server, buf, (size_t)got) != 0;
            }
            if (!gone && fds[2 + 2 * i].revents) { /* a reply: held back */
                ssize_t got = read(x->pair[i].server, buf, sizeof buf);
                chunk *k = got > 0 ? malloc(sizeof *k + (size_t)got) : NULL;
                gone = !k;
                if (k) {
                    k->next = NULL;
                    k->due_ms = now + x->delay_ms;
                    k->len = (size_t)got;
                    memcpy(k->bytes, buf, (size_t)got);
                    if (x->pair[i].tail) x->pair[i].tail->next = k;
                    else x->pair[i].head = k;
                    x->pair[i].tail = k;
                }
            }
            while (!gone && x->pair[i].head && x->pair[i].head->due_ms <= now) {
                chunk *k = x->pair[i].head;
                gone = write_all(x->pair[i].client, k->bytes, k->len) != 0;
                x->pair[i].head = k->next;
                if (!k->next) x->pair[i].tail = NULL;
                free(k);
            }
            if (gone) proxy_drop(x, i);
        }
        if (fds[0].revents) proxy_accept(x);
    }
    while (x->n_pairs) proxy_drop(x, 0);
    return NULL;
}

/* Starts a proxy to target_port on a free loopback port; 0 or -1. */
static int proxy_start(proxy *x, int target_port, int64_t delay_ms) {
    memset(x, 0, sizeof *x);
    x->target_port = target_port;
    x->delay_ms = delay_ms;
    x->listen_fd = rs_bind_(0);
    if (x->listen_fd < 0 || listen(x->listen_fd, 64) != 0 || pthread_create(&x->thread, NULL, proxy_run, x) != 0) {
        if (x->listen_fd >= 0) close(x->listen_fd);
        return -1;
    }
    return 0;
}

static void proxy_stop(proxy *x) {
    atomic_store(&x->stop, 1);
    pthread_join(x->thread, NULL);
    close(x->listen_fd);
}

/* A server that answers every command, each 150 ms late: the pool's two
 * connections are in use all the time, and callers that cannot get one
 * within connect_timeout_ms give up (admitted unenforced) instead of
 * queueing behind the others for round after round (until those who
 * waited longest had too little time left for the command): every call
 * ends within connect_timeout_ms + timeout_ms (50 + 400 ms; the check
 * allows 400 ms more), and those that got a connection were decided. */
TEST(crowded_pool_and_a_slow_server_keep_the_time_bound) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    REQUIRE(a >= 0);
    proxy x;
    REQUIRE(proxy_start(&x, g.s[a].port, 150) == 0);
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, rs_port_of_(x.listen_fd),
                                        "clock=client&pool=2&timeout_ms=400&connect_timeout_ms=50"), NULL);
    sluice_policy *p = policy("crowd", "fixed-window limit=1000000000 window=1h");
    REQUIRE(s && p);
    /* the script loaded straight on the server: through the proxy, the
     * first decision (NOSCRIPT, SCRIPT LOAD, again) would take three times
     * 150 ms, past the bound */
    sluice_store *direct = open_store(url_of(url, sizeof url, g.s[a].port, "clock=client"), NULL);
    sluice_decision d;
    REQUIRE(direct);
    CHECK_EQ(sluice_store_acquire_at(direct, p, "k", 1, 1, 0, &d), 0);
    sluice_store_close(direct);
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 0, &d), 0);
    CHECK(d.allowed && d.enforced);
    long calls = 0, unenforced = 0, errors = 0, no_connection = 0;
    int64_t slowest = run_crowd(&g, s, p, 1500, &calls, &unenforced, &errors, &no_connection);
    if (slowest > 450 + 400)
        fprintf(stderr, "the slowest of %ld calls took %lld ms (bound 450 ms)\n", calls, (long long)slowest);
    CHECK(slowest <= 450 + 400);
    CHECK(unenforced > 0);           /* some waited for a connection in vain */
    CHECK(calls - unenforced >= 10); /* and the others were decided: 2 every 150 ms */
    CHECK_EQ(errors, 0);
    /* each caller with a connection had its whole timeout_ms for the
     * command, so none timed out and the server was never taken for down:
     * every call not decided is one that gave up waiting for a connection */
    if (no_connection != unenforced)
        fprintf(stderr, "%ld calls were not decided for another reason than waiting for a connection\n",
                unenforced - no_connection);
    CHECK_EQ(no_connection, unenforced);
    sluice_store_close(s);
    proxy_stop(&x);
    sluice_policy_free(p);
    rs_group_close(&g);
}

/* ---- expiry, with the server's clock ---- */

static const char *const short_specs[] = {
    "token-bucket capacity=3 rate=1/10ms",
    "leaky-bucket capacity=4 rate=1/8ms",
    "fixed-window limit=2 window=20ms",
    "sliding-window limit=3 window=15ms",
    "sliding-log limit=3 window=25ms",
    "sliding-log limit=2 window=10ms; sliding-log limit=5 window=30ms; token-bucket capacity=2 rate=1/20ms",
};
#define N_SHORT (sizeof short_specs / sizeof short_specs[0])

static void expiry_body(int port) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, NULL), NULL); /* clock=server: the default */
    REQUIRE(s);
    sluice_policy *pol[N_SHORT];
    for (size_t i = 0; i < N_SHORT; i++) {
        char name[8];
        snprintf(name, sizeof name, "e%zu", i);
        pol[i] = policy(name, short_specs[i]);
        REQUIRE(pol[i]);
    }
    uint64_t rs = 3;
    long allowed = 0;
    for (int i = 0; i < 3000; i++) {
        size_t sp = (size_t)check_range_(&rs, 0, N_SHORT - 1);
        char key[16];
        int kn = snprintf(key, sizeof key, "u%d", (int)check_range_(&rs, 0, 59));
        sluice_decision d;
        CHECK_EQ(sluice_store_acquire(s, pol[sp], key, (size_t)kn, 1, &d), 0);
        allowed += d.allowed;
        CHECK(d.enforced);
        CHECK(d.reset_ms <= longest_reset(pol[sp]));
    }
    CHECK(allowed > 0 && allowed < 3000);
    /* server time: a long window is counted, and told, in real ms */
    sluice_policy *hour = policy("hour", "fixed-window limit=2 window=1h");
    REQUIRE(hour);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire(s, hour, "h", 1, 1, &d), 0);
    CHECK_EQ(sluice_store_acquire(s, hour, "h", 1, 1, &d), 0);
    CHECK_EQ(sluice_store_acquire(s, hour, "h", 1, 1, &d), 0);
    CHECK(!d.allowed && d.retry_after_ms > 0 && d.retry_after_ms <= 3600000 && d.reset_ms == d.retry_after_ms);
    /* every name held has a TTL, none longer than its policy's longest reset */
    names ns = {0};
    REQUIRE(names_scan(port, &ns) == 0);
    CHECK(ns.n > 0);
    redisContext *c = rs_connect(port, 5000);
    REQUIRE(c);
    long with_ttl = 0;
    for (size_t i = 0; i < ns.n; i++) {
        redisReply *r = redisCommand(c, "PTTL %b", ns.name[i], ns.len[i]);
        long long ttl = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -3;
        if (r) freeReplyObject(r);
        if (ttl == -2) continue; /* expired since SCAN: fine */
        with_ttl++;
        int64_t most = -1;
        if (!strncmp(ns.name[i], "sluice:{hour|", 13)) most = 3600000;
        for (size_t p = 0; p < N_SHORT; p++) {
            char start[32];
            int n = snprintf(start, sizeof start, "sluice:{e%zu|", p);
            if (ns.len[i] > (size_t)n && !memcmp(ns.name[i], start, (size_t)n)) most = longest_reset(pol[p]);
        }
        if (ttl < 0 || ttl > most) fprintf(stderr, "name %s: PTTL %lld, longest reset %lld\n", ns.name[i], ttl, (long long)most);
        CHECK(most > 0);
        CHECK(ttl >= 0); /* never -1 (no expiry); 0: expiring within this ms */
        CHECK(ttl <= most);
    }
    redisFree(c);
    names_free(&ns);
    /* the hour-long key is the only one meant to stay: away with it */
    redisReply *r = rs_cmd(port, "KEYS sluice:{hour|*");
    if (r && r->type == REDIS_REPLY_ARRAY)
        for (size_t i = 0; i < r->elements; i++) CHECK(rs_ok(port, "DEL %b", r->element[i]->str, r->element[i]->len));
    if (r) freeReplyObject(r);
    /* after the longest reset (40 ms), Redis expires everything by itself */
    int64_t deadline = rs_now_ms() + 5000;
    long long left = -1;
    while (rs_now_ms() < deadline && (left = rs_int(port, "DBSIZE")) != 0) rs_sleep_ms(20);
    if (left != 0) fprintf(stderr, "%lld keys still held 5 s after their resets\n", left);
    CHECK_EQ(left, 0);
    CHECK_EQ(stats(s).keys, 0);
    for (size_t i = 0; i < N_SHORT; i++) sluice_policy_free(pol[i]);
    sluice_policy_free(hour);
    sluice_store_close(s);
}

TEST(every_key_expires_when_fresh) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) expiry_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* In client-clock mode the expiry is the reset plus ttl_grace_ms (60 s by
 * default): the client's time need not run with the server's. Logs, windows
 * and buckets, a bucket alone (the script's own path for it) too. */
static void grace_body(int port) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client"), NULL);
    sluice_store *g0 = open_store(url_of(url, sizeof url, port, "clock=client&ttl_grace_ms=0&prefix=g0:"), NULL);
    sluice_policy *p = policy("g", "sliding-log limit=3 window=50ms; fixed-window limit=5 window=40ms");
    REQUIRE(s && g0 && p);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 0, &d), 0);
    CHECK_EQ(sluice_store_acquire_at(g0, p, "k", 1, 1, 0, &d), 0);
    names ns = {0};
    REQUIRE(names_scan(port, &ns) == 0);
    CHECK_EQ(ns.n, 4);
    for (size_t i = 0; i < ns.n; i++) {
        long long ttl = -3;
        redisReply *r = rs_cmd(port, "PTTL %b", ns.name[i], ns.len[i]);
        if (r && r->type == REDIS_REPLY_INTEGER) ttl = r->integer;
        if (r) freeReplyObject(r);
        int graceless = !strncmp(ns.name[i], "g0:", 3);
        CHECK(ttl > 0);
        CHECK(ttl <= (graceless ? 50 : 60050));
        if (!graceless) CHECK(ttl > 50000);
    }
    names_free(&ns);
    /* the same for buckets: one alone (the script's path for one bucket)
     * and one among other parts */
    sluice_policy *bs[] = {policy("gb", "token-bucket capacity=2 rate=1/40ms"),
                           policy("gc", "leaky-bucket capacity=2 rate=1/40ms; fixed-window limit=5 window=40ms")};
    REQUIRE(bs[0] && bs[1]);
    for (size_t i = 0; i < 2; i++) {
        CHECK_EQ(sluice_store_acquire_at(s, bs[i], "k", 1, 1, 0, &d), 0);
        CHECK_EQ(sluice_store_acquire_at(g0, bs[i], "k", 1, 1, 0, &d), 0);
    }
    REQUIRE(names_scan(port, &ns) == 0);
    size_t n_buckets = 0;
    for (size_t i = 0; i < ns.n; i++) {
        if (!memmem(ns.name[i], ns.len[i], "{gb|", 4) && !memmem(ns.name[i], ns.len[i], "{gc|", 4)) continue;
        n_buckets++;
        long long ttl = rs_int(port, "PTTL %b", ns.name[i], ns.len[i]);
        int graceless = !strncmp(ns.name[i], "g0:", 3);
        if (ttl <= 0 || ttl > (graceless ? 40 : 60040) || (!graceless && ttl <= 50000))
            fprintf(stderr, "name %s: PTTL %lld, expected %s\n", ns.name[i], ttl,
                    graceless ? "1..40" : "50001..60040");
        CHECK(ttl > 0);
        CHECK(ttl <= (graceless ? 40 : 60040));
        if (!graceless) CHECK(ttl > 50000);
    }
    CHECK_EQ(n_buckets, 4);
    names_free(&ns);
    sluice_policy_free(bs[0]);
    sluice_policy_free(bs[1]);
    sluice_policy_free(p);
    sluice_store_close(s);
    sluice_store_close(g0);
}

TEST(client_clock_expiry_has_grace) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) grace_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* ---- batches ---- */

/* Random batches (mixed policies, keys, costs, repeated keys, invalid
 * requests) through sluice_store_acquire_many on one key space equal the
 * same requests one by one on another; both in client-clock mode. */
static void batches_body(int port) {
    char url[256];
    sluice_clock *c = sluice_clock_manual_new(0);
    REQUIRE(c);
    sluice_store *many = open_store(url_of(url, sizeof url, port, "clock=client&prefix=many:"), c);
    sluice_store *one = open_store(url_of(url, sizeof url, port, "clock=client&prefix=one:"), c);
    sluice_store *mem = open_store("memory:", c);
    REQUIRE(many && one && mem);
    sluice_policy *pol[N_SPECS + 1];
    for (size_t i = 0; i < N_SPECS; i++) {
        char name[16];
        snprintf(name, sizeof name, "b%zu", i);
        pol[i] = policy(name, specs[i]);
        REQUIRE(pol[i]);
    }
    pol[N_SPECS] = policy("refused", refused_specs[0]);
    REQUIRE(pol[N_SPECS]);
    static char big[SLUICE_KEY_MAX + 1];
    memset(big, 'b', sizeof big);
    uint64_t rs = 77;
    int64_t now = 0;
    long n_batches = (long)(400 * scale()), compared = 0, errors = 0;
    enum { BATCH_MAX = 48 };
    for (long b = 0; b < n_batches; b++) {
        now += check_range_(&rs, 0, 9) == 0 ? -check_range_(&rs, 0, 20) : check_range_(&rs, 0, 15);
        sluice_clock_manual_set(c, now);
        size_t n = (size_t)check_range_(&rs, 1, BATCH_MAX);
        sluice_request reqs[BATCH_MAX];
        for (size_t i = 0; i < n; i++) {
            size_t sp = (size_t)check_range_(&rs, 0, N_SPECS - 1);
            size_t k = (size_t)check_range_(&rs, 0, 5);
            reqs[i].policy = pol[sp];
            reqs[i].key = trace_keys[k].b;
            reqs[i].key_len = trace_keys[k].n;
            reqs[i].cost = check_range_(&rs, 0, 3) ? 1 : check_range_(&rs, 1, least_limit(pol[sp]));
            switch (check_range_(&rs, 0, 39)) { /* now and then, a bad request */
            case 0: reqs[i].cost = 0; break;
            case 1: reqs[i].cost = least_limit(pol[sp]) + 1; break;
            case 2: reqs[i].key_len = 0; break;
            case 3: reqs[i].key = big, reqs[i].key_len = SLUICE_KEY_MAX + 1; break;
            case 4: reqs[i].key = NULL; break;
            case 5: reqs[i].policy = NULL; break;
            case 6: reqs[i].policy = pol[N_SPECS]; break; /* beyond 2^53: EINVAL from the Redis store */
            case 7: reqs[i].key = big, reqs[i].key_len = SLUICE_KEY_MAX; break;
            default: break;
            }
        }
        if (b % 50 == 25) CHECK(rs_ok(port, "SCRIPT FLUSH")); /* the pipelined replies are NOSCRIPT */
        sluice_decision got[BATCH_MAX], want[BATCH_MAX], ref[BATCH_MAX];
        int results[BATCH_MAX], ref_results[BATCH_MAX];
        CHECK_EQ(sluice_store_acquire_many(many, reqs, n, got, results), 0);
        CHECK_EQ(sluice_store_acquire_many(mem, reqs, n, ref, ref_results), 0);
        for (size_t i = 0; i < n; i++) {
            int rc = sluice_store_acquire_at(one, reqs[i].policy, reqs[i].key, reqs[i].key_len, reqs[i].cost, now, &want[i]);
            int ok = results[i] == rc && (rc != 0 || same(&got[i], &want[i]));
            /* and the memory store agrees, where it can decide (it takes
             * the policy Redis refuses) */
            if (reqs[i].policy != pol[N_SPECS]) ok = ok && ref_results[i] == rc && (rc != 0 || same(&ref[i], &want[i]));
            if (!ok && errors < 5) {
                fprintf(stderr, "batch %ld request %zu/%zu: many %s, one by one %s, memory %s\n", b, i, n,
                        sluice_err_name(results[i]), sluice_err_name(rc), sluice_err_name(ref_results[i]));
                if (results[i] == 0) print_decision("many", &got[i]);
                if (rc == 0) print_decision("one ", &want[i]);
                if (ref_results[i] == 0) print_decision("mem ", &ref[i]);
            }
            errors += !ok;
            compared++;
        }
    }
    CHECK_EQ(errors, 0);
    CHECK(compared > 0);
    CHECK_EQ(stats(many).failures, 0);
    /* degenerate calls */
    sluice_decision d;
    int r;
    CHECK_EQ(sluice_store_acquire_many(many, NULL, 0, NULL, NULL), 0);
    CHECK_EQ(sluice_store_acquire_many(many, NULL, 1, &d, &r), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_acquire_many(NULL, NULL, 0, NULL, NULL), SLUICE_EINVAL);
    for (size_t i = 0; i <= N_SPECS; i++) sluice_policy_free(pol[i]);
    sluice_store_close(many);
    sluice_store_close(one);
    sluice_store_close(mem);
    sluice_clock_free(c);
}

TEST(batches_equal_one_by_one) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) batches_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* ---- URLs ---- */

static void bad_urls_body(int port) {
    char u[64][256];
    const char *names_[64];
    int n = 0;
#define BAD(name, ...) (snprintf(u[n], sizeof u[n], __VA_ARGS__), names_[n++] = (name))
    BAD("foo", "redis://127.0.0.1:%d?foo=1", port);
    BAD("max_keys", "redis://127.0.0.1:%d?max_keys=10", port); /* the memory store's, not this one's */
    BAD("on_full", "redis://127.0.0.1:%d?on_full=refuse", port);
    BAD("127.0.0.1:0", "redis://127.0.0.1:0");
    BAD("127.0.0.1:65536", "redis://127.0.0.1:65536");
    BAD("127.0.0.1:abc", "redis://127.0.0.1:abc");
    BAD("127.0.0.1:", "redis://127.0.0.1:");
    BAD("127.0.0.1:99999999999999999999", "redis://127.0.0.1:99999999999999999999");
    BAD("127.0.0.1:-1", "redis://127.0.0.1:-1");
    BAD("127.0.0.1:+80", "redis://127.0.0.1:+80");
    BAD("127.0.0.1: 80", "redis://127.0.0.1: 80");
    BAD(":6379", "redis://:6379");
    BAD("host", "redis://");
    BAD("redis://", "redis:127.0.0.1:6379");
    BAD("database", "redis://127.0.0.1:%d/abc", port);
    BAD("database", "redis://127.0.0.1:%d/-1", port);
    BAD("database", "redis://127.0.0.1:%d/", port);
    BAD("database", "redis://127.0.0.1:%d/1x", port);
    BAD("database", "redis://127.0.0.1:%d/99999999999999999", port);
    BAD("database", "redis://127.0.0.1:%d/+1", port);
    BAD("database", "redis://127.0.0.1:%d/ 1", port);
    BAD("one host", "redis://127.0.0.1:%d,127.0.0.1:%d", port, port + 1);
    BAD("clock=sometimes", "redis://127.0.0.1:%d?clock=sometimes", port);
    BAD("clock=", "redis://127.0.0.1:%d?clock=", port);
    BAD("prefix", "redis://127.0.0.1:%d?prefix=a{b", port);
    BAD("prefix", "redis://127.0.0.1:%d?prefix=}", port);
    BAD("prefix", "redis://127.0.0.1:%d?prefix=%064d", port, 0);
    BAD("pool", "redis://127.0.0.1:%d?pool=0", port);
    BAD("pool", "redis://127.0.0.1:%d?pool=65", port);
    BAD("ttl_grace_ms", "redis://127.0.0.1:%d?ttl_grace_ms=-1", port);
    BAD("timeout_ms", "redis://127.0.0.1:%d?timeout_ms=0", port);
    BAD("connect_timeout_ms", "redis://127.0.0.1:%d?connect_timeout_ms=x", port);
    BAD("on_error", "redis://127.0.0.1:%d?on_error=maybe", port);
    BAD("twice", "redis://127.0.0.1:%d?clock=client&clock=server", port);
    BAD("verify=2", "redis://127.0.0.1:%d?verify=2", port);
    BAD("verify=yes", "redis://127.0.0.1:%d?verify=yes", port);
    BAD("database 0", "redis-cluster://127.0.0.1:%d/0", port);
    BAD("127.0.0.1:x", "redis-cluster://127.0.0.1:%d,127.0.0.1:x", port);
    BAD("\"\"", "redis-cluster://127.0.0.1:%d,,127.0.0.1:%d", port, port);
#undef BAD
    for (int i = 0; i < n; i++) {
        sluice_store *s = (sluice_store *)1;
        char err[256] = "";
        int rc = sluice_store_open_err(u[i], NULL, &s, err, sizeof err);
        if (rc != SLUICE_EINVAL || !strstr(err, names_[i]))
            fprintf(stderr, "url %s: %s, message \"%s\" (want SLUICE_EINVAL naming %s)\n", u[i], sluice_err_name(rc), err,
                    names_[i]);
        CHECK_EQ(rc, SLUICE_EINVAL);
        CHECK(s == NULL);
        CHECK(strstr(err, names_[i]) != NULL);
        if (rc == 0) sluice_store_close(s);
    }
    /* good ones open without a server (the connection is made on first use) */
    const char *good[] = {
        "redis://127.0.0.1:1/15?clock=client&prefix=x:y|z&pool=64&ttl_grace_ms=0&timeout_ms=5&connect_timeout_ms=5&on_error=deny",
        "redis://localhost", "redis://127.0.0.1:65535/0?clock=server&prefix=",
    };
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        sluice_store *s = NULL;
        char err[256] = "";
        CHECK_EQ(sluice_store_open_err(good[i], NULL, &s, err, sizeof err), 0);
        if (err[0]) fprintf(stderr, "url %s: %s\n", good[i], err);
        CHECK(s != NULL);
        if (s) CHECK_STR(sluice_store_kind(s), "redis");
        sluice_store_close(s);
    }
    /* a cluster URL needs a cluster to open */
    char url[256], err[256] = "";
    sluice_store *s = (sluice_store *)1;
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d", port);
    CHECK_EQ(sluice_store_open_err(url, NULL, &s, err, sizeof err), SLUICE_ESTORE);
    CHECK(s == NULL);
    CHECK(strstr(err, "CLUSTER SLOTS") != NULL);
    int dead = rs_free_port(0);
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d?connect_timeout_ms=100", dead);
    CHECK_EQ(sluice_store_open_err(url, NULL, &s, err, sizeof err), SLUICE_ESTORE);
    CHECK(strstr(err, "cannot connect") != NULL);
    /* verify=1: open connects and PINGs; without a server it fails naming it */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?verify=1", port);
    s = open_store(url, NULL);
    CHECK(s != NULL);
    sluice_store_close(s);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?verify=0&connect_timeout_ms=100", dead);
    s = open_store(url, NULL); /* verify=0, the default: connects on first use */
    CHECK(s != NULL);
    sluice_stats st;
    CHECK_EQ(sluice_store_stats(s, &st), SLUICE_ESTORE); /* no server to count the keys */
    CHECK(strstr(sluice_store_errmsg(s), "cannot connect") != NULL);
    sluice_store_close(s);
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?verify=1&connect_timeout_ms=100", dead);
    s = (sluice_store *)1;
    CHECK_EQ(sluice_store_open_err(url, NULL, &s, err, sizeof err), SLUICE_ESTORE);
    CHECK(s == NULL);
    char dead_text[16];
    snprintf(dead_text, sizeof dead_text, "127.0.0.1:%d", dead);
    if (!strstr(err, dead_text) || !strstr(err, "verify=1")) fprintf(stderr, "verify=1, no server: \"%s\"\n", err);
    CHECK(strstr(err, dead_text) && strstr(err, "verify=1") && strstr(err, "cannot connect"));
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/999?verify=1", port);
    CHECK_EQ(sluice_store_open_err(url, NULL, &s, err, sizeof err), SLUICE_ESTORE);
    CHECK(strstr(err, "SELECT 999") != NULL);
    /* a database the server does not have: every decision fails, saying so */
    snprintf(url, sizeof url, "redis://127.0.0.1:%d/999?on_error=error&clock=client", port);
    s = open_store(url, NULL);
    sluice_policy *p = policy("db", "fixed-window limit=1 window=1s");
    REQUIRE(s && p);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 0, &d), SLUICE_ESTORE);
    CHECK(strstr(sluice_store_errmsg(s), "SELECT 999") != NULL);
    sluice_store_close(s);
    sluice_policy_free(p);
}

TEST(bad_urls_and_parameters) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) bad_urls_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* ---- peek, refund, reset, retune, shadow parts ---- */

/* A handle given a changed configuration of a name converts a key that
 * another handle kept under the old one, which it never met: the state
 * carries the configuration that wrote it. */
static void retune_body(int port) {
    char url[256];
    url_of(url, sizeof url, port, "clock=client&prefix=rt:");
    sluice_store *s = open_store(url, NULL), *t = open_store(url, NULL);
    sluice_policy *a = policy("tier", "token-bucket capacity=5 rate=1/h");
    sluice_policy *b = policy("tier", "token-bucket capacity=8 rate=1/h");
    sluice_policy *c = policy("tier", "fixed-window limit=10 window=1h");
    sluice_policy *cs = policy("tier", "fixed-window limit=10 window=1h; shadow sliding-log limit=1 window=1h");
    REQUIRE(s && t && a && b && c && cs);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, a, "user", 4, 5, 1000, &d), 0);
    CHECK(d.allowed && d.remaining == 0);
    /* a capacity change alone: the backlog of 5 carried, then 1 more */
    CHECK_EQ(sluice_store_acquire_at(t, b, "user", 4, 1, 1000, &d), 0);
    CHECK(d.allowed && d.remaining == 2 && d.limit == 8 && d.reset_ms == 6 * 3600000);
    /* back on the first handle: 6 in use, capped at 5 */
    CHECK_EQ(sluice_store_acquire_at(s, a, "user", 4, 1, 1000, &d), 0);
    CHECK(!d.allowed && d.remaining == 0 && d.retry_after_ms == 3600000 && d.reset_ms == 5 * 3600000);
    /* another algorithm: the 5 in use charged to it */
    CHECK_EQ(sluice_store_acquire_at(t, c, "user", 4, 1, 1000, &d), 0);
    CHECK(d.allowed && d.remaining == 4 && d.limit == 10);
    /* a shadow part beside it: another configuration; the window carried,
     * the shadow log fresh (the old configuration had no part 1) */
    CHECK_EQ(sluice_store_acquire_at(s, cs, "user", 4, 1, 1000, &d), 0);
    CHECK(d.allowed && d.remaining == 3 && !d.shadow_denied);
    CHECK_EQ(sluice_store_acquire_at(s, cs, "user", 4, 1, 1000, &d), 0);
    CHECK(d.allowed && d.remaining == 2 && d.shadow_denied);
    CHECK_EQ(rs_int(port, "DBSIZE"), 2); /* the state and part 1's log */
    /* back to a bucket, on the handle that never met the log: the key's
     * configuration has a log the call did not name, so it is called
     * again with it (two round trips), and the log's set goes */
    CHECK(rs_ok(port, "CONFIG RESETSTAT"));
    CHECK_EQ(sluice_store_peek_at(t, b, "user", 4, 1, 1000, &d), 0);
    CHECK(!d.allowed && d.remaining == 0 && d.limit == 8 && d.retry_after_ms == 3600000); /* 8 in use */
    CHECK_EQ(cmd_calls(port, "evalsha"), 2);
    CHECK_EQ(rs_int(port, "DBSIZE"), 1);
    CHECK_EQ(stats(s).failures + stats(t).failures, 0);
    sluice_store_close(s);
    sluice_store_close(t);
    sluice_policy_free(a);
    sluice_policy_free(b);
    sluice_policy_free(c);
    sluice_policy_free(cs);
}

TEST(retune_converts_a_key_another_handle_kept) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) retune_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* Pairs of configurations of one name that a rolling deploy alternates. */
static const char *const deploys[][2] = {
    {"token-bucket capacity=4 rate=1/7ms", "token-bucket capacity=9 rate=2/7ms"},  /* a bucket carried */
    {"token-bucket capacity=5 rate=3/10ms", "token-bucket capacity=4 rate=2/10ms"}, /* carried, p 10 -> 5 */
    {"leaky-bucket capacity=6 rate=1/9ms", "leaky-bucket capacity=2 rate=7/9ms"},  /* carried, p 9 -> 9, r 1 -> 7 */
    {"token-bucket capacity=4 rate=1/5ms", "token-bucket capacity=4 rate=2/10ms"}, /* another period: charged */
    {"sliding-window limit=6 window=11ms", "sliding-window limit=3 window=11ms"},  /* windows carried */
    {"fixed-window limit=5 window=13ms", "fixed-window limit=7 window=13ms"},
    {"fixed-window limit=5 window=13ms", "sliding-log limit=4 window=13ms"},       /* another algorithm */
    {"token-bucket capacity=3 rate=1/5ms; sliding-log limit=5 window=20ms",       /* more parts, fewer */
     "leaky-bucket capacity=2 rate=1/3ms"},
    {"sliding-log limit=6 window=30ms", "sliding-log limit=4 window=30ms; shadow fixed-window limit=2 window=9ms"},
    {"sliding-log limit=5 window=20ms", "sliding-log limit=5 window=25ms"},        /* log to log, another window */
    {"fixed-window limit=4 window=10ms; sliding-log limit=3 window=12ms",          /* a shadow flag alone */
     "shadow fixed-window limit=4 window=10ms; sliding-log limit=3 window=12ms"},
    {"token-bucket capacity=3 rate=1/5ms",                                         /* the bucket's own path, and logs */
     "fixed-window limit=2 window=7ms; sliding-log limit=3 window=9ms; sliding-log limit=2 window=4ms"},
    {"leaky-bucket capacity=3 rate=1/4ms; sliding-log limit=4 window=10ms",        /* the parts swapped */
     "sliding-log limit=4 window=10ms; leaky-bucket capacity=3 rate=1/4ms"},
    {"sliding-window limit=5 window=8ms; shadow sliding-log limit=2 window=8ms",   /* shadow parts only */
     "shadow sliding-window limit=5 window=8ms"},
};
#define N_DEPLOYS (sizeof deploys / sizeof deploys[0])

/* Every sorted set held under prefix is that of a sliding-log part in the
 * configuration its key's state carries (a conversion deletes the others):
 * the number of sets that are not (printed). */
static long stray_logs(int port, const char *prefix) {
    names ns = {0};
    if (names_scan(port, &ns) != 0) return 1;
    long stray = 0;
    size_t plen = strlen(prefix);
    for (size_t i = 0; i < ns.n; i++) {
        const char *nm = ns.name[i];
        size_t len = ns.len[i];
        if (len < plen + 3 || memcmp(nm, prefix, plen) != 0 || nm[len - 2] != ':' || nm[len - 3] != '}') continue;
        int part = nm[len - 1] - '0';
        redisReply *r = rs_cmd(port, "GET %b", nm, len - 2);
        int ok = 0;
        if (r && r->type == REDIS_REPLY_STRING) { /* "CFG T ...": part `part` of CFG */
            const char *at = r->str;
            for (int k = 0; k < part && at; k++) {
                at = strchr(at, '/');
                if (at) at++;
            }
            ok = at && (!strncmp(at, "5,", 2) || !strncmp(at, "-5,", 3));
        }
        if (!ok) fprintf(stderr, "stray log set %.*s (state %s)\n", (int)len, nm, r && r->str ? r->str : "none");
        stray += !ok;
        if (r) freeReplyObject(r);
    }
    names_free(&ns);
    return stray;
}

/* Two handles, each with the configurations of one side of every pair,
 * mostly alternating on keys of the pairs' names (a rolling deploy: two
 * hosts with the old and the new configuration), against one memory store
 * that decides every step (converting at each switch, as Redis must):
 * every decision equal, peeks, refunds and resets among them. */
static void deploy_body(int port) {
    char url[256];
    /* two hosts: each one's cache of denials would not see the other's
     * conversions, which may end a denial early (sluice.h): off */
    url_of(url, sizeof url, port, "clock=client&prefix=dep:&deny_cache=0");
    sluice_clock *clock = sluice_clock_manual_new(1000); /* a reset reads it */
    sluice_store *side[2] = {open_store(url, clock), open_store(url, clock)};
    sluice_store *mem = open_store("memory:", clock);
    REQUIRE(clock && side[0] && side[1] && mem);
    sluice_policy *pol[N_DEPLOYS][2];
    for (size_t i = 0; i < N_DEPLOYS; i++) {
        char name[16];
        snprintf(name, sizeof name, "d%zu", i);
        pol[i][0] = policy(name, deploys[i][0]);
        pol[i][1] = policy(name, deploys[i][1]);
        REQUIRE(pol[i][0] && pol[i][1]);
    }
    uint64_t rs = 99;
    int64_t now = 1000;
    long failures = 0, steps = (long)(12000 * scale()), shadow_denied = 0;
    long per_verb[4] = {0};
    size_t pair = 0;
    for (long i = 0; i < steps && failures < 5; i++) {
        /* a pair for a while, then another: a key meets both sides often
         * while its state is in use */
        if (i % 64 == 0) pair = (size_t)check_range_(&rs, 0, N_DEPLOYS - 1);
        int key = (int)check_range_(&rs, 0, 2);
        now += check_range_(&rs, 0, 9) < 7 ? check_range_(&rs, 0, 1) : check_range_(&rs, 0, 20);
        int64_t roll = check_range_(&rs, 0, 99);
        int verb = roll < 78 ? TRACE_ACQUIRE : roll < 88 ? TRACE_PEEK : roll < 98 ? TRACE_REFUND : TRACE_RESET;
        int h = (int)(i & 1) ^ (check_range_(&rs, 0, 3) == 0); /* mostly alternating */
        sluice_policy *p = pol[pair][h];
        int64_t cost = check_range_(&rs, 0, 4) ? 1 : 2;
        if (cost > sluice_policy_max_cost(p)) cost = 1;
        char kb[8];
        int n = snprintf(kb, sizeof kb, "k%d", key);
        sluice_clock_manual_set(clock, now);
        sluice_decision got, want;
        int rc = store_verb(side[h], p, kb, (size_t)n, verb, cost, now, &got);
        int rc_ref = store_verb(mem, p, kb, (size_t)n, verb, cost, now, &want);
        per_verb[verb == TRACE_ACQUIRE ? 0 : verb == TRACE_PEEK ? 1 : verb == TRACE_REFUND ? 2 : 3]++;
        shadow_denied += rc_ref == 0 && want.shadow_denied;
        if (rc != rc_ref || (rc == 0 && !same(&got, &want))) {
            fprintf(stderr, "step %ld: handle %d %s (%s) key %s cost %lld at %lld: rc %d, memory %d: %s\n", i, h,
                    verb_name(verb), deploys[pair][h], kb, (long long)cost, (long long)now, rc, rc_ref,
                    sluice_store_errmsg(side[h]));
            if (rc == 0) print_decision("redis ", &got);
            if (rc_ref == 0) print_decision("memory", &want);
            failures++;
        }
    }
    CHECK_EQ(failures, 0);
    printf("     %ld steps: %ld acquires, %ld peeks, %ld refunds, %ld resets; %ld shadow denials\n", steps, per_verb[0],
           per_verb[1], per_verb[2], per_verb[3], shadow_denied);
    CHECK(per_verb[0] > 0 && per_verb[1] > 0 && per_verb[2] > 0 && per_verb[3] > 0 && shadow_denied > 0);
    CHECK_EQ(stats(side[0]).failures + stats(side[1]).failures, 0);
    CHECK_EQ(stray_logs(port, "dep:"), 0);
    for (size_t i = 0; i < N_DEPLOYS; i++) sluice_policy_free(pol[i][0]), sluice_policy_free(pol[i][1]);
    sluice_store_close(side[0]);
    sluice_store_close(side[1]);
    sluice_store_close(mem);
    sluice_clock_free(clock);
}

TEST(rolling_deploy_alternates_like_one_memory_store) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) deploy_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* A reset deletes every name the key has, whichever configuration keeps
 * it, in one round trip: one EVALSHA, whose one DEL names all nine a key
 * may have; and nothing of another key. */
static void reset_body(int port) {
    char url[256];
    sluice_clock *clock = sluice_clock_manual_new(1000);
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client"), clock);
    sluice_policy *logs = policy("login", "sliding-log limit=3 window=1h; fixed-window limit=5 window=1h; "
                                          "sliding-log limit=2 window=1h");
    sluice_policy *bucket = policy("login", "token-bucket capacity=5 rate=1/h");
    sluice_policy *other = policy("other", "sliding-log limit=3 window=1h");
    REQUIRE(clock && s && logs && bucket && other);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, logs, "u", 1, 1, 1000, &d), 0);
    CHECK_EQ(sluice_store_acquire_at(s, other, "u", 1, 3, 1000, &d), 0);
    CHECK_EQ(rs_int(port, "DBSIZE"), 3 + 2); /* login's state and logs 0 and 2; other's state and log */
    CHECK(rs_ok(port, "CONFIG RESETSTAT"));
    CHECK_EQ(sluice_store_reset(s, bucket, "u", 1, &d), 0); /* kept by logs: gone all the same */
    CHECK_EQ(cmd_calls(port, "evalsha"), 1);
    CHECK_EQ(cmd_calls(port, "del"), 1);
    CHECK_EQ(cmd_calls(port, "total"), 2); /* and nothing else */
    CHECK(d.allowed && d.remaining == 4 && d.limit == 5 && d.reset_ms == 3600000); /* cost 1 on a fresh key */
    CHECK_EQ(rs_int(port, "DBSIZE"), 2);
    char name[64];
    for (int part = -1; part < 8; part++) CHECK_EQ(rs_int(port, "EXISTS %b", name, state_name(name, "sluice:", "login", "u", 1, part)), 0);
    CHECK_EQ(sluice_store_acquire_at(s, logs, "u", 1, 2, 1000, &d), 0);
    CHECK(d.allowed && d.remaining == 0); /* fresh */
    CHECK_EQ(sluice_store_acquire_at(s, other, "u", 1, 1, 1000, &d), 0);
    CHECK(!d.allowed); /* another name: untouched */
    CHECK_EQ(sluice_store_reset(s, logs, "nobody", 6, NULL), 0); /* a key not held: nothing */
    CHECK_EQ(rs_int(port, "DBSIZE"), 5);
    /* the answer is at the store's time (the highest admitted at): 1000 */
    sluice_clock_manual_set(clock, 400);
    sluice_policy *w = policy("w", "fixed-window limit=2 window=1s");
    REQUIRE(w);
    CHECK_EQ(sluice_store_reset(s, w, "u", 1, &d), 0);
    CHECK(d.allowed && d.remaining == 1 && d.reset_ms == 1000 + 600); /* from 1000 to 2000, told from 400 */
    sluice_store_close(s);
    sluice_clock_free(clock);
    sluice_policy_free(logs);
    sluice_policy_free(bucket);
    sluice_policy_free(other);
    sluice_policy_free(w);
}

TEST(reset_deletes_every_name_in_one_round_trip) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) reset_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* A peek or refund of a key Redis does not hold creates nothing and
 * answers as a fresh state would (the memory store's answers); of a key it
 * holds, a peek changes nothing (the state's text, its expiry), a refund
 * no expiry beyond what it was. */
static void absent_body(int port) {
    static const char *const some[] = {STORE_TEST_SPECS STORE_TEST_SHADOW_SPECS};
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client&ttl_grace_ms=0"), NULL);
    sluice_store *mem = open_store("memory:", NULL);
    REQUIRE(s && mem);
    long differ = 0;
    for (size_t i = 0; i < sizeof some / sizeof some[0]; i++) {
        sluice_policy *p = policy_i(i, some[i]);
        REQUIRE(p);
        sluice_decision got, want;
        if (sluice_store_peek_at(s, p, "absent", 6, 1, 5000, &got) == SLUICE_EINVAL) { /* Lua's doubles cannot */
            sluice_policy_free(p);
            continue;
        }
        for (int verb = TRACE_PEEK; verb <= TRACE_REFUND; verb++) {
            int64_t cost = verb == TRACE_PEEK ? sluice_policy_max_cost(p) : 1;
            CHECK_EQ(store_verb(s, p, "absent", 6, verb, cost, 5000, &got), 0);
            CHECK_EQ(store_verb(mem, p, "absent", 6, verb, cost, 5000, &want), 0);
            if (!same(&got, &want) && differ++ < 3) {
                fprintf(stderr, "%s of a key not held, %s:\n", verb_name(verb), some[i]);
                print_decision("redis ", &got);
                print_decision("memory", &want);
            }
        }
        sluice_policy_free(p);
    }
    CHECK_EQ(differ, 0);
    CHECK_EQ(rs_int(port, "DBSIZE"), 0);
    sluice_stats st = stats(s);
    CHECK_EQ(st.allowed + st.denied, 0); /* verbs are not decisions */
    /* held: a peek changes nothing, a refund shortens nothing's expiry */
    sluice_policy *p = policy("held", "sliding-log limit=4 window=1h; token-bucket capacity=5 rate=1/h");
    REQUIRE(p);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 3, 5000, &d), 0);
    char name[64], log[64];
    size_t n = state_name(name, "sluice:", "held", "k", 1, -1), ln = state_name(log, "sluice:", "held", "k", 1, 0);
    redisReply *before = rs_cmd(port, "GET %b", name, n);
    REQUIRE(before && before->type == REDIS_REPLY_STRING);
    long long ttl = rs_int(port, "PTTL %b", name, n);
    CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 1, 9000, &d), 0);
    CHECK(d.allowed && d.remaining == 0);
    redisReply *after = rs_cmd(port, "GET %b", name, n);
    CHECK(after && after->type == REDIS_REPLY_STRING && !strcmp(after->str, before->str));
    if (after) freeReplyObject(after);
    freeReplyObject(before);
    CHECK(rs_int(port, "PTTL %b", name, n) <= ttl);
    CHECK_EQ(sluice_store_refund_at(s, p, "k", 1, 2, 5000, &d), 0);
    CHECK(d.allowed && d.remaining == 2);
    long long ttl_after = rs_int(port, "PTTL %b", name, n);
    CHECK(ttl_after <= ttl && ttl_after > ttl - 60000);
    CHECK(rs_int(port, "PTTL %b", log, ln) <= ttl);
    CHECK_EQ(rs_int(port, "DBSIZE"), 2);
    sluice_policy_free(p);
    sluice_store_close(s);
    sluice_store_close(mem);
}

TEST(peek_and_refund_of_a_key_not_held_create_nothing) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) absent_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* A key's expiry covers every part, shadow ones too: the names of a key
 * whose enforced part is fresh in 1 ms live as long as its shadow parts
 * need (an hour, half an hour), counted or not (a shadow denial), and
 * after a conversion. */
static void shadow_ttl_body(int port) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client&ttl_grace_ms=0"), NULL);
    sluice_policy *p = policy("sh", "token-bucket capacity=10 rate=1/ms; shadow fixed-window limit=5 window=1h; "
                                    "shadow sliding-log limit=2 window=30m");
    sluice_policy *q = policy("sh", "token-bucket capacity=10 rate=1/ms; shadow fixed-window limit=5 window=1h");
    REQUIRE(s && p && q);
    char name[64], log[64];
    size_t n = state_name(name, "sluice:", "sh", "k", 1, -1), ln = state_name(log, "sluice:", "sh", "k", 1, 2);
    sluice_decision d;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 0, &d), 0);
        CHECK(d.allowed && d.reset_ms == i + 1);
        CHECK(d.shadow_denied == (i == 2)); /* the shadow log: 2 of 2 */
        long long ttl = rs_int(port, "PTTL %b", name, n), log_ttl = rs_int(port, "PTTL %b", log, ln);
        if (ttl < 3590000 || log_ttl < 1790000) fprintf(stderr, "decision %d: PTTL %lld, log %lld\n", i, ttl, log_ttl);
        CHECK(ttl > 3590000 && ttl <= 3600000);
        CHECK(log_ttl > 1790000 && log_ttl <= 3600000);
    }
    CHECK_EQ(stats(s).shadow_denied, 1);
    /* a peek under a configuration without the log converts the key: its
     * log goes, its state lives as long as the window needs (the bucket,
     * drained, is fresh; the window, carried, holds 3 of 5) */
    CHECK_EQ(sluice_store_peek_at(s, q, "k", 1, 2, 10, &d), 0);
    CHECK(d.allowed && d.remaining == 8 && d.reset_ms == 2 && !d.shadow_denied);
    CHECK_EQ(sluice_store_peek_at(s, q, "k", 1, 3, 10, &d), 0);
    CHECK(d.allowed && d.shadow_denied);
    CHECK_EQ(rs_int(port, "EXISTS %b", log, ln), 0);
    long long ttl = rs_int(port, "PTTL %b", name, n);
    CHECK(ttl > 3580000 && ttl <= 3600000);
    CHECK_EQ(stats(s).shadow_denied, 1); /* a peek is no decision */
    sluice_policy_free(p);
    sluice_policy_free(q);
    sluice_store_close(s);
}

TEST(expiry_covers_shadow_parts) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) shadow_ttl_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* Bad arguments to a verb: a clear error, nothing changed, nothing sent;
 * a server that cannot answer: on_error, as for a decision. */
static void bad_verbs_body(int port) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client"), NULL);
    sluice_policy *p = policy("p", "token-bucket capacity=3 rate=1/h; sliding-log limit=5 window=1h");
    REQUIRE(s && p);
    sluice_decision d, before, after;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 2, 1000, &d), 0);
    CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 1, 1000, &before), 0);
    CHECK(rs_ok(port, "CONFIG RESETSTAT"));
    static char big[SLUICE_KEY_MAX + 1];
    int64_t costs[] = {0, -1, 4, INT64_MIN, INT64_MAX};
    for (size_t i = 0; i < sizeof costs / sizeof costs[0]; i++) {
        CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, costs[i], 1000, &d), SLUICE_ECOST);
        CHECK_EQ(sluice_store_refund_at(s, p, "k", 1, costs[i], 1000, &d), SLUICE_ECOST);
        CHECK(strstr(sluice_store_errmsg(s), "cost") != NULL);
    }
    CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 1, 1000, NULL), SLUICE_EINVAL); /* a peek answers */
    CHECK_EQ(sluice_store_peek_at(s, NULL, "k", 1, 1, 1000, &d), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(s), "policy") != NULL);
    CHECK_EQ(sluice_store_refund_at(s, p, NULL, 1, 1, 1000, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_reset(s, NULL, "k", 1, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_reset(s, p, "k", 0, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_refund_at(s, p, "", 0, 1, 1000, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_peek_at(s, p, big, sizeof big, 1, 1000, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_reset(s, p, big, sizeof big, NULL), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(s), "bytes") != NULL);
    CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 1, SLUICE_TIME_MAX_MS + 1, &d), SLUICE_EINVAL);
    /* readings the store takes in client-clock mode: +-2^50 */
    CHECK_EQ(sluice_store_refund_at(s, p, "k", 1, 1, T_EDGE + 1, &d), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(s), "2^50") != NULL);
    CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 1, -T_EDGE - 1, &d), SLUICE_EINVAL);
    CHECK_EQ(cmd_calls(port, "total"), 0); /* none reached the server */
    CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 1, 1000, &after), 0);
    if (!same(&before, &after)) print_decision("before", &before), print_decision("after ", &after);
    CHECK(same(&before, &after) && after.remaining == 0); /* the bucket's 3rd */
    CHECK_EQ(sluice_store_refund_at(s, p, "k", 1, 3, 1000, NULL), 0); /* out may be NULL */
    CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 3, 1000, &d), 0);
    CHECK(d.allowed && d.remaining == 0); /* back to full, not beyond */
    CHECK_EQ(sluice_store_reset(s, p, "k", 1, NULL), 0);
    CHECK_EQ(rs_int(port, "DBSIZE"), 0);
    sluice_stats st = stats(s);
    CHECK_EQ(st.allowed, 1);
    CHECK_EQ(st.failures, 0);
    /* no server: on_error */
    sluice_store *dead = open_store("redis://127.0.0.1:1?connect_timeout_ms=50&on_error=error", NULL);
    sluice_store *lax = open_store("redis://127.0.0.1:1?connect_timeout_ms=50", NULL);
    REQUIRE(dead && lax);
    CHECK_EQ(sluice_store_peek(dead, p, "k", 1, 1, &d), SLUICE_ESTORE);
    CHECK_EQ(sluice_store_refund(dead, p, "k", 1, 1, &d), SLUICE_ESTORE);
    CHECK_EQ(sluice_store_reset(dead, p, "k", 1, &d), SLUICE_ESTORE);
    CHECK(strstr(sluice_store_errmsg(dead), "redis") != NULL);
    CHECK_EQ(sluice_store_refund(lax, p, "k", 1, 1, &d), 0);
    CHECK(!d.enforced && d.allowed);
    CHECK_EQ(stats(dead).failures, 3);
    sluice_store_close(dead);
    sluice_store_close(lax);
    sluice_policy_free(p);
    sluice_store_close(s);
}

TEST(verbs_refuse_bad_arguments_changing_nothing) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) bad_verbs_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* Threads mixing acquires and refunds on one key at one reading (so that
 * nothing drains): never beyond fresh or below empty, and what it holds
 * at the end is exactly what was admitted less what was refunded. */
typedef struct {
    sluice_store *s;
    const sluice_policy *p;
    uint64_t seed;
    pthread_barrier_t *go;
    long admitted, refunded, bad;
} mixer;

static void *mix(void *arg) {
    mixer *m = arg;
    uint64_t rs = m->seed;
    pthread_barrier_wait(m->go);
    for (int i = 0; i < 150; i++) {
        sluice_decision d;
        if (sluice_store_acquire_at(m->s, m->p, "hot", 3, 1, 5000, &d) != 0 || !d.enforced) m->bad++;
        if (d.allowed) {
            m->admitted++;
            if (check_range_(&rs, 0, 1)) {
                if (sluice_store_refund_at(m->s, m->p, "hot", 3, 1, 5000, &d) != 0 || !d.enforced) m->bad++;
                m->refunded++;
            }
        }
        if (sluice_store_peek_at(m->s, m->p, "hot", 3, 1, 5000, &d) != 0 || d.remaining < 0 || d.remaining > d.limit)
            m->bad++;
    }
    return NULL;
}

static void mix_body(int port) {
    static const char *const mix_specs[] = {
        "token-bucket capacity=50 rate=1/h",
        "fixed-window limit=50 window=1h",
        "sliding-log limit=50 window=1h",
        "leaky-bucket capacity=60 rate=1/h; sliding-window limit=50 window=1h; shadow fixed-window limit=9 window=1h",
    };
    for (size_t k = 0; k < sizeof mix_specs / sizeof mix_specs[0]; k++) {
        char url[256], params[64];
        snprintf(params, sizeof params, "clock=client&timeout_ms=10000&prefix=mix%zu:", k); /* as the racers */
        sluice_store *s = open_store(url_of(url, sizeof url, port, params), NULL);
        sluice_policy *p = policy("mix", mix_specs[k]);
        REQUIRE(s && p);
        pthread_t t[N_THREADS];
        mixer m[N_THREADS];
        pthread_barrier_t go;
        pthread_barrier_init(&go, NULL, N_THREADS);
        for (int i = 0; i < N_THREADS; i++) {
            m[i] = (mixer){s, p, 1000 + (uint64_t)i, &go, 0, 0, 0};
            pthread_create(&t[i], NULL, mix, &m[i]);
        }
        long admitted = 0, refunded = 0, bad = 0;
        for (int i = 0; i < N_THREADS; i++) {
            pthread_join(t[i], NULL);
            admitted += m[i].admitted, refunded += m[i].refunded, bad += m[i].bad;
        }
        pthread_barrier_destroy(&go);
        CHECK_EQ(bad, 0);
        CHECK(admitted - refunded <= 50);
        sluice_decision d;
        CHECK_EQ(sluice_store_peek_at(s, p, "hot", 3, 1, 5000, &d), 0);
        if (d.remaining != 50 - (admitted - refunded))
            fprintf(stderr, "%s: %ld admitted, %ld refunded, %lld remaining\n", mix_specs[k], admitted, refunded,
                    (long long)d.remaining);
        CHECK_EQ(d.remaining, 50 - (admitted - refunded));
        CHECK(refunded > 0 && admitted > 50);
        sluice_policy_free(p);
        sluice_store_close(s);
    }
}

TEST(threads_mixing_acquires_and_refunds_stay_within_the_limit) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) mix_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* ---- a cluster of three masters ---- */

typedef struct {
    rs_group *g;
    int src, dst;
    unsigned slot;
} migration;

static int owner_of(rs_group *g, const char *name, size_t len) {
    for (int i = 0; i < g->n; i++) {
        redisReply *r = rs_cmd(g->s[i].port, "EXISTS %b", name, len);
        int mine = r && r->type == REDIS_REPLY_INTEGER;
        if (r) freeReplyObject(r);
        if (mine) return i;
    }
    return -1;
}

/* Moves every key of the slot from src to dst (MIGRATE ... KEYS). */
static int migrate_keys(migration *m) {
    redisReply *r = rs_cmd(m->g->s[m->src].port, "CLUSTER GETKEYSINSLOT %u 10000", m->slot);
    if (!r || r->type != REDIS_REPLY_ARRAY) {
        if (r) freeReplyObject(r);
        return -1;
    }
    int moved = (int)r->elements;
    if (r->elements) {
        const char *argv[16 + 10000];
        size_t lens[16 + 10000];
        char port[16];
        snprintf(port, sizeof port, "%d", m->g->s[m->dst].port);
        int n = 0;
        argv[n] = "MIGRATE", lens[n++] = 7;
        argv[n] = "127.0.0.1", lens[n++] = 9;
        argv[n] = port, lens[n++] = strlen(port);
        argv[n] = "", lens[n++] = 0;
        argv[n] = "0", lens[n++] = 1;
        argv[n] = "5000", lens[n++] = 4;
        argv[n] = "KEYS", lens[n++] = 4;
        for (size_t i = 0; i < r->elements && i < 10000; i++) argv[n] = r->element[i]->str, lens[n++] = r->element[i]->len;
        redisReply *mr = rs_argv(m->g->s[m->src].port, n, argv, lens);
        int ok = mr && mr->type == REDIS_REPLY_STATUS;
        if (!ok) fprintf(stderr, "MIGRATE: %s\n", mr ? mr->str : "no reply");
        if (mr) freeReplyObject(mr);
        if (!ok) moved = -1;
    }
    freeReplyObject(r);
    return moved;
}

/* SETSLOT NODE dst on every master: the target first, then the source. */
static int finish_migration(migration *m) {
    const char *id = m->g->s[m->dst].id;
    int ok = rs_ok(m->g->s[m->dst].port, "CLUSTER SETSLOT %u NODE %s", m->slot, id) &&
             rs_ok(m->g->s[m->src].port, "CLUSTER SETSLOT %u NODE %s", m->slot, id);
    for (int i = 0; i < m->g->n; i++)
        if (i != m->src && i != m->dst) ok = ok && rs_ok(m->g->s[i].port, "CLUSTER SETSLOT %u NODE %s", m->slot, id);
    return ok ? 0 : -1;
}

static void *finish_later(void *arg) {
    rs_sleep_ms(30);
    return (void *)(intptr_t)finish_migration(arg);
}

/* A key for policy pname whose names live in slot. */
static int key_in_slot(const char *pname, unsigned slot, const char *stem, char *key, size_t keylen) {
    char name[256];
    for (int i = 0; i < 1000000; i++) {
        int kn = snprintf(key, keylen, "%s%d", stem, i);
        size_t n = state_name(name, "mig:", pname, key, (size_t)kn, -1);
        if (slot_of(name, n) == slot) return kn;
    }
    return -1;
}

static void cluster_body(rs_group *g) {
    char url[256];
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d,127.0.0.1:%d?clock=client&timeout_ms=10000", g->s[0].port,
             g->s[1].port);
    sluice_store *s = open_store(url, trace_clock());
    REQUIRE(s);
    CHECK_STR(sluice_store_kind(s), "redis-cluster");
    /* conformance on a short trace (binary keys, all policies, batches) */
    CHECK_EQ(run_conformance(s, 31, 5000, (long)(2500 * scale()), "cluster", NULL, NULL), 0);
    CHECK_EQ(stats(s).failures, 0);
    /* every name lives in its decision's slot (else CROSSSLOT above) and
     * the keys are spread over the three masters */
    for (int i = 0; i < g->n; i++) CHECK(rs_int(g->s[i].port, "DBSIZE") > 0);

    /* a slot moved under a running trace, on a key space of its own */
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d?clock=client&timeout_ms=10000&prefix=mig:", g->s[2].port);
    sluice_store *sm = open_store(url, trace_clock());
    REQUIRE(sm);
    trace t;
    REQUIRE(trace_init(&t, sm, 41, 100000, "migration") == 0);
    /* peeks and refunds too, no resets: a reset deletes all nine names a
     * key may have, which a migrating slot refuses (TRYAGAIN) until the
     * migration ends, as it does any call of several names not all there */
    t.verbs = 2;
    const size_t multi = 6, single = 0; /* p6 has a sliding log (two names), p0 one name */
    for (int i = 0; i < 200; i++) random_step(&t, N_SPECS);
    both(&t, t.pol[multi], "k0", 2, 1, t.now);
    both(&t, t.pol[single], "k0", 2, 1, t.now);
    char name[256];
    size_t name_len = state_name(name, "mig:", "p6", "k0", 2, -1);
    migration m = {g, -1, -1, slot_of(name, name_len)};
    CHECK_EQ(rs_int(g->s[0].port, "CLUSTER KEYSLOT %b", name, name_len), (long long)m.slot);
    m.src = owner_of(g, name, name_len);
    REQUIRE(m.src >= 0);
    m.dst = (m.src + 1) % g->n;
    /* fresh keys whose names fall in the same slot */
    char fresh_multi[32], fresh_single[32], fresh_late[32];
    int fm = key_in_slot("p6", m.slot, "fm", fresh_multi, sizeof fresh_multi);
    int fs = key_in_slot("p0", m.slot, "fs", fresh_single, sizeof fresh_single);
    int fl = key_in_slot("p6", m.slot, "fl", fresh_late, sizeof fresh_late);
    REQUIRE(fm > 0 && fs > 0 && fl > 0);
    /* 1: importing and migrating: the keys are still on the source */
    REQUIRE(rs_ok(g->s[m.dst].port, "CLUSTER SETSLOT %u IMPORTING %s", m.slot, g->s[m.src].id));
    REQUIRE(rs_ok(g->s[m.src].port, "CLUSTER SETSLOT %u MIGRATING %s", m.slot, g->s[m.dst].id));
    for (int i = 0; i < 100; i++) {
        random_step(&t, N_SPECS);
        both(&t, t.pol[multi], "k0", 2, 1, t.now);
    }
    CHECK_EQ(t.failures, 0);
    /* 2: the keys moved, the slot not yet: ASK */
    int moved = migrate_keys(&m);
    CHECK(moved >= 2);
    CHECK_EQ(rs_int(g->s[m.src].port, "CLUSTER COUNTKEYSINSLOT %u", m.slot), 0);
    for (int i = 0; i < 100; i++) {
        random_step(&t, N_SPECS);
        both(&t, t.pol[multi], "k0", 2, 1, t.now);
        both(&t, t.pol[single], "k0", 2, 1, t.now);
    }
    both(&t, t.pol[single], fresh_single, (size_t)fs, 1, t.now); /* a new key: ASK, and made there */
    both(&t, t.pol[single], fresh_single, (size_t)fs, 1, t.now);
    int failures_before = (int)t.failures;
    CHECK_EQ(t.failures, 0);
    /* 3: a new multi-key decision while the migration ends: the target
     * answers TRYAGAIN until the slot is its own */
    pthread_t finisher;
    pthread_create(&finisher, NULL, finish_later, &m);
    int64_t t0 = rs_now_ms();
    both(&t, t.pol[multi], fresh_multi, (size_t)fm, 1, t.now);
    int64_t took = rs_now_ms() - t0;
    void *fin = NULL;
    pthread_join(finisher, &fin);
    CHECK(fin == NULL);
    if (t.failures > failures_before)
        fprintf(stderr, "  (a new two-name decision during the migration: answered after %lld ms)\n", (long long)took);
    CHECK_EQ(t.failures, failures_before);
    /* 4: the slot is the target's: MOVED */
    int src_has = 0;
    redisReply *r = rs_cmd(g->s[m.src].port, "EXISTS %b", name, name_len);
    src_has = r && r->type == REDIS_REPLY_ERROR && !strncmp(r->str, "MOVED", 5);
    if (r) freeReplyObject(r);
    CHECK(src_has);
    for (int i = 0; i < 100; i++) {
        random_step(&t, N_SPECS);
        both(&t, t.pol[multi], "k0", 2, 1, t.now);
    }
    both(&t, t.pol[multi], fresh_late, (size_t)fl, 1, t.now);
    both(&t, t.pol[multi], fresh_multi, (size_t)fm, 1, t.now);
    CHECK_EQ(owner_of(g, name, name_len), m.dst);
    if (t.failures) fprintf(stderr, "migration: %ld of %ld decisions differ\n", t.failures, t.decided);
    CHECK_EQ(t.failures, 0);
    CHECK_EQ(stats(sm).failures, 0);
    trace_free(&t);
    sluice_store_close(sm);
    /* batches over the cluster: one pipeline per master */
    sluice_clock *c = sluice_clock_manual_new(1000000);
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d?clock=client&timeout_ms=10000&prefix=many:", g->s[2].port);
    sluice_store *many = open_store(url, c);
    REQUIRE(c && many);
    sluice_policy *p = policy("cb", "sliding-log limit=3 window=10ms; token-bucket capacity=4 rate=1/5ms");
    REQUIRE(p);
    sluice_store *mem = open_store("memory:", c);
    REQUIRE(mem);
    long differ = 0;
    for (int b = 0; b < 30; b++) {
        sluice_clock_manual_advance(c, 3);
        sluice_request reqs[20];
        for (int i = 0; i < 20; i++) {
            size_t k = (size_t)(i * 7 + b) % N_TRACE_KEYS;
            reqs[i] = (sluice_request){p, trace_keys[k].b, trace_keys[k].n, 1};
        }
        sluice_decision got[20], want[20];
        int rc[20], rc_ref[20];
        CHECK_EQ(sluice_store_acquire_many(many, reqs, 20, got, rc), 0);
        CHECK_EQ(sluice_store_acquire_many(mem, reqs, 20, want, rc_ref), 0);
        for (int i = 0; i < 20; i++) differ += rc[i] != rc_ref[i] || (rc[i] == 0 && !same(&got[i], &want[i]));
    }
    CHECK_EQ(differ, 0);
    CHECK_EQ(stats(many).failures, 0);
    sluice_policy_free(p);
    sluice_store_close(many);
    sluice_store_close(mem);
    sluice_clock_free(c);
    sluice_stats st = stats(s);
    CHECK(st.keys > 0);
    sluice_store_close(s);

    /* verify=1 PINGs every master, not only the seed; stats ask every
     * master: one stopped, both fail naming it */
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d?verify=1&timeout_ms=100&connect_timeout_ms=100",
             g->s[0].port);
    sluice_store *v = open_store(url, NULL);
    CHECK(v != NULL);
    rs_signal(g, 2, SIGSTOP);
    char err[256] = "", port_text[16];
    snprintf(port_text, sizeof port_text, ":%d", g->s[2].port);
    CHECK_EQ(sluice_store_stats(v, &st), SLUICE_ESTORE);
    CHECK_EQ(st.keys, -1);
    if (!strstr(sluice_store_errmsg(v), port_text)) fprintf(stderr, "cluster stats: \"%s\"\n", sluice_store_errmsg(v));
    CHECK(strstr(sluice_store_errmsg(v), port_text) != NULL);
    sluice_store *w = (sluice_store *)1;
    CHECK_EQ(sluice_store_open_err(url, NULL, &w, err, sizeof err), SLUICE_ESTORE);
    CHECK(w == NULL);
    if (!strstr(err, port_text)) fprintf(stderr, "cluster verify=1: \"%s\"\n", err);
    CHECK(strstr(err, "verify=1") && strstr(err, port_text));
    rs_signal(g, 2, SIGCONT);
    sluice_store_close(v);
}

/* A master joins the cluster after the store opened, and the slot of a key
 * that threads are racing on moves to it: the threads learn of the new
 * node from MOVED and ASK while others use the slot map (under TSan: with
 * no data race), and not one decision is lost or doubled. */
typedef struct {
    sluice_store *s;
    const sluice_policy *p;
    atomic_int *stop;
    pthread_barrier_t *go;
    long calls, admitted, failed;
} grower;

static void *grow_race(void *arg) {
    grower *w = arg;
    pthread_barrier_wait(w->go);
    while (!atomic_load(w->stop) || w->calls < 200) {
        sluice_decision d;
        int rc = sluice_store_acquire_at(w->s, w->p, "hot", 3, 1, 5000, &d);
        w->calls++;
        if (rc || !d.enforced) w->failed++;
        else w->admitted += d.allowed;
    }
    return NULL;
}

typedef struct {
    sluice_store *s;
    const sluice_policy *p;
    atomic_int turn; /* relaxed on purpose: no ordering between the two */
    int pad;
    int rc[2];
    sluice_decision d[2];
} handoff;

static void *handoff_first(void *arg) {
    handoff *h = arg;
    h->rc[0] = sluice_store_acquire_at(h->s, h->p, "hot", 3, 1, 5000, &h->d[0]);
    return NULL;
}

static void *handoff_second(void *arg) {
    handoff *h = arg;
    while (!atomic_load_explicit(&h->turn, memory_order_relaxed)) rs_sleep_ms(1);
    h->rc[1] = sluice_store_acquire_at(h->s, h->p, "hot", 3, 1, 5000, &h->d[1]);
    return NULL;
}

static void grow_body(rs_group *g) {
    char url[256];
    snprintf(url, sizeof url, "redis-cluster://127.0.0.1:%d?clock=client&timeout_ms=10000", g->s[0].port);
    sluice_store *s = open_store(url, NULL);
    sluice_policy *p = policy("grow", "token-bucket capacity=1000000 rate=1/h");
    REQUIRE(s && p);
    sluice_decision d;
    REQUIRE(sluice_store_acquire_at(s, p, "hot", 3, 1, 5000, &d) == 0 && d.enforced);
    /* the new master */
    int n4 = rs_group_add(g, 1);
    REQUIRE(n4 >= 0);
    REQUIRE(rs_ok(g->s[0].port, "CLUSTER MEET 127.0.0.1 %d", g->s[n4].port));
    REQUIRE(rs_cluster_wait(g) == 0);
    REQUIRE(rs_cluster_myid(g->s[n4].port, g->s[n4].id, sizeof g->s[n4].id) == 0);
    char name[128];
    size_t len = state_name(name, "sluice:", "grow", "hot", 3, -1);
    migration m = {g, owner_of(g, name, len), n4, slot_of(name, len)};
    REQUIRE(m.src >= 0 && m.src != n4);
    /* 1: the slot moves to the new master while nobody decides; then one
     * thread learns the new node (MOVED), and another, which has not met
     * it, follows the slot map there */
    REQUIRE(rs_ok(g->s[n4].port, "CLUSTER SETSLOT %u IMPORTING %s", m.slot, g->s[m.src].id));
    REQUIRE(rs_ok(g->s[m.src].port, "CLUSTER SETSLOT %u MIGRATING %s", m.slot, g->s[n4].id));
    REQUIRE(migrate_keys(&m) >= 1);
    REQUIRE(finish_migration(&m) == 0);
    handoff h;
    memset(&h, 0, sizeof h);
    h.s = s, h.p = p;
    atomic_init(&h.turn, 0);
    pthread_t first, second;
    pthread_create(&second, NULL, handoff_second, &h); /* started before the node is known */
    pthread_create(&first, NULL, handoff_first, &h);
    pthread_join(first, NULL);
    atomic_store_explicit(&h.turn, 1, memory_order_relaxed);
    pthread_join(second, NULL);
    CHECK_EQ(h.rc[0], 0);
    CHECK_EQ(h.rc[1], 0);
    CHECK(h.d[0].allowed && h.d[0].enforced && h.d[0].remaining == 1000000 - 2);
    CHECK(h.d[1].allowed && h.d[1].enforced && h.d[1].remaining == 1000000 - 3);
    CHECK_EQ(owner_of(g, name, len), n4);
    /* 2: threads race on the key while its slot moves back */
    m.dst = m.src, m.src = n4;
    enum { N_GROW = 4 };
    pthread_t t[N_GROW];
    grower w[N_GROW];
    atomic_int stop;
    atomic_init(&stop, 0);
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N_GROW + 1);
    for (int i = 0; i < N_GROW; i++) {
        memset(&w[i], 0, sizeof w[i]);
        w[i].s = s, w[i].p = p, w[i].stop = &stop, w[i].go = &go;
        pthread_create(&t[i], NULL, grow_race, &w[i]);
    }
    pthread_barrier_wait(&go);
    rs_sleep_ms(5);
    int ok = rs_ok(g->s[m.dst].port, "CLUSTER SETSLOT %u IMPORTING %s", m.slot, g->s[m.src].id) &&
             rs_ok(g->s[m.src].port, "CLUSTER SETSLOT %u MIGRATING %s", m.slot, g->s[m.dst].id);
    rs_sleep_ms(5);
    ok = ok && migrate_keys(&m) >= 1;
    rs_sleep_ms(5);
    ok = ok && finish_migration(&m) == 0;
    rs_sleep_ms(20);
    atomic_store(&stop, 1);
    long admitted = 0, calls = 0, failed = 0;
    for (int i = 0; i < N_GROW; i++) {
        pthread_join(t[i], NULL);
        admitted += w[i].admitted, calls += w[i].calls, failed += w[i].failed;
    }
    pthread_barrier_destroy(&go);
    CHECK(ok);
    CHECK_EQ(failed, 0);
    CHECK_EQ(admitted, calls);
    /* the key moved, with every admission counted once */
    CHECK_EQ(owner_of(g, name, len), m.dst);
    CHECK_EQ(sluice_store_acquire_at(s, p, "hot", 3, 1, 5000, &d), 0);
    CHECK(d.allowed && d.enforced);
    CHECK_EQ(d.remaining, 1000000 - 3 - admitted - 1);
    CHECK_EQ(stats(s).failures, 0);
    sluice_policy_free(p);
    sluice_store_close(s);
}

TEST(cluster_grows_while_threads_race) {
    rs_group g;
    int ok = rs_group_open(&g) == 0;
    for (int i = 0; i < 3 && ok; i++) ok = rs_group_add(&g, 1) >= 0;
    ok = ok && rs_cluster_create(&g) == 0;
    CHECK(ok);
    if (ok) grow_body(&g);
    rs_group_close(&g);
}

TEST(cluster_conformance_and_a_slot_moved_mid_run) {
    rs_group g;
    int ok = rs_group_open(&g) == 0;
    for (int i = 0; i < 3 && ok; i++) ok = rs_group_add(&g, 1) >= 0;
    ok = ok && rs_cluster_create(&g) == 0;
    CHECK(ok);
    if (ok) cluster_body(&g);
    rs_group_close(&g);
}

TEST_MAIN(bad_urls_and_parameters, conformance_with_the_memory_store, refuses_what_lua_cannot_compute_exactly,
          acquire_wait_equals_the_memory_store,
          keys_are_binary_safe_and_independent, longest_names_and_most_arguments,
          sliding_log_totals_restart_near_2_50, evicted_names_never_make_decisions_stricter,
          changed_configuration_keeps_usage_prefix_and_db_separate,
          threads_racing_one_fresh_key_admit_exactly_capacity, processes_racing_one_fresh_key_admit_exactly_capacity,
          server_killed_and_restarted, restarted_server_is_used_at_once, script_flush_mid_run, timeouts_are_honoured,
          crowded_pool_and_a_stopped_server_keep_the_time_bound, crowded_pool_and_a_slow_server_keep_the_time_bound,
          every_key_expires_when_fresh,
          client_clock_expiry_has_grace, batches_equal_one_by_one, cluster_conformance_and_a_slot_moved_mid_run,
          cluster_grows_while_threads_race, retune_converts_a_key_another_handle_kept,
          rolling_deploy_alternates_like_one_memory_store, reset_deletes_every_name_in_one_round_trip,
          peek_and_refund_of_a_key_not_held_create_nothing, expiry_covers_shadow_parts,
          verbs_refuse_bad_arguments_changing_nothing, threads_mixing_acquires_and_refunds_stay_within_the_limit)
