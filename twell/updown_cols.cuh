// twell/updown_cols.cuh: the split up/down in COLUMN PASSES (ws->split_cols = 256 or 128 columns per pass).
// The token-major split kernels (twell/updown_split.cuh) gather whole 4 KB weight rows from L2 at ~9.8 TB/s on
// the H200, wherever the rows lie. dev/bench/bench_l2.cu (run 56 of dev/RESULTS.md) measured that the same
// bytes gather faster when the rows read at one time span fewer distinct bytes: 9.77 TB/s over one [5632, 2048]
// matrix (23 MB), 10.0 over 11.5 MB, 10.5 over 5.8 MB, 11.6 over 2.9 MB, 12.3 over 2.1 MB. Here every kernel
// launch runs its CTAs slice by slice (grid.y = slice, the slowest-moving index of the launch order), so that the
// CTAs in flight read one slice of W columns of the weight rows: F x W x 2 bytes (2.9 MB at W 256, 1.4 MB at W
// 128) instead of the whole matrix.
//
//   compact: per row, the TwELL row -> pairs[row, i] = {unit n, g bits} (column order), cnt[row]; rows with more
//            than capr units (or none) are not taken by the passes: a row over capr goes to the rest list, whose
//            rows the token-major up kernel computes (counted: TwellCounters.cols_rows); overflow rows: cnt -1.
//   up:      pass s (grid.y), one warp per row: the lanes' partial dots of x[m, slice s] with Wu[n, slice s],
//            reduced over the LP = W / 8 lanes of a unit, to part[s, row, i] (fp32).
//   finish:  h = g * (sum over s of part[s, row, i], s in order: deterministic), written into pairs[row, i].y.
//   down:    pass s, one warp per row: y[m, slice s] = sum over the row's units of h * WdT[n, slice s] (fp32,
//            units in order within each of the 32 / LP lane groups, then the groups in a fixed butterfly),
//            rounded to bf16 once; every non-overflow row written (rows of the rest list too).
//
//   tw uint32 [M, F/C]   X, Y [M, D] bf16   Wu, WdT [F, D] bf16 (row n at + n * ldw)   pairs uint2 [M, P]
//   cnt int [M]   part float [D / W][M][capr]   rest int [M], rest_n int [1]
// Shapes: D % W == 0 (the FFN falls back to whole rows otherwise, see twell_cols_supports).
#ifndef SLLM_TWELL_UPDOWN_COLS_CUH
#define SLLM_TWELL_UPDOWN_COLS_CUH

#include "cuda_common.cuh"
#include "twell/format.h"
#include "twell/updown.cuh"

#define TWELL_COLS_CAPR 64     // units per row the passes take (default); rows with more run token-major
#define TWELL_COLS_ROWS_PER_CTA 4  // one warp per row

typedef struct {
    float *part;   // [S][rows][capr]
    int *rest;     // [rows]: rows over capr, run by the token-major up
    int *rest_n;   // [1]
    int rows, capr, W, S;
} TwellColsBuf;

static inline int twell_cols_supports(int D, int W) { return (W == 128 || W == 256) && D % W == 0 && D >= W; }

static inline void twell_cols_alloc(TwellColsBuf *b, int rows, int D, int W, int capr) {
    memset(b, 0, sizeof(*b));
    b->rows = rows; b->capr = capr; b->W = W; b->S = D / W;
    cudaCheck(cudaMalloc(&b->part, sizeof(float) * (size_t)b->S * rows * capr));
    cudaCheck(cudaMalloc(&b->rest, sizeof(int) * (size_t)rows));
    cudaCheck(cudaMalloc(&b->rest_n, sizeof(int)));
}
static inline void twell_cols_free(TwellColsBuf *b) {
    if (!b->part) return;
    cudaCheck(cudaFree(b->part)); cudaCheck(cudaFree(b->rest)); cudaCheck(cudaFree(b->rest_n));
    memset(b, 0, sizeof(*b));
}

// One CTA of NT threads per row: the row compacted (twell_block_compact_row) and written as {unit, g} pairs.
// Counts (NULL to skip): n_heavy += rows with >= heavy units, nnz_sparse += units of non-overflow rows,
// cols_rows += rows over capr. Dynamic shared memory: tiles + 1 + 2 P words.
template <int NT>
__global__ void __launch_bounds__(NT)
twell_cols_compact_kernel(const uint32_t *__restrict__ tw, int tiles, int words, uint2 *__restrict__ pairs,
                          int *__restrict__ cnt, int capr, int *__restrict__ rest, int *__restrict__ rest_n,
                          int *__restrict__ n_heavy, unsigned long long *__restrict__ nnz_sparse,
                          int *__restrict__ cols_rows, int heavy) {
    extern __shared__ __align__(16) unsigned char twell_smem[];
    const int P = tiles * (words - 1), row = blockIdx.x, tid = threadIdx.x;
    int *s_off = reinterpret_cast<int *>(twell_smem);  // [tiles + 1]
    int *s_col = s_off + tiles + 1;                    // [P]
    float *s_g = reinterpret_cast<float *>(s_col + P); // [P]
    const int total = twell_block_compact_row<NT>(tw + (size_t)row * tiles * words, tiles, words, s_off, s_col, s_g);
    if (tid == 0) {
        cnt[row] = total;  // -1: overflow row
        if (n_heavy && total >= heavy) atomicAdd(n_heavy, 1);
        if (nnz_sparse && total > 0) atomicAdd(nnz_sparse, (unsigned long long)total);
        if (total > capr) {
            rest[atomicAdd(rest_n, 1)] = row;
            if (cols_rows) atomicAdd(cols_rows, 1);
        }
    }
    if (total <= 0 || total > capr) return;
    uint2 *prow = pairs + (size_t)row * P;
    for (int i = tid; i < total; i += NT) prow[i] = make_uint2((uint32_t)s_col[i], __float_as_uint(s_g[i]));
}

// Up pass: grid (ceil(rows / 4), S), 128 threads; warp w of CTA b takes row 4 b + w, slice s = blockIdx.y.
// LP lanes per unit (W = 8 LP columns: lane l of the group holds the 16-byte chunk s LP + l of x in fp32), 32 / LP
// units side by side, G steps of them in flight. The row's units come 32 at a time into one register per lane
// (one coalesced load) and go to the lanes by shuffles.
template <int LP, int G>
__global__ void __launch_bounds__(128)
twell_cols_up_kernel(const uint2 *__restrict__ pairs, const int *__restrict__ cnt, int P, const bf16 *__restrict__ X,
                     int D, const bf16 *__restrict__ Wu, int ldw, float *__restrict__ part, int rows, int capr) {
    constexpr int PPW = 32 / LP;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * TWELL_COLS_ROWS_PER_CTA + warp;
    if (row >= rows) return;
    const int total = cnt[row];
    if (total <= 0 || total > capr) return;  // nothing / overflow row / the token-major up's row
    const int s = blockIdx.y, sub = lane / LP, l = lane % LP, c = s * LP + l;
    float xf[8];
    twell_bf16x8_to_f32(__ldcs(reinterpret_cast<const uint4 *>(X + (size_t)row * D) + c), xf);
    const uint2 *prow = pairs + (size_t)row * P;
    float *prt = part + ((size_t)s * rows + row) * capr;
    for (int w0 = 0; w0 < total; w0 += 32) {
        const int wn = total - w0 < 32 ? total - w0 : 32;
        const uint32_t my_unit = lane < wn ? prow[w0 + lane].x : 0u;
        for (int b = 0; b < wn; b += G * PPW) {
            uint4 w[G];
#pragma unroll
            for (int j = 0; j < G; j++) {
                const int k = b + j * PPW + sub;
                const uint32_t n = __shfl_sync(0xffffffffu, my_unit, k & 31);
                w[j] = k < wn ? __ldg(reinterpret_cast<const uint4 *>(Wu + (size_t)n * ldw) + c) : make_uint4(0, 0, 0, 0);
            }
            float p[G];
#pragma unroll
            for (int j = 0; j < G; j++) {
                float f[8];
                twell_bf16x8_to_f32(w[j], f);
                p[j] = 0.0f;
#pragma unroll
                for (int e = 0; e < 8; e++) p[j] = fmaf(xf[e], f[e], p[j]);
            }
#pragma unroll
            for (int o = LP / 2; o > 0; o >>= 1)
#pragma unroll
                for (int j = 0; j < G; j++) p[j] += __shfl_xor_sync(0xffffffffu, p[j], o);
            if (l == 0) {
#pragma unroll
                for (int j = 0; j < G; j++) {
                    const int k = b + j * PPW + sub;
                    if (k < wn) prt[w0 + k] = p[j];
                }
            }
        }
    }
}

// Finish: one thread per (row, slot < capr): h = g * (part[0] + part[1] + ... + part[S-1]) into pairs[row, i].y.
__global__ void twell_cols_finish_kernel(uint2 *__restrict__ pairs, const int *__restrict__ cnt, int P,
                                         const float *__restrict__ part, int S, int rows, int capr) {
    const long long idx = (long long)blockIdx.x * blockDim.x + threadIdx.x;
    const int row = (int)(idx / capr), i = (int)(idx - (long long)row * capr);
    if (row >= rows) return;
    const int total = cnt[row];
    if (total <= 0 || total > capr || i >= total) return;
    float u = 0.0f;
    for (int s = 0; s < S; s++) u += part[((size_t)s * rows + row) * capr + i];
    uint2 *p = pairs + (size_t)row * P + i;
    const uint2 v = *p;
    *p = make_uint2(v.x, __float_as_uint(__uint_as_float(v.y) * u));
}

// Down pass: grid (ceil(rows / 4), S), 128 threads; warp w of CTA b takes row 4 b + w, slice s. Lane group sub
// (LP lanes) accumulates units sub, sub + 32 / LP, ... of the row into 8 fp32 columns per lane; the groups are
// summed by a butterfly (fixed order), group 0 stores the slice's bf16 values.
template <int LP, int G>
__global__ void __launch_bounds__(128)
twell_cols_down_kernel(const uint2 *__restrict__ pairs, const int *__restrict__ cnt, int P,
                       const bf16 *__restrict__ WdT, int ldw, bf16 *__restrict__ Y, int D, int rows) {
    constexpr int PPW = 32 / LP;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int row = blockIdx.x * TWELL_COLS_ROWS_PER_CTA + warp;
    if (row >= rows) return;
    const int total = cnt[row];
    if (total < 0) return;  // overflow row: the dense fallback writes it
    const int s = blockIdx.y, sub = lane / LP, l = lane % LP, c = s * LP + l;
    const uint2 *prow = pairs + (size_t)row * P;
    float acc[8];
#pragma unroll
    for (int e = 0; e < 8; e++) acc[e] = 0.0f;
    for (int w0 = 0; w0 < total; w0 += 32) {
        const int wn = total - w0 < 32 ? total - w0 : 32;
        const uint2 my = lane < wn ? prow[w0 + lane] : make_uint2(0u, 0u);
        for (int b = 0; b < wn; b += G * PPW) {
            uint4 w[G];
            float h[G];
#pragma unroll
            for (int j = 0; j < G; j++) {
                const int k = b + j * PPW + sub;
                const uint32_t n = __shfl_sync(0xffffffffu, my.x, k & 31);
                const uint32_t hb = __shfl_sync(0xffffffffu, my.y, k & 31);
                h[j] = k < wn ? __uint_as_float(hb) : 0.0f;
                w[j] = k < wn ? __ldg(reinterpret_cast<const uint4 *>(WdT + (size_t)n * ldw) + c) : make_uint4(0, 0, 0, 0);
            }
#pragma unroll
            for (int j = 0; j < G; j++) {
                float f[8];
                twell_bf16x8_to_f32(w[j], f);
#pragma unroll
                for (int e = 0; e < 8; e++) acc[e] = fmaf(h[j], f[e], acc[e]);
            }
        }
    }
#pragma unroll
    for (int o = LP; o < 32; o <<= 1)
#pragma unroll
        for (int e = 0; e < 8; e++) acc[e] += __shfl_xor_sync(0xffffffffu, acc[e], o);
    if (sub == 0) {
        uint4 o;
        uint32_t *ow = reinterpret_cast<uint32_t *>(&o);
#pragma unroll
        for (int i = 0; i < 4; i++) {
            __nv_bfloat162 bv = __floats2bfloat162_rn(acc[2 * i], acc[2 * i + 1]);
            ow[i] = *reinterpret_cast<uint32_t *>(&bv);
        }
        __stcs(reinterpret_cast<uint4 *>(Y + (size_t)row * D) + c, o);
    }
}

#define TWELL_COLS_GU 4  // units in flight per lane group, up
#define TWELL_COLS_GD 8  // and down

// The compact + up passes + finish (stage 1, without the token-major up of the rest rows, which the caller
// launches on cb->rest / cb->rest_n) or the down passes (stage 2) of one chunk of M rows.
static inline void twell_cols_launch_up(const TwellColsBuf *cb, const uint32_t *tw, const bf16 *X, const bf16 *Wu,
                                        int ldw, uint2 *pairs, int *cnt, int *n_heavy,
                                        unsigned long long *nnz_sparse, int *cols_rows, int heavy, int M, int D, int F,
                                        int words, cudaStream_t stream) {
    const int tiles = F / TWELL_TILE, P = tiles * (words - 1);
    const size_t smem = sizeof(int) * ((size_t)tiles + 1 + 2 * (size_t)P);
    if (smem > 48 * 1024)
        cudaCheck(cudaFuncSetAttribute(twell_cols_compact_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
    cudaCheck(cudaMemsetAsync(cb->rest_n, 0, sizeof(int), stream));
    twell_cols_compact_kernel<128><<<M, 128, smem, stream>>>(tw, tiles, words, pairs, cnt, cb->capr, cb->rest,
                                                              cb->rest_n, n_heavy, nnz_sparse, cols_rows, heavy);
    cudaCheckLaunch();
    const dim3 grid(CEIL_DIV(M, TWELL_COLS_ROWS_PER_CTA), D / cb->W);
    if (cb->W == 256)
        twell_cols_up_kernel<32, TWELL_COLS_GU><<<grid, 128, 0, stream>>>(pairs, cnt, P, X, D, Wu, ldw, cb->part, M,
                                                                          cb->capr);
    else
        twell_cols_up_kernel<16, TWELL_COLS_GU><<<grid, 128, 0, stream>>>(pairs, cnt, P, X, D, Wu, ldw, cb->part, M,
                                                                          cb->capr);
    cudaCheckLaunch();
    twell_cols_finish_kernel<<<(unsigned)CEIL_DIV((long long)M * cb->capr, 256), 256, 0, stream>>>(
        pairs, cnt, P, cb->part, D / cb->W, M, cb->capr);
    cudaCheckLaunch();
}

static inline void twell_cols_launch_down(const TwellColsBuf *cb, const uint2 *pairs, const int *cnt, int P,
                                          const bf16 *WdT, int ldw, bf16 *Y, int M, int D, cudaStream_t stream) {
    const dim3 grid(CEIL_DIV(M, TWELL_COLS_ROWS_PER_CTA), D / cb->W);
    if (cb->W == 256)
        twell_cols_down_kernel<32, TWELL_COLS_GD><<<grid, 128, 0, stream>>>(pairs, cnt, P, WdT, ldw, Y, D, M);
    else
        twell_cols_down_kernel<16, TWELL_COLS_GD><<<grid, 128, 0, stream>>>(pairs, cnt, P, WdT, ldw, Y, D, M);
    cudaCheckLaunch();
}

#endif  // SLLM_TWELL_UPDOWN_COLS_CUH
