/* sluice.c: the sluice command-line tool.
 *
 * One table of subcommands (name, one-line summary, function); main() looks
 * the first argument up in it. A subcommand gets argv starting at its own
 * name and returns the process exit status: 0 success, 1 failure (or a
 * denial), 2 usage error. Adding one is a function and a row in the table.
 *
 * demo, simulate and version need no files and no environment. check, run,
 * pipe and stats share limits between processes through a store: by default
 * the per-user shared-memory file named by default_store_url() (which reads
 * XDG_RUNTIME_DIR), or any store given with --store URL. simulate's summary
 * and picture are report.c's and svg.c's (cli.h). SIGPIPE is ignored: a
 * closed stdout is a write error, reported with each command's status. */
#define _POSIX_C_SOURCE 200809L /* pthread barriers, getline, nanosleep, ftello */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
static int cmd_check(int argc, char **argv);
static int cmd_run(int argc, char **argv);
static int cmd_pipe(int argc, char **argv);
static int cmd_stats(int argc, char **argv);
static int cmd_version(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const command commands[] = {
    {"demo", "show each algorithm at work on a manual clock (the same every run)", cmd_demo},
    {"simulate", "replay a request trace (stdin) against a policy; see simulate --help",
     cmd_simulate},
    {"check", "decide one request for KEY in a shared store; exit 0 allowed, 1 denied", cmd_check},
    {"run", "acquire for KEY (waiting with --wait), then run a command", cmd_run},
    {"pipe", "copy standard input to standard output at a policy's rate", cmd_pipe},
    {"stats", "print a store's keys, capacity and counters", cmd_stats},
    {"version", "print the version (also --version, -V)", cmd_version},
    {"help", "show this help (also --help, -h)", cmd_help},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

/* SIGPIPE is ignored (main), so that a closed standard output is a write
 * error each command reports with its documented status, not a death by
 * signal (status 141); run gives the command it starts the disposition
 * sluice was started with. */
static struct sigaction sigpipe_inherited;

/* Flushes stdout; 0, or 1 with a message when writing failed. */
static int finish_stdout(const char *cmd) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "sluice %s: writing standard output: %s\n", cmd, strerror(errno));
        return 1;
    }
    return 0;
}

/* ---- store URLs: what the commands say about a store they cannot open ---- */

#define CLI_URL_MAX 4096

/* The path of a shm: URL (up to its '?') in buf; 0, or -1 when url is not
 * shm: or the path does not fit. */
static int shm_path(const char *url, char *buf, size_t len) {
    size_t n = strncmp(url, "shm:", 4) == 0 ? strcspn(url + 4, "?") : 0;
    if (n == 0 || n >= len) return -1;
    memcpy(buf, url + 4, n);
    buf[n] = 0;
    return 0;
}

/* For a shm: URL whose file would be in a directory that is not there: 2,
 * with the message saying so (the library's open would only say "No such
 * file or directory" of the file); else 0. */
static int shm_dir_missing(const char *cmd, const char *url) {
    char path[CLI_URL_MAX];
    struct stat st;
    if (shm_path(url, path, sizeof path) != 0) return 0;
    char *slash = strrchr(path, '/');
    if (!slash) return 0;           /* the current directory */
    if (slash == path) slash[1] = 0; /* "/" */
    else *slash = 0;
    if (stat(path, &st) != 0) {
        if (errno != ENOENT && errno != ENOTDIR) return 0; /* e.g. no permission: the open says it */
        fprintf(stderr, "sluice %s: store %s: directory %s does not exist\n", cmd, url, path);
    } else if (!S_ISDIR(st.st_mode)) {
        fprintf(stderr, "sluice %s: store %s: %s is not a directory\n", cmd, url, path);
    } else {
        return 0;
    }
    return 2;
}

/* A store that could not be opened, on stderr: the library's message msg
 * (or rc's name), after "store URL: " unless msg already names the store
 * (its URL up to '?', or a shm: path), so that nothing is said twice. */
static void print_store_error(const char *cmd, const char *url, const char *msg, int rc) {
    char base[CLI_URL_MAX];
    size_t n = strcspn(url, "?");
    if (!*msg) msg = sluice_strerror(rc);
    if (n < sizeof base) {
        memcpy(base, url, n);
        base[n] = 0;
        if (strstr(msg, base) || (shm_path(url, base, sizeof base) == 0 && strstr(msg, base))) {
            fprintf(stderr, "sluice %s: %s\n", cmd, msg);
            return;
        }
    }
    fprintf(stderr, "sluice %s: store %s: %s\n", cmd, url, msg);
}

static void usage(FILE *out) {
    fprintf(out, "usage: sluice <command> [arguments]\n\n"
                 "sluice: exact rate limiting (library %s)\n\ncommands:\n",
            sluice_version());
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
}

/* For a command that takes no arguments but --help: 0 to go on, -1 when
 * its help (what, one line) was printed, 2 for anything else. */
static int no_arguments(int argc, char **argv, const char *what) {
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: sluice %s\n\n%s\n", argv[0], what);
        return -1;
    }
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
    return finish_stdout("help");
}

static int cmd_version(int argc, char **argv) {
    int rc = no_arguments(argc, argv, "Prints the version of sluice.");
    if (rc) return rc < 0 ? 0 : rc;
    printf("sluice %s\n", sluice_version());
    return finish_stdout("version");
}

/* ------------------------------------------------------------------------ */
/* demo: each algorithm at work, on a manual clock                           */
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

static int cmd_demo(int argc, char **argv) {
    int rc = no_arguments(argc, argv,
                          "Shows sluice's limits at work: a token bucket, a sliding and a fixed\n"
                          "window, per-key limits in a store, and threads sharing one limiter. Time\n"
                          "is a manual clock, so the output is the same every run.");
    if (rc) return rc < 0 ? 0 : rc;
    demo_failed = 0;
    demo_token_bucket();
    if (!demo_failed) demo_sliding_window();
    if (!demo_failed) demo_fixed_window();
    if (!demo_failed) demo_per_key();
    if (!demo_failed) demo_threads();
    if (finish_stdout("demo")) return 1;
    return demo_failed ? 1 : 0;
}

/* ------------------------------------------------------------------------ */
/* simulate: replay a request trace against a policy in a store             */
/* ------------------------------------------------------------------------ */

#define SIM_USAGE                                                                                  \
    "usage: sluice simulate [SPEC | --policy SPEC] [--store URL] [--allow-backwards] [--json]\n" \
    "                       [--summary[=N|all]] [--svg FILE]"
#define SIM_SUMMARY_TOP 10 /* keys in a summary unless --summary=N */
#define SIM_SVG_PANELS 6   /* keys in the picture */

static const char simulate_help[] =
    SIM_USAGE "\n"
    "\n"
    "Replays a trace of requests read from standard input against the policy SPEC\n"
    "(e.g. 'token-bucket capacity=2 rate=1/s', or several joined by ';'), given\n"
    "as an argument or with --policy, with one state per key in the store URL,\n"
    "and prints every decision, or a summary, or draws the run.\n"
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
    "with the fields of the decision (docs/semantics.md; \" enforced=false\" is\n"
    "added when a remote store could not decide, with a warning once); then, on\n"
    "stderr:\n"
    "  # N requests, A allowed, D denied, K keys held[, U not enforced]\n"
    "With --json, one JSON object per request with every field of the decision:\n"
    "  {\"t\":0,\"key\":\"alice\",\"cost\":1,\"allowed\":true,\"remaining\":1,\n"
    "   \"retry_after_ms\":0,\"reset_ms\":1000,\"delay_ms\":0,\"limit\":2,\"part\":0,\n"
    "   \"part_reset_ms\":1000,\"enforced\":true}\n"
    "(limit: that of the part with the least remaining; part: its index;\n"
    "part_reset_ms: that part's own reset; a key's\n"
    "bytes that are not UTF-8 as \\u00XX).\n"
    "With --summary, no line per request; at the end, on stdout:\n"
    "  requests=N allowed=A denied=D keys=K[ not_enforced=U]\n"
    "  part=I requests=N allowed=A denied=D config=TEXT   (each part)\n"
    "  key=KEY requests=N allowed=A denied=D              (the most denied first)\n"
    "  other_keys=K requests=N allowed=A denied=D         (the keys not listed)\n"
    "A part's requests are the decisions it set: it had the least remaining (on\n"
    "a denial, it is one that denied). With --json the summary is one object:\n"
    "{requests, allowed, denied, keys, not_enforced, parts: [{part, config,\n"
    "requests, allowed, denied}], most_denied: [{key, requests, allowed,\n"
    "denied}], other_keys: {keys, requests, allowed, denied}}.\n"
    "When standard error is a terminal, a long run (over a second) shows its\n"
    "progress there on one line, erased at the end.\n"
    "\n"
    "options:\n"
    "  --policy SPEC      the policy (or SPEC as an argument)\n"
    "  --store URL        where the per-key states live (default memory:), e.g.\n"
    "                     'memory:?max_keys=1000&on_full=refuse' or\n"
    "                     'redis://127.0.0.1:6379' (clock=client is added, so\n"
    "                     Redis decides at the trace's times)\n"
    "  --allow-backwards  accept times that decrease. A store's time never runs\n"
    "                     backwards: an earlier time is decided at the highest\n"
    "                     time a request was admitted at, and its waits are\n"
    "                     lengthened to count from the line's own time.\n"
    "  --json             JSON objects instead of lines (see output)\n"
    "  --summary[=N|all]  the summary instead of a line per request, with the N\n"
    "                     keys most denied (default 10), or all of them\n"
    "  --svg FILE         also draw the run in FILE, an SVG picture: for the 6\n"
    "                     keys with the most requests, admitted and denied\n"
    "                     requests per time bin and what remains, over the\n"
    "                     trace's time (keeps 16 bytes a request in memory; not\n"
    "                     written when the run fails)\n"
    "  -h, --help         this help\n"
    "\n"
    "exit status: 0 when every line was decided; 2 for a bad SPEC, option or store\n"
    "URL (or a store that cannot be opened, or an --svg FILE that cannot be\n"
    "made), and for a bad line (a bad time, key or cost, a time that goes back,\n"
    "a cost above what the policy can ever admit) or a store error (e.g. a full\n"
    "store that refuses a new key), reported on stderr as 'sluice simulate: line\n"
    "N: WHAT' once the lines before it are printed (the run stops there: nothing\n"
    "is skipped); 1 when reading or writing fails (no message when the reader of\n"
    "standard output has gone, as after | head).\n"
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

/* What simulate was asked for. */
typedef struct {
    const char *spec, *store_url, *svg_path;
    int allow_backwards, json, summary;
    size_t summary_top;        /* keys in the summary; 0: every key */
    int64_t progress_after_ms; /* progress shows once a run is this long */
} simulate_args;

static int simulate_usage_error(const char *fmt, const char *arg) {
    fprintf(stderr, "sluice simulate: ");
    fprintf(stderr, fmt, arg);
    fprintf(stderr, "\n" SIM_USAGE "\n(see sluice simulate --help)\n");
    return 2;
}

/* The value of option name in argv[*i]: after '=' in the same argument
 * (when eq), else the next argument (*i moves on). NULL when there is none. */
static const char *option_value(int argc, char **argv, int *i, const char *eq) {
    if (eq) return eq + 1;
    return *i + 1 < argc ? argv[++*i] : NULL;
}

/* Options may come before or after SPEC; "--" ends them. Returns -1 when
 * help was printed, else an exit status (0: go on).
 * Test-only, deliberately absent from --help and the man page:
 *   --progress-after-ms MS  progress shows (on a terminal) once the run has
 *       lasted MS (default 1000; 0: from the first update), so that a test
 *       under a pty sees it without a long trace. */
static int simulate_parse_args(int argc, char **argv, simulate_args *a) {
    int options = 1;
    *a = (simulate_args){NULL, "memory:", NULL, 0, 0, 0, SIM_SUMMARY_TOP, 1000};
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        if (!options || s[0] != '-' || s[1] == 0) {
            if (a->spec) return simulate_usage_error("unexpected argument '%s' (quote SPEC as one argument)", s);
            a->spec = s;
            continue;
        }
        const char *eq = strchr(s, '=');
        size_t n = eq ? (size_t)(eq - s) : strlen(s);
#define IS(name) (n == strlen(name) && strncmp(s, name, n) == 0)
        if (strcmp(s, "--") == 0) {
            options = 0;
        } else if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            fputs(simulate_help, stdout);
            return -1;
        } else if (IS("--allow-backwards") || IS("--json")) {
            if (eq) return simulate_usage_error("option %s takes no value", s);
            if (IS("--json")) a->json = 1;
            else a->allow_backwards = 1;
        } else if (IS("--store")) {
            if (!(a->store_url = option_value(argc, argv, &i, eq)) || !*a->store_url)
                return simulate_usage_error("option %s needs a URL", "--store");
        } else if (IS("--policy")) {
            if (a->spec) return simulate_usage_error("%s", "SPEC is given twice (as an argument and --policy)");
            if (!(a->spec = option_value(argc, argv, &i, eq)))
                return simulate_usage_error("option %s needs a value (SPEC)", "--policy");
        } else if (IS("--svg")) {
            if (!(a->svg_path = option_value(argc, argv, &i, eq)) || !*a->svg_path)
                return simulate_usage_error("option %s needs a FILE", "--svg");
        } else if (IS("--summary")) {
            int64_t top;
            a->summary = 1;
            if (!eq) continue; /* --summary N would be ambiguous with SPEC: only --summary=N */
            if (strcmp(eq + 1, "all") == 0) a->summary_top = 0;
            else if (parse_int64(eq + 1, strlen(eq + 1), 0, &top) == 0 && top >= 1) a->summary_top = (size_t)top;
            else return simulate_usage_error("--summary=%s: expected a number of keys (1 or more) or all", eq + 1);
        } else if (IS("--progress-after-ms")) {
            const char *v = option_value(argc, argv, &i, eq);
            if (!v || parse_int64(v, strlen(v), 0, &a->progress_after_ms) != 0)
                return simulate_usage_error("%s", "--progress-after-ms needs a number of ms");
        } else {
            return simulate_usage_error("unknown option '%s'", s);
        }
#undef IS
    }
    if (!a->spec) return simulate_usage_error("%s", "missing SPEC, e.g. 'token-bucket capacity=2 rate=1/s'");
    return 0;
}

/* Prints "WHAT: err" on stderr, and spec with a caret under the position the
 * parse error err of spec begins with ("at N: ..."). */
static void print_bad_spec(const char *what, const char *spec, const char *err) {
    fprintf(stderr, "%s: %s\n", what, err);
    size_t pos;
    char *end;
    if (strncmp(err, "at ", 3) != 0) return;
    pos = (size_t)strtoull(err + 3, &end, 10);
    if (end == err + 3 || *end != ':' || pos > strlen(spec)) return;
    for (const char *c = spec; *c; c++)
        if ((unsigned char)*c < 0x20 || (unsigned char)*c >= 0x7f) return; /* a caret would lie */
    fprintf(stderr, "  %s\n  %*s^\n", spec, (int)pos, "");
}

/* ---- progress, on a terminal, for long runs ---- */

/* One line on stderr, rewritten in place ("\r"), at most 5 times a second,
 * once the run has lasted progress_after_ms; only when stderr is a
 * terminal (a log or a pipe gets none); erased before any other message
 * and at the end. Real time (the monotonic clock), not the trace's. */
typedef struct {
    int on;            /* stderr is a terminal */
    int shown;         /* a line is on the screen */
    int64_t start_ms, next_ms;
    int64_t input_bytes; /* stdin's size when it is a file, else -1 */
} sim_progress;

static sim_progress progress;

static void progress_start(int64_t after_ms) {
    struct stat st;
    progress.on = isatty(2);
    progress.shown = 0;
    progress.start_ms = sluice_clock_now_ms(sluice_clock_monotonic());
    progress.next_ms = progress.start_ms + after_ms;
    progress.input_bytes = fstat(0, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 ? (int64_t)st.st_size : -1;
}

/* Called every few thousand lines. */
static void progress_update(int64_t line_no, int64_t n_req) {
    if (!progress.on) return;
    int64_t now = sluice_clock_now_ms(sluice_clock_monotonic());
    if (now < progress.next_ms) return;
    progress.next_ms = now + 200;
    int64_t s10 = (now - progress.start_ms) / 100; /* tenths of a second */
    fprintf(stderr, "\rsluice simulate: line %" PRId64 ", %" PRId64 " requests", line_no, n_req);
    off_t pos = progress.input_bytes > 0 ? ftello(stdin) : -1;
    if (pos >= 0) fprintf(stderr, ", %d%% of the input", (int)((int64_t)pos * 100 / progress.input_bytes));
    fprintf(stderr, ", %" PRId64 ".%" PRId64 " s\033[K", s10 / 10, s10 % 10);
    fflush(stderr);
    progress.shown = 1;
}

static void progress_clear(void) {
    if (!progress.shown) return;
    fputs("\r\033[K", stderr);
    fflush(stderr);
    progress.shown = 0;
}

static int sim_bad_line(int64_t line_no, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Starts the message about line line_no on stderr. */
static void sim_line_error(int64_t line_no) {
    fflush(stdout); /* the decisions of the lines before it come first */
    progress_clear();
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

/* ---- one line of the trace ---- */

/* One request of the trace. */
typedef struct {
    int64_t t, cost;
    token key;
} sim_request;

/* Reads line[0..n) (its newline dropped): 0 with *q set, 1 for a line with
 * no request (blank, a comment), 2 for a bad line (said). */
static int sim_parse_line(char *line, size_t n, int64_t line_no, sim_request *q) {
    if (n > 0 && line[n - 1] == '\r') n--;
    const char *hash = memchr(line, '#', n);
    if (hash) n = (size_t)(hash - line);
    token f[3];
    size_t nf = split_fields(line, n, f, 3);
    if (nf == 0) return 1;
    if (nf > 3) return sim_bad_line(line_no, "more than 3 fields (expected TIME_MS KEY [COST])");
    int pr = parse_int64(f[0].b, f[0].n, 1, &q->t);
    if (pr != 0 || q->t < SLUICE_TIME_MIN_MS || q->t > SLUICE_TIME_MAX_MS) {
        sim_line_error(line_no);
        fputs("time ", stderr);
        put_quoted(stderr, f[0].b, f[0].n);
        if (pr == -1) fprintf(stderr, " is not an integer (ms)\n");
        else fprintf(stderr, " is outside the accepted range %" PRId64 "..%" PRId64 " ms\n", SLUICE_TIME_MIN_MS,
                     SLUICE_TIME_MAX_MS);
        return 2;
    }
    if (nf < 2) return sim_bad_line(line_no, "missing KEY (expected TIME_MS KEY [COST])");
    q->key = f[1];
    q->cost = 1;
    if (nf == 3) {
        pr = parse_int64(f[2].b, f[2].n, 0, &q->cost);
        if (pr != 0 || q->cost < 1) {
            sim_line_error(line_no);
            fputs("cost ", stderr);
            put_quoted(stderr, f[2].b, f[2].n);
            fprintf(stderr, " is not a positive integer%s\n", pr == -2 ? " (too large)" : "");
            return 2;
        }
    }
    return 0;
}

/* One decision on stdout: a line of name=value, or a JSON object. */
static void sim_print(const simulate_args *a, const sim_request *q, const sluice_decision *d) {
    if (a->json) {
        printf("{\"t\":%" PRId64 ",\"key\":", q->t);
        cli_put_json_bytes(stdout, q->key.b, q->key.n);
        printf(",\"cost\":%" PRId64 ",\"allowed\":%s,\"remaining\":%" PRId64 ",\"retry_after_ms\":%" PRId64
               ",\"reset_ms\":%" PRId64 ",\"delay_ms\":%" PRId64 ",\"limit\":%" PRId64
               ",\"part\":%d,\"part_reset_ms\":%" PRId64 ",\"enforced\":%s}\n",
               q->cost, d->allowed ? "true" : "false", d->remaining, d->retry_after_ms, d->reset_ms, d->delay_ms,
               d->limit, (int)d->part, d->part_reset_ms, d->enforced ? "true" : "false");
        return;
    }
    printf("t=%" PRId64 " key=", q->t);
    fwrite(q->key.b, 1, q->key.n, stdout);
    printf(" cost=%" PRId64 " allowed=%d remaining=%" PRId64 " retry_after_ms=%" PRId64 " reset_ms=%" PRId64
           " delay_ms=%" PRId64 "%s\n",
           q->cost, d->allowed ? 1 : 0, d->remaining, d->retry_after_ms, d->reset_ms, d->delay_ms,
           d->enforced ? "" : " enforced=false");
}

/* ---- the command ---- */

/* Opens the store of a: 0, or 2 with a message. A remote store decides at
 * the trace's times only in client-clock mode: it is asked for unless the
 * URL says otherwise. */
static int sim_open_store(const simulate_args *a, const sluice_clock *clk, sluice_store **store) {
    char err[256], url[CLI_URL_MAX];
    sluice_store_options opts = SLUICE_STORE_OPTIONS_INIT;
    opts.clock = clk; /* every reading is the line's time, for any kind of store */
    const char *url_text = a->store_url;
    if (!strncmp(a->store_url, "redis", 5) && !strstr(a->store_url, "clock=")) {
        snprintf(url, sizeof url, "%s%sclock=client", a->store_url, strchr(a->store_url, '?') ? "&" : "?");
        url_text = url;
    }
    if (shm_dir_missing("simulate", a->store_url)) return 2;
    int rc = sluice_store_open_err(url_text, &opts, store, err, sizeof err);
    if (rc != SLUICE_OK) {
        print_store_error("simulate", a->store_url, err, rc);
        return 2;
    }
    return 0;
}

/* Decides every line of stdin; the exit status (messages said). */
static int sim_run(const simulate_args *a, sluice_store *store, const sluice_policy *policy, sluice_clock *clk,
                   cli_report *rep) {
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int64_t line_no = 0, last_t = 0, last_line = 0;
    int write_errno = 0, status = 0;
    progress_start(a->progress_after_ms);
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        size_t n = (size_t)len;
        sim_request q;
        line_no++;
        if ((line_no & 4095) == 0) progress_update(line_no, rep->total.requests);
        if (n > 0 && line[n - 1] == '\n') n--;
        if ((status = sim_parse_line(line, n, line_no, &q)) == 1) continue;
        if (status) break;
        if (rep->total.requests > 0 && q.t < last_t && !a->allow_backwards) {
            status = sim_bad_line(line_no,
                                  "time %" PRId64 " is before %" PRId64 " (line %" PRId64
                                  "): times must not decrease (see --allow-backwards)",
                                  q.t, last_t, last_line);
            break;
        }
        if (rep->total.requests == 0 || q.t > last_t) last_t = q.t, last_line = line_no;

        sluice_decision d;
        sluice_clock_manual_set(clk, q.t);
        int rc = sluice_store_acquire_at(store, policy, q.key.b, q.key.n, q.cost, q.t, &d);
        if (rc != SLUICE_OK) {
            const char *msg = sluice_store_errmsg(store);
            sim_line_error(line_no);
            fputs("key ", stderr);
            put_quoted(stderr, q.key.b, q.key.n);
            if (rc == SLUICE_ECOST) /* say which limit: the store's message cannot */
                fprintf(stderr, " cost %" PRId64 ": %s: cost %" PRId64 " is above %" PRId64
                        ", the least limit of the policy: it can never be admitted\n",
                        q.cost, sluice_err_name(rc), q.cost, sluice_policy_max_cost(policy));
            else
                fprintf(stderr, " cost %" PRId64 ": %s: %s\n", q.cost, sluice_err_name(rc),
                        *msg ? msg : sluice_strerror(rc));
            status = 2;
            break;
        }
        if (!d.enforced && rep->not_enforced == 0) { /* once: a trace makes many decisions */
            const char *msg = sluice_store_errmsg(store);
            fflush(stdout);
            progress_clear();
            fprintf(stderr, "sluice simulate: warning: line %" PRId64 ": the store could not decide, so the "
                            "request was %s without being counted: %s (said once; the summary counts them)\n",
                    line_no, d.allowed ? "admitted" : "denied", *msg ? msg : "no reason given");
        }
        if (cli_report_add(rep, q.t, q.key.b, q.key.n, &d) != 0) {
            progress_clear();
            fprintf(stderr, "sluice simulate: line %" PRId64 ": out of memory\n", line_no);
            status = 1;
            break;
        }
        if (!a->summary) sim_print(a, &q, &d);
        if (ferror(stdout)) { /* reported below */
            write_errno = errno;
            break;
        }
    }
    progress_clear();
    if (status == 0 && ferror(stdin)) {
        fprintf(stderr, "sluice simulate: reading standard input (line %" PRId64 "): %s\n", line_no + 1,
                strerror(errno));
        status = 1;
    }
    free(line);
    if (status == 0 && a->summary && cli_report_summary(rep, stdout, a->json, a->summary_top) != 0) {
        fprintf(stderr, "sluice simulate: out of memory for the summary\n");
        status = 1;
    }
    if (fflush(stdout) != 0) write_errno = errno;
    if (write_errno || ferror(stdout)) {
        /* none when the reader has gone (EPIPE), as for pipe */
        if (write_errno != EPIPE)
            fprintf(stderr, "sluice simulate: writing standard output: %s\n", strerror(write_errno ? write_errno : EIO));
        if (status == 0) status = 1;
    }
    return status;
}

/* Writes the picture to a->svg_path: 0, or 1 with a message. */
static int sim_write_svg(const simulate_args *a, FILE *svg, const cli_report *rep) {
    int rc = cli_svg_write(rep, svg, a->spec, SIM_SVG_PANELS);
    if (rc != 0) fprintf(stderr, "sluice simulate: --svg %s: out of memory\n", a->svg_path);
    if (fflush(svg) != 0 || ferror(svg)) {
        fprintf(stderr, "sluice simulate: --svg %s: %s\n", a->svg_path, strerror(errno));
        rc = -1;
    }
    return rc ? 1 : 0;
}

static int cmd_simulate(int argc, char **argv) {
    simulate_args a;
    int status = simulate_parse_args(argc, argv, &a);
    if (status) return status < 0 ? 0 : status;

    char err[256];
    sluice_policy *policy = NULL;
    if (sluice_policy_parse("simulate", a.spec, &policy, err, sizeof err) != SLUICE_OK) {
        print_bad_spec("sluice simulate: bad SPEC", a.spec, err);
        return 2;
    }
    FILE *svg = NULL;
    if (a.svg_path && !(svg = fopen(a.svg_path, "w"))) {
        fprintf(stderr, "sluice simulate: --svg %s: %s\n", a.svg_path, strerror(errno));
        sluice_policy_free(policy);
        return 2;
    }
    sluice_clock *clk = sluice_clock_manual_new(0);
    sluice_store *store = NULL;
    if (!clk) {
        fprintf(stderr, "sluice simulate: out of memory\n");
        status = 1;
    } else {
        status = sim_open_store(&a, clk, &store);
    }
    cli_report rep;
    cli_report_init(&rep, policy, svg != NULL);
    if (status == 0) status = sim_run(&a, store, policy, clk, &rep);
    if (status == 0) {
        sluice_stats st;
        if (sluice_store_stats(store, &st) != SLUICE_OK) st.keys = -1;
        fprintf(stderr, "# %" PRId64 " requests, %" PRId64 " allowed, %" PRId64 " denied", rep.total.requests,
                rep.total.allowed, rep.total.denied);
        if (st.keys >= 0) fprintf(stderr, ", %" PRId64 " keys held", st.keys); /* else the store cannot say */
        if (rep.not_enforced) fprintf(stderr, ", %" PRId64 " not enforced", rep.not_enforced);
        fputc('\n', stderr);
    }
    if (svg) {
        /* the picture of a whole run, else none (the file was made at the
         * start, to fail before any work) */
        if (status == 0) status = sim_write_svg(&a, svg, &rep);
        if (fclose(svg) != 0 && status == 0) {
            fprintf(stderr, "sluice simulate: --svg %s: %s\n", a.svg_path, strerror(errno));
            status = 1;
        }
        if (status != 0) remove(a.svg_path);
    }
    cli_report_free(&rep);
    sluice_store_close(store);
    sluice_clock_free(clk);
    sluice_policy_free(policy);
    return status;
}

/* ------------------------------------------------------------------------ */
/* check, run, pipe, stats: one limit shared by many processes              */
/* ------------------------------------------------------------------------ */

/* These four decide in a store that outlives each invocation: by default the
 * per-user shared-memory file of default_store_url(), or any --store URL.
 * The store knows a policy by its name and configuration, so every
 * invocation that parses the same SPEC under the same name (CLI_POLICY_NAME
 * unless --name) shares the same per-key states.
 *
 * Arguments are all checked (SPEC, name, cost, key, command) before the
 * store is opened: a bad argument exits 2 and changes nothing. */

#define CLI_POLICY_NAME "cli"

/* Whether dir is a directory of this user's that nobody else may enter
 * (0), or why not (a static message). */
static const char *private_dir_problem(const char *dir, char *why, size_t len) {
    struct stat st;
    if (lstat(dir, &st) != 0) snprintf(why, len, "cannot be read (%s)", strerror(errno));
    else if (!S_ISDIR(st.st_mode)) snprintf(why, len, "is not a directory");
    else if (st.st_uid != geteuid())
        snprintf(why, len, "belongs to uid %u, not to you (uid %u)", (unsigned)st.st_uid, (unsigned)geteuid());
    else if (st.st_mode & 077) snprintf(why, len, "is open to others (mode %04o)", (unsigned)(st.st_mode & 07777));
    else return NULL;
    return why;
}

/* The store used without --store, in a directory nobody else can have
 * made or can enter:
 *  - shm:$XDG_RUNTIME_DIR/sluice.shm, when XDG_RUNTIME_DIR is an absolute
 *    path (with no '?', which would start the URL's parameters) to such a
 *    directory (as the XDG spec makes it: the user's, mode 0700);
 *  - else shm:TMP/sluice-UID/sluice.shm, TMP being $TMPDIR (an absolute
 *    path) or /tmp, the directory made 0700 when it is not there (not by
 *    a command that only reads: existing_only). Anyone may create names in
 *    /tmp, so another user may have made that directory first: then it is
 *    not used, and the command says why.
 * 0 with the URL in buf, or 2 with the message printed. */
static int default_store_url(const char *cmd, char *buf, size_t len, int existing_only) {
    const char *dir = getenv("XDG_RUNTIME_DIR");
    char why[128];
    if (dir && dir[0] == '/' && !strchr(dir, '?') && !private_dir_problem(dir, why, sizeof why)) {
        size_t n = strlen(dir);
        int w = snprintf(buf, len, "shm:%s%ssluice.shm", dir, dir[n - 1] == '/' ? "" : "/");
        if (w > 0 && (size_t)w < len) return 0;
    }
    const char *tmp = getenv("TMPDIR");
    struct stat st;
    if (!tmp || tmp[0] != '/' || strchr(tmp, '?') || stat(tmp, &st) != 0 || !S_ISDIR(st.st_mode)) tmp = "/tmp";
    char mine[CLI_URL_MAX];
    int w = snprintf(mine, sizeof mine, "%s%ssluice-%lu", tmp, tmp[strlen(tmp) - 1] == '/' ? "" : "/",
                     (unsigned long)geteuid());
    if (w < 0 || (size_t)w >= sizeof mine || (size_t)w + 16 >= len) {
        fprintf(stderr, "sluice %s: the default store's path is too long (TMPDIR): give --store URL\n", cmd);
        return 2;
    }
    if (!existing_only && mkdir(mine, 0700) != 0 && errno != EEXIST) {
        fprintf(stderr, "sluice %s: cannot make the default store's directory %s: %s (give --store URL)\n", cmd,
                mine, strerror(errno));
        return 2;
    }
    if (lstat(mine, &st) == 0 && private_dir_problem(mine, why, sizeof why)) {
        fprintf(stderr, "sluice %s: the default store's directory %s %s: someone else may have made it, so it "
                        "is not used (set XDG_RUNTIME_DIR to a directory of yours, or give --store shm:PATH)\n",
                cmd, mine, why);
        return 2;
    }
    if (snprintf(buf, len, "shm:%s/sluice.shm", mine) >= (int)len) return 2; /* cannot be: checked above */
    return 0;
}

/* ---- options ---- */

enum {
    OPT_POLICY = 1u << 0,
    OPT_COST = 1u << 1,
    OPT_JSON = 1u << 2,
    OPT_NAME = 1u << 3,
    OPT_STORE = 1u << 4,
    OPT_WAIT = 1u << 5,
    OPT_UNIT = 1u << 6,
    OPT_KEY = 1u << 7,
    OPT_MANUAL_CLOCK = 1u << 8,
    OPT_TRACE_FILE = 1u << 9,
    OPT_STRICT = 1u << 10,
};

enum { ARG_NONE, ARG_REQUIRED, ARG_OPTIONAL /* only as --opt=VALUE */ };

static const struct {
    const char *name;
    unsigned flag;
    int arg;
    const char *metavar;
} cli_options[] = {
    {"--policy", OPT_POLICY, ARG_REQUIRED, "SPEC"},
    {"--cost", OPT_COST, ARG_REQUIRED, "N"},
    {"--json", OPT_JSON, ARG_NONE, NULL},
    {"--name", OPT_NAME, ARG_REQUIRED, "NAME"},
    {"--store", OPT_STORE, ARG_REQUIRED, "URL"},
    {"--wait", OPT_WAIT, ARG_OPTIONAL, "TIMEOUT"},
    {"--unit", OPT_UNIT, ARG_REQUIRED, "lines|bytes"},
    {"--key", OPT_KEY, ARG_REQUIRED, "KEY"},
    {"--strict", OPT_STRICT, ARG_NONE, NULL},
    /* Test-only, deliberately absent from --help and the man page:
     *   --manual-clock START_MS  (check, run, pipe) the store gets a manual
     *       clock starting at START_MS: every wait (retry, leaky-bucket
     *       delay) advances it at once instead of sleeping, so tests check
     *       exact pacing without sleeping. A shared store never runs its
     *       time backwards: give each invocation a START_MS no lower than
     *       the store has seen, or a fresh store, or waits never end.
     *   --trace-file PATH  (pipe) writes one line "t=MS units=N" per
     *       release: the clock's reading when N units (lines or bytes) were
     *       released for writing; (run) one line "t=MS": the reading when
     *       the command is started, after any leaky-bucket delay. */
    {"--manual-clock", OPT_MANUAL_CLOCK, ARG_REQUIRED, "START_MS"},
    {"--trace-file", OPT_TRACE_FILE, ARG_REQUIRED, "PATH"},
};
#define N_CLI_OPTIONS (sizeof cli_options / sizeof cli_options[0])

/* What one subcommand accepts. */
typedef struct {
    const char *name;  /* "check" */
    const char *usage; /* "usage: sluice check ..." */
    const char *help;  /* --help */
    unsigned options;  /* OPT_* accepted */
    int takes_key;     /* a positional KEY (or --key) is required */
    int takes_command; /* "-- COMMAND [ARGS...]" ends the arguments */
} cli_command;

typedef struct {
    const cli_command *cmd;
    const char *key, *spec, *name, *store_url, *trace_path, *wait_text;
    size_t key_len;
    int64_t cost, wait_ms, manual_start_ms;
    int json, wait, unit_bytes, strict;
    unsigned seen; /* OPT_* given */
    char **command;
} cli_args;

static int cli_usage_error(const cli_command *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* A message about the arguments, the usage line; returns 2. */
static int cli_usage_error(const cli_command *c, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "sluice %s: ", c->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n%s\n(see sluice %s --help)\n", c->usage, c->name);
    return 2;
}

/* A duration as the policy syntax writes them (500ms, 2s, 1m, 1h, 1d; a
 * unit alone is one of it) or a plain count of ms. 0, or -1 when malformed,
 * -2 when too large. */
static int parse_duration_ms(const char *s, int64_t *out) {
    static const struct {
        const char *unit;
        int64_t ms;
    } units[] = {{"", 1}, {"ms", 1}, {"s", 1000}, {"m", 60000}, {"h", 3600000}, {"d", 86400000}};
    size_t n = strspn(s, "0123456789");
    int64_t v = 1;
    if (n == 0 && !*s) return -1;
    int rc = n ? parse_int64(s, n, 0, &v) : 0;
    if (rc) return rc;
    for (size_t i = 0; i < sizeof units / sizeof units[0]; i++) {
        if (strcmp(s + n, units[i].unit) != 0) continue;
        if (v > INT64_MAX / units[i].ms) return -2;
        *out = v * units[i].ms;
        return 0;
    }
    return -1;
}

/* Applies option flag with value v (NULL when it has none). 0 or 2. */
static int cli_set_option(cli_args *a, unsigned flag, const char *v) {
    const cli_command *c = a->cmd;
    int rc;
    switch (flag) {
    case OPT_POLICY:
        a->spec = v;
        break;
    case OPT_COST:
        rc = parse_int64(v, strlen(v), 0, &a->cost);
        if (rc || a->cost < 1)
            return cli_usage_error(c, "--cost '%s' is not a positive integer%s", v, rc == -2 ? " (too large)" : "");
        break;
    case OPT_JSON:
        a->json = 1;
        break;
    case OPT_NAME:
        a->name = v;
        break;
    case OPT_STORE:
        if (!*v) return cli_usage_error(c, "--store needs a URL, e.g. shm:/tmp/limits.shm");
        a->store_url = v;
        break;
    case OPT_WAIT:
        a->wait = 1;
        a->wait_text = v;
        a->wait_ms = INT64_MAX; /* no limit: sluice_store_acquire_wait caps the deadline */
        if (v && (rc = parse_duration_ms(v, &a->wait_ms)) != 0)
            return cli_usage_error(c, "--wait=%s: %s", v,
                                   rc == -2 ? "too large"
                                            : "expected a duration such as 500ms, 2s, 1m, 1h, 1d, or a number of ms");
        break;
    case OPT_UNIT:
        if (strcmp(v, "lines") == 0) a->unit_bytes = 0;
        else if (strcmp(v, "bytes") == 0) a->unit_bytes = 1;
        else return cli_usage_error(c, "--unit '%s': expected lines or bytes", v);
        break;
    case OPT_KEY:
        a->key = v;
        break;
    case OPT_MANUAL_CLOCK:
        rc = parse_int64(v, strlen(v), 1, &a->manual_start_ms);
        if (rc || a->manual_start_ms < SLUICE_TIME_MIN_MS || a->manual_start_ms > SLUICE_TIME_MAX_MS)
            return cli_usage_error(c, "--manual-clock '%s' is not a time in ms", v);
        break;
    case OPT_TRACE_FILE:
        a->trace_path = v;
        break;
    case OPT_STRICT:
        a->strict = 1;
        break;
    }
    return 0;
}

/* Parses argv (argv[0] is the subcommand's name). Options may come before or
 * after KEY, as --opt VALUE or --opt=VALUE; "--" ends them (for run: what
 * follows is the command). Returns -1 when --help was printed, else an exit
 * status (0: go on). */
static int cli_parse(const cli_command *c, int argc, char **argv, cli_args *a) {
    int options = 1, key_positional = 0;
    memset(a, 0, sizeof *a);
    a->cmd = c;
    a->name = CLI_POLICY_NAME;
    a->cost = 1;
    for (int i = 1; i < argc; i++) {
        char *s = argv[i];
        if (options && strcmp(s, "--") == 0) {
            if (c->takes_command) {
                a->command = argv + i + 1;
                break;
            }
            options = 0;
            continue;
        }
        if (options && s[0] == '-' && s[1] != 0) {
            if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
                fputs(c->help, stdout);
                return -1;
            }
            const char *eq = strchr(s, '=');
            size_t n = eq ? (size_t)(eq - s) : strlen(s), k;
            for (k = 0; k < N_CLI_OPTIONS; k++)
                if ((c->options & cli_options[k].flag) && strlen(cli_options[k].name) == n &&
                    strncmp(cli_options[k].name, s, n) == 0)
                    break;
            if (k == N_CLI_OPTIONS) return cli_usage_error(c, "unknown option '%.*s'", (int)n, s);
            const char *v = eq ? eq + 1 : NULL;
            if (cli_options[k].arg == ARG_NONE && v)
                return cli_usage_error(c, "option %s takes no value", cli_options[k].name);
            if (cli_options[k].arg == ARG_REQUIRED && !v) {
                if (i + 1 == argc)
                    return cli_usage_error(c, "option %s needs a value (%s)", cli_options[k].name,
                                           cli_options[k].metavar);
                v = argv[++i];
            }
            if (a->seen & cli_options[k].flag)
                return cli_usage_error(c, "option %s is given twice", cli_options[k].name);
            if (cli_options[k].flag == OPT_KEY && key_positional)
                return cli_usage_error(c, "KEY is given twice ('%s' and --key)", a->key);
            a->seen |= cli_options[k].flag;
            int rc = cli_set_option(a, cli_options[k].flag, v);
            if (rc) return rc;
        } else if (c->takes_key && !a->key) {
            int64_t ms;
            if (i > 1 && strcmp(argv[i - 1], "--wait") == 0 && parse_duration_ms(s, &ms) == 0)
                return cli_usage_error(c, "'%s' after --wait: a timeout is written --wait=%s (a KEY "
                                          "that looks like a duration: give it first, or as --key)", s, s);
            a->key = s;
            key_positional = 1;
        } else if (c->takes_key && (a->seen & OPT_KEY)) {
            return cli_usage_error(c, "KEY is given twice (--key '%s' and '%s')", a->key, s);
        } else if (c->takes_command) {
            return cli_usage_error(c, "unexpected argument '%s'%s", s,
                                   i > 1 && strcmp(argv[i - 1], "--wait") == 0
                                       ? ": a timeout is written --wait=TIMEOUT, e.g. --wait=2s"
                                       : ": the command comes after '--'");
        } else {
            return cli_usage_error(c, "unexpected argument '%s'%s", s,
                                   c->takes_key ? " (one KEY only; quote SPEC as one argument)" : "");
        }
    }
    if ((c->options & OPT_POLICY) && !a->spec)
        return cli_usage_error(c, "missing --policy SPEC, e.g. --policy 'fixed-window limit=10 window=1m'");
    if (c->takes_key && !a->key) return cli_usage_error(c, "missing KEY");
    if (!a->key) a->key = "pipe"; /* pipe's default */
    a->key_len = strlen(a->key);
    if (a->key_len < 1 || a->key_len > SLUICE_KEY_MAX)
        return cli_usage_error(c, "KEY is %zu bytes long: keys are 1..%d bytes", a->key_len, SLUICE_KEY_MAX);
    if (c->takes_command && (!a->command || !a->command[0]))
        return cli_usage_error(c, "missing COMMAND after '--'");
    return 0;
}

/* ---- the policy, the clock and the store ---- */

typedef struct {
    sluice_policy *policy;
    sluice_clock *manual; /* --manual-clock, else NULL */
    const sluice_clock *clock;
    sluice_store *store;
    const char *url;
    char url_buf[CLI_URL_MAX];
    FILE *trace; /* --trace-file (run, pipe: tests), else NULL */
} cli_session;

/* Opens --trace-file, when given, as s->trace. 0 or 2. */
static int cli_open_trace(const cli_args *a, cli_session *s) {
    if (a->trace_path && !(s->trace = fopen(a->trace_path, "w"))) {
        fprintf(stderr, "sluice %s: --trace-file %s: %s\n", a->cmd->name, a->trace_path, strerror(errno));
        return 2;
    }
    return 0;
}

/* Parses --name and --policy, and checks --cost against the policy. 0 or 2. */
static int cli_open_policy(const cli_args *a, cli_session *s) {
    char err[256], what[64];
    sluice_policy *probe = NULL;
    /* the name alone first, so that a bad name is not reported as a bad SPEC */
    if (sluice_policy_parse(a->name, "fixed-window limit=1 window=1s", &probe, err, sizeof err) != SLUICE_OK) {
        fprintf(stderr, "sluice %s: bad --name '%s': %s\n", a->cmd->name, a->name, err);
        return 2;
    }
    sluice_policy_free(probe);
    if (sluice_policy_parse(a->name, a->spec, &s->policy, err, sizeof err) != SLUICE_OK) {
        snprintf(what, sizeof what, "sluice %s: bad --policy SPEC", a->cmd->name);
        print_bad_spec(what, a->spec, err);
        return 2;
    }
    if (a->cost > sluice_policy_max_cost(s->policy)) {
        fprintf(stderr, "sluice %s: --cost %" PRId64 " is above %" PRId64
                ", the least limit of the policy: it can never be admitted\n",
                a->cmd->name, a->cost, sluice_policy_max_cost(s->policy));
        return 2;
    }
    return 0;
}

/* Whether url is a shm: store whose file is not there. */
static int shm_file_missing(const char *url) {
    char path[CLI_URL_MAX];
    struct stat sb;
    return shm_path(url, path, sizeof path) == 0 && stat(path, &sb) != 0 && errno == ENOENT;
}

/* Opens the store (and the manual clock when asked for). 0 or 2. With
 * existing_only, a shm file that is not there is an error, not made (a
 * command that only reads: a typo in a path would show an empty store,
 * and leave a file behind). */
static int cli_open_store(const cli_args *a, cli_session *s, int existing_only) {
    char err[256];
    sluice_store_options opts = SLUICE_STORE_OPTIONS_INIT;
    if (a->store_url) s->url = a->store_url;
    else if (default_store_url(a->cmd->name, s->url_buf, sizeof s->url_buf, existing_only) != 0) return 2;
    else s->url = s->url_buf;
    if (shm_dir_missing(a->cmd->name, s->url)) return 2;
    if (existing_only && shm_file_missing(s->url)) {
        fprintf(stderr, "sluice %s: store %s: no such file (check, run and pipe create it)\n", a->cmd->name, s->url);
        return 2;
    }
    if (a->seen & OPT_MANUAL_CLOCK) {
        if (!(s->manual = sluice_clock_manual_new(a->manual_start_ms))) {
            fprintf(stderr, "sluice %s: out of memory\n", a->cmd->name);
            return 2;
        }
        opts.clock = s->manual;
    }
    /* --strict: a remote store that cannot decide fails the call (the
     * decision is checked too: the URL may ask for on_error=allow) */
    if (a->strict) opts.on_error = SLUICE_ON_ERROR_ERROR;
    s->clock = s->manual ? s->manual : sluice_clock_monotonic();
    int rc = sluice_store_open_err(s->url, &opts, &s->store, err, sizeof err);
    if (rc != SLUICE_OK) {
        print_store_error(a->cmd->name, s->url, err, rc);
        return 2;
    }
    return 0;
}

static void cli_close(cli_session *s) {
    if (s->trace) fclose(s->trace);
    sluice_store_close(s->store);
    sluice_clock_free(s->manual);
    sluice_policy_free(s->policy);
    memset(s, 0, sizeof *s);
}

/* Everything before the decision: 0, or the exit status (2) with the
 * session closed. */
static int cli_open(const cli_args *a, cli_session *s) {
    memset(s, 0, sizeof *s);
    int rc = cli_open_trace(a, s);
    if (rc == 0) rc = cli_open_policy(a, s);
    if (rc == 0) rc = cli_open_store(a, s, 0);
    if (rc) cli_close(s);
    return rc;
}

/* A decision a remote store could not make (enforced false), on stderr:
 * what was done without counting, and the store's reason. With --strict,
 * the error it then is (the caller exits 2). */
static void cli_not_enforced(const cli_args *a, const cli_session *s, const sluice_decision *d, const char *tail) {
    const char *msg = sluice_store_errmsg(s->store);
    if (!*msg) msg = "no reason given";
    if (a->strict) {
        fprintf(stderr, "sluice %s: key ", a->cmd->name);
        put_quoted(stderr, a->key, a->key_len);
        fprintf(stderr, ": the store could not decide (--strict): %s\n", msg);
    } else {
        fprintf(stderr, "sluice %s: warning: the store could not decide, so the request was %s without being "
                        "counted (on_error=%s): %s%s\n",
                a->cmd->name, d->allowed ? "admitted" : "denied", d->allowed ? "allow" : "deny", msg, tail);
    }
}

/* A failed decision (not a denial), on stderr. */
static void cli_decision_error(const cli_args *a, const cli_session *s, int rc) {
    const char *msg = sluice_store_errmsg(s->store);
    fprintf(stderr, "sluice %s: key ", a->cmd->name);
    put_quoted(stderr, a->key, a->key_len);
    fprintf(stderr, ": %s: %s\n", sluice_err_name(rc), *msg ? msg : sluice_strerror(rc));
}

static int policy_has_leaky_bucket(const sluice_policy *p) {
    for (size_t i = 0; i < sluice_policy_n_parts(p); i++)
        if (sluice_policy_part(p, i)->algorithm == SLUICE_LEAKY_BUCKET) return 1;
    return 0;
}

/* ---- check ---- */

#define CLI_POLICY_HELP                                                                      \
    "  --policy SPEC    the limit (required), e.g. 'fixed-window limit=10 window=1m',\n"     \
    "                   'token-bucket capacity=5 rate=1/s', 'gcra rate=100/s burst=20',\n"  \
    "                   'leaky-bucket capacity=5 rate=10/s', 'sliding-window limit=10\n"     \
    "                   window=1s', 'sliding-log limit=4 window=1m', or several\n"           \
    "                   joined by ';' that must all admit (see man sluice)\n"
#define CLI_NAME_HELP                                                                        \
    "  --name NAME      the policy's name (default \"cli\"): 1..64 letters, digits and\n"   \
    "                   \"-_.:\". A store knows a limit by its NAME and SPEC: every\n"       \
    "                   invocation with the same NAME, SPEC and KEY shares one limit;\n"     \
    "                   another NAME (or SPEC) keeps a separate one\n"
#define CLI_STRICT_HELP                                                                      \
    "  --strict         fail (exit 2, with the store's reason) when a remote store\n"          \
    "                   cannot decide, instead of admitting without counting\n"               \
    "                   (on_error=allow, the default); the store is opened with\n"             \
    "                   on_error=error unless the URL says otherwise\n"
#define CLI_STORE_HELP                                                                       \
    "  --store URL      where the limits live. Default: the per-user shared-memory\n"        \
    "                   file shm:$XDG_RUNTIME_DIR/sluice.shm, or shm:/tmp/sluice-UID/\n"   \
    "                   sluice.shm (in $TMPDIR if set) when XDG_RUNTIME_DIR is not a\n"     \
    "                   directory of yours only (sluice stats prints which).\n"           \
    "                   Others: shm:PATH[?max_keys=N], redis://HOST:PORT[/DB] for many\n"    \
    "                   hosts; memory: lives and dies with one invocation\n"

static const char check_help[] =
    "usage: sluice check KEY --policy SPEC [--cost N] [--json] [--name NAME] [--store URL]\n"
    "                    [--strict]\n"
    "\n"
    "Decides one request of cost N for KEY under the limit SPEC, in a store that\n"
    "every process on this host shares, and prints the decision on stdout. An\n"
    "allowed request is counted; a denied one changes nothing.\n"
    "\n"
    "output: one line\n"
    "  allowed remaining=R reset_ms=Y\n"
    "  denied retry_after_ms=X remaining=R reset_ms=Y\n"
    "remaining: requests of cost 1 admitted now; retry_after_ms: the exact wait\n"
    "after which this request is admitted (one ms less is still denied);\n"
    "reset_ms: until the limit is fresh again. When SPEC has a leaky-bucket part,\n"
    "the line ends with delay_ms=Z: how long an admitted request should wait\n"
    "before it proceeds. \"enforced=false\" is added when a remote store could not\n"
    "decide: on_error=allow (its default) admits without counting, deny denies;\n"
    "a warning on stderr then gives the store's reason (--strict: an error).\n"
    "With --json, one JSON object with every field of the decision instead:\n"
    "  {\"allowed\":true,\"remaining\":1,\"retry_after_ms\":0,\"reset_ms\":60000,\"delay_ms\":0,\n"
    "   \"limit\":2,\"enforced\":true,\"part\":0,\"part_reset_ms\":60000}\n"
    "(part: the index of the part with the least remaining, whose limit is limit\n"
    "and whose own reset is part_reset_ms)\n"
    "\n"
    "options:\n"
    "  KEY, --key KEY   what is limited: 1..512 bytes (a user, a host, a job; the\n"
    "                   default store's file holds up to 128); use --key for a\n"
    "                   KEY that begins with '-'\n"
    CLI_POLICY_HELP
    "  --cost N         what the request costs (default 1); a cost above the least\n"
    "                   limit of SPEC can never be admitted: an error\n"
    "  --json           print one JSON object\n"
    CLI_NAME_HELP
    CLI_STORE_HELP
    CLI_STRICT_HELP
    "  -h, --help       this help\n"
    "\n"
    "exit status: 0 allowed, 1 denied, 2 error: a bad argument, SPEC, cost or\n"
    "store URL (nothing is counted), a store failure (with --strict also a\n"
    "decision the store could not make), or writing the decision failed (the\n"
    "request is then counted).\n"
    "\n"
    "example:\n"
    "  $ sluice check backup --policy 'token-bucket capacity=2 rate=1/h'\n"
    "  allowed remaining=1 reset_ms=3600000\n"
    "  $ sluice check backup --policy 'token-bucket capacity=2 rate=1/h'\n"
    "  allowed remaining=0 reset_ms=7200000\n"
    "  $ sluice check backup --policy 'token-bucket capacity=2 rate=1/h' || echo later\n"
    "  denied retry_after_ms=3600000 remaining=0 reset_ms=7200000\n"
    "  later\n";

static const cli_command check_command = {
    "check", "usage: sluice check KEY --policy SPEC [--cost N] [--json] [--name NAME] [--store URL] [--strict]",
    check_help, OPT_POLICY | OPT_COST | OPT_JSON | OPT_NAME | OPT_STORE | OPT_KEY | OPT_STRICT | OPT_MANUAL_CLOCK,
    1, 0};

static void print_decision_line(const sluice_decision *d, int show_delay) {
    if (d->allowed)
        printf("allowed remaining=%" PRId64 " reset_ms=%" PRId64, d->remaining, d->reset_ms);
    else
        printf("denied retry_after_ms=%" PRId64 " remaining=%" PRId64 " reset_ms=%" PRId64, d->retry_after_ms,
               d->remaining, d->reset_ms);
    if (show_delay && d->allowed) printf(" delay_ms=%" PRId64, d->delay_ms);
    if (!d->enforced) printf(" enforced=false");
    putchar('\n');
}

static void print_decision_json(const sluice_decision *d) {
    printf("{\"allowed\":%s,\"remaining\":%" PRId64 ",\"retry_after_ms\":%" PRId64 ",\"reset_ms\":%" PRId64
           ",\"delay_ms\":%" PRId64 ",\"limit\":%" PRId64 ",\"enforced\":%s,\"part\":%d,\"part_reset_ms\":%" PRId64
           "}\n",
           d->allowed ? "true" : "false", d->remaining, d->retry_after_ms, d->reset_ms, d->delay_ms, d->limit,
           d->enforced ? "true" : "false", (int)d->part, d->part_reset_ms);
}

static int cmd_check(int argc, char **argv) {
    cli_args a;
    cli_session s;
    sluice_decision d;
    int status = cli_parse(&check_command, argc, argv, &a);
    if (status) return status < 0 ? 0 : status;
    if ((status = cli_open(&a, &s)) != 0) return status;
    int rc = sluice_store_acquire(s.store, s.policy, a.key, a.key_len, a.cost, &d);
    if (rc != SLUICE_OK) {
        cli_decision_error(&a, &s, rc);
        cli_close(&s);
        return 2;
    }
    if (!d.enforced) {
        cli_not_enforced(&a, &s, &d, "");
        if (a.strict) {
            cli_close(&s);
            return 2;
        }
    }
    if (a.json) print_decision_json(&d);
    else print_decision_line(&d, policy_has_leaky_bucket(s.policy));
    cli_close(&s);
    if (finish_stdout("check")) return 2;
    return d.allowed ? 0 : 1;
}

/* ---- run ---- */

static const char run_help[] =
    "usage: sluice run KEY --policy SPEC [--wait[=TIMEOUT]] [--cost N] [--name NAME]\n"
    "                  [--store URL] [--strict] -- COMMAND [ARGS...]\n"
    "\n"
    "Takes one request of cost N for KEY under the limit SPEC (shared as with\n"
    "sluice check), then runs COMMAND in its place (exec): COMMAND's exit status\n"
    "is sluice's. Everything after '--' is the command.\n"
    "\n"
    "Without --wait, a denial runs nothing: sluice prints the retry time on\n"
    "stderr and exits 1. With --wait it sleeps until the request is admitted;\n"
    "with --wait=TIMEOUT at most TIMEOUT (500ms, 2s, 1m, 1h, 1d, or a number of\n"
    "ms), and gives up at once (exit 1, the retry time on stderr) when the\n"
    "limit's wait is longer than what is left of TIMEOUT. When SPEC has a\n"
    "leaky-bucket part, an admitted request may come with a delay (delay_ms):\n"
    "sluice sleeps that long before it runs COMMAND, in full (the request holds\n"
    "its place in the queue; TIMEOUT bounds the wait for admission only).\n"
    "\n"
    "COMMAND is looked up in PATH before the request is made: one that cannot be\n"
    "found or run counts nothing. When a remote store cannot decide, a warning\n"
    "on stderr gives its reason, and COMMAND runs uncounted (on_error=allow, the\n"
    "default) or not at all (on_error=deny, and --strict: exit 2).\n"
    "\n"
    "options:\n"
    "  KEY, --key KEY   what is limited: 1..512 bytes (the default store's file\n"
    "                   holds up to 128)\n"
    CLI_POLICY_HELP
    "  --wait           wait for as long as it takes\n"
    "  --wait=TIMEOUT   wait at most TIMEOUT\n"
    "  --cost N         what the request costs (default 1)\n"
    CLI_NAME_HELP
    CLI_STORE_HELP
    CLI_STRICT_HELP
    "  -h, --help       this help\n"
    "\n"
    "exit status: COMMAND's own once it runs; 1 denied or timed out (COMMAND not\n"
    "run); 2 error: a bad argument, SPEC, cost or store URL (nothing counted) or\n"
    "a store failure (with --strict also a decision the store could not make);\n"
    "126 COMMAND is not executable; 127 COMMAND is not found.\n"
    "\n"
    "example:\n"
    "  $ sluice run nightly --policy 'fixed-window limit=1 window=1d' -- ./backup.sh\n"
    "  $ sluice run api --policy 'gcra rate=5/s burst=1' --wait -- curl -s URL\n";

static const cli_command run_command = {
    "run",
    "usage: sluice run KEY --policy SPEC [--wait[=TIMEOUT]] [--cost N] [--name NAME] [--store URL] [--strict] "
    "-- COMMAND [ARGS...]",
    run_help,
    OPT_POLICY | OPT_COST | OPT_NAME | OPT_STORE | OPT_WAIT | OPT_KEY | OPT_STRICT | OPT_MANUAL_CLOCK | OPT_TRACE_FILE,
    1, 1};

/* Whether execvp(name) would find an executable file, searching PATH as it
 * does: 0, or with a message 127 (not found) or 126 (found, not
 * executable), the statuses shells use. */
static int check_command_runs(const char *name) {
    struct stat st;
    char path[4096];
    if (!*name) {
        fprintf(stderr, "sluice run: the command name is empty\n");
        return 127;
    }
    if (strchr(name, '/')) {
        if (stat(name, &st) != 0) {
            fprintf(stderr, "sluice run: %s: %s\n", name, strerror(errno));
            return errno == ENOENT || errno == ENOTDIR ? 127 : 126;
        }
        if (S_ISDIR(st.st_mode) || access(name, X_OK) != 0) {
            fprintf(stderr, "sluice run: %s: %s\n", name, S_ISDIR(st.st_mode) ? strerror(EISDIR) : strerror(EACCES));
            return 126;
        }
        return 0;
    }
    const char *dirs = getenv("PATH");
    int found_not_executable = 0;
    if (!dirs) dirs = "/bin:/usr/bin"; /* execvp's default */
    for (const char *p = dirs;;) {
        const char *end = strchr(p, ':');
        size_t n = end ? (size_t)(end - p) : strlen(p);
        int w = n ? snprintf(path, sizeof path, "%.*s/%s", (int)n, p, name)
                  : snprintf(path, sizeof path, "%s", name); /* "" is the current directory */
        if (w > 0 && (size_t)w < sizeof path && stat(path, &st) == 0 && !S_ISDIR(st.st_mode)) {
            if (access(path, X_OK) == 0) return 0;
            found_not_executable = 1;
        }
        if (!end) break;
        p = end + 1;
    }
    if (found_not_executable) {
        fprintf(stderr, "sluice run: %s: %s\n", name, strerror(EACCES));
        return 126;
    }
    fprintf(stderr, "sluice run: %s: command not found\n", name);
    return 127;
}

static int cmd_run(int argc, char **argv) {
    cli_args a;
    cli_session s;
    sluice_decision d;
    int status = cli_parse(&run_command, argc, argv, &a);
    if (status) return status < 0 ? 0 : status;
    /* everything that can be known to fail, before anything is counted */
    memset(&s, 0, sizeof s);
    if ((status = cli_open_trace(&a, &s)) != 0 || (status = cli_open_policy(&a, &s)) != 0 ||
        (status = check_command_runs(a.command[0])) != 0 || (status = cli_open_store(&a, &s, 0)) != 0) {
        cli_close(&s);
        return status;
    }

    int rc = a.wait ? sluice_store_acquire_wait(s.store, s.policy, a.key, a.key_len, a.cost, a.wait_ms, &d)
                    : sluice_store_acquire(s.store, s.policy, a.key, a.key_len, a.cost, &d);
    if (rc == SLUICE_OK && !d.enforced) {
        cli_not_enforced(&a, &s, &d, "");
        if (a.strict) {
            fprintf(stderr, "sluice run: %s not run\n", a.command[0]);
            cli_close(&s);
            return 2;
        }
    }
    if (rc == SLUICE_ETIMEDOUT || (rc == SLUICE_OK && !d.allowed)) {
        if (rc == SLUICE_ETIMEDOUT) /* the last try may be a sleep ago */
            fprintf(stderr, "sluice run: denied: not admitted within the --wait=%s timeout (the last try said "
                            "retry after %" PRId64 " ms)", a.wait_text, d.retry_after_ms);
        else
            fprintf(stderr, "sluice run: denied: retry after %" PRId64 " ms", d.retry_after_ms);
        fprintf(stderr, " (key ");
        put_quoted(stderr, a.key, a.key_len);
        fprintf(stderr, "); %s not run\n", a.command[0]);
        cli_close(&s);
        return 1;
    }
    if (rc != SLUICE_OK) {
        cli_decision_error(&a, &s, rc);
        cli_close(&s);
        return 2;
    }
    /* a leaky bucket admits with a delay: the request proceeds after it */
    if (d.delay_ms > 0) sluice_clock_sleep_ms(s.clock, d.delay_ms);
    if (s.trace) fprintf(s.trace, "t=%" PRId64 "\n", sluice_clock_now_ms(s.clock));
    cli_close(&s);
    fflush(stdout);
    sigaction(SIGPIPE, &sigpipe_inherited, NULL);
    execvp(a.command[0], a.command);
    int e = errno;
    fprintf(stderr, "sluice run: %s: %s\n", a.command[0], strerror(e));
    return e == ENOENT || e == ENOTDIR ? 127 : 126;
}

/* ---- pipe ---- */

static const char pipe_help[] =
    "usage: sluice pipe --policy SPEC [--unit lines|bytes] [--key KEY] [--name NAME]\n"
    "                   [--store URL]\n"
    "\n"
    "Copies standard input to standard output at the rate SPEC allows, blocking\n"
    "as needed: nothing is lost, reordered or changed. Each unit is written only\n"
    "once the store admits it:\n"
    "  lines  (the default) one request of cost 1 per line, made when the line's\n"
    "         first byte is read; a last line without a newline counts too\n"
    "  bytes  requests of up to the least limit of SPEC bytes: all the bytes read\n"
    "         so far when admitted, else as many as are admitted now, else sluice\n"
    "         waits for the next byte\n"
    "What is admitted is written before any wait. When SPEC has a leaky-bucket\n"
    "part, an admitted unit is written after its delay (delay_ms). The state\n"
    "lives in the store under KEY (default \"pipe\"): pipes, checks and runs with\n"
    "the same KEY, NAME and SPEC share one rate. When a remote store cannot\n"
    "decide, a warning on stderr gives its reason, once.\n"
    "\n"
    "options:\n"
    CLI_POLICY_HELP
    "  --unit UNIT      lines (default) or bytes\n"
    "  --key KEY        the key of the shared state (default \"pipe\")\n"
    CLI_NAME_HELP
    CLI_STORE_HELP
    "  -h, --help       this help\n"
    "\n"
    "exit status: 0 at the end of the input; 1 reading, writing or the store\n"
    "failed (what was admitted is written first; a reader that went away, as\n"
    "after | head, ends it with no message); 2 a bad argument, SPEC or store\n"
    "URL, or a store that cannot be opened (nothing is read).\n"
    "\n"
    "example:\n"
    "  $ tail -f app.log | grep ERROR | sluice pipe --policy 'token-bucket capacity=10 rate=1/m' | mail-each\n";

static const cli_command pipe_command = {
    "pipe", "usage: sluice pipe --policy SPEC [--unit lines|bytes] [--key KEY] [--name NAME] [--store URL]",
    pipe_help,
    OPT_POLICY | OPT_UNIT | OPT_KEY | OPT_NAME | OPT_STORE | OPT_MANUAL_CLOCK | OPT_TRACE_FILE, 0, 0};

/* Waits until fd is ready for events (for descriptors in non-blocking mode). */
static int wait_fd(int fd, short events) {
    struct pollfd p = {fd, events, 0};
    while (poll(&p, 1, -1) < 0)
        if (errno != EINTR) return -1;
    return 0;
}

/* Writes all of b[0..n): short writes and EINTR go on. 0, or -1 (errno). */
static int write_all(int fd, const char *b, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, b, n);
        if (k > 0) {
            b += k;
            n -= (size_t)k;
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(fd, POLLOUT)) return -1;
        } else {
            if (k == 0) errno = EIO;
            return -1;
        }
    }
    return 0;
}

/* Reads what is there, up to n bytes: the count, 0 at the end, -1 (errno). */
static ssize_t read_some(int fd, char *b, size_t n) {
    for (;;) {
        ssize_t k = read(fd, b, n);
        if (k >= 0) return k;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_fd(fd, POLLIN)) return -1;
        } else if (errno != EINTR) {
            return -1;
        }
    }
}

enum { PIPE_BUF_SIZE = 65536 };

/* The input buffer: buf[0..written) is out, buf[written..released) admitted
 * and waiting to be written, buf[released..filled) read, not yet admitted. */
typedef struct {
    const cli_args *a;
    cli_session *s;
    int64_t least; /* the least limit of the policy: the largest cost */
    int warned;    /* a decision not enforced was reported */
    char buf[PIPE_BUF_SIZE];
    size_t written, released, filled;
} pipe_state;

/* Writes what is admitted. 0, or 1 with a message (none when the reader has
 * gone, EPIPE: that is how `| head` ends a pipeline). */
static int pipe_flush(pipe_state *ps) {
    if (ps->released > ps->written && write_all(1, ps->buf + ps->written, ps->released - ps->written) != 0) {
        if (errno != EPIPE) fprintf(stderr, "sluice pipe: writing standard output: %s\n", strerror(errno));
        ps->written = ps->released; /* lost: never written (or reported) again */
        return 1;
    }
    ps->written = ps->released;
    return 0;
}

/* Admits `want` units, or with partial_ok at least one and at most want:
 * *got of them. Blocks until then. 0, or 1 with a message. */
static int pipe_admit(pipe_state *ps, int64_t want, int partial_ok, int64_t *got) {
    const cli_args *a = ps->a;
    cli_session *s = ps->s;
    sluice_decision d;
    int rc = sluice_store_acquire(s->store, s->policy, a->key, a->key_len, want, &d);
    if (rc == SLUICE_OK && !d.allowed && partial_ok && d.remaining > 0 && d.remaining < want) {
        want = d.remaining; /* what is admitted now */
        rc = sluice_store_acquire(s->store, s->policy, a->key, a->key_len, want, &d);
    }
    if (rc == SLUICE_OK && !d.allowed) {
        if (partial_ok) want = 1; /* the next byte, as soon as it may go */
        if (pipe_flush(ps)) return 1;
        rc = sluice_store_acquire_wait(s->store, s->policy, a->key, a->key_len, want, INT64_MAX, &d);
    }
    if (rc != SLUICE_OK) {
        cli_decision_error(a, s, rc);
        return 1;
    }
    if (!d.enforced && !ps->warned) { /* once: a pipe makes many decisions */
        cli_not_enforced(a, s, &d, " (said once; later ones are not)");
        ps->warned = 1;
    }
    if (d.delay_ms > 0) {
        if (pipe_flush(ps)) return 1;
        sluice_clock_sleep_ms(s->clock, d.delay_ms);
    }
    if (s->trace) fprintf(s->trace, "t=%" PRId64 " units=%" PRId64 "\n", sluice_clock_now_ms(s->clock), want);
    *got = want;
    return 0;
}

static int cmd_pipe(int argc, char **argv) {
    cli_args a;
    cli_session s;
    int status = cli_parse(&pipe_command, argc, argv, &a);
    if (status) return status < 0 ? 0 : status;
    pipe_state *ps = calloc(1, sizeof *ps);
    if (!ps) {
        fprintf(stderr, "sluice pipe: out of memory\n");
        return 1;
    }
    if ((status = cli_open(&a, &s)) != 0) {
        free(ps);
        return status;
    }
    ps->a = &a;
    ps->s = &s;
    ps->least = sluice_policy_max_cost(s.policy);
    int in_line = 0; /* lines: the line being copied is admitted */
    while (status == 0) {
        if (ps->released == ps->filled) {
            if ((status = pipe_flush(ps)) != 0) break;
            ssize_t n = read_some(0, ps->buf, sizeof ps->buf);
            if (n < 0) {
                fprintf(stderr, "sluice pipe: reading standard input: %s\n", strerror(errno));
                status = 1;
            }
            if (n <= 0) break;
            ps->written = ps->released = 0;
            ps->filled = (size_t)n;
        }
        int64_t got;
        if (a.unit_bytes) {
            int64_t avail = (int64_t)(ps->filled - ps->released);
            if ((status = pipe_admit(ps, avail < ps->least ? avail : ps->least, 1, &got)) != 0) break;
            ps->released += (size_t)got;
        } else {
            if (!in_line && (status = pipe_admit(ps, 1, 0, &got)) != 0) break;
            const char *nl = memchr(ps->buf + ps->released, '\n', ps->filled - ps->released);
            in_line = nl == NULL;
            ps->released = nl ? (size_t)(nl - ps->buf) + 1 : ps->filled;
        }
    }
    if (pipe_flush(ps) && status == 0) status = 1; /* what was admitted goes out */
    if (s.trace && fclose(s.trace) != 0 && status == 0) {
        fprintf(stderr, "sluice pipe: --trace-file %s: %s\n", a.trace_path, strerror(errno));
        status = 1;
    }
    s.trace = NULL; /* closed */
    cli_close(&s);
    free(ps);
    return status;
}

/* ---- stats ---- */

static const char stats_help[] =
    "usage: sluice stats [--store URL] [--json]\n"
    "\n"
    "Prints the store it reads (a shm: file that is not there is an error: stats\n"
    "makes no store), then its figures, one \"name: value\" per line:\n"
    "  store       the store's URL (the default one unless --store)\n"
    "  keys        keys held now\n"
    "  capacity    the most keys it holds (max_keys)\n"
    "  allowed     decisions that admitted\n"
    "  denied      decisions that denied\n"
    "  forgotten   keys back to their fresh state, dropped to make room (losslessly)\n"
    "  evicted     keys not fresh, evicted to make room\n"
    "  refused     new keys refused because the store was full (on_full=refuse)\n"
    "  failures    remote stores: decisions the server failed\n"
    "  reconnects  remote stores: connections made again after a failure\n"
    "The counters are the store's own: for a shm: file, those of every process\n"
    "that used it; for memory:, one invocation's (all zero).\n"
    "\n"
    "options:\n"
    CLI_STORE_HELP
    "  --json           one JSON object with the same fields\n"
    "  -h, --help       this help\n"
    "\n"
    "exit status: 0; 1 writing failed; 2 a bad argument or store URL, a store\n"
    "file that is not there, or a store failure (a remote store whose server\n"
    "cannot be reached: nothing is printed on stdout).\n";

static const cli_command stats_command = {"stats", "usage: sluice stats [--store URL] [--json]", stats_help,
                                          OPT_STORE | OPT_JSON, 0, 0};

static int cmd_stats(int argc, char **argv) {
    cli_args a;
    cli_session s;
    sluice_stats st;
    int status = cli_parse(&stats_command, argc, argv, &a);
    if (status) return status < 0 ? 0 : status;
    memset(&s, 0, sizeof s);
    if ((status = cli_open_store(&a, &s, 1)) != 0) { /* stats only reads: it makes no store */
        cli_close(&s);
        return status;
    }
    int rc = sluice_store_stats(s.store, &st);
    /* a remote store whose server cannot be reached: an error, however the
     * library says it (SLUICE_ESTORE, or keys -1 from libraries before it
     * did) */
    if (rc == SLUICE_OK && st.keys == -1 && strncmp(sluice_store_kind(s.store), "redis", 5) == 0) {
        rc = SLUICE_ESTORE;
        if (!*sluice_store_errmsg(s.store)) {
            fprintf(stderr, "sluice stats: store %s: the server cannot be reached (its keys are unknown)\n", s.url);
            cli_close(&s);
            return 2;
        }
    }
    if (rc != SLUICE_OK) {
        print_store_error("stats", s.url, sluice_store_errmsg(s.store), rc);
        cli_close(&s);
        return 2;
    }
    const struct {
        const char *name;
        int64_t value;
    } rows[] = {{"keys", st.keys},           {"capacity", st.capacity}, {"allowed", st.allowed},
                {"denied", st.denied},       {"forgotten", st.forgotten}, {"evicted", st.evicted},
                {"refused", st.refused},     {"failures", st.failures}, {"reconnects", st.reconnects}};
    if (a.json) {
        fputs("{\"store\":", stdout);
        cli_put_json_bytes(stdout, s.url, strlen(s.url));
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            printf(",\"%s\":%" PRId64, rows[i].name, rows[i].value);
        fputs("}\n", stdout);
    } else {
        printf("store: %s\n", s.url);
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
            printf("%s: %" PRId64 "\n", rows[i].name, rows[i].value);
    }
    cli_close(&s);
    return finish_stdout("stats");
}

/* ------------------------------------------------------------------------ */
/* main                                                                      */
/* ------------------------------------------------------------------------ */

int main(int argc, char **argv) {
    struct sigaction ignore;
    memset(&ignore, 0, sizeof ignore);
    ignore.sa_handler = SIG_IGN;
    sigemptyset(&ignore.sa_mask);
    sigaction(SIGPIPE, &ignore, &sigpipe_inherited);
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (strcmp(name, "--help") == 0 || strcmp(name, "-h") == 0) name = "help";
    if (strcmp(name, "--version") == 0 || strcmp(name, "-V") == 0) name = "version";
    for (size_t i = 0; i < N_COMMANDS; i++)
        if (strcmp(name, commands[i].name) == 0) return commands[i].run(argc - 1, argv + 1);
    fprintf(stderr, "sluice: unknown command '%s'\n\n", argv[1]);
    usage(stderr);
    return 2;
}
