/* hash.c: the keyed hashes of stores, and their random keys: SipHash-1-3
 * for any key, and three AES rounds for keys of up to 16 bytes where the
 * CPU has AES instructions (below). With a random per-store key, an
 * attacker who does not know it cannot choose keys that collide, so a
 * flood of chosen keys cannot turn the table's O(1) into O(n) (hash
 * flooding). SipHash-1-3 is the variant Rust's HashMap and Python use for
 * this. The round count is a parameter so the test can check SipHash-2-4's
 * published vectors. */
#include "internal.h"

#include <string.h>
#include <sys/random.h>

/* n random words for a hash's key: from the kernel's entropy; without
 * one, weaker, from the clock and addresses (splitmix64). */
void sluice__random_words(uint64_t *w, size_t n) {
    if (getrandom(w, n * sizeof w[0], 0) == (ssize_t)(n * sizeof w[0])) return;
    uint64_t x = (uint64_t)sluice_clock_now_ms(NULL) ^ (uint64_t)(uintptr_t)w ^
                 (uint64_t)(uintptr_t)&sluice__random_words << 17;
    for (size_t i = 0; i < n; i++) {
        uint64_t z = (x += UINT64_C(0x9e3779b97f4a7c15));
        z = (z ^ (z >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
        z = (z ^ (z >> 27)) * UINT64_C(0x94d049bb133111eb);
        w[i] = z ^ (z >> 31);
    }
}

#define ROTL(x, b) (uint64_t)(((x) << (b)) | ((x) >> (64 - (b))))

#define SIPROUND                                                                                   \
    do {                                                                                           \
        v0 += v1;                                                                                  \
        v1 = ROTL(v1, 13);                                                                         \
        v1 ^= v0;                                                                                  \
        v0 = ROTL(v0, 32);                                                                         \
        v2 += v3;                                                                                  \
        v3 = ROTL(v3, 16);                                                                         \
        v3 ^= v2;                                                                                  \
        v0 += v3;                                                                                  \
        v3 = ROTL(v3, 21);                                                                         \
        v3 ^= v0;                                                                                  \
        v2 += v1;                                                                                  \
        v1 = ROTL(v1, 17);                                                                         \
        v1 ^= v2;                                                                                  \
        v2 = ROTL(v2, 32);                                                                         \
    } while (0)

static inline uint64_t load64_le(const uint8_t *p) {
    uint64_t v;
    memcpy(&v, p, 8);
#if __BYTE_ORDER__ == __ORDER_BIG_ENDIAN__
    v = __builtin_bswap64(v);
#endif
    return v;
}

static inline __attribute__((always_inline)) uint64_t
siphash(const uint64_t key[2], const void *data, size_t len, int c_rounds, int d_rounds) {
    const uint8_t *in = data;
    uint64_t v0 = UINT64_C(0x736f6d6570736575) ^ key[0];
    uint64_t v1 = UINT64_C(0x646f72616e646f6d) ^ key[1];
    uint64_t v2 = UINT64_C(0x6c7967656e657261) ^ key[0];
    uint64_t v3 = UINT64_C(0x7465646279746573) ^ key[1];
    const uint8_t *end = in + len - (len % 8);
    for (; in != end; in += 8) {
        uint64_t m = load64_le(in);
        v3 ^= m;
        for (int i = 0; i < c_rounds; i++) SIPROUND;
        v0 ^= m;
    }
    uint64_t b = (uint64_t)len << 56;
    switch (len & 7) {
    case 7: b |= (uint64_t)in[6] << 48; /* fall through */
    case 6: b |= (uint64_t)in[5] << 40; /* fall through */
    case 5: b |= (uint64_t)in[4] << 32; /* fall through */
    case 4: b |= (uint64_t)in[3] << 24; /* fall through */
    case 3: b |= (uint64_t)in[2] << 16; /* fall through */
    case 2: b |= (uint64_t)in[1] << 8;  /* fall through */
    case 1: b |= (uint64_t)in[0]; break;
    case 0: break;
    }
    v3 ^= b;
    for (int i = 0; i < c_rounds; i++) SIPROUND;
    v0 ^= b;
    v2 ^= 0xff;
    for (int i = 0; i < d_rounds; i++) SIPROUND;
    return v0 ^ v1 ^ v2 ^ v3;
}

uint64_t sluice__siphash13(const uint64_t key[2], const void *data, size_t len) {
    return siphash(key, data, len, 1, 3);
}

uint64_t sluice__siphash24(const uint64_t key[2], const void *data, size_t len) {
    return siphash(key, data, len, 2, 4);
}

/* The short-key hash: keys of 1..16 bytes, zero-padded to one block, go
 * through three AES rounds under four random 128-bit round keys:
 *   x = block ^ k0 ^ (tweak << 8 | len), then x = aesenc(x, k1), aesenc(x, k2),
 *   x = aesenc(x, k3), h = low 64 bits ^ high 64 bits.
 * After two rounds every output byte depends on every input byte; with
 * secret keys, chosen keys cannot be made to collide (the construction Go's
 * runtime uses for its maps, where the CPU has AES). About 2 ns against
 * SipHash-1-3's 9 on a 16-byte key. Longer keys stay with SipHash. */
#if defined(__x86_64__)
#include <immintrin.h>

int sluice__aeshash_available(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("aes");
}

__attribute__((target("aes"))) uint64_t sluice__aeshash16_words(const uint64_t key[8], uint64_t tweak,
                                                               uint64_t w0, uint64_t w1, size_t len) {
    __m128i x = _mm_set_epi64x((long long)w1, (long long)w0);
    x = _mm_xor_si128(x, _mm_xor_si128(_mm_loadu_si128((const __m128i *)(const void *)key),
                                       _mm_cvtsi64_si128((long long)(tweak << 8 | len))));
    x = _mm_aesenc_si128(x, _mm_loadu_si128((const __m128i *)(const void *)(key + 2)));
    x = _mm_aesenc_si128(x, _mm_loadu_si128((const __m128i *)(const void *)(key + 4)));
    x = _mm_aesenc_si128(x, _mm_loadu_si128((const __m128i *)(const void *)(key + 6)));
    return (uint64_t)_mm_cvtsi128_si64(x) ^ (uint64_t)_mm_cvtsi128_si64(_mm_unpackhi_epi64(x, x));
}
#else
int sluice__aeshash_available(void) {
    return 0;
}

uint64_t sluice__aeshash16_words(const uint64_t key[8], uint64_t tweak, uint64_t w0, uint64_t w1,
                                 size_t len) {
    (void)tweak, (void)w0, (void)w1, (void)len;
    return key[0]; /* never called: sluice__aeshash_available() is 0 */
}
#endif
