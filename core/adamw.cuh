// core/adamw.cuh: AdamW update with fp32 master weights, fp32 state, bf16 working weights.
//
//   grad, master, m, v [n] fp32;  param [n] bf16 (written as round_to_nearest_even(master))
//   g = grad * clip, clip = (max_norm > 0 && norm > max_norm) ? max_norm / norm : 1
//       (norm read from the device: no host round trip; same as ref_clip_grad_norm)
//   m = b1 m + (1 - b1) g;  v = b2 v + (1 - b2) g^2
//   master -= lr * ( (m / (1 - b1^t)) / (sqrt(v / (1 - b2^t)) + eps) + wd * master )
// Weight decay is chosen per tensor by the caller (ParamTensor.weight_decay): launch once per tensor.
// Round-to-nearest (not stochastic) rounding keeps resume trivially bit-exact: bf16 = f(master).
#ifndef SLLM_ADAMW_CUH
#define SLLM_ADAMW_CUH

#include "kernel_utils.cuh"

typedef struct {
    float lr, beta1, beta2, eps, weight_decay, max_norm;
    int step;  // 1-based
} AdamWParams;

__global__ void adamw_kernel(bf16 *param, float *master, float *m, float *v, const float *grad, size_t n, float lr,
                             float b1, float b2, float eps, float wd, float bc1, float bc2, const float *norm,
                             float max_norm) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float clip = 1.0f;
    if (norm && max_norm > 0.0f) {
        float nv = *norm;
        if (nv > max_norm) clip = max_norm / nv;  // as ref_clip_grad_norm
    }
    float g = grad[i] * clip;
    float mi = b1 * m[i] + (1.0f - b1) * g;
    float vi = b2 * v[i] + (1.0f - b2) * g * g;
    m[i] = mi;
    v[i] = vi;
    float p = master[i];
    float mhat = mi / bc1, vhat = vi / bc2;
    p -= lr * (mhat / (sqrtf(vhat) + eps) + wd * p);
    master[i] = p;
    param[i] = __float2bfloat16_rn(p);
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

// fp32 -> bf16 copy (round to nearest even), e.g. working weights from master weights.
__global__ void f32_to_bf16_kernel(bf16 *dst, const float *src, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = __float2bfloat16_rn(src[i]);
}
static inline void f32_to_bf16(bf16 *dst, const float *src, size_t n, cudaStream_t stream) {
    if (n == 0) return;
    f32_to_bf16_kernel<<<(unsigned)ceil_div_sz(n, 256), 256, 0, stream>>>(dst, src, n);
    cudaCheckLaunch();
}

#endif  // SLLM_ADAMW_CUH
