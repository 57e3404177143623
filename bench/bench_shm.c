/* bench_shm.c: what one keyed decision costs in the shared-memory store
 * (shm:PATH), next to the in-process store (memory:) doing the same work.
 *
 *   make bench              builds (-O2) and runs every program in bench/
 *   ./build/bench_shm       this one alone, after `make build`
 *
 * Benchmarks report figures; tests assert behaviour. This program prints and
 * exits 0; it exits 1 only when something errors (a call fails, a decision
 * leaves the allow path, a worker process dies).
 *
 * Timing, as bench_core and bench_store: wall ns per decision with
 * CLOCK_MONOTONIC; a pilot sizes N so that one run takes about 60 ms, one
 * run warms up, then 9 runs are timed. "ns/op" is the median, "min" the
 * fastest, "spread" (slowest - fastest) / median. The cases that are
 * compared are timed in rounds, each round running every case once, so a
 * slow spell of a shared host falls on both sides of a ratio alike.
 *
 * Workload, the same for both stores:
 *  keys     1,000 (1K: the tables fit in cache) and 1,000,000 (1M: far
 *           larger than the caches). Keys are 16 bytes, "user:00000000042",
 *           precomputed in an array.
 *  tables   max_keys = the number of keys, on_full=refuse; shm: also
 *           key_bytes=16 and state_bytes=16 (a token bucket's state; 32 for
 *           the sliding windows below), in a
 *           file in a fresh temp directory (under /dev/shm when it is there:
 *           tmpfs, no writeback; the directory is printed and removed at the
 *           end). Warm-up inserts every key once, in a random order, at one
 *           reading. A key either table refuses (a full shard of memory:, a
 *           full bucket of 16 slots of shm:; both counted and printed) is
 *           left out of the measured keys, so every measured decision is the
 *           allow path on a key both stores hold.
 *  policy   a token bucket of capacity 10^9 refilling 10^9 per s: nothing is
 *           ever denied (checked: every decision must be allowed).
 *  order    key indices drawn uniformly at random (fixed seed) from the
 *           measured keys, precomputed, so the PRNG is not measured; each
 *           worker walks its own array, continuing where its last run
 *           stopped. One worker draws from all the keys; with two, worker 0
 *           draws from the first half and worker 1 from the second.
 *  call     sluice_store_acquire_at at a reading taken once per run (an
 *           event loop's turn), hashing and all else included.
 *  2-way    memory: two threads on one store; shm: two processes (fork),
 *           each with its own store on the same file, its own half of the
 *           keys; each pinned to its own CPU when there are two. The figure
 *           is wall time / the decisions of both: aggregate throughput.
 *           The processes live for the whole case (their mappings stay
 *           warm), blocked on a pipe between runs (so they take no CPU
 *           from the other cases' runs); each run starts them together
 *           through shared memory.
 *  batches  (1 worker, not a goal) the same keys in batches of 16 through
 *           sluice_store_acquire_many, which reads the clock once a batch;
 *           both stores fetch a batch's state into the cache ahead.
 *
 * Goals (informational, PASS/MISS): shm: within 1.2x of memory: (ns per
 * decision, and with two: aggregate decisions/s).
 *
 * Then, not goals, the same at 1K with a fixed window (limit 10^9 an hour),
 * a sliding window of limit 65535 a 100 ms (so that two workers are never
 * denied) and one of limit 10^9 an hour. shm: keeps the state of a key of
 * one bucket, one fixed window or one sliding window of a limit below 2^16
 * in one word (FAST: one 16-byte CAS an admission), any other key's in
 * versioned copies (about five CASes an admission, the last row).
 */
#define _GNU_SOURCE
#include "sluice.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"

/* ------------------------------------------------------------------------ */
/* Timing                                                                    */
/* ------------------------------------------------------------------------ */

enum { N_RUNS = 9 };
#define RUN_NS 60e6  /* one timed run */
#define PILOT_NS 5e6 /* the pilot that sizes N */
#define KEY_LEN 16
#define ORDER_LEN (1u << 20) /* precomputed key indices per worker */

static int failed; /* something errored: exit 1 */

static uint64_t rng(uint64_t *s) { /* splitmix64 */
    uint64_t z = (*s += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

/* ------------------------------------------------------------------------ */
/* The workload                                                              */
/* ------------------------------------------------------------------------ */

static char (*keys)[KEY_LEN]; /* all keys of the current size */
static sluice_policy *pol;
static int state_bytes = 16; /* shm:'s state_bytes= for pol */

/* One worker's walk: its order array and where it stands. */
typedef struct {
    uint32_t *order;
    uint32_t pos;
} walk;

/* Decides n requests of w's walk on s at one reading; returns the number
 * denied (must be 0), or -1 on an error. */
static int64_t run_decisions(sluice_store *s, walk *w, uint64_t n) {
    int64_t now = sluice_clock_now_ms(sluice_clock_monotonic()), denied = 0;
    sluice_decision d;
    uint32_t pos = w->pos;
    for (uint64_t i = 0; i < n; i++) {
        const char *k = keys[w->order[pos]];
        pos = (pos + 1) & (ORDER_LEN - 1);
        if (sluice_store_acquire_at(s, pol, k, KEY_LEN, 1, now, &d)) return -1;
        denied += !d.allowed;
    }
    w->pos = pos;
    return denied;
}

/* The same through sluice_store_acquire_many, in batches of 16 (the store
 * reads its clock once a batch). */
#define BATCH 16
static int64_t run_batches(sluice_store *s, walk *w, uint64_t n) {
    int64_t denied = 0;
    sluice_request rq[BATCH];
    sluice_decision d[BATCH];
    int rc[BATCH];
    uint32_t pos = w->pos;
    for (uint64_t done = 0; done < n;) {
        size_t b = n - done < BATCH ? (size_t)(n - done) : BATCH;
        for (size_t i = 0; i < b; i++) {
            rq[i] = (sluice_request){pol, keys[w->order[pos]], KEY_LEN, 1};
            pos = (pos + 1) & (ORDER_LEN - 1);
        }
        if (sluice_store_acquire_many(s, rq, b, d, rc)) return -1;
        for (size_t i = 0; i < b; i++) {
            if (rc[i]) return -1;
            denied += !d[i].allowed;
        }
        done += b;
    }
    w->pos = pos;
    return denied;
}

/* A case: one way of running n decisions per worker; returns wall ns. */
typedef struct bench_case bench_case;
struct bench_case {
    const char *label;
    int workers; /* 1 or 2 */
    int64_t (*timed)(bench_case *c, uint64_t n);
    sluice_store *s;   /* 1 worker, and the memory store's 2 threads */
    walk w[2];         /* per worker */
    struct proc_ctl *ctl; /* shm: 2 processes */
    pid_t kids[2];
    int go[2];            /* to worker i: 'g' runs once, 'q' (or EOF) ends it */
    const char *url;
    int batches; /* 1 worker: through sluice_store_acquire_many */
    /* results */
    double med, min, spread;
};

static void note_error(const char *label, int64_t r) {
    if (r == 0) return;
    fprintf(stderr, "bench_shm: %s: %s\n", label, r < 0 ? "a decision failed" : "a decision was denied");
    failed = 1;
}

/* ---- one worker, in this process ---- */

static int64_t timed_one(bench_case *c, uint64_t n) {
    int64_t t0 = now_ns();
    int64_t r = c->batches ? run_batches(c->s, &c->w[0], n) : run_decisions(c->s, &c->w[0], n);
    int64_t t = now_ns() - t0;
    note_error(c->label, r);
    return t;
}

/* ---- two threads on one store ---- */

typedef struct {
    bench_case *c;
    int tid;
    uint64_t n;
    atomic_int *arrived;
    int64_t t0, t1, r;
} thread_arg;

static void *thread_main(void *arg) {
    thread_arg *a = arg;
    pin_to(a->tid);
    atomic_fetch_add(a->arrived, 1);
    for (unsigned i = 0; atomic_load(a->arrived) < 2; i++) {
        if (i < 1000) cpu_relax();
        else sched_yield();
    }
    a->t0 = now_ns();
    a->r = run_decisions(a->c->s, &a->c->w[a->tid], a->n);
    a->t1 = now_ns();
    return NULL;
}

static int64_t timed_threads(bench_case *c, uint64_t n) {
    atomic_int arrived = 0;
    thread_arg a[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        a[i] = (thread_arg){.c = c, .tid = i, .n = n, .arrived = &arrived};
        if (pthread_create(&th[i], NULL, thread_main, &a[i]) != 0) {
            fprintf(stderr, "bench_shm: pthread_create failed\n");
            exit(1);
        }
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    note_error(c->label, a[0].r);
    note_error(c->label, a[1].r);
    int64_t t0 = a[0].t0 < a[1].t0 ? a[0].t0 : a[1].t0;
    int64_t t1 = a[0].t1 > a[1].t1 ? a[0].t1 : a[1].t1;
    return t1 - t0;
}

/* ---- two processes, each with its own store on the file ---- */

/* Shared (MAP_SHARED | MAP_ANONYMOUS) between this process and the two. */
typedef struct proc_ctl {
    _Atomic int arrived;   /* workers at the start line of this run      */
    _Atomic int done;      /* workers done with this run                 */
    _Atomic int ready;     /* workers that opened their store            */
    uint64_t n;
    int64_t t0[2], t1[2], r[2];
} proc_ctl;

static void proc_main(bench_case *c, int tid) {
    proc_ctl *ctl = c->ctl;
    if (n_cpus >= 2) {
        cpu_set_t set;
        CPU_ZERO(&set);
        CPU_SET(cpu_of[tid], &set);
        sched_setaffinity(0, sizeof set, &set);
    }
    sluice_store *s = NULL;
    char err[256];
    if (sluice_store_open_err(c->url, NULL, &s, err, sizeof err)) {
        fprintf(stderr, "bench_shm: worker process: %s\n", err);
        _exit(1);
    }
    atomic_fetch_add(&ctl->ready, 1);
    for (;;) {
        /* blocked between runs: no wake-ups while the other cases run */
        char b;
        ssize_t got;
        while ((got = read(c->go[tid], &b, 1)) < 0 && errno == EINTR) {
        }
        if (got != 1 || b == 'q') {
            sluice_store_close(s);
            _exit(0);
        }
        atomic_fetch_add(&ctl->arrived, 1);
        for (unsigned i = 0; atomic_load(&ctl->arrived) < 2; i++) {
            if (i < 1000) cpu_relax();
            else sched_yield();
        }
        ctl->t0[tid] = now_ns();
        ctl->r[tid] = run_decisions(s, &c->w[tid], ctl->n);
        ctl->t1[tid] = now_ns();
        atomic_fetch_add(&ctl->done, 1);
    }
}

static void procs_start(bench_case *c) {
    c->ctl = mmap(NULL, sizeof(proc_ctl), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (c->ctl == MAP_FAILED) {
        perror("bench_shm: mmap");
        exit(1);
    }
    memset(c->ctl, 0, sizeof *c->ctl);
    int pipes[2][2];
    for (int i = 0; i < 2; i++)
        if (pipe(pipes[i]) != 0) {
            perror("bench_shm: pipe");
            exit(1);
        }
    fflush(NULL);
    for (int i = 0; i < 2; i++) {
        c->kids[i] = fork();
        if (c->kids[i] < 0) {
            perror("bench_shm: fork");
            exit(1);
        }
        if (c->kids[i] == 0) {
            for (int j = 0; j < 2; j++) {
                close(pipes[j][1]); /* only the parent writes: its close is EOF */
                if (j != i) close(pipes[j][0]);
            }
            c->go[i] = pipes[i][0];
            proc_main(c, i);
        }
    }
    for (int i = 0; i < 2; i++) {
        close(pipes[i][0]);
        c->go[i] = pipes[i][1];
    }
    while (atomic_load(&c->ctl->ready) < 2) {
        int status;
        for (int i = 0; i < 2; i++)
            if (waitpid(c->kids[i], &status, WNOHANG) == c->kids[i]) {
                fprintf(stderr, "bench_shm: a worker process ended before it started\n");
                exit(1);
            }
        usleep(1000);
    }
}

static void procs_stop(bench_case *c) {
    for (int i = 0; i < 2; i++) { /* 'q', not EOF: a later case's workers may hold the pipe too */
        if (write(c->go[i], "q", 1) != 1) perror("bench_shm: stopping a worker");
        close(c->go[i]);
    }
    for (int i = 0; i < 2; i++) {
        int status = 0;
        waitpid(c->kids[i], &status, 0);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
            fprintf(stderr, "bench_shm: a worker process failed\n");
            failed = 1;
        }
    }
    munmap(c->ctl, sizeof *c->ctl);
    c->ctl = NULL;
}

static int64_t timed_procs(bench_case *c, uint64_t n) {
    proc_ctl *ctl = c->ctl;
    ctl->n = n;
    atomic_store(&ctl->arrived, 0);
    atomic_store(&ctl->done, 0);
    for (int i = 0; i < 2; i++)
        if (write(c->go[i], "g", 1) != 1) {
            perror("bench_shm: starting a run");
            exit(1);
        }
    /* wait without a spinning CPU: the two workers need both */
    while (atomic_load(&ctl->done) < 2) {
        usleep(200);
        for (int i = 0; i < 2; i++) {
            int status;
            if (waitpid(c->kids[i], &status, WNOHANG) == c->kids[i]) {
                fprintf(stderr, "bench_shm: a worker process died\n");
                exit(1);
            }
        }
    }
    note_error(c->label, ctl->r[0]);
    note_error(c->label, ctl->r[1]);
    int64_t t0 = ctl->t0[0] < ctl->t0[1] ? ctl->t0[0] : ctl->t0[1];
    int64_t t1 = ctl->t1[0] > ctl->t1[1] ? ctl->t1[0] : ctl->t1[1];
    return t1 - t0;
}

/* ------------------------------------------------------------------------ */
/* Measuring a group of cases in rounds                                      */
/* ------------------------------------------------------------------------ */


static void measure_group(bench_case **cases, size_t n_cases) {
    uint64_t n[8];
    double v[8][N_RUNS];
    for (size_t c = 0; c < n_cases; c++) {
        uint64_t k = 256;
        int64_t t;
        for (;;) {
            t = cases[c]->timed(cases[c], k);
            if (t >= PILOT_NS || k >= (UINT64_C(1) << 40)) break;
            k *= 2;
        }
        double per = (double)(t > 0 ? t : 1) / (double)k;
        n[c] = (uint64_t)(RUN_NS / per);
        if (n[c] < 1) n[c] = 1;
        cases[c]->timed(cases[c], n[c]); /* warm-up */
    }
    for (int run = 0; run < N_RUNS; run++)
        for (size_t c = 0; c < n_cases; c++)
            v[c][run] = (double)cases[c]->timed(cases[c], n[c]) / (double)(n[c] * (uint64_t)cases[c]->workers);
    for (size_t c = 0; c < n_cases; c++) {
        qsort(v[c], N_RUNS, sizeof v[c][0], cmp_double);
        cases[c]->med = v[c][N_RUNS / 2];
        cases[c]->min = v[c][0];
        cases[c]->spread = cases[c]->med > 0 ? (v[c][N_RUNS - 1] - v[c][0]) / cases[c]->med : 0;
    }
}

static void row(const bench_case *c) {
    char extra[64] = "";
    if (c->workers == 2) snprintf(extra, sizeof extra, "  %6.2f M decisions/s", 1e3 / c->med);
    printf("%-44s %8.2f ns/decision  min %8.2f  spread %5.1f%%%s\n", c->label, c->med, c->min,
           100 * c->spread, extra);
}

/* shm / memory (ns per decision, aggregate when 2) against the goal. */
static void goal(const char *what, const bench_case *shm, const bench_case *mem, double bound) {
    double ratio = shm->med / mem->med, spread = shm->spread > mem->spread ? shm->spread : mem->spread;
    printf("%-56s %6.2fx  goal <= %.2fx  %s", what, ratio, bound, ratio <= bound ? "PASS" : "MISS");
    if (spread > 0.10) printf("  (noisy: spread %.0f%%)", 100 * spread);
    printf("\n");
}

/* ------------------------------------------------------------------------ */
/* One size                                                                  */
/* ------------------------------------------------------------------------ */

static char dir[128];

static sluice_store *open_or_die(const char *url) {
    sluice_store *s = NULL;
    char err[256];
    if (sluice_store_open_err(url, NULL, &s, err, sizeof err)) {
        fprintf(stderr, "bench_shm: %s: %s\n", url, err);
        exit(1);
    }
    return s;
}

/* Inserts every key (random order, one reading); held[i] &= whether s holds
 * key i afterwards. Returns the number refused. */
static long warm(sluice_store *s, uint32_t n_keys, uint8_t *held) {
    uint32_t *perm = malloc(n_keys * sizeof *perm);
    if (!perm) exit(1);
    for (uint32_t i = 0; i < n_keys; i++) perm[i] = i;
    uint64_t rs = 7;
    for (uint32_t i = n_keys - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(rng(&rs) % (i + 1)), t = perm[i];
        perm[i] = perm[j];
        perm[j] = t;
    }
    int64_t now = sluice_clock_now_ms(sluice_clock_monotonic());
    long refused = 0;
    for (uint32_t i = 0; i < n_keys; i++) {
        sluice_decision d;
        int rc = sluice_store_acquire_at(s, pol, keys[perm[i]], KEY_LEN, 1, now, &d);
        if (rc == SLUICE_EFULL) {
            refused++;
            held[perm[i]] = 0;
        } else if (rc || !d.allowed) {
            fprintf(stderr, "bench_shm: warm-up: %s\n", rc ? sluice_store_errmsg(s) : "denied");
            exit(1);
        }
    }
    free(perm);
    return refused;
}

/* Order arrays: worker w of `workers` draws from its share of the held keys. */
static void make_order(uint32_t *order, const uint32_t *held_list, uint32_t n_held, int w, int workers,
                       uint64_t seed) {
    uint32_t lo = workers == 1 ? 0 : (w == 0 ? 0 : n_held / 2);
    uint32_t hi = workers == 1 ? n_held : (w == 0 ? n_held / 2 : n_held);
    for (uint32_t i = 0; i < ORDER_LEN; i++) order[i] = held_list[lo + rng(&seed) % (hi - lo)];
}

static void bench_size(uint32_t n_keys, const char *name, bench_case *out_mem1, bench_case *out_shm1,
                       bench_case *out_mem2, bench_case *out_shm2) {
    int64_t t_start = now_ns();
    keys = malloc((size_t)n_keys * KEY_LEN);
    uint8_t *held = malloc(n_keys);
    uint32_t *held_list = malloc(n_keys * sizeof *held_list);
    if (!keys || !held || !held_list) exit(1);
    for (uint32_t i = 0; i < n_keys; i++) {
        char tmp[32];
        snprintf(tmp, sizeof tmp, "user:%011u", i);
        memcpy(keys[i], tmp, KEY_LEN);
        held[i] = 1;
    }
    static char mem_url[128], shm_url_s[512];
    snprintf(mem_url, sizeof mem_url, "memory:?max_keys=%u&on_full=refuse", n_keys);
    snprintf(shm_url_s, sizeof shm_url_s, "shm:%s/%s.shm?max_keys=%u&key_bytes=%d&state_bytes=%d&on_full=refuse",
             dir, name, n_keys, KEY_LEN, state_bytes);
    sluice_store *mem = open_or_die(mem_url), *shm = open_or_die(shm_url_s);
    long mem_refused = warm(mem, n_keys, held), shm_refused = warm(shm, n_keys, held);
    uint32_t n_held = 0;
    for (uint32_t i = 0; i < n_keys; i++)
        if (held[i]) held_list[n_held++] = i;
    sluice_stats ms, ss;
    sluice_store_stats(mem, &ms);
    sluice_store_stats(shm, &ss);
    printf("\n== %s keys (max_keys %u): warm-up refused %ld (%.2f%%) in memory:, %ld (%.2f%%) in shm: "
           "(full buckets of %s); %u keys measured\n",
           name, n_keys, mem_refused, 100.0 * mem_refused / n_keys, shm_refused, 100.0 * shm_refused / n_keys,
           n_keys <= 64 ? "one" : "16", n_held);
    (void)ms, (void)ss;

    static bench_case mem_b, shm_b; /* batches: not a goal */
    bench_case *cs[6] = {out_mem1, out_shm1, out_mem2, out_shm2, &mem_b, &shm_b};
    static char labels[6][64];
    const char *what[6] = {"memory: 1 thread",           "shm:    1 process",
                           "memory: 2 threads",          "shm:    2 processes",
                           "memory: acquire_many by 16", "shm:    acquire_many by 16"};
    for (int i = 0; i < 6; i++) {
        memset(cs[i], 0, sizeof *cs[i]);
        snprintf(labels[i], sizeof labels[i], "%-3s %s", name, what[i]);
        cs[i]->label = labels[i];
        cs[i]->workers = i == 2 || i == 3 ? 2 : 1;
        for (int w = 0; w < cs[i]->workers; w++) {
            cs[i]->w[w].order = malloc(ORDER_LEN * sizeof(uint32_t));
            if (!cs[i]->w[w].order) exit(1);
            make_order(cs[i]->w[w].order, held_list, n_held, w, cs[i]->workers, 100 + (uint64_t)w);
        }
    }
    out_mem1->s = mem, out_mem1->timed = timed_one;
    out_shm1->s = shm, out_shm1->timed = timed_one;
    out_mem2->s = mem, out_mem2->timed = timed_threads;
    out_shm2->url = shm_url_s, out_shm2->timed = timed_procs;

    bench_case *one[2] = {out_mem1, out_shm1};
    measure_group(one, 2);
    row(out_mem1);
    row(out_shm1);
    procs_start(out_shm2);
    bench_case *two[2] = {out_mem2, out_shm2};
    measure_group(two, 2);
    procs_stop(out_shm2);
    row(out_mem2);
    row(out_shm2);
    mem_b.s = mem, mem_b.timed = timed_one, mem_b.batches = 1;
    shm_b.s = shm, shm_b.timed = timed_one, shm_b.batches = 1;
    bench_case *batched[2] = {&mem_b, &shm_b};
    measure_group(batched, 2);
    printf("not a goal: batches (each store fetches 16 requests' state into the cache before deciding):\n");
    row(&mem_b);
    row(&shm_b);

    sluice_store_stats(mem, &ms);
    sluice_store_stats(shm, &ss);
    if (ms.evicted || ss.evicted || ms.denied || ss.denied) {
        fprintf(stderr, "bench_shm: %s: the stores left the allow path (evicted %lld/%lld, denied %lld/%lld)\n",
                name, (long long)ms.evicted, (long long)ss.evicted, (long long)ms.denied, (long long)ss.denied);
        failed = 1;
    }
    sluice_store_close(mem);
    sluice_store_close(shm);
    for (int i = 0; i < 6; i++)
        for (int w = 0; w < cs[i]->workers; w++) free(cs[i]->w[w].order);
    char path[300];
    snprintf(path, sizeof path, "%s/%s.shm", dir, name);
    unlink(path);
    free(keys);
    free(held);
    free(held_list);
    keys = NULL;
    printf("(%s: %.1f s)\n", name, (double)(now_ns() - t_start) / 1e9);
}

/* ------------------------------------------------------------------------ */

static void remove_dir(void) {
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        char p[400];
        while ((e = readdir(d)) != NULL) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
            snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
            unlink(p);
        }
        closedir(d);
    }
    rmdir(dir);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    bench_setup_threads(); /* multi-threaded, pinned: see bench_util.h */
    /* tmpfs when there is one: a shm: file belongs in memory */
    struct stat st;
    const char *base = stat("/dev/shm", &st) == 0 && S_ISDIR(st.st_mode) && access("/dev/shm", W_OK) == 0
                           ? "/dev/shm"
                           : (getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    snprintf(dir, sizeof dir, "%s/sluice-bench-shm-XXXXXX", base);
    if (!mkdtemp(dir)) {
        perror("bench_shm: mkdtemp");
        return 1;
    }
    printf("bench_shm: sluice %s, %ld CPUs online, %s; files in %s; median of %d runs of ~%.0f ms each\n",
           sluice_version(), sysconf(_SC_NPROCESSORS_ONLN),
           n_cpus >= 2 ? "workers pinned one per CPU" : "one CPU usable: 2 workers share it", dir, N_RUNS,
           RUN_NS / 1e6);
    char err[256];
    if (sluice_policy_parse("bench", "token-bucket capacity=1000000000 rate=1000000000/s", &pol, err, sizeof err)) {
        fprintf(stderr, "bench_shm: %s\n", err);
        return 1;
    }
    int64_t t0 = now_ns();
    static bench_case k_m1, k_s1, k_m2, k_s2, m_m1, m_s1, m_m2, m_s2;
    bench_size(1000, "1K", &k_m1, &k_s1, &k_m2, &k_s2);
    bench_size(1000000, "1M", &m_m1, &m_s1, &m_m2, &m_s2);
    printf("\n== goals (ratios of medians from this run; informational)\n");
    goal("1K shm: 1 process / memory: 1 thread", &k_s1, &k_m1, 1.2);
    goal("1M shm: 1 process / memory: 1 thread", &m_s1, &m_m1, 1.2);
    goal("1K shm: 2 processes / memory: 2 threads (aggregate)", &k_s2, &k_m2, 1.2);
    goal("1M shm: 2 processes / memory: 2 threads (aggregate)", &m_s2, &m_m2, 1.2);
    /* other algorithms, FAST in shm: or not (see the top) */
    static const struct {
        const char *name, *spec, *what;
        int state_bytes;
    } others[] = {
        {"1Kfw", "fixed-window limit=1000000000 window=1h", "a fixed window (FAST in shm:)", 16},
        {"1Ksw", "sliding-window limit=65535 window=100ms", "a sliding window of a limit below 2^16 (FAST in shm:)", 32},
        {"1Kswg", "sliding-window limit=1000000000 window=1h", "a sliding window of a larger limit: shm:'s general form", 32},
    };
    for (size_t i = 0; i < sizeof others / sizeof others[0]; i++) {
        sluice_policy_free(pol);
        state_bytes = others[i].state_bytes;
        if (sluice_policy_parse(others[i].name, others[i].spec, &pol, err, sizeof err)) {
            fprintf(stderr, "bench_shm: %s\n", err);
            return 1;
        }
        static bench_case o_m1, o_s1, o_m2, o_s2;
        printf("\n== not a goal: %s", others[i].what);
        bench_size(1000, others[i].name, &o_m1, &o_s1, &o_m2, &o_s2);
        printf("%s, shm: 1 process / memory: 1 thread: %.2fx; 2 processes / 2 threads: %.2fx\n",
               others[i].name, o_s1.med / o_m1.med, o_s2.med / o_m2.med);
    }
    sluice_policy_free(pol);
    remove_dir();
    printf("\n(%.1f s)\n", (double)(now_ns() - t0) / 1e9);
    return failed;
}
