// dev/bench/bench_ffn_train.cu: FFN forward + backward for training, the sparse TwELL path (twell/train_ffn.cuh)
// against our dense path (the trainer's: 2-batched gate/up GEMM, ffn_forward, down GEMM; dWd GEMM, dh GEMM,
// ffn_backward, 2-batched dWg/dWu GEMM, 2 dX GEMMs; weight gradients accumulated in fp32), same process, same inputs.
//
//   build/bench_ffn_train [--M 16384,65536] [--nnz 8,16,29,64,128,256,512] [--pattern uniform|heavy|mix]
//                         [--reps 15] [--nongated] [--D 2048] [--F 5632]
//
// Per point: synthetic inputs with the mean active units per token (dev/bench/train_problem.cuh), one dense and one
// sparse forward + backward, every output compared (Y, dX, dWg, dWu, dWd, L1: relative error < 1e-2, else exit 1),
// then --reps interleaved rounds (dense fwd+bwd, sparse fwd+bwd, sparse fwd alone, sparse bwd alone, the TwELL gate
// alone), each call timed alone with CUDA events; medians. Columns: ms, dense/sparse, and the sparse statistics.
#include <math.h>

#include <vector>

#include "cuda_common.cuh"
#include "dev/bench/train_problem.cuh"
#include "matmul.cuh"
#include "twell/train_ffn.cuh"

int main(int argc, char **argv) {
    int reps = 15, nongated = 0, D = 2048, F = 5632, pattern = TP_UNIFORM, prof = 0;
    const char *M_list = "16384,65536", *nnz_list = "8,16,29,64,128,256,512", *pname = "uniform";
    CliOpt opts[] = {
        {"M", 0, CLI_STRING, &M_list, "rows (tokens), comma-separated", 0, 0, 0},
        {"nnz", 0, CLI_STRING, &nnz_list, "mean active units per token, comma-separated (P%: P/100 of the F units)", 0, 0, 0},
        {"pattern", 0, CLI_STRING, &pname, "uniform, heavy or mix (dev/bench/train_problem.cuh)", 0, 0, 0},
        {"reps", 0, CLI_INT, &reps, "interleaved rounds (medians)", 1, 100000, 0},
        {"nongated", 0, CLI_FLAG, &nongated, "the non-gated FFN (no gate matrix)", 0, 0, 0},
        {"prof", 0, CLI_FLAG, &prof, "the sparse path's stages timed with events, and its kernels' registers", 0, 0, 0},
        {"D", 0, CLI_INT, &D, "d_model (a multiple of 256)", 256, 4096, 0},
        {"F", 0, CLI_INT, &F, "d_ff (a multiple of 256)", 256, 8192, 0},
        {NULL, 0, CLI_INT, NULL, NULL, 0, 0, 0},
    };
    cli_parse(argc, argv, opts, "bench_ffn_train",
              "FFN forward + backward for training: the sparse TwELL path against our dense path, same inputs;\n"
              "every output compared first, then interleaved rounds, medians (dev/bench/bench_ffn_train.cu).");
    const std::vector<double> Ms = bench_list("bench_ffn_train", "M", M_list, 1, 1, 1 << 20, 0);
    const std::vector<double> nnzs = bench_list("bench_ffn_train", "nnz", nnz_list, 0, 0, 1 << 20, 1);
    const int gated = !nongated;
    if (!strcmp(pname, "heavy")) pattern = TP_HEAVY;
    else if (!strcmp(pname, "mix")) pattern = TP_MIX;
    else if (strcmp(pname, "uniform")) cli_fail("bench_ffn_train", "option --pattern: expected uniform, heavy or mix, got \"%s\"", pname);
    for (double nz : nnzs)
        if (nz > F) cli_fail("bench_ffn_train", "option --nnz: %g is more than the %d units of --F", nz, F);
    if (tt_check_shape(D, F)) exit(2);
    cuda_require_device("bench_ffn_train");
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("bench_ffn_train: %s, D %d F %d, %s, pattern %s, %d reps (medians, ms, CUDA events)\n", prop.name, D, F,
           gated ? "gated" : "non-gated", pname, reps);
    MatmulContext mm;
    matmul_context_init(&mm);
    cudaStream_t s = 0;
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    const float l1_coef = 1e-4f;
    printf("%7s %6s | %8s %8s %7s | %8s %8s %8s | %7s %7s %6s %6s %6s | %s\n", "M", "nnz", "dense", "sparse", "d/s",
           "sp.fwd", "sp.bwd", "gate", "nnz/tok", "maxrow", "dense", "ovf", "pool", "max rel err");
    for (double Md : Ms) {
        const int M = (int)Md;
        TProblem P;
        tp_alloc(&P, M, D, F, gated, 1);
        TwTrainWS ws;
        TwTrainState st;
        if (twtrain_ws_init(&ws, M, D, F, gated, 0, 0, 0, &mm) || twtrain_state_alloc(&st, &ws)) return 1;
        if (prof) {
            twtrain_prof_enable(&ws);
            cudaFuncAttributes fa;
            void *ks[5] = {(void *)tt_assign_kernel, (void *)tt_pair_dot_kernel<8, TT_DOT_UP>,
                           (void *)tt_pair_dot_kernel<8, TT_DOT_DH>, (void *)tt_bwd_dx_kernel, (void *)tt_wgrad_kernel};
            const char *kn[5] = {"assign", "fwd_up<8>", "bwd_dh<8>", "bwd_dx", "wgrad"};
            for (int k = 0; k < 5; k++) {
                cudaCheck(cudaFuncGetAttributes(&fa, ks[k]));
                printf("# kernel %s: %d registers, %zu B static smem, local %zu B\n", kn[k], fa.numRegs, fa.sharedSizeBytes,
                       fa.localSizeBytes);
            }
        }
        printf("# M %d: state per layer %.1f MB (pool %d pairs), dense activations per layer (gu + h) %.1f MB\n", M,
               twtrain_state_bytes(&ws) / 1e6, ws.cap_pairs, (double)M * F * 2 * (gated ? 3 : 2) / 1e6);
        for (double nz : nnzs) {
            const float nnz = nz < 0 ? (float)(-nz * F) : (float)nz;
            tp_generate(&P, 1234 + (uint64_t)nnz, pattern, nnz);
            tp_dense(&P, &mm, l1_coef, s);
            if (tp_sparse(&P, &ws, &st, l1_coef, 0, s)) return 1;
            cudaCheck(cudaDeviceSynchronize());
            TErrors e = tp_compare(&P);
            const double err = tp_max_err(&e);
            TwTrainStats ts;
            cudaCheck(cudaMemcpy(&ts, st.stats, sizeof(ts), cudaMemcpyDeviceToHost));
            if (!(err < 1e-2) || e.nnz_rel > 1e-3) {
                printf("FAIL M %d nnz %g: rel err Y %.2e dX %.2e dWg %.2e dWu %.2e dWd %.2e L1 %.2e nnz %.2e\n", M, nnz,
                       e.y, e.dx, e.dwg, e.dwu, e.dwd, e.l1, e.nnz_rel);
                return 1;
            }
            std::vector<float> td, tsp, tf, tb, tg;
            std::vector<std::vector<float>> stage(TT_PROF_N);
            for (int r = -2; r < reps; r++) {
                float ms;
                for (int col = 0; col < 5; col++) {
                    const int c = (col + r + 2) % 5;  // rotate the order of the columns every round
                    cudaCheck(cudaEventRecord(e0, s));
                    if (c == 0) tp_dense(&P, &mm, l1_coef, s);
                    else if (c == 1) tp_sparse(&P, &ws, &st, l1_coef, 0, s);
                    else if (c == 2) twtrain_forward(&ws, &st, P.X, tp_wg(&P), tp_wu(&P), P.WdT, P.Ys, M, P.l1_s, P.nnz_s, P.fired_s, s);
                    else if (c == 3)
                        twtrain_backward(&ws, &st, P.X, P.dY, tp_wg(&P), tp_wu(&P), P.WdT, P.dXs, gated ? P.dWg_s : NULL,
                                         P.dWu_s, P.dWd_s, 0, l1_coef, s);
                    else {
                        cudaCheck(cudaMemsetAsync(ws.ovf_flag, 0, (size_t)M * 4, s));
                        cudaCheck(cudaMemsetAsync(ws.counters, 0, sizeof(TwellCounters), s));
                        twell_gate_wgmma_launch(P.X, P.Wgu, M, D, F, ws.C, ws.tw, ws.ovf_flag, ws.ovf_list, ws.counters, s);
                    }
                    cudaCheck(cudaEventRecord(e1, s));
                    cudaCheck(cudaEventSynchronize(e1));
                    cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
                    if (r < 0) continue;
                    if (prof && c == 1)
                        for (int q = 1; q < TT_PROF_N; q++) {
                            if (q == 6) continue;
                            float sm;
                            cudaCheck(cudaEventElapsedTime(&sm, ws.prof[TT_PROF_FROM[q]], ws.prof[q]));
                            stage[q].push_back(sm);
                        }
                    (c == 0 ? td : c == 1 ? tsp : c == 2 ? tf : c == 3 ? tb : tg).push_back(ms);
                }
            }
            const float md = median(td), msp = median(tsp);
            printf("%7d %6.0f | %8.3f %8.3f %6.2fx | %8.3f %8.3f %8.3f | %7.1f %7d %6d %6d %6d | %.1e\n", M, nnz, md, msp,
                   md / msp, median(tf), median(tb), median(tg), (double)ts.pairs / M, ts.max_row_nnz, ts.n_dense,
                   ts.n_overflow, ts.n_pool_full, err);
            if (prof) {
                printf("    stages (ms):");
                for (int q = 1; q < TT_PROF_N; q++)
                    if (q != 6) printf(" %s %.3f", TT_PROF_NAMES[q], median(stage[q]));
                printf("\n");
            }
            fflush(stdout);
        }
        twtrain_state_free(&st);
        twtrain_ws_free(&ws);
        tp_free(&P);
    }
    matmul_context_free(&mm);
    return 0;
}
