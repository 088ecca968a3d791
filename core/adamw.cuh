// core/adamw.cuh: AdamW update with fp32 master weights, fp32 state, bf16 working weights.
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
#ifndef SLLM_ADAMW_CUH
#define SLLM_ADAMW_CUH

#include "kernel_utils.cuh"

typedef struct {
    float lr, beta1, beta2, eps, weight_decay, max_norm;
    int step;  // 1-based
} AdamWParams;

// One element: the arithmetic shared by the per-tensor and the multi-tensor kernels (same bits from both).
__device__ __forceinline__ float adamw_elem(float g, float &mi, float &vi, float p, float lr, float b1, float b2,
                                            float eps, float wd, float bc1, float bc2) {
    mi = b1 * mi + (1.0f - b1) * g;
    vi = b2 * vi + (1.0f - b2) * g * g;
    float mhat = mi / bc1, vhat = vi / bc2;
    p -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
    return p;
}
__device__ __forceinline__ float adamw_clip(const float *norm, float max_norm) {
    float clip = 1.0f;
    if (norm && max_norm > 0.0f) {
        float nv = *norm;
        if (nv > max_norm) clip = max_norm / nv;  // as ref_clip_grad_norm
    }
    return clip;
}

static __global__ void adamw_kernel(bf16 *param, float *master, float *m, float *v, const float *grad, size_t n, float lr,
                             float b1, float b2, float eps, float wd, float bc1, float bc2, const float *norm,
                             float max_norm) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float clip = adamw_clip(norm, max_norm);
    float mi = m[i], vi = v[i];
    float p = adamw_elem(grad[i] * clip, mi, vi, master[i], lr, b1, b2, eps, wd, bc1, bc2);
    m[i] = mi;
    v[i] = vi;
    master[i] = p;
    param[i] = __float2bfloat16_rn(p);
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

static __global__ void __launch_bounds__(256) adamw_multi_kernel(bf16 *param, float *master, float *m, float *v,
                                                          const float *grad, AdamWSegments seg, float lr, float b1,
                                                          float b2, float eps, float bc1, float bc2, const float *norm,
                                                          float max_norm) {
    const size_t n4 = seg.end[seg.count - 1] / 4;
    const float clip = adamw_clip(norm, max_norm);
    for (size_t i4 = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i4 < n4; i4 += (size_t)gridDim.x * blockDim.x) {
        size_t i = i4 * 4;
        int s = 0;
        while (i >= seg.end[s]) s++;
        float wd = seg.wd[s];
        float4 g = reinterpret_cast<const float4 *>(grad)[i4];
        float4 mm = reinterpret_cast<const float4 *>(m)[i4];
        float4 vv = reinterpret_cast<const float4 *>(v)[i4];
        float4 p = reinterpret_cast<const float4 *>(master)[i4];
        p.x = adamw_elem(g.x * clip, mm.x, vv.x, p.x, lr, b1, b2, eps, wd, bc1, bc2);
        p.y = adamw_elem(g.y * clip, mm.y, vv.y, p.y, lr, b1, b2, eps, wd, bc1, bc2);
        p.z = adamw_elem(g.z * clip, mm.z, vv.z, p.z, lr, b1, b2, eps, wd, bc1, bc2);
        p.w = adamw_elem(g.w * clip, mm.w, vv.w, p.w, lr, b1, b2, eps, wd, bc1, bc2);
        reinterpret_cast<float4 *>(m)[i4] = mm;
        reinterpret_cast<float4 *>(v)[i4] = vv;
        reinterpret_cast<float4 *>(master)[i4] = p;
        __nv_bfloat162 lo = __floats2bfloat162_rn(p.x, p.y), hi = __floats2bfloat162_rn(p.z, p.w);
        uint2 packed;
        packed.x = *reinterpret_cast<uint32_t *>(&lo);
        packed.y = *reinterpret_cast<uint32_t *>(&hi);
        reinterpret_cast<uint2 *>(param)[i4] = packed;
    }
}

// One launch for all segments. Grid: enough blocks to fill the GPU several times over (grid-stride beyond).
static inline void adamw_update_multi(bf16 *param, float *master, float *m, float *v, const float *grad,
                                      const AdamWSegments *seg, const AdamWParams *hp, const float *norm_dev,
                                      cudaStream_t stream) {
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
    adamw_multi_kernel<<<grid, 256, 0, stream>>>(param, master, m, v, grad, *seg, hp->lr, hp->beta1, hp->beta2,
                                                 hp->eps, bc1, bc2, norm_dev, hp->max_norm);
    cudaCheckLaunch();
}

// One tensor (or any slice) of n elements; wd already decided by the caller.
static inline void adamw_update(bf16 *param, float *master, float *m, float *v, const float *grad, size_t n,
                                const AdamWParams *hp, float wd, const float *norm_dev, cudaStream_t stream) {
    if (n == 0) return;
    float bc1 = 1.0f - powf(hp->beta1, (float)hp->step), bc2 = 1.0f - powf(hp->beta2, (float)hp->step);
    adamw_kernel<<<(unsigned)ceil_div_sz(n, 256), 256, 0, stream>>>(param, master, m, v, grad, n, hp->lr, hp->beta1,
                                                                    hp->beta2, hp->eps, wd, bc1, bc2, norm_dev,
                                                                    hp->max_norm);
    cudaCheckLaunch();
}

#endif  // SLLM_ADAMW_CUH
