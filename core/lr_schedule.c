// core/lr_schedule.c: see lr_schedule.h.
#include "lr_schedule.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "common.h"

int lr_schedule_check(const char *kind, int warmup, int total, float max_lr, float final_frac, char *err, size_t n) {
    if (!kind || (strcmp(kind, "cosine") && strcmp(kind, "linear") && strcmp(kind, "constant"))) {
        snprintf(err, n, "unknown lr schedule '%s' (expected cosine, linear or constant)", kind ? kind : "(null)");
        return -1;
    }
    if (warmup < 0) { snprintf(err, n, "lr warmup must be >= 0 (got %d)", warmup); return -1; }
    if (total < 1) { snprintf(err, n, "lr schedule total steps must be >= 1 (got %d)", total); return -1; }
    if (!(max_lr >= 0)) { snprintf(err, n, "max lr must be >= 0 (got %g)", max_lr); return -1; }
    if (!(final_frac >= 0 && final_frac <= 1)) {
        snprintf(err, n, "lr final fraction must be in [0, 1] (got %g)", final_frac);
        return -1;
    }
    return 0;
}

float lr_schedule(const char *kind, int step, int warmup, int total, float max_lr, float final_frac) {
    const int cosine = !strcmp(kind, "cosine"), linear = !strcmp(kind, "linear"), constant = !strcmp(kind, "constant");
    if (!cosine && !linear && !constant)
        SLLM_FATAL("unknown lr schedule '%s' (expected cosine, linear or constant)", kind);
    if (step < warmup) return (float)((double)max_lr * (step + 1) / warmup);
    if (constant) return max_lr;
    const double min_lr = (double)max_lr * final_frac;
    if (step >= total || total <= warmup) return (float)min_lr;
    const double r = (double)(step - warmup) / (double)(total - warmup);
    if (cosine) return (float)(min_lr + 0.5 * (1.0 + cos(M_PI * r)) * ((double)max_lr - min_lr));
    return (float)((double)max_lr - r * ((double)max_lr - min_lr));
}
