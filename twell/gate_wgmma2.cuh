// twell/gate_wgmma2.cuh: faster variants of the Hopper wgmma gate with the TwELL pack fused (sm_90a):
//   tw = TwELL(relu(X Wg^T)), same contract and same bits as twell/gate_wgmma.cuh (and twell_pack_kernel).
//
//   X  [M, D] bf16 row-major, Wg [F, D] bf16 row-major (K-major, like X), out tw uint32 [M, F/C]
//   (twell/format.h), ovf_flag [M] (zero on entry), ovf_list [M], counters (zero on entry).
//   Shapes: D % 64 == 0, F % 256 == 0, M >= 1.
//
// One kernel template twell_gate_wgmma2_kernel<CM, PK>, three variants (gate.cuh enum):
//   TWELL_GATE_WGMMA_C2   CM 2, PK 0: 2-CTA clusters, Wg tile TMA-multicast, fused pack in the consumers
//                         (since stop 17 the short epilogue deferred under the next tile's k steps 1 and 2,
//                         as TWELL_GATE_WGMMA_FO: twg_fe_stash, twg_fo_part)
//   TWELL_GATE_WGMMA_PK   CM 1, PK 1: no cluster, the pack done by packer warps from a staged bf16 tile
//   TWELL_GATE_WGMMA_C2PK CM 2, PK 1: both (the paper's cluster + an epilogue overlapped with the mainloop)
// The mainloop, the tile (128 tokens x 256 units = one TwELL tile of 128 rows), the smem operand layout
// (128B swizzle, descriptors), the wgmma fragment layout and the fused pack (PK 0: twg_pack_row) are the
// ones of twell/gate_wgmma.cuh (shared helpers, read its header first).
//
// CM 2 (the paper's matmul_d2t cluster, twell_spec.md section 2.2): cluster (2, 1, 1); the two CTAs take
//   adjacent 128-row M tiles (2 mp, 2 mp + 1) and the SAME 256-unit N tile. Each stage's Wg tile [256 x 64]
//   is loaded once from L2 and multicast into both CTAs' smem: CTA rank r issues rows 128 r .. 128 r + 127
//   of it (one TMA with .multicast::cluster, cta mask 0b11) into offset B + 16 KB r of stage s in BOTH CTAs,
//   completing 16 KB on full[s] of each. Each CTA loads its own X tile. So each CTA's full[s] still expects
//   48 KB (A 16 + its half of B 16 + the peer's half 16); a peer's bytes may land before the local
//   arrive.expect_tx (the tx-count goes transiently negative; the phase cannot complete while the local
//   arrival is pending). empty[s] counts 4 arrivals: both consumer WGs of BOTH CTAs (remote ones through
//   mapa + mbarrier.arrive.release.cluster), since CTA r writes the peer's stage s too. The producer waits
//   on its empty[s] with acquire.cluster. Cluster barrier after the barrier init and before exit (a CTA
//   must not exit while the peer may still arrive on its barriers).
//   L2 -> SM bytes per 128 x 256 tile: 0.5 MB X + 0.5 MB Wg (was 0.5 + 1.0): -33%.
//   Tile order: cluster tile u = (mp = u / (F/256), n = u % (F/256)) dealt round-robin to the clusters
//   (n fastest): the ~66 concurrent clusters cover ~3 pairs of M tiles (~3 MB of X) and sweep all of Wg
//   (23 MB at F 5632, D 2048), which stays in L2; DRAM reads X once and Wg ~once.
//
// PK 1 (epilogue overlapped with the next tile's mainloop): the consumers do not pack. After their last
//   k step they round the 128 fp32 accumulators to bf16 (RNE) and store them to a staging tile in smem
//   (bf16 [128][256], row pitch 528 B: the quad's 4 lanes x 8 rows of one st.shared.b32 hit 32 different
//   banks), arrive on stg_full (count 256) and go straight to the next tile's mainloop. Warps 1..3 of the
//   producer warpgroup (idle in the other variants) are packers: wait stg_full, pack rows r = w, w + 3, ...
//   of the staged tile exactly like twell_pack_kernel (one warp per row, lane l holds columns 8l..8l+7
//   from one conflict-free ld.shared.v4, positive mask on the bf16 bits, warp inclusive scan of popcounts
//   -> slots in column order, count / slots / zero padding stored as one coalesced 128 B row segment for C
//   8), arrive on stg_empty (count 96); the consumers wait stg_empty before staging the next tile (the
//   packers have had a whole mainloop, ~20-40 us, for ~43 rows each). Shared memory: the 64 KB staging
//   leaves room for 3 stages of 48 KB (not 4): 3 x 48 + 66 = 210 KB.
//   No setmaxnreg in PK variants (the packers need more than the producer's 40 registers); every warp
//   runs at the 168-register launch bound, which the consumers' mainloop fits without spills.
//
// Hang guard: every mbarrier wait fails the launch after TWELL_WGMMA_TIMEOUT_NS (see gate_wgmma.cuh).
#ifndef SLLM_TWELL_GATE_WGMMA2_CUH
#define SLLM_TWELL_GATE_WGMMA2_CUH

#include "twell/gate_wgmma.cuh"

#define TW2_HALF_B_BYTES (128 * TWG_BK * 2)  // 16384: 128 rows of Wg per TMA box (half the B tile)
#define TW2_STG_PITCH 528                    // staging row pitch (bytes): 256 bf16 = 512 B + 16 B pad
#define TW2_STG_BYTES (TWG_BM * TW2_STG_PITCH)  // 67584
#define TW2_PACKERS 3                        // packer warps (warps 1..3 of warpgroup 0)

template <int PK>
struct Tw2Cfg {
    static constexpr int STAGES = PK ? 3 : 4;
    static constexpr int STG_BYTES = PK ? TW2_STG_BYTES : 0;
    // stages + staging + barriers (full, empty per stage; stg_full, stg_empty) + 1024 B alignment slack
    // PK 0: + the short epilogue's per-thread scratch (twg_fe_stash / twg_fe_emit), 128-byte aligned
    static constexpr int FE_BYTES = PK ? 0 : 128 + TWG_FE_SCRATCH_BYTES;
    static constexpr int SMEM = STAGES * TWG_STAGE_BYTES + STG_BYTES + 8 * (2 * STAGES + 2) + FE_BYTES + 1024;
};
static_assert(Tw2Cfg<1>::SMEM <= 232448 && Tw2Cfg<0>::SMEM <= 232448, "wgmma2 gate: over 227 KB of shared memory");

// ---- cluster helpers (sm_90) ----
__device__ __forceinline__ uint32_t tw2_cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}
// All threads of both CTAs; release/acquire (orders the barrier inits before any remote use, and every remote
// access before exit).
__device__ __forceinline__ void tw2_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;\n" ::: "memory");
}
// Arrive (count 1) on the mbarrier at the same smem offset in CTA `rank` of the cluster (rank may be this CTA).
// Default semantics (release at CTA scope), as CUTLASS's ClusterBarrier::arrive: the consumers only READ the
// stage (wgmma, complete once wgmma.wait_group returns), so nothing has to be made visible to the peer. The
// first version used .release.cluster (and the producer .acquire.cluster): ptxas turned every release into
// MEMBAR.ALL.GPU + ERRBAR on the consumer warp before its next wgmma, and every acquire into an L1
// invalidation (CCTL.IVALL), which made the cluster variants 1.7x slower than the single-CTA kernel (run 100).
__device__ __forceinline__ void tw2_mbar_arrive_cluster(uint32_t bar, uint32_t rank) {
    asm volatile(
        "{\n.reg .b32 ra;\n"
        "mapa.shared::cluster.u32 ra, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar),
        "r"(rank)
        : "memory");
}
// TMA 2-D tile multicast: written at offset dst (this CTA's smem address; the same offset in every CTA of
// cta_mask) and completing its bytes on the mbarrier at offset bar of each destination CTA.
__device__ __forceinline__ void tw2_tma_load_2d_mc(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0, int c1,
                                                   uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;" ::"r"(dst),
        "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask)
        : "memory");
}
__device__ __forceinline__ void tw2_sts32(uint32_t addr, uint32_t v) {
    asm volatile("st.shared.b32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}
__device__ __forceinline__ uint4 tw2_lds128(uint32_t addr) {
    uint4 v;
    asm volatile("ld.shared.v4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
                 : "r"(addr)
                 : "memory");
    return v;
}

// The kernel. tmX: X [M, D] box 64 x 128; tmW: Wg [F, D] box 64 x 128 (half a B tile per TMA).
// words = 256 / C. Grid: a multiple of CM (clusters of CM consecutive blocks), persistent.
template <int CM, int PK>
__global__ void __launch_bounds__(TWG_THREADS, 1)
twell_gate_wgmma2_kernel(const __grid_constant__ CUtensorMap tmX, const __grid_constant__ CUtensorMap tmW, int M,
                         int D, int F, int words, uint32_t *__restrict__ tw, int *__restrict__ ovf_flag,
                         int *__restrict__ ovf_list, TwellCounters *__restrict__ counters) {
    static_assert(CM == 1 || CM == 2, "cluster size 1 or 2");
    constexpr int STAGES = Tw2Cfg<PK>::STAGES;
    extern __shared__ uint8_t tw2_smem_raw[];
    // Same dynamic smem start in every CTA, so `base` (and every offset below) is the same in both CTAs of a
    // cluster: required by the multicast (it writes at the issuing CTA's offsets).
    const uint32_t base = (twg_smem_addr(tw2_smem_raw) + 1023u) & ~1023u;
    const uint32_t stg = base + STAGES * TWG_STAGE_BYTES;          // PK: staging tile
    const uint32_t bar_full = stg + Tw2Cfg<PK>::STG_BYTES;        // full[s] at bar_full + 8 s
    const uint32_t bar_empty = bar_full + 8 * STAGES;              // empty[s] at bar_empty + 8 s
    const uint32_t bar_sfull = bar_empty + 8 * STAGES;             // PK: staged tile ready (256 arrivals)
    const uint32_t bar_sempty = bar_sfull + 8;                     // PK: staged tile packed (96 arrivals)
    const int num_n = F / TWG_BN, num_m = (M + TWG_BM - 1) / TWG_BM;
    const int num_mp = (num_m + CM - 1) / CM;  // cluster tiles along M (pairs of M tiles for CM 2)
    const int ctiles = num_mp * num_n, KT = D / TWG_BK;
    const int cid = blockIdx.x / CM, ncl = gridDim.x / CM;
    const uint32_t rank = CM > 1 ? tw2_cluster_rank() : 0u;
    const int wg = threadIdx.x / 128;
    const int S = words - 1, row_words = (F / TWELL_TILE) * words;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            twg_mbar_init(bar_full + 8 * s, 1);        // the local producer's arrive.expect_tx (+ 48 KB of tx)
            twg_mbar_init(bar_empty + 8 * s, 2 * CM);  // each consumer WG of each CTA of the cluster
        }
        if (PK) {
            twg_mbar_init(bar_sfull, 256);
            twg_mbar_init(bar_sempty, 32 * TW2_PACKERS);
        }
        twg_fence_barrier_init();
    }
    if (CM > 1) tw2_cluster_sync();
    else __syncthreads();

    if (wg == 0) {
        // PK 0: the register split of twell/gate_wgmma.cuh (producer 40, consumers 232), so that C2 differs from
        // it only by the cluster. PK 1: none (the packer warps live in this warpgroup).
        if (!PK) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        if (threadIdx.x == 0) {
            // Producer.
            uint32_t it = 0;
            for (int u = cid; u < ctiles; u += ncl) {
                const int m0 = ((u / num_n) * CM + (int)rank) * TWG_BM, n0 = (u % num_n) * TWG_BN;
                // The second M tile of the last pair may lie wholly past M (num_m odd): load rows 0.. instead
                // (valid data, the results are never stored: every store checks row < M), so the box is never
                // entirely out of bounds (partial boxes zero-fill, as in gate_wgmma.cuh).
                const int ma = m0 < M ? m0 : 0;
                for (int kt = 0; kt < KT; kt++, it++) {
                    const uint32_t s = it % STAGES, ph = (it / STAGES) & 1u;
                    // round 0 passes at once; with CM 2 the arrivals come from both CTAs' consumers, and the
                    // plain CTA-scope wait is enough (see tw2_mbar_arrive_cluster)
                    twg_mbar_wait(bar_empty + 8 * s, ph ^ 1u);
                    twg_mbar_arrive_expect_tx(bar_full + 8 * s, TWG_STAGE_BYTES);
                    const uint32_t sa = base + s * TWG_STAGE_BYTES, sb = sa + TWG_A_BYTES;
                    twg_tma_load_2d(sa, &tmX, bar_full + 8 * s, kt * TWG_BK, ma);  // rows >= M: zero fill
                    if (CM > 1) {
                        tw2_tma_load_2d_mc(sb + rank * TW2_HALF_B_BYTES, &tmW, bar_full + 8 * s, kt * TWG_BK,
                                           n0 + 128 * (int)rank, (uint16_t)((1u << CM) - 1u));
                    } else {
                        twg_tma_load_2d(sb, &tmW, bar_full + 8 * s, kt * TWG_BK, n0);
                        twg_tma_load_2d(sb + TW2_HALF_B_BYTES, &tmW, bar_full + 8 * s, kt * TWG_BK, n0 + 128);
                    }
                }
            }
        } else if (PK && warp >= 1 && warp <= TW2_PACKERS) {
            // Packers: the staged tile -> TwELL, one warp per row (twell_pack_kernel's scheme).
            const int pw = warp - 1;
            unsigned long long my_nnz = 0;
            uint32_t tcount = 0;
            for (int u = cid; u < ctiles; u += ncl, tcount++) {
                const int m0 = ((u / num_n) * CM + (int)rank) * TWG_BM, tn = u % num_n;
                twg_mbar_wait(bar_sfull, tcount & 1u);
                for (int r = pw; r < TWG_BM; r += TW2_PACKERS) {
                    const int row = m0 + r;
                    if (row >= M) break;  // rows grow with r (warp-uniform)
                    const uint4 v = tw2_lds128(stg + (uint32_t)r * TW2_STG_PITCH + 16u * (uint32_t)lane);
                    const uint32_t w4[4] = {v.x, v.y, v.z, v.w};
                    uint32_t mask = 0;  // bit e: column 8 lane + e is active (bf16 > 0)
#pragma unroll
                    for (int e = 0; e < 8; e++) mask |= twg_bf16_pos((w4[e >> 1] >> ((e & 1) * 16)) & 0xFFFFu) << e;
                    const int c = __popc(mask);
                    const int incl = warp_scan_incl(c);
                    const int total = __shfl_sync(0xffffffffu, incl, 31);
                    int k = incl - c;  // first slot (0-based) of this lane's entries
                    uint32_t *out = tw + (size_t)row * row_words + (size_t)tn * words;
                    if (mask) {
#pragma unroll
                        for (int e = 0; e < 8; e++) {
                            if (mask & (1u << e)) {
                                if (k < S) out[1 + k] = (((w4[e >> 1] >> ((e & 1) * 16)) & 0xFFFFu) << 16) |
                                                        (uint32_t)(lane * 8 + e);
                                k++;
                            }
                        }
                    }
                    twell_tile_finish(out, total, S, words, lane, 32);
                    if (lane == 0) {
                        my_nnz += (unsigned long long)total;
                        if (total > S) twell_flag_overflow(row, ovf_flag, ovf_list, counters);
                    }
                }
                twg_mbar_arrive(bar_sempty);  // every packer thread (count 96): its reads of the tile are done
            }
            if (lane == 0 && my_nnz) atomicAdd(&counters->nnz, my_nnz);
        }
    } else {
        if (!PK) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int c = wg - 1;  // consumer: rows 64c .. 64c + 63 of the tile
        const int tid = threadIdx.x - 128 * wg, warp = tid >> 5, lane = tid & 31, q = lane & 3;
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; i++) d[i] = 0.0f;
        unsigned long long nnz = 0;
        // PK 0: the previous tile's short epilogue deferred under this tile's k steps 1 and 2 (twg_fo_part, as
        // TWELL_GATE_WGMMA_FO in gate_wgmma.cuh): pend parts left, p its row-1 words, pw0 / pw1 row 0's activity
        // words (its values in the scratch), prow / pout its first row and output tile.
        const uint32_t scratch = twg_fe_scratch(bar_sempty + 8u, 128 * c + tid);
        uint32_t p[64];
        int pend = 0, prow = 0;
        uint32_t pw0 = 0, pw1 = 0, *pout = tw;
        uint32_t it = 0, tcount = 0;
        for (int u = cid; u < ctiles; u += ncl, tcount++) {
            const int m0 = ((u / num_n) * CM + (int)rank) * TWG_BM, tn = u % num_n;
            for (int kt = 0; kt < KT; kt++, it++) {
                const uint32_t s = it % STAGES, ph = (it / STAGES) & 1u;
                twg_mbar_wait(bar_full + 8 * s, ph);
                const uint32_t sa = base + s * TWG_STAGE_BYTES + (uint32_t)c * (64 * 128);  // 64 rows x 128 B
                const uint32_t sb = base + s * TWG_STAGE_BYTES + TWG_A_BYTES;
                twg_kstep(d, sa, sb, kt == 0);
                if (kt > 0) {  // the previous k step's group is done: release its stage (in every CTA)
                    twg_wgmma_wait<1>();
                    twg_fence_acc(d);
                    if (tid == 0) {
                        const uint32_t bar = bar_empty + 8 * ((it - 1) % STAGES);
                        if (CM > 1) {
#pragma unroll
                            for (uint32_t r = 0; r < (uint32_t)CM; r++) tw2_mbar_arrive_cluster(bar, r);
                        } else {
                            twg_mbar_arrive(bar);
                        }
                    }
                }
                if (!PK && pend && kt > 0)
                    twg_fo_part(pend--, p, pw0, pw1, prow, M, q, lane, scratch, tid & 7, pout, row_words, words, S,
                                ovf_flag, ovf_list, counters, nnz);
            }
            while (!PK && pend)  // KT <= 2: the parts the k steps left
                twg_fo_part(pend--, p, pw0, pw1, prow, M, q, lane, scratch, tid & 7, pout, row_words, words, S,
                            ovf_flag, ovf_list, counters, nnz);
            twg_wgmma_wait<0>();
            twg_fence_acc(d);
            if (tid == 0) {
                const uint32_t bar = bar_empty + 8 * ((it - 1) % STAGES);
                if (CM > 1) {
#pragma unroll
                    for (uint32_t r = 0; r < (uint32_t)CM; r++) tw2_mbar_arrive_cluster(bar, r);
                } else {
                    twg_mbar_arrive(bar);
                }
            }
            if (PK) {
                // Stage the tile as bf16: thread (warp, lane) holds rows 16 warp + lane/4 (+ 8) of this WG's 64,
                // columns 8j + 2q (+1): one b32 store per pair, 64 per thread. Wait until the packers are done
                // with the previous tile (parity trick: tile 0 passes at once).
                twg_mbar_wait(bar_sempty, (tcount & 1u) ^ 1u);
                const uint32_t r0 = stg + (uint32_t)(64 * c + 16 * warp + (lane >> 2)) * TW2_STG_PITCH + 4u * (uint32_t)q;
#pragma unroll
                for (int j = 0; j < 32; j++) {
                    tw2_sts32(r0 + 16u * j, twg_bf16x2_bits(d[4 * j], d[4 * j + 1]));
                    tw2_sts32(r0 + 8u * TW2_STG_PITCH + 16u * j, twg_bf16x2_bits(d[4 * j + 2], d[4 * j + 3]));
                }
                twg_mbar_arrive(bar_sfull);  // release: the stores above are visible to the packers' acquire
            } else {
                // The short epilogue of twell/gate_wgmma.cuh, deferred (TWELL_GATE_WGMMA_FO's): row 0 stashed now.
#pragma unroll
                for (int j = 0; j < 32; j++) {
                    p[2 * j] = twg_bf16x2_bits(d[4 * j], d[4 * j + 1]);
                    p[2 * j + 1] = twg_bf16x2_bits(d[4 * j + 2], d[4 * j + 3]);
                }
                prow = m0 + 64 * c + 16 * warp + (lane >> 2);
                pout = tw + (size_t)prow * row_words + (size_t)tn * words;
                twg_fe_stash<0>(p, scratch, tid & 7, pw0, pw1);
                pend = 2;
            }
#pragma unroll
            for (int i = 0; i < 128; i++) d[i] = 0.0f;
        }
        if (!PK) {
            while (pend)  // the last tile's epilogue
                twg_fo_part(pend--, p, pw0, pw1, prow, M, q, lane, scratch, tid & 7, pout, row_words, words, S,
                            ovf_flag, ovf_list, counters, nnz);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) nnz += __shfl_xor_sync(0xffffffffu, nnz, o);
            if (lane == 0 && nnz) atomicAdd(&counters->nnz, nnz);
        }
    }
    // No CTA of a cluster may exit while its peer can still arrive on its barriers / multicast into it.
    if (CM > 1) tw2_cluster_sync();
}

// ---------------------------------------------------------------------------------------------------
// Host side.
// ---------------------------------------------------------------------------------------------------
template <int CM, int PK>
static inline int twell_gate_wgmma2_launch_t(const bf16 *X, const bf16 *W, int M, int D, int F, int C, uint32_t *tw,
                                             int *ovf_flag, int *ovf_list, TwellCounters *counters,
                                             cudaStream_t stream, int max_ctas) {
    int e = twell_gate_wgmma_check(X, W, M, D, F, C);
    if (e) return e;
    TwgEncodeTiledFn enc = twg_encode_fn();
    if (!enc) return TWELL_ERR_ARG;
    CUtensorMap tmX, tmW;
    if ((e = twg_make_map(enc, &tmX, X, M, D, TWG_BM, "X"))) return e;
    if ((e = twg_make_map(enc, &tmW, W, F, D, 128, "Wg (half tiles)"))) return e;
    auto kern = twell_gate_wgmma2_kernel<CM, PK>;
    const int smem = Tw2Cfg<PK>::SMEM;
    // Per (CM, PK) instantiation: smem attribute set once, co-resident clusters queried once (static cache;
    // a device change within one process is not supported by this cache, like twg_encode_fn).
    static int max_clusters = 0;
    if (!max_clusters) {
        cudaCheck(cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, smem));
        const int sms = cuda_sm_count();
        max_clusters = sms / CM;
        if (CM > 1) {
            cudaLaunchAttribute attr[1];
            attr[0].id = cudaLaunchAttributeClusterDimension;
            attr[0].val.clusterDim.x = CM; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
            cudaLaunchConfig_t cfg = {};
            cfg.gridDim = dim3(CM * max_clusters); cfg.blockDim = dim3(TWG_THREADS); cfg.dynamicSmemBytes = smem;
            cfg.attrs = attr; cfg.numAttrs = 1;
            int n = 0;
            if (cudaOccupancyMaxActiveClusters(&n, kern, &cfg) != cudaSuccess || n <= 0) {
                (void)cudaGetLastError();
                fprintf(stderr, "error: twell wgmma gate (cluster %d): cudaOccupancyMaxActiveClusters failed or 0 "
                                "(%d bytes of shared memory per CTA)\n", CM, smem);
                return TWELL_ERR_ARG;
            }
            if (n < max_clusters) max_clusters = n;
        }
    }
    const long long ctiles = (long long)CEIL_DIV(CEIL_DIV(M, TWG_BM), CM) * (F / TWG_BN);
    int cap = max_clusters;
    if (max_ctas > 0 && max_ctas / CM < cap) cap = max_ctas / CM > 0 ? max_ctas / CM : 1;
    const int nclusters = (int)(ctiles < cap ? ctiles : cap);
    cudaLaunchAttribute attr[1];
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = CM; attr[0].val.clusterDim.y = 1; attr[0].val.clusterDim.z = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = dim3(CM * nclusters);
    cfg.blockDim = dim3(TWG_THREADS);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = CM > 1 ? 1 : 0;
    const int words = TWELL_TILE / C;
    cudaCheck(cudaLaunchKernelEx(&cfg, kern, tmX, tmW, M, D, F, words, tw, ovf_flag, ovf_list, counters));
    cudaCheckLaunch();
    return TWELL_OK;
}

// variant: TWELL_GATE_WGMMA_C2, TWELL_GATE_WGMMA_PK or TWELL_GATE_WGMMA_C2PK (twell/gate.cuh). max_ctas > 0
// caps the persistent grid (rounded down to whole clusters, at least one cluster); 0 = as many as fit.
static inline int twell_gate_wgmma2_launch(int variant, const bf16 *X, const bf16 *W, int M, int D, int F, int C,
                                           uint32_t *tw, int *ovf_flag, int *ovf_list, TwellCounters *counters,
                                           cudaStream_t stream, int max_ctas = 0) {
    switch (variant) {
    case TWELL_GATE_WGMMA_C2:
        return twell_gate_wgmma2_launch_t<2, 0>(X, W, M, D, F, C, tw, ovf_flag, ovf_list, counters, stream, max_ctas);
    case TWELL_GATE_WGMMA_PK:
        return twell_gate_wgmma2_launch_t<1, 1>(X, W, M, D, F, C, tw, ovf_flag, ovf_list, counters, stream, max_ctas);
    case TWELL_GATE_WGMMA_C2PK:
        return twell_gate_wgmma2_launch_t<2, 1>(X, W, M, D, F, C, tw, ovf_flag, ovf_list, counters, stream, max_ctas);
    default:
        fprintf(stderr, "error: twell_gate_wgmma2_launch: variant %d is not a wgmma2 variant (%d, %d, %d)\n", variant,
                TWELL_GATE_WGMMA_C2, TWELL_GATE_WGMMA_PK, TWELL_GATE_WGMMA_C2PK);
        return TWELL_ERR_ARG;
    }
}

#endif  // SLLM_TWELL_GATE_WGMMA2_CUH
