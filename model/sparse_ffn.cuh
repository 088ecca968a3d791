// model/sparse_ffn.cuh: the sparse (TwELL) FFN inside the trainer: per-layer state of twell/train_ffn.cuh, the WdT
// copies it reads, the per-layer path (model/sparse_dispatch.h), the statistics the dispatch and the log read, and two
// device helpers on the weights (dead gate rows re-drawn; a constant column for the synthetic-sparsity benchmark).
// model/train_model.cuh owns one SparseFFN per model and calls into it per layer.
//
// Memory (N tokens of the micro-batch, D, F, L): sparse state per layer N * (8 * pairs_per_row + 12) B (the pair pool
// sized from pairs_per_row; rows past it run densely and are counted); one workspace for all layers (twtrain_ws_init,
// dense-row chunks of SPARSE_DENSE_CHUNK rows); WdT [L, F, D] bf16. The dense path's activations gu [G, N, F] and
// h [N, F] per layer are the model's (model/train_model.cuh decides how many layer slots it allocates).
//
// WdT: twell/train_ffn.cuh reads Wd transposed ([F, D], rows per unit). A layer's copy is refreshed lazily by the
// first sparse forward after the weights change (sparse_ffn_mark_stale: after every optimizer step, after loading or
// re-drawing weights): one transpose per sparse layer per step (2 * F * D * 2 bytes).
#ifndef SLLM_MODEL_SPARSE_FFN_CUH
#define SLLM_MODEL_SPARSE_FFN_CUH

#include <stdint.h>

#include "config.h"
#include "matmul.cuh"
#include "model/sparse_dispatch.h"
#include "model/weights.cuh"
#include "twell/train_ffn.cuh"

#define SPARSE_DENSE_CHUNK 2048  // rows per dense-row chunk of the workspace (94 MB at D 2048, F 5632)

typedef struct {
    int mode;                  // FFNPathMode; FFN_PATH_DENSE: nothing below is allocated
    int L, D, F, gated, N;
    SparseDispatchParams par;
    TwTrainWS ws;
    TwTrainState *st;          // [L] host array of device states
    TwTrainStats *stats;       // [L] device: the states' statistics, contiguous (one copy to the host)
    bf16 *wdT;                 // [L, F, D]
    uint8_t *fired_scratch;    // [F]: fired flags of the forwards that keep no statistics (eval, sampling)
    int *sparse;               // [L] host: the path of the next forward (1 sparse)
    int *steps_on_path;        // [L] host
    int *wdT_fresh;            // [L] host: WdT[l] matches Wd[l]
    // read after the step's sync (model_read_step)
    unsigned long long *h_nnz, *h_nnz_prev;  // [L] the model's window counters now / at the last dispatch
    uint64_t tokens_prev;                    // the model's stat_tokens at the last dispatch
    TwTrainStats *h_stats;                   // [L]
    int *h_rows;                             // [L] rows of the last forward of each layer (st[l].M)
    uint64_t *counts;                        // [L, SPARSE_COUNTS_PER_LAYER] the step's counts
    // window statistics (since the last reset), for the log
    uint64_t *win_dense_rows, *win_ovf_rows, *win_rows;  // [L] over the sparse steps
    int *win_max_nnz, *win_sparse_steps;                 // [L]
    int win_steps;
    size_t ws_bytes, state_bytes, wdT_bytes;
} SparseFFN;

// ---- kernels ------------------------------------------------------------------------------------------
// out [C, R] = in [R, C] transposed (bf16), 32 x 32 tiles.
static __global__ void sp_transpose_kernel(const bf16 *__restrict__ in, bf16 *__restrict__ out, int R, int C) {
    __shared__ bf16 t[32][33];
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += blockDim.y)
        if (r0 + i < R && c0 + threadIdx.x < C) t[i][threadIdx.x] = in[(size_t)(r0 + i) * C + c0 + threadIdx.x];
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y)
        if (c0 + i < C && r0 + threadIdx.x < R) out[(size_t)(c0 + i) * R + r0 + threadIdx.x] = t[threadIdx.x][i];
}

// Re-draw rows rows[0..n) of the [*, D] weight matrix at flat offset `off` of the parameters: w = stdv *
// normal(hash(seed, row, d)) into the bf16 weights (every rank: the same values) and, for the elements of the
// optimizer range [so, so + cnt) that this process holds (ZeRO-1 shard; unsharded: 0, total), into the fp32 master
// weights (when there are any) with the AdamW moments zeroed. One block per row.
template <typename MT>  // the AdamW moments' type: float or bf16
static __global__ void sp_redraw_rows_kernel(bf16 *__restrict__ params, size_t off, float *__restrict__ master,
                                             MT *__restrict__ m1, MT *__restrict__ m2, size_t so, size_t cnt,
                                             const int *__restrict__ rows, int D, uint64_t seed, float stdv) {
    const size_t r = rows[blockIdx.x];
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        const size_t i = r * D + d, flat = off + i;
        uint64_t a = weights_mix64(seed ^ weights_mix64(2 * i)), b = weights_mix64(seed ^ weights_mix64(2 * i + 1));
        double u1 = ((a >> 11) + 1) * 0x1.0p-53, u2 = (b >> 11) * 0x1.0p-53;
        const float v = (float)(stdv * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
        params[flat] = __float2bfloat16_rn(v);
        if (flat >= so && flat - so < cnt) {
            if (master) master[flat - so] = v;
            m1[flat - so] = (MT)0.0f;
            m2[flat - so] = (MT)0.0f;
        }
    }
}

// Column col of a [R, ld] weight matrix set to v (bf16 weights and fp32 master).
static __global__ void sp_set_column_kernel(bf16 *__restrict__ w, float *__restrict__ master, int R, int ld, int col,
                                            float v) {
    const int r = blockIdx.x * blockDim.x + threadIdx.x;
    if (r >= R) return;
    w[(size_t)r * ld + col] = __float2bfloat16_rn(v);
    if (master) master[(size_t)r * ld + col] = __bfloat162float(__float2bfloat16_rn(v));
}

// ---- host API -------------------------------------------------------------------------------------------
static inline int sparse_ffn_shape_ok(int D, int F) {
    const int dv = D / 256;
    return D % 256 == 0 && (dv == 1 || dv == 2 || dv == 4 || dv == 8 || dv == 16) && F % 256 == 0 && F >= 256 &&
           F <= 8192;
}

// mode FFN_PATH_DENSE: no allocation. Else the workspace, L states and WdT; every layer starts dense (auto) or sparse
// (forced). mm: the cuBLASLt context (the gate off Hopper).
static inline void sparse_ffn_init(SparseFFN *sp, const ModelConfig *c, int N, int mode, const SparseDispatchParams *par,
                                   MatmulContext *mm) {
    memset(sp, 0, sizeof *sp);
    sp->mode = mode;
    sp->L = c->n_layer; sp->D = c->d_model; sp->F = c->d_ff; sp->gated = c->gated; sp->N = N;
    sp->par = par ? *par : sparse_dispatch_defaults(c->d_ff);
    if (mode == FFN_PATH_DENSE) return;
    if (!sparse_ffn_shape_ok(sp->D, sp->F))
        SLLM_FATAL("sparse FFN: d_model=%d must be 256 * (1, 2, 4, 8 or 16) and d_ff=%d a multiple of 256 in "
                   "[256, 8192] (use --ffn-path dense)", sp->D, sp->F);
    const int L = sp->L;
    size_t free0 = 0, free1 = 0, tot = 0;
    cudaCheck(cudaMemGetInfo(&free0, &tot));
    if (twtrain_ws_init(&sp->ws, N, sp->D, sp->F, sp->gated, 0, 0, SPARSE_DENSE_CHUNK, mm) != TWELL_OK)
        SLLM_FATAL("sparse FFN: cannot create the workspace (N=%d D=%d F=%d)", N, sp->D, sp->F);
    cudaCheck(cudaMemGetInfo(&free1, &tot));
    sp->ws_bytes = free0 > free1 ? free0 - free1 : 0;  // what the allocator gave the workspace
    sp->st = (TwTrainState *)sllm_calloc(L, sizeof(TwTrainState));
    cudaCheck(cudaMalloc((void **)&sp->stats, (size_t)L * sizeof(TwTrainStats)));
    cudaCheck(cudaMemset(sp->stats, 0, (size_t)L * sizeof(TwTrainStats)));
    for (int l = 0; l < L; l++) {
        twtrain_state_alloc(&sp->st[l], &sp->ws);
        cudaCheck(cudaFree(sp->st[l].stats));  // the contiguous array instead
        sp->st[l].stats = sp->stats + l;
    }
    sp->state_bytes = twtrain_state_bytes(&sp->ws);
    sp->wdT_bytes = (size_t)L * sp->F * sp->D * sizeof(bf16);
    cudaCheck(cudaMalloc((void **)&sp->wdT, sp->wdT_bytes));
    cudaCheck(cudaMalloc((void **)&sp->fired_scratch, sp->F));
    sp->sparse = (int *)sllm_calloc(L, sizeof(int));
    sp->steps_on_path = (int *)sllm_calloc(L, sizeof(int));
    sp->wdT_fresh = (int *)sllm_calloc(L, sizeof(int));
    sp->h_nnz = (unsigned long long *)sllm_calloc(L, 8);
    sp->h_nnz_prev = (unsigned long long *)sllm_calloc(L, 8);
    sp->h_stats = (TwTrainStats *)sllm_calloc(L, sizeof(TwTrainStats));
    sp->h_rows = (int *)sllm_calloc(L, sizeof(int));
    sp->counts = (uint64_t *)sllm_calloc((size_t)L * SPARSE_COUNTS_PER_LAYER, sizeof(uint64_t));
    sp->win_dense_rows = (uint64_t *)sllm_calloc(L, 8);
    sp->win_ovf_rows = (uint64_t *)sllm_calloc(L, 8);
    sp->win_rows = (uint64_t *)sllm_calloc(L, 8);
    sp->win_max_nnz = (int *)sllm_calloc(L, sizeof(int));
    sp->win_sparse_steps = (int *)sllm_calloc(L, sizeof(int));
    for (int l = 0; l < L; l++) {
        sp->sparse[l] = mode == FFN_PATH_SPARSE;
        sp->steps_on_path[l] = sp->par.min_dwell;  // the first decision may switch (a run from a sparse checkpoint)
    }
}

static inline void sparse_ffn_free(SparseFFN *sp) {
    if (sp->mode == FFN_PATH_DENSE) { memset(sp, 0, sizeof *sp); return; }
    for (int l = 0; l < sp->L; l++) {
        sp->st[l].stats = NULL;  // part of sp->stats
        twtrain_state_free(&sp->st[l]);
    }
    twtrain_ws_free(&sp->ws);
    cudaCheck(cudaFree(sp->stats));
    cudaCheck(cudaFree(sp->wdT));
    cudaCheck(cudaFree(sp->fired_scratch));
    void *h[] = {sp->st, sp->sparse, sp->steps_on_path, sp->wdT_fresh, sp->h_nnz, sp->h_nnz_prev, sp->h_stats,
                 sp->h_rows, sp->counts, sp->win_dense_rows, sp->win_ovf_rows, sp->win_rows, sp->win_max_nnz,
                 sp->win_sparse_steps};
    for (size_t i = 0; i < sizeof h / sizeof h[0]; i++) free(h[i]);
    memset(sp, 0, sizeof *sp);
}

static inline int sparse_ffn_layer_sparse(const SparseFFN *sp, int l) {
    return sp->mode != FFN_PATH_DENSE && sp->sparse[l];
}
static inline int sparse_ffn_num_sparse(const SparseFFN *sp) {
    int n = 0;
    for (int l = 0; l < sp->L && sp->mode != FFN_PATH_DENSE; l++) n += sp->sparse[l];
    return n;
}
static inline void sparse_ffn_mark_stale(SparseFFN *sp) {
    for (int l = 0; l < sp->L && sp->mode != FFN_PATH_DENSE; l++) sp->wdT_fresh[l] = 0;
}
// WdT[l] = Wd[l]^T ([D, F] -> [F, D]) when stale.
static inline const bf16 *sparse_ffn_wdT(SparseFFN *sp, const bf16 *Wd, int l, cudaStream_t s) {
    bf16 *out = sp->wdT + (size_t)l * sp->F * sp->D;
    if (!sp->wdT_fresh[l]) {
        dim3 tb(32, 8), tg(CEIL_DIV(sp->F, 32), CEIL_DIV(sp->D, 32));
        sp_transpose_kernel<<<tg, tb, 0, s>>>(Wd, out, sp->D, sp->F);
        cudaCheckLaunch();
        sp->wdT_fresh[l] = 1;
    }
    return out;
}

// Forward of layer l (sparse path). stats: accumulate L1 into l1_accum (one slot of the model's partials), pairs into
// nnz, fired flags; NULL: no statistics (eval, sampling).
static inline void sparse_ffn_forward(SparseFFN *sp, int l, const LayerWeights *w, const bf16 *ln2, bf16 *y, int N,
                                      float *l1_accum, unsigned long long *nnz, uint8_t *fired, cudaStream_t s) {
    const bf16 *wdT = sparse_ffn_wdT(sp, w->wd, l, s);
    const int e = twtrain_forward(&sp->ws, &sp->st[l], ln2, sp->gated ? w->wg : NULL, w->wu, wdT, y, N, l1_accum, nnz,
                                  fired ? fired : sp->fired_scratch, s);
    if (e != TWELL_OK) SLLM_FATAL("sparse FFN forward, layer %d: error %d", l, e);
}

// Backward of layer l after its sparse forward: dX (the FFN-norm output's gradient) from dY; the weight gradients
// written (accumulate 0) or added (1).
static inline void sparse_ffn_backward(SparseFFN *sp, int l, const LayerWeights *w, const bf16 *ln2, const bf16 *dY,
                                       bf16 *dX, float *dWg, float *dWu, float *dWd, int accumulate, float l1_coef,
                                       cudaStream_t s) {
    if (sp->st[l].M < 1) SLLM_FATAL("sparse FFN backward, layer %d: no sparse forward before it", l);
    const bf16 *wdT = sparse_ffn_wdT(sp, w->wd, l, s);
    const int e = twtrain_backward(&sp->ws, &sp->st[l], ln2, dY, sp->gated ? w->wg : NULL, w->wu, wdT, dX,
                                   sp->gated ? dWg : NULL, dWu, dWd, accumulate, l1_coef, s);
    if (e != TWELL_OK) SLLM_FATAL("sparse FFN backward, layer %d: error %d", l, e);
}

// After the step's sync: the per-layer statistics of the last forwards to the host. nnz_dev: the model's window
// counters [L].
static inline void sparse_ffn_read(SparseFFN *sp, const unsigned long long *nnz_dev) {
    if (sp->mode == FFN_PATH_DENSE) return;
    cudaCheck(cudaMemcpy(sp->h_nnz, nnz_dev, (size_t)sp->L * 8, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(sp->h_stats, sp->stats, (size_t)sp->L * sizeof(TwTrainStats), cudaMemcpyDeviceToHost));
    for (int l = 0; l < sp->L; l++) sp->h_rows[l] = sp->st[l].M;
}

// The step's counts [L, SPARSE_COUNTS_PER_LAYER] (this rank's): pairs and tokens since the last dispatch, and for the
// layers that ran sparse this step the dense and total rows of their last forward. stat_tokens: the model's counter.
static inline void sparse_ffn_step_counts(SparseFFN *sp, uint64_t stat_tokens) {
    for (int l = 0; l < sp->L; l++) {
        uint64_t *c = sp->counts + (size_t)l * SPARSE_COUNTS_PER_LAYER;
        c[SC_PAIRS] = sp->h_nnz[l] - sp->h_nnz_prev[l];
        c[SC_TOKENS] = stat_tokens - sp->tokens_prev;
        c[SC_DENSE_ROWS] = sp->sparse[l] ? (uint64_t)sp->h_stats[l].n_dense : 0;
        c[SC_ROWS] = sp->sparse[l] ? (uint64_t)sp->h_rows[l] : 0;
    }
}

// The decision for the next step from sp->counts (summed over ranks by then); window statistics; returns the number
// of switches written to ev [L]. stat_tokens as above.
static inline int sparse_ffn_dispatch(SparseFFN *sp, uint64_t stat_tokens, SparseSwitch *ev) {
    if (sp->mode == FFN_PATH_DENSE) return 0;
    for (int l = 0; l < sp->L; l++) {
        if (!sp->sparse[l]) continue;
        const uint64_t *c = sp->counts + (size_t)l * SPARSE_COUNTS_PER_LAYER;
        sp->win_dense_rows[l] += c[SC_DENSE_ROWS];
        sp->win_rows[l] += c[SC_ROWS];
        sp->win_ovf_rows[l] += (uint64_t)sp->h_stats[l].n_overflow;
        if (sp->h_stats[l].max_row_nnz > sp->win_max_nnz[l]) sp->win_max_nnz[l] = sp->h_stats[l].max_row_nnz;
        sp->win_sparse_steps[l]++;
    }
    sp->win_steps++;
    const int n = sparse_dispatch_update(sp->L, sp->mode, sp->sparse, sp->steps_on_path, sp->counts, &sp->par, ev);
    memcpy(sp->h_nnz_prev, sp->h_nnz, (size_t)sp->L * 8);
    sp->tokens_prev = stat_tokens;
    return n;
}

// The model's window counters were zeroed: restart the deltas and the window statistics.
static inline void sparse_ffn_reset_window(SparseFFN *sp) {
    if (sp->mode == FFN_PATH_DENSE) return;
    memset(sp->h_nnz_prev, 0, (size_t)sp->L * 8);
    sp->tokens_prev = 0;
    memset(sp->win_dense_rows, 0, (size_t)sp->L * 8);
    memset(sp->win_ovf_rows, 0, (size_t)sp->L * 8);
    memset(sp->win_rows, 0, (size_t)sp->L * 8);
    memset(sp->win_max_nnz, 0, (size_t)sp->L * sizeof(int));
    memset(sp->win_sparse_steps, 0, (size_t)sp->L * sizeof(int));
    sp->win_steps = 0;
}

#endif  // SLLM_MODEL_SPARSE_FFN_CUH
