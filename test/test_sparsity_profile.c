// model/sparsity_profile.h: the "paper" per-layer profile keeps the requested mean, has the shape PAPER.md describes
// (layers 0-1 lowest, the peak early-middle), and the parser's forms and errors.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "model/sparsity_profile.h"

static void test_paper_profile_shape(void **state) {
    (void)state;
    const int Ls[4] = {8, 18, 28, 38};
    const double means[4] = {39, 34, 29, 24};
    for (int i = 0; i < 4; i++) {
        const int L = Ls[i];
        double t[64] = {0};
        sparsity_profile_paper(L, means[i], t);
        double s = 0, mx = 0;
        int arg = -1;
        for (int l = 0; l < L; l++) {
            s += t[l];
            if (t[l] > mx) { mx = t[l]; arg = l; }
        }
        assert_true(fabs(s / L - means[i]) < 1e-9);
        for (int l = 2; l < L; l++) assert_true(t[0] < t[l] && t[1] < t[l]);  // the first two layers lowest
        assert_true(t[0] == t[1]);
        assert_true(arg >= 2 && arg <= (int)(0.45 * L));  // peak in the early-middle layers
        assert_true(mx / t[0] > 1.9 && mx / t[0] < 2.3);   // 1.3 / 0.6
        assert_true(t[L - 1] > t[0] && t[L - 1] < mx);
    }
    // 8 layers, mean 39: the numbers themselves
    double t[8];
    sparsity_profile_paper(8, 39, t);
    assert_true(fabs(t[0] - 25.5) < 0.3 && fabs(t[2] - 55.3) < 0.5 && fabs(t[7] - 38.3) < 0.3);
}

static void test_parse(void **state) {
    (void)state;
    double t[4];
    char err[256];
    assert_int_equal(sparsity_profile_parse("uniform", 4, 5632, 29, t, err, sizeof err), 0);
    for (int l = 0; l < 4; l++) assert_true(t[l] == 29);
    assert_int_equal(sparsity_profile_parse("paper", 4, 5632, 29, t, err, sizeof err), 0);
    assert_true(fabs((t[0] + t[1] + t[2] + t[3]) / 4 - 29) < 1e-9);
    assert_int_equal(sparsity_profile_parse("10,20, 30,40", 4, 5632, 0, t, err, sizeof err), 0);
    assert_true(t[0] == 10 && t[3] == 40);
    assert_int_equal(sparsity_profile_parse("10,20,30", 4, 5632, 0, t, err, sizeof err), -1);
    assert_non_null(strstr(err, "3 numbers for 4 layers"));
    assert_int_equal(sparsity_profile_parse("10,20,30,6000", 4, 5632, 0, t, err, sizeof err), -1);
    assert_non_null(strstr(err, "layer 3"));
    assert_int_equal(sparsity_profile_parse("paper", 4, 5632, 0, t, err, sizeof err), -1);
    assert_int_equal(sparsity_profile_parse("bogus", 4, 5632, 29, t, err, sizeof err), -1);
    assert_non_null(strstr(err, "uniform, paper"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_paper_profile_shape),
        cmocka_unit_test(test_parse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
