// CPU tests of the TwELL layout (twell/format.h): packer, unpacker, validator, overflow detection.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "rng.h"
#include "test_util.h"
#include "twell/format.h"

static uint64_t g_seed;

// Random dense matrix with per-row density p[r] (values in (-2, 2), rounded through bf16 or not).
static float *random_dense(Rng *rng, int M, int F, const double *p) {
    float *a = (float *)malloc(sizeof(float) * (size_t)M * F);
    for (int r = 0; r < M; r++)
        for (int j = 0; j < F; j++) {
            double mag = 0.01 + 2.0 * rng_uniform(rng);
            a[(size_t)r * F + j] = (float)(rng_uniform(rng) < p[r] ? mag : -mag);
        }
    return a;
}

static void roundtrip(int M, int F, int C, const double *p) {
    Rng rng;
    rng_seed(&rng, g_seed + (uint64_t)M * 31 + (uint64_t)F * 7 + (uint64_t)C);
    TwellShape s;
    assert_int_equal(twell_shape_init(&s, M, F, C), TWELL_OK);
    float *a = random_dense(&rng, M, F, p);
    uint32_t *tw = (uint32_t *)malloc(sizeof(uint32_t) * (size_t)M * s.row_words);
    int *ovf = (int *)malloc(sizeof(int) * (size_t)(M > 0 ? M : 1));
    uint64_t nnz = 0;
    int n_ovf = twell_pack_cpu(&s, a, (size_t)F, tw, ovf, &nnz);
    char err[256] = {0};
    if (twell_validate_cpu(&s, tw, err, sizeof err) != 0) fail_msg("validate: %s", err);

    // Independent expectation: per tile count of bf16-rounded positives.
    uint64_t want_nnz = 0;
    int want_ovf = 0;
    for (int r = 0; r < M; r++) {
        int row_ovf = 0;
        for (int t = 0; t < s.tiles; t++) {
            int cnt = 0;
            for (int j = 0; j < TWELL_TILE; j++)
                if (twell_bf16_to_f32(twell_f32_to_bf16(a[(size_t)r * F + t * TWELL_TILE + j])) > 0) cnt++;
            assert_int_equal(tw[(size_t)r * s.row_words + (size_t)t * s.words], cnt);
            want_nnz += cnt;
            if (cnt > s.slots) row_ovf = 1;
        }
        if (row_ovf) { assert_true(want_ovf < n_ovf); assert_int_equal(ovf[want_ovf], r); want_ovf++; }
        assert_int_equal(twell_row_overflows(&s, tw, r), row_ovf);
    }
    assert_int_equal(n_ovf, want_ovf);
    assert_true(nnz == want_nnz);

    float *d = (float *)malloc(sizeof(float) * (size_t)M * F);
    uint8_t *inc = (uint8_t *)malloc((size_t)(M > 0 ? M : 1));
    assert_int_equal(twell_unpack_cpu(&s, tw, d, inc), n_ovf);
    for (int r = 0; r < M; r++) {
        if (inc[r]) continue;  // incomplete rows are checked below
        for (int j = 0; j < F; j++) {
            float v = twell_bf16_to_f32(twell_f32_to_bf16(a[(size_t)r * F + j]));
            float want = v > 0 ? v : 0.0f;
            if (d[(size_t)r * F + j] != want) fail_msg("row %d col %d: got %g want %g", r, j, d[(size_t)r * F + j], want);
        }
    }
    // Overflow rows keep the first S entries of each tile in column order.
    for (int i = 0; i < n_ovf; i++) {
        int r = ovf[i];
        assert_int_equal(inc[r], 1);
        for (int t = 0; t < s.tiles; t++) {
            int kept = 0;
            for (int j = 0; j < TWELL_TILE; j++) {
                float v = twell_bf16_to_f32(twell_f32_to_bf16(a[(size_t)r * F + t * TWELL_TILE + j]));
                float got = d[(size_t)r * F + t * TWELL_TILE + j];
                if (v > 0 && kept < s.slots) { assert_true(got == v); kept++; }
                else assert_true(got == 0.0f);
            }
        }
    }
    free(a); free(tw); free(ovf); free(d); free(inc);
}

static void test_roundtrip_densities(void **state) {
    (void)state;
    int M = 64;
    double p[64];
    const double dens[] = {0.0, 1.0, 0.5, 8.0 / 1024, 29.0 / 1024, 31.0 / 256, 0.12, 64.0 / 1024, 0.25};
    for (int C = 2; C <= 8; C *= 2)
        for (size_t k = 0; k < sizeof dens / sizeof dens[0]; k++) {
            for (int r = 0; r < M; r++) p[r] = dens[k];
            roundtrip(M, 1024, C, p);
        }
    // Mixed rows: heavy first tokens, zeros, full rows.
    for (int r = 0; r < M; r++) p[r] = r < 3 ? 0.6 : (r % 7 == 0 ? 0.0 : (r % 11 == 0 ? 1.0 : 0.02));
    roundtrip(M, 512, 8, p);
    roundtrip(M, 256, 4, p);
    roundtrip(0, 256, 8, p);
}

// Exactly S and S+1 positives in one tile: the boundary of overflow.
static void test_overflow_boundary(void **state) {
    (void)state;
    for (int C = 2; C <= 8; C *= 2) {
        TwellShape s;
        assert_int_equal(twell_shape_init(&s, 3, 512, C), TWELL_OK);
        float *a = (float *)malloc(sizeof(float) * 3 * 512);
        for (int i = 0; i < 3 * 512; i++) a[i] = -1.0f;
        for (int k = 0; k < s.slots; k++) a[0 * 512 + 256 + 255 - k] = 1.0f + k;  // row 0: S in tile 1
        for (int k = 0; k <= s.slots; k++) a[1 * 512 + 2 * k] = 0.5f;             // row 1: S+1 in tile 0
        for (int j = 0; j < 512; j++) a[2 * 512 + j] = 3.0f;                       // row 2: all 512
        uint32_t *tw = (uint32_t *)malloc(sizeof(uint32_t) * 3 * s.row_words);
        int ovf[3];
        uint64_t nnz;
        int n = twell_pack_cpu(&s, a, 512, tw, ovf, &nnz);
        assert_int_equal(n, 2);
        assert_int_equal(ovf[0], 1);
        assert_int_equal(ovf[1], 2);
        assert_true(nnz == (uint64_t)s.slots + s.slots + 1 + 512);
        assert_int_equal(tw[s.words], s.slots);              // row 0 tile 1 count
        assert_int_equal(twell_word_col(tw[s.words + 1]), 256 - s.slots);  // column order
        assert_int_equal(tw[s.row_words + 0], s.slots + 1);  // row 1 tile 0: true count, not clamped
        assert_int_equal(tw[2 * s.row_words], 256);
        char err[128];
        assert_int_equal(twell_validate_cpu(&s, tw, err, sizeof err), 0);
        free(a); free(tw);
    }
}

// -0, +0, NaN, values rounding to 0 in bf16 are not stored; tiny positive bf16 denormals are.
static void test_special_values(void **state) {
    (void)state;
    TwellShape s;
    assert_int_equal(twell_shape_init(&s, 1, 256, 8), TWELL_OK);
    float a[256];
    for (int j = 0; j < 256; j++) a[j] = -3.0f;
    a[0] = 0.0f; a[1] = -0.0f; a[2] = NAN; a[3] = 1e-45f /* rounds to +0 in bf16 */;
    a[4] = 1e-39f /* bf16 denormal > 0 */; a[5] = 1.00390625f /* rounds to 1.0 (ties to even) */;
    a[6] = INFINITY;
    uint32_t tw[32];
    assert_int_equal(twell_pack_cpu(&s, a, 256, tw, NULL, NULL), 0);
    assert_int_equal(tw[0], 3);
    assert_int_equal(twell_word_col(tw[1]), 4);
    assert_int_equal(twell_word_col(tw[2]), 5);
    assert_int_equal(twell_word_bits(tw[2]), 0x3f80);
    assert_int_equal(twell_word_col(tw[3]), 6);
    assert_int_equal(tw[4], 0);
}

static void test_shape_errors(void **state) {
    (void)state;
    TwellShape s;
    assert_int_equal(twell_shape_init(&s, 4, 300, 8), TWELL_ERR_SHAPE);
    assert_int_equal(twell_shape_init(&s, 4, 0, 8), TWELL_ERR_SHAPE);
    assert_int_equal(twell_shape_init(&s, 4, 512, 3), TWELL_ERR_SHAPE);
    assert_int_equal(twell_shape_init(&s, -1, 512, 8), TWELL_ERR_SHAPE);
    assert_int_equal(twell_shape_init(&s, 4, 5632, 8), TWELL_OK);
    assert_int_equal(s.row_words, 704);
    assert_int_equal(s.slots, 31);
    assert_int_equal(s.tiles, 22);
}

// The validator catches corruptions.
static void test_validator_catches(void **state) {
    (void)state;
    TwellShape s;
    assert_int_equal(twell_shape_init(&s, 1, 256, 8), TWELL_OK);
    float a[256];
    for (int j = 0; j < 256; j++) a[j] = (j % 3 == 0) ? 1.0f : -1.0f;  // 86 positives -> overflow
    uint32_t tw[32];
    twell_pack_cpu(&s, a, 256, tw, NULL, NULL);
    char err[128];
    assert_int_equal(twell_validate_cpu(&s, tw, err, sizeof err), 0);
    uint32_t bad[32];
    memcpy(bad, tw, sizeof bad); bad[0] = 300;
    assert_int_equal(twell_validate_cpu(&s, bad, err, sizeof err), -1);
    memcpy(bad, tw, sizeof bad); { uint32_t t = bad[3]; bad[3] = bad[4]; bad[4] = t; }
    assert_int_equal(twell_validate_cpu(&s, bad, err, sizeof err), -1);
    for (int j = 0; j < 256; j++) a[j] = j < 5 ? 1.0f : -1.0f;
    twell_pack_cpu(&s, a, 256, tw, NULL, NULL);
    memcpy(bad, tw, sizeof bad); bad[10] = 0x3f800001u;
    assert_int_equal(twell_validate_cpu(&s, bad, err, sizeof err), -1);
}

int main(void) {
    g_seed = test_seed("test_twell_format");
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_roundtrip_densities), cmocka_unit_test(test_overflow_boundary),
        cmocka_unit_test(test_special_values),     cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_validator_catches),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
