/* store/shm/format.h: the shm store's file, as every process maps it (at
 * its own address, so offsets and fixed-width fields only, never pointers;
 * native byte order: the file belongs to one host). The tests include this
 * header instead of copying offsets.
 *
 *   0      header, 4096 bytes
 *          +0   magic "SLUICEM1" once set up; "SLUICEM~" while a set-up is
 *               under way (only such a file, or an empty one, is set up anew)
 *          +8   layout version (5)         u32
 *          +12  header bytes (4096)        u32
 *          +16  slot bytes                 u32   (a multiple of 64)
 *          +20  slots per bucket           u32   (1..64)
 *          +24  buckets                    u64
 *          +32  key bytes                  u32   (longest key a slot holds)
 *          +36  state bytes                u32   (one state copy in a slot)
 *          +40  hash seed                  u64[2]
 *          +56  boot id                    char[40] (NUL-padded)
 *          +96  store time: highest reading  atomic i64
 *          +104 key hash: 1 SipHash-1-3, 2 three AES rounds for keys of up
 *               to 16 bytes (SipHash-1-3 for longer ones); either takes the
 *               top 32 bits of the policy's fingerprint too   u32, pad u32
 *          +112 the AES hash's round keys  u64[8]
 *          +176 overflow bytes             u64   (the overflow area's size)
 *          +184 file bytes                 u64   (the whole file's size)
 *          +192 the configurations' lock: owner (as a bucket's)   atomic u64
 *   4096   counters: COUNTER_BLOCKS blocks of 18 lines each: an owner line
 *          (+0: start << 32 | pid, 0 free, atomic u64), then 17 stripes of
 *          six atomic u64 (allowed, denied, forgotten, evicted, refused,
 *          shadow_denied).
 *          Blocks 0..63 belong to one process each (taken at open, given
 *          back at close, a dead owner's taken over with its counts); the
 *          last is shared by processes beyond 64 (atomic adds). In a block,
 *          stripes 0..15 belong to one thread each (plain adds), 16 to the
 *          threads beyond 16 (atomic adds).
 *   then   configurations: POLICY_ENTRIES entries of 1024 bytes, the text
 *          of each policy a process used on the file, so that any process
 *          can read (and convert) a key kept by a configuration it was not
 *          given (registry.c). Added under the configurations' lock, never
 *          removed:
 *          +0   fingerprint (0: a free entry; written last)   atomic u64
 *          +8   text bytes                 u32, pad u32
 *          +16  text: the name, a newline, sluice_policy_format's text
 *   then   bucket heads, one per bucket, head bytes each (align64(32 +
 *          align8(slots per bucket))), allocated when the file is made:
 *          +0   lock: owner (start << 32 | pid), 0 free   atomic u64
 *          +8   bucket time: the highest reading a key was forgotten at,
 *               kept as reading - SLUICE_TIME_MIN_MS (0: none)  atomic i64
 *          +16  live: bit i while slot i holds a key (written under the
 *               lock; made true again when a dead owner's lock is taken
 *               over)   atomic u64
 *          +24  flags: ALLOCATED once the bucket's slots have their pages
 *               atomic u32, pad u32
 *          +32  tags, one byte per slot, 8 to a u64   (a hint: 0 none)
 *   then   slots, bucket b's at slots + b * slots per bucket * slot bytes
 *          (64-aligned; what a decision reads first: a FAST key with a key
 *          of up to 16 bytes is decided on one line):
 *          +0   a FAST key's state: its algorithm's word (src/algo/:
 *               a bucket's TAT - born at * r, as an i64; a window's index
 *               past the key's first and its counts)   u64
 *          +8   control: version << 2 | FAST << 1 | live   atomic u64
 *          +16  policy fingerprint (of the live key): the top 32 bits a
 *               hash of its name (every configuration of one name hashes
 *               a key alike: the key's hash takes them), the low 32 of the
 *               name and configuration (odd)   u64
 *          +24  born at: the store time the key was added at (its
 *               decisions are never earlier)   i64
 *          +32  key length                 u32
 *          +36  a FAST key's algorithm (sluice_algorithm)   u32
 *          +40  last use (store ms)        i64   (a hint)
 *          +48  key, zero-padded to 8      u8[key bytes]
 *          then (16-aligned), the tail:
 *          +0   change: the move to a version, 16 bytes: a u64, then
 *               version mod 2^32 << 32 | kind << 30 | cost  u64; kind 1
 *               admit (the u64: reading - SLUICE_TIME_MIN_MS; with its
 *               top bit set, a refund of cost at that reading), 2 settled
 *               (the u64: the store time at which the state is fresh
 *               again, i64), 3 drop
 *          +16  a FAST key's unit: what its algorithm needs beside the
 *               word to judge it without the policy (a bucket's r, a
 *               window's W)   i64
 *          +24  overflow: the file offset of the slot's overflow block,
 *               0 none   u64
 *          then state copies 0 and 1, 2 * state bytes each:
 *          words of {value u64, version u64}, the state 8 bytes a word:
 *          the parts' states one after the other: buckets i128
 *          TAT; fixed window i64 index, count; sliding window i64 index,
 *          prev, cur; sliding log u32 cap, head, len, pad, i64 base, then
 *          cap entries of (i64 ms, i64 running total). A state larger than
 *          state bytes lives in the slot's overflow block instead.
 *   then   the overflow area, overflow bytes (0: none):
 *          +0   lock: owner, as a bucket's  atomic u64
 *          +8   bump: the area offset of its first block never used   u64
 *          +16  high: no version written in a block given back is
 *               higher   u64
 *          +24  free lists: class k's first free block (area offset, 0
 *               none) at +24 + 8 * (k - OVERFLOW_CLASS_MIN)   u64[36]
 *          +4096 blocks of 2^k bytes (k >= 12), each:
 *               +0  class k  u32, pad u32
 *               +8  owner: the file offset of the slot it was given to
 *                   (of the bucket head, while taken for an add)
 *               +16 free: the next free block of its class (area offset,
 *                   0 none); taken: its taker's lock word (owner.c)
 *               +64 state copies 0 and 1, as a slot's
 *
 * The store's protocol on this file is at the top of shm.c. */
#ifndef SLUICE_SHM_FORMAT_H
#define SLUICE_SHM_FORMAT_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "pair.h"

#define SHM_MAGIC "SLUICEM1"
#define SHM_MAGIC_SETUP "SLUICEM~" /* a set-up under way: it may be redone */
#define SHM_LAYOUT_VERSION 5
#define SHM_HEADER_BYTES 4096
#define SHM_BUCKET_SLOTS 16
#define SHM_COUNTER_BLOCKS 65 /* 64 processes' own, then one shared */
#define SHM_COUNTER_STRIPES 17 /* 16 threads' own, then one shared */
#define SHM_OVERFLOW_HEAD 4096 /* the area's own header */
#define SHM_OVERFLOW_CLASS_MIN 12 /* blocks of 4 KiB .. */
#define SHM_OVERFLOW_CLASS_MAX 47 /* .. 128 TiB */
#define SHM_BLOCK_HEAD 64
#define SHM_POLICY_ENTRIES 256
#define SHM_POLICY_ENTRY_BYTES 1024

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
    uint64_t overflow_bytes, file_bytes;
    _Atomic uint64_t policies_lock;
} shm_file_header;
#define SHM_HASH_SIP 1u
#define SHM_HASH_AES 2u

/* One stripe of counters (a line). */
typedef struct {
    _Alignas(64) _Atomic uint64_t allowed;
    _Atomic uint64_t denied, forgotten, evicted, refused, shadow_denied;
} shm_stripe;

typedef struct {
    _Alignas(64) _Atomic uint64_t owner;
    shm_stripe stripe[SHM_COUNTER_STRIPES];
} shm_counter_block;

/* A configuration's entry. */
typedef struct {
    _Atomic uint64_t fp;
    uint32_t len, pad;
    char text[SHM_POLICY_ENTRY_BYTES - 16];
} shm_policy_entry;

typedef struct {
    _Atomic uint64_t lock;
    _Atomic int64_t now_ms;
    _Atomic uint64_t live;
    _Atomic uint32_t flags;
    uint32_t pad;
    _Atomic uint64_t tags[]; /* a byte a slot, 8 to a word */
} shm_bucket_head;
#define SHM_ALLOCATED 1u /* the bucket's slots have their pages */

/* Two 64-bit words changed together by a 16-byte compare-and-swap (pair.h). */
typedef sluice__pair shm_pair;

/* What a decision reads first: a FAST key with a key of up to 16 bytes is
 * decided on this one line. */
typedef struct {
    shm_pair head; /* lo: a FAST key's word (its state); hi: the control word */
    _Atomic uint64_t fp;
    _Atomic int64_t born_ms;
    _Atomic uint32_t key_len;
    _Atomic uint32_t algo; /* a FAST key's algorithm */
    _Atomic int64_t last_use_ms;
    _Atomic uint64_t key[]; /* zero-padded to a multiple of 8 bytes */
} shm_slot;
#define SHM_CTRL(sl) (&(sl)->head.hi)

/* After the key (16-aligned): what the general form and making room read. */
typedef struct {
    shm_pair change; /* lo: see the kind; hi: see SHM_CHANGE() */
    _Atomic int64_t unit; /* a FAST key's: a bucket's r, or a window's (see the top) */
    _Atomic uint64_t overflow; /* its overflow block's file offset, 0 none */
} shm_slot_tail;

typedef struct {
    _Atomic uint64_t lock;
    _Atomic uint64_t bump;
    _Atomic uint64_t high;
    _Atomic uint64_t free[SHM_OVERFLOW_CLASS_MAX - SHM_OVERFLOW_CLASS_MIN + 1];
} shm_overflow_head;

typedef struct {
    _Atomic uint32_t klass;
    uint32_t pad;
    _Atomic uint64_t owner, next;
} shm_block_head;

#define SHM_LIVE 1u
#define SHM_FAST 2u /* the key's state is one word, head.lo (see the top) */
#define SHM_VERSION(c) ((c) >> 2)
#define SHM_CTRL_WORD(v, flags) ((uint64_t)(v) << 2 | (flags))
#define SHM_KIND_ADMIT 1u
#define SHM_KIND_SETTLED 2u
#define SHM_KIND_DROP 3u
#define SHM_CHANGE(version, kind, cost) \
    ((uint64_t)(uint32_t)(version) << 32 | (uint64_t)(kind) << 30 | (uint64_t)(cost))
#define SHM_CHANGE_VERSION(hi) ((uint32_t)((hi) >> 32))
#define SHM_CHANGE_KIND(hi) ((unsigned)((hi) >> 30) & 3u)
#define SHM_CHANGE_COST(hi) ((int64_t)((hi) & 0x3fffffffu))
#define SHM_REFUND (UINT64_C(1) << 63) /* in an admission's u64: a refund instead */

_Static_assert(offsetof(shm_file_header, hash_kind) == 104 && offsetof(shm_file_header, overflow_bytes) == 176 &&
                   offsetof(shm_file_header, policies_lock) == 192 && sizeof(shm_file_header) == 200,
               "the header's fields at their offsets");
_Static_assert(sizeof(shm_stripe) == 64 && sizeof(shm_counter_block) == 64 * (1 + SHM_COUNTER_STRIPES),
               "counters: a line a stripe");
_Static_assert(sizeof(shm_policy_entry) == SHM_POLICY_ENTRY_BYTES, "a configuration's entry");
_Static_assert(offsetof(shm_bucket_head, tags) == 32, "tags at +32");
_Static_assert(offsetof(shm_slot, fp) == 16 && offsetof(shm_slot, key) == 48 && sizeof(shm_slot_tail) == 32,
               "fp at +16, key at +48, a tail of 32");
_Static_assert(sizeof(shm_overflow_head) <= SHM_OVERFLOW_HEAD && sizeof(shm_block_head) <= SHM_BLOCK_HEAD,
               "the overflow area's heads fit");

/* ---- geometry: where everything lies, from the header's numbers ---- */

typedef struct {
    uint32_t spb, slot_bytes, head_bytes, key_bytes, state_bytes;
    uint64_t buckets;
    uint64_t counters_off, policies_off, heads_off, slots_off, overflow_off, overflow_bytes, file_bytes;
} shm_geometry;

static inline uint64_t shm_align(uint64_t x, uint64_t a) {
    return (x + a - 1) / a * a;
}

/* The tail's offset in a slot: after the key, 16-aligned. */
static inline uint32_t shm_tail_off(uint32_t key_bytes) {
    return (uint32_t)shm_align(48 + shm_align(key_bytes, 8), 16);
}

/* The geometry of a file of max_keys keys (1..SLUICE_MAX_KEYS_MAX),
 * key_bytes (1..512), state_bytes (16..2^20, a multiple of 16) and an
 * overflow area of overflow_bytes (0, or 2 * 4096 .. 2^40, a multiple of
 * 4096). */
static inline void shm_geometry_of(shm_geometry *g, uint64_t max_keys, uint32_t key_bytes, uint32_t state_bytes,
                                   uint64_t overflow_bytes) {
    g->key_bytes = key_bytes;
    g->state_bytes = state_bytes;
    g->spb = max_keys <= 64 ? (uint32_t)max_keys : SHM_BUCKET_SLOTS;
    g->buckets = (max_keys + g->spb - 1) / g->spb;
    g->slot_bytes = (uint32_t)shm_align(shm_tail_off(key_bytes) + sizeof(shm_slot_tail) + 4 * (uint64_t)state_bytes, 64);
    g->head_bytes = (uint32_t)shm_align(32 + shm_align(g->spb, 8), 64); /* 64 but for one bucket of > 32 */
    g->counters_off = SHM_HEADER_BYTES;
    g->policies_off = g->counters_off + SHM_COUNTER_BLOCKS * sizeof(shm_counter_block);
    g->heads_off = g->policies_off + SHM_POLICY_ENTRIES * SHM_POLICY_ENTRY_BYTES;
    g->slots_off = shm_align(g->heads_off + g->buckets * g->head_bytes, 4096);
    g->overflow_off = shm_align(g->slots_off + g->buckets * g->spb * g->slot_bytes, 4096);
    g->overflow_bytes = overflow_bytes;
    g->file_bytes = g->overflow_off + overflow_bytes;
}

#endif /* SLUICE_SHM_FORMAT_H */
