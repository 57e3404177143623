/* floor_table.h: bench_store's honest floor of a keyed decision: the same
 * work as the memory store's FAST path, without the library: an
 * open-addressing table (linear probing, a power of two of 32-byte slots,
 * at most half full) of 16-byte keys stored inline beside a GCRA word; per
 * decision the store's own keyed hash (sluice__aeshash16_words, or
 * SipHash-1-3 where the CPU has no AES), a probe comparing the key as two
 * words, the token bucket's word step (algo/algo.h) and one
 * compare-and-swap, and the decision's fields filled as the store fills
 * them. Three ways to run it: at a reading a run (as acquire_at), reading
 * the default clock per decision (as acquire), and dependent (the next key
 * chosen through the last decision, so that at 1M keys no two decisions'
 * cache misses overlap: what one miss per decision costs). One thread.
 * Include after bench_util.h and internal.h. */
#ifndef SLUICE_BENCH_FLOOR_TABLE_H
#define SLUICE_BENCH_FLOOR_TABLE_H

typedef struct {
    uint64_t k0, k1;
    _Atomic int64_t word; /* TAT, relative to the table's epoch */
    uint64_t pad;
} ft_slot;

typedef struct {
    ft_slot *slots;
    void *mem;
    uint64_t mask;
    uint64_t aes_key[8], sip_key[2];
    int aes;
    sluice__params params;
    int64_t epoch_ms;
} floor_table;

static uint64_t ft_hash(const floor_table *t, uint64_t k0, uint64_t k1) {
    if (t->aes) return sluice__aeshash16_words(t->aes_key, 1, k0, k1, 16);
    uint64_t w[2] = {k0, k1};
    return sluice__siphash13(t->sip_key, w, 16);
}

/* The table holding keys[0..n) fresh, for the bench's policy (config c). */
static void ft_build(floor_table *t, const uint8_t (*keys)[16], uint32_t n, const sluice_config *c) {
    char err[128];
    if (sluice__params_init(c, &t->params, err, sizeof err) != 0) {
        fprintf(stderr, "bench_store: floor: %s\n", err);
        exit(1);
    }
    uint64_t slots = 2;
    while (slots < 2 * (uint64_t)n) slots *= 2;
    t->mask = slots - 1;
    t->mem = calloc(slots * sizeof(ft_slot) + 64, 1);
    if (!t->mem) exit(1);
    t->slots = (ft_slot *)(((uintptr_t)t->mem + 63) & ~(uintptr_t)63);
    t->aes = sluice__aeshash_available();
    sluice__random_words(t->aes_key, 8);
    sluice__random_words(t->sip_key, 2);
    t->epoch_ms = sluice_clock_now_ms(sluice_clock_monotonic());
    for (uint32_t i = 0; i < n; i++) {
        uint64_t k[2];
        memcpy(k, keys[i], 16);
        uint64_t j = ft_hash(t, k[0], k[1]) & t->mask;
        while (t->slots[j].k0 | t->slots[j].k1) j = (j + 1) & t->mask;
        t->slots[j].k0 = k[0];
        t->slots[j].k1 = k[1];
        atomic_init(&t->slots[j].word, INT64_MIN);
    }
}

static void ft_free(floor_table *t) {
    free(t->mem);
}

/* One decision of cost 1 on key k at ts = (reading - epoch) * r: 1 when
 * admitted (*d filled), 0 denied, -1 when the key is not there. */
static inline __attribute__((always_inline)) int ft_decide(floor_table *t, const uint8_t *key, int64_t ts,
                                                           sluice_decision *d) {
    uint64_t k[2];
    memcpy(k, key, 16);
    for (uint64_t j = ft_hash(t, k[0], k[1]) & t->mask;; j = (j + 1) & t->mask) {
        ft_slot *s = &t->slots[j];
        if (s->k0 == k[0] && s->k1 == k[1]) {
            const sluice__params *p = &t->params;
            int64_t w = atomic_load_explicit(&s->word, memory_order_acquire), b, nb, nw;
            for (;;) {
                int step = sluice__gcra_word_step(p, w, ts, 1, &b, &nb, &nw);
                if (step <= 0) {
                    if (step == 0) sluice__gcra_denied(p, b, 1, d);
                    return step == 0 ? 0 : -1;
                }
                if (atomic_compare_exchange_weak_explicit(&s->word, &w, nw, memory_order_acq_rel,
                                                          memory_order_acquire))
                    break;
            }
            sluice__gcra_allowed(p, b, nb, 0, d);
            return 1;
        }
        if (!(s->k0 | s->k1)) return -1;
    }
}

/* n decisions on keys[order[pos...]]: mode 0 at one reading, 1 reading the
 * default clock each time, 2 dependent (the next key's index goes through
 * the decision). Returns the decisions admitted (all, on this policy). */
static uint64_t ft_run(floor_table *t, const uint8_t (*keys)[16], const uint32_t *order, uint32_t *pos_io,
                       uint32_t order_mask, uint64_t n, int mode) {
    const sluice_clock *clk = sluice_clock_monotonic();
    int64_t ts = (sluice_clock_now_ms(clk) - t->epoch_ms) * t->params.r;
    uint32_t pos = *pos_io, last_ok = 1;
    uint64_t allowed = 0;
    sluice_decision d;
    for (uint64_t i = 0; i < n; i++) {
        if (mode == 1) ts = (sluice_clock_now_ms(clk) - t->epoch_ms) * t->params.r;
        /* dependent: times the last decision's outcome (1), known only once it is made */
        const uint8_t *key = keys[mode == 2 ? order[pos] * last_ok : order[pos]];
        pos = (pos + 1) & order_mask;
        int ok = ft_decide(t, key, ts, &d) == 1;
        allowed += (uint64_t)ok;
        last_ok = (uint32_t)ok;
    }
    *pos_io = pos;
    return allowed;
}

#endif /* SLUICE_BENCH_FLOOR_TABLE_H */
