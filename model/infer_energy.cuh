// model/infer_energy.cuh: energy per token of the inference engine's prefill and decoding (infer --bench), with the
// meter of core/energy.h. Separate from the timing rounds (which interleave the FFN modes) so that each mode's energy
// covers a long stretch of its own work only:
//   prefill: the B x P prompt prefilled back to back (cache reset each time) until min_s seconds have passed, at least
//            2 runs; energy / (runs * B * P) tokens;
//   decode:  a prefill (not counted), then n_decode steps (fixed token ids: the energy does not depend on
//            them) counted, repeated until min_s seconds of decoding; energy / (steps * B) tokens. Skipped when
//            n_decode < 8 (a step or two per prefill would be measured mostly at the boundaries).
// Every region starts and ends synchronised. The counter's update period is the driver's; a region of >= 1 s makes
// its rounding small (the power sampler interpolates between its samples).
#ifndef SLLM_MODEL_INFER_ENERGY_CUH
#define SLLM_MODEL_INFER_ENERGY_CUH

#include <math.h>

#include <algorithm>
#include <vector>

#include "energy.h"
#include "model/infer_engine.cuh"

typedef struct {
    double prefill_j, prefill_s;
    long long prefill_tokens;
    int prefill_runs;
    double decode_j, decode_s;
    long long decode_tokens;
    int decode_steps;  // 0: decoding not measured
    int ok;            // 0: a meter read failed (err)
    char err[256];
} InferEnergy;

static inline int infer_energy_read(EnergyMeter *em, double *j, InferEnergy *out) {
    if (energy_read(em, j) == 0) return 0;
    snprintf(out->err, sizeof out->err, "%s", energy_last_error(em));
    out->ok = 0;
    return -1;
}

static inline void infer_measure_energy(Infer *m, EnergyMeter *em, const int *prompts, int P, int n_decode, double min_s,
                                        InferEnergy *out) {
    memset(out, 0, sizeof *out);
    out->ok = 1;
    const int B = m->B;
    double j0, j1;
    cudaCheck(cudaStreamSynchronize(m->stream));
    if (infer_energy_read(em, &j0, out)) return;
    const double t0 = sllm_time_s();
    do {
        infer_reset(m);
        infer_prefill(m, prompts, P);
        cudaCheck(cudaStreamSynchronize(m->stream));
        out->prefill_runs++;
    } while (out->prefill_runs < 2 || sllm_time_s() - t0 < min_s);
    out->prefill_s = sllm_time_s() - t0;
    if (infer_energy_read(em, &j1, out)) return;
    out->prefill_j = j1 - j0;
    out->prefill_tokens = (long long)out->prefill_runs * B * P;

    if (n_decode > m->S - P) n_decode = m->S - P;
    if (n_decode < 8) return;
    std::vector<int> next(B);
    for (int b = 0; b < B; b++) next[b] = prompts[(size_t)b * P];
    do {
        infer_reset(m);
        infer_prefill(m, prompts, P);
        cudaCheck(cudaStreamSynchronize(m->stream));
        if (infer_energy_read(em, &j0, out)) return;
        const double ts = sllm_time_s();
        for (int i = 0; i < n_decode; i++) infer_decode(m, next.data());
        cudaCheck(cudaStreamSynchronize(m->stream));
        out->decode_s += sllm_time_s() - ts;
        if (infer_energy_read(em, &j1, out)) return;
        out->decode_j += j1 - j0;
        out->decode_steps += n_decode;
    } while (out->decode_s < min_s);
    out->decode_tokens = (long long)out->decode_steps * B;
}

static inline double infer_engine_bytes(const Infer *m) {
    return (double)(m->param_bytes + m->wdT_bytes + m->kv_bytes + m->act_bytes + m->twell_bytes);
}

// infer --bench, after its timing rounds: each engine's prefill and decoding energy per token (energy_s > 0 and an NVML
// meter; otherwise says why not), then one machine-readable line per engine, "bench-result key=value ..." (the keys of
// scripts/paper_tables.py; nan where not measured). prompt: one sequence's tokens (every sample gets it, as in the
// timing rounds); pre_ms / dec_ms [n]: the median prefill ms and decoding ms per step of each engine.
static inline void infer_bench_energy_report(Infer *ms, int n, const std::vector<int> &prompt, int n_new, double energy_s,
                                             const double *pre_ms, const double *dec_ms) {
    const int B = ms[0].B, P = (int)prompt.size();
    std::vector<int> prompts((size_t)B * P);
    for (int b = 0; b < B; b++) std::copy(prompt.begin(), prompt.end(), prompts.begin() + (size_t)b * P);
    std::vector<InferEnergy> en(n);
    for (int k = 0; k < n; k++) memset(&en[k], 0, sizeof en[k]);
    EnergyMeter *em = NULL;
    char why[256] = "--energy-ms 0";
    if (energy_s > 0) {
        int dev = 0;
        char bus[64];
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetPCIBusId(bus, sizeof bus, dev));
        em = energy_open(bus, 20, why, sizeof why);
    }
    if (em) {
        printf("energy: %s; >= %.1f s of each FFN mode's prefill, then of its decoding (%d steps per prefill)\n",
               energy_describe(em), energy_s, n_new - 1);
        fflush(stdout);
        for (int k = 0; k < n; k++) {
            infer_measure_energy(&ms[k], em, prompts.data(), P, n_new - 1, energy_s, &en[k]);
            if (!en[k].ok) printf("warning: energy of FFN %s not measured: %s\n", infer_ffn_name(ms[k].ffn), en[k].err);
        }
        long smp, bad;
        energy_sample_counts(em, &smp, &bad);
        if (bad) printf("warning: %ld of %ld power readings failed (skipped; the integral bridges them)\n", bad, smp + bad);
        printf("%-8s %16s %10s %16s %10s\n", "FFN", "prefill mJ/tok", "prefill W", "decode mJ/tok", "decode W");
        for (int k = 0; k < n; k++) {
            const InferEnergy *e = &en[k];
            char dj[32] = "-", dw[32] = "-";
            if (e->decode_tokens) {
                snprintf(dj, sizeof dj, "%.3f", 1e3 * e->decode_j / e->decode_tokens);
                snprintf(dw, sizeof dw, "%.0f", e->decode_j / e->decode_s);
            }
            printf("%-8s %16.4f %10.0f %16s %10s\n", infer_ffn_name(ms[k].ffn),
                   e->prefill_tokens ? 1e3 * e->prefill_j / e->prefill_tokens : NAN,
                   e->prefill_s > 0 ? e->prefill_j / e->prefill_s : NAN, dj, dw);
        }
        if (n >= 2 && en[0].prefill_tokens && en[1].prefill_tokens) {
            const double a = en[0].prefill_j / en[0].prefill_tokens, b = en[1].prefill_j / en[1].prefill_tokens;
            printf("sparse vs dense energy per token: prefill %+.1f%%", 100 * (b / a - 1));
            if (en[0].decode_tokens && en[1].decode_tokens)
                printf(", decode %+.1f%%", 100 * ((en[1].decode_j / en[1].decode_tokens) /
                                                  (en[0].decode_j / en[0].decode_tokens) - 1));
            printf("\n");
        }
    } else {
        printf("energy: not measured (%s)\n", why);
    }
    size_t fr = 0, tot = 0;
    cudaCheck(cudaMemGetInfo(&fr, &tot));
    for (int k = 0; k < n; k++) {
        const InferEnergy *e = &en[k];
        const double nan = NAN;
        printf("bench-result ffn=%s samples=%d prompt=%d prefill_ms=%.4f prefill_tok_per_ms=%.3f decode_ms_per_step=%.4f "
               "decode_tok_per_ms=%.4f prefill_mJ_per_tok=%.5f decode_mJ_per_tok=%.5f prefill_W=%.1f engine_GiB=%.3f "
               "device_used_GiB=%.3f energy_source=%s\n",
               infer_ffn_name(ms[k].ffn), B, P, pre_ms[k], B * P / pre_ms[k], dec_ms[k], B / dec_ms[k],
               e->prefill_tokens ? 1e3 * e->prefill_j / e->prefill_tokens : nan,
               e->decode_tokens ? 1e3 * e->decode_j / e->decode_tokens : nan,
               e->prefill_s > 0 ? e->prefill_j / e->prefill_s : nan, infer_engine_bytes(&ms[k]) / 1073741824.0,
               (tot - fr) / 1073741824.0,
               !em ? "none" : energy_source(em) == ENERGY_COUNTER ? "counter" : "power_samples");
    }
    fflush(stdout);
    energy_close(em);
}

#endif  // SLLM_MODEL_INFER_ENERGY_CUH
