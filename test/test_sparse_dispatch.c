// The per-layer dense/sparse FFN dispatch of the trainer (model/sparse_dispatch.h): hysteresis, the dense-row guard,
// the dwell time, forced paths, and that the decision is a function of the (rank-summed) counts alone.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "model/sparse_dispatch.h"

static SparseDispatchParams params(void) {
    SparseDispatchParams p;
    p.on_nnz = 40; p.off_nnz = 56; p.max_dense_frac = 0.05; p.min_dwell = 3;
    return p;
}

static void set_counts(uint64_t *c, double nnz, uint64_t tokens, uint64_t dense_rows, uint64_t rows) {
    c[SC_PAIRS] = (uint64_t)(nnz * tokens + 0.5);
    c[SC_TOKENS] = tokens;
    c[SC_DENSE_ROWS] = dense_rows;
    c[SC_ROWS] = rows;
}

static void test_defaults_scale_with_d_ff(void **state) {
    (void)state;
    SparseDispatchParams p = sparse_dispatch_defaults(5632);
    assert_true(p.on_nnz > 39.99 && p.on_nnz < 40.01);
    assert_true(p.off_nnz > 55.99 && p.off_nnz < 56.01);
    p = sparse_dispatch_defaults(2816);
    assert_true(p.on_nnz > 19.99 && p.on_nnz < 20.01);
    assert_true(p.off_nnz > p.on_nnz);
}

static void test_hysteresis(void **state) {
    (void)state;
    const SparseDispatchParams p = params();
    uint64_t c[SPARSE_COUNTS_PER_LAYER];
    // dense layer: turns sparse only below on_nnz
    set_counts(c, 45, 8192, 0, 0);
    assert_int_equal(sparse_dispatch_decide(0, c, 10, &p), 0);
    set_counts(c, 39.5, 8192, 0, 0);
    assert_int_equal(sparse_dispatch_decide(0, c, 10, &p), 1);
    // sparse layer: stays sparse between the thresholds, turns dense above off_nnz
    set_counts(c, 45, 8192, 0, 8192);
    assert_int_equal(sparse_dispatch_decide(1, c, 10, &p), 1);
    set_counts(c, 55.9, 8192, 0, 8192);
    assert_int_equal(sparse_dispatch_decide(1, c, 10, &p), 1);
    set_counts(c, 56.5, 8192, 0, 8192);
    assert_int_equal(sparse_dispatch_decide(1, c, 10, &p), 0);
    // too many dense rows: back to dense even when sparse enough on average
    set_counts(c, 20, 8192, 500, 8192);
    assert_int_equal(sparse_dispatch_decide(1, c, 10, &p), 0);
    set_counts(c, 20, 8192, 400, 8192);
    assert_int_equal(sparse_dispatch_decide(1, c, 10, &p), 1);
    // dwell: no switch before min_dwell steps on the path
    set_counts(c, 10, 8192, 0, 0);
    assert_int_equal(sparse_dispatch_decide(0, c, 2, &p), 0);
    assert_int_equal(sparse_dispatch_decide(0, c, 3, &p), 1);
    // no tokens (no training forward): keep the path
    set_counts(c, 0, 0, 0, 0);
    assert_int_equal(sparse_dispatch_decide(1, c, 10, &p), 1);
    assert_int_equal(sparse_dispatch_decide(0, c, 10, &p), 0);
}

// A run of steps through sparse_dispatch_update: the switch events, the dwell, and forced modes.
static void test_update_sequence(void **state) {
    (void)state;
    const SparseDispatchParams p = params();
    enum { L = 3 };
    int sparse[L] = {0, 0, 0}, dwell[L] = {3, 3, 3};
    uint64_t counts[L * SPARSE_COUNTS_PER_LAYER];
    SparseSwitch ev[L];
    // step 1: layer 1 sparse enough, layer 2 not
    set_counts(counts + 0 * SPARSE_COUNTS_PER_LAYER, 100, 1000, 0, 0);
    set_counts(counts + 1 * SPARSE_COUNTS_PER_LAYER, 30, 1000, 0, 0);
    set_counts(counts + 2 * SPARSE_COUNTS_PER_LAYER, 50, 1000, 0, 0);
    int n = sparse_dispatch_update(L, FFN_PATH_AUTO, sparse, dwell, counts, &p, ev);
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].layer, 1);
    assert_int_equal(ev[0].to_sparse, 1);
    assert_true(ev[0].nnz > 29.9 && ev[0].nnz < 30.1);
    assert_int_equal(sparse[1], 1);
    // step 2: layer 1 spikes over off_nnz, but it has been on the path for 1 step only
    set_counts(counts + 1 * SPARSE_COUNTS_PER_LAYER, 80, 1000, 0, 1000);
    n = sparse_dispatch_update(L, FFN_PATH_AUTO, sparse, dwell, counts, &p, ev);
    assert_int_equal(n, 0);
    n = sparse_dispatch_update(L, FFN_PATH_AUTO, sparse, dwell, counts, &p, ev);
    assert_int_equal(n, 0);
    n = sparse_dispatch_update(L, FFN_PATH_AUTO, sparse, dwell, counts, &p, ev);  // 3 steps on the path
    assert_int_equal(n, 1);
    assert_int_equal(ev[0].layer, 1);
    assert_int_equal(ev[0].to_sparse, 0);
    // forced modes ignore the counts
    n = sparse_dispatch_update(L, FFN_PATH_SPARSE, sparse, dwell, counts, &p, ev);
    assert_int_equal(n, 3);
    for (int l = 0; l < L; l++) assert_int_equal(sparse[l], 1);
    n = sparse_dispatch_update(L, FFN_PATH_DENSE, sparse, dwell, counts, &p, ev);
    assert_int_equal(n, 3);
    for (int l = 0; l < L; l++) assert_int_equal(sparse[l], 0);
}

// Two "ranks" with different local counts decide the same once the counts are summed; deciding on the local counts
// alone would differ (the reason for the all-reduce).
static void test_same_decision_on_summed_counts(void **state) {
    (void)state;
    const SparseDispatchParams p = params();
    uint64_t r0[SPARSE_COUNTS_PER_LAYER], r1[SPARSE_COUNTS_PER_LAYER], sum[SPARSE_COUNTS_PER_LAYER];
    set_counts(r0, 35, 1000, 0, 0);
    set_counts(r1, 47, 1000, 0, 0);
    assert_int_not_equal(sparse_dispatch_decide(0, r0, 10, &p), sparse_dispatch_decide(0, r1, 10, &p));
    for (int i = 0; i < SPARSE_COUNTS_PER_LAYER; i++) sum[i] = r0[i] + r1[i];
    assert_int_equal(sparse_dispatch_decide(0, sum, 10, &p), 0);  // 41 per token: stays dense on both
}

static void test_path_names(void **state) {
    (void)state;
    assert_int_equal(ffn_path_parse("auto"), FFN_PATH_AUTO);
    assert_int_equal(ffn_path_parse("dense"), FFN_PATH_DENSE);
    assert_int_equal(ffn_path_parse("sparse"), FFN_PATH_SPARSE);
    assert_int_equal(ffn_path_parse("sparsee"), -1);
    assert_int_equal(ffn_path_parse(""), -1);
    assert_string_equal(ffn_path_name(FFN_PATH_SPARSE), "sparse");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_defaults_scale_with_d_ff),
        cmocka_unit_test(test_hysteresis),
        cmocka_unit_test(test_update_sequence),
        cmocka_unit_test(test_same_decision_on_summed_counts),
        cmocka_unit_test(test_path_names),
    };
    return cmocka_run_group_tests_name("sparse_dispatch", tests, NULL, NULL);
}
