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
// keeps one block of one weight matrix in shared memory (it never moves) and only 4-byte records move.
//
// Slots. Tokens are taken in BLOCKS of 8 (the mma's N). Block b owns the fixed slot area [b*SB, b*SB + SB)
// of two record arrays; every active (token, unit) pair of a non-overflow row has one record in each:
//   UP order (rec_up):  bits 0..12 unit n, bits 13..15 token j (0..7), bits 16..31 the bf16 gate value.
//     Unit group g (units [g*UG, g*UG + UG)) owns [ustart[g], ustart[g+1]) of the block (a multiple of 8).
//   DOWN order (rec_down): bits 0..13 f = 2n + ((n >> 2) & 1), bits 16..31 the bf16 h (or the TwELL value,
//     non-gated). The token is the position: logical slot s of a 16-slot k-step belongs to token s & 7 (so
//     the B fragment of the down mma needs no compares), and the 16 records of a k-step are stored in
//     fragment order (logical slot 2t+e+8h at word 4t+2h+e: thread t loads its 4 with one 16-byte load).
//   dpos[up slot] = the pair's down slot (the reduce scatters h through it). Padding records have value 0.
// A block whose pairs do not fit SB slots in either order sends its rows to the dense fallback (counted).
// Bank conflicts: an ldmatrix phase reads 8 rows of 16 bytes; with the swizzles below its rows hit 8 distinct
// bank groups iff their classes differ, so both orders are built class-aware:
//   up:   class (n & 7) ^ pi_j per group segment: records sorted by class and dealt column-major into rows
//         of 8; pi_j (3 bits per token and group, SlBlockInfo.pim) is a per-token XOR of the k-chunk order
//         chosen greedily to balance the classes (the B column of token j and the A rows of token j's slots
//         both read chunk c ^ pi_j, so their products are unchanged; only the unused cross-token ones mix);
//   down: a phase (8 slots, one per token) holds distinct classes n & 7: class by class, a token's pairs take
//         the first phases where the token is free and the class unused (padding where a token runs out).
//
// Kernels (one stream, no host sync):
//   1. compact (warp per block): both orders, dpos, SlBlockInfo (twell_sl_compact_kernel).
//   2. up (gated; grid NSU x NG, NSU = D/64): CTA (s, g) holds Wu[group g, cols 64s..64s+63] in shared
//      memory (128-byte rows, 16-byte chunk c of unit-row r at c ^ (r & 7)). A warp walks its blocks in
//      units of at most `rsu` slots; per unit it stages x[8 tokens, 64 cols] and the unit's records with
//      cp.async one unit ahead (double buffer), then per 16 slots: A = the 16 Wu rows (ldmatrix), B = the
//      8 tokens' x, C = 16 x 8 partial dots, of which the 16 (slot, own token) ones go to part[s][slot].
//   3. reduce (gated): h = bf16(g * sum_s part[s][slot]) in a fixed order, into the down record.
//   4. down (grid NSD = D/16): CTA s holds WdT[all F units, cols 16s..16s+15] (32-byte rows, chunk c of
//      unit n at 16 * (f ^ c)). A warp walks its blocks in units of at most `rsd` slots (records staged as
//      in the up); per 16 slots: A = 16 x 16 (cols x slots, ldmatrix.trans), B = 16 slots x 8 tokens (h on
//      the slot's own token column), C = y[8 tokens, 16 cols], written as bf16 at the end of the block.
// Shapes: D % 64 == 0, F % 256 == 0, F <= 8192 (13-bit unit index) and F x 32 bytes + staging of shared
// memory for the down block (F <= ~6900 on sm_90); twell_sliced_supports() says whether a shape fits
// (else the caller uses twell/updown.cuh).
#ifndef SLLM_TWELL_SLICED_CUH
#define SLLM_TWELL_SLICED_CUH

#ifndef TC_EMU
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
#define TWELL_SL_CMP_WARPS 4  // warps per CTA of the compaction kernel (one block of 8 tokens per warp)
#define TWELL_SL_MIN_STAGE 16  // staged records per unit, at least (one mma)
#define TWELL_SL_DEFAULT_SB 768  // slots per block (96 per token): fits nnz up to ~50 (down padding included)
#define TWELL_SL_MAX_SB 8192     // (the compaction keeps SB / 8 phase bytes per warp)

#define TWELL_SL_REC_N(r) ((int)((r) & 0x1FFFu))
#define TWELL_SL_REC_J(r) ((int)(((r) >> 13) & 7u))
#define TWELL_SL_REC(v16, j, n) (((uint32_t)(v16) << 16) | ((uint32_t)(j) << 13) | (uint32_t)(n))
#define TWELL_SL_DREC(v16, n) (((uint32_t)(v16) << 16) | (uint32_t)(2 * (n) + (((n) >> 2) & 1)))

// Word of logical slot p (of a 16-aligned run) in the down order's fragment layout.
__device__ __forceinline__ int sl_perm16(int p) {
    const int s = p & 15;
    return (p & ~15) + 4 * ((s & 7) >> 1) + 2 * (s >> 3) + (s & 1);
}

// ---- compaction ------------------------------------------------------------------------------------------

// The TwELL of one call as the compaction kernel reads it.
struct TwellSlGroupWalk {
    const uint32_t *tw;
    int *ovf_flag;  // read, and set for the rows of blocks that do not fit their slot area
    int M, F, words, slots, row_words, UG;
};

// Per block: the start of each unit group's up segment inside the block (ustart[NG] = up slots), the down
// slots (16 per k-step), the pi masks of the groups (3 bits per token).
struct SlBlockInfo {
    int ustart[TWELL_SL_MAXG + 1];
    int dsize;
    int pim[TWELL_SL_MAXG];
};

// Class of sorted index q (cb: class bases, cb[8] = total).
__device__ __forceinline__ int sl_class_of(int q, const int *cb) {
    int c = 0;
    for (int k = 1; k < 8; k++)
        if (q >= cb[k]) c = k;
    return c;
}
// Sorted index q of the column-major deal over R rows of 8 (slot (q % R) * 8 + q / R). A hole (q >= L) gets
// the class that the real entries of its row of 8 do not use (the i-th hole of a row the i-th free one).
__device__ __forceinline__ int sl_hole_class(int q, int L, int R, const int *cb) {
    const int r = q % R, c = q / R;
    uint32_t used = 0;
    int first_hole = 8;
    for (int cc = 0; cc < 8; cc++) {
        const int qq = r + cc * R;
        if (qq < L) used |= 1u << sl_class_of(qq, cb);
        else if (first_hole == 8) first_hole = cc;
    }
    int want = c - first_hole, cls = 0;
    for (int kk = 0; kk < 8; kk++)
        if (!(used & (1u << kk))) {
            if (want == 0) { cls = kk; break; }
            want--;
        }
    return cls;
}

// Per-warp shared memory of the compaction kernel: this struct, then used[pmax] and occ[pmax] (bytes), then
// pm[8][pmax / 32] (words); pmax = SB / 8 phases.
struct SlCmpWarp {
    int cnt[TWELL_SL_MAXG][TWELL_SL_TOK][8];  // pairs per (group, token, class n & 7)
    int carry[TWELL_SL_MAXG][8];              // pass B: up pairs placed so far per (group, effective class)
    int ecb[TWELL_SL_MAXG][9];                // effective-class bases per group (ecb[g][8] = pairs of g)
    int us[TWELL_SL_MAXG + 1];                // segment starts
    int pim[TWELL_SL_MAXG];                   // pi masks per group
    int rc[8];                                // pass B: down pairs of the current row placed per class
};
__host__ __device__ static inline size_t twell_sl_cmp_fixed_bytes(int SB) {
    return (sizeof(SlCmpWarp) + 2 * (size_t)(SB / 8) + 15) & ~(size_t)15;
}
__host__ __device__ static inline size_t twell_sl_cmp_warp_bytes(int SB) {
    return twell_sl_cmp_fixed_bytes(SB) + (size_t)8 * (SB / 8 / 32) * 4;
}

// Row `row` of the TwELL: lane t (< tiles <= 32) gets the exclusive prefix of the tiles' entry counts;
// returns the row's entries (0 when !active: a row past M or an overflow row).
__device__ __forceinline__ int sl_row_setup(const TwellSlGroupWalk &w, int row, bool active, int lane, int *base_t) {
    const int tiles = w.F / TWELL_TILE;
    int c = 0;
    if (active && lane < tiles) c = min((int)w.tw[(size_t)row * w.row_words + (size_t)lane * w.words], w.slots);
    const int incl = warp_scan_incl(c);
    *base_t = incl - c;
    return __shfl_sync(0xffffffffu, incl, 31);
}
// Entry e of the row (warp-uniform call; lanes with !valid get unit 0): its TwELL word; *n = its unit.
__device__ __forceinline__ uint32_t sl_row_entry(const TwellSlGroupWalk &w, int row, int base_t, int e, bool valid,
                                                 int *n) {
    const int tiles = w.F / TWELL_TILE;
    int t = 0;
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) {
        const int cand = t + k;
        const int bc = __shfl_sync(0xffffffffu, base_t, cand & 31);
        if (cand < tiles && bc <= e) t = cand;
    }
    const int bt = __shfl_sync(0xffffffffu, base_t, t);
    uint32_t word = 0;
    if (valid) word = w.tw[(size_t)row * w.row_words + (size_t)t * w.words + 1 + (e - bt)];
    *n = valid ? t * TWELL_TILE + (int)(word & 0xFFu) : 0;
    return word;
}
__device__ __forceinline__ int sl_group_of(int n, int NG, int UG) {
    int g = 0;
    for (int k = 1; k < NG; k++) g += n >= k * UG;
    return g;
}

// Down phases of token j (warp-uniform): class by class (starting at class j), the class's pairs take the
// first phases where token j is still free and the class is unused (every phase then holds distinct
// classes: a conflict-free ldmatrix phase). tcnt: lane k < 8 holds token j's pairs of class k. Updates
// used[]; when pm != NULL also occ[] and pm[k * pw + w] (the phases chosen for class k, as bits). Returns
// the phases spanned (max + 1), or -1 if pmax phases are not enough.
__device__ __forceinline__ int sl_down_greedy(int j, int tcnt, unsigned char *used, unsigned char *occ, uint32_t *pm,
                                              int pmax, int lane) {
    const int pw = pmax / 32;
    uint32_t taken = 0;  // bit wi: phase 32 wi + lane is taken by token j
    int span = 0, fail = 0;
    for (int kk = 0; kk < 8; kk++) {
        const int k = (kk + j) & 7;
        int m = __shfl_sync(0xffffffffu, tcnt, k);
        for (int wi = 0; wi < pw; wi++) {
            uint32_t sel = 0;
            if (m > 0) {  // warp-uniform
                const int p = 32 * wi + lane;
                const bool cand = !((taken >> wi) & 1u) && !((used[p] >> k) & 1);
                uint32_t bal = __ballot_sync(0xffffffffu, cand);
                for (int i = 0; i < m && bal; i++) { sel |= bal & (0u - bal); bal &= bal - 1; }
                if ((sel >> lane) & 1u) {
                    used[p] |= (unsigned char)(1u << k);
                    if (occ) occ[p] |= (unsigned char)(1u << j);
                    taken |= 1u << wi;
                }
                m -= __popc(sel);
                if (sel) span = max(span, 32 * wi + 32 - __clz(sel));
            }
            if (pm && lane == 0) pm[k * pw + wi] = sel;
        }
        if (m > 0) fail = 1;
    }
    __syncwarp();
    return fail ? -1 : span;
}

// The compaction: one warp per block of 8 tokens writes both orders of the block into its area
// [b * SB, b * SB + SB), dpos and info[b]. A block that does not fit puts its rows on the overflow list
// (ovf_flag, ovf_list, *n_ovf; counted in *sl_rows): the dense fallback computes them.
//   pass A: pairs per (group, token, class); the down phases (sl_down_greedy); per group the pi masks
//           (token by token, the XOR p < 8 that keeps the largest effective class count, then the sum of
//           squares, smallest) and the segment sizes pad8(L).
//   pass B: the same walk again, every pair placed: up slot by its rank among the pairs of its (group,
//           effective class) in walk order, dealt column-major over the segment's rows of 8; down slot =
//           its token in the phase chosen for its class. Then the value-0 holes and padding, each with a
//           class free in its row of 8.
__global__ void __launch_bounds__(TWELL_SL_CMP_WARPS * 32)
twell_sl_compact_kernel(TwellSlGroupWalk w, int NG, int SB, int gated, uint32_t *__restrict__ rec_up,
                        int *__restrict__ dpos, uint32_t *__restrict__ rec_down, SlBlockInfo *__restrict__ info,
                        int *__restrict__ ovf_list, int *__restrict__ n_ovf, int *__restrict__ sl_rows) {
    extern __shared__ __align__(128) unsigned char twell_sl_smem[];
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int nblocks = (w.M + TWELL_SL_TOK - 1) / TWELL_SL_TOK;
    const int b = blockIdx.x * TWELL_SL_CMP_WARPS + wid;
    if (b >= nblocks) return;  // warp-uniform
    const int pmax = SB / 8, pw = pmax / 32;
    unsigned char *wbase = twell_sl_smem + (size_t)wid * twell_sl_cmp_warp_bytes(SB);
    SlCmpWarp &sm = *reinterpret_cast<SlCmpWarp *>(wbase);
    unsigned char *used = wbase + sizeof(SlCmpWarp), *occ = used + pmax;
    uint32_t *pm = reinterpret_cast<uint32_t *>(wbase + twell_sl_cmp_fixed_bytes(SB));
    for (int i = lane; i < TWELL_SL_MAXG * TWELL_SL_TOK * 8; i += 32) (&sm.cnt[0][0][0])[i] = 0;
    for (int i = lane; i < TWELL_SL_MAXG * 8; i += 32) (&sm.carry[0][0])[i] = 0;
    for (int i = lane; i < pmax; i += 32) used[i] = occ[i] = 0;
    __syncwarp();
    const uint32_t lt = (1u << lane) - 1u;

    // Pass A.
    int span = 0, fail = 0;
    for (int j = 0; j < TWELL_SL_TOK; j++) {
        const int row = b * TWELL_SL_TOK + j;
        const bool active = row < w.M && !w.ovf_flag[row];
        int base_t;
        const int E = sl_row_setup(w, row, active, lane, &base_t);
        for (int e0 = 0; e0 < E; e0 += 32) {
            const int e = e0 + lane;
            int n;
            sl_row_entry(w, row, base_t, e, e < E, &n);
            if (e < E) atomicAdd(&sm.cnt[sl_group_of(n, NG, w.UG)][j][n & 7], 1);
        }
        __syncwarp();
        int tcnt = 0;
        if (lane < 8)
            for (int g = 0; g < NG; g++) tcnt += sm.cnt[g][j][lane];
        const int sp = sl_down_greedy(j, tcnt, used, NULL, NULL, pmax, lane);
        if (sp < 0) fail = 1;
        span = max(span, sp);
    }
    // Per group: pi masks (lane p < 8 scores the XOR p for the next token), effective-class bases, sizes.
    int ustart = 0;
    for (int g = 0; g < NG; g++) {
        int cur = 0, pim = 0;  // cur: lane k < 8, running count of effective class k
        for (int j = 0; j < TWELL_SL_TOK; j++) {
            uint32_t mx = 0, sq = 0;
            for (int k = 0; k < 8; k++) {
                const uint32_t v = (uint32_t)(__shfl_sync(0xffffffffu, cur, (k ^ lane) & 7) + sm.cnt[g][j][k]);
                mx = v > mx ? v : mx;
                sq += v * v;  // < 8 x 7112^2 < 2^29
            }
            uint32_t k1 = lane < 8 ? mx : 0xFFFFFFFFu;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) k1 = min(k1, __shfl_xor_sync(0xffffffffu, k1, o));
            uint32_t k2 = (lane < 8 && mx == k1) ? (sq << 3) | (uint32_t)lane : 0xFFFFFFFFu;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) k2 = min(k2, __shfl_xor_sync(0xffffffffu, k2, o));
            const int p = (int)(k2 & 7);
            pim |= p << (3 * j);
            if (lane < 8) cur += sm.cnt[g][j][lane ^ p];  // effective class lane gets true class lane ^ p
        }
        int incl = lane < 8 ? cur : 0;
#pragma unroll
        for (int o = 1; o < 8; o <<= 1) {
            const int v = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += v;
        }
        const int L = __shfl_sync(0xffffffffu, incl, 7);
        if (lane < 8) sm.ecb[g][lane] = incl - cur;
        if (lane == 8) sm.ecb[g][8] = L;
        if (lane == 0) { sm.us[g] = ustart; sm.pim[g] = pim; }
        ustart += (L + 7) & ~7;
    }
    if (lane == 0) sm.us[NG] = ustart;
    __syncwarp();
    const int dsize = 16 * ((span + 1) / 2);
    const bool fits = !fail && ustart <= SB && dsize <= SB;
    if (lane <= NG) info[b].ustart[lane] = fits ? sm.us[lane] : 0;
    if (lane < NG) info[b].pim[lane] = sm.pim[lane];
    if (lane == 0) info[b].dsize = fits ? dsize : 0;
    if (!fits) {  // the rows go to the dense fallback
        if (lane < TWELL_SL_TOK) {
            const int row = b * TWELL_SL_TOK + lane;
            if (row < w.M && !w.ovf_flag[row]) {
                w.ovf_flag[row] = 1;
                ovf_list[atomicAdd(n_ovf, 1)] = row;
                atomicAdd(sl_rows, 1);
            }
        }
        return;
    }
    for (int i = lane; i < pmax; i += 32) used[i] = 0;
    __syncwarp();

    // Pass B.
    const size_t bb = (size_t)b * SB;
    for (int j = 0; j < TWELL_SL_TOK; j++) {
        const int row = b * TWELL_SL_TOK + j;
        const bool active = row < w.M && !w.ovf_flag[row];
        int base_t;
        const int E = sl_row_setup(w, row, active, lane, &base_t);
        int tcnt = 0;
        if (lane < 8)
            for (int g = 0; g < NG; g++) tcnt += sm.cnt[g][j][lane];
        sl_down_greedy(j, tcnt, used, occ, pm, pmax, lane);
        if (lane < 8) sm.rc[lane] = 0;
        __syncwarp();
        for (int e0 = 0; e0 < E; e0 += 32) {
            const int e = e0 + lane;
            const bool valid = e < E;
            int n;
            const uint32_t word = sl_row_entry(w, row, base_t, e, valid, &n);
            const int g = sl_group_of(n, NG, w.UG), k = n & 7;
            const int pj = (sm.pim[g] >> (3 * j)) & 7;
            const int ec = k ^ pj;
            // ranks in walk order: up among (group, effective class), down among this row's class-k pairs
            const unsigned mu = __match_any_sync(0xffffffffu, valid ? g * 8 + ec : 1024 + lane);
            const unsigned md = __match_any_sync(0xffffffffu, valid ? k : 1024 + lane);
            int up = 0, dn = 0;
            if (valid) {
                const int L = sm.ecb[g][8], R = (L + 7) >> 3;
                const int q = sm.ecb[g][ec] + sm.carry[g][ec] + __popc(mu & lt);
                up = sm.us[g] + (q % R) * 8 + q / R;
                int i = sm.rc[k] + __popc(md & lt), p = 0;
                for (int wi = 0; wi < pw; wi++) {  // the i-th phase chosen for class k
                    const uint32_t x = pm[k * pw + wi];
                    const int c = __popc(x);
                    if (i < c) {
                        uint32_t y = x;
                        for (int s = 0; s < i; s++) y &= y - 1;
                        p = 32 * wi + __ffs(y) - 1;
                        break;
                    }
                    i -= c;
                }
                dn = sl_perm16((p >> 1) * 16 + (p & 1) * 8 + j);
            }
            __syncwarp();
            if (valid && (mu >> lane) == 1u) sm.carry[g][ec] += __popc(mu);  // the last lane of each key
            if (valid && (md >> lane) == 1u) sm.rc[k] += __popc(md);
            __syncwarp();
            if (valid) {
                rec_up[bb + up] = TWELL_SL_REC(word >> 16, j, n);
                dpos[bb + up] = (int)(bb + dn);
                if (!gated) rec_down[bb + dn] = TWELL_SL_DREC(word >> 16, n);
            }
        }
    }
    // Up holes: value 0, an effective class free in their row; token 0 so the unit is g*UG + (class ^ pi_0).
    for (int g = 0; g < NG; g++) {
        const int L = sm.ecb[g][8], R = (L + 7) >> 3, pim = sm.pim[g];
        for (int q = L + lane; q < 8 * R; q += 32) {
            const int ec = sl_hole_class(q, L, R, sm.ecb[g]);
            rec_up[bb + sm.us[g] + (q % R) * 8 + q / R] = TWELL_SL_REC(0, 0, g * w.UG + (ec ^ (pim & 7)));
        }
    }
    // Down padding: the (phase, token) slots left empty, each with a class free in its phase (unit = class).
    for (int i = lane; i < dsize; i += 32) {  // 2 dsize / 16 phases x 8 tokens
        const int p = i >> 3, j = i & 7;
        const uint32_t o = occ[p];
        if ((o >> j) & 1u) continue;
        int want = __popc(~o & ((1u << j) - 1u)), cls = 0;  // empty tokens before j in this phase
        const uint32_t fr = ~(uint32_t)used[p] & 0xFFu;
        for (int kk = 0; kk < 8; kk++)
            if ((fr >> kk) & 1u) {
                if (want == 0) { cls = kk; break; }
                want--;
            }
        rec_down[bb + sl_perm16((p >> 1) * 16 + (p & 1) * 8 + j)] = TWELL_SL_DREC(0, cls);
    }
}

// ---- staged units ----------------------------------------------------------------------------------------
// A warp walks the blocks b0, b0 + stride, ... in UNITS: a block's slot range [lo, hi) cut into chunks of at
// most `chunk` slots (a block with an empty range is one empty unit). The ranges of the next two blocks are
// loaded ahead (L2 latency). Range(b) returns {lo, hi, aux}.
struct SlRange { int lo, hi, aux; };
struct SlUnit {
    int b, lo, hi, aux, first, last;
};
template <typename RangeFn>
struct SlWalk {
    RangeFn range;
    int nb, stride, chunk;
    int b, pos;
    SlRange cur, n1, n2;
    __device__ __forceinline__ SlRange load(int bb) const { return bb < nb ? range(bb) : SlRange{0, 0, 0}; }
    __device__ __forceinline__ void init(int b0) {
        b = b0;
        cur = load(b);
        n1 = load(b + stride);
        n2 = load(b + 2 * stride);
        pos = cur.lo;
    }
    __device__ __forceinline__ bool valid() const { return b < nb; }
    __device__ __forceinline__ SlUnit unit() const {
        const int e = min(pos + chunk, cur.hi);
        return SlUnit{b, pos, e, cur.aux, pos == cur.lo, e >= cur.hi};
    }
    __device__ __forceinline__ void advance() {
        const int e = min(pos + chunk, cur.hi);
        if (e < cur.hi) { pos = e; return; }
        b += stride;
        cur = n1;
        n1 = n2;
        n2 = load(b + 2 * stride);
        pos = cur.lo;
    }
};

// ---- up: partial dots per 64-column slice ----------------------------------------------------------------

// Bytes of one up stage: x of 8 tokens (8 x 128 B) + rsu records.
static inline size_t twell_sl_up_stage(int rsu) { return (size_t)TWELL_SL_TOK * TWELL_SL_UCOLS * 2 + (size_t)rsu * 4; }
static inline size_t twell_sl_up_smem(int UG, int rsu) {
    return (size_t)UG * TWELL_SL_UCOLS * 2 + (size_t)TWELL_SL_UP_WARPS * 2 * twell_sl_up_stage(rsu);
}

// Slot range of block b's group-g segment (absolute), aux = the group's pi masks.
struct SlUpRange {
    const SlBlockInfo *info;
    int g, SB;
    __device__ __forceinline__ SlRange operator()(int b) const {
        const int base = b * SB;
        return SlRange{base + info[b].ustart[g], base + info[b].ustart[g + 1], info[b].pim[g]};
    }
};

__global__ void __launch_bounds__(TWELL_SL_UP_WARPS * 32, 1)
twell_sl_up_kernel(const bf16 *__restrict__ X, const bf16 *__restrict__ Wu, const uint32_t *__restrict__ rec,
                   const SlBlockInfo *__restrict__ info, float *__restrict__ part, int M, int D, int F, int NG, int UG,
                   int SB, int rsu, size_t part_ld) {
    constexpr int COLS = TWELL_SL_UCOLS, ROWB = COLS * 2, CH = COLS / 8, KS = COLS / 16;
    constexpr int XB = TWELL_SL_TOK * ROWB;
    extern __shared__ __align__(128) unsigned char twell_sl_smem[];
    const int nblocks = (M + TWELL_SL_TOK - 1) / TWELL_SL_TOK;
    const int NSU = D / COLS;
    const int sl = blockIdx.x % NSU, g = blockIdx.x / NSU, n0 = g * UG;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, NW = blockDim.x >> 5;
    const size_t stage_bytes = (size_t)XB + (size_t)rsu * 4;
    unsigned char *Wsm = twell_sl_smem;
    unsigned char *stages = twell_sl_smem + (size_t)UG * ROWB + (size_t)warp * 2 * stage_bytes;

    for (int i = threadIdx.x; i < UG * CH; i += blockDim.x) {
        const int r = i / CH, c = i % CH, n = n0 + r;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (n < F) v = __ldg(reinterpret_cast<const uint4 *>(Wu + (size_t)n * D + (size_t)sl * COLS + c * 8));
        *reinterpret_cast<uint4 *>(Wsm + (size_t)r * ROWB + ((c ^ (r & 7)) << 4)) = v;
    }
    __syncthreads();

    // Stage st of a unit: x[8 tokens of block u.b, this slice] (chunk c of token row r at c ^ r), then the
    // unit's records [u.lo, u.hi) (a multiple of 8 slots: 32-byte aligned).
    auto stage_copy = [&](const SlUnit &u, int st) {
        unsigned char *sb = stages + (size_t)st * stage_bytes;
        if (u.hi > u.lo) {
            for (int i = lane; i < TWELL_SL_TOK * CH; i += 32) {
                const int r = i / CH, c = i % CH, row = u.b * TWELL_SL_TOK + r;
                const bool ok = row < M;
                tc_cp_async16(sb + r * ROWB + ((c ^ r) << 4),
                              X + (size_t)(ok ? row : 0) * D + (size_t)sl * COLS + c * 8, ok ? 16 : 0);
            }
            for (int i = lane; i < (u.hi - u.lo) / 4; i += 32) tc_cp_async16(sb + XB + i * 16, rec + u.lo + 4 * i, 16);
        }
        tc_cp_async_commit();
    };
    SlWalk<SlUpRange> wk{SlUpRange{info, g, SB}, nblocks, NW, rsu};
    wk.init(warp);
    if (!wk.valid()) return;
    SlUnit cu = wk.unit();
    wk.advance();
    stage_copy(cu, 0);
    const int a_off = (lane & 7) + 8 * ((lane >> 3) & 1);  // this lane's A row within a 16-slot tile
    const int gq = lane >> 2, t = lane & 3;
    float *pp = part + (size_t)sl * part_ld;
    for (int st = 0;; st ^= 1) {
        const bool have_next = wk.valid();
        SlUnit nu = cu;
        if (have_next) { nu = wk.unit(); wk.advance(); }
        if (have_next) stage_copy(nu, st ^ 1);
        else tc_cp_async_commit();  // an empty group keeps the wait count below uniform
        tc_cp_async_wait<1>();
        __syncwarp();
        if (cu.hi > cu.lo) {
            const unsigned char *sb = stages + (size_t)st * stage_bytes;
            const uint32_t *rs = reinterpret_cast<const uint32_t *>(sb + XB);
            const int pim = cu.aux;
            // B fragments: column (token) r takes its chunks in the order c ^ pi_r.
            uint32_t xb[CH];
#pragma unroll
            for (int h = 0; h < CH / 4; h++) {
                const int c = 4 * h + (lane >> 3), r = lane & 7, pr = (pim >> (3 * r)) & 7;
                tc_ldsm_x4(&xb[4 * h], sb + r * ROWB + (((c ^ pr) ^ r) << 4));
            }
            for (int m0 = cu.lo; m0 < cu.hi; m0 += 16) {
                const bool valid = m0 + a_off < cu.hi;
                const uint32_t ra = valid ? rs[m0 - cu.lo + a_off] : 0u;
                const int nl = valid ? TWELL_SL_REC_N(ra) - n0 : (lane & 7);
                const int pj = valid ? (pim >> (3 * TWELL_SL_REC_J(ra))) & 7 : 0;
                const int sw = (nl & 7) ^ pj;
#ifdef TC_EMU
                if (nl < 0 || nl >= UG) {
                    fprintf(stderr, "emu up: block %d group %d unit [%d, %d) m0 %d lane %d: record %08x (unit %d) outside the group; info ustart %d %d\n",
                           cu.b, g, cu.lo, cu.hi, m0, lane, ra, TWELL_SL_REC_N(ra), info[cu.b].ustart[g], info[cu.b].ustart[g + 1]);
                    abort();
                }
#endif
                const unsigned char *wrow = Wsm + (size_t)nl * ROWB;
                float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
                for (int ks = 0; ks < KS; ks++) {
                    uint32_t a[4];
                    const int ch = 2 * ks + (lane >> 4);
                    tc_ldsm_x4(a, wrow + ((ch ^ sw) << 4));
                    tc_mma_bf16(c, a, xb[2 * ks], xb[2 * ks + 1]);
                }
                // C[slot][token]: keep the entry of each slot's own token (one thread holds it).
                const uint32_t r0 = __shfl_sync(0xffffffffu, ra, gq), r1 = __shfl_sync(0xffffffffu, ra, gq + 8);
                const int j0 = TWELL_SL_REC_J(r0), j1 = TWELL_SL_REC_J(r1);
                if (m0 + gq < cu.hi && (j0 >> 1) == t) pp[m0 + gq] = (j0 & 1) ? c[1] : c[0];
                if (m0 + gq + 8 < cu.hi && (j1 >> 1) == t) pp[m0 + gq + 8] = (j1 & 1) ? c[3] : c[2];
            }
        }
        __syncwarp();  // every lane is done with stage st before it is refilled
        if (!have_next) break;
        cu = nu;
    }
    tc_cp_async_wait<0>();
}

// ---- reduce: h = bf16(g * sum of the partial dots), into the down record ----------------------------------
__global__ void twell_sl_reduce_kernel(const uint32_t *__restrict__ rec_up, const int *__restrict__ dpos,
                                       const float *__restrict__ part, uint32_t *__restrict__ rec_down,
                                       const SlBlockInfo *__restrict__ info, int nblocks, int NG, int SB, int NSU,
                                       size_t part_ld) {
    const long long total = (long long)nblocks * SB;
    for (long long q = (long long)blockIdx.x * blockDim.x + threadIdx.x; q < total;
         q += (long long)gridDim.x * blockDim.x) {
        const int b = (int)(q / SB), i = (int)(q - (long long)b * SB);
        if (i >= info[b].ustart[NG]) continue;
        const uint32_t r = rec_up[q];
        if ((r >> 16) == 0) continue;  // padding slot
        float u = 0.0f;
        for (int s = 0; s < NSU; s++) u += part[(size_t)s * part_ld + (size_t)q];
        const float gv = __uint_as_float(r & 0xFFFF0000u);
        const uint32_t hb = (uint32_t)__bfloat16_as_ushort(__float2bfloat16_rn(gv * u));
        const int n = TWELL_SL_REC_N(r);
        rec_down[dpos[q]] = TWELL_SL_DREC(hb, n);
    }
}

// ---- down: y[8 tokens, 16 cols] per block from the block's slots ------------------------------------------
static inline size_t twell_sl_down_smem(int F, int rsd) {
    return (size_t)F * TWELL_SL_DCOLS * 2 + (size_t)TWELL_SL_DOWN_WARPS * 2 * rsd * 4;
}

struct SlDownRange {
    const SlBlockInfo *info;
    int SB;
    __device__ __forceinline__ SlRange operator()(int b) const {
        return SlRange{b * SB, b * SB + info[b].dsize, 0};
    }
};

__global__ void __launch_bounds__(TWELL_SL_DOWN_WARPS * 32, 1)
twell_sl_down_kernel(const uint32_t *__restrict__ rec, const SlBlockInfo *__restrict__ info,
                     const bf16 *__restrict__ WdT, const int *__restrict__ ovf_flag, bf16 *__restrict__ Y, int M, int D,
                     int F, int SB, int rsd) {
    constexpr int ROWB = TWELL_SL_DCOLS * 2;
    extern __shared__ __align__(128) unsigned char twell_sl_smem[];
    const int nblocks = (M + TWELL_SL_TOK - 1) / TWELL_SL_TOK;
    const int sl = blockIdx.x;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, NW = blockDim.x >> 5;
    unsigned char *Wsm = twell_sl_smem;
    uint32_t *stages = reinterpret_cast<uint32_t *>(twell_sl_smem + (size_t)F * ROWB) + (size_t)warp * 2 * rsd;
    for (int i = threadIdx.x; i < F * 2; i += blockDim.x) {
        const int n = i >> 1, c = i & 1;
        const uint4 v = __ldg(reinterpret_cast<const uint4 *>(WdT + (size_t)n * D + (size_t)sl * TWELL_SL_DCOLS + c * 8));
        *reinterpret_cast<uint4 *>(Wsm + (size_t)n * ROWB + ((c ^ ((n >> 2) & 1)) << 4)) = v;
    }
    __syncthreads();
    auto stage_copy = [&](const SlUnit &u, int st) {
        uint32_t *sb = stages + (size_t)st * rsd;
        for (int i = lane; i < (u.hi - u.lo) / 4; i += 32) tc_cp_async16(sb + 4 * i, rec + u.lo + 4 * i, 16);
        tc_cp_async_commit();
    };
    const int gq = lane >> 2, t = lane & 3;
    // A: lane L gives the row of logical slot (L & 7) + 8 (L >> 4), chunk (L >> 3) & 1; that record is word
    // 4 t' + 2 h + e of the k-step (t' = (L & 7) >> 1, e = L & 1, h = L >> 4), loaded by the lanes with
    // t = t': lane a_src hands out its word (lane >> 2) & 3.
    const uint32_t a_chunk = (lane >> 3) & 1;
    const int a_src = ((lane & 7) >> 1) + 4 * (lane & 1) + 8 * (lane >> 4);
    const int si = (lane >> 2) & 3;
    // B: logical slots 2t, 2t+1 (and 2t+8, 2t+9) belong to tokens 2t, 2t+1: column gq takes the low half (h of
    // slot 2t) if gq == 2t, the high half if gq == 2t + 1, nothing else.
    const uint32_t bmask = gq == 2 * t ? 0x0000FFFFu : gq == 2 * t + 1 ? 0xFFFF0000u : 0u;
    // Output mapping (after pairing with lane ^ 4): token row 2t + (gq & 1), columns (gq & ~1) + {0,1} and +8.
    const int out_tok = 2 * t + (gq & 1), out_col = gq & ~1;
    const bool even = (gq & 1) == 0;
    SlWalk<SlDownRange> wk{SlDownRange{info, SB}, nblocks, NW, rsd};
    wk.init(warp);
    if (!wk.valid()) return;
    SlUnit cu = wk.unit();
    wk.advance();
    stage_copy(cu, 0);
    float c[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int st = 0;; st ^= 1) {
        const bool have_next = wk.valid();
        SlUnit nu = cu;
        if (have_next) { nu = wk.unit(); wk.advance(); }
        if (have_next) stage_copy(nu, st ^ 1);
        else tc_cp_async_commit();
        const int orow = cu.b * TWELL_SL_TOK + out_tok;
        const bool store = cu.last && orow < M && !ovf_flag[orow];
        tc_cp_async_wait<1>();
        __syncwarp();
        if (cu.first) c[0] = c[1] = c[2] = c[3] = 0.0f;
        const uint32_t *sb = stages + (size_t)st * rsd;
        for (int k0 = 0; k0 < cu.hi - cu.lo; k0 += 16) {
            const uint4 q = *reinterpret_cast<const uint4 *>(sb + k0 + 4 * t);
            const uint32_t lo = (si & 1) ? q.y : q.x, hi = (si & 1) ? q.w : q.z;
            const uint32_t ra = __shfl_sync(0xffffffffu, (si & 2) ? hi : lo, a_src);
            uint32_t a[4];
            tc_ldsm_x4_trans(a, Wsm + (((ra & 0x3FFFu) ^ a_chunk) << 4));
            const uint32_t b0 = __byte_perm(q.x, q.y, 0x7632) & bmask;
            const uint32_t b1 = __byte_perm(q.z, q.w, 0x7632) & bmask;
            tc_mma_bf16(c, a, b0, b1);
        }
        if (cu.last) {
            // c0 = y[2t][gq], c1 = y[2t+1][gq], c2 = y[2t][gq+8], c3 = y[2t+1][gq+8]: pair with lane ^ 4 so each
            // lane stores two adjacent columns (4 bytes) of one token row.
            const float v1 = __shfl_xor_sync(0xffffffffu, even ? c[1] : c[0], 4);
            const float v2 = __shfl_xor_sync(0xffffffffu, even ? c[3] : c[2], 4);
            if (store) {
                const __nv_bfloat162 lo2 = even ? __floats2bfloat162_rn(c[0], v1) : __floats2bfloat162_rn(v1, c[1]);
                const __nv_bfloat162 hi2 = even ? __floats2bfloat162_rn(c[2], v2) : __floats2bfloat162_rn(v2, c[3]);
                bf16 *yp = Y + (size_t)orow * D + (size_t)sl * TWELL_SL_DCOLS + out_col;
                *reinterpret_cast<__nv_bfloat162 *>(yp) = lo2;
                *reinterpret_cast<__nv_bfloat162 *>(yp + 8) = hi2;
            }
        }
        __syncwarp();
        if (!have_next) break;
        cu = nu;
    }
    tc_cp_async_wait<0>();
}

// ---- sizes (host) ----------------------------------------------------------------------------------------
// Staged records per unit: the largest multiple of 16 in [16, cap_max] that fits next to `fixed` bytes.
static inline int twell_sl_stage_slots(size_t fixed, size_t per_slot_all_stages, int optin, int cap_max) {
    if (fixed >= (size_t)optin) return 0;
    size_t r = ((size_t)optin - fixed) / per_slot_all_stages;
    if (r > (size_t)cap_max) r = (size_t)cap_max;
    r &= ~(size_t)15;
    return r >= TWELL_SL_MIN_STAGE ? (int)r : 0;
}
// Up: NG groups (the fewest whose weight block + stages fit), UG units per group (multiple of 8), rsu staged
// slots. Returns NG, or 0 if no split fits.
static inline int twell_sl_up_config(int F, int optin, int *ug, int *rsu) {
    for (int NG = 1; NG <= TWELL_SL_MAXG; NG++) {
        const int UG = ((F + NG - 1) / NG + 7) & ~7;
        const size_t fixed = (size_t)UG * TWELL_SL_UCOLS * 2 +
                             (size_t)TWELL_SL_UP_WARPS * 2 * TWELL_SL_TOK * TWELL_SL_UCOLS * 2;
        const int r = twell_sl_stage_slots(fixed, (size_t)TWELL_SL_UP_WARPS * 2 * 4, optin, 256);
        if (r) { *ug = UG; *rsu = r; return NG; }
    }
    return 0;
}
static inline int twell_sl_down_config(int F, int optin) {
    return twell_sl_stage_slots((size_t)F * TWELL_SL_DCOLS * 2, (size_t)TWELL_SL_DOWN_WARPS * 2 * 4, optin, 512);
}
// Slots per block for slots_per_token (<= 0: the default): a multiple of 256 in [256, TWELL_SL_MAX_SB].
static inline int twell_sl_block_slots(int slots_per_token) {
    if (slots_per_token <= 0) return TWELL_SL_DEFAULT_SB;
    long long sb = ((long long)slots_per_token * TWELL_SL_TOK + 255) / 256 * 256;
    if (sb < 256) sb = 256;
    if (sb > TWELL_SL_MAX_SB) sb = TWELL_SL_MAX_SB;
    return (int)sb;
}

#ifndef TC_EMU
// ---- host API --------------------------------------------------------------------------------------------

typedef struct {
    int max_M, D, F, C, gated;
    int nblocks_max;
    int NG, UG;           // up unit groups, units per group (multiple of 8)
    int NSU, NSD;         // up slices (D / 64), down slices (D / 16)
    int rsu, rsd;         // staged slots per unit (up, down)
    int SB;               // slots per block of 8 tokens (both orders)
    size_t cap;           // nblocks_max * SB
    size_t smem_up, smem_down, smem_cmp;
    uint32_t *rec_up, *rec_down;  // [cap]
    int *dpos;            // [cap]
    float *part;          // [NSU, cap] (gated only)
    SlBlockInfo *info;    // [nblocks_max]
    // Stage timing (benchmarks): when `timing` is set, events are recorded before the compaction, the up, the
    // reduce and the down and after the down (ev[0..4]); twell_sliced_stage_ms reads them after a sync.
    int timing;
    cudaEvent_t ev[5];
} TwellSlicedWS;

// Stage times (ms) of the last timed call: [0] compaction, [1] up, [2] reduce, [3] down.
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
    int ug = 0, rsu = 0;
    const char *w = NULL;
    char buf[200];
    if (D <= 0 || D % TWELL_SL_UCOLS != 0) w = "D must be a multiple of 64";
    else if (F <= 0 || F % TWELL_TILE != 0) w = "F must be a multiple of 256";
    else if (F > 8192) w = "F must be <= 8192 (13-bit unit index in a slot record)";
    else if (twell_sl_down_config(F, optin) == 0) {
        snprintf(buf, sizeof buf, "F x 32 bytes = %d + record staging must fit the %d bytes of shared memory per block",
                 F * 32, optin);
        w = buf;
    } else if (gated && twell_sl_up_config(F, optin, &ug, &rsu) == 0) w = "no unit-group split of F fits shared memory";
    if (w && why) snprintf(why, why_len, "%s", w);
    return w == NULL;
}

static inline void twell_sliced_free(TwellSlicedWS *ws) {
    if (!ws->rec_up) return;
    for (int i = 0; i < 5; i++)
        if (ws->ev[i]) cudaCheck(cudaEventDestroy(ws->ev[i]));
    cudaCheck(cudaFree(ws->rec_up));
    cudaCheck(cudaFree(ws->rec_down));
    cudaCheck(cudaFree(ws->dpos));
    if (ws->part) cudaCheck(cudaFree(ws->part));
    cudaCheck(cudaFree(ws->info));
    memset(ws, 0, sizeof(*ws));
}

// Allocates for up to max_M tokens with slots_per_token slots per token (<= 0: the default, 96; rounded to
// whole blocks of 8 tokens, a multiple of 256 slots per block, at most 8192). Blocks that need more go to the
// dense fallback (counted). Returns TWELL_OK, or TWELL_ERR_SHAPE with a message (twell_sliced_supports).
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
    const int optin = twell_sl_smem_optin();
    ws->max_M = max_M; ws->D = D; ws->F = F; ws->C = C; ws->gated = gated ? 1 : 0;
    ws->nblocks_max = (max_M + TWELL_SL_TOK - 1) / TWELL_SL_TOK;
    if (gated) ws->NG = twell_sl_up_config(F, optin, &ws->UG, &ws->rsu);
    else { ws->NG = 1; ws->UG = (F + 7) & ~7; }
    ws->rsd = twell_sl_down_config(F, optin);
    ws->NSU = D / TWELL_SL_UCOLS;
    ws->NSD = D / TWELL_SL_DCOLS;
    ws->SB = twell_sl_block_slots(slots_per_token);
    ws->cap = (size_t)ws->nblocks_max * ws->SB;
    if (ws->cap > ((size_t)1 << 31) - 1) {
        fprintf(stderr, "error: twell_sliced_create: %d tokens x %d slots per block exceed 2^31 slots: use a smaller "
                        "max_M or capacity\n", max_M, ws->SB);
        return TWELL_ERR_SHAPE;
    }
    ws->smem_up = gated ? twell_sl_up_smem(ws->UG, ws->rsu) : 0;
    ws->smem_down = twell_sl_down_smem(F, ws->rsd);
    ws->smem_cmp = twell_sl_cmp_warp_bytes(ws->SB) * TWELL_SL_CMP_WARPS;
    cudaCheck(cudaMalloc(&ws->rec_up, sizeof(uint32_t) * ws->cap));
    cudaCheck(cudaMalloc(&ws->rec_down, sizeof(uint32_t) * ws->cap));
    cudaCheck(cudaMalloc(&ws->dpos, sizeof(int) * ws->cap));
    if (gated) cudaCheck(cudaMalloc(&ws->part, sizeof(float) * ws->cap * ws->NSU));
    cudaCheck(cudaMalloc(&ws->info, sizeof(SlBlockInfo) * ws->nblocks_max));
    for (int i = 0; i < 5; i++) cudaCheck(cudaEventCreate(&ws->ev[i]));
    if (gated)
        cudaCheck(cudaFuncSetAttribute(twell_sl_up_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)ws->smem_up));
    cudaCheck(cudaFuncSetAttribute(twell_sl_down_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)ws->smem_down));
    if (ws->smem_cmp > 48 * 1024)
        cudaCheck(cudaFuncSetAttribute(twell_sl_compact_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)ws->smem_cmp));
    return TWELL_OK;
}

// The sliced up/down for M rows (see the top of the file). tw / ovf_flag / ovf_list / n_ovf: the gate's output;
// rows of blocks that do not fit their slot area are appended to the overflow list (and counted in *sl_rows),
// so the caller must read *n_ovf after this call to size the dense fallback. All pointers are device pointers.
static inline int twell_sliced_updown(TwellSlicedWS *ws, const uint32_t *tw, int *ovf_flag, int *ovf_list, int *n_ovf,
                                      int *sl_rows, const bf16 *X, const bf16 *Wu, const bf16 *WdT, bf16 *Y, int M,
                                      cudaStream_t stream) {
    if (M < 1 || M > ws->max_M) {
        fprintf(stderr, "error: twell_sliced_updown: M=%d must be in [1, %d]\n", M, ws->max_M);
        return TWELL_ERR_WORKSPACE;
    }
    if (ws->gated && !Wu) {
        fprintf(stderr, "error: twell_sliced_updown: the workspace is gated but Wu is NULL\n");
        return TWELL_ERR_ARG;
    }
    const int nblocks = (M + TWELL_SL_TOK - 1) / TWELL_SL_TOK;
    TwellSlGroupWalk w;
    w.tw = tw; w.ovf_flag = ovf_flag; w.M = M; w.F = ws->F; w.words = TWELL_TILE / ws->C; w.slots = w.words - 1;
    w.row_words = ws->F / ws->C; w.UG = ws->UG;
    if (ws->timing) cudaCheck(cudaEventRecord(ws->ev[0], stream));
    twell_sl_compact_kernel<<<CEIL_DIV(nblocks, TWELL_SL_CMP_WARPS), TWELL_SL_CMP_WARPS * 32, ws->smem_cmp, stream>>>(
        w, ws->NG, ws->SB, ws->gated, ws->rec_up, ws->dpos, ws->rec_down, ws->info, ovf_list, n_ovf, sl_rows);
    cudaCheckLaunch();
    if (ws->timing) cudaCheck(cudaEventRecord(ws->ev[1], stream));
    if (ws->gated) {
        twell_sl_up_kernel<<<ws->NSU * ws->NG, TWELL_SL_UP_WARPS * 32, ws->smem_up, stream>>>(
            X, Wu, ws->rec_up, ws->info, ws->part, M, ws->D, ws->F, ws->NG, ws->UG, ws->SB, ws->rsu, ws->cap);
        cudaCheckLaunch();
        if (ws->timing) cudaCheck(cudaEventRecord(ws->ev[2], stream));
        twell_sl_reduce_kernel<<<cuda_sm_count() * 4, 256, 0, stream>>>(ws->rec_up, ws->dpos, ws->part, ws->rec_down, ws->info,
                                                             nblocks, ws->NG, ws->SB, ws->NSU, ws->cap);
        cudaCheckLaunch();
    } else if (ws->timing) {
        cudaCheck(cudaEventRecord(ws->ev[2], stream));
    }
    if (ws->timing) cudaCheck(cudaEventRecord(ws->ev[3], stream));
    twell_sl_down_kernel<<<ws->NSD, TWELL_SL_DOWN_WARPS * 32, ws->smem_down, stream>>>(
        ws->rec_down, ws->info, WdT, ovf_flag, Y, M, ws->D, ws->F, ws->SB, ws->rsd);
    cudaCheckLaunch();
    if (ws->timing) cudaCheck(cudaEventRecord(ws->ev[4], stream));
    return TWELL_OK;
}
#endif  // !TC_EMU

#endif  // SLLM_TWELL_SLICED_CUH
