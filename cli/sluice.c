/* sluice.c: the sluice command-line tool.
 *
 * One table of subcommands (name, one-line summary, function); main() looks
 * the first argument up in it. A subcommand gets argv starting at its own
 * name and returns the process exit status: 0 success, 1 failure, 2 usage
 * error. Adding one (simulate, check, run, pipe, stats) is a function and a
 * row in the table.
 *
 * The tool needs no root, no files and no environment. */
#define _POSIX_C_SOURCE 200809L /* pthread barriers */
#include <sluice.h>

#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------------------ */
/* The subcommand table                                                      */
/* ------------------------------------------------------------------------ */

typedef int (*cmd_fn)(int argc, char **argv);

typedef struct {
    const char *name;
    const char *summary;
    cmd_fn run;
} command;

static int cmd_demo(int argc, char **argv);
static int cmd_version(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const command commands[] = {
    {"demo", "replay the seed design's scenarios with sluice (deterministic)", cmd_demo},
    {"version", "print the version", cmd_version},
    {"help", "show this help (also --help, -h)", cmd_help},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

static void usage(FILE *out) {
    fprintf(out, "usage: sluice <command> [arguments]\n\n"
                 "sluice: exact rate limiting (library %s)\n\ncommands:\n",
            sluice_version());
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
}

static int no_arguments(int argc, char **argv) {
    if (argc > 1) {
        fprintf(stderr, "sluice %s: unexpected argument '%s'\n", argv[0], argv[1]);
        return 2;
    }
    return 0;
}

static int cmd_help(int argc, char **argv) {
    (void)argc;
    (void)argv;
    usage(stdout);
    return 0;
}

static int cmd_version(int argc, char **argv) {
    int rc = no_arguments(argc, argv);
    if (rc) return rc;
    printf("sluice %s\n", sluice_version());
    return 0;
}

/* ------------------------------------------------------------------------ */
/* demo: the seed's Main, replayed with sluice                               */
/* ------------------------------------------------------------------------ */

/* The demo stops at the first library error: it prints it and exits 1. */
static int demo_failed;

static int ok(int rc, const char *what) {
    if (rc != SLUICE_OK && !demo_failed) {
        fprintf(stderr, "sluice demo: %s: %s\n", what, sluice_strerror(rc));
        demo_failed = 1;
    }
    return rc == SLUICE_OK;
}

/* The seed's Decision records, as Java prints them. */
static void print_decision(const char *label, const sluice_decision *d, const char *note) {
    if (d->allowed)
        printf("%-8sAllowed[remaining=%" PRId64 "]%s\n", label, d->remaining, note);
    else
        printf("%-8sDenied[retryAfterMs=%" PRId64 "]%s\n", label, d->retry_after_ms, note);
}

static void acquire_print(sluice_limiter *l, int64_t cost, const char *label, const char *note) {
    sluice_decision d;
    if (ok(sluice_acquire(l, cost, &d), "acquire")) print_decision(label, &d, note);
}

/* A cost the limiter can never admit is an error, not a denial; the seed
 * throws, we get SLUICE_ECOST and build its message from the limit. */
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
        for (int i = 0; i < 4; i++) acquire_print(l, 1, "t=0", "");
        sluice_clock_manual_advance(clk, 500);
        acquire_print(l, 1, "t=500", "");
        sluice_clock_manual_advance(clk, 500);
        acquire_print(l, 1, "t=1000", "");
        sluice_clock_manual_advance(clk, 60000);
        acquire_print(l, 3, "t=61000", " (refill is capped at capacity)");
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
        acquire_print(l, 10, "t=900", "");
        sluice_clock_manual_advance(clk, 100);
        acquire_print(l, 1, "t=1000", "");
        printf("# the seed prints retryAfterMs=1000 here: its hint is the next window boundary.\n"
               "# sluice gives the exact earliest retry: at t=1100 the previous window's 10 weigh\n"
               "# 10*900/1000 = 9, and 9 + 1 <= 10.\n");
        sluice_clock_manual_advance(clk, 500);
        acquire_print(l, 5, "t=1500", "");
        acquire_print(l, 1, "t=1500", "");
        printf("# the seed prints retryAfterMs=500 here (the next boundary); at t=1600 the previous\n"
               "# window weighs 10*400/1000 = 4, and 4 + 5 + 1 <= 10.\n"
               "# the seed also floors the previous window's weight, prev*(W-e)/W, so it can admit\n"
               "# what the estimate refuses (9.5 + 1 taken as 9 + 1 <= 10); sluice compares the\n"
               "# exact rational prev*(W-e) + (cur+n)*W <= L*W. Here the weights are whole, so\n"
               "# the decisions agree.\n");
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

/* A caller handles both outcomes, one branch each. */
static void demo_both_outcomes(void) {
    sluice_clock *clk = sluice_clock_manual_new(0);
    sluice_config c = sluice_token_bucket(2, 1, 1000);
    sluice_limiter *l = NULL;
    if (!clk) {
        ok(SLUICE_ENOMEM, "clock");
        return;
    }
    if (ok(sluice_limiter_new(&c, clk, &l), "token bucket")) {
        sluice_decision d;
        int good = ok(sluice_acquire(l, 1, &d), "acquire") && ok(sluice_acquire(l, 1, &d), "acquire") &&
                   ok(sluice_acquire(l, 1, &d), "acquire");
        if (good) {
            switch ((int)d.allowed) {
            case 1:
                printf("go, %" PRId64 " left\n", d.remaining);
                break;
            case 0:
                printf("wait %" PRId64 " ms\n", d.retry_after_ms);
                break;
            }
        }
    }
    sluice_limiter_free(l);
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

static int cmd_demo(int argc, char **argv) {
    int rc = no_arguments(argc, argv);
    if (rc) return rc;
    demo_failed = 0;
    demo_token_bucket();
    if (!demo_failed) demo_sliding_window();
    if (!demo_failed) demo_fixed_window();
    if (!demo_failed) demo_both_outcomes();
    if (!demo_failed) demo_threads();
    return demo_failed ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* main                                                                      */
/* ------------------------------------------------------------------------ */

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) name = "help";
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "sluice: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
