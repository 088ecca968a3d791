// model/mc_eval_gpu.cuh: the log-likelihood callbacks of the multiple-choice evaluation (model/mc_eval.h) on the GPU,
// through existing forwards and no kernel of their own: the inference engine (model/infer_engine.cuh: bf16 weights,
// the FFN mode of the engine, fp32 logits) and the trainer's model (model/train_model.cuh: the MODEL_LOGITS forward,
// bf16 logits). Each call runs ONE sequence (B = 1): tokens[0 .. n-2] in, the logits rows start-1 .. n-2 to the host,
// their log-softmax summed in double there (mc_logprob_rows_f32). Not thread-safe: score with McScoreOpts.threads 1.
#ifndef SLLM_MC_EVAL_GPU_CUH
#define SLLM_MC_EVAL_GPU_CUH

#include <math.h>
#include <stdint.h>

#include "model/infer_engine.cuh"
#include "model/mc_eval.h"
#include "model/train_model.cuh"

// An engine for the evaluation: one sequence, every row's logits, the whole input in one call (chunk = context).
// max_len: the longest input (tokens per choice - 1; the tokenized set's longest, at most the context asked for).
static inline void mc_infer_create(Infer *m, const ModelConfig *cfg, int max_len, InferFFN ffn, int verbose) {
    if (max_len < 1) SLLM_FATAL("mc_infer_create: max_len %d", max_len);
    infer_create(m, cfg, 1, max_len, max_len, ffn, 1, verbose);
}

// The longest model input of a tokenized set (n_tokens - 1 over the choices).
static inline int mc_max_input(const McSet *s) {
    int mx = 1;
    for (int i = 0; i < s->n_items; i++)
        for (int k = 0; k < s->items[i].n_choices; k++)
            if (s->items[i].choices[k].n_tokens - 1 > mx) mx = s->items[i].choices[k].n_tokens - 1;
    return mx;
}

// McLoglikFn over an engine made by mc_infer_create (ctx: Infer *). The first chunk of a cache is a plain causal
// prefill, so each call is independent of the previous one.
static inline double mc_loglik_infer(void *ctx, const int32_t *tokens, int n, int start) {
    Infer *m = (Infer *)ctx;
    const int T = n - 1, V = m->cfg.vocab_size;
    if (n < 2 || start < 1 || start >= n || T > m->chunk || m->B != 1 || !m->all_logits) return NAN;
    infer_reset(m);
    infer_forward(m, (const int *)tokens, T);
    cudaCheck(cudaStreamSynchronize(m->stream));
    // row t predicts tokens[t + 1]: the continuation tokens[start ..] comes from rows start-1 .. T-1
    return mc_logprob_rows_f32(m->h_logits + (size_t)(start - 1) * V, V, tokens + start, n - start);
}

// The trainer's model (ctx: McTrainCtx *): a MODEL_LOGITS forward of one sequence padded to a multiple of 64 rows
// (as the trainer's sampling does; the causal mask keeps the padding out of the rows read), the longest input m->T.
typedef struct {
    Model *m;
    int *ids;        // [m->T] host
    float *logits;   // [rows, V] host: the continuation rows of the longest choice so far
    size_t rows;
} McTrainCtx;

static inline void mc_train_ctx_init(McTrainCtx *c, Model *m) {
    memset(c, 0, sizeof *c);
    c->m = m;
    c->ids = (int *)sllm_malloc(sizeof(int) * (size_t)m->T);
}
static inline void mc_train_ctx_free(McTrainCtx *c) {
    free(c->ids);
    free(c->logits);
    memset(c, 0, sizeof *c);
}

static inline double mc_loglik_train(void *ctx, const int32_t *tokens, int n, int start) {
    McTrainCtx *c = (McTrainCtx *)ctx;
    Model *m = c->m;
    const int T = n - 1, V = m->cfg.vocab_size;
    if (n < 2 || start < 1 || start >= n || T > m->T || T > m->chunk) return NAN;
    int Tp = (T + 63) / 64 * 64;
    if (Tp > m->T) Tp = m->T;
    if (Tp > m->chunk) Tp = m->chunk;
    for (int t = 0; t < Tp; t++) c->ids[t] = t < T ? tokens[t] : tokens[T - 1];
    model_forward(m, c->ids, NULL, 1, Tp, MODEL_LOGITS, 0.0f);
    cudaCheck(cudaStreamSynchronize(m->stream));
    if ((size_t)(n - start) > c->rows) {
        free(c->logits);
        c->rows = (size_t)(n - start);
        c->logits = (float *)sllm_malloc(sizeof(float) * c->rows * V);
    }
    download_bf16(c->logits, m->logits + (size_t)(start - 1) * V, (size_t)(n - start) * V);
    return mc_logprob_rows_f32(c->logits, V, tokens + start, n - start);
}

#endif  // SLLM_MC_EVAL_GPU_CUH
