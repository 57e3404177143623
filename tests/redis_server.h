/* redis_server.h: real redis-server processes for tests, started and stopped
 * by the test itself.
 *
 *   rs_group g;
 *   rs_group_open(&g);                 a temporary directory for the servers
 *   int a = rs_group_add(&g, 0);        a server on a free loopback port
 *   ... g.s[a].port ...
 *   rs_kill(&g.s[a], SIGKILL); rs_restart(&g, a);   faults
 *   rs_group_close(&g);                 kill + waitpid every server, rm -rf
 *
 * Servers run as
 *   redis-server --port P --bind 127.0.0.1 --save '' --appendonly no --dir TMP
 * (plus --cluster-enabled yes --cluster-config-file nodes-P.conf for cluster
 * nodes; rs_cluster_create() joins them with redis-cli --cluster create and
 * waits for cluster_state:ok). Free ports come from binding port 0 and
 * reading the port back (for cluster nodes P + 10000, the bus port, must be
 * free too). Readiness is PING answered, polled in a bounded loop.
 *
 * Cleanup happens even when a check fails: every open group is recorded, and
 * an atexit() handler, SIGABRT/SIGTERM/SIGINT handlers and (in sanitizer
 * builds) the sanitizer's death callback stop its servers and remove its
 * directory; each server also gets PR_SET_PDEATHSIG, so it
 * dies with the test process whatever kills it. Forked children of the test
 * never clean up (only the process that opened a group does).
 *
 * REDIS_SERVER and REDIS_CLI in the environment override the programs'
 * names (default: redis-server and redis-cli from PATH). */
#ifndef SLUICE_TEST_REDIS_SERVER_H
#define SLUICE_TEST_REDIS_SERVER_H

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
#include <sanitizer/common_interface_defs.h> /* a sanitizer's report ends in _exit */
#define RS_SANITIZED 1
#endif

#define RS_GROUP_MAX 8  /* servers per group */
#define RS_GROUPS_MAX 8 /* groups open at once */

typedef struct {
    pid_t pid; /* 0: not running */
    int port;
    int cluster;
    char id[48]; /* cluster node id (after rs_cluster_create) */
} rs_server;

typedef struct {
    char dir[128];
    int n;
    rs_server s[RS_GROUP_MAX];
} rs_group;

static rs_group *rs_open_[RS_GROUPS_MAX];
static pid_t rs_owner_; /* the process that opened groups */

static int64_t rs_now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void rs_sleep_ms(int64_t ms) {
    struct timespec ts = {(time_t)(ms / 1000), (long)(ms % 1000) * 1000000L};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

static const char *rs_program_(const char *env, const char *dflt) {
    const char *p = getenv(env);
    return p && *p ? p : dflt;
}

/* ---- ports ---- */

/* A socket bound to 127.0.0.1:port (0: any free port), or -1. */
static int rs_bind_(int port) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof a);
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons((uint16_t)port);
    if (bind(fd, (struct sockaddr *)&a, sizeof a) != 0) {
        close(fd);
        return -1;
    }
    return fd;
}

static int rs_port_of_(int fd) {
    struct sockaddr_in a;
    socklen_t len = sizeof a;
    if (getsockname(fd, (struct sockaddr *)&a, &len) != 0) return -1;
    return ntohs(a.sin_port);
}

/* A free loopback port (the kernel's choice for port 0); with bus, one whose
 * port + 10000 is free as well. -1 when none was found. */
static int rs_free_port(int bus) {
    for (int tries = 0; tries < 200; tries++) {
        int fd = rs_bind_(0);
        if (fd < 0) return -1;
        int port = rs_port_of_(fd);
        int ok = port > 0;
        if (ok && bus) {
            int fd2 = port + 10000 <= 65535 ? rs_bind_(port + 10000) : -1;
            ok = fd2 >= 0;
            if (fd2 >= 0) close(fd2);
        }
        close(fd);
        if (ok) return port;
    }
    return -1;
}

/* ---- talking to a server ---- */

static redisContext *rs_connect(int port, int64_t timeout_ms) {
    struct timeval tv = {(time_t)(timeout_ms / 1000), (suseconds_t)(timeout_ms % 1000) * 1000};
    redisContext *c = redisConnectWithTimeout("127.0.0.1", port, tv);
    if (!c) return NULL;
    if (c->err) {
        redisFree(c);
        return NULL;
    }
    redisSetTimeout(c, tv);
    return c;
}

/* One command (argv form, binary safe) on a new connection; the reply or
 * NULL. Free it with freeReplyObject. */
static redisReply *rs_argv(int port, int argc, const char **argv, const size_t *lens) {
    redisContext *c = rs_connect(port, 5000);
    if (!c) return NULL;
    redisReply *r = redisCommandArgv(c, argc, argv, lens);
    redisFree(c);
    return r;
}

/* One command, printf style (hiredis's format: %s, %b for binary). */
static redisReply *rs_cmd(int port, const char *fmt, ...) {
    redisContext *c = rs_connect(port, 5000);
    if (!c) return NULL;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    redisFree(c);
    return r;
}

/* Runs a command and says whether it answered without an error; prints the
 * error when it did not. */
static int rs_ok(int port, const char *fmt, ...) {
    redisContext *c = rs_connect(port, 5000);
    if (!c) {
        fprintf(stderr, "redis %d: cannot connect\n", port);
        return 0;
    }
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    int ok = r && r->type != REDIS_REPLY_ERROR;
    if (!ok) fprintf(stderr, "redis %d: %s: %s\n", port, fmt, r ? r->str : c->errstr);
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok;
}

/* An integer reply (-1 on anything else). */
static long long rs_int(int port, const char *fmt, ...) {
    redisContext *c = rs_connect(port, 5000);
    if (!c) return -1;
    va_list ap;
    va_start(ap, fmt);
    redisReply *r = redisvCommand(c, fmt, ap);
    va_end(ap);
    long long v = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r) freeReplyObject(r);
    redisFree(c);
    return v;
}

/* How many times the server at port ran cmd ("evalsha", "zadd"), from INFO
 * commandstats (0 when never), or -1. */
static inline long long rs_calls(int port, const char *cmd) { /* inline: not every test uses it */
    redisReply *r = rs_cmd(port, "INFO commandstats");
    long long n = -1;
    char want[64];
    snprintf(want, sizeof want, "cmdstat_%s:calls=", cmd);
    if (r && r->type == REDIS_REPLY_STRING) {
        const char *at = strstr(r->str, want);
        n = at ? atoll(at + strlen(want)) : 0;
    }
    if (r) freeReplyObject(r);
    return n;
}

static int rs_ping(int port) {
    redisContext *c = rs_connect(port, 200);
    if (!c) return 0;
    redisReply *r = redisCommand(c, "PING");
    int ok = r && r->type == REDIS_REPLY_STATUS && !strcmp(r->str, "PONG");
    if (r) freeReplyObject(r);
    redisFree(c);
    return ok;
}

/* ---- processes ---- */

/* rm -rf dir (a server's directory holds files only: logs, nodes-P.conf) */
static void rs_rmdir_(const char *dir) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char path[512];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            if (remove(path) != 0 && errno == ENOTEMPTY) rs_rmdir_(path);
        }
        closedir(d);
    }
    rmdir(dir);
}

static void rs_stop_(rs_server *s, int sig) {
    if (s->pid > 0) {
        kill(s->pid, SIGCONT); /* a stopped server must run to die of SIGTERM */
        kill(s->pid, sig);
        while (waitpid(s->pid, NULL, 0) < 0 && errno == EINTR) {
        }
        s->pid = 0;
    }
}

static void rs_cleanup_all_(void) {
    if (getpid() != rs_owner_) return; /* a forked child: not ours to clean */
    for (int g = 0; g < RS_GROUPS_MAX; g++) {
        rs_group *grp = rs_open_[g];
        if (!grp) continue;
        for (int i = 0; i < grp->n; i++) rs_stop_(&grp->s[i], SIGKILL);
        if (grp->dir[0]) rs_rmdir_(grp->dir);
        rs_open_[g] = NULL;
    }
}

static void rs_on_signal_(int sig) {
    rs_cleanup_all_();
    signal(sig, SIG_DFL);
    raise(sig);
}

static void rs_install_cleanup_(void) {
    static int done;
    if (done) return;
    done = 1;
    rs_owner_ = getpid();
    atexit(rs_cleanup_all_);
#ifdef RS_SANITIZED
    __sanitizer_set_death_callback(rs_cleanup_all_);
#endif
    signal(SIGABRT, rs_on_signal_);
    signal(SIGTERM, rs_on_signal_);
    signal(SIGINT, rs_on_signal_);
    signal(SIGPIPE, SIG_IGN); /* writes to a killed server fail with EPIPE */
}

/* A temporary directory for a group of servers: 0, or -1. */
static int rs_group_open(rs_group *g) {
    rs_install_cleanup_();
    memset(g, 0, sizeof *g);
    const char *tmp = getenv("TMPDIR");
    snprintf(g->dir, sizeof g->dir, "%s/sluice-redis.XXXXXX", tmp && *tmp ? tmp : "/tmp");
    if (!mkdtemp(g->dir)) {
        fprintf(stderr, "mkdtemp %s: %s\n", g->dir, strerror(errno));
        g->dir[0] = 0;
        return -1;
    }
    for (int i = 0; i < RS_GROUPS_MAX; i++)
        if (!rs_open_[i]) {
            rs_open_[i] = g;
            return 0;
        }
    fprintf(stderr, "rs_group_open: too many groups open\n");
    return -1;
}

/* Runs argv[0] with argv, its output into logfile; its pid, or -1. */
static pid_t rs_spawn_(char *const argv[], const char *logfile) {
    fflush(NULL);
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid != 0) return pid;
    /* the child: die with the test process, whatever kills it */
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(126);
    int fd = open(logfile, O_WRONLY | O_CREAT | O_APPEND, 0644);
    if (fd >= 0) {
        dup2(fd, 1);
        dup2(fd, 2);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    for (int i = 3; i < 1024; i++) close(i); /* no connections of the test */
    signal(SIGPIPE, SIG_DFL);
    signal(SIGABRT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    execvp(argv[0], argv);
    fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
    _exit(127);
}

/* Starts (or starts again) server i of g on its port and waits until it
 * answers PING. 0, or -1 (the server then is not running). */
static int rs_start_(rs_group *g, int i) {
    rs_server *s = &g->s[i];
    char port[16], conf[64], log[256];
    snprintf(port, sizeof port, "%d", s->port);
    snprintf(conf, sizeof conf, "nodes-%d.conf", s->port);
    snprintf(log, sizeof log, "%s/redis-%d.log", g->dir, s->port);
    char *argv[24];
    int n = 0;
    argv[n++] = (char *)rs_program_("REDIS_SERVER", "redis-server");
    argv[n++] = "--port", argv[n++] = port;
    argv[n++] = "--bind", argv[n++] = "127.0.0.1";
    argv[n++] = "--save", argv[n++] = "";
    argv[n++] = "--appendonly", argv[n++] = "no";
    argv[n++] = "--dir", argv[n++] = g->dir;
    argv[n++] = "--hz", argv[n++] = "50"; /* active expiry 5x as often */
    argv[n++] = "--enable-debug-command", argv[n++] = "local"; /* DEBUG SLEEP: a server busy past a timeout */
    if (s->cluster) {
        argv[n++] = "--cluster-enabled", argv[n++] = "yes";
        argv[n++] = "--cluster-config-file", argv[n++] = conf;
        argv[n++] = "--cluster-node-timeout", argv[n++] = "5000";
        /* a master that gives its last slot away stays a master (else it
         * turns into a replica of the taker, mid-test) */
        argv[n++] = "--cluster-allow-replica-migration", argv[n++] = "no";
    }
    argv[n] = NULL;
    s->pid = rs_spawn_(argv, log);
    if (s->pid < 0) {
        s->pid = 0;
        return -1;
    }
    /* bounded wait for a real external process: 10 s at most, polled */
    int64_t deadline = rs_now_ms() + 10000;
    while (rs_now_ms() < deadline) {
        if (rs_ping(s->port)) return 0;
        int status;
        if (waitpid(s->pid, &status, WNOHANG) == s->pid) { /* it died (port taken?) */
            s->pid = 0;
            return -1;
        }
        rs_sleep_ms(5);
    }
    fprintf(stderr, "redis-server on port %d did not answer PING in 10 s\n", s->port);
    rs_stop_(s, SIGKILL);
    return -1;
}

/* Adds a server (a cluster node when cluster) on a free port and starts it.
 * Its index in g->s, or -1. */
static int rs_group_add(rs_group *g, int cluster) {
    if (g->n == RS_GROUP_MAX) return -1;
    int i = g->n;
    for (int tries = 0; tries < 5; tries++) {
        memset(&g->s[i], 0, sizeof g->s[i]);
        g->s[i].cluster = cluster;
        g->s[i].port = rs_free_port(cluster);
        if (g->s[i].port < 0) return -1;
        g->n = i + 1; /* recorded before it runs: cleanup sees it */
        if (rs_start_(g, i) == 0) return i;
        g->n = i; /* another process took the port first: another one */
    }
    fprintf(stderr, "cannot start redis-server (see %s/redis-*.log)\n", g->dir);
    return -1;
}

/* Sends sig to server i (SIGKILL: it dies, and is reaped; SIGSTOP, SIGCONT:
 * it pauses or resumes). */
static void rs_signal(rs_group *g, int i, int sig) {
    rs_server *s = &g->s[i];
    if (s->pid <= 0) return;
    if (sig == SIGKILL || sig == SIGTERM) rs_stop_(s, sig);
    else kill(s->pid, sig);
}

/* Starts server i again on the same port (empty: nothing was saved). */
static int rs_restart(rs_group *g, int i) {
    rs_stop_(&g->s[i], SIGKILL);
    return rs_start_(g, i);
}

/* Stops every server of g (kill + waitpid) and removes its directory. */
static void rs_group_close(rs_group *g) {
    for (int i = 0; i < g->n; i++) rs_stop_(&g->s[i], SIGKILL);
    if (g->dir[0]) rs_rmdir_(g->dir);
    g->dir[0] = 0;
    for (int i = 0; i < RS_GROUPS_MAX; i++)
        if (rs_open_[i] == g) rs_open_[i] = NULL;
}

/* ---- cluster ---- */

/* Whether CLUSTER INFO of port says cluster_state:ok (and all slots ok). */
static int rs_cluster_ok(int port) {
    redisReply *r = rs_cmd(port, "CLUSTER INFO");
    int ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, "cluster_state:ok") &&
             strstr(r->str, "cluster_slots_ok:16384");
    if (r) freeReplyObject(r);
    return ok;
}

/* Whether the node at port sees n masters, every one connected and out of
 * handshake (CLUSTER NODES), and says cluster_state:ok. */
static int rs_cluster_settled(int port, int n) {
    if (!rs_cluster_ok(port)) return 0;
    redisReply *r = rs_cmd(port, "CLUSTER NODES");
    int masters = 0, bad = 0;
    if (r && r->type == REDIS_REPLY_STRING) {
        for (char *line = r->str; line && *line;) {
            char *end = strchr(line, '\n');
            if (end) *end = 0;
            if (*line) {
                if (strstr(line, "master") && strstr(line, " connected")) masters++;
                if (strstr(line, "handshake") || strstr(line, "noaddr") || strstr(line, "fail")) bad++;
            }
            line = end ? end + 1 : NULL;
        }
    }
    if (r) freeReplyObject(r);
    return masters == n && !bad;
}

/* Waits (bounded, 20 s) until every server of g is settled with g->n
 * masters. 0, or -1. */
static int rs_cluster_wait(rs_group *g) {
    int64_t deadline = rs_now_ms() + 20000;
    for (;;) {
        int ok = 1;
        for (int i = 0; i < g->n && ok; i++) ok = rs_cluster_settled(g->s[i].port, g->n);
        if (ok) return 0;
        if (rs_now_ms() > deadline) {
            fprintf(stderr, "cluster of %d not settled after 20 s\n", g->n);
            return -1;
        }
        rs_sleep_ms(20);
    }
}

/* The node id of a cluster node into out (41 bytes): 0 or -1. */
static int rs_cluster_myid(int port, char *out, size_t len) {
    redisReply *r = rs_cmd(port, "CLUSTER MYID");
    int ok = r && r->type == REDIS_REPLY_STRING && r->len < len;
    if (ok) memcpy(out, r->str, r->len + 1);
    if (r) freeReplyObject(r);
    return ok ? 0 : -1;
}

/* Joins every (cluster) server of g into one cluster of masters with
 * redis-cli --cluster create, then waits (bounded) until every node says
 * cluster_state:ok and knows every other. 0, or -1. */
static int rs_cluster_create(rs_group *g) {
    char *argv[4 + RS_GROUP_MAX + 4];
    char addrs[RS_GROUP_MAX][32], log[256];
    int n = 0;
    argv[n++] = (char *)rs_program_("REDIS_CLI", "redis-cli");
    argv[n++] = "--cluster", argv[n++] = "create";
    for (int i = 0; i < g->n; i++) {
        snprintf(addrs[i], sizeof addrs[i], "127.0.0.1:%d", g->s[i].port);
        argv[n++] = addrs[i];
    }
    argv[n++] = "--cluster-replicas", argv[n++] = "0";
    argv[n++] = "--cluster-yes";
    argv[n] = NULL;
    snprintf(log, sizeof log, "%s/cluster-create.log", g->dir);
    pid_t pid = rs_spawn_(argv, log);
    if (pid < 0) return -1;
    int status = 0;
    while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
    }
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        fprintf(stderr, "redis-cli --cluster create failed (see %s)\n", log);
        return -1;
    }
    if (rs_cluster_wait(g)) return -1;
    for (int i = 0; i < g->n; i++)
        if (rs_cluster_myid(g->s[i].port, g->s[i].id, sizeof g->s[i].id)) return -1;
    return 0;
}

#endif
