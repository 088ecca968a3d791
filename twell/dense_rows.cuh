// twell/dense_rows.cuh: the FFN on a list of DENSE rows whose number is on the device, in one cooperative launch:
// no host sync, no launch per chunk. The sparse training FFN (twell/train_ffn.cuh) runs its dense rows (overflowing
// tiles, rows over dense_row_nnz, a full pair pool) through it in both directions, the inference tile path
// (twell/ffn.cuh) its overflow rows. Shapes as twell/train_ffn.cuh: D % 256 == 0, F % 256 == 0.
//   tt_gemm_tiles      a tensor-core GEMM that the whole grid walks (128 x 128 tiles, split-K for few rows)
//   tt_dense_rows_fwd_kernel   per chunk of Rc rows: gather X, g (and u) by GEMM, h = bf16(relu(g) * u), y = h WdT
//                      by GEMM, scatter into Y; grid barriers between. Rounding points of the dense path (core/ffn.cuh).
#ifndef SLLM_TWELL_DENSE_ROWS_CUH
#define SLLM_TWELL_DENSE_ROWS_CUH

#include <cooperative_groups.h>
#include <stdint.h>

#include "cuda_common.cuh"
#include "kernel_utils.cuh"
#include "tc_utils.cuh"

namespace cg = cooperative_groups;

// ---------------------------------------------------------------------------------------------------
// tt_gemm_tiles: C[m, n] (+)= sum_k A(m, k) B(k, n) [+ sum_k A2(m, k) B2(k, n)], bf16 in, fp32 accumulate, out bf16
// or fp32. A(m, k) = A[m * lda + k] (a_kc = 1) or A[k * lda + m] (a_kc = 0); B(k, n) = B[n * ldb + k] (b_kc = 1) or
// B[k * ldb + n] (b_kc = 0). The contiguous dimension of each operand must be a multiple of 8, N % 128 == 0. A device
// function of the dense-row kernels (their row count is on the device): the whole grid walks the 128 x 128 tiles,
// times the split-K parts; k tiles of 32 double-buffered through cp.async, fragments by ldmatrix (.trans for the
// row-contiguous operands), mma.sync m16n8k16. Fixed summation order over k: deterministic.
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
    // split-K (few rows): split > 1 cuts the k range (both passes) into `split` parts computed by different CTAs into
    // part [split, M, N] fp32, which tt_split_reduce adds in part order (deterministic) into C.
    float *part;
    int split;
} TtGemmArgs;

// One stage of a 128 x 32 operand tile in shared memory, by cp.async (zero-filled outside [rows) x [K)):
//   kc = 1 (k contiguous in global memory): S[i * TTG_LDS + kk] = P(r0 + i, k0 + kk)      (i < 128, kk < 32)
//   kc = 0 (rows contiguous):               S[kk * TTG_LDT + i] = P(r0 + i, k0 + kk)
// kc = 0 needs rows % 8 == 0 (a 16-byte chunk is 8 rows): true of every such operand here (F and D).
#define TTG_LDT 136             // padded row of the kc = 0 layout (bf16): conflict-free ldmatrix.trans
#define TTG_STAGE (TTG_BM * TTG_LDS)  // bf16 per operand stage (>= TTG_BK * TTG_LDT)
__device__ __forceinline__ void ttg_load_async(bf16 *S, const bf16 *P, long long ld, int kc, int r0, int rows, int k0,
                                               int K) {
    for (int v = threadIdx.x; v < 512; v += blockDim.x) {
        if (kc) {
            const int i = v >> 2, kk = (v & 3) * 8;
            const bool ok = r0 + i < rows && k0 + kk < K;
            tc_cp_async16(S + i * TTG_LDS + kk, ok ? (const void *)(P + (size_t)(r0 + i) * ld + k0 + kk) : (const void *)P,
                          ok ? 16 : 0);
        } else {
            const int kk = v >> 4, i = (v & 15) * 8;
            const bool ok = k0 + kk < K && r0 + i < rows;
            tc_cp_async16(S + kk * TTG_LDT + i, ok ? (const void *)(P + (size_t)(k0 + kk) * ld + r0 + i) : (const void *)P,
                          ok ? 16 : 0);
        }
    }
}

static __device__ __noinline__ void tt_gemm_tiles(const TtGemmArgs a) {
    // two stages (double buffering): the next k tile's cp.async runs while the tensor cores use this one
    __shared__ __align__(16) bf16 As[2][TTG_STAGE];
    __shared__ __align__(16) bf16 Bs[2][TTG_STAGE];
    const int M = a.M, K = a.K;
    if (K == 0 && a.accumulate) return;  // nothing to add
    const int tiles_m = (M + TTG_BM - 1) / TTG_BM, tiles_n = a.N / TTG_BN, tiles = tiles_m * tiles_n;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp >> 2, wn = warp & 3, gq = lane >> 2,
              tq = lane & 3;
    const int nk = (K + TTG_BK - 1) / TTG_BK, passes = a.A2 ? 2 : 1;
    const int S = a.split > 1 ? a.split : 1;
    const int nq = passes * nk, qs = (nq + S - 1) / S;  // k tiles over both passes, per split
    // ldmatrix lane offsets (core/tc_utils.cuh: fragment layouts): kc = 1 tiles with ldmatrix, kc = 0 with .trans
    const int l7 = lane & 7, l8 = ((lane >> 3) & 1) * 8, l16 = (lane >> 4) * 8;
    for (int item = blockIdx.x; item < tiles * S; item += gridDim.x) {
        const int t = item % tiles, sp = item / tiles;
        const int m0 = (t / tiles_n) * TTG_BM, n0 = (t % tiles_n) * TTG_BN;
        float acc[4][4][4];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int j = 0; j < 4; j++)
#pragma unroll
                for (int e = 0; e < 4; e++) acc[i][j][e] = 0.0f;
        const int q0 = sp * qs, q1 = min(nq, (sp + 1) * qs);
        auto load = [&](int q, int st) {
            const int pass = q >= nk, kt = q - pass * nk;
            ttg_load_async(As[st], pass ? a.A2 : a.A, a.lda, a.a_kc, m0, M, kt * TTG_BK, K);
            ttg_load_async(Bs[st], pass ? a.B2 : a.B, a.ldb, a.b_kc, n0, a.N, kt * TTG_BK, K);
            tc_cp_async_commit();
        };
        if (q0 < q1) load(q0, 0);
        for (int q = q0; q < q1; q++) {
            const int st = (q - q0) & 1;
            if (q + 1 < q1) {
                load(q + 1, st ^ 1);
                tc_cp_async_wait<1>();
            } else {
                tc_cp_async_wait<0>();
            }
            __syncthreads();
            const bf16 *Ast = As[st], *Bst = Bs[st];
#pragma unroll
            for (int ks = 0; ks < TTG_BK; ks += 16) {
                uint32_t af[4][4], bfr[4][2];
#pragma unroll
                for (int mi = 0; mi < 4; mi++) {
                    const int r = wm * 64 + mi * 16;
                    if (a.a_kc) tc_ldsm_x4(af[mi], Ast + (r + l7 + l8) * TTG_LDS + ks + l16);
                    else tc_ldsm_x4_trans(af[mi], Ast + (ks + l7 + l16) * TTG_LDT + r + l8);
                }
#pragma unroll
                for (int nj = 0; nj < 2; nj++) {
                    const int c = wn * 32 + nj * 16;
                    uint32_t rb[4];
                    if (a.b_kc) tc_ldsm_x4(rb, Bst + (c + l7 + l16) * TTG_LDS + ks + l8);
                    else tc_ldsm_x4_trans(rb, Bst + (ks + l7 + l8) * TTG_LDT + c + l16);
                    bfr[2 * nj][0] = rb[0];
                    bfr[2 * nj][1] = rb[1];
                    bfr[2 * nj + 1][0] = rb[2];
                    bfr[2 * nj + 1][1] = rb[3];
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
            __syncthreads();  // the next iteration's cp.async overwrites the stage read here
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
                    if (S > 1) {
                        *reinterpret_cast<float2 *>(a.part + ((size_t)sp * M + r) * a.N + c) = make_float2(v0, v1);
                    } else if (a.c_f32) {
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

// The split-K partial sums added in split order: C = (accumulate ? C : 0) + sum_s part[s].
static __device__ void tt_split_reduce(const TtGemmArgs a) {
    const long long total = (long long)a.M * a.N / 2;
    for (long long v = (long long)blockIdx.x * blockDim.x + threadIdx.x; v < total; v += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(2 * v / a.N), c = (int)(2 * v - (long long)r * a.N);
        float2 o = make_float2(0.0f, 0.0f);
        for (int sp = 0; sp < a.split; sp++) {
            const float2 q = *reinterpret_cast<const float2 *>(a.part + ((size_t)sp * a.M + r) * a.N + c);
            o.x += q.x;
            o.y += q.y;
        }
        if (a.c_f32) {
            float2 *p = reinterpret_cast<float2 *>((float *)a.C + (size_t)r * a.ldc + c);
            if (a.accumulate) { const float2 q = *p; o.x += q.x; o.y += q.y; }
            *p = o;
        } else {
            *reinterpret_cast<__nv_bfloat162 *>((bf16 *)a.C + (size_t)r * a.ldc + c) = __floats2bfloat162_rn(o.x, o.y);
        }
    }
}

// Split count for few rows (<= TT_SPLIT_ROWS) of a GEMM with N columns: enough CTAs for the SMs at one tile row.
#define TT_SPLIT_ROWS 256
#define TT_SPLIT_MAX 8
static inline int tt_split_count(int N) {
    const int s = cuda_sm_count() / (N / TTG_BN);
    return s < 1 ? 1 : (s > TT_SPLIT_MAX ? TT_SPLIT_MAX : s);
}

// out[i, :] = in[rows[off + i], :] for i < clamp(*n - off, 0, cap). D % 8 == 0.
static __device__ void tt_gather_rows(const bf16 *__restrict__ in, const int *__restrict__ rows, int n, int D,
                               bf16 *__restrict__ out) {  // out[i] = in[rows[i]], i < n
    const int chunks = D / 8;
    const long long total = (long long)n * chunks;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(i / chunks), c = (int)(i - (long long)r * chunks);
        reinterpret_cast<uint4 *>(out)[(size_t)r * chunks + c] = reinterpret_cast<const uint4 *>(in)[(size_t)rows[r] * chunks + c];
    }
}
static __device__ void tt_scatter_rows(const bf16 *__restrict__ in, const int *__restrict__ rows, int n, int D,
                                bf16 *__restrict__ out) {  // out[rows[i]] = in[i], i < n
    const int chunks = D / 8;
    const long long total = (long long)n * chunks;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        const int r = (int)(i / chunks), c = (int)(i - (long long)r * chunks);
        reinterpret_cast<uint4 *>(out)[(size_t)rows[r] * chunks + c] = reinterpret_cast<const uint4 *>(in)[(size_t)r * chunks + c];
    }
}

// Dense rows, forward element-wise: one block per chunk row i: G[i] <- bf16(relu(g) * u) (non-gated: relu(g)),
// row_l1[rows[i]] = sum |relu(g) * u| (fp32, block_sum: fixed order), fired flags (row_l1, fired: NULL for none).
static __device__ void tt_dense_fwd_ew(bf16 *__restrict__ G, const bf16 *__restrict__ U, const int *__restrict__ rows, int n,
                                int F, int gated, float *__restrict__ row_l1, uint8_t *__restrict__ fired) {
    __shared__ float sh[32];
    for (int i = blockIdx.x; i < n; i += gridDim.x) {
        float l1 = 0.0f;
        for (int c = 8 * threadIdx.x; c < F; c += 8 * blockDim.x) {
            float g[8], u[8], h[8];
            load8_bf16(G + (size_t)i * F + c, g);
            if (gated) load8_bf16(U + (size_t)i * F + c, u);
#pragma unroll
            for (int j = 0; j < 8; j++) {
                const bool on = g[j] > 0.0f;
                h[j] = on ? (gated ? g[j] * u[j] : g[j]) : 0.0f;
                l1 += fabsf(h[j]);
                if (fired && on && !fired[c + j]) fired[c + j] = 1;
            }
            store8_bf16(G + (size_t)i * F + c, h);
        }
        l1 = block_sum(l1, sh);
        if (threadIdx.x == 0 && row_l1) row_l1[rows[i]] = l1;
        __syncthreads();
    }
}

// The dense rows of one forward or backward, in ONE cooperative launch: the row count is read on the device, the
// chunks of Rc rows are walked in order, grid-wide barriers between the steps (gather, GEMMs, element-wise, GEMMs,
// scatter). With no dense row the kernel returns at once: no launches per chunk, no host sync.
typedef struct {
    const bf16 *X, *dY, *Wgate, *Wu, *WdT;  // Wgate: Wg (gated) or Wu (non-gated)
    const int *rows, *n_dev;                // the dense rows, increasing; their number
    bf16 *out;                              // Y (forward) or dX (backward), rows `rows` written
    float *dWa, *dWu, *dWdT;                // backward: dWg (non-gated: dWu), dWu, dWd^T, accumulated into
    float *row_l1;                          // forward: per-row L1
    uint8_t *fired;                         // forward
    float l1_coef;                          // backward
    bf16 *xd, *dyd, *g, *u, *dh, *yd;       // chunk buffers
    float *part;                            // split-K partial sums
    int D, F, gated, Rc, split_F, split_D;
} TtDenseRows;

// GEMM shorthand: C = A op B with A [m, k] k-contiguous.
__device__ __forceinline__ TtGemmArgs tt_args(const bf16 *A, long long lda, int a_kc, const bf16 *B, long long ldb,
                                              int b_kc, void *C, long long ldc, int c_f32, int accumulate, int M, int N,
                                              int K) {
    TtGemmArgs a;
    a.A = A; a.lda = lda; a.a_kc = a_kc; a.B = B; a.ldb = ldb; a.b_kc = b_kc; a.A2 = NULL; a.B2 = NULL;
    a.C = C; a.ldc = ldc; a.c_f32 = c_f32; a.accumulate = accumulate; a.M = M; a.N = N; a.K = K;
    a.part = NULL; a.split = 1;
    return a;
}

// One GEMM over the grid, split-K (then the ordered reduction) when it has few rows; ends with a grid barrier.
__device__ __forceinline__ void tt_gemm_grid(TtGemmArgs g, int split, float *part, cg::grid_group &grid) {
    if (g.M <= TT_SPLIT_ROWS && split > 1) { g.split = split; g.part = part; }
    tt_gemm_tiles(g);
    grid.sync();
    if (g.split > 1) {
        tt_split_reduce(g);
        grid.sync();
    }
}

// Both directions start a chunk alike: gather its rows of X (and of dY, when given), then g (and u) by GEMM.
__device__ __forceinline__ void tt_dense_gate_up(const TtDenseRows &a, int c0, int m, const bf16 *dY,
                                                 cg::grid_group &grid) {
    const int D = a.D, F = a.F;
    tt_gather_rows(a.X, a.rows + c0, m, D, a.xd);
    if (dY) tt_gather_rows(dY, a.rows + c0, m, D, a.dyd);
    grid.sync();
    tt_gemm_grid(tt_args(a.xd, D, 1, a.Wgate, D, 1, a.g, F, 0, 0, m, F, D), a.split_F, a.part, grid);
    if (a.gated) tt_gemm_grid(tt_args(a.xd, D, 1, a.Wu, D, 1, a.u, F, 0, 0, m, F, D), a.split_F, a.part, grid);
}

static __global__ void __launch_bounds__(256, 1) tt_dense_rows_fwd_kernel(const TtDenseRows a) {
    cg::grid_group grid = cg::this_grid();
    const int n = *a.n_dev, D = a.D, F = a.F;
    for (int c0 = 0; c0 < n; c0 += a.Rc) {
        const int m = min(a.Rc, n - c0);
        tt_dense_gate_up(a, c0, m, NULL, grid);
        tt_dense_fwd_ew(a.g, a.u, a.rows + c0, m, F, a.gated, a.row_l1, a.fired);
        grid.sync();
        tt_gemm_grid(tt_args(a.g, F, 1, a.WdT, D, 0, a.yd, D, 0, 0, m, D, F), a.split_D, a.part, grid);
        tt_scatter_rows(a.yd, a.rows + c0, m, D, a.out);
        grid.sync();
    }
}


#endif  // SLLM_TWELL_DENSE_ROWS_CUH
