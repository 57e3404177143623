/* test_internals.c: the small exact tools under the decisions: division by
 * an invariant divisor as a multiply, SipHash against its published
 * vectors, and the AES short-key hash against a model built from FIPS-197
 * (itself checked against the standard's AES-128 example); and a
 * composite's denial, which never asks for memory. */
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

/* ---- a software AES round, from FIPS-197 ---- */

static uint8_t sbox[256];

static uint8_t gmul(uint8_t a, uint8_t b) {
    uint8_t p = 0;
    for (int i = 0; i < 8; i++, b >>= 1) {
        if (b & 1) p ^= a;
        a = (uint8_t)((a << 1) ^ (a & 0x80 ? 0x1b : 0));
    }
    return p;
}

static void sbox_init(void) { /* inverse in GF(2^8), then the affine map */
    for (int x = 0; x < 256; x++) {
        uint8_t inv = 0;
        for (int y = 1; y < 256 && x; y++)
            if (gmul((uint8_t)x, (uint8_t)y) == 1) inv = (uint8_t)y;
        uint8_t s = inv;
        for (int r = 1; r <= 4; r++) s ^= (uint8_t)((inv << r) | (inv >> (8 - r)));
        sbox[x] = s ^ 0x63;
    }
}

/* One round on a column-major state (byte i: row i % 4, column i / 4):
 * SubBytes, ShiftRows, MixColumns (unless last), AddRoundKey: AESENC. */
static void aes_round(uint8_t st[16], const uint8_t rk[16], int last) {
    uint8_t t[16];
    for (int c = 0; c < 4; c++)
        for (int r = 0; r < 4; r++) t[r + 4 * c] = sbox[st[r + 4 * ((c + r) % 4)]];
    for (int c = 0; c < 4 && !last; c++) {
        uint8_t *col = t + 4 * c, a0 = col[0], a1 = col[1], a2 = col[2], a3 = col[3];
        col[0] = gmul(a0, 2) ^ gmul(a1, 3) ^ a2 ^ a3;
        col[1] = a0 ^ gmul(a1, 2) ^ gmul(a2, 3) ^ a3;
        col[2] = a0 ^ a1 ^ gmul(a2, 2) ^ gmul(a3, 3);
        col[3] = gmul(a0, 3) ^ a1 ^ a2 ^ gmul(a3, 2);
    }
    for (int i = 0; i < 16; i++) st[i] = t[i] ^ rk[i];
}

static void aes128_encrypt(const uint8_t key[16], uint8_t block[16]) {
    uint8_t rk[11][16], rcon = 1;
    memcpy(rk[0], key, 16);
    for (int i = 1; i <= 10; i++) {
        const uint8_t *p = rk[i - 1];
        uint8_t w[4] = {(uint8_t)(sbox[p[13]] ^ rcon), sbox[p[14]], sbox[p[15]], sbox[p[12]]};
        for (int j = 0; j < 16; j++) rk[i][j] = p[j] ^ (j < 4 ? w[j] : rk[i][j - 4]);
        rcon = gmul(rcon, 2);
    }
    for (int i = 0; i < 16; i++) block[i] ^= rk[0][i];
    for (int i = 1; i <= 10; i++) aes_round(block, rk[i], i == 10);
}

/* The construction of src/hash.c on the model. */
static uint64_t aeshash_model(const uint64_t key[8], uint64_t tweak, const void *data, size_t len) {
    uint8_t st[16] = {0}, k[64];
    memcpy(st, data, len);
    memcpy(k, key, 64);
    uint64_t lo;
    memcpy(&lo, st, 8);
    lo ^= tweak << 8 | len;
    memcpy(st, &lo, 8);
    for (int i = 0; i < 16; i++) st[i] ^= k[i];
    for (int r = 1; r <= 3; r++) aes_round(st, k + 16 * r, 0);
    uint64_t a, b;
    memcpy(&a, st, 8);
    memcpy(&b, st + 8, 8);
    return a ^ b;
}

/* A short key as two words equals a zero-padded copy, for every length,
 * reading nothing past the key (each key ends its own allocation, so ASan
 * would catch a read beyond it). */
TEST(key_words_equal_padded_copy) {
    uint64_t s = 11;
    for (size_t len = 1; len <= 16; len++) {
        for (int n = 0; n < 200; n++) {
            uint8_t *key = malloc(len), block[16] = {0};
            for (size_t i = 0; i < len; i++) key[i] = (uint8_t)xorshift(&s);
            memcpy(block, key, len);
            uint64_t want[2], got[2];
            memcpy(want, block, 16);
            sluice__key_words(key, len, got);
            free(key);
            if (got[0] != want[0] || got[1] != want[1]) {
                printf("     length %zu: %016llx %016llx, want %016llx %016llx\n", len,
                       (unsigned long long)got[0], (unsigned long long)got[1],
                       (unsigned long long)want[0], (unsigned long long)want[1]);
                CHECK(0);
                return;
            }
        }
    }
    CHECK(1);
}

TEST(aes_model_is_fips197) {
    sbox_init();
    CHECK_EQ(sbox[0x00], 0x63);
    CHECK_EQ(sbox[0x53], 0xed);
    uint8_t key[16], block[16], want[16] = {0x69, 0xc4, 0xe0, 0xd8, 0x6a, 0x7b, 0x04, 0x30,
                                             0xd8, 0xcd, 0xb7, 0x80, 0x70, 0xb4, 0xc5, 0x5a};
    for (int i = 0; i < 16; i++) key[i] = (uint8_t)i, block[i] = (uint8_t)(i * 0x11);
    aes128_encrypt(key, block); /* FIPS-197 appendix C.1 */
    CHECK(memcmp(block, want, 16) == 0);
}

/* The hash of a key's bytes, as the stores take it: the key in words. */
static uint64_t aeshash16(const uint64_t key[8], uint64_t tweak, const void *data, size_t len) {
    uint64_t w[2];
    sluice__key_words(data, len, w);
    return sluice__aeshash16_words(key, tweak, w[0], w[1], len);
}

TEST(aeshash_equals_model_and_mixes) {
    if (!sluice__aeshash_available()) {
        printf("     (this CPU has no AES instructions: the memory store uses SipHash)\n");
        CHECK(1);
        return;
    }
    sbox_init();
    uint64_t s = 7, key[8];
    uint8_t data[16];
    for (int n = 0; n < 20000; n++) {
        for (int i = 0; i < 8; i++) key[i] = xorshift(&s);
        for (int i = 0; i < 16; i++) data[i] = (uint8_t)xorshift(&s);
        size_t len = 1 + (size_t)(xorshift(&s) % 16);
        uint64_t tweak = xorshift(&s) >> 8;
        if (aeshash16(key, tweak, data, len) != aeshash_model(key, tweak, data, len)) {
            CHECK(0);
            return;
        }
    }
    /* avalanche: one input bit flipped (key byte, length, tweak or round
     * key) flips about half of the 64 output bits, whichever bit it is */
    long flips = 0, trials = 0;
    int worst_lo = 64, worst_hi = 0;
    for (int n = 0; n < 2000; n++) {
        for (int i = 0; i < 8; i++) key[i] = xorshift(&s);
        for (int i = 0; i < 16; i++) data[i] = (uint8_t)xorshift(&s);
        uint64_t h = aeshash16(key, 1, data, 16);
        for (int bit = 0; bit < 128; bit++) {
            data[bit / 8] ^= (uint8_t)(1u << bit % 8);
            int f = __builtin_popcountll(h ^ aeshash16(key, 1, data, 16));
            data[bit / 8] ^= (uint8_t)(1u << bit % 8);
            flips += f, trials++;
            if (f < worst_lo) worst_lo = f;
            if (f > worst_hi) worst_hi = f;
        }
        CHECK(h != aeshash16(key, 2, data, 16)); /* another policy */
        CHECK(h != aeshash16(key, 1, data, 15)); /* another length */
        key[3] ^= 1;
        CHECK(h != aeshash16(key, 1, data, 16)); /* another store */
    }
    double mean = (double)flips / (double)trials;
    printf("     avalanche: %.2f of 64 bits flip on average (fewest %d, most %d)\n", mean, worst_lo, worst_hi);
    CHECK(mean > 31.5 && mean < 32.5);
    CHECK(worst_lo >= 8 && worst_hi <= 56);
}

/* Admits one request a ms from t = 0 until the sliding log's ring is full
 * (grown as needed); returns how many, and frees nothing (the caller does). */
static int64_t fill_log_ring(const sluice_policy *p, sluice__state *st) {
    sluice_decision d;
    for (size_t i = 0; i < p->n_parts; i++) p->algo[i]->init(&p->params[i], &st[i]);
    int64_t t = 0;
    do {
        if (sluice__policy_decide_grow(p, st, t, 1, &d) != 0 || !d.allowed) return -1;
        t++;
    } while (st[0].log.len < st[0].log.cap);
    return t;
}

/* A composite whose sliding log would need a bigger ring to admit, while
 * another part denies: the answer is the denial, with no call for memory
 * (which could fail, and turn a denial into SLUICE_ENOMEM). */
TEST(composite_denial_needs_no_room) {
    sluice_policy *probe = NULL, *p = NULL;
    sluice_config log = sluice_sliding_log(1000000, 3600000);
    CHECK_EQ(sluice_policy_new("probe", &log, 1, &probe), 0);
    sluice__state st[2];
    int64_t k = fill_log_ring(probe, st); /* the ring is full after k admissions */
    CHECK(k > 0);
    sluice__sliding_log.release(&st[0]);
    sluice_config parts[2] = {log, sluice_fixed_window(k, 3600000)};
    CHECK_EQ(sluice_policy_new("both", parts, 2, &p), 0);
    CHECK_EQ(fill_log_ring(p, st), k); /* the same ring, and the window full */
    sluice_decision d;
    size_t g = 99;
    CHECK_EQ(sluice__policy_decide(p, st, k, 1, &d, &g), 0);
    CHECK(!d.allowed);
    CHECK_EQ(d.part, 1);
    CHECK_EQ(g, 99); /* no part was asked to grow */
    sluice__sliding_log.release(&st[0]);
    sluice_policy_free(p);
    sluice_policy_free(probe);
}

TEST_MAIN(divider_equals_division, siphash_published_vectors, key_words_equal_padded_copy,
          aes_model_is_fips197, aeshash_equals_model_and_mixes, composite_denial_needs_no_room)
