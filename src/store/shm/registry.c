/* store/shm/registry.c: the configurations a shm file has met, in the file
 * (format.h: "configurations"), so that a process given a changed
 * configuration of a name can read the state a key was kept in by the old
 * one, which it was never given, and convert it (docs/semantics.md,
 * "Retune"). Each entry holds a policy's text (its name, a newline, its
 * configuration as sluice_policy_format writes it) under its fingerprint,
 * which that text hashes to. An entry is written whole before its
 * fingerprint says it is there, under the configurations' lock (a dead
 * owner's taken over: the entry it was writing has no fingerprint yet, and
 * is written again); entries are never removed. A file that has met
 * SHM_POLICY_ENTRIES configurations takes no more: a key kept by one that
 * is not there starts fresh under a changed configuration. */
#include "protocol.h"

#include <stdio.h>
#include <string.h>

static shm_policy_entry *entry_at(const shm_store *m, unsigned i) {
    return (shm_policy_entry *)(m->map + m->g.policies_off) + i;
}

void sluice__shm_registry_add(shm_store *m, uint64_t fp, const char *text, size_t len) {
    if (len > sizeof entry_at(m, 0)->text) return; /* longer than any policy's text */
    for (unsigned i = 0; i < SHM_POLICY_ENTRIES; i++) /* there already: no lock */
        if (atomic_load_explicit(&entry_at(m, i)->fp, memory_order_acquire) == fp) return;
    sluice__shm_lock(&m->hdr->policies_lock);
    for (unsigned i = 0; i < SHM_POLICY_ENTRIES; i++) {
        shm_policy_entry *e = entry_at(m, i);
        uint64_t at = atomic_load_explicit(&e->fp, memory_order_acquire);
        if (at == fp) break;
        if (at != 0) continue;
        memcpy(e->text, text, len);
        e->len = (uint32_t)len;
        atomic_store_explicit(&e->fp, fp, memory_order_release);
        break;
    }
    sluice__shm_unlock(&m->hdr->policies_lock);
}

const shm_policy *sluice__shm_registry_find(shm_store *m, uint64_t fp) {
    for (unsigned i = 0; i < SHM_POLICY_ENTRIES; i++) {
        shm_policy_entry *e = entry_at(m, i);
        if (atomic_load_explicit(&e->fp, memory_order_acquire) != fp) continue;
        /* a copy, then the text checked: nothing in the file is trusted */
        char text[sizeof e->text + 1];
        uint32_t len = e->len;
        if (len > sizeof e->text) return NULL;
        memcpy(text, e->text, len);
        text[len] = 0;
        char *nl = memchr(text, '\n', len);
        if (!nl || memchr(text, 0, len)) return NULL;
        *nl = 0;
        sluice_policy *p;
        if (sluice_policy_parse(text, nl + 1, &p, NULL, 0) != 0) return NULL;
        unsigned id;
        int rc = sluice__policy_set_add(&m->policies, &m->head, p, &id);
        sluice_policy_free(p);
        if (rc) return NULL;
        const shm_policy *sp = sluice__policy_item(&m->policies, id);
        return sp->fp == fp ? sp : NULL; /* a text that is not the fingerprint's: damage */
    }
    return NULL;
}
