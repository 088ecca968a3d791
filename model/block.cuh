// model/block.cuh: the pieces of one transformer block that the training model (model/train_model.cuh) and the
// inference engine (model/infer_engine.cuh) both run. Attention itself stays with the caller: training attends over
// the micro-batch's own rows (core/attention.cuh), inference over a KV cache (core/kv_attention.cuh).
//
// One layer, N rows (tokens), pre-norm Llama block with the norms fused into the residual adds:
//   ln1 = rmsnorm(x) * attn_norm                     (the previous block's block_ffn_out, or the caller for layer 0)
//   q, k, v = ln1 Wq^T, ln1 Wk^T, ln1 Wv^T; RoPE(q, k)                                          block_qkv_rope
//   att = attention(q, k, v)                                                                     caller
//   xm = x + att Wo^T;  ln2 = rmsnorm(xm) * ffn_norm                                             block_attn_out
//   y = FFN(ln2): dense (block_ffn_dense) or TwELL (model/infer_engine.cuh)
//   x' = xm + y;  ln' = rmsnorm(x') * next_norm  (next layer's attention norm, or the final norm)  block_ffn_out
// Shapes (bf16): x, xm, ln1, ln2, y [N, D]; q [N, Q], k, v [N, KV] (Q = H*hd, KV = KVH*hd); att [N, Q];
// gu [G, N, F] (gate then up, G = gated ? 2 : 1), h [N, F]; rstd [N] fp32.
#ifndef SLLM_MODEL_BLOCK_CUH
#define SLLM_MODEL_BLOCK_CUH

#include "config.h"
#include "ffn.cuh"
#include "matmul.cuh"
#include "rmsnorm.cuh"
#include "rope.cuh"
#include "step_profiler.cuh"
#include "model/weights.cuh"

typedef struct {
    int D, F, L, H, KVH, hd, Q, KV, G, gated;
    float eps;
} BlockShape;

static inline BlockShape block_shape(const ModelConfig *c) {
    BlockShape s;
    s.D = c->d_model; s.F = c->d_ff; s.L = c->n_layer; s.H = c->n_head; s.KVH = c->n_kv_head; s.hd = c->head_dim;
    s.Q = s.H * s.hd; s.KV = s.KVH * s.hd; s.G = c->gated ? 2 : 1; s.gated = c->gated; s.eps = c->norm_eps;
    return s;
}

// The optional per-layer FFN counters of core/ffn.cuh (each may be NULL).
typedef struct {
    float *l1_part;            // [FFN_STAT_BLOCKS]
    unsigned long long *nnz;   // [1]
    uint8_t *fired;            // [F]
} FFNStats;

// q, k, v from ln (one strided-batched GEMM for MHA: Wq, Wk, Wv of a layer are L*Q*D elements apart in the flat
// buffer), then RoPE on q and k in one launch. Row r is position r % T, plus *pos_dev when pos_dev is not NULL
// (inference over a KV cache: the position is read on the device).
static inline void block_qkv_rope(MatmulContext *mm, const BlockShape *s, const LayerWeights *w, bf16 *q, bf16 *k,
                                  bf16 *v, const bf16 *ln, const float *rope, int N, int T, const int *pos_dev,
                                  cudaStream_t st) {
    if (s->Q == s->KV)
        matmul_strided_batched(mm, q, 0, (long long)N * s->Q, ln, 0, 0, w->wq, 1, (long long)s->L * s->Q * s->D, 3, N,
                               s->Q, s->D, 1.0f, 0.0f, st);
    else {
        matmul(mm, q, 0, ln, 0, w->wq, 1, N, s->Q, s->D, 1.0f, 0.0f, st);
        matmul(mm, k, 0, ln, 0, w->wk, 1, N, s->KV, s->D, 1.0f, 0.0f, st);
        matmul(mm, v, 0, ln, 0, w->wv, 1, N, s->KV, s->D, 1.0f, 0.0f, st);
    }
    rope_forward_qk_at(q, s->H, k, s->KVH, rope, N, T, 0, pos_dev, s->hd, st);
}

// y = att Wo^T (y is scratch), then xm = x + y and ln2 = rmsnorm(xm) * ffn_norm in one kernel (rstd2 may be NULL).
static inline void block_attn_out(MatmulContext *mm, const BlockShape *s, const LayerWeights *w, bf16 *xm, bf16 *ln2,
                                  float *rstd2, const bf16 *x, bf16 *y, const bf16 *att, int N, cudaStream_t st) {
    matmul(mm, y, 0, att, 0, w->wo, 1, N, s->D, s->Q, 1.0f, 0.0f, st);
    fused_residual_rmsnorm_forward(xm, ln2, rstd2, x, y, w->ffn_norm, N, s->D, s->eps, st);
}

// The dense FFN: gu = ln2 (Wg, Wu)^T in one strided-batched GEMM (Wg and Wu of a layer are L*F*D elements apart),
// h = relu(g) * u with the counters in `stats` (NULL: none), y = h Wd^T. prof (may be NULL) marks the element-wise
// and the down-projection phases.
static inline void block_ffn_dense(MatmulContext *mm, const BlockShape *s, const LayerWeights *w, bf16 *y, bf16 *gu,
                                   bf16 *h, const bf16 *ln2, int N, const FFNStats *stats, StepProfiler *prof,
                                   cudaStream_t st) {
    const bf16 *w0 = s->gated ? w->wg : w->wu;
    matmul_strided_batched(mm, gu, 0, (long long)N * s->F, ln2, 0, 0, w0, 1, (long long)s->L * s->F * s->D, s->G, N,
                           s->F, s->D, 1.0f, 0.0f, st);
    if (prof) prof_mark(prof, PH_FFN_ACT, st);
    ffn_forward(h, gu, N, s->F, s->gated, stats ? stats->l1_part : NULL, stats ? stats->nnz : NULL,
                stats ? stats->fired : NULL, st);
    if (prof) prof_mark(prof, PH_FFN_DOWN, st);
    matmul(mm, y, 0, h, 0, w->wd, 1, N, s->D, s->F, 1.0f, 0.0f, st);
}

// x_next = xm + y and ln_next = rmsnorm(x_next) * next_norm in one kernel (rstd_next may be NULL).
static inline void block_ffn_out(const BlockShape *s, const LayerWeights *w, bf16 *x_next, bf16 *ln_next,
                                 float *rstd_next, const bf16 *xm, const bf16 *y, int N, cudaStream_t st) {
    fused_residual_rmsnorm_forward(x_next, ln_next, rstd_next, xm, y, w->next_norm, N, s->D, s->eps, st);
}

#endif  // SLLM_MODEL_BLOCK_CUH
