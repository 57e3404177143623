/* cli.h: what the files of the sluice tool share. A program, not the
 * library: these names are the tool's own (cli_), and nothing here is
 * installed.
 *
 *   main.c      the command table, dispatch, help, version, SIGPIPE
 *   args.c      the one argument parser every command uses
 *   session.c   what check, run, pipe and stats open (the policy, the store,
 *               the default store's path, a trace file) and what they say
 *               about a store
 *   check.c  run.c  pipe.c  stats.c  simulate.c  demo.c   a command each
 *               (check.c also prints a decision for peek, refund, reset)
 *   verbs.c     peek, refund and reset: check's siblings on one key
 *   report.c    simulate's accounting of a run: counts per key and per part,
 *               the summary (--summary), the decisions kept for the picture;
 *               and bytes written as strings (JSON, messages)
 *   svg.c       simulate's picture of a run (--svg)
 *
 * A command gets argv starting at its own name and returns the process
 * exit status: 0 success, 1 failure (or a denial), 2 usage error.
 */
#ifndef SLUICE_CLI_H
#define SLUICE_CLI_H

#include <sluice.h>

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* ---- the commands: check.c, verbs.c, run.c, pipe.c, stats.c, simulate.c, demo.c ---- */

int cli_cmd_check(int argc, char **argv);
int cli_cmd_peek(int argc, char **argv);
int cli_cmd_refund(int argc, char **argv);
int cli_cmd_reset(int argc, char **argv);
int cli_cmd_run(int argc, char **argv);
int cli_cmd_pipe(int argc, char **argv);
int cli_cmd_stats(int argc, char **argv);
int cli_cmd_simulate(int argc, char **argv);
int cli_cmd_demo(int argc, char **argv);

/* What may be done to a key besides a request: sluice peek, refund and
 * reset (verbs.c), and simulate's trace lines of those words. */
typedef enum { CLI_VERB_PEEK, CLI_VERB_REFUND, CLI_VERB_RESET, CLI_N_VERBS } cli_verb;

/* A decision on stdout as check prints it: one line ("allowed ..." or
 * "denied ...", delay_ms= when the policy delays, shadow_denied=1 when a
 * shadow part would have denied, enforced=false), or with json one JSON
 * object with every field (shadow_denied always). */
void cli_print_decision(const sluice_decision *d, const sluice_policy *p, int json);

/* ---- "main.c" ---- */

/* Flushes stdout; 0, or 1 with a message ("sluice CMD: writing standard
 * output: ...") when writing failed. */
int cli_finish_stdout(const char *cmd);
/* Gives SIGPIPE back the disposition sluice was started with (main ignores
 * it), for a command run exec's. */
void cli_restore_sigpipe(void);

/* ---- "args.c" ---- */

/* The options, as bits: what a command accepts and what was given. */
enum {
    CLI_OPT_POLICY = 1u << 0,
    CLI_OPT_COST = 1u << 1,
    CLI_OPT_JSON = 1u << 2,
    CLI_OPT_NAME = 1u << 3,
    CLI_OPT_STORE = 1u << 4,
    CLI_OPT_WAIT = 1u << 5,
    CLI_OPT_UNIT = 1u << 6,
    CLI_OPT_KEY = 1u << 7,
    CLI_OPT_STRICT = 1u << 8,
    CLI_OPT_ALLOW_BACKWARDS = 1u << 9,
    CLI_OPT_SUMMARY = 1u << 10,
    CLI_OPT_SVG = 1u << 11,
    CLI_OPT_MANUAL_CLOCK = 1u << 12,      /* test-only (args.c) */
    CLI_OPT_TRACE_FILE = 1u << 13,        /* test-only */
    CLI_OPT_PROGRESS_AFTER_MS = 1u << 14, /* test-only */
};

/* What a command takes besides its options. */
typedef enum {
    CLI_TAKES_NOTHING,
    CLI_TAKES_KEY,  /* one KEY (or --key KEY), required */
    CLI_TAKES_SPEC, /* one SPEC (or --policy SPEC), required */
} cli_positional;

#define CLI_POLICY_NAME "cli"  /* --name unless given */
#define CLI_SUMMARY_TOP 10     /* keys in simulate's summary unless --summary=N */

/* What one command accepts. */
typedef struct {
    const char *name;        /* "check" */
    const char *usage;       /* "usage: sluice check ...", said after a usage error */
    const char *help;        /* --help */
    unsigned options;        /* CLI_OPT_* accepted */
    cli_positional takes;    /* its positional argument */
    int takes_command;       /* "-- COMMAND [ARGS...]" ends the arguments (run) */
    const char *default_key; /* when KEY is not given (pipe's "pipe"), or NULL */
} cli_command;

/* What was given (or the defaults). */
typedef struct {
    const cli_command *cmd;
    const char *key, *spec, *name, *store_url, *trace_path, *wait_text, *svg_path;
    size_t key_len;
    int64_t cost, wait_ms, manual_start_ms, progress_after_ms;
    size_t summary_top; /* 0: every key */
    int json, wait, unit_bytes, strict, allow_backwards, summary;
    unsigned seen; /* CLI_OPT_* given */
    char **command;
} cli_args;

/* Parses argv (argv[0] is the command's name) as c says into *a. Options
 * may come before or after the positional argument, as --opt VALUE or
 * --opt=VALUE; "--" ends them (for run: what follows is the command).
 * Returns -1 when --help was printed, else an exit status (0: go on; 2
 * with a message and the usage line). */
int cli_parse(const cli_command *c, int argc, char **argv, cli_args *a);
/* "sluice CMD: MESSAGE", then c's usage line, on stderr; returns 2. For
 * what a command finds wrong with its arguments after cli_parse. */
int cli_usage_error(const cli_command *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* b[0..n) as a decimal integer, with an optional '-' when signed_ok.
 * 0: *out set; -1: not an integer; -2: beyond int64_t. */
int cli_parse_int64(const char *b, size_t n, int signed_ok, int64_t *out);

/* ---- "session.c" ---- */

#define CLI_URL_MAX 4096

/* What check, run, pipe and stats hold open while they work. */
typedef struct {
    sluice_policy *policy;
    sluice_clock *manual; /* --manual-clock, else NULL */
    const sluice_clock *clock;
    sluice_store *store;
    const char *url;
    char url_buf[CLI_URL_MAX];
    FILE *trace; /* --trace-file (run, pipe: tests), else NULL */
} cli_session;

/* Each: 0, or the exit status (2) with a message. The session starts
 * zeroed; cli_close closes what was opened. */
int cli_open_trace(const cli_args *a, cli_session *s);  /* --trace-file */
int cli_open_policy(const cli_args *a, cli_session *s); /* --name, --policy; --cost against it */
/* The store (--store, else the default one) and --manual-clock's clock.
 * With existing_only, a store file that is not there (or was never set
 * up) is an error, not made (stats: a command that only reads). */
int cli_open_store(const cli_args *a, cli_session *s, int existing_only);
/* All three, in that order; the session closed on failure. */
int cli_open(const cli_args *a, cli_session *s);
void cli_close(cli_session *s);

/* A store that could not be opened, on stderr: "sluice CMD: MSG TAIL",
 * msg being the library's message, which names the store (else this names
 * url), or rc's name. */
void cli_store_error(const char *cmd, const char *url, const char *msg, int rc, const char *tail);
/* A decision the store could not make (enforced false), on stderr: what
 * was done without counting, the store's reason, then tail; with --strict
 * the error it is then. */
void cli_not_enforced(const cli_args *a, const cli_session *s, const sluice_decision *d, const char *tail);
/* A failed decision (not a denial), on stderr. */
void cli_decision_error(const cli_args *a, const cli_session *s, int rc);
/* "WHAT: err" on stderr, then spec with a caret under the position the
 * parse error err begins with ("at N: ..."). */
void cli_print_bad_spec(const char *what, const char *spec, const char *err);

/* The help of the options check, run, pipe and stats share. */
#define CLI_POLICY_HELP                                                                      \
    "  --policy SPEC    the limit (required), e.g. 'fixed-window limit=10 window=1m',\n"     \
    "                   'token-bucket capacity=5 rate=1/s', 'gcra rate=100/s burst=20',\n"  \
    "                   'leaky-bucket capacity=5 rate=10/s', 'sliding-window limit=10\n"     \
    "                   window=1s', 'sliding-log limit=4 window=1m', or several\n"           \
    "                   joined by ';' that must all admit; 'shadow' before a part\n"         \
    "                   tries it without enforcing it (see man sluice)\n"
#define CLI_NAME_HELP                                                                        \
    "  --name NAME      the policy's name (default \"cli\"): 1..64 letters, digits and\n"   \
    "                   \"-_.:\". A store knows a limit by its NAME: every invocation\n"    \
    "                   with the same NAME and KEY shares one limit; another NAME\n"         \
    "                   keeps a separate one, another SPEC retunes it (each KEY\n"           \
    "                   keeps what it has in use)\n"
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

/* ---- "report.c" ---- */

/* Counts of decisions. */
typedef struct {
    int64_t requests, allowed, denied;
} cli_counts;

/* One key of a trace. */
typedef struct {
    char *key; /* its bytes, as in the trace (not NUL-terminated) */
    size_t key_len;
    cli_counts n;
    int64_t limit; /* the greatest limit its decisions named */
} cli_key;

/* One decision kept for the picture (16 bytes: 1M requests take 16 MB). */
typedef struct {
    int64_t t_ms;
    uint32_t key;       /* index in keys[] */
    uint32_t remaining; /* <= SLUICE_LIMIT_MAX < 2^31; bit 31: allowed */
} cli_event;
#define CLI_EVENT_ALLOWED 0x80000000u

/* A run's accounting. Not thread-safe (simulate is one thread). */
typedef struct {
    const sluice_policy *policy;
    cli_counts total;
    cli_counts parts[SLUICE_POLICY_MAX_PARTS]; /* by the part a decision named */
    int64_t not_enforced;
    int64_t shadow_denied;      /* requests a shadow part would have denied */
    int64_t verbs[CLI_N_VERBS]; /* trace lines of peek, refund, reset: not requests */
    cli_key *keys; /* in the order they first appear */
    size_t n_keys, keys_cap;
    uint32_t *slots; /* open addressing: index in keys[] + 1; 0 is empty */
    size_t n_slots;  /* a power of two, at least twice n_keys */
    cli_event *events; /* every decision, when kept */
    size_t n_events, events_cap;
    int keep_events;
    int64_t t_min_ms, t_max_ms; /* of the decisions counted */
} cli_report;

/* An empty report for policy p (which must outlive it); keep_events keeps
 * every decision for cli_svg_write. */
void cli_report_init(cli_report *r, const sluice_policy *p, int keep_events);
/* Counts one request's decision for key[0..key_len) at t_ms (a verb line
 * is counted in verbs[] alone). 0, or -1 out of memory. */
int cli_report_add(cli_report *r, int64_t t_ms, const char *key, size_t key_len, const sluice_decision *d);
/* The indices of the keys, the most denied first (then the most requests,
 * then the first seen) when by_denied, else the most requests first (then
 * the first seen). malloc'd (the caller frees it), NULL when out of memory
 * or there are no keys. */
size_t *cli_report_rank(const cli_report *r, int by_denied);
/* Writes the summary: totals, each part, and the top keys most denied
 * (every key when top is 0), as "name=value" lines or one JSON object.
 * 0, or -1 out of memory. */
int cli_report_summary(const cli_report *r, FILE *f, int json, size_t top);
void cli_report_free(cli_report *r);

/* The length of the valid UTF-8 sequence at s[0..n) (1..4), or 0. */
int cli_utf8_len(const unsigned char *s, size_t n);
/* b[0..n) as a JSON string: valid UTF-8 as it is, '"', '\\' and control
 * bytes escaped, and a byte that is not UTF-8 as \u00XX (the JSON stays
 * valid; such a byte and the character U+00XX then look alike). */
void cli_put_json_bytes(FILE *f, const char *b, size_t n);
/* b[0..n) as a quoted C-like string, for messages: printable ASCII as it
 * is, other bytes as \xNN; a long one cut (a message stays one line). */
void cli_put_quoted(FILE *f, const char *b, size_t n);

/* ---- "svg.c" ---- */

/* Writes the picture of the run in r (kept with keep_events) as a
 * self-contained SVG document: one panel for each of the max_panels keys
 * with the most requests. spec: the policy's text, for the title. 0, or -1
 * out of memory (nothing sensible was written). */
int cli_svg_write(const cli_report *r, FILE *f, const char *spec, size_t max_panels);

#endif /* SLUICE_CLI_H */
