// core/rope.cuh: rotary position embeddings, Hugging Face "rotate_half" convention.
//
//   x     [N = B*T, nh, hd] bf16, rotated in place; the position of row n is pos0 + n % T (pos0 = 0 except for
//         inference over a KV cache: rope_forward_qk_at, rows of B sequences that all continue at position pos0).
//   table [T_max, hd/2, 2] fp32: (cos, sin) of pos * theta^(-2i/hd), i < hd/2 (built on the host in double).
//   forward, for i < hd/2:  y[i]      = x[i] * cos - x[i + hd/2] * sin
//                           y[i+hd/2] = x[i + hd/2] * cos + x[i] * sin
//   backward (the inverse rotation, i.e. sin -> -sin) applied in place to the gradient.
// rope_forward_qk / rope_backward_qk rotate q and k in ONE launch (16-byte accesses when hd % 16 == 0).
#ifndef SLLM_ROPE_CUH
#define SLLM_ROPE_CUH

#include <math.h>

#include "kernel_utils.cuh"

// Host: fill table[T_max * hd/2 * 2].
static inline void rope_build_table(float *table, int T_max, int hd, double theta) {
    int h2 = hd / 2;
    for (int t = 0; t < T_max; t++)
        for (int i = 0; i < h2; i++) {
            double inv_freq = pow(theta, -2.0 * i / (double)hd);
            double ang = (double)t * inv_freq;
            table[((size_t)t * h2 + i) * 2] = (float)cos(ang);
            table[((size_t)t * h2 + i) * 2 + 1] = (float)sin(ang);
        }
}
// Device: table [T_max, hd] fp32 for positions 0 .. T_max - 1, built on the host and copied (synchronous).
static inline void rope_upload_table(float *dev, int T_max, int hd, double theta) {
    float *tab = (float *)sllm_malloc((size_t)T_max * hd * sizeof(float));
    rope_build_table(tab, T_max, hd, theta);
    cudaCheck(cudaMemcpy(dev, tab, (size_t)T_max * hd * sizeof(float), cudaMemcpyHostToDevice));
    free(tab);
}

// One thread per (row, head, i < hd/2) pair.
static __global__ void rope_kernel(bf16 *x, const float *table, int N, int T, int pos0, const int *pos0_dev, int nh, int hd,
                            float sign) {
    int h2 = hd / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t)N * nh * h2;
    if (idx >= total) return;
    int i = (int)(idx % h2);
    size_t rh = idx / h2;  // row * nh + head
    int row = (int)(rh / nh);
    int pos = (pos0_dev ? *pos0_dev : pos0) + row % T;
    float c = table[((size_t)pos * h2 + i) * 2], s = sign * table[((size_t)pos * h2 + i) * 2 + 1];
    bf16 *p = x + rh * hd;
    float a = __bfloat162float(p[i]), b = __bfloat162float(p[i + h2]);
    p[i] = __float2bfloat16_rn(a * c - b * s);
    p[i + h2] = __float2bfloat16_rn(b * c + a * s);
}
// Vectorized: one thread per (row, head, group of 8 pairs); needs hd % 16 == 0 (16-byte accesses). q [N, nhq, hd]
// and k [N, nhk, hd] in ONE launch (heads 0..nhq-1 of a row are q's, the rest k's); nhk may be 0.
static __global__ void rope_qk_vec_kernel(bf16 *q, int nhq, bf16 *k, int nhk, const float *table, int N, int T, int pos0,
                                   const int *pos0_dev, int hd, float sign) {
    const int h2 = hd / 2, groups = h2 / 8, nh = nhq + nhk;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (size_t)N * nh * groups) return;
    int i0 = (int)(idx % groups) * 8;
    size_t rh = idx / groups;
    int row = (int)(rh / nh), head = (int)(rh % nh);
    bf16 *p = head < nhq ? q + ((size_t)row * nhq + head) * hd : k + ((size_t)row * nhk + (head - nhq)) * hd;
    const int pos = (pos0_dev ? *pos0_dev : pos0) + row % T;
    const float4 *tb = reinterpret_cast<const float4 *>(table + ((size_t)pos * h2 + i0) * 2);
    float a[8], b[8], cs[16];
#pragma unroll
    for (int j = 0; j < 4; j++) {
        float4 t = tb[j];
        cs[4 * j] = t.x; cs[4 * j + 1] = t.y; cs[4 * j + 2] = t.z; cs[4 * j + 3] = t.w;
    }
    load8_bf16(p + i0, a);
    load8_bf16(p + h2 + i0, b);
    float ya[8], yb[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        float c = cs[2 * j], s = sign * cs[2 * j + 1];
        ya[j] = a[j] * c - b[j] * s;
        yb[j] = b[j] * c + a[j] * s;
    }
    store8_bf16(p + i0, ya);
    store8_bf16(p + h2 + i0, yb);
}

// q [N, nhq, hd] and k [N, nhk, hd] (k may be NULL with nhk = 0), rotated in place by `sign` (+1 forward,
// -1 backward). One launch when hd % 16 == 0 (16-byte aligned rows and table), else the scalar kernel per tensor.
// The table must hold pos0 + T positions. pos0_dev (may be NULL): pos0 read on the device instead (a CUDA graph
// replayed at a new position).
static inline void rope_apply_qk(bf16 *q, int nhq, bf16 *k, int nhk, const float *table, int N, int T, int pos0,
                                 const int *pos0_dev, int hd, float sign, cudaStream_t stream) {
    if (T < 1 || pos0 < 0) SLLM_FATAL("rope: T=%d must be >= 1 and pos0=%d >= 0", T, pos0);
    if (hd % 2) SLLM_FATAL("rope: head_dim=%d must be even", hd);
    if (hd % 16 == 0 && !(((uintptr_t)q | (uintptr_t)k | (uintptr_t)table) & 15)) {
        size_t total = (size_t)N * (nhq + nhk) * (hd / 16);
        if (total == 0) return;
        rope_qk_vec_kernel<<<(unsigned)ceil_div_sz(total, 256), 256, 0, stream>>>(q, nhq, k, nhk, table, N, T, pos0,
                                                                                   pos0_dev, hd, sign);
        cudaCheckLaunch();
        return;
    }
    for (int t = 0; t < 2; t++) {
        bf16 *x = t ? k : q;
        int nh = t ? nhk : nhq;
        size_t total = (size_t)N * nh * (hd / 2);
        if (!x || total == 0) continue;
        rope_kernel<<<(unsigned)ceil_div_sz(total, 256), 256, 0, stream>>>(x, table, N, T, pos0, pos0_dev, nh, hd, sign);
        cudaCheckLaunch();
    }
}
static inline void rope_forward(bf16 *x, const float *table, int N, int T, int nh, int hd, cudaStream_t stream) {
    rope_apply_qk(x, nh, NULL, 0, table, N, T, 0, NULL, hd, 1.0f, stream);
}
static inline void rope_backward(bf16 *dx, const float *table, int N, int T, int nh, int hd, cudaStream_t stream) {
    rope_apply_qk(dx, nh, NULL, 0, table, N, T, 0, NULL, hd, -1.0f, stream);
}
// q and k in one launch.
static inline void rope_forward_qk(bf16 *q, int nhq, bf16 *k, int nhk, const float *table, int N, int T, int hd,
                                   cudaStream_t stream) {
    rope_apply_qk(q, nhq, k, nhk, table, N, T, 0, NULL, hd, 1.0f, stream);
}
static inline void rope_backward_qk(bf16 *dq, int nhq, bf16 *dk, int nhk, const float *table, int N, int T, int hd,
                                    cudaStream_t stream) {
    rope_apply_qk(dq, nhq, dk, nhk, table, N, T, 0, NULL, hd, -1.0f, stream);
}
// Inference over a KV cache: N = B * T rows, B sequences of T new tokens each at positions pos0 .. pos0 + T - 1
// (pos0 read from pos0_dev on the device when it is not NULL).
static inline void rope_forward_qk_at(bf16 *q, int nhq, bf16 *k, int nhk, const float *table, int N, int T, int pos0,
                                      const int *pos0_dev, int hd, cudaStream_t stream) {
    rope_apply_qk(q, nhq, k, nhk, table, N, T, pos0, pos0_dev, hd, 1.0f, stream);
}

#endif  // SLLM_ROPE_CUH
