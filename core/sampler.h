// core/sampler.h: next-token sampling on the host from one row of logits (used by infer.cu and the trainer's
// samples).
//
//   logits [V] fp32 (unnormalised). temperature <= 0: greedy, the FIRST index of the maximum (deterministic).
//   Otherwise p_i = softmax(logits / temperature) restricted to
//     - the top_k largest logits (top_k <= 0 or >= V: all of them; ties at the k-th value broken by index), then
//     - the smallest set of the largest remaining p_i whose mass reaches top_p (top_p >= 1: all of them),
//   renormalised, and one index is drawn with the caller's Rng (53-bit uniform). The same seed and logits give the
//   same token on every machine.
// Cost: expected O(V) per call, no sort: top-k is a quickselect, top-p a quickselect on probability mass.
// Work space: SamplerWork (sampler_work_alloc), O(V).
#ifndef SLLM_SAMPLER_H
#define SLLM_SAMPLER_H

#include <math.h>
#include <stdlib.h>

#include "rng.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    float temperature;  // <= 0: greedy
    int top_k;          // <= 0: off
    float top_p;        // >= 1: off; must be > 0
} SamplerParams;

typedef struct {
    int V;
    float *val;  // [V] candidate scores
    int *idx;    // [V] candidate indices
} SamplerWork;

static inline int sampler_work_alloc(SamplerWork *w, int V) {
    w->V = V;
    w->val = (float *)malloc(sizeof(float) * (size_t)(V > 0 ? V : 1));
    w->idx = (int *)malloc(sizeof(int) * (size_t)(V > 0 ? V : 1));
    return w->val && w->idx ? 0 : -1;
}
static inline void sampler_work_free(SamplerWork *w) {
    free(w->val);
    free(w->idx);
    w->val = NULL;
    w->idx = NULL;
}

// Candidate a ranks before b: larger score first, then the smaller index (a strict total order).
static inline int sampler_before(float va, int ia, float vb, int ib) { return va > vb || (va == vb && ia < ib); }
static inline void sampler_swap(float *v, int *ix, int a, int b) {
    float t = v[a]; v[a] = v[b]; v[b] = t;
    int u = ix[a]; ix[a] = ix[b]; ix[b] = u;
}
// Reorders v/ix[0, n) so that its k first entries are the k best in the order above (in no particular order).
// Quickselect with a median-of-three pivot; deterministic.
static inline void sampler_select(float *v, int *ix, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi && k > lo && k <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (sampler_before(v[mid], ix[mid], v[lo], ix[lo])) sampler_swap(v, ix, mid, lo);
        if (sampler_before(v[hi], ix[hi], v[lo], ix[lo])) sampler_swap(v, ix, hi, lo);
        if (sampler_before(v[hi], ix[hi], v[mid], ix[mid])) sampler_swap(v, ix, hi, mid);
        float pv = v[mid];
        int pi = ix[mid];
        int i = lo, j = hi;
        while (i <= j) {
            while (sampler_before(v[i], ix[i], pv, pi)) i++;
            while (sampler_before(pv, pi, v[j], ix[j])) j--;
            if (i <= j) { sampler_swap(v, ix, i, j); i++; j--; }
        }
        // [lo, j] before the pivot, (j, i) equal to it, [i, hi] after
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return;
    }
}
// The nucleus: reorders the (probability, index) pairs v/ix[0, n) so that their first k are the k best in the order
// above, where k is the smallest count whose mass reaches `target`; returns k (n if rounding leaves target unreached).
// A quickselect on mass (Lomuto partitions around a median-of-three pivot; the order is total, so the pivot's place is
// exact): expected O(n), no sort.
static inline int sampler_nucleus(float *v, int *ix, int n, double target) {
    int lo = 0, hi = n - 1;
    double need = target;
    while (lo <= hi) {
        int mid = lo + (hi - lo) / 2;
        if (sampler_before(v[mid], ix[mid], v[lo], ix[lo])) sampler_swap(v, ix, mid, lo);
        if (sampler_before(v[hi], ix[hi], v[lo], ix[lo])) sampler_swap(v, ix, hi, lo);
        if (sampler_before(v[mid], ix[mid], v[hi], ix[hi])) sampler_swap(v, ix, hi, mid);  // median now at hi
        const float pv = v[hi];
        const int pi = ix[hi];
        int store = lo;
        double mass = 0.0;  // of the elements before the pivot in [lo, hi)
        for (int i = lo; i < hi; i++)
            if (sampler_before(v[i], ix[i], pv, pi)) {
                mass += v[i];
                sampler_swap(v, ix, i, store++);
            }
        sampler_swap(v, ix, hi, store);  // the pivot at `store`: [lo, store) before it, (store, hi] after
        if (mass >= need) hi = store - 1;            // the cut is among the ones before the pivot
        else if (mass + pv >= need) return store + 1;  // the pivot completes the mass
        else { need -= mass + pv; lo = store + 1; }  // all of [lo, store] in; go on after it
    }
    return n;
}

// Greedy: the first index of the maximum. NaN logits never win (a row of NaNs gives 0).
static inline int sampler_argmax(const float *logits, int V) {
    int best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best] || (logits[best] != logits[best] && logits[i] == logits[i])) best = i;
    return best;
}

// One token from logits [V]. Returns -1 on bad arguments (V <= 0, top_p <= 0, work too small).
static inline int sampler_sample(const float *logits, int V, const SamplerParams *p, Rng *rng, SamplerWork *w) {
    if (V <= 0 || !p || !(p->top_p > 0.0f) || !w || w->V < V) return -1;
    if (p->temperature <= 0.0f) return sampler_argmax(logits, V);
    float *v = w->val;
    int *ix = w->idx;
    int n = V;
    for (int i = 0; i < V; i++) { v[i] = logits[i] == logits[i] ? logits[i] : -INFINITY; ix[i] = i; }
    if (p->top_k > 0 && p->top_k < V) {
        sampler_select(v, ix, V, p->top_k);
        n = p->top_k;
    }
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = v[i] > mx ? v[i] : mx;
    if (mx == -INFINITY) return sampler_argmax(logits, V);  // every logit -inf or NaN
    // probabilities (unnormalised) in place of the scores; the order of v is unchanged by exp
    double total = 0.0;
    const float inv_t = 1.0f / p->temperature;
    for (int i = 0; i < n; i++) { v[i] = expf((v[i] - mx) * inv_t); total += v[i]; }
    if (p->top_p < 1.0f) {
        n = sampler_nucleus(v, ix, n, (double)p->top_p * total);
        total = 0.0;
        for (int i = 0; i < n; i++) total += v[i];
    }
    double r = rng_uniform(rng) * total, acc = 0.0;
    for (int i = 0; i < n; i++) {
        acc += v[i];
        if (acc > r) return ix[i];
    }
    return ix[n - 1];
}

#ifdef __cplusplus
}
#endif
#endif  // SLLM_SAMPLER_H
