/* test_redis_deny.c: the Redis store's cache of denials (deny_cache=N,
 * src/store/redis/decide.c), against real redis-server processes this
 * test starts and stops itself (tests/redis_server.h).
 *
 *  - exact: on random traces of one client alone (every algorithm,
 *    composites, shadow parts; acquires, batches, peeks, refunds and
 *    resets; readings that go back), a store with the cache decides every
 *    field of every decision as one with deny_cache=0 on a server of its
 *    own, while its server runs fewer scripts: exactly one fewer per
 *    denial the cache answered (INFO commandstats); with a cache of a
 *    few entries too (replacements);
 *  - a cached denial counts retry_after_ms, reset_ms and part_reset_ms
 *    down exactly, with no round trip, until the retry: then the server;
 *  - a refund or a reset through this store clears the key's entry;
 *  - another client's refund is seen at the latest when the retry runs out;
 *  - a policy name with two configurations in the store is not cached;
 *  - deny_cache=0: every denial a round trip; bad values refused at open;
 *  - clock=server: denials answered locally never outlast the server's.
 * Run one test by name: ./test_redis_deny NAME. */
#define _GNU_SOURCE
#include "check.h"
#include "store_util.h"
#include "trace_verbs.h"
#pragma GCC diagnostic ignored "-Wunused-function" /* redis_server.h's faults and clusters: not used here */
#include "redis_server.h"

#include <unistd.h>

static const char *const specs[] = {STORE_TEST_SPECS STORE_TEST_SHADOW_SPECS};
#define N_SPECS (sizeof specs / sizeof specs[0])

/* "redis://127.0.0.1:PORT?PARAMS", with timeouts of 10 s: on a loaded
 * machine a call given up would be unenforced, and differ */
static const char *url_of(char *buf, size_t len, int port, const char *params) {
    snprintf(buf, len, "redis://127.0.0.1:%d?timeout_ms=10000&connect_timeout_ms=10000&%s", port, params);
    return buf;
}

/* Two servers: the cached store's and the reference's (deny_cache=0). */
typedef struct {
    rs_group g;
    int a, b;
} pair_of_servers;

static int servers_open(pair_of_servers *ps) {
    ps->a = ps->b = -1;
    if (rs_group_open(&ps->g) != 0) return -1;
    ps->a = rs_group_add(&ps->g, 0);
    ps->b = ps->a >= 0 ? rs_group_add(&ps->g, 0) : -1;
    return ps->b >= 0 ? 0 : -1;
}

/* ---- exact: a cached store against an uncached one ---- */

typedef struct {
    sluice_store *cached, *plain;
    sluice_clock *clock; /* both stores' (a reset reads it) */
    long failures, compared, denied;
    long batch_cached; /* of the batches' requests, those the cache answered */
} duo;

static void report(duo *u, const char *what, const sluice_policy *p, const char *key, int64_t cost, int64_t now,
                   int rc, int rc_ref, const sluice_decision *got, const sluice_decision *want) {
    if (u->failures++ >= 5) return;
    fprintf(stderr, "%s %s key %s cost %lld at %lld: rc %s, uncached %s\n", what, sluice_policy_name(p), key,
            (long long)cost, (long long)now, sluice_err_name(rc), sluice_err_name(rc_ref));
    if (rc == 0) print_decision("cached  ", got);
    if (rc_ref == 0) print_decision("uncached", want);
}

/* One trace of steps: mostly acquires of a few hot keys in small steps of
 * time (so that denials repeat), sometimes a batch, a peek, a refund or a
 * reset, a reading that goes back or a gap. */
static void duo_trace(duo *u, uint64_t seed, long steps) {
    sluice_policy *pol[N_SPECS];
    for (size_t i = 0; i < N_SPECS; i++) {
        char name[16];
        snprintf(name, sizeof name, "d%zu", i);
        pol[i] = policy(name, specs[i]);
        REQUIRE(pol[i]);
    }
    uint64_t rs = seed;
    int64_t now = check_range_(&rs, -100000, 100000);
    size_t sp = 0;
    for (long i = 0; i < steps && u->failures == 0; i++) {
        int64_t roll = check_range_(&rs, 0, 99);
        now += roll < 70 ? check_range_(&rs, 0, 2) : roll < 90 ? check_range_(&rs, 0, 20)
                                                   : roll < 96 ? check_range_(&rs, 0, 5000)
                                                               : -check_range_(&rs, 0, 30);
        sluice_clock_manual_set(u->clock, now);
        if (check_range_(&rs, 0, 19) == 0) sp = (size_t)check_range_(&rs, 0, N_SPECS - 1); /* a while on each */
        const sluice_policy *p = pol[sp];
        int64_t most = sluice_policy_max_cost(p);
        if (check_range_(&rs, 0, 19) == 0) { /* a batch, keys repeated */
            enum { BATCH = 8 };
            sluice_request reqs[BATCH];
            char keys[BATCH][4];
            size_t n = (size_t)check_range_(&rs, 1, BATCH);
            for (size_t j = 0; j < n; j++) {
                int k = (int)check_range_(&rs, 0, 3);
                snprintf(keys[j], sizeof keys[j], "k%d", k);
                reqs[j].policy = check_range_(&rs, 0, 3) ? p : pol[check_range_(&rs, 0, N_SPECS - 1)];
                reqs[j].key = keys[j];
                reqs[j].key_len = strlen(keys[j]);
                int64_t m = sluice_policy_max_cost(reqs[j].policy);
                reqs[j].cost = k < 2 ? 1 : k - 1 < m ? k - 1 : m;
            }
            sluice_decision got[BATCH], want[BATCH];
            int rc[BATCH], rc_ref[BATCH];
            memset(got, 0x5a, sizeof got);
            memset(want, 0x5a, sizeof want);
            int64_t cached0 = stats(u->cached).cached_denials;
            CHECK_EQ(sluice_store_acquire_many(u->cached, reqs, n, got, rc), 0); /* at the clock: now */
            u->batch_cached += (long)(stats(u->cached).cached_denials - cached0);
            CHECK_EQ(sluice_store_acquire_many(u->plain, reqs, n, want, rc_ref), 0);
            for (size_t j = 0; j < n; j++) {
                u->compared++;
                u->denied += rc_ref[j] == 0 && !want[j].allowed;
                if (rc[j] != rc_ref[j] || (rc[j] == 0 && !same(&got[j], &want[j])))
                    report(u, "batch", reqs[j].policy, keys[j], reqs[j].cost, now, rc[j], rc_ref[j], &got[j], &want[j]);
            }
            continue;
        }
        /* keys k0, k1: cost 1; k2: 2; k3: the most the policy takes (above
         * some shadow parts' limits): so that a denial meets the same cost
         * again; the rest: any */
        char key[4];
        int k = (int)(check_range_(&rs, 0, 9) ? check_range_(&rs, 0, 3) : check_range_(&rs, 4, 40));
        snprintf(key, sizeof key, "k%d", k);
        int64_t cost = k < 2 ? 1 : k == 2 ? (most < 2 ? most : 2) : k == 3 ? most
                                                                        : check_range_(&rs, 1, most < 4 ? most : 4);
        int64_t vr = check_range_(&rs, 0, 99);
        int verb = vr < 88 ? TRACE_ACQUIRE : vr < 93 ? TRACE_PEEK : vr < 98 ? TRACE_REFUND : TRACE_RESET;
        sluice_decision got, want;
        memset(&got, 0x5a, sizeof got);
        memset(&want, 0x5a, sizeof want);
        int rc = store_verb(u->cached, p, key, strlen(key), verb, cost, now, &got);
        int rc_ref = store_verb(u->plain, p, key, strlen(key), verb, cost, now, &want);
        u->compared++;
        u->denied += verb == TRACE_ACQUIRE && rc_ref == 0 && !want.allowed;
        if (rc != rc_ref || (rc == 0 && !same(&got, &want)))
            report(u, verb_name(verb), p, key, cost, now, rc, rc_ref, &got, &want);
    }
    for (size_t i = 0; i < N_SPECS; i++) sluice_policy_free(pol[i]);
}

static void exact_body(pair_of_servers *ps, const char *tag, const char *cache_param) {
    char url[256], params[96];
    for (uint64_t seed = 1; seed <= 3; seed++) {
        duo u = {0};
        u.clock = sluice_clock_manual_new(0);
        snprintf(params, sizeof params, "clock=client&prefix=e%llu%s:%s", (unsigned long long)seed, tag, cache_param);
        u.cached = open_store(url_of(url, sizeof url, ps->g.s[ps->a].port, params), u.clock);
        snprintf(params, sizeof params, "clock=client&prefix=e%llu%s:&deny_cache=0", (unsigned long long)seed, tag);
        u.plain = open_store(url_of(url, sizeof url, ps->g.s[ps->b].port, params), u.clock);
        REQUIRE(u.clock && u.cached && u.plain);
        long long calls_a = rs_calls(ps->g.s[ps->a].port, "evalsha"), calls_b = rs_calls(ps->g.s[ps->b].port, "evalsha");
        duo_trace(&u, seed, (long)(6000 * test_scale_sanitized(0.25)));
        CHECK_EQ(u.failures, 0);
        sluice_stats c = stats(u.cached), pl = stats(u.plain);
        long long ran_a = rs_calls(ps->g.s[ps->a].port, "evalsha") - calls_a, ran_b = rs_calls(ps->g.s[ps->b].port, "evalsha") - calls_b;
        CHECK_EQ(c.allowed, pl.allowed);
        CHECK_EQ(c.denied, pl.denied);
        CHECK_EQ(c.shadow_denied, pl.shadow_denied);
        CHECK_EQ(pl.cached_denials, 0);
        /* most repeated denials answered here, each one script fewer */
        CHECK(c.cached_denials > u.denied / 4);
        CHECK_EQ(ran_b - ran_a, c.cached_denials);
        CHECK(u.batch_cached > 0);
        if (u.failures == 0)
            printf("     %s seed %llu: %ld calls, %ld denials, %lld cached (%ld in batches); scripts %lld against "
                   "%lld\n", tag, (unsigned long long)seed, u.compared, u.denied, (long long)c.cached_denials,
                   u.batch_cached, ran_a, ran_b);
        sluice_store_close(u.cached);
        sluice_store_close(u.plain);
        sluice_clock_free(u.clock);
    }
}

TEST(a_lone_client_decides_as_without_the_cache) {
    pair_of_servers ps;
    if (servers_open(&ps) == 0) {
        exact_body(&ps, "default", "");         /* the default size */
        exact_body(&ps, "small", "&deny_cache=4"); /* one set: entries replaced all the time */
    }
    CHECK(ps.b >= 0);
    rs_group_close(&ps.g);
}

/* ---- counting down ---- */

static void countdown_body(int port) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client&prefix=cd:"), NULL);
    sluice_policy *p = policy("cd", "token-bucket capacity=2 rate=1/100ms; fixed-window limit=50 window=1s");
    REQUIRE(s && p);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 2, 1000, &d), 0);
    CHECK(d.allowed);
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1000, &d), 0); /* the server's denial */
    CHECK(!d.allowed);
    CHECK_EQ(d.retry_after_ms, 100);
    CHECK_EQ(d.reset_ms, 1000); /* the window's */
    CHECK_EQ(d.part, 0);
    CHECK_EQ(d.part_reset_ms, 200);
    long long before = rs_calls(port, "evalsha");
    for (int64_t t = 1000; t < 1100; t += 7) {
        memset(&d, 0x5a, sizeof d);
        CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, t, &d), 0);
        CHECK(!d.allowed && d.enforced && !d.local && !d.shadow_denied);
        CHECK_EQ(d.remaining, 0);
        CHECK_EQ(d.retry_after_ms, 1100 - t);
        CHECK_EQ(d.reset_ms, 2000 - t);
        CHECK_EQ(d.part_reset_ms, 1200 - t);
        CHECK_EQ(d.limit, 2);
        CHECK_EQ(d.delay_ms, 0);
    }
    CHECK_EQ(rs_calls(port, "evalsha"), before); /* no round trip */
    CHECK_EQ(stats(s).cached_denials, 15);
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1100, &d), 0); /* the retry: the server admits */
    CHECK(d.allowed);
    CHECK_EQ(rs_calls(port, "evalsha"), before + 1);
    /* a reading behind the store's time (another key admitted later):
     * decided at the store's time, the waits counted from the reading */
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1100, &d), 0);
    CHECK(!d.allowed);
    CHECK_EQ(sluice_store_acquire_at(s, p, "other", 5, 1, 1150, &d), 0);
    CHECK(d.allowed);
    before = rs_calls(port, "evalsha");
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1120, &d), 0);
    CHECK(!d.allowed);
    CHECK_EQ(d.retry_after_ms, 1200 - 1150 + 30);
    CHECK_EQ(d.reset_ms, 2000 - 1150 + 30);
    CHECK_EQ(rs_calls(port, "evalsha"), before);
    /* a denial of cost 2 is answered here only while cost 1 is denied too:
     * after that the server says what is left (remaining 1) */
    sluice_policy *p3 = policy("cd3", "token-bucket capacity=3 rate=1/100ms");
    REQUIRE(p3);
    CHECK_EQ(sluice_store_acquire_at(s, p3, "k", 1, 3, 5000, &d), 0);
    CHECK(d.allowed);
    CHECK_EQ(sluice_store_acquire_at(s, p3, "k", 1, 2, 5000, &d), 0);
    CHECK(!d.allowed);
    CHECK_EQ(d.retry_after_ms, 200);
    before = rs_calls(port, "evalsha");
    CHECK_EQ(sluice_store_acquire_at(s, p3, "k", 1, 2, 5099, &d), 0);
    CHECK(!d.allowed);
    CHECK_EQ(d.retry_after_ms, 101);
    CHECK_EQ(d.remaining, 0);
    CHECK_EQ(rs_calls(port, "evalsha"), before);
    CHECK_EQ(sluice_store_acquire_at(s, p3, "k", 1, 2, 5100, &d), 0);
    CHECK(!d.allowed);
    CHECK_EQ(d.remaining, 1);
    CHECK_EQ(d.retry_after_ms, 100);
    CHECK_EQ(rs_calls(port, "evalsha"), before + 1);
    sluice_policy_free(p3);
    sluice_policy_free(p);
    sluice_store_close(s);
}

TEST(cached_denials_count_down_exactly) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) countdown_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* ---- what clears an entry, what does not ---- */

/* Denies k (capacity 1, 1 per 1000 ms) at t on s, after an admission if
 * it has room: the server's denial, then the cache's. */
static void deny_k(sluice_store *s, const sluice_policy *p, int64_t t) {
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, t, &d), 0);
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, t, &d), 0);
    CHECK(!d.allowed);
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, t + 1, &d), 0);
    CHECK(!d.allowed);
}

static void clears_body(int port) {
    char url[256];
    sluice_clock *clock = sluice_clock_manual_new(0);
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client&prefix=cl:"), clock);
    sluice_store *other = open_store(url_of(url, sizeof url, port, "clock=client&prefix=cl:"), clock);
    sluice_policy *p = policy("cl", "token-bucket capacity=1 rate=1/1000ms");
    REQUIRE(clock && s && other && p);
    sluice_decision d;
    /* a refund through this store: the next request goes to the server */
    deny_k(s, p, 0);
    int64_t cached = stats(s).cached_denials;
    CHECK(cached >= 1);
    CHECK_EQ(sluice_store_refund_at(s, p, "k", 1, 1, 10, &d), 0);
    long long before = rs_calls(port, "evalsha");
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 10, &d), 0);
    CHECK(d.allowed);
    CHECK_EQ(rs_calls(port, "evalsha"), before + 1);
    CHECK_EQ(stats(s).cached_denials, cached);
    /* a reset */
    deny_k(s, p, 20);
    sluice_clock_manual_set(clock, 30);
    CHECK_EQ(sluice_store_reset(s, p, "k", 1, &d), 0);
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 30, &d), 0);
    CHECK(d.allowed);
    /* another host's refund: this store still denies, from its cache, until
     * the retry it was told, and then sees it */
    deny_k(s, p, 40);
    CHECK_EQ(sluice_store_refund_at(other, p, "k", 1, 1, 50, &d), 0);
    CHECK_EQ(sluice_store_peek_at(other, p, "k", 1, 1, 50, &d), 0);
    CHECK(d.allowed); /* the server has room again */
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 50, &d), 0);
    CHECK(!d.allowed); /* documented: not seen yet */
    CHECK_EQ(d.retry_after_ms, 30 + 1000 - 50);
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1029, &d), 0);
    CHECK(!d.allowed);
    CHECK_EQ(d.retry_after_ms, 1);
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 1030, &d), 0);
    CHECK(d.allowed); /* the retry ran out: the server's answer */
    /* another host's admissions only postpone: this store asks the server at
     * its retry and is denied again, for longer, then from its cache */
    deny_k(s, p, 1040);
    CHECK_EQ(sluice_store_acquire_at(other, p, "k", 1, 1, 2030, &d), 0);
    CHECK(d.allowed);
    long long before_retry = rs_calls(port, "evalsha");
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 2030, &d), 0);
    CHECK(!d.allowed);
    CHECK_EQ(d.retry_after_ms, 1000);
    CHECK_EQ(rs_calls(port, "evalsha"), before_retry + 1);
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 2031, &d), 0);
    CHECK(!d.allowed);
    CHECK_EQ(d.retry_after_ms, 999);
    CHECK_EQ(rs_calls(port, "evalsha"), before_retry + 1);
    sluice_policy_free(p);
    sluice_store_close(s);
    sluice_store_close(other);
    sluice_clock_free(clock);
}

TEST(refund_and_reset_clear_the_entry_another_hosts_refund_waits_for_the_retry) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) clears_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* A name with two configurations in one store: a call under one converts
 * the key, which may end the other's denial early (here: capacity 10 full,
 * converted to capacity 2 and back, holds 2), so neither is cached. */
static void twins_body(int port) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client&prefix=tw:"), NULL);
    sluice_policy *big = policy("tw", "token-bucket capacity=10 rate=1/100ms");
    sluice_policy *small = policy("tw", "token-bucket capacity=2 rate=1/100ms");
    REQUIRE(s && big && small);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, big, "k", 1, 10, 0, &d), 0);
    CHECK(d.allowed);
    CHECK_EQ(sluice_store_acquire_at(s, big, "k", 1, 1, 0, &d), 0);
    CHECK(!d.allowed);
    CHECK_EQ(sluice_store_acquire_at(s, big, "k", 1, 1, 1, &d), 0);
    CHECK(!d.allowed);
    CHECK_EQ(stats(s).cached_denials, 1);
    CHECK_EQ(sluice_store_peek_at(s, small, "k", 1, 1, 2, &d), 0); /* converts: 2 in use */
    CHECK(!d.allowed);
    CHECK_EQ(sluice_store_acquire_at(s, big, "k", 1, 1, 3, &d), 0); /* converts back: 2 of 10 */
    CHECK(d.allowed);
    CHECK_EQ(sluice_store_acquire_at(s, big, "k", 1, 8, 3, &d), 0);
    CHECK(!d.allowed);
    CHECK_EQ(sluice_store_acquire_at(s, big, "k", 1, 8, 3, &d), 0);
    CHECK_EQ(stats(s).cached_denials, 1); /* never again for this name */
    sluice_policy_free(big);
    sluice_policy_free(small);
    sluice_store_close(s);
}

TEST(a_name_with_two_configurations_is_not_cached) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) twins_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* ---- off, and bad values ---- */

static void off_body(int port) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client&prefix=off:&deny_cache=0"), NULL);
    sluice_policy *p = policy("off", "fixed-window limit=1 window=1s");
    REQUIRE(s && p);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, 0, &d), 0);
    long long before = rs_calls(port, "evalsha");
    for (int t = 0; t < 50; t++) {
        CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 1, t, &d), 0);
        CHECK(!d.allowed);
        CHECK_EQ(d.retry_after_ms, 1000 - t);
    }
    CHECK_EQ(rs_calls(port, "evalsha"), before + 50);
    CHECK_EQ(stats(s).cached_denials, 0);
    CHECK_EQ(stats(s).denied, 50);
    sluice_policy_free(p);
    sluice_store_close(s);
}

TEST(deny_cache_0_makes_every_denial_a_round_trip) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) off_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

/* A flood of denied keys through a cache of 8 entries: it holds at most 8
 * of them (at most 8 answered with no round trip when every key asks
 * again), every decision still the server's; its memory is the table made
 * at open, whatever the flood. */
static void flood_body(int port) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "clock=client&prefix=flood:&deny_cache=8"), NULL);
    sluice_policy *p = policy("flood", "fixed-window limit=1 window=1h");
    REQUIRE(s && p);
    enum { N_FLOOD = 2000 };
    sluice_decision d;
    char key[24];
    for (int i = 0; i < N_FLOOD; i++) {
        int n = snprintf(key, sizeof key, "flood-%d", i);
        CHECK_EQ(sluice_store_acquire_at(s, p, key, (size_t)n, 1, 10, &d), 0);
        CHECK(d.allowed);
        CHECK_EQ(sluice_store_acquire_at(s, p, key, (size_t)n, 1, 10, &d), 0); /* denied: cached */
        CHECK(!d.allowed);
    }
    long long before = rs_calls(port, "evalsha");
    int64_t cached = stats(s).cached_denials;
    for (int i = 0; i < N_FLOOD; i++) {
        int n = snprintf(key, sizeof key, "flood-%d", i);
        CHECK_EQ(sluice_store_acquire_at(s, p, key, (size_t)n, 1, 20, &d), 0);
        CHECK(!d.allowed && d.retry_after_ms == 3600000 - 20);
    }
    int64_t answered = stats(s).cached_denials - cached;
    long long trips = rs_calls(port, "evalsha") - before;
    if (answered > 8) fprintf(stderr, "flood: %lld denials answered by a cache of 8\n", (long long)answered);
    CHECK(answered >= 1 && answered <= 8);
    CHECK_EQ(trips + answered, N_FLOOD);
    sluice_policy_free(p);
    sluice_store_close(s);
}

TEST(a_flood_of_denied_keys_keeps_the_cache_bounded) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) flood_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

TEST(bad_deny_cache_values_are_refused_at_open) {
    const char *bad[] = {"deny_cache=-1", "deny_cache=", "deny_cache=abc", "deny_cache=1000001", "deny_cache=1e3",
                         "deny_cache=12x", "deny_cache=99999999999999999999"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        char url[128], err[256] = "";
        snprintf(url, sizeof url, "redis://127.0.0.1:1?%s", bad[i]);
        sluice_store *s = NULL;
        CHECK_EQ(sluice_store_open_err(url, NULL, &s, err, sizeof err), SLUICE_EINVAL);
        CHECK(s == NULL);
        CHECK(strstr(err, "deny_cache") != NULL);
    }
    const char *good[] = {"deny_cache=0", "deny_cache=1", "deny_cache=1000000"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) {
        char url[128];
        snprintf(url, sizeof url, "redis://127.0.0.1:1?%s", good[i]);
        sluice_store *s = open_store(url, NULL); /* verify=0: no server needed */
        CHECK(s != NULL);
        sluice_store_close(s);
    }
}

/* ---- the server's clock ---- */

/* With clock=server a cached denial ends no later than the server's: each
 * one's retry is at most what a peek just before it says, and sleeping it
 * leads to an admission within a few ms. */
static void server_clock_body(int port) {
    char url[256];
    sluice_store *s = open_store(url_of(url, sizeof url, port, "prefix=sc:"), NULL);
    sluice_store *ref = open_store(url_of(url, sizeof url, port, "prefix=sc:&deny_cache=0"), NULL);
    sluice_policy *p = policy("sc", "token-bucket capacity=1 rate=1/150ms");
    REQUIRE(s && ref && p);
    long cached_before = 0, admitted = 0;
    for (int round = 0; round < 3; round++) {
        sluice_decision d, peek;
        int64_t start = rs_now_ms();
        do CHECK_EQ(sluice_store_acquire(s, p, "k", 1, 1, &d), 0);
        while (!d.allowed && rs_now_ms() - start < 1000 && (rs_sleep_ms(1), 1));
        CHECK(d.allowed);
        for (int i = 0; i < 40; i++) {
            CHECK_EQ(sluice_store_peek(ref, p, "k", 1, 1, &peek), 0);
            CHECK_EQ(sluice_store_acquire(s, p, "k", 1, 1, &d), 0);
            if (d.allowed) break;
            if (!peek.allowed) CHECK(d.retry_after_ms <= peek.retry_after_ms);
            CHECK(d.retry_after_ms > 0);
            rs_sleep_ms(2);
        }
        CHECK_EQ(sluice_store_acquire(s, p, "k", 1, 1, &d), 0);
        if (!d.allowed) {
            CHECK(d.retry_after_ms > 0);
            int64_t cached0 = stats(s).cached_denials;
            rs_sleep_ms(d.retry_after_ms);
            int64_t after = rs_now_ms();
            /* the cached denial is over: admitted, or the server's own answer */
            CHECK_EQ(sluice_store_acquire(s, p, "k", 1, 1, &d), 0);
            CHECK(d.allowed || stats(s).cached_denials == cached0);
            while (!d.allowed && rs_now_ms() - after < 1000) {
                rs_sleep_ms(1);
                CHECK_EQ(sluice_store_acquire(s, p, "k", 1, 1, &d), 0);
            }
            CHECK(d.allowed);
            CHECK(rs_now_ms() - after < 200); /* the waits were short by a round trip at most (a loaded machine's) */
            admitted += d.allowed;
        }
    }
    cached_before = (long)stats(s).cached_denials;
    CHECK(cached_before > 0);
    CHECK(admitted > 0);
    sluice_policy_free(p);
    sluice_store_close(s);
    sluice_store_close(ref);
}

TEST(server_clock_denials_end_no_later_than_the_servers) {
    rs_group g;
    int a = -1;
    if (rs_group_open(&g) == 0) a = rs_group_add(&g, 0);
    if (a >= 0) server_clock_body(g.s[a].port);
    CHECK(a >= 0);
    rs_group_close(&g);
}

TEST_MAIN(bad_deny_cache_values_are_refused_at_open, a_lone_client_decides_as_without_the_cache,
          cached_denials_count_down_exactly, refund_and_reset_clear_the_entry_another_hosts_refund_waits_for_the_retry,
          a_name_with_two_configurations_is_not_cached, deny_cache_0_makes_every_denial_a_round_trip,
          server_clock_denials_end_no_later_than_the_servers, a_flood_of_denied_keys_keeps_the_cache_bounded)
