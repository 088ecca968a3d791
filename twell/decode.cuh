// twell/decode.cuh: the sparse FFN for a few rows at a time (decoding: 1 <= M <= TWELL_DECODE_MAX_M), exact,
// with no host synchronisation: a caller can capture a whole decoding step in a CUDA graph.
//
//   gated:     Y = (relu(X Wg^T) * (X Wu^T)) WdT      non-gated: Y = relu(X Wu^T) WdT
//   X [M, D] bf16 row-major; Wg, Wu [F, D] bf16 (nn.Linear layout); WdT [F, D] bf16 = down_proj.weight
//   TRANSPOSED; Y [M, D] bf16, every element written. D % 64 == 0, F % 256 == 0 (as the TwELL FFN).
//   Scratch (twell/ffn.cuh owns it): g bf16 [M, F], cnt int [M, F/16], ent uint2 [M, F]. F <= TWELL_DEC_MAX_F.
//
// Why a path of its own: at a few rows the tile path (cuBLASLt gate GEMM + pack, the split up/down, the host
// sync that sizes the overflow fallback) is bound by launches and latency, not by bytes: on the H200 it takes
// 48 us per call at M = 1, where its gate GEMM alone takes 18 us and reading the three weight matrices once
// would take ~15 us. Here a call is two kernels:
//   1. twell_decode_gate_kernel<MT, true, WARPS>: g = relu(X W1^T) rounded to bf16 (W1 = Wg, or Wu when non-gated),
//      written densely to g [M, F], and the up for the active units of the CTA's own group. A GEMV on tensor cores: a
//      CTA of WARPS warps (8 at up to 32 rows, 4 at 64: twell_decode_gate_warps) owns a group of 16 units (2 blocks of
//      8); warp w takes a contiguous 1 / WARPS of D (split K) and streams its units' W1 row pieces front to back
//      (16-byte loads, 128 contiguous bytes per row and step, 2-4 steps in flight) into mma.m16n8k16 with the ROWS as
//      the m16 side (MT tiles of 16 rows; rows >= M are zeros) and the 8 units as n. The k order inside a step is
//      permuted the same way for X and W1 (a dot product does not care), so both operands come straight from 16-byte
//      loads. The warps' partial sums are added in warp order through shared memory (deterministic). Then the group's
//      active (row, unit) pairs, row by row in unit order, go round-robin to the warps: h = bf16(g * bf16(dot(x, Wu[n]))) (gated:
//      one warp per pair, fp32, fixed-order warp sum) or h = g (non-gated), written as the group's list: cnt[row,
//      group] and ent[row, 16 group + j] = (unit, fp32 bits of h), j < cnt. A list holds all 16 units of its group, so
//      nothing ever overflows: heavy rows (the first tokens of a sequence, 1000+ active units) run here too. Reads W1
//      once: bound by its bytes (23 MB at the paper's shape); the up's Wu rows (8 KB per pair) are read while other
//      CTAs still stream W1.
//   2. twell_decode_down_kernel: one CTA per (256-column slice of y, row): the row's group lists are flattened
//      into shared memory (counts -> block scan -> entries, all loads independent), its 8 warps take the entries
//      round-robin (entry e to warp e % 8, 8 weight rows in flight), accumulate h * WdT[unit, slice] in fp32,
//      then the 8 partial sums are added in warp order: y rounded once to bf16. Deterministic.
// Both kernels are programmatic dependent launches (twell_ffn_set_decode_pdl, default on): the down is scheduled as the
// gate's CTAs exit, and the kernel after the down (the next layer's q/k/v GEMV or the LM head) as soon as the down
// starts, so that it loads its first weights on the SMs the down leaves idle; each waits (griddepcontrol.wait) for the
// kernel before it to complete before it touches its data: the same bits.
// The active gates are counted on the device (one atomic per gate CTA with actives) for the dispatch; twell/ffn.cuh
// reads the count back at a later call, without a sync. (The up fused into the gate saves, against a kernel of its own,
// a launch and its dependent L2/HBM round trips, ~6 us at M 1.)
#ifndef SLLM_TWELL_DECODE_CUH
#define SLLM_TWELL_DECODE_CUH

#include "cuda_common.cuh"
#include "gemv.cuh"
#include "tc_utils.cuh"
#include "twell/format.h"
#include "twell/dispatch.h"  // twell_decode_gate_tiles
#include "twell/updown.cuh"  // twell_bf16x8_to_f32

#define TWELL_DECODE_MAX_M 64     // rows per call the decode path takes (4 tiles of 16 rows in the gate)
#define TWELL_DEC_GATE_WARPS 4    // split-K warps per gate CTA at more than 32 rows (8 below: twell_decode_gate_warps)
#define TWELL_DEC_GATE_NB 2       // 8-unit blocks per gate CTA (16 units)
#define TWELL_DEC_GATE_UNROLL 4   // 64-column steps in flight per warp (half at more than 32 rows; 8 is no faster,
                                  // 2 CTAs per SM instead of 4)
#define TWELL_DEC_GROUP (8 * TWELL_DEC_GATE_NB)  // units per gate CTA = per list group (16)
#define TWELL_DEC_THREADS 256     // down CTAs
#define TWELL_DEC_MAX_F 65536     // widest F: the down kernel keeps the F / 16 group offsets in shared memory
#define TWELL_DEC_DOWN_CAP 2048   // entries of a row staged in shared memory at a time by the down kernel

// ---- 1. gate and up: g = relu(X W1^T) (bf16, dense [M, F]) and the group lists of (unit, h) ----
// Lane (g8 = lane / 4, q = lane % 4). Warp w owns the contiguous 64-column steps [w S / WARPS, (w + 1) S / WARPS) of
// D (S = D / 64), so each warp streams its part of its 16 rows front to back. In step s (columns k0 = 64 s ..) the
// lane loads the two 16-byte chunks at columns k0 + 16q + 8i .. + 7 (i = 0, 1: 32 contiguous bytes; the 4 lanes of a
// unit cover 128 contiguous bytes of its row) of W1 row (unit n0 + 8b + g8) and of X rows 16 mt + g8 and + 8. Per
// chunk, mma #1 takes its first two 32-bit words (columns + 0..3), mma #2 the last two (+ 4..7): fragment slot 2q + e
// (e = 0, 1) holds column + e (resp. + 4 + e) and slot 2q + 8 + e column + 2 + e (resp. + 6 + e), in A (a0 / a2 row
// g8, a1 / a3 row g8 + 8) and in B (b0, b1, unit g8) alike (core/tc_utils.cuh gives the fragment layouts).
// Accumulator c[mt][b]: c0, c1 = (row 16 mt + g8, units n0 + 8b + 2q, +1), c2, c3 = (row + 8, the same units).
// LISTS (the FFN; false only to time the gate alone): the CTA then lists its group's active (row, unit) pairs, row by
// row in unit order, and its warps take them round-robin: h = bf16(g * bf16(dot(x[row], Wu[unit]))) (gated; one warp per pair,
// up to 4 KB of each of the two rows in flight, fp32, fixed-order warp sum) or h = g (non-gated, Wu == NULL); it writes
// cnt[row, group] and ent[row, 16 group + j] = (unit, fp32 bits of h), j < cnt, and adds its count to *nnz.
template <int MT, bool LISTS, int WARPS>
static __global__ void __launch_bounds__(32 * WARPS, WARPS == 8 ? 3 : 0)
twell_decode_gate_kernel(const bf16 *__restrict__ X, const bf16 *__restrict__ W1, const bf16 *__restrict__ Wu,
                         bf16 *__restrict__ G, int *__restrict__ cnt, uint2 *__restrict__ ent,
                         unsigned long long *__restrict__ nnz, int M, int D, int F) {
    constexpr int NB = TWELL_DEC_GATE_NB, UNITS = TWELL_DEC_GROUP, ROWS = 16 * MT;
    // Steps in flight per warp (registers: half at 64 rows; 8 warps: 3 CTAs of 256 threads per SM) and 16-byte chunks
    // in flight per lane in the up.
    constexpr int U = WARPS == 8 || MT >= 4 ? TWELL_DEC_GATE_UNROLL / 2 : TWELL_DEC_GATE_UNROLL;
    constexpr int UPC = WARPS == 8 ? 4 : 8;
    static_assert(UNITS == 16 && ROWS <= 32 * WARPS, "pair codes are (row << 4 | unit); one thread per row");
    __shared__ float red[WARPS - 1][MT * NB * 4][32];
    __shared__ float s_g[ROWS][UNITS];  // the group's gates, as rounded to bf16
    __shared__ int s_off[ROWS + 1];     // offsets of the rows' pairs
    __shared__ unsigned short s_pair[ROWS * UNITS];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2, q = lane & 3;
    const int n0 = blockIdx.x * UNITS;
    const int S = D / 64, s_begin = warp * S / WARPS, s_end = (warp + 1) * S / WARPS;
    pdl_wait();  // as a programmatic dependent launch: the kernel before it (the previous layer's down) is complete
    const uint4 *wrow[NB];
#pragma unroll
    for (int b = 0; b < NB; b++)
        wrow[b] = reinterpret_cast<const uint4 *>(W1 + (size_t)(n0 + 8 * b + g8) * D) + 2 * q;
    const uint4 *xrow[MT][2];
    bool xok[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int r = 16 * mt + 8 * h + g8;
            xok[mt][h] = r < M;
            xrow[mt][h] = reinterpret_cast<const uint4 *>(X + (size_t)(r < M ? r : 0) * D) + 2 * q;
        }
    float c[MT][NB][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int b = 0; b < NB; b++)
#pragma unroll
            for (int i = 0; i < 4; i++) c[mt][b][i] = 0.0f;
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (int s0 = s_begin; s0 < s_end; s0 += U) {
        uint4 w[U][NB][2];
#pragma unroll
        for (int u = 0; u < U; u++)
#pragma unroll
            for (int b = 0; b < NB; b++)
#pragma unroll
                for (int i = 0; i < 2; i++) w[u][b][i] = s0 + u < s_end ? __ldg(wrow[b] + 8 * (s0 + u) + i) : zero;
#pragma unroll
        for (int u = 0; u < U; u++) {
            const int s = s0 + u;
            if (s >= s_end) break;  // warp-uniform
#pragma unroll
            for (int mt = 0; mt < MT; mt++)
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const uint4 xa = xok[mt][0] ? __ldg(xrow[mt][0] + 8 * s + i) : zero;
                    const uint4 xb = xok[mt][1] ? __ldg(xrow[mt][1] + 8 * s + i) : zero;
                    const uint32_t a1[4] = {xa.x, xb.x, xa.y, xb.y}, a2[4] = {xa.z, xb.z, xa.w, xb.w};
#pragma unroll
                    for (int b = 0; b < NB; b++) {
                        tc_mma_bf16(c[mt][b], a1, w[u][b][i].x, w[u][b][i].y);
                        tc_mma_bf16(c[mt][b], a2, w[u][b][i].z, w[u][b][i].w);
                    }
                }
        }
    }
    // No pdl_launch_dependents() here: the down is scheduled as the gate's CTAs exit. Scheduled after the weight loop
    // instead, its CTAs land on the SMs the gate leaves free at that moment, several to an SM, and a heavy down pays:
    // 81 against 68 us per layer at M 1 / 50%, 20.4 against 18.9 at M 4 / nnz 256.
    // Split-K sum in warp order: warps 1.. park their partial sums, warp 0 adds them and stores.
    if (warp > 0) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int b = 0; b < NB; b++)
#pragma unroll
                for (int i = 0; i < 4; i++) red[warp - 1][(mt * NB + b) * 4 + i][lane] = c[mt][b][i];
    }
    __syncthreads();
    if (warp == 0) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++)
#pragma unroll
            for (int b = 0; b < NB; b++) {
                float v[4];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    v[i] = c[mt][b][i];
#pragma unroll
                    for (int w2 = 0; w2 < WARPS - 1; w2++) v[i] += red[w2][(mt * NB + b) * 4 + i][lane];
                    v[i] = v[i] > 0.0f ? v[i] : 0.0f;  // relu (+0 for -0)
                }
                const int u = 8 * b + 2 * q;
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = 16 * mt + 8 * h + g8;
                    const __nv_bfloat162 gv = __floats2bfloat162_rn(v[2 * h], v[2 * h + 1]);
                    if (r < M) *reinterpret_cast<__nv_bfloat162 *>(G + (size_t)r * F + n0 + u) = gv;
                    s_g[r][u] = __low2float(gv);
                    s_g[r][u + 1] = __high2float(gv);
                }
            }
    }
    if (!LISTS) return;
    __syncthreads();
    // The group's pairs, row by row in unit order (deterministic): counts, offsets, codes.
    const int t = threadIdx.x, groups = F / UNITS;
    unsigned mask = 0;
    if (t < M) {
#pragma unroll
        for (int u = 0; u < UNITS; u++) mask |= (s_g[t][u] > 0.0f ? 1u : 0u) << u;
        cnt[(size_t)t * groups + blockIdx.x] = __popc(mask);
    }
    if (t < ROWS) s_off[t + 1] = __popc(mask);
    __syncthreads();
    if (t == 0) {
        s_off[0] = 0;
        for (int r = 1; r <= ROWS; r++) s_off[r] += s_off[r - 1];
    }
    __syncthreads();
    if (t < M)
        for (int j = s_off[t]; mask; mask &= mask - 1) s_pair[j++] = (unsigned short)(t << 4 | (__ffs(mask) - 1));
    __syncthreads();
    const int total = s_off[M];
    if (t == 0 && nnz && total) atomicAdd(nnz, (unsigned long long)total);
    if (!Wu) {  // non-gated: h = g
        for (int j = t; j < total; j += 32 * WARPS) {
            const int r = s_pair[j] >> 4, u = s_pair[j] & 15;
            ent[(size_t)r * F + n0 + (j - s_off[r])] = make_uint2((uint32_t)(n0 + u), __float_as_uint(s_g[r][u]));
        }
        return;
    }
    const int chunks = D / 8;  // 16-byte chunks of a row; a multiple of 8 (D % 64 == 0)
    for (int j = warp; j < total; j += WARPS) {
        const int r = s_pair[j] >> 4, u = s_pair[j] & 15;
        const uint4 *xr = reinterpret_cast<const uint4 *>(X + (size_t)r * D);
        const uint4 *wr = reinterpret_cast<const uint4 *>(Wu + (size_t)(n0 + u) * D);
        float acc = 0.0f;
        for (int k0 = lane; k0 < chunks; k0 += UPC * 32) {  // chunks in increasing order: the same sum for any UPC
            uint4 a[UPC], w[UPC];
#pragma unroll
            for (int i = 0; i < UPC; i++) {
                const int k = k0 + 32 * i;
                a[i] = k < chunks ? __ldg(xr + k) : zero;
                w[i] = k < chunks ? __ldg(wr + k) : zero;
            }
#pragma unroll
            for (int i = 0; i < UPC; i++) {
                float af[8], wf[8];
                twell_bf16x8_to_f32(a[i], af);
                twell_bf16x8_to_f32(w[i], wf);
#pragma unroll
                for (int e = 0; e < 8; e++) acc = fmaf(af[e], wf[e], acc);
            }
        }
        acc = warp_sum(acc);  // butterfly: the same fixed order in every run
        if (lane == 0)
            ent[(size_t)r * F + n0 + (j - s_off[r])] = make_uint2(  // u and h rounded to bf16 as on the dense path
                (uint32_t)(n0 + u),
                __float_as_uint(__bfloat162float(__float2bfloat16_rn(s_g[r][u] * __bfloat162float(__float2bfloat16_rn(acc))))));
    }
}

// ---- 3. down: y = sum over entries of h * WdT[unit] ----
// grid (ceil(D / 256), M), TWELL_DEC_THREADS threads; lane owns columns 256 slice + 8 lane .. + 7.
static __global__ void __launch_bounds__(TWELL_DEC_THREADS)
twell_decode_down_kernel(const bf16 *__restrict__ WdT, const int *__restrict__ cnt, const uint2 *__restrict__ ent,
                         bf16 *__restrict__ Y, int D, int F KT_PARAM) {
    KT_SCOPE(kt_slot);
    constexpr int WARPS = TWELL_DEC_THREADS / 32, CAP = TWELL_DEC_DOWN_CAP, R = 8;
    __shared__ uint2 s_ent[CAP];
    __shared__ int s_pre[TWELL_DEC_MAX_F / TWELL_DEC_GROUP + 1];
    __shared__ int s_wsum[WARPS + 1];
    __shared__ __align__(16) float red[WARPS][TWELL_TILE];
    const int slice = blockIdx.x, m = blockIdx.y, groups = F / TWELL_DEC_GROUP;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int c8 = slice * 32 + lane;  // this lane's 16-byte chunk of the row
    // The next kernel (the next layer's q/k/v GEMV, or the LM head) may be scheduled now: this grid is a few CTAs, all
    // resident, so the next one's CTAs fill the idle SMs and load their first weights while this one gathers (they
    // wait for it to complete before they read y).
    pdl_launch_dependents();
    pdl_wait();  // as a programmatic dependent launch: the gate's lists are complete and visible
    KT_WAITED();
    const bool lane_ok = c8 * 8 < D;
    const int *rc = cnt + (size_t)m * groups;
    const uint2 *re = ent + (size_t)m * F;
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] = 0.0f;
    // Offsets of the groups' entries (groups <= TWELL_DEC_MAX_F / 16: twell_decode_forward bounds F): the counts into
    // shared memory, a contiguous run of them per thread, a block-wide exclusive scan of the runs, then the offsets.
    for (int i = threadIdx.x; i < groups; i += TWELL_DEC_THREADS) s_pre[i + 1] = rc[i];
    __syncthreads();
    const int per = (groups + TWELL_DEC_THREADS - 1) / TWELL_DEC_THREADS, i0 = threadIdx.x * per;
    int run = 0;
    for (int i = i0; i < i0 + per && i < groups; i++) run += s_pre[i + 1];
    int total;
    int off = block_scan_excl<TWELL_DEC_THREADS>(run, s_wsum, &total);
    for (int i = i0; i < i0 + per && i < groups; i++) {
        off += s_pre[i + 1];
        s_pre[i + 1] = off;
    }
    if (threadIdx.x == 0) s_pre[0] = 0;
    __syncthreads();
    for (int base = 0; base < total; base += CAP) {
        const int n_here = total - base < CAP ? total - base : CAP;
        if (base > 0) __syncthreads();  // the warps are done with the previous window
        for (int e = threadIdx.x; e < n_here; e += TWELL_DEC_THREADS) {
            const int fe = base + e;
            int lo = 0, hi = groups - 1;  // the group holding flat entry fe: s_pre[lo] <= fe < s_pre[lo + 1]
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (s_pre[mid] <= fe) lo = mid; else hi = mid - 1;
            }
            s_ent[e] = re[(size_t)lo * TWELL_DEC_GROUP + (fe - s_pre[lo])];
        }
        __syncthreads();
        for (int e0 = warp; e0 < n_here; e0 += R * WARPS) {
            uint4 w[R];
            float h[R];
#pragma unroll
            for (int r = 0; r < R; r++) {  // R weight rows in flight
                const int e = e0 + r * WARPS;
                const bool ok = e < n_here && lane_ok;
                const uint2 en = e < n_here ? s_ent[e] : make_uint2(0u, 0u);
                h[r] = __uint_as_float(en.y);
                w[r] = ok ? __ldg(reinterpret_cast<const uint4 *>(WdT + (size_t)en.x * D) + c8)
                          : make_uint4(0u, 0u, 0u, 0u);
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                if (e0 + r * WARPS >= n_here) break;
                float wf[8];
                twell_bf16x8_to_f32(w[r], wf);
#pragma unroll
                for (int i = 0; i < 8; i++) acc[i] = fmaf(h[r], wf[i], acc[i]);
            }
        }
    }
    float4 *rw = reinterpret_cast<float4 *>(&red[warp][8 * lane]);
    rw[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
    rw[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
    __syncthreads();
    const int col = slice * TWELL_TILE + threadIdx.x;
    if (col < D) {
        float s = 0.0f;
#pragma unroll
        for (int w = 0; w < WARPS; w++) s += red[w][threadIdx.x];  // warp order: deterministic
        Y[(size_t)m * D + col] = __float2bfloat16_rn(s);
    }
}

// 16-row tiles the gate takes for M rows (1, 2 or 4: its MT); at 4 every CTA re-reads 64 x rows, and the gate costs ~2x.

// The launches (no checks: twell_decode_forward checks). W1 = Wg (gated) or Wu; Wu_up = Wu (gated) or NULL.
// lists = 0 runs the gate alone (g only: for timing it, bench_decode). pdl = 1 launches both kernels as programmatic
// dependents of the kernel before them on the stream (cudaLaunchAttributeProgrammaticStreamSerialization; captured
// into CUDA graphs as programmatic edges): the down is scheduled as the gate's CTAs exit, the kernel after the down as
// the down starts; each waits (griddepcontrol.wait) before it reads what the kernel before it writes
// or writes what it reads, so the results are the same bits either way (test_decode_pdl). It saves 0.15-0.65 us per
// layer as a graph, 1.7-3.2 eagerly (H200).
static inline cudaLaunchConfig_t twell_decode_launch_config(dim3 grid, int block, int pdl, cudaLaunchAttribute *attr,
                                                            cudaStream_t stream) {
    return pdl_launch_config(grid, dim3(block), 0, pdl, attr, stream);
}
// Split-K warps per gate CTA for M rows: 8 at up to 32 rows (twice the warps per SM: the gate waits on memory with
// ~10.7 warps per SM; with 8, the gate and its up take 0.4 us less at M 1, 1.6-2.4 less at M 16-32),
// TWELL_DEC_GATE_WARPS = 4 at 64 rows (8 would spill at the 80 registers that 3 CTAs of 256 threads per SM allow).
static inline int twell_decode_gate_warps(int M) { return M <= 32 ? 8 : TWELL_DEC_GATE_WARPS; }
// warps: 4 or 8 split-K warps per gate CTA (0: twell_decode_gate_warps(M); always 4 at more than 32 rows).
static inline void twell_decode_gate_up(const bf16 *X, const bf16 *W1, const bf16 *Wu_up, bf16 *g, int *cnt,
                                        uint2 *ent, int M, int D, int F, unsigned long long *nnz, int lists, int pdl,
                                        cudaStream_t stream, int warps = 0) {
    typedef void (*GateKernel)(const bf16 *, const bf16 *, const bf16 *, bf16 *, int *, uint2 *, unsigned long long *,
                               int, int, int);
    const int mt = twell_decode_gate_tiles(M);
    if (warps == 0) warps = twell_decode_gate_warps(M);
    if (mt == 4) warps = 4;  // 8 warps at 64 rows would spill (80 registers for 3 CTAs of 256 threads per SM)
#define TWELL_DEC_GATE_PICK(W)                                                                                      \
    (lists ? (mt == 1 ? twell_decode_gate_kernel<1, true, W> : twell_decode_gate_kernel<2, true, W>)               \
           : (mt == 1 ? twell_decode_gate_kernel<1, false, W> : twell_decode_gate_kernel<2, false, W>))
    const GateKernel kern =
        mt == 4 ? (lists ? twell_decode_gate_kernel<4, true, 4> : twell_decode_gate_kernel<4, false, 4>)
                : warps == 8 ? TWELL_DEC_GATE_PICK(8) : TWELL_DEC_GATE_PICK(4);
#undef TWELL_DEC_GATE_PICK
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg =
        twell_decode_launch_config(dim3(F / TWELL_DEC_GROUP), 32 * warps, pdl, &attr, stream);
    cudaCheck(cudaLaunchKernelEx(&cfg, kern, X, W1, Wu_up, g, cnt, ent, nnz, M, D, F));
}
static inline void twell_decode_down(const bf16 *WdT, const int *cnt, const uint2 *ent, bf16 *Y, int M, int D, int F,
                                     int pdl, cudaStream_t stream) {
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg =
        twell_decode_launch_config(dim3(CEIL_DIV(D, TWELL_TILE), M), TWELL_DEC_THREADS, pdl, &attr, stream);
    cudaCheck(cudaLaunchKernelEx(&cfg, twell_decode_down_kernel, WdT, cnt, ent, Y, D, F KT_ARG(kt_take("twell_decode_down"))));
}

// ---- 1b. gate and up at M <= GEMV_MAX_M rows on the decoding GEMV (core/gemv.cuh) ----
// The same outputs as twell_decode_gate_kernel with lists, bit for bit when the pre-activations are exact: each warp
// streams two W1 rows (units 2w, 2w + 1 of the CTA's 16-unit group) with the weights loaded before the wait, then
// g = bf16(relu(sum)) to g [M, F]; for a unit active in some row the warp reads its Wu row and h = bf16(g * bf16(x .
// Wu)) (each lane sums its chunks in increasing order, then the butterfly: twell_decode_gate_kernel's order); the
// CTA then writes its group's lists row by row in unit order and adds its count to *nnz. At one to four rows this
// streams W1 at the GEMV's rate (the mma gate splits D over 8 warps per 16 units and reads at ~1.6 TB/s on an H100).
struct TwellDecodeGemvGateOp {
    static constexpr int R = 2;
    static constexpr bool COUNTS = true;
    static constexpr int SMEM_FLOATS = 2 * GEMV_MAX_M * TWELL_DEC_GROUP;  // g, then h, of the group's units per row
    const bf16 *w1, *wu;  // wu NULL: non-gated (h = g)
    bf16 *g;
    int *cnt;
    uint2 *ent;
    unsigned long long *nnz;
    int F, K, M;
    __device__ const bf16 *row(int u, int r) const { return w1 + (size_t)(2 * u + r) * K; }
    template <int MM>
    __device__ int store(int u, int lane, const float (&acc)[MM][R], const uint4 *xs, int KC, float *sm) const {
        float gv[MM][R];
        int on = 0;
#pragma unroll
        for (int m = 0; m < MM; m++)
#pragma unroll
            for (int r = 0; r < R; r++) {
                gv[m][r] = round_bf16(acc[m][r] > 0.0f ? acc[m][r] : 0.0f);
                on += gv[m][r] > 0.0f;
                if (lane == 0) g[(size_t)m * F + 2 * u + r] = __float2bfloat16_rn(gv[m][r]);
            }
        const int j0 = (2 * u) % TWELL_DEC_GROUP;
#pragma unroll
        for (int r = 0; r < R; r++) {
            bool any = false;
#pragma unroll
            for (int m = 0; m < MM; m++) any |= gv[m][r] > 0.0f;
            float hv[MM];
#pragma unroll
            for (int m = 0; m < MM; m++) hv[m] = gv[m][r];
            if (wu && any) {  // warp-uniform
                const uint4 *wrow = reinterpret_cast<const uint4 *>(wu + (size_t)(2 * u + r) * K);
                float d[MM];
#pragma unroll
                for (int m = 0; m < MM; m++) d[m] = 0.0f;
                for (int c0 = lane; c0 < KC; c0 += 32 * GEMV_U) {
                    uint4 w[GEMV_U];
#pragma unroll
                    for (int i = 0; i < GEMV_U; i++) {
                        const int c = c0 + 32 * i;
                        w[i] = c < KC ? __ldg(wrow + c) : make_uint4(0u, 0u, 0u, 0u);
                    }
#pragma unroll
                    for (int i = 0; i < GEMV_U; i++) {
                        const int c = c0 + 32 * i;
                        if (c < KC)
#pragma unroll
                            for (int m = 0; m < MM; m++) d[m] = dot8_bf16(xs[m * KC + c], w[i], d[m]);
                    }
                }
#pragma unroll
                for (int m = 0; m < MM; m++) {
                    d[m] = warp_sum(d[m]);
                    hv[m] = round_bf16(gv[m][r] * round_bf16(d[m]));
                }
            }
            if (lane == 0)
#pragma unroll
                for (int m = 0; m < MM; m++) {
                    sm[m * TWELL_DEC_GROUP + j0 + r] = gv[m][r];
                    sm[(GEMV_MAX_M + m) * TWELL_DEC_GROUP + j0 + r] = hv[m];
                }
        }
        return on;
    }
    __device__ void finish(int total, float *sm, int vb) const {
        const int group = vb, groups = F / TWELL_DEC_GROUP, m = threadIdx.x;
        if (m < M) {
            int k = 0;
            for (int j = 0; j < TWELL_DEC_GROUP; j++)
                if (sm[m * TWELL_DEC_GROUP + j] > 0.0f)
                    ent[(size_t)m * F + group * TWELL_DEC_GROUP + k++] = make_uint2(
                        (uint32_t)(group * TWELL_DEC_GROUP + j), __float_as_uint(sm[(GEMV_MAX_M + m) * TWELL_DEC_GROUP + j]));
            cnt[(size_t)m * groups + group] = k;
        }
        if (threadIdx.x == 0 && nnz && total) atomicAdd(nnz, (unsigned long long)total);
    }
};
static_assert(2 * GEMV_WARPS == TWELL_DEC_GROUP, "a GEMV CTA is one list group");

// Launches the decode path on `stream`. Wg may be NULL when !gated (then Wu is the gate-and-up weight). nnz (may be
// NULL): device counter the active gates are ADDED to. in (may be NULL; M <= GEMV_MAX_M, gate_warps 0): the input
// rows through core/gemv.cuh's fused residual add + norm instead of X. pdl: programmatic dependent launches (see above). Returns
// TWELL_OK, or TWELL_ERR_SHAPE / TWELL_ERR_ARG with a message naming the constraint (nothing launched).
static inline int twell_decode_forward(const bf16 *X, const bf16 *Wg, const bf16 *Wu, const bf16 *WdT, bf16 *Y, int M,
                                       int D, int F, int gated, bf16 *g, int *cnt, uint2 *ent,
                                       unsigned long long *nnz, int pdl, cudaStream_t stream, int gate_warps = 0,
                                       const GemvIn *in = NULL) {
    if (M < 1 || M > TWELL_DECODE_MAX_M) {
        fprintf(stderr, "error: twell_decode_forward: M=%d must be in [1, %d]\n", M, TWELL_DECODE_MAX_M);
        return TWELL_ERR_SHAPE;
    }
    if (D <= 0 || D % 64 != 0 || F <= 0 || F % TWELL_TILE != 0 || F > TWELL_DEC_MAX_F) {
        fprintf(stderr, "error: twell_decode_forward: D=%d must be a positive multiple of 64 and F=%d a positive "
                        "multiple of %d (at most %d)\n", D, F, TWELL_TILE, TWELL_DEC_MAX_F);
        return TWELL_ERR_SHAPE;
    }
    if (gate_warps != 0 && gate_warps != 4 && gate_warps != 8) {
        fprintf(stderr, "error: twell_decode_forward: gate_warps=%d must be 0 (the default), 4 or 8\n", gate_warps);
        return TWELL_ERR_ARG;
    }
    const bf16 *W1 = gated ? Wg : Wu;
    if (!X || !W1 || !Wu || !WdT || !Y || !g || !cnt || !ent) {
        fprintf(stderr, "error: twell_decode_forward: NULL pointer\n");
        return TWELL_ERR_ARG;
    }
    if (((uintptr_t)X | (uintptr_t)W1 | (uintptr_t)Wu | (uintptr_t)WdT | (uintptr_t)Y | (uintptr_t)g |
         (uintptr_t)ent) & 15) {
        fprintf(stderr, "error: twell_decode_forward: pointers must be 16-byte aligned\n");
        return TWELL_ERR_ARG;
    }
    const bool gemv_gate = M <= GEMV_MAX_M && gate_warps == 0 && gemv_fits(M, D, in ? in->a : X);
    if (in && !gemv_gate) {
        fprintf(stderr, "error: twell_decode_forward: a fused input needs the GEMV gate (M=%d <= %d rows, gate_warps 0)\n",
                M, GEMV_MAX_M);
        return TWELL_ERR_ARG;
    }
    if (gemv_gate) {  // one to four rows: the GEMV gate
        const TwellDecodeGemvGateOp op = {W1, gated ? Wu : NULL, g, cnt, ent, nnz, F, D, M};
        gemv_launch(op, in ? *in : gemv_in(X), M, D, F / 2, stream);
    } else twell_decode_gate_up(X, W1, gated ? Wu : NULL, g, cnt, ent, M, D, F, nnz, 1, pdl, stream, gate_warps);
    twell_decode_down(WdT, cnt, ent, Y, M, D, F, pdl, stream);
    return TWELL_OK;
}

#endif  // SLLM_TWELL_DECODE_CUH
