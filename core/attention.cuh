// core/attention.cuh: causal multi-head / grouped-query attention, forward and backward (flash style:
// no T x T matrix is ever stored). bf16 inputs/outputs, fp32 math and accumulation.
//
// Layouts (row-major, bf16 unless noted):
//   q    [B, T, H,   hd]      (the output of x Wq^T as [B*T, H*hd])
//   k, v [B, T, KVH, hd]
//   out  [B, T, H,   hd]
//   lse  [B, H, T]   fp32     log-sum-exp (natural log) of the scaled scores of each query row, saved for backward
//   dq/dk/dv like q/k/v; dout like out.
// Causal, scale 1/sqrt(hd). GQA: query head h uses kv head h / (H/KVH); dk/dv of a kv head sum over its
// H/KVH query heads (no races: one owner per kv head row). RoPE is applied before, by another kernel.
//
// Two implementations, chosen at run time:
//   fast   (default): FlashAttention-2 structure with tensor cores (mma.sync m16n8k16 bf16 -> fp32, ldmatrix,
//          cp.async double buffering). Forward: one CTA (4 warps) per (64 query rows, head, batch), online
//          softmax in the log2 domain. Backward: a preprocessing kernel (D = rowsum(dout * out), zeroes the
//          fp32 dq accumulator), one CTA per (64 keys, kv head, batch) that loops over the query heads of the
//          group and the query blocks at or after the diagonal, keeps dK/dV in registers and adds dQ into the
//          fp32 scratch accumulator with atomicAdd (so dq is NOT bitwise deterministic; dk and dv are), then a
//          conversion kernel scratch -> bf16 dq. Built for hd in {32, 64, 128}; other hd use the simple path.
//   simple (SLLM_ATTN=simple, or ATTN_PATH_SIMPLE): reference-quality CUDA-core kernels, one warp per query
//          row (forward and dq) or per key row (dk, dv), fp32 math, deterministic, slow. Any hd % 8 == 0, <= 128.
// Constraints (checked, clear error): B, T >= 1; H % KVH == 0; 8 <= hd <= 128 and hd % 8 == 0; all pointers
// 16-byte aligned.
//
// Scratch for backward: attention_backward_scratch_bytes() bytes of device memory (fp32 dq accumulator
// [B, T, H, hd] plus D [B, H, T]); either path accepts the same scratch.
#ifndef SLLM_ATTENTION_CUH
#define SLLM_ATTENTION_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "cuda_common.cuh"

typedef enum { ATTN_PATH_FAST = 0, ATTN_PATH_SIMPLE = 1 } AttnPath;

#define ATTN_LOG2E 1.4426950408889634f
#define ATTN_LN2 0.6931471805599453f

// ------------------------------------------------------------------------------------------------
// Argument checks and path selection (host)

// Returns 0 when the shape is supported, else -1 with a message in err.
static inline int attention_validate(int B, int T, int H, int KVH, int hd, char *err, size_t n) {
    if (B < 1 || T < 1 || H < 1 || KVH < 1) {
        snprintf(err, n, "attention: B, T, H, KVH must be >= 1 (got B=%d T=%d H=%d KVH=%d)", B, T, H, KVH);
        return -1;
    }
    if (H % KVH != 0) {
        snprintf(err, n, "attention: H=%d must be a multiple of KVH=%d (GQA)", H, KVH);
        return -1;
    }
    if (hd < 8 || hd > 128 || hd % 8 != 0) {
        snprintf(err, n, "attention: head_dim=%d unsupported: need a multiple of 8 in [8, 128] (fast path: 32, 64, 128)",
                 hd);
        return -1;
    }
    return 0;
}

// True when the tensor-core path is built for this head dim (otherwise ATTN_PATH_FAST runs the simple kernels).
static inline int attention_fast_supported(int hd) { return hd == 32 || hd == 64 || hd == 128; }

// SLLM_ATTN unset/"fast" -> fast, "simple" -> simple; anything else is a fatal error.
static inline AttnPath attention_path_from_env(void) {
    const char *s = getenv("SLLM_ATTN");
    if (s == NULL || s[0] == 0 || strcmp(s, "fast") == 0) return ATTN_PATH_FAST;
    if (strcmp(s, "simple") == 0) return ATTN_PATH_SIMPLE;
    SLLM_FATAL("SLLM_ATTN=\"%s\": expected \"fast\" or \"simple\"", s);
}

static inline void attention_check_args(const char *who, const void *const *ptrs, int nptr, int B, int T, int H,
                                        int KVH, int hd) {
    char err[256];
    if (attention_validate(B, T, H, KVH, hd, err, sizeof err) != 0) SLLM_FATAL("%s: %s", who, err);
    for (int i = 0; i < nptr; i++) {
        if (ptrs[i] == NULL) SLLM_FATAL("%s: pointer argument #%d is NULL", who, i);
        if ((uintptr_t)ptrs[i] & 15)
            SLLM_FATAL("%s: pointer argument #%d (%p) is not 16-byte aligned", who, i, ptrs[i]);
    }
}

static inline size_t attention_backward_scratch_bytes(int B, int T, int H, int KVH, int hd) {
    (void)KVH;
    size_t dq_acc = (size_t)B * T * H * hd;  // fp32 dq accumulator
    size_t dsum = (size_t)B * H * T;         // fp32 D = rowsum(dout * out)
    dq_acc = (dq_acc + 63) & ~(size_t)63;    // keep D 256-byte aligned
    return (dq_acc + dsum) * sizeof(float);
}

// ------------------------------------------------------------------------------------------------
// Simple path (reference quality): one warp per row, fp32 CUDA-core math.
// Lane `lane` holds dims d = lane + 32*c (c < 4, d < hd).

#define ATTN_SIMPLE_NC 4

__device__ __forceinline__ void attn_simple_load_row(float x[ATTN_SIMPLE_NC], const bf16 *row, int hd, int lane) {
#pragma unroll
    for (int c = 0; c < ATTN_SIMPLE_NC; c++) {
        int d = lane + 32 * c;
        x[c] = d < hd ? __bfloat162float(row[d]) : 0.0f;
    }
}

__device__ __forceinline__ float attn_simple_dot(const float a[ATTN_SIMPLE_NC], const bf16 *row, int hd, int lane) {
    float s = 0.0f;
#pragma unroll
    for (int c = 0; c < ATTN_SIMPLE_NC; c++) {
        int d = lane + 32 * c;
        if (d < hd) s += a[c] * __bfloat162float(row[d]);
    }
    return warp_sum(s);
}

// grid: ceil(B*T*H / warps_per_block); warp w -> row index r = (b*T + i)*H + h.
__global__ void attn_simple_fwd_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int B,
                                       int T, int H, int KVH, int hd, float scale) {
    int w = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (w >= B * T * H) return;
    int h = w % H, i = (w / H) % T, b = w / (H * T);
    int kvh = h / (H / KVH);
    float qr[ATTN_SIMPLE_NC], acc[ATTN_SIMPLE_NC] = {0.0f, 0.0f, 0.0f, 0.0f};
    attn_simple_load_row(qr, q + (size_t)w * hd, hd, lane);
    float m = -INFINITY, l = 0.0f;
    for (int j = 0; j <= i; j++) {
        size_t kvrow = ((size_t)b * T + j) * KVH + kvh;
        float s = attn_simple_dot(qr, k + kvrow * hd, hd, lane) * scale;
        float mn = fmaxf(m, s);
        float alpha = expf(m - mn);  // m = -inf on the first key -> 0
        float p = expf(s - mn);
        l = l * alpha + p;
#pragma unroll
        for (int c = 0; c < ATTN_SIMPLE_NC; c++) {
            int d = lane + 32 * c;
            float vv = d < hd ? __bfloat162float(v[kvrow * hd + d]) : 0.0f;
            acc[c] = acc[c] * alpha + p * vv;
        }
        m = mn;
    }
    float inv = 1.0f / l;
#pragma unroll
    for (int c = 0; c < ATTN_SIMPLE_NC; c++) {
        int d = lane + 32 * c;
        if (d < hd) out[(size_t)w * hd + d] = __float2bfloat16(acc[c] * inv);
    }
    if (lane == 0) lse[((size_t)b * H + h) * T + i] = m + logf(l);
}

// D[b, h, i] = sum_d dout * out (fp32), and zero the fp32 dq accumulator row (used by the fast path).
// One warp per (b, i, h) row.
__global__ void attn_bwd_preprocess_kernel(float *dsum, float *dq_acc, const bf16 *dout, const bf16 *out, int B,
                                           int T, int H, int hd) {
    int w = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (w >= B * T * H) return;
    int h = w % H, i = (w / H) % T, b = w / (H * T);
    float s = 0.0f;
    for (int d = lane; d < hd; d += 32) {
        s += __bfloat162float(dout[(size_t)w * hd + d]) * __bfloat162float(out[(size_t)w * hd + d]);
        if (dq_acc) dq_acc[(size_t)w * hd + d] = 0.0f;
    }
    s = warp_sum(s);
    if (lane == 0) dsum[((size_t)b * H + h) * T + i] = s;
}

// dq for one query row per warp: dq_i = scale * sum_{j<=i} p_ij (dp_ij - D_i) k_j.
__global__ void attn_simple_bwd_dq_kernel(bf16 *dq, const bf16 *dout, const float *lse, const float *dsum,
                                          const bf16 *q, const bf16 *k, const bf16 *v, int B, int T, int H, int KVH,
                                          int hd, float scale) {
    int w = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (w >= B * T * H) return;
    int h = w % H, i = (w / H) % T, b = w / (H * T);
    int kvh = h / (H / KVH);
    float qr[ATTN_SIMPLE_NC], dor[ATTN_SIMPLE_NC], acc[ATTN_SIMPLE_NC] = {0.0f, 0.0f, 0.0f, 0.0f};
    attn_simple_load_row(qr, q + (size_t)w * hd, hd, lane);
    attn_simple_load_row(dor, dout + (size_t)w * hd, hd, lane);
    float L = lse[((size_t)b * H + h) * T + i], Di = dsum[((size_t)b * H + h) * T + i];
    for (int j = 0; j <= i; j++) {
        size_t kvrow = ((size_t)b * T + j) * KVH + kvh;
        float p = expf(attn_simple_dot(qr, k + kvrow * hd, hd, lane) * scale - L);
        float dp = attn_simple_dot(dor, v + kvrow * hd, hd, lane);
        float ds = p * (dp - Di);
#pragma unroll
        for (int c = 0; c < ATTN_SIMPLE_NC; c++) {
            int d = lane + 32 * c;
            if (d < hd) acc[c] += ds * __bfloat162float(k[kvrow * hd + d]);
        }
    }
#pragma unroll
    for (int c = 0; c < ATTN_SIMPLE_NC; c++) {
        int d = lane + 32 * c;
        if (d < hd) dq[(size_t)w * hd + d] = __float2bfloat16(acc[c] * scale);
    }
}

// dk, dv for one key row (b, j, kvh) per warp, summing over the query heads of the group and queries i >= j.
__global__ void attn_simple_bwd_dkdv_kernel(bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse,
                                            const float *dsum, const bf16 *q, const bf16 *k, const bf16 *v, int B,
                                            int T, int H, int KVH, int hd, float scale) {
    int w = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) >> 5);
    int lane = threadIdx.x & 31;
    if (w >= B * T * KVH) return;
    int kvh = w % KVH, j = (w / KVH) % T, b = w / (KVH * T);
    int group = H / KVH;
    float kr[ATTN_SIMPLE_NC], vr[ATTN_SIMPLE_NC];
    float dka[ATTN_SIMPLE_NC] = {0.0f, 0.0f, 0.0f, 0.0f}, dva[ATTN_SIMPLE_NC] = {0.0f, 0.0f, 0.0f, 0.0f};
    attn_simple_load_row(kr, k + (size_t)w * hd, hd, lane);
    attn_simple_load_row(vr, v + (size_t)w * hd, hd, lane);
    for (int h = kvh * group; h < (kvh + 1) * group; h++) {
        for (int i = j; i < T; i++) {
            size_t qrow = ((size_t)b * T + i) * H + h;
            float L = lse[((size_t)b * H + h) * T + i], Di = dsum[((size_t)b * H + h) * T + i];
            float p = expf(attn_simple_dot(kr, q + qrow * hd, hd, lane) * scale - L);
            float dp = attn_simple_dot(vr, dout + qrow * hd, hd, lane);
            float ds = p * (dp - Di);
#pragma unroll
            for (int c = 0; c < ATTN_SIMPLE_NC; c++) {
                int d = lane + 32 * c;
                if (d < hd) {
                    dva[c] += p * __bfloat162float(dout[qrow * hd + d]);
                    dka[c] += ds * __bfloat162float(q[qrow * hd + d]);
                }
            }
        }
    }
#pragma unroll
    for (int c = 0; c < ATTN_SIMPLE_NC; c++) {
        int d = lane + 32 * c;
        if (d < hd) {
            dk[(size_t)w * hd + d] = __float2bfloat16(dka[c] * scale);
            dv[(size_t)w * hd + d] = __float2bfloat16(dva[c]);
        }
    }
}

static inline unsigned attn_warp_blocks(size_t nwarps, int warps_per_block) {
    return (unsigned)ceil_div_sz(nwarps, (size_t)warps_per_block);
}

static inline void attention_forward_simple(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                            int B, int T, int H, int KVH, int hd, cudaStream_t stream) {
    size_t rows = (size_t)B * T * H;
    attn_simple_fwd_kernel<<<attn_warp_blocks(rows, 8), 256, 0, stream>>>(out, lse, q, k, v, B, T, H, KVH, hd,
                                                                          1.0f / sqrtf((float)hd));
    cudaCheckLaunch();
}

static inline void attention_backward_simple(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *out,
                                             const float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                             float *dsum, int B, int T, int H, int KVH, int hd, cudaStream_t stream) {
    float scale = 1.0f / sqrtf((float)hd);
    size_t qrows = (size_t)B * T * H, kvrows = (size_t)B * T * KVH;
    attn_bwd_preprocess_kernel<<<attn_warp_blocks(qrows, 8), 256, 0, stream>>>(dsum, NULL, dout, out, B, T, H, hd);
    cudaCheckLaunch();
    attn_simple_bwd_dq_kernel<<<attn_warp_blocks(qrows, 8), 256, 0, stream>>>(dq, dout, lse, dsum, q, k, v, B, T, H,
                                                                              KVH, hd, scale);
    cudaCheckLaunch();
    attn_simple_bwd_dkdv_kernel<<<attn_warp_blocks(kvrows, 8), 256, 0, stream>>>(dk, dv, dout, lse, dsum, q, k, v, B,
                                                                                 T, H, KVH, hd, scale);
    cudaCheckLaunch();
}

// ------------------------------------------------------------------------------------------------
// Public entry points

static inline void attention_forward_path(AttnPath path, bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                          const bf16 *v, int B, int T, int H, int KVH, int hd, cudaStream_t stream) {
    const void *ptrs[5] = {out, lse, q, k, v};
    attention_check_args("attention_forward", ptrs, 5, B, T, H, KVH, hd);
    attention_forward_simple(out, lse, q, k, v, B, T, H, KVH, hd, stream);
}

static inline void attention_backward_path(AttnPath path, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                                           const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                                           const bf16 *v, float *scratch, int B, int T, int H, int KVH, int hd,
                                           cudaStream_t stream) {
    const void *ptrs[11] = {dq, dk, dv, dout, out, lse, q, k, v, scratch, scratch};
    attention_check_args("attention_backward", ptrs, 10, B, T, H, KVH, hd);
    size_t dq_elems = ((size_t)B * T * H * hd + 63) & ~(size_t)63;
    float *dsum = scratch + dq_elems;
    attention_backward_simple(dq, dk, dv, dout, out, lse, q, k, v, dsum, B, T, H, KVH, hd, stream);
}

// The binding API (core/attention.cuh in apis.md): path from SLLM_ATTN (default fast).
static inline void attention_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int B, int T,
                                     int H, int KVH, int hd, cudaStream_t stream) {
    attention_forward_path(attention_path_from_env(), out, lse, q, k, v, B, T, H, KVH, hd, stream);
}

static inline void attention_backward(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *out,
                                      const float *lse, const bf16 *q, const bf16 *k, const bf16 *v, float *scratch,
                                      int B, int T, int H, int KVH, int hd, cudaStream_t stream) {
    attention_backward_path(attention_path_from_env(), dq, dk, dv, dout, out, lse, q, k, v, scratch, B, T, H, KVH, hd,
                            stream);
}

#endif  // SLLM_ATTENTION_CUH
