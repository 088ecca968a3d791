// dev/bench/bench_rows.cuh: the L2 gather probes' random row index (bench_ffn --gather, bench_l2,
// bench_coresident): row j of CTA `block`, uniform in [0, nrows) (a multiply-xorshift hash, no division); and the
// gather probe kernel itself (bench_l2_gather).
#ifndef SLLM_BENCH_ROWS_CUH
#define SLLM_BENCH_ROWS_CUH

#include <stdint.h>

__device__ __forceinline__ int bench_random_row(uint32_t seed, uint32_t block, uint32_t j, int nrows) {
    uint32_t h = (seed ^ (block * 0x9E3779B9u + j * 0x85EBCA6Bu)) * 0xC2B2AE35u;
    h ^= h >> 15; h *= 0x27D4EB2Fu; h ^= h >> 13;
    return (int)__umulhi(h, (uint32_t)nrows);
}

// L2 gather probe (bench_ffn --gather): what the token-major up/down's memory pattern can reach. Each CTA of 128
// threads reads `per_cta` rows of `chunks` 16-byte chunks, row k at W + idx[k] * chunks, R rows in flight per
// thread (2 chunks each), and XORs the words (written out so nothing is optimized away). Row indices: hash RNG over
// [0, nrows). With nrows x chunks x 16 B = 23 MB (one weight matrix) or 46 MB (both) this is the up/down's
// traffic (8 KB per pair) without any arithmetic: bytes / time = the L2 gather ceiling.
template <int R>
__global__ void bench_l2_gather(const uint4 *__restrict__ W, int nrows, int chunks, int per_cta, uint64_t seed,
                                uint32_t *out) {
    uint32_t acc = 0;
    for (int i = 0; i < per_cta; i += R) {
        uint4 v[R][2];
#pragma unroll
        for (int j = 0; j < R; j++) {
            const int r = bench_random_row((uint32_t)seed, blockIdx.x, (uint32_t)(i + j), nrows);
#pragma unroll
            for (int k = 0; k < 2; k++) {
                const int c = threadIdx.x + k * 128;
                v[j][k] = (i + j < per_cta && c < chunks) ? __ldg(W + (size_t)r * chunks + c) : make_uint4(0, 0, 0, 0);
            }
        }
#pragma unroll
        for (int j = 0; j < R; j++)
#pragma unroll
            for (int k = 0; k < 2; k++) acc ^= v[j][k].x ^ v[j][k].y ^ v[j][k].z ^ v[j][k].w;
    }
    if (acc == 0x12345678u) out[blockIdx.x] = acc;  // practically never: keeps the loads
}

#endif  // SLLM_BENCH_ROWS_CUH
