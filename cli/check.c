/* check.c: sluice check, one decision for KEY in a shared store, printed
 * on stdout; the exit status says it (0 allowed, 1 denied). How a decision
 * is printed, for check and its siblings peek, refund and reset (verbs.c). */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>

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
    "before it proceeds. \"shadow_denied=1\" is added when a shadow part of SPEC\n"
    "(\"...; shadow PART\": tried, never enforced) would have denied the request,\n"
    "\"local=1\" when a remote store decided by its local limit (on_error=local),\n"
    "and \"enforced=false\" when a remote store could not decide: on_error=allow\n"
    "(its default) admits without counting, deny denies; a warning on stderr\n"
    "then gives the store's reason (--strict: an error).\n"
    "With --json, one JSON object with every field of the decision instead:\n"
    "  {\"allowed\":true,\"remaining\":1,\"retry_after_ms\":0,\"reset_ms\":60000,\"delay_ms\":0,\n"
    "   \"limit\":2,\"enforced\":true,\"part\":0,\"part_reset_ms\":60000,\"shadow_denied\":false,\n"
    "   \"local\":false}\n"
    "(part: the index of the part with the least remaining, whose limit is limit\n"
    "and whose own reset is part_reset_ms)\n"
    "\n"
    "sluice peek tells the decision without making the request, sluice refund\n"
    "gives a cost back, sluice reset makes KEY's limit fresh.\n"
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
    check_help,
    CLI_OPT_POLICY | CLI_OPT_COST | CLI_OPT_JSON | CLI_OPT_NAME | CLI_OPT_STORE | CLI_OPT_KEY | CLI_OPT_STRICT |
        CLI_OPT_MANUAL_CLOCK,
    CLI_TAKES_KEY, 0, NULL};

void cli_print_decision(const sluice_decision *d, const sluice_policy *p, int json) {
    if (json) {
        printf("{\"allowed\":%s,\"remaining\":%" PRId64 ",\"retry_after_ms\":%" PRId64 ",\"reset_ms\":%" PRId64
               ",\"delay_ms\":%" PRId64 ",\"limit\":%" PRId64 ",\"enforced\":%s,\"part\":%d,\"part_reset_ms\":%" PRId64
               ",\"shadow_denied\":%s,\"local\":%s}\n",
               d->allowed ? "true" : "false", d->remaining, d->retry_after_ms, d->reset_ms, d->delay_ms, d->limit,
               d->enforced ? "true" : "false", (int)d->part, d->part_reset_ms, d->shadow_denied ? "true" : "false",
               d->local ? "true" : "false");
        return;
    }
    if (d->allowed)
        printf("allowed remaining=%" PRId64 " reset_ms=%" PRId64, d->remaining, d->reset_ms);
    else
        printf("denied retry_after_ms=%" PRId64 " remaining=%" PRId64 " reset_ms=%" PRId64, d->retry_after_ms,
               d->remaining, d->reset_ms);
    if (d->allowed && sluice_policy_delays(p)) printf(" delay_ms=%" PRId64, d->delay_ms);
    if (d->shadow_denied) printf(" shadow_denied=1");
    if (d->local) printf(" local=1");
    if (!d->enforced) printf(" enforced=false");
    putchar('\n');
}

int cli_cmd_check(int argc, char **argv) {
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
    cli_print_decision(&d, s.policy, a.json);
    cli_close(&s);
    if (cli_finish_stdout("check")) return 2;
    return d.allowed ? 0 : 1;
}
