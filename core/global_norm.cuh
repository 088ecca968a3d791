// core/global_norm.cuh: global L2 norm of the fp32 gradient buffer, deterministic.
//
//   g [n] fp32  ->  out[0] = sqrt(sum g^2)  (fp32, on the device; the host reads it with the step's stats)
// Stage 1: a FIXED grid of GLOBAL_NORM_BLOCKS blocks, each writes the sum of squares of its grid-stride
// slice to partial[block] (fp32 per thread, fixed-order block tree). Stage 2: one block adds the partials
// in double in a fixed order. Same inputs -> same bits, on every run.
#ifndef SLLM_GLOBAL_NORM_CUH
#define SLLM_GLOBAL_NORM_CUH

#include "kernel_utils.cuh"

#define GLOBAL_NORM_BLOCKS 1024

static __global__ void global_norm_partial_kernel(float *partial, const float *g, size_t n) {
    __shared__ float sh[32];
    float acc = 0.0f;
    size_t stride = (size_t)gridDim.x * blockDim.x * 4;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 4; i < n; i += stride) {
        if (i + 4 <= n) {
            float4 v = *reinterpret_cast<const float4 *>(g + i);
            acc += v.x * v.x + v.y * v.y + v.z * v.z + v.w * v.w;
        } else {
            for (size_t j = i; j < n; j++) acc += g[j] * g[j];
        }
    }
    acc = block_sum(acc, sh);
    if (threadIdx.x == 0) partial[blockIdx.x] = acc;
}
static __global__ void global_norm_final_kernel(float *out, const float *partial, int nparts) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (int i = threadIdx.x; i < nparts; i += blockDim.x) acc += (double)partial[i];
    acc = block_sum_d(acc, sh);
    if (threadIdx.x == 0) out[0] = (float)sqrt(acc);
}
// partial: GLOBAL_NORM_BLOCKS floats of scratch. g must be 16-byte aligned.
static inline void global_norm(float *out, float *partial, const float *g, size_t n, cudaStream_t stream) {
    global_norm_partial_kernel<<<GLOBAL_NORM_BLOCKS, 256, 0, stream>>>(partial, g, n);
    cudaCheckLaunch();
    global_norm_final_kernel<<<1, 1024, 0, stream>>>(out, partial, GLOBAL_NORM_BLOCKS);
    cudaCheckLaunch();
}

#endif  // SLLM_GLOBAL_NORM_CUH
