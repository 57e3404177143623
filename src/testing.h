/* testing.h: the hooks the tests use to see inside (each in the file
 * named above it). None is used in real operation. */
#ifndef SLUICE_TESTING_H
#define SLUICE_TESTING_H

#include "sluice.h"

#include <stddef.h>

/* ---- "clock.c" ---- */
/* Test hook: makes the monotonic clock read the named source from now on
 * ("tsc", "CLOCK_MONOTONIC_COARSE", "CLOCK_MONOTONIC", as
 * sluice_clock_source() names them), or choose again at its next reading
 * (NULL: the environment is read again). "tsc" needs only an invariant TSC
 * (the kernel may keep time with another clocksource). SLUICE_EINVAL for
 * an unknown name or a source this machine lacks; then nothing changes. */
int sluice__clock_force_source(const char *name);

/* ---- "limiter.c" ---- */
/* How often callers of l met each other: CAS retries plus lock waits. Tests
 * use it to show that a concurrency test really raced. */
unsigned long sluice__limiter_contention(const sluice_limiter *l);
/* Part i's state at now_ms, as its algorithm's peek() reports it. */
void sluice__limiter_peek_part(sluice_limiter *l, size_t i, int64_t now_ms, sluice_decision *d);

/* Test hook: from now on every key of s hashes alike (decisions stay right,
 * only slower). */
void sluice__memory_store_collide(sluice_store *s);
/* Test hook (store/shm/shm.c): when set, called at each step of a
 * lock-free admission (1: its change installed, 2: its new state written,
 * 3: the change settled, before the key's version moves on), of adding a
 * key (4: its state written, before it is live; 7: its slot chosen and its
 * overflow block given, before the key is written), of moving a FAST key to
 * the general form (5: its state written, before the switch), and of a
 * FAST denial (6: decided, before the control word is read again to vouch
 * for it), so that a test can stop or kill the process there, or change
 * the slot under it. NULL in real use. */
extern void (*sluice__shm_step_hook)(int step);
/* Test hook (store/shm/shm.c): from now on every key this handle of s looks up or
 * adds hashes alike (one bucket, one tag), so that only the key comparison
 * tells keys apart. Only on a new file: keys added before are not found. */
void sluice__shm_store_collide(sluice_store *s);
/* Test hook: s's keys hash under a key made from seed, not a random one
 * (two stores of one seed then keep every key in the same place, so that
 * they forget and evict alike). Only on a new store: keys added before are
 * not found. */
void sluice__memory_store_seed(sluice_store *s, uint64_t seed);
/* Test hook: whether s holds state for (p, key) now. */
int sluice__memory_store_holds(sluice_store *s, const sluice_policy *p, const void *key, size_t len);

/* ---- "store/kinds.c" ---- */
struct sluice__store_ops;
/* Test hook: opens url as a store of kind ops, a kind the tests make (a
 * fake remote store: tests/fake_remote.h), as sluice_store_open_err opens
 * the kinds it knows: options, URL parameters, messages alike. The URL's
 * scheme must be ops->scheme. */
int sluice__store_open_kind(const struct sluice__store_ops *ops, const char *url, const sluice_store_options *opts,
                            sluice_store **out, char *err, size_t errlen);

#endif /* SLUICE_TESTING_H */
