/* leaky_bucket.c: the leaky bucket as a shaper, as nginx's limit_req does it:
 * admitted work drains at R per P ms, the queue holds at most C units, and an
 * admitted request is told how long to wait (delay_ms) until the work ahead
 * of it has drained. The state and arithmetic are the token bucket's GCRA
 * (token_bucket.c): TAT is when the queue will be empty. */
#include "algo.h"

static int lb_decide(const sluice__params *p, sluice__state *s, int64_t now_ms, int64_t cost,
                     sluice_decision *d, int commit) {
    return sluice__gcra_decide(p, s, now_ms, cost, 1, d, commit);
}

const sluice__algo sluice__leaky_bucket = {
    .id = SLUICE_LEAKY_BUCKET,
    .name = "leaky-bucket",
    .flags = SLUICE__ALGO_GCRA | SLUICE__ALGO_DELAYS,
    .decide = lb_decide,
    SLUICE__GCRA_SHARED,
};
