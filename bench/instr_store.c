/* instr_store.c: a fixed workload for counting instructions, not time: N
 * decisions (or peeks, refunds) on 1000 held 16-byte keys of a store, at
 * readings advancing 1 ms every 1000 decisions, keys taken in a stride
 * order. Run under callgrind twice and take the difference, so set-up
 * cancels out:
 *   for n in 10000 110000; do valgrind --tool=callgrind \
 *     --callgrind-out-file=/dev/null ./build/instr_store memory: $n acquire; done
 *   instructions per decision = (I(110000) - I(10000)) / 100000
 * Usage: instr_store URL N [acquire|peek|refund] [SPEC]. Not part of
 * `make bench` (it prints a count of admissions only). */
#include "sluice.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { N_KEYS = 1000 };

int main(int argc, char **argv) {
    if (argc < 3) {
        fprintf(stderr, "usage: instr_store URL N [acquire|peek|refund] [SPEC]\n");
        return 2;
    }
    const char *verb = argc > 3 ? argv[3] : "acquire";
    const char *spec = argc > 4 ? argv[4] : "token-bucket capacity=1000000000 rate=1000000000/s";
    long n = atol(argv[2]);
    int v = !strcmp(verb, "peek") ? 1 : !strcmp(verb, "refund") ? 2 : !strcmp(verb, "acquire") ? 0 : -1;
    sluice_store *s;
    sluice_policy *p;
    char err[256];
    if (v < 0 || n < 0) {
        fprintf(stderr, "instr_store: bad verb or N\n");
        return 2;
    }
    if (sluice_store_open_err(argv[1], NULL, &s, err, sizeof err)) {
        fprintf(stderr, "instr_store: %s\n", err);
        return 2;
    }
    if (sluice_policy_parse("instr", spec, &p, err, sizeof err)) {
        fprintf(stderr, "instr_store: %s\n", err);
        return 2;
    }
    static char keys[N_KEYS][16];
    sluice_decision d;
    for (int i = 0; i < N_KEYS; i++) {
        snprintf(keys[i], sizeof keys[i], "key-%08d", i);
        if (sluice_store_acquire_at(s, p, keys[i], 16, 1, 1, &d)) {
            fprintf(stderr, "instr_store: %s\n", sluice_store_errmsg(s));
            return 2;
        }
    }
    long allowed = 0;
    for (long i = 0; i < n; i++) {
        const char *k = keys[(i * 7919) % N_KEYS];
        int64_t t = 2 + i / N_KEYS;
        if (v == 1) sluice_store_peek_at(s, p, k, 16, 1, t, &d);
        else if (v == 2) sluice_store_refund_at(s, p, k, 16, 1, t, &d);
        else sluice_store_acquire_at(s, p, k, 16, 1, t, &d);
        allowed += d.allowed;
    }
    printf("%ld\n", allowed);
    sluice_policy_free(p);
    sluice_store_close(s);
    return 0;
}
