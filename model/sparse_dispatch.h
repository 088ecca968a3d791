// model/sparse_dispatch.h: the per-layer choice between the dense and the sparse (TwELL) FFN in training, as pure
// host functions of counts (no CUDA), so that the CPU tests can run them and so that every rank decides the same.
//
// Each layer starts dense. At the end of every optimizer step the trainer reads, with the step's one existing sync,
// per layer: the active (token, unit) pairs of the step, the tokens of the step, and, for a sparse layer, the rows the
// sparse FFN had to run densely in its last forward (overflowing TwELL tiles, rows over dense_row_nnz, pool full) and
// the rows of that forward. With several ranks these counts are summed over the ranks (one all-reduce of
// SPARSE_COUNTS_PER_LAYER * L uint64) BEFORE sparse_dispatch_update: the decision is then the same on every rank.
//
// Hysteresis: a dense layer turns sparse when its non-zeros per token fall below on_nnz; a sparse layer turns back
// dense when they rise above off_nnz (> on_nnz), or when more than max_dense_frac of its rows ran densely. After a
// switch a layer stays at least min_dwell steps on its path (no flapping on noisy counts).
//
// Default thresholds (as fractions of d_ff, from dev/bench/bench_ffn_train at D 2048, F 5632, M 16384 on an H100:
// sparse fwd+bwd 2.24x / 1.88x / 1.48x / 0.91x the dense at nnz 8 / 16 / 29 / 64, so the crossover is near nnz 58,
// ~1.0% of F): on at 40/5632 (~1.3x, a margin for per-row tails), off at 56/5632 (~1.0x).
#ifndef SLLM_SPARSE_DISPATCH_H
#define SLLM_SPARSE_DISPATCH_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

typedef enum { FFN_PATH_AUTO = 0, FFN_PATH_DENSE = 1, FFN_PATH_SPARSE = 2 } FFNPathMode;

#define SPARSE_ON_FRAC (40.0 / 5632.0)
#define SPARSE_OFF_FRAC (56.0 / 5632.0)
#define SPARSE_MAX_DENSE_FRAC 0.05
#define SPARSE_MIN_DWELL 20

typedef struct {
    double on_nnz, off_nnz;   // non-zeros per token: dense -> sparse below on_nnz, sparse -> dense above off_nnz
    double max_dense_frac;    // sparse -> dense when more of its rows than this ran densely
    int min_dwell;            // steps on a path after a switch before another switch
} SparseDispatchParams;

// Counts of one layer for one step (sums over ranks with several ranks).
enum { SC_PAIRS = 0, SC_TOKENS = 1, SC_DENSE_ROWS = 2, SC_ROWS = 3, SPARSE_COUNTS_PER_LAYER = 4 };

static inline SparseDispatchParams sparse_dispatch_defaults(int d_ff) {
    SparseDispatchParams p;
    p.on_nnz = SPARSE_ON_FRAC * d_ff;
    p.off_nnz = SPARSE_OFF_FRAC * d_ff;
    p.max_dense_frac = SPARSE_MAX_DENSE_FRAC;
    p.min_dwell = SPARSE_MIN_DWELL;
    return p;
}

// One layer: the path for the next step (1 sparse, 0 dense) from the current path and the step's counts c
// [SPARSE_COUNTS_PER_LAYER]. steps_on_path: steps since the last switch. Layers with no tokens keep their path.
static inline int sparse_dispatch_decide(int sparse_now, const uint64_t *c, int steps_on_path,
                                         const SparseDispatchParams *p) {
    if (c[SC_TOKENS] == 0 || steps_on_path < p->min_dwell) return sparse_now;
    const double nnz = (double)c[SC_PAIRS] / (double)c[SC_TOKENS];
    if (!sparse_now) return nnz < p->on_nnz;
    const double dense_frac = c[SC_ROWS] ? (double)c[SC_DENSE_ROWS] / (double)c[SC_ROWS] : 0.0;
    return !(nnz > p->off_nnz || dense_frac > p->max_dense_frac);
}

typedef struct {
    int layer, to_sparse;
    double nnz, dense_frac;
} SparseSwitch;

// All layers: sparse[l] (in/out), steps_on_path[l] (in/out), counts [L, SPARSE_COUNTS_PER_LAYER]. mode forces a path
// (FFN_PATH_DENSE / FFN_PATH_SPARSE) or decides (FFN_PATH_AUTO). Writes the switches to ev (up to L) and returns their
// number.
static inline int sparse_dispatch_update(int L, int mode, int *sparse, int *steps_on_path, const uint64_t *counts,
                                         const SparseDispatchParams *p, SparseSwitch *ev) {
    int n = 0;
    for (int l = 0; l < L; l++) {
        const uint64_t *c = counts + (size_t)l * SPARSE_COUNTS_PER_LAYER;
        int next = mode == FFN_PATH_DENSE ? 0 : mode == FFN_PATH_SPARSE ? 1
                                                                          : sparse_dispatch_decide(sparse[l], c, steps_on_path[l], p);
        if (next != sparse[l]) {
            ev[n].layer = l;
            ev[n].to_sparse = next;
            ev[n].nnz = c[SC_TOKENS] ? (double)c[SC_PAIRS] / (double)c[SC_TOKENS] : 0.0;
            ev[n].dense_frac = c[SC_ROWS] ? (double)c[SC_DENSE_ROWS] / (double)c[SC_ROWS] : 0.0;
            n++;
            sparse[l] = next;
            steps_on_path[l] = 0;
        }
        steps_on_path[l]++;
    }
    return n;
}

static inline const char *ffn_path_name(int mode) {
    return mode == FFN_PATH_DENSE ? "dense" : mode == FFN_PATH_SPARSE ? "sparse" : "auto";
}
static inline int ffn_path_parse(const char *s) {
    if (!s || !*s) return -1;
    if (!strcmp(s, "auto")) return FFN_PATH_AUTO;
    if (!strcmp(s, "dense")) return FFN_PATH_DENSE;
    if (!strcmp(s, "sparse")) return FFN_PATH_SPARSE;
    return -1;
}

#endif  // SLLM_SPARSE_DISPATCH_H
