// twell/ffn.cuh: the TwELL FFN layer API with dense/sparse dispatch.
//
//   gated:     Y = (relu(X Wg^T) * (X Wu^T)) WdT      non-gated (Wg = NULL): Y = relu(X Wu^T) WdT
//   X [M, D] bf16 row-major; Wg, Wu [F, D] bf16 (nn.Linear layout); WdT [F, D] bf16 = down_proj.weight
//   ([D, F]) TRANSPOSED; Y [M, D] bf16, fully written by every path.
//   Shapes: F % 256 == 0, D % 64 == 0, D <= 8192, 1 <= M <= max_M of the workspace; pointers 16-byte
//   aligned. Anything else returns TWELL_ERR_* with a message naming the constraint, Y untouched.
//
// Tile path (a sparse call of M > decode_rows rows): (1) gate -> TwELL (twell/gate.cuh: the wgmma kernel of
// twell/gate_wgmma.cuh on Hopper, the cuBLASLt mask GEMM + pack elsewhere), (2) up+down on every non-overflow row
// (gated: the up and the down as two token-major kernels, twell/updown_split.cuh; non-gated: the fused kernel of
// twell/updown.cuh), (3) overflow rows (a tile with more non-zeros than slots) computed densely. Two modes:
//   ws->tile_sync = 1 (the default): the call waits for the device counts, returns the number of overflow rows and
//     the mean active gates in TwellFFNResult, and runs the overflow rows through the cuBLASLt dense FFN
//     (twell/dense_ffn.cuh) sized by that count.
//   ws->tile_sync = 0 (model/infer_engine.cuh): no host sync. The overflow rows run through the dense-row kernel
//     (twell/dense_rows.cuh), which reads their number on the device; the counts are copied back asynchronously and
//     taken at a later call (TwellFFNResult has -1 for them; twell_ffn_read_tile_stats waits for the newest). The
//     call can be captured in a CUDA graph. When the last counts taken predict more than TWELL_OVF_DEVICE_ROWS
//     overflow rows (a layer that is not sparse: the dense-row GEMM is ~7x slower than cuBLASLt), the call syncs and
//     runs cuBLASLt as in tile_sync 1, counted in ws->tile_host_syncs. D % 128 != 0: always that way.
//
// Decode path (twell/decode.cuh): a sparse call of M <= ws->decode_rows rows (default TWELL_DECODE_MAX_M = 64;
// twell_ffn_set_decode_rows, 0 = off) runs two small kernels instead (tensor-core GEMV gate with the up of its
// active units fused, lists of the active units with no capacity limit; down): no host sync, no overflow rows,
// capturable in a CUDA graph. Its count of active gates is read back at a later call, like the dense path's.
// TwellFFNResult.decode = 1. Its kernels are programmatic dependent launches (twell_ffn_set_decode_pdl): consecutive
// layers overlap.
//
// Dense path: cuBLASLt gate and up GEMMs, relu*mul, down GEMM (chunks of dense_chunk_rows rows).
//
// Dispatch (TWELL_PATH_AUTO): a cost model (TWELL_DISPATCH_*, TwellDispatchModel) predicts the sparse
// / dense time ratio from the estimated mean active gates per token and the overflow-row fraction;
// sparse when it is below 1 - margin, dense above 1 + margin, the previous path in between
// (hysteresis). The estimate is the caller's hint (nnz_hint >= 0), else the previous call's measured
// mean (both paths measure it on the device; the dense path's count is read back at the next call, so
// it costs no sync), else sparse (measures). twell_ffn_calibrate fits the model on real data.
//
// Options (tests and benchmarks): ws->gate_variant (TWELL_GATE_*), twell_ffn_set_gate_chunk (the cuBLASLt gate),
// ws->split_order_mode, twell_ffn_set_decode_rows, twell_ffn_set_decode_pdl, ws->dec_gate_warps, ws->gate_max_ctas,
// ws->gate_cluster.
#ifndef SLLM_TWELL_FFN_CUH
#define SLLM_TWELL_FFN_CUH

#include <algorithm>

#include "cuda_common.cuh"
#include "matmul.cuh"
#include "twell/decode.cuh"
#include "twell/dense_ffn.cuh"
#include "twell/dense_rows.cuh"
#include "twell/dispatch.h"
#include "twell/format.h"
#include "twell/gate.cuh"
#include "twell/gate_wgmma.cuh"
#include "twell/updown.cuh"
#include "twell/updown_split.cuh"

typedef struct {
    int path;            // TWELL_PATH_DENSE or TWELL_PATH_SPARSE: the path that ran
    int n_overflow;      // sparse path: rows computed by the dense fallback; dense path: -1 (not measured)
    double mean_nnz;     // sparse path: mean active gates per token of this call; dense: -1 (read next call)
    int updown;          // tile path: the up/down that ran (TWELL_UPDOWN_SPLIT / _FUSED); else -1
    int decode;          // sparse path: 1 if the decode path ran (M <= decode_rows; then n_overflow 0, mean_nnz -1:
                         // its count is read back at the next call, without a sync)
    int synced;          // tile path: 1 if the call waited for its counts (n_overflow, mean_nnz valid), else 0 (-1s)
} TwellFFNResult;

// Overflow rows a tile-path call without a host sync (tile_sync 0) takes on the device's dense-row kernel; more
// expected (from the last counts taken) and the call syncs for cuBLASLt.
#define TWELL_OVF_DEVICE_ROWS 64

typedef struct TwellFFNWorkspaceTag {
    int max_M, D, F, C, gated;
    int gate_variant;     // TWELL_GATE_* (default TWELL_GATE_DEFAULT)
    int gate_chunk_rows;  // rows per GEMM + pack chunk of the cuBLASLt gate (twell_ffn_set_gate_chunk)
    int gate_scratch_rows;  // rows of gate_scratch / gate_mask allocated (0 until the cuBLASLt gate runs)
    int gate_max_ctas;    // wgmma gate: cap on the persistent grid (0 = all SMs; tests: many tiles per CTA)
    int gate_cluster;     // wgmma gate: CTAs per cluster sharing the Wg tile, 1 or 2 (0 = by device: twg_default_cluster)
    TwellDispatchModel model;
    // device buffers
    uint32_t *tw;                 // [max_M, F/C]
    int *ovf_flag, *ovf_list;     // [max_M]
    TwellCounters *counters;      // device
    TwellCounters *counters_host; // pinned
    unsigned long long *dense_nnz;       // device counter of the paths that do not sync (dense, decode)
    unsigned long long *dense_nnz_host;  // pinned
    cudaEvent_t dense_nnz_ready;
    int dense_nnz_pending, dense_nnz_pending_M;
    unsigned dense_calls;  // dense calls so far: every TWELL_DENSE_COUNT_EVERY-th one is counted
    bf16 *gate_scratch[2];        // 2 x [gate_scratch_rows, F]: the cuBLASLt gate's GEMM output
    uint32_t *gate_mask[2];       // 2 x [gate_scratch_rows, F/32]: its ReLU bit-masks
    int gate_mask_failed;         // cuBLASLt had no algorithm for the mask epilogue: the plain GEMM + full pack run
    int last_updown;              // the up/down of the last tile-path call (TWELL_UPDOWN_*)
    // Split up/down (twell/updown_split.cuh, gated layers), allocated with the workspace when gated: two buffers of
    // pairs [split_rows, P], counts and row orders (2 x 89 MB at the paper's shape). Chunk c runs in buffer c % 2 on
    // `stream` (c even) or pack_stream (c odd), so the tail of one chunk's kernels (a few heavy rows) overlaps the
    // next chunk.
    uint2 *split_pairs[2];
    int *split_cnt[2], *split_order[2];  // [split_rows], [split_rows + 2]
    int split_rows;
    cudaEvent_t ev_split[2];  // fork (stream -> pack_stream), join (pack_stream -> stream)
    // Row order of the split kernels: TWELL_SPLIT_ORDER_AUTO (heavy rows first when the previous sparse call of
    // this workspace had heavy rows, or before the first call; else index order: the order costs a dependent
    // load per CTA, ~0.1 ms at M 65536), _HEAVY_FIRST, _INDEX.
    int split_order_mode;
    int split_last_heavy;     // heavy rows seen by the last sparse call (-1: none yet)
    cudaStream_t pack_stream;     // side stream of the cuBLASLt gate and of the split up/down (non-blocking)
    cudaEvent_t ev_gemm[2], ev_pack[2];
    TwellDenseScratch dense;
    // Tile path without a host sync (tile_sync 0; see the top of this file). The counters of a call are copied to
    // counters_host (one copy in flight: tile_stats_pending) and taken at a later call; the taken counts add up in
    // tile_rows / tile_ovf_rows / tile_nnz. The dense-row kernel of the overflow rows uses dense's buffers (chunks
    // of dense.chunk_rows rows) and dr_part (split-K partials, the owner's).
    int tile_sync;
    cudaEvent_t tile_stats_ready;
    int tile_stats_pending, tile_stats_pending_M;
    long long tile_host_syncs;           // tile-path calls that waited for their counts
    long long tile_rows, tile_ovf_rows;  // rows and overflow rows of the tile-path calls whose counts were taken
    double tile_nnz;                     // their active gates
    float *dr_part;
    int dr_grid, dr_split_F, dr_split_D;  // cooperative grid (0: the kernel cannot run here), split-K parts
    // Decode path (twell/decode.cuh): sparse calls with M <= decode_rows (0: off) run it. Scratch for dec_alloc_rows
    // = min(TWELL_DECODE_MAX_M, max_M) rows: g [rows, F] bf16, cnt [rows, F/16], ent [rows, F] (unit, h).
    int decode_rows, dec_alloc_rows;
    int dec_pdl;  // 1 (default): its kernels are programmatic dependent launches (twell_ffn_set_decode_pdl)
    int dec_gate_warps;  // split-K warps per gate CTA: 0 = twell_decode_gate_warps(M), else 4 or 8 (4 at M > 32)
    // dec_in.gain != NULL (set by the caller around one call, model/infer_engine.cuh): the decode path's GEMV gate
    // (M <= GEMV_MAX_M) computes its input rows itself, X = rmsnorm(dec_in.a + dec_in.b) (core/gemv.cuh's GemvIn: the
    // block's residual add and norm fused), and X is not read. Only for calls that take the decode path.
    GemvIn dec_in;
    bf16 *dec_g;
    int *dec_cnt;
    uint2 *dec_ent;
    TwellDispatchModel dec_model;        // AUTO at M <= decode_rows: twell_decode_predict, see TWELL_DECODE_S0
    TwellDispatchModel dec_model_graph;  // the same under stream capture (TWELL_DECODE_G_*)
    // dispatch state
    double last_mean_nnz;  // -1: unknown
    double last_ovf_frac;
    double last_sparse_share;  // of the last sparse call: active units in non-overflow rows / all active units
    int last_path;         // path of the previous call (0: none yet), for the hysteresis
    // A workspace made by twell_ffn_workspace_create_shared borrows the large buffers (tw, ovf_*, split_*, dense,
    // dec_g/cnt/ent, gate_scratch/mask) of `owner`; it keeps its own counters, events, side stream and dispatch
    // state. Calls on workspaces sharing buffers must be ordered on one stream (layers of one model).
    struct TwellFFNWorkspaceTag *owner;
} TwellFFNWorkspace;

static inline int twell_check_shapes(int M, int D, int F, int C) {
    TwellShape s;
    int e = twell_shape_init(&s, M, F, C);
    if (e) return e;
    if (D <= 0 || D % 64 != 0 || D > 8192) {
        fprintf(stderr, "error: twell: D (d_model) = %d must be a positive multiple of 64 and <= 8192\n", D);
        return TWELL_ERR_SHAPE;
    }
    return TWELL_OK;
}

enum { TWELL_SPLIT_ORDER_AUTO = 0, TWELL_SPLIT_ORDER_HEAVY_FIRST = 1, TWELL_SPLIT_ORDER_INDEX = 2 };

// The split up/down's pairs and counts for one chunk of min(max_M, TWELL_SPLIT_CHUNK) rows.
static inline void twell_ffn_split_alloc(TwellFFNWorkspace *ws) {
    const int P = twell_split_pairs_per_row(ws->F, ws->C);
    ws->split_rows = ws->max_M < TWELL_SPLIT_CHUNK ? ws->max_M : TWELL_SPLIT_CHUNK;
    for (int b = 0; b < 2; b++) {
        cudaCheck(cudaMalloc(&ws->split_pairs[b], sizeof(uint2) * (size_t)ws->split_rows * P));
        cudaCheck(cudaMalloc(&ws->split_cnt[b], sizeof(int) * (size_t)ws->split_rows));
        cudaCheck(cudaMalloc(&ws->split_order[b], sizeof(int) * ((size_t)ws->split_rows + 2)));
    }
}

// The objects every workspace has of its own, borrower or not: the counters (device + pinned), the async count, the
// events and the side stream.
static inline void twell_ffn_own_create(TwellFFNWorkspace *ws) {
    cudaCheck(cudaMalloc(&ws->counters, sizeof(TwellCounters)));
    cudaCheck(cudaMallocHost(&ws->counters_host, sizeof(TwellCounters)));
    cudaCheck(cudaMalloc(&ws->dense_nnz, sizeof(unsigned long long)));
    cudaCheck(cudaMallocHost(&ws->dense_nnz_host, sizeof(unsigned long long)));
    cudaCheck(cudaEventCreateWithFlags(&ws->dense_nnz_ready, cudaEventDisableTiming));
    cudaCheck(cudaEventCreateWithFlags(&ws->tile_stats_ready, cudaEventDisableTiming));
    ws->tile_stats_pending = 0;
    ws->tile_host_syncs = ws->tile_rows = ws->tile_ovf_rows = 0;
    ws->tile_nnz = 0.0;
    for (int b = 0; b < 2; b++) {
        cudaCheck(cudaEventCreateWithFlags(&ws->ev_gemm[b], cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&ws->ev_pack[b], cudaEventDisableTiming));
        cudaCheck(cudaEventCreateWithFlags(&ws->ev_split[b], cudaEventDisableTiming));
    }
    cudaCheck(cudaStreamCreateWithFlags(&ws->pack_stream, cudaStreamNonBlocking));
}
static inline void twell_ffn_own_free(TwellFFNWorkspace *ws) {
    if (ws->dense_nnz_pending) cudaCheck(cudaEventSynchronize(ws->dense_nnz_ready));
    if (ws->tile_stats_pending) cudaCheck(cudaEventSynchronize(ws->tile_stats_ready));
    cudaCheck(cudaStreamSynchronize(ws->pack_stream));
    cudaCheck(cudaStreamDestroy(ws->pack_stream));
    cudaCheck(cudaFree(ws->counters)); cudaCheck(cudaFreeHost(ws->counters_host));
    cudaCheck(cudaFree(ws->dense_nnz)); cudaCheck(cudaFreeHost(ws->dense_nnz_host));
    cudaCheck(cudaEventDestroy(ws->dense_nnz_ready));
    cudaCheck(cudaEventDestroy(ws->tile_stats_ready));
    for (int b = 0; b < 2; b++) {
        cudaCheck(cudaEventDestroy(ws->ev_gemm[b]));
        cudaCheck(cudaEventDestroy(ws->ev_pack[b]));
        cudaCheck(cudaEventDestroy(ws->ev_split[b]));
    }
}

// Allocates everything for up to max_M tokens. Returns TWELL_OK or an error (message printed).
static inline int twell_ffn_workspace_create(TwellFFNWorkspace *ws, int max_M, int D, int F, int C, int gated) {
    memset(ws, 0, sizeof(*ws));
    int e = twell_check_shapes(max_M, D, F, C);
    if (e) return e;
    if (max_M < 1) { fprintf(stderr, "error: twell: max_M must be >= 1\n"); return TWELL_ERR_SHAPE; }
    ws->max_M = max_M; ws->D = D; ws->F = F; ws->C = C; ws->gated = gated ? 1 : 0;
    ws->gate_variant = TWELL_GATE_DEFAULT;
    ws->gate_chunk_rows = TWELL_GATE_DEFAULT_CHUNK;
    ws->model.s0 = TWELL_DISPATCH_S0;
    ws->model.s1 = TWELL_DISPATCH_S1;
    ws->model.fovf = TWELL_DISPATCH_FOVF;
    ws->model.margin = TWELL_DISPATCH_MARGIN;
    ws->dec_model.s0 = TWELL_DECODE_S0;
    ws->dec_model.s1 = TWELL_DECODE_S1;
    ws->dec_model.fovf = 0.0;
    ws->dec_model.sm = TWELL_DECODE_SM;
    ws->dec_model.sn = TWELL_DECODE_SN;
    ws->dec_model.sg4 = TWELL_DECODE_SG4;
    ws->dec_model.margin = TWELL_DISPATCH_MARGIN;
    ws->dec_model_graph = ws->dec_model;
    ws->dec_model_graph.s0 = TWELL_DECODE_G_S0;
    ws->dec_model_graph.s1 = TWELL_DECODE_G_S1;
    ws->dec_model_graph.sm = TWELL_DECODE_G_SM;
    ws->dec_model_graph.sn = TWELL_DECODE_G_SN;
    ws->dec_model_graph.sg4 = TWELL_DECODE_G_SG4;
    ws->last_mean_nnz = -1.0;
    ws->last_ovf_frac = 0.0;
    ws->last_sparse_share = 1.0;
    ws->dense.chunk_rows = 16384;
    if (ws->dense.chunk_rows > max_M) ws->dense.chunk_rows = max_M;
    ws->gate_chunk_rows = ws->gate_chunk_rows < max_M ? ws->gate_chunk_rows : max_M;
    ws->gate_scratch_rows = 0;  // the cuBLASLt gate's scratch: allocated on its first use (twell_ffn_gate_scratch_ensure)
    cudaCheck(cudaMalloc(&ws->tw, sizeof(uint32_t) * (size_t)max_M * (F / C)));
    cudaCheck(cudaMalloc(&ws->ovf_flag, sizeof(int) * (size_t)max_M));
    cudaCheck(cudaMalloc(&ws->ovf_list, sizeof(int) * (size_t)max_M));
    twell_ffn_own_create(ws);
    if (ws->gated) twell_ffn_split_alloc(ws);  // the up/down of gated layers
    ws->split_last_heavy = -1;
    size_t cr = (size_t)ws->dense.chunk_rows;
    cudaCheck(cudaMalloc(&ws->dense.xg, sizeof(bf16) * cr * D));
    cudaCheck(cudaMalloc(&ws->dense.yg, sizeof(bf16) * cr * D));
    // g and u in one allocation, u right after g: [2, chunk_rows, F] is also the packed gu of core/ffn.cuh, so a
    // caller's own dense FFN (infer's AUTO) can run the model's batched gate/up GEMM in it, chunk by chunk
    cudaCheck(cudaMalloc(&ws->dense.g, sizeof(bf16) * 2 * cr * F));
    ws->dense.u = ws->dense.g + cr * F;
    ws->tile_sync = 1;
    if (D % TTG_BN == 0) {  // the dense-row kernel's GEMMs take N % 128 == 0 (N = F and D)
        ws->dr_split_F = tt_split_count(F);
        ws->dr_split_D = tt_split_count(D);
        const size_t a = (size_t)ws->dr_split_F * F, b = (size_t)ws->dr_split_D * D;
        int dev = 0, coop = 0, per_sm = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, tt_dense_rows_fwd_kernel, 256, 0));
        if (coop && per_sm >= 1) {
            ws->dr_grid = cuda_sm_count() * (per_sm < 2 ? per_sm : 2);
            cudaCheck(cudaMalloc(&ws->dr_part, sizeof(float) * (size_t)TT_SPLIT_ROWS * (a > b ? a : b)));
        }
    }
    // The decode path takes F <= TWELL_DEC_MAX_F (twell_decode_forward); past that every sparse call runs the tile path.
    ws->dec_alloc_rows = F > TWELL_DEC_MAX_F ? 0 : max_M < TWELL_DECODE_MAX_M ? max_M : TWELL_DECODE_MAX_M;
    ws->decode_rows = ws->dec_alloc_rows;
    ws->dec_pdl = 1;
    ws->dec_gate_warps = 0;
    memset(&ws->dec_in, 0, sizeof ws->dec_in);
    const size_t dr = (size_t)ws->dec_alloc_rows;
    cudaCheck(cudaMalloc(&ws->dec_g, sizeof(bf16) * dr * F));
    cudaCheck(cudaMalloc(&ws->dec_cnt, sizeof(int) * dr * (F / TWELL_DEC_GROUP)));
    cudaCheck(cudaMalloc(&ws->dec_ent, sizeof(uint2) * dr * F));
    return TWELL_OK;
}

// A workspace for another layer of the same shape that borrows the large buffers of `owner` (made by
// twell_ffn_workspace_create; 0.9 GB per layer at 16384 rows of the 2B preset) and has its own counters, events,
// side stream and dispatch state (the hysteresis, the count read back a call late and the decode settings stay per
// layer). Every call on the owner and its borrowers must be issued in order on one stream: each call joins its side
// stream back before it returns, so the next call may reuse the buffers.
static inline int twell_ffn_workspace_create_shared(TwellFFNWorkspace *ws, TwellFFNWorkspace *owner) {
    if (!owner || owner->owner || !owner->tw) {
        fprintf(stderr, "error: twell_ffn_workspace_create_shared: the owner must be a workspace made by "
                        "twell_ffn_workspace_create\n");
        return TWELL_ERR_ARG;
    }
    *ws = *owner;  // shape, settings, dispatch models and the borrowed buffer pointers
    ws->owner = owner;
    ws->last_mean_nnz = -1.0;
    ws->last_ovf_frac = 0.0;
    ws->last_sparse_share = 1.0;
    ws->last_path = 0;
    ws->split_last_heavy = -1;
    ws->dense_nnz_pending = 0;
    ws->dense_nnz_pending_M = 0;
    ws->dense_calls = 0;
    twell_ffn_own_create(ws);
    return TWELL_OK;
}

// The counts of a tile-path call of M rows (in counters_host, landed) become the dispatch state and add to the totals.
static inline void twell_ffn_take_tile_stats(TwellFFNWorkspace *ws, int M) {
    const TwellCounters *c = ws->counters_host;
    const int n_ovf = c->n_ovf;
    if (n_ovf < 0 || n_ovf > M) SLLM_FATAL("twell: device overflow count %d out of range [0, %d]", n_ovf, M);
    if (ws->last_updown == TWELL_UPDOWN_SPLIT) ws->split_last_heavy = c->n_heavy;
    // The share of the active units in rows the up/down computed (the rest: overflow rows, dense fallback).
    ws->last_sparse_share = c->nnz > 0 ? (double)c->nnz_sparse / (double)c->nnz : 1.0;
    ws->last_mean_nnz = (double)c->nnz / (double)M;
    ws->last_ovf_frac = (double)n_ovf / (double)M;
    ws->tile_rows += M;
    ws->tile_ovf_rows += n_ovf;
    ws->tile_nnz += (double)c->nnz;
}
// Takes the counts of the newest tile-path call without a sync (tile_sync 0) if their copy has landed (wait = 0: never
// blocks) or waiting for it (wait = 1). Returns 1 if counts were taken.
static inline int twell_ffn_poll_tile_stats(TwellFFNWorkspace *ws, int wait) {
    if (!ws->tile_stats_pending) return 0;
    if (wait) cudaCheck(cudaEventSynchronize(ws->tile_stats_ready));
    else {
        const cudaError_t q = cudaEventQuery(ws->tile_stats_ready);
        if (q == cudaErrorNotReady) return 0;
        cudaCheck(q);
    }
    ws->tile_stats_pending = 0;
    twell_ffn_take_tile_stats(ws, ws->tile_stats_pending_M);
    return 1;
}
// For reports and tests: waits for the counts of the newest tile-path call in flight and takes them.
static inline void twell_ffn_read_tile_stats(TwellFFNWorkspace *ws) { twell_ffn_poll_tile_stats(ws, 1); }

// Sparse calls of at most `rows` rows run the decode path (twell/decode.cuh); 0 turns it off (every sparse call
// runs the tile path: gate -> TwELL, up/down, dense fallback). rows in [0, dec_alloc_rows] = [0, min(TWELL_DECODE_MAX_M,
// max_M)], or only 0 when F > 65536 (the decode path does not take such F).
static inline int twell_ffn_set_decode_rows(TwellFFNWorkspace *ws, int rows) {
    if (rows < 0 || rows > ws->dec_alloc_rows) {
        fprintf(stderr, "error: twell_ffn_set_decode_rows: rows=%d must be in [0, %d] (min(TWELL_DECODE_MAX_M, "
                        "max_M); 0 when F > 65536)\n", rows, ws->dec_alloc_rows);
        return TWELL_ERR_ARG;
    }
    ws->decode_rows = rows;
    return TWELL_OK;
}

// The decode path's kernels as programmatic dependent launches (1, the default: a kernel is scheduled while the one
// before it finishes: 0.15-0.65 us per layer as a graph on the H200) or plain launches (0). The results are the same bits
// (test_decode_pdl).
static inline int twell_ffn_set_decode_pdl(TwellFFNWorkspace *ws, int on) {
    if (on != 0 && on != 1) {
        fprintf(stderr, "error: twell_ffn_set_decode_pdl: on=%d must be 0 or 1\n", on);
        return TWELL_ERR_ARG;
    }
    ws->dec_pdl = on;
    return TWELL_OK;
}

// The landed count copy becomes the estimate (the caller has checked that the copy is complete).
static inline void twell_take_count(TwellFFNWorkspace *ws) {
    ws->last_mean_nnz = (double)*ws->dense_nnz_host / (double)ws->dense_nnz_pending_M;
    ws->dense_nnz_pending = 0;
}
// The dense and decode paths count the active gates on the device and the count comes back without a sync, at a
// later call; under stream capture nothing is read back, and AUTO decides with the estimate it has. Call this before
// capturing a graph: it waits for the newest count copy in flight (if any), makes it the estimate and returns it
// (mean active units per row; -1 if none is known yet).
static inline double twell_ffn_read_count(TwellFFNWorkspace *ws) {
    if (ws->dense_nnz_pending) {
        cudaCheck(cudaEventSynchronize(ws->dense_nnz_ready));
        twell_take_count(ws);
    }
    return ws->last_mean_nnz;
}

// The cuBLASLt gate's scratch (2 x [gate_chunk_rows, F] bf16 + their ReLU bit-masks: 392 MB at 16384 rows and
// F 5632), allocated on its first use or grown to gate_chunk_rows (synchronizes the device when it reallocates). The
// wgmma gate (the default on Hopper) never needs it.
static inline void twell_ffn_gate_scratch_ensure(TwellFFNWorkspace *ws) {
    if (ws->owner) {  // a borrower: the owner's scratch, grown to this workspace's chunk
        TwellFFNWorkspace *o = ws->owner;
        if (o->gate_chunk_rows < ws->gate_chunk_rows) o->gate_chunk_rows = ws->gate_chunk_rows;
        twell_ffn_gate_scratch_ensure(o);
        for (int b = 0; b < 2; b++) { ws->gate_scratch[b] = o->gate_scratch[b]; ws->gate_mask[b] = o->gate_mask[b]; }
        ws->gate_scratch_rows = o->gate_scratch_rows;
        return;
    }
    const int rows = ws->gate_chunk_rows;
    if (rows <= ws->gate_scratch_rows) return;
    if (ws->gate_scratch_rows > 0) cudaCheck(cudaDeviceSynchronize());
    for (int b = 0; b < 2; b++) {
        cudaCheck(cudaFree(ws->gate_scratch[b]));
        cudaCheck(cudaFree(ws->gate_mask[b]));
        cudaCheck(cudaMalloc(&ws->gate_scratch[b], sizeof(bf16) * (size_t)rows * ws->F));
        cudaCheck(cudaMalloc(&ws->gate_mask[b], sizeof(uint32_t) * (size_t)rows * (ws->F / 32)));
    }
    ws->gate_scratch_rows = rows;
}

// Sets the gate chunk (rows per GEMM + pack of the cuBLASLt gate); grows its scratch now if it is already
// allocated (else on first use). rows in [1, max_M] (larger is clamped to max_M).
static inline int twell_ffn_set_gate_chunk(TwellFFNWorkspace *ws, int rows) {
    if (rows < 1) {
        fprintf(stderr, "error: twell_ffn_set_gate_chunk: rows=%d must be >= 1\n", rows);
        return TWELL_ERR_ARG;
    }
    if (rows > ws->max_M) rows = ws->max_M;
    ws->gate_chunk_rows = rows;
    if (ws->gate_scratch_rows > 0) twell_ffn_gate_scratch_ensure(ws);
    return TWELL_OK;
}

static inline void twell_ffn_workspace_free(TwellFFNWorkspace *ws) {
    twell_ffn_own_free(ws);
    if (!ws->owner) {  // the owner's large buffers (free the borrowers before their owner)
        cudaCheck(cudaFree(ws->tw)); cudaCheck(cudaFree(ws->ovf_flag)); cudaCheck(cudaFree(ws->ovf_list));
        for (int b = 0; b < 2; b++) {
            cudaCheck(cudaFree(ws->split_pairs[b]));
            cudaCheck(cudaFree(ws->split_cnt[b]));
            cudaCheck(cudaFree(ws->split_order[b]));
            cudaCheck(cudaFree(ws->gate_scratch[b]));
            cudaCheck(cudaFree(ws->gate_mask[b]));
        }
        cudaCheck(cudaFree(ws->dense.xg)); cudaCheck(cudaFree(ws->dense.yg));
        cudaCheck(cudaFree(ws->dense.g));  // u lies in the same allocation
        cudaCheck(cudaFree(ws->dec_g)); cudaCheck(cudaFree(ws->dec_cnt)); cudaCheck(cudaFree(ws->dec_ent));
        cudaCheck(cudaFree(ws->dr_part));
    }
    memset(ws, 0, sizeof(*ws));
}

// The sparse up/down of the FFN on ws->tw: gated layers the split kernels, per chunk of split_rows rows on two
// streams; non-gated layers the fused kernel (Wu unused: the gate kernel ran on it). Sets ws->last_updown.
static inline int twell_ffn_updown(TwellFFNWorkspace *ws, const bf16 *X, const bf16 *Wu, const bf16 *WdT, bf16 *Y,
                                   int M, cudaStream_t stream) {
    const int D = ws->D, F = ws->F;
    if (!ws->gated) {
        ws->last_updown = TWELL_UPDOWN_FUSED;
        return twell_updown_launch(ws->tw, WdT, Y, M, D, F, ws->C, &ws->counters->nnz_sparse, stream);
    }
    ws->last_updown = TWELL_UPDOWN_SPLIT;
    if (!twell_split_supports(D)) {
        fprintf(stderr, "error: twell: the split up/down takes D <= 8192, D %% 8 == 0 (D=%d)\n", D);
        return TWELL_ERR_SHAPE;
    }
    if (ws->split_order_mode < TWELL_SPLIT_ORDER_AUTO || ws->split_order_mode > TWELL_SPLIT_ORDER_INDEX) {
        fprintf(stderr, "error: twell: unknown split_order_mode %d (expected 0..2)\n", ws->split_order_mode);
        return TWELL_ERR_ARG;
    }
    const int words = TWELL_TILE / ws->C;
    const int nchunks = CEIL_DIV(M, ws->split_rows);
    const int heavy_first = ws->split_order_mode == TWELL_SPLIT_ORDER_HEAVY_FIRST ||
                            (ws->split_order_mode == TWELL_SPLIT_ORDER_AUTO && ws->split_last_heavy != 0);
    if (nchunks > 1) {  // fork: pack_stream's chunks start after everything before on `stream` (the gate)
        cudaCheck(cudaEventRecord(ws->ev_split[0], stream));
        cudaCheck(cudaStreamWaitEvent(ws->pack_stream, ws->ev_split[0], 0));
    }
    for (int c = 0; c < nchunks; c++) {
        const int r0 = c * ws->split_rows, rows = M - r0 < ws->split_rows ? M - r0 : ws->split_rows;
        const uint32_t *tw = ws->tw + (size_t)r0 * (F / TWELL_TILE) * words;
        twell_split_launch(tw, X + (size_t)r0 * D, Wu, WdT, Y + (size_t)r0 * D, ws->split_pairs[c & 1],
                           ws->split_cnt[c & 1], heavy_first ? ws->split_order[c & 1] : NULL, &ws->counters->n_heavy,
                           &ws->counters->nnz_sparse, rows, D, F, ws->C, (c & 1) ? ws->pack_stream : stream);
    }
    if (nchunks > 1) {  // join
        cudaCheck(cudaEventRecord(ws->ev_split[1], ws->pack_stream));
        cudaCheck(cudaStreamWaitEvent(stream, ws->ev_split[1], 0));
    }
    return TWELL_OK;
}

// Gate only: X -> ws->tw, ovf list, counters (device). Used by the FFN and by tests.
static inline int twell_gate_forward(MatmulContext *mm, TwellFFNWorkspace *ws, const bf16 *X, const bf16 *W, int M,
                                     cudaStream_t stream) {
    if (M < 1 || M > ws->max_M) {
        fprintf(stderr, "error: twell_gate_forward: M=%d must be in [1, max_M=%d] of the workspace\n", M, ws->max_M);
        return TWELL_ERR_WORKSPACE;
    }
    if (ws->gate_chunk_rows < 1 || ws->gate_chunk_rows > ws->max_M) {
        fprintf(stderr, "error: twell_gate_forward: gate_chunk_rows=%d must be in [1, max_M=%d]\n", ws->gate_chunk_rows,
                ws->max_M);
        return TWELL_ERR_WORKSPACE;
    }
    cudaCheck(cudaMemsetAsync(ws->ovf_flag, 0, sizeof(int) * (size_t)M, stream));
    cudaCheck(cudaMemsetAsync(ws->counters, 0, sizeof(TwellCounters), stream));
    int variant = ws->gate_variant;
#if TWELL_GATE_DEFAULT_WGMMA
    // The wgmma default on a GPU without sm_90a features: the cuBLASLt gate instead (warned once). An explicitly
    // chosen wgmma gate still fails with its error there.
    if (variant == TWELL_GATE_DEFAULT) {
        static int warned = 0;
        int dev = 0, major = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
        if (major != 9) {
            if (!warned) fprintf(stderr, "warning: twell: default gate %s needs a Hopper GPU (sm_%d.x here): using %s\n",
                                 twell_gate_variant_name(variant), major, twell_gate_variant_name(TWELL_GATE_CUBLAS));
            warned = 1;
            variant = TWELL_GATE_CUBLAS;
        }
    }
#endif
    switch (variant) {
    case TWELL_GATE_CUBLAS:
        twell_ffn_gate_scratch_ensure(ws);
        twell_gate_cublas(mm, X, W, M, ws->D, ws->F, ws->C, ws->gate_scratch, ws->gate_mask, &ws->gate_mask_failed,
                          ws->gate_chunk_rows, ws->tw, ws->ovf_flag, ws->ovf_list, ws->counters, stream,
                          ws->pack_stream, ws->ev_gemm, ws->ev_pack);
        return TWELL_OK;
    case TWELL_GATE_WGMMA:
        return twell_gate_wgmma_launch(X, W, M, ws->D, ws->F, ws->C, ws->tw, ws->ovf_flag, ws->ovf_list, ws->counters,
                                       stream, ws->gate_max_ctas, ws->gate_cluster);
    default:
        fprintf(stderr, "error: twell: unknown gate variant %d (expected 0..%d)\n", ws->gate_variant,
                TWELL_GATE_NUM_VARIANTS - 1);
        return TWELL_ERR_ARG;
    }
}


static inline int twell_capturing(cudaStream_t stream) {
    cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
    cudaCheck(cudaStreamIsCapturing(stream, &cap));
    return cap != cudaStreamCaptureStatusNone;
}

// The path a call of M rows takes: `path` itself unless it is AUTO. AUTO first picks up the dense / decode path's
// count of an earlier call if its copy has landed (never waits; not under capture), then decides: sparse while
// nothing is known (the sparse path measures), else the decode model (M <= decode_rows; the graph one under capture)
// or the tile model with hysteresis, on nnz_hint when >= 0, else on the last measured count. Under stream capture (a
// CUDA graph) only the paths without a host sync may run (decode, dense); they skip their count read-back there, and
// the dispatch uses the estimate it has. twell_ffn_forward calls it; a caller that runs its own dense FFN when AUTO
// picks dense calls it first (then twell_ffn_count_begin / _end around that FFN, or twell_ffn_forward with the path).
static inline TwellPath twell_ffn_choose(TwellFFNWorkspace *ws, int M, TwellPath path, double nnz_hint, int capturing) {
    if (ws->dense_nnz_pending && !capturing) {
        cudaError_t q = cudaEventQuery(ws->dense_nnz_ready);
        if (q == cudaSuccess) {
            twell_take_count(ws);
        } else if (q != cudaErrorNotReady) {
            cudaCheck(q);
        }
    }
    if (!capturing) twell_ffn_poll_tile_stats(ws, 0);
    if (path != TWELL_PATH_AUTO) return path;
    if (nnz_hint < 0 && ws->last_mean_nnz < 0) return TWELL_PATH_SPARSE;  // unknown: run sparse, which measures
    if (M <= ws->decode_rows) {  // its own model (M and nnz; no overflow rows), the graph one under capture
        const TwellDispatchModel *dm = capturing ? &ws->dec_model_graph : &ws->dec_model;
        return twell_dispatch_decide_ratio(dm, twell_decode_predict(dm, M, nnz_hint >= 0 ? nnz_hint : ws->last_mean_nnz),
                                           ws->last_path);
    }
    if (nnz_hint >= 0) return twell_dispatch_decide(&ws->model, nnz_hint, 0.0, ws->last_path);  // no overflow assumed
    return twell_dispatch_decide(&ws->model, ws->last_mean_nnz * ws->last_sparse_share, ws->last_ovf_frac,
                                 ws->last_path);
}

// The active-gate count of a call on a path without a host sync (dense, decode, or the caller's own dense FFN):
// count_begin returns the zeroed device counter to pass to the kernels, or NULL (under capture; for dense calls
// (dense = 1) all but every TWELL_DENSE_COUNT_EVERY-th; or while the copy of an earlier count has not landed:
// back-to-back calls, e.g. the layers of a decoding step, are then plain launches);
// count_end issues its copy back, read at a later call (twell_ffn_choose). A caller's own dense FFN then ends with
// twell_ffn_note_dense.
static inline unsigned long long *twell_ffn_count_begin(TwellFFNWorkspace *ws, int capturing, int dense,
                                                        cudaStream_t stream) {
    if (capturing) return NULL;
    if (dense && ws->dense_calls++ % TWELL_DENSE_COUNT_EVERY != 0) return NULL;  // sampled (TWELL_DENSE_COUNT_EVERY)
    if (ws->dense_nnz_pending) return NULL;
    cudaCheck(cudaMemsetAsync(ws->dense_nnz, 0, sizeof(unsigned long long), stream));
    return ws->dense_nnz;
}
static inline void twell_ffn_count_end(TwellFFNWorkspace *ws, unsigned long long *counter, int M, cudaStream_t stream) {
    if (!counter) return;
    cudaCheck(cudaMemcpyAsync(ws->dense_nnz_host, counter, sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream));
    cudaCheck(cudaEventRecord(ws->dense_nnz_ready, stream));
    ws->dense_nnz_pending = 1;
    ws->dense_nnz_pending_M = M;
}
// After a caller's own dense FFN of M rows (counted through count_begin / count_end): the hysteresis state.
static inline void twell_ffn_note_dense(TwellFFNWorkspace *ws) { ws->last_path = TWELL_PATH_DENSE; }

static inline int twell_ffn_forward(MatmulContext *mm, TwellFFNWorkspace *ws, const bf16 *X, const bf16 *Wg,
                                    const bf16 *Wu, const bf16 *WdT, bf16 *Y, int M, TwellPath path, double nnz_hint,
                                    TwellFFNResult *res, cudaStream_t stream) {
    TwellFFNResult r;
    memset(&r, 0, sizeof r);
    r.n_overflow = -1;
    r.mean_nnz = -1.0;
    if (M < 1 || M > ws->max_M) {
        fprintf(stderr, "error: twell_ffn_forward: M=%d must be in [1, max_M=%d] of the workspace\n", M, ws->max_M);
        return TWELL_ERR_WORKSPACE;
    }
    if (!X || !Wu || !WdT || !Y || (ws->gated && !Wg)) {
        fprintf(stderr, "error: twell_ffn_forward: NULL pointer (X=%p Wg=%p Wu=%p WdT=%p Y=%p, gated=%d)\n",
                (const void *)X, (const void *)Wg, (const void *)Wu, (const void *)WdT, (void *)Y, ws->gated);
        return TWELL_ERR_ARG;
    }
    if (((uintptr_t)X | (uintptr_t)Wu | (uintptr_t)WdT | (uintptr_t)Y | (uintptr_t)(ws->gated ? Wg : X)) & 15) {
        fprintf(stderr, "error: twell_ffn_forward: pointers must be 16-byte aligned\n");
        return TWELL_ERR_ARG;
    }
    if (path != TWELL_PATH_AUTO && path != TWELL_PATH_DENSE && path != TWELL_PATH_SPARSE) {
        fprintf(stderr, "error: twell_ffn_forward: unknown path %d\n", (int)path);
        return TWELL_ERR_ARG;
    }
    const int capturing = twell_capturing(stream);
    const int decode = M <= ws->decode_rows;
    path = twell_ffn_choose(ws, M, path, nnz_hint, capturing);
    const bf16 *W1 = ws->gated ? Wg : Wu;
    const int tile_device = !ws->tile_sync && ws->dr_grid > 0;  // overflow rows on the device's count
    if (capturing && path == TWELL_PATH_SPARSE && !decode && !tile_device) {
        fprintf(stderr, "error: twell_ffn_forward: the tile path (M=%d > decode_rows=%d) with tile_sync 1 (or D %% 128 "
                        "!= 0) synchronizes the host and cannot run under stream capture: set tile_sync 0, capture M <= "
                        "decode_rows rows, or the dense path\n", M, ws->decode_rows);
        return TWELL_ERR_ARG;
    }
    // The paths without a host sync (decode, dense) count the active gates into ws->dense_nnz; the count is read
    // back at a later call (not under capture: there the counter is not passed at all). While the copy of an earlier
    // count has not landed yet, a call does not count (no memset, no copy): back-to-back calls (the layers of a
    // decoding step) are then plain kernel launches, which the decode path's programmatic launches can overlap, and the
    // estimate is the count of the newest call whose copy was issued.
    const int no_sync = path == TWELL_PATH_DENSE || decode;
    unsigned long long *async_nnz = no_sync ? twell_ffn_count_begin(ws, capturing, path == TWELL_PATH_DENSE, stream) : NULL;
    if (ws->dec_in.gain && !(path == TWELL_PATH_SPARSE && decode)) {
        fprintf(stderr, "error: twell_ffn_forward: a fused input (dec_in) needs the decode path (M=%d, decode_rows=%d)\n",
                M, ws->decode_rows);
        return TWELL_ERR_ARG;
    }
    if (path == TWELL_PATH_SPARSE && decode) {
        int e = twell_decode_forward(X, Wg, Wu, WdT, Y, M, ws->D, ws->F, ws->gated, ws->dec_g, ws->dec_cnt,
                                     ws->dec_ent, async_nnz, ws->dec_pdl, stream, ws->dec_gate_warps,
                                     ws->dec_in.gain ? &ws->dec_in : NULL);
        if (e) return e;
        r.path = TWELL_PATH_SPARSE;
        r.decode = 1;
        r.n_overflow = 0;
        r.updown = -1;
    } else if (path == TWELL_PATH_DENSE) {
        twell_dense_ffn(mm, &ws->dense, ws->gated, X, Wg, Wu, WdT, Y, NULL, M, ws->D, ws->F, async_nnz, stream);
        r.path = TWELL_PATH_DENSE;
        r.updown = -1;
    } else {
        int e = twell_gate_forward(mm, ws, X, W1, M, stream);
        if (e) return e;
        e = twell_ffn_updown(ws, X, Wu, WdT, Y, M, stream);
        if (e) return e;
        r.path = TWELL_PATH_SPARSE;
        r.updown = ws->last_updown;
        const int sync = !tile_device || (!capturing && ws->last_ovf_frac * M > TWELL_OVF_DEVICE_ROWS);
        if (sync) {
            twell_ffn_poll_tile_stats(ws, 1);  // an earlier call's copy in flight lands first (same buffer)
            cudaCheck(cudaMemcpyAsync(ws->counters_host, ws->counters, sizeof(TwellCounters), cudaMemcpyDeviceToHost,
                                      stream));
            cudaCheck(cudaStreamSynchronize(stream));
            twell_ffn_take_tile_stats(ws, M);
            ws->tile_host_syncs++;
            const int n_ovf = ws->counters_host->n_ovf;
            if (n_ovf > 0)
                twell_dense_ffn(mm, &ws->dense, ws->gated, X, Wg, Wu, WdT, Y, ws->ovf_list, n_ovf, ws->D, ws->F, NULL,
                                stream);
            r.synced = 1;
            r.n_overflow = n_ovf;
            r.mean_nnz = ws->last_mean_nnz;
        } else {
            // the overflow rows (ovf_list, their number counters->n_ovf on the device) in one cooperative launch
            TtDenseRows a;
            memset(&a, 0, sizeof a);
            a.X = X; a.Wgate = W1; a.Wu = Wu; a.WdT = WdT; a.out = Y;
            a.rows = ws->ovf_list; a.n_dev = &ws->counters->n_ovf;
            a.xd = ws->dense.xg; a.yd = ws->dense.yg; a.g = ws->dense.g; a.u = ws->dense.u; a.part = ws->dr_part;
            a.D = ws->D; a.F = ws->F; a.gated = ws->gated; a.Rc = ws->dense.chunk_rows;
            a.split_F = ws->dr_split_F; a.split_D = ws->dr_split_D;
            void *args[] = {&a};
            cudaCheck(cudaLaunchCooperativeKernel((const void *)tt_dense_rows_fwd_kernel, ws->dr_grid, 256, args, 0,
                                                  stream));
            if (!capturing && !ws->tile_stats_pending) {  // the counts come back without a sync, taken at a later call
                cudaCheck(cudaMemcpyAsync(ws->counters_host, ws->counters, sizeof(TwellCounters),
                                          cudaMemcpyDeviceToHost, stream));
                cudaCheck(cudaEventRecord(ws->tile_stats_ready, stream));
                ws->tile_stats_pending = 1;
                ws->tile_stats_pending_M = M;
            }
        }
    }
    twell_ffn_count_end(ws, async_nnz, M, stream);
    ws->last_path = r.path;
    if (res) *res = r;
    return TWELL_OK;
}

// Measures the dispatch model on the caller's data (X: M rows of real activations) and this GPU: times the dense FFN,
// the gate (-> TwELL), the up/down on that TwELL, the up/down on an EMPTY TwELL (all counts 0: the fixed cost of
// reading X and writing Y) and the whole sparse call (gate, up/down, the overflow rows' dense FFN; with or without
// the host sync, as the workspace's tile_sync), each the median of `reps` runs, then
//   s0 = (gate + updown_empty) / dense,  s1 = (updown - updown_empty) / (sparse_nnz * dense)
// (sparse_nnz: the active units per token in rows the up/down computed), and anchors the model on the whole call's
// measured ratio R = sparse / dense: with overflow rows (over 1% of M) fovf takes the rest, R - s0 - s1 * sparse_nnz
// per overflow fraction (at least 0); without, s0 moves so the model passes through R (the sync and the counters).
// When every active unit is in an overflow row (small d_ff, dense layers) there is nothing to fit: the model becomes
// the measured ratio alone (s0 = R, s1 = fovf = 0; model.calibrated = 2), so AUTO follows what was measured.
// Overwrites Y. Blocking (events + syncs): call once at start-up, not per step. Returns TWELL_OK and sets ws->model
// (model.calibrated 1 or 2); on failure (an error code) the model is unchanged. The dispatch state (last nnz / path)
// is reset. Wg may be NULL when !gated. It fits the TILE path's model (ws->model): the decode path is off during the
// measurement, and its model (ws->dec_model) keeps the TWELL_DECODE_* defaults.
static inline int twell_ffn_calibrate(MatmulContext *mm, TwellFFNWorkspace *ws, const bf16 *X, const bf16 *Wg,
                                      const bf16 *Wu, const bf16 *WdT, bf16 *Y, int M, int reps, cudaStream_t stream) {
    if (reps < 1) reps = 1;
    if (reps > 64) reps = 64;
    const int decode_rows = ws->decode_rows, tile_sync = ws->tile_sync;
    ws->decode_rows = 0;  // the tile path is measured, whatever M
    ws->tile_sync = 1;    // the warm call returns its counts; the whole call (which = 4) is timed in the caller's mode
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    const bf16 *W1 = ws->gated ? Wg : Wu;
    float t[5];  // dense, gate, updown, updown_empty, the whole sparse call
    TwellFFNResult r;
    memset(&r, 0, sizeof r);
    r.n_overflow = -1;
    r.mean_nnz = -1.0;
    int err = twell_ffn_forward(mm, ws, X, Wg, Wu, WdT, Y, M, TWELL_PATH_SPARSE, -1, &r, stream);  // warm + nnz
    for (int which = 0; which < 5 && !err; which++) {
        float v[64];
        for (int i = -1; i < reps && !err; i++) {  // i = -1: warm-up
            if (which == 3) {  // empty TwELL
                cudaCheck(cudaMemsetAsync(ws->tw, 0, sizeof(uint32_t) * (size_t)M * (ws->F / ws->C), stream));
            } else if (which == 2 && i == -1) {
                err = twell_gate_forward(mm, ws, X, W1, M, stream);
            }
            cudaCheck(cudaEventRecord(e0, stream));
            if (!err) {
                if (which == 0)
                    err = twell_ffn_forward(mm, ws, X, Wg, Wu, WdT, Y, M, TWELL_PATH_DENSE, -1, NULL, stream);
                else if (which == 1) err = twell_gate_forward(mm, ws, X, W1, M, stream);
                else if (which == 4) {
                    ws->tile_sync = tile_sync;
                    err = twell_ffn_forward(mm, ws, X, Wg, Wu, WdT, Y, M, TWELL_PATH_SPARSE, -1, NULL, stream);
                    ws->tile_sync = 1;
                }
                else err = twell_ffn_updown(ws, X, Wu, WdT, Y, M, stream);
            }
            cudaCheck(cudaEventRecord(e1, stream));
            cudaCheck(cudaEventSynchronize(e1));
            float ms = 0;
            cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
            if (i >= 0) v[i] = ms;
        }
        if (err) break;
        std::sort(v, v + reps);
        t[which] = v[reps / 2];
    }
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    ws->decode_rows = decode_rows;
    ws->tile_sync = tile_sync;
    twell_ffn_read_tile_stats(ws);  // a copy of the timed calls in flight lands now, not in the next call's dispatch
    if (err) return err;
    const double sparse_nnz = r.mean_nnz * ws->last_sparse_share;  // per token, in rows the up/down computed
    if (!twell_dispatch_fit(&ws->model, t, sparse_nnz, r.n_overflow > 0 ? (double)r.n_overflow / M : 0.0)) {
        fprintf(stderr, "error: twell_ffn_calibrate: no time measured (dense %.4f ms, sparse %.4f ms): model unchanged\n",
                t[0], t[4]);
        return TWELL_ERR_ARG;
    }
    ws->dense_calls = 0;
    ws->last_mean_nnz = -1.0;
    ws->last_ovf_frac = 0.0;
    ws->last_path = 0;
    ws->tile_host_syncs = ws->tile_rows = ws->tile_ovf_rows = 0;  // the totals count the caller's calls
    ws->tile_nnz = 0.0;
    return TWELL_OK;
}

#endif  // SLLM_TWELL_FFN_CUH
