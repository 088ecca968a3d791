// The training configuration saved in checkpoints (core/train_config.h): JSON round trip, refused changes, the
// batch-layout changes (world size, per-rank batch) that resume allows and reports.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train_config.h"

static TrainConfig base(void) {
    TrainConfig tc = {"cosine", 1000, 50, 3e-3f, 0.1f, 0.1f, 0.9f, 0.95f, 1e-8f, 1.0f, 4, 2048, 1048576, 2,
                      2e-5f, 10000.0f, 0xfedcba9876543210ull};
    return tc;
}

static void test_round_trip_same(void **state) {
    (void)state;
    TrainConfig tc = base();
    char *js = train_config_json(&tc);
    assert_non_null(js);
    char diff[512], layout[512];
    assert_int_equal(train_config_diff(js, &tc, diff, sizeof diff, layout, sizeof layout), 0);
    assert_string_equal(diff, "");
    assert_string_equal(layout, "");
    free(js);
}

static void test_refused_changes_listed(void **state) {
    (void)state;
    TrainConfig tc = base();
    char *js = train_config_json(&tc);
    TrainConfig now = tc;
    now.lr = 3.0001e-3f;  // floats compared exactly
    now.seed = 0xfedcba9876543211ull;  // 64-bit seeds survive JSON
    now.total_batch = 524288;
    char diff[512], layout[512];
    assert_int_equal(train_config_diff(js, &now, diff, sizeof diff, layout, sizeof layout), 3);
    assert_non_null(strstr(diff, "lr 0.00300000003 -> 0.00300009991"));
    assert_non_null(strstr(diff, "seed 18364758544493064720 -> 18364758544493064721"));
    assert_non_null(strstr(diff, "total_batch 1048576 -> 524288"));
    assert_string_equal(layout, "");
    free(js);
}

// Another GPU count with the same global batch re-shards: reported in layout, not counted as a difference.
static void test_layout_change_allowed(void **state) {
    (void)state;
    TrainConfig tc = base();
    char *js = train_config_json(&tc);
    TrainConfig now = tc;
    now.world = 1;
    now.batch = 8;
    char diff[512], layout[512];
    assert_int_equal(train_config_diff(js, &now, diff, sizeof diff, layout, sizeof layout), 0);
    assert_string_equal(diff, "");
    assert_string_equal(layout, "batch 4 -> 8, world 2 -> 1");
    now.l1 = 0;  // a refused change beside a layout change: both reported
    assert_int_equal(train_config_diff(js, &now, diff, sizeof diff, layout, sizeof layout), 1);
    assert_non_null(strstr(diff, "l1 1.99999995e-05 -> 0"));
    assert_string_equal(layout, "batch 4 -> 8, world 2 -> 1");
    free(js);
}

static void test_bad_json(void **state) {
    (void)state;
    TrainConfig tc = base();
    char diff[512], layout[512];
    assert_int_equal(train_config_diff("[1, 2]", &tc, diff, sizeof diff, layout, sizeof layout), -1);
    assert_string_equal(diff, "not a JSON object");
    // a saved file without a key: that key differs ("(missing)"), layout keys too are then refused
    assert_int_equal(train_config_diff("{}", &tc, diff, sizeof diff, NULL, 0), 17);
    assert_non_null(strstr(diff, "world (missing) -> 2"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_round_trip_same),
        cmocka_unit_test(test_refused_changes_listed),
        cmocka_unit_test(test_layout_change_allowed),
        cmocka_unit_test(test_bad_json),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
