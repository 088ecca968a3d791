// core/adamw.cuh: AdamW update of bf16 working weights: fp32 master weights (or none), fp32 or bf16 moments.
//
//   grad, master, m, v [n] fp32;  param [n] bf16 (written as round_to_nearest_even(master))
//   g = grad * clip, clip = (max_norm > 0 && norm > max_norm) ? max_norm / norm : 1
//       (norm read from the device: no host round trip; same as ref_clip_grad_norm)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   master -= lr * ( (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * master )
// Weight decay is chosen per tensor by the caller (ParamTensor.weight_decay): adamw_update launches once per
// tensor; adamw_update_multi does the whole flat buffer in ONE launch with 16-byte accesses (30 bytes moved per
// parameter: read grad, master, m, v; write master, m, v, bf16 param).
// Round-to-nearest (not stochastic) rounding keeps resume trivially bit-exact: bf16 = f(master).
//
// Moments in bf16 (MT = bf16, the trainer's --moments bf16): m and v are kept as bf16 (4 B/param less state, 22
// bytes moved per parameter instead of 30), computed in fp32 and rounded STOCHASTICALLY on the way back: the bits
// below bf16's mantissa decide the direction with the probability of their fraction, from a hash of (step, global
// index, m|v), so E[stored] = the fp32 value and the result is reproducible (resume stays bit-exact, and any
// sharding gives the same bits). Round-to-nearest would freeze v under beta2 close to 1: 0.999 v rounds back to v.
//
// Without master weights (master == NULL, the trainer's --master none): the bf16 weights ARE the weights. p is read
// from param and written back rounded STOCHASTICALLY (the hash below, which = 2), so an update smaller than half a
// bf16 step still moves the weight with the right probability instead of being lost as under round-to-nearest.
// 16 bytes moved per parameter with bf16 moments (read param, grad, m, v; write param, m, v) instead of 30.
#ifndef SLLM_ADAMW_CUH
#define SLLM_ADAMW_CUH

#include <string.h>

#include "kernel_utils.cuh"

typedef struct {
    float lr, beta1, beta2, eps, weight_decay, max_norm;
    int step;  // 1-based
} AdamWParams;

// One element: the arithmetic shared by the per-tensor and the multi-tensor kernels (same bits from both).
// Every rounding is explicit (no contraction left to the compiler), so each kernel that inlines it gives the same bits.
__device__ __forceinline__ float adamw_elem(float g, float &mi, float &vi, float p, float lr, float b1, float b2,
                                            float eps, float wd, float bc1, float bc2) {
    mi = __fmaf_rn(b1, mi, __fmul_rn(1.0f - b1, g));
    vi = __fmaf_rn(b2, vi, __fmul_rn(__fmul_rn(1.0f - b2, g), g));
    const float mhat = __fdiv_rn(mi, bc1), vhat = __fdiv_rn(vi, bc2);
    const float upd = __fmaf_rn(wd, p, __fdiv_rn(mhat, __fadd_rn(__fsqrt_rn(vhat), eps)));
    return __fmaf_rn(-lr, upd, p);
}
// The stochastic rounding of a bf16 value: 16 random bits (the low half of the result; the rounding uses no more)
// from (step, global element index, which = 0 for m, 1 for v, 2 for a master-less weight): one splitmix64 finalizer
// of (index, step) gives 64 bits, and `which` picks 16 of them, so the kernels hash each element once (the three
// calls share everything but the shift). Host and device (the tests' reference uses the same).
__host__ __device__ inline uint32_t adamw_sr_hash(uint32_t step, uint64_t index, uint32_t which) {
    uint64_t x = index ^ ((uint64_t)step * 0x9E3779B97F4A7C15ull);
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return (uint32_t)(x >> (16u * which)) & 0xffffu;
}
// bf16 bits of x rounded up in magnitude with probability (the 16 dropped bits) / 2^16; NaN stays NaN, inf inf.
__host__ __device__ inline uint16_t adamw_sr_bf16_bits(float x, uint32_t r) {
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    if ((u & 0x7f800000u) == 0x7f800000u) return (uint16_t)((u >> 16) | ((u & 0xffffu) ? 0x40u : 0u));
    return (uint16_t)((u + (r & 0xffffu)) >> 16);
}
__host__ __device__ inline float adamw_bf16_bits_to_float(uint16_t b) {
    const uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

// Moment loads and stores, fp32 or bf16 (stochastic rounding; index = the global index of element 0).
__device__ __forceinline__ float4 adamw_ld4(const float *p, size_t i4) { return reinterpret_cast<const float4 *>(p)[i4]; }
__device__ __forceinline__ float4 adamw_ld4(const bf16 *p, size_t i4) {
    const uint2 u = reinterpret_cast<const uint2 *>(p)[i4];
    return make_float4(adamw_bf16_bits_to_float((uint16_t)(u.x & 0xffffu)), adamw_bf16_bits_to_float((uint16_t)(u.x >> 16)),
                       adamw_bf16_bits_to_float((uint16_t)(u.y & 0xffffu)), adamw_bf16_bits_to_float((uint16_t)(u.y >> 16)));
}
__device__ __forceinline__ void adamw_st4(float *p, size_t i4, float4 x, uint32_t, uint64_t, uint32_t) {
    reinterpret_cast<float4 *>(p)[i4] = x;
}
__device__ __forceinline__ void adamw_st4(bf16 *p, size_t i4, float4 x, uint32_t step, uint64_t index, uint32_t which) {
    uint2 u;
    u.x = adamw_sr_bf16_bits(x.x, adamw_sr_hash(step, index, which)) |
          ((uint32_t)adamw_sr_bf16_bits(x.y, adamw_sr_hash(step, index + 1, which)) << 16);
    u.y = adamw_sr_bf16_bits(x.z, adamw_sr_hash(step, index + 2, which)) |
          ((uint32_t)adamw_sr_bf16_bits(x.w, adamw_sr_hash(step, index + 3, which)) << 16);
    reinterpret_cast<uint2 *>(p)[i4] = u;
}
__device__ __forceinline__ float adamw_ld1(const float *p, size_t i) { return p[i]; }
__device__ __forceinline__ float adamw_ld1(const bf16 *p, size_t i) { return __bfloat162float(p[i]); }
__device__ __forceinline__ void adamw_st1(float *p, size_t i, float x, uint32_t, uint64_t, uint32_t) { p[i] = x; }
__device__ __forceinline__ void adamw_st1(bf16 *p, size_t i, float x, uint32_t step, uint64_t index, uint32_t which) {
    reinterpret_cast<uint16_t *>(p)[i] = adamw_sr_bf16_bits(x, adamw_sr_hash(step, index, which));
}

__device__ __forceinline__ float adamw_clip(const float *norm, float max_norm) {
    float clip = 1.0f;
    if (norm && max_norm > 0.0f) {
        float nv = *norm;
        if (nv > max_norm) clip = max_norm / nv;  // as ref_clip_grad_norm
    }
    return clip;
}

// MT: the moments' type (float or bf16); index_base: the global index of element 0 (bf16's rounding hash).
template <typename MT>
static __global__ void adamw_kernel(bf16 *param, float *master, MT *m, MT *v, const float *grad, size_t n, float lr,
                                    float b1, float b2, float eps, float wd, float bc1, float bc2, const float *norm,
                                    float max_norm, uint64_t index_base, uint32_t step) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float clip = adamw_clip(norm, max_norm);
    float mi = adamw_ld1(m, i), vi = adamw_ld1(v, i);
    const float p0 = master ? master[i] : __bfloat162float(param[i]);
    float p = adamw_elem(grad[i] * clip, mi, vi, p0, lr, b1, b2, eps, wd, bc1, bc2);
    adamw_st1(m, i, mi, step, index_base + i, 0);
    adamw_st1(v, i, vi, step, index_base + i, 1);
    if (master) {
        master[i] = p;
        param[i] = __float2bfloat16_rn(p);
    } else {
        adamw_st1(param, i, p, step, index_base + i, 2);
    }
}

// Multi-tensor AdamW over a whole flat buffer in ONE launch: segments [end[s-1], end[s]) use weight decay
// wd[s] (the caller's per-tensor choice). Every segment boundary and n are multiples of 4 (float4 / 8-byte bf16
// accesses; all pointers 16-byte aligned). Grid-stride over groups of 4 elements.
#define ADAMW_MAX_SEGMENTS 32
typedef struct {
    size_t end[ADAMW_MAX_SEGMENTS];  // exclusive end of each segment (elements), ascending
    float wd[ADAMW_MAX_SEGMENTS];
    int count;
} AdamWSegments;

template <typename MT>
static __global__ void __launch_bounds__(256) adamw_multi_kernel(bf16 *param, float *master, MT *m, MT *v,
                                                                 const float *grad, AdamWSegments seg, float lr,
                                                                 float b1, float b2, float eps, float bc1, float bc2,
                                                                 const float *norm, float max_norm,
                                                                 uint64_t index_base, uint32_t step) {
    const size_t n4 = seg.end[seg.count - 1] / 4;
    const float clip = adamw_clip(norm, max_norm);
    for (size_t i4 = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i4 < n4; i4 += (size_t)gridDim.x * blockDim.x) {
        size_t i = i4 * 4;
        int s = 0;
        while (i >= seg.end[s]) s++;
        float wd = seg.wd[s];
        float4 g = reinterpret_cast<const float4 *>(grad)[i4];
        float4 mm = adamw_ld4(m, i4);
        float4 vv = adamw_ld4(v, i4);
        float4 p = master ? reinterpret_cast<const float4 *>(master)[i4] : adamw_ld4(param, i4);
        p.x = adamw_elem(g.x * clip, mm.x, vv.x, p.x, lr, b1, b2, eps, wd, bc1, bc2);
        p.y = adamw_elem(g.y * clip, mm.y, vv.y, p.y, lr, b1, b2, eps, wd, bc1, bc2);
        p.z = adamw_elem(g.z * clip, mm.z, vv.z, p.z, lr, b1, b2, eps, wd, bc1, bc2);
        p.w = adamw_elem(g.w * clip, mm.w, vv.w, p.w, lr, b1, b2, eps, wd, bc1, bc2);
        adamw_st4(m, i4, mm, step, index_base + i, 0);
        adamw_st4(v, i4, vv, step, index_base + i, 1);
        if (master) {
            reinterpret_cast<float4 *>(master)[i4] = p;
            __nv_bfloat162 lo = __floats2bfloat162_rn(p.x, p.y), hi = __floats2bfloat162_rn(p.z, p.w);
            uint2 packed;
            packed.x = *reinterpret_cast<uint32_t *>(&lo);
            packed.y = *reinterpret_cast<uint32_t *>(&hi);
            reinterpret_cast<uint2 *>(param)[i4] = packed;
        } else {
            adamw_st4(param, i4, p, step, index_base + i, 2);
        }
    }
}

// One launch for all segments. Grid: enough blocks to fill the GPU several times over (grid-stride beyond).
// m, v: float or bf16; master may be NULL (no master weights). index_base: the global index of element 0, for the
// stochastic rounding hash of bf16 moments and of master-less weights.
template <typename MT>
static inline void adamw_update_multi(bf16 *param, float *master, MT *m, MT *v, const float *grad,
                                      const AdamWSegments *seg, const AdamWParams *hp, const float *norm_dev,
                                      cudaStream_t stream, uint64_t index_base = 0) {
    if (seg->count <= 0 || seg->count > ADAMW_MAX_SEGMENTS)
        SLLM_FATAL("adamw_update_multi: %d segments (expected 1..%d)", seg->count, ADAMW_MAX_SEGMENTS);
    for (int s = 0; s < seg->count; s++)
        if (seg->end[s] % 4 || (s > 0 && seg->end[s] < seg->end[s - 1]))
            SLLM_FATAL("adamw_update_multi: segment %d ends at %zu (ends must ascend and be multiples of 4)", s,
                       seg->end[s]);
    if (((uintptr_t)param | (uintptr_t)master | (uintptr_t)m | (uintptr_t)v | (uintptr_t)grad) & 15)
        SLLM_FATAL("adamw_update_multi: buffers must be 16-byte aligned");
    size_t n4 = seg->end[seg->count - 1] / 4;
    if (n4 == 0) return;
    float bc1 = 1.0f - powf(hp->beta1, (float)hp->step), bc2 = 1.0f - powf(hp->beta2, (float)hp->step);
    size_t blocks = ceil_div_sz(n4, 256);
    unsigned grid = (unsigned)(blocks < 132 * 16 ? blocks : 132 * 16);
    adamw_multi_kernel<MT><<<grid, 256, 0, stream>>>(param, master, m, v, grad, *seg, hp->lr, hp->beta1, hp->beta2,
                                                     hp->eps, bc1, bc2, norm_dev, hp->max_norm, index_base,
                                                     (uint32_t)hp->step);
    cudaCheckLaunch();
}

// One tensor (or any slice) of n elements; wd already decided by the caller. m, v, master and index_base as for
// adamw_update_multi.
template <typename MT>
static inline void adamw_update(bf16 *param, float *master, MT *m, MT *v, const float *grad, size_t n,
                                const AdamWParams *hp, float wd, const float *norm_dev, cudaStream_t stream,
                                uint64_t index_base = 0) {
    if (n == 0) return;
    float bc1 = 1.0f - powf(hp->beta1, (float)hp->step), bc2 = 1.0f - powf(hp->beta2, (float)hp->step);
    adamw_kernel<MT><<<(unsigned)ceil_div_sz(n, 256), 256, 0, stream>>>(param, master, m, v, grad, n, hp->lr,
                                                                        hp->beta1, hp->beta2, hp->eps, wd, bc1, bc2,
                                                                        norm_dev, hp->max_norm, index_base,
                                                                        (uint32_t)hp->step);
    cudaCheckLaunch();
}

#endif  // SLLM_ADAMW_CUH
