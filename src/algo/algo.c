/* algo/algo.c: the algorithms by id (sluice_config.algorithm), and what
 * the windows share. */
#include "algo.h"

static const sluice__algo *const by_id[] = {
    [SLUICE_TOKEN_BUCKET] = &sluice__token_bucket, [SLUICE_SLIDING_WINDOW] = &sluice__sliding_window,
    [SLUICE_FIXED_WINDOW] = &sluice__fixed_window, [SLUICE_LEAKY_BUCKET] = &sluice__leaky_bucket,
    [SLUICE_SLIDING_LOG] = &sluice__sliding_log,
};
#define N_IDS (sizeof by_id / sizeof by_id[0])

const sluice__algo *sluice__algo_of(sluice_algorithm a) {
    return (unsigned)a < N_IDS ? by_id[a] : NULL;
}

const sluice__algo *sluice__algo_next(const sluice__algo *a) {
    unsigned i = a ? (unsigned)a->id + 1 : 0;
    while (i < N_IDS && !by_id[i]) i++;
    return i < N_IDS ? by_id[i] : NULL;
}

/* A window's quota is its limit, its window the window in seconds. */
void sluice__window_quota(const sluice_config *c, uint64_t most, uint64_t *q, uint64_t *w_s) {
    uint64_t ms = (uint64_t)c->period_ms;
    *q = (uint64_t)c->limit < most ? (uint64_t)c->limit : most;
    *w_s = ms / 1000 + (ms % 1000 != 0);
    if (*w_s < 1) *w_s = 1;
    if (*w_s > most) *w_s = most;
}

int sluice__window_word_is_fresh(const sluice__algo *a, int64_t unit, uint64_t w, int64_t epoch_ms, int64_t now_ms) {
    if (unit < 1 || unit > SLUICE_PERIOD_MAX_MS) return -1;
    sluice__state s;
    sluice__params p = {.window_ms = unit}; /* a window's is_fresh reads the window only */
    a->word_state(unit, w, epoch_ms, &s);
    return a->is_fresh(&p, &s, now_ms);
}
