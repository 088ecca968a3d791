// core/ffn.cuh: the element-wise part of the ReLU FFN (dense path), forward with sparsity statistics and
// backward with the L1 gradient folded in. The GEMMs around it run through cuBLASLt (core/matmul.cuh).
//
//   gated:      gu [2, N, F] bf16 = (g = x Wg^T, u = x Wu^T);  h [N, F] bf16 = relu(g) * u
//   non-gated:  gu [1, N, F] bf16 = (u = x Wu^T);              h = relu(u)
//   N = tokens (B*T), F = d_ff, F % 8 == 0.
//
// Statistics (forward, each optional, all on the device, no host sync; deterministic):
//   l1_part [FFN_STAT_BLOCKS] fp32  l1_part[b] += sum over block b's elements of |h| (h in fp32 before
//                                   rounding); the grid is always FFN_STAT_BLOCKS blocks so the split is fixed.
//   nnz     [1] u64                 += number of (token, unit) pairs with gate > 0 (non-gated: u > 0)
//   fired   [F] u8                  fired[f] = 1 if unit f was > 0 for some token
//
// Backward: dh [N, F] bf16 (= dy Wd), loss = CE + lambda * mean_layers(mean_tokens(sum_F |h|)), so
//   d|h|/dh = sign(h) and the L1 gradient per element is l1_coef * sign(h), l1_coef = lambda / (L * N_total)
//   (N_total = tokens of the whole optimizer step).   dht = dh + l1_coef * sign(h)
//   gated:      dg = (g > 0) ? dht * u : 0;  du = (g > 0) ? dht * g : 0     (sign(h) = (g > 0) * sign(u))
//   non-gated:  du = (u > 0) ? dht : 0                                       (sign(h) = (u > 0))
//   dgu may alias gu (each element is read before it is written by the same thread).
#ifndef SLLM_FFN_CUH
#define SLLM_FFN_CUH

#include <stdint.h>

#include "kernel_utils.cuh"

#define FFN_STAT_BLOCKS 1024
#define FFN_THREADS 256
#define FFN_MAX_BLOCKS (132 * 32)  // grid cap without the L1 statistics (grid-stride loop)

// h = relu(g) * u (non-gated: relu(g), u unused) over n = N * F elements; h may alias g (each element is read
// before the same thread writes it). Each counter is optional (NULL: not kept).
template <int GATED>
static __global__ void ffn_forward_kernel(bf16 *h, const bf16 *g, const bf16 *u, size_t n, int F, float *l1_part,
                                          unsigned long long *nnz, uint8_t *fired) {
    float l1 = 0.0f;
    unsigned cnt = 0;
    size_t stride = (size_t)gridDim.x * blockDim.x * 8;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; i < n; i += stride) {
        float gv[8], uv[8], hv[8];
        load8_bf16(g + i, gv);
        if (GATED) load8_bf16(u + i, uv);
        // the 8 fired flags of this group in one 8-byte load (col % 8 == 0); a flag is written only the first
        // time its unit fires (benign byte races: every writer stores 1)
        const int col = fired ? (int)(i % F) : 0;
        uint2 fw = fired ? *reinterpret_cast<const uint2 *>(fired + col) : make_uint2(0, 0);
        const uint8_t *fb = reinterpret_cast<const uint8_t *>(&fw);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            bool on = gv[j] > 0.0f;
            hv[j] = GATED ? (on ? gv[j] * uv[j] : 0.0f) : (on ? gv[j] : 0.0f);
            l1 += fabsf(hv[j]);
            cnt += on;
            if (fired && on && !fb[j]) fired[col + j] = 1;
        }
        store8_bf16(h + i, hv);
    }
    if (l1_part) {
        __shared__ float sh[32];
        float bl1 = block_sum(l1, sh);
        if (threadIdx.x == 0) l1_part[blockIdx.x] += bl1;
    }
    if (nnz) {
        __shared__ unsigned shc[32];
        unsigned c = __reduce_add_sync(0xffffffffu, cnt);
        int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
        if (lane == 0) shc[warp] = c;
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long tot = 0;
            for (int w = 0; w < (int)(blockDim.x >> 5); w++) tot += shc[w];
            if (tot) atomicAdd(nnz, tot);
        }
    }
}

// g [N, F] and u [N, F] in separate buffers (u unused when !gated); h [N, F] may be g. Counters optional, each
// NULL or set on its own. With l1_part the grid is FFN_STAT_BLOCKS blocks (a fixed split of the L1 sum);
// without, at most FFN_MAX_BLOCKS (a grid-stride loop).
static inline void ffn_forward_split(bf16 *h, const bf16 *g, const bf16 *u, int N, int F, int gated, float *l1_part,
                                     unsigned long long *nnz, uint8_t *fired, cudaStream_t stream) {
    if (F % 8) SLLM_FATAL("ffn_forward: d_ff=%d must be a multiple of 8", F);
    size_t n = (size_t)N * F;
    size_t blocks = ceil_div_sz(n / 8, FFN_THREADS);
    unsigned grid = l1_part ? FFN_STAT_BLOCKS : (unsigned)(blocks < FFN_MAX_BLOCKS ? (blocks ? blocks : 1) : FFN_MAX_BLOCKS);
    if (gated) ffn_forward_kernel<1><<<grid, FFN_THREADS, 0, stream>>>(h, g, u, n, F, l1_part, nnz, fired);
    else ffn_forward_kernel<0><<<grid, FFN_THREADS, 0, stream>>>(h, g, g, n, F, l1_part, nnz, fired);
    cudaCheckLaunch();
}
// gu [G, N, F] packed (gate then up).
static inline void ffn_forward(bf16 *h, const bf16 *gu, int N, int F, int gated, float *l1_part,
                               unsigned long long *nnz, uint8_t *fired, cudaStream_t stream) {
    ffn_forward_split(h, gu, gated ? gu + (size_t)N * F : gu, N, F, gated, l1_part, nnz, fired, stream);
}

template <int GATED>
static __global__ void ffn_backward_kernel(bf16 *dgu, const bf16 *dh, const bf16 *gu, size_t n, float l1_coef) {
    size_t stride = (size_t)gridDim.x * blockDim.x * 8;
    for (size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8; i < n; i += stride) {
        float gv[8], uv[8], d[8], dg[8], du[8];
        load8_bf16(gu + i, gv);
        if (GATED) load8_bf16(gu + n + i, uv);
        load8_bf16(dh + i, d);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            bool on = gv[j] > 0.0f;
            if (GATED) {
                float s = on ? (uv[j] > 0.0f ? 1.0f : (uv[j] < 0.0f ? -1.0f : 0.0f)) : 0.0f;
                float dt = d[j] + l1_coef * s;
                dg[j] = on ? dt * uv[j] : 0.0f;
                du[j] = on ? dt * gv[j] : 0.0f;
            } else {
                dg[j] = on ? d[j] + l1_coef : 0.0f;
            }
        }
        store8_bf16(dgu + i, dg);
        if (GATED) store8_bf16(dgu + n + i, du);
    }
}
static inline void ffn_backward(bf16 *dgu, const bf16 *dh, const bf16 *gu, int N, int F, int gated, float l1_coef,
                                cudaStream_t stream) {
    if (F % 8) SLLM_FATAL("ffn_backward: d_ff=%d must be a multiple of 8", F);
    size_t n = (size_t)N * F;
    size_t blocks = ceil_div_sz(n / 8, FFN_THREADS);
    unsigned grid = (unsigned)(blocks < 65535 ? (blocks ? blocks : 1) : 65535);
    if (gated) ffn_backward_kernel<1><<<grid, FFN_THREADS, 0, stream>>>(dgu, dh, gu, n, l1_coef);
    else ffn_backward_kernel<0><<<grid, FFN_THREADS, 0, stream>>>(dgu, dh, gu, n, l1_coef);
    cudaCheckLaunch();
}

#endif  // SLLM_FFN_CUH
