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
 *  - every field is in range on every decision.
 *
 * States are explored with the pure algorithms (states copied, so that a
 * probe is "no other traffic"), and through real limiters (the one-part
 * bucket's lock-free word is a separate implementation; probes there replay
 * the admissions into a new limiter). SLUICE_TEST_SCALE scales the work. */
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
    if (sim_n(s) == 1) {
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

static int64_t sim_max_cost(const sim_t *s) {
    int64_t m = INT64_MAX;
    for (size_t i = 0; i < sim_n(s); i++) m = min64(m, s->pol->parts[i].limit);
    return m;
}

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

TEST(summary) {
    printf("     probes: %d retry, %d reset, %d remaining\n", g_probes_retry, g_probes_reset, g_probes_remaining);
    if (g_probes_retry + g_probes_reset + g_probes_remaining == 0) return; /* run alone: nothing to check */
    CHECK(g_probes_retry > 0 && g_probes_reset > 0 && g_probes_remaining > 0); /* the exactness checks ran */
}

TEST_MAIN(exact_token_bucket, exact_leaky_bucket, exact_fixed_window, exact_sliding_window, exact_sliding_log,
          exact_composite, exact_bucket_limiter_word, bucket_interval_bound, sliding_log_window_bound,
          fixed_window_bound, leaky_bucket_delays, backward_token_bucket, backward_leaky_bucket,
          backward_fixed_window, backward_sliding_window, backward_sliding_log, backward_composite, summary)
