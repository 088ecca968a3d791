// twell/decode.cuh: the sparse FFN for a few rows at a time (decoding: 1 <= M <= TWELL_DECODE_MAX_M), exact,
// with no host synchronisation: a caller can capture a whole decoding step in a CUDA graph.
//
//   gated:     Y = (relu(X Wg^T) * (X Wu^T)) WdT      non-gated: Y = relu(X Wu^T) WdT
//   X [M, D] bf16 row-major; Wg, Wu [F, D] bf16 (nn.Linear layout); WdT [F, D] bf16 = down_proj.weight
//   TRANSPOSED; Y [M, D] bf16, every element written. D % 64 == 0, F % 256 == 0 (as the TwELL FFN).
//   Scratch (twell/ffn.cuh owns it): g bf16 [M, F], cnt int [M, F/256], ent uint2 [M, F].
//
// Why a path of its own: at a few rows the tile path (cuBLASLt gate GEMM + pack, the split up/down, the host
// sync that sizes the overflow fallback) is bound by launches and latency, not by bytes: on the H200 it takes
// 48 us per call at M = 1, where its gate GEMM alone takes 18 us and reading the three weight matrices once
// would take ~15 us (dev/RESULTS.md, run 62). Here a call is three kernels:
//   1. twell_decode_gate_kernel<MT>: g = relu(X W1^T) rounded to bf16 (W1 = Wg, or Wu when non-gated), written
//      densely to g [M, F]. A GEMV on tensor cores: a CTA of TWELL_DEC_GATE_WARPS warps owns 16 units (2 blocks
//      of 8); warp w takes a contiguous quarter of D (split K) and streams its units' W1 row pieces front to back
//      (16-byte loads, 128 contiguous bytes per row and step, 4 steps in flight) into mma.m16n8k16 with the ROWS as
//      the m16 side (MT tiles of 16 rows; rows >= M are zeros) and the 8 units as n. The k order inside a step is permuted the
//      same way for X and W1 (a dot product does not care), so both operands come straight from 16-byte loads.
//      The warps' partial sums are added in warp order through shared memory (deterministic). Reads W1 once:
//      bound by its bytes (23 MB at the paper's shape).
//   2. twell_decode_up_kernel: one CTA per (256-unit tile, row): the tile's positive gates in column order
//      (ballot + warp offsets: deterministic), then per active unit h = g * dot(x, Wu[n]) (gated: one warp
//      per 2 units, fp32, fixed-order warp sum) or h = g (non-gated). Writes the tile's list: cnt[row, tile] and
//      ent[row, 256 tile + j] = (unit, fp32 bits of h), j < cnt. A tile list holds all 256 units of its tile,
//      so nothing ever overflows: heavy rows (the first tokens of a sequence, 1000+ active units) run here too.
//   3. twell_decode_down_kernel: one CTA per (256-column slice of y, row): the row's tile lists are flattened
//      into shared memory (counts -> offsets -> entries, all loads independent), its 8 warps take the entries
//      round-robin (entry e to warp e % 8, 8 weight rows in flight), accumulate h * WdT[unit, slice] in fp32,
//      then the 8 partial sums are added in warp order: y rounded once to bf16. Deterministic.
// The active gates are counted on the device (one atomic per up CTA) for the dispatch; twell/ffn.cuh reads the
// count back at the next call, without a sync.
#ifndef SLLM_TWELL_DECODE_CUH
#define SLLM_TWELL_DECODE_CUH

#include "cuda_common.cuh"
#include "tc_utils.cuh"
#include "twell/format.h"
#include "twell/updown.cuh"  // twell_bf16x8_to_f32

#define TWELL_DECODE_MAX_M 64     // rows per call the decode path takes (4 tiles of 16 rows in the gate)
#define TWELL_DEC_GATE_WARPS 4    // split-K warps per gate CTA
#define TWELL_DEC_GATE_NB 2       // 8-unit blocks per gate CTA (16 units)
#define TWELL_DEC_GATE_UNROLL 4   // 64-column steps in flight per warp (half at more than 32 rows)
#define TWELL_DEC_THREADS 256     // up and down CTAs
#define TWELL_DEC_DOWN_CAP 2048   // entries of a row staged in shared memory at a time by the down kernel

// ---- 1. gate: g = relu(X W1^T) (bf16, dense [M, F]) ----
// Lane (g8 = lane / 4, q = lane % 4). Warp w owns the contiguous 64-column steps [w S / WARPS, (w + 1) S / WARPS) of
// D (S = D / 64), so each warp streams its part of its 16 rows front to back. In step s (columns k0 = 64 s ..) the
// lane loads the two 16-byte chunks at columns k0 + 16q + 8i .. + 7 (i = 0, 1: 32 contiguous bytes; the 4 lanes of a
// unit cover 128 contiguous bytes of its row) of W1 row (unit n0 + 8b + g8) and of X rows 16 mt + g8 and + 8. Per
// chunk, mma #1 takes its first two 32-bit words (columns + 0..3), mma #2 the last two (+ 4..7): fragment slot 2q + e
// (e = 0, 1) holds column + e (resp. + 4 + e) and slot 2q + 8 + e column + 2 + e (resp. + 6 + e), in A (a0 / a2 row
// g8, a1 / a3 row g8 + 8) and in B (b0, b1, unit g8) alike (core/tc_utils.cuh gives the fragment layouts).
// Accumulator c[mt][b]: c0, c1 = (row 16 mt + g8, units n0 + 8b + 2q, +1), c2, c3 = (row + 8, the same units).
template <int MT>
__global__ void __launch_bounds__(32 * TWELL_DEC_GATE_WARPS)
twell_decode_gate_kernel(const bf16 *__restrict__ X, const bf16 *__restrict__ W1, bf16 *__restrict__ G, int M, int D,
                         int F) {
    constexpr int NB = TWELL_DEC_GATE_NB, WARPS = TWELL_DEC_GATE_WARPS;
    constexpr int U = MT >= 4 ? TWELL_DEC_GATE_UNROLL / 2 : TWELL_DEC_GATE_UNROLL;  // registers at 64 rows
    __shared__ float red[WARPS - 1][MT * NB * 4][32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g8 = lane >> 2, q = lane & 3;
    const int n0 = blockIdx.x * (8 * NB);
    const int S = D / 64, s_begin = warp * S / WARPS, s_end = (warp + 1) * S / WARPS;
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
    if (warp != 0) return;
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
            const int n = n0 + 8 * b + 2 * q;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int r = 16 * mt + 8 * h + g8;
                if (r < M)
                    *reinterpret_cast<__nv_bfloat162 *>(G + (size_t)r * F + n) =
                        __floats2bfloat162_rn(v[2 * h], v[2 * h + 1]);
            }
        }
}

// ---- 2. up: tile lists of (unit, h) ----
// grid (F / 256, M), TWELL_DEC_THREADS threads. Wu == NULL: non-gated (h = g).
__global__ void __launch_bounds__(TWELL_DEC_THREADS)
twell_decode_up_kernel(const bf16 *__restrict__ X, const bf16 *__restrict__ Wu, const bf16 *__restrict__ G,
                       int *__restrict__ cnt, uint2 *__restrict__ ent, int D, int F,
                       unsigned long long *__restrict__ nnz) {
    constexpr int WARPS = TWELL_DEC_THREADS / 32;
    __shared__ int s_woff[WARPS];
    __shared__ int s_unit[TWELL_TILE];
    __shared__ float s_g[TWELL_TILE];
    const int t = blockIdx.x, m = blockIdx.y, tiles = F / TWELL_TILE;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int col = t * TWELL_TILE + threadIdx.x;
    const float gv = __bfloat162float(G[(size_t)m * F + col]);
    const bool pos = gv > 0.0f;
    const unsigned bal = __ballot_sync(0xffffffffu, pos);
    if (lane == 0) s_woff[warp] = __popc(bal);
    __syncthreads();
    int off = 0, total = 0;
#pragma unroll
    for (int w = 0; w < WARPS; w++) {
        const int c = s_woff[w];
        off += w < warp ? c : 0;
        total += c;
    }
    if (pos) {
        const int slot = off + __popc(bal & ((1u << lane) - 1u));
        s_unit[slot] = col;
        s_g[slot] = gv;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
        cnt[(size_t)m * tiles + t] = total;
        if (nnz && total) atomicAdd(nnz, (unsigned long long)total);
    }
    uint2 *out = ent + (size_t)m * F + (size_t)t * TWELL_TILE;
    if (!Wu) {
        for (int j = threadIdx.x; j < total; j += TWELL_DEC_THREADS)
            out[j] = make_uint2((uint32_t)s_unit[j], __float_as_uint(s_g[j]));
        return;
    }
    // Two units per warp at a time (their x chunks shared): 8 x + 16 weight chunks in flight per lane.
    const uint4 *xr = reinterpret_cast<const uint4 *>(X + (size_t)m * D);
    const int chunks = D / 8;  // a multiple of 8 (D % 64 == 0)
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    for (int j0 = 2 * warp; j0 < total; j0 += 2 * WARPS) {
        const bool two = j0 + 1 < total;  // warp-uniform
        const int n[2] = {s_unit[j0], two ? s_unit[j0 + 1] : s_unit[j0]};
        const uint4 *wr[2] = {reinterpret_cast<const uint4 *>(Wu + (size_t)n[0] * D),
                              reinterpret_cast<const uint4 *>(Wu + (size_t)n[1] * D)};
        float acc[2] = {0.0f, 0.0f};
        for (int k0 = lane; k0 < chunks; k0 += 8 * 32) {
            uint4 a[8], w[2][8];
#pragma unroll
            for (int i = 0; i < 8; i++) {
                const int k = k0 + 32 * i;
                a[i] = k < chunks ? __ldg(xr + k) : zero;
#pragma unroll
                for (int v = 0; v < 2; v++) w[v][i] = k < chunks && (v == 0 || two) ? __ldg(wr[v] + k) : zero;
            }
#pragma unroll
            for (int i = 0; i < 8; i++) {
                float af[8];
                twell_bf16x8_to_f32(a[i], af);
#pragma unroll
                for (int v = 0; v < 2; v++) {
                    float wf[8];
                    twell_bf16x8_to_f32(w[v][i], wf);
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[v] = fmaf(af[e], wf[e], acc[v]);
                }
            }
        }
        acc[0] = warp_sum(acc[0]);  // butterfly: the same fixed order in every run
        acc[1] = warp_sum(acc[1]);
        if (lane == 0) {
            out[j0] = make_uint2((uint32_t)n[0], __float_as_uint(s_g[j0] * acc[0]));
            if (two) out[j0 + 1] = make_uint2((uint32_t)n[1], __float_as_uint(s_g[j0 + 1] * acc[1]));
        }
    }
}

// ---- 3. down: y = sum over entries of h * WdT[unit] ----
// grid (ceil(D / 256), M), TWELL_DEC_THREADS threads; lane owns columns 256 slice + 8 lane .. + 7.
__global__ void __launch_bounds__(TWELL_DEC_THREADS)
twell_decode_down_kernel(const bf16 *__restrict__ WdT, const int *__restrict__ cnt, const uint2 *__restrict__ ent,
                         bf16 *__restrict__ Y, int D, int F) {
    constexpr int WARPS = TWELL_DEC_THREADS / 32, CAP = TWELL_DEC_DOWN_CAP, R = 8;
    __shared__ uint2 s_ent[CAP];
    __shared__ int s_pre[TWELL_DEC_THREADS + 1];
    __shared__ __align__(16) float red[WARPS][TWELL_TILE];
    const int slice = blockIdx.x, m = blockIdx.y, tiles = F / TWELL_TILE;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int c8 = slice * 32 + lane;  // this lane's 16-byte chunk of the row
    const bool lane_ok = c8 * 8 < D;
    const int *rc = cnt + (size_t)m * tiles;
    const uint2 *re = ent + (size_t)m * F;
    float acc[8];
#pragma unroll
    for (int i = 0; i < 8; i++) acc[i] = 0.0f;
    // One count per thread (tiles <= TWELL_DEC_THREADS: twell_decode_forward takes F <= 65536), offsets by thread 0.
    if ((int)threadIdx.x < tiles) s_pre[threadIdx.x + 1] = rc[threadIdx.x];
    if (threadIdx.x == 0) {
        s_pre[0] = 0;
        for (int i = 1; i <= tiles; i++) s_pre[i] += s_pre[i - 1];  // offsets of the tiles' entries
    }
    __syncthreads();
    const int total = s_pre[tiles];
    for (int base = 0; base < total; base += CAP) {
        const int n_here = total - base < CAP ? total - base : CAP;
        if (base > 0) __syncthreads();  // the warps are done with the previous window
        for (int e = threadIdx.x; e < n_here; e += TWELL_DEC_THREADS) {
            const int fe = base + e;
            int lo = 0, hi = tiles - 1;  // the tile holding flat entry fe: s_pre[lo] <= fe < s_pre[lo + 1]
            while (lo < hi) {
                const int mid = (lo + hi + 1) >> 1;
                if (s_pre[mid] <= fe) lo = mid; else hi = mid - 1;
            }
            s_ent[e] = re[(size_t)lo * TWELL_TILE + (fe - s_pre[lo])];
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

// The three launches (no checks: twell_decode_forward checks). W1 = Wg (gated) or Wu; Wu_up = Wu (gated) or NULL.
static inline void twell_decode_gate(const bf16 *X, const bf16 *W1, bf16 *g, int M, int D, int F, cudaStream_t stream) {
    const dim3 grid(F / (8 * TWELL_DEC_GATE_NB));
    const int block = 32 * TWELL_DEC_GATE_WARPS;
    if (M <= 16) twell_decode_gate_kernel<1><<<grid, block, 0, stream>>>(X, W1, g, M, D, F);
    else if (M <= 32) twell_decode_gate_kernel<2><<<grid, block, 0, stream>>>(X, W1, g, M, D, F);
    else twell_decode_gate_kernel<4><<<grid, block, 0, stream>>>(X, W1, g, M, D, F);
    cudaCheckLaunch();
}
static inline void twell_decode_up(const bf16 *X, const bf16 *Wu_up, const bf16 *g, int *cnt, uint2 *ent, int M, int D,
                                   int F, unsigned long long *nnz, cudaStream_t stream) {
    twell_decode_up_kernel<<<dim3(F / TWELL_TILE, M), TWELL_DEC_THREADS, 0, stream>>>(X, Wu_up, g, cnt, ent, D, F, nnz);
    cudaCheckLaunch();
}
static inline void twell_decode_down(const bf16 *WdT, const int *cnt, const uint2 *ent, bf16 *Y, int M, int D, int F,
                                     cudaStream_t stream) {
    twell_decode_down_kernel<<<dim3(CEIL_DIV(D, TWELL_TILE), M), TWELL_DEC_THREADS, 0, stream>>>(WdT, cnt, ent, Y, D,
                                                                                                 F);
    cudaCheckLaunch();
}

// Launches the decode path on `stream`. Wg may be NULL when !gated (then Wu is the gate-and-up weight). nnz (may be
// NULL): device counter the active gates are ADDED to. Returns TWELL_OK, or TWELL_ERR_SHAPE / TWELL_ERR_ARG with
// a message naming the constraint (nothing launched).
static inline int twell_decode_forward(const bf16 *X, const bf16 *Wg, const bf16 *Wu, const bf16 *WdT, bf16 *Y, int M,
                                       int D, int F, int gated, bf16 *g, int *cnt, uint2 *ent,
                                       unsigned long long *nnz, cudaStream_t stream) {
    if (M < 1 || M > TWELL_DECODE_MAX_M) {
        fprintf(stderr, "error: twell_decode_forward: M=%d must be in [1, %d]\n", M, TWELL_DECODE_MAX_M);
        return TWELL_ERR_SHAPE;
    }
    if (D <= 0 || D % 64 != 0 || F <= 0 || F % TWELL_TILE != 0 || F / TWELL_TILE > 256) {
        fprintf(stderr, "error: twell_decode_forward: D=%d must be a positive multiple of 64 and F=%d a positive "
                        "multiple of %d (at most %d)\n", D, F, TWELL_TILE, 256 * TWELL_TILE);
        return TWELL_ERR_SHAPE;
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
    twell_decode_gate(X, W1, g, M, D, F, stream);
    twell_decode_up(X, gated ? Wu : NULL, g, cnt, ent, M, D, F, nnz, stream);
    twell_decode_down(WdT, cnt, ent, Y, M, D, F, stream);
    return TWELL_OK;
}

#endif  // SLLM_TWELL_DECODE_CUH
