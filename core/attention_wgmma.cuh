// core/attention_wgmma.cuh: causal flash attention on Hopper (sm_90a), forward and deterministic backward: TMA
// loads, wgmma for every product, a producer warp(group) and consumer warpgroups. Head dim 64 only; other shapes and
// GPUs stay on core/attention.cuh's mma.sync kernels. Same inputs, outputs and numerics contract as those:
//   q [B, T, H, 64], k, v [B, T, KVH, 64] (bf16, rows of the projections), out [B, T, H, 64] bf16,
//   lse [B, H, T] fp32 (natural log of the softmax's denominator over the scaled scores).
//
// Forward: a persistent grid of at most one CTA per SM, AWG_FWD_THREADS threads; a tile is AWG_FWD_BM (192) query
// rows of one (batch, head), taken heaviest (latest rows) first.
//   warpgroup 0 (producer; one thread issues): per tile, TMA of the Q tile (192 x 64, 128-byte swizzle) into one of
//     two Q buffers, then the K and V tiles (128 keys x 64) of key blocks 0 .. the tile's last row into a ring of
//     AWG_STAGES stages (mbarriers: full / empty), so the next tile's loads run under this tile's last blocks.
//   warpgroups 1 .. 3 (consumers, 64 query rows each): per key block, S = Q K^T by 4 wgmma m64n128k16
//     (A = the WG's Q rows, B = K: both K-major), the causal mask where the block reaches past the WG's first row,
//     the online softmax in registers (the exp2 domain, attn_fwd_kernel's order of operations), P rounded to bf16 in
//     the accumulator layout as the A registers of 8 wgmma m64n64k16 with V (MN-major: imm-trans-b) into the fp32 O
//     accumulators. Then the stage is released. A warpgroup stops at its own last row and only releases the tile's
//     later blocks. setmaxnreg gives the producer 24 registers and the consumers 160.
//   The epilogue normalizes O, writes the rows < T and their lse.
//   kc != NULL (the inference prefill): each key block also goes from shared memory (un-swizzled) into a KV cache
//   kc, vc [B, S, KVH * 64] at its positions, once: from the first query block that loads it, by one consumer of the
//   first query head of the group.
// Rows of a key tile past the batch's T (the next batch's, or zero-filled past the tensor) are masked by causality
// (key > query for every query row < T); query rows past T are computed but not written.
// The backward (two kernels after a D = rowsum(dO * O) pass) is described above its kernels.
#ifndef SLLM_ATTENTION_WGMMA_CUH
#define SLLM_ATTENTION_WGMMA_CUH

#include <stdint.h>

#include "cuda_common.cuh"
#include "attention_sched.h"  // the tile and block orders
#include "hopper.cuh"
#include "tc_utils.cuh"  // tc_exp2, tc_pack_bf16x2

#define AWG_HD 64
#define AWG_BM 128                            // the dQ kernel's query rows per CTA (2 consumer warpgroups x 64)
#define AWG_BN 128                            // keys per block
#ifndef AWG_STAGES  // the forward's K, V ring depth (tuned: dev/RESULTS.md, Flash attention; -D: dev A/B)
#define AWG_STAGES 3
#endif
#define AWG_THREADS 384                       // the backward kernels (a producer and two consumer warpgroups)
#define AWG_TILE_BYTES (128 * AWG_HD * 2)     // 16384: a 128-row tile (the backward's Q, K, V, dO; a K or V stage)
#define AWG_FWD_BM 192                        // the forward's query rows per tile (3 consumer warpgroups x 64)
#define AWG_FWD_WGS (AWG_FWD_BM / 64)                 // consumer warpgroups of the forward
#define AWG_FWD_THREADS (128 * (1 + AWG_FWD_WGS))
#define AWG_FWD_Q_BYTES (AWG_FWD_BM * AWG_HD * 2)     // the forward's Q tile (two buffers)
#define AWG_SMEM_BYTES (2 * AWG_FWD_Q_BYTES + 2 * AWG_STAGES * AWG_TILE_BYTES + 8 * (4 + 3 * AWG_STAGES) + 1024)
#define AWG_TIMEOUT_NS 4000000000ull          // mbarrier watchdog: no legal wait comes close

// One wgmma.mma_async m64n128k16 (bf16 -> fp32), A and B K-major from shared memory through 128-byte-swizzle
// descriptors: S[64 x 128] (+)= Q[64 x 16] K^T. scale_d 0: S = A*B (the first k step). 64 accumulators per thread.
__device__ __forceinline__ void awg_wgmma_m64n128k16_ss(float (&d)[64], uint64_t da, uint64_t db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
        "}, %64, %65, p, 1, 1, 0, 0;\n}\n"
        :
          "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
        : "l"(da), "l"(db), "r"(scale_d)
        : "memory");
}
// One wgmma.mma_async m64n64k16 (bf16 -> fp32), A and B K-major from shared memory (128-byte-swizzle descriptors):
// D[64 x 64] (+)= A[64 x 16] B^T. scale_d 0: D = A*B. 32 accumulators per thread. (The backward's S and dP tiles.)
__device__ __forceinline__ void awg_wgmma_m64n64k16_ss(float (&d)[32], uint64_t da, uint64_t db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
        :
          "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "l"(da), "l"(db), "r"(scale_d)
        : "memory");
}
// m64nNk16, N = 64 or 128, both operands from shared memory (the one above or below, by N).
template <int N>
__device__ __forceinline__ void awg_wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d);
// One wgmma.mma_async m64n64k16, A from registers (a[4]: bf16x2 in the accumulator layout of the scores) and B
// MN-major from shared memory (imm-trans-b 1): O[64 x 64] += P[64 x 16] V[16 x 64].
__device__ __forceinline__ void awg_wgmma_m64n64k16_rs(float (&d)[32], const uint32_t (&a)[4], uint64_t db) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, 1, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
        "}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
        :
          "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(db)
        : "memory");
}

template <int N>
__device__ __forceinline__ void awg_wgmma_ss(float (&d)[N / 2], uint64_t da, uint64_t db, int scale_d) {
    static_assert(N == 64 || N == 128, "awg_wgmma_ss: N is 64 or 128");
    if constexpr (N == 128) awg_wgmma_m64n128k16_ss(d, da, db, scale_d);
    else awg_wgmma_m64n64k16_ss(d, da, db, scale_d);
}

// 16 bytes from a shared-window address.
__device__ __forceinline__ uint4 awg_lds16(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
    return v;
}
template <int N>
__device__ __forceinline__ void awg_fence_acc(float (&d)[N]) {
#pragma unroll
    for (int i = 0; i < N; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// Ping-pong in the dK/dV kernel: its two consumer warpgroups take turns issuing their wgmma groups (named barriers
// 1 and 2, 256 threads: one side waits, the other arrives), so that one's element-wise work runs while the other's
// products hold the tensor cores. Consumer c waits on barrier 1 + c and passes the turn on barrier 2 - c; both take
// the same number of turns. (In the forward the same turns gained nothing: dev/RESULTS.md, Flash attention.)
__device__ __forceinline__ void awg_turn_wait(int c) { asm volatile("bar.sync %0, 256;" ::"r"(1 + c) : "memory"); }
__device__ __forceinline__ void awg_turn_pass(int c) { asm volatile("bar.arrive %0, 256;" ::"r"(2 - c) : "memory"); }

// Online softmax of one 64 x 128 score tile of a consumer warpgroup (the thread's rows r0, r1; its accumulator
// layout): the diagonal block's keys after the row set to -inf, the running max m (log2 units) and sum l updated,
// sc overwritten by P = exp2(S * scale_log2 - m) (fp32), alpha = the factor for O (exp2(m_old - m_new)).
__device__ __forceinline__ void awg_fwd_softmax(float (&sc)[64], float (&m)[2], float (&l)[2], float (&alpha)[2],
                                                bool diagonal, int k0, int r0, int r1, int qd, float scale_log2) {
    if (diagonal) {  // raw scores of keys after the row -> -inf
#pragma unroll
        for (int jn = 0; jn < AWG_BN / 8; jn++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int col = k0 + jn * 8 + 2 * qd + (e & 1);
                if (col > (e < 2 ? r0 : r1)) sc[jn * 4 + e] = -INFINITY;
            }
    }
    float mx[2] = {-INFINITY, -INFINITY};
#pragma unroll
    for (int jn = 0; jn < AWG_BN / 8; jn++) {
        mx[0] = fmaxf(mx[0], fmaxf(sc[jn * 4 + 0], sc[jn * 4 + 1]));
        mx[1] = fmaxf(mx[1], fmaxf(sc[jn * 4 + 2], sc[jn * 4 + 3]));
    }
    float mref[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 1));
        mx[i] = fmaxf(mx[i], __shfl_xor_sync(0xffffffffu, mx[i], 2));
        const float mn = fmaxf(m[i], mx[i] * scale_log2);
        mref[i] = mn == -INFINITY ? 0.0f : mn;
        alpha[i] = tc_exp2(m[i] - mref[i]);  // 0 when m was -inf
        m[i] = mn;
        l[i] *= alpha[i];
    }
#pragma unroll
    for (int jn = 0; jn < AWG_BN / 8; jn++) {
        sc[jn * 4 + 0] = tc_exp2(fmaf(sc[jn * 4 + 0], scale_log2, -mref[0]));
        sc[jn * 4 + 1] = tc_exp2(fmaf(sc[jn * 4 + 1], scale_log2, -mref[0]));
        sc[jn * 4 + 2] = tc_exp2(fmaf(sc[jn * 4 + 2], scale_log2, -mref[1]));
        sc[jn * 4 + 3] = tc_exp2(fmaf(sc[jn * 4 + 3], scale_log2, -mref[1]));
        l[0] += sc[jn * 4 + 0] + sc[jn * 4 + 1];
        l[1] += sc[jn * 4 + 2] + sc[jn * 4 + 3];
    }
}
// O *= alpha (per row).
__device__ __forceinline__ void awg_fwd_rescale(float (&o)[32], const float (&alpha)[2]) {
#pragma unroll
    for (int jn = 0; jn < AWG_HD / 8; jn++) {
        o[jn * 4 + 0] *= alpha[0];
        o[jn * 4 + 1] *= alpha[0];
        o[jn * 4 + 2] *= alpha[1];
        o[jn * 4 + 3] *= alpha[1];
    }
}

// Keys key0 .. key0 + 127 (< T) of a K and a V stage (128-byte swizzle: chunk ch of row r at ch ^ (r % 8)) into the
// KV cache kc, vc [B, S, KVH * 64] at their positions; one warpgroup (t = its thread index).
__device__ __forceinline__ void awg_fwd_cache_write(bf16 *__restrict__ kc, bf16 *__restrict__ vc, uint32_t sK,
                                                    uint32_t sV, int t, int key0, int T, int b, int S, int KVH, int kvh) {
    const size_t kvs = (size_t)KVH * AWG_HD;
    for (int i = t; i < AWG_BN * 8; i += 128) {  // (row, 16-byte chunk) pairs
        const int r = i >> 3, ch = i & 7, row = key0 + r;
        if (row >= T) continue;
        const uint32_t off = (uint32_t)(r * 128 + ((ch ^ (r & 7)) << 4));
        const size_t o = ((size_t)b * S + row) * kvs + (size_t)kvh * AWG_HD + 8 * ch;
        *reinterpret_cast<uint4 *>(kc + o) = awg_lds16(sK + off);
        *reinterpret_cast<uint4 *>(vc + o) = awg_lds16(sV + off);
    }
}

// Persistent: a 1-D grid of at most one CTA per SM, CTA x taking its tiles from attn_fwd_tile_index; the Q tile is
// double-buffered, so the next tile's Q and first K, V blocks load while this tile's last blocks and epilogue run.
// AWG_FWD_THREADS threads, AWG_SMEM_BYTES of dynamic shared memory. A warpgroup issues S of the next key block right
// behind its P V, so the tensor cores get both back to back and one wait per block is saved. Key blocks are counted
// across the CTA's tiles (g) for the ring's stages and phases.
static __global__ void __launch_bounds__(AWG_FWD_THREADS, 1)
attn_wgmma_fwd_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                      const __grid_constant__ CUtensorMap tmV, bf16 *__restrict__ out, float *__restrict__ lse, int T,
                      int H, int KVH, float scale_log2, bf16 *__restrict__ kc, bf16 *__restrict__ vc, int S, int B) {
    extern __shared__ __align__(16) unsigned char awg_smem[];
    const uint32_t base = (hp_smem_addr(awg_smem) + 1023u) & ~1023u;  // the 128-byte swizzle atom's alignment
    constexpr int QBUF = 2;  // Q tile buffers
    const uint32_t sQ0 = base, sK0 = base + QBUF * AWG_FWD_Q_BYTES, sV0 = sK0 + AWG_STAGES * AWG_TILE_BYTES;
    // barriers: k_full[S], v_full[S], kv_empty[S], q_full[QBUF], q_empty[QBUF]
    const uint32_t bars = sV0 + AWG_STAGES * AWG_TILE_BYTES, qbars = bars + 8 * 3 * AWG_STAGES;
    const int nmb = CEIL_DIV(T, AWG_FWD_BM), ntiles = nmb * H * B;
    const int tile0 = (int)blockIdx.x, tile_step = (int)gridDim.x;
    const int wg = threadIdx.x >> 7;
    if (threadIdx.x == 0) {
        for (int s = 0; s < AWG_STAGES; s++) {
            hp_mbar_init(bars + 8 * s, 1);                                         // k_full[s]
            hp_mbar_init(bars + 8 * (AWG_STAGES + s), 1);                          // v_full[s]
            hp_mbar_init(bars + 8 * (2 * AWG_STAGES + s), 128 * AWG_FWD_WGS);      // kv_empty[s]: every consumer thread
        }
        for (int qb = 0; qb < QBUF; qb++) {
            hp_mbar_init(qbars + 8 * qb, 1);                                       // q_full[qb]
            hp_mbar_init(qbars + 8 * (QBUF + qb), 128 * AWG_FWD_WGS);              // q_empty[qb]
        }
        hp_fence_barrier_init();
    }
    __syncthreads();
    if (wg == 0) {  // producer
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (threadIdx.x != 0) return;
        uint32_t g = 0;  // key blocks issued so far
        int n = 0;       // tiles so far
        for (int tile; (tile = attn_fwd_tile_index(n, tile0, tile_step)) < ntiles; n++) {
            int mb, h, b;
            attn_fwd_tile(tile, nmb, H, B, &mb, &h, &b);
            const int kvh = h / (H / KVH), q0 = mb * AWG_FWD_BM;
            const int nkb = (min(q0 + AWG_FWD_BM, T) - 1) / AWG_BN + 1;
            const int qb = n % QBUF;
            if (n >= QBUF)  // the buffer's previous tile is done with it
                hp_mbar_wait(qbars + 8 * (QBUF + qb), (uint32_t)(n / QBUF - 1) & 1u, AWG_TIMEOUT_NS);
            hp_mbar_arrive_expect_tx(qbars + 8 * qb, AWG_FWD_Q_BYTES);
            hp_tma_load_2d(sQ0 + qb * AWG_FWD_Q_BYTES, &tmQ, qbars + 8 * qb, h * AWG_HD, b * T + q0);
            for (int j = 0; j < nkb; j++, g++) {
                const int s = g % AWG_STAGES;
                const uint32_t ph = (g / AWG_STAGES) & 1u;
                const uint32_t k_full = bars + 8 * s, v_full = bars + 8 * (AWG_STAGES + s);
                hp_mbar_wait(bars + 8 * (2 * AWG_STAGES + s), ph ^ 1u, AWG_TIMEOUT_NS);  // the stage's last use is done
                hp_mbar_arrive_expect_tx(k_full, AWG_TILE_BYTES);
                hp_tma_load_2d(sK0 + s * AWG_TILE_BYTES, &tmK, k_full, kvh * AWG_HD, b * T + j * AWG_BN);
                hp_mbar_arrive_expect_tx(v_full, AWG_TILE_BYTES);
                hp_tma_load_2d(sV0 + s * AWG_TILE_BYTES, &tmV, v_full, kvh * AWG_HD, b * T + j * AWG_BN);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 160;\n" ::: "memory");
    const int c = wg - 1, t = threadIdx.x & 127, warp = t >> 5, lane = t & 31, qd = lane & 3;
    uint32_t g = 0;
    int n = 0;
    for (int tile; (tile = attn_fwd_tile_index(n, tile0, tile_step)) < ntiles; n++) {
        int mb, h, b;
        attn_fwd_tile(tile, nmb, H, B, &mb, &h, &b);
        const int kvh = h / (H / KVH), q0 = mb * AWG_FWD_BM;
        const int nkb = (min(q0 + AWG_FWD_BM, T) - 1) / AWG_BN + 1;  // key blocks up to the last row
        // consumer c: query rows q0 + 64 c .. + 63; this thread's rows r0 = .. + 16 warp + lane / 4 and r0 + 8
        const int r0 = q0 + 64 * c + 16 * warp + (lane >> 2), r1 = r0 + 8;
        // the key blocks this warpgroup needs (up to its own last row < T; none when all its rows are past T);
        // the rest of the tile's blocks it only waits for and releases, keeping the ring's phases
        const int wq0 = q0 + 64 * c;
        const int wg_nkb = wq0 < T ? (min(wq0 + 64, T) - 1) / AWG_BN + 1 : 0;
        // key block j goes into the KV cache from the first query block that loads it, by one warpgroup
        const bool cache_wg = kc && h % (H / KVH) == 0 && c == AWG_FWD_WGS - 1;
        const int qb = n % QBUF;
        const uint32_t aQ = sQ0 + qb * AWG_FWD_Q_BYTES + c * (64 * 128);  // this warpgroup's 64 Q rows (1024-aligned)
        float o[32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
        for (int i = 0; i < 32; i++) o[i] = 0.0f;
        hp_mbar_wait(qbars + 8 * qb, (uint32_t)(n / QBUF) & 1u, AWG_TIMEOUT_NS);
        float sc[64];
        for (int j = 0; j < wg_nkb; j++) {
            const int s = (g + j) % AWG_STAGES;
            const uint32_t ph = ((g + j) / AWG_STAGES) & 1u;
            const uint32_t sK = sK0 + s * AWG_TILE_BYTES, sV = sV0 + s * AWG_TILE_BYTES;
            if (j == 0) {  // S = Q K^T (for j > 0 issued by the previous block's step)
                hp_mbar_wait(bars + 8 * s, ph, AWG_TIMEOUT_NS);
                awg_fence_acc(sc);
                hp_wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < AWG_HD / 16; kk++)
                    awg_wgmma_m64n128k16_ss(sc, hp_desc_sw128(aQ + 32 * kk), hp_desc_sw128(sK + 32 * kk), kk > 0 ? 1 : 0);
                hp_wgmma_commit();
                hp_wgmma_wait<0>();
                awg_fence_acc(sc);
            }
            if (cache_wg && (j * AWG_BN) / AWG_FWD_BM == mb) {  // this block into the cache
                hp_mbar_wait(bars + 8 * (AWG_STAGES + s), ph, AWG_TIMEOUT_NS);
                awg_fwd_cache_write(kc, vc, sK, sV, t, j * AWG_BN, T, b, S, KVH, kvh);
            }
            float alpha[2];
            awg_fwd_softmax(sc, m, l, alpha, j * AWG_BN + AWG_BN - 1 > wq0, j * AWG_BN, r0, r1, qd,
                            scale_log2);
            awg_fwd_rescale(o, alpha);
            // O += P V: key step kk takes the scores' n8 blocks 2 kk and 2 kk + 1 as its A registers. All of P is
            // packed before the fence: a register that a wgmma reads must be written before the wgmma.fence that
            // precedes it.
            uint32_t pa[AWG_BN / 16][4];
#pragma unroll
            for (int kk = 0; kk < AWG_BN / 16; kk++)
#pragma unroll
                for (int i = 0; i < 4; i++) pa[kk][i] = tc_pack_bf16x2(sc[8 * kk + 2 * i], sc[8 * kk + 2 * i + 1]);
            hp_mbar_wait(bars + 8 * (AWG_STAGES + s), ph, AWG_TIMEOUT_NS);
            awg_fence_acc(o);
            hp_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < AWG_BN / 16; kk++)
                awg_wgmma_m64n64k16_rs(o, pa[kk], hp_desc_sw128(sV + 16 * 128 * kk, 1024));
            hp_wgmma_commit();
            if (j + 1 < wg_nkb) {  // S of the next block (its stage was released at the end of block j + 1 - STAGES)
                const uint32_t g1 = g + j + 1;
                const uint32_t sK1 = sK0 + (g1 % AWG_STAGES) * AWG_TILE_BYTES;
                hp_mbar_wait(bars + 8 * (g1 % AWG_STAGES), (g1 / AWG_STAGES) & 1u, AWG_TIMEOUT_NS);
                awg_fence_acc(sc);
                hp_wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < AWG_HD / 16; kk++)
                    awg_wgmma_m64n128k16_ss(sc, hp_desc_sw128(aQ + 32 * kk), hp_desc_sw128(sK1 + 32 * kk),
                                            kk > 0 ? 1 : 0);
                hp_wgmma_commit();
            }
            hp_wgmma_wait<0>();
            awg_fence_acc(o);
            awg_fence_acc(sc);
            hp_mbar_arrive(bars + 8 * (2 * AWG_STAGES + s));  // this thread is done with the stage
        }
        {
            for (int j = wg_nkb; j < nkb; j++) {  // blocks past this warpgroup's rows: waited for, released
                const int s = (g + j) % AWG_STAGES;
                const uint32_t ph = ((g + j) / AWG_STAGES) & 1u;
                hp_mbar_wait(bars + 8 * s, ph, AWG_TIMEOUT_NS);
                hp_mbar_wait(bars + 8 * (AWG_STAGES + s), ph, AWG_TIMEOUT_NS);
                if (cache_wg && (j * AWG_BN) / AWG_FWD_BM == mb)
                    awg_fwd_cache_write(kc, vc, sK0 + s * AWG_TILE_BYTES, sV0 + s * AWG_TILE_BYTES, t, j * AWG_BN, T, b,
                                        S, KVH, kvh);
                hp_mbar_arrive(bars + 8 * (2 * AWG_STAGES + s));
            }
        }
        g += nkb;
        hp_mbar_arrive(qbars + 8 * (QBUF + qb));  // done with this Q buffer
        // epilogue: normalize, the rows < T and their lse
#pragma unroll
        for (int i = 0; i < 2; i++) {
            l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
            l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
        }
        const float inv0 = 1.0f / l[0], inv1 = 1.0f / l[1];
        const size_t qs = (size_t)H * AWG_HD;
        if (qd == 0) {
            float *lrow = lse + ((size_t)b * H + h) * T;
            if (r0 < T) lrow[r0] = m[0] * 0.69314718055994531f + logf(l[0]);
            if (r1 < T) lrow[r1] = m[1] * 0.69314718055994531f + logf(l[1]);
        }
#pragma unroll
        for (int jn = 0; jn < AWG_HD / 8; jn++) {
            const int col = h * AWG_HD + jn * 8 + 2 * qd;
            if (r0 < T)
                *reinterpret_cast<uint32_t *>(out + ((size_t)b * T + r0) * qs + col) =
                    tc_pack_bf16x2(o[jn * 4 + 0] * inv0, o[jn * 4 + 1] * inv0);
            if (r1 < T)
                *reinterpret_cast<uint32_t *>(out + ((size_t)b * T + r1) * qs + col) =
                    tc_pack_bf16x2(o[jn * 4 + 2] * inv1, o[jn * 4 + 3] * inv1);
        }
    }
}


// ------------------------------------------------------------------------------------------------
// Backward (deterministic, two kernels, the same summation order on every run), after attn_bwd_preprocess
// has written D = rowsum(dout * out) [B, H, T]. P = exp2(S * scale_log2 - lse * log2e) recomputed from the lse of
// the forward; dS = P (dP - D) with P and dP in fp32; P and dS rounded to bf16 as the A operands of the
// products with dO, Q and K. dK = scale * sum dS^T Q, dQ = scale * sum dS K, dV = sum P^T dO.
//
// dK/dV kernel: grid (ceil(T / 128), KVH, B) in awg_bwd_block's order, 384 threads. CTA: 128 keys of one (batch,
// kv head); its K and V tiles stay in shared memory. It loops over the query heads of the group and, per head, the 128-row query blocks from
// the diagonal to T.
//   warp 0 (producer; setmaxnreg 40): per step, the Q and dO tiles (128 x 64, TMA) and the block's lse * log2e and
//     D (+inf and 0 past T: P = dS = 0 there) into a ring of AWG_BWD_STAGES stages.
//   warpgroups 1, 2 (consumers, keys k0 + 64 c ..; setmaxnreg 232): S^T = K Q^T and dP^T = V dO^T (wgmma
//     m64n128k16, both operands K-major), P^T and dS^T in registers, then dV += P^T dO and dK += dS^T Q (A from
//     registers, B = the dO and Q tiles MN-major). The two warpgroups take turns issuing (ping-pong, above). A
//     query block entirely before the warpgroup's keys is skipped (its turns are taken empty).
// dQ kernel: grid (ceil(T / 128), H, B) in awg_bwd_block's order, 384 threads. CTA: 128 query rows of one (batch,
// head) (Q and dO loaded once), looping over 128-key blocks up to the diagonal.
//   thread 0 (producer): the K and V tiles (128 x 64) per block into the ring.
//   warpgroups 1, 2 (64 rows each): S = Q K^T and dP = dO V^T (m64n128k16), dS in registers, dQ += dS K (B = K,
//     MN-major).
// Rows and keys past T: their P is 0 (lse +inf, or masked as keys after every query < T); they are not written.
#ifndef AWG_BWD_STAGES  // the backward's ring depth; the forward's is AWG_STAGES (tuned: dev/RESULTS.md, Flash attention)
#define AWG_BWD_STAGES 4
#endif
#ifndef AWG_BWD_HC  // (batch, head) pairs per chunk of the backward's block order (-D: dev A/B)
#define AWG_BWD_HC 16
#endif
#define AWG_HALF_TILE_BYTES (64 * AWG_HD * 2)  // 8192: a 64-row tile
#define AWG_DKDV_BQ 128  // query rows per step of the dK/dV kernel (m64n128 S^T and dP^T tiles)
#define AWG_DKDV_SMEM_BYTES                                                                                         \
    (2 * AWG_TILE_BYTES + AWG_BWD_STAGES * (2 * AWG_DKDV_BQ * AWG_HD * 2 + 2 * AWG_DKDV_BQ * 4) +                    \
     8 * (1 + 2 * AWG_BWD_STAGES) + 1024)
#define AWG_DQ_SMEM_BYTES ((2 + 2 * AWG_BWD_STAGES) * AWG_TILE_BYTES + 8 * (1 + 2 * AWG_BWD_STAGES) + 1024)

// This block's rank (0 = the heaviest of its head), y, z in the backward kernels' block order (core/attention_sched.h).
__device__ __forceinline__ void awg_bwd_block(int &rank, int &y, int &z) {
    attn_bwd_block((int)blockIdx.x, (int)blockIdx.y, (int)blockIdx.z, (int)gridDim.x, (int)gridDim.y, (int)gridDim.z,
                   AWG_BWD_HC, &rank, &y, &z);
}

static __global__ void __launch_bounds__(AWG_THREADS, 1)
attn_wgmma_bwd_dkdv_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmdO,
                           const __grid_constant__ CUtensorMap tmK, const __grid_constant__ CUtensorMap tmV,
                           bf16 *__restrict__ dk, bf16 *__restrict__ dv, const float *__restrict__ lse,
                           const float *__restrict__ dsum, int T, int H, int KVH, float scale, float scale_log2) {
    extern __shared__ __align__(16) unsigned char awg_smem[];
    const uint32_t raw = hp_smem_addr(awg_smem), base = (raw + 1023u) & ~1023u;
    constexpr int BQ = AWG_DKDV_BQ;
    constexpr uint32_t QT = BQ * AWG_HD * 2;  // a Q or dO tile
    const uint32_t sK = base, sV = sK + AWG_TILE_BYTES, sQ0 = sV + AWG_TILE_BYTES;
    const uint32_t sdO0 = sQ0 + AWG_BWD_STAGES * QT;
    const uint32_t sL0 = sdO0 + AWG_BWD_STAGES * QT;  // [stage]: [BQ] lse * log2e, then [BQ] D
    const uint32_t bars = sL0 + AWG_BWD_STAGES * 2 * BQ * 4;  // kv_full, full[S], empty[S]
    float *const sLD = reinterpret_cast<float *>(awg_smem + (sL0 - raw));
    int nb, kvh, b;  // key block 0 (the most query blocks) is the heaviest
    awg_bwd_block(nb, kvh, b);
    const int group = H / KVH, k0 = nb * AWG_BN;
    const int i_begin = k0 / BQ, per_head = CEIL_DIV(T, BQ) - i_begin, n_it = group * per_head;  // blocks from k0
    const int wg = threadIdx.x >> 7;
    const uint32_t kv_full = bars;
    if (threadIdx.x == 0) {
        hp_mbar_init(kv_full, 1);
        for (int s = 0; s < AWG_BWD_STAGES; s++) {
            hp_mbar_init(bars + 8 * (1 + s), 32);                    // full[s]: the producer warp's lanes
            hp_mbar_init(bars + 8 * (1 + AWG_BWD_STAGES + s), 256);  // empty[s]: every consumer thread
        }
        hp_fence_barrier_init();
    }
    __syncthreads();
    if (wg == 0) {  // producer warp
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");  // (its L, D loop)
        if (threadIdx.x >= 32) return;
        const int lane = threadIdx.x;
        if (lane == 0) {
            hp_mbar_arrive_expect_tx(kv_full, 2 * AWG_TILE_BYTES);
            hp_tma_load_2d(sK, &tmK, kv_full, kvh * AWG_HD, b * T + k0);
            hp_tma_load_2d(sV, &tmV, kv_full, kvh * AWG_HD, b * T + k0);
        }
        for (int it = 0; it < n_it; it++) {
            const int s = it % AWG_BWD_STAGES;
            const uint32_t ph = (uint32_t)(it / AWG_BWD_STAGES) & 1u, full = bars + 8 * (1 + s);
            const int h = kvh * group + it / per_head, q0 = (i_begin + it % per_head) * BQ;
            hp_mbar_wait(bars + 8 * (1 + AWG_BWD_STAGES + s), ph ^ 1u, AWG_TIMEOUT_NS);
            float *L = sLD + s * 2 * BQ, *D = L + BQ;
            for (int i = lane; i < BQ; i += 32) {
                const int row = q0 + i;
                const size_t idx = ((size_t)b * H + h) * T + row;
                L[i] = row < T ? lse[idx] * 1.4426950408889634f : INFINITY;
                D[i] = row < T ? dsum[idx] : 0.0f;
            }
            if (lane == 0) {  // its arrive (release) also publishes its own L, D stores
                hp_mbar_arrive_expect_tx(full, 2 * QT);
                hp_tma_load_2d(sQ0 + s * QT, &tmQ, full, h * AWG_HD, b * T + q0);
                hp_tma_load_2d(sdO0 + s * QT, &tmdO, full, h * AWG_HD, b * T + q0);
            } else {
                hp_mbar_arrive(full);
            }
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");  // S^T, dP^T, dK, dV: 128 accumulators
    // consumer c: keys kr0 = k0 + 64 c + 16 warp + lane / 4 and kr0 + 8 (the accumulator rows of this thread)
    const int c = wg - 1, t = threadIdx.x & 127, warp = t >> 5, lane = t & 31, qd = lane & 3;
    const int kc0 = k0 + 64 * c, kr0 = kc0 + 16 * warp + (lane >> 2), kr1 = kr0 + 8;
    const uint32_t aK = sK + c * AWG_HALF_TILE_BYTES, aV = sV + c * AWG_HALF_TILE_BYTES;
    float dka[32], dva[32];
#pragma unroll
    for (int i = 0; i < 32; i++) dka[i] = dva[i] = 0.0f;
    hp_mbar_wait(kv_full, 0, AWG_TIMEOUT_NS);
    if (c == 1) awg_turn_pass(1);  // consumer 0 issues first
    for (int it = 0; it < n_it; it++) {
        const bool last = c == 1 && it == n_it - 1;  // consumer 1's last turn has no taker
        const int s = it % AWG_BWD_STAGES;
        const uint32_t ph = (uint32_t)(it / AWG_BWD_STAGES) & 1u;
        const int q0 = (i_begin + it % per_head) * BQ;
        hp_mbar_wait(bars + 8 * (1 + s), ph, AWG_TIMEOUT_NS);
        if (q0 + BQ - 1 >= kc0) {  // else every query of the block is before every key of this warpgroup: P = 0
            const uint32_t sQ = sQ0 + s * QT, sdO = sdO0 + s * QT;
            const float *L = sLD + s * 2 * BQ, *D = L + BQ;
            float st[BQ / 2], dpt[BQ / 2];
            awg_turn_wait(c);
            awg_fence_acc(st);
            awg_fence_acc(dpt);
            hp_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < AWG_HD / 16; kk++)
                awg_wgmma_ss<BQ>(st, hp_desc_sw128(aK + 32 * kk), hp_desc_sw128(sQ + 32 * kk), kk > 0);
#pragma unroll
            for (int kk = 0; kk < AWG_HD / 16; kk++)
                awg_wgmma_ss<BQ>(dpt, hp_desc_sw128(aV + 32 * kk), hp_desc_sw128(sdO + 32 * kk), kk > 0);
            hp_wgmma_commit();
            awg_turn_pass(c);
            hp_wgmma_wait<0>();
            awg_fence_acc(st);
            awg_fence_acc(dpt);
            // P^T and dS^T: row = key (kr0 for e < 2, kr1 else), col = query q0 + 8 jn + 2 qd + (e & 1)
            const bool mask = q0 < kc0 + 63;
            uint32_t pa[BQ / 16][4], da[BQ / 16][4];
#pragma unroll
            for (int jn = 0; jn < BQ / 8; jn++) {
                const float2 l2 = *reinterpret_cast<const float2 *>(L + 8 * jn + 2 * qd);
                const float2 d2 = *reinterpret_cast<const float2 *>(D + 8 * jn + 2 * qd);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = 4 * jn + e;
                    float p = tc_exp2(fmaf(st[i], scale_log2, -((e & 1) ? l2.y : l2.x)));
                    if (mask && q0 + 8 * jn + 2 * qd + (e & 1) < (e < 2 ? kr0 : kr1)) p = 0.0f;
                    st[i] = p;
                    dpt[i] = p * (dpt[i] - ((e & 1) ? d2.y : d2.x));
                }
            }
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++)
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    pa[kk][i] = tc_pack_bf16x2(st[8 * kk + 2 * i], st[8 * kk + 2 * i + 1]);
                    da[kk][i] = tc_pack_bf16x2(dpt[8 * kk + 2 * i], dpt[8 * kk + 2 * i + 1]);
                }
            awg_turn_wait(c);
            awg_fence_acc(dva);
            awg_fence_acc(dka);
            hp_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++)
                awg_wgmma_m64n64k16_rs(dva, pa[kk], hp_desc_sw128(sdO + 2048 * kk, 1024));
#pragma unroll
            for (int kk = 0; kk < BQ / 16; kk++)
                awg_wgmma_m64n64k16_rs(dka, da[kk], hp_desc_sw128(sQ + 2048 * kk, 1024));
            hp_wgmma_commit();
            if (!last) awg_turn_pass(c);
            hp_wgmma_wait<0>();
            awg_fence_acc(dva);
            awg_fence_acc(dka);
        } else {  // the same two turns, empty
            awg_turn_wait(c);
            awg_turn_pass(c);
            awg_turn_wait(c);
            if (!last) awg_turn_pass(c);
        }
        hp_mbar_arrive(bars + 8 * (1 + AWG_BWD_STAGES + s));
    }
    const size_t kvs = (size_t)KVH * AWG_HD;
#pragma unroll
    for (int jn = 0; jn < AWG_HD / 8; jn++) {
        const size_t col = (size_t)kvh * AWG_HD + jn * 8 + 2 * qd;
        if (kr0 < T) {
            const size_t o = ((size_t)b * T + kr0) * kvs + col;
            *reinterpret_cast<uint32_t *>(dk + o) = tc_pack_bf16x2(dka[4 * jn + 0] * scale, dka[4 * jn + 1] * scale);
            *reinterpret_cast<uint32_t *>(dv + o) = tc_pack_bf16x2(dva[4 * jn + 0], dva[4 * jn + 1]);
        }
        if (kr1 < T) {
            const size_t o = ((size_t)b * T + kr1) * kvs + col;
            *reinterpret_cast<uint32_t *>(dk + o) = tc_pack_bf16x2(dka[4 * jn + 2] * scale, dka[4 * jn + 3] * scale);
            *reinterpret_cast<uint32_t *>(dv + o) = tc_pack_bf16x2(dva[4 * jn + 2], dva[4 * jn + 3]);
        }
    }
}

// 128-key blocks: m64n128 S and dP tiles; setmaxnreg 24 / 240 gives the consumers the registers for them.
static __global__ void __launch_bounds__(AWG_THREADS, 1)
attn_wgmma_bwd_dq_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmdO,
                         const __grid_constant__ CUtensorMap tmK, const __grid_constant__ CUtensorMap tmV,
                         bf16 *__restrict__ dq, const float *__restrict__ lse, const float *__restrict__ dsum, int T,
                         int H, int KVH, float scale, float scale_log2) {
    extern __shared__ __align__(16) unsigned char awg_smem[];
    const uint32_t base = (hp_smem_addr(awg_smem) + 1023u) & ~1023u;
    const uint32_t sQ = base, sdO = sQ + AWG_TILE_BYTES, sK0 = sdO + AWG_TILE_BYTES;
    constexpr int KB = AWG_BN;
    constexpr uint32_t KT = AWG_TILE_BYTES;  // a K or V tile
    const uint32_t sV0 = sK0 + AWG_BWD_STAGES * KT;
    const uint32_t bars = sV0 + AWG_BWD_STAGES * KT;  // q_full, full[S], empty[S]
    int rank, h, b;
    awg_bwd_block(rank, h, b);
    const int mb = gridDim.x - 1 - rank;  // the latest query block (the most key blocks) is the heaviest
    const int kvh = h / (H / KVH), q0 = mb * AWG_BM;
    const int nkb = min((q0 + AWG_BM) / KB, CEIL_DIV(T, KB));  // key blocks up to the diagonal
    const int wg = threadIdx.x >> 7;
    const uint32_t q_full = bars;
    if (threadIdx.x == 0) {
        hp_mbar_init(q_full, 1);
        for (int s = 0; s < AWG_BWD_STAGES; s++) {
            hp_mbar_init(bars + 8 * (1 + s), 1);
            hp_mbar_init(bars + 8 * (1 + AWG_BWD_STAGES + s), 256);
        }
        hp_fence_barrier_init();
    }
    __syncthreads();
    if (wg == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 24;\n" ::: "memory");
        if (threadIdx.x != 0) return;
        hp_mbar_arrive_expect_tx(q_full, 2 * AWG_TILE_BYTES);
        hp_tma_load_2d(sQ, &tmQ, q_full, h * AWG_HD, b * T + q0);
        hp_tma_load_2d(sdO, &tmdO, q_full, h * AWG_HD, b * T + q0);
        for (int j = 0; j < nkb; j++) {
            const int s = j % AWG_BWD_STAGES;
            const uint32_t ph = (uint32_t)(j / AWG_BWD_STAGES) & 1u, full = bars + 8 * (1 + s);
            hp_mbar_wait(bars + 8 * (1 + AWG_BWD_STAGES + s), ph ^ 1u, AWG_TIMEOUT_NS);
            hp_mbar_arrive_expect_tx(full, 2 * KT);
            hp_tma_load_2d(sK0 + s * KT, &tmK, full, kvh * AWG_HD, b * T + KB * j);
            hp_tma_load_2d(sV0 + s * KT, &tmV, full, kvh * AWG_HD, b * T + KB * j);
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 240;\n" ::: "memory");
    // consumer c: rows r0 = q0 + 64 c + 16 warp + lane / 4 and r0 + 8
    const int c = wg - 1, t = threadIdx.x & 127, warp = t >> 5, lane = t & 31, qd = lane & 3;
    const int rc0 = q0 + 64 * c, r0 = rc0 + 16 * warp + (lane >> 2), r1 = r0 + 8;
    const uint32_t aQ = sQ + c * AWG_HALF_TILE_BYTES, adO = sdO + c * AWG_HALF_TILE_BYTES;
    float Lr[2], Dr[2];
#pragma unroll
    for (int i = 0; i < 2; i++) {
        const int row = i ? r1 : r0;
        const size_t idx = ((size_t)b * H + h) * T + row;
        Lr[i] = row < T ? lse[idx] * 1.4426950408889634f : INFINITY;
        Dr[i] = row < T ? dsum[idx] : 0.0f;
    }
    float dqa[32];
#pragma unroll
    for (int i = 0; i < 32; i++) dqa[i] = 0.0f;
    hp_mbar_wait(q_full, 0, AWG_TIMEOUT_NS);
    for (int j = 0; j < nkb; j++) {
        const int s = j % AWG_BWD_STAGES, kb0 = KB * j;
        const uint32_t ph = (uint32_t)(j / AWG_BWD_STAGES) & 1u;
        hp_mbar_wait(bars + 8 * (1 + s), ph, AWG_TIMEOUT_NS);
        if (kb0 <= rc0 + 63) {  // else every key of the block is after every row of this warpgroup
            const uint32_t sK = sK0 + s * KT, sV = sV0 + s * KT;
            float sc[KB / 2], dp[KB / 2];
            awg_fence_acc(sc);
            awg_fence_acc(dp);
            hp_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < AWG_HD / 16; kk++)
                awg_wgmma_m64n128k16_ss(sc, hp_desc_sw128(aQ + 32 * kk), hp_desc_sw128(sK + 32 * kk), kk > 0);
#pragma unroll
            for (int kk = 0; kk < AWG_HD / 16; kk++)
                awg_wgmma_m64n128k16_ss(dp, hp_desc_sw128(adO + 32 * kk), hp_desc_sw128(sV + 32 * kk), kk > 0);
            hp_wgmma_commit();
            hp_wgmma_wait<0>();
            awg_fence_acc(sc);
            awg_fence_acc(dp);
            const bool mask = kb0 + KB - 1 > rc0;
            uint32_t da[KB / 16][4];
#pragma unroll
            for (int jn = 0; jn < KB / 8; jn++)
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const int i = 4 * jn + e, hi = e >> 1;
                    float p = tc_exp2(fmaf(sc[i], scale_log2, -Lr[hi]));
                    if (mask && kb0 + 8 * jn + 2 * qd + (e & 1) > (hi ? r1 : r0)) p = 0.0f;
                    sc[i] = p * (dp[i] - Dr[hi]);
                }
#pragma unroll
            for (int kk = 0; kk < KB / 16; kk++)
#pragma unroll
                for (int i = 0; i < 4; i++) da[kk][i] = tc_pack_bf16x2(sc[8 * kk + 2 * i], sc[8 * kk + 2 * i + 1]);
            awg_fence_acc(dqa);
            hp_wgmma_fence();
#pragma unroll
            for (int kk = 0; kk < KB / 16; kk++)
                awg_wgmma_m64n64k16_rs(dqa, da[kk], hp_desc_sw128(sK + 2048 * kk, 1024));
            hp_wgmma_commit();
            hp_wgmma_wait<0>();
            awg_fence_acc(dqa);
        }
        hp_mbar_arrive(bars + 8 * (1 + AWG_BWD_STAGES + s));
    }
    const size_t qs = (size_t)H * AWG_HD;
#pragma unroll
    for (int jn = 0; jn < AWG_HD / 8; jn++) {
        const int col = h * AWG_HD + jn * 8 + 2 * qd;
        if (r0 < T)
            *reinterpret_cast<uint32_t *>(dq + ((size_t)b * T + r0) * qs + col) =
                tc_pack_bf16x2(dqa[4 * jn + 0] * scale, dqa[4 * jn + 1] * scale);
        if (r1 < T)
            *reinterpret_cast<uint32_t *>(dq + ((size_t)b * T + r1) * qs + col) =
                tc_pack_bf16x2(dqa[4 * jn + 2] * scale, dqa[4 * jn + 3] * scale);
    }
}

// 2-D bf16 [rows, cols] row-major tensor map, box 64 (cols) x box_rows, 128-byte swizzle, zero fill past the end.
static inline int awg_make_map(HpEncodeTiledFn enc, CUtensorMap *map, const bf16 *ptr, long long rows, int cols,
                               const char *what, int box_rows = 128) {
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)cols * sizeof(bf16)};
    const cuuint32_t box[2] = {AWG_HD, (cuuint32_t)box_rows};
    const cuuint32_t estr[2] = {1, 1};
    const CUresult r = enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)ptr, dims, strides, box, estr,
                           CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                           CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                           CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "error: attention (wgmma): cuTensorMapEncodeTiled(%s [%lld, %d]) failed: CUresult %d\n", what,
                rows, cols, (int)r);
        return 1;
    }
    return 0;
}

// Can this GPU and shape take the wgmma forward? (sm_90, head dim 64, 16-byte aligned rows and pointers)
static inline int attention_wgmma_supported(int hd) {
    if (hd != AWG_HD) return 0;
    int dev = 0, major = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    return major == 9;
}

// Calls of attention_forward_wgmma that could not launch (message printed; the caller falls back to the mma.sync
// kernel). Tests assert it stays 0 on an sm_90 GPU, so a fallback cannot pass for the wgmma kernel.
static int g_attn_wgmma_fallbacks = 0;
static long long g_attn_wgmma_launches = 0;  // launches of attn_wgmma_fwd_kernel (tests: the kernel really ran)

// The forward on the wgmma kernel; kc, vc (may be NULL): also the KV cache [B, S, KVH * 64] at positions 0 .. T-1.
// Returns 0, or 1 when it cannot run here (message printed, g_attn_wgmma_fallbacks counted; nothing launched).
static inline int attention_forward_wgmma(bf16 *out, float *lse, const bf16 *q, const bf16 *k, const bf16 *v, int B,
                                          int T, int H, int KVH, cudaStream_t stream, bf16 *kc = NULL, bf16 *vc = NULL,
                                          int S = 0) {
    HpEncodeTiledFn enc = hp_encode_fn();
    CUtensorMap mq, mk, mv;
    const long long N = (long long)B * T;
    if (!enc || awg_make_map(enc, &mq, q, N, H * AWG_HD, "q", AWG_FWD_BM) ||
        awg_make_map(enc, &mk, k, N, KVH * AWG_HD, "k") ||
        awg_make_map(enc, &mv, v, N, KVH * AWG_HD, "v")) {
        g_attn_wgmma_fallbacks++;
        return 1;
    }
    static int smem_set = 0;
    if (!smem_set) {
        cudaCheck(cudaFuncSetAttribute(attn_wgmma_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       AWG_SMEM_BYTES));
        smem_set = 1;
    }
    const int sms = cuda_sm_count();  // one CTA per SM (at most one per tile)
    const long long tiles = (long long)CEIL_DIV(T, AWG_FWD_BM) * H * B;
    const dim3 grid((unsigned)(tiles < sms ? tiles : sms));
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)AWG_HD);
    attn_wgmma_fwd_kernel<<<grid, AWG_FWD_THREADS, AWG_SMEM_BYTES, stream>>>(mq, mk, mv, out, lse, T, H, KVH,
                                                                              scale_log2, kc, vc, S, B);
    cudaCheckLaunch();
    g_attn_wgmma_launches++;
    return 0;
}

// The backward on the wgmma kernels, after attn_bwd_preprocess wrote dsum = D [B, H, T]: dq [B, T, H, 64],
// dk, dv [B, T, KVH, 64] (bf16, every element written). Returns 0, or 1 when it cannot run here (message printed,
// g_attn_wgmma_fallbacks counted; nothing launched).
static inline int attention_backward_wgmma(bf16 *dq, bf16 *dk, bf16 *dv, const bf16 *dout, const float *lse,
                                           const float *dsum, const bf16 *q, const bf16 *k, const bf16 *v, int B,
                                           int T, int H, int KVH, cudaStream_t stream) {
    HpEncodeTiledFn enc = hp_encode_fn();
    CUtensorMap mk128, mv128, mq128, mdo128;
    const long long N = (long long)B * T;
    const int qc = H * AWG_HD, kc = KVH * AWG_HD;
    if (!enc || awg_make_map(enc, &mk128, k, N, kc, "k", 128) || awg_make_map(enc, &mv128, v, N, kc, "v", 128) ||
        awg_make_map(enc, &mq128, q, N, qc, "q", 128) || awg_make_map(enc, &mdo128, dout, N, qc, "dout", 128)) {
        g_attn_wgmma_fallbacks++;
        return 1;
    }
    static int smem_set = 0;
    if (!smem_set) {
        cudaCheck(cudaFuncSetAttribute(attn_wgmma_bwd_dkdv_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       AWG_DKDV_SMEM_BYTES));
        cudaCheck(cudaFuncSetAttribute(attn_wgmma_bwd_dq_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       AWG_DQ_SMEM_BYTES));
        smem_set = 1;
    }
    const float scale = 1.0f / sqrtf((float)AWG_HD), scale_log2 = scale * 1.4426950408889634f;
    const dim3 gkv((unsigned)CEIL_DIV(T, AWG_BN), (unsigned)KVH, (unsigned)B);
    attn_wgmma_bwd_dkdv_kernel<<<gkv, AWG_THREADS, AWG_DKDV_SMEM_BYTES, stream>>>(
        mq128, mdo128, mk128, mv128, dk, dv, lse, dsum, T, H, KVH, scale, scale_log2);
    cudaCheckLaunch();
    const dim3 gq((unsigned)CEIL_DIV(T, AWG_BM), (unsigned)H, (unsigned)B);
    attn_wgmma_bwd_dq_kernel<<<gq, AWG_THREADS, AWG_DQ_SMEM_BYTES, stream>>>(mq128, mdo128, mk128, mv128, dq, lse, dsum,
                                                                            T, H, KVH, scale, scale_log2);
    cudaCheckLaunch();
    g_attn_wgmma_launches += 2;
    return 0;
}

#endif  // SLLM_ATTENTION_WGMMA_CUH
