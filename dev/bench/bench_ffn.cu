// dev/bench/bench_ffn.cu: TwELL FFN vs dense gated FFN (cuBLASLt), same process, same inputs.
//
//   build/bench_ffn [--quick] [--M 16384,65536] [--nnz 8,16,29,64,128,256,50%] [--pattern uniform|heavy|both]
//                   [--reps N] [--gate-variant K] [--gate-cluster N] [--gate-chunk R] [--no-calibrate] [--no-cublas] [--gather]
//                   [--D 2048] [--F 5632]
// --quick: M 65536, nnz 8,29,64,128,256 and 5 reps, each unless given. -h lists the options with their defaults.
// --gate-variant K: the gate of the sparse columns (TWELL_GATE_*: 0 wgmma, 1 cublas_mask; default TWELL_GATE_DEFAULT).
// --gate-cluster N: the wgmma gate's clusters (1, or 2 sharing the Wg tile; default 0 = this GPU's choice).
// --gather: a line under each row with the L2 gather probe alone (58 random 4 KB rows per token, 16-byte loads, no
//         arithmetic: the up/down's traffic at nnz 29, the floor of any token-major up/down).
//
// Timing method: the columns of one configuration are timed INTERLEAVED: each of --reps (default 15)
// rounds runs every column once (in a fresh random order each round, fixed seed), each call timed
// alone with CUDA events (synchronized); the table shows medians. So slow drift of the GPU (clocks,
// temperature) hits every column alike and the ratios (auto/min) are not skewed by run-to-run noise.
// Columns (ms, medians, inputs rotated over 3 X sets):
//   gate    one dense cuBLASLt GEMM [M,D] x [D,F] -> bf16 (the floor of any dense-gate design)
//   dense   our dense gated FFN (twell/dense_ffn.cuh: 3 GEMMs + relu*mul)
//   sparse  our TwELL FFN (the default gate -> TwELL, the split up/down, dense fallback for overflow rows)
//   s.gate / s.updown   the two parts of the sparse path timed alone
//   auto    the dispatched path (TWELL_PATH_AUTO, history from the warm-up calls), with the model from
//           twell_ffn_calibrate (run once per M on the uniform nnz-29 data, printed) unless --no-calibrate
//   g.other / sp.other  the gate -> TwELL and the sparse FFN with the other gate (the cuBLASLt gate, the default off
//           Hopper, unless --gate-variant 1), in the same rounds (off with --no-cublas); twdiff = TwELL rows where the
//           two gates differ
//   then sparse/gate, dense/sparse, auto/min(dense, sparse), measured mean nnz and overflow rows, the auto path, and
//   st/min: what the STATIC default model (TWELL_DISPATCH_*) would pick / min.
//   twdiff: random inputs, so fp32 sums in another order differ by ~1e-6 relative, which moves a bf16 rounding
//   (~3e-4 of the active values) or the sign of a value next to 0: up to ~1-2 thousand of 65536 rows may differ;
//   most rows differing would be a bug (the bit-exact check is test_twell's job, on integer inputs).
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
    int quick, reps, D, F, gate_variant, gate_chunk, gate_cluster, calibrate, cublas, gather;
    std::vector<int> Ms;
    std::vector<double> nnzs;  // < 0 means 50%
    int pat_uniform, pat_heavy;
} Opts;

int main(int argc, char **argv) {
    Opts o;
    o.quick = 0; o.reps = 15; o.D = 2048; o.F = 5632;
    o.gate_variant = TWELL_GATE_DEFAULT; o.gate_chunk = 0; o.gate_cluster = 0; o.gather = 0;
    int no_calibrate = 0, no_cublas = 0;
    const char *M_list = "16384,65536", *nnz_list = "8,16,29,64,128,256,50%", *pattern = "both";
    CliOpt opts[] = {
        {"quick", 0, CLI_FLAG, &o.quick, "M 65536, nnz 8,29,64,128,256, 5 reps (each unless given)", 0, 0, 0},
        {"M", 0, CLI_STRING, &M_list, "rows (tokens), comma-separated", 0, 0, 0},
        {"nnz", 0, CLI_STRING, &nnz_list, "mean active units per token, comma-separated (P%: P/100 of the F units)", 0, 0, 0},
        {"pattern", 0, CLI_STRING, &pattern, "uniform, heavy or both", 0, 0, 0},
        {"reps", 0, CLI_INT, &o.reps, "interleaved rounds (medians)", 1, 100000, 0},
        {"gate-variant", 0, CLI_INT, &o.gate_variant, "the sparse path's gate (TWELL_GATE_*: 0 wgmma, 1 cublas_mask)", 0,
         TWELL_GATE_NUM_VARIANTS - 1, 0},
        {"gate-cluster", 0, CLI_INT, &o.gate_cluster, "wgmma gate: CTAs per cluster sharing the Wg tile (0: by device)", 0,
         2, 0},
        {"gate-chunk", 0, CLI_INT, &o.gate_chunk, "rows per chunk of the cuBLASLt gate (0: its default)", 0, 1 << 24, 0},
        {"no-calibrate", 0, CLI_FLAG, &no_calibrate, "keep the static dispatch model (no twell_ffn_calibrate per M)", 0, 0, 0},
        {"no-cublas", 0, CLI_FLAG, &no_cublas, "do not time the other gate (g.other / sp.other)", 0, 0, 0},
        {"gather", 0, CLI_FLAG, &o.gather, "a line under each row with the L2 gather probe alone", 0, 0, 0},
        {"D", 0, CLI_INT, &o.D, "d_model (a multiple of 64)", 64, 8192, 0},
        {"F", 0, CLI_INT, &o.F, "d_ff (a multiple of 256)", 256, 1 << 20, 0},
        {NULL, 0, CLI_INT, NULL, NULL, 0, 0, 0},
    };
    cli_parse(argc, argv, opts, "bench_ffn",
              "TwELL FFN against the dense FFN (cuBLASLt) on generated inputs with a controlled mean number of\n"
              "non-zeros per token (uniform or heavy-tailed), interleaved, medians; checks sparse against dense.\n"
              "The columns and the method: the header of dev/bench/bench_ffn.cu.");
    o.calibrate = !no_calibrate;
    o.cublas = !no_cublas;
    if (o.quick) {
        if (!cli_given(opts, "M")) M_list = "65536";
        if (!cli_given(opts, "nnz")) nnz_list = "8,29,64,128,256";
        if (!cli_given(opts, "reps")) o.reps = 5;
    }
    for (double m : bench_list("bench_ffn", "M", M_list, 1, 1, 1 << 20, 0)) o.Ms.push_back((int)m);
    o.nnzs = bench_list("bench_ffn", "nnz", nnz_list, 0, 0, 1 << 20, 1);
    o.pat_uniform = !strcmp(pattern, "uniform") || !strcmp(pattern, "both");
    o.pat_heavy = !strcmp(pattern, "heavy") || !strcmp(pattern, "both");
    if (!o.pat_uniform && !o.pat_heavy)
        cli_fail("bench_ffn", "option --pattern: expected uniform, heavy or both, got \"%s\"", pattern);
    for (double nz : o.nnzs)
        if (nz > o.F) cli_fail("bench_ffn", "option --nnz: %g is more than the %d units of --F", nz, o.F);
    if (twell_check_shapes(1, o.D, o.F, 8)) exit(2);
    cuda_require_device("bench_ffn");
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("bench_ffn: %s, %d SMs, L2 %d MB; D=%d F=%d C=8 reps=%d; gate %s\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20, o.D, o.F, o.reps, twell_gate_variant_name(o.gate_variant));
    if (o.gate_variant == TWELL_GATE_WGMMA) {
        const int cl = o.gate_cluster ? o.gate_cluster : twg_default_cluster();
        printf("  wgmma gate: clusters of %d CTA(s)%s, %d resident at once\n", cl, o.gate_cluster ? "" : " (this GPU's default)",
               cl == 2 ? twg_max_clusters<2>() : twg_max_clusters<1>());
    }
    const int D = o.D, F = o.F, NSETS = 3;
    int maxM = 0;
    for (int m : o.Ms) maxM = std::max(maxM, m);

    MatmulContext mm;
    matmul_context_init(&mm);
    bf16 *X[NSETS], *Wg, *Wu, *WdT, *Y, *Yd, *Gs;
    for (int s = 0; s < NSETS; s++) cudaCheck(cudaMalloc(&X[s], sizeof(bf16) * (size_t)maxM * D));
    cudaCheck(cudaMalloc(&Wg, sizeof(bf16) * (size_t)F * D));
    cudaCheck(cudaMalloc(&Wu, sizeof(bf16) * (size_t)F * D));
    cudaCheck(cudaMalloc(&WdT, sizeof(bf16) * (size_t)F * D));
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
    ws.gate_variant = o.gate_variant;
    ws.gate_cluster = o.gate_cluster;
    if (o.gate_chunk > 0 && twell_ffn_set_gate_chunk(&ws, o.gate_chunk) != TWELL_OK) return 1;
    const int other_gate = o.gate_variant == TWELL_GATE_CUBLAS ? TWELL_GATE_WGMMA : TWELL_GATE_CUBLAS;
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
        cudaCheck(cudaDeviceSynchronize());
    };
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
            // the same one (a fixed rotation put "auto" right after the long sparse call in most rounds, which
            // cost it 3-9% at M 131072).
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

    int failures = 0;
    struct Row { int M, heavy; double nnz, dense, sparse, sparse_cublas; };
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
        printf("\n%-7s %-7s %-6s | %8s %8s %8s %8s %8s %8s | %8s %8s | %8s %8s %8s | %7s %6s %-6s %s %s\n", "M",
               "pattern", "nnz", "gate", "dense", "sparse", "s.gate", "s.updown", "auto", "g.other", "sp.other",
               "sp/gate", "dn/sp", "auto/min", "meannz", "ovf", "auto", "st/min", "twdiff");
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

                // The other gate: FFN correctness vs dense, and TwELL rows that differ from this gate's.
                long long tw_diff_rows = -1;
                if (o.cublas) {
                    const size_t twn = (size_t)M * (F / 8);
                    std::vector<uint32_t> ta(twn), tb(twn);
                    if (twell_gate_forward(&mm, &ws, X[0], Wg, M, 0)) return 1;
                    cudaCheck(cudaMemcpy(ta.data(), ws.tw, twn * 4, cudaMemcpyDeviceToHost));
                    TwellFFNResult rw = {0, -1, -1.0, -1, 0};
                    ws.gate_variant = other_gate;
                    if (twell_gate_forward(&mm, &ws, X[0], Wg, M, 0)) return 1;
                    cudaCheck(cudaMemcpy(tb.data(), ws.tw, twn * 4, cudaMemcpyDeviceToHost));
                    cudaCheck(cudaMemset(Y, 0xFF, sizeof(bf16) * (size_t)M * D));
                    if (twell_ffn_forward(&mm, &ws, X[0], Wg, Wu, WdT, Y, M, TWELL_PATH_SPARSE, -1, &rw, 0)) return 1;
                    ws.gate_variant = o.gate_variant;
                    long long nd = 0;
                    for (int m = 0; m < M; m++)
                        nd += memcmp(&ta[(size_t)m * (F / 8)], &tb[(size_t)m * (F / 8)], (F / 8) * 4) != 0;
                    tw_diff_rows = nd;
                    cudaCheck(cudaMemset(dsum, 0, 3 * sizeof(double)));
                    bench_diff<<<512, 256>>>(Y, Yd, (long long)M * D, dsum);
                    cudaCheck(cudaMemcpy(hs, dsum, sizeof hs, cudaMemcpyDeviceToHost));
                    double relw = sqrt(hs[0] / (hs[1] > 0 ? hs[1] : 1));
                    if (rw.n_overflow != rs.n_overflow)  // a value within fp32 rounding of a tile's 31/32 boundary
                        printf("note: gate %s: %d overflow rows, gate %s %d (M=%d %s nnz %g)\n",
                               twell_gate_variant_name(other_gate), rw.n_overflow,
                               twell_gate_variant_name(o.gate_variant), rs.n_overflow, M, heavy ? "heavy" : "uniform",
                               target);
                    if (!(relw < 1e-2) || hs[2] != 0) {
                        printf("CORRECTNESS FAILURE (gate %s): M=%d %s nnz %g: sparse vs dense rel err %.3e, "
                               "non-finite %g, overflow rows %d (gate %s %d), TwELL rows differing %lld\n",
                               twell_gate_variant_name(other_gate), M, heavy ? "heavy" : "uniform", target, relw,
                               hs[2], rw.n_overflow, twell_gate_variant_name(o.gate_variant), rs.n_overflow, nd);
                        failures++;
                    }
                }
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
                };
                if (o.cublas) {  // columns 6 (the other gate alone) and 7 (the sparse FFN through it)
                    fns.push_back([&](int s) {
                        ws.gate_variant = other_gate;
                        twell_gate_forward(&mm, &ws, X[s], Wg, M, 0);
                        ws.gate_variant = o.gate_variant;
                    });
                    fns.push_back([&](int s) {
                        ws.gate_variant = other_gate;
                        twell_ffn_forward(&mm, &ws, X[s], Wg, Wu, WdT, Y, M, TWELL_PATH_SPARSE, -1, NULL, 0);
                        ws.gate_variant = o.gate_variant;
                    });
                }
                twell_gate_forward(&mm, &ws, X[0], Wg, M, 0);  // a TwELL for the first up/down call
                const std::vector<float> tm = timeit_rr(fns);
                const float t_gate = tm[0], t_dense = tm[1], t_sparse = tm[2], t_auto = tm[3], t_sgate = tm[4],
                            t_updown = tm[5];
                const float t_go = o.cublas ? tm[6] : NAN, t_spo = o.cublas ? tm[7] : NAN;
                const TwellPath st = twell_dispatch_decide(&static_model, rs.mean_nnz, (double)rs.n_overflow / M, 0);
                const float tmin = std::min(t_dense, t_sparse);
                char nzs[16];
                if (nz < 0) snprintf(nzs, sizeof nzs, "%g%%", -nz * 100); else snprintf(nzs, sizeof nzs, "%g", nz);
                printf("%-7d %-7s %-6s | %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f | %8.3f %8.3f | %8.2f %8.2f %8.3f | "
                       "%7.1f %6d %-6s %.3f %lld\n",
                       M, heavy ? "heavy" : "uniform", nzs, t_gate, t_dense, t_sparse, t_sgate, t_updown, t_auto, t_go,
                       t_spo, t_sparse / t_gate, t_dense / t_sparse, t_auto / tmin, rs.mean_nnz, rs.n_overflow,
                       ra.path == TWELL_PATH_SPARSE ? "sparse" : "dense",
                       (st == TWELL_PATH_SPARSE ? t_sparse : t_dense) / tmin, tw_diff_rows);
                if (o.gather) {  // 58 random 4 KB rows per token (nnz 29, up + down) from one matrix
                    const int per_cta = 58, chunks = D / 8, nrows = F;
                    const double bytes = (double)M * per_cta * chunks * 16.0;
                    const uint4 *w = reinterpret_cast<const uint4 *>(Wu);
                    uint32_t *out = reinterpret_cast<uint32_t *>(Y);
                    const std::vector<float> tp = timeit_rr({
                        [&](int s) { bench_l2_gather<4><<<M, 128, 0, 0>>>(w, nrows, chunks, per_cta, 77 + s, out); },
                        [&](int s) { bench_l2_gather<8><<<M, 128, 0, 0>>>(w, nrows, chunks, per_cta, 77 + s, out); },
                    });
                    cudaCheck(cudaGetLastError());
                    printf("    gather (%.2f GB): R4 %.3f ms = %.2f TB/s, R8 %.3f = %.2f\n", bytes / 1e9, tp[0],
                           bytes / (tp[0] * 1e9), tp[1], bytes / (tp[1] * 1e9));
                }
                fflush(stdout);
                rows.push_back({M, heavy, rs.mean_nnz, t_dense, t_sparse, t_spo});
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
        if (o.cublas) {
            n = sx = sy = sxx = sxy = 0;
            for (const Row &r : rows)
                if (r.M == M && !r.heavy && r.nnz <= 160) {
                    double y = r.sparse_cublas / r.dense;
                    n++; sx += r.nnz; sy += y; sxx += r.nnz * r.nnz; sxy += r.nnz * y;
                }
            if (n >= 2 && n * sxx - sx * sx > 0) {
                double s1 = (n * sxy - sx * sy) / (n * sxx - sx * sx), s0 = (sy - s1 * sx) / n;
                printf("fitted model M=%d with gate %s (the default off Hopper): S0 %.4f S1 %.6f -> crossover %.1f\n", M,
                       twell_gate_variant_name(TWELL_GATE_CUBLAS), s0, s1, s1 > 0 ? (1 - s0) / s1 : 1e30);
            }
        }
    }
    twell_ffn_workspace_free(&ws);
    matmul_context_free(&mm);
    if (failures) { printf("bench_ffn: %d correctness failures\n", failures); return 1; }
    return 0;
}
