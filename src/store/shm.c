/* store/shm.c: per-key state in a shared-memory file, for the processes of
 * one host ("shm:PATH?max_keys=N&on_full=evict|refuse&key_bytes=K&state_bytes=S").
 * Every process maps the file at its own address, so the layout has offsets
 * and fixed-width fields only, never pointers (native byte order: the file
 * belongs to one host):
 *
 *   0      header, 4096 bytes
 *          +0   magic "SLUICEM1"          u8[8]
 *          +8   layout version (1)         u32
 *          +12  header bytes (4096)        u32
 *          +16  slot bytes                 u32   (a multiple of 64)
 *          +20  slots per bucket           u32
 *          +24  buckets                    u64
 *          +32  key bytes                  u32   (longest key a slot holds)
 *          +36  state bytes                u32   (one state copy)
 *          +40  hash seed                  u64[2]
 *          +56  boot id                    char[40] (NUL-padded)
 *          +96  store time: highest reading  atomic i64
 *   4096   buckets, each: header (align64(64 + 4 * slots per bucket) bytes)
 *          +0   lock: owner (start << 32 | pid), 0 free   atomic u64
 *          +8   bucket time                i64   (under the lock)
 *          +16  allowed, denied, forgotten, evicted, refused   atomic u64 each
 *          +64  tags, one per slot         u32   (a hint: 0 none)
 *          then the slots, each:
 *          +0   used: policy fingerprint, 0 free   u64 (written last)
 *          +8   key hash                   u64
 *          +16  fresh at: store ms at which the state is fresh again  i64
 *          +24  last use (store ms)        i64
 *          +32  key length                 u32
 *          +36  current state copy (0/1)   u32
 *          +40  key                        u8[key bytes]
 *          then state copies 0 and 1, state bytes each (16-aligned); a
 *          copy holds the parts' states one after the other: buckets
 *          i128 TAT; fixed window i64 index, count; sliding window i64
 *          index, prev, cur; sliding log u32 cap, head, len, pad, i64 base,
 *          then cap entries of (i64 ms, i64 running total).
 *
 * Concurrency and crashes. A bucket's lock is a word naming its owner (pid
 * and start time), taken with compare-and-swap; a waiter that finds the
 * owner dead (a process killed with SIGKILL: gone, a zombie, or its pid now
 * another process's) takes the lock over, so no crash leaves it held. Not
 * covered: processes of different pid namespaces sharing one file, and an
 * owner that is stopped, not dead (it holds the bucket until it goes on). Under the lock, an update writes the spare state copy, then its
 * fresh-at time, then flips "current" with one aligned store: killed at any
 * point, the slot holds either the old state or the new one, never a torn
 * one. A new key is written completely before "used" is set; a key is
 * dropped by clearing "used" first. So a crash leaks no slot and corrupts
 * nothing, and at most the one interrupted request is admitted unused.
 * (The atomics must be lock-free: process-local fallback locks would not
 * work across processes; this is checked at compile time.)
 *
 * Room: a key lives in one of two buckets chosen by its hash: the first
 * while it has room, else the second (two choices fill a table almost to
 * capacity, where one choice turns keys away from full buckets long
 * before). A new key whose two buckets are full first takes the place of a
 * fresh key there (fresh at <= store time: forgetting it changes nothing),
 * else on_full evicts the least recently used of the two buckets' keys, or
 * refuses. Time is the store's clock (by default CLOCK_MONOTONIC, one clock
 * for every process of the host); the store's time is the highest reading
 * any process admitted at (never backwards), and the boot id detects a
 * reboot, after which the file starts fresh. */
#define _GNU_SOURCE
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>

_Static_assert(ATOMIC_LLONG_LOCK_FREE == 2, "shm needs lock-free 64-bit atomics");

#define MAGIC "SLUICEM1"
#define LAYOUT_VERSION 1
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
} file_header;

typedef struct {
    _Atomic uint64_t lock;
    int64_t now_ms;
    _Atomic uint64_t allowed, denied, forgotten, evicted, refused;
    uint64_t pad;
    uint32_t tags[];
} bucket_header;

typedef struct {
    _Atomic uint64_t used;
    uint64_t hash;
    int64_t fresh_at_ms, last_use_ms;
    uint32_t key_len;
    _Atomic uint32_t current;
    uint8_t key[];
} slot;

_Static_assert(sizeof(file_header) <= 128, "the header's fields fit their offsets");
_Static_assert(offsetof(bucket_header, tags) == 64, "tags at +64");
_Static_assert(offsetof(slot, key) == 40, "key at +40");

/* What this process knows of a policy: its fingerprint in the file and
 * where each part's state lies in a state copy. */
typedef struct {
    sluice_policy policy;
    uint64_t fp;
    uint32_t offset[SLUICE_POLICY_MAX_PARTS], log_cap[SLUICE_POLICY_MAX_PARTS];
    uint32_t bytes;
} spolicy;

typedef struct {
    struct sluice_store head;
    uint8_t *map;
    size_t map_bytes;
    file_header *hdr;
    uint64_t buckets;
    uint32_t spb, slot_bytes, bucket_bytes, bucket_header_bytes, key_bytes, state_bytes;
    sluice_on_full on_full;
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

static uint8_t *copy_at(const shm_store *m, slot *sl, uint32_t which) {
    return (uint8_t *)sl + align_up(40 + m->key_bytes, 16) + (size_t)which * m->state_bytes;
}

/* ---- the bucket lock: a pid, taken over from a dead owner ---- */

/* A process as a lock word: (start time << 32) | pid, the start time being
 * the low 32 bits of /proc/PID/stat's field 22 (clock ticks since boot), so
 * a pid reused by a newer process is not mistaken for the dead owner.
 * Refreshed in a child after fork(): a child locks as itself. */
static _Atomic uint64_t self_id;

/* /proc/PID/stat's state letter and start time; 0 when unreadable. */
static int proc_stat(pid_t pid, char *state, uint64_t *start) {
    char path[64], buf[512];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
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
 * (killed, not yet reaped), or a newer process with the same pid. */
static int owner_dead(uint64_t owner) {
    pid_t pid = (pid_t)(owner & 0xffffffffu);
    if (kill(pid, 0) == -1) return errno == ESRCH;
    char state;
    uint64_t start;
    if (!proc_stat(pid, &state, &start)) return 0;
    if (state == 'Z' || state == 'X') return 1;
    return (owner >> 32) != 0 && (owner >> 32) != (start & 0xffffffffu);
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
        if (spins > 16) sched_yield();
    }
}

static void bucket_unlock(bucket_header *bh) {
    atomic_store_explicit(&bh->lock, 0, memory_order_release);
}

static void unlock_all(bucket_header **locked, int n) {
    while (n-- > 0) bucket_unlock(locked[n]);
}

/* A counter of the bucket, under its lock: no locked add needed (atomic
 * only so that stats may read it without the lock). */
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

/* ---- decisions ---- */

static int mem_eq(const slot *sl, uint64_t fp, uint64_t h, const void *key, size_t len) {
    return atomic_load_explicit(&sl->used, memory_order_relaxed) == fp && sl->hash == h &&
           sl->key_len == len && memcmp(sl->key, key, len) == 0;
}

/* A slot for a new key when its n (1 or 2) buckets are full, or NULL
 * (refused): a fresh key's place first, else on_full. *home and *at say
 * where the slot is. */
static slot *make_room(shm_store *m, bucket_header **bhs, int n, int64_t now_ms, bucket_header **home,
                       uint32_t *at) {
    slot *lru = NULL;
    for (int b = 0; b < n; b++) {
        for (uint32_t i = 0; i < m->spb; i++) {
            slot *sl = slot_at(m, bhs[b], i);
            if (sl->fresh_at_ms <= now_ms) {
                atomic_store_explicit(&sl->used, 0, memory_order_release);
                bump(&bhs[b]->forgotten);
                *home = bhs[b], *at = i;
                return sl;
            }
            if (!lru || sl->last_use_ms < lru->last_use_ms) lru = sl, *home = bhs[b], *at = i;
        }
    }
    if (m->on_full == SLUICE_ON_FULL_REFUSE) {
        bump(&bhs[0]->refused);
        return NULL;
    }
    atomic_store_explicit(&lru->used, 0, memory_order_release);
    bump(&(*home)->evicted);
    return lru;
}

/* The key's slot in bucket bh (NULL when not there); notes the first free
 * slot in *free_slot, *free_i (when none yet). */
static slot *find_in(const shm_store *m, bucket_header *bh, uint32_t tag, uint64_t fp, uint64_t h,
                     const void *key, size_t len) {
    for (uint32_t i = 0; i < m->spb; i++) /* the tags first: one line, not a slot each */
        if (bh->tags[i] == tag && mem_eq(slot_at(m, bh, i), fp, h, key, len)) return slot_at(m, bh, i);
    return NULL;
}

/* A free slot of bh (NULL when full), with its index in *at. */
static slot *free_in(const shm_store *m, bucket_header *bh, uint32_t *at) {
    for (uint32_t i = 0; i < m->spb; i++) {
        slot *x = slot_at(m, bh, i);
        if (atomic_load_explicit(&x->used, memory_order_relaxed) == 0) {
            *at = i;
            return x;
        }
    }
    return NULL;
}

/* Bucket time, kept as now - SLUICE_TIME_MIN_MS (0, a new file's, is "none
 * yet"): the highest reading this bucket admitted at. max(now_ms, it). */
static int64_t bucket_time(const bucket_header *bh, int64_t now_ms) {
    return now_ms < bh->now_ms + SLUICE_TIME_MIN_MS ? bh->now_ms + SLUICE_TIME_MIN_MS : now_ms;
}

static int shm_acquire_at(sluice_store *s, const sluice_policy *p, const void *key, size_t len,
                          int64_t cost, int64_t now_ms, sluice_decision *d) {
    shm_store *m = (shm_store *)s;
    unsigned id;
    int rc = sluice__policy_set_id(&m->policies, s, p, &id);
    if (rc) return rc;
    const spolicy *sp = sluice__policy_item(&m->policies, id);
    if (len > m->key_bytes) {
        sluice__store_errf(s, "key of %zu bytes: this shm file holds keys of up to %u bytes "
                              "(create it with ?key_bytes=N)", len, m->key_bytes);
        return SLUICE_EINVAL;
    }
    int64_t reading_ms = now_ms;
    now_ms = sluice__store_time(&m->hdr->now_ms, now_ms);
    uint64_t k[2] = {m->hdr->seed[0] ^ sp->fp, m->hdr->seed[1]};
    uint64_t h = sluice__siphash13(k, key, len);
    uint32_t tag = (uint32_t)(h >> 32) | 1;
    /* two buckets may hold the key: the first choice, where keys go while
     * it has room, and the second; every key is looked for in the first
     * under its lock alone, and in both (locked in order) only when not
     * found there, which is also where new keys are placed */
    uint64_t b1 = (uint64_t)(((unsigned __int128)h * m->buckets) >> 64);
    uint64_t b2 = (uint64_t)(((unsigned __int128)((h << 32) | (h >> 32)) * m->buckets) >> 64);
    bucket_header *locked[2] = {bucket_at(m, b1), NULL}, *bh = locked[0];
    bucket_lock(bh);
    now_ms = bucket_time(bh, now_ms);
    slot *sl = find_in(m, bh, tag, sp->fp, h, key, len);
    int n_locked = 1;
    if (!sl && b2 != b1) {
        bucket_unlock(bh);
        locked[0] = bucket_at(m, b1 < b2 ? b1 : b2);
        locked[1] = bucket_at(m, b1 < b2 ? b2 : b1);
        bucket_lock(locked[0]);
        bucket_lock(locked[1]);
        n_locked = 2;
        now_ms = bucket_time(locked[1], bucket_time(locked[0], now_ms));
        bucket_header *first = bucket_at(m, b1), *second = bucket_at(m, b2);
        sl = find_in(m, first, tag, sp->fp, h, key, len);
        bh = first;
        if (!sl) {
            sl = find_in(m, second, tag, sp->fp, h, key, len);
            if (sl) bh = second;
        }
    }
    int is_new = sl == NULL;
    if (is_new) {
        /* the first bucket while it has room, else the second */
        bucket_header *free_home = bucket_at(m, b1);
        uint32_t free_i = 0;
        slot *free_slot = free_in(m, free_home, &free_i);
        if (!free_slot && b2 != b1) free_slot = free_in(m, free_home = bucket_at(m, b2), &free_i);
        if (!free_slot) {
            bucket_header *order[2] = {bucket_at(m, b1), bucket_at(m, b2)};
            free_slot = make_room(m, order, b2 != b1 ? 2 : 1, now_ms, &free_home, &free_i);
            if (!free_slot) {
                unlock_all(locked, n_locked);
                sluice__store_errf(s, "shm store is full of keys that are not fresh (buckets of %u)", m->spb);
                return SLUICE_EFULL;
            }
        }
        sl = free_slot;
        bh = free_home;
        /* write it whole, then the tag (a hint), then "used" */
        sl->hash = h;
        sl->key_len = (uint32_t)len;
        memcpy(sl->key, key, len);
        atomic_store_explicit(&sl->current, 0, memory_order_relaxed);
        sl->fresh_at_ms = INT64_MIN;
        sl->last_use_ms = now_ms;
        fresh_states(sp, copy_at(m, sl, 0));
        bh->tags[free_i] = tag;
        atomic_store_explicit(&sl->used, sp->fp, memory_order_release);
    }
    /* decide on the spare copy; publish it by flipping "current" */
    uint32_t cur = atomic_load_explicit(&sl->current, memory_order_relaxed) & 1;
    uint8_t *from = copy_at(m, sl, cur), *spare = copy_at(m, sl, !cur);
    memcpy(spare, from, sp->bytes);
    sluice__state st[SLUICE_POLICY_MAX_PARTS];
    load_states(sp, spare, st);
    size_t g = 0;
    rc = sluice__policy_decide(&sp->policy, st, now_ms, cost, d, &g);
    if (rc == SLUICE__EGROW) { /* cannot happen: spolicy_init sized the logs */
        unlock_all(locked, n_locked);
        sluice__store_errf(s, "sliding log full in shm slot");
        return SLUICE_ESTORE;
    }
    if (d->allowed) {
        store_states(sp, spare, st);
        sl->fresh_at_ms = now_ms + d->reset_ms; /* before the flip: never early */
        atomic_store_explicit(&sl->current, !cur, memory_order_release);
        bump(&bh->allowed);
        for (int i = 0; i < n_locked; i++) locked[i]->now_ms = now_ms - SLUICE_TIME_MIN_MS;
        sluice__store_time_raise(&m->hdr->now_ms, now_ms);
    } else {
        bump(&bh->denied);
    }
    sl->last_use_ms = now_ms;
    unlock_all(locked, n_locked);
    sluice__decision_lag(d, now_ms - reading_ms);
    return 0;
}

/* ---- the store ---- */

static void shm_stats(sluice_store *s, sluice_stats *out) {
    shm_store *m = (shm_store *)s;
    out->capacity = (int64_t)(m->buckets * m->spb);
    for (uint64_t b = 0; b < m->buckets; b++) {
        bucket_header *bh = bucket_at(m, b);
        for (uint32_t i = 0; i < m->spb; i++)
            out->keys += atomic_load_explicit(&slot_at(m, bh, i)->used, memory_order_relaxed) != 0;
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

static void read_boot_id(char out[40]) {
    memset(out, 0, 40);
    FILE *f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (!f) return;
    if (fgets(out, 40, f)) out[strcspn(out, "\n")] = 0;
    fclose(f);
}

/* Geometry from (max_keys, key_bytes, state_bytes). */
static void geometry(shm_store *m, uint64_t max_keys) {
    m->spb = max_keys <= 64 ? (uint32_t)max_keys : BUCKET_SLOTS;
    m->buckets = (max_keys + m->spb - 1) / m->spb;
    m->slot_bytes = align_up(align_up(40 + m->key_bytes, 16) + 2 * m->state_bytes, 64);
    m->bucket_header_bytes = align_up(64 + 4 * m->spb, 64);
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
    shm_store *m = calloc(1, sizeof *m);
    if (!m) return SLUICE_ENOMEM;
    pthread_once(&self_id_once, self_id_init);
    m->policies.item_size = sizeof(spolicy);
    m->policies.init = spolicy_init;
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
    read_boot_id(boot);
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
            h.state_bytes > (1u << 20) || h.state_bytes % 16) {
            sluice__errf(err, errlen, "shm:%s is damaged (its header's geometry is impossible)", path);
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
        if (getrandom(f->seed, sizeof f->seed, 0) != (ssize_t)sizeof f->seed) {
            f->seed[0] = (uint64_t)st.st_ino * UINT64_C(0x9e3779b97f4a7c15) ^ (uint64_t)getpid();
            f->seed[1] = (uint64_t)sluice_clock_now_ms(NULL);
        }
        memcpy(f->boot_id, boot, sizeof boot);
        atomic_store(&f->now_ms, SLUICE_TIME_MIN_MS);
        msync(m->map, HEADER_BYTES, MS_SYNC);
        memcpy(f->magic, MAGIC, 8); /* last: the file is set up */
    }
    m->on_full = cfg->on_full;
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

const sluice__store_ops sluice__shm_store = {
    .scheme = "shm",
    .open = shm_open_file,
    .acquire_at = shm_acquire_at,
    .stats = shm_stats,
    .close = shm_close,
};
