/* store/shm/shm.c: per-key state in a shared-memory file, for the processes
 * of one host ("shm:PATH?max_keys=N&on_full=evict|refuse&key_bytes=K&
 * state_bytes=S&overflow_bytes=O"): the lock-free protocol on the file that
 * format.h draws. Opening the file is open.c; its locks, owner.c; its
 * counters, counters.c; states larger than a slot, overflow.c.
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
 * Every other key: the key's version v selects its current copy, v & 1,
 * whose words all carry version v (in its slot, or in its overflow block
 * when the state is larger than state_bytes). An admission (1) reads the
 * copy, (2) installs its change for version v + 1 (its reading and cost)
 * with one 16-byte compare-and-swap, (3) writes the new state into the
 * other copy, each word with a 16-byte compare-and-swap that only raises a
 * word's version, and (4) marks the change settled (with the time the new
 * state is fresh again) and moves the control word to v + 1. The new
 * state depends only on the old one and the change, so any process that
 * meets an installed change finishes it (writing the same values) instead
 * of waiting: a process stopped or killed at any step blocks nobody. A
 * word's version only grows, so a process that wakes up late cannot write
 * over a newer state; a reader takes a copy only when every word it read
 * carries the version of the control word. Dropping a key is a change too
 * (kind 3), so it cannot overtake an admission: a fresh key is dropped
 * only with no change pending, and the least recently used key may be
 * dropped with its admission pending (as if the admission came first). A
 * key being added takes a new version before it writes its state, so words
 * that an add killed midway wrote never pass for a later key's state. The
 * change keeps its version mod 2^32 (the words keep all 64 bits): a process
 * stopped between reading a key and installing its change while its slot
 * took 2^32 updates (of that key, or of keys that held the slot since)
 * could install a stale one. KNOWN, NOT FIXED: the key then answers that
 * its state is damaged (below), as a reviewer showed by forging the 2^32
 * updates. It takes a process stopped in the middle of one decision for as
 * long as 2^32 updates of one slot take (minutes at full speed on one
 * slot); a fix keeps more version bits in the change word.
 *
 * Nothing in the file is trusted: every loop here goes round again only
 * when a word it read has changed (another process made progress), never
 * on what a word says, and a slot whose words contradict each other or its
 * policy (a control word's version that its copy's words do not carry, a
 * change word of another version, a FAST flag on a policy that has none, a
 * window count above its limit, a log's ring out of bounds, an overflow
 * field naming no block of the slot's) is answered SLUICE_ESTORE, naming
 * the key, and is never decided on; making room may evict such a slot, as
 * it may any key that is not fresh. What no word can tell is taken as it
 * is: a flipped bit in a key's bytes makes it another key, one in a count
 * or a TAT another count or TAT (so a damaged file can admit more than a
 * limit only through values that look like valid states).
 *
 * The table's shape (adding keys, making room, under locks) is room.c's;
 * Time is the store's clock (by default CLOCK_MONOTONIC's ms, one clock for
 * every process of the host: a process reading it from the TSC may be one
 * ms apart from another only within 75 us of a ms boundary); the store's
 * time is the highest reading any process admitted at (never backwards),
 * and the boot id detects a reboot, after which the file starts fresh
 * (open.c). */
#define _GNU_SOURCE
#include "protocol.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void (*sluice__shm_step_hook)(int step);

/* ---- a key's state: decided in a buffer of its words ---- */

/* Applies verb (VERB_ACQUIRE, or SLUICE__VERB_PEEK, _REFUND) of cost to the
 * state in buf, at now_ms: a decision (buf updated when allowed), a peek
 * (buf as it was), or a refund (buf updated; *d: a peek of cost 1 right
 * after). *fresh_at: when buf changed, the store time at which its state
 * is fresh again (every part's, shadow ones too). 0, or DAMAGED. */
static int apply_words(const shm_policy *sp, uint64_t *buf, int64_t now_ms, int verb, int64_t cost,
                       sluice_decision *d, int64_t *fresh_at) {
    sluice__state st[SLUICE_POLICY_MAX_PARTS];
    const sluice_policy *p = &sp->policy;
    if (sluice__shm_load_states(sp, (uint8_t *)buf, st)) return DAMAGED;
    if (verb == SLUICE__VERB_PEEK) {
        sluice__policy_peek(p, st, now_ms, cost, d);
        return 0;
    }
    if (verb == SLUICE__VERB_REFUND) {
        sluice__policy_refund(p, st, now_ms, cost);
        sluice__policy_peek(p, st, now_ms, 1, d);
    } else {
        size_t g = 0;
        int rc = sluice__policy_decide(p, st, now_ms, cost, d, &g);
        if (rc == SLUICE__EGROW) return DAMAGED; /* a ring at its largest (state.c) never needs room */
        if (rc || !d->allowed) return rc;
    }
    sluice__shm_store_states(sp, (uint8_t *)buf, st);
    *fresh_at = now_ms + (p->n_shadow || verb == SLUICE__VERB_REFUND ? sluice__policy_reset_ms(p, st, now_ms)
                                                                      : d->reset_ms);
    return 0;
}

/* ---- changes: the move of a key from version v to v + 1 ---- */

/* Finishes the admission or refund {lo, hi} installed in sl at control
 * word c, as its maker would (the same values: they depend only on the old
 * state and the change), then publishes. Any process that knows the key's
 * policy may, any number of times; buf is room for the policy's words. */
void sluice__shm_finish(const shm_store *m, const shm_policy *sp, shm_slot *sl, copies cp, uint64_t c, uint64_t lo,
                        uint64_t hi, uint64_t *buf) {
    if (SHM_CHANGE_KIND(hi) == SHM_KIND_ADMIT) {
        if (!copy_read(cp, SHM_VERSION(c), buf, sp->words)) return; /* already moved on */
        sluice_decision d;
        int64_t fresh_at = INT64_MIN;
        int64_t cost = SHM_CHANGE_COST(hi);
        int verb = lo & SHM_REFUND ? SLUICE__VERB_REFUND : VERB_ACQUIRE;
        if (cost < 1 || cost > sp->policy.max_cost ||
            apply_words(sp, buf, (int64_t)(lo & ~SHM_REFUND) + SLUICE_TIME_MIN_MS, verb, cost, &d, &fresh_at) ||
            (verb == VERB_ACQUIRE && !d.allowed))
            return; /* not its maker's change: the caller finds no progress (damaged) */
        copy_write(cp, SHM_VERSION(c) + 1, buf, sp->words);
        uint64_t settled = SHM_CHANGE(SHM_VERSION(c) + 1, SHM_KIND_SETTLED, 0);
        if (sluice__cas16(&shm_tail_of(m, sl)->change, lo, hi, (uint64_t)fresh_at, settled)) hi = settled;
        else sluice__pair_read(&shm_tail_of(m, sl)->change, &lo, &hi); /* settled by another, or dropped */
    }
    publish(sl, c, hi);
}

/* ---- finding keys ---- */

/* The key's slot among the slots of bucket k of q in mask, or NULL. *seen:
 * the slot's control word, read before its key: while it stays the same,
 * so does the key (every change of a slot's key moves its version on). */
static shm_slot *find_among(const shm_store *m, const located *q, int k, uint64_t mask, const uint64_t *kw,
                            size_t len, uint64_t *seen) {
    for (; mask; mask &= mask - 1) {
        shm_slot *sl = shm_slot_at(m, q->b[k], (uint32_t)__builtin_ctzll(mask));
        uint64_t c = atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire);
        if ((c & SHM_LIVE) && holds(sl, q->sp->fp, kw, len)) {
            *seen = c;
            return sl;
        }
    }
    return NULL;
}

/* The key's slot in its buckets, or NULL; *home: its bucket (0 or 1).
 * Without a lock. The second bucket's tags are fetched before the first
 * bucket's slots are read, so at 1M keys their cache misses overlap. */
static shm_slot *find_key(const shm_store *m, const located *q, const uint64_t *kw, size_t len, uint64_t *seen,
                          int *home) {
    __builtin_prefetch(q->bh[1]->tags);
    shm_slot *sl = find_among(m, q, 0, candidates(m, q->bh[0], q->tag), kw, len, seen);
    *home = 0;
    if (!sl && q->n == 2) {
        sl = find_among(m, q, 1, candidates(m, q->bh[1], q->tag), kw, len, seen);
        *home = 1;
    }
    return sl;
}

/* Notes a key's use (for the least recently used): a write only when the
 * time moved, so deciding leaves the line clean when it need not write. */
static void touch(shm_slot *sl, int64_t now_ms) {
    if (atomic_load_explicit(&sl->last_use_ms, memory_order_relaxed) != now_ms)
        atomic_store_explicit(&sl->last_use_ms, now_ms, memory_order_relaxed);
}

/* ---- FAST keys: one word of state ---- */

/* Applies verb to a FAST key: its word (a bucket's TAT, relative to
 * born_ms in the bucket's units, r per ms; or a window's index and counts)
 * and its control word change together in one 16-byte compare-and-swap.
 * A bucket is decided with the token bucket's arithmetic
 * (src/algo/token_bucket.c) on the same backlog, a window by its
 * algorithm: the same decisions. A refund gives back on the word (the
 * answer: a request of cost 1 on the new word); a peek, as a denial,
 * writes nothing. */
static int decide_fast(shm_store *m, const shm_policy *sp, shm_slot *sl, const uint64_t *kw, size_t len, int verb,
                       int64_t cost, int64_t reading_ms, sluice_decision *d, uint64_t seen) {
    const sluice__params *pp = &sp->policy.params[0];
    const sluice__algo *a = sp->policy.algo[0];
    for (;; seen = 0) {
        uint64_t w = atomic_load_explicit(&sl->head.lo, memory_order_acquire);
        uint64_t c = atomic_load_explicit(&sl->head.hi, memory_order_acquire);
        if (c != seen) { /* else w was read between two equal readings of c: of version c */
            sluice__pair_read(&sl->head, &w, &c);
            if (!(c & SHM_LIVE) || !holds(sl, sp->fp, kw, len)) return NOT_HELD;
        }
        if (!(c & SHM_FAST)) return AGAIN;
        /* store time, and never before the key was added (see decision_time) */
        int64_t born_ms = atomic_load_explicit(&sl->born_ms, memory_order_relaxed);
        int64_t now = sluice__store_time(&m->hdr->now_ms, reading_ms), bb = 0, nb = 0, ts = 0, asked = cost;
        if (now < born_ms) now = born_ms;
        /* a bucket: ts = (now - born) * r */
        if (sp->gcra && (__builtin_sub_overflow(now, born_ms, &ts) || __builtin_mul_overflow(ts, pp->r, &ts)))
            return CONVERT;
        uint64_t x = w, nw = w; /* the word decided on; the word written */
        if (__builtin_expect(verb == SLUICE__VERB_REFUND, 0)) {
            if (sp->gcra) x = (uint64_t)sluice__gcra_word_refund(pp, (int64_t)w, ts, cost);
            else if (a->word_refund(pp, w, born_ms, now, cost, &x) == SLUICE__WORD_OUTGROWN) return CONVERT;
            nw = x;
            asked = 1; /* the answer: a request of cost 1, right after */
        }
        int admit;
        uint64_t after = 0; /* the word after admitting asked */
        if (!sp->gcra) { /* a window: its algorithm decides on the word */
            admit = a->word_decide(pp, x, born_ms, now, asked, d, &after);
            if (admit == SLUICE__WORD_OUTGROWN) return CONVERT;
            if (admit < 0) return DAMAGED;
        } else { /* the bucket's word step (algo/algo.h), its decision written after the CAS */
            int64_t nt = 0;
            if ((admit = sluice__gcra_word_step(pp, (int64_t)x, ts, asked, &bb, &nb, &nt)) < 0) return CONVERT;
            after = (uint64_t)nt;
        }
        if (verb == VERB_ACQUIRE && admit) nw = after;
        if (verb != SLUICE__VERB_PEEK) touch(sl, now);
        if (nw != w) {
            if (!sluice__cas16(&sl->head, w, c, nw, c + SHM_CTRL_WORD(1, 0))) continue;
        } else {
            /* no CAS vouches for what was read: the key, born_ms and word
             * it was worked out from are this key's only if the control
             * word is still c after them (else the slot changed hands) */
            STEP(6);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&sl->head.hi, memory_order_relaxed) != c) continue;
        }
        if (sp->gcra) {
            if (admit) sluice__gcra_allowed(pp, bb, nb, sp->shaper, d);
            else sluice__gcra_denied(pp, bb, asked, d);
        }
        if (verb == VERB_ACQUIRE) {
            if (admit) {
                sluice__store_time_raise(&m->hdr->now_ms, now);
                COUNT(m, allowed);
            } else {
                COUNT(m, denied);
            }
        }
        sluice__decision_lag(d, now - reading_ms);
        return 0;
    }
}

/* ---- the general form ---- */

/* Applies verb to the key in sl, lock-free (see the top of the file): 0
 * with *d filled, an error, NOT_HELD, CONVERT or DAMAGED. A refund is a
 * change as an admission is (its maker's or any finisher's the same); a
 * peek writes nothing. buf: room for the policy's words. */
static int decide_held(shm_store *m, const shm_policy *sp, shm_slot *sl, const uint64_t *kw, size_t len, int verb,
                       int64_t cost, int64_t reading_ms, sluice_decision *d, uint64_t *buf, uint64_t seen) {
    for (;; seen = 0) {
        /* the control word the key was found at, or a new reading */
        uint64_t c = seen ? seen : atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire), lo, hi;
        if (!(c & SHM_LIVE) || (c != seen && !holds(sl, sp->fp, kw, len))) return NOT_HELD;
        if (c & SHM_FAST) {
            if (!sp->fast) return DAMAGED; /* a FAST flag on a policy that has none */
            int rc = decide_fast(m, sp, sl, kw, len, verb, cost, reading_ms, d, c);
            if (rc == AGAIN) continue;
            return rc;
        }
        copies cp = copies_of(m, sp, sl);
        if (!cp.base) return DAMAGED;
        uint64_t v = SHM_VERSION(c);
        sluice__pair_read(&shm_tail_of(m, sl)->change, &lo, &hi);
        int moved = 0; /* whether c or the change moved since they were read */
        if (SHM_CHANGE_VERSION(hi) == (uint32_t)(v + 1)) { /* another's change: finish it first */
            sluice__shm_finish(m, sp, sl, cp, c, lo, hi, buf);
            uint64_t lo2, hi2;
            sluice__pair_read(&shm_tail_of(m, sl)->change, &lo2, &hi2);
            moved = atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire) != c || lo2 != lo || hi2 != hi;
            if (moved) continue;
            return DAMAGED; /* a change nobody can finish */
        }
        if (SHM_CHANGE_VERSION(hi) != (uint32_t)v || SHM_CHANGE_KIND(hi) != SHM_KIND_SETTLED ||
            !copy_read(cp, v, buf, sp->words) || atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire) != c) {
            if (atomic_load_explicit(SHM_CTRL(sl), memory_order_acquire) != c) continue;
            uint64_t lo2, hi2;
            sluice__pair_read(&shm_tail_of(m, sl)->change, &lo2, &hi2);
            if (lo2 != lo || hi2 != hi) continue; /* a change came meanwhile */
            return DAMAGED; /* its change or its copy is not of its version */
        }
        /* store time, and never before the key was added (see decision_time) */
        int64_t now = sluice__store_time(&m->hdr->now_ms, reading_ms);
        int64_t born_ms = atomic_load_explicit(&sl->born_ms, memory_order_relaxed);
        if (now < born_ms) now = born_ms;
        int64_t fresh_at = INT64_MIN;
        int rc = apply_words(sp, buf, now, verb, cost, d, &fresh_at);
        if (rc) return rc;
        if (verb == SLUICE__VERB_PEEK) {
            /* the copy was of version c: what the key was then */
            sluice__decision_lag(d, now - reading_ms);
            return 0;
        }
        touch(sl, now);
        int refund = verb == SLUICE__VERB_REFUND;
        if (refund || d->allowed) {
            uint64_t at = (uint64_t)(now - SLUICE_TIME_MIN_MS) | (refund ? SHM_REFUND : 0);
            uint64_t mine = SHM_CHANGE(v + 1, SHM_KIND_ADMIT, cost);
            if (!sluice__cas16(&shm_tail_of(m, sl)->change, lo, hi, at, mine)) continue; /* another change came first */
            /* the change is decided: write it, say so, publish (a drop
             * that replaced it meanwhile counts as coming after it) */
            if (!refund) COUNT(m, allowed);
            STEP(1);
            copy_write(cp, v + 1, buf, sp->words);
            STEP(2);
            uint64_t settled = SHM_CHANGE(v + 1, SHM_KIND_SETTLED, 0);
            if (sluice__cas16(&shm_tail_of(m, sl)->change, at, mine, (uint64_t)fresh_at, settled)) hi = settled;
            else sluice__pair_read(&shm_tail_of(m, sl)->change, &lo, &hi);
            STEP(3);
            publish(sl, c, hi);
            if (!refund) sluice__store_time_raise(&m->hdr->now_ms, now);
        } else {
            COUNT(m, denied);
        }
        if (!refund && d->shadow_denied) COUNT(m, shadow_denied);
        sluice__decision_lag(d, now - reading_ms);
        return 0;
    }
}

/* ---- a request ---- */

/* Locates the key (kw: room for its words, zero-padded, filled here). */
static inline __attribute__((always_inline)) int locate(shm_store *m, const sluice_policy *p, const void *key,
                                                        size_t len, uint64_t *kw, located *q) {
    if (len > m->g.key_bytes) { /* before the policy is registered: an error changes nothing */
        sluice__store_errf(&m->head, "key of %zu bytes: shm:%s holds keys of up to %u bytes (make the file "
                                     "with ?key_bytes=N)", len, m->path, m->g.key_bytes);
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
    q->b[0] = (uint64_t)(((unsigned __int128)h * m->g.buckets) >> 64);
    q->b[1] = (uint64_t)(((unsigned __int128)((h << 32) | (h >> 32)) * m->g.buckets) >> 64);
    q->bh[0] = shm_head_at(m, q->b[0]);
    q->bh[1] = shm_head_at(m, q->b[1]);
    q->n = q->b[1] != q->b[0] ? 2 : 1;
    return 0;
}

/* The usual case, straight: a FAST key in its first bucket. NOT_HELD:
 * anything else, for the general way. */
static inline __attribute__((always_inline)) int acquire_fast(shm_store *m, const located *q, const uint64_t *kw,
                                                              size_t len, int verb, int64_t cost, int64_t now_ms,
                                                              sluice_decision *d) {
    uint64_t c = 0;
    shm_slot *sl = find_among(m, q, 0, candidates(m, q->bh[0], q->tag), kw, len, &c);
    if (!sl || !(c & SHM_FAST)) return NOT_HELD;
    int rc = decide_fast(m, q->sp, sl, kw, len, verb, cost, now_ms, d, c);
    return rc == AGAIN || rc == CONVERT ? NOT_HELD : rc;
}

/* Writes the key as text for a message: printable bytes as they are,
 * others as \xNN, at most 48 of them. */
static void key_text(const void *key, size_t len, char *out, size_t outlen) {
    const uint8_t *k = key;
    size_t o = 0;
    for (size_t i = 0; i < len && i < 48 && o + 5 < outlen; i++)
        o += (size_t)snprintf(out + o, outlen - o, k[i] >= 0x20 && k[i] < 0x7f && k[i] != '"' && k[i] != '\\' ? "%c" : "\\x%02x", k[i]);
    snprintf(out + o, outlen - o, "%s", len > 48 ? "..." : "");
}

static __attribute__((cold, noinline)) int damaged(shm_store *m, const shm_policy *sp, const void *key, size_t len) {
    char k[48 * 4 + 8];
    key_text(key, len, k, sizeof k);
    sluice__store_errf(&m->head, "shm:%s: the state of key \"%s\" (policy %s) is damaged: it is not decided "
                                 "(remove the file to start over)", m->path, k, sp->policy.name);
    return SLUICE_ESTORE;
}

/* The answer for a key the store does not hold: as a fresh state's (the
 * decision of a peek, or a peek of cost 1 after a refund or reset). */
static void fresh_answer(const shm_policy *sp, int verb, int64_t cost, int64_t now_ms, sluice_decision *d) {
    sluice__policy_peek_fresh(&sp->policy, now_ms, verb == SLUICE__VERB_PEEK ? cost : 1, d);
}

/* Applies verb (VERB_ACQUIRE, or SLUICE__VERB_PEEK, _REFUND) to the
 * located key. A key not held: a decision adds it; a peek or refund adds
 * nothing and answers as a fresh state would. A key kept by another
 * configuration of the policy's name is converted first (retune). */
static inline __attribute__((always_inline)) int acquire_located(shm_store *m, const located *q, const void *key,
                                                                 const uint64_t *kw, size_t len, int verb,
                                                                 int64_t cost, int64_t now_ms, sluice_decision *d) {
    const shm_policy *sp = q->sp;
    int rc;
    if (sp->fast && (rc = acquire_fast(m, q, kw, len, verb, cost, now_ms, d)) != NOT_HELD) goto out;
    uint64_t stack_buf[160], *buf = stack_buf;
    if (sp->words > sizeof stack_buf / sizeof stack_buf[0] && !(buf = malloc(sp->words * sizeof *buf))) {
        sluice__store_errf(&m->head, "out of memory");
        return SLUICE_ENOMEM;
    }
    for (rc = NOT_HELD; rc == NOT_HELD || rc == CONVERT;) {
        int home;
        uint64_t seen = 0;
        shm_slot *sl = find_key(m, q, kw, len, &seen, &home);
        if (sl && rc != CONVERT) { /* held: no lock */
            rc = decide_held(m, sp, sl, kw, len, verb, cost, now_ms, d, buf, seen);
            continue;
        }
        /* new (or to convert): under both buckets' locks, after a look
         * there (another process may just have added it) */
        sluice__shm_lock_buckets(m, q);
        seen = 0;
        rc = 0;
        sl = sluice__shm_find_locked(m, q, kw, len, &seen, &home, &rc);
        if (!sl && rc == 0) {
            int64_t at_ms = sluice__shm_decision_time(m, q, now_ms);
            rc = sluice__shm_retune(m, q, kw, len, at_ms, buf, &sl, &home);
            if (rc == 0 && !sl && verb == VERB_ACQUIRE)
                rc = sluice__shm_add_key(m, q, kw, len, at_ms, NULL, buf, &sl, &home);
            if (rc == 0 && !sl) {
                fresh_answer(sp, verb, cost, at_ms, d);
                sluice__decision_lag(d, at_ms - now_ms);
            }
        }
        if (sl && rc == 0)
            while ((rc = decide_held(m, sp, sl, kw, len, verb, cost, now_ms, d, buf, seen)) == CONVERT) {
                if ((rc = sluice__shm_convert(m, sp, sl, buf))) break;
                seen = 0;
            }
        sluice__shm_unlock_buckets(q);
    }
    if (buf != stack_buf) free(buf);
out:
    return rc == DAMAGED ? damaged(m, sp, key, len) : rc;
}

static int shm_acquire_at(sluice_store *s, const sluice_policy *p, const void *key, size_t len, int64_t cost,
                          int64_t now_ms, sluice_decision *d) {
    shm_store *m = (shm_store *)s;
    uint64_t kw[(SLUICE_KEY_MAX + 7) / 8]; /* the key in words, zero-padded */
    located q;
    int rc = locate(m, p, key, len, kw, &q);
    return rc ? rc : acquire_located(m, &q, key, kw, len, VERB_ACQUIRE, cost, now_ms, d);
}

/* Peek and refund as a decision is made (acquire_located); a reset forgets
 * the key under its buckets' locks, whichever configuration of the name
 * keeps it. */
static int shm_operate_at(sluice_store *s, const sluice_policy *p, const void *key, size_t len, sluice__verb verb,
                          int64_t cost, int64_t now_ms, sluice_decision *d) {
    shm_store *m = (shm_store *)s;
    uint64_t kw[(SLUICE_KEY_MAX + 7) / 8];
    located q;
    int rc = locate(m, p, key, len, kw, &q);
    if (rc) return rc;
    if (verb != SLUICE__VERB_RESET) return acquire_located(m, &q, key, kw, len, (int)verb, cost, now_ms, d);
    sluice__shm_lock_buckets(m, &q);
    sluice__shm_forget(m, &q, kw, len);
    int64_t at_ms = sluice__shm_decision_time(m, &q, now_ms);
    sluice__shm_unlock_buckets(&q);
    fresh_answer(q.sp, verb, 1, at_ms, d);
    sluice__decision_lag(d, at_ms - now_ms);
    return 0;
}

/* A batch, decided in order as one acquire_at each, BATCH requests at a
 * time, as the memory store does (memory/memory.c): their keys located first and
 * their buckets' heads, then the slots the tags point to, fetched into the
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
            __builtin_prefetch(q[i].bh[0]);
            __builtin_prefetch(q[i].bh[1]);
        }
        for (size_t i = 0; i < g; i++) {
            if (res[i] || rq[i].key_len > 16) continue;
            uint64_t mask = candidates(m, q[i].bh[0], q[i].tag);
            if (mask) __builtin_prefetch(shm_slot_at(m, q[i].b[0], (uint32_t)__builtin_ctzll(mask)), 1);
        }
        for (size_t i = 0; i < g; i++) {
            if (res[i]) continue;
            res[i] = rq[i].key_len > 16
                         ? shm_acquire_at(s, rq[i].policy, rq[i].key, rq[i].key_len, rq[i].cost, now_ms, &out[base + i])
                         : acquire_located(m, &q[i], rq[i].key, kw[i], rq[i].key_len, VERB_ACQUIRE, rq[i].cost,
                                           now_ms, &out[base + i]);
        }
    }
}

/* ---- the store ---- */

/* What the counters say, and the keys the live masks count: the counter
 * blocks and the bucket heads, never a slot. */
static void shm_stats(sluice_store *s, sluice_stats *out) {
    shm_store *m = (shm_store *)s;
    out->capacity = (int64_t)(m->g.buckets * m->g.spb);
    sluice__shm_counters_read(m, out);
    for (uint64_t b = 0; b < m->g.buckets; b++)
        out->keys += __builtin_popcountll(atomic_load_explicit(&shm_head_at(m, b)->live, memory_order_relaxed));
}

void sluice__shm_store_collide(sluice_store *s) {
    ((shm_store *)s)->collide = 1;
}

const sluice__store_ops sluice__shm_store = {
    .version = SLUICE__STORE_INTERFACE,
    .scheme = "shm",
    .params = sluice__shm_params,
    .n_params = SHM_N_PARAMS,
    .open = sluice__shm_open,
    .acquire_at = shm_acquire_at,
    .acquire_many = shm_acquire_many,
    .operate_at = shm_operate_at,
    .stats = shm_stats,
    .close = sluice__shm_close,
};
