// twell/gate_wgmma_db.cuh: the Hopper wgmma gate with its epilogue run under the next tile's wgmmas
// (variant TWELL_GATE_WGMMA_DB of twell/gate.cuh). Same contract and bits as twell/gate_wgmma.cuh.
//
// Why: wgmma_fe's main loop is tensor-bound, and its epilogue (~0.15-0.2 ms at M 65536) runs with the tensor
// cores idle: both consumer warpgroups finish a tile together. Hiding it under the next tile's wgmmas needs the
// tile's bf16 words (64 registers) live next to the 128 accumulators the next tile already writes: over the
// 168-register cap of a 384-thread CTA (a producer warpgroup + 2 consumers), but within the 255 of 256 threads.
//
// Structure: 256 threads = the 2 consumer warpgroups of gate_wgmma.cuh (consumer c: rows 64c..64c+63 of the
// 128 x 256 tile), no producer warpgroup: thread 0 issues the TMA loads itself. It fills the STAGES-deep ring
// before the loop and refills a stage right after releasing it (waiting there for the other warpgroup's
// release of the same stage). Tile t's accumulators become bf16x2 words p[64] after its last k step; tile
// t+1's first TWD_OVERLAP_K k steps are issued (wgmma groups in flight), and only then are tile t's rows
// packed (twg_fe_pack_row, the short epilogue), while the tensor cores work on tile t+1.
#ifndef SLLM_TWELL_GATE_WGMMA_DB_CUH
#define SLLM_TWELL_GATE_WGMMA_DB_CUH

#include "twell/gate_wgmma.cuh"

#define TWD_THREADS 256                    // 2 consumer warpgroups
#define TWD_SMEM_BYTES TWG_FE_SMEM_BYTES   // the ring, its barriers and the short epilogue's scratch
#ifndef TWD_OVERLAP_K
#define TWD_OVERLAP_K 2                    // k steps of tile t+1 in flight while tile t is packed
#endif

// 1 when the phase with parity `parity` has completed; never suspends (test_wait, unlike try_wait).
__device__ __forceinline__ uint32_t twd_mbar_test_wait(uint32_t bar, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.test_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
    return ok;
}

// Thread 0: the TMA loads of k iteration j of this CTA (tile blockIdx.x + (j / KT) gridDim.x, k step j % KT)
// into stage j % STAGES. wait: block until both warpgroups released that stage's previous round; else return
// 0 (nothing issued) when they have not yet.
__device__ __forceinline__ int twd_issue(uint32_t j, int KT, int num_n, uint32_t base, uint32_t bar_full,
                                         uint32_t bar_empty, const CUtensorMap *tmX, const CUtensorMap *tmW,
                                         bool wait) {
    const uint32_t s = j % TWG_STAGES, ph = (j / TWG_STAGES) & 1u;
    if (wait) twg_mbar_wait(bar_empty + 8 * s, ph ^ 1u);  // round 0 passes at once (parity 1)
    else if (!twd_mbar_test_wait(bar_empty + 8 * s, ph ^ 1u)) return 0;
    const int t = (int)blockIdx.x + (int)(j / (uint32_t)KT) * (int)gridDim.x, kt = (int)(j % (uint32_t)KT);
    const int m0 = (t / num_n) * TWG_BM, n0 = (t % num_n) * TWG_BN;
    twg_mbar_arrive_expect_tx(bar_full + 8 * s, TWG_STAGE_BYTES);
    const uint32_t sa = base + s * TWG_STAGE_BYTES;
    twg_tma_load_2d(sa, tmX, bar_full + 8 * s, kt * TWG_BK, m0);
    twg_tma_load_2d(sa + TWG_A_BYTES, tmW, bar_full + 8 * s, kt * TWG_BK, n0);
    return 1;
}

__global__ void __launch_bounds__(TWD_THREADS, 1)
twell_gate_wgmma_db_kernel(const __grid_constant__ CUtensorMap tmX, const __grid_constant__ CUtensorMap tmW, int M,
                           int D, int F, int words, uint32_t *__restrict__ tw, int *__restrict__ ovf_flag,
                           int *__restrict__ ovf_list, TwellCounters *__restrict__ counters) {
    extern __shared__ uint8_t twg_smem_raw[];
    const uint32_t base = (twg_smem_addr(twg_smem_raw) + 1023u) & ~1023u;
    const uint32_t bar_full = base + TWG_STAGES * TWG_STAGE_BYTES;
    const uint32_t bar_empty = bar_full + 8 * TWG_STAGES;
    const int num_n = F / TWG_BN, num_m = (M + TWG_BM - 1) / TWG_BM;
    const int tiles = num_m * num_n, KT = D / TWG_BK;
    const int c = threadIdx.x / 128, tid = threadIdx.x % 128, warp = tid >> 5, lane = tid & 31, q = lane & 3;
    const int S = words - 1, row_words = (F / TWELL_TILE) * words;
    const uint32_t scratch = ((bar_empty + 8 * TWG_STAGES + 127u) & ~127u) + (uint32_t)threadIdx.x * 128u;
    const bool issuer = threadIdx.x == 0;
    const uint32_t total = (uint32_t)((tiles - (int)blockIdx.x + (int)gridDim.x - 1) / (int)gridDim.x) * (uint32_t)KT;

    if (issuer) {
        for (int s = 0; s < TWG_STAGES; s++) {
            twg_mbar_init(bar_full + 8 * s, 1);   // the issuer's arrive.expect_tx (+ the TMA bytes)
            twg_mbar_init(bar_empty + 8 * s, 2);  // one arrive per warpgroup
        }
        twg_fence_barrier_init();
    }
    __syncthreads();
    // The issuer's next iteration to load. It never blocks on the other warpgroup's release except when its own
    // next k step needs that very load (before waiting on full); otherwise it issues what is free after each of its
    // releases.
    uint32_t next = 0;
    if (issuer)
        for (; next < total && next < TWG_STAGES; next++) twd_issue(next, KT, num_n, base, bar_full, bar_empty, &tmX, &tmW, true);

    float d[128];
#pragma unroll
    for (int i = 0; i < 128; i++) d[i] = 0.0f;
    uint32_t p[64];  // the previous tile's rows as bf16x2 words (see twg_pack_row for the layout)
    bool have_prev = false;
    int prev_row0 = 0;
    uint32_t *prev_out0 = tw;
    unsigned long long nnz = 0;
    const int overlap_at = (KT < TWD_OVERLAP_K ? KT : TWD_OVERLAP_K) - 1;  // k step after which the pack runs
    uint32_t it = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int m0 = (t / num_n) * TWG_BM, tn = t % num_n;
        for (int kt = 0; kt < KT; kt++, it++) {
            const uint32_t s = it % TWG_STAGES, ph = (it / TWG_STAGES) & 1u;
            if (issuer)
                for (; next <= it; next++) twd_issue(next, KT, num_n, base, bar_full, bar_empty, &tmX, &tmW, true);
            twg_mbar_wait(bar_full + 8 * s, ph);
            const uint32_t sa = base + s * TWG_STAGE_BYTES + (uint32_t)c * (64 * 128);
            const uint32_t sb = base + s * TWG_STAGE_BYTES + TWG_A_BYTES;
            twg_kstep(d, sa, sb, kt == 0);
            if (have_prev && kt == overlap_at) {  // the previous tile's pack, under this tile's wgmmas
                twg_fe_pack_row<0>(p, prev_row0, M, q, lane, scratch, tid & 7, prev_out0, words, S, ovf_flag,
                                   ovf_list, counters, nnz);
                twg_fe_pack_row<1>(p, prev_row0 + 8, M, q, lane, scratch, tid & 7, prev_out0 + (size_t)8 * row_words,
                                   words, S, ovf_flag, ovf_list, counters, nnz);
                have_prev = false;
            }
            if (kt > 0) {  // the previous k step's group is done: release its stage, refill it
                twg_wgmma_wait<1>();
                twg_fence_acc(d);
                if (tid == 0) twg_mbar_arrive(bar_empty + 8 * ((it - 1) % TWG_STAGES));
                if (issuer)
                    while (next < total && next < it + TWG_STAGES &&
                           twd_issue(next, KT, num_n, base, bar_full, bar_empty, &tmX, &tmW, false))
                        next++;
            }
        }
        twg_wgmma_wait<0>();
        twg_fence_acc(d);
        if (tid == 0) twg_mbar_arrive(bar_empty + 8 * ((it - 1) % TWG_STAGES));
        if (issuer)
            while (next < total && next < it + TWG_STAGES &&
                   twd_issue(next, KT, num_n, base, bar_full, bar_empty, &tmX, &tmW, false))
                next++;
#pragma unroll
        for (int j = 0; j < 32; j++) {
            p[2 * j] = twg_bf16x2_bits(d[4 * j], d[4 * j + 1]);          // row lane/4, cols 8j + 2q (+1)
            p[2 * j + 1] = twg_bf16x2_bits(d[4 * j + 2], d[4 * j + 3]);  // row lane/4 + 8
        }
        prev_row0 = m0 + 64 * c + 16 * warp + (lane >> 2);
        prev_out0 = tw + (size_t)prev_row0 * row_words + (size_t)tn * words;
        have_prev = true;
    }
    if (have_prev) {  // the last tile's pack (nothing left to hide it under)
        twg_fe_pack_row<0>(p, prev_row0, M, q, lane, scratch, tid & 7, prev_out0, words, S, ovf_flag, ovf_list,
                           counters, nnz);
        twg_fe_pack_row<1>(p, prev_row0 + 8, M, q, lane, scratch, tid & 7, prev_out0 + (size_t)8 * row_words, words, S,
                           ovf_flag, ovf_list, counters, nnz);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) nnz += __shfl_xor_sync(0xffffffffu, nnz, o);
    if (lane == 0 && nnz) atomicAdd(&counters->nnz, nnz);
}

// X [M, D], W [F, D] -> tw [M, F/C] + ovf_flag / ovf_list / counters (zeroed by the caller on `stream`).
// max_ctas > 0 caps the persistent grid (tests); 0 = one CTA per SM.
static inline int twell_gate_wgmma_db_launch(const bf16 *X, const bf16 *W, int M, int D, int F, int C, uint32_t *tw,
                                             int *ovf_flag, int *ovf_list, TwellCounters *counters,
                                             cudaStream_t stream, int max_ctas = 0) {
    int e = twell_gate_wgmma_check(X, W, M, D, F, C);
    if (e) return e;
    TwgEncodeTiledFn enc = twg_encode_fn();
    if (!enc) return TWELL_ERR_ARG;
    CUtensorMap tmX, tmW;
    if ((e = twg_make_map(enc, &tmX, X, M, D, TWG_BM, "X"))) return e;
    if ((e = twg_make_map(enc, &tmW, W, F, D, TWG_BN, "Wg"))) return e;
    int sms = cuda_sm_count();
    cudaCheck(cudaFuncSetAttribute(twell_gate_wgmma_db_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   TWD_SMEM_BYTES));
    const long long tiles = (long long)CEIL_DIV(M, TWG_BM) * (F / TWG_BN);
    if (max_ctas > 0 && max_ctas < sms) sms = max_ctas;
    const int grid = (int)(tiles < sms ? tiles : sms);
    twell_gate_wgmma_db_kernel<<<grid, TWD_THREADS, TWD_SMEM_BYTES, stream>>>(tmX, tmW, M, D, F, TWELL_TILE / C, tw,
                                                                             ovf_flag, ovf_list, counters);
    cudaCheckLaunch();
    return TWELL_OK;
}

#endif  // SLLM_TWELL_GATE_WGMMA_DB_CUH
