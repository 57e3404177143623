/* shared.h: what libsluice-redis.so takes from libsluice.so. The few
 * internal functions it calls are exported (tests/test_symbols.sh lists
 * them) and are no API: the two libraries of one version go together, and
 * the store interface they share carries a version (store/store.h). */
#ifndef SLUICE_SHARED_H
#define SLUICE_SHARED_H

#include <stddef.h>

#define SLUICE__SHARED __attribute__((visibility("default")))
/* libsluice-redis.so's SONAME version, loaded on demand (store.c) */
#define SLUICE__SOVERSION "0"

/* ---- "error.c" ---- */
/* snprintf into err (when err && errlen), like a message channel. */
SLUICE__SHARED void sluice__errf(char *err, size_t errlen, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* SLUICE_SHARED_H */
