/* test_store_memory.c: the in-process store. Per-key decisions equal one
 * independent limiter per key on long random multi-key traces, also while a
 * tiny table forgets fresh keys all the time (and, under forced eviction,
 * every difference is explained by a counted eviction); which key an
 * eviction picks (CLOCK spares a key in use) and that a new key fresh
 * soonest is forgotten before any other is evicted; batches equal one
 * call each; keys alike in their first 8 bytes stay apart; races on first
 * use; bounded memory under ten million distinct keys; bad input. */
#include "check.h"
#include "store_util.h"
#include "trace.h"
#include "internal.h"

#include <pthread.h>
#include <sched.h>
#include <sys/wait.h>
#include <unistd.h>

static double scale(void) {
    return test_scale_sanitized(0.1);
}

/* ---- the seed's per-key scenario ---- */

TEST(per_key_state_is_independent) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_store *s = open_store("memory:", c);
    sluice_policy *p = policy("api", "token-bucket capacity=2 rate=1/s");
    REQUIRE(s && p);
    const char *keys[] = {"alice", "alice", "alice", "bob"};
    const int allowed[] = {1, 1, 0, 1}, remaining[] = {1, 0, 0, 1}, retry[] = {0, 0, 1000, 0};
    for (int i = 0; i < 4; i++) {
        sluice_decision d;
        CHECK_EQ(sluice_store_acquire(s, p, keys[i], strlen(keys[i]), 1, &d), 0);
        CHECK_EQ(d.allowed, allowed[i]);
        CHECK_EQ(d.remaining, remaining[i]);
        CHECK_EQ(d.retry_after_ms, retry[i]);
    }
    sluice_stats st = stats(s);
    CHECK_EQ(st.keys, 2);
    CHECK_EQ(st.capacity, SLUICE_MAX_KEYS_DEFAULT);
    CHECK_EQ(st.allowed, 3);
    CHECK_EQ(st.denied, 1);
    CHECK_STR(sluice_store_kind(s), "memory");
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_clock_free(c);
}

/* Keys are bytes: NUL inside, prefixes, 1 and SLUICE_KEY_MAX bytes. */
TEST(keys_are_binary_safe) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_store *s = open_store("memory:", c);
    sluice_policy *p = policy("k", "fixed-window limit=1 window=1h");
    REQUIRE(s && p);
    char big[SLUICE_KEY_MAX + 1];
    memset(big, 'x', sizeof big);
    const struct {
        const char *k;
        size_t n;
    } keys[] = {{"a\0b", 3}, {"a\0c", 3}, {"a", 1}, {"a\0", 2}, {"", 1}, {"\0\0", 2},
                {big, SLUICE_KEY_MAX}, {big, SLUICE_KEY_MAX - 1}, {big, 17}, {big, 16}};
    sluice_decision d;
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        CHECK_EQ(sluice_store_acquire(s, p, keys[i].k, keys[i].n, 1, &d), 0);
        CHECK(d.allowed); /* a distinct key each time */
    }
    for (size_t i = 0; i < sizeof keys / sizeof keys[0]; i++) {
        CHECK_EQ(sluice_store_acquire(s, p, keys[i].k, keys[i].n, 1, &d), 0);
        CHECK(!d.allowed); /* and the same key again */
    }
    CHECK_EQ(stats(s).keys, (int64_t)(sizeof keys / sizeof keys[0]));
    /* bad keys: an error, naming the problem, and nothing changes */
    CHECK_EQ(sluice_store_acquire(s, p, "", 0, 1, &d), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(s), "key") != NULL);
    CHECK_EQ(sluice_store_acquire(s, p, big, SLUICE_KEY_MAX + 1, 1, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_acquire(s, p, NULL, 3, 1, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_acquire(s, NULL, "a", 1, 1, &d), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(s), "policy") != NULL);
    CHECK_EQ(sluice_store_acquire(s, p, "new", 3, 0, &d), SLUICE_ECOST);
    CHECK_EQ(sluice_store_acquire(s, p, "new", 3, 2, &d), SLUICE_ECOST);
    CHECK_EQ(sluice_store_acquire_at(s, p, "new", 3, 1, SLUICE_TIME_MAX_MS + 1, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_acquire(NULL, p, "a", 1, 1, &d), SLUICE_EINVAL);
    /* the message is the thread's last failure's, and only on its store */
    sluice_store *other;
    CHECK_EQ(sluice_store_open("memory:", NULL, &other), 0);
    CHECK_EQ(sluice_store_acquire(s, p, "", 0, 1, &d), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(s), "key") != NULL);
    CHECK_EQ(strcmp(sluice_store_errmsg(other), ""), 0);
    CHECK_EQ(sluice_store_acquire(other, NULL, "a", 1, 1, &d), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(other), "policy") != NULL);
    CHECK_EQ(strcmp(sluice_store_errmsg(s), ""), 0);
    /* the other calls' bad arguments say what is wrong, too */
    CHECK_EQ(sluice_store_acquire_wait(other, p, "a", 1, 1, -1, &d), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(other), "timeout_ms") != NULL);
    CHECK_EQ(sluice_store_acquire_wait(other, p, "a", 1, 1, 0, NULL), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(other), "out") != NULL);
    sluice_request rq = {p, "a", 1, 1};
    CHECK_EQ(sluice_store_acquire_many(other, &rq, 1, &d, NULL), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(other), "results") != NULL);
    char err[128] = "x";
    CHECK_EQ(sluice_store_open_err("memory:", NULL, NULL, err, sizeof err), SLUICE_EINVAL);
    CHECK(strstr(err, "out") != NULL);
    sluice_store_close(other);
    sluice_stats st = stats(s);
    CHECK_EQ(st.keys, (int64_t)(sizeof keys / sizeof keys[0]));
    CHECK_EQ(st.allowed + st.denied, 2 * (int64_t)(sizeof keys / sizeof keys[0]));
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_clock_free(c);
}

TEST(bad_urls_and_options) {
    const char *bad[] = {"memory", "", "nosuch:", "memory:/tmp/x", "memory:?max_keys=abc",
                         "memory:?max_keys=0", "memory:?max_keys=1000000001", "memory:?max_keys=",
                         "memory:?on_full=maybe", "memory:?foo=1", "memory:?max_keys=5&max_keys=6",
                         "memory:?novalue", "memory:?max_keys=-1", "memory:?max_keys=99999999999999999999",
                         /* the Redis store's own parameters mean nothing here */
                         "memory:?on_error=deny", "memory:?timeout_ms=5", "memory:?connect_timeout_ms=5"};
    const char *names[] = {"scheme", "scheme", "nosuch", "path", "max_keys", "max_keys", "max_keys",
                           "max_keys", "on_full", "foo", "twice", "novalue", "max_keys", "max_keys",
                           "on_error", "timeout_ms", "connect_timeout_ms"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        sluice_store *s = (sluice_store *)1;
        char err[256] = "";
        CHECK_EQ(sluice_store_open_err(bad[i], NULL, &s, err, sizeof err), SLUICE_EINVAL);
        CHECK(s == NULL);
        if (!strstr(err, names[i])) fprintf(stderr, "url %s: message \"%s\" lacks %s\n", bad[i], err, names[i]);
        CHECK(strstr(err, names[i]) != NULL);
    }
    sluice_store *s = NULL;
    CHECK_EQ(sluice_store_open(NULL, NULL, &s), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_open("memory:", NULL, NULL), SLUICE_EINVAL);
    sluice_store_options o = SLUICE_STORE_OPTIONS_INIT;
    o.size = 0;
    CHECK_EQ(sluice_store_open("memory:", &o, &s), SLUICE_EINVAL);
    o = (sluice_store_options)SLUICE_STORE_OPTIONS_INIT;
    o.max_keys = -5;
    CHECK_EQ(sluice_store_open("memory:", &o, &s), SLUICE_EINVAL);
    o.max_keys = 0;
    o.on_full = (sluice_on_full)7;
    CHECK_EQ(sluice_store_open("memory:", &o, &s), SLUICE_EINVAL);
    /* the URL overrides the struct */
    o.on_full = SLUICE_ON_FULL_EVICT;
    o.max_keys = 50;
    CHECK_EQ(sluice_store_open("memory:?max_keys=7&on_full=refuse", &o, &s), 0);
    CHECK_EQ(stats(s).capacity, 7);
    sluice_store_close(s);
    /* an options struct from an older caller (only size and max_keys) */
    struct {
        size_t size;
        int64_t max_keys;
    } old = {sizeof old, 9};
    CHECK_EQ(sluice_store_open("memory:", (const sluice_store_options *)&old, &s), 0);
    CHECK_EQ(stats(s).capacity, 9);
    sluice_store_close(s);
    sluice_store_close(NULL);
}

/* ---- bounded memory: forget, evict, refuse ---- */

TEST(full_store_refuses_new_keys_changing_nothing) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_store *s = open_store("memory:?max_keys=3&on_full=refuse", c);
    sluice_policy *p = policy("r", "fixed-window limit=2 window=1h");
    REQUIRE(s && p);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire(s, p, "a", 1, 1, &d), 0);
    CHECK_EQ(sluice_store_acquire(s, p, "b", 1, 1, &d), 0);
    CHECK_EQ(sluice_store_acquire(s, p, "c", 1, 1, &d), 0);
    CHECK_EQ(sluice_store_acquire(s, p, "d", 1, 1, &d), SLUICE_EFULL);
    CHECK(strstr(sluice_store_errmsg(s), "full") != NULL);
    sluice_stats st = stats(s);
    CHECK_EQ(st.keys, 3);
    CHECK_EQ(st.refused, 1);
    CHECK_EQ(st.evicted, 0);
    /* held keys are still decided, with their state intact */
    CHECK_EQ(sluice_store_acquire(s, p, "a", 1, 1, &d), 0);
    CHECK(d.allowed && d.remaining == 0);
    /* once a window passes, the keys are fresh: forgotten, and d gets in */
    sluice_clock_manual_advance(c, 3600 * 1000);
    CHECK_EQ(sluice_store_acquire(s, p, "d", 1, 1, &d), 0);
    CHECK(d.allowed);
    st = stats(s);
    CHECK(st.forgotten >= 1);
    CHECK_EQ(st.evicted, 0);
    CHECK(st.keys <= 3);
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_clock_free(c);
}

/* Which of keys[0..n) s no longer holds: its index, or -1 (or -2: more
 * than one). */
static int gone_of(sluice_store *s, const sluice_policy *p, const char *const *keys, int n) {
    int gone = -1;
    for (int i = 0; i < n; i++)
        if (!sluice__memory_store_holds(s, p, keys[i], strlen(keys[i]))) gone = gone == -1 ? i : -2;
    return gone;
}

/* CLOCK, second chance: a full store evicts a key not decided since the
 * hand last passed it (a key's first decision, which adds it, does not
 * count). The hand goes round the slots in their order (the keys'
 * hashes'), so which key that is depends on where keys lie; what is fixed
 * is that a key decided again since is spared. */
TEST(full_store_evicts_least_recently_used) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_store *s = open_store("memory:?max_keys=4", c);
    sluice_policy *p = policy("e", "sliding-log limit=5 window=1h");
    REQUIRE(s && p);
    sluice__memory_store_seed(s, 7);
    sluice_decision d;
    const char *k[] = {"k0", "k1", "k2", "k3", "k4"};
    for (int i = 0; i < 4; i++) CHECK_EQ(sluice_store_acquire(s, p, k[i], 2, 1, &d), 0);
    /* a new key: the hand clears every mark once, then evicts one */
    CHECK_EQ(sluice_store_acquire(s, p, "k4", 2, 1, &d), 0);
    sluice_stats st = stats(s);
    CHECK_EQ(st.evicted, 1);
    CHECK_EQ(st.keys, 4);
    int v = gone_of(s, p, k, 5);
    REQUIRE(v >= 0 && v < 4);
    int u = (v + 1) % 4; /* a survivor, used again */
    CHECK_EQ(sluice_store_acquire(s, p, k[u], 2, 1, &d), 0);
    CHECK_EQ(d.remaining, 3);
    CHECK_EQ(sluice_store_acquire(s, p, k[v], 2, 1, &d), 0);
    CHECK_EQ(d.remaining, 4); /* fresh again: it was evicted */
    CHECK_EQ(stats(s).evicted, 2);
    /* the one evicted for it was not the key used again (a key's first
     * decision does not mark it: k4 may go) */
    int w = gone_of(s, p, k, 5);
    CHECK(w >= 0 && w != u && w != v);
    CHECK_EQ(sluice_store_acquire(s, p, k[u], 2, 1, &d), 0);
    CHECK_EQ(d.remaining, 2); /* held throughout */
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_clock_free(c);
}

/* CLOCK's second chance comes from decisions: a key decided between every
 * two evictions is never the one evicted, however often the hand passes
 * it, while keys nobody decides again go. */
TEST(eviction_spares_the_key_in_use) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_store *s = open_store("memory:?max_keys=4", c);
    sluice_policy *p = policy("e", "fixed-window limit=1 window=1h");
    REQUIRE(s && p);
    sluice__memory_store_seed(s, 7);
    sluice_decision d;
    const char *held[] = {"c0", "hot", "c1", "c2"};
    for (int i = 0; i < 4; i++) {
        CHECK_EQ(sluice_store_acquire(s, p, held[i], strlen(held[i]), 1, &d), 0);
        CHECK(d.allowed);
    }
    /* the first new key: the hand clears every mark, then evicts one,
     * maybe hot (it was not decided since the hand began); from then on hot
     * is decided between every two evictions */
    CHECK_EQ(sluice_store_acquire(s, p, "first", 5, 1, &d), 0);
    CHECK_EQ(sluice_store_acquire(s, p, "hot", 3, 1, &d), 0);
    int64_t evicted = stats(s).evicted;
    for (int i = 0; i < 12; i++) {
        char key[8];
        int n = snprintf(key, sizeof key, "n%d", i);
        CHECK_EQ(sluice_store_acquire(s, p, key, (size_t)n, 1, &d), 0);
        CHECK(d.allowed);
        sluice_stats st = stats(s);
        CHECK_EQ(st.evicted, evicted + i + 1);
        CHECK_EQ(st.forgotten, 0);
        CHECK_EQ(sluice_store_acquire(s, p, "hot", 3, 1, &d), 0);
        CHECK(!d.allowed); /* still held: its one request of the hour counted */
    }
    /* c0, c1 and c2 were evicted: each gets in again, as a fresh key */
    for (int i = 0; i < 3; i++) {
        const char *key = i == 0 ? "c0" : i == 1 ? "c1" : "c2";
        CHECK_EQ(sluice_store_acquire(s, p, key, 2, 1, &d), 0);
        CHECK(d.allowed);
        CHECK_EQ(sluice_store_acquire(s, p, "hot", 3, 1, &d), 0);
        CHECK(!d.allowed);
    }
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_clock_free(c);
}

/* A new key that becomes fresh before every key the last full scan saw
 * brings the next scan forward: when room is needed after it is fresh, it
 * is forgotten (losslessly), and no key that is not fresh is evicted (which
 * would let its owner in again). */
TEST(new_key_fresh_soonest_is_forgotten_not_an_older_key_evicted) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_store *s = open_store("memory:?max_keys=4", c);
    sluice_policy *hour = policy("hour", "fixed-window limit=1 window=1h");
    sluice_policy *brief = policy("brief", "fixed-window limit=5 window=10ms");
    REQUIRE(s && hour && brief);
    sluice__memory_store_seed(s, 7);
    sluice_decision d;
    const char *h[] = {"h0", "h1", "h2", "h3"};
    for (int i = 0; i < 4; i++) CHECK_EQ(sluice_store_acquire(s, hour, h[i], 2, 1, &d), 0);
    /* full of keys fresh in an hour: the scan finds none fresh, one goes */
    CHECK_EQ(sluice_store_acquire(s, brief, "b", 1, 1, &d), 0);
    CHECK(d.allowed && d.reset_ms == 10);
    sluice_stats st = stats(s);
    CHECK_EQ(st.evicted, 1);
    CHECK_EQ(st.forgotten, 0);
    int v = gone_of(s, hour, h, 4);
    REQUIRE(v >= 0);
    /* b is fresh from 10 ms on: room for x comes from forgetting it */
    sluice_clock_manual_set(c, 20);
    CHECK_EQ(sluice_store_acquire(s, hour, "x", 1, 1, &d), 0);
    CHECK(d.allowed);
    st = stats(s);
    CHECK_EQ(st.forgotten, 1);
    CHECK_EQ(st.evicted, 1);
    CHECK_EQ(st.keys, 4);
    /* the other three are held still: each has had its one request of the hour */
    for (int i = 0; i < 4; i++) {
        if (i == v) continue;
        CHECK_EQ(sluice_store_acquire(s, hour, h[i], 2, 1, &d), 0);
        CHECK(!d.allowed);
    }
    CHECK_EQ(stats(s).evicted, 1);
    sluice_store_close(s);
    sluice_policy_free(hour);
    sluice_policy_free(brief);
    sluice_clock_free(c);
}

/* A configuration changed under the same name keeps each key's usage
 * (docs/semantics.md, "Retune"): what was in use is charged to a new
 * algorithm; a bucket's backlog carries over a change of capacity exactly;
 * another name is another limit. */
TEST(changed_configuration_keeps_usage) {
    sluice_clock *c = sluice_clock_manual_new(0);
    sluice_store *s = open_store("memory:", c);
    sluice_policy *a = policy("tier", "token-bucket capacity=2 rate=1/h");
    sluice_policy *a_again = policy("tier", "token-bucket capacity=2 rate=1/h");
    sluice_policy *b = policy("tier", "sliding-window limit=5 window=1h");
    sluice_policy *wider = policy("tier", "token-bucket capacity=4 rate=1/h");
    sluice_policy *widest = policy("tier", "token-bucket capacity=6 rate=1/h");
    sluice_policy *other = policy("other", "token-bucket capacity=2 rate=1/h");
    REQUIRE(s && a && a_again && b && wider && widest && other);
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire(s, a, "u", 1, 2, &d), 0);
    CHECK(d.allowed && d.remaining == 0);
    CHECK_EQ(sluice_store_acquire(s, a_again, "u", 1, 1, &d), 0); /* same name and text: same */
    CHECK(!d.allowed);
    CHECK_EQ(sluice_store_acquire(s, b, "u", 1, 1, &d), 0); /* another algorithm: the 2 in use charged */
    CHECK(d.allowed && d.remaining == 2 && d.limit == 5);
    CHECK_EQ(sluice_store_acquire(s, wider, "u", 1, 1, &d), 0); /* back to a bucket: 3 in use */
    CHECK(d.allowed && d.remaining == 0 && d.limit == 4);
    CHECK_EQ(sluice_store_acquire(s, widest, "u", 1, 1, &d), 0); /* capacity alone: the backlog of 4 carried */
    CHECK(d.allowed && d.remaining == 1 && d.limit == 6 && d.reset_ms == 5 * 3600000);
    CHECK_EQ(sluice_store_acquire(s, other, "u", 1, 1, &d), 0); /* other name: its own */
    CHECK(d.allowed && d.remaining == 1);
    CHECK_EQ(stats(s).keys, 2);
    sluice_store_close(s);
    sluice_policy_free(a);
    sluice_policy_free(a_again);
    sluice_policy_free(b);
    sluice_policy_free(wider);
    sluice_policy_free(widest);
    sluice_policy_free(other);
    sluice_clock_free(c);
}

/* ---- differential: the store against one limiter per key ---- */

static const char *const specs[] = {
    STORE_TEST_SPECS STORE_TEST_SHADOW_SPECS
};
#define N_SPECS (sizeof specs / sizeof specs[0])
#define N_KEYS 24

typedef struct {
    sluice_limiter *l[N_SPECS][N_KEYS];
    int64_t last_use_evictions[N_SPECS][N_KEYS]; /* evictions count at the key's last decision */
} refs;

static sluice_clock *ref_clock; /* the references' (a reset reads it) */

static void refs_reset(refs *r, size_t spec, size_t key, const sluice_policy *p) {
    sluice_limiter_free(r->l[spec][key]);
    r->l[spec][key] = NULL;
    sluice_limiter_new_policy(p, ref_clock, &r->l[spec][key]);
}

/* Whether a reference limiter is in its fresh state at now_ms. */
static int ref_fresh(sluice_limiter *l, int64_t now_ms) {
    const sluice_policy *p = sluice_limiter_policy(l);
    for (size_t i = 0; i < sluice_policy_n_parts(p); i++) {
        sluice_decision d;
        sluice__limiter_peek_part(l, i, now_ms, &d);
        if (d.reset_ms != 0) return 0;
    }
    return 1;
}

/* Runs one trace. max_keys tiny so that fresh keys are forgotten all the
 * time; evict: whether forced evictions may happen (then each difference
 * must be explained by one). Returns the number of explained differences. */
static long run_trace(uint64_t seed, const char *url, int evict, long steps, int collide) {
    sluice_policy *pol[N_SPECS];
    for (size_t i = 0; i < N_SPECS; i++) pol[i] = policy_i(i, specs[i]);
    sluice_clock *clock = sluice_clock_manual_new(0); /* the store's: a reset reads it */
    ref_clock = sluice_clock_manual_new(0);
    sluice_store *s = open_store(url, clock);
    if (!s) return -1;
    if (collide) sluice__memory_store_collide(s);
    static refs r;
    memset(&r, 0, sizeof r);
    for (size_t i = 0; i < N_SPECS; i++)
        for (size_t k = 0; k < N_KEYS; k++) refs_reset(&r, i, k, pol[i]);
    uint64_t rs = seed;
    int64_t now = check_range_(&rs, -1000000, 1000000), high = now;
    long explained = 0, failures = 0;
    for (long step = 0; step < steps && failures == 0; step++) {
        trace_step st;
        trace_draw(&rs, &now, SLUICE_TIME_MAX_MS / 2, pol, N_SPECS, N_KEYS, &st);
        trace_verb(&rs, &st);
        sluice_clock_manual_set(clock, now);
        /* the store's time: the highest reading of a call that succeeded */
        int64_t eff = now > high ? now : high;
        size_t sp = st.spec, key = st.key;
        int64_t cost = st.cost;
        char kb[8];
        int kn = snprintf(kb, sizeof kb, "k%zu", key);
        /* a key the store no longer holds must have been fresh (forgotten,
         * losslessly) or evicted by force since its last use */
        if (!sluice__memory_store_holds(s, pol[sp], kb, (size_t)kn) && !ref_fresh(r.l[sp][key], eff)) {
            if (evict && stats(s).evicted > r.last_use_evictions[sp][key]) {
                explained++;
                refs_reset(&r, sp, key, pol[sp]);
            } else {
                fprintf(stderr, "seed %llu step %ld: %s key %s was dropped while not fresh\n",
                        (unsigned long long)seed, step, specs[sp], kb);
                failures++;
                continue;
            }
        }
        sluice_decision got, want;
        int rc = store_verb(s, pol[sp], kb, (size_t)kn, st.verb, cost, now, &got);
        int rc_ref = limiter_verb(r.l[sp][key], ref_clock, st.verb, cost, eff, &want);
        expect_lag(&want, eff - now); /* waits count from the reading */
        if (rc == 0 && got.allowed && st.verb == TRACE_ACQUIRE) high = eff; /* store time: the highest admitted at */
        if (rc != rc_ref) {
            fprintf(stderr, "seed %llu step %ld: %s: rc %d, reference %d\n", (unsigned long long)seed, step,
                    verb_name(st.verb), rc, rc_ref);
            failures++;
            continue;
        }
        if (rc == 0 && !same(&got, &want)) {
            fprintf(stderr, "seed %llu step %ld: %s %s key %s cost %lld at %lld (store time %lld)\n",
                    (unsigned long long)seed, step, verb_name(st.verb), specs[sp], kb, (long long)cost,
                    (long long)now, (long long)eff);
            print_decision("store", &got);
            print_decision("reference", &want);
            failures++;
        }
        r.last_use_evictions[sp][key] = stats(s).evicted;
    }
    sluice_stats st = stats(s);
    if (!evict) CHECK_EQ(st.evicted, 0);
    CHECK(explained <= st.evicted);
    CHECK_EQ(failures, 0);
    for (size_t i = 0; i < N_SPECS; i++) {
        for (size_t k = 0; k < N_KEYS; k++) sluice_limiter_free(r.l[i][k]);
        sluice_policy_free(pol[i]);
    }
    sluice_store_close(s);
    sluice_clock_free(clock);
    sluice_clock_free(ref_clock);
    return failures ? -1 : explained;
}

/* With room for every key, nothing is ever evicted and the store must equal
 * the references exactly; tiny windows make keys fresh (and forgotten, when
 * a new key needs room) constantly. */
TEST(differential_lossless_forgetting) {
    long steps = (long)(200000 * scale());
    for (uint64_t seed = 1; seed <= 4; seed++) {
        /* 15 policies x 24 keys = 360 pairs, but few are not fresh at once */
        CHECK(run_trace(seed, "memory:?max_keys=360", 0, steps, 0) >= 0);
    }
    CHECK(run_trace(99, "memory:?max_keys=100000", 0, steps, 0) >= 0);
}

/* A table far too small: keys that are not fresh get evicted; every
 * difference from the references is explained by a counted eviction. */
TEST(differential_forced_eviction) {
    long steps = (long)(100000 * scale());
    long explained = 0;
    for (uint64_t seed = 11; seed <= 13; seed++) {
        long e = run_trace(seed, "memory:?max_keys=6", 1, steps, 0);
        CHECK(e >= 0);
        explained += e;
    }
    CHECK(explained > 0); /* evictions really changed decisions */
}

/* Every key collides: only slower, still exact. */
TEST(differential_all_keys_collide) {
    CHECK(run_trace(7, "memory:?max_keys=360", 0, (long)(50000 * scale()), 1) >= 0);
    CHECK(run_trace(8, "memory:?max_keys=8", 1, (long)(50000 * scale()), 1) >= 0);
}

/* Refuse mode with a tiny table: EFULL only for new keys, nothing else
 * differs (held keys stay exact; a refused key stays unknown). */
TEST(refuse_is_exact_for_held_keys) {
    sluice_policy *p = policy("p", "token-bucket capacity=3 rate=1/50ms");
    sluice_store *s = open_store("memory:?max_keys=5&on_full=refuse", NULL);
    REQUIRE(p && s);
    sluice_limiter *ref[40] = {0};
    uint64_t rs = 5;
    int64_t now = 0;
    long refused = 0;
    for (int step = 0; step < 20000; step++) {
        now += check_range_(&rs, 0, 20);
        int key = (int)check_range_(&rs, 0, 39);
        char kb[8];
        int kn = snprintf(kb, sizeof kb, "r%d", key);
        sluice_decision got, want;
        int rc = sluice_store_acquire_at(s, p, kb, (size_t)kn, 1, now, &got);
        if (rc == SLUICE_EFULL) {
            refused++;
            /* refused keys were not held: a new reference starts fresh */
            sluice_limiter_free(ref[key]);
            ref[key] = NULL;
            continue;
        }
        CHECK_EQ(rc, 0);
        if (!ref[key]) sluice_limiter_new_policy(p, sluice_clock_monotonic(), &ref[key]);
        sluice_acquire_at(ref[key], 1, now, &want);
        CHECK(same(&got, &want));
    }
    sluice_stats st = stats(s);
    CHECK(refused > 0);
    CHECK_EQ(st.refused, refused);
    CHECK_EQ(st.evicted, 0);
    CHECK(st.forgotten > 0);
    for (int i = 0; i < 40; i++) sluice_limiter_free(ref[i]);
    sluice_store_close(s);
    sluice_policy_free(p);
}

/* ---- concurrency ---- */

enum { N_THREADS = 8 };

typedef struct {
    sluice_store *s;
    const sluice_policy *p;
    int attempts, n_keys;
    pthread_barrier_t *go;
    long admitted[64];
    int errors;
    uint64_t seed;
} racer;

static void *race(void *arg) {
    racer *r = arg;
    pthread_barrier_wait(r->go);
    for (int i = 0; i < r->attempts; i++) {
        int key = r->n_keys == 1 ? 0 : (int)check_range_(&r->seed, 0, r->n_keys - 1);
        char kb[16];
        int kn = snprintf(kb, sizeof kb, "key-%d", key);
        sluice_decision d;
        if (sluice_store_acquire_at(r->s, r->p, kb, (size_t)kn, 1, 5000, &d)) r->errors++;
        else if (d.allowed) r->admitted[key]++;
    }
    return NULL;
}

static void race_keys(const char *spec, int n_keys, long capacity, int attempts) {
    sluice_store *s = open_store("memory:", NULL);
    sluice_policy *p = policy("race", spec);
    REQUIRE(s && p);
    pthread_t t[N_THREADS];
    static racer r[N_THREADS];
    pthread_barrier_t go;
    pthread_barrier_init(&go, NULL, N_THREADS);
    for (int i = 0; i < N_THREADS; i++) {
        memset(&r[i], 0, sizeof r[i]);
        r[i].s = s;
        r[i].p = p;
        r[i].attempts = attempts;
        r[i].n_keys = n_keys;
        r[i].go = &go;
        r[i].seed = (uint64_t)i + 1;
        pthread_create(&t[i], NULL, race, &r[i]);
    }
    long per_key[64] = {0};
    for (int i = 0; i < N_THREADS; i++) {
        pthread_join(t[i], NULL);
        CHECK_EQ(r[i].errors, 0);
        for (int k = 0; k < n_keys; k++) per_key[k] += r[i].admitted[k];
    }
    for (int k = 0; k < n_keys; k++) {
        if (per_key[k] != capacity) fprintf(stderr, "%s key %d: %ld admitted of %ld\n", spec, k, per_key[k], capacity);
        CHECK_EQ(per_key[k], capacity);
    }
    CHECK_EQ(stats(s).keys, n_keys);
    pthread_barrier_destroy(&go);
    sluice_store_close(s);
    sluice_policy_free(p);
}

TEST(threads_race_first_request_on_one_key) {
    race_keys("token-bucket capacity=500 rate=1/h", 1, 500, 200);
    race_keys("sliding-log limit=300 window=1h; fixed-window limit=400 window=1d", 1, 300, 200);
}

TEST(threads_over_shared_keys_never_over_admit) {
    /* frozen time, each key tried far more than its capacity: exactly it */
    race_keys("token-bucket capacity=50 rate=1/h", 64, 50, 2000);
    race_keys("sliding-window limit=40 window=1h", 64, 40, 2000);
}

/* ---- memory stays bounded ---- */

static long rss_kib(void) {
    FILE *f = fopen("/proc/self/statm", "r");
    long pages = 0, resident = 0;
    if (!f) return -1;
    if (fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = -1;
    fclose(f);
    return resident * (sysconf(_SC_PAGESIZE) / 1024);
}

/* In a new process (this program again), so that memory freed by earlier
 * tests cannot hide what the store takes. */
static int churn(void) {
    const int64_t max_keys = 100000;
    long n = SANITIZED ? 1000000 : 10000000;
    long before = rss_kib();
    sluice_store *s = open_store("memory:?max_keys=100000", NULL);
    /* keys stay not-fresh a long time, so the table is full and evicting */
    sluice_policy *p = policy("m", "token-bucket capacity=5 rate=1/h");
    sluice_policy *q = policy("n", "sliding-window limit=9 window=1h; token-bucket capacity=3 rate=1/m");
    if (!s || !p || !q) return 1;
    char kb[40];
    long errors = 0;
    for (long i = 0; i < n; i++) {
        /* a mix of short and long (heap) keys and of inline and heap states */
        int kn = snprintf(kb, sizeof kb, i % 3 ? "%ld" : "client-key-number-%ld", i);
        sluice_decision d;
        if (sluice_store_acquire_at(s, i % 4 ? p : q, kb, (size_t)kn, 1, i / 1000, &d) || !d.allowed)
            errors++;
    }
    sluice_stats st = stats(s);
    long grown = rss_kib() - before;
    /* 64 bytes of table per key, plus heap keys (~48 B with malloc's header)
     * for a third of the keys and heap states (2 x 32 B + header) for a
     * quarter, plus allocator slack: 300 bytes per key of capacity */
    long bound_kib = (long)(max_keys * 300 / 1024) + 4096;
    fprintf(stderr, "%ld keys passed; %lld held; rss grew %ld KiB (bound %ld KiB)\n", n,
            (long long)st.keys, grown, bound_kib);
    int ok = errors == 0 && st.keys == max_keys && st.allowed == n &&
             st.evicted + st.forgotten == n - max_keys && (SANITIZED || grown < bound_kib);
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_policy_free(q);
    return ok ? 0 : 1;
}

TEST(ten_million_keys_bounded_memory) {
    if (getenv("SLUICE_CHURN_CHILD")) exit(churn());
    fflush(NULL);
    pid_t pid = fork();
    REQUIRE(pid >= 0);
    if (pid == 0) {
        setenv("SLUICE_CHURN_CHILD", "1", 1);
        execl("/proc/self/exe", "test_store_memory", "ten_million_keys_bounded_memory", (char *)NULL);
        _exit(127);
    }
    int status = 0;
    waitpid(pid, &status, 0);
    CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0);
}

/* Keys compared as two words: keys alike in their first 8 bytes stay
 * apart, with every key's hash alike so that the comparison decides. */
TEST(keys_alike_in_their_first_word_stay_apart) {
    sluice_store *s = open_store("memory:?max_keys=64", NULL);
    CHECK(s != NULL);
    if (!s) return;
    sluice__memory_store_collide(s);
    CHECK_EQ(prefix_keys_stay_apart(s), 0);
    sluice_store_close(s);
}

/* ---- batches ---- */

/* sluice_store_acquire_many equals one sluice_store_acquire_at each (see
 * store_util.h), here with a table so small that keys are forgotten and
 * evicted in the middle of batches: two stores of one hash seed, so that
 * their keys lie alike and the same keys are forgotten and evicted. */
TEST(acquire_many_equals_one_acquire_at_each) {
    sluice_clock *ca = sluice_clock_manual_new(1000), *cb = sluice_clock_manual_new(1000);
    sluice_store *a = open_store("memory:?max_keys=12", ca), *b = open_store("memory:?max_keys=12", cb);
    REQUIRE(a && b);
    sluice__memory_store_seed(a, 42);
    sluice__memory_store_seed(b, 42);
    CHECK_EQ(batches_equal_singles(a, ca, b, cb, (long)(3000 * scale()), 99), 0);
    sluice_stats st = stats(a);
    CHECK(st.forgotten > 0 && st.evicted > 0); /* the table churned */
    sluice_store_close(a);
    sluice_store_close(b);
    sluice_clock_free(ca);
    sluice_clock_free(cb);
}

/* Counts stay exact with more threads alive than the store has stripes of
 * their own (the rest add to a shared one), and with threads that come and
 * go (a thread's stripe is taken over after it exits). */
typedef struct {
    sluice_store *s;
    const sluice_policy *p;
    int id, n;
    pthread_barrier_t *start; /* NULL: go at once */
} counter_arg;

static void *count_some(void *arg) {
    counter_arg *a = arg;
    if (a->start) pthread_barrier_wait(a->start);
    char key[32];
    int len = snprintf(key, sizeof key, "counter-%d", a->id);
    for (int i = 0; i < a->n; i++) {
        sluice_decision d;
        if (sluice_store_acquire_at(a->s, a->p, key, (size_t)len, 1, 1000, &d) != 0) return arg;
    }
    return NULL;
}

TEST(counts_exact_with_many_threads) {
    enum { MANY = 40, ROUNDS = 30 };
    sluice_store *s = open_store("memory:", NULL);
    sluice_policy *p = policy("count", "fixed-window limit=1000 window=1h");
    REQUIRE(s && p);
    int n = SANITIZED ? 3000 : 20000; /* each: 1000 allowed, the rest denied */
    pthread_t t[MANY];
    counter_arg a[MANY];
    pthread_barrier_t start;
    REQUIRE(pthread_barrier_init(&start, NULL, MANY) == 0);
    for (int i = 0; i < MANY; i++) {
        a[i] = (counter_arg){s, p, i, n, &start};
        REQUIRE(pthread_create(&t[i], NULL, count_some, &a[i]) == 0);
    }
    for (int i = 0; i < MANY; i++) {
        void *bad = NULL;
        pthread_join(t[i], &bad);
        CHECK(bad == NULL);
    }
    pthread_barrier_destroy(&start);
    sluice_stats st = stats(s);
    CHECK_EQ(st.allowed, MANY * 1000LL);
    CHECK_EQ(st.denied, (long long)MANY * (n - 1000));
    /* threads one after another, each on its own key: each takes over a
     * stripe given back by one before it */
    for (int r = 0; r < ROUNDS; r++) {
        counter_arg one = {s, p, MANY + r, 10, NULL};
        pthread_t th;
        REQUIRE(pthread_create(&th, NULL, count_some, &one) == 0);
        pthread_join(th, NULL);
    }
    st = stats(s);
    CHECK_EQ(st.allowed, MANY * 1000LL + ROUNDS * 10);
    CHECK_EQ(st.denied, (long long)MANY * (n - 1000));
    sluice_store_close(s);
    sluice_policy_free(p);
}

/* A thread that decides again while it exits (from a thread-specific
 * destructor that runs after the store's own has given its stripe back)
 * must not share that stripe with the thread that takes it next. */
static pthread_key_t late_key;
static atomic_int stripe_released;
static sluice_store *late_store;
static sluice_policy *late_policy;
enum { LATE_N = 200000 };

static void decide_many(const char *key) {
    for (int i = 0; i < LATE_N; i++) {
        sluice_decision d;
        sluice_store_acquire_at(late_store, late_policy, key, 1, 1, 1000, &d);
    }
}
static void late_destructor(void *v) {
    (void)v;
    atomic_store(&stripe_released, 1);
    decide_many("a");
}
static void *exits_deciding(void *arg) {
    sluice_decision d;
    sluice_store_acquire_at(late_store, late_policy, "a", 1, 1, 1000, &d); /* takes a stripe */
    pthread_setspecific(late_key, arg);                                    /* a destructor after the store's */
    return NULL;
}
static void *takes_over(void *arg) {
    while (!atomic_load(&stripe_released)) sched_yield();
    decide_many("b");
    return arg;
}

TEST(counts_exact_when_a_thread_decides_while_exiting) {
    late_store = open_store("memory:", NULL);
    late_policy = policy("late", "token-bucket capacity=10 rate=1/s");
    REQUIRE(late_store && late_policy);
    /* a decision first, so the store's thread key exists before late_key:
     * destructors run in the order the keys were made */
    sluice_decision d;
    CHECK_EQ(sluice_store_acquire_at(late_store, late_policy, "main", 4, 1, 1000, &d), 0);
    REQUIRE(pthread_key_create(&late_key, late_destructor) == 0);
    pthread_t a, b;
    REQUIRE(pthread_create(&b, NULL, takes_over, NULL) == 0);
    REQUIRE(pthread_create(&a, NULL, exits_deciding, (void *)1) == 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
    sluice_stats st = stats(late_store);
    CHECK_EQ(st.allowed + st.denied, 2 + 2LL * LATE_N);
    sluice_store_close(late_store);
    sluice_policy_free(late_policy);
    pthread_key_delete(late_key);
}

/* ---- the verbs ---- */

/* A peek or refund of a key not held adds none; a reset forgets the key
 * whichever configuration of the name keeps it (and nothing of another
 * name); shadow denials are counted. */
TEST(verbs_add_no_key_and_reset_forgets_any_configuration) {
    sluice_clock *c = sluice_clock_manual_new(1000);
    sluice_store *s = open_store("memory:", c);
    sluice_policy *a = policy("login", "sliding-log limit=3 window=1h");
    sluice_policy *b = policy("login", "sliding-log limit=5 window=1h");
    sluice_policy *other = policy("other", "sliding-log limit=3 window=1h");
    sluice_policy *sh = policy("try", "token-bucket capacity=10 rate=1/h; shadow fixed-window limit=2 window=1h");
    REQUIRE(s && a && b && other && sh);
    sluice_decision d;
    CHECK_EQ(sluice_store_peek_at(s, a, "u", 1, 3, 1000, &d), 0);
    CHECK(d.allowed && d.remaining == 0);
    CHECK_EQ(sluice_store_refund_at(s, a, "u", 1, 2, 1000, &d), 0);
    CHECK(d.allowed && d.remaining == 2);
    CHECK_EQ(sluice_store_refund(s, a, "u", 1, 1, NULL), 0);
    CHECK_EQ(stats(s).keys, 0);
    CHECK_EQ(sluice_store_acquire_at(s, a, "u", 1, 3, 1000, &d), 0);
    CHECK_EQ(sluice_store_acquire_at(s, other, "u", 1, 3, 1000, &d), 0);
    CHECK_EQ(stats(s).keys, 2);
    CHECK_EQ(sluice_store_reset(s, b, "u", 1, &d), 0); /* kept by a: forgotten all the same */
    CHECK(d.allowed && d.remaining == 4 && d.limit == 5);
    CHECK_EQ(stats(s).keys, 1);
    CHECK_EQ(sluice_store_acquire_at(s, a, "u", 1, 3, 1000, &d), 0);
    CHECK(d.allowed);
    CHECK_EQ(sluice_store_acquire_at(s, other, "u", 1, 1, 1000, &d), 0);
    CHECK(!d.allowed); /* another name: untouched */
    for (int i = 0; i < 4; i++) CHECK_EQ(sluice_store_acquire_at(s, sh, "k", 1, 1, 1000, &d), 0);
    CHECK(d.allowed && d.shadow_denied && d.remaining == 6);
    sluice_stats st = stats(s);
    CHECK_EQ(st.shadow_denied, 2);
    CHECK_EQ(st.allowed, 3 + 4); /* decisions, not costs */
    sluice_store_close(s);
    sluice_policy_free(a);
    sluice_policy_free(b);
    sluice_policy_free(other);
    sluice_policy_free(sh);
    sluice_clock_free(c);
}

/* Every verb's bad arguments: a clear error, nothing changed (the key's
 * peek the same before and after). */
TEST(verbs_refuse_bad_arguments_changing_nothing) {
    sluice_store *s = open_store("memory:", NULL);
    sluice_policy *p = policy("p", "token-bucket capacity=3 rate=1/h");
    REQUIRE(s && p);
    sluice_decision d, before, after;
    CHECK_EQ(sluice_store_acquire_at(s, p, "k", 1, 2, 1000, &d), 0);
    CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 1, 1000, &before), 0);
    static char big[SLUICE_KEY_MAX + 1];
    int64_t costs[] = {0, -1, 4, INT64_MIN, INT64_MAX};
    for (size_t i = 0; i < sizeof costs / sizeof costs[0]; i++) {
        CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, costs[i], 1000, &d), SLUICE_ECOST);
        CHECK_EQ(sluice_store_refund_at(s, p, "k", 1, costs[i], 1000, &d), SLUICE_ECOST);
        CHECK(strstr(sluice_store_errmsg(s), "cost") != NULL);
    }
    CHECK_EQ(sluice_store_peek_at(NULL, p, "k", 1, 1, 1000, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_refund_at(NULL, p, "k", 1, 1, 1000, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_reset(NULL, p, "k", 1, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_peek(NULL, p, "k", 1, 1, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_refund(NULL, p, "k", 1, 1, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 1, 1000, NULL), SLUICE_EINVAL); /* a peek answers */
    CHECK_EQ(sluice_store_peek_at(s, NULL, "k", 1, 1, 1000, &d), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(s), "policy") != NULL);
    CHECK_EQ(sluice_store_refund_at(s, p, NULL, 1, 1, 1000, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_reset(s, NULL, "k", 1, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_reset(s, p, NULL, 1, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_reset(s, p, "k", 0, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_refund_at(s, p, "", 0, 1, 1000, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_peek_at(s, p, big, sizeof big, 1, 1000, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_reset(s, p, big, sizeof big, NULL), SLUICE_EINVAL);
    CHECK(strstr(sluice_store_errmsg(s), "bytes") != NULL);
    CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 1, SLUICE_TIME_MAX_MS + 1, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_refund_at(s, p, "k", 1, 1, SLUICE_TIME_MIN_MS - 1, &d), SLUICE_EINVAL);
    CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 1, 1000, &after), 0);
    CHECK(same(&before, &after) && after.remaining == 0);
    CHECK_EQ(stats(s).keys, 1);
    CHECK_EQ(sluice_store_refund_at(s, p, "k", 1, 3, 1000, NULL), 0); /* out may be NULL */
    CHECK_EQ(sluice_store_peek_at(s, p, "k", 1, 3, 1000, &d), 0);
    CHECK(d.allowed && d.remaining == 0); /* back to full, not beyond */
    CHECK_EQ(sluice_store_reset(s, p, "k", 1, NULL), 0);
    CHECK_EQ(stats(s).keys, 0);
    sluice_store_close(s);
    sluice_policy_free(p);
}

/* Threads mixing acquires and refunds on one key at one reading: never
 * beyond fresh or below empty; what it holds at the end is exactly what
 * was admitted less what was refunded. */
static sluice_store *mix_store;
static sluice_policy *mix_policy;
static atomic_long mix_admitted, mix_refunded, mix_bad;

static void *mix_thread(void *arg) {
    uint64_t rs = (uint64_t)(uintptr_t)arg;
    for (int i = 0; i < 20000; i++) {
        sluice_decision d;
        if (sluice_store_acquire_at(mix_store, mix_policy, "hot", 3, 1, 5000, &d) != 0) atomic_fetch_add(&mix_bad, 1);
        if (d.allowed) {
            atomic_fetch_add(&mix_admitted, 1);
            if (check_range_(&rs, 0, 1)) {
                if (sluice_store_refund_at(mix_store, mix_policy, "hot", 3, 1, 5000, NULL) != 0)
                    atomic_fetch_add(&mix_bad, 1);
                atomic_fetch_add(&mix_refunded, 1);
            }
        }
        if (sluice_store_peek_at(mix_store, mix_policy, "hot", 3, 1, 5000, &d) != 0 || d.remaining < 0 ||
            d.remaining > d.limit)
            atomic_fetch_add(&mix_bad, 1);
    }
    return NULL;
}

TEST(threads_mixing_acquires_and_refunds_stay_within_the_limit) {
    static const char *const mix[] = {"token-bucket capacity=50 rate=1/h", "fixed-window limit=50 window=1h",
                                      "sliding-log limit=50 window=1h",
                                      "leaky-bucket capacity=60 rate=1/h; sliding-window limit=50 window=1h"};
    for (size_t k = 0; k < sizeof mix / sizeof mix[0]; k++) {
        mix_store = open_store("memory:", NULL);
        mix_policy = policy("mix", mix[k]);
        REQUIRE(mix_store && mix_policy);
        atomic_store(&mix_admitted, 0), atomic_store(&mix_refunded, 0), atomic_store(&mix_bad, 0);
        pthread_t t[4];
        for (uintptr_t i = 0; i < 4; i++) pthread_create(&t[i], NULL, mix_thread, (void *)(i + 1));
        for (int i = 0; i < 4; i++) pthread_join(t[i], NULL);
        long kept = atomic_load(&mix_admitted) - atomic_load(&mix_refunded);
        CHECK_EQ(atomic_load(&mix_bad), 0);
        CHECK(kept <= 50 && atomic_load(&mix_refunded) > 0);
        sluice_decision d;
        CHECK_EQ(sluice_store_peek_at(mix_store, mix_policy, "hot", 3, 1, 5000, &d), 0);
        CHECK_EQ(d.remaining, 50 - kept);
        sluice_store_close(mix_store);
        sluice_policy_free(mix_policy);
    }
}

/* Every field of every verb's decision is filled, local too. */
TEST(decisions_are_not_local) {
    sluice_store *s = open_store("memory:", NULL);
    REQUIRE(s);
    check_decisions_not_local(s);
    sluice_store_close(s);
}

TEST_MAIN(decisions_are_not_local, per_key_state_is_independent, keys_are_binary_safe, bad_urls_and_options,
          full_store_refuses_new_keys_changing_nothing, full_store_evicts_least_recently_used,
          eviction_spares_the_key_in_use, new_key_fresh_soonest_is_forgotten_not_an_older_key_evicted,
          changed_configuration_keeps_usage, verbs_add_no_key_and_reset_forgets_any_configuration,
          verbs_refuse_bad_arguments_changing_nothing,
          threads_mixing_acquires_and_refunds_stay_within_the_limit, differential_lossless_forgetting, differential_forced_eviction,
          differential_all_keys_collide, refuse_is_exact_for_held_keys,
          keys_alike_in_their_first_word_stay_apart, acquire_many_equals_one_acquire_at_each,
          threads_race_first_request_on_one_key,
          threads_over_shared_keys_never_over_admit, counts_exact_with_many_threads,
          counts_exact_when_a_thread_decides_while_exiting,
          ten_million_keys_bounded_memory)
