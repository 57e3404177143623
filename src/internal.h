/* internal.h: what the files of libsluice share and users never see, by
 * concern (each header names the files that define what it declares):
 *
 *   algo/algo.h     the algorithm interface, the parameters and states it
 *                   works on, the buckets' GCRA arithmetic
 *   policy.h        configurations (validation, text form) and policies
 *   store/store.h   the store interface, URL options, the policy registry
 *   store/deny.h    a remote store's cache of denials
 *   lock.h          the small lock, a thread's stripe of counters
 *   hash.h          keyed hashes of keys
 *   clock.h         readings and waits, the TSC clock
 *   shared.h        what libsluice-redis takes from libsluice
 *   testing.h       the tests' hooks
 *
 * Internal non-static names start with sluice__. */
#ifndef SLUICE_INTERNAL_H
#define SLUICE_INTERNAL_H

#include "sluice.h"

#include "algo/algo.h"
#include "clock.h"
#include "hash.h"
#include "lock.h"
#include "policy.h"
#include "shared.h"
#include "store/deny.h"
#include "store/store.h"
#include "testing.h"

#endif /* SLUICE_INTERNAL_H */
