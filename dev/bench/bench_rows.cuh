// dev/bench/bench_rows.cuh: the random row index of the L2 gather probes (bench_ffn --gather / --variants,
// bench_l2): row j of CTA `block`, uniform in [0, nrows) (a multiply-xorshift hash, no division).
#ifndef SLLM_BENCH_ROWS_CUH
#define SLLM_BENCH_ROWS_CUH

#include <stdint.h>

__device__ __forceinline__ int bench_random_row(uint32_t seed, uint32_t block, uint32_t j, int nrows) {
    uint32_t h = (seed ^ (block * 0x9E3779B9u + j * 0x85EBCA6Bu)) * 0xC2B2AE35u;
    h ^= h >> 15; h *= 0x27D4EB2Fu; h ^= h >> 13;
    return (int)__umulhi(h, (uint32_t)nrows);
}

#endif  // SLLM_BENCH_ROWS_CUH
