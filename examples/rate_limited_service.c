/* rate_limited_service.c: a rate limiter as a decorator, in C, per client.
 *
 * The limiter is a policy; the work it protects is a separate thing. A caller
 * talks to an order_service, an interface: one function pointer and the
 * object it is called on. The real service implements it; the rate-limited
 * decorator implements the SAME interface, holds the real one (its delegate),
 * a sluice_store and a policy, and forwards a call only when the store admits
 * it under the order's client id. Callers cannot tell which one they hold:
 * submit() below is the only caller code, and it runs unchanged against both.
 *
 * Each client has a budget of its own (one state per client id in the
 * store), so a noisy client cannot spend another's. The store is
 * thread-safe, and a decision is atomic for its key: the decorator is as
 * thread-safe as its delegate.
 *
 * A manual clock (given to the store in its options) drives time, so the run
 * is deterministic; main() checks the decorator's behaviour and exits 0 only
 * if it is what the design promises:
 *   - admitted calls reach the delegate, with its result passed through;
 *   - denied calls do not reach it and come back as ORDER_RATE_LIMITED with
 *     the exact wait, a code distinct from every result of the real service;
 *   - one client exhausting its budget leaves every other client's intact;
 *   - time passing gives each client its capacity back. */
#define _POSIX_C_SOURCE 200809L /* strnlen */
#include <sluice.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The interface                                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
    const char *client_id;
    const char *symbol;
    int64_t quantity;
} order;

/* What place() returns. Rate limiting has its own code, so a caller can
 * tell "try later" from "this order is wrong" or "it failed". */
enum {
    ORDER_PLACED = 0,
    ORDER_RATE_LIMITED = 1, /* not placed; retry after result.retry_after_ms */
    ORDER_INVALID = -1,     /* the order itself is bad                       */
    ORDER_FAILED = -2,      /* the service could not decide                  */
};

typedef struct {
    int64_t order_id;       /* when ORDER_PLACED    */
    int64_t retry_after_ms; /* when ORDER_RATE_LIMITED */
} order_result;

/* An order service: place(self, order, result) and the object it acts on. */
typedef struct {
    int (*place)(void *self, const order *o, order_result *out);
    void *self;
} order_service;

static int order_service_place(const order_service *s, const order *o, order_result *out) {
    return s->place(s->self, o, out);
}

/* ------------------------------------------------------------------------ */
/* The real service                                                          */
/* ------------------------------------------------------------------------ */

typedef struct {
    int64_t next_id;
    int64_t n_placed; /* how many orders reached the real work */
} order_book;

static int order_book_place(void *self, const order *o, order_result *out) {
    order_book *b = self;
    if (!o->client_id || !o->symbol || o->quantity < 1) return ORDER_INVALID;
    out->order_id = b->next_id++;
    out->retry_after_ms = 0;
    b->n_placed++;
    return ORDER_PLACED;
}

static order_service order_book_service(order_book *b) {
    return (order_service){order_book_place, b};
}

/* ------------------------------------------------------------------------ */
/* The decorator: same interface, a delegate, a store and a policy           */
/* ------------------------------------------------------------------------ */

typedef struct {
    order_service delegate;
    sluice_store *store;         /* one state per client id; thread-safe  */
    const sluice_policy *policy; /* the budget every client gets          */
} rate_limited_service;

static int rate_limited_place(void *self, const order *o, order_result *out) {
    rate_limited_service *r = self;
    sluice_decision d;
    /* The client id is the key: an order without one cannot be charged to
     * anyone, so it is refused here rather than let through unlimited. */
    size_t n = o->client_id ? strnlen(o->client_id, SLUICE_KEY_MAX + 1) : 0;
    if (n < 1 || n > SLUICE_KEY_MAX) return ORDER_INVALID;
    /* A store error fails closed. (A remote store that cannot reach its
     * server returns no error by default: on_error=allow admits, with
     * d.enforced false; open it with on_error=error to fail closed here.) */
    if (sluice_store_acquire(r->store, r->policy, o->client_id, n, 1, &d) != SLUICE_OK)
        return ORDER_FAILED;
    if (!d.allowed) {
        out->order_id = 0;
        out->retry_after_ms = d.retry_after_ms;
        return ORDER_RATE_LIMITED;
    }
    return order_service_place(&r->delegate, o, out);
}

static order_service rate_limited_service_wrap(rate_limited_service *r) {
    return (order_service){rate_limited_place, r};
}

/* ------------------------------------------------------------------------ */
/* Caller code: identical for both services                                  */
/* ------------------------------------------------------------------------ */

static int submit(const order_service *svc, const char *label, int64_t now_ms, const order *o) {
    order_result res = {0};
    int rc = order_service_place(svc, o, &res);
    printf("%-13s t=%-5" PRId64 " %-6s %3" PRId64 " %-4s -> ", label, now_ms, o->client_id,
           o->quantity, o->symbol);
    switch (rc) {
    case ORDER_PLACED:
        printf("placed, order #%" PRId64 "\n", res.order_id);
        break;
    case ORDER_RATE_LIMITED:
        printf("rate limited, retry in %" PRId64 " ms\n", res.retry_after_ms);
        break;
    case ORDER_INVALID:
        printf("invalid order\n");
        break;
    default:
        printf("failed\n");
        break;
    }
    return rc;
}

/* ------------------------------------------------------------------------ */
/* main: build, wrap, call both the same way, check                          */
/* ------------------------------------------------------------------------ */

static int failures;

static void expect(int ok, const char *what) {
    if (!ok) {
        failures++;
        fprintf(stderr, "UNEXPECTED: %s\n", what);
    }
}

/* Submits o through svc at now_ms and checks the outcome: want is the
 * expected result code; an admitted order must reach the real service once,
 * anything else not at all. */
static void submit_expect(const order_service *svc, const order_book *book, int64_t now_ms,
                          const order *o, int want, const char *what) {
    int64_t n0 = book->n_placed;
    int rc = submit(svc, "rate-limited", now_ms, o);
    expect(rc == want, what);
    expect(book->n_placed == n0 + (rc == ORDER_PLACED), "only admitted orders reach the real service");
}

int main(void) {
    char err[256];
    sluice_clock *clock = sluice_clock_manual_new(0);
    sluice_policy *policy = NULL;
    sluice_store *store = NULL;
    if (!clock) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    /* Per client: 3 orders at once, then one per second. */
    int rc = sluice_policy_parse("orders", "token-bucket capacity=3 rate=1/s", &policy, err, sizeof err);
    if (rc != SLUICE_OK) {
        fprintf(stderr, "policy: %s\n", err);
        sluice_clock_free(clock);
        return 1;
    }
    sluice_store_options opts = SLUICE_STORE_OPTIONS_INIT;
    opts.clock = clock; /* sluice_store_acquire reads time from it */
    rc = sluice_store_open_err("memory:", &opts, &store, err, sizeof err);
    if (rc != SLUICE_OK) {
        fprintf(stderr, "store: %s\n", err);
        sluice_policy_free(policy);
        sluice_clock_free(clock);
        return 1;
    }

    order_book book = {1, 0};
    order_service real = order_book_service(&book);
    rate_limited_service wrapper = {real, store, policy};
    order_service limited = rate_limited_service_wrap(&wrapper);

    static const order orders[5] = {
        {"alice", "ACME", 10}, {"bob", "ACME", 5}, {"alice", "INIT", 1},
        {"carol", "ACME", 7},  {"bob", "INIT", 2},
    };

    /* The real service alone: every order is placed. */
    printf("# the real service: no limit\n");
    int64_t before = book.n_placed;
    for (int i = 0; i < 5; i++)
        expect(submit(&real, "real", 0, &orders[i]) == ORDER_PLACED, "the real service places every order");
    expect(book.n_placed - before == 5, "5 orders reached the real service");

    /* alice bursts at t=0: her 3 pass, her 4th bounces off without touching
     * the real service. */
    printf("# through the rate-limited decorator: each client has 3 at once, then 1 per second\n"
           "# alice sends 4 orders at t=0: her budget of 3 is spent\n");
    static const order alice[4] = {
        {"alice", "ACME", 10}, {"alice", "INIT", 1}, {"alice", "ACME", 4}, {"alice", "INIT", 2},
    };
    for (int i = 0; i < 3; i++)
        submit_expect(&limited, &book, 0, &alice[i], ORDER_PLACED, "alice's first 3 orders pass at t=0");
    submit_expect(&limited, &book, 0, &alice[3], ORDER_RATE_LIMITED, "alice's 4th order at t=0 is limited");

    /* bob, at the same instant, still has all of his own budget. */
    printf("# bob, at the same instant, has his whole budget: alice spent only hers\n");
    static const order bob[4] = {
        {"bob", "ACME", 5}, {"bob", "INIT", 2}, {"bob", "ACME", 3}, {"bob", "ACME", 6},
    };
    for (int i = 0; i < 3; i++)
        submit_expect(&limited, &book, 0, &bob[i], ORDER_PLACED, "bob's 3 orders pass after alice's burst");
    submit_expect(&limited, &book, 0, &bob[3], ORDER_RATE_LIMITED, "bob's 4th order at t=0 is limited");

    /* The retry hint is exact: one ms early is still too early. */
    order_result res = {0};
    sluice_clock_manual_set(clock, 999);
    int64_t n0 = book.n_placed;
    rc = order_service_place(&limited, &alice[3], &res);
    printf("%-13s t=999   alice (one ms before her retry time) -> %s, retry in %" PRId64 " ms\n",
           "rate-limited", rc == ORDER_RATE_LIMITED ? "rate limited" : "placed", res.retry_after_ms);
    expect(rc == ORDER_RATE_LIMITED && res.retry_after_ms == 1, "at t=999 alice's wait is 1 ms");
    expect(book.n_placed == n0, "the early retry does not reach the real service");

    /* A second later each client has one token back: one order each passes,
     * the next waits; carol, new, has her whole budget. */
    printf("# at t=1000 each client has one order back; carol has all 3 of hers\n");
    sluice_clock_manual_set(clock, 1000);
    submit_expect(&limited, &book, 1000, &alice[3], ORDER_PLACED, "at t=1000 alice's retry passes");
    submit_expect(&limited, &book, 1000, &alice[0], ORDER_RATE_LIMITED, "and her next one waits");
    submit_expect(&limited, &book, 1000, &bob[3], ORDER_PLACED, "at t=1000 bob's retry passes");
    submit_expect(&limited, &book, 1000, &orders[3], ORDER_PLACED, "carol's first order passes");

    /* Bad orders are the real service's business: the decorator forwards
     * them (after spending the client's token) and passes its answer through. */
    sluice_clock_manual_set(clock, 60000);
    order bad = {"dave", "ACME", 0};
    submit_expect(&limited, &book, 60000, &bad, ORDER_INVALID, "the delegate's own result codes pass through");

    sluice_stats st = {0};
    expect(sluice_store_stats(store, &st) == SLUICE_OK, "store stats");
    printf("orders that reached the real service: %" PRId64 "\n", book.n_placed);
    printf("clients with a budget in the store: %" PRId64 " (allowed %" PRId64 ", denied %" PRId64 ")\n",
           st.keys, st.allowed, st.denied);
    expect(book.n_placed == 5 + 3 + 3 + 3, "14 orders in all reached the real service");
    expect(st.keys == 4 && st.allowed == 10 && st.denied == 4,
           "4 clients held; 10 admitted and 4 denied by the decorator");

    sluice_store_close(store);
    sluice_policy_free(policy);
    sluice_clock_free(clock);
    if (failures) {
        printf("FAILED: %d unexpected results\n", failures);
        return 1;
    }
    printf("ok: the decorator admitted, rejected and passed through per client, as designed\n");
    return 0;
}
