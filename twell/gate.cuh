// twell/gate.cuh: gate kernel, G = relu(X Wg^T) written as TwELL (layout: twell/format.h).
//
//   X  [M, D] bf16 row-major, Wg [F, D] bf16 row-major (nn.Linear weight), out tw uint32 [M, F/C].
//   Also: ovf_flag int [M] (1 = overflow row; must be zero on entry), ovf_list int [M] (the overflow
//   rows, in no particular order, first counters->n_ovf entries valid), counters->nnz (sum of the true
//   tile counts = number of active gates). Nothing is lost on overflow: the row is listed and a dense
//   fallback recomputes it (twell/ffn.cuh).
//
// Two implementations, the same TwELL bit for bit (test/gpu/test_twell.cu checks both against the CPU packer):
//   TWELL_GATE_WGMMA (twell/gate_wgmma.cuh, the default on Hopper): one persistent TMA + wgmma kernel whose epilogue
//     writes the TwELL directly (no dense gate matrix in memory).
//   TWELL_GATE_CUBLAS (this file; the default on any other GPU): per chunk of chunk_rows rows, a cuBLASLt GEMM with
//     the RELU_AUX epilogue writes the bf16 gate [chunk, F] into a scratch buffer plus a 1-bit mask of the positive
//     products, then twell_pack_mask_kernel reads F/8 bytes of mask per row and only the ~nnz flagged values. The
//     pack of chunk i runs on a side stream while the GEMM of chunk i+1 runs (two scratch buffers). cuBLASLt rounds
//     the fp32 accumulator to bf16 round-to-nearest, which is exactly the value the format stores. If cuBLASLt has
//     no algorithm for the mask epilogue, the plain GEMM runs and twell_pack_kernel scans the whole row (warned once
//     per workspace).
//
// twell_pack_kernel: one warp per (row, tile); lane l holds columns 8l..8l+7 of the tile (one 16-byte
// load), positive mask -> popc -> warp inclusive scan (shfl_up) gives each lane its first slot, so the
// slots are in column order with no atomics (deterministic). Every word of the tile is written once
// (count, entries, zero padding).
#ifndef SLLM_TWELL_GATE_CUH
#define SLLM_TWELL_GATE_CUH

#include "cuda_common.cuh"
#include "matmul.cuh"
#include "twell/format.h"

// Device-side statistics of one gate call (zeroed before the call).
typedef struct {
    unsigned long long nnz;  // sum over rows and tiles of the true count
    int n_ovf;               // number of overflow rows (entries valid in ovf_list)
    int n_heavy;             // split up/down: non-overflow rows with >= TWELL_SPLIT_HEAVY active units
    unsigned long long nnz_sparse;  // up/down kernels: active units of the NON-overflow rows
} TwellCounters;

enum {
    TWELL_GATE_WGMMA = 0,   // Hopper TMA + wgmma GEMM with the pack in its epilogue (twell/gate_wgmma.cuh)
    TWELL_GATE_CUBLAS = 1,  // cuBLASLt GEMM with the ReLU bit-mask epilogue + twell_pack_mask_kernel, chunked
    TWELL_GATE_NUM_VARIANTS = 2,
};
// The default gate: the wgmma kernel (on the H200 at M 65536, D 2048, F 5632: 2.0 ms against 2.1-2.3 for the
// cuBLASLt path, the same bits). It falls back to TWELL_GATE_CUBLAS on a GPU without sm_90a (twell_gate_forward,
// one warning). Build with -DTWELL_GATE_DEFAULT_WGMMA=0 to make the cuBLASLt path the default everywhere.
#ifndef TWELL_GATE_DEFAULT_WGMMA
#define TWELL_GATE_DEFAULT_WGMMA 1
#endif
#if TWELL_GATE_DEFAULT_WGMMA
#define TWELL_GATE_DEFAULT TWELL_GATE_WGMMA
#else
#define TWELL_GATE_DEFAULT TWELL_GATE_CUBLAS
#endif
// Rows per chunk (GEMM + pack) of the cuBLASLt gate. Measured (H200, M 65536, F 5632): fastest at 16384-32768
// rows (2.37-2.47 ms); 8192 costs ~0.03-0.1 ms more.
#define TWELL_GATE_DEFAULT_CHUNK 16384

static inline const char *twell_gate_variant_name(int v) {
    switch (v) {
    case TWELL_GATE_WGMMA: return "wgmma";
    case TWELL_GATE_CUBLAS: return "cublas_mask";
    default: return "?";
    }
}

#define TWELL_PACK_THREADS 256

// ---- pieces every pack (here and in the wgmma epilogues) shares ----
// The end of one packed tile (out = its first word): the count word (the TRUE count) and zero padding past the
// used slots. The lanes first, first + step, ... of the group that packed the tile share the words.
__device__ __forceinline__ void twell_tile_finish(uint32_t *out, int total, int slots, int words, int first,
                                                  int step) {
    const int used = total < slots ? total : slots;
    for (int w = first; w < words; w += step) {
        if (w == 0) out[0] = (uint32_t)total;
        else if (w > used) out[w] = 0u;
    }
}
// Lists `row` as an overflow row exactly once: every tile of the row with total > slots calls this (one lane
// per tile); the flag decides which call appends the row to the list.
__device__ __forceinline__ void twell_flag_overflow(int row, int *ovf_flag, int *ovf_list, TwellCounters *counters) {
    if (atomicExch(&ovf_flag[row], 1) == 0) ovf_list[atomicAdd(&counters->n_ovf, 1)] = row;
}
// Adds the non-zeros counted by the warps of a block (warp_nnz: the warp's sum, valid in lane 0) to
// counters->nnz with one atomic per block. Every thread of the block must call it.
template <int WARPS>
__device__ __forceinline__ void twell_block_add_nnz(unsigned long long warp_nnz, TwellCounters *counters) {
    __shared__ unsigned long long s_nnz[WARPS];
    if ((threadIdx.x & 31) == 0) s_nnz[threadIdx.x >> 5] = warp_nnz;
    __syncthreads();
    if (threadIdx.x == 0) {
        unsigned long long sum = 0;
        for (int i = 0; i < WARPS; i++) sum += s_nnz[i];
        if (sum) atomicAdd(&counters->nnz, sum);
    }
}

// dense: [rows, F] bf16 (row stride F) = rows row0..row0+rows-1 of the gate. Writes those rows of tw.
static __global__ void __launch_bounds__(TWELL_PACK_THREADS)
twell_pack_kernel(const bf16 *__restrict__ dense, int rows, int row0, int F, int words, uint32_t *__restrict__ tw,
                  int *__restrict__ ovf_flag, int *__restrict__ ovf_list, TwellCounters *__restrict__ counters) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int tiles = F / TWELL_TILE, slots = words - 1, row_words = tiles * words;
    const long long items = (long long)rows * tiles;
    const long long wstride = (long long)gridDim.x * (TWELL_PACK_THREADS / 32);
    unsigned long long my_nnz = 0;
    for (long long it = (long long)blockIdx.x * (TWELL_PACK_THREADS / 32) + warp; it < items; it += wstride) {
        const int r = (int)(it / tiles), t = (int)(it - (long long)r * tiles);
        const uint4 v = *reinterpret_cast<const uint4 *>(dense + (size_t)r * F + (size_t)t * TWELL_TILE + lane * 8);
        const uint32_t w4[4] = {v.x, v.y, v.z, v.w};
        uint32_t mask = 0;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            uint32_t bits = (w4[e >> 1] >> ((e & 1) * 16)) & 0xFFFFu;
            float f = __uint_as_float(bits << 16);
            if (f > 0.0f) mask |= 1u << e;
        }
        const int c = __popc(mask);
        const int incl = warp_scan_incl(c);
        const int total = __shfl_sync(0xffffffffu, incl, 31);
        int k = incl - c;  // first slot (0-based) of this lane's entries
        uint32_t *out = tw + (size_t)(row0 + r) * row_words + (size_t)t * words;
#pragma unroll
        for (int e = 0; e < 8; e++) {
            if (mask & (1u << e)) {
                if (k < slots) {
                    uint32_t bits = (w4[e >> 1] >> ((e & 1) * 16)) & 0xFFFFu;
                    out[1 + k] = (bits << 16) | (uint32_t)(lane * 8 + e);
                }
                k++;
            }
        }
        twell_tile_finish(out, total, slots, words, lane, 32);
        if (lane == 0) {
            my_nnz += (unsigned long long)total;
            if (total > slots) twell_flag_overflow(row0 + r, ovf_flag, ovf_list, counters);
        }
    }
    twell_block_add_nnz<TWELL_PACK_THREADS / 32>(my_nnz, counters);
}

// Grid of a pack kernel over `items` warp items: grid-stride, at most 16 blocks per SM (bounded atomics on nnz).
static inline int twell_pack_grid(long long items) {
    const long long blocks = CEIL_DIV(items, TWELL_PACK_THREADS / 32), cap = (long long)cuda_sm_count() * 16;
    return (int)(blocks < cap ? blocks : cap);
}

static inline void twell_pack_launch(const bf16 *dense, int rows, int row0, int F, int C, uint32_t *tw,
                                     int *ovf_flag, int *ovf_list, TwellCounters *counters, cudaStream_t stream) {
    if (rows <= 0) return;
    const int blocks = twell_pack_grid((long long)rows * (F / TWELL_TILE));
    twell_pack_kernel<<<blocks, TWELL_PACK_THREADS, 0, stream>>>(dense, rows, row0, F, TWELL_TILE / C, tw,
                                                                     ovf_flag, ovf_list, counters);
    cudaCheckLaunch();
}

// Pack from the ReLU bit-mask: dense = relu'd gate rows (bf16 [rows, F]), mask = cuBLASLt's bit-mask of the same
// rows (uint32 [rows, F/32]; bit n % 32 of word n / 32 set where the product was positive). Reads the mask
// (F/8 bytes per row) and only the flagged values, instead of the whole bf16 row. A flagged value must also be
// > 0 after rounding to bf16 to be stored (the TwELL rule), so a mask bit on a value that rounds to +0 changes
// nothing; a positive value without a mask bit would be lost -- test_twell checks that cuBLASLt's mask agrees
// with the values bit for bit (TWELL_GATE_CUBLAS against the CPU packer).
// One warp per (row, 4 tiles): lane l reads mask word l % 8 of tile 4q + l / 8 (32 columns), the 8 lanes of a
// tile form their slots by a segmented scan (column order, no atomics: deterministic), as twell_pack_kernel.
static __global__ void __launch_bounds__(TWELL_PACK_THREADS)
twell_pack_mask_kernel(const bf16 *__restrict__ dense, const uint32_t *__restrict__ mask, int rows, int row0, int F,
                       int words, uint32_t *__restrict__ tw, int *__restrict__ ovf_flag, int *__restrict__ ovf_list,
                       TwellCounters *__restrict__ counters) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, sub = lane & 7;
    const int tiles = F / TWELL_TILE, quads = (tiles + 3) / 4, slots = words - 1, row_words = tiles * words;
    const long long items = (long long)rows * quads;
    const long long wstride = (long long)gridDim.x * (TWELL_PACK_THREADS / 32);
    unsigned long long my_nnz = 0;
    for (long long it = (long long)blockIdx.x * (TWELL_PACK_THREADS / 32) + warp; it < items; it += wstride) {
        const int r = (int)(it / quads), t = (int)(it - (long long)r * quads) * 4 + (lane >> 3);
        const bool valid = t < tiles;  // uniform per 8-lane segment
        const uint32_t m = valid ? __ldcs(mask + (size_t)r * (F / 32) + (size_t)t * 8 + sub) : 0u;
        const bf16 *drow = dense + (size_t)r * F + (size_t)t * TWELL_TILE + sub * 32;
        uint32_t vm = 0;
        for (uint32_t mm = m; mm; mm &= mm - 1) {  // a few set bits per lane (sparse rows), up to 32 (dense rows)
            const int b = __ffs(mm) - 1;
            if (__bfloat162float(drow[b]) > 0.0f) vm |= 1u << b;
        }
        const int c = __popc(vm);
        int incl = c;
#pragma unroll
        for (int o = 1; o < 8; o <<= 1) {
            const int n = __shfl_up_sync(0xffffffffu, incl, o, 8);
            if (sub >= o) incl += n;
        }
        const int total = __shfl_sync(0xffffffffu, incl, 7, 8);
        if (valid) {
            uint32_t *out = tw + (size_t)(row0 + r) * row_words + (size_t)t * words;
            int k = incl - c;
            for (uint32_t mm = vm; mm && k < slots; mm &= mm - 1, k++) {  // second read of the values: L1 hits
                const int b = __ffs(mm) - 1;
                out[1 + k] = ((uint32_t)__bfloat16_as_ushort(drow[b]) << 16) | (uint32_t)(sub * 32 + b);
            }
            twell_tile_finish(out, total, slots, words, sub, 8);
            if (sub == 0) {
                my_nnz += (unsigned long long)total;
                if (total > slots) twell_flag_overflow(row0 + r, ovf_flag, ovf_list, counters);
            }
        }
    }
    unsigned long long wsum = my_nnz;  // lanes 0, 8, 16, 24 hold the counts of their tiles
#pragma unroll
    for (int o = 8; o < 32; o <<= 1) wsum += __shfl_xor_sync(0xffffffffu, wsum, o);
    twell_block_add_nnz<TWELL_PACK_THREADS / 32>(wsum, counters);
}

static inline void twell_pack_mask_launch(const bf16 *dense, const uint32_t *mask, int rows, int row0, int F, int C,
                                          uint32_t *tw, int *ovf_flag, int *ovf_list, TwellCounters *counters,
                                          cudaStream_t stream) {
    if (rows <= 0) return;
    const int blocks = twell_pack_grid((long long)rows * ((F / TWELL_TILE + 3) / 4));
    twell_pack_mask_kernel<<<blocks, TWELL_PACK_THREADS, 0, stream>>>(dense, mask, rows, row0, F, TWELL_TILE / C,
                                                                          tw, ovf_flag, ovf_list, counters);
    cudaCheckLaunch();
}

// One chunk of the cuBLASLt gate: the GEMM (with the bit-mask epilogue when cuBLASLt has an algorithm for it; else
// the plain GEMM, *mask_failed set) into scratch, then the matching pack on pack_stream after gemm_done.
static inline void twell_gate_chunk(MatmulContext *mm, const bf16 *X, const bf16 *W, int rows, int r0, int D, int F,
                                    int C, bf16 *scratch, uint32_t *mask, int *mask_failed, uint32_t *tw,
                                    int *ovf_flag, int *ovf_list, TwellCounters *counters, cudaStream_t gemm_stream,
                                    cudaStream_t pack_stream, cudaEvent_t gemm_done) {
    const bf16 *x = X + (size_t)r0 * D;
    int use_mask = !*mask_failed;
    if (use_mask && matmul_relu_mask(mm, scratch, mask, x, W, rows, F, D, gemm_stream) != 0) {
        *mask_failed = 1;
        use_mask = 0;
        fprintf(stderr, "warning: twell: cuBLASLt has no algorithm for the ReLU bit-mask epilogue (M=%d F=%d D=%d): "
                        "the gate falls back to the plain GEMM + full pack\n", rows, F, D);
    }
    if (!use_mask) matmul(mm, scratch, 0, x, 0, W, 1, rows, F, D, 1.0f, 0.0f, gemm_stream);
    cudaCheck(cudaEventRecord(gemm_done, gemm_stream));
    cudaCheck(cudaStreamWaitEvent(pack_stream, gemm_done, 0));
    if (use_mask) twell_pack_mask_launch(scratch, mask, rows, r0, F, C, tw, ovf_flag, ovf_list, counters, pack_stream);
    else twell_pack_launch(scratch, rows, r0, F, C, tw, ovf_flag, ovf_list, counters, pack_stream);
}

// The cuBLASLt gate: GEMMs stay on `stream` (they share the cuBLASLt workspace of mm, so they must stay
// serialized); chunk i is packed on pack_stream (created cudaStreamNonBlocking, so it does not sync
// with the legacy default stream) while the GEMM of chunk i+1 runs. Two scratch buffers
// (scratch[0], scratch[1], each [chunk_rows, F]) alternate; ev_gemm[b] = "GEMM into buffer b done",
// ev_pack[b] = "pack of buffer b done" (the GEMM that next overwrites b waits for it). At the end
// `stream` waits for every pack, so the result is ordered on `stream`. The
// pack writes only disjoint rows of tw; ovf_flag/ovf_list/counters use atomics, so packs of two
// chunks may even run concurrently. Capturable in a CUDA graph (event fork/join).
// mask: two bit-mask buffers [chunk_rows, F/32]; *mask_failed is set (and the plain GEMM + full pack used) if
// cuBLASLt offers no algorithm for the mask epilogue. The caller has zeroed ovf_flag[0..M) and *counters on `stream`.
static inline void twell_gate_cublas(MatmulContext *mm, const bf16 *X, const bf16 *W, int M, int D, int F, int C,
                                     bf16 *const scratch[2], uint32_t *const mask[2], int *mask_failed, int chunk_rows,
                                     uint32_t *tw, int *ovf_flag, int *ovf_list, TwellCounters *counters,
                                     cudaStream_t stream, cudaStream_t pack_stream, cudaEvent_t ev_gemm[2],
                                     cudaEvent_t ev_pack[2]) {
    int used[2] = {0, 0};
    for (int i = 0, r0 = 0; r0 < M; i++, r0 += chunk_rows) {
        const int b = i & 1;
        const int rows = M - r0 < chunk_rows ? M - r0 : chunk_rows;
        if (used[b]) cudaCheck(cudaStreamWaitEvent(stream, ev_pack[b], 0));  // buffer b free again
        twell_gate_chunk(mm, X, W, rows, r0, D, F, C, scratch[b], mask[b], mask_failed, tw, ovf_flag,
                         ovf_list, counters, stream, pack_stream, ev_gemm[b]);
        cudaCheck(cudaEventRecord(ev_pack[b], pack_stream));
        used[b] = 1;
    }
    for (int b = 0; b < 2; b++)
        if (used[b]) cudaCheck(cudaStreamWaitEvent(stream, ev_pack[b], 0));
}

#endif  // SLLM_TWELL_GATE_CUH
