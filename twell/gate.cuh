// twell/gate.cuh: gate kernel, G = relu(X Wg^T) written as TwELL (layout: twell/format.h).
//
//   X  [M, D] bf16 row-major, Wg [F, D] bf16 row-major (nn.Linear weight), out tw uint32 [M, F/C].
//   Also: ovf_flag int [M] (1 = overflow row; must be zero on entry), ovf_list int [M] (the overflow
//   rows, in no particular order, first counters->n_ovf entries valid), counters->nnz (sum of the true
//   tile counts = number of active gates). Nothing is lost on overflow: the row is listed and a dense
//   fallback recomputes it (twell/ffn.cuh).
//
// Variant TWELL_GATE_CUBLAS_PACK (the simplest): rows are processed in chunks of
// chunk_rows; per chunk a cuBLASLt GEMM writes bf16 [chunk, F] into a scratch buffer (small enough to
// stay in L2: 2048 x 5632 x 2 B = 23 MB), then twell_pack_kernel packs it. cuBLASLt rounds the fp32
// accumulator to bf16 round-to-nearest, which is exactly the value the format stores.
//
// Variant TWELL_GATE_WGMMA_FO (twell/gate_wgmma.cuh, the DEFAULT on Hopper since run 111: 1.7-3.9% faster than
// WGMMA_FE at M 16384-131072): one persistent Hopper kernel, TMA + wgmma GEMM whose epilogue writes the TwELL
// directly (no scratch, no chunks), with a short epilogue (twg_fe_stash / twg_fe_emit) run under the next tile's
// k steps 1 and 2. TWELL_GATE_WGMMA_FE (the default from run 96 to 111): the same epilogue at the tile's end;
// TWELL_GATE_WGMMA: round 1's longer epilogue (twg_pack_row, slower). Variants
// TWELL_GATE_WGMMA_C2 / _PK / _C2PK (twell/gate_wgmma2.cuh): the same with 2-CTA clusters + Wg multicast,
// and/or the pack moved to packer warps working on a staged tile while the consumers run the next tile.
//
// Variant TWELL_GATE_CUBLAS_PACK_OVERLAP: the same GEMMs and pack kernel, but the pack of chunk i runs on
// a side stream while the GEMM of chunk i+1 runs (two scratch buffers); the packs fill the GEMM's tail
// wave and launch gaps. Same output bit for bit (the pack is per row and tile).
//
// Variant TWELL_GATE_CUBLAS_MASK (the default before run 96, and still on GPUs other than Hopper): as the
// overlapped one, but each
// chunk's GEMM uses cuBLASLt's RELU_AUX epilogue, which also writes a 1-bit-per-element mask of the
// positive products; twell_pack_mask_kernel then reads F/8 bytes of mask per row and only the ~nnz flagged
// values instead of the whole 2F-byte row (the full pack re-reads the GEMM's entire output: ~0.5 ms at
// M 65536). Same TwELL bit for bit.
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
    int sl_rows;             // of those: rows whose block did not fit the sliced up/down's slot area
    int n_heavy;             // split up/down: non-overflow rows with >= TWELL_SPLIT_HEAVY active units
    int bu_rows;             // split up/down, blocked up: rows of blocks over its capacity (run by the token-major up)
    unsigned long long nnz_sparse;  // token-major up/downs (fused, split): active units of the NON-overflow rows
} TwellCounters;

enum {
    TWELL_GATE_CUBLAS_PACK = 0,          // GEMM chunk, pack chunk, GEMM chunk, ... on the caller's stream
    TWELL_GATE_CUBLAS_PACK_OVERLAP = 1,  // pack of chunk i (side stream) overlaps the GEMM of chunk i+1
    TWELL_GATE_WGMMA = 2,                // Hopper wgmma + TMA GEMM with the pack in its epilogue (twell/gate_wgmma.cuh)
    // twell/gate_wgmma2.cuh (same bits as TWELL_GATE_WGMMA):
    TWELL_GATE_WGMMA_C2 = 3,    // + 2-CTA clusters, the Wg tile TMA-multicast to both CTAs
    TWELL_GATE_WGMMA_PK = 4,    // + packer warps on a staged bf16 tile (epilogue overlapped with the next mainloop)
    TWELL_GATE_WGMMA_C2PK = 5,  // both
    TWELL_GATE_CUBLAS_MASK = 6,  // (default off Hopper) as CUBLAS_PACK_OVERLAP, but the GEMM also writes cuBLASLt's ReLU bit-mask and
                                 // the pack reads the mask + the active values only (twell_pack_mask_kernel)
    TWELL_GATE_WGMMA_FE = 7,     // as TWELL_GATE_WGMMA with the fast epilogue (twg_fe_pack_row)
    TWELL_GATE_WGMMA_FO = 8,     // (default) as WGMMA_FE, its epilogue run under the next tile's k steps 1 and 2
    TWELL_GATE_NUM_VARIANTS = 9,
};
// The default gate: the wgmma gate TWELL_GATE_WGMMA_BEST, since run 96 measured TWELL_GATE_WGMMA_FE faster than
// the cuBLASLt mask path at every M (256..131072, bench_ffn's "gates" lines, H200) with the same bits
// (test_twell), and runs 111 and 113 WGMMA_FO 1.7-3.9% faster than WGMMA_FE at M 16384-131072 (equal within
// 0.001 ms at M 256-2048). Build with -DTWELL_GATE_DEFAULT_WGMMA=0 for the cuBLASLt mask path. A wgmma default falls
// back to the cuBLASLt mask path on a GPU without sm_90a (twell_gate_forward, one warning).
#ifndef TWELL_GATE_DEFAULT_WGMMA
#define TWELL_GATE_DEFAULT_WGMMA 1
#endif
#ifndef TWELL_GATE_WGMMA_BEST
#define TWELL_GATE_WGMMA_BEST TWELL_GATE_WGMMA_FO  // the fastest measured (runs 111, 113)
#endif
#if TWELL_GATE_DEFAULT_WGMMA
#define TWELL_GATE_DEFAULT TWELL_GATE_WGMMA_BEST
#else
#define TWELL_GATE_DEFAULT TWELL_GATE_CUBLAS_MASK
#endif
// Rows per gate chunk (GEMM + pack) of a new workspace. Measured (H200, M 65536, F 5632): the mask gate is
// fastest at 16384-32768 (2.37-2.47 ms), 8192 costs ~0.03-0.1 ms more; the full-pack overlap is slowest at
// every size (2.63-2.80 ms).
#define TWELL_GATE_DEFAULT_CHUNK 16384

// 1 for the Hopper-only variants (one persistent kernel, no chunks, no scratch).
static inline int twell_gate_is_wgmma(int v) {
    return (v >= TWELL_GATE_WGMMA && v <= TWELL_GATE_WGMMA_C2PK) || v == TWELL_GATE_WGMMA_FE || v == TWELL_GATE_WGMMA_FO;
}

static inline const char *twell_gate_variant_name(int v) {
    switch (v) {
    case TWELL_GATE_CUBLAS_PACK: return "cublas_pack";
    case TWELL_GATE_CUBLAS_PACK_OVERLAP: return "cublas_pack_overlap";
    case TWELL_GATE_WGMMA: return "wgmma";
    case TWELL_GATE_WGMMA_C2: return "wgmma_c2";
    case TWELL_GATE_WGMMA_PK: return "wgmma_pk";
    case TWELL_GATE_WGMMA_C2PK: return "wgmma_c2pk";
    case TWELL_GATE_CUBLAS_MASK: return "cublas_mask";
    case TWELL_GATE_WGMMA_FE: return "wgmma_fe";
    case TWELL_GATE_WGMMA_FO: return "wgmma_fo";
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
__global__ void __launch_bounds__(TWELL_PACK_THREADS)
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
// with the values bit for bit (TWELL_GATE_CUBLAS_MASK against the CPU packer).
// One warp per (row, 4 tiles): lane l reads mask word l % 8 of tile 4q + l / 8 (32 columns), the 8 lanes of a
// tile form their slots by a segmented scan (column order, no atomics: deterministic), as twell_pack_kernel.
__global__ void __launch_bounds__(TWELL_PACK_THREADS)
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

// One chunk of the cuBLASLt gate: the GEMM (with the bit-mask epilogue when mask != NULL and cuBLASLt has an
// algorithm for it; else the plain GEMM, *mask_failed set) into scratch, then the matching pack.
static inline void twell_gate_chunk(MatmulContext *mm, const bf16 *X, const bf16 *W, int rows, int r0, int D, int F,
                                    int C, bf16 *scratch, uint32_t *mask, int *mask_failed, uint32_t *tw,
                                    int *ovf_flag, int *ovf_list, TwellCounters *counters, cudaStream_t gemm_stream,
                                    cudaStream_t pack_stream, cudaEvent_t gemm_done) {
    const bf16 *x = X + (size_t)r0 * D;
    int use_mask = mask && !*mask_failed;
    if (use_mask && matmul_relu_mask(mm, scratch, mask, x, W, rows, F, D, gemm_stream) != 0) {
        *mask_failed = 1;
        use_mask = 0;
        fprintf(stderr, "warning: twell: cuBLASLt has no algorithm for the ReLU bit-mask epilogue (M=%d F=%d D=%d): "
                        "the gate falls back to the plain GEMM + full pack\n", rows, F, D);
    }
    if (!use_mask) matmul(mm, scratch, 0, x, 0, W, 1, rows, F, D, 1.0f, 0.0f, gemm_stream);
    if (gemm_done) {
        cudaCheck(cudaEventRecord(gemm_done, gemm_stream));
        cudaCheck(cudaStreamWaitEvent(pack_stream, gemm_done, 0));
    }
    if (use_mask) twell_pack_mask_launch(scratch, mask, rows, r0, F, C, tw, ovf_flag, ovf_list, counters, pack_stream);
    else twell_pack_launch(scratch, rows, r0, F, C, tw, ovf_flag, ovf_list, counters, pack_stream);
}

// Robust gate: cuBLASLt GEMM in chunks into scratch [chunk_rows, F] bf16, then pack. The caller has
// zeroed ovf_flag[0..M) and *counters on this stream.
static inline void twell_gate_cublas_pack(MatmulContext *mm, const bf16 *X, const bf16 *W, int M, int D, int F, int C,
                                          bf16 *scratch, int chunk_rows, uint32_t *tw, int *ovf_flag, int *ovf_list,
                                          TwellCounters *counters, cudaStream_t stream) {
    int no_mask = 1;
    for (int r0 = 0; r0 < M; r0 += chunk_rows) {
        int rows = M - r0 < chunk_rows ? M - r0 : chunk_rows;
        twell_gate_chunk(mm, X, W, rows, r0, D, F, C, scratch, NULL, &no_mask, tw, ovf_flag, ovf_list, counters, stream,
                         stream, NULL);
    }
}

// Overlapped gate: GEMMs stay on `stream` (they share the cuBLASLt workspace of mm, so they must stay
// serialized); chunk i is packed on pack_stream (created cudaStreamNonBlocking, so it does not sync
// with the legacy default stream) while the GEMM of chunk i+1 runs. Two scratch buffers
// (scratch[0], scratch[1], each [chunk_rows, F]) alternate; ev_gemm[b] = "GEMM into buffer b done",
// ev_pack[b] = "pack of buffer b done" (the GEMM that next overwrites b waits for it). At the end
// `stream` waits for every pack, so the result is ordered on `stream` like the serial variant. The
// pack writes only disjoint rows of tw; ovf_flag/ovf_list/counters use atomics, so packs of two
// chunks may even run concurrently. Capturable in a CUDA graph (event fork/join).
// mask (NULL: plain GEMM + full pack): two bit-mask buffers [chunk_rows, F/32] for TWELL_GATE_CUBLAS_MASK;
// *mask_failed is set (and the plain path used) if cuBLASLt offers no algorithm for the mask epilogue.
static inline void twell_gate_cublas_pack_overlap(MatmulContext *mm, const bf16 *X, const bf16 *W, int M, int D, int F,
                                                  int C, bf16 *const scratch[2], uint32_t *const mask[2],
                                                  int *mask_failed, int chunk_rows, uint32_t *tw, int *ovf_flag,
                                                  int *ovf_list, TwellCounters *counters, cudaStream_t stream,
                                                  cudaStream_t pack_stream, cudaEvent_t ev_gemm[2],
                                                  cudaEvent_t ev_pack[2]) {
    int used[2] = {0, 0};
    for (int i = 0, r0 = 0; r0 < M; i++, r0 += chunk_rows) {
        const int b = i & 1;
        const int rows = M - r0 < chunk_rows ? M - r0 : chunk_rows;
        if (used[b]) cudaCheck(cudaStreamWaitEvent(stream, ev_pack[b], 0));  // buffer b free again
        twell_gate_chunk(mm, X, W, rows, r0, D, F, C, scratch[b], mask ? mask[b] : NULL, mask_failed, tw, ovf_flag,
                         ovf_list, counters, stream, pack_stream, ev_gemm[b]);
        cudaCheck(cudaEventRecord(ev_pack[b], pack_stream));
        used[b] = 1;
    }
    for (int b = 0; b < 2; b++)
        if (used[b]) cudaCheck(cudaStreamWaitEvent(stream, ev_pack[b], 0));
}

#endif  // SLLM_TWELL_GATE_CUH
