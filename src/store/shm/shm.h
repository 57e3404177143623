/* store/shm/shm.h: what the files of the shm store share: the handle of an
 * open file, what it knows of a policy, where things lie in the mapping,
 * and the functions one file offers another (grouped by the file that
 * defines them). The file itself is drawn in format.h; the protocol on it
 * is at the top of shm.c. */
#ifndef SLUICE_SHM_H
#define SLUICE_SHM_H

#include "internal.h"
#include "format.h"

#define SHM_KEY_BYTES_DEFAULT 128
#define SHM_STATE_BYTES_DEFAULT 256
#define SHM_MAX_KEYS_DEFAULT 100000
#define SHM_OVERFLOW_BYTES_DEFAULT (INT64_C(64) << 20)
#define SHM_OVERFLOW_BYTES_MAX (INT64_C(1) << 40)
#define SHM_SETUP_WAIT_MS 2000 /* how long an open waits for another's set-up */

/* What this process knows of a policy: its fingerprint in the file and
 * where each part's state lies in a state copy. */
typedef struct {
    sluice_policy policy;
    uint64_t fp;
    uint32_t tweak; /* its keys' hash tweak: fp's top 32 bits */
    uint32_t offset[SLUICE_POLICY_MAX_PARTS]; /* each part's state in a copy */
    uint32_t bytes, words; /* a state copy: bytes, words */
    unsigned block_class;  /* 0: its state fits a slot; else its keys' overflow block's class */
    int fast;              /* its keys' state is one word (FAST: see shm.c) */
    int gcra, shaper;      /* FAST: a bucket's word (decided inline), a shaper's */
    int64_t fast_unit;     /* FAST: the slot's unit, its algorithm's word_unit */
    uint64_t fast_fresh;   /* FAST: a fresh key's word */
} shm_policy;

typedef struct {
    struct sluice_store head;
    uint8_t *map;
    shm_file_header *hdr;
    shm_geometry g;
    uint8_t *heads, *slots; /* where the bucket heads and the slots begin */
    int fd; /* kept open: pages for new keys are asked of the filesystem with it */
    sluice_on_full on_full;
    int aes;     /* keys of up to 16 bytes: the AES hash (the file says so) */
    int collide; /* test hook: every key hashes alike */
    /* counters: this process's block (counters.c) */
    shm_counter_block *block;
    shm_stripe *stripes; /* block->stripe */
    unsigned plain_below; /* a thread's stripe below this is its own (plain adds): 0 in the shared block */
    int block_shared; /* the shared block: every add is atomic */
    unsigned block_gen; /* the fork generation it was taken in */
    sluice__lock block_lock; /* taking the block again, in a child after fork() */
    sluice__policy_set policies; /* items: shm_policy */
    char path[4096];
} shm_store;

/* ---- where things lie ---- */

/* Bucket b's head: heads are 64 bytes but in a file of one bucket (b = 0,
 * whatever its head's size), so a shift finds them. */
static inline shm_bucket_head *shm_head_at(const shm_store *m, uint64_t b) {
    return (shm_bucket_head *)(m->heads + (b << 6));
}
/* Slot i of bucket b: buckets are of 16 slots but in a file of one bucket
 * (b = 0), so it is slot (b << 4) + i of all. */
static inline shm_slot *shm_slot_at(const shm_store *m, uint64_t b, uint32_t i) {
    return (shm_slot *)(m->slots + ((b << 4) + i) * (uint64_t)m->g.slot_bytes);
}
static inline shm_slot_tail *shm_tail_of(const shm_store *m, shm_slot *sl) {
    return (shm_slot_tail *)((uint8_t *)sl + shm_tail_off(m->g.key_bytes));
}
static inline shm_overflow_head *shm_overflow(const shm_store *m) {
    return (shm_overflow_head *)(m->map + m->g.overflow_off);
}

/* ---- "owner.c": locks named by their owner process ---- */

/* This process's lock word: (start time << 32) | pid. */
uint64_t sluice__shm_self(void);
/* Whether the process of lock word owner is gone (when /proc cannot tell:
 * alive). */
int sluice__shm_owner_dead(uint64_t owner);
/* Takes the lock, waiting while a live process holds it. Returns 1 when it
 * was taken over from a dead owner (who may have left its work half done),
 * else 0. */
int sluice__shm_lock(_Atomic uint64_t *lock);
void sluice__shm_unlock(_Atomic uint64_t *lock);

/* ---- "counters.c": decisions counted per process and thread ---- */

/* Takes a block of counters for this handle (at open, and again in a child
 * after fork()); gives it back at close. */
void sluice__shm_counters_take(shm_store *m);
void sluice__shm_counters_give(shm_store *m);
/* Bumped in a child after fork(): a handle whose block was taken in
 * another generation takes one of its own at its next count. */
extern atomic_uint sluice__shm_fork_generation;
void sluice__shm_counters_again(shm_store *m) __attribute__((cold, noinline));
/* Adds one to the calling thread's stripe's field (an offsetof). */
static inline void shm_count(shm_store *m, size_t field) {
    if (__builtin_expect(m->block_gen != atomic_load_explicit(&sluice__shm_fork_generation, memory_order_relaxed), 0))
        sluice__shm_counters_again(m);
    unsigned i = sluice__stripe();
    _Atomic uint64_t *c = (_Atomic uint64_t *)((uint8_t *)&m->stripes[i] + field);
    if (i >= m->plain_below) atomic_fetch_add_explicit(c, 1, memory_order_relaxed);
    else atomic_store_explicit(c, atomic_load_explicit(c, memory_order_relaxed) + 1, memory_order_relaxed);
}
#define SHM_COUNT(m, field) shm_count((m), offsetof(shm_stripe, field))
/* Adds every block's counters into *out (allowed .. shadow_denied). */
void sluice__shm_counters_read(const shm_store *m, sluice_stats *out);

/* ---- "overflow.c": blocks for states larger than a slot ---- */

/* The class of block (log2 of its bytes) that holds a state of words
 * words, or 0 when none fits this file's area. */
unsigned sluice__shm_block_class(const shm_store *m, uint32_t words);
/* Takes a block of class k for an add in bucket b (whose lock is held):
 * its file offset in *at. Returns 0, SLUICE_EFULL (the area is full),
 * SLUICE_ENOMEM (the filesystem has no pages for it) or SLUICE_ESTORE (the
 * area is damaged), with the store's message. */
int sluice__shm_block_reserve(shm_store *m, unsigned k, uint64_t b, uint64_t *at);
/* Gives slot sl (not live; its buckets' locks held) the block its new key
 * needs (k, reserved: 0 when none): the one it has when of class k (the
 * reserved one then goes back), else the reserved one (its own freed).
 * *version_floor: the least version the key may start at. */
void sluice__shm_block_attach(shm_store *m, shm_slot *sl, unsigned k, uint64_t reserved, uint64_t *version_floor);
/* Gives back a block reserved for an add that did not happen. */
void sluice__shm_block_release(shm_store *m, uint64_t reserved, unsigned k);
/* The state copies of sl's block, or NULL when its overflow field names no
 * block of class k that belongs to sl (a damaged slot). */
shm_pair *sluice__shm_block_words(const shm_store *m, shm_slot *sl, unsigned k);

/* ---- "open.c" ---- */
#define SHM_N_PARAMS 5
extern const sluice__param sluice__shm_params[SHM_N_PARAMS]; /* the URL parameters it takes */
int sluice__shm_open(const sluice__store_config *cfg, sluice_store **out, char *err, size_t errlen);
void sluice__shm_close(sluice_store *s);
/* Asks the filesystem for the pages of [off, off + len): 0, or -1 with
 * the store's message (the filesystem is full). */
int sluice__shm_allocate(shm_store *m, uint64_t off, uint64_t len);

/* ---- "shm.c" ---- */
int sluice__shm_policy_init(void *item, void *ctx);

#endif /* SLUICE_SHM_H */
