// dev/bench/bench_coresident.cu: can the up/down's L2 gather hide under the gate GEMM on the same SMs?
//
//   build/bench_coresident [--M 65536] [--nnz 29] [--reps 10]
//
// The question behind twell/README.md's one untried design for issue 5's speed target (the sparse FFN at nnz 29 in
// at most 1.6x the gate GEMM): the gate GEMM is bound by the tensor cores, the token-major up/down by the L2 gather
// of whole weight rows (~1.58 ms at nnz 29, M 65536 on an H200). Run on separate streams they do not overlap
// (cuBLASLt's kernels take a whole SM). Would they overlap inside ONE persistent kernel,
// a gather warpgroup next to the wgmma warpgroups? This probe measures it with the up/down's memory traffic alone
// (no dependency between the two, no epilogue pack, no arithmetic beyond a light use of each row): an upper bound
// on what the real fused kernel could reach.
//
// Kernel (384 threads = 3 warpgroups, one CTA per SM, persistent; twell/gate_wgmma.cuh's mainloop and helpers):
//   WG 0     setmaxnreg 40. Warp 0, thread 0: the TMA loads of X [128 x 64] + Wg [256 x 64] per stage (STAGES
//            stages of 48 KB) for the 128 x 256 tiles t = blockIdx.x, + grid, ... (n fastest), as round 1.
//            Warps 1-3: the gather (coresident_gather): whole 4 KB rows of Wud (Wu and Wd stacked: 2F rows, 46 MB)
//            copied by cp.async.bulk into a ring of RW row slots per warp, read from shared memory by that warp.
//            Rows: rows_per_cta random rows (bench_random_row), the CTA's share of M x 2 x nnz.
//   WG 1, 2  consumers: setmaxnreg 232; wgmma m64n256k16 over the stages (round 1's mainloop), then a cheap
//            epilogue (the accumulators' sum, stored only if it equals a value it never takes).
// (A 4th warpgroup for the gather does not fit: 512 threads leave 128 registers per thread at launch, and ptxas
// needs >= 154 to compile a wgmma with 128 accumulators; it does not count setmaxnreg.)
// Modes of the same kernel: gemm only (rows_per_cta 0), gather only (gemm_on 0), both; gemm_on 2 = the GEMM with
// its Wg tiles loaded only once (see the probe columns in main). The gather by whole-row bulk copies (ASYNC 0) or by
// per-lane 16-byte cp.async (ASYNC 1).
// Shared memory: STAGES x 48 KB + 3 RW x 4 KB <= 227 KB: (STAGES, RW) = (4, 2), (3, 6), (2, 10).
//
// References in the same process (same inputs): the cuBLASLt gate GEMM [M, D] x [D, F] -> bf16 (bench_ffn's
// "gate" column), the full-grid 16-byte-load gather (bench_l2_gather<8>, one CTA of 128 threads per token: the
// up/down's floor), both one after the other, and round 1's wgmma gate -> TwELL (the same mainloop, 4 stages, with
// its fused pack epilogue).
// Inputs: bench_gen.cuh's uniform gates at the given mean nnz (round 1's pack epilogue sees the real sparsity).
// Timing: interleaved rounds (every column once per round, rotated start), CUDA events, medians.
// Hang guard: every mbarrier wait fails the launch after TWELL_WGMMA_TIMEOUT_NS (twell/gate_wgmma.cuh).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <functional>
#include <string>
#include <vector>

#include "cuda_common.cuh"
#include "matmul.cuh"
#include "tc_utils.cuh"
#include "twell/gate_wgmma.cuh"
#include "dev/bench/bench_gen.cuh"
#include "dev/bench/bench_rows.cuh"

#define CR_THREADS 384     // round 1's 3 warpgroups
#define CR_ROW_BYTES 4096  // one weight row: D = 2048 bf16

static constexpr int cr_smem_bytes(int stages, int ring) {
    return stages * TWG_STAGE_BYTES + ring * CR_ROW_BYTES + (2 * stages + ring) * 8 + 1024;
}

// The gather warps (1-3 of warpgroup 0, 40 registers). Warp w (0..2) takes rows j = w, w + 3, ... of the CTA's
// share and has its own ring of RW row slots (no handshake between warps): lane 0 keeps RW rows in flight
// (cp.async.bulk of whole 4 KB rows, one mbarrier per slot); the warp reads each row from shared memory (8 x 16 B per
// lane: 64 bf16 -> 64 FMAs, as the up's dot or the down's axpy would), then lane 0 refills the slot.
// ASYNC 1: each lane copies its own 8 chunks of the row with cp.async (16 B, L2 only) instead, one commit group per
// row, and waits for its own copies (cp.async.wait_group RW - 1): no mbarrier, no bulk-copy issue by one lane.
__device__ __forceinline__ void cr_async_row(uint4 *row, const uint4 *src, int lane) {
#pragma unroll
    for (int k = 0; k < 8; k++) tc_cp_async16(row + lane + 32 * k, src + lane + 32 * k, 16);
    tc_cp_async_commit();
}

template <int RW, int ASYNC>
__device__ __forceinline__ void coresident_gather(uint4 *ring, uint32_t bar_rfull, const uint4 *__restrict__ Wud,
                                                  int nrows, int rows_per_cta, uint32_t seed, float *sink) {
    constexpr int ROW = CR_ROW_BYTES / 16;  // uint4 per row
    const int g = threadIdx.x - 32, w = g >> 5, lane = g & 31;
    const int nw = rows_per_cta > w ? (rows_per_cta - w + 2) / 3 : 0;  // rows j = w + 3 i < rows_per_cta
    uint4 *my_ring = ring + w * RW * ROW;
    const uint32_t my_bar = bar_rfull + 8u * (uint32_t)(w * RW);
    for (int i = 0; i < RW; i++) {
        const uint4 *src = Wud + (size_t)bench_random_row(seed, blockIdx.x, w + 3 * i, nrows) * 256;
        if (ASYNC) {
            if (i < nw) cr_async_row(my_ring + i * ROW, src, lane);
            else tc_cp_async_commit();  // empty groups keep the count of RW
        } else if (lane == 0 && i < nw) {
            hp_mbar_arrive_expect_tx(my_bar + 8 * i, CR_ROW_BYTES);
            hp_bulk_copy(tc_smem_u32(my_ring + i * ROW), src, CR_ROW_BYTES, my_bar + 8 * i);
        }
    }
    const float xw = 1.0f + 1e-3f * g;  // stands for the token's x (up) or h (down)
    float acc[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};  // independent chains (the down's y columns)
    for (int i = 0; i < nw; i++) {
        const uint32_t s = i % RW, ph = (i / RW) & 1u;
        if (ASYNC) tc_cp_async_wait<RW - 1>();  // this lane's row i has landed
        else twg_mbar_wait(my_bar + 8 * s, ph);
        uint4 *row = my_ring + s * ROW;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            const uint4 q = row[lane + 32 * k];
            const uint32_t v[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int e = 0; e < 4; e++) {
                acc[2 * e] = fmaf(__uint_as_float(v[e] << 16), xw, acc[2 * e]);
                acc[2 * e + 1] = fmaf(__uint_as_float(v[e] & 0xFFFF0000u), xw, acc[2 * e + 1]);
            }
        }
#pragma unroll
        for (int e = 0; e < 8; e++) asm volatile("" ::"f"(acc[e]));  // the reads are consumed before the slot is reused
        __syncwarp();
        const uint4 *next = Wud + (size_t)bench_random_row(seed, blockIdx.x, w + 3 * (i + RW), nrows) * 256;
        if (ASYNC) {
            if (i + RW < nw) cr_async_row(row, next, lane);
            else tc_cp_async_commit();
        } else if (lane == 0 && i + RW < nw) {
            hp_mbar_arrive_expect_tx(my_bar + 8 * s, CR_ROW_BYTES);
            hp_bulk_copy(tc_smem_u32(row), next, CR_ROW_BYTES, my_bar + 8 * s);
        }
    }
    float total = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) total += acc[e];
    if (total == 1234.5f) sink[blockIdx.x] = total;  // never in practice: keeps the reads
}

template <int STAGES, int RW, int ASYNC>
__global__ void __launch_bounds__(CR_THREADS, 1)
coresident_kernel(const __grid_constant__ CUtensorMap tmX, const __grid_constant__ CUtensorMap tmW, int M, int D,
                  int F, int gemm_on, const uint4 *__restrict__ Wud, int nrows, int rows_per_cta, uint32_t seed,
                  float *sink) {
    extern __shared__ uint8_t cr_smem_raw[];
    const uint32_t base = (hp_smem_addr(cr_smem_raw) + 1023u) & ~1023u;
    constexpr int RING = 3 * RW;                            // 3 gather warps x RW slots
    const uint32_t ring = base + STAGES * TWG_STAGE_BYTES;  // RING rows of 4 KB (generic pointer: ring_ptr)
    uint4 *ring_ptr = reinterpret_cast<uint4 *>(cr_smem_raw + (ring - hp_smem_addr(cr_smem_raw)));
    const uint32_t bar_full = ring + RING * CR_ROW_BYTES, bar_empty = bar_full + 8 * STAGES;
    const uint32_t bar_rfull = bar_empty + 8 * STAGES;
    const int num_n = F / TWG_BN, num_m = (M + TWG_BM - 1) / TWG_BM;
    const int tiles = gemm_on ? num_m * num_n : 0, KT = D / TWG_BK;  // gemm_on: 0 off, 1 on, 2 Wg loaded once
    const int wg = threadIdx.x / 128;

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            hp_mbar_init(bar_full + 8 * s, 1);
            hp_mbar_init(bar_empty + 8 * s, 2);
        }
        for (int s = 0; s < RING; s++) hp_mbar_init(bar_rfull + 8 * s, 1);
        hp_fence_barrier_init();
    }
    __syncthreads();

    if (wg == 0) {  // producer: warp 0 issues the TMA loads, warps 1-3 gather (40 + 2 x 232 registers per 3 threads)
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;\n" ::: "memory");
        if (threadIdx.x == 0) {
            uint32_t it = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const int m0 = (t / num_n) * TWG_BM, n0 = (t % num_n) * TWG_BN;
                for (int kt = 0; kt < KT; kt++, it++) {
                    const uint32_t s = it % STAGES, ph = (it / STAGES) & 1u;
                    twg_mbar_wait(bar_empty + 8 * s, ph ^ 1u);
                    const bool load_b = gemm_on == 1 || it < (uint32_t)STAGES;  // mode 2: B stays in the stages
                    hp_mbar_arrive_expect_tx(bar_full + 8 * s, load_b ? TWG_STAGE_BYTES : TWG_A_BYTES);
                    const uint32_t sa = base + s * TWG_STAGE_BYTES;
                    hp_tma_load_2d(sa, &tmX, bar_full + 8 * s, kt * TWG_BK, m0);
                    if (load_b) hp_tma_load_2d(sa + TWG_A_BYTES, &tmW, bar_full + 8 * s, kt * TWG_BK, n0);
                }
            }
        } else if (threadIdx.x >= 32) {
            coresident_gather<RW, ASYNC>(ring_ptr, bar_rfull, Wud, nrows, rows_per_cta, seed, sink);
        }
    } else {  // consumers
        asm volatile("setmaxnreg.inc.sync.aligned.u32 232;\n" ::: "memory");
        const int c = wg - 1, tid = threadIdx.x - 128 * wg;
        float d[128];
#pragma unroll
        for (int i = 0; i < 128; i++) d[i] = 0.0f;
        float total = 0.0f;
        uint32_t it = 0;
        for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
            for (int kt = 0; kt < KT; kt++, it++) {
                const uint32_t s = it % STAGES, ph = (it / STAGES) & 1u;
                twg_mbar_wait(bar_full + 8 * s, ph);
                const uint32_t sa = base + s * TWG_STAGE_BYTES + (uint32_t)c * (64 * 128);
                const uint32_t sb = base + s * TWG_STAGE_BYTES + TWG_A_BYTES;
                twg_kstep(d, sa, sb, kt == 0);
                if (kt > 0) {
                    hp_wgmma_wait<1>();
                    twg_fence_acc(d);
                    if (tid == 0) hp_mbar_arrive(bar_empty + 8 * ((it - 1) % STAGES));
                }
            }
            hp_wgmma_wait<0>();
            twg_fence_acc(d);
            if (tid == 0) hp_mbar_arrive(bar_empty + 8 * ((it - 1) % STAGES));
#pragma unroll
            for (int i = 0; i < 128; i++) total += d[i];
        }
        if (total == 1234.5f) sink[blockIdx.x] = total;  // never in practice: keeps the epilogue
    }
}

template <int STAGES, int RW, int ASYNC>
static void coresident_launch(const CUtensorMap &tmX, const CUtensorMap &tmW, int M, int D, int F, int gemm_on,
                              const uint4 *Wud, int nrows, int rows_per_cta, uint32_t seed, float *sink, int grid) {
    constexpr int smem = cr_smem_bytes(STAGES, 3 * RW);
    static_assert(smem <= 232448, "more shared memory than an H100/H200 SM has");
    static bool attr = false;
    if (!attr) {
        cudaCheck(cudaFuncSetAttribute(coresident_kernel<STAGES, RW, ASYNC>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       smem));
        attr = true;
    }
    coresident_kernel<STAGES, RW, ASYNC><<<grid, CR_THREADS, smem, 0>>>(tmX, tmW, M, D, F, gemm_on, Wud, nrows,
                                                                   rows_per_cta, seed, sink);
    cudaCheckLaunch();
}

int main(int argc, char **argv) {
    int M = 65536, reps = 10;
    float nnz = 29;
    CliOpt opts[] = {
        {"M", 0, CLI_INT, &M, "rows (tokens), a multiple of 128", 128, 1 << 20, 0},
        {"nnz", 0, CLI_FLOAT, &nnz, "mean active units per token (the gather: 2 nnz rows of 4 KB per token)", 0.5, 2816, 0},
        {"reps", 0, CLI_INT, &reps, "interleaved rounds (medians)", 1, 100000, 0},
        {NULL, 0, CLI_INT, NULL, NULL, 0, 0, 0},
    };
    cli_parse(argc, argv, opts, "bench_coresident",
              "Hopper: can the up/down's L2 gather hide under the gate GEMM on the same SMs (one persistent kernel:\n"
              "wgmma warpgroups beside gather warps)? Columns: the header of dev/bench/bench_coresident.cu.");
    if (M % 128) cli_fail("bench_coresident", "option --M: %d is not a multiple of 128", M);
    cuda_require_device("bench_coresident");
    const int D = 2048, F = 5632, nrows = 2 * F;  // Wud: Wu and Wd rows stacked, 46 MB
    int sms = cuda_sm_count();
    bf16 *X, *Wg, *G;
    uint4 *Wud;
    float *sink;
    uint32_t *out;
    cudaCheck(cudaMalloc(&X, (size_t)M * D * sizeof(bf16)));
    cudaCheck(cudaMalloc(&Wg, (size_t)F * D * sizeof(bf16)));
    cudaCheck(cudaMalloc(&G, (size_t)M * F * sizeof(bf16)));
    cudaCheck(cudaMalloc(&Wud, (size_t)nrows * CR_ROW_BYTES));
    cudaCheck(cudaMalloc(&sink, 1024 * sizeof(float)));
    cudaCheck(cudaMalloc(&out, (size_t)M * sizeof(uint32_t)));
    bench_fill_normal<<<1024, 256>>>(X, (long long)M * D, 1.0f, 11);
    bench_fill_normal<<<1024, 256>>>(Wg, (long long)F * D, 1.0f / sqrtf((float)D), 12);
    bench_fill_normal<<<1024, 256>>>((bf16 *)Wud, (long long)nrows * D, 0.02f, 13);
    bench_set_col0<<<(F + 255) / 256, 256>>>(Wg, F, D, 1.0f);  // gates at the given mean nnz (bench_gen.cuh), uniform
    bench_set_bias<<<(M + 7) / 8, 256>>>(X, M, D, F, (float)nnz, 0);
    cudaCheckLaunch();
    cudaCheck(cudaDeviceSynchronize());

    HpEncodeTiledFn enc = hp_encode_fn();
    CUtensorMap tmX, tmW;
    if (!enc || twg_make_map(enc, &tmX, X, M, D, TWG_BM, "X") || twg_make_map(enc, &tmW, Wg, F, D, TWG_BN, "Wg")) {
        fprintf(stderr, "bench_coresident: no tensor maps (needs a Hopper GPU and its driver)\n");
        return 1;
    }
    MatmulContext mm;
    matmul_context_init(&mm);

    // The up/down's traffic: per token 2 x nnz rows of 4 KB (nnz up rows of Wu, nnz down rows of Wd).
    const long long rows_total = (long long)llround(2.0 * nnz * M);
    const int rows_per_cta = (int)((rows_total + sms - 1) / sms);  // persistent probe: the share of one CTA
    const int rows_per_token = (int)llround(2.0 * nnz);            // full-grid gather: one CTA per token
    const double gbytes = (double)rows_total * CR_ROW_BYTES / 1e9;

    struct Col { std::string name; std::function<void(int)> fn; std::vector<float> t; };
    std::vector<Col> cols;
    auto add = [&](const char *name, std::function<void(int)> fn) { cols.push_back({name, fn, {}}); };
    add("cublas_gemm", [&](int) { matmul(&mm, G, 0, X, 0, Wg, 1, M, F, D, 1.0f, 0.0f, 0); });
    add("gather_full", [&](int s) {
        bench_l2_gather<8><<<M, 128, 0, 0>>>(Wud, nrows, 256, rows_per_token, 77 + s, out);
    });
    uint32_t *tw;  // round 1's gate -> TwELL (twell/gate_wgmma.cuh: the same mainloop with its fused pack epilogue)
    int *ovf_flag, *ovf_list;
    TwellCounters *counters;
    cudaCheck(cudaMalloc(&tw, (size_t)M * (F / 8) * sizeof(uint32_t)));
    cudaCheck(cudaMalloc(&ovf_flag, (size_t)M * sizeof(int)));
    cudaCheck(cudaMalloc(&ovf_list, (size_t)M * sizeof(int)));
    cudaCheck(cudaMalloc(&counters, sizeof(TwellCounters)));
    add("wgmma_gate", [&](int) {
        cudaCheck(cudaMemsetAsync(ovf_flag, 0, (size_t)M * sizeof(int), 0));
        cudaCheck(cudaMemsetAsync(counters, 0, sizeof(TwellCounters), 0));
        if (twell_gate_wgmma_launch(X, Wg, M, D, F, 8, tw, ovf_flag, ovf_list, counters, 0)) exit(1);
    });
    add("cublas_then_gather", [&](int s) {
        matmul(&mm, G, 0, X, 0, Wg, 1, M, F, D, 1.0f, 0.0f, 0);
        bench_l2_gather<8><<<M, 128, 0, 0>>>(Wud, nrows, 256, rows_per_token, 77 + s, out);
    });
    // Probe columns: gemm alone, gather alone, both; name p<stages>x<slots per warp><b = bulk | a = cp.async>[r].
    // "r": the GEMM loads its Wg tile only into the first STAGES stages and then reuses them (wrong products, same
    // tensor work, a third of the GEMM's L2 bytes): what the combined kernel does when the GEMM's L2 traffic is cut.
#define CR_COLS(ST, RG, AS, GM, NAME)                                                                              \
    add(NAME "_gemm", [&](int s) {                                                                                 \
        coresident_launch<ST, RG, AS>(tmX, tmW, M, D, F, GM, Wud, nrows, 0, 77 + s, sink, sms);                    \
    });                                                                                                            \
    add(NAME "_gather", [&](int s) {                                                                               \
        coresident_launch<ST, RG, AS>(tmX, tmW, M, D, F, 0, Wud, nrows, rows_per_cta, 77 + s, sink, sms);          \
    });                                                                                                            \
    add(NAME "_both", [&](int s) {                                                                                 \
        coresident_launch<ST, RG, AS>(tmX, tmW, M, D, F, GM, Wud, nrows, rows_per_cta, 77 + s, sink, sms);         \
    });
    CR_COLS(4, 2, 0, 1, "p4x2b")
    CR_COLS(3, 6, 0, 1, "p3x6b")
    CR_COLS(4, 2, 1, 1, "p4x2a")
    CR_COLS(3, 6, 1, 1, "p3x6a")
    CR_COLS(3, 6, 1, 2, "p3x6ar")
    CR_COLS(2, 10, 1, 1, "p2x10a")
#undef CR_COLS

    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("bench_coresident on %s (%d SMs, L2 %d MB): M %d, D %d, F %d; gather: %.1f rows of 4 KB per token (nnz %g, "
           "up + down) = %.2f GB from %d rows (%.0f MB); %d CTAs x %d rows in the probe; %d interleaved rounds\n",
           prop.name, sms, prop.l2CacheSize >> 20, M, D, F, 2.0 * nnz, nnz, gbytes, nrows,
           nrows * (double)CR_ROW_BYTES / 1e6, sms, rows_per_cta, reps);
    fflush(stdout);
    for (Col &c : cols) {  // warm-up (and the first launch of each probe sets its shared-memory attribute)
        c.fn(0);
        cudaCheck(cudaDeviceSynchronize());
    }
    for (int r = 0; r < reps; r++) {
        for (size_t k = 0; k < cols.size(); k++) {
            Col &c = cols[(k + r) % cols.size()];
            cudaCheck(cudaEventRecord(e0));
            c.fn(1 + r % 3);
            cudaCheck(cudaEventRecord(e1));
            cudaCheck(cudaEventSynchronize(e1));
            float ms = 0;
            cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
            c.t.push_back(ms);
        }
        printf("  round %d/%d done\n", r + 1, reps);
        fflush(stdout);
    }
    std::vector<float> med;
    for (Col &c : cols) med.push_back(median(c.t));
    const float gate = med[0], gat = med[1], r1 = med[2];
    printf("\nreferences (ms): cuBLASLt gate GEMM %.3f (%.0f TFLOP/s); full-grid gather %.3f (%.2f TB/s); one after the "
           "other %.3f; target for the sparse FFN (1.6 x gate) %.3f; round 1's wgmma gate -> TwELL (C 8) %.3f = %.3f x gate\n",
           gate, 2.0 * M * D * F / gate / 1e9, gat, gbytes / gat, med[3], 1.6 * gate, r1, r1 / gate);
    printf("%-10s %9s %9s %9s %9s %11s %9s %10s %10s\n", "probe", "gemm", "gather", "both", "gather TB/s", "both/max",
           "both/sum", "both/gate", "gemm/gate");
    for (size_t k = 4; k + 2 < cols.size(); k += 3) {
        const float g = med[k], a = med[k + 1], b = med[k + 2];
        std::string name = cols[k].name.substr(0, cols[k].name.find('_'));
        printf("%-10s %9.3f %9.3f %9.3f %11.2f %9.3f %9.3f %10.3f %10.3f\n", name.c_str(), g, a, b, gbytes / a,
               b / std::max(g, a), b / (g + a), b / gate, g / gate);
    }
    printf("(stages x row slots per gather warp; both/max 1.0 = the gather fully hidden under the GEMM, both/sum 1.0 = no overlap)\n");
    matmul_context_free(&mm);
    return 0;
}
