// core/gemv.cuh: matrix-vector products for decoding (1 <= M <= GEMV_MAX_M rows), streaming the weights at HBM
// bandwidth, with the small kernels around them fused into their epilogues.
//
//   acc[m, n] = sum_k x[m, k] * W[n, k]     x [M, K] bf16 row-major; W: weight rows of K bf16 (nn.Linear layout);
//                                          fp32 accumulation, one bf16 (or fp32) rounding at the store, as the
//                                          cuBLASLt GEMMs of the same products. K % 8 == 0, rows 16-byte aligned.
//
// Why: at one token per sequence a decoding step reads every weight once and does little else, so its time is the
// weights' bytes over HBM bandwidth plus whatever breaks the stream. cuBLASLt's GEMMs at M = 1 reach 1.5-2.3 TB/s on
// an H100 (8-46 MB matrices), and the step's small kernels (RoPE, the cache write, h = relu(g) * u, split-K reduces)
// each add a launch and a dependent round trip. Here:
//   - a warp owns R weight rows (a "unit") and streams them front to back: lane l loads the 16-byte chunks l, l + 32,
//     ... of each row, GEMV_U chunks per row in flight (8 KB per warp at R = 2), and keeps x in shared memory;
//   - the first chunks of the weights are loaded BEFORE waiting for the kernel before it (programmatic dependent
//     launch: weights do not depend on it), so the weight stream continues across kernel boundaries;
//   - the rest of the matrix is requested before the wait too, through shared memory (cp.async), where it fits
//     (gemv_stage_mode): a matrix of more units than one wave of CTAs and rows of one step (K <= 2048: q/k/v, the FFN
//     up, the LM head) has each CTA take two CTAs' units, the second set's weights copied into shared memory; a
//     matrix of longer rows in one CTA per SM (the down, K = F) has each warp copy the rest of its rows past the first
//     step there; so the whole matrix is requested while the kernel before still runs;
//   - the dot products are summed lane by lane in chunk order, then across the warp by a fixed butterfly:
//     deterministic, the same bits for the same inputs;
//   - the epilogue (an Op) gets the unit's M x R sums in lane 0 and stores them: plain rows (bf16 or fp32), the gated
//     FFN's h = bf16(relu(bf16 g) * bf16 u) with its counters, or q / k / v with RoPE applied and k, v written straight
//     into the KV cache.
// An Op provides: R (rows per unit), COUNTS (whether store returns a count summed per CTA for finish), SMEM_FLOATS
// (shared scratch of the CTA for store and finish), row(unit, r) (the weight row), store<M>(unit, lane, acc, xs, KC,
// smem) (every lane of the unit's warp, with the sums in every lane and x in shared memory; ops that only store write
// from lane 0; returns the unit's count in lane 0) and finish(cta_count, smem, vb) (every thread of the CTA after a
// barrier, COUNTS only; vb is the virtual CTA: blockIdx.x, or 2 blockIdx.x + set when staged, below).
#ifndef SLLM_GEMV_CUH
#define SLLM_GEMV_CUH

#include <stdint.h>

#include "argmax.cuh"
#include "cuda_common.cuh"
#include "kernel_utils.cuh"
#include "ktrace.cuh"

#define GEMV_WARPS 8    // warps (units) per CTA
#define GEMV_MAX_M 4    // rows of x per call (x stays in shared memory: M * K * 2 bytes)
#define GEMV_U 8        // 16-byte chunks per lane and weight row in flight (one step covers 2048 columns)
#define GEMV_GAIN_REG 2 // 16-byte chunks of the norm's gain per thread loaded before the wait (K <= 4096 at 256 threads)


// The input rows: x [M, K] as given, or (gain != NULL) x = rmsnorm(a + b) * gain computed by every CTA for itself
// (core/rmsnorm.cuh's function: s = bf16(a + b), rstd = 1 / sqrt(mean(s^2) + eps), x = bf16(s * rstd * gain); b may
// be NULL: s = a), with CTA 0 writing s to res (when b and res are not NULL): the residual add and the norm of the
// block run inside the next product instead of a kernel of their own.
typedef struct {
    const bf16 *a, *b, *gain;  // a = x when gain == NULL
    bf16 *res;
    float eps;
#ifdef SLLM_KTRACE
    int kt_slot;  // core/ktrace.cuh (the launcher sets it)
#endif
} GemvIn;

// STAGE (gemv_stage_mode), the weights requested before the wait beyond the first step in registers:
//   GEMV_STAGE_UNITS (K <= 256 U, one step): a CTA does the units of two CTAs, "sets" 0 and 1 (virtual CTAs 2b and
//     2b + 1): set 0's weights into registers and set 1's into shared memory (cp.async), so that a matrix of more
//     units than the GPU holds warps at once streams in one wave instead of two or more (the second wave's loads would
//     start only when the first wave's CTAs exit). Set 1 is summed in the same order as set 0: the same bits.
//   GEMV_STAGE_TAIL (K > 256 U, at most one CTA per SM): each warp copies its rows' chunks past the first step (tail
//     [W][R][TJ][32], TJ = ceil(KC / 32) - U per lane) into shared memory, so its later steps wait for no HBM round
//     trip after the wait. The steps are summed in the same order: the same bits as unstaged.
#define GEMV_STAGE_NONE 0
#define GEMV_STAGE_UNITS 1
#define GEMV_STAGE_TAIL 2
// acc[m][r] += x[m] . (chunks of weight row r) over one step: the lane's chunks c0 + lane + 32 u < KC, u in order;
// wchunk(r, u) gives the weights (from registers, or read from shared memory as they are used).
template <int M, int R, int U, class WChunk>
static __device__ __forceinline__ void gemv_dot_step(float (&acc)[M][R], WChunk wchunk, const uint4 *xs, int KC, int c0,
                                                     int lane) {
#pragma unroll
    for (int u = 0; u < U; u++) {
        const int c = c0 + lane + 32 * u;
        if (c < KC) {
            uint4 wv[R];
#pragma unroll
            for (int r = 0; r < R; r++) wv[r] = wchunk(r, u);
#pragma unroll
            for (int m = 0; m < M; m++) {
                const uint4 xv = xs[m * KC + c];
#pragma unroll
                for (int r = 0; r < R; r++) acc[m][r] = dot8_bf16(xv, wv[r], acc[m][r]);
            }
        }
    }
}
// The lanes' sums added across the warp by a fixed butterfly: every lane gets the same bits.
template <int M, int R>
static __device__ __forceinline__ void gemv_warp_sum(float (&acc)[M][R]) {
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], o);
}

template <int M, int U, bool NORM, int STAGE, class Op>
static __global__ void __launch_bounds__(32 * GEMV_WARPS)
gemv_kernel(const Op op, const GemvIn in, int K, int units) {
    constexpr int R = Op::R, SETS = STAGE == GEMV_STAGE_UNITS ? 2 : 1;
    KT_SCOPE(in.kt_slot);
    extern __shared__ uint4 gemv_xs[];  // x [M, K / 8] in 16-byte chunks, then the staged weights (above)
    __shared__ int s_count[SETS][GEMV_WARPS];
    __shared__ float s_red[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int unit = blockIdx.x * SETS * GEMV_WARPS + warp, KC = K >> 3;
    const bool live = unit < units;
    const uint4 *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++) wr[r] = reinterpret_cast<const uint4 *>(op.row(live ? unit : 0, r));
    const uint4 zero = make_uint4(0u, 0u, 0u, 0u);
    uint4 w[R][U];
    // the first step's weights before the wait: they do not depend on the kernel before
#pragma unroll
    for (int u = 0; u < U; u++)
#pragma unroll
        for (int r = 0; r < R; r++)
            w[r][u] = live && lane + 32 * u < KC ? __ldg(wr[r] + lane + 32 * u) : zero;
    // set 1's weights into shared memory: each lane copies the chunks it will read (no barrier needed)
    const int unit1 = unit + GEMV_WARPS;
    const bool live1 = STAGE == GEMV_STAGE_UNITS && unit1 < units;
    uint4 *stage = gemv_xs + M * KC + (size_t)warp * R * U * 32;
    const int TJ = (KC + 31) / 32 - U;  // GEMV_STAGE_TAIL: chunks per lane and row past the first step
    uint4 *tail = gemv_xs + M * KC + (size_t)warp * R * (TJ > 0 ? TJ : 0) * 32;
    if constexpr (STAGE == GEMV_STAGE_TAIL) {  // the rest of this warp's rows (each lane the chunks it will read)
        if (live)
#pragma unroll
            for (int r = 0; r < R; r++)
                for (int j = 0; j < TJ; j++) {
                    const int c = lane + 32 * (U + j);
                    if (c < KC) {
                        const unsigned dst = (unsigned)__cvta_generic_to_shared(tail + (r * TJ + j) * 32 + lane);
                        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(wr[r] + c) : "memory");
                    }
                }
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    if constexpr (STAGE == GEMV_STAGE_UNITS) {
        if (live1)
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint4 *src = reinterpret_cast<const uint4 *>(op.row(unit1, r));
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (lane + 32 * u < KC) {
                        const unsigned dst = (unsigned)__cvta_generic_to_shared(stage + (r * U + u) * 32 + lane);
                        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src + lane + 32 * u)
                                     : "memory");
                    }
            }
        asm volatile("cp.async.commit_group;" ::: "memory");
    }
    // the norm's gain (a weight) before the wait too: the second pass of the norm then waits for no load
    uint4 gpre[GEMV_GAIN_REG];
    if constexpr (NORM) {
        const uint4 *g4 = reinterpret_cast<const uint4 *>(in.gain);
#pragma unroll
        for (int i = 0; i < GEMV_GAIN_REG; i++) {
            const int c = threadIdx.x + i * blockDim.x;
            gpre[i] = c < KC ? __ldg(g4 + c) : zero;
        }
    }
    pdl_launch_dependents();
    pdl_wait();
    KT_WAITED();
    if constexpr (NORM) {
        // s = bf16(a + b) into shared memory, the sum of squares per row, then x = bf16(s * rstd * gain) in place
        for (int m = 0; m < M; m++) {
            float ss = 0.0f;
            for (int c = threadIdx.x; c < KC; c += blockDim.x) {
                float v[8];
                load8_bf16(in.a + (size_t)m * K + 8 * c, v);
                if (in.b) {
                    float y[8];
                    load8_bf16(in.b + (size_t)m * K + 8 * c, y);
#pragma unroll
                    for (int i = 0; i < 8; i++) v[i] = round_bf16(v[i] + y[i]);
                    if (in.res && blockIdx.x == 0) store8_bf16(in.res + (size_t)m * K + 8 * c, v);
                }
#pragma unroll
                for (int i = 0; i < 8; i++) ss += v[i] * v[i];
                store8_bf16(reinterpret_cast<bf16 *>(gemv_xs + m * KC + c), v);
            }
            ss = block_sum(ss, s_red);
            const float rs = rsqrtf(ss / (float)K + in.eps);
#pragma unroll
            for (int i = 0; i < GEMV_GAIN_REG; i++) {  // the chunks whose gain is in registers
                const int c = threadIdx.x + i * blockDim.x;
                if (c < KC) {
                    float v[8], g[8];
                    bf16 *p = reinterpret_cast<bf16 *>(gemv_xs + m * KC + c);
                    load8_bf16(p, v);
                    unpack8_bf16(gpre[i], g);
#pragma unroll
                    for (int e = 0; e < 8; e++) v[e] = v[e] * rs * g[e];
                    store8_bf16(p, v);
                }
            }
            for (int c = threadIdx.x + GEMV_GAIN_REG * blockDim.x; c < KC; c += blockDim.x) {  // the chunks past them
                float v[8], g[8];
                bf16 *p = reinterpret_cast<bf16 *>(gemv_xs + m * KC + c);
                load8_bf16(p, v);
                load8_bf16(in.gain + 8 * c, g);
#pragma unroll
                for (int i = 0; i < 8; i++) v[i] = v[i] * rs * g[i];
                store8_bf16(p, v);
            }
        }
    } else {
        const uint4 *xg = reinterpret_cast<const uint4 *>(in.a);
        for (int i = threadIdx.x; i < M * KC; i += blockDim.x) gemv_xs[i] = xg[i];
    }
    __syncthreads();
    float acc[M][R] = {};
    if (live) {
        for (int c0 = 0; c0 < KC; c0 += 32 * U) {
            if (c0 > 0 && STAGE == GEMV_STAGE_TAIL) {
                if (c0 == 32 * U) asm volatile("cp.async.wait_all;" ::: "memory");  // this lane's own copies
                const int j0 = c0 / 32 - U;
#pragma unroll
                for (int u = 0; u < U; u++)
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        const int c = c0 + lane + 32 * u;
                        w[r][u] = c < KC ? tail[(r * TJ + j0 + u) * 32 + lane] : zero;
                    }
            } else if (c0 > 0) {
#pragma unroll
                for (int u = 0; u < U; u++)
#pragma unroll
                    for (int r = 0; r < R; r++) {
                        const int c = c0 + lane + 32 * u;
                        w[r][u] = c < KC ? __ldg(wr[r] + c) : zero;
                    }
            }
            gemv_dot_step<M, R, U>(acc, [&](int r, int u) { return w[r][u]; }, gemv_xs, KC, c0, lane);
        }
        gemv_warp_sum<M, R>(acc);
    }
    constexpr int SF = Op::SMEM_FLOATS > 0 ? Op::SMEM_FLOATS : 1;
    __shared__ float s_op[SETS * SF];
    int count = 0;
    if (live) count = op.template store<M>(unit, lane, acc, gemv_xs, KC, s_op);
    if (lane == 0) s_count[0][warp] = count;
    if constexpr (STAGE == GEMV_STAGE_UNITS) {  // set 1 from shared memory, the chunks in set 0's order
        asm volatile("cp.async.wait_all;" ::: "memory");
        float acc1[M][R] = {};
        if (live1) {
            gemv_dot_step<M, R, U>(acc1, [&](int r, int u) { return stage[(r * U + u) * 32 + lane]; }, gemv_xs, KC, 0,
                                   lane);
            gemv_warp_sum<M, R>(acc1);
        }
        int count1 = 0;
        if (live1) count1 = op.template store<M>(unit1, lane, acc1, gemv_xs, KC, s_op + SF);
        if (lane == 0) s_count[SETS - 1][warp] = count1;
    }
    if constexpr (Op::COUNTS) {
        __syncthreads();
#pragma unroll
        for (int st = 0; st < SETS; st++) {
            int total = 0;
            for (int i = 0; i < GEMV_WARPS; i++) total += s_count[st][i];
            op.finish(total, s_op + st * SF, (int)blockIdx.x * SETS + st);
        }
    }
}

// ---- epilogues ----

// y[m, n] = acc rounded to OutT (bf16 or float); unit u owns rows RR u .. RR u + RR - 1 (N % RR == 0). y [M, N].
template <typename OutT, int RR = 2>
struct GemvRowsOp {
    static constexpr int R = RR;
    static constexpr bool COUNTS = false;
    static constexpr int SMEM_FLOATS = 0;
    const bf16 *W;
    OutT *y;
    int N, K;
    __device__ const bf16 *row(int u, int r) const { return W + (size_t)(R * u + r) * K; }
    template <int M>
    __device__ int store(int u, int lane, const float (&acc)[M][R], const uint4 *, int, float *) const {
        if (lane) return 0;
#pragma unroll
        for (int m = 0; m < M; m++)
#pragma unroll
            for (int r = 0; r < R; r++) {
                if constexpr (sizeof(OutT) == 4) y[(size_t)m * N + R * u + r] = acc[m][r];
                else y[(size_t)m * N + R * u + r] = __float2bfloat16_rn(acc[m][r]);
            }
        return 0;
    }
    __device__ void finish(int, float *, int) const {}
};

// Greedy decoding's pick, fused into the LM head: logits y [M, N] fp32 as GemvRowsOp, and best[m] = the largest
// argmax_key over row m (core/argmax.cuh; one atomicMax per CTA and row): the first index of the maximum logit, NaN
// never winning (argmax_index reads it back). best must hold 0 before the call.
struct GemvLogitsArgmaxOp {
    static constexpr int R = 2;
    static constexpr bool COUNTS = true;  // finish runs: the CTA's best per row
    static constexpr int SMEM_FLOATS = 2 * GEMV_WARPS * GEMV_MAX_M;  // one 8-byte key per warp and row
    const bf16 *W;
    float *y;
    unsigned long long *best;
    int N, K, M;
    __device__ const bf16 *row(int u, int r) const { return W + (size_t)(R * u + r) * K; }
    template <int MM>
    __device__ int store(int u, int lane, const float (&acc)[MM][R], const uint4 *, int, float *sm) const {
        if (lane) return 0;
        unsigned long long *keys = reinterpret_cast<unsigned long long *>(sm);
        const int warp = threadIdx.x >> 5;
#pragma unroll
        for (int m = 0; m < MM; m++) {
            unsigned long long k = 0ull;
#pragma unroll
            for (int r = 0; r < R; r++) {
                y[(size_t)m * N + R * u + r] = acc[m][r];
                const unsigned long long kr = argmax_key(acc[m][r], R * u + r);
                k = kr > k ? kr : k;
            }
            keys[warp * GEMV_MAX_M + m] = k;
        }
        return 0;
    }
    __device__ void finish(int, float *sm, int vb) const {
        const unsigned long long *keys = reinterpret_cast<const unsigned long long *>(sm);
        const int m = threadIdx.x;
        if (m >= M) return;
        const int live = min(GEMV_WARPS, (N / R) - vb * GEMV_WARPS);  // warps with a unit
        unsigned long long k = 0ull;
        for (int w = 0; w < live; w++) k = keys[w * GEMV_MAX_M + m] > k ? keys[w * GEMV_MAX_M + m] : k;
        if (k) atomicMax(best + m, k);
    }
};

// The FFN's up side on x = ln2 [M, D]: unit u of F. Gated: g = bf16(x Wg[u]), v = bf16(x Wu[u]), h = bf16(g * v) if
// g > 0 else 0; non-gated: g = bf16(x Wu[u]), h = g if g > 0 else 0 (core/ffn.cuh's function, the same roundings).
// h [M, F] bf16. Counters (each may be NULL): *nnz += pairs with g > 0 (one atomic per CTA), fired[u] = 1 if unit u
// was > 0 for some row.
template <bool GATED>
struct GemvFFNUpOp {
    static constexpr int R = GATED ? 2 : 1;
    static constexpr bool COUNTS = true;
    static constexpr int SMEM_FLOATS = 0;
    const bf16 *wg, *wu;
    bf16 *h;
    int F, K;
    unsigned long long *nnz;
    uint8_t *fired;
    __device__ const bf16 *row(int u, int r) const { return (GATED && r == 0 ? wg : wu) + (size_t)u * K; }
    template <int M>
    __device__ int store(int u, int lane, const float (&acc)[M][R], const uint4 *, int, float *) const {
        if (lane) return 0;
        int on = 0;
#pragma unroll
        for (int m = 0; m < M; m++) {
            const float g = round_bf16(acc[m][0]);
            float hv = 0.0f;
            if (g > 0.0f) {
                on++;
                hv = GATED ? g * round_bf16(acc[m][R - 1]) : g;
            }
            h[(size_t)m * F + u] = __float2bfloat16_rn(hv);
        }
        if (fired && on) fired[u] = 1;
        return on;
    }
    __device__ void finish(int total, float *, int) const {
        if (threadIdx.x == 0 && nnz && total) atomicAdd(nnz, (unsigned long long)total);
    }
};

// q, k, v of one decoding step (row m = sequence m, all at position *pos) from x = ln1 [M, D], RoPE (core/rope.cuh's
// rotate-half convention, from the bf16-rounded products, as the GEMM + rope_qk kernels) on q and k, q to q [M, Q],
// k and v straight into the layer's cache kc, vc [B, S, KVH, hd] at position *pos. Unit u is a rotation pair: head
// rows i and i + hd/2 of q (u < Q/2), then of k, then of v.
struct GemvQKVRopeOp {
    static constexpr int R = 2;
    static constexpr bool COUNTS = false;
    static constexpr int SMEM_FLOATS = 0;
    const bf16 *wq, *wk, *wv;  // [Q, K], [KV, K], [KV, K]
    bf16 *q, *kc, *vc;
    const float *rope;  // [positions, hd/2, 2] (cos, sin)
    const int *pos;
    int Q, KV, hd, S, K;
    // which tensor (0 q, 1 k, 2 v) and the first row of unit u
    __device__ void place(int u, int &t, int &row0) const {
        const int h2 = hd >> 1;
        int p = u;
        t = 0;
        if (p >= Q / 2) { p -= Q / 2; t = 1; if (p >= KV / 2) { p -= KV / 2; t = 2; } }
        row0 = (p / h2) * hd + p % h2;
    }
    __device__ const bf16 *row(int u, int r) const {
        int t, row0;
        place(u, t, row0);
        const bf16 *w = t == 0 ? wq : t == 1 ? wk : wv;
        return w + (size_t)(row0 + r * (hd >> 1)) * K;
    }
    template <int M>
    __device__ int store(int u, int lane, const float (&acc)[M][R], const uint4 *, int, float *) const {
        if (lane) return 0;
        int t, row0;
        place(u, t, row0);
        const int h2 = hd >> 1, p = *pos, i = row0 % hd;
        float c = 1.0f, s = 0.0f;
        if (t < 2) {
            const float2 cs = *reinterpret_cast<const float2 *>(rope + ((size_t)p * h2 + i) * 2);
            c = cs.x; s = cs.y;
        }
#pragma unroll
        for (int m = 0; m < M; m++) {
            const float a = round_bf16(acc[m][0]), b = round_bf16(acc[m][1]);
            float ya = a, yb = b;
            if (t < 2) { ya = a * c - b * s; yb = b * c + a * s; }
            bf16 *dst = t == 0 ? q + (size_t)m * Q : (t == 1 ? kc : vc) + ((size_t)m * S + p) * KV;
            dst[row0] = __float2bfloat16_rn(ya);
            dst[row0 + h2] = __float2bfloat16_rn(yb);
        }
        return 0;
    }
    __device__ void finish(int, float *, int) const {}
};

// ---- launcher ----

// Shared memory for x: M * K * 2 bytes, up to this device limit (opt-in above 48 KB).
#define GEMV_MAX_SMEM (200 * 1024)

// Can the GEMV take these rows (M rows of K columns, 16-byte aligned)? Callers use cuBLASLt otherwise.
static inline bool gemv_fits(int M, int K, const void *x) {
    return M >= 1 && M <= GEMV_MAX_M && K >= 8 && K % 8 == 0 && ((uintptr_t)x & 15) == 0 &&
           (size_t)M * K * 2 <= GEMV_MAX_SMEM;
}

// CTAs of the GEMV resident at once (two per SM: at most 128 registers per thread, 256 threads), per process.
static inline int gemv_resident_ctas(void) {
    static int n = 0;
    if (!n) n = 2 * cuda_sm_count();
    return n;
}

// Shared memory of a gemv_kernel launch: x, then the staged weights.
static inline size_t gemv_smem_bytes(int stage, int M, int K, int R, int U) {
    const int TJ = (K / 8 + 31) / 32 - U;
    const size_t w = stage == GEMV_STAGE_UNITS ? (size_t)U : stage == GEMV_STAGE_TAIL ? (size_t)TJ : 0;
    return (size_t)M * K * 2 + sizeof(uint4) * GEMV_WARPS * R * w * 32;
}
// How a call is staged (the kernel's comment): UNITS when the rows are one step (K <= 256 U) and one CTA per 8 units
// would be more than one wave; TAIL when the rows are longer, the CTAs fit one per SM, and x and the rows' tails fit
// in GEMV_MAX_SMEM; NONE otherwise.
static inline int gemv_stage_mode(int M, int K, int units, int R, int U) {
    const int ctas = (units + GEMV_WARPS - 1) / GEMV_WARPS;
    if (K <= 256 * U) return ctas > gemv_resident_ctas() ? GEMV_STAGE_UNITS : GEMV_STAGE_NONE;
    if (ctas <= cuda_sm_count() && gemv_smem_bytes(GEMV_STAGE_TAIL, M, K, R, U) <= GEMV_MAX_SMEM)
        return GEMV_STAGE_TAIL;
    return GEMV_STAGE_NONE;
}

template <int M, int U, bool NORM, int STAGE, class Op>
static inline void gemv_launch_kernel(const Op &op, const GemvIn &in, int K, int units, cudaStream_t s) {
    const size_t smem = gemv_smem_bytes(STAGE, M, K, Op::R, U);
    static size_t smem_set = 48 * 1024;  // the default limit; raised once as needed (per instantiation)
    if (smem > smem_set) {
        cudaCheck(cudaFuncSetAttribute(gemv_kernel<M, U, NORM, STAGE, Op>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
        smem_set = smem;
    }
    const int per_cta = (STAGE == GEMV_STAGE_UNITS ? 2 : 1) * GEMV_WARPS;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = pdl_launch_config(dim3((unsigned)((units + per_cta - 1) / per_cta)),
                                                     dim3(32 * GEMV_WARPS), smem, 1, &attr, s);
#ifdef SLLM_KTRACE
    GemvIn in_t = in;
    in_t.kt_slot = kt_take(__PRETTY_FUNCTION__);
    cudaCheck(cudaLaunchKernelEx(&cfg, gemv_kernel<M, U, NORM, STAGE, Op>, op, in_t, K, units));
#else
    cudaCheck(cudaLaunchKernelEx(&cfg, gemv_kernel<M, U, NORM, STAGE, Op>, op, in, K, units));
#endif
}

template <int M, int U, bool NORM, class Op>
static inline void gemv_launch_cfg(const Op &op, const GemvIn &in, int K, int units, cudaStream_t s) {
    switch (gemv_stage_mode(M, K, units, Op::R, U)) {
        case GEMV_STAGE_UNITS: gemv_launch_kernel<M, U, NORM, GEMV_STAGE_UNITS>(op, in, K, units, s); break;
        case GEMV_STAGE_TAIL: gemv_launch_kernel<M, U, NORM, GEMV_STAGE_TAIL>(op, in, K, units, s); break;
        default: gemv_launch_kernel<M, U, NORM, GEMV_STAGE_NONE>(op, in, K, units, s); break;
    }
}

template <int U, class Op>
static inline void gemv_launch_u(const Op &op, const GemvIn &in, int M, int K, int units, cudaStream_t s) {
    const bool norm = in.gain != NULL;
    switch (M * 2 + norm) {
        case 2: gemv_launch_cfg<1, U, false>(op, in, K, units, s); break;
        case 3: gemv_launch_cfg<1, U, true>(op, in, K, units, s); break;
        case 4: gemv_launch_cfg<2, U, false>(op, in, K, units, s); break;
        case 5: gemv_launch_cfg<2, U, true>(op, in, K, units, s); break;
        case 6: gemv_launch_cfg<3, U, false>(op, in, K, units, s); break;
        case 7: gemv_launch_cfg<3, U, true>(op, in, K, units, s); break;
        case 8: gemv_launch_cfg<4, U, false>(op, in, K, units, s); break;
        default: gemv_launch_cfg<4, U, true>(op, in, K, units, s); break;
    }
}

// Runs op over `units` units on the input rows `in` (x [M, K], or the fused residual add + norm) as a programmatic
// dependent launch (it waits for the kernel before it on the stream before it reads its input or writes anything).
// Fatal if !gemv_fits (callers check first).
template <class Op>
static inline void gemv_launch(const Op &op, const GemvIn &in, int M, int K, int units, cudaStream_t s) {
    if (!gemv_fits(M, K, in.a) || (in.b && ((uintptr_t)in.b & 15)) || (in.res && ((uintptr_t)in.res & 15)))
        SLLM_FATAL("gemv: M=%d rows of K=%d (16-byte aligned, K %% 8 == 0, M <= %d, M*K*2 <= %d bytes) do not fit", M,
                   K, GEMV_MAX_M, GEMV_MAX_SMEM);
    if (units < 1) return;
    gemv_launch_u<GEMV_U>(op, in, M, K, units, s);
}
static inline GemvIn gemv_in(const bf16 *x) { GemvIn in = {x, NULL, NULL, NULL, 0.0f}; return in; }

// y [M, N] = x [M, K] W^T, W [N, K], y bf16 or fp32 (N even, W rows 16-byte aligned).
template <typename OutT>
static inline void gemv_rows(OutT *y, const GemvIn &in, const bf16 *W, int M, int N, int K, cudaStream_t s) {
    if (N % 2 || ((uintptr_t)W & 15)) SLLM_FATAL("gemv_rows: N=%d must be even and W 16-byte aligned", N);
    GemvRowsOp<OutT> op;
    op.W = W; op.y = y; op.N = N; op.K = K;
    gemv_launch(op, in, M, K, N / 2, s);
}

#endif  // SLLM_GEMV_CUH
