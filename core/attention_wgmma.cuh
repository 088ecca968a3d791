// core/attention_wgmma.cuh: causal flash-attention FORWARD on Hopper (sm_90a): TMA loads, wgmma for both products,
// a producer warpgroup and two consumer warpgroups. Head dim 64 only; the other shapes (and the backward) stay on
// core/attention.cuh's mma.sync kernels. Same inputs, outputs and numerics contract as attn_fwd_kernel:
//   q [B, T, H, 64], k, v [B, T, KVH, 64] (bf16, rows of the projections), out [B, T, H, 64] bf16,
//   lse [B, H, T] fp32 (natural log of the softmax's denominator over the scaled scores).
//
// CTA: 128 query rows of one (batch, head), 384 threads.
//   warpgroup 0 (producer; one thread issues): TMA of the Q tile (128 x 64, 128-byte swizzle) once, then the K and V
//     tiles (128 keys x 64) of key blocks 0 .. the diagonal into a ring of AWG_STAGES stages (mbarriers: full / empty).
//   warpgroups 1, 2 (consumers, 64 query rows each): per key block, S = Q K^T by 4 wgmma m64n128k16 (A = the WG's
//     Q rows, B = K: both K-major), the causal mask on the diagonal block, the online softmax in registers (the exp2
//     domain, attn_fwd_kernel's order of operations), P rounded to bf16 in the accumulator layout as the A registers
//     of 8 wgmma m64n64k16 with V (MN-major: imm-trans-b) into the fp32 O accumulators. Then the stage is released.
//   The epilogue normalizes O, writes the rows < T and their lse.
//   kc != NULL (the inference prefill): the keys and values of the diagonal block (keys q0 .. q0 + 127: each key in
//   exactly one query block's diagonal) also go from shared memory (un-swizzled) into a KV cache kc, vc
//   [B, S, KVH * 64] at their positions, written by consumer 0 of the first query head of the group.
// Rows of a key tile past the batch's T (the next batch's, or zero-filled past the tensor) are masked by causality
// (key > query for every query row < T); query rows past T are computed but not written.
#ifndef SLLM_ATTENTION_WGMMA_CUH
#define SLLM_ATTENTION_WGMMA_CUH

#include <stdint.h>

#include "cuda_common.cuh"
#include "hopper.cuh"
#include "tc_utils.cuh"  // tc_exp2, tc_pack_bf16x2

#define AWG_HD 64
#define AWG_BM 128                            // query rows per CTA (2 consumer warpgroups x 64)
#define AWG_BN 128                            // keys per block
#define AWG_STAGES 2
#define AWG_THREADS 384
#define AWG_TILE_BYTES (128 * AWG_HD * 2)     // 16384: the Q tile, and each K or V stage
#define AWG_SMEM_BYTES ((1 + 2 * AWG_STAGES) * AWG_TILE_BYTES + 8 * (1 + 3 * AWG_STAGES) + 1024)
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

// grid (ceil(T / 128), H, B), AWG_THREADS threads, AWG_SMEM_BYTES of dynamic shared memory.
static __global__ void __launch_bounds__(AWG_THREADS, 1)
attn_wgmma_fwd_kernel(const __grid_constant__ CUtensorMap tmQ, const __grid_constant__ CUtensorMap tmK,
                      const __grid_constant__ CUtensorMap tmV, bf16 *__restrict__ out, float *__restrict__ lse, int T,
                      int H, int KVH, float scale_log2, bf16 *__restrict__ kc, bf16 *__restrict__ vc, int S) {
    extern __shared__ __align__(16) unsigned char awg_smem[];
    const uint32_t base = (hp_smem_addr(awg_smem) + 1023u) & ~1023u;  // the 128-byte swizzle atom's alignment
    const uint32_t sQ = base, sK0 = base + AWG_TILE_BYTES, sV0 = sK0 + AWG_STAGES * AWG_TILE_BYTES;
    const uint32_t bars = sV0 + AWG_STAGES * AWG_TILE_BYTES;  // q_full, k_full[S], v_full[S], kv_empty[S]
    const uint32_t q_full = bars;
    const int mb = gridDim.x - 1 - blockIdx.x;  // the heaviest (latest) query blocks first
    const int h = blockIdx.y, b = blockIdx.z, kvh = h / (H / KVH), q0 = mb * AWG_BM, nkb = mb + 1;
    const int wg = threadIdx.x >> 7;
    if (threadIdx.x == 0) {
        hp_mbar_init(q_full, 1);
        for (int s = 0; s < AWG_STAGES; s++) {
            hp_mbar_init(bars + 8 * (1 + s), 1);                   // k_full[s]
            hp_mbar_init(bars + 8 * (1 + AWG_STAGES + s), 1);      // v_full[s]
            hp_mbar_init(bars + 8 * (1 + 2 * AWG_STAGES + s), 256);  // kv_empty[s]: every consumer thread arrives
        }
        hp_fence_barrier_init();
    }
    __syncthreads();
    if (wg == 0) {  // producer
        if (threadIdx.x != 0) return;
        hp_mbar_arrive_expect_tx(q_full, AWG_TILE_BYTES);
        hp_tma_load_2d(sQ, &tmQ, q_full, h * AWG_HD, b * T + q0);
        for (int j = 0; j < nkb; j++) {
            const int s = j % AWG_STAGES;
            const uint32_t ph = (uint32_t)(j / AWG_STAGES) & 1u;
            const uint32_t k_full = bars + 8 * (1 + s), v_full = bars + 8 * (1 + AWG_STAGES + s);
            hp_mbar_wait(bars + 8 * (1 + 2 * AWG_STAGES + s), ph ^ 1u, AWG_TIMEOUT_NS);  // the stage's last use is done
            hp_mbar_arrive_expect_tx(k_full, AWG_TILE_BYTES);
            hp_tma_load_2d(sK0 + s * AWG_TILE_BYTES, &tmK, k_full, kvh * AWG_HD, b * T + j * AWG_BN);
            hp_mbar_arrive_expect_tx(v_full, AWG_TILE_BYTES);
            hp_tma_load_2d(sV0 + s * AWG_TILE_BYTES, &tmV, v_full, kvh * AWG_HD, b * T + j * AWG_BN);
        }
        return;
    }
    // consumer c: query rows q0 + 64 c .. + 63; this thread's rows r0 = .. + 16 warp + lane / 4 and r0 + 8
    const int c = wg - 1, t = threadIdx.x & 127, warp = t >> 5, lane = t & 31, qd = lane & 3;
    const int r0 = q0 + 64 * c + 16 * warp + (lane >> 2), r1 = r0 + 8;
    const uint32_t aQ = sQ + c * (64 * 128);  // this warpgroup's 64 Q rows (1024-aligned)
    float o[32], m[2] = {-INFINITY, -INFINITY}, l[2] = {0.0f, 0.0f};
#pragma unroll
    for (int i = 0; i < 32; i++) o[i] = 0.0f;
    hp_mbar_wait(q_full, 0, AWG_TIMEOUT_NS);
    for (int j = 0; j < nkb; j++) {
        const int s = j % AWG_STAGES;
        const uint32_t ph = (uint32_t)(j / AWG_STAGES) & 1u;
        const uint32_t sK = sK0 + s * AWG_TILE_BYTES, sV = sV0 + s * AWG_TILE_BYTES;
        hp_mbar_wait(bars + 8 * (1 + s), ph, AWG_TIMEOUT_NS);
        if (kc && j == nkb - 1 && c == 0 && h % (H / KVH) == 0) {  // the diagonal keys and values into the cache
            hp_mbar_wait(bars + 8 * (1 + AWG_STAGES + s), ph, AWG_TIMEOUT_NS);
            const size_t kvs = (size_t)KVH * AWG_HD;
            // (row, 16-byte chunk) pairs; the 128-byte swizzle stores chunk ch of row r at ch ^ (r % 8)
            for (int i = t; i < AWG_BN * 8; i += 128) {
                const int r = i >> 3, ch = i & 7, row = q0 + r;
                if (row >= T) continue;
                const uint32_t off = (uint32_t)(r * 128 + ((ch ^ (r & 7)) << 4));
                const size_t o = ((size_t)b * S + row) * kvs + (size_t)kvh * AWG_HD + 8 * ch;
                *reinterpret_cast<uint4 *>(kc + o) = awg_lds16(sK + off);
                *reinterpret_cast<uint4 *>(vc + o) = awg_lds16(sV + off);
            }
        }
        float sc[64];
        awg_fence_acc(sc);
        hp_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < AWG_HD / 16; kk++)
            awg_wgmma_m64n128k16_ss(sc, hp_desc_sw128(aQ + 32 * kk), hp_desc_sw128(sK + 32 * kk), kk > 0 ? 1 : 0);
        hp_wgmma_commit();
        hp_wgmma_wait<0>();
        awg_fence_acc(sc);
        const int k0 = j * AWG_BN;
        if (j == nkb - 1) {  // the diagonal block: raw scores of keys after the row -> -inf
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
        float alpha[2], mref[2];
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
#pragma unroll
        for (int jn = 0; jn < AWG_HD / 8; jn++) {
            o[jn * 4 + 0] *= alpha[0];
            o[jn * 4 + 1] *= alpha[0];
            o[jn * 4 + 2] *= alpha[1];
            o[jn * 4 + 3] *= alpha[1];
        }
        // O += P V: key step kk takes the scores' n8 blocks 2 kk and 2 kk + 1 as its A registers. All of P is packed
        // before the fence: a register that a wgmma reads must be written before the wgmma.fence that precedes it.
        uint32_t pa[AWG_BN / 16][4];
#pragma unroll
        for (int kk = 0; kk < AWG_BN / 16; kk++)
#pragma unroll
            for (int i = 0; i < 4; i++) pa[kk][i] = tc_pack_bf16x2(sc[8 * kk + 2 * i], sc[8 * kk + 2 * i + 1]);
        hp_mbar_wait(bars + 8 * (1 + AWG_STAGES + s), ph, AWG_TIMEOUT_NS);
        awg_fence_acc(o);
        hp_wgmma_fence();
#pragma unroll
        for (int kk = 0; kk < AWG_BN / 16; kk++)
            awg_wgmma_m64n64k16_rs(o, pa[kk], hp_desc_sw128(sV + 16 * 128 * kk, 1024));
        hp_wgmma_commit();
        hp_wgmma_wait<0>();
        awg_fence_acc(o);
        hp_mbar_arrive(bars + 8 * (1 + 2 * AWG_STAGES + s));  // this thread is done with the stage
    }
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

// 2-D bf16 [rows, cols] row-major tensor map, box 64 (cols) x 128 (rows), 128-byte swizzle, zero fill past the end.
static inline int awg_make_map(HpEncodeTiledFn enc, CUtensorMap *map, const bf16 *ptr, long long rows, int cols,
                               const char *what) {
    const cuuint64_t dims[2] = {(cuuint64_t)cols, (cuuint64_t)rows};
    const cuuint64_t strides[1] = {(cuuint64_t)cols * sizeof(bf16)};
    const cuuint32_t box[2] = {AWG_HD, 128};
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
    if (!enc || awg_make_map(enc, &mq, q, N, H * AWG_HD, "q") || awg_make_map(enc, &mk, k, N, KVH * AWG_HD, "k") ||
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
    const dim3 grid((unsigned)CEIL_DIV(T, AWG_BM), (unsigned)H, (unsigned)B);
    const float scale_log2 = 1.4426950408889634f / sqrtf((float)AWG_HD);
    attn_wgmma_fwd_kernel<<<grid, AWG_THREADS, AWG_SMEM_BYTES, stream>>>(mq, mk, mv, out, lse, T, H, KVH, scale_log2,
                                                                          kc, vc, S);
    cudaCheckLaunch();
    g_attn_wgmma_launches++;
    return 0;
}

#endif  // SLLM_ATTENTION_WGMMA_CUH
