// dev/bench/bench_ffn.cu: TwELL FFN vs dense gated FFN (cuBLASLt), same process, same inputs.
//
//   build/bench_ffn [--quick] [--M 16384,65536] [--nnz 8,16,29,64,128,256,50%] [--pattern uniform|heavy|both]
//                   [--reps N] [--variant K] [--gate-variant K] [--gate-chunk R] [--interleave] [--l2persist]
//                   [--no-calibrate] [--tune] [--sliced] [--gather] [--split-g] [--split-up] [--variants]
//                   [--no-wgmma] [--gates 2,3,4,5,7,8] [--D 2048] [--F 5632]
// --tune: per M, twell_ffn_tune_gate (the gate GEMM's fastest cuBLASLt algorithm, opt-in) and the same for the
//         "gate" column's GEMM, before the rows.
// --split-g: a line under each row with the split kernels' units per step side by side: the up stage (order + up)
//         for GU 2 / 4 / 8 and the down stage for GD 2 / 4 / 8 (every chunk through buffer 0), and the sparse FFN
//         for every ws->split_units setting (TWELL_SPLIT_UNITS_*).
// --split-up: a line under each row with the split up/down's up kernels side by side (ws->split_up): the up stage
//         alone (every chunk through buffer 0; token-major, blocked 256, blocked 512), the blocked ups' build / up /
//         finish kernels alone, and the sparse FFN with each, timed in one interleaved round set, and the rows the
//         blocked ups left to the token-major up (blocks over capacity).
// --gather: a line under each row with the L2 gather probes alone (16-byte loads as in --variants, and whole rows
//         through cp.async.bulk), at the up/down's traffic for nnz 29.
// --sliced: a line under each row with the sparse FFN through the sliced up/down (twell/sliced.cuh), timed in
//         the same rounds, that up/down alone, and its stages (compaction / up / reduce / down, events).
//
// Timing method: the columns of one configuration are timed INTERLEAVED: each of --reps (default 15)
// rounds runs every column once (in a fresh random order each round, fixed seed), each call timed
// alone with CUDA events (synchronized); the table shows medians. So slow drift of the GPU (clocks,
// temperature) hits every column alike and the ratios (auto/min) are not skewed by run-to-run noise.
// Columns (ms, medians, inputs rotated over 3 X sets):
//   gate    one dense cuBLASLt GEMM [M,D] x [D,F] -> bf16 (the floor of any dense-gate design)
//   dense   our dense gated FFN (twell/dense_ffn.cuh: 3 GEMMs + relu*mul)
//   sparse  our TwELL FFN (the default gate -> TwELL, the default up/down (AUTO: split, the up and the down as
//           two token-major kernels, for gated layers), dense fallback for overflow rows)
//   s.gate / s.updown   the two parts of the sparse path timed alone
//   sp.old / ud.old     the previous default path in the same rounds (runs 18-22): the same gate + the fused
//           token-major up/down (nt128_g2), and that up/down alone
//   auto    the dispatched path (TWELL_PATH_AUTO, history from the warm-up calls), with the model from
//           twell_ffn_calibrate (run once per M on the uniform nnz-29 data, printed) unless --no-calibrate
//   g.wgmma / sp.wgmma  the gate -> TwELL and the sparse FFN with the first wgmma gate of --gates (default
//           TWELL_GATE_WGMMA, fused pack epilogue), side by side with s.gate / sparse (default gate)
//   "gates" line under each row: every wgmma gate variant of --gates (default 2,3,4,5,7,8 = wgmma, wgmma_c2,
//           wgmma_pk, wgmma_c2pk, wgmma_fe, wgmma_fo; twell/gate.cuh), timed in the SAME interleaved rounds: g = gate alone,
//           sp = sparse FFN through it, g/cublas = its gate time / the cuBLASLt GEMM alone (the "gate"
//           column), twdiff = TwELL rows differing from the default gate's. Off with --no-wgmma.
//   then sparse/gate, dense/sparse, auto/min(dense, sparse), old/sp (sp.old / sparse), measured mean nnz and overflow
//   rows, the auto path, and st/min: what the STATIC default model (TWELL_DISPATCH_*) would pick / min.
//   The wgmma FFN output is checked against the dense one like the default sparse path, and the number
//   of TwELL rows where the two gates differ is printed (twdiff). Random inputs: fp32 sums in another order
//   differ by ~1e-6 relative, which moves a bf16 rounding (~3e-4 of the active values) or the sign of a value
//   next to 0: up to ~1-2 thousand of 65536 rows may differ; most rows differing would be a bug (the
//   bit-exact check is test_twell's job, on integer inputs).
// --variants adds, per configuration, side by side (ms):
//   gate:    s.gate for the gate variants x chunk rows 2048 4096 8192 16384
//   gemm:    the chunked GEMM alone (chunk rows as above), and the pack kernel alone over all M rows
//            (chunks of 2048 / 8192 read from one scratch buffer: L2-resident vs HBM)
//   updown:  every up/down variant; the default variant with interleaved weights, L2 window, both
// At the end: the crossover nnz per (M, pattern), and the model fitted to the uniform rows (paste into
// TWELL_DISPATCH_S0 / S1 in twell/ffn.cuh).
// Before timing, the sparse and dense outputs are compared (relative error < 1e-2, else exit 1).
//
// Sparsity control: X [M, D] ~ N(0,1) and Wg [F, D] ~ N(0, 1/D) except column 0: Wg[n,0] = 1 and
// X[m,0] = -sigma_m * z(p_m), sigma_m^2 = sum_{d>=1} X[m,d]^2 / D (the variance over n of the random
// part of row m), z(p) = sqrt(2) erfcinv(2p): so each gate of row m is positive with probability p_m,
// independently over n (given x_m): per-row nnz ~ Binomial(F, p_m).
//   uniform: p_m = nnz / F for every row.
//   heavy:   position t = m mod 2048 in a 2048-token sequence, weight w_t = 1 + 40 exp(-t/8), p_m =
//            nnz/F * w_t / mean(w) (capped at 0.95): the first tokens of each sequence fire ~30x more
//            (about 1000 of 5632 at nnz 29), like real models; the mean stays nnz.
//   "50%":   p = 0.5 for every row (every tile overflows: the sparse path is all fallback).
// Wu, WdT ~ N(0, 0.02). All generated on the device (hash RNG), fresh per configuration.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <functional>
#include <vector>

#include "cuda_common.cuh"
#include "matmul.cuh"
#include "twell/ffn.cuh"
#include "dev/bench/bench_gen.cuh"
#include "dev/bench/bench_rows.cuh"

typedef struct {
    int quick, reps, variant, variants, D, F, gate_variant, gate_chunk, interleave, l2persist, calibrate, wgmma, tune;
    int sliced, gather, splitg, splitup;
    std::vector<int> Ms;
    std::vector<int> gates;  // wgmma gate variants timed side by side (empty: none)
    std::vector<double> nnzs;  // < 0 means 50%
    int pat_uniform, pat_heavy;
} Opts;

// The same gather through the bulk-copy engine (TMA, cp.async.bulk): thread 0 of each CTA copies R whole rows
// (chunks x 16 B each) into shared memory per step, completing on an mbarrier; the CTA then reads them from
// shared memory (XOR, as above). Compared with bench_l2_gather: whether L2 serves whole-row bulk requests faster
// than 16-byte loads.
template <int R>
__global__ void bench_l2_gather_bulk(const uint4 *__restrict__ W, int nrows, int chunks, int per_cta, uint64_t seed,
                                     uint32_t *out) {
    extern __shared__ __align__(128) uint4 bench_rows[];  // [R][chunks]
    __shared__ __align__(8) uint64_t bar;
    const uint32_t sbar = twg_smem_addr(&bar);  // mbarrier and bulk-copy helpers: twell/gate_wgmma.cuh
    if (threadIdx.x == 0) {
        twg_mbar_init(sbar, 1);
        twg_fence_barrier_init();
    }
    __syncthreads();
    uint32_t acc = 0, phase = 0;
    const uint32_t row_bytes = (uint32_t)chunks * 16u;
    for (int i = 0; i < per_cta; i += R) {
        const int nr = per_cta - i < R ? per_cta - i : R;
        if (threadIdx.x == 0) {
            twg_mbar_arrive_expect_tx(sbar, row_bytes * nr);
            for (int j = 0; j < nr; j++) {
                const int r = bench_random_row((uint32_t)seed, blockIdx.x, (uint32_t)(i + j), nrows);
                twg_bulk_copy(twg_smem_addr(bench_rows + (size_t)j * chunks), W + (size_t)r * chunks, row_bytes, sbar);
            }
        }
        twg_mbar_wait(sbar, phase);
        phase ^= 1;
        for (int c = threadIdx.x; c < nr * chunks; c += blockDim.x) {
            const uint4 v = bench_rows[c];
            acc ^= v.x ^ v.y ^ v.z ^ v.w;
        }
        __syncthreads();  // every thread done reading before the next step's copies overwrite the rows
    }
    if (acc == 0x12345678u) out[blockIdx.x] = acc;
}


int main(int argc, char **argv) {
    Opts o;
    o.quick = 0; o.reps = 15; o.variant = 0; o.wgmma = 1; o.variants = 0; o.D = 2048; o.F = 5632;
    o.gate_variant = TWELL_GATE_DEFAULT; o.gate_chunk = 0; o.interleave = 0; o.l2persist = 0; o.calibrate = 1;
    o.tune = 0; o.sliced = 0; o.gather = 0; o.splitg = 0; o.splitup = 0;
    o.Ms = {16384, 65536, 131072};
    o.nnzs = {8, 16, 29, 64, 128, 256, -0.5};
    o.pat_uniform = 1; o.pat_heavy = 1;
    o.gates = {TWELL_GATE_WGMMA, TWELL_GATE_WGMMA_C2, TWELL_GATE_WGMMA_PK, TWELL_GATE_WGMMA_C2PK, TWELL_GATE_WGMMA_FE, TWELL_GATE_WGMMA_FO};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) {
            printf("usage: bench_ffn [--quick] [--M 16384,65536] [--nnz 8,16,29,64,128,256,50%%] [--pattern uniform|heavy|both]\n"
                   "                 [--reps N] [--variant K] [--gate-variant K] [--gate-chunk R] [--interleave] [--l2persist]\n"
                   "                 [--no-calibrate] [--tune] [--sliced] [--gather] [--split-g] [--split-up] [--variants]\n"
                   "                 [--no-wgmma] [--gates 2,3,4,5,7,8] [--D 2048] [--F 5632]\n"
                   "Times the dense gated FFN (cuBLASLt), the TwELL FFN and the dispatched path on the same inputs with a\n"
                   "controlled mean number of non-zeros per token (uniform or heavy-tailed), interleaved, medians; checks\n"
                   "sparse against dense first. Columns and options are described at the top of dev/bench/bench_ffn.cu.\n");
            return 0;
        }
        if (!strcmp(a, "--quick")) { o.quick = 1; o.Ms = {65536}; o.nnzs = {8, 29, 64, 128, 256}; o.pat_heavy = 1; o.reps = 5; }
        else if (!strcmp(a, "--M") && v) { o.Ms.clear(); for (double x : parse_list(v)) o.Ms.push_back((int)x); i++; }
        else if (!strcmp(a, "--nnz") && v) { o.nnzs = parse_list(v); i++; }
        else if (!strcmp(a, "--pattern") && v) {
            o.pat_uniform = !strcmp(v, "uniform") || !strcmp(v, "both");
            o.pat_heavy = !strcmp(v, "heavy") || !strcmp(v, "both");
            i++;
        } else if (!strcmp(a, "--reps") && v) { o.reps = atoi(v); i++; }
        else if (!strcmp(a, "--variant") && v) { o.variant = atoi(v); i++; }
        else if (!strcmp(a, "--variants")) { o.variants = 1; }
        else if (!strcmp(a, "--gate-variant") && v) { o.gate_variant = atoi(v); i++; }
        else if (!strcmp(a, "--gate-chunk") && v) { o.gate_chunk = atoi(v); i++; }
        else if (!strcmp(a, "--interleave")) { o.interleave = 1; }
        else if (!strcmp(a, "--l2persist")) { o.l2persist = 1; }
        else if (!strcmp(a, "--no-calibrate")) { o.calibrate = 0; }
        else if (!strcmp(a, "--tune")) { o.tune = 1; }
        else if (!strcmp(a, "--sliced")) { o.sliced = 1; }
        else if (!strcmp(a, "--gather")) { o.gather = 1; }
        else if (!strcmp(a, "--split-g")) { o.splitg = 1; }
        else if (!strcmp(a, "--split-up")) { o.splitup = 1; }
        else if (!strcmp(a, "--no-wgmma")) { o.wgmma = 0; o.gates.clear(); }
        else if (!strcmp(a, "--gates") && v) {
            o.gates.clear();
            for (double x : parse_list(v)) {
                if (!twell_gate_is_wgmma((int)x)) {
                    fprintf(stderr, "error: bench_ffn: --gates %s: %d is not a wgmma gate variant (%d..%d)\n", v, (int)x,
                            TWELL_GATE_WGMMA, TWELL_GATE_NUM_VARIANTS - 1);
                    return 1;
                }
                o.gates.push_back((int)x);
            }
            o.wgmma = !o.gates.empty();
            i++;
        }
        else if (!strcmp(a, "--D") && v) { o.D = atoi(v); i++; }
        else if (!strcmp(a, "--F") && v) { o.F = atoi(v); i++; }
        else { fprintf(stderr, "error: bench_ffn: unknown or incomplete option '%s' (see the header of dev/bench/bench_ffn.cu)\n", a); return 1; }
    }
    if (!cuda_device_available()) { fprintf(stderr, "error: bench_ffn: no CUDA device\n"); return 1; }
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("bench_ffn: %s, %d SMs, L2 %d MB (persisting max %d MB); D=%d F=%d C=8 reps=%d; updown %s, gate %s, "
           "interleave %d, l2persist %d\n", prop.name, prop.multiProcessorCount, prop.l2CacheSize >> 20,
           prop.persistingL2CacheMaxSize >> 20, o.D, o.F, o.reps, twell_updown_variant_name(o.variant),
           twell_gate_variant_name(o.gate_variant), o.interleave, o.l2persist);
    const int D = o.D, F = o.F, NSETS = 3;
    int maxM = 0;
    for (int m : o.Ms) maxM = std::max(maxM, m);

    MatmulContext mm;
    matmul_context_init(&mm);
    bf16 *X[NSETS], *Wg, *Wu, *WdT, *Wi, *Y, *Yd, *Gs;
    for (int s = 0; s < NSETS; s++) cudaCheck(cudaMalloc(&X[s], sizeof(bf16) * (size_t)maxM * D));
    cudaCheck(cudaMalloc(&Wg, sizeof(bf16) * (size_t)F * D));
    cudaCheck(cudaMalloc(&Wu, sizeof(bf16) * (size_t)F * D));
    cudaCheck(cudaMalloc(&WdT, sizeof(bf16) * (size_t)F * D));
    cudaCheck(cudaMalloc(&Wi, sizeof(bf16) * (size_t)F * 2 * D));
    cudaCheck(cudaMalloc(&Y, sizeof(bf16) * (size_t)maxM * D));
    cudaCheck(cudaMalloc(&Yd, sizeof(bf16) * (size_t)maxM * D));
    cudaCheck(cudaMalloc(&Gs, sizeof(bf16) * (size_t)maxM * F));
    double *dsum;
    cudaCheck(cudaMalloc(&dsum, 3 * sizeof(double)));
    TwellFFNWorkspace ws;
    if (twell_ffn_workspace_create(&ws, maxM, D, F, 8, 1) != TWELL_OK) return 1;
    // This bench times the tile path at every M (its s.gate / s.updown columns are its parts); the decode path that
    // twell_ffn_forward takes at M <= TWELL_DECODE_MAX_M is timed by dev/bench/bench_decode.cu.
    twell_ffn_set_decode_rows(&ws, 0);
    ws.updown_variant = o.variant;
    ws.gate_variant = o.gate_variant;
    const int chunks_sweep[5] = {4096, 8192, 16384, 32768, 65536};
    if (o.variants) {  // scratch for the sweep (the cuBLASLt gates' GEMMs below use it directly)
        if (twell_ffn_set_gate_chunk(&ws, 65536) != TWELL_OK) return 1;
        twell_ffn_gate_scratch_ensure(&ws);
    }
    const int default_chunk = o.gate_chunk > 0 ? o.gate_chunk : ws.gate_chunk_rows;
    if (twell_ffn_set_gate_chunk(&ws, default_chunk) != TWELL_OK) return 1;
    const TwellDispatchModel static_model = ws.model;
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    uint64_t seed = 1234;

    // Fresh inputs for (M, pattern, target nnz).
    auto make_inputs = [&](int M, int heavy, double target) {
        seed++;
        for (int s = 0; s < NSETS; s++) {
            bench_fill_normal<<<1024, 256>>>(X[s], (long long)M * D, 1.0f, seed * 16 + s);
            bench_set_bias<<<CEIL_DIV(M, 8), 256>>>(X[s], M, D, F, (float)target, heavy);
        }
        bench_fill_normal<<<1024, 256>>>(Wg, (long long)F * D, 1.0f / sqrtf((float)D), seed * 16 + 5);
        bench_set_col0<<<CEIL_DIV(F, 256), 256>>>(Wg, F, D, 1.0f);
        bench_fill_normal<<<1024, 256>>>(Wu, (long long)F * D, 0.02f, seed * 16 + 6);
        bench_fill_normal<<<1024, 256>>>(WdT, (long long)F * D, 0.02f, seed * 16 + 7);
        cudaCheckLaunch();
        if (twell_interleave_weights(Wu, WdT, F, D, Wi, 0) != TWELL_OK) exit(1);
        cudaCheck(cudaDeviceSynchronize());
    };
    // The options under test (set per timing, restored to the command line's).
    auto set_opts = [&](int interleave, int l2) {
        twell_ffn_set_interleaved(&ws, interleave ? Wi : NULL);
        if (twell_ffn_set_l2_persist(&ws, l2) != TWELL_OK && l2) printf("  (l2persist unavailable)\n");
    };
    set_opts(o.interleave, o.l2persist);
    // Interleaved timing: medians of o.reps rounds, each round runs every fn once (a fresh random order each round).
    auto timeit_rr = [&](std::vector<std::function<void(int)>> fns) {
        const size_t n = fns.size();
        for (int w = 0; w < 2; w++)
            for (size_t k = 0; k < n; k++) fns[k](w % NSETS);
        std::vector<std::vector<float>> t(n);
        std::vector<size_t> order(n);
        uint64_t lcg = 0x9E3779B97F4A7C15ull;
        for (int r = 0; r < o.reps; r++) {
            // A fresh random order of the columns each round (Fisher-Yates, fixed seed): no column always follows
            // the same one (a fixed rotation put "auto" right after the long sparse call in 7 of 8 rounds, which
            // cost it 3-9% at M 131072, run 58 of dev/RESULTS.md).
            for (size_t k = 0; k < n; k++) order[k] = k;
            for (size_t k = n - 1; k > 0; k--) {
                lcg = lcg * 6364136223846793005ull + 1442695040888963407ull;
                std::swap(order[k], order[(size_t)((lcg >> 33) % (k + 1))]);
            }
            for (size_t k0 = 0; k0 < n; k0++) {
                const size_t k = order[k0];
                cudaCheck(cudaEventRecord(e0, 0));
                fns[k](r % NSETS);
                cudaCheck(cudaEventRecord(e1, 0));
                cudaCheck(cudaEventSynchronize(e1));
                float ms;
                cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
                t[k].push_back(ms);
            }
        }
        std::vector<float> med(n);
        for (size_t k = 0; k < n; k++) med[k] = median(t[k]);
        return med;
    };
    auto timeit = [&](auto fn) {
        for (int w = 0; w < 2; w++) fn(w % NSETS);
        std::vector<float> t;
        for (int r = 0; r < o.reps; r++) {
            cudaCheck(cudaEventRecord(e0, 0));
            fn(r % NSETS);
            cudaCheck(cudaEventRecord(e1, 0));
            cudaCheck(cudaEventSynchronize(e1));
            float ms;
            cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
            t.push_back(ms);
        }
        return median(t);
    };

    int failures = 0;
    struct Row { int M, heavy; double nnz, dense, sparse, sparse_wgmma; std::vector<double> sparse_g; };
    std::vector<Row> rows;
    for (int M : o.Ms) {
        if (o.calibrate) {
            make_inputs(M, 0, 29.0);
            ws.model = static_model;
            int e = twell_ffn_calibrate(&mm, &ws, X[0], Wg, Wu, WdT, Y, M, 5, 0);
            printf("\ncalibrated model (M=%d, uniform nnz 29): s0 %.4f s1 %.6f -> crossover %.1f nnz (static "
                   "default: s0 %.4f s1 %.6f -> %.1f)%s\n", M, ws.model.s0, ws.model.s1,
                   twell_dispatch_crossover(&ws.model), static_model.s0, static_model.s1,
                   twell_dispatch_crossover(&static_model), e ? "  CALIBRATION FAILED" : "");
        }
        if (o.tune) {
            make_inputs(M, 0, 29.0);
            float f = 0, b = 0;
            twell_ffn_tune_gate(&mm, &ws, X[0], Wg, M, 5, &f, &b);
            printf("tuned gate GEMM (M=%d, chunk %d, %s): heuristic's first choice %.3f ms, fastest %.3f ms\n", M,
                   std::min(ws.gate_chunk_rows, M), twell_gate_variant_name(ws.gate_variant), f, b);
            // The "gate" column's GEMM ([M, D] x [D, F] in one call) is tuned too: the ratio compares like with like.
            matmul_tune(&mm, Gs, X[0], Wg, M, F, D, MATMUL_EPI_NONE, NULL, 5, 0, &f, &b);
            printf("tuned plain GEMM (M=%d, the gate column): heuristic's first choice %.3f ms, fastest %.3f ms\n", M, f, b);
            // the dense FFN's GEMMs stay untuned (its own shapes; tuning them would only widen dense/sparse)
        }
        printf("\n%-7s %-7s %-6s | %8s %8s %8s %8s %8s %8s | %8s %8s | %8s %8s | %8s %8s %8s %8s | %7s %6s %-6s %s %s\n",
               "M", "pattern", "nnz", "gate", "dense", "sparse", "s.gate", "s.updown", "auto", "sp.old", "ud.old",
               "g.wgmma", "sp.wgmma", "sp/gate", "dn/sp", "auto/min", "old/sp", "meannz", "ovf", "auto", "st/min",
               "twdiff");
        for (int heavy = 0; heavy <= 1; heavy++) {
            if ((heavy && !o.pat_heavy) || (!heavy && !o.pat_uniform)) continue;
            for (double nz : o.nnzs) {
                if (nz < 0 && heavy) continue;  // 50% is one pattern
                const double target = nz < 0 ? -nz * F : nz;
                make_inputs(M, heavy, target);

                // correctness: sparse vs dense on set 0
                TwellFFNResult rs, rd;
                cudaCheck(cudaMemset(Y, 0xFF, sizeof(bf16) * (size_t)M * D));
                if (twell_ffn_forward(&mm, &ws, X[0], Wg, Wu, WdT, Y, M, TWELL_PATH_SPARSE, -1, &rs, 0)) return 1;
                if (twell_ffn_forward(&mm, &ws, X[0], Wg, Wu, WdT, Yd, M, TWELL_PATH_DENSE, -1, &rd, 0)) return 1;
                cudaCheck(cudaMemset(dsum, 0, 3 * sizeof(double)));
                bench_diff<<<512, 256>>>(Y, Yd, (long long)M * D, dsum);
                double hs[3];
                cudaCheck(cudaMemcpy(hs, dsum, sizeof hs, cudaMemcpyDeviceToHost));
                double rel = sqrt(hs[0] / (hs[1] > 0 ? hs[1] : 1));
                if (!(rel < 1e-2) || hs[2] != 0) {
                    printf("CORRECTNESS FAILURE: M=%d %s nnz %g: sparse vs dense rel err %.3e, non-finite %g\n", M,
                           heavy ? "heavy" : "uniform", target, rel, hs[2]);
                    failures++;
                }

                // The wgmma gates: FFN correctness vs dense, and TwELL rows that differ from the default gate's.
                const size_t NG = o.gates.size();
                std::vector<long long> tw_diff(NG, -1);
                std::vector<TwellFFNResult> rws(NG);
                if (o.wgmma) {
                    const size_t twn = (size_t)M * (F / 8);
                    std::vector<uint32_t> ta(twn), tb(twn);
                    if (twell_gate_forward(&mm, &ws, X[0], Wg, M, 0)) return 1;
                    cudaCheck(cudaMemcpy(ta.data(), ws.tw, twn * 4, cudaMemcpyDeviceToHost));
                    for (size_t g = 0; g < NG; g++) {
                        const int gv = o.gates[g];
                        TwellFFNResult &rw = rws[g];
                        rw = {0, -1, -1.0};
                        ws.gate_variant = gv;
                        if (twell_gate_forward(&mm, &ws, X[0], Wg, M, 0)) return 1;
                        cudaCheck(cudaMemcpy(tb.data(), ws.tw, twn * 4, cudaMemcpyDeviceToHost));
                        cudaCheck(cudaMemset(Y, 0xFF, sizeof(bf16) * (size_t)M * D));
                        if (twell_ffn_forward(&mm, &ws, X[0], Wg, Wu, WdT, Y, M, TWELL_PATH_SPARSE, -1, &rw, 0)) return 1;
                        ws.gate_variant = o.gate_variant;
                        long long nd = 0;
                        for (int m = 0; m < M; m++)
                            nd += memcmp(&ta[(size_t)m * (F / 8)], &tb[(size_t)m * (F / 8)], (F / 8) * 4) != 0;
                        tw_diff[g] = nd;
                        cudaCheck(cudaMemset(dsum, 0, 3 * sizeof(double)));
                        bench_diff<<<512, 256>>>(Y, Yd, (long long)M * D, dsum);
                        cudaCheck(cudaMemcpy(hs, dsum, sizeof hs, cudaMemcpyDeviceToHost));
                        double relw = sqrt(hs[0] / (hs[1] > 0 ? hs[1] : 1));
                        if (rw.n_overflow != rs.n_overflow)  // a value within fp32 rounding of a tile's 31/32 boundary
                            printf("note: gate %s: %d overflow rows, default gate %d (M=%d %s nnz %g)\n",
                                   twell_gate_variant_name(gv), rw.n_overflow, rs.n_overflow, M,
                                   heavy ? "heavy" : "uniform", target);
                        if (!(relw < 1e-2) || hs[2] != 0) {
                            printf("CORRECTNESS FAILURE (gate %s): M=%d %s nnz %g: sparse vs dense rel err %.3e, "
                                   "non-finite %g, overflow rows %d (default gate %d), TwELL rows differing %lld\n",
                                   twell_gate_variant_name(gv), M, heavy ? "heavy" : "uniform", target, relw, hs[2],
                                   rw.n_overflow, rs.n_overflow, nd);
                            failures++;
                        }
                    }
                }
                const long long tw_diff_rows = NG ? tw_diff[0] : -1;
                // Dispatch state of the auto column alone (the forced dense/sparse calls of the other columns
                // must not feed its hysteresis): saved after each auto call, restored before the next.
                double auto_nnz = ws.last_mean_nnz, auto_ovf = ws.last_ovf_frac, auto_share = ws.last_sparse_share;
                int auto_last = ws.last_path;
                TwellFFNResult ra = {0, -1, -1};
                std::vector<std::function<void(int)>> fns = {
                    [&](int s) { matmul(&mm, Gs, 0, X[s], 0, Wg, 1, M, F, D, 1.0f, 0.0f, 0); },
                    [&](int s) { twell_ffn_forward(&mm, &ws, X[s], Wg, Wu, WdT, Yd, M, TWELL_PATH_DENSE, -1, NULL, 0); },
                    [&](int s) { twell_ffn_forward(&mm, &ws, X[s], Wg, Wu, WdT, Y, M, TWELL_PATH_SPARSE, -1, NULL, 0); },
                    [&](int s) {
                        // Every earlier column is synchronized, so a pending dense count is complete: no wait
                        // inside the timed region. All columns run the same data (nnz), so whichever dense
                        // call left it measured this configuration's nnz.
                        if (ws.dense_nnz_pending) {
                            cudaCheck(cudaEventSynchronize(ws.dense_nnz_ready));
                            if (auto_last == TWELL_PATH_DENSE)
                                auto_nnz = (double)*ws.dense_nnz_host / (double)ws.dense_nnz_pending_M;
                            ws.dense_nnz_pending = 0;
                        }
                        ws.last_mean_nnz = auto_nnz; ws.last_ovf_frac = auto_ovf; ws.last_path = auto_last;
                        ws.last_sparse_share = auto_share;
                        twell_ffn_forward(&mm, &ws, X[s], Wg, Wu, WdT, Y, M, TWELL_PATH_AUTO, -1, &ra, 0);
                        auto_nnz = ws.last_mean_nnz; auto_ovf = ws.last_ovf_frac; auto_last = ws.last_path;
                        auto_share = ws.last_sparse_share;
                    },
                    [&](int s) { twell_gate_forward(&mm, &ws, X[s], Wg, M, 0); },
                    [&](int s) { twell_ffn_updown(&ws, X[s], Wu, WdT, Y, M, 0); },
                    [&](int s) {  // the previous default path (runs 18-22): mask gate + the fused token-major up/down
                        const int uv = ws.updown_variant;
                        ws.updown_variant = TWELL_UPDOWN_DEFAULT;
                        twell_ffn_forward(&mm, &ws, X[s], Wg, Wu, WdT, Y, M, TWELL_PATH_SPARSE, -1, NULL, 0);
                        ws.updown_variant = uv;
                    },
                    [&](int s) {  // the fused token-major up/down alone (on the TwELL left by the previous column)
                        const int uv = ws.updown_variant;
                        ws.updown_variant = TWELL_UPDOWN_DEFAULT;
                        twell_ffn_updown(&ws, X[s], Wu, WdT, Y, M, 0);
                        ws.updown_variant = uv;
                    },
                };
                if (o.sliced) {
                    fns.push_back([&](int s) {  // sparse FFN with the sliced up/down
                        const int uv = ws.updown_variant;
                        ws.updown_variant = TWELL_UPDOWN_SLICED;
                        twell_ffn_forward(&mm, &ws, X[s], Wg, Wu, WdT, Y, M, TWELL_PATH_SPARSE, -1, NULL, 0);
                        ws.updown_variant = uv;
                    });
                    fns.push_back([&](int s) {  // the sliced up/down alone
                        const int uv = ws.updown_variant;
                        ws.updown_variant = TWELL_UPDOWN_SLICED;
                        twell_ffn_updown(&ws, X[s], Wu, WdT, Y, M, 0);
                        ws.updown_variant = uv;
                    });
                }
                const size_t WG0 = fns.size();
                for (size_t g = 0; g < NG; g++) {  // columns WG0 + 2g (gate alone), WG0 + 1 + 2g (sparse FFN)
                    const int gv = o.gates[g];
                    fns.push_back([&, gv](int s) {
                        ws.gate_variant = gv;
                        twell_gate_forward(&mm, &ws, X[s], Wg, M, 0);
                        ws.gate_variant = o.gate_variant;
                    });
                    fns.push_back([&, gv](int s) {
                        ws.gate_variant = gv;
                        twell_ffn_forward(&mm, &ws, X[s], Wg, Wu, WdT, Y, M, TWELL_PATH_SPARSE, -1, NULL, 0);
                        ws.gate_variant = o.gate_variant;
                    });
                }
                twell_gate_forward(&mm, &ws, X[0], Wg, M, 0);  // a TwELL for the first up/down call
                const std::vector<float> tm = timeit_rr(fns);
                const float t_gate = tm[0], t_dense = tm[1], t_sparse = tm[2], t_auto = tm[3], t_sgate = tm[4],
                            t_updown = tm[5];
                const float t_old = tm[6], t_udold = tm[7];
                const float t_gw = o.wgmma ? tm[WG0] : NAN, t_spw = o.wgmma ? tm[WG0 + 1] : NAN;
                const TwellPath st = twell_dispatch_decide(&static_model, rs.mean_nnz, (double)rs.n_overflow / M, 0);
                const float tmin = std::min(t_dense, t_sparse);
                char nzs[16];
                if (nz < 0) snprintf(nzs, sizeof nzs, "%g%%", -nz * 100); else snprintf(nzs, sizeof nzs, "%g", nz);
                printf("%-7d %-7s %-6s | %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f | %8.3f %8.3f | %8.3f %8.3f | %8.2f %8.2f "
                       "%8.3f %8.2f | %7.1f %6d %-6s %.3f %lld\n",
                       M, heavy ? "heavy" : "uniform", nzs, t_gate, t_dense, t_sparse, t_sgate, t_updown, t_auto, t_old,
                       t_udold, t_gw, t_spw, t_sparse / t_gate, t_dense / t_sparse, t_auto / tmin, t_old / t_sparse,
                       rs.mean_nnz, rs.n_overflow, ra.path == TWELL_PATH_SPARSE ? "sparse" : "dense",
                       (st == TWELL_PATH_SPARSE ? t_sparse : t_dense) / tmin, tw_diff_rows);
                if (o.sliced && ws.sl_ok) {  // the sliced stages, 5 runs
                    const int uv = ws.updown_variant;
                    ws.updown_variant = TWELL_UPDOWN_SLICED;
                    twell_gate_forward(&mm, &ws, X[0], Wg, M, 0);
                    std::vector<float> st4[4];
                    ws.sl.timing = 1;
                    for (int r = 0; r < 6; r++) {
                        twell_ffn_updown(&ws, X[0], Wu, WdT, Y, M, 0);
                        cudaCheck(cudaDeviceSynchronize());
                        float ms4[4];
                        twell_sliced_stage_ms(&ws.sl, ms4);
                        if (r > 0)
                            for (int k = 0; k < 4; k++) st4[k].push_back(ms4[k]);
                    }
                    ws.sl.timing = 0;
                    TwellCounters hc;
                    cudaCheck(cudaMemcpy(&hc, ws.counters, sizeof hc, cudaMemcpyDeviceToHost));
                    ws.updown_variant = uv;
                    printf("    sliced: sparse FFN %.3f ms (%.2fx gate), up/down %.3f | stages (medians of 5): compaction "
                           "%.3f  up %.3f  reduce %.3f  down %.3f | %d slots per block of 8 tokens, NG %d, %d rows of "
                           "blocks that did not fit\n", tm[8], tm[8] / t_gate, tm[9], median(st4[0]), median(st4[1]),
                           median(st4[2]), median(st4[3]), ws.sl.SB, ws.sl.NG, hc.sl_rows);
                }
                if (o.splitg && ws.split_rows > 0) {  // the split kernels' units per step (GU up, GD down)
                    twell_gate_forward(&mm, &ws, X[0], Wg, M, 0);
                    auto chunks_of = [&](auto launch) {
                        for (int r0 = 0; r0 < M; r0 += ws.split_rows) {
                            const int rows = std::min(ws.split_rows, M - r0);
                            launch(ws.tw + (size_t)r0 * (F / ws.C), r0, rows);
                        }
                    };
#define BENCH_SPLIT(GU, GD, ST)                                                                                       \
    [&](int s) {                                                                                                      \
        chunks_of([&](const uint32_t *tw, int r0, int rows) {                                                         \
            twell_split_launch<GU, GD>(tw, X[s] + (size_t)r0 * D, Wu, WdT, D, Y + (size_t)r0 * D, ws.split_pairs[0],   \
                                       ws.split_cnt[0], ws.split_order[0], NULL, NULL, rows, D, F, ws.C, 0, ST);       \
        });                                                                                                           \
    }
                    const int keep_units = ws.split_units;
                    std::vector<std::function<void(int)>> pf = {
                        BENCH_SPLIT(2, 4, 1), BENCH_SPLIT(4, 4, 1), BENCH_SPLIT(8, 4, 1),
                        BENCH_SPLIT(4, 2, 2), BENCH_SPLIT(4, 4, 2), BENCH_SPLIT(4, 8, 2),
                    };
#undef BENCH_SPLIT
                    for (int u = 0; u < TWELL_SPLIT_UNITS_NUM; u++)
                        pf.push_back([&, u](int s) {
                            ws.split_units = u;
                            twell_ffn_forward(&mm, &ws, X[s], Wg, Wu, WdT, Y, M, TWELL_PATH_SPARSE, -1, NULL, 0);
                        });
                    const std::vector<float> tp = timeit_rr(pf);
                    ws.split_units = keep_units;
                    printf("    split-g up (GU) 2: %.3f 4: %.3f 8: %.3f | down (GD) 2: %.3f 4: %.3f 8: %.3f | sparse FFN",
                           tp[0], tp[1], tp[2], tp[3], tp[4], tp[5]);
                    for (int u = 0; u < TWELL_SPLIT_UNITS_NUM; u++)
                        printf(" %s %.3f", twell_split_units_name(u), tp[6 + u]);
                    printf("\n");
                }
                if (o.splitup && ws.split_rows > 0) {  // the split up/down's up kernels (token-major, blocked)
                    const int keep_up = ws.split_up;
                    int ok[TWELL_SPLIT_UP_NUM], over[TWELL_SPLIT_UP_NUM];
                    for (int u = 0; u < TWELL_SPLIT_UP_NUM; u++) {  // allocate, check, count the capacity fallback
                        ws.split_up = u;
                        TwellFFNResult ru;
                        ok[u] = twell_ffn_forward(&mm, &ws, X[0], Wg, Wu, WdT, Y, M, TWELL_PATH_SPARSE, -1, &ru, 0) ==
                                TWELL_OK;
                        over[u] = ok[u] ? ru.bu_rows : -1;
                    }
                    twell_gate_forward(&mm, &ws, X[0], Wg, M, 0);  // the up stages below read this TwELL
                    // The up stage alone over every chunk (buffer 0): bu NULL = token-major; mask: blocked kernels.
                    auto up_stage = [&](TwellBlockedUpBuf *bu, int mask, int s) {
                        if (bu) bu->stage_mask = mask;
                        for (int r0 = 0; r0 < M; r0 += ws.split_rows) {
                            const int rows = std::min(ws.split_rows, M - r0);
                            twell_split_launch<2, 8>(ws.tw + (size_t)r0 * (F / ws.C), X[s] + (size_t)r0 * D, Wu, WdT,
                                                     D, Y + (size_t)r0 * D, ws.split_pairs[0], ws.split_cnt[0], NULL,
                                                     NULL, NULL, rows, D, F, ws.C, 0, 1, bu, NULL);
                        }
                        if (bu) bu->stage_mask = 0;
                    };
                    std::vector<std::function<void(int)>> pf;
                    for (int u = 0; u < TWELL_SPLIT_UP_NUM; u++) {
                        TwellBlockedUpBuf *bu = u == TWELL_SPLIT_UP_TOKEN ? NULL
                                                                          : &ws.split_bu[u == TWELL_SPLIT_UP_B512][0];
                        pf.push_back([&, bu, u](int s) { if (ok[u]) up_stage(bu, 0, s); });
                    }
                    for (int u = TWELL_SPLIT_UP_B256; u < TWELL_SPLIT_UP_NUM; u++)  // blocked: build, up, finish alone
                        for (int mask : {1, 4, 8}) {
                            TwellBlockedUpBuf *bu = &ws.split_bu[u == TWELL_SPLIT_UP_B512][0];
                            pf.push_back([&, bu, u, mask](int s) { if (ok[u]) up_stage(bu, mask, s); });
                        }
                    const int NST = TWELL_SPLIT_UP_NUM + 6;  // the sparse FFN columns start here
                    for (int u = 0; u < TWELL_SPLIT_UP_NUM; u++)
                        pf.push_back([&, u](int s) {
                            if (!ok[u]) return;
                            ws.split_up = u;
                            twell_ffn_forward(&mm, &ws, X[s], Wg, Wu, WdT, Y, M, TWELL_PATH_SPARSE, -1, NULL, 0);
                        });
                    const std::vector<float> tp = timeit_rr(pf);
                    ws.split_up = keep_up;
                    printf("    split-up: up stage");
                    for (int u = 0; u < TWELL_SPLIT_UP_NUM; u++) printf(" %s %.3f", twell_split_up_name(u), tp[u]);
                    printf(" | stages build/up/finish b256 %.3f %.3f %.3f b512 %.3f %.3f %.3f | sparse FFN",
                           tp[TWELL_SPLIT_UP_NUM], tp[TWELL_SPLIT_UP_NUM + 1], tp[TWELL_SPLIT_UP_NUM + 2],
                           tp[TWELL_SPLIT_UP_NUM + 3], tp[TWELL_SPLIT_UP_NUM + 4], tp[TWELL_SPLIT_UP_NUM + 5]);
                    for (int u = 0; u < TWELL_SPLIT_UP_NUM; u++)
                        printf(" %s %.3f (%.2fx gate)", twell_split_up_name(u), tp[NST + u], tp[NST + u] / t_gate);
                    printf(" | rows over capacity b256 %d b512 %d\n", over[TWELL_SPLIT_UP_B256],
                           over[TWELL_SPLIT_UP_B512]);
                }
                if (o.gather) {  // 58 random 4 KB rows per token (nnz 29, up + down) from one matrix: loads vs bulk
                    const int per_cta = 58, chunks = D / 8, nrows = F;
                    const double bytes = (double)M * per_cta * chunks * 16.0;
                    const uint4 *w = reinterpret_cast<const uint4 *>(Wi);
                    uint32_t *out = reinterpret_cast<uint32_t *>(Y);
                    std::vector<std::function<void(int)>> pf = {
                        [&](int s) { bench_l2_gather<4><<<M, 128, 0, 0>>>(w, nrows, chunks, per_cta, 77 + s, out); },
                        [&](int s) { bench_l2_gather<8><<<M, 128, 0, 0>>>(w, nrows, chunks, per_cta, 77 + s, out); },
                    };
                    const int Rs[3] = {2, 4, 8};
                    for (int k = 0; k < 3; k++) {
                        const size_t sm = (size_t)Rs[k] * chunks * 16;
                        pf.push_back([&, k, sm](int s) {
                            if (Rs[k] == 2) bench_l2_gather_bulk<2><<<M, 128, sm, 0>>>(w, nrows, chunks, per_cta, 77 + s, out);
                            else if (Rs[k] == 4) bench_l2_gather_bulk<4><<<M, 128, sm, 0>>>(w, nrows, chunks, per_cta, 77 + s, out);
                            else bench_l2_gather_bulk<8><<<M, 128, sm, 0>>>(w, nrows, chunks, per_cta, 77 + s, out);
                        });
                    }
                    cudaCheck(cudaFuncSetAttribute(bench_l2_gather_bulk<8>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   8 * chunks * 16));
                    const std::vector<float> tp = timeit_rr(pf);
                    cudaCheck(cudaGetLastError());
                    printf("    gather (%.2f GB): loads R4 %.3f ms = %.2f TB/s, R8 %.3f = %.2f | bulk R2 %.3f = %.2f, R4 %.3f = "
                           "%.2f, R8 %.3f = %.2f\n", bytes / 1e9, tp[0], bytes / (tp[0] * 1e9), tp[1], bytes / (tp[1] * 1e9),
                           tp[2], bytes / (tp[2] * 1e9), tp[3], bytes / (tp[3] * 1e9), tp[4], bytes / (tp[4] * 1e9));
                }
                if (NG) {
                    printf("    gates  s.gate %.3f (%.2fx cublas)", t_sgate, t_sgate / t_gate);
                    for (size_t g = 0; g < NG; g++) {
                        const float tg = tm[WG0 + 2 * g], tsp = tm[WG0 + 1 + 2 * g];
                        printf(" | %s g %.3f (%.2fx) sp %.3f twdiff %lld", twell_gate_variant_name(o.gates[g]), tg,
                               tg / t_gate, tsp, tw_diff[g]);
                    }
                    printf("\n");
                }
                fflush(stdout);
                Row row = {M, heavy, rs.mean_nnz, t_dense, t_sparse, t_spw, {}};
                if (rs.sliced_rows)
                    printf("    note: %d rows of blocks that did not fit the sliced slot area ran dense\n", rs.sliced_rows);
                for (size_t g = 0; g < NG; g++) row.sparse_g.push_back(tm[WG0 + 1 + 2 * g]);
                rows.push_back(row);
                if (o.variants) {
                    const int keep_gv = ws.gate_variant, keep_chunk = ws.gate_chunk_rows;
                    printf("    gate   ");
                    for (int gv = 0; gv < TWELL_GATE_NUM_VARIANTS; gv++)
                        for (int c : chunks_sweep) {
                            if (c > M) continue;
                            if (twell_gate_is_wgmma(gv) && (c != chunks_sweep[0] || !o.wgmma)) continue;  // no chunks
                            if (gv == TWELL_GATE_CUBLAS_PACK && c != 8192 && c != 65536) continue;
                            ws.gate_variant = gv;
                            twell_ffn_set_gate_chunk(&ws, c);
                            float tg = timeit([&](int s) { twell_gate_forward(&mm, &ws, X[s], Wg, M, 0); });
                            if (twell_gate_is_wgmma(gv)) printf(" %s %.3f", twell_gate_variant_name(gv), tg);
                            else printf(" %s/%d %.3f", gv == TWELL_GATE_CUBLAS_PACK ? "serial"
                                                       : gv == TWELL_GATE_CUBLAS_MASK ? "mask" : "overlap", c, tg);
                        }
                    ws.gate_variant = keep_gv;
                    twell_ffn_set_gate_chunk(&ws, keep_chunk);
                    printf("\n    gemm   ");
                    for (int c : chunks_sweep) {
                        if (c > M) continue;
                        float tg = timeit([&](int s) {
                            for (int r0 = 0; r0 < M; r0 += c)
                                matmul(&mm, ws.gate_scratch[0], 0, X[s] + (size_t)r0 * D, 0, Wg, 1, std::min(c, M - r0),
                                       F, D, 1.0f, 0.0f, 0);
                        });
                        float t_mask = timeit([&](int s) {  // with cuBLASLt's ReLU bit-mask epilogue
                            for (int r0 = 0; r0 < M; r0 += c)
                                matmul_relu_mask(&mm, ws.gate_scratch[0], ws.gate_mask[0], X[s] + (size_t)r0 * D, Wg,
                                                 std::min(c, M - r0), F, D, 0);
                        });
                        printf(" chunk%d %.3f mask %.3f", c, tg, t_mask);
                    }
                    printf("\n    tune   ");  // cuBLASLt's first choice vs the fastest of its candidates
                    for (int c : {16384, 65536}) {
                        if (c > M) continue;
                        float f0 = 0, b0 = 0, f1 = 0, b1 = 0;
                        int n0 = matmul_tune(&mm, ws.gate_scratch[0], X[0], Wg, c, F, D, MATMUL_EPI_NONE, NULL, 5, 0, &f0, &b0);
                        int n1 = matmul_tune(&mm, ws.gate_scratch[0], X[0], Wg, c, F, D, MATMUL_EPI_RELU_MASK,
                                             ws.gate_mask[0], 5, 0, &f1, &b1);
                        printf(" chunk%d plain %.3f->%.3f (%d algos) mask %.3f->%.3f (%d algos)", c, f0, b0, n0, f1, b1, n1);
                    }
                    printf("\n    gate(tuned)");
                    for (int gv : {TWELL_GATE_CUBLAS_PACK, TWELL_GATE_CUBLAS_MASK})
                        for (int c : {16384, 65536}) {
                            if (c > M) continue;
                            ws.gate_variant = gv;
                            twell_ffn_set_gate_chunk(&ws, c);
                            float tg = timeit([&](int s) { twell_gate_forward(&mm, &ws, X[s], Wg, M, 0); });
                            printf(" %s/%d %.3f", gv == TWELL_GATE_CUBLAS_MASK ? "mask" : "serial", c, tg);
                        }
                    ws.gate_variant = keep_gv;
                    twell_ffn_set_gate_chunk(&ws, keep_chunk);
                    // The mask pack alone over all M rows (mask + values of chunk 0's GEMM, reused per chunk).
                    for (int c : {8192, 65536}) {
                        if (c > M) continue;
                        matmul_relu_mask(&mm, ws.gate_scratch[0], ws.gate_mask[0], X[0], Wg, c, F, D, 0);
                        float tp = timeit([&](int s) {
                            cudaCheck(cudaMemsetAsync(ws.ovf_flag, 0, sizeof(int) * (size_t)M, 0));
                            cudaCheck(cudaMemsetAsync(ws.counters, 0, sizeof(TwellCounters), 0));
                            for (int r0 = 0; r0 < M; r0 += c)
                                twell_pack_mask_launch(ws.gate_scratch[0], ws.gate_mask[0], std::min(c, M - r0), r0, F,
                                                       8, ws.tw, ws.ovf_flag, ws.ovf_list, ws.counters, 0);
                        });
                        printf(" maskpack%d %.3f", c, tp);
                    }
                    // The pack kernel alone over M rows (reads scratch[0] chunk by chunk; tw is rewritten by the
                    // gate below before it is used again).
                    for (int c : {2048, 8192}) {
                        if (c > M) continue;
                        float tp = timeit([&](int s) {
                            cudaCheck(cudaMemsetAsync(ws.ovf_flag, 0, sizeof(int) * (size_t)M, 0));
                            cudaCheck(cudaMemsetAsync(ws.counters, 0, sizeof(TwellCounters), 0));
                            for (int r0 = 0; r0 < M; r0 += c)
                                twell_pack_launch(ws.gate_scratch[0], std::min(c, M - r0), r0, F, 8, ws.tw, ws.ovf_flag,
                                                  ws.ovf_list, ws.counters, 0);
                        });
                        printf(" pack%d %.3f", c, tp);
                    }
                    printf("\n    updown ");
                    twell_gate_forward(&mm, &ws, X[0], Wg, M, 0);
                    const int keep_v = ws.updown_variant;
                    for (int v = 1; v < TWELL_UPDOWN_NUM_VARIANTS; v++) {
                        if (!twell_ffn_updown_supports(&ws, v)) continue;
                        ws.updown_variant = v;
                        float tv = timeit([&](int s) { twell_ffn_updown(&ws, X[0], Wu, WdT, Y, M, 0); });
                        printf(" %s %.3f", twell_updown_variant_name(v), tv);
                    }
                    ws.updown_variant = keep_v;
                    // The split up/down's two kernels alone (twell/updown_split.cuh), chunk by chunk as the FFN runs them.
                    if (twell_ffn_updown_supports(&ws, TWELL_UPDOWN_SPLIT)) {
                        ws.updown_variant = TWELL_UPDOWN_SPLIT;
                        twell_ffn_updown(&ws, X[0], Wu, WdT, Y, M, 0);  // leaves valid pairs in the buffers
                        ws.updown_variant = keep_v;
                        float ts[2];
                        for (int st = 1; st <= 2; st++)  // every chunk through buffer 0 on one stream, rows heavy first
                            ts[st - 1] = timeit([&](int s) {
                                for (int r0 = 0; r0 < M; r0 += ws.split_rows) {
                                    const int rows = std::min(ws.split_rows, M - r0);
                                    twell_split_launch<4, 4>(ws.tw + (size_t)r0 * (F / ws.C), X[s] + (size_t)r0 * D, Wu,
                                                             WdT, D, Y + (size_t)r0 * D, ws.split_pairs[0],
                                                             ws.split_cnt[0], ws.split_order[0], NULL, NULL, rows, D, F,
                                                             ws.C, 0, st);
                                }
                            });
                        ws.updown_variant = TWELL_UPDOWN_SPLIT;
                        ws.split_order_mode = TWELL_SPLIT_ORDER_INDEX;
                        const float t_idx = timeit([&](int s) { twell_ffn_updown(&ws, X[s], Wu, WdT, Y, M, 0); });
                        ws.split_order_mode = TWELL_SPLIT_ORDER_HEAVY_FIRST;
                        const float t_ord = timeit([&](int s) { twell_ffn_updown(&ws, X[s], Wu, WdT, Y, M, 0); });
                        ws.split_order_mode = TWELL_SPLIT_ORDER_AUTO;
                        ws.updown_variant = keep_v;
                        printf("\n    split stages: up %.3f down %.3f (chunk 0's buffer); split with rows in index order %.3f, "
                               "heavy rows first %.3f (auto: %s, last call saw %d heavy rows)", ts[0], ts[1], t_idx, t_ord,
                               ws.split_last_heavy != 0 ? "heavy first" : "index order", ws.split_last_heavy);
                    }
                    {  // the L2 gather ceiling: the up/down's bytes at nnz 29 (8 KB per pair) without arithmetic
                        const int per_cta = 58, chunks = D / 8;  // 29 pairs x 2 rows per token
                        for (int mats = 1; mats <= 2; mats++)
                            for (int R : {4, 8}) {
                                const int nrows = mats * F;
                                float tg = timeit([&](int s) {
                                    const uint4 *w = reinterpret_cast<const uint4 *>(Wi);
                                    uint32_t *out = reinterpret_cast<uint32_t *>(Y);
                                    if (R == 4) bench_l2_gather<4><<<M, 128, 0, 0>>>(w, nrows, chunks, per_cta, 77 + s, out);
                                    else bench_l2_gather<8><<<M, 128, 0, 0>>>(w, nrows, chunks, per_cta, 77 + s, out);
                                    cudaCheckLaunch();
                                });
                                const double bytes = (double)M * per_cta * chunks * 16.0;
                                printf("\n    l2 gather %s (%.0f MB of rows), %d rows in flight: %.3f ms = %.2f TB/s",
                                       mats == 1 ? "1 matrix" : "2 matrices", nrows * (double)chunks * 16.0 / 1e6, R, tg,
                                       bytes / (tg * 1e-3) / 1e12);
                            }
                    }
                    printf("\n    options (%s):", twell_updown_variant_name(ws.updown_variant));
                    for (int opt = 0; opt < 4; opt++) {
                        set_opts(opt & 1, opt >> 1);
                        float tv = timeit([&](int s) { twell_ffn_updown(&ws, X[0], Wu, WdT, Y, M, 0); });
                        if (ws.l2_persist) (void)cudaCtxResetPersistingL2Cache();
                        printf(" %s %.3f", opt == 0 ? "plain" : opt == 1 ? "interleave" : opt == 2 ? "l2persist"
                                                                                           : "interleave+l2", tv);
                    }
                    set_opts(o.interleave, o.l2persist);
                    printf("\n");
                    fflush(stdout);
                }
            }
        }
    }
    // Crossover: interpolate the mean nnz where sparse time = dense time (per M and pattern).
    printf("\ncrossover (sparse = dense), mean nnz per token (model crossover: %.1f):\n",
           twell_dispatch_crossover(&ws.model));
    for (size_t i = 1; i < rows.size(); i++) {
        const Row &a = rows[i - 1], &b = rows[i];
        if (a.M != b.M || a.heavy != b.heavy) continue;
        double da = a.sparse - a.dense, db = b.sparse - b.dense;
        if (da <= 0 && db > 0) {
            double x = a.nnz + (b.nnz - a.nnz) * (-da) / (db - da);
            printf("  M=%d %s: crossover at about %.0f non-zeros per token\n", a.M, a.heavy ? "heavy" : "uniform", x);
        }
    }
    // Least-squares fit of sparse/dense = s0 + s1 * nnz on the uniform rows with nnz <= 160.
    for (int M : o.Ms) {
        double n = 0, sx = 0, sy = 0, sxx = 0, sxy = 0;
        for (const Row &r : rows)
            if (r.M == M && !r.heavy && r.nnz <= 160) {
                double y = r.sparse / r.dense;
                n++; sx += r.nnz; sy += y; sxx += r.nnz * r.nnz; sxy += r.nnz * y;
            }
        if (n >= 2 && n * sxx - sx * sx > 0) {
            double s1 = (n * sxy - sx * sy) / (n * sxx - sx * sx), s0 = (sy - s1 * sx) / n;
            printf("fitted model M=%d (uniform, nnz <= 160): TWELL_DISPATCH_S0 %.4f  TWELL_DISPATCH_S1 %.6f -> "
                   "crossover %.1f\n", M, s0, s1, s1 > 0 ? (1 - s0) / s1 : 1e30);
        }
        for (size_t g = 0; g < o.gates.size(); g++) {
            n = sx = sy = sxx = sxy = 0;
            for (const Row &r : rows)
                if (r.M == M && !r.heavy && r.nnz <= 160 && g < r.sparse_g.size()) {
                    double y = r.sparse_g[g] / r.dense;
                    n++; sx += r.nnz; sy += y; sxx += r.nnz * r.nnz; sxy += r.nnz * y;
                }
            if (n >= 2 && n * sxx - sx * sx > 0) {
                double s1 = (n * sxy - sx * sy) / (n * sxx - sx * sx), s0 = (sy - s1 * sx) / n;
                printf("fitted model M=%d with gate %s (if it became the default): S0 %.4f S1 %.6f -> crossover "
                       "%.1f\n", M, twell_gate_variant_name(o.gates[g]), s0, s1, s1 > 0 ? (1 - s0) / s1 : 1e30);
            }
        }
    }
    twell_ffn_workspace_free(&ws);
    matmul_context_free(&mm);
    if (failures) { printf("bench_ffn: %d correctness failures\n", failures); return 1; }
    return 0;
}
