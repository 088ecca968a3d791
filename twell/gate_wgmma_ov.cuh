// twell/gate_wgmma_ov.cuh: Hopper (sm_90a) gate -> TwELL with the pack hidden under the next tile's wgmmas
// (variant TWELL_GATE_WGMMA_OV of twell/gate.cuh). Same contract and same bits as twell_gate_wgmma_kernel
// (twell/gate_wgmma.cuh): tw = TwELL(relu(X Wg^T)), X [M, D] and Wg [F, D] bf16 row-major, tw uint32 [M, F/C],
// ovf_flag [M] / counters zero on entry; D % 64 == 0, F % 256 == 0, M >= 1.
//
// Why: dev/bench/bench_coresident (dev/RESULTS.md run 89) timed round 1's mainloop without its epilogue at 1.81 ms
// (M 65536, D 2048, F 5632; 3 stages: 1.86) against 2.01 for the cuBLASLt GEMM alone and 2.44 for round 1 with its
// fused pack: the pack epilogue, run while the tensor cores wait, costs ~0.6 ms.
//
// Structure: round 1's persistent grid, tile order, producer warpgroup (TMA) and consumer mainloop, with 3 stages
// of 48 KB instead of 4 (the 4th stage's room holds the staging buffer; 3 stages cost ~3% in the probe). At the
// end of a tile, each consumer warp rounds its accumulators to bf16 and stores them to its own staging rows in
// shared memory: warp w of consumer c holds rows 16w .. 16w + 15 of the consumer's 64 (the wgmma fragment:
// rows 16w + l/4 and + 8), so warp gw = 4c + w stages exactly those 16 rows (pitch 528 B: conflict-free stores,
// 256 bf16 + 16 B of pad) and later packs exactly them: no barrier beyond __syncwarp. The 16 rows are packed one
// by one during the NEXT tile's k loop, after each k step's wgmmas are issued and the previous stage released (a
// pack before that release held up the producer: 2.91 ms, run 90): (kt + 1) * 16 / KT rows done after k step kt,
// so all 16 are done before the tile's own staging. The last tile's rows are packed after the loop.
// Packing one row (one warp, twell_pack_kernel's rule and layout): lane l reads columns 8l .. 8l + 7 (16 B),
// active iff the bf16 value is > 0 (twg_bf16_pos), the slot of an active value = the active values before it in
// column order (8 ballots: the active values of the lanes below + the rank inside the lane), entry = bf16 bits << 16 |
// column; the count word, the slots < S and the zero padding are one warp's stores into the row's 4 W-byte tile
// (words split over the lanes); rows with count > S are flagged (twell_flag_overflow) exactly as the others do.
#ifndef SLLM_TWELL_GATE_WGMMA_OV_CUH
#define SLLM_TWELL_GATE_WGMMA_OV_CUH

#include "twell/gate_wgmma.cuh"  // the PTX helpers, tensor maps, shape checks, TWG_* tile constants

#define TWO_STAGES 3                                // ring depth (round 1: 4)
#define TWO_STG_PITCH 528                           // bytes per staged row: 256 bf16 + 16 B (bank rotation of 4 words)
#define TWO_STG_WARP_BYTES (16 * TWO_STG_PITCH)     // one consumer warp's 16 rows: 8448
#define TWO_STG_BYTES (8 * TWO_STG_WARP_BYTES)      // 8 consumer warps: 67584
#define TWO_SMEM_BYTES (TWO_STAGES * TWG_STAGE_BYTES + TWO_STG_BYTES + 2 * TWO_STAGES * 8 + 1024)
static_assert(TWO_SMEM_BYTES <= 232448, "the overlapped wgmma gate needs more shared memory than an SM has");

// Packs staged row r (0..15) of this warp: global row `row` (skipped when >= M: warp-uniform), TwELL tile tile_out
// (W words, S = W - 1 slots). stg_row = shared address of the staged row (256 bf16).
__device__ __forceinline__ void two_pack_row(uint32_t stg_row, int row, int M, int lane, uint32_t *__restrict__ tile_out,
                                             int W, int S, int *__restrict__ ovf_flag, int *__restrict__ ovf_list,
                                             TwellCounters *__restrict__ counters, unsigned long long &nnz) {
    if (row >= M) return;
    uint32_t v[4];
    asm volatile("ld.shared.v4.u32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v[0]), "=r"(v[1]), "=r"(v[2]), "=r"(v[3]) : "r"(stg_row + 16 * lane) : "memory");
    uint32_t mine = 0;  // bit e: column 8 lane + e is active (value e = bits 16 (e & 1) of word e / 2)
#pragma unroll
    for (int e = 0; e < 8; e++) mine |= twg_bf16_pos((v[e >> 1] >> (16 * (e & 1))) & 0xFFFFu) << e;
    // Active values before this lane's and the row's total, from 8 independent ballots (no dependent shuffle chain).
    const uint32_t below = (1u << lane) - 1u;
    int total = 0, slot = 0;
#pragma unroll
    for (int e = 0; e < 8; e++) {
        const uint32_t b = __ballot_sync(0xffffffffu, (mine >> e) & 1u);
        total += __popc(b);
        slot += __popc(b & below);
    }
    for (uint32_t m = mine; m && slot < S; m &= m - 1, slot++) {
        const int e = __ffs(m) - 1;  // (a select chain, not v[e >> 1]: a dynamic index would put v in local memory)
        const uint32_t word = e < 4 ? (e < 2 ? v[0] : v[1]) : (e < 6 ? v[2] : v[3]);
        tile_out[1 + slot] = (((word >> (16 * (e & 1))) & 0xFFFFu) << 16) | (uint32_t)(8 * lane + e);
    }
    const int used = total < S ? total : S;
    for (int w = lane; w < W; w += 32) {
        if (w == 0) tile_out[0] = (uint32_t)total;
        else if (w > used) tile_out[w] = 0u;
    }
    if (lane == 0) {
        nnz += (unsigned long long)total;
        if (total > S) twell_flag_overflow(row, ovf_flag, ovf_list, counters);
    }
}

// The kernel. tmX: X [M, D] box 64 x 128 (k x rows); tmW: Wg [F, D] box 64 x 256. words = 256 / C.
__global__ void __launch_bounds__(TWG_THREADS, 1)
twell_gate_wgmma_ov_kernel(const __grid_constant__ CUtensorMap tmX, const __grid_constant__ CUtensorMap tmW, int M,
                           int D, int F, int words, uint32_t *__restrict__ tw, int *__restrict__ ovf_flag,
                           int *__restrict__ ovf_list, TwellCounters *__restrict__ counters) {
    extern __shared__ uint8_t two_smem_raw[];
    const uint32_t base = (twg_smem_addr(two_smem_raw) + 1023u) & ~1023u;  // stage s at base + s * TWG_STAGE_BYTES
    const uint32_t stg_base = base + TWO_STAGES * TWG_STAGE_BYTES;          // staging rows of the 8 consumer warps
    const uint32_t bar_full = stg_base + TWO_STG_BYTES, bar_empty = bar_full + 8 * TWO_STAGES;
    const int num_n = F / TWG_BN, num_m = (M + TWG_BM - 1) / TWG_BM;
    const int tiles = num_m * num_n, KT = D / TWG_BK;
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < TWO_STAGES; s++) {
            twg_mbar_init(bar_full + 8 * s, 1);
            twg_mbar_init(bar_empty + 8 * s, 2);
        }
        twg_fence_barrier_init();
    }
    __syncthreads();

    if (wg == 0) {  // producer, as round 1
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (threadIdx.x == 0) {
            uint32_t it = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const int m0 = (t / num_n) * TWG_BM, n0 = (t % num_n) * TWG_BN;
                for (int kt = 0; kt < KT; kt++, it++) {
                    const uint32_t s = it % TWO_STAGES, ph = (it / TWO_STAGES) & 1u;
                    twg_mbar_wait(bar_empty + 8 * s, ph ^ 1u);
                    twg_mbar_arrive_expect_tx(bar_full + 8 * s, TWG_STAGE_BYTES);
                    const uint32_t sa = base + s * TWG_STAGE_BYTES;
                    twg_tma_load_2d(sa, &tmX, bar_full + 8 * s, kt * TWG_BK, m0);
                    twg_tma_load_2d(sa + TWG_A_BYTES, &tmW, bar_full + 8 * s, kt * TWG_BK, n0);
                }
            }
        }
    } else {
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int c = wg - 1, tid = threadIdx.x - 128 * wg, warp = tid >> 5, lane = tid & 31, q = lane & 3;
        const int S = words - 1, row_words = (F / TWELL_TILE) * words;
        const uint32_t stg = stg_base + (uint32_t)(4 * c + warp) * TWO_STG_WARP_BYTES;  // this warp's 16 rows
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; i++) d[i] = 0.0f;
        unsigned long long nnz = 0;
        int pend_row0 = -1, pend_tn = 0, pend_done = 16;  // the staged tile still to pack: first row, n tile, rows done
        uint32_t it = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            const int m0 = (t / num_n) * TWG_BM, tn = t % num_n;
            for (int kt = 0; kt < KT; kt++, it++) {
                const uint32_t s = it % TWO_STAGES, ph = (it / TWO_STAGES) & 1u;
                twg_mbar_wait(bar_full + 8 * s, ph);
                const uint32_t sa = base + s * TWG_STAGE_BYTES + (uint32_t)c * (64 * 128);
                const uint32_t sb = base + s * TWG_STAGE_BYTES + TWG_A_BYTES;
                twg_fence_acc(d);
                twg_wgmma_fence();
#pragma unroll
                for (int kk = 0; kk < TWG_BK / 16; kk++)
                    twg_wgmma_m64n256k16(d, twg_desc_sw128(sa + 32 * kk), twg_desc_sw128(sb + 32 * kk),
                                         (kt > 0 || kk > 0) ? 1 : 0);
                twg_wgmma_commit();
                twg_fence_acc(d);
                if (kt > 0) {
                    twg_wgmma_wait<1>();
                    twg_fence_acc(d);
                    if (tid == 0) twg_mbar_arrive(bar_empty + 8 * ((it - 1) % TWO_STAGES));
                }
                // While this k step's wgmmas run (the previous stage already released, so the producer is not held
                // up): pack rows of the previous tile (a warp-uniform loop).
                for (const int target = (kt + 1) * 16 / KT; pend_done < target; pend_done++) {
                    const int row = pend_row0 + pend_done;
                    two_pack_row(stg + pend_done * TWO_STG_PITCH, row, M, lane,
                                 tw + (size_t)row * row_words + (size_t)pend_tn * words, words, S, ovf_flag, ovf_list,
                                 counters, nnz);
                }
            }
            twg_wgmma_wait<0>();
            twg_fence_acc(d);
            if (tid == 0) twg_mbar_arrive(bar_empty + 8 * ((it - 1) % TWO_STAGES));
            // Stage this tile's rows (the previous tile's are all packed: pend_done reached 16 at kt = KT - 1).
            // Thread (lane l, q = l % 4) holds rows l/4 and l/4 + 8 of the warp's 16, columns 8j + 2q (+1).
            __syncwarp();
#pragma unroll
            for (int j = 0; j < 32; j++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const uint32_t a = stg + (uint32_t)((lane >> 2) + 8 * h) * TWO_STG_PITCH + (uint32_t)(8 * j + 2 * q) * 2;
                    asm volatile("st.shared.u32 [%0], %1;" ::"r"(a), "r"(twg_bf16x2_bits(d[4 * j + 2 * h], d[4 * j + 2 * h + 1]))
                                 : "memory");
                }
            __syncwarp();
            pend_row0 = m0 + 64 * c + 16 * warp;
            pend_tn = tn;
            pend_done = 0;
#pragma unroll
            for (int i = 0; i < 128; i++) d[i] = 0.0f;  // dead until the next tile's first wgmma (scale-d 0)
        }
        for (; pend_done < 16 && pend_row0 >= 0; pend_done++) {  // the last tile's rows
            const int row = pend_row0 + pend_done;
            two_pack_row(stg + pend_done * TWO_STG_PITCH, row, M, lane,
                         tw + (size_t)row * row_words + (size_t)pend_tn * words, words, S, ovf_flag, ovf_list, counters,
                         nnz);
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) nnz += __shfl_xor_sync(0xffffffffu, nnz, o);
        if (lane == 0 && nnz) atomicAdd(&counters->nnz, nnz);
    }
}

// X [M, D], W [F, D] -> tw [M, F/C] + ovf_flag / ovf_list / counters (zeroed by the caller on `stream`).
// max_ctas > 0 caps the persistent grid (tests: many tiles per CTA on small shapes); 0 = one CTA per SM.
static inline int twell_gate_wgmma_ov_launch(const bf16 *X, const bf16 *W, int M, int D, int F, int C, uint32_t *tw,
                                             int *ovf_flag, int *ovf_list, TwellCounters *counters, cudaStream_t stream,
                                             int max_ctas = 0) {
    int e = twell_gate_wgmma_check(X, W, M, D, F, C);
    if (e) return e;
    TwgEncodeTiledFn enc = twg_encode_fn();
    if (!enc) return TWELL_ERR_ARG;
    CUtensorMap tmX, tmW;
    if ((e = twg_make_map(enc, &tmX, X, M, D, TWG_BM, "X"))) return e;
    if ((e = twg_make_map(enc, &tmW, W, F, D, TWG_BN, "Wg"))) return e;
    int sms = cuda_sm_count();
    cudaCheck(cudaFuncSetAttribute(twell_gate_wgmma_ov_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   TWO_SMEM_BYTES));
    const long long tiles = (long long)CEIL_DIV(M, TWG_BM) * (F / TWG_BN);
    if (max_ctas > 0 && max_ctas < sms) sms = max_ctas;
    const int grid = (int)(tiles < sms ? tiles : sms);
    twell_gate_wgmma_ov_kernel<<<grid, TWG_THREADS, TWO_SMEM_BYTES, stream>>>(tmX, tmW, M, D, F, TWELL_TILE / C, tw,
                                                                             ovf_flag, ovf_list, counters);
    cudaCheckLaunch();
    return TWELL_OK;
}

#endif  // SLLM_TWELL_GATE_WGMMA_OV_CUH
