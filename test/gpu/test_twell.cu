// GPU tests of the TwELL FFN (twell/ffn.cuh): gate -> TwELL bit for bit against the CPU packer, the
// sparse / dense / dispatched FFN against a float64 CPU reference, overflow rows, shape errors.
//
// How the gate pattern is controlled (exactly, on any accumulation order): X and the gate weight W1 hold
// small integers, so every gate pre-activation is an integer whose partial sums stay below 2^24: fp32
// accumulation is exact in ANY order, so the GPU's fp32 accumulator equals the CPU's and the bf16
// rounding is identical -> the GPU TwELL must equal the CPU packer's output bit for bit.
//   column 0      "bias": X[m,0] = b_m, W1[n,0] = 1
//   columns 1..4  selectors: X[m,s] in {0,1}, W1[n,s] = BIG for n in a chosen column set S_s, else 0
//   columns 5..   random in {-1,0,1} for X and W1 (the "random part", |.| <= D < BIG/4)
// Row types: zero row (X row = 0: all pre-activations exactly 0, nothing active), uniform rows with a
// target nnz k (b_m = -sigma_m * z_{1-k/F}), 50% rows (b = 0), full rows (b = +BIG), heavy first rows
// (p 0.2..0.6), and selector rows (b = -BIG/2, X[m,s] = 1: active set exactly S_s): S1 = exactly S (slots)
// columns in tile 0, S2 = S+1 in the last tile (overflow by one), S3 = S in every tile (largest row that
// fits), S4 = one per tile plus all 256 of tile 0 (overflow).
// Up / down weights are random floats (bf16-rounded); the reference is float64 on the same bf16 values.
#include <math.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

// The project headers (CUB, <ios>) before cmocka: cmocka's fail() macro would clash with std::ios::fail().
#include "cuda_common.cuh"
#include "matmul.cuh"
#include "rng.h"
#include "twell/ffn.cuh"
#include "gpu_harness.h"

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

enum { ROW_MIX = 0, ROW_UNIFORM = 1, ROW_ALL_FULL = 2, ROW_ALL_ZERO = 3 };

typedef struct {
    int M, D, F, C, gated;
    int BIG;
    std::vector<float> X, W1, Wu, WdT;  // host values (bf16-exact); W1 = gate weight (gated) or up weight
    std::vector<float> pre;             // [M, F] exact gate pre-activations
    std::vector<double> ref;            // [M, D] float64 FFN
    bf16 *dX, *dW1, *dWu, *dWdT, *dY;
} Problem;

static double inv_normal_upper(double p) {  // z with P(N(0,1) > z) = p, 0 < p < 1
    double lo = -10, hi = 10;
    for (int i = 0; i < 100; i++) {
        double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(mid / sqrt(2.0)) > p) lo = mid; else hi = mid;
    }
    return 0.5 * (lo + hi);
}

static void problem_upload(Problem *P);
static float bf16r(float f) { return sllm_round_bf16(f); }

static void problem_make(Problem *P, int M, int D, int F, int C, int gated, int rows_kind, double uniform_nnz,
                         uint64_t seed) {
    Rng rng;
    rng_seed(&rng, seed);
    P->M = M; P->D = D; P->F = F; P->C = C; P->gated = gated;
    int BIG = 1;
    while (BIG < 4 * D) BIG *= 2;
    P->BIG = BIG;
    const int slots = TWELL_TILE / C - 1, tiles = F / TWELL_TILE;
    P->X.assign((size_t)M * D, 0.0f);
    P->W1.assign((size_t)F * D, 0.0f);
    P->Wu.assign((size_t)F * D, 0.0f);
    P->WdT.assign((size_t)F * D, 0.0f);
    // Selector sets.
    std::vector<char> S[5];
    for (int s = 1; s <= 4; s++) S[s].assign(F, 0);
    for (int k = 0; k < slots; k++) S[1][(k * 7) % 256 + 0] = 1;  // 7 is odd: k*7 mod 256 distinct
    for (int k = 0; k <= slots; k++) S[2][(tiles - 1) * 256 + (k * 5 + 3) % 256] = 1;
    for (int t = 0; t < tiles; t++)
        for (int k = 0; k < slots; k++) S[3][t * 256 + (k * 3 + t) % 256] = 1;
    for (int t = 0; t < tiles; t++) S[4][t * 256 + (t * 37) % 256] = 1;
    for (int j = 0; j < 256; j++) S[4][j] = 1;
    for (int n = 0; n < F; n++) {
        float *w = &P->W1[(size_t)n * D];
        w[0] = 1.0f;
        for (int s = 1; s <= 4; s++) w[s] = S[s][n] ? (float)BIG : 0.0f;
        for (int d = 5; d < D; d++) w[d] = (float)((int)rng_below(&rng, 3) - 1);
        for (int d = 0; d < D; d++) {
            P->Wu[(size_t)n * D + d] = bf16r((float)(rng_uniform(&rng) * 2 - 1) * 0.05f);
            P->WdT[(size_t)n * D + d] = bf16r((float)(rng_uniform(&rng) * 2 - 1) * 0.05f);
        }
    }
    for (int m = 0; m < M; m++) {
        float *x = &P->X[(size_t)m * D];
        for (int d = 5; d < D; d++) x[d] = (float)((int)rng_below(&rng, 3) - 1);
        int nzx = 0;
        for (int d = 5; d < D; d++) nzx += x[d] != 0.0f;
        double sigma = sqrt(nzx * 2.0 / 3.0);
        double p;  // target active fraction (uniform-type rows)
        int type;
        if (rows_kind == ROW_UNIFORM) type = 1;
        else if (rows_kind == ROW_ALL_FULL) type = 3;
        else if (rows_kind == ROW_ALL_ZERO) type = 0;
        else if (m < 3) type = 4;              // heavy first tokens
        else type = (int)rng_below(&rng, 10);  // mixture
        switch (type) {
        case 0:  // zero row
            for (int d = 0; d < D; d++) x[d] = 0.0f;
            break;
        case 2: x[0] = 0.0f; break;                 // 50%
        case 3: x[0] = (float)BIG; break;           // full
        case 4: p = 0.2 + 0.4 * rng_uniform(&rng);  // heavy
            x[0] = bf16r((float)-llround(sigma * inv_normal_upper(p)));
            break;
        case 5: case 6: case 7: case 8: {  // selectors
            int s = type - 4;
            x[0] = (float)(-BIG / 2);
            x[s] = 1.0f;
            break;
        }
        case 9: x[0] = (float)-BIG; break;  // nothing active (but x non-zero)
        default: {                          // uniform with target nnz
            double k = rows_kind == ROW_UNIFORM ? uniform_nnz : (double)(1 + rng_below(&rng, 256));
            p = k / F;
            if (p >= 1) x[0] = (float)BIG;
            else x[0] = bf16r((float)-llround(sigma * inv_normal_upper(p)));
        }
        }
    }
    // Exact pre-activations (fp32 is exact here: integers, |partial sums| < 2^24).
    P->pre.assign((size_t)M * F, 0.0f);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < F; n++) {
            const float *x = &P->X[(size_t)m * D], *w = &P->W1[(size_t)n * D];
            float a = 0;
            for (int d = 0; d < D; d++) a += x[d] * w[d];
            P->pre[(size_t)m * F + n] = a;
        }
    // float64 reference FFN.
    P->ref.assign((size_t)M * D, 0.0);
    for (int m = 0; m < M; m++) {
        const float *x = &P->X[(size_t)m * D];
        double *y = &P->ref[(size_t)m * D];
        for (int n = 0; n < F; n++) {
            double g = P->pre[(size_t)m * F + n];
            if (!(g > 0)) continue;
            double h = g;
            if (gated) {
                const float *wu = &P->Wu[(size_t)n * D];
                double u = 0;
                for (int d = 0; d < D; d++) u += (double)x[d] * wu[d];
                h = g * u;
            }
            const float *wd = &P->WdT[(size_t)n * D];
            for (int d = 0; d < D; d++) y[d] += h * wd[d];
        }
    }
    if (g_have_gpu) problem_upload(P);
}

static void problem_upload(Problem *P) {
    const int M = P->M, D = P->D, F = P->F;
    cudaCheck(cudaMalloc(&P->dX, sizeof(bf16) * (size_t)M * D));
    cudaCheck(cudaMalloc(&P->dY, sizeof(bf16) * (size_t)M * D));
    cudaCheck(cudaMalloc(&P->dW1, sizeof(bf16) * (size_t)F * D));
    cudaCheck(cudaMalloc(&P->dWu, sizeof(bf16) * (size_t)F * D));
    cudaCheck(cudaMalloc(&P->dWdT, sizeof(bf16) * (size_t)F * D));
    upload_bf16(P->dX, P->X.data(), P->X.size());
    upload_bf16(P->dW1, P->W1.data(), P->W1.size());
    upload_bf16(P->dWu, P->Wu.data(), P->Wu.size());
    upload_bf16(P->dWdT, P->WdT.data(), P->WdT.size());
}

static void problem_free(Problem *P) {
    cudaCheck(cudaFree(P->dX)); cudaCheck(cudaFree(P->dY)); cudaCheck(cudaFree(P->dW1));
    cudaCheck(cudaFree(P->dWu)); cudaCheck(cudaFree(P->dWdT));
}

// Hang guard: waits for `stream` by polling cudaStreamQuery; after timeout_s seconds prints a clear error
// and exits the process (a hung kernel, e.g. an mbarrier bug in the wgmma gate, must not hang the test).
// A failed kernel (the wgmma gate faults on purpose, cudaErrorIllegalAddress, when one of its mbarrier waits
// exceeds TWELL_WGMMA_TIMEOUT_NS: test/gpu/test_hang_guard.cu) is
// reported the same way. _exit: no atexit handler may touch the broken context.
static void wait_or_die(cudaStream_t stream, double timeout_s, const char *what) {
    const double t0 = sllm_time_s();
    for (;;) {
        cudaError_t e = cudaStreamQuery(stream);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) {
            fflush(stdout);
            fprintf(stderr, "error: test_twell: %s failed on the device: %s (%s). For the wgmma gate an illegal "
                    "address means an mbarrier wait timed out (pipeline/descriptor bug) -- see twell/gate_wgmma.cuh\n", what,
                    cudaGetErrorString(e), cudaGetErrorName(e));
            _exit(3);
        }
        if (sllm_time_s() - t0 > timeout_s) {
            fflush(stdout);
            fprintf(stderr, "error: test_twell: %s did not finish within %.0f s: HANG (for the wgmma gate: an "
                    "mbarrier / TMA transaction-count bug). Exiting.\n", what, timeout_s);
            _exit(4);
        }
        usleep(1000);
    }
}

// Gate -> TwELL on the GPU equals the CPU packer bit for bit; overflow list and nnz equal.
static void check_gate(Problem *P, TwellFFNWorkspace *ws) {
    TwellShape s;
    assert_int_equal(twell_shape_init(&s, P->M, P->F, P->C), TWELL_OK);
    std::vector<uint32_t> want((size_t)P->M * s.row_words), got((size_t)P->M * s.row_words);
    std::vector<int> want_ovf(P->M > 0 ? P->M : 1);
    uint64_t want_nnz = 0;
    int n_want = twell_pack_cpu(&s, P->pre.data(), (size_t)P->F, want.data(), want_ovf.data(), &want_nnz);
    cudaCheck(cudaMemset(ws->tw, 0xAB, sizeof(uint32_t) * got.size()));  // poison
    assert_int_equal(twell_gate_forward(&g_mm, ws, P->dX, P->dW1, P->M, 0), TWELL_OK);
    char what[96];
    snprintf(what, sizeof what, "gate variant %s (M=%d D=%d F=%d C=%d)", twell_gate_variant_name(ws->gate_variant),
             P->M, P->D, P->F, P->C);
    wait_or_die(0, 10.0, what);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(got.data(), ws->tw, sizeof(uint32_t) * got.size(), cudaMemcpyDeviceToHost));
    TwellCounters cnt;
    cudaCheck(cudaMemcpy(&cnt, ws->counters, sizeof cnt, cudaMemcpyDeviceToHost));
    char err[256];
    if (twell_validate_cpu(&s, got.data(), err, sizeof err)) fail_msg("GPU TwELL invalid: %s", err);
    for (size_t i = 0; i < got.size(); i++)
        if (got[i] != want[i])
            fail_msg("TwELL mismatch at row %zu word %zu: GPU 0x%08x CPU 0x%08x", i / s.row_words, i % s.row_words,
                     got[i], want[i]);
    assert_int_equal(cnt.n_ovf, n_want);
    assert_true(cnt.nnz == want_nnz);
    std::vector<int> gl(cnt.n_ovf);
    cudaCheck(cudaMemcpy(gl.data(), ws->ovf_list, sizeof(int) * gl.size(), cudaMemcpyDeviceToHost));
    std::sort(gl.begin(), gl.end());
    for (int i = 0; i < n_want; i++) assert_int_equal(gl[i], want_ovf[i]);
    printf("    gate %s M=%d D=%d F=%d C=%d: TwELL bit-exact, %d overflow rows, mean nnz %.1f\n", twell_gate_variant_name(ws->gate_variant), P->M, P->D, P->F, P->C,
           n_want, (double)want_nnz / (P->M ? P->M : 1));
}

// Runs the FFN with Y poisoned, checks every element written and the error against float64.
static TwellFFNResult check_ffn(Problem *P, TwellFFNWorkspace *ws, TwellPath path, double hint, const char *what) {
    const size_t n = (size_t)P->M * P->D;
    cudaCheck(cudaMemset(P->dY, 0xFF, sizeof(bf16) * n));  // NaN pattern
    TwellFFNResult res;
    int e = twell_ffn_forward(&g_mm, ws, P->dX, P->gated ? P->dW1 : NULL, P->gated ? P->dWu : P->dW1, P->dWdT, P->dY,
                              P->M, path, hint, &res, 0);
    assert_int_equal(e, TWELL_OK);
    wait_or_die(0, 20.0, what);
    cudaCheck(cudaDeviceSynchronize());
    std::vector<float> y(n);
    download_bf16(y.data(), P->dY, n);
    double num = 0, den = 0;
    int bad_rows = 0;
    for (int m = 0; m < P->M; m++) {
        double rn = 0, rd = 0;
        for (int d = 0; d < P->D; d++) {
            float v = y[(size_t)m * P->D + d];
            double r = P->ref[(size_t)m * P->D + d];
            if (!isfinite(v)) fail_msg("%s: Y[%d,%d] = %g not written / not finite", what, m, d, v);
            rn += (v - r) * (v - r);
            rd += r * r;
        }
        num += rn; den += rd;
        if (rd == 0 && rn != 0) fail_msg("%s: row %d should be exactly zero", what, m);
        if (rd > 0 && sqrt(rn / rd) > 3e-2) {
            if (bad_rows < 5) printf("    %s: row %d rel err %.3g\n", what, m, sqrt(rn / rd));
            bad_rows++;
        }
    }
    double rel = den > 0 ? sqrt(num / den) : sqrt(num);
    printf("    %s M=%d D=%d F=%d C=%d gated=%d: path %s (%s), overflow rows %d, rel err %.2e\n", what, P->M, P->D,
           P->F, P->C, P->gated, res.path == TWELL_PATH_SPARSE ? "sparse" : "dense",
           res.path != TWELL_PATH_SPARSE ? "-" : res.decode ? "decode" : twell_updown_name(res.updown), res.n_overflow,
           rel);
    if (bad_rows) fail_msg("%s: %d rows with rel err > 3e-2", what, bad_rows);
    if (!(rel < 1e-2)) fail_msg("%s: rel err %.3e >= 1e-2", what, rel);
    return res;
}

static int count_ovf_rows(Problem *P) {
    TwellShape s;
    twell_shape_init(&s, P->M, P->F, P->C);
    std::vector<uint32_t> tw((size_t)P->M * s.row_words);
    return twell_pack_cpu(&s, P->pre.data(), (size_t)P->F, tw.data(), NULL, NULL);
}

// Row m's active units (true count) from the exact pre-activations; *ovf = 1 if one of its tiles overflows.
static int row_total(const Problem *P, int m, int *ovf) {
    const int slots = TWELL_TILE / P->C - 1;
    int total = 0;
    *ovf = 0;
    for (int t = 0; t < P->F / TWELL_TILE; t++) {
        int c = 0;
        for (int j = 0; j < TWELL_TILE; j++) c += P->pre[(size_t)m * P->F + t * TWELL_TILE + j] > 0;
        total += c;
        *ovf |= c > slots;
    }
    return total;
}

// From the exact pre-activations: rows the split up/down counts as heavy (not overflowing, at least
// TWELL_SPLIT_HEAVY active units), and the active units of the non-overflow rows and of all rows.
static void row_stats(Problem *P, int *heavy, long long *nnz_ok, long long *nnz_all) {
    *heavy = 0; *nnz_ok = 0; *nnz_all = 0;
    for (int m = 0; m < P->M; m++) {
        int ovf;
        const int total = row_total(P, m, &ovf);
        *heavy += !ovf && total >= TWELL_SPLIT_HEAVY;
        if (!ovf) *nnz_ok += total;
        *nnz_all += total;
    }
}

typedef struct { int M, D, F, C; int gate_chunk; } Shape;
static const Shape kShapes[] = {
    {300, 256, 1024, 8, 2048}, {129, 64, 256, 8, 64}, {1000, 512, 768, 4, 300},
    {77, 128, 512, 2, 2048},   {160, 2048, 5632, 8, 64}, {96, 4096, 512, 4, 96},
};

static void run_shapes(int gated) {
    for (size_t i = 0; i < sizeof kShapes / sizeof kShapes[0]; i++) {
        const Shape sh = kShapes[i];
        Problem P;
        problem_make(&P, sh.M, sh.D, sh.F, sh.C, gated, ROW_MIX, 0, g_seed + 1000 * i + gated);
        TwellFFNWorkspace ws;
        assert_int_equal(twell_ffn_workspace_create(&ws, sh.M, sh.D, sh.F, sh.C, gated), TWELL_OK);
        ws.gate_chunk_rows = sh.gate_chunk;
        if (ws.gate_chunk_rows > sh.M) ws.gate_chunk_rows = sh.M;
        assert_int_equal(ws.gate_scratch_rows, 0);  // the cuBLASLt gate's scratch: only on its first use
        for (int gv = 0; gv < TWELL_GATE_NUM_VARIANTS; gv++) {  // both gates, bit for bit
            ws.gate_variant = gv;
            printf("    gate variant %s, chunk %d\n", twell_gate_variant_name(gv), ws.gate_chunk_rows);
            check_gate(&P, &ws);
        }
        assert_int_equal(ws.gate_scratch_rows, ws.gate_chunk_rows);
        // The cuBLASLt gate's fallback when cuBLASLt has no mask epilogue: the plain GEMM + the full pack kernel.
        ws.gate_variant = TWELL_GATE_CUBLAS;
        ws.gate_mask_failed = 1;
        printf("    gate variant %s without the mask epilogue (plain GEMM + full pack)\n",
               twell_gate_variant_name(ws.gate_variant));
        check_gate(&P, &ws);
        check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "sparse/gate cublas, full pack");
        ws.gate_mask_failed = 0;
        ws.gate_variant = TWELL_GATE_DEFAULT;
        int want_ovf = count_ovf_rows(&P);
        TwellFFNResult r = check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "sparse");
        assert_int_equal(r.path, TWELL_PATH_SPARSE);
        assert_int_equal(r.updown, gated ? TWELL_UPDOWN_SPLIT : TWELL_UPDOWN_FUSED);
        int want_heavy;
        long long nnz_ok, nnz_all;
        row_stats(&P, &want_heavy, &nnz_ok, &nnz_all);
        // The dispatch model's share of active units in rows the up/down computed (the rest: overflow rows).
        printf("    active units in non-overflow rows: %lld of %lld (share %.4f), heavy rows %d\n", nnz_ok, nnz_all,
               ws.last_sparse_share, want_heavy);
        assert_true(ws.last_sparse_share == (double)nnz_ok / (double)nnz_all);
        assert_int_equal(r.n_overflow, want_ovf);
        assert_true(want_ovf > 0);  // the mix always contains overflow rows
        r = check_ffn(&P, &ws, TWELL_PATH_DENSE, -1, "dense");
        assert_int_equal(r.path, TWELL_PATH_DENSE);
        r = check_ffn(&P, &ws, TWELL_PATH_AUTO, -1, "auto");
        // The cuBLASLt gate through the whole FFN too.
        ws.gate_variant = TWELL_GATE_CUBLAS;
        check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "sparse/gate cublas");
        ws.gate_variant = TWELL_GATE_DEFAULT;
        if (gated) {  // the split up/down's row orders (heavy rows first or index order: same results), and its count
            ws.split_order_mode = TWELL_SPLIT_ORDER_INDEX;
            check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "sparse/split/index order");
            ws.split_order_mode = TWELL_SPLIT_ORDER_HEAVY_FIRST;
            check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "sparse/split/heavy rows first");
            ws.split_order_mode = TWELL_SPLIT_ORDER_AUTO;
            printf("    split: %d heavy rows (>= %d active units, not overflowing)\n", want_heavy, TWELL_SPLIT_HEAVY);
            assert_int_equal(ws.split_last_heavy, want_heavy);
        }
        twell_ffn_workspace_free(&ws);
        problem_free(&P);
    }
}

// The Hopper wgmma gate (TWELL_GATE_WGMMA) bit for bit vs the CPU packer on the exact integer inputs, on M not a
// multiple of 128 (1, 77, 129, 1000), D 64..2048, F 256..5632, C 8/4/2, then the whole FFN through it. Every shape
// runs with clusters of 1 and of 2 CTAs (ws.gate_cluster: the Wg tile multicast), each with the full persistent grid
// AND with the grid capped at 4 CTAs (ws.gate_max_ctas), so each CTA walks many
// tiles: the stage ring wraps across tiles and the deferred epilogue runs under the next tile's k steps. Runs first: a hang or a descriptor bug
// shows here, with the variant and shape named (device trap + host watchdog).
typedef struct { int M, D, F, C; } WShape;
static const WShape kWgmmaShapes[] = {
    {1, 64, 256, 8},     {77, 128, 1024, 8},   {128, 2048, 256, 8},  {129, 64, 5632, 8},  {1000, 128, 1024, 4},
    {4096, 64, 1024, 8}, {129, 2048, 5632, 8}, {1000, 2048, 256, 2}, {4096, 128, 1024, 8}, {300, 256, 768, 8},
};
#define N_WSHAPES (sizeof kWgmmaShapes / sizeof kWgmmaShapes[0])
// The problems are made once (CPU reference: seconds) and shared by the variants' tests; freed in main.
static Problem g_wprob[N_WSHAPES + 3];
static int g_wprob_made[N_WSHAPES + 3];
static Problem &wgmma_problem(size_t i) {
    static const double nnzs[] = {8, 29, 128};
    if (!g_wprob_made[i]) {
        if (i < N_WSHAPES) {
            const WShape sh = kWgmmaShapes[i];
            problem_make(&g_wprob[i], sh.M, sh.D, sh.F, sh.C, 1, ROW_MIX, 0, g_seed + 5000 + 17 * i);
        } else {
            problem_make(&g_wprob[i], 333, 128, 5632, 8, 1, ROW_UNIFORM, nnzs[i - N_WSHAPES], g_seed + 6000 + i);
        }
        g_wprob_made[i] = 1;
    }
    return g_wprob[i];
}
static void run_gate_wgmma(int variant) {
    if (!g_have_gpu) skip();
    printf("    variant %s\n", twell_gate_variant_name(variant));
    for (size_t i = 0; i < N_WSHAPES; i++) {
        const WShape sh = kWgmmaShapes[i];
        Problem &P = wgmma_problem(i);
        TwellFFNWorkspace ws;
        assert_int_equal(twell_ffn_workspace_create(&ws, sh.M, sh.D, sh.F, sh.C, 1), TWELL_OK);
        ws.gate_variant = variant;
        assert_int_equal(twell_ffn_set_decode_rows(&ws, 0), TWELL_OK);  // M = 1: the FFN through this gate, not decode
        for (int cl = 1; cl <= 2; cl++) {  // both cluster sizes, whichever this GPU runs by default
            ws.gate_cluster = cl;
            check_gate(&P, &ws);
            check_gate(&P, &ws);  // again: persistent-kernel state must not leak between calls
            ws.gate_max_ctas = 4;  // many tiles per CTA
            check_gate(&P, &ws);
            ws.gate_max_ctas = 0;
        }
        ws.gate_cluster = 0;
        TwellFFNResult r = check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "sparse/gate_wgmma");
        assert_int_equal(r.n_overflow, count_ovf_rows(&P));
        assert_int_equal(ws.gate_scratch_rows, 0);  // no wgmma gate (nor the dense fallback) needs the scratch
        twell_ffn_workspace_free(&ws);
    }
    // Uniform rows (nnz 8, 29, 128) at the paper's width (few positives per tile: the common case of the
    // epilogue), full grid and 2 CTAs (33 tiles each).
    for (size_t i = N_WSHAPES; i < N_WSHAPES + 3; i++) {
        Problem &P = wgmma_problem(i);
        TwellFFNWorkspace ws;
        assert_int_equal(twell_ffn_workspace_create(&ws, 333, 128, 5632, 8, 1), TWELL_OK);
        ws.gate_variant = variant;
        for (int cl = 1; cl <= 2; cl++) {
            ws.gate_cluster = cl;
            check_gate(&P, &ws);
            ws.gate_max_ctas = 2;
            check_gate(&P, &ws);
            ws.gate_max_ctas = 0;
        }
        twell_ffn_workspace_free(&ws);
    }
}
static void test_gate_wgmma(void **state) { (void)state; run_gate_wgmma(TWELL_GATE_WGMMA); }

static void test_gated_mixed_rows(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    run_shapes(1);
}

static void test_nongated_mixed_rows(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    run_shapes(0);
}

// Uniform patterns at nnz 8..256 (F = 5632, the paper's width), sparse and dense, and determinism.
static void test_uniform_nnz(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const double nnzs[] = {8, 16, 29, 64, 128, 256};
    const int M = 200, D = 256, F = 5632;
    TwellFFNWorkspace ws;
    assert_int_equal(twell_ffn_workspace_create(&ws, M, D, F, 8, 1), TWELL_OK);
    assert_int_equal(twell_ffn_set_gate_chunk(&ws, 64), TWELL_OK);  // 4 chunks: the overlap alternates buffers
    for (size_t i = 0; i < sizeof nnzs / sizeof nnzs[0]; i++) {
        Problem P;
        problem_make(&P, M, D, F, 8, 1, ROW_UNIFORM, nnzs[i], g_seed + 77 + i);
        check_gate(&P, &ws);
        TwellFFNResult r = check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "uniform sparse");
        assert_int_equal(r.n_overflow, count_ovf_rows(&P));
        assert_true(fabs(r.mean_nnz - nnzs[i]) < 0.5 * nnzs[i] + 4);  // the construction hits the target
        // Determinism: a second run gives the same bits.
        std::vector<uint16_t> a((size_t)M * D), b((size_t)M * D);
        cudaCheck(cudaMemcpy(a.data(), P.dY, a.size() * 2, cudaMemcpyDeviceToHost));
        check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "uniform sparse again");
        cudaCheck(cudaMemcpy(b.data(), P.dY, b.size() * 2, cudaMemcpyDeviceToHost));
        assert_memory_equal(a.data(), b.data(), a.size() * 2);
        check_ffn(&P, &ws, TWELL_PATH_DENSE, -1, "uniform dense");
        problem_free(&P);
    }
    twell_ffn_workspace_free(&ws);
}

// Every row overflows (fully active), and every row is zero.
static void test_all_full_and_all_zero(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const int M = 130, D = 128, F = 512;
    TwellFFNWorkspace ws;
    assert_int_equal(twell_ffn_workspace_create(&ws, M, D, F, 8, 1), TWELL_OK);
    Problem P;
    problem_make(&P, M, D, F, 8, 1, ROW_ALL_FULL, 0, g_seed + 5);
    for (int gv = 0; gv < TWELL_GATE_NUM_VARIANTS; gv++) {
        ws.gate_variant = gv;
        check_gate(&P, &ws);  // every row overflows: the flag/list atomics of the fused epilogue / packers
    }
    ws.gate_variant = TWELL_GATE_DEFAULT;
    check_gate(&P, &ws);
    TwellFFNResult r = check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "all full");
    assert_int_equal(r.n_overflow, M);
    assert_true(r.mean_nnz == F);
    problem_free(&P);
    problem_make(&P, M, D, F, 8, 1, ROW_ALL_ZERO, 0, g_seed + 6);
    for (int gv = 0; gv < TWELL_GATE_NUM_VARIANTS; gv++) {
        ws.gate_variant = gv;
        check_gate(&P, &ws);
    }
    ws.gate_variant = TWELL_GATE_DEFAULT;
    check_gate(&P, &ws);
    r = check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "all zero");
    assert_int_equal(r.n_overflow, 0);
    assert_true(r.mean_nnz == 0);
    problem_free(&P);
    twell_ffn_workspace_free(&ws);
}

// The sparse paths compute the dense path's function: u and h rounded to bf16 where the dense path rounds them.
// Construction where every sum is exact in fp32 in any order, so any difference is a rounding that one path does
// and the other does not: the gate as in problem_make (exact integers), Wu = k/64 with k odd in [-255, 255] on the
// random columns (bf16 values; u = (sum of +-k)/64 is exact in fp32 and has ~12 significant bits: mostly not a bf16
// value), WdT one-hot (unit n -> column n; F == D): then
// y[m, n] = bf16(relu(g) * bf16(u)) on every path, which the dense, the tile and the decode paths must give bit for
// bit (an fp32 h, or an unrounded u, differs in most active elements).
static void test_same_function(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const int M = 200, D = 512, F = 512;
    TwellFFNWorkspace ws;
    assert_int_equal(twell_ffn_workspace_create(&ws, M, D, F, 8, 1), TWELL_OK);
    for (int rows = M; rows >= 4; rows = rows == M ? 4 : 0) {  // the tile path (200 rows), the decode path (4)
        Problem P;
        problem_make(&P, rows, D, F, 8, 1, ROW_UNIFORM, 24, g_seed + 41 + rows);
        Rng rng;
        rng_seed(&rng, g_seed + 43 + rows);
        for (int n = 0; n < F; n++)
            for (int d = 0; d < D; d++)
                P.Wu[(size_t)n * D + d] = d < 5 ? 0.0f : (float)(2 * (int)rng_below(&rng, 256) - 255) / 64.0f;
        P.WdT.assign((size_t)F * D, 0.0f);
        for (int n = 0; n < F; n++) P.WdT[(size_t)n * D + n] = 1.0f;
        upload_bf16(P.dWu, P.Wu.data(), P.Wu.size());
        upload_bf16(P.dWdT, P.WdT.data(), P.WdT.size());
        std::vector<uint16_t> want((size_t)rows * D);
        long long active = 0, inexact_u = 0;
        for (int m = 0; m < rows; m++)
            for (int n = 0; n < F; n++) {
                const float g = bf16r(P.pre[(size_t)m * F + n]);
                float h = 0.0f;
                if (g > 0) {
                    double u = 0;
                    for (int d = 0; d < D; d++) u += (double)P.X[(size_t)m * D + d] * P.Wu[(size_t)n * D + d];
                    inexact_u += bf16r((float)u) != (float)u;
                    h = bf16r(g * bf16r((float)u));
                    active++;
                }
                const bf16 hb = __float2bfloat16_rn(h);
                memcpy(&want[(size_t)m * D + n], &hb, 2);
            }
        assert_true(inexact_u > active / 2);  // the construction does exercise the rounding of u
        const TwellPath paths[] = {TWELL_PATH_DENSE, TWELL_PATH_SPARSE};
        for (int pi = 0; pi < 2; pi++) {
            cudaCheck(cudaMemset(P.dY, 0xFF, sizeof(bf16) * (size_t)rows * D));
            TwellFFNResult r;
            assert_int_equal(twell_ffn_forward(&g_mm, &ws, P.dX, P.dW1, P.dWu, P.dWdT, P.dY, rows, paths[pi], -1.0, &r, 0),
                             TWELL_OK);
            wait_or_die(0, 20.0, "same function");
            std::vector<uint16_t> got((size_t)rows * D);
            cudaCheck(cudaMemcpy(got.data(), P.dY, got.size() * 2, cudaMemcpyDeviceToHost));
            long long diff = 0;
            for (size_t i = 0; i < got.size(); i++) diff += got[i] != want[i];
            const char *name = r.path == TWELL_PATH_DENSE ? "dense" : r.decode ? "decode" : "tile";
            printf("    same function, %d rows, %lld active (%lld with u not a bf16 value): %s path, %lld of %zu "
                   "elements differ from bf16(relu(g) * bf16(u))\n", rows, active, inexact_u, name, diff, got.size());
            if (paths[pi] == TWELL_PATH_SPARSE) assert_int_equal(r.decode, rows <= ws.decode_rows ? 1 : 0);
            assert_int_equal(diff, 0);
        }
        problem_free(&P);
    }
    twell_ffn_workspace_free(&ws);
}

// Workspaces sharing one set of buffers (the layers of infer): calls interleaved on one stream stay exact, each
// layer keeps its own dispatch state, a borrower's larger cuBLASLt gate chunk grows the owner's scratch, and the
// decode path runs on the shared decode scratch.
static void test_shared_workspaces(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const int M = 256, D = 128, F = 1024;
    TwellFFNWorkspace own, bor, bad;
    assert_int_equal(twell_ffn_workspace_create(&own, M, D, F, 8, 1), TWELL_OK);
    assert_int_equal(twell_ffn_workspace_create_shared(&bor, &own), TWELL_OK);
    assert_int_equal(twell_ffn_workspace_create_shared(&bad, &bor), TWELL_ERR_ARG);  // a borrower owns nothing
    assert_int_equal(twell_ffn_workspace_create_shared(&bad, NULL), TWELL_ERR_ARG);
    assert_true(bor.tw == own.tw && bor.dense.g == own.dense.g && bor.dec_g == own.dec_g);
    assert_true(bor.counters != own.counters && bor.pack_stream != own.pack_stream);
    Problem A, B, C;
    problem_make(&A, M, D, F, 8, 1, ROW_UNIFORM, 8, g_seed + 31);    // sparse layer
    problem_make(&B, M, D, F, 8, 1, ROW_UNIFORM, 200, g_seed + 32);  // dense-ish layer
    problem_make(&C, 4, D, F, 8, 1, ROW_MIX, 0, g_seed + 33);        // decode-sized call
    for (int it = 0; it < 3; it++) {
        TwellFFNResult ra = check_ffn(&A, &own, TWELL_PATH_AUTO, -1, "shared: owner, sparse layer");
        TwellFFNResult rb = check_ffn(&B, &bor, TWELL_PATH_AUTO, -1, "shared: borrower, dense-ish layer");
        assert_int_equal(ra.path, TWELL_PATH_SPARSE);
        assert_int_equal(rb.path, it == 0 ? TWELL_PATH_SPARSE : TWELL_PATH_DENSE);  // measures, then dense
    }
    assert_true(own.last_mean_nnz < 20 && bor.last_mean_nnz > 100);
    // The cuBLASLt gate on the borrower, in 2 chunks of 128 rows: the owner's scratch is made for it.
    bor.gate_variant = TWELL_GATE_CUBLAS;
    assert_int_equal(twell_ffn_set_gate_chunk(&bor, 128), TWELL_OK);
    check_gate(&A, &bor);
    check_ffn(&A, &bor, TWELL_PATH_SPARSE, -1, "shared: borrower, cuBLASLt gate");
    assert_true(own.gate_scratch_rows >= 128 && bor.gate_scratch[0] == own.gate_scratch[0]);
    own.gate_variant = TWELL_GATE_CUBLAS;
    check_ffn(&B, &own, TWELL_PATH_SPARSE, -1, "shared: owner, cuBLASLt gate");
    if (bor.decode_rows >= C.M) {
        TwellFFNResult rc = check_ffn(&C, &bor, TWELL_PATH_SPARSE, -1, "shared: borrower, decode");
        assert_int_equal(rc.decode, 1);
        check_ffn(&C, &own, TWELL_PATH_SPARSE, -1, "shared: owner, decode");
    }
    problem_free(&A); problem_free(&B); problem_free(&C);
    twell_ffn_workspace_free(&bor);
    twell_ffn_workspace_free(&own);
}

// Dispatch: a dense-ish layer goes dense after one measuring call; a hint decides directly.
static void test_dispatch(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const int M = 256, D = 128, F = 1024;
    TwellFFNWorkspace ws;
    assert_int_equal(twell_ffn_workspace_create(&ws, M, D, F, 8, 1), TWELL_OK);
    Problem P;
    problem_make(&P, M, D, F, 8, 1, ROW_UNIFORM, 200, g_seed + 9);
    TwellFFNResult r = check_ffn(&P, &ws, TWELL_PATH_AUTO, -1, "auto first");
    assert_int_equal(r.path, TWELL_PATH_SPARSE);  // unknown: measures
    r = check_ffn(&P, &ws, TWELL_PATH_AUTO, -1, "auto second");
    assert_int_equal(r.path, TWELL_PATH_DENSE);  // 200 > threshold
    r = check_ffn(&P, &ws, TWELL_PATH_AUTO, -1, "auto third");  // dense measured nnz read back
    assert_int_equal(r.path, TWELL_PATH_DENSE);
    assert_true(ws.last_mean_nnz > 100);
    r = check_ffn(&P, &ws, TWELL_PATH_AUTO, 10.0, "auto hint 10");
    assert_int_equal(r.path, TWELL_PATH_SPARSE);
    problem_free(&P);
    twell_ffn_workspace_free(&ws);
}

// Calibration on real data fits a sane model, resets the history, and the FFN stays correct after.
static void test_calibrate(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const int M = 512, D = 256, F = 2048;
    TwellFFNWorkspace ws;
    assert_int_equal(twell_ffn_workspace_create(&ws, M, D, F, 8, 1), TWELL_OK);
    Problem P;
    problem_make(&P, M, D, F, 8, 1, ROW_UNIFORM, 29, g_seed + 11);
    assert_int_equal(twell_ffn_calibrate(&g_mm, &ws, P.dX, P.dW1, P.dWu, P.dWdT, P.dY, M, 3, 0), TWELL_OK);
    printf("    calibrated (tiny problem): s0 %.3f s1 %.5f crossover %.1f\n", ws.model.s0, ws.model.s1,
           twell_dispatch_crossover(&ws.model));
    assert_int_equal(ws.model.calibrated, 1);
    assert_true(isfinite(ws.model.s0) && ws.model.s0 > 0);
    assert_true(isfinite(ws.model.s1) && ws.model.s1 > 0);
    assert_true(ws.last_path == 0 && ws.last_mean_nnz < 0);
    check_ffn(&P, &ws, TWELL_PATH_AUTO, -1, "auto after calibrate");
    check_ffn(&P, &ws, TWELL_PATH_AUTO, -1, "auto after calibrate (2)");
    problem_free(&P);
    // Every row overflows: nothing to fit, the measured ratio becomes the model (the sparse call is the gate plus the
    // whole dense FFN: slower than dense), and AUTO goes dense after its measuring call.
    problem_make(&P, M, D, F, 8, 1, ROW_ALL_FULL, 0, g_seed + 12);
    assert_int_equal(twell_ffn_calibrate(&g_mm, &ws, P.dX, P.dW1, P.dWu, P.dWdT, P.dY, M, 3, 0), TWELL_OK);
    printf("    calibrated (every row overflows): measured ratio %.3f\n", ws.model.s0);
    assert_int_equal(ws.model.calibrated, 2);
    assert_true(ws.model.s1 == 0.0 && ws.model.fovf == 0.0);
    assert_true(ws.model.s0 > 1.0 + ws.model.margin);
    TwellFFNResult r = check_ffn(&P, &ws, TWELL_PATH_AUTO, -1, "auto, every row overflows");
    assert_int_equal(r.path, TWELL_PATH_SPARSE);  // nothing known yet: measures
    r = check_ffn(&P, &ws, TWELL_PATH_AUTO, -1, "auto, every row overflows (2)");
    assert_int_equal(r.path, TWELL_PATH_DENSE);
    problem_free(&P);
    twell_ffn_workspace_free(&ws);
}

static void test_shape_errors(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    TwellFFNWorkspace ws;
    assert_int_equal(twell_ffn_workspace_create(&ws, 64, 128, 300, 8, 1), TWELL_ERR_SHAPE);
    assert_int_equal(twell_ffn_workspace_create(&ws, 64, 100, 512, 8, 1), TWELL_ERR_SHAPE);
    assert_int_equal(twell_ffn_workspace_create(&ws, 64, 128, 512, 3, 1), TWELL_ERR_SHAPE);
    assert_int_equal(twell_ffn_workspace_create(&ws, 64, 16384, 512, 8, 1), TWELL_ERR_SHAPE);
    assert_int_equal(twell_ffn_workspace_create(&ws, 64, 128, 512, 8, 1), TWELL_OK);
    bf16 *buf;
    cudaCheck(cudaMalloc(&buf, sizeof(bf16) * 512 * 128 * 4));
    // The decode path's own checks (twell/decode.cuh), then off: the calls below test the tile path at M 8.
    assert_int_equal(ws.decode_rows, 64);
    assert_int_equal(twell_ffn_set_decode_rows(&ws, 65), TWELL_ERR_ARG);
    assert_int_equal(twell_ffn_set_decode_rows(&ws, -1), TWELL_ERR_ARG);
    assert_int_equal(twell_ffn_set_decode_pdl(&ws, 8), TWELL_ERR_ARG);
    assert_int_equal(twell_ffn_set_decode_pdl(&ws, -1), TWELL_ERR_ARG);
    assert_int_equal(twell_decode_forward(buf, buf, buf, buf, buf, 65, 128, 512, 1, ws.dec_g, ws.dec_cnt, ws.dec_ent,
                                          NULL, 1, 0), TWELL_ERR_SHAPE);
    assert_int_equal(twell_decode_forward(buf, buf, buf, buf, buf, 0, 128, 512, 1, ws.dec_g, ws.dec_cnt, ws.dec_ent,
                                          NULL, 1, 0), TWELL_ERR_SHAPE);
    assert_int_equal(twell_decode_forward(buf, buf, buf, buf, buf, 8, 96, 512, 1, ws.dec_g, ws.dec_cnt, ws.dec_ent,
                                          NULL, 1, 0), TWELL_ERR_SHAPE);
    assert_int_equal(twell_decode_forward(buf, buf, buf, buf, buf, 8, 128, 300, 1, ws.dec_g, ws.dec_cnt, ws.dec_ent,
                                          NULL, 1, 0), TWELL_ERR_SHAPE);
    assert_int_equal(twell_decode_forward(buf + 1, buf, buf, buf, buf, 8, 128, 512, 1, ws.dec_g, ws.dec_cnt,
                                          ws.dec_ent, NULL, 1, 0), TWELL_ERR_ARG);
    assert_int_equal(twell_decode_forward(buf, NULL, buf, buf, buf, 8, 128, 512, 1, ws.dec_g, ws.dec_cnt, ws.dec_ent,
                                          NULL, 1, 0), TWELL_ERR_ARG);
    assert_int_equal(twell_decode_forward(buf, buf, buf, buf, buf, 8, 128, 512, 1, ws.dec_g, ws.dec_cnt, ws.dec_ent,
                                          NULL, 1, 0, 5), TWELL_ERR_ARG);  // 4 or 8 gate warps
    {  // F > 65536: no decode path (the tile path runs every sparse call), and it cannot be switched on
        TwellFFNWorkspace w3;
        assert_int_equal(twell_ffn_workspace_create(&w3, 4, 64, 65792, 8, 1), TWELL_OK);
        assert_int_equal(w3.dec_alloc_rows, 0);
        assert_int_equal(w3.decode_rows, 0);
        assert_int_equal(twell_ffn_set_decode_rows(&w3, 1), TWELL_ERR_ARG);
        twell_ffn_workspace_free(&w3);
    }
    assert_int_equal(twell_ffn_set_decode_rows(&ws, 0), TWELL_OK);
    assert_int_equal(twell_ffn_forward(&g_mm, &ws, buf, buf, buf, buf, buf, 65, TWELL_PATH_SPARSE, -1, NULL, 0),
                     TWELL_ERR_WORKSPACE);
    assert_int_equal(twell_ffn_forward(&g_mm, &ws, buf, NULL, buf, buf, buf, 8, TWELL_PATH_SPARSE, -1, NULL, 0),
                     TWELL_ERR_ARG);
    assert_int_equal(twell_ffn_forward(&g_mm, &ws, buf + 1, buf, buf, buf, buf, 8, TWELL_PATH_SPARSE, -1, NULL, 0),
                     TWELL_ERR_ARG);
    ws.split_order_mode = 99;
    assert_int_equal(twell_ffn_forward(&g_mm, &ws, buf, buf, buf, buf, buf, 8, TWELL_PATH_SPARSE, -1, NULL, 0),
                     TWELL_ERR_ARG);
    ws.split_order_mode = TWELL_SPLIT_ORDER_AUTO;
    ws.gate_variant = 99;
    assert_int_equal(twell_ffn_forward(&g_mm, &ws, buf, buf, buf, buf, buf, 8, TWELL_PATH_SPARSE, -1, NULL, 0),
                     TWELL_ERR_ARG);
    ws.gate_variant = TWELL_GATE_DEFAULT;
    // The wgmma gate names its constraints (D % 64, F % 256, M >= 1, C, 16-byte alignment).
    assert_int_equal(twell_gate_wgmma_launch(buf, buf, 8, 96, 512, 8, ws.tw, ws.ovf_flag, ws.ovf_list, ws.counters, 0),
                     TWELL_ERR_SHAPE);
    assert_int_equal(twell_gate_wgmma_launch(buf, buf, 8, 128, 384, 8, ws.tw, ws.ovf_flag, ws.ovf_list, ws.counters, 0),
                     TWELL_ERR_SHAPE);
    assert_int_equal(twell_gate_wgmma_launch(buf, buf, 0, 128, 512, 8, ws.tw, ws.ovf_flag, ws.ovf_list, ws.counters, 0),
                     TWELL_ERR_SHAPE);
    assert_int_equal(twell_gate_wgmma_launch(buf, buf, 8, 128, 512, 3, ws.tw, ws.ovf_flag, ws.ovf_list, ws.counters, 0),
                     TWELL_ERR_SHAPE);
    assert_int_equal(twell_gate_wgmma_launch(buf + 1, buf, 8, 128, 512, 8, ws.tw, ws.ovf_flag, ws.ovf_list, ws.counters,
                                             0), TWELL_ERR_ARG);
    assert_int_equal(twell_gate_wgmma_launch(buf, buf, 8, 128, 512, 8, ws.tw, ws.ovf_flag, ws.ovf_list, ws.counters, 0,
                                             0, 3), TWELL_ERR_ARG);  // clusters of 1 or 2 CTAs only
    assert_int_equal(twell_ffn_set_gate_chunk(&ws, 0), TWELL_ERR_ARG);
    // The fused up/down names its constraint on D.
    assert_int_equal(twell_updown_launch(ws.tw, buf, buf, 1, 100, 512, 8, NULL, 0), TWELL_ERR_SHAPE);
    assert_int_equal(twell_updown_launch(ws.tw, buf, buf, 1, 16384, 512, 8, NULL, 0), TWELL_ERR_SHAPE);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaFree(buf));
    twell_ffn_workspace_free(&ws);
}

// The decode path (twell/decode.cuh: M <= TWELL_DECODE_MAX_M rows, taken by twell_ffn_forward's sparse path):
// its gate bit for bit against the exact pre-activations (relu, then bf16), its tile counts and nnz counter exact,
// the FFN within 1e-2 of float64 with Y poisoned (every element written), no overflow rows whatever the row (fully
// active tiles, heavy rows), two runs bit-identical, the count read back by the next call; gated and non-gated,
// M 1..64 (one, several and partial 16-row tiles of the gate), D 64..2048 (D 192 / 320: a partial 256-column slice
// in the down), F 256..5632; mixed rows (zero, heavy, full tiles, selectors), uniform nnz 8 / 29 / 256, all full,
// all zero.
typedef struct { int M, D, F, gated, kind; double nnz; } DShape;
static const DShape kDecodeShapes[] = {
    {1, 2048, 5632, 1, ROW_UNIFORM, 29}, {1, 64, 256, 1, ROW_MIX, 0},       {2, 128, 1024, 0, ROW_MIX, 0},
    {15, 256, 512, 1, ROW_MIX, 0},       {16, 2048, 5632, 1, ROW_MIX, 0},   {17, 192, 768, 1, ROW_UNIFORM, 8},
    {33, 512, 2048, 0, ROW_UNIFORM, 29}, {64, 2048, 5632, 1, ROW_UNIFORM, 256}, {64, 128, 1024, 1, ROW_ALL_FULL, 0},
    {40, 64, 512, 0, ROW_ALL_FULL, 0},   {9, 256, 512, 1, ROW_ALL_ZERO, 0}, {64, 320, 1280, 1, ROW_MIX, 0},
};
static void test_decode(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    for (size_t i = 0; i < sizeof kDecodeShapes / sizeof kDecodeShapes[0]; i++) {
        const DShape sh = kDecodeShapes[i];
        Problem P;
        problem_make(&P, sh.M, sh.D, sh.F, 8, sh.gated, sh.kind, sh.nnz, g_seed + 9000 + 31 * i);
        TwellFFNWorkspace ws;
        assert_int_equal(twell_ffn_workspace_create(&ws, sh.M, sh.D, sh.F, 8, sh.gated), TWELL_OK);
        assert_int_equal(ws.decode_rows, sh.M);  // min(TWELL_DECODE_MAX_M, max_M)
        const int tiles = sh.F / TWELL_TILE, groups = sh.F / TWELL_DEC_GROUP;
        cudaCheck(cudaMemset(ws.dec_g, 0xFF, sizeof(bf16) * (size_t)sh.M * sh.F));  // poison
        cudaCheck(cudaMemset(ws.dec_cnt, 0xFF, sizeof(int) * (size_t)sh.M * groups));
        cudaCheck(cudaMemset(ws.dec_ent, 0xFF, sizeof(uint2) * (size_t)sh.M * sh.F));
        TwellFFNResult r = check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "decode");
        assert_int_equal(r.path, TWELL_PATH_SPARSE);
        assert_int_equal(r.decode, 1);
        assert_int_equal(r.n_overflow, 0);
        // The gate bit for bit; the group lists: counts, units in order, h = g * (x . Wu[unit]) (gated) or g; the
        // device nnz count.
        std::vector<float> g((size_t)sh.M * sh.F);
        download_bf16(g.data(), ws.dec_g, g.size());
        std::vector<int> cnt((size_t)sh.M * groups);
        cudaCheck(cudaMemcpy(cnt.data(), ws.dec_cnt, sizeof(int) * cnt.size(), cudaMemcpyDeviceToHost));
        std::vector<uint2> ent((size_t)sh.M * sh.F);
        cudaCheck(cudaMemcpy(ent.data(), ws.dec_ent, sizeof(uint2) * ent.size(), cudaMemcpyDeviceToHost));
        long long want_nnz = 0;
        int full_tiles = 0;
        double worst_h = 0.0;
        for (int m = 0; m < sh.M; m++) {
            for (int t = 0; t < tiles; t++) {
                int c = 0;
                for (int j = 0; j < TWELL_TILE; j++) {
                    const size_t k = (size_t)m * sh.F + t * TWELL_TILE + j;
                    const float want = bf16r(P.pre[k] > 0 ? P.pre[k] : 0.0f);
                    if (!(g[k] == want) || signbit(g[k]))
                        fail_msg("decode gate M=%d D=%d F=%d: g[%d, %d] = %g, want %g", sh.M, sh.D, sh.F, m,
                                 t * TWELL_TILE + j, g[k], want);
                    c += want > 0;
                }
                want_nnz += c;
                full_tiles += c > TWELL_TILE / 8 - 1;  // tiles the C = 8 TwELL could not hold
            }
            for (int gr = 0; gr < groups; gr++) {
                int c = 0;
                for (int u = 0; u < TWELL_DEC_GROUP; u++) {
                    const int n = gr * TWELL_DEC_GROUP + u;
                    const size_t k = (size_t)m * sh.F + n;
                    if (!(g[k] > 0)) continue;
                    const uint2 e = ent[(size_t)m * sh.F + gr * TWELL_DEC_GROUP + c++];
                    if ((int)e.x != n)
                        fail_msg("decode list row %d group %d: entry %d has unit %u, want %d", m, gr, c - 1, e.x, n);
                    // non-gated: h = g; gated: g * (x . Wu[n]) in float64, the error relative to g * sum |x Wu|
                    double want = g[k], scale = g[k];
                    if (sh.gated) {
                        double dot = 0.0, mag = 0.0;
                        for (int d = 0; d < sh.D; d++) {
                            const double p = (double)P.X[(size_t)m * sh.D + d] * (double)P.Wu[(size_t)n * sh.D + d];
                            dot += p;
                            mag += fabs(p);
                        }
                        want *= dot;
                        scale *= mag;
                    }
                    float gotf;
                    memcpy(&gotf, &e.y, sizeof gotf);
                    // h = bf16(g * bf16(dot)), as on the dense path: a bf16 value within two roundings (each at most
                    // 2^-8 relative: 8 significant bits) and the fp32 dot's error of the exact value
                    const double err = fabs((double)gotf - want) / (scale > 0 ? scale : 1.0) -
                                       (sh.gated ? 2.01 * ldexp(fabs(want), -8) / (scale > 0 ? scale : 1.0) : 0.0);
                    if (sh.gated && bf16r(gotf) != gotf)
                        fail_msg("decode list row %d unit %d: h = %.9g is not a bf16 value", m, n, (double)gotf);
                    if (!(err < 1e-5))
                        fail_msg("decode list row %d unit %d: h = %.6g, want %.6g", m, n, (double)gotf, want);
                    worst_h = err > worst_h ? err : worst_h;
                }
                if (cnt[(size_t)m * groups + gr] != c)
                    fail_msg("decode count row %d group %d: %d, want %d", m, gr, cnt[(size_t)m * groups + gr], c);
            }
        }
        assert_true(*ws.dense_nnz_host == (unsigned long long)want_nnz);
        assert_true(fabs(twell_ffn_read_count(&ws) - (double)want_nnz / sh.M) < 1e-9);  // the copy has landed
        // The other gate width (4 or 8 split-K warps per CTA; 4 only at more than 32 rows) gives the same g, counts,
        // lists and Y (the pre-activations here are exact in any order; the up sums each pair in the same order).
        {
            std::vector<uint16_t> y0((size_t)sh.M * sh.D), y1(y0.size()), g1((size_t)sh.M * sh.F);
            std::vector<int> cnt1(cnt.size());
            std::vector<uint2> ent1(ent.size());
            cudaCheck(cudaMemcpy(y0.data(), P.dY, 2 * y0.size(), cudaMemcpyDeviceToHost));
            ws.dec_gate_warps = twell_decode_gate_warps(sh.M) == 8 ? 4 : 8;
            cudaCheck(cudaMemset(ws.dec_g, 0xFF, sizeof(bf16) * (size_t)sh.M * sh.F));
            cudaCheck(cudaMemset(ws.dec_cnt, 0xFF, sizeof(int) * (size_t)sh.M * groups));
            cudaCheck(cudaMemset(ws.dec_ent, 0xFF, sizeof(uint2) * (size_t)sh.M * sh.F));
            r = check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "decode, other gate width");
            ws.dec_gate_warps = 0;
            assert_int_equal(r.decode, 1);
            cudaCheck(cudaMemcpy(y1.data(), P.dY, 2 * y1.size(), cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(g1.data(), ws.dec_g, 2 * g1.size(), cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(cnt1.data(), ws.dec_cnt, sizeof(int) * cnt1.size(), cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(ent1.data(), ws.dec_ent, sizeof(uint2) * ent1.size(), cudaMemcpyDeviceToHost));
            for (size_t k = 0; k < g1.size(); k++)
                if (g1[k] != sllm_f32_to_bf16(g[k])) fail_msg("decode, other gate width: g[%zu] differs", k);
            assert_memory_equal(cnt.data(), cnt1.data(), sizeof(int) * cnt.size());
            for (int m = 0; m < sh.M; m++)
                for (int gr = 0; gr < groups; gr++)
                    for (int j = 0; j < cnt[(size_t)m * groups + gr]; j++) {
                        const size_t k = (size_t)m * sh.F + gr * TWELL_DEC_GROUP + j;
                        if (ent[k].x != ent1[k].x || ent[k].y != ent1[k].y)
                            fail_msg("decode, other gate width: row %d group %d entry %d differs", m, gr, j);
                    }
            assert_memory_equal(y0.data(), y1.data(), 2 * y0.size());
        }
        printf("    decode M=%d D=%d F=%d gated=%d: gate bit-exact, %lld active (%.1f per row) listed in order, h "
               "within %.1e of float64, %d tiles over the TwELL C=8 capacity, none overflowing here\n", sh.M, sh.D,
               sh.F, sh.gated, want_nnz, (double)want_nnz / sh.M, worst_h, full_tiles);
        // Determinism, and the next call reads the count back (no sync in the decode call itself).
        std::vector<uint16_t> a((size_t)sh.M * sh.D), b((size_t)sh.M * sh.D);
        cudaCheck(cudaMemcpy(a.data(), P.dY, a.size() * 2, cudaMemcpyDeviceToHost));
        r = check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "decode again");
        assert_int_equal(r.decode, 1);
        cudaCheck(cudaMemcpy(b.data(), P.dY, b.size() * 2, cudaMemcpyDeviceToHost));
        assert_memory_equal(a.data(), b.data(), a.size() * 2);
        assert_true(fabs(ws.last_mean_nnz - (double)want_nnz / sh.M) < 1e-9);
        // AUTO at these rows: the decode model decides (pairs of the call); the dense path stays correct.
        r = check_ffn(&P, &ws, TWELL_PATH_AUTO, -1, "decode auto");
        const double pred = twell_decode_predict(&ws.dec_model, sh.M, (double)want_nnz / sh.M);
        if (pred < 1.0 - ws.dec_model.margin) assert_int_equal(r.path, TWELL_PATH_SPARSE);
        if (pred > 1.0 + ws.dec_model.margin) assert_int_equal(r.path, TWELL_PATH_DENSE);
        check_ffn(&P, &ws, TWELL_PATH_DENSE, -1, "dense");
        twell_ffn_workspace_free(&ws);
        problem_free(&P);
    }
}

// The tile path without a host sync (tile_sync 0, what infer's prefill runs): the overflow rows on the device's
// dense-row kernel (their number read on the device) against the float64 reference, the rows that do not overflow
// bit-identical to the synced call's (same gate and up/down), the counts taken later equal to the CPU packer's,
// deterministic, captured in a CUDA graph and replayed to the same bits; with many overflow rows expected the call
// syncs for cuBLASLt (counted) and gives the synced call's bits. Gated and non-gated, mixed rows and all rows full.
static void test_tile_no_sync(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    typedef struct { int M, D, F, gated, kind; } TShape;
    const TShape shapes[] = {{1000, 256, 1024, 1, ROW_MIX}, {300, 128, 768, 0, ROW_MIX}, {130, 128, 512, 1, ROW_ALL_FULL},
                             {77, 2048, 5632, 1, ROW_MIX}};
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) {
        const TShape sh = shapes[i];
        Problem P;
        problem_make(&P, sh.M, sh.D, sh.F, 8, sh.gated, sh.kind, 0, g_seed + 9700 + 31 * i);
        TwellShape tsh;
        twell_shape_init(&tsh, P.M, P.F, P.C);
        std::vector<uint32_t> tw((size_t)P.M * tsh.row_words);
        std::vector<int> ovf_rows(P.M);
        uint64_t nnz = 0;
        const int n_ovf = twell_pack_cpu(&tsh, P.pre.data(), (size_t)P.F, tw.data(), ovf_rows.data(), &nnz);
        std::vector<char> is_ovf(P.M, 0);
        for (int k = 0; k < n_ovf; k++) is_ovf[ovf_rows[k]] = 1;
        TwellFFNWorkspace ws;
        assert_int_equal(twell_ffn_workspace_create(&ws, P.M, P.D, P.F, 8, P.gated), TWELL_OK);
        assert_int_equal(twell_ffn_set_decode_rows(&ws, 0), TWELL_OK);
        assert_true(ws.dr_grid > 0);  // D % 128 == 0: the dense-row kernel can run
        const size_t n = (size_t)P.M * P.D;
        std::vector<uint16_t> y_sync(n), y_dev(n), y2(n);
        TwellFFNResult r = check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "tile, synced");
        assert_int_equal(r.synced, 1);
        assert_int_equal(r.n_overflow, n_ovf);
        cudaCheck(cudaMemcpy(y_sync.data(), P.dY, n * 2, cudaMemcpyDeviceToHost));
        ws.tile_sync = 0;
        ws.last_ovf_frac = 0.0;  // no overflow rows expected: the device's dense-row kernel
        const long long syncs = ws.tile_host_syncs, ovf_before = ws.tile_ovf_rows, rows_before = ws.tile_rows;
        r = check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "tile, no sync");
        assert_int_equal(r.synced, 0);
        assert_int_equal(r.n_overflow, -1);
        assert_true(r.mean_nnz == -1.0);
        cudaCheck(cudaMemcpy(y_dev.data(), P.dY, n * 2, cudaMemcpyDeviceToHost));
        twell_ffn_read_tile_stats(&ws);
        assert_int_equal(ws.tile_host_syncs, syncs);
        assert_int_equal(ws.tile_ovf_rows - ovf_before, n_ovf);
        assert_int_equal(ws.tile_rows - rows_before, P.M);
        assert_true(ws.last_mean_nnz == (double)nnz / P.M);
        int differ = 0;
        for (int m = 0; m < P.M; m++)
            if (!is_ovf[m] && memcmp(&y_sync[(size_t)m * P.D], &y_dev[(size_t)m * P.D], (size_t)P.D * 2)) differ++;
        if (differ) fail_msg("%d rows without overflow differ between the synced and the unsynced call", differ);
        ws.last_ovf_frac = 0.0;
        check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "tile, no sync, again");
        cudaCheck(cudaMemcpy(y2.data(), P.dY, n * 2, cudaMemcpyDeviceToHost));
        assert_memory_equal(y_dev.data(), y2.data(), n * 2);
        // Captured: the same bits at every replay.
        twell_ffn_read_tile_stats(&ws);
        ws.last_ovf_frac = 0.0;
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        const int e = twell_ffn_forward(&g_mm, &ws, P.dX, P.gated ? P.dW1 : NULL, P.gated ? P.dWu : P.dW1, P.dWdT,
                                        P.dY, P.M, TWELL_PATH_SPARSE, -1, &r, s);
        cudaCheck(cudaStreamEndCapture(s, &graph));
        assert_int_equal(e, TWELL_OK);
        assert_int_equal(r.synced, 0);
        cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
        for (int rep = 0; rep < 2; rep++) {
            cudaCheck(cudaMemset(P.dY, 0xFF, n * 2));
            cudaCheck(cudaGraphLaunch(exec, s));
            wait_or_die(s, 20.0, "tile path graph");
            cudaCheck(cudaMemcpy(y2.data(), P.dY, n * 2, cudaMemcpyDeviceToHost));
            assert_memory_equal(y_dev.data(), y2.data(), n * 2);
        }
        cudaCheck(cudaGraphExecDestroy(exec));
        cudaCheck(cudaGraphDestroy(graph));
        // Many overflow rows expected: the call syncs (counted) and runs cuBLASLt: the synced call's bits.
        if (P.M > TWELL_OVF_DEVICE_ROWS) {
            ws.last_ovf_frac = 1.0;
            r = check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "tile, no sync, many overflow rows expected");
            assert_int_equal(r.synced, 1);
            assert_int_equal(r.n_overflow, n_ovf);
            assert_int_equal(ws.tile_host_syncs, syncs + 1);
            cudaCheck(cudaMemcpy(y2.data(), P.dY, n * 2, cudaMemcpyDeviceToHost));
            assert_memory_equal(y_sync.data(), y2.data(), n * 2);
        }
        printf("    M=%d D=%d F=%d gated=%d: %d overflow rows on the device's count, counts taken later, graph "
               "replays bit-identical\n", P.M, P.D, P.F, P.gated, n_ovf);
        assert_true(n_ovf > 0);
        twell_ffn_workspace_free(&ws);
        problem_free(&P);
    }
    cudaCheck(cudaStreamDestroy(s));
}

// The decode and dense paths under stream capture (a CUDA graph): the graph's output equals the direct call's bit
// for bit; the tile path, which syncs the host, is refused with an error under capture; the workspace keeps
// working after.
static void test_decode_graph(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    const int M = 4, D = 256, F = 1024;
    Problem P;
    problem_make(&P, M, D, F, 8, 1, ROW_MIX, 0, g_seed + 9500);
    TwellFFNWorkspace ws;
    assert_int_equal(twell_ffn_workspace_create(&ws, 64, D, F, 8, 1), TWELL_OK);
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    const size_t n = (size_t)M * D;
    for (int path = TWELL_PATH_DENSE; path <= TWELL_PATH_SPARSE; path++) {
        const char *name = path == TWELL_PATH_SPARSE ? "decode" : "dense";
        check_ffn(&P, &ws, (TwellPath)path, -1, name);  // direct call (also warms cuBLASLt's algorithm cache)
        std::vector<uint16_t> want(n), got(n);
        cudaCheck(cudaMemcpy(want.data(), P.dY, n * 2, cudaMemcpyDeviceToHost));
        cudaGraph_t graph;
        cudaGraphExec_t exec;
        cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        TwellFFNResult r;
        const int e = twell_ffn_forward(&g_mm, &ws, P.dX, P.dW1, P.dWu, P.dWdT, P.dY, M, (TwellPath)path, -1, &r, s);
        cudaCheck(cudaStreamEndCapture(s, &graph));
        assert_int_equal(e, TWELL_OK);
        assert_int_equal(r.path, path);
        cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
        for (int rep = 0; rep < 2; rep++) {
            cudaCheck(cudaMemset(P.dY, 0xFF, n * 2));
            cudaCheck(cudaGraphLaunch(exec, s));
            cudaCheck(cudaStreamSynchronize(s));
            cudaCheck(cudaMemcpy(got.data(), P.dY, n * 2, cudaMemcpyDeviceToHost));
            assert_memory_equal(want.data(), got.data(), n * 2);
        }
        printf("    %s path captured in a CUDA graph: 2 replays bit-identical to the direct call\n", name);
        cudaCheck(cudaGraphExecDestroy(exec));
        cudaCheck(cudaGraphDestroy(graph));
    }
    // AUTO under capture decides by the graph model (dec_model_graph), eagerly by the eager one: models set to
    // opposite certainties (ratio 0.1 and 10) give opposite paths; the captured graph replays its path's bits.
    {
        TwellDispatchModel eager = ws.dec_model, graphm = ws.dec_model_graph;
        ws.dec_model.s0 = 0.1; ws.dec_model.s1 = ws.dec_model.sm = ws.dec_model.sn = ws.dec_model.sg4 = 0.0;
        ws.dec_model_graph.s0 = 10.0;
        ws.dec_model_graph.s1 = ws.dec_model_graph.sm = ws.dec_model_graph.sn = ws.dec_model_graph.sg4 = 0.0;
        TwellFFNResult r = check_ffn(&P, &ws, TWELL_PATH_AUTO, -1, "auto, eager model says decode");
        assert_int_equal(r.path, TWELL_PATH_SPARSE);
        cudaGraph_t graph;
        cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        const int e = twell_ffn_forward(&g_mm, &ws, P.dX, P.dW1, P.dWu, P.dWdT, P.dY, M, TWELL_PATH_AUTO, -1, &r, s);
        cudaCheck(cudaStreamEndCapture(s, &graph));
        assert_int_equal(e, TWELL_OK);
        assert_int_equal(r.path, TWELL_PATH_DENSE);
        cudaCheck(cudaGraphDestroy(graph));
        std::swap(ws.dec_model.s0, ws.dec_model_graph.s0);  // and the other way round
        r = check_ffn(&P, &ws, TWELL_PATH_AUTO, -1, "auto, eager model says dense");
        assert_int_equal(r.path, TWELL_PATH_DENSE);
        cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        assert_int_equal(twell_ffn_forward(&g_mm, &ws, P.dX, P.dW1, P.dWu, P.dWdT, P.dY, M, TWELL_PATH_AUTO, -1, &r, s),
                         TWELL_OK);
        cudaCheck(cudaStreamEndCapture(s, &graph));
        assert_int_equal(r.path, TWELL_PATH_SPARSE);
        assert_int_equal(r.decode, 1);
        cudaCheck(cudaGraphDestroy(graph));
        ws.dec_model = eager;
        ws.dec_model_graph = graphm;
        printf("    auto: the eager model decides eager calls, the graph model captured ones (both ways)\n");
    }
    // The tile path syncs: refused under capture, nothing launched.
    assert_int_equal(twell_ffn_set_decode_rows(&ws, 0), TWELL_OK);
    {
        cudaGraph_t graph;
        cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        const int e = twell_ffn_forward(&g_mm, &ws, P.dX, P.dW1, P.dWu, P.dWdT, P.dY, M, TWELL_PATH_SPARSE, -1, NULL, s);
        cudaCheck(cudaStreamEndCapture(s, &graph));
        assert_int_equal(e, TWELL_ERR_ARG);
        size_t nodes = 99;
        cudaCheck(cudaGraphGetNodes(graph, NULL, &nodes));
        assert_int_equal(nodes, 0);
        cudaCheck(cudaGraphDestroy(graph));
    }
    TwellFFNResult r = check_ffn(&P, &ws, TWELL_PATH_SPARSE, -1, "tile path after the graphs");
    assert_int_equal(r.decode, 0);
    assert_int_equal(twell_ffn_set_decode_rows(&ws, 64), TWELL_OK);
    check_ffn(&P, &ws, TWELL_PATH_AUTO, -1, "auto after the graphs");
    cudaCheck(cudaStreamDestroy(s));
    twell_ffn_workspace_free(&ws);
    problem_free(&P);
}

// The decode path's programmatic dependent launches (twell_ffn_set_decode_pdl): L layers through ONE workspace (each
// layer reuses the g / cnt / ent scratch the layer before reads), launched back to back with no sync, eagerly and as a
// CUDA graph (buffers and scratch poisoned first), equal the same layers run with plain launches and a device sync
// after every layer, bit for bit. In the
// chained problems layer l + 1 reads layer l's output (X_{l+1} = Y_l; its W1 has no large selector columns, so the
// values stay finite): a gate that read X, or overwrote the lists, before the kernel before it finished would differ.
// M 1 / 4 / 16 / 64 (1, 1 and 4 row tiles in the gate), gated and non-gated.
static void test_decode_pdl(void **state) {
    (void)state;
    if (!g_have_gpu) skip();
    struct { DShape sh; int chain; } cases[] = {{{1, 2048, 5632, 1, ROW_UNIFORM, 29}, 0},
                                                {{16, 512, 2048, 1, ROW_MIX, 0}, 0},
                                                {{4, 2048, 5632, 0, ROW_UNIFORM, 29}, 1},
                                                {{64, 256, 1024, 0, ROW_UNIFORM, 64}, 1}};
    const int L = 4;
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const DShape sh = cases[i].sh;
        const int chain = cases[i].chain;
        Problem P[L];
        for (int l = 0; l < L; l++) {
            problem_make(&P[l], sh.M, sh.D, sh.F, 8, sh.gated, sh.kind, sh.nnz, g_seed + 9700 + 13 * i + l);
            if (chain && l > 0) {  // X is the previous layer's output: no selector columns (x[1..4] * BIG)
                for (int n = 0; n < sh.F; n++)
                    for (int d = 0; d < 5; d++) P[l].W1[(size_t)n * sh.D + d] = 0.0f;
                upload_bf16(P[l].dW1, P[l].W1.data(), P[l].W1.size());
            }
        }
        TwellFFNWorkspace ws;
        assert_int_equal(twell_ffn_workspace_create(&ws, sh.M, sh.D, sh.F, 8, sh.gated), TWELL_OK);
        const size_t n = (size_t)sh.M * sh.D;
        bf16 *out[L];
        for (int l = 0; l < L; l++) cudaCheck(cudaMalloc(&out[l], sizeof(bf16) * n));
        auto layer = [&](int l) {
            TwellFFNResult r;
            const bf16 *X = chain && l > 0 ? out[l - 1] : P[l].dX;
            const int e = twell_ffn_forward(&g_mm, &ws, X, sh.gated ? P[l].dW1 : NULL, sh.gated ? P[l].dWu : P[l].dW1,
                                            P[l].dWdT, out[l], sh.M, TWELL_PATH_SPARSE, -1, &r, s);
            assert_int_equal(e, TWELL_OK);
            assert_int_equal(r.decode, 1);
        };
        auto poison = [&]() {
            for (int l = 0; l < L; l++) cudaCheck(cudaMemsetAsync(out[l], 0xFF, sizeof(bf16) * n, s));
            cudaCheck(cudaMemsetAsync(ws.dec_cnt, 0xFF, sizeof(int) * sh.M * (sh.F / TWELL_DEC_GROUP), s));
            cudaCheck(cudaMemsetAsync(ws.dec_ent, 0xFF, sizeof(uint2) * sh.M * sh.F, s));
        };
        auto compare = [&](const std::vector<std::vector<uint16_t>> &want, const char *how) {
            cudaCheck(cudaStreamSynchronize(s));
            std::vector<uint16_t> got(n);
            for (int l = 0; l < L; l++) {
                cudaCheck(cudaMemcpy(got.data(), out[l], n * 2, cudaMemcpyDeviceToHost));
                if (memcmp(want[l].data(), got.data(), n * 2))
                    fail_msg("decode layers M=%d chain=%d: layer %d differs with programmatic launches (%s)", sh.M,
                             chain, l, how);
            }
        };
        // Reference: plain launches, a sync after every layer.
        assert_int_equal(twell_ffn_set_decode_pdl(&ws, 0), TWELL_OK);
        poison();
        std::vector<std::vector<uint16_t>> want(L, std::vector<uint16_t>(n));
        double nnz[L];
        for (int l = 0; l < L; l++) {
            layer(l);
            wait_or_die(s, 20.0, "decode layers (plain launches)");
            layer(l);  // again, on the same input: picks up the count of the call before (its copy has landed)
            wait_or_die(s, 20.0, "decode layers (plain launches)");
            nnz[l] = ws.last_mean_nnz;
            cudaCheck(cudaMemcpy(want[l].data(), out[l], n * 2, cudaMemcpyDeviceToHost));
        }
        int nonzero = 0;
        for (int l = 0; l < L; l++)
            for (size_t k = 0; k < n; k++) {
                const uint16_t v = want[l][k];
                if ((v & 0x7F80) == 0x7F80)
                    fail_msg("decode layers M=%d chain=%d: layer %d output %zu not finite (0x%04x)", sh.M, chain, l, k,
                             v);
                nonzero += (v & 0x7FFF) != 0;
            }
        assert_true(nonzero > 0);
        assert_int_equal(twell_ffn_set_decode_pdl(&ws, 1), TWELL_OK);
        for (int rep = 0; rep < 2; rep++) {
            poison();
            for (int l = 0; l < L; l++) layer(l);
            wait_or_die(s, 20.0, "decode layers (programmatic launches)");
            compare(want, "eager");
            cudaGraph_t graph;
            cudaGraphExec_t exec;
            cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
            for (int l = 0; l < L; l++) layer(l);
            cudaCheck(cudaStreamEndCapture(s, &graph));
            size_t nodes = 0;
            cudaCheck(cudaGraphGetNodes(graph, NULL, &nodes));
            assert_int_equal(nodes, 2 * L);  // a gate and a down per layer, nothing else
            cudaCheck(cudaGraphInstantiate(&exec, graph, 0));
            poison();
            cudaCheck(cudaGraphLaunch(exec, s));
            wait_or_die(s, 20.0, "decode layers graph (programmatic launches)");
            compare(want, "graph");
            cudaCheck(cudaGraphExecDestroy(exec));
            cudaCheck(cudaGraphDestroy(graph));
        }
        printf("    decode M=%d D=%d F=%d gated=%d, %d layers%s (mean active units %.1f %.1f %.1f %.1f): programmatic "
               "launches, eager and as a graph (x2), bit-identical to plain launches with a sync per layer\n", sh.M, sh.D,
               sh.F, sh.gated, L, chain ? " chained (X = the previous Y)" : "", nnz[0], nnz[1], nnz[2], nnz[3]);
        for (int l = 0; l < L; l++) cudaCheck(cudaFree(out[l]));
        twell_ffn_workspace_free(&ws);
        for (int l = 0; l < L; l++) problem_free(&P[l]);
    }
    cudaCheck(cudaStreamDestroy(s));
}

// --selfcheck: CPU-only check of the problem generator (runs without a GPU): overflow rows and nnz.
static int selfcheck(void) {
    for (size_t i = 0; i < sizeof kShapes / sizeof kShapes[0]; i++) {
        const Shape sh = kShapes[i];
        Problem P;
        problem_make(&P, sh.M, sh.D, sh.F, sh.C, 1, ROW_MIX, 0, g_seed + i);
        TwellShape s;
        twell_shape_init(&s, P.M, P.F, P.C);
        std::vector<uint32_t> tw((size_t)P.M * s.row_words);
        uint64_t nnz;
        int novf = twell_pack_cpu(&s, P.pre.data(), (size_t)P.F, tw.data(), NULL, &nnz);
        int zero_rows = 0;
        for (int m = 0; m < P.M; m++) {
            double r = 0;
            for (int d = 0; d < P.D; d++) r += fabs(P.ref[(size_t)m * P.D + d]);
            zero_rows += r == 0;
        }
        printf("mix M=%d D=%d F=%d C=%d: overflow rows %d, mean nnz %.1f, zero rows %d, row0..3 nnz", P.M, P.D, P.F,
               P.C, novf, (double)nnz / P.M, zero_rows);
        for (int m = 0; m < 4; m++) {
            int c = 0;
            for (int n = 0; n < P.F; n++) c += P.pre[(size_t)m * P.F + n] > 0;
            printf(" %d", c);
        }
        printf("\n");
    }
    const double nnzs[] = {8, 16, 29, 64, 128, 256};
    for (size_t i = 0; i < 6; i++) {
        Problem P;
        problem_make(&P, 200, 256, 5632, 8, 1, ROW_UNIFORM, nnzs[i], g_seed + 77 + i);
        TwellShape s;
        twell_shape_init(&s, P.M, P.F, P.C);
        std::vector<uint32_t> tw((size_t)P.M * s.row_words);
        uint64_t nnz;
        int novf = twell_pack_cpu(&s, P.pre.data(), (size_t)P.F, tw.data(), NULL, &nnz);
        printf("uniform target %.0f: mean nnz %.1f, overflow rows %d\n", nnzs[i], (double)nnz / P.M, novf);
    }
    return 0;
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shape_errors),        cmocka_unit_test(test_gate_wgmma),
        cmocka_unit_test(test_all_full_and_all_zero),
        cmocka_unit_test(test_gated_mixed_rows),    cmocka_unit_test(test_nongated_mixed_rows),
        cmocka_unit_test(test_uniform_nnz),
        cmocka_unit_test(test_dispatch),           cmocka_unit_test(test_shared_workspaces),
        cmocka_unit_test(test_same_function),
        cmocka_unit_test(test_calibrate),
        cmocka_unit_test(test_tile_no_sync),
        cmocka_unit_test(test_decode),              cmocka_unit_test(test_decode_graph),
        cmocka_unit_test(test_decode_pdl),
    };
    GPU_TEST_PREFLIGHT("test_twell", tests);
    g_seed = gpu_test_seed("test_twell");
    if (argc > 1 && strcmp(argv[1], "--selfcheck") == 0) { g_have_gpu = 0; return selfcheck(); }
    g_have_gpu = cuda_device_available();
    if (g_have_gpu) matmul_context_init(&g_mm);
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    for (size_t i = 0; i < N_WSHAPES + 3; i++)
        if (g_wprob_made[i] && g_have_gpu) problem_free(&g_wprob[i]);
    if (g_have_gpu) matmul_context_free(&g_mm);
    return rc;
}
