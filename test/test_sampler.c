// core/sampler.h: greedy, temperature, top-k and top-p sampling against exact distributions computed here.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "rng.h"
#include "sampler.h"

#define V_SMALL 10

// Greedy takes the first maximum, ignores NaN, and does not touch the Rng.
static void test_greedy(void **state) {
    (void)state;
    float l[6] = {0.5f, 2.0f, -1.0f, 2.0f, NAN, 1.0f};
    SamplerWork w;
    assert_int_equal(sampler_work_alloc(&w, 6), 0);
    SamplerParams p = {0.0f, 0, 1.0f};
    Rng r, r0;
    rng_seed(&r, 7);
    r0 = r;
    assert_int_equal(sampler_sample(l, 6, &p, &r, &w), 1);
    assert_memory_equal(&r, &r0, sizeof r);
    float n[3] = {NAN, NAN, 3.0f};
    assert_int_equal(sampler_sample(n, 3, &p, &r, &w), 2);
    // top_k = 1 at any temperature is greedy too
    p.temperature = 5.0f;
    p.top_k = 1;
    for (int i = 0; i < 20; i++) assert_int_equal(sampler_sample(l, 6, &p, &r, &w), 1);
    // bad arguments
    p.top_p = 0.0f;
    assert_int_equal(sampler_sample(l, 6, &p, &r, &w), -1);
    p.top_p = 1.0f;
    assert_int_equal(sampler_sample(l, 0, &p, &r, &w), -1);
    sampler_work_free(&w);
}

// Exact probabilities of the sampler's rule, computed the slow way (full sort).
static void expected_probs(const float *l, int V, const SamplerParams *p, double *out) {
    int order[64];
    for (int i = 0; i < V; i++) order[i] = i;
    for (int a = 0; a < V; a++)
        for (int b = a + 1; b < V; b++)
            if (l[order[b]] > l[order[a]] || (l[order[b]] == l[order[a]] && order[b] < order[a])) {
                int t = order[a]; order[a] = order[b]; order[b] = t;
            }
    int n = p->top_k > 0 && p->top_k < V ? p->top_k : V;
    double e[64], tot = 0;
    for (int i = 0; i < n; i++) { e[i] = exp((l[order[i]] - l[order[0]]) / p->temperature); tot += e[i]; }
    if (p->top_p < 1.0f) {
        double acc = 0;
        for (int i = 0; i < n; i++) {
            acc += e[i];
            if (acc >= p->top_p * tot) { n = i + 1; break; }
        }
        tot = 0;
        for (int i = 0; i < n; i++) tot += e[i];
    }
    for (int i = 0; i < V; i++) out[i] = 0;
    for (int i = 0; i < n; i++) out[order[i]] = e[i] / tot;
}

// Frequencies over many draws against the exact probabilities: every |f - p| < 5 sigma + 1e-3, and indices with
// probability 0 never drawn.
static void check_distribution(const float *l, int V, SamplerParams p, int draws) {
    double want[64];
    expected_probs(l, V, &p, want);
    SamplerWork w;
    assert_int_equal(sampler_work_alloc(&w, V), 0);
    Rng r;
    rng_seed(&r, 1234 + (uint64_t)p.top_k * 17 + (uint64_t)(p.top_p * 1000));
    int cnt[64] = {0};
    for (int d = 0; d < draws; d++) {
        int t = sampler_sample(l, V, &p, &r, &w);
        assert_true(t >= 0 && t < V);
        cnt[t]++;
    }
    for (int i = 0; i < V; i++) {
        double f = (double)cnt[i] / draws, sig = sqrt(want[i] * (1 - want[i]) / draws);
        if (want[i] == 0.0) assert_int_equal(cnt[i], 0);
        if (fabs(f - want[i]) > 5 * sig + 1e-3)
            fail_msg("T=%g k=%d p=%g: index %d drawn %.4f, expected %.4f", p.temperature, p.top_k, p.top_p, i, f,
                     want[i]);
    }
    sampler_work_free(&w);
}

static void test_temperature_topk_topp(void **state) {
    (void)state;
    float l[V_SMALL] = {1.0f, 0.2f, 2.5f, -0.7f, 2.5f, 0.0f, 1.7f, -3.0f, 0.9f, 1.1f};
    check_distribution(l, V_SMALL, (SamplerParams){1.0f, 0, 1.0f}, 200000);
    check_distribution(l, V_SMALL, (SamplerParams){0.5f, 0, 1.0f}, 200000);
    check_distribution(l, V_SMALL, (SamplerParams){2.0f, 3, 1.0f}, 200000);  // ties at the top: 2 and 4
    check_distribution(l, V_SMALL, (SamplerParams){1.0f, 0, 0.6f}, 200000);
    check_distribution(l, V_SMALL, (SamplerParams){0.8f, 5, 0.9f}, 200000);
}

// A large vocabulary (the top-p path grows its sorted candidate set past 64 and 256): the nucleus is exactly the
// smallest prefix of the sorted probabilities with mass >= top_p; checked on the set of indices ever drawn.
static void test_large_vocab_nucleus(void **state) {
    (void)state;
    const int V = 50000;
    float *l = malloc(sizeof(float) * V);
    double *e = malloc(sizeof(double) * V);
    int *ord = malloc(sizeof(int) * V);
    Rng g;
    rng_seed(&g, 99);
    for (int i = 0; i < V; i++) l[i] = (float)(rng_normal(&g) * 0.3);  // flat: the nucleus holds thousands
    SamplerParams p = {1.0f, 0, 0.5f};
    // exact nucleus: shell sort by (logit desc, index asc)
    for (int i = 0; i < V; i++) ord[i] = i;
    for (int gap = V / 2; gap > 0; gap /= 2)
        for (int i = gap; i < V; i++) {
            int t = ord[i], j = i;
            while (j >= gap && (l[ord[j - gap]] < l[t] || (l[ord[j - gap]] == l[t] && ord[j - gap] > t))) {
                ord[j] = ord[j - gap];
                j -= gap;
            }
            ord[j] = t;
        }
    double tot = 0;
    for (int i = 0; i < V; i++) { e[i] = exp((double)l[ord[i]] - l[ord[0]]); tot += e[i]; }
    double acc = 0;
    int n = V;
    for (int i = 0; i < V; i++) {
        acc += e[i];
        if (acc >= p.top_p * tot) { n = i + 1; break; }
    }
    assert_true(n > 256);
    char *in = calloc(V, 1);
    for (int i = 0; i < n; i++) in[ord[i]] = 1;
    SamplerWork w;
    assert_int_equal(sampler_work_alloc(&w, V), 0);
    Rng r;
    rng_seed(&r, 5);
    for (int d = 0; d < 300; d++) {
        int t = sampler_sample(l, V, &p, &r, &w);
        assert_true(t >= 0 && t < V);
        if (!in[t]) fail_msg("index %d outside the nucleus of %d tokens", t, n);
    }
    // deterministic for a seed
    Rng r1, r2;
    rng_seed(&r1, 77);
    rng_seed(&r2, 77);
    for (int d = 0; d < 100; d++) assert_int_equal(sampler_sample(l, V, &p, &r1, &w), sampler_sample(l, V, &p, &r2, &w));
    sampler_work_free(&w);
    free(l); free(e); free(ord); free(in);
}

// sampler_select and sampler_nucleus against a full sort, on many random arrays with ties: the first k entries are
// exactly the k best (value descending, then index ascending), and the nucleus count is the smallest prefix with the
// mass asked for.
static float rank_cmp_f[400];
static int by_rank(const void *a, const void *b) {
    int x = *(const int *)a, y = *(const int *)b;
    if (rank_cmp_f[x] != rank_cmp_f[y]) return rank_cmp_f[x] > rank_cmp_f[y] ? -1 : 1;
    return x - y;
}
static void test_select_and_nucleus_exact(void **state) {
    (void)state;
    Rng g;
    rng_seed(&g, 4242);
    float v[400];
    int ix[400], ord[400];
    char in[400];
    for (int trial = 0; trial < 2000; trial++) {
        const int n = 2 + (int)rng_below(&g, 300);
        for (int i = 0; i < n; i++) rank_cmp_f[i] = (float)(1 + rng_below(&g, 12));  // many ties
        for (int i = 0; i < n; i++) ord[i] = i;
        qsort(ord, n, sizeof(int), by_rank);
        // top-k
        const int k = 1 + (int)rng_below(&g, n - 1);
        for (int i = 0; i < n; i++) { v[i] = rank_cmp_f[i]; ix[i] = i; }
        sampler_select(v, ix, n, k);
        memset(in, 0, n);
        for (int i = 0; i < k; i++) in[ix[i]] = 1;
        for (int i = 0; i < k; i++)
            if (!in[ord[i]]) fail_msg("trial %d: top-%d of %d misses index %d", trial, k, n, ord[i]);
        // nucleus on the same values as masses
        double tot = 0;
        for (int i = 0; i < n; i++) tot += rank_cmp_f[i];
        const double target = tot * (0.05 + 0.9 * rng_uniform(&g));
        double acc = 0;
        int want = n;
        for (int i = 0; i < n; i++) {
            acc += rank_cmp_f[ord[i]];
            if (acc >= target) { want = i + 1; break; }
        }
        for (int i = 0; i < n; i++) { v[i] = rank_cmp_f[i]; ix[i] = i; }
        const int got = sampler_nucleus(v, ix, n, target);
        if (got != want) fail_msg("trial %d: nucleus of %d for mass %.3f: %d, expected %d", trial, n, target, got, want);
        memset(in, 0, n);
        for (int i = 0; i < got; i++) in[ix[i]] = 1;
        for (int i = 0; i < want; i++)
            if (!in[ord[i]]) fail_msg("trial %d: the nucleus misses index %d", trial, ord[i]);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_greedy),
        cmocka_unit_test(test_temperature_topk_topp),
        cmocka_unit_test(test_large_vocab_nucleus),
        cmocka_unit_test(test_select_and_nucleus_exact),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
