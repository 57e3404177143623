/* store/shm.c: per-key state in a shared-memory file, for the processes of
 * one host ("shm:PATH?max_keys=N&on_full=evict|refuse&key_bytes=K&state_bytes=S").
 * Every process maps the file at its own address, so the layout has offsets
 * and fixed-width fields only, never pointers (native byte order: the file
 * belongs to one host):
 *
 *   0      header, 4096 bytes
 *          +0   magic "SLUICEM1"          u8[8]
 *          +8   layout version (3)         u32
 *          +12  header bytes (4096)        u32
 *          +16  slot bytes                 u32   (a multiple of 64)
 *          +20  slots per bucket           u32
 *          +24  buckets                    u64
 *          +32  key bytes                  u32   (longest key a slot holds)
 *          +36  state bytes                u32   (one state copy)
 *          +40  hash seed                  u64[2]
 *          +56  boot id                    char[40] (NUL-padded)
 *          +96  store time: highest reading  atomic i64
 *          +104 key hash: 1 SipHash-1-3, 2 three AES rounds for keys of up
 *               to 16 bytes (where the CPU that made the file has AES
 *               instructions; SipHash-1-3 for longer keys)   u32; either
 *               takes the top 32 bits of the policy's fingerprint too
 *          +112 the AES hash's round keys  u64[8]
 *   4096   buckets, each: header (align64(128 + align8(slots per bucket)) bytes)
 *          +0   lock: owner (start << 32 | pid), 0 free   atomic u64
 *          +8   bucket time: the highest reading a key was forgotten at,
 *               kept as reading - SLUICE_TIME_MIN_MS (0: none)  atomic i64
 *          +64  allowed (by keys no longer held), denied, forgotten,
 *               evicted, refused           atomic u64 each
 *          +128 tags, one byte per slot, 8 to a u64   (a hint: 0 none)
 *          then the slots, each (64-aligned; what a decision reads first:
 *          a FAST key with a key of up to 16 bytes is decided on one line):
 *          +0   a FAST key's state   u64: a bucket's TAT - born at * r,
 *               in its units (r per ms), as an i64; a fixed window's
 *               index - k0 << 30 | count; a sliding window's index - k0
 *               << 32 | prev << 16 | cur; k0 being the index of the window
 *               the key was added in (a window's 0: no count, fresh)
 *          +8   control: version << 2 | FAST << 1 | live   atomic u64
 *          +16  policy fingerprint (of the live key)   u64
 *          +24  born at: the store time the key was added at (its
 *               decisions are never earlier)   i64
 *          +32  key length                 u32
 *          +40  last use (store ms)        i64   (a hint)
 *          +48  key, zero-padded to 8      u8[key bytes]
 *          then (16-aligned):
 *          +0   change: the move to a version, 16 bytes: a u64, then
 *               version mod 2^32 << 32 | kind << 30 | cost  u64; kind 1
 *               admit (the u64: reading - SLUICE_TIME_MIN_MS), 2 settled
 *               (the u64: the store time at which the state is fresh
 *               again, i64), 3 drop
 *          +16  born: the version the key was added at   u64 (so the
 *               key's admissions are its version - born; a move from
 *               FAST adds one to both)
 *          +24  a FAST key's unit: a bucket's r (> 0), or -(2W) for a
 *               fixed window of W ms, -(2W + 1) for a sliding one   i64
 *          then state copies 0 and 1, 2 * state bytes each:
 *          words of {value u64, version u64}, the state 8 bytes a word:
 *          the parts' states one after the other: buckets i128
 *          TAT; fixed window i64 index, count; sliding window i64 index,
 *          prev, cur; sliding log u32 cap, head, len, pad, i64 base, then
 *          cap entries of (i64 ms, i64 running total).
 *
 * Updates of a key are lock-free. A key of a one-part policy of a bucket
 * (token or leaky), a fixed window, or a sliding window of a limit below
 * 2^16 is FAST: its state is one word next to its control word, and an
 * admission is one 16-byte compare-and-swap of the two, while the state,
 * kept relative to the time the key was added, fits: a TAT in 63 bits (at
 * r units per ms, 2^63 / r ms: 292 million years at r = 1, 107 days at
 * r = 999999937, which a rate like 999999937/1000ms needs); a fixed
 * window's index within 2^34 windows of the first (199 days of 1 ms
 * windows) beside its count in 30 bits; a sliding window's within 2^32 (49
 * days of 1 ms windows) beside two counts in 16 bits. A state that would
 * not fit first moves the key, under its buckets' locks, to the general
 * form below (the same state as words; a process killed midway leaves it
 * FAST and whole).
 *
 * Every other key: the key's version v selects its current
 * copy, v & 1, whose words all carry version v. An admission (1) reads the
 * copy, (2) installs its change for version v + 1 (its reading and cost)
 * with one 16-byte compare-and-swap, (3) writes the new state into the
 * other copy, each word with a 16-byte compare-and-swap that only raises a
 * word's version, and (4) marks the change settled (with the time the new
 * state is fresh again) and moves the control word to v + 1. The new
 * state depends only on the old one and the change, so any process that
 * meets an installed change finishes it (writing the same values) instead
 * of waiting: a process stopped or killed at any step blocks nobody. A word's version only grows, so a process that wakes up
 * late cannot write over a newer state; a reader takes a copy only when
 * every word it read carries the version of the control word. Dropping a
 * key is a change too (kind 3), so it cannot overtake an admission: a
 * fresh key is dropped only with no change pending, and the least recently
 * used key may be dropped with its admission pending (as if the admission
 * came first). A key being added takes a new version before it writes its
 * state, so words that an add killed midway wrote never pass for a later
 * key's state. The change keeps its version mod 2^32 (the words keep all
 * 64 bits): a process stopped between reading a key and installing its
 * change while its slot took 2^32 updates (of that key, or of keys that
 * held the slot since) could install a stale one. KNOWN, NOT FIXED: the
 * key then stops being decided (every decision retries), as a reviewer
 * showed by forging the 2^32 updates. It takes a process stopped in the
 * middle of one decision for as long as 2^32 updates of one slot take
 * (minutes at full speed on one slot); a fix keeps more version bits in
 * the change word or ties the change to the key's birth version.
 *
 * Only the table's shape takes a lock: adding a key, and making room for
 * it, hold the locks of the key's two buckets. A bucket's lock is a word
 * naming its owner (pid and start time), taken with compare-and-swap; a
 * waiter that finds the owner dead (a process killed with SIGKILL: gone, a
 * zombie, or its pid now another process's) takes the lock over. A new key
 * is written whole before its control word says live, and a dropped key's
 * control word says dead before its slot is reused. So a crash leaks no
 * slot and corrupts nothing, and at most the one interrupted request is
 * admitted unused. Not covered: processes of different pid namespaces
 * sharing one file. The 16-byte compare-and-swap must be an instruction
 * (x86-64 cmpxchg16b, checked when a file is opened; aarch64 casp or
 * ldxp/stxp), never a process-local lock, which would not work across
 * processes: elsewhere the shm store refuses to open.
 *
 * Room: a key lives in one of two buckets chosen by its hash: the first
 * while it has room, else the second (two choices fill a table almost to
 * capacity, where one choice turns keys away from full buckets long
 * before). A new key whose two buckets are full first takes the place of a
 * fresh key there (fresh at <= store time: forgetting it changes nothing),
 * else on_full evicts the least recently used of the two buckets' keys, or
 * refuses. Time is the store's clock (by default CLOCK_MONOTONIC, one clock
 * for every process of the host); the store's time is the highest reading
 * any process admitted at (never backwards), a bucket's time the highest
 * it forgot a key at (a key's decisions are never earlier), and the boot
 * id detects a reboot, after which the file starts fresh. */
#define _GNU_SOURCE
#include "internal.h"

#include <dirent.h>
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shm needs lock-free 64-bit atomics");

#define MAGIC "SLUICEM1"
#define LAYOUT_VERSION 3
#define HEADER_BYTES 4096
#define BUCKET_SLOTS 16
#define KEY_BYTES_DEFAULT 128
#define STATE_BYTES_DEFAULT 256
#define MAX_KEYS_DEFAULT 100000

typedef struct {
    char magic[8];
    uint32_t version, header_bytes, slot_bytes, slots_per_bucket;
    uint64_t buckets;
    uint32_t key_bytes, state_bytes;
    uint64_t seed[2];
    char boot_id[40];
    _Atomic int64_t now_ms;
    uint32_t hash_kind, pad;
    uint64_t aes_key[8];
} file_header;
#define HASH_SIP 1u
#define HASH_AES 2u

typedef struct {
    _Atomic uint64_t lock;
    _Atomic int64_t now_ms; /* read by every decision: a line apart from the counts */
    uint64_t pad0[6];
    _Atomic uint64_t allowed, denied, forgotten, evicted, refused;
    uint64_t pad1[3];
    _Atomic uint64_t tags[]; /* a byte a slot, 8 to a word */
} bucket_header;

/* Two 64-bit words changed together by a 16-byte compare-and-swap. */
typedef struct {
    _Alignas(16) _Atomic uint64_t lo;
    _Atomic uint64_t hi;
} pair;

/* What a decision reads, first: a FAST key with a key of up to 16 bytes
 * is decided on this one line. */
typedef struct {
    pair head; /* lo: a FAST key's word (its state); hi: the control word */
    _Atomic uint64_t fp;
    _Atomic int64_t born_ms;
    _Atomic uint32_t key_len;
    uint32_t pad;
    _Atomic int64_t last_use_ms;
    _Atomic uint64_t key[]; /* zero-padded to a multiple of 8 bytes */
} slot;
#define CTRL(sl) (&(sl)->head.hi)

/* After the key (16-aligned): what the general form and making room read. */
typedef struct {
    pair change; /* lo: see the kind; hi: see CHANGE() */
    _Atomic uint64_t born;
    _Atomic int64_t unit; /* a FAST key's: a bucket's r, or a window's (see the top) */
} slot_tail;

#define LIVE 1u
#define FAST 2u /* the key's state is one word, head.lo (see the top) */
#define FW_COUNT_BITS 30 /* a FAST fixed window's word: its count's bits */
_Static_assert(SLUICE_LIMIT_MAX < (1 << FW_COUNT_BITS), "a FAST fixed window's count fits its bits");
#define FW_INDEX_SPAN (INT64_C(1) << (64 - FW_COUNT_BITS)) /* windows past k0 it holds */
_Static_assert(SLUICE_PERIOD_MAX_MS < (INT64_C(1) << 40), "a window's unit, -(2W + 1), fits");
#define VERSION(c) ((c) >> 2)
#define CTRL_WORD(v, flags) ((uint64_t)(v) << 2 | (flags))
#define KIND_ADMIT 1u
#define KIND_SETTLED 2u
#define KIND_DROP 3u
#define CHANGE(version, kind, cost) ((uint64_t)(uint32_t)(version) << 32 | (uint64_t)(kind) << 30 | (uint64_t)(cost))
#define CHANGE_VERSION(hi) ((uint32_t)((hi) >> 32))
#define CHANGE_KIND(hi) ((unsigned)((hi) >> 30) & 3u)
#define CHANGE_COST(hi) ((int64_t)((hi) & 0x3fffffffu))
_Static_assert(SLUICE_LIMIT_MAX < (1 << 30), "a change holds a cost in 30 bits");

_Static_assert(offsetof(file_header, hash_kind) == 104 && sizeof(file_header) == 176,
               "the header's fields at their offsets");
_Static_assert(offsetof(bucket_header, allowed) == 64 && offsetof(bucket_header, tags) == 128, "counts at +64, tags at +128");
_Static_assert(offsetof(slot, fp) == 16 && offsetof(slot, key) == 48 && sizeof(slot_tail) == 32,
               "fp at +16, key at +48, a tail of 32");

/* What this process knows of a policy: its fingerprint in the file and
 * where each part's state lies in a state copy. */
typedef struct {
    sluice_policy policy;
    uint64_t fp;
    uint32_t tweak; /* its keys' hash tweak: fp's top 32 bits */
    uint32_t offset[SLUICE_POLICY_MAX_PARTS], log_cap[SLUICE_POLICY_MAX_PARTS];
    uint32_t bytes, words; /* a state copy: bytes, words */
    int fast;              /* its keys' state is one word (FAST: see the top) */
    int64_t fast_unit;     /* FAST: the slot's unit (see the top) */
    uint64_t fast_fresh;   /* FAST: a fresh key's word */
} spolicy;

typedef struct {
    struct sluice_store head;
    uint8_t *map;
    size_t map_bytes;
    file_header *hdr;
    uint64_t buckets;
    uint32_t spb, slot_bytes, bucket_bytes, bucket_header_bytes, key_bytes, state_bytes;
    sluice_on_full on_full;
    int aes; /* keys of up to 16 bytes: the AES hash (the file says so) */
    int collide; /* test hook: every key hashes alike */
    sluice__policy_set policies; /* items: spolicy */
} shm_store;

/* ---- the file's geometry ---- */

static uint32_t align_up(uint32_t x, uint32_t a) {
    return (x + a - 1) / a * a;
}

static bucket_header *bucket_at(const shm_store *m, uint64_t b) {
    return (bucket_header *)(m->map + HEADER_BYTES + b * m->bucket_bytes);
}

static slot *slot_at(const shm_store *m, bucket_header *bh, uint32_t i) {
    return (slot *)((uint8_t *)bh + m->bucket_header_bytes + (size_t)i * m->slot_bytes);
}

static slot_tail *tail_of(const shm_store *m, slot *sl) {
    return (slot_tail *)((uint8_t *)sl + align_up(48 + align_up(m->key_bytes, 8), 16));
}

/* The state copy of version v: state bytes / 8 words, each a pair of lo
 * its value, hi its version. */
static pair *copy_at(const shm_store *m, slot *sl, uint64_t v) {
    size_t words = m->state_bytes / 8;
    return (pair *)(tail_of(m, sl) + 1) + (v & 1) * words;
}

/* ---- the 16-byte compare-and-swap ---- */

/* When *p is {lo, hi}, makes it {new_lo, new_hi} and returns 1. */
static int cas16(pair *p, uint64_t lo, uint64_t hi, uint64_t new_lo, uint64_t new_hi) {
#if defined(__x86_64__)
    uint8_t ok;
    __asm__ __volatile__("lock cmpxchg16b %1\n\tsetz %0"
                         : "=q"(ok), "+m"(*(volatile unsigned __int128 *)p), "+a"(lo), "+d"(hi)
                         : "b"(new_lo), "c"(new_hi)
                         : "memory", "cc");
    return ok;
#elif defined(__aarch64__) /* casp, or an ldxp/stxp loop: no lock either way */
    unsigned __int128 e = (unsigned __int128)hi << 64 | lo, n = (unsigned __int128)new_hi << 64 | new_lo;
    return __atomic_compare_exchange_n((unsigned __int128 *)(void *)p, &e, n, 0, __ATOMIC_SEQ_CST,
                                       __ATOMIC_SEQ_CST);
#else
    (void)p, (void)lo, (void)hi, (void)new_lo, (void)new_hi;
    return 0; /* never called: cas16_lock_free() is 0 (see it) */
#endif
}

/* Whether cas16 is one instruction (across processes, a lock would not do). */
static int cas16_lock_free(void) {
#if defined(__x86_64__)
    unsigned a = 1, b, c = 0, d;
    __asm__ __volatile__("cpuid" : "+a"(a), "=b"(b), "+c"(c), "=d"(d));
    return (c >> 13) & 1; /* CPUID.1:ECX.CX16 */
#elif defined(__aarch64__)
    return 1;
#else
    return 0; /* a 16-byte CAS here may be a process-local lock (libatomic): port cas16 first */
#endif
}

/* A consistent reading of a pair whose hi changes with every store to it
 * (hi read before and after lo: equal, so lo is of the same store). */
static void pair_read(pair *p, uint64_t *lo, uint64_t *hi) {
    for (;;) {
        uint64_t h = atomic_load_explicit(&p->hi, memory_order_acquire);
        *lo = atomic_load_explicit(&p->lo, memory_order_acquire);
        if (atomic_load_explicit(&p->hi, memory_order_acquire) == h) {
            *hi = h;
            return;
        }
    }
}

/* Stores {lo, hi} whole where nobody else writes p now (a late CAS of an
 * older value may still come: it fails, meeting another value). */
static void pair_set(pair *p, uint64_t lo, uint64_t hi) {
    uint64_t old_lo, old_hi;
    do pair_read(p, &old_lo, &old_hi);
    while (!cas16(p, old_lo, old_hi, lo, hi));
}

/* ---- the bucket lock: a pid, taken over from a dead owner ---- */

/* A process as a lock word: (start time << 32) | pid, the start time being
 * the low 32 bits of /proc/PID/stat's field 22 (clock ticks since boot), so
 * a pid reused by a newer process is not mistaken for the dead owner.
 * Refreshed in a child after fork(): a child locks as itself. */
static _Atomic uint64_t self_id;

/* The state letter and start time in a /proc stat file; 0 when unreadable. */
static int stat_file(const char *path, char *state, uint64_t *start) {
    char buf[512];
    FILE *f = fopen(path, "r");
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

/* Whether the process of lock word owner is gone: no such pid, a zombie
 * (killed, not yet reaped: every thread Z), or a newer process with the
 * same pid (its start time differs, also for a pid we may not signal: it
 * belongs to another user now). When /proc cannot tell: alive. */
static int owner_dead(uint64_t owner) {
    pid_t pid = (pid_t)(owner & 0xffffffffu);
    if (kill(pid, 0) == -1 && errno != EPERM) return errno == ESRCH;
    char state;
    uint64_t start;
    if (!proc_stat(pid, &state, &start)) return 0; /* unknown: alive (taking a live owner's lock is worse) */
    if ((owner >> 32) != 0 && (owner >> 32) != (start & 0xffffffffu)) return 1;
    return (state == 'Z' || state == 'X') && !some_thread_runs(pid);
}

static void bucket_lock(bucket_header *bh) {
    uint64_t me = atomic_load_explicit(&self_id, memory_order_relaxed);
    for (unsigned spins = 0;; spins++) {
        uint64_t owner = 0;
        if (atomic_compare_exchange_weak_explicit(&bh->lock, &owner, me, memory_order_acquire,
                                                  memory_order_relaxed))
            return;
        if (owner != 0 && owner != me && spins % 64 == 63 && owner_dead(owner) &&
            atomic_compare_exchange_strong_explicit(&bh->lock, &owner, me, memory_order_acquire,
                                                    memory_order_relaxed))
            return; /* its owner died holding it: the slots are whole (see top) */
        sluice__lock_wait(spins);
    }
}

static void bucket_unlock(bucket_header *bh) {
    atomic_store_explicit(&bh->lock, 0, memory_order_release);
}

static void unlock_all(bucket_header **locked, int n) {
    while (n-- > 0) bucket_unlock(locked[n]);
}

/* A counter of the bucket changed only under its lock (allowed, forgotten,
 * evicted, refused): no locked add needed (atomic only so that stats may
 * read it without the lock). */
static void bump(_Atomic uint64_t *c) {
    atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}

/* ---- policies ---- */

static int spolicy_init(void *item, void *ctx) {
    spolicy *sp = item;
    shm_store *m = ctx;
    const sluice_policy *p = &sp->policy;
    char text[SLUICE_POLICY_MAX_PARTS * 80 + SLUICE_POLICY_NAME_MAX + 2];
    int n = snprintf(text, sizeof text, "%s\n", p->name);
    sluice_policy_format(p, text + n, sizeof text - (size_t)n);
    uint64_t zero[2] = {0, 0};
    sp->fp = sluice__siphash24(zero, text, strlen(text)) | 1; /* never 0: 0 is "free" */
    sp->tweak = (uint32_t)(sp->fp >> 32);
    uint32_t at = 0;
    for (size_t i = 0; i < p->n_parts; i++) {
        sp->offset[i] = at;
        switch (p->parts[i].algorithm) {
        case SLUICE_TOKEN_BUCKET:
        case SLUICE_LEAKY_BUCKET:
        case SLUICE_FIXED_WINDOW: at += 16; break;
        case SLUICE_SLIDING_WINDOW: at += 24; break;
        case SLUICE_SLIDING_LOG: {
            int64_t need = p->params[i].limit < p->params[i].window_ms ? p->params[i].limit : p->params[i].window_ms;
            uint64_t cap = 1;
            while ((int64_t)cap < need) cap *= 2;
            if (cap > (UINT64_C(1) << 22)) cap = UINT64_C(1) << 22; /* too big anyway: caught below */
            sp->log_cap[i] = (uint32_t)cap;
            at = align_up(at, 8) + 24 + (uint32_t)cap * 16;
            break;
        }
        }
    }
    sp->bytes = at;
    sp->words = at / 8;
    sluice_algorithm a = p->parts[0].algorithm;
    int bucket = a == SLUICE_TOKEN_BUCKET || a == SLUICE_LEAKY_BUCKET;
    sp->fast = p->n_parts == 1 && (bucket || a == SLUICE_FIXED_WINDOW ||
                                   (a == SLUICE_SLIDING_WINDOW && p->params[0].limit <= 0xffff));
    sp->fast_unit = bucket ? p->params[0].r : -(2 * p->params[0].window_ms + (a == SLUICE_SLIDING_WINDOW));
    sp->fast_fresh = bucket ? (uint64_t)INT64_MIN : 0; /* the lowest TAT; no count */
    if (at > m->state_bytes) {
        sluice__store_errf(&m->head, "policy %s needs %u bytes of state per key; this shm file's slots "
                                     "hold %u (a new file made with ?state_bytes=%u would: remove "
                                     "this one or use another path)",
                           p->name, at, m->state_bytes, align_up(at, 16));
        return SLUICE_EINVAL;
    }
    return 0;
}

/* A state copy <-> the algorithms' states. Logs point into the copy. */
static void load_states(const spolicy *sp, uint8_t *copy, sluice__state *st) {
    const sluice_policy *p = &sp->policy;
    for (size_t i = 0; i < p->n_parts; i++) {
        uint8_t *at = copy + sp->offset[i];
        switch (p->parts[i].algorithm) {
        case SLUICE_TOKEN_BUCKET:
        case SLUICE_LEAKY_BUCKET: memcpy(&st[i].tat, at, 16); break;
        case SLUICE_FIXED_WINDOW: memcpy(&st[i].fw, at, 16); break;
        case SLUICE_SLIDING_WINDOW: memcpy(&st[i].sw, at, 24); break;
        case SLUICE_SLIDING_LOG: {
            uint32_t hdr[4];
            memcpy(hdr, at, 16);
            memcpy(&st[i].log.base, at + 16, 8);
            st[i].log.cap = hdr[0];
            st[i].log.head = hdr[1];
            st[i].log.len = hdr[2];
            st[i].log.e = (sluice__log_entry *)(at + 24);
            break;
        }
        }
    }
}

static void store_states(const spolicy *sp, uint8_t *copy, const sluice__state *st) {
    const sluice_policy *p = &sp->policy;
    for (size_t i = 0; i < p->n_parts; i++) {
        uint8_t *at = copy + sp->offset[i];
        switch (p->parts[i].algorithm) {
        case SLUICE_TOKEN_BUCKET:
        case SLUICE_LEAKY_BUCKET: memcpy(at, &st[i].tat, 16); break;
        case SLUICE_FIXED_WINDOW: memcpy(at, &st[i].fw, 16); break;
        case SLUICE_SLIDING_WINDOW: memcpy(at, &st[i].sw, 24); break;
        case SLUICE_SLIDING_LOG: {
            uint32_t hdr[4] = {st[i].log.cap, st[i].log.head, st[i].log.len, 0};
            memcpy(at, hdr, 16);
            memcpy(at + 16, &st[i].log.base, 8);
            break; /* the entries were written in place */
        }
        }
    }
}

static void fresh_states(const spolicy *sp, uint8_t *copy) {
    const sluice_policy *p = &sp->policy;
    sluice__state st[SLUICE_POLICY_MAX_PARTS];
    memset(copy, 0, sp->bytes);
    for (size_t i = 0; i < p->n_parts; i++) {
        p->algo[i]->init(&p->params[i], &st[i]);
        if (p->parts[i].algorithm == SLUICE_SLIDING_LOG) st[i].log.cap = sp->log_cap[i];
    }
    store_states(sp, copy, st);
}

/* ---- a key's state: the words of one copy ---- */

/* Reads copy v's first n words into buf: 0 when one of them is not of
 * version v (the key moved on meanwhile). */
static int copy_read(const shm_store *m, slot *sl, uint64_t v, uint64_t *buf, size_t n) {
    pair *w = copy_at(m, sl, v);
    for (size_t i = 0; i < n; i++) {
        if (atomic_load_explicit(&w[i].hi, memory_order_acquire) != v) return 0;
        buf[i] = atomic_load_explicit(&w[i].lo, memory_order_acquire);
        if (atomic_load_explicit(&w[i].hi, memory_order_acquire) != v) return 0;
    }
    return 1;
}

/* Writes buf as copy v's first n words, each only over an older version:
 * a writer that comes late (v already passed) changes nothing. */
static void copy_write(const shm_store *m, slot *sl, uint64_t v, const uint64_t *buf, size_t n) {
    pair *w = copy_at(m, sl, v);
    for (size_t i = 0; i < n; i++) {
        uint64_t lo, hi;
        do pair_read(&w[i], &lo, &hi);
        while (hi < v && !cas16(&w[i], lo, hi, buf[i], v));
    }
}

/* Decides on the state in buf, updating it when allowed (and *fresh_at:
 * the store time at which the new state is fresh again). */
static int decide_words(const spolicy *sp, uint64_t *buf, int64_t now_ms, int64_t cost, sluice_decision *d,
                        int64_t *fresh_at) {
    sluice__state st[SLUICE_POLICY_MAX_PARTS];
    load_states(sp, (uint8_t *)buf, st);
    size_t g = 0;
    int rc = sluice__policy_decide(&sp->policy, st, now_ms, cost, d, &g);
    if (rc == SLUICE__EGROW) return SLUICE_ESTORE; /* cannot happen: spolicy_init sized the logs */
    if (rc == 0 && d->allowed) {
        store_states(sp, (uint8_t *)buf, st);
        *fresh_at = now_ms + d->reset_ms;
    }
    return rc;
}

/* ---- changes: the move of a key from version v to v + 1 ---- */

/* Moves the control word c on, once its change (hi) is decided: live
 * when settled (an admission written), dead after a drop. Anyone may; the
 * first does. */
static void publish(slot *sl, uint64_t c, uint64_t hi) {
    unsigned kind = CHANGE_KIND(hi);
    if (CHANGE_VERSION(hi) != (uint32_t)(VERSION(c) + 1) || kind == KIND_ADMIT) return;
    uint64_t next = CTRL_WORD(VERSION(c) + 1, kind == KIND_SETTLED ? LIVE : 0);
    atomic_compare_exchange_strong_explicit(CTRL(sl), &c, next, memory_order_acq_rel, memory_order_relaxed);
}

/* Finishes the admission {lo, hi} installed in sl at control word c, as its
 * maker would (the same values: they depend only on the old state and the
 * change), then publishes. Any process that knows the key's policy may,
 * any number of times; buf is room for the policy's words. */
static void finish(const shm_store *m, const spolicy *sp, slot *sl, uint64_t c, uint64_t lo, uint64_t hi,
                   uint64_t *buf) {
    if (CHANGE_KIND(hi) == KIND_ADMIT) {
        if (!copy_read(m, sl, VERSION(c), buf, sp->words)) return; /* already moved on */
        sluice_decision d;
        int64_t fresh_at = INT64_MIN;
        if (decide_words(sp, buf, (int64_t)lo + SLUICE_TIME_MIN_MS, CHANGE_COST(hi), &d, &fresh_at) || !d.allowed)
            fresh_at = INT64_MAX; /* not its maker's decision (see the change's version): never forgotten */
        copy_write(m, sl, VERSION(c) + 1, buf, sp->words);
        uint64_t settled = CHANGE(VERSION(c) + 1, KIND_SETTLED, 0);
        if (cas16(&tail_of(m, sl)->change, lo, hi, (uint64_t)fresh_at, settled)) hi = settled;
        else pair_read(&tail_of(m, sl)->change, &lo, &hi); /* settled by another, or dropped */
    }
    publish(sl, c, hi);
}

/* Installs a drop in place of sl's change {lo, hi} read at control word c
 * (none pending, or an admission pending), then publishes it and adds the
 * key's admissions to its bucket's count: 1, or 0 when the key changed
 * meanwhile. With the buckets' locks held. */
/* The admissions of the key held at control word c: its version's count
 * since it was added. */
static uint64_t admissions(const shm_store *m, slot *sl, uint64_t c) {
    return VERSION(c) - atomic_load_explicit(&tail_of(m, sl)->born, memory_order_relaxed);
}

/* A key dropped at control word c: its admissions go to its bucket's
 * count (under the bucket's lock). */
static void count_dropped(const shm_store *m, bucket_header *bh, slot *sl, uint64_t c) {
    atomic_store_explicit(&bh->allowed, atomic_load_explicit(&bh->allowed, memory_order_relaxed) +
                                            admissions(m, sl, c), memory_order_relaxed);
}

static int drop(const shm_store *m, bucket_header *bh, slot *sl, uint64_t c, uint64_t lo, uint64_t hi) {
    uint64_t d = CHANGE(VERSION(c) + 1, KIND_DROP, 0);
    if (!cas16(&tail_of(m, sl)->change, lo, hi, 0, d)) return 0;
    publish(sl, c, d);
    count_dropped(m, bh, sl, c);
    return 1;
}

/* ---- decisions ---- */

void (*sluice__shm_step_hook)(int step);
#define STEP(n) (sluice__shm_step_hook ? sluice__shm_step_hook(n) : (void)0)

#define NOT_HELD 2 /* internal: the slot does not (or no longer) hold the key */

/* Whether sl holds the key (kw: its bytes, zero-padded to whole words). */
static int holds(slot *sl, uint64_t fp, const uint64_t *kw, size_t len) {
    if (atomic_load_explicit(&sl->fp, memory_order_relaxed) != fp ||
        atomic_load_explicit(&sl->key_len, memory_order_relaxed) != len)
        return 0;
    uint64_t k0 = atomic_load_explicit(&sl->key[0], memory_order_relaxed);
    if (len <= 8) return k0 == kw[0];
    if (len <= 16) /* the usual key: two words, no loop */
        return ((k0 ^ kw[0]) | (atomic_load_explicit(&sl->key[1], memory_order_relaxed) ^ kw[1])) == 0;
    for (size_t i = 0; i < (len + 7) / 8; i++)
        if (atomic_load_explicit(&sl->key[i], memory_order_relaxed) != kw[i]) return 0;
    return 1;
}

static int is_live(slot *sl) {
    return (atomic_load_explicit(CTRL(sl), memory_order_acquire) & LIVE) != 0;
}

/* The slots of bh whose tag is tag, as a bit mask (bit i: slot i). The
 * tags 8 at a time: a byte of a word is the tag when the word ^ tag
 * repeated has a zero byte there; the bytes' top bits are then gathered
 * by one multiply (each lands on its own bit of the top byte). */
static uint64_t tag_matches(const shm_store *m, bucket_header *bh, uint8_t tag) {
#if defined(__SSE2__)
    if (m->spb == 16) { /* the usual bucket: one vector compare */
        __m128i t = _mm_set_epi64x((long long)atomic_load_explicit(&bh->tags[1], memory_order_relaxed),
                                   (long long)atomic_load_explicit(&bh->tags[0], memory_order_relaxed));
        return (uint32_t)_mm_movemask_epi8(_mm_cmpeq_epi8(t, _mm_set1_epi8((char)tag)));
    }
#endif
    const uint64_t ones = UINT64_C(0x0101010101010101), low7 = UINT64_C(0x7f7f7f7f7f7f7f7f);
    uint64_t mask = 0;
    for (uint32_t w = 0; w * 8 < m->spb; w++) { /* spb <= 64 */
        uint64_t x = atomic_load_explicit(&bh->tags[w], memory_order_relaxed) ^ (ones * tag);
        uint64_t zero = ~(((x & low7) + low7) | x | low7); /* 0x80 where a byte of x is 0 */
        mask |= ((zero >> 7) * UINT64_C(0x0102040810204080) >> 56) << (8 * w);
    }
    return m->spb < 64 ? mask & ((UINT64_C(1) << m->spb) - 1) : mask;
}

/* The key's slot among bh's slots in mask, or NULL. *seen: the slot's
 * control word, read before its key: while it stays the same, so does the
 * key (every change of a slot's key moves its version on). */
static slot *find_among(const shm_store *m, bucket_header *bh, uint64_t mask, uint64_t fp,
                        const uint64_t *kw, size_t len, uint64_t *seen) {
    for (; mask; mask &= mask - 1) {
        slot *sl = slot_at(m, bh, (uint32_t)__builtin_ctzll(mask));
        uint64_t c = atomic_load_explicit(CTRL(sl), memory_order_acquire);
        if ((c & LIVE) && holds(sl, fp, kw, len)) {
            *seen = c;
            return sl;
        }
    }
    return NULL;
}

/* The key's slot in its n buckets bt (1 or 2), or NULL; *home: its
 * bucket. Without a lock. The second bucket's tags are fetched before the
 * first bucket's slots are read, so at 1M keys their cache misses overlap. */
static slot *find_key(const shm_store *m, bucket_header *const bt[2], int n, uint8_t tag, uint64_t fp,
                      const uint64_t *kw, size_t len, uint64_t *seen, bucket_header **home) {
    __builtin_prefetch(bt[1]->tags);
    slot *sl = find_among(m, bt[0], tag_matches(m, bt[0], tag), fp, kw, len, seen);
    *home = bt[0];
    if (!sl && n == 2) {
        sl = find_among(m, bt[1], tag_matches(m, bt[1], tag), fp, kw, len, seen);
        *home = bt[1];
    }
    return sl;
}

/* A free slot of bh (NULL when full), with its index in *at. */
static slot *free_in(const shm_store *m, bucket_header *bh, uint32_t *at) {
    for (uint32_t i = 0; i < m->spb; i++) {
        if (!is_live(slot_at(m, bh, i))) {
            *at = i;
            return slot_at(m, bh, i);
        }
    }
    return NULL;
}

/* Bucket time, kept as ms - SLUICE_TIME_MIN_MS (0, a new file's: none). */
static void bucket_time_raise(bucket_header *bh, int64_t now_ms) {
    int64_t want = now_ms - SLUICE_TIME_MIN_MS, t = atomic_load_explicit(&bh->now_ms, memory_order_relaxed);
    while (t < want && !atomic_compare_exchange_weak_explicit(&bh->now_ms, &t, want, memory_order_release,
                                                              memory_order_relaxed)) {
    }
}

/* The time a new key of buckets bt[0..1] is added and first decided at:
 * the reading, raised to the store's time and to the times its buckets
 * forgot keys at (so a key forgotten and added again is never decided
 * earlier than it was forgotten). */
static int64_t decision_time(const shm_store *m, bucket_header *const bt[2], int64_t reading_ms) {
    int64_t now = sluice__store_time(&m->hdr->now_ms, reading_ms);
    for (int i = 0; i < 2; i++) {
        int64_t b = atomic_load_explicit(&bt[i]->now_ms, memory_order_acquire);
        if (b != 0 && b + SLUICE_TIME_MIN_MS > now) now = b + SLUICE_TIME_MIN_MS;
    }
    return now;
}

#define AGAIN 3   /* internal: the key changed form (FAST no more): look again */
#define CONVERT 4 /* internal: the key's state outgrew its word: convert, locked */

/* Notes a key's use (for the least recently used): a write only when the
 * time moved, so deciding leaves the line clean when it need not write. */
static void touch(slot *sl, int64_t now_ms) {
    if (atomic_load_explicit(&sl->last_use_ms, memory_order_relaxed) != now_ms)
        atomic_store_explicit(&sl->last_use_ms, now_ms, memory_order_relaxed);
}

/* A FAST window key's word (see the top) <-> its state; k0: the index of
 * the window the key was added in (its word is relative to it). */
static void window_unpack(int sliding, uint64_t w, int64_t k0, sluice__state *st) {
    if (sliding) {
        st->sw.index = k0 + (int64_t)(w >> 32);
        st->sw.prev = (int64_t)(w >> 16 & 0xffff);
        st->sw.cur = (int64_t)(w & 0xffff);
    } else {
        st->fw.index = k0 + (int64_t)(w >> FW_COUNT_BITS);
        st->fw.cur = (int64_t)(w & ((UINT64_C(1) << FW_COUNT_BITS) - 1));
    }
}
/* 0 when the state lies too far past k0 for the word. Its counts always
 * fit: a fixed window's are at most its limit (see FW_COUNT_BITS), a
 * sliding window's too, and FAST only below 2^16 (spolicy_init). */
static int window_pack(int sliding, const sluice__state *st, int64_t k0, uint64_t *w) {
    int64_t delta = (sliding ? st->sw.index : st->fw.index) - k0; /* >= 0: never before the key was added */
    if (delta < 0 || delta >= (sliding ? INT64_C(1) << 32 : FW_INDEX_SPAN)) return 0;
    *w = sliding ? (uint64_t)delta << 32 | (uint64_t)st->sw.prev << 16 | (uint64_t)st->sw.cur
                 : (uint64_t)delta << FW_COUNT_BITS | (uint64_t)st->fw.cur;
    return 1;
}

/* Decides on a FAST window key's word w with its algorithm itself
 * (src/algo/fixed_window.c, sliding_window.c), filling *d: 1 admitted
 * (*nw: the new word), 0 denied, or CONVERT when the new state does not
 * fit the word. */
static int window_step(const spolicy *sp, uint64_t w, int64_t born_ms, int64_t now_ms, int64_t cost,
                       sluice_decision *d, uint64_t *nw) {
    const sluice__params *pp = &sp->policy.params[0];
    int sliding = sp->policy.parts[0].algorithm == SLUICE_SLIDING_WINDOW;
    int64_t k0 = sluice__floor_div(born_ms, pp->window_ms);
    sluice__state st;
    window_unpack(sliding, w, k0, &st);
    sp->policy.algo[0]->decide(pp, &st, now_ms, cost, d, 1);
    if (!d->allowed) return 0;
    return window_pack(sliding, &st, k0, nw) ? 1 : CONVERT;
}

/* A FAST window key's state from its word w, its born_ms and its slot's
 * unit (< 0), for those who know no policy (making room, converting): its
 * window in *W; 1 for a sliding window, 0 for a fixed one. */
static int window_of_slot(uint64_t w, int64_t born_ms, int64_t unit, sluice__state *st, int64_t *W) {
    int sliding = (int)(-unit % 2);
    *W = -unit / 2;
    window_unpack(sliding, w, sluice__floor_div(born_ms, *W), st);
    return sliding;
}

/* Whether a FAST key's word w is fresh at now_ms (unit: its slot's). */
static int fast_fresh(uint64_t w, int64_t born_ms, int64_t unit, int64_t now_ms) {
    if (unit > 0) /* a bucket: full once its TAT is past */
        return (sluice__i128)(int64_t)w <= (sluice__i128)(now_ms - born_ms) * unit;
    sluice__state st;
    sluice__params pp = {0}; /* a window's is_fresh reads its window only */
    int sliding = window_of_slot(w, born_ms, unit, &st, &pp.window_ms);
    return (sliding ? &sluice__sliding_window : &sluice__fixed_window)->is_fresh(&pp, &st, now_ms);
}

/* Decides on a FAST key: its word (a bucket's TAT, relative to born_ms in
 * the bucket's units, r per ms; or a window's index and counts) and
 * its control word change together in one 16-byte compare-and-swap. A
 * bucket is decided with the token bucket's arithmetic
 * (src/algo/token_bucket.c) on the same backlog, a window by its
 * algorithm: the same decisions. */
static int decide_fast(shm_store *m, const spolicy *sp, slot *sl, bucket_header *home, const uint64_t *kw,
                       size_t len, int64_t cost, int64_t reading_ms, sluice_decision *d, uint64_t seen) {
    const sluice__params *pp = &sp->policy.params[0];
    int shaper = sp->policy.parts[0].algorithm == SLUICE_LEAKY_BUCKET;
    int window = sp->fast_unit < 0;
    for (;; seen = 0) {
        uint64_t w = atomic_load_explicit(&sl->head.lo, memory_order_acquire);
        uint64_t c = atomic_load_explicit(&sl->head.hi, memory_order_acquire);
        if (c != seen) { /* else w was read between two equal readings of c: of version c */
            pair_read(&sl->head, &w, &c);
            if (!(c & LIVE) || !holds(sl, sp->fp, kw, len)) return NOT_HELD;
        }
        if (!(c & FAST)) return AGAIN;
        /* store time, and never before the key was added (see decision_time) */
        int64_t born_ms = atomic_load_explicit(&sl->born_ms, memory_order_relaxed);
        int64_t now = sluice__store_time(&m->hdr->now_ms, reading_ms), nb = 0;
        if (now < born_ms) now = born_ms;
        int64_t bb = 0;
        uint64_t nw = 0;
        int admit;
        if (window) {
            if ((admit = window_step(sp, w, born_ms, now, cost, d, &nw)) == CONVERT) return CONVERT;
        } else {
            /* w is the TAT. In 64 bits: ts = (now - born) * r; past 2^63
             * the bucket is full (backlog 0) and any admission's TAT
             * outgrows the word */
            int64_t ts, b, nt;
            if (__builtin_mul_overflow(now - born_ms, pp->r, &ts)) return CONVERT;
            bb = __builtin_sub_overflow((int64_t)w, ts, &b) || b < 0 ? 0 : b; /* ts >= 0 */
            if ((admit = sluice__gcra_room(pp, bb, cost))) {
                nb = bb + cost * pp->p;
                if (__builtin_add_overflow(ts, nb, &nt)) return CONVERT;
                nw = (uint64_t)nt;
            }
        }
        touch(sl, now);
        if (admit) {
            if (!cas16(&sl->head, w, c, nw, c + CTRL_WORD(1, 0))) continue;
            /* a bucket's divisions after the CAS, which would wait for them */
            if (!window) sluice__gcra_allowed(pp, bb, nb, shaper, d);
            sluice__store_time_raise(&m->hdr->now_ms, now);
        } else {
            /* no CAS vouches for a denial: the key, born_ms and word it was
             * worked out from are this key's only if the control word is
             * still c after them (else the slot changed hands meanwhile) */
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&sl->head.hi, memory_order_relaxed) != c) continue;
            if (!window) sluice__gcra_denied(pp, bb, cost, d);
            atomic_fetch_add_explicit(&home->denied, 1, memory_order_relaxed);
        }
        sluice__decision_lag(d, now - reading_ms);
        return 0;
    }
}

/* Moves a FAST key whose state outgrew its word to the general form, the
 * same state as copy words, with the buckets' locks held. Killed midway,
 * the key is still FAST and whole: the last compare-and-swap switches. */
static void convert(const shm_store *m, slot *sl) {
    for (;;) {
        uint64_t w, c;
        pair_read(&sl->head, &w, &c);
        if ((c & (LIVE | FAST)) != (LIVE | FAST)) return;
        uint64_t v = VERSION(c) + 1, words[3];
        size_t n = 2;
        int64_t unit = atomic_load_explicit(&tail_of(m, sl)->unit, memory_order_relaxed);
        int64_t born_ms = atomic_load_explicit(&sl->born_ms, memory_order_relaxed), fresh_at;
        if (unit > 0) {
            sluice__i128 abs = (sluice__i128)(int64_t)w + (sluice__i128)born_ms * unit;
            memcpy(words, &abs, sizeof abs); /* a bucket's state: its TAT, i128 */
            sluice__i128 f = abs / unit + (abs % unit > 0); /* fresh at: ceil(TAT / r) ms */
            fresh_at = f > INT64_MAX ? INT64_MAX : f < INT64_MIN ? INT64_MIN : (int64_t)f;
        } else {
            sluice__state st; /* a window's state, as load_states reads it */
            int64_t W;
            if (window_of_slot(w, born_ms, unit, &st, &W)) {
                memcpy(words, &st.sw, sizeof st.sw), n = 3;
                fresh_at = st.sw.cur > 0 ? (st.sw.index + 2) * W : st.sw.prev > 0 ? (st.sw.index + 1) * W : INT64_MIN;
            } else {
                memcpy(words, &st.fw, sizeof st.fw);
                fresh_at = st.fw.cur > 0 ? (st.fw.index + 1) * W : INT64_MIN; /* its window's end */
            }
        }
        copy_write(m, sl, v, words, n);
        STEP(5);
        pair_set(&tail_of(m, sl)->change, (uint64_t)fresh_at, CHANGE(v, KIND_SETTLED, 0));
        uint64_t born = atomic_load_explicit(&tail_of(m, sl)->born, memory_order_relaxed);
        atomic_store_explicit(&tail_of(m, sl)->born, born + 1, memory_order_relaxed); /* this version is no admission */
        if (cas16(&sl->head, w, c, 0, CTRL_WORD(v, LIVE))) return;
        atomic_store_explicit(&tail_of(m, sl)->born, born, memory_order_relaxed);
    }
}

/* Drops the FAST key {w, c} (as drop() does the others'). */
static int drop_fast(const shm_store *m, bucket_header *bh, slot *sl, uint64_t w, uint64_t c) {
    if (!cas16(&sl->head, w, c, w, CTRL_WORD(VERSION(c) + 1, 0))) return 0;
    count_dropped(m, bh, sl, c);
    return 1;
}

/* Drops the key read at control word c and {lo, hi} (a FAST key's head,
 * else its change), in either form: 1, or 0 when it changed meanwhile. */
static int drop_key(const shm_store *m, bucket_header *bh, slot *sl, uint64_t c, uint64_t lo, uint64_t hi) {
    return c & FAST ? drop_fast(m, bh, sl, lo, c) : drop(m, bh, sl, c, lo, hi);
}

/* Decides on the key in sl, lock-free (see the top of the file): 0 with *d
 * filled, an error, NOT_HELD, or CONVERT. home is sl's bucket, for its
 * counts. */
static int decide_held(shm_store *m, const spolicy *sp, slot *sl, bucket_header *home, const uint64_t *kw,
                       size_t len, int64_t cost, int64_t reading_ms, sluice_decision *d, uint64_t *buf,
                       uint64_t seen) {
    for (;; seen = 0) {
        /* the control word the key was found at, or a new reading */
        uint64_t c = seen ? seen : atomic_load_explicit(CTRL(sl), memory_order_acquire), lo, hi;
        if (!(c & LIVE) || (c != seen && !holds(sl, sp->fp, kw, len))) return NOT_HELD;
        if (c & FAST) {
            int rc = decide_fast(m, sp, sl, home, kw, len, cost, reading_ms, d, c);
            if (rc == AGAIN) continue;
            return rc;
        }
        uint64_t v = VERSION(c);
        pair_read(&tail_of(m, sl)->change, &lo, &hi);
        if (CHANGE_VERSION(hi) == (uint32_t)(v + 1)) { /* another's change: finish it first */
            finish(m, sp, sl, c, lo, hi, buf);
            continue;
        }
        if (!copy_read(m, sl, v, buf, sp->words) || atomic_load_explicit(CTRL(sl), memory_order_acquire) != c)
            continue;
        /* store time, and never before the key was added (see decision_time) */
        int64_t now = sluice__store_time(&m->hdr->now_ms, reading_ms);
        int64_t born_ms = atomic_load_explicit(&sl->born_ms, memory_order_relaxed);
        if (now < born_ms) now = born_ms;
        int64_t fresh_at = INT64_MIN;
        int rc = decide_words(sp, buf, now, cost, d, &fresh_at);
        if (rc == SLUICE_ESTORE)
            sluice__store_errf(&m->head, "internal error: policy %s's state outgrew its slot", sp->policy.name);
        if (rc) return rc;
        touch(sl, now);
        if (d->allowed) {
            uint64_t at = (uint64_t)(now - SLUICE_TIME_MIN_MS), mine = CHANGE(v + 1, KIND_ADMIT, cost);
            if (!cas16(&tail_of(m, sl)->change, lo, hi, at, mine)) continue; /* another change came first */
            /* the admission is decided: write it, say so, publish (a drop
             * that replaced it meanwhile counts as coming after it) */
            STEP(1);
            copy_write(m, sl, v + 1, buf, sp->words);
            STEP(2);
            uint64_t settled = CHANGE(v + 1, KIND_SETTLED, 0);
            if (cas16(&tail_of(m, sl)->change, at, mine, (uint64_t)fresh_at, settled)) hi = settled;
            else pair_read(&tail_of(m, sl)->change, &lo, &hi);
            STEP(3);
            publish(sl, c, hi);
            sluice__store_time_raise(&m->hdr->now_ms, now);
        }
        else /* admissions: counted by the key's version */
            atomic_fetch_add_explicit(&home->denied, 1, memory_order_relaxed);
        sluice__decision_lag(d, now - reading_ms);
        return 0;
    }
}

/* A slot for a new key when its n (1 or 2) buckets are full, or NULL
 * (refused): a fresh key's place first, else on_full. *home and *at say
 * where the slot is. With the buckets' locks held. */
static slot *make_room(shm_store *m, bucket_header **bhs, int n, int64_t now_ms, bucket_header **home,
                       uint32_t *at) {
again:;
    slot *lru = NULL;
    uint64_t lru_c = 0, lru_lo = 0, lru_hi = 0;
    int64_t lru_use = 0;
    for (int b = 0; b < n; b++) {
        for (uint32_t i = 0; i < m->spb; i++) {
            slot *sl = slot_at(m, bhs[b], i);
            uint64_t c = atomic_load_explicit(CTRL(sl), memory_order_acquire), lo, hi;
            if (!(c & LIVE)) { /* freed meanwhile (a drop left unpublished by a crash) */
                *home = bhs[b], *at = i;
                return sl;
            }
            int fresh;
            if (c & FAST) {
                pair_read(&sl->head, &lo, &c);
                if ((c & (LIVE | FAST)) != (LIVE | FAST)) goto again;
                hi = 0;
                fresh = fast_fresh(lo, atomic_load_explicit(&sl->born_ms, memory_order_relaxed),
                                   atomic_load_explicit(&tail_of(m, sl)->unit, memory_order_relaxed), now_ms);
            } else {
                pair_read(&tail_of(m, sl)->change, &lo, &hi);
                int pending = CHANGE_VERSION(hi) == (uint32_t)(VERSION(c) + 1);
                if (pending && CHANGE_KIND(hi) != KIND_ADMIT) {
                    publish(sl, c, hi);
                    goto again;
                }
                if (!pending && (CHANGE_VERSION(hi) != (uint32_t)VERSION(c) || CHANGE_KIND(hi) != KIND_SETTLED))
                    goto again;
                /* settled: lo is when it is fresh; an admission pending is
                 * not fresh (it may be evicted) */
                fresh = !pending && (int64_t)lo <= now_ms;
            }
            if (fresh) {
                bucket_time_raise(bhs[b], now_ms); /* its key's decisions: never earlier */
                if (!drop_key(m, bhs[b], sl, c, lo, hi)) goto again;
                bump(&bhs[b]->forgotten);
                *home = bhs[b], *at = i;
                return sl;
            }
            int64_t use = atomic_load_explicit(&sl->last_use_ms, memory_order_relaxed);
            if (!lru || use < lru_use) {
                lru = sl, lru_c = c, lru_lo = lo, lru_hi = hi, lru_use = use;
                *home = bhs[b], *at = i;
            }
        }
    }
    if (m->on_full == SLUICE_ON_FULL_REFUSE) {
        bump(&bhs[0]->refused);
        return NULL;
    }
    bucket_time_raise(*home, now_ms);
    if (!drop_key(m, *home, lru, lru_c, lru_lo, lru_hi)) goto again;
    bump(&(*home)->evicted);
    return lru;
}

/* Adds the key to a free slot (making room when needed) with a fresh
 * state: its slot, or NULL (refused). With the buckets' locks held. */
static slot *add_key(shm_store *m, const spolicy *sp, bucket_header *const bt[2], int n, uint8_t tag,
                     const uint64_t *kw, size_t len, int64_t now_ms, bucket_header **home, uint64_t *buf) {
    uint32_t i = 0;
    slot *sl = free_in(m, *home = bt[0], &i); /* the first bucket while it has room */
    if (!sl && n == 2) sl = free_in(m, *home = bt[1], &i);
    if (!sl) {
        bucket_header *order[2] = {bt[0], bt[1]};
        if (!(sl = make_room(m, order, n, now_ms, home, &i))) return NULL;
    }
    /* whole before live; its control word is dead, so nobody else writes
     * it. The key gets a version of its own, above any that an earlier
     * add_key killed midway may have written (whose words would otherwise
     * pass for this key's state): it is taken first. */
    uint64_t v = VERSION(atomic_load_explicit(CTRL(sl), memory_order_acquire)) + 1;
    atomic_store_explicit(CTRL(sl), CTRL_WORD(v, 0), memory_order_release);
    atomic_store_explicit(&sl->fp, sp->fp, memory_order_relaxed);
    atomic_store_explicit(&sl->key_len, (uint32_t)len, memory_order_relaxed);
    atomic_store_explicit(&tail_of(m, sl)->born, v, memory_order_relaxed);
    atomic_store_explicit(&sl->born_ms, now_ms, memory_order_relaxed);
    for (size_t k = 0; k < (len + 7) / 8; k++) atomic_store_explicit(&sl->key[k], kw[k], memory_order_relaxed);
    atomic_store_explicit(&sl->last_use_ms, now_ms, memory_order_relaxed);
    _Atomic uint64_t *tw = &(*home)->tags[i / 8]; /* written under the lock: no other writer */
    uint64_t t = atomic_load_explicit(tw, memory_order_relaxed) & ~(UINT64_C(0xff) << (i % 8 * 8));
    atomic_store_explicit(tw, t | (uint64_t)tag << (i % 8 * 8), memory_order_relaxed);
    if (sp->fast) { /* one word, fresh at any reading */
        atomic_store_explicit(&tail_of(m, sl)->unit, sp->fast_unit, memory_order_relaxed);
        STEP(4);
        pair_set(&sl->head, sp->fast_fresh, CTRL_WORD(v, FAST | LIVE));
        return sl;
    }
    fresh_states(sp, (uint8_t *)buf);
    copy_write(m, sl, v, buf, sp->words);
    STEP(4);
    pair_set(&tail_of(m, sl)->change, (uint64_t)INT64_MIN, CHANGE(v, KIND_SETTLED, 0)); /* settled at v, fresh */
    atomic_store_explicit(CTRL(sl), CTRL_WORD(v, LIVE), memory_order_release);
    return sl;
}

/* A request's key located: its policy, hash tag and two buckets. */
typedef struct {
    const spolicy *sp;
    bucket_header *bt[2]; /* the first choice, the second */
    int n; /* buckets: 1 when both choices are one */
    uint8_t tag;
} located;

/* Locates the key (kw: room for its words, zero-padded, filled here). */
static inline __attribute__((always_inline)) int locate(shm_store *m, const sluice_policy *p,
                                                        const void *key, size_t len, uint64_t *kw,
                                                        located *q) {
    if (len > m->key_bytes) { /* before the policy is registered: an error changes nothing */
        sluice__store_errf(&m->head, "key of %zu bytes: this shm file holds keys of up to %u bytes "
                                     "(create it with ?key_bytes=N)", len, m->key_bytes);
        return SLUICE_EINVAL;
    }
    unsigned id;
    uint32_t tweak; /* the policy's, cached beside its id: the hash need not wait for sp */
    int rc = sluice__policy_set_id(&m->policies, &m->head, p, &id, &tweak);
    if (rc) return rc;
    q->sp = sluice__policy_item(&m->policies, id);
    uint64_t h;
    if (len <= 16) {
        sluice__key_words(key, len, kw);
    } else {
        kw[(len - 1) / 8] = 0;
        memcpy(kw, key, len);
    }
    if (len <= 16 && m->aes) {
        h = sluice__aeshash16_words(m->hdr->aes_key, tweak, kw[0], kw[1], len);
    } else {
        uint64_t k[2] = {m->hdr->seed[0] ^ tweak, m->hdr->seed[1]};
        h = sluice__siphash13(k, key, len);
    }
    if (m->collide) h = 0;
    q->tag = (uint8_t)(h >> 32) | 1; /* never 0 */
    /* two buckets may hold the key: the first choice, where keys go while
     * it has room, and the second */
    q->bt[0] = bucket_at(m, (uint64_t)(((unsigned __int128)h * m->buckets) >> 64));
    q->bt[1] = bucket_at(m, (uint64_t)(((unsigned __int128)((h << 32) | (h >> 32)) * m->buckets) >> 64));
    q->n = q->bt[1] != q->bt[0] ? 2 : 1;
    return 0;
}

/* The usual case, straight: a FAST key in its first bucket. NOT_HELD:
 * anything else, for the general way. */
static inline __attribute__((always_inline)) int acquire_fast(shm_store *m, const located *q,
                                                              const uint64_t *kw, size_t len,
                                                              int64_t cost, int64_t now_ms,
                                                              sluice_decision *d) {
    uint64_t c = 0;
    slot *sl = find_among(m, q->bt[0], tag_matches(m, q->bt[0], q->tag), q->sp->fp, kw, len, &c);
    if (!sl || !(c & FAST)) return NOT_HELD;
    int rc = decide_fast(m, q->sp, sl, q->bt[0], kw, len, cost, now_ms, d, c);
    return rc == AGAIN || rc == CONVERT ? NOT_HELD : rc;
}

/* Decides on the located key. */
static inline __attribute__((always_inline)) int acquire_located(shm_store *m, const located *q,
                                                                 const uint64_t *kw, size_t len,
                                                                 int64_t cost, int64_t now_ms,
                                                                 sluice_decision *d) {
    const spolicy *sp = q->sp;
    bucket_header *const *bt = q->bt;
    int n = q->n, rc;
    uint8_t tag = q->tag;
    if (sp->fast && (rc = acquire_fast(m, q, kw, len, cost, now_ms, d)) != NOT_HELD) return rc;
    uint64_t stack_buf[160], *buf = stack_buf;
    if (sp->words > sizeof stack_buf / sizeof stack_buf[0] && !(buf = malloc(sp->words * sizeof *buf))) {
        sluice__store_errf(&m->head, "out of memory");
        return SLUICE_ENOMEM;
    }
    for (rc = NOT_HELD; rc == NOT_HELD || rc == CONVERT;) {
        bucket_header *home;
        uint64_t seen = 0;
        slot *sl = find_key(m, bt, n, tag, sp->fp, kw, len, &seen, &home);
        if (sl && rc != CONVERT) { /* held: no lock */
            rc = decide_held(m, sp, sl, home, kw, len, cost, now_ms, d, buf, seen);
            continue;
        }
        /* new (or to convert): under both buckets' locks (in order), after
         * a look there (another process may just have added it) */
        int lower = bt[0] < bt[1] ? 0 : 1; /* buckets lie in index order */
        bucket_header *locked[2] = {bt[lower], bt[1 - lower]};
        for (int i = 0; i < n; i++) bucket_lock(locked[i]);
        seen = 0;
        sl = find_key(m, bt, n, tag, sp->fp, kw, len, &seen, &home);
        if (!sl) sl = add_key(m, sp, bt, n, tag, kw, len, decision_time(m, bt, now_ms), &home, buf);
        if (sl)
            while ((rc = decide_held(m, sp, sl, home, kw, len, cost, now_ms, d, buf, seen)) == CONVERT) {
                convert(m, sl);
                seen = 0;
            }
        unlock_all(locked, n);
        if (!sl) {
            sluice__store_errf(&m->head, "shm store is full of keys that are not fresh (buckets of %u)",
                               m->spb);
            rc = SLUICE_EFULL;
        }
    }
    if (buf != stack_buf) free(buf);
    return rc;
}

static int shm_acquire_at(sluice_store *s, const sluice_policy *p, const void *key, size_t len,
                          int64_t cost, int64_t now_ms, sluice_decision *d) {
    shm_store *m = (shm_store *)s;
    uint64_t kw[(SLUICE_KEY_MAX + 7) / 8]; /* the key in words, zero-padded */
    located q;
    int rc = locate(m, p, key, len, kw, &q);
    return rc ? rc : acquire_located(m, &q, kw, len, cost, now_ms, d);
}

/* A batch, decided in order as one acquire_at each, BATCH requests at a
 * time, as the memory store does (memory.c): their keys located first and
 * their buckets' tags, then the slots the tags point to, fetched into the
 * cache ahead. Keys longer than 16 bytes are decided one at a time. */
#define BATCH 16
static void shm_acquire_many(sluice_store *s, const sluice_request *reqs, size_t n, int64_t now_ms,
                             sluice_decision *out, int *results) {
    shm_store *m = (shm_store *)s;
    located q[BATCH];
    uint64_t kw[BATCH][2];
    for (size_t base = 0; base < n; base += BATCH) {
        size_t g = n - base < BATCH ? n - base : BATCH;
        const sluice_request *rq = reqs + base;
        int *res = results + base;
        for (size_t i = 0; i < g; i++) __builtin_prefetch(rq[i].key);
        for (size_t i = 0; i < g; i++) {
            if (res[i] || rq[i].key_len > 16) continue;
            res[i] = locate(m, rq[i].policy, rq[i].key, rq[i].key_len, kw[i], &q[i]);
            if (res[i]) continue;
            __builtin_prefetch(q[i].bt[0]->tags);
            __builtin_prefetch(q[i].bt[1]->tags);
        }
        for (size_t i = 0; i < g; i++) {
            if (res[i] || rq[i].key_len > 16) continue;
            uint64_t mask = tag_matches(m, q[i].bt[0], q[i].tag);
            if (mask) __builtin_prefetch(slot_at(m, q[i].bt[0], (uint32_t)__builtin_ctzll(mask)), 1);
        }
        for (size_t i = 0; i < g; i++) {
            if (res[i]) continue;
            res[i] = rq[i].key_len > 16
                         ? shm_acquire_at(s, rq[i].policy, rq[i].key, rq[i].key_len, rq[i].cost, now_ms,
                                          &out[base + i])
                         : acquire_located(m, &q[i], kw[i], rq[i].key_len, rq[i].cost, now_ms, &out[base + i]);
        }
    }
}

/* ---- the store ---- */

static void shm_stats(sluice_store *s, sluice_stats *out) {
    shm_store *m = (shm_store *)s;
    out->capacity = (int64_t)(m->buckets * m->spb);
    for (uint64_t b = 0; b < m->buckets; b++) {
        bucket_header *bh = bucket_at(m, b);
        for (uint32_t i = 0; i < m->spb; i++) {
            slot *sl = slot_at(m, bh, i);
            uint64_t c = atomic_load_explicit(CTRL(sl), memory_order_acquire);
            if (!(c & LIVE)) continue;
            out->keys++;
            out->allowed += (int64_t)admissions(m, sl, c);
        }
        out->allowed += (int64_t)atomic_load_explicit(&bh->allowed, memory_order_relaxed);
        out->denied += (int64_t)atomic_load_explicit(&bh->denied, memory_order_relaxed);
        out->forgotten += (int64_t)atomic_load_explicit(&bh->forgotten, memory_order_relaxed);
        out->evicted += (int64_t)atomic_load_explicit(&bh->evicted, memory_order_relaxed);
        out->refused += (int64_t)atomic_load_explicit(&bh->refused, memory_order_relaxed);
    }
}

static void shm_close(sluice_store *s) {
    shm_store *m = (shm_store *)s;
    if (m->map) munmap(m->map, m->map_bytes);
    sluice__policy_set_free(&m->policies);
    free(m);
}

/* The host's boot id: 0, or -1 with errno (then the file's state cannot be
 * told from a reboot's, and nothing may be reset on that account). */
static int read_boot_id(char out[40]) {
    memset(out, 0, 40);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f) return -1;
    int ok = fgets(out, 40, f) != NULL;
    fclose(f);
    out[strcspn(out, "\n")] = 0;
    if (!ok || !out[0]) {
        errno = EIO;
        return -1;
    }
    return 0;
}

/* Geometry from (max_keys, key_bytes, state_bytes). */
static void geometry(shm_store *m, uint64_t max_keys) {
    m->spb = max_keys <= 64 ? (uint32_t)max_keys : BUCKET_SLOTS;
    m->buckets = (max_keys + m->spb - 1) / m->spb;
    m->slot_bytes = align_up(align_up(48 + align_up(m->key_bytes, 8), 16) + 32 + 4 * m->state_bytes, 64);
    m->bucket_header_bytes = align_up(128 + align_up(m->spb, 8), 64);
    m->bucket_bytes = m->bucket_header_bytes + m->spb * m->slot_bytes;
    m->map_bytes = HEADER_BYTES + (size_t)m->buckets * m->bucket_bytes;
}

static int shm_open_file(const sluice__url *url, const sluice__store_config *cfg, sluice_store **out,
                         char *err, size_t errlen) {
    char path[4096];
    int64_t key_bytes = KEY_BYTES_DEFAULT, state_bytes = STATE_BYTES_DEFAULT;
    int64_t max_keys = cfg->max_keys_given ? cfg->max_keys : MAX_KEYS_DEFAULT;
    int explicit_geometry = cfg->max_keys_given, key_bytes_given = 0, state_bytes_given = 0;
    if (url->path_len == 0 || url->path_len >= sizeof path) {
        sluice__errf(err, errlen, "store URL shm:PATH needs a file path");
        return SLUICE_EINVAL;
    }
    memcpy(path, url->path, url->path_len);
    path[url->path_len] = 0;
    for (size_t i = 0; i < url->n_params; i++) {
        int rc = 0;
        if (url->params[i].key_len == 0) continue; /* handled by store.c */
        if (sluice__url_is(url, i, "key_bytes"))
            rc = sluice__url_int(url, i, 1, SLUICE_KEY_MAX, &key_bytes, err, errlen), explicit_geometry = key_bytes_given = 1;
        else if (sluice__url_is(url, i, "state_bytes"))
            rc = sluice__url_int(url, i, 16, 1 << 20, &state_bytes, err, errlen), explicit_geometry = state_bytes_given = 1;
        else {
            sluice__errf(err, errlen, "store URL parameter \"%.*s\" is unknown (shm: takes max_keys, "
                         "on_full, key_bytes, state_bytes)", (int)url->params[i].key_len, url->params[i].key);
            rc = SLUICE_EINVAL;
        }
        if (rc) return rc;
    }
    if (!cas16_lock_free()) {
        sluice__errf(err, errlen, "shm:%s: this CPU has no 16-byte compare-and-swap instruction, which "
                     "the shm store's lock-free updates need", path);
        return SLUICE_EINVAL;
    }
    shm_store *m = calloc(1, sizeof *m);
    if (!m) {
        sluice__errf(err, errlen, "shm:%s: out of memory", path);
        return SLUICE_ENOMEM;
    }
    pthread_once(&self_id_once, self_id_init);
    m->policies.item_size = sizeof(spolicy);
    m->policies.init = spolicy_init;
    m->policies.word_offset = offsetof(spolicy, tweak);
    m->policies.ctx = m;
    int rc = SLUICE_EINVAL;
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        sluice__errf(err, errlen, "shm:%s: %s", path, strerror(errno));
        free(m);
        return SLUICE_EINVAL;
    }
    flock(fd, LOCK_EX); /* one opener at a time sets the file up */
    struct stat st;
    char boot[40];
    if (read_boot_id(boot) != 0) { /* never taken for a reboot: that would reset a live table */
        sluice__errf(err, errlen, "shm:%s: cannot read the host's boot id "
                                  "(/proc/sys/kernel/random/boot_id): %s", path, strerror(errno));
        goto out;
    }
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
        sluice__errf(err, errlen, "shm:%s is not a regular file", path);
        goto out;
    }
    if (st.st_uid != geteuid()) {
        sluice__errf(err, errlen, "shm:%s belongs to uid %u, not to you (uid %u): refusing it", path,
                     (unsigned)st.st_uid, (unsigned)geteuid());
        goto out;
    }
    if (st.st_mode & 077) {
        sluice__errf(err, errlen, "shm:%s is open to others (mode %04o): it must be 0600", path,
                     (unsigned)(st.st_mode & 07777));
        goto out;
    }
    file_header h;
    memset(&h, 0, sizeof h);
    int fresh = st.st_size == 0;
    if (!fresh) {
        if (st.st_size < (off_t)sizeof h || pread(fd, &h, sizeof h, 0) != (ssize_t)sizeof h) {
            sluice__errf(err, errlen, "shm:%s is truncated (%lld bytes)", path, (long long)st.st_size);
            goto out;
        }
        static const char zero[8];
        static const uint8_t blank[sizeof h];
        /* a set-up of ours that never finished (blank, or our fields but
         * not yet the magic, written last); anything else is not ours */
        if (memcmp(h.magic, zero, 8) == 0 &&
            (memcmp(&h, blank, sizeof h) == 0 || (h.version == LAYOUT_VERSION && h.header_bytes == HEADER_BYTES))) {
            fresh = 1; /* a set-up that never finished: start over */
        } else if (memcmp(h.magic, MAGIC, 8) != 0) {
            sluice__errf(err, errlen, "shm:%s is not a sluice shm file", path);
            goto out;
        } else if (h.version != LAYOUT_VERSION || h.header_bytes != HEADER_BYTES) {
            sluice__errf(err, errlen, "shm:%s has layout version %u; this sluice reads version %d",
                         path, h.version, LAYOUT_VERSION);
            goto out;
        }
    }
    if (fresh) {
        m->key_bytes = (uint32_t)key_bytes;
        m->state_bytes = align_up((uint32_t)state_bytes, 16);
        geometry(m, (uint64_t)max_keys);
        if (ftruncate(fd, 0) != 0 || ftruncate(fd, (off_t)m->map_bytes) != 0) {
            sluice__errf(err, errlen, "shm:%s: cannot size it to %zu bytes: %s", path, m->map_bytes, strerror(errno));
            goto out;
        }
    } else {
        if (h.slots_per_bucket < 1 || h.slots_per_bucket > 64 || h.buckets < 1 ||
            h.buckets > SLUICE_MAX_KEYS_MAX || h.buckets * h.slots_per_bucket > SLUICE_MAX_KEYS_MAX ||
            h.key_bytes < 1 || h.key_bytes > SLUICE_KEY_MAX || h.state_bytes < 16 ||
            h.state_bytes > (1u << 20) || h.state_bytes % 16 || (h.hash_kind != HASH_SIP && h.hash_kind != HASH_AES)) {
            sluice__errf(err, errlen, "shm:%s is damaged (its header's geometry is impossible)", path);
            goto out;
        }
        if (h.hash_kind == HASH_AES && !sluice__aeshash_available()) {
            sluice__errf(err, errlen, "shm:%s hashes keys with AES instructions, which this CPU lacks "
                         "(the file belongs to the host that made it)", path);
            goto out;
        }
        m->key_bytes = h.key_bytes;
        m->state_bytes = h.state_bytes;
        geometry(m, h.buckets * h.slots_per_bucket);
        if (h.slot_bytes != m->slot_bytes || h.slots_per_bucket != m->spb || h.buckets != m->buckets ||
            (uint64_t)st.st_size != m->map_bytes) {
            sluice__errf(err, errlen, "shm:%s is truncated or damaged (%lld bytes, its header says %zu)",
                         path, (long long)st.st_size, m->map_bytes);
            goto out;
        }
        shm_store want = {.key_bytes = key_bytes_given ? (uint32_t)key_bytes : m->key_bytes,
                          .state_bytes = state_bytes_given ? align_up((uint32_t)state_bytes, 16) : m->state_bytes};
        geometry(&want, cfg->max_keys_given ? (uint64_t)max_keys : h.buckets * h.slots_per_bucket);
        if (explicit_geometry && (want.buckets != m->buckets || want.spb != m->spb ||
                                  want.key_bytes != m->key_bytes || want.state_bytes != m->state_bytes)) {
            sluice__errf(err, errlen, "shm:%s was made with max_keys=%llu key_bytes=%u state_bytes=%u",
                         path, (unsigned long long)(h.buckets * h.slots_per_bucket), h.key_bytes, h.state_bytes);
            goto out;
        }
    }
    m->map = mmap(NULL, m->map_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m->map == MAP_FAILED) {
        m->map = NULL;
        sluice__errf(err, errlen, "shm:%s: mmap: %s", path, strerror(errno));
        rc = SLUICE_ENOMEM;
        goto out;
    }
    m->hdr = (file_header *)m->map;
    if (!fresh && strncmp(m->hdr->boot_id, boot, sizeof boot) != 0) {
        /* the host rebooted: the states' times mean nothing now */
        memset(m->map + HEADER_BYTES, 0, m->map_bytes - HEADER_BYTES);
        memcpy(m->hdr->boot_id, boot, sizeof boot);
        atomic_store(&m->hdr->now_ms, SLUICE_TIME_MIN_MS);
    }
    if (fresh) {
        file_header *f = m->hdr;
        f->version = LAYOUT_VERSION;
        f->header_bytes = HEADER_BYTES;
        f->slot_bytes = m->slot_bytes;
        f->slots_per_bucket = m->spb;
        f->buckets = m->buckets;
        f->key_bytes = m->key_bytes;
        f->state_bytes = m->state_bytes;
        f->hash_kind = sluice__aeshash_available() ? HASH_AES : HASH_SIP;
        sluice__random_words(f->aes_key, sizeof f->aes_key / sizeof f->aes_key[0]);
        sluice__random_words(f->seed, sizeof f->seed / sizeof f->seed[0]);
        memcpy(f->boot_id, boot, sizeof boot);
        atomic_store(&f->now_ms, SLUICE_TIME_MIN_MS);
        msync(m->map, HEADER_BYTES, MS_SYNC);
        memcpy(f->magic, MAGIC, 8); /* last: the file is set up */
    }
    m->on_full = cfg->on_full;
    m->aes = m->hdr->hash_kind == HASH_AES;
    rc = 0;
out:
    flock(fd, LOCK_UN);
    close(fd);
    if (rc) {
        shm_close(&m->head);
        return rc;
    }
    *out = &m->head;
    return 0;
}

void sluice__shm_store_collide(sluice_store *s) {
    ((shm_store *)s)->collide = 1;
}

const sluice__store_ops sluice__shm_store = {
    .scheme = "shm",
    .open = shm_open_file,
    .acquire_at = shm_acquire_at,
    .acquire_many = shm_acquire_many,
    .stats = shm_stats,
    .close = shm_close,
};
