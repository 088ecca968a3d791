// twell/updown.cuh: fused up + down projection reading the gate in TwELL (layout: twell/format.h).
//
//   gated:     y[m,:] = sum over active n of  g[m,n] * (x[m,:] . Wu[n,:]) * WdT[n,:]
//   non-gated: y[m,:] = sum over active n of  g[m,n] * WdT[n,:]     (g = relu(x Wu^T) packed by the gate kernel)
//
//   tw  uint32 [M, F/C]   X [M, D] bf16   Wu [F, D] bf16 (nn.Linear layout)
//   WdT [F, D] bf16 = the down weight TRANSPOSED (nn.Linear down_proj.weight is [D, F]; WdT[n, :] = Wd[:, n])
//   Y   [M, D] bf16.  D % 8 == 0 and D <= 8192 here (the FFN API asks for D % 64 == 0).
//
// Rows whose TwELL is an overflow row (some tile count > slots) are SKIPPED (Y row not written): the
// dense fallback in twell/ffn.cuh writes them. All other rows are written fully.
//
// Design (better than one warp per token): one CTA of NT threads per token, thread i owns the 16-byte
// column chunks i, i+NT, ... (CH of them). The token's active list is compacted into shared memory
// (column, gate value) across tiles, then processed in groups of G neurons: all G Wu rows and G WdT
// rows are loaded at once (2*G*CH independent 16-byte loads in flight per thread), the G up dot
// products are reduced (warp butterfly, then a fixed-order sum over warps in shared memory: one
// __syncthreads per group, deterministic), h = g * u in fp32 (not rounded), y += h * WdT row in fp32.
// Products are fp32 FMAs of upcast bf16 values. Output rounded to bf16 (round to nearest) once.
// X, the TwELL row and Y are streamed (__ldcs/__stcs, evict-first) so that they do not push the weight
// rows (Wu + WdT = 46 MB at D 2048, F 5632: about the L2 size) out of L2.
#ifndef SLLM_TWELL_UPDOWN_CUH
#define SLLM_TWELL_UPDOWN_CUH

#include "cuda_common.cuh"
#include "twell/format.h"

__device__ __forceinline__ void twell_bf16x8_to_f32(const uint4 v, float f[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
}

// p[j] = this thread's partial dot of row j with x: sum over its chunks k and elements e of xf[k][e] * w[j][k][e]
// (fp32 FMAs of the upcast bf16 values, in order); the caller reduces p[j] over the threads.
template <int G, int CH>
__device__ __forceinline__ void twell_dot_rows(const uint4 (&w)[G][CH], const float (&xf)[CH][8], float (&p)[G]) {
#pragma unroll
    for (int j = 0; j < G; j++) {
        p[j] = 0.0f;
#pragma unroll
        for (int k = 0; k < CH; k++) {
            float f[8];
            twell_bf16x8_to_f32(w[j][k], f);
#pragma unroll
            for (int e = 0; e < 8; e++) p[j] = fmaf(xf[k][e], f[e], p[j]);
        }
    }
}

// acc[k][e] += h[j] * w[j][k][e] over the G rows j (fp32 FMAs of the upcast bf16 values, j in order).
template <int G, int CH>
__device__ __forceinline__ void twell_accumulate_rows(const uint4 (&w)[G][CH], const float (&h)[G],
                                                      float (&acc)[CH][8]) {
#pragma unroll
    for (int j = 0; j < G; j++) {
#pragma unroll
        for (int k = 0; k < CH; k++) {
            float f[8];
            twell_bf16x8_to_f32(w[j][k], f);
#pragma unroll
            for (int e = 0; e < 8; e++) acc[k][e] = fmaf(h[j], f[e], acc[k][e]);
        }
    }
}

// Writes this thread's 16-byte chunks ci = threadIdx.x + k * NT (< nchunks) of an output row: acc rounded to
// bf16 (round to nearest), streamed (evict-first).
template <int NT, int CH>
__device__ __forceinline__ void twell_store_row_bf16(const float (&acc)[CH][8], bf16 *yrow, int nchunks) {
#pragma unroll
    for (int k = 0; k < CH; k++) {
        const int ci = threadIdx.x + k * NT;
        if (ci < nchunks) {
            uint4 o;
            uint32_t *ow = reinterpret_cast<uint32_t *>(&o);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                __nv_bfloat162 b = __floats2bfloat162_rn(acc[k][2 * i], acc[k][2 * i + 1]);
                ow[i] = *reinterpret_cast<uint32_t *>(&b);
            }
            __stcs(reinterpret_cast<uint4 *>(yrow) + ci, o);
        }
    }
}

// Compacts one TwELL row (tiles x words uint32, read evict-first) with a block of NT threads into shared
// memory: s_col[i] / s_g[i] = global column / gate value of the row's i-th active unit, column order.
// s_off: tiles + 1 ints of scratch (exclusive scan of the tile counts by warp 0). Returns the number of
// active units, or -1 if some tile overflows (count > slots: the dense fallback computes the row). Every
// thread of the block must call it (it contains __syncthreads); the result is the same in every thread.
template <int NT>
__device__ __forceinline__ int twell_block_compact_row(const uint32_t *__restrict__ trow, int tiles, int words,
                                                       int *s_off, int *s_col, float *s_g) {
    __shared__ int s_ovf;
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, slots = words - 1, row_words = tiles * words;
    // 1. tile counts, overflow test, exclusive scan (warp 0).
    for (int t = tid; t < tiles; t += NT) s_off[t] = (int)__ldcs(trow + (size_t)t * words);
    __syncthreads();
    if (warp == 0) {
        int carry = 0, ovf = 0;
        for (int base = 0; base < tiles; base += 32) {
            int t = base + lane;
            int c = t < tiles ? s_off[t] : 0;
            if (c > slots) ovf = 1;
            const int incl = warp_scan_incl(c);
            if (t < tiles) s_off[t] = carry + incl - c;
            carry += __shfl_sync(0xffffffffu, incl, 31);
        }
        ovf = __any_sync(0xffffffffu, ovf);
        if (lane == 0) { s_off[tiles] = carry; s_ovf = ovf; }
    }
    __syncthreads();
    if (s_ovf) return -1;
    // 2. compact (global column, gate value) into shared memory, column order.
    for (int w = tid; w < row_words; w += NT) {
        int t = w / words, k = w - t * words;
        if (k >= 1 && k <= s_off[t + 1] - s_off[t]) {
            uint32_t word = __ldcs(trow + w);
            int idx = s_off[t] + k - 1;
            s_col[idx] = t * TWELL_TILE + (int)(word & 0xFFu);
            s_g[idx] = __uint_as_float(word & 0xFFFF0000u);
        }
    }
    __syncthreads();
    return s_off[tiles];
}

template <int NT, int CH, int G, bool GATED, bool FENCE>
__global__ void __launch_bounds__(NT)
twell_updown_kernel(const uint32_t *__restrict__ tw, const bf16 *__restrict__ X, const bf16 *__restrict__ Wu,
                    const bf16 *__restrict__ WdT, bf16 *__restrict__ Y, int M, int D, int F, int words, int ldw,
                    unsigned long long *__restrict__ nnz_sparse) {
    constexpr int NW = NT / 32;
    extern __shared__ __align__(16) unsigned char twell_smem[];
    const int tiles = F / TWELL_TILE, slots = words - 1, row_words = tiles * words;
    int *s_off = reinterpret_cast<int *>(twell_smem);  // [tiles + 1]
    int *s_col = s_off + tiles + 1;                    // [tiles * slots]
    float *s_g = reinterpret_cast<float *>(s_col + tiles * slots);
    __shared__ float s_red[2][NW][G];

    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int row = blockIdx.x;
    const int total = twell_block_compact_row<NT>(tw + (size_t)row * row_words, tiles, words, s_off, s_col, s_g);
    if (total < 0) return;  // whole block: the dense fallback computes this row
    if (nnz_sparse && tid == 0 && total > 0) atomicAdd(nnz_sparse, (unsigned long long)total);
    const int nchunks = D / 8;

    float xf[CH][8], acc[CH][8];
#pragma unroll
    for (int k = 0; k < CH; k++) {
#pragma unroll
        for (int e = 0; e < 8; e++) { acc[k][e] = 0.0f; xf[k][e] = 0.0f; }
        const int ci = tid + k * NT;
        if (GATED && ci < nchunks)
            twell_bf16x8_to_f32(__ldcs(reinterpret_cast<const uint4 *>(X + (size_t)row * D + (size_t)ci * 8)), xf[k]);
    }

    int buf = 0;
    for (int base = 0; base < total; base += G) {
        uint4 wu[G][CH], wd[G][CH];
        float g[G];
#pragma unroll
        for (int j = 0; j < G; j++) {
            const bool valid = base + j < total;
            const int col = valid ? s_col[base + j] : 0;
            g[j] = valid ? s_g[base + j] : 0.0f;
#pragma unroll
            for (int k = 0; k < CH; k++) {
                const int ci = tid + k * NT;
                wu[j][k] = make_uint4(0, 0, 0, 0);
                wd[j][k] = make_uint4(0, 0, 0, 0);
                if (valid && ci < nchunks) {
                    if (GATED) wu[j][k] = __ldg(reinterpret_cast<const uint4 *>(Wu + (size_t)col * ldw + (size_t)ci * 8));
                    wd[j][k] = __ldg(reinterpret_cast<const uint4 *>(WdT + (size_t)col * ldw + (size_t)ci * 8));
                }
            }
        }
        if (FENCE) {  // all 2*G*CH loads must have landed here: ptxas issues them back to back (max in flight)
#pragma unroll
            for (int j = 0; j < G; j++)
#pragma unroll
                for (int k = 0; k < CH; k++)
                    asm volatile("" ::"r"(wu[j][k].x), "r"(wu[j][k].y), "r"(wu[j][k].z), "r"(wu[j][k].w),
                                 "r"(wd[j][k].x), "r"(wd[j][k].y), "r"(wd[j][k].z), "r"(wd[j][k].w));
        }
        float h[G];
        if (GATED) {
            float p[G];
            twell_dot_rows<G, CH>(wu, xf, p);
#pragma unroll
            for (int j = 0; j < G; j++) p[j] = warp_sum(p[j]);
            if (lane == 0) {
#pragma unroll
                for (int j = 0; j < G; j++) s_red[buf][warp][j] = p[j];
            }
            __syncthreads();
#pragma unroll
            for (int j = 0; j < G; j++) {
                float u = 0.0f;
#pragma unroll
                for (int w = 0; w < NW; w++) u += s_red[buf][w][j];
                h[j] = g[j] * u;
            }
            buf ^= 1;
        } else {
#pragma unroll
            for (int j = 0; j < G; j++) h[j] = g[j];
        }
        twell_accumulate_rows<G, CH>(wd, h, acc);
    }
    twell_store_row_bf16<NT, CH>(acc, Y + (size_t)row * D, nchunks);
}

// Variants of the up/down kernel: block threads NT per token and neurons per group G. The 16-byte
// chunks per thread CH follow from D (smallest of 1, 2, 4, 8 with NT * CH * 8 >= D); G is capped at 2
// for CH 4 and at 1 for CH 8 (registers), so a variant takes D <= NT * 64 (NT 32: D <= 2048, NT 64:
// D <= 4096, NT >= 128: every D <= 8192). Measured on an H200 (M 65536, D 2048, nnz 29, ms):
// 128_G4 2.60, 256_G4 2.45, 128_G8 2.43, 256_G8 2.52, 128_G2 1.94 (best), fenced ~ unfenced.
enum {
    TWELL_UPDOWN_AUTO = 0,          // = TWELL_UPDOWN_DEFAULT
    TWELL_UPDOWN_128_G4 = 1,
    TWELL_UPDOWN_256_G4 = 2,
    TWELL_UPDOWN_128_G8 = 3,
    TWELL_UPDOWN_256_G8 = 4,
    TWELL_UPDOWN_128_G2 = 5,        // the default (fastest measured)
    TWELL_UPDOWN_128_G4_FENCE = 6,  // as 128_G4 with all loads of a group forced in flight together
    TWELL_UPDOWN_256_G8_FENCE = 7,
    TWELL_UPDOWN_128_G1 = 8,
    TWELL_UPDOWN_64_G2 = 9,         // 2 warps per token: more CTAs per SM, cheaper reductions
    TWELL_UPDOWN_64_G1 = 10,
    TWELL_UPDOWN_256_G2 = 11,
    TWELL_UPDOWN_32_G1 = 12,        // one warp per token (the paper's shape; many registers)
    TWELL_UPDOWN_256_G1 = 13,
    TWELL_UPDOWN_SLICED = 14,       // twell/sliced.cuh (D-sliced, tensor cores): needs the FFN workspace, run
                                    // through twell_ffn_updown; selectable only (slower, twell/SLICED.md)
    TWELL_UPDOWN_SPLIT = 15,        // twell/updown_split.cuh: the up and the down as two token-major kernels; gated
                                    // only, needs the FFN workspace (pairs buffer): run through twell_ffn_updown.
                                    // The FFN's default for gated layers (TWELL_UPDOWN_DEFAULT_GATED).
    TWELL_UPDOWN_NUM_VARIANTS = 16,
};
#define TWELL_UPDOWN_DEFAULT TWELL_UPDOWN_128_G2        // the fused kernel: non-gated layers, twell_updown_launch
#define TWELL_UPDOWN_DEFAULT_GATED TWELL_UPDOWN_SPLIT   // gated layers through the FFN workspace (run 34: 1.76 vs
                                                        // 1.93 ms for nt128_g2 at nnz 29, M 65536)

typedef struct { int nt, g, fence; const char *name; } TwellUpdownVariantInfo;

static inline TwellUpdownVariantInfo twell_updown_variant_info(int v) {
    switch (v) {
    case TWELL_UPDOWN_AUTO: return {0, 0, 0, "auto"};
    case TWELL_UPDOWN_128_G4: return {128, 4, 0, "nt128_g4"};
    case TWELL_UPDOWN_256_G4: return {256, 4, 0, "nt256_g4"};
    case TWELL_UPDOWN_128_G8: return {128, 8, 0, "nt128_g8"};
    case TWELL_UPDOWN_256_G8: return {256, 8, 0, "nt256_g8"};
    case TWELL_UPDOWN_128_G2: return {128, 2, 0, "nt128_g2"};
    case TWELL_UPDOWN_128_G4_FENCE: return {128, 4, 1, "nt128_g4_fence"};
    case TWELL_UPDOWN_256_G8_FENCE: return {256, 8, 1, "nt256_g8_fence"};
    case TWELL_UPDOWN_128_G1: return {128, 1, 0, "nt128_g1"};
    case TWELL_UPDOWN_64_G2: return {64, 2, 0, "nt64_g2"};
    case TWELL_UPDOWN_64_G1: return {64, 1, 0, "nt64_g1"};
    case TWELL_UPDOWN_256_G2: return {256, 2, 0, "nt256_g2"};
    case TWELL_UPDOWN_32_G1: return {32, 1, 0, "nt32_g1"};
    case TWELL_UPDOWN_256_G1: return {256, 1, 0, "nt256_g1"};
    case TWELL_UPDOWN_SLICED: return {0, 0, 0, "sliced"};
    case TWELL_UPDOWN_SPLIT: return {0, 0, 0, "split"};
    default: return {-1, 0, 0, "?"};
    }
}

static inline const char *twell_updown_variant_name(int v) { return twell_updown_variant_info(v).name; }

static inline int twell_updown_is_split(int v) { return v == TWELL_UPDOWN_SPLIT; }
static inline int twell_split_supports(int D) { return D % 8 == 0 && D <= 8192; }

// 1 if variant v (AUTO resolved) can run with this D (D % 8 == 0, D <= 8192 assumed).
// (TWELL_UPDOWN_SLICED: D % 64 == 0 here; F and shared memory are checked by twell_sliced_supports.)
static inline int twell_updown_variant_supports(int v, int D) {
    if (v == TWELL_UPDOWN_AUTO) v = TWELL_UPDOWN_DEFAULT;
    if (v == TWELL_UPDOWN_SLICED) return D % 64 == 0;
    if (twell_updown_is_split(v)) return twell_split_supports(D);
    TwellUpdownVariantInfo in = twell_updown_variant_info(v);
    return in.nt > 0 && D <= in.nt * 64;
}

// win (may be NULL): an L2 access policy window attached to this launch only (cudaLaunchKernelEx launch
// attribute: works on any stream, nothing to restore). If that launch is refused, a warning is printed,
// the kernel is launched without it and *win_failed is set.
template <int NT, int CH, int G, bool GATED, bool FENCE>
static inline void twell_updown_launch_t(const uint32_t *tw, const bf16 *X, const bf16 *Wu, const bf16 *WdT, bf16 *Y,
                                         int M, int D, int F, int words, int ldw, const cudaAccessPolicyWindow *win,
                                         int *win_failed, unsigned long long *nnz_sparse, cudaStream_t stream) {
    const int tiles = F / TWELL_TILE;
    size_t smem = sizeof(int) * (size_t)(tiles + 1) + (sizeof(int) + sizeof(float)) * (size_t)tiles * (words - 1);
    if (smem > 48 * 1024)
        cudaCheck(cudaFuncSetAttribute(twell_updown_kernel<NT, CH, G, GATED, FENCE>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    if (win) {
        cudaLaunchConfig_t cfg = {};
        cfg.gridDim = dim3((unsigned)M);
        cfg.blockDim = dim3(NT);
        cfg.dynamicSmemBytes = smem;
        cfg.stream = stream;
        cudaLaunchAttribute attr[1] = {};
        attr[0].id = cudaLaunchAttributeAccessPolicyWindow;
        attr[0].val.accessPolicyWindow = *win;
        cfg.attrs = attr;
        cfg.numAttrs = 1;
        cudaError_t e = cudaLaunchKernelEx(&cfg, twell_updown_kernel<NT, CH, G, GATED, FENCE>, tw, X, Wu, WdT, Y, M, D,
                                           F, words, ldw, nnz_sparse);
        if (e == cudaSuccess) return;
        fprintf(stderr, "warning: twell_updown: launch with an L2 access policy window failed (%s); launching "
                        "without it\n", cudaGetErrorString(e));
        (void)cudaGetLastError();
        if (win_failed) *win_failed = 1;
    }
    twell_updown_kernel<NT, CH, G, GATED, FENCE><<<M, NT, smem, stream>>>(tw, X, Wu, WdT, Y, M, D, F, words, ldw,
                                                                          nnz_sparse);
    cudaCheckLaunch();
}

// CH from D; G capped for large CH (see above). The caller has checked twell_updown_variant_supports.
template <int NT, int G, bool GATED, bool FENCE>
static inline void twell_updown_launch_nt(const uint32_t *tw, const bf16 *X, const bf16 *Wu, const bf16 *WdT, bf16 *Y,
                                          int M, int D, int F, int words, int ldw, const cudaAccessPolicyWindow *win,
                                          int *win_failed, unsigned long long *nnz_sparse, cudaStream_t stream) {
    const int nchunks = D / 8;
#define TWELL_UD_ARGS tw, X, Wu, WdT, Y, M, D, F, words, ldw, win, win_failed, nnz_sparse, stream
    if (nchunks <= NT) twell_updown_launch_t<NT, 1, G, GATED, FENCE>(TWELL_UD_ARGS);
    else if (nchunks <= 2 * NT) twell_updown_launch_t<NT, 2, G, GATED, FENCE>(TWELL_UD_ARGS);
    else if (nchunks <= 4 * NT) twell_updown_launch_t<NT, 4, (G < 2 ? G : 2), GATED, FENCE>(TWELL_UD_ARGS);
    else twell_updown_launch_t<NT, 8, 1, GATED, FENCE>(TWELL_UD_ARGS);
#undef TWELL_UD_ARGS
}

// Weights: row n of the up weight at Wu + n * ldw, row n of the transposed down weight at WdT + n * ldw.
// Separate [F, D] matrices: ldw = D. Interleaved [F, 2, D] (twell_interleave_weights): Wu = Wi,
// WdT = Wi + D, ldw = 2 D (up row and down row of a neuron adjacent: one 8 KB span per neuron).
// Returns TWELL_OK or TWELL_ERR_SHAPE / TWELL_ERR_ARG (message printed) if the variant cannot take D.
template <bool GATED>
static inline int twell_updown_launch_g(int variant, const uint32_t *tw, const bf16 *X, const bf16 *Wu,
                                        const bf16 *WdT, int ldw, bf16 *Y, int M, int D, int F, int C,
                                        const cudaAccessPolicyWindow *win, int *win_failed,
                                        unsigned long long *nnz_sparse, cudaStream_t stream) {
    const int words = TWELL_TILE / C;
    if (M <= 0) return TWELL_OK;
    if (D % 8 != 0 || D > 8192) {
        fprintf(stderr, "error: twell_updown: D=%d must be a multiple of 8 and <= 8192\n", D);
        return TWELL_ERR_SHAPE;
    }
    if (ldw < D || ldw % 8 != 0) {
        fprintf(stderr, "error: twell_updown: weight row stride ldw=%d must be >= D=%d and a multiple of 8\n", ldw, D);
        return TWELL_ERR_ARG;
    }
    if (variant == TWELL_UPDOWN_AUTO) variant = TWELL_UPDOWN_DEFAULT;
    if (variant < 0 || variant >= TWELL_UPDOWN_NUM_VARIANTS) {
        fprintf(stderr, "error: twell_updown: unknown variant %d (expected 0..%d)\n", variant,
                TWELL_UPDOWN_NUM_VARIANTS - 1);
        return TWELL_ERR_ARG;
    }
    if (variant == TWELL_UPDOWN_SLICED) {
        fprintf(stderr, "error: twell_updown: the sliced variant needs its workspace: run it through twell_ffn_updown "
                        "(twell/ffn.cuh) or twell_sliced_updown (twell/sliced.cuh)\n");
        return TWELL_ERR_ARG;
    }
    if (twell_updown_is_split(variant)) {
        fprintf(stderr, "error: twell_updown: the split variants need their pairs buffer: run them through "
                        "twell_ffn_updown (twell/ffn.cuh) or twell_split_launch (twell/updown_split.cuh)\n");
        return TWELL_ERR_ARG;
    }
    if (!twell_updown_variant_supports(variant, D)) {
        fprintf(stderr, "error: twell_updown: variant %s needs D <= %d (got D=%d)\n",
                twell_updown_variant_name(variant), twell_updown_variant_info(variant).nt * 64, D);
        return TWELL_ERR_SHAPE;
    }
#define TWELL_UD(NT, G, FENCE) \
    twell_updown_launch_nt<NT, G, GATED, FENCE>(tw, X, Wu, WdT, Y, M, D, F, words, ldw, win, win_failed, nnz_sparse, \
                                                stream)
    switch (variant) {
    case TWELL_UPDOWN_128_G4: TWELL_UD(128, 4, false); break;
    case TWELL_UPDOWN_256_G4: TWELL_UD(256, 4, false); break;
    case TWELL_UPDOWN_128_G8: TWELL_UD(128, 8, false); break;
    case TWELL_UPDOWN_256_G8: TWELL_UD(256, 8, false); break;
    case TWELL_UPDOWN_128_G2: TWELL_UD(128, 2, false); break;
    case TWELL_UPDOWN_128_G4_FENCE: TWELL_UD(128, 4, true); break;
    case TWELL_UPDOWN_256_G8_FENCE: TWELL_UD(256, 8, true); break;
    case TWELL_UPDOWN_128_G1: TWELL_UD(128, 1, false); break;
    case TWELL_UPDOWN_64_G2: TWELL_UD(64, 2, false); break;
    case TWELL_UPDOWN_64_G1: TWELL_UD(64, 1, false); break;
    case TWELL_UPDOWN_256_G2: TWELL_UD(256, 2, false); break;
    case TWELL_UPDOWN_32_G1: TWELL_UD(32, 1, false); break;
    case TWELL_UPDOWN_256_G1: TWELL_UD(256, 1, false); break;
    }
#undef TWELL_UD
    return TWELL_OK;
}

// win / win_failed: optional L2 access policy window for this launch (NULL: none), see launch_t.
// nnz_sparse (may be NULL): += the active units of the rows computed (the non-overflow rows).
static inline int twell_updown_launch(int variant, int gated, const uint32_t *tw, const bf16 *X, const bf16 *Wu,
                                      const bf16 *WdT, int ldw, bf16 *Y, int M, int D, int F, int C,
                                      cudaStream_t stream, const cudaAccessPolicyWindow *win = NULL,
                                      int *win_failed = NULL, unsigned long long *nnz_sparse = NULL) {
    return gated
               ? twell_updown_launch_g<true>(variant, tw, X, Wu, WdT, ldw, Y, M, D, F, C, win, win_failed, nnz_sparse,
                                             stream)
               : twell_updown_launch_g<false>(variant, tw, X, Wu, WdT, ldw, Y, M, D, F, C, win, win_failed, nnz_sparse,
                                              stream);
}

// Interleaved weight layout: Wi [F, 2, D] with Wi[n, 0, :] = Wu[n, :] and Wi[n, 1, :] = WdT[n, :].
// Wu may be NULL (non-gated: the up half is left untouched). D % 8 == 0.
__global__ void twell_interleave_kernel(const bf16 *__restrict__ Wu, const bf16 *__restrict__ WdT, int F, int D,
                                        bf16 *__restrict__ Wi) {
    const int chunks = D / 8;
    const long long total = 2LL * F * chunks;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total;
         i += (long long)gridDim.x * blockDim.x) {
        const int c = (int)(i % chunks);
        const long long nh = i / chunks;  // n * 2 + half
        const int n = (int)(nh >> 1), half = (int)(nh & 1);
        const bf16 *src = half ? WdT : Wu;
        if (!src) continue;
        reinterpret_cast<uint4 *>(Wi)[i] = reinterpret_cast<const uint4 *>(src)[(size_t)n * chunks + c];
    }
}

static inline int twell_interleave_weights(const bf16 *Wu, const bf16 *WdT, int F, int D, bf16 *Wi,
                                           cudaStream_t stream) {
    if (!WdT || !Wi || F <= 0 || D <= 0 || D % 8 != 0 ||
        (((uintptr_t)Wu | (uintptr_t)WdT | (uintptr_t)Wi) & 15)) {
        fprintf(stderr, "error: twell_interleave_weights: need WdT, Wi non-NULL, 16-byte aligned, F > 0, "
                        "D %% 8 == 0 (F=%d D=%d)\n", F, D);
        return TWELL_ERR_ARG;
    }
    long long total = 2LL * F * (D / 8);
    long long blocks = CEIL_DIV(total, 256LL);
    if (blocks > 132LL * 32) blocks = 132LL * 32;
    twell_interleave_kernel<<<(int)blocks, 256, 0, stream>>>(Wu, WdT, F, D, Wi);
    cudaCheckLaunch();
    return TWELL_OK;
}

#endif  // SLLM_TWELL_UPDOWN_CUH
