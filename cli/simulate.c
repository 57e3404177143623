/* simulate.c: sluice simulate, a trace of requests (stdin) replayed
 * against a policy in a store (memory: unless --store) on a manual clock
 * set to each line's time; every decision printed, or a summary (report.c),
 * or a picture (svg.c). A line may be a verb on a key instead (peek,
 * refund, reset), printed as a request is but counted apart. A bad line
 * stops the run once the lines before it are printed; a long run shows its
 * progress on a terminal. */
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
    "or a verb on KEY at TIME_MS instead of a request (as sluice peek, refund and\n"
    "reset do):\n"
    "  TIME_MS KEY peek [COST]   the decision a request of COST would get; nothing\n"
    "                            is consumed\n"
    "  TIME_MS KEY refund COST   gives COST back\n"
    "  TIME_MS KEY reset         makes KEY's limit fresh\n"
    "'#' starts a comment that runs to the end of the line; blank lines are\n"
    "ignored; a CR before the newline is dropped. Times must not decrease (verb\n"
    "lines' too): a time earlier than one before it is a bad line, unless\n"
    "--allow-backwards.\n"
    "\n"
    "output: one line per request, on stdout:\n"
    "  t=TIME key=KEY cost=N allowed=0|1 remaining=R retry_after_ms=X reset_ms=Y delay_ms=Z\n"
    "with the fields of the decision (docs/semantics.md; \" shadow_denied=1\" is\n"
    "added when a shadow part of SPEC would have denied the request, and\n"
    "\" enforced=false\" when a remote store could not decide, with a warning\n"
    "once). A verb line prints one line too, \"verb=peek|refund|reset\" after the\n"
    "key and cost=N its COST (1 when absent), with the decision a request of COST\n"
    "would get (peek), or that of a request of cost 1 right after (refund, reset):\n"
    "  t=TIME key=KEY verb=VERB cost=N allowed=0|1 remaining=R ... delay_ms=Z\n"
    "Verb lines are not requests: they are counted apart, not as requests,\n"
    "allowed or denied, here, in the summary and in the picture. Then, on stderr:\n"
    "  # N requests, A allowed, D denied, K keys held[, U not enforced]\n"
    "    [, S shadow denied][; P peeks, R refunds, Z resets]\n"
    "With --json, one JSON object per line with every field of the decision:\n"
    "  {\"t\":0,\"key\":\"alice\",\"cost\":1,\"allowed\":true,\"remaining\":1,\n"
    "   \"retry_after_ms\":0,\"reset_ms\":1000,\"delay_ms\":0,\"limit\":2,\"part\":0,\n"
    "   \"part_reset_ms\":1000,\"enforced\":true,\"shadow_denied\":false,\"local\":false}\n"
    "(limit: that of the part with the least remaining; part: its index;\n"
    "part_reset_ms: that part's own reset; a key's bytes that are not UTF-8 as\n"
    "\\u00XX; a verb line's object has \"verb\" after \"key\").\n"
    "With --summary, no line per request; at the end, on stdout:\n"
    "  requests=N allowed=A denied=D keys=K[ not_enforced=U][ shadow_denied=S]\n"
    "    [ peeks=P refunds=R resets=Z]\n"
    "  part=I requests=N allowed=A denied=D config=TEXT   (each part)\n"
    "  key=KEY requests=N allowed=A denied=D              (the most denied first)\n"
    "  other_keys=K requests=N allowed=A denied=D         (the keys not listed)\n"
    "A part's requests are the decisions it set: it had the least remaining (on\n"
    "a denial, it is one that denied; a shadow part sets none). The keys are\n"
    "those of the requests. With --json the summary is one object:\n"
    "{requests, allowed, denied, keys, not_enforced, shadow_denied, peeks,\n"
    "refunds, resets, parts: [{part, config, requests, allowed, denied}],\n"
    "most_denied: [{key, requests, allowed, denied}], other_keys: {keys,\n"
    "requests, allowed, denied}}.\n"
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
    "                     written when the run fails; verb lines not drawn)\n"
    "  -h, --help         this help\n"
    "\n"
    "exit status: 0 when every line was decided; 2 for a bad SPEC, option or store\n"
    "URL (or a store that cannot be opened, or an --svg FILE that cannot be\n"
    "made), and for a bad line (a bad time, key, cost or verb, a refund without\n"
    "COST, a time that goes back, a cost above what the policy can ever admit)\n"
    "or a store error (e.g. a full store that refuses a new key), reported on\n"
    "stderr as 'sluice simulate: line N: WHAT' once the lines before it are\n"
    "printed (the run stops there: nothing is skipped); 1 when reading or writing\n"
    "fails (no message when the reader of standard output has gone, as after |\n"
    "head).\n"
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

/* One line of the trace: a request, or a verb on its key. */
typedef struct {
    int64_t t, cost; /* cost: the line's COST, 1 when absent (a reset's too) */
    token key;
    int verb;        /* a cli_verb, or SIM_REQUEST */
} sim_request;
#define SIM_REQUEST (-1)

static const char *const sim_verbs[CLI_N_VERBS] = {"peek", "refund", "reset"};
#define SIM_FORMS "TIME_MS KEY [COST], or TIME_MS KEY peek [COST] | refund COST | reset"

/* Reads a COST field into *cost: 0, or 2 (said). */
static int sim_parse_cost(const token *f, int64_t line_no, int64_t *cost) {
    int pr = cli_parse_int64(f->b, f->n, 0, cost);
    if (pr == 0 && *cost >= 1) return 0;
    sim_line_error(line_no);
    fputs("cost ", stderr);
    cli_put_quoted(stderr, f->b, f->n);
    fprintf(stderr, " is not a positive integer%s\n", pr == -2 ? " (too large)" : "");
    return 2;
}

/* Reads line[0..n) (its newline dropped): 0 with *q set, 1 for a line with
 * nothing to do (blank, a comment), 2 for a bad line (said). */
static int sim_parse_line(char *line, size_t n, int64_t line_no, sim_request *q) {
    if (n > 0 && line[n - 1] == '\r') n--;
    const char *hash = memchr(line, '#', n);
    if (hash) n = (size_t)(hash - line);
    token f[4];
    size_t nf = split_fields(line, n, f, 4);
    if (nf == 0) return 1;
    if (nf > 4) return sim_bad_line(line_no, "more than 4 fields (expected " SIM_FORMS ")");
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
    if (nf < 2) return sim_bad_line(line_no, "missing KEY (expected " SIM_FORMS ")");
    q->key = f[1];
    q->cost = 1;
    q->verb = SIM_REQUEST;
    if (nf == 2) return 0;
    /* the third field: a COST (a number: a request), else a verb */
    char c0 = f[2].b[0];
    if ((c0 >= '0' && c0 <= '9') || c0 == '-' || c0 == '+') {
        if (nf > 3) return sim_bad_line(line_no, "more than 3 fields for a request (expected TIME_MS KEY [COST])");
        return sim_parse_cost(&f[2], line_no, &q->cost);
    }
    for (int v = 0; v < CLI_N_VERBS; v++)
        if (f[2].n == strlen(sim_verbs[v]) && memcmp(f[2].b, sim_verbs[v], f[2].n) == 0) q->verb = v;
    if (q->verb == SIM_REQUEST) {
        sim_line_error(line_no);
        fputs("verb ", stderr);
        cli_put_quoted(stderr, f[2].b, f[2].n);
        fputs(" is unknown: expected peek, refund or reset, or a COST (a positive integer)\n", stderr);
        return 2;
    }
    if (q->verb == CLI_VERB_RESET && nf > 3)
        return sim_bad_line(line_no, "reset takes no COST (expected TIME_MS KEY reset)");
    if (q->verb == CLI_VERB_REFUND && nf < 4)
        return sim_bad_line(line_no, "missing COST: how much to give back (expected TIME_MS KEY refund COST)");
    return nf == 4 ? sim_parse_cost(&f[3], line_no, &q->cost) : 0;
}

/* One decision on stdout: a line of name=value, or a JSON object; a verb
 * line names its verb after the key. */
static void sim_print(const cli_args *a, const sim_request *q, const sluice_decision *d) {
    if (a->json) {
        printf("{\"t\":%" PRId64 ",\"key\":", q->t);
        cli_put_json_bytes(stdout, q->key.b, q->key.n);
        if (q->verb != SIM_REQUEST) printf(",\"verb\":\"%s\"", sim_verbs[q->verb]);
        printf(",\"cost\":%" PRId64 ",\"allowed\":%s,\"remaining\":%" PRId64 ",\"retry_after_ms\":%" PRId64
               ",\"reset_ms\":%" PRId64 ",\"delay_ms\":%" PRId64 ",\"limit\":%" PRId64
               ",\"part\":%d,\"part_reset_ms\":%" PRId64 ",\"enforced\":%s,\"shadow_denied\":%s,\"local\":%s}\n",
               q->cost, d->allowed ? "true" : "false", d->remaining, d->retry_after_ms, d->reset_ms, d->delay_ms,
               d->limit, (int)d->part, d->part_reset_ms, d->enforced ? "true" : "false",
               d->shadow_denied ? "true" : "false", d->local ? "true" : "false");
        return;
    }
    printf("t=%" PRId64 " key=", q->t);
    fwrite(q->key.b, 1, q->key.n, stdout);
    if (q->verb != SIM_REQUEST) printf(" verb=%s", sim_verbs[q->verb]);
    printf(" cost=%" PRId64 " allowed=%d remaining=%" PRId64 " retry_after_ms=%" PRId64 " reset_ms=%" PRId64
           " delay_ms=%" PRId64 "%s%s%s\n",
           q->cost, d->allowed ? 1 : 0, d->remaining, d->retry_after_ms, d->reset_ms, d->delay_ms,
           d->shadow_denied ? " shadow_denied=1" : "", d->local ? " local=1" : "", d->enforced ? "" : " enforced=false");
}

/* Makes the decision of line q: the request's, or the verb's (at the
 * line's time: clk is set to it, for a reset, which has no _at form). */
static int sim_decide(sluice_store *store, const sluice_policy *policy, sluice_clock *clk, const sim_request *q,
                      sluice_decision *d) {
    sluice_clock_manual_set(clk, q->t);
    switch (q->verb) {
    case CLI_VERB_PEEK:
        return sluice_store_peek_at(store, policy, q->key.b, q->key.n, q->cost, q->t, d);
    case CLI_VERB_REFUND:
        return sluice_store_refund_at(store, policy, q->key.b, q->key.n, q->cost, q->t, d);
    case CLI_VERB_RESET:
        return sluice_store_reset(store, policy, q->key.b, q->key.n, d);
    default:
        return sluice_store_acquire_at(store, policy, q->key.b, q->key.n, q->cost, q->t, d);
    }
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
    int write_errno = 0, status = 0, warned = 0;
    progress_start(a->progress_after_ms);
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        size_t n = (size_t)len;
        sim_request q;
        line_no++;
        if ((line_no & 4095) == 0) progress_update(line_no, rep->total.requests);
        if (n > 0 && line[n - 1] == '\n') n--;
        if ((status = sim_parse_line(line, n, line_no, &q)) == 1) continue;
        if (status) break;
        if (last_line > 0 && q.t < last_t && !a->allow_backwards) {
            status = sim_bad_line(line_no,
                                  "time %" PRId64 " is before %" PRId64 " (line %" PRId64
                                  "): times must not decrease (see --allow-backwards)",
                                  q.t, last_t, last_line);
            break;
        }
        if (last_line == 0 || q.t > last_t) last_t = q.t, last_line = line_no;

        sluice_decision d;
        int rc = sim_decide(store, policy, clk, &q, &d);
        if (rc != SLUICE_OK) {
            const char *msg = sluice_store_errmsg(store);
            sim_line_error(line_no);
            fputs("key ", stderr);
            cli_put_quoted(stderr, q.key.b, q.key.n);
            if (q.verb != SIM_REQUEST) fprintf(stderr, " %s", sim_verbs[q.verb]);
            if (q.verb != CLI_VERB_RESET) fprintf(stderr, " cost %" PRId64, q.cost);
            if (rc == SLUICE_ECOST) /* say which limit: the store's message cannot */
                fprintf(stderr, ": %s: cost %" PRId64 " is above %" PRId64 ", the least limit of the policy: %s\n",
                        sluice_err_name(rc), q.cost, sluice_policy_max_cost(policy),
                        q.verb == CLI_VERB_REFUND ? "no request ever takes that much" : "it can never be admitted");
            else
                fprintf(stderr, ": %s: %s\n", sluice_err_name(rc), *msg ? msg : sluice_strerror(rc));
            status = 2;
            break;
        }
        if (!d.enforced && !warned) { /* once: a trace makes many decisions */
            const char *msg = sluice_store_errmsg(store);
            fflush(stdout);
            progress_clear();
            fprintf(stderr, "sluice simulate: warning: line %" PRId64 ": the store could not decide, so the "
                            "%s was %s without being counted: %s (said once; the summary counts them)\n",
                    line_no, q.verb == SIM_REQUEST ? "request" : sim_verbs[q.verb],
                    q.verb == SIM_REQUEST ? (d.allowed ? "admitted" : "denied") : "answered by on_error",
                    *msg ? msg : "no reason given");
            warned = 1;
        }
        if (q.verb != SIM_REQUEST) rep->verbs[q.verb]++;
        else if (cli_report_add(rep, q.t, q.key.b, q.key.n, &d) != 0) {
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
        if (rep.shadow_denied) fprintf(stderr, ", %" PRId64 " shadow denied", rep.shadow_denied);
        if (rep.verbs[CLI_VERB_PEEK] + rep.verbs[CLI_VERB_REFUND] + rep.verbs[CLI_VERB_RESET])
            fprintf(stderr, "; %" PRId64 " peeks, %" PRId64 " refunds, %" PRId64 " resets", rep.verbs[CLI_VERB_PEEK],
                    rep.verbs[CLI_VERB_REFUND], rep.verbs[CLI_VERB_RESET]);
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

