/* test_redis_local.c: on_error=local, the Redis store's local limit,
 * against real redis-server processes this test starts, kills and restarts
 * itself (tests/redis_server.h).
 *
 *  - local_share=1/N: what it takes, what it refuses and how it says so;
 *    on_error=local from the URL and from the options struct;
 *  - the server down: every decision local = true, enforced = true, and
 *    field for field what a memory: store says under the policy scaled to
 *    the share (written here from sluice.h, not taken from the library) on
 *    a random trace over every algorithm, composites, shadow parts and
 *    batches, peeks, refunds and resets; a cost beyond the share's limit denied; a share that would
 *    scale a limit below 1 keeps 1; stats.local and the message;
 *  - N learned: three stores of one prefix register (at most once every
 *    3 s each, counted with INFO commandstats; an instance last seen over a
 *    minute ago not counted; another prefix apart), then the server is
 *    killed and each key admits its share 1/3 locally;
 *  - the server restarted: decisions go back to it within a second by
 *    themselves, local = false, and the local states are dropped (the next
 *    outage starts fresh);
 *  - refused writes (maxmemory reached) decided locally, then back;
 *  - threads: racing one key locally admit exactly its share; deciding
 *    while the server comes back (the local states dropped under them),
 *    every decision made and counted once.
 * Run one test by name: ./test_redis_local NAME. SLUICE_TEST_SCALE scales
 * the trace lengths. */
#define _GNU_SOURCE
#include "check.h"
#include "store_util.h"
#include "trace.h"
/* redis_server.h's cluster helpers go unused here */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#include "redis_server.h"
#pragma GCC diagnostic pop

#include <pthread.h>
#include <stdatomic.h>

#define T_EDGE (INT64_C(1) << 50) /* readings a client-clock Redis store takes */

static const char *url_of(char *buf, size_t len, int port, const char *params) {
    snprintf(buf, len, "redis://127.0.0.1:%d?%s", port, params);
    return buf;
}

/* Equal in every field but local (the reference, a memory: store, decides
 * in-process without being a fallback: local false there). */
static int same_but_local(const sluice_decision *a, const sluice_decision *b) {
    sluice_decision x = *b;
    x.local = a->local;
    return same(a, &x);
}

/* p scaled to the share 1/n, as sluice.h says (on_error=local). */
static sluice_policy *share_of(const sluice_policy *p, int64_t n) {
    sluice_config parts[SLUICE_POLICY_MAX_PARTS];
    bool shadow[SLUICE_POLICY_MAX_PARTS];
    size_t np = sluice_policy_n_parts(p);
    for (size_t i = 0; i < np; i++) {
        sluice_config c = *sluice_policy_part(p, i);
        c.limit = c.limit / n >= 1 ? c.limit / n : 1;
        if (c.algorithm == SLUICE_TOKEN_BUCKET || c.algorithm == SLUICE_LEAKY_BUCKET) {
            if (c.rate % n == 0) c.rate /= n;
            else if (c.period_ms * n <= SLUICE_PERIOD_MAX_MS) c.period_ms *= n;
            else c.rate = c.rate / n >= 1 ? c.rate / n : 1;
        }
        parts[i] = c;
        shadow[i] = sluice_policy_part_shadow(p, i);
    }
    sluice_policy *out = NULL;
    if (sluice_policy_new_shadow(sluice_policy_name(p), parts, shadow, np, &out)) fprintf(stderr, "share_of failed\n");
    return out;
}

static int64_t wall_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- local_share ---- */

TEST(local_share_and_bad_values) {
    /* no server needed: open connects on first use */
    int port = rs_free_port(0);
    REQUIRE(port > 0);
    char url[256];
    sluice_store *s = NULL;
    char err[512];
    const char *good[] = {"on_error=local", "on_error=local&local_share=1/1", "on_error=local&local_share=1/3",
                          "on_error=local&local_share=1/1000000"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        int rc = sluice_store_open_err(url_of(url, sizeof url, port, good[i]), NULL, &s, err, sizeof err);
        if (rc) fprintf(stderr, "%s: %s\n", good[i], err);
        CHECK_EQ(rc, 0);
        sluice_store_close(s);
        s = NULL;
    }
    const char *bad[] = {"1", "1/0", "2/3", "1/", "/3", "1/abc", "1/-2", "1/+2", "1/ 2", "1/1000001", "1/03",
                         "0.5", "1/3x", "", "1/99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char params[128];
        snprintf(params, sizeof params, "on_error=local&local_share=%s", bad[i]);
        err[0] = 0;
        CHECK_EQ(sluice_store_open_err(url_of(url, sizeof url, port, params), NULL, &s, err, sizeof err), SLUICE_EINVAL);
        CHECK(s == NULL);
        if (!strstr(err, "local_share") || !strstr(err, "1/N")) fprintf(stderr, "local_share=%s: \"%s\"\n", bad[i], err);
        CHECK(strstr(err, "local_share") != NULL);
        CHECK(strstr(err, "1/N") != NULL);
    }
    /* a share with another on_error would do nothing: refused */
    const char *other[] = {"local_share=1/2", "on_error=allow&local_share=1/2", "on_error=deny&local_share=1/2"};
    for (size_t i = 0; i < sizeof other / sizeof other[0]; i++) {
        CHECK_EQ(sluice_store_open_err(url_of(url, sizeof url, port, other[i]), NULL, &s, err, sizeof err), SLUICE_EINVAL);
        if (!strstr(err, "only with on_error=local")) fprintf(stderr, "%s: \"%s\"\n", other[i], err);
        CHECK(strstr(err, "only with on_error=local") != NULL);
    }
    /* the choices named when on_error is wrong */
    CHECK_EQ(sluice_store_open_err(url_of(url, sizeof url, port, "on_error=nearby"), NULL, &s, err, sizeof err),
             SLUICE_EINVAL);
    CHECK(strstr(err, "local") != NULL);
    /* from the options struct: on_error local takes local_share; beyond it, refused */
    sluice_store_options o = SLUICE_STORE_OPTIONS_INIT;
    o.on_error = SLUICE_ON_ERROR_LOCAL;
    CHECK_EQ(sluice_store_open_err(url_of(url, sizeof url, port, "local_share=1/4"), &o, &s, err, sizeof err), 0);
    sluice_store_close(s);
    s = NULL;
    o.on_error = (sluice_on_error)(SLUICE_ON_ERROR_LOCAL + 1);
    CHECK_EQ(sluice_store_open_err(url_of(url, sizeof url, port, "clock=client"), &o, &s, err, sizeof err),
             SLUICE_EINVAL);
    /* memory: takes none of it */
    CHECK_EQ(sluice_store_open_err("memory:?local_share=1/2", NULL, &s, err, sizeof err), SLUICE_EINVAL);
}

/* ---- the server down: the local limit, exactly ---- */

#define EXTRA_SPECS                                                                                \
    "fixed-window limit=10 window=1s", "token-bucket capacity=9 rate=6/s",                         \
        "token-bucket capacity=7 rate=5/1s", "leaky-bucket capacity=8 rate=10/7ms",                \
        "sliding-window limit=2 window=30ms", "token-bucket capacity=50 rate=7/29d",               \
        "sliding-log limit=12 window=100ms; token-bucket capacity=4 rate=2/10ms"

static const char *const specs[] = {STORE_TEST_SPECS STORE_TEST_SHADOW_SPECS EXTRA_SPECS};
#define N_SPECS (sizeof specs / sizeof specs[0])
#define N_KEYS 7

/* A random trace on s (its server down, share 1/n) against a memory: store
 * under the scaled policies: the number of differences (each printed). The
 * policies the store refuses outright (Lua's 2^53) are left out. */
static long down_trace(sluice_store *s, sluice_clock *c, int64_t n, uint64_t seed, long steps, long *n_local) {
    sluice_policy *pol[N_SPECS], *share[N_SPECS];
    size_t np = 0, spec_of[N_SPECS];
    sluice_decision d, want;
    for (size_t i = 0; i < N_SPECS; i++) {
        pol[np] = policy_i(i, specs[i]);
        if (!pol[np]) return 1;
        /* a refusal comes before any round trip (the store's arithmetic) */
        if (sluice_store_acquire_at(s, pol[np], "probe", 5, 1, 0, &d) == SLUICE_EINVAL) {
            sluice_policy_free(pol[np]);
            continue;
        }
        share[np] = share_of(pol[np], n);
        spec_of[np++] = i;
    }
    *n_local += (long)np;
    sluice_store *mem = open_store("memory:", c); /* a reset reads the clock */
    if (!mem) return 1;
    /* the store's time is 0 (the probes, and the caller's first local
     * decision): so is the reference's */
    if (np) sluice_store_acquire_at(mem, share[0], "probe", 5, 1, 0, &want);
    char keys[N_KEYS][8];
    for (int k = 0; k < N_KEYS; k++) snprintf(keys[k], sizeof keys[k], "k%d", k);
    uint64_t rs = seed;
    int64_t now = 0;
    long differ = 0, beyond = 0, denied = 0, verbs = 0;
    for (long step = 0; step < steps; step++) {
        trace_step st;
        trace_draw(&rs, &now, T_EDGE, pol, np, N_KEYS, &st);
        trace_verb(&rs, &st);
        const char *key = keys[st.key];
        size_t len = strlen(key);
        int64_t most = sluice_policy_max_cost(share[st.spec]);
        memset(&d, 0x5a, sizeof d);
        sluice_clock_manual_set(c, st.now); /* what a reset reads */
        int rc = store_verb(s, pol[st.spec], key, len, st.verb, st.cost, st.now, &d);
        int ok;
        if (st.verb != TRACE_RESET && (st.cost < 1 || st.cost > sluice_policy_max_cost(pol[st.spec]))) {
            ok = rc == SLUICE_ECOST; /* the store's own check: no decision */
        } else if (st.verb == TRACE_RESET || st.verb == TRACE_REFUND) {
            /* made on the local limit too (a refund capped at the share's limit) */
            int rc_ref = store_verb(mem, share[st.spec], key, len, st.verb, min64(st.cost, most), st.now, &want);
            ok = rc == rc_ref && (rc || (same_but_local(&d, &want) && d.local && d.enforced));
            verbs++;
        } else if (st.cost > most) {
            /* fits the limit, never the share: denied, nothing taken */
            int rc_ref = sluice_store_peek_at(mem, share[st.spec], key, len, 1, st.now, &want);
            if (want.allowed) want.remaining += 1; /* available now */
            want.allowed = false;
            want.delay_ms = 0;
            want.retry_after_ms = max64(want.retry_after_ms, 100);
            ok = rc == 0 && rc_ref == 0 && same_but_local(&d, &want) && d.local;
            *n_local += rc == 0 && st.verb == TRACE_ACQUIRE; /* only requests are counted */
            beyond++;
        } else {
            int rc_ref = store_verb(mem, share[st.spec], key, len, st.verb, st.cost, st.now, &want);
            ok = rc == rc_ref && (rc || (same_but_local(&d, &want) && d.local && d.enforced));
            *n_local += rc == 0 && st.verb == TRACE_ACQUIRE;
            denied += rc == 0 && !d.allowed;
            verbs += st.verb == TRACE_PEEK;
        }
        if (!ok) {
            if (differ++ < 5) {
                fprintf(stderr, "share 1/%lld, step %ld: %s %s key %s cost %lld at %lld: rc %d local %d\n", (long long)n,
                        step, verb_name(st.verb), specs[spec_of[st.spec]], key, (long long)st.cost, (long long)st.now,
                        rc, d.local);
                print_decision("redis ", &d);
                print_decision("memory", &want);
            }
        }
        if (step % 97 == 0) { /* a batch, at the store clock's reading: the same local limit */
            sluice_request reqs[3];
            sluice_decision out[3];
            size_t sp[3];
            int results[3];
            for (int i = 0; i < 3; i++) {
                sp[i] = (size_t)check_range_(&rs, 0, (int64_t)np - 1);
                reqs[i] = (sluice_request){pol[sp[i]], keys[i], strlen(keys[i]), 1};
            }
            sluice_clock_manual_set(c, st.now);
            CHECK_EQ(sluice_store_acquire_many(s, reqs, 3, out, results), 0);
            for (int i = 0; i < 3; i++) {
                int rc_ref = sluice_store_acquire_at(mem, share[sp[i]], keys[i], strlen(keys[i]), 1, st.now, &want);
                int same_batch = results[i] == rc_ref && (rc_ref || (same_but_local(&out[i], &want) && out[i].local));
                if (!same_batch && differ++ < 5) {
                    fprintf(stderr, "batch at step %ld, request %d (%s): rc %d, want %d\n", step, i, specs[spec_of[sp[i]]],
                            results[i], rc_ref);
                    print_decision("redis ", &out[i]);
                    print_decision("memory", &want);
                }
                *n_local += results[i] == 0;
            }
        }
    }
    /* the trace met denials, and (a share below the whole) costs beyond it */
    CHECK(denied > 0);
    CHECK(verbs > 0);
    if (n > 1) CHECK(beyond > 0);
    for (size_t i = 0; i < np; i++) {
        sluice_policy_free(pol[i]);
        sluice_policy_free(share[i]);
    }
    sluice_store_close(mem);
    return differ;
}

/* A store at port (its server up) with on_error=local and the share 1/n by
 * hand, on its own manual clock: a few decisions made by the server, then
 * the server killed and a trace decided locally. */
static void down_body(rs_group *g, int a, int64_t n, uint64_t seed) {
    char url[256], params[128];
    snprintf(params, sizeof params, "on_error=local&local_share=1/%lld&clock=client&prefix=d%llu:", (long long)n,
             (unsigned long long)seed);
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_store *s = open_store(url_of(url, sizeof url, g->s[a].port, params), c);
    sluice_policy *p = policy("up", "fixed-window limit=9 window=1h");
    REQUIRE(c && s && p);
    sluice_decision d;
    for (int i = 0; i < 3; i++) {
        CHECK_EQ(sluice_store_acquire_at(s, p, "u", 1, 1, 10, &d), 0);
        CHECK(d.allowed && d.enforced && !d.local && d.remaining == 8 - i);
    }
    CHECK_EQ(stats(s).local, 0);
    rs_signal(g, a, SIGKILL);
    /* the server's decisions are not the local limit's: "u" starts fresh locally */
    CHECK_EQ(sluice_store_acquire_at(s, p, "u", 1, 1, 0, &d), 0);
    CHECK(d.allowed && d.enforced && d.local && d.remaining == 9 / n - 1 && d.limit == 9 / n);
    const char *msg = sluice_store_errmsg(s);
    char share_text[32];
    snprintf(share_text, sizeof share_text, "share 1/%lld", (long long)n);
    if (!strstr(msg, "local limit") || !strstr(msg, share_text) || !strstr(msg, "redis: "))
        fprintf(stderr, "a local decision's message: \"%s\"\n", msg);
    CHECK(strstr(msg, "local limit") != NULL && strstr(msg, share_text) != NULL && strstr(msg, "redis: ") != NULL);
    long n_local = 1;
    long differ = down_trace(s, c, n, seed, (long)(6000 * test_scale_sanitized(0.3)), &n_local);
    CHECK_EQ(differ, 0);
    sluice_stats st;
    CHECK_EQ(sluice_store_stats(s, &st), SLUICE_ESTORE); /* the keys are unknown: the server is down */
    CHECK_EQ(st.local, n_local);
    CHECK(st.failures >= n_local);
    CHECK(st.allowed + st.denied >= n_local);
    /* a share that scales a limit below 1 keeps 1 */
    sluice_policy *small = policy("small", "token-bucket capacity=2 rate=1/s; fixed-window limit=1 window=1h");
    REQUIRE(small);
    CHECK_EQ(sluice_store_acquire_at(s, small, "x", 1, 1, T_EDGE, &d), 0);
    CHECK(d.allowed && d.local && d.remaining == 0 && (n == 1 || d.limit == 1));
    CHECK_EQ(sluice_store_acquire_at(s, small, "x", 1, 1, T_EDGE, &d), 0);
    CHECK(!d.allowed && d.local && d.enforced && d.retry_after_ms > 0);
    /* cost 2 fits the bucket's 2, never a share of 1: denied, retry at least 100 ms */
    if (n >= 2) {
        sluice_policy *two = policy("two", "token-bucket capacity=2 rate=1/s");
        REQUIRE(two);
        CHECK_EQ(sluice_store_acquire_at(s, two, "y", 1, 2, T_EDGE, &d), 0);
        if (!(!d.allowed && d.local && d.enforced && d.retry_after_ms >= 100 && d.limit == 1 && d.remaining == 1))
            print_decision("cost 2 of a share of 1", &d);
        CHECK(!d.allowed && d.local && d.enforced && d.retry_after_ms >= 100 && d.limit == 1 && d.remaining == 1);
        CHECK_EQ(sluice_store_acquire_at(s, two, "y", 1, 1, T_EDGE, &d), 0); /* nothing was taken */
        CHECK(d.allowed && d.remaining == 0);
        sluice_policy_free(two);
    }
    sluice_policy_free(small);
    sluice_policy_free(p);
    sluice_store_close(s);
    sluice_clock_free(c);
}

TEST(server_down_decides_by_the_scaled_local_limit) {
    const int64_t shares[] = {1, 3, 7};
    for (size_t i = 0; i < sizeof shares / sizeof shares[0]; i++) {
        rs_group g;
        int a = -1;
        if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
        CHECK(a >= 0);
        if (a >= 0) down_body(&g, a, shares[i], 11 + i);
        rs_group_close(&g);
    }
}

/* ---- N learned from the instance registry ---- */

TEST(share_learned_from_instances_then_applied) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    REQUIRE(a >= 0);
    int port = g.s[a].port;
    char url[256];
    sluice_store *s[3], *apart;
    for (int i = 0; i < 3; i++) s[i] = open_store(url_of(url, sizeof url, port, "on_error=local&clock=client&prefix=lp:"), NULL);
    apart = open_store(url_of(url, sizeof url, port, "on_error=local&clock=client&prefix=other:"), NULL);
    sluice_policy *p = policy("ten", "fixed-window limit=10 window=1h");
    REQUIRE(s[0] && s[1] && s[2] && apart && p);
    sluice_decision d;
    /* an instance last seen over a minute ago: not counted, and removed */
    CHECK(rs_ok(port, "ZADD lp:{instances} %lld ghost", (long long)(wall_ms() - 61000)));
    /* the first decision of each registers (due at once), every later one
     * within 3 s does not */
    for (int round = 0; round < 20; round++)
        for (int i = 0; i < 3; i++) {
            CHECK_EQ(sluice_store_acquire_at(s[i], p, "warm", 4, 1, 5, &d), 0);
            CHECK(!d.local);
        }
    CHECK_EQ(sluice_store_acquire_at(apart, p, "warm", 4, 1, 5, &d), 0);
    CHECK_EQ(rs_calls(port, "zadd"), 3 + 1 + 1); /* ghost, three stores, apart */
    CHECK_EQ(rs_int(port, "ZCARD lp:{instances}"), 3);
    CHECK_EQ(rs_int(port, "ZCARD other:{instances}"), 1);
    long long ttl = rs_int(port, "PTTL lp:{instances}");
    CHECK(ttl > 60000 && ttl <= 120000);
    /* the first two registered before the third: they learn 3 at their next turn */
    rs_sleep_ms(3100);
    /* (a key of its own: "warm" is denied by now, and a cached denial
     * makes no round trip to carry the registry's commands) */
    for (int i = 0; i < 3; i++) CHECK_EQ(sluice_store_acquire_at(s[i], p, "late", 4, 1, 5, &d), 0);
    CHECK_EQ(rs_calls(port, "zadd"), 3 + 1 + 1 + 3);
    rs_signal(&g, a, SIGKILL);
    /* each store: its share 1/3 of the limit 10 for the key, 3 */
    for (int i = 0; i < 3; i++) {
        for (int k = 0; k < 3; k++) {
            CHECK_EQ(sluice_store_acquire_at(s[i], p, "hot", 3, 1, 100, &d), 0);
            CHECK(d.allowed && d.local && d.enforced && d.limit == 3 && d.remaining == 2 - k);
        }
        CHECK_EQ(sluice_store_acquire_at(s[i], p, "hot", 3, 1, 100, &d), 0);
        CHECK(!d.allowed && d.local && d.enforced && d.limit == 3);
        if (!strstr(sluice_store_errmsg(s[i]), "share 1/3"))
            fprintf(stderr, "store %d: \"%s\"\n", i, sluice_store_errmsg(s[i]));
        CHECK(strstr(sluice_store_errmsg(s[i]), "share 1/3") != NULL);
        CHECK_EQ(stats(s[i]).local, 4);
    }
    /* the store of another prefix was alone: the whole limit */
    for (int k = 0; k < 10; k++) {
        CHECK_EQ(sluice_store_acquire_at(apart, p, "hot", 3, 1, 100, &d), 0);
        CHECK(d.allowed && d.local && d.limit == 10);
    }
    CHECK_EQ(sluice_store_acquire_at(apart, p, "hot", 3, 1, 100, &d), 0);
    CHECK(!d.allowed && d.local);
    for (int i = 0; i < 3; i++) sluice_store_close(s[i]);
    sluice_store_close(apart);
    sluice_policy_free(p);
    rs_group_close(&g);
}

/* ---- back to the server ---- */

/* Decisions on s until the server makes one (local false), for at most
 * 10 s: the ms it took, or -1. (The store tries the server again after
 * 100 ms down; the bound is generous only so that a loaded machine does
 * not fail the test: what it checks is that decisions go back by
 * themselves.) */
static int64_t until_back(sluice_store *s, const sluice_policy *p) {
    sluice_decision d;
    int64_t start = rs_now_ms();
    while (rs_now_ms() - start < 10000) {
        if (sluice_store_acquire_at(s, p, "probe", 5, 1, 100, &d) == 0 && !d.local && d.enforced)
            return rs_now_ms() - start;
        rs_sleep_ms(5);
    }
    return -1;
}

TEST(restarted_server_decides_again_and_local_states_are_dropped) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    REQUIRE(a >= 0);
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, g.s[a].port, "on_error=local&local_share=1/2&clock=client"), NULL);
    sluice_policy *p = policy("four", "fixed-window limit=4 window=1h");
    REQUIRE(s && p);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 100, &d), 0);
    CHECK(d.allowed && !d.local && d.remaining == 3);
    long local = 0;
    for (int outage = 0; outage < 3; outage++) {
        rs_signal(&g, a, SIGKILL);
        /* each outage starts fresh: the share, 2, then denied */
        for (int k = 0; k < 2; k++) {
            CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 100, &d), 0);
            if (!(d.allowed && d.local && d.remaining == 1 - k))
                fprintf(stderr, "outage %d, local decision %d:\n", outage, k), print_decision("local", &d);
            CHECK(d.allowed && d.local && d.remaining == 1 - k);
        }
        CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 100, &d), 0);
        CHECK(!d.allowed && d.local);
        local += 3;
        CHECK_EQ(stats(s).local, local);
        REQUIRE(rs_restart(&g, a) == 0);
        int64_t took = until_back(s, p);
        if (took < 0) fprintf(stderr, "outage %d: never back to the server\n", outage);
        CHECK(took >= 0);
        local = stats(s).local; /* the probes before the server answered were local */
        /* the server's own state (fresh after the restart), not the local one */
        CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 100, &d), 0);
        CHECK(d.allowed && !d.local && d.enforced && d.remaining == 3);
        CHECK_EQ(stats(s).local, local);
    }
    sluice_stats st;
    CHECK_EQ(sluice_store_stats(s, &st), 0);
    CHECK(st.reconnects >= 3);
    CHECK(st.local >= 9);
    sluice_store_close(s);
    sluice_policy_free(p);
    rs_group_close(&g);
}

/* Refused writes (maxmemory reached, noeviction): the server answers, but
 * cannot decide; the local limit does, until it can again. */
TEST(refused_writes_are_decided_locally) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    REQUIRE(a >= 0);
    int port = g.s[a].port;
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "on_error=local&local_share=1/2&clock=client"), NULL);
    sluice_policy *p = policy("four", "fixed-window limit=4 window=1h");
    REQUIRE(s && p);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 100, &d), 0);
    CHECK(d.allowed && !d.local);
    CHECK(rs_ok(port, "CONFIG SET maxmemory-policy noeviction"));
    CHECK(rs_ok(port, "CONFIG SET maxmemory 1"));
    CHECK_EQ(sluice_store_acquire_at(s, p, "new", 3, 1, 100, &d), 0);
    CHECK(d.allowed && d.local && d.enforced && d.limit == 2);
    if (!strstr(sluice_store_errmsg(s), "OOM")) fprintf(stderr, "refused writes: \"%s\"\n", sluice_store_errmsg(s));
    CHECK(strstr(sluice_store_errmsg(s), "OOM") != NULL);
    CHECK(rs_ok(port, "CONFIG SET maxmemory 0"));
    CHECK_EQ(sluice_store_acquire_at(s, p, "new", 3, 1, 100, &d), 0);
    CHECK(d.allowed && !d.local && d.remaining == 3);
    CHECK_EQ(stats(s).local, 1);
    sluice_store_close(s);
    sluice_policy_free(p);
    rs_group_close(&g);
}

/* ---- threads ---- */

#define N_THREADS 4

static _Atomic long server_decisions; /* by every racer: the main thread waits for some */

typedef struct {
    sluice_store *s;
    const sluice_policy *p;
    int id, n, spin;
    _Atomic int *stop;
    long admitted, local, server, errors;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    sluice_decision d;
    char key[16];
    for (int i = 0; r->spin ? !atomic_load(r->stop) : i < r->n; i++) {
        const char *k = "hot";
        if (r->spin) snprintf(key, sizeof key, "t%d-%d", r->id, i % 50), k = key;
        if (sluice_store_acquire_at(r->s, r->p, k, strlen(k), 1, 100, &d) != 0) {
            r->errors++;
            continue;
        }
        r->admitted += d.allowed;
        r->local += d.local;
        r->server += !d.local;
        if (!d.local) atomic_fetch_add(&server_decisions, 1);
    }
    return NULL;
}

TEST(threads_decide_locally_while_the_server_comes_back) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    REQUIRE(a >= 0);
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, g.s[a].port, "on_error=local&local_share=1/2&clock=client"), NULL);
    sluice_policy *p = policy("race", "fixed-window limit=200 window=1h");
    REQUIRE(s && p);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "warm", 4, 1, 100, &d), 0);
    rs_signal(&g, a, SIGKILL);
    _Atomic int stop = 0;
    racer r[N_THREADS];
    pthread_t t[N_THREADS];
    /* one key, raced: exactly its share, 100, admitted */
    for (int i = 0; i < N_THREADS; i++) {
        r[i] = (racer){s, p, i, 100, 0, &stop, 0, 0, 0, 0};
        pthread_create(&t[i], NULL, race, &r[i]);
    }
    long admitted = 0, local = 0, server = 0, errors = 0;
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(t[i], NULL);
        admitted += r[i].admitted, local += r[i].local, errors += r[i].errors;
    }
    CHECK_EQ(errors, 0);
    CHECK_EQ(admitted, 100);
    CHECK_EQ(local, N_THREADS * 100);
    /* deciding while the server comes back: every decision made once */
    for (int i = 0; i < N_THREADS; i++) {
        r[i] = (racer){s, p, i, 0, 1, &stop, 0, 0, 0, 0};
        pthread_create(&t[i], NULL, race, &r[i]);
    }
    rs_sleep_ms(100);
    CHECK(rs_restart(&g, a) == 0);
    /* until the server has decided for the threads a while (10 s at most:
     * a loaded machine is slow, and the test is of counts, not timing) */
    atomic_store(&server_decisions, 0);
    for (int waited_ms = 0; atomic_load(&server_decisions) < 100 && waited_ms < 10000; waited_ms += 10)
        rs_sleep_ms(10);
    atomic_store(&stop, 1);
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(t[i], NULL);
        local += r[i].local, server += r[i].server, errors += r[i].errors;
    }
    CHECK_EQ(errors, 0); /* on_error=local always decides */
    CHECK(server > 0);
    CHECK(local > N_THREADS * 100);
    CHECK_EQ(stats(s).local, local);
    sluice_store_close(s);
    sluice_policy_free(p);
    rs_group_close(&g);
}

TEST_MAIN(local_share_and_bad_values, server_down_decides_by_the_scaled_local_limit,
          share_learned_from_instances_then_applied, restarted_server_decides_again_and_local_states_are_dropped,
          refused_writes_are_decided_locally, threads_decide_locally_while_the_server_comes_back)
