// The TwELL FFN's dense / sparse dispatch model (twell/dispatch.h), host logic on the CPU: the tile model's crossover
// and hysteresis, the overflow term, the defaults' decisions at the paper's shape, the decode models (eager and
// graph), and twell_dispatch_fit (the calibration's fit, its anchor on the measured whole call, and the fallback to
// the measured ratio when nothing can be fitted).
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "twell/dispatch.h"

static void test_tile_model(void **state) {
    (void)state;
    TwellDispatchModel m = {0.5, 0.01, 1.0, 0.05, 0, 0, 0, 0};  // crossover at 50
    assert_true(fabs(twell_dispatch_crossover(&m) - 50.0) < 1e-9);
    assert_int_equal(twell_dispatch_decide(&m, 10, 0, 0), TWELL_PATH_SPARSE);
    assert_int_equal(twell_dispatch_decide(&m, 90, 0, 0), TWELL_PATH_DENSE);
    // Inside the band (ratio in [0.95, 1.05] = nnz 45..55): keep the previous path.
    assert_int_equal(twell_dispatch_decide(&m, 53, 0, TWELL_PATH_SPARSE), TWELL_PATH_SPARSE);
    assert_int_equal(twell_dispatch_decide(&m, 47, 0, TWELL_PATH_DENSE), TWELL_PATH_DENSE);
    assert_int_equal(twell_dispatch_decide(&m, 53, 0, 0), TWELL_PATH_DENSE);  // no history: the side of 1
    assert_int_equal(twell_dispatch_decide(&m, 47, 0, 0), TWELL_PATH_SPARSE);
    // Outside the band the history does not matter.
    assert_int_equal(twell_dispatch_decide(&m, 56, 0, TWELL_PATH_SPARSE), TWELL_PATH_DENSE);
    assert_int_equal(twell_dispatch_decide(&m, 44, 0, TWELL_PATH_DENSE), TWELL_PATH_SPARSE);
    // Overflow rows cost the dense fallback.
    assert_int_equal(twell_dispatch_decide(&m, 10, 0.5, 0), TWELL_PATH_DENSE);
    // A model without a slope never crosses over.
    TwellDispatchModel flat = {0.8, 0.0, 0.0, 0.03, 2, 0, 0, 0};
    assert_true(twell_dispatch_crossover(&flat) > 1e29);
    assert_int_equal(twell_dispatch_decide(&flat, 1000, 0, 0), TWELL_PATH_SPARSE);
    // The defaults: nnz 29 sparse, 256 dense.
    TwellDispatchModel d = {TWELL_DISPATCH_S0, TWELL_DISPATCH_S1, TWELL_DISPATCH_FOVF, TWELL_DISPATCH_MARGIN, 0, 0, 0, 0};
    assert_int_equal(twell_dispatch_decide(&d, 29, 0, 0), TWELL_PATH_SPARSE);
    assert_int_equal(twell_dispatch_decide(&d, 256, 0, 0), TWELL_PATH_DENSE);
}

// The decode models' defaults (M <= 64 rows), eager and captured (graph): decode at 1-16 rows and nnz 29 (measured
// 2.1-2.7x faster than dense eagerly, 1.8-2.1x as graphs), dense at 50% and at 64 rows x 256 (2.2x / 1.5x slower
// eagerly), decode at 64 rows x 8 (1.3x / 1.2x faster).
static void test_decode_models(void **state) {
    (void)state;
    const TwellDispatchModel dm = {TWELL_DECODE_S0, TWELL_DECODE_S1, 0.0, TWELL_DISPATCH_MARGIN, 0, TWELL_DECODE_SM,
                                   TWELL_DECODE_SN, TWELL_DECODE_SG4};
    const TwellDispatchModel gm = {TWELL_DECODE_G_S0, TWELL_DECODE_G_S1, 0.0, TWELL_DISPATCH_MARGIN, 0,
                                   TWELL_DECODE_G_SM, TWELL_DECODE_G_SN, TWELL_DECODE_G_SG4};
    const TwellDispatchModel *models[2] = {&dm, &gm};
    for (int i = 0; i < 2; i++) {
        const TwellDispatchModel *m2 = models[i];
        assert_int_equal(twell_dispatch_decide_ratio(m2, twell_decode_predict(m2, 1, 29), 0), TWELL_PATH_SPARSE);
        assert_int_equal(twell_dispatch_decide_ratio(m2, twell_decode_predict(m2, 16, 29), 0), TWELL_PATH_SPARSE);
        assert_int_equal(twell_dispatch_decide_ratio(m2, twell_decode_predict(m2, 1, 2816), 0), TWELL_PATH_DENSE);
        assert_int_equal(twell_dispatch_decide_ratio(m2, twell_decode_predict(m2, 64, 256), 0), TWELL_PATH_DENSE);
        assert_int_equal(twell_dispatch_decide_ratio(m2, twell_decode_predict(m2, 64, 8), 0), TWELL_PATH_SPARSE);
    }
    // At 64 rows x 64 the two differ, as measured: eagerly decode is 1.09x faster than dense (the dense path's
    // 4 launches per layer cost the host more), as graphs 1.07x slower.
    assert_int_equal(twell_dispatch_decide_ratio(&dm, twell_decode_predict(&dm, 64, 64), 0), TWELL_PATH_SPARSE);
    assert_int_equal(twell_dispatch_decide_ratio(&gm, twell_decode_predict(&gm, 64, 64), 0), TWELL_PATH_DENSE);
    // The gate's row tiles: the step of the model at M > 32.
    assert_int_equal(twell_decode_gate_tiles(1), 1);
    assert_int_equal(twell_decode_gate_tiles(16), 1);
    assert_int_equal(twell_decode_gate_tiles(17), 2);
    assert_int_equal(twell_decode_gate_tiles(32), 2);
    assert_int_equal(twell_decode_gate_tiles(33), 4);
}

static TwellDispatchModel fresh(void) {
    TwellDispatchModel m = {TWELL_DISPATCH_S0, TWELL_DISPATCH_S1, TWELL_DISPATCH_FOVF, TWELL_DISPATCH_MARGIN, 0, 0, 0, 0};
    return m;
}

// twell_dispatch_fit: the components give s0 and s1; the whole call's measured ratio anchors the model.
static void test_fit(void **state) {
    (void)state;
    // Without overflow rows: dense 1.0, gate 0.30, up/down 0.50 (empty 0.05) at 30 units per token, whole call 0.90.
    // s1 = 0.45 / 30 = 0.015, s0 = 0.30 + 0.05 = 0.35 predicts 0.80 at the measured point: the 0.10 more (the sync,
    // the counters) moves s0 to 0.45, crossover (1 - 0.45) / 0.015 = 36.7.
    TwellDispatchModel m = fresh();
    const float t1[5] = {1.0f, 0.30f, 0.50f, 0.05f, 0.90f};
    assert_int_equal(twell_dispatch_fit(&m, t1, 30.0, 0.0), 1);
    assert_int_equal(m.calibrated, 1);
    assert_true(fabs(m.s1 - 0.015) < 1e-6);
    assert_true(fabs(m.s0 - 0.45) < 1e-6);
    assert_true(m.fovf == 0.0);
    assert_true(fabs(twell_dispatch_predict(&m, 30.0, 0.0) - 0.90) < 1e-6);  // passes through the measured call
    assert_int_equal(twell_dispatch_decide(&m, 30.0, 0.0, 0), TWELL_PATH_SPARSE);
    assert_true(fabs(twell_dispatch_crossover(&m) - 110.0 / 3.0) < 1e-4);
    // With 10% overflow rows the rest is theirs: whole call 1.10 -> fovf = (1.10 - 0.35 - 0.45) / 0.1 = 3.0, s0 stays.
    m = fresh();
    const float t2[5] = {1.0f, 0.30f, 0.50f, 0.05f, 1.10f};
    assert_int_equal(twell_dispatch_fit(&m, t2, 30.0, 0.1), 1);
    assert_true(fabs(m.s0 - 0.35) < 1e-6 && fabs(m.fovf - 3.0) < 1e-4);
    assert_true(fabs(twell_dispatch_predict(&m, 30.0, 0.1) - 1.10) < 1e-5);
    assert_int_equal(twell_dispatch_decide(&m, 30.0, 0.1, 0), TWELL_PATH_DENSE);
    // A whole call faster than its parts (overlap) never makes the overflow term negative.
    m = fresh();
    const float t3[5] = {1.0f, 0.30f, 0.50f, 0.05f, 0.70f};
    assert_int_equal(twell_dispatch_fit(&m, t3, 30.0, 0.1), 1);
    assert_true(m.fovf == 0.0);
    // An up/down no slower than the empty one keeps a positive slope.
    m = fresh();
    const float t4[5] = {1.0f, 0.30f, 0.05f, 0.05f, 0.40f};
    assert_int_equal(twell_dispatch_fit(&m, t4, 30.0, 0.0), 1);
    assert_true(m.s1 >= 1e-6);
}

// Every active unit in overflow rows (d_ff 2048 layers with 500+ active units per token): nothing to fit, the measured
// ratio decides; bad times leave the model as it was.
static void test_fit_fallback(void **state) {
    (void)state;
    TwellDispatchModel m = fresh();
    const float t[5] = {0.15f, 0.05f, 0.01f, 0.01f, 0.33f};
    assert_int_equal(twell_dispatch_fit(&m, t, 0.0, 1.0), 2);
    assert_int_equal(m.calibrated, 2);
    assert_true(fabs(m.s0 - 2.2) < 1e-5 && m.s1 == 0.0 && m.fovf == 0.0);
    assert_int_equal(twell_dispatch_decide(&m, 0.0, 1.0, 0), TWELL_PATH_DENSE);
    assert_int_equal(twell_dispatch_decide(&m, 500.0, 1.0, TWELL_PATH_SPARSE), TWELL_PATH_DENSE);
    // a measured ratio below 1: sparse, whatever the counts
    const float tf[5] = {0.30f, 0.05f, 0.01f, 0.01f, 0.20f};
    assert_int_equal(twell_dispatch_fit(&m, tf, 0.0, 1.0), 2);
    assert_int_equal(twell_dispatch_decide(&m, 900.0, 1.0, 0), TWELL_PATH_SPARSE);
    TwellDispatchModel before = fresh(), after = fresh();
    const float bad0[5] = {0.0f, 0.3f, 0.5f, 0.05f, 0.9f};
    const float bad4[5] = {1.0f, 0.3f, 0.5f, 0.05f, NAN};
    assert_int_equal(twell_dispatch_fit(&after, bad0, 30.0, 0.0), 0);
    assert_int_equal(twell_dispatch_fit(&after, bad4, 30.0, 0.0), 0);
    assert_true(after.s0 == before.s0 && after.s1 == before.s1 && after.fovf == before.fovf && after.calibrated == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tile_model),
        cmocka_unit_test(test_decode_models),
        cmocka_unit_test(test_fit),
        cmocka_unit_test(test_fit_fallback),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
