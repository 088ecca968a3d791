// twell/updown.cuh: the token-major up/down pieces shared by the TwELL FFN's kernels, and the fused kernel of
// NON-GATED layers (the gate kernel ran on the up weight, so the up is done: only the down is left).
//
//   non-gated: y[m,:] = sum over active n of  g[m,n] * WdT[n,:]     (g = relu(x Wu^T) packed by the gate kernel)
//   tw  uint32 [M, F/C]   WdT [F, D] bf16 = the down weight TRANSPOSED (nn.Linear down_proj.weight is [D, F];
//   WdT[n, :] = Wd[:, n])   Y [M, D] bf16.  D % 8 == 0 and D <= 8192 here (the FFN API asks for D % 64 == 0).
//   (Gated layers: twell/updown_split.cuh, built from the pieces here.)
//
// Rows whose TwELL is an overflow row (some tile count > slots) are SKIPPED (Y row not written): the
// dense fallback in twell/ffn.cuh writes them. All other rows are written fully.
//
// Design: one CTA of 128 threads per token, thread i owns the 16-byte column chunks i, i+128, ... (CH of them).
// The token's active list is compacted into shared memory (column, gate value) across tiles
// (twell_block_compact_row), then processed G units at a time (G x CH independent 16-byte loads in flight per
// thread), y += g * WdT row in fp32 (fixed order: deterministic). Products are fp32 FMAs of upcast bf16 values;
// the output is rounded to bf16 (round to nearest) once. The TwELL row and Y are streamed (__ldcs/__stcs,
// evict-first) so that they do not push the weight rows out of L2.
#ifndef SLLM_TWELL_UPDOWN_CUH
#define SLLM_TWELL_UPDOWN_CUH

#include "cuda_common.cuh"
#include "twell/format.h"

#define TWELL_UPDOWN_NT 128  // threads per CTA (one row) of the fused kernel

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

// The fused kernel (non-gated layers): one CTA of TWELL_UPDOWN_NT threads per row, G units per step.
template <int CH, int G>
static __global__ void __launch_bounds__(TWELL_UPDOWN_NT)
twell_updown_kernel(const uint32_t *__restrict__ tw, const bf16 *__restrict__ WdT, bf16 *__restrict__ Y, int M, int D,
                    int F, int words, unsigned long long *__restrict__ nnz_sparse) {
    constexpr int NT = TWELL_UPDOWN_NT;
    extern __shared__ __align__(16) unsigned char twell_smem[];
    const int tiles = F / TWELL_TILE, slots = words - 1, row_words = tiles * words;
    int *s_off = reinterpret_cast<int *>(twell_smem);  // [tiles + 1]
    int *s_col = s_off + tiles + 1;                    // [tiles * slots]
    float *s_g = reinterpret_cast<float *>(s_col + tiles * slots);

    const int tid = threadIdx.x;
    const int row = blockIdx.x;
    const int total = twell_block_compact_row<NT>(tw + (size_t)row * row_words, tiles, words, s_off, s_col, s_g);
    if (total < 0) return;  // whole block: the dense fallback computes this row
    if (nnz_sparse && tid == 0 && total > 0) atomicAdd(nnz_sparse, (unsigned long long)total);
    const int nchunks = D / 8;

    float acc[CH][8];
#pragma unroll
    for (int k = 0; k < CH; k++)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[k][e] = 0.0f;

    for (int base = 0; base < total; base += G) {
        uint4 wd[G][CH];
        float h[G];
#pragma unroll
        for (int j = 0; j < G; j++) {
            const bool valid = base + j < total;
            const int col = valid ? s_col[base + j] : 0;
            h[j] = valid ? s_g[base + j] : 0.0f;
#pragma unroll
            for (int k = 0; k < CH; k++) {
                const int ci = tid + k * NT;
                wd[j][k] = make_uint4(0, 0, 0, 0);
                if (valid && ci < nchunks)
                    wd[j][k] = __ldg(reinterpret_cast<const uint4 *>(WdT + (size_t)col * D + (size_t)ci * 8));
            }
        }
        twell_accumulate_rows<G, CH>(wd, h, acc);
    }
    twell_store_row_bf16<NT, CH>(acc, Y + (size_t)row * D, nchunks);
}

// The up/down a sparse call runs (TwellFFNResult.updown): the split kernels for gated layers
// (twell/updown_split.cuh), the fused kernel above for non-gated ones.
enum { TWELL_UPDOWN_FUSED = 0, TWELL_UPDOWN_SPLIT = 1 };
static inline const char *twell_updown_name(int v) {
    return v == TWELL_UPDOWN_FUSED ? "fused" : v == TWELL_UPDOWN_SPLIT ? "split" : "?";
}

template <int CH, int G>
static inline void twell_updown_launch_t(const uint32_t *tw, const bf16 *WdT, bf16 *Y, int M, int D, int F, int words,
                                         unsigned long long *nnz_sparse, cudaStream_t stream) {
    const int tiles = F / TWELL_TILE;
    size_t smem = sizeof(int) * (size_t)(tiles + 1) + (sizeof(int) + sizeof(float)) * (size_t)tiles * (words - 1);
    if (smem > 48 * 1024)
        cudaCheck(cudaFuncSetAttribute(twell_updown_kernel<CH, G>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
    twell_updown_kernel<CH, G><<<M, TWELL_UPDOWN_NT, smem, stream>>>(tw, WdT, Y, M, D, F, words, nnz_sparse);
    cudaCheckLaunch();
}

// Non-gated up/down on tw (the gate kernel ran on the up weight: g = relu(x Wu^T)): Y = sum over active n of
// g[m, n] WdT[n, :]. CH (16-byte chunks per thread) from D; G = 2 units per step (1 at CH 8: registers).
// nnz_sparse (may be NULL): += the active units of the rows computed (the non-overflow rows).
// Returns TWELL_OK or TWELL_ERR_SHAPE (message printed).
static inline int twell_updown_launch(const uint32_t *tw, const bf16 *WdT, bf16 *Y, int M, int D, int F, int C,
                                      unsigned long long *nnz_sparse, cudaStream_t stream) {
    if (M <= 0) return TWELL_OK;
    if (D % 8 != 0 || D > 8192) {
        fprintf(stderr, "error: twell_updown: D=%d must be a multiple of 8 and <= 8192\n", D);
        return TWELL_ERR_SHAPE;
    }
    const int words = TWELL_TILE / C, nchunks = D / 8, NT = TWELL_UPDOWN_NT;
    if (nchunks <= NT) twell_updown_launch_t<1, 2>(tw, WdT, Y, M, D, F, words, nnz_sparse, stream);
    else if (nchunks <= 2 * NT) twell_updown_launch_t<2, 2>(tw, WdT, Y, M, D, F, words, nnz_sparse, stream);
    else if (nchunks <= 4 * NT) twell_updown_launch_t<4, 2>(tw, WdT, Y, M, D, F, words, nnz_sparse, stream);
    else twell_updown_launch_t<8, 1>(tw, WdT, Y, M, D, F, words, nnz_sparse, stream);
    return TWELL_OK;
}

#endif  // SLLM_TWELL_UPDOWN_CUH
