// twell/dispatch.h: the dense / sparse dispatch model of the TwELL FFN (AUTO) and its fit, as host code (plain C:
// tested on the CPU by test/test_twell_dispatch.c). twell/ffn.cuh keeps the per-workspace state and calls these.
#ifndef SLLM_TWELL_DISPATCH_H
#define SLLM_TWELL_DISPATCH_H

// Dispatch cost model (AUTO), in units of the dense FFN time on the same rows:
//   predicted sparse / dense = s0 + s1 * sparse_nnz + fovf * overflow_row_fraction
// sparse_nnz = the active units per token (over all rows) of the rows the sparse up/down computes, i.e. without
// the overflow rows, which the dense fallback pays as fovf (measured: the mean over all rows times the last
// sparse call's share ws->last_sparse_share; the mean alone would count heavy overflow rows twice and keep heavy
// patterns on the dense path while sparse is faster).
// Sparse runs when that is < 1 - margin, dense when > 1 + margin; in between the previous path is kept
// (hysteresis: no flip-flopping on noise near the crossover; the cost of a wrong pick there is at most
// ~margin). Crossover nnz* = (1 - s0) / s1. twell_ffn_calibrate() measures s0 and s1 on the caller's
// own data and GPU (recommended once at start-up); the defaults below are used until then.
// Defaults: the least-squares fit of bench_ffn's sweep (H200, D 2048, F 5632, M 65536, uniform rows, nnz 8-128)
// with the default kernels: s0 0.3172, s1 0.008670 -> crossover 79. Refresh from bench_ffn's "fitted model" line
// after kernel changes.
#define TWELL_DISPATCH_S0 0.3172
#define TWELL_DISPATCH_S1 0.008670
#define TWELL_DISPATCH_FOVF 1.2
#define TWELL_DISPATCH_MARGIN 0.03
// A dense call's active-gate count costs a memset, a copy back and an event (~6 us per call: 2-3% of the prefill of a
// d_model 512 model); while a layer stays dense its count moves slowly, so the first dense call and then every
// TWELL_DENSE_COUNT_EVERY-th are counted.
#define TWELL_DENSE_COUNT_EVERY 8
// The decode path's model (M <= decode_rows): predicted decode / dense = s0 + s1 * M * nnz + sm * M + sn * nnz
// + sg4 * [the gate takes 4 row tiles: M > 32] (twell_decode_predict; nnz = mean active units per row): at a few rows
// the dense FFN's time hardly depends on M (it reads the weights once); the decode path pays a fixed cost (the gate
// reads Wg), a cost per row, per active (row, unit) pair 8 KB of weight rows, gathered with less parallelism when few
// rows carry many units (sn), and a step where its gate goes from 2 to 4 tiles of 16 rows (every CTA re-reads all
// rows of x: 12.5 -> 20.5 us at D 2048, F 5632; without the step the fit is off by up to 0.11 and sends M 64 / nnz 64
// to decode, 8% slower than dense).
// Defaults: the least-squares fit over the 28 rows under ratio 2 of `bench_decode --nnz 8,29,64,256,50%` (H200,
// D 2048, F 5632, 8 layers from HBM, eager calls): worst residual 0.089.
#define TWELL_DECODE_S0 0.4535
#define TWELL_DECODE_S1 3.49e-05
#define TWELL_DECODE_SM 0.0004438
#define TWELL_DECODE_SN 0.0005274
#define TWELL_DECODE_SG4 0.2853
// The same model for calls captured into a CUDA graph (TWELL_DECODE_G_*; twell_ffn_forward picks it under stream
// capture): the ratio of the two paths' graph times, which leaves out the host's launch cost (eagerly, the dense
// path's 4 launches per layer cost more host time than the decode path's 2, and the eager dense time varies by up to
// 2x between runs with the host: 37-73 us per layer at M 64). Defaults: bench_decode's "fitted graph model" (28 rows
// under ratio 2, worst residual 0.089).
#define TWELL_DECODE_G_S0 0.4549
#define TWELL_DECODE_G_S1 4.572e-05
#define TWELL_DECODE_G_SM -1.679e-05
#define TWELL_DECODE_G_SN 0.0006816
#define TWELL_DECODE_G_SG4 0.41

typedef struct {
    double s0, s1, fovf, margin;
    int calibrated;  // 1 after twell_ffn_calibrate fitted it, 2 when it measured one ratio (nothing to fit), -1 failed
    double sm, sn;   // the decode model only: per row of the call, per active unit of a row (TWELL_DECODE_*)
    double sg4;      // the decode model only: the step at M > 32 (a 4-tile gate)
} TwellDispatchModel;

typedef enum { TWELL_PATH_AUTO = 0, TWELL_PATH_DENSE = 1, TWELL_PATH_SPARSE = 2 } TwellPath;

// Row tiles of 16 rows the decode path's gate takes for M rows (twell/decode.cuh): 1, 2 or 4.
static inline int twell_decode_gate_tiles(int M) { return M <= 16 ? 1 : M <= 32 ? 2 : 4; }

// Predicted sparse / dense time ratio of the model (see TWELL_DISPATCH_*).
static inline double twell_dispatch_predict(const TwellDispatchModel *m, double mean_nnz, double ovf_frac) {
    return m->s0 + m->s1 * mean_nnz + m->fovf * ovf_frac;
}
// The nnz where the model predicts sparse = dense (no overflow).
static inline double twell_dispatch_crossover(const TwellDispatchModel *m) {
    return m->s1 > 0 ? (1.0 - m->s0) / m->s1 : 1e30;
}
// Predicted decode / dense time of a call of M rows with nnz active units per row (the decode model).
static inline double twell_decode_predict(const TwellDispatchModel *m, int M, double nnz) {
    return m->s0 + m->s1 * M * nnz + m->sm * M + m->sn * nnz + (twell_decode_gate_tiles(M) == 4 ? m->sg4 : 0.0);
}
// AUTO decision from a predicted sparse / dense ratio r, with hysteresis (prev: the last path or 0).
static inline TwellPath twell_dispatch_decide_ratio(const TwellDispatchModel *m, double r, int prev) {
    if (r < 1.0 - m->margin) return TWELL_PATH_SPARSE;
    if (r > 1.0 + m->margin) return TWELL_PATH_DENSE;
    if (prev == TWELL_PATH_SPARSE || prev == TWELL_PATH_DENSE) return (TwellPath)prev;
    return r < 1.0 ? TWELL_PATH_SPARSE : TWELL_PATH_DENSE;
}
// AUTO decision of the tile path from an nnz estimate, with hysteresis around the crossover.
static inline TwellPath twell_dispatch_decide(const TwellDispatchModel *m, double mean_nnz, double ovf_frac, int prev) {
    return twell_dispatch_decide_ratio(m, twell_dispatch_predict(m, mean_nnz, ovf_frac), prev);
}

// The tile model from twell_ffn_calibrate's measurements on one call of real data (ms, medians): t[0] dense FFN,
// t[1] gate, t[2] up/down, t[3] up/down on an empty TwELL, t[4] the whole sparse call; sparse_nnz = active units per
// token in the rows the up/down computed, ovf_frac = overflow rows / M. s0 = (gate + updown_empty) / dense and
// s1 = (updown - updown_empty) / (sparse_nnz * dense) (at least 1e-6), then the model is anchored on the whole call's
// ratio R = t[4] / t[0]: with overflow rows (ovf_frac > 0.01) fovf = max(0, R - s0 - s1 sparse_nnz) / ovf_frac, else
// s0 moves by that rest, so that the prediction at the measured point is R. With no active unit outside the overflow
// rows there is nothing to fit: s0 = R, s1 = fovf = 0. Sets m->s0, s1, fovf, calibrated (1: fitted, 2: the measured
// ratio alone) and returns that kind; returns 0 with *m unchanged when a time is not positive.
static inline int twell_dispatch_fit(TwellDispatchModel *m, const float t[5], double sparse_nnz, double ovf_frac) {
    if (!(t[0] > 0) || !(t[4] > 0)) return 0;
    const double R = (double)t[4] / t[0];
    double s0 = R, s1 = 0.0, fovf = 0.0;
    int kind = 2;
    if (sparse_nnz > 0) {
        s0 = ((double)t[1] + t[3]) / t[0];
        s1 = ((double)t[2] - t[3]) / (sparse_nnz * t[0]);
        if (s1 < 1e-6) s1 = 1e-6;
        const double rest = R - s0 - s1 * sparse_nnz;
        if (ovf_frac > 0.01) fovf = rest > 0 ? rest / ovf_frac : 0.0;
        else s0 += rest;
        kind = 1;
    }
    m->s0 = s0;
    m->s1 = s1;
    m->fovf = fovf;
    m->calibrated = kind;
    return kind;
}

#endif  // SLLM_TWELL_DISPATCH_H
