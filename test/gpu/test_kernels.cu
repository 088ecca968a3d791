// GPU tests of the trainer's kernels (core/*.cuh) against the CPU float64 reference (model/ref_model.h) or a
// direct float64 computation, on fresh random inputs (seed printed; SLLM_TEST_SEED=<n> repeats a run).
// Output buffers are poisoned (NaN / 0xff) before each kernel, so an element that is not written fails.
//
// Error measure: rel(x, ref) = ||x - ref|| / max(||ref||, 1e-30) (Frobenius). Tolerances:
//   bf16 outputs computed in fp32 from bf16 inputs: 1e-2 (one bf16 rounding is <= 2^-9 = 2e-3 relative per
//     element; 1e-2 leaves margin, while an indexing bug gives O(1)).
//   fp32 outputs (rstd, dW of RMSNorm, embedding gradient, losses, AdamW master weights, norms): 1e-4 .. 1e-5
//     (fp32 accumulation of a few hundred terms; the reference sees the same bf16-rounded inputs).
//   Counters (non-zeros, fired units) and exact copies (embedding forward, bf16 = RN(master)): exact.
//   Determinism: kernels that promise it are run twice and compared bit for bit.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "adamw.cuh"
#include "classifier.cuh"
#include "embedding.cuh"
#include "ffn.cuh"
#include "gemv.cuh"
#include "global_norm.cuh"
#include "matmul.cuh"
#include "model/ref_model.h"
#include "test_util.h"
#include "rmsnorm.cuh"
#include "rng.h"
#include "gpu_harness.h"
#include "rope.cuh"
#include "sampler.h"

static uint64_t g_seed;
static Rng g_rng;

#define SKIP_IF_NO_GPU() do { if (!cuda_device_available()) { skip(); } } while (0)

// ---- helpers --------------------------------------------------------------------------------------------
static float *rand_bf16_values(size_t n, double scale) {  // host floats that are exact bf16 values
    float *x = (float *)sllm_malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++) x[i] = sllm_round_bf16((float)(scale * rng_normal(&g_rng)));
    return x;
}
static double *to_double(const float *x, size_t n) {
    double *d = (double *)sllm_malloc(n * sizeof(double));
    for (size_t i = 0; i < n; i++) d[i] = x[i];
    return d;
}
static bf16 *dev_bf16(const float *x, size_t n) {
    bf16 *d;
    cudaCheck(cudaMalloc((void **)&d, n * sizeof(bf16) + 16));
    upload_bf16(d, x, n);
    return d;
}
static float *dev_f32(const float *x, size_t n) {
    float *d;
    cudaCheck(cudaMalloc((void **)&d, n * sizeof(float) + 16));
    if (x) cudaCheck(cudaMemcpy(d, x, n * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}
static void poison(void *d, size_t bytes) { cudaCheck(cudaMemset(d, 0xff, bytes)); }  // NaN for bf16 and fp32
static float *get_bf16(const bf16 *d, size_t n) {
    float *h = (float *)sllm_malloc(n * sizeof(float));
    cudaCheck(cudaDeviceSynchronize());
    download_bf16(h, d, n);
    return h;
}
static float *get_f32(const float *d, size_t n) {
    float *h = (float *)sllm_malloc(n * sizeof(float));
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(h, d, n * sizeof(float), cudaMemcpyDeviceToHost));
    return h;
}
#define CHECK_REL(what, x, ref, n, tol)                                                                  \
    do {                                                                                                 \
        double e_ = rel_err_f32((x), (ref), (n));                                                            \
        printf("  %-34s rel err %.3e (tol %.0e)\n", (what), e_, (double)(tol));                          \
        if (!(e_ < (tol))) fail_msg("%s: relative error %.3e >= %.1e (seed %llu)", (what), e_, (double)(tol), \
                                    (unsigned long long)g_seed);                                         \
    } while (0)

// ---- RMSNorm --------------------------------------------------------------------------------------------
static void rmsnorm_case(int N, int D) {
    printf("rmsnorm N=%d D=%d\n", N, D);
    const float eps = 1e-5f;
    size_t n = (size_t)N * D;
    float *a = rand_bf16_values(n, 1.0), *b = rand_bf16_values(n, 0.5), *w = rand_bf16_values(D, 1.0);
    for (int i = 0; i < D; i++) w[i] = sllm_round_bf16(1.0f + 0.1f * w[i]);
    float *dy = rand_bf16_values(n, 1.0), *dres0 = rand_bf16_values(n, 1.0);
    bf16 *da = dev_bf16(a, n), *db = dev_bf16(b, n), *dw_ = dev_bf16(w, D), *ddy = dev_bf16(dy, n);
    bf16 *dout, *dres, *dsum;
    cudaCheck(cudaMalloc((void **)&dout, n * 2));
    cudaCheck(cudaMalloc((void **)&dsum, n * 2));
    dres = dev_bf16(dres0, n);
    float *drstd = dev_f32(NULL, N), *ddw = dev_f32(NULL, D), *scratch = dev_f32(NULL, rmsnorm_backward_scratch_floats(D));
    // fused forward: sum = a + b, out = rmsnorm(sum)
    poison(dout, n * 2); poison(dsum, n * 2); poison(drstd, N * 4);
    fused_residual_rmsnorm_forward(dsum, dout, drstd, da, db, dw_, N, D, eps, 0);
    float *hsum = get_bf16(dsum, n), *hout = get_bf16(dout, n), *hrstd = get_f32(drstd, N);
    double *x = (double *)sllm_malloc(n * 8), *ref = (double *)sllm_malloc(n * 8), *rr = (double *)sllm_malloc(N * 8);
    for (size_t i = 0; i < n; i++) x[i] = sllm_round_bf16(a[i] + b[i]);
    double *wd = to_double(w, D);
    CHECK_REL("fused residual sum", hsum, x, n, 1e-6);
    ref_rmsnorm_forward(ref, rr, x, wd, N, D, eps);
    CHECK_REL("rmsnorm out", hout, ref, n, 1e-2);
    CHECK_REL("rmsnorm rstd", hrstd, rr, N, 1e-5);
    // plain forward gives the same as the fused one on the summed input
    poison(dout, n * 2);
    rmsnorm_forward(dout, drstd, dsum, dw_, N, D, eps, 0);
    float *hout2 = get_bf16(dout, n);
    assert_memory_equal(hout, hout2, n * sizeof(float));
    // backward (accumulating into dres) against the reference
    cudaCheck(cudaMemset(ddw, 0, D * 4));
    rmsnorm_backward(dres, ddw, scratch, ddy, dsum, dw_, drstd, N, D, 1, 0);
    float *hdres = get_bf16(dres, n), *hdw = get_f32(ddw, D);
    double *dx = to_double(dres0, n), *dwr = (double *)sllm_calloc(D, 8), *dyd = to_double(dy, n);
    ref_rmsnorm_backward(dx, dwr, dyd, x, wd, rr, N, D);
    CHECK_REL("rmsnorm dx (+= dres)", hdres, dx, n, 1e-2);
    CHECK_REL("rmsnorm dw", hdw, dwr, D, 1e-4);
    // non-accumulating backward, run twice: bit-identical dw (deterministic reduction)
    cudaCheck(cudaMemset(ddw, 0, D * 4));
    poison(dres, n * 2);
    rmsnorm_backward(dres, ddw, scratch, ddy, dsum, dw_, drstd, N, D, 0, 0);
    float *hdw1 = get_f32(ddw, D), *hdx0 = get_bf16(dres, n);
    cudaCheck(cudaMemset(ddw, 0, D * 4));
    rmsnorm_backward(dres, ddw, scratch, ddy, dsum, dw_, drstd, N, D, 0, 0);
    float *hdw2 = get_f32(ddw, D);
    assert_memory_equal(hdw1, hdw2, D * sizeof(float));
    memset(dx, 0, n * 8);
    memset(dwr, 0, D * 8);
    ref_rmsnorm_backward(dx, dwr, dyd, x, wd, rr, N, D);
    CHECK_REL("rmsnorm dx (=)", hdx0, dx, n, 1e-2);
    // dw overwritten (accumulate_dw = 0, the first backward after model_zero_grad): poisoned dw, same bits
    poison(ddw, D * 4);
    rmsnorm_backward_ex(dres, ddw, scratch, ddy, dsum, dw_, drstd, N, D, 0, 0, 0);
    float *hdw3 = get_f32(ddw, D);
    assert_memory_equal(hdw1, hdw3, D * sizeof(float));
    free(hdw3);
    free(a); free(b); free(w); free(dy); free(dres0); free(hsum); free(hout); free(hrstd); free(x); free(ref); free(rr);
    free(wd); free(hout2); free(hdres); free(hdw); free(dx); free(dwr); free(dyd); free(hdw1); free(hdw2); free(hdx0);
    cudaFree(da); cudaFree(db); cudaFree(dw_); cudaFree(ddy); cudaFree(dout); cudaFree(dsum); cudaFree(dres);
    cudaFree(drstd); cudaFree(ddw); cudaFree(scratch);
}
static void test_rmsnorm(void **state) {
    SKIP_IF_NO_GPU();
    rmsnorm_case(1, 8);
    rmsnorm_case(37, 136);    // D not a multiple of 64 or 256
    rmsnorm_case(300, 2048);  // the paper's width, rows not a multiple of the block's 4
    rmsnorm_case(4, 2048);    // decoding rows: the one-CTA-per-row kernel (as (1, 8) and (37, 136))
    rmsnorm_case(64, 8192);   // its largest rows and row count
    rmsnorm_case(65, 2048);   // one row more: the warp-per-row kernel
}

// ---- RoPE -----------------------------------------------------------------------------------------------
static void rope_case(int B, int T, int nh, int hd, double theta) {
    printf("rope B=%d T=%d nh=%d hd=%d theta=%g\n", B, T, nh, hd, theta);
    size_t n = (size_t)B * T * nh * hd;
    float *x = rand_bf16_values(n, 1.0);
    float *tab = (float *)sllm_malloc((size_t)T * hd * 4);
    rope_build_table(tab, T, hd, theta);
    float *dtab = dev_f32(tab, (size_t)T * hd);
    bf16 *dx = dev_bf16(x, n);
    rope_forward(dx, dtab, B * T, T, nh, hd, 0);
    float *hy = get_bf16(dx, n);
    double *ref = to_double(x, n);
    ref_rope_forward(ref, B, T, nh, hd, theta);
    CHECK_REL("rope forward", hy, ref, n, 1e-2);
    upload_bf16(dx, x, n);
    rope_backward(dx, dtab, B * T, T, nh, hd, 0);
    float *hb = get_bf16(dx, n);
    double *refb = to_double(x, n);
    ref_rope_backward(refb, B, T, nh, hd, theta);
    CHECK_REL("rope backward", hb, refb, n, 1e-2);
    free(x); free(tab); free(hy); free(ref); free(hb); free(refb);
    cudaFree(dtab); cudaFree(dx);
}
// q and k (different head counts, GQA) in one launch: same bits as two separate launches, and the reference.
static void rope_qk_case(int B, int T, int nhq, int nhk, int hd) {
    printf("rope q+k in one launch B=%d T=%d nhq=%d nhk=%d hd=%d\n", B, T, nhq, nhk, hd);
    const double theta = 100000.0;
    size_t nq = (size_t)B * T * nhq * hd, nk = (size_t)B * T * nhk * hd;
    float *x = rand_bf16_values(nq + nk, 1.0);
    float *tab = (float *)sllm_malloc((size_t)T * hd * 4);
    rope_build_table(tab, T, hd, theta);
    float *dtab = dev_f32(tab, (size_t)T * hd);
    bf16 *d = dev_bf16(x, nq + nk), *d2 = dev_bf16(x, nq + nk);  // q then k, as in the model's qkv buffer
    for (int dir = 0; dir < 2; dir++) {
        upload_bf16(d, x, nq + nk);
        upload_bf16(d2, x, nq + nk);
        if (dir == 0) {
            rope_forward_qk(d, nhq, d + nq, nhk, dtab, B * T, T, hd, 0);
            rope_forward(d2, dtab, B * T, T, nhq, hd, 0);
            rope_forward(d2 + nq, dtab, B * T, T, nhk, hd, 0);
        } else {
            rope_backward_qk(d, nhq, d + nq, nhk, dtab, B * T, T, hd, 0);
            rope_backward(d2, dtab, B * T, T, nhq, hd, 0);
            rope_backward(d2 + nq, dtab, B * T, T, nhk, hd, 0);
        }
        float *h = get_bf16(d, nq + nk), *h2 = get_bf16(d2, nq + nk);
        assert_memory_equal(h, h2, (nq + nk) * sizeof(float));
        double *rq = to_double(x, nq), *rk = to_double(x + nq, nk);
        if (dir == 0) { ref_rope_forward(rq, B, T, nhq, hd, theta); ref_rope_forward(rk, B, T, nhk, hd, theta); }
        else { ref_rope_backward(rq, B, T, nhq, hd, theta); ref_rope_backward(rk, B, T, nhk, hd, theta); }
        CHECK_REL(dir ? "rope qk backward: q" : "rope qk forward: q", h, rq, nq, 1e-2);
        CHECK_REL(dir ? "rope qk backward: k" : "rope qk forward: k", h + nq, rk, nk, 1e-2);
        free(h); free(h2); free(rq); free(rk);
    }
    free(x); free(tab);
    cudaFree(dtab); cudaFree(d); cudaFree(d2);
}
static void test_rope(void **state) {
    SKIP_IF_NO_GPU();
    rope_case(1, 1, 1, 8, 10000.0);      // scalar kernel (hd % 16 != 0)
    rope_case(2, 37, 3, 64, 100000.0);   // vectorized kernel
    rope_case(1, 2048, 2, 128, 100000.0);  // long positions: table in fp32 from double angles
    rope_case(1, 5, 3, 24, 10000.0);     // hd 24: scalar kernel
    rope_qk_case(2, 33, 4, 2, 64);       // GQA, vectorized
    rope_qk_case(1, 17, 3, 3, 32);       // MHA, vectorized
    rope_qk_case(2, 9, 2, 1, 8);         // scalar fallback for both
}

// ---- embedding ------------------------------------------------------------------------------------------
static void test_embedding(void **state) {
    SKIP_IF_NO_GPU();
    const int V = 97, D = 48, N = 300;
    printf("embedding V=%d D=%d N=%d (many repeats)\n", V, D, N);
    float *E = rand_bf16_values((size_t)V * D, 0.02), *dout = rand_bf16_values((size_t)N * D, 1.0);
    int *tok = (int *)sllm_malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) tok[i] = i < 40 ? 5 : (int)rng_below(&g_rng, i % 3 ? 20 : V);  // heavy bucket + spread
    tok[N - 1] = V - 1;
    bf16 *dE = dev_bf16(E, (size_t)V * D), *dd = dev_bf16(dout, (size_t)N * D), *dout_fwd;
    cudaCheck(cudaMalloc((void **)&dout_fwd, (size_t)N * D * 2));
    int *dtok;
    cudaCheck(cudaMalloc((void **)&dtok, N * sizeof(int)));
    cudaCheck(cudaMemcpy(dtok, tok, N * sizeof(int), cudaMemcpyHostToDevice));
    poison(dout_fwd, (size_t)N * D * 2);
    embedding_forward(dout_fwd, dtok, dE, N, D, 0);
    float *h = get_bf16(dout_fwd, (size_t)N * D);
    for (int i = 0; i < N; i++) assert_memory_equal(h + (size_t)i * D, E + (size_t)tok[i] * D, D * sizeof(float));
    // backward
    int *table = (int *)sllm_malloc((3 * N + 2) * sizeof(int));
    uint64_t *pairs = (uint64_t *)sllm_malloc(N * sizeof(uint64_t));
    int used = embedding_build_buckets(table, pairs, tok, N);
    int *dtable;
    cudaCheck(cudaMalloc((void **)&dtable, used * sizeof(int)));
    cudaCheck(cudaMemcpy(dtable, table, used * sizeof(int), cudaMemcpyHostToDevice));
    float *init = rand_bf16_values((size_t)V * D, 0.1);
    float *dgrad = dev_f32(init, (size_t)V * D);
    embedding_backward(dgrad, dd, dtable, table[0], D, 0);
    float *hg = get_f32(dgrad, (size_t)V * D);
    double *ref = to_double(init, (size_t)V * D), *doutd = to_double(dout, (size_t)N * D);
    ref_embedding_backward(ref, doutd, tok, N, D);
    CHECK_REL("embedding backward", hg, ref, (size_t)V * D, 1e-5);
    // deterministic: a second run from the same start gives the same bits
    cudaCheck(cudaMemcpy(dgrad, init, (size_t)V * D * 4, cudaMemcpyHostToDevice));
    embedding_backward(dgrad, dd, dtable, table[0], D, 0);
    float *hg2 = get_f32(dgrad, (size_t)V * D);
    assert_memory_equal(hg, hg2, (size_t)V * D * sizeof(float));
    free(E); free(dout); free(tok); free(h); free(table); free(pairs); free(init); free(hg); free(hg2); free(ref);
    free(doutd);
    cudaFree(dE); cudaFree(dd); cudaFree(dout_fwd); cudaFree(dtok); cudaFree(dtable); cudaFree(dgrad);
}

// Bucket table: ids ascending and distinct, every position once, positions ascending inside a bucket and
// holding that token; token ids above 2^11 and 2^22 exercise the radix passes.
static void buckets_case(int N, int V) {
    printf("embedding buckets N=%d V=%d\n", N, V);
    int *tok = (int *)sllm_malloc((N > 0 ? N : 1) * sizeof(int));
    for (int i = 0; i < N; i++) tok[i] = (int)rng_below(&g_rng, i % 4 ? 50 : V);  // repeats + spread
    if (N > 2) { tok[0] = V - 1; tok[N - 1] = 0; }
    int *table = (int *)sllm_malloc((3 * N + 2) * sizeof(int));
    uint64_t *pairs = (uint64_t *)sllm_malloc((N > 0 ? N : 1) * sizeof(uint64_t));
    int used = embedding_build_buckets(table, pairs, tok, N);
    int U = table[0];
    assert_int_equal(used, 2 + 2 * U + N);
    const int *ids = table + 1, *offs = table + 1 + U, *pos = table + 2 + 2 * U;
    uint8_t *seen = (uint8_t *)sllm_calloc(N > 0 ? N : 1, 1);
    assert_int_equal(offs[0], 0);
    assert_int_equal(offs[U], N);
    for (int u = 0; u < U; u++) {
        if (u > 0) assert_true(ids[u] > ids[u - 1]);
        assert_true(offs[u + 1] > offs[u]);
        for (int p = offs[u]; p < offs[u + 1]; p++) {
            assert_true(pos[p] >= 0 && pos[p] < N);
            assert_int_equal(tok[pos[p]], ids[u]);
            assert_false(seen[pos[p]]);
            seen[pos[p]] = 1;
            if (p > offs[u]) assert_true(pos[p] > pos[p - 1]);
        }
    }
    for (int i = 0; i < N; i++) assert_true(seen[i]);
    free(tok); free(table); free(pairs); free(seen);
}
static void test_buckets(void **state) {
    (void)state;  // host code: runs without a GPU too
    buckets_case(0, 10);
    buckets_case(1, 10);
    buckets_case(300, 97);
    buckets_case(8192, 49152);
    buckets_case(5000, 1 << 24);
}

// ---- fused classifier -----------------------------------------------------------------------------------
static void classifier_case(int N, int V, int with_ignore) {
    printf("classifier N=%d V=%d ignore=%d\n", N, V, with_ignore);
    size_t n = (size_t)N * V;
    float *lg = rand_bf16_values(n, 3.0);
    int *tg = (int *)sllm_malloc(N * sizeof(int));
    for (int i = 0; i < N; i++) tg[i] = (int)rng_below(&g_rng, V);
    tg[0] = 0;
    tg[N - 1] = V - 1;
    if (with_ignore) tg[N / 2] = -1;
    bf16 *dl = dev_bf16(lg, n);
    float *dloss = dev_f32(NULL, N);
    int *dtg;
    cudaCheck(cudaMalloc((void **)&dtg, N * sizeof(int)));
    cudaCheck(cudaMemcpy(dtg, tg, N * sizeof(int), cudaMemcpyHostToDevice));
    const float scale = 1.0f / (float)(N * 3);  // as with 3 accumulation steps
    // loss only: logits untouched
    poison(dloss, N * 4);
    fused_classifier(dl, dloss, dtg, N, V, scale, 0, 0);
    float *hl0 = get_f32(dloss, N), *hlg = get_bf16(dl, n);
    assert_memory_equal(hlg, lg, n * sizeof(float));
    // with gradient
    poison(dloss, N * 4);
    fused_classifier(dl, dloss, dtg, N, V, scale, 1, 0);
    float *hl = get_f32(dloss, N), *hg = get_bf16(dl, n);
    assert_memory_equal(hl0, hl, N * sizeof(float));
    double *ref_loss = (double *)sllm_malloc(N * 8), *ref_g = (double *)sllm_malloc(n * 8);
    for (int r = 0; r < N; r++) {
        const float *x = lg + (size_t)r * V;
        double mx = -INFINITY, s = 0;
        for (int i = 0; i < V; i++) mx = fmax(mx, x[i]);
        for (int i = 0; i < V; i++) s += exp(x[i] - mx);
        double lse = mx + log(s);
        ref_loss[r] = tg[r] < 0 ? 0.0 : lse - x[tg[r]];
        for (int i = 0; i < V; i++)
            ref_g[(size_t)r * V + i] = tg[r] < 0 ? 0.0 : scale * (exp(x[i] - lse) - (i == tg[r]));
    }
    CHECK_REL("per-token CE", hl, ref_loss, N, 1e-5);
    CHECK_REL("dlogits", hg, ref_g, n, 1e-2);
    if (with_ignore)
        for (int i = 0; i < V; i++) assert_true(hg[(size_t)(N / 2) * V + i] == 0.0f);
    // the mean CE matches ref_cross_entropy (on rows with real targets)
    if (!with_ignore) {
        double *lgd = to_double(lg, n);
        double ce = ref_cross_entropy(NULL, lgd, tg, N, V), s = 0;
        for (int i = 0; i < N; i++) s += hl[i];
        printf("  mean CE %.6f vs ref %.6f\n", s / N, ce);
        assert_true(fabs(s / N - ce) < 1e-4 * fmax(1.0, fabs(ce)));
        free(lgd);
    }
    free(lg); free(tg); free(hl0); free(hlg); free(hl); free(hg); free(ref_loss); free(ref_g);
    cudaFree(dl); cudaFree(dloss); cudaFree(dtg);
}
static void test_classifier(void **state) {
    SKIP_IF_NO_GPU();
    classifier_case(5, 512, 0);
    classifier_case(7, 1001, 1);   // V not a multiple of 8: scalar path
    classifier_case(3, 50304, 1);  // GPT-2 padded vocab
}

// ---- FFN element-wise -----------------------------------------------------------------------------------
static void ffn_case(int N, int F, int gated, int special) {
    printf("ffn N=%d F=%d gated=%d special=%d\n", N, F, gated, special);
    int G = gated ? 2 : 1;
    size_t n = (size_t)N * F;
    float *gu = rand_bf16_values(G * n, 1.0), *dh = rand_bf16_values(n, 1.0);
    if (special) {  // exact zeros, an all-negative row, an all-positive row
        for (int f = 0; f < F; f++) { gu[f] = -fabsf(gu[f]) - 0.01f; gu[(size_t)F + f] = fabsf(gu[(size_t)F + f]) + 0.01f; }
        for (size_t i = 0; i < n; i += 7) gu[i] = 0.0f;
        if (gated) for (size_t i = 3; i < n; i += 11) gu[n + i] = 0.0f;
        for (size_t i = 0; i < G * n; i++) gu[i] = sllm_round_bf16(gu[i]);
    }
    bf16 *dgu = dev_bf16(gu, G * n), *ddh = dev_bf16(dh, n), *dhid;
    cudaCheck(cudaMalloc((void **)&dhid, n * 2));
    float *l1p = dev_f32(NULL, FFN_STAT_BLOCKS);
    unsigned long long *dnnz;
    uint8_t *dfired;
    cudaCheck(cudaMalloc((void **)&dnnz, 8));
    cudaCheck(cudaMalloc((void **)&dfired, F));
    cudaCheck(cudaMemset(l1p, 0, FFN_STAT_BLOCKS * 4));
    cudaCheck(cudaMemset(dnnz, 0, 8));
    cudaCheck(cudaMemset(dfired, 0, F));
    poison(dhid, n * 2);
    ffn_forward(dhid, dgu, N, F, gated, l1p, dnnz, dfired, 0);
    float *hh = get_bf16(dhid, n), *hp = get_f32(l1p, FFN_STAT_BLOCKS);
    unsigned long long hn;
    uint8_t *hf = (uint8_t *)sllm_malloc(F);
    cudaCheck(cudaMemcpy(&hn, dnnz, 8, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(hf, dfired, F, cudaMemcpyDeviceToHost));
    double *rh = (double *)sllm_malloc(n * 8), l1 = 0, gl1 = 0;
    unsigned long long rn = 0;
    uint8_t *rf = (uint8_t *)sllm_calloc(F, 1);
    const float *g = gu, *u = gated ? gu + n : gu;
    for (size_t i = 0; i < n; i++) {
        int on = g[i] > 0;
        rh[i] = gated ? (on ? (double)g[i] * u[i] : 0.0) : (on ? (double)g[i] : 0.0);
        l1 += fabs(rh[i]);
        rn += on;
        if (on) rf[i % F] = 1;
    }
    for (int b = 0; b < FFN_STAT_BLOCKS; b++) gl1 += hp[b];
    CHECK_REL("ffn h", hh, rh, n, 1e-2);
    printf("  L1 %.6f vs ref %.6f; nnz %llu vs %llu\n", gl1, l1, hn, rn);
    assert_true(fabs(gl1 - l1) <= 1e-5 * fmax(l1, 1e-30) + 1e-30);
    assert_true(hn == rn);
    assert_memory_equal(hf, rf, F);
    // no-stats variant writes the same h
    poison(dhid, n * 2);
    ffn_forward(dhid, dgu, N, F, gated, NULL, NULL, NULL, 0);
    float *hh2 = get_bf16(dhid, n);
    assert_memory_equal(hh, hh2, n * sizeof(float));
    // backward with the L1 term (in place over gu)
    const float l1_coef = 0.37f;
    ffn_backward(dgu, ddh, dgu, N, F, gated, l1_coef, 0);
    float *hd = get_bf16(dgu, G * n);
    double *rd = (double *)sllm_malloc(G * n * 8);
    for (size_t i = 0; i < n; i++) {
        int on = g[i] > 0;
        if (gated) {
            double s = on ? (u[i] > 0 ? 1.0 : (u[i] < 0 ? -1.0 : 0.0)) : 0.0;
            double d = dh[i] + l1_coef * s;
            rd[i] = on ? d * u[i] : 0.0;
            rd[n + i] = on ? d * g[i] : 0.0;
        } else {
            rd[i] = on ? dh[i] + l1_coef : 0.0;
        }
    }
    CHECK_REL("ffn dgate/dup", hd, rd, G * n, 1e-2);
    for (size_t i = 0; i < n; i++)
        if (!(g[i] > 0)) { assert_true(hd[i] == 0.0f); if (gated) assert_true(hd[n + i] == 0.0f); }
    free(gu); free(dh); free(hh); free(hp); free(hf); free(rh); free(rf); free(hh2); free(hd); free(rd);
    cudaFree(dgu); cudaFree(ddh); cudaFree(dhid); cudaFree(l1p); cudaFree(dnnz); cudaFree(dfired);
}
static void test_ffn(void **state) {
    SKIP_IF_NO_GPU();
    ffn_case(3, 8, 1, 1);
    ffn_case(129, 704, 1, 1);
    ffn_case(129, 704, 0, 1);
    ffn_case(2048, 5632, 1, 0);  // more elements than one pass of the fixed grid
}

// ---- AdamW + global norm --------------------------------------------------------------------------------
static void test_adamw_and_norm(void **state) {
    SKIP_IF_NO_GPU();
    ModelConfig c;
    config_from_preset("test", &c);
    ParamLayout lay;
    config_param_layout(&c, &lay);
    size_t n = lay.total;
    printf("adamw + global norm over the 'test' preset layout, %zu params\n", n);
    float *p = (float *)sllm_malloc(n * 4);
    for (size_t i = 0; i < n; i++) p[i] = (float)(0.02 * rng_normal(&g_rng));
    double *pr = to_double(p, n), *mr = (double *)sllm_calloc(n, 8), *vr = (double *)sllm_calloc(n, 8);
    float *dmaster = dev_f32(p, n), *dm = dev_f32(NULL, n), *dv = dev_f32(NULL, n), *dg = dev_f32(NULL, n);
    float *dnorm = dev_f32(NULL, 1), *dpart = dev_f32(NULL, GLOBAL_NORM_BLOCKS);
    cudaCheck(cudaMemset(dm, 0, n * 4));
    cudaCheck(cudaMemset(dv, 0, n * 4));
    bf16 *dp;
    cudaCheck(cudaMalloc((void **)&dp, n * 2));
    AdamWParams hp = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0};
    for (int step = 1; step <= 4; step++) {
        float *g = (float *)sllm_malloc(n * 4);
        double gs = step == 2 ? 1e-3 : 0.5;  // step 2: below the clip, others: clipped
        for (size_t i = 0; i < n; i++) g[i] = (float)(gs * rng_normal(&g_rng) / sqrt((double)n) * 4);
        cudaCheck(cudaMemcpy(dg, g, n * 4, cudaMemcpyHostToDevice));
        global_norm(dnorm, dpart, dg, n, 0);
        float gn, gn2;
        cudaCheck(cudaMemcpy(&gn, dnorm, 4, cudaMemcpyDeviceToHost));
        global_norm(dnorm, dpart, dg, n, 0);
        cudaCheck(cudaMemcpy(&gn2, dnorm, 4, cudaMemcpyDeviceToHost));
        assert_memory_equal(&gn, &gn2, 4);  // deterministic
        double *gd = to_double(g, n);
        double rn = ref_clip_grad_norm(gd, n, hp.max_norm);
        printf("  step %d: norm %.7f vs ref %.7f\n", step, gn, rn);
        assert_true(fabs(gn - rn) < 1e-5 * rn);
        hp.step = step;
        for (int k = 0; k < NUM_PARAM_KINDS; k++) {
            const ParamTensor *t = &lay.t[k];
            adamw_update(dp + t->offset, dmaster + t->offset, dm + t->offset, dv + t->offset, dg + t->offset, t->numel,
                         &hp, t->weight_decay ? hp.weight_decay : 0.0f, dnorm, 0);
        }
        ref_adamw_step(pr, gd, mr, vr, &lay, hp.lr, hp.beta1, hp.beta2, hp.eps, hp.weight_decay, step);
        free(g); free(gd);
    }
    float *hm = get_f32(dmaster, n), *hb = get_bf16(dp, n);
    CHECK_REL("adamw master weights", hm, pr, n, 1e-5);
    double *upd = (double *)sllm_malloc(n * 8);
    float *hupd = (float *)sllm_malloc(n * 4);
    for (size_t i = 0; i < n; i++) { upd[i] = pr[i] - p[i]; hupd[i] = hm[i] - p[i]; }
    CHECK_REL("adamw total update", hupd, upd, n, 1e-3);
    for (size_t i = 0; i < n; i++) assert_true(hb[i] == sllm_round_bf16(hm[i]));  // bf16 = RN(master)
    // multi-tensor AdamW (one launch over the flat buffer, 16-byte accesses): the same bits as per tensor
    {
        float *mm0 = get_f32(dm, n), *vv0 = get_f32(dv, n);
        float *g = (float *)sllm_malloc(n * 4);
        for (size_t i = 0; i < n; i++) g[i] = (float)(0.3 * rng_normal(&g_rng) / sqrt((double)n) * 4);
        cudaCheck(cudaMemcpy(dg, g, n * 4, cudaMemcpyHostToDevice));
        global_norm(dnorm, dpart, dg, n, 0);
        float *dmaster2 = dev_f32(hm, n), *dm2 = dev_f32(mm0, n), *dv2 = dev_f32(vv0, n);
        bf16 *dp2;
        cudaCheck(cudaMalloc((void **)&dp2, n * 2));
        poison(dp2, n * 2);
        hp.step = 5;
        AdamWSegments seg;
        memset(&seg, 0, sizeof seg);
        for (int k = 0; k < NUM_PARAM_KINDS; k++) {
            const ParamTensor *t = &lay.t[k];
            if (t->numel == 0) continue;
            adamw_update(dp + t->offset, dmaster + t->offset, dm + t->offset, dv + t->offset, dg + t->offset, t->numel,
                         &hp, t->weight_decay ? hp.weight_decay : 0.0f, dnorm, 0);
            seg.end[seg.count] = t->offset + t->numel;
            seg.wd[seg.count++] = t->weight_decay ? hp.weight_decay : 0.0f;
        }
        adamw_update_multi(dp2, dmaster2, dm2, dv2, dg, &seg, &hp, dnorm, 0);
        float *a1 = get_f32(dmaster, n), *a2 = get_f32(dmaster2, n), *b1 = get_f32(dm, n), *b2 = get_f32(dm2, n);
        float *c1 = get_f32(dv, n), *c2 = get_f32(dv2, n), *p1 = get_bf16(dp, n), *p2 = get_bf16(dp2, n);
        printf("  multi-tensor AdamW vs per-tensor: bit-exact check of master, m, v, bf16 params (%d segments)\n",
               seg.count);
        assert_memory_equal(a1, a2, n * 4);
        assert_memory_equal(b1, b2, n * 4);
        assert_memory_equal(c1, c2, n * 4);
        assert_memory_equal(p1, p2, n * 4);
        free(mm0); free(vv0); free(g); free(a1); free(a2); free(b1); free(b2); free(c1); free(c2); free(p1); free(p2);
        cudaFree(dmaster2); cudaFree(dm2); cudaFree(dv2); cudaFree(dp2);
    }
    free(p); free(pr); free(mr); free(vr); free(hm); free(hb); free(upd); free(hupd);
    cudaFree(dmaster); cudaFree(dm); cudaFree(dv); cudaFree(dg); cudaFree(dnorm); cudaFree(dpart); cudaFree(dp);
}

// ---- AdamW against closed-form values ----------------------------------------------------------------------
// With the same gradient g at every step, bias correction makes mhat = g and vhat = g^2 exactly, so each step is
//   p <- p (1 - lr wd) - lr g / (|g| + eps)
// (the PyTorch AdamW formula), computed here in double, independently of both the kernels and ref_adamw_step.
// A doubled learning rate, a missing bias correction, a missing or misplaced weight decay, or a clip applied
// with no norm each move p by far more than the float tolerance. Per-tensor (half with decay, half without) and
// multi-tensor (two segments) kernels, 6 steps.
static void test_adamw_closed_form(void **state) {
    SKIP_IF_NO_GPU();
    const size_t n = 4096, half = n / 2;
    const int steps = 6;
    AdamWParams hp = {3e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f, 0};  // max_norm 0: no clipping
    float *p0 = (float *)sllm_malloc(n * 4), *g = (float *)sllm_malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        p0[i] = (float)(0.5 * rng_normal(&g_rng));
        g[i] = (float)((i % 3 == 0 ? -1.0 : 1.0) * (0.01 + 0.5 * rng_uniform(&g_rng)));
    }
    double *want = (double *)sllm_malloc(n * 8);
    for (size_t i = 0; i < n; i++) want[i] = p0[i];
    for (int t = 1; t <= steps; t++)
        for (size_t i = 0; i < n; i++) {
            double wd = i < half ? hp.weight_decay : 0.0, gi = g[i];
            want[i] = want[i] * (1.0 - (double)hp.lr * wd) - (double)hp.lr * gi / (fabs(gi) + (double)hp.eps);
        }
    for (int multi = 0; multi < 2; multi++) {
        float *dmaster = dev_f32(p0, n), *dm = dev_f32(NULL, n), *dv = dev_f32(NULL, n), *dg = dev_f32(g, n);
        cudaCheck(cudaMemset(dm, 0, n * 4));
        cudaCheck(cudaMemset(dv, 0, n * 4));
        bf16 *dp;
        cudaCheck(cudaMalloc((void **)&dp, n * 2));
        AdamWSegments seg;
        memset(&seg, 0, sizeof seg);
        seg.count = 2; seg.end[0] = half; seg.wd[0] = hp.weight_decay; seg.end[1] = n; seg.wd[1] = 0.0f;
        for (int t = 1; t <= steps; t++) {
            hp.step = t;
            if (multi) adamw_update_multi(dp, dmaster, dm, dv, dg, &seg, &hp, NULL, 0);
            else {
                adamw_update(dp, dmaster, dm, dv, dg, half, &hp, hp.weight_decay, NULL, 0);
                adamw_update(dp + half, dmaster + half, dm + half, dv + half, dg + half, n - half, &hp, 0.0f, NULL, 0);
            }
        }
        float *hm = get_f32(dmaster, n), *hp16 = get_bf16(dp, n);
        double worst = 0;
        size_t wi = 0;
        for (size_t i = 0; i < n; i++) {
            double e = fabs(hm[i] - want[i]);
            if (!(e <= worst)) { worst = e; wi = i; }
        }
        printf("  %s AdamW, %d steps: max |master - closed form| = %.3g at %zu (%.9g vs %.9g)\n",
               multi ? "multi-tensor" : "per-tensor", steps, worst, wi, hm[wi], want[wi]);
        assert_true(worst < 2e-6);  // float rounding of 6 updates of p ~ 1; one wrong term is >= 1e-4
        for (size_t i = 0; i < n; i++) assert_true(hp16[i] == sllm_round_bf16(hm[i]));
        free(hm); free(hp16);
        cudaFree(dmaster); cudaFree(dm); cudaFree(dv); cudaFree(dg); cudaFree(dp);
    }
    free(p0); free(g); free(want);
}

// ---- AdamW with bf16 moments (stochastic rounding) -----------------------------------------------------------
// 1. One step from random bf16 moments, against a host reference of the same formula with the same rounding hash:
//    master within float rounding, each stored moment one of the two bf16 neighbours of the reference's fp32 value
//    and (bar an FMA-contraction flip) the very one the hash picks. Per-tensor and multi-tensor kernels give the
//    same bits, with a non-zero global index base.
// 2. No stall: v from 1.0 with g = 0 and beta2 0.999 for 300 steps must decay to 0.999^300 = 0.7407 on average
//    (round-to-nearest would keep every v at 1.0: 0.999 rounds back to 1 in bf16).
static void test_adamw_bf16_moments(void **state) {
    SKIP_IF_NO_GPU();
    const size_t n = 8192, half = 4000;  // two segments; half % 4 == 0
    const uint64_t base = 123456;        // global index of element 0
    AdamWParams hp = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f, 7};
    float *p0 = (float *)sllm_malloc(n * 4), *g = (float *)sllm_malloc(n * 4);
    uint16_t *m0 = (uint16_t *)sllm_malloc(n * 2), *v0 = (uint16_t *)sllm_malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        p0[i] = (float)(0.3 * rng_normal(&g_rng));
        g[i] = (float)(0.05 * rng_normal(&g_rng));
        const float mf = (float)(0.01 * rng_normal(&g_rng)), vf = (float)(1e-4 * (0.1 + rng_uniform(&g_rng)));
        bf16 mb = __float2bfloat16_rn(mf), vb = __float2bfloat16_rn(vf);
        memcpy(&m0[i], &mb, 2);
        memcpy(&v0[i], &vb, 2);
    }
    // host reference (float, the kernel's formula and order)
    const float bc1 = 1.0f - powf(hp.beta1, (float)hp.step), bc2 = 1.0f - powf(hp.beta2, (float)hp.step);
    float *wp = (float *)sllm_malloc(n * 4), *wm = (float *)sllm_malloc(n * 4), *wv = (float *)sllm_malloc(n * 4);
    uint16_t *wmb = (uint16_t *)sllm_malloc(n * 2), *wvb = (uint16_t *)sllm_malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        const float wd = i < half ? hp.weight_decay : 0.0f;
        float mi = hp.beta1 * adamw_bf16_bits_to_float(m0[i]) + (1.0f - hp.beta1) * g[i];
        float vi = hp.beta2 * adamw_bf16_bits_to_float(v0[i]) + (1.0f - hp.beta2) * g[i] * g[i];
        wp[i] = p0[i] - hp.lr * ((mi / bc1) / (sqrtf(vi / bc2) + hp.eps) + wd * p0[i]);
        wm[i] = mi;
        wv[i] = vi;
        wmb[i] = adamw_sr_bf16_bits(mi, adamw_sr_hash((uint32_t)hp.step, base + i, 0));
        wvb[i] = adamw_sr_bf16_bits(vi, adamw_sr_hash((uint32_t)hp.step, base + i, 1));
    }
    float *dg = dev_f32(g, n);
    uint16_t *outm[2], *outv[2];
    float *outp[2];
    for (int multi = 0; multi < 2; multi++) {
        float *dmaster = dev_f32(p0, n);
        bf16 *dm, *dv, *dp;
        cudaCheck(cudaMalloc((void **)&dm, n * 2));
        cudaCheck(cudaMalloc((void **)&dv, n * 2));
        cudaCheck(cudaMalloc((void **)&dp, n * 2));
        cudaCheck(cudaMemcpy(dm, m0, n * 2, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(dv, v0, n * 2, cudaMemcpyHostToDevice));
        if (multi) {
            AdamWSegments seg;
            memset(&seg, 0, sizeof seg);
            seg.count = 2; seg.end[0] = half; seg.wd[0] = hp.weight_decay; seg.end[1] = n; seg.wd[1] = 0.0f;
            adamw_update_multi(dp, dmaster, dm, dv, dg, &seg, &hp, NULL, 0, base);
        } else {
            adamw_update(dp, dmaster, dm, dv, dg, half, &hp, hp.weight_decay, NULL, 0, base);
            adamw_update(dp + half, dmaster + half, dm + half, dv + half, dg + half, n - half, &hp, 0.0f, NULL, 0,
                         base + half);
        }
        outp[multi] = get_f32(dmaster, n);
        outm[multi] = (uint16_t *)sllm_malloc(n * 2);
        outv[multi] = (uint16_t *)sllm_malloc(n * 2);
        cudaCheck(cudaMemcpy(outm[multi], dm, n * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(outv[multi], dv, n * 2, cudaMemcpyDeviceToHost));
        cudaFree(dmaster); cudaFree(dm); cudaFree(dv); cudaFree(dp);
    }
    size_t flips = 0, far = 0, ups = 0;
    double perr = 0;
    for (size_t i = 0; i < n; i++) {
        perr = fmax(perr, fabs((double)outp[0][i] - wp[i]) / fmax(fabs((double)wp[i]), 1e-3));
        const uint16_t got[2] = {outm[0][i], outv[0][i]}, want[2] = {wmb[i], wvb[i]};
        const float ref[2] = {wm[i], wv[i]};
        for (int k = 0; k < 2; k++) {
            uint32_t u;
            memcpy(&u, &ref[k], 4);
            const uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);  // the two neighbours (|x| down, up)
            const double ulp = fabs((double)adamw_bf16_bits_to_float(hi) - adamw_bf16_bits_to_float(lo));
            // within one bf16 step of the fp32 value (the device's FMA may move that value by an fp32 ulp)
            if (fabs((double)adamw_bf16_bits_to_float(got[k]) - ref[k]) > ulp * 1.001) far++;
            flips += got[k] != want[k];
            ups += got[k] == hi;
        }
    }
    printf("  bf16 moments, one step: master max rel err %.3g; moments: %zu further than a bf16 step, %zu differ from the "
           "host's rounding, %zu of %zu rounded up\n", perr, far, flips, ups, 2 * n);
    assert_true(perr < 1e-5);
    assert_int_equal(far, 0);
    assert_true(flips <= 2 * n / 1000);
    assert_true(ups > 2 * n / 10 && ups < 2 * n * 9 / 10);  // both directions occur
    assert_memory_equal(outp[0], outp[1], n * 4);
    assert_memory_equal(outm[0], outm[1], n * 2);
    assert_memory_equal(outv[0], outv[1], n * 2);
    // 2. v decays under beta2 0.999 with g = 0
    {
        const int steps = 300;
        AdamWParams hq = {0.0f, 0.9f, 0.999f, 1e-8f, 0.0f, 0.0f, 0};
        float *dmaster = dev_f32(p0, n), *dz = dev_f32(NULL, n);
        cudaCheck(cudaMemset(dz, 0, n * 4));
        bf16 *dm, *dv, *dp;
        cudaCheck(cudaMalloc((void **)&dm, n * 2));
        cudaCheck(cudaMalloc((void **)&dv, n * 2));
        cudaCheck(cudaMalloc((void **)&dp, n * 2));
        cudaCheck(cudaMemset(dm, 0, n * 2));
        uint16_t *ones = (uint16_t *)sllm_malloc(n * 2);
        for (size_t i = 0; i < n; i++) ones[i] = 0x3f80;  // 1.0
        cudaCheck(cudaMemcpy(dv, ones, n * 2, cudaMemcpyHostToDevice));
        AdamWSegments seg;
        memset(&seg, 0, sizeof seg);
        seg.count = 1; seg.end[0] = n; seg.wd[0] = 0.0f;
        for (int t = 1; t <= steps; t++) {
            hq.step = t;
            adamw_update_multi(dp, dmaster, dm, dv, dz, &seg, &hq, NULL, 0, 0);
        }
        cudaCheck(cudaMemcpy(ones, dv, n * 2, cudaMemcpyDeviceToHost));
        double mean = 0;
        for (size_t i = 0; i < n; i++) mean += adamw_bf16_bits_to_float(ones[i]);
        mean /= n;
        const double want = pow(0.999, steps);
        printf("  bf16 v under beta2 0.999, g = 0, %d steps: mean %.5f (fp32 value %.5f)\n", steps, mean, want);
        assert_true(fabs(mean - want) < 0.005 * want);
        free(ones);
        cudaFree(dmaster); cudaFree(dz); cudaFree(dm); cudaFree(dv); cudaFree(dp);
    }
    for (int k = 0; k < 2; k++) { free(outp[k]); free(outm[k]); free(outv[k]); }
    free(p0); free(g); free(m0); free(v0); free(wp); free(wm); free(wv); free(wmb); free(wvb);
    cudaFree(dg);
}

// ---- AdamW without master weights (the bf16 weights updated with stochastic rounding) --------------------------
// 1. One step with fp32 and with bf16 moments against a host reference of the kernel's formula: each new weight is
//    one of the two bf16 neighbours of the reference's fp32 value and (bar an FMA flip) the one the hash (which = 2)
//    picks; per-tensor and multi-tensor kernels give the same bits, with a non-zero global index base.
// 2. No stall: from 1.0 with a constant gradient, lr 1e-3 (a quarter of a bf16 step below 1.0) for 100 steps the
//    weights must reach 0.9 on average (round-to-nearest would keep every one at 1.0).
static void test_adamw_no_master(void **state) {
    SKIP_IF_NO_GPU();
    const size_t n = 8192, half = 4000;
    const uint64_t base = 98765;
    AdamWParams hp = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, 0.0f, 5};
    uint16_t *p0 = (uint16_t *)sllm_malloc(n * 2);
    float *g = (float *)sllm_malloc(n * 4), *m0 = (float *)sllm_malloc(n * 4), *v0 = (float *)sllm_malloc(n * 4);
    for (size_t i = 0; i < n; i++) {
        bf16 pb = __float2bfloat16_rn((float)(0.3 * rng_normal(&g_rng)));
        memcpy(&p0[i], &pb, 2);
        g[i] = (float)(0.05 * rng_normal(&g_rng));
        m0[i] = __bfloat162float(__float2bfloat16_rn((float)(0.01 * rng_normal(&g_rng))));
        v0[i] = __bfloat162float(__float2bfloat16_rn((float)(1e-4 * (0.1 + rng_uniform(&g_rng)))));
    }
    const float bc1 = 1.0f - powf(hp.beta1, (float)hp.step), bc2 = 1.0f - powf(hp.beta2, (float)hp.step);
    float *want = (float *)sllm_malloc(n * 4);
    uint16_t *wantb = (uint16_t *)sllm_malloc(n * 2);
    for (size_t i = 0; i < n; i++) {
        const float wd = i < half ? hp.weight_decay : 0.0f, p = adamw_bf16_bits_to_float(p0[i]);
        const float mi = hp.beta1 * m0[i] + (1.0f - hp.beta1) * g[i];
        const float vi = hp.beta2 * v0[i] + (1.0f - hp.beta2) * g[i] * g[i];
        want[i] = p - hp.lr * ((mi / bc1) / (sqrtf(vi / bc2) + hp.eps) + wd * p);
        wantb[i] = adamw_sr_bf16_bits(want[i], adamw_sr_hash((uint32_t)hp.step, base + i, 2));
    }
    float *dg = dev_f32(g, n);
    for (int bf16m = 0; bf16m < 2; bf16m++) {
        uint16_t *out[2];
        for (int multi = 0; multi < 2; multi++) {
            bf16 *dp;
            cudaCheck(cudaMalloc((void **)&dp, n * 2));
            cudaCheck(cudaMemcpy(dp, p0, n * 2, cudaMemcpyHostToDevice));
            float *dm = dev_f32(m0, n), *dv = dev_f32(v0, n);
            bf16 *dmb, *dvb;
            cudaCheck(cudaMalloc((void **)&dmb, n * 2));
            cudaCheck(cudaMalloc((void **)&dvb, n * 2));
            f32_to_bf16(dmb, dm, n, 0);
            f32_to_bf16(dvb, dv, n, 0);
            AdamWSegments seg;
            memset(&seg, 0, sizeof seg);
            seg.count = 2; seg.end[0] = half; seg.wd[0] = hp.weight_decay; seg.end[1] = n; seg.wd[1] = 0.0f;
            if (multi && bf16m) adamw_update_multi(dp, (float *)NULL, dmb, dvb, dg, &seg, &hp, NULL, 0, base);
            else if (multi) adamw_update_multi(dp, (float *)NULL, dm, dv, dg, &seg, &hp, NULL, 0, base);
            else if (bf16m) {
                adamw_update(dp, (float *)NULL, dmb, dvb, dg, half, &hp, hp.weight_decay, NULL, 0, base);
                adamw_update(dp + half, (float *)NULL, dmb + half, dvb + half, dg + half, n - half, &hp, 0.0f, NULL, 0,
                             base + half);
            } else {
                adamw_update(dp, (float *)NULL, dm, dv, dg, half, &hp, hp.weight_decay, NULL, 0, base);
                adamw_update(dp + half, (float *)NULL, dm + half, dv + half, dg + half, n - half, &hp, 0.0f, NULL, 0,
                             base + half);
            }
            out[multi] = (uint16_t *)sllm_malloc(n * 2);
            cudaCheck(cudaMemcpy(out[multi], dp, n * 2, cudaMemcpyDeviceToHost));
            cudaFree(dp); cudaFree(dm); cudaFree(dv); cudaFree(dmb); cudaFree(dvb);
        }
        size_t far = 0, flips = 0, ups = 0, moved = 0;
        for (size_t i = 0; i < n; i++) {
            uint32_t u;
            memcpy(&u, &want[i], 4);
            const uint16_t lo = (uint16_t)(u >> 16), hi = (uint16_t)(lo + 1);
            const double ulp = fabs((double)adamw_bf16_bits_to_float(hi) - adamw_bf16_bits_to_float(lo));
            if (fabs((double)adamw_bf16_bits_to_float(out[0][i]) - want[i]) > ulp * 1.001) far++;
            flips += out[0][i] != wantb[i];
            ups += out[0][i] == hi;
            moved += out[0][i] != p0[i];
        }
        printf("  no master weights, %s moments, one step: %zu weights further than a bf16 step, %zu differ from the "
               "host's rounding, %zu of %zu rounded up, %zu moved\n", bf16m ? "bf16" : "fp32", far, flips, ups, n, moved);
        assert_int_equal(far, 0);
        assert_true(flips <= n / 1000);
        assert_true(ups > n / 10 && ups < n * 9 / 10);
        assert_true(moved > n / 2);
        assert_memory_equal(out[0], out[1], n * 2);
        free(out[0]); free(out[1]);
    }
    // 2. no stall below half a bf16 step
    {
        const int steps = 100;
        AdamWParams hq = {1e-3f, 0.9f, 0.95f, 1e-8f, 0.0f, 0.0f, 0};
        uint16_t *ones = (uint16_t *)sllm_malloc(n * 2);
        for (size_t i = 0; i < n; i++) { ones[i] = 0x3f80; g[i] = 1.0f; }  // 1.0
        bf16 *dp, *dm, *dv;
        cudaCheck(cudaMalloc((void **)&dp, n * 2));
        cudaCheck(cudaMalloc((void **)&dm, n * 2));
        cudaCheck(cudaMalloc((void **)&dv, n * 2));
        cudaCheck(cudaMemcpy(dp, ones, n * 2, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemset(dm, 0, n * 2));
        cudaCheck(cudaMemset(dv, 0, n * 2));
        float *dg1 = dev_f32(g, n);
        AdamWSegments seg;
        memset(&seg, 0, sizeof seg);
        seg.count = 1; seg.end[0] = n; seg.wd[0] = 0.0f;
        for (int t = 1; t <= steps; t++) {
            hq.step = t;
            adamw_update_multi(dp, (float *)NULL, dm, dv, dg1, &seg, &hq, NULL, 0, 0);
        }
        cudaCheck(cudaMemcpy(ones, dp, n * 2, cudaMemcpyDeviceToHost));
        double mean = 0;
        for (size_t i = 0; i < n; i++) mean += adamw_bf16_bits_to_float(ones[i]);
        mean /= n;
        printf("  no master weights, lr 1e-3 from 1.0 with g = 1, %d steps: mean %.5f (fp32: 0.90000; round-to-nearest: "
               "1.0)\n", steps, mean);
        assert_true(fabs(mean - 0.9) < 0.003);
        free(ones);
        cudaFree(dp); cudaFree(dm); cudaFree(dv); cudaFree(dg1);
    }
    free(p0); free(g); free(m0); free(v0); free(want); free(wantb);
    cudaFree(dg);
}

// ---- strided-batched GEMM (gate+up fused GEMM) vs CPU -----------------------------------------------------
static void test_matmul_batched(void **state) {
    SKIP_IF_NO_GPU();
    const int M = 72, N = 96, K = 64, L = 3;  // out[b] = x W_b^T with W_b L*N*K apart (like Wg, Wu)
    printf("matmul_strided_batched M=%d N=%d K=%d, broadcast A, weights %d*N*K apart\n", M, N, K, L);
    float *x = rand_bf16_values((size_t)M * K, 1.0), *W = rand_bf16_values((size_t)2 * L * N * K, 0.1);
    bf16 *dx = dev_bf16(x, (size_t)M * K), *dW = dev_bf16(W, (size_t)2 * L * N * K), *dout;
    cudaCheck(cudaMalloc((void **)&dout, (size_t)2 * M * N * 2));
    MatmulContext ctx;
    matmul_context_init(&ctx);
    poison(dout, (size_t)2 * M * N * 2);
    matmul_strided_batched(&ctx, dout, 0, (long long)M * N, dx, 0, 0, dW, 1, (long long)L * N * K, 2, M, N, K, 1.0f,
                           0.0f, 0);
    float *h = get_bf16(dout, (size_t)2 * M * N);
    double *ref = (double *)sllm_malloc((size_t)2 * M * N * 8);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double s = 0;
                for (int k = 0; k < K; k++) s += (double)x[(size_t)i * K + k] * W[(size_t)b * L * N * K + (size_t)j * K + k];
                ref[(size_t)b * M * N + (size_t)i * N + j] = s;
            }
    CHECK_REL("batched GEMM (stride-0 A)", h, ref, (size_t)2 * M * N, 1e-2);
    // fp32 output with beta = 1 (weight-gradient accumulation): out[b] += A_b^T x
    float *init = rand_bf16_values((size_t)2 * N * K, 1.0);
    float *dg = dev_f32(init, (size_t)2 * N * K);
    float *a = rand_bf16_values((size_t)2 * M * N, 1.0);
    bf16 *da = dev_bf16(a, (size_t)2 * M * N);
    matmul_strided_batched(&ctx, dg, 1, (long long)N * K, da, 1, (long long)M * N, dx, 0, 0, 2, N, K, M, 1.0f, 1.0f, 0);
    float *hg = get_f32(dg, (size_t)2 * N * K);
    double *rg = to_double(init, (size_t)2 * N * K);
    for (int b = 0; b < 2; b++)
        for (int i = 0; i < N; i++)
            for (int j = 0; j < K; j++) {
                double s = 0;
                for (int r = 0; r < M; r++) s += (double)a[(size_t)b * M * N + (size_t)r * N + i] * x[(size_t)r * K + j];
                rg[(size_t)b * N * K + (size_t)i * K + j] += s;
            }
    CHECK_REL("batched GEMM fp32 += (stride-0 B)", hg, rg, (size_t)2 * N * K, 1e-5);
    matmul_context_free(&ctx);
    free(x); free(W); free(h); free(ref); free(init); free(a); free(hg); free(rg);
    cudaFree(dx); cudaFree(dW); cudaFree(dout); cudaFree(dg); cudaFree(da);
}

// ---- GEMM with cuBLASLt's ReLU bit-mask epilogue (the TwELL gate's GEMM) vs CPU, bit for bit ------------------
// Small-integer inputs (|x|, |w| <= 2, K 64: every sum is an integer of magnitude <= 256, exact in fp32 and
// bf16, many exactly 0), so the output has one right answer whatever the algorithm, and so does the mask except
// on products of exactly 0 (cuBLASLt sets those bits: relu'(0) = 1; the TwELL mask pack stores only values > 0).
// Checked for the heuristic's algorithm (in a fresh context and after the plain GEMM of the shape was cached)
// and for the one matmul_tune picks.
static void test_matmul_relu_mask(void **state) {
    SKIP_IF_NO_GPU();
    const int M = 200, N = 384, K = 64;
    printf("matmul_relu_mask M=%d N=%d K=%d, integer inputs\n", M, N, K);
    float *x = (float *)sllm_malloc((size_t)M * K * 4), *W = (float *)sllm_malloc((size_t)N * K * 4);
    for (size_t i = 0; i < (size_t)M * K; i++) x[i] = (float)((int)rng_below(&g_rng, 5) - 2);
    for (size_t i = 0; i < (size_t)N * K; i++) W[i] = (float)((int)rng_below(&g_rng, 5) - 2);
    bf16 *dx = dev_bf16(x, (size_t)M * K), *dW = dev_bf16(W, (size_t)N * K), *dout;
    uint32_t *dmask;
    cudaCheck(cudaMalloc((void **)&dout, (size_t)M * N * 2));
    cudaCheck(cudaMalloc((void **)&dmask, (size_t)M * N / 8));
    float *want = (float *)sllm_malloc((size_t)M * N * 4);
    double *pre = (double *)sllm_malloc((size_t)M * N * 8);
    int positives = 0, zeros = 0;
    for (int i = 0; i < M; i++)
        for (int j = 0; j < N; j++) {
            double acc = 0;
            for (int k = 0; k < K; k++) acc += (double)x[(size_t)i * K + k] * W[(size_t)j * K + k];
            pre[(size_t)i * N + j] = acc;
            want[(size_t)i * N + j] = acc > 0 ? (float)acc : 0.0f;
            positives += acc > 0;
            zeros += acc == 0;
        }
    assert_true(positives > M * N / 4 && zeros > 100);  // both sides of the boundary are exercised
    uint32_t *mask = (uint32_t *)sllm_malloc((size_t)M * N / 8);
    for (int pass = 0; pass < 3; pass++) {  // 0: fresh context; 1: plain GEMM cached first; 2: tuned
        MatmulContext ctx;
        matmul_context_init(&ctx);
        if (pass == 1) matmul(&ctx, dout, 0, dx, 0, dW, 1, M, N, K, 1.0f, 0.0f, 0);
        if (pass == 2) {
            float f = 0, b = 0;
            assert_true(matmul_tune(&ctx, dout, dx, dW, M, N, K, MATMUL_EPI_RELU_MASK, dmask, 2, 0, &f, &b) > 0);
        }
        poison(dout, (size_t)M * N * 2);
        poison(dmask, (size_t)M * N / 8);
        assert_int_equal(matmul_relu_mask(&ctx, dout, dmask, dx, dW, M, N, K, 0), 0);
        float *h = get_bf16(dout, (size_t)M * N);
        cudaCheck(cudaMemcpy(mask, dmask, (size_t)M * N / 8, cudaMemcpyDeviceToHost));
        assert_memory_equal(h, want, (size_t)M * N * 4);
        // Bit (i N + j): must be set for a positive product and clear for a negative one; a product of exactly 0
        // may go either way (relu'(0)); the TwELL pack stores only values > 0, so it does not matter there.
        int zero_set = 0;
        for (size_t e = 0; e < (size_t)M * N; e++) {
            const int bit = (mask[e / 32] >> (e % 32)) & 1;
            if (pre[e] > 0 && !bit) fail_msg("mask bit %zu clear for a positive product %g", e, pre[e]);
            if (pre[e] < 0 && bit) fail_msg("mask bit %zu set for a negative product %g", e, pre[e]);
            zero_set += pre[e] == 0 && bit;
        }
        printf("  pass %d (%s): output bit-exact, mask right on %d positives and %d negatives (%d of %d zeros "
               "flagged)\n", pass, pass == 0 ? "default algorithm" : pass == 1 ? "plain GEMM cached first" : "tuned",
               positives, M * N - positives - zeros, zero_set, zeros);
        free(h);
        matmul_context_free(&ctx);
    }
    free(x); free(W); free(want); free(pre); free(mask);
    cudaFree(dx); cudaFree(dW); cudaFree(dout); cudaFree(dmask);
}

// ---- GEMV (decoding) --------------------------------------------------------------------------------------
// acc[m, n] = sum_k x[m, k] W[n, k] in double
static double *ref_gemv(const float *x, const float *W, int M, int N, int K) {
    double *y = (double *)sllm_malloc((size_t)M * N * 8);
    for (int m = 0; m < M; m++)
        for (int n = 0; n < N; n++) {
            double a = 0;
            for (int k = 0; k < K; k++) a += (double)x[(size_t)m * K + k] * W[(size_t)n * K + k];
            y[(size_t)m * N + n] = a;
        }
    return y;
}
static void gemv_rows_case(int M, int N, int K, int f32) {
    printf("gemv rows M=%d N=%d K=%d out %s\n", M, N, K, f32 ? "fp32" : "bf16");
    float *x = rand_bf16_values((size_t)M * K, 1.0), *W = rand_bf16_values((size_t)N * K, 0.05);
    bf16 *dx = dev_bf16(x, (size_t)M * K), *dW = dev_bf16(W, (size_t)N * K);
    double *ref = ref_gemv(x, W, M, N, K);
    void *dy;
    cudaCheck(cudaMalloc(&dy, (size_t)M * N * 4));
    float *h1 = NULL, *h2 = NULL;
    for (int rep = 0; rep < 2; rep++) {
        poison(dy, (size_t)M * N * 4);
        if (f32) gemv_rows((float *)dy, gemv_in(dx), dW, M, N, K, 0);
        else gemv_rows((bf16 *)dy, gemv_in(dx), dW, M, N, K, 0);
        float *h = f32 ? get_f32((float *)dy, (size_t)M * N) : get_bf16((bf16 *)dy, (size_t)M * N);
        if (rep == 0) h1 = h; else h2 = h;
    }
    CHECK_REL("gemv rows", h1, ref, (size_t)M * N, f32 ? 1e-5 : 1e-2);
    assert_memory_equal(h1, h2, (size_t)M * N * sizeof(float));  // deterministic
    free(x); free(W); free(ref); free(h1); free(h2);
    cudaFree(dx); cudaFree(dW); cudaFree(dy);
}
// A matrix of more units than one wave of CTAs is staged (two sets of units per CTA, the second through shared
// memory): its rows must equal, bit for bit, the same rows computed in calls of 2048 rows (one wave, not staged), and
// the float64 reference.
static void gemv_staged_case(int M, int N, int K) {
    const int staged = gemv_stage_mode(M, K, N / 2, 2, GEMV_U) == GEMV_STAGE_UNITS;
    printf("gemv rows staged M=%d N=%d K=%d: %s\n", M, N, K, staged ? "staged" : "NOT STAGED  <-- FAIL");
    assert_true(staged);
    float *x = rand_bf16_values((size_t)M * K, 1.0), *W = rand_bf16_values((size_t)N * K, 0.05);
    bf16 *dx = dev_bf16(x, (size_t)M * K), *dW = dev_bf16(W, (size_t)N * K);
    double *ref = ref_gemv(x, W, M, N, K);
    float *dy, *dy2;
    cudaCheck(cudaMalloc(&dy, (size_t)M * N * 4));
    cudaCheck(cudaMalloc(&dy2, (size_t)M * 2048 * 4));
    poison(dy, (size_t)M * N * 4);
    gemv_rows(dy, gemv_in(dx), dW, M, N, K, 0);
    float *h = get_f32(dy, (size_t)M * N), *h2 = (float *)sllm_malloc((size_t)M * N * 4);
    for (int n0 = 0; n0 < N; n0 += 2048) {  // the same rows, unstaged: y2 [M, nc] per chunk
        const int nc = N - n0 < 2048 ? N - n0 : 2048;
        poison(dy2, (size_t)M * 2048 * 4);
        gemv_rows(dy2, gemv_in(dx), dW + (size_t)n0 * K, M, nc, K, 0);
        float *c = get_f32(dy2, (size_t)M * nc);
        for (int m = 0; m < M; m++) memcpy(h2 + (size_t)m * N + n0, c + (size_t)m * nc, (size_t)nc * 4);
        free(c);
    }
    CHECK_REL("gemv rows staged", h, ref, (size_t)M * N, 1e-5);
    assert_memory_equal(h, h2, (size_t)M * N * sizeof(float));
    free(x); free(W); free(ref); free(h); free(h2);
    cudaFree(dx); cudaFree(dW); cudaFree(dy); cudaFree(dy2);
}
// Rows longer than one step in at most one CTA per SM have their tails staged (copied into shared memory before the
// wait): the rows of calls of 1024 rows (staged) must equal, bit for bit, the same rows of one call of more CTAs than
// SMs (not staged), and the float64 reference.
static void gemv_tail_case(int M, int K) {
    const int N = 16 * (cuda_sm_count() + 8), NC = 1024;  // N / 2 units: more than 8 per SM
    const int big = gemv_stage_mode(M, K, N / 2, 2, GEMV_U), small = gemv_stage_mode(M, K, NC / 2, 2, GEMV_U);
    printf("gemv rows tail M=%d N=%d K=%d: %d rows %s, %d rows %s\n", M, N, K, N,
           big == GEMV_STAGE_NONE ? "not staged" : "STAGED  <-- FAIL", NC,
           small == GEMV_STAGE_TAIL ? "tail staged" : "NOT TAIL STAGED  <-- FAIL");
    assert_int_equal(big, GEMV_STAGE_NONE);
    assert_int_equal(small, GEMV_STAGE_TAIL);
    float *x = rand_bf16_values((size_t)M * K, 1.0), *W = rand_bf16_values((size_t)N * K, 0.05);
    bf16 *dx = dev_bf16(x, (size_t)M * K), *dW = dev_bf16(W, (size_t)N * K);
    double *ref = ref_gemv(x, W, M, N, K);
    float *dy, *dy2;
    cudaCheck(cudaMalloc(&dy, (size_t)M * N * 4));
    cudaCheck(cudaMalloc(&dy2, (size_t)M * NC * 4));
    poison(dy, (size_t)M * N * 4);
    gemv_rows(dy, gemv_in(dx), dW, M, N, K, 0);
    float *h = get_f32(dy, (size_t)M * N), *h2 = (float *)sllm_malloc((size_t)M * N * 4);
    for (int n0 = 0; n0 < N; n0 += NC) {  // the same rows, tail staged: y2 [M, nc] per chunk
        const int nc = N - n0 < NC ? N - n0 : NC;
        poison(dy2, (size_t)M * NC * 4);
        gemv_rows(dy2, gemv_in(dx), dW + (size_t)n0 * K, M, nc, K, 0);
        float *c = get_f32(dy2, (size_t)M * nc);
        for (int m = 0; m < M; m++) memcpy(h2 + (size_t)m * N + n0, c + (size_t)m * nc, (size_t)nc * 4);
        free(c);
    }
    CHECK_REL("gemv rows tail", h2, ref, (size_t)M * N, 1e-5);
    assert_memory_equal(h, h2, (size_t)M * N * sizeof(float));
    free(x); free(W); free(ref); free(h); free(h2);
    cudaFree(dx); cudaFree(dW); cudaFree(dy); cudaFree(dy2);
}
// pattern: 0 random, 1 every gate <= 0 (nothing fires), 2 every gate > 0
static void gemv_ffn_case(int M, int F, int K, int gated, int pattern) {
    printf("gemv ffn up M=%d F=%d K=%d gated=%d pattern=%d\n", M, F, K, gated, pattern);
    float *x = rand_bf16_values((size_t)M * K, 1.0), *Wg = rand_bf16_values((size_t)F * K, 0.05),
          *Wu = rand_bf16_values((size_t)F * K, 0.05);
    if (pattern) {  // x > 0 and the first weight matrix of one sign: every gate has that sign
        for (size_t i = 0; i < (size_t)M * K; i++) x[i] = fabsf(x[i]) + 0.0625f;
        float *W1 = gated ? Wg : Wu;
        for (size_t i = 0; i < (size_t)F * K; i++) W1[i] = pattern == 1 ? -fabsf(W1[i]) : fabsf(W1[i]);
    }
    bf16 *dx = dev_bf16(x, (size_t)M * K), *dWg = dev_bf16(Wg, (size_t)F * K), *dWu = dev_bf16(Wu, (size_t)F * K);
    double *g = ref_gemv(x, gated ? Wg : Wu, M, F, K), *u = gated ? ref_gemv(x, Wu, M, F, K) : NULL;
    double *ref = (double *)sllm_malloc((size_t)M * F * 8);
    long long lo = 0, amb = 0;  // certain and near-zero (either way) active pairs
    uint8_t *want_fired = (uint8_t *)sllm_calloc(F, 1), *amb_unit = (uint8_t *)sllm_calloc(F, 1);
    for (size_t i = 0; i < (size_t)M * F; i++) {
        const double gb = sllm_round_bf16((float)g[i]);
        ref[i] = gb > 0 ? (gated ? gb * sllm_round_bf16((float)u[i]) : gb) : 0.0;
        if (fabs(g[i]) < 1e-3) { amb++; amb_unit[i % F] = 1; }
        else if (g[i] > 0) { lo++; want_fired[i % F] = 1; }
    }
    bf16 *dh;
    unsigned long long *dnnz;
    uint8_t *dfired;
    cudaCheck(cudaMalloc((void **)&dh, (size_t)M * F * 2));
    cudaCheck(cudaMalloc((void **)&dnnz, 8));
    cudaCheck(cudaMalloc((void **)&dfired, F));
    poison(dh, (size_t)M * F * 2);
    cudaCheck(cudaMemset(dnnz, 0, 8));
    cudaCheck(cudaMemset(dfired, 0, F));
    if (gated) {
        GemvFFNUpOp<true> op = {dWg, dWu, dh, F, K, dnnz, dfired};
        gemv_launch(op, gemv_in(dx), M, K, F, 0);
    } else {
        GemvFFNUpOp<false> op = {NULL, dWu, dh, F, K, dnnz, dfired};
        gemv_launch(op, gemv_in(dx), M, K, F, 0);
    }
    float *hh = get_bf16(dh, (size_t)M * F);
    unsigned long long nnz = 0;
    cudaCheck(cudaMemcpy(&nnz, dnnz, 8, cudaMemcpyDeviceToHost));
    uint8_t *fired = (uint8_t *)sllm_malloc(F);
    cudaCheck(cudaMemcpy(fired, dfired, F, cudaMemcpyDeviceToHost));
    CHECK_REL("gemv ffn h", hh, ref, (size_t)M * F, 1e-2);
    printf("  active pairs %llu (reference %lld, %lld within 1e-3 of 0)\n", nnz, lo, amb);
    assert_true((long long)nnz >= lo && (long long)nnz <= lo + amb);
    if (pattern == 1) assert_true(nnz == 0);
    if (pattern == 2) assert_true(nnz == (unsigned long long)M * F);
    for (int f = 0; f < F; f++)
        if (!amb_unit[f]) assert_int_equal(fired[f], want_fired[f]);
    for (size_t i = 0; i < (size_t)M * F; i++)
        if (fabs(g[i]) >= 1e-3 && g[i] < 0) assert_true(hh[i] == 0.0f);  // exact zeros where the gate is off
    free(x); free(Wg); free(Wu); free(g); free(u); free(ref); free(want_fired); free(amb_unit); free(hh); free(fired);
    cudaFree(dx); cudaFree(dWg); cudaFree(dWu); cudaFree(dh); cudaFree(dnnz); cudaFree(dfired);
}
// q, k, v of a decoding step at position pos: q rotated, k rotated into the cache, v into the cache, nothing else of
// the cache touched.
static void gemv_qkv_case(int M, int H, int KVH, int hd, int S, int pos) {
    const int Q = H * hd, KV = KVH * hd, K = 512, h2 = hd / 2;
    printf("gemv qkv+rope+cache M=%d H=%d KVH=%d hd=%d pos=%d\n", M, H, KVH, hd, pos);
    float *x = rand_bf16_values((size_t)M * K, 1.0), *Wq = rand_bf16_values((size_t)Q * K, 0.05),
          *Wk = rand_bf16_values((size_t)KV * K, 0.05), *Wv = rand_bf16_values((size_t)KV * K, 0.05);
    float *tab = (float *)sllm_malloc((size_t)S * hd * 4);
    rope_build_table(tab, S, hd, 10000.0);
    bf16 *dx = dev_bf16(x, (size_t)M * K), *dWq = dev_bf16(Wq, (size_t)Q * K), *dWk = dev_bf16(Wk, (size_t)KV * K),
         *dWv = dev_bf16(Wv, (size_t)KV * K);
    float *dtab = dev_f32(tab, (size_t)S * hd);
    const size_t cache = (size_t)M * S * KV;
    bf16 *dq, *dkc, *dvc;
    int *dpos;
    cudaCheck(cudaMalloc((void **)&dq, (size_t)M * Q * 2));
    cudaCheck(cudaMalloc((void **)&dkc, cache * 2));
    cudaCheck(cudaMalloc((void **)&dvc, cache * 2));
    cudaCheck(cudaMalloc((void **)&dpos, 4));
    cudaCheck(cudaMemcpy(dpos, &pos, 4, cudaMemcpyHostToDevice));
    poison(dq, (size_t)M * Q * 2); poison(dkc, cache * 2); poison(dvc, cache * 2);
    GemvQKVRopeOp op;
    op.wq = dWq; op.wk = dWk; op.wv = dWv; op.q = dq; op.kc = dkc; op.vc = dvc; op.rope = dtab; op.pos = dpos;
    op.Q = Q; op.KV = KV; op.hd = hd; op.S = S; op.K = K;
    gemv_launch(op, gemv_in(dx), M, K, (Q + 2 * KV) / 2, 0);
    double *rq = ref_gemv(x, Wq, M, Q, K), *rk = ref_gemv(x, Wk, M, KV, K), *rv = ref_gemv(x, Wv, M, KV, K);
    for (int t = 0; t < 2; t++) {  // rotate q and k from their bf16-rounded products
        double *r = t ? rk : rq;
        const int n = t ? KV : Q;
        for (int m = 0; m < M; m++)
            for (int hh = 0; hh < n / hd; hh++)
                for (int i = 0; i < h2; i++) {
                    double *p = r + (size_t)m * n + hh * hd;
                    const double a = sllm_round_bf16((float)p[i]), b = sllm_round_bf16((float)p[i + h2]);
                    const double c = tab[((size_t)pos * h2 + i) * 2], sn = tab[((size_t)pos * h2 + i) * 2 + 1];
                    p[i] = a * c - b * sn;
                    p[i + h2] = b * c + a * sn;
                }
    }
    float *hq = get_bf16(dq, (size_t)M * Q), *hk = get_bf16(dkc, cache), *hv = get_bf16(dvc, cache);
    float *gk = (float *)sllm_malloc((size_t)M * KV * 4), *gv = (float *)sllm_malloc((size_t)M * KV * 4);
    for (int m = 0; m < M; m++)
        for (int s = 0; s < S; s++)
            for (int j = 0; j < KV; j++) {
                const size_t ci = ((size_t)m * S + s) * KV + j;
                if (s == pos) { gk[(size_t)m * KV + j] = hk[ci]; gv[(size_t)m * KV + j] = hv[ci]; }
                else assert_true(isnan(hk[ci]) && isnan(hv[ci]));  // other positions untouched (still poisoned)
            }
    CHECK_REL("gemv q (rotated)", hq, rq, (size_t)M * Q, 1e-2);
    CHECK_REL("gemv k (rotated, in the cache)", gk, rk, (size_t)M * KV, 1e-2);
    CHECK_REL("gemv v (in the cache)", gv, rv, (size_t)M * KV, 1e-2);
    free(x); free(Wq); free(Wk); free(Wv); free(tab); free(rq); free(rk); free(rv); free(hq); free(hk); free(hv);
    free(gk); free(gv);
    cudaFree(dx); cudaFree(dWq); cudaFree(dWk); cudaFree(dWv); cudaFree(dtab); cudaFree(dq); cudaFree(dkc);
    cudaFree(dvc); cudaFree(dpos);
}
// The fused input: s = bf16(a + b) (b may be NULL), x = bf16(rmsnorm(s) * gain), y = x W^T; s written to res.
static void gemv_norm_case(int M, int N, int K, int with_b) {
    printf("gemv with the residual add + rmsnorm fused M=%d N=%d K=%d b=%d\n", M, N, K, with_b);
    const float eps = 1e-5f;
    float *a = rand_bf16_values((size_t)M * K, 1.0), *b = rand_bf16_values((size_t)M * K, 0.5),
          *g = rand_bf16_values(K, 1.0), *W = rand_bf16_values((size_t)N * K, 0.05);
    for (int i = 0; i < K; i++) g[i] = sllm_round_bf16(1.0f + 0.1f * g[i]);
    bf16 *da = dev_bf16(a, (size_t)M * K), *db = dev_bf16(b, (size_t)M * K), *dg = dev_bf16(g, K),
         *dW = dev_bf16(W, (size_t)N * K), *dy, *dres;
    cudaCheck(cudaMalloc((void **)&dy, (size_t)M * N * 2));
    cudaCheck(cudaMalloc((void **)&dres, (size_t)M * K * 2));
    poison(dy, (size_t)M * N * 2);
    poison(dres, (size_t)M * K * 2);
    const GemvIn in = {da, with_b ? db : NULL, dg, dres, eps};
    gemv_rows(dy, in, dW, M, N, K, 0);
    float *x = (float *)sllm_malloc((size_t)M * K * 4), *sum = (float *)sllm_malloc((size_t)M * K * 4);
    for (int m = 0; m < M; m++) {
        double ss = 0;
        for (int k = 0; k < K; k++) {
            const size_t i = (size_t)m * K + k;
            sum[i] = with_b ? sllm_round_bf16(a[i] + b[i]) : a[i];
            ss += (double)sum[i] * sum[i];
        }
        const double r = 1.0 / sqrt(ss / K + eps);
        for (int k = 0; k < K; k++) x[(size_t)m * K + k] = sllm_round_bf16((float)(sum[(size_t)m * K + k] * r * g[k]));
    }
    double *ref = ref_gemv(x, W, M, N, K);
    float *hy = get_bf16(dy, (size_t)M * N), *hres = get_bf16(dres, (size_t)M * K);
    CHECK_REL("gemv after the fused norm", hy, ref, (size_t)M * N, 1e-2);
    if (with_b) assert_memory_equal(hres, sum, (size_t)M * K * 4);  // the residual sum, exactly
    else for (size_t i = 0; i < (size_t)M * K; i++) assert_true(isnan(hres[i]));  // no b: res untouched
    free(a); free(b); free(g); free(W); free(x); free(sum); free(ref); free(hy); free(hres);
    cudaFree(da); cudaFree(db); cudaFree(dg); cudaFree(dW); cudaFree(dy); cudaFree(dres);
}
// The LM head with the greedy pick fused: the logits as gemv_rows (fp32), and per row the host sampler's argmax of
// those very logits: ties (duplicated weight rows) to the first index, NaN rows never winning, all-NaN rows to 0.
static void gemv_argmax_case(int M, int N, int K, int pattern) {
    printf("gemv logits + argmax M=%d N=%d K=%d pattern=%d\n", M, N, K, pattern);
    float *x = rand_bf16_values((size_t)M * K, 1.0), *W = rand_bf16_values((size_t)N * K, 0.05);
    if (pattern == 1) {  // row 3 the largest logit of row 0, copies of it (ties) and of row 700 further on, two NaN rows
        for (int k = 0; k < K; k++) W[(size_t)3 * K + k] = x[k] >= 0 ? 0.25f : -0.25f;
        for (int j = 0; j < 5; j++) {
            memcpy(W + (size_t)(N - 1 - 2 * j) * K, W + (size_t)3 * K, K * 4);
            memcpy(W + (size_t)(N - 2 - 2 * j) * K, W + (size_t)(700 % N) * K, K * 4);
        }
        W[(size_t)10 * K] = NAN;
        W[(size_t)(N / 2) * K + 5] = NAN;
    }
    if (pattern == 2)  // every logit NaN
        for (int n = 0; n < N; n++) W[(size_t)n * K] = NAN;
    bf16 *dx = dev_bf16(x, (size_t)M * K), *dW = dev_bf16(W, (size_t)N * K);
    float *dy = dev_f32(NULL, (size_t)M * N);
    unsigned long long *dbest;
    cudaCheck(cudaMalloc((void **)&dbest, 8 * M));
    cudaCheck(cudaMemset(dbest, 0, 8 * M));
    poison(dy, (size_t)M * N * 4);
    const GemvLogitsArgmaxOp op = {dW, dy, dbest, N, K, M};
    gemv_launch(op, gemv_in(dx), M, K, N / 2, 0);
    float *hy = get_f32(dy, (size_t)M * N);
    unsigned long long best[GEMV_MAX_M];
    cudaCheck(cudaMemcpy(best, dbest, 8 * M, cudaMemcpyDeviceToHost));
    // the logits: the same bits as gemv_rows to fp32
    poison(dy, (size_t)M * N * 4);
    gemv_rows(dy, gemv_in(dx), dW, M, N, K, 0);
    float *hy2 = get_f32(dy, (size_t)M * N);
    assert_memory_equal(hy, hy2, (size_t)M * N * 4);
    for (int m = 0; m < M; m++) {
        const int want = sampler_argmax(hy + (size_t)m * N, N), got = argmax_index(best[m]);
        printf("  row %d: argmax %d (logit %g), host sampler %d\n", m, got, hy[(size_t)m * N + got], want);
        assert_int_equal(got, want);
    }
    free(x); free(W); free(hy); free(hy2);
    cudaFree(dx); cudaFree(dW); cudaFree(dy); cudaFree(dbest);
}
static void test_gemv(void **state) {
    SKIP_IF_NO_GPU();
    for (int M = 1; M <= GEMV_MAX_M; M++) gemv_rows_case(M, 2048, 2048, 0);
    gemv_rows_case(3, 1002, 5640, 1);  // several steps of 2048 columns, the last one partial; fp32 out
    gemv_rows_case(2, 66, 136, 0);     // fewer columns than one step; a CTA with idle warps
    gemv_staged_case(3, 16384, 1024);  // more units than one wave: staged, the same bits as unstaged calls
    gemv_staged_case(1, 6144, 2048);   // q/k/v's rows (0.5B-2B presets)
    gemv_staged_case(2, 4810, 2048);   // a last CTA with units in its first set only
    gemv_tail_case(1, 5632);             // the down at the paper's width: tails staged, the same bits as unstaged
    gemv_tail_case(4, 5640);             // 4 rows of x, a partial last chunk step
    gemv_tail_case(2, 2056);             // one chunk past the first step
    gemv_ffn_case(2, 5632, 2048, 1, 0);  // the paper's width: staged, with the counters
    gemv_ffn_case(1, 704, 2048, 1, 0);
    gemv_ffn_case(4, 704, 2048, 1, 0);
    gemv_ffn_case(2, 520, 1024, 0, 0);
    gemv_ffn_case(3, 256, 512, 1, 1);
    gemv_ffn_case(3, 256, 512, 1, 2);
    gemv_ffn_case(1, 256, 512, 0, 2);
    gemv_qkv_case(1, 4, 4, 64, 12, 5);   // MHA
    gemv_qkv_case(3, 8, 2, 64, 9, 8);    // GQA, the last cache position
    gemv_qkv_case(2, 2, 1, 128, 4, 0);
    gemv_qkv_case(2, 64, 64, 64, 8, 3);  // 6144 rows: staged
    gemv_norm_case(1, 512, 2048, 1);
    gemv_norm_case(4, 130, 2048, 1);
    gemv_norm_case(2, 64, 5632, 0);
    gemv_argmax_case(1, 49152, 512, 0);
    gemv_argmax_case(4, 1002, 256, 1);
    gemv_argmax_case(2, 66, 64, 2);
    // the key's order: larger logits first, then the smaller index; -0 ties +0; NaN below -inf
    assert_true(argmax_key(1.0f, 5) > argmax_key(0.5f, 1));
    assert_true(argmax_key(-1.0f, 5) > argmax_key(-2.0f, 1));
    assert_true(argmax_key(2.0f, 1) > argmax_key(2.0f, 2));
    assert_true(argmax_key(-0.0f, 1) > argmax_key(0.0f, 2));
    assert_true(argmax_key(-INFINITY, 7) > argmax_key(NAN, 0));
    assert_int_equal(argmax_index(argmax_key(3.0f, 12345)), 12345);
}

// argmax_rows (core/argmax.cuh) against the host sampler's argmax: strided rows (each sequence's last row), ties,
// NaN, -inf, every entry NaN.
static void test_argmax_rows(void **state) {
    SKIP_IF_NO_GPU();
    const int rows = 5, V = 50304, T = 3;
    const size_t n = (size_t)rows * T * V;
    float *x = (float *)sllm_malloc(n * 4);
    for (size_t i = 0; i < n; i++) x[i] = (float)rng_normal(&g_rng);
    float *r1 = x + (size_t)(0 * T + T - 1) * V, *r2 = x + (size_t)(1 * T + T - 1) * V, *r3 = x + (size_t)(2 * T + T - 1) * V,
          *r4 = x + (size_t)(3 * T + T - 1) * V;
    r1[777] = 9.0f; r1[40000] = 9.0f; r1[5] = NAN;             // a tie: the first index wins; NaN never does
    for (int i = 0; i < V; i++) r2[i] = NAN;                     // every entry NaN: 0
    for (int i = 0; i < V; i++) r3[i] = -INFINITY;               // every entry -inf: the first
    r3[123] = NAN;
    r4[0] = -0.0f; for (int i = 1; i < V; i++) r4[i] = i % 2 ? 0.0f : -1.0f;  // -0 and +0 tie: index 0
    float *dx = dev_f32(x, n);
    unsigned long long *dbest, best[rows];
    cudaCheck(cudaMalloc((void **)&dbest, 8 * rows));
    poison(dbest, 8 * rows);
    argmax_rows(dbest, dx + (size_t)(T - 1) * V, (size_t)T * V, rows, V, 0);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(best, dbest, 8 * rows, cudaMemcpyDeviceToHost));
    for (int r = 0; r < rows; r++) {
        const int want = sampler_argmax(x + ((size_t)r * T + T - 1) * V, V), got = argmax_index(best[r]);
        printf("  argmax row %d: %d, host sampler %d\n", r, got, want);
        assert_int_equal(got, want);
    }
    assert_int_equal(argmax_index(best[0]), 777);
    assert_int_equal(argmax_index(best[1]), 0);
    free(x);
    cudaFree(dx); cudaFree(dbest);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_rmsnorm),    cmocka_unit_test(test_rope),  cmocka_unit_test(test_embedding),
        cmocka_unit_test(test_buckets),
        cmocka_unit_test(test_classifier), cmocka_unit_test(test_ffn),   cmocka_unit_test(test_adamw_and_norm),
        cmocka_unit_test(test_adamw_closed_form), cmocka_unit_test(test_adamw_bf16_moments),
        cmocka_unit_test(test_adamw_no_master),
        cmocka_unit_test(test_matmul_batched),  cmocka_unit_test(test_matmul_relu_mask),
        cmocka_unit_test(test_gemv),
        cmocka_unit_test(test_argmax_rows),
    };
    GPU_TEST_PREFLIGHT("test_kernels", tests);
    g_seed = gpu_test_seed("test_kernels");
    rng_seed(&g_rng, g_seed);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
