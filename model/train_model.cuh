// model/train_model.cuh: the Llama-style ReLU-FFN model for training on the GPU (dense FFN path): allocation,
// forward, backward, gradient norm and AdamW. Used by train_gpt_relu.cu and the GPU tests. The parameters and the
// forward block are those of model/weights.cuh and model/block.cuh, shared with the inference engine.
//
// Memory: ONE cudaMalloc each for the bf16 parameters, the fp32 gradients, the optimizer state
// (fp32 master | m | v) and the activations (a table of named buffers, llm.c style; printed at start-up).
// Parameters use the flat layout of core/config.h (per-layer tensors stacked [L, rows, cols]).
//
// Activations (N = B*T tokens of the allocated micro-batch, Q = H*hd, KV = KVH*hd, G = gated ? 2 : 1):
//   res      [L+1, N, D] bf16  residual stream entering layer l; res[L] = input of the final norm
//   res_mid  [L, N, D]         residual after the attention block of layer l
//   ln1, ln2 [L, N, D]         normed inputs of attention / FFN ([1, N, D] with recompute >= 2)
//   rstd1/2  [L, N] fp32, rstdf [N] fp32, lnf [N, D]
//   qkv      [L, N*(Q+2KV)]    per layer: q [N, Q] then k [N, KV] then v [N, KV]; q, k after RoPE
//   att      [L, N, Q], lse [L, B, H, T] fp32
//   gu       [L, G, N, F]      gate and up pre-activations (overwritten by their gradients in backward);
//                              [1, G, N, F] with ffn_lean (recomputed from ln2 in backward), none with the FFN forced
//                              sparse
//   h        [L, N, F]         hidden ([1, N, F] with recompute >= 1 or ffn_lean: recomputed from gu in backward)
//   scratch: y [N, D], dres [N, D], dln [N, D], dh [N, F], datt [N, Q], dqkv [N, Q+2KV], logits
//            [chunk, V] (bf16, dlogits in place), losses [N] fp32, attention and norm scratch.
//
// Loss = CE + lambda * mean_l(mean_tokens(sum_F |h_l|)). With gradient accumulation over A micro-steps
// of N tokens each, the forward is called with dloss = 1/(A*N) and the backward with
// l1_coef = lambda/(L*A*N), so the accumulated gradient is that of the mean over the whole step.
// All statistics stay on the device until model_read_step (one sync per optimizer step).
//
// Data parallel (train_gpt_relu.cu with core/dist.cuh, core/zero1.cuh): the model knows nothing of NCCL; the
// trainer fills Model.dist (ModelDist) with callbacks. The backward calls dist.grad_ready(bucket) once the
// gradients of a bucket are final (core/grad_buckets.h: the embedding's classifier part at the start, then each
// layer's FFN and attention parts), so each reduction overlaps the rest of the backward; the last micro-step's
// token-lookup part of the embedding gradient goes through dist.embed_lookup (all-gathered, not reduced again). model_read_step / model_read_sparsity sum the step's statistics (CE, L1
// partials, non-zero counts; fired units by max) across ranks before reading them, so every rank sees the same
// global values (and a per-layer dense/sparse decision taken from them is the same on every rank).
// FFN path per layer (model/sparse_ffn.cuh, model_create_ex's SparseFFNOptions): dense (block_ffn_dense) or sparse
// (twell/train_ffn.cuh, the same rounding points and the same statistics); the sparse layers keep only their compact
// state for the backward. The path of each layer is decided after each step from the step's counts
// (model_ffn_dispatch); a layer can go back to dense at any step, so the dense activations exist for every layer
// (auto), or in a one-layer slot with the gate and up GEMMs recomputed in the backward (ffn_lean), or not at all
// (the path forced sparse: the dense path never runs).
#ifndef SLLM_TRAIN_MODEL_CUH
#define SLLM_TRAIN_MODEL_CUH

#include <stdint.h>

#include "adamw.cuh"
#include "attention.cuh"
#include "classifier.cuh"
#include "config.h"
#include "embedding.cuh"
#include "ffn.cuh"
#include "global_norm.cuh"
#include "grad_buckets.h"
#include "kernel_utils.cuh"
#include "matmul.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#include "step_profiler.cuh"
#include "model/block.cuh"
#include "model/sparse_ffn.cuh"
#include "model/weights.cuh"

typedef enum {
    MODEL_EVAL = 0,    // loss only (targets required)
    MODEL_TRAIN = 1,   // loss, dlogits and the classifier backward; sparsity statistics
    MODEL_LOGITS = 2,  // keep the bf16 logits of all N rows in m->logits (N <= m->chunk); loss if targets
} ModelMode;

enum { SC_CE = 0, SC_NORM = 1, SC_COUNT = 8 };

// Collectives of a data-parallel trainer (all NULL: one process, nothing is reduced). ctx is passed back.
typedef struct {
    void *ctx;
    int world;  // ranks (statistics per token divide by world * local tokens)
    void (*grad_ready)(void *ctx, int bucket, cudaStream_t s);
    // Adds the token-lookup gradient (dout [N, D], bucket table) of every rank into dE and returns 1, or returns 0
    // and the model adds its own (embedding_backward). Required with grad_ready.
    int (*embed_lookup)(void *ctx, float *dE, const bf16 *dout, const int *table, int N, int D, cudaStream_t s);
    void (*sum_f32)(void *ctx, float *dev, size_t n, cudaStream_t s);
    void (*sum_u64)(void *ctx, unsigned long long *dev, size_t n, cudaStream_t s);
    void (*max_u8)(void *ctx, uint8_t *dev, size_t n, cudaStream_t s);
} ModelDist;

typedef struct {
    ModelConfig cfg;
    ParamLayout lay;
    int B, T, N;       // allocated micro-batch (N = B*T)
    int recompute;     // 0: store all; 1: recompute h; 2: also recompute ln1/ln2
    int chunk;         // classifier rows per chunk
    int Q, KV, G;      // H*hd, KVH*hd, gated ? 2 : 1
    size_t lse_stride; // floats per layer in lse (B*T*H rounded up to 64: 256-byte aligned slices)
    // parameters / gradients / optimizer
    bf16 *params;      // [total] bf16 working weights
    float *grads;      // [total] fp32
    float *opt;        // [3*total] master | m | v (NULL without optimizer)
    float *master, *m, *v;
    // activations
    void *act_mem;
    size_t act_bytes;
    bf16 *res, *res_mid, *ln1, *ln2, *lnf, *qkv, *att, *gu, *h;
    float *rstd1, *rstd2, *rstdf, *lse;
    bf16 *y, *dres, *dln, *dh, *datt, *dqkv, *logits;
    float *losses, *attn_scratch, *norm_scratch, *gn_scratch, *rope;
    int *tokens, *targets, *buckets;
    float *l1_part;            // [L, FFN_STAT_BLOCKS]
    unsigned long long *nnz;   // [L]
    uint8_t *fired;            // [L, F]
    float *scalars;            // [SC_COUNT]
    // host side
    int *h_stage;              // pinned: tokens [N], targets [N], buckets [3N+2]
    uint64_t *h_pairs;         // [N]
    int num_distinct;
    int has_targets;
    cudaEvent_t stage_free;
    uint64_t stat_tokens;      // tokens counted into nnz/fired since the last reset
    int cur_B, cur_T;          // shape of the last forward
    MatmulContext mm;
    cudaStream_t stream;
    size_t param_bytes, grad_bytes, opt_bytes;
    // Gradients: model_zero_grad does NOT memset them (2 GB at 0.5B); it sets grads_fresh, and the first
    // backward after it WRITES every gradient element (GEMMs with beta = 0, norm gains with =, the classifier's
    // first dE chunk with beta = 0, embedding backward after it with +=), then clears the flag.
    int grads_fresh;
    StepProfiler *prof;        // per-phase CUDA-event timing when set (--bench); NULL: no events
    ModelDist dist;            // data-parallel callbacks (zeroed: single process)
    int sparsity_reduced;      // nnz/fired already summed across ranks since the last model_reset_sparsity
    SparseFFN sp;              // the sparse FFN path (sp.mode FFN_PATH_DENSE: dense only, nothing allocated)
    int ffn_lean;              // dense FFN activations in a one-layer slot (gu recomputed in backward)
    int ffn_dense_slots;       // layer slots of gu (and of h without recompute): L, 1 or 0
} Model;

// Options of the FFN path (model_create_ex); NULL: dense only.
typedef struct {
    int mode;                  // FFNPathMode
    int lean;                  // auto: dense FFN activations in one slot, recomputed in backward
    SparseDispatchParams par;
} SparseFFNOptions;

static inline void model_grad_ready(Model *m, int bucket) {
    if (m->dist.grad_ready) m->dist.grad_ready(m->dist.ctx, bucket, m->stream);
}

static inline void model_mark(Model *m, int phase) {
    if (m->prof) prof_mark(m->prof, phase, m->stream);
}

// ---- parameter pointers (flat layout, model/weights.cuh) --------------------------------------------
static inline bf16 *model_w(const Model *m, ParamKind k, int l) { return param_ptr(m->params, &m->lay, k, l); }
static inline float *model_g(const Model *m, ParamKind k, int l) { return m->grads + param_offset(&m->lay, k, l); }

// ---- allocation ----------------------------------------------------------------------------------
static inline void model_print_bytes(FILE *f, const char *what, size_t b) {
    fprintf(f, "  %-28s %10.1f MiB\n", what, b / 1048576.0);
}

// Bytes of the sparse FFN path (workspace, states, WdT copies); 0 when dense only.
static inline size_t model_sparse_bytes(const Model *m) {
    if (m->sp.mode == FFN_PATH_DENSE) return 0;
    return m->sp.ws_bytes + (size_t)m->cfg.n_layer * m->sp.state_bytes + m->sp.wdT_bytes;
}
// The FFN activations of both paths: what a dense layer keeps, what a sparse layer keeps, what is allocated.
static inline void model_print_ffn_memory(const Model *m, FILE *f) {
    const size_t N = m->N, F = m->cfg.d_ff, G = m->G, L = m->cfg.n_layer;
    const size_t dense_layer = (G + (m->recompute >= 1 ? 0 : 1)) * N * F * 2;
    fprintf(f, "  FFN path %s%s: dense FFN activations %.1f MiB per layer (%.1f MiB for all %zu layers), allocated for "
               "%d layer slot(s)\n", ffn_path_name(m->sp.mode), m->ffn_lean ? " (lean: dense layers recompute gu)" : "",
            dense_layer / 1048576.0, L * dense_layer / 1048576.0, L, m->ffn_dense_slots);
    if (m->sp.mode != FFN_PATH_DENSE)
        fprintf(f, "  sparse FFN: state %.1f MiB per layer (%.1f MiB for %zu layers), workspace %.1f MiB, WdT copies "
                   "%.1f MiB\n", m->sp.state_bytes / 1048576.0, L * m->sp.state_bytes / 1048576.0, L,
                m->sp.ws_bytes / 1048576.0, m->sp.wdT_bytes / 1048576.0);
}

// Creates the model for micro-batches of up to B x T tokens. with_optimizer: allocate master/m/v.
// verbose: print the memory table to stdout. Parameters are left uninitialised (model_set_params or
// model_init_random). param_elems: elements of the bf16 parameter allocation (>= the layout's total; more lets
// ZeRO-1 gather the shards with one all-gather, core/zero1.cuh zero1_padded_total; 0: exactly total). ffn: the FFN
// path options (NULL: dense only).
static inline void model_create_ex(Model *m, const ModelConfig *cfg, int B, int T, int recompute, int with_optimizer,
                                   int verbose, size_t param_elems, const SparseFFNOptions *ffn) {
    char err[256];
    memset(m, 0, sizeof *m);
    weights_check_config(cfg, "model_create");
    if (attention_validate(B, T, cfg->n_head, cfg->n_kv_head, cfg->head_dim, err, sizeof err) != 0)
        SLLM_FATAL("model_create: %s", err);
    if (recompute < 0 || recompute > 2) SLLM_FATAL("model_create: recompute must be 0, 1 or 2 (got %d)", recompute);
    if (B < 1 || T < 1) SLLM_FATAL("model_create: B=%d and T=%d must be >= 1", B, T);
    m->cfg = *cfg;
    config_param_layout(cfg, &m->lay);
    m->B = B; m->T = T; m->N = B * T; m->recompute = recompute;
    m->Q = cfg->n_head * cfg->head_dim; m->KV = cfg->n_kv_head * cfg->head_dim; m->G = cfg->gated ? 2 : 1;
    const size_t N = m->N, D = cfg->d_model, L = cfg->n_layer, F = cfg->d_ff, V = cfg->vocab_size;
    const size_t Q = m->Q, KV = m->KV, G = m->G, H = cfg->n_head;
    // Classifier chunk: up to 1 GiB of bf16 logits, split into EQUAL chunks (multiples of 64 rows where
    // possible): each chunk re-reads and re-writes the fp32 dE [V, D] (0.8 GB at V=49152, D=2048) and runs
    // smaller GEMMs, so few, even chunks are fastest (0.5B and 1.5B at 4 x 2048 tokens: ONE chunk of 8192
    // rows, 768 MiB of logits).
    size_t max_rows = (1024u << 20) / (2 * V);
    if (max_rows < (size_t)T) max_rows = T;
    size_t nchunks = (N + max_rows - 1) / max_rows;
    size_t chunk = (N + nchunks - 1) / nchunks;
    chunk = (chunk + 63) & ~(size_t)63;
    if (chunk > max_rows) chunk = max_rows;
    if (chunk < (size_t)T) chunk = T;
    if (chunk > N) chunk = N;
    m->chunk = (int)chunk;
    m->lse_stride = (N * H + 63) & ~(size_t)63;

    cudaCheck(cudaStreamCreate(&m->stream));
    matmul_context_init(&m->mm);
    cudaCheck(cudaEventCreateWithFlags(&m->stage_free, cudaEventDisableTiming));

    const size_t total = m->lay.total;
    if (param_elems < total) param_elems = total;
    m->param_bytes = param_elems * sizeof(bf16);
    m->grad_bytes = total * sizeof(float);
    cudaCheck(cudaMalloc((void **)&m->params, m->param_bytes));
    if (param_elems > total) cudaCheck(cudaMemset(m->params + total, 0, (param_elems - total) * sizeof(bf16)));
    cudaCheck(cudaMalloc((void **)&m->grads, m->grad_bytes));
    cudaCheck(cudaMemset(m->grads, 0, m->grad_bytes));
    if (with_optimizer) {
        m->opt_bytes = 3 * total * sizeof(float);
        cudaCheck(cudaMalloc((void **)&m->opt, m->opt_bytes));
        cudaCheck(cudaMemset(m->opt, 0, m->opt_bytes));
        m->master = m->opt; m->m = m->opt + total; m->v = m->opt + 2 * total;
    }
    const int ffn_mode = ffn ? ffn->mode : FFN_PATH_DENSE;
    m->ffn_lean = ffn_mode == FFN_PATH_AUTO && ffn->lean;
    m->ffn_dense_slots = ffn_mode == FFN_PATH_SPARSE ? 0 : m->ffn_lean ? 1 : (int)L;
    const size_t Lgu = m->ffn_dense_slots, Ldh = ffn_mode == FFN_PATH_SPARSE ? 0 : 1;
    size_t Lln = recompute >= 2 ? 1 : L, Lh = recompute >= 1 && Lgu ? 1 : Lgu;
    int Trope = T > cfg->max_seq ? T : cfg->max_seq;
    DeviceBufSpec spec[] = {
        {"res [L+1,N,D]", (void **)&m->res, (L + 1) * N * D * 2},
        {"res_mid [L,N,D]", (void **)&m->res_mid, L * N * D * 2},
        {"ln1 [L,N,D]", (void **)&m->ln1, Lln * N * D * 2},
        {"ln2 [L,N,D]", (void **)&m->ln2, Lln * N * D * 2},
        {"rstd1 [L,N]", (void **)&m->rstd1, L * N * 4},
        {"rstd2 [L,N]", (void **)&m->rstd2, L * N * 4},
        {"lnf [N,D]", (void **)&m->lnf, N * D * 2},
        {"rstdf [N]", (void **)&m->rstdf, N * 4},
        {"qkv [L,N,Q+2KV]", (void **)&m->qkv, L * N * (Q + 2 * KV) * 2},
        {"att [L,N,Q]", (void **)&m->att, L * N * Q * 2},
        {"lse [L,B,H,T]", (void **)&m->lse, L * m->lse_stride * 4},
        {"gu [L,G,N,F]", (void **)&m->gu, Lgu * G * N * F * 2},
        {"h [L,N,F]", (void **)&m->h, Lh * N * F * 2},
        {"y [N,D]", (void **)&m->y, N * D * 2},
        {"dres [N,D]", (void **)&m->dres, N * D * 2},
        {"dln [N,D]", (void **)&m->dln, N * D * 2},
        {"dh [N,F]", (void **)&m->dh, Ldh * N * F * 2},
        {"datt [N,Q]", (void **)&m->datt, N * Q * 2},
        {"dqkv [N,Q+2KV]", (void **)&m->dqkv, N * (Q + 2 * KV) * 2},
        {"logits [chunk,V]", (void **)&m->logits, chunk * V * 2},
        {"losses [N]", (void **)&m->losses, N * 4},
        {"attention scratch", (void **)&m->attn_scratch,
         attention_backward_scratch_bytes(B, T, cfg->n_head, cfg->n_kv_head, cfg->head_dim)},
        {"norm scratch", (void **)&m->norm_scratch, rmsnorm_backward_scratch_floats(D) * 4},
        {"grad-norm scratch", (void **)&m->gn_scratch, GLOBAL_NORM_BLOCKS * 4},
        {"rope table", (void **)&m->rope, (size_t)Trope * cfg->head_dim * 4},
        {"tokens/targets/buckets", (void **)&m->tokens, (5 * N + 2) * 4},
        {"l1 partials [L,blocks]", (void **)&m->l1_part, L * FFN_STAT_BLOCKS * 4},
        {"nnz [L]", (void **)&m->nnz, L * 8},
        {"fired [L,F]", (void **)&m->fired, L * F},
        {"scalars", (void **)&m->scalars, SC_COUNT * 4},
    };
    int nspec = (int)(sizeof spec / sizeof spec[0]);
    cudaError_t e = device_bufs_alloc(spec, nspec, &m->act_mem, &m->act_bytes);
    if (e != cudaSuccess) {
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        SLLM_FATAL("model_create: cannot allocate %.1f MiB of activations (%s); free %.1f of %.1f MiB.\n"
                   "  hint: lower --batch, or use --recompute 1 or 2", m->act_bytes / 1048576.0,
                   cudaGetErrorString(e), fr / 1048576.0, tot / 1048576.0);
    }
    m->targets = m->tokens + N;
    m->buckets = m->tokens + 2 * N;
    rope_upload_table(m->rope, Trope, cfg->head_dim, cfg->rope_theta);
    cudaCheck(cudaMallocHost((void **)&m->h_stage, (5 * N + 2) * sizeof(int)));
    m->h_pairs = (uint64_t *)sllm_malloc(N * sizeof(uint64_t));
    cudaCheck(cudaEventRecord(m->stage_free, m->stream));
    sparse_ffn_init(&m->sp, cfg, (int)N, ffn_mode, ffn ? &ffn->par : NULL, &m->mm);
    if (verbose) {
        printf("memory (device):\n");
        model_print_bytes(stdout, "parameters (bf16)", m->param_bytes);
        model_print_bytes(stdout, "gradients (fp32)", m->grad_bytes);
        model_print_bytes(stdout, "optimizer master+m+v (fp32)", m->opt_bytes);
        printf("  activations, B=%d T=%d recompute=%d:\n", B, T, recompute);
        for (int i = 0; i < nspec; i++)
            if (spec[i].bytes >= (1u << 20)) printf("    %-26s %10.1f MiB\n", spec[i].name, spec[i].bytes / 1048576.0);
        model_print_bytes(stdout, "activations total", m->act_bytes);
        model_print_ffn_memory(m, stdout);
        model_print_bytes(stdout, "total", m->param_bytes + m->grad_bytes + m->opt_bytes + m->act_bytes +
                                               model_sparse_bytes(m));
        printf("  memory per sequence (activations): %.1f MiB\n", m->act_bytes / 1048576.0 / B);
    }
}
static inline void model_create(Model *m, const ModelConfig *cfg, int B, int T, int recompute, int with_optimizer,
                                int verbose) {
    model_create_ex(m, cfg, B, T, recompute, with_optimizer, verbose, 0, NULL);
}

static inline void model_free(Model *m) {
    cudaCheck(cudaStreamSynchronize(m->stream));
    sparse_ffn_free(&m->sp);
    cudaCheck(cudaFree(m->params));
    cudaCheck(cudaFree(m->grads));
    if (m->opt) cudaCheck(cudaFree(m->opt));
    cudaCheck(cudaFree(m->act_mem));
    cudaCheck(cudaFreeHost(m->h_stage));
    free(m->h_pairs);
    cudaCheck(cudaEventDestroy(m->stage_free));
    matmul_context_free(&m->mm);
    cudaCheck(cudaStreamDestroy(m->stream));
    memset(m, 0, sizeof *m);
}

// ---- parameters and optimizer state in and out ----------------------------------------------------
// Host fp32 flat buffer -> master (if any) and bf16 working weights (round to nearest even).
static inline void model_set_params(Model *m, const float *host) {
    sparse_ffn_mark_stale(&m->sp);
    params_upload(m->params, m->master, host, m->lay.total, m->stream);
}
// Random weights (model/weights.cuh, params_init_random), into the master weights too when present.
static inline void model_init_random(Model *m, uint64_t seed) {
    sparse_ffn_mark_stale(&m->sp);
    params_init_random(m->params, m->master, &m->lay, seed, m->stream);
}
// Current parameters as fp32 (master weights when present, else the bf16 working weights).
static inline void model_get_params(Model *m, float *host) {
    cudaCheck(cudaStreamSynchronize(m->stream));
    if (m->master) cudaCheck(cudaMemcpy(host, m->master, m->lay.total * 4, cudaMemcpyDeviceToHost));
    else download_bf16(host, m->params, m->lay.total);
}
static inline void model_get_grads(Model *m, float *host) {
    cudaCheck(cudaStreamSynchronize(m->stream));
    cudaCheck(cudaMemcpy(host, m->grads, m->lay.total * 4, cudaMemcpyDeviceToHost));
}
// AdamW moments in/out (host fp32 [total] each).
static inline void model_get_opt_state(Model *m, float *mh, float *vh) {
    if (!m->opt) SLLM_FATAL("model_get_opt_state: model has no optimizer state");
    cudaCheck(cudaStreamSynchronize(m->stream));
    cudaCheck(cudaMemcpy(mh, m->m, m->lay.total * 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(vh, m->v, m->lay.total * 4, cudaMemcpyDeviceToHost));
}
static inline void model_set_opt_state(Model *m, const float *mh, const float *vh) {
    if (!m->opt) SLLM_FATAL("model_set_opt_state: model has no optimizer state");
    cudaCheck(cudaMemcpy(m->m, mh, m->lay.total * 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(m->v, vh, m->lay.total * 4, cudaMemcpyHostToDevice));
}

// ---- step bookkeeping ---------------------------------------------------------------------------
// Start of an optimizer step: gradients count as zero (lazily, see Model.grads_fresh), zero the step's CE
// accumulator and L1 partial sums.
static inline void model_zero_grad(Model *m) {
    m->grads_fresh = 1;  // the next backward overwrites every gradient (see Model.grads_fresh)
    cudaCheck(cudaMemsetAsync(m->l1_part, 0, (size_t)m->cfg.n_layer * FFN_STAT_BLOCKS * 4, m->stream));
    cudaCheck(cudaMemsetAsync(m->scalars, 0, SC_COUNT * 4, m->stream));
}
// Zero the sparsity counters (non-zeros per layer, fired units).
static inline void model_reset_sparsity(Model *m) {
    cudaCheck(cudaMemsetAsync(m->nnz, 0, (size_t)m->cfg.n_layer * 8, m->stream));
    cudaCheck(cudaMemsetAsync(m->fired, 0, (size_t)m->cfg.n_layer * m->cfg.d_ff, m->stream));
    m->stat_tokens = 0;
    m->sparsity_reduced = 0;
    sparse_ffn_reset_window(&m->sp);
}

// ---- forward --------------------------------------------------------------------------------------
// inputs/targets: HOST arrays of B*T token ids (targets may be NULL in MODEL_LOGITS mode).
// dloss: gradient scale of each token's CE (MODEL_TRAIN), 1/(tokens of the whole optimizer step).
// Per-layer activation pointers, shared by the forward and the backward. Recomputed activations (ln1/ln2 with
// recompute >= 2, h with recompute >= 1) live in a one-layer buffer. q, k, v are packed for the N tokens of
// the current call: q [N, Q], k [N, KV], v [N, KV] one after the other.
typedef struct {
    bf16 *x, *xm, *ln1, *ln2, *q, *k, *v, *att, *gu, *h;
    float *rstd1, *rstd2, *lse;
} LayerActs;

static inline LayerActs model_layer_acts(const Model *m, int l, int N) {
    const size_t NA = m->N, D = m->cfg.d_model, F = m->cfg.d_ff, Q = m->Q, KV = m->KV;
    LayerActs a;
    a.x = m->res + l * NA * D;
    a.xm = m->res_mid + l * NA * D;
    a.ln1 = m->ln1 + (m->recompute >= 2 ? 0 : l) * NA * D;
    a.ln2 = m->ln2 + (m->recompute >= 2 ? 0 : l) * NA * D;
    a.rstd1 = m->rstd1 + l * NA;
    a.rstd2 = m->rstd2 + l * NA;
    a.q = m->qkv + l * NA * (Q + 2 * KV);
    a.k = a.q + (size_t)N * Q;
    a.v = a.k + (size_t)N * KV;
    a.att = m->att + l * NA * Q;
    a.lse = m->lse + l * m->lse_stride;
    a.gu = m->gu + (m->ffn_lean ? 0 : l) * (size_t)m->G * NA * F;
    a.h = m->h + (m->recompute >= 1 || m->ffn_lean ? 0 : l) * NA * F;
    return a;
}

static inline void model_forward(Model *m, const int *inputs, const int *targets, int B, int T, ModelMode mode,
                                 float dloss) {
    const ModelConfig *c = &m->cfg;
    const int N = B * T, D = c->d_model, L = c->n_layer, F = c->d_ff, V = c->vocab_size, H = c->n_head,
              KVH = c->n_kv_head, hd = c->head_dim;
    const size_t NA = m->N;
    if (B < 1 || T < 1 || T > m->T || (size_t)N > NA)
        SLLM_FATAL("model_forward: shape B=%d T=%d exceeds the allocated B*T=%d, T<=%d", B, T, m->N, m->T);
    if (mode == MODEL_LOGITS && N > m->chunk)
        SLLM_FATAL("model_forward: MODEL_LOGITS needs B*T=%d <= classifier chunk %d", N, m->chunk);
    if (mode != MODEL_LOGITS && !targets) SLLM_FATAL("model_forward: targets are required in this mode");
    if (mode == MODEL_TRAIN && (B != m->B || T != m->T))
        SLLM_FATAL("model_forward: training needs the allocated shape B=%d T=%d (got %d, %d)", m->B, m->T, B, T);
    for (int i = 0; i < N; i++)
        if (inputs[i] < 0 || inputs[i] >= V || (targets && (targets[i] < 0 || targets[i] >= V)))
            SLLM_FATAL("model_forward: token %d at position %d (target %d) outside the vocabulary [0, %d)", inputs[i],
                       i, targets ? targets[i] : 0, V);
    m->cur_B = B; m->cur_T = T; m->has_targets = targets != NULL;
    cudaStream_t s = m->stream;
    // Stage the tokens (and the embedding-gradient buckets) in pinned memory, then copy.
    cudaCheck(cudaEventSynchronize(m->stage_free));
    int *st = m->h_stage;
    memcpy(st, inputs, N * sizeof(int));
    size_t nints = N;
    if (targets) { memcpy(st + NA, targets, N * sizeof(int)); }
    if (mode == MODEL_TRAIN) {
        int used = embedding_build_buckets(st + 2 * NA, m->h_pairs, inputs, N);
        m->num_distinct = st[2 * NA];
        nints = 2 * NA + used;
    } else if (targets) nints = NA + N;
    cudaCheck(cudaMemcpyAsync(m->tokens, st, nints * sizeof(int), cudaMemcpyHostToDevice, s));
    cudaCheck(cudaEventRecord(m->stage_free, s));
    const int stats = mode == MODEL_TRAIN;
    if (stats) m->stat_tokens += N;

    const float eps = c->norm_eps;
    const BlockShape bs = block_shape(c);
    model_mark(m, PH_EMBED);
    embedding_forward(m->res, m->tokens, model_w(m, PARAM_EMBED, 0), N, D, s);
    for (int l = 0; l < L; l++) {
        const LayerActs a = model_layer_acts(m, l, N);
        bf16 *x = a.x, *xm = a.xm, *ln1 = a.ln1, *ln2 = a.ln2, *q = a.q, *k = a.k, *v = a.v, *att = a.att, *gu = a.gu,
             *h = a.h;
        float *rstd1 = a.rstd1, *rstd2 = a.rstd2, *lse = a.lse;
        const LayerWeights w = layer_weights(m->params, &m->lay, c, l);
        model_mark(m, PH_ATT_QKV);
        if (l == 0) rmsnorm_forward(ln1, rstd1, x, w.attn_norm, N, D, eps, s);
        block_qkv_rope(&m->mm, &bs, &w, q, k, v, ln1, m->rope, N, T, NULL, s);
        model_mark(m, PH_ATT_CORE);
        attention_forward(att, lse, q, k, v, B, T, H, KVH, hd, s);
        model_mark(m, PH_ATT_OUT);
        block_attn_out(&m->mm, &bs, &w, xm, ln2, rstd2, x, m->y, att, N, s);
        model_mark(m, PH_FFN_GU);
        const FFNStats fs = {m->l1_part + (size_t)l * FFN_STAT_BLOCKS, m->nnz + l, m->fired + (size_t)l * F};
        if (sparse_ffn_layer_sparse(&m->sp, l))
            sparse_ffn_forward(&m->sp, l, &w, ln2, m->y, N, stats ? fs.l1_part : NULL, stats ? fs.nnz : NULL,
                               stats ? fs.fired : NULL, s);
        else if (!m->ffn_dense_slots)
            SLLM_FATAL("model_forward: layer %d on the dense FFN path, but the FFN path was forced sparse (no dense "
                       "FFN activations allocated)", l);
        else
            block_ffn_dense(&m->mm, &bs, &w, m->y, gu, h, ln2, N, stats ? &fs : NULL, m->prof, s);
        if (l + 1 < L)
            block_ffn_out(&bs, &w, m->res + (l + 1) * NA * D, m->ln1 + (m->recompute >= 2 ? 0 : l + 1) * NA * D,
                          m->rstd1 + (l + 1) * NA, xm, m->y, N, s);
        else
            block_ffn_out(&bs, &w, m->res + (size_t)L * NA * D, m->lnf, m->rstdf, xm, m->y, N, s);
    }
    // Tied LM head + fused classifier, chunked over tokens.
    const bf16 *E = model_w(m, PARAM_EMBED, 0);
    for (int r0 = 0; r0 < N; r0 += m->chunk) {
        int n = N - r0 < m->chunk ? N - r0 : m->chunk;
        model_mark(m, PH_LM_FWD);
        matmul(&m->mm, m->logits, 0, m->lnf + (size_t)r0 * D, 0, E, 1, n, V, D, 1.0f, 0.0f, s);
        if (!targets) continue;
        model_mark(m, PH_LM_CE);
        fused_classifier(m->logits, m->losses + r0, m->targets + r0, n, V, dloss, mode == MODEL_TRAIN, s);
        if (mode == MODEL_TRAIN) {
            // dlnf = dlogits E ; dE += dlogits^T lnf (the first chunk after model_zero_grad overwrites dE)
            model_mark(m, PH_LM_BWD);
            matmul(&m->mm, m->dln + (size_t)r0 * D, 0, m->logits, 0, E, 0, n, D, V, 1.0f, 0.0f, s);
            matmul(&m->mm, model_g(m, PARAM_EMBED, 0), 1, m->logits, 1, m->lnf + (size_t)r0 * D, 0, V, D, n, 1.0f,
                   (m->grads_fresh && r0 == 0) ? 0.0f : 1.0f, s);
        }
    }
    model_mark(m, PH_LOSS_SUM);
    if (targets) sum_floats(m->scalars + SC_CE, m->losses, N, 1, s);
}

// ---- backward -------------------------------------------------------------------------------------
// After model_forward(MODEL_TRAIN). Accumulates into m->grads (or overwrites them: the first backward after
// model_zero_grad, see Model.grads_fresh). l1_coef = lambda / (L * tokens of the step).
static inline void model_backward(Model *m, float l1_coef) {
    const ModelConfig *c = &m->cfg;
    const int B = m->cur_B, T = m->cur_T, N = B * T, D = c->d_model, L = c->n_layer, F = c->d_ff, H = c->n_head,
              KVH = c->n_kv_head, hd = c->head_dim, Q = m->Q, KV = m->KV, G = m->G;
    const size_t NA = m->N;
    const float eps = c->norm_eps;
    const float gb = m->grads_fresh ? 0.0f : 1.0f;  // beta of the weight-gradient GEMMs
    const int gacc = !m->grads_fresh;                 // norm gains: += (or =)
    cudaStream_t s = m->stream;
    if (m->dist.grad_ready && !m->dist.embed_lookup)
        SLLM_FATAL("model_backward: ModelDist.grad_ready without embed_lookup (the lookup gradient would not be reduced)");
    model_grad_ready(m, grad_bucket_embed());  // the classifier's part of dE, written by the forward
    // final norm: dres = d(res[L]) from dlnf (in m->dln)
    model_mark(m, PH_B_FINAL_NORM);
    rmsnorm_backward_ex(m->dres, model_g(m, PARAM_FINAL_NORM, 0), m->norm_scratch, m->dln,
                        m->res + (size_t)L * NA * D, model_w(m, PARAM_FINAL_NORM, 0), m->rstdf, N, D, 0, gacc, s);
    for (int l = L - 1; l >= 0; l--) {
        const LayerActs a = model_layer_acts(m, l, N);
        bf16 *x = a.x, *xm = a.xm, *ln1 = a.ln1, *ln2 = a.ln2, *q = a.q, *k = a.k, *v = a.v, *att = a.att, *gu = a.gu,
             *h = a.h;
        float *rstd1 = a.rstd1, *rstd2 = a.rstd2, *lse = a.lse;
        // ---- FFN: res_out = xm + h Wd^T
        model_mark(m, PH_B_FFN_DOWN);
        if (m->recompute >= 2) rmsnorm_forward(ln2, NULL, xm, model_w(m, PARAM_FFN_NORM, l), N, D, eps, s);
        if (sparse_ffn_layer_sparse(&m->sp, l)) {
            const LayerWeights w = layer_weights(m->params, &m->lay, c, l);
            sparse_ffn_backward(&m->sp, l, &w, ln2, m->dres, m->dln, c->gated ? model_g(m, PARAM_WG, l) : NULL,
                                model_g(m, PARAM_WU, l), model_g(m, PARAM_WD, l), gacc, l1_coef, s);
        } else {
        if (m->ffn_lean)  // gu of this layer was overwritten by later layers: recompute it from ln2
            matmul_strided_batched(&m->mm, gu, 0, (long long)N * F, ln2, 0, 0,
                                   model_w(m, c->gated ? PARAM_WG : PARAM_WU, l), 1, (long long)L * F * D, G, N, F, D,
                                   1.0f, 0.0f, s);
        if (m->recompute >= 1 || m->ffn_lean) ffn_forward(h, gu, N, F, c->gated, NULL, NULL, NULL, s);
        matmul(&m->mm, model_g(m, PARAM_WD, l), 1, m->dres, 1, h, 0, D, F, N, 1.0f, gb, s);     // dWd += dres^T h
        matmul(&m->mm, m->dh, 0, m->dres, 0, model_w(m, PARAM_WD, l), 0, N, F, D, 1.0f, 0.0f, s);  // dh = dres Wd
        model_mark(m, PH_B_FFN_ACT);
        ffn_backward(gu, m->dh, gu, N, F, c->gated, l1_coef, s);  // gu <- (dg, du) in place
        // dWg, dWu += (dg, du)^T ln2  (batched; gradients of a layer are L*F*D apart)
        model_mark(m, PH_B_FFN_GU);
        matmul_strided_batched(&m->mm, model_g(m, c->gated ? PARAM_WG : PARAM_WU, l), 1, (long long)L * F * D, gu, 1,
                               (long long)N * F, ln2, 0, 0, G, F, D, N, 1.0f, gb, s);
        // dln2 = dg Wg + du Wu (the second GEMM accumulates with beta = 1)
        for (int gi = 0; gi < G; gi++) {
            ParamKind kind = (c->gated && gi == 0) ? PARAM_WG : PARAM_WU;
            matmul(&m->mm, m->dln, 0, gu + (size_t)gi * N * F, 0, model_w(m, kind, l), 0, N, D, F, 1.0f,
                   gi == 0 ? 0.0f : 1.0f, s);
        }
        }  // dense FFN
        // dres += rmsnorm backward of dln2 (the residual add fused into the norm kernel)
        model_mark(m, PH_B_FFN_NORM);
        rmsnorm_backward_ex(m->dres, model_g(m, PARAM_FFN_NORM, l), m->norm_scratch, m->dln, xm,
                            model_w(m, PARAM_FFN_NORM, l), rstd2, N, D, 1, gacc, s);
        model_grad_ready(m, grad_bucket_ffn(L, l));  // Wg, Wu, Wd, FFN norm of layer l (and the final norm)
        // ---- attention: xm = x + att Wo^T
        model_mark(m, PH_B_ATT_OUT);
        matmul(&m->mm, model_g(m, PARAM_WO, l), 1, m->dres, 1, att, 0, D, Q, N, 1.0f, gb, s);  // dWo
        matmul(&m->mm, m->datt, 0, m->dres, 0, model_w(m, PARAM_WO, l), 0, N, Q, D, 1.0f, 0.0f, s);
        bf16 *dq = m->dqkv, *dk = dq + (size_t)N * Q, *dv = dk + (size_t)N * KV;
        model_mark(m, PH_B_ATT_CORE);
        attention_backward(dq, dk, dv, m->datt, att, lse, q, k, v, m->attn_scratch, B, T, H, KVH, hd, s);
        model_mark(m, PH_B_ATT_QKV);
        rope_backward_qk(dq, H, dk, KVH, m->rope, N, T, hd, s);  // dq and dk in one launch
        if (m->recompute >= 2) rmsnorm_forward(ln1, NULL, x, model_w(m, PARAM_ATTN_NORM, l), N, D, eps, s);
        if (Q == KV)
            matmul_strided_batched(&m->mm, model_g(m, PARAM_WQ, l), 1, (long long)L * Q * D, dq, 1, (long long)N * Q,
                                   ln1, 0, 0, 3, Q, D, N, 1.0f, gb, s);
        else {
            matmul(&m->mm, model_g(m, PARAM_WQ, l), 1, dq, 1, ln1, 0, Q, D, N, 1.0f, gb, s);
            matmul(&m->mm, model_g(m, PARAM_WK, l), 1, dk, 1, ln1, 0, KV, D, N, 1.0f, gb, s);
            matmul(&m->mm, model_g(m, PARAM_WV, l), 1, dv, 1, ln1, 0, KV, D, N, 1.0f, gb, s);
        }
        // dln1 = dq Wq + dk Wk + dv Wv (beta = 1 accumulation, no separate add)
        matmul(&m->mm, m->dln, 0, dq, 0, model_w(m, PARAM_WQ, l), 0, N, D, Q, 1.0f, 0.0f, s);
        matmul(&m->mm, m->dln, 0, dk, 0, model_w(m, PARAM_WK, l), 0, N, D, KV, 1.0f, 1.0f, s);
        matmul(&m->mm, m->dln, 0, dv, 0, model_w(m, PARAM_WV, l), 0, N, D, KV, 1.0f, 1.0f, s);
        model_mark(m, PH_B_ATT_NORM);
        rmsnorm_backward_ex(m->dres, model_g(m, PARAM_ATTN_NORM, l), m->norm_scratch, m->dln, x,
                            model_w(m, PARAM_ATTN_NORM, l), rstd1, N, D, 1, gacc, s);
        model_grad_ready(m, grad_bucket_attn(L, l));  // Wq, Wk, Wv, Wo, attention norm of layer l
    }
    // the classifier's dE (forward) is already in place: the embedding gradient always adds
    model_mark(m, PH_B_EMBED);
    if (!m->dist.embed_lookup ||
        !m->dist.embed_lookup(m->dist.ctx, model_g(m, PARAM_EMBED, 0), m->dres, m->buckets, N, D, s))
        embedding_backward(model_g(m, PARAM_EMBED, 0), m->dres, m->buckets, m->num_distinct, D, s);
    m->grads_fresh = 0;
}

// ---- update -------------------------------------------------------------------------------------
// Global gradient norm into scalars[SC_NORM] (device). Gradients must have been written by a backward.
static inline void model_grad_norm(Model *m) {
    if (m->grads_fresh) SLLM_FATAL("model_grad_norm: no backward since model_zero_grad (gradients not written)");
    model_mark(m, PH_GRAD_NORM);
    global_norm(m->scalars + SC_NORM, m->gn_scratch, m->grads, m->lay.total, m->stream);
}
// AdamW on every tensor; weight decay only where ParamTensor.weight_decay; clipping by the device norm
// (call model_grad_norm first).
static inline void model_adamw(Model *m, const AdamWParams *hp) {
    if (!m->opt) SLLM_FATAL("model_adamw: model was created without optimizer state");
    // ONE launch over the flat buffer: the tensors are contiguous in ParamKind order (config_param_layout)
    AdamWSegments seg;
    memset(&seg, 0, sizeof seg);
    size_t end = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        const ParamTensor *t = &m->lay.t[k];
        if (t->numel == 0) continue;
        if (t->offset != end) SLLM_FATAL("model_adamw: tensor %s at offset %zu, expected %zu (flat layout not contiguous)",
                                         t->name, t->offset, end);
        end += t->numel;
        seg.end[seg.count] = end;
        seg.wd[seg.count] = t->weight_decay ? hp->weight_decay : 0.0f;
        seg.count++;
    }
    model_mark(m, PH_ADAMW);
    adamw_update_multi(m->params, m->master, m->m, m->v, m->grads, &seg, hp, m->scalars + SC_NORM, m->stream);
}

// ---- the FFN path per layer (model/sparse_ffn.cuh) --------------------------------------------------
// After every optimizer step (after model_adamw): the WdT copies of the sparse layers are stale (refreshed by their
// next forward).
static inline void model_ffn_after_update(Model *m) { sparse_ffn_mark_stale(&m->sp); }

// After model_read_step: this rank's counts of the step into m->sp.counts [L * SPARSE_COUNTS_PER_LAYER] uint64.
// With several ranks, all-reduce (sum) m->sp.counts between model_ffn_step_counts and model_ffn_dispatch: the decision
// is a pure function of the summed counts, so every rank takes the same one.
static inline void model_ffn_step_counts(Model *m) {
    if (m->sp.mode != FFN_PATH_DENSE) sparse_ffn_step_counts(&m->sp, m->stat_tokens);
}
// The path of each layer for the next step; the switches into ev [L], their number returned.
static inline int model_ffn_dispatch(Model *m, SparseSwitch *ev) {
    return sparse_ffn_dispatch(&m->sp, m->stat_tokens, ev);
}

// Dead-unit re-initialisation (the paper's mitigation): the gate rows (Wg; Wu when non-gated) of the units that did
// not fire since the last model_reset_sparsity are re-drawn ~ N(0, 0.02) in the bf16 and master weights, and their
// AdamW moments zeroed. The optimizer state is the model's own (with_optimizer) or, under ZeRO-1, the shard the caller
// passes: master/m/v of the flat range [so, so + cnt) (master NULL: no master weights). With several ranks, m->fired must already hold the units fired
// on any rank (model_read_sparsity reduces it), so every rank re-draws the same rows. dead_per_layer [L] (may be
// NULL) gets the counts; returns the total. One sync (log steps). MT: the moments' type (float, or bf16 for a
// ZeRO-1 shard with bf16 moments; the model's own state is fp32).
template <typename MT>
static inline long model_reinit_dead(Model *m, uint64_t seed, int *dead_per_layer, float *master, MT *m1, MT *m2,
                                     size_t so, size_t cnt) {
    if constexpr (sizeof(MT) == sizeof(float)) {
        if (!m1 && m->opt) { master = m->master; m1 = m->m; m2 = m->v; so = 0; cnt = m->lay.total; }
    }
    if (!m1) SLLM_FATAL("model_reinit_dead: no optimizer state (the model's own or a ZeRO-1 shard)");
    const int L = m->cfg.n_layer, F = m->cfg.d_ff, D = m->cfg.d_model;
    uint8_t *fired = (uint8_t *)sllm_malloc((size_t)L * F);
    int *rows = (int *)sllm_malloc((size_t)F * sizeof(int)), *rows_dev = NULL;
    cudaCheck(cudaStreamSynchronize(m->stream));
    cudaCheck(cudaMemcpy(fired, m->fired, (size_t)L * F, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMalloc((void **)&rows_dev, (size_t)L * F * sizeof(int)));
    long total = 0;
    const ParamKind gate = m->cfg.gated ? PARAM_WG : PARAM_WU;
    for (int l = 0; l < L; l++) {
        int n = 0;
        for (int f = 0; f < F; f++)
            if (!fired[(size_t)l * F + f]) rows[n++] = f;
        if (dead_per_layer) dead_per_layer[l] = n;
        total += n;
        if (!n) continue;
        int *rd = rows_dev + (size_t)l * F;
        cudaCheck(cudaMemcpyAsync(rd, rows, (size_t)n * sizeof(int), cudaMemcpyHostToDevice, m->stream));
        const size_t off = param_offset(&m->lay, gate, l);
        sp_redraw_rows_kernel<MT><<<n, 256, 0, m->stream>>>(m->params, off, master, m1, m2, so, cnt, rd, D,
                                                      seed * 0x100000001b3ull + (uint64_t)l, 0.02f);
        cudaCheckLaunch();
        cudaCheck(cudaStreamSynchronize(m->stream));  // rows is reused by the next layer
    }
    cudaCheck(cudaFree(rows_dev));
    free(rows);
    free(fired);
    return total;
}

// ---- statistics back to the host (one sync) --------------------------------------------------------
typedef struct {
    float ce_sum;        // sum of per-token CE over the step's micro-steps
    float grad_norm;     // before clipping (valid after model_grad_norm)
    double l1_layer_sum[64];  // per layer: sum over the step's tokens of sum_F |h| (first 64 layers)
    double l1_sum_all;   // sum over layers of l1_layer_sum
} ModelStepStats;

static inline void model_read_step(Model *m, ModelStepStats *out) {
    const int L = m->cfg.n_layer;
    float sc[SC_COUNT];
    float *part = (float *)sllm_malloc((size_t)L * FFN_STAT_BLOCKS * 4);
    if (m->dist.sum_f32) {  // the step's CE and L1 sums over every rank's tokens (the norm already is global)
        m->dist.sum_f32(m->dist.ctx, m->scalars + SC_CE, 1, m->stream);
        m->dist.sum_f32(m->dist.ctx, m->l1_part, (size_t)L * FFN_STAT_BLOCKS, m->stream);
    }
    cudaCheck(cudaStreamSynchronize(m->stream));
    cudaCheck(cudaMemcpy(sc, m->scalars, sizeof sc, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(part, m->l1_part, (size_t)L * FFN_STAT_BLOCKS * 4, cudaMemcpyDeviceToHost));
    memset(out, 0, sizeof *out);
    sparse_ffn_read(&m->sp, m->nnz);  // the dispatch's counts, after the same sync
    out->ce_sum = sc[SC_CE];
    out->grad_norm = sc[SC_NORM];
    for (int l = 0; l < L; l++) {
        double s = 0;
        for (int b = 0; b < FFN_STAT_BLOCKS; b++) s += part[(size_t)l * FFN_STAT_BLOCKS + b];
        if (l < 64) out->l1_layer_sum[l] = s;
        out->l1_sum_all += s;
    }
    free(part);
}

// Per layer: mean non-zeros per token and fraction of units that fired, since the last reset. Data parallel:
// over every rank's tokens (the counters are summed across ranks in place, once per reset: a collective, every
// rank calls it at the same point).
static inline void model_read_sparsity(Model *m, double *nnz_per_token, double *frac_alive) {
    const int L = m->cfg.n_layer, F = m->cfg.d_ff;
    unsigned long long *nz = (unsigned long long *)sllm_malloc((size_t)L * 8);
    uint8_t *fired = (uint8_t *)sllm_malloc((size_t)L * F);
    if (m->dist.sum_u64 && !m->sparsity_reduced) {
        m->dist.sum_u64(m->dist.ctx, m->nnz, (size_t)L, m->stream);
        if (m->dist.max_u8) m->dist.max_u8(m->dist.ctx, m->fired, (size_t)L * F, m->stream);
        m->sparsity_reduced = 1;
    }
    const double tokens = (double)m->stat_tokens * (m->dist.world > 1 ? m->dist.world : 1);
    cudaCheck(cudaStreamSynchronize(m->stream));
    cudaCheck(cudaMemcpy(nz, m->nnz, (size_t)L * 8, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(fired, m->fired, (size_t)L * F, cudaMemcpyDeviceToHost));
    for (int l = 0; l < L; l++) {
        nnz_per_token[l] = m->stat_tokens ? (double)nz[l] / tokens : 0.0;
        size_t a = 0;
        for (int f = 0; f < F; f++) a += fired[(size_t)l * F + f] != 0;
        frac_alive[l] = (double)a / F;
    }
    free(nz);
    free(fired);
}

// Logits row `row` of the last MODEL_LOGITS forward, as fp32 [V].
static inline void model_get_logits_row(Model *m, int row, float *out) {
    cudaCheck(cudaStreamSynchronize(m->stream));
    download_bf16(out, m->logits + (size_t)row * m->cfg.vocab_size, m->cfg.vocab_size);
}

// Model FLOPs per token for one training step (forward + backward): 6 * params (the tied LM head counts
// once, the embedding lookup is free) + causal attention 6 * L * T * H*hd (QK^T and PV, half the T x T).
static inline double model_flops_per_token(const ModelConfig *c, int T) {
    ParamLayout lay;
    config_param_layout(c, &lay);
    return 6.0 * (double)lay.total + 6.0 * c->n_layer * (double)T * c->n_head * c->head_dim;
}

#endif  // SLLM_TRAIN_MODEL_CUH
