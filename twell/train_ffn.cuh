// twell/train_ffn.cuh: the sparse ReLU FFN for TRAINING, forward (saving a compact sparse state) and backward,
// on the TwELL gate (twell/gate.cuh, twell/gate_wgmma.cuh). Design: ../shared/design/sparse_training.md.
//
//   gated:     g = X Wg^T, u = X Wu^T, h = bf16(relu(g) * u), Y = H Wd^T
//   non-gated: g = X Wu^T (the pattern and the value), h = relu(g), Y = H Wd^T   (Wg = NULL)
//   X [M, D] bf16 (the ln2 output), Wg, Wu [F, D] bf16 (nn.Linear), WdT [F, D] bf16 = Wd [D, F] transposed (a copy
//   the trainer refreshes after each optimizer step), Y, dY, dX [M, D] bf16, dWg, dWu [F, D] fp32, dWd [D, F] fp32
//   (the trainer's layouts). Shapes: D % 256 == 0, D <= 4096, F % 256 == 0, F <= 8192, 1 <= M <= max_M.
//
// Numerics (the dense path's rounding points, core/ffn.cuh + cuBLASLt): g = bf16 of the fp32 gate accumulator (the
// TwELL value), active iff bf16(g) > 0; u = bf16(fp32 dot); h = bf16(g * u) (L1 sums |g * u| in fp32 before the
// rounding); Y accumulated in fp32 over the pairs, rounded once. Backward: dh = bf16(fp32 dot(dY, WdT[n])),
// dt = dh + l1_coef * sign(u) (gated) or dh + l1_coef (non-gated), dg = bf16(dt * u), du = bf16(dt * g); dX = ONE
// fp32 accumulator over dg Wg[n] + du Wu[n], rounded once; dWg = sum dg X, dWu = sum du X, dWd = sum h dY in fp32.
// The pattern comes from the gate alone: a pair with g > 0 and u = 0 is kept (its du carries a gradient).
//
// Forward (no host sync):
//   1. gate -> TwELL (wgmma gate on Hopper, cuBLASLt GEMM + pack elsewhere) + overflow flags + nnz.
//   2. classify (one warp per row): a row is SPARSE if no TwELL tile overflows, its count <= dense_row_nnz, and its
//      pairs fit the pair pool (offsets = exclusive scan of the counts of the eligible rows, in row order: once
//      the pool is full every later non-empty row is dense). Everything else is a DENSE row. The dense rows are
//      listed in increasing order by a stable compaction (cub::DeviceSelect::Flagged), their number on the device.
//   3. up (one CTA per sparse row): the row's TwELL entries are compacted in shared memory, u per pair by a warp dot
//      product (X row in registers), the record (unit, g, u) written to the pool; then the down (one CTA per sparse
//      row): Y row = sum h WdT[n] (separate kernels: each one's weight matrix stays in L2).
//   4. dense rows, in chunks of dense_chunk rows: gather, GEMMs (tt_gemm below, a tensor-core GEMM that reads its
//      row count from device memory: CTAs past the count do nothing), relu*mul, down GEMM, scatter.
//   5. statistics (one block, fixed order): L1, pairs, max row nnz, dense / overflow / pool-full rows.
// Backward (no host sync):
//   1. dh (one CTA per sparse row, dY row in registers, WdT rows gathered) -> (dg, du) per pair; keys for the sort.
//   2. dX (one CTA per sparse row, ONE fp32 accumulator for dg Wg[n] + du Wu[n]).
//   3. stable radix sort of the pool slots by unit (cub, stable: token order within a unit; keys from the pattern
//      only), unit counts and offsets, segments of TT_SEG pairs.
//   4. unit-major weight gradients: one CTA per (256-column slice, unit, segment), slice-major so that the slice of X
//      and dY in use stays in L2: dWg[n], dWu[n], dWdT[n] over its pairs in token order, fp32; the first segment writes (beta * dW + sum), later segments write partial sums that a second
//      kernel adds in segment order: deterministic.
//   5. dense rows (chunks): recompute g, u from X by GEMM, dh GEMM, element-wise backward, dX GEMM (one fp32
//      accumulator over both products), scatter, weight-gradient GEMMs (K = the device row count) adding into dW.
//   6. dWd [D, F] = beta * dWd + transpose(dWdT [F, D]).
// Determinism: no float atomics; every sum has a fixed order for a fixed input (int atomics only for counts).
#ifndef SLLM_TWELL_TRAIN_FFN_CUH
#define SLLM_TWELL_TRAIN_FFN_CUH

#include <cub/cub.cuh>
#include <thrust/iterator/counting_iterator.h>
#include <algorithm>
#include <stdint.h>

#include "cuda_common.cuh"
#include "core/ffn.cuh"
#include "kernel_utils.cuh"
#include "matmul.cuh"
#include "twell/format.h"
#include "twell/gate.cuh"
#include "twell/gate_wgmma.cuh"

#define TT_THREADS 256        // threads of the per-row and per-segment kernels
#define TT_SEG 512            // pairs per segment of the unit-major weight-gradient kernel
#define TT_ROW_SMEM 1024      // shared-memory entries per row (>= 31 * F / 256 for F <= 8192)
#define TT_DEFAULT_PAIRS_PER_ROW 64
#define TT_DEFAULT_DENSE_ROW_NNZ 256
#define TT_DEFAULT_DENSE_CHUNK 8192

// Device statistics of the last forward of a layer (zeroed by the forward).
typedef struct {
    unsigned long long pairs;         // active (token, unit) pairs of the layer, all rows (gate count)
    unsigned long long sparse_pairs;  // of those: pairs of the sparse rows (in the pool)
    int max_row_nnz;                  // the largest row count
    int n_dense;                      // rows computed densely (overflow + over dense_row_nnz + pool full)
    int n_overflow;                   // rows with a TwELL tile over its slots
    int n_pool_full;                  // rows that were eligible but did not fit the pair pool
    float l1;                         // sum over the layer of |g * u| (fp32, fixed order)
    int pad;
} TwTrainStats;

// Per-layer state saved by the forward for the backward (one per layer).
typedef struct {
    int max_M, cap_pairs, M;
    uint2 *recs;         // [cap_pairs] (unit, g_bits | u_bits << 16): pairs of the sparse rows, by token, units increasing
    int *row_ptr;        // [max_M + 1] first pool slot of row r (exclusive scan of the eligible counts)
    int *row_cnt;        // [max_M] pairs of row r if sparse, -1 if dense
    int *dense_rows;     // [max_M] the dense rows in increasing order (first stats->n_dense valid)
    TwTrainStats *stats; // device
} TwTrainState;

// Workspace shared by every layer (transient buffers of one forward or backward call).
typedef struct {
    int max_M, D, F, C, gated, cap_pairs, dense_chunk, dense_row_nnz, part_slots;
    int use_wgmma;
    uint32_t *tw;  // [max_M, F / C]
    int *ovf_flag, *ovf_list;
    TwellCounters *counters;
    bf16 *gate_scratch;  // cuBLASLt gate only: [gate_chunk, F]
    int gate_chunk;
    cudaEvent_t gate_done;  // cuBLASLt gate only: GEMM -> pack order inside twell_gate_chunk (one stream)
    MatmulContext *mm;   // the cuBLASLt gate only (not owned)
    int *cnt_elig;       // [max_M + 1]
    uint8_t *dense_flag; // [max_M]
    float *row_l1;       // [max_M]
    void *cub_tmp;
    size_t cub_bytes;
    // backward
    uint32_t *dgu;       // [cap_pairs] dg_bits | du_bits << 16
    int *pair_row;       // [cap_pairs]
    uint16_t *keys_in, *keys_out;  // [cap_pairs]
    int *vals_in, *vals_out;       // [cap_pairs] (vals_in = 0, 1, 2, ...)
    int *unit_cnt, *unit_off, *seg_cnt, *seg_off;  // [F + 1]
    int *seg_unit;       // [F + part_slots]: the unit of each weight-gradient segment
    float *part;         // [part_slots, G3, D]
    float *dwdT;         // [F, D]
    // optional stage timing (bench): when prof_on, events are recorded between the stages (TT_PROF_*)
    int prof_on;
    cudaEvent_t prof[16];
    // dense rows, one chunk
    bf16 *xd, *dyd, *g, *u, *dh, *yd;  // [chunk, D], [chunk, D], [chunk, F] x 3, [chunk, D]
} TwTrainWS;

// ---------------------------------------------------------------------------------------------------
// tt_gemm: C[m, n] (+)= sum_k A(m, k) B(k, n) [+ sum_k A2(m, k) B2(k, n)], bf16 in, fp32 accumulate, out bf16 or fp32.
// A(m, k) = A[m * lda + k] (a_kc = 1) or A[k * lda + m] (a_kc = 0); B(k, n) = B[n * ldb + k] (b_kc = 1) or
// B[k * ldb + n] (b_kc = 0). The contiguous dimension of each operand must be a multiple of 8, N % 128 == 0.
// One of M or K may come from device memory: dim = min(max(*dev_n - dev_off, 0), dev_cap) (dev_dim 1: M, 2: K),
// so the dense-row GEMMs need no host sync. Persistent grid over 128 x 128 tiles (mma.sync m16n8k16); a CTA finds
// the tile count from the device value and stops. Fixed summation order over k: deterministic.
// ---------------------------------------------------------------------------------------------------
#define TTG_BM 128
#define TTG_BN 128
#define TTG_BK 32
#define TTG_LDS 40  // padded smem row (bf16): conflict-free fragment loads

typedef struct {
    const bf16 *A, *B, *A2, *B2;
    long long lda, ldb, ldc;
    int a_kc, b_kc;
    void *C;
    int c_f32, accumulate;
    int M, N, K;
    const int *dev_n;
    int dev_off, dev_cap, dev_dim;
} TtGemmArgs;

__device__ __forceinline__ void ttg_load_tile(bf16 (*S)[TTG_LDS], const bf16 *P, long long ld, int kc, int r0, int rows,
                                              int k0, int K) {
    // S[i][kk] = P(r0 + i, k0 + kk) for i < 128, kk < 32 (zero outside [rows) x [K))
    for (int v = threadIdx.x; v < 512; v += blockDim.x) {
        if (kc) {
            const int i = v >> 2, kk = (v & 3) * 8;
            uint4 val = make_uint4(0, 0, 0, 0);
            if (r0 + i < rows && k0 + kk < K) val = *reinterpret_cast<const uint4 *>(P + (size_t)(r0 + i) * ld + k0 + kk);
            *reinterpret_cast<uint4 *>(&S[i][kk]) = val;
        } else {
            const int kk = v >> 4, i = (v & 15) * 8;
            uint4 val = make_uint4(0, 0, 0, 0);
            if (k0 + kk < K && r0 + i < rows) val = *reinterpret_cast<const uint4 *>(P + (size_t)(k0 + kk) * ld + r0 + i);
            const bf16 *e = reinterpret_cast<const bf16 *>(&val);
#pragma unroll
            for (int j = 0; j < 8; j++) S[i + j][kk] = (r0 + i + j < rows) ? e[j] : __float2bfloat16_rn(0.0f);
        }
    }
}

static __global__ void __launch_bounds__(256) tt_gemm_kernel(TtGemmArgs a) {
    __shared__ __align__(16) bf16 As[TTG_BM][TTG_LDS];
    __shared__ __align__(16) bf16 Bs[TTG_BN][TTG_LDS];
    int M = a.M, K = a.K;
    if (a.dev_dim) {
        int n = *a.dev_n - a.dev_off;
        n = n < 0 ? 0 : (n > a.dev_cap ? a.dev_cap : n);
        if (a.dev_dim == 1) M = n; else K = n;
    }
    if (K == 0 && a.accumulate) return;  // nothing to add (no dense rows in this chunk)
    const int tiles_m = (M + TTG_BM - 1) / TTG_BM, tiles_n = a.N / TTG_BN, tiles = tiles_m * tiles_n;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp >> 2, wn = warp & 3, gq = lane >> 2,
              tq = lane & 3;
    const int nk = (K + TTG_BK - 1) / TTG_BK, passes = a.A2 ? 2 : 1;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int m0 = (t / tiles_n) * TTG_BM, n0 = (t % tiles_n) * TTG_BN;
        float acc[4][4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
        for (int pass = 0; pass < passes; pass++) {
            const bf16 *A = pass ? a.A2 : a.A, *B = pass ? a.B2 : a.B;
            for (int kt = 0; kt < nk; kt++) {
                const int k0 = kt * TTG_BK;
                ttg_load_tile(As, A, a.lda, a.a_kc, m0, M, k0, K);
                ttg_load_tile(Bs, B, a.ldb, a.b_kc, n0, a.N, k0, K);
                __syncthreads();
#pragma unroll
                for (int ks = 0; ks < TTG_BK; ks += 16) {
                    uint32_t af[4][4], bfr[4][2];
#pragma unroll
                    for (int mi = 0; mi < 4; mi++) {
                        const int r = wm * 64 + mi * 16 + gq;
                        af[mi][0] = *reinterpret_cast<const uint32_t *>(&As[r][ks + 2 * tq]);
                        af[mi][1] = *reinterpret_cast<const uint32_t *>(&As[r + 8][ks + 2 * tq]);
                        af[mi][2] = *reinterpret_cast<const uint32_t *>(&As[r][ks + 2 * tq + 8]);
                        af[mi][3] = *reinterpret_cast<const uint32_t *>(&As[r + 8][ks + 2 * tq + 8]);
                    }
#pragma unroll
                    for (int ni = 0; ni < 4; ni++) {
                        const int c = wn * 32 + ni * 8 + gq;
                        bfr[ni][0] = *reinterpret_cast<const uint32_t *>(&Bs[c][ks + 2 * tq]);
                        bfr[ni][1] = *reinterpret_cast<const uint32_t *>(&Bs[c][ks + 2 * tq + 8]);
                    }
#pragma unroll
                    for (int mi = 0; mi < 4; mi++)
#pragma unroll
                        for (int ni = 0; ni < 4; ni++)
                            asm volatile(
                                "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                                "{%8,%9}, {%0,%1,%2,%3};"
                                : "+f"(acc[mi][ni][0]), "+f"(acc[mi][ni][1]), "+f"(acc[mi][ni][2]), "+f"(acc[mi][ni][3])
                                : "r"(af[mi][0]), "r"(af[mi][1]), "r"(af[mi][2]), "r"(af[mi][3]), "r"(bfr[ni][0]),
                                  "r"(bfr[ni][1]));
                }
                __syncthreads();
            }
        }
#pragma unroll
        for (int mi = 0; mi < 4; mi++)
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = m0 + wm * 64 + mi * 16 + gq + 8 * h;
                if (r >= M) continue;
#pragma unroll
                for (int ni = 0; ni < 4; ni++) {
                    const int c = n0 + wn * 32 + ni * 8 + 2 * tq;
                    const float v0 = acc[mi][ni][2 * h], v1 = acc[mi][ni][2 * h + 1];
                    if (a.c_f32) {
                        float2 *p = reinterpret_cast<float2 *>((float *)a.C + (size_t)r * a.ldc + c);
                        float2 o = make_float2(v0, v1);
                        if (a.accumulate) { const float2 q = *p; o.x += q.x; o.y += q.y; }
                        *p = o;
                    } else {
                        *reinterpret_cast<__nv_bfloat162 *>((bf16 *)a.C + (size_t)r * a.ldc + c) =
                            __floats2bfloat162_rn(v0, v1);
                    }
                }
            }
    }
}

static inline void tt_gemm(const TtGemmArgs *a, int max_rows_m, cudaStream_t stream) {
    // grid: enough CTAs for the largest possible tile count, at most 2 per SM (persistent)
    const long long tiles = (long long)CEIL_DIV(max_rows_m, TTG_BM) * (a->N / TTG_BN);
    long long grid = (long long)cuda_sm_count() * 2;
    if (tiles < grid) grid = tiles;
    if (grid < 1) grid = 1;
    tt_gemm_kernel<<<(int)grid, 256, 0, stream>>>(*a);
    cudaCheckLaunch();
}

// ---------------------------------------------------------------------------------------------------
// Forward kernels
// ---------------------------------------------------------------------------------------------------
// One warp per row: true count, eligibility (no tile over its slots, count <= dense_row_nnz).
static __global__ void tt_classify_kernel(const uint32_t *__restrict__ tw, int M, int tiles, int words, int thresh,
                                          int *__restrict__ cnt_elig, int *__restrict__ row_cnt,
                                          TwTrainStats *__restrict__ st) {
    const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (r == M && lane == 0) cnt_elig[M] = 0;
    if (r >= M) return;
    int sum = 0, ovf = 0;
    for (int t = lane; t < tiles; t += 32) {
        const int c = (int)tw[(size_t)r * tiles * words + (size_t)t * words];
        sum += c;
        ovf |= c > words - 1;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
        ovf |= __shfl_xor_sync(0xffffffffu, ovf, o);
    }
    if (lane == 0) {
        const int elig = !ovf && sum <= thresh;
        cnt_elig[r] = elig ? sum : 0;
        row_cnt[r] = elig ? sum : -1;
        atomicMax(&st->max_row_nnz, sum);
    }
}

// Per row: sparse iff eligible and its pairs fit the pool (row_ptr monotone in r).
static __global__ void tt_assign_kernel(const int *__restrict__ row_ptr, int *__restrict__ row_cnt, int M, int cap,
                                        uint8_t *__restrict__ dense_flag, TwTrainStats *__restrict__ st) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= M) return;
    const int c = row_cnt[r];
    int sparse = c >= 0;
    if (sparse && row_ptr[r] + c > cap) {
        sparse = 0;
        atomicAdd(&st->n_pool_full, 1);
    }
    if (!sparse) row_cnt[r] = -1;
    else if (c > 0) atomicMax(&st->sparse_pairs, (unsigned long long)(row_ptr[r] + c));
    dense_flag[r] = (uint8_t)!sparse;
}

// The row's TwELL entries compacted into shared memory (column order): s_unit[k], s_g[k] (bf16 bits), k < count.
__device__ __forceinline__ void tt_row_entries(const uint32_t *__restrict__ tw, int r, int tiles, int words,
                                               int *s_unit, uint16_t *s_g, int *s_toff, int *s_tc) {
    if (threadIdx.x < tiles) s_tc[threadIdx.x] = (int)tw[(size_t)r * tiles * words + (size_t)threadIdx.x * words];
    __syncthreads();
    if (threadIdx.x == 0) {
        int o = 0;
        for (int t = 0; t < tiles; t++) { s_toff[t] = o; o += s_tc[t]; }
    }
    __syncthreads();
    const int slots = words - 1;
    for (int it = threadIdx.x; it < tiles * slots; it += blockDim.x) {
        const int t = it / slots, k = it - t * slots;
        if (k < s_tc[t]) {
            const uint32_t w = tw[(size_t)r * tiles * words + (size_t)t * words + 1 + k];
            s_unit[s_toff[t] + k] = t * TWELL_TILE + (int)(w & 0xFFu);
            s_g[s_toff[t] + k] = (uint16_t)(w >> 16);
        }
    }
    __syncthreads();
}

__device__ __forceinline__ float tt_bf(uint32_t bits16) { return __uint_as_float(bits16 << 16); }

// dot of 8 bf16 (as uint4) with 8 floats
__device__ __forceinline__ float tt_dot8(const uint4 w, const float x[8]) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&w);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(h[i]);
        s = fmaf(f.x, x[2 * i], s);
        s = fmaf(f.y, x[2 * i + 1], s);
    }
    return s;
}

// dot of 8 bf16 with 8 bf16 (both as uint4), fp32
__device__ __forceinline__ float tt_dot8b(const uint4 w, const uint4 x) {
    const __nv_bfloat162 *h = reinterpret_cast<const __nv_bfloat162 *>(&w);
    const __nv_bfloat162 *g = reinterpret_cast<const __nv_bfloat162 *>(&x);
    float s = 0.0f;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(h[i]), e = __bfloat1622float2(g[i]);
        s = fmaf(f.x, e.x, s);
        s = fmaf(f.y, e.y, s);
    }
    return s;
}

// One CTA per row (sparse rows only): pairs -> records (u by warp dot products), Y row = sum h WdT[n].
// DV = D / 256: lane l of every warp holds X[r][256 j + 8 l .. + 8] for j < DV.
template <int DV>
static __global__ void __launch_bounds__(TT_THREADS) tt_fwd_up_kernel(
    const bf16 *__restrict__ X, const bf16 *__restrict__ Wu, const bf16 *__restrict__ WdT,
    const uint32_t *__restrict__ tw, const int *__restrict__ row_ptr, const int *__restrict__ row_cnt, int M, int F,
    int words, int gated, uint2 *__restrict__ recs, bf16 *__restrict__ Y, float *__restrict__ row_l1,
    uint8_t *__restrict__ fired) {
    constexpr int D = DV * 256;
    __shared__ int s_unit[TT_ROW_SMEM];
    __shared__ uint16_t s_g[TT_ROW_SMEM];
    __shared__ int s_toff[32], s_tc[32];
    __shared__ float s_wl1[TT_THREADS / 32];
    const int r = blockIdx.x;
    const int n = row_cnt[r];
    if (n < 0) return;  // dense row
    const int tiles = F / TWELL_TILE, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    tt_row_entries(tw, r, tiles, words, s_unit, s_g, s_toff, s_tc);
    const int base = row_ptr[r];
    float wl1 = 0.0f;
    if (gated) {
        uint4 x[DV];
#pragma unroll
        for (int j = 0; j < DV; j++) x[j] = *reinterpret_cast<const uint4 *>(X + (size_t)r * D + 256 * j + 8 * lane);
        for (int k = warp; k < n; k += TT_THREADS / 32) {
            const int unit = s_unit[k];
            const bf16 *w = Wu + (size_t)unit * D + 8 * lane;
            uint4 wv[DV];
#pragma unroll
            for (int j = 0; j < DV; j++) wv[j] = __ldg(reinterpret_cast<const uint4 *>(w + 256 * j));
            float s = 0.0f;
#pragma unroll
            for (int j = 0; j < DV; j++) s += tt_dot8b(wv[j], x[j]);
            s = warp_sum(s);
            const uint16_t ub = __bfloat16_as_ushort(__float2bfloat16_rn(s));
            const float g = tt_bf(s_g[k]), u = tt_bf(ub), hf = g * u;
            if (lane == 0) {
                wl1 += fabsf(hf);
                recs[base + k] = make_uint2((uint32_t)unit, (uint32_t)s_g[k] | ((uint32_t)ub << 16));
            }
        }
    } else {
        for (int k = warp; k < n; k += TT_THREADS / 32) {
            if (lane == 0) {
                const float g = tt_bf(s_g[k]);
                wl1 += g;
                recs[base + k] = make_uint2((uint32_t)s_unit[k], (uint32_t)s_g[k]);
            }
        }
    }
    if (lane == 0) s_wl1[warp] = wl1;
    __syncthreads();
    if (threadIdx.x == 0) {
        float t = 0.0f;
        for (int w = 0; w < TT_THREADS / 32; w++) t += s_wl1[w];
        row_l1[r] = t;
    }
    for (int k = threadIdx.x; k < n; k += TT_THREADS)
        if (!fired[s_unit[k]]) fired[s_unit[k]] = 1;
}

// One CTA per sparse row: Y[r] = sum_k h_k WdT[n_k] (fp32), h = bf16(g u) (non-gated: g) from the records. A kernel
// of its own (not fused with the up): its working set (WdT, 23 MB at the paper's shape) stays in L2.
static __global__ void __launch_bounds__(TT_THREADS) tt_fwd_down_kernel(const bf16 *__restrict__ WdT,
                                                                      const uint2 *__restrict__ recs,
                                                                      const int *__restrict__ row_ptr,
                                                                      const int *__restrict__ row_cnt, int D, int gated,
                                                                      bf16 *__restrict__ Y) {
    __shared__ int s_unit[TT_ROW_SMEM];
    __shared__ float s_h[TT_ROW_SMEM];
    const int r = blockIdx.x;
    const int n = row_cnt[r];
    if (n < 0) return;
    const int base = row_ptr[r];
    for (int k = threadIdx.x; k < n; k += TT_THREADS) {
        const uint2 rec = recs[base + k];
        s_unit[k] = (int)rec.x;
        s_h[k] = gated ? round_bf16(tt_bf(rec.y & 0xFFFFu) * tt_bf(rec.y >> 16)) : tt_bf(rec.y & 0xFFFFu);
    }
    __syncthreads();
    // down: thread t owns columns 8 t (+ 8 * TT_THREADS ...)
    for (int c0 = 8 * threadIdx.x; c0 < D; c0 += 8 * TT_THREADS) {
        float acc[8];
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] = 0.0f;
        int k = 0;
        for (; k + 4 <= n; k += 4) {
            uint4 wv[4];
#pragma unroll
            for (int q = 0; q < 4; q++) wv[q] = __ldg(reinterpret_cast<const uint4 *>(WdT + (size_t)s_unit[k + q] * D + c0));
#pragma unroll
            for (int q = 0; q < 4; q++) {
                const float h = s_h[k + q];
                const __nv_bfloat162 *w2 = reinterpret_cast<const __nv_bfloat162 *>(&wv[q]);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float2 f = __bfloat1622float2(w2[i]);
                    acc[2 * i] = fmaf(h, f.x, acc[2 * i]);
                    acc[2 * i + 1] = fmaf(h, f.y, acc[2 * i + 1]);
                }
            }
        }
        for (; k < n; k++) {
            const uint4 wv = __ldg(reinterpret_cast<const uint4 *>(WdT + (size_t)s_unit[k] * D + c0));
            const float h = s_h[k];
            const __nv_bfloat162 *w2 = reinterpret_cast<const __nv_bfloat162 *>(&wv);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float2 f = __bfloat1622float2(w2[i]);
                acc[2 * i] = fmaf(h, f.x, acc[2 * i]);
                acc[2 * i + 1] = fmaf(h, f.y, acc[2 * i + 1]);
            }
        }
        store8_bf16(Y + (size_t)r * D + c0, acc);
    }
}

// out[i, :] = in[rows[off + i], :] for i < clamp(*n - off, 0, cap). D % 8 == 0.
static __global__ void tt_gather_kernel(const bf16 *__restrict__ in, const int *__restrict__ rows, const int *n_dev,
                                        int off, int cap, int D, bf16 *__restrict__ out) {
    int n = *n_dev - off;
    n = n < 0 ? 0 : (n > cap ? cap : n);
    const int chunks = D / 8;
    const long long total = (long long)n * chunks;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(i / chunks), c = (int)(i - (long long)r * chunks);
        reinterpret_cast<uint4 *>(out)[(size_t)r * chunks + c] =
            reinterpret_cast<const uint4 *>(in)[(size_t)rows[off + r] * chunks + c];
    }
}
static __global__ void tt_scatter_kernel(const bf16 *__restrict__ in, const int *__restrict__ rows, const int *n_dev,
                                         int off, int cap, int D, bf16 *__restrict__ out) {
    int n = *n_dev - off;
    n = n < 0 ? 0 : (n > cap ? cap : n);
    const int chunks = D / 8;
    const long long total = (long long)n * chunks;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(i / chunks), c = (int)(i - (long long)r * chunks);
        reinterpret_cast<uint4 *>(out)[(size_t)rows[off + r] * chunks + c] =
            reinterpret_cast<const uint4 *>(in)[(size_t)r * chunks + c];
    }
}

// Dense rows, forward element-wise: one block per chunk row i: G[i] <- bf16(relu(g) * u) (non-gated: relu(g)),
// row_l1[rows[off + i]] = sum |relu(g) * u| (fp32, block_sum: fixed order), fired flags.
static __global__ void __launch_bounds__(TT_THREADS) tt_dense_fwd_ew_kernel(bf16 *__restrict__ G, const bf16 *__restrict__ U,
                                                                          const int *__restrict__ rows, const int *n_dev,
                                                                          int off, int cap, int F, int gated,
                                                                          float *__restrict__ row_l1,
                                                                          uint8_t *__restrict__ fired) {
    __shared__ float sh[32];
    int n = *n_dev - off;
    n = n < 0 ? 0 : (n > cap ? cap : n);
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        float l1 = 0.0f;
        for (int c = 8 * threadIdx.x; c < F; c += 8 * TT_THREADS) {
            float g[8], u[8], h[8];
            load8_bf16(G + (size_t)i * F + c, g);
            if (gated) load8_bf16(U + (size_t)i * F + c, u);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const bool on = g[j] > 0.0f;
                h[j] = on ? (gated ? g[j] * u[j] : g[j]) : 0.0f;
                l1 += fabsf(h[j]);
                if (on && !fired[c + j]) fired[c + j] = 1;
            }
            store8_bf16(G + (size_t)i * F + c, h);
        }
        l1 = block_sum(l1, sh);
        if (threadIdx.x == 0) row_l1[rows[off + i]] = l1;
        __syncthreads();
    }
}

// Final statistics (one block of 1024 threads): L1 = fixed-order sum of row_l1; copies the gate counters.
static __global__ void __launch_bounds__(1024) tt_stats_kernel(const float *__restrict__ row_l1, int M,
                                                               const TwellCounters *__restrict__ gc,
                                                               TwTrainStats *__restrict__ st, float *l1_accum,
                                                               unsigned long long *nnz_accum) {
    __shared__ float sh[32];
    float s = 0.0f;
    for (int r = threadIdx.x; r < M; r += blockDim.x) s += row_l1[r];
    s = block_sum(s, sh);
    if (threadIdx.x == 0) {
        st->l1 = s;
        st->pairs = gc->nnz;
        st->n_overflow = gc->n_ovf;
        if (l1_accum) *l1_accum += s;
        if (nnz_accum) *nnz_accum += gc->nnz;
    }
}

// ---------------------------------------------------------------------------------------------------
// Backward kernels
// ---------------------------------------------------------------------------------------------------
// One CTA per sparse row: dh = bf16(dot(dY[r], WdT[n])) per pair, then (dg, du); keys (unit) and rows for the sort.
template <int DV>
static __global__ void __launch_bounds__(TT_THREADS, 3) tt_bwd_dh_kernel(
    const bf16 *__restrict__ dY, const bf16 *__restrict__ WdT, const uint2 *__restrict__ recs,
    const int *__restrict__ row_ptr, const int *__restrict__ row_cnt, int gated, float l1_coef,
    uint32_t *__restrict__ dgu, int *__restrict__ pair_row, uint16_t *__restrict__ keys, int *__restrict__ unit_cnt) {
    constexpr int D = DV * 256;
    const int r = blockIdx.x;
    const int n = row_cnt[r];
    if (n <= 0) return;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, base = row_ptr[r];
    uint4 y[DV];
#pragma unroll
    for (int j = 0; j < DV; j++) y[j] = *reinterpret_cast<const uint4 *>(dY + (size_t)r * D + 256 * j + 8 * lane);
    for (int k = warp; k < n; k += TT_THREADS / 32) {
        const uint2 rec = recs[base + k];
        const bf16 *w = WdT + (size_t)rec.x * D + 8 * lane;
        uint4 wv[DV];
#pragma unroll
        for (int j = 0; j < DV; j++) wv[j] = __ldg(reinterpret_cast<const uint4 *>(w + 256 * j));
        float s = 0.0f;
#pragma unroll
        for (int j = 0; j < DV; j++) s += tt_dot8b(wv[j], y[j]);
        s = warp_sum(s);
        if (lane == 0) {
            const float dh = round_bf16(s), g = tt_bf(rec.y & 0xFFFFu);
            uint32_t out;
            if (gated) {
                const float u = tt_bf(rec.y >> 16);
                const float sg = u > 0.0f ? 1.0f : (u < 0.0f ? -1.0f : 0.0f);
                const float dt = dh + l1_coef * sg;
                out = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(dt * u)) |
                      ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(dt * g)) << 16);
            } else {
                out = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(dh + l1_coef));
            }
            dgu[base + k] = out;
            pair_row[base + k] = r;
            keys[base + k] = (uint16_t)rec.x;
            atomicAdd(&unit_cnt[rec.x], 1);
        }
    }
}

// One CTA per sparse row: dX[r] = sum_k dg_k Wg[n_k] + du_k Wu[n_k] (non-gated: dpre_k Wu[n_k]), one fp32 accumulator,
// on the columns [col_begin, col_end): the backward runs it on the two halves of D one after the other, so that
// the halves of Wg and Wu in use (23 MB at the paper's shape) stay in L2.
static __global__ void __launch_bounds__(TT_THREADS) tt_bwd_dx_kernel(
    const bf16 *__restrict__ Wg, const bf16 *__restrict__ Wu, const uint2 *__restrict__ recs,
    const uint32_t *__restrict__ dgu, const int *__restrict__ row_ptr, const int *__restrict__ row_cnt, int D, int gated,
    int col_begin, int col_end, bf16 *__restrict__ dX) {
    __shared__ int s_unit[TT_ROW_SMEM];
    __shared__ float s_dg[TT_ROW_SMEM], s_du[TT_ROW_SMEM];
    const int r = blockIdx.x;
    const int n = row_cnt[r];
    if (n < 0) return;
    const int base = row_ptr[r];
    for (int k = threadIdx.x; k < n; k += blockDim.x) {
        const uint32_t d = dgu[base + k];
        s_unit[k] = (int)recs[base + k].x;
        s_dg[k] = tt_bf(d & 0xFFFFu);
        s_du[k] = tt_bf(d >> 16);
    }
    __syncthreads();
    const bf16 *W1 = gated ? Wg : Wu;
    for (int c0 = col_begin + 8 * threadIdx.x; c0 < col_end; c0 += 8 * blockDim.x) {
        float acc[8];
#pragma unroll
        for (int i = 0; i < 8; i++) acc[i] = 0.0f;
        int k = 0;
        for (; k + 2 <= n; k += 2) {
            uint4 a[2], b[2];
#pragma unroll
            for (int q = 0; q < 2; q++) {
                a[q] = __ldg(reinterpret_cast<const uint4 *>(W1 + (size_t)s_unit[k + q] * D + c0));
                if (gated) b[q] = __ldg(reinterpret_cast<const uint4 *>(Wu + (size_t)s_unit[k + q] * D + c0));
            }
#pragma unroll
            for (int q = 0; q < 2; q++) {
                const float dg = s_dg[k + q], du = s_du[k + q];
                const __nv_bfloat162 *a2 = reinterpret_cast<const __nv_bfloat162 *>(&a[q]);
                const __nv_bfloat162 *b2 = reinterpret_cast<const __nv_bfloat162 *>(&b[q]);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float2 fa = __bfloat1622float2(a2[i]);
                    acc[2 * i] = fmaf(dg, fa.x, acc[2 * i]);
                    acc[2 * i + 1] = fmaf(dg, fa.y, acc[2 * i + 1]);
                    if (gated) {
                        const float2 fb = __bfloat1622float2(b2[i]);
                        acc[2 * i] = fmaf(du, fb.x, acc[2 * i]);
                        acc[2 * i + 1] = fmaf(du, fb.y, acc[2 * i + 1]);
                    }
                }
            }
        }
        for (; k < n; k++) {
            const uint4 a = __ldg(reinterpret_cast<const uint4 *>(W1 + (size_t)s_unit[k] * D + c0));
            uint4 b = make_uint4(0, 0, 0, 0);
            if (gated) b = __ldg(reinterpret_cast<const uint4 *>(Wu + (size_t)s_unit[k] * D + c0));
            const float dg = s_dg[k], du = s_du[k];
            const __nv_bfloat162 *a2 = reinterpret_cast<const __nv_bfloat162 *>(&a);
            const __nv_bfloat162 *b2 = reinterpret_cast<const __nv_bfloat162 *>(&b);
#pragma unroll
            for (int i = 0; i < 4; i++) {
                const float2 fa = __bfloat1622float2(a2[i]);
                acc[2 * i] = fmaf(dg, fa.x, acc[2 * i]);
                acc[2 * i + 1] = fmaf(dg, fa.y, acc[2 * i + 1]);
                if (gated) {
                    const float2 fb = __bfloat1622float2(b2[i]);
                    acc[2 * i] = fmaf(du, fb.x, acc[2 * i]);
                    acc[2 * i + 1] = fmaf(du, fb.y, acc[2 * i + 1]);
                }
            }
        }
        store8_bf16(dX + (size_t)r * D + c0, acc);
    }
}

// Segments per unit: max(1, ceil(cnt / TT_SEG)) (every unit has a first segment: it writes dW even with no pairs).
static __global__ void tt_seg_count_kernel(int *__restrict__ unit_cnt, int *__restrict__ seg_cnt, int F) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < F) {
        const int c = unit_cnt[n];
        seg_cnt[n] = c <= TT_SEG ? 1 : (c + TT_SEG - 1) / TT_SEG;
    } else if (n == F) {
        seg_cnt[F] = 0;
        unit_cnt[F] = 0;
    }
}

// seg_unit[b] = the unit of segment b.
static __global__ void tt_seg_unit_kernel(const int *__restrict__ seg_off, int F, int *__restrict__ seg_unit) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n < F)
        for (int b = seg_off[n]; b < seg_off[n + 1]; b++) seg_unit[b] = n;
}

// One CTA per (column slice of 256, unit, segment), slice-major (blockIdx = slice * segs_grid + segment index): sums over
// the segment's pairs (token order) of dg X[r], du X[r], h dY[r] on the slice's columns. Slice-major order keeps the
// concurrently running CTAs on one slice of X and dY (M x 256 x 2 x 2 B: 16.8 MB at M 16384), which stays in L2.
// Warp w takes pairs w, w + 8, ...; the 8 warp sums are added in warp order (fixed). Segment 0 writes
// dWg[n] = beta dWg[n] + sum (likewise dWu) and dWdT[n] = sum; segment s > 0 writes partial slot seg_off[n] - n + s - 1.
static __global__ void __launch_bounds__(TT_THREADS) tt_wgrad_kernel(
    const bf16 *__restrict__ X, const bf16 *__restrict__ dY, const uint2 *__restrict__ recs,
    const uint32_t *__restrict__ dgu, const int *__restrict__ pair_row, const int *__restrict__ perm,
    const int *__restrict__ unit_off, const int *__restrict__ seg_off, const int *__restrict__ seg_unit, int F, int D,
    int gated, int accumulate, int segs_grid, float *__restrict__ dWg, float *__restrict__ dWu, float *__restrict__ dWdT, float *__restrict__ part) {
    __shared__ int s_row[TT_SEG];
    __shared__ float s_a[TT_SEG], s_b[TT_SEG], s_h[TT_SEG];
    __shared__ float s_red[3][TT_THREADS / 32][256];
    const int slice = blockIdx.x / segs_grid, b = blockIdx.x - slice * segs_grid;
    if (b >= seg_off[F]) return;
    const int n = seg_unit[b], s = b - seg_off[n];
    const int p0 = unit_off[n] + s * TT_SEG, pend = unit_off[n + 1];
    const int cnt = pend - p0 < TT_SEG ? (pend - p0 > 0 ? pend - p0 : 0) : TT_SEG;
    for (int i = threadIdx.x; i < cnt; i += TT_THREADS) {
        const int p = perm[p0 + i];
        const uint32_t gu = recs[p].y, d = dgu[p];
        const float g = tt_bf(gu & 0xFFFFu), u = tt_bf(gu >> 16);
        s_row[i] = pair_row[p];
        s_a[i] = tt_bf(d & 0xFFFFu);   // dg (non-gated: dpre, the gradient of Wu)
        s_b[i] = tt_bf(d >> 16);       // du
        s_h[i] = gated ? round_bf16(g * u) : g;
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, c0 = slice * 256 + 8 * lane;
    float aa[8], ab[8], ad[8];
#pragma unroll
    for (int i = 0; i < 8; i++) aa[i] = ab[i] = ad[i] = 0.0f;
#pragma unroll 4
    for (int i = warp; i < cnt; i += TT_THREADS / 32) {
        float x[8], y[8];
        load8_bf16(X + (size_t)s_row[i] * D + c0, x);
        load8_bf16(dY + (size_t)s_row[i] * D + c0, y);
        const float a = s_a[i], bb = s_b[i], h = s_h[i];
#pragma unroll
        for (int j = 0; j < 8; j++) {
            aa[j] = fmaf(a, x[j], aa[j]);
            if (gated) ab[j] = fmaf(bb, x[j], ab[j]);
            ad[j] = fmaf(h, y[j], ad[j]);
        }
    }
#pragma unroll
    for (int j = 0; j < 8; j++) {
        s_red[0][warp][8 * lane + j] = aa[j];
        s_red[1][warp][8 * lane + j] = ab[j];
        s_red[2][warp][8 * lane + j] = ad[j];
    }
    __syncthreads();
    const int t = threadIdx.x, c = slice * 256 + t;  // thread t: column t of the slice
    float sa = 0.0f, sb = 0.0f, sd = 0.0f;
#pragma unroll
    for (int w = 0; w < TT_THREADS / 32; w++) {
        sa += s_red[0][w][t];
        sb += s_red[1][w][t];
        sd += s_red[2][w][t];
    }
    if (s == 0) {
        float *Wa = gated ? dWg : dWu;
        Wa[(size_t)n * D + c] = accumulate ? Wa[(size_t)n * D + c] + sa : sa;
        if (gated) dWu[(size_t)n * D + c] = accumulate ? dWu[(size_t)n * D + c] + sb : sb;
        dWdT[(size_t)n * D + c] = sd;
    } else {
        float *q = part + (size_t)(seg_off[n] - n + s - 1) * 3 * D + c;
        q[0] = sa;
        q[D] = sb;
        q[2 * D] = sd;
    }
}

// Adds the partial sums of the units with several segments, in segment order.
static __global__ void __launch_bounds__(TT_THREADS) tt_wgrad_reduce_kernel(const int *__restrict__ seg_off, int D,
                                                                          int gated, float *__restrict__ dWg,
                                                                          float *__restrict__ dWu,
                                                                          float *__restrict__ dWdT,
                                                                          const float *__restrict__ part) {
    const int n = blockIdx.x, ns = seg_off[n + 1] - seg_off[n];
    if (ns <= 1) return;
    float *Wa = gated ? dWg : dWu;
    for (int c = threadIdx.x; c < D; c += TT_THREADS) {
        float a = Wa[(size_t)n * D + c], b = gated ? dWu[(size_t)n * D + c] : 0.0f, d = dWdT[(size_t)n * D + c];
        for (int s = 1; s < ns; s++) {
            const float *q = part + (size_t)(seg_off[n] - n + s - 1) * 3 * D + c;
            a += q[0];
            b += q[D];
            d += q[2 * D];
        }
        Wa[(size_t)n * D + c] = a;
        if (gated) dWu[(size_t)n * D + c] = b;
        dWdT[(size_t)n * D + c] = d;
    }
}

// Dense rows, backward element-wise (core/ffn.cuh's ffn_backward, plus h): reads g (G), u (U), dh (DH); writes
// dg -> G, du -> U, h -> DH (non-gated: dpre -> G, h -> DH).
static __global__ void tt_dense_bwd_ew_kernel(bf16 *__restrict__ G, bf16 *__restrict__ U, bf16 *__restrict__ DH,
                                              const int *n_dev, int off, int cap, int F, int gated, float l1_coef) {
    int n = *n_dev - off;
    n = n < 0 ? 0 : (n > cap ? cap : n);
    const long long total = (long long)n * F / 8;
    for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < total; v += (long long)gridDim.x * blockDim.x) {
        const size_t i = (size_t)v * 8;
        float g[8], u[8], d[8], dg[8], du[8], h[8];
        load8_bf16(G + i, g);
        if (gated) load8_bf16(U + i, u);
        load8_bf16(DH + i, d);
#pragma unroll
        for (int j = 0; j < 8; j++) {
            const bool on = g[j] > 0.0f;
            if (gated) {
                const float s = on ? (u[j] > 0.0f ? 1.0f : (u[j] < 0.0f ? -1.0f : 0.0f)) : 0.0f;
                const float dt = d[j] + l1_coef * s;
                dg[j] = on ? dt * u[j] : 0.0f;
                du[j] = on ? dt * g[j] : 0.0f;
                h[j] = on ? g[j] * u[j] : 0.0f;
            } else {
                dg[j] = on ? d[j] + l1_coef : 0.0f;
                h[j] = on ? g[j] : 0.0f;
            }
        }
        store8_bf16(G + i, dg);
        if (gated) store8_bf16(U + i, du);
        store8_bf16(DH + i, h);
    }
}

// dWd[d][f] = (accumulate ? dWd[d][f] : 0) + T[f][d]  (T [F, D]), 32 x 32 tiles.
static __global__ void tt_transpose_add_kernel(const float *__restrict__ T, float *__restrict__ dWd, int F, int D,
                                               int accumulate) {
    __shared__ float tile[32][33];
    const int f0 = blockIdx.y * 32, d0 = blockIdx.x * 32;
    for (int i = threadIdx.y; i < 32; i += blockDim.y) tile[i][threadIdx.x] = T[(size_t)(f0 + i) * D + d0 + threadIdx.x];
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        float *p = dWd + (size_t)(d0 + i) * F + f0 + threadIdx.x;
        const float v = tile[threadIdx.x][i];
        *p = accumulate ? *p + v : v;
    }
}

// ---------------------------------------------------------------------------------------------------
// Host API
// ---------------------------------------------------------------------------------------------------
// Stage events (ws->prof_on): forward 0 start, 1 gate, 2 classify/scan/select, 3 up+down, 4 dense rows, 5 stats;
// backward 6 start, 7 dh, 8 dX, 9 sort/scans, 10 weight gradients, 11 dense rows, 12 transpose.
enum { TT_PROF_N = 13 };
static const char *const TT_PROF_NAMES[TT_PROF_N] = {"", "gate", "classify", "updown", "dense", "stats", "",
                                                     "dh", "dX", "sort", "wgrad", "dense", "transp"};
static inline void tt_prof(TwTrainWS *ws, int i, cudaStream_t s) {
    if (ws->prof_on) cudaCheck(cudaEventRecord(ws->prof[i], s));
}
static inline void twtrain_prof_enable(TwTrainWS *ws) {
    if (!ws->prof_on)
        for (int i = 0; i < TT_PROF_N; i++) cudaCheck(cudaEventCreate(&ws->prof[i]));
    ws->prof_on = 1;
}
static inline int tt_check_shape(int D, int F) {
    if (D % 256 || D < 256 || D > 4096 || F % 256 || F < 256 || F > 8192) {
        fprintf(stderr, "error: twell train ffn: D=%d must be a multiple of 256 in [256, 4096], F=%d a multiple of 256 "
                        "in [256, 8192]\n", D, F);
        return TWELL_ERR_SHAPE;
    }
    return TWELL_OK;
}

// Workspace for layers of shape (D, F) and up to max_M tokens. pairs_per_row: pair pool capacity per token (the pool
// holds max_M * pairs_per_row pairs; rows past it run densely and are counted); dense_row_nnz: rows with more active
// units run densely; dense_chunk: rows per dense-row chunk. 0 = defaults. mm: cuBLASLt context for the gate off
// Hopper (may be NULL on Hopper).
static int twtrain_ws_init(TwTrainWS *ws, int max_M, int D, int F, int gated, int pairs_per_row, int dense_row_nnz,
                           int dense_chunk, MatmulContext *mm) {
    memset(ws, 0, sizeof(*ws));
    if (tt_check_shape(D, F)) return TWELL_ERR_SHAPE;
    if (max_M < 1) { fprintf(stderr, "error: twell train ffn: max_M=%d\n", max_M); return TWELL_ERR_SHAPE; }
    ws->max_M = max_M; ws->D = D; ws->F = F; ws->C = TWELL_DEFAULT_C; ws->gated = gated; ws->mm = mm;
    if (pairs_per_row <= 0) pairs_per_row = TT_DEFAULT_PAIRS_PER_ROW;
    ws->dense_row_nnz = dense_row_nnz > 0 ? dense_row_nnz : TT_DEFAULT_DENSE_ROW_NNZ;
    ws->dense_chunk = dense_chunk > 0 ? dense_chunk : TT_DEFAULT_DENSE_CHUNK;
    if (ws->dense_chunk > max_M) ws->dense_chunk = max_M;
    const long long cap = (long long)max_M * pairs_per_row;
    if (cap > (1ll << 30)) { fprintf(stderr, "error: twell train ffn: pair pool %lld too large\n", cap); return TWELL_ERR_SHAPE; }
    ws->cap_pairs = (int)cap;
    ws->part_slots = ws->cap_pairs / TT_SEG + 1;
    int dev = 0, major = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    ws->use_wgmma = major == 9;
    const size_t M = max_M, P = ws->cap_pairs, Rc = ws->dense_chunk;
    cudaCheck(cudaMalloc(&ws->tw, M * (F / ws->C) * sizeof(uint32_t)));
    cudaCheck(cudaMalloc(&ws->ovf_flag, M * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->ovf_list, M * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->counters, sizeof(TwellCounters)));
    if (!ws->use_wgmma) {
        if (!mm) { fprintf(stderr, "error: twell train ffn: the cuBLASLt gate needs a MatmulContext\n"); return TWELL_ERR_ARG; }
        ws->gate_chunk = max_M < 4096 ? max_M : 4096;
        cudaCheck(cudaMalloc(&ws->gate_scratch, (size_t)ws->gate_chunk * F * sizeof(bf16)));
        cudaCheck(cudaEventCreateWithFlags(&ws->gate_done, cudaEventDisableTiming));
    }
    cudaCheck(cudaMalloc(&ws->cnt_elig, (M + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->dense_flag, M));
    cudaCheck(cudaMalloc(&ws->row_l1, M * sizeof(float)));
    cudaCheck(cudaMalloc(&ws->dgu, P * sizeof(uint32_t)));
    cudaCheck(cudaMalloc(&ws->pair_row, P * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->keys_in, P * sizeof(uint16_t)));
    cudaCheck(cudaMalloc(&ws->keys_out, P * sizeof(uint16_t)));
    cudaCheck(cudaMalloc(&ws->vals_in, P * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->vals_out, P * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->unit_cnt, (F + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->unit_off, (F + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->seg_cnt, (F + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->seg_off, (F + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->seg_unit, ((size_t)F + ws->part_slots) * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->part, (size_t)ws->part_slots * 3 * D * sizeof(float)));
    cudaCheck(cudaMalloc(&ws->dwdT, (size_t)F * D * sizeof(float)));
    cudaCheck(cudaMalloc(&ws->xd, Rc * D * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ws->dyd, Rc * D * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ws->yd, Rc * D * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ws->g, Rc * F * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ws->u, Rc * F * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ws->dh, Rc * F * sizeof(bf16)));
    {  // vals_in = 0, 1, 2, ... (the pool slot index, the payload of the sort)
        int *h = (int *)malloc(P * sizeof(int));
        for (size_t i = 0; i < P; i++) h[i] = (int)i;
        cudaCheck(cudaMemcpy(ws->vals_in, h, P * sizeof(int), cudaMemcpyHostToDevice));
        free(h);
    }
    // cub temporary storage: the largest of the scans, the selection and the sort
    size_t b1 = 0, b2 = 0, b3 = 0, b4 = 0;
    cudaCheck(cub::DeviceScan::ExclusiveSum(NULL, b1, ws->cnt_elig, ws->cnt_elig, max_M + 1));
    cudaCheck(cub::DeviceSelect::Flagged(NULL, b2, thrust::counting_iterator<int>(0), ws->dense_flag, ws->ovf_list,
                                         ws->ovf_flag, max_M));
    cudaCheck(cub::DeviceRadixSort::SortPairs(NULL, b3, ws->keys_in, ws->keys_out, ws->vals_in, ws->vals_out,
                                              ws->cap_pairs, 0, 16));
    cudaCheck(cub::DeviceScan::ExclusiveSum(NULL, b4, ws->unit_cnt, ws->unit_off, F + 1));
    ws->cub_bytes = std::max(std::max(b1, b2), std::max(b3, b4));
    cudaCheck(cudaMalloc(&ws->cub_tmp, ws->cub_bytes));
    return TWELL_OK;
}

static void twtrain_ws_free(TwTrainWS *ws) {
    void *p[] = {ws->tw, ws->ovf_flag, ws->ovf_list, ws->counters, ws->gate_scratch, ws->cnt_elig, ws->dense_flag,
                 ws->row_l1, ws->dgu, ws->pair_row, ws->keys_in, ws->keys_out, ws->vals_in, ws->vals_out, ws->unit_cnt,
                 ws->unit_off, ws->seg_cnt, ws->seg_off, ws->seg_unit, ws->part, ws->dwdT, ws->xd, ws->dyd, ws->yd, ws->g, ws->u,
                 ws->dh, ws->cub_tmp};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
        if (p[i]) cudaCheck(cudaFree(p[i]));
    if (ws->prof_on)
        for (int i = 0; i < TT_PROF_N; i++) cudaCheck(cudaEventDestroy(ws->prof[i]));
    if (ws->gate_done) cudaCheck(cudaEventDestroy(ws->gate_done));
    memset(ws, 0, sizeof(*ws));
}

// Bytes of the workspace and of one layer's state (for the memory table).
static inline size_t twtrain_state_bytes(const TwTrainWS *ws) {
    return (size_t)ws->cap_pairs * sizeof(uint2) + ((size_t)ws->max_M * 3 + 1) * sizeof(int) + sizeof(TwTrainStats);
}

static int twtrain_state_alloc(TwTrainState *st, const TwTrainWS *ws) {
    memset(st, 0, sizeof(*st));
    st->max_M = ws->max_M;
    st->cap_pairs = ws->cap_pairs;
    cudaCheck(cudaMalloc(&st->recs, (size_t)ws->cap_pairs * sizeof(uint2)));
    cudaCheck(cudaMalloc(&st->row_ptr, ((size_t)ws->max_M + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&st->row_cnt, (size_t)ws->max_M * sizeof(int)));
    cudaCheck(cudaMalloc(&st->dense_rows, (size_t)ws->max_M * sizeof(int)));
    cudaCheck(cudaMalloc(&st->stats, sizeof(TwTrainStats)));
    cudaCheck(cudaMemset(st->stats, 0, sizeof(TwTrainStats)));
    return TWELL_OK;
}
static void twtrain_state_free(TwTrainState *st) {
    void *p[] = {st->recs, st->row_ptr, st->row_cnt, st->dense_rows, st->stats};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
        if (p[i]) cudaCheck(cudaFree(p[i]));
    memset(st, 0, sizeof(*st));
}

static inline int tt_grid_rows(long long work) {
    long long b = CEIL_DIV(work, 256LL);
    const long long cap = (long long)cuda_sm_count() * 8;
    return (int)(b < 1 ? 1 : (b > cap ? cap : b));
}

// GEMM shorthand: C = A op B with A [m, k] k-contiguous.
static inline TtGemmArgs tt_args(const bf16 *A, long long lda, int a_kc, const bf16 *B, long long ldb, int b_kc,
                                 void *C, long long ldc, int c_f32, int accumulate, int M, int N, int K) {
    TtGemmArgs a;
    memset(&a, 0, sizeof(a));
    a.A = A; a.lda = lda; a.a_kc = a_kc; a.B = B; a.ldb = ldb; a.b_kc = b_kc; a.C = C; a.ldc = ldc; a.c_f32 = c_f32;
    a.accumulate = accumulate; a.M = M; a.N = N; a.K = K;
    return a;
}

// Forward. X [M, D]; Wg (NULL for non-gated), Wu, WdT [F, D]; writes Y [M, D] (every row) and the state.
// Statistics (optional, device, no sync): *l1_accum += the layer's sum |h| (one fixed-order value), *nnz_accum +=
// active pairs, fired[n] = 1 for every unit active in some row. The state's stats hold the rest.
static int twtrain_forward(TwTrainWS *ws, TwTrainState *st, const bf16 *X, const bf16 *Wg, const bf16 *Wu,
                           const bf16 *WdT, bf16 *Y, int M, float *l1_accum, unsigned long long *nnz_accum,
                           uint8_t *fired, cudaStream_t stream) {
    const int D = ws->D, F = ws->F, gated = ws->gated, words = TWELL_TILE / ws->C, tiles = F / TWELL_TILE;
    if (M < 1 || M > ws->max_M || (gated && !Wg) || !Wu || !WdT || !X || !Y || !fired) {
        fprintf(stderr, "error: twell train ffn forward: bad arguments (M=%d max_M=%d)\n", M, ws->max_M);
        return TWELL_ERR_ARG;
    }
    st->M = M;
    const bf16 *Wgate = gated ? Wg : Wu;
    tt_prof(ws, 0, stream);
    cudaCheck(cudaMemsetAsync(ws->ovf_flag, 0, (size_t)M * sizeof(int), stream));
    cudaCheck(cudaMemsetAsync(ws->counters, 0, sizeof(TwellCounters), stream));
    cudaCheck(cudaMemsetAsync(st->stats, 0, sizeof(TwTrainStats), stream));
    if (ws->use_wgmma) {
        const int e = twell_gate_wgmma_launch(X, Wgate, M, D, F, ws->C, ws->tw, ws->ovf_flag, ws->ovf_list, ws->counters,
                                              stream);
        if (e) return e;
    } else {
        // off Hopper: the cuBLASLt GEMM and the full pack per chunk, serially on one stream (the plain GEMM: the pack
        // needs no bit mask, so no mask buffers)
        int no_mask = 1;
        for (int r0 = 0; r0 < M; r0 += ws->gate_chunk) {
            const int rows = M - r0 < ws->gate_chunk ? M - r0 : ws->gate_chunk;
            twell_gate_chunk(ws->mm, X, Wgate, rows, r0, D, F, ws->C, ws->gate_scratch, NULL, &no_mask, ws->tw,
                             ws->ovf_flag, ws->ovf_list, ws->counters, stream, stream, ws->gate_done);
        }
    }
    tt_prof(ws, 1, stream);
    tt_classify_kernel<<<CEIL_DIV(M + 1, 8), 256, 0, stream>>>(ws->tw, M, tiles, words, ws->dense_row_nnz, ws->cnt_elig,
                                                               st->row_cnt, st->stats);
    cudaCheckLaunch();
    size_t bytes = ws->cub_bytes;
    cudaCheck(cub::DeviceScan::ExclusiveSum(ws->cub_tmp, bytes, ws->cnt_elig, st->row_ptr, M + 1, stream));
    tt_assign_kernel<<<CEIL_DIV(M, 256), 256, 0, stream>>>(st->row_ptr, st->row_cnt, M, ws->cap_pairs, ws->dense_flag,
                                                           st->stats);
    cudaCheckLaunch();
    bytes = ws->cub_bytes;
    cudaCheck(cub::DeviceSelect::Flagged(ws->cub_tmp, bytes, thrust::counting_iterator<int>(0), ws->dense_flag,
                                         st->dense_rows, &st->stats->n_dense, M, stream));
    tt_prof(ws, 2, stream);
    switch (D / 256) {
#define TT_FWD(DV)                                                                                                   \
    case DV:                                                                                                         \
        tt_fwd_up_kernel<DV><<<M, TT_THREADS, 0, stream>>>(X, Wu, WdT, ws->tw, st->row_ptr, st->row_cnt, M, F,      \
                                                           words, gated, st->recs, Y, ws->row_l1, fired);            \
        break;
        TT_FWD(1) TT_FWD(2) TT_FWD(4) TT_FWD(8) TT_FWD(16)
#undef TT_FWD
    default:
        fprintf(stderr, "error: twell train ffn: D=%d: D/256 must be 1, 2, 4, 8 or 16\n", D);
        return TWELL_ERR_SHAPE;
    }
    cudaCheckLaunch();
    tt_fwd_down_kernel<<<M, TT_THREADS, 0, stream>>>(WdT, st->recs, st->row_ptr, st->row_cnt, D, gated, Y);
    cudaCheckLaunch();
    tt_prof(ws, 3, stream);
    // dense rows, chunk by chunk (kernels read the count from st->stats->n_dense)
    const int Rc = ws->dense_chunk;
    const int *nd = &st->stats->n_dense;
    for (int c0 = 0; c0 < M; c0 += Rc) {
        const int cap = M - c0 < Rc ? M - c0 : Rc;
        tt_gather_kernel<<<tt_grid_rows((long long)cap * D / 8), 256, 0, stream>>>(X, st->dense_rows, nd, c0, cap, D,
                                                                                     ws->xd);
        cudaCheckLaunch();
        for (int gi = 0; gi < (gated ? 2 : 1); gi++) {
            TtGemmArgs a = tt_args(ws->xd, D, 1, gi == 0 ? Wgate : Wu, D, 1, gi == 0 ? ws->g : ws->u, F, 0, 0, 0, F, D);
            a.dev_n = nd; a.dev_off = c0; a.dev_cap = cap; a.dev_dim = 1;
            tt_gemm(&a, cap, stream);
        }
        tt_dense_fwd_ew_kernel<<<cuda_sm_count() * 4, TT_THREADS, 0, stream>>>(ws->g, ws->u, st->dense_rows, nd, c0, cap,
                                                                               F, gated, ws->row_l1, fired);
        cudaCheckLaunch();
        TtGemmArgs a = tt_args(ws->g, F, 1, WdT, D, 0, ws->yd, D, 0, 0, 0, D, F);
        a.dev_n = nd; a.dev_off = c0; a.dev_cap = cap; a.dev_dim = 1;
        tt_gemm(&a, cap, stream);
        tt_scatter_kernel<<<tt_grid_rows((long long)cap * D / 8), 256, 0, stream>>>(ws->yd, st->dense_rows, nd, c0, cap,
                                                                                      D, Y);
        cudaCheckLaunch();
    }
    tt_prof(ws, 4, stream);
    tt_stats_kernel<<<1, 1024, 0, stream>>>(ws->row_l1, M, ws->counters, st->stats, l1_accum, nnz_accum);
    cudaCheckLaunch();
    tt_prof(ws, 5, stream);
    return TWELL_OK;
}

// Backward. X, dY [M, D] (M of the forward); writes dX [M, D]; dWg, dWu [F, D] and dWd [D, F] fp32:
// accumulate = 1 adds into them, 0 overwrites. l1_coef as core/ffn.cuh (lambda / (L * tokens of the step)).
static int twtrain_backward(TwTrainWS *ws, const TwTrainState *st, const bf16 *X, const bf16 *dY, const bf16 *Wg,
                            const bf16 *Wu, const bf16 *WdT, bf16 *dX, float *dWg, float *dWu, float *dWd,
                            int accumulate, float l1_coef, cudaStream_t stream) {
    const int D = ws->D, F = ws->F, gated = ws->gated, M = st->M;
    if (M < 1 || (gated && (!Wg || !dWg)) || !Wu || !WdT || !dX || !dWu || !dWd) {
        fprintf(stderr, "error: twell train ffn backward: bad arguments (M=%d)\n", M);
        return TWELL_ERR_ARG;
    }
    const bf16 *Wgate = gated ? Wg : Wu;
    tt_prof(ws, 6, stream);
    cudaCheck(cudaMemsetAsync(ws->keys_in, 0xFF, (size_t)ws->cap_pairs * sizeof(uint16_t), stream));
    cudaCheck(cudaMemsetAsync(ws->unit_cnt, 0, (size_t)(F + 1) * sizeof(int), stream));
    switch (D / 256) {
#define TT_DH(DV)                                                                                                    \
    case DV:                                                                                                         \
        tt_bwd_dh_kernel<DV><<<M, TT_THREADS, 0, stream>>>(dY, WdT, st->recs, st->row_ptr, st->row_cnt, gated,      \
                                                           l1_coef, ws->dgu, ws->pair_row, ws->keys_in, ws->unit_cnt); \
        break;
        TT_DH(1) TT_DH(2) TT_DH(4) TT_DH(8) TT_DH(16)
#undef TT_DH
    default: return TWELL_ERR_SHAPE;
    }
    cudaCheckLaunch();
    tt_prof(ws, 7, stream);
    for (int half = 0; half < 2; half++) {
        tt_bwd_dx_kernel<<<M, TT_THREADS / 2, 0, stream>>>(Wg, Wu, st->recs, ws->dgu, st->row_ptr, st->row_cnt, D, gated,
                                                          half * D / 2, (half + 1) * D / 2, dX);
        cudaCheckLaunch();
    }
    tt_prof(ws, 8, stream);
    // unit-major order: stable sort of the pool slots by unit (unused slots have key 0xFFFF and sort last)
    size_t bytes = ws->cub_bytes;
    cudaCheck(cub::DeviceRadixSort::SortPairs(ws->cub_tmp, bytes, ws->keys_in, ws->keys_out, ws->vals_in, ws->vals_out,
                                              ws->cap_pairs, 0, 16, stream));
    tt_seg_count_kernel<<<CEIL_DIV(F + 1, 256), 256, 0, stream>>>(ws->unit_cnt, ws->seg_cnt, F);
    cudaCheckLaunch();
    bytes = ws->cub_bytes;
    cudaCheck(cub::DeviceScan::ExclusiveSum(ws->cub_tmp, bytes, ws->unit_cnt, ws->unit_off, F + 1, stream));
    bytes = ws->cub_bytes;
    cudaCheck(cub::DeviceScan::ExclusiveSum(ws->cub_tmp, bytes, ws->seg_cnt, ws->seg_off, F + 1, stream));
    tt_prof(ws, 9, stream);
    tt_seg_unit_kernel<<<CEIL_DIV(F, 256), 256, 0, stream>>>(ws->seg_off, F, ws->seg_unit);
    cudaCheckLaunch();
    const int segs_grid = F + ws->part_slots;  // >= the segments of any pattern
    tt_wgrad_kernel<<<(D / 256) * segs_grid, TT_THREADS, 0, stream>>>(X, dY, st->recs, ws->dgu, ws->pair_row,
                                                                      ws->vals_out, ws->unit_off, ws->seg_off,
                                                                      ws->seg_unit, F, D,
                                                                      gated, accumulate, segs_grid, dWg, dWu, ws->dwdT,
                                                                      ws->part);
    cudaCheckLaunch();
    tt_wgrad_reduce_kernel<<<F, TT_THREADS, 0, stream>>>(ws->seg_off, D, gated, dWg, dWu, ws->dwdT, ws->part);
    cudaCheckLaunch();
    tt_prof(ws, 10, stream);
    // dense rows
    const int Rc = ws->dense_chunk;
    const int *nd = &st->stats->n_dense;
    for (int c0 = 0; c0 < M; c0 += Rc) {
        const int cap = M - c0 < Rc ? M - c0 : Rc;
        const int gr = tt_grid_rows((long long)cap * D / 8);
        tt_gather_kernel<<<gr, 256, 0, stream>>>(X, st->dense_rows, nd, c0, cap, D, ws->xd);
        tt_gather_kernel<<<gr, 256, 0, stream>>>(dY, st->dense_rows, nd, c0, cap, D, ws->dyd);
        cudaCheckLaunch();
        TtGemmArgs a;
        for (int gi = 0; gi < (gated ? 2 : 1); gi++) {  // recompute g (u)
            a = tt_args(ws->xd, D, 1, gi == 0 ? Wgate : Wu, D, 1, gi == 0 ? ws->g : ws->u, F, 0, 0, 0, F, D);
            a.dev_n = nd; a.dev_off = c0; a.dev_cap = cap; a.dev_dim = 1;
            tt_gemm(&a, cap, stream);
        }
        a = tt_args(ws->dyd, D, 1, WdT, D, 1, ws->dh, F, 0, 0, 0, F, D);  // dh = dY Wd
        a.dev_n = nd; a.dev_off = c0; a.dev_cap = cap; a.dev_dim = 1;
        tt_gemm(&a, cap, stream);
        tt_dense_bwd_ew_kernel<<<tt_grid_rows((long long)cap * F / 8), 256, 0, stream>>>(ws->g, ws->u, ws->dh, nd, c0,
                                                                                          cap, F, gated, l1_coef);
        cudaCheckLaunch();
        a = tt_args(ws->g, F, 1, gated ? Wg : Wu, D, 0, ws->yd, D, 0, 0, 0, D, F);  // dX = dg Wg + du Wu
        if (gated) { a.A2 = ws->u; a.B2 = Wu; }
        a.dev_n = nd; a.dev_off = c0; a.dev_cap = cap; a.dev_dim = 1;
        tt_gemm(&a, cap, stream);
        tt_scatter_kernel<<<gr, 256, 0, stream>>>(ws->yd, st->dense_rows, nd, c0, cap, D, dX);
        cudaCheckLaunch();
        // weight gradients: dW[f][d] += sum_r A[r][f] B[r][d]  (K = the chunk's rows, from the device)
        const bf16 *As[3] = {ws->g, ws->u, ws->dh}, *Bs[3] = {ws->xd, ws->xd, ws->dyd};
        float *Cs[3] = {gated ? dWg : dWu, dWu, ws->dwdT};
        for (int q = 0; q < 3; q++) {
            if (!gated && q == 1) continue;
            a = tt_args(As[q], F, 0, Bs[q], D, 0, Cs[q], D, 1, 1, F, D, 0);
            a.dev_n = nd; a.dev_off = c0; a.dev_cap = cap; a.dev_dim = 2;
            tt_gemm(&a, F, stream);
        }
    }
    tt_prof(ws, 11, stream);
    dim3 tb(32, 8), tg(D / 32, F / 32);
    tt_transpose_add_kernel<<<tg, tb, 0, stream>>>(ws->dwdT, dWd, F, D, accumulate);
    cudaCheckLaunch();
    tt_prof(ws, 12, stream);
    return TWELL_OK;
}

// ---------------------------------------------------------------------------------------------------
// The trainer's dense FFN (model/train_model.cuh's FFN part), the baseline and the reference of the tests and the bench.
// Wgu [G, F, D] (gate then up, contiguous; G = gated ? 2 : 1), Wd [D, F]; gu [G, M, F], h [M, F], dh [M, F] scratch.
// ---------------------------------------------------------------------------------------------------
static void twtrain_dense_forward(MatmulContext *mm, const bf16 *X, const bf16 *Wgu, const bf16 *Wd, bf16 *Y, bf16 *gu,
                                  bf16 *h, int M, int D, int F, int gated, float *l1_part, unsigned long long *nnz,
                                  uint8_t *fired, cudaStream_t s) {
    const int G = gated ? 2 : 1;
    matmul_strided_batched(mm, gu, 0, (long long)M * F, X, 0, 0, Wgu, 1, (long long)F * D, G, M, F, D, 1.0f, 0.0f, s);
    ffn_forward(h, gu, M, F, gated, l1_part, nnz, fired, s);
    matmul(mm, Y, 0, h, 0, Wd, 1, M, D, F, 1.0f, 0.0f, s);
}
// dWgu [G, F, D], dWd [D, F] fp32 (beta = accumulate); dX [M, D]. gu is overwritten by (dg, du).
static void twtrain_dense_backward(MatmulContext *mm, const bf16 *X, const bf16 *dY, const bf16 *Wgu, const bf16 *Wd,
                                   bf16 *dX, float *dWgu, float *dWd, bf16 *gu, const bf16 *h, bf16 *dh, int M, int D,
                                   int F, int gated, int accumulate, float l1_coef, cudaStream_t s) {
    const int G = gated ? 2 : 1;
    const float gb = accumulate ? 1.0f : 0.0f;
    matmul(mm, dWd, 1, dY, 1, h, 0, D, F, M, 1.0f, gb, s);
    matmul(mm, dh, 0, dY, 0, Wd, 0, M, F, D, 1.0f, 0.0f, s);
    ffn_backward(gu, dh, gu, M, F, gated, l1_coef, s);
    matmul_strided_batched(mm, dWgu, 1, (long long)F * D, gu, 1, (long long)M * F, X, 0, 0, G, F, D, M, 1.0f, gb, s);
    for (int gi = 0; gi < G; gi++)
        matmul(mm, dX, 0, gu + (size_t)gi * M * F, 0, Wgu + (size_t)gi * F * D, 0, M, D, F, 1.0f, gi == 0 ? 0.0f : 1.0f, s);
}

#endif  // SLLM_TWELL_TRAIN_FFN_CUH
