/* clock.h: readings and waits (clock.c). */
#ifndef SLUICE_CLOCK_H
#define SLUICE_CLOCK_H

#include "sluice.h"

/* ---- "clock.c" ---- */
/* The blocking wait of limiters and stores: attempt() decides at a reading;
 * on a denial, sleep on c for the retry time, never past timeout_ms, and
 * give up at once (SLUICE_ETIMEDOUT, nothing consumed) when the retry time
 * is beyond it. */
int sluice__wait(const sluice_clock *c, int64_t timeout_ms,
                 int (*attempt)(void *ctx, int64_t now_ms, sluice_decision *d), void *ctx,
                 sluice_decision *out);
/* A reading checked against the accepted range. */
static inline int sluice__time_ok(int64_t now_ms) {
    return now_ms >= SLUICE_TIME_MIN_MS && now_ms <= SLUICE_TIME_MAX_MS;
}

#endif /* SLUICE_CLOCK_H */
