// twell/gate_wgmma.cuh: Hopper (sm_90a) gate kernel with the TwELL pack fused into its epilogue:
//   tw = TwELL(relu(X Wg^T)), no dense gate matrix in memory (TWELL_GATE_WGMMA of twell/gate.cuh, the default gate
//   on Hopper).
//
//   X  [M, D] bf16 row-major, Wg [F, D] bf16 row-major (nn.Linear weight: K-major, like X), out tw uint32
//   [M, F/C] (twell/format.h), ovf_flag [M] (zero on entry), ovf_list [M], counters (zero on entry): the
//   same contract as twell_pack_kernel in twell/gate.cuh, and the same bits (test: bit for bit vs the CPU
//   packer). Shapes: D % 64 == 0, F % 256 == 0, M >= 1 (any M: TMA zero-fills rows >= M, never written).
//
// Structure (the paper's matmul_d2t, twell_spec.md section 2):
//   persistent grid of clusters of CL CTAs (CL = 1 or 2), one CTA per SM (clusters = min(the clusters that fit at
//   once, tile groups)); tile = 128 tokens x 256 units = exactly one TwELL tile of each of 128 rows. The CL CTAs of
//   a cluster take the tiles of one group, the same 256 units of token blocks CL i .. CL i + CL - 1. With CL = 2 they
//   share their Wg tile: each CTA loads one half of it (128 rows) by TMA multicast into the shared memory of both,
//   so a stage costs 32 KB of L2 reads per CTA instead of 48. Which CL is faster depends on the GPU
//   (twg_default_cluster): on an H100 the CL = 1 kernel needs ~8.6 TB/s from L2 at full tensor-core rate, about what
//   its L2 delivers, and CL = 2 is ~10% faster (0.97x cuBLASLt against 1.06x); on an H200 CL = 1 is ~3% faster (its
//   main loop is bound by the tensor cores there). Static round-robin over groups: cluster k of G takes P = k, k + G,
//   ...; P -> (token block group P / (F/256), unit tile P % (F/256)): the concurrent tiles share a few X row blocks
//   and sweep all of Wg, which stays in L2 (23 MB at F 5632, D 2048). A token block past M (an odd number of
//   blocks) is zero-filled by TMA and writes nothing; its CTA still loads and multicasts its Wg half.
//   384 threads = 3 warpgroups. WG 0 = producer: setmaxnreg.dec to 40, thread 0 issues the TMA loads.
//   WG 1, 2 = consumers: setmaxnreg.inc to 232; consumer c computes rows 64c..64c+63 of the tile with
//   wgmma m64n256k16 (4 per 64-wide k step), 128 fp32 accumulators per thread, then packs them.
//   Shared memory ring of TWG_STAGES stages, one stage = A tile 128x64 bf16 (16 KB, one TMA) + B tile 256x64
//   (32 KB: one TMA, or with CL = 2 two 128-row halves, one multicast by each CTA of the cluster), 128-byte swizzle;
//   full[s] (count 1: the own producer's arrive.expect_tx of all 48 KB) and empty[s] (count 2 CL: one arrive per
//   consumer WG of each CTA whose producer writes into this stage) mbarriers. With CL = 2, a cluster barrier after
//   the barrier inits and another before exit: no CTA is written to before its barriers exist or after it left.
//
// Accumulator layout (per consumer thread; wgmma m64nNk16 fp32 accumulator fragment, PTX ISA "wgmma 64xNx16 D"):
//   warp w (0..3 in the WG), lane l, q = l % 4: d[4j + 2h + e] is row 16w + l/4 + 8h, column 8j + 2q + e
//   (j = 0..31, h, e in {0, 1}). So a row's 256 columns live in the 4 lanes of a quad, 64 each.
//   A value is active iff its bf16 rounding (RNE, = __float2bfloat16_rn) is > 0 (bits in [0x0001, 0x7f80]:
//   +denormals..+inf, no -0 / NaN). The epilogue is described above twg_fe_stash below.
//
// Hang guard: every mbarrier wait polls %globaltimer and fails the launch (cudaErrorIllegalAddress, no silent
// hang) after TWELL_WGMMA_TIMEOUT_NS (test/gpu/test_hang_guard.cu). Tests also poll the stream with a host timeout.
#ifndef SLLM_TWELL_GATE_WGMMA_CUH
#define SLLM_TWELL_GATE_WGMMA_CUH

#include <string.h>  // strstr

#include <algorithm>
#include <cuda.h>  // CUtensorMap, cuTensorMapEncodeTiled's types (the function comes from the runtime's entry point)

#include "cuda_common.cuh"
#include "hopper.cuh"
#include "twell/format.h"
#include "twell/gate.cuh"  // TwellCounters, the variant enum

#ifndef TWELL_WGMMA_TIMEOUT_NS
#define TWELL_WGMMA_TIMEOUT_NS 4000000000ull  // 4 s: no legal wait in this kernel comes close
#endif

#define TWG_BM 128                               // tokens per tile (2 consumer WGs x 64 rows)
#define TWG_BN 256                               // units per tile = TWELL_TILE
#define TWG_BK 64                                // k per stage: 64 bf16 = 128 B = one 128B-swizzle row
#define TWG_STAGES 4                             // ring depth
#define TWG_THREADS 384                          // 3 warpgroups
#define TWG_A_BYTES (TWG_BM * TWG_BK * 2)        // 16384
#define TWG_B_BYTES (TWG_BN * TWG_BK * 2)        // 32768
#define TWG_STAGE_BYTES (TWG_A_BYTES + TWG_B_BYTES)  // 49152, a multiple of 1024 (swizzle atom alignment)
// dynamic smem: stages + barriers (2 x STAGES x 8 B) + 1024 B of slack to align the base to 1024
#define TWG_SMEM_BYTES (TWG_STAGES * TWG_STAGE_BYTES + 2 * TWG_STAGES * 8 + 1024)

static_assert(TWELL_TILE == TWG_BN, "the wgmma gate tile width must equal the TwELL tile");
static_assert(TWG_STAGE_BYTES % 1024 == 0, "stages must keep 1024-byte alignment (128B swizzle atom)");

// The generic Hopper helpers (mbarriers, TMA, wgmma descriptors and fences) are core/hopper.cuh's.
// The mbarrier wait with this kernel's watchdog:
__device__ __forceinline__ void twg_mbar_wait(uint32_t bar, uint32_t parity) {
    hp_mbar_wait(bar, parity, TWELL_WGMMA_TIMEOUT_NS);
}
// Keeps the compiler from moving accumulator reads/writes across the async wgmma (CUTLASS's
// warpgroup_fence_operand).
__device__ __forceinline__ void twg_fence_acc(float (&d)[128]) {
#pragma unroll
    for (int i = 0; i < 128; i++) asm volatile("" : "+f"(d[i])::"memory");
}

// One wgmma.mma_async m64n256k16 (bf16 x bf16 -> fp32), A and B K-major from shared memory through the
// descriptors da, db. scale_d = 0: D = A*B (first k step of a tile), 1: D += A*B. The 128 accumulator
// registers are "+f" operands %0..%127; da %128, db %129, scale_d %130. Generated (128 operands).
__device__ __forceinline__ void twg_wgmma_m64n256k16(float (&d)[128], uint64_t da, uint64_t db, int scale_d) {
    asm volatile(
        "{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
        "wgmma.mma_async.sync.aligned.m64n256k16.f32.bf16.bf16 {"
        "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
        "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
        "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
        "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
        "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
        "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, "
        "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, "
        "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127"
        "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
        : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
          "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
          "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
          "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
          "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
          "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
          "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
          "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
          "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
          "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
          "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87]),
          "+f"(d[88]), "+f"(d[89]), "+f"(d[90]), "+f"(d[91]), "+f"(d[92]), "+f"(d[93]), "+f"(d[94]), "+f"(d[95]),
          "+f"(d[96]), "+f"(d[97]), "+f"(d[98]), "+f"(d[99]), "+f"(d[100]), "+f"(d[101]), "+f"(d[102]), "+f"(d[103]),
          "+f"(d[104]), "+f"(d[105]), "+f"(d[106]), "+f"(d[107]), "+f"(d[108]), "+f"(d[109]), "+f"(d[110]), "+f"(d[111]),
          "+f"(d[112]), "+f"(d[113]), "+f"(d[114]), "+f"(d[115]), "+f"(d[116]), "+f"(d[117]), "+f"(d[118]), "+f"(d[119]),
          "+f"(d[120]), "+f"(d[121]), "+f"(d[122]), "+f"(d[123]), "+f"(d[124]), "+f"(d[125]), "+f"(d[126]), "+f"(d[127])
        : "l"(da), "l"(db), "r"(scale_d)
        : "memory");
}

// One 64-deep k step of a consumer warpgroup, issued as one wgmma group (4 x m64n256k16, k16 step kk at +32 B inside
// the 128-byte rows): sa = the stage's A rows of this consumer (64 x 128 B), sb = the stage's B tile. first: the
// tile's first k step (scale-d 0 on its first wgmma: D = A*B, the old accumulators ignored).
__device__ __forceinline__ void twg_kstep(float (&d)[128], uint32_t sa, uint32_t sb, bool first) {
    twg_fence_acc(d);
    hp_wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < TWG_BK / 16; kk++)
        twg_wgmma_m64n256k16(d, hp_desc_sw128(sa + 32 * kk), hp_desc_sw128(sb + 32 * kk), (!first || kk > 0) ? 1 : 0);
    hp_wgmma_commit();
    twg_fence_acc(d);
}

// Two fp32 -> bf16 (round to nearest even, like __float2bfloat16_rn and twell_f32_to_bf16), packed:
// bits 0..15 = bf16(lo), bits 16..31 = bf16(hi).
__device__ __forceinline__ uint32_t twg_bf16x2_bits(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t r;
    memcpy(&r, &v, 4);
    return r;
}
// ---------------------------------------------------------------------------------------------------
// The epilogue: per row of 256 columns, the TwELL tile in column order (no atomics: deterministic).
//   - Activity on the bf16x2 words with one set.gt.u32.bf16x2 per 2 values (0xFFFF per half that is > 0:
//     +denormals..+inf, not +-0, negatives or NaN, exactly twg_bf16_pos), masked into two 32-bit words per
//     lane: word h covers j = 16h + jj, bit jj = column 8j + 2q (e = 0), bit 16 + jj = column 8j + 2q + 1.
//   - The quad's 4 x 2 words by shuffles; count = their popcounts.
//   - The row's TwELL tile is first written as zeros + the count (W/4 words per lane, 16-byte stores), then,
//     after __syncwarp (which orders the warp's stores), each lane stores its active values: a loop over the
//     lane's set bits (~0.3 per lane and row at nnz 29), the value read back from a per-thread shared-memory
//     copy of the row's 32 bf16x2 words (registers cannot be indexed at run time), its slot = the active
//     columns before it: sum over quad lanes k of popc(word_k & low(jj + [k < q]) * 0x10001) (+ the whole
//     lower word of every lane when h = 1, + its own e = 0 column when e = 1). The formula was checked on the
//     CPU against the column-order rank (10.6 M actives over 200000 random rows).
// Scratch: 128 B per consumer thread, 16-byte chunk c of thread t at chunk (c ^ (t & 7)) (conflict-free
// 16-byte stores across each quarter warp).
// ---------------------------------------------------------------------------------------------------
#define TWG_FE_SCRATCH_BYTES (256 * 128)                                // 2 consumer WGs x 128 B
#define TWG_FE_SMEM_BYTES (TWG_SMEM_BYTES + 128 + TWG_FE_SCRATCH_BYTES)  // + 128: the scratch aligned to 128
static_assert(TWG_FE_SMEM_BYTES <= 232448, "the wgmma gate needs more than the 227 KB of shared memory per block");

// Consumer thread ct's (0..255) scratch: 128 B each, from the first 128-byte boundary at or after `after` (the
// end of the kernel's barriers).
__device__ __forceinline__ uint32_t twg_fe_scratch(uint32_t after, int ct) {
    return ((after + 127u) & ~127u) + (uint32_t)ct * 128u;
}

// 0xFFFF in each half of the bf16x2 word that is > 0 (set.gt without .ftz: subnormals compare exactly).
__device__ __forceinline__ uint32_t twg_bf16x2_gt0(uint32_t b) {
    uint32_t r;
    asm("set.gt.u32.bf16x2 %0, %1, %2;" : "=r"(r) : "r"(b), "r"(0u));
    return r;
}

// Part 1 of the short epilogue for row H of this thread's pair (rows 16w + l/4 + 8H): the lane's two activity
// words (w0: j < 16, w1: j >= 16) and the row's 32 bf16x2 words to this thread's scratch (their registers die
// here; twg_fe_emit reads the active ones back). The scratch must not hold a row still being emitted.
template <int H>
__device__ __forceinline__ void twg_fe_stash(const uint32_t (&p)[64], uint32_t scratch, int swz, uint32_t &w0,
                                             uint32_t &w1) {
    w0 = 0;
    w1 = 0;
#pragma unroll
    for (int j = 0; j < 16; j++) {
        w0 |= twg_bf16x2_gt0(p[2 * j + H]) & (0x00010001u << j);
        w1 |= twg_bf16x2_gt0(p[2 * (j + 16) + H]) & (0x00010001u << j);
    }
#pragma unroll
    for (int c = 0; c < 8; c++)
        asm volatile("st.shared.v4.u32 [%0], {%1, %2, %3, %4};" ::"r"(scratch + (uint32_t)((c ^ swz) << 4)),
                     "r"(p[2 * (4 * c) + H]), "r"(p[2 * (4 * c + 1) + H]), "r"(p[2 * (4 * c + 2) + H]),
                     "r"(p[2 * (4 * c + 3) + H]));
}

// Part 2: the row's TwELL tile (zeros + count, then the active values from the scratch), its overflow flag and
// non-zeros, from the activity words of twg_fe_stash. Every lane of the warp must call it (shuffles, __syncwarp).
__device__ __forceinline__ void twg_fe_emit(uint32_t w0, uint32_t w1, int row, int M, int q, int lane,
                                            uint32_t scratch, int swz, uint32_t *__restrict__ tile_out, int W, int S,
                                            int *__restrict__ ovf_flag, int *__restrict__ ovf_list,
                                            TwellCounters *__restrict__ counters, unsigned long long &nnz) {
    uint32_t q0[4], q1[4];  // the quad's words, lane k = qbase + k
    const int qbase = lane & ~3;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        q0[k] = __shfl_sync(0xffffffffu, w0, qbase + k);
        q1[k] = __shfl_sync(0xffffffffu, w1, qbase + k);
    }
    int lower = 0, total = 0;  // active columns of the quad with j < 16; the row's true count in this tile
#pragma unroll
    for (int k = 0; k < 4; k++) {
        lower += __popc(q0[k]);
        total += __popc(q1[k]);
    }
    total += lower;
    const bool live = row < M;  // rows >= M (last M tile) write nothing; every lane still reaches the __syncwarp
    if (live) {  // zeros + count: lane q writes words [q W/4, (q + 1) W/4)
        uint4 *o4 = reinterpret_cast<uint4 *>(tile_out) + q * (W / 16);
        for (int i = 0; i < W / 16; i++) o4[i] = make_uint4(i == 0 && q == 0 ? (uint32_t)total : 0u, 0u, 0u, 0u);
        if (q == 0) {
            nnz += (unsigned long long)total;
            if (total > S) twell_flag_overflow(row, ovf_flag, ovf_list, counters);
        }
    }
    __syncwarp();  // orders the zeros before the slots (same addresses, other lanes of the quad)
    uint32_t r0 = live ? w0 : 0u, r1 = live ? w1 : 0u;  // the set bits still to store
    while (r0 | r1) {
        const int hh = r0 ? 0 : 1;
        const uint32_t cur = hh ? r1 : r0;
        const int b = __ffs(cur) - 1, jj = b & 15, e = b >> 4, j = 16 * hh + jj;
        if (hh) r1 &= r1 - 1u; else r0 &= r0 - 1u;
        const uint32_t mlo = ((1u << jj) - 1u) * 0x10001u, mhi = ((2u << jj) - 1u) * 0x10001u;
        int slot = hh ? lower : 0;
#pragma unroll
        for (int k = 0; k < 4; k++) slot += __popc((hh ? q1[k] : q0[k]) & (k < q ? mhi : mlo));
        if (e) slot += (int)(((hh ? w1 : w0) >> jj) & 1u);
        if (slot < S) {
            uint32_t v;
            asm volatile("ld.shared.u32 %0, [%1];"
                         : "=r"(v)
                         : "r"(scratch + (uint32_t)((((j >> 2) ^ swz) << 4) + ((j & 3) << 2))));
            tile_out[1 + slot] = (e ? (v & 0xFFFF0000u) : (v << 16)) | (uint32_t)(8 * j + 2 * q + e);
        }
    }
}

// One deferred part of a tile's epilogue: part 2 emits row 0 (stashed at the tile's end: activity
// words w0a / w1a, values in the scratch), part 1 stashes and emits row 1 from p (rows row0 and row0 + 8, output
// tile out0, rows row_words words apart).
__device__ __forceinline__ void twg_fo_part(int part, const uint32_t (&p)[64], uint32_t w0a, uint32_t w1a, int row0,
                                            int M, int q, int lane, uint32_t scratch, int swz, uint32_t *out0,
                                            int row_words, int W, int S, int *__restrict__ ovf_flag,
                                            int *__restrict__ ovf_list, TwellCounters *__restrict__ counters,
                                            unsigned long long &nnz) {
    if (part == 2) {
        twg_fe_emit(w0a, w1a, row0, M, q, lane, scratch, swz, out0, W, S, ovf_flag, ovf_list, counters, nnz);
    } else {
        uint32_t w0, w1;
        twg_fe_stash<1>(p, scratch, swz, w0, w1);
        twg_fe_emit(w0, w1, row0 + 8, M, q, lane, scratch, swz, out0 + (size_t)8 * row_words, W, S, ovf_flag, ovf_list,
                    counters, nnz);
    }
}

// A consumer warpgroup releases a stage: on its own CTA's empty barrier and, with CL = 2, on the peer's (whose
// producer multicasts into this stage too).
template <int CL>
__device__ __forceinline__ void twg_release(uint32_t bar, uint32_t peer) {
    hp_mbar_arrive(bar);
    if (CL == 2) hp_mbar_arrive_cluster(bar, peer);
}

// The kernel, launched in clusters of CL CTAs (1 or 2). tmX: X [M, D] box 64 x 128 (k x rows); tmW: Wg [F, D] box
// 64 x 256 / CL (the B tile, or its half). words = 256 / C.
// The epilogue is deferred: at a tile's end the consumer only rounds its accumulators to bf16 and stashes row 0 (twg_fe_stash); it emits row 0
// while the next tile's second k step runs on the tensor cores and stashes + emits row 1 under the third, each after
// the previous stage's release (twg_fo_part; the last tile's parts run after the loop). Its row-1 words (32 registers) stay live
// next to the 128 accumulators: the consumers' 232 registers (setmaxnreg) hold both. Same bits.
template <int CL>
static __global__ void __launch_bounds__(TWG_THREADS, 1) twell_gate_wgmma_kernel(const __grid_constant__ CUtensorMap tmX, const __grid_constant__ CUtensorMap tmW, int M, int D,
                        int F, int words, uint32_t *__restrict__ tw, int *__restrict__ ovf_flag,
                        int *__restrict__ ovf_list, TwellCounters *__restrict__ counters) {
    extern __shared__ uint8_t twg_smem_raw[];
    // Stage s: A tile at base + s * STAGE_BYTES (128 rows x 128 B), B tile right after it (256 rows x 128 B).
    // base is rounded up to 1024 B (the 128B-swizzle atom: TMA and wgmma both swizzle on address bits 4..9).
    const uint32_t base = (hp_smem_addr(twg_smem_raw) + 1023u) & ~1023u;
    const uint32_t bar_full = base + TWG_STAGES * TWG_STAGE_BYTES;  // full[s] at bar_full + 8 s
    const uint32_t bar_empty = bar_full + 8 * TWG_STAGES;            // empty[s] at bar_empty + 8 s
    const int num_n = F / TWG_BN, num_m = (M + TWG_BM - 1) / TWG_BM;
    static_assert(CL == 1 || CL == 2, "clusters of 1 or 2 CTAs");
    const int groups = (num_m + CL - 1) / CL * num_n, KT = D / TWG_BK;
    const int wg = threadIdx.x / 128;
    const uint32_t rank = CL == 2 ? hp_cluster_rank() : 0u, peer = rank ^ 1u;
    const int cluster = (int)(blockIdx.x / CL), clusters = (int)(gridDim.x / CL);

    if (threadIdx.x == 0) {
        for (int s = 0; s < TWG_STAGES; s++) {
            hp_mbar_init(bar_full + 8 * s, 1);   // the producer's arrive.expect_tx (+ the TMA bytes of both CTAs)
            hp_mbar_init(bar_empty + 8 * s, 2 * CL);  // one arrive per consumer warpgroup of each CTA of the cluster
        }
        hp_fence_barrier_init();
    }
    if (CL == 2) hp_cluster_sync();  // the peer's barriers exist before anything is multicast to it or arrives on them
    else __syncthreads();

    if (wg == 0) {
        // Producer warpgroup: give registers to the consumers (40 x 128 + 232 x 256 = 64512 <= 65536 and
        // = the 168 x 384 the launch bound gives the CTA, so the consumers' increase always succeeds).
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (threadIdx.x == 0) {
            uint32_t it = 0;  // k iterations issued so far over all tiles: stage it % STAGES, round it / STAGES
            for (int t = cluster; t < groups; t += clusters) {
                const int m0 = (CL * (t / num_n) + (int)rank) * TWG_BM, n0 = (t % num_n) * TWG_BN;
                const int nh = n0 + (int)rank * (TWG_BN / 2);  // CL = 2: this CTA's half of the B tile
                for (int kt = 0; kt < KT; kt++, it++) {
                    const uint32_t s = it % TWG_STAGES, ph = (it / TWG_STAGES) & 1u;
                    // both CTAs' consumers have released stage s (round 0 passes at once: parity 1)
                    twg_mbar_wait(bar_empty + 8 * s, ph ^ 1u);
                    hp_mbar_arrive_expect_tx(bar_full + 8 * s, TWG_STAGE_BYTES);
                    const uint32_t sa = base + s * TWG_STAGE_BYTES;
                    hp_tma_load_2d(sa, &tmX, bar_full + 8 * s, kt * TWG_BK, m0);
                    if (CL == 2)
                        hp_tma_load_2d_mc(sa + TWG_A_BYTES + rank * (TWG_B_BYTES / 2), &tmW, bar_full + 8 * s,
                                           kt * TWG_BK, nh, (uint16_t)0x3u);
                    else
                        hp_tma_load_2d(sa + TWG_A_BYTES, &tmW, bar_full + 8 * s, kt * TWG_BK, n0);
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int c = wg - 1;  // consumer: rows 64c .. 64c + 63 of the tile
        const int tid = threadIdx.x - 128 * wg, warp = tid >> 5, lane = tid & 31, q = lane & 3;
        const int S = words - 1, row_words = (F / TWELL_TILE) * words;
        const uint32_t scratch = twg_fe_scratch(bar_empty + 8 * TWG_STAGES, 128 * c + tid);
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; i++) d[i] = 0.0f;
        unsigned long long nnz = 0;
        // The previous tile's epilogue, deferred into this tile's k steps 1 and 2. pend = its parts still to
        // run (twg_fo_part); p keeps its row-1 words, pw0/pw1 row 0's activity words (row 0's values are in the
        // scratch), prow / pout its first row and output tile.
        uint32_t p[64];
        int pend = 0, prow = 0;
        uint32_t pw0 = 0, pw1 = 0, *pout = tw;
        uint32_t it = 0;
        for (int t = cluster; t < groups; t += clusters) {
            const int m0 = (CL * (t / num_n) + (int)rank) * TWG_BM, tn = t % num_n;
            for (int kt = 0; kt < KT; kt++, it++) {
                const uint32_t s = it % TWG_STAGES, ph = (it / TWG_STAGES) & 1u;
                twg_mbar_wait(bar_full + 8 * s, ph);
                const uint32_t sa = base + s * TWG_STAGE_BYTES + (uint32_t)c * (64 * 128);  // 64 rows x 128 B
                const uint32_t sb = base + s * TWG_STAGE_BYTES + TWG_A_BYTES;
                twg_kstep(d, sa, sb, kt == 0);
                if (kt > 0) {  // the previous k step's group is done: release its stage
                    hp_wgmma_wait<1>();
                    twg_fence_acc(d);
                    if (tid == 0) twg_release<CL>(bar_empty + 8 * ((it - 1) % TWG_STAGES), peer);
                }
                // One part of the previous tile's epilogue while this k step's group runs, after the previous
                // stage's release (k steps 1 and 2, so the producer refills stage 0 without waiting for it)
                if (pend && kt > 0)
                    twg_fo_part(pend--, p, pw0, pw1, prow, M, q, lane, scratch, tid & 7, pout, row_words, words, S,
                                ovf_flag, ovf_list, counters, nnz);
            }
            while (pend)  // KT <= 2: the parts the k steps left
                twg_fo_part(pend--, p, pw0, pw1, prow, M, q, lane, scratch, tid & 7, pout, row_words, words, S,
                            ovf_flag, ovf_list, counters, nnz);
            hp_wgmma_wait<0>();
            twg_fence_acc(d);
            if (tid == 0) twg_release<CL>(bar_empty + 8 * ((it - 1) % TWG_STAGES), peer);
            // Epilogue: rows m0 + 64c + 16 warp + lane/4 (+ 8), tile tn. First every accumulator pair becomes
            // its bf16x2 bits (all the format needs), so the 128 fp32 registers die here: the epilogue then
            // runs in ~64 + temporaries registers (with the fp32 values live it spilled at the 168 registers the
            // old trap left the consumers).
#pragma unroll
            for (int j = 0; j < 32; j++) {
                p[2 * j] = twg_bf16x2_bits(d[4 * j], d[4 * j + 1]);          // row lane/4, cols 8j + 2q (+1)
                p[2 * j + 1] = twg_bf16x2_bits(d[4 * j + 2], d[4 * j + 3]);  // row lane/4 + 8
            }
            const int row0 = m0 + 64 * c + 16 * warp + (lane >> 2);
            uint32_t *out0 = tw + (size_t)row0 * row_words + (size_t)tn * words;
            // Row 0 stashed now; its emit and row 1 run under the next tile's first k steps.
            twg_fe_stash<0>(p, scratch, tid & 7, pw0, pw1);
            prow = row0;
            pout = out0;
            pend = 2;
            // Redefine the accumulators (the next tile's first wgmma ignores them: scale-d 0); this tells the
            // compiler the old values are dead during the epilogue.
#pragma unroll
            for (int i = 0; i < 128; i++) d[i] = 0.0f;
        }
        while (pend)  // the last tile's epilogue
            twg_fo_part(pend--, p, pw0, pw1, prow, M, q, lane, scratch, tid & 7, pout, row_words, words, S, ovf_flag,
                        ovf_list, counters, nnz);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) nnz += __shfl_xor_sync(0xffffffffu, nnz, o);
        if (lane == 0 && nnz) atomicAdd(&counters->nnz, nnz);
    }
    if (CL == 2) {
        __syncwarp();
        hp_cluster_sync();  // the peer may still multicast into this CTA's stages or arrive on its barriers until here
    }
}

// ---------------------------------------------------------------------------------------------------
// Host side: tensor maps (cuTensorMapEncodeTiled through the runtime's driver entry point, so no
// direct libcuda symbol is needed) and the launch.
// ---------------------------------------------------------------------------------------------------
// 2-D bf16 row-major [rows, D] tensor map, box 64 (k) x box_rows, 128-byte swizzle, zero fill out of bounds.
static inline int twg_make_map(HpEncodeTiledFn enc, CUtensorMap *map, const bf16 *ptr, int rows, int D, int box_rows,
                               const char *what) {
    const cuuint64_t dims[2] = {(cuuint64_t)D, (cuuint64_t)rows};  // innermost first
    const cuuint64_t strides[1] = {(cuuint64_t)D * sizeof(bf16)};   // bytes between rows (multiple of 16)
    const cuuint32_t box[2] = {TWG_BK, (cuuint32_t)box_rows};       // 64 x 2 B = 128 B = the swizzle span
    const cuuint32_t estr[2] = {1, 1};
    CUresult r = enc(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, (void *)ptr, dims, strides, box, estr,
                     CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                     CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS) {
        fprintf(stderr, "error: twell wgmma gate: cuTensorMapEncodeTiled(%s [%d, %d], box %d x %d) failed: CUresult %d\n",
                what, rows, D, TWG_BK, box_rows, (int)r);
        return TWELL_ERR_ARG;
    }
    return TWELL_OK;
}

// Checks the shapes / pointers / device for the wgmma gate. TWELL_OK or an error (message printed).
static inline int twell_gate_wgmma_check(const bf16 *X, const bf16 *W, int M, int D, int F, int C) {
    if (M < 1 || D < TWG_BK || D % TWG_BK != 0 || F < TWG_BN || F % TWG_BN != 0) {
        fprintf(stderr, "error: twell wgmma gate: shape M=%d D=%d F=%d: needs M >= 1, D a positive multiple of %d, "
                "F a positive multiple of %d\n", M, D, F, TWG_BK, TWG_BN);
        return TWELL_ERR_SHAPE;
    }
    if (C != 2 && C != 4 && C != 8) {
        fprintf(stderr, "error: twell wgmma gate: C=%d (expected 2, 4 or 8)\n", C);
        return TWELL_ERR_SHAPE;
    }
    if (((uintptr_t)X | (uintptr_t)W) & 15) {
        fprintf(stderr, "error: twell wgmma gate: X and Wg must be 16-byte aligned (TMA)\n");
        return TWELL_ERR_ARG;
    }
    int dev = 0, major = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
    if (major != 9) {
        fprintf(stderr, "error: twell wgmma gate: needs a Hopper GPU (sm_90a: wgmma, TMA), this one is sm_%d.x\n", major);
        return TWELL_ERR_ARG;
    }
    return TWELL_OK;
}

// The cluster size for this device: 1 on an H200 (measured ~3% faster there, dev/results_log run 101), 2 on every
// other Hopper part (an H100: ~10% faster). Asked once per device (<= 16 devices).
static inline int twg_default_cluster(void) {
    static int cached[16];
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    if (dev < 16 && cached[dev]) return cached[dev];
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, dev));
    const int cl = strstr(prop.name, "H200") ? 1 : 2;
    if (dev < 16) cached[dev] = cl;
    return cl;
}

// A launch configuration of `grid` CTAs in clusters of cl (attr: its one attribute, owned by the caller).
static inline cudaLaunchConfig_t twg_cluster_config(cudaLaunchAttribute *attr, int cl, int grid, cudaStream_t stream) {
    cudaLaunchConfig_t cfg = {};
    attr->id = cudaLaunchAttributeClusterDimension;
    attr->val.clusterDim.x = cl;
    attr->val.clusterDim.y = 1;
    attr->val.clusterDim.z = 1;
    cfg.gridDim = dim3(grid, 1, 1);
    cfg.blockDim = dim3(TWG_THREADS, 1, 1);
    cfg.dynamicSmemBytes = TWG_FE_SMEM_BYTES;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

// The clusters of CL CTAs of the kernel that can be resident at once on this device (one CTA per SM; a GPC with an
// odd number of free SMs leaves one idle when CL = 2), asked of the occupancy API once per device (<= 16 devices) and
// cluster size. 0 (message printed) if the kernel cannot run.
template <int CL>
static inline int twg_max_clusters(void) {
    static int cached[16];
    int dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    if (dev < 16 && cached[dev]) return cached[dev];
    const int smem = TWG_FE_SMEM_BYTES;
    cudaCheck(cudaFuncSetAttribute(twell_gate_wgmma_kernel<CL>, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = twg_cluster_config(&attr, CL, CL * cuda_sm_count(), 0);
    int n = 0;
    cudaError_t e = cudaOccupancyMaxActiveClusters(&n, twell_gate_wgmma_kernel<CL>, &cfg);
    if (e != cudaSuccess || n < 1) {
        fprintf(stderr, "error: twell wgmma gate: no cluster of %d CTAs with %d B of shared memory fits (%s)\n", CL,
                smem, cudaGetErrorString(e));
        (void)cudaGetLastError();
        return 0;
    }
    if (dev < 16) cached[dev] = n;
    return n;
}

template <int CL>
static inline int twg_launch(const CUtensorMap &tmX, const CUtensorMap &tmW, int M, int D, int F, int C, uint32_t *tw,
                             int *ovf_flag, int *ovf_list, TwellCounters *counters, cudaStream_t stream, int max_ctas) {
    int clusters = twg_max_clusters<CL>();
    if (clusters < 1) return TWELL_ERR_ARG;
    if (max_ctas > 0) clusters = std::min(clusters, std::max(1, max_ctas / CL));
    const long long groups = (long long)CEIL_DIV(CEIL_DIV(M, TWG_BM), CL) * (F / TWG_BN);
    if (groups < clusters) clusters = (int)groups;
    cudaLaunchAttribute attr;
    const cudaLaunchConfig_t cfg = twg_cluster_config(&attr, CL, clusters * CL, stream);
    cudaCheck(cudaLaunchKernelEx(&cfg, twell_gate_wgmma_kernel<CL>, tmX, tmW, M, D, F, TWELL_TILE / C, tw, ovf_flag,
                                 ovf_list, counters));
    return TWELL_OK;
}

// X [M, D], W [F, D] -> tw [M, F/C] + ovf_flag / ovf_list / counters (zeroed by the caller on `stream`).
// max_ctas > 0 caps the persistent grid (tests: many tiles per CTA on small shapes; rounded down to whole clusters,
// at least one); 0 = every cluster that fits. cluster: CTAs per cluster, 1 or 2; 0 = twg_default_cluster().
static inline int twell_gate_wgmma_launch(const bf16 *X, const bf16 *W, int M, int D, int F, int C, uint32_t *tw,
                                          int *ovf_flag, int *ovf_list, TwellCounters *counters, cudaStream_t stream,
                                          int max_ctas = 0, int cluster = 0) {
    int e = twell_gate_wgmma_check(X, W, M, D, F, C);
    if (e) return e;
    if (cluster < 0 || cluster > 2) {
        fprintf(stderr, "error: twell wgmma gate: cluster size %d (expected 0 = by device, 1 or 2)\n", cluster);
        return TWELL_ERR_ARG;
    }
    if (cluster == 0) cluster = twg_default_cluster();
    HpEncodeTiledFn enc = hp_encode_fn();
    if (!enc) return TWELL_ERR_ARG;
    CUtensorMap tmX, tmW;
    if ((e = twg_make_map(enc, &tmX, X, M, D, TWG_BM, "X"))) return e;
    if ((e = twg_make_map(enc, &tmW, W, F, D, TWG_BN / cluster, "Wg"))) return e;
    e = cluster == 2 ? twg_launch<2>(tmX, tmW, M, D, F, C, tw, ovf_flag, ovf_list, counters, stream, max_ctas)
                     : twg_launch<1>(tmX, tmW, M, D, F, C, tw, ovf_flag, ovf_list, counters, stream, max_ctas);
    if (e) return e;
    cudaCheckLaunch();
    return TWELL_OK;
}

#endif  // SLLM_TWELL_GATE_WGMMA_CUH
