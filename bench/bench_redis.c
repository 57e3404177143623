/* bench_redis.c: decisions per second of the Redis store on one connection,
 * next to what redis-benchmark gets from the same server for a script of
 * comparable size: the ceiling a client of that server cannot beat.
 *
 *   make bench              builds (-O2) and runs every program in bench/
 *   ./build/bench_redis     this one alone, after `make build`
 *   ./build/bench_redis --same-cpu   server and clients on one CPU
 *   ./build/bench_redis --no-pin     leave placement to the scheduler
 *
 * Benchmarks report figures; tests assert behaviour. This program prints and
 * exits 0; it exits 1 only when something errors (the server does not start,
 * a call fails, a decision is not an enforced admission, redis-benchmark
 * reports an error). It prints "skipped: ..." and exits 0 when redis-server
 * or redis-benchmark is not in PATH, or the build has no libsluice-redis.
 *
 * The server: its own redis-server on a free loopback port (found by binding
 * port 0), in a temporary directory, with --save '' --appendonly no and
 * otherwise the defaults; stopped (SIGTERM) and its directory removed at the
 * end, also on SIGINT/SIGTERM, and killed if this program dies.
 *
 * Placement: the machine may have 2 CPUs shared by the server, the clients
 * and this program, so only one thing runs at a time, and by default the
 * server is pinned to the second CPU this process may use and every client
 * (this program's loops, each redis-benchmark) to the first: the server on
 * its own core, as when it is another host, minus the network. Unpinned,
 * one-connection figures on a 2-vCPU VM are bimodal (the scheduler sometimes
 * puts both ends on one CPU, which skips the cross-CPU wake-up and doubles
 * the rate). --same-cpu pins everything to the first CPU: then a round trip
 * is mostly CPU work of both ends, the strictest view of client overhead.
 *
 * Workload: token bucket of capacity 10^9 refilling 10 per hour, cost 1:
 * every decision is admitted (the allow path), and every key's state lives
 * on in Redis between its hits (a busy key, not a fresh one: its expiry is
 * the time to refill what was taken, 6 minutes a hit, so no key expires
 * during the run, with the server's clock or the client's). 4,096 keys, "user:00000001234" (16
 * bytes), in an order drawn uniformly at random (fixed seed) and
 * precomputed; every key is decided once before any timing.
 *
 * Rows (one connection, one client thread everywhere):
 *  scale     redis-benchmark -c 1 -t ping_inline / get, -P 1 (and get -P 16):
 *            the round trip of the cheapest commands.
 *  ceiling   redis-benchmark -c 1 -P 1 (and -P 16) -r 4096 EVALSHA of a
 *            small script, SMALL_LUA below: read the clock (TIME, or ARGV[1]
 *            with clock=client), GET the key, GCRA arithmetic on a few
 *            numbers, SET with PX, return 8 integers. Arguments as sluice
 *            sends them (ARGV: now, cost, ttl grace, algorithm, limit, p, r).
 *            With clock=client redis-benchmark sends one fixed reading.
 *  sluice    sluice_store_acquire in a loop (1 decision per round trip), and
 *            sluice_store_acquire_many of 16 requests per call (16 decisions
 *            per pipelined round trip); "redis://127.0.0.1:P" (the server's
 *            clock, the default) and "...?clock=client".
 *  denied    a hot key denied for an hour, sluice_store_acquire in a loop on
 *            a store with the cache of denials (answered locally, no round
 *            trip) and on one with deny_cache=0 (a round trip each).
 *  verbs     sluice_store_peek and sluice_store_refund of cost 1 in a loop
 *            on the same keys of the same store as the acquire row (server
 *            clock): one round trip each; every key holds a backlog of 10^6
 *            (taken at the warm-up), so every refund gives a token back and
 *            writes the state.
 *  where the time goes (server clock):
 *            redis-benchmark EVALSHA of sluice's own decide.lua with the
 *            same arguments (script cost, under the ceiling's client); a
 *            plain hiredis loop in C, redisCommandArgv of that EVALSHA with
 *            argument arrays built in advance (-P 16: 16 redisAppendCommandArgv
 *            then 16 redisGetReply), i.e. sluice without sluice; and the
 *            same plain loop with the small script (hiredis against
 *            redis-benchmark as a client).
 *
 * Columns: decisions/s (requests/s for redis-benchmark; a batch counts 16),
 * the median of the runs; spread = (fastest - slowest) / median; then per
 * decision, medians too: wall us = 1e6 / rate; client = CPU of the client
 * (this thread's CLOCK_THREAD_CPUTIME_ID, or redis-benchmark's rusage less
 * that of a run of 1 request); server = on-CPU time of redis-server's main
 * thread (/proc/PID/task/PID/schedstat); cmd = the server's usec_per_call of
 * the command (INFO commandstats, reset before each run): for EVALSHA the
 * script's run time. wall - client - server is the time neither end ran:
 * wake-ups and scheduling.
 *
 * Timing: every case first runs a pilot (doubling n until a run takes 40
 * ms), which sizes n for runs of about 200 ms; then N_RUNS rounds each run
 * every case once, each sluice case right after the ceiling it is compared
 * with, so a slow moment of the machine falls on all cases alike and not on
 * one.
 *
 * Goals (the issue's, informational, PASS/MISS), with the server's clock,
 * the default: sluice_store_acquire >= 0.9x the decisions per second of the
 * small script's EVALSHA -P 1, and sluice_store_acquire_many of 16 >= 0.8x
 * its -P 16; a peek and a refund each within 1.2x of the acquire's time
 * (>= 0.83x its calls per second); a denied key's decisions with the cache
 * of denials >= 20x those of a round trip. A ratio is the median of the per-round ratios (each pair runs
 * back to back), printed with their range. The same ratios with
 * clock=client, and against decide.lua under redis-benchmark and the plain
 * hiredis loop, follow (not goals).
 */
#define _GNU_SOURCE
#include "internal.h"
#include "sluice.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* hiredis comes with libsluice-redis; every program in bench/ is built even
 * without it, so its functions are weak: NULL when it is not linked. */
#if defined(__has_include)
#if __has_include(<hiredis/hiredis.h>)
#include <hiredis/hiredis.h>
#define HAVE_HIREDIS 1
#endif
#endif

#ifndef HAVE_HIREDIS
int main(void) {
    printf("bench_redis: skipped: hiredis headers not found (Debian: libhiredis-dev), so no "
           "libsluice-redis\n");
    return 0;
}
#else

#pragma weak redisConnectWithTimeout
#pragma weak redisSetTimeout
#pragma weak redisCommandArgv
#pragma weak redisAppendCommandArgv
#pragma weak redisGetReply
#pragma weak freeReplyObject
#pragma weak redisFree
/* the script libsluice-redis embeds (src/store/redis/decide.lua) */
extern const char sluice__redis_decide_lua[] __attribute__((weak));

/* ------------------------------------------------------------------------ */
/* Parameters                                                                */
/* ------------------------------------------------------------------------ */

enum { N_RUNS = 7, N_KEYS = 4096, ORDER_LEN = 1 << 16, BATCH = 16 };
#define RUN_NS 200e6  /* one timed run */
#define PILOT_NS 40e6 /* the pilot that sizes it */

/* the policy: capacity 10^9, 10 per hour */
#define CAPACITY INT64_C(1000000000)
#define RATE 10
#define PERIOD_MS 3600000

/* A decision in the fewest lines that still do what decide.lua does for a
 * token bucket: clock, GET, GCRA arithmetic, SET PX, 8 integers back. ARGV:
 * now ("" = TIME), cost, ttl grace as decide.lua's, then algorithm, limit,
 * p, r (1 ms = r units, 1 token = p units; decide.lua has them in its
 * ARGV[4], the configuration's text). The state is one number, the
 * theoretical arrival time in ms. */
static const char SMALL_LUA[] =
    "local now\n"
    "if ARGV[1] == '' then\n"
    "  local t = redis.call('TIME')\n"
    "  now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n"
    "else\n"
    "  now = tonumber(ARGV[1])\n"
    "end\n"
    "local cost, limit, p, r = tonumber(ARGV[2]), tonumber(ARGV[5]), tonumber(ARGV[6]), tonumber(ARGV[7])\n"
    "local tat = tonumber(redis.call('GET', KEYS[1])) or now\n"
    "if tat < now then tat = now end\n"
    "local b = (tat - now) * r\n"
    "local ok, rem, retry, reset = 0, 0, 0, math.ceil(b / r)\n"
    "if b + cost * p <= limit * p then\n"
    "  b = b + cost * p\n"
    "  ok, rem, reset = 1, math.floor((limit * p - b) / p), math.ceil(b / r)\n"
    "  redis.call('SET', KEYS[1], string.format('%.0f', now + reset), 'PX', reset + 1 + tonumber(ARGV[3]))\n"
    "else\n"
    "  retry = math.ceil((b + cost * p - limit * p) / r)\n"
    "end\n"
    "return {ok, rem, retry, reset, 0, limit, 0, now}\n";

/* ------------------------------------------------------------------------ */
/* Small helpers                                                             */
/* ------------------------------------------------------------------------ */

static int failed; /* something errored: exit 1 */

static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int64_t thread_cpu_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double s[N_RUNS];
    memcpy(s, v, (size_t)n * sizeof *v);
    qsort(s, (size_t)n, sizeof *s, cmp_double);
    return s[n / 2];
}

/* The full path of an executable named name in PATH, or 0. */
static int find_in_path(const char *name, char *out, size_t len) {
    const char *path = getenv("PATH");
    if (!path || !*path) path = "/usr/local/bin:/usr/bin:/bin";
    while (*path) {
        const char *colon = strchr(path, ':');
        size_t dl = colon ? (size_t)(colon - path) : strlen(path);
        int n = snprintf(out, len, "%.*s/%s", (int)(dl ? dl : 1), dl ? path : ".", name);
        if (n > 0 && (size_t)n < len && access(out, X_OK) == 0) return 1;
        if (!colon) break;
        path = colon + 1;
    }
    return 0;
}

/* ------------------------------------------------------------------------ */
/* CPUs                                                                      */
/* ------------------------------------------------------------------------ */

static int n_cpus, cpu_of[2];
static int cpu_client = -1, cpu_server = -1; /* -1: not pinned */

static void pin_self(int cpu) {
    if (cpu < 0) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    sched_setaffinity(0, sizeof set, &set); /* best effort */
}

/* ------------------------------------------------------------------------ */
/* The server                                                                */
/* ------------------------------------------------------------------------ */

static char redis_server_bin[4096], redis_benchmark_bin[4096];
static char tmp_dir[256], log_path[300];
static volatile pid_t server_pid, child_pid; /* child: a redis-benchmark running */
static int server_port;
static char server_port_text[16];
static redisContext *admin; /* for SCRIPT LOAD, CONFIG RESETSTAT, INFO */

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = 0};
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof a;
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof a) == 0 && getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void remove_tmp_dir(void) {
    if (!tmp_dir[0]) return;
    DIR *d = opendir(tmp_dir);
    if (d) {
        struct dirent *e;
        char path[600];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(path, sizeof path, "%s/%s", tmp_dir, e->d_name);
            unlink(path);
        }
        closedir(d);
    }
    rmdir(tmp_dir);
    tmp_dir[0] = 0;
}

static void stop_server(void) {
    if (admin) {
        redisFree(admin);
        admin = NULL;
    }
    pid_t pid = server_pid;
    if (pid > 0) {
        kill(pid, SIGTERM);
        int st;
        int64_t t0 = now_ns();
        while (waitpid(pid, &st, WNOHANG) == 0) {
            if (now_ns() - t0 > 5000000000LL) {
                kill(pid, SIGKILL);
                waitpid(pid, &st, 0);
                break;
            }
            usleep(10000);
        }
        server_pid = 0;
    }
    remove_tmp_dir();
}

static void on_signal(int sig) {
    /* async-signal-safe only: kill, waitpid, unlink, rmdir, _exit */
    if (child_pid > 0) kill(child_pid, SIGKILL), waitpid(child_pid, NULL, 0);
    if (server_pid > 0) kill(server_pid, SIGKILL), waitpid(server_pid, NULL, 0);
    if (log_path[0]) unlink(log_path);
    if (tmp_dir[0]) rmdir(tmp_dir);
    _exit(128 + sig);
}

/* The end of the server's log, for a failure message. */
static void print_log_tail(void) {
    FILE *f = fopen(log_path, "r");
    if (!f) return;
    char buf[4096];
    if (fseek(f, -(long)(sizeof buf - 1), SEEK_END) != 0) rewind(f);
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    buf[n] = 0;
    fclose(f);
    fprintf(stderr, "bench_redis: redis-server log (%s):\n%s\n", log_path, buf);
}

static redisReply *admin_cmd(int argc, const char **argv) {
    size_t lens[16];
    for (int i = 0; i < argc; i++) lens[i] = strlen(argv[i]);
    redisReply *r = redisCommandArgv(admin, argc, argv, lens);
    if (!r) {
        fprintf(stderr, "bench_redis: %s: %s\n", argv[0], admin->errstr);
        exit(1);
    }
    return r;
}

static int try_start_server(void) {
    int port = free_port();
    if (port <= 0) {
        fprintf(stderr, "bench_redis: no free loopback port: %s\n", strerror(errno));
        return -1;
    }
    snprintf(server_port_text, sizeof server_port_text, "%d", port);
    char *const argv[] = {redis_server_bin, "--port", server_port_text, "--bind", "127.0.0.1",
                          "--save", "", "--appendonly", "no", "--dir", tmp_dir, "--logfile", log_path,
                          "--daemonize", "no", NULL};
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        int fd = open("/dev/null", O_RDWR);
        if (fd >= 0) {
            dup2(fd, 0), dup2(fd, 1), dup2(fd, 2);
            if (fd > 2) close(fd);
        }
        pin_self(cpu_server);
        execv(redis_server_bin, argv);
        _exit(127);
    }
    server_pid = pid;
    /* ready when it answers PING; gone when it exited (port taken, ...) */
    struct timeval tv = {0, 200000};
    for (int i = 0; i < 100; i++) {
        int st;
        if (waitpid(pid, &st, WNOHANG) == pid) {
            server_pid = 0;
            return 1; /* try another port */
        }
        redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
        if (c && !c->err) {
            const char *argv1[] = {"PING"};
            size_t lens1[] = {4};
            redisReply *r = redisCommandArgv(c, 1, argv1, lens1);
            int ok = r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "PONG");
            if (r) freeReplyObject(r);
            if (ok) {
                redisSetTimeout(c, (struct timeval){10, 0});
                admin = c;
                server_port = port;
                return 0;
            }
        }
        if (c) redisFree(c);
        usleep(50000);
    }
    return -1;
}

static void start_server(void) {
    snprintf(tmp_dir, sizeof tmp_dir, "%s/bench_redis.XXXXXX", "/tmp");
    if (!mkdtemp(tmp_dir)) {
        fprintf(stderr, "bench_redis: mkdtemp: %s\n", strerror(errno));
        tmp_dir[0] = 0;
        exit(1);
    }
    snprintf(log_path, sizeof log_path, "%s/redis.log", tmp_dir);
    for (int attempt = 0; attempt < 3; attempt++) {
        int rc = try_start_server();
        if (rc == 0) return;
        if (rc < 0) break;
    }
    fprintf(stderr, "bench_redis: redis-server did not start\n");
    print_log_tail();
    exit(1); /* atexit: stop_server */
}

/* On-CPU ns of the server's main thread (the event loop), or -1. */
static int64_t server_cpu_ns(void) {
    char path[64], buf[128];
    snprintf(path, sizeof path, "/proc/%d/task/%d/schedstat", (int)server_pid, (int)server_pid);
    int fd = open(path, O_RDONLY);
    if (fd < 0) return -1;
    ssize_t n = read(fd, buf, sizeof buf - 1);
    close(fd);
    if (n <= 0) return -1;
    buf[n] = 0;
    return strtoll(buf, NULL, 10);
}

static void reset_stats(void) {
    const char *argv[] = {"CONFIG", "RESETSTAT"};
    freeReplyObject(admin_cmd(2, argv));
}

/* usec_per_call of command cmd ("evalsha") since the last reset, or -1. */
static double cmd_usec_per_call(const char *cmd) {
    const char *argv[] = {"INFO", "commandstats"};
    redisReply *r = admin_cmd(2, argv);
    double v = -1;
    char tag[64];
    snprintf(tag, sizeof tag, "cmdstat_%s:", cmd);
    if (r->type == REDIS_REPLY_STRING) {
        const char *at = strstr(r->str, tag);
        if (at) {
            const char *calls = strstr(at, "calls="), *usec = strstr(at, "usec=");
            if (calls && usec) {
                double c = strtod(calls + 6, NULL), u = strtod(usec + 5, NULL);
                if (c > 0) v = u / c;
            }
        }
    }
    freeReplyObject(r);
    return v;
}

static char server_version[32] = "?";

static void read_server_version(void) {
    const char *argv[] = {"INFO", "server"};
    redisReply *r = admin_cmd(2, argv);
    if (r->type == REDIS_REPLY_STRING) {
        const char *at = strstr(r->str, "redis_version:");
        if (at) sscanf(at + 14, "%31[^\r\n]", server_version);
    }
    freeReplyObject(r);
}

/* SCRIPT LOAD text: its SHA into sha. */
static void load_script(const char *text, char sha[41]) {
    const char *argv[] = {"SCRIPT", "LOAD", text};
    redisReply *r = admin_cmd(3, argv);
    if (r->type != REDIS_REPLY_STRING || r->len != 40) {
        fprintf(stderr, "bench_redis: SCRIPT LOAD: %s\n", r->type == REDIS_REPLY_ERROR ? r->str : "unexpected reply");
        exit(1);
    }
    memcpy(sha, r->str, 40);
    sha[40] = 0;
    freeReplyObject(r);
}

/* ------------------------------------------------------------------------ */
/* redis-benchmark                                                           */
/* ------------------------------------------------------------------------ */

/* Runs argv; its stdout and stderr into out. Exit status, or -1. */
static int run_proc(char *const argv[], char *out, size_t outlen, struct rusage *ru) {
    int fds[2];
    if (pipe(fds) != 0) return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close(fds[0]), close(fds[1]);
        return -1;
    }
    if (pid == 0) {
        int null = open("/dev/null", O_RDONLY);
        if (null >= 0) dup2(null, 0);
        dup2(fds[1], 1), dup2(fds[1], 2);
        close(fds[0]), close(fds[1]);
        execv(argv[0], argv);
        _exit(127);
    }
    child_pid = pid;
    close(fds[1]);
    size_t used = 0;
    for (;;) {
        char tmp[4096];
        ssize_t n = read(fds[0], tmp, sizeof tmp);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        size_t take = (size_t)n < outlen - 1 - used ? (size_t)n : outlen - 1 - used;
        memcpy(out + used, tmp, take);
        used += take;
    }
    out[used] = 0;
    close(fds[0]);
    int st;
    while (wait4(pid, &st, 0, ru) < 0)
        if (errno != EINTR) return -1;
    child_pid = 0;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

/* requests per second from redis-benchmark --csv output: the second field
 * of the last line that is not the header; 0 when none. */
static double parse_rps(const char *out) {
    double rps = 0;
    for (const char *line = out; line && *line;) {
        const char *next = strchr(line, '\n');
        if (line[0] == '"' && strncmp(line, "\"test\"", 6) != 0) {
            const char *comma = strstr(line, "\",\"");
            if (comma) rps = strtod(comma + 3, NULL);
        }
        line = next ? next + 1 : NULL;
    }
    return rps;
}

static double ru_ns(const struct rusage *ru) {
    return (ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1e9 + (ru->ru_utime.tv_usec + ru->ru_stime.tv_usec) * 1e3;
}

static double rb_start_cpu_ns; /* redis-benchmark's CPU for a run of one request */

/* ------------------------------------------------------------------------ */
/* Cases                                                                     */
/* ------------------------------------------------------------------------ */

typedef enum { K_RB, K_ONE, K_MANY, K_RAW, K_PEEK, K_REFUND, K_DENIED } kind;

typedef struct {
    const char *label;
    kind k;
    int pipeline;        /* requests per round trip: 1 or BATCH           */
    const char *cmdstat; /* the command whose usec_per_call is reported  */
    /* K_RB: redis-benchmark's arguments after "-P P", and -t or a command */
    const char *rb_args[16];
    /* K_ONE, K_MANY */
    sluice_store *store;
    /* K_RAW: argv per key, raw_argc of them */
    const char *(*raw_argv)[11];
    size_t (*raw_lens)[11];
    int raw_argc;
    /* state */
    uint64_t n;      /* decisions per run */
    unsigned cursor; /* next index in order[] */
    int runs;
    double rate[N_RUNS], client_us[N_RUNS], server_us[N_RUNS], cmd_us[N_RUNS];
} bcase;

static uint16_t order[ORDER_LEN];
static char keys[N_KEYS][17];
static const sluice_policy *policy;
static const sluice_policy *deny_policy; /* K_DENIED's: its key always denied */
#define DENIED_KEY "hot:denied:00001"

typedef struct {
    double rate, client_us, server_us, cmd_us; /* per decision */
    double wall_ns;
} sample;

static void report_decision(const bcase *c, int rc, const sluice_decision *d, sluice_store *s,
                            uint64_t *bad) {
    if (rc == 0 && d->allowed && d->enforced) return;
    if (++*bad == 1) {
        fprintf(stderr, "bench_redis: %s: %s%s%s\n", c->label,
                rc ? sluice_strerror(rc) : !d->enforced ? "decision not enforced (server failed)" : "denied",
                rc || !d->enforced ? ": " : "", rc || !d->enforced ? sluice_store_errmsg(s) : "");
    }
}

static uint64_t run_one(bcase *c, uint64_t n) {
    uint64_t bad = 0;
    sluice_decision d;
    unsigned at = c->cursor;
    for (uint64_t i = 0; i < n; i++) {
        const char *key = keys[order[at++ & (ORDER_LEN - 1)]];
        int rc = sluice_store_acquire(c->store, policy, key, 16, 1, &d);
        if (rc || !d.allowed || !d.enforced) report_decision(c, rc, &d, c->store, &bad);
    }
    c->cursor = at;
    return bad;
}

/* Peeks or refunds of cost 1: every peek an admission (a bucket far from
 * empty), every refund one token back. */
static uint64_t run_verb(bcase *c, uint64_t n) {
    uint64_t bad = 0;
    sluice_decision d;
    unsigned at = c->cursor;
    for (uint64_t i = 0; i < n; i++) {
        const char *key = keys[order[at++ & (ORDER_LEN - 1)]];
        int rc = c->k == K_PEEK ? sluice_store_peek(c->store, policy, key, 16, 1, &d)
                                : sluice_store_refund(c->store, policy, key, 16, 1, &d);
        if (rc || !d.allowed || !d.enforced) report_decision(c, rc, &d, c->store, &bad);
    }
    c->cursor = at;
    return bad;
}

/* One hot key, denied every time (answered by the cache of denials, or by
 * a round trip with deny_cache=0). */
static uint64_t run_denied(bcase *c, uint64_t n) {
    uint64_t bad = 0;
    sluice_decision d;
    for (uint64_t i = 0; i < n; i++) {
        int rc = sluice_store_acquire(c->store, deny_policy, DENIED_KEY, 16, 1, &d);
        if ((rc || d.allowed || !d.enforced) && ++bad == 1)
            fprintf(stderr, "bench_redis: %s: %s\n", c->label,
                    rc ? sluice_store_errmsg(c->store) : d.allowed ? "admitted" : "not enforced");
    }
    return bad;
}

static uint64_t run_many(bcase *c, uint64_t n) {
    uint64_t bad = 0;
    sluice_request reqs[BATCH];
    sluice_decision d[BATCH];
    int results[BATCH];
    unsigned at = c->cursor;
    for (uint64_t i = 0; i < n; i += BATCH) {
        for (int j = 0; j < BATCH; j++)
            reqs[j] = (sluice_request){policy, keys[order[at++ & (ORDER_LEN - 1)]], 16, 1};
        int rc = sluice_store_acquire_many(c->store, reqs, BATCH, d, results);
        for (int j = 0; j < BATCH; j++)
            if (rc || results[j] || !d[j].allowed || !d[j].enforced)
                report_decision(c, rc ? rc : results[j], &d[j], c->store, &bad);
    }
    c->cursor = at;
    return bad;
}

/* A reply of the decision scripts (the small one's 8 integers, decide.lua's
 * 10), the first 1 (admitted). */
static int reply_ok(const redisReply *r) {
    return r && r->type == REDIS_REPLY_ARRAY && (r->elements == 8 || r->elements == 10) &&
           r->element[0]->type == REDIS_REPLY_INTEGER && r->element[0]->integer == 1;
}

static redisContext *raw_conn;

static uint64_t run_raw(bcase *c, uint64_t n) {
    uint64_t bad = 0;
    unsigned at = c->cursor;
    if (c->pipeline == 1) {
        for (uint64_t i = 0; i < n; i++) {
            unsigned k = order[at++ & (ORDER_LEN - 1)];
            redisReply *r = redisCommandArgv(raw_conn, c->raw_argc, c->raw_argv[k], c->raw_lens[k]);
            if (!reply_ok(r)) bad++;
            if (!r) {
                fprintf(stderr, "bench_redis: %s: %s\n", c->label, raw_conn->errstr);
                exit(1);
            }
            freeReplyObject(r);
        }
    } else {
        for (uint64_t i = 0; i < n; i += BATCH) {
            for (int j = 0; j < BATCH; j++) {
                unsigned k = order[(at + (unsigned)j) & (ORDER_LEN - 1)];
                redisAppendCommandArgv(raw_conn, c->raw_argc, c->raw_argv[k], c->raw_lens[k]);
            }
            at += BATCH;
            for (int j = 0; j < BATCH; j++) {
                void *v = NULL;
                if (redisGetReply(raw_conn, &v) != REDIS_OK || !v) {
                    fprintf(stderr, "bench_redis: %s: %s\n", c->label, raw_conn->errstr);
                    exit(1);
                }
                if (!reply_ok(v)) bad++;
                freeReplyObject(v);
            }
        }
    }
    c->cursor = at;
    if (bad) fprintf(stderr, "bench_redis: %s: %" PRIu64 " replies were not admissions\n", c->label, bad);
    return bad;
}

/* One run of n decisions; the figures per decision into *s. */
static void run_case(bcase *c, uint64_t n, sample *s) {
    reset_stats();
    int64_t srv0 = server_cpu_ns();
    memset(s, 0, sizeof *s);
    if (c->k == K_RB) {
        char nbuf[24], pbuf[8];
        snprintf(nbuf, sizeof nbuf, "%" PRIu64, n);
        snprintf(pbuf, sizeof pbuf, "%d", c->pipeline);
        char *argv[32];
        int a = 0;
        argv[a++] = redis_benchmark_bin;
        argv[a++] = "-h", argv[a++] = "127.0.0.1";
        argv[a++] = "-p", argv[a++] = server_port_text;
        argv[a++] = "-c", argv[a++] = "1";
        argv[a++] = "-n", argv[a++] = nbuf;
        argv[a++] = "-P", argv[a++] = pbuf;
        argv[a++] = "-r", argv[a++] = "4096";
        argv[a++] = "--csv";
        for (int i = 0; c->rb_args[i]; i++) argv[a++] = (char *)c->rb_args[i];
        argv[a] = NULL;
        static char out[65536];
        struct rusage ru;
        int rc = run_proc(argv, out, sizeof out, &ru);
        double rps = parse_rps(out);
        if (rc != 0 || rps <= 0 || strstr(out, "rror")) {
            fprintf(stderr, "bench_redis: %s: redis-benchmark exited %d:\n%s\n", c->label, rc, out);
            failed = 1;
            exit(1);
        }
        s->rate = rps;
        s->wall_ns = (double)n / rps * 1e9;
        double cpu = ru_ns(&ru) - rb_start_cpu_ns;
        s->client_us = (cpu > 0 ? cpu : 0) / (double)n / 1e3;
    } else {
        uint64_t bad;
        int64_t cpu0 = thread_cpu_ns(), t0 = now_ns();
        if (c->k == K_ONE) bad = run_one(c, n);
        else if (c->k == K_MANY) bad = run_many(c, n);
        else if (c->k == K_PEEK || c->k == K_REFUND) bad = run_verb(c, n);
        else if (c->k == K_DENIED) bad = run_denied(c, n);
        else bad = run_raw(c, n);
        int64_t t1 = now_ns(), cpu1 = thread_cpu_ns();
        if (bad) {
            fprintf(stderr, "bench_redis: %s: %" PRIu64 " of %" PRIu64 " decisions were not enforced "
                            "%s\n", c->label, bad, n, c->k == K_DENIED ? "denials" : "admissions");
            failed = 1;
        }
        s->wall_ns = (double)(t1 - t0);
        s->rate = (double)n / s->wall_ns * 1e9;
        s->client_us = (double)(cpu1 - cpu0) / (double)n / 1e3;
    }
    int64_t srv1 = server_cpu_ns();
    s->server_us = srv0 >= 0 && srv1 >= 0 ? (double)(srv1 - srv0) / (double)n / 1e3 : -1;
    s->cmd_us = cmd_usec_per_call(c->cmdstat);
}

/* Doubles n until one run takes PILOT_NS; sizes c->n for RUN_NS. */
static void pilot(bcase *c) {
    uint64_t n = c->k == K_RB ? 2048 : 256;
    sample s;
    for (;;) {
        run_case(c, n, &s);
        if (s.wall_ns >= PILOT_NS || n >= (UINT64_C(1) << 32)) break;
        n *= 2;
    }
    double per = s.wall_ns / (double)n;
    uint64_t runs_n = (uint64_t)(RUN_NS / per);
    runs_n = (runs_n + BATCH - 1) / BATCH * BATCH; /* whole batches */
    c->n = runs_n < BATCH ? BATCH : runs_n;
}

static void timed_run(bcase *c) {
    sample s;
    run_case(c, c->n, &s);
    c->rate[c->runs] = s.rate;
    c->client_us[c->runs] = s.client_us;
    c->server_us[c->runs] = s.server_us;
    c->cmd_us[c->runs] = s.cmd_us;
    c->runs++;
}

typedef struct {
    double rate, spread, wall_us, client_us, server_us, cmd_us;
} figures;

static figures figures_of(const bcase *c) {
    figures f;
    double lo = c->rate[0], hi = c->rate[0];
    for (int i = 1; i < c->runs; i++) {
        if (c->rate[i] < lo) lo = c->rate[i];
        if (c->rate[i] > hi) hi = c->rate[i];
    }
    f.rate = median(c->rate, c->runs);
    f.spread = f.rate > 0 ? (hi - lo) / f.rate : 0;
    f.wall_us = 1e6 / f.rate;
    f.client_us = median(c->client_us, c->runs);
    f.server_us = median(c->server_us, c->runs);
    f.cmd_us = median(c->cmd_us, c->runs);
    return f;
}

static void row(const bcase *c) {
    figures f = figures_of(c);
    printf("%-50s %9.0f/s %5.1f%%  %7.2f %7.2f", c->label, f.rate, 100 * f.spread, f.wall_us, f.client_us);
    if (f.server_us >= 0) printf(" %7.2f", f.server_us);
    else printf("     n/a");
    if (f.cmd_us >= 0) printf(" %7.2f", f.cmd_us);
    else printf("     n/a");
    if (f.server_us >= 0) printf(" %7.2f\n", f.wall_us - f.client_us - f.server_us);
    else printf("     n/a\n");
}

static void header(const char *title) {
    printf("\n== %s\n", title);
    printf("%-50s %11s %6s  %7s %7s %7s %7s %7s\n", "", "decisions", "spread", "wall", "client", "server",
           "cmd", "idle");
    printf("%-50s %11s %6s  %7s %7s %7s %7s %7s\n", "", "", "", "us", "us", "us", "us", "us");
}

/* ------------------------------------------------------------------------ */
/* Goals                                                                     */
/* ------------------------------------------------------------------------ */

/* a / b: the median of the per-round ratios (the two cases of a pair run
 * back to back, so a slow moment of the machine hits both), with their
 * range; flagged noisy when that range is more than 10% of the ratio. */
static void goal(const char *what, const bcase *a, const bcase *b, double bound, int is_goal) {
    double r[N_RUNS], lo = 1e9, hi = 0;
    int n = a->runs < b->runs ? a->runs : b->runs;
    for (int i = 0; i < n; i++) {
        r[i] = a->rate[i] / b->rate[i];
        if (r[i] < lo) lo = r[i];
        if (r[i] > hi) hi = r[i];
    }
    double ratio = median(r, n), spread = ratio > 0 ? (hi - lo) / ratio : 0;
    printf("%-70s %5.2fx", what, ratio);
    if (is_goal) printf("  goal >= %.2fx  %s", bound, ratio >= bound ? "PASS" : "MISS");
    else printf("  (goal's bound %.2fx: %s)", bound, ratio >= bound ? "met" : "not met");
    printf("  runs %.2f..%.2f", lo, hi);
    if (spread > 0.10) printf("  (noisy: spread %.0f%%)", 100 * spread);
    printf("\n");
}

/* ------------------------------------------------------------------------ */

static sluice_store *open_store(const char *query) {
    char url[256], err[256];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d%s", server_port, query);
    sluice_store *s;
    int rc = sluice_store_open_err(url, NULL, &s, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench_redis: sluice_store_open(%s): %s: %s\n", url, sluice_strerror(rc), err);
        exit(1);
    }
    return s;
}

/* Decides every key once (cost cost), in key order, so no timed decision
 * meets a fresh key. */
static void warm_store(sluice_store *s, int64_t cost) {
    for (int i = 0; i < N_KEYS; i += BATCH) {
        sluice_request reqs[BATCH];
        sluice_decision d[BATCH];
        int results[BATCH];
        for (int j = 0; j < BATCH; j++) reqs[j] = (sluice_request){policy, keys[i + j], 16, cost};
        if (sluice_store_acquire_many(s, reqs, BATCH, d, results) != 0) exit(1);
        for (int j = 0; j < BATCH; j++)
            if (results[j] || !d[j].allowed || !d[j].enforced) {
                fprintf(stderr, "bench_redis: warm-up: %s\n", sluice_store_errmsg(s));
                exit(1);
            }
    }
}

/* The same for the names redis-benchmark makes of "PREFIX__rand_int__"
 * (__rand_int__: 12 digits), with the script sha and its n_args (at most
 * 7) arguments args. */
static void warm_rb_keys(const char *prefix, const char *sha, const char *const *args, int n_args) {
    for (int i = 0; i < N_KEYS; i += BATCH) {
        char names[BATCH][128];
        for (int j = 0; j < BATCH; j++) {
            snprintf(names[j], sizeof names[j], "%s%012d}", prefix, i + j);
            const char *argv[11] = {"EVALSHA", sha, "1", names[j]};
            size_t lens[11];
            for (int a = 0; a < n_args; a++) argv[4 + a] = args[a];
            for (int a = 0; a < 4 + n_args; a++) lens[a] = strlen(argv[a]);
            redisAppendCommandArgv(admin, 4 + n_args, argv, lens);
        }
        for (int j = 0; j < BATCH; j++) {
            void *v = NULL;
            if (redisGetReply(admin, &v) != REDIS_OK || !reply_ok(v)) {
                fprintf(stderr, "bench_redis: warm-up of %s keys failed: %s\n", prefix,
                        v && ((redisReply *)v)->type == REDIS_REPLY_ERROR ? ((redisReply *)v)->str : admin->errstr);
                exit(1);
            }
            freeReplyObject(v);
        }
    }
}

int main(int argc, char **argv) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int same_cpu = 0, no_pin = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--same-cpu")) same_cpu = 1;
        else if (!strcmp(argv[i], "--no-pin")) no_pin = 1;
        else {
            fprintf(stderr, "usage: bench_redis [--same-cpu | --no-pin]\n");
            return 2;
        }
    }
    if (!find_in_path("redis-server", redis_server_bin, sizeof redis_server_bin)) {
        printf("bench_redis: skipped: redis-server not found in PATH (Debian: redis-server)\n");
        return 0;
    }
    if (!find_in_path("redis-benchmark", redis_benchmark_bin, sizeof redis_benchmark_bin)) {
        printf("bench_redis: skipped: redis-benchmark not found in PATH (Debian: redis-tools)\n");
        return 0;
    }
    {
        sluice_store *probe;
        char err[256];
        if (sluice_store_open_err("redis://127.0.0.1:1", NULL, &probe, err, sizeof err) != 0) {
            printf("bench_redis: skipped: %s\n", err);
            return 0;
        }
        sluice_store_close(probe);
    }
    if (!redisConnectWithTimeout || !redisCommandArgv || !redisAppendCommandArgv || !redisGetReply ||
        !freeReplyObject || !redisFree || !redisSetTimeout || !sluice__redis_decide_lua) {
        printf("bench_redis: skipped: hiredis is not linked into this build\n");
        return 0;
    }

    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int cpu = 0; cpu < CPU_SETSIZE && n_cpus < 2; cpu++)
            if (CPU_ISSET(cpu, &set)) cpu_of[n_cpus++] = cpu;
    const char *placement;
    static char placement_buf[128];
    if (no_pin || n_cpus < 1) {
        placement = "not pinned";
    } else if (same_cpu || n_cpus < 2) {
        cpu_client = cpu_server = cpu_of[0];
        snprintf(placement_buf, sizeof placement_buf, "server and clients pinned to CPU %d%s", cpu_of[0],
                 n_cpus < 2 ? " (one CPU usable)" : "");
        placement = placement_buf;
    } else {
        cpu_client = cpu_of[0];
        cpu_server = cpu_of[1];
        snprintf(placement_buf, sizeof placement_buf, "server pinned to CPU %d, clients to CPU %d",
                 cpu_server, cpu_client);
        placement = placement_buf;
    }
    pin_self(cpu_client);

    atexit(stop_server);
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGHUP, &sa, NULL);

    int64_t t_start = now_ns();
    double load = 0;
    FILE *la = fopen("/proc/loadavg", "r");
    if (la) {
        if (fscanf(la, "%lf", &load) != 1) load = 0;
        fclose(la);
    }
    start_server();
    read_server_version();
    printf("bench_redis: sluice %s, redis-server %s on 127.0.0.1:%d, %ld CPUs online, %s;\n"
           "median of %d runs of ~%.0f ms per case, cases interleaved; token bucket capacity 1e9, "
           "%d per hour (allow path), %d keys\n",
           sluice_version(), server_version, server_port, sysconf(_SC_NPROCESSORS_ONLN), placement, N_RUNS,
           RUN_NS / 1e6, RATE, N_KEYS);
    if (load >= 0.5)
        printf("note: load average %.2f before starting: other processes share these CPUs, expect noise "
               "(the goals' per-round ratios resist it best)\n", load);

    /* keys, order, policy */
    for (int i = 0; i < N_KEYS; i++) snprintf(keys[i], sizeof keys[i], "user:%011d", i);
    uint64_t x = 0x9E3779B97F4A7C15u;
    for (int i = 0; i < ORDER_LEN; i++) {
        x ^= x >> 12, x ^= x << 25, x ^= x >> 27;
        order[i] = (uint16_t)((x * 0x2545F4914F6CDD1Du) >> 52); /* 12 bits: 0..4095 */
    }
    sluice_config cfg = sluice_token_bucket(CAPACITY, RATE, PERIOD_MS);
    sluice_policy *pol;
    if (sluice_policy_new("bench", &cfg, 1, &pol) != 0) return 1;
    policy = pol;

    /* the scripts' arguments, as sluice sends them (store/redis/decide.c: build()) */
    char sha_small[41], sha_decide[41];
    load_script(SMALL_LUA, sha_small);
    load_script(sluice__redis_decide_lua, sha_decide);
    char limit_s[24], p_s[24], r_s[24], now_s[24];
    snprintf(limit_s, sizeof limit_s, "%lld", (long long)pol->params[0].limit);
    snprintf(p_s, sizeof p_s, "%lld", (long long)pol->params[0].p);
    snprintf(r_s, sizeof r_s, "%lld", (long long)pol->params[0].r);
    /* clock=client for redis-benchmark: one fixed reading of the store's clock */
    snprintf(now_s, sizeof now_s, "%lld", (long long)sluice_clock_now_ms(sluice_clock_monotonic()));
    const char *args_server[7] = {"", "1", "0", "1", limit_s, p_s, r_s};
    const char *args_client[7] = {now_s, "1", "60000", "1", limit_s, p_s, r_s};
    /* decide.lua's: now, cost, ttl grace, the configuration's text (decide.c's
     * "KIND,LIMIT,P,R,PERIOD") */
    char cfg_s[128];
    snprintf(cfg_s, sizeof cfg_s, "1,%s,%s,%s,%d", limit_s, p_s, r_s, PERIOD_MS);
    const char *args_decide[4] = {"", "1", "0", cfg_s};

    /* redis-benchmark's own start-up CPU: a run of one request */
    {
        double v[3];
        for (int i = 0; i < 3; i++) {
            char *a[] = {redis_benchmark_bin, "-h", "127.0.0.1", "-p", server_port_text, "-c", "1", "-n", "1",
                         "--csv", "-t", "ping_inline", NULL};
            static char out[8192];
            struct rusage ru;
            if (run_proc(a, out, sizeof out, &ru) != 0) {
                fprintf(stderr, "bench_redis: redis-benchmark failed:\n%s\n", out);
                return 1;
            }
            v[i] = ru_ns(&ru);
        }
        qsort(v, 3, sizeof v[0], cmp_double);
        rb_start_cpu_ns = v[1];
    }

    /* plain hiredis: argument arrays per key, built in advance */
    {
        struct timeval tv = {1, 0};
        raw_conn = redisConnectWithTimeout("127.0.0.1", server_port, tv);
        if (!raw_conn || raw_conn->err) {
            fprintf(stderr, "bench_redis: connect: %s\n", raw_conn ? raw_conn->errstr : "out of memory");
            return 1;
        }
        redisSetTimeout(raw_conn, (struct timeval){0, 100000}); /* as the store's default */
    }
    static char raw_names[2][N_KEYS][80];
    static const char *raw_argv[2][N_KEYS][11];
    static size_t raw_lens[2][N_KEYS][11];
    for (int s = 0; s < 2; s++) /* 0: decide.lua, 1: the small script */
        for (int i = 0; i < N_KEYS; i++) {
            /* names shaped like the store's: PREFIX{NAME|LEN:KEY} */
            snprintf(raw_names[s][i], sizeof raw_names[s][i], "%s{bench|16:%.16s}", s == 0 ? "rawd:" : "raws:",
                     keys[i]);
            const char *a[11] = {"EVALSHA", s == 0 ? sha_decide : sha_small, "1", raw_names[s][i]};
            for (int j = 0; j < (s == 0 ? 4 : 7); j++) a[4 + j] = s == 0 ? args_decide[j] : args_server[j];
            for (int j = 0; j < (s == 0 ? 8 : 11); j++) {
                raw_argv[s][i][j] = a[j];
                raw_lens[s][i][j] = strlen(a[j]);
            }
        }

    sluice_store *st_server = open_store("?prefix=bsrv:");
    sluice_store *st_client = open_store("?prefix=bcli:&clock=client");
    /* a key denied for the next hour, on one store with the cache of
     * denials and on one without (the same key in Redis) */
    sluice_store *st_denied = open_store("?prefix=bden:"), *st_denied_plain = open_store("?prefix=bden:&deny_cache=0");
    sluice_config deny_cfg = sluice_token_bucket(1, 1, 3600000);
    sluice_policy *deny_pol;
    if (sluice_policy_new("denied", &deny_cfg, 1, &deny_pol) != 0) return 1;
    deny_policy = deny_pol;
    {
        sluice_decision d;
        if (sluice_store_acquire(st_denied_plain, deny_policy, DENIED_KEY, 16, 1, &d) != 0 || !d.allowed) {
            fprintf(stderr, "bench_redis: warm-up of the denied key: %s\n", sluice_store_errmsg(st_denied_plain));
            return 1;
        }
    }

    /* the cases */
#define EVAL_SMALL_S "EVALSHA", sha_small, "1", "small:{bench|17:user:__rand_int__}", \
                     args_server[0], args_server[1], args_server[2], args_server[3], args_server[4], \
                     args_server[5], args_server[6], NULL
#define EVAL_SMALL_C "EVALSHA", sha_small, "1", "smallc:{bench|17:user:__rand_int__}", \
                     args_client[0], args_client[1], args_client[2], args_client[3], args_client[4], \
                     args_client[5], args_client[6], NULL
#define EVAL_DECIDE_S "EVALSHA", sha_decide, "1", "rbd:{bench|17:user:__rand_int__}", \
                      args_decide[0], args_decide[1], args_decide[2], args_decide[3], NULL
    static bcase cases[] = {
        /* 0..2 scale */
        {.label = "redis-benchmark PING_INLINE -P 1", .k = K_RB, .pipeline = 1, .cmdstat = "ping"},
        {.label = "redis-benchmark GET -P 1", .k = K_RB, .pipeline = 1, .cmdstat = "get"},
        {.label = "redis-benchmark GET -P 16", .k = K_RB, .pipeline = BATCH, .cmdstat = "get"},
        /* 3..6 ceiling */
        {.label = "redis-benchmark EVALSHA small -P 1, server clock", .k = K_RB, .pipeline = 1, .cmdstat = "evalsha"},
        {.label = "redis-benchmark EVALSHA small -P 16, server clock", .k = K_RB, .pipeline = BATCH, .cmdstat = "evalsha"},
        {.label = "redis-benchmark EVALSHA small -P 1, client clock", .k = K_RB, .pipeline = 1, .cmdstat = "evalsha"},
        {.label = "redis-benchmark EVALSHA small -P 16, client clock", .k = K_RB, .pipeline = BATCH, .cmdstat = "evalsha"},
        /* 7..10 sluice */
        {.label = "sluice_store_acquire, server clock", .k = K_ONE, .pipeline = 1, .cmdstat = "evalsha"},
        {.label = "sluice_store_acquire_many x16, server clock", .k = K_MANY, .pipeline = BATCH, .cmdstat = "evalsha"},
        {.label = "sluice_store_acquire, clock=client", .k = K_ONE, .pipeline = 1, .cmdstat = "evalsha"},
        {.label = "sluice_store_acquire_many x16, clock=client", .k = K_MANY, .pipeline = BATCH, .cmdstat = "evalsha"},
        /* 11..16 where the time goes */
        {.label = "redis-benchmark EVALSHA decide.lua -P 1", .k = K_RB, .pipeline = 1, .cmdstat = "evalsha"},
        {.label = "redis-benchmark EVALSHA decide.lua -P 16", .k = K_RB, .pipeline = BATCH, .cmdstat = "evalsha"},
        {.label = "hiredis loop EVALSHA decide.lua -P 1", .k = K_RAW, .pipeline = 1, .cmdstat = "evalsha"},
        {.label = "hiredis loop EVALSHA decide.lua -P 16", .k = K_RAW, .pipeline = BATCH, .cmdstat = "evalsha"},
        {.label = "hiredis loop EVALSHA small -P 1", .k = K_RAW, .pipeline = 1, .cmdstat = "evalsha"},
        {.label = "hiredis loop EVALSHA small -P 16", .k = K_RAW, .pipeline = BATCH, .cmdstat = "evalsha"},
        /* 17..18 the verbs, beside 7 */
        {.label = "sluice_store_peek, server clock", .k = K_PEEK, .pipeline = 1, .cmdstat = "evalsha"},
        {.label = "sluice_store_refund, server clock", .k = K_REFUND, .pipeline = 1, .cmdstat = "evalsha"},
        /* 19..20 a hot denied key, with the cache of denials and without */
        {.label = "denied key, deny_cache (default), server clock", .k = K_DENIED, .pipeline = 1, .cmdstat = "evalsha"},
        {.label = "denied key, deny_cache=0, server clock", .k = K_DENIED, .pipeline = 1, .cmdstat = "evalsha"},
    };
    enum { N_CASES = sizeof cases / sizeof cases[0] };
    const char *rb_ping[] = {"-t", "ping_inline", NULL}, *rb_get[] = {"-t", "get", NULL};
    const char *rb_small_s[] = {EVAL_SMALL_S}, *rb_small_c[] = {EVAL_SMALL_C}, *rb_decide_s[] = {EVAL_DECIDE_S};
    const char *const *rb_of[N_CASES] = {rb_ping, rb_get, rb_get, rb_small_s, rb_small_s, rb_small_c,
                                         rb_small_c, [11] = rb_decide_s, [12] = rb_decide_s};
    for (int i = 0; i < N_CASES; i++) {
        if (rb_of[i])
            for (int j = 0; rb_of[i][j]; j++) cases[i].rb_args[j] = rb_of[i][j];
        cases[i].cursor = (unsigned)i * 4099u;
    }
    cases[7].store = cases[8].store = cases[17].store = cases[18].store = st_server;
    cases[9].store = cases[10].store = st_client;
    cases[19].store = st_denied, cases[20].store = st_denied_plain;
    cases[13].raw_argv = cases[14].raw_argv = raw_argv[0];
    cases[13].raw_lens = cases[14].raw_lens = raw_lens[0];
    cases[13].raw_argc = cases[14].raw_argc = 8;
    cases[15].raw_argc = cases[16].raw_argc = 11;
    cases[15].raw_argv = cases[16].raw_argv = raw_argv[1];
    cases[15].raw_lens = cases[16].raw_lens = raw_lens[1];

    /* every key of every family decided once before any timing */
    warm_store(st_server, 1000000); /* a backlog for the refunds to give back from */
    warm_store(st_client, 1);
    warm_rb_keys("small:{bench|17:user:", sha_small, args_server, 7);
    warm_rb_keys("smallc:{bench|17:user:", sha_small, args_client, 7);
    warm_rb_keys("rbd:{bench|17:user:", sha_decide, args_decide, 4);
    for (int s = 0; s < 2; s++)
        for (int i = 0; i < N_KEYS; i++) {
            redisReply *r = redisCommandArgv(raw_conn, s == 0 ? 8 : 11, raw_argv[s][i], raw_lens[s][i]);
            if (!reply_ok(r)) {
                fprintf(stderr, "bench_redis: warm-up of the hiredis keys failed\n");
                return 1;
            }
            freeReplyObject(r);
        }

    /* run order: each sluice case next to the cases it is compared with */
    static const int run_order[N_CASES] = {3, 7, 17, 18, 11, 13, 15, 4, 8, 12, 14, 16, 5, 9, 6, 10, 0, 1, 2, 19, 20};
    for (int i = 0; i < N_CASES; i++) pilot(&cases[run_order[i]]);
    for (int r = 0; r < N_RUNS; r++)
        for (int i = 0; i < N_CASES; i++) timed_run(&cases[run_order[i]]);

    header("scale: the cheapest round trips, one connection (redis-benchmark -c 1)");
    for (int i = 0; i <= 2; i++) row(&cases[i]);
    header("ceiling: EVALSHA of a small decision script (redis-benchmark -c 1 -r 4096)");
    for (int i = 3; i <= 6; i++) row(&cases[i]);
    header("sluice: one thread, one connection (a batch counts 16 decisions)");
    for (int i = 7; i <= 10; i++) row(&cases[i]);
    header("the verbs: one thread, one connection, the acquire row's keys (a call counts 1)");
    row(&cases[7]);
    for (int i = 17; i <= 18; i++) row(&cases[i]);
    header("where the time goes (server clock): sluice's script, and sluice without sluice");
    for (int i = 11; i <= 16; i++) row(&cases[i]);
    header("a hot denied key (token bucket capacity 1, 1 per hour): the cache of denials against a round trip");
    for (int i = 19; i <= 20; i++) row(&cases[i]);

    figures small1 = figures_of(&cases[3]), small16 = figures_of(&cases[4]);
    figures one = figures_of(&cases[7]), many = figures_of(&cases[8]);
    figures dec1 = figures_of(&cases[11]), dec16 = figures_of(&cases[12]);
    figures raw1 = figures_of(&cases[13]), raw16 = figures_of(&cases[14]);
    figures rs1 = figures_of(&cases[15]), rs16 = figures_of(&cases[16]);
    /* medians of each column, so the lines need not add up exactly */
    printf("\n== per decision, server clock, medians (us):                 -P 1 |   x16\n");
    const char *f2 = "%-58s %7.2f | %5.2f\n", *fd = "%-58s %+7.2f | %+5.2f\n";
    printf(f2, "wall: sluice", one.wall_us, many.wall_us);
    printf(f2, "wall: the ceiling (redis-benchmark, small script)", small1.wall_us, small16.wall_us);
    printf(fd, "  the gap", one.wall_us - small1.wall_us, many.wall_us - small16.wall_us);
    printf(fd, "  server: script run time, decide.lua - small (cmd)", dec1.cmd_us - small1.cmd_us,
           dec16.cmd_us - small16.cmd_us);
    printf(fd, "  server: all CPU, sluice - ceiling", one.server_us - small1.server_us,
           many.server_us - small16.server_us);
    printf(fd, "  client CPU: sluice - redis-benchmark (decide.lua)", one.client_us - dec1.client_us,
           many.client_us - dec16.client_us);
    printf(fd, "    of which hiredis loop - redis-benchmark (decide.lua)", raw1.client_us - dec1.client_us,
           raw16.client_us - dec16.client_us);
    printf(fd, "    of which sluice - hiredis loop: sluice's own", one.client_us - raw1.client_us,
           many.client_us - raw16.client_us);
    printf(fd, "wall: sluice - hiredis loop (both decide.lua)", one.wall_us - raw1.wall_us,
           many.wall_us - raw16.wall_us);
    printf(fd, "wall: hiredis loop - redis-benchmark (both small)", rs1.wall_us - small1.wall_us,
           rs16.wall_us - small16.wall_us);

    printf("\n== goals (server clock, the default; decisions/s over the ceiling's, median of the %d runs' "
           "ratios; informational)\n", N_RUNS);
    goal("sluice_store_acquire / redis-benchmark EVALSHA small -P 1", &cases[7], &cases[3], 0.9, 1);
    goal("sluice_store_acquire_many x16 / redis-benchmark EVALSHA small -P 16", &cases[8], &cases[4], 0.8, 1);
    goal("sluice_store_peek / sluice_store_acquire (within 1.2x)", &cases[17], &cases[7], 1 / 1.2, 1);
    goal("sluice_store_refund / sluice_store_acquire (within 1.2x)", &cases[18], &cases[7], 1 / 1.2, 1);
    goal("denied key: deny_cache / deny_cache=0 (the cached denial's speed-up)", &cases[19], &cases[20], 20, 1);
    printf("-- the same with clock=client (not goals)\n");
    goal("sluice_store_acquire / redis-benchmark EVALSHA small -P 1", &cases[9], &cases[5], 0.9, 0);
    goal("sluice_store_acquire_many x16 / redis-benchmark EVALSHA small -P 16", &cases[10], &cases[6], 0.8, 0);
    printf("-- against sluice's own script under the same clients (not goals)\n");
    goal("sluice_store_acquire / redis-benchmark EVALSHA decide.lua -P 1", &cases[7], &cases[11], 0.9, 0);
    goal("sluice_store_acquire_many x16 / redis-benchmark decide.lua -P 16", &cases[8], &cases[12], 0.8, 0);
    goal("sluice_store_acquire / hiredis loop decide.lua -P 1", &cases[7], &cases[13], 0.9, 0);
    goal("sluice_store_acquire_many x16 / hiredis loop decide.lua -P 16", &cases[8], &cases[14], 0.8, 0);

    sluice_stats stats;
    for (int i = 0; i < 2; i++) {
        sluice_store *s = i ? st_client : st_server;
        if (sluice_store_stats(s, &stats) == 0 && (stats.failures || stats.denied)) {
            fprintf(stderr, "bench_redis: store %d: %lld failures, %lld denials\n", i, (long long)stats.failures,
                    (long long)stats.denied);
            failed = 1;
        }
    }
    if (sluice_store_stats(st_denied, &stats) == 0)
        printf("\ndenied key: %lld of %lld denials answered by the cache of denials\n",
               (long long)stats.cached_denials, (long long)stats.denied);
    sluice_store_close(st_server);
    sluice_store_close(st_client);
    sluice_store_close(st_denied);
    sluice_store_close(st_denied_plain);
    sluice_policy_free(deny_pol);
    redisFree(raw_conn);
    sluice_policy_free(pol);
    stop_server();
    printf("\n(%.1f s)\n", (double)(now_ns() - t_start) / 1e9);
    return failed;
}

#endif /* HAVE_HIREDIS */
