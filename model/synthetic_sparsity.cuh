// model/synthetic_sparsity.cuh: calibrated SYNTHETIC FFN sparsity for whole-model timing on random weights
// (train_gpt_relu --bench N --synthetic-nnz K). A random-init model fires ~half of its units; this makes every layer
// fire about K units per token so that the sparse FFN path can be timed at the paper's sparsity without training.
//
// The trick (weights only, no change to any kernel): column 0 of the embedding is set to a constant A = 1 for every
// token, so the residual stream carries a component along e_0 that dominates its other coordinates (those are
// ~N(0, 0.02) at init and the blocks add little); after the FFN norm, ln2[:, 0] is then a large positive value c_l
// for every token. Column 0 of every gate row of layer l is set to -b_l, which shifts every gate pre-activation by
// -b_l * c_l: g = g_rest - b_l c_l, with g_rest ~ N(mu, sigma^2) over tokens and units. The fraction of positive
// gates is Phi((mu - b_l c_l) / sigma), so z_l(b) = Phi^-1(fraction) is linear in b_l: a secant iteration on z finds
// b_l with K / d_ff positives in a few forwards (all layers at once; later layers follow the earlier ones).
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

// Calibrates every layer to about target_nnz non-zeros per token (random tokens from seed). Writes the measured
// non-zeros per token per layer into nnz_out [L] (may be NULL); returns the largest relative error over the layers.
static inline double model_synthetic_sparsity(Model *m, double target_nnz, uint64_t seed, double *nnz_out, FILE *log) {
    const ModelConfig *c = &m->cfg;
    const int L = c->n_layer, F = c->d_ff, D = c->d_model, B = m->B, T = m->T, N = B * T;
    if (!(target_nnz > 0 && target_nnz < F)) SLLM_FATAL("--synthetic-nnz %g must be in (0, d_ff=%d)", target_nnz, F);
    const ParamKind gate = c->gated ? PARAM_WG : PARAM_WU;
    const size_t eo = param_offset(&m->lay, PARAM_EMBED, 0);
    sp_set_column_kernel<<<CEIL_DIV(c->vocab_size, 256), 256, 0, m->stream>>>(m->params + eo, m->master ? m->master + eo : NULL,
                                                                          c->vocab_size, D, 0, 1.0f);
    cudaCheckLaunch();
    double *b = (double *)sllm_calloc(L, sizeof(double)), *bp = (double *)sllm_calloc(L, sizeof(double)),
           *zp = (double *)sllm_calloc(L, sizeof(double)), *nnz = (double *)sllm_calloc(L, sizeof(double)),
           *alive = (double *)sllm_calloc(L, sizeof(double));
    int *in = (int *)sllm_malloc((size_t)N * sizeof(int)), *tg = (int *)sllm_malloc((size_t)N * sizeof(int));
    Rng rng;
    rng_seed(&rng, seed);
    const double zt = synth_probit(target_nnz / F);
    double worst = 1e30;
    for (int it = 0; it < 12; it++) {
        for (int l = 0; l < L; l++) {
            const size_t off = param_offset(&m->lay, gate, l);
            sp_set_column_kernel<<<CEIL_DIV(F, 256), 256, 0, m->stream>>>(m->params + off, m->master ? m->master + off : NULL,
                                                                       F, D, 0, (float)-b[l]);
            cudaCheckLaunch();
        }
        sparse_ffn_mark_stale(&m->sp);
        for (int i = 0; i < N; i++) { in[i] = (int)rng_below(&rng, c->vocab_size); tg[i] = (int)rng_below(&rng, c->vocab_size); }
        model_reset_sparsity(m);
        model_forward(m, in, tg, B, T, MODEL_TRAIN, 0.0f);
        model_read_sparsity(m, nnz, alive);
        worst = 0;
        for (int l = 0; l < L; l++) {
            const double e = fabs(nnz[l] - target_nnz) / target_nnz;
            if (e > worst) worst = e;
        }
        if (log) {
            fprintf(log, "synthetic sparsity: iteration %d, non-zeros/token per layer:", it);
            for (int l = 0; l < L; l++) fprintf(log, " %.1f", nnz[l]);
            fprintf(log, " (target %.1f, worst %.1f%%)\n", target_nnz, 100 * worst);
        }
        if (worst < 0.05) break;
        for (int l = 0; l < L; l++) {
            double p = nnz[l] / F;
            p = p < 1e-7 ? 1e-7 : (p > 1 - 1e-7 ? 1 - 1e-7 : p);
            const double z = synth_probit(p);
            double nb;
            if (it == 0 || fabs(z - zp[l]) < 1e-9) nb = b[l] + 0.05;  // a second point for the secant
            else nb = b[l] + (zt - z) * (b[l] - bp[l]) / (z - zp[l]);
            if (!(nb >= 0)) nb = 0.5 * b[l];
            if (nb > 10) nb = 10;
            bp[l] = b[l]; zp[l] = z; b[l] = nb;
        }
    }
    if (nnz_out) memcpy(nnz_out, nnz, (size_t)L * sizeof(double));
    model_reset_sparsity(m);
    free(b); free(bp); free(zp); free(nnz); free(alive); free(in); free(tg);
    return worst;
}

#endif  // SLLM_MODEL_SYNTHETIC_SPARSITY_CUH
