// dev/bench/bench_l2.cu: the L2 gather rate against the footprint and the width of the rows gathered.
// Usage: build/bench_l2 [reps]   (default 9)
// The token-major up/down read, per token, ~29 x 2 random weight rows of 4 KB from L2 (bench_ffn --gather:
// ~9.8 TB/s on an H200, the floor of the split path). This probe asks whether the rate depends on how many
// distinct bytes the rows span (the footprint: 23 MB for one [5632, 2048] bf16 matrix) or on the width of one
// row read, i.e. whether cutting the columns into slices run one after the other (same bytes, a smaller
// footprint per pass) could gather faster.
// Kernel: one CTA of 128 threads per "token" reads `rows_per_cta` rows; row j of CTA b is r = hash(b, j) in
// [0, nrows); it reads `width` 16-byte chunks at W + r * stride + offset (stride >= width: a slice of a wider
// row). U loads in flight per thread. Bytes = grid x rows_per_cta x width x 16, the same in every line.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#include "cli.h"
#include "cuda_common.cuh"
#include "dev/bench/bench_rows.cuh"

template <int U>
__global__ void l2_probe_kernel(const uint4 *__restrict__ W, int nrows, int width_log2, int stride, int offset,
                                int rows_per_cta, uint32_t seed, uint32_t *out) {
    __shared__ int rows[1024];
    for (int j = threadIdx.x; j < rows_per_cta; j += blockDim.x) rows[j] = bench_random_row(seed, blockIdx.x, j, nrows);
    __syncthreads();
    const int total = rows_per_cta << width_log2, cmask = (1 << width_log2) - 1;
    uint32_t acc = 0;
    for (int f0 = threadIdx.x; f0 < total; f0 += 128 * U) {
        uint4 v[U];
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int f = f0 + u * 128;
            v[u] = f < total ? __ldg(W + (size_t)rows[f >> width_log2] * stride + offset + (f & cmask))
                             : make_uint4(0, 0, 0, 0);
        }
#pragma unroll
        for (int u = 0; u < U; u++) acc ^= v[u].x ^ v[u].y ^ v[u].z ^ v[u].w;
    }
    if (acc == 0x12345678u) out[blockIdx.x] = acc;  // practically never: keeps the loads
}

int main(int argc, char **argv) {
    int reps = 9;
    CliOpt opts[] = {{NULL, 0, CLI_INT, NULL, NULL, 0, 0, 0}};
    std::vector<const char *> pos(argc);
    int npos = 0;
    cli_parse_pos(argc, argv, opts, "bench_l2",
                  "The L2 gather rate of random weight rows against the footprint and the row width.\n"
                  "Positional argument: REPS, launches per line (median), 1 to 100000 (default 9).", pos.data(), &npos);
    if (npos > 1) cli_fail("bench_l2", "expected at most one argument (REPS), got %d", npos);
    CliOpt reps_arg = {"REPS", 0, CLI_INT, &reps, "", 1, 100000, 0};
    if (npos == 1) cli_parse_arg(&reps_arg, pos[0], "bench_l2");
    cuda_require_device("bench_l2");
    const int grid = 65536;                      // tokens (M), one CTA each
    const size_t per_cta_bytes = 58 * 4096;      // nnz 29: 29 up rows + 29 down rows of 4 KB
    const size_t max_bytes = 72u << 20;
    uint4 *W; uint32_t *out;
    cudaCheck(cudaMalloc(&W, max_bytes));
    cudaCheck(cudaMalloc(&out, grid * sizeof(uint32_t)));
    cudaCheck(cudaMemset(W, 0x5A, max_bytes));  // contents do not matter; never all zero
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0)); cudaCheck(cudaEventCreate(&e1));
    cudaDeviceProp prop; cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("bench_l2 on %s (L2 %d MB): %d CTAs x %zu KB of random rows = %.2f GB per launch, median of %d\n",
           prop.name, prop.l2CacheSize >> 20, grid, per_cta_bytes >> 10, grid * (double)per_cta_bytes / 1e9, reps);
    printf("%-44s %10s %8s %8s %8s\n", "rows (width x count, stride)", "footprint", "U", "ms", "TB/s");
    struct Cfg { int width, nrows, stride, offset; const char *what; };
    const Cfg cfgs[] = {
        {256, 64, 256, 0, "4 KB rows"},           {256, 512, 256, 0, "4 KB rows"},
        {256, 1408, 256, 0, "4 KB rows"},         {256, 2816, 256, 0, "4 KB rows"},
        {256, 5632, 256, 0, "4 KB rows (one matrix)"}, {256, 11264, 256, 0, "4 KB rows (two matrices)"},
        {256, 16896, 256, 0, "4 KB rows (three: Wg, Wu, Wd)"},
        {512, 2816, 512, 0, "8 KB rows (interleaved pair)"}, {512, 5632, 512, 0, "8 KB rows (interleaved pair)"},
        {128, 2816, 128, 0, "2 KB rows, packed"}, {128, 5632, 128, 0, "2 KB rows, packed (half columns)"},
        {128, 11264, 128, 0, "2 KB rows, packed"},
        {128, 5632, 256, 0, "2 KB = 1st half of 4 KB rows"}, {128, 5632, 256, 128, "2 KB = 2nd half of 4 KB rows"},
        {64, 5632, 64, 0, "1 KB rows, packed (quarter columns)"}, {64, 5632, 256, 64, "1 KB = a quarter of 4 KB rows"},
        {64, 22528, 64, 0, "1 KB rows, packed"},
        {32, 5632, 32, 0, "512 B rows, packed (eighth)"},
    };
    for (const Cfg &c : cfgs) {
        const int wlog = __builtin_ctz((unsigned)c.width);
        const int rows_per_cta = (int)(per_cta_bytes / (16u * c.width));
        if (rows_per_cta > 1024 || (size_t)c.nrows * c.stride * 16 > max_bytes) {
            fprintf(stderr, "bench_l2: config out of range\n"); return 1;
        }
        for (int U : {4, 8}) {
            std::vector<float> t;
            for (int r = 0; r < reps + 2; r++) {
                cudaCheck(cudaEventRecord(e0));
                if (U == 4) l2_probe_kernel<4><<<grid, 128>>>(W, c.nrows, wlog, c.stride, c.offset, rows_per_cta, 77 + r, out);
                else l2_probe_kernel<8><<<grid, 128>>>(W, c.nrows, wlog, c.stride, c.offset, rows_per_cta, 77 + r, out);
                cudaCheck(cudaGetLastError());
                cudaCheck(cudaEventRecord(e1));
                cudaCheck(cudaEventSynchronize(e1));
                float ms; cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
                if (r >= 2) t.push_back(ms);  // two warm-up launches
            }
            std::sort(t.begin(), t.end());
            const float ms = t[t.size() / 2];
            char name[96];
            snprintf(name, sizeof name, "%s (%d x %d, %d)", c.what, c.width * 16, c.nrows, c.stride * 16);
            printf("%-44s %7.1f MB %8d %8.3f %8.2f\n", name, (double)c.nrows * c.width * 16 / 1e6, U, ms,
                   grid * (double)per_cta_bytes / (ms * 1e-3) / 1e12);
        }
    }
    cudaCheck(cudaFree(W)); cudaCheck(cudaFree(out));
    return 0;
}
