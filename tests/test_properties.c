/* test_properties.c: what every decision promises, checked on the real code
 * over random configurations and random states, without a reference model:
 *
 *  - retry_after_ms is exact: with no other traffic the same request is
 *    denied at now + retry - 1 and admitted at now + retry;
 *  - reset_ms is exact: at now + reset the state decides exactly like a
 *    fresh one (now and on a random continuation), at now + reset - 1 not;
 *  - remaining is exact: m further cost-1 requests are admitted, the next is
 *    not (which also shows that "m requests of cost 1" and "one request of
 *    cost m" agree, as the reference models assume);
 *  - the token (and leaky) bucket admits at most C + floor(D*R/P) in any
 *    closed interval of D ms, and a greedy client gets exactly that;
 *  - the sliding log never admits more than L in W consecutive ms, and
 *    denies only when it must; the fixed window at most L per window;
 *  - leaky-bucket delays describe a FIFO queue draining at R per P ms that
 *    never holds more than C;
 *  - a backward clock step never creates capacity;
 *  - every field is in range on every decision;
 *  - the verbs (docs/semantics.md, "Peek, refund, reset"): a refund of an
 *    admission at its reading is an exact undo at that reading and later
 *    (refund_undo_*); a refund never makes a state more permissive than a
 *    fresh one, and refunding everything leaves a fresh one
 *    (refund_bounded_*); a peek changes nothing (peeks_change_nothing);
 *  - shadow parts never deny, flag exactly their would-be denials, count
 *    what they would admit, and leave the enforced parts' decisions as
 *    without them (shadow_parts);
 *  - retune ("Retune"): a key at its limit stays denied after a change
 *    that raises no limit; raising a bucket's capacity keeps its exact
 *    backlog; a change of algorithm or period charges what was in use.
 *
 * States are explored with the pure algorithms (states copied, so that a
 * probe is "no other traffic"), and through real limiters (the one-part
 * bucket's lock-free word is a separate implementation; probes there replay
 * the admissions into a new limiter); the verbs, on both. SLUICE_TEST_SCALE
 * scales the work. */
#include "check.h"
#include "internal.h"
#include "ref_models.h"


static bool is_bucket(sluice_algorithm a) { return a == SLUICE_TOKEN_BUCKET || a == SLUICE_LEAKY_BUCKET; }

#define DAY30 INT64_C(2592000000)

/* A valid random configuration of algorithm a: small (cls 0), medium (1),
 * anywhere (2), or an edge (3). */
static sluice_config gen_config(uint64_t *rs, sluice_algorithm a, int cls) {
    static const int64_t eb[][3] = {
        {1000000000, 1000000000, 1000}, {1000000000, 1, DAY30}, {1, 1, DAY30},
        {3, 999999937, 7000},           {1000000000, 1000000000000, 1000000},
        {5, DAY30 - 1, DAY30},          {999999937, 999999929, 999999893}, {1, 1, 1},
    };
    static const int64_t ew[][2] = {
        {1000000000, DAY30}, {1, DAY30}, {1000000000, 1}, {1, 1}, {999999937, 999983}, {3, DAY30 - 1},
    };
    for (;;) {
        sluice_config c;
        memset(&c, 0, sizeof c);
        c.algorithm = a;
        if (cls == 3) {
            if (is_bucket(a)) {
                size_t i = (size_t)check_range_(rs, 0, sizeof eb / sizeof eb[0] - 1);
                c.limit = eb[i][0], c.rate = eb[i][1], c.period_ms = eb[i][2];
            } else {
                size_t i = (size_t)check_range_(rs, 0, sizeof ew / sizeof ew[0] - 1);
                c.limit = ew[i][0], c.period_ms = ew[i][1];
            }
        } else if (cls == 0) {
            c.limit = check_range_(rs, 1, 10);
            c.rate = check_range_(rs, 1, 7);
            c.period_ms = is_bucket(a) ? check_range_(rs, 1, 13) : check_range_(rs, 1, 50);
        } else if (cls == 1) {
            c.limit = log_uniform(rs, 1, 10000);
            c.rate = log_uniform(rs, 1, 10000);
            c.period_ms = log_uniform(rs, 1, 1000000);
        } else {
            c.limit = log_uniform(rs, 1, SLUICE_LIMIT_MAX);
            c.rate = log_uniform(rs, 1, SLUICE_RATE_MAX);
            c.period_ms = log_uniform(rs, 1, SLUICE_PERIOD_MAX_MS);
        }
        if (!is_bucket(a)) c.rate = 0;
        if (sluice_config_validate(&c, NULL, 0) == 0) return c;
    }
}

/* Time scales of a configuration: one token (or W/L) and a full refill (W). */
static void time_units(const sluice_config *c, int64_t *tok, int64_t *full) {
    ref_i128 t, f;
    if (is_bucket(c->algorithm)) {
        t = ref_ceil_div_(c->period_ms, c->rate);
        f = ref_ceil_div_((ref_i128)c->limit * c->period_ms, c->rate);
    } else {
        t = c->period_ms / c->limit;
        f = c->period_ms;
    }
    if (f > ((ref_i128)1 << 50)) f = (ref_i128)1 << 50;
    if (f < 1) f = 1;
    if (t < 1) t = 1;
    if (t > f) t = f;
    *tok = (int64_t)t;
    *full = (int64_t)f;
}

static int64_t clamp_time(ref_i128 t) {
    if (t < SLUICE_TIME_MIN_MS) return SLUICE_TIME_MIN_MS;
    if (t > SLUICE_TIME_MAX_MS) return SLUICE_TIME_MAX_MS;
    return (int64_t)t;
}

/* The next reading: mostly small forward steps; with back set, also backward
 * steps; with huge set, also idle gaps of up to 2^50 ms. */
static int64_t next_time(uint64_t *rs, int64_t t, int64_t tok, int64_t full, bool back, bool huge) {
    int u = (int)check_range_(rs, 0, 99);
    ref_i128 dt;
    if (u < 40) dt = 0;
    else if (u < 75) dt = check_range_(rs, 1, 2 * tok);
    else if (u < 87) dt = check_range_(rs, 1, 2 * full);
    else if (u < 90 && huge) dt = log_uniform(rs, 1, INT64_C(1) << 50);
    else if (u < 98 && back) dt = -check_range_(rs, 1, max64(tok, full / 2));
    else if (back && huge) dt = -log_uniform(rs, 1, INT64_C(1) << 50);
    else dt = check_range_(rs, 0, 2);
    return clamp_time((ref_i128)t + dt);
}

static int64_t next_cost(uint64_t *rs, int64_t max_cost) {
    int u = (int)check_range_(rs, 0, 99);
    if (u < 50) return 1;
    if (u < 80) return check_range_(rs, 1, min64(max_cost, 5));
    if (u < 95) return log_uniform(rs, 1, max_cost);
    return max_cost;
}

static int64_t start_time(uint64_t *rs) {
    switch (check_range_(rs, 0, 3)) {
    case 0: return check_range_(rs, 0, 1000);
    case 1: return check_range_(rs, -100000, 100000);
    case 2: return SLUICE_TIME_MIN_MS + check_range_(rs, 0, 1000);
    default: return check_range_(rs, SLUICE_TIME_MIN_MS / 2, SLUICE_TIME_MAX_MS / 2);
    }
}

/* ------------------------------------------------------------------------ */
/* A policy's state driven through the pure algorithms, copyable             */
/* ------------------------------------------------------------------------ */

typedef struct {
    sluice_policy *pol;
    bool owns_pol;
    sluice__state st[SLUICE_POLICY_MAX_PARTS];
} sim_t;

static int sim_open(sim_t *s, const sluice_config *parts, size_t n) {
    memset(s, 0, sizeof *s);
    if (sluice_policy_new("prop", parts, n, &s->pol) != 0) return -1;
    s->owns_pol = true;
    for (size_t i = 0; i < n; i++) s->pol->algo[i]->init(&s->pol->params[i], &s->st[i]);
    return 0;
}

static size_t sim_n(const sim_t *s) { return s->pol->n_parts; }
static bool is_log(const sim_t *s, size_t i) { return s->pol->algo[i] == &sluice__sliding_log; }

/* A fresh state of the same policy (sharing it). */
static void sim_fresh_like(sim_t *dst, const sim_t *src) {
    memset(dst, 0, sizeof *dst);
    dst->pol = src->pol;
    for (size_t i = 0; i < sim_n(src); i++) src->pol->algo[i]->init(&src->pol->params[i], &dst->st[i]);
}

/* A deep copy (sharing the policy). */
static void sim_copy(sim_t *dst, const sim_t *src) {
    memcpy(dst, src, sizeof *dst);
    dst->owns_pol = false;
    for (size_t i = 0; i < sim_n(src); i++) {
        if (!is_log(src, i) || !src->st[i].log.cap) continue;
        size_t bytes = src->st[i].log.cap * sizeof(sluice__log_entry);
        dst->st[i].log.e = malloc(bytes);
        memcpy(dst->st[i].log.e, src->st[i].log.e, bytes);
    }
}

static void sim_close(sim_t *s) {
    for (size_t i = 0; i < sim_n(s); i++)
        if (is_log(s, i)) sluice__sliding_log.release(&s->st[i]);
    if (s->owns_pol) sluice_policy_free(s->pol);
    memset(s, 0, sizeof *s);
}

static void grow(sim_t *s, size_t i) {
    int rc = s->pol->algo[i]->reserve(&s->pol->params[i], &s->st[i]);
    if (rc != 0) {
        fprintf(stderr, "the sliding log's reserve failed\n");
        abort();
    }
}

/* One part's decision; commit 0 is a dry run. */
static void part_decide(sim_t *s, size_t i, int64_t t, int64_t cost, sluice_decision *d, int commit) {
    const sluice_policy *p = s->pol;
    while (p->algo[i]->decide(&p->params[i], &s->st[i], t, cost, d, commit) == SLUICE__EGROW) grow(s, i);
}

static void sim_decide(sim_t *s, int64_t t, int64_t cost, sluice_decision *d) {
    size_t g;
    if (sim_n(s) == 1 && !s->pol->n_shadow) {
        part_decide(s, 0, t, cost, d, 1);
        return;
    }
    while (sluice__policy_decide(s->pol, s->st, t, cost, d, &g) == SLUICE__EGROW) grow(s, g);
}

/* Would the whole policy admit cost at t? (Nothing changes.) */
static bool sim_would_admit(sim_t *s, int64_t t, int64_t cost) {
    sluice_decision d;
    for (size_t i = 0; i < sim_n(s); i++) {
        part_decide(s, i, t, cost, &d, 0);
        if (!d.allowed) return false;
    }
    return true;
}

/* The policy's state at t: the parts' peeks combined as a denial combines
 * them (least remaining, first on a tie; greatest reset). */
static void sim_peek(const sim_t *s, int64_t t, sluice_decision *d) {
    for (size_t i = 0; i < sim_n(s); i++) {
        sluice_decision x;
        s->pol->algo[i]->peek(&s->pol->params[i], &s->st[i], t, &x);
        if (i == 0) {
            *d = x;
        } else {
            if (x.remaining < d->remaining) d->remaining = x.remaining, d->limit = x.limit, d->part = (int32_t)i;
            if (x.reset_ms > d->reset_ms) d->reset_ms = x.reset_ms;
        }
    }
}

static bool sim_is_fresh(const sim_t *s, int64_t t) {
    for (size_t i = 0; i < sim_n(s); i++)
        if (!s->pol->algo[i]->is_fresh(&s->pol->params[i], &s->st[i], t)) return false;
    return true;
}

/* The largest cost (the least limit of the enforced parts). */
static int64_t sim_max_cost(const sim_t *s) { return sluice_policy_max_cost(s->pol); }

static void print_sim(const char *test, uint64_t seed, const sim_t *s) {
    char text[1024];
    sluice_policy_format(s->pol, text, sizeof text);
    fprintf(stderr, "  [%s] seed %" PRIu64 ", policy \"%s\"\n", test, seed, text);
}

/* Fields in range, for any decision d of a request of cost (0: a peek). */
static bool sane(const sim_t *s, const sluice_decision *d, int64_t cost) {
    bool ok = d->remaining >= 0 && d->remaining <= d->limit && d->reset_ms >= 0 && d->delay_ms >= 0 &&
              d->enforced && d->part >= 0 && (size_t)d->part < sim_n(s) &&
              d->limit == s->pol->parts[d->part].limit;
    if (cost == 0) return ok && !d->allowed && d->retry_after_ms == 0 && d->delay_ms == 0;
    if (d->allowed) return ok && d->retry_after_ms == 0;
    return ok && d->retry_after_ms >= 1 && d->delay_ms == 0;
}

/* A random policy: one part of algorithm a, or (a == 0) 2..4 random parts. */
static void gen_policy(uint64_t *rs, int a, int k, sluice_config *parts, size_t *n) {
    if (a) {
        *n = 1;
        parts[0] = gen_config(rs, (sluice_algorithm)a, k % 4);
        return;
    }
    *n = (size_t)check_range_(rs, 2, 4);
    int cls = (int)check_range_(rs, 0, 2);
    for (size_t i = 0; i < *n; i++)
        parts[i] = gen_config(rs, (sluice_algorithm)check_range_(rs, 1, 5), cls);
}

/* ------------------------------------------------------------------------ */
/* retry, reset and remaining are exact                                      */
/* ------------------------------------------------------------------------ */

static int g_probes_retry, g_probes_reset, g_probes_remaining;

/* At (t, cost) the policy denied with d: probe t + retry - 1 and t + retry. */
static bool probe_retry(const sim_t *s, int64_t t, int64_t cost, const sluice_decision *d) {
    ref_i128 at = (ref_i128)t + d->retry_after_ms;
    if (at > SLUICE_TIME_MAX_MS) return true; /* beyond the clock's range */
    sim_t c;
    bool ok;
    g_probes_retry++;
    sim_copy(&c, s);
    ok = !sim_would_admit(&c, (int64_t)at - 1, cost) && sim_would_admit(&c, (int64_t)at, cost);
    if (ok) { /* and really admitted (committing) there */
        sluice_decision x;
        sim_decide(&c, (int64_t)at, cost, &x);
        ok = x.allowed;
    }
    sim_close(&c);
    return ok;
}

/* Does part i of a decide like part i of f at t (all fields, costs 1 and
 * its limit, dry runs)? With skip_reset, reset_ms is not compared. */
static bool part_same(sim_t *a, sim_t *f, size_t i, int64_t t, bool skip_reset) {
    int64_t costs[2] = {1, a->pol->parts[i].limit};
    for (int k = 0; k < 2; k++) {
        sluice_decision x, y;
        part_decide(a, i, t, costs[k], &x, 0);
        part_decide(f, i, t, costs[k], &y, 0);
        if (skip_reset) x.reset_ms = y.reset_ms = 0;
        if (!ref_decision_eq(&x, &y)) return false;
    }
    return true;
}

/* The state's reset at t is R: at t + R it decides like a fresh state (and
 * keeps doing so on a random continuation); at t + R - 1 it does not. */
static bool probe_reset(const sim_t *s, int64_t t, int64_t R, uint64_t *rs) {
    ref_i128 at = (ref_i128)t + R;
    if (at > SLUICE_TIME_MAX_MS) return true;
    g_probes_reset++;
    sim_t c, f;
    bool ok = true;
    sim_copy(&c, s);
    sim_fresh_like(&f, s);
    if (R > 0) {
        int64_t before = (int64_t)at - 1;
        bool some_part_differs = false;
        for (size_t i = 0; i < sim_n(s); i++)
            if (!part_same(&c, &f, i, before, true)) some_part_differs = true;
        ok = ok && some_part_differs && !sim_is_fresh(&c, before);
    }
    ok = ok && sim_is_fresh(&c, (int64_t)at);
    for (size_t i = 0; ok && i < sim_n(s); i++) ok = part_same(&c, &f, i, (int64_t)at, false);
    /* a forward continuation decides identically on both */
    int64_t tt = (int64_t)at, tok, full;
    time_units(&s->pol->parts[0], &tok, &full);
    for (int k = 0; ok && k < 6; k++) {
        sluice_decision x, y;
        int64_t cost = next_cost(rs, sim_max_cost(s));
        sim_decide(&c, tt, cost, &x);
        sim_decide(&f, tt, cost, &y);
        ok = ref_decision_eq(&x, &y);
        tt = next_time(rs, tt, tok, full, false, false);
    }
    sim_close(&c);
    sim_close(&f);
    return ok;
}

/* After a decision leaving remaining m at t: m more cost-1 requests are
 * admitted (remaining counting down), the next is denied. For large m: cost m
 * admitted and cost m + 1 denied. */
static bool probe_remaining(const sim_t *s, int64_t t, int64_t m) {
    sim_t c;
    bool ok = true;
    g_probes_remaining++;
    sim_copy(&c, s);
    if (m <= 2000) {
        for (int64_t k = 1; ok && k <= m; k++) {
            sluice_decision x;
            sim_decide(&c, t, 1, &x);
            ok = x.allowed && x.remaining == m - k;
        }
        ok = ok && !sim_would_admit(&c, t, 1);
    } else {
        ok = sim_would_admit(&c, t, m) && (m + 1 > sim_max_cost(s) || !sim_would_admit(&c, t, m + 1));
    }
    sim_close(&c);
    return ok;
}

static void exactness(const char *test, int a, uint64_t base) {
    int n_cases = scaled(a ? 200 : 300), bad = 0;
    for (int k = 0; k < n_cases; k++) {
        uint64_t seed = base + (uint64_t)k, rs = seed;
        sluice_config parts[SLUICE_POLICY_MAX_PARTS];
        size_t n;
        sim_t s;
        gen_policy(&rs, a, k, parts, &n);
        REQUIRE(sim_open(&s, parts, n) == 0);
        int64_t tok, full, t = start_time(&rs), max_cost = sim_max_cost(&s);
        time_units(&parts[check_range_(&rs, 0, (int64_t)n - 1)], &tok, &full);
        bool back = k % 2 == 1, huge = k % 4 >= 2;
        for (int i = 0; i < 400; i++) {
            t = next_time(&rs, t, tok, full, back, huge);
            int64_t cost = next_cost(&rs, max_cost);
            sluice_decision d, p;
            sim_decide(&s, t, cost, &d);
            const char *what = NULL;
            if (!sane(&s, &d, cost)) what = "a field out of range";
            else if (!d.allowed && !probe_retry(&s, t, cost, &d)) what = "retry_after_ms is not exact";
            else if (i % 3 == 0 && !probe_reset(&s, t, d.reset_ms, &rs)) what = "reset_ms is not exact";
            else if (i % 3 == 1 && !probe_remaining(&s, t, d.remaining)) what = "remaining is not exact";
            else if ((sim_peek(&s, t, &p), !sane(&s, &p, 0) || p.remaining != d.remaining ||
                      p.reset_ms != d.reset_ms || p.part != d.part || p.limit != d.limit))
                what = "peek disagrees with the decision";
            if (what) {
                char buf[300];
                ref_decision_str(&d, buf, sizeof buf);
                print_sim(test, seed, &s);
                fprintf(stderr, "    step %d at %" PRId64 " cost %" PRId64 ": %s: %s\n", i, t, cost, what, buf);
                bad++;
                break;
            }
        }
        sim_close(&s);
    }
    CHECK_EQ(bad, 0);
}

TEST(exact_token_bucket) { exactness("exact_token_bucket", SLUICE_TOKEN_BUCKET, 11000); }
TEST(exact_leaky_bucket) { exactness("exact_leaky_bucket", SLUICE_LEAKY_BUCKET, 12000); }
TEST(exact_fixed_window) { exactness("exact_fixed_window", SLUICE_FIXED_WINDOW, 13000); }
TEST(exact_sliding_window) { exactness("exact_sliding_window", SLUICE_SLIDING_WINDOW, 14000); }
TEST(exact_sliding_log) { exactness("exact_sliding_log", SLUICE_SLIDING_LOG, 15000); }
TEST(exact_composite) { exactness("exact_composite", 0, 16000); }

/* The lock-free word of the one-part bucket limiter: retry and reset probed
 * by replaying the admissions into a new limiter (same clock start), with
 * readings far from the start too (the word moves to 128 bits). */
typedef struct {
    int64_t t, cost;
} adm_t;

static sluice_limiter *replay(const sluice_config *c, sluice_clock *clk, const adm_t *a, size_t n) {
    sluice_limiter *l;
    sluice_decision d;
    if (sluice_limiter_new(c, clk, &l) != 0) return NULL;
    for (size_t i = 0; i < n; i++)
        if (sluice_acquire_at(l, a[i].cost, a[i].t, &d) != 0 || !d.allowed) {
            sluice_limiter_free(l);
            return NULL;
        }
    return l;
}

TEST(exact_bucket_limiter_word) {
    int n_cases = scaled(150), bad = 0;
    for (int k = 0; k < n_cases && !bad; k++) {
        uint64_t seed = 17000 + (uint64_t)k, rs = seed;
        sluice_algorithm a = k % 2 ? SLUICE_LEAKY_BUCKET : SLUICE_TOKEN_BUCKET;
        sluice_config c = gen_config(&rs, a, (k / 2) % 4);
        int64_t t = start_time(&rs), tok, full;
        sluice_clock *clk = sluice_clock_manual_new(t);
        sluice_limiter *l;
        REQUIRE(clk && sluice_limiter_new(&c, clk, &l) == 0);
        time_units(&c, &tok, &full);
        adm_t *adm = malloc(300 * sizeof *adm);
        size_t n_adm = 0;
        bool back = k % 3 != 0, huge = k % 4 >= 2;
        for (int i = 0; i < 300 && !bad; i++) {
            t = next_time(&rs, t, tok, full, back, huge);
            int64_t cost = next_cost(&rs, c.limit);
            sluice_decision d, x;
            REQUIRE(sluice_acquire_at(l, cost, t, &d) == 0);
            if (d.allowed) {
                adm[n_adm].t = t, adm[n_adm].cost = cost, n_adm++;
                continue;
            }
            if (i % 4 != 0) continue;
            const char *what = NULL;
            ref_i128 at = (ref_i128)t + d.retry_after_ms, rst = (ref_i128)t + d.reset_ms;
            sluice_limiter *p = replay(&c, clk, adm, n_adm);
            if (!p) what = "replay differs";
            else if (at <= SLUICE_TIME_MAX_MS &&
                     (sluice_acquire_at(p, cost, (int64_t)at - 1, &x) != 0 || x.allowed ||
                      sluice_acquire_at(p, cost, (int64_t)at, &x) != 0 || !x.allowed))
                what = "retry_after_ms is not exact";
            sluice_limiter_free(p);
            p = what ? NULL : replay(&c, clk, adm, n_adm);
            if (p && rst <= SLUICE_TIME_MAX_MS && d.reset_ms > 0) {
                /* full at t + reset (cost C admitted), not one ms before */
                if (sluice_acquire_at(p, c.limit, (int64_t)rst - 1, &x) != 0 || x.allowed ||
                    sluice_acquire_at(p, c.limit, (int64_t)rst, &x) != 0 || !x.allowed || x.delay_ms != 0)
                    what = "reset_ms is not exact";
            }
            sluice_limiter_free(p);
            if (what) {
                char buf[300], text[200];
                ref_decision_str(&d, buf, sizeof buf);
                sluice_config_format(&c, text, sizeof text);
                fprintf(stderr, "  [exact_bucket_limiter_word] seed %" PRIu64 " \"%s\" step %d at %" PRId64
                                " cost %" PRId64 ": %s: %s\n", seed, text, i, t, cost, what, buf);
                bad++;
            }
        }
        free(adm);
        sluice_limiter_free(l);
        sluice_clock_free(clk);
    }
    CHECK_EQ(bad, 0);
}

/* ------------------------------------------------------------------------ */
/* Bounds over intervals                                                     */
/* ------------------------------------------------------------------------ */

/* Drives a limiter of c over a random trace (forward only unless back),
 * recording admissions (reading, cost, delay). Returns the count. */
typedef struct {
    int64_t t, cost, delay, te;
} rec_t;

static size_t drive(const sluice_config *c, uint64_t *rs, size_t steps, bool back, bool greedy, rec_t *out) {
    int64_t t = start_time(rs), tok, full;
    sluice_clock *clk = sluice_clock_manual_new(t);
    sluice_limiter *l;
    size_t n = 0;
    if (!clk || sluice_limiter_new(c, clk, &l) != 0) abort();
    time_units(c, &tok, &full);
    for (size_t i = 0; i < steps && n < steps; i++) {
        sluice_decision d;
        if (greedy) { /* every ms, cost 1 until denied */
            do {
                if (sluice_acquire_at(l, 1, t, &d) != 0) abort();
                if (d.allowed) out[n].t = t, out[n].cost = 1, out[n].delay = d.delay_ms, n++;
            } while (d.allowed && n < steps);
            t++;
            continue;
        }
        t = next_time(rs, t, tok, full, back, false);
        int64_t cost = next_cost(rs, c->limit);
        if (sluice_acquire_at(l, cost, t, &d) != 0) abort();
        if (d.allowed) out[n].t = t, out[n].cost = cost, out[n].delay = d.delay_ms, n++;
    }
    sluice_limiter_free(l);
    sluice_clock_free(clk);
    return n;
}

/* GCRA bound. Let requests i..j (t_i <= ... <= t_j, forward readings) be
 * admitted, S their total cost. TAT never falls and each admission adds its
 * cost*p, so after j: TAT >= t_i*r + p*S; admitting j needed
 * TAT - t_j*r <= tau = C*p. Hence p*S <= C*p + (t_j - t_i)*r, i.e.
 * S <= C + (t_j - t_i)*R/P, and S is an integer: S <= C + floor(D*R/P) for
 * any closed interval [a, a + D] holding them. A greedy client attains it. */
static ref_i128 worst_excess(const sluice_config *c, const rec_t *a, size_t n) {
    ref_i128 worst = -((ref_i128)1 << 100);
    for (size_t i = 0; i < n; i++) {
        ref_i128 sum = 0;
        for (size_t j = i; j < n; j++) {
            sum += a[j].cost;
            ref_i128 allowance = (ref_i128)c->limit + ref_floor_div_(((ref_i128)a[j].t - a[i].t) * c->rate, c->period_ms);
            if (sum - allowance > worst) worst = sum - allowance;
        }
    }
    return worst; /* > 0: the bound is broken */
}

TEST(bucket_interval_bound) {
    int n_cases = scaled(150), bad = 0;
    rec_t *rec = malloc(1500 * sizeof *rec);
    for (int k = 0; k < n_cases; k++) {
        uint64_t seed = 21000 + (uint64_t)k, rs = seed;
        sluice_algorithm a = k % 2 ? SLUICE_LEAKY_BUCKET : SLUICE_TOKEN_BUCKET;
        bool greedy = k % 5 == 4;
        sluice_config c = gen_config(&rs, a, greedy ? 0 : (k / 2) % 4 == 3 ? 0 : (k / 2) % 4);
        size_t n = drive(&c, &rs, 1500, false, greedy, rec);
        ref_i128 w = worst_excess(&c, rec, n);
        /* a greedy client (every ms, until denied) from a fresh bucket gets
         * exactly the bound over [first, last]: the worst excess is 0 */
        if (w > 0 || (greedy && n > 0 && w != 0)) {
            char text[200], b[48];
            sluice_config_format(&c, text, sizeof text);
            fprintf(stderr, "  [bucket_interval_bound] seed %" PRIu64 " \"%s\"%s: worst excess %s\n", seed, text,
                    greedy ? " (greedy)" : "", ref_i128_str(w, b));
            bad++;
        }
    }
    free(rec);
    CHECK_EQ(bad, 0);
}

/* The sliding log: for each admission j, the cost admitted at effective
 * times in (te_j - W, te_j] is <= L (effective time: the reading, or the
 * newest admission's when the reading is earlier). On forward traces also
 * exact: a request is denied only when admitting it would break that. */
TEST(sliding_log_window_bound) {
    int n_cases = scaled(200), bad = 0;
    for (int k = 0; k < n_cases; k++) {
        uint64_t seed = 22000 + (uint64_t)k, rs = seed;
        sluice_config c = gen_config(&rs, SLUICE_SLIDING_LOG, k % 3);
        bool back = k % 2 == 1;
        int64_t t = start_time(&rs), tok, full, newest = INT64_MIN;
        sluice_clock *clk = sluice_clock_manual_new(t);
        sluice_limiter *l;
        REQUIRE(clk && sluice_limiter_new(&c, clk, &l) == 0);
        time_units(&c, &tok, &full);
        rec_t *adm = malloc(1000 * sizeof *adm);
        size_t n = 0;
        for (int i = 0; i < 1000 && !bad; i++) {
            t = next_time(&rs, t, tok, full, back, false);
            int64_t cost = next_cost(&rs, c.limit), te = t > newest ? t : newest;
            sluice_decision d;
            REQUIRE(sluice_acquire_at(l, cost, t, &d) == 0);
            ref_i128 used = 0; /* admitted in (te - W, te] */
            for (size_t j = n; j-- > 0 && adm[j].te > (ref_i128)te - c.period_ms;) used += adm[j].cost;
            if (d.allowed != (used + cost <= c.limit)) {
                fprintf(stderr, "  [sliding_log_window_bound] seed %" PRIu64 " step %d at %" PRId64
                                ": allowed=%d with %lld used of %" PRId64 " and cost %" PRId64 "\n",
                        seed, i, t, (int)d.allowed, (long long)used, c.limit, cost);
                bad++;
            }
            if (d.allowed) adm[n].t = t, adm[n].te = te, adm[n].cost = cost, n++, newest = te;
        }
        free(adm);
        sluice_limiter_free(l);
        sluice_clock_free(clk);
    }
    CHECK_EQ(bad, 0);
}

/* The fixed window: never more than L in a window [kW, (k+1)W) of the
 * effective window (the reading's, or the newest counted in when the reading
 * is earlier), and a denial only when the window is too full. */
TEST(fixed_window_bound) {
    int n_cases = scaled(200), bad = 0;
    for (int k = 0; k < n_cases; k++) {
        uint64_t seed = 23000 + (uint64_t)k, rs = seed;
        sluice_config c = gen_config(&rs, SLUICE_FIXED_WINDOW, k % 3);
        bool back = k % 2 == 1;
        int64_t t = start_time(&rs), tok, full, win = INT64_MIN, count = 0;
        sluice_clock *clk = sluice_clock_manual_new(t);
        sluice_limiter *l;
        REQUIRE(clk && sluice_limiter_new(&c, clk, &l) == 0);
        time_units(&c, &tok, &full);
        for (int i = 0; i < 1000 && !bad; i++) {
            t = next_time(&rs, t, tok, full, back, false);
            int64_t cost = next_cost(&rs, c.limit), kw = (int64_t)ref_floor_div_(t, c.period_ms);
            sluice_decision d;
            REQUIRE(sluice_acquire_at(l, cost, t, &d) == 0);
            if (kw > win) win = kw, count = 0; /* a new window (or the first) */
            if (d.allowed != (count + cost <= c.limit)) {
                fprintf(stderr, "  [fixed_window_bound] seed %" PRIu64 " step %d at %" PRId64
                                ": allowed=%d with %" PRId64 " counted\n", seed, i, t, (int)d.allowed, count);
                bad++;
            }
            if (d.allowed) count += cost;
            if (count > c.limit) bad++;
        }
        sluice_limiter_free(l);
        sluice_clock_free(clk);
    }
    CHECK_EQ(bad, 0);
}

/* Leaky bucket delays. With s_i = t_i + delay_i (when request i proceeds),
 * in order of admission, and work draining at R per P ms:
 *  (a) delay_i <= ceil((C - n_i)*P/R): it waits behind at most C - n_i;
 *  (b) FIFO: s_i >= s_{i-1} + floor(n_{i-1}*P/R) (the previous one's
 *      drain, less the rounding of s_{i-1} up to a whole ms);
 *  (c) when it waits (delay_i > 0): s_i <= s_{i-1} + ceil(n_{i-1}*P/R);
 *  (d) exactly: in a busy period started by request f (delay_f = 0), the
 *      waiting request i proceeds at t_f + ceil(S*P/R), S the cost admitted
 *      from f up to i; and a request with delay 0 finds that work drained:
 *      t_i*R >= t_f*R + S*P;
 *  (e) the queue never exceeds C: n_i plus the cost of the earlier requests
 *      still waiting at t_i (s_j > t_i) is <= C.
 * (a)-(e) hold on backward readings too (the queue's end never moves back). */
TEST(leaky_bucket_delays) {
    int n_cases = scaled(200), bad = 0;
    rec_t *r = malloc(1500 * sizeof *r);
    for (int k = 0; k < n_cases; k++) {
        uint64_t seed = 24000 + (uint64_t)k, rs = seed;
        sluice_config c = gen_config(&rs, SLUICE_LEAKY_BUCKET, k % 4 == 3 ? 1 : k % 4);
        size_t n = drive(&c, &rs, 1500, k % 2 == 1, false, r);
        int64_t R = c.rate, P = c.period_ms, C = c.limit;
        size_t f = 0;
        ref_i128 S = 0; /* cost admitted in the busy period before i */
        for (size_t i = 0; i < n; i++) {
            ref_i128 s_i = (ref_i128)r[i].t + r[i].delay;
            const char *what = NULL;
            if (r[i].delay > ref_ceil_div_((ref_i128)(C - r[i].cost) * P, R)) what = "(a) delay too long";
            if (i > 0 && !what) {
                ref_i128 s_p = (ref_i128)r[i - 1].t + r[i - 1].delay;
                ref_i128 drain_lo = ref_floor_div_((ref_i128)r[i - 1].cost * P, R);
                ref_i128 drain_hi = ref_ceil_div_((ref_i128)r[i - 1].cost * P, R);
                if (s_i < s_p + drain_lo) what = "(b) overtakes the previous request";
                else if (r[i].delay > 0 && s_i > s_p + drain_hi) what = "(c) waits too long after the previous";
            }
            if (i == 0 && r[i].delay != 0) what = "the first request waits";
            if (!what && i > 0) {
                S += r[i - 1].cost;
                if (r[i].delay > 0) {
                    if (s_i != (ref_i128)r[f].t + ref_ceil_div_(S * P, R)) what = "(d) proceed time not exact";
                } else {
                    if ((ref_i128)r[i].t * R < (ref_i128)r[f].t * R + S * P) what = "(d) delay 0 before drained";
                    f = i, S = 0;
                }
            }
            if (!what) {
                ref_i128 q = r[i].cost;
                for (size_t j = i; j-- > 0 && (ref_i128)r[j].t + r[j].delay > r[i].t;) q += r[j].cost;
                if (q > C) what = "(e) the queue holds more than C";
            }
            if (what) {
                char text[200];
                sluice_config_format(&c, text, sizeof text);
                fprintf(stderr, "  [leaky_bucket_delays] seed %" PRIu64 " \"%s\" admission %zu at %" PRId64
                                " cost %" PRId64 " delay %" PRId64 ": %s\n",
                        seed, text, i, r[i].t, r[i].cost, r[i].delay, what);
                bad++;
                break;
            }
        }
    }
    free(r);
    CHECK_EQ(bad, 0);
}

/* ------------------------------------------------------------------------ */
/* Backward steps never create capacity                                      */
/* ------------------------------------------------------------------------ */

/* At a reading t earlier than the newest N seen: remaining(t) <= remaining(N)
 * (peeks), and a request admitted at t would be admitted at N too. */
static void backward(const char *test, int a, uint64_t base) {
    int n_cases = scaled(200), bad = 0;
    for (int k = 0; k < n_cases; k++) {
        uint64_t seed = base + (uint64_t)k, rs = seed;
        sluice_config parts[SLUICE_POLICY_MAX_PARTS];
        size_t n;
        sim_t s;
        gen_policy(&rs, a, k, parts, &n);
        REQUIRE(sim_open(&s, parts, n) == 0);
        int64_t tok, full, t = start_time(&rs), newest = t, max_cost = sim_max_cost(&s);
        time_units(&parts[0], &tok, &full);
        for (int i = 0; i < 500 && !bad; i++) {
            t = next_time(&rs, t, tok, full, true, k % 2 == 1);
            int64_t cost = next_cost(&rs, max_cost);
            if (t < newest) {
                sluice_decision at_t, at_n;
                sim_peek(&s, t, &at_t);
                sim_peek(&s, newest, &at_n);
                bool adm_t = sim_would_admit(&s, t, cost), adm_n = sim_would_admit(&s, newest, cost);
                if (at_t.remaining > at_n.remaining || (adm_t && !adm_n) || !sane(&s, &at_t, 0)) {
                    print_sim(test, seed, &s);
                    fprintf(stderr, "    step %d: at %" PRId64 " remaining %" PRId64 " admits %d; at newest %" PRId64
                                    " remaining %" PRId64 " admits %d\n",
                            i, t, at_t.remaining, (int)adm_t, newest, at_n.remaining, (int)adm_n);
                    bad++;
                }
            }
            sluice_decision d;
            sim_decide(&s, t, cost, &d);
            if (!sane(&s, &d, cost)) {
                print_sim(test, seed, &s);
                fprintf(stderr, "    step %d: a field out of range\n", i);
                bad++;
            }
            if (t > newest) newest = t;
        }
        sim_close(&s);
    }
    CHECK_EQ(bad, 0);
}

TEST(backward_token_bucket) { backward("backward_token_bucket", SLUICE_TOKEN_BUCKET, 31000); }
TEST(backward_leaky_bucket) { backward("backward_leaky_bucket", SLUICE_LEAKY_BUCKET, 32000); }
TEST(backward_fixed_window) { backward("backward_fixed_window", SLUICE_FIXED_WINDOW, 33000); }
TEST(backward_sliding_window) { backward("backward_sliding_window", SLUICE_SLIDING_WINDOW, 34000); }
TEST(backward_sliding_log) { backward("backward_sliding_log", SLUICE_SLIDING_LOG, 35000); }
TEST(backward_composite) { backward("backward_composite", 0, 36000); }

/* ------------------------------------------------------------------------ */
/* The verbs (docs/semantics.md, "Peek, refund, reset"), shadow parts and    */
/* retune                                                                    */
/* ------------------------------------------------------------------------ */

static int sim_open_shadow(sim_t *s, const sluice_config *parts, const bool *shadow, size_t n) {
    memset(s, 0, sizeof *s);
    if (sluice_policy_new_shadow("prop", parts, shadow, n, &s->pol) != 0) return -1;
    s->owns_pol = true;
    for (size_t i = 0; i < n; i++) s->pol->algo[i]->init(&s->pol->params[i], &s->st[i]);
    return 0;
}

/* The peek verb and the refund on the pure algorithms. */
static void sim_ask(sim_t *s, int64_t t, int64_t cost, sluice_decision *d) {
    sluice__policy_peek(s->pol, s->st, t, cost, d);
}
static void sim_refund(sim_t *s, int64_t t, int64_t cost) { sluice__policy_refund(s->pol, s->st, t, cost); }

/* s's states converted at t to a new configuration (fresh states of to,
 * with room for a first admission, as sluice__policy_convert asks). */
static int sim_convert(const sim_t *from, sim_t *to, const sluice_config *parts, const bool *shadow, size_t n,
                       int64_t t) {
    if (sim_open_shadow(to, parts, shadow, n) != 0) return -1;
    for (size_t i = 0; i < n; i++)
        if (to->pol->algo[i]->reserve && to->pol->algo[i]->reserve(&to->pol->params[i], &to->st[i]) != 0)
            return -1;
    return sluice__policy_convert(from->pol, from->st, to->pol, to->st, t);
}

/* gen_policy, and for composites a third of the time shadow parts. */
static void gen_policy_shadow(uint64_t *rs, int a, int k, sluice_config *parts, bool *shadow, size_t *n) {
    gen_policy(rs, a, k, parts, n);
    memset(shadow, 0, SLUICE_POLICY_MAX_PARTS * sizeof *shadow);
    if (a == 0 && k % 3 == 2)
        for (size_t i = 0; i < *n; i++) shadow[i] = check_range_(rs, 0, 2) == 0;
}

static int64_t later(int64_t t, int64_t d) { return clamp_time((ref_i128)t + d); }

/* A policy's state, either pure algorithm states (sim) or a limiter (with
 * the verbs as users call them). */
typedef struct {
    sim_t s;
    sluice_clock *clk;
    sluice_limiter *l;
} tgt_t;

static int tgt_open(tgt_t *g, const sluice_config *parts, const bool *shadow, size_t n, bool limiter,
                    int64_t start) {
    memset(g, 0, sizeof *g);
    if (sim_open_shadow(&g->s, parts, shadow, n) != 0) return -1;
    if (!limiter) return 0;
    g->clk = sluice_clock_manual_new(start);
    return g->clk && sluice_limiter_new_policy(g->s.pol, g->clk, &g->l) == 0 ? 0 : -1;
}
static void tgt_close(tgt_t *g) {
    sluice_limiter_free(g->l);
    sluice_clock_free(g->clk);
    sim_close(&g->s);
}
static void tgt_decide(tgt_t *g, int64_t t, int64_t cost, sluice_decision *d) {
    if (!g->l) sim_decide(&g->s, t, cost, d);
    else if (sluice_acquire_at(g->l, cost, t, d) != 0) abort();
}
static void tgt_ask(tgt_t *g, int64_t t, int64_t cost, sluice_decision *d) {
    if (!g->l) sim_ask(&g->s, t, cost, d);
    else if (sluice_peek_at(g->l, cost, t, d) != 0) abort();
}
static void tgt_refund(tgt_t *g, int64_t t, int64_t cost) {
    if (!g->l) sim_refund(&g->s, t, cost);
    else if (sluice_refund_at(g->l, cost, t, NULL) != 0) abort();
}
/* Part i's state at t (the vtable's peek). */
static void tgt_part_peek(tgt_t *g, size_t i, int64_t t, sluice_decision *d) {
    if (g->l) sluice__limiter_peek_part(g->l, i, t, d);
    else g->s.pol->algo[i]->peek(&g->s.pol->params[i], &g->s.st[i], t, d);
}

static void print_dec(const char *what, const sluice_decision *d) {
    char buf[300];
    ref_decision_str(d, buf, sizeof buf);
    fprintf(stderr, "    %s %s\n", what, buf);
}

static int g_undo_probes, g_undo_admitted, g_refund_probes, g_refund_to_fresh;

/* (a) A refund of an admission at the same reading is an exact undo: the
 * peek of any cost at that reading and later ones is what it was before the
 * admission. (With a shadow part that would have denied it, that part did
 * not count it but gives it back all the same: every field but
 * shadow_denied.) Also a denial changes nothing. Sims and limiters. */
static void refund_undo(const char *test, int a, uint64_t base) {
    int n_cases = scaled(a ? 60 : 90), bad = 0;
    for (int k = 0; k < n_cases && !bad; k++) {
        uint64_t seed = base + (uint64_t)k, rs = seed;
        sluice_config parts[SLUICE_POLICY_MAX_PARTS];
        bool shadow[SLUICE_POLICY_MAX_PARTS];
        size_t n;
        tgt_t g;
        gen_policy_shadow(&rs, a, k, parts, shadow, &n);
        int64_t t = start_time(&rs), tok, full;
        REQUIRE(tgt_open(&g, parts, shadow, n, k % 2 == 1, t) == 0);
        int64_t max_cost = sim_max_cost(&g.s);
        if (max_cost == SLUICE_LIMIT_MAX) max_cost = 100; /* shadow parts only: costs they see */
        time_units(&parts[check_range_(&rs, 0, (int64_t)n - 1)], &tok, &full);
        bool back = k % 4 >= 2, huge = k % 8 >= 4;
        for (int i = 0; i < 300 && !bad; i++) {
            t = next_time(&rs, t, tok, full, back, huge);
            int64_t cost = next_cost(&rs, max_cost);
            sluice_decision d;
            if (i % 3 != 0) {
                tgt_decide(&g, t, cost, &d);
                if (i % 7 == 5) tgt_refund(&g, t, next_cost(&rs, max_cost)); /* refunded states too */
                continue;
            }
            int64_t costs[3] = {1, next_cost(&rs, max_cost), max_cost};
            int64_t at[4] = {t, later(t, 1), later(t, tok), later(t, check_range_(&rs, 1, 2 * full))};
            sluice_decision before[3][4], after;
            for (int c = 0; c < 3; c++)
                for (int r = 0; r < 4; r++) tgt_ask(&g, at[r], costs[c], &before[c][r]);
            tgt_decide(&g, t, cost, &d);
            g_undo_probes++;
            if (d.allowed) tgt_refund(&g, t, cost), g_undo_admitted++;
            for (int c = 0; c < 3 && !bad; c++)
                for (int r = 0; r < 4 && !bad; r++) {
                    tgt_ask(&g, at[r], costs[c], &after);
                    if (d.allowed && d.shadow_denied) after.shadow_denied = before[c][r].shadow_denied;
                    if (!ref_decision_eq(&before[c][r], &after)) {
                        print_sim(test, seed, &g.s);
                        fprintf(stderr, "    step %d (%s): %s of cost %" PRId64 " at %" PRId64 ", then a peek of cost %" PRId64
                                        " at %" PRId64 " differs\n", i, g.l ? "limiter" : "algorithms",
                                d.allowed ? "admission and refund" : "denial", cost, t, costs[c], at[r]);
                        print_dec("before:", &before[c][r]);
                        print_dec("after: ", &after);
                        bad++;
                    }
                }
        }
        tgt_close(&g);
    }
    CHECK_EQ(bad, 0);
}

TEST(refund_undo_token_bucket) { refund_undo("refund_undo_token_bucket", SLUICE_TOKEN_BUCKET, 41000); }
TEST(refund_undo_leaky_bucket) { refund_undo("refund_undo_leaky_bucket", SLUICE_LEAKY_BUCKET, 42000); }
TEST(refund_undo_fixed_window) { refund_undo("refund_undo_fixed_window", SLUICE_FIXED_WINDOW, 43000); }
TEST(refund_undo_sliding_window) { refund_undo("refund_undo_sliding_window", SLUICE_SLIDING_WINDOW, 44000); }
TEST(refund_undo_sliding_log) { refund_undo("refund_undo_sliding_log", SLUICE_SLIDING_LOG, 45000); }
TEST(refund_undo_composite) { refund_undo("refund_undo_composite", 0, 46000); }

/* (b) A refund never makes a state more permissive than a fresh one: after
 * any refund, at that reading, before and after it, for any cost: when it
 * admits, a fresh state admits and has at least as much remaining; every
 * part's state has 0 <= remaining <= its limit. And refunding everything
 * at a reading no earlier than any seen leaves a state that decides as a
 * fresh one from then on (exactly, every field). */
static void refund_bounded(const char *test, int a, uint64_t base) {
    int n_cases = scaled(a ? 50 : 80), bad = 0;
    for (int k = 0; k < n_cases && !bad; k++) {
        uint64_t seed = base + (uint64_t)k, rs = seed;
        sluice_config parts[SLUICE_POLICY_MAX_PARTS];
        bool shadow[SLUICE_POLICY_MAX_PARTS];
        size_t n;
        tgt_t g;
        sim_t f;
        gen_policy_shadow(&rs, a, k, parts, shadow, &n);
        int64_t t = start_time(&rs), tok, full, newest = t;
        REQUIRE(tgt_open(&g, parts, shadow, n, k % 2 == 1, t) == 0);
        sim_fresh_like(&f, &g.s);
        int64_t max_cost = sim_max_cost(&g.s), max_limit = 0;
        for (size_t i = 0; i < n; i++) max_limit = max64(max_limit, parts[i].limit);
        int64_t costs_hi = max_cost == SLUICE_LIMIT_MAX ? max_limit : max_cost;
        time_units(&parts[check_range_(&rs, 0, (int64_t)n - 1)], &tok, &full);
        bool back = k % 4 >= 2, huge = k % 8 >= 4;
        for (int i = 0; i < 300 && !bad; i++) {
            t = next_time(&rs, t, tok, full, back, huge);
            if (t > newest) newest = t;
            sluice_decision d;
            tgt_decide(&g, t, next_cost(&rs, costs_hi), &d);
            if (i % 3 != 1) continue;
            int64_t rc = check_range_(&rs, 0, 2) ? next_cost(&rs, costs_hi) : costs_hi;
            tgt_refund(&g, t, rc);
            g_refund_probes++;
            int64_t costs[3] = {1, next_cost(&rs, costs_hi), costs_hi};
            int64_t at[4] = {t, later(t, -check_range_(&rs, 1, tok)), later(t, tok), later(t, full)};
            for (int r = 0; r < 4 && !bad; r++) {
                for (int c = 0; c < 3 && !bad; c++) {
                    sluice_decision x, y;
                    tgt_ask(&g, at[r], costs[c], &x);
                    sim_ask(&f, at[r], costs[c], &y);
                    if (x.allowed && (!y.allowed || x.remaining > y.remaining)) {
                        print_sim(test, seed, &g.s);
                        fprintf(stderr, "    step %d: after a refund of %" PRId64 " at %" PRId64 ", cost %" PRId64
                                        " at %" PRId64 " is more permissive than on a fresh state\n",
                                i, rc, t, costs[c], at[r]);
                        print_dec("refunded:", &x);
                        print_dec("fresh:   ", &y);
                        bad++;
                    }
                }
                for (size_t p = 0; p < n && !bad; p++) {
                    sluice_decision x;
                    tgt_part_peek(&g, p, at[r], &x);
                    if (x.remaining < 0 || x.remaining > parts[p].limit || x.reset_ms < 0) {
                        print_sim(test, seed, &g.s);
                        fprintf(stderr, "    step %d: part %zu after a refund at %" PRId64 ", at %" PRId64 "\n", i, p, t,
                                at[r]);
                        print_dec("state:", &x);
                        bad++;
                    }
                }
            }
            /* everything given back at a reading no earlier than any seen */
            int64_t times = (2 * max_limit + costs_hi - 1) / costs_hi + 1;
            if (i % 15 != 1 || times > 64 || bad) continue;
            int64_t tf = later(newest, check_range_(&rs, 0, tok));
            for (int64_t j = 0; j < times; j++) tgt_refund(&g, tf, costs_hi);
            g_refund_to_fresh++;
            int64_t at2[3] = {tf, later(tf, tok), later(tf, check_range_(&rs, 1, 2 * full))};
            for (int r = 0; r < 3 && !bad; r++)
                for (int c = 0; c < 3 && !bad; c++) {
                    sluice_decision x, y;
                    tgt_ask(&g, at2[r], costs[c], &x);
                    sim_ask(&f, at2[r], costs[c], &y);
                    if (!ref_decision_eq(&x, &y)) {
                        print_sim(test, seed, &g.s);
                        fprintf(stderr, "    step %d: everything refunded at %" PRId64 ", cost %" PRId64 " at %" PRId64
                                        " does not decide as on a fresh state\n", i, tf, costs[c], at2[r]);
                        print_dec("refunded:", &x);
                        print_dec("fresh:   ", &y);
                        bad++;
                    }
                }
        }
        sim_close(&f);
        tgt_close(&g);
    }
    CHECK_EQ(bad, 0);
}

TEST(refund_bounded_token_bucket) { refund_bounded("refund_bounded_token_bucket", SLUICE_TOKEN_BUCKET, 51000); }
TEST(refund_bounded_leaky_bucket) { refund_bounded("refund_bounded_leaky_bucket", SLUICE_LEAKY_BUCKET, 52000); }
TEST(refund_bounded_fixed_window) { refund_bounded("refund_bounded_fixed_window", SLUICE_FIXED_WINDOW, 53000); }
TEST(refund_bounded_sliding_window) { refund_bounded("refund_bounded_sliding_window", SLUICE_SLIDING_WINDOW, 54000); }
TEST(refund_bounded_sliding_log) { refund_bounded("refund_bounded_sliding_log", SLUICE_SLIDING_LOG, 55000); }
TEST(refund_bounded_composite) { refund_bounded("refund_bounded_composite", 0, 56000); }

/* (c) A peek changes nothing: two limiters of one policy run the same trace
 * of decisions and refunds, and one of them is peeked at between the steps
 * (any cost, valid or not; any reading, in the range or not; at the
 * clock's reading too): every decision of the two is the same, and so is
 * every part's state at the end. */
TEST(peeks_change_nothing) {
    int n_cases = scaled(180), bad = 0, peeks = 0;
    for (int k = 0; k < n_cases && !bad; k++) {
        uint64_t seed = 61000 + (uint64_t)k, rs = seed;
        int a = k % 6; /* 0: a composite */
        sluice_config parts[SLUICE_POLICY_MAX_PARTS];
        bool shadow[SLUICE_POLICY_MAX_PARTS];
        size_t n;
        gen_policy_shadow(&rs, a, k, parts, shadow, &n);
        int64_t t = start_time(&rs), tok, full;
        tgt_t A, B;
        REQUIRE(tgt_open(&A, parts, shadow, n, true, t) == 0);
        REQUIRE(tgt_open(&B, parts, shadow, n, true, t) == 0);
        int64_t max_cost = sim_max_cost(&A.s), hi = max_cost == SLUICE_LIMIT_MAX ? 100 : max_cost;
        time_units(&parts[0], &tok, &full);
        bool back = k % 2 == 1, huge = k % 4 >= 2;
        for (int i = 0; i < 400 && !bad; i++) {
            t = next_time(&rs, t, tok, full, back, huge);
            sluice_clock_manual_set(A.clk, t);
            sluice_clock_manual_set(B.clk, t);
            for (int64_t j = check_range_(&rs, 0, 1) ? check_range_(&rs, 1, 3) : 0; j > 0; j--) {
                int64_t cost = next_cost(&rs, hi), at = t;
                int want = 0, rc;
                switch (check_range_(&rs, 0, 9)) {
                case 0: at = later(t, -check_range_(&rs, 0, full)); break;
                case 1: at = later(t, check_range_(&rs, 0, 2 * full)); break;
                case 2: at = later(t, check_range_(&rs, -(INT64_C(1) << 45), INT64_C(1) << 45)); break;
                case 3: at = check_range_(&rs, 0, 1) ? SLUICE_TIME_MAX_MS + 1 : INT64_MIN, want = SLUICE_EINVAL; break;
                case 4: cost = check_range_(&rs, 0, 1) ? 0 : max_cost + 1; want = SLUICE_ECOST; break;
                default: break;
                }
                sluice_decision x;
                if (check_range_(&rs, 0, 4) == 0 && want != SLUICE_EINVAL) rc = sluice_peek(A.l, cost, &x);
                else rc = sluice_peek_at(A.l, cost, at, &x);
                if (rc != want || sluice_peek_at(A.l, 1, t, NULL) != SLUICE_EINVAL) {
                    fprintf(stderr, "  [peeks_change_nothing] seed %" PRIu64 " step %d: a peek returned %d, not %d\n",
                            seed, i, rc, want);
                    bad++;
                }
                peeks++;
            }
            int64_t cost = next_cost(&rs, hi);
            sluice_decision da, db;
            int ra, rb;
            if (check_range_(&rs, 0, 4) == 0) {
                ra = sluice_refund_at(A.l, cost, t, &da);
                rb = sluice_refund_at(B.l, cost, t, &db);
            } else {
                ra = sluice_acquire_at(A.l, cost, t, &da);
                rb = sluice_acquire_at(B.l, cost, t, &db);
            }
            if (ra != rb || (ra == 0 && !ref_decision_eq(&da, &db))) {
                print_sim("peeks_change_nothing", seed, &A.s);
                fprintf(stderr, "    step %d at %" PRId64 " cost %" PRId64 ": the peeked limiter decides otherwise\n", i, t,
                        cost);
                print_dec("peeked:    ", &da);
                print_dec("not peeked:", &db);
                bad++;
            }
        }
        for (size_t p = 0; p < n && !bad; p++) {
            sluice_decision x, y;
            tgt_part_peek(&A, p, t, &x);
            tgt_part_peek(&B, p, t, &y);
            if (!ref_decision_eq(&x, &y)) {
                print_sim("peeks_change_nothing", seed, &A.s);
                fprintf(stderr, "    part %zu's state differs at the end\n", p);
                bad++;
            }
        }
        tgt_close(&A);
        tgt_close(&B);
    }
    CHECK(peeks > 1000);
    CHECK_EQ(bad, 0);
}

/* (d) Shadow parts. A policy of enforced and shadow parts (or shadow parts
 * only) runs a trace of decisions, refunds and peeks on a limiter beside a
 * limiter of its enforced parts alone and, for each shadow part, its own
 * state (pure algorithm) that counts an admitted request when it would
 * admit it itself and gives back every refund: every decision is the
 * enforced-only limiter's (part renumbered), so a shadow part never denies
 * and an enforced part decides as without shadow parts beside it;
 * shadow_denied is true exactly when some shadow part would deny (its
 * limit below the cost, or its state); a policy of shadow parts only admits
 * everything, with remaining SLUICE_LIMIT_MAX and the rest 0; and every
 * part's state is that of its counterpart. */
TEST(shadow_parts) {
    int n_cases = scaled(150), bad = 0, flagged = 0, admitted_flagged = 0;
    for (int k = 0; k < n_cases && !bad; k++) {
        uint64_t seed = 62000 + (uint64_t)k, rs = seed;
        size_t n_enf = k % 5 == 0 ? 0 : (size_t)check_range_(&rs, 1, 3), n_sh = (size_t)check_range_(&rs, 1, 3);
        size_t n = n_enf + n_sh;
        sluice_config parts[SLUICE_POLICY_MAX_PARTS], enf[SLUICE_POLICY_MAX_PARTS];
        bool shadow[SLUICE_POLICY_MAX_PARTS];
        size_t pos_enf[SLUICE_POLICY_MAX_PARTS], pos_sh[SLUICE_POLICY_MAX_PARTS];
        int cls = (int)check_range_(&rs, 0, 2);
        /* which positions are shadow: n_sh of them, at random */
        for (size_t i = 0; i < n; i++) shadow[i] = i < n_sh;
        for (size_t i = n; i-- > 1;) {
            size_t j = (size_t)check_range_(&rs, 0, (int64_t)i);
            bool x = shadow[i];
            shadow[i] = shadow[j], shadow[j] = x;
        }
        size_t ie = 0, is = 0;
        for (size_t i = 0; i < n; i++) {
            parts[i] = gen_config(&rs, (sluice_algorithm)check_range_(&rs, 1, 5), cls);
            if (shadow[i]) pos_sh[is++] = i;
            else enf[ie] = parts[i], pos_enf[ie++] = i;
        }
        int64_t t = start_time(&rs), tok, full;
        tgt_t F, E;
        sim_t S[SLUICE_POLICY_MAX_PARTS];
        REQUIRE(tgt_open(&F, parts, shadow, n, true, t) == 0);
        if (n_enf) REQUIRE(tgt_open(&E, enf, NULL, n_enf, true, t) == 0);
        for (size_t j = 0; j < n_sh; j++) REQUIRE(sim_open(&S[j], &parts[pos_sh[j]], 1) == 0);
        int64_t max_cost = sim_max_cost(&F.s), hi = max_cost;
        if (!n_enf) { /* costs about the shadow parts' limits, some above */
            hi = 0;
            for (size_t j = 0; j < n_sh; j++) hi = max64(hi, parts[pos_sh[j]].limit + 1);
        }
        time_units(&parts[check_range_(&rs, 0, (int64_t)n - 1)], &tok, &full);
        bool back = k % 2 == 1, huge = k % 4 >= 2;
        for (int i = 0; i < 400 && !bad; i++) {
            t = next_time(&rs, t, tok, full, back, huge);
            int64_t cost = next_cost(&rs, hi);
            int u = (int)check_range_(&rs, 0, 99), verb = u < 70 ? 0 : u < 85 ? 1 : 2; /* decide, refund, ask */
            bool would[SLUICE_POLICY_MAX_PARTS], any_denies = false;
            if (verb == 1) { /* the refund: every part, shadow ones too; then an ask of cost 1 */
                for (size_t j = 0; j < n_sh; j++) sim_refund(&S[j], t, cost);
            }
            int64_t asked = verb == 1 ? 1 : cost;
            for (size_t j = 0; j < n_sh; j++) {
                sluice_decision x;
                would[j] = asked <= parts[pos_sh[j]].limit;
                if (would[j]) part_decide(&S[j], 0, t, asked, &x, 0), would[j] = x.allowed;
                any_denies |= !would[j];
            }
            sluice_decision df, de;
            int rf = verb == 0 ? sluice_acquire_at(F.l, cost, t, &df)
                   : verb == 1 ? sluice_refund_at(F.l, cost, t, &df) : sluice_peek_at(F.l, cost, t, &df);
            int re = 0;
            memset(&de, 0, sizeof de);
            if (n_enf)
                re = verb == 0 ? sluice_acquire_at(E.l, cost, t, &de)
                   : verb == 1 ? sluice_refund_at(E.l, cost, t, &de) : sluice_peek_at(E.l, cost, t, &de);
            if (rf != re || rf != 0) {
                fprintf(stderr, "  [shadow_parts] seed %" PRIu64 " step %d: rc %d and %d\n", seed, i, rf, re);
                bad++;
                break;
            }
            sluice_decision want = de;
            if (n_enf) {
                want.part = (int32_t)pos_enf[de.part];
            } else {
                memset(&want, 0, sizeof want);
                want.allowed = want.enforced = true;
                want.remaining = SLUICE_LIMIT_MAX;
            }
            want.shadow_denied = any_denies;
            flagged += any_denies;
            if (!ref_decision_eq(&df, &want)) {
                print_sim("shadow_parts", seed, &F.s);
                fprintf(stderr, "    step %d: %s at %" PRId64 " cost %" PRId64 "\n", i,
                        verb == 0 ? "decide" : verb == 1 ? "refund" : "ask", t, cost);
                print_dec("with shadow parts:", &df);
                print_dec("want:             ", &want);
                bad++;
                break;
            }
            if (verb == 0 && df.allowed) {
                admitted_flagged += any_denies;
                for (size_t j = 0; j < n_sh; j++)
                    if (would[j]) sim_decide(&S[j], t, cost, &de);
            }
            if (i % 10 != 0) continue;
            for (size_t p = 0; p < n && !bad; p++) { /* every part's state */
                sluice_decision x, y;
                sluice__limiter_peek_part(F.l, p, t, &x);
                size_t j = 0;
                if (shadow[p]) {
                    while (pos_sh[j] != p) j++;
                    S[j].pol->algo[0]->peek(&S[j].pol->params[0], &S[j].st[0], t, &y);
                } else {
                    while (pos_enf[j] != p) j++;
                    sluice__limiter_peek_part(E.l, j, t, &y);
                }
                if (!ref_decision_eq(&x, &y)) {
                    print_sim("shadow_parts", seed, &F.s);
                    fprintf(stderr, "    step %d: part %zu's state at %" PRId64 "\n", i, p, t);
                    print_dec("with the others:", &x);
                    print_dec("alone:          ", &y);
                    bad++;
                }
            }
        }
        tgt_close(&F);
        if (n_enf) tgt_close(&E);
        for (size_t j = 0; j < n_sh; j++) sim_close(&S[j]);
    }
    CHECK(flagged > 0 && admitted_flagged > 0);
    CHECK_EQ(bad, 0);
}

/* (e) Retune (docs/semantics.md, "Retune"). */

/* A valid configuration like c with a limit at most c's: the same algorithm
 * and period (another rate perhaps: the carry), or another algorithm or
 * period (charged). */
static sluice_config not_raised(uint64_t *rs, const sluice_config *c) {
    sluice_config x = *c;
    int u = (int)check_range_(rs, 0, 9);
    if (u < 5) {
        if (is_bucket(x.algorithm) && check_range_(rs, 0, 2) == 0) x.rate = log_uniform(rs, 1, 100000);
    } else {
        sluice_algorithm a = u < 8 ? (sluice_algorithm)check_range_(rs, 1, 5) : c->algorithm;
        x = gen_config(rs, a, (int)check_range_(rs, 0, 1));
    }
    x.limit = check_range_(rs, 0, 1) ? c->limit : check_range_(rs, 1, c->limit);
    if (x.limit > c->limit) x.limit = c->limit;
    return sluice_config_validate(&x, NULL, 0) == 0 ? x : *c;
}

static int g_at_limit, g_raised, g_charged;

/* A key at its limit (cost 1 denied) stays denied after a change that does
 * not raise any part's limit, whatever else changes. */
TEST(retune_at_limit_stays_denied) {
    int n_cases = scaled(300), bad = 0;
    for (int k = 0; k < n_cases && !bad; k++) {
        uint64_t seed = 63000 + (uint64_t)k, rs = seed;
        sluice_config parts[SLUICE_POLICY_MAX_PARTS], np[SLUICE_POLICY_MAX_PARTS];
        size_t n;
        sim_t s, c;
        gen_policy(&rs, k % 6, k, parts, &n);
        REQUIRE(sim_open(&s, parts, n) == 0);
        int64_t t = start_time(&rs), tok, full, max_cost = sim_max_cost(&s);
        time_units(&parts[0], &tok, &full);
        int steps = (int)check_range_(&rs, 0, 100);
        sluice_decision d;
        for (int i = 0; i < steps; i++) {
            t = next_time(&rs, t, tok, full, k % 2 == 1, false);
            sim_decide(&s, t, next_cost(&rs, max_cost), &d);
        }
        for (int i = 0; i < 20; i++) { /* fill it up at t */
            sim_ask(&s, t, 1, &d);
            if (!d.allowed) break;
            sim_decide(&s, t, min64(d.remaining + 1, max_cost), &d);
        }
        sim_ask(&s, t, 1, &d);
        if (d.allowed) {
            sim_close(&s);
            continue;
        }
        g_at_limit++;
        for (size_t i = 0; i < n; i++) np[i] = not_raised(&rs, &parts[i]);
        REQUIRE(sim_convert(&s, &c, np, NULL, n, t) == 0);
        sim_ask(&c, t, 1, &d);
        if (d.allowed) {
            print_sim("retune_at_limit_stays_denied", seed, &s);
            print_sim("  to", seed, &c);
            fprintf(stderr, "    at %" PRId64 ": denied before, admitted after\n", t);
            print_dec("after:", &d);
            bad++;
        }
        sim_close(&c);
        sim_close(&s);
    }
    CHECK(g_at_limit > n_cases / 2);
    CHECK_EQ(bad, 0);
}

/* Raising only a bucket's capacity keeps its exact backlog (the TAT as it
 * was): the same reset and delay, remaining up by the difference d, and a
 * request of cost n + d waits exactly as one of cost n did; parts that do
 * not change decide exactly as before. At the newest reading and later
 * (a trace forward only: the backlog is within the old capacity). */
TEST(retune_raise_capacity_keeps_backlog) {
    int n_cases = scaled(300), bad = 0;
    for (int k = 0; k < n_cases && !bad; k++) {
        uint64_t seed = 64000 + (uint64_t)k, rs = seed;
        sluice_config parts[SLUICE_POLICY_MAX_PARTS], np[SLUICE_POLICY_MAX_PARTS];
        int64_t delta[SLUICE_POLICY_MAX_PARTS];
        size_t n;
        sim_t s, c;
        gen_policy(&rs, k % 3 == 0 ? 0 : k % 2 ? SLUICE_LEAKY_BUCKET : SLUICE_TOKEN_BUCKET, k, parts, &n);
        REQUIRE(sim_open(&s, parts, n) == 0);
        int64_t t = start_time(&rs), tok, full, max_cost = sim_max_cost(&s);
        time_units(&parts[0], &tok, &full);
        sluice_decision d;
        for (int i = 0, steps = (int)check_range_(&rs, 1, 150); i < steps; i++) {
            t = next_time(&rs, t, tok, full, false, k % 4 == 3);
            sim_decide(&s, t, next_cost(&rs, max_cost), &d);
        }
        t = later(t, check_range_(&rs, 0, tok));
        for (size_t i = 0; i < n; i++) {
            np[i] = parts[i];
            delta[i] = 0;
            if (!is_bucket(parts[i].algorithm)) continue;
            int64_t room = SLUICE_LIMIT_MAX - parts[i].limit;
            delta[i] = room == 0 ? 0 : check_range_(&rs, 0, 1) ? check_range_(&rs, 0, min64(room, 3)) : log_uniform(&rs, 1, room);
            np[i].limit += delta[i];
            if (sluice_config_validate(&np[i], NULL, 0) != 0) np[i] = parts[i], delta[i] = 0;
        }
        REQUIRE(sim_convert(&s, &c, np, NULL, n, t) == 0);
        const char *what = NULL;
        int64_t at[3] = {t, later(t, tok), later(t, check_range_(&rs, 1, full))};
        for (size_t i = 0; i < n && !what; i++) {
            const sluice__algo *al = s.pol->algo[i];
            if (is_bucket(parts[i].algorithm)) { /* the TAT itself, unless full (then fresh) */
                bool full_now = al->is_fresh(&s.pol->params[i], &s.st[i], t);
                g_raised += !full_now && delta[i] > 0;
                if (full_now ? !al->is_fresh(&c.pol->params[i], &c.st[i], t) : s.st[i].tat != c.st[i].tat)
                    what = "the TAT changed";
            }
            for (int r = 0; r < 3 && !what; r++) {
                sluice_decision x, y;
                al->peek(&s.pol->params[i], &s.st[i], at[r], &x);
                al->peek(&c.pol->params[i], &c.st[i], at[r], &y);
                x.remaining += delta[i], x.limit += delta[i];
                if (!ref_decision_eq(&x, &y)) what = "a part's state (remaining up by the difference, the rest the same)";
                int64_t costs[3] = {1, next_cost(&rs, parts[i].limit), parts[i].limit};
                for (int q = 0; q < 3 && !what; q++) {
                    part_decide(&s, i, at[r], costs[q], &x, 0);
                    part_decide(&c, i, at[r], costs[q] + delta[i], &y, 0);
                    /* remaining: after the admission the same; on a denial, what is free now */
                    if (x.allowed != y.allowed || x.retry_after_ms != y.retry_after_ms ||
                        x.delay_ms != y.delay_ms || x.remaining + (x.allowed ? 0 : delta[i]) != y.remaining)
                        what = "cost n + d does not wait as cost n did";
                    part_decide(&c, i, at[r], costs[q], &y, 0);
                    x.remaining += delta[i], x.limit += delta[i];
                    if (x.allowed && !ref_decision_eq(&x, &y)) what = "cost n is not decided as before";
                }
            }
        }
        if (what) {
            print_sim("retune_raise_capacity_keeps_backlog", seed, &s);
            print_sim("  to", seed, &c);
            fprintf(stderr, "    converted at %" PRId64 ": %s\n", t, what);
            bad++;
        }
        sim_close(&c);
        sim_close(&s);
    }
    CHECK(g_raised > n_cases / 4); /* buckets with a backlog, raised */
    CHECK_EQ(bad, 0);
}

/* Usage survives a change of algorithm (or of period) by the rule: what was
 * in use in part i at t, limit - remaining, capped at the new limit, is
 * admitted at t into a fresh state of the new part: the converted part
 * decides exactly as that state does, at every reading. */
TEST(retune_charges_usage) {
    int n_cases = scaled(300), bad = 0;
    for (int k = 0; k < n_cases && !bad; k++) {
        uint64_t seed = 65000 + (uint64_t)k, rs = seed;
        sluice_config parts[SLUICE_POLICY_MAX_PARTS], np[SLUICE_POLICY_MAX_PARTS];
        size_t n;
        sim_t s, c;
        gen_policy(&rs, k % 6, k, parts, &n);
        REQUIRE(sim_open(&s, parts, n) == 0);
        int64_t t = start_time(&rs), tok, full, max_cost = sim_max_cost(&s);
        time_units(&parts[0], &tok, &full);
        sluice_decision d;
        for (int i = 0, steps = (int)check_range_(&rs, 1, 150); i < steps; i++) {
            t = next_time(&rs, t, tok, full, k % 2 == 1, k % 4 == 3);
            sim_decide(&s, t, next_cost(&rs, max_cost), &d);
        }
        if (k % 5 == 4) t = later(t, -check_range_(&rs, 1, full)); /* converted at a backward reading */
        for (size_t i = 0; i < n; i++) {
            sluice_algorithm a = (sluice_algorithm)check_range_(&rs, 1, 4);
            if (a >= parts[i].algorithm) a = (sluice_algorithm)(a + 1);
            if (check_range_(&rs, 0, 4) == 0) a = parts[i].algorithm; /* the same, another period */
            do np[i] = gen_config(&rs, a, (int)check_range_(&rs, 0, 2));
            while (a == parts[i].algorithm && np[i].period_ms == parts[i].period_ms);
        }
        REQUIRE(sim_convert(&s, &c, np, NULL, n, t) == 0);
        const char *what = NULL;
        size_t bad_part = 0;
        for (size_t i = 0; i < n && !what; i++) {
            sluice_decision x, y;
            s.pol->algo[i]->peek(&s.pol->params[i], &s.st[i], t, &x);
            int64_t used = min64(parts[i].limit - x.remaining, np[i].limit);
            sim_t ref;
            REQUIRE(sim_open(&ref, &np[i], 1) == 0);
            if (used > 0) {
                part_decide(&ref, 0, t, used, &y, 1);
                if (!y.allowed) what = "(a fresh state does not admit the charge)";
                g_charged++;
            }
            int64_t ntok, nfull;
            time_units(&np[i], &ntok, &nfull);
            int64_t at[4] = {t, later(t, ntok), later(t, check_range_(&rs, 1, 2 * nfull)), later(t, -check_range_(&rs, 1, nfull))};
            for (int r = 0; r < 4 && !what; r++) {
                c.pol->algo[i]->peek(&c.pol->params[i], &c.st[i], at[r], &x);
                ref.pol->algo[0]->peek(&ref.pol->params[0], &ref.st[0], at[r], &y);
                if (r == 0 && x.remaining != np[i].limit - used) what = "remaining is not the new limit less the charge";
                else if (!ref_decision_eq(&x, &y)) what = "the state is not a fresh one charged with what was in use";
                int64_t costs[2] = {1, np[i].limit};
                for (int q = 0; q < 2 && !what; q++) {
                    part_decide(&c, i, at[r], costs[q], &x, 0);
                    part_decide(&ref, 0, at[r], costs[q], &y, 0);
                    if (!ref_decision_eq(&x, &y)) what = "decides otherwise than a fresh state charged with what was in use";
                }
                if (what) print_dec("converted:", &x), print_dec("charged:  ", &y);
            }
            sim_close(&ref);
            bad_part = i;
        }
        if (what) {
            print_sim("retune_charges_usage", seed, &s);
            print_sim("  to", seed, &c);
            fprintf(stderr, "    converted at %" PRId64 ", part %zu: %s\n", t, bad_part, what);
            bad++;
        }
        sim_close(&c);
        sim_close(&s);
    }
    CHECK(g_charged > n_cases / 2);
    CHECK_EQ(bad, 0);
}

TEST(summary) {
    printf("     probes: %d retry, %d reset, %d remaining\n", g_probes_retry, g_probes_reset, g_probes_remaining);
    printf("     verbs: %d undo probes (%d admitted and refunded), %d refund probes (%d refunded to fresh);\n"
           "     retune: %d at the limit, %d capacities of a backlog raised, %d parts charged\n",
           g_undo_probes, g_undo_admitted, g_refund_probes, g_refund_to_fresh, g_at_limit, g_raised, g_charged);
    if (g_probes_retry + g_probes_reset + g_probes_remaining == 0) return; /* run alone: nothing to check */
    CHECK(g_probes_retry > 0 && g_probes_reset > 0 && g_probes_remaining > 0); /* the exactness checks ran */
}

TEST_MAIN(exact_token_bucket, exact_leaky_bucket, exact_fixed_window, exact_sliding_window, exact_sliding_log,
          exact_composite, exact_bucket_limiter_word, bucket_interval_bound, sliding_log_window_bound,
          fixed_window_bound, leaky_bucket_delays, backward_token_bucket, backward_leaky_bucket,
          backward_fixed_window, backward_sliding_window, backward_sliding_log, backward_composite,
          refund_undo_token_bucket, refund_undo_leaky_bucket, refund_undo_fixed_window, refund_undo_sliding_window,
          refund_undo_sliding_log, refund_undo_composite, refund_bounded_token_bucket, refund_bounded_leaky_bucket,
          refund_bounded_fixed_window, refund_bounded_sliding_window, refund_bounded_sliding_log,
          refund_bounded_composite, peeks_change_nothing, shadow_parts, retune_at_limit_stays_denied,
          retune_raise_capacity_keeps_backlog, retune_charges_usage, summary)
