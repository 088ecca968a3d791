// model/infer_synthetic.cuh: SYNTHETIC sparsity for infer --bench without a checkpoint (infer --preset P
// --synthetic-nnz K [--synthetic-profile paper|uniform|list]). The preset's random weights (the seed infer uses:
// params_init_random, as infer_init_random) are calibrated by model/synthetic_sparsity.cuh inside a trainer Model
// without optimizer (B 1 x T tokens, random ids), then handed back as host fp32 parameters that infer loads like a
// checkpoint's. The Model is freed before infer allocates its engines. The calibration shifts column 0 of the
// embedding and of every gate row, a weights-only change: the inference forward then sees the same non-zeros.
#ifndef SLLM_MODEL_INFER_SYNTHETIC_CUH
#define SLLM_MODEL_INFER_SYNTHETIC_CUH

#include <stdio.h>

#include "model/synthetic_sparsity.cuh"
#include "model/train_model.cuh"

// targets [L]: non-zeros per token per layer; T: tokens per calibration forward (<= max_seq). nnz_out [L] (may be
// NULL): the measured non-zeros per token per layer. Returns malloc'd fp32 parameters [total]; *worst: the largest
// relative error of a layer.
static inline float *infer_synthetic_params(const ModelConfig *cfg, const double *targets, int T, uint64_t seed,
                                            double *nnz_out, double *worst, FILE *log) {
    if (T > cfg->max_seq) T = cfg->max_seq;
    Model m;
    model_create(&m, cfg, 1, T, 0, 0, 0);
    model_init_random(&m, seed);
    const double t0 = sllm_time_s();
    if (log) fprintf(log, "synthetic sparsity: calibrating %d layers on random tokens (1 x %d per forward)\n",
                     cfg->n_layer, T);
    *worst = model_synthetic_sparsity_profile(&m, targets, seed, nnz_out, log);
    if (log) fprintf(log, "synthetic sparsity: calibrated in %.1f s, worst layer off by %.1f%%\n", sllm_time_s() - t0,
                     100 * *worst);
    float *host = (float *)sllm_malloc(m.lay.total * sizeof(float));
    model_get_params(&m, host);
    model_free(&m);
    return host;
}

#endif  // SLLM_MODEL_INFER_SYNTHETIC_CUH
