/* bench_store.c: what one keyed decision costs in the memory store, next to
 * the floor it cannot beat, and what a key of capacity costs in memory.
 *
 *   make bench              builds (-O2) and runs every program in bench/
 *   ./build/bench_store     this one alone, after `make build`
 *
 * Benchmarks report figures; tests assert behaviour. This program prints and
 * exits 0; it exits 1 only when something errors (a call fails, a decision
 * leaves the allow path, the store's or the floor's counts do not add up).
 *
 * Timing, as bench_core: wall ns per operation with CLOCK_MONOTONIC; a pilot
 * sizes N so that one run takes about 60 ms, one run warms up, then 9 runs
 * are timed. "ns/op" is the median, "min" the fastest, "spread" (slowest -
 * fastest) / median. With 2 threads the figure is wall time / operations of
 * both threads (aggregate throughput), threads pinned one per CPU. Unlike
 * bench_core, the cases of one size are timed in rounds, each round running
 * every case once: on a shared VM the 1M figures drift by tens of % from
 * minute to minute, and a floor timed next to its store keeps their ratio.
 *
 * Workload, the same for the store and for its floor:
 *  keys     1,000 ("1K": hot, the table fits in L1/L2) and 1,000,000 ("1M":
 *           the table is far larger than the caches). Keys are 16 bytes,
 *           "user:00000000042" (fixed-width decimal), precomputed in an array.
 *  order    ORDER_LEN key indices drawn uniformly at random (fixed seed),
 *           precomputed so the PRNG is not measured; each thread walks its
 *           own array, continuing where its last run stopped. One thread
 *           draws from all keys; with two threads, thread 0 draws from the
 *           first half of the keys and thread 1 from the second (different
 *           keys), each running the same number of operations.
 *  store    "memory:" with max_keys = the number of keys (the table at its
 *           capacity, as the memory goal assumes) and on_full=refuse; one
 *           policy, a token bucket of capacity 10^9 refilling 10^9 per s, so
 *           nothing is ever denied. Warm-up inserts every key once, in a
 *           random order (so where a key's entry lies in memory has nothing
 *           to do with which thread's half it is in), at one frozen reading.
 *           The shards' caps add up to max_keys, but random keys never
 *           spread exactly evenly over the shards: the keys that meet a full
 *           shard are refused, counted, printed, and left out of the orders.
 *           So every measured decision is the steady allow path on a held
 *           key (no insert, forgetting or eviction: checked in the stats).
 *           acquire: sluice_store_acquire, which reads the default monotonic
 *             clock itself.
 *           acquire_at: sluice_store_acquire_at at a reading taken once per
 *             run (an event loop's turn); hashing and all else included.
 *           Every decision must be allowed; denials are counted and printed.
 *           "streamed" (1M, 1 thread; not a goal): the same decisions with
 *             the keys copied in order of use and read sequentially, as for
 *             a caller whose key is in cache (just parsed from a request).
 *             The rows above also pay a cache miss in the 16 MB key array,
 *             which the floor does not.
 *  floor    a plain array of as many 64-byte aligned slots as keys; per
 *           operation: slot[order[i]], load its 64-bit word, add to it, CAS
 *           it back; "clock + cas" first reads
 *           sluice_clock_now_ms(sluice_clock_monotonic()) and adds the
 *           reading. What a decision cannot avoid: find the key's state in
 *           memory, update it atomically (and read the clock). Mind that the
 *           CAS loop is a few instructions, so at 1M the CPU overlaps the
 *           misses of many iterations; a clock read that waits for earlier
 *           loads (the vDSO reads the TSC with rdtscp, or lfence; rdtsc)
 *           stops that, which is why at 1M "clock + cas" costs far more than
 *           a clock read plus "cas".
 *           "acquire_many by 16" (1 thread, not a goal): the same keys in
 *             batches of 16 through sluice_store_acquire_many, which reads
 *             the clock once a batch and fetches the batch's keys, index
 *             slots and entries into the cache before deciding.
 *           "peek_at" (1 thread): sluice_store_peek_at of the same held
 *             keys at a reading a run; goal: within 1.2x of acquire_at.
 *             "acquire_at + refund_at": each acquire_at followed by the
 *             refund that undoes it (a refund of a bucket already full is
 *             a compare and a return: this one has work); goal: the pair
 *             less acquire_at within 1.2x of acquire_at. "reset +
 *             acquire_at": sluice_store_reset of a held key, then the
 *             acquire_at that adds it back (a reset forgets the key, so a
 *             run of resets alone would reset keys not held); the pair's
 *             cost, next to acquire_at's of a held key.
 *           "cas + 20 mul" (1 thread, for scale, not a goal): the same with
 *           a chain of 20 multiply-adds on the word between its load and its
 *           CAS (about 80 cycles): what little work does to that overlap.
 *           A decision does more (hash, probe, key compare, arithmetic), so
 *           its misses at 1M overlap little with the next decision's.
 *
 * Memory per key of capacity (max_keys), in a child process forked before
 * this process has allocated or freed anything, so no memory freed earlier
 * hides the growth: the child builds the keys, then counts from before
 * sluice_store_open to after warm-up
 *   rss        growth of anonymous resident pages (/proc/self/statm)
 *   allocated  growth of malloc's bytes in use (mallinfo2: arenas + mmap),
 *              the store's whole memory whether touched or not
 * and divides by max_keys. "layout" is what src/store/memory/ allocates
 * per shard up front: cap + cap/4*3 + 2 slots of 32 bytes (layout_bytes; a
 * FAST key lives in its slot, other keys add a 48-byte entry each, in
 * chunks made as needed); "fixed" = allocated - layout: the store struct
 * with its policy registry, the shard headers, malloc's page rounding.
 *
 * Goals (informational, PASS/MISS): acquire <= 1.3x clock + cas; acquire_at
 * <= 2x cas at 1K and 1.5x at 1M; 2 threads on different keys >= 1.7x the
 * decisions per second of 1; <= 64 bytes per key of capacity (one-part token
 * bucket, keys of 16 bytes).
 */
#define _GNU_SOURCE
#include "internal.h"
#include "sluice.h"

#include <inttypes.h>
#include <malloc.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "bench_util.h"
#include "floor_table.h"

/* ------------------------------------------------------------------------ */
/* Timing                                                                    */
/* ------------------------------------------------------------------------ */

enum { N_RUNS = 9 };
#define RUN_NS 60e6  /* one timed run */
#define PILOT_NS 5e6 /* the pilot that sizes N */

static int failed; /* something errored: exit 1 */

/* One case of a group: fn on ctx with nthreads threads. */
typedef struct {
    work_fn fn;
    void *ctx;
    int nthreads;
    result r; /* filled by measure_group */
} timing;


/* Sizes each case (a pilot doubling n until a run takes PILOT_NS, then one
 * warm-up run of the n that takes RUN_NS), then times N_RUNS rounds, each
 * running every case once in turn: a slow spell of the shared host falls on
 * all cases alike, so ratios between them hold better than the figures. */
static void measure_group(timing *cases, size_t n_cases) {
    uint64_t n[24];
    double v[24][N_RUNS];
    if (n_cases > 24) abort();
    for (size_t k = 0; k < n_cases; k++) {
        timing *c = &cases[k];
        uint64_t ops = 0, m = 256, per_run = (uint64_t)c->nthreads;
        int64_t t;
        for (;;) {
            t = timed(c->fn, c->ctx, c->nthreads, m);
            ops += m * per_run;
            if (t >= PILOT_NS || m >= (UINT64_C(1) << 40)) break;
            m *= 2;
        }
        double per = (double)(t > 0 ? t : 1) / (double)m;
        n[k] = (uint64_t)(RUN_NS / per);
        if (n[k] < 1) n[k] = 1;
        timed(c->fn, c->ctx, c->nthreads, n[k]);
        c->r = (result){.ops = ops + n[k] * per_run};
    }
    for (int i = 0; i < N_RUNS; i++)
        for (size_t k = 0; k < n_cases; k++) {
            timing *c = &cases[k];
            uint64_t ops = n[k] * (uint64_t)c->nthreads;
            v[k][i] = (double)timed(c->fn, c->ctx, c->nthreads, n[k]) / (double)ops;
            c->r.ops += ops;
        }
    for (size_t k = 0; k < n_cases; k++) {
        result *r = &cases[k].r;
        qsort(v[k], N_RUNS, sizeof v[k][0], cmp_double);
        r->med = v[k][N_RUNS / 2];
        r->min = v[k][0];
        r->spread = r->med > 0 ? (v[k][N_RUNS - 1] - v[k][0]) / r->med : 0;
    }
}

/* One line: a label, then the figures. extra (may be "") goes at the end. */
static void row(const char *label, result r, const char *extra) {
    printf("%-44s %8.2f ns/op  %7.2f M/s  min %8.2f  spread %5.1f%%%s%s\n", label, r.med,
           1e3 / r.med, r.min, 100 * r.spread, *extra ? "  " : "", extra);
}

/* ------------------------------------------------------------------------ */
/* Keys and orders                                                           */
/* ------------------------------------------------------------------------ */

#define KEY_LEN 16
#define ORDER_LEN (UINT32_C(1) << 21) /* draws per order array, a power of two */

enum { SIZE_1K, SIZE_1M, N_SIZES };
static const uint32_t size_keys[N_SIZES] = {1000, 1000000};
static const char *const size_names[N_SIZES] = {"1K", "1M"};

typedef uint8_t key16[KEY_LEN];

/* splitmix64: a fixed seed, so every run draws the same order. */
static uint64_t rng_next(uint64_t *s) {
    uint64_t z = (*s += UINT64_C(0x9e3779b97f4a7c15));
    z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
    return z ^ (z >> 31);
}

static void *xmalloc(size_t n) {
    void *p = malloc(n);
    if (!p) {
        fprintf(stderr, "bench_store: out of memory (%zu bytes)\n", n);
        exit(1);
    }
    return p;
}

static key16 *make_keys(uint32_t n) {
    key16 *keys = xmalloc((size_t)n * sizeof *keys);
    for (uint32_t i = 0; i < n; i++) {
        char buf[KEY_LEN + 1];
        if (snprintf(buf, sizeof buf, "user:%011" PRIu32, i) != KEY_LEN) abort();
        memcpy(keys[i], buf, KEY_LEN);
    }
    return keys;
}

/* ORDER_LEN indices drawn uniformly from from[0..len). */
static uint32_t *make_order(const uint32_t *from, uint32_t len, uint64_t *rng) {
    uint32_t *o = xmalloc(ORDER_LEN * sizeof *o);
    for (uint32_t i = 0; i < ORDER_LEN; i++)
        o[i] = from[(uint32_t)(((rng_next(rng) >> 32) * len) >> 32)];
    return o;
}

/* ------------------------------------------------------------------------ */
/* The store: open, warm up                                                  */
/* ------------------------------------------------------------------------ */

static sluice_policy *make_policy(void) {
    sluice_config c = sluice_token_bucket(SLUICE_LIMIT_MAX, SLUICE_LIMIT_MAX, 1000);
    sluice_policy *p;
    int rc = sluice_policy_new("bench", &c, 1, &p);
    if (rc) {
        fprintf(stderr, "bench_store: sluice_policy_new: %s\n", sluice_strerror(rc));
        exit(1);
    }
    return p;
}

static sluice_store *open_store(uint32_t max_keys) {
    sluice_store_options o = SLUICE_STORE_OPTIONS_INIT;
    o.max_keys = max_keys;
    o.on_full = SLUICE_ON_FULL_REFUSE;
    sluice_store *s;
    char err[256];
    int rc = sluice_store_open_err("memory:", &o, &s, err, sizeof err);
    if (rc) {
        fprintf(stderr, "bench_store: sluice_store_open: %s (%s)\n", sluice_strerror(rc), err);
        exit(1);
    }
    return s;
}

/* 0..n-1 in a random order (fixed seed). */
static uint32_t *shuffled(uint32_t n) {
    uint32_t *a = xmalloc((size_t)n * sizeof *a);
    uint64_t rng = UINT64_C(0x5417);
    for (uint32_t i = 0; i < n; i++) a[i] = i;
    for (uint32_t i = n - 1; i > 0; i--) {
        uint32_t j = (uint32_t)(((rng_next(&rng) >> 32) * (i + 1)) >> 32), t = a[i];
        a[i] = a[j];
        a[j] = t;
    }
    return a;
}

/* Inserts every key once, in the random order perm, at one reading (so no
 * key is fresh and none is forgotten). The order is random so that where a
 * key's entry lies in memory has nothing to do with its index: the two
 * threads' halves of the keys are spread over the same pages, as the keys of
 * real clients are. Keys the store refuses (their shard is full) are not
 * held; held[0..] receives the indices of the others, ascending (held has
 * room for n, every byte 0xff on entry). Returns how many are held. */
static uint32_t warm(sluice_store *s, const sluice_policy *p, const key16 *keys, uint32_t n,
                     const uint32_t *perm, uint32_t *held) {
    int64_t now = sluice_clock_now_ms(sluice_clock_monotonic());
    for (uint32_t i = 0; i < n; i++) {
        sluice_decision d;
        int rc = sluice_store_acquire_at(s, p, keys[perm[i]], KEY_LEN, 1, now, &d);
        if (rc == SLUICE_EFULL) continue;
        if (rc || !d.allowed) {
            fprintf(stderr, "bench_store: warming key %" PRIu32 ": %s\n", perm[i],
                    rc ? sluice_strerror(rc) : "denied");
            exit(1);
        }
        held[perm[i]] = 0;
    }
    uint32_t n_held = 0;
    for (uint32_t k = 0; k < n; k++)
        if (held[k] == 0) held[n_held++] = k;
    return n_held;
}

/* ------------------------------------------------------------------------ */
/* Memory per key of capacity                                                */
/* ------------------------------------------------------------------------ */

/* What src/store/memory.c allocates for entries and index at max_keys. It
 * mirrors mem_open(): at most SHARDS_MAX (64) shards, doubling while every
 * shard keeps >= SHARD_KEYS_MIN keys; per shard, cap + cap/4*3 + 2 slots of
 * 32 bytes (src/store/memory/memory.c). Keep these numbers in
 * step with memory.c: when they drift this one figure goes stale (the
 * measured ones do not). */
#define MIRROR_SHARDS_MAX_BITS 6
#define MIRROR_SHARD_KEYS_MIN 64
static double layout_bytes(uint32_t max_keys, unsigned *n_shards) {
    unsigned bits = 0;
    while (bits < MIRROR_SHARDS_MAX_BITS && (max_keys >> (bits + 1)) >= MIRROR_SHARD_KEYS_MIN)
        bits++;
    uint32_t n = UINT32_C(1) << bits;
    double bytes = 0;
    for (uint32_t i = 0; i < n; i++) {
        uint32_t cap = max_keys / n + (i < max_keys % n);
        bytes += 32.0 * ((double)cap + (double)(cap / 4 * 3) + 2);
    }
    *n_shards = n;
    return bytes;
}

typedef struct {
    int ok;
    uint32_t held;
    double rss_bytes, alloc_bytes; /* growth, open to after warm-up */
} mem_figures;

/* Anonymous resident bytes: statm's resident - shared (file-backed) pages.
 * The child runs the library's and libc's code for the first time while it
 * opens the store, and a fork does not map a parent's file-backed pages into
 * the child up front: counting them would add ~250 KB that is not the
 * store's (250 B a key at 1K keys). */
static double rss_bytes(void) {
    long size = 0, resident = 0, shared = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (!f) return -1;
    int got = fscanf(f, "%ld %ld %ld", &size, &resident, &shared);
    fclose(f);
    return got == 3 ? (double)(resident - shared) * (double)sysconf(_SC_PAGESIZE) : -1;
}

static double malloc_bytes(void) {
    struct mallinfo2 mi = mallinfo2();
    return (double)mi.uordblks + (double)mi.hblkhd;
}

/* In a child: the keys, then the store from open to warmed. */
static mem_figures measure_memory(uint32_t n) {
    mem_figures m = {0};
    int fd[2];
    if (pipe(fd) != 0) return m;
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) return m;
    if (pid == 0) {
        close(fd[0]);
        key16 *keys = make_keys(n);
        sluice_policy *p = make_policy();
        uint32_t *perm = shuffled(n), *held = xmalloc((size_t)n * sizeof *held);
        /* resident before counting (a memset of 0 would become a calloc) */
        memset(held, 0xff, (size_t)n * sizeof *held);
        mem_figures c = {0};
        double rss0 = rss_bytes(), alloc0 = malloc_bytes();
        sluice_store *s = open_store(n);
        c.held = warm(s, p, keys, n, perm, held);
        double rss1 = rss_bytes(), alloc1 = malloc_bytes();
        c.ok = rss0 >= 0 && rss1 >= 0;
        c.rss_bytes = rss1 - rss0;
        c.alloc_bytes = alloc1 - alloc0;
        _exit(write(fd[1], &c, sizeof c) == (ssize_t)sizeof c ? 0 : 1);
    }
    close(fd[1]);
    if (read(fd[0], &m, sizeof m) != (ssize_t)sizeof m) m.ok = 0;
    close(fd[0]);
    int status;
    waitpid(pid, &status, 0);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) m.ok = 0;
    return m;
}

/* ------------------------------------------------------------------------ */
/* Work: the store and the floor                                             */
/* ------------------------------------------------------------------------ */

typedef struct {
    _Alignas(64) _Atomic uint64_t word;
} slot;

/* One size's workload; orders[0] for 1 thread, orders[1 + tid] for 2. */
typedef struct {
    uint32_t n;
    key16 *keys;
    uint32_t *orders[3];
    key16 *stream; /* 1M: keys[orders[0][i]] copied in order of use */
    sluice_store *store;
    const sluice_policy *policy;
    slot *slots;
    floor_table table; /* the table floor */
} workload;

typedef struct {
    _Alignas(64) uint32_t pos; /* where the next run continues in its order */
    uint64_t denied;           /* decisions denied (must stay 0)            */
    uint64_t retries;          /* failed CASes (floors; must stay 0)        */
    uint64_t added;            /* floors: the sum of what the CASes added   */
    int rc;                    /* an error code seen, or 0                  */
} per_thread;

typedef struct {
    const workload *w;
    int nthreads;
    int at;         /* store: 1 sluice_store_acquire_at, 0 sluice_store_acquire */
    int with_clock; /* floor: read the default clock first                      */
    int work;       /* floor: dependent multiply-adds between load and CAS      */
    int many;       /* store: batches through sluice_store_acquire_many         */
    int streamed;   /* store: keys from w->stream (1 thread)                    */
    int verb;       /* store, at: 0 acquire, else a VERB_* beside it            */
    int table;      /* the table floor: 1 at a reading, 2 with the clock, 3 dependent */
    per_thread th[2];
} run_ctx;

/* The verbs beside acquire, at a reading (1 thread): a peek, a refund of
 * cost 1, and a reset paired with the acquire that adds the key back. */
enum { VERB_NONE, VERB_PEEK, VERB_REFUND, VERB_RESET };

static const uint32_t *order_of(const run_ctx *c, int tid) {
    return c->w->orders[c->nthreads == 1 ? 0 : 1 + tid];
}

/* One run of decisions; at and streamed are constants where it is called,
 * so each of the four loops is compiled on its own. */
static inline __attribute__((always_inline)) void store_loop(run_ctx *c, int tid, uint64_t n,
                                                             int at, int streamed, int verb) {
    per_thread *t = &c->th[tid];
    const uint32_t *order = order_of(c, tid);
    const key16 *keys = streamed ? c->w->stream : c->w->keys;
    sluice_store *s = c->w->store;
    const sluice_policy *p = c->w->policy;
    uint32_t pos = t->pos;
    uint64_t allowed = 0;
    int rc = 0;
    sluice_decision d = {0};
    /* acquire_at: one reading per run, as an event loop reads once a turn */
    int64_t now = at ? sluice_clock_now_ms(sluice_clock_monotonic()) : 0;
    for (uint64_t i = 0; i < n; i++) {
        const uint8_t *key = streamed ? keys[pos] : keys[order[pos]];
        pos = (pos + 1) & (ORDER_LEN - 1);
        int e;
        if (verb == VERB_PEEK) {
            e = sluice_store_peek_at(s, p, key, KEY_LEN, 1, now, &d);
        } else if (verb == VERB_REFUND) { /* the admission it undoes first: a refund with work to do */
            e = sluice_store_acquire_at(s, p, key, KEY_LEN, 1, now, &d);
            if (!e) e = sluice_store_refund_at(s, p, key, KEY_LEN, 1, now, &d);
        } else {
            e = verb == VERB_RESET ? sluice_store_reset(s, p, key, KEY_LEN, &d) : 0; /* then added back */
            int a = at ? sluice_store_acquire_at(s, p, key, KEY_LEN, 1, now, &d)
                       : sluice_store_acquire(s, p, key, KEY_LEN, 1, &d);
            if (!e) e = a;
        }
        if (e) rc = e;
        allowed += d.allowed;
    }
    t->pos = pos;
    t->denied += n - allowed;
    if (rc) t->rc = rc;
}

/* Batches of MANY_BATCH through sluice_store_acquire_many (one clock read a
 * batch, by the store). */
#define MANY_BATCH 16
static void many_loop(run_ctx *c, int tid, uint64_t n) {
    per_thread *t = &c->th[tid];
    const uint32_t *order = order_of(c, tid);
    uint32_t pos = t->pos;
    uint64_t allowed = 0, done = 0;
    sluice_request rq[MANY_BATCH];
    sluice_decision d[MANY_BATCH];
    int rc[MANY_BATCH];
    while (done < n) {
        size_t b = n - done < MANY_BATCH ? (size_t)(n - done) : MANY_BATCH;
        for (size_t i = 0; i < b; i++) {
            rq[i] = (sluice_request){c->w->policy, c->w->keys[order[pos]], KEY_LEN, 1};
            pos = (pos + 1) & (ORDER_LEN - 1);
        }
        if (sluice_store_acquire_many(c->w->store, rq, b, d, rc)) t->rc = SLUICE_EINVAL;
        for (size_t i = 0; i < b; i++) {
            if (rc[i]) t->rc = rc[i];
            else allowed += d[i].allowed;
        }
        done += b;
    }
    t->pos = pos;
    t->denied += n - allowed;
}

static void work_store(void *ctx, int tid, uint64_t n) {
    run_ctx *c = ctx;
    if (c->many) {
        many_loop(c, tid, n);
        return;
    }
    if (c->verb == VERB_PEEK) store_loop(c, tid, n, 1, 0, VERB_PEEK);
    else if (c->verb == VERB_REFUND) store_loop(c, tid, n, 1, 0, VERB_REFUND);
    else if (c->verb == VERB_RESET) store_loop(c, tid, n, 1, 0, VERB_RESET);
    else if (c->streamed) {
        if (c->at) store_loop(c, tid, n, 1, 1, 0);
        else store_loop(c, tid, n, 0, 1, 0);
    } else {
        if (c->at) store_loop(c, tid, n, 1, 0, 0);
        else store_loop(c, tid, n, 0, 0, 0);
    }
}

/* The table floor (floor_table.h). */
static void work_table(void *ctx, int tid, uint64_t n) {
    run_ctx *c = ctx;
    per_thread *t = &c->th[tid];
    uint64_t allowed = ft_run((floor_table *)&c->w->table, (const uint8_t(*)[16])c->w->keys, order_of(c, tid),
                              &t->pos, ORDER_LEN - 1, n, c->table - 1);
    t->denied += n - allowed;
}

/* Load, add, CAS back (retrying on failure) on slot[order[i]]: the shape of
 * a decision's atomic update, without finding the key or deciding. */
static void work_floor(void *ctx, int tid, uint64_t n) {
    run_ctx *c = ctx;
    per_thread *t = &c->th[tid];
    const uint32_t *order = order_of(c, tid);
    slot *slots = c->w->slots;
    uint32_t pos = t->pos;
    uint64_t fails = 0, added = n;
    if (c->work) {
        added = 0;
        for (uint64_t i = 0; i < n; i++) {
            _Atomic uint64_t *word = &slots[order[pos]].word;
            pos = (pos + 1) & (ORDER_LEN - 1);
            uint64_t v = atomic_load_explicit(word, memory_order_acquire), x = v;
            for (int k = 0; k < c->work; k++) { /* a chain on the value: ~4 cycles each */
                x = x * UINT64_C(6364136223846793005) + UINT64_C(1442695040888963407);
                __asm__ volatile("" : "+r"(x)); /* kept a chain, not folded */
            }
            uint64_t add = 1 + (x >> 63);
            while (!atomic_compare_exchange_strong_explicit(word, &v, v + add, memory_order_acq_rel,
                                                            memory_order_acquire))
                fails++;
            added += add;
        }
    } else if (c->with_clock) {
        const sluice_clock *clk = sluice_clock_monotonic();
        added = 0;
        for (uint64_t i = 0; i < n; i++) {
            _Atomic uint64_t *word = &slots[order[pos]].word;
            pos = (pos + 1) & (ORDER_LEN - 1);
            uint64_t add = (uint64_t)sluice_clock_now_ms(clk);
            uint64_t v = atomic_load_explicit(word, memory_order_acquire);
            while (!atomic_compare_exchange_strong_explicit(word, &v, v + add, memory_order_acq_rel,
                                                            memory_order_acquire))
                fails++;
            added += add;
        }
    } else {
        for (uint64_t i = 0; i < n; i++) {
            _Atomic uint64_t *word = &slots[order[pos]].word;
            pos = (pos + 1) & (ORDER_LEN - 1);
            uint64_t v = atomic_load_explicit(word, memory_order_acquire);
            while (!atomic_compare_exchange_strong_explicit(word, &v, v + 1, memory_order_acq_rel,
                                                            memory_order_acquire))
                fails++;
        }
    }
    t->pos = pos;
    t->retries += fails;
    t->added += added;
}

/* ------------------------------------------------------------------------ */
/* Cases                                                                     */
/* ------------------------------------------------------------------------ */

enum { K_CAS, K_CLOCK_CAS, K_AT, K_ACQUIRE, K_AT_STREAMED, K_ACQUIRE_STREAMED, K_MANY, K_PEEK, K_REFUND, K_RESET,
       K_TABLE, K_TABLE_CLOCK, K_TABLE_DEP, K_CAS_WORK, N_KINDS };
static const char *const kind_names[N_KINDS] = {
    "floor cas",     "floor clock + cas",         "store acquire_at",
    "store acquire", "store acquire_at streamed", "store acquire streamed",
    "store acquire_many by 16", "store peek_at", "store acquire_at + refund_at", "store reset + acquire_at",
    "floor table", "floor table + clock", "floor table, dependent", "floor cas + 20 mul"};
#define FLOOR_WORK 20 /* K_CAS_WORK's multiply-adds */

static int is_store_kind(int kind) {
    return kind >= K_AT && kind <= K_RESET;
}

/* A store kind whose operations the stats count as decisions. */
static int counts_decisions(int kind) {
    return is_store_kind(kind) && kind != K_PEEK;
}

/* [size][kind][threads - 1] */
static result res[N_SIZES][N_KINDS][2];
static mem_figures mem[N_SIZES];

static uint64_t slot_sum(const workload *w) {
    uint64_t sum = 0;
    for (uint32_t i = 0; i < w->n; i++)
        sum += atomic_load_explicit(&w->slots[i].word, memory_order_relaxed);
    return sum;
}

static run_ctx *new_ctx(workload *w, int kind, int nt) {
    run_ctx *c = aligned_alloc(64, sizeof(run_ctx));
    if (!c) exit(1);
    memset(c, 0, sizeof *c);
    c->w = w;
    c->nthreads = nt;
    c->at = kind == K_AT || kind == K_AT_STREAMED;
    c->with_clock = kind == K_CLOCK_CAS;
    c->work = kind == K_CAS_WORK ? FLOOR_WORK : 0;
    c->many = kind == K_MANY;
    c->streamed = kind == K_AT_STREAMED || kind == K_ACQUIRE_STREAMED;
    c->table = kind == K_TABLE ? 1 : kind == K_TABLE_CLOCK ? 2 : kind == K_TABLE_DEP ? 3 : 0;
    c->verb = kind == K_PEEK ? VERB_PEEK : kind == K_REFUND ? VERB_REFUND : kind == K_RESET ? VERB_RESET : VERB_NONE;
    if (c->verb) c->at = 1;
    /* start each case at a different place in its order */
    c->th[0].pos = (uint32_t)(kind * 7919 + nt * 104729) & (ORDER_LEN - 1);
    c->th[1].pos = c->th[0].pos;
    return c;
}

/* Measures every case of one size as a group, prints them, and checks that
 * they stayed where they were meant to be: every decision allowed, the
 * store's counters moved by exactly the decisions run (no insert, forgetting
 * or eviction), the floors' slots hold exactly what their CASes added. */
static void run_cases(workload *w, int size) {
    struct {
        int kind, nt;
    } list[N_KINDS * 2];
    size_t n = 0;
    for (int kind = 0; kind < K_AT_STREAMED; kind++)
        for (int nt = 1; nt <= 2; nt++) list[n].kind = kind, list[n++].nt = nt;
    if (w->stream)
        for (int kind = K_AT_STREAMED; kind <= K_ACQUIRE_STREAMED; kind++)
            list[n].kind = kind, list[n++].nt = 1;
    list[n].kind = K_MANY, list[n++].nt = 1;
    for (int kind = K_PEEK; kind <= K_RESET; kind++) list[n].kind = kind, list[n++].nt = 1;
    for (int kind = K_TABLE; kind <= K_TABLE_DEP; kind++) list[n].kind = kind, list[n++].nt = 1;
    list[n].kind = K_CAS_WORK, list[n++].nt = 1;
    timing cases[N_KINDS * 2];
    for (size_t k = 0; k < n; k++) {
        int is_store = is_store_kind(list[k].kind);
        int is_table = list[k].kind >= K_TABLE && list[k].kind <= K_TABLE_DEP;
        cases[k] = (timing){.fn = is_store ? work_store : is_table ? work_table : work_floor,
                            .ctx = new_ctx(w, list[k].kind, list[k].nt),
                            .nthreads = list[k].nt};
    }
    sluice_stats s0 = {0}, s1 = {0};
    sluice_store_stats(w->store, &s0);
    uint64_t sum0 = slot_sum(w);
    measure_group(cases, n);
    sluice_store_stats(w->store, &s1);
    uint64_t store_ops = 0, added = 0;

    for (size_t k = 0; k < n; k++) {
        int kind = list[k].kind, nt = list[k].nt, is_store = is_store_kind(kind);
        run_ctx *c = cases[k].ctx;
        result r = cases[k].r;
        res[size][kind][nt - 1] = r;
        if (counts_decisions(kind)) store_ops += r.ops;
        added += c->th[0].added + c->th[1].added;
        if (kind == K_AT_STREAMED)
            printf("the same, keys read in order of use (the caller's key in cache, not a miss in "
                   "a 16 MB array):\n");
        if (kind == K_MANY)
            printf("not a goal: batches (the store fetches a batch's keys into the cache ahead):\n");
        if (kind == K_PEEK)
            printf("the verbs beside acquire (a reading a run, as acquire_at; a refund follows the admission it "
                   "undoes, a reset precedes the acquire that adds its key back):\n");
        if (kind == K_TABLE)
            printf("the floor of a keyed decision: the same work without the library (bench/floor_table.h; "
                   "dependent: the next key goes through the last decision):\n");
        if (kind == K_CAS_WORK)
            printf("for scale: the floor with a little work between its load and its CAS:\n");

        char label[64], extra[160];
        snprintf(label, sizeof label, "%-25s %s keys %d thread%s", kind_names[kind],
                 size_names[size], nt, nt == 1 ? " " : "s");
        int len = 0;
        if (nt == 2)
            len = snprintf(extra, sizeof extra, "%.2fx the decisions/s of 1 thread",
                           res[size][kind][0].med / r.med);
        if (kind >= K_PEEK && kind <= K_RESET)
            len = snprintf(extra, sizeof extra, "%.2fx acquire_at", r.med / res[size][K_AT][0].med);
        extra[len] = 0;
        uint64_t denied = c->th[0].denied + c->th[1].denied;
        uint64_t retries = c->th[0].retries + c->th[1].retries;
        if (is_store || (kind >= K_TABLE && kind <= K_TABLE_DEP))
            snprintf(extra + len, sizeof extra - (size_t)len, "%sdenied %" PRIu64, len ? "  " : "",
                     denied);
        else if (retries)
            snprintf(extra + len, sizeof extra - (size_t)len, "%sCAS retries %" PRIu64,
                     len ? "  " : "", retries);
        row(label, r, extra);
        for (int i = 0; i < 2; i++)
            if (c->th[i].rc) {
                fprintf(stderr, "bench_store: %s: %s\n", label, sluice_strerror(c->th[i].rc));
                failed = 1;
            }
        if (denied) failed = 1;
        free(c);
    }
    if (s1.allowed - s0.allowed != (int64_t)store_ops || s1.denied != s0.denied ||
        s1.forgotten != s0.forgotten || s1.evicted != s0.evicted || s1.refused != s0.refused ||
        s1.keys != s0.keys) {
        fprintf(stderr,
                "bench_store: %s keys: the store left the allow path: allowed +%" PRId64
                " of %" PRIu64 ", denied +%" PRId64 ", forgotten +%" PRId64 ", evicted +%" PRId64
                ", refused +%" PRId64 ", keys %" PRId64 " -> %" PRId64 "\n",
                size_names[size], s1.allowed - s0.allowed, store_ops, s1.denied - s0.denied,
                s1.forgotten - s0.forgotten, s1.evicted - s0.evicted, s1.refused - s0.refused,
                s0.keys, s1.keys);
        failed = 1;
    }
    if (slot_sum(w) - sum0 != added) {
        fprintf(stderr, "bench_store: %s keys: the floors' slots do not add up (lost CASes)\n",
                size_names[size]);
        failed = 1;
    }
}

static void bench_size(int size) {
    uint32_t n = size_keys[size];
    workload w = {.n = n};
    w.keys = make_keys(n);
    w.policy = make_policy();
    w.store = open_store(n);
    uint32_t *perm = shuffled(n), *held = xmalloc((size_t)n * sizeof *held);
    memset(held, 0xff, (size_t)n * sizeof *held);
    uint32_t n_held = warm(w.store, w.policy, w.keys, n, perm, held);
    free(perm);
    sluice_stats st;
    sluice_store_stats(w.store, &st);
    if (st.keys != n_held || st.forgotten || st.evicted || st.refused != n - n_held) {
        fprintf(stderr, "bench_store: after warm-up the store holds %" PRId64 " keys, %" PRIu32
                " expected\n", st.keys, n_held);
        exit(1);
    }
    /* halves for two threads: held keys below n/2, and the rest */
    uint32_t split = 0;
    while (split < n_held && held[split] < n / 2) split++;
    uint64_t rng = UINT64_C(0x5eed) + size;
    w.orders[0] = make_order(held, n_held, &rng);
    w.orders[1] = make_order(held, split, &rng);
    w.orders[2] = make_order(held + split, n_held - split, &rng);
    if (size == SIZE_1M) {
        w.stream = xmalloc((size_t)ORDER_LEN * sizeof *w.stream);
        for (uint32_t i = 0; i < ORDER_LEN; i++)
            memcpy(w.stream[i], w.keys[w.orders[0][i]], KEY_LEN);
    }
    sluice_config bucket = sluice_token_bucket(SLUICE_LIMIT_MAX, SLUICE_LIMIT_MAX, 1000); /* make_policy's */
    ft_build(&w.table, (const uint8_t(*)[16])w.keys, n, &bucket);
    w.slots = aligned_alloc(64, (size_t)n * sizeof(slot));
    if (!w.slots) exit(1);
    for (uint32_t i = 0; i < n; i++) atomic_init(&w.slots[i].word, 0);

    printf("\n== %s keys: max_keys %" PRIu32 ", %" PRIu32 " held after warm-up (%" PRIu32
           " refused: their shard was full); %" PRIu32 " + %" PRIu32 " for 2 threads\n",
           size_names[size], n, n_held, n - n_held, split, n_held - split);
    run_cases(&w, size);

    free(w.slots);
    ft_free(&w.table);
    free(w.stream);
    for (int i = 0; i < 3; i++) free(w.orders[i]);
    free(held);
    sluice_store_close(w.store);
    sluice_policy_free((sluice_policy *)w.policy);
    free(w.keys);
}

/* ------------------------------------------------------------------------ */
/* Clock and memory sections                                                 */
/* ------------------------------------------------------------------------ */

static void work_clock(void *ctx, int tid, uint64_t n) {
    (void)tid;
    const sluice_clock *clk = sluice_clock_monotonic();
    uint64_t acc = 0;
    for (uint64_t i = 0; i < n; i++) acc += (uint64_t)sluice_clock_now_ms(clk);
    *(volatile uint64_t *)ctx += acc;
}

static result clock_read;

static void bench_clock(void) {
    const char *which = "CLOCK_MONOTONIC";
    double coarse_ms = -1;
#ifdef CLOCK_MONOTONIC_COARSE
    struct timespec res_ts;
    if (clock_getres(CLOCK_MONOTONIC_COARSE, &res_ts) == 0) {
        coarse_ms = (double)res_ts.tv_sec * 1e3 + (double)res_ts.tv_nsec / 1e6;
        if (res_ts.tv_sec == 0 && res_ts.tv_nsec <= 1000000) which = "CLOCK_MONOTONIC_COARSE";
    }
#endif
    char extra[128];
    snprintf(extra, sizeof extra,
             "reads %s (COARSE resolution %.3g ms; src/clock.c takes it at <= 1 ms)", which,
             coarse_ms);
    printf("\n== the default clock: one read\n");
    volatile uint64_t acc = 0;
    timing t = {.fn = work_clock, .ctx = (void *)&acc, .nthreads = 1};
    measure_group(&t, 1);
    clock_read = t.r;
    row("sluice_clock_now_ms(monotonic)", clock_read, extra);
}

static void print_memory(void) {
    printf("\n== memory per key of capacity: token bucket, 16-byte keys, growth from open to "
           "warmed / max_keys\n");
    for (int size = 0; size < N_SIZES; size++) {
        unsigned n_shards;
        uint32_t n = size_keys[size];
        double layout = layout_bytes(n, &n_shards);
        if (!mem[size].ok) {
            printf("%s keys: could not measure (fork, /proc/self/statm)\n", size_names[size]);
            failed = 1;
            continue;
        }
        printf("%s keys (%u shard%s, %" PRIu32 " held): rss %6.2f B/key  allocated %6.2f B/key  "
               "layout %6.2f B/key (32-byte slots, %.2f a key)  fixed %.1f KB\n",
               size_names[size], n_shards, n_shards == 1 ? "" : "s", mem[size].held,
               mem[size].rss_bytes / n, mem[size].alloc_bytes / n, layout / n, layout / n / 32,
               (mem[size].alloc_bytes - layout) / 1024);
    }
}

/* ------------------------------------------------------------------------ */
/* Goals                                                                     */
/* ------------------------------------------------------------------------ */

static void goal_line(const char *what, double value, const char *unit, const char *cmp,
                      double bound, int pass, double spread) {
    printf("%-52s %7.2f%-4s goal %s %5.2f%-4s %s", what, value, unit, cmp, bound, unit,
           pass ? "PASS" : "MISS");
    if (spread > 0.10) printf("  (noisy: spread %.0f%%)", 100 * spread);
    printf("\n");
}

static double max2(double a, double b) {
    return a > b ? a : b;
}

static void print_goals(void) {
    char what[96];
    printf("\n== goals (ratios of medians from this run; informational)\n");
    for (int size = 0; size < N_SIZES; size++) {
        result a = res[size][K_ACQUIRE][0], f = res[size][K_CLOCK_CAS][0];
        snprintf(what, sizeof what, "acquire %s / (clock + cas) %s, 1 thread", size_names[size],
                 size_names[size]);
        goal_line(what, a.med / f.med, "x", "<=", 1.3, a.med / f.med <= 1.3,
                  max2(a.spread, f.spread));
    }
    for (int size = 0; size < N_SIZES; size++) {
        result a = res[size][K_AT][0], f = res[size][K_CAS][0];
        double bound = size == SIZE_1K ? 2.0 : 1.5;
        snprintf(what, sizeof what, "acquire_at %s / cas %s, 1 thread", size_names[size],
                 size_names[size]);
        goal_line(what, a.med / f.med, "x", "<=", bound, a.med / f.med <= bound,
                  max2(a.spread, f.spread));
    }
    {
        result a = res[SIZE_1K][K_AT][0], f = res[SIZE_1K][K_TABLE][0];
        goal_line("acquire_at 1K / table floor 1K, 1 thread", a.med / f.med, "x", "<=", 1.5, a.med / f.med <= 1.5,
                  max2(a.spread, f.spread));
        a = res[SIZE_1M][K_AT][0], f = res[SIZE_1M][K_TABLE_DEP][0];
        goal_line("acquire_at 1M / dependent table floor 1M, 1 thread", a.med / f.med, "x", "<=", 1.2,
                  a.med / f.med <= 1.2, max2(a.spread, f.spread));
        for (int size = 0; size < N_SIZES; size++) {
            a = res[size][K_ACQUIRE][0], f = res[size][K_TABLE_CLOCK][0];
            snprintf(what, sizeof what, "acquire %s / (table floor + clock) %s, 1 thread (for scale)",
                     size_names[size], size_names[size]);
            goal_line(what, a.med / f.med, "x", "<=", 1.5, a.med / f.med <= 1.5, max2(a.spread, f.spread));
        }
    }
    for (int kind = K_AT; kind <= K_ACQUIRE; kind++)
        for (int size = 0; size < N_SIZES; size++) {
            result one = res[size][kind][0], two = res[size][kind][1];
            double x = one.med / two.med;
            snprintf(what, sizeof what, "%s %s: 2 threads / 1 thread, decisions/s",
                     kind == K_AT ? "acquire_at" : "acquire", size_names[size]);
            goal_line(what, x, "x", ">=", 1.7, x >= 1.7, max2(one.spread, two.spread));
        }
    for (int kind = K_PEEK; kind <= K_REFUND; kind++)
        for (int size = 0; size < N_SIZES; size++) {
            /* a refund's own cost: its pair's less the acquire_at's */
            result v = res[size][kind][0], a = res[size][K_AT][0];
            double x = kind == K_PEEK ? v.med / a.med : (v.med - a.med) / a.med;
            snprintf(what, sizeof what, "%s %s / acquire_at %s, 1 thread",
                     kind == K_PEEK ? "peek_at" : "refund_at (pair - acquire_at)", size_names[size],
                     size_names[size]);
            goal_line(what, x, "x", "<=", 1.2, x <= 1.2, max2(v.spread, a.spread));
        }
    for (int size = 0; size < N_SIZES; size++) {
        if (!mem[size].ok) continue;
        double rss = mem[size].rss_bytes / size_keys[size];
        double alloc = mem[size].alloc_bytes / size_keys[size];
        snprintf(what, sizeof what, "memory %s, resident / max_keys", size_names[size]);
        goal_line(what, rss, " B", "<=", 64, rss <= 64, 0);
        snprintf(what, sizeof what, "memory %s, allocated / max_keys", size_names[size]);
        goal_line(what, alloc, " B", "<=", 64, alloc <= 64, 0);
    }
    printf("(for scale, not goals: the floors' own 2-thread scaling, cas %.2fx / %.2fx and "
           "clock + cas %.2fx / %.2fx at 1K / 1M;\n with keys streamed, acquire 1M / (clock + cas) "
           "%.2fx and acquire_at 1M / cas %.2fx)\n",
           res[0][K_CAS][0].med / res[0][K_CAS][1].med, res[1][K_CAS][0].med / res[1][K_CAS][1].med,
           res[0][K_CLOCK_CAS][0].med / res[0][K_CLOCK_CAS][1].med,
           res[1][K_CLOCK_CAS][0].med / res[1][K_CLOCK_CAS][1].med,
           res[1][K_ACQUIRE_STREAMED][0].med / res[1][K_CLOCK_CAS][0].med,
           res[1][K_AT_STREAMED][0].med / res[1][K_CAS][0].med);
}

/* ------------------------------------------------------------------------ */

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    int64_t t0 = now_ns();
    /* Memory first, each size in a child forked before anything has been
     * allocated or freed here, so no freed memory hides the growth. */
    for (int size = N_SIZES - 1; size >= 0; size--) mem[size] = measure_memory(size_keys[size]);

    bench_setup_threads(); /* multi-threaded, pinned: see bench_util.h */
    printf("bench_store: sluice %s, %ld CPUs online, %s; median of %d runs of ~%.0f ms each\n",
           sluice_version(), sysconf(_SC_NPROCESSORS_ONLN),
           n_cpus >= 2 ? "threads pinned one per CPU" : "one CPU usable: 2 threads share it", N_RUNS,
           RUN_NS / 1e6);
    printf("token bucket capacity 1e9, 1e9 per s; 16-byte keys; cost 1; ns per decision "
           "(2 threads: wall / decisions of both)\n");
    bench_clock();
    for (int size = 0; size < N_SIZES; size++) bench_size(size);
    print_memory();
    print_goals();
    printf("\n(%.1f s)\n", (double)(now_ns() - t0) / 1e9);
    return failed;
}
