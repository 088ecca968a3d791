// core/rope.cuh: rotary position embeddings, Hugging Face "rotate_half" convention.
//
//   x     [N = B*T, nh, hd] bf16, rotated in place; the position of row n is n % T.
//   table [T_max, hd/2, 2] fp32: (cos, sin) of pos * theta^(-2i/hd), i < hd/2 (built on the host in double).
//   forward, for i < hd/2:  y[i]      = x[i] * cos - x[i + hd/2] * sin
//                           y[i+hd/2] = x[i + hd/2] * cos + x[i] * sin
//   backward (the inverse rotation, i.e. sin -> -sin) applied in place to the gradient.
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

// One thread per (row, head, i < hd/2) pair.
__global__ void rope_kernel(bf16 *x, const float *table, int N, int T, int nh, int hd, float sign) {
    int h2 = hd / 2;
    size_t idx = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    size_t total = (size_t)N * nh * h2;
    if (idx >= total) return;
    int i = (int)(idx % h2);
    size_t rh = idx / h2;  // row * nh + head
    int row = (int)(rh / nh);
    int pos = row % T;
    float c = table[((size_t)pos * h2 + i) * 2], s = sign * table[((size_t)pos * h2 + i) * 2 + 1];
    bf16 *p = x + rh * hd;
    float a = __bfloat162float(p[i]), b = __bfloat162float(p[i + h2]);
    p[i] = __float2bfloat16_rn(a * c - b * s);
    p[i + h2] = __float2bfloat16_rn(b * c + a * s);
}
static inline void rope_forward(bf16 *x, const float *table, int N, int T, int nh, int hd, cudaStream_t stream) {
    size_t total = (size_t)N * nh * (hd / 2);
    rope_kernel<<<(unsigned)ceil_div_sz(total, 256), 256, 0, stream>>>(x, table, N, T, nh, hd, 1.0f);
    cudaCheckLaunch();
}
static inline void rope_backward(bf16 *dx, const float *table, int N, int T, int nh, int hd, cudaStream_t stream) {
    size_t total = (size_t)N * nh * (hd / 2);
    rope_kernel<<<(unsigned)ceil_div_sz(total, 256), 256, 0, stream>>>(dx, table, N, T, nh, hd, -1.0f);
    cudaCheckLaunch();
}

#endif  // SLLM_ROPE_CUH
