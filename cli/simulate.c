/* simulate.c: sluice simulate, a trace of requests (stdin) replayed
 * against a policy in a store (memory: unless --store) on a manual clock
 * set to each line's time; every decision printed, or a summary (report.c),
 * or a picture (svg.c). A bad line stops the run once the lines before it
 * are printed; a long run shows its progress on a terminal. */
#define _POSIX_C_SOURCE 200809L /* getline, isatty, ftello */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#define SIM_USAGE                                                                                  \
    "usage: sluice simulate [SPEC | --policy SPEC] [--store URL] [--allow-backwards] [--json]\n" \
    "                       [--summary[=N|all]] [--svg FILE]"
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
    "                     'redis://127.0.0.1:6379' (clock=client is the default,\n"
    "                     so Redis decides at the trace's times)\n"
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

static const cli_command simulate_command = {
    "simulate", SIM_USAGE, simulate_help,
    CLI_OPT_POLICY | CLI_OPT_STORE | CLI_OPT_JSON | CLI_OPT_ALLOW_BACKWARDS | CLI_OPT_SUMMARY | CLI_OPT_SVG |
        CLI_OPT_PROGRESS_AFTER_MS,
    CLI_TAKES_SPEC, 0, NULL};

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
    int pr = cli_parse_int64(f[0].b, f[0].n, 1, &q->t);
    if (pr != 0 || q->t < SLUICE_TIME_MIN_MS || q->t > SLUICE_TIME_MAX_MS) {
        sim_line_error(line_no);
        fputs("time ", stderr);
        cli_put_quoted(stderr, f[0].b, f[0].n);
        if (pr == -1) fprintf(stderr, " is not an integer (ms)\n");
        else fprintf(stderr, " is outside the accepted range %" PRId64 "..%" PRId64 " ms\n", SLUICE_TIME_MIN_MS,
                     SLUICE_TIME_MAX_MS);
        return 2;
    }
    if (nf < 2) return sim_bad_line(line_no, "missing KEY (expected TIME_MS KEY [COST])");
    q->key = f[1];
    q->cost = 1;
    if (nf == 3) {
        pr = cli_parse_int64(f[2].b, f[2].n, 0, &q->cost);
        if (pr != 0 || q->cost < 1) {
            sim_line_error(line_no);
            fputs("cost ", stderr);
            cli_put_quoted(stderr, f[2].b, f[2].n);
            fprintf(stderr, " is not a positive integer%s\n", pr == -2 ? " (too large)" : "");
            return 2;
        }
    }
    return 0;
}

/* One decision on stdout: a line of name=value, or a JSON object. */
static void sim_print(const cli_args *a, const sim_request *q, const sluice_decision *d) {
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
 * the trace's times (caller_clock: Redis's clock=client) unless the URL
 * says otherwise. */
static int sim_open_store(const cli_args *a, const sluice_clock *clk, sluice_store **store) {
    char err[512];
    sluice_store_options opts = SLUICE_STORE_OPTIONS_INIT;
    opts.clock = clk; /* every reading is the line's time, for any kind of store */
    opts.caller_clock = true;
    int rc = sluice_store_open_err(a->store_url, &opts, store, err, sizeof err);
    if (rc != SLUICE_OK) {
        cli_store_error("simulate", a->store_url, err, rc, "");
        return 2;
    }
    return 0;
}

/* Decides every line of stdin; the exit status (messages said). */
static int sim_run(const cli_args *a, sluice_store *store, const sluice_policy *policy, sluice_clock *clk,
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
            cli_put_quoted(stderr, q.key.b, q.key.n);
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
static int sim_write_svg(const cli_args *a, FILE *svg, const cli_report *rep) {
    int rc = cli_svg_write(rep, svg, a->spec, SIM_SVG_PANELS);
    if (rc != 0) fprintf(stderr, "sluice simulate: --svg %s: out of memory\n", a->svg_path);
    if (fflush(svg) != 0 || ferror(svg)) {
        fprintf(stderr, "sluice simulate: --svg %s: %s\n", a->svg_path, strerror(errno));
        rc = -1;
    }
    return rc ? 1 : 0;
}

int cli_cmd_simulate(int argc, char **argv) {
    cli_args a;
    int status = cli_parse(&simulate_command, argc, argv, &a);
    if (status) return status < 0 ? 0 : status;
    if (!a.store_url) a.store_url = "memory:";

    char err[256];
    sluice_policy *policy = NULL;
    if (sluice_policy_parse("simulate", a.spec, &policy, err, sizeof err) != SLUICE_OK) {
        cli_print_bad_spec("sluice simulate: bad SPEC", a.spec, err);
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

