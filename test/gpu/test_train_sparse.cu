// GPU tests of the sparse FFN path inside the trainer model (model/train_model.cuh + model/sparse_ffn.cuh): a tiny model
// trained a few AdamW steps with the FFN dense (reference: the dense path, itself tested against the float64 CPU model in
// test_train.cu) and with the FFN sparse, from the same bf16 weights and the same tokens.
//
// Shapes the twell/train_ffn kernels support: D 256, F 512 (multiples of 256). Cases:
//   1. gated, random init (about half the units fire: rows over 256 non-zeros run through the sparse FFN's dense-row
//      path, the others through the pairs), FFN forced sparse;
//   2. gated and 3. non-gated, SYNTHETIC sparsity (model/synthetic_sparsity.cuh) at ~16 non-zeros per token, forced sparse;
//   4. recompute 2 (ln2 recomputed before the sparse backward), forced sparse;
//   5. auto + ffn_lean: layer 0 sparse, layer 1 dense in a one-layer slot (gate/up recomputed in the backward);
//   6. a switch mid-run: auto, every layer dense at step 1, the dispatch (thresholds set so that it switches) turns
//      them sparse for steps 2 and 3 (WdT copies refreshed after each optimizer step).
// Every step starts both models from the same state: before steps 2 and 3 the dense model takes the sparse model's
// weights and AdamW moments (the sparse model keeps its own, so its WdT copies are the ones it refreshed after its
// update). A step's result then depends on that step's arithmetic only. Models left to drift apart over several
// AdamW updates would measure the optimizer's amplification instead: its first updates are about lr * sign(grad), so
// a gradient element within rounding of 0 moves by +-lr on one path and -+lr on the other, and the synthetic cases'
// gates sit next to 0, where that moves the non-zeros per token by percents.
// Compared per step: CE sum and L1 sum (relative 2e-3 and 1e-2), non-zeros per layer (1e-2), every gradient tensor
// (relative Frobenius error 2e-2: the same rounding points on both paths, only the fp32 summation orders and the gate
// GEMM differ, so a pair within one bf16 ulp of 0 can flip; a wiring bug gives O(1)); after each update every weight
// tensor (1e-2). The sparse model's gradients are poisoned with NaN first: its first backward must write every element.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "model/synthetic_sparsity.cuh"
#include "model/train_model.cuh"
#include "rng.h"
#include "gpu_harness.h"
extern "C" {  // after the CUDA headers: cmocka's fail() macro breaks the C++ <ios> that cub includes
#include <cmocka.h>
}

static uint64_t g_seed;

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        const double d = (double)a[i] - (double)b[i];
        num += d * d;
        den += (double)b[i] * b[i];
    }
    if (!isfinite(num)) return INFINITY;
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#define EXPECT_LT(what, e, tol)                                                                                  \
    do {                                                                                                         \
        double e_ = (e);                                                                                         \
        printf("    %-30s %.3e (tol %.0e)%s\n", (what), e_, (double)(tol), e_ < (tol) ? "" : "  <-- FAIL");       \
        if (!(e_ < (tol))) failures++;                                                                           \
    } while (0)

enum { CASE_RANDOM, CASE_SYNTH, CASE_SYNTH_NONGATED, CASE_RECOMPUTE2, CASE_LEAN_MIXED, CASE_SWITCH };

static int run_case(int which) {
    static const char *names[] = {"gated, random init, forced sparse", "gated, synthetic 16/token, forced sparse",
                                  "non-gated, synthetic 16/token, forced sparse", "recompute 2, forced sparse",
                                  "auto + lean: layer 0 sparse, layer 1 dense", "switch dense -> sparse after step 1"};
    printf("case: %s\n", names[which]);
    int failures = 0;
    ModelConfig c;
    config_defaults(&c);
    c.vocab_size = 512; c.d_model = 256; c.n_layer = 2; c.n_head = 4; c.n_kv_head = 4; c.head_dim = 64;
    c.d_ff = 512; c.max_seq = 64; c.gated = which != CASE_SYNTH_NONGATED; c.l1_lambda = 0.05f;
    const int B = 4, T = 64, N = B * T, L = c.n_layer, steps = 3;
    const int recompute = which == CASE_RECOMPUTE2 ? 2 : 0;
    Model md, ms;
    model_create(&md, &c, B, T, recompute, 1, 0);
    SparseFFNOptions fo;
    fo.mode = (which == CASE_LEAN_MIXED || which == CASE_SWITCH) ? FFN_PATH_AUTO : FFN_PATH_SPARSE;
    fo.lean = which == CASE_LEAN_MIXED;
    fo.par = sparse_dispatch_defaults(c.d_ff);
    model_create_ex(&ms, &c, B, T, recompute, 1, 0, 0, &fo);
    model_init_random(&md, g_seed);
    if (which == CASE_SYNTH || which == CASE_SYNTH_NONGATED) {
        double nz[2];
        model_synthetic_sparsity(&md, 16.0, g_seed + 5, nz, NULL);
        printf("    synthetic calibration: non-zeros/token %.1f %.1f\n", nz[0], nz[1]);
    }
    const size_t total = md.lay.total;
    float *p0 = (float *)sllm_malloc(total * 4);
    model_get_params(&md, p0);  // master weights (bf16-exact): both models start from the same bf16 weights
    model_set_params(&md, p0);
    model_set_params(&ms, p0);
    if (which == CASE_LEAN_MIXED) { ms.sp.sparse[0] = 1; ms.sp.sparse[1] = 0; }
    cudaCheck(cudaMemset(ms.grads, 0xFF, ms.grad_bytes));  // NaN: the first backward must write every gradient
    Rng rng;
    rng_seed(&rng, g_seed + 17);
    int *tok = (int *)sllm_malloc(N * 4), *tgt = (int *)sllm_malloc(N * 4);
    float *gd = (float *)sllm_malloc(total * 4), *gs = (float *)sllm_malloc(total * 4);
    float *wd = (float *)sllm_malloc(total * 4), *ws = (float *)sllm_malloc(total * 4);
    float *om = (float *)sllm_malloc(total * 4), *ov = (float *)sllm_malloc(total * 4);
    double nzd[2], nzs[2], al[2];
    for (int step = 1; step <= steps; step++) {
        if (step > 1) {  // the dense model continues from the sparse model's state (see the top of the file)
            model_get_params(&ms, ws);
            model_get_opt_state(&ms, om, ov);
            model_set_params(&md, ws);
            model_set_opt_state(&md, om, ov);
        }
        for (int i = 0; i < N; i++) { tok[i] = (int)rng_below(&rng, c.vocab_size); tgt[i] = (int)rng_below(&rng, c.vocab_size); }
        ModelStepStats st[2];
        Model *mm[2] = {&md, &ms};
        for (int k = 0; k < 2; k++) {
            Model *m = mm[k];
            model_reset_sparsity(m);
            model_zero_grad(m);
            model_forward(m, tok, tgt, B, T, MODEL_TRAIN, 1.0f / N);
            model_backward(m, (float)(c.l1_lambda / ((double)L * N)));
            model_get_grads(m, k ? gs : gd);
            model_grad_norm(m);
            AdamWParams hp = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, step};
            model_adamw(m, &hp);
            model_ffn_after_update(m);
            model_read_step(m, &st[k]);
            model_read_sparsity(m, k ? nzs : nzd, al);
        }
        printf("  step %d: layers sparse %d/%d; CE %.6f vs %.6f; L1 %.6g vs %.6g; nnz/token %.1f %.1f vs %.1f %.1f\n",
               step, sparse_ffn_num_sparse(&ms.sp), L, st[0].ce_sum / N, st[1].ce_sum / N, st[0].l1_sum_all,
               st[1].l1_sum_all, nzd[0], nzd[1], nzs[0], nzs[1]);
        const int expect_sparse = which == CASE_SWITCH ? (step == 1 ? 0 : L) : which == CASE_LEAN_MIXED ? 1 : L;
        if (sparse_ffn_num_sparse(&ms.sp) != expect_sparse) {
            printf("    layers sparse %d, expected %d  <-- FAIL\n", sparse_ffn_num_sparse(&ms.sp), expect_sparse);
            failures++;
        }
        EXPECT_LT("CE sum", fabs(st[1].ce_sum - st[0].ce_sum) / fabs(st[0].ce_sum), 2e-3);
        EXPECT_LT("L1 sum", fabs(st[1].l1_sum_all - st[0].l1_sum_all) / fabs(st[0].l1_sum_all), 1e-2);
        for (int l = 0; l < L; l++) EXPECT_LT("non-zeros/token", fabs(nzs[l] - nzd[l]) / fmax(nzd[l], 1.0 / N), 1e-2);
        for (int k = 0; k < NUM_PARAM_KINDS; k++) {
            const ParamTensor *t = &md.lay.t[k];
            if (t->numel == 0) continue;
            char nm[64];
            snprintf(nm, sizeof nm, "grad %s", t->name);
            EXPECT_LT(nm, rel_err(gs + t->offset, gd + t->offset, t->numel), 2e-2);
        }
        model_get_params(&md, wd);  // the update from the same state
        model_get_params(&ms, ws);
        for (int k = 0; k < NUM_PARAM_KINDS; k++) {
            const ParamTensor *t = &md.lay.t[k];
            if (t->numel == 0) continue;
            char nm[64];
            snprintf(nm, sizeof nm, "weights %s", t->name);
            EXPECT_LT(nm, rel_err(ws + t->offset, wd + t->offset, t->numel), 1e-2);
        }
        if (which == CASE_SWITCH && step == 1) {  // the dispatch, with thresholds that switch every layer
            ms.sp.par.on_nnz = 1e9; ms.sp.par.off_nnz = 2e9; ms.sp.par.min_dwell = 0;
            model_ffn_step_counts(&ms);
            SparseSwitch ev[2];
            const int n = model_ffn_dispatch(&ms, ev);
            printf("    dispatch: %d switch(es)\n", n);
            if (n != L) failures++;
        }
    }
    free(p0); free(tok); free(tgt); free(gd); free(gs); free(wd); free(ws); free(om); free(ov);
    model_free(&md);
    model_free(&ms);
    return failures;
}

static void test_random(void **state) { if (!cuda_device_available()) skip(); assert_int_equal(run_case(CASE_RANDOM), 0); }
static void test_synth(void **state) { if (!cuda_device_available()) skip(); assert_int_equal(run_case(CASE_SYNTH), 0); }
static void test_synth_nongated(void **state) {
    if (!cuda_device_available()) skip();
    assert_int_equal(run_case(CASE_SYNTH_NONGATED), 0);
}
static void test_recompute2(void **state) { if (!cuda_device_available()) skip(); assert_int_equal(run_case(CASE_RECOMPUTE2), 0); }
static void test_lean_mixed(void **state) { if (!cuda_device_available()) skip(); assert_int_equal(run_case(CASE_LEAN_MIXED), 0); }
static void test_switch(void **state) { if (!cuda_device_available()) skip(); assert_int_equal(run_case(CASE_SWITCH), 0); }

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_random),      cmocka_unit_test(test_synth),       cmocka_unit_test(test_synth_nongated),
        cmocka_unit_test(test_recompute2),  cmocka_unit_test(test_lean_mixed),  cmocka_unit_test(test_switch),
    };
    GPU_TEST_PREFLIGHT("test_train_sparse", tests);
    g_seed = gpu_test_seed("test_train_sparse");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
