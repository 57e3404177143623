/* store/redis/redis_internal.h: what the files of libsluice-redis share. */
#ifndef SLUICE_REDIS_INTERNAL_H
#define SLUICE_REDIS_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

/* "sha1.c": the SHA-1 of data, as 40 hex digits and a NUL. */
void sluice__sha1_hex(const void *data, size_t len, char out[41]);

/* "slot.c": the Redis Cluster slot of a key name (CRC16 of its hash tag). */
unsigned sluice__redis_slot(const char *name, size_t len);

/* decide.lua, embedded at build time (cmake/embed.cmake) */
extern const char sluice__redis_decide_lua[];

#endif
