/* demo.c: sluice demo, each algorithm at work on a manual clock (the same
 * output every run): a token bucket, a sliding and a fixed window, per-key
 * limits in a memory: store, and eight threads sharing one limiter. It
 * stops at the first library error, prints it and exits 1. */
#define _POSIX_C_SOURCE 200809L /* pthread barriers */
#include "cli.h"

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The demo stops at the first library error: it prints it and exits 1. */
static int demo_failed;

static int ok(int rc, const char *what) {
    if (rc != SLUICE_OK && !demo_failed) {
        fprintf(stderr, "sluice demo: %s: %s\n", what, sluice_strerror(rc));
        demo_failed = 1;
    }
    return rc == SLUICE_OK;
}

/* A scenario's first line: what it shows, and the configuration's text. */
static void demo_header(const char *what, const sluice_config *c, const char *tail) {
    char text[128];
    if (sluice_config_format(c, text, sizeof text) < 0) text[0] = 0;
    printf("%s: %s%s\n", what, text, tail);
}

/* A decision as the CLI writes them: label padded to 9 columns, the cost
 * when it is not 1, "allowed remaining=R" or "denied retry_after_ms=X",
 * then note. */
static void print_decision(const char *label, int64_t cost, const sluice_decision *d, const char *note) {
    printf("%-9s", label);
    if (cost != 1) printf("cost=%" PRId64 " ", cost);
    if (d->allowed) printf("allowed remaining=%" PRId64, d->remaining);
    else printf("denied retry_after_ms=%" PRId64, d->retry_after_ms);
    printf("%s\n", note);
}

static void acquire_print(sluice_limiter *l, int64_t cost, const char *label, const char *note) {
    sluice_decision d;
    if (ok(sluice_acquire(l, cost, &d), "acquire")) print_decision(label, cost, &d, note);
}

/* A cost the limiter can never admit is an error, not a denial:
 * SLUICE_ECOST, with a message built from the limit. */
static void demo_bad_cost(sluice_limiter *l, int64_t cost) {
    sluice_decision d;
    int rc = sluice_acquire(l, cost, &d);
    if (rc == SLUICE_ECOST) {
        const sluice_config *c = sluice_policy_part(sluice_limiter_policy(l), 0);
        printf("rejected: cost %" PRId64 " is outside 1..%" PRId64 "\n", cost, c ? c->limit : 0);
    } else {
        ok(rc == SLUICE_OK ? SLUICE_EINVAL : rc, "cost outside the limit was not SLUICE_ECOST");
    }
}

/* Invalid configuration is rejected when the limiter is made. */
static void demo_bad_config(sluice_config c) {
    char err[256];
    int rc = sluice_config_validate(&c, err, sizeof err);
    sluice_limiter *l = NULL;
    int rc2 = sluice_limiter_new(&c, NULL, &l);
    if (rc == SLUICE_EINVAL && rc2 == SLUICE_EINVAL) {
        printf("rejected: %s\n", err);
    } else {
        sluice_limiter_free(l);
        ok(SLUICE_EINVAL, "an invalid configuration was accepted");
    }
}

/* Token bucket: capacity 3, one token per second. */
static void demo_token_bucket(void) {
    sluice_clock *clk = sluice_clock_manual_new(0);
    sluice_config c = sluice_token_bucket(3, 1, 1000);
    sluice_limiter *l = NULL;
    if (!clk) {
        ok(SLUICE_ENOMEM, "clock");
        return;
    }
    if (ok(sluice_limiter_new(&c, clk, &l), "token bucket")) {
        demo_header("a token bucket", &c, " (3 tokens, one back a second)");
        for (int i = 0; i < 4; i++) acquire_print(l, 1, "t=0", "");
        sluice_clock_manual_advance(clk, 500);
        acquire_print(l, 1, "t=500", "");
        sluice_clock_manual_advance(clk, 500);
        acquire_print(l, 1, "t=1000", "");
        sluice_clock_manual_advance(clk, 60000);
        acquire_print(l, 3, "t=61000", " (a minute idle refills 3 tokens, no more)");
        demo_bad_cost(l, 5);
        demo_bad_config(sluice_token_bucket(0, 1, 1000));
    }
    sluice_limiter_free(l);
    sluice_clock_free(clk);
}

/* Sliding window: the previous window's usage fades out gradually. */
static void demo_sliding_window(void) {
    sluice_clock *clk = sluice_clock_manual_new(900);
    sluice_config c = sluice_sliding_window(10, 1000);
    sluice_limiter *l = NULL;
    if (!clk) {
        ok(SLUICE_ENOMEM, "clock");
        return;
    }
    if (ok(sluice_limiter_new(&c, clk, &l), "sliding window")) {
        printf("\n");
        demo_header("a sliding window", &c, " (the last window's count fades out)");
        acquire_print(l, 10, "t=900", "");
        sluice_clock_manual_advance(clk, 100);
        acquire_print(l, 1, "t=1000", "");
        printf("# the exact earliest retry, not the next window boundary (1000 ms away): at\n"
               "# t=1100 the previous window's 10 weigh 10*900/1000 = 9, and 9 + 1 <= 10.\n");
        sluice_clock_manual_advance(clk, 500);
        acquire_print(l, 5, "t=1500", "");
        acquire_print(l, 1, "t=1500", "");
        printf("# again not the next boundary (500 ms away): at t=1600 the previous window\n"
               "# weighs 10*400/1000 = 4, and 4 + 5 + 1 <= 10. The weight is compared exactly,\n"
               "# prev*(W-e) + (cur+n)*W <= L*W, never rounded down (which would take\n"
               "# 9.5 + 1 for 9 + 1 <= 10 and admit one too many).\n");
    }
    sluice_limiter_free(l);
    sluice_clock_free(clk);
}

/* Fixed window: the boundary burst the sliding window closes. */
static void demo_fixed_window(void) {
    sluice_clock *clk = sluice_clock_manual_new(0);
    sluice_config c = sluice_fixed_window(10, 1000);
    sluice_limiter *l = NULL;
    if (!clk) {
        ok(SLUICE_ENOMEM, "clock");
        return;
    }
    if (ok(sluice_limiter_new(&c, clk, &l), "fixed window")) {
        printf("\n");
        demo_header("a fixed window", &c, " (the burst at a boundary)");
        int before = 0, after = 0;
        sluice_decision d;
        for (int i = 0; i < 10; i++)
            if (ok(sluice_acquire_at(l, 1, 999, &d), "acquire") && d.allowed) before++;
        for (int i = 0; i < 10; i++)
            if (ok(sluice_acquire_at(l, 1, 1000, &d), "acquire") && d.allowed) after++;
        printf("allowed at t=999: %d, at t=1000: %d, within 1 ms: %d\n", before, after, before + after);
    }
    sluice_limiter_free(l);
    sluice_clock_free(clk);
}

/* As ok(), with the store's own message for what failed. */
static int ok_store(int rc, sluice_store *s, const char *what) {
    if (rc != SLUICE_OK && !demo_failed) {
        const char *msg = sluice_store_errmsg(s);
        fprintf(stderr, "sluice demo: %s: %s\n", what, *msg ? msg : sluice_strerror(rc));
        demo_failed = 1;
    }
    return rc == SLUICE_OK;
}

/* Per key: one store holds an independent state per key (a map of limiters
 * built on first use, bounded by max_keys and thread-safe), and the
 * algorithm comes from configuration (the policy's text form). Then a
 * caller's two branches, on alice's fourth request, still at t=0. */
static void demo_per_key(void) {
    static const char *const keys[] = {"alice", "alice", "alice", "bob"};
    char err[256];
    sluice_clock *clk = sluice_clock_manual_new(0);
    sluice_policy *p = NULL;
    sluice_store *s = NULL;
    sluice_store_options opts = SLUICE_STORE_OPTIONS_INIT;
    if (!clk) {
        ok(SLUICE_ENOMEM, "clock");
        return;
    }
    opts.clock = clk;
    int rc = sluice_policy_parse("per-key", "token-bucket capacity=2 rate=1/s", &p, err, sizeof err);
    if (rc != SLUICE_OK) {
        fprintf(stderr, "sluice demo: policy: %s\n", err);
        demo_failed = 1;
    } else if ((rc = sluice_store_open_err("memory:", &opts, &s, err, sizeof err)) != SLUICE_OK) {
        fprintf(stderr, "sluice demo: store: %s\n", err);
        demo_failed = 1;
    } else {
        sluice_decision d;
        sluice_stats st;
        printf("\n");
        demo_header("per key (a memory: store)", sluice_policy_part(p, 0), ", every request at t=0");
        for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !demo_failed; i++) {
            if (!ok_store(sluice_store_acquire(s, p, keys[i], strlen(keys[i]), 1, &d), s, "store acquire"))
                break;
            print_decision(keys[i], 1, &d, "");
        }
        if (!demo_failed && ok(sluice_store_stats(s, &st), "store stats"))
            printf("tracked keys: %" PRId64 "\n", st.keys);
        /* A caller handles both outcomes, one branch each. */
        if (!demo_failed && ok_store(sluice_store_acquire(s, p, "alice", 5, 1, &d), s, "store acquire")) {
            switch ((int)d.allowed) {
            case 1:
                printf("alice again: go, %" PRId64 " left\n", d.remaining);
                break;
            case 0:
                printf("alice again: wait %" PRId64 " ms\n", d.retry_after_ms);
                break;
            }
        }
    }
    sluice_store_close(s);
    sluice_policy_free(p);
    sluice_clock_free(clk);
}

/* Eight threads share one limiter; no time passes, so exactly the capacity
 * of the 400 attempts wins. The limiter itself is thread-safe: no wrapper. */
enum { N_THREADS = 8, N_ATTEMPTS = 50 };

typedef struct {
    sluice_limiter *l;
    pthread_barrier_t *start;
    int won, errors;
} worker;

static void *worker_run(void *arg) {
    worker *w = arg;
    pthread_barrier_wait(w->start); /* all threads start together: real contention */
    for (int i = 0; i < N_ATTEMPTS; i++) {
        sluice_decision d;
        int rc = sluice_acquire(w->l, 1, &d);
        if (rc != SLUICE_OK) w->errors++;
        else if (d.allowed) w->won++;
    }
    return NULL;
}

static void demo_threads(void) {
    sluice_clock *clk = sluice_clock_manual_new(0); /* frozen */
    sluice_config c = sluice_token_bucket(100, 1, 1000);
    sluice_limiter *l = NULL;
    if (!clk) {
        ok(SLUICE_ENOMEM, "clock");
        return;
    }
    if (ok(sluice_limiter_new(&c, clk, &l), "token bucket")) {
        printf("\n");
        demo_header("8 threads, one limiter", &c, ", a clock that stands still");
        pthread_barrier_t start;
        pthread_t tid[N_THREADS];
        worker w[N_THREADS];
        int started = 0;
        pthread_barrier_init(&start, NULL, N_THREADS);
        for (int i = 0; i < N_THREADS; i++) {
            w[i] = (worker){l, &start, 0, 0};
            if (pthread_create(&tid[i], NULL, worker_run, &w[i]) != 0) break;
            started++;
        }
        if (started < N_THREADS) {
            /* the barrier would never open: nothing sensible left to do */
            fprintf(stderr, "sluice demo: cannot start %d threads\n", N_THREADS);
            exit(1);
        }
        int allowed = 0, errors = 0;
        for (int i = 0; i < N_THREADS; i++) {
            pthread_join(tid[i], NULL);
            allowed += w[i].won;
            errors += w[i].errors;
        }
        pthread_barrier_destroy(&start);
        if (errors) ok(SLUICE_EINVAL, "acquire from a thread");
        else printf("attempts: %d, allowed: %d\n", N_THREADS * N_ATTEMPTS, allowed);
    }
    sluice_limiter_free(l);
    sluice_clock_free(clk);
}

static const cli_command demo_command = {
    "demo", "usage: sluice demo",
    "usage: sluice demo\n"
    "\n"
    "Shows sluice's limits at work: a token bucket, a sliding and a fixed\n"
    "window, per-key limits in a store, and threads sharing one limiter. Time\n"
    "is a manual clock, so the output is the same every run.\n",
    0, CLI_TAKES_NOTHING, 0, NULL};

int cli_cmd_demo(int argc, char **argv) {
    cli_args a;
    int rc = cli_parse(&demo_command, argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    demo_failed = 0;
    demo_token_bucket();
    if (!demo_failed) demo_sliding_window();
    if (!demo_failed) demo_fixed_window();
    if (!demo_failed) demo_per_key();
    if (!demo_failed) demo_threads();
    if (cli_finish_stdout("demo")) return 1;
    return demo_failed ? 1 : 0;
}
