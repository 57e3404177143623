/* store/shm/state.c: what a process knows of a policy in a shm file
 * (shm_policy): its fingerprint (and its text in the file's
 * configurations, registry.c), where each part's state lies in a state
 * copy, whether its keys are FAST (one word) and whether their states need
 * an overflow block; and a state copy's bytes to and from the parts'
 * states, each part by its algorithm's byte layout (src/algo/). */
#define _GNU_SOURCE
#include "protocol.h"

#include <stdio.h>
#include <string.h>

int sluice__shm_policy_init(void *item, void *ctx) {
    shm_policy *sp = item;
    shm_store *m = ctx;
    const sluice_policy *p = &sp->policy;
    char text[SLUICE_POLICY_MAX_PARTS * 80 + SLUICE_POLICY_NAME_MAX + 2];
    int n = snprintf(text, sizeof text, "%s\n", p->name);
    sluice_policy_format(p, text + n, sizeof text - (size_t)n);
    /* the name's hash on top (every configuration of a name finds a key
     * in the same place: the key's hash takes it), the whole text's below
     * (never 0: 0 is "free") */
    uint64_t zero[2] = {0, 0};
    uint64_t name_hash = sluice__siphash24(zero, p->name, strlen(p->name));
    sp->tweak = (uint32_t)(name_hash >> 32);
    sp->fp = (uint64_t)sp->tweak << 32 | (uint32_t)sluice__siphash24(zero, text, strlen(text)) | 1;
    uint64_t at = 0;
    for (size_t i = 0; i < p->n_parts && at < (UINT64_C(1) << 40); i++) {
        sp->offset[i] = (uint32_t)at;
        at += shm_align(p->algo[i]->layout_bytes(&p->params[i]), 8); /* too big: refused below */
    }
    const sluice__algo *a = p->algo[0];
    sp->fast = p->n_parts == 1 && !p->n_shadow && a->word_fits && a->word_fits(&p->params[0]);
    sp->gcra = (a->flags & SLUICE__ALGO_GCRA) != 0;
    sp->shaper = (a->flags & SLUICE__ALGO_DELAYS) != 0;
    sp->fast_unit = sp->fast ? a->word_unit(&p->params[0]) : 0;
    sp->fast_fresh = a->word_fresh;
    sp->block_class = 0;
    if (at < (UINT64_C(1) << 40)) {
        sp->bytes = (uint32_t)at;
        sp->words = (uint32_t)(at / 8);
        if (at > m->g.state_bytes) sp->block_class = sluice__shm_block_class(m, sp->words);
    }
    if (at <= m->g.state_bytes || sp->block_class) { /* taken: the file keeps its text */
        sluice__shm_registry_add(m, sp->fp, text, strlen(text));
        return 0;
    }
    uint64_t area = SHM_OVERFLOW_HEAD + (UINT64_C(1) << 12);
    while (area - SHM_OVERFLOW_HEAD < SHM_BLOCK_HEAD + 4 * at) area = SHM_OVERFLOW_HEAD + 2 * (area - SHM_OVERFLOW_HEAD);
    sluice__store_errf(&m->head, "policy %s needs %llu bytes of state per key: more than shm:%s holds "
                                 "(state_bytes=%u in a slot, overflow_bytes=%llu beside; a file made with "
                                 "?overflow_bytes=%llu would hold it)",
                       p->name, (unsigned long long)at, m->path, m->g.state_bytes,
                       (unsigned long long)m->g.overflow_bytes, (unsigned long long)area);
    return SLUICE_EINVAL;
}

/* ---- a key's state: the policy's parts in a state copy ---- */

/* A state copy's words -> the algorithms' states (a state that grows keeps
 * its entries in buf): 0, or DAMAGED when a state is not one the algorithm
 * ever writes. */
int sluice__shm_load_states(const shm_policy *sp, uint8_t *copy, sluice__state *st) {
    const sluice_policy *p = &sp->policy;
    for (size_t i = 0; i < p->n_parts; i++)
        if (p->algo[i]->layout_read(&p->params[i], copy + sp->offset[i], &st[i])) return DAMAGED;
    return 0;
}

void sluice__shm_store_states(const shm_policy *sp, uint8_t *copy, const sluice__state *st) {
    const sluice_policy *p = &sp->policy;
    for (size_t i = 0; i < p->n_parts; i++) p->algo[i]->layout_write(&p->params[i], &st[i], copy + sp->offset[i]);
}

void sluice__shm_fresh_states(const shm_policy *sp, uint8_t *copy) {
    const sluice_policy *p = &sp->policy;
    memset(copy, 0, sp->bytes);
    for (size_t i = 0; i < p->n_parts; i++) p->algo[i]->layout_init(&p->params[i], copy + sp->offset[i]);
}
