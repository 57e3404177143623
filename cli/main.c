/* main.c: the sluice command-line tool's entry: the table of commands
 * (name, one-line summary, function), which main() looks the first
 * argument up in, and the two that are only words: help and version.
 * Adding a command is a file with its function, a line in cli.h and a row
 * in the table.
 *
 * demo, simulate and version need no files and no environment. check,
 * peek, refund, reset, run, pipe and stats share limits between processes
 * through a store (session.c).
 * SIGPIPE is ignored: a closed stdout is a write error, reported with each
 * command's status. */
#define _POSIX_C_SOURCE 200809L /* sigaction */
#include "cli.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static int cmd_version(int argc, char **argv);
static int cmd_help(int argc, char **argv);

static const struct {
    const char *name;
    const char *summary;
    int (*run)(int argc, char **argv);
} commands[] = {
    {"demo", "show each algorithm at work on a manual clock (the same every run)", cli_cmd_demo},
    {"simulate", "replay a request trace (stdin) against a policy; see simulate --help", cli_cmd_simulate},
    {"check", "decide one request for KEY in a shared store; exit 0 allowed, 1 denied", cli_cmd_check},
    {"peek", "what check would decide, consuming nothing; exit 0 allowed, 1 denied", cli_cmd_peek},
    {"refund", "give a cost back to KEY's limit in the shared store", cli_cmd_refund},
    {"reset", "make KEY's limit in the shared store fresh", cli_cmd_reset},
    {"run", "acquire for KEY (waiting with --wait), then run a command", cli_cmd_run},
    {"pipe", "copy standard input to standard output at a policy's rate", cli_cmd_pipe},
    {"stats", "print a store's keys, capacity and counters", cli_cmd_stats},
    {"version", "print the version (also --version, -V)", cmd_version},
    {"help", "show this help (also --help, -h)", cmd_help},
};
#define N_COMMANDS (sizeof commands / sizeof commands[0])

/* SIGPIPE is ignored (main), so that a closed standard output is a write
 * error each command reports with its documented status, not a death by
 * signal (status 141); run gives the command it starts the disposition
 * sluice was started with. */
static struct sigaction sigpipe_inherited;

void cli_restore_sigpipe(void) {
    sigaction(SIGPIPE, &sigpipe_inherited, NULL);
}

int cli_finish_stdout(const char *cmd) {
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "sluice %s: writing standard output: %s\n", cmd, strerror(errno));
        return 1;
    }
    return 0;
}

static void usage(FILE *out) {
    fprintf(out, "usage: sluice <command> [arguments]\n\n"
                 "sluice: exact rate limiting (library %s)\n\ncommands:\n",
            sluice_version());
    for (size_t i = 0; i < N_COMMANDS; i++)
        fprintf(out, "  %-9s %s\n", commands[i].name, commands[i].summary);
}

static int cmd_help(int argc, char **argv) {
    (void)argc;
    (void)argv;
    usage(stdout);
    return cli_finish_stdout("help");
}

static const cli_command version_command = {
    "version", "usage: sluice version",
    "usage: sluice version\n\nPrints the version of sluice, then the source of its monotonic clock in this\n"
    "process: \"clock: tsc\", \"clock: CLOCK_MONOTONIC_COARSE\" or \"clock: CLOCK_MONOTONIC\"\n"
    "(SLUICE_CLOCK=monotonic in the environment turns the TSC off).\n", 0,
    CLI_TAKES_NOTHING, 0, NULL};

static int cmd_version(int argc, char **argv) {
    cli_args a;
    int rc = cli_parse(&version_command, argc, argv, &a);
    if (rc) return rc < 0 ? 0 : rc;
    printf("sluice %s\nclock: %s\n", sluice_version(), sluice_clock_source());
    return cli_finish_stdout("version");
}

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
