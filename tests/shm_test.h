/* shm_test.h: what the two shm test files share (test_store_shm.c, the
 * quick tests; test_store_shm_slow.c, those of many processes, kills and
 * faults): one mkdtemp directory per run, removed at exit; store URLs and
 * files read and written by hand; a store opened in a child (so that a
 * crash is a failed check); the step hooks that stop or kill a process
 * inside a decision. Offsets into the file are those of
 * src/store/shm/format.h (FILE_* below). */
#ifndef SLUICE_TEST_SHM_H
#define SLUICE_TEST_SHM_H

#define _GNU_SOURCE
#include "check.h"
#include "store_util.h"
#include "internal.h"
#include "store/shm/format.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The file layout (src/store/shm/format.h), for the tests that write a
 * header or a lock word by hand. */
#define FILE_HEADER_BYTES SHM_HEADER_BYTES
#define FILE_VERSION_OFF offsetof(shm_file_header, version)
#define FILE_LAYOUT_VERSION SHM_LAYOUT_VERSION
#define FILE_BOOT_ID_OFF offsetof(shm_file_header, boot_id)
#define FILE_BOOT_ID_LEN 40

static inline double scale(void) {
    return test_scale_sanitized(0.1);
}

static inline int64_t mono_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- the temp directory: one per run, emptied and removed at exit ---- */

static char tmp_dir[64];
static pid_t tmp_owner;

static inline void tmp_remove(void) {
    if (!tmp_dir[0] || getpid() != tmp_owner) return;
    DIR *d = opendir(tmp_dir);
    if (d) {
        struct dirent *e;
        char p[512];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", tmp_dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(tmp_dir);
}

static inline const char *tmp(void) {
    if (!tmp_dir[0]) {
        strcpy(tmp_dir, "/tmp/sluice-shm-XXXXXX");
        if (!mkdtemp(tmp_dir)) {
            perror("mkdtemp");
            exit(2);
        }
        tmp_owner = getpid();
        atexit(tmp_remove);
    }
    return tmp_dir;
}

/* The path of a file in the temp dir, with no such file yet. */
static inline void tmp_path(char *out, size_t len, const char *name) {
    snprintf(out, len, "%s/%s", tmp(), name);
    unlink(out); /* every test starts from no file */
}

/* ---- helpers ---- */


static inline sluice_store *open_url(const char *url) {
    sluice_store *s = NULL;
    char err[256];
    if (sluice_store_open_err(url, NULL, &s, err, sizeof err)) fprintf(stderr, "%s: %s\n", url, err);
    return s;
}

/* "shm:PATH?query" (query may be "") */
static inline void shm_url(char *out, size_t len, const char *path, const char *query) {
    snprintf(out, len, "shm:%s%s%s", path, *query ? "?" : "", query);
}

/* A store on a new file name in the test directory (query: as shm_url's);
 * its path and URL in path and url. */
static inline sluice_store *open_fresh(const char *name, const char *query, char path[256], char url[400]) {
    tmp_path(path, 256, name);
    shm_url(url, 400, path, query);
    return open_url(url);
}




/* The whole file, malloc'd (NULL when it cannot be read); *len its size. */
static inline uint8_t *slurp(const char *path, size_t *len) {
    int fd = open(path, O_RDONLY);
    if (fd < 0) return NULL;
    struct stat st;
    if (fstat(fd, &st) != 0) {
        close(fd);
        return NULL;
    }
    uint8_t *b = malloc((size_t)st.st_size + 1);
    size_t got = 0;
    while (b && got < (size_t)st.st_size) {
        ssize_t n = read(fd, b + got, (size_t)st.st_size - got);
        if (n <= 0) break;
        got += (size_t)n;
    }
    close(fd);
    *len = got;
    return b;
}

static inline int spit(const char *path, const void *data, size_t len, mode_t mode) {
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, mode);
    if (fd < 0) return -1;
    int ok = write(fd, data, len) == (ssize_t)len;
    close(fd);
    return ok ? 0 : -1;
}

static inline int pwrite_at(const char *path, off_t off, const void *data, size_t len) {
    int fd = open(path, O_WRONLY);
    if (fd < 0) return -1;
    int ok = pwrite(fd, data, len, off) == (ssize_t)len;
    close(fd);
    return ok ? 0 : -1;
}

/* The geometry of the store file at path (format.h), from its header. */
static inline shm_geometry file_geometry(const char *path) {
    shm_geometry g;
    memset(&g, 0, sizeof g);
    shm_file_header h;
    int fd = open(path, O_RDONLY);
    if (fd >= 0 && pread(fd, &h, sizeof h, 0) == (ssize_t)sizeof h)
        shm_geometry_of(&g, h.buckets * h.slots_per_bucket, h.key_bytes, h.state_bytes, h.overflow_bytes);
    if (fd >= 0) close(fd);
    return g;
}

static inline int write_all(int fd, const void *buf, size_t len) {
    const uint8_t *p = buf;
    while (len) {
        ssize_t n = write(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static inline int read_all(int fd, void *buf, size_t len) {
    uint8_t *p = buf;
    while (len) {
        ssize_t n = read(fd, p, len);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return -1;
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* Opens url in a child process (so that a crash is a failed check, not the
 * end of this program) and reports what happened: *rc and the message;
 * returns 0 when the child exited normally, else the signal that killed it. */
typedef struct {
    int rc;
    char err[256];
    sluice_stats st;
} open_report;

static inline int open_in_child(const char *url, open_report *rep) {
    int fds[2];
    memset(rep, 0, sizeof *rep);
    if (pipe(fds) != 0) return -1;
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        close(fds[0]);
        alarm(20);
        open_report r;
        memset(&r, 0, sizeof r);
        sluice_store *s = NULL;
        r.rc = sluice_store_open_err(url, NULL, &s, r.err, sizeof r.err);
        if (s) sluice_store_stats(s, &r.st);
        sluice_store_close(s);
        write_all(fds[1], &r, sizeof r);
        _exit(0);
    }
    close(fds[1]);
    int got = read_all(fds[0], rep, sizeof *rep);
    close(fds[0]);
    int status = 0;
    waitpid(pid, &status, 0);
    if (WIFSIGNALED(status)) return WTERMSIG(status);
    return got == 0 ? 0 : -1;
}

/* A copy of the file at path, at copy (mode 0600): the same seed, so the
 * same keys land in the same slots. 0 or -1. */
static inline int copy_file(const char *path, const char *copy) {
    FILE *in = fopen(path, "rb");
    int fd = open(copy, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    FILE *out = fd >= 0 ? fdopen(fd, "wb") : NULL;
    int ok = in && out;
    char buf[65536];
    for (size_t n; ok && (n = fread(buf, 1, sizeof buf, in)) > 0;) ok = fwrite(buf, 1, n, out) == n;
    if (in) fclose(in);
    if (out) ok = (fclose(out) == 0) && ok;
    else if (fd >= 0) close(fd);
    return ok ? 0 : -1;
}

/* Opens the file in a child: SLUICE_EINVAL with a message containing says,
 * no crash, and the file's bytes, owner and mode as they were. */
static inline void refuse_file(const char *path, const char *says) {
    size_t n0 = 0, n1 = 0;
    struct stat s0, s1;
    uint8_t *before = slurp(path, &n0);
    REQUIRE(before && stat(path, &s0) == 0);
    char url[320];
    shm_url(url, sizeof url, path, "");
    open_report rep;
    int sig = open_in_child(url, &rep);
    if (sig) fprintf(stderr, "%s: opening it killed the process (signal %d: %s)\n", path, sig, strsignal(sig));
    CHECK_EQ(sig, 0);
    CHECK_EQ(rep.rc, SLUICE_EINVAL);
    if (!strstr(rep.err, says)) fprintf(stderr, "%s: message \"%s\" lacks \"%s\"\n", path, rep.err, says);
    CHECK(strstr(rep.err, says) != NULL);
    uint8_t *after = slurp(path, &n1);
    CHECK(stat(path, &s1) == 0 && s1.st_uid == s0.st_uid && s1.st_mode == s0.st_mode);
    if (!after || n0 != n1 || memcmp(before, after, n0))
        fprintf(stderr, "%s: the file changed (%zu bytes, now %zu)\n", path, n0, n1);
    CHECK(after && n0 == n1 && !memcmp(before, after, n0));
    free(before);
    free(after);
}

/* A valid file with some state, to damage. */
static inline void make_valid(const char *path) {
    char url[320];
    shm_url(url, sizeof url, path, "max_keys=16");
    sluice_store *s = open_url(url);
    sluice_policy *p = policy("v", "token-bucket capacity=3 rate=1/s");
    sluice_decision d;
    if (s && p) sluice_store_acquire_at(s, p, "key", 3, 1, 0, &d);
    sluice_store_close(s);
    sluice_policy_free(p);
}

static int stop_at_step;
static inline void stop_here(int step) {
    if (step == stop_at_step) {
        stop_at_step = 0;
        raise(SIGSTOP);
    }
}

static inline void die_here(int step) {
    if (step == stop_at_step) raise(SIGKILL);
}

/* In a child: one decision on key k of policy (name, spec) at now_ms,
 * SIGKILLed at the given step of the shm store (sluice__shm_step_hook).
 * Returns whether it died there. */
static inline int killed_at_step(const char *url, const char *name, const char *spec, const char *k, int64_t now_ms,
                          int step) {
    fflush(NULL);
    pid_t a = fork();
    if (a < 0) return 0;
    if (a == 0) {
        sluice_store *sa = open_url(url);
        sluice_policy *pa = policy(name, spec);
        stop_at_step = step;
        sluice__shm_step_hook = die_here;
        sluice_decision d;
        if (sa && pa) sluice_store_acquire_at(sa, pa, k, strlen(k), 1, now_ms, &d);
        _exit(0);
    }
    int status = 0;
    return waitpid(a, &status, 0) == a && WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL;
}

/* A one-bucket shm file named name (its URL in url), memory:, and the
 * policy spec named pname: 0 when one of them fails. */
static inline int open_beside_memory(const char *name, const char *pname, const char *spec, char url[400],
                              sluice_store **s, sluice_store **mem, sluice_policy **p) {
    char path[256];
    *s = open_fresh(name, "max_keys=16", path, url), *mem = open_url("memory:"), *p = policy(pname, spec);
    return *s && *mem && *p;
}

static inline int64_t elapsed_ms_since(int64_t t0) {
    return mono_ms() - t0;
}

#endif /* SLUICE_TEST_SHM_H */
