// core/step_profiler.cuh: per-phase GPU time of a training step, from CUDA events (for --bench).
//
// The model marks the START of each phase on its stream (prof_mark(p, PHASE, stream)); the time from one mark
// to the next is charged to the earlier mark's phase, so a phase that runs once per layer (or per classifier
// chunk) accumulates over all of its occurrences. prof_end_step (after the step's single host sync) reads the
// events and adds them into per-phase totals; prof_print prints ms per step and a share of the GPU span, plus
// the host overhead = wall time of the step - GPU span (time the GPU sat idle before the first mark and after
// the last one: host-side batch preparation, the launch of the first kernels, the final sync).
// GEMM phases also print their achieved TFLOP/s (FLOPs passed by the caller; 0 = not a GEMM phase).
// Events are recorded only while a profiler is attached (Model.prof != NULL): the normal training loop pays
// nothing. Event records cost ~1-2 us of host time each (hidden: the host runs ahead of the GPU).
#ifndef SLLM_STEP_PROFILER_CUH
#define SLLM_STEP_PROFILER_CUH

#include <stdio.h>

#include "cuda_common.cuh"

typedef enum {
    PH_ZERO = 0,      // start of step: zero the step's accumulators, token upload
    PH_EMBED,         // embedding lookup
    PH_ATT_QKV,       // per layer: (norm recompute), q/k/v GEMM(s) + RoPE
    PH_ATT_CORE,      // per layer: attention forward kernel
    PH_ATT_OUT,       // per layer: Wo GEMM + residual add + FFN norm
    PH_FFN_GU,        // per layer: gate/up GEMM
    PH_FFN_ACT,       // per layer: relu(g)*u + sparsity statistics
    PH_FFN_DOWN,      // per layer: Wd GEMM + residual add + next norm
    PH_LM_FWD,        // per chunk: logits GEMM
    PH_LM_CE,         // per chunk: fused softmax / CE / dlogits
    PH_LM_BWD,        // per chunk: dlnf and dE GEMMs
    PH_LOSS_SUM,      // CE sum
    PH_B_FINAL_NORM,  // final norm backward
    PH_B_FFN_DOWN,    // per layer: (h recompute) dWd + dh GEMMs
    PH_B_FFN_ACT,     // per layer: FFN elementwise backward (+ L1)
    PH_B_FFN_GU,      // per layer: dWg/dWu + dln2 GEMMs
    PH_B_FFN_NORM,    // per layer: FFN norm backward (+ residual)
    PH_B_ATT_OUT,     // per layer: dWo + datt GEMMs
    PH_B_ATT_CORE,    // per layer: attention backward kernel(s)
    PH_B_ATT_QKV,     // per layer: RoPE backward, dWq/dWk/dWv + dln1 GEMMs
    PH_B_ATT_NORM,    // per layer: attention norm backward (+ residual)
    PH_B_EMBED,       // embedding backward
    PH_GRAD_NORM,     // global gradient norm
    PH_ADAMW,         // AdamW (+ clip)
    PH_END,           // end marker (no time charged)
    PH_COUNT
} ProfPhase;

static const char *const PROF_PHASE_NAMES[PH_COUNT] = {
    "step start (zero, upload)", "embedding fwd", "attn fwd: qkv GEMM + rope", "attn fwd: attention kernel",
    "attn fwd: Wo GEMM + res+norm", "ffn fwd: gate/up GEMM", "ffn fwd: relu*up + stats", "ffn fwd: down GEMM + res+norm",
    "lm head fwd: logits GEMM", "lm head: softmax/CE/dlogits", "lm head bwd: dlnf + dE GEMMs", "loss sum",
    "final norm bwd", "ffn bwd: dWd + dh GEMMs", "ffn bwd: elementwise (+L1)", "ffn bwd: dWgu + dln2 GEMMs",
    "ffn bwd: norm (+res)", "attn bwd: dWo + datt GEMMs", "attn bwd: attention kernel", "attn bwd: rope + qkv GEMMs",
    "attn bwd: norm (+res)", "embedding bwd", "grad norm", "adamw", "end"};

typedef struct {
    cudaEvent_t *ev;
    int *phase;
    int n, cap;
    double ms[PH_COUNT];     // accumulated GPU ms per phase
    double flops[PH_COUNT];  // FLOPs per step per phase (set by the caller; 0: not reported)
    double span_ms, wall_ms;
    int steps;
} StepProfiler;

static inline void prof_init(StepProfiler *p) { memset(p, 0, sizeof *p); }

static inline void prof_free(StepProfiler *p) {
    for (int i = 0; i < p->cap; i++) cudaCheck(cudaEventDestroy(p->ev[i]));
    free(p->ev);
    free(p->phase);
    memset(p, 0, sizeof *p);
}

// Mark the start of `phase` on `stream` (grows the event pool as needed).
static inline void prof_mark(StepProfiler *p, int phase, cudaStream_t stream) {
    if (p->n == p->cap) {
        int cap = p->cap ? 2 * p->cap : 256;
        p->ev = (cudaEvent_t *)realloc(p->ev, cap * sizeof(cudaEvent_t));
        p->phase = (int *)realloc(p->phase, cap * sizeof(int));
        if (!p->ev || !p->phase) SLLM_FATAL("prof_mark: out of host memory (%d events)", cap);
        for (int i = p->cap; i < cap; i++) cudaCheck(cudaEventCreate(&p->ev[i]));
        p->cap = cap;
    }
    cudaCheck(cudaEventRecord(p->ev[p->n], stream));
    p->phase[p->n++] = phase;
}

// After the step's work (the last mark must be PH_END) and a sync: charge the intervals. count: add this step
// to the totals (0 for warm-up steps: the events are dropped).
static inline void prof_end_step(StepProfiler *p, double wall_ms, int count) {
    if (count && p->n >= 2) {
        cudaCheck(cudaEventSynchronize(p->ev[p->n - 1]));
        for (int i = 0; i + 1 < p->n; i++) {
            float t;
            cudaCheck(cudaEventElapsedTime(&t, p->ev[i], p->ev[i + 1]));
            p->ms[p->phase[i]] += t;
        }
        float span;
        cudaCheck(cudaEventElapsedTime(&span, p->ev[0], p->ev[p->n - 1]));
        p->span_ms += span;
        p->wall_ms += wall_ms;
        p->steps++;
    }
    p->n = 0;
}

// Table of ms per step by phase (averaged over the counted steps).
static inline void prof_print(const StepProfiler *p, FILE *f) {
    if (!p->steps) return;
    const double s = p->steps, span = p->span_ms / s, wall = p->wall_ms / s;
    fprintf(f, "profile: mean over %d steps (CUDA events; per-layer phases summed over layers)\n", p->steps);
    fprintf(f, "  %-32s %9s %7s %9s\n", "phase", "ms/step", "% GPU", "TFLOP/s");
    double fwd = 0, bwd = 0, opt = 0;
    for (int i = 0; i < PH_END; i++) {
        double ms = p->ms[i] / s;
        if (i >= PH_ZERO && i <= PH_LOSS_SUM) fwd += ms;
        else if (i >= PH_B_FINAL_NORM && i <= PH_B_EMBED) bwd += ms;
        else opt += ms;
        char tf[16] = "";
        if (p->flops[i] > 0 && ms > 0) snprintf(tf, sizeof tf, "%9.0f", p->flops[i] / (ms * 1e-3) / 1e12);
        fprintf(f, "  %-32s %9.3f %6.1f%% %9s\n", PROF_PHASE_NAMES[i], ms, span > 0 ? 100.0 * ms / span : 0.0, tf);
    }
    fprintf(f, "  %-32s %9.3f\n", "= forward (incl. lm head bwd)", fwd);
    fprintf(f, "  %-32s %9.3f\n", "= backward", bwd);
    fprintf(f, "  %-32s %9.3f\n", "= grad norm + adamw", opt);
    fprintf(f, "  %-32s %9.3f\n", "= GPU span (first to last mark)", span);
    fprintf(f, "  %-32s %9.3f   (wall %.3f ms - GPU span)\n", "host overhead", wall - span, wall);
}

#endif  // SLLM_STEP_PROFILER_CUH
