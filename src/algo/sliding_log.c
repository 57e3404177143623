/* sliding_log.c: the exact sliding log. Never more than L admitted in any W
 * consecutive ms: every admission is kept, as (ms, running total) entries in a
 * ring, until it leaves the window. Entries of one ms are merged, so the ring
 * holds at most min(L, W) entries: O(limit) memory. Running totals make the
 * cost in the window, and the exact retry time, binary searches: O(log n).
 *
 * Effective time is max(reading, newest entry): a backward reading is taken
 * as the newest admission's time. Entries are dropped only at an admission,
 * so a denial never changes the state.
 *
 * In memory the ring grows by doubling as needed (reserve); in a byte
 * layout it has its largest size from the start: u32 cap, head, len, pad,
 * i64 base, then cap entries of (i64 ms, i64 running total), decided in
 * place. */
#include "algo.h"

#include <stdlib.h>
#include <string.h>

static sluice__log_entry *at(const sluice__log *g, uint32_t i) {
    return &g->e[(g->head + i) & (g->cap - 1)];
}

static int64_t cum_before(const sluice__log *g, uint32_t i) {
    return i == 0 ? g->base : at(g, i - 1)->cum;
}

/* The first entry with ts > limit_ms (len when none). */
static uint32_t first_after(const sluice__log *g, int64_t limit_ms) {
    uint32_t lo = 0, hi = g->len;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (at(g, mid)->ts_ms > limit_ms) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

/* The first entry with cum >= target (target <= the newest cum). */
static uint32_t first_cum(const sluice__log *g, uint32_t lo, int64_t target) {
    uint32_t hi = g->len - 1;
    while (lo < hi) {
        uint32_t mid = lo + (hi - lo) / 2;
        if (at(g, mid)->cum >= target) hi = mid;
        else lo = mid + 1;
    }
    return lo;
}

typedef struct {
    int64_t te;    /* effective time */
    uint32_t j;    /* first entry in the window */
    int64_t used;  /* cost in the window */
    int64_t newest_ms;
} log_view;

static log_view log_at(const sluice__params *p, const sluice__state *s, int64_t now_ms) {
    const sluice__log *g = &s->log;
    log_view v;
    v.newest_ms = g->len ? at(g, g->len - 1)->ts_ms : now_ms;
    v.te = v.newest_ms > now_ms ? v.newest_ms : now_ms;
    v.j = first_after(g, v.te - p->window_ms);
    v.used = g->len ? at(g, g->len - 1)->cum - cum_before(g, v.j) : 0;
    return v;
}

static void log_fill(const sluice__params *p, int64_t used, int64_t newest_ms, int64_t now_ms,
                     sluice_decision *d) {
    d->enforced = true;
    d->shadow_denied = false;
    d->local = false;
    d->part = 0;
    d->limit = p->limit;
    d->remaining = p->limit - used;
    d->reset_ms = d->part_reset_ms = used > 0 ? newest_ms + p->window_ms - now_ms : 0;
    d->delay_ms = 0;
}

static int log_decide(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost,
                      sluice_decision *d, int commit) {
    sluice__log *g = &s->log;
    log_view v = log_at(p, s, now_ms);
    if (v.used + cost > p->limit) {
        /* Wait until entries j..q have left: the first q whose running total
         * reaches newest + cost - L; then at ts_q + W it is admitted. */
        int64_t target = at(g, g->len - 1)->cum + cost - p->limit;
        uint32_t q = first_cum(g, v.j, target);
        d->allowed = false;
        d->retry_after_ms = at(g, q)->ts_ms + p->window_ms - now_ms;
        log_fill(p, v.used, v.newest_ms, now_ms, d);
        return 0;
    }
    int merge = g->len > v.j && at(g, g->len - 1)->ts_ms == v.te;
    d->allowed = true;
    d->retry_after_ms = 0;
    log_fill(p, v.used + cost, v.te, now_ms, d);
    if (!merge && g->len - v.j >= g->cap) return SLUICE__EGROW; /* *d is what it would be */
    if (!commit) return 0;
    /* drop what has left the window, then record the admission */
    if (v.j > 0) {
        g->base = at(g, v.j - 1)->cum;
        g->head = (g->head + v.j) & (g->cap - 1);
        g->len -= v.j;
    }
    int64_t newest = g->len ? at(g, g->len - 1)->cum : g->base;
    if (newest > (INT64_C(1) << 62)) { /* keep running totals small */
        for (uint32_t i = 0; i < g->len; i++) at(g, i)->cum -= g->base;
        newest -= g->base;
        g->base = 0;
    }
    if (merge) {
        at(g, g->len - 1)->cum += cost;
    } else {
        g->len++;
        at(g, g->len - 1)->ts_ms = v.te;
        at(g, g->len - 1)->cum = newest + cost;
    }
    return 0;
}

static void log_peek(const sluice__params *p, const sluice__state *s, int64_t now_ms,
                     sluice_decision *d) {
    log_view v = log_at(p, s, now_ms);
    d->allowed = false;
    d->retry_after_ms = 0;
    log_fill(p, v.used, v.newest_ms, now_ms, d);
}

static int log_is_fresh(const sluice__params *p, const sluice__state *s, int64_t now_ms) {
    return log_at(p, s, now_ms).used == 0;
}

static void log_init(const sluice__params *p, sluice__state *s) {
    (void)p;
    memset(&s->log, 0, sizeof s->log);
}

/* The most entries a log of these parameters ever holds: min(L, W). */
static int64_t max_entries(const sluice__params *p) {
    return p->limit < p->window_ms ? p->limit : p->window_ms;
}

/* The ring's largest size: a power of two, at least min(L, W). */
static uint64_t most_cap(const sluice__params *p) {
    uint64_t most = 1;
    while (most < (uint64_t)max_entries(p)) most *= 2;
    return most;
}

/* Doubles the ring (at most most_cap): 0, or SLUICE_ENOMEM, unchanged. */
static int log_reserve(const sluice__params *p, sluice__state *s) {
    sluice__log *g = &s->log;
    uint64_t cap = g->cap ? (uint64_t)g->cap * 2 : 16;
    uint64_t most = most_cap(p);
    if (cap > most) cap = most;
    if (cap <= g->len || cap > (UINT64_C(1) << 31)) return SLUICE_ENOMEM;
    sluice__log_entry *e = malloc(cap * sizeof *e);
    if (!e) return SLUICE_ENOMEM;
    for (uint32_t i = 0; i < g->len; i++) e[i] = *at(g, i);
    free(g->e);
    g->e = e;
    g->cap = (uint32_t)cap;
    g->head = 0;
    return 0;
}

/* ---- the verbs ---- */

/* The newest entries still in the window give back cost, newest first. */
static void log_refund(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost) {
    sluice__log *g = &s->log;
    log_view v = log_at(p, s, now_ms);
    while (cost > 0 && g->len > v.j) {
        sluice__log_entry *last = at(g, g->len - 1);
        int64_t own = last->cum - cum_before(g, g->len - 1);
        if (own > cost) {
            last->cum -= cost;
            return;
        }
        cost -= own;
        g->len--;
    }
}

/* The same window, and entries that fit to's ring and limit: they carry
 * over (the oldest first: t's ring is fresh). */
static int log_carry(const sluice__params *from, const sluice__state *s, const sluice__params *to, sluice__state *t,
                     int64_t now_ms) {
    const sluice__log *g = &s->log;
    sluice__log *h = &t->log;
    if (from->window_ms != to->window_ms) return 0;
    log_view v = log_at(from, s, now_ms);
    uint32_t n = g->len - v.j;
    if (v.used > to->limit) return 0;
    if (n > h->cap) return -1; /* room first */
    h->head = 0;
    h->len = n;
    h->base = cum_before(g, v.j);
    for (uint32_t i = 0; i < n; i++) h->e[i] = *at(g, v.j + i);
    return 1;
}

static void log_release(sluice__state *s) {
    free(s->log.e);
    memset(&s->log, 0, sizeof s->log);
}

/* ---- layout: the ring at its largest, in place ---- */

static uint64_t log_layout_bytes(const sluice__params *p) {
    return 24 + most_cap(p) * sizeof(sluice__log_entry);
}

static void log_layout_init(const sluice__params *p, uint8_t *at) {
    uint32_t hdr[4] = {(uint32_t)most_cap(p), 0, 0, 0};
    int64_t base = 0;
    memcpy(at, hdr, 16);
    memcpy(at + 16, &base, 8);
}

static int log_layout_read(const sluice__params *p, uint8_t *at, sluice__state *s) {
    uint32_t hdr[4];
    memcpy(hdr, at, 16);
    memcpy(&s->log.base, at + 16, 8);
    s->log.cap = hdr[0];
    s->log.head = hdr[1];
    s->log.len = hdr[2];
    s->log.e = (sluice__log_entry *)(void *)(at + 24);
    return hdr[0] != most_cap(p) || hdr[1] >= hdr[0] || hdr[2] > hdr[0] ? -1 : 0;
}

static void log_layout_write(const sluice__params *p, const sluice__state *s, uint8_t *at) {
    uint32_t hdr[4] = {s->log.cap, s->log.head, s->log.len, 0};
    (void)p;
    memcpy(at, hdr, 16);
    memcpy(at + 16, &s->log.base, 8); /* the entries were written in place */
}

const sluice__algo sluice__sliding_log = {
    .id = SLUICE_SLIDING_LOG,
    .name = "sliding-log",
    .flags = SLUICE__ALGO_GROWS,
    .state_bytes = sizeof(((sluice__state *)0)->log),
    .decide = log_decide,
    .peek = log_peek,
    .is_fresh = log_is_fresh,
    .init = log_init,
    .refund = log_refund,
    .carry = log_carry,
    .reserve = log_reserve,
    .release = log_release,
    .layout_bytes = log_layout_bytes,
    .layout_init = log_layout_init,
    .layout_read = log_layout_read,
    .layout_write = log_layout_write,
    .quota = sluice__window_quota,
};
