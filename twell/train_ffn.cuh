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
//   3. assign (one warp per row) writes each sparse row's TwELL entries (unit, g) to its pool slots; up (gated, one
//      CTA per sparse row, tt_pair_dot_kernel: each warp a 256-column part of the dot products, 8 pairs' weight rows
//      in flight) completes the record (unit, g, u); then the down (one CTA per sparse row): Y row = sum h WdT[n]
//      (separate kernels: each one's weight matrix stays in L2).
//   4. dense rows: one cooperative kernel (tt_dense_rows_fwd_kernel, twell/dense_rows.cuh) reads their count on the device and walks them
//      in chunks of dense_chunk rows: gather, GEMMs (tt_gemm_tiles, a tensor-core GEMM; split-K with an ordered
//      reduction when the rows are few), relu*mul, down GEMM, scatter, grid barriers between. No rows: it returns.
//   5. statistics (one block, fixed order): L1, pairs, max row nnz, dense / overflow / pool-full rows.
// Backward (no host sync):
//   1. dh (tt_pair_dot_kernel on dY and the gathered WdT rows, as the up) -> per pair a 16-byte backward record
//      (row, dg, du, h, unit) and its sort key (the unit, from the pattern only).
//   2. dX (one CTA per sparse row, ONE fp32 accumulator for dg Wg[n] + du Wu[n]).
//   3. stable radix sort of the backward records by unit (cub, stable: token order within a unit), unit counts and
//      offsets, segments of at most TT_SEG pairs and their descriptors. Steps 3 and 4 run on a second stream of high
//      priority (ws->side), beside step 2: they need only what dh wrote, and the L2 gathers of the two overlap.
//   4. unit-major weight gradients: one warp per (256-column slice, segment), slice-major so that the slice of X
//      and dY in use stays in L2: dWg[n], dWu[n], dWdT[n] over the segment's pairs in token order, fp32; the first
//      segment writes (beta * dW + sum), later segments write partial sums that a second kernel adds in segment
//      order: deterministic.
//   5. dense rows (tt_dense_rows_bwd_kernel, as in the forward): recompute g, u from X by GEMM, dh GEMM, element-wise
//      backward, dX GEMM (one fp32 accumulator over both products), scatter, weight-gradient GEMMs adding into dW.
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
#include "tc_utils.cuh"
#include "twell/dense_rows.cuh"
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
    cudaStream_t side;      // backward: the weight-gradient chain's stream (high priority), beside dX on the caller's
    cudaEvent_t fork_ev, join_ev;  // the fork after dh and the join before the dense rows
    MatmulContext *mm;   // the cuBLASLt gate only (not owned)
    int *cnt_elig;       // [max_M + 1]
    uint8_t *dense_flag; // [max_M]
    float *row_l1;       // [max_M]
    void *cub_tmp;
    size_t cub_bytes;
    // backward
    uint4 *bp_in, *bp_out;         // [cap_pairs] backward records (row, dg | du << 16, h bits, unit): pool / unit order
    uint16_t *keys_in, *keys_out;  // [cap_pairs] the units (sort keys)
    int *unit_cnt, *unit_off, *seg_cnt, *seg_off;  // [F + 1]
    int4 *seg_desc;      // [F + part_slots]: (first pair, pairs, unit, partial slot) of each weight-gradient segment
    float *part;         // [part_slots, G3, D]
    float *dwdT;         // [F, D]
    // optional stage timing (bench): when prof_on, events are recorded between the stages (TT_PROF_*)
    int prof_on;
    cudaEvent_t prof[16];
    // dense rows, one chunk
    bf16 *xd, *dyd, *g, *u, *dh, *yd;  // [chunk, D], [chunk, D], [chunk, F] x 3, [chunk, D]
    float *split_part;   // split-K partial sums of the dense-row GEMMs: [TT_SPLIT_ROWS * max(s_F F, s_D D)]
    int coop_grid_fwd, coop_grid_bwd;  // CTAs of the dense-row kernels (all co-resident: cooperative launch)
    int split_F, split_D;              // split-K parts of their GEMMs with N = F and N = D (tt_split_count)
} TwTrainWS;

// ---------------------------------------------------------------------------------------------------
// Forward kernels
// ---------------------------------------------------------------------------------------------------
// One warp per row: true count, eligibility (no tile over its slots, count <= dense_row_nnz).
static __global__ void tt_classify_kernel(const uint32_t *__restrict__ tw, int M, int tiles, int words, int thresh,
                                          int *__restrict__ cnt_elig, int *__restrict__ row_cnt,
                                          TwTrainStats *__restrict__ st) {
    __shared__ int s_max[32];
    const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (r == M && lane == 0) cnt_elig[M] = 0;
    if (lane == 0) s_max[threadIdx.x / 32] = 0;
    int sum = 0, ovf = 0;
    if (r < M) {
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
            s_max[threadIdx.x / 32] = sum;
        }
    }
    __syncthreads();  // one atomic per CTA (one per row would serialise on one address)
    if (threadIdx.x == 0) {
        int m = 0;
        for (int w = 0; w < (int)blockDim.x / 32; w++) m = max(m, s_max[w]);
        atomicMax(&st->max_row_nnz, m);
    }
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

// A row's TwELL tiles, one warp: lane t < tiles (<= 32) gets tile t's entry count *tc and its first slot in the row
// (exclusive warp scan) *toff. tt_tw_entry decodes entry k of tile t: (unit, g bits).
__device__ __forceinline__ void tt_tile_offsets(const uint32_t *__restrict__ row, int tiles, int words, int lane, int *tc,
                                                int *toff) {
    const int c = lane < tiles ? (int)row[(size_t)lane * words] : 0;
    int incl = c;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int x = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += x;
    }
    *tc = c;
    *toff = incl - c;
}
__device__ __forceinline__ uint2 tt_tw_entry(const uint32_t *__restrict__ row, int t, int k, int words) {
    const uint32_t w = __ldg(row + (size_t)t * words + 1 + k);
    return make_uint2((uint32_t)(t * TWELL_TILE + (int)(w & 0xFFu)), w >> 16);
}

// One warp per row: sparse iff eligible and its pairs fit the pool (row_ptr monotone in r). Non-gated (parse = 1; the
// gated up kernel parses its row itself): a sparse row's TwELL entries are written to its pool slots in column order,
// recs[row_ptr[r] + k] = (unit, g bits), its units marked in fired, row_l1[r] = sum g (h = relu(g): no up kernel).
static __global__ void tt_assign_kernel(const uint32_t *__restrict__ tw, const int *__restrict__ row_ptr,
                                        int *__restrict__ row_cnt, int M, int tiles, int words, int cap, int parse,
                                        uint2 *__restrict__ recs, uint8_t *__restrict__ dense_flag,
                                        float *__restrict__ row_l1, uint8_t *__restrict__ fired,
                                        TwTrainStats *__restrict__ st) {
    __shared__ int s_end[32], s_full[32];
    const int r = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    const int c = r < M ? row_cnt[r] : -1;
    const int sparse = c >= 0 && row_ptr[r] + c <= cap;
    if (lane == 0) {
        s_end[threadIdx.x / 32] = sparse ? row_ptr[r] + c : 0;
        s_full[threadIdx.x / 32] = c >= 0 && !sparse;
        if (r < M) {
            if (!sparse) row_cnt[r] = -1;
            dense_flag[r] = (uint8_t)!sparse;
        }
    }
    __syncthreads();  // one atomic per CTA for the statistics (one per row would serialise on one address)
    if (threadIdx.x == 0) {
        int e = 0, f = 0;
        for (int w = 0; w < (int)blockDim.x / 32; w++) { e = max(e, s_end[w]); f += s_full[w]; }
        if (e > 0) atomicMax(&st->sparse_pairs, (unsigned long long)e);
        if (f) atomicAdd(&st->n_pool_full, f);
    }
    if (!sparse || !parse) return;
    const uint32_t *row = tw + (size_t)r * tiles * words;
    int tc, toff;
    tt_tile_offsets(row, tiles, words, lane, &tc, &toff);
    const int base = row_ptr[r];
    float l1 = 0.0f;
    // lane k: entry k of tile t (k < words - 1 <= 31). fired is read before it is written: a handful of hot cache
    // lines that every row would otherwise store to.
#pragma unroll 4
    for (int t = 0; t < tiles; t++) {
        const int cnt_t = __shfl_sync(0xffffffffu, tc, t), off_t = __shfl_sync(0xffffffffu, toff, t);
        if (lane < cnt_t) {
            const uint2 e = tt_tw_entry(row, t, lane, words);
            recs[base + off_t + lane] = e;
            if (!fired[e.x]) fired[e.x] = 1;
            l1 += tt_bf(e.y);
        }
    }
    l1 = warp_sum(l1);
    if (lane == 0) row_l1[r] = l1;
}

// 16 bytes through the read-only path, as a volatile asm: a run of these stays in program order, so all of a step's
// gathers are in flight before the first is used.
__device__ __forceinline__ uint4 tt_ldg16(const void *p) {
    uint4 v;
    asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
    return v;
}

// The warp sums of eight per-lane values p[0..7] by a transposing butterfly (9 shuffles instead of 40): lane l
// returns the sum over the 32 lanes of p[(l >> 2) & 7]. Fixed order: deterministic.
__device__ __forceinline__ float tt_warp_sum8(const float p[8], int lane) {
    const bool h16 = lane & 16, h8 = lane & 8, h4 = lane & 4;
    float q[4], r[2];
#pragma unroll
    for (int j = 0; j < 4; j++) q[j] = (h16 ? p[j + 4] : p[j]) + __shfl_xor_sync(0xffffffffu, h16 ? p[j] : p[j + 4], 16);
#pragma unroll
    for (int j = 0; j < 2; j++) r[j] = (h8 ? q[j + 2] : q[j]) + __shfl_xor_sync(0xffffffffu, h8 ? q[j] : q[j + 2], 8);
    float t = (h4 ? r[1] : r[0]) + __shfl_xor_sync(0xffffffffu, h4 ? r[0] : r[1], 4);
    t += __shfl_xor_sync(0xffffffffu, t, 2);
    t += __shfl_xor_sync(0xffffffffu, t, 1);
    return t;
}

// One CTA of 32 DV threads per sparse row r (DV = D / 256): s_k = fp32 dot(V[r], W[n_k]) for each pair k of the row,
// then, by MODE:
//   TT_DOT_UP (gated forward; V = X, W = Wu): the row's pairs come from its TwELL entries (column order; units marked
//     in fired); u = bf16(s); the pair's record (unit, g, u) written to the pool; row_l1[r] = sum |g u| (fixed order).
//   TT_DOT_DH (backward; V = dY, W = WdT): dh = bf16(s) -> (dg, du) (non-gated: dpre), the pair's 16-byte backward
//     record (row, dg | du << 16, h bits, unit) in pool order, its sort key (the unit, from the pattern), unit counts.
// Warp w owns the columns [256 w, 256 w + 256): lane l holds V[r][256 w + 8 l .. + 8] and loads the same 16 bytes
// of 8 pairs' weight rows per step (8 loads in flight, few registers: many CTAs per SM). The 8 partial dots are
// summed over the warp by tt_warp_sum8, the warps' sums in warp order (partials in shared memory, TT_DOT_CHUNK pairs
// at a time). A row has at most 31 F / 256 <= TT_ROW_SMEM pairs (TwELL slots).
enum { TT_DOT_UP = 0, TT_DOT_DH = 1 };
#define TT_DOT_CHUNK 256
template <int DV, int MODE>
static __global__ void __launch_bounds__(32 * DV, 1) tt_pair_dot_kernel(
    const bf16 *__restrict__ V, const bf16 *__restrict__ W, uint2 *__restrict__ recs, const int *__restrict__ row_ptr,
    const int *__restrict__ row_cnt, const uint32_t *__restrict__ tw, int tiles, int words,
    uint8_t *__restrict__ fired, int gated, float l1_coef, float *__restrict__ row_l1, uint4 *__restrict__ bpair,
    uint16_t *__restrict__ keys, int *__restrict__ unit_cnt) {
    constexpr int D = DV * 256;
    __shared__ uint2 s_rec_all[TT_ROW_SMEM];
    __shared__ float s_part[DV][TT_DOT_CHUNK];
    __shared__ float s_sum[32];
    __shared__ int s_tc[32], s_toff[32];
    const int r = blockIdx.x;
    const int n = row_cnt[r];
    if (n < 0 || (MODE == TT_DOT_DH && n == 0)) return;  // dense row (or nothing to do)
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, col = 256 * warp + 8 * lane, base = row_ptr[r];
    const uint4 v = *reinterpret_cast<const uint4 *>(V + (size_t)r * D + col);
    if (MODE == TT_DOT_UP) {  // the row's TwELL entries -> s_rec_all (column order), fired
        const uint32_t *row = tw + (size_t)r * tiles * words;
        if (warp == 0) tt_tile_offsets(row, tiles, words, lane, &s_tc[lane], &s_toff[lane]);
        __syncthreads();
        for (int t = warp; t < tiles; t += DV)
            if (lane < s_tc[t]) {
                const uint2 e = tt_tw_entry(row, t, lane, words);
                s_rec_all[s_toff[t] + lane] = e;
                if (!fired[e.x]) fired[e.x] = 1;
            }
    } else {
        for (int i = threadIdx.x; i < n; i += blockDim.x) s_rec_all[i] = recs[base + i];
    }
    __syncthreads();
    float l1 = 0.0f;
    for (int c0 = 0; c0 < n; c0 += TT_DOT_CHUNK) {
        const int cn = min(TT_DOT_CHUNK, n - c0);
        const uint2 *s_rec = s_rec_all + c0;
        for (int k = 0; k < cn; k += 8) {
            uint4 w[8];
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const int kk = k + j < cn ? k + j : k;
                w[j] = tt_ldg16(W + (size_t)s_rec[kk].x * D + col);
            }
            float p[8];
#pragma unroll
            for (int j = 0; j < 8; j++) p[j] = dot8_bf16(w[j], v, 0.0f);
            const float t = tt_warp_sum8(p, lane);
            const int j = (lane >> 2) & 7;
            if ((lane & 3) == 0 && k + j < cn) s_part[warp][k + j] = t;
        }
        __syncthreads();
        for (int i = threadIdx.x; i < cn; i += blockDim.x) {
            float s = 0.0f;
#pragma unroll
            for (int q = 0; q < DV; q++) s += s_part[q][i];
            const uint2 rec = s_rec[i];
            const int slot = base + c0 + i;
            if (MODE == TT_DOT_UP) {
                const uint32_t ub = __bfloat16_as_ushort(__float2bfloat16_rn(s));
                l1 += fabsf(tt_bf(rec.y & 0xFFFFu) * tt_bf(ub));
                recs[slot] = make_uint2(rec.x, (rec.y & 0xFFFFu) | (ub << 16));
            } else {
                const float dh = round_bf16(s), g = tt_bf(rec.y & 0xFFFFu);
                uint32_t dgu;
                float h;
                if (gated) {
                    const float u = tt_bf(rec.y >> 16);
                    const float sg = u > 0.0f ? 1.0f : (u < 0.0f ? -1.0f : 0.0f);
                    const float dt = dh + l1_coef * sg;
                    dgu = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(dt * u)) |
                          ((uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(dt * g)) << 16);
                    h = round_bf16(g * u);
                } else {
                    dgu = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(dh + l1_coef));
                    h = g;
                }
                bpair[slot] = make_uint4((uint32_t)r, dgu, __float_as_uint(h), rec.x);
                keys[slot] = (uint16_t)rec.x;
                atomicAdd(&unit_cnt[rec.x], 1);
            }
        }
        __syncthreads();  // s_part is reused by the next chunk
    }
    if (MODE == TT_DOT_UP) {
        l1 = block_sum(l1, s_sum);
        if (threadIdx.x == 0) row_l1[r] = l1;
    }
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
// One CTA per sparse row: dX[r] = sum_k dg_k Wg[n_k] + du_k Wu[n_k] (non-gated: dpre_k Wu[n_k]), one fp32 accumulator,
// on the columns [col_begin, col_end): the backward runs it on the two halves of D one after the other, so that
// the halves of Wg and Wu in use (23 MB at the paper's shape) stay in L2.
static __global__ void __launch_bounds__(TT_THREADS) tt_bwd_dx_kernel(
    const bf16 *__restrict__ Wg, const bf16 *__restrict__ Wu, const uint4 *__restrict__ bpair,
    const int *__restrict__ row_ptr, const int *__restrict__ row_cnt, int D, int gated, int col_begin, int col_end,
    bf16 *__restrict__ dX) {
    __shared__ int s_unit[TT_ROW_SMEM];
    __shared__ float s_dg[TT_ROW_SMEM], s_du[TT_ROW_SMEM];
    const int r = blockIdx.x;
    const int n = row_cnt[r];
    if (n < 0) return;
    const int base = row_ptr[r];
    for (int k = threadIdx.x; k < n; k += blockDim.x) {
        const uint4 bp = bpair[base + k];
        const uint32_t d = bp.y;
        s_unit[k] = (int)bp.w;
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

// desc[b] = (first sorted pair, pairs, unit, partial slot or -1) of weight-gradient segment b: unit n's segments are
// seg_off[n] .. seg_off[n + 1) and cover its pairs unit_off[n] .. unit_off[n + 1) in runs of TT_SEG.
static __global__ void tt_seg_desc_kernel(const int *__restrict__ unit_off, const int *__restrict__ seg_off, int F,
                                          int4 *__restrict__ desc) {
    const int n = blockIdx.x * blockDim.x + threadIdx.x;
    if (n >= F) return;
    const int pend = unit_off[n + 1];
    for (int b = seg_off[n]; b < seg_off[n + 1]; b++) {
        const int s = b - seg_off[n], p0 = unit_off[n] + s * TT_SEG;
        const int cnt = pend - p0 < TT_SEG ? (pend - p0 > 0 ? pend - p0 : 0) : TT_SEG;
        desc[b] = make_int4(p0, cnt, n, s == 0 ? -1 : seg_off[n] - n + s - 1);
    }
}

// One warp per (column slice of 256, segment), slice-major (global warp index = slice * segs_grid + segment), so
// that the warps running at once share one slice of X and dY (M x 256 x 2 x 2 B: 16.8 MB at M 16384), which stays in
// L2. The warps of a CTA are independent (no shared memory, no barrier): lane l holds the sorted record of pair
// q0 + l of the current chunk of 32 and the columns 8 l .. 8 l + 8, and the warp sums the segment's pairs in token
// order (fixed), TT_WG_STEP pairs' X and dY rows loaded before they are used. A unit's first segment writes
// dWg[n] = beta dWg[n] + sum (likewise dWu) and dWdT[n] = sum; a later segment writes its partial slot (added by
// tt_wgrad_reduce_kernel in segment order).
#define TT_WG_WARPS 4
#ifndef TT_WG_STEP  // pairs whose X and dY rows a warp has in flight at once (-D: dev A/B)
#define TT_WG_STEP 2
#endif
static __global__ void __launch_bounds__(TT_WG_WARPS * 32) tt_wgrad_kernel(
    const bf16 *__restrict__ X, const bf16 *__restrict__ dY, const uint4 *__restrict__ pairs,
    const int4 *__restrict__ desc, const int *__restrict__ n_segs, int D, int gated, int accumulate, int segs_grid,
    float *__restrict__ dWg, float *__restrict__ dWu, float *__restrict__ dWdT, float *__restrict__ part) {
    const int lane = threadIdx.x & 31, gw = blockIdx.x * TT_WG_WARPS + (threadIdx.x >> 5);
    const int slice = gw / segs_grid, b = gw - slice * segs_grid;
    if (slice >= D / 256 || b >= *n_segs) return;
    const int4 sd = desc[b];
    const int c0 = slice * 256 + 8 * lane;
    float aa[8], ab[8], ad[8];
#pragma unroll
    for (int i = 0; i < 8; i++) aa[i] = ab[i] = ad[i] = 0.0f;
    for (int q0 = 0; q0 < sd.y; q0 += 32) {
        const int cn = min(32, sd.y - q0);
        const uint4 rec = lane < cn ? pairs[sd.x + q0 + lane] : make_uint4(0, 0, 0, 0);
        for (int j = 0; j < cn; j += TT_WG_STEP) {
            uint4 xv[TT_WG_STEP], yv[TT_WG_STEP];
            uint32_t dgu[TT_WG_STEP];
            float h[TT_WG_STEP];
#pragma unroll
            for (int q = 0; q < TT_WG_STEP; q++) {
                const int jj = j + q < cn ? j + q : j;
                const uint32_t row = __shfl_sync(0xffffffffu, rec.x, jj);
                dgu[q] = __shfl_sync(0xffffffffu, rec.y, jj);
                h[q] = __uint_as_float(__shfl_sync(0xffffffffu, rec.z, jj));
                if (j + q < cn) {
                    xv[q] = *reinterpret_cast<const uint4 *>(X + (size_t)row * D + c0);
                    yv[q] = *reinterpret_cast<const uint4 *>(dY + (size_t)row * D + c0);
                }
            }
#pragma unroll
            for (int q = 0; q < TT_WG_STEP; q++) {
                if (j + q >= cn) break;
                const float a = tt_bf(dgu[q] & 0xFFFFu), bb = tt_bf(dgu[q] >> 16);
                const __nv_bfloat162 *x2 = reinterpret_cast<const __nv_bfloat162 *>(&xv[q]);
                const __nv_bfloat162 *y2 = reinterpret_cast<const __nv_bfloat162 *>(&yv[q]);
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float2 fx = __bfloat1622float2(x2[i]), fy = __bfloat1622float2(y2[i]);
                    aa[2 * i] = fmaf(a, fx.x, aa[2 * i]);
                    aa[2 * i + 1] = fmaf(a, fx.y, aa[2 * i + 1]);
                    if (gated) {
                        ab[2 * i] = fmaf(bb, fx.x, ab[2 * i]);
                        ab[2 * i + 1] = fmaf(bb, fx.y, ab[2 * i + 1]);
                    }
                    ad[2 * i] = fmaf(h[q], fy.x, ad[2 * i]);
                    ad[2 * i + 1] = fmaf(h[q], fy.y, ad[2 * i + 1]);
                }
            }
        }
    }
    const size_t o = (size_t)sd.z * D + c0;
    if (sd.w < 0) {
        float *Wa = gated ? dWg : dWu;
#pragma unroll
        for (int i = 0; i < 8; i += 4) {
            float4 va = make_float4(aa[i], aa[i + 1], aa[i + 2], aa[i + 3]);
            float4 vb = make_float4(ab[i], ab[i + 1], ab[i + 2], ab[i + 3]);
            if (accumulate) {
                const float4 pa = *reinterpret_cast<const float4 *>(Wa + o + i);
                va = make_float4(pa.x + va.x, pa.y + va.y, pa.z + va.z, pa.w + va.w);
                if (gated) {
                    const float4 pb = *reinterpret_cast<const float4 *>(dWu + o + i);
                    vb = make_float4(pb.x + vb.x, pb.y + vb.y, pb.z + vb.z, pb.w + vb.w);
                }
            }
            *reinterpret_cast<float4 *>(Wa + o + i) = va;
            if (gated) *reinterpret_cast<float4 *>(dWu + o + i) = vb;
            *reinterpret_cast<float4 *>(dWdT + o + i) = make_float4(ad[i], ad[i + 1], ad[i + 2], ad[i + 3]);
        }
    } else {
        float *q = part + (size_t)sd.w * 3 * D + c0;
#pragma unroll
        for (int i = 0; i < 8; i += 4) {
            *reinterpret_cast<float4 *>(q + i) = make_float4(aa[i], aa[i + 1], aa[i + 2], aa[i + 3]);
            *reinterpret_cast<float4 *>(q + D + i) = make_float4(ab[i], ab[i + 1], ab[i + 2], ab[i + 3]);
            *reinterpret_cast<float4 *>(q + 2 * D + i) = make_float4(ad[i], ad[i + 1], ad[i + 2], ad[i + 3]);
        }
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
static __device__ void tt_dense_bwd_ew(bf16 *__restrict__ G, bf16 *__restrict__ U, bf16 *__restrict__ DH, int n, int F,
                                int gated, float l1_coef) {
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

static __global__ void __launch_bounds__(256, 1) tt_dense_rows_bwd_kernel(const TtDenseRows a) {
    cg::grid_group grid = cg::this_grid();
    const int n = *a.n_dev, D = a.D, F = a.F;
    for (int c0 = 0; c0 < n; c0 += a.Rc) {
        const int m = min(a.Rc, n - c0);
        tt_dense_gate_up(a, c0, m, a.dY, grid);  // recompute g (u), then dh = dY Wd
        tt_gemm_grid(tt_args(a.dyd, D, 1, a.WdT, D, 1, a.dh, F, 0, 0, m, F, D), a.split_F, a.part, grid);
        tt_dense_bwd_ew(a.g, a.u, a.dh, m, F, a.gated, a.l1_coef);
        grid.sync();
        // dX = dg Wg + du Wu (one fp32 accumulator), scattered
        TtGemmArgs dx = tt_args(a.g, F, 1, a.Wgate, D, 0, a.yd, D, 0, 0, m, D, F);
        if (a.gated) { dx.A2 = a.u; dx.B2 = a.Wu; }
        tt_gemm_grid(dx, a.split_D, a.part, grid);
        tt_scatter_rows(a.yd, a.rows + c0, m, D, a.out);
        // weight gradients: dW[f][d] += sum_r A[r][f] B[r][d] (K = the chunk's rows)
        tt_gemm_tiles(tt_args(a.g, F, 0, a.xd, D, 0, a.dWa, D, 1, 1, F, D, m));
        if (a.gated) tt_gemm_tiles(tt_args(a.u, F, 0, a.xd, D, 0, a.dWu, D, 1, 1, F, D, m));
        tt_gemm_tiles(tt_args(a.dh, F, 0, a.dyd, D, 0, a.dWdT, D, 1, 1, F, D, m));
        grid.sync();
    }
}

// dWd[d][f] = (accumulate ? dWd[d][f] : 0) + T[f][d]  (T [F, D]; F, D multiples of 64): 64 x 64 tiles, 256
// threads, 16-byte loads and stores. Thread t reads the float4 at columns 4 (t % 16) of the tile's rows t / 16 + 16 i
// and writes 4 rows of dWd, each a float4 of 4 consecutive f read down a column of the shared tile (padded: the 4
// rows a thread reads fall in different banks).
static __global__ void __launch_bounds__(256) tt_transpose_add_kernel(const float *__restrict__ T,
                                                                     float *__restrict__ dWd, int F, int D,
                                                                     int accumulate) {
    __shared__ float tile[64][65];
    const int f0 = blockIdx.y * 64, d0 = blockIdx.x * 64, t = threadIdx.x, c4 = 4 * (t & 15), r = t >> 4;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float4 v = *reinterpret_cast<const float4 *>(T + (size_t)(f0 + r + 16 * i) * D + d0 + c4);
        tile[r + 16 * i][c4] = v.x;
        tile[r + 16 * i][c4 + 1] = v.y;
        tile[r + 16 * i][c4 + 2] = v.z;
        tile[r + 16 * i][c4 + 3] = v.w;
    }
    __syncthreads();
#pragma unroll
    for (int i = 0; i < 4; i++) {  // dWd row d0 + r + 16 i, columns f0 + c4 .. + 3
        const int d = r + 16 * i;
        float4 v = make_float4(tile[c4][d], tile[c4 + 1][d], tile[c4 + 2][d], tile[c4 + 3][d]);
        float4 *p = reinterpret_cast<float4 *>(dWd + (size_t)(d0 + d) * F + f0 + c4);
        if (accumulate) {
            const float4 o = *p;
            v = make_float4(o.x + v.x, o.y + v.y, o.z + v.z, o.w + v.w);
        }
        *p = v;
    }
}

// ---------------------------------------------------------------------------------------------------
// Host API
// ---------------------------------------------------------------------------------------------------
// Stage events (ws->prof_on): forward 0 start, 1 gate, 2 classify/scan/select, 3 up+down, 4 dense rows, 5 stats;
// backward 6 start, 7 dh, then beside each other 8 dX (caller's stream) and 9 sort/scans, 10 weight gradients
// (ws->side), 11 the join (the weight-gradient chain's time past dX), 12 dense rows, 13 transpose. Stage q is timed
// from event TT_PROF_FROM[q] of its own stream; the backward's stages 8-10 overlap, so they do not add up to it.
enum { TT_PROF_N = 14 };
static const char *const TT_PROF_NAMES[TT_PROF_N] = {"", "gate", "classify", "updown", "dense", "stats", "", "dh",
                                                     "dX", "sort", "wgrad", "join", "dense", "transp"};
static const int TT_PROF_FROM[TT_PROF_N] = {0, 0, 1, 2, 3, 4, 5, 6, 7, 7, 9, 8, 11, 12};
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
    {
        int least = 0, greatest = 0;
        cudaCheck(cudaDeviceGetStreamPriorityRange(&least, &greatest));
        cudaCheck(cudaStreamCreateWithPriority(&ws->side, cudaStreamNonBlocking, greatest));
        cudaCheck(cudaEventCreateWithFlags(&ws->fork_ev, cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&ws->join_ev, cudaEventDisableTiming));
    }
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
    cudaCheck(cudaMalloc(&ws->bp_in, P * sizeof(uint4)));
    cudaCheck(cudaMalloc(&ws->bp_out, P * sizeof(uint4)));
    cudaCheck(cudaMalloc(&ws->keys_in, P * sizeof(uint16_t)));
    cudaCheck(cudaMalloc(&ws->keys_out, P * sizeof(uint16_t)));
    cudaCheck(cudaMalloc(&ws->unit_cnt, (F + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->unit_off, (F + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->seg_cnt, (F + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->seg_off, (F + 1) * sizeof(int)));
    cudaCheck(cudaMalloc(&ws->seg_desc, ((size_t)F + ws->part_slots) * sizeof(int4)));
    cudaCheck(cudaMalloc(&ws->part, (size_t)ws->part_slots * 3 * D * sizeof(float)));
    cudaCheck(cudaMalloc(&ws->dwdT, (size_t)F * D * sizeof(float)));
    cudaCheck(cudaMalloc(&ws->xd, Rc * D * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ws->dyd, Rc * D * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ws->yd, Rc * D * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ws->g, Rc * F * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ws->u, Rc * F * sizeof(bf16)));
    cudaCheck(cudaMalloc(&ws->dh, Rc * F * sizeof(bf16)));
    {
        ws->split_F = tt_split_count(F);
        ws->split_D = tt_split_count(D);
        const size_t a = (size_t)ws->split_F * F, b = (size_t)ws->split_D * D;
        cudaCheck(cudaMalloc(&ws->split_part, (size_t)TT_SPLIT_ROWS * (a > b ? a : b) * sizeof(float)));
        int nf = 0, nb = 0, coop = 0;
        cudaCheck(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nf, tt_dense_rows_fwd_kernel, 256, 0));
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, tt_dense_rows_bwd_kernel, 256, 0));
        if (!coop || nf < 1 || nb < 1) {
            fprintf(stderr, "error: twell train ffn: the dense-row kernels need a cooperative launch (device %d: %s, "
                            "%d / %d CTAs per SM)\n", dev, coop ? "supported" : "not supported", nf, nb);
            return TWELL_ERR_ARG;
        }
        ws->coop_grid_fwd = cuda_sm_count() * (nf < 2 ? nf : 2);
        ws->coop_grid_bwd = cuda_sm_count() * (nb < 2 ? nb : 2);
    }
    // cub temporary storage: the largest of the scans, the selection and the sort
    size_t b1 = 0, b2 = 0, b3 = 0, b4 = 0;
    cudaCheck(cub::DeviceScan::ExclusiveSum(NULL, b1, ws->cnt_elig, ws->cnt_elig, max_M + 1));
    cudaCheck(cub::DeviceSelect::Flagged(NULL, b2, thrust::counting_iterator<int>(0), ws->dense_flag, ws->ovf_list,
                                         ws->ovf_flag, max_M));
    cudaCheck(cub::DeviceRadixSort::SortPairs(NULL, b3, ws->keys_in, ws->keys_out, ws->bp_in, ws->bp_out,
                                              ws->cap_pairs, 0, 16));
    cudaCheck(cub::DeviceScan::ExclusiveSum(NULL, b4, ws->unit_cnt, ws->unit_off, F + 1));
    ws->cub_bytes = std::max(std::max(b1, b2), std::max(b3, b4));
    cudaCheck(cudaMalloc(&ws->cub_tmp, ws->cub_bytes));
    return TWELL_OK;
}

static void twtrain_ws_free(TwTrainWS *ws) {
    void *p[] = {ws->tw, ws->ovf_flag, ws->ovf_list, ws->counters, ws->gate_scratch, ws->cnt_elig, ws->dense_flag,
                 ws->row_l1, ws->bp_in, ws->bp_out, ws->keys_in, ws->keys_out, ws->unit_cnt,
                 ws->unit_off, ws->seg_cnt, ws->seg_off, ws->seg_desc, ws->part, ws->dwdT, ws->xd, ws->dyd, ws->yd, ws->g, ws->u,
                 ws->dh, ws->split_part, ws->cub_tmp};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
        if (p[i]) cudaCheck(cudaFree(p[i]));
    if (ws->prof_on)
        for (int i = 0; i < TT_PROF_N; i++) cudaCheck(cudaEventDestroy(ws->prof[i]));
    if (ws->gate_done) cudaCheck(cudaEventDestroy(ws->gate_done));
    if (ws->side) cudaCheck(cudaStreamDestroy(ws->side));
    if (ws->fork_ev) cudaCheck(cudaEventDestroy(ws->fork_ev));
    if (ws->join_ev) cudaCheck(cudaEventDestroy(ws->join_ev));
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

// The dense-row kernel's arguments (forward: dY, dW* unused; backward: row_l1, fired unused).
static inline TtDenseRows tt_dense_args(const TwTrainWS *ws, const TwTrainState *st, const bf16 *X, const bf16 *dY,
                                        const bf16 *Wgate, const bf16 *Wu, const bf16 *WdT, bf16 *out) {
    TtDenseRows a;
    memset(&a, 0, sizeof(a));
    a.X = X; a.dY = dY; a.Wgate = Wgate; a.Wu = Wu; a.WdT = WdT; a.out = out;
    a.rows = st->dense_rows; a.n_dev = &st->stats->n_dense;
    a.xd = ws->xd; a.dyd = ws->dyd; a.g = ws->g; a.u = ws->u; a.dh = ws->dh; a.yd = ws->yd; a.part = ws->split_part;
    a.D = ws->D; a.F = ws->F; a.gated = ws->gated; a.Rc = ws->dense_chunk;
    a.split_F = ws->split_F; a.split_D = ws->split_D;
    return a;
}

static inline void tt_dense_launch(const void *kernel, int grid, TtDenseRows *a, cudaStream_t stream) {
    void *args[] = {a};
    cudaCheck(cudaLaunchCooperativeKernel(kernel, grid, 256, args, 0, stream));
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
    tt_assign_kernel<<<CEIL_DIV(M, 8), 256, 0, stream>>>(ws->tw, st->row_ptr, st->row_cnt, M, tiles, words,
                                                         ws->cap_pairs, !gated, st->recs, ws->dense_flag, ws->row_l1,
                                                         fired, st->stats);
    cudaCheckLaunch();
    bytes = ws->cub_bytes;
    cudaCheck(cub::DeviceSelect::Flagged(ws->cub_tmp, bytes, thrust::counting_iterator<int>(0), ws->dense_flag,
                                         st->dense_rows, &st->stats->n_dense, M, stream));
    tt_prof(ws, 2, stream);
    if (gated) {
        switch (D / 256) {
#define TT_FWD(DV)                                                                                                   \
    case DV:                                                                                                         \
        tt_pair_dot_kernel<DV, TT_DOT_UP><<<M, 32 * DV, 0, stream>>>(X, Wu, st->recs, st->row_ptr, st->row_cnt,      \
                                                                     ws->tw, tiles, words, fired, 1, 0.0f,         \
                                                                     ws->row_l1, NULL, NULL, NULL);                \
        break;
            TT_FWD(1) TT_FWD(2) TT_FWD(4) TT_FWD(8) TT_FWD(16)
#undef TT_FWD
        default:
            fprintf(stderr, "error: twell train ffn: D=%d: D/256 must be 1, 2, 4, 8 or 16\n", D);
            return TWELL_ERR_SHAPE;
        }
        cudaCheckLaunch();
    }
    tt_fwd_down_kernel<<<M, TT_THREADS, 0, stream>>>(WdT, st->recs, st->row_ptr, st->row_cnt, D, gated, Y);
    cudaCheckLaunch();
    tt_prof(ws, 3, stream);
    // dense rows (their count is on the device): one cooperative launch
    {
        TtDenseRows a = tt_dense_args(ws, st, X, NULL, Wgate, Wu, WdT, Y);
        a.row_l1 = ws->row_l1; a.fired = fired;
        tt_dense_launch((const void *)tt_dense_rows_fwd_kernel, ws->coop_grid_fwd, &a, stream);
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
        tt_pair_dot_kernel<DV, TT_DOT_DH><<<M, 32 * DV, 0, stream>>>(dY, WdT, st->recs, st->row_ptr, st->row_cnt,    \
                                                                     NULL, 0, 0, NULL, gated, l1_coef, NULL,       \
                                                                     ws->bp_in, ws->keys_in, ws->unit_cnt);        \
        break;
        TT_DH(1) TT_DH(2) TT_DH(4) TT_DH(8) TT_DH(16)
#undef TT_DH
    default: return TWELL_ERR_SHAPE;
    }
    cudaCheckLaunch();
    tt_prof(ws, 7, stream);
    // fork: dX on the caller's stream, the sort and the weight gradients on ws->side (they read what dh wrote and
    // write nothing dX touches); the weight-gradient chain is the longer one, so its stream has the higher priority
    const cudaStream_t ws_stream = ws->side;
    cudaCheck(cudaEventRecord(ws->fork_ev, stream));
    cudaCheck(cudaStreamWaitEvent(ws_stream, ws->fork_ev, 0));
    for (int half = 0; half < 2; half++) {
        tt_bwd_dx_kernel<<<M, TT_THREADS / 2, 0, stream>>>(Wg, Wu, ws->bp_in, st->row_ptr, st->row_cnt, D, gated,
                                                          half * D / 2, (half + 1) * D / 2, dX);
        cudaCheckLaunch();
    }
    tt_prof(ws, 8, stream);
    // unit-major order: stable sort of the pool slots by unit (unused slots have key 0xFFFF and sort last)
    size_t bytes = ws->cub_bytes;
    cudaCheck(cub::DeviceRadixSort::SortPairs(ws->cub_tmp, bytes, ws->keys_in, ws->keys_out, ws->bp_in, ws->bp_out,
                                              ws->cap_pairs, 0, 16, ws_stream));
    tt_seg_count_kernel<<<CEIL_DIV(F + 1, 256), 256, 0, ws_stream>>>(ws->unit_cnt, ws->seg_cnt, F);
    cudaCheckLaunch();
    bytes = ws->cub_bytes;
    cudaCheck(cub::DeviceScan::ExclusiveSum(ws->cub_tmp, bytes, ws->unit_cnt, ws->unit_off, F + 1, ws_stream));
    bytes = ws->cub_bytes;
    cudaCheck(cub::DeviceScan::ExclusiveSum(ws->cub_tmp, bytes, ws->seg_cnt, ws->seg_off, F + 1, ws_stream));
    tt_prof(ws, 9, ws_stream);
    tt_seg_desc_kernel<<<CEIL_DIV(F, 256), 256, 0, ws_stream>>>(ws->unit_off, ws->seg_off, F, ws->seg_desc);
    cudaCheckLaunch();
    const int segs_grid = F + ws->part_slots;  // >= the segments of any pattern
    tt_wgrad_kernel<<<CEIL_DIV((D / 256) * segs_grid, TT_WG_WARPS), TT_WG_WARPS * 32, 0, ws_stream>>>(
        X, dY, ws->bp_out, ws->seg_desc, ws->seg_off + F, D, gated, accumulate, segs_grid, dWg, dWu, ws->dwdT,
        ws->part);
    cudaCheckLaunch();
    tt_wgrad_reduce_kernel<<<F, TT_THREADS, 0, ws_stream>>>(ws->seg_off, D, gated, dWg, dWu, ws->dwdT, ws->part);
    cudaCheckLaunch();
    tt_prof(ws, 10, ws_stream);
    cudaCheck(cudaEventRecord(ws->join_ev, ws_stream));  // join: the dense rows add into the weight gradients
    cudaCheck(cudaStreamWaitEvent(stream, ws->join_ev, 0));
    tt_prof(ws, 11, stream);
    // dense rows (their count is on the device): one cooperative launch, accumulating into the weight gradients
    {
        TtDenseRows a = tt_dense_args(ws, st, X, dY, Wgate, Wu, WdT, dX);
        a.dWa = gated ? dWg : dWu; a.dWu = dWu; a.dWdT = ws->dwdT; a.l1_coef = l1_coef;
        tt_dense_launch((const void *)tt_dense_rows_bwd_kernel, ws->coop_grid_bwd, &a, stream);
    }
    tt_prof(ws, 12, stream);
    tt_transpose_add_kernel<<<dim3(D / 64, F / 64), 256, 0, stream>>>(ws->dwdT, dWd, F, D, accumulate);
    cudaCheckLaunch();
    tt_prof(ws, 13, stream);
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
