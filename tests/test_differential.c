/* test_differential.c: the real code against the reference models
 * (ref_models.h) on long random traces, decision by decision.
 *
 * Each trace is a sequence of readings and costs: readings mostly advance by
 * small steps (scaled to the configuration's token time and window), often
 * stay put, land exactly on the last retry_after_ms / reset_ms and one ms
 * before, sometimes jump by huge idle gaps (up to ~2^60 ms per trace), and
 * sometimes step backwards (a little or a lot). Costs are biased to small,
 * often exactly the last remaining (+1), sometimes the limit, and sometimes
 * invalid (0, -1, limit + 1, ...) which must be SLUICE_ECOST and change
 * nothing. Among the decisions: the verbs (docs/semantics.md, "Peek,
 * refund, reset"): asks (the peek verb at a cost), refunds (costs mostly
 * those admitted lately, often right at the admission's reading: an exact
 * undo; sometimes invalid), and rarely resets. Composite cases have shadow
 * parts a third of the time (now and then nothing else). Every trace runs,
 * in lock step with the model, through
 *   (a) the pure algorithm: the vtable of sluice__algo_of() for one part,
 *       sluice__policy_decide() for composites, plus each part's peek and
 *       is_fresh at random readings, and a check that a denial leaves the
 *       state's bytes untouched; the verbs as sluice__policy_peek (which
 *       must change nothing), sluice__policy_refund (then a peek of cost 1)
 *       and a fresh init (then a peek of cost 1);
 *   (b) a real limiter (sluice_limiter_new or _new_policy, manual clock,
 *       sluice_acquire_at, sluice_peek_at, sluice_refund_at, sluice_reset at
 *       the manual clock set to the step's reading), including readings
 *       outside the accepted range.
 * A quarter of the traces also retune (docs/semantics.md, "Retune") now and
 * then: the algorithm states are converted to a new configuration drawn
 * from the one in force (sluice__policy_convert; mostly the same algorithm
 * and period with another limit, the carry case; sometimes another
 * algorithm or period, a part more or fewer, shadow flags changed), the
 * model with ref_model_retune, and the trace goes on under the new one
 * (the limiter, which keeps its configuration, is compared no more);
 * among them retunes far before a bucket's TAT (carry_is_far), where the
 * backlog times the new token size passes 2^126.
 * Every field must be identical, shadow_denied too. On the first
 * disagreement the trace stops; the test prints the seed, configuration,
 * step, reading, cost and both decisions, then shrinks the trace to a short
 * reproducer and prints it.
 *
 * Two white-box additions: traces that start exactly where the one-part
 * bucket limiter's 64-bit word reaches its extremes (diff_word_edges), and
 * sliding-log running totals moved up near 2^62 where the ring renormalizes
 * them (tcase.shift_totals), which no trace of realistic length reaches.
 *
 * About 2 million steps at SLUICE_TEST_SCALE=1 (the default): ~2 s at
 * -O2, ~11 s under ASan+UBSan at -O0. The variable scales the number of
 * traces (e.g. 50 for a long hunt). SLUICE_TEST_SEED=S reruns only the trace
 * of seed S (as printed on a failure) with its full report. */
#include "check.h"
#include "internal.h"
#include "ref_models.h"

#include <limits.h>

/* ------------------------------------------------------------------------ */
/* Random configurations                                                     */
/* ------------------------------------------------------------------------ */


#define DAY30 INT64_C(2592000000)

static const int64_t edge_buckets[][3] = {
    /* capacity, rate, period_ms */
    {1000000000, 1000000000, 1000},        /* 10^9 per second, 10^9 deep */
    {1000000000, 1, DAY30},                /* 1 per 30 days, 10^9 deep */
    {1, 1, DAY30},                         /* 1 per 30 days */
    {2, 1, DAY30},
    {1000000000, 999999937, 7000},         /* an odd prime rate */
    {3, 999999937, 7000},
    {1000000000, 1000000000000, 1000000},  /* largest R, at 10^9/s */
    {1, 1000000000000, DAY30},
    {1000000000, 999999999999, DAY30},     /* r, p both large */
    {5, DAY30 - 1, DAY30},                 /* r = 2591999999, p = DAY30 */
    {999999937, 999999929, 999999893},
    {7, 1000000000, 1000},
    {1, 1000000000, 1000},
    {1000000000, 1, 1},
    {1000000000, 1000000, 1},              /* 10^6 per ms */
    {1, 1, 1},
    {3, 1, 1000},
    {2, 4, 1},                             /* r = 4, p = 1: (t - epoch)*r can be -2^63 */
    {1, 1024, 1},
    {3, 65536, 1},
};

static const int64_t edge_windows[][2] = {
    /* limit, window_ms */
    {1000000000, DAY30}, {1, DAY30},          {1000000000, 1}, {1, 1},
    {999999937, 999983}, {7, DAY30},          {1000000000, 1000}, {3, DAY30 - 1},
    {10, 1000},          {2, 3},              {1000000000, 999999937},
};

static bool is_bucket(sluice_algorithm a) { return a == SLUICE_TOKEN_BUCKET || a == SLUICE_LEAKY_BUCKET; }

static sluice_config make_config(sluice_algorithm a, int64_t limit, int64_t rate, int64_t period) {
    sluice_config c;
    memset(&c, 0, sizeof c);
    c.algorithm = a;
    c.limit = limit;
    c.rate = is_bucket(a) ? rate : 0;
    c.period_ms = period;
    return c;
}

/* Configuration classes: 0 small, 1 medium, 2 anywhere in the accepted
 * ranges (log-uniform), 3 edges. Always valid. */
static sluice_config gen_config(uint64_t *rs, sluice_algorithm a, int cls) {
    for (int tries = 0; tries < 1000; tries++) {
        sluice_config c;
        if (cls == 3) {
            if (is_bucket(a)) {
                size_t i = (size_t)check_range_(rs, 0, sizeof edge_buckets / sizeof edge_buckets[0] - 1);
                c = make_config(a, edge_buckets[i][0], edge_buckets[i][1], edge_buckets[i][2]);
            } else {
                size_t i = (size_t)check_range_(rs, 0, sizeof edge_windows / sizeof edge_windows[0] - 1);
                c = make_config(a, edge_windows[i][0], 0, edge_windows[i][1]);
            }
        } else if (cls == 0) {
            c = is_bucket(a) ? make_config(a, check_range_(rs, 1, 10), check_range_(rs, 1, 7),
                                           check_range_(rs, 1, 13))
                             : make_config(a, check_range_(rs, 1, 10), 0, check_range_(rs, 1, 50));
        } else if (cls == 1) {
            c = is_bucket(a) ? make_config(a, log_uniform(rs, 1, 10000), log_uniform(rs, 1, 10000),
                                           log_uniform(rs, 1, 1000000))
                             : make_config(a, log_uniform(rs, 1, 10000), 0, log_uniform(rs, 1, 1000000));
        } else {
            c = make_config(a, log_uniform(rs, 1, SLUICE_LIMIT_MAX), log_uniform(rs, 1, SLUICE_RATE_MAX),
                            log_uniform(rs, 1, SLUICE_PERIOD_MAX_MS));
        }
        if (sluice_config_validate(&c, NULL, 0) == 0) return c;
        if (cls == 3) {
            char err[200];
            sluice_config_validate(&c, err, sizeof err);
            fprintf(stderr, "edge configuration rejected: %s\n", err);
            CHECK(!"edge configuration rejected");
        }
    }
    fprintf(stderr, "gen_config: no valid configuration\n");
    abort();
}

/* ------------------------------------------------------------------------ */
/* Traces                                                                    */
/* ------------------------------------------------------------------------ */

/* K_PEEK looks at each part's state (the vtable's peek and is_fresh); K_ASK
 * is the peek verb (the decision a request of cost would get). K_RETUNE's
 * cost is the seed of the new configuration, drawn from the one in force
 * (retune_config), so that a shrunk trace still replays. */
enum { K_DECIDE, K_PEEK, K_BADTIME, K_ASK, K_REFUND, K_RESET, K_RETUNE };

typedef struct {
    int64_t t, cost;
    int kind;
} step_t;

static const char *kind_name(int kind) {
    static const char *names[] = {"decide", "peek", "bad reading", "ask", "refund", "reset", "retune"};
    return names[kind];
}

typedef struct {
    const char *test;
    uint64_t seed;
    size_t n_parts;
    sluice_config parts[SLUICE_POLICY_MAX_PARTS];
    bool shadow[SLUICE_POLICY_MAX_PARTS]; /* shadow parts (composites only) */
    bool retune;         /* the trace has K_RETUNE steps (the limiter stops at the first) */
    int use_policy;      /* one part through sluice_limiter_new_policy */
    int64_t clock_start; /* the manual clock at the limiter's creation */
    bool shift_totals;   /* logs: move the running totals up near 2^62 now and then */
} tcase_t;

/* The step generator's state. It sees the model's last decision so that it
 * can aim at the exact boundaries (retry, reset, remaining). */
typedef struct {
    uint64_t rs;
    int64_t t;
    bool huge_ok;
    ref_i128 huge_left; /* budget of huge forward gaps left */
    size_t n;
    int64_t tok[SLUICE_POLICY_MAX_PARTS], full[SLUICE_POLICY_MAX_PARTS];
    int64_t max_cost, max_limit;
    bool has_last;
    sluice_decision last;
    int64_t last_cost;
    bool retune; /* may draw K_RETUNE steps */
    /* the costs of the last admissions, what refunds mostly give back */
    int64_t recent[8];
    size_t n_recent;
    bool last_allowed; /* the last decision admitted (at reading t) */
    /* a one-part bucket: the limiter's lock-free word is (TAT - epoch*r) in
     * 64 bits; readings are aimed at where (t - epoch)*r and that plus the
     * backlog cross +-2^63 */
    bool word;
    int64_t epoch;
    ref_i128 r, tau;
} gen_t;

static int64_t clamp_time(ref_i128 t) {
    if (t < SLUICE_TIME_MIN_MS) return SLUICE_TIME_MIN_MS;
    if (t > SLUICE_TIME_MAX_MS) return SLUICE_TIME_MAX_MS;
    return (int64_t)t;
}

/* The generator's view of the configuration in force. */
static void gen_reconfig(gen_t *g, const sluice_config *parts, const bool *shadow, size_t n) {
    g->n = n;
    g->max_cost = SLUICE_LIMIT_MAX; /* the least limit of the enforced parts */
    g->max_limit = 0;
    g->word = false;
    g->has_last = false;
    for (size_t i = 0; i < n; i++) {
        const sluice_config *c = &parts[i];
        ref_i128 tok, full;
        if (is_bucket(c->algorithm)) {
            tok = ref_ceil_div_(c->period_ms, c->rate);              /* one token */
            full = ref_ceil_div_((ref_i128)c->limit * c->period_ms, c->rate); /* all */
        } else {
            tok = c->period_ms / c->limit;
            full = c->period_ms;
        }
        if (tok < 1) tok = 1;
        if (full < 1) full = 1;
        if (full > ((ref_i128)1 << 50)) full = (ref_i128)1 << 50;
        if (tok > full) tok = full;
        g->tok[i] = (int64_t)tok;
        g->full[i] = (int64_t)full;
        if (!shadow[i]) g->max_cost = min64(g->max_cost, c->limit);
        g->max_limit = max64(g->max_limit, c->limit);
    }
}

static void gen_init(gen_t *g, const tcase_t *tc, uint64_t seed, bool huge_ok, int64_t start) {
    memset(g, 0, sizeof *g);
    g->rs = seed;
    g->t = start;
    g->huge_ok = huge_ok;
    g->huge_left = (ref_i128)1 << 60;
    g->retune = tc->retune;
    gen_reconfig(g, tc->parts, tc->shadow, tc->n_parts);
    if (tc->n_parts == 1 && is_bucket(tc->parts[0].algorithm)) {
        ref_part m;
        ref_part_init(&m, &tc->parts[0]);
        g->word = true;
        g->epoch = tc->clock_start;
        g->r = m.r;
        g->tau = m.tau;
    }
}

static int64_t gen_cost(gen_t *g) {
    uint64_t *rs = &g->rs;
    int u = (int)check_range_(rs, 0, 999);
    int64_t L = g->max_cost;
    if (g->has_last && u < 100) /* right at the boundary */
        return max64(1, min64(L, g->last.remaining + check_range_(rs, 0, 1)));
    if (g->has_last && !g->last.allowed && u < 160) return g->last_cost; /* the same again */
    if (u < 500) return 1;
    if (u < 680) return check_range_(rs, 1, min64(L, 3));
    if (u < 780) return check_range_(rs, 1, min64(L, 10));
    if (u < 920) return log_uniform(rs, 1, L);
    if (u < 960) return L;
    if (u < 975 && g->max_limit > L) return check_range_(rs, L + 1, g->max_limit); /* over one part */
    switch (check_range_(rs, 0, 5)) {
    case 0: return 0;
    case 1: return -1;
    case 2: return L + 1;
    case 3: return INT64_MIN;
    case 4: return INT64_MAX;
    default: return -L;
    }
}

/* A refund's cost: mostly what was admitted lately (one of them, or a few
 * together), else small, large, the largest, or invalid (SLUICE_ECOST). */
static int64_t gen_refund_cost(gen_t *g) {
    uint64_t *rs = &g->rs;
    int u = (int)check_range_(rs, 0, 99);
    int64_t L = g->max_cost;
    if (u < 45 && g->n_recent) return g->recent[check_range_(rs, 0, (int64_t)g->n_recent - 1)];
    if (u < 53 && g->n_recent) { /* more than one admission gave back at once */
        int64_t sum = 0;
        for (size_t k = 0; k < g->n_recent && sum < L; k++) sum += g->recent[k];
        return min64(sum, L);
    }
    if (u < 68) return 1;
    if (u < 78) return check_range_(rs, 1, min64(L, 3));
    if (u < 86) return log_uniform(rs, 1, L);
    if (u < 90) return L;
    switch (check_range_(rs, 0, 5)) {
    case 0: return 0;
    case 1: return -1;
    case 2: return L + 1;
    case 3: return INT64_MIN;
    case 4: return INT64_MAX;
    default: return -L;
    }
}

static step_t gen_step(gen_t *g) {
    uint64_t *rs = &g->rs;
    step_t s = {g->t, 1, K_DECIDE};
    size_t pi = (size_t)check_range_(rs, 0, (int64_t)g->n - 1);
    int64_t tok = g->tok[pi], full = g->full[pi];
    int u = (int)check_range_(rs, 0, 999);
    if (u < 40) { /* look at the state: peek and is_fresh */
        ref_i128 off = 0;
        switch (check_range_(rs, 0, 4)) {
        case 0: off = 0; break;
        case 1: off = g->has_last ? g->last.reset_ms : 0; break;
        case 2: off = g->has_last ? (ref_i128)g->last.reset_ms - 1 : 1; break;
        case 3: off = check_range_(rs, -full, full); break;
        default: off = check_range_(rs, -tok, 2 * tok); break;
        }
        s.kind = K_PEEK;
        s.t = clamp_time((ref_i128)g->t + off);
        return s;
    }
    if (u < 45) { /* a reading outside the accepted range */
        static const int64_t bad[] = {SLUICE_TIME_MAX_MS + 1, SLUICE_TIME_MIN_MS - 1, INT64_MAX, INT64_MIN};
        s.kind = K_BADTIME;
        s.t = bad[check_range_(rs, 0, 3)];
        s.cost = 1;
        return s;
    }
    /* the verbs: ask 6%, refund 6%, reset 0.3%, retune 0.3% (when the
     * trace has them); else decide */
    int kind = u < 105 ? K_ASK : u < 165 ? K_REFUND : u < 168 ? K_RESET : u < 171 && g->retune ? K_RETUNE : K_DECIDE;
    if (kind == K_REFUND && g->last_allowed && check_range_(rs, 0, 2) == 0) {
        /* an exact undo: the last admission's cost at its reading */
        s.kind = K_REFUND;
        s.cost = g->last_cost;
        return s;
    }
    ref_i128 dt;
    u = (int)check_range_(rs, 0, 999);
    bool same_cost = false;
    if (g->has_last && !g->last.allowed && u < 120) {
        dt = (ref_i128)g->last.retry_after_ms - (check_range_(rs, 0, 2) == 0); /* retry, retry-1 */
        same_cost = check_range_(rs, 0, 3) != 0;
    } else if (g->has_last && u < 170) {
        dt = (ref_i128)g->last.reset_ms - check_range_(rs, 0, 1);
    } else if (u < 450) {
        dt = 0;
    } else if (u < 740) {
        dt = check_range_(rs, 1, 2 * tok);
    } else if (u < 850) {
        dt = check_range_(rs, 1, 2 * full);
    } else if (u < 870 && g->huge_ok && g->huge_left > 1024) {
        ref_i128 cap = g->huge_left < ((ref_i128)1 << 58) ? g->huge_left : ((ref_i128)1 << 58);
        dt = log_uniform(rs, 1024, (int64_t)cap);
        g->huge_left -= dt;
    } else if (u < 885 && g->word) {
        /* an offset from the epoch near where the word overflows */
        ref_i128 lo, hi;
        if (check_range_(rs, 0, 1)) {
            lo = (INT64_MAX - g->tau) / g->r - 2;
            hi = INT64_MAX / g->r + 2;
        } else {
            lo = INT64_MIN / g->r - 2;
            hi = (INT64_MIN + g->tau) / g->r + 2;
        }
        ref_i128 at = (ref_i128)g->epoch + lo + (ref_i128)check_range_(rs, 0, (int64_t)(hi - lo));
        dt = at >= SLUICE_TIME_MIN_MS && at <= SLUICE_TIME_MAX_MS ? at - g->t : 0;
    } else if (u < 960) {
        dt = -check_range_(rs, 1, max64(tok, full / 2));
    } else if (u < 975 && g->huge_ok) {
        dt = -log_uniform(rs, 1, INT64_C(1) << 58);
    } else {
        dt = check_range_(rs, 0, 3);
    }
    if (dt != 0) g->last_allowed = false;
    g->t = clamp_time((ref_i128)g->t + dt);
    s.t = g->t;
    s.kind = kind;
    switch (kind) {
    case K_REFUND: s.cost = gen_refund_cost(g); break;
    case K_RESET: s.cost = 0; break;
    case K_RETUNE: s.cost = (int64_t)(check_rand_(rs) >> 2); break;
    default: s.cost = same_cost ? g->last_cost : gen_cost(g); break;
    }
    return s;
}

/* ------------------------------------------------------------------------ */
/* Retune: a new configuration drawn from the one in force                   */
/* ------------------------------------------------------------------------ */

/* Another limit for a configuration of limit lim: a little more or less,
 * double, half, anything. */
static int64_t other_limit(uint64_t *rs, int64_t lim) {
    switch (check_range_(rs, 0, 6)) {
    case 0: return lim + check_range_(rs, 1, 3);
    case 1: return lim - check_range_(rs, 1, 3);
    case 2: return lim * 2;
    case 3: return lim / 2;
    case 4: return log_uniform(rs, 1, SLUICE_LIMIT_MAX);
    case 5: return check_range_(rs, 1, 10);
    default: return lim;
    }
}

/* The new configuration (returns its part count) that a K_RETUNE step of
 * seed turns cur[0..n) into: mostly each part of the same algorithm and
 * period with another limit (buckets: sometimes another rate: the carry
 * case), sometimes another algorithm or another period, sometimes a part
 * more or fewer; shadow flags sometimes drawn anew (composites). */
static size_t retune_config(uint64_t seed, const sluice_config *cur, const bool *cur_shadow, size_t n,
                            sluice_config *out, bool *shadow) {
    uint64_t r = seed, *rs = &r;
    size_t m = n;
    int u = (int)check_range_(rs, 0, 9);
    if (n == 1) m = u == 0 ? 2 : 1;
    else if (u < 2) m = n - 1;
    else if (u < 4 && n < SLUICE_POLICY_MAX_PARTS) m = n + 1;
    for (size_t i = 0; i < m; i++) {
        int v = (int)check_range_(rs, 0, 99);
        sluice_config x;
        if (i >= n) {
            x = gen_config(rs, (sluice_algorithm)check_range_(rs, SLUICE_TOKEN_BUCKET, SLUICE_SLIDING_LOG),
                           (int)check_range_(rs, 0, 2));
        } else if (v < 60) { /* carry: the same algorithm and period */
            x = cur[i];
            x.limit = other_limit(rs, cur[i].limit);
            if (is_bucket(x.algorithm) && check_range_(rs, 0, 2) == 0)
                x.rate = check_range_(rs, 0, 1) ? max64(1, x.rate + check_range_(rs, -2, 2)) : log_uniform(rs, 1, SLUICE_RATE_MAX);
            if (sluice_config_validate(&x, NULL, 0) != 0) x = cur[i];
        } else if (v < 80) { /* another algorithm, the same limit and period where valid */
            sluice_algorithm a = (sluice_algorithm)check_range_(rs, SLUICE_TOKEN_BUCKET, SLUICE_SLIDING_LOG - 1);
            if (a >= cur[i].algorithm) a = (sluice_algorithm)(a + 1);
            x = make_config(a, cur[i].limit, is_bucket(cur[i].algorithm) ? cur[i].rate : log_uniform(rs, 1, 1000),
                            cur[i].period_ms);
            if (sluice_config_validate(&x, NULL, 0) != 0) x = gen_config(rs, a, (int)check_range_(rs, 0, 2));
        } else if (v < 92) { /* the same algorithm, (most likely) another period */
            x = gen_config(rs, cur[i].algorithm, (int)check_range_(rs, 0, 3));
        } else {
            x = gen_config(rs, (sluice_algorithm)check_range_(rs, SLUICE_TOKEN_BUCKET, SLUICE_SLIDING_LOG),
                           (int)check_range_(rs, 0, 3));
        }
        out[i] = x;
        shadow[i] = i < n && cur_shadow[i];
        if (m > 1 && check_range_(rs, 0, 4) == 0) shadow[i] = check_range_(rs, 0, 2) == 0;
        if (m == 1) shadow[i] = false;
    }
    return m;
}

/* ------------------------------------------------------------------------ */
/* The real code under test                                                  */
/* ------------------------------------------------------------------------ */

enum { M_ALGO = 1, M_LIMITER = 2 };

typedef struct {
    size_t n;
    sluice__params params[SLUICE_POLICY_MAX_PARTS];
    const sluice__algo *algo[SLUICE_POLICY_MAX_PARTS];
    sluice__state st[SLUICE_POLICY_MAX_PARTS];
    sluice_policy *pol;
    sluice_clock *clk;
    sluice_limiter *lim;
    bool retuned; /* R->pol is no longer the case's configuration */
} real_t;

static void real_close(real_t *R) {
    for (size_t i = 0; i < R->n; i++)
        if (R->algo[i]->release) R->algo[i]->release(&R->st[i]);
    sluice_limiter_free(R->lim);
    sluice_clock_free(R->clk);
    sluice_policy_free(R->pol);
    memset(R, 0, sizeof *R);
}

static int real_open(real_t *R, const tcase_t *tc, int modes) {
    char err[256];
    memset(R, 0, sizeof *R);
    R->n = tc->n_parts;
    for (size_t i = 0; i < tc->n_parts; i++) {
        if (sluice__params_init(&tc->parts[i], &R->params[i], err, sizeof err) != 0) {
            fprintf(stderr, "[%s seed=%" PRIu64 "] sluice__params_init: %s\n", tc->test, tc->seed, err);
            return -1;
        }
        R->algo[i] = sluice__algo_of(tc->parts[i].algorithm);
        if (!R->algo[i]) return -1;
        R->algo[i]->init(&R->params[i], &R->st[i]);
    }
    if (sluice_policy_new_shadow("diff", tc->parts, tc->shadow, tc->n_parts, &R->pol) != 0) return -1;
    if (modes & M_LIMITER) {
        R->clk = sluice_clock_manual_new(tc->clock_start);
        if (!R->clk) return -1;
        int rc = (tc->n_parts == 1 && !tc->use_policy) ? sluice_limiter_new(&tc->parts[0], R->clk, &R->lim)
                                                        : sluice_limiter_new_policy(R->pol, R->clk, &R->lim);
        if (rc != 0) return -1;
    }
    return 0;
}

/* One enforced part: decided by its vtable alone (else sluice__policy_decide). */
static bool real_one_part(const real_t *R) { return R->n == 1 && !R->pol->n_shadow; }

/* Every part's state fresh (released first). */
static void real_reinit(real_t *R) {
    for (size_t i = 0; i < R->n; i++) {
        if (R->algo[i]->release) R->algo[i]->release(&R->st[i]);
        R->algo[i]->init(&R->params[i], &R->st[i]);
    }
}

/* The algorithm states converted to a new configuration at t
 * (sluice__policy_convert): the new states fresh, with room for a first
 * admission, as it asks. Returns 0, or -1 with *why. */
static int real_retune(real_t *R, const sluice_config *parts, const bool *shadow, size_t n, int64_t t,
                       const char **why) {
    sluice_policy *np = NULL;
    sluice__state st[SLUICE_POLICY_MAX_PARTS];
    if (sluice_policy_new_shadow("diff", parts, shadow, n, &np) != 0) {
        *why = "sluice_policy_new_shadow refused the new configuration";
        return -1;
    }
    memset(st, 0, sizeof st);
    for (size_t i = 0; i < n; i++) {
        np->algo[i]->init(&np->params[i], &st[i]);
        if (np->algo[i]->reserve && np->algo[i]->reserve(&np->params[i], &st[i]) != 0) {
            *why = "reserve failed";
            return -1;
        }
    }
    if (sluice__policy_convert(R->pol, R->st, np, st, t) != 0) {
        *why = "sluice__policy_convert failed";
        for (size_t i = 0; i < n; i++)
            if (np->algo[i]->release) np->algo[i]->release(&st[i]);
        sluice_policy_free(np);
        return -1;
    }
    for (size_t i = 0; i < R->n; i++)
        if (R->algo[i]->release) R->algo[i]->release(&R->st[i]);
    sluice_policy_free(R->pol);
    R->pol = np;
    R->n = n;
    R->retuned = true;
    for (size_t i = 0; i < n; i++) {
        R->params[i] = np->params[i];
        R->algo[i] = np->algo[i];
        R->st[i] = st[i];
    }
    return 0;
}

/* A snapshot of the algorithm states, to check that a denial changes none. */
typedef struct {
    sluice__state st[SLUICE_POLICY_MAX_PARTS];
    sluice__log_entry *ents[SLUICE_POLICY_MAX_PARTS];
} snap_t;

static void snap_take(snap_t *sn, const real_t *R, bool deep) {
    memcpy(sn->st, R->st, sizeof sn->st);
    for (size_t i = 0; i < R->n; i++) {
        sn->ents[i] = NULL;
        if (deep && R->algo[i] == &sluice__sliding_log && R->st[i].log.cap) {
            size_t cap = R->st[i].log.cap;
            sn->ents[i] = malloc(cap * sizeof *sn->ents[i]);
            memcpy(sn->ents[i], R->st[i].log.e, cap * sizeof *sn->ents[i]);
        }
    }
}

/* Logical equality: the bytes of every non-log state; for a log its length,
 * base and entries in order (the ring may grow, SLUICE__EGROW, even on a dry
 * run: that changes its capacity, not what it decides). */
static bool snap_same(const snap_t *sn, const real_t *R) {
    for (size_t i = 0; i < R->n; i++) {
        const sluice__log *now = &R->st[i].log, *was = &sn->st[i].log;
        if (R->algo[i] != &sluice__sliding_log) {
            if (memcmp(&sn->st[i], &R->st[i], sizeof R->st[i]) != 0) return false;
            continue;
        }
        if (now->len != was->len || now->base != was->base) return false;
        if (!sn->ents[i]) continue;
        for (uint32_t k = 0; k < now->len; k++) {
            const sluice__log_entry *a = &sn->ents[i][(was->head + k) & (was->cap - 1)];
            const sluice__log_entry *b = &now->e[(now->head + k) & (now->cap - 1)];
            if (a->ts_ms != b->ts_ms || a->cum != b->cum) return false;
        }
    }
    return true;
}

/* Moves a log's running totals (base and every cum) so that the newest is
 * near 2^62, where the ring renormalizes them: the same log, as if a great
 * deal had been admitted long ago. White-box: runs of a few million
 * admissions of up to 10^9 never get there by themselves. */
static void shift_totals(sluice__log *g, int64_t below) {
    int64_t newest = g->len ? g->e[(g->head + g->len - 1) & (g->cap - 1)].cum : g->base;
    int64_t k = (INT64_C(1) << 62) - below - newest;
    g->base += k;
    for (uint32_t i = 0; i < g->len; i++) g->e[(g->head + i) & (g->cap - 1)].cum += k;
}

static void snap_free(snap_t *sn, size_t n) {
    for (size_t i = 0; i < n; i++) free(sn->ents[i]);
}

/* The pure algorithm (one part) or sluice__policy_decide (composite), with
 * the log's grow-and-retry protocol. commit 0: a dry run (one part only).
 * Returns 0, or -1 with *why set. */
static int algo_decide(real_t *R, int64_t t, int64_t cost, sluice_decision *d, int commit,
                       const char **why) {
    size_t last_grown = SIZE_MAX;
    for (;;) {
        size_t gp = 0;
        snap_t sn;
        snap_take(&sn, R, false);
        int rc = real_one_part(R) ? R->algo[0]->decide(&R->params[0], &R->st[0], t, cost, d, commit)
                                  : sluice__policy_decide(R->pol, R->st, t, cost, d, &gp);
        bool same = snap_same(&sn, R);
        snap_free(&sn, R->n);
        if (rc == 0) return 0;
        if (rc != SLUICE__EGROW) {
            *why = "decide returned an error";
            return -1;
        }
        if (!same) {
            *why = "SLUICE__EGROW changed the state";
            return -1;
        }
        if (gp >= R->n || R->algo[gp] != &sluice__sliding_log) {
            *why = "SLUICE__EGROW for a part that is not a log";
            return -1;
        }
        if (gp == last_grown) { /* one reserve makes room for one entry */
            *why = "SLUICE__EGROW again for the part just grown";
            return -1;
        }
        last_grown = gp;
        if (R->pol->algo[gp]->reserve(&R->pol->params[gp], &R->st[gp]) != 0) {
            *why = "the part's reserve failed";
            return -1;
        }
    }
}

/* ------------------------------------------------------------------------ */
/* The lock-step runner                                                      */
/* ------------------------------------------------------------------------ */

static void print_policy(const char *what, const sluice_config *parts, const bool *shadow, size_t n) {
    char text[1024] = "?";
    sluice_policy *p = NULL;
    if (sluice_policy_new_shadow("diff", parts, shadow, n, &p) == 0) sluice_policy_format(p, text, sizeof text);
    sluice_policy_free(p);
    fprintf(stderr, "%s\"%s\"", what, text);
}

static void print_case(const tcase_t *tc, const real_t *R) {
    fprintf(stderr, "  test %s, seed %" PRIu64 ", ", tc->test, tc->seed);
    print_policy("config ", tc->parts, tc->shadow, tc->n_parts);
    fprintf(stderr, ", clock start %" PRId64 "%s\n", tc->clock_start,
            tc->n_parts == 1 && !tc->use_policy ? " (sluice_limiter_new)" : " (policy)");
    if (R->pol && R->retuned) {
        print_policy("  (retuned; now ", R->pol->parts, R->pol->shadow, R->pol->n_parts);
        fprintf(stderr, ")\n");
    }
    if (tc->shift_totals) fprintf(stderr, "  (log running totals shifted near 2^62 every 23 steps)\n");
}

static void print_mismatch(const char *side, size_t i, const step_t *s, int want_rc, const sluice_decision *want,
                           int got_rc, const sluice_decision *got, const char *what) {
    char a[300], b[300];
    ref_decision_str(want, a, sizeof a);
    ref_decision_str(got, b, sizeof b);
    fprintf(stderr,
            "  %s: step %zu, %s at reading %" PRId64 " cost %" PRId64 ": %s\n"
            "    model rc=%d %s\n    real  rc=%d %s\n",
            side, i, kind_name(s->kind), s->t, s->cost, what, want_rc, a, got_rc, b);
}

/* coverage, all tests */
static long long g_decisions, g_allowed, g_denied, g_ecost, g_peeks, g_far_denied;
static long long g_word_traces, g_word_far_traces; /* one-part buckets; beyond 64 bits */
static long long g_asks, g_refunds, g_refunds_taken, g_refund_ecost, g_resets, g_retunes, g_shadow_denied;
static long long g_carried, g_charged; /* retune: parts converted that were not idle, by each rule */
static long long g_retunes_far;         /* see carry_is_far */

/* Whether converting m at t to np would carry a bucket's backlog b (in the
 * old scaled units) so large that b * p' passes 2^126: a reading about
 * 2^55 ms or more before the TAT, with a large r and p'. BUG: the
 * library's carry (sluice__gcra_carry) formed that product in __int128 and
 * overflowed (a store converts at its own time, never before an admission,
 * where b is within the capacity; sluice__policy_convert is called at any
 * reading). Counted, to show the traces reach it. */
static bool carry_is_far(const ref_model *m, const sluice_config *np, size_t nn, int64_t t) {
    for (size_t i = 0; i < nn && i < m->n; i++) {
        const ref_part *o = &m->part[i];
        if (!ref_is_bucket_(o) || np[i].algorithm != o->algo || np[i].period_ms != o->cfg.period_ms) continue;
        if (ref_part_empty_(o)) continue;
        ref_part x;
        ref_part_init(&x, &np[i]);
        ref_i128 b = ref_tat_scan_(o) - (ref_i128)t * o->r;
        if (b > 0 && b >= ((ref_i128)1 << 126) / x.p) return true;
    }
    return false;
}

/* The limiter's refund (out NULL now and then: then a peek of cost 1 says
 * what it would have said). */
static int limiter_refund(sluice_limiter *l, int64_t cost, int64_t t, sluice_decision *got, size_t i) {
    if (i % 5 != 2) return sluice_refund_at(l, cost, t, got);
    int rc = sluice_refund_at(l, cost, t, NULL);
    if (rc == 0) rc = sluice_peek_at(l, 1, t, got);
    return rc;
}

/* Runs steps[0..n) (generating each first when gen is not NULL) through the
 * model and the real code in modes. Returns the index of the first
 * disagreement (and *bad_mode) or -1. verbose: 0 quiet, 1 the mismatch,
 * 2 every step. A K_RETUNE step converts the algorithm states and the
 * model; the limiter, which cannot be retuned, is no longer compared. */
static long run_trace(const tcase_t *tc, step_t *steps, size_t n, int modes, int verbose, gen_t *gen,
                      int *bad_mode) {
    ref_model m;
    real_t R;
    long fail = -1;
    bool far = false; /* a reading so far from the clock start that the word overflows */
    bool retuned = false;
    ref_model_init_shadow(&m, tc->parts, tc->shadow, tc->n_parts);
    if (real_open(&R, tc, modes) != 0) {
        fprintf(stderr, "  cannot make the limiter\n");
        if (verbose) print_case(tc, &R);
        real_close(&R);
        ref_model_free(&m);
        return 0;
    }
    if (verbose == 2) print_case(tc, &R);
#define FAIL_AT(mode, side, want_rc, wantp, got_rc, gotp, what)                                         \
    do {                                                                                                \
        fail = (long)i, *bad_mode = (mode);                                                             \
        if (verbose) print_case(tc, &R), print_mismatch(side, i, s, want_rc, wantp, got_rc, gotp, what); \
    } while (0)
    for (size_t i = 0; i < n && fail < 0; i++) {
        if (gen) steps[i] = gen_step(gen);
        const step_t *s = &steps[i];
        sluice_decision want, got;
        char a[300];
        memset(&got, 0, sizeof got);
        if (s->kind == K_DECIDE) {
            int want_rc = ref_model_decide(&m, s->t, s->cost, &want);
            g_decisions++;
            if (want_rc != SLUICE_OK) g_ecost++;
            else if (want.allowed) g_allowed++;
            else g_denied++, g_far_denied += want.retry_after_ms > (INT64_C(1) << 50);
            if (want_rc == SLUICE_OK) g_shadow_denied += want.shadow_denied;
            if (!retuned && tc->n_parts == 1 && is_bucket(tc->parts[0].algorithm) && !far &&
                ((ref_i128)s->t - tc->clock_start) * m.part[0].r > ((ref_i128)1 << 62))
                far = true;
            if (verbose == 2) {
                ref_decision_str(&want, a, sizeof a);
                fprintf(stderr, "    step %zu: decide at %" PRId64 " cost %" PRId64 " -> rc=%d %s\n", i, s->t,
                        s->cost, want_rc, a);
            }
            if ((modes & M_ALGO) && want_rc == SLUICE_OK && real_one_part(&R) && (i % 7) == 3) {
                /* a dry run (commit 0) decides the same and changes nothing */
                const char *why = NULL;
                snap_t sn;
                snap_take(&sn, &R, true);
                if (algo_decide(&R, s->t, s->cost, &got, 0, &why) != 0)
                    FAIL_AT(M_ALGO, "algorithm, commit=0", want_rc, &want, -1, &got, why);
                else if (!ref_decision_eq(&want, &got))
                    FAIL_AT(M_ALGO, "algorithm, commit=0", want_rc, &want, 0, &got, "decisions differ");
                else if (!snap_same(&sn, &R))
                    FAIL_AT(M_ALGO, "algorithm, commit=0", want_rc, &want, 0, &got, "a dry run changed the state");
                snap_free(&sn, R.n);
            }
            if ((modes & M_ALGO) && want_rc == SLUICE_OK && fail < 0) {
                const char *why = NULL;
                snap_t sn;
                bool deep = (i & 15) == 0;
                snap_take(&sn, &R, deep);
                if (algo_decide(&R, s->t, s->cost, &got, 1, &why) != 0)
                    FAIL_AT(M_ALGO, "algorithm", want_rc, &want, -1, &got, why);
                else if (!ref_decision_eq(&want, &got))
                    FAIL_AT(M_ALGO, "algorithm", want_rc, &want, 0, &got, "decisions differ");
                else if (!want.allowed && !snap_same(&sn, &R))
                    FAIL_AT(M_ALGO, "algorithm", want_rc, &want, 0, &got, "a denial changed the state");
                snap_free(&sn, R.n);
                if (tc->shift_totals && i % 23 == 7)
                    for (size_t k = 0; k < R.n; k++)
                        if (R.algo[k] == &sluice__sliding_log)
                            shift_totals(&R.st[k].log, (int64_t)(i % 3) * R.params[k].limit);
            }
            if ((modes & M_LIMITER) && fail < 0) {
                memset(&got, 0, sizeof got);
                int rc = sluice_acquire_at(R.lim, s->cost, s->t, &got);
                if (rc != want_rc || (rc == 0 && !ref_decision_eq(&want, &got)))
                    FAIL_AT(M_LIMITER, "limiter", want_rc, &want, rc, &got, "decisions differ");
            }
            if (gen) {
                gen->has_last = want_rc == SLUICE_OK;
                if (gen->has_last) gen->last = want, gen->last_cost = s->cost;
                gen->last_allowed = want_rc == SLUICE_OK && want.allowed;
                if (gen->last_allowed) {
                    memmove(gen->recent + 1, gen->recent, (sizeof gen->recent / sizeof gen->recent[0] - 1) * sizeof gen->recent[0]);
                    gen->recent[0] = s->cost;
                    if (gen->n_recent < sizeof gen->recent / sizeof gen->recent[0]) gen->n_recent++;
                }
            }
        } else if (s->kind == K_PEEK) {
            g_peeks++;
            if (modes & M_ALGO) {
                for (size_t k = 0; k < R.n && fail < 0; k++) {
                    ref_part_peek(&m.part[k], s->t, &want);
                    memset(&got, 0x5a, sizeof got);
                    R.algo[k]->peek(&R.params[k], &R.st[k], s->t, &got);
                    bool fresh_want = ref_part_idle(&m.part[k], s->t);
                    bool fresh_got = R.algo[k]->is_fresh(&R.params[k], &R.st[k], s->t) != 0;
                    if (!ref_decision_eq(&want, &got) || fresh_want != fresh_got) {
                        char what[80];
                        snprintf(what, sizeof what, "part %zu: peek, or is_fresh (model %d, real %d)", k,
                                 (int)fresh_want, (int)fresh_got);
                        FAIL_AT(M_ALGO, "algorithm", 0, &want, 0, &got, what);
                    }
                }
            }
            if ((modes & M_LIMITER) && fail < 0) {
                for (size_t k = 0; k < R.n && fail < 0; k++) {
                    ref_part_peek(&m.part[k], s->t, &want);
                    memset(&got, 0x5a, sizeof got);
                    sluice__limiter_peek_part(R.lim, k, s->t, &got);
                    if (!ref_decision_eq(&want, &got)) {
                        char what[80];
                        snprintf(what, sizeof what, "part %zu: sluice__limiter_peek_part", k);
                        FAIL_AT(M_LIMITER, "limiter", 0, &want, 0, &got, what);
                    }
                }
            }
        } else if (s->kind == K_ASK) {
            int want_rc = ref_model_ask(&m, s->t, s->cost, &want);
            g_asks++;
            if (verbose == 2) {
                ref_decision_str(&want, a, sizeof a);
                fprintf(stderr, "    step %zu: ask at %" PRId64 " cost %" PRId64 " -> rc=%d %s\n", i, s->t, s->cost,
                        want_rc, a);
            }
            if (modes & M_ALGO) {
                int rc = sluice__policy_check_cost(R.pol, s->cost);
                if (rc != want_rc) {
                    FAIL_AT(M_ALGO, "algorithm", want_rc, &want, rc, &got, "sluice__policy_check_cost");
                } else if (rc == 0) {
                    snap_t sn;
                    snap_take(&sn, &R, true);
                    memset(&got, 0x5a, sizeof got);
                    sluice__policy_peek(R.pol, R.st, s->t, s->cost, &got);
                    if (!ref_decision_eq(&want, &got))
                        FAIL_AT(M_ALGO, "algorithm", want_rc, &want, 0, &got, "sluice__policy_peek differs");
                    else if (!snap_same(&sn, &R))
                        FAIL_AT(M_ALGO, "algorithm", want_rc, &want, 0, &got, "sluice__policy_peek changed the state");
                    snap_free(&sn, R.n);
                }
            }
            if ((modes & M_LIMITER) && fail < 0) {
                memset(&got, 0x5a, sizeof got);
                int rc = sluice_peek_at(R.lim, s->cost, s->t, &got);
                if (rc != want_rc || (rc == 0 && !ref_decision_eq(&want, &got)))
                    FAIL_AT(M_LIMITER, "limiter", want_rc, &want, rc, &got, "sluice_peek_at differs");
            }
        } else if (s->kind == K_REFUND) {
            sluice_decision before, after;
            ref_model_peek(&m, s->t, &before);
            int want_rc = ref_model_refund(&m, s->t, s->cost, &want);
            ref_model_peek(&m, s->t, &after);
            g_refunds++;
            if (want_rc != SLUICE_OK) g_refund_ecost++;
            else if (!ref_decision_eq(&before, &after)) g_refunds_taken++; /* it gave something back */
            if (verbose == 2) {
                ref_decision_str(&want, a, sizeof a);
                fprintf(stderr, "    step %zu: refund at %" PRId64 " cost %" PRId64 " -> rc=%d %s\n", i, s->t,
                        s->cost, want_rc, a);
            }
            if (modes & M_ALGO) {
                int rc = sluice__policy_check_cost(R.pol, s->cost);
                if (rc != want_rc) {
                    FAIL_AT(M_ALGO, "algorithm", want_rc, &want, rc, &got, "sluice__policy_check_cost");
                } else if (rc == 0) {
                    sluice__policy_refund(R.pol, R.st, s->t, s->cost);
                    memset(&got, 0x5a, sizeof got);
                    sluice__policy_peek(R.pol, R.st, s->t, 1, &got);
                    if (!ref_decision_eq(&want, &got))
                        FAIL_AT(M_ALGO, "algorithm", want_rc, &want, 0, &got, "after sluice__policy_refund");
                }
            }
            if ((modes & M_LIMITER) && fail < 0) {
                memset(&got, 0x5a, sizeof got);
                int rc = limiter_refund(R.lim, s->cost, s->t, &got, i);
                if (rc != want_rc || (rc == 0 && !ref_decision_eq(&want, &got)))
                    FAIL_AT(M_LIMITER, "limiter", want_rc, &want, rc, &got, "sluice_refund_at differs");
            }
        } else if (s->kind == K_RESET) {
            ref_model_reset(&m, s->t, &want);
            g_resets++;
            if (verbose == 2) {
                ref_decision_str(&want, a, sizeof a);
                fprintf(stderr, "    step %zu: reset at %" PRId64 " -> %s\n", i, s->t, a);
            }
            if (modes & M_ALGO) {
                real_reinit(&R);
                memset(&got, 0x5a, sizeof got);
                sluice__policy_peek(R.pol, R.st, s->t, 1, &got);
                if (!ref_decision_eq(&want, &got))
                    FAIL_AT(M_ALGO, "algorithm", 0, &want, 0, &got, "after re-init");
            }
            if ((modes & M_LIMITER) && fail < 0) {
                memset(&got, 0x5a, sizeof got);
                sluice_clock_manual_set(R.clk, s->t); /* sluice_reset answers at the clock's reading */
                int rc = sluice_reset(R.lim, &got);
                if (rc != 0 || !ref_decision_eq(&want, &got))
                    FAIL_AT(M_LIMITER, "limiter", 0, &want, rc, &got, "sluice_reset differs");
            }
        } else if (s->kind == K_RETUNE) {
            sluice_config np[SLUICE_POLICY_MAX_PARTS];
            bool nsh[SLUICE_POLICY_MAX_PARTS];
            size_t nn = retune_config((uint64_t)s->cost, R.pol->parts, R.pol->shadow, R.pol->n_parts, np, nsh);
            g_retunes_far += carry_is_far(&m, np, nn, s->t);
            g_retunes++;
            for (size_t k = 0; k < nn && k < m.n; k++) {
                if (ref_part_idle(&m.part[k], s->t) && ref_part_empty_(&m.part[k])) continue;
                if (np[k].algorithm == m.part[k].algo && np[k].period_ms == m.part[k].cfg.period_ms) g_carried++;
                else g_charged++;
            }
            if (verbose == 2) {
                fprintf(stderr, "    step %zu: retune at %" PRId64 " to ", i, s->t);
                print_policy("", np, nsh, nn);
                fprintf(stderr, "\n");
            }
            ref_model_retune(&m, np, nsh, nn, s->t);
            const char *why = NULL;
            memset(&want, 0, sizeof want);
            if (real_retune(&R, np, nsh, nn, s->t, &why) != 0) FAIL_AT(M_ALGO, "algorithm", 0, &want, -1, &got, why);
            if (modes & M_LIMITER) { /* the limiter keeps its configuration: compared no more */
                sluice_limiter_free(R.lim);
                R.lim = NULL;
                modes &= ~M_LIMITER;
            }
            retuned = true;
            if (gen) gen_reconfig(gen, np, nsh, nn);
        } else { /* K_BADTIME: every verb refuses the reading */
            if (modes & M_LIMITER) {
                int rc = sluice_acquire_at(R.lim, s->cost, s->t, &got);
                int rc2 = sluice_peek_at(R.lim, s->cost, s->t, &got);
                int rc3 = sluice_refund_at(R.lim, s->cost, s->t, i % 2 ? &got : NULL);
                if (rc != SLUICE_EINVAL || rc2 != SLUICE_EINVAL || rc3 != SLUICE_EINVAL) {
                    memset(&want, 0, sizeof want);
                    FAIL_AT(M_LIMITER, "limiter", SLUICE_EINVAL, &want, rc != SLUICE_EINVAL ? rc : rc2 != SLUICE_EINVAL ? rc2 : rc3, &got,
                            "reading outside the range accepted (acquire, peek, refund)");
                }
            }
        }
    }
#undef FAIL_AT
    if (gen && tc->n_parts == 1 && is_bucket(tc->parts[0].algorithm)) {
        g_word_traces++;
        g_word_far_traces += far;
    }
    real_close(&R);
    ref_model_free(&m);
    return fail;
}

/* Shrinks a failing trace (steps[0..n), failing in mode) by dropping chunks
 * while it still fails; returns the new length. Bounded work. */
static size_t shrink(const tcase_t *tc, step_t *steps, size_t n, int mode) {
    step_t *tmp = malloc(n * sizeof *tmp);
    long long budget = 30000000; /* steps replayed */
    size_t chunk = n / 2 ? n / 2 : 1;
    while (chunk >= 1 && budget > 0) {
        bool progress = false;
        for (size_t i = 0; i < n && budget > 0;) {
            size_t len = min64((int64_t)chunk, (int64_t)(n - i));
            memcpy(tmp, steps, i * sizeof *tmp);
            memcpy(tmp + i, steps + i + len, (n - i - len) * sizeof *tmp);
            int bm = 0;
            budget -= (long long)(n - len);
            long f = run_trace(tc, tmp, n - len, mode, 0, NULL, &bm);
            if (f >= 0) {
                n = (size_t)f + 1;
                memcpy(steps, tmp, n * sizeof *tmp);
                progress = true;
            } else {
                i += len;
            }
        }
        if (!progress) {
            if (chunk == 1) break;
            chunk /= 2;
        }
    }
    free(tmp);
    return n;
}

static int g_reported; /* failures printed in full, all tests */

/* Runs one generated trace; on a disagreement prints it and a shrunk
 * reproducer. Returns true when the trace agreed throughout. */
static bool run_case(tcase_t *tc, size_t len, bool huge_ok, int64_t start) {
    step_t *steps = malloc(len * sizeof *steps);
    gen_t g;
    int bad_mode = 0;
    gen_init(&g, tc, tc->seed ^ 0x5eed, huge_ok, start);
    long f = run_trace(tc, steps, len, M_ALGO | M_LIMITER, g_reported < 3 ? 1 : 0, &g, &bad_mode);
    if (f >= 0) {
        if (g_reported < 3) {
            size_t n = shrink(tc, steps, (size_t)f + 1, bad_mode);
            fprintf(stderr, "  shrunk reproducer (%zu steps, %s):\n", n,
                    bad_mode == M_ALGO ? "algorithm" : "limiter");
            int bm;
            run_trace(tc, steps, n, bad_mode, 2, NULL, &bm);
        } else {
            fprintf(stderr, "  [%s] another disagreement: seed %" PRIu64 " step %ld\n", tc->test, tc->seed, f);
        }
        g_reported++;
    }
    free(steps);
    return f < 0;
}

/* A start reading: near 0, anywhere, or near either end of the range. */
static int64_t gen_start(uint64_t *rs) {
    switch (check_range_(rs, 0, 4)) {
    case 0: return check_range_(rs, 0, 1000);
    case 1: return check_range_(rs, -100000, 100000);
    case 2: return SLUICE_TIME_MIN_MS + check_range_(rs, 0, 1000);
    case 3: return check_range_(rs, SLUICE_TIME_MIN_MS, SLUICE_TIME_MAX_MS - (INT64_C(1) << 60));
    default: return SLUICE_TIME_MAX_MS - check_range_(rs, 0, INT64_C(1) << 40);
    }
}

static void fill_case(tcase_t *tc, uint64_t *rs, int64_t start) {
    tc->use_policy = tc->n_parts == 1 && check_range_(rs, 0, 3) == 0;
    /* the limiter's origin: mostly the first reading, sometimes far away */
    switch (check_range_(rs, 0, 3)) {
    case 0: tc->clock_start = clamp_time((ref_i128)start + check_range_(rs, -(INT64_C(1) << 40), INT64_C(1) << 40)); break;
    case 1: tc->clock_start = 0; break;
    default: tc->clock_start = start; break;
    }
}

/* SLUICE_TEST_SEED=S runs only the trace of seed S (printed on failures),
 * with its report in full. Returns the first trace index to run. */
static int first_trace(uint64_t base_seed, int *n_traces) {
    const char *s = getenv("SLUICE_TEST_SEED");
    if (!s) return 0;
    uint64_t seed = strtoull(s, NULL, 10);
    g_reported = 0;
    if (seed < base_seed || seed - base_seed >= 1000000) {
        *n_traces = 0;
        return 0;
    }
    *n_traces = (int)(seed - base_seed) + 1;
    return (int)(seed - base_seed);
}

static void run_algorithm(const char *test, sluice_algorithm a, uint64_t base_seed) {
    int n_traces = scaled(160);
    int failures = 0;
    for (int k = first_trace(base_seed, &n_traces); k < n_traces; k++) {
        uint64_t seed = base_seed + (uint64_t)k;
        uint64_t rs = seed;
        tcase_t tc;
        memset(&tc, 0, sizeof tc);
        tc.test = test;
        tc.seed = seed;
        tc.n_parts = 1;
        tc.parts[0] = gen_config(&rs, a, k % 4);
        bool huge_ok = (k / 4) % 2 == 1;
        int64_t start = gen_start(&rs);
        fill_case(&tc, &rs, start);
        tc.shift_totals = k % 3 == 2;
        tc.retune = k % 4 == 1;
        if (!run_case(&tc, 2000, huge_ok, start)) failures++;
    }
    CHECK_EQ(failures, 0);
}

TEST(diff_token_bucket) { run_algorithm("diff_token_bucket", SLUICE_TOKEN_BUCKET, 1000000); }
TEST(diff_leaky_bucket) { run_algorithm("diff_leaky_bucket", SLUICE_LEAKY_BUCKET, 2000000); }
TEST(diff_fixed_window) { run_algorithm("diff_fixed_window", SLUICE_FIXED_WINDOW, 3000000); }
TEST(diff_sliding_window) { run_algorithm("diff_sliding_window", SLUICE_SLIDING_WINDOW, 4000000); }
TEST(diff_sliding_log) { run_algorithm("diff_sliding_log", SLUICE_SLIDING_LOG, 5000000); }

TEST(diff_composite) {
    int n_traces = scaled(200);
    int failures = 0;
    for (int k = first_trace(6000000, &n_traces); k < n_traces; k++) {
        uint64_t seed = 6000000 + (uint64_t)k;
        uint64_t rs = seed;
        tcase_t tc;
        memset(&tc, 0, sizeof tc);
        tc.test = "diff_composite";
        tc.seed = seed;
        tc.n_parts = (size_t)(k % 12 == 11 ? check_range_(&rs, 5, 8) : check_range_(&rs, 2, 4));
        int cls = (int)check_range_(&rs, 0, 3);
        for (size_t i = 0; i < tc.n_parts; i++) {
            sluice_algorithm a = (sluice_algorithm)check_range_(&rs, SLUICE_TOKEN_BUCKET, SLUICE_SLIDING_LOG);
            /* mostly parts of one class, so that they interact */
            tc.parts[i] = gen_config(&rs, a, check_range_(&rs, 0, 3) == 0 ? (int)check_range_(&rs, 0, 3) : cls);
        }
        /* a third of the cases with shadow parts (a few with nothing else) */
        if (k % 3 == 1) {
            bool all = k % 27 == 1;
            for (size_t i = 0; i < tc.n_parts; i++) tc.shadow[i] = all || check_range_(&rs, 0, 2) == 0;
        }
        tc.retune = k % 4 == 2;
        bool huge_ok = (k / 4) % 2 == 1;
        int64_t start = gen_start(&rs);
        fill_case(&tc, &rs, start);
        tc.shift_totals = k % 3 == 2;
        if (!run_case(&tc, 2000, huge_ok, start)) failures++;
    }
    CHECK_EQ(failures, 0);
}

/* The one-part bucket limiter keeps TAT - epoch*r in a 64-bit word. Traces
 * that start (fresh) right at the readings where (t - epoch)*r, or that plus
 * the new backlog, crosses -2^63 or 2^63 - 1 (+-3 ms): the first admission
 * there makes the extreme word values. Every edge bucket configuration (and
 * some random ones), both sides, both limiter constructors. */
TEST(diff_word_edges) {
    int failures = 0, n_runs = 0;
    size_t n_edge = sizeof edge_buckets / sizeof edge_buckets[0];
    int n_random = scaled(12);
    for (size_t ci = 0; ci < n_edge + (size_t)n_random; ci++) {
        uint64_t seed = 7000000 + ci * 100, rs = seed;
        sluice_algorithm a = ci % 2 ? SLUICE_LEAKY_BUCKET : SLUICE_TOKEN_BUCKET;
        sluice_config c = ci < n_edge ? make_config(a, edge_buckets[ci][0], edge_buckets[ci][1], edge_buckets[ci][2])
                                      : gen_config(&rs, a, (int)(ci % 3));
        ref_part m;
        ref_part_init(&m, &c);
        for (int side = 0; side < 2; side++) {
            for (int j = -3; j <= 3; j++) {
                /* off: the first reading's offset from the epoch */
                ref_i128 off = side ? (INT64_MAX - m.tau) / m.r + j : INT64_MIN / m.r + j;
                ref_i128 start = side ? SLUICE_TIME_MAX_MS - check_range_(&rs, 0, 3)
                                      : SLUICE_TIME_MIN_MS + check_range_(&rs, 0, 3);
                ref_i128 epoch = start - off;
                if (epoch < SLUICE_TIME_MIN_MS || epoch > SLUICE_TIME_MAX_MS) continue;
                tcase_t tc;
                memset(&tc, 0, sizeof tc);
                tc.test = "diff_word_edges";
                tc.seed = seed + (uint64_t)(side * 10 + j + 3);
                tc.n_parts = 1;
                tc.parts[0] = c;
                tc.use_policy = j % 2 != 0;
                tc.clock_start = (int64_t)epoch;
                n_runs++;
                if (!run_case(&tc, 300, j >= 0, (int64_t)start)) failures++;
            }
        }
    }
    CHECK(n_runs > 100);
    CHECK_EQ(failures, 0);
}

/* The reference model on the hand-worked seed example, so that a broken model
 * cannot pass silently: token bucket 3 at 1/s. */
TEST(model_sanity) {
    sluice_config c = sluice_token_bucket(3, 1, 1000);
    ref_model m;
    sluice_decision d;
    ref_model_init(&m, &c, 1);
    static const struct { int64_t t, cost; int allowed; int64_t rem, retry, reset; } want[] = {
        {0, 1, 1, 2, 0, 1000},     {0, 1, 1, 1, 0, 2000},     {0, 1, 1, 0, 0, 3000},
        {0, 1, 0, 0, 1000, 3000},  {500, 1, 0, 0, 500, 2500}, {1000, 1, 1, 0, 0, 3000},
        {61000, 3, 1, 0, 0, 3000}, {61000, 1, 0, 0, 1000, 3000},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        CHECK_EQ(ref_model_decide(&m, want[i].t, want[i].cost, &d), SLUICE_OK);
        CHECK_EQ(d.allowed, want[i].allowed);
        CHECK_EQ(d.remaining, want[i].rem);
        CHECK_EQ(d.retry_after_ms, want[i].retry);
        CHECK_EQ(d.reset_ms, want[i].reset);
    }
    CHECK_EQ(ref_model_decide(&m, 61000, 4, &d), SLUICE_ECOST);
    ref_model_free(&m);

    /* a wait of about 2^62 ms: 1 per 30 days, read at the far past */
    c = sluice_token_bucket(1, 1, DAY30);
    ref_model_init(&m, &c, 1);
    CHECK_EQ(ref_model_decide(&m, SLUICE_TIME_MAX_MS, 1, &d), SLUICE_OK);
    CHECK(d.allowed);
    CHECK_EQ(ref_model_decide(&m, SLUICE_TIME_MIN_MS, 1, &d), SLUICE_OK);
    CHECK(!d.allowed);
    /* capacity 1: cost 1 needs a full bucket, so retry = reset = backlog */
    CHECK_EQ(d.retry_after_ms, SLUICE_TIME_MAX_MS - SLUICE_TIME_MIN_MS + DAY30);
    CHECK_EQ(d.reset_ms, SLUICE_TIME_MAX_MS - SLUICE_TIME_MIN_MS + DAY30);
    ref_model_free(&m);
}

/* The verbs, shadow parts and retune of the model on hand-worked examples
 * (docs/semantics.md), so that a broken model cannot pass silently. */
static void want_dec(const sluice_decision *d, int allowed, int64_t rem, int64_t retry, int64_t reset, int sd) {
    CHECK_EQ(d->allowed, allowed);
    CHECK_EQ(d->remaining, rem);
    CHECK_EQ(d->retry_after_ms, retry);
    CHECK_EQ(d->reset_ms, reset);
    CHECK_EQ(d->shadow_denied, sd);
}

TEST(model_verbs_sanity) {
    ref_model m;
    sluice_decision d;
    /* token bucket 3 at 1/s (r = 1, p = 1000, tau = 3000) */
    sluice_config c = sluice_token_bucket(3, 1, 1000);
    ref_model_init(&m, &c, 1);
    for (int i = 0; i < 3; i++) CHECK_EQ(ref_model_decide(&m, 0, 1, &d), SLUICE_OK); /* TAT 3000 */
    CHECK_EQ(ref_model_refund(&m, 0, 1, &d), SLUICE_OK);  /* TAT 2000: cost 1 is admitted, 0 left */
    want_dec(&d, 1, 0, 0, 3000, 0);
    CHECK_EQ(ref_model_ask(&m, 0, 2, &d), SLUICE_OK);     /* cost 2: 1000 ms away */
    want_dec(&d, 0, 1, 1000, 2000, 0);
    CHECK_EQ(ref_model_refund(&m, 500, 5, &d), SLUICE_ECOST); /* above the capacity */
    CHECK_EQ(ref_model_refund(&m, 500, 3, &d), SLUICE_OK); /* TAT max(2000 - 3000, 500) = 500 */
    want_dec(&d, 1, 2, 0, 1000, 0);
    ref_model_peek(&m, 0, &d); /* a reading before: 500 ms of backlog */
    CHECK_EQ(d.remaining, 2);
    CHECK_EQ(d.reset_ms, 500);
    CHECK_EQ(ref_model_refund(&m, 600, 1, &d), SLUICE_OK); /* full at 600: nothing */
    want_dec(&d, 1, 2, 0, 1000, 0);
    CHECK_EQ(ref_model_refund(&m, 600, 4, &d), SLUICE_ECOST);
    CHECK_EQ(ref_model_refund(&m, 600, 0, &d), SLUICE_ECOST);
    /* retune at 0 after 3 more at 0 (TAT 3500, backlog 3500): to capacity 2
     * (the backlog capped at tau' = 2000), then to 20 at 2/s (p' = 500: the
     * backlog of 2 tokens is 1000 scaled units) */
    for (int i = 0; i < 3; i++) CHECK_EQ(ref_model_decide(&m, 0, 1, &d), SLUICE_OK);
    sluice_config c2 = sluice_token_bucket(2, 1, 1000), c3 = sluice_token_bucket(20, 2, 1000);
    ref_model_retune(&m, &c2, NULL, 1, 0);
    CHECK_EQ(ref_model_ask(&m, 0, 1, &d), SLUICE_OK);
    want_dec(&d, 0, 0, 1000, 2000, 0);
    ref_model_retune(&m, &c3, NULL, 1, 0);
    CHECK_EQ(ref_model_ask(&m, 0, 1, &d), SLUICE_OK);
    want_dec(&d, 1, 17, 0, 1500, 0);
    /* a carry far before the TAT: b*p' would pass 2^127, the backlog is
     * the new capacity (see carry_is_far) */
    ref_model_free(&m);
    sluice_config big = sluice_token_bucket(1, 999999999999, 2147483648), slow = sluice_token_bucket(1, 1, 2147483648);
    ref_model_init(&m, &big, 1);
    CHECK_EQ(ref_model_decide(&m, SLUICE_TIME_MAX_MS, 1, &d), SLUICE_OK);
    CHECK(carry_is_far(&m, &slow, 1, -2288954510611054592));
    ref_model_retune(&m, &slow, NULL, 1, -2288954510611054592);
    CHECK_EQ(ref_model_ask(&m, -2288954510611054592, 1, &d), SLUICE_OK);
    want_dec(&d, 0, 0, 2147483648, 2147483648, 0);
    ref_model_retune(&m, &c3, NULL, 1, 0); /* back to where it was: capacity 20 at 2/s */
    ref_model_reset(&m, 0, &d);
    ref_model_decide(&m, 0, 1, &d);
    ref_model_decide(&m, 0, 1, &d);
    /* to a fixed window (another algorithm): the 2 tokens in use are
     * charged at 0 into window 0 */
    sluice_config fw = sluice_fixed_window(4, 1000);
    ref_model_retune(&m, &fw, NULL, 1, 0);
    CHECK_EQ(ref_model_ask(&m, 999, 1, &d), SLUICE_OK);
    want_dec(&d, 1, 1, 0, 1, 0);
    ref_model_reset(&m, 5, &d);
    want_dec(&d, 1, 3, 0, 995, 0);
    ref_model_free(&m);

    /* fixed window 5 per 10 ms */
    c = sluice_fixed_window(5, 10);
    ref_model_init(&m, &c, 1);
    CHECK_EQ(ref_model_decide(&m, 12, 3, &d), SLUICE_OK);
    CHECK_EQ(ref_model_refund(&m, 15, 1, &d), SLUICE_OK); /* window 1: 2 */
    want_dec(&d, 1, 2, 0, 5, 0);
    CHECK_EQ(ref_model_refund(&m, 25, 1, &d), SLUICE_OK); /* window 2 counts nothing: nothing */
    CHECK_EQ(ref_model_ask(&m, 12, 1, &d), SLUICE_OK);    /* still 2 in window 1 */
    want_dec(&d, 1, 2, 0, 8, 0);
    CHECK_EQ(ref_model_refund(&m, 12, 5, &d), SLUICE_OK); /* 0: fresh, so a reading in window 0 is in its own */
    CHECK_EQ(ref_model_ask(&m, 5, 1, &d), SLUICE_OK);
    want_dec(&d, 1, 4, 0, 5, 0);
    ref_model_free(&m);

    /* sliding window 10 per 10 ms */
    c = sluice_sliding_window(10, 10);
    ref_model_init(&m, &c, 1);
    CHECK_EQ(ref_model_decide(&m, 5, 4, &d), SLUICE_OK);  /* (0, 0, 4) */
    CHECK_EQ(ref_model_decide(&m, 12, 3, &d), SLUICE_OK); /* (1, 4, 3) */
    /* refund 5 at 14: 3 from the current window, 2 from the previous: (1, 2, 0);
     * cost 1 at 14 (e = 4): 2*6 + 1*10 <= 100; remaining 10 - 1 - ceil(12/10) */
    CHECK_EQ(ref_model_refund(&m, 14, 5, &d), SLUICE_OK);
    want_dec(&d, 1, 7, 0, 16, 0);
    CHECK_EQ(ref_model_refund(&m, 35, 1, &d), SLUICE_OK); /* rolled to window 3: P = Cn = 0, nothing */
    CHECK_EQ(ref_model_ask(&m, 14, 1, &d), SLUICE_OK);
    want_dec(&d, 1, 7, 0, 16, 0);
    CHECK_EQ(ref_model_refund(&m, 21, 1, &d), SLUICE_OK); /* window 2: P = cur = 0, Cn = 0: nothing */
    CHECK_EQ(ref_model_ask(&m, 14, 1, &d), SLUICE_OK);
    want_dec(&d, 1, 7, 0, 16, 0);
    CHECK_EQ(ref_model_refund(&m, 15, 2, &d), SLUICE_OK); /* both 0: fresh */
    CHECK_EQ(ref_model_ask(&m, 3, 10, &d), SLUICE_OK);
    want_dec(&d, 1, 0, 0, 17, 0);
    ref_model_free(&m);

    /* sliding log 5 per 10 ms */
    c = sluice_sliding_log(5, 10);
    ref_model_init(&m, &c, 1);
    CHECK_EQ(ref_model_decide(&m, 0, 2, &d), SLUICE_OK);
    CHECK_EQ(ref_model_decide(&m, 5, 2, &d), SLUICE_OK);
    CHECK_EQ(ref_model_refund(&m, 7, 3, &d), SLUICE_OK); /* (5, 2) removed, (0, 2) gives 1 */
    want_dec(&d, 1, 3, 0, 10, 0);
    CHECK_EQ(ref_model_refund(&m, 12, 3, &d), SLUICE_OK); /* (0, 1) has left the window: nothing */
    CHECK_EQ(ref_model_ask(&m, 7, 4, &d), SLUICE_OK);
    want_dec(&d, 1, 0, 0, 10, 0);
    ref_model_free(&m);

    /* shadow: enforced fixed window 2 per 10 ms beside a shadow one of 1 */
    sluice_config sp[2] = {sluice_fixed_window(2, 10), sluice_fixed_window(1, 10)};
    bool sh[2] = {false, true};
    ref_model_init_shadow(&m, sp, sh, 2);
    CHECK_EQ(ref_model_max_cost(&m), 2);
    CHECK_EQ(ref_model_decide(&m, 0, 1, &d), SLUICE_OK); /* both count it */
    want_dec(&d, 1, 1, 0, 10, 0);
    CHECK_EQ(ref_model_decide(&m, 0, 1, &d), SLUICE_OK); /* the shadow part would deny: not counted */
    want_dec(&d, 1, 0, 0, 10, 1);
    CHECK_EQ(d.limit, 2);
    CHECK_EQ(d.part, 0);
    CHECK_EQ(ref_model_decide(&m, 0, 1, &d), SLUICE_OK); /* denied by the enforced part */
    want_dec(&d, 0, 0, 10, 10, 1);
    CHECK_EQ(ref_model_decide(&m, 10, 2, &d), SLUICE_OK); /* above the shadow part's limit: would deny */
    want_dec(&d, 1, 0, 0, 10, 1);
    CHECK_EQ(ref_model_decide(&m, 20, 3, &d), SLUICE_ECOST);
    CHECK_EQ(ref_model_refund(&m, 0, 2, &d), SLUICE_OK); /* window 1's: both give back */
    ref_model_free(&m);
    sh[0] = true; /* shadow parts only */
    ref_model_init_shadow(&m, sp, sh, 2);
    CHECK_EQ(ref_model_max_cost(&m), SLUICE_LIMIT_MAX);
    CHECK_EQ(ref_model_decide(&m, 0, 2, &d), SLUICE_OK);
    want_dec(&d, 1, SLUICE_LIMIT_MAX, 0, 0, 1);
    CHECK_EQ(d.limit, 0);
    CHECK_EQ(ref_model_decide(&m, 0, 1, &d), SLUICE_OK); /* part 0 holds 2 now: it would deny */
    want_dec(&d, 1, SLUICE_LIMIT_MAX, 0, 0, 1);
    CHECK_EQ(ref_model_decide(&m, 0, SLUICE_LIMIT_MAX + 1, &d), SLUICE_ECOST);
    ref_model_free(&m);
}

/* BUG: a bucket's carry far before its TAT (b * p' past 2^127) overflowed
 * in sluice__gcra_carry and could admit; the backlog is the new capacity
 * (docs/semantics.md, "Retune"), as the model says. */
TEST(carry_far_before_the_tat) {
    sluice_config big = sluice_token_bucket(1, 999999999999, 2147483648), slow = sluice_token_bucket(1, 1, 2147483648);
    sluice_policy *from, *to;
    REQUIRE(sluice_policy_new("far", &big, 1, &from) == 0 && sluice_policy_new("far", &slow, 1, &to) == 0);
    int64_t at = -2288954510611054592;
    sluice__state old, st;
    from->algo[0]->init(&from->params[0], &old);
    sluice_decision d, want;
    REQUIRE(sluice__policy_decide_grow(from, &old, SLUICE_TIME_MAX_MS, 1, &d) == 0 && d.allowed);
    to->algo[0]->init(&to->params[0], &st);
    CHECK_EQ(sluice__policy_convert(from, &old, to, &st, at), 0);
    sluice__policy_peek(to, &st, at, 1, &d);
    ref_model m;
    ref_model_init(&m, &big, 1);
    ref_model_decide(&m, SLUICE_TIME_MAX_MS, 1, &want);
    CHECK(carry_is_far(&m, &slow, 1, at));
    ref_model_retune(&m, &slow, NULL, 1, at);
    CHECK_EQ(ref_model_ask(&m, at, 1, &want), SLUICE_OK);
    CHECK(!d.allowed && ref_decision_eq(&want, &d));
    ref_model_free(&m);
    sluice_policy_free(from);
    sluice_policy_free(to);
}

TEST(summary) {
    printf("     %lld decisions compared: %lld allowed, %lld denied (%lld waits > 2^50 ms), %lld ECOST,"
           " %lld shadow_denied; %lld peeks;\n     %lld asks, %lld refunds (%lld gave something back, %lld ECOST),"
           " %lld resets, %lld retunes (%lld parts carried, %lld charged; %lld far before a TAT);\n     %lld one-part bucket traces, %lld of them with readings beyond the"
           " limiter's 64-bit word\n",
           g_decisions, g_allowed, g_denied, g_far_denied, g_ecost, g_shadow_denied, g_peeks, g_asks, g_refunds,
           g_refunds_taken, g_refund_ecost, g_resets, g_retunes, g_carried, g_charged, g_retunes_far, g_word_traces, g_word_far_traces);
    /* the traces reach what they are there for (else they compare little);
     * run alone (./test_differential summary) there is nothing to check */
    if (g_decisions == 0) return;
    CHECK(g_allowed > 0 && g_denied > 0 && g_far_denied > 0 && g_ecost > 0 && g_peeks > 0);
    CHECK(g_asks > 0 && g_refunds_taken > 0 && g_refund_ecost > 0 && g_resets > 0);
    if (g_retunes + g_shadow_denied == 0) return; /* run alone: a one-part test has neither */
    CHECK(g_retunes > 0 && g_carried > 0 && g_charged > 0 && g_shadow_denied > 0);
    CHECK(g_word_far_traces > 0 && g_word_far_traces < g_word_traces);
}

TEST_MAIN(model_sanity, carry_far_before_the_tat, model_verbs_sanity, diff_token_bucket, diff_leaky_bucket, diff_fixed_window, diff_sliding_window,
          diff_sliding_log, diff_composite, diff_word_edges, summary)
