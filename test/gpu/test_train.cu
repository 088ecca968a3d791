// GPU tests of the whole trainer model (model/train_model.cuh) against the CPU float64 reference (model/ref_model.h),
// and of bit-exact resume of the train_gpt_relu binary.
//
// 1. One forward + backward of tiny configs (gated MHA, and non-gated GQA) on random tokens, lambda large enough
//    that the L1 gradient is of the same order as the CE gradient. The reference runs on the SAME bf16-rounded
//    weights, so only activation/gradient rounding differs. Compared: logits, CE, L1, loss, per-layer non-zeros
//    and fired fractions, and EVERY parameter gradient tensor.
//    Tolerances (relative Frobenius error, ||gpu - ref|| / ||ref||):
//      logits 2e-2: bf16 activations (2^-9 = 2e-3 relative per rounding) through ~10 roundings per layer with
//        fp32 accumulation give ~0.5-1%; any wiring bug gives O(1).
//      CE, L1, loss 1e-2 (scalars; errors average out).
//      gradients 0.12 per tensor, 0.08 over all parameters together. Why this loose: besides bf16 rounding
//        (~1-2%), the ReLU gate makes the gradient piecewise: a (token, unit) pair whose gate pre-activation is
//        within the rounding error of 0 (~0.3% of the pairs) can be on in one model and off in the other, and
//        then dg = u * dh differs by its full size there. With ~50% of pairs active that is
//        sqrt(0.003 / 0.5) ~ 8% on dWg/dWu, diluted upstream. Real bugs (a missing or mis-scaled L1 term, a
//        transposed GEMM, a wrong norm gradient) give errors of 0.3 to 1. The measured values are printed.
//      non-zeros per token: 3e-2 relative (same kink flips); fired fraction: 0.03 absolute.
//    recompute = 2 (FFN hidden and norms recomputed in backward) must give the same gradients (1e-6).
//    Gradients are poisoned with NaN before model_zero_grad (which no longer memsets them): the first backward
//    must write every element. A second micro-step without zeroing must double every gradient (1e-5).
// 2. Three AdamW steps (lr 1e-4, wd 0.1, clip 1.0, fresh tokens each step) on both sides: the master weights
//    agree per tensor to 1e-2 relative (the updates are ~1.5% of the weights; sign flips of near-zero gradients
//    move an element by at most 2 lr per step), and the update directions agree in sign for >= 90% of the
//    elements of every tensor (a bias-correction or decay bug flips or rescales most of them).
// 3. Resume: the binary trains 20 steps straight, and 10 steps + --resume + 10 steps, on a synthetic shard,
//    with gradient accumulation 2; every metrics line (loss, CE, L1, grad norm, LR, sparsity) must be identical
//    as text with 9 significant digits (i.e. the same float32 bits), on the default kernels (the attention
//    backward's dq has its own deterministic pass). Skipped when build/train_gpt_relu is missing.
// 4. Dead-unit re-initialisation with and without master weights (test_reinit_dead).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "dataloader/shard.h"
#include "model/train_model.cuh"
#include "model/ref_model.h"
#include "test_util.h"
#include "rng.h"
#include "gpu_harness.h"
extern "C" {  // after the CUDA headers: cmocka's fail() macro breaks the C++ <ios> that cub includes
#include <cmocka.h>
}

static uint64_t g_seed;
static Rng g_rng;

#define EXPECT_REL(what, e, tol)                                                                             \
    do {                                                                                                     \
        double e_ = (e);                                                                                     \
        printf("  %-28s rel err %.3e (tol %.0e)%s\n", (what), e_, (double)(tol), e_ < (tol) ? "" : "  <-- FAIL"); \
        if (!(e_ < (tol))) failures++;                                                                       \
    } while (0)

static void tiny_config(ModelConfig *c, int gated, int V, int D, int L, int H, int KVH, int F, int T, float lambda) {
    config_defaults(c);
    c->vocab_size = V; c->d_model = D; c->n_layer = L; c->n_head = H; c->n_kv_head = KVH; c->head_dim = D / H;
    c->d_ff = F; c->max_seq = T; c->gated = gated; c->l1_lambda = lambda;
}

static void random_tokens(int *x, int n, int V) {
    for (int i = 0; i < n; i++) x[i] = (int)rng_below(&g_rng, V);
}

// Forward + backward of one config; returns the number of failed checks.
static int compare_forward_backward(const ModelConfig *c, int B, int T) {
    int failures = 0;
    const int N = B * T, V = c->vocab_size, L = c->n_layer;
    printf("config: V=%d D=%d L=%d H=%d KVH=%d hd=%d F=%d gated=%d lambda=%g, B=%d T=%d\n", V, c->d_model, L,
           c->n_head, c->n_kv_head, c->head_dim, c->d_ff, c->gated, c->l1_lambda, B, T);
    RefModel rm;
    ref_model_init(&rm, c, g_seed);
    size_t total = rm.lay.total;
    float *pf = (float *)sllm_malloc(total * 4);
    ref_model_to_f32(&rm, pf);
    for (size_t i = 0; i < total; i++) pf[i] = sllm_round_bf16(pf[i]);  // both sides use the bf16 weights
    ref_model_from_f32(&rm, pf);
    int *tok = (int *)sllm_malloc(N * 4), *tgt = (int *)sllm_malloc(N * 4);
    random_tokens(tok, N, V);
    random_tokens(tgt, N, V);

    double *ref_logits = (double *)sllm_malloc((size_t)N * V * 8), *ref_grads = (double *)sllm_malloc(total * 8);
    double *lnnz = (double *)sllm_malloc(L * 8), *lfired = (double *)sllm_malloc(L * 8), *ll1 = (double *)sllm_malloc(L * 8);
    RefStats rs;
    memset(&rs, 0, sizeof rs);
    rs.layer_nnz = lnnz; rs.layer_fired = lfired; rs.layer_l1 = ll1;
    double ref_loss = ref_forward_backward(&rm, tok, tgt, B, T, ref_logits, ref_grads, &rs);

    Model m;
    model_create(&m, c, B, T, 0, 1, 0);
    model_set_params(&m, pf);
    // logits and CE (no gradient)
    cudaCheck(cudaMemset(m.scalars, 0, SC_COUNT * 4));
    model_forward(&m, tok, tgt, B, T, MODEL_LOGITS, 0.0f);
    float *lg = (float *)sllm_malloc((size_t)N * V * 4);
    cudaCheck(cudaStreamSynchronize(m.stream));
    download_bf16(lg, m.logits, (size_t)N * V);
    EXPECT_REL("logits", rel_err_f32(lg, ref_logits, (size_t)N * V), 2e-2);
    // training forward + backward. The gradients are poisoned (NaN) first: model_zero_grad does not clear them,
    // the first backward must WRITE every element (beta = 0 GEMMs, = for norm gains, first dE chunk).
    cudaCheck(cudaMemset(m.grads, 0xff, m.grad_bytes));
    model_zero_grad(&m);
    model_reset_sparsity(&m);
    model_forward(&m, tok, tgt, B, T, MODEL_TRAIN, 1.0f / N);
    model_backward(&m, (float)(c->l1_lambda / ((double)L * N)));
    ModelStepStats st;
    model_read_step(&m, &st);
    double ce = st.ce_sum / N, l1 = st.l1_sum_all / ((double)L * N), loss = ce + c->l1_lambda * l1;
    printf("  CE %.6f vs %.6f | L1 %.6f vs %.6f | loss %.6f vs %.6f (L1 share of the loss %.1f%%)\n", ce, rs.ce, l1,
           rs.l1, loss, ref_loss, 100.0 * c->l1_lambda * rs.l1 / ref_loss);
    EXPECT_REL("CE", fabs(ce - rs.ce) / rs.ce, 1e-2);
    EXPECT_REL("L1", fabs(l1 - rs.l1) / rs.l1, 1e-2);
    EXPECT_REL("loss", fabs(loss - ref_loss) / ref_loss, 1e-2);
    double *nnz = (double *)sllm_malloc(L * 8), *alive = (double *)sllm_malloc(L * 8);
    model_read_sparsity(&m, nnz, alive);
    for (int l = 0; l < L; l++) {
        printf("  layer %d: nnz/token %.2f vs %.2f, fired %.4f vs %.4f, L1 %.4f vs %.4f\n", l, nnz[l], lnnz[l], alive[l],
               lfired[l], st.l1_layer_sum[l] / N, ll1[l]);
        if (!(fabs(nnz[l] - lnnz[l]) <= 3e-2 * lnnz[l])) { printf("  <-- FAIL nnz\n"); failures++; }
        if (!(fabs(alive[l] - lfired[l]) <= 0.03)) { printf("  <-- FAIL fired\n"); failures++; }
    }
    float *g = (float *)sllm_malloc(total * 4);
    model_get_grads(&m, g);
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        const ParamTensor *t = &m.lay.t[k];
        if (t->numel == 0) continue;
        char name[64];
        snprintf(name, sizeof name, "grad %s", t->name);
        EXPECT_REL(name, rel_err_f32(g + t->offset, ref_grads + t->offset, t->numel), 0.12);
    }
    EXPECT_REL("grad (all parameters)", rel_err_f32(g, ref_grads, total), 0.08);

    // recompute = 2 gives the same gradients, bit for bit: the default path (tensor-core attention with its
    // deterministic dq pass) is deterministic.
    unsetenv("SLLM_ATTN"); unsetenv("SLLM_ATTN_BWD");
    float *g0 = (float *)sllm_malloc(total * 4), *g2 = (float *)sllm_malloc(total * 4);
    double *gd = (double *)sllm_malloc(total * 8);
    for (int rc = 0; rc <= 2; rc += 2) {
        Model m2;
        model_create(&m2, c, B, T, rc, 0, 0);
        model_set_params(&m2, pf);
        cudaCheck(cudaMemset(m2.grads, 0xff, m2.grad_bytes));  // poisoned: must be overwritten
        model_zero_grad(&m2);
        model_forward(&m2, tok, tgt, B, T, MODEL_TRAIN, 1.0f / N);
        model_backward(&m2, (float)(c->l1_lambda / ((double)L * N)));
        model_get_grads(&m2, rc == 0 ? g0 : g2);
        if (rc == 0) {
            // accumulation: a second micro-step on the same batch (no model_zero_grad) doubles every gradient
            // (beta = 1 GEMMs, += norm gains). 1e-5, not exact: cuBLASLt may pick a different algorithm for beta = 0
            // and beta = 1 (different fp32 summation order), and the embedding's two sources round once more; a
            // missing or doubled accumulation gives O(0.5).
            model_forward(&m2, tok, tgt, B, T, MODEL_TRAIN, 1.0f / N);
            model_backward(&m2, (float)(c->l1_lambda / ((double)L * N)));
            float *ga = (float *)sllm_malloc(total * 4);
            model_get_grads(&m2, ga);
            for (size_t i = 0; i < total; i++) gd[i] = 2.0 * g0[i];
            EXPECT_REL("grad accumulation (2 micro-steps)", rel_err_f32(ga, gd, total), 1e-5);
            free(ga);
        }
        model_free(&m2);
    }
    unsetenv("SLLM_ATTN");
    for (size_t i = 0; i < total; i++) gd[i] = g0[i];
    EXPECT_REL("grad recompute=2 vs 0", rel_err_f32(g2, gd, total), 1e-6);
    // fast vs simple attention: different bf16 roundings inside attention move some gates across 0 (see above)
    EXPECT_REL("grad simple vs fast attention", rel_err_f32(g, gd, total), 0.08);
    free(pf); free(tok); free(tgt); free(ref_logits); free(ref_grads); free(lnnz); free(lfired); free(ll1); free(lg);
    free(nnz); free(alive); free(g); free(g0); free(g2); free(gd);
    model_free(&m);
    ref_model_free(&rm);
    return failures;
}

static void test_forward_backward_gated(void **state) {
    if (!cuda_device_available()) skip();
    ModelConfig c;
    tiny_config(&c, 1, 512, 128, 2, 2, 2, 256, 64, 0.05f);
    assert_int_equal(compare_forward_backward(&c, 2, 64), 0);
}

static void test_forward_backward_nongated_gqa(void **state) {
    if (!cuda_device_available()) skip();
    ModelConfig c;
    tiny_config(&c, 0, 384, 128, 2, 4, 2, 192, 32, 0.05f);
    assert_int_equal(compare_forward_backward(&c, 2, 32), 0);
}

static void test_adamw_steps(void **state) {
    if (!cuda_device_available()) skip();
    int failures = 0;
    ModelConfig c;
    tiny_config(&c, 1, 512, 128, 2, 2, 2, 256, 64, 0.05f);
    const int B = 2, T = 64, N = B * T, L = c.n_layer;
    RefModel rm;
    ref_model_init(&rm, &c, g_seed + 1);
    size_t total = rm.lay.total;
    float *p0 = (float *)sllm_malloc(total * 4);
    ref_model_to_f32(&rm, p0);
    for (size_t i = 0; i < total; i++) p0[i] = sllm_round_bf16(p0[i]);
    ref_model_from_f32(&rm, p0);
    double *rg = (double *)sllm_malloc(total * 8), *rmm = (double *)sllm_calloc(total, 8), *rv = (double *)sllm_calloc(total, 8);
    Model m;
    model_create(&m, &c, B, T, 0, 1, 0);
    model_set_params(&m, p0);
    int *tok = (int *)sllm_malloc(N * 4), *tgt = (int *)sllm_malloc(N * 4);
    const float lr = 1e-4f, wd = 0.1f, clip = 1.0f;
    for (int step = 1; step <= 3; step++) {
        random_tokens(tok, N, c.vocab_size);
        random_tokens(tgt, N, c.vocab_size);
        model_zero_grad(&m);
        model_forward(&m, tok, tgt, B, T, MODEL_TRAIN, 1.0f / N);
        model_backward(&m, (float)(c.l1_lambda / ((double)L * N)));
        model_grad_norm(&m);
        AdamWParams hp = {lr, 0.9f, 0.95f, 1e-8f, wd, clip, step};
        model_adamw(&m, &hp);
        ModelStepStats st;
        model_read_step(&m, &st);
        ref_forward_backward(&rm, tok, tgt, B, T, NULL, rg, NULL);
        double rn = ref_clip_grad_norm(rg, total, clip);
        printf("  step %d: grad norm %.5f vs %.5f\n", step, st.grad_norm, rn);
        EXPECT_REL("grad norm", fabs(st.grad_norm - rn) / rn, 0.08);
        ref_adamw_step(rm.params, rg, rmm, rv, &rm.lay, lr, 0.9, 0.95, 1e-8, wd, step);
    }
    float *pw = (float *)sllm_malloc(total * 4);
    model_get_params(&m, pw);
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        const ParamTensor *t = &m.lay.t[k];
        if (t->numel == 0) continue;
        char name[64];
        snprintf(name, sizeof name, "weights %s", t->name);
        EXPECT_REL(name, rel_err_f32(pw + t->offset, rm.params + t->offset, t->numel), 1e-2);
        size_t agree = 0;
        for (size_t i = t->offset; i < t->offset + t->numel; i++) {
            double dg = pw[i] - p0[i], dr = rm.params[i] - p0[i];
            agree += (dg > 0) == (dr > 0) && (dg < 0) == (dr < 0);
        }
        double frac = (double)agree / t->numel;
        printf("  %-28s update sign agreement %.4f (need >= 0.90)\n", t->name, frac);
        if (!(frac >= 0.90)) failures++;
    }
    free(p0); free(rg); free(rmm); free(rv); free(tok); free(tgt); free(pw);
    model_free(&m);
    ref_model_free(&rm);
    assert_int_equal(failures, 0);
}

// ---- resume bit-exactness through the binary --------------------------------------------------------------
// Reads metrics.log lines, dropping the " ms:..." timing field; returns the count (lines in *out, malloc'd).
static int read_metrics(const char *path, char lines[][256], int max) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0;
    char buf[512];
    while (fgets(buf, sizeof buf, f) && n < max) {
        char *ms = strstr(buf, " ms:");
        if (ms) *ms = 0;
        buf[strcspn(buf, "\n")] = 0;
        snprintf(lines[n++], 256, "%.255s", buf);
    }
    fclose(f);
    return n;
}

static void test_resume_bit_exact(void **state) {
    if (!cuda_device_available()) skip();
    const char *bin = "build/train_gpt_relu";
    if (access(bin, X_OK) != 0) { printf("  %s not built: skipping\n", bin); skip(); }
    char dir[] = "/tmp/sllm_resume_XXXXXX";
    assert_non_null(mkdtemp(dir));
    const int V = 512;
    char shard[512], err[256];
    snprintf(shard, sizeof shard, "%s/syn_train_000000.bin", dir);
    assert_int_equal(test_write_pattern_shard(shard, 40000, V, &g_rng, err, sizeof err), 0);
    char common[2048], cmd[4096];
    snprintf(common, sizeof common,
             "%s --train %s --preset test --vocab %d --d-model 64 --heads 2 --layers 2 --d-ff 128 "
             "--max-seq 64 --batch 2 --seq 64 --total-batch 256 --steps 20 --warmup 3 --lr 3e-3 --l1 0.01 "
             "--eval-every 0 --sample-every 0 --log-stats-every 5 --ckpt-every -1",
             bin, shard, V);
    snprintf(cmd, sizeof cmd, "%s --out %s/a > %s/a.txt 2>&1", common, dir, dir);
    assert_int_equal(test_run_cmd(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s --out %s/b --stop-at 10 > %s/b1.txt 2>&1", common, dir, dir);
    assert_int_equal(test_run_cmd(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s --out %s/b --resume > %s/b2.txt 2>&1", common, dir, dir);
    assert_int_equal(test_run_cmd(cmd), 0);
    static char la[64][256], lb[64][256];
    char pa[600], pb[600];
    snprintf(pa, sizeof pa, "%s/a/metrics.log", dir);
    snprintf(pb, sizeof pb, "%s/b/metrics.log", dir);
    int na = read_metrics(pa, la, 64), nb = read_metrics(pb, lb, 64);
    printf("  straight: %d metric lines, resumed: %d\n", na, nb);
    assert_true(na >= 24);  // 20 step lines + 4 sparsity lines
    assert_int_equal(na, nb);
    int diff = 0;
    for (int i = 0; i < na; i++)
        if (strcmp(la[i], lb[i]) != 0) { printf("  DIFF\n    %s\n    %s\n", la[i], lb[i]); diff++; }
    if (!diff) printf("  all %d lines identical; first: %s\n  last: %s\n", na, la[0], la[na - 1]);
    assert_int_equal(diff, 0);
    // the loss moved (the run trained)
    double l0 = 0, l1 = 0;
    sscanf(strstr(la[0], "loss:") + 5, "%lf", &l0);
    for (int i = na - 1; i >= 0; i--) if (strstr(la[i], "loss:")) { sscanf(strstr(la[i], "loss:") + 5, "%lf", &l1); break; }
    printf("  loss %.4f -> %.4f\n", l0, l1);
    assert_true(l1 < l0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    test_run_cmd(cmd);
}

// 4. Dead-unit re-initialisation (model_reinit_dead): units 3 and 7 of layer 0 and unit 5 of layer 1 marked as not
//    fired. With the model's own state (fp32 master): exactly those Wg rows are re-drawn (std ~0.02, the bf16 weights
//    the master rounded), their m and v zeroed, every other element untouched. Without master weights (master NULL,
//    as --master none passes it): the same rows of the bf16 weights re-drawn and their moments zeroed, the master
//    buffer untouched.
static void test_reinit_dead(void **state) {
    if (!cuda_device_available()) skip();
    ModelConfig c;
    tiny_config(&c, 1, 512, 128, 2, 2, 2, 256, 64, 0.05f);
    const int L = c.n_layer, F = c.d_ff, D = c.d_model;
    Model m;
    model_create(&m, &c, 2, 64, 0, 1, 0);
    const size_t total = m.lay.total;
    float *p0 = (float *)sllm_malloc(total * 4);
    for (size_t i = 0; i < total; i++) p0[i] = sllm_round_bf16((float)(0.5 * rng_normal(&g_rng)));
    const int dead_l[3] = {0, 0, 1}, dead_f[3] = {3, 7, 5};
    for (int pass = 0; pass < 2; pass++) {  // 0: fp32 master; 1: no master weights
        model_set_params(&m, p0);
        float *ones = (float *)sllm_malloc(total * 4);
        for (size_t i = 0; i < total; i++) ones[i] = 1.0f;
        cudaCheck(cudaMemcpy(m.m, ones, total * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(m.v, ones, total * 4, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemset(m.fired, 1, (size_t)L * F));
        for (int k = 0; k < 3; k++) cudaCheck(cudaMemset(m.fired + (size_t)dead_l[k] * F + dead_f[k], 0, 1));
        int dead[2] = {-1, -1};
        const long n = pass == 0 ? model_reinit_dead(&m, 99, dead, (float *)NULL, (float *)NULL, (float *)NULL, 0, 0)
                                 : model_reinit_dead(&m, 99, dead, (float *)NULL, m.m, m.v, 0, total);
        assert_int_equal(n, 3);
        assert_int_equal(dead[0], 2);
        assert_int_equal(dead[1], 1);
        float *w = (float *)sllm_malloc(total * 4), *ma = (float *)sllm_malloc(total * 4);
        float *mm = (float *)sllm_malloc(total * 4), *vv = (float *)sllm_malloc(total * 4);
        uint16_t *wb = (uint16_t *)sllm_malloc(total * 2);
        cudaCheck(cudaMemcpy(wb, m.params, total * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < total; i++) w[i] = adamw_bf16_bits_to_float(wb[i]);
        cudaCheck(cudaMemcpy(ma, m.master, total * 4, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(mm, m.m, total * 4, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(vv, m.v, total * 4, cudaMemcpyDeviceToHost));
        size_t redrawn = 0, bad = 0;
        double ss = 0;
        for (size_t i = 0; i < total; i++) {
            int in_dead = 0;
            for (int k = 0; k < 3; k++) {
                const size_t r0 = param_offset(&m.lay, PARAM_WG, dead_l[k]) + (size_t)dead_f[k] * D;
                in_dead |= i >= r0 && i < r0 + D;
            }
            if (in_dead) {
                redrawn++;
                ss += (double)w[i] * w[i];
                bad += mm[i] != 0.0f || vv[i] != 0.0f || w[i] == p0[i];
                bad += pass == 0 ? w[i] != sllm_round_bf16(ma[i]) : ma[i] != p0[i];
            } else {
                bad += w[i] != p0[i] || mm[i] != 1.0f || vv[i] != 1.0f || ma[i] != p0[i];
            }
        }
        const double sd = sqrt(ss / redrawn);
        printf("  reinit (%s): %ld units, %zu elements re-drawn (std %.4f), %zu elements wrong\n",
               pass == 0 ? "fp32 master" : "no master weights", n, redrawn, sd, bad);
        assert_int_equal(redrawn, (size_t)3 * D);
        assert_int_equal(bad, 0);
        assert_true(sd > 0.015 && sd < 0.025);
        free(w); free(ma); free(mm); free(vv); free(wb); free(ones);
    }
    free(p0);
    model_free(&m);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_forward_backward_gated),
        cmocka_unit_test(test_forward_backward_nongated_gqa),
        cmocka_unit_test(test_adamw_steps),
        cmocka_unit_test(test_resume_bit_exact),
        cmocka_unit_test(test_reinit_dead),
    };
    GPU_TEST_PREFLIGHT("test_train", tests);
    g_seed = gpu_test_seed("test_train");
    rng_seed(&g_rng, g_seed);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
