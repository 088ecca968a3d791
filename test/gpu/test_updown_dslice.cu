// GPU tests of the D-sliced weight-stationary up/down (twell/updown_dslice.cuh) against a float64 CPU
// reference built from the CPU packer (twell/format.h), and against twell/updown.cuh on the same input.
//
// Gate matrix: random dense [M, F] fp32 with a per-row pattern, packed by twell_pack_cpu:
//   ~10% all-zero rows (nothing active: Y must be exact zeros), ~10% rows at 50% density (overflow for
//   C = 8: must stay untouched), ~5% rows with exactly slots + 1 entries in one tile (overflow by one),
//   ~5% rows with exactly `slots` entries in every tile (the largest row that fits), the rest uniform with
//   a per-row nnz drawn from 1..256. Values: positive in (0.05, 2]; inactive entries <= 0 (some exactly 0,
//   some negative, some tiny positives that round to bf16 > 0 anyway are fine: the packer decides).
// X, Wu, WdT: random bf16-exact values in [-1, 1) * scale. Y is poisoned with NaN before every call.
// Checks: every non-overflow row written and within 1e-2 relative error (per row and overall), overflow
// rows untouched (NaN bits), zero rows exact zeros, two runs bit-identical, and within 1e-2 of
// twell_updown_launch (default variant) on the non-overflow rows.
#include <math.h>
#include <time.h>

#include <vector>

#include "cuda_common.cuh"
#include "rng.h"
#include "twell/updown.cuh"
#include "twell/updown_dslice.cuh"  // (C++ / CUB headers before cmocka: its fail() macro breaks <ios>)

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}

static uint64_t g_seed;
static int g_have_gpu;

typedef struct {
    int M, D, F, C, gated;
    std::vector<float> X, Wu, WdT;
    std::vector<uint32_t> tw;
    std::vector<uint8_t> ovf, zero;
    std::vector<double> ref;  // [M, D]
    uint64_t nnz;
    int n_ovf;
} Prob;

static float rnd_bf16(Rng *r, float scale) { return sllm_round_bf16((float)(rng_uniform(r) * 2 - 1) * scale); }

static void prob_make(Prob *P, int M, int D, int F, int C, int gated, int dense50, uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    P->M = M; P->D = D; P->F = F; P->C = C; P->gated = gated;
    TwellShape s;
    assert_int_equal(twell_shape_init(&s, M, F, C), TWELL_OK);
    std::vector<float> acc((size_t)M * F);
    P->zero.assign(M, 0);
    for (int m = 0; m < M; m++) {
        float *a = &acc[(size_t)m * F];
        for (int n = 0; n < F; n++) a[n] = (rng_below(&rng, 2) ? -1.0f : 0.0f) * (float)rng_uniform(&rng);
        const int type = dense50 ? 1 : (int)rng_below(&rng, 20);
        if (type == 0 || type == 19) { P->zero[m] = 1; continue; }                // zero row
        if (type == 1 || type == 18) {                                           // 50%
            for (int n = 0; n < F; n++) if (rng_below(&rng, 2)) a[n] = 0.05f + (float)rng_uniform(&rng);
        } else if (type == 2) {                                                  // one tile slots + 1
            const int t = (int)rng_below(&rng, s.tiles);
            for (int k = 0; k <= s.slots; k++) a[t * 256 + (k * 7 + 3) % 256] = 0.05f + (float)rng_uniform(&rng);
        } else if (type == 3) {                                                  // every tile full
            for (int t = 0; t < s.tiles; t++)
                for (int k = 0; k < s.slots; k++) a[t * 256 + (k * 3 + t) % 256] = 0.05f + (float)rng_uniform(&rng);
        } else {                                                                 // uniform, nnz 1..256
            const int k = 1 + (int)rng_below(&rng, 256);
            for (int i = 0; i < k; i++) a[rng_below(&rng, F)] = 0.05f + (float)rng_uniform(&rng);
        }
    }
    P->tw.assign((size_t)M * s.row_words, 0);
    P->n_ovf = twell_pack_cpu(&s, acc.data(), (size_t)F, P->tw.data(), NULL, &P->nnz);
    std::vector<float> g((size_t)M * F);
    std::vector<uint8_t> inc(M);
    twell_unpack_cpu(&s, P->tw.data(), g.data(), inc.data());
    P->ovf.assign(inc.begin(), inc.end());
    P->X.resize((size_t)M * D);
    P->Wu.resize((size_t)F * D);
    P->WdT.resize((size_t)F * D);
    for (auto &v : P->X) v = rnd_bf16(&rng, 1.0f);
    for (auto &v : P->Wu) v = rnd_bf16(&rng, 0.05f);
    for (auto &v : P->WdT) v = rnd_bf16(&rng, 0.05f);
    P->ref.assign((size_t)M * D, 0.0);
    std::vector<double> yrow(D);
    for (int m = 0; m < M; m++) {
        if (P->ovf[m]) continue;
        const float *x = &P->X[(size_t)m * D];
        double *y = &P->ref[(size_t)m * D];
        for (int n = 0; n < F; n++) {
            const double gv = g[(size_t)m * F + n];
            if (gv == 0.0) continue;
            double hv = gv;
            if (gated) {
                const float *wu = &P->Wu[(size_t)n * D];
                double u = 0;
                for (int d = 0; d < D; d++) u += (double)x[d] * wu[d];
                hv = gv * u;
            }
            const float *wd = &P->WdT[(size_t)n * D];
            for (int d = 0; d < D; d++) y[d] += hv * wd[d];
        }
    }
}

typedef struct { uint32_t *tw; bf16 *X, *Wu, *WdT, *Y; } Dev;

static void dev_upload(const Prob *P, Dev *d) {
    const size_t MD = (size_t)P->M * P->D, FD = (size_t)P->F * P->D;
    cudaCheck(cudaMalloc(&d->tw, sizeof(uint32_t) * P->tw.size()));
    cudaCheck(cudaMalloc(&d->X, sizeof(bf16) * MD));
    cudaCheck(cudaMalloc(&d->Y, sizeof(bf16) * MD));
    cudaCheck(cudaMalloc(&d->Wu, sizeof(bf16) * FD));
    cudaCheck(cudaMalloc(&d->WdT, sizeof(bf16) * FD));
    cudaCheck(cudaMemcpy(d->tw, P->tw.data(), sizeof(uint32_t) * P->tw.size(), cudaMemcpyHostToDevice));
    upload_bf16(d->X, P->X.data(), MD);
    upload_bf16(d->Wu, P->Wu.data(), FD);
    upload_bf16(d->WdT, P->WdT.data(), FD);
}
static void dev_free(Dev *d) {
    cudaCheck(cudaFree(d->tw)); cudaCheck(cudaFree(d->X)); cudaCheck(cudaFree(d->Y));
    cudaCheck(cudaFree(d->Wu)); cudaCheck(cudaFree(d->WdT));
}

// Runs the D-sliced kernel with Y poisoned (0xFFFF = NaN); returns the raw bf16 bits of Y.
static std::vector<uint16_t> run_dslice(TwellDsliceWS *ws, const Prob *P, Dev *d) {
    const size_t MD = (size_t)P->M * P->D;
    cudaCheck(cudaMemset(d->Y, 0xFF, sizeof(bf16) * MD));
    assert_int_equal(twell_dslice_updown(ws, d->tw, P->C, d->X, P->gated ? d->Wu : NULL, d->WdT, d->Y, P->M, P->D,
                                         P->F, 0),
                     TWELL_OK);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<uint16_t> y(MD);
    cudaCheck(cudaMemcpy(y.data(), d->Y, sizeof(bf16) * MD, cudaMemcpyDeviceToHost));
    return y;
}

// Per-row and overall relative error of y (bf16 bits) against ref on the non-overflow rows.
static void check_rows(const Prob *P, const std::vector<uint16_t> &y, const std::vector<double> &ref, const char *what) {
    double num = 0, den = 0;
    for (int m = 0; m < P->M; m++) {
        const uint16_t *yr = &y[(size_t)m * P->D];
        const double *rr = &ref[(size_t)m * P->D];
        if (P->ovf[m]) {
            for (int d = 0; d < P->D; d++)
                if (yr[d] != 0xFFFF) fail_msg("%s: overflow row %d col %d was written (0x%04x)", what, m, d, yr[d]);
            continue;
        }
        double e = 0, r = 0;
        for (int d = 0; d < P->D; d++) {
            const float v = sllm_bf16_to_f32(yr[d]);
            if (!isfinite(v)) fail_msg("%s: row %d col %d not written / not finite (0x%04x)", what, m, d, yr[d]);
            if (P->zero[m] && yr[d] != 0) fail_msg("%s: zero row %d col %d = %g (want exact 0)", what, m, d, v);
            e += (v - rr[d]) * (v - rr[d]);
            r += rr[d] * rr[d];
        }
        if (r > 0 && sqrt(e / r) > 1e-2)
            fail_msg("%s: row %d relative error %.3e (|ref| %.3e)", what, m, sqrt(e / r), sqrt(r));
        if (r == 0 && e > 0) fail_msg("%s: row %d reference is zero, got |y|^2 = %g", what, m, e);
        num += e;
        den += r;
    }
    if (den > 0 && sqrt(num / den) > 1e-2) fail_msg("%s: overall relative error %.3e", what, sqrt(num / den));
}

static void run_case(int M, int D, int F, int C, int gated, int dense50, size_t budget, uint64_t seed) {
    Prob P;
    prob_make(&P, M, D, F, C, gated, dense50, seed);
    Dev d;
    dev_upload(&P, &d);
    TwellDsliceWS ws;
    assert_int_equal(twell_dslice_workspace_create(&ws, M, D, F, C, budget), TWELL_OK);
    printf("  M=%d D=%d F=%d C=%d %s%s: nnz/row %.1f, overflow rows %d | NG %d UG %d NS %d CLu %d cap %d tch %d "
           "TK %d (%d chunks)\n", M, D, F, C, gated ? "gated" : "non-gated", dense50 ? " 50%" : "",
           (double)P.nnz / M, P.n_ovf, ws.NG, ws.UG, ws.NS, ws.CLu, ws.cap_up, ws.tch, ws.TK, CEIL_DIV(M, ws.TK));
    char what[160];
    snprintf(what, sizeof what, "dslice M=%d D=%d F=%d C=%d gated=%d", M, D, F, C, gated);
    std::vector<uint16_t> y1 = run_dslice(&ws, &P, &d);
    check_rows(&P, y1, P.ref, what);
    std::vector<uint16_t> y2 = run_dslice(&ws, &P, &d);
    for (size_t i = 0; i < y1.size(); i++)
        if (y1[i] != y2[i]) fail_msg("%s: not deterministic at %zu (0x%04x vs 0x%04x)", what, i, y1[i], y2[i]);
    // Against twell/updown.cuh (default variant) on the same input: both within 1e-2 of each other.
    if (twell_updown_variant_supports(TWELL_UPDOWN_DEFAULT, D)) {
        cudaCheck(cudaMemset(d.Y, 0xFF, sizeof(bf16) * (size_t)M * D));
        assert_int_equal(twell_updown_launch(TWELL_UPDOWN_DEFAULT, gated, d.tw, d.X, d.Wu, d.WdT, D, d.Y, M, D, F, C, 0),
                         TWELL_OK);
        cudaCheck(cudaDeviceSynchronize());
        std::vector<uint16_t> yo((size_t)M * D);
        cudaCheck(cudaMemcpy(yo.data(), d.Y, sizeof(bf16) * yo.size(), cudaMemcpyDeviceToHost));
        std::vector<double> ro(yo.size());
        for (size_t i = 0; i < yo.size(); i++) ro[i] = P.ovf[i / D] ? 0.0 : (double)sllm_bf16_to_f32(yo[i]);
        snprintf(what, sizeof what, "dslice vs twell_updown M=%d D=%d F=%d C=%d gated=%d", M, D, F, C, gated);
        check_rows(&P, y1, ro, what);
    }
    twell_dslice_workspace_free(&ws);
    dev_free(&d);
}

static void test_shape_errors(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    TwellDsliceWS ws;
    assert_int_equal(twell_dslice_workspace_create(&ws, 16, 96, 256, 8, 0), TWELL_ERR_SHAPE);     // D % 64
    assert_int_equal(twell_dslice_workspace_create(&ws, 16, 128, 300, 8, 0), TWELL_ERR_SHAPE);    // F % 256
    assert_int_equal(twell_dslice_workspace_create(&ws, 16, 128, 256, 3, 0), TWELL_ERR_SHAPE);    // C
    assert_int_equal(twell_dslice_workspace_create(&ws, 16, 128, 32768, 8, 0), TWELL_ERR_SHAPE);  // F too large
    assert_int_equal(twell_dslice_workspace_create(&ws, 0, 128, 256, 8, 0), TWELL_ERR_SHAPE);     // max_M
    assert_int_equal(twell_dslice_workspace_create(&ws, 16, 128, 256, 8, 0), TWELL_OK);
    assert_int_equal(twell_dslice_updown(&ws, NULL, 8, NULL, NULL, NULL, NULL, 32, 128, 256, 0), TWELL_ERR_WORKSPACE);
    assert_int_equal(twell_dslice_updown(&ws, NULL, 8, NULL, NULL, NULL, NULL, 16, 128, 512, 0), TWELL_ERR_WORKSPACE);
    assert_int_equal(twell_dslice_updown(&ws, NULL, 8, NULL, NULL, NULL, NULL, 16, 128, 256, 0), TWELL_ERR_ARG);
    twell_dslice_workspace_free(&ws);
}

typedef struct { int M, D, F, C; } Shape;
static const Shape kShapes[] = {
    {1, 64, 256, 8},     {77, 64, 1024, 8},    {1000, 256, 256, 8},  {77, 2048, 5632, 8},
    {4096, 256, 1024, 8}, {1000, 2048, 256, 8}, {1000, 64, 5632, 4},  {4096, 256, 5632, 8},
    {1000, 2048, 1024, 2}, {77, 256, 5632, 2},
};

static void test_gated(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    for (size_t i = 0; i < sizeof kShapes / sizeof kShapes[0]; i++)
        run_case(kShapes[i].M, kShapes[i].D, kShapes[i].F, kShapes[i].C, 1, 0, 0, g_seed + i);
}

static void test_nongated(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    for (size_t i = 0; i < sizeof kShapes / sizeof kShapes[0]; i++)
        run_case(kShapes[i].M, kShapes[i].D, kShapes[i].F, kShapes[i].C, 0, 0, 0, g_seed + 100 + i);
}

// Every row at 50% density (C = 2: many fit in 127 slots per tile; C = 8: all overflow).
static void test_dense50(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    run_case(300, 256, 1024, 2, 1, 1, 0, g_seed + 200);
    run_case(300, 256, 1024, 8, 1, 1, 0, g_seed + 201);
    run_case(200, 128, 5632, 2, 0, 1, 0, g_seed + 202);
}

// A small pair budget forces several host chunks (and several cluster pieces per CTA).
static void test_chunks(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    run_case(1000, 256, 1024, 8, 1, 0, (size_t)4 << 20, g_seed + 300);
    run_case(777, 2048, 5632, 8, 1, 0, (size_t)16 << 20, g_seed + 301);
    run_case(500, 128, 5632, 4, 0, 0, (size_t)8 << 20, g_seed + 302);
}

int main(void) {
    g_seed = (uint64_t)time(NULL);
    printf("test_updown_dslice: seed %llu\n", (unsigned long long)g_seed);
    g_have_gpu = cuda_device_available();
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_errors), cmocka_unit_test(test_gated),  cmocka_unit_test(test_nongated),
        cmocka_unit_test(test_dense50),      cmocka_unit_test(test_chunks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
