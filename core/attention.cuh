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
//          cp.async double buffering). Built for hd in {32, 64, 128}; other hd use the simple path.
//          Forward: one CTA (4 warps) per (64*MT query rows, head, batch), online softmax in the log2 domain
//          (ex2.approx). v2 (SLLM_ATTN_FWD=v2): MT = 2, 128 rows per CTA, 32 per warp (hd <= 64; hd 128 runs
//          MT = 1); v1 (SLLM_ATTN_FWD=v1): MT = 1, 64 rows per CTA. wg (default, SLLM_ATTN_FWD=wg): on sm_90 at
//          hd 64, the TMA + wgmma kernel of core/attention_wgmma.cuh (same numerics contract); v2 elsewhere.
//          Backward: a preprocessing kernel (D = rowsum(dout * out)), then one CTA per (64 keys, kv head, batch)
//          that loops over the query heads of the group and the query blocks at or after the diagonal and keeps
//          dK/dV in registers (dk, dv deterministic), and dq either
//            det (SLLM_ATTN_BWD=det): a separate kernel, one CTA per (128 query rows (64 for hd 128),
//                head, batch) looping over the key blocks up to the diagonal, recomputing P from lse and
//                dS = P (dP - D), dq accumulated in registers: bitwise deterministic, costs two more GEMMs;
//            atomic (v1, SLLM_ATTN_BWD=atomic): the dk/dv kernel adds dS K into an fp32 scratch accumulator with
//                atomicAdd (NOT bitwise deterministic), then a conversion kernel scratch -> bf16 dq.
//          wg (default, SLLM_ATTN_BWD=wg): on sm_90 at hd 64, the preprocessing kernel, then the TMA + wgmma dK/dV
//            and dQ kernels of core/attention_wgmma.cuh (bitwise deterministic); det elsewhere.
//   simple (SLLM_ATTN=simple, or ATTN_PATH_SIMPLE): reference-quality CUDA-core kernels, one warp per query
//          row (forward and dq) or per key row (dk, dv), fp32 math, deterministic, slow. Any hd % 8 == 0, <= 128.
// attention_forward/attention_backward read the variant from the environment; attention_*_variant take an
// AttnVariant (the bench and tests compare variants in one process); attention_*_path take a path and use its
// default variant.
// Constraints (checked, clear error): B, T >= 1; H % KVH == 0; 8 <= hd <= 128 and hd % 8 == 0; all pointers
// 16-byte aligned.
//
// Scratch for backward: attention_backward_scratch_bytes() bytes of device memory (fp32 dq accumulator
// [B, T, H, hd], used by the atomic variant only, plus D [B, H, T]); every variant accepts the same scratch.
#ifndef SLLM_ATTENTION_CUH
#define SLLM_ATTENTION_CUH

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "attention_wgmma.cuh"  // the Hopper forward (variant fwd_mt 3)
#include "cuda_common.cuh"
#include "tc_utils.cuh"  // ldmatrix, mma, cp.async

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

// Kernel variants (the bench times them side by side in one process).
typedef struct {
    AttnPath path;
    int fwd_mt;   // fast forward, m-tiles (16 rows) per warp: 1 = 64 query rows per CTA (v1), 2 = 128 rows (v2;
                  // hd <= 64; hd 128 uses 1); 3 = the Hopper wgmma kernel (core/attention_wgmma.cuh; hd 64 on sm_90,
                  // else v2)
    int bwd_det;  // fast backward: 1 = deterministic (dk/dv kernel + separate dq kernel), 0 = dq by fp32 atomics (v1),
                  // 2 = the Hopper wgmma kernels (core/attention_wgmma.cuh, deterministic; hd 64 on sm_90, else 1)
    int dq_mt;    // deterministic dq kernel, m-tiles per warp: 1 (64 rows, 64-key blocks) or 2 (128 rows, 32-key
                  // blocks; hd <= 64; hd 128 uses 1)
} AttnVariant;

// Defaults of the fast path: the Hopper wgmma forward and backward (wg; where they cannot run, hd != 64 or not
// sm_90: the v2 forward and the deterministic backward with the 128-row dq kernel).
static inline AttnVariant attention_variant_default(AttnPath path) {
    AttnVariant v = {path, 3, 2, 2};
    return v;
}

// SLLM_ATTN (fast|simple), SLLM_ATTN_FWD (wg|v2|v1), SLLM_ATTN_BWD (wg|det|atomic); unset = default; else fatal.
static inline AttnVariant attention_variant_from_env(void) {
    AttnVariant v = attention_variant_default(attention_path_from_env());
    const char *f = getenv("SLLM_ATTN_FWD"), *b = getenv("SLLM_ATTN_BWD");
    if (f && f[0] && strcmp(f, "wg") != 0) {
        if (strcmp(f, "v1") == 0) v.fwd_mt = 1;
        else if (strcmp(f, "v2") == 0) v.fwd_mt = 2;
        else SLLM_FATAL("SLLM_ATTN_FWD=\"%s\": expected \"wg\" (the Hopper wgmma kernel, hd 64; the default), "
                        "\"v2\" (mma.sync, 128 rows per CTA) or \"v1\" (64 rows)", f);
    }
    if (b && b[0] && strcmp(b, "wg") != 0) {
        if (strcmp(b, "atomic") == 0) v.bwd_det = 0;
        else if (strcmp(b, "det") == 0) v.bwd_det = 1;
        else SLLM_FATAL("SLLM_ATTN_BWD=\"%s\": expected \"wg\" (the Hopper wgmma kernels, hd 64; the default), "
                        "\"det\" (mma.sync, deterministic dq kernel) or \"atomic\" (dq by fp32 atomics)", b);
    }
    return v;
}

static inline void attention_check_variant(const char *who, const AttnVariant *v) {
    if (v == NULL) SLLM_FATAL("%s: variant is NULL", who);
    if (v->path != ATTN_PATH_FAST && v->path != ATTN_PATH_SIMPLE) SLLM_FATAL("%s: bad path %d", who, (int)v->path);
    if (v->fwd_mt < 1 || v->fwd_mt > 3 || (v->dq_mt != 1 && v->dq_mt != 2) || v->bwd_det < 0 || v->bwd_det > 2)
        SLLM_FATAL("%s: bad variant fwd_mt=%d bwd_det=%d dq_mt=%d (expected 1|2|3, 0|1|2, 1|2)", who, v->fwd_mt,
                   v->bwd_det, v->dq_mt);
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
static __global__ void attn_simple_fwd_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int B,
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

// D[b, h, i] = sum_d dout * out (fp32), and zero the fp32 dq accumulator row (dq_acc may be NULL; the atomic
// variant uses it). G lanes per (b, i, h) row (a power of two >= hd / 8), 8 elements (16 bytes) per lane and step;
// rows are 16-byte aligned since hd % 8 == 0 and the pointers are.
template <int G>
static __global__ void attn_bwd_preprocess_kernel(float *dsum, float *dq_acc, const bf16 *dout, const bf16 *out, int B,
                                                  int T, int H, int hd) {
    const size_t row = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) / G, rows = (size_t)B * T * H;
    const int sub = threadIdx.x % G;
    float s = 0.0f;
    if (row < rows) {
        for (int d = 8 * sub; d < hd; d += 8 * G) {
            s = dot8_bf16(*reinterpret_cast<const uint4 *>(dout + row * hd + d),
                          *reinterpret_cast<const uint4 *>(out + row * hd + d), s);
            if (dq_acc) {
                float4 *z = reinterpret_cast<float4 *>(dq_acc + row * hd + d);
                z[0] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
                z[1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
            }
        }
    }
#pragma unroll
    for (int o = G / 2; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (row < rows && sub == 0) {
        const int h = (int)(row % H), i = (int)(row / H % T), b = (int)(row / ((size_t)H * T));
        dsum[((size_t)b * H + h) * T + i] = s;
    }
}
static inline void attn_bwd_preprocess(float *dsum, float *dq_acc, const bf16 *dout, const bf16 *out, int B, int T,
                                       int H, int hd, cudaStream_t stream) {
    const size_t rows = (size_t)B * T * H;
    const int need = (hd + 7) / 8;
    const int G = need <= 1 ? 1 : need <= 2 ? 2 : need <= 4 ? 4 : need <= 8 ? 8 : 16;  // hd <= 128
    const unsigned blocks = (unsigned)ceil_div_sz(rows * G, 256);
    switch (G) {
        case 1: attn_bwd_preprocess_kernel<1><<<blocks, 256, 0, stream>>>(dsum, dq_acc, dout, out, B, T, H, hd); break;
        case 2: attn_bwd_preprocess_kernel<2><<<blocks, 256, 0, stream>>>(dsum, dq_acc, dout, out, B, T, H, hd); break;
        case 4: attn_bwd_preprocess_kernel<4><<<blocks, 256, 0, stream>>>(dsum, dq_acc, dout, out, B, T, H, hd); break;
        case 8: attn_bwd_preprocess_kernel<8><<<blocks, 256, 0, stream>>>(dsum, dq_acc, dout, out, B, T, H, hd); break;
        default: attn_bwd_preprocess_kernel<16><<<blocks, 256, 0, stream>>>(dsum, dq_acc, dout, out, B, T, H, hd);
    }
    cudaCheckLaunch();
}

// dq for one query row per warp: dq_i = scale * sum_{j<=i} p_ij (dp_ij - D_i) k_j.
static __global__ void attn_simple_bwd_dq_kernel(bf16 *dq, const bf16 *dout, const float *lse, const float *dsum,
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
static __global__ void attn_simple_bwd_dkdv_kernel(bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse,
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
    attn_bwd_preprocess(dsum, NULL, dout, out, B, T, H, hd, stream);
    attn_simple_bwd_dq_kernel<<<attn_warp_blocks(qrows, 8), 256, 0, stream>>>(dq, dout, lse, dsum, q, k, v, B, T, H,
                                                                              KVH, hd, scale);
    cudaCheckLaunch();
    attn_simple_bwd_dkdv_kernel<<<attn_warp_blocks(kvrows, 8), 256, 0, stream>>>(dk, dv, dout, lse, dsum, q, k, v, B,
                                                                                 T, H, KVH, hd, scale);
    cudaCheckLaunch();
}


// ------------------------------------------------------------------------------------------------
// Fast path: tensor cores (mma.sync m16n8k16 bf16 -> fp32), FlashAttention-2 structure.
//
// Fragment layouts of mma.m16n8k16 and ldmatrix: core/tc_utils.cuh (the wrappers used here).
// Shared-memory tiles are [rows][HD + 8] bf16: the 16-byte pad per row makes the 8 row addresses of every
// ldmatrix land in distinct bank groups.

#define ATTN_BM 64       // query rows per forward CTA / per backward inner block
#define ATTN_BN 64       // keys per forward inner block / per backward CTA
#define ATTN_THREADS 128 // 4 warps x 16 rows

// 2^x (MUFU.EX2, flush-to-zero; 2^-inf = 0)

// A fragment (16 x 16 at rows r0.., cols c0..) of a row-major [rows][ld] tile.
__device__ __forceinline__ void attn_ldsm_a(uint32_t a[4], const bf16 *tile, int ld, int r0, int c0, int lane) {
    tc_ldsm_x4(a, tile + (r0 + (lane & 15)) * ld + c0 + (lane >> 4) * 8);
}
// B fragments of two n-tiles (n0..n0+15) x (k0..k0+15) where B[k][n] = tile[n][k] (tile rows are n):
// b[0], b[1] for n-tile n0, b[2], b[3] for n-tile n0+8.
__device__ __forceinline__ void attn_ldsm_bt(uint32_t b[4], const bf16 *tile, int ld, int n0, int k0, int lane) {
    int mi = lane >> 3, r = lane & 7;
    tc_ldsm_x4(b, tile + (n0 + (mi >> 1) * 8 + r) * ld + k0 + (mi & 1) * 8);
}
// B fragments of two n-tiles (n0..n0+15) x (k0..k0+15) where B[k][n] = tile[k][n] (tile rows are k).
__device__ __forceinline__ void attn_ldsm_bn(uint32_t b[4], const bf16 *tile, int ld, int k0, int n0, int lane) {
    int mi = lane >> 3, r = lane & 7;
    tc_ldsm_x4_trans(b, tile + (k0 + (mi & 1) * 8 + r) * ld + n0 + (mi >> 1) * 8);
}
// A fragment (16 x 16) of A = M^T where M is a row-major [rows][ld] tile: A rows m0.. = M cols, A cols k0.. = M rows.
__device__ __forceinline__ void attn_ldsm_at(uint32_t a[4], const bf16 *tile, int ld, int m0, int k0, int lane) {
    int mi = lane >> 3, r = lane & 7;
    tc_ldsm_x4_trans(a, tile + (k0 + (mi >> 1) * 8 + r) * ld + m0 + (mi & 1) * 8);
}

// Async load of `nrows` rows (row0.. of a [T, nheads, HD] tensor at head offset `base`) into a [rows][HD+8] tile;
// rows >= T are zero-filled.
template <int HD>
__device__ __forceinline__ void attn_load_tile(bf16 *tile, const bf16 *base, size_t row_stride, int row0, int nrows,
                                               int T, int tid) {
    constexpr int CH = HD / 8, LD = HD + 8;
    for (int c = tid; c < nrows * CH; c += ATTN_THREADS) {
        int r = c / CH, cc = c % CH;
        int row = row0 + r;
        bool ok = row < T;
        tc_cp_async16(tile + r * LD + cc * 8, base + (size_t)(ok ? row : 0) * row_stride + cc * 8, ok ? 16 : 0);
    }
}

// Forward tiles: MT m-tiles (16 rows each) per warp, so a CTA of 4 warps owns BM = 64*MT query rows.
// MT = 1 is version 1 (64 rows per CTA); MT = 2 (128 rows, hd <= 64) makes every K/V fragment loaded from shared
// memory feed two mma instead of one (ldmatrix:mma 1:4 instead of 1:2; shared-memory bandwidth was the limit).
// Optional output of the forward (inference prefill): the keys and values also written to a KV cache
// kc, vc [B, S, KVH * HD] at positions 0 .. T-1 (model/infer_engine.cuh's layout), so that no separate copy kernel
// reads them again. kc == NULL: none.
typedef struct {
    bf16 *kc, *vc;
    int S;
} AttnKVCache;

// acc = A B^T for the warp's 16 rows: A [16 x HD] the rows 16 warp .. of the shared tile sA (its fragments cached
// in registers when CACHE), B [BM x HD] the shared tile (rows = queries): the backward's S^T = K Q^T and dP^T = V dO^T.
template <int HD, int BM, int LD, bool CACHE>
__device__ __forceinline__ void attn_mma_rows_tile_t(float (&acc)[BM / 8][4],
                                                     const uint32_t (&cached)[CACHE ? HD / 16 : 1][4], const bf16 *sA,
                                                     int warp, const bf16 *tile, int lane) {
#pragma unroll
    for (int i = 0; i < BM / 8; i++) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.0f;
#pragma unroll
    for (int kk = 0; kk < HD / 16; kk++) {
        uint32_t af[4];
        if (CACHE) {
            af[0] = cached[CACHE ? kk : 0][0]; af[1] = cached[CACHE ? kk : 0][1];
            af[2] = cached[CACHE ? kk : 0][2]; af[3] = cached[CACHE ? kk : 0][3];
        } else {
            attn_ldsm_a(af, sA, LD, warp * 16, kk * 16, lane);
        }
#pragma unroll
        for (int np = 0; np < BM / 16; np++) {
            uint32_t bfr[4];
            attn_ldsm_bt(bfr, tile, LD, np * 16, kk * 16, lane);
            tc_mma_bf16(acc[2 * np], af, bfr[0], bfr[1]);
            tc_mma_bf16(acc[2 * np + 1], af, bfr[2], bfr[3]);
        }
    }
}

template <int HD, int MT>
static constexpr size_t attn_fwd_smem_bytes() {
    return (size_t)(64 * MT + 4 * ATTN_BN) * (HD + 8) * sizeof(bf16);
}

// grid (ceil(T/(64*MT)), H, B), 128 threads. Warp w owns query rows q0 + 16*MT*w .. +16*MT-1 (m-tile mt: rows
// q0 + 16*(MT*w + mt) ..). Online softmax in the log2 domain: p = 2^(s*scale_log2 - m), m the running max of
// s*scale_log2. Key blocks entirely after all rows of a warp are skipped by that warp (it still takes the barriers).
// cache.kc != NULL: the key blocks on the diagonal of this query block (keys q0 .. q0 + BM - 1, each key in exactly
// one query block's diagonal) go from shared memory to the cache, written by the first query head of the group.
template <int HD, int MT>
static __global__ void __launch_bounds__(ATTN_THREADS, MT == 1 ? 3 : 2)
    attn_fwd_kernel(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int T, int H, int KVH,
                    float scale_log2, const AttnKVCache cache) {
    static_assert(MT == 1 || (MT == 2 && HD <= 64), "attn_fwd_kernel: MT = 2 only for hd <= 64 (registers)");
    constexpr int LD = HD + 8, BM = 64 * MT, BN = ATTN_BN, CH = HD / 8, WR = 16 * MT;
    extern __shared__ __align__(16) unsigned char attn_smem[];
    bf16 *sQ = reinterpret_cast<bf16 *>(attn_smem);  // [BM][LD], reused to stage the output
    bf16 *sK = sQ + BM * LD;                          // [2][BN][LD]
    bf16 *sV = sK + 2 * BN * LD;                      // [2][BN][LD]

    const int mb = gridDim.x - 1 - blockIdx.x;  // heaviest (latest) query blocks first
    const int h = blockIdx.y, b = blockIdx.z;
    const int kvh = h / (H / KVH);
    const int q0 = mb * BM;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const size_t qs = (size_t)H * HD, kvs = (size_t)KVH * HD;
    const bf16 *qb = q + (size_t)b * T * qs + (size_t)h * HD;
    const bf16 *kb = k + (size_t)b * T * kvs + (size_t)kvh * HD;
    const bf16 *vb = v + (size_t)b * T * kvs + (size_t)kvh * HD;
    const int wrow0 = q0 + warp * WR;  // first query row of this warp

    const int n_kb = min(CEIL_DIV(q0 + BM, BN), CEIL_DIV(T, BN));
    attn_load_tile<HD>(sQ, qb, qs, q0, BM, T, tid);
    attn_load_tile<HD>(sK, kb, kvs, 0, BN, T, tid);
    attn_load_tile<HD>(sV, vb, kvs, 0, BN, T, tid);
    tc_cp_async_commit();

    uint32_t qf[MT][HD / 16][4];
    float o[MT][HD / 8][4];
    float m[MT][2], l[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int i = 0; i < HD / 8; i++) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.0f;
        m[mt][0] = m[mt][1] = -INFINITY;
        l[mt][0] = l[mt][1] = 0.0f;
    }

    for (int j = 0; j < n_kb; j++) {
        tc_cp_async_wait<0>();
        __syncthreads();  // tile j visible to all; everyone is done with tile j-1 (its buffer is refilled next)
        if (j + 1 < n_kb) {
            int nb = (j + 1) & 1;
            attn_load_tile<HD>(sK + nb * BN * LD, kb, kvs, (j + 1) * BN, BN, T, tid);
            attn_load_tile<HD>(sV + nb * BN * LD, vb, kvs, (j + 1) * BN, BN, T, tid);
        }
        tc_cp_async_commit();
        if (cache.kc && j * BN >= q0 && h % (H / KVH) == 0) {  // a diagonal key block: into the cache
            const bf16 *tk = sK + (j & 1) * BN * LD, *tv = sV + (j & 1) * BN * LD;
            for (int i = tid; i < BN * CH; i += ATTN_THREADS) {
                const int r = i / CH, c = i - r * CH, row = j * BN + r;
                if (row < T) {
                    const size_t o = ((size_t)b * cache.S + row) * kvs + (size_t)kvh * HD + 8 * c;
                    *reinterpret_cast<uint4 *>(cache.kc + o) = *reinterpret_cast<const uint4 *>(tk + r * LD + 8 * c);
                    *reinterpret_cast<uint4 *>(cache.vc + o) = *reinterpret_cast<const uint4 *>(tv + r * LD + 8 * c);
                }
            }
        }
        if (j == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++) attn_ldsm_a(qf[mt][kk], sQ, LD, warp * WR + mt * 16, kk * 16, lane);
        }
        const int k0 = j * BN;
        if (MT > 1 && k0 > wrow0 + WR - 1) continue;  // every key of the block is after every row of this warp
        const bf16 *cK = sK + (j & 1) * BN * LD;
        const bf16 *cV = sV + (j & 1) * BN * LD;

        // S = Q K^T (16*MT rows x 64 keys per warp)
        float s[MT][BN / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < BN / 8; i++) s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
#pragma unroll
            for (int np = 0; np < BN / 16; np++) {
                uint32_t bfr[4];
                attn_ldsm_bt(bfr, cK, LD, np * 16, kk * 16, lane);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    tc_mma_bf16(s[mt][2 * np], qf[mt][kk], bfr[0], bfr[1]);
                    tc_mma_bf16(s[mt][2 * np + 1], qf[mt][kk], bfr[2], bfr[3]);
                }
            }
        }
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int row_a = wrow0 + mt * 16 + g, row_b = row_a + 8;
            // causal mask (raw scores -> -inf) on blocks that reach past the m-tile's first row
            if (k0 + BN - 1 > wrow0 + mt * 16) {
#pragma unroll
                for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                    for (int e = 0; e < 4; e++) {
                        int col = k0 + nt * 8 + 2 * t + (e & 1);
                        if (col > ((e < 2) ? row_a : row_b)) s[mt][nt][e] = -INFINITY;
                    }
            }
            // online softmax (scale > 0, so the max of the raw scores scales to the max of the scaled ones)
            float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++) {
                mx[0] = fmaxf(mx[0], fmaxf(s[mt][nt][0], s[mt][nt][1]));
                mx[1] = fmaxf(mx[1], fmaxf(s[mt][nt][2], s[mt][nt][3]));
            }
            float alpha[2], mref[2];
#pragma unroll
            for (int i = 0; i < 2; i++) {
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
                mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
                float mn = fmaxf(m[mt][i], mx[i] * scale_log2);
                mref[i] = (mn == -INFINITY) ? 0.0f : mn;
                alpha[i] = tc_exp2(m[mt][i] - mref[i]);  // 0 when m was -inf
                m[mt][i] = mn;
                l[mt][i] *= alpha[i];
            }
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++) {
                s[mt][nt][0] = tc_exp2(fmaf(s[mt][nt][0], scale_log2, -mref[0]));
                s[mt][nt][1] = tc_exp2(fmaf(s[mt][nt][1], scale_log2, -mref[0]));
                s[mt][nt][2] = tc_exp2(fmaf(s[mt][nt][2], scale_log2, -mref[1]));
                s[mt][nt][3] = tc_exp2(fmaf(s[mt][nt][3], scale_log2, -mref[1]));
                l[mt][0] += s[mt][nt][0] + s[mt][nt][1];
                l[mt][1] += s[mt][nt][2] + s[mt][nt][3];
            }
#pragma unroll
            for (int dt = 0; dt < HD / 8; dt++) {
                o[mt][dt][0] *= alpha[0];
                o[mt][dt][1] *= alpha[0];
                o[mt][dt][2] *= alpha[1];
                o[mt][dt][3] *= alpha[1];
            }
        }
        // O += P V
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                a[mt][0] = tc_pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = tc_pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = tc_pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = tc_pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dp = 0; dp < HD / 16; dp++) {
                uint32_t bfr[4];
                attn_ldsm_bn(bfr, cV, LD, kk * 16, dp * 16, lane);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    tc_mma_bf16(o[mt][2 * dp], a[mt], bfr[0], bfr[1]);
                    tc_mma_bf16(o[mt][2 * dp + 1], a[mt], bfr[2], bfr[3]);
                }
            }
        }
    }

    // epilogue: normalize, lse, stage this warp's rows in sQ (only this warp read them), 16-byte stores
    bf16 *sO = sQ + warp * WR * LD;
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
#pragma unroll
        for (int i = 0; i < 2; i++) {
            l[mt][i] += __shfl_xor_sync(0xffffffffu, l[mt][i], 1);
            l[mt][i] += __shfl_xor_sync(0xffffffffu, l[mt][i], 2);
        }
        const float inv0 = 1.0f / l[mt][0], inv1 = 1.0f / l[mt][1];
        const int row_a = wrow0 + mt * 16 + g, row_b = row_a + 8;
        if (t == 0) {
            float *lrow = lse + ((size_t)b * H + h) * T;
            if (row_a < T) lrow[row_a] = m[mt][0] * ATTN_LN2 + logf(l[mt][0]);
            if (row_b < T) lrow[row_b] = m[mt][1] * ATTN_LN2 + logf(l[mt][1]);
        }
        bf16 *so = sO + mt * 16 * LD;
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            *reinterpret_cast<uint32_t *>(so + g * LD + dt * 8 + 2 * t) =
                tc_pack_bf16x2(o[mt][dt][0] * inv0, o[mt][dt][1] * inv0);
            *reinterpret_cast<uint32_t *>(so + (g + 8) * LD + dt * 8 + 2 * t) =
                tc_pack_bf16x2(o[mt][dt][2] * inv1, o[mt][dt][3] * inv1);
        }
    }
    __syncwarp();
    for (int c = lane; c < WR * CH; c += 32) {
        int r = c / CH, cc = c % CH;
        int row = wrow0 + r;
        if (row < T)
            *reinterpret_cast<uint4 *>(out + ((size_t)b * T + row) * qs + (size_t)h * HD + cc * 8) =
                *reinterpret_cast<const uint4 *>(sO + r * LD + cc * 8);
    }
}

template <int HD, bool DQ>
static constexpr size_t attn_bwd_smem_bytes() {
    return (size_t)(2 * ATTN_BN + 4 * ATTN_BM) * (HD + 8) * sizeof(bf16) +  // K, V, Q[2], dO[2]
           (DQ ? (size_t)ATTN_BN * (ATTN_BM + 8) * sizeof(bf16) : 0) +      // dS^T (atomic dQ only)
           (size_t)4 * ATTN_BM * sizeof(float);                             // lse[2], D[2]
}

// grid (ceil(T/64), KVH, B), 128 threads. The CTA owns keys k0 .. k0+63 of kv head kvh; warp w owns keys
// k0 + 16w .. +15 (its dK, dV rows, in registers). It loops over the query heads of the group and the query
// blocks from the diagonal on. Per query block (64 rows): S^T = K Q^T, P^T = exp2(S^T*scale*log2e - lse*log2e),
// dV += P^T dO, dP^T = V dO^T, dS^T = P^T (dP^T - D), dK += dS^T Q, dQ += dS K (atomicAdd into fp32 dq_acc).
// dq_acc and dK carry no scale; the scale is applied when writing dK and when converting dq.
// DQ = false (deterministic backward): the dQ part is left out (dq_acc unused, may be NULL; no dS^T tile, one
// barrier less per block); attn_bwd_dq_kernel computes dq instead.
template <int HD, bool DQ>
static __global__ void __launch_bounds__(ATTN_THREADS) attn_bwd_kernel(float *dq_acc, bf16 *dk, bf16 *dv, const bf16 *dout,
                                                                const float *lse, const float *dsum, const bf16 *q,
                                                                const bf16 *k, const bf16 *v, int T, int H, int KVH,
                                                                float scale, float scale_log2) {
    constexpr int LD = HD + 8, LDS = ATTN_BM + 8, BM = ATTN_BM, BN = ATTN_BN;
    constexpr bool CACHE_KV = HD <= 64;  // keep K/V A-fragments in registers (hd 128 would spill)
    extern __shared__ __align__(16) unsigned char attn_smem[];
    bf16 *sK = reinterpret_cast<bf16 *>(attn_smem);  // [BN][LD]
    bf16 *sV = sK + BN * LD;                          // [BN][LD]
    bf16 *sQ = sV + BN * LD;                          // [2][BM][LD]
    bf16 *sdO = sQ + 2 * BM * LD;                     // [2][BM][LD]
    bf16 *sdS = sdO + 2 * BM * LD;                    // [BN][LDS]  dS^T (keys x queries), DQ only
    float *sL = reinterpret_cast<float *>(sdS + (DQ ? BN * LDS : 0));  // [2][BM] lse * log2e (+inf past T)
    float *sD = sL + 2 * BM;                                 // [2][BM] D (0 past T)

    const int nb = blockIdx.x, kvh = blockIdx.y, b = blockIdx.z;
    const int group = H / KVH;
    const int k0 = nb * BN;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const size_t qs = (size_t)H * HD, kvs = (size_t)KVH * HD;
    const bf16 *kb = k + (size_t)b * T * kvs + (size_t)kvh * HD;
    const bf16 *vb = v + (size_t)b * T * kvs + (size_t)kvh * HD;
    const int nq = CEIL_DIV(T, BM);
    const int i_begin = k0 / BM;
    const int per_head = nq - i_begin;
    const int n_it = group * per_head;

    // issue loads for iteration `it` into buffer `buf`
    auto load_q_block = [&](int it, int buf) {
        int h = kvh * group + it / per_head;
        int q0 = (i_begin + it % per_head) * BM;
        const bf16 *qb = q + (size_t)b * T * qs + (size_t)h * HD;
        const bf16 *ob = dout + (size_t)b * T * qs + (size_t)h * HD;
        attn_load_tile<HD>(sQ + buf * BM * LD, qb, qs, q0, BM, T, tid);
        attn_load_tile<HD>(sdO + buf * BM * LD, ob, qs, q0, BM, T, tid);
        if (tid < BM) {
            int row = q0 + tid;
            size_t idx = ((size_t)b * H + h) * T + row;
            sL[buf * BM + tid] = row < T ? lse[idx] * ATTN_LOG2E : INFINITY;
            sD[buf * BM + tid] = row < T ? dsum[idx] : 0.0f;
        }
    };

    attn_load_tile<HD>(sK, kb, kvs, k0, BN, T, tid);
    attn_load_tile<HD>(sV, vb, kvs, k0, BN, T, tid);
    load_q_block(0, 0);
    tc_cp_async_commit();

    uint32_t kf[CACHE_KV ? HD / 16 : 1][4], vf[CACHE_KV ? HD / 16 : 1][4];
    float dka[HD / 8][4], dva[HD / 8][4];
#pragma unroll
    for (int i = 0; i < HD / 8; i++) {
        dka[i][0] = dka[i][1] = dka[i][2] = dka[i][3] = 0.0f;
        dva[i][0] = dva[i][1] = dva[i][2] = dva[i][3] = 0.0f;
    }
    const int key_a = k0 + warp * 16 + g, key_b = key_a + 8;

    for (int it = 0; it < n_it; it++) {
        tc_cp_async_wait<0>();
        __syncthreads();  // block `it` visible; all warps are done with block it-1 and with sdS
        if (it + 1 < n_it) load_q_block(it + 1, (it + 1) & 1);
        tc_cp_async_commit();
        if (CACHE_KV && it == 0) {
#pragma unroll
            for (int kk = 0; kk < (CACHE_KV ? HD / 16 : 1); kk++) {
                attn_ldsm_a(kf[kk], sK, LD, warp * 16, kk * 16, lane);
                attn_ldsm_a(vf[kk], sV, LD, warp * 16, kk * 16, lane);
            }
        }
        const int c = it & 1;
        const int h = kvh * group + it / per_head;
        const int q0 = (i_begin + it % per_head) * BM;
        const bf16 *cQ = sQ + c * BM * LD, *cdO = sdO + c * BM * LD;
        const float *cL = sL + c * BM, *cD = sD + c * BM;

        // S^T = K Q^T (16 keys x 64 queries per warp)
        float s[BM / 8][4];
        attn_mma_rows_tile_t<HD, BM, LD, CACHE_KV>(s, kf, sK, warp, cQ, lane);
        // P^T: rows = keys (key_a for e < 2, key_b otherwise), cols = queries q0 + nt*8 + 2t + (e&1)
        const bool need_mask = q0 < k0 + warp * 16 + 15;
#pragma unroll
        for (int nt = 0; nt < BM / 8; nt++) {
#pragma unroll
            for (int e = 0; e < 4; e++) {
                int qc = nt * 8 + 2 * t + (e & 1);
                // (v1 and hd 128 keep exp2f: there ex2.approx + fma made ptxas spill at 255 registers)
                float p = (DQ || HD > 64) ? exp2f(s[nt][e] * scale_log2 - cL[qc])
                                          : tc_exp2(fmaf(s[nt][e], scale_log2, -cL[qc]));
                if (need_mask && q0 + qc < ((e < 2) ? key_a : key_b)) p = 0.0f;
                s[nt][e] = p;
            }
        }
        // dV += P^T dO
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            uint32_t a[4] = {tc_pack_bf16x2(s[2 * kk][0], s[2 * kk][1]), tc_pack_bf16x2(s[2 * kk][2], s[2 * kk][3]),
                             tc_pack_bf16x2(s[2 * kk + 1][0], s[2 * kk + 1][1]),
                             tc_pack_bf16x2(s[2 * kk + 1][2], s[2 * kk + 1][3])};
#pragma unroll
            for (int dp = 0; dp < HD / 16; dp++) {
                uint32_t bfr[4];
                attn_ldsm_bn(bfr, cdO, LD, kk * 16, dp * 16, lane);
                tc_mma_bf16(dva[2 * dp], a, bfr[0], bfr[1]);
                tc_mma_bf16(dva[2 * dp + 1], a, bfr[2], bfr[3]);
            }
        }
        // dP^T = V dO^T
        float dpt[BM / 8][4];
        attn_mma_rows_tile_t<HD, BM, LD, CACHE_KV>(dpt, vf, sV, warp, cdO, lane);
        // dS^T = P^T (dP^T - D); also to shared memory (bf16) for dQ
        bf16 *wdS = sdS + warp * 16 * LDS;
#pragma unroll
        for (int nt = 0; nt < BM / 8; nt++) {
            int qc = nt * 8 + 2 * t;
            float d0 = cD[qc], d1 = cD[qc + 1];
            dpt[nt][0] = s[nt][0] * (dpt[nt][0] - d0);
            dpt[nt][1] = s[nt][1] * (dpt[nt][1] - d1);
            dpt[nt][2] = s[nt][2] * (dpt[nt][2] - d0);
            dpt[nt][3] = s[nt][3] * (dpt[nt][3] - d1);
            if (DQ) {
                *reinterpret_cast<uint32_t *>(wdS + g * LDS + qc) = tc_pack_bf16x2(dpt[nt][0], dpt[nt][1]);
                *reinterpret_cast<uint32_t *>(wdS + (g + 8) * LDS + qc) = tc_pack_bf16x2(dpt[nt][2], dpt[nt][3]);
            }
        }
        // dK += dS^T Q
#pragma unroll
        for (int kk = 0; kk < BM / 16; kk++) {
            uint32_t a[4] = {tc_pack_bf16x2(dpt[2 * kk][0], dpt[2 * kk][1]),
                             tc_pack_bf16x2(dpt[2 * kk][2], dpt[2 * kk][3]),
                             tc_pack_bf16x2(dpt[2 * kk + 1][0], dpt[2 * kk + 1][1]),
                             tc_pack_bf16x2(dpt[2 * kk + 1][2], dpt[2 * kk + 1][3])};
#pragma unroll
            for (int dp = 0; dp < HD / 16; dp++) {
                uint32_t bfr[4];
                attn_ldsm_bn(bfr, cQ, LD, kk * 16, dp * 16, lane);
                tc_mma_bf16(dka[2 * dp], a, bfr[0], bfr[1]);
                tc_mma_bf16(dka[2 * dp + 1], a, bfr[2], bfr[3]);
            }
        }
        if (!DQ) continue;
        __syncthreads();  // dS^T of all warps in sdS
        // dQ rows q0 + 16w .. +15 += dS K (A = dS = (dS^T)^T from sdS, B[key][d] = K)
        float dq[HD / 8][4];
#pragma unroll
        for (int i = 0; i < HD / 8; i++) dq[i][0] = dq[i][1] = dq[i][2] = dq[i][3] = 0.0f;
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t a[4];
            attn_ldsm_at(a, sdS, LDS, warp * 16, kk * 16, lane);
#pragma unroll
            for (int dp = 0; dp < HD / 16; dp++) {
                uint32_t bfr[4];
                attn_ldsm_bn(bfr, sK, LD, kk * 16, dp * 16, lane);
                tc_mma_bf16(dq[2 * dp], a, bfr[0], bfr[1]);
                tc_mma_bf16(dq[2 * dp + 1], a, bfr[2], bfr[3]);
            }
        }
        const int qa = q0 + warp * 16 + g, qb2 = qa + 8;
        float *dqa = dq_acc + ((size_t)b * T + qa) * qs + (size_t)h * HD;
        float *dqb = dq_acc + ((size_t)b * T + qb2) * qs + (size_t)h * HD;
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            int col = dt * 8 + 2 * t;
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
            if (qa < T) atomicAdd(reinterpret_cast<float2 *>(dqa + col), make_float2(dq[dt][0], dq[dt][1]));
            if (qb2 < T) atomicAdd(reinterpret_cast<float2 *>(dqb + col), make_float2(dq[dt][2], dq[dt][3]));
#else
            if (qa < T) { atomicAdd(dqa + col, dq[dt][0]); atomicAdd(dqa + col + 1, dq[dt][1]); }
            if (qb2 < T) { atomicAdd(dqb + col, dq[dt][2]); atomicAdd(dqb + col + 1, dq[dt][3]); }
#endif
        }
    }

    // write dK (scaled), dV for keys key_a, key_b
    bf16 *dkb = dk + (size_t)b * T * kvs + (size_t)kvh * HD;
    bf16 *dvb = dv + (size_t)b * T * kvs + (size_t)kvh * HD;
#pragma unroll
    for (int dt = 0; dt < HD / 8; dt++) {
        int col = dt * 8 + 2 * t;
        if (key_a < T) {
            *reinterpret_cast<uint32_t *>(dkb + (size_t)key_a * kvs + col) =
                tc_pack_bf16x2(dka[dt][0] * scale, dka[dt][1] * scale);
            *reinterpret_cast<uint32_t *>(dvb + (size_t)key_a * kvs + col) = tc_pack_bf16x2(dva[dt][0], dva[dt][1]);
        }
        if (key_b < T) {
            *reinterpret_cast<uint32_t *>(dkb + (size_t)key_b * kvs + col) =
                tc_pack_bf16x2(dka[dt][2] * scale, dka[dt][3] * scale);
            *reinterpret_cast<uint32_t *>(dvb + (size_t)key_b * kvs + col) = tc_pack_bf16x2(dva[dt][2], dva[dt][3]);
        }
    }
}

// ------------------------------------------------------------------------------------------------
// Deterministic dq (no atomics): one CTA per (BM = 64*MT query rows, head, batch), 4 warps, warp w owns rows
// q0 + 16*MT*w .. +16*MT-1 (Q and dO fragments in registers, dQ accumulated in registers). Loops over the key
// blocks (BN keys) up to the diagonal, recomputing P = exp2(S*scale_log2 - lse*log2e) and dP = dO V^T:
// dS = P (dP - D), dQ += dS K. Fixed summation order, so dq is bitwise reproducible. MT = 2 (hd <= 64) uses
// 32-key blocks to stay within the register budget; MT = 1 uses 64-key blocks.
#define ATTN_DQ_BN(MT) ((MT) == 1 ? 64 : 32)  // key block of the dq kernel

template <int HD, int MT>
static constexpr size_t attn_bwd_dq_smem_bytes() {
    return (size_t)(2 * 64 * MT + 4 * ATTN_DQ_BN(MT)) * (HD + 8) * sizeof(bf16);  // Q, dO, K[2], V[2]
}

template <int HD, int MT>
static __global__ void __launch_bounds__(ATTN_THREADS, 2)
    attn_bwd_dq_kernel(bf16 *dq, const bf16 *dout, const float *lse, const float *dsum, const bf16 *q, const bf16 *k,
                       const bf16 *v, int T, int H, int KVH, float scale, float scale_log2) {
    static_assert(MT == 1 || (MT == 2 && HD <= 64), "attn_bwd_dq_kernel: MT = 2 only for hd <= 64 (registers)");
    constexpr int LD = HD + 8, BM = 64 * MT, BN = ATTN_DQ_BN(MT), CH = HD / 8, WR = 16 * MT;
    extern __shared__ __align__(16) unsigned char attn_smem[];
    bf16 *sQ = reinterpret_cast<bf16 *>(attn_smem);  // [BM][LD], reused to stage dq
    bf16 *sdO = sQ + BM * LD;                         // [BM][LD]
    bf16 *sK = sdO + BM * LD;                         // [2][BN][LD]
    bf16 *sV = sK + 2 * BN * LD;                      // [2][BN][LD]

    const int mb = gridDim.x - 1 - blockIdx.x;  // heaviest query blocks first
    const int h = blockIdx.y, b = blockIdx.z;
    const int kvh = h / (H / KVH);
    const int q0 = mb * BM;
    const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
    const int g = lane >> 2, t = lane & 3;
    const size_t qs = (size_t)H * HD, kvs = (size_t)KVH * HD;
    const bf16 *qb = q + (size_t)b * T * qs + (size_t)h * HD;
    const bf16 *ob = dout + (size_t)b * T * qs + (size_t)h * HD;
    const bf16 *kb = k + (size_t)b * T * kvs + (size_t)kvh * HD;
    const bf16 *vb = v + (size_t)b * T * kvs + (size_t)kvh * HD;
    const int wrow0 = q0 + warp * WR;

    const int n_kb = min(CEIL_DIV(q0 + BM, BN), CEIL_DIV(T, BN));
    attn_load_tile<HD>(sQ, qb, qs, q0, BM, T, tid);
    attn_load_tile<HD>(sdO, ob, qs, q0, BM, T, tid);
    attn_load_tile<HD>(sK, kb, kvs, 0, BN, T, tid);
    attn_load_tile<HD>(sV, vb, kvs, 0, BN, T, tid);
    tc_cp_async_commit();

    // lse (log2 domain; +inf past T so P = 0 there) and D of rows wrow0 + 16mt + g (+8)
    float Lr[MT][2], Dr[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < 2; i++) {
            int row = wrow0 + mt * 16 + g + 8 * i;
            size_t idx = ((size_t)b * H + h) * T + row;
            Lr[mt][i] = row < T ? lse[idx] * ATTN_LOG2E : INFINITY;
            Dr[mt][i] = row < T ? dsum[idx] : 0.0f;
        }
    uint32_t qf[MT][HD / 16][4], of[MT][HD / 16][4];
    float dqa[MT][HD / 8][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int i = 0; i < HD / 8; i++) dqa[mt][i][0] = dqa[mt][i][1] = dqa[mt][i][2] = dqa[mt][i][3] = 0.0f;

    for (int j = 0; j < n_kb; j++) {
        tc_cp_async_wait<0>();
        __syncthreads();  // tile j visible to all; everyone is done with tile j-1
        if (j + 1 < n_kb) {
            int nb = (j + 1) & 1;
            attn_load_tile<HD>(sK + nb * BN * LD, kb, kvs, (j + 1) * BN, BN, T, tid);
            attn_load_tile<HD>(sV + nb * BN * LD, vb, kvs, (j + 1) * BN, BN, T, tid);
        }
        tc_cp_async_commit();
        if (j == 0) {
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int kk = 0; kk < HD / 16; kk++) {
                    attn_ldsm_a(qf[mt][kk], sQ, LD, warp * WR + mt * 16, kk * 16, lane);
                    attn_ldsm_a(of[mt][kk], sdO, LD, warp * WR + mt * 16, kk * 16, lane);
                }
        }
        const int k0 = j * BN;
        if (k0 > wrow0 + WR - 1) continue;  // every key of the block is after every row of this warp
        const bf16 *cK = sK + (j & 1) * BN * LD;
        const bf16 *cV = sV + (j & 1) * BN * LD;

        // S = Q K^T and dP = dO V^T (16*MT rows x BN keys per warp)
        float s[MT][BN / 8][4], dp[MT][BN / 8][4];
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int i = 0; i < BN / 8; i++) {
                s[mt][i][0] = s[mt][i][1] = s[mt][i][2] = s[mt][i][3] = 0.0f;
                dp[mt][i][0] = dp[mt][i][1] = dp[mt][i][2] = dp[mt][i][3] = 0.0f;
            }
#pragma unroll
        for (int kk = 0; kk < HD / 16; kk++) {
#pragma unroll
            for (int np = 0; np < BN / 16; np++) {
                uint32_t bk[4], bv[4];
                attn_ldsm_bt(bk, cK, LD, np * 16, kk * 16, lane);
                attn_ldsm_bt(bv, cV, LD, np * 16, kk * 16, lane);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    tc_mma_bf16(s[mt][2 * np], qf[mt][kk], bk[0], bk[1]);
                    tc_mma_bf16(s[mt][2 * np + 1], qf[mt][kk], bk[2], bk[3]);
                    tc_mma_bf16(dp[mt][2 * np], of[mt][kk], bv[0], bv[1]);
                    tc_mma_bf16(dp[mt][2 * np + 1], of[mt][kk], bv[2], bv[3]);
                }
            }
        }
        // dS = P (dP - D), P masked past the diagonal (into s)
#pragma unroll
        for (int mt = 0; mt < MT; mt++) {
            const int row_a = wrow0 + mt * 16 + g, row_b = row_a + 8;
            const bool need_mask = k0 + BN - 1 > wrow0 + mt * 16;
#pragma unroll
            for (int nt = 0; nt < BN / 8; nt++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = e >> 1;
                    float p = tc_exp2(fmaf(s[mt][nt][e], scale_log2, -Lr[mt][i]));
                    if (need_mask && k0 + nt * 8 + 2 * t + (e & 1) > (i ? row_b : row_a)) p = 0.0f;
                    s[mt][nt][e] = p * (dp[mt][nt][e] - Dr[mt][i]);
                }
        }
        // dQ += dS K (A = dS from registers, B[key][d] = K tile rows)
#pragma unroll
        for (int kk = 0; kk < BN / 16; kk++) {
            uint32_t a[MT][4];
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                a[mt][0] = tc_pack_bf16x2(s[mt][2 * kk][0], s[mt][2 * kk][1]);
                a[mt][1] = tc_pack_bf16x2(s[mt][2 * kk][2], s[mt][2 * kk][3]);
                a[mt][2] = tc_pack_bf16x2(s[mt][2 * kk + 1][0], s[mt][2 * kk + 1][1]);
                a[mt][3] = tc_pack_bf16x2(s[mt][2 * kk + 1][2], s[mt][2 * kk + 1][3]);
            }
#pragma unroll
            for (int dt = 0; dt < HD / 16; dt++) {
                uint32_t bfr[4];
                attn_ldsm_bn(bfr, cK, LD, kk * 16, dt * 16, lane);
#pragma unroll
                for (int mt = 0; mt < MT; mt++) {
                    tc_mma_bf16(dqa[mt][2 * dt], a[mt], bfr[0], bfr[1]);
                    tc_mma_bf16(dqa[mt][2 * dt + 1], a[mt], bfr[2], bfr[3]);
                }
            }
        }
    }

    // epilogue: dq = scale * dQ, staged in this warp's rows of sQ (only this warp read them), 16-byte stores
    bf16 *so = sQ + warp * WR * LD;
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int dt = 0; dt < HD / 8; dt++) {
            *reinterpret_cast<uint32_t *>(so + (mt * 16 + g) * LD + dt * 8 + 2 * t) =
                tc_pack_bf16x2(dqa[mt][dt][0] * scale, dqa[mt][dt][1] * scale);
            *reinterpret_cast<uint32_t *>(so + (mt * 16 + g + 8) * LD + dt * 8 + 2 * t) =
                tc_pack_bf16x2(dqa[mt][dt][2] * scale, dqa[mt][dt][3] * scale);
        }
    __syncwarp();
    for (int c = lane; c < WR * CH; c += 32) {
        int r = c / CH, cc = c % CH;
        int row = wrow0 + r;
        if (row < T)
            *reinterpret_cast<uint4 *>(dq + ((size_t)b * T + row) * qs + (size_t)h * HD + cc * 8) =
                *reinterpret_cast<const uint4 *>(so + r * LD + cc * 8);
    }
}
// dq = bf16(dq_acc * scale), 8 elements per thread (n % 8 == 0 since hd % 8 == 0).
static __global__ void attn_dq_convert_kernel(bf16 *dq, const float *dq_acc, size_t n, float scale) {
    size_t i = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (i >= n) return;
    float4 a = *reinterpret_cast<const float4 *>(dq_acc + i);
    float4 c = *reinterpret_cast<const float4 *>(dq_acc + i + 4);
    uint4 o;
    o.x = tc_pack_bf16x2(a.x * scale, a.y * scale);
    o.y = tc_pack_bf16x2(a.z * scale, a.w * scale);
    o.z = tc_pack_bf16x2(c.x * scale, c.y * scale);
    o.w = tc_pack_bf16x2(c.z * scale, c.w * scale);
    *reinterpret_cast<uint4 *>(dq + i) = o;
}

template <int HD, int MT>
static inline void attention_forward_fast(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int B,
                                          int T, int H, int KVH, cudaStream_t stream, AttnKVCache cache = {NULL, NULL, 0}) {
    size_t smem = attn_fwd_smem_bytes<HD, MT>();
    cudaCheck(cudaFuncSetAttribute(attn_fwd_kernel<HD, MT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(CEIL_DIV(T, 64 * MT), H, B);
    float scale_log2 = ATTN_LOG2E / sqrtf((float)HD);
    attn_fwd_kernel<HD, MT><<<grid, ATTN_THREADS, smem, stream>>>(out, lse, q, k, v, T, H, KVH, scale_log2, cache);
    cudaCheckLaunch();
}

// DET = false: version 1 (dq by fp32 atomics into dq_acc, then converted). DET = true: dk/dv kernel without dq,
// then attn_bwd_dq_kernel<HD, DQ_MT> (deterministic; dq_acc unused).
template <int HD, bool DET, int DQ_MT>
static inline void attention_backward_fast(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *out,
                                           const float *lse, const bf16 *q, const bf16 *k, const bf16 *v,
                                           float *dq_acc, float *dsum, int B, int T, int H, int KVH,
                                           cudaStream_t stream) {
    float scale = 1.0f / sqrtf((float)HD);
    size_t qrows = (size_t)B * T * H;
    attn_bwd_preprocess(dsum, DET ? NULL : dq_acc, dout, out, B, T, H, HD, stream);
    size_t smem = attn_bwd_smem_bytes<HD, !DET>();
    cudaCheck(cudaFuncSetAttribute(attn_bwd_kernel<HD, !DET>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid(CEIL_DIV(T, ATTN_BN), KVH, B);
    attn_bwd_kernel<HD, !DET><<<grid, ATTN_THREADS, smem, stream>>>(DET ? NULL : dq_acc, dk, dv, dout, lse, dsum, q, k,
                                                                    v, T, H, KVH, scale, scale * ATTN_LOG2E);
    cudaCheckLaunch();
    if (DET) {
        size_t smq = attn_bwd_dq_smem_bytes<HD, DQ_MT>();
        cudaCheck(cudaFuncSetAttribute(attn_bwd_dq_kernel<HD, DQ_MT>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smq));
        dim3 gq(CEIL_DIV(T, 64 * DQ_MT), H, B);
        attn_bwd_dq_kernel<HD, DQ_MT><<<gq, ATTN_THREADS, smq, stream>>>(dq, dout, lse, dsum, q, k, v, T, H, KVH,
                                                                         scale, scale * ATTN_LOG2E);
        cudaCheckLaunch();
    } else {
        size_t n = qrows * HD;
        attn_dq_convert_kernel<<<(unsigned)ceil_div_sz(n / 8, 256), 256, 0, stream>>>(dq, dq_acc, n, scale);
        cudaCheckLaunch();
    }
}

// hd <= 64 may take the MT = 2 kernels; hd 128 always runs MT = 1.
template <int HD>
static inline void attention_forward_fast_v(const AttnVariant *va, bf16 *out, float *lse, const bf16 *q,
                                            const bf16 *k, const bf16 *v, int B, int T, int H, int KVH,
                                            cudaStream_t stream, AttnKVCache cache) {
    if constexpr (HD == AWG_HD) {
        if (va->fwd_mt == 3 && attention_wgmma_supported(HD) &&
            attention_forward_wgmma(out, lse, q, k, v, B, T, H, KVH, stream, cache.kc, cache.vc, cache.S) == 0)
            return;
    }
    if constexpr (HD <= 64) {
        if (va->fwd_mt >= 2) return attention_forward_fast<HD, 2>(out, lse, q, k, v, B, T, H, KVH, stream, cache);
    }
    attention_forward_fast<HD, 1>(out, lse, q, k, v, B, T, H, KVH, stream, cache);
}

template <int HD>
static inline void attention_backward_fast_v(const AttnVariant *va, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                                             const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                                             const bf16 *v, float *dq_acc, float *dsum, int B, int T, int H, int KVH,
                                             cudaStream_t stream) {
    if constexpr (HD == AWG_HD) {
        if (va->bwd_det == 2 && attention_wgmma_supported(HD)) {
            attn_bwd_preprocess(dsum, NULL, dout, out, B, T, H, HD, stream);
            if (attention_backward_wgmma(dq, dk, dv, dout, lse, dsum, q, k, v, B, T, H, KVH, stream) == 0) return;
        }
    }
    if (!va->bwd_det)
        return attention_backward_fast<HD, false, 1>(dq, dk, dv, dout, out, lse, q, k, v, dq_acc, dsum, B, T, H, KVH,
                                                     stream);
    if constexpr (HD <= 64) {
        if (va->dq_mt == 2)
            return attention_backward_fast<HD, true, 2>(dq, dk, dv, dout, out, lse, q, k, v, dq_acc, dsum, B, T, H,
                                                        KVH, stream);
    }
    attention_backward_fast<HD, true, 1>(dq, dk, dv, dout, out, lse, q, k, v, dq_acc, dsum, B, T, H, KVH, stream);
}

// ------------------------------------------------------------------------------------------------
// Public entry points

// cache (may be NULL): also write k, v into a KV cache (AttnKVCache), which the fast path does; returns 1 if it was
// written, 0 if not (the simple path: the caller copies them).
static inline int attention_forward_variant(const AttnVariant *va, bf16 *out, float *lse, const bf16 *q,
                                            const bf16 *k, const bf16 *v, int B, int T, int H, int KVH, int hd,
                                            cudaStream_t stream, const AttnKVCache *cache = NULL) {
    const void *ptrs[5] = {out, lse, q, k, v};
    attention_check_args("attention_forward", ptrs, 5, B, T, H, KVH, hd);
    attention_check_variant("attention_forward", va);
    if (cache && (!cache->kc || !cache->vc || cache->S < T || (((uintptr_t)cache->kc | (uintptr_t)cache->vc) & 15)))
        SLLM_FATAL("attention_forward: KV cache kc=%p vc=%p S=%d (16-byte aligned, S >= T=%d)", (void *)cache->kc,
                   (void *)cache->vc, cache->S, T);
    const AttnKVCache c = cache ? *cache : AttnKVCache{NULL, NULL, 0};
    const int fast = va->path == ATTN_PATH_FAST;
    if (fast && hd == 64) attention_forward_fast_v<64>(va, out, lse, q, k, v, B, T, H, KVH, stream, c);
    else if (fast && hd == 128) attention_forward_fast_v<128>(va, out, lse, q, k, v, B, T, H, KVH, stream, c);
    else if (fast && hd == 32) attention_forward_fast_v<32>(va, out, lse, q, k, v, B, T, H, KVH, stream, c);
    else {
        attention_forward_simple(out, lse, q, k, v, B, T, H, KVH, hd, stream);
        return 0;
    }
    return cache != NULL;
}

static inline void attention_backward_variant(const AttnVariant *va, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                                              const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                                              const bf16 *v, float *scratch, int B, int T, int H, int KVH, int hd,
                                              cudaStream_t stream) {
    const void *ptrs[10] = {dq, dk, dv, dout, out, lse, q, k, v, scratch};
    attention_check_args("attention_backward", ptrs, 10, B, T, H, KVH, hd);
    attention_check_variant("attention_backward", va);
    size_t dq_elems = ((size_t)B * T * H * hd + 63) & ~(size_t)63;
    float *dsum = scratch + dq_elems;
    const int fast = va->path == ATTN_PATH_FAST;
    if (fast && hd == 64)
        attention_backward_fast_v<64>(va, dq, dk, dv, dout, out, lse, q, k, v, scratch, dsum, B, T, H, KVH, stream);
    else if (fast && hd == 128)
        attention_backward_fast_v<128>(va, dq, dk, dv, dout, out, lse, q, k, v, scratch, dsum, B, T, H, KVH, stream);
    else if (fast && hd == 32)
        attention_backward_fast_v<32>(va, dq, dk, dv, dout, out, lse, q, k, v, scratch, dsum, B, T, H, KVH, stream);
    else
        attention_backward_simple(dq, dk, dv, dout, out, lse, q, k, v, dsum, B, T, H, KVH, hd, stream);
}

// Path only (default variant of that path).
static inline void attention_forward_path(AttnPath path, bf16 *out, float *lse, const bf16 *q, const bf16 *k,
                                          const bf16 *v, int B, int T, int H, int KVH, int hd, cudaStream_t stream) {
    AttnVariant va = attention_variant_default(path);
    attention_forward_variant(&va, out, lse, q, k, v, B, T, H, KVH, hd, stream);
}

static inline void attention_backward_path(AttnPath path, bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout,
                                           const bf16 *out, const float *lse, const bf16 *q, const bf16 *k,
                                           const bf16 *v, float *scratch, int B, int T, int H, int KVH, int hd,
                                           cudaStream_t stream) {
    AttnVariant va = attention_variant_default(path);
    attention_backward_variant(&va, dq, dk, dv, dout, out, lse, q, k, v, scratch, B, T, H, KVH, hd, stream);
}

// The binding API (core/attention.cuh in apis.md): variant from SLLM_ATTN / SLLM_ATTN_FWD / SLLM_ATTN_BWD
// (defaults: fast, wg, wg: the wgmma kernels where they run, else v2 and det).
static inline int attention_forward(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int B, int T,
                                    int H, int KVH, int hd, cudaStream_t stream, const AttnKVCache *cache = NULL) {
    AttnVariant va = attention_variant_from_env();
    return attention_forward_variant(&va, out, lse, q, k, v, B, T, H, KVH, hd, stream, cache);
}

static inline void attention_backward(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const bf16 *out,
                                      const float *lse, const bf16 *q, const bf16 *k, const bf16 *v, float *scratch,
                                      int B, int T, int H, int KVH, int hd, cudaStream_t stream) {
    AttnVariant va = attention_variant_from_env();
    attention_backward_variant(&va, dq, dk, dv, dout, out, lse, q, k, v, scratch, B, T, H, KVH, hd, stream);
}

#endif  // SLLM_ATTENTION_CUH
