// GPU tests of the sparse training FFN (twell/train_ffn.cuh), forward and backward:
//   - small shapes (M 384, D 256, F 512) against a float64 CPU reference with the dense path's rounding points
//     (g, u, h, dh, dg, du rounded to bf16; everything else in float64), gated and non-gated, patterns nnz 8, 29,
//     128, 50%, heavy first tokens, mixed (all-zero rows, fully dense rows), plus a tiny pair pool (rows past the
//     pool go dense) and a low dense-row threshold;
//   - accumulation into prefilled gradients, and bitwise determinism of two runs;
//   - M 16384 and 131072 at D 2048, F 5632 against our dense GPU path (core/ffn.cuh + cuBLASLt, as model/train_model.cuh):
//     Y, dX, dWg, dWu, dWd and L1 within bf16 tolerance; pair counts and fired flags.
// Outputs are poisoned (NaN) before every sparse run; inputs are fresh random values (seed printed; SLLM_TEST_SEED
// sets it).
#include <math.h>
#include <time.h>

#include <vector>

#include "cuda_common.cuh"
#include "gpu_harness.h"
#include "dev/bench/train_problem.cuh"
#include "matmul.cuh"
#include "twell/train_ffn.cuh"

#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}

static uint64_t g_seed;
static MatmulContext g_mm;
static int g_have_gpu;
static const float L1_COEF = 0.05f;
static const double TOL = 1e-2;  // relative Frobenius error, bf16 outputs

static float hb(float f) { return twell_bf16_to_f32(twell_f32_to_bf16(f)); }

static std::vector<float> download_f(const bf16 *d, size_t n) {
    std::vector<float> h(n);
    download_bf16(h.data(), d, n);
    return h;
}
static std::vector<float> download_f32(const float *d, size_t n) {
    std::vector<float> h(n);
    cudaCheck(cudaMemcpy(h.data(), d, n * 4, cudaMemcpyDeviceToHost));
    return h;
}
static double rel(const std::vector<float> &a, const std::vector<double> &b, const float *base = NULL) {
    double s0 = 0, s1 = 0;
    for (size_t i = 0; i < a.size(); i++) {
        const double x = a[i] - (base ? base[i] : 0.0f);
        if (!std::isfinite(x)) return INFINITY;
        s0 += (x - b[i]) * (x - b[i]);
        s1 += b[i] * b[i];
    }
    return sqrt(s0 / (s1 > 0 ? s1 : 1e-30));
}

static void poison(TProblem *P, int accumulate) {
    const size_t MD = (size_t)P->M * P->D, FD = (size_t)P->F * P->D;
    cudaCheck(cudaMemset(P->Ys, 0xFF, MD * 2));
    cudaCheck(cudaMemset(P->dXs, 0xFF, MD * 2));
    if (!accumulate) {
        cudaCheck(cudaMemset(P->dWg_s, 0xFF, FD * 4));
        cudaCheck(cudaMemset(P->dWu_s, 0xFF, FD * 4));
        cudaCheck(cudaMemset(P->dWd_s, 0xFF, FD * 4));
    }
}

static void print_stats(const TwTrainState *st, int M) {
    TwTrainStats s;
    cudaCheck(cudaMemcpy(&s, st->stats, sizeof(s), cudaMemcpyDeviceToHost));
    printf("      pairs/token %.1f  max row %d  dense rows %d (overflow %d, pool full %d)  sparse pairs %llu  L1 %.4g\n",
           (double)s.pairs / M, s.max_row_nnz, s.n_dense, s.n_overflow, s.n_pool_full, s.sparse_pairs, s.l1);
}

// ---- small shapes against float64 ----
typedef struct { int pattern; float nnz; const char *name; } Pat;

static void small_case(int gated, Pat pat, int pairs_per_row, int dense_row_nnz, int accumulate) {
    const int M = 384, D = 256, F = 512;
    TProblem P;
    tp_alloc(&P, M, D, F, gated, 0);
    tp_generate(&P, g_seed + (uint64_t)pat.pattern * 1000 + (uint64_t)pat.nnz, pat.pattern, pat.nnz);
    TwTrainWS ws;
    TwTrainState st;
    assert_int_equal(twtrain_ws_init(&ws, M, D, F, gated, pairs_per_row, dense_row_nnz, 128, &g_mm), TWELL_OK);
    assert_int_equal(twtrain_state_alloc(&st, &ws), TWELL_OK);
    const size_t FD = (size_t)F * D;
    std::vector<float> base_g, base_u, base_d;
    if (accumulate) {
        tp_fill_f32<<<256, 256>>>(P.dWg_s, FD, 1.0f, g_seed + 11);
        tp_fill_f32<<<256, 256>>>(P.dWu_s, FD, 1.0f, g_seed + 12);
        tp_fill_f32<<<256, 256>>>(P.dWd_s, FD, 1.0f, g_seed + 13);
        cudaCheckLaunch();
        base_g = download_f32(P.dWg_s, FD); base_u = download_f32(P.dWu_s, FD); base_d = download_f32(P.dWd_s, FD);
    }
    poison(&P, accumulate);
    assert_int_equal(tp_sparse(&P, &ws, &st, L1_COEF, accumulate, 0), TWELL_OK);
    cudaCheck(cudaDeviceSynchronize());
    // float64 reference with the dense path's rounding points
    std::vector<float> X = download_f(P.X, (size_t)M * D), dY = download_f(P.dY, (size_t)M * D);
    std::vector<float> Wg = download_f(P.Wgu, FD), Wu = download_f(tp_wu(&P), FD), WdT = download_f(P.WdT, FD);
    const std::vector<float> &Wgate = gated ? Wg : Wu;
    std::vector<double> Y((size_t)M * D, 0), dX((size_t)M * D, 0), dWg(FD, 0), dWu(FD, 0), dWd(FD, 0);
    double l1 = 0;
    unsigned long long pairs = 0;
    for (int m = 0; m < M; m++) {
        const float *x = &X[(size_t)m * D], *dy = &dY[(size_t)m * D];
        for (int n = 0; n < F; n++) {
            double gp = 0;
            for (int d = 0; d < D; d++) gp += (double)x[d] * Wgate[(size_t)n * D + d];
            const float g = hb((float)gp);
            if (!(g > 0.0f)) continue;
            pairs++;
            float u = 0, h;
            if (gated) {
                double up = 0;
                for (int d = 0; d < D; d++) up += (double)x[d] * Wu[(size_t)n * D + d];
                u = hb((float)up);
                h = hb(g * u);
                l1 += fabs((double)g * u);
            } else {
                h = g;
                l1 += g;
            }
            double dhp = 0;
            for (int d = 0; d < D; d++) {
                Y[(size_t)m * D + d] += (double)h * WdT[(size_t)n * D + d];
                dhp += (double)dy[d] * WdT[(size_t)n * D + d];
                dWd[(size_t)d * F + n] += (double)h * dy[d];
            }
            const float dh = hb((float)dhp);
            if (gated) {
                const float sg = u > 0 ? 1.0f : (u < 0 ? -1.0f : 0.0f), dt = dh + L1_COEF * sg;
                const float dg = hb(dt * u), du = hb(dt * g);
                for (int d = 0; d < D; d++) {
                    dX[(size_t)m * D + d] += (double)dg * Wg[(size_t)n * D + d] + (double)du * Wu[(size_t)n * D + d];
                    dWg[(size_t)n * D + d] += (double)dg * x[d];
                    dWu[(size_t)n * D + d] += (double)du * x[d];
                }
            } else {
                const float dp = hb(dh + L1_COEF);
                for (int d = 0; d < D; d++) {
                    dX[(size_t)m * D + d] += (double)dp * Wu[(size_t)n * D + d];
                    dWu[(size_t)n * D + d] += (double)dp * x[d];
                }
            }
        }
    }
    const double ey = rel(download_f(P.Ys, (size_t)M * D), Y), edx = rel(download_f(P.dXs, (size_t)M * D), dX);
    const double ewg = gated ? rel(download_f32(P.dWg_s, FD), dWg, accumulate ? base_g.data() : NULL) : 0.0;
    const double ewu = rel(download_f32(P.dWu_s, FD), dWu, accumulate ? base_u.data() : NULL);
    const double ewd = rel(download_f32(P.dWd_s, FD), dWd, accumulate ? base_d.data() : NULL);
    float l1s = 0;
    unsigned long long ns = 0;
    cudaCheck(cudaMemcpy(&l1s, P.l1_s, 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&ns, P.nnz_s, 8, cudaMemcpyDeviceToHost));
    const double el1 = fabs(l1s - l1) / (l1 > 0 ? l1 : 1.0);
    printf("  small %-8s %-10s pool/row %-3d thresh %-4d acc %d: rel err Y %.2e dX %.2e dWg %.2e dWu %.2e dWd %.2e "
           "L1 %.2e  pairs %llu (ref %llu)\n", gated ? "gated" : "nongated", pat.name, pairs_per_row, dense_row_nnz,
           accumulate, ey, edx, ewg, ewu, ewd, el1, ns, pairs);
    print_stats(&st, M);
    assert_true(ey < TOL && edx < TOL && ewg < TOL && ewu < TOL && ewd < TOL && el1 < TOL);
    assert_true(fabs((double)ns - (double)pairs) <= 1e-3 * pairs + 2);
    twtrain_state_free(&st);
    twtrain_ws_free(&ws);
    tp_free(&P);
}

static const Pat SMALL_PATS[] = {{TP_UNIFORM, 8, "nnz8"},   {TP_UNIFORM, 29, "nnz29"},  {TP_UNIFORM, 128, "nnz128"},
                                 {TP_UNIFORM, 256, "50%"}, {TP_HEAVY, 29, "heavy29"}, {TP_MIX, 29, "mix29"}};

static void test_small_gated(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    for (const Pat &p : SMALL_PATS) small_case(1, p, 0, 0, 0);
}
static void test_small_nongated(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    for (const Pat &p : SMALL_PATS) small_case(0, p, 0, 0, 0);
}
// A pool of 4 pairs per row (most rows past it run densely), a dense-row threshold of 16, accumulation.
static void test_small_pool_threshold_accumulate(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    small_case(1, SMALL_PATS[5], 4, 0, 0);
    small_case(1, SMALL_PATS[1], 0, 16, 0);
    small_case(0, SMALL_PATS[5], 4, 16, 0);
    small_case(1, SMALL_PATS[5], 0, 0, 1);
}

// ---- large shapes against the dense GPU path ----
static void large_case(TProblem *P, TwTrainWS *ws, TwTrainState *st, Pat pat, int check_determinism) {
    tp_generate(P, g_seed + 7 * (uint64_t)pat.pattern + (uint64_t)pat.nnz, pat.pattern, pat.nnz);
    tp_dense(P, &g_mm, L1_COEF, 0);
    poison(P, 0);
    assert_int_equal(tp_sparse(P, ws, st, L1_COEF, 0, 0), TWELL_OK);
    cudaCheck(cudaDeviceSynchronize());
    TErrors e = tp_compare(P);
    printf("  M %-6d %-8s %-8s: rel err Y %.2e dX %.2e dWg %.2e dWu %.2e dWd %.2e L1 %.2e  nnz diff %.1e fired diff %d\n",
           P->M, P->gated ? "gated" : "nongated", pat.name, e.y, e.dx, e.dwg, e.dwu, e.dwd, e.l1, e.nnz_rel, e.fired_diff);
    print_stats(st, P->M);
    assert_true(tp_max_err(&e) < TOL);
    assert_true(e.nnz_rel < 1e-3);
    if (check_determinism) {  // a second run gives the same bits
        const size_t MD = (size_t)P->M * P->D, FD = (size_t)P->F * P->D;
        std::vector<uint16_t> y1(MD), x1(MD);
        std::vector<float> w1(FD), d1(FD);
        cudaCheck(cudaMemcpy(y1.data(), P->Ys, MD * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(x1.data(), P->dXs, MD * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(w1.data(), P->dWu_s, FD * 4, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(d1.data(), P->dWd_s, FD * 4, cudaMemcpyDeviceToHost));
        poison(P, 0);
        assert_int_equal(tp_sparse(P, ws, st, L1_COEF, 0, 0), TWELL_OK);
        std::vector<uint16_t> y2(MD), x2(MD);
        std::vector<float> w2(FD), d2(FD);
        cudaCheck(cudaMemcpy(y2.data(), P->Ys, MD * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(x2.data(), P->dXs, MD * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(w2.data(), P->dWu_s, FD * 4, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(d2.data(), P->dWd_s, FD * 4, cudaMemcpyDeviceToHost));
        const int same = y1 == y2 && x1 == x2 && memcmp(w1.data(), w2.data(), FD * 4) == 0 &&
                         memcmp(d1.data(), d2.data(), FD * 4) == 0;
        printf("      second run bitwise identical: %s\n", same ? "yes" : "NO");
        assert_true(same);
    }
}

static void large_set(int M, int gated, const Pat *pats, int npats) {
    const int D = 2048, F = 5632;
    TProblem P;
    tp_alloc(&P, M, D, F, gated, 1);
    TwTrainWS ws;
    TwTrainState st;
    assert_int_equal(twtrain_ws_init(&ws, M, D, F, gated, 0, 0, 0, &g_mm), TWELL_OK);
    assert_int_equal(twtrain_state_alloc(&st, &ws), TWELL_OK);
    for (int i = 0; i < npats; i++) large_case(&P, &ws, &st, pats[i], pats[i].pattern == TP_MIX);
    twtrain_state_free(&st);
    twtrain_ws_free(&ws);
    tp_free(&P);
}

static void test_large_16384(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const Pat g[] = {{TP_UNIFORM, 8, "nnz8"},     {TP_UNIFORM, 29, "nnz29"},  {TP_UNIFORM, 128, "nnz128"},
                     {TP_UNIFORM, 512, "nnz512"}, {TP_UNIFORM, 2816, "50%"}, {TP_HEAVY, 29, "heavy29"},
                     {TP_MIX, 29, "mix29"}};
    large_set(16384, 1, g, 7);
    const Pat ng[] = {{TP_UNIFORM, 29, "nnz29"}, {TP_MIX, 29, "mix29"}};
    large_set(16384, 0, ng, 2);
}
static void test_large_131072(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const Pat g[] = {{TP_UNIFORM, 29, "nnz29"}, {TP_MIX, 29, "mix29"}, {TP_HEAVY, 29, "heavy29"}};
    large_set(131072, 1, g, 3);
}

static void test_shape_errors(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    TwTrainWS ws;
    assert_int_equal(twtrain_ws_init(&ws, 128, 200, 512, 1, 0, 0, 0, &g_mm), TWELL_ERR_SHAPE);
    assert_int_equal(twtrain_ws_init(&ws, 128, 256, 500, 1, 0, 0, 0, &g_mm), TWELL_ERR_SHAPE);
    assert_int_equal(twtrain_ws_init(&ws, 0, 256, 512, 1, 0, 0, 0, &g_mm), TWELL_ERR_SHAPE);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_errors),
        cmocka_unit_test(test_small_gated),
        cmocka_unit_test(test_small_nongated),
        cmocka_unit_test(test_small_pool_threshold_accumulate),
        cmocka_unit_test(test_large_16384),
        cmocka_unit_test(test_large_131072),
    };
    GPU_TEST_PREFLIGHT("test_twell_train", tests);
    g_seed = gpu_test_seed("test_twell_train");
    g_have_gpu = cuda_device_available();
    if (g_have_gpu) matmul_context_init(&g_mm);
    const int rc = cmocka_run_group_tests(tests, NULL, NULL);
    if (g_have_gpu) matmul_context_free(&g_mm);
    return rc;
}
