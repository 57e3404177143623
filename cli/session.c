/* session.c: what check, run, pipe and stats open before they decide, and
 * what they say about it: the policy (--name, --policy, checked against
 * --cost), a trace file (tests), the store (--store URL, else the default
 * one: a per-user shared-memory file whose path is found here, since the
 * library never reads the environment), and the messages about a store
 * that cannot be opened or could not decide.
 *
 * These commands decide in a store that outlives each invocation. The
 * store knows a policy by its name and configuration, so every invocation
 * that parses the same SPEC under the same name (CLI_POLICY_NAME unless
 * --name) shares the same per-key states. Arguments are all checked (SPEC,
 * name, cost, key, command) before the store is opened: a bad argument
 * exits 2 and changes nothing. */
#define _POSIX_C_SOURCE 200809L /* lstat, geteuid */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* ---- the default store ---- */
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

/* ---- what is said about a store ---- */

/* The library names the store first in what it says of one it could not
 * open ("shm:/x.shm: ...", "redis://h:6379: ..."), but for a URL in which
 * it found no store (malformed, of a scheme it does not know, or of a kind
 * whose library cannot be loaded): those messages begin "store URL", and
 * the URL is named here. */
void cli_store_error(const char *cmd, const char *url, const char *msg, int rc, const char *tail) {
    if (*msg && strncmp(msg, "store URL", 9) != 0) fprintf(stderr, "sluice %s: %s%s\n", cmd, msg, tail);
    else fprintf(stderr, "sluice %s: store %s: %s%s\n", cmd, url, *msg ? msg : sluice_strerror(rc), tail);
}

void cli_print_bad_spec(const char *what, const char *spec, const char *err) {
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

/* ---- opening ---- */

#define NO_SUCH_FILE "no such file" /* the end of must_exist's message */

/* Opens --trace-file, when given, as s->trace. 0 or 2. */
int cli_open_trace(const cli_args *a, cli_session *s) {
    if (a->trace_path && !(s->trace = fopen(a->trace_path, "w"))) {
        fprintf(stderr, "sluice %s: --trace-file %s: %s\n", a->cmd->name, a->trace_path, strerror(errno));
        return 2;
    }
    return 0;
}

/* Parses --name and --policy, and checks --cost against the policy. 0 or 2. */
int cli_open_policy(const cli_args *a, cli_session *s) {
    char err[256], what[64];
    /* the name alone first, so that a bad name is not reported as a bad SPEC */
    if (sluice_policy_name_check(a->name, err, sizeof err) != SLUICE_OK) {
        fprintf(stderr, "sluice %s: bad --name '%s': %s\n", a->cmd->name, a->name, err);
        return 2;
    }
    if (sluice_policy_parse(a->name, a->spec, &s->policy, err, sizeof err) != SLUICE_OK) {
        snprintf(what, sizeof what, "sluice %s: bad --policy SPEC", a->cmd->name);
        cli_print_bad_spec(what, a->spec, err);
        return 2;
    }
    if (a->cost > sluice_policy_max_cost(s->policy)) {
        int refund = strcmp(a->cmd->name, "refund") == 0;
        fprintf(stderr, "sluice %s: --cost %" PRId64 " is above %" PRId64 ", the least limit of the policy: %s\n",
                a->cmd->name, a->cost, sluice_policy_max_cost(s->policy),
                refund ? "no request ever takes that much" : "it can never be admitted");
        return 2;
    }
    return 0;
}

/* With existing_only, a store file that is not there is an error, not
 * made (a command that only reads: a typo in a path would show an empty
 * store, and leave a file behind). */
int cli_open_store(const cli_args *a, cli_session *s, int existing_only) {
    char err[512];
    sluice_store_options opts = SLUICE_STORE_OPTIONS_INIT;
    if (a->store_url) s->url = a->store_url;
    else if (default_store_url(a->cmd->name, s->url_buf, sizeof s->url_buf, existing_only) != 0) return 2;
    else s->url = s->url_buf;
    opts.must_exist = existing_only != 0;
    if (a->seen & CLI_OPT_MANUAL_CLOCK) {
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
        /* must_exist's "no such file" (sluice.h): say which commands make one */
        size_t n = strlen(err), k = strlen(NO_SUCH_FILE);
        int missing = existing_only && rc == SLUICE_EINVAL && n >= k && strcmp(err + n - k, NO_SUCH_FILE) == 0;
        cli_store_error(a->cmd->name, s->url, err, rc, missing ? " (check, run and pipe create it)" : "");
        return 2;
    }
    return 0;
}

void cli_close(cli_session *s) {
    if (s->trace) fclose(s->trace);
    sluice_store_close(s->store);
    sluice_clock_free(s->manual);
    sluice_policy_free(s->policy);
    memset(s, 0, sizeof *s);
}

/* Everything before the decision: 0, or the exit status (2) with the
 * session closed. */
int cli_open(const cli_args *a, cli_session *s) {
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
void cli_not_enforced(const cli_args *a, const cli_session *s, const sluice_decision *d, const char *tail) {
    const char *msg = sluice_store_errmsg(s->store);
    if (!*msg) msg = "no reason given";
    if (a->strict) {
        fprintf(stderr, "sluice %s: key ", a->cmd->name);
        cli_put_quoted(stderr, a->key, a->key_len);
        fprintf(stderr, ": the store could not decide (--strict): %s\n", msg);
    } else {
        fprintf(stderr, "sluice %s: warning: the store could not decide, so the request was %s without being "
                        "counted (on_error=%s): %s%s\n",
                a->cmd->name, d->allowed ? "admitted" : "denied", d->allowed ? "allow" : "deny", msg, tail);
    }
}

/* A failed decision (not a denial), on stderr. */
void cli_decision_error(const cli_args *a, const cli_session *s, int rc) {
    const char *msg = sluice_store_errmsg(s->store);
    fprintf(stderr, "sluice %s: key ", a->cmd->name);
    cli_put_quoted(stderr, a->key, a->key_len);
    fprintf(stderr, ": %s: %s\n", sluice_err_name(rc), *msg ? msg : sluice_strerror(rc));
}
