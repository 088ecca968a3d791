// model/sparsity_profile.h: per-layer targets of FFN non-zeros per token for SYNTHETIC sparsity (random weights
// calibrated by model/synthetic_sparsity.cuh), as pure host functions (CPU-tested).
//
// What ../shared/PAPER.md gives: the MEAN non-zeros per token per layer of its sparse models (39 at 0.5B, 29 at 1.5B,
// 24 at 2B; 1B is not given), and the per-layer SHAPE only in words: "the first two layers are the least active,
// early-middle layers the most". No per-layer numbers, so the "paper" profile is an assumed curve with that shape,
// scaled to the requested mean:
//   layers 0 and 1: 0.6; layer l >= 2 at depth x = l / (L - 1): 0.9 + 0.4 exp(-((x - 0.3) / 0.2)^2)
// (peak ~1.3 near 30% depth, ~0.9 in the late layers), then multiplied so that the mean over layers is exactly the
// target. The first-token excess ("exponential decay with position") has no figure in PAPER.md either and is not
// imposed: the calibration weights act on every position alike (what a random-init model does by itself is kept).
// Profiles: "uniform" (every layer at the mean), "paper" (the curve above), or L comma-separated numbers (used as
// given; the mean argument is ignored).
#ifndef SLLM_SPARSITY_PROFILE_H
#define SLLM_SPARSITY_PROFILE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static inline double sparsity_profile_shape(int l, int L) {
    if (L <= 2) return 1.0;
    if (l < 2) return 0.6;
    const double x = (double)l / (L - 1), z = (x - 0.3) / 0.2;
    return 0.9 + 0.4 * exp(-z * z);
}

// out [L] = the "paper" profile with mean `mean`.
static inline void sparsity_profile_paper(int L, double mean, double *out) {
    double s = 0;
    for (int l = 0; l < L; l++) s += (out[l] = sparsity_profile_shape(l, L));
    for (int l = 0; l < L; l++) out[l] *= mean * L / s;
}

// spec: "uniform", "paper" or "v0,v1,...,v(L-1)". Every target must be in (0, d_ff). Returns 0, or -1 with err.
static inline int sparsity_profile_parse(const char *spec, int L, int d_ff, double mean, double *out, char *err,
                                         size_t err_len) {
    if (!strcmp(spec, "uniform") || !strcmp(spec, "paper")) {
        if (!(mean > 0 && mean < d_ff)) {
            snprintf(err, err_len, "the mean non-zeros per token (%g) must be in (0, d_ff=%d)", mean, d_ff);
            return -1;
        }
        if (spec[0] == 'u') for (int l = 0; l < L; l++) out[l] = mean;
        else sparsity_profile_paper(L, mean, out);
    } else {
        const char *p = spec;
        int n = 0;
        while (*p) {
            char *end;
            const double v = strtod(p, &end);
            if (end == p) { snprintf(err, err_len, "profile \"%s\": expected uniform, paper or %d numbers", spec, L); return -1; }
            if (n < L) out[n] = v;
            n++;
            p = end;
            while (*p == ',' || *p == ' ') p++;
        }
        if (n != L) { snprintf(err, err_len, "profile \"%s\": %d numbers for %d layers", spec, n, L); return -1; }
    }
    for (int l = 0; l < L; l++)
        if (!(out[l] > 0 && out[l] < d_ff)) {
            snprintf(err, err_len, "profile: layer %d target %g is not in (0, d_ff=%d)", l, out[l], d_ff);
            return -1;
        }
    return 0;
}

#endif  // SLLM_SPARSITY_PROFILE_H
