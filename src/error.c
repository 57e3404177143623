/* error.c: error codes and messages, and the library's version.
 *
 * The codes, their names and their messages all come from the one list
 * SLUICE_ERRNO_MAP in sluice.h. The library never prints: detail goes into
 * caller-supplied buffers through sluice__errf(). */
#include "internal.h"

#include <stdarg.h>
#include <stdio.h>

const char *sluice_strerror(int code) {
    switch (code) {
#define SLUICE__STRERROR_CASE(name, value, msg) \
    case value: return msg;
        SLUICE_ERRNO_MAP(SLUICE__STRERROR_CASE)
#undef SLUICE__STRERROR_CASE
    }
    return "unknown error";
}

const char *sluice_err_name(int code) {
    switch (code) {
#define SLUICE__ERR_NAME_CASE(name, value, msg) \
    case value: return "SLUICE_" #name;
        SLUICE_ERRNO_MAP(SLUICE__ERR_NAME_CASE)
#undef SLUICE__ERR_NAME_CASE
    }
    return "SLUICE_UNKNOWN";
}

const char *sluice_version(void) { return SLUICE_VERSION_STRING; }

void sluice__errf(char *err, size_t errlen, const char *fmt, ...) {
    if (err == NULL || errlen == 0) return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errlen, fmt, ap);
    va_end(ap);
}
