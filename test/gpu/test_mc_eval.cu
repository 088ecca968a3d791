// GPU tests of the multiple-choice evaluation's log-likelihoods (model/mc_eval_gpu.cuh) against the float64 CPU
// reference (mc_loglik_ref, model/mc_eval.h) on the same bf16-rounded weights, every choice of the shipped test file
// (test/data/mc_small.jsonl, tokenized with the tiny test tokenizer: ~20-75 tokens per choice, some cut to the
// context of 64 on the left):
// 1. the inference engine (mc_infer_create + mc_loglik_infer), FFN dense, sparse and auto: |ll - ll_ref| <=
//    1e-2 |ll_ref| + 1e-2 per choice (bf16 activations and fp32 logits; test_infer holds the engine's logits to 2e-2
//    relative), and with dense and sparse (no dispatch) the same bits on a second pass (each call independent of the
//    one before);
// 2. the trainer's model (mc_loglik_train: MODEL_LOGITS forward padded to 64 rows, bf16 logits): the same bound;
// 3. mc_score through the engine gives acc / acc_norm from those numbers (pred = argmax of the engine's ll).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model/mc_eval.h"
#include "model/mc_eval_gpu.cuh"
#include "model/ref_model.h"
#include "rng.h"
#include "gpu_harness.h"
#include "test_util.h"
extern "C" {  // after the CUDA headers: cmocka's fail() macro breaks the C++ <ios> that cub includes
#include <cmocka.h>
}

static uint64_t g_seed;

typedef struct {
    ModelConfig cfg;
    RefModel ref;
    float *pf;      // the bf16-rounded weights as fp32
    McSet set;
    double *ll_ref; // per choice, in set order
    Tokenizer *tok;
} Fixture;

static void fixture_init(Fixture *f) {
    char err[512];
    config_defaults(&f->cfg);
    f->cfg.vocab_size = 512; f->cfg.d_model = 256; f->cfg.n_layer = 2; f->cfg.n_head = 4; f->cfg.n_kv_head = 4;
    f->cfg.head_dim = 64; f->cfg.d_ff = 512; f->cfg.max_seq = 64;
    ref_model_init(&f->ref, &f->cfg, g_seed);
    for (size_t i = 0; i < f->ref.lay.total; i++) f->ref.params[i] *= 4;  // peaked distributions, not ~uniform
    for (int k = 0; k < NUM_PARAM_KINDS; k++)
        if (f->ref.lay.t[k].is_norm)
            for (size_t i = 0; i < f->ref.lay.t[k].numel; i++) f->ref.params[f->ref.lay.t[k].offset + i] = 1.0;
    f->pf = (float *)sllm_malloc(f->ref.lay.total * 4);
    ref_model_to_f32(&f->ref, f->pf);
    for (size_t i = 0; i < f->ref.lay.total; i++) f->pf[i] = sllm_round_bf16(f->pf[i]);  // both sides: bf16 weights
    ref_model_from_f32(&f->ref, f->pf);
    f->tok = tokenizer_load("test/golden/tiny_tokenizer.json", err, sizeof err);
    if (!f->tok) fail_msg("tokenizer: %s", err);
    if (mc_load("test/data/mc_small.jsonl", &f->set, err, sizeof err) != 0) fail_msg("%s", err);
    if (mc_tokenize(&f->set, f->tok, tokenizer_eot_id(f->tok), f->cfg.max_seq, err, sizeof err) != 0) fail_msg("%s", err);
    McResult r;
    McScoreOpts o = {8, 0, 1, NULL};
    if (mc_score(&f->set, mc_loglik_ref, &f->ref, &o, &r, err, sizeof err) != 0) fail_msg("%s", err);
    f->ll_ref = (double *)sllm_malloc(sizeof(double) * (size_t)f->set.n_choices);
    int idx = 0, cut = 0;
    for (int i = 0; i < f->set.n_items; i++)
        for (int k = 0; k < f->set.items[i].n_choices; k++) {
            f->ll_ref[idx++] = f->set.items[i].choices[k].ll;
            cut += f->set.items[i].choices[k].n_dropped > 0;
        }
    printf("reference: %lld choices, %d cut to the context of %d; acc %.3f acc_norm %.3f\n", f->set.n_choices, cut,
           f->cfg.max_seq, r.acc, r.acc_norm);
}

static void fixture_free(Fixture *f) {
    mc_free(&f->set);
    ref_model_free(&f->ref);
    tokenizer_free(f->tok);
    free(f->pf);
    free(f->ll_ref);
}

// Every choice through fn against the reference; returns the number of choices outside tol (relative). out: the
// values (per choice), may be NULL.
static int compare(Fixture *f, McLoglikFn fn, void *ctx, const char *what, double *out) {
    int bad = 0, idx = 0;
    double worst = 0;
    for (int i = 0; i < f->set.n_items; i++)
        for (int k = 0; k < f->set.items[i].n_choices; k++, idx++) {
            const McChoice *c = &f->set.items[i].choices[k];
            const double ll = fn(ctx, c->tokens, c->n_tokens, c->start), ref = f->ll_ref[idx];
            const double rel = fabs(ll - ref) / fmax(fabs(ref), 1e-9);
            if (out) out[idx] = ll;
            if (!(fabs(ll - ref) <= 1e-2 * fabs(ref) + 1e-2)) {
                if (bad < 5) printf("  %s: line %d choice %d: ll %.6f, reference %.6f (rel %.2e)\n", what,
                                    f->set.items[i].line, k, ll, ref, rel);
                bad++;
            }
            if (rel > worst || !isfinite(rel)) worst = isfinite(rel) ? rel : INFINITY;
        }
    printf("%s: worst |ll - ll_ref| / |ll_ref| = %.3e over %lld choices (tol 1e-2 |ll_ref| + 1e-2), %d outside\n", what, worst,
           f->set.n_choices, bad);
    return bad;
}

static void test_engine(void **state) {
    if (!cuda_device_available()) skip();
    Fixture f;
    fixture_init(&f);
    const InferFFN modes[3] = {INFER_FFN_DENSE, INFER_FFN_SPARSE, INFER_FFN_AUTO};
    int bad = 0;
    double *a = (double *)sllm_malloc(sizeof(double) * (size_t)f.set.n_choices);
    double *b = (double *)sllm_malloc(sizeof(double) * (size_t)f.set.n_choices);
    for (int k = 0; k < 3; k++) {
        Infer m;
        mc_infer_create(&m, &f.cfg, mc_max_input(&f.set), modes[k], 0);
        infer_set_params(&m, f.pf);
        char what[64];
        snprintf(what, sizeof what, "engine, FFN %s", infer_ffn_name(modes[k]));
        bad += compare(&f, mc_loglik_infer, &m, what, a);
        compare(&f, mc_loglik_infer, &m, "  second pass", b);
        for (long long i = 0; i < f.set.n_choices && modes[k] != INFER_FFN_AUTO; i++)
            if (a[i] != b[i]) { printf("  choice %lld: %.17g then %.17g\n", i, a[i], b[i]); bad++; break; }
        if (modes[k] == INFER_FFN_DENSE) {  // mc_score through the engine: preds from the engine's numbers
            McResult r;
            char err[512];
            McScoreOpts o = {1, 0, 1, NULL};
            assert_int_equal(mc_score(&f.set, mc_loglik_infer, &m, &o, &r, err, sizeof err), 0);
            int idx = 0, correct = 0;
            for (int i = 0; i < f.set.n_items; i++) {
                int p = 0;
                for (int c = 0; c < f.set.items[i].n_choices; c++)
                    if (a[idx + c] > a[idx + p]) p = c;
                assert_int_equal(f.set.items[i].pred, p);
                correct += p == f.set.items[i].label;
                idx += f.set.items[i].n_choices;
            }
            assert_int_equal(r.correct, correct);
            assert_int_equal(r.n_items, 22);
        }
        infer_free(&m);
    }
    free(a);
    free(b);
    fixture_free(&f);
    assert_int_equal(bad, 0);
}

static void test_trainer_model(void **state) {
    if (!cuda_device_available()) skip();
    Fixture f;
    fixture_init(&f);
    Model m;
    model_create(&m, &f.cfg, 1, f.cfg.max_seq, 0, 0, 0);
    params_upload(m.params, NULL, f.pf, m.lay.total, m.stream);
    McTrainCtx c;
    mc_train_ctx_init(&c, &m);
    const int bad = compare(&f, mc_loglik_train, &c, "trainer model (MODEL_LOGITS)", NULL);
    mc_train_ctx_free(&c);
    model_free(&m);
    fixture_free(&f);
    assert_int_equal(bad, 0);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_engine),
        cmocka_unit_test(test_trainer_model),
    };
    GPU_TEST_PREFLIGHT("test_mc_eval", tests);
    g_seed = gpu_test_seed("test_mc_eval");
    return cmocka_run_group_tests(tests, NULL, NULL);
}
