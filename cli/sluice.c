/* sluice.c: the sluice command-line tool.
 *
 * One table of subcommands (name, one-line summary, function); main() looks
 * the first argument up in it. A subcommand gets argv starting at its own
 * name and returns the process exit status: 0 success, 1 failure, 2 usage
 * error. Adding one (check, run, pipe, stats) is a function and a
 * row in the table.
 *
 * The tool needs no root, no files and no environment. */
#define _POSIX_C_SOURCE 200809L /* pthread barriers */
#include <sluice.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdarg.h>
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
static int cmd_simulate(int argc, char **argv);
static int cmd_version(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const command commands[] = {
    {"demo", "replay the seed design's scenarios with sluice (deterministic)", cmd_demo},
    {"simulate", "replay a request trace (stdin) against a policy; see simulate --help",
     cmd_simulate},
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

/* The seed's Decision record, as Java prints it (no newline). */
static void print_record(const sluice_decision *d) {
    if (d->allowed)
        printf("Allowed[remaining=%" PRId64 "]", d->remaining);
    else
        printf("Denied[retryAfterMs=%" PRId64 "]", d->retry_after_ms);
}

/* A line of the seed's output: label padded to 8 columns, record, note. */
static void print_decision(const char *label, const sluice_decision *d, const char *note) {
    printf("%-8s", label);
    print_record(d);
    printf("%s\n", note);
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

/* As ok(), with the store's own message for what failed. */
static int ok_store(int rc, sluice_store *s, const char *what) {
    if (rc != SLUICE_OK && !demo_failed) {
        const char *msg = sluice_store_errmsg(s);
        fprintf(stderr, "sluice demo: %s: %s\n", what, *msg ? msg : sluice_strerror(rc));
        demo_failed = 1;
    }
    return rc == SLUICE_OK;
}

/* Per key: one store holds an independent state per key, and the algorithm
 * comes from configuration (the policy's text form). The seed's
 * PerKeyLimiter is a map of limiters built on first use; a sluice store is
 * that map, bounded (max_keys) and thread-safe. The same store then serves
 * the seed's exhaustive switch: alice's fourth request, still at t=0. */
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
        sluice_store_stats st;
        for (size_t i = 0; i < sizeof keys / sizeof keys[0] && !demo_failed; i++) {
            if (!ok_store(sluice_store_acquire(s, p, keys[i], strlen(keys[i]), 1, &d), s, "store acquire"))
                break;
            printf("%s: ", keys[i]);
            print_record(&d);
            putchar('\n');
        }
        if (!demo_failed && ok(sluice_store_stats_get(s, &st), "store stats"))
            printf("tracked keys: %" PRId64 "\n", st.keys);
        /* A caller handles both outcomes, one branch each. */
        if (!demo_failed && ok_store(sluice_store_acquire(s, p, "alice", 5, 1, &d), s, "store acquire")) {
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
    if (!demo_failed) demo_per_key();
    if (!demo_failed) demo_threads();
    return demo_failed ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* simulate: replay a request trace against a policy in a store             */
/* ------------------------------------------------------------------------ */

static const char simulate_help[] =
    "usage: sluice simulate SPEC [--store URL] [--allow-backwards]\n"
    "\n"
    "Replays a trace of requests read from standard input against the policy SPEC\n"
    "(e.g. 'token-bucket capacity=2 rate=1/s', or several joined by ';'), with one\n"
    "state per key in the store URL, and prints every decision.\n"
    "\n"
    "input: one request per line, fields separated by spaces or tabs:\n"
    "  TIME_MS KEY [COST]\n"
    "  TIME_MS  the clock reading in ms: an integer in -2^61..2^61\n"
    "  KEY      1..512 bytes, taken as they are (no escapes); any byte but space,\n"
    "           tab, newline and '#'\n"
    "  COST     a positive integer; 1 when absent\n"
    "'#' starts a comment that runs to the end of the line; blank lines are\n"
    "ignored; a CR before the newline is dropped. Times must not decrease: a\n"
    "time earlier than one before it is a bad line, unless --allow-backwards.\n"
    "\n"
    "output: one line per request, on stdout:\n"
    "  t=TIME key=KEY cost=N allowed=0|1 remaining=R retry_after_ms=X reset_ms=Y delay_ms=Z\n"
    "with the fields of the decision (docs/semantics.md); then, on stderr:\n"
    "  # N requests, A allowed, D denied, K keys held\n"
    "\n"
    "options:\n"
    "  --store URL        where the per-key states live (default memory:), e.g.\n"
    "                     'memory:?max_keys=1000&on_full=refuse' or\n"
    "                     'redis://127.0.0.1:6379' (clock=client is added, so\n"
    "                     Redis decides at the trace's times)\n"
    "  --allow-backwards  accept times that decrease. A store's time never runs\n"
    "                     backwards: an earlier time is decided at the highest\n"
    "                     time seen so far, and the durations count from there.\n"
    "  -h, --help         this help\n"
    "\n"
    "exit status: 0 when every line was decided; 2 for a bad SPEC, option or store\n"
    "URL, and for a bad line (a bad time, key or cost, a time that goes back, a\n"
    "cost above what the policy can ever admit) or a store error (e.g. a full\n"
    "store that refuses a new key), reported on stderr as\n"
    "'sluice simulate: line N: WHAT' once the lines before it are printed (the\n"
    "run stops there: nothing is skipped); 1 when reading or writing fails.\n"
    "\n"
    "example:\n"
    "  $ printf '0 alice\\n0 alice\\n0 alice  # a third at once\\n500 alice\\n500 bob 2\\n' |\n"
    "      sluice simulate 'token-bucket capacity=2 rate=1/s'\n"
    "  t=0 key=alice cost=1 allowed=1 remaining=1 retry_after_ms=0 reset_ms=1000 delay_ms=0\n"
    "  t=0 key=alice cost=1 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0\n"
    "  t=0 key=alice cost=1 allowed=0 remaining=0 retry_after_ms=1000 reset_ms=2000 delay_ms=0\n"
    "  t=500 key=alice cost=1 allowed=0 remaining=0 retry_after_ms=500 reset_ms=1500 delay_ms=0\n"
    "  t=500 key=bob cost=2 allowed=1 remaining=0 retry_after_ms=0 reset_ms=2000 delay_ms=0\n"
    "  # 5 requests, 3 allowed, 2 denied, 2 keys held\n";

/* Writes bytes to f as a quoted C-like string: printable ASCII as is,
 * others as \xNN; long tokens are cut (messages stay one readable line). */
static void put_quoted(FILE *f, const char *b, size_t n) {
    enum { QUOTE_MAX = 64 };
    fputc('"', f);
    for (size_t i = 0; i < n && i < QUOTE_MAX; i++) {
        unsigned char c = (unsigned char)b[i];
        if (c == '"' || c == '\\') fprintf(f, "\\%c", c);
        else if (c >= 0x20 && c < 0x7f) fputc(c, f);
        else fprintf(f, "\\x%02x", c);
    }
    fputc('"', f);
    if (n > QUOTE_MAX) fprintf(f, "... (%zu bytes)", n);
}

/* b[0..n) as a decimal integer, with an optional '-' when signed_ok.
 * 0: *out set; -1: not an integer; -2: beyond int64_t. */
static int parse_int64(const char *b, size_t n, int signed_ok, int64_t *out) {
    size_t i = 0;
    int neg = 0;
    if (signed_ok && n > 0 && b[0] == '-') neg = 1, i = 1;
    if (i == n) return -1;
    /* accumulate as a negative number: -INT64_MIN does not fit */
    int64_t x = 0;
    int big = 0;
    for (; i < n; i++) {
        if (b[i] < '0' || b[i] > '9') return -1;
        int d = b[i] - '0';
        if (x < (INT64_MIN + d) / 10) big = 1;
        else x = x * 10 - d;
    }
    if (big || (!neg && x == INT64_MIN)) return -2;
    *out = neg ? x : -x;
    return 0;
}

/* One token of a line: bytes b[0..n). */
typedef struct {
    const char *b;
    size_t n;
} token;

/* Splits line[0..n) at spaces and tabs into at most max tokens; returns the
 * count, or max + 1 when there are more. */
static size_t split_fields(const char *line, size_t n, token *tok, size_t max) {
    size_t k = 0, i = 0;
    for (;;) {
        while (i < n && (line[i] == ' ' || line[i] == '\t')) i++;
        if (i == n) return k;
        size_t a = i;
        while (i < n && line[i] != ' ' && line[i] != '\t') i++;
        if (k == max) return max + 1;
        tok[k++] = (token){line + a, i - a};
    }
}

typedef struct {
    const char *spec, *store_url;
    int allow_backwards;
} simulate_args;

static int simulate_usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "sluice simulate: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\nusage: sluice simulate SPEC [--store URL] [--allow-backwards] (see --help)\n");
    return 2;
}

/* Options may come before or after SPEC; "--" ends them. Returns -1 when
 * help was printed, else an exit status (0: go on). */
static int simulate_parse_args(int argc, char **argv, simulate_args *a) {
    int options = 1;
    *a = (simulate_args){NULL, "memory:", 0};
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (options && s[0] == '-' && s[1] != 0) {
            if (strcmp(s, "--") == 0) {
                options = 0;
            } else if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
                fputs(simulate_help, stdout);
                return -1;
            } else if (strcmp(s, "--allow-backwards") == 0) {
                a->allow_backwards = 1;
            } else if (strcmp(s, "--store") == 0) {
                if (i + 1 == argc) return simulate_usage_error("option %s needs a URL", s);
                a->store_url = argv[++i];
            } else if (strncmp(s, "--store=", 8) == 0) {
                a->store_url = s + 8;
            } else {
                return simulate_usage_error("unknown option '%s'", s);
            }
        } else if (a->spec) {
            return simulate_usage_error("unexpected argument '%s' (quote SPEC as one argument)", s);
        } else {
            a->spec = s;
        }
    }
    if (!a->spec) return simulate_usage_error("%s", "missing SPEC, e.g. 'token-bucket capacity=2 rate=1/s'");
    return 0;
}

/* Prints the parse error err of spec, and spec with a caret under the
 * position the message begins with ("at N: ..."). */
static void simulate_bad_spec(const char *spec, const char *err) {
    fprintf(stderr, "sluice simulate: bad SPEC: %s\n", err);
    size_t pos;
    char *end;
    if (strncmp(err, "at ", 3) != 0) return;
    pos = (size_t)strtoull(err + 3, &end, 10);
    if (end == err + 3 || *end != ':' || pos > strlen(spec)) return;
    for (const char *c = spec; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) return; /* a caret would lie */
    fprintf(stderr, "  %s\n  %*s^\n", spec, (int)pos, "");
}

static int sim_bad_line(int64_t line_no, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Starts the message about line line_no on stderr. */
static void sim_line_error(int64_t line_no) {
    fflush(stdout); /* the decisions of the lines before it come first */
    fprintf(stderr, "sluice simulate: line %" PRId64 ": ", line_no);
}

/* The whole message about line line_no; returns the exit status, 2. */
static int sim_bad_line(int64_t line_no, const char *fmt, ...) {
    va_list ap;
    sim_line_error(line_no);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    return 2;
}

/* The least limit (capacity) of p's parts: the largest cost it can admit. */
static int64_t least_limit(const sluice_policy *p) {
    int64_t least = INT64_MAX;
    for (size_t i = 0; i < sluice_policy_n_parts(p); i++)
        if (sluice_policy_part(p, i)->limit < least) least = sluice_policy_part(p, i)->limit;
    return least;
}

static int cmd_simulate(int argc, char **argv) {
    simulate_args a;
    int status = simulate_parse_args(argc, argv, &a);
    if (status) return status < 0 ? 0 : status;

    char err[256];
    sluice_policy *policy = NULL;
    if (sluice_policy_parse("simulate", a.spec, &policy, err, sizeof err) != SLUICE_OK) {
        simulate_bad_spec(a.spec, err);
        return 2;
    }
    sluice_clock *clk = sluice_clock_manual_new(0);
    if (!clk) {
        sluice_policy_free(policy);
        fprintf(stderr, "sluice simulate: out of memory\n");
        return 1;
    }
    sluice_store_options opts = SLUICE_STORE_OPTIONS_INIT;
    opts.clock = clk; /* every reading is the line's time, for any kind of store */
    /* a remote store decides at the trace's times only in client-clock mode:
     * ask for it unless the URL says otherwise */
    char url[4096];
    const char *url_text = a.store_url;
    if (!strncmp(a.store_url, "redis", 5) && !strstr(a.store_url, "clock=")) {
        snprintf(url, sizeof url, "%s%sclock=client", a.store_url, strchr(a.store_url, '?') ? "&" : "?");
        url_text = url;
    }
    sluice_store *store = NULL;
    int rc = sluice_store_open_err(url_text, &opts, &store, err, sizeof err);
    if (rc != SLUICE_OK) {
        fprintf(stderr, "sluice simulate: store %s: %s\n", a.store_url, *err ? err : sluice_strerror(rc));
        sluice_clock_free(clk);
        sluice_policy_free(policy);
        return rc == SLUICE_EINVAL ? 2 : 1;
    }

    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t line_no = 0, n_req = 0, n_allowed = 0, last_t = 0, last_line = 0;
    status = 0;
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        size_t n = (size_t)len;
        line_no++;
        if (n > 0 && line[n - 1] == '\n') n--;
        if (n > 0 && line[n - 1] == '\r') n--;
        const char *hash = memchr(line, '#', n);
        if (hash) n = (size_t)(hash - line);
        token f[3];
        size_t nf = split_fields(line, n, f, 3);
        if (nf == 0) continue;
        if (nf > 3) {
            status = sim_bad_line(line_no, "more than 3 fields (expected TIME_MS KEY [COST])");
            break;
        }
        int64_t t, cost = 1;
        int pr = parse_int64(f[0].b, f[0].n, 1, &t);
        if (pr != 0 || t < SLUICE_TIME_MIN_MS || t > SLUICE_TIME_MAX_MS) {
            sim_line_error(line_no);
            fputs("time ", stderr);
            put_quoted(stderr, f[0].b, f[0].n);
            if (pr == -1) fprintf(stderr, " is not an integer (ms)\n");
            else fprintf(stderr, " is outside the accepted range %" PRId64 "..%" PRId64 " ms\n",
                         SLUICE_TIME_MIN_MS, SLUICE_TIME_MAX_MS);
            status = 2;
            break;
        }
        if (nf < 2) {
            status = sim_bad_line(line_no, "missing KEY (expected TIME_MS KEY [COST])");
            break;
        }
        if (nf == 3) {
            pr = parse_int64(f[2].b, f[2].n, 0, &cost);
            if (pr != 0 || cost < 1) {
                sim_line_error(line_no);
                fputs("cost ", stderr);
                put_quoted(stderr, f[2].b, f[2].n);
                fprintf(stderr, " is not a positive integer%s\n", pr == -2 ? " (too large)" : "");
                status = 2;
                break;
            }
        }
        if (n_req > 0 && t < last_t && !a.allow_backwards) {
            status = sim_bad_line(line_no,
                                  "time %" PRId64 " is before %" PRId64 " (line %" PRId64
                                  "): times must not decrease (see --allow-backwards)",
                                  t, last_t, last_line);
            break;
        }
        if (n_req == 0 || t > last_t) last_t = t, last_line = line_no;

        sluice_decision d;
        sluice_clock_manual_set(clk, t);
        rc = sluice_store_acquire_at(store, policy, f[1].b, f[1].n, cost, t, &d);
        if (rc != SLUICE_OK) {
            const char *msg = sluice_store_errmsg(store);
            sim_line_error(line_no);
            fputs("key ", stderr);
            put_quoted(stderr, f[1].b, f[1].n);
            if (rc == SLUICE_ECOST) /* say which limit: the store's message cannot */
                fprintf(stderr, " cost %" PRId64 ": %s: cost %" PRId64 " is above %" PRId64
                        ", the least limit of the policy: it can never be admitted\n",
                        cost, sluice_err_name(rc), cost, least_limit(policy));
            else
                fprintf(stderr, " cost %" PRId64 ": %s: %s\n", cost, sluice_err_name(rc),
                        *msg ? msg : sluice_strerror(rc));
            status = 2;
            break;
        }
        n_req++;
        n_allowed += d.allowed;
        printf("t=%" PRId64 " key=", t);
        fwrite(f[1].b, 1, f[1].n, stdout);
        printf(" cost=%" PRId64 " allowed=%d remaining=%" PRId64 " retry_after_ms=%" PRId64
               " reset_ms=%" PRId64 " delay_ms=%" PRId64 "\n",
               cost, d.allowed ? 1 : 0, d.remaining, d.retry_after_ms, d.reset_ms, d.delay_ms);
        if (ferror(stdout)) break; /* reported below */
    }
    if (status == 0 && ferror(stdin)) {
        fprintf(stderr, "sluice simulate: reading standard input (line %" PRId64 "): %s\n", line_no + 1,
                strerror(errno));
        status = 1;
    }
    free(line);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "sluice simulate: writing standard output: %s\n", strerror(errno));
        if (status == 0) status = 1;
    }
    if (status == 0) {
        sluice_store_stats st;
        if (sluice_store_stats_get(store, &st) != SLUICE_OK) st.keys = -1;
        fprintf(stderr, "# %" PRId64 " requests, %" PRId64 " allowed, %" PRId64 " denied, %" PRId64 " keys held\n",
                n_req, n_allowed, n_req - n_allowed, st.keys);
    }
    sluice_store_close(store);
    sluice_clock_free(clk);
    sluice_policy_free(policy);
    return status;
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
