/* store/redis/slot.c: which Redis Cluster slot a key name belongs to:
 * CRC16-CCITT (XMODEM) of the name's hash tag (the bytes between the first
 * '{' and the next '}', when not empty; else the whole name), mod 16384,
 * exactly as the Redis Cluster specification defines it. */
#include "redis_internal.h"

#include <string.h>

static uint16_t crc16(const char *buf, size_t len) {
    uint16_t crc = 0;
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)((uint8_t)buf[i] << 8);
        for (int k = 0; k < 8; k++) crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned sluice__redis_slot(const char *name, size_t len) {
    const char *open = memchr(name, '{', len);
    if (open) {
        size_t at = (size_t)(open - name) + 1;
        const char *close = memchr(name + at, '}', len - at);
        if (close && close > name + at) return crc16(name + at, (size_t)(close - name - at)) & 16383;
    }
    return crc16(name, len) & 16383;
}
