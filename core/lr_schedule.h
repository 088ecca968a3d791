// core/lr_schedule.h: learning-rate schedule, host code shared by the CPU reference and the GPU trainer.
//
// step is 0-based (the lr used for the update of step `step`).
//   warmup:  step < warmup  ->  lr = max_lr * (step + 1) / warmup   (max_lr/warmup .. max_lr)
//   decay:   r = (step - warmup) / (total - warmup) in [0, 1], min_lr = max_lr * final_frac
//            "cosine":   lr = min_lr + 0.5 * (1 + cos(pi * r)) * (max_lr - min_lr)
//            "linear":   lr = max_lr - r * (max_lr - min_lr)
//            "constant": lr = max_lr
//   step >= total  ->  min_lr (cosine, linear) or max_lr (constant).
#ifndef SLLM_LR_SCHEDULE_H
#define SLLM_LR_SCHEDULE_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Check a schedule's arguments (known kind, warmup >= 0, total >= 1, max_lr >= 0, 0 <= final_frac <= 1).
// Returns 0 if fine; else writes a message into err (size n) and returns -1.
int lr_schedule_check(const char *kind, int warmup, int total, float max_lr, float final_frac, char *err, size_t n);
// The learning rate of a step. Dies with a clear message on an unknown kind (call lr_schedule_check first).
float lr_schedule(const char *kind, int step, int warmup, int total, float max_lr, float final_frac);

#ifdef __cplusplus
}
#endif
#endif  // SLLM_LR_SCHEDULE_H
