// core/kernel_utils.cuh: small device helpers shared by the kernels of core/, twell/ and model/.
//   - 16-byte vector loads/stores of 8 bf16 values converted to/from fp32 registers
//   - deterministic block reductions (fixed order: warp shuffle tree, then warp 0 over the warp sums)
//   - sum_floats (one-block deterministic sum) and f32_to_bf16 (fp32 -> bf16 copy, round to nearest even)
// Every helper here is deterministic: the same inputs and launch shape give bit-identical results.
#ifndef SLLM_KERNEL_UTILS_CUH
#define SLLM_KERNEL_UTILS_CUH

#include "cuda_common.cuh"

// 8 bf16 values held in a 16-byte register to fp32.
__device__ __forceinline__ void unpack8_bf16(uint4 raw, float out[8]) {
    const __nv_bfloat162 *h2 = reinterpret_cast<const __nv_bfloat162 *>(&raw);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(h2[i]);
        out[2 * i] = f.x; out[2 * i + 1] = f.y;
    }
}
// Load 8 consecutive bf16 values (16-byte aligned) into fp32 registers.
__device__ __forceinline__ void load8_bf16(const bf16 *p, float out[8]) {
    unpack8_bf16(*reinterpret_cast<const uint4 *>(p), out);
}
// Store 8 fp32 values as bf16 (round to nearest even) to a 16-byte aligned address.
__device__ __forceinline__ void store8_bf16(bf16 *p, const float in[8]) {
    int4 raw;
    __nv_bfloat162 *h2 = reinterpret_cast<__nv_bfloat162 *>(&raw);
#pragma unroll
    for (int i = 0; i < 4; i++) h2[i] = __floats2bfloat162_rn(in[2 * i], in[2 * i + 1]);
    *reinterpret_cast<int4 *>(p) = raw;
}
// Round an fp32 value through bf16 (what a bf16 store followed by a load gives).
__device__ __forceinline__ float round_bf16(float x) { return __bfloat162float(__float2bfloat16_rn(x)); }

// Block-wide sum; every thread gets the result. blockDim.x must be a multiple of 32 (<= 1024).
// `shared` must hold 32 floats. Deterministic.
__device__ __forceinline__ float block_sum(float v, float *shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum(v);
    __syncthreads();  // protect `shared` from a previous use
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? shared[lane] : 0.0f;
    r = warp_sum(r);
    return r;
}
__device__ __forceinline__ float block_max(float v, float *shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_max(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    float r = lane < nwarps ? shared[lane] : -INFINITY;
    return warp_max(r);
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double block_sum_d(double v, double *shared) {
    int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    v = warp_sum_d(v);
    __syncthreads();
    if (lane == 0) shared[warp] = v;
    __syncthreads();
    double r = lane < nwarps ? shared[lane] : 0.0;
    return warp_sum_d(r);
}

// Sum n floats in a fixed order with ONE block, and write (or add) the result to *out.
// Used for per-token losses and partial sums: deterministic, no atomics.
static __global__ void sum_floats_kernel(float *out, const float *x, size_t n, int accumulate) {
    __shared__ double sh[32];
    double acc = 0.0;
    for (size_t i = threadIdx.x; i < n; i += blockDim.x) acc += (double)x[i];
    acc = block_sum_d(acc, sh);
    if (threadIdx.x == 0) *out = accumulate ? (float)((double)*out + acc) : (float)acc;
}
static inline void sum_floats(float *out, const float *x, size_t n, int accumulate, cudaStream_t stream) {
    sum_floats_kernel<<<1, 1024, 0, stream>>>(out, x, n, accumulate);
    cudaCheckLaunch();
}

// fp32 -> bf16 copy (round to nearest even), e.g. working weights from master weights.
static __global__ void f32_to_bf16_kernel(bf16 *dst, const float *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __float2bfloat16_rn(src[i]);
}
static inline void f32_to_bf16(bf16 *dst, const float *src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    f32_to_bf16_kernel<<<(unsigned)ceil_div_sz(n, 256), 256, 0, stream>>>(dst, src, n);
    cudaCheckLaunch();
}

// dst[i] = (float)src[i] (exact), n elements.
static __global__ void bf16_to_f32_kernel(float *dst, const bf16 *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __bfloat162float(src[i]);
}
static inline void bf16_to_f32(float *dst, const bf16 *src, size_t n, cudaStream_t stream) {
    if (!n) return;
    bf16_to_f32_kernel<<<(unsigned)ceil_div_sz(n, 256), 256, 0, stream>>>(dst, src, n);
    cudaCheckLaunch();
}

#endif  // SLLM_KERNEL_UTILS_CUH
