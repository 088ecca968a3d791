// core/argmax.cuh: the greedy pick on the GPU, with core/sampler.h's rule (sampler_argmax): the FIRST index of the
// maximum logit, NaN never winning, 0 when every logit is NaN.
//
//   argmax_key(v, i)   a 64-bit key whose order is the rule's: larger logits first, then smaller indices; NaN is 0
//                      (below every number, -inf included). -0 and +0 give the same high half (they compare equal).
//   argmax_index(key)  the index back (0 for key 0: every logit NaN).
//   argmax_rows        best[r] = max over row r of argmax_key(logits[r], i): one CTA per row. A maximum is the same in
//                      any order, so the result is exact and deterministic. core/gemv.cuh's LM head computes the same
//                      keys fused into its epilogue.
#ifndef SLLM_ARGMAX_CUH
#define SLLM_ARGMAX_CUH

#include <stdint.h>
#include <string.h>

#include "cuda_common.cuh"

__host__ __device__ __forceinline__ unsigned long long argmax_key(float v, int idx) {
    if (v != v) return 0ull;  // NaN: below every number
    if (v == 0.0f) v = 0.0f;  // -0 and +0 tie, so the smaller index wins
    uint32_t b;
    memcpy(&b, &v, 4);
    b = (b & 0x80000000u) ? ~b : (b | 0x80000000u);  // order-preserving: larger float, larger key
    return ((unsigned long long)b << 32) | (uint32_t)~(uint32_t)idx;  // ties: the smaller index, the larger key
}
static inline int argmax_index(unsigned long long key) {
    return key == 0ull ? 0 : (int)~(uint32_t)(key & 0xffffffffull);
}

#define ARGMAX_THREADS 1024

// row r = logits + r * row_stride, V entries
static __global__ void __launch_bounds__(ARGMAX_THREADS)
argmax_rows_kernel(const float *logits, size_t row_stride, int V, unsigned long long *best) {
    __shared__ unsigned long long s_k[ARGMAX_THREADS / 32];
    const float *x = logits + (size_t)blockIdx.x * row_stride;
    unsigned long long k = 0ull;
    for (int i = threadIdx.x; i < V; i += ARGMAX_THREADS) {
        const unsigned long long ki = argmax_key(x[i], i);
        k = ki > k ? ki : k;
    }
    for (int o = 16; o > 0; o >>= 1) {
        const unsigned long long ko = __shfl_xor_sync(0xffffffffu, k, o);
        k = ko > k ? ko : k;
    }
    if ((threadIdx.x & 31) == 0) s_k[threadIdx.x >> 5] = k;
    __syncthreads();
    if (threadIdx.x < 32) {
        k = s_k[threadIdx.x];
        for (int o = 16; o > 0; o >>= 1) {
            const unsigned long long ko = __shfl_xor_sync(0xffffffffu, k, o);
            k = ko > k ? ko : k;
        }
        if (threadIdx.x == 0) best[blockIdx.x] = k;
    }
}

// best [rows] = the keys of rows logits + r * row_stride (V fp32 each), r < rows.
static inline void argmax_rows(unsigned long long *best, const float *logits, size_t row_stride, int rows, int V,
                               cudaStream_t stream) {
    if (rows < 1 || V < 1) SLLM_FATAL("argmax_rows: rows=%d and V=%d must be >= 1", rows, V);
    argmax_rows_kernel<<<rows, ARGMAX_THREADS, 0, stream>>>(logits, row_stride, V, best);
    cudaCheckLaunch();
}

#endif  // SLLM_ARGMAX_CUH
