/* test_deny_cache.c: a remote store's cache of denials (src/store/deny.c)
 * against the server it stands in for: a pure policy over its states (the
 * algorithms the Redis script mirrors), one client alone.
 *
 *  exact      on random traces of every algorithm, composites and shadow
 *             parts, every request the cache answers is answered field for
 *             field as the server answers it at that reading (the server
 *             is asked too: a denial changes nothing); the cache answers
 *             most repeated denials; a refund drops the key's entry.
 *  narrow     another cost, a reading before the denial, a key longer than
 *             the cache keeps, a denial with cost 1 free: the server's.
 *  bounded    a flood of denied keys replaces entries: memory is the
 *             table's, and answers stay exact.
 *  threads    threads putting, getting and dropping at once (TSan). */
#include "check.h"
#include "internal.h"
#include "store_util.h"

#include <pthread.h>

static const char *const specs[] = {STORE_TEST_SPECS STORE_TEST_SHADOW_SPECS};
#define N_SPECS (sizeof specs / sizeof specs[0])
#define N_KEYS 6

typedef struct {
    sluice_policy *p;
    sluice__state st[N_KEYS][SLUICE_POLICY_MAX_PARTS];
} server;

static void server_init(server *sv, sluice_policy *p) {
    sv->p = p;
    for (int k = 0; k < N_KEYS; k++)
        for (size_t i = 0; i < p->n_parts; i++) p->algo[i]->init(&p->params[i], &sv->st[k][i]);
}

static void server_free(server *sv) {
    for (int k = 0; k < N_KEYS; k++)
        for (size_t i = 0; i < sv->p->n_parts; i++)
            if (sv->p->algo[i]->release) sv->p->algo[i]->release(&sv->st[k][i]);
}

/* One trace through the server and the cache; returns the requests the
 * cache answered, or -1 on a difference (printed). */
static long trace(uint64_t seed, size_t spec, long steps, size_t entries) {
    sluice_policy *p = policy("p", specs[spec]);
    server sv;
    server_init(&sv, p);
    sluice__deny_cache *c = NULL;
    if (sluice__deny_new(entries, &c) != 0 || !c) return -1;
    uint64_t rs = seed;
    int64_t now = check_range_(&rs, -100000, 100000);
    long answered = 0, failures = 0;
    for (long i = 0; i < steps && failures == 0; i++) {
        now += check_range_(&rs, 0, 9) < 6 ? 0 : check_range_(&rs, 0, 9) < 8 ? check_range_(&rs, 1, 5)
                                                                             : check_range_(&rs, 1, 200);
        int k = (int)check_range_(&rs, 0, N_KEYS - 1);
        char key[4] = {'k', (char)('0' + k)};
        int64_t cost = check_range_(&rs, 0, 9) < 7 ? 1 : check_range_(&rs, 1, p->max_cost < 4 ? p->max_cost : 4);
        if (check_range_(&rs, 0, 29) == 0) { /* a refund through this store */
            sluice__policy_refund(p, sv.st[k], now, cost);
            sluice__deny_drop(c, 7, key, 2);
            continue;
        }
        sluice_decision cached, want;
        int hit = sluice__deny_get(c, p, 7, key, 2, cost, now, &cached);
        if (sluice__policy_decide_grow(p, sv.st[k], now, cost, &want) != 0) return -1;
        if (hit) {
            answered++;
            if (want.allowed || !same(&cached, &want)) {
                fprintf(stderr, "seed %llu step %ld: %s key %d cost %lld at %lld\n", (unsigned long long)seed, i,
                        specs[spec], k, (long long)cost, (long long)now);
                print_decision("cache", &cached);
                print_decision("server", &want);
                failures++;
            }
        } else if (!want.allowed) {
            sluice__deny_part parts[SLUICE_POLICY_MAX_PARTS];
            sluice__deny_parts_of(p, sv.st[k], now, cost, parts);
            sluice__deny_put(c, p, 7, key, 2, now, cost, parts);
        }
    }
    CHECK_EQ(sluice__deny_answered(c), answered);
    sluice__deny_free(c);
    server_free(&sv);
    sluice_policy_free(p);
    return failures ? -1 : answered;
}

TEST(cached_denials_are_the_servers) {
    long steps = (long)(20000 * test_scale_sanitized(0.2)), total = 0;
    for (size_t spec = 0; spec < N_SPECS; spec++)
        for (uint64_t seed = 1; seed <= 3; seed++) {
            long a = trace(seed * 100 + spec, spec, steps, 64);
            CHECK(a >= 0);
            total += a;
        }
    printf("     %ld requests answered by the cache\n", total);
    CHECK(total > (long)N_SPECS * steps / 10); /* it really answers */
}

TEST(only_what_it_can_tell) {
    sluice_policy *p = policy("p", "token-bucket capacity=2 rate=1/s");
    sluice_policy *w = policy("w", "fixed-window limit=5 window=1s");
    sluice__deny_cache *c;
    REQUIRE(p && w && sluice__deny_new(16, &c) == 0);
    sluice__deny_part parts[1] = {{500, 1500, 2000}}; /* cost 1 free in 500 ms, cost 2 in 1500 */
    sluice__deny_put(c, p, 1, "k", 1, 1000, 2, parts);
    sluice_decision d;
    CHECK(!sluice__deny_get(c, p, 1, "k", 1, 1, 1000, &d)); /* another cost */
    CHECK(!sluice__deny_get(c, p, 1, "k", 1, 2, 999, &d));  /* before it */
    CHECK(!sluice__deny_get(c, p, 2, "k", 1, 2, 1000, &d)); /* another policy */
    CHECK(sluice__deny_get(c, p, 1, "k", 1, 2, 1200, &d));
    CHECK(!d.allowed && d.remaining == 0 && d.retry_after_ms == 1300 && d.reset_ms == 1800 && d.part_reset_ms == 1800 &&
          d.limit == 2 && d.enforced && !d.local);
    CHECK(!sluice__deny_get(c, p, 1, "k", 1, 2, 1500, &d)); /* cost 1 free: remaining unknown */
    CHECK(!sluice__deny_get(c, p, 1, "k", 1, 2, 1200, &d)); /* and the entry is gone */
    sluice__deny_part free1[1] = {{0, 300, 400}}; /* a denial of cost 5 with cost 1 free: nothing to tell */
    sluice__deny_put(c, w, 1, "k", 1, 1000, 5, free1);
    CHECK(!sluice__deny_get(c, w, 1, "k", 1, 5, 1000, &d));
    char big[SLUICE__DENY_KEY_MAX + 1];
    memset(big, 'x', sizeof big);
    sluice__deny_put(c, p, 1, big, sizeof big, 1000, 2, parts);
    CHECK(!sluice__deny_get(c, p, 1, big, sizeof big, 2, 1000, &d));
    sluice__deny_put(c, p, 1, big, SLUICE__DENY_KEY_MAX, 1000, 2, parts);
    CHECK(sluice__deny_get(c, p, 1, big, SLUICE__DENY_KEY_MAX, 2, 1000, &d));
    sluice__deny_drop(c, 1, big, SLUICE__DENY_KEY_MAX);
    CHECK(!sluice__deny_get(c, p, 1, big, SLUICE__DENY_KEY_MAX, 2, 1000, &d));
    sluice__deny_cache *none = NULL;
    CHECK(sluice__deny_new(0, &none) == 0 && none == NULL); /* deny_cache=0: none */
    CHECK(!sluice__deny_get(none, p, 1, "k", 1, 2, 1000, &d));
    sluice__deny_free(c);
    sluice_policy_free(p);
    sluice_policy_free(w);
}

/* A flood of denied keys through a cache of 64 entries: entries replace
 * one another, memory is the table's, and what it answers stays exact. */
TEST(a_flood_of_keys_is_bounded) {
    sluice_policy *p = policy("p", "sliding-window limit=1 window=1h");
    sluice__deny_cache *c;
    REQUIRE(p && sluice__deny_new(64, &c) == 0);
    sluice__deny_part parts[1] = {{3600000, 3600000, 7200000}};
    long hits = 0;
    for (int i = 0; i < 200000; i++) {
        char key[16];
        int n = snprintf(key, sizeof key, "flood-%d", i);
        sluice__deny_put(c, p, 1, key, (size_t)n, 1000, 1, parts);
        sluice_decision d;
        n = snprintf(key, sizeof key, "flood-%d", i / 2);
        if (sluice__deny_get(c, p, 1, key, (size_t)n, 1, 1000 + i % 1000, &d)) {
            hits++;
            CHECK(d.retry_after_ms == 3600000 - i % 1000 && d.reset_ms == 7200000 - i % 1000);
        }
    }
    CHECK(hits > 0);
    printf("     %ld of 200000 looked-up keys still held\n", hits);
    sluice__deny_free(c);
    sluice_policy_free(p);
}

static sluice__deny_cache *shared_cache;
static sluice_policy *shared_policy;

static void *hammer(void *arg) {
    uint64_t rs = (uint64_t)(uintptr_t)arg;
    sluice__deny_part parts[1] = {{1000, 1000, 2000}};
    for (int i = 0; i < 100000; i++) {
        char key[8];
        int n = snprintf(key, sizeof key, "t%d", (int)check_range_(&rs, 0, 99));
        sluice_decision d;
        switch (check_range_(&rs, 0, 2)) {
        case 0: sluice__deny_put(shared_cache, shared_policy, 1, key, (size_t)n, 0, 1, parts); break;
        case 1:
            if (sluice__deny_get(shared_cache, shared_policy, 1, key, (size_t)n, 1, 500, &d) && d.retry_after_ms != 500)
                abort();
            break;
        default: sluice__deny_drop(shared_cache, 1, key, (size_t)n);
        }
    }
    return NULL;
}

TEST(threads_put_get_and_drop_at_once) {
    shared_policy = policy("p", "fixed-window limit=1 window=1s");
    REQUIRE(shared_policy && sluice__deny_new(256, &shared_cache) == 0);
    pthread_t t[4];
    for (uintptr_t i = 0; i < 4; i++) pthread_create(&t[i], NULL, hammer, (void *)(i + 1));
    for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
    CHECK(sluice__deny_answered(shared_cache) > 0);
    sluice__deny_free(shared_cache);
    sluice_policy_free(shared_policy);
}

TEST_MAIN(cached_denials_are_the_servers, only_what_it_can_tell, a_flood_of_keys_is_bounded,
          threads_put_get_and_drop_at_once)
