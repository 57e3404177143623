/* run.c: sluice run, one request for KEY in a shared store (waiting for
 * it with --wait), then COMMAND in sluice's place (exec): what shells do
 * to find it is done first, so that a command that cannot run counts
 * nothing. */
#define _POSIX_C_SOURCE 200809L /* stat, access, execvp */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

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
    CLI_OPT_POLICY | CLI_OPT_COST | CLI_OPT_NAME | CLI_OPT_STORE | CLI_OPT_WAIT | CLI_OPT_KEY | CLI_OPT_STRICT |
        CLI_OPT_MANUAL_CLOCK | CLI_OPT_TRACE_FILE,
    CLI_TAKES_KEY, 1, NULL};

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

int cli_cmd_run(int argc, char **argv) {
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
        cli_put_quoted(stderr, a.key, a.key_len);
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
    cli_restore_sigpipe();
    execvp(a.command[0], a.command);
    int e = errno;
    fprintf(stderr, "sluice run: %s: %s\n", a.command[0], strerror(e));
    return e == ENOENT || e == ENOTDIR ? 127 : 126;
}
