// model/weights.cuh: the model's parameters on the device, shared by the training model (model/train_model.cuh)
// and the inference engine (model/infer_engine.cuh).
//
//   params [total] bf16   the flat layout of core/config.h: tensors in ParamKind order, per-layer tensors stacked
//                         [L, rows, cols] (so Wq, Wk, Wv of a layer are L*Q*D elements apart when Q == KV, and Wg,
//                         Wu are L*F*D apart: the batched GEMMs of model/block.cuh rely on it)
//   master [total] fp32   optional (training): the fp32 copy the optimizer updates
//
// Here: the shape checks every model runs at creation, the pointer of tensor k of layer l, the per-layer view
// LayerWeights, fp32 host -> bf16 upload, and the deterministic random init (params_init_random).
#ifndef SLLM_MODEL_WEIGHTS_CUH
#define SLLM_MODEL_WEIGHTS_CUH

#include <stdint.h>

#include "config.h"
#include "cuda_common.cuh"
#include "kernel_utils.cuh"

// The config checks of every device model; `who` prefixes the error.
static inline void weights_check_config(const ModelConfig *cfg, const char *who) {
    char err[256];
    if (config_validate(cfg, err, sizeof err) != 0) SLLM_FATAL("%s: invalid config: %s", who, err);
    if (cfg->d_model % 8 || cfg->d_ff % 8 || (cfg->n_head * cfg->head_dim) % 8 || (cfg->n_kv_head * cfg->head_dim) % 8)
        SLLM_FATAL("%s: d_model (%d), d_ff (%d), n_head*head_dim and n_kv_head*head_dim must be multiples of 8 "
                   "(16-byte vector accesses)", who, cfg->d_model, cfg->d_ff);
}

// Element offset of tensor k of layer l (l ignored for tensors that are not per layer).
static inline size_t param_offset(const ParamLayout *lay, ParamKind k, int l) {
    const ParamTensor *t = &lay->t[k];
    return t->offset + (t->per_layer ? (size_t)l * t->rows * t->cols : 0);
}
static inline bf16 *param_ptr(bf16 *params, const ParamLayout *lay, ParamKind k, int l) {
    return params + param_offset(lay, k, l);
}

// The weights one transformer block reads. wg is NULL for a non-gated FFN. next_norm: the gain of the norm that
// follows the block (the next layer's attention norm, or the final norm after the last layer).
typedef struct {
    const bf16 *attn_norm, *wq, *wk, *wv, *wo, *ffn_norm, *wg, *wu, *wd, *next_norm;
} LayerWeights;

static inline LayerWeights layer_weights(bf16 *params, const ParamLayout *lay, const ModelConfig *cfg, int l) {
    LayerWeights w;
    w.attn_norm = param_ptr(params, lay, PARAM_ATTN_NORM, l);
    w.wq = param_ptr(params, lay, PARAM_WQ, l);
    w.wk = param_ptr(params, lay, PARAM_WK, l);
    w.wv = param_ptr(params, lay, PARAM_WV, l);
    w.wo = param_ptr(params, lay, PARAM_WO, l);
    w.ffn_norm = param_ptr(params, lay, PARAM_FFN_NORM, l);
    w.wg = cfg->gated ? param_ptr(params, lay, PARAM_WG, l) : NULL;
    w.wu = param_ptr(params, lay, PARAM_WU, l);
    w.wd = param_ptr(params, lay, PARAM_WD, l);
    w.next_norm = l + 1 < cfg->n_layer ? param_ptr(params, lay, PARAM_ATTN_NORM, l + 1)
                                       : param_ptr(params, lay, PARAM_FINAL_NORM, 0);
    return w;
}

// Host fp32 flat buffer [n] -> master (when not NULL) and the bf16 working weights (round to nearest even).
// Synchronizes `stream`.
static inline void params_upload(bf16 *params, float *master, const float *host, size_t n, cudaStream_t stream) {
    float *tmp = master;
    if (!tmp) cudaCheck(cudaMalloc((void **)&tmp, n * 4));
    cudaCheck(cudaMemcpy(tmp, host, n * 4, cudaMemcpyHostToDevice));
    f32_to_bf16(params, tmp, n, stream);
    cudaCheck(cudaStreamSynchronize(stream));
    if (!master) cudaCheck(cudaFree(tmp));
}

// ---- random init on the device (fast for the big presets; deterministic for a seed) ---------------
__device__ __forceinline__ uint64_t weights_mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
// out[i] = std * normal(hash(seed, i)) (Box-Muller on two 53-bit uniforms), or `fill` when std == 0.
static __global__ void weights_init_kernel(float *out, size_t n, uint64_t seed, float stdv, float fill) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    if (stdv == 0.0f) { out[i] = fill; return; }
    uint64_t a = weights_mix64(seed ^ weights_mix64(2 * i)), b = weights_mix64(seed ^ weights_mix64(2 * i + 1));
    double u1 = ((a >> 11) + 1) * 0x1.0p-53, u2 = (b >> 11) * 0x1.0p-53;
    out[i] = (float)(stdv * sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}

// Device init of a flat parameter buffer: matrices and embedding ~ N(0, 0.02) (hash of seed, tensor, index), norm
// gains = 1; fp32 into `master` (or a temporary buffer when NULL), then rounded to bf16 into params. Synchronizes.
static inline void params_init_random(bf16 *params, float *master, const ParamLayout *lay, uint64_t seed,
                                      cudaStream_t stream) {
    size_t n = lay->total;
    float *dst = master;
    if (!dst) cudaCheck(cudaMalloc((void **)&dst, n * 4));
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        const ParamTensor *t = &lay->t[k];
        if (t->numel == 0) continue;
        weights_init_kernel<<<(unsigned)ceil_div_sz(t->numel, 256), 256, 0, stream>>>(
            dst + t->offset, t->numel, seed * 0x100000001b3ull + (uint64_t)k, t->is_norm ? 0.0f : 0.02f, 1.0f);
        cudaCheckLaunch();
    }
    f32_to_bf16(params, dst, n, stream);
    cudaCheck(cudaStreamSynchronize(stream));
    if (!master) cudaCheck(cudaFree(dst));
}

#endif  // SLLM_MODEL_WEIGHTS_CUH
