// dev/bench/bench_decode.cu: the FFN at decoding sizes (M = 1..64 rows per call): the dense FFN, the TwELL tile path,
// the decode path (twell/decode.cuh) and the dispatched path, over a stack of L layers with their own weights, so
// that every layer's weights come from HBM as in a real decoding step (L x 69 MB at the paper's shape, far over the
// 60 MB L2). Same process, same inputs, interleaved rounds.
//
//   build/bench_decode [--M 1,2,4,8,16,32,64] [--nnz 8,29,64,256,50%] [--layers 8] [--reps 20] [--D 2048] [--F 5632]
//
// Columns (us per layer; medians over --reps rounds, each round runs every column once in a fresh random order,
// each column one pass over the L layers timed with events):
//   dense    twell_ffn_forward(DENSE) per layer: cuBLASLt gate and up GEMMs, relu*mul, down GEMM
//   dense.g  the same pass captured once as a CUDA graph and replayed (no launch overhead)
//   tile     SPARSE with the decode path off: cuBLASLt mask gate -> TwELL, the split up/down, a host sync per layer
//   decode   SPARSE at M <= decode_rows (the default): gate GEMV with the up fused, down; no sync; programmatic
//            dependent launches (a kernel is scheduled while the one before it finishes)
//   decode.g the decode pass captured as a CUDA graph
//   dec.np / dec.g.np   the same two with plain launches (twell_ffn_set_decode_pdl(ws, 0))
//   gate.l2  the gate alone over layer 0's weights L times (W1 comes from L2 after the first: what a gate whose weights
//            were prefetched perfectly would take)
//   auto     AUTO (the decode model, TWELL_DECODE_*), its own workspace
//   auto.g   the AUTO pass captured as a CUDA graph after the warm-up (paths decided at capture by the graph model,
//            TWELL_DECODE_G_*), compared with min(dense.g, decode.g)
//   gate / gate+up / down   the decode path's kernels alone (one pass over the layers each): the gate GEMV without
//            its fused up (lists off: g only), the gate with it, the down
// The kernels-alone columns use the programmatic launches too. Then dense/decode, dense.g/decode.g, tile/decode,
// auto/min(dense, decode) and the path auto took. Before timing, the decode output of layer 0 is checked against the
// dense one (relative error < 1e-2, else exit 1). At the end: a
// least-squares fit of decode / dense = s0 + s1 M nnz + sm M + sn nnz + sg4 [M > 32] over the rows (nnz: mean active
// units per row), eager (paste it into TWELL_DECODE_S0 / S1 / SM / SN / SG4, twell/ffn.cuh) and from the graphs
// (decode.g / dense.g: TWELL_DECODE_G_*).
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

// decode / dense = s0 + s1 M nnz + sm M + sn nnz + sg4 [M > 32] (twell_decode_predict): least squares (normal
// equations, Gauss-Jordan) over the rows with a ratio under 2 (the dispatch only needs the model right near 1;
// far-dense rows are checked after). sg4 is fitted only when some row has M > 32 (else it is reported as 0). Prints the constants
// as `prefix`S0 ...
static void fit_decode_model(const char *what, const char *prefix, const std::vector<double> &fit_M,
                             const std::vector<double> &fit_n, const std::vector<double> &fit_y) {
    {
        int K = 4;
        for (size_t i = 0; i < fit_y.size(); i++) K = twell_decode_gate_tiles((int)fit_M[i]) == 4 ? 5 : K;
        auto feat = [&](size_t i, double f[5]) {
            f[0] = 1.0; f[1] = fit_M[i] * fit_n[i]; f[2] = fit_M[i]; f[3] = fit_n[i];
            f[4] = twell_decode_gate_tiles((int)fit_M[i]) == 4 ? 1.0 : 0.0;
        };
        double A[5][6] = {{0}};
        int rows = 0;
        for (size_t i = 0; i < fit_y.size(); i++) {
            if (!(fit_y[i] < 2.0)) continue;
            double f[5];
            feat(i, f);
            rows++;
            for (int r = 0; r < K; r++) {
                for (int c = 0; c < K; c++) A[r][c] += f[r] * f[c];
                A[r][K] += f[r] * fit_y[i];
            }
        }
        int ok = rows >= K;
        for (int c = 0; c < K && ok; c++) {
            int p = c;
            for (int r = c + 1; r < K; r++) if (fabs(A[r][c]) > fabs(A[p][c])) p = r;
            if (fabs(A[p][c]) < 1e-30) { ok = 0; break; }
            for (int k = 0; k <= K; k++) std::swap(A[c][k], A[p][k]);
            for (int r = 0; r < K; r++) {
                if (r == c) continue;
                const double f = A[r][c] / A[c][c];
                for (int k = 0; k <= K; k++) A[r][k] -= f * A[c][k];
            }
        }
        if (ok) {
            double x[5] = {0, 0, 0, 0, 0}, worst = 0;
            int wrong_far = 0;
            for (int r = 0; r < K; r++) x[r] = A[r][K] / A[r][r];
            for (size_t i = 0; i < fit_y.size(); i++) {
                double f[5], pred = 0;
                feat(i, f);
                for (int r = 0; r < 5; r++) pred += x[r] * f[r];
                if (fit_y[i] < 2.0) worst = std::max(worst, fabs(pred - fit_y[i]));
                else wrong_far += !(pred > 1.0 + TWELL_DISPATCH_MARGIN);
            }
            printf("\nfitted %s model (decode / dense = s0 + s1 M nnz + sm M + sn nnz + sg4 [M > 32], %d rows with a "
                   "ratio < 2, worst residual %.3f; rows >= 2 it would not send dense: %d): %sS0 %.4g %sS1 %.4g %sSM "
                   "%.4g %sSN %.4g %sSG4 %.4g\n", what, rows, worst, wrong_far, prefix, x[0], prefix, x[1], prefix,
                   x[2], prefix, x[3], prefix, x[4]);
        }
    }
}

int main(int argc, char **argv) {
    int L = 8, reps = 20, D = 2048, F = 5632;
    const char *M_list = "1,2,4,8,16,32,64", *nnz_list = "8,29,64,256,50%";
    char M_help[96];
    snprintf(M_help, sizeof M_help, "rows per call, comma-separated, each in [1, %d] (the decode path's rows)",
             TWELL_DECODE_MAX_M);
    CliOpt opts[] = {
        {"M", 0, CLI_STRING, &M_list, M_help, 0, 0, 0},
        {"nnz", 0, CLI_STRING, &nnz_list, "mean active units per row, comma-separated (P%: P/100 of the F units)", 0, 0, 0},
        {"layers", 0, CLI_INT, &L, "layers, each with its own weights (read from HBM)", 1, 1024, 0},
        {"reps", 0, CLI_INT, &reps, "interleaved rounds (medians)", 1, 100000, 0},
        {"D", 0, CLI_INT, &D, "d_model (a multiple of 64)", 64, 8192, 0},
        {"F", 0, CLI_INT, &F, "d_ff (a multiple of 256)", 256, 1 << 20, 0},
        {NULL, 0, CLI_INT, NULL, NULL, 0, 0, 0},
    };
    cli_parse(argc, argv, opts, "bench_decode",
              "The FFN at decoding sizes (dense, TwELL tile, decode path, dispatched; eager and CUDA graphs) over a\n"
              "stack of layers; checks decode against dense; fits the decode dispatch model. Columns: the header of\n"
              "dev/bench/bench_decode.cu.");
    const std::vector<double> Ms = bench_list("bench_decode", "M", M_list, 1, 1, TWELL_DECODE_MAX_M, 0);
    const std::vector<double> nnzs = bench_list("bench_decode", "nnz", nnz_list, 0, 0, 1 << 20, 1);
    int maxM = 0;
    for (double m : Ms) maxM = std::max(maxM, (int)m);
    for (double nz : nnzs)
        if (nz > F) cli_fail("bench_decode", "option --nnz: %g is more than the %d units of --F", nz, F);
    if (twell_check_shapes(maxM, D, F, 8)) exit(2);
    cuda_require_device("bench_decode");
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("bench_decode: %s, %d SMs, L2 %d MB; D=%d F=%d, %d layers (%.0f MB of weights), reps=%d\n", prop.name,
           prop.multiProcessorCount, prop.l2CacheSize >> 20, D, F, L, 3.0 * L * F * D * 2 / 1e6, reps);
    MatmulContext mm;
    matmul_context_init(&mm);
    std::vector<bf16 *> Wg(L), Wu(L), WdT(L);
    for (int l = 0; l < L; l++) {
        cudaCheck(cudaMalloc(&Wg[l], sizeof(bf16) * (size_t)F * D));
        cudaCheck(cudaMalloc(&Wu[l], sizeof(bf16) * (size_t)F * D));
        cudaCheck(cudaMalloc(&WdT[l], sizeof(bf16) * (size_t)F * D));
        bench_fill_normal<<<1024, 256>>>(Wg[l], (long long)F * D, 1.0f / sqrtf((float)D), 100 + 3 * l);
        bench_set_col0<<<CEIL_DIV(F, 256), 256>>>(Wg[l], F, D, 1.0f);
        bench_fill_normal<<<1024, 256>>>(Wu[l], (long long)F * D, 0.02f, 101 + 3 * l);
        bench_fill_normal<<<1024, 256>>>(WdT[l], (long long)F * D, 0.02f, 102 + 3 * l);
        cudaCheckLaunch();
    }
    bf16 *X, *Y, *Yd;
    double *dsum;
    cudaCheck(cudaMalloc(&X, sizeof(bf16) * (size_t)maxM * D));
    cudaCheck(cudaMalloc(&Y, sizeof(bf16) * (size_t)maxM * D));
    cudaCheck(cudaMalloc(&Yd, sizeof(bf16) * (size_t)maxM * D));
    cudaCheck(cudaMalloc(&dsum, 3 * sizeof(double)));
    TwellFFNWorkspace ws, wa;  // forced columns (decode toggled), auto (its own dispatch history)
    if (twell_ffn_workspace_create(&ws, maxM, D, F, 8, 1) != TWELL_OK) return 1;
    if (twell_ffn_workspace_create(&wa, maxM, D, F, 8, 1) != TWELL_OK) return 1;
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    printf("\nM   nnz    meannz |    dense  dense.g     tile   decode decode.g     auto |   gate gate+up   down | "
           "dec.np dec.g.np gate.l2 | dn/dec dn.g/dec.g tile/dec auto/min auto | auto.g ag/min.g auto.g\n");
    std::vector<double> fit_M, fit_n, fit_y, fit_yg;
    uint64_t seed = 7;
    for (double mv : Ms) {
        const int M = (int)mv;
        for (double nnz : nnzs) {
            const double target = nnz < 0 ? -nnz * F : nnz;
            bench_fill_normal<<<256, 256>>>(X, (long long)M * D, 1.0f, seed++);
            bench_set_bias<<<CEIL_DIV(M, 8), 256>>>(X, M, D, F, (float)target, 0);
            cudaCheckLaunch();
            TwellPath auto_path = TWELL_PATH_AUTO;
            // One pass of a column over the L layers.
            auto pass = [&](int col) {
                for (int l = 0; l < L; l++) {
                    TwellFFNResult r;
                    int e;
                    if (col == 0) e = twell_ffn_forward(&mm, &ws, X, Wg[l], Wu[l], WdT[l], Y, M, TWELL_PATH_DENSE, -1, &r, s);
                    else if (col == 1) {
                        twell_ffn_set_decode_rows(&ws, 0);
                        e = twell_ffn_forward(&mm, &ws, X, Wg[l], Wu[l], WdT[l], Y, M, TWELL_PATH_SPARSE, -1, &r, s);
                        twell_ffn_set_decode_rows(&ws, ws.dec_alloc_rows);
                    } else if (col == 2 || col == 4) {  // 4: plain launches
                        if (col == 4) twell_ffn_set_decode_pdl(&ws, 0);
                        e = twell_ffn_forward(&mm, &ws, X, Wg[l], Wu[l], WdT[l], Y, M, TWELL_PATH_SPARSE, -1, &r, s);
                        twell_ffn_set_decode_pdl(&ws, 1);
                    } else {
                        e = twell_ffn_forward(&mm, &wa, X, Wg[l], Wu[l], WdT[l], Y, M, TWELL_PATH_AUTO, -1, &r, s);
                        auto_path = (TwellPath)r.path;
                    }
                    if (e) { fprintf(stderr, "error: bench_decode: twell_ffn_forward failed (%d)\n", e); exit(1); }
                }
            };
            // Check: decode vs dense on layer 0.
            twell_ffn_forward(&mm, &ws, X, Wg[0], Wu[0], WdT[0], Yd, M, TWELL_PATH_DENSE, -1, NULL, s);
            twell_ffn_forward(&mm, &ws, X, Wg[0], Wu[0], WdT[0], Y, M, TWELL_PATH_SPARSE, -1, NULL, s);
            cudaCheck(cudaMemsetAsync(dsum, 0, 3 * sizeof(double), s));
            bench_diff<<<64, 256, 0, s>>>(Y, Yd, (long long)M * D, dsum);
            double h[3];
            cudaCheck(cudaMemcpyAsync(h, dsum, sizeof h, cudaMemcpyDeviceToHost, s));
            cudaCheck(cudaStreamSynchronize(s));
            // The count of the dense or of the decode call above (whichever issued its copy; the same gates), synced.
            const double mean_nnz = (double)*ws.dense_nnz_host / M;
            const double rel = h[1] > 0 ? sqrt(h[0] / h[1]) : sqrt(h[0]);
            if (!(rel < 1e-2) || h[2] > 0) {
                fprintf(stderr, "error: bench_decode: M=%d nnz %.0f: decode vs dense rel err %.3e (%g non-finite)\n", M,
                        target, rel, h[2]);
                return 1;
            }
            // Graphs of the dense pass and of the decode pass with programmatic and with plain launches.
            const int NG = 3;
            cudaGraphExec_t gexec[NG];
            for (int g = 0; g < NG; g++) {
                cudaGraph_t graph;
                cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
                pass(g == 0 ? 0 : g == 1 ? 2 : 4);
                cudaCheck(cudaStreamEndCapture(s, &graph));
                cudaCheck(cudaGraphInstantiate(&gexec[g], graph, 0));
                cudaCheck(cudaGraphDestroy(graph));
            }
            // Columns: 0 dense, 1 dense.g, 2 tile, 3 decode, 4 decode.g, 5 auto, 6-8 the decode kernels alone,
            // 9 dec.np, 10 dec.g.np, 11 gate.l2, 12 auto.g (captured below, after the warm-up).
            const int NC = 13;
            cudaGraphExec_t auto_exec = NULL;
            auto run_col = [&](int c) {
                if (c == 1) cudaCheck(cudaGraphLaunch(gexec[0], s));
                else if (c == 4) cudaCheck(cudaGraphLaunch(gexec[1], s));
                else if (c == 10) cudaCheck(cudaGraphLaunch(gexec[2], s));
                else if (c == 12) { if (auto_exec) cudaCheck(cudaGraphLaunch(auto_exec, s)); }
                else if (c == 6)
                    for (int l = 0; l < L; l++)
                        twell_decode_gate_up(X, Wg[l], Wu[l], ws.dec_g, ws.dec_cnt, ws.dec_ent, M, D, F, NULL, 0, 1, s);
                else if (c == 7)
                    for (int l = 0; l < L; l++)
                        twell_decode_gate_up(X, Wg[l], Wu[l], ws.dec_g, ws.dec_cnt, ws.dec_ent, M, D, F, NULL, 1, 1, s);
                else if (c == 11)
                    for (int l = 0; l < L; l++)
                        twell_decode_gate_up(X, Wg[0], Wu[0], ws.dec_g, ws.dec_cnt, ws.dec_ent, M, D, F, NULL, 0, 1, s);
                else if (c == 8)
                    for (int l = 0; l < L; l++) twell_decode_down(WdT[l], ws.dec_cnt, ws.dec_ent, Y, M, D, F, 1, s);
                else pass(c == 0 ? 0 : c == 2 ? 1 : c == 3 ? 2 : c == 9 ? 4 : 3);
            };
            for (int c = 0; c < NC; c++) run_col(c);  // warm-up (auto: dispatch history)
            cudaCheck(cudaStreamSynchronize(s));
            // The AUTO pass captured as a graph: its paths are decided at capture, by the graph model, with the count of
            // the warm-up (twell_ffn_read_count: under capture nothing is read back).
            TwellPath auto_g_path;
            {
                twell_ffn_read_count(&wa);
                const TwellPath eager_path = auto_path;
                cudaGraph_t graph;
                cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
                pass(3);
                cudaCheck(cudaStreamEndCapture(s, &graph));
                cudaCheck(cudaGraphInstantiate(&auto_exec, graph, 0));
                cudaCheck(cudaGraphDestroy(graph));
                auto_g_path = auto_path;
                auto_path = eager_path;
                run_col(12);
                cudaCheck(cudaStreamSynchronize(s));
            }
            std::vector<std::vector<float>> t(NC);
            std::vector<int> order(NC);
            for (int c = 0; c < NC; c++) order[c] = c;
            uint64_t rs = 12345;
            for (int r = 0; r < reps; r++) {
                for (int i = NC - 1; i > 0; i--) {  // Fisher-Yates, fixed seed
                    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
                    std::swap(order[i], order[(int)((rs >> 33) % (uint64_t)(i + 1))]);
                }
                for (int k = 0; k < NC; k++) {
                    const int c = order[k];
                    cudaCheck(cudaEventRecord(e0, s));
                    run_col(c);
                    cudaCheck(cudaEventRecord(e1, s));
                    cudaCheck(cudaEventSynchronize(e1));
                    float ms;
                    cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
                    t[c].push_back(ms * 1000.0f / L);
                }
            }
            for (int g = 0; g < NG; g++) cudaCheck(cudaGraphExecDestroy(gexec[g]));
            cudaCheck(cudaGraphExecDestroy(auto_exec));
            float med[NC];
            for (int c = 0; c < NC; c++) med[c] = median(t[c]);
            const float best = std::min(med[0], med[3]), best_g = std::min(med[1], med[4]);
            printf("%-3d %-6.4g %6.1f | %8.2f %8.2f %8.2f %8.2f %8.2f %8.2f | %6.2f %7.2f %6.2f | %6.2f %8.2f %7.2f | "
                   "%6.2f %10.2f %8.2f %8.3f %-6s | %6.2f %8.3f %s\n", M, target, mean_nnz, med[0], med[1], med[2], med[3], med[4], med[5],
                   med[6], med[7], med[8], med[9], med[10], med[11], med[0] / med[3], med[1] / med[4], med[2] / med[3],
                   med[5] / best, auto_path == TWELL_PATH_SPARSE ? "decode" : "dense", med[12], med[12] / best_g,
                   auto_g_path == TWELL_PATH_SPARSE ? "decode" : "dense");
            fflush(stdout);
            fit_M.push_back(M);
            fit_n.push_back(mean_nnz);
            fit_y.push_back(med[3] / med[0]);
            fit_yg.push_back(med[4] / med[1]);
        }
    }
    fit_decode_model("eager", "TWELL_DECODE_", fit_M, fit_n, fit_y);
    fit_decode_model("graph", "TWELL_DECODE_G_", fit_M, fit_n, fit_yg);
    twell_ffn_workspace_free(&ws);
    twell_ffn_workspace_free(&wa);
    for (int l = 0; l < L; l++) {
        cudaCheck(cudaFree(Wg[l])); cudaCheck(cudaFree(Wu[l])); cudaCheck(cudaFree(WdT[l]));
    }
    cudaCheck(cudaFree(X)); cudaCheck(cudaFree(Y)); cudaCheck(cudaFree(Yd)); cudaCheck(cudaFree(dsum));
    cudaCheck(cudaStreamDestroy(s));
    matmul_context_free(&mm);
    return 0;
}
