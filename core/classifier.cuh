// core/classifier.cuh: fused softmax + cross-entropy + dlogits, in place over bf16 logits.
//
//   logits  [N, V] bf16  (one row per token; overwritten with dlogits when write_grad)
//   targets [N] int32    (target < 0: ignored, loss 0 and zero gradient)
//   losses  [N] fp32     losses[n] = logsumexp(logits[n]) - logits[n, target]   (all math in fp32)
//   dlogits[n, v] = dloss * (softmax(logits[n])[v] - [v == target])             (dloss = 1/N_total)
// One block per row; the row is read twice (online max/sum pass, then the gradient pass), written once.
// The logits are never stored a second time. 16-byte accesses when V % 8 == 0, scalar otherwise.
#ifndef SLLM_CLASSIFIER_CUH
#define SLLM_CLASSIFIER_CUH

#include "kernel_utils.cuh"

#define CLASSIFIER_THREADS 512

__device__ __forceinline__ void online_update(float &m, float &s, float x) {
    if (x > m) { s = s * __expf(m - x) + 1.0f; m = x; }
    else s += __expf(x - m);
}

static __global__ void fused_classifier_kernel(bf16 *logits, float *losses, const int *targets, int V, float dloss,
                                        int write_grad) {
    __shared__ float sh[32];
    int row = blockIdx.x;
    bf16 *lr = logits + (size_t)row * V;
    int tgt = targets[row];
    bool vec = (V % 8) == 0;
    float m = -INFINITY, s = 0.0f;
    if (vec) {
        for (int c = threadIdx.x * 8; c < V; c += blockDim.x * 8) {
            float x[8];
            load8_bf16(lr + c, x);
#pragma unroll
            for (int i = 0; i < 8; i++) online_update(m, s, x[i]);
        }
    } else {
        for (int c = threadIdx.x; c < V; c += blockDim.x) online_update(m, s, __bfloat162float(lr[c]));
    }
    float M = block_max(m, sh);
    float S = block_sum(m == -INFINITY ? 0.0f : s * __expf(m - M), sh);
    float lse = M + logf(S);
    float tl = (tgt >= 0) ? __bfloat162float(lr[tgt]) : 0.0f;  // read before any write below
    __syncthreads();  // every thread has read lr[tgt] before the row is overwritten
    if (threadIdx.x == 0) losses[row] = (tgt >= 0) ? lse - tl : 0.0f;
    if (!write_grad) return;
    float scale = (tgt >= 0) ? dloss : 0.0f;
    float invS = 1.0f / S;
    if (vec) {
        for (int c = threadIdx.x * 8; c < V; c += blockDim.x * 8) {
            float x[8];
            load8_bf16(lr + c, x);
#pragma unroll
            for (int i = 0; i < 8; i++) x[i] = scale * (__expf(x[i] - M) * invS - (c + i == tgt ? 1.0f : 0.0f));
            store8_bf16(lr + c, x);
        }
    } else {
        for (int c = threadIdx.x; c < V; c += blockDim.x) {
            float x = __bfloat162float(lr[c]);
            lr[c] = __float2bfloat16_rn(scale * (__expf(x - M) * invS - (c == tgt ? 1.0f : 0.0f)));
        }
    }
}

static inline void fused_classifier(bf16 *logits, float *losses, const int *targets, int N, int V, float dloss,
                                    int write_grad, cudaStream_t stream) {
    if (N <= 0) return;
    fused_classifier_kernel<<<N, CLASSIFIER_THREADS, 0, stream>>>(logits, losses, targets, V, dloss, write_grad);
    cudaCheckLaunch();
}

#endif  // SLLM_CLASSIFIER_CUH
