// dev/bench/bench_attention.cu: times core/attention.cuh at the paper's shapes (hd 64, 32 heads, T 2048).
// Usage: build/bench_attention [reps]   (default 30)
// For B in {4, 8}: forward, backward and forward+backward of each kernel variant side by side (v1 = 64-row
// forward + atomic dq; v2 = 128-row forward + deterministic 128-row dq kernel; v2atom = v2 forward + atomic dq;
// v1det = v1 forward + 64-row deterministic dq kernel; wg (the default) = the Hopper wgmma forward of
// core/attention_wgmma.cuh + v2's backward; wgbwd = the wgmma forward and backward), median of `reps` runs
// timed with CUDA events after warm-up, and TFLOP/s with causal FLOP counts: fwd 2*B*H*T*T*hd (= 4*B*H*T^2*hd/2:
// two GEMMs, half the matrix), bwd 2.5x fwd (five GEMMs; the deterministic backward really does seven). Inputs
// are random (never zeros). Also one timing of the simple path at B=4, with few runs, to know what it costs.
#include <stdio.h>
#include <string.h>
#include <stdlib.h>

#include <vector>

#include "attention.cuh"
#include "cli.h"
#include "rng.h"

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

static float median(float *x, int n) {
    qsort(x, (size_t)n, sizeof(float), cmp_float);
    return n % 2 ? x[n / 2] : 0.5f * (x[n / 2 - 1] + x[n / 2]);
}

static void fill_random(bf16 *d, size_t n, Rng *r, double std) {
    float *h = (float *)sllm_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) h[i] = (float)(rng_normal(r) * std);
    upload_bf16(d, h, n);
    free(h);
}

typedef struct {
    bf16 *q, *k, *v, *out, *dout, *dq, *dk, *dv;
    float *lse, *scratch;
} Bufs;

// mode 0: fwd, 1: bwd, 2: fwd+bwd. Returns the median ms.
static float time_it(const AttnVariant *va, int mode, const Bufs *b, int B, int T, int H, int KVH, int hd, int reps) {
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    float *ms = (float *)sllm_malloc((size_t)reps * sizeof(float));
    for (int r = -3; r < reps; r++) {  // 3 warm-up runs
        cudaCheck(cudaEventRecord(e0, 0));
        if (mode != 1) attention_forward_variant(va, b->out, b->lse, b->q, b->k, b->v, B, T, H, KVH, hd, 0);
        if (mode != 0)
            attention_backward_variant(va, b->dq, b->dk, b->dv, b->dout, b->out, b->lse, b->q, b->k, b->v, b->scratch,
                                    B, T, H, KVH, hd, 0);
        cudaCheck(cudaEventRecord(e1, 0));
        cudaCheck(cudaEventSynchronize(e1));
        if (r >= 0) cudaCheck(cudaEventElapsedTime(&ms[r], e0, e1));
    }
    float m = median(ms, reps);
    free(ms);
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    return m;
}

int main(int argc, char **argv) {
    int reps = 30;
    CliOpt opts[] = {{NULL, 0, CLI_INT, NULL, NULL, 0, 0, 0}};
    std::vector<const char *> pos(argc);
    int npos = 0;
    cli_parse_pos(argc, argv, opts, "bench_attention",
                  "Times our flash attention forward and backward (every variant: v1, v2 default, atomic dq, simple)\n"
                  "at T=2048, 32 heads of 64, causal, B=4 and 8 (and GQA with 8 kv heads); prints ms and TFLOP/s\n"
                  "(fwd 2*B*H*T^2*hd FLOPs, bwd 2.5x), medians of REPS runs.\n"
                  "Positional argument: REPS, 1 to 100000 (default 30).", pos.data(), &npos);
    if (npos > 1) cli_fail("bench_attention", "expected at most one argument (REPS), got %d", npos);
    CliOpt reps_arg = {"REPS", 0, CLI_INT, &reps, "", 1, 100000, 0};
    if (npos == 1) cli_parse_arg(&reps_arg, pos[0], "bench_attention");
    cuda_require_device("bench_attention");
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("bench_attention on %s (%d SMs), median of %d runs\n", prop.name, prop.multiProcessorCount, reps);
    const int T = 2048, H = 32, KVH = 32, hd = 64;
    const int Bmax = 8;
    size_t nq = (size_t)Bmax * T * H * hd, nkv = (size_t)Bmax * T * KVH * hd;
    Bufs b;
    cudaCheck(cudaMalloc(&b.q, nq * 2));
    cudaCheck(cudaMalloc(&b.k, nkv * 2));
    cudaCheck(cudaMalloc(&b.v, nkv * 2));
    cudaCheck(cudaMalloc(&b.out, nq * 2));
    cudaCheck(cudaMalloc(&b.dout, nq * 2));
    cudaCheck(cudaMalloc(&b.dq, nq * 2));
    cudaCheck(cudaMalloc(&b.dk, nkv * 2));
    cudaCheck(cudaMalloc(&b.dv, nkv * 2));
    cudaCheck(cudaMalloc(&b.lse, (size_t)Bmax * H * T * 4));
    cudaCheck(cudaMalloc(&b.scratch, attention_backward_scratch_bytes(Bmax, T, H, KVH, hd)));
    Rng rng;
    rng_seed(&rng, 1234);
    fill_random(b.q, nq, &rng, 1.0);
    fill_random(b.k, nkv, &rng, 1.0);
    fill_random(b.v, nkv, &rng, 1.0);
    fill_random(b.dout, nq, &rng, 1.0);

    // forward once so that out/lse are consistent inputs of the backward timings
    printf("%-7s %2s %5s %3s %4s %3s | %9s %8s | %9s %8s | %9s %8s\n", "variant", "B", "T", "H", "KVH", "hd", "fwd ms",
           "TFLOP/s", "bwd ms", "TFLOP/s", "f+b ms", "TFLOP/s");
    struct { const char *name; AttnVariant v; } vars[] = {
        {"v1", {ATTN_PATH_FAST, 1, 0, 1}},     {"v2", {ATTN_PATH_FAST, 2, 1, 2}},
        {"v2atom", {ATTN_PATH_FAST, 2, 0, 1}}, {"v1det", {ATTN_PATH_FAST, 1, 1, 1}},
        {"wg", {ATTN_PATH_FAST, 3, 1, 2}},     {"wgbwd", {ATTN_PATH_FAST, 3, 2, 2}},
    };
    const int nv = (int)(sizeof vars / sizeof vars[0]);
    // GQA case: v1, v2, wg and wgbwd only (variant mask)
    struct { int B, KVH; unsigned mask; } cases[] = {{4, 32, (1u << nv) - 1}, {8, 32, (1u << nv) - 1}, {8, 8, 0x33}};
    float summary[3][6][3] = {{{0}}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int B = cases[c].B, kvh = cases[c].KVH;
        double fwd_flop = 2.0 * B * H * (double)T * T * hd, bwd_flop = 2.5 * fwd_flop;
        attention_forward_variant(&vars[0].v, b.out, b.lse, b.q, b.k, b.v, B, T, H, kvh, hd, 0);
        for (int vi = 0; vi < nv; vi++) {
            if (!(cases[c].mask >> vi & 1)) continue;
            float tf = time_it(&vars[vi].v, 0, &b, B, T, H, kvh, hd, reps);
            float tb = time_it(&vars[vi].v, 1, &b, B, T, H, kvh, hd, reps);
            float tfb = time_it(&vars[vi].v, 2, &b, B, T, H, kvh, hd, reps);
            summary[c][vi][0] = tf, summary[c][vi][1] = tb, summary[c][vi][2] = tfb;
            printf("%-7s %2d %5d %3d %4d %3d | %9.3f %8.1f | %9.3f %8.1f | %9.3f %8.1f\n", vars[vi].name, B, T, H,
                   kvh, hd, tf, fwd_flop / tf * 1e-9, tb, bwd_flop / tb * 1e-9, tfb,
                   (fwd_flop + bwd_flop) / tfb * 1e-9);
        }
    }
    {
        AttnVariant simple = attention_variant_default(ATTN_PATH_SIMPLE);
        int B = 4;
        double fwd_flop = 2.0 * B * H * (double)T * T * hd, bwd_flop = 2.5 * fwd_flop;
        float tf = time_it(&simple, 0, &b, B, T, H, KVH, hd, 3);
        float tb = time_it(&simple, 1, &b, B, T, H, KVH, hd, 3);
        printf("%-7s %2d %5d %3d %4d %3d | %9.3f %8.1f | %9.3f %8.1f |\n", "simple", B, T, H, KVH, hd, tf,
               fwd_flop / tf * 1e-9, tb, bwd_flop / tb * 1e-9);
    }
    printf("\nv1 vs v2 (mma.sync kernels): time ratio v1/v2 (>1 = v2 faster)\n");
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
        printf("  B=%d KVH=%2d: fwd %.3f -> %.3f ms (x%.2f) | bwd %.3f -> %.3f ms (x%.2f) | f+b %.3f -> %.3f ms "
               "(x%.2f)\n",
               cases[c].B, cases[c].KVH, summary[c][0][0], summary[c][1][0], summary[c][0][0] / summary[c][1][0],
               summary[c][0][1], summary[c][1][1], summary[c][0][1] / summary[c][1][1], summary[c][0][2],
               summary[c][1][2], summary[c][0][2] / summary[c][1][2]);
    printf("deterministic dq cost at the v2 forward: bwd det/atomic = %.3f (B=4), %.3f (B=8)\n",
           summary[0][1][1] / summary[0][2][1], summary[1][1][1] / summary[1][2][1]);
    if (hd == AWG_HD)  // hd 64: the wg variant ran the Hopper wgmma forward (else it fell back to v2)
        printf("wgmma forward (wg) vs v2: fwd %.3f -> %.3f ms (x%.2f) at B=4, %.3f -> %.3f (x%.2f) at B=8, GQA %.3f -> "
               "%.3f (x%.2f)\n", summary[0][1][0], summary[0][4][0], summary[0][1][0] / summary[0][4][0],
               summary[1][1][0], summary[1][4][0], summary[1][1][0] / summary[1][4][0], summary[2][1][0],
               summary[2][4][0], summary[2][1][0] / summary[2][4][0]);
    if (hd == AWG_HD)  // the wgmma backward (wgbwd) against v2's deterministic backward
        printf("wgmma backward (wgbwd) vs v2: bwd %.3f -> %.3f ms (x%.2f) at B=4, %.3f -> %.3f (x%.2f) at B=8, GQA "
               "%.3f -> %.3f (x%.2f)\n", summary[0][1][1], summary[0][5][1], summary[0][1][1] / summary[0][5][1],
               summary[1][1][1], summary[1][5][1], summary[1][1][1] / summary[1][5][1], summary[2][1][1],
               summary[2][5][1], summary[2][1][1] / summary[2][5][1]);
    cudaCheck(cudaFree(b.q));
    cudaCheck(cudaFree(b.k));
    cudaCheck(cudaFree(b.v));
    cudaCheck(cudaFree(b.out));
    cudaCheck(cudaFree(b.dout));
    cudaCheck(cudaFree(b.dq));
    cudaCheck(cudaFree(b.dk));
    cudaCheck(cudaFree(b.dv));
    cudaCheck(cudaFree(b.lse));
    cudaCheck(cudaFree(b.scratch));
    return 0;
}
