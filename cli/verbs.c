/* verbs.c: sluice peek, refund and reset, check's siblings: on the same
 * store, policy and KEY as check, what a request would get (nothing
 * consumed), a cost given back, the limit made fresh. Each prints a
 * decision as check does (check.c): the request's for peek, that of a
 * request of cost 1 right after for refund and reset. */
#include "cli.h"

#include <stdio.h>

/* The options of every one; what differs is --cost (and --strict). */
#define VERB_OPTIONS (CLI_OPT_POLICY | CLI_OPT_JSON | CLI_OPT_NAME | CLI_OPT_STORE | CLI_OPT_KEY | CLI_OPT_MANUAL_CLOCK)

#define VERB_KEY_HELP                                                                         \
    "  KEY, --key KEY   what is limited, as for sluice check (1..512 bytes; use\n"          \
    "                   --key for a KEY that begins with '-')\n"
#define VERB_OUTPUT_HELP                                                                      \
    "output: one line, as sluice check prints it (see sluice check --help)\n"               \
    "  allowed remaining=R reset_ms=Y\n"                                                     \
    "  denied retry_after_ms=X remaining=R reset_ms=Y\n"
#define VERB_OUTPUT_TAIL_HELP                                                                 \
    "with delay_ms=Z (a leaky-bucket part) and shadow_denied=1 (a shadow part\n"            \
    "would deny) as check adds them; with --json, check's JSON object.\n"

static const char peek_help[] =
    "usage: sluice peek KEY --policy SPEC [--cost N] [--json] [--name NAME] [--store URL]\n"
    "                   [--strict]\n"
    "\n"
    "Tells the decision a request of cost N for KEY would get now under the limit\n"
    "SPEC, in the store sluice check uses, without making the request: nothing is\n"
    "consumed or changed (a KEY the store does not hold is answered as a fresh\n"
    "one, and not added).\n"
    "\n" VERB_OUTPUT_HELP
    "with delay_ms=Z (a leaky-bucket part), shadow_denied=1 (a shadow part would\n"
    "deny) and enforced=false (a remote store could not decide) as check adds\n"
    "them; with --json, check's JSON object.\n"
    "\n"
    "options:\n" VERB_KEY_HELP CLI_POLICY_HELP
    "  --cost N         the cost of the request asked about (default 1); above the\n"
    "                   least limit of SPEC: an error\n"
    "  --json           print one JSON object\n" CLI_NAME_HELP CLI_STORE_HELP CLI_STRICT_HELP
    "  -h, --help       this help\n"
    "\n"
    "exit status: 0 the request would be admitted, 1 it would be denied, 2 error:\n"
    "a bad argument, SPEC, cost or store URL, a store failure (with --strict also\n"
    "an answer the store could not give), or writing the decision failed.\n"
    "\n"
    "example:\n"
    "  $ sluice check backup --policy 'token-bucket capacity=2 rate=1/h'\n"
    "  allowed remaining=1 reset_ms=3600000\n"
    "  $ sluice peek backup --policy 'token-bucket capacity=2 rate=1/h' --cost 2\n"
    "  denied retry_after_ms=3600000 remaining=1 reset_ms=3600000\n";

static const char refund_help[] =
    "usage: sluice refund KEY --policy SPEC --cost N [--json] [--name NAME] [--store URL]\n"
    "\n"
    "Gives N back to KEY's limit SPEC, in the store sluice check uses (a request\n"
    "of cost N admitted but not used, say): every part of SPEC takes back N as far\n"
    "as it still counts, never beyond a fresh state. A refund right after an\n"
    "admission undoes it exactly; a KEY the store does not hold is left as it is.\n"
    "Then prints the decision a request of cost 1 would get.\n"
    "\n" VERB_OUTPUT_HELP VERB_OUTPUT_TAIL_HELP
    "\n"
    "options:\n" VERB_KEY_HELP CLI_POLICY_HELP
    "  --cost N         what to give back (required); above the least limit of\n"
    "                   SPEC: an error\n"
    "  --json           print one JSON object\n" CLI_NAME_HELP CLI_STORE_HELP
    "  -h, --help       this help\n"
    "\n"
    "exit status: 0 given back, 2 error: a bad argument, SPEC, cost or store URL,\n"
    "a missing --cost (nothing is changed), a store failure or a refund a remote\n"
    "store could not make (the store is opened with on_error=error unless the URL\n"
    "says otherwise), or writing the decision failed (the refund is then made).\n"
    "\n"
    "example:\n"
    "  $ sluice check upload --policy 'fixed-window limit=5 window=1h' --cost 5\n"
    "  allowed remaining=0 reset_ms=1754000\n"
    "  $ sluice refund upload --policy 'fixed-window limit=5 window=1h' --cost 2\n"
    "  allowed remaining=1 reset_ms=1754000\n";

static const char reset_help[] =
    "usage: sluice reset KEY --policy SPEC [--json] [--name NAME] [--store URL]\n"
    "\n"
    "Makes KEY's limit SPEC fresh, in the store sluice check uses: every part is\n"
    "back to its fresh state (the store forgets KEY's state under NAME; other\n"
    "keys and NAMEs are untouched). Then prints the decision a request of cost 1\n"
    "would get.\n"
    "\n" VERB_OUTPUT_HELP VERB_OUTPUT_TAIL_HELP
    "\n"
    "options:\n" VERB_KEY_HELP CLI_POLICY_HELP
    "  --json           print one JSON object\n" CLI_NAME_HELP CLI_STORE_HELP
    "  -h, --help       this help\n"
    "\n"
    "exit status: 0 made fresh, 2 error: a bad argument, SPEC or store URL\n"
    "(nothing is changed), a store failure or a reset a remote store could not\n"
    "make (the store is opened with on_error=error unless the URL says\n"
    "otherwise), or writing the decision failed (the reset is then made).\n"
    "\n"
    "example:\n"
    "  $ sluice check login:alice --policy 'fixed-window limit=3 window=15m' || echo locked\n"
    "  denied retry_after_ms=512000 remaining=0 reset_ms=512000\n"
    "  locked\n"
    "  $ sluice reset login:alice --policy 'fixed-window limit=3 window=15m'\n"
    "  allowed remaining=2 reset_ms=512000\n";

static const cli_command peek_command = {
    "peek", "usage: sluice peek KEY --policy SPEC [--cost N] [--json] [--name NAME] [--store URL] [--strict]",
    peek_help, VERB_OPTIONS | CLI_OPT_COST | CLI_OPT_STRICT, CLI_TAKES_KEY, 0, NULL};
static const cli_command refund_command = {
    "refund", "usage: sluice refund KEY --policy SPEC --cost N [--json] [--name NAME] [--store URL]", refund_help,
    VERB_OPTIONS | CLI_OPT_COST, CLI_TAKES_KEY, 0, NULL};
static const cli_command reset_command = {
    "reset", "usage: sluice reset KEY --policy SPEC [--json] [--name NAME] [--store URL]", reset_help,
    VERB_OPTIONS, CLI_TAKES_KEY, 0, NULL};

static int run_verb(const cli_command *c, cli_verb v, int argc, char **argv) {
    cli_args a;
    cli_session s;
    sluice_decision d;
    int status = cli_parse(c, argc, argv, &a);
    if (status) return status < 0 ? 0 : status;
    if (v == CLI_VERB_REFUND && !(a.seen & CLI_OPT_COST))
        return cli_usage_error(c, "missing --cost N: how much to give back");
    /* a refund or reset a remote store could not make is an error: the
     * store is opened as with --strict (on_error=error) */
    if (v != CLI_VERB_PEEK) a.strict = 1;
    if ((status = cli_open(&a, &s)) != 0) return status;
    int rc = v == CLI_VERB_PEEK     ? sluice_store_peek(s.store, s.policy, a.key, a.key_len, a.cost, &d)
             : v == CLI_VERB_REFUND ? sluice_store_refund(s.store, s.policy, a.key, a.key_len, a.cost, &d)
                                : sluice_store_reset(s.store, s.policy, a.key, a.key_len, &d);
    if (rc != SLUICE_OK) {
        cli_decision_error(&a, &s, rc);
        cli_close(&s);
        return 2;
    }
    if (!d.enforced) { /* a remote store's answer by on_error, not the key's */
        const char *msg = sluice_store_errmsg(s.store);
        if (!*msg) msg = "no reason given";
        fprintf(stderr, "sluice %s: ", c->name);
        if (a.strict) {
            fputs("key ", stderr);
            cli_put_quoted(stderr, a.key, a.key_len);
            fprintf(stderr, ": the store could not %s%s: %s\n", v == CLI_VERB_PEEK ? "answer" : c->name,
                    v == CLI_VERB_PEEK ? " (--strict)" : " it", msg);
            cli_close(&s);
            return 2;
        }
        fprintf(stderr, "warning: the store could not answer, so the answer is on_error=%s's, not the key's: %s\n",
                d.allowed ? "allow" : "deny", msg);
    }
    cli_print_decision(&d, s.policy, a.json);
    cli_close(&s);
    if (cli_finish_stdout(c->name)) return 2;
    return v == CLI_VERB_PEEK && !d.allowed ? 1 : 0;
}

int cli_cmd_peek(int argc, char **argv) {
    return run_verb(&peek_command, CLI_VERB_PEEK, argc, argv);
}

int cli_cmd_refund(int argc, char **argv) {
    return run_verb(&refund_command, CLI_VERB_REFUND, argc, argv);
}

int cli_cmd_reset(int argc, char **argv) {
    return run_verb(&reset_command, CLI_VERB_RESET, argc, argv);
}
