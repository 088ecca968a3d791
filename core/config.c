// core/config.c: presets, validation, parameter layout and the start-up table. See config.h.
#include "config.h"

#include <string.h>

const char *const CONFIG_PRESET_NAMES[] = {"test", "tiny", "small", "0.5B", "1B", "1.5B", "2B", NULL};

void config_defaults(ModelConfig *c) {
    memset(c, 0, sizeof(*c));
    c->rope_theta = 100000.0f;
    c->norm_eps = 1e-5f;
    c->gated = 1;
    c->tied = 1;
    c->l1_lambda = 2e-5f;
}

static void set_shape(ModelConfig *c, int V, int D, int L, int H, int F, int T) {
    c->vocab_size = V; c->d_model = D; c->n_layer = L; c->n_head = H; c->n_kv_head = H;
    c->head_dim = D / H; c->d_ff = F; c->max_seq = T;
}

int config_from_preset(const char *name, ModelConfig *out) {
    config_defaults(out);
    if (!strcmp(name, "test"))       set_shape(out, 96, 32, 2, 4, 64, 16);          // unit tests, gradcheck
    else if (!strcmp(name, "tiny"))  set_shape(out, 49152, 256, 4, 4, 704, 256);     // CPU quick start, GPU tests
    else if (!strcmp(name, "small")) set_shape(out, 49152, 768, 12, 12, 2048, 1024); // GPU quick start (~0.16B)
    else if (!strcmp(name, "0.5B"))  set_shape(out, 49152, 2048, 8, 32, 5632, 2048);
    else if (!strcmp(name, "1B"))    set_shape(out, 49152, 2048, 18, 32, 5632, 2048);
    else if (!strcmp(name, "1.5B"))  set_shape(out, 49152, 2048, 28, 32, 5632, 2048);
    else if (!strcmp(name, "2B"))    set_shape(out, 49152, 2048, 38, 32, 5632, 2048);
    else return 0;
    return 1;
}

int config_validate(const ModelConfig *c, char *err, size_t n) {
#define BAD(...) do { snprintf(err, n, __VA_ARGS__); return -1; } while (0)
    if (c->vocab_size <= 0) BAD("vocab_size must be > 0 (got %d)", c->vocab_size);
    if (c->d_model <= 0) BAD("d_model must be > 0 (got %d)", c->d_model);
    if (c->n_layer <= 0) BAD("n_layer must be > 0 (got %d)", c->n_layer);
    if (c->n_head <= 0) BAD("n_head must be > 0 (got %d)", c->n_head);
    if (c->n_kv_head <= 0 || c->n_head % c->n_kv_head != 0)
        BAD("n_kv_head (%d) must be > 0 and divide n_head (%d)", c->n_kv_head, c->n_head);
    if (c->head_dim <= 0 || c->head_dim % 2 != 0)
        BAD("head_dim must be a positive even number for RoPE (got %d)", c->head_dim);
    if (c->d_ff <= 0) BAD("d_ff must be > 0 (got %d)", c->d_ff);
    if (c->max_seq <= 0) BAD("max_seq must be > 0 (got %d)", c->max_seq);
    if (!(c->rope_theta > 0)) BAD("rope_theta must be > 0 (got %g)", c->rope_theta);
    if (!(c->norm_eps > 0)) BAD("norm_eps must be > 0 (got %g)", c->norm_eps);
    if (c->gated != 0 && c->gated != 1) BAD("gated must be 0 or 1 (got %d)", c->gated);
    if (c->tied != 1) BAD("only tied input/output embeddings are supported (tied = %d)", c->tied);
    if (!(c->l1_lambda >= 0)) BAD("l1_lambda must be >= 0 (got %g)", c->l1_lambda);
    return 0;
#undef BAD
}

void config_param_layout(const ModelConfig *c, ParamLayout *lay) {
    const size_t V = c->vocab_size, D = c->d_model, L = c->n_layer, F = c->d_ff;
    const size_t Q = (size_t)c->n_head * c->head_dim, KV = (size_t)c->n_kv_head * c->head_dim;
    struct { const char *name, *hf; int per_layer; size_t rows, cols; int decay, norm; } spec[NUM_PARAM_KINDS] = {
        [PARAM_EMBED]      = {"embed", "model.embed_tokens.weight", 0, V, D, 1, 0},
        [PARAM_ATTN_NORM]  = {"attn_norm", "model.layers.%d.input_layernorm.weight", 1, 1, D, 0, 1},
        [PARAM_WQ]         = {"wq", "model.layers.%d.self_attn.q_proj.weight", 1, Q, D, 1, 0},
        [PARAM_WK]         = {"wk", "model.layers.%d.self_attn.k_proj.weight", 1, KV, D, 1, 0},
        [PARAM_WV]         = {"wv", "model.layers.%d.self_attn.v_proj.weight", 1, KV, D, 1, 0},
        [PARAM_WO]         = {"wo", "model.layers.%d.self_attn.o_proj.weight", 1, D, Q, 1, 0},
        [PARAM_FFN_NORM]   = {"ffn_norm", "model.layers.%d.post_attention_layernorm.weight", 1, 1, D, 0, 1},
        [PARAM_WG]         = {"wg", "model.layers.%d.mlp.gate_proj.weight", 1, c->gated ? F : 0, D, 1, 0},
        [PARAM_WU]         = {"wu", "model.layers.%d.mlp.up_proj.weight", 1, F, D, 1, 0},
        [PARAM_WD]         = {"wd", "model.layers.%d.mlp.down_proj.weight", 1, D, F, 1, 0},
        [PARAM_FINAL_NORM] = {"final_norm", "model.norm.weight", 0, 1, D, 0, 1},
    };
    size_t off = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        ParamTensor *t = &lay->t[k];
        t->name = spec[k].name; t->hf_name = spec[k].hf; t->per_layer = spec[k].per_layer;
        t->rows = spec[k].rows; t->cols = spec[k].cols;
        t->numel = (spec[k].per_layer ? L : 1) * spec[k].rows * spec[k].cols;
        t->offset = off;
        t->weight_decay = spec[k].decay; t->is_norm = spec[k].norm;
        off += t->numel;
    }
    lay->total = off;
}

static void human(size_t n, char *buf, size_t sz) {
    if (n >= 1000000000) snprintf(buf, sz, "%.3f B", n / 1e9);
    else if (n >= 1000000) snprintf(buf, sz, "%.2f M", n / 1e6);
    else if (n >= 1000) snprintf(buf, sz, "%.1f K", n / 1e3);
    else snprintf(buf, sz, "%zu", n);
}

void config_print(const ModelConfig *c, FILE *f) {
    ParamLayout lay;
    config_param_layout(c, &lay);
    char buf[32];
    fprintf(f, "+-----------------------+----------------------------------------------+\n");
    fprintf(f, "| %-21s | %-44s |\n", "model", c->gated ? "Llama, ReLU-gated FFN, tied embeddings" : "Llama, ReLU FFN (non-gated), tied embeddings");
    fprintf(f, "| %-21s | %-44d |\n", "vocab_size V", c->vocab_size);
    fprintf(f, "| %-21s | %-44d |\n", "d_model D", c->d_model);
    fprintf(f, "| %-21s | %-44d |\n", "n_layer L", c->n_layer);
    fprintf(f, "| %-21s | %-44d |\n", "n_head H", c->n_head);
    fprintf(f, "| %-21s | %-44d |\n", "n_kv_head", c->n_kv_head);
    fprintf(f, "| %-21s | %-44d |\n", "head_dim", c->head_dim);
    fprintf(f, "| %-21s | %-44d |\n", "d_ff F", c->d_ff);
    fprintf(f, "| %-21s | %-44d |\n", "max_seq", c->max_seq);
    fprintf(f, "| %-21s | %-44g |\n", "rope_theta", c->rope_theta);
    fprintf(f, "| %-21s | %-44g |\n", "norm_eps", c->norm_eps);
    fprintf(f, "| %-21s | %-44g |\n", "l1_lambda", c->l1_lambda);
    fprintf(f, "+-----------------------+--------------------------+-------------------+\n");
    fprintf(f, "| %-21s | %-24s | %17s |\n", "tensor", "shape", "parameters");
    fprintf(f, "+-----------------------+--------------------------+-------------------+\n");
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        const ParamTensor *t = &lay.t[k];
        if (t->numel == 0) continue;
        char shape[64];
        if (t->per_layer) snprintf(shape, sizeof shape, "[%d, %zu, %zu]", c->n_layer, t->rows, t->cols);
        else if (t->rows == 1) snprintf(shape, sizeof shape, "[%zu]", t->cols);
        else snprintf(shape, sizeof shape, "[%zu, %zu]", t->rows, t->cols);
        human(t->numel, buf, sizeof buf);
        fprintf(f, "| %-21s | %-24s | %17s |\n", t->name, shape, buf);
    }
    human(lay.total, buf, sizeof buf);
    fprintf(f, "+-----------------------+--------------------------+-------------------+\n");
    fprintf(f, "| %-21s | %-24s | %17s |\n", "total", "", buf);
    fprintf(f, "+-----------------------+--------------------------+-------------------+\n");
}
