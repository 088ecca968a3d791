// dev/bench/bench_gen.cuh: the benchmarks' synthetic FFN problems (bench_ffn, bench_decode), generated on the device
// with a hash RNG, and their helpers.
//
// Sparsity control: X [M, D] ~ N(0,1) and Wg [F, D] ~ N(0, 1/D) except column 0: Wg[n,0] = 1 (bench_set_col0) and
// X[m,0] = -sigma_m z(p_m) (bench_set_bias), sigma_m^2 = sum_{d>=1} X[m,d]^2 / D, z(p) = sqrt(2) erfcinv(2p): each
// gate of row m is positive with probability p_m, independently over n; uniform: p_m = nnz / F; heavy: the first
// tokens of each 2048-token sequence fire ~30x more (see bench_ffn.cu).
#ifndef SLLM_BENCH_GEN_CUH
#define SLLM_BENCH_GEN_CUH

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "cli.h"
#include "cuda_common.cuh"

__device__ __forceinline__ uint32_t bench_hash(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return (uint32_t)x;
}
__device__ __forceinline__ float bench_normal(uint64_t seed, uint64_t i) {
    float u1 = (bench_hash(seed * 0x9E3779B97F4A7C15ull + 2 * i) + 1.0f) * 2.3283064e-10f;
    float u2 = bench_hash(seed * 0x9E3779B97F4A7C15ull + 2 * i + 1) * 2.3283064e-10f;
    return sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
}
__global__ void bench_fill_normal(bf16 *p, long long n, float scale, uint64_t seed) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16_rn(scale * bench_normal(seed, (uint64_t)i));
}
__global__ void bench_set_col0(bf16 *W, int rows, int D, float v) {
    int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r < rows) W[(size_t)r * D] = __float2bfloat16_rn(v);
}
// One warp per row: X[m,0] = -sigma_m z(p_m).
__global__ void bench_set_bias(bf16 *X, int M, int D, int F, float nnz, int heavy) {
    int m = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (m >= M) return;
    float s = 0;
    for (int d = 1 + lane; d < D; d += 32) { float v = __bfloat162float(X[(size_t)m * D + d]); s += v * v; }
    s = warp_sum(s);
    float p = nnz / F;
    if (heavy) {
        const float mean_w = 1.0f + 40.0f * (1.0f - expf(-2048.0f / 8)) / (1.0f - expf(-1.0f / 8)) / 2048.0f;
        float w = 1.0f + 40.0f * expf(-(float)(m % 2048) / 8.0f);
        p = fminf(0.95f, p * w / mean_w);
    }
    if (lane == 0) {
        float z = p >= 1.0f ? -1e4f : (p <= 0.0f ? 1e4f : sqrtf(2.0f) * erfcinvf(2.0f * p));
        X[(size_t)m * D] = __float2bfloat16_rn(-sqrtf(s / D) * z);
    }
}
// sum (a-b)^2 and sum b^2, plus count of non-finite a.
__global__ void bench_diff(const bf16 *a, const bf16 *b, long long n, double *out) {
    double s0 = 0, s1 = 0, bad = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float x = __bfloat162float(a[i]), y = __bfloat162float(b[i]);
        if (!isfinite(x)) bad += 1;
        s0 += (double)(x - y) * (x - y);
        s1 += (double)y * y;
    }
    atomicAdd(&out[0], s0); atomicAdd(&out[1], s1); atomicAdd(&out[2], bad);
}

// A list option of a benchmark ("--M 16384,65536", "--nnz 8,29,50%"), parsed strictly by core/cli.h's
// cli_parse_list (integers when `integer`, each within [min, max]); a bad list exits 2 with a message naming the
// option and the element. With `percent` an element may be "P%", returned as -P/100 (the "50%" pattern above:
// a negative nnz is a fraction of F).
static std::vector<double> bench_list(const char *prog, const char *flag, const char *s, int integer, double min,
                                      double max, int percent) {
    double v[256];
    int pct[256];
    char msg[512];
    const int n = cli_parse_list(s, integer, min, max, v, percent ? pct : NULL, 256, msg, sizeof msg);
    if (n < 0) cli_fail(prog, "option --%s: %s", flag, msg);
    std::vector<double> out(v, v + n);
    if (percent)
        for (int i = 0; i < n; i++) if (pct[i]) out[i] = -v[i];
    return out;
}

static float median(std::vector<float> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

#endif  // SLLM_BENCH_GEN_CUH
