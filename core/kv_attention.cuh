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
#include <string.h>

#include "cuda_common.cuh"
#include "kernel_utils.cuh"
#include "ktrace.cuh"

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

// ---- decoding steps (T = 1): the keys split over CTAs ----
// kv_attention's CTA per (head, row) walks all of a row's keys with 128 threads, and every step of it waits on the
// one before (q, keys, max, sum, values): at a few hundred keys that is ~10 us per layer of a decoding step, longer
// with the context. Here the keys are cut into blocks of kvd_keys(hd), one CTA each (grid: heads x rows x
// ceil(S / kvd_keys(hd)); blocks past the row's keys exit at once):
//   - before waiting for the kernel before it (programmatic dependent launch), a CTA loads the keys and values it owns
//     that earlier steps wrote (all but the newest) into registers: only q and the newest key and value come from the
//     q/k/v kernel before it, so after the wait no load but those waits on memory;
//   - thread t scores key j0 + t (a full dot product, fp32), then block max, exp, block sum, and p v over the block's
//     keys in key groups (as kv_attention), giving the block's (max m_s, sum l_s, acc_s[hd]);
//   - one block: out = acc / l directly; several: each writes its (m_s, l_s, acc_s) to `part`, and the last block to
//     finish (a ticket per (row, head)) combines them in block order: out = sum_s acc_s e^(m_s - M) / sum_s l_s
//     e^(m_s - M), M = max_s m_s. Deterministic (fixed orders); the same function as kv_attention up to fp32 rounding.
// Work space (kv_decode_work_alloc): part [B, H, splits, hd + 2] fp32, tickets [B, H] int (zero between calls).
// Keys per CTA (its threads) and the register arrays' size CMAX >= hd / 8 (a thread's key chunks; also bounds the keys
// a thread weighs in p v, ceil(KEYS / G)), by head dim: hd <= 64 keeps 2 x 8 chunks in 104 registers, so 512 threads
// fit the register file and one block covers up to 512 positions (no partials, no ticket); hd <= 128 keeps 2 x 16 and
// 256 threads.
#define KVD_KEYS_SMALL 512
#define KVD_KEYS_LARGE 256
static inline int kvd_keys(int hd) { return hd <= 64 ? KVD_KEYS_SMALL : KVD_KEYS_LARGE; }
static inline int kvd_splits(int S, int hd) { return (S + kvd_keys(hd) - 1) / kvd_keys(hd); }
// every C = hd / 8 <= CMAX gives each p v thread at most CMAX keys (G = KEYS / C groups)
static constexpr bool kvd_keys_fit(int KEYS, int CMAX, int C) {
    return C > CMAX || ((KEYS + KEYS / C - 1) / (KEYS / C) <= CMAX && kvd_keys_fit(KEYS, CMAX, C + 1));
}
static_assert(kvd_keys_fit(KVD_KEYS_SMALL, 8, 1) && kvd_keys_fit(KVD_KEYS_LARGE, 16, 1),
              "KVD_KEYS_*: a p v thread would weigh more keys than its register array holds");

typedef struct {
    float *part;
    int *ticket;
    int B, H, S, hd, splits;
} KvDecodeWork;

static inline void kv_decode_work_alloc(KvDecodeWork *w, int B, int H, int S, int hd) {
    w->B = B; w->H = H; w->S = S; w->hd = hd; w->splits = kvd_splits(S, hd);
    cudaCheck(cudaMalloc((void **)&w->part, sizeof(float) * (size_t)B * H * w->splits * (hd + 2)));
    cudaCheck(cudaMalloc((void **)&w->ticket, sizeof(int) * (size_t)B * H));
    cudaCheck(cudaMemset(w->ticket, 0, sizeof(int) * (size_t)B * H));
}
static inline void kv_decode_work_free(KvDecodeWork *w) {
    if (w->part) cudaCheck(cudaFree(w->part));
    if (w->ticket) cudaCheck(cudaFree(w->ticket));
    memset(w, 0, sizeof *w);
}
static inline size_t kv_decode_work_bytes(int B, int H, int S, int hd) {
    return sizeof(float) * (size_t)B * H * kvd_splits(S, hd) * (hd + 2) + sizeof(int) * (size_t)B * H;
}

template <int KEYS, int CMAX>
static __global__ void __launch_bounds__(KEYS)
kv_decode_attention_kernel(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc, int pos0, const int *pos0_dev,
                           int S, int H, int KVH, int hd, float scale, float *part, int *ticket, int splits KT_PARAM) {
    KT_SCOPE(kt_slot);
    __shared__ float qs[128], ps[KEYS], red[32];
    __shared__ float acc_s[8 * KEYS];  // G * hd <= KEYS / C * 8 C
    __shared__ int s_last;
    const int h = blockIdx.x, b = blockIdx.y, split = blockIdx.z, t = threadIdx.x;
    const int n = (pos0_dev ? *pos0_dev : pos0) + 1;  // keys 0 .. pos (the newest written by the kernel before)
    const int j0 = split * KEYS;
    if (j0 >= n) return;
    const int live = (n + KEYS - 1) / KEYS, C = hd / 8, kvh = h / (H / KVH), j = j0 + t;
    const size_t kstride = (size_t)KVH * hd;
    const bf16 *kbase = kc + ((size_t)b * S * KVH + kvh) * hd, *vbase = vc + ((size_t)b * S * KVH + kvh) * hd;
    uint4 kr[CMAX];
    const uint4 *krow = reinterpret_cast<const uint4 *>(kbase + (size_t)j * kstride);
    if (j < n - 1) {  // written by earlier steps: independent of the kernel before
#pragma unroll
        for (int c = 0; c < CMAX; c++)
            if (c < C) kr[c] = __ldg(krow + c);
    }
    // the values this thread weighs in p v (thread (g, c): dims 8c .. 8c + 7 of keys g, g + G, ..., < nk),
    // those written by earlier steps likewise before the wait
    const int G = KEYS / C, c = t % C, g = t / C, nk = min(KEYS, n - j0);
    uint4 vr[CMAX];
#pragma unroll
    for (int i = 0; i < CMAX; i++) {
        const int jj = g + i * G;
        if (g < G && jj < nk && j0 + jj < n - 1)
            vr[i] = __ldg(reinterpret_cast<const uint4 *>(vbase + (size_t)(j0 + jj) * kstride) + c);
    }
    pdl_launch_dependents();
    pdl_wait();
    KT_WAITED();
    if (j == n - 1) {
#pragma unroll
        for (int cc = 0; cc < CMAX; cc++)
            if (cc < C) kr[cc] = *(krow + cc);  // plain load: written by the kernel before
    }
    const int jn = n - 1 - j0;  // the newest key's place in this block
    if (g < G && jn >= g && jn < nk && (jn - g) % G == 0) {  // its value is this thread's: written by the kernel before
        const int i = (jn - g) / G;
#pragma unroll
        for (int ii = 0; ii < CMAX; ii++)
            if (ii == i) vr[ii] = *(reinterpret_cast<const uint4 *>(vbase + (size_t)(n - 1) * kstride) + c);
    }
    const bf16 *qr = q + ((size_t)b * H + h) * hd;
    for (int d = t; d < hd; d += KEYS) qs[d] = __bfloat162float(qr[d]);
    __syncthreads();
    float sc = -INFINITY;
    if (j < n) {
        float a = 0.0f;
#pragma unroll
        for (int c = 0; c < CMAX; c++)
            if (c < C) {
                const __nv_bfloat162 *p2 = reinterpret_cast<const __nv_bfloat162 *>(&kr[c]);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float2 f = __bfloat1622float2(p2[e]);
                    a += qs[8 * c + 2 * e] * f.x;
                    a += qs[8 * c + 2 * e + 1] * f.y;
                }
            }
        sc = a * scale;
    }
    const float mx = block_max(sc, red);
    const float p = j < n ? __expf(sc - mx) : 0.0f;
    const float sum = block_sum(p, red);  // its barriers also order the ps writes below after every read of red
    ps[t] = p;
    __syncthreads();
    // p v over key groups (thread (g, c): dims 8c .. 8c + 7 of keys g, g + G, ...), then the groups' sums in order
    if (g < G) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll
        for (int i = 0; i < CMAX; i++) {
            const int jj = g + i * G;
            if (jj < nk) {
                float vv[8];
                unpack8_bf16(vr[i], vv);
                const float pj = ps[jj];
#pragma unroll
                for (int e = 0; e < 8; e++) acc[e] += pj * vv[e];
            }
        }
#pragma unroll
        for (int e = 0; e < 8; e++) acc_s[g * hd + 8 * c + e] = acc[e];
    }
    __syncthreads();
    bf16 *orow = out + ((size_t)b * H + h) * hd;
    if (live == 1) {  // one block of keys: no partials
        const float inv = 1.0f / sum;
        for (int d = t; d < hd; d += KEYS) {
            float o = 0.0f;
            for (int gg = 0; gg < G; gg++) o += acc_s[gg * hd + d];
            orow[d] = __float2bfloat16_rn(o * inv);
        }
        return;
    }
    float *pp = part + ((size_t)b * H + h) * splits * (hd + 2);
    for (int d = t; d < hd; d += KEYS) {
        float o = 0.0f;
        for (int gg = 0; gg < G; gg++) o += acc_s[gg * hd + d];
        pp[(size_t)split * (hd + 2) + 2 + d] = o;
    }
    if (t == 0) { pp[(size_t)split * (hd + 2)] = mx; pp[(size_t)split * (hd + 2) + 1] = sum; }
    __threadfence();  // the partials are visible before the ticket is taken
    __syncthreads();
    if (t == 0) s_last = atomicAdd(ticket + (size_t)b * H + h, 1) == live - 1;
    __syncthreads();
    if (!s_last) return;
    __threadfence();
    float M = -INFINITY;
    for (int s2 = 0; s2 < live; s2++) M = fmaxf(M, __ldcg(pp + (size_t)s2 * (hd + 2)));
    for (int d = t; d < hd; d += KEYS) {
        float L = 0.0f, o = 0.0f;
        for (int s2 = 0; s2 < live; s2++) {
            const float *ps2 = pp + (size_t)s2 * (hd + 2);
            const float wgt = __expf(__ldcg(ps2) - M);
            L += __ldcg(ps2 + 1) * wgt;
            o += __ldcg(ps2 + 2 + d) * wgt;
        }
        orow[d] = __float2bfloat16_rn(o / L);
    }
    if (t == 0) ticket[(size_t)b * H + h] = 0;  // every live block has taken its ticket: ready for the next call
}

// One decoding step's attention: q [B, H, hd] (T = 1) over keys 0 .. pos of each sequence's cache (the newest key and
// value already written), out [B, H, hd]. pos = pos0, or read on the device from pos0_dev (not NULL: a graph replayed
// at every position). A programmatic dependent launch. w from kv_decode_work_alloc(B, H, S, hd).
static inline void kv_decode_attention(bf16 *out, const bf16 *q, const bf16 *kc, const bf16 *vc, int B, int pos0,
                                       const int *pos0_dev, int S, int H, int KVH, int hd, KvDecodeWork *w,
                                       cudaStream_t stream) {
    char err[256];
    if (kv_attention_check(B, 1, pos0_dev ? 0 : pos0, S, H, KVH, hd, err, sizeof err)) SLLM_FATAL("%s", err);
    if (B > w->B || H > w->H || S > w->S || hd != w->hd)
        SLLM_FATAL("kv_decode_attention: the work space (B=%d H=%d S=%d hd=%d) is smaller than the call (B=%d H=%d S=%d "
                   "hd=%d)", w->B, w->H, w->S, w->hd, B, H, S, hd);
    if (((uintptr_t)q | (uintptr_t)kc | (uintptr_t)vc) & 15) SLLM_FATAL("kv_decode_attention: q, kc, vc must be 16-byte aligned");
    const int keys = kvd_keys(hd);
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_launch_config(dim3((unsigned)H, (unsigned)B, (unsigned)kvd_splits(S, hd)),
                                                     dim3((unsigned)keys), 0, 1, &attr, stream);
    auto kernel = hd <= 64 ? kv_decode_attention_kernel<KVD_KEYS_SMALL, 8> : kv_decode_attention_kernel<KVD_KEYS_LARGE, 16>;
    cudaCheck(cudaLaunchKernelEx(&cfg, kernel, out, q, kc, vc, pos0, pos0_dev, S, H, KVH, hd, 1.0f / sqrtf((float)hd),
                                 w->part, w->ticket, w->splits KT_ARG(kt_take("kv_decode_attention"))));
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
