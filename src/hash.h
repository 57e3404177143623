/* hash.h: keyed hashes of keys and random words for their keys (hash.c),
 * and a short key as two words, inline. */
#ifndef SLUICE_HASH_H
#define SLUICE_HASH_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "shared.h"

/* ---- "hash.c" ---- */
/* SipHash of data under the 128-bit key: 1-3 for stores, 2-4 for tests
 * against the published vectors. */
uint64_t sluice__siphash13(const uint64_t key[2], const void *data, size_t len);
SLUICE__SHARED uint64_t sluice__siphash24(const uint64_t key[2], const void *data, size_t len);
/* A keyed hash of keys of 1..16 bytes on three AES rounds (hash.c), for
 * CPUs with AES instructions: sluice__aeshash_available(). key: 8 random
 * words (four 128-bit round keys); tweak < 2^56 tells uses apart. The key
 * comes as its two words (sluice__key_words), in registers: no copy, and
 * no load of words just stored. */
int sluice__aeshash_available(void);
/* n random words for a hash's key (hash.c): the kernel's entropy, or a
 * weaker fallback from the clock when it has none. */
void sluice__random_words(uint64_t *w, size_t n);
uint64_t sluice__aeshash16_words(const uint64_t key[8], uint64_t tweak, uint64_t w0, uint64_t w1,
                                 size_t len);

/* A key of 1..16 bytes zero-padded to 16, as the two words a memcpy into a
 * zeroed 16-byte block gives (w[0]: bytes 0..7), read with a few loads of
 * the key's own bytes: no call to memcpy, and no store that a 16-byte load
 * of the block would then wait for. */
static inline void sluice__key_words(const void *key, size_t len, uint64_t w[2]) {
    const uint8_t *k = key;
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    uint64_t lo = 0, hi = 0;
    if (len >= 8) {
        memcpy(&lo, k, 8);
        if (len > 8) { /* bytes 8..len-1: the top of the last 8 bytes */
            memcpy(&hi, k + len - 8, 8);
            hi >>= 8 * (16 - len);
        }
    } else if (len >= 4) { /* two overlapping 4-byte reads */
        uint32_t a, b;
        memcpy(&a, k, 4);
        memcpy(&b, k + len - 4, 4);
        lo = a | (uint64_t)b << 8 * (len - 4);
    } else if (len > 0) { /* bytes 0, len/2 and len-1 cover all of 1..3 */
        lo = k[0] | (uint64_t)k[len / 2] << 8 * (len / 2) | (uint64_t)k[len - 1] << 8 * (len - 1);
    }
    w[0] = lo;
    w[1] = hi;
#else
    uint8_t block[16] = {0};
    memcpy(block, k, len);
    memcpy(w, block, 16);
#endif
}

#endif /* SLUICE_HASH_H */
