/* store/shm/owner.c: locks across processes, named by their owner. A lock
 * word is (start time << 32) | pid, 0 when free, taken with compare-and-
 * swap; a waiter that finds the owner dead (killed with SIGKILL: gone, a
 * zombie, or its pid now another process's) takes the lock over, and is
 * told so, since the owner may have left its work half done. Not covered:
 * processes of different pid namespaces sharing one file. */
#define _GNU_SOURCE
#include "shm.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* This process as a lock word, the start time being the low 32 bits of
 * /proc/PID/stat's field 22 (clock ticks since boot), so that a pid reused
 * by a newer process is not mistaken for the dead owner. Refreshed in a
 * child after fork(): a child locks as itself. */
static _Atomic uint64_t self_id;

/* The state letter and start time in a /proc stat file; 0 when unreadable. */
static int stat_file(const char *path, char *state, uint64_t *start) {
    char buf[512];
    FILE *f = fopen(path, "re");
    if (!f) return 0;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    char *p = strrchr(buf, ')'); /* the command may hold spaces and parens */
    if (!p || p[1] != ' ') return 0;
    *state = p[2];
    for (int field = 2; field < 22 && p; field++) p = strchr(p + 1, ' ');
    *start = p ? strtoull(p + 1, NULL, 10) : 0;
    return p != NULL;
}

/* /proc/PID/stat's state letter and start time; 0 when unreadable. */
static int proc_stat(pid_t pid, char *state, uint64_t *start) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    return stat_file(path, state, start);
}

/* Whether a thread of process pid still runs. A process whose main thread
 * has exited shows state Z while its other threads run; only when every
 * thread is Z or X is it gone. Unreadable: assume one runs. */
static int some_thread_runs(pid_t pid) {
    char path[64];
    snprintf(path, sizeof path, "/proc/%d/task", (int)pid);
    DIR *d = opendir(path);
    if (!d) return 1;
    int runs = 0;
    struct dirent *e;
    while (!runs && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '0' || e->d_name[0] > '9') continue;
        char tpath[128], state;
        uint64_t start;
        snprintf(tpath, sizeof tpath, "/proc/%d/task/%.20s/stat", (int)pid, e->d_name);
        runs = stat_file(tpath, &state, &start) && state != 'Z' && state != 'X';
    }
    closedir(d);
    return runs;
}

static void self_id_refresh(void) {
    char state;
    uint64_t start = 0;
    proc_stat(getpid(), &state, &start);
    atomic_store_explicit(&self_id, (start & 0xffffffffu) << 32 | (uint32_t)getpid(), memory_order_relaxed);
}
static pthread_once_t self_id_once = PTHREAD_ONCE_INIT;
static void self_id_init(void) {
    self_id_refresh();
    pthread_atfork(NULL, NULL, self_id_refresh);
}

uint64_t sluice__shm_self(void) {
    pthread_once(&self_id_once, self_id_init);
    return atomic_load_explicit(&self_id, memory_order_relaxed);
}

/* No such pid, a zombie (killed, not yet reaped: every thread Z), or a
 * newer process with the same pid (its start time differs, also for a pid
 * we may not signal: it belongs to another user now). */
int sluice__shm_owner_dead(uint64_t owner) {
    pid_t pid = (pid_t)(owner & 0xffffffffu);
    if (pid <= 0) return 1; /* no process has it: a damaged word */
    if (kill(pid, 0) == -1 && errno != EPERM) return errno == ESRCH;
    char state;
    uint64_t start;
    if (!proc_stat(pid, &state, &start)) return 0; /* unknown: alive (taking a live owner's lock is worse) */
    if ((owner >> 32) != 0 && (owner >> 32) != (start & 0xffffffffu)) return 1;
    return (state == 'Z' || state == 'X') && !some_thread_runs(pid);
}

int sluice__shm_lock(_Atomic uint64_t *lock) {
    uint64_t me = sluice__shm_self();
    for (unsigned spins = 0;; spins++) {
        uint64_t owner = 0;
        if (atomic_compare_exchange_weak_explicit(lock, &owner, me, memory_order_acquire, memory_order_relaxed))
            return 0;
        if (owner != 0 && owner != me && spins % 64 == 63 && sluice__shm_owner_dead(owner) &&
            atomic_compare_exchange_strong_explicit(lock, &owner, me, memory_order_acquire, memory_order_relaxed))
            return 1; /* its owner died holding it */
        sluice__lock_wait(spins);
    }
}

void sluice__shm_unlock(_Atomic uint64_t *lock) {
    atomic_store_explicit(lock, 0, memory_order_release);
}
