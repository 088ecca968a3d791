// Config presets, validation and the parameter layout.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "config.h"

static size_t params_of(const char *preset) {
    ModelConfig c;
    assert_true(config_from_preset(preset, &c));
    ParamLayout lay;
    config_param_layout(&c, &lay);
    return lay.total;
}

// PAPER.md: ~0.51B, ~1.0B, ~1.54B, ~2.05B (hidden 2048, FFN 5632, vocab 49152, tied).
static void test_paper_param_counts(void **state) {
    (void)state;
    // 100.66M embedding + 51.39M per layer (16.78M attention + 34.60M FFN + 4096 norm) + 2048 final norm.
    size_t per_layer = 4ull * 2048 * 2048 + 3ull * 2048 * 5632 + 2 * 2048;
    size_t embed = 49152ull * 2048;
    assert_int_equal(params_of("0.5B"), embed + 8 * per_layer + 2048);
    assert_int_equal(params_of("1B"), embed + 18 * per_layer + 2048);
    assert_int_equal(params_of("1.5B"), embed + 28 * per_layer + 2048);
    assert_int_equal(params_of("2B"), embed + 38 * per_layer + 2048);
    assert_true(params_of("0.5B") > 505000000 && params_of("0.5B") < 515000000);
    assert_true(params_of("1B") > 1020000000 && params_of("1B") < 1040000000);
    assert_true(params_of("1.5B") > 1530000000 && params_of("1.5B") < 1550000000);
    assert_true(params_of("2B") > 2040000000 && params_of("2B") < 2060000000);
}

static void test_layout_is_contiguous(void **state) {
    (void)state;
    ModelConfig c;
    assert_true(config_from_preset("test", &c));
    c.n_kv_head = 2;  // GQA
    ParamLayout lay;
    config_param_layout(&c, &lay);
    size_t off = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        assert_int_equal(lay.t[k].offset, off);
        off += lay.t[k].numel;
    }
    assert_int_equal(off, lay.total);
    assert_int_equal(lay.t[PARAM_WK].rows, 2 * c.head_dim);
    assert_int_equal(lay.t[PARAM_WQ].rows, 4 * c.head_dim);
    c.gated = 0;
    config_param_layout(&c, &lay);
    assert_int_equal(lay.t[PARAM_WG].numel, 0);
}

static void test_validate_rejects_bad_configs(void **state) {
    (void)state;
    ModelConfig c;
    char err[256];
    assert_true(config_from_preset("test", &c));
    assert_int_equal(config_validate(&c, err, sizeof err), 0);
    c.n_kv_head = 3;  // does not divide 4 heads
    assert_int_equal(config_validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "n_kv_head"));
    assert_true(config_from_preset("test", &c));
    c.tied = 0;
    assert_int_equal(config_validate(&c, err, sizeof err), -1);
    assert_non_null(strstr(err, "tied"));
    assert_true(config_from_preset("test", &c));
    c.head_dim = 7;
    assert_int_equal(config_validate(&c, err, sizeof err), -1);
    assert_false(config_from_preset("3B", &c));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paper_param_counts),
        cmocka_unit_test(test_layout_is_contiguous),
        cmocka_unit_test(test_validate_rejects_bad_configs),
    };
    return cmocka_run_group_tests_name("config", tests, NULL, NULL);
}
