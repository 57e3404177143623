/* ref_models.h: slow, obviously-correct reference models of every algorithm
 * of docs/semantics.md, for the differential and property tests.
 *
 * The models share no code and no arithmetic shortcuts with src/. Each model
 * keeps the whole history of what it admitted and answers exactly one
 * question from it: "is a request of cost n admitted at reading t?"
 * (ref_part_admits), plus "does the state at reading t decide like a fresh
 * one?" (ref_part_idle). Every decision field is then derived from those two
 * predicates by its definition in semantics.md, never by a closed form:
 *
 *   remaining  the largest m in [0, limit] such that a request of cost m is
 *              admitted now (m further cost-1 requests are all admitted iff
 *              one request of cost m is: every algorithm adds costs linearly,
 *              so the m-th cost-1 request faces exactly the test of cost m;
 *              test_properties.c checks this equivalence on the real code);
 *   retry      the least d >= 1 with admits(t + d), by exponential then
 *              binary search (admission is monotone in time: a ray);
 *   reset      the least d >= 0 with idle(t + d), likewise;
 *   delay      (leaky bucket) the least d >= 0 at which the work ahead of the
 *              request has drained: idle(t + d) of the state before it.
 *
 * The searches run in __int128 and reach waits far beyond 2^62 ms in about
 * 130 predicate evaluations. All arithmetic on times, costs and scaled units
 * is __int128, so no product can overflow (a retune carry's backlog times
 * the new token size could: it is compared against the new capacity first,
 * see ref_part_convert).
 *
 * Histories: token/leaky bucket keep every admitted (t_i, n_i) since their
 * base, a TAT set by the last refund or retune carry (none until then: then
 * TAT = max_i (t_i*r + p * sum_{j>=i} n_j), the formula of semantics.md;
 * with a base B, B + p * (sum of every n_i since) is one more term of that
 * maximum, as if B were an admission of cost 0; a refund is not expressible
 * as admissions, so it computes the new TAT from the document's rule and
 * starts a new base there). The windows keep the count of every window index
 * ever counted in (a refund lowers the count of the reading's window, a
 * sliding window's rolled to it first, as semantics.md says; a refund that
 * leaves a fixed window at 0, or both of a sliding window's counts at 0,
 * leaves a fresh state: the history is dropped, since a fresh state forgets
 * the windows before). The log keeps every admitted (ts_i, n_i), and marks
 * as dropped, at each admission, every entry that has left the window of
 * its effective time (ts_i <= te - W); a refund takes from the newest
 * entries still in the window of the effective time and removes an entry it
 * leaves at 0. (semantics.md says entries older than a window "may be
 * dropped at an admission": without refunds that is never seen, since no
 * later effective time brings them back into the window; a refund that
 * takes every entry left in the window makes it seen at a backward reading,
 * which then finds the older entries if they were kept. The model drops
 * them at every admission, as src/algo/sliding_log.c does: the document
 * leaves it open.) Fast paths (a running maximum, prefix sums, binary
 * search) are cross-checked against plain scans of the history on small
 * histories and periodically on large ones; a disagreement is a bug of the
 * model and aborts.
 *
 * Policies (ref_model): parts may be shadow parts ("Shadow parts" of
 * semantics.md): the enforced parts alone decide every field but
 * shadow_denied; a shadow part records an admitted request only when it
 * would itself admit it. The verbs: ref_model_ask (peek: decide on a deep
 * copy, nothing changed), ref_model_refund, ref_model_reset, and
 * ref_model_retune (a changed configuration: carry where semantics.md's
 * "Retune" carries, else the in-use amount charged at t into a fresh part).
 *
 * Not thread-safe. Memory: O(admissions). Header-only (static functions). */
#ifndef SLUICE_TEST_REF_MODELS_H
#define SLUICE_TEST_REF_MODELS_H

#include "sluice.h"

#include <inttypes.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef __int128 ref_i128;

/* Every function here is static; a test uses some of them. */
#define REF_FN static __attribute__((unused))

#define REF_BIG ((ref_i128)1 << 120) /* "infinity" for maxima */

REF_FN void ref_die_(const char *what) {
    fprintf(stderr, "ref_models.h: model inconsistency: %s\n", what);
    abort();
}

/* Prints an __int128 in decimal into buf (>= 42 bytes); returns buf. */
REF_FN const char *ref_i128_str(ref_i128 v, char *buf) {
    char tmp[48];
    int k = 0, neg = v < 0;
    unsigned __int128 u = neg ? (unsigned __int128)(-(v + 1)) + 1 : (unsigned __int128)v;
    do {
        tmp[k++] = (char)('0' + (int)(u % 10));
        u /= 10;
    } while (u);
    int j = 0;
    if (neg) buf[j++] = '-';
    while (k) buf[j++] = tmp[--k];
    buf[j] = 0;
    return buf;
}

/* Greatest integer q with q*b <= a (b > 0), written from the definition. */
REF_FN ref_i128 ref_floor_div_(ref_i128 a, ref_i128 b) {
    if (a >= INT64_MIN && a <= INT64_MAX && b <= INT64_MAX) { /* the same in 64 bits, faster */
        int64_t q = (int64_t)a / (int64_t)b;
        if ((ref_i128)q * b > a) q -= 1;
        return q;
    }
    ref_i128 q = a / b; /* C truncates toward zero */
    if (q * b > a) q -= 1;
    return q;
}

/* Least integer q with q*b >= a (b > 0). */
REF_FN ref_i128 ref_ceil_div_(ref_i128 a, ref_i128 b) {
    ref_i128 q = a / b;
    if (q * b < a) q += 1;
    return q;
}

REF_FN int64_t ref_gcd_(int64_t a, int64_t b) {
    while (b != 0) {
        int64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

/* ------------------------------------------------------------------------ */
/* One part: one configuration's history                                    */
/* ------------------------------------------------------------------------ */

/* One history item. Buckets and log: an admission (a = its time, n = its
 * cost). Windows: a window (a = its index, n = the count admitted in it).
 * cum: the sum of n over this item and all before it. */
typedef struct {
    int64_t a, n;
    ref_i128 cum;
} ref_ent;

typedef struct {
    sluice_config cfg;
    sluice_algorithm algo;
    int64_t limit;      /* C or L                                       */
    int64_t w;          /* W: window of the window algorithms and log   */
    ref_i128 r, p, tau; /* buckets: 1 ms = r units, 1 token = p units   */
    ref_ent *e;
    size_t len, cap;
    size_t lo;          /* log: entries before lo were dropped (left the window at an admission) */
    /* buckets: max over admissions i of (t_i*r - p*(cost admitted before
     * i)), and over the base (a term base - p*0); then TAT = p*(total cost)
     * + amax (see ref_tat_). */
    ref_i128 amax;
    bool based;    /* buckets: a base TAT set by a refund or a carry      */
    ref_i128 base; /* buckets: that TAT; the history is what came after   */
    unsigned long n_ops; /* paces the cross-checks against plain scans   */
} ref_part;

REF_FN bool ref_is_bucket_(const ref_part *m) {
    return m->algo == SLUICE_TOKEN_BUCKET || m->algo == SLUICE_LEAKY_BUCKET;
}

REF_FN ref_i128 ref_total_(const ref_part *m) { return m->len ? m->e[m->len - 1].cum : 0; }

/* Nothing counted: a fresh state (every algorithm; a bucket's TAT is then
 * minus infinity). */
REF_FN bool ref_part_empty_(const ref_part *m) { return m->len == m->lo && !m->based; }

/* Forgets everything: a fresh state (the memory stays allocated). */
REF_FN void ref_part_clear_(ref_part *m) {
    m->len = m->lo = 0;
    m->based = false;
    m->base = m->amax = 0;
}

REF_FN void ref_part_init(ref_part *m, const sluice_config *c) {
    memset(m, 0, sizeof *m);
    m->cfg = *c;
    m->algo = c->algorithm;
    m->limit = c->limit;
    m->w = c->period_ms;
    if (ref_is_bucket_(m)) {
        int64_t g = ref_gcd_(c->rate, c->period_ms);
        m->r = c->rate / g;
        m->p = c->period_ms / g;
        m->tau = (ref_i128)c->limit * m->p;
    }
}

REF_FN void ref_part_free(ref_part *m) {
    free(m->e);
    m->e = NULL;
    m->len = m->cap = 0;
}

REF_FN void ref_push_(ref_part *m, int64_t a, int64_t n) {
    if (m->len == m->cap) {
        size_t cap = m->cap ? 2 * m->cap : 64;
        ref_ent *e = realloc(m->e, cap * sizeof *e);
        if (!e) ref_die_("out of memory");
        m->e = e;
        m->cap = cap;
    }
    m->e[m->len].a = a;
    m->e[m->len].n = n;
    m->e[m->len].cum = ref_total_(m) + n;
    m->len++;
}

/* Copies src into dst (a deep copy; dst must not own memory). */
REF_FN void ref_part_copy(ref_part *dst, const ref_part *src) {
    *dst = *src;
    dst->e = NULL;
    dst->cap = src->len ? src->len : 0;
    if (src->len) {
        dst->e = malloc(src->len * sizeof *dst->e);
        if (!dst->e) ref_die_("out of memory");
        memcpy(dst->e, src->e, src->len * sizeof *dst->e);
    }
}

/* ---- token bucket and leaky bucket: TAT from the admitted (t_i, n_i) ---- */

/* TAT = max_i (t_i*r + p * sum_{j>=i} n_j), straight from the definition. */
REF_FN ref_i128 ref_tat_scan_(const ref_part *m) {
    ref_i128 best = -REF_BIG, suffix = 0;
    for (size_t i = m->len; i-- > 0;) {
        suffix += m->e[i].n;
        ref_i128 v = (ref_i128)m->e[i].a * m->r + m->p * suffix;
        if (v > best) best = v;
    }
    /* the base: TAT after the base alone is B, and every admission since
     * adds its cost*p on top of max(TAT, t_i*r), so B contributes B plus
     * every cost since (suffix is now their sum) */
    if (m->based && m->base + m->p * suffix > best) best = m->base + m->p * suffix;
    return best;
}

/* The same maximum with p*total taken out of it: sum_{j>=i} n_j = total -
 * (cost before i), so every term is p*total + (t_i*r - p*(cost before i)),
 * and the bracket of an admission never changes afterwards. */
REF_FN ref_i128 ref_tat_(const ref_part *m) { return m->p * ref_total_(m) + m->amax; }

/* Backlog b at reading t in scaled units: the admitted work not yet drained. */
REF_FN ref_i128 ref_backlog_(const ref_part *m, ref_i128 t) {
    if (ref_part_empty_(m)) return 0; /* fresh: TAT is minus infinity */
    ref_i128 b = ref_tat_(m) - t * m->r;
    return b > 0 ? b : 0;
}

/* ---- fixed and sliding window: the count of each window index ---- */

/* The count admitted in window index k (windows only). */
REF_FN ref_i128 ref_window_count_(const ref_part *m, ref_i128 k) {
    for (size_t i = m->len; i-- > 0;) {
        if (m->e[i].a == k) return m->e[i].n;
        if (m->e[i].a < k) break;
    }
    return 0;
}

/* The newest window index ever counted in (windows; len > 0). */
REF_FN int64_t ref_newest_window_(const ref_part *m) { return m->e[m->len - 1].a; }

/* Fixed window: the window a reading counts in. A reading in or after the
 * newest window counted in is in its own window; an earlier (backward)
 * reading stays in the newest window counted in. */
REF_FN ref_i128 ref_fw_window_(const ref_part *m, ref_i128 t) {
    ref_i128 k = ref_floor_div_(t, m->w);
    if (m->len && k < ref_newest_window_(m)) k = ref_newest_window_(m);
    return k;
}

/* Sliding window: the effective time, never before the start of the newest
 * window counted in. */
REF_FN ref_i128 ref_sw_time_(const ref_part *m, ref_i128 t) {
    if (m->len) {
        ref_i128 start = (ref_i128)ref_newest_window_(m) * m->w;
        if (t < start) return start;
    }
    return t;
}

/* Sliding window usage at t: the counts of the previous and the current
 * window of the effective time, and the offset e in the current one. */
REF_FN void ref_sw_usage_(const ref_part *m, ref_i128 t, ref_i128 *prev, ref_i128 *cur, ref_i128 *e) {
    ref_i128 te = ref_sw_time_(m, t);
    ref_i128 k = ref_floor_div_(te, m->w);
    *prev = ref_window_count_(m, k - 1);
    *cur = ref_window_count_(m, k);
    *e = te - k * m->w;
}

/* ---- sliding log: every admitted (ts_i, n_i), forever ---- */

/* The effective time: the newest entry's time when the reading is earlier
 * (entries kept only: a dropped entry is older than every kept one). */
REF_FN ref_i128 ref_log_time_(const ref_part *m, ref_i128 t) {
    if (m->len > m->lo && t < m->e[m->len - 1].a) return m->e[m->len - 1].a;
    return t;
}

/* Cost admitted in (te - W, te], by scanning every entry kept. */
REF_FN ref_i128 ref_log_used_scan_(const ref_part *m, ref_i128 te) {
    ref_i128 used = 0;
    for (size_t i = m->lo; i < m->len; i++)
        if (m->e[i].a > te - m->w && m->e[i].a <= te) used += m->e[i].n;
    return used;
}

/* The same by binary search (timestamps never decrease) and prefix sums. */
REF_FN ref_i128 ref_log_used_(const ref_part *m, ref_i128 te) {
    size_t lo = m->lo, hi = m->len; /* first entry kept with ts > te - W */
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (m->e[mid].a > te - m->w) hi = mid;
        else lo = mid + 1;
    }
    return ref_total_(m) - (lo ? m->e[lo - 1].cum : 0);
}

/* ---- the two predicates every field is derived from ---- */

/* Is a request of cost n (1 <= n) admitted at reading t? */
REF_FN bool ref_part_admits(const ref_part *m, ref_i128 t, int64_t n) {
    switch (m->algo) {
    case SLUICE_TOKEN_BUCKET:
    case SLUICE_LEAKY_BUCKET:
        /* there is room for n more tokens of work on top of the backlog */
        return ref_backlog_(m, t) + (ref_i128)n * m->p <= m->tau;
    case SLUICE_FIXED_WINDOW:
        return ref_window_count_(m, ref_fw_window_(m, t)) + n <= m->limit;
    case SLUICE_SLIDING_WINDOW: {
        /* prev*(W-e)/W + cur + n <= L, multiplied by W */
        ref_i128 prev, cur, e;
        ref_sw_usage_(m, t, &prev, &cur, &e);
        return prev * (m->w - e) + (cur + n) * m->w <= (ref_i128)m->limit * m->w;
    }
    case SLUICE_SLIDING_LOG:
        return ref_log_used_(m, ref_log_time_(m, t)) + n <= m->limit;
    }
    ref_die_("unknown algorithm");
    return false;
}

/* Does the state at reading t decide exactly as a fresh state (nothing
 * counted against the request any more)? */
REF_FN bool ref_part_idle(const ref_part *m, ref_i128 t) {
    switch (m->algo) {
    case SLUICE_TOKEN_BUCKET:
    case SLUICE_LEAKY_BUCKET:
        return ref_backlog_(m, t) == 0;
    case SLUICE_FIXED_WINDOW:
        return ref_window_count_(m, ref_fw_window_(m, t)) == 0;
    case SLUICE_SLIDING_WINDOW: {
        ref_i128 prev, cur, e;
        ref_sw_usage_(m, t, &prev, &cur, &e);
        return prev == 0 && cur == 0;
    }
    case SLUICE_SLIDING_LOG:
        return ref_log_used_(m, ref_log_time_(m, t)) == 0;
    }
    ref_die_("unknown algorithm");
    return false;
}

/* Records an admission of cost n at reading t (ref_part_admits said yes). */
REF_FN void ref_part_admit(ref_part *m, int64_t t, int64_t n) {
    switch (m->algo) {
    case SLUICE_TOKEN_BUCKET:
    case SLUICE_LEAKY_BUCKET: {
        ref_i128 v = (ref_i128)t * m->r - m->p * ref_total_(m);
        if (ref_part_empty_(m) || v > m->amax) m->amax = v;
        ref_push_(m, t, n);
        break;
    }
    case SLUICE_FIXED_WINDOW:
    case SLUICE_SLIDING_WINDOW: {
        ref_i128 k = m->algo == SLUICE_FIXED_WINDOW ? ref_fw_window_(m, t)
                                                    : ref_floor_div_(ref_sw_time_(m, t), m->w);
        if (m->len && ref_newest_window_(m) == k) {
            m->e[m->len - 1].n += n;
            m->e[m->len - 1].cum += n;
        } else {
            if (m->len && k < ref_newest_window_(m)) ref_die_("window went backwards");
            ref_push_(m, (int64_t)k, n);
        }
        break;
    }
    case SLUICE_SLIDING_LOG: {
        ref_i128 te = ref_log_time_(m, t);
        while (m->lo < m->len && m->e[m->lo].a <= te - m->w) m->lo++; /* what has left the window */
        ref_push_(m, (int64_t)te, n);
        break;
    }
    }
}

/* Sets the running totals (cum) of entries from..len-1 from their costs. */
REF_FN void ref_recum_(ref_part *m, size_t from) {
    for (size_t i = from; i < m->len; i++) m->e[i].cum = (i ? m->e[i - 1].cum : 0) + m->e[i].n;
}

/* Gives n back at reading t (docs/semantics.md, "Peek, refund, reset"), as
 * far as it still counts, never beyond a fresh state. */
REF_FN void ref_part_refund(ref_part *m, int64_t t, int64_t n) {
    if (ref_part_empty_(m)) return; /* fresh: nothing counts */
    switch (m->algo) {
    case SLUICE_TOKEN_BUCKET:
    case SLUICE_LEAKY_BUCKET: {
        /* if TAT > ts: TAT := max(TAT - n*p, ts); else nothing. The new TAT
         * is the base of what comes after (see the top comment). */
        ref_i128 tat = ref_tat_scan_(m), ts = (ref_i128)t * m->r;
        if (tat <= ts) return;
        ref_i128 nt = tat - (ref_i128)n * m->p;
        if (nt < ts) nt = ts;
        ref_part_clear_(m);
        m->based = true;
        m->base = m->amax = nt;
        return;
    }
    case SLUICE_FIXED_WINDOW: {
        /* the reading's effective window K and its count c: when c > 0 the
         * state becomes (K, max(0, c - n)); a count of 0 is a fresh state */
        ref_i128 k = ref_fw_window_(m, t), c = ref_window_count_(m, k);
        if (c == 0) return;
        if (k != ref_newest_window_(m)) ref_die_("fixed window: a count in an old window");
        c = c > n ? c - n : 0;
        if (c == 0) {
            ref_part_clear_(m);
        } else {
            m->e[m->len - 1].n = (int64_t)c;
            ref_recum_(m, m->len - 1);
        }
        return;
    }
    case SLUICE_SLIDING_WINDOW: {
        /* rolled to K: (P, Cn); nothing when both are 0; else a = min(Cn, n)
         * from the current window, b = min(P, n - a) from the previous, and
         * the state is (K, P - b, Cn - a): window K is the newest counted
         * in from now on, even with a count of 0 (it bounds the effective
         * time of a later reading, as the state's index does) */
        ref_i128 te = ref_sw_time_(m, t), k = ref_floor_div_(te, m->w);
        ref_i128 P = ref_window_count_(m, k - 1), Cn = ref_window_count_(m, k);
        if (P == 0 && Cn == 0) return;
        ref_i128 a = Cn < n ? Cn : n;
        ref_i128 b = P < n - a ? P : n - a;
        if (P - b == 0 && Cn - a == 0) { /* prev = cur = 0: fresh */
            ref_part_clear_(m);
            return;
        }
        while (m->len && m->e[m->len - 1].a >= k - 1) m->len--; /* windows K-1 and K, written anew */
        if (P - b > 0) ref_push_(m, (int64_t)(k - 1), (int64_t)(P - b));
        ref_push_(m, (int64_t)k, (int64_t)(Cn - a));
        return;
    }
    case SLUICE_SLIDING_LOG: {
        /* from the newest entry back while n > 0 and the entry is in the
         * window of te (ts_i > te - W): it gives min(n_i, n); an entry left
         * with nothing is removed (only the last one touched can keep some) */
        ref_i128 te = ref_log_time_(m, t);
        ref_i128 left = n;
        while (left > 0 && m->len > m->lo && m->e[m->len - 1].a > te - m->w) {
            ref_ent *x = &m->e[m->len - 1];
            ref_i128 take = x->n < left ? x->n : left;
            x->n -= (int64_t)take;
            x->cum -= take;
            left -= take;
            if (x->n == 0) m->len--;
        }
        return;
    }
    }
    ref_die_("unknown algorithm");
}

/* Cross-checks the fast paths against plain scans: every time while the
 * history is short, then every 64th call. */
REF_FN void ref_part_selfcheck_(ref_part *m, ref_i128 t) {
    if (m->len > 128 && (m->n_ops++ & 63) != 0) return;
    if (ref_is_bucket_(m) && !ref_part_empty_(m) && ref_tat_scan_(m) != ref_tat_(m)) ref_die_("TAT");
    ref_i128 sum = 0;
    for (size_t i = 0; i < m->len; i++) { /* the running totals, and the history's order */
        sum += m->e[i].n;
        if (m->e[i].cum != sum || m->e[i].n < 0) ref_die_("running totals");
        /* a bucket's readings may go back; a log's kept entries (the dropped
         * ones may be later than the first kept after the kept ones were
         * all refunded) are in order */
        if (i == 0 || ref_is_bucket_(m) || (m->algo == SLUICE_SLIDING_LOG && i <= m->lo)) continue;
        if (m->algo == SLUICE_SLIDING_LOG ? m->e[i].a < m->e[i - 1].a : m->e[i].a <= m->e[i - 1].a)
            ref_die_("history out of order");
    }
    if (m->algo == SLUICE_SLIDING_LOG) {
        for (size_t i = m->lo; i < m->len; i++)
            if (m->e[i].n == 0) ref_die_("a log entry of nothing");
        ref_i128 te = ref_log_time_(m, t);
        if (ref_log_used_scan_(m, te) != ref_log_used_(m, te)) ref_die_("log usage");
    }
    if (m->algo == SLUICE_FIXED_WINDOW && m->len && m->e[m->len - 1].n == 0) ref_die_("fixed window at 0");
    if (m->algo == SLUICE_SLIDING_WINDOW && m->len) { /* never both counts of the newest two at 0 */
        ref_i128 k = ref_newest_window_(m);
        if (ref_window_count_(m, k) == 0 && ref_window_count_(m, k - 1) == 0) ref_die_("sliding window at 0");
    }
}

/* ------------------------------------------------------------------------ */
/* Searches                                                                  */
/* ------------------------------------------------------------------------ */

/* A monotone predicate of the reading: false up to some reading, true from
 * there on. ctx is a model (part or composite), n a cost (unused by idle). */
typedef bool (*ref_pred_fn)(const void *ctx, ref_i128 t, int64_t n);

/* The least d >= lo with f(t + d): exponential search for a true point,
 * then binary search between the last false and the first true. */
REF_FN ref_i128 ref_least_wait(ref_pred_fn f, const void *ctx, ref_i128 t, int64_t n, ref_i128 lo) {
    if (f(ctx, t + lo, n)) return lo;
    ref_i128 bad = lo, good, step = 1;
    for (;;) {
        good = lo + step;
        if (f(ctx, t + good, n)) break;
        bad = good;
        if (step > ((ref_i128)1 << 100)) ref_die_("a wait that never ends");
        step *= 2;
    }
    while (good - bad > 1) {
        ref_i128 mid = bad + (good - bad) / 2;
        if (f(ctx, t + mid, n)) good = mid;
        else bad = mid;
    }
    /* by construction: true at good, false one ms before */
    if (!f(ctx, t + good, n) || (good > lo && f(ctx, t + good - 1, n))) ref_die_("search");
    return good;
}

/* A predicate of the cost, true for costs up to some m, false above. */
typedef bool (*ref_cost_fn)(const void *ctx, ref_i128 t, int64_t n);

/* The largest m in [0, hi] with m == 0 or f(t, m). */
REF_FN int64_t ref_most_cost(ref_cost_fn f, const void *ctx, ref_i128 t, int64_t hi) {
    int64_t good = 0, bad = hi + 1;
    while (bad - good > 1) {
        int64_t mid = good + (bad - good) / 2;
        if (f(ctx, t, mid)) good = mid;
        else bad = mid;
    }
    return good;
}

REF_FN bool ref_part_admits_fn_(const void *ctx, ref_i128 t, int64_t n) {
    return ref_part_admits((const ref_part *)ctx, t, n);
}
REF_FN bool ref_part_idle_fn_(const void *ctx, ref_i128 t, int64_t n) {
    (void)n;
    return ref_part_idle((const ref_part *)ctx, t);
}

/* remaining at t: the largest cost admitted now (see the top comment). */
REF_FN int64_t ref_part_remaining(const ref_part *m, ref_i128 t) {
    return ref_most_cost(ref_part_admits_fn_, m, t, m->limit);
}
/* retry for cost n at t: the least d >= 1 with admits(t + d, n). */
REF_FN ref_i128 ref_part_retry(const ref_part *m, ref_i128 t, int64_t n) {
    return ref_least_wait(ref_part_admits_fn_, m, t, n, 1);
}
/* reset at t: the least d >= 0 with idle(t + d). */
REF_FN ref_i128 ref_part_reset(const ref_part *m, ref_i128 t) {
    return ref_least_wait(ref_part_idle_fn_, m, t, 0, 0);
}

/* Retune, one part (docs/semantics.md, "Retune"): dst, a fresh part of the
 * new configuration, takes old's state at reading t. The same algorithm and
 * period (buckets: P; windows and log: W): the exact state carries over,
 * capped at the new limit; otherwise the amount in use in old, limit -
 * remaining at t, capped at the new limit, is admitted at t. */
REF_FN void ref_part_convert(ref_part *dst, const ref_part *old, int64_t t) {
    if (!ref_part_empty_(dst)) ref_die_("convert into a part that is not fresh");
    bool carry = dst->algo == old->algo && dst->cfg.period_ms == old->cfg.period_ms;
    if (carry && ref_is_bucket_(old)) {
        /* b = TAT - t*r (old units): TAT' = t*r' + min(ceil(b*p'/p), tau') */
        if (ref_part_empty_(old)) return;
        ref_i128 b = ref_tat_scan_(old) - (ref_i128)t * old->r;
        if (b <= 0) return; /* full: fresh */
        /* b can pass 2^100 (a reading far before the TAT), and b*p' 2^127:
         * when b > tau'*p/p', b*p'/p > tau' and the backlog is tau';
         * else b*p' <= tau'*p < 2^94 */
        ref_i128 nb = dst->tau;
        if (b <= ref_floor_div_(dst->tau * old->p, dst->p)) nb = ref_ceil_div_(b * dst->p, old->p);
        if (nb > dst->tau) nb = dst->tau;
        dst->based = true;
        dst->base = dst->amax = (ref_i128)t * dst->r + nb;
        return;
    }
    if (carry && old->algo == SLUICE_FIXED_WINDOW) { /* (k, min(cur, L')) */
        if (old->len == 0) return;
        int64_t k = ref_newest_window_(old);
        ref_i128 cur = ref_window_count_(old, k);
        ref_push_(dst, k, (int64_t)(cur < dst->limit ? cur : dst->limit));
        return;
    }
    if (carry && old->algo == SLUICE_SLIDING_WINDOW) { /* (k, min(prev, L'), min(cur, L')) */
        if (old->len == 0) return;
        int64_t k = ref_newest_window_(old);
        ref_i128 prev = ref_window_count_(old, k - 1), cur = ref_window_count_(old, k);
        if (prev > dst->limit) prev = dst->limit;
        if (cur > dst->limit) cur = dst->limit;
        if (prev > 0) ref_push_(dst, k - 1, (int64_t)prev);
        ref_push_(dst, k, (int64_t)cur);
        return;
    }
    if (carry && old->algo == SLUICE_SLIDING_LOG) {
        /* used at t at most L': the entries in the window of te, as they
         * are; else charged as below */
        ref_i128 te = ref_log_time_(old, t), used = ref_log_used_scan_(old, te);
        if (used <= dst->limit) {
            for (size_t i = old->lo; i < old->len; i++)
                if (old->e[i].a > te - old->w) ref_push_(dst, old->e[i].a, old->e[i].n);
            return;
        }
    }
    int64_t used = old->limit - ref_part_remaining(old, t);
    if (used > dst->limit) used = dst->limit;
    if (used > 0) ref_part_admit(dst, t, used); /* a fresh part admits up to its limit */
}

/* ------------------------------------------------------------------------ */
/* A policy: 1..8 parts; every enforced part must admit                      */
/* ------------------------------------------------------------------------ */

#define REF_MAX_PARTS 8

typedef struct {
    size_t n;
    ref_part part[REF_MAX_PARTS];
    bool shadow[REF_MAX_PARTS]; /* a shadow part: decided, never denying */
} ref_model;

/* A policy of n parts; shadow[i] true makes part i a shadow part (shadow
 * may be NULL: none). */
REF_FN void ref_model_init_shadow(ref_model *m, const sluice_config *parts, const bool *shadow, size_t n) {
    if (n < 1 || n > REF_MAX_PARTS) ref_die_("part count");
    memset(m, 0, sizeof *m);
    m->n = n;
    for (size_t i = 0; i < n; i++) {
        ref_part_init(&m->part[i], &parts[i]);
        m->shadow[i] = shadow && shadow[i];
    }
}

REF_FN void ref_model_init(ref_model *m, const sluice_config *parts, size_t n) {
    ref_model_init_shadow(m, parts, NULL, n);
}

REF_FN void ref_model_free(ref_model *m) {
    for (size_t i = 0; i < m->n; i++) ref_part_free(&m->part[i]);
}

REF_FN void ref_model_copy(ref_model *dst, const ref_model *src) {
    memset(dst, 0, sizeof *dst);
    dst->n = src->n;
    memcpy(dst->shadow, src->shadow, sizeof dst->shadow);
    for (size_t i = 0; i < src->n; i++) ref_part_copy(&dst->part[i], &src->part[i]);
}

REF_FN size_t ref_model_n_enforced_(const ref_model *m) {
    size_t k = 0;
    for (size_t i = 0; i < m->n; i++) k += !m->shadow[i];
    return k;
}

/* Every enforced part admits (shadow parts never deny). */
REF_FN bool ref_model_admits_fn_(const void *ctx, ref_i128 t, int64_t n) {
    const ref_model *m = ctx;
    for (size_t i = 0; i < m->n; i++)
        if (!m->shadow[i] && !ref_part_admits(&m->part[i], t, n)) return false;
    return true;
}
/* Every enforced part is idle (what a decision's reset_ms is about). */
REF_FN bool ref_model_idle_fn_(const void *ctx, ref_i128 t, int64_t n) {
    const ref_model *m = ctx;
    (void)n;
    for (size_t i = 0; i < m->n; i++)
        if (!m->shadow[i] && !ref_part_idle(&m->part[i], t)) return false;
    return true;
}

REF_FN bool ref_model_admits(const ref_model *m, ref_i128 t, int64_t n) {
    return ref_model_admits_fn_(m, t, n);
}
/* is_fresh: the state at t (and so at every later reading: usage never grows
 * with time alone) decides exactly as a fresh one: every part, shadow parts
 * too (when a store may forget the key). */
REF_FN bool ref_model_is_fresh(const ref_model *m, ref_i128 t) {
    for (size_t i = 0; i < m->n; i++)
        if (!ref_part_idle(&m->part[i], t)) return false;
    return true;
}

/* The least limit of the enforced parts (SLUICE_LIMIT_MAX when every part
 * is a shadow part): the largest cost that is not SLUICE_ECOST. */
REF_FN int64_t ref_model_max_cost(const ref_model *m) {
    int64_t lim = SLUICE_LIMIT_MAX;
    for (size_t i = 0; i < m->n; i++)
        if (!m->shadow[i] && m->part[i].limit < lim) lim = m->part[i].limit;
    return lim;
}

/* Fills remaining, limit, part, reset, part_reset of *d from the enforced
 * parts' states as they are now (after the admission, if any). */
REF_FN void ref_model_fill_state_(const ref_model *m, int64_t t, sluice_decision *d) {
    size_t n_enf = ref_model_n_enforced_(m);
    if (n_enf == 0) { /* shadow parts only: every request admitted, nothing told */
        d->remaining = SLUICE_LIMIT_MAX;
        d->limit = 0;
        d->part = 0;
        d->reset_ms = d->part_reset_ms = 0;
        return;
    }
    int64_t best = INT64_MAX;
    ref_i128 reset_max = 0;
    for (size_t i = 0; i < m->n; i++) {
        if (m->shadow[i]) continue;
        int64_t rem = ref_part_remaining(&m->part[i], t);
        if (rem < best) { /* strict: the first part wins a tie */
            best = rem;
            d->limit = m->part[i].limit;
            d->part = (int32_t)i;
        }
        if (n_enf > 1) {
            ref_i128 r = ref_part_reset(&m->part[i], t);
            if (r > reset_max) reset_max = r;
        }
    }
    d->remaining = best;
    /* reset of the whole: the least d >= 0 at which every enforced part is idle */
    ref_i128 reset = ref_least_wait(ref_model_idle_fn_, m, t, 0, 0);
    if (n_enf > 1) {
        /* each part's idle readings form a ray, so the composite's is the
         * latest of them; and the composite's remaining by definition (the
         * largest cost all enforced parts admit) is the least of theirs */
        if (reset != reset_max) ref_die_("composite reset");
        if (ref_most_cost(ref_model_admits_fn_, m, t, ref_model_max_cost(m)) != best)
            ref_die_("composite remaining");
    }
    d->reset_ms = (int64_t)reset;
    /* the named part's own reset (one enforced part: the same) */
    d->part_reset_ms = n_enf > 1 ? (int64_t)ref_part_reset(&m->part[d->part], t) : d->reset_ms;
}

/* The model's decision for a request of cost n at reading t: SLUICE_ECOST for
 * a cost outside 1..ref_model_max_cost (nothing changes), else SLUICE_OK with
 * *d filled and the admission recorded when allowed: in every enforced part,
 * and in each shadow part that would itself admit it. */
REF_FN int ref_model_decide(ref_model *m, int64_t t, int64_t n, sluice_decision *d) {
    memset(d, 0, sizeof *d);
    if (n < 1 || n > ref_model_max_cost(m)) return SLUICE_ECOST;
    for (size_t i = 0; i < m->n; i++) ref_part_selfcheck_(&m->part[i], t);
    d->enforced = true;
    bool would[REF_MAX_PARTS]; /* shadow parts: would it admit? (a cost above its limit: no) */
    for (size_t i = 0; i < m->n; i++) {
        if (!m->shadow[i]) continue;
        would[i] = n <= m->part[i].limit && ref_part_admits(&m->part[i], t, n);
        if (!would[i]) d->shadow_denied = true;
    }
    if (ref_model_admits(m, t, n)) {
        d->allowed = true;
        for (size_t i = 0; i < m->n; i++) {
            ref_part *pt = &m->part[i];
            if (m->shadow[i]) {
                if (would[i]) ref_part_admit(pt, t, n);
                continue;
            }
            if (pt->algo == SLUICE_LEAKY_BUCKET) {
                /* the request proceeds once the work ahead of it drained */
                ref_i128 delay = ref_part_reset(pt, t);
                if (delay > d->delay_ms) d->delay_ms = (int64_t)delay;
            }
            ref_part_admit(pt, t, n);
        }
    } else {
        ref_i128 retry = ref_least_wait(ref_model_admits_fn_, m, t, n, 1);
        if (ref_model_n_enforced_(m) > 1) { /* the latest of the parts' rays, see above */
            ref_i128 mx = 0;
            for (size_t i = 0; i < m->n; i++) {
                if (m->shadow[i]) continue;
                ref_i128 r = ref_part_admits(&m->part[i], t, n) ? 0 : ref_part_retry(&m->part[i], t, n);
                if (r > mx) mx = r;
            }
            if (mx != retry) ref_die_("composite retry");
        }
        if (retry > INT64_MAX) ref_die_("retry beyond int64");
        d->retry_after_ms = (int64_t)retry;
    }
    ref_model_fill_state_(m, t, d);
    return SLUICE_OK;
}

/* The peek verb: the decision a request of cost n at t would get, every
 * field, with nothing changed (decided on a deep copy). Errors as decide. */
REF_FN int ref_model_ask(const ref_model *m, int64_t t, int64_t n, sluice_decision *d) {
    ref_model c;
    ref_model_copy(&c, m);
    int rc = ref_model_decide(&c, t, n, d);
    ref_model_free(&c);
    return rc;
}

/* The refund verb: SLUICE_ECOST for n outside 1..ref_model_max_cost
 * (nothing changes); else every part, shadow parts too, gives n back at t
 * (ref_part_refund), and *d is the ask of cost 1 at t right after. */
REF_FN int ref_model_refund(ref_model *m, int64_t t, int64_t n, sluice_decision *d) {
    if (n < 1 || n > ref_model_max_cost(m)) {
        memset(d, 0, sizeof *d);
        return SLUICE_ECOST;
    }
    for (size_t i = 0; i < m->n; i++) {
        ref_part_selfcheck_(&m->part[i], t);
        ref_part_refund(&m->part[i], t, n);
        ref_part_selfcheck_(&m->part[i], t);
    }
    return ref_model_ask(m, t, 1, d);
}

/* The reset verb: every part fresh; *d is the ask of cost 1 at t. */
REF_FN void ref_model_reset(ref_model *m, int64_t t, sluice_decision *d) {
    for (size_t i = 0; i < m->n; i++) ref_part_clear_(&m->part[i]);
    ref_model_ask(m, t, 1, d);
}

/* Retune: the model becomes one of the configuration parts[0..n) (shadow
 * as ref_model_init_shadow), converted at reading t part by part
 * (ref_part_convert); parts beyond the old count start fresh. */
REF_FN void ref_model_retune(ref_model *m, const sluice_config *parts, const bool *shadow, size_t n, int64_t t) {
    ref_model nm;
    ref_model_init_shadow(&nm, parts, shadow, n);
    for (size_t i = 0; i < n && i < m->n; i++) ref_part_convert(&nm.part[i], &m->part[i], t);
    ref_model_free(m);
    *m = nm;
}

/* The state as it is at t, no request: allowed false, retry 0, delay 0. */
REF_FN void ref_model_peek(const ref_model *m, int64_t t, sluice_decision *d) {
    memset(d, 0, sizeof *d);
    d->enforced = true;
    ref_model_fill_state_(m, t, d);
}

/* One part's peek (the vtable's peek of that part's state). */
REF_FN void ref_part_peek(const ref_part *m, int64_t t, sluice_decision *d) {
    memset(d, 0, sizeof *d);
    d->enforced = true;
    d->remaining = ref_part_remaining(m, t);
    d->limit = m->limit;
    d->reset_ms = d->part_reset_ms = (int64_t)ref_part_reset(m, t);
}

REF_FN void ref_decision_str(const sluice_decision *d, char *buf, size_t len) {
    snprintf(buf, len,
             "{allowed=%d remaining=%" PRId64 " retry=%" PRId64 " reset=%" PRId64 " delay=%" PRId64
             " limit=%" PRId64 " part=%d part_reset=%" PRId64 " enforced=%d shadow_denied=%d}",
             (int)d->allowed, d->remaining, d->retry_after_ms, d->reset_ms, d->delay_ms, d->limit,
             (int)d->part, d->part_reset_ms, (int)d->enforced, (int)d->shadow_denied);
}

REF_FN bool ref_decision_eq(const sluice_decision *a, const sluice_decision *b) {
    return a->allowed == b->allowed && a->remaining == b->remaining &&
           a->retry_after_ms == b->retry_after_ms && a->reset_ms == b->reset_ms &&
           a->delay_ms == b->delay_ms && a->limit == b->limit && a->part == b->part &&
           a->part_reset_ms == b->part_reset_ms && a->enforced == b->enforced &&
           a->shadow_denied == b->shadow_denied;
}

#endif
