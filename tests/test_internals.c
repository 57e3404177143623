/* test_internals.c: the small exact tools under the decisions: division by
 * an invariant divisor as a multiply, and SipHash against its published
 * vectors. */
#include "check.h"
#include "internal.h"

static uint64_t xorshift(uint64_t *s) {
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

TEST(divider_equals_division) {
    static const uint64_t edge[] = {1, 2, 3, 5, 7, 10, 100, 1000, 1000000, 999999937, 2592000000u,
                                    UINT64_C(1) << 32, (UINT64_C(1) << 32) + 1, (UINT64_C(1) << 63) + 1,
                                    UINT64_MAX - 1, UINT64_MAX};
    uint64_t s = 88172645463325252u;
    for (int k = 0; k < 2000000; k++) {
        uint64_t d = k < 400000 ? edge[k % 16] : xorshift(&s) >> (xorshift(&s) % 64);
        if (d == 0) d = 1;
        sluice__div v;
        sluice__div_init(&v, d);
        uint64_t n = xorshift(&s) >> (xorshift(&s) % 64);
        if (k % 7 == 0) n = UINT64_MAX - xorshift(&s) % 3;
        if (k % 11 == 0) n = d * (xorshift(&s) % 1000) - (uint64_t)(k % 2);
        if (sluice__div_q(&v, n) != n / d) {
            fprintf(stderr, "d=%llu n=%llu\n", (unsigned long long)d, (unsigned long long)n);
            CHECK(0);
            return;
        }
    }
    CHECK(1);
}

TEST(siphash_published_vectors) {
    /* SipHash-2-4, key 00..0f, messages 00..(len-1): the paper's appendix */
    uint8_t kb[16], m[64];
    for (int i = 0; i < 16; i++) kb[i] = (uint8_t)i;
    for (int i = 0; i < 64; i++) m[i] = (uint8_t)i;
    uint64_t k[2];
    memcpy(k, kb, 16);
    CHECK(sluice__siphash24(k, m, 0) == UINT64_C(0x726fdb47dd0e0e31));
    CHECK(sluice__siphash24(k, m, 15) == UINT64_C(0xa129ca6149be45e5));
    CHECK(sluice__siphash24(k, m, 63) == UINT64_C(0x958a324ceb064572));
    /* the 1-3 variant: deterministic, key-dependent, length-dependent */
    uint64_t k2[2] = {k[0] ^ 1, k[1]};
    CHECK(sluice__siphash13(k, m, 16) == sluice__siphash13(k, m, 16));
    CHECK(sluice__siphash13(k, m, 16) != sluice__siphash13(k2, m, 16));
    CHECK(sluice__siphash13(k, m, 16) != sluice__siphash13(k, m, 15));
}

TEST_MAIN(divider_equals_division, siphash_published_vectors)
