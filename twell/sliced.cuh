// twell/sliced.cuh: the sparse up + down of the TwELL FFN, D-SLICED and WEIGHT-STATIONARY, on tensor cores.
//
//   gated:     y[m,:] = sum over active n of  bf16(g[m,n] * (x[m,:] . Wu[n,:])) * WdT[n,:]
//   non-gated: y[m,:] = sum over active n of  g[m,n] * WdT[n,:]          (Wu == NULL; g = relu(x Wu^T))
//
//   tw  uint32 [M, F/C] (twell/format.h)   ovf_flag int [M] (1 = overflow row)   X [M, D] bf16
//   Wu  [F, D] bf16 (nn.Linear layout)     WdT [F, D] bf16 = down_proj.weight TRANSPOSED   Y [M, D] bf16
// Overflow rows are NOT written (the dense fallback of twell/ffn.cuh writes them); every other row is written
// fully (rows without active units: exact zeros). Products and sums in fp32 (tensor-core mma, bf16 inputs);
// h = g * u is rounded to bf16 once (it is the bf16 B operand of the down product, as in the dense path).
// Deterministic: fixed summation orders, no atomics on values.
//
// Why: the token-major kernel (twell/updown.cuh) gathers 2 x D x 2 bytes of weight rows from L2 per
// (token, unit) pair; at nnz 29 that is ~15 GB per 65536 tokens and runs at the L2 limit. Here every CTA
// keeps one block of one weight matrix in shared memory (it never moves) and only 4-byte records move:
// the weight bytes per pair come from shared memory (~3-4x the bandwidth of L2).
//
// Slots. Tokens are taken in BLOCKS of 8 (the mma's N). Every active (token, unit) pair of a non-overflow
// row becomes one 32-bit record in a SLOT:
//   bits 0..12 unit n (< 8192), bits 13..15 token j within its block (0..7),
//   bits 16..31 bf16 value: the gate g after compaction, h = bf16(g * u) after the reduce (gated), the
//   TwELL value itself (non-gated). Padding slots hold value 0 (they add nothing).
// Block b owns the slots [seg[b*(NG+1)], seg[(b+1)*(NG+1)]) (a multiple of 16); inside it, unit group g
// (units [g*UG, g*UG + UG)) owns [seg[b*(NG+1)+g], seg[b*(NG+1)+g+1]) (a multiple of 8), then 0 or 8
// padding slots. seg is the exclusive scan of the per-segment sizes; seg[nblocks*(NG+1)] = total slots.
// Inside a group segment the records are ordered so that every aligned run of 8 slots has distinct
// (n mod 8) wherever possible ("class interleaving": sort by n mod 8, then deal column-major into rows of
// 8): with the swizzles below, the ldmatrix phases of both kernels then hit 8 distinct bank groups.
//
// Kernels (one stream, no host sync; capacity checked on the device):
//   1. count  (warp per block): per group: L = active pairs, size pad8(L); block padding to 16.
//   2. cub::DeviceScan::ExclusiveSum -> seg.
//   3. fill   (warp per block): class-interleaved records; if total > cap nothing is written and *status = 1
//      (the caller then runs the token-major kernel: a counted fallback, never a wrong answer).
//   4. up     (gated; grid NSU x NG, NSU = D/64): CTA (s, g) holds Wu[group g, cols 64s..64s+63] in shared
//      memory (128-byte rows, 16-byte chunk c of unit-row r at c ^ (r & 7)). Per block, a warp stages
//      x[8 tokens, 64 cols] (cp.async, double-buffered), then per 16 slots of its group: A = the 16 Wu rows
//      (ldmatrix, row addresses from the records), B = the 8 tokens' x, C = 16 x 8 partial dots, of which
//      the 16 (slot, own token) entries are written to part[s][slot] (fp32).
//   5. reduce (gated): h = bf16(g * sum_s part[s][slot]) in a fixed order, written into the record.
//   6. down   (grid NSD = D/16): CTA s holds WdT[all F units, cols 16s..16s+15] (32-byte rows, chunk c of
//      unit n at c ^ ((n >> 2) & 1)). Per block and 16 slots: A = 16 x 16 (cols x slots) from the slots'
//      rows (ldmatrix.trans), B = 16 slots x 8 tokens (h where the slot's token is the column, else 0),
//      C = y[8 tokens, 16 cols] accumulated over the block's slots, then written as bf16.
// Shapes: D % 64 == 0, F % 256 == 0, F <= 8192 (13-bit unit index) and F x 32 bytes of shared memory for
// the down block (F <= ~7200 on sm_90); twell_sliced_supports() says whether a shape fits (else the caller
// uses twell/updown.cuh).
#ifndef SLLM_TWELL_SLICED_CUH
#define SLLM_TWELL_SLICED_CUH

#ifndef TC_EMU
#include <cub/device/device_scan.cuh>

#include "cuda_common.cuh"
#include "tc_utils.cuh"
#include "twell/format.h"
#endif

#define TWELL_SL_TOK 8        // tokens per block (the mma's N)
#define TWELL_SL_UCOLS 64     // columns per up slice (one 128-byte shared-memory row per unit)
#define TWELL_SL_DCOLS 16     // columns per down slice (one 32-byte row per unit)
#define TWELL_SL_MAXG 8       // unit groups of the up, at most
#define TWELL_SL_UP_WARPS 16
#define TWELL_SL_DOWN_WARPS 16
#define TWELL_SL_CMP_WARPS 8  // warps per CTA of the count / fill kernels (one block of 8 tokens per warp)
#define TWELL_SL_DEFAULT_SLOTS_PER_TOKEN 96  // slot capacity per token of the workspace (nnz up to ~90)

#define TWELL_SL_REC_N(r) ((int)((r) & 0x1FFFu))
#define TWELL_SL_REC_J(r) ((int)(((r) >> 13) & 7u))
#define TWELL_SL_REC(v16, j, n) (((uint32_t)(v16) << 16) | ((uint32_t)(j) << 13) | (uint32_t)(n))

// ---- compaction ------------------------------------------------------------------------------------------

// One (block b, group g) of the TwELL, walked by one warp: items (row j, tile t) in row-major order, one
// item per lane per round. Calls fn(lane_item_valid, row j, unit n, value bits) for every entry of the
// lane's item that falls in the group, in column order; `round_done` after each round (warp-uniform).
struct TwellSlGroupWalk {
    const uint32_t *tw;
    const int *ovf_flag;
    int M, F, words, slots, row_words, UG;
};

// Packed per-class counters: 8 classes x 16 bits in 4 words (class k in word k/2, bits 16*(k&1)).
__device__ __forceinline__ void sl_hist_add(uint32_t h[4], int k) {
#pragma unroll
    for (int w = 0; w < 4; w++)
        if ((k >> 1) == w) h[w] += 1u << (16 * (k & 1));
}
__device__ __forceinline__ int sl_hist_get(const uint32_t h[4], int k) {
    uint32_t v = 0;
#pragma unroll
    for (int w = 0; w < 4; w++)
        if ((k >> 1) == w) v = h[w];
    return (int)((v >> (16 * (k & 1))) & 0xFFFFu);
}

// Per-lane class histogram of the entries of item (this lane) for block b, group g, round base `it0`.
// nt = tiles spanned by the group, t0 its first tile. Returns the number of entries of the item in the group.
__device__ __forceinline__ int sl_item_hist(const TwellSlGroupWalk &w, int b, int g, int t0, int nt, int item,
                                            uint32_t h[4]) {
    h[0] = h[1] = h[2] = h[3] = 0;
    if (item >= TWELL_SL_TOK * nt) return 0;
    const int j = item / nt, t = t0 + item % nt, row = b * TWELL_SL_TOK + j;
    if (row >= w.M || w.ovf_flag[row]) return 0;
    const uint32_t *tile = w.tw + (size_t)row * w.row_words + (size_t)t * w.words;
    const int cnt = min((int)tile[0], w.slots);
    const int glo = g * w.UG, ghi = min(glo + w.UG, w.F);
    const int lo = max(glo - t * TWELL_TILE, 0), hi = min(ghi - t * TWELL_TILE, TWELL_TILE);
    int c = 0;
    for (int k = 1; k <= cnt; k++) {
        const int col = (int)(tile[k] & 0xFFu);
        if (col >= hi) break;  // entries are in column order
        if (col >= lo) { sl_hist_add(h, col & 7); c++; }  // n mod 8 = col mod 8 (tiles are 256-aligned)
    }
    return c;
}

// Warp all-reduce / exclusive scan of the packed histograms (16-bit fields never overflow: at most
// 8 rows x 7 tiles x 127 slots = 7112 entries per group).
__device__ __forceinline__ void sl_hist_allreduce(uint32_t h[4]) {
#pragma unroll
    for (int w = 0; w < 4; w++)
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) h[w] += __shfl_xor_sync(0xffffffffu, h[w], o);
}
__device__ __forceinline__ void sl_hist_excl_scan(uint32_t h[4], uint32_t tot[4], int lane) {
#pragma unroll
    for (int w = 0; w < 4; w++) {
        uint32_t incl = h[w];
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            uint32_t n = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += n;
        }
        tot[w] = __shfl_sync(0xffffffffu, incl, 31);
        h[w] = incl - h[w];
    }
}

// Tiles [t0, t0 + nt) spanned by group g.
__device__ __forceinline__ void sl_group_tiles(int g, int UG, int F, int *t0, int *nt) {
    const int glo = g * UG, ghi = min(glo + UG, F);
    *t0 = glo / TWELL_TILE;
    *nt = ghi > glo ? (ghi - 1) / TWELL_TILE - *t0 + 1 : 0;
}

// cnt[b*(NG+1) + g] = pad8(pairs of block b in group g); cnt[b*(NG+1) + NG] = 0 or 8 (block size % 16 == 0).
__global__ void __launch_bounds__(TWELL_SL_CMP_WARPS * 32)
twell_sl_count_kernel(TwellSlGroupWalk w, int NG, int *__restrict__ cnt) {
    const int lane = threadIdx.x & 31;
    const int nblocks = (w.M + TWELL_SL_TOK - 1) / TWELL_SL_TOK;
    const int b = blockIdx.x * TWELL_SL_CMP_WARPS + (threadIdx.x >> 5);
    if (b >= nblocks) return;  // warp-uniform
    int size = 0;
    for (int g = 0; g < NG; g++) {
        int t0, nt;
        sl_group_tiles(g, w.UG, w.F, &t0, &nt);
        int L = 0;
        for (int it0 = 0; it0 < TWELL_SL_TOK * nt; it0 += 32) {
            uint32_t h[4];
            int c = sl_item_hist(w, b, g, t0, nt, it0 + lane, h);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) c += __shfl_xor_sync(0xffffffffu, c, o);
            L += c;
        }
        const int p = (L + 7) & ~7;
        if (lane == 0) cnt[(size_t)b * (NG + 1) + g] = p;
        size += p;
    }
    if (lane == 0) cnt[(size_t)b * (NG + 1) + NG] = (size & 15) ? 8 : 0;
}

// Writes the records (layout at the top). seg: exclusive scan of cnt, seg[nblocks*(NG+1)] = total slots.
__global__ void __launch_bounds__(TWELL_SL_CMP_WARPS * 32)
twell_sl_fill_kernel(TwellSlGroupWalk w, int NG, const int *__restrict__ seg, size_t cap, uint32_t *__restrict__ rec,
                     int *__restrict__ status, long long *__restrict__ slots_out) {
    const int lane = threadIdx.x & 31;
    const int nblocks = (w.M + TWELL_SL_TOK - 1) / TWELL_SL_TOK;
    const long long total = seg[(size_t)nblocks * (NG + 1)];
    if (blockIdx.x == 0 && threadIdx.x == 0) {
        *slots_out = total;
        if ((size_t)total > cap) *status = 1;
    }
    if ((size_t)total > cap) return;
    const int b = blockIdx.x * TWELL_SL_CMP_WARPS + (threadIdx.x >> 5);
    if (b >= nblocks) return;
    for (int g = 0; g < NG; g++) {
        const int base = seg[(size_t)b * (NG + 1) + g];
        const int Lp = seg[(size_t)b * (NG + 1) + g + 1] - base;  // pad8(L)
        if (Lp == 0) continue;
        int t0, nt;
        sl_group_tiles(g, w.UG, w.F, &t0, &nt);
        // Pass 1: class totals -> class bases (first sorted index of each class).
        uint32_t tot[4] = {0, 0, 0, 0};
        for (int it0 = 0; it0 < TWELL_SL_TOK * nt; it0 += 32) {
            uint32_t h[4];
            sl_item_hist(w, b, g, t0, nt, it0 + lane, h);
            sl_hist_allreduce(h);
#pragma unroll
            for (int k = 0; k < 4; k++) tot[k] += h[k];
        }
        int cbase[9];
        cbase[0] = 0;
#pragma unroll
        for (int k = 0; k < 8; k++) cbase[k + 1] = cbase[k] + sl_hist_get(tot, k);
        const int L = cbase[8], R = (L + 7) >> 3;  // rows of 8 slots; Lp == 8 R
        // Pass 2: sorted index q of every entry = cbase[class] + earlier entries of its class; slot
        // (q % R) * 8 + q / R (column-major deal: a row's 8 slots come from 8 different sorted runs).
        uint32_t carry[4] = {0, 0, 0, 0};
        for (int it0 = 0; it0 < TWELL_SL_TOK * nt; it0 += 32) {
            uint32_t h[4], rtot[4];
            const int item = it0 + lane;
            sl_item_hist(w, b, g, t0, nt, item, h);
            sl_hist_excl_scan(h, rtot, lane);  // h := entries of each class in earlier lanes of this round
            if (item < TWELL_SL_TOK * nt) {
                const int j = item / nt, t = t0 + item % nt, row = b * TWELL_SL_TOK + j;
                if (row < w.M && !w.ovf_flag[row]) {
                    const uint32_t *tile = w.tw + (size_t)row * w.row_words + (size_t)t * w.words;
                    const int cnt = min((int)tile[0], w.slots);
                    const int glo = g * w.UG, ghi = min(glo + w.UG, w.F);
                    const int lo = max(glo - t * TWELL_TILE, 0), hi = min(ghi - t * TWELL_TILE, TWELL_TILE);
                    uint32_t seen[4] = {0, 0, 0, 0};
                    for (int k = 1; k <= cnt; k++) {
                        const uint32_t word = tile[k];
                        const int col = (int)(word & 0xFFu);
                        if (col >= hi) break;
                        if (col < lo) continue;
                        const int cls = col & 7;
                        int q = 0;
#pragma unroll
                        for (int kk = 0; kk < 8; kk++)
                            if (kk == cls) q = cbase[kk];
                        q += sl_hist_get(carry, cls) + sl_hist_get(h, cls) + sl_hist_get(seen, cls);
                        sl_hist_add(seen, cls);
                        const int pos = (q % R) * 8 + q / R;
                        rec[(size_t)base + pos] = TWELL_SL_REC(word >> 16, j, t * TWELL_TILE + col);
                    }
                }
            }
#pragma unroll
            for (int k = 0; k < 4; k++) carry[k] += rtot[k];
        }
        // Holes (sorted indices q in [L, 8R), at most 7): value-0 records whose unit class is one that the
        // real entries of their row of 8 do not use (the i-th hole of a row takes the i-th free class).
        const int q = L + lane;
        if (q < 8 * R) {
            const int r = q % R, c = q / R;
            uint32_t used = 0;
            int first_hole = 8;
            for (int cc = 0; cc < 8; cc++) {
                const int qq = r + cc * R;
                if (qq < L) {
                    int cls = 0;
#pragma unroll
                    for (int kk = 1; kk < 8; kk++)
                        if (qq >= cbase[kk]) cls = kk;
                    used |= 1u << cls;
                } else if (first_hole == 8) {
                    first_hole = cc;
                }
            }
            int want = c - first_hole, cls = 0;
            for (int kk = 0; kk < 8; kk++)
                if (!(used & (1u << kk))) {
                    if (want == 0) { cls = kk; break; }
                    want--;
                }
            rec[(size_t)base + (size_t)r * 8 + c] = TWELL_SL_REC(0, 0, g * w.UG + cls);
        }
    }
    // Block padding (0 or 8 slots): units 0..7, one per class.
    const int pb = seg[(size_t)b * (NG + 1) + NG], pe = seg[(size_t)(b + 1) * (NG + 1)];
    if (lane < pe - pb) rec[(size_t)pb + lane] = TWELL_SL_REC(0, 0, lane);
}

// ---- up: partial dots per 64-column slice ----------------------------------------------------------------

// Shared memory of the up kernel: the weight block (UG rows x 128 bytes) + per warp 2 stages of x (8 x 128 B).
static inline size_t twell_sl_up_smem(int UG) {
    return (size_t)UG * TWELL_SL_UCOLS * 2 + (size_t)TWELL_SL_UP_WARPS * 2 * TWELL_SL_TOK * TWELL_SL_UCOLS * 2;
}

__global__ void __launch_bounds__(TWELL_SL_UP_WARPS * 32, 1)
twell_sl_up_kernel(const bf16 *__restrict__ X, const bf16 *__restrict__ Wu, const uint32_t *__restrict__ rec,
                   const int *__restrict__ seg, float *__restrict__ part, int M, int D, int F, int NG, int UG,
                   size_t cap) {
    constexpr int COLS = TWELL_SL_UCOLS, ROWB = COLS * 2, CH = COLS / 8, KS = COLS / 16;
    constexpr int STAGE = TWELL_SL_TOK * ROWB;
    extern __shared__ __align__(128) unsigned char twell_sl_smem[];
    const int nblocks = (M + TWELL_SL_TOK - 1) / TWELL_SL_TOK;
    if ((size_t)seg[(size_t)nblocks * (NG + 1)] > cap) return;  // capacity exceeded: the caller falls back
    const int NSU = D / COLS;
    const int sl = blockIdx.x % NSU, g = blockIdx.x / NSU, n0 = g * UG;
    unsigned char *Wsm = twell_sl_smem;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, NW = blockDim.x >> 5;
    unsigned char *xs = twell_sl_smem + (size_t)UG * ROWB + (size_t)warp * 2 * STAGE;

    for (int i = threadIdx.x; i < UG * CH; i += blockDim.x) {
        const int r = i / CH, c = i % CH, n = n0 + r;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (n < F) v = __ldg(reinterpret_cast<const uint4 *>(Wu + (size_t)n * D + (size_t)sl * COLS + c * 8));
        *reinterpret_cast<uint4 *>(Wsm + (size_t)r * ROWB + ((c ^ (r & 7)) << 4)) = v;
    }
    __syncthreads();

    // x[8 tokens of block bb, this slice] -> stage st (16-byte chunk c of token row r at c ^ r).
    auto x_copy = [&](int bb, int st) {
        for (int i = lane; i < TWELL_SL_TOK * CH; i += 32) {
            const int r = i / CH, c = i % CH, row = bb * TWELL_SL_TOK + r;
            const bool ok = row < M;
            tc_cp_async16(xs + st * STAGE + r * ROWB + ((c ^ r) << 4),
                          X + (size_t)(ok ? row : 0) * D + (size_t)sl * COLS + c * 8, ok ? 16 : 0);
        }
        tc_cp_async_commit();
    };
    const size_t gs = (size_t)NG + 1;
    const int a_off = (lane & 7) + 8 * ((lane >> 3) & 1);  // this lane's A row within a 16-slot tile
    int b = warp, st = 0;
    int s_lo = 0, s_hi = 0, n_lo = 0, n_hi = 0;
    uint32_t ra0 = 0;
    if (b < nblocks) {
        x_copy(b, 0);
        s_lo = seg[b * gs + g]; s_hi = seg[b * gs + g + 1];
        if (s_lo + a_off < s_hi) ra0 = __ldg(rec + s_lo + a_off);
        if (b + NW < nblocks) { n_lo = seg[(b + NW) * gs + g]; n_hi = seg[(b + NW) * gs + g + 1]; }
    }
    for (; b < nblocks; b += NW) {
        const int bn = b + NW, bnn = b + 2 * NW;
        // Prefetch: x of the next block, its first records, the segment after it.
        uint32_t ra0n = 0;
        int nn_lo = 0, nn_hi = 0;
        if (bn < nblocks) {
            x_copy(bn, st ^ 1);
            if (n_lo + a_off < n_hi) ra0n = __ldg(rec + n_lo + a_off);
        } else {
            tc_cp_async_commit();  // an empty group keeps the wait count below uniform
        }
        if (bnn < nblocks) { nn_lo = seg[bnn * gs + g]; nn_hi = seg[bnn * gs + g + 1]; }
        tc_cp_async_wait<1>();
        __syncwarp();
        if (s_lo < s_hi) {
            // B fragments: x[token][16 ks + ...] for the KS k-steps (xb[2ks], xb[2ks+1]).
            uint32_t xb[CH];
            const unsigned char *xst = xs + st * STAGE;
#pragma unroll
            for (int h = 0; h < CH / 4; h++) {
                const int c = 4 * h + (lane >> 3), r = lane & 7;
                tc_ldsm_x4(&xb[4 * h], xst + r * ROWB + ((c ^ r) << 4));
            }
            uint32_t ra = ra0;
            for (int m0 = s_lo; m0 < s_hi; m0 += 16) {
                uint32_t ra_nx = 0;
                if (m0 + 16 + a_off < s_hi) ra_nx = __ldg(rec + m0 + 16 + a_off);
                const bool valid = m0 + a_off < s_hi;
                const int nl = valid ? TWELL_SL_REC_N(ra) - n0 : (lane & 7);
                const unsigned char *wrow = Wsm + (size_t)nl * ROWB;
                float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int ks = 0; ks < KS; ks++) {
                    uint32_t a[4];
                    const int ch = 2 * ks + (lane >> 4);
                    tc_ldsm_x4(a, wrow + ((ch ^ (nl & 7)) << 4));
                    tc_mma_bf16(c, a, xb[2 * ks], xb[2 * ks + 1]);
                }
                // C[slot][token]: keep the entry of each slot's own token (one thread holds it).
                const int gq = lane >> 2, t = lane & 3;
                const uint32_t r0 = __shfl_sync(0xffffffffu, ra, gq), r1 = __shfl_sync(0xffffffffu, ra, gq + 8);
                const int j0 = TWELL_SL_REC_J(r0), j1 = TWELL_SL_REC_J(r1);
                float *pp = part + (size_t)sl * cap;
                if (m0 + gq < s_hi && (j0 >> 1) == t) pp[m0 + gq] = (j0 & 1) ? c[1] : c[0];
                if (m0 + gq + 8 < s_hi && (j1 >> 1) == t) pp[m0 + gq + 8] = (j1 & 1) ? c[3] : c[2];
                ra = ra_nx;
            }
        }
        __syncwarp();  // every lane is done with stage st before the next iteration refills it
        st ^= 1;
        s_lo = n_lo; s_hi = n_hi; n_lo = nn_lo; n_hi = nn_hi; ra0 = ra0n;
    }
    tc_cp_async_wait<0>();
}

// ---- reduce: h = bf16(g * sum of the partial dots) --------------------------------------------------------
__global__ void twell_sl_reduce_kernel(uint32_t *__restrict__ rec, const float *__restrict__ part,
                                       const int *__restrict__ seg_total, int NSU, size_t cap) {
    const long long total = *seg_total;
    if ((size_t)total > cap) return;
    for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < total;
         q += (long long)gridDim.x * blockDim.x) {
        const uint32_t r = rec[q];
        if ((r >> 16) == 0) continue;  // padding slot: value stays 0
        float u = 0.0f;
        for (int s = 0; s < NSU; s++) u += part[(size_t)s * cap + (size_t)q];
        const float gv = __uint_as_float(r & 0xFFFF0000u);
        const uint32_t hb = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(gv * u));
        rec[q] = (hb << 16) | (r & 0xFFFFu);
    }
}

// ---- down: y[8 tokens, 16 cols] per block from the block's slots ------------------------------------------
static inline size_t twell_sl_down_smem(int F) { return (size_t)F * TWELL_SL_DCOLS * 2; }

// B element of slot record r for token column gq: h if the slot's token is gq, else 0 (bf16 bits).
__device__ __forceinline__ uint32_t sl_bsel(uint32_t r, int gq) { return TWELL_SL_REC_J(r) == gq ? (r >> 16) : 0u; }

__global__ void __launch_bounds__(TWELL_SL_DOWN_WARPS * 32, 1)
twell_sl_down_kernel(const uint32_t *__restrict__ rec, const int *__restrict__ seg, const bf16 *__restrict__ WdT,
                     const int *__restrict__ ovf_flag, bf16 *__restrict__ Y, int M, int D, int F, int NG, size_t cap) {
    constexpr int ROWB = TWELL_SL_DCOLS * 2;
    extern __shared__ __align__(128) unsigned char twell_sl_smem[];
    const int nblocks = (M + TWELL_SL_TOK - 1) / TWELL_SL_TOK;
    if ((size_t)seg[(size_t)nblocks * (NG + 1)] > cap) return;
    const int sl = blockIdx.x;
    unsigned char *Wsm = twell_sl_smem;
    for (int i = threadIdx.x; i < F * 2; i += blockDim.x) {
        const int n = i >> 1, c = i & 1;
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(WdT + (size_t)n * D + (size_t)sl * TWELL_SL_DCOLS + c * 8));
        *reinterpret_cast<uint4 *>(Wsm + (size_t)n * ROWB + ((c ^ ((n >> 2) & 1)) << 4)) = v;
    }
    __syncthreads();
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, NW = blockDim.x >> 5;
    const int gq = lane >> 2, t = lane & 3;
    const int a_slot = (lane & 7) + 8 * (lane >> 4), a_chunk = (lane >> 3) & 1;
    const size_t gs = (size_t)NG + 1;
    // Output mapping (after pairing with lane ^ 4): token row 2t + (gq & 1), columns (gq & ~1) + {0,1} and +8.
    const int out_tok = 2 * t + (gq & 1), out_col = gq & ~1;
    for (int b = warp; b < nblocks; b += NW) {
        const int k_lo = seg[b * gs], k_hi = seg[(b + 1) * gs];
        const int orow = b * TWELL_SL_TOK + out_tok;
        const bool store = orow < M && !ovf_flag[orow];
        float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
        uint32_t ra = 0;
        uint2 p0 = make_uint2(0, 0), p1 = make_uint2(0, 0);
        if (k_lo < k_hi) {
            ra = __ldg(rec + k_lo + a_slot);
            p0 = __ldg(reinterpret_cast<const uint2 *>(rec + k_lo + 2 * t));
            p1 = __ldg(reinterpret_cast<const uint2 *>(rec + k_lo + 2 * t + 8));
        }
        for (int k0 = k_lo; k0 < k_hi; k0 += 16) {
            uint32_t ran = 0;
            uint2 p0n = make_uint2(0, 0), p1n = make_uint2(0, 0);
            if (k0 + 16 < k_hi) {
                ran = __ldg(rec + k0 + 16 + a_slot);
                p0n = __ldg(reinterpret_cast<const uint2 *>(rec + k0 + 16 + 2 * t));
                p1n = __ldg(reinterpret_cast<const uint2 *>(rec + k0 + 16 + 2 * t + 8));
            }
            const int n = TWELL_SL_REC_N(ra);
            uint32_t a[4];
            tc_ldsm_x4_trans(a, Wsm + (size_t)n * ROWB + ((a_chunk ^ ((n >> 2) & 1)) << 4));
            const uint32_t b0 = sl_bsel(p0.x, gq) | (sl_bsel(p0.y, gq) << 16);
            const uint32_t b1 = sl_bsel(p1.x, gq) | (sl_bsel(p1.y, gq) << 16);
            tc_mma_bf16(c, a, b0, b1);
            ra = ran; p0 = p0n; p1 = p1n;
        }
        // c0 = y[2t][gq], c1 = y[2t+1][gq], c2 = y[2t][gq+8], c3 = y[2t+1][gq+8]: pair with lane ^ 4 so each
        // lane stores two adjacent columns (4 bytes) of one token row.
        const bool even = (gq & 1) == 0;
        const float v1 = __shfl_xor_sync(0xffffffffu, even ? c[1] : c[0], 4);
        const float v2 = __shfl_xor_sync(0xffffffffu, even ? c[3] : c[2], 4);
        if (store) {
            const __nv_bfloat162 lo = even ? __floats2bfloat162_rn(c[0], v1) : __floats2bfloat162_rn(v1, c[1]);
            const __nv_bfloat162 hi = even ? __floats2bfloat162_rn(c[2], v2) : __floats2bfloat162_rn(v2, c[3]);
            bf16 *yp = Y + (size_t)orow * D + (size_t)sl * TWELL_SL_DCOLS + out_col;
            *reinterpret_cast<__nv_bfloat162 *>(yp) = lo;
            *reinterpret_cast<__nv_bfloat162 *>(yp + 8) = hi;
        }
    }
}

// Unit groups of the up for F: the fewest whose weight block fits next to the x stages. Returns NG (UG via
// *ug, a multiple of 8), or 0 if no split fits.
static inline int twell_sl_groups(int F, int optin, int *ug) {
    for (int NG = 1; NG <= TWELL_SL_MAXG; NG++) {
        int UG = ((F + NG - 1) / NG + 7) & ~7;
        if (twell_sl_up_smem(UG) <= (size_t)optin) { *ug = UG; return NG; }
    }
    return 0;
}

#ifndef TC_EMU
// ---- host API --------------------------------------------------------------------------------------------

typedef struct {
    int max_M, D, F, C, gated;
    int nblocks_max;
    int NG, UG;           // up unit groups, units per group (multiple of 8)
    int NSU, NSD;         // up slices (D / 64), down slices (D / 16)
    size_t cap;           // slot capacity
    size_t smem_up, smem_down;
    uint32_t *rec;        // [cap]
    float *part;          // [NSU, cap] (gated only)
    int *cnt, *seg;       // [nblocks_max * (NG + 1) + 1]
    void *scan_tmp;
    size_t scan_tmp_bytes;
    // Stage timing (benchmarks): when `timing` is set, events are recorded before the compaction, the up, the
    // reduce and the down and after the down (ev[0..4]); twell_sliced_stage_ms reads them after a sync.
    int timing;
    cudaEvent_t ev[5];
} TwellSlicedWS;

// Stage times (ms) of the last timed call: [0] compaction (count + scan + fill), [1] up, [2] reduce, [3] down.
static inline void twell_sliced_stage_ms(TwellSlicedWS *ws, float ms[4]) {
    for (int i = 0; i < 4; i++) {
        ms[i] = 0.0f;
        if (ws->timing) cudaCheck(cudaEventElapsedTime(&ms[i], ws->ev[i], ws->ev[i + 1]));
    }
}

// Largest dynamic shared memory per block on this device (opt-in), in bytes.
static inline int twell_sl_smem_optin(void) {
    int dev = 0, v = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return v;
}

// 1 if the sliced up/down takes (D, F) on this device; else 0 and, if why != NULL, the reason.
static inline int twell_sliced_supports(int D, int F, int gated, char *why, size_t why_len) {
    const int optin = twell_sl_smem_optin();
    int ug = 0;
    const char *w = NULL;
    char buf[160];
    if (D <= 0 || D % TWELL_SL_UCOLS != 0) w = "D must be a multiple of 64";
    else if (F <= 0 || F % TWELL_TILE != 0) w = "F must be a multiple of 256";
    else if (F > 8192) w = "F must be <= 8192 (13-bit unit index in a slot record)";
    else if (twell_sl_down_smem(F) > (size_t)optin) {
        snprintf(buf, sizeof buf, "F x 32 bytes = %zu must fit the %d bytes of shared memory per block",
                 twell_sl_down_smem(F), optin);
        w = buf;
    } else if (gated && twell_sl_groups(F, optin, &ug) == 0) w = "no unit-group split of F fits shared memory";
    if (w && why) snprintf(why, why_len, "%s", w);
    return w == NULL;
}

static inline void twell_sliced_free(TwellSlicedWS *ws) {
    if (!ws->rec) return;
    for (int i = 0; i < 5; i++)
        if (ws->ev[i]) cudaCheck(cudaEventDestroy(ws->ev[i]));
    cudaCheck(cudaFree(ws->rec));
    if (ws->part) cudaCheck(cudaFree(ws->part));
    cudaCheck(cudaFree(ws->cnt));
    cudaCheck(cudaFree(ws->seg));
    cudaCheck(cudaFree(ws->scan_tmp));
    memset(ws, 0, sizeof(*ws));
}

// Allocates for up to max_M tokens and slots_per_token slots per token on average (<= 0: the default).
// Returns TWELL_OK, or TWELL_ERR_SHAPE with a message when the shape does not fit (twell_sliced_supports).
static inline int twell_sliced_create(TwellSlicedWS *ws, int max_M, int D, int F, int C, int gated,
                                      int slots_per_token) {
    memset(ws, 0, sizeof(*ws));
    char why[200];
    if (!twell_sliced_supports(D, F, gated, why, sizeof why)) {
        fprintf(stderr, "error: twell: the sliced up/down does not take D=%d F=%d: %s\n", D, F, why);
        return TWELL_ERR_SHAPE;
    }
    if (max_M < 1 || (C != 2 && C != 4 && C != 8)) {
        fprintf(stderr, "error: twell_sliced_create: max_M=%d must be >= 1 and C=%d in {2, 4, 8}\n", max_M, C);
        return TWELL_ERR_SHAPE;
    }
    if (slots_per_token <= 0) slots_per_token = TWELL_SL_DEFAULT_SLOTS_PER_TOKEN;
    const int optin = twell_sl_smem_optin();
    ws->max_M = max_M; ws->D = D; ws->F = F; ws->C = C; ws->gated = gated ? 1 : 0;
    ws->nblocks_max = (max_M + TWELL_SL_TOK - 1) / TWELL_SL_TOK;
    if (gated) ws->NG = twell_sl_groups(F, optin, &ws->UG);
    else { ws->NG = 1; ws->UG = (F + 7) & ~7; }
    ws->NSU = D / TWELL_SL_UCOLS;
    ws->NSD = D / TWELL_SL_DCOLS;
    ws->cap = (size_t)max_M * slots_per_token;
    if (ws->cap > ((size_t)1 << 31) - 1) ws->cap = ((size_t)1 << 31) - 1;  // int slot indices
    ws->smem_up = twell_sl_up_smem(ws->UG);
    ws->smem_down = twell_sl_down_smem(F);
    const size_t nseg = (size_t)ws->nblocks_max * (ws->NG + 1) + 1;
    cudaCheck(cudaMalloc(&ws->rec, sizeof(uint32_t) * ws->cap));
    if (gated) cudaCheck(cudaMalloc(&ws->part, sizeof(float) * ws->cap * ws->NSU));
    cudaCheck(cudaMalloc(&ws->cnt, sizeof(int) * nseg));
    cudaCheck(cudaMalloc(&ws->seg, sizeof(int) * nseg));
    cudaCheck(cub::DeviceScan::ExclusiveSum(NULL, ws->scan_tmp_bytes, ws->cnt, ws->seg, (int)nseg));
    cudaCheck(cudaMalloc(&ws->scan_tmp, ws->scan_tmp_bytes > 0 ? ws->scan_tmp_bytes : 16));
    for (int i = 0; i < 5; i++) cudaCheck(cudaEventCreate(&ws->ev[i]));
    cudaCheck(cudaFuncSetAttribute(twell_sl_up_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws->smem_up));
    cudaCheck(cudaFuncSetAttribute(twell_sl_down_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)ws->smem_down));
    return TWELL_OK;
}

// The sliced up/down for M rows (see the top of the file). tw / ovf_flag: the gate's output. status:
// set to 1 on the device when the slots exceed the capacity (then nothing was written to Y: the caller
// runs the token-major kernel); slots_out: the number of slots (padding included). Both device pointers.
static inline int twell_sliced_updown(TwellSlicedWS *ws, const uint32_t *tw, const int *ovf_flag, const bf16 *X,
                                      const bf16 *Wu, const bf16 *WdT, bf16 *Y, int M, int *status,
                                      long long *slots_out, cudaStream_t stream) {
    if (M < 1 || M > ws->max_M) {
        fprintf(stderr, "error: twell_sliced_updown: M=%d must be in [1, %d]\n", M, ws->max_M);
        return TWELL_ERR_WORKSPACE;
    }
    if (ws->gated && !Wu) {
        fprintf(stderr, "error: twell_sliced_updown: the workspace is gated but Wu is NULL\n");
        return TWELL_ERR_ARG;
    }
    const int nblocks = (M + TWELL_SL_TOK - 1) / TWELL_SL_TOK;
    const size_t nseg = (size_t)nblocks * (ws->NG + 1) + 1;
    TwellSlGroupWalk w;
    w.tw = tw; w.ovf_flag = ovf_flag; w.M = M; w.F = ws->F; w.words = TWELL_TILE / ws->C; w.slots = w.words - 1;
    w.row_words = ws->F / ws->C; w.UG = ws->UG;
    const int cblocks = CEIL_DIV(nblocks, TWELL_SL_CMP_WARPS);
    if (ws->timing) cudaCheck(cudaEventRecord(ws->ev[0], stream));
    cudaCheck(cudaMemsetAsync(ws->cnt + nseg - 1, 0, sizeof(int), stream));
    twell_sl_count_kernel<<<cblocks, TWELL_SL_CMP_WARPS * 32, 0, stream>>>(w, ws->NG, ws->cnt);
    cudaCheckLaunch();
    size_t tmp = ws->scan_tmp_bytes;
    cudaCheck(cub::DeviceScan::ExclusiveSum(ws->scan_tmp, tmp, ws->cnt, ws->seg, (int)nseg, stream));
    twell_sl_fill_kernel<<<cblocks, TWELL_SL_CMP_WARPS * 32, 0, stream>>>(w, ws->NG, ws->seg, ws->cap, ws->rec, status,
                                                                        slots_out);
    cudaCheckLaunch();
    if (ws->timing) cudaCheck(cudaEventRecord(ws->ev[1], stream));
    if (ws->gated) {
        twell_sl_up_kernel<<<ws->NSU * ws->NG, TWELL_SL_UP_WARPS * 32, ws->smem_up, stream>>>(
            X, Wu, ws->rec, ws->seg, ws->part, M, ws->D, ws->F, ws->NG, ws->UG, ws->cap);
        cudaCheckLaunch();
        int dev = 0, sms = 132;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
        if (ws->timing) cudaCheck(cudaEventRecord(ws->ev[2], stream));
        twell_sl_reduce_kernel<<<sms * 4, 256, 0, stream>>>(ws->rec, ws->part, ws->seg + nseg - 1, ws->NSU, ws->cap);
        cudaCheckLaunch();
    } else if (ws->timing) {
        cudaCheck(cudaEventRecord(ws->ev[2], stream));
    }
    if (ws->timing) cudaCheck(cudaEventRecord(ws->ev[3], stream));
    twell_sl_down_kernel<<<ws->NSD, TWELL_SL_DOWN_WARPS * 32, ws->smem_down, stream>>>(
        ws->rec, ws->seg, WdT, ovf_flag, Y, M, ws->D, ws->F, ws->NG, ws->cap);
    cudaCheckLaunch();
    if (ws->timing) cudaCheck(cudaEventRecord(ws->ev[4], stream));
    return TWELL_OK;
}
#endif  // !TC_EMU

#endif  // SLLM_TWELL_SLICED_CUH
