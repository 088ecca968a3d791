// twell/ffn.cuh: the TwELL FFN layer API with dense/sparse dispatch.
//
//   gated:     Y = (relu(X Wg^T) * (X Wu^T)) WdT      non-gated (Wg = NULL): Y = relu(X Wu^T) WdT
//   X [M, D] bf16 row-major; Wg, Wu [F, D] bf16 (nn.Linear layout); WdT [F, D] bf16 = down_proj.weight
//   ([D, F]) TRANSPOSED; Y [M, D] bf16, fully written by every path.
//   Shapes: F % 256 == 0, D % 64 == 0, D <= 8192, 1 <= M <= max_M of the workspace; pointers 16-byte
//   aligned. Anything else returns TWELL_ERR_* with a message naming the constraint, Y untouched.
//
// Sparse path: (1) gate -> TwELL (twell/gate.cuh), (2) fused up+down on every non-overflow row
// (twell/updown.cuh), (3) overflow rows (a tile with more non-zeros than slots) gathered and computed
// by the dense FFN (twell/dense_ffn.cuh) and scattered back. The number of overflow rows and the mean
// number of active gates come back in TwellFFNResult. One host sync per sparse call (to size the
// fallback GEMMs by the device overflow count); it overlaps the up/down kernel.
//
// Dense path: cuBLASLt gate and up GEMMs, relu*mul, down GEMM (chunks of dense_chunk_rows rows).
//
// Dispatch (TWELL_PATH_AUTO): sparse when the estimated mean active gates per token <= sparse_max_nnz
// and the last seen overflow-row fraction <= sparse_max_ovf_frac, else dense. The estimate is the
// caller's hint (nnz_hint >= 0), else the previous call's measured mean (both paths measure it on the
// device; the dense path's count is read back at the next call, so it costs no sync), else sparse
// (measures). With a hint, the hint alone decides. Default threshold TWELL_DEFAULT_SPARSE_MAX_NNZ: see dev/bench/bench_ffn.cu, which
// measures the crossover (sparse time = dense time) and prints the value to use.
#ifndef SLLM_TWELL_FFN_CUH
#define SLLM_TWELL_FFN_CUH

#include "cuda_common.cuh"
#include "matmul.cuh"
#include "twell/dense_ffn.cuh"
#include "twell/format.h"
#include "twell/gate.cuh"
#include "twell/updown.cuh"

#define TWELL_DEFAULT_SPARSE_MAX_NNZ 64.0
#define TWELL_DEFAULT_SPARSE_MAX_OVF_FRAC 0.25

typedef enum { TWELL_PATH_AUTO = 0, TWELL_PATH_DENSE = 1, TWELL_PATH_SPARSE = 2 } TwellPath;

typedef struct {
    int path;            // TWELL_PATH_DENSE or TWELL_PATH_SPARSE: the path that ran
    int n_overflow;      // sparse path: rows computed by the dense fallback; dense path: -1 (not measured)
    double mean_nnz;     // sparse path: mean active gates per token of this call; dense: -1 (read next call)
} TwellFFNResult;

typedef struct {
    int max_M, D, F, C, gated;
    int gate_variant;     // TWELL_GATE_*
    int updown_variant;   // TWELL_UPDOWN_*
    int gate_chunk_rows;  // rows per gate GEMM + pack chunk (scratch stays in L2); <= gate_scratch_rows
    int gate_scratch_rows;
    double sparse_max_nnz, sparse_max_ovf_frac;
    // device buffers
    uint32_t *tw;                 // [max_M, F/C]
    int *ovf_flag, *ovf_list;     // [max_M]
    TwellCounters *counters;      // device
    TwellCounters *counters_host; // pinned
    unsigned long long *dense_nnz;       // device counter of the dense path
    unsigned long long *dense_nnz_host;  // pinned
    cudaEvent_t dense_nnz_ready;
    int dense_nnz_pending, dense_nnz_pending_M;
    bf16 *gate_scratch;           // [gate_chunk_rows, F]
    TwellDenseScratch dense;
    // dispatch state
    double last_mean_nnz;  // -1: unknown
    double last_ovf_frac;
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

// Allocates everything for up to max_M tokens. Returns TWELL_OK or an error (message printed).
static inline int twell_ffn_workspace_create(TwellFFNWorkspace *ws, int max_M, int D, int F, int C, int gated) {
    memset(ws, 0, sizeof(*ws));
    int e = twell_check_shapes(max_M, D, F, C);
    if (e) return e;
    if (max_M < 1) { fprintf(stderr, "error: twell: max_M must be >= 1\n"); return TWELL_ERR_SHAPE; }
    ws->max_M = max_M; ws->D = D; ws->F = F; ws->C = C; ws->gated = gated ? 1 : 0;
    ws->gate_variant = TWELL_GATE_CUBLAS_PACK;
    ws->updown_variant = TWELL_UPDOWN_AUTO;
    ws->gate_chunk_rows = 2048;
    ws->sparse_max_nnz = TWELL_DEFAULT_SPARSE_MAX_NNZ;
    ws->sparse_max_ovf_frac = TWELL_DEFAULT_SPARSE_MAX_OVF_FRAC;
    ws->last_mean_nnz = -1.0;
    ws->last_ovf_frac = 0.0;
    ws->dense.chunk_rows = 16384;
    if (ws->dense.chunk_rows > max_M) ws->dense.chunk_rows = max_M;
    int gcr = ws->gate_chunk_rows < max_M ? ws->gate_chunk_rows : max_M;
    ws->gate_chunk_rows = gcr;
    ws->gate_scratch_rows = gcr;
    cudaCheck(cudaMalloc(&ws->tw, sizeof(uint32_t) * (size_t)max_M * (F / C)));
    cudaCheck(cudaMalloc(&ws->ovf_flag, sizeof(int) * (size_t)max_M));
    cudaCheck(cudaMalloc(&ws->ovf_list, sizeof(int) * (size_t)max_M));
    cudaCheck(cudaMalloc(&ws->counters, sizeof(TwellCounters)));
    cudaCheck(cudaMallocHost(&ws->counters_host, sizeof(TwellCounters)));
    cudaCheck(cudaMalloc(&ws->dense_nnz, sizeof(unsigned long long)));
    cudaCheck(cudaMallocHost(&ws->dense_nnz_host, sizeof(unsigned long long)));
    cudaCheck(cudaEventCreateWithFlags(&ws->dense_nnz_ready, cudaEventDisableTiming));
    cudaCheck(cudaMalloc(&ws->gate_scratch, sizeof(bf16) * (size_t)gcr * F));
    size_t cr = (size_t)ws->dense.chunk_rows;
    cudaCheck(cudaMalloc(&ws->dense.xg, sizeof(bf16) * cr * D));
    cudaCheck(cudaMalloc(&ws->dense.yg, sizeof(bf16) * cr * D));
    cudaCheck(cudaMalloc(&ws->dense.g, sizeof(bf16) * cr * F));
    cudaCheck(cudaMalloc(&ws->dense.u, sizeof(bf16) * cr * F));
    return TWELL_OK;
}

static inline void twell_ffn_workspace_free(TwellFFNWorkspace *ws) {
    if (ws->dense_nnz_pending) cudaCheck(cudaEventSynchronize(ws->dense_nnz_ready));
    cudaCheck(cudaFree(ws->tw)); cudaCheck(cudaFree(ws->ovf_flag)); cudaCheck(cudaFree(ws->ovf_list));
    cudaCheck(cudaFree(ws->counters)); cudaCheck(cudaFreeHost(ws->counters_host));
    cudaCheck(cudaFree(ws->dense_nnz)); cudaCheck(cudaFreeHost(ws->dense_nnz_host));
    cudaCheck(cudaEventDestroy(ws->dense_nnz_ready));
    cudaCheck(cudaFree(ws->gate_scratch));
    cudaCheck(cudaFree(ws->dense.xg)); cudaCheck(cudaFree(ws->dense.yg));
    cudaCheck(cudaFree(ws->dense.g)); cudaCheck(cudaFree(ws->dense.u));
    memset(ws, 0, sizeof(*ws));
}

// Gate only: X -> ws->tw, ovf list, counters (device). Used by the FFN and by tests.
static inline int twell_gate_forward(MatmulContext *mm, TwellFFNWorkspace *ws, const bf16 *X, const bf16 *W, int M,
                                     cudaStream_t stream) {
    if (M < 1 || M > ws->max_M) {
        fprintf(stderr, "error: twell_gate_forward: M=%d must be in [1, max_M=%d] of the workspace\n", M, ws->max_M);
        return TWELL_ERR_WORKSPACE;
    }
    if (ws->gate_chunk_rows < 1 || ws->gate_chunk_rows > ws->gate_scratch_rows) {
        fprintf(stderr, "error: twell_gate_forward: gate_chunk_rows=%d must be in [1, %d] (the scratch allocated)\n",
                ws->gate_chunk_rows, ws->gate_scratch_rows);
        return TWELL_ERR_WORKSPACE;
    }
    cudaCheck(cudaMemsetAsync(ws->ovf_flag, 0, sizeof(int) * (size_t)M, stream));
    cudaCheck(cudaMemsetAsync(ws->counters, 0, sizeof(TwellCounters), stream));
    switch (ws->gate_variant) {
    case TWELL_GATE_CUBLAS_PACK:
        twell_gate_cublas_pack(mm, X, W, M, ws->D, ws->F, ws->C, ws->gate_scratch, ws->gate_chunk_rows, ws->tw,
                               ws->ovf_flag, ws->ovf_list, ws->counters, stream);
        return TWELL_OK;
    default:
        fprintf(stderr, "error: twell: unknown gate variant %d (expected 0..%d)\n", ws->gate_variant,
                TWELL_GATE_NUM_VARIANTS - 1);
        return TWELL_ERR_ARG;
    }
}

static inline int twell_ffn_forward(MatmulContext *mm, TwellFFNWorkspace *ws, const bf16 *X, const bf16 *Wg,
                                    const bf16 *Wu, const bf16 *WdT, bf16 *Y, int M, TwellPath path, double nnz_hint,
                                    TwellFFNResult *res, cudaStream_t stream) {
    TwellFFNResult r = {0, -1, -1.0};
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
    // Pick up the dense path's nnz count of the previous call (no sync: it is long finished).
    // Never waits: if the copy is not done yet, the older estimate is used.
    if (ws->dense_nnz_pending) {
        cudaError_t q = cudaEventQuery(ws->dense_nnz_ready);
        if (q == cudaSuccess) {
            ws->last_mean_nnz = (double)*ws->dense_nnz_host / (double)ws->dense_nnz_pending_M;
            ws->dense_nnz_pending = 0;
        } else if (q != cudaErrorNotReady) {
            cudaCheck(q);
        }
    }
    if (path == TWELL_PATH_AUTO) {
        if (nnz_hint >= 0)  // the caller's estimate decides alone
            path = nnz_hint <= ws->sparse_max_nnz ? TWELL_PATH_SPARSE : TWELL_PATH_DENSE;
        else if (ws->last_mean_nnz < 0)  // unknown: run sparse, which measures
            path = TWELL_PATH_SPARSE;
        else
            path = (ws->last_mean_nnz <= ws->sparse_max_nnz && ws->last_ovf_frac <= ws->sparse_max_ovf_frac)
                       ? TWELL_PATH_SPARSE : TWELL_PATH_DENSE;
    }
    const bf16 *W1 = ws->gated ? Wg : Wu;
    if (path == TWELL_PATH_DENSE) {
        cudaCheck(cudaMemsetAsync(ws->dense_nnz, 0, sizeof(unsigned long long), stream));
        twell_dense_ffn(mm, &ws->dense, ws->gated, X, Wg, Wu, WdT, Y, NULL, M, ws->D, ws->F, ws->dense_nnz, stream);
        cudaCheck(cudaMemcpyAsync(ws->dense_nnz_host, ws->dense_nnz, sizeof(unsigned long long),
                                  cudaMemcpyDeviceToHost, stream));
        cudaCheck(cudaEventRecord(ws->dense_nnz_ready, stream));
        ws->dense_nnz_pending = 1;
        ws->dense_nnz_pending_M = M;
        r.path = TWELL_PATH_DENSE;
    } else {
        int e = twell_gate_forward(mm, ws, X, W1, M, stream);
        if (e) return e;
        e = twell_updown_launch(ws->updown_variant, ws->gated, ws->tw, X, Wu, WdT, Y, M, ws->D, ws->F, ws->C, stream);
        if (e) return e;
        cudaCheck(cudaMemcpyAsync(ws->counters_host, ws->counters, sizeof(TwellCounters), cudaMemcpyDeviceToHost,
                                  stream));
        cudaCheck(cudaStreamSynchronize(stream));
        const int n_ovf = ws->counters_host->n_ovf;
        if (n_ovf < 0 || n_ovf > M) SLLM_FATAL("twell: device overflow count %d out of range [0, %d]", n_ovf, M);
        if (n_ovf > 0)
            twell_dense_ffn(mm, &ws->dense, ws->gated, X, Wg, Wu, WdT, Y, ws->ovf_list, n_ovf, ws->D, ws->F, NULL,
                            stream);
        r.path = TWELL_PATH_SPARSE;
        r.n_overflow = n_ovf;
        r.mean_nnz = (double)ws->counters_host->nnz / (double)M;
        ws->last_mean_nnz = r.mean_nnz;
        ws->last_ovf_frac = (double)n_ovf / (double)M;
    }
    if (res) *res = r;
    return TWELL_OK;
}

#endif  // SLLM_TWELL_FFN_CUH
