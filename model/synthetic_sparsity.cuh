// model/synthetic_sparsity.cuh: calibrated SYNTHETIC FFN sparsity for whole-model timing on random weights
// (train_gpt_relu --bench N --synthetic-nnz K). A random-init model fires ~half of its units; this makes every layer
// fire about K units per token (or layer l about K_l: model_synthetic_sparsity_profile, with the profiles of
// model/sparsity_profile.h) so that the sparse FFN path can be timed at the paper's sparsity without training.
// infer --bench --synthetic-nnz uses it too (model/infer_synthetic.cuh).
//
// The trick (weights only, no change to any kernel): column 0 of the embedding is set to a constant A = 16 for every
// token, so the residual stream carries a component along e_0 that dominates its other coordinates (those are
// ~N(0, 0.02) at init, |x_rest|^2 ~ 0.0004 D, and the blocks add O(1)); after the FFN norm, ln2[:, 0] is then nearly
// the same large positive value c_l for every token and batch. Column 0 of every gate row of layer l is set to -b_l,
// which shifts every gate pre-activation by -b_l * c_l: g = g_rest - b_l c_l, with g_rest ~ N(mu, sigma^2) over
// tokens and units. The fraction of positive gates is Phi((mu - b_l c_l) / sigma), so z_l(b) = Phi^-1(fraction) is
// linear in b_l. The layers are calibrated one after the other (a layer's shift changes the input of every later
// layer, so calibrating them together oscillates): for each, a secant iteration on z inside a bracket [lo, hi] of b
// (the count falls as b grows) finds b_l with K / d_ff positives in a few forwards.
// The weights must then stay fixed (the trainer runs the benchmark at learning rate 0): the optimizer would move
// the shift. The measured non-zeros per token are reported with the timings; the output says SYNTHETIC.
#ifndef SLLM_MODEL_SYNTHETIC_SPARSITY_CUH
#define SLLM_MODEL_SYNTHETIC_SPARSITY_CUH

#include <math.h>

#include "rng.h"
#include "model/train_model.cuh"

static inline double synth_probit(double p) {
    double lo = -12, hi = 12;
    for (int i = 0; i < 80; i++) {
        const double mid = 0.5 * (lo + hi);
        if (0.5 * erfc(-mid / sqrt(2.0)) < p) lo = mid; else hi = mid;
    }
    return 0.5 * (lo + hi);
}

// Calibrates layer l to about targets[l] non-zeros per token (random tokens from seed; model/sparsity_profile.h makes
// per-layer profiles). Writes the measured non-zeros per token per layer into nnz_out [L] (may be NULL); returns the
// largest relative error over the layers.
static inline double model_synthetic_sparsity_profile(Model *m, const double *targets, uint64_t seed, double *nnz_out,
                                                      FILE *log) {
    const ModelConfig *c = &m->cfg;
    const int L = c->n_layer, F = c->d_ff, D = c->d_model, B = m->B, T = m->T, N = B * T;
    for (int l = 0; l < L; l++)
        if (!(targets[l] > 0 && targets[l] < F))
            SLLM_FATAL("synthetic sparsity: layer %d target %g must be in (0, d_ff=%d)", l, targets[l], F);
    const ParamKind gate = c->gated ? PARAM_WG : PARAM_WU;
    const size_t eo = param_offset(&m->lay, PARAM_EMBED, 0);
    sp_set_column_kernel<<<CEIL_DIV(c->vocab_size, 256), 256, 0, m->stream>>>(m->params + eo, m->master ? m->master + eo : NULL,
                                                                          c->vocab_size, D, 0, 16.0f);
    cudaCheckLaunch();
    double *nnz = (double *)sllm_calloc(L, sizeof(double)), *alive = (double *)sllm_calloc(L, sizeof(double));
    int *in = (int *)sllm_malloc((size_t)N * sizeof(int)), *tg = (int *)sllm_malloc((size_t)N * sizeof(int));
    Rng rng;
    rng_seed(&rng, seed);
    // one forward on a fresh random batch: the non-zeros per token of every layer into nnz
    auto measure = [&](void) {
        sparse_ffn_mark_stale(&m->sp);
        for (int i = 0; i < N; i++) { in[i] = (int)rng_below(&rng, c->vocab_size); tg[i] = (int)rng_below(&rng, c->vocab_size); }
        model_reset_sparsity(m);
        model_forward(m, in, tg, B, T, MODEL_TRAIN, 0.0f);
        model_read_sparsity(m, nnz, alive);
    };
    auto set_shift = [&](int l, double v) {
        const size_t off = param_offset(&m->lay, gate, l);
        sp_set_column_kernel<<<CEIL_DIV(F, 256), 256, 0, m->stream>>>(m->params + off, m->master ? m->master + off : NULL,
                                                                   F, D, 0, (float)-v);
        cudaCheckLaunch();
    };
    for (int l = 0; l < L; l++) {
        const double target_nnz = targets[l], zt = synth_probit(target_nnz / F);
        double lo = 0, hi = -1, zlo = 0, zhi = 0, bb = 0.05;  // count(lo) > target > count(hi); hi < 0: not found yet
        for (int it = 0; it < 24; it++) {
            set_shift(l, bb);
            measure();
            const double e = fabs(nnz[l] - target_nnz) / target_nnz;
            if (log) fprintf(log, "synthetic sparsity: layer %d, shift %.5g: %.1f non-zeros/token (target %.1f)\n", l, bb,
                             nnz[l], target_nnz);
            if (e < 0.03) break;
            double p = nnz[l] / F;
            p = p < 1e-7 ? 1e-7 : (p > 1 - 1e-7 ? 1 - 1e-7 : p);
            const double z = synth_probit(p);
            if (nnz[l] > target_nnz) { lo = bb; zlo = z; }
            else { hi = bb; zhi = z; }
            if (hi < 0) { bb = 2 * bb; continue; }  // no upper end yet: double the shift
            double nb = (lo == 0 && zlo == 0) ? 0.5 * (lo + hi) : lo + (zt - zlo) * (hi - lo) / (zhi - zlo);
            if (!(nb > lo && nb < hi) || it % 3 == 2) nb = 0.5 * (lo + hi);  // keep inside the bracket; bisect now and then
            bb = nb;
        }
    }
    measure();  // all layers at their shifts, on another batch
    double worst = 0, tmean = 0;
    int uniform = 1;
    for (int l = 0; l < L; l++) {
        const double e = fabs(nnz[l] - targets[l]) / targets[l];
        if (e > worst) worst = e;
        tmean += targets[l] / L;
        uniform &= targets[l] == targets[0];
    }
    if (log) {
        fprintf(log, "synthetic sparsity: non-zeros/token per layer:");
        for (int l = 0; l < L; l++) fprintf(log, " %.1f", nnz[l]);
        if (uniform) fprintf(log, " (target %.1f, worst %.1f%%)\n", targets[0], 100 * worst);
        else {
            fprintf(log, " (targets");
            for (int l = 0; l < L; l++) fprintf(log, " %.1f", targets[l]);
            fprintf(log, ", mean %.1f, worst %.1f%%)\n", tmean, 100 * worst);
        }
    }
    if (nnz_out) memcpy(nnz_out, nnz, (size_t)L * sizeof(double));
    model_reset_sparsity(m);
    free(nnz); free(alive); free(in); free(tg);
    return worst;
}

// Every layer at target_nnz.
static inline double model_synthetic_sparsity(Model *m, double target_nnz, uint64_t seed, double *nnz_out, FILE *log) {
    const int L = m->cfg.n_layer, F = m->cfg.d_ff;
    if (!(target_nnz > 0 && target_nnz < F)) SLLM_FATAL("--synthetic-nnz %g must be in (0, d_ff=%d)", target_nnz, F);
    double *t = (double *)sllm_malloc((size_t)L * sizeof(double));
    for (int l = 0; l < L; l++) t[l] = target_nnz;
    const double worst = model_synthetic_sparsity_profile(m, t, seed, nnz_out, log);
    free(t);
    return worst;
}

#endif  // SLLM_MODEL_SYNTHETIC_SPARSITY_CUH
