// build/ref_export OUT_DIR: writes reference checkpoints for the Hugging Face interop check
// (dev/hf_interop.py). For each of two tiny gated configs, "mha" and "gqa", it writes the checkpoint
// directory OUT_DIR/<name>/ (model.safetensors in F32 + config.json) and OUT_DIR/<name>/reference.json:
//   {"config": "<name>", "tokens": [T ints], "T": T, "V": V, "logits": [T*V doubles, row-major [T, V]]}
// The logits come from the float64 CPU reference (model/ref_model.c) run on exactly the float32 weights
// that were written. Weights are drawn larger than the training init (std 0.1, norm gains 1 +- 0.2)
// so that attention, RoPE and the FFN all shape the logits.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "common.h"
#include "model/ref_model.h"
#include "rng.h"

static void export_one(const char *out_dir, const char *name, int H, int KVH, int hd, uint64_t seed) {
    ModelConfig c;
    config_defaults(&c);
    c.vocab_size = 256; c.d_model = 64; c.n_layer = 2; c.n_head = H; c.n_kv_head = KVH; c.head_dim = hd;
    c.d_ff = 160; c.max_seq = 64; c.rope_theta = 10000.0f; c.norm_eps = 1e-5f; c.gated = 1; c.l1_lambda = 0;
    RefModel m;
    ref_model_init(&m, &c, seed);
    Rng r;
    rng_seed(&r, seed ^ 0x5eedull);
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        const ParamTensor *t = &m.lay.t[k];
        for (size_t i = 0; i < t->numel; i++)
            m.params[t->offset + i] = t->is_norm ? 1.0 + 0.2 * (2 * rng_uniform(&r) - 1) : 0.1 * rng_normal(&r);
    }
    float *p32 = sllm_malloc(m.lay.total * sizeof(float));
    ref_model_to_f32(&m, p32);
    ref_model_from_f32(&m, p32);  // the reference runs on exactly the stored float32 weights

    char dir[1024], err[512];
    snprintf(dir, sizeof dir, "%s/%s", out_dir, name);
    if (ckpt_save_model(dir, &c, p32, ST_F32, err, sizeof err) != 0) SLLM_FATAL("ref_export: %s", err);

    enum { T = 32 };
    int tokens[T], targets[T];
    for (int t = 0; t < T; t++) { tokens[t] = (int)rng_below(&r, c.vocab_size); targets[t] = 0; }
    tokens[5] = tokens[20];  // a repeated token at two positions: only RoPE and context tell them apart
    double *logits = sllm_malloc((size_t)T * c.vocab_size * sizeof(double));
    ref_forward_backward(&m, tokens, targets, 1, T, logits, NULL, NULL);

    char path[1200];
    snprintf(path, sizeof path, "%s/reference.json", dir);
    FILE *f = sllm_fopen(path, "w");
    fprintf(f, "{\"config\": \"%s\", \"T\": %d, \"V\": %d, \"tokens\": [", name, T, c.vocab_size);
    for (int t = 0; t < T; t++) fprintf(f, t ? ", %d" : "%d", tokens[t]);
    fprintf(f, "],\n \"logits\": [");
    for (size_t i = 0; i < (size_t)T * c.vocab_size; i++) fprintf(f, i ? (i % 8 ? ", %.17g" : ",\n  %.17g") : "%.17g", logits[i]);
    fprintf(f, "]}\n");
    if (fclose(f) != 0) SLLM_FATAL("ref_export: writing %s failed: %s", path, strerror(errno));
    printf("ref_export: %-3s H=%d KVH=%d hd=%d D=%d F=%d L=%d V=%d: wrote %s (+ reference.json, %d tokens)\n", name, H,
           KVH, hd, c.d_model, c.d_ff, c.n_layer, c.vocab_size, dir, T);
    free(logits);
    free(p32);
    ref_model_free(&m);
}

int main(int argc, char **argv) {
    if (argc != 2 || argv[1][0] == '-') {
        fprintf(stderr, "usage: %s OUT_DIR\n  writes OUT_DIR/mha and OUT_DIR/gqa (checkpoint + reference.json) for dev/hf_interop.py\n", argv[0]);
        return 2;
    }
    if (mkdir(argv[1], 0755) != 0 && errno != EEXIST) SLLM_FATAL("ref_export: cannot create %s: %s", argv[1], strerror(errno));
    export_one(argv[1], "mha", 4, 4, 16, 1234);
    export_one(argv[1], "gqa", 8, 2, 8, 5678);
    return 0;
}
