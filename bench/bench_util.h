/* bench_util.h: the timing harness the benchmarks share: a monotonic ns
 * clock, pinning the (at most two) workers one per CPU, running n operations
 * on one or two threads started together, and the result of a case. Include
 * it after <pthread.h>, <sched.h>, <stdatomic.h>, <stdio.h>, <stdlib.h> and
 * <time.h>, with _GNU_SOURCE defined. */
#ifndef SLUICE_BENCH_UTIL_H
#define SLUICE_BENCH_UTIL_H

#define BENCH_MAYBE_UNUSED __attribute__((unused))

BENCH_MAYBE_UNUSED static int64_t now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

static inline void cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

/* The CPUs workers are pinned to: the first two this process may use (the
 * benchmark's main sets them). */
static int n_cpus, cpu_of[2];

BENCH_MAYBE_UNUSED static void pin_to(int i) {
    if (n_cpus < 2) return;
    cpu_set_t set;
    CPU_ZERO(&set);
    CPU_SET(cpu_of[i], &set);
    pthread_setaffinity_np(pthread_self(), sizeof set, &set); /* best effort */
}

/* Fills cpu_of with the first two CPUs this process may run on. */
BENCH_MAYBE_UNUSED static void pick_cpus(void) {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        for (int cpu = 0; cpu < CPU_SETSIZE && n_cpus < 2; cpu++)
            if (CPU_ISSET(cpu, &set)) cpu_of[n_cpus++] = cpu;
}

static void *bench_no_op(void *arg) {
    return arg;
}

/* Makes the process multi-threaded (glibc skips the atomics of an
 * uncontended pthread mutex while a process has never had a second thread,
 * which no process sharing a limiter or store is), then picks the CPUs and
 * pins the calling thread to the first. Exits on failure. */
BENCH_MAYBE_UNUSED static void bench_setup_threads(void) {
    pthread_t th;
    if (pthread_create(&th, NULL, bench_no_op, NULL) != 0 || pthread_join(th, NULL) != 0) {
        fprintf(stderr, "bench: pthread_create failed\n");
        exit(1);
    }
    pick_cpus();
    pin_to(0);
}

/* Runs n operations on thread tid (0 or 1) of nthreads. */
typedef void (*work_fn)(void *ctx, int tid, uint64_t n);

typedef struct {
    work_fn fn;
    void *ctx;
    int tid;
    uint64_t n;
    atomic_int *arrived;
    int64_t t0, t1;
} worker;

BENCH_MAYBE_UNUSED static void *worker_main(void *arg) {
    worker *w = arg;
    pin_to(w->tid);
    atomic_fetch_add(w->arrived, 1);
    for (unsigned i = 0; atomic_load(w->arrived) < 2; i++) {
        if (i < 1000) cpu_relax();
        else sched_yield();
    }
    w->t0 = now_ns();
    w->fn(w->ctx, w->tid, w->n);
    w->t1 = now_ns();
    return NULL;
}

/* Wall ns for n operations on each of nthreads threads. With 2, from the
 * first thread's start to the last one's end (both start together). */
BENCH_MAYBE_UNUSED static int64_t timed(work_fn fn, void *ctx, int nthreads, uint64_t n) {
    if (nthreads == 1) {
        int64_t t0 = now_ns();
        fn(ctx, 0, n);
        return now_ns() - t0;
    }
    atomic_int arrived = 0;
    worker w[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        w[i] = (worker){.fn = fn, .ctx = ctx, .tid = i, .n = n, .arrived = &arrived};
        if (pthread_create(&th[i], NULL, worker_main, &w[i]) != 0) {
            fprintf(stderr, "bench: pthread_create failed\n");
            exit(1);
        }
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    int64_t t0 = w[0].t0 < w[1].t0 ? w[0].t0 : w[1].t0;
    int64_t t1 = w[0].t1 > w[1].t1 ? w[0].t1 : w[1].t1;
    return t1 - t0;
}

typedef struct {
    double med, min, spread; /* ns per operation; spread as a fraction */
    uint64_t ops;            /* operations run in all, pilot included */
} result;

BENCH_MAYBE_UNUSED static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

#endif
