/* stats.c: sluice stats, a store's figures (keys held, capacity, its
 * decision counters) as "name: value" lines or one JSON object. It only
 * reads: it makes no store. */
#include "cli.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

static const char stats_help[] =
    "usage: sluice stats [--store URL] [--json]\n"
    "\n"
    "Prints the store it reads (a shm: file that is not there, or was never set\n"
    "up, is an error: stats makes no store), then its figures, one \"name: value\"\n"
    "per line:\n"
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
                                          CLI_OPT_STORE | CLI_OPT_JSON, CLI_TAKES_NOTHING, 0, NULL};

int cli_cmd_stats(int argc, char **argv) {
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
    if (rc != SLUICE_OK) { /* a remote store whose server cannot be reached (SLUICE_ESTORE) */
        const char *msg = sluice_store_errmsg(s.store);
        /* what the store says of a call names no store: this does */
        fprintf(stderr, "sluice stats: store %s: %s\n", s.url, *msg ? msg : sluice_strerror(rc));
        cli_close(&s);
        return 2;
    }
    const struct {
        const char *name;
        int64_t value;
    } rows[] = {{"keys", st.keys},           {"capacity", st.capacity}, {"allowed", st.allowed},
                {"denied", st.denied},       {"forgotten", st.forgotten}, {"evicted", st.evicted},
                {"refused", st.refused},     {"failures", st.failures}, {"reconnects", st.reconnects},
                {"shadow_denied", st.shadow_denied}};
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
    return cli_finish_stdout("stats");
}
