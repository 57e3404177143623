/* args.c: the one argument parser of the sluice tool. Every option of
 * every command is a row of one table (its name, its bit, whether it takes
 * a value); a command says which bits it accepts and what it takes besides
 * (cli_command, cli.h). Options may come before or after the positional
 * argument, as --opt VALUE or --opt=VALUE; "--" ends them. Every message
 * about the arguments ends with the command's usage line. */
#include "cli.h"

#include <stdarg.h>
#include <string.h>

enum { ARG_NONE, ARG_REQUIRED, ARG_OPTIONAL /* only as --opt=VALUE */ };

static const struct {
    const char *name;
    unsigned flag;
    int arg;
    const char *needs; /* what a missing value is: "option --NAME needs ..." */
    int nonempty;      /* an empty value is missing too */
} options[] = {
    {"--policy", CLI_OPT_POLICY, ARG_REQUIRED, "a value (SPEC)", 0},
    {"--cost", CLI_OPT_COST, ARG_REQUIRED, "a value (N)", 0},
    {"--json", CLI_OPT_JSON, ARG_NONE, NULL, 0},
    {"--name", CLI_OPT_NAME, ARG_REQUIRED, "a value (NAME)", 0},
    {"--store", CLI_OPT_STORE, ARG_REQUIRED, "a URL, e.g. shm:/tmp/limits.shm", 1},
    {"--wait", CLI_OPT_WAIT, ARG_OPTIONAL, NULL, 0},
    {"--unit", CLI_OPT_UNIT, ARG_REQUIRED, "a value (lines|bytes)", 0},
    {"--key", CLI_OPT_KEY, ARG_REQUIRED, "a value (KEY)", 0},
    {"--strict", CLI_OPT_STRICT, ARG_NONE, NULL, 0},
    {"--allow-backwards", CLI_OPT_ALLOW_BACKWARDS, ARG_NONE, NULL, 0},
    {"--summary", CLI_OPT_SUMMARY, ARG_OPTIONAL, NULL, 0}, /* --summary N would be SPEC's: only =N */
    {"--svg", CLI_OPT_SVG, ARG_REQUIRED, "a FILE", 1},
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
     *       the command is started, after any leaky-bucket delay.
     *   --progress-after-ms MS  (simulate) progress shows (on a terminal)
     *       once the run has lasted MS (default 1000; 0: from the first
     *       update), so that a test under a pty sees it without a long
     *       trace. */
    {"--manual-clock", CLI_OPT_MANUAL_CLOCK, ARG_REQUIRED, "a value (START_MS)", 0},
    {"--trace-file", CLI_OPT_TRACE_FILE, ARG_REQUIRED, "a value (PATH)", 0},
    {"--progress-after-ms", CLI_OPT_PROGRESS_AFTER_MS, ARG_REQUIRED, "a number of ms", 0},
};
#define N_OPTIONS (sizeof options / sizeof options[0])

int cli_usage_error(const cli_command *c, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "sluice %s: ", c->name);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n%s\n(see sluice %s --help)\n", c->usage, c->name);
    return 2;
}

int cli_parse_int64(const char *b, size_t n, int signed_ok, int64_t *out) {
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
    int rc = n ? cli_parse_int64(s, n, 0, &v) : 0;
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
static int set_option(cli_args *a, unsigned flag, const char *v) {
    const cli_command *c = a->cmd;
    int64_t n;
    int rc;
    switch (flag) {
    case CLI_OPT_POLICY:
        a->spec = v;
        break;
    case CLI_OPT_COST:
        rc = cli_parse_int64(v, strlen(v), 0, &a->cost);
        if (rc || a->cost < 1)
            return cli_usage_error(c, "--cost '%s' is not a positive integer%s", v, rc == -2 ? " (too large)" : "");
        break;
    case CLI_OPT_JSON:
        a->json = 1;
        break;
    case CLI_OPT_NAME:
        a->name = v;
        break;
    case CLI_OPT_STORE:
        a->store_url = v;
        break;
    case CLI_OPT_WAIT:
        a->wait = 1;
        a->wait_text = v;
        a->wait_ms = INT64_MAX; /* no limit: sluice_store_acquire_wait caps the deadline */
        if (v && (rc = parse_duration_ms(v, &a->wait_ms)) != 0)
            return cli_usage_error(c, "--wait=%s: %s", v,
                                   rc == -2 ? "too large"
                                            : "expected a duration such as 500ms, 2s, 1m, 1h, 1d, or a number of ms");
        break;
    case CLI_OPT_UNIT:
        if (strcmp(v, "lines") == 0) a->unit_bytes = 0;
        else if (strcmp(v, "bytes") == 0) a->unit_bytes = 1;
        else return cli_usage_error(c, "--unit '%s': expected lines or bytes", v);
        break;
    case CLI_OPT_KEY:
        a->key = v;
        break;
    case CLI_OPT_STRICT:
        a->strict = 1;
        break;
    case CLI_OPT_ALLOW_BACKWARDS:
        a->allow_backwards = 1;
        break;
    case CLI_OPT_SUMMARY:
        a->summary = 1;
        if (!v) break;
        if (strcmp(v, "all") == 0) a->summary_top = 0;
        else if (cli_parse_int64(v, strlen(v), 0, &n) == 0 && n >= 1) a->summary_top = (size_t)n;
        else return cli_usage_error(c, "--summary=%s: expected a number of keys (1 or more) or all", v);
        break;
    case CLI_OPT_SVG:
        a->svg_path = v;
        break;
    case CLI_OPT_MANUAL_CLOCK:
        rc = cli_parse_int64(v, strlen(v), 1, &a->manual_start_ms);
        if (rc || a->manual_start_ms < SLUICE_TIME_MIN_MS || a->manual_start_ms > SLUICE_TIME_MAX_MS)
            return cli_usage_error(c, "--manual-clock '%s' is not a time in ms", v);
        break;
    case CLI_OPT_TRACE_FILE:
        a->trace_path = v;
        break;
    case CLI_OPT_PROGRESS_AFTER_MS:
        if (cli_parse_int64(v, strlen(v), 0, &a->progress_after_ms) != 0)
            return cli_usage_error(c, "--progress-after-ms needs a number of ms");
        break;
    }
    return 0;
}

/* argv[*i], an option: looked up and applied (its value may be the next
 * argument: *i moves on). 0 or 2. */
static int option(const cli_command *c, int argc, char **argv, int *i, int key_positional, cli_args *a) {
    const char *s = argv[*i], *eq = strchr(s, '=');
    size_t n = eq ? (size_t)(eq - s) : strlen(s), k;
    for (k = 0; k < N_OPTIONS; k++)
        if ((c->options & options[k].flag) && strlen(options[k].name) == n && strncmp(options[k].name, s, n) == 0)
            break;
    if (k == N_OPTIONS) return cli_usage_error(c, "unknown option '%.*s'", (int)n, s);
    const char *v = eq ? eq + 1 : NULL;
    if (options[k].arg == ARG_NONE && v) return cli_usage_error(c, "option %s takes no value", options[k].name);
    if (options[k].arg == ARG_REQUIRED && !v && *i + 1 < argc) v = argv[++*i];
    if (options[k].arg == ARG_REQUIRED && (!v || (options[k].nonempty && !*v)))
        return cli_usage_error(c, "option %s needs %s", options[k].name, options[k].needs);
    if (a->seen & options[k].flag) return cli_usage_error(c, "option %s is given twice", options[k].name);
    if (options[k].flag == CLI_OPT_KEY && key_positional)
        return cli_usage_error(c, "KEY is given twice ('%s' and --key)", a->key);
    if (options[k].flag == CLI_OPT_POLICY && c->takes == CLI_TAKES_SPEC && a->spec)
        return cli_usage_error(c, "SPEC is given twice (as an argument and --policy)");
    a->seen |= options[k].flag;
    return set_option(a, options[k].flag, v);
}

/* argv[i], not an option. 0 or 2. */
static int positional(const cli_command *c, char **argv, int i, int *key_positional, cli_args *a) {
    const char *s = argv[i];
    int after_wait = i > 1 && strcmp(argv[i - 1], "--wait") == 0;
    int64_t ms;
    if (c->takes == CLI_TAKES_KEY && !a->key) {
        if (after_wait && parse_duration_ms(s, &ms) == 0)
            return cli_usage_error(c, "'%s' after --wait: a timeout is written --wait=%s (a KEY "
                                      "that looks like a duration: give it first, or as --key)", s, s);
        a->key = s;
        *key_positional = 1;
    } else if (c->takes == CLI_TAKES_KEY && (a->seen & CLI_OPT_KEY)) {
        return cli_usage_error(c, "KEY is given twice (--key '%s' and '%s')", a->key, s);
    } else if (c->takes == CLI_TAKES_SPEC && !a->spec) {
        a->spec = s;
    } else if (c->takes_command) {
        return cli_usage_error(c, "unexpected argument '%s'%s", s,
                               after_wait ? ": a timeout is written --wait=TIMEOUT, e.g. --wait=2s"
                                          : ": the command comes after '--'");
    } else {
        return cli_usage_error(c, "unexpected argument '%s'%s", s,
                               c->takes == CLI_TAKES_KEY    ? " (one KEY only; quote SPEC as one argument)"
                               : c->takes == CLI_TAKES_SPEC ? " (quote SPEC as one argument)"
                                                            : "");
    }
    return 0;
}

int cli_parse(const cli_command *c, int argc, char **argv, cli_args *a) {
    int options_end = 0, key_positional = 0, rc;
    memset(a, 0, sizeof *a);
    a->cmd = c;
    a->name = CLI_POLICY_NAME;
    a->cost = 1;
    a->summary_top = CLI_SUMMARY_TOP;
    a->progress_after_ms = 1000;
    for (int i = 1; i < argc; i++) {
        char *s = argv[i];
        if (!options_end && strcmp(s, "--") == 0) {
            if (c->takes_command) {
                a->command = argv + i + 1;
                break;
            }
            options_end = 1;
        } else if (!options_end && (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0)) {
            fputs(c->help, stdout);
            return -1;
        } else if (!options_end && s[0] == '-' && s[1] != 0) {
            if ((rc = option(c, argc, argv, &i, key_positional, a)) != 0) return rc;
        } else if ((rc = positional(c, argv, i, &key_positional, a)) != 0) {
            return rc;
        }
    }
    if (c->takes == CLI_TAKES_SPEC && !a->spec)
        return cli_usage_error(c, "missing SPEC, e.g. 'token-bucket capacity=2 rate=1/s'");
    if ((c->options & CLI_OPT_POLICY) && !a->spec)
        return cli_usage_error(c, "missing --policy SPEC, e.g. --policy 'fixed-window limit=10 window=1m'");
    if (c->takes == CLI_TAKES_KEY && !a->key) return cli_usage_error(c, "missing KEY");
    if (!a->key) a->key = c->default_key;
    if (a->key) {
        a->key_len = strlen(a->key);
        if (a->key_len < 1 || a->key_len > SLUICE_KEY_MAX)
            return cli_usage_error(c, "KEY is %zu bytes long: keys are 1..%d bytes", a->key_len, SLUICE_KEY_MAX);
    }
    if (c->takes_command && (!a->command || !a->command[0])) return cli_usage_error(c, "missing COMMAND after '--'");
    return 0;
}
