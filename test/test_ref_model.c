// CPU reference model: forward semantics against hand-computed values (RoPE convention, RMSNorm,
// attention with GQA mapping and causality, FFN gated/non-gated, cross-entropy), statistics, AdamW,
// clipping, the LR schedule, and two training tests (overfit one batch; L1 drives sparsity).
// Gradients are checked separately in test_ref_gradcheck.c.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"
#include "lr_schedule.h"
#include "model/ref_model.h"
#include "rng.h"

#define assert_close(a, b, tol) do { double a_ = (a), b_ = (b); \
    if (!(fabs(a_ - b_) <= (tol))) fail_msg("%s = %.17g, expected %.17g (tol %g)", #a, a_, b_, (double)(tol)); } while (0)

// ---- layers against hand-computed values --------------------------------------------------------

// HF rotate_half convention, hd = 4, theta = 100: inv_freq = [1, 0.1]; at position 2 the angles are
// [2, 0.2] for the pairs (0, 2) and (1, 3).
static void test_rope_hand_values(void **s) {
    (void)s;
    double x[3 * 4];
    for (int t = 0; t < 3; t++) for (int j = 0; j < 4; j++) x[t * 4 + j] = j + 1;  // [1, 2, 3, 4] at every t
    ref_rope_forward(x, 1, 3, 1, 4, 100.0);
    for (int j = 0; j < 4; j++) assert_close(x[j], j + 1, 0);  // position 0: identity
    const double want[4] = {-3.1440391170241875, 1.1654558325022384, -0.33914308281574557, 4.317604972955089};
    for (int j = 0; j < 4; j++) assert_close(x[8 + j], want[j], 1e-14);
    ref_rope_backward(x, 1, 3, 1, 4, 100.0);  // the inverse rotation
    for (int t = 0; t < 3; t++) for (int j = 0; j < 4; j++) assert_close(x[t * 4 + j], j + 1, 1e-14);
}

static void test_rmsnorm_hand_values(void **s) {
    (void)s;
    const double x[4] = {1, 2, 3, 4}, w[4] = {1, 1, 2, 0.5};
    double y[4], rstd;
    ref_rmsnorm_forward(y, &rstd, x, w, 1, 4, 1e-5);
    const double r = 1.0 / sqrt(7.5 + 1e-5);  // mean(x^2) = 30/4
    assert_close(rstd, r, 1e-15);
    for (int i = 0; i < 4; i++) assert_close(y[i], w[i] * x[i] * r, 1e-15);
    // all-zero row: output 0 (eps keeps it finite)
    const double z[4] = {0};
    ref_rmsnorm_forward(y, &rstd, z, w, 1, 4, 1e-5);
    for (int i = 0; i < 4; i++) assert_close(y[i], 0, 0);
}

// One query row, two keys, hd = 2: s = [1/sqrt(2), 0].
static void test_attention_hand_values(void **s) {
    (void)s;
    const double q[2 * 2] = {9, 9, 1, 0};  // position 0 query irrelevant to position 1's output
    const double k[2 * 2] = {1, 0, 0, 0}, v[2 * 2] = {1, 2, 3, 5};
    double out[4], att[4], lse[2];
    ref_attention_forward(out, att, lse, q, k, v, 1, 2, 1, 1, 2);
    const double s0 = 1 / sqrt(2.0), p0 = exp(s0) / (exp(s0) + 1), p1 = 1 / (exp(s0) + 1);
    assert_close(out[0], 1, 1e-15); assert_close(out[1], 2, 1e-15);  // t = 0 sees only v0
    assert_close(out[2], p0 * 1 + p1 * 3, 1e-15);
    assert_close(out[3], p0 * 2 + p1 * 5, 1e-15);
    assert_close(att[1], 0, 0);  // causal mask above the diagonal
    assert_close(att[2], p0, 1e-15); assert_close(att[3], p1, 1e-15);
    assert_close(lse[1], log(exp(s0) + 1), 1e-15);
    assert_close(lse[0], 9 * 1 / sqrt(2.0), 1e-14);
}

// GQA: H = 4 query heads, KVH = 2: heads 0, 1 use kv head 0, heads 2, 3 kv head 1. At t = 0 the
// output of a head is exactly its kv head's v.
static void test_attention_gqa_mapping_and_causality(void **s) {
    (void)s;
    enum { B = 2, T = 3, H = 4, KVH = 2, hd = 4 };
    double q[B * T * H * hd], k[B * T * KVH * hd], v[B * T * KVH * hd], out[B * T * H * hd], out2[B * T * H * hd];
    Rng r;
    rng_seed(&r, 5);
    for (size_t i = 0; i < sizeof q / sizeof *q; i++) q[i] = rng_normal(&r);
    for (size_t i = 0; i < sizeof k / sizeof *k; i++) { k[i] = rng_normal(&r); v[i] = rng_normal(&r); }
    ref_attention_forward(out, NULL, NULL, q, k, v, B, T, H, KVH, hd);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int d = 0; d < hd; d++)
                assert_close(out[((b * T + 0) * H + h) * hd + d], v[((b * T + 0) * KVH + h / 2) * hd + d], 1e-15);
    // Changing k, v at the last position changes only the last position's output.
    k[((0 * T + 2) * KVH + 1) * hd] += 1.0;
    v[((0 * T + 2) * KVH + 0) * hd] += 1.0;
    ref_attention_forward(out2, NULL, NULL, q, k, v, B, T, H, KVH, hd);
    for (int t = 0; t < T; t++)
        for (int h = 0; h < H; h++) {
            double diff = 0;
            for (int d = 0; d < hd; d++) diff += fabs(out2[((0 * T + t) * H + h) * hd + d] - out[((0 * T + t) * H + h) * hd + d]);
            if (t < 2) assert_close(diff, 0, 0); else assert_true(diff > 1e-6);
            double diff_b1 = 0;  // other sequence untouched
            for (int d = 0; d < hd; d++) diff_b1 += fabs(out2[((1 * T + t) * H + h) * hd + d] - out[((1 * T + t) * H + h) * hd + d]);
            assert_close(diff_b1, 0, 0);
        }
}

static void test_ffn_hand_values(void **s) {
    (void)s;
    const double x[2] = {2, -1};
    const double Wg[4] = {1, 0, 0, 1}, Wu[4] = {1, 1, 3, 0}, Wd[4] = {1, 2, 3, 4};  // [F=2, D=2], Wd [D, F]
    double y[2], g[2], u[2], h[2];
    ref_ffn_forward(y, g, u, h, x, Wg, Wu, Wd, 1, 2, 2, 1);  // g = [2, -1], u = [1, 6], h = [2, 0]
    assert_close(g[0], 2, 0); assert_close(g[1], -1, 0);
    assert_close(u[0], 1, 0); assert_close(u[1], 6, 0);
    assert_close(h[0], 2, 0); assert_close(h[1], 0, 0);
    assert_close(y[0], 2, 0); assert_close(y[1], 6, 0);
    ref_ffn_forward(y, NULL, u, h, x, NULL, Wu, Wd, 1, 2, 2, 0);  // non-gated: h = relu(u) = [1, 6]
    assert_close(h[0], 1, 0); assert_close(h[1], 6, 0);
    assert_close(y[0], 13, 0); assert_close(y[1], 27, 0);
    // L1 gradient alone (dy = 0): dh = coef * sign(h); gated: du = dh relu(g), dg = dh u [g > 0]
    double dx[2] = {0}, dWg[4] = {0}, dWu[4] = {0}, dWd[4] = {0};
    const double dy[2] = {0, 0};
    ref_ffn_forward(y, g, u, h, x, Wg, Wu, Wd, 1, 2, 2, 1);
    ref_ffn_backward(dx, dWg, dWu, dWd, dy, x, g, u, h, Wg, Wu, Wd, 1, 2, 2, 1, 0.5);
    // dh = [0.5, 0] ; du = [1, 0] ; dg = [0.5, 0] ; dWu[0,:] = du0 x = [2, -1] ; dWg[0,:] = [1, -0.5]
    assert_close(dWu[0], 2, 0); assert_close(dWu[1], -1, 0); assert_close(dWu[2], 0, 0);
    assert_close(dWg[0], 1, 0); assert_close(dWg[1], -0.5, 0); assert_close(dWg[3], 0, 0);
    // dx = du0 Wu[0,:] + dg0 Wg[0,:] = [1, 1] + [0.5, 0]
    assert_close(dx[0], 1.5, 0); assert_close(dx[1], 1, 0);
}

static void test_cross_entropy_hand_values(void **s) {
    (void)s;
    const double logits[2 * 3] = {0, log(2.0), 0, 100, 100, 100};  // second row: large but equal
    const int targets[2] = {1, 2};
    double d[6];
    double ce = ref_cross_entropy(d, logits, targets, 2, 3);
    assert_close(ce, (log(2.0) + log(3.0)) / 2, 1e-14);
    assert_close(d[0], 0.25 / 2, 1e-16); assert_close(d[1], -0.5 / 2, 1e-16); assert_close(d[2], 0.25 / 2, 1e-16);
    assert_close(d[5], (1.0 / 3 - 1) / 2, 1e-15);
}

// ---- whole model --------------------------------------------------------------------------------

static void small_config(ModelConfig *c) {
    config_defaults(c);
    c->vocab_size = 32; c->d_model = 16; c->n_layer = 2; c->n_head = 2; c->n_kv_head = 2; c->head_dim = 8;
    c->d_ff = 32; c->max_seq = 16;
}

static void test_init(void **s) {
    (void)s;
    ModelConfig c;
    small_config(&c);
    RefModel a, b, d;
    ref_model_init(&a, &c, 42); ref_model_init(&b, &c, 42); ref_model_init(&d, &c, 43);
    assert_memory_equal(a.params, b.params, a.lay.total * sizeof(double));
    assert_true(memcmp(a.params, d.params, a.lay.total * sizeof(double)) != 0);
    double ss = 0; size_t n = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        const ParamTensor *t = &a.lay.t[k];
        for (size_t i = 0; i < t->numel; i++) {
            double p = a.params[t->offset + i];
            if (t->is_norm) assert_close(p, 1.0, 0);
            else { ss += p * p; n++; }
        }
    }
    assert_close(sqrt(ss / n), 0.02, 0.001);
    float *f = sllm_malloc(a.lay.total * sizeof(float));
    ref_model_to_f32(&a, f);
    ref_model_from_f32(&d, f);
    for (size_t i = 0; i < a.lay.total; i++) assert_close(d.params[i], (double)(float)a.params[i], 0);
    free(f);
    ref_model_free(&a); ref_model_free(&b); ref_model_free(&d);
}

// All-zero embedding: every activation is 0, logits are 0, CE = log V, L1 = 0, no unit fires.
static void test_zero_model(void **s) {
    (void)s;
    ModelConfig c;
    small_config(&c);
    RefModel m;
    ref_model_init(&m, &c, 1);
    memset(m.params + m.lay.t[PARAM_EMBED].offset, 0, m.lay.t[PARAM_EMBED].numel * sizeof(double));
    int tok[8] = {1, 2, 3, 4, 5, 6, 7, 8}, tgt[8] = {0, 31, 2, 3, 4, 5, 6, 7};
    double nnz[2], fired[2], l1s[2];
    RefStats st = {.layer_nnz = nnz, .layer_fired = fired, .layer_l1 = l1s};
    double loss = ref_forward_backward(&m, tok, tgt, 2, 4, NULL, NULL, &st);
    assert_close(loss, log(32.0), 1e-14);
    assert_close(st.l1, 0, 0);
    for (int l = 0; l < 2; l++) { assert_close(nnz[l], 0, 0); assert_close(fired[l], 0, 0); }
    ref_model_free(&m);
}

// Causality at model level, loss decomposition and statistics consistency.
static void test_model_causal_and_stats(void **s) {
    (void)s;
    ModelConfig c;
    small_config(&c);
    c.l1_lambda = 0.01f;
    RefModel m;
    ref_model_init(&m, &c, 3);
    enum { B = 2, T = 6, N = B * T, V = 32 };
    int tok[N], tgt[N];
    for (int n = 0; n < N; n++) { tok[n] = (n * 7 + 3) % V; tgt[n] = (n * 5 + 1) % V; }
    double *lg = sllm_malloc(N * V * sizeof(double)), *lg2 = sllm_malloc(N * V * sizeof(double));
    double nnz[2], fired[2], l1s[2];
    RefStats st = {.layer_nnz = nnz, .layer_fired = fired, .layer_l1 = l1s};
    double loss = ref_forward_backward(&m, tok, tgt, B, T, lg, NULL, &st);
    assert_close(loss, st.ce + (double)c.l1_lambda * st.l1, 1e-15);
    assert_close(st.l1, (l1s[0] + l1s[1]) / 2, 1e-15);
    assert_close(ref_cross_entropy(NULL, lg, tgt, N, V), st.ce, 1e-15);
    for (int l = 0; l < 2; l++) {
        assert_true(nnz[l] > 0 && nnz[l] < c.d_ff);       // random init: about half the units fire
        assert_true(fired[l] > 0 && fired[l] <= 1);
        assert_true(nnz[l] <= fired[l] * c.d_ff + 1e-12);  // a token cannot fire more units than fired at all
    }
    tok[T - 1] = (tok[T - 1] + 1) % V;  // change the last token of sequence 0
    ref_forward_backward(&m, tok, tgt, B, T, lg2, NULL, NULL);
    for (int n = 0; n < N; n++) {
        double diff = 0;
        for (int i = 0; i < V; i++) diff += fabs(lg[n * V + i] - lg2[n * V + i]);
        if (n == T - 1) assert_true(diff > 1e-6); else assert_close(diff, 0, 0);
    }
    free(lg); free(lg2);
    ref_model_free(&m);
}

// ---- optimizer and schedule ---------------------------------------------------------------------

static void test_adamw_hand_values(void **s) {
    (void)s;
    ModelConfig c;
    small_config(&c);
    ParamLayout lay;
    config_param_layout(&c, &lay);
    double *p = sllm_malloc(lay.total * sizeof(double)), *g = sllm_malloc(lay.total * sizeof(double));
    double *m = sllm_calloc(lay.total, sizeof(double)), *v = sllm_calloc(lay.total, sizeof(double));
    for (size_t i = 0; i < lay.total; i++) p[i] = 0.5;
    const double gs[2] = {0.2, -0.1};
    for (int step = 1; step <= 2; step++) {
        for (size_t i = 0; i < lay.total; i++) g[i] = gs[step - 1];
        ref_adamw_step(p, g, m, v, &lay, 0.1, 0.9, 0.95, 1e-8, 0.1, step);
        // Hand values (python, PyTorch AdamW formula): decayed / not decayed
        const double want_wd = step == 1 ? 0.39500000499999977 : 0.3642130618521429;
        const double want_nowd = step == 1 ? 0.40000000499999977 : 0.3731630619021429;
        for (int k = 0; k < NUM_PARAM_KINDS; k++) {
            const ParamTensor *t = &lay.t[k];
            if (!t->numel) continue;
            double want = t->weight_decay ? want_wd : want_nowd;
            assert_close(p[t->offset], want, 1e-15);
            assert_close(p[t->offset + t->numel - 1], want, 1e-15);
        }
    }
    assert_true(lay.t[PARAM_EMBED].weight_decay && lay.t[PARAM_WD].weight_decay && !lay.t[PARAM_FINAL_NORM].weight_decay);
    free(p); free(g); free(m); free(v);
}

static void test_clip_grad_norm(void **s) {
    (void)s;
    double g[3] = {3, 0, -4};
    assert_close(ref_clip_grad_norm(g, 3, 10.0), 5.0, 0);  // below the limit: unchanged
    assert_close(g[0], 3, 0); assert_close(g[2], -4, 0);
    assert_close(ref_clip_grad_norm(g, 3, 1.0), 5.0, 0);
    assert_close(g[0], 0.6, 1e-15); assert_close(g[1], 0, 0); assert_close(g[2], -0.8, 1e-15);
    assert_close(ref_clip_grad_norm(g, 3, 1.0), 1.0, 1e-15);
    double z[2] = {0, 0};
    assert_close(ref_clip_grad_norm(z, 2, 1.0), 0, 0);
    assert_close(z[0], 0, 0);
}

static void test_lr_schedule(void **s) {
    (void)s;
    // warmup 10, total 110, max 1, final 0.1
    assert_close(lr_schedule("cosine", 0, 10, 110, 1.0f, 0.1f), 0.1, 1e-7);
    assert_close(lr_schedule("cosine", 4, 10, 110, 1.0f, 0.1f), 0.5, 1e-7);
    assert_close(lr_schedule("cosine", 9, 10, 110, 1.0f, 0.1f), 1.0, 1e-7);
    assert_close(lr_schedule("cosine", 10, 10, 110, 1.0f, 0.1f), 1.0, 1e-7);
    assert_close(lr_schedule("cosine", 35, 10, 110, 1.0f, 0.1f), 0.8681980515339464, 1e-7);
    assert_close(lr_schedule("cosine", 60, 10, 110, 1.0f, 0.1f), 0.55, 1e-7);
    assert_close(lr_schedule("cosine", 110, 10, 110, 1.0f, 0.1f), 0.1, 1e-7);
    assert_close(lr_schedule("cosine", 500, 10, 110, 1.0f, 0.1f), 0.1, 1e-7);
    assert_close(lr_schedule("linear", 35, 10, 110, 1.0f, 0.1f), 0.775, 1e-7);
    assert_close(lr_schedule("linear", 60, 10, 110, 1.0f, 0.1f), 0.55, 1e-7);
    assert_close(lr_schedule("linear", 110, 10, 110, 1.0f, 0.1f), 0.1, 1e-7);
    assert_close(lr_schedule("constant", 3, 10, 110, 2.0f, 0.1f), 0.8, 1e-7);
    assert_close(lr_schedule("constant", 60, 10, 110, 2.0f, 0.1f), 2.0, 1e-7);
    assert_close(lr_schedule("constant", 500, 10, 110, 2.0f, 0.1f), 2.0, 1e-7);
    assert_close(lr_schedule("cosine", 0, 0, 100, 1e-3f, 0.0f), 1e-3, 1e-10);  // no warmup: starts at max
    assert_close(lr_schedule("cosine", 100, 0, 100, 1e-3f, 0.0f), 0.0, 0);
    char err[128];
    assert_int_equal(lr_schedule_check("cosine", 600, 10000, 1e-3f, 0.1f, err, sizeof err), 0);
    assert_int_equal(lr_schedule_check("exp", 600, 10000, 1e-3f, 0.1f, err, sizeof err), -1);
    assert_non_null(strstr(err, "unknown lr schedule 'exp'"));
    assert_int_equal(lr_schedule_check("linear", -1, 10000, 1e-3f, 0.1f, err, sizeof err), -1);
    assert_non_null(strstr(err, "warmup"));
    assert_int_equal(lr_schedule_check("linear", 1, 0, 1e-3f, 0.1f, err, sizeof err), -1);
    assert_non_null(strstr(err, "total"));
    assert_int_equal(lr_schedule_check("linear", 1, 10, 1e-3f, 1.5f, err, sizeof err), -1);
    assert_non_null(strstr(err, "final fraction"));
}

// ---- training -----------------------------------------------------------------------------------

typedef struct { double loss0, loss_end, ce_end, nnz0, nnz_end; } TrainResult;

// AdamW (lr 1e-2, betas 0.9/0.95, wd 0.1 on matrices, clip 1.0) on one fixed random batch.
static TrainResult train_fixed_batch(float l1_lambda, int steps) {
    ModelConfig c;
    small_config(&c);
    c.l1_lambda = l1_lambda;
    RefModel m;
    ref_model_init(&m, &c, 7);
    enum { B = 4, T = 8, N = B * T };
    int tok[N], tgt[N];
    Rng r;
    rng_seed(&r, 11);
    for (int n = 0; n < N; n++) { tok[n] = (int)rng_below(&r, c.vocab_size); tgt[n] = (int)rng_below(&r, c.vocab_size); }
    const size_t P = m.lay.total;
    double *g = sllm_malloc(P * sizeof(double)), *am = sllm_calloc(P, sizeof(double)), *av = sllm_calloc(P, sizeof(double));
    double nnz[2];
    RefStats st = {.layer_nnz = nnz};
    TrainResult res = {0};
    for (int step = 0; step <= steps; step++) {
        double loss = ref_forward_backward(&m, tok, tgt, B, T, NULL, step < steps ? g : NULL, &st);
        double mean_nnz = (nnz[0] + nnz[1]) / 2;
        if (step == 0) { res.loss0 = loss; res.nnz0 = mean_nnz; }
        if (step == steps) { res.loss_end = loss; res.ce_end = st.ce; res.nnz_end = mean_nnz; break; }
        ref_clip_grad_norm(g, P, 1.0);
        double lr = lr_schedule("cosine", step, 10, steps, 1e-2f, 0.1f);
        ref_adamw_step(m.params, g, am, av, &m.lay, lr, 0.9, 0.95, 1e-8, 0.1, step + 1);
    }
    free(g); free(am); free(av);
    ref_model_free(&m);
    return res;
}

static void test_overfit_one_batch(void **s) {
    (void)s;
    TrainResult r = train_fixed_batch(0.0f, 150);
    printf("overfit: loss %.4f -> %.4f (%.2f%% of start)\n", r.loss0, r.loss_end, 100 * r.loss_end / r.loss0);
    assert_true(r.loss_end < 0.1 * r.loss0);
}

static void test_l1_drives_sparsity(void **s) {
    (void)s;
    TrainResult r0 = train_fixed_batch(0.0f, 150);
    TrainResult r1 = train_fixed_batch(0.05f, 150);
    printf("lambda 0:    mean non-zeros/token %.2f -> %.2f of 32, ce %.4f\n", r0.nnz0, r0.nnz_end, r0.ce_end);
    printf("lambda 0.05: mean non-zeros/token %.2f -> %.2f of 32, ce %.4f\n", r1.nnz0, r1.nnz_end, r1.ce_end);
    assert_close(r0.nnz0, r1.nnz0, 0);          // same start
    assert_true(r1.nnz_end < 0.5 * r0.nnz_end);  // clearly sparser
    assert_true(r1.ce_end < 0.5 * r1.loss0);     // and it still learns
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rope_hand_values),
        cmocka_unit_test(test_rmsnorm_hand_values),
        cmocka_unit_test(test_attention_hand_values),
        cmocka_unit_test(test_attention_gqa_mapping_and_causality),
        cmocka_unit_test(test_ffn_hand_values),
        cmocka_unit_test(test_cross_entropy_hand_values),
        cmocka_unit_test(test_init),
        cmocka_unit_test(test_zero_model),
        cmocka_unit_test(test_model_causal_and_stats),
        cmocka_unit_test(test_adamw_hand_values),
        cmocka_unit_test(test_clip_grad_norm),
        cmocka_unit_test(test_lr_schedule),
        cmocka_unit_test(test_overfit_one_batch),
        cmocka_unit_test(test_l1_drives_sparsity),
    };
    return cmocka_run_group_tests_name("ref_model", tests, NULL, NULL);
}
