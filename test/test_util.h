// test/test_util.h: helpers shared by the tests (header-only).
#ifndef SLLM_TEST_UTIL_H
#define SLLM_TEST_UTIL_H

#include <math.h>
#include <stddef.h>

// Relative Frobenius error ||x - ref|| / ||ref|| of a float result against a float64 reference;
// infinity if x holds a NaN or an infinity (an unwritten or poisoned element).
static inline double rel_err_f32(const float *x, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return INFINITY;
        double d = x[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-30);
}

#endif  // SLLM_TEST_UTIL_H
