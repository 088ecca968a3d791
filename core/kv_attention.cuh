// core/kv_attention.cuh: causal attention of new query rows over a KV cache (inference: decoding steps and prefill
// chunks after the first). The first chunk of a prompt (cache empty) runs the training kernels (core/attention.cuh).
//
//   q     [B, T, H, hd] bf16     T new rows per sequence; row t sits at position pos0 + t (RoPE already applied)
//   kc,vc [B, S, KVH, hd] bf16   one layer's cache of S positions per sequence; positions 0 .. pos0 + T - 1 written
//                                (the new rows' keys and values included)
//   out   [B, T, H, hd] bf16     out = softmax(scale * q k^T over keys 0 .. pos0 + t) v, scale = 1/sqrt(hd)
//   pos0 is a host value, or read on the device from pos0_dev (not NULL: a decoding step captured once in a CUDA
//   graph and replayed at every position; shared memory is then sized for the whole cache, S keys).
// kv_cache_write puts the new rows' k, v [B, T, KVH, hd] at positions pos0 .. pos0 + T - 1 of the cache (same pos0).
// GQA: query head h reads kv head h / (H / KVH). hd % 8 == 0, hd <= 128 (as core/attention.cuh).
//
// One CTA of KVA_THREADS threads per (head, row). Scores in shared memory, fp32 throughout, deterministic (fixed
// reduction orders): (1) thread i takes keys i, i + 128, ...: a full dot product per key from 16-byte loads of its
// key row; (2) block max, exp, block sum; (3) thread (g, c) accumulates p_j v_j over the 8 dims of chunk c (16-byte
// loads) for keys j = g mod G (G = 128 / (hd/8) key groups), then the G partial sums are added in group order.
// Shared memory: (pos0 + T) floats of scores + hd floats of q + 1024 floats of partial sums, so the context is
// bounded by the device's shared memory per block: kv_attention_max_context() (~55k positions on sm_90).
// Work per CTA is one pass over its keys: at decode sizes (B * H CTAs, a few thousand keys) it is bound by latency,
// not bytes; fine next to the weight reads of a decoding step (see dev/RESULTS.md for measured step times).
#ifndef SLLM_KV_ATTENTION_CUH
#define SLLM_KV_ATTENTION_CUH

#include <math.h>

#include "kernel_utils.cuh"

#define KVA_THREADS 128
#define KVA_PART_FLOATS 1024  // G * hd <= 128 / (hd / 8) * hd = 1024

static __global__ void __launch_bounds__(KVA_THREADS)
kv_attention_kernel(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc, int T, int pos0, const int *pos0_dev,
                    int S, int H, int KVH, int hd, float scale) {
    extern __shared__ float kva_smem[];
    const int h = blockIdx.x, row = blockIdx.y;  // row = b * T + t
    const int b = row / T, t = row % T;
    const int n = (pos0_dev ? *pos0_dev : pos0) + t + 1;  // keys 0 .. pos0 + t
    const int kvh = h / (H / KVH);
    float *qs = kva_smem, *part = qs + 128, *sc = part + KVA_PART_FLOATS;
    __shared__ float red[32];
    const bf16 *qr = q + ((size_t)row * H + h) * hd;
    for (int d = threadIdx.x; d < hd; d += KVA_THREADS) qs[d] = __bfloat162float(qr[d]);
    __syncthreads();
    const size_t kstride = (size_t)KVH * hd;
    const bf16 *kbase = kc + ((size_t)b * S * KVH + kvh) * hd, *vbase = vc + ((size_t)b * S * KVH + kvh) * hd;
    // (1) scores
    float mx = -INFINITY;
    for (int j = threadIdx.x; j < n; j += KVA_THREADS) {
        const bf16 *kr = kbase + (size_t)j * kstride;
        float s = 0.0f;
        for (int d = 0; d < hd; d += 8) {
            float kv[8];
            load8_bf16(kr + d, kv);
#pragma unroll
            for (int e = 0; e < 8; e++) s += qs[d + e] * kv[e];
        }
        s *= scale;
        sc[j] = s;
        mx = fmaxf(mx, s);
    }
    // (2) softmax weights (unnormalised) and their sum
    mx = block_max(mx, red);
    float sum = 0.0f;
    for (int j = threadIdx.x; j < n; j += KVA_THREADS) {
        float p = __expf(sc[j] - mx);
        sc[j] = p;
        sum += p;
    }
    sum = block_sum(sum, red);  // its barriers also order the sc writes before the reads below
    // (3) p v over key groups, then the groups' sums in order
    const int C = hd / 8, G = KVA_THREADS / C;
    const int c = threadIdx.x % C, g = threadIdx.x / C;
    if (g < G) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int j = g; j < n; j += G) {
            float vv[8];
            load8_bf16(vbase + (size_t)j * kstride + 8 * c, vv);
            const float p = sc[j];
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] += p * vv[e];
        }
#pragma unroll
        for (int e = 0; e < 8; e++) part[g * hd + 8 * c + e] = acc[e];
    }
    __syncthreads();
    const float inv = 1.0f / sum;
    bf16 *orow = out + ((size_t)row * H + h) * hd;
    for (int d = threadIdx.x; d < hd; d += KVA_THREADS) {
        float o = 0.0f;
        for (int gg = 0; gg < G; gg++) o += part[gg * hd + d];
        orow[d] = __float2bfloat16_rn(o * inv);
    }
}

static inline size_t kv_attention_smem_bytes(int n_keys) {
    return sizeof(float) * (128 + KVA_PART_FLOATS + (size_t)n_keys);
}
// The longest context (keys per query) this device's shared memory per block allows.
static inline int kv_attention_max_context(void) {
    int dev = 0, optin = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return (int)(optin / sizeof(float)) - 128 - KVA_PART_FLOATS - 64;  // 64: the static `red` and slack
}

// Returns 0, or -1 with a message in err when the arguments cannot run (nothing launched).
static inline int kv_attention_check(int B, int T, int pos0, int S, int H, int KVH, int hd, char *err, size_t n) {
    if (B < 1 || T < 1 || pos0 < 0 || H < 1 || KVH < 1 || H % KVH) {
        snprintf(err, n, "kv_attention: need B, T, H, KVH >= 1, pos0 >= 0 and H %% KVH == 0 (B=%d T=%d pos0=%d H=%d KVH=%d)",
                 B, T, pos0, H, KVH);
        return -1;
    }
    if (hd < 8 || hd > 128 || hd % 8) {
        snprintf(err, n, "kv_attention: head_dim=%d must be a multiple of 8 in [8, 128]", hd);
        return -1;
    }
    if (pos0 + T > S) {
        snprintf(err, n, "kv_attention: positions up to %d do not fit the cache of S=%d positions", pos0 + T, S);
        return -1;
    }
    if (pos0 + T > kv_attention_max_context()) {
        snprintf(err, n, "kv_attention: %d keys exceed the %d this GPU's shared memory holds per query", pos0 + T,
                 kv_attention_max_context());
        return -1;
    }
    return 0;
}

static inline void kv_attention(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc, int B, int T, int pos0,
                                const int *pos0_dev, int S, int H, int KVH, int hd, cudaStream_t stream) {
    char err[256];
    // with pos0_dev the position is only known on the device: check (and size shared memory) for a full cache
    if (kv_attention_check(B, T, pos0_dev ? S - T : pos0, S, H, KVH, hd, err, sizeof err)) SLLM_FATAL("%s", err);
    if (((uintptr_t)q | (uintptr_t)kc | (uintptr_t)vc) & 15) SLLM_FATAL("kv_attention: q, kc, vc must be 16-byte aligned");
    const size_t smem = kv_attention_smem_bytes(pos0_dev ? S : pos0 + T);
    static size_t smem_set = 48 * 1024;  // the default limit; raised once as needed
    if (smem > smem_set) {
        cudaCheck(cudaFuncSetAttribute(kv_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_set = smem;
    }
    dim3 grid((unsigned)H, (unsigned)(B * T));
    kv_attention_kernel<<<grid, KVA_THREADS, smem, stream>>>(out, q, kc, vc, T, pos0, pos0_dev, S, H, KVH, hd,
                                                             1.0f / sqrtf((float)hd));
    cudaCheckLaunch();
}

// The new rows into the cache: kc[b, pos0 + t] = k[b, t], vc likewise (rows of KV = KVH * hd elements, KV % 8 == 0).
// One thread per 16 bytes. The caller guarantees pos0 + T <= S (infer_forward checks its host-side position).
static __global__ void kv_cache_write_kernel(bf16 *kc, bf16 *vc, const bf16 *k, const bf16 *v, int T, int pos0,
                                      const int *pos0_dev, int S, int KV, size_t n16) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= 2 * n16) return;
    const int which = i >= n16;  // 0: k, 1: v
    if (which) i -= n16;
    const size_t per_row = (size_t)KV / 8, row = i / per_row, c = i % per_row;  // row = b * T + t
    const size_t b = row / T, t = row % T, p = (size_t)(pos0_dev ? *pos0_dev : pos0) + t;
    const int4 *src = reinterpret_cast<const int4 *>(which ? v : k) + i;
    int4 *dst = reinterpret_cast<int4 *>((which ? vc : kc) + (b * S + p) * KV) + c;
    *dst = *src;
}
static inline void kv_cache_write(bf16 *kc, bf16 *vc, const bf16 *k, const bf16 *v, int B, int T, int pos0,
                                  const int *pos0_dev, int S, int KV, cudaStream_t stream) {
    if (KV % 8 || (((uintptr_t)kc | (uintptr_t)vc | (uintptr_t)k | (uintptr_t)v) & 15))
        SLLM_FATAL("kv_cache_write: KV=%d must be a multiple of 8 and the buffers 16-byte aligned", KV);
    const size_t n16 = (size_t)B * T * KV / 8;
    kv_cache_write_kernel<<<(unsigned)ceil_div_sz(2 * n16, 256), 256, 0, stream>>>(kc, vc, k, v, T, pos0, pos0_dev, S,
                                                                                   KV, n16);
    cudaCheckLaunch();
}

#endif  // SLLM_KV_ATTENTION_CUH
