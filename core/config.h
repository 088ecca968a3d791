// core/config.h: model configuration, presets, and the parameter tensor table.
//
// Every implementation (CPU reference in test/, GPU trainer, inference, checkpoints) stores the
// parameters in ONE flat buffer, tensor after tensor in the order of ParamKind below; per-layer
// tensors are stacked with a leading L dimension (llm.c style). Shapes use Hugging Face Llama
// layouts (nn.Linear weights are [out, in]):
//
//   EMBED      [V, D]           model.embed_tokens.weight (tied: also the LM head)
//   ATTN_NORM  [L, D]           model.layers.N.input_layernorm.weight
//   WQ         [L, H*hd, D]     model.layers.N.self_attn.q_proj.weight
//   WK         [L, KVH*hd, D]   model.layers.N.self_attn.k_proj.weight
//   WV         [L, KVH*hd, D]   model.layers.N.self_attn.v_proj.weight
//   WO         [L, D, H*hd]     model.layers.N.self_attn.o_proj.weight
//   FFN_NORM   [L, D]           model.layers.N.post_attention_layernorm.weight
//   WG         [L, F, D]        model.layers.N.mlp.gate_proj.weight  (gated FFN only; else 0 elements)
//   WU         [L, F, D]        model.layers.N.mlp.up_proj.weight
//   WD         [L, D, F]        model.layers.N.mlp.down_proj.weight
//   FINAL_NORM [D]              model.norm.weight
//
// FFN: gated  h = relu(x Wg^T) * (x Wu^T), y = h Wd^T;  non-gated  h = relu(x Wu^T), y = h Wd^T.
// Loss: CE + l1_lambda * mean_layers( mean_tokens( sum_F |h| ) )   (PAPER.md, "Sparsity by L1").
#ifndef SLLM_CONFIG_H
#define SLLM_CONFIG_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int vocab_size;     // V
    int d_model;        // D
    int n_layer;        // L
    int n_head;         // H
    int n_kv_head;      // KVH (== H for MHA; H % KVH == 0 for GQA)
    int head_dim;       // hd (D / H unless set otherwise)
    int d_ff;           // F
    int max_seq;        // longest sequence the model is meant for (RoPE table size)
    float rope_theta;   // 100000 in the paper
    float norm_eps;     // 1e-5
    int gated;          // 1: relu(x Wg^T) * (x Wu^T); 0: relu(x Wu^T)
    int tied;           // 1: LM head = embedding (only tied models are supported)
    float l1_lambda;    // L1 activation penalty weight (2e-5 recommended)
} ModelConfig;

typedef enum {
    PARAM_EMBED = 0, PARAM_ATTN_NORM, PARAM_WQ, PARAM_WK, PARAM_WV, PARAM_WO, PARAM_FFN_NORM,
    PARAM_WG, PARAM_WU, PARAM_WD, PARAM_FINAL_NORM, NUM_PARAM_KINDS
} ParamKind;

typedef struct {
    const char *name;      // short name ("wq")
    const char *hf_name;   // Hugging Face name pattern; "%d" stands for the layer index
    int per_layer;         // 1: stacked [L, rows, cols]
    size_t rows, cols;     // shape of one slice (cols == 1 for vectors? no: vectors have rows == 1)
    size_t numel;          // total elements (L * rows * cols for per-layer tensors; 0 if absent)
    size_t offset;         // element offset in the flat parameter buffer
    int weight_decay;      // 1 for 2-D weight matrices, 0 for norm gains
    int is_norm;           // 1 for RMSNorm gains (initialised to 1)
} ParamTensor;

typedef struct {
    ParamTensor t[NUM_PARAM_KINDS];
    size_t total;          // total number of parameters
} ParamLayout;

// Fill in defaults shared by all presets (rope_theta 1e5, eps 1e-5, gated, tied, MHA).
void config_defaults(ModelConfig *c);
// Look up a preset by name: "test", "tiny", "small", "0.5B", "1B", "1.5B", "2B". Returns 0 if unknown.
int config_from_preset(const char *name, ModelConfig *out);
// Names of all presets, NULL-terminated.
extern const char *const CONFIG_PRESET_NAMES[];
// Check a config for consistency. Returns 0 if fine; else writes a message into err (size n) and returns -1.
int config_validate(const ModelConfig *c, char *err, size_t n);
// Compute the flat parameter layout of a config.
void config_param_layout(const ModelConfig *c, ParamLayout *lay);
// Print the start-up table (shapes, parameter counts) to f.
void config_print(const ModelConfig *c, FILE *f);

#ifdef __cplusplus
}
#endif
#endif  // SLLM_CONFIG_H
