// Tests of core/cli.h: strict numbers (whole string, finite, within the type and the range), strict comma-separated
// lists of them, the one list of short letters (every built binary's option table agrees with it: each binary is
// run with -h, which fails with exit 2 on a table that gives a letter to another option), and bad command lines
// of the built binaries exiting 2 before they touch a GPU.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli.h"

static int parse(CliType type, double lo, double hi, const char *val, void *dst) {
    CliOpt o = {"x", 0, type, dst, "", lo, hi, 0};
    char msg[256];
    return cli_parse_number(&o, val, msg, sizeof msg);
}

static void test_numbers(void **state) {
    (void)state;
    int i = 7; float f = 7; unsigned long long u = 7;
    // integers: whole string, no exponent or fraction, within int and the range
    assert_int_equal(parse(CLI_INT, 0, 0, "42", &i), 0); assert_int_equal(i, 42);
    assert_int_equal(parse(CLI_INT, 0, 0, "-3", &i), 0); assert_int_equal(i, -3);
    const char *bad_int[] = {"1e6", "0.5x", "0.5", "", " 1", "1 ", "12abc", "0x10", "2147483648", "-2147483649", "nan", "inf"};
    for (size_t k = 0; k < sizeof bad_int / sizeof *bad_int; k++) {
        i = 7;
        if (parse(CLI_INT, 0, 0, bad_int[k], &i) == 0) fail_msg("int accepted \"%s\"", bad_int[k]);
        assert_int_equal(i, 7);  // untouched
    }
    assert_int_not_equal(parse(CLI_INT, 1, 10, "11", &i), 0);
    assert_int_not_equal(parse(CLI_INT, 1, 10, "0", &i), 0);
    assert_int_equal(parse(CLI_INT, 1, 10, "10", &i), 0);
    // floats: finite only, whole string, range
    assert_int_equal(parse(CLI_FLOAT, 0, 10, "0.25", &f), 0); assert_true(f == 0.25f);
    assert_int_equal(parse(CLI_FLOAT, 0, 0, "1e-3", &f), 0); assert_true(f == 1e-3f);
    const char *bad_float[] = {"nan", "NaN", "-nan", "inf", "-inf", "infinity", "1e999", "0.5x", "", "1,5", " 1"};
    for (size_t k = 0; k < sizeof bad_float / sizeof *bad_float; k++) {
        f = 7;
        if (parse(CLI_FLOAT, 0, 0, bad_float[k], &f) == 0) fail_msg("float accepted \"%s\"", bad_float[k]);
        if (parse(CLI_FLOAT, -1e30, 1e30, bad_float[k], &f) == 0) fail_msg("float in range accepted \"%s\"", bad_float[k]);
        assert_true(f == 7);
    }
    assert_int_not_equal(parse(CLI_FLOAT, 0, 10, "10.5", &f), 0);
    assert_int_not_equal(parse(CLI_FLOAT, 0, 10, "-0.1", &f), 0);
    // unsigned 64-bit
    assert_int_equal(parse(CLI_U64, 0, 0, "18446744073709551615", &u), 0); assert_true(u == 18446744073709551615ull);
    const char *bad_u64[] = {"-1", "+1", "18446744073709551616", "1e6", "", "3.0"};
    for (size_t k = 0; k < sizeof bad_u64 / sizeof *bad_u64; k++)
        if (parse(CLI_U64, 0, 0, bad_u64[k], &u) == 0) fail_msg("u64 accepted \"%s\"", bad_u64[k]);
    assert_int_not_equal(parse(CLI_U64, 1, 100, "101", &u), 0);
}

static void test_lists(void **state) {
    (void)state;
    double v[8];
    int pct[8];
    char msg[256];
    // integers: real values, in order
    assert_int_equal(cli_parse_list("16384,65536", 1, 1, 1 << 20, v, NULL, 8, msg, sizeof msg), 2);
    assert_true(v[0] == 16384 && v[1] == 65536);
    assert_int_equal(cli_parse_list("7", 1, 0, 0, v, NULL, 8, msg, sizeof msg), 1);
    assert_true(v[0] == 7);
    // numbers and percentages: "50%" is 0.5 with its flag set, plain numbers keep theirs
    assert_int_equal(cli_parse_list("8,29.5,50%,100%", 0, 0, 1e6, v, pct, 8, msg, sizeof msg), 4);
    assert_true(v[0] == 8 && v[1] == 29.5 && v[2] == 0.5 && v[3] == 1.0);
    assert_true(pct[0] == 0 && pct[1] == 0 && pct[2] == 1 && pct[3] == 1);
    // rejections: empty elements, trailing garbage, non-integers in an integer list, non-finite, out of range,
    // a stray %, whitespace, too many elements; the message names the bad element
    const char *bad_int[] = {"", ",", "8,", ",8", "8,,29", "8x", "8,29x", "nan", "inf", "1e99", "1e3", "0.5", "8%",
                             " 8", "8 ", "8, 29", "0", "2000000", "-8", "0x10", "1,2,3,4,5,6,7,8,9"};
    for (size_t k = 0; k < sizeof bad_int / sizeof *bad_int; k++) {
        msg[0] = 0;
        if (cli_parse_list(bad_int[k], 1, 1, 1 << 20, v, NULL, 8, msg, sizeof msg) >= 0)
            fail_msg("int list accepted \"%s\"", bad_int[k]);
        assert_true(msg[0] != 0);
    }
    assert_non_null(strstr((cli_parse_list("8,,29", 1, 1, 100, v, NULL, 8, msg, sizeof msg), msg), "element 2"));
    assert_non_null(strstr((cli_parse_list("8,29x", 1, 1, 100, v, NULL, 8, msg, sizeof msg), msg), "\"29x\""));
    assert_non_null(strstr((cli_parse_list("1e99", 1, 1, 100, v, NULL, 8, msg, sizeof msg), msg), "integer"));
    const char *bad_num[] = {"nan", "8,nan", "-inf", "1e99", "1e999", "50%%", "%", "50%x", "101%", "-1%", "nan%",
                             "8,,29", "29x", "-1", "1e7"};
    for (size_t k = 0; k < sizeof bad_num / sizeof *bad_num; k++)
        if (cli_parse_list(bad_num[k], 0, 0, 1e6, v, pct, 8, msg, sizeof msg) >= 0)
            fail_msg("number list accepted \"%s\"", bad_num[k]);
    // without pct a percentage is an error like any other stray character
    assert_true(cli_parse_list("50%", 0, 0, 1e6, v, NULL, 8, msg, sizeof msg) < 0);
}

static void test_letters(void **state) {
    (void)state;
    // the list itself: no letter twice, no long name twice
    size_t n = sizeof cli_letters / sizeof cli_letters[0];
    for (size_t a = 0; a < n; a++)
        for (size_t b = a + 1; b < n; b++) {
            assert_int_not_equal(cli_letters[a].letter, cli_letters[b].letter);
            assert_int_not_equal(strcmp(cli_letters[a].name, cli_letters[b].name), 0);
        }
    CliOpt ok = {"seed", 's', CLI_U64, NULL, "", 0, 0, 0}, clash = {"shard-size", 's', CLI_U64, NULL, "", 0, 0, 0};
    assert_null(cli_letter_conflict(&ok));
    assert_non_null(cli_letter_conflict(&clash));
    // every built binary's table agrees (-h exits 0; a conflicting table exits 2 before printing the help)
    const char *bins[] = {"build/tokenize", "build/encode", "build/train_cpu", "build/train_gpt_relu", "build/infer",
                          "build/bench_attention", "build/bench_coresident", "build/bench_decode", "build/bench_ffn",
                          "build/bench_ffn_train", "build/bench_l2"};
    int ran = 0;
    for (size_t k = 0; k < sizeof bins / sizeof *bins; k++) {
        if (access(bins[k], X_OK) != 0) { print_message("%s not built: its table not checked\n", bins[k]); continue; }
        char cmd[512];
        snprintf(cmd, sizeof cmd, "%s -h > /dev/null 2>&1", bins[k]);
        int rc = system(cmd);
        if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 0) fail_msg("%s -h failed (exit %d)", bins[k], WEXITSTATUS(rc));
        ran++;
    }
    assert_true(ran >= 3);  // the CPU tools are always built before the tests
}

// A bad command line exits 2 with a message, parsed before any CUDA call (so this holds without a GPU). Binaries
// that are not built (the benchmarks, unless `make bench` ran) are skipped and said so.
static void test_bad_args(void **state) {
    (void)state;
    const char *cmds[] = {
        "build/tokenize --no-such-option",  "build/tokenize --max-tokens 1e6",   "build/encode --no-such-option",
        "build/train_gpt_relu --steps 1e3", "build/infer --tokens 5x",           "build/infer --temperature nan",
        "build/bench_ffn --reps 1e3",       "build/bench_ffn --M 65536x",        "build/bench_ffn --nnz 8,,29",
        "build/bench_ffn --pattern unifrom", "build/bench_ffn --gate-variant 9", "build/bench_ffn --nnz 6000",
        "build/bench_ffn --D 100",          "build/bench_ffn --bogus",           "build/bench_decode --M 65",
        "build/bench_decode --nnz nan",     "build/bench_decode --layers 0",     "build/bench_ffn_train --M 1e99",
        "build/bench_ffn_train --pattern x", "build/bench_ffn_train --D 2000",   "build/bench_coresident --M 1000",
        "build/bench_coresident --nnz inf", "build/bench_l2 1e3",                "build/bench_l2 5 6",
        "build/bench_attention 5x",         "build/bench_attention 0",           "build/bench_attention --reps 5",
    };
    int ran = 0;
    for (size_t k = 0; k < sizeof cmds / sizeof *cmds; k++) {
        char bin[128];
        snprintf(bin, sizeof bin, "%.*s", (int)strcspn(cmds[k], " "), cmds[k]);
        if (access(bin, X_OK) != 0) { print_message("%s not built: \"%s\" not checked\n", bin, cmds[k]); continue; }
        char cmd[512];
        snprintf(cmd, sizeof cmd, "%s > /dev/null 2>&1", cmds[k]);
        int rc = system(cmd);
        if (!WIFEXITED(rc) || WEXITSTATUS(rc) != 2) fail_msg("\"%s\": exit %d, expected 2", cmds[k], WEXITSTATUS(rc));
        ran++;
    }
    assert_true(ran >= 2);  // the CPU tools are always built before the tests
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_numbers),
        cmocka_unit_test(test_lists),
        cmocka_unit_test(test_letters),
        cmocka_unit_test(test_bad_args),
    };
    return cmocka_run_group_tests_name("cli", tests, NULL, NULL);
}
