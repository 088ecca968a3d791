// model/ref_model.c: the CPU reference model in float64. See ref_model.h for the definition and the
// conventions (shapes, layouts, which outputs accumulate).
#include "model/ref_model.h"

#include <math.h>
#include <string.h>

#include "common.h"
#include "rng.h"

// ---- whole model: parameters -------------------------------------------------------------------

void ref_model_init(RefModel *m, const ModelConfig *c, uint64_t seed) {
    char err[256];
    if (config_validate(c, err, sizeof err) != 0) SLLM_FATAL("ref_model_init: invalid config: %s", err);
    m->cfg = *c;
    config_param_layout(c, &m->lay);
    m->params = sllm_malloc(m->lay.total * sizeof(double));
    Rng rng;
    rng_seed(&rng, seed);
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        const ParamTensor *t = &m->lay.t[k];
        double *p = m->params + t->offset;
        for (size_t i = 0; i < t->numel; i++) p[i] = t->is_norm ? 1.0 : 0.02 * rng_normal(&rng);
    }
}

void ref_model_free(RefModel *m) {
    free(m->params);
    m->params = NULL;
}

void ref_model_to_f32(const RefModel *m, float *dst) {
    for (size_t i = 0; i < m->lay.total; i++) dst[i] = (float)m->params[i];
}

void ref_model_from_f32(RefModel *m, const float *src) {
    for (size_t i = 0; i < m->lay.total; i++) m->params[i] = (double)src[i];
}

// ---- layers ------------------------------------------------------------------------------------

void ref_embedding_forward(double *out, const int *tokens, const double *E, int N, int D) {
    for (int n = 0; n < N; n++) memcpy(out + (size_t)n * D, E + (size_t)tokens[n] * D, D * sizeof(double));
}

void ref_embedding_backward(double *dE, const double *dout, const int *tokens, int N, int D) {
    for (int n = 0; n < N; n++) {
        double *row = dE + (size_t)tokens[n] * D;
        for (int i = 0; i < D; i++) row[i] += dout[(size_t)n * D + i];
    }
}

void ref_rmsnorm_forward(double *out, double *rstd, const double *x, const double *w, int N, int D, double eps) {
    for (int n = 0; n < N; n++) {
        const double *xn = x + (size_t)n * D;
        double ss = 0;
        for (int i = 0; i < D; i++) ss += xn[i] * xn[i];
        double r = 1.0 / sqrt(ss / D + eps);
        for (int i = 0; i < D; i++) out[(size_t)n * D + i] = w[i] * xn[i] * r;
        if (rstd) rstd[n] = r;
    }
}

// y_i = w_i x_i r, r = (mean(x^2)+eps)^(-1/2), dr/dx_j = -r^3 x_j / D
// dx_j = w_j dy_j r - x_j r^3 / D * sum_i dy_i w_i x_i ;  dw_i = dy_i x_i r
void ref_rmsnorm_backward(double *dx, double *dw, const double *dout, const double *x, const double *w,
                          const double *rstd, int N, int D) {
    for (int n = 0; n < N; n++) {
        const double *xn = x + (size_t)n * D, *dy = dout + (size_t)n * D;
        double r = rstd[n], dot = 0;
        for (int i = 0; i < D; i++) dot += dy[i] * w[i] * xn[i];
        for (int i = 0; i < D; i++) {
            dx[(size_t)n * D + i] += w[i] * dy[i] * r - xn[i] * r * r * r * dot / D;
            dw[i] += dy[i] * xn[i] * r;
        }
    }
}

void ref_matmul_forward(double *out, const double *x, const double *W, int N, int I, int O) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            const double *xr = x + (size_t)n * I, *wr = W + (size_t)o * I;
            double s = 0;
            for (int i = 0; i < I; i++) s += xr[i] * wr[i];
            out[(size_t)n * O + o] = s;
        }
}

void ref_matmul_backward(double *dx, double *dW, const double *dout, const double *x, const double *W,
                         int N, int I, int O) {
    for (int n = 0; n < N; n++)
        for (int o = 0; o < O; o++) {
            double g = dout[(size_t)n * O + o];
            if (g == 0) continue;
            const double *xr = x + (size_t)n * I, *wr = W + (size_t)o * I;
            if (dx) for (int i = 0; i < I; i++) dx[(size_t)n * I + i] += g * wr[i];
            if (dW) for (int i = 0; i < I; i++) dW[(size_t)o * I + i] += g * xr[i];
        }
}

// Rotate by +angle (dir = +1, forward) or -angle (dir = -1, backward: the transpose of the rotation).
// Pairs (j, j + hd/2) rotate together: x'_j = x_j c - x_{j+h} s ; x'_{j+h} = x_{j+h} c + x_j s.
static void rope_apply(double *x, int B, int T, int nh, int hd, double theta, double dir) {
    const int half = hd / 2;
    for (int t = 0; t < T; t++)
        for (int i = 0; i < half; i++) {
            double inv_freq = pow(theta, -2.0 * i / hd);
            double ang = (double)t * inv_freq, c = cos(ang), s = dir * sin(ang);
            for (int b = 0; b < B; b++)
                for (int h = 0; h < nh; h++) {
                    double *v = x + (((size_t)b * T + t) * nh + h) * hd;
                    double x1 = v[i], x2 = v[i + half];
                    v[i] = x1 * c - x2 * s;
                    v[i + half] = x2 * c + x1 * s;
                }
        }
}

void ref_rope_forward(double *x, int B, int T, int nh, int hd, double theta) { rope_apply(x, B, T, nh, hd, theta, 1.0); }
void ref_rope_backward(double *dx, int B, int T, int nh, int hd, double theta) { rope_apply(dx, B, T, nh, hd, theta, -1.0); }

void ref_attention_forward(double *out, double *att, double *lse, const double *q, const double *k,
                           const double *v, int B, int T, int H, int KVH, int hd) {
    const double scale = 1.0 / sqrt((double)hd);
    const int group = H / KVH;
    double *p = sllm_malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int kh = h / group;
            for (int t = 0; t < T; t++) {
                const double *qv = q + (((size_t)b * T + t) * H + h) * hd;
                double mx = -INFINITY;
                for (int j = 0; j <= t; j++) {
                    const double *kv = k + (((size_t)b * T + j) * KVH + kh) * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += qv[d] * kv[d];
                    p[j] = s * scale;
                    if (p[j] > mx) mx = p[j];
                }
                double sum = 0;
                for (int j = 0; j <= t; j++) { p[j] = exp(p[j] - mx); sum += p[j]; }
                for (int j = 0; j <= t; j++) p[j] /= sum;
                if (lse) lse[((size_t)b * H + h) * T + t] = mx + log(sum);
                if (att) {
                    double *arow = att + (((size_t)b * H + h) * T + t) * T;
                    for (int j = 0; j < T; j++) arow[j] = j <= t ? p[j] : 0.0;
                }
                double *ov = out + (((size_t)b * T + t) * H + h) * hd;
                for (int d = 0; d < hd; d++) ov[d] = 0;
                for (int j = 0; j <= t; j++) {
                    const double *vv = v + (((size_t)b * T + j) * KVH + kh) * hd;
                    for (int d = 0; d < hd; d++) ov[d] += p[j] * vv[d];
                }
            }
        }
    free(p);
}

// o = sum_j p_j v_j ; p = softmax(s), s_j = scale q.k_j
// dv_j += p_j do ; dp_j = do.v_j ; ds_j = p_j (dp_j - sum_i p_i dp_i) ; dq += scale ds_j k_j ; dk_j += scale ds_j q
void ref_attention_backward(double *dq, double *dk, double *dv, const double *dout, const double *att,
                            const double *q, const double *k, const double *v, int B, int T, int H, int KVH,
                            int hd) {
    const double scale = 1.0 / sqrt((double)hd);
    const int group = H / KVH;
    memset(dq, 0, (size_t)B * T * H * hd * sizeof(double));
    memset(dk, 0, (size_t)B * T * KVH * hd * sizeof(double));
    memset(dv, 0, (size_t)B * T * KVH * hd * sizeof(double));
    double *dp = sllm_malloc((size_t)T * sizeof(double));
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            const int kh = h / group;
            for (int t = 0; t < T; t++) {
                const double *p = att + (((size_t)b * H + h) * T + t) * T;
                const double *dov = dout + (((size_t)b * T + t) * H + h) * hd;
                const double *qv = q + (((size_t)b * T + t) * H + h) * hd;
                double *dqv = dq + (((size_t)b * T + t) * H + h) * hd;
                double pdp = 0;
                for (int j = 0; j <= t; j++) {
                    size_t kvoff = (((size_t)b * T + j) * KVH + kh) * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) {
                        s += dov[d] * v[kvoff + d];
                        dv[kvoff + d] += p[j] * dov[d];
                    }
                    dp[j] = s;
                    pdp += p[j] * s;
                }
                for (int j = 0; j <= t; j++) {
                    size_t kvoff = (((size_t)b * T + j) * KVH + kh) * hd;
                    double ds = p[j] * (dp[j] - pdp) * scale;
                    for (int d = 0; d < hd; d++) {
                        dqv[d] += ds * k[kvoff + d];
                        dk[kvoff + d] += ds * qv[d];
                    }
                }
            }
        }
    free(dp);
}

void ref_ffn_forward(double *y, double *gpre, double *upre, double *h, const double *x, const double *Wg,
                     const double *Wu, const double *Wd, int N, int D, int F, int gated) {
    const size_t NF = (size_t)N * F;
    ref_matmul_forward(upre, x, Wu, N, D, F);                  // upre [N, F] = x Wu^T
    if (gated) {
        ref_matmul_forward(gpre, x, Wg, N, D, F);              // gpre [N, F] = x Wg^T
        for (size_t i = 0; i < NF; i++) h[i] = (gpre[i] > 0 ? gpre[i] : 0.0) * upre[i];
    } else {
        for (size_t i = 0; i < NF; i++) h[i] = upre[i] > 0 ? upre[i] : 0.0;
    }
    ref_matmul_forward(y, h, Wd, N, F, D);                     // y [N, D] = h Wd^T
}

static inline double sign0(double x) { return x > 0 ? 1.0 : (x < 0 ? -1.0 : 0.0); }

void ref_ffn_backward(double *dx, double *dWg, double *dWu, double *dWd, const double *dy, const double *x,
                      const double *gpre, const double *upre, const double *h, const double *Wg,
                      const double *Wu, const double *Wd, int N, int D, int F, int gated, double l1_coef) {
    const size_t NF = (size_t)N * F;
    double *dh = sllm_calloc(NF, sizeof(double));
    double *dpre = sllm_malloc(NF * sizeof(double));
    ref_matmul_backward(dh, dWd, dy, h, Wd, N, F, D);          // dh = dy Wd, dWd += dy^T h
    for (size_t i = 0; i < NF; i++) dh[i] += l1_coef * sign0(h[i]);
    if (gated) {
        // h = relu(g) * u : du = dh relu(g) ; dg = dh u [g > 0]
        for (size_t i = 0; i < NF; i++) dpre[i] = gpre[i] > 0 ? dh[i] * gpre[i] : 0.0;
        ref_matmul_backward(dx, dWu, dpre, x, Wu, N, D, F);
        for (size_t i = 0; i < NF; i++) dpre[i] = gpre[i] > 0 ? dh[i] * upre[i] : 0.0;
        ref_matmul_backward(dx, dWg, dpre, x, Wg, N, D, F);
    } else {
        // h = relu(u) : du = dh [u > 0]
        for (size_t i = 0; i < NF; i++) dpre[i] = upre[i] > 0 ? dh[i] : 0.0;
        ref_matmul_backward(dx, dWu, dpre, x, Wu, N, D, F);
    }
    free(dpre);
    free(dh);
}

double ref_cross_entropy(double *dlogits, const double *logits, const int *targets, int N, int V) {
    double total = 0;
    for (int n = 0; n < N; n++) {
        const double *z = logits + (size_t)n * V;
        double mx = -INFINITY;
        for (int i = 0; i < V; i++) if (z[i] > mx) mx = z[i];
        double sum = 0;
        for (int i = 0; i < V; i++) sum += exp(z[i] - mx);
        double lse = mx + log(sum);
        total += lse - z[targets[n]];
        if (dlogits) {
            double *dz = dlogits + (size_t)n * V;
            for (int i = 0; i < V; i++) dz[i] = exp(z[i] - lse) / N;
            dz[targets[n]] -= 1.0 / N;
        }
    }
    return total / N;
}

// ---- whole model: forward + backward ----------------------------------------------------------

// Saved activations of one layer (N = B*T tokens, Q = H*hd, KV = KVH*hd).
typedef struct {
    double *x_in;      // [N, D]  residual stream entering the layer
    double *a_rstd;    // [N]     attention-norm 1/rms
    double *a;         // [N, D]  normed input of attention
    double *q, *k, *v; // [N, Q], [N, KV], [N, KV] (q, k after RoPE)
    double *att;       // [B, H, T, T]
    double *o;         // [N, Q]  attention output before o_proj
    double *x_mid;     // [N, D]  residual stream after attention
    double *f_rstd;    // [N]
    double *f;         // [N, D]  normed input of the FFN
    double *gpre;      // [N, F]  (gated only)
    double *upre;      // [N, F]
    double *h;         // [N, F]
} LayerActs;

static const double *tensor_slice(const RefModel *m, const double *base, ParamKind k, int l) {
    const ParamTensor *t = &m->lay.t[k];
    return base + t->offset + (t->per_layer ? (size_t)l * t->rows * t->cols : 0);
}
static double *grad_slice(const RefModel *m, double *base, ParamKind k, int l) {
    return (double *)tensor_slice(m, base, k, l);
}

static double forward_backward_impl(const RefModel *m, const int *tokens, const double *x0, const int *targets,
                                    int B, int T, double *logits_out, double *grads, double *dx0,
                                    RefStats *stats) {
    const ModelConfig *c = &m->cfg;
    const int N = B * T, D = c->d_model, L = c->n_layer, H = c->n_head, KVH = c->n_kv_head, hd = c->head_dim;
    const int F = c->d_ff, V = c->vocab_size, Q = H * hd, KV = KVH * hd;
    const double eps = (double)c->norm_eps, theta = (double)c->rope_theta;
    SLLM_CHECK(T >= 1 && T <= c->max_seq, "ref_forward_backward: T = %d must be in [1, max_seq = %d]", T, c->max_seq);
    SLLM_CHECK(B >= 1, "ref_forward_backward: B = %d must be >= 1", B);
    for (int n = 0; n < N; n++) {
        SLLM_CHECK(targets[n] >= 0 && targets[n] < V, "ref_forward_backward: target[%d] = %d not in [0, %d)", n, targets[n], V);
        if (!x0) SLLM_CHECK(tokens[n] >= 0 && tokens[n] < V, "ref_forward_backward: token[%d] = %d not in [0, %d)", n, tokens[n], V);
    }
    const double *P = m->params;
    const double *E = tensor_slice(m, P, PARAM_EMBED, 0);

    // ---- forward ----
    LayerActs *acts = sllm_calloc(L, sizeof(LayerActs));
    double *x = sllm_malloc((size_t)N * D * sizeof(double));   // residual stream
    if (x0) memcpy(x, x0, (size_t)N * D * sizeof(double));
    else ref_embedding_forward(x, tokens, E, N, D);
    double l1_total = 0;
    uint64_t kink_hash = 0xcbf29ce484222325ull;  // FNV-1a over the per-unit kink states
    double kink_margin = INFINITY;
    for (int l = 0; l < L; l++) {
        LayerActs *A = &acts[l];
        A->x_in = sllm_malloc((size_t)N * D * sizeof(double));
        A->a_rstd = sllm_malloc((size_t)N * sizeof(double));
        A->a = sllm_malloc((size_t)N * D * sizeof(double));
        A->q = sllm_malloc((size_t)N * Q * sizeof(double));
        A->k = sllm_malloc((size_t)N * KV * sizeof(double));
        A->v = sllm_malloc((size_t)N * KV * sizeof(double));
        A->att = sllm_malloc((size_t)B * H * T * T * sizeof(double));
        A->o = sllm_malloc((size_t)N * Q * sizeof(double));
        A->x_mid = sllm_malloc((size_t)N * D * sizeof(double));
        A->f_rstd = sllm_malloc((size_t)N * sizeof(double));
        A->f = sllm_malloc((size_t)N * D * sizeof(double));
        A->gpre = c->gated ? sllm_malloc((size_t)N * F * sizeof(double)) : NULL;
        A->upre = sllm_malloc((size_t)N * F * sizeof(double));
        A->h = sllm_malloc((size_t)N * F * sizeof(double));

        memcpy(A->x_in, x, (size_t)N * D * sizeof(double));
        // attention block
        ref_rmsnorm_forward(A->a, A->a_rstd, x, tensor_slice(m, P, PARAM_ATTN_NORM, l), N, D, eps);
        ref_matmul_forward(A->q, A->a, tensor_slice(m, P, PARAM_WQ, l), N, D, Q);
        ref_matmul_forward(A->k, A->a, tensor_slice(m, P, PARAM_WK, l), N, D, KV);
        ref_matmul_forward(A->v, A->a, tensor_slice(m, P, PARAM_WV, l), N, D, KV);
        ref_rope_forward(A->q, B, T, H, hd, theta);
        ref_rope_forward(A->k, B, T, KVH, hd, theta);
        ref_attention_forward(A->o, A->att, NULL, A->q, A->k, A->v, B, T, H, KVH, hd);
        double *tmp = sllm_malloc((size_t)N * D * sizeof(double));
        ref_matmul_forward(tmp, A->o, tensor_slice(m, P, PARAM_WO, l), N, Q, D);
        for (size_t i = 0; i < (size_t)N * D; i++) x[i] += tmp[i];
        memcpy(A->x_mid, x, (size_t)N * D * sizeof(double));
        // FFN block
        ref_rmsnorm_forward(A->f, A->f_rstd, x, tensor_slice(m, P, PARAM_FFN_NORM, l), N, D, eps);
        ref_ffn_forward(tmp, A->gpre, A->upre, A->h, A->f, c->gated ? tensor_slice(m, P, PARAM_WG, l) : NULL,
                        tensor_slice(m, P, PARAM_WU, l), tensor_slice(m, P, PARAM_WD, l), N, D, F, c->gated);
        for (size_t i = 0; i < (size_t)N * D; i++) x[i] += tmp[i];
        free(tmp);
        // L1 and statistics
        const double *pre = c->gated ? A->gpre : A->upre;
        double l1 = 0, nnz = 0;
        int fired = 0;
        for (size_t i = 0; i < (size_t)N * F; i++) {
            l1 += fabs(A->h[i]);
            nnz += pre[i] > 0;
            unsigned state = c->gated ? (A->gpre[i] > 0) | ((A->gpre[i] > 0 && A->upre[i] > 0) << 1) : (A->upre[i] > 0);
            kink_hash = (kink_hash ^ state) * 0x100000001b3ull;
            double dist = c->gated ? (A->gpre[i] > 0 ? fmin(A->gpre[i], fabs(A->upre[i])) : -A->gpre[i]) : fabs(A->upre[i]);
            if (dist < kink_margin) kink_margin = dist;
        }
        for (int j = 0; j < F; j++)
            for (int n = 0; n < N; n++)
                if (pre[(size_t)n * F + j] > 0) { fired++; break; }
        l1 /= N;
        l1_total += l1;
        if (stats && stats->layer_l1) stats->layer_l1[l] = l1;
        if (stats && stats->layer_nnz) stats->layer_nnz[l] = nnz / N;
        if (stats && stats->layer_fired) stats->layer_fired[l] = (double)fired / F;
    }
    double *xf_rstd = sllm_malloc((size_t)N * sizeof(double));
    double *xf = sllm_malloc((size_t)N * D * sizeof(double));
    double *logits = sllm_malloc((size_t)N * V * sizeof(double));
    const double *wfinal = tensor_slice(m, P, PARAM_FINAL_NORM, 0);
    ref_rmsnorm_forward(xf, xf_rstd, x, wfinal, N, D, eps);
    ref_matmul_forward(logits, xf, E, N, D, V);                // tied LM head: logits = xf E^T
    if (logits_out) memcpy(logits_out, logits, (size_t)N * V * sizeof(double));
    double *dlogits = (grads || dx0) ? sllm_malloc((size_t)N * V * sizeof(double)) : NULL;
    const double ce = ref_cross_entropy(dlogits, logits, targets, N, V);
    const double l1 = l1_total / L;
    const double loss = ce + (double)c->l1_lambda * l1;
    if (stats) { stats->loss = loss; stats->ce = ce; stats->l1 = l1; stats->kink_hash = kink_hash; stats->kink_margin = kink_margin; }

    // ---- backward ----
    if (grads || dx0) {
        double *G = grads ? grads : sllm_malloc(m->lay.total * sizeof(double));  // dx0-only: scratch grads
        memset(G, 0, m->lay.total * sizeof(double));
        double *dE = grad_slice(m, G, PARAM_EMBED, 0);
        double *dxf = sllm_calloc((size_t)N * D, sizeof(double));
        double *dx = sllm_calloc((size_t)N * D, sizeof(double));   // gradient of the residual stream
        ref_matmul_backward(dxf, dE, dlogits, xf, E, N, D, V);
        ref_rmsnorm_backward(dx, grad_slice(m, G, PARAM_FINAL_NORM, 0), dxf, x, wfinal, xf_rstd, N, D);
        const double l1_coef = (double)c->l1_lambda / ((double)L * N);
        double *dnorm = sllm_malloc((size_t)N * D * sizeof(double));
        double *dq = sllm_malloc((size_t)N * Q * sizeof(double)), *dob = sllm_malloc((size_t)N * Q * sizeof(double));
        double *dk = sllm_malloc((size_t)N * KV * sizeof(double)), *dv = sllm_malloc((size_t)N * KV * sizeof(double));
        for (int l = L - 1; l >= 0; l--) {
            LayerActs *A = &acts[l];
            // FFN block: x_out = x_mid + ffn(rmsnorm(x_mid))
            memset(dnorm, 0, (size_t)N * D * sizeof(double));
            ref_ffn_backward(dnorm, c->gated ? grad_slice(m, G, PARAM_WG, l) : NULL, grad_slice(m, G, PARAM_WU, l),
                             grad_slice(m, G, PARAM_WD, l), dx, A->f, A->gpre, A->upre, A->h,
                             c->gated ? tensor_slice(m, P, PARAM_WG, l) : NULL, tensor_slice(m, P, PARAM_WU, l),
                             tensor_slice(m, P, PARAM_WD, l), N, D, F, c->gated, l1_coef);
            ref_rmsnorm_backward(dx, grad_slice(m, G, PARAM_FFN_NORM, l), dnorm, A->x_mid,
                                 tensor_slice(m, P, PARAM_FFN_NORM, l), A->f_rstd, N, D);
            // attention block: x_mid = x_in + attn(rmsnorm(x_in)) Wo^T
            memset(dob, 0, (size_t)N * Q * sizeof(double));
            ref_matmul_backward(dob, grad_slice(m, G, PARAM_WO, l), dx, A->o, tensor_slice(m, P, PARAM_WO, l), N, Q, D);
            ref_attention_backward(dq, dk, dv, dob, A->att, A->q, A->k, A->v, B, T, H, KVH, hd);
            ref_rope_backward(dq, B, T, H, hd, theta);
            ref_rope_backward(dk, B, T, KVH, hd, theta);
            memset(dnorm, 0, (size_t)N * D * sizeof(double));
            ref_matmul_backward(dnorm, grad_slice(m, G, PARAM_WQ, l), dq, A->a, tensor_slice(m, P, PARAM_WQ, l), N, D, Q);
            ref_matmul_backward(dnorm, grad_slice(m, G, PARAM_WK, l), dk, A->a, tensor_slice(m, P, PARAM_WK, l), N, D, KV);
            ref_matmul_backward(dnorm, grad_slice(m, G, PARAM_WV, l), dv, A->a, tensor_slice(m, P, PARAM_WV, l), N, D, KV);
            ref_rmsnorm_backward(dx, grad_slice(m, G, PARAM_ATTN_NORM, l), dnorm, A->x_in,
                                 tensor_slice(m, P, PARAM_ATTN_NORM, l), A->a_rstd, N, D);
        }
        if (x0) { if (dx0) memcpy(dx0, dx, (size_t)N * D * sizeof(double)); }
        else ref_embedding_backward(dE, dx, tokens, N, D);
        free(dnorm); free(dq); free(dob); free(dk); free(dv); free(dx); free(dxf);
        if (!grads) free(G);
    }

    for (int l = 0; l < L; l++) {
        LayerActs *A = &acts[l];
        free(A->x_in); free(A->a_rstd); free(A->a); free(A->q); free(A->k); free(A->v); free(A->att);
        free(A->o); free(A->x_mid); free(A->f_rstd); free(A->f); free(A->gpre); free(A->upre); free(A->h);
    }
    free(acts); free(x); free(xf_rstd); free(xf); free(logits); free(dlogits);
    return loss;
}

double ref_forward_backward(const RefModel *m, const int *tokens, const int *targets, int B, int T,
                            double *logits, double *grads, RefStats *stats) {
    return forward_backward_impl(m, tokens, NULL, targets, B, T, logits, grads, NULL, stats);
}

double ref_forward_backward_x0(const RefModel *m, const double *x0, const int *targets, int B, int T,
                               double *logits, double *grads, double *dx0, RefStats *stats) {
    SLLM_CHECK(x0 != NULL, "ref_forward_backward_x0: x0 must not be NULL");
    return forward_backward_impl(m, NULL, x0, targets, B, T, logits, grads, dx0, stats);
}

// ---- optimizer ---------------------------------------------------------------------------------

void ref_adamw_step(double *params, const double *grads, double *m, double *v, const ParamLayout *lay,
                    double lr, double beta1, double beta2, double eps, double weight_decay, int step) {
    const double bc1 = 1.0 - pow(beta1, step), bc2 = 1.0 - pow(beta2, step);
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        const ParamTensor *t = &lay->t[k];
        const double wd = t->weight_decay ? weight_decay : 0.0;
        for (size_t i = t->offset; i < t->offset + t->numel; i++) {
            double g = grads[i];
            m[i] = beta1 * m[i] + (1.0 - beta1) * g;
            v[i] = beta2 * v[i] + (1.0 - beta2) * g * g;
            double mhat = m[i] / bc1, vhat = v[i] / bc2;
            params[i] -= lr * (mhat / (sqrt(vhat) + eps) + wd * params[i]);
        }
    }
}

double ref_clip_grad_norm(double *grads, size_t n, double max_norm) {
    double ss = 0;
    for (size_t i = 0; i < n; i++) ss += grads[i] * grads[i];
    double norm = sqrt(ss);
    if (max_norm > 0 && norm > max_norm) {
        double s = max_norm / norm;
        for (size_t i = 0; i < n; i++) grads[i] *= s;
    }
    return norm;
}
