// dev/bench/bench_gemv.cu: the decoding GEMV (core/gemv.cuh) against the copy bandwidth and cuBLASLt, per weight
// shape of a decoding step, with the kernel's streaming parameters varied.
// Usage: build/bench_gemv [--M 1] [--reps 200]
// Each line: one configuration on one shape, `reps` calls captured in a CUDA graph and replayed (programmatic
// dependent launches between the calls, as in a decoding step), the calls cycling over enough copies of the weights
// (>= 256 MB) that every call reads its matrix from HBM. us per call and GB/s of weight bytes; "x copy" is the time
// against the matrix's bytes at the measured device-to-device copy bandwidth (reads + writes per second).
// Variants: U = 16-byte chunks per lane and row in flight, R = rows per warp. (Loads with an L2::256B prefetch hint
// measured within 3% of plain ones, dev/RESULTS.md, and were dropped.)
#include <stdio.h>
#include <stdlib.h>
#include <algorithm>
#include <vector>

#include "cli.h"
#include "cuda_common.cuh"
#include "gemv.cuh"
#include "matmul.cuh"

typedef struct { const char *name; int N, K; } Shape;

// us per call of fn(copy) over reps calls in a graph, median of 5 replays
template <class F>
static double time_graph(F fn, int copies, int reps, cudaStream_t s) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < reps; i++) fn(i % copies);
    cudaCheck(cudaStreamEndCapture(s, &g));
    cudaCheck(cudaGraphInstantiate(&ge, g, 0));
    cudaCheck(cudaGraphLaunch(ge, s));
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0)); cudaCheck(cudaEventCreate(&e1));
    std::vector<float> t;
    for (int r = 0; r < 5; r++) {
        cudaCheck(cudaEventRecord(e0, s));
        cudaCheck(cudaGraphLaunch(ge, s));
        cudaCheck(cudaEventRecord(e1, s));
        cudaCheck(cudaEventSynchronize(e1));
        float ms;
        cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
        t.push_back(ms);
    }
    std::sort(t.begin(), t.end());
    cudaGraphExecDestroy(ge); cudaGraphDestroy(g);
    cudaEventDestroy(e0); cudaEventDestroy(e1);
    return t[2] * 1e3 / reps;
}

int main(int argc, char **argv) {
    int M = 1, reps = 200;
    CliOpt opts[] = {
        {"M", 0, CLI_INT, &M, "rows (sequences), 1..4", 1, GEMV_MAX_M, 0},
        {"reps", 0, CLI_INT, &reps, "calls per timed graph", 1, 10000, 0},
        {NULL, 0, CLI_INT, NULL, NULL, 0, 0, 0},
    };
    cli_parse(argc, argv, opts, "bench_gemv", "the decoding GEMV against the copy bandwidth and cuBLASLt");
    cudaStream_t s;
    cudaCheck(cudaStreamCreate(&s));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    const double bw = device_copy_bandwidth(s);
    printf("device %s, copy bandwidth %.0f GB/s; M = %d, %d calls per graph\n", prop.name, bw / 1e9, M, reps);
    const Shape shapes[] = {{"Wo / down-out [2048, 2048]", 2048, 2048},
                            {"q,k,v [6144, 2048]", 6144, 2048},
                            {"gate+up [11264, 2048]", 11264, 2048},
                            {"down [2048, 5632]", 2048, 5632},
                            {"LM head [49152, 2048]", 49152, 2048}};
    MatmulContext mm;
    matmul_context_init(&mm);
    bf16 *x, *y;
    float *yf;
    cudaCheck(cudaMalloc((void **)&x, (size_t)M * 8192 * 2));
    cudaCheck(cudaMemset(x, 0, (size_t)M * 8192 * 2));
    cudaCheck(cudaMalloc((void **)&y, (size_t)M * 65536 * 2));
    cudaCheck(cudaMalloc((void **)&yf, (size_t)M * 65536 * 4));
    printf("%-28s %-22s %10s %10s %8s\n", "shape", "kernel", "us/call", "GB/s", "x copy");
    for (const Shape &sh : shapes) {
        const size_t bytes = (size_t)sh.N * sh.K * 2;
        const int copies = (int)((((size_t)256 << 20) + bytes - 1) / bytes);
        bf16 *W;
        cudaCheck(cudaMalloc((void **)&W, bytes * copies));
        cudaCheck(cudaMemset(W, 0, bytes * copies));
        auto Wc = [&](int c) { return W + (size_t)c * sh.N * sh.K; };
        const double floor_us = bytes / bw * 1e6;
        auto report = [&](const char *k, double us) {
            printf("%-28s %-22s %10.2f %10.0f %8.2f\n", sh.name, k, us, bytes / us * 1e-3, us / floor_us);
        };
        report("cuBLASLt", time_graph([&](int c) { matmul(&mm, y, 0, x, 0, Wc(c), 1, M, sh.N, sh.K, 1.0f, 0.0f, s); },
                                      copies, reps, s));
        const GemvIn in = gemv_in(x);
#define VARIANT(U, R, label)                                                                              \
    {                                                                                                           \
        GemvRowsOp<bf16, R> op;                                                                                 \
        op.y = y; op.N = sh.N; op.K = sh.K;                                                                     \
        report(label, time_graph([&](int c) { op.W = Wc(c); gemv_launch_u<U>(op, in, M, sh.K, sh.N / R, s); }, \
                                 copies, reps, s));                                                             \
    }
        VARIANT(8, 2, "gemv U8 R2 (default)")
        VARIANT(8, 1, "gemv U8 R1")
        VARIANT(16, 1, "gemv U16 R1")
        VARIANT(4, 2, "gemv U4 R2")
        VARIANT(4, 4, "gemv U4 R4")
        VARIANT(24, 1, "gemv U24 R1")
        VARIANT(12, 2, "gemv U12 R2")
#undef VARIANT
        cudaFree(W);
    }
    matmul_context_free(&mm);
    return 0;
}
