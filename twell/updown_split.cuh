// twell/updown_split.cuh: the gated up + down of the TwELL FFN as TWO token-major kernels (the FFN's up/down for
// gated layers). Both gather whole weight rows from L2 (8 KB per (token, unit) pair); the up kernel has one barrier
// per row, the down kernel none. On the H200 (M 65536, D 2048, F 5632, nnz 29) the up/down takes ~1.7 ms, ~90% of a
// pure gather of the same rows (bench_ffn --gather: 1.58 ms, 9.8 TB/s), the floor of any token-major up/down.
//
//   up:    for every active (token m, unit n):  h[m, n] = bf16(g[m, n] * bf16(x[m,:] . Wu[n,:]))
//          (u and h rounded to bf16 where the dense path rounds them: both paths compute the same function)
//   down:  y[m,:] = sum over the token's active n of  h[m, n] * WdT[n,:]                 (fp32, bf16 once)
//
//   tw  uint32 [M, F/C] (twell/format.h)   X [M, D] bf16   Wu, WdT [F, D] bf16 (row n at Wu + n * D)
//   pairs uint2 [M, P] (P = F/256 * slots, the most a non-overflow row can hold): the up kernel writes row m's
//     active units in column order, pairs[m * P + i] = {unit n, float bits of h}; cnt int [M] = the row's
//     number of pairs, or -1 for an overflow row (then neither kernel writes anything for it: the dense
//     fallback of twell/ffn.cuh computes that row). Y [M, D] bf16: every non-overflow row written fully.
// The workspace (twell/ffn.cuh) runs both kernels per chunk of TWELL_SPLIT_CHUNK rows, so pairs/cnt hold one
// chunk (16384 rows x 682 x 8 B = 89 MB at the paper's shape), alternating two buffers on two streams so that
// the tail of one chunk overlaps the next. Within a chunk, rows with many active units (the first tokens of a
// sequence) can run first (twell_split_order_kernel; the workspace does so when its previous call had such
// rows): a CTA walks its row's units serially, so a heavy row started late trails the launch (heavy pattern,
// nnz 8: 1.08 ms in index order, 0.90 heavy rows first); without heavy rows the order only costs a dependent
// load per CTA (uniform nnz 29: 1.76 ms in index order, 1.85 heavy rows first).
//
// Up kernel: one CTA of 128 threads per token. The row's TwELL is compacted into shared memory (column order,
// twell_block_compact_row); thread i holds the 16-byte chunks i, i + 128, ... of x in fp32 registers; every
// warp takes the units GU = 2 at a time (G x CH 16-byte loads in flight per thread), reduces each partial dot over
// its columns by a butterfly and keeps it in shared memory; ONE barrier per row, then h = g * (sum over the
// warps in a fixed order: deterministic) is written with the unit.
// Down kernel: one CTA of 128 threads per token; thread i owns the 16-byte column chunks i, i + 128, ... of y;
// the row's pairs are staged in shared memory; GD = 4 WdT rows in flight per step; no reductions at all.
// X, TwELL and Y are streamed (evict-first) so that they do not push the weight rows out of L2.
// Shapes: D % 8 == 0, D <= 8192 (CH = ceil(D / 1024) chunks per thread, G capped for CH 4 and 8: registers),
// F % 256 == 0; gated FFNs only (a non-gated one has no up projection: the fused kernel of twell/updown.cuh is its
// down kernel already).
#ifndef SLLM_TWELL_UPDOWN_SPLIT_CUH
#define SLLM_TWELL_UPDOWN_SPLIT_CUH

#include "cuda_common.cuh"
#include "twell/format.h"
#include "twell/updown.cuh"

#ifndef TWELL_SPLIT_CHUNK
#define TWELL_SPLIT_CHUNK 16384  // rows per up + down pass (bounds the pairs buffers); a build option
#endif
#define TWELL_SPLIT_NT 128       // threads per CTA (one token) of both kernels
#define TWELL_SPLIT_HEAVY 64     // a row with at least this many active units is "heavy" (runs first, counted)
// Units per step: GU of the up, GD of the down (H200, M 65536, nnz 8 / 29: GU 2 / GD 4 was 1.5-4.4% faster than
// GU 2 / GD 8 and GU 4 / GD 4).
#define TWELL_SPLIT_GU 2
#define TWELL_SPLIT_GD 4
// Minimum CTAs per SM asked of the compiler (__launch_bounds__) for the up and the down kernel (D 2048, CUDA 13.0).
// The up: 69 registers at 1 (7 CTAs per SM), 48 at 10 (10 CTAs, no spills), 40 at 12; 10 measured 3-7% faster than
// 1 at nnz 8 and 29 (12 slower than 10). It applies at CH <= 2 (D <= 2048); wider rows (CH 4, 8) would spill under
// it and keep 1. The down: 72 registers at 1 (7 CTAs per SM), 48 at 10, no spills; as fast at 1 as at 8 or 10.
#ifndef TWELL_SPLIT_UP_MINB
#define TWELL_SPLIT_UP_MINB 10
#endif
#ifndef TWELL_SPLIT_DOWN_MINB
#define TWELL_SPLIT_DOWN_MINB 1
#endif

static inline int twell_split_pairs_per_row(int F, int C) { return (F / TWELL_TILE) * (TWELL_TILE / C - 1); }

// Up: one CTA of NT threads per row (NW = NT / 32 warps). Thread i owns the 16-byte chunks i, i + NT, ... of
// x (CH of them, fp32 registers; D <= CH * NT * 8). Every warp walks ALL of the row's units, G at a time (G x CH
// 16-byte loads in flight per thread), and writes its partial dot over its columns to s_part[warp][unit]; one
// barrier at the end, then h = g * (sum over warps, fixed order). Dynamic shared memory: tiles + 1 + (2 + NW) x P
// words.
template <int NT, int CH, int G>
static __global__ void __launch_bounds__(NT, CH <= 2 ? TWELL_SPLIT_UP_MINB : 1)
twell_split_up_kernel(const uint32_t *__restrict__ tw, const bf16 *__restrict__ X, const bf16 *__restrict__ Wu,
                      uint2 *__restrict__ pairs, int *__restrict__ cnt, const int *__restrict__ order,
                      int *__restrict__ n_heavy, unsigned long long *__restrict__ nnz_sparse, int D, int F,
                      int words) {
    constexpr int NW = NT / 32;
    extern __shared__ __align__(16) unsigned char twell_smem[];
    const int tiles = F / TWELL_TILE, P = tiles * (words - 1);
    int *s_off = reinterpret_cast<int *>(twell_smem);  // [tiles + 1]
    int *s_col = s_off + tiles + 1;                    // [P]
    float *s_g = reinterpret_cast<float *>(s_col + P); // [P]
    float *s_part = s_g + P;                           // [NW][P]
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int row = order ? order[blockIdx.x] : blockIdx.x;
    // x's loads first: their latency runs under the compaction's two dependent loads (counts, then slots)
    const int nchunks = D / 8;
    uint4 xraw[CH];
#pragma unroll
    for (int k = 0; k < CH; k++) {
        const int ci = tid + k * NT;
        xraw[k] = ci < nchunks ? __ldcs(reinterpret_cast<const uint4 *>(X + (size_t)row * D) + ci) : make_uint4(0, 0, 0, 0);
    }
    const int total = twell_block_compact_row<NT>(tw + (size_t)row * tiles * words, tiles, words, s_off, s_col, s_g);
    if (tid == 0) {
        cnt[row] = total;  // -1: overflow row
        if (n_heavy && total >= TWELL_SPLIT_HEAVY) atomicAdd(n_heavy, 1);
        if (nnz_sparse && total > 0) atomicAdd(nnz_sparse, (unsigned long long)total);
    }
    if (total <= 0) return;  // whole block

    float xf[CH][8];
#pragma unroll
    for (int k = 0; k < CH; k++) twell_bf16x8_to_f32(xraw[k], xf[k]);  // bf16 zeros past D give 0.0f
    for (int base = 0; base < total; base += G) {
        uint4 wu[G][CH];
#pragma unroll
        for (int j = 0; j < G; j++) {
            const bool valid = base + j < total;
            const int col = valid ? s_col[base + j] : 0;
#pragma unroll
            for (int k = 0; k < CH; k++) {
                const int ci = tid + k * NT;
                wu[j][k] = (valid && ci < nchunks) ? __ldg(reinterpret_cast<const uint4 *>(Wu + (size_t)col * D) + ci)
                                                   : make_uint4(0, 0, 0, 0);
            }
        }
        float p[G];
        twell_dot_rows<G, CH>(wu, xf, p);
#pragma unroll
        for (int j = 0; j < G; j++) p[j] = warp_sum(p[j]);
        if (lane < G && base + lane < total) {
            float v = p[0];
#pragma unroll
            for (int j = 1; j < G; j++) if (lane == j) v = p[j];
            s_part[warp * P + base + lane] = v;
        }
    }
    __syncthreads();
    uint2 *prow = pairs + (size_t)row * P;
    for (int i = tid; i < total; i += NT) {
        float u = 0.0f;
#pragma unroll
        for (int w = 0; w < NW; w++) u += s_part[w * P + i];
        // u and h rounded to bf16 as the dense path's GEMM output and h = bf16(relu(g) * u) are
        const float h = __bfloat162float(__float2bfloat16_rn(s_g[i] * __bfloat162float(__float2bfloat16_rn(u))));
        prow[i] = make_uint2((uint32_t)s_col[i], __float_as_uint(h));
    }
}

// Down: one CTA of NT threads per row. CH = 16-byte chunks of y per thread (D <= CH * NT * 8), G rows per step.
template <int NT, int CH, int G>
static __global__ void __launch_bounds__(NT, CH <= 2 ? TWELL_SPLIT_DOWN_MINB : 1)
twell_split_down_kernel(const uint2 *__restrict__ pairs, const int *__restrict__ cnt, const int *__restrict__ order,
                        const bf16 *__restrict__ WdT, bf16 *__restrict__ Y, int D, int P) {
    extern __shared__ __align__(16) unsigned char twell_smem[];
    uint2 *s_pair = reinterpret_cast<uint2 *>(twell_smem);  // [P]
    const int row = order ? order[blockIdx.x] : blockIdx.x, tid = threadIdx.x;
    const int total = cnt[row];
    if (total < 0) return;  // overflow row: the dense fallback writes it
    const uint2 *prow = pairs + (size_t)row * P;
    for (int i = tid; i < total; i += NT) s_pair[i] = prow[i];
    __syncthreads();
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
            const uint2 pr = valid ? s_pair[base + j] : make_uint2(0, 0);
            h[j] = __uint_as_float(pr.y);
#pragma unroll
            for (int k = 0; k < CH; k++) {
                const int ci = tid + k * NT;
                wd[j][k] = (valid && ci < nchunks)
                               ? __ldg(reinterpret_cast<const uint4 *>(WdT + (size_t)pr.x * D) + ci)
                               : make_uint4(0, 0, 0, 0);
            }
        }
        twell_accumulate_rows<G, CH>(wd, h, acc);
    }
    twell_store_row_bf16<NT, CH>(acc, Y + (size_t)row * D, nchunks);
}

// Row order of both kernels: rows with at least TWELL_SPLIT_HEAVY active units first (their CTAs run longest:
// started first, they finish under the others instead of trailing the launch), then the rest, overflow rows
// last (their CTAs exit at once). One thread per row, one atomic per warp and group (ballot + popc: the
// counters ctr[2], zeroed by the caller, see 32x fewer atomics than rows). The order within each group depends
// on the atomics, the results do not (every row is computed alone).
static __global__ void twell_split_order_kernel(const uint32_t *__restrict__ tw, int rows, int tiles, int words,
                                         int *__restrict__ order, int *__restrict__ ctr) {
    const int row = blockIdx.x * blockDim.x + threadIdx.x, lane = threadIdx.x & 31;
    int heavy = 0;
    if (row < rows) {
        const uint32_t *trow = tw + (size_t)row * tiles * words;
        int total = 0, ovf = 0;
#pragma unroll 8
        for (int t = 0; t < tiles; t++) {  // independent loads: unrolled so that they are in flight together
            const int c = (int)__ldcs(trow + (size_t)t * words);
            total += c;
            ovf |= c > words - 1;
        }
        heavy = !ovf && total >= TWELL_SPLIT_HEAVY;
    }
    const unsigned hm = __ballot_sync(0xffffffffu, row < rows && heavy);
    const unsigned lm = __ballot_sync(0xffffffffu, row < rows && !heavy);
    int hb = 0, lb = 0;
    if (lane == 0) {
        if (hm) hb = atomicAdd(&ctr[0], __popc(hm));
        if (lm) lb = atomicAdd(&ctr[1], __popc(lm));
    }
    hb = __shfl_sync(0xffffffffu, hb, 0);
    lb = __shfl_sync(0xffffffffu, lb, 0);
    if (row >= rows) return;
    const unsigned below = (1u << lane) - 1u;
    order[heavy ? hb + __popc(hm & below) : rows - 1 - (lb + __popc(lm & below))] = row;
}

template <int CH>
static inline void twell_split_launch_ch(const uint32_t *tw, const bf16 *X, const bf16 *Wu, const bf16 *WdT, bf16 *Y,
                                         uint2 *pairs, int *cnt, int *order, int *n_heavy,
                                         unsigned long long *nnz_sparse, int M, int D, int F, int words,
                                         cudaStream_t stream) {
    constexpr int NT = TWELL_SPLIT_NT;
    constexpr int GU = CH >= 8 ? 1 : CH >= 4 ? (TWELL_SPLIT_GU < 2 ? TWELL_SPLIT_GU : 2) : TWELL_SPLIT_GU;  // registers
    constexpr int GD = CH >= 8 ? 1 : CH >= 4 ? (TWELL_SPLIT_GD < 2 ? TWELL_SPLIT_GD : 2) : TWELL_SPLIT_GD;
    const int tiles = F / TWELL_TILE, P = tiles * (words - 1);
    const size_t smem_up = sizeof(int) * ((size_t)tiles + 1 + (2 + NT / 32) * (size_t)P);
    const size_t smem_down = sizeof(uint2) * (size_t)P;
    if (smem_up > 48 * 1024)
        cudaCheck(cudaFuncSetAttribute(twell_split_up_kernel<NT, CH, GU>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem_up));
    if (smem_down > 48 * 1024)
        cudaCheck(cudaFuncSetAttribute(twell_split_down_kernel<NT, CH, GD>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem_down));
    if (order) {
        int *ctr = order + M;
        cudaCheck(cudaMemsetAsync(ctr, 0, 2 * sizeof(int), stream));
        twell_split_order_kernel<<<CEIL_DIV(M, 256), 256, 0, stream>>>(tw, M, tiles, words, order, ctr);
        cudaCheckLaunch();
    }
    twell_split_up_kernel<NT, CH, GU><<<M, NT, smem_up, stream>>>(tw, X, Wu, pairs, cnt, order, n_heavy, nnz_sparse, D,
                                                                   F, words);
    cudaCheckLaunch();
    twell_split_down_kernel<NT, CH, GD><<<M, NT, smem_down, stream>>>(pairs, cnt, order, WdT, Y, D, P);
    cudaCheckLaunch();
}

// Runs order (if any), up, then down on rows [0, M) (one chunk: pairs / cnt hold M rows, order M + 2 ints, or NULL:
// rows in index order, no heavy-first ordering; n_heavy / nnz_sparse (may be NULL): += the heavy non-overflow rows /
// the active units of the non-overflow rows). The caller has checked twell_split_supports(D) and F % 256 == 0.
static inline void twell_split_launch(const uint32_t *tw, const bf16 *X, const bf16 *Wu, const bf16 *WdT, bf16 *Y,
                                      uint2 *pairs, int *cnt, int *order, int *n_heavy, unsigned long long *nnz_sparse,
                                      int M, int D, int F, int C, cudaStream_t stream) {
    const int words = TWELL_TILE / C;
    const int nchunks = D / 8;  // 16-byte chunks per row; CH per thread of a 128-thread CTA
#define TWELL_SPLIT_ARGS tw, X, Wu, WdT, Y, pairs, cnt, order, n_heavy, nnz_sparse, M, D, F, words, stream
    if (nchunks <= 128) twell_split_launch_ch<1>(TWELL_SPLIT_ARGS);
    else if (nchunks <= 256) twell_split_launch_ch<2>(TWELL_SPLIT_ARGS);
    else if (nchunks <= 512) twell_split_launch_ch<4>(TWELL_SPLIT_ARGS);
    else twell_split_launch_ch<8>(TWELL_SPLIT_ARGS);
#undef TWELL_SPLIT_ARGS
}

static inline int twell_split_supports(int D) { return D % 8 == 0 && D <= 8192; }

#endif  // SLLM_TWELL_UPDOWN_SPLIT_CUH
