// core/train_config.h: the training configuration a checkpoint saves, so that resume continues the same run.
//
// The trainers (train_gpt_relu, train_cpu) fill a TrainConfig from their command line and the model config, write
// it into every checkpoint as "train_config.json", and on --resume compare the current one with the saved one:
// any difference (schedule, steps, warmup, lr, final LR fraction, weight decay, betas, eps, clip, sequence, total
// batch, L1 lambda, rope_theta, seed) is refused with an error that lists every differing key and names the flag
// that allows the change (--allow-config-change). The layout of the global batch (world size, per-rank batch) may
// change: the run stays the same (same global batch, optimizer shards re-cut; equal within bf16 noise, not
// bit-exact), and the change is reported. Floats are compared exactly (they are
// stored as the doubles of the floats, which JSON round-trips).
#ifndef SLLM_TRAIN_CONFIG_H
#define SLLM_TRAIN_CONFIG_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TRAIN_CONFIG_FILE "train_config.json"
#define TRAIN_CONFIG_ALLOW_FLAG "--allow-config-change"

typedef struct {
    const char *schedule;  // cosine, linear, constant
    int steps, warmup;
    float lr, final_lr_frac, wd, beta1, beta2, eps, grad_clip;
    int batch, seq, total_batch, world;
    float l1, rope_theta;
    unsigned long long seed;
} TrainConfig;

// The configuration as a JSON text (malloc'd; NULL when out of memory).
char *train_config_json(const TrainConfig *tc);
// Compares the saved JSON text with tc. Returns the number of differing keys (0: same) and lists them in diff as
// "key saved -> current, ..."; -1 when the saved text is not a valid configuration (message in diff). Layout keys
// (world, batch) are not counted: their differences go to layout[ln] (may be NULL), the same way.
int train_config_diff(const char *saved_json, const TrainConfig *tc, char *diff, size_t n, char *layout, size_t ln);
// Resume check: reads <ckpt_dir>/train_config.json and compares. A difference is an error (-1, message in err
// naming the keys and TRAIN_CONFIG_ALLOW_FLAG) unless allow_change, which returns 1 and the list in err; 0 when
// identical. A checkpoint without the file (written by a trainer before it existed) is an error unless allow_change.
// Layout changes (world, batch) are listed in layout[ln] (empty when none) whatever the return value.
int train_config_check(const char *ckpt_dir, const TrainConfig *tc, int allow_change, char *err, size_t n,
                       char *layout, size_t ln);

#ifdef __cplusplus
}
#endif
#endif  // SLLM_TRAIN_CONFIG_H
