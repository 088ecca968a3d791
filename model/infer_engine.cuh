// model/infer_engine.cuh: the inference engine of infer.cu (and its GPU test): the weights and the block of
// model/weights.cuh and model/block.cuh without training state, a KV cache, and the FFN through the TwELL kernels
// (twell/ffn.cuh: dense / sparse dispatch per layer, the exact decode path at <= 64 rows) or through the dense FFN of
// model/block.cuh (the trainer's).
//
// B sequences advance together: infer_forward takes T new tokens of each (a prompt chunk, or T = 1 when decoding) at
// positions pos .. pos + T - 1, pos = tokens already in the cache (the same for every sequence).
//   rows        N = B * T (row r = b * T + t), N <= B * chunk
//   params      [total] bf16, the flat layout of core/config.h (one cudaMalloc)
//   wdT         [L, F, D] bf16: down_proj.weight transposed, the layout the TwELL up/down reads (TwELL FFN modes only)
//   kc, vc      [L, B, S, KVH, hd] bf16: keys (after RoPE) and values of positions 0 .. pos - 1
//   x, xm       [N, D] residual stream before / after a layer's attention block; ln [N, D] the normed input of the
//               next matmul; qkv [N, Q + 2 KV] (q [N, Q], k [N, KV], v [N, KV]); att [N, Q]; y [N, D]; gu [G, N, F]
//               and h [N, F] (dense FFN only); lnf [N, D]; logits fp32 [B, V] (the last row of each sequence), or
//               [N, V] with all_logits
// Attention: the first chunk (pos == 0) runs the training kernel over its own rows (core/attention.cuh), which also
// writes their k, v into the cache from shared memory; later chunks and decoding steps write the new rows' k, v into
// the cache first, then read it (core/kv_attention.cuh).
// The position is staged to the device (d_pos) with the tokens, and the RoPE, cache-write and attention kernels read it
// there, so a decoding step can be captured once as a CUDA graph and replayed at every position (infer_decode, with
// use_graph): one launch per step instead of ~10 per layer. The graph is captured at the second decoding step (the
// first runs eagerly: cuBLASLt plans, the dispatch's first count); under capture twell_ffn_forward decides each layer's
// path with its graph model (twell/ffn.cuh), and that choice stays for the graph's life. Graphs are used when no FFN call
// of a step can need a host sync: the dense mode, or B <= the TwELL decode path's rows (64).
// Decoding steps of B <= GEMV_MAX_M (4) sequences run on core/gemv.cuh (infer_enqueue, step_gemv): per layer the
// q/k/v kernel (the previous layer's residual add and this layer's norm in its prologue, RoPE and the cache write in
// its epilogue), kv_decode_attention (keys split over CTAs), Wo, the FFN (dense: the up kernel with the residual add
// and norm inside, writing h, then the down; sparse: the TwELL decode path, its gate on the GEMV), then the LM head with
// the final norm and, with greedy_dev, the greedy pick. Each kernel loads its first weights before waiting for the one
// before it (programmatic dependent launches), so the weights stream across kernel boundaries: a step takes ~1.5x
// the time to read the weights once (dev/RESULTS.md).
// AUTO calibration (calibrate = 1): the first call of a layer with >= INFER_CALIBRATE_MIN_ROWS rows fits that layer's
// tile-path dispatch model on its own input (twell_ffn_calibrate; where every active unit is in an overflow row there
// is nothing to fit and the measured sparse / dense ratio decides): the built-in model is fitted at D 2048, F 5632,
// M 65536 on the H200, and small models or short prompts shift the crossover. AUTO's dense calls run the dense mode's
// kernels (block_ffn_dense), so a layer that AUTO keeps dense costs what it costs in --ffn dense. At decoding steps
// (B <= the decode path's 64 rows) AUTO measures both paths per layer once instead (infer_measure_decode_path).
// FFN statistics: the dense mode counts active gates per layer on the device (ffn_forward's counters); the TwELL modes
// count each layer's calls per path, and the tile path's counts (overflow rows, active gates) come back to the
// workspace without a host sync (tile_sync 0: the prefill never waits for the host; twell/ffn.cuh).
#ifndef SLLM_INFER_ENGINE_CUH
#define SLLM_INFER_ENGINE_CUH

#include <stdint.h>

#include <algorithm>
#include <vector>

#include <cuda_profiler_api.h>

#include "attention.cuh"
#include "config.h"
#include "embedding.cuh"
#include "ffn.cuh"
#include "gemv.cuh"
#include "kv_attention.cuh"
#include "matmul.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#include "sampler.h"
#include "twell/ffn.cuh"
#include "model/block.cuh"
#include "model/weights.cuh"

typedef enum { INFER_FFN_AUTO = 0, INFER_FFN_DENSE = 1, INFER_FFN_SPARSE = 2 } InferFFN;
static inline const char *infer_ffn_name(InferFFN f) {
    return f == INFER_FFN_AUTO ? "auto" : f == INFER_FFN_DENSE ? "dense" : f == INFER_FFN_SPARSE ? "sparse" : "?";
}

typedef struct {
    long long calls_dense, calls_tile, calls_decode;  // TwELL modes: the path each call of this layer took
    long long nnz_rows;                               // dense mode: rows counted into m->nnz
} InferLayerStats;

#define INFER_CALIBRATE_MIN_ROWS 256

typedef struct {
    ModelConfig cfg;
    ParamLayout lay;
    int B, S, chunk, N_max;  // sequences, cache positions per sequence, new tokens per sequence per call, B * chunk
    int Q, KV, G, all_logits;
    InferFFN ffn;
    int pos;                 // tokens in the cache (per sequence)
    int last_T;              // new tokens per sequence of the last call
    bf16 *params, *wdT, *kc, *vc;
    void *act_mem;
    size_t act_bytes, param_bytes, wdT_bytes, kv_bytes, twell_bytes;
    bf16 *x, *xm, *ln, *qkv, *att, *y, *gu, *h, *lnf, *last;
    float *rstd, *lse, *rope, *logits, *l1_part;
    unsigned long long *nnz;  // [L] dense mode counters
    uint8_t *fired;           // [L, F]
    int *tokens, *d_pos;
    KvDecodeWork kvd;         // decoding steps' attention (kv_decode_attention), in act_mem
    int *h_tokens, *h_pos;    // pinned [N_max], [1]: staged with every call (inside the graph too)
    float *h_logits;          // pinned, as logits: filled at the end of every call (but see greedy_dev)
    unsigned long long *best, *h_best;  // [B] device / pinned: greedy_dev's argmax keys (core/gemv.cuh)
    int greedy_dev;           // option (0): every call picks each sequence's greedy token on the GPU (core/argmax.cuh;
                              // fused into the LM head on the GEMV) and copies B keys instead of the logits;
                              // infer_get_greedy reads them
    int argmax_ready;         // the last call left argmax keys (h_logits not filled: infer_get_logits copies on demand)
    int graph_argmax;         // the captured graph does (argmax_ready after each replay)
    int graph_opts;           // use_gemv, greedy_dev, all_logits when the graph was captured (a change: capture again)
    int use_graph, calibrate; // options (infer_create sets use_graph 1, calibrate 0)
    int use_gemv;             // option (infer_create sets 1): decoding steps of B <= GEMV_MAX_M on core/gemv.cuh
    int step_gemv;            // the call being enqueued runs its matrix-vector products on core/gemv.cuh
    int step_decode;          // the call being enqueued is a decoding step (one new token per sequence)
    int *dec_path;            // [L] AUTO's path for decoding steps, measured (0: not yet, 1 dense, 2 sparse)
    float (*dec_us)[2];       // [L] the measured medians (dense, sparse), us per call
    int eager_decodes;        // decoding steps run eagerly so far
    cudaGraphExec_t graph;    // the captured decoding step (NULL until captured)
    long long graph_replays;
    InferLayerStats *graph_delta;  // [L] what one replay adds to the statistics (recorded at capture)
    TwellFFNWorkspace *ws;    // [L] (TwELL modes)
    InferLayerStats *stats;   // [L]
    MatmulContext mm;
    cudaStream_t stream;
#ifdef SLLM_KTRACE
    int kt_n;                       // the captured step's traced launches (core/ktrace.cuh), in slot order
    const char *kt_names[KT_MAX];
#endif
} Infer;

// a += sign * b, field by field (the graph replays' share of the statistics).
static inline void infer_stats_add(InferLayerStats *a, const InferLayerStats *b, long long sign) {
    a->calls_dense += sign * b->calls_dense;
    a->calls_tile += sign * b->calls_tile;
    a->calls_decode += sign * b->calls_decode;
    a->nnz_rows += sign * b->nnz_rows;
}

static inline bf16 *infer_w(const Infer *m, ParamKind k, int l) { return param_ptr(m->params, &m->lay, k, l); }

// ---- transpose: out [C, R] = in [R, C]^T, bf16, 32 x 32 tiles through shared memory ----
static __global__ void infer_transpose_kernel(bf16 *out, const bf16 *in, int R, int C) {
    __shared__ bf16 tile[32][33];
    const int c0 = blockIdx.x * 32, r0 = blockIdx.y * 32;
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        int r = r0 + i, c = c0 + threadIdx.x;
        if (r < R && c < C) tile[i][threadIdx.x] = in[(size_t)r * C + c];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += blockDim.y) {
        int c = c0 + i, r = r0 + threadIdx.x;
        if (r < R && c < C) out[(size_t)c * R + r] = tile[threadIdx.x][i];
    }
}
static inline void infer_transpose(bf16 *out, const bf16 *in, int R, int C, cudaStream_t stream) {
    dim3 grid((unsigned)CEIL_DIV(C, 32), (unsigned)CEIL_DIV(R, 32)), block(32, 8);
    infer_transpose_kernel<<<grid, block, 0, stream>>>(out, in, R, C);
    cudaCheckLaunch();
}

// B sequences of up to S positions, prompt chunks of up to `chunk` tokens per sequence. all_logits: keep the logits
// of every row of a call (tests), else only each sequence's last. verbose: print the memory table.
static inline void infer_create(Infer *m, const ModelConfig *cfg, int B, int S, int chunk, InferFFN ffn, int all_logits,
                                int verbose) {
    char err[256];
    memset(m, 0, sizeof *m);
    weights_check_config(cfg, "infer");
    if (B < 1 || S < 1 || chunk < 1) SLLM_FATAL("infer: sequences (%d), context (%d) and chunk (%d) must be >= 1", B, S, chunk);
    if (chunk > S) chunk = S;
    if (attention_validate(B, chunk, cfg->n_head, cfg->n_kv_head, cfg->head_dim, err, sizeof err) != 0)
        SLLM_FATAL("infer: %s", err);
    if (kv_attention_check(B, 1, S - 1, S, cfg->n_head, cfg->n_kv_head, cfg->head_dim, err, sizeof err) != 0)
        SLLM_FATAL("infer: context %d: %s", S, err);
    if (ffn != INFER_FFN_AUTO && ffn != INFER_FFN_DENSE && ffn != INFER_FFN_SPARSE) SLLM_FATAL("infer: unknown FFN mode %d", ffn);
    m->cfg = *cfg;
    config_param_layout(cfg, &m->lay);
    m->B = B; m->S = S; m->chunk = chunk; m->N_max = B * chunk; m->ffn = ffn; m->all_logits = all_logits;
    m->Q = cfg->n_head * cfg->head_dim; m->KV = cfg->n_kv_head * cfg->head_dim; m->G = cfg->gated ? 2 : 1;
    const size_t N = m->N_max, D = cfg->d_model, L = cfg->n_layer, F = cfg->d_ff, V = cfg->vocab_size;
    const size_t Q = m->Q, KV = m->KV, G = m->G, H = cfg->n_head;
    const int dense = ffn == INFER_FFN_DENSE;
    if (!dense) {
        int e = twell_check_shapes(m->N_max, (int)D, (int)F, TWELL_DEFAULT_C);
        if (e) SLLM_FATAL("infer: the TwELL FFN (--ffn %s) cannot run this model's shape (above); use --ffn dense",
                          infer_ffn_name(ffn));
    }
    cudaCheck(cudaStreamCreate(&m->stream));
    matmul_context_init(&m->mm);
    m->param_bytes = m->lay.total * sizeof(bf16);
    cudaCheck(cudaMalloc((void **)&m->params, m->param_bytes));
    if (!dense) {
        m->wdT_bytes = L * F * D * sizeof(bf16);
        cudaCheck(cudaMalloc((void **)&m->wdT, m->wdT_bytes));
    }
    m->kv_bytes = 2 * L * (size_t)B * S * KV * sizeof(bf16);
    cudaError_t ce = cudaMalloc((void **)&m->kc, m->kv_bytes);
    if (ce != cudaSuccess)
        SLLM_FATAL("infer: cannot allocate the %.1f MiB KV cache (%d sequences x %d positions): %s; lower --context "
                   "or --samples", m->kv_bytes / 1048576.0, B, S, cudaGetErrorString(ce));
    m->vc = m->kc + L * (size_t)B * S * KV;
    const size_t lrows = all_logits ? N : (size_t)B;
    DeviceBufSpec spec[] = {
        {"x [N,D]", (void **)&m->x, N * D * 2},
        {"xm [N,D]", (void **)&m->xm, N * D * 2},
        {"ln [N,D]", (void **)&m->ln, N * D * 2},
        {"qkv [N,Q+2KV]", (void **)&m->qkv, N * (Q + 2 * KV) * 2},
        {"att [N,Q]", (void **)&m->att, N * Q * 2},
        {"y [N,D]", (void **)&m->y, N * D * 2},
        {"gu [G,N,F]", (void **)&m->gu, dense ? G * N * F * 2 : 0},
        {"h [N,F]", (void **)&m->h, dense ? N * F * 2 : 0},
        {"lnf [N,D]", (void **)&m->lnf, N * D * 2},
        {"last rows [B,D]", (void **)&m->last, (size_t)B * D * 2},
        {"rstd [N]", (void **)&m->rstd, N * 4},
        {"lse [B,H,chunk]", (void **)&m->lse, N * H * 4},
        {"rope table", (void **)&m->rope, (size_t)S * cfg->head_dim * 4},
        {"logits fp32", (void **)&m->logits, lrows * V * 4},
        {"l1 partials", (void **)&m->l1_part, FFN_STAT_BLOCKS * 4},
        {"nnz [L]", (void **)&m->nnz, L * 8},
        {"fired [L,F]", (void **)&m->fired, L * F},
        {"tokens [N]", (void **)&m->tokens, N * 4},
        {"argmax keys [B]", (void **)&m->best, (size_t)B * 8},
        {"position", (void **)&m->d_pos, 16},
        {"decode attention partials", (void **)&m->kvd.part,
         kv_decode_work_bytes(B, H, S, cfg->head_dim) - sizeof(int) * (size_t)B * H},
        {"decode attention tickets", (void **)&m->kvd.ticket, sizeof(int) * (size_t)B * H},
    };
    cudaError_t ae = device_bufs_alloc(spec, (int)(sizeof spec / sizeof spec[0]), &m->act_mem, &m->act_bytes);
    if (ae != cudaSuccess)
        SLLM_FATAL("infer: cannot allocate %.1f MiB of activations (%s); lower --chunk or --samples",
                   m->act_bytes / 1048576.0, cudaGetErrorString(ae));
    rope_upload_table(m->rope, S, cfg->head_dim, cfg->rope_theta);
    m->kvd.B = B; m->kvd.H = H; m->kvd.S = S; m->kvd.hd = cfg->head_dim; m->kvd.splits = kvd_splits(S, cfg->head_dim);
    cudaCheck(cudaMemset(m->kvd.ticket, 0, sizeof(int) * (size_t)B * H));  // tickets are zero between calls
    cudaCheck(cudaMallocHost((void **)&m->h_tokens, N * sizeof(int)));
    cudaCheck(cudaMallocHost((void **)&m->h_pos, sizeof(int)));
    cudaCheck(cudaMallocHost((void **)&m->h_logits, lrows * V * sizeof(float)));
    cudaCheck(cudaMallocHost((void **)&m->h_best, (size_t)B * sizeof(unsigned long long)));
    m->stats = (InferLayerStats *)sllm_calloc(L, sizeof(InferLayerStats));
    m->graph_delta = (InferLayerStats *)sllm_calloc(L, sizeof(InferLayerStats));
    m->dec_path = (int *)sllm_calloc(L, sizeof(int));
    m->dec_us = (float (*)[2])sllm_calloc(L, sizeof(float[2]));
    m->use_graph = 1;
    m->use_gemv = 1;
    if (!dense) {
        size_t before = 0, after = 0, tot = 0;
        cudaCheck(cudaMemGetInfo(&before, &tot));
        m->ws = (TwellFFNWorkspace *)sllm_calloc(L, sizeof(TwellFFNWorkspace));
        // Layer 0 owns the large buffers; the other layers borrow them (the layers run in order on m->stream) and
        // keep their own dispatch state and counters.
        if (twell_ffn_workspace_create(&m->ws[0], m->N_max, (int)D, (int)F, TWELL_DEFAULT_C, cfg->gated))
            SLLM_FATAL("infer: TwELL workspace (above)");
        m->ws[0].tile_sync = 0;  // prefill calls on the tile path never wait for the host (the borrowers copy this)
        for (size_t l = 1; l < L; l++)
            if (twell_ffn_workspace_create_shared(&m->ws[l], &m->ws[0]))
                SLLM_FATAL("infer: TwELL workspace of layer %zu (above)", l);
        cudaCheck(cudaMemGetInfo(&after, &tot));
        m->twell_bytes = before > after ? before - after : 0;
    }
    if (verbose) {
        printf("memory (device): %d sequence(s) x %d positions, prompt chunks of %d tokens, FFN %s\n", B, S, m->chunk,
               infer_ffn_name(ffn));
        printf("  %-32s %10.1f MiB\n", "parameters (bf16)", m->param_bytes / 1048576.0);
        if (m->wdT_bytes) printf("  %-32s %10.1f MiB\n", "down weights transposed (TwELL)", m->wdT_bytes / 1048576.0);
        printf("  %-32s %10.1f MiB\n", "KV cache", m->kv_bytes / 1048576.0);
        printf("  %-32s %10.1f MiB\n", "activations", m->act_bytes / 1048576.0);
        if (m->twell_bytes) printf("  %-32s %10.1f MiB\n", "TwELL workspaces (shared)", m->twell_bytes / 1048576.0);
        printf("  %-32s %10.1f MiB\n", "total",
               (m->param_bytes + m->wdT_bytes + m->kv_bytes + m->act_bytes + m->twell_bytes) / 1048576.0);
    }
}

static inline void infer_free(Infer *m) {
    cudaCheck(cudaStreamSynchronize(m->stream));
    if (m->ws) {
        for (int l = m->cfg.n_layer - 1; l >= 0; l--) twell_ffn_workspace_free(&m->ws[l]);  // borrowers first
        free(m->ws);
    }
    cudaCheck(cudaFree(m->params));
    if (m->wdT) cudaCheck(cudaFree(m->wdT));
    cudaCheck(cudaFree(m->kc));
    cudaCheck(cudaFree(m->act_mem));
    cudaCheck(cudaFreeHost(m->h_tokens));
    cudaCheck(cudaFreeHost(m->h_pos));
    cudaCheck(cudaFreeHost(m->h_logits));
    cudaCheck(cudaFreeHost(m->h_best));
    if (m->graph) cudaCheck(cudaGraphExecDestroy(m->graph));
    free(m->stats);
    free(m->graph_delta);
    free(m->dec_path);
    free(m->dec_us);
    matmul_context_free(&m->mm);
    cudaCheck(cudaStreamDestroy(m->stream));
    memset(m, 0, sizeof *m);
}

// After the bf16 parameters are in place: the transposed down weights of the TwELL modes.
static inline void infer_params_ready(Infer *m) {
    const int L = m->cfg.n_layer, D = m->cfg.d_model, F = m->cfg.d_ff;
    if (m->wdT)
        for (int l = 0; l < L; l++)
            infer_transpose(m->wdT + (size_t)l * F * D, infer_w(m, PARAM_WD, l), D, F, m->stream);
    cudaCheck(cudaStreamSynchronize(m->stream));
}
// Parameters from a host fp32 flat buffer (a checkpoint): rounded to bf16 as the trainer does (nearest even).
static inline void infer_set_params(Infer *m, const float *host) {
    params_upload(m->params, NULL, host, m->lay.total, m->stream);
    infer_params_ready(m);
}
// Random weights (model/weights.cuh, the trainer's init for the same seed), for runs without a checkpoint.
static inline void infer_init_random(Infer *m, uint64_t seed) {
    params_init_random(m->params, NULL, &m->lay, seed, m->stream);
    infer_params_ready(m);
}
// Parameters already in bf16 on the device (a Model's working weights, or random weights for benchmarks).
static inline void infer_set_params_device(Infer *m, const bf16 *dev) {
    cudaCheck(cudaMemcpyAsync(m->params, dev, m->param_bytes, cudaMemcpyDeviceToDevice, m->stream));
    infer_params_ready(m);
}

// Empties the cache (a new prompt). The per-layer statistics and the dispatch state are kept.
static inline void infer_reset(Infer *m) { m->pos = 0; }
static inline void infer_reset_stats(Infer *m) {
    memset(m->stats, 0, sizeof(InferLayerStats) * m->cfg.n_layer);
    if (m->ws)
        for (int l = 0; l < m->cfg.n_layer; l++) {  // the tile path's totals (a copy in flight lands first)
            twell_ffn_read_tile_stats(&m->ws[l]);
            m->ws[l].tile_host_syncs = m->ws[l].tile_rows = m->ws[l].tile_ovf_rows = 0;
            m->ws[l].tile_nnz = 0.0;
        }
    cudaCheck(cudaMemsetAsync(m->nnz, 0, sizeof(unsigned long long) * m->cfg.n_layer, m->stream));
}

// ---- decoding steps of B <= GEMV_MAX_M sequences on core/gemv.cuh (step_gemv) ----
// q into m->qkv, k and v straight into layer l's cache at d_pos, RoPE on q and k: one kernel.
static inline void infer_qkv_gemv(Infer *m, const BlockShape *bs, const LayerWeights *w, const GemvIn &in, bf16 *kc,
                                  bf16 *vc, int N) {
    GemvQKVRopeOp op;
    const bool mha = bs->Q == bs->KV;  // MHA: Wk, Wv follow Wq L * Q * D elements apart (block_qkv_rope)
    op.wq = w->wq;
    op.wk = mha ? w->wq + (size_t)bs->L * bs->Q * bs->D : w->wk;
    op.wv = mha ? w->wq + 2 * (size_t)bs->L * bs->Q * bs->D : w->wv;
    op.q = m->qkv; op.kc = kc; op.vc = vc; op.rope = m->rope; op.pos = m->d_pos;
    op.Q = bs->Q; op.KV = bs->KV; op.hd = bs->hd; op.S = m->S; op.K = bs->D;
    gemv_launch(op, in, N, bs->D, (bs->Q + 2 * bs->KV) / 2, m->stream);
}
// The dense FFN of one decoding step on the input rows `in` (ln, or the fused residual add + norm): h [N, F]
// (scratch) = relu(g) * u with the counters, then y = h Wd^T.
static inline void infer_ffn_dense_gemv(Infer *m, const BlockShape *bs, const LayerWeights *w, const GemvIn &in,
                                        bf16 *h, int N, unsigned long long *nnz, uint8_t *fired) {
    if (bs->gated) {
        GemvFFNUpOp<true> op = {w->wg, w->wu, h, bs->F, bs->D, nnz, fired};
        gemv_launch(op, in, N, bs->D, bs->F, m->stream);
    } else {
        GemvFFNUpOp<false> op = {NULL, w->wu, h, bs->F, bs->D, nnz, fired};
        gemv_launch(op, in, N, bs->D, bs->F, m->stream);
    }
    gemv_rows(m->y, gemv_in(h), w->wd, N, bs->D, bs->F, m->stream);
}

// AUTO at decoding steps (B <= the decode path's rows): the decode dispatch model of twell/ was fitted on an H200 at
// D 2048 against the cuBLASLt dense FFN, which the GEMV dense FFN (B <= GEMV_MAX_M) beats by 1.5-2x, so its predicted
// crossover is wrong on the GEMV steps, and on other GPUs and shapes it is a guess. Instead, at a layer's first such call (eager, never under capture) both paths are measured on the layer's
// own input as they run in a decoding step: each captured as a CUDA graph of INFER_DEC_MEASURE_CALLS calls back to
// back (programmatic launches, so each call's first kernel loads its weights while the call before it ends, as the
// FFN's kernels overlap their neighbours in the step's graph; counters off), the two graphs replayed
// INFER_DEC_MEASURE_REPS times each, interleaved, timed with events; the faster median per call is the layer's path
// for the Infer's life (graphs capture it). Timed alone with a sync between runs, the sparse FFN lost what its
// overlap gains in the step (H200, 2B: AUTO 6.6-7.2% slower than the sparse step). Returns 1 (dense) or 2 (sparse).
// The host waits for each replay: a one-time cost of the first decoding step (two captures per layer).
#define INFER_DEC_MEASURE_CALLS 4
#define INFER_DEC_MEASURE_REPS 5
static inline void infer_dec_measure_call(Infer *m, const BlockShape *bs, const LayerWeights *w, int l, int N, int p) {
    TwellFFNWorkspace *ws = &m->ws[l];
    const int D = bs->D, cr = ws->dense.chunk_rows;
    if (p == 0 && m->step_gemv) infer_ffn_dense_gemv(m, bs, w, gemv_in(m->ln), ws->dense.g, N, NULL, NULL);
    else if (p == 0)  // AUTO's dense calls off the GEMV (infer_ffn): the dense mode's kernels in chunks of dense.g
        for (int r0 = 0; r0 < N; r0 += cr)
            block_ffn_dense(&m->mm, bs, w, m->y + (size_t)r0 * D, ws->dense.g, ws->dense.g, m->ln + (size_t)r0 * D,
                            N - r0 < cr ? N - r0 : cr, NULL, NULL, m->stream);
    else if (twell_decode_forward(m->ln, w->wg, w->wu, m->wdT + (size_t)l * bs->F * bs->D, m->y, N, bs->D, bs->F,
                                  bs->gated, ws->dec_g, ws->dec_cnt, ws->dec_ent, NULL, ws->dec_pdl, m->stream) != TWELL_OK)
        SLLM_FATAL("infer: the decode path of layer %d failed (above)", l);
}
static inline int infer_measure_decode_path(Infer *m, const BlockShape *bs, const LayerWeights *w, int l, int N) {
    cudaStream_t s = m->stream;
    cudaGraphExec_t ge[2];
    for (int p = 0; p < 2; p++) {
        cudaGraph_t g;
        cudaCheck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
        for (int c = 0; c < INFER_DEC_MEASURE_CALLS; c++) infer_dec_measure_call(m, bs, w, l, N, p);
        cudaCheck(cudaStreamEndCapture(s, &g));
        cudaCheck(cudaGraphInstantiate(&ge[p], g, 0));
        cudaCheck(cudaGraphDestroy(g));
        cudaCheck(cudaGraphLaunch(ge[p], s));  // warm-up (instruction caches, L2 state of the other path)
    }
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    std::vector<float> t[2];
    for (int r = 0; r < INFER_DEC_MEASURE_REPS; r++)
        for (int p = 0; p < 2; p++) {
            cudaCheck(cudaEventRecord(e0, s));
            cudaCheck(cudaGraphLaunch(ge[p], s));
            cudaCheck(cudaEventRecord(e1, s));
            cudaCheck(cudaEventSynchronize(e1));
            float ms = 0.0f;
            cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
            t[p].push_back(ms * 1e3f / INFER_DEC_MEASURE_CALLS);
        }
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    for (int p = 0; p < 2; p++) {
        cudaCheck(cudaGraphExecDestroy(ge[p]));
        std::sort(t[p].begin(), t[p].end());
        m->dec_us[l][p] = t[p][INFER_DEC_MEASURE_REPS / 2];
    }
    return m->dec_us[l][1] < m->dec_us[l][0] ? 2 : 1;
}

// The FFN of layer l on ln [N, D] -> y [N, D].
static inline void infer_ffn(Infer *m, const BlockShape *bs, const LayerWeights *w, int l, int N) {
    const int D = bs->D, F = bs->F;
    cudaStream_t s = m->stream;
    InferLayerStats *st = &m->stats[l];
    if (m->ffn == INFER_FFN_DENSE) {
        const FFNStats fs = {m->l1_part, m->nnz + l, m->fired + (size_t)l * F};
        block_ffn_dense(&m->mm, bs, w, m->y, m->gu, m->h, m->ln, N, &fs, NULL, s);
        st->nnz_rows += N;
        return;
    }
    TwellFFNWorkspace *ws = &m->ws[l];
    const bf16 *Wg = w->wg, *Wu = w->wu;
    const bf16 *WdT = m->wdT + (size_t)l * F * D;
    if (m->ffn == INFER_FFN_AUTO && m->calibrate && ws->model.calibrated == 0 && N >= INFER_CALIBRATE_MIN_ROWS) {
        cudaStreamCaptureStatus cap;
        cudaCheck(cudaStreamIsCapturing(s, &cap));
        if (cap == cudaStreamCaptureStatusNone &&
            twell_ffn_calibrate(&m->mm, ws, m->ln, Wg, Wu, WdT, m->y, N, 3, s) != TWELL_OK) {
            fprintf(stderr, "warning: infer: the dispatch calibration of layer %d failed (above): built-in model kept\n", l);
            ws->model.calibrated = -1;
        }
    }
    TwellFFNResult r;
    TwellPath path = TWELL_PATH_SPARSE;
    if (m->ffn == INFER_FFN_AUTO) {
        // AUTO's dense calls run the dense engine's FFN (one batched gate/up GEMM, the down GEMM on wd), the same
        // kernels as --ffn dense, counted for the dispatch through the workspace's counter
        const int capturing = twell_capturing(s);
        if (m->step_decode && N <= ws->decode_rows && m->dec_path[l] == 0 && !capturing)
            m->dec_path[l] = infer_measure_decode_path(m, bs, w, l, N);
        if (m->step_decode && N <= ws->decode_rows && m->dec_path[l])
            path = m->dec_path[l] == 1 ? TWELL_PATH_DENSE : TWELL_PATH_SPARSE;
        else path = twell_ffn_choose(ws, N, TWELL_PATH_AUTO, -1.0, capturing);
        if (path == TWELL_PATH_DENSE) {
            // in chunks of the workspace's dense scratch: gu [2, rows, F] packed in dense.g (u follows g), h in place
            unsigned long long *cnt = twell_ffn_count_begin(ws, capturing, 1, s);
            const FFNStats fs = {m->l1_part, cnt, m->fired + (size_t)l * F};
            const int cr = ws->dense.chunk_rows;
            if (m->step_gemv) infer_ffn_dense_gemv(m, bs, w, gemv_in(m->ln), ws->dense.g, N, fs.nnz, fs.fired);
            else for (int r0 = 0; r0 < N; r0 += cr) {
                const int rows = N - r0 < cr ? N - r0 : cr;
                block_ffn_dense(&m->mm, bs, w, m->y + (size_t)r0 * D, ws->dense.g, ws->dense.g, m->ln + (size_t)r0 * D,
                                rows, &fs, NULL, s);
            }
            twell_ffn_count_end(ws, cnt, N, s);
            twell_ffn_note_dense(ws);
            st->calls_dense++;
            return;
        }
    }
    int e = twell_ffn_forward(&m->mm, ws, m->ln, Wg, Wu, WdT, m->y, N, path, -1.0, &r, s);
    if (e) SLLM_FATAL("infer: the TwELL FFN of layer %d failed (error %d, above)", l, e);
    if (r.path == TWELL_PATH_DENSE) st->calls_dense++;
    else if (r.decode) st->calls_decode++;
    else st->calls_tile++;
}

// Host side of a call: checks, and the tokens and position into their pinned staging buffers (after the previous call
// has finished with them).
static inline void infer_stage(Infer *m, const int *tokens, int T) {
    const int N = m->B * T, V = m->cfg.vocab_size;
    if (T < 1 || T > m->chunk) SLLM_FATAL("infer_forward: T=%d new tokens per sequence must be in [1, %d]", T, m->chunk);
    if (m->pos + T > m->S)
        SLLM_FATAL("infer_forward: %d + %d tokens exceed the context of %d positions (--context)", m->pos, T, m->S);
    for (int i = 0; i < N; i++)
        if (tokens[i] < 0 || tokens[i] >= V)
            SLLM_FATAL("infer_forward: token %d (row %d) outside the vocabulary [0, %d)", tokens[i], i, V);
    cudaCheck(cudaStreamSynchronize(m->stream));
    memcpy(m->h_tokens, tokens, sizeof(int) * N);
    m->h_pos[0] = m->pos;
}

// Device side of a call of T tokens per sequence (everything on m->stream, capturable when T = 1 and pos > 0): the
// staged tokens and position in, the layers, the logits out to h_logits. first_chunk: pos == 0 (the training
// attention over the chunk's own rows).
static inline void infer_enqueue(Infer *m, int T, int first_chunk) {
    const ModelConfig *c = &m->cfg;
    const int B = m->B, N = B * T, D = c->d_model, L = c->n_layer, V = c->vocab_size, H = c->n_head,
              KVH = c->n_kv_head, hd = c->head_dim, Q = m->Q, KV = m->KV, S = m->S;
    cudaStream_t s = m->stream;
#ifdef SLLM_KTRACE
    kt_next = 0;  // this call's launches take slots 0, 1, ...
#endif
    cudaCheck(cudaMemcpyAsync(m->tokens, m->h_tokens, sizeof(int) * N, cudaMemcpyHostToDevice, s));
    cudaCheck(cudaMemcpyAsync(m->d_pos, m->h_pos, sizeof(int), cudaMemcpyHostToDevice, s));
    const float eps = c->norm_eps;
    m->argmax_ready = 0;
    const size_t layer_kv = (size_t)B * S * KV;
    embedding_forward(m->x, m->tokens, infer_w(m, PARAM_EMBED, 0), N, D, s);
    const BlockShape bs = block_shape(c);
    // A decoding step of a few sequences runs its products on core/gemv.cuh, bound by the weights' bytes: q, k, v
    // with RoPE and the cache write in one kernel, the dense FFN's h in one, and each block's residual add + norm
    // inside the product that reads it (the previous layer's x = xm + y and its norm in the q/k/v kernel, xm = x + y
    // and its norm in the FFN's up kernel (dense mode), the final ones in the LM head), so ln and lnf stay unwritten.
    const int gemv = m->use_gemv && T == 1 && !first_chunk && gemv_fits(N, D, m->ln) &&
                     gemv_fits(N, Q, m->att) && gemv_fits(N, c->d_ff, m->ln) && D % 2 == 0 && V % 2 == 0;
    m->step_gemv = gemv;
    m->step_decode = T == 1 && !first_chunk;
    if (gemv && m->greedy_dev) cudaCheck(cudaMemsetAsync(m->best, 0, sizeof(unsigned long long) * B, s));
    if (!gemv) rmsnorm_forward(m->ln, m->rstd, m->x, infer_w(m, PARAM_ATTN_NORM, 0), N, D, eps, s);
    for (int l = 0; l < L; l++) {
        const LayerWeights w = layer_weights(m->params, &m->lay, c, l);
        bf16 *q = m->qkv, *k = q + (size_t)N * Q, *v = k + (size_t)N * KV;
        bf16 *kc = m->kc + (size_t)l * layer_kv, *vc = m->vc + (size_t)l * layer_kv;
        if (gemv) {
            // layer 0: norm(x); later layers: x = xm + y of the layer before, then its norm
            const GemvIn in = {l == 0 ? m->x : m->xm, l == 0 ? NULL : m->y, w.attn_norm, l == 0 ? NULL : m->x, eps};
            infer_qkv_gemv(m, &bs, &w, in, kc, vc, N);
        } else {
            block_qkv_rope(&m->mm, &bs, &w, q, k, v, m->ln, m->rope, N, T, m->d_pos, s);
            // the first chunk's attention writes its keys and values into the cache itself (positions 0 .. T-1)
            if (!first_chunk) kv_cache_write(kc, vc, k, v, B, T, 0, m->d_pos, S, KV, s);
        }
        if (first_chunk) {
            const AttnKVCache cache = {kc, vc, S};
            if (!attention_forward(m->att, m->lse, q, k, v, B, T, H, KVH, hd, s, &cache))
                kv_cache_write(kc, vc, k, v, B, T, 0, m->d_pos, S, KV, s);  // the simple path does not
        } else if (T == 1) kv_decode_attention(m->att, q, kc, vc, B, 0, m->d_pos, S, H, KVH, hd, &m->kvd, s);
        else kv_attention(m->att, q, kc, vc, B, T, 0, m->d_pos, S, H, KVH, hd, s);
        if (gemv) {
            gemv_rows(m->y, gemv_in(m->att), w.wo, N, D, Q, s);
            if (m->ffn == INFER_FFN_DENSE) {  // xm = x + y and its norm inside the FFN's up kernel
                const GemvIn in = {m->x, m->y, w.ffn_norm, m->xm, eps};
                infer_ffn_dense_gemv(m, &bs, &w, in, m->h, N, m->nnz + l, m->fired + (size_t)l * bs.F);
                m->stats[l].nnz_rows += N;
            } else if (m->ffn == INFER_FFN_SPARSE && N <= m->ws[l].decode_rows && m->ws[l].dec_gate_warps == 0) {
                // the decode path's GEMV gate computes xm = x + y and its norm itself
                const GemvIn in = {m->x, m->y, w.ffn_norm, m->xm, eps};
                m->ws[l].dec_in = in;
                infer_ffn(m, &bs, &w, l, N);
                memset(&m->ws[l].dec_in, 0, sizeof(GemvIn));
            } else {
                fused_residual_rmsnorm_forward(m->xm, m->ln, m->rstd, m->x, m->y, w.ffn_norm, N, D, bs.eps, s);
                infer_ffn(m, &bs, &w, l, N);
            }
        } else {
            block_attn_out(&m->mm, &bs, &w, m->xm, m->ln, m->rstd, m->x, m->y, m->att, N, s);
            infer_ffn(m, &bs, &w, l, N);
            block_ffn_out(&bs, &w, m->x, l + 1 < L ? m->ln : m->lnf, m->rstd, m->xm, m->y, N, s);
        }
    }
    // tied LM head, fp32 logits, then to the host
    const bf16 *E = infer_w(m, PARAM_EMBED, 0);
    int rows = B;
    if (gemv) {  // T = 1: x = xm + y of the last layer, its final norm, the logits (every row a last row)
        const GemvIn in = {m->xm, m->y, infer_w(m, PARAM_FINAL_NORM, 0), m->x, eps};
        if (m->greedy_dev) {  // the greedy token on the GPU: B keys to the host instead of B x V logits
            const GemvLogitsArgmaxOp op = {E, m->logits, m->best, V, D, B};
            gemv_launch(op, in, B, D, V / 2, s);
            cudaCheck(cudaMemcpyAsync(m->h_best, m->best, sizeof(unsigned long long) * B, cudaMemcpyDeviceToHost, s));
            m->argmax_ready = 1;
            return;
        }
        gemv_rows(m->logits, in, E, B, V, D, s);
    } else if (m->all_logits) {
        rows = N;
        matmul(&m->mm, m->logits, 1, m->lnf, 0, E, 1, N, V, D, 1.0f, 0.0f, s);
    } else {
        cudaCheck(cudaMemcpy2DAsync(m->last, (size_t)D * 2, m->lnf + (size_t)(T - 1) * D, (size_t)T * D * 2,
                                    (size_t)D * 2, B, cudaMemcpyDeviceToDevice, s));
        matmul(&m->mm, m->logits, 1, m->last, 0, E, 1, B, V, D, 1.0f, 0.0f, s);
    }
    if (m->greedy_dev) {  // the greedy pick of each sequence's last row on the GPU: B keys instead of the logits
        const size_t stride = (size_t)(m->all_logits ? T : 1) * V;
        argmax_rows(m->best, m->logits + (m->all_logits ? (size_t)(T - 1) * V : 0), stride, B, V, s);
        cudaCheck(cudaMemcpyAsync(m->h_best, m->best, sizeof(unsigned long long) * B, cudaMemcpyDeviceToHost, s));
        m->argmax_ready = 1;
        return;
    }
    cudaCheck(cudaMemcpyAsync(m->h_logits, m->logits, sizeof(float) * (size_t)rows * V, cudaMemcpyDeviceToHost, s));
}

// T new tokens per sequence (tokens [B * T] on the host, row b * T + t) at positions pos .. pos + T - 1; T <= chunk.
// Leaves the logits (fp32) of each sequence's last new row (all_logits: of every row) for infer_get_logits and
// advances pos. Asynchronous on m->stream except for the TwELL tile path's count read-back.
static inline void infer_forward(Infer *m, const int *tokens, int T) {
    m->last_T = T;
    infer_stage(m, tokens, T);
    infer_enqueue(m, T, m->pos == 0);
    m->pos += T;
}

// Can a decoding step run as a graph (no FFN call that needs a host sync)?
static inline int infer_graph_ok(const Infer *m) {
    return m->use_graph && (m->ffn == INFER_FFN_DENSE || m->B <= m->ws[0].decode_rows);
}

// One decoding step: one new token per sequence (tokens [B]). The first step runs eagerly; from the second on, the
// step is a CUDA graph captured once and replayed (when infer_graph_ok), with the same results bit for bit.
static inline void infer_decode(Infer *m, const int *tokens) {
    const int L = m->cfg.n_layer;
    if (m->pos == 0 || !infer_graph_ok(m) || m->eager_decodes < 1) {
        infer_forward(m, tokens, 1);
        m->eager_decodes++;
        return;
    }
    infer_stage(m, tokens, 1);
    m->last_T = 1;
    const int opts = m->use_gemv | m->greedy_dev << 1 | m->all_logits << 2;
    if (m->graph && m->graph_opts != opts) {  // an option the captured step depends on changed: capture again
        cudaCheck(cudaGraphExecDestroy(m->graph));
        m->graph = NULL;
    }
    if (!m->graph) {
        InferLayerStats *before = (InferLayerStats *)sllm_malloc(sizeof(InferLayerStats) * L);
        memcpy(before, m->stats, sizeof(InferLayerStats) * L);
        cudaGraph_t g;
        cudaCheck(cudaStreamBeginCapture(m->stream, cudaStreamCaptureModeThreadLocal));
        infer_enqueue(m, 1, 0);
#ifdef SLLM_KTRACE
        m->kt_n = kt_next;
        memcpy(m->kt_names, kt_names, sizeof(kt_names));
#endif
        cudaCheck(cudaStreamEndCapture(m->stream, &g));
        cudaCheck(cudaGraphInstantiate(&m->graph, g, 0));
        cudaCheck(cudaGraphDestroy(g));
        for (int l = 0; l < L; l++) {  // what the captured calls recorded is what each replay does
            m->graph_delta[l] = m->stats[l];
            infer_stats_add(&m->graph_delta[l], &before[l], -1);
        }
        memcpy(m->stats, before, sizeof(InferLayerStats) * L);
        free(before);
        m->graph_argmax = m->argmax_ready;
        m->graph_opts = opts;
    }
    cudaCheck(cudaGraphLaunch(m->graph, m->stream));
    m->argmax_ready = m->graph_argmax;
    m->graph_replays++;
    for (int l = 0; l < L; l++) infer_stats_add(&m->stats[l], &m->graph_delta[l], 1);
    m->pos += 1;
}

// GPU time of one decoding step: the captured graph replayed `reps` times back to back at the current position (each
// replay writes the same cache row again), ms per replay from events; -1 when no graph was captured. The host work of a
// step (staging, logits read-back, sampling) is not in it. The first replay is bracketed by cudaProfilerStart/Stop, so
// `ncu --profile-from-start off` sees exactly one decoding step. A benchmark helper: the replays add to the device-side
// FFN counters, so call it after the statistics have been read.
static inline double infer_decode_graph_ms(Infer *m, int reps) {
    if (!m->graph || reps < 1) return -1.0;
    cudaCheck(cudaStreamSynchronize(m->stream));
    cudaCheck(cudaProfilerStart());
    cudaCheck(cudaGraphLaunch(m->graph, m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
    cudaCheck(cudaProfilerStop());
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    cudaCheck(cudaEventRecord(e0, m->stream));
    for (int i = 0; i < reps; i++) cudaCheck(cudaGraphLaunch(m->graph, m->stream));
    cudaCheck(cudaEventRecord(e1, m->stream));
    cudaCheck(cudaEventSynchronize(e1));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    return (double)ms / reps;
}

#ifdef SLLM_KTRACE
// One replay of the captured decoding step with its kernels traced (core/ktrace.cuh): a table of the launches in
// stream order, times in us from the first entry: entry (earliest warp), return from the wait, exit (latest warp),
// and how the boundaries overlap (entry before the previous exit; wait returned after the previous exit).
static inline void infer_ktrace_dump(Infer *m, FILE *f) {
    if (!m->graph || !m->kt_n) return;
    KtSlot t[KT_MAX];
    cudaCheck(cudaStreamSynchronize(m->stream));
    kt_reset_device(m->stream);
    cudaCheck(cudaGraphLaunch(m->graph, m->stream));
    kt_read(t, m->stream);
    unsigned long long t0 = ~0ull;
    for (int i = 0; i < m->kt_n; i++) t0 = t[i].start < t0 ? t[i].start : t0;
    fprintf(f, "ktrace (%s FFN, one replayed decoding step, us from the first traced entry):\n", infer_ffn_name(m->ffn));
    fprintf(f, "  %3s %9s %9s %9s %9s %10s %10s  %s\n", "#", "entry", "wait", "exit", "run", "head start", "wait lag",
            "kernel");
    for (int i = 0; i < m->kt_n; i++) {
        const double e = (t[i].start - t0) * 1e-3, x = (t[i].end - t0) * 1e-3;
        const double w = t[i].wait == ~0ull ? -1.0 : (t[i].wait - t0) * 1e-3;
        const double px = i ? (t[i - 1].end - t0) * 1e-3 : 0.0;
        const char *name = m->kt_names[i], *op = strstr(name, "Op = ");
        char buf[72];
        if (op) {  // gemv_launch_cfg's __PRETTY_FUNCTION__: keep the op's type
            snprintf(buf, sizeof buf, "gemv %.*s", (int)strcspn(op + 5, ";]"), op + 5);
            name = buf;
        }
        fprintf(f, "  %3d %9.2f %9.2f %9.2f %9.2f %10.2f %10.2f  %s\n", i, e, w, x, x - (w >= 0 ? w : e),
                i ? px - e : 0.0, i && w >= 0 ? w - px : 0.0, name);
    }
    fprintf(f, "  (head start: the previous exit minus this entry; wait lag: this wait's return minus the previous exit)\n");
}
#endif

// A prompt of P tokens per sequence (prompts [B * P], row b * P + t), run in chunks of at most m->chunk tokens.
static inline void infer_prefill(Infer *m, const int *prompts, int P) {
    int *buf = (int *)sllm_malloc(sizeof(int) * (size_t)m->B * m->chunk);
    for (int t0 = 0; t0 < P; t0 += m->chunk) {
        int T = P - t0 < m->chunk ? P - t0 : m->chunk;
        for (int b = 0; b < m->B; b++) memcpy(buf + (size_t)b * T, prompts + (size_t)b * P + t0, sizeof(int) * T);
        infer_forward(m, buf, T);
    }
    free(buf);
}

// The logits of the last call on the host: [B, V] ([B*T, V] with all_logits: `rows` rows).
static inline void infer_get_logits(Infer *m, float *host, int rows) {
    cudaCheck(cudaStreamSynchronize(m->stream));
    if (m->argmax_ready)  // the call copied argmax keys only: the logits are still on the device
        cudaCheck(cudaMemcpy(host, m->logits, sizeof(float) * (size_t)rows * m->cfg.vocab_size, cudaMemcpyDeviceToHost));
    else memcpy(host, m->h_logits, sizeof(float) * (size_t)rows * m->cfg.vocab_size);
}
// The greedy token of each sequence after the last call (tokens [B]): the first index of the maximum logit, NaN never
// winning (core/sampler.h's sampler_argmax), from the GPU's argmax keys when the call left them, else on the host.
static inline void infer_get_greedy(Infer *m, int *tokens) {
    cudaCheck(cudaStreamSynchronize(m->stream));
    const int V = m->cfg.vocab_size, T = m->all_logits ? m->last_T : 1;  // all_logits: sequence b's last row
    for (int b = 0; b < m->B; b++)
        tokens[b] = m->argmax_ready ? argmax_index(m->h_best[b])
                                    : sampler_argmax(m->h_logits + ((size_t)b * T + T - 1) * V, V);
}

// Per-layer FFN report (paths taken, overflow rows, active gates per token where measured).
static inline void infer_print_stats(Infer *m, FILE *f) {
    const int L = m->cfg.n_layer;
    unsigned long long *nnz = NULL;
    if (m->ffn == INFER_FFN_DENSE) {
        nnz = (unsigned long long *)sllm_malloc(sizeof(unsigned long long) * L);
        cudaCheck(cudaStreamSynchronize(m->stream));
        cudaCheck(cudaMemcpy(nnz, m->nnz, sizeof(unsigned long long) * L, cudaMemcpyDeviceToHost));
    }
    fprintf(f, "FFN per layer (%s):\n", infer_ffn_name(m->ffn));
    for (int l = 0; l < L; l++)
        if (m->dec_path[l])
            fprintf(f, "  layer %d, decoding steps: %s (measured: dense %.1f us, sparse %.1f us per call)\n", l,
                    m->dec_path[l] == 1 ? "dense" : "sparse", m->dec_us[l][0], m->dec_us[l][1]);
    if (m->ffn == INFER_FFN_DENSE) fprintf(f, "  layer   active gates/token\n");
    else fprintf(f, "  layer   dense-calls  tile-calls  decode-calls  overflow-rows  host-syncs  active gates/token: tile "
                    "calls, latest\n");
    for (int l = 0; l < L; l++) {
        const InferLayerStats *st = &m->stats[l];
        if (m->ffn == INFER_FFN_DENSE)
            fprintf(f, "  %5d   %18.1f\n", l, st->nnz_rows ? (double)nnz[l] / st->nnz_rows : 0.0);
        else {
            // latest: the layer's last count read back by the dispatch (any path; the decode and dense paths' counts
            // arrive one call late, without a sync)
            // tile calls: the workspace's totals of the counts taken (the newest copy in flight waited for)
            TwellFFNWorkspace *ws = &m->ws[l];
            twell_ffn_read_tile_stats(ws);
            char tile[32], latest[32];
            if (ws->tile_rows) snprintf(tile, sizeof tile, "%.1f", ws->tile_nnz / ws->tile_rows);
            else snprintf(tile, sizeof tile, "-");
            if (m->ws[l].last_mean_nnz >= 0) snprintf(latest, sizeof latest, "%.1f", m->ws[l].last_mean_nnz);
            else snprintf(latest, sizeof latest, "-");
            fprintf(f, "  %5d   %11lld  %10lld  %12lld  %13lld  %10lld  %10s  %8s\n", l, st->calls_dense, st->calls_tile,
                    st->calls_decode, ws->tile_ovf_rows, ws->tile_host_syncs, tile, latest);
        }
    }
    free(nnz);
}

#endif  // SLLM_INFER_ENGINE_CUH
