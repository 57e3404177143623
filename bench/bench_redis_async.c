/* bench_redis_async.c: the Redis store's non-blocking calls, pipelined on
 * one connection from one thread, against its blocking calls and against
 * redis-benchmark sending the same EVALSHA (of decide.lua, with the
 * arguments a non-blocking call sends, every log named: read back from
 * SLOWLOG) with the same pipelining, all against one redis-server this
 * program starts on a free loopback port (and stops). The machine's CPUs
 * are shared by this process, the server and redis-benchmark: figures
 * move by +-30% from run to run on 2 shared CPUs.
 *
 * Rows: decisions/s of a token bucket (capacity 10^9: every one admitted)
 * on 4096 keys, server clock; "in flight" is how many calls are kept
 * outstanding (each callback makes the next call), through a poll() loop
 * written here. The ratio column is against redis-benchmark -c 1 -P D on
 * the same server (goal from issue 15: >= 0.8 at 16 and 64).
 *
 * A benchmark, not a test: it reports figures and asserts nothing but
 * that every decision was an enforced admission (else exit 1). Skips
 * (exit 0) when the build has no libsluice-redis or redis-server is not
 * in PATH; the redis-benchmark column is "n/a" without redis-benchmark. */
#define _GNU_SOURCE
#include "sluice.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* hiredis comes with libsluice-redis; every program in bench/ is built even
 * without it (then this one only says so), and its functions are weak,
 * as in bench_redis.c. */
#if defined(__has_include)
#if __has_include(<hiredis/hiredis.h>)
#include <hiredis/hiredis.h>
#define HAVE_HIREDIS 1
#endif
#endif

#ifndef HAVE_HIREDIS
int main(void) {
    printf("bench_redis_async: skipped: hiredis headers not found (Debian: libhiredis-dev)\n");
    return 0;
}
#else
#pragma weak redisConnect
#pragma weak redisvCommand
#pragma weak freeReplyObject
#pragma weak redisFree

#define N_KEYS 4096
#define RUN_MS 1000

static int64_t now_us(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

/* ---- the server ---- */

static pid_t server_pid;
static int port;
static char dir[64] = "/tmp/sluice-bench-async-XXXXXX";

static int free_port(void) {
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof a;
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) || getsockname(fd, (struct sockaddr *)&a, &len)) return -1;
    close(fd);
    return ntohs(a.sin_port);
}

static void stop_server(void) {
    if (server_pid > 0) {
        kill(server_pid, SIGKILL);
        waitpid(server_pid, NULL, 0);
        server_pid = 0;
        char cmd[128];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0) fprintf(stderr, "bench_redis_async: cannot remove %s\n", dir);
    }
}

static redisReply *cmd(const char *fmt, ...) {
    redisContext *c = redisConnect("127.0.0.1", port);
    if (!c || c->err) {
        if (c) redisFree(c);
        return NULL;
    }
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return r;
}

static int start_server(void) {
    if (!mkdtemp(dir) || (port = free_port()) < 0) return -1;
    char port_text[16];
    snprintf(port_text, sizeof port_text, "%d", port);
    server_pid = fork();
    if (server_pid == 0) {
        if (!freopen("/dev/null", "w", stdout)) _exit(127);
        execlp("redis-server", "redis-server", "--port", port_text, "--bind", "127.0.0.1", "--save", "",
               "--appendonly", "no", "--dir", dir, (char *)NULL);
        _exit(127);
    }
    atexit(stop_server);
    for (int i = 0; i < 200; i++) {
        redisReply *r = cmd("PING");
        int ok = r && r->type == REDIS_REPLY_STATUS;
        if (r) freeReplyObject(r);
        if (ok) return 0;
        usleep(10000);
    }
    return -1;
}

/* ---- the calls ---- */

static sluice_store *store;
static sluice_policy *policy;
static char keys[N_KEYS][16];
static long bad;

static void check(int rc, const sluice_decision *d) {
    if (rc != 0 || !d->allowed || !d->enforced) {
        if (bad++ < 3) fprintf(stderr, "bench_redis_async: rc %d allowed %d enforced %d: %s\n", rc, d->allowed,
                               d->enforced, sluice_store_errmsg(store));
    }
}

static double blocking_rate(void) {
    int64_t end = now_us() + RUN_MS * 1000, t0 = now_us();
    long n = 0;
    while (now_us() < end) {
        for (int i = 0; i < 64; i++, n++) {
            sluice_decision d;
            check(sluice_store_acquire(store, policy, keys[n % N_KEYS], strlen(keys[n % N_KEYS]), 1, &d), &d);
        }
    }
    return n / ((now_us() - t0) / 1e6);
}

/* a poll() loop for one store: its fds and its timer */
static struct {
    struct pollfd fds[8];
    int n;
    int64_t timer_at_us; /* -1: disarmed */
} pl = {.timer_at_us = -1};

static int pl_watch(void *user, int fd, int events) {
    (void)user;
    int i = 0;
    while (i < pl.n && pl.fds[i].fd != fd) i++;
    if (!events) {
        if (i < pl.n) pl.fds[i] = pl.fds[--pl.n];
        return 0;
    }
    if (i == pl.n) {
        if (pl.n == 8) return SLUICE_ENOMEM;
        pl.fds[pl.n++].fd = fd;
    }
    pl.fds[i].events = (short)((events & SLUICE_LOOP_READ ? POLLIN : 0) | (events & SLUICE_LOOP_WRITE ? POLLOUT : 0));
    return 0;
}

static void pl_timer(void *user, int64_t ms) {
    (void)user;
    pl.timer_at_us = ms < 0 ? -1 : now_us() + ms * 1000;
}

static void pl_turn(void) {
    struct pollfd p[8];
    int n = pl.n;
    memcpy(p, pl.fds, sizeof p);
    int wait_ms = 100;
    if (pl.timer_at_us >= 0) {
        int64_t left = (pl.timer_at_us - now_us() + 999) / 1000;
        wait_ms = left < 0 ? 0 : left < wait_ms ? (int)left : wait_ms;
    }
    poll(p, (nfds_t)n, wait_ms);
    for (int i = 0; i < n; i++) {
        int ev = (p[i].revents & (POLLIN | POLLERR | POLLHUP) ? SLUICE_LOOP_READ : 0) |
                 (p[i].revents & (POLLOUT | POLLERR | POLLHUP) ? SLUICE_LOOP_WRITE : 0);
        if (ev) sluice_store_loop_ready(store, p[i].fd, ev);
    }
    if (pl.timer_at_us >= 0 && now_us() >= pl.timer_at_us) {
        pl.timer_at_us = -1;
        sluice_store_loop_timeout(store);
    }
}

static long issued, completed, in_flight;
static int64_t stop_at_us;

static void on_decision(void *user, int rc, const sluice_decision *d) {
    (void)user;
    check(rc, d);
    completed++;
    in_flight--;
    if (now_us() < stop_at_us) {
        issued++, in_flight++;
        const char *k = keys[issued % N_KEYS];
        if (sluice_store_acquire_async(store, policy, k, strlen(k), 1, on_decision, NULL)) bad++, in_flight--;
    }
}

static double async_rate(int depth) {
    issued = completed = in_flight = 0;
    int64_t t0 = now_us();
    stop_at_us = t0 + RUN_MS * 1000;
    for (int i = 0; i < depth; i++) {
        issued++, in_flight++;
        const char *k = keys[issued % N_KEYS];
        if (sluice_store_acquire_async(store, policy, k, strlen(k), 1, on_decision, NULL)) bad++, in_flight--;
    }
    while (in_flight > 0) pl_turn();
    return completed / ((now_us() - t0) / 1e6);
}

/* ---- redis-benchmark, the store's own EVALSHA ---- */

static char rb_args[16][160];
static int rb_argc;

/* The arguments of the store's last EVALSHA, from SLOWLOG (every command
 * logged for the one call made here). */
static int capture_evalsha(void) {
    redisReply *r = cmd("CONFIG SET slowlog-log-slower-than 0");
    if (r) freeReplyObject(r);
    if ((r = cmd("SLOWLOG RESET"))) freeReplyObject(r);
    /* one non-blocking call: its EVALSHA names every log (async.c) */
    issued = completed = 0, in_flight = 1, stop_at_us = 0;
    if (sluice_store_acquire_async(store, policy, "captured", 8, 1, on_decision, NULL)) return -1;
    while (in_flight > 0) pl_turn();
    r = cmd("SLOWLOG GET 16");
    rb_argc = 0;
    for (size_t i = 0; r && r->type == REDIS_REPLY_ARRAY && i < r->elements && !rb_argc; i++) {
        redisReply *e = r->element[i];
        if (e->type != REDIS_REPLY_ARRAY || e->elements < 4 || e->element[3]->type != REDIS_REPLY_ARRAY) continue;
        redisReply *argv = e->element[3];
        if (argv->elements < 2 || strcasecmp(argv->element[0]->str, "EVALSHA") || argv->elements > 16) continue;
        for (size_t j = 0; j < argv->elements; j++)
            snprintf(rb_args[rb_argc++], sizeof rb_args[0], "%s", argv->element[j]->str);
    }
    if (r) freeReplyObject(r);
    if ((r = cmd("CONFIG SET slowlog-log-slower-than 10000"))) freeReplyObject(r);
    /* the key, made random over 4096 like the store's */
    for (int j = 0; j < rb_argc; j++) {
        char *at = strstr(rb_args[j], "captured");
        if (at) {
            char rest[160];
            snprintf(rest, sizeof rest, "%s", at + 8);
            snprintf(at, sizeof rb_args[j] - (size_t)(at - rb_args[j]), "__rand_int__%s", rest);
        }
    }
    return rb_argc > 0 ? 0 : -1;
}

/* redis-benchmark -c 1 -P depth of the captured EVALSHA: requests/s, or -1. */
static double rb_rate(int depth) {
    if (!rb_argc) return -1;
    char port_text[16], depth_text[16];
    snprintf(port_text, sizeof port_text, "%d", port);
    snprintf(depth_text, sizeof depth_text, "%d", depth);
    char *argv[40];
    int n = 0;
    argv[n++] = "redis-benchmark", argv[n++] = "-p", argv[n++] = port_text, argv[n++] = "-c", argv[n++] = "1";
    argv[n++] = "-n", argv[n++] = depth >= 16 ? "400000" : "100000";
    argv[n++] = "-r", argv[n++] = "4096", argv[n++] = "-P", argv[n++] = depth_text, argv[n++] = "--csv";
    for (int j = 0; j < rb_argc; j++) argv[n++] = rb_args[j];
    argv[n] = NULL;
    int out[2];
    if (pipe(out)) return -1;
    pid_t pid = fork();
    if (pid == 0) {
        dup2(out[1], 1);
        close(out[0]);
        int null = open("/dev/null", 1);
        if (null >= 0) dup2(null, 2);
        execvp(argv[0], argv);
        _exit(127);
    }
    close(out[1]);
    char text[4096] = {0};
    size_t got = 0;
    ssize_t k;
    while (got < sizeof text - 1 && (k = read(out[0], text + got, sizeof text - 1 - got)) > 0) got += (size_t)k;
    close(out[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return -1;
    /* --csv: a header line, then "NAME","RPS",... (NAME holds commas: the configuration's) */
    char *line = strchr(text, '\n');
    char *end = line ? strstr(line + 1, "\",\"") : NULL;
    return end ? atof(end + 3) : -1;
}

int main(void) {
    if (!redisConnect) {
        printf("bench_redis_async: skipped: built without libsluice-redis\n");
        return 0;
    }
    if (system("command -v redis-server >/dev/null 2>&1") != 0) {
        printf("bench_redis_async: skipped: redis-server not in PATH\n");
        return 0;
    }
    if (start_server()) {
        printf("bench_redis_async: skipped: cannot start redis-server\n");
        return 0;
    }
    char url[128], err[256];
    snprintf(url, sizeof url, "redis://127.0.0.1:%d?prefix=ba:", port);
    if (sluice_store_open_err(url, NULL, &store, err, sizeof err)) {
        printf("bench_redis_async: skipped: %s\n", err);
        return 0;
    }
    if (sluice_policy_parse("b", "token-bucket capacity=1000000000 rate=10/h", &policy, err, sizeof err)) {
        fprintf(stderr, "bench_redis_async: %s\n", err);
        return 1;
    }
    for (int i = 0; i < N_KEYS; i++) snprintf(keys[i], sizeof keys[i], "key%d", i);
    sluice_loop loop = SLUICE_LOOP_INIT;
    loop.watch = pl_watch;
    loop.timer = pl_timer;
    if (sluice_store_attach_loop(store, &loop)) {
        fprintf(stderr, "bench_redis_async: %s\n", sluice_store_errmsg(store));
        return 1;
    }
    int have_rb = system("command -v redis-benchmark >/dev/null 2>&1") == 0 && capture_evalsha() == 0;
    printf("== bench_redis_async: one thread, one connection, token bucket on %d keys, server clock\n", N_KEYS);
    printf("%-44s %12s %14s %7s\n", "", "decisions/s", "redis-bench/s", "ratio");
    printf("%-44s %12.0f %14s %7s\n", "blocking sluice_store_acquire", blocking_rate(), "", "");
    static const int depths[] = {1, 16, 64};
    for (size_t i = 0; i < sizeof depths / sizeof depths[0]; i++) {
        char label[64];
        snprintf(label, sizeof label, "async, %d in flight", depths[i]);
        double a = async_rate(depths[i]);
        double rb = have_rb ? rb_rate(depths[i]) : -1;
        if (rb > 0) printf("%-44s %12.0f %14.0f %7.2f\n", label, a, rb, a / rb);
        else printf("%-44s %12.0f %14s %7s\n", label, a, "n/a", "");
    }
    sluice_store_close(store);
    sluice_policy_free(policy);
    stop_server();
    if (bad) {
        fprintf(stderr, "bench_redis_async: %ld decisions were not enforced admissions\n", bad);
        return 1;
    }
    return 0;
}
#endif /* HAVE_HIREDIS */
