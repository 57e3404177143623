/* pipe.c: sluice pipe, standard input copied to standard output at the
 * rate a policy allows, by lines or bytes, each unit written only once the
 * store admits it: nothing lost, reordered or changed. */
#define _POSIX_C_SOURCE 200809L /* poll, read, write */
#include "cli.h"

#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char pipe_help[] =
    "usage: sluice pipe --policy SPEC [--unit lines|bytes] [--key KEY] [--name NAME]\n"
    "                   [--store URL]\n"
    "\n"
    "Copies standard input to standard output at the rate SPEC allows, blocking\n"
    "as needed: nothing is lost, reordered or changed. Each unit is written only\n"
    "once the store admits it:\n"
    "  lines  (the default) one request of cost 1 per line, made when the line's\n"
    "         first byte is read; a last line without a newline counts too\n"
    "  bytes  requests of up to the least limit of SPEC bytes: all the bytes read\n"
    "         so far when admitted, else as many as are admitted now, else sluice\n"
    "         waits for the next byte\n"
    "What is admitted is written before any wait. When SPEC has a leaky-bucket\n"
    "part, an admitted unit is written after its delay (delay_ms). The state\n"
    "lives in the store under KEY (default \"pipe\"): pipes, checks and runs with\n"
    "the same KEY, NAME and SPEC share one rate. When a remote store cannot\n"
    "decide, a warning on stderr gives its reason, once.\n"
    "\n"
    "options:\n"
    CLI_POLICY_HELP
    "  --unit UNIT      lines (default) or bytes\n"
    "  --key KEY        the key of the shared state (default \"pipe\")\n"
    CLI_NAME_HELP
    CLI_STORE_HELP
    "  -h, --help       this help\n"
    "\n"
    "exit status: 0 at the end of the input; 1 reading, writing or the store\n"
    "failed (what was admitted is written first; a reader that went away, as\n"
    "after | head, ends it with no message); 2 a bad argument, SPEC or store\n"
    "URL, or a store that cannot be opened (nothing is read).\n"
    "\n"
    "example:\n"
    "  $ tail -f app.log | grep ERROR | sluice pipe --policy 'token-bucket capacity=10 rate=1/m' | mail-each\n";

static const cli_command pipe_command = {
    "pipe", "usage: sluice pipe --policy SPEC [--unit lines|bytes] [--key KEY] [--name NAME] [--store URL]",
    pipe_help,
    CLI_OPT_POLICY | CLI_OPT_UNIT | CLI_OPT_KEY | CLI_OPT_NAME | CLI_OPT_STORE | CLI_OPT_MANUAL_CLOCK |
        CLI_OPT_TRACE_FILE,
    CLI_TAKES_NOTHING, 0, "pipe"};

/* Waits until fd is ready for events (for descriptors in non-blocking mode). */
static int wait_fd(int fd, short events) {
    struct pollfd p = {fd, events, 0};
    while (poll(&p, 1, -1) < 0)
        if (errno != EINTR) return -1;
    return 0;
}

/* Writes all of b[0..n): short writes and EINTR go on. 0, or -1 (errno). */
static int write_all(int fd, const char *b, size_t n) {
    while (n > 0) {
        ssize_t k = write(fd, b, n);
        if (k > 0) {
            b += k;
            n -= (size_t)k;
        } else if (k < 0 && errno == EINTR) {
            continue;
        } else if (k < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            if (wait_fd(fd, POLLOUT)) return -1;
        } else {
            if (k == 0) errno = EIO;
            return -1;
        }
    }
    return 0;
}

/* Reads what is there, up to n bytes: the count, 0 at the end, -1 (errno). */
static ssize_t read_some(int fd, char *b, size_t n) {
    for (;;) {
        ssize_t k = read(fd, b, n);
        if (k >= 0) return k;
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            if (wait_fd(fd, POLLIN)) return -1;
        } else if (errno != EINTR) {
            return -1;
        }
    }
}

enum { PIPE_BUF_SIZE = 65536 };

/* The input buffer: buf[0..written) is out, buf[written..released) admitted
 * and waiting to be written, buf[released..filled) read, not yet admitted. */
typedef struct {
    const cli_args *a;
    cli_session *s;
    int64_t least; /* the least limit of the policy: the largest cost */
    int warned;    /* a decision not enforced was reported */
    char buf[PIPE_BUF_SIZE];
    size_t written, released, filled;
} pipe_state;

/* Writes what is admitted. 0, or 1 with a message (none when the reader has
 * gone, EPIPE: that is how `| head` ends a pipeline). */
static int pipe_flush(pipe_state *ps) {
    if (ps->released > ps->written && write_all(1, ps->buf + ps->written, ps->released - ps->written) != 0) {
        if (errno != EPIPE) fprintf(stderr, "sluice pipe: writing standard output: %s\n", strerror(errno));
        ps->written = ps->released; /* lost: never written (or reported) again */
        return 1;
    }
    ps->written = ps->released;
    return 0;
}

/* Admits `want` units, or with partial_ok at least one and at most want:
 * *got of them. Blocks until then. 0, or 1 with a message. */
static int pipe_admit(pipe_state *ps, int64_t want, int partial_ok, int64_t *got) {
    const cli_args *a = ps->a;
    cli_session *s = ps->s;
    sluice_decision d;
    int rc = sluice_store_acquire(s->store, s->policy, a->key, a->key_len, want, &d);
    if (rc == SLUICE_OK && !d.allowed && partial_ok && d.remaining > 0 && d.remaining < want) {
        want = d.remaining; /* what is admitted now */
        rc = sluice_store_acquire(s->store, s->policy, a->key, a->key_len, want, &d);
    }
    if (rc == SLUICE_OK && !d.allowed) {
        if (partial_ok) want = 1; /* the next byte, as soon as it may go */
        if (pipe_flush(ps)) return 1;
        rc = sluice_store_acquire_wait(s->store, s->policy, a->key, a->key_len, want, INT64_MAX, &d);
    }
    if (rc != SLUICE_OK) {
        cli_decision_error(a, s, rc);
        return 1;
    }
    if (!d.enforced && !ps->warned) { /* once: a pipe makes many decisions */
        cli_not_enforced(a, s, &d, " (said once; later ones are not)");
        ps->warned = 1;
    }
    if (d.delay_ms > 0) {
        if (pipe_flush(ps)) return 1;
        sluice_clock_sleep_ms(s->clock, d.delay_ms);
    }
    if (s->trace) fprintf(s->trace, "t=%" PRId64 " units=%" PRId64 "\n", sluice_clock_now_ms(s->clock), want);
    *got = want;
    return 0;
}

int cli_cmd_pipe(int argc, char **argv) {
    cli_args a;
    cli_session s;
    int status = cli_parse(&pipe_command, argc, argv, &a);
    if (status) return status < 0 ? 0 : status;
    pipe_state *ps = calloc(1, sizeof *ps);
    if (!ps) {
        fprintf(stderr, "sluice pipe: out of memory\n");
        return 1;
    }
    if ((status = cli_open(&a, &s)) != 0) {
        free(ps);
        return status;
    }
    ps->a = &a;
    ps->s = &s;
    ps->least = sluice_policy_max_cost(s.policy);
    int in_line = 0; /* lines: the line being copied is admitted */
    while (status == 0) {
        if (ps->released == ps->filled) {
            if ((status = pipe_flush(ps)) != 0) break;
            ssize_t n = read_some(0, ps->buf, sizeof ps->buf);
            if (n < 0) {
                fprintf(stderr, "sluice pipe: reading standard input: %s\n", strerror(errno));
                status = 1;
            }
            if (n <= 0) break;
            ps->written = ps->released = 0;
            ps->filled = (size_t)n;
        }
        int64_t got;
        if (a.unit_bytes) {
            int64_t avail = (int64_t)(ps->filled - ps->released);
            if ((status = pipe_admit(ps, avail < ps->least ? avail : ps->least, 1, &got)) != 0) break;
            ps->released += (size_t)got;
        } else {
            if (!in_line && (status = pipe_admit(ps, 1, 0, &got)) != 0) break;
            const char *nl = memchr(ps->buf + ps->released, '\n', ps->filled - ps->released);
            in_line = nl == NULL;
            ps->released = nl ? (size_t)(nl - ps->buf) + 1 : ps->filled;
        }
    }
    if (pipe_flush(ps) && status == 0) status = 1; /* what was admitted goes out */
    if (s.trace && fclose(s.trace) != 0 && status == 0) {
        fprintf(stderr, "sluice pipe: --trace-file %s: %s\n", a.trace_path, strerror(errno));
        status = 1;
    }
    s.trace = NULL; /* closed */
    cli_close(&s);
    free(ps);
    return status;
}
