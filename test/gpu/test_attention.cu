// GPU tests of core/attention.cuh: every variant (simple warp-per-row; fast v1 = 64-row forward + atomic dq;
// fast v2 = 128-row forward + deterministic dq kernel (the default); fast v1 forward + 64-row deterministic dq)
// against a CPU float64 reference of causal softmax attention (forward) and its analytic gradient (backward),
// and bitwise reproducibility of the default (deterministic) backward across runs.
//
// Inputs are random bf16 (fresh seed per run, printed; SLLM_TEST_SEED=<n> repeats one). Every output buffer is
// poisoned with NaN before each run, so an unwritten element fails the test.
// Tolerances: ||x - ref|| / max(||ref||, 1e-2 sqrt(n)) < 1e-2 for out, dq, dk, dv. Why 1e-2: the outputs are
// rounded to bf16 (relative 2^-9 ~ 2e-3 per element), and the fast path also rounds P and dS to bf16 before the
// tensor-core products (another few 1e-3, random, so the norm-wise error stays ~3e-3..5e-3); 1e-2 leaves a 2x
// margin while any indexing/masking bug gives O(1). The floor in the denominator handles outputs that are exactly
// zero in the reference (T = 1: dq = dk = 0). lse is fp32 math on the same bf16 inputs: max |lse - ref| < 2e-3.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>  // no extern "C" guards of its own
}
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "attention.cuh"
#include "gpu_harness.h"
#include "rng.h"

static uint64_t g_seed;

// ---- CPU float64 reference -------------------------------------------------------------------------------
// q [B,T,H,hd], k/v [B,T,KVH,hd], dout [B,T,H,hd] (floats holding bf16 values). Outputs zeroed inside.
static void ref_attention(const float *q, const float *k, const float *v, const float *dout, int B, int T, int H,
                          int KVH, int hd, double *out, double *lse, double *dq, double *dk, double *dv) {
    size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KVH * hd;
    memset(out, 0, nq * sizeof(double));
    memset(dq, 0, nq * sizeof(double));
    memset(dk, 0, nkv * sizeof(double));
    memset(dv, 0, nkv * sizeof(double));
    double scale = 1.0 / sqrt((double)hd);
    double *p = (double *)sllm_malloc((size_t)T * sizeof(double));
    double *dp = (double *)sllm_malloc((size_t)T * sizeof(double));
    int group = H / KVH;
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++) {
            int kvh = h / group;
            for (int i = 0; i < T; i++) {
                const float *qi = q + (((size_t)b * T + i) * H + h) * hd;
                const float *doi = dout + (((size_t)b * T + i) * H + h) * hd;
                double mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    const float *kj = k + (((size_t)b * T + j) * KVH + kvh) * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += (double)qi[d] * kj[d];
                    p[j] = s * scale;
                    if (p[j] > mx) mx = p[j];
                }
                double sum = 0;
                for (int j = 0; j <= i; j++) { p[j] = exp(p[j] - mx); sum += p[j]; }
                for (int j = 0; j <= i; j++) p[j] /= sum;
                lse[((size_t)b * H + h) * T + i] = mx + log(sum);
                double *oi = out + (((size_t)b * T + i) * H + h) * hd;
                double D = 0;
                for (int j = 0; j <= i; j++) {
                    const float *vj = v + (((size_t)b * T + j) * KVH + kvh) * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) { oi[d] += p[j] * vj[d]; s += (double)doi[d] * vj[d]; }
                    dp[j] = s;
                    D += p[j] * s;
                }
                double *dqi = dq + (((size_t)b * T + i) * H + h) * hd;
                for (int j = 0; j <= i; j++) {
                    double ds = p[j] * (dp[j] - D) * scale;
                    const float *kj = k + (((size_t)b * T + j) * KVH + kvh) * hd;
                    double *dkj = dk + (((size_t)b * T + j) * KVH + kvh) * hd;
                    double *dvj = dv + (((size_t)b * T + j) * KVH + kvh) * hd;
                    for (int d = 0; d < hd; d++) {
                        dqi[d] += ds * kj[d];
                        dkj[d] += ds * qi[d];
                        dvj[d] += p[j] * doi[d];
                    }
                }
            }
        }
    free(p);
    free(dp);
}

// ---- helpers ---------------------------------------------------------------------------------------------
static void fill_bf16_normal(Rng *r, float *x, size_t n, double std) {
    for (size_t i = 0; i < n; i++) x[i] = sllm_round_bf16((float)(rng_normal(r) * std));
}

// Relative L2 error with a floor on the denominator; fails (returns +inf) on any non-finite value.
static double rel_err(const float *x, const double *ref, size_t n, size_t *nonfinite) {
    double num = 0, den = 0;
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) { bad++; continue; }
        double d = x[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    *nonfinite = bad;
    if (bad) return INFINITY;
    double floor_ = 1e-2 * sqrt((double)n);
    return sqrt(num) / fmax(sqrt(den), floor_);
}

static void poison(void *dptr, size_t bytes) { cudaCheck(cudaMemset(dptr, 0xff, bytes)); }  // NaN in bf16 and fp32

typedef struct {
    int B, T, H, KVH, hd;
} Shape;

static void check_one(const char *what, const char *path, const Shape *s, const float *x, const double *ref, size_t n,
                      double tol) {
    size_t bad;
    double e = rel_err(x, ref, n, &bad);
    printf("  %-10s %-4s B=%d T=%4d H=%d KVH=%d hd=%3d  rel_err=%.3e  nonfinite=%zu\n", path, what, s->B, s->T, s->H,
           s->KVH, s->hd, e, bad);
    if (!(e < tol)) fail_msg("%s path %s: rel err %.3e >= %.1e (nonfinite %zu) at B=%d T=%d H=%d KVH=%d hd=%d seed=%llu",
                             path, what, e, tol, bad, s->B, s->T, s->H, s->KVH, s->hd, (unsigned long long)g_seed);
}

typedef struct {
    const char *name;
    AttnVariant v;
} NamedVariant;
static const NamedVariant k_variants[] = {
    {"simple", {ATTN_PATH_SIMPLE, 2, 1, 2}},
    {"v1", {ATTN_PATH_FAST, 1, 0, 1}},     // forward 64 rows per CTA, dq by fp32 atomics
    {"v2", {ATTN_PATH_FAST, 2, 1, 2}},     // forward 128 rows per CTA (mma.sync), deterministic 128-row dq kernel
    {"v1det", {ATTN_PATH_FAST, 1, 1, 1}},  // forward 64 rows, deterministic 64-row dq kernel
    {"wgf", {ATTN_PATH_FAST, 3, 1, 2}},    // the Hopper wgmma forward (hd 64 on sm_90; v2 elsewhere), v2's backward
    {"wg", {ATTN_PATH_FAST, 3, 2, 2}},     // default: the wgmma forward and backward (hd 64 on sm_90; v2 elsewhere)
};

static void run_shape(Shape s, int do_simple, int do_fast) {
    if (!cuda_device_available()) skip();
    Rng rng;
    uint64_t seed = g_seed ^ ((uint64_t)s.B << 48) ^ ((uint64_t)s.T << 24) ^ ((uint64_t)s.H << 16) ^
                    ((uint64_t)s.KVH << 8) ^ (uint64_t)s.hd;
    rng_seed(&rng, seed);
    size_t nq = (size_t)s.B * s.T * s.H * s.hd, nkv = (size_t)s.B * s.T * s.KVH * s.hd, nl = (size_t)s.B * s.H * s.T;
    float *q = (float *)sllm_malloc(nq * 4), *k = (float *)sllm_malloc(nkv * 4), *v = (float *)sllm_malloc(nkv * 4);
    float *dout = (float *)sllm_malloc(nq * 4);
    fill_bf16_normal(&rng, q, nq, 1.5);  // scaled scores ~ N(0, 1.5^2): peaked and flat rows both occur
    fill_bf16_normal(&rng, k, nkv, 1.0);
    fill_bf16_normal(&rng, v, nkv, 1.0);
    fill_bf16_normal(&rng, dout, nq, 1.0);
    double *r_out = (double *)sllm_malloc(nq * 8), *r_lse = (double *)sllm_malloc(nl * 8);
    double *r_dq = (double *)sllm_malloc(nq * 8), *r_dk = (double *)sllm_malloc(nkv * 8);
    double *r_dv = (double *)sllm_malloc(nkv * 8);
    ref_attention(q, k, v, dout, s.B, s.T, s.H, s.KVH, s.hd, r_out, r_lse, r_dq, r_dk, r_dv);

    bf16 *d_q, *d_k, *d_v, *d_out, *d_dout, *d_dq, *d_dk, *d_dv;
    float *d_lse, *d_scratch;
    cudaCheck(cudaMalloc(&d_q, nq * 2));
    cudaCheck(cudaMalloc(&d_k, nkv * 2));
    cudaCheck(cudaMalloc(&d_v, nkv * 2));
    cudaCheck(cudaMalloc(&d_out, nq * 2));
    cudaCheck(cudaMalloc(&d_dout, nq * 2));
    cudaCheck(cudaMalloc(&d_dq, nq * 2));
    cudaCheck(cudaMalloc(&d_dk, nkv * 2));
    cudaCheck(cudaMalloc(&d_dv, nkv * 2));
    cudaCheck(cudaMalloc(&d_lse, nl * 4));
    size_t scratch_bytes = attention_backward_scratch_bytes(s.B, s.T, s.H, s.KVH, s.hd);
    cudaCheck(cudaMalloc(&d_scratch, scratch_bytes));
    upload_bf16(d_q, q, nq);
    upload_bf16(d_k, k, nkv);
    upload_bf16(d_v, v, nkv);
    upload_bf16(d_dout, dout, nq);

    float *h_out = (float *)sllm_malloc(nq * 4), *h_lse = (float *)sllm_malloc(nl * 4);
    float *h_dq = (float *)sllm_malloc(nq * 4), *h_dk = (float *)sllm_malloc(nkv * 4);
    float *h_dv = (float *)sllm_malloc(nkv * 4);
    for (size_t pass = 0; pass < sizeof k_variants / sizeof k_variants[0]; pass++) {
        const AttnVariant *va = &k_variants[pass].v;
        AttnPath path = va->path;
        if ((path == ATTN_PATH_SIMPLE && !do_simple) || (path == ATTN_PATH_FAST && !do_fast)) continue;
        char pname[32];
        snprintf(pname, sizeof pname, "%s%s", k_variants[pass].name,
                 path == ATTN_PATH_FAST && !attention_fast_supported(s.hd) ? "(->simple)" : "");
        poison(d_out, nq * 2);
        poison(d_lse, nl * 4);
        poison(d_dq, nq * 2);
        poison(d_dk, nkv * 2);
        poison(d_dv, nkv * 2);
        poison(d_scratch, scratch_bytes);
        attention_forward_variant(va, d_out, d_lse, d_q, d_k, d_v, s.B, s.T, s.H, s.KVH, s.hd, 0);
        cudaCheck(cudaDeviceSynchronize());
        attention_backward_variant(va, d_dq, d_dk, d_dv, d_dout, d_out, d_lse, d_q, d_k, d_v, d_scratch, s.B, s.T, s.H,
                                s.KVH, s.hd, 0);
        cudaCheck(cudaDeviceSynchronize());
        download_bf16(h_out, d_out, nq);
        download_bf16(h_dq, d_dq, nq);
        download_bf16(h_dk, d_dk, nkv);
        download_bf16(h_dv, d_dv, nkv);
        cudaCheck(cudaMemcpy(h_lse, d_lse, nl * 4, cudaMemcpyDeviceToHost));
        double lse_max = 0;
        size_t lse_bad = 0;
        for (size_t i = 0; i < nl; i++) {
            if (!isfinite(h_lse[i])) { lse_bad++; continue; }
            lse_max = fmax(lse_max, fabs(h_lse[i] - r_lse[i]));
        }
        printf("  %-10s lse  max_abs_err=%.3e nonfinite=%zu\n", pname, lse_max, lse_bad);
        if (lse_bad || !(lse_max < 2e-3))
            fail_msg("%s path lse: max abs err %.3e, nonfinite %zu (seed=%llu)", pname, lse_max, lse_bad,
                     (unsigned long long)g_seed);
        check_one("out", pname, &s, h_out, r_out, nq, 1e-2);
        check_one("dq", pname, &s, h_dq, r_dq, nq, 1e-2);
        check_one("dk", pname, &s, h_dk, r_dk, nkv, 1e-2);
        check_one("dv", pname, &s, h_dv, r_dv, nkv, 1e-2);
    }
    cudaCheck(cudaFree(d_q));
    cudaCheck(cudaFree(d_k));
    cudaCheck(cudaFree(d_v));
    cudaCheck(cudaFree(d_out));
    cudaCheck(cudaFree(d_dout));
    cudaCheck(cudaFree(d_dq));
    cudaCheck(cudaFree(d_dk));
    cudaCheck(cudaFree(d_dv));
    cudaCheck(cudaFree(d_lse));
    cudaCheck(cudaFree(d_scratch));
    free(q); free(k); free(v); free(dout);
    free(r_out); free(r_lse); free(r_dq); free(r_dk); free(r_dv);
    free(h_out); free(h_lse); free(h_dq); free(h_dk); free(h_dv);
}

// Runs forward + backward of variant `va` (NULL: the env-default API attention_forward/backward) and copies the raw
// bits of out, lse, dq, dk, dv to the host (h: 5 buffers). Outputs and scratch are poisoned first.
typedef struct {
    bf16 *q, *k, *v, *dout, *out, *dq, *dk, *dv;
    float *lse, *scratch;
    size_t nq, nkv, nl, scratch_bytes;
} DevBufs;
static void run_bits(const AttnVariant *va, const DevBufs *d, const Shape *s, void *h[5]) {
    poison(d->out, d->nq * 2);
    poison(d->lse, d->nl * 4);
    poison(d->dq, d->nq * 2);
    poison(d->dk, d->nkv * 2);
    poison(d->dv, d->nkv * 2);
    poison(d->scratch, d->scratch_bytes);
    if (va) attention_forward_variant(va, d->out, d->lse, d->q, d->k, d->v, s->B, s->T, s->H, s->KVH, s->hd, 0);
    else attention_forward(d->out, d->lse, d->q, d->k, d->v, s->B, s->T, s->H, s->KVH, s->hd, 0);
    if (va)
        attention_backward_variant(va, d->dq, d->dk, d->dv, d->dout, d->out, d->lse, d->q, d->k, d->v, d->scratch,
                                   s->B, s->T, s->H, s->KVH, s->hd, 0);
    else
        attention_backward(d->dq, d->dk, d->dv, d->dout, d->out, d->lse, d->q, d->k, d->v, d->scratch, s->B, s->T,
                           s->H, s->KVH, s->hd, 0);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(h[0], d->out, d->nq * 2, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(h[1], d->lse, d->nl * 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(h[2], d->dq, d->nq * 2, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(h[3], d->dk, d->nkv * 2, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(h[4], d->dv, d->nkv * 2, cudaMemcpyDeviceToHost));
}

static size_t count_diff_u16(const void *a, const void *b, size_t n) {
    const uint16_t *x = (const uint16_t *)a, *y = (const uint16_t *)b;
    size_t c = 0;
    for (size_t i = 0; i < n; i++) c += x[i] != y[i];
    return c;
}

// The deterministic variants give the same bits on every run (out, lse, dq, dk, dv), and the env-default API
// (SLLM_ATTN* unset) is the default variant bit for bit. The atomic variant's dq differences are only reported.
static void check_determinism(Shape s) {
    if (!cuda_device_available()) skip();
    Rng rng;
    rng_seed(&rng, g_seed ^ 0x5eedull ^ ((uint64_t)s.hd << 32) ^ (uint64_t)s.T);
    DevBufs d;
    d.nq = (size_t)s.B * s.T * s.H * s.hd, d.nkv = (size_t)s.B * s.T * s.KVH * s.hd, d.nl = (size_t)s.B * s.H * s.T;
    d.scratch_bytes = attention_backward_scratch_bytes(s.B, s.T, s.H, s.KVH, s.hd);
    float *tmp = (float *)sllm_malloc(d.nq * 4);
    bf16 **bfs[8] = {&d.q, &d.k, &d.v, &d.dout, &d.out, &d.dq, &d.dk, &d.dv};
    size_t ns[8] = {d.nq, d.nkv, d.nkv, d.nq, d.nq, d.nq, d.nkv, d.nkv};
    for (int i = 0; i < 8; i++) cudaCheck(cudaMalloc(bfs[i], ns[i] * 2));
    cudaCheck(cudaMalloc(&d.lse, d.nl * 4));
    cudaCheck(cudaMalloc(&d.scratch, d.scratch_bytes));
    for (int i = 0; i < 4; i++) {
        fill_bf16_normal(&rng, tmp, ns[i], i == 0 ? 1.5 : 1.0);
        upload_bf16(*bfs[i], tmp, ns[i]);
    }
    size_t sizes[5] = {d.nq * 2, d.nl * 4, d.nq * 2, d.nkv * 2, d.nkv * 2};
    void *a[5], *b[5];
    for (int i = 0; i < 5; i++) {
        a[i] = sllm_malloc(sizes[i]);
        b[i] = sllm_malloc(sizes[i]);
    }
    const char *names[5] = {"out", "lse", "dq", "dk", "dv"};
    unsetenv("SLLM_ATTN");
    unsetenv("SLLM_ATTN_FWD");
    unsetenv("SLLM_ATTN_BWD");
    for (size_t vi = 1; vi < sizeof k_variants / sizeof k_variants[0]; vi++) {
        const AttnVariant *va = &k_variants[vi].v;
        run_bits(va, &d, &s, a);
        for (int rep = 0; rep < 3; rep++) {
            run_bits(va, &d, &s, b);
            for (int i = 0; i < 5; i++) {
                int same = memcmp(a[i], b[i], sizes[i]) == 0;
                if (va->bwd_det || i != 2) {
                    if (!same)
                        fail_msg("%s %s differs between runs (B=%d T=%d H=%d KVH=%d hd=%d seed=%llu)",
                                 k_variants[vi].name, names[i], s.B, s.T, s.H, s.KVH, s.hd,
                                 (unsigned long long)g_seed);
                } else if (rep == 0) {
                    printf("  %-6s dq (fp32 atomics): %zu of %zu bf16 values differ between two runs (not asserted)\n",
                           k_variants[vi].name, count_diff_u16(a[i], b[i], d.nq), d.nq);
                }
            }
        }
        printf("  %-6s hd=%3d B=%d T=%d H=%d KVH=%d: 4 runs, %s\n", k_variants[vi].name, s.hd, s.B, s.T, s.H, s.KVH,
               va->bwd_det ? "all outputs bitwise identical" : "out/lse/dk/dv bitwise identical");
        const AttnVariant dv = attention_variant_default(ATTN_PATH_FAST);
        if (va->fwd_mt == dv.fwd_mt && va->bwd_det == dv.bwd_det && va->dq_mt == dv.dq_mt) {
            // the default variant: the env-default API must give the same bits
            run_bits(NULL, &d, &s, b);
            for (int i = 0; i < 5; i++)
                if (memcmp(a[i], b[i], sizes[i]) != 0)
                    fail_msg("attention_forward/backward (env default) %s differs from the %s variant", names[i],
                             k_variants[vi].name);
        }
    }
    for (int i = 0; i < 5; i++) {
        free(a[i]);
        free(b[i]);
    }
    for (int i = 0; i < 8; i++) cudaCheck(cudaFree(*bfs[i]));
    cudaCheck(cudaFree(d.lse));
    cudaCheck(cudaFree(d.scratch));
    free(tmp);
}

// ---- tests -----------------------------------------------------------------------------------------------
static void test_validate(void **state) {
    (void)state;
    char err[256];
    assert_int_equal(attention_validate(2, 100, 4, 2, 64, err, sizeof err), 0);
    assert_int_equal(attention_validate(2, 100, 4, 3, 64, err, sizeof err), -1);
    assert_non_null(strstr(err, "KVH"));
    assert_int_equal(attention_validate(2, 100, 4, 4, 136, err, sizeof err), -1);
    assert_non_null(strstr(err, "head_dim"));
    assert_int_equal(attention_validate(2, 100, 4, 4, 12, err, sizeof err), -1);
    assert_int_equal(attention_validate(2, 0, 4, 4, 64, err, sizeof err), -1);
    assert_true(attention_fast_supported(64) && attention_fast_supported(128) && attention_fast_supported(32));
    assert_false(attention_fast_supported(16));
    setenv("SLLM_ATTN", "simple", 1);
    assert_int_equal(attention_path_from_env(), ATTN_PATH_SIMPLE);
    setenv("SLLM_ATTN", "fast", 1);
    assert_int_equal(attention_path_from_env(), ATTN_PATH_FAST);
    unsetenv("SLLM_ATTN");
    assert_int_equal(attention_path_from_env(), ATTN_PATH_FAST);
    // SLLM_ATTN_FWD / SLLM_ATTN_BWD (NULL: unset) -> the variant's forward and backward kernels
    const struct { const char *fwd, *bwd; int fwd_mt, bwd_det; } env_cases[] = {
        {NULL, NULL, 3, 2}, {"wg", "wg", 3, 2}, {"v1", "atomic", 1, 0}, {"v2", "det", 2, 1}};
    for (size_t i = 0; i < sizeof env_cases / sizeof env_cases[0]; i++) {
        if (env_cases[i].fwd) setenv("SLLM_ATTN_FWD", env_cases[i].fwd, 1);
        else unsetenv("SLLM_ATTN_FWD");
        if (env_cases[i].bwd) setenv("SLLM_ATTN_BWD", env_cases[i].bwd, 1);
        else unsetenv("SLLM_ATTN_BWD");
        const AttnVariant v = attention_variant_from_env();
        assert_int_equal(v.path, ATTN_PATH_FAST);
        assert_int_equal(v.fwd_mt, env_cases[i].fwd_mt);
        assert_int_equal(v.bwd_det, env_cases[i].bwd_det);
        if (env_cases[i].bwd_det == 1) assert_int_equal(v.dq_mt, 2);
    }
    unsetenv("SLLM_ATTN_FWD");
    unsetenv("SLLM_ATTN_BWD");
}

static void test_deterministic(void **state) {
    (void)state;
    check_determinism((Shape){2, 1024, 8, 2, 64});
    check_determinism((Shape){1, 300, 4, 4, 128});
    check_determinism((Shape){2, 257, 4, 1, 32});
}

// T not a multiple of the 64-row blocks, T = 1, B > 1, MHA
static void test_mha_hd64_odd_T(void **state) {
    (void)state;
    int Ts[] = {1, 17, 64, 100, 257};
    for (int i = 0; i < 5; i++) run_shape((Shape){2, Ts[i], 4, 4, 64}, 1, 1);
}
static void test_gqa_hd64(void **state) {
    (void)state;
    run_shape((Shape){2, 100, 4, 2, 64}, 1, 1);
    run_shape((Shape){2, 257, 4, 2, 64}, 1, 1);
    run_shape((Shape){1, 257, 4, 1, 64}, 1, 1);
    run_shape((Shape){3, 17, 4, 1, 64}, 1, 1);
}
static void test_hd128(void **state) {
    (void)state;
    run_shape((Shape){2, 100, 4, 4, 128}, 1, 1);
    run_shape((Shape){1, 257, 4, 2, 128}, 1, 1);
    run_shape((Shape){2, 1, 4, 1, 128}, 1, 1);
}
static void test_hd32(void **state) {
    (void)state;
    run_shape((Shape){2, 257, 4, 4, 32}, 1, 1);
    run_shape((Shape){2, 100, 4, 1, 32}, 1, 1);
}
// head dims without a fast kernel: ATTN_PATH_FAST must fall back to the simple kernels and stay correct
static void test_small_hd_fallback(void **state) {
    (void)state;
    run_shape((Shape){2, 33, 4, 2, 16}, 1, 1);
    run_shape((Shape){1, 70, 2, 1, 8}, 1, 1);
    run_shape((Shape){1, 65, 4, 4, 48}, 1, 1);
}
static void test_large_hd64(void **state) {
    (void)state;
    run_shape((Shape){2, 1024, 8, 8, 64}, 1, 1);
}

// The forward's optional KV-cache output (the inference prefill): the fast kernels write k, v bit for bit into rows
// 0 .. T-1 of each sequence of a cache with S > T positions (from shared memory, the diagonal key blocks), leave the
// rows past T untouched and give the same out bits as without the cache; the simple path writes nothing and says so.
static void test_kv_cache_write(void **state) {
    (void)state;
    if (!cuda_device_available()) skip();
    const Shape shapes[] = {{2, 257, 4, 2, 64}, {2, 100, 4, 4, 128}, {1, 65, 4, 1, 32}, {2, 1, 4, 4, 64},
                            {1, 33, 4, 2, 48}};
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const Shape sh = shapes[si];
        const int S = sh.T + 37, kvw = sh.KVH * sh.hd;
        const size_t nq = (size_t)sh.B * sh.T * sh.H * sh.hd, nkv = (size_t)sh.B * sh.T * kvw, nl = (size_t)sh.B * sh.H * sh.T;
        const size_t ncache = (size_t)sh.B * S * kvw;
        Rng rng;
        rng_seed(&rng, g_seed + 71 * si);
        float *q = (float *)sllm_malloc(nq * 4), *k = (float *)sllm_malloc(nkv * 4), *v = (float *)sllm_malloc(nkv * 4);
        fill_bf16_normal(&rng, q, nq, 1.5);
        fill_bf16_normal(&rng, k, nkv, 1.0);
        fill_bf16_normal(&rng, v, nkv, 1.0);
        bf16 *d_q, *d_k, *d_v, *d_out, *d_kc, *d_vc;
        float *d_lse;
        cudaCheck(cudaMalloc(&d_q, nq * 2)); cudaCheck(cudaMalloc(&d_k, nkv * 2)); cudaCheck(cudaMalloc(&d_v, nkv * 2));
        cudaCheck(cudaMalloc(&d_out, nq * 2)); cudaCheck(cudaMalloc(&d_lse, nl * 4));
        cudaCheck(cudaMalloc(&d_kc, ncache * 2)); cudaCheck(cudaMalloc(&d_vc, ncache * 2));
        upload_bf16(d_q, q, nq); upload_bf16(d_k, k, nkv); upload_bf16(d_v, v, nkv);
        uint16_t *hk = (uint16_t *)sllm_malloc(nkv * 2), *hv = (uint16_t *)sllm_malloc(nkv * 2);
        uint16_t *hkc = (uint16_t *)sllm_malloc(ncache * 2), *hvc = (uint16_t *)sllm_malloc(ncache * 2);
        uint16_t *o1 = (uint16_t *)sllm_malloc(nq * 2), *o2 = (uint16_t *)sllm_malloc(nq * 2);
        cudaCheck(cudaMemcpy(hk, d_k, nkv * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(hv, d_v, nkv * 2, cudaMemcpyDeviceToHost));
        for (size_t pass = 0; pass < sizeof k_variants / sizeof k_variants[0]; pass++) {
            const AttnVariant *va = &k_variants[pass].v;
            poison(d_out, nq * 2);
            attention_forward_variant(va, d_out, d_lse, d_q, d_k, d_v, sh.B, sh.T, sh.H, sh.KVH, sh.hd, 0);
            cudaCheck(cudaMemcpy(o1, d_out, nq * 2, cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemset(d_kc, 0xAB, ncache * 2));
            cudaCheck(cudaMemset(d_vc, 0xCD, ncache * 2));
            poison(d_out, nq * 2);
            const AttnKVCache cache = {d_kc, d_vc, S};
            const int wrote = attention_forward_variant(va, d_out, d_lse, d_q, d_k, d_v, sh.B, sh.T, sh.H, sh.KVH,
                                                        sh.hd, 0, &cache);
            cudaCheck(cudaDeviceSynchronize());
            cudaCheck(cudaMemcpy(o2, d_out, nq * 2, cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(hkc, d_kc, ncache * 2, cudaMemcpyDeviceToHost));
            cudaCheck(cudaMemcpy(hvc, d_vc, ncache * 2, cudaMemcpyDeviceToHost));
            assert_memory_equal(o1, o2, nq * 2);
            const int fast = va->path == ATTN_PATH_FAST && attention_fast_supported(sh.hd);
            assert_int_equal(wrote, fast);
            size_t bad = 0;
            for (int b = 0; b < sh.B; b++)
                for (int t = 0; t < S; t++)
                    for (int c = 0; c < kvw; c++) {
                        const size_t ci = ((size_t)b * S + t) * kvw + c, si2 = ((size_t)b * sh.T + t) * kvw + c;
                        const int in = wrote && t < sh.T;
                        if (hkc[ci] != (in ? hk[si2] : 0xABAB) || hvc[ci] != (in ? hv[si2] : 0xCDCD)) bad++;
                    }
            printf("  %-6s B=%d T=%4d H=%d KVH=%d hd=%3d S=%d: cache %s, %zu wrong elements, out same bits\n",
                   k_variants[pass].name, sh.B, sh.T, sh.H, sh.KVH, sh.hd, S, wrote ? "written" : "untouched", bad);
            assert_int_equal(bad, 0);
        }
        cudaCheck(cudaFree(d_q)); cudaCheck(cudaFree(d_k)); cudaCheck(cudaFree(d_v)); cudaCheck(cudaFree(d_out));
        cudaCheck(cudaFree(d_lse)); cudaCheck(cudaFree(d_kc)); cudaCheck(cudaFree(d_vc));
        free(q); free(k); free(v); free(hk); free(hv); free(hkc); free(hvc); free(o1); free(o2);
    }
}

// Runs last: on an sm_90 GPU every "wg" pass above must have launched the wgmma kernel, never fallen back to v2.
static void test_wgmma_ran(void **state) {
    (void)state;
    if (!cuda_device_available() || !attention_wgmma_supported(AWG_HD)) skip();
    printf("  wgmma forward: %lld launches, %d fallbacks\n", g_attn_wgmma_launches, g_attn_wgmma_fallbacks);
    assert_true(g_attn_wgmma_launches > 0);
    assert_int_equal(g_attn_wgmma_fallbacks, 0);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validate),        cmocka_unit_test(test_mha_hd64_odd_T),
        cmocka_unit_test(test_gqa_hd64),        cmocka_unit_test(test_hd128),
        cmocka_unit_test(test_hd32),            cmocka_unit_test(test_small_hd_fallback),
        cmocka_unit_test(test_large_hd64),      cmocka_unit_test(test_deterministic),
        cmocka_unit_test(test_kv_cache_write),  cmocka_unit_test(test_wgmma_ran),
    };
    GPU_TEST_PREFLIGHT("test_attention", tests);
    g_seed = gpu_test_seed("test_attention");
    return cmocka_run_group_tests_name("attention", tests, NULL, NULL);
}
