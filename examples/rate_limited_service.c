/* rate_limited_service.c: a rate limiter as a decorator, in C.
 *
 * The limiter is a policy; the work it protects is a separate thing. A caller
 * talks to an order_service, an interface: one function pointer and the
 * object it is called on. The real service implements it; the rate-limited
 * decorator implements the SAME interface, holds the real one (its delegate)
 * and a sluice_limiter, and forwards a call only when the limiter admits it.
 * Callers cannot tell which one they hold: submit() below is the only caller
 * code, and it runs unchanged against both.
 *
 * A manual clock drives time, so the run is deterministic; main() checks the
 * decorator's behaviour and exits 0 only if it is what the design promises:
 *   - admitted calls reach the delegate, with its result passed through;
 *   - denied calls do not reach it and come back as ORDER_RATE_LIMITED with
 *     the exact wait, a code distinct from every result of the real service;
 *   - time passing gives the capacity back.
 *
 * Per-client limiting (one budget per order.client_id, so a noisy client
 * cannot spend another's) arrives with the keyed store in the next issue:
 * the decorator will then call sluice_store_acquire with the client id as the
 * key. Here every client shares one limiter. */
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
/* The decorator: same interface, a delegate and a limiter                   */
/* ------------------------------------------------------------------------ */

typedef struct {
    order_service delegate;
    sluice_limiter *limiter; /* thread-safe, so the decorator is too if the delegate is */
} rate_limited_service;

static int rate_limited_place(void *self, const order *o, order_result *out) {
    rate_limited_service *r = self;
    sluice_decision d;
    if (sluice_acquire(r->limiter, 1, &d) != SLUICE_OK) return ORDER_FAILED;
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

int main(void) {
    sluice_clock *clock = sluice_clock_manual_new(0);
    if (!clock) {
        fprintf(stderr, "out of memory\n");
        return 1;
    }
    /* 3 orders at once, then one per second: token-bucket capacity=3 rate=1/s */
    sluice_config cfg = sluice_token_bucket(3, 1, 1000);
    sluice_limiter *limiter = NULL;
    int rc = sluice_limiter_new(&cfg, clock, &limiter);
    if (rc != SLUICE_OK) {
        fprintf(stderr, "limiter: %s\n", sluice_strerror(rc));
        sluice_clock_free(clock);
        return 1;
    }

    order_book book = {1, 0};
    order_service real = order_book_service(&book);
    rate_limited_service wrapper = {real, limiter};
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

    /* The same five orders through the decorator at t=0: 3 pass, 2 bounce
     * off without touching the real service. */
    printf("# the same orders through the rate-limited decorator (capacity 3, 1 per second)\n");
    before = book.n_placed;
    int placed = 0, limited_count = 0;
    for (int i = 0; i < 5; i++) {
        int64_t n0 = book.n_placed;
        rc = submit(&limited, "rate-limited", sluice_clock_now_ms(clock), &orders[i]);
        if (rc == ORDER_PLACED) {
            placed++;
            expect(book.n_placed == n0 + 1, "an admitted order reaches the real service");
        } else if (rc == ORDER_RATE_LIMITED) {
            limited_count++;
            expect(book.n_placed == n0, "a denied order does not reach the real service");
        }
    }
    expect(placed == 3 && limited_count == 2, "3 placed and 2 rate limited at t=0");
    expect(book.n_placed - before == 3, "3 orders reached the real service");

    /* The retry hint is exact: one ms early is still too early. */
    order_result res = {0};
    sluice_clock_manual_set(clock, 999);
    int64_t n0 = book.n_placed;
    rc = order_service_place(&limited, &orders[0], &res);
    printf("%-13s t=999   (one ms before the retry time) -> %s, retry in %" PRId64 " ms\n",
           "rate-limited", rc == ORDER_RATE_LIMITED ? "rate limited" : "placed", res.retry_after_ms);
    expect(rc == ORDER_RATE_LIMITED && res.retry_after_ms == 1, "at t=999 the wait is 1 ms");
    expect(book.n_placed == n0, "the early retry does not reach the real service");

    /* A second later one token is back: one more order passes, the next waits. */
    sluice_clock_manual_set(clock, 1000);
    expect(submit(&limited, "rate-limited", 1000, &orders[3]) == ORDER_PLACED, "at t=1000 one order passes");
    rc = submit(&limited, "rate-limited", 1000, &orders[4]);
    expect(rc == ORDER_RATE_LIMITED, "at t=1000 the next one is limited");

    /* Bad orders are the real service's business: the decorator forwards
     * them (after spending a token) and passes its answer through. */
    sluice_clock_manual_set(clock, 60000);
    order bad = {"dave", "ACME", 0};
    expect(submit(&limited, "rate-limited", 60000, &bad) == ORDER_INVALID,
           "the delegate's own result codes pass through");

    printf("orders that reached the real service: %" PRId64 "\n", book.n_placed);
    expect(book.n_placed == 9, "9 orders in all reached the real service");

    sluice_limiter_free(limiter);
    sluice_clock_free(clock);
    if (failures) {
        printf("FAILED: %d unexpected results\n", failures);
        return 1;
    }
    printf("ok: the decorator admitted, rejected and passed through as designed\n");
    return 0;
}
