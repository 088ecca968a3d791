// model/ref_model.h: the CPU reference model, in float64. The executable definition of the model that
// every GPU kernel and the trainer are tested against. Plain C, no threads, no tricks: clarity first.
//
// Conventions (all buffers row-major, double):
//   N = B*T tokens; token n = b*T + t sits at position t of sequence b.
//   Parameters live in ONE flat buffer with the layout of core/config.h (ParamLayout).
//   Linear layers follow Hugging Face / nn.Linear: W is [out, in], y = x W^T.
//   Activations: x [N, D]; q [N, H*hd] == [B, T, H, hd]; k, v [N, KVH*hd] == [B, T, KVH, hd];
//   attention probabilities att [B, H, T, T]; FFN pre-activations and hidden [N, F].
//
// Model (PAPER.md, DESIGN.md):
//   x = E[tokens]
//   per layer l:  a = rmsnorm(x) ; q,k,v = a Wq^T, a Wk^T, a Wv^T ; rope(q), rope(k) ;
//                 o = causal_attention(q, k, v) (scale 1/sqrt(hd), query head h uses kv head h/(H/KVH)) ;
//                 x = x + o Wo^T ;
//                 f = rmsnorm(x) ; gated: h = relu(f Wg^T) * (f Wu^T)   non-gated: h = relu(f Wu^T) ;
//                 x = x + h Wd^T
//   logits = rmsnorm(x) E^T                       (tied LM head)
//   loss = mean_n CE(logits_n, target_n) + l1_lambda * l1,
//   l1   = mean_l ( mean_n sum_F |h_l[n, :]| )
// RMSNorm: y = w * x / sqrt(mean(x^2) + eps), eps = cfg.norm_eps (as a double).
// RoPE: Hugging Face Llama rotate_half convention: inv_freq[i] = theta^(-2i/hd), i < hd/2; angle at
//   position t: t*inv_freq[i], duplicated over the two halves (cos[j] = cos[j + hd/2]);
//   x' = x*cos + rotate_half(x)*sin, rotate_half(x) = [-x[hd/2:], x[:hd/2]].
// Subgradients: relu'(0) = 0, sign(0) = 0 (d|h|/dh at h = 0 is 0).
#ifndef SLLM_REF_MODEL_H
#define SLLM_REF_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "config.h"

#ifdef __cplusplus
extern "C" {
#endif

// ---- whole model -------------------------------------------------------------------------------

typedef struct {
    ModelConfig cfg;
    ParamLayout lay;
    double *params;  // [lay.total], flat config.h layout
} RefModel;

// Matrices and embedding ~ N(0, 0.02) from core/rng.h (one Rng seeded with `seed`, tensors filled in
// ParamKind order, elements in memory order), norm gains = 1. Dies (SLLM_FATAL) on an invalid config.
void ref_model_init(RefModel *m, const ModelConfig *c, uint64_t seed);
void ref_model_free(RefModel *m);
// Copy parameters to / from a float32 flat buffer of the same layout (e.g. the GPU master weights).
void ref_model_to_f32(const RefModel *m, float *dst);
void ref_model_from_f32(RefModel *m, const float *src);

typedef struct {
    double loss, ce, l1;  // loss = ce + l1_lambda * l1
    double *layer_nnz;    // [L] or NULL: mean over tokens of #units with gate pre-activation > 0 (non-gated: up > 0)
    double *layer_fired;  // [L] or NULL: fraction of the F units that were > 0 for at least one token
    double *layer_l1;     // [L] or NULL: mean over tokens of sum_F |h| of that layer (l1 = mean of these)
    uint64_t kink_hash;   // hash of the on/off pattern of every ReLU and every |h| kink (gated: g > 0 and
                          // (g > 0 and u > 0); non-gated: u > 0); equal hashes = same smooth piece (gradient checks use it)
    double kink_margin;   // distance of the nearest kink: min over layers/tokens/units of |g| and (where g > 0) |u|
                          // (gated), |u| (non-gated)
} RefStats;               // caller allocates the arrays; NULL pointers are skipped

// Forward and (if grads != NULL) backward of the whole model on tokens/targets [B*T] (targets all in
// [0, V)). Returns the loss. logits [B*T*V] or NULL; grads [lay.total] or NULL, OVERWRITTEN (not
// accumulated) with dLoss/dparams; stats or NULL (loss/ce/l1/kink_* always filled when stats != NULL).
// T must be <= cfg.max_seq.
double ref_forward_backward(const RefModel *m, const int *tokens, const int *targets, int B, int T,
                            double *logits, double *grads, RefStats *stats);

// Same, but the input of layer 0 is x0 [B*T, D] instead of E[tokens] (tokens are then ignored and
// may be NULL); dx0 [B*T, D] or NULL receives dLoss/dx0. The embedding gradient then only holds the
// LM-head part. Used to check the input embedding path on its own.
double ref_forward_backward_x0(const RefModel *m, const double *x0, const int *targets, int B, int T,
                               double *logits, double *grads, double *dx0, RefStats *stats);

// ---- optimizer ---------------------------------------------------------------------------------

// One AdamW step over the whole flat buffer (PyTorch AdamW semantics, decoupled decay):
//   m = b1*m + (1-b1)*g ; v = b2*v + (1-b2)*g^2 ; mhat = m/(1-b1^step) ; vhat = v/(1-b2^step)
//   p = p - lr*(mhat/(sqrt(vhat)+eps) + wd*p)      (wd term only on tensors with weight_decay == 1)
// step is 1-based. m, v [lay->total], start at 0.
void ref_adamw_step(double *params, const double *grads, double *m, double *v, const ParamLayout *lay,
                    double lr, double beta1, double beta2, double eps, double weight_decay, int step);
// Global L2 norm of grads; if norm > max_norm (and max_norm > 0) scale grads by max_norm/norm.
// Returns the norm before clipping.
double ref_clip_grad_norm(double *grads, size_t n, double max_norm);

// ---- layers (each forward has its backward; "+=" marks outputs that ACCUMULATE) -----------------

// out[n, :] = E[tokens[n], :]                                   out [N, D], E [V, D]
void ref_embedding_forward(double *out, const int *tokens, const double *E, int N, int D);
// dE[tokens[n], :] += dout[n, :]
void ref_embedding_backward(double *dE, const double *dout, const int *tokens, int N, int D);

// out = w * x * rstd, rstd[n] = 1/sqrt(mean(x[n]^2) + eps)      x, out [N, D], w [D], rstd [N] or NULL
void ref_rmsnorm_forward(double *out, double *rstd, const double *x, const double *w, int N, int D, double eps);
// dx += ..., dw += ...  (rstd from the forward)
void ref_rmsnorm_backward(double *dx, double *dw, const double *dout, const double *x, const double *w,
                          const double *rstd, int N, int D);

// out = x W^T                                                   x [N, I], W [O, I], out [N, O]
void ref_matmul_forward(double *out, const double *x, const double *W, int N, int I, int O);
// dx += dout W (if dx), dW += dout^T x (if dW)
void ref_matmul_backward(double *dx, double *dW, const double *dout, const double *x, const double *W,
                         int N, int I, int O);

// Rotate x [B, T, nh, hd] in place by RoPE at positions t = 0..T-1.
void ref_rope_forward(double *x, int B, int T, int nh, int hd, double theta);
// Backward = the inverse rotation (transpose), in place on the gradient dx [B, T, nh, hd].
void ref_rope_backward(double *dx, int B, int T, int nh, int hd, double theta);

// Causal attention. q, out [B, T, H, hd]; k, v [B, T, KVH, hd]; att [B, H, T, T] (softmax
// probabilities, zero above the diagonal) or NULL; lse [B, H, T] (log-sum-exp of the scaled scores
// s = q.k/sqrt(hd) over j <= t) or NULL.
void ref_attention_forward(double *out, double *att, double *lse, const double *q, const double *k,
                           const double *v, int B, int T, int H, int KVH, int hd);
// dq, dk, dv OVERWRITTEN. att from the forward.
void ref_attention_backward(double *dq, double *dk, double *dv, const double *dout, const double *att,
                            const double *q, const double *k, const double *v, int B, int T, int H, int KVH,
                            int hd);

// FFN on the normed input x [N, D]. Saves gpre [N, F] (gated only; may be NULL if !gated),
// upre [N, F], h [N, F]; y [N, D] OVERWRITTEN. Wg [F, D] (ignored if !gated), Wu [F, D], Wd [D, F].
void ref_ffn_forward(double *y, double *gpre, double *upre, double *h, const double *x, const double *Wg,
                     const double *Wu, const double *Wd, int N, int D, int F, int gated);
// dx, dWg, dWu, dWd ACCUMULATE (+=). l1_coef: the L1 term adds l1_coef * sign(h) to dL/dh
// (in the full model l1_coef = l1_lambda / (n_layer * N)).
void ref_ffn_backward(double *dx, double *dWg, double *dWu, double *dWd, const double *dy, const double *x,
                      const double *gpre, const double *upre, const double *h, const double *Wg,
                      const double *Wu, const double *Wd, int N, int D, int F, int gated, double l1_coef);

// Mean cross-entropy over N rows of logits [N, V]; if dlogits != NULL it gets (OVERWRITTEN)
// dmean/dlogits = (softmax - onehot(target)) / N.
double ref_cross_entropy(double *dlogits, const double *logits, const int *targets, int N, int V);

#ifdef __cplusplus
}
#endif
#endif  // SLLM_REF_MODEL_H
