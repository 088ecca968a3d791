// train_gpt_relu.cu: the GPU trainer for Llama-style models with a ReLU-gated FFN and an L1 activation
// penalty, the FFN dense or sparse (TwELL) per layer, on one GPU or data parallel over several (NCCL, ZeRO-1).
// Model code lives in model/train_model.cuh (shared with the tests); this file holds the command line,
// checkpoints and resume, evaluation, sampling and the training loop.
//
//   build/train_gpt_relu --train 'data/x_train_*.bin' --val 'data/x_val_*.bin' --preset small --out run1
//   build/train_gpt_relu -h          (every option, generated from the option table)
//
// Checkpoints: <out>/ckpt_<step 8 digits>/ = model.safetensors (fp32: the master weights, or with --master none the
// bf16 weights widened; HF Llama names) +
// config.json + opt_rank<r>.bin per rank (the ZeRO-1 shard: master, AdamW m, v) + train_state.bin (step,
// loader position, RNG, run shape), written atomically as a whole (core/checkpoint.h, core/zero1.cuh).
// --resume continues from the newest complete one, bit-exactly on the same GPU count; on another count the
// optimizer shards are re-cut. The single-file optimizer.bin (m, v of every parameter) of older checkpoints
// still loads, on any GPU count.
//
// Multi-GPU (core/dist.cuh): one process per GPU, data parallel, ZeRO-1. Launch with mpirun -np N, or
// scripts/run_dist.sh N (file rendezvous), or per process with RANK/WORLD_SIZE/LOCAL_RANK and --dist-init
// tcp://host:port (or MASTER_ADDR/MASTER_PORT). Each rank reads its stripe of every global batch
// (dataloader/loader.h); the gradients are summed bucket by bucket while the backward runs (ModelDist hooks,
// last micro-step only); each rank updates its shard of the fp32 master weights (with --master none, of the bf16
// weights in place) and AdamW moments, and the bf16 weights are all-gathered. --total-batch stays the global batch:
// accum = total / (B*T*world). Rank 0 logs and writes the shared files; every rank reports its own errors
// ("error: rank r of W: ..."). --out must be on a file system that every rank sees.
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "checkpoint.h"
#include "train_config.h"
#include "cli.h"
#include "common.h"
#include "config.h"
#include "dataloader/loader.h"
#include "dataloader/tokenizer.h"
#include "energy.h"
#include "logger.h"
#include "lr_schedule.h"
#include "model/mc_eval.h"
#include "model/mc_eval_gpu.cuh"
#include "model/train_model.cuh"
#include "model/sparsity_profile.h"
#include "model/synthetic_sparsity.cuh"
#include "rng.h"
#include "sampler.h"
#include "zero1.cuh"

// ---------------------------------------------------------------------------------------------------
// Options
typedef struct {
    const char *train, *val, *preset, *init_from, *out, *tokenizer, *schedule;
    int batch, seq, total_batch, steps, warmup, eval_every, eval_batches, sample_every, sample_tokens, ckpt_every,
        resume, recompute, vocab, log_stats_every, bench, stop_at, d_model, n_layer, n_head, n_kv_head, head_dim,
        d_ff, nongated, max_seq, time_limit, deterministic, profile, no_reduce, keep_last, allow_config_change,
        dist_max_ctas;
    float lr, final_lr_frac, wd, grad_clip, l1, beta1, beta2, eps, temperature, rope_theta, dist_timeout;
    const char *dist_init, *grad_reduce, *moments, *master;
    unsigned long long seed;
    // FFN path (model/sparse_ffn.cuh)
    const char *ffn_path;
    int ffn_lean, reinit_dead, l1_warmup, bench_compare;
    float sparse_on, sparse_off, sparse_max_dense, synthetic_nnz;
    const char *synthetic_profile;  // --synthetic-nnz per layer (model/sparsity_profile.h)
    // multiple-choice evaluation (model/mc_eval.h)
    const char *mc_eval;
    int mc_eval_every;
} Options;

// --bench-compare: main runs the benchmark twice in this process (dense, then sparse FFN); each run leaves its result.
typedef struct {
    int done;
    double med_ms, tok_per_ms, mem_used_gib, alloc_gib, nnz_mean, synthetic_nnz;
    double mj_per_token;  // NVML energy over the timed steps (NAN: not measured)
    char energy_src[16];
} BenchResult;
static int g_force_path = -1;  // >= 0: the FFN path of this benchmark phase
static BenchResult g_bench_res;

static void options_defaults(Options *o) {
    memset(o, 0, sizeof *o);
    o->preset = "tiny";
    o->schedule = "cosine";
    o->moments = "fp32";
    o->master = "fp32";
    o->batch = 4; o->seq = 0; o->total_batch = 0; o->steps = 1000; o->warmup = 100;
    o->eval_every = 100; o->eval_batches = 20; o->sample_every = 200; o->sample_tokens = 64; o->ckpt_every = 0;
    o->recompute = 0; o->vocab = 0; o->log_stats_every = 10; o->bench = 0; o->stop_at = -1;
    o->lr = 1e-3f; o->final_lr_frac = 0.1f; o->wd = 0.1f; o->grad_clip = 1.0f; o->l1 = -1.0f;
    o->beta1 = 0.9f; o->beta2 = 0.95f; o->eps = 1e-8f; o->temperature = 1.0f; o->seed = 1337;
    o->grad_reduce = "owner";
    o->ffn_path = "auto"; o->sparse_on = -1; o->sparse_off = -1; o->sparse_max_dense = -1;
    o->synthetic_profile = "uniform";
}

// ---------------------------------------------------------------------------------------------------
// Device peak (dense bf16 tensor-core FLOP/s) by device name; 0 when unknown (MFU printed as n/a).
static double device_peak_bf16(const char *name) {
    if (strstr(name, "H200") || strstr(name, "GH200")) return 989e12;
    if (strstr(name, "H100")) {
        if (strstr(name, "PCIe")) return 756e12;
        if (strstr(name, "NVL")) return 0;  // not in our table
        return 989e12;                      // SXM ("H100 80GB HBM3")
    }
    return 0;
}

// Median of n values (sorted in place); 0 if n == 0.
static double median_ms(double *v, int n) {
    if (n <= 0) return 0.0;
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && v[j - 1] > v[j]; j--) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
    return v[n / 2];
}

// ---------------------------------------------------------------------------------------------------
// Training state file (plain binary, versioned).
#define TRAIN_STATE_MAGIC 0x53544c53u  // "SLTS"
#define OPT_STATE_MAGIC 0x504f4c53u    // "SLOP"
typedef struct {
    uint32_t magic, version;
    int64_t step;             // optimizer steps completed
    uint64_t total_params;
    int32_t B, T, grad_accum, has_loader;
    LoaderState loader;
    Rng rng;
    uint64_t seed;
} TrainState;

// Deadline of the checkpoint's collectives: rank 0 may write gigabytes while the others wait.
#define CKPT_COLLECTIVE_TIMEOUT_S 3600.0

// Writes <out>/ckpt_<step>. A collective: every rank calls it at the same step. Rank 0 creates the temp dir and
// sends its path to the others; the fp32 weights (zero1_gather_master) go into the gradient buffer (free between
// steps); rank 0 writes model.safetensors, config.json and train_state.bin, every rank its optimizer shard. Only
// when every rank succeeded does rank 0 rename the temp dir into place (ckpt_commit); otherwise it removes it and
// every rank stops with an error: a checkpoint is complete or absent, and older ones are untouched.
static void save_checkpoint(Model *m, Zero1 *z, Dist *d, const char *out, int step, const TrainState *ts,
                            const TrainConfig *tc, int keep_last, Logger *lg) {
    char dir[CKPT_PATH_MAX], err[8704] = "", path[CKPT_PATH_MAX];
    snprintf(dir, sizeof dir, "%s/ckpt_%08d", out, step);
    double t0 = sllm_time_s();
    const size_t n = m->lay.total;
    CkptWriter w;
    memset(&w, 0, sizeof w);
    char tmp[CKPT_PATH_MAX + 32] = "";
    if (d->rank == 0) {
        if (ckpt_begin(&w, dir, err, sizeof err) == 0) snprintf(tmp, sizeof tmp, "%s", w.tmp);
        else fprintf(stderr, "error: checkpoint %s: %s\n", dir, err);
    }
    dist_broadcast_bytes(d, tmp, sizeof tmp, 0, CKPT_COLLECTIVE_TIMEOUT_S);
    if (!tmp[0]) SLLM_FATAL("checkpoint %s: rank 0 could not create its temp directory", dir);
    zero1_gather_master(z, m->grads, m->stream);  // every rank takes part; rank 0 writes them
    int ok = 1;
    if (d->rank == 0) {
        float *buf = (float *)sllm_malloc(n * sizeof(float));
        cudaCheck(cudaStreamSynchronize(m->stream));
        cudaCheck(cudaMemcpy(buf, m->grads, n * sizeof(float), cudaMemcpyDeviceToHost));
        if (ckpt_write_model(&w, &m->cfg, buf, ST_F32, err, sizeof err) != 0) ok = 0;
        free(buf);
        FILE *f = NULL;
        if (ok && (ckpt_path(&w, "train_state.bin", path, sizeof path) != 0 || !(f = fopen(path, "wb")))) {
            snprintf(err, sizeof err, "cannot create train_state.bin in %s", w.tmp);
            ok = 0;
        }
        if (ok) {
            ok = fwrite(ts, sizeof *ts, 1, f) == 1;
            ok = (fclose(f) == 0) && ok;
            if (!ok) snprintf(err, sizeof err, "cannot write %s", path);
        }
        if (ok) {  // the whole training configuration, compared on resume (core/train_config.h)
            char *tcj = train_config_json(tc);
            const void *cb[1] = {tcj};
            const size_t cs[1] = {tcj ? strlen(tcj) : 0};
            if (!tcj || ckpt_write_file(&w, TRAIN_CONFIG_FILE, cb, cs, 1, err, sizeof err) != 0) ok = 0;
            free(tcj);
        }
    }
    if (ok && zero1_write_shard(z, tmp, err, sizeof err) != 0) ok = 0;
    if (!ok) fprintf(stderr, "error: rank %d of %d: checkpoint %s: %s\n", d->rank, d->world, dir, err);
    const int all_ok = dist_all_ok(d, ok, CKPT_COLLECTIVE_TIMEOUT_S);
    int committed = 1;
    if (d->rank == 0) {
        if (all_ok) {
            if (ckpt_commit(&w, err, sizeof err) != 0) {
                fprintf(stderr, "error: checkpoint %s: %s\n", dir, err);
                committed = 0;
            }
        } else ckpt_abort(&w);
    }
    committed = dist_all_ok(d, committed, CKPT_COLLECTIVE_TIMEOUT_S);
    if (!all_ok || !committed)
        SLLM_FATAL("checkpoint %s was not written (see the error of the failing rank above; the temp dir was removed, "
                   "earlier checkpoints are intact)", dir);
    logger_printf(lg, "checkpoint: wrote %s (%d optimizer shard%s, %.1f s)\n", dir, d->world, d->world > 1 ? "s" : "",
                  sllm_time_s() - t0);
    if (d->rank == 0) {  // --keep-last: only after the new checkpoint is complete
        int del = ckpt_retain(out, keep_last, err, sizeof err);
        if (del < 0) SLLM_FATAL("%s", err);
        if (del > 0) logger_printf(lg, "checkpoint: deleted %d old checkpoint(s) (--keep-last %d)\n", del, keep_last);
    }
}

static void load_train_state(const char *dir, TrainState *ts, const Model *m) {
    char path[CKPT_PATH_MAX + 32];
    snprintf(path, sizeof path, "%s/train_state.bin", dir);
    FILE *f = sllm_fopen(path, "rb");
    sllm_fread(ts, sizeof *ts, 1, f, "training state");
    fclose(f);
    if (ts->magic != TRAIN_STATE_MAGIC || ts->version != 1)
        SLLM_FATAL("%s: not a training state file (magic %08x version %u, expected %08x version 1)", path, ts->magic,
                   ts->version, TRAIN_STATE_MAGIC);
    if (ts->total_params != m->lay.total)
        SLLM_FATAL("%s: saved for %llu parameters, the model has %zu", path, (unsigned long long)ts->total_params,
                   m->lay.total);
}

// This rank's ZeRO-1 shard (master, m, v) from a checkpoint: the per-rank shard files, re-cut when another number
// of ranks wrote them; or the single-file optimizer.bin (m, v of every parameter; the master weights are then
// those of model.safetensors, `master_full`).
static void load_optimizer(const char *dir, Zero1 *z, const float *master_full) {
    char path[CKPT_PATH_MAX + 32], err[8704];
    zero1_shard_path(path, sizeof path, dir, 0);
    if (access(path, F_OK) == 0) {
        if (zero1_read_shards(z, dir, err, sizeof err) != 0) SLLM_FATAL("resume from %s: %s", dir, err);
        return;
    }
    snprintf(path, sizeof path, "%s/optimizer.bin", dir);
    FILE *f = fopen(path, "rb");
    if (!f) SLLM_FATAL("resume from %s: no optimizer state (neither opt_rank00000.bin nor optimizer.bin)", dir);
    uint32_t hdr[4];
    sllm_fread(hdr, sizeof hdr, 1, f, "optimizer header");
    const size_t n = z->total, off = z->shard.offset, c = z->shard.count;
    if (hdr[0] != OPT_STATE_MAGIC || hdr[1] != 1 || (((size_t)hdr[3] << 32) | hdr[2]) != n)
        SLLM_FATAL("%s: bad optimizer state header (magic %08x version %u, %zu params; expected %zu)", path, hdr[0],
                   hdr[1], ((size_t)hdr[3] << 32) | hdr[2], n);
    float *mb = (float *)sllm_malloc(n * 4), *vb = (float *)sllm_malloc(n * 4);
    sllm_fread(mb, 4, n, f, "AdamW m");
    sllm_fread(vb, 4, n, f, "AdamW v");
    fclose(f);
    float *h = (float *)sllm_malloc(3 * c * 4 + 16);  // master | m | v of the own range (core/zero1.cuh)
    memcpy(h, master_full + off, c * 4);
    memcpy(h + c, mb + off, c * 4);
    memcpy(h + 2 * c, vb + off, c * 4);
    cudaCheck(zero1_state_from_host(z, h));
    free(h);
    free(mb);
    free(vb);
}

// ---- data-parallel hooks of the model (ModelDist) --------------------------------------------------
typedef struct {
    Dist *d;
    GradReducer *red;
} DistHooks;
static void hook_grad_ready(void *ctx, int b, cudaStream_t s) { grad_reducer_ready(((DistHooks *)ctx)->red, b, s); }
static int hook_embed_lookup(void *ctx, float *dE, const bf16 *dout, const int *table, int N, int D, cudaStream_t s) {
    return grad_reducer_embed_lookup(((DistHooks *)ctx)->red, dE, dout, table, N, D, s);
}
static void hook_sum_f32(void *ctx, float *p, size_t n, cudaStream_t s) { dist_allreduce_sum_f32(((DistHooks *)ctx)->d, p, n, s); }
static void hook_sum_u64(void *ctx, unsigned long long *p, size_t n, cudaStream_t s) {
    dist_allreduce_sum_u64(((DistHooks *)ctx)->d, p, n, s);
}
static void hook_max_u8(void *ctx, uint8_t *p, size_t n, cudaStream_t s) { dist_allreduce_max_u8(((DistHooks *)ctx)->d, p, n, s); }

// ---------------------------------------------------------------------------------------------------
// Evaluation and sampling
// Mean validation CE over `batches` micro-batches of every rank (each rank reads its stripe).
static float evaluate(Model *m, Dist *d, DataLoader *val, int batches, int32_t *in, int32_t *tg) {
    loader_reset(val);
    cudaCheck(cudaMemsetAsync(m->scalars + SC_CE, 0, sizeof(float), m->stream));
    for (int i = 0; i < batches; i++) {
        loader_next(val, in, tg);
        model_forward(m, in, tg, m->B, m->T, MODEL_EVAL, 0.0f);
    }
    dist_allreduce_sum_f32(d, m->scalars + SC_CE, 1, m->stream);
    float ce;
    cudaCheck(cudaStreamSynchronize(m->stream));
    cudaCheck(cudaMemcpy(&ce, m->scalars + SC_CE, sizeof ce, cudaMemcpyDeviceToHost));
    return ce / ((float)batches * m->N * d->world);
}

// Multiple-choice evaluation (--mc-eval) with the training model's forward (bf16 logits): every rank scores its share
// of the items (item i on rank i % world, so no rank waits on another's work), the counts are summed over the ranks,
// rank 0 logs acc and acc_norm. dev3: 3 floats of device memory.
static void mc_eval_step(Model *m, Dist *d, McSet *set, McTrainCtx *mc, float *dev3, int step, Logger *lg) {
    char err[1024];
    McResult r;
    const McScoreOpts so = {1, d->rank, d->world, NULL};
    if (mc_score(set, mc_loglik_train, mc, &so, &r, err, sizeof err) != 0) SLLM_FATAL("--mc-eval: %s", err);
    float h[3] = {(float)r.correct, (float)r.correct_norm, (float)r.n_items};  // exact below 2^24 items
    cudaCheck(cudaMemcpyAsync(dev3, h, sizeof h, cudaMemcpyHostToDevice, m->stream));
    dist_allreduce_sum_f32(d, dev3, 3, m->stream);
    cudaCheck(cudaMemcpyAsync(h, dev3, sizeof h, cudaMemcpyDeviceToHost, m->stream));
    cudaCheck(cudaStreamSynchronize(m->stream));
    const double acc = h[2] > 0 ? h[0] / h[2] : 0, acc_norm = h[2] > 0 ? h[1] / h[2] : 0;
    logger_printf(lg, "step %d | mc-eval acc %.4f acc_norm %.4f (%.0f items of %s, %.1f s)\n", step, acc, acc_norm, h[2],
                  set->name, r.seconds);
    logger_metric(lg, "s:%d mc_acc:%.9g mc_acc_norm:%.9g\n", step, acc, acc_norm);
}

// Unconditional sample from the end-of-text token: full-recompute forward per token (simple, no KV cache).
static void generate_sample(Model *m, const Tokenizer *tok, int n_tokens, float temperature, uint64_t seed,
                            Logger *lg) {
    const int V = m->cfg.vocab_size, Tmax = m->T;
    int start = tok ? tokenizer_eot_id(tok) : 0;
    if (start < 0 || start >= V) start = 0;
    int *ids = (int *)sllm_calloc(Tmax, sizeof(int));
    float *logits = (float *)sllm_malloc(V * sizeof(float));
    SamplerWork sw;
    if (sampler_work_alloc(&sw, V)) SLLM_FATAL("out of host memory for the sampler (V=%d)", V);
    const SamplerParams sp = {temperature, 0, 1.0f};
    for (int i = 0; i < Tmax; i++) ids[i] = start;
    Rng rng;
    rng_seed(&rng, seed);
    int len = 1;
    while (len < Tmax && len <= n_tokens) {
        int Ts = ((len + 63) / 64) * 64;
        if (Ts > Tmax) Ts = Tmax;
        model_forward(m, ids, NULL, 1, Ts, MODEL_LOGITS, 0.0f);
        model_get_logits_row(m, len - 1, logits);
        ids[len++] = sampler_sample(logits, V, &sp, &rng, &sw);
    }
    logger_printf(lg, "---- sample (%d tokens, temperature %g) ----\n", len - 1, temperature);
    if (tok) {
        char *text = NULL;
        size_t tl = 0;
        if (tokenizer_decode(tok, ids + 1, len - 1, &text, &tl) == 0) {
            logger_printf(lg, "%s\n", text);
            free(text);
        } else logger_printf(lg, "(tokenizer could not decode the sample)\n");
    } else {
        for (int i = 1; i < len; i++) logger_printf(lg, "%d ", ids[i]);
        logger_printf(lg, "\n(pass --tokenizer to decode)\n");
    }
    logger_printf(lg, "----\n");
    free(ids); free(logits); sampler_work_free(&sw);
}

// ---------------------------------------------------------------------------------------------------
static int run_main(int argc, char **argv) {
    Options o;
    options_defaults(&o);
    CliOpt opts[] = {
        {"train", 'i', CLI_STRING, &o.train, "glob of training shards (.bin)", 0, 0, 0},
        {"val", 'j', CLI_STRING, &o.val, "glob of validation shards (.bin)", 0, 0, 0},
        {"preset", 'p', CLI_STRING, &o.preset, "model preset: test tiny small 0.5B 1B 1.5B 2B", 0, 0, 0},
        {"init-from", 'e', CLI_STRING, &o.init_from, "start from the weights of a checkpoint directory", 0, 0, 0},
        {"vocab", 0, CLI_INT, &o.vocab, "override the preset's vocab size (e.g. 50304 for GPT-2 tokens)", 1, 1 << 24, 0},
        {"d-model", 0, CLI_INT, &o.d_model, "override d_model", 8, 65536, 0},
        {"layers", 0, CLI_INT, &o.n_layer, "override the number of layers", 1, 1024, 0},
        {"heads", 0, CLI_INT, &o.n_head, "override the number of heads (head_dim = d_model/heads)", 1, 1024, 0},
        {"kv-heads", 0, CLI_INT, &o.n_kv_head, "override the number of KV heads (GQA)", 1, 1024, 0},
        {"head-dim", 0, CLI_INT, &o.head_dim, "override head_dim", 8, 1024, 0},
        {"d-ff", 0, CLI_INT, &o.d_ff, "override the FFN width", 8, 1 << 20, 0},
        {"max-seq", 0, CLI_INT, &o.max_seq, "override max_seq (RoPE table / context)", 1, 1 << 20, 0},
        {"rope-theta", 0, CLI_FLOAT, &o.rope_theta, "override rope_theta", 1, 1e12, 0},
        {"nongated", 0, CLI_FLAG, &o.nongated, "non-gated FFN: h = relu(x Wu^T)", 0, 0, 0},
        {"batch", 'b', CLI_INT, &o.batch, "micro-batch size B (sequences per GPU per micro-step)", 1, 1 << 20, 0},
        {"seq", 0, CLI_INT, &o.seq, "sequence length T (default: the model's max_seq)", 1, 1 << 20, 0},
        {"total-batch", 0, CLI_INT, &o.total_batch, "tokens per optimizer step (multiple of B*T*world; default B*T*world)", 1, 2e9, 0},
        {"steps", 'x', CLI_INT, &o.steps, "optimizer steps", 1, 2e9, 0},
        {"schedule", 'k', CLI_STRING, &o.schedule, "LR schedule: cosine, linear, constant", 0, 0, 0},
        {"lr", 'l', CLI_FLOAT, &o.lr, "peak learning rate", 0, 10, 0},
        {"warmup", 'u', CLI_INT, &o.warmup, "linear warm-up steps", 0, 2e9, 0},
        {"final-lr-frac", 0, CLI_FLOAT, &o.final_lr_frac, "final LR as a fraction of the peak", 0, 1, 0},
        {"wd", 'c', CLI_FLOAT, &o.wd, "AdamW weight decay (2-D weights only)", 0, 10, 0},
        {"beta1", 0, CLI_FLOAT, &o.beta1, "AdamW beta1", 0, 0.999999, 0},
        {"beta2", 0, CLI_FLOAT, &o.beta2, "AdamW beta2", 0, 0.999999, 0},
        {"eps", 0, CLI_FLOAT, &o.eps, "AdamW epsilon", 0, 1, 0},
        {"grad-clip", 0, CLI_FLOAT, &o.grad_clip, "global gradient-norm clip (0: off)", 0, 1e9, 0},
        {"l1", 0, CLI_FLOAT, &o.l1, "L1 activation penalty lambda (default: the config's, 2e-5)", 0, 1e3, 0},
        {"eval-every", 0, CLI_INT, &o.eval_every, "validation loss every N steps (0: off)", 0, 2e9, 0},
        {"eval-batches", 'm', CLI_INT, &o.eval_batches, "validation micro-batches per evaluation", 1, 1e9, 0},
        {"sample-every", 0, CLI_INT, &o.sample_every, "generate a sample every N steps (0: off)", 0, 2e9, 0},
        {"sample-tokens", 'g', CLI_INT, &o.sample_tokens, "tokens per sample", 1, 1e6, 0},
        {"temperature", 'T', CLI_FLOAT, &o.temperature, "sampling temperature (0: greedy)", 0, 100, 0},
        {"tokenizer", 't', CLI_STRING, &o.tokenizer, "tokenizer.json or GPT-2 encoder.json dir, to decode samples", 0, 0, 0},
        {"ckpt-every", 0, CLI_INT, &o.ckpt_every, "checkpoint every N steps (0: only at the end, -1: never)", -1, 2e9, 0},
        {"out", 'o', CLI_STRING, &o.out, "output directory: train.log, metrics.log, checkpoints", 0, 0, 0},
        {"resume", 'y', CLI_FLAG, &o.resume, "resume from the newest checkpoint in --out", 0, 0, 0},
        {"allow-config-change", 0, CLI_FLAG, &o.allow_config_change, "resume even if the training configuration differs from the checkpoint's", 0, 0, 0},
        {"keep-last", 0, CLI_INT, &o.keep_last, "keep only the newest N checkpoints (0: all)", 0, 1e9, 0},
        {"stop-at", 0, CLI_INT, &o.stop_at, "write a checkpoint and exit after this step (resume testing)", 1, 2e9, 0},
        {"seed", 's', CLI_U64, &o.seed, "seed for init, data order and sampling", 0, 0, 0},
        {"recompute", 'r', CLI_INT, &o.recompute, "activation recompute: 0 none, 1 FFN hidden, 2 + norms", 0, 2, 0},
        {"moments", 0, CLI_STRING, &o.moments, "AdamW moments: fp32, or bf16 (stochastic rounding; 4 B/param less; checkpoints stay fp32 and resume in either)", 0, 0, 0},
        {"master", 0, CLI_STRING, &o.master, "master weights: fp32, or none (AdamW updates the bf16 weights with stochastic rounding; 4 B/param less; checkpoints resume in either)", 0, 0, 0},
        {"log-stats-every", 0, CLI_INT, &o.log_stats_every, "per-layer sparsity statistics every N steps (0: off)", 0, 2e9, 0},
        {"deterministic", 0, CLI_FLAG, &o.deterministic, "bit-reproducible runs even if SLLM_ATTN_BWD=atomic is set (the default attention backward is already deterministic)", 0, 0, 0},
        {"time-limit", 0, CLI_INT, &o.time_limit, "stop after this many seconds of training (eval, sample, checkpoint, exit)", 1, 1e9, 0},
        {"bench", 0, CLI_INT, &o.bench, "benchmark: N steps (random tokens if no --train), median step time and a per-phase GPU time table (CUDA events)", 1, 1e6, 0},
        {"profile", 0, CLI_FLAG, &o.profile, "print the per-phase GPU time table in training too (every --log-stats-every steps)", 0, 0, 0},
        {"dist-init", 0, CLI_STRING, &o.dist_init, "multi-GPU rendezvous: mpi, file:///shared/path, tcp://host:port, env (MASTER_ADDR/PORT); default: mpi under mpirun, else $SLLM_DIST_INIT", 0, 0, 0},
        {"dist-timeout", 0, CLI_FLOAT, &o.dist_timeout, "seconds before a stuck collective ends every rank (default $SLLM_DIST_TIMEOUT or 120)", 1, 1e6, 0},
        {"grad-reduce", 0, CLI_STRING, &o.grad_reduce, "gradient reduction: owner (default: each piece reduced to the rank owning its shard, the bytes of a reduce-scatter) or allreduce", 0, 0, 0},
        {"dist-max-ctas", 0, CLI_INT, &o.dist_max_ctas, "NCCL CTAs (SMs) per collective, 0: NCCL's default (fewer leave more SMs to the backward the reduction overlaps)", 0, 64, 0},
        {"debug-no-reduce", 0, CLI_FLAG, &o.no_reduce, "debug/benchmark only: skip the gradient reduction (ranks diverge; shows the cost of the communication)", 0, 0, 0},
        {"ffn-path", 0, CLI_STRING, &o.ffn_path, "FFN path: auto (per layer: dense until sparse enough, with hysteresis), dense, sparse (TwELL, forced)", 0, 0, 0},
        {"ffn-lean", 0, CLI_FLAG, &o.ffn_lean, "auto path: dense FFN activations in a one-layer slot (dense layers recompute gate/up in backward): less memory", 0, 0, 0},
        {"sparse-on", 0, CLI_FLOAT, &o.sparse_on, "auto path: a dense layer turns sparse below this many non-zeros per token (default 40/5632 of d_ff)", 0, 1e6, 0},
        {"sparse-off", 0, CLI_FLOAT, &o.sparse_off, "auto path: a sparse layer turns dense above this many non-zeros per token (default 56/5632 of d_ff)", 0, 1e6, 0},
        {"sparse-max-dense", 0, CLI_FLOAT, &o.sparse_max_dense, "auto path: a sparse layer turns dense when more than this fraction of its rows ran densely (default 0.05)", 0, 1, 0},
        {"reinit-dead", 0, CLI_FLAG, &o.reinit_dead, "re-draw the gate rows of units that did not fire in the last --log-stats-every window (AdamW moments zeroed)", 0, 0, 0},
        {"l1-warmup", 0, CLI_INT, &o.l1_warmup, "L1 lambda ramps linearly from 0 over this many steps", 0, 2e9, 0},
        {"synthetic-nnz", 0, CLI_FLOAT, &o.synthetic_nnz, "--bench: SYNTHETIC sparsity: calibrate random weights to this many FFN non-zeros per token (learning rate 0)", 0, 1e6, 0},
        {"synthetic-profile", 0, CLI_STRING, &o.synthetic_profile, "--synthetic-nnz per layer: uniform, paper (PAPER.md's shape, mean --synthetic-nnz) or L comma-separated targets", 0, 0, 0},
        {"bench-compare", 0, CLI_FLAG, &o.bench_compare, "--bench: run the benchmark with the dense and then the sparse FFN path in this process; compare", 0, 0, 0},
        {"mc-eval", 0, CLI_STRING, &o.mc_eval, "multiple-choice evaluation file (JSONL: {\"context\", \"choices\", \"label\"} per line; model/mc_eval.h): acc and acc_norm logged at --mc-eval-every (needs --tokenizer)", 0, 0, 0},
        {"mc-eval-every", 0, CLI_INT, &o.mc_eval_every, "--mc-eval: every N steps and at the end (0: at the end only)", 0, 2e9, 0},
        {NULL, 0, CLI_INT, NULL, NULL, 0, 0, 0},
    };
    cli_parse(argc, argv, opts, "train_gpt_relu",
              "Trains a Llama-style model with a ReLU-gated FFN and an L1 activation penalty on one or several GPUs "
              "(one process per GPU: mpirun -np N, or scripts/run_dist.sh N).");
    char err[1024];
    if (!o.mc_eval && cli_given(opts, "mc-eval-every")) cli_fail("train_gpt_relu", "--mc-eval-every needs --mc-eval FILE");
    if (o.mc_eval && !o.tokenizer)
        cli_fail("train_gpt_relu", "--mc-eval needs --tokenizer (the tokenizer of the training data)");
    if (o.mc_eval && o.bench) cli_fail("train_gpt_relu", "--mc-eval is a training option: drop it with --bench");
    GradReduceMode reduce_mode = GRAD_ALLREDUCE;
    if (strcmp(o.grad_reduce, "owner") == 0) reduce_mode = GRAD_REDUCE_TO_OWNER;
    else if (strcmp(o.grad_reduce, "allreduce") != 0)
        SLLM_FATAL("--grad-reduce %s: expected allreduce or owner", o.grad_reduce);

    // ---- processes: rank, world, GPU, NCCL communicator (world 1: no NCCL)
    Dist d;
    DistOptions dopt = {-1, -1, -1, o.dist_init, o.dist_timeout, o.dist_max_ctas};
    if (dopt.timeout_s <= 0 && getenv("SLLM_DIST_TIMEOUT")) {  // --dist-timeout's default, as strict as the option
        const char *env = getenv("SLLM_DIST_TIMEOUT");
        float t = 0;
        CliOpt to = {"SLLM_DIST_TIMEOUT", 0, CLI_FLOAT, &t, "", 0, 1e6, 0};
        int bad = cli_parse_number(&to, env, err, sizeof err) != 0;
        if (!bad && !(t > 0)) { snprintf(err, sizeof err, "expects seconds > 0, got %g", t); bad = 1; }
        if (bad) SLLM_FATAL("SLLM_DIST_TIMEOUT=\"%s\": %s", env, err);
        dopt.timeout_s = t;
    }
    dist_init(&d, &dopt);
    if (d.world > 1) {
        char tag[64];
        snprintf(tag, sizeof tag, "rank %d of %d: ", d.rank, d.world);
        sllm_set_fatal_tag(tag);
        // rank 0 logs; the others print only errors (stderr), unless SLLM_LOG_ALL_RANKS=1
        if (d.rank != 0 && !getenv("SLLM_LOG_ALL_RANKS") && !freopen("/dev/null", "w", stdout))
            SLLM_FATAL("cannot silence stdout");
    }
    // Every kernel of the default path is deterministic (the attention backward computes dq in its own pass),
    // so resume is bit-exact. Only SLLM_ATTN_BWD=atomic (dq added with atomics, a little faster) is not;
    // --deterministic overrides it.
    if (o.deterministic) setenv("SLLM_ATTN_BWD", "det", 1);

    // ---- config
    ModelConfig cfg;
    float *init_params = NULL;
    char resume_dir[CKPT_PATH_MAX] = "";
    int resume_step = -1;
    int out_lock = -1;
    if (o.out && !o.bench && d.rank == 0) {  // one run per output directory; checked before any work
        if (ckpt_out_lock(o.out, &out_lock, err, sizeof err) != 0) SLLM_FATAL("%s", err);
        if (!o.resume && ckpt_find_latest(o.out, CKPT_MODEL_FILE, resume_dir, sizeof resume_dir) >= 0)
            SLLM_FATAL("%s already holds checkpoints (%s): pass --resume to continue that run, or choose a new --out",
                       o.out, resume_dir);
        resume_dir[0] = 0;
    }
    (void)out_lock;  // held (open) until the process exits
    if (o.resume) {
        if (!o.out) SLLM_FATAL("--resume needs --out (the directory holding the checkpoints)");
        resume_step = ckpt_find_latest(o.out, "train_state.bin", resume_dir, sizeof resume_dir);
        int step0 = resume_step;  // every rank must resume from rank 0's checkpoint
        dist_broadcast_bytes(&d, &step0, sizeof step0, 0, 0);
        if (step0 != resume_step)
            SLLM_FATAL("--resume: this rank finds checkpoint step %d in %s, rank 0 finds %d (--out must be on a file "
                       "system shared by every rank)", resume_step, o.out, step0);
        if (resume_step < 0) printf("resume: no checkpoint in %s, starting from scratch\n", o.out);
    }
    if (resume_step >= 0 || o.init_from) {
        const char *dir = resume_step >= 0 ? resume_dir : o.init_from;
        StDtype dt;
        if (ckpt_load(dir, &cfg, &init_params, &dt, err, sizeof err) != 0)
            SLLM_FATAL("cannot load checkpoint %s: %s", dir, err);
        printf("loaded weights and config from %s (%s)\n", dir, st_dtype_name(dt));
        // Shape options may be repeated on --resume (same command line), but must match the checkpoint.
        struct { const char *name; int given, cli, ck; } chk[] = {
            {"vocab", o.vocab != 0, o.vocab, cfg.vocab_size},   {"d-model", o.d_model != 0, o.d_model, cfg.d_model},
            {"layers", o.n_layer != 0, o.n_layer, cfg.n_layer}, {"heads", o.n_head != 0, o.n_head, cfg.n_head},
            {"kv-heads", o.n_kv_head != 0, o.n_kv_head, cfg.n_kv_head},
            {"head-dim", o.head_dim != 0, o.head_dim, cfg.head_dim}, {"d-ff", o.d_ff != 0, o.d_ff, cfg.d_ff},
            {"max-seq", o.max_seq != 0, o.max_seq, cfg.max_seq}, {"nongated", o.nongated != 0, 0, cfg.gated},
        };
        for (size_t i = 0; i < sizeof chk / sizeof chk[0]; i++)
            if (chk[i].given && chk[i].cli != chk[i].ck)
                SLLM_FATAL("--%s %d differs from the checkpoint %s (%d there): the checkpoint fixes the model shape",
                           chk[i].name, chk[i].cli, dir, chk[i].ck);
    } else {
        if (!config_from_preset(o.preset, &cfg)) {
            fprintf(stderr, "error: unknown preset \"%s\"; known presets:", o.preset);
            for (int i = 0; CONFIG_PRESET_NAMES[i]; i++) fprintf(stderr, " %s", CONFIG_PRESET_NAMES[i]);
            fprintf(stderr, "\n");
            return 1;
        }
        if (o.vocab) cfg.vocab_size = o.vocab;
        if (o.d_model) { cfg.d_model = o.d_model; cfg.head_dim = cfg.d_model / cfg.n_head; }
        if (o.n_head) { cfg.n_head = o.n_head; cfg.n_kv_head = o.n_head; cfg.head_dim = cfg.d_model / cfg.n_head; }
        if (o.n_kv_head) cfg.n_kv_head = o.n_kv_head;
        if (o.head_dim) cfg.head_dim = o.head_dim;
        if (o.n_layer) cfg.n_layer = o.n_layer;
        if (o.d_ff) cfg.d_ff = o.d_ff;
        if (o.max_seq) cfg.max_seq = o.max_seq;
        if (o.nongated) cfg.gated = 0;
    }
    if (o.rope_theta > 0) cfg.rope_theta = o.rope_theta;
    if (o.l1 >= 0) cfg.l1_lambda = o.l1;
    if (config_validate(&cfg, err, sizeof err) != 0) SLLM_FATAL("invalid model configuration: %s", err);
    if (o.seq == 0) o.seq = cfg.max_seq;
    if (o.seq > cfg.max_seq) SLLM_FATAL("--seq %d is longer than the model's max_seq %d (use --max-seq)", o.seq, cfg.max_seq);
    const int B = o.batch, T = o.seq;
    const long long tok_per_micro = (long long)B * T * d.world;
    if (o.total_batch == 0) o.total_batch = (int)tok_per_micro;
    if (o.total_batch % tok_per_micro != 0)
        SLLM_FATAL("--total-batch %d must be a multiple of B*T*world = %d*%d*%d = %lld (micro-steps per rank = "
                   "total / (B*T*world)); change --batch or --total-batch", o.total_batch, B, T, d.world, tok_per_micro);
    const int accum = (int)(o.total_batch / tok_per_micro);
    if (lr_schedule_check(o.schedule, o.warmup, o.steps, o.lr, o.final_lr_frac, err, sizeof err) != 0)
        SLLM_FATAL("learning-rate schedule: %s", err);
    if (strcmp(o.moments, "fp32") != 0 && strcmp(o.moments, "bf16") != 0)
        SLLM_FATAL("--moments %s: expected fp32 or bf16", o.moments);
    const int moments_bf16 = strcmp(o.moments, "bf16") == 0;
    if (strcmp(o.master, "fp32") != 0 && strcmp(o.master, "none") != 0)
        SLLM_FATAL("--master %s: expected fp32 or none", o.master);
    const int no_master = strcmp(o.master, "none") == 0;
    if (!o.bench && !o.train) SLLM_FATAL("--train is required (a glob of .bin shards), or use --bench N");
    if (o.stop_at > 0 && !o.out) SLLM_FATAL("--stop-at needs --out (it writes a checkpoint)");
    const TrainConfig tcfg = {o.schedule, o.steps, o.warmup, o.lr, o.final_lr_frac, o.wd, o.beta1, o.beta2, o.eps,
                              o.grad_clip, B, T, o.total_batch, d.world, cfg.l1_lambda, cfg.rope_theta, o.seed};
    if (resume_step >= 0) {  // the same run, or an explicitly allowed change
        char layout[512];
        int rc = train_config_check(resume_dir, &tcfg, o.allow_config_change, err, sizeof err, layout, sizeof layout);
        if (rc < 0) SLLM_FATAL("%s", err);
        if (rc > 0) printf("resume: configuration changed (%s): %s\n", TRAIN_CONFIG_ALLOW_FLAG, err);
        if (layout[0] && d.rank == 0)
            printf("resume: batch layout changed (%s): the optimizer shards are re-cut, the global batch is the same; "
                   "the run continues within bf16 noise, not bit-exactly\n", layout);
        if (d.rank == 0 && logger_truncate_metrics(o.out, resume_step, err, sizeof err) < 0) SLLM_FATAL("%s", err);
    }

    // ---- device
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, d.device));
    const double peak = device_peak_bf16(prop.name);

    // ---- logging
    Logger lg;
    if (logger_open(&lg, o.bench || d.rank != 0 ? NULL : o.out, resume_step >= 0, err, sizeof err) != 0)
        SLLM_FATAL("%s", err);
    if (d.rank != 0 && !getenv("SLLM_LOG_ALL_RANKS")) lg.quiet = 1;
    logger_printf(&lg, "device: %s, %d SMs, %.1f GiB; peak bf16 %s\n", prop.name, prop.multiProcessorCount,
                  prop.totalGlobalMem / 1073741824.0, peak > 0 ? "known" : "unknown (MFU n/a)");
    config_print(&cfg, stdout);
    if (lg.log) config_print(&cfg, lg.log);

    // ---- data
    DataLoader *train = NULL, *val = NULL;
    if (o.train) {
        train = loader_open(o.train, B, T, d.rank, d.world, o.seed, 1, err, sizeof err);
        if (!train) SLLM_FATAL("training data: %s", err);
        if (loader_check_vocab(train, cfg.vocab_size, err, sizeof err) != 0) SLLM_FATAL("training data: %s", err);
        char sum[512];
        loader_summary(train, sum, sizeof sum);
        logger_printf(&lg, "train: %s\n", sum);
    }
    if (o.val && !o.bench) {
        val = loader_open(o.val, B, T, d.rank, d.world, o.seed, 0, err, sizeof err);
        if (!val) SLLM_FATAL("validation data: %s", err);
        if (loader_check_vocab(val, cfg.vocab_size, err, sizeof err) != 0) SLLM_FATAL("validation data: %s", err);
        char sum[512];
        loader_summary(val, sum, sizeof sum);
        logger_printf(&lg, "val:   %s\n", sum);
    }
    Tokenizer *tok = NULL;
    if (o.tokenizer) {
        tok = tokenizer_load(o.tokenizer, err, sizeof err);
        if (!tok) SLLM_FATAL("tokenizer: %s", err);
        if (tokenizer_vocab_size(tok) > cfg.vocab_size)
            SLLM_FATAL("tokenizer has %d tokens but the model's vocab is %d", tokenizer_vocab_size(tok), cfg.vocab_size);
    }
    // multiple-choice evaluation: the file validated and tokenized now (a bad line stops here, before any step)
    McSet mc_set;
    memset(&mc_set, 0, sizeof mc_set);
    if (o.mc_eval) {
        if (mc_load(o.mc_eval, &mc_set, err, sizeof err) != 0) SLLM_FATAL("--mc-eval: %s", err);
        // the context of every sequence in the data: the end-of-text token; inputs of at most T tokens
        if (mc_tokenize(&mc_set, tok, tokenizer_eot_id(tok), T, err, sizeof err) != 0) SLLM_FATAL("--mc-eval: %s", err);
        logger_printf(&lg, "mc-eval: %s: %d items, %lld choices, every %d steps%s\n", o.mc_eval, mc_set.n_items,
                      mc_set.n_choices, o.mc_eval_every, o.mc_eval_every ? " and at the end" : " (at the end only)");
    }

    int ffn_mode = g_force_path >= 0 ? g_force_path : ffn_path_parse(o.ffn_path);
    if (ffn_mode < 0) SLLM_FATAL("--ffn-path %s: expected auto, dense or sparse", o.ffn_path);
    if (ffn_mode == FFN_PATH_AUTO && !sparse_ffn_shape_ok(cfg.d_model, cfg.d_ff)) {
        logger_printf(&lg, "ffn path: auto, but the sparse FFN needs d_model = 256 * (1, 2, 4, 8 or 16) and d_ff a "
                           "multiple of 256 in [256, 8192] (here %d, %d): every layer stays dense\n", cfg.d_model,
                      cfg.d_ff);
        ffn_mode = FFN_PATH_DENSE;
    }
    SparseFFNOptions ffo;
    ffo.mode = ffn_mode;
    ffo.lean = o.ffn_lean;
    ffo.par = sparse_dispatch_defaults(cfg.d_ff);
    if (o.sparse_on >= 0) ffo.par.on_nnz = o.sparse_on;
    if (o.sparse_off >= 0) ffo.par.off_nnz = o.sparse_off;
    if (o.sparse_max_dense >= 0) ffo.par.max_dense_frac = o.sparse_max_dense;
    if (ffo.par.off_nnz < ffo.par.on_nnz)
        SLLM_FATAL("--sparse-off %g must be >= --sparse-on %g (hysteresis)", ffo.par.off_nnz, ffo.par.on_nnz);
    if (o.synthetic_nnz > 0 && !o.bench) SLLM_FATAL("--synthetic-nnz is a benchmark mode: use it with --bench N");
    // ---- model: the FFN path per layer (dense, sparse, or auto: decided per step from the counts), bf16 weights and fp32 gradients on every rank; fp32 master weights (unless --master none) and AdamW moments sharded
    // (ZeRO-1; world 1: one shard of everything, the same kernels and bits as the unsharded update). The full
    // fp32 initial weights go through the gradient buffer (unused until the first backward).
    Model model;
    ParamLayout lay0;
    config_param_layout(&cfg, &lay0);
    model_create_ex(&model, &cfg, B, T, o.recompute, 0, 1, zero1_padded_total(lay0.total, d.world), &ffo);
    if (ffn_mode == FFN_PATH_AUTO)
        logger_printf(&lg, "ffn path: auto: every layer starts dense; dense -> sparse below %.1f non-zeros/token, sparse "
                           "-> dense above %.1f or over %.0f%% dense rows; at least %d steps on a path\n",
                      ffo.par.on_nnz, ffo.par.off_nnz, 100 * ffo.par.max_dense_frac, ffo.par.min_dwell);
    else logger_printf(&lg, "ffn path: %s for every layer\n", ffn_path_name(ffn_mode));
    Zero1 zero;
    zero1_init_layout(&zero, &d, &model.lay, (moments_bf16 ? ZERO1_MOMENTS_BF16 : 0) | (no_master ? ZERO1_NO_MASTER : 0),
                      model.params);
    if (init_params) params_upload(model.params, model.grads, init_params, model.lay.total, model.stream);
    else params_init_random(model.params, model.grads, &model.lay, o.seed, model.stream);
    zero1_set_master(&zero, model.grads, 1);
    printf("  optimizer shard (ZeRO-1, rank %d of %d): %zu of %zu params, %s + m, v %s: %.1f MiB\n", d.rank, d.world,
           zero.shard.count, model.lay.total, no_master ? "no master weights" : "master fp32", o.moments,
           zero.opt_bytes / 1048576.0);
    GradReducer red;
    grad_reducer_init(&red, &d, model.grads, model.lay.total, reduce_mode);
    grad_reducer_add_layer_buckets(&red, &model.lay, cfg.n_layer);
    grad_reducer_init_embed(&red, B * T, cfg.d_model);
    DistHooks hooks = {&d, &red};
    model.dist.ctx = &hooks;
    model.dist.world = d.world;
    model.dist.grad_ready = hook_grad_ready;
    model.dist.embed_lookup = hook_embed_lookup;
    model.dist.sum_f32 = hook_sum_f32;
    model.dist.sum_u64 = hook_sum_u64;
    model.dist.max_u8 = hook_max_u8;
    int start_step = 0;
    TrainState ts;
    memset(&ts, 0, sizeof ts);
    Rng rng;
    rng_seed(&rng, o.seed ^ 0x5eed5eedull);
    if (resume_step >= 0) {
        load_train_state(resume_dir, &ts, &model);
        load_optimizer(resume_dir, &zero, init_params);
        if (ts.B != B || ts.T != T || ts.grad_accum != accum)
            logger_printf(&lg, "warning: resuming with B=%d T=%d accum=%d, the checkpoint used B=%d T=%d accum=%d "
                               "(not bit-exact)\n", B, T, accum, ts.B, ts.T, ts.grad_accum);
        if (ts.has_loader && train && loader_set_state(train, &ts.loader, err, sizeof err) != 0)
            SLLM_FATAL("resume: %s", err);
        rng = ts.rng;
        start_step = (int)ts.step;
        logger_printf(&lg, "resumed from %s at step %d\n", resume_dir, start_step);
    }
    free(init_params);
    init_params = NULL;
    double synth_nnz = 0;
    if (o.synthetic_nnz > 0) {
        double *nz = (double *)sllm_calloc(cfg.n_layer, sizeof(double));
        double *targets = (double *)sllm_calloc(cfg.n_layer, sizeof(double));
        if (sparsity_profile_parse(o.synthetic_profile, cfg.n_layer, cfg.d_ff, o.synthetic_nnz, targets, err, sizeof err))
            SLLM_FATAL("--synthetic-profile: %s", err);
        double worst = model_synthetic_sparsity_profile(&model, targets, o.seed, nz, stdout);
        free(targets);
        for (int l = 0; l < cfg.n_layer; l++) synth_nnz += nz[l] / cfg.n_layer;
        logger_printf(&lg, "SYNTHETIC sparsity: random weights calibrated to %.1f FFN non-zeros per token (mean over layers "
                           "%.1f, worst layer off by %.1f%%, profile %s); learning rate 0 to keep it\n", o.synthetic_nnz, synth_nnz,
                      100 * worst, o.synthetic_profile);
        free(nz);
        // the calibration moved columns of the bf16 weights: the ZeRO-1 master weights follow (through the gradient
        // buffer, unused until the first backward), so the first update does not undo it
        bf16_to_f32(model.grads, model.params, model.lay.total, model.stream);
        zero1_set_master(&zero, model.grads, 1);
    }
    const double flops_tok = model_flops_per_token(&cfg, T);
    const long long tokens_per_step = (long long)o.total_batch;
    logger_printf(&lg, "batch: B=%d T=%d accum=%d world=%d -> %lld tokens/step; steps %d; lr %g (%s, warmup %d, "
                       "final x%g); wd %g; clip %g; lambda %g; recompute %d; AdamW moments %s; master weights %s\n",
                  B, T, accum, d.world, tokens_per_step, o.steps, o.lr, o.schedule, o.warmup, o.final_lr_frac, o.wd,
                  o.grad_clip, cfg.l1_lambda, o.recompute, o.moments, o.master);
    logger_printf(&lg, "model FLOPs per token (fwd+bwd): %.3g\n", flops_tok);

    int32_t *in = (int32_t *)sllm_malloc((size_t)B * T * 4), *tg = (int32_t *)sllm_malloc((size_t)B * T * 4);
    const int L = cfg.n_layer;
    double *nnz = (double *)sllm_malloc(L * sizeof(double)), *alive = (double *)sllm_malloc(L * sizeof(double));
    model_reset_sparsity(&model);
    const int total_steps = o.bench ? o.bench : o.steps;
    double *step_ms = (double *)sllm_calloc(total_steps + 1, sizeof(double));
    int *step_prof = (int *)sllm_calloc(total_steps + 1, sizeof(int));
    // gradients are summed over ranks: scale by the tokens of the GLOBAL step
    const float dloss = 1.0f / (float)((double)B * T * accum * d.world);
    const float l1_coef = (float)(cfg.l1_lambda / ((double)L * B * T * accum * d.world));
    if (d.world > 1)
        logger_printf(&lg, "data parallel: %d ranks, gradient %s in %d buckets overlapped with the backward%s, the "
                           "embedding lookup's gradient all-gathered (%.1f MiB); ZeRO-1 optimizer shards of %zu params\n",
                      d.world, reduce_mode == GRAD_ALLREDUCE ? "all-reduce" : "reduce-to-owner", red.nb,
                      o.no_reduce ? " (OFF: --debug-no-reduce)" : "",
                      grad_reducer_embed_bytes(d.world, B * T, cfg.d_model) / 1048576.0, (size_t)zero.stride);
    SparseSwitch *sw_ev = (SparseSwitch *)sllm_calloc(L, sizeof(SparseSwitch));
    unsigned long long *sp_counts_dev = NULL;  // the per-layer FFN counts, summed across ranks (world > 1)
    if (d.world > 1 && model.sp.mode != FFN_PATH_DENSE)
        cudaCheck(cudaMalloc((void **)&sp_counts_dev, (size_t)L * SPARSE_COUNTS_PER_LAYER * sizeof(uint64_t)));
    int *dead = (int *)sllm_calloc(L, sizeof(int));
    McTrainCtx mc_ctx;
    memset(&mc_ctx, 0, sizeof mc_ctx);
    float *mc_dev = NULL;
    if (mc_set.n_items) {
        mc_train_ctx_init(&mc_ctx, &model);
        cudaCheck(cudaMalloc((void **)&mc_dev, 3 * sizeof(float)));
    }
    double last_nnz_mean = -1;  // mean non-zeros per token over the layers, at the last statistics window
    Rng data_rng;  // synthetic tokens for --bench without --train (another stream on every rank)
    rng_seed(&data_rng, o.seed + 0x9e3779b97f4a7c15ull * (uint64_t)d.rank);
    StepProfiler prof;
    prof_init(&prof);
    const int want_prof = o.bench || o.profile;
    if (want_prof) {
        // FLOPs per step of the GEMM phases (forward GEMM 2*N*K*M; each backward GEMM phase does 2 of them)
        const double Nt = (double)tokens_per_step / d.world, D = cfg.d_model, F = cfg.d_ff, V = cfg.vocab_size,
                     QKV = (double)cfg.n_head * cfg.head_dim + 2.0 * cfg.n_kv_head * cfg.head_dim,
                     Qd = (double)cfg.n_head * cfg.head_dim, G = cfg.gated ? 2 : 1;
        prof.flops[PH_ATT_QKV] = 2 * Nt * D * QKV * L;
        prof.flops[PH_ATT_OUT] = 2 * Nt * Qd * D * L;
        prof.flops[PH_FFN_GU] = 2 * Nt * D * F * G * L;
        prof.flops[PH_FFN_DOWN] = 2 * Nt * F * D * L;
        prof.flops[PH_LM_FWD] = 2 * Nt * D * V;
        prof.flops[PH_LM_BWD] = 4 * Nt * D * V;
        prof.flops[PH_B_FFN_DOWN] = 4 * Nt * F * D * L;
        prof.flops[PH_B_FFN_GU] = 4 * Nt * D * F * G * L;
        prof.flops[PH_B_ATT_OUT] = 4 * Nt * Qd * D * L;
        prof.flops[PH_B_ATT_QKV] = 4 * Nt * D * QKV * L;
        // attention (causal: half of the T x T): fwd 2 GEMMs, bwd 5 (as model_flops_per_token counts 4+8 -> 6)
        prof.flops[PH_ATT_CORE] = 2.0 * Nt * T * Qd * L;
        prof.flops[PH_B_ATT_CORE] = 5.0 * Nt * T * Qd * L;
    }

    // --bench: energy of the timed steps (after the 2 warm-up steps) from NVML, rank 0's GPU (core/energy.h)
    EnergyMeter *bench_em = NULL;
    double bench_j0 = 0;
    if (o.bench && d.rank == 0) {
        char bus[64], why[256];
        cudaCheck(cudaDeviceGetPCIBusId(bus, sizeof bus, d.device));
        bench_em = energy_open(bus, 20, why, sizeof why);
        if (bench_em) logger_printf(&lg, "bench: energy from %s\n", energy_describe(bench_em));
        else logger_printf(&lg, "bench: energy not measured (%s)\n", why);
    }
    const double t_train0 = sllm_time_s();
    int time_up = 0;
    for (int step = start_step; step <= total_steps; step++) {
        if (o.time_limit > 0 && !time_up) {  // rank 0's clock decides for everyone
            int up = sllm_time_s() - t_train0 > o.time_limit;
            dist_broadcast_bytes(&d, &up, sizeof up, 0, 0);
            time_up = up;
        }
        if (time_up == 1) {
            time_up = 2;
            logger_printf(&lg, "time limit of %d s reached after %d steps\n", o.time_limit, step);
        }
        const int last = step == total_steps || time_up;
        if (!o.bench) {
            if (val && o.eval_every > 0 && (step % o.eval_every == 0 || last)) {
                float vl = evaluate(&model, &d, val, o.eval_batches, in, tg);
                logger_printf(&lg, "step %d | val loss %.4f\n", step, vl);
                logger_metric(&lg, "s:%d val:%.9g\n", step, vl);
            }
            if (mc_set.n_items && (last || (o.mc_eval_every > 0 && step % o.mc_eval_every == 0)))
                mc_eval_step(&model, &d, &mc_set, &mc_ctx, mc_dev, step, &lg);
            if (d.rank == 0 && o.sample_every > 0 && step > 0 && (step % o.sample_every == 0 || last))
                generate_sample(&model, tok, o.sample_tokens, o.temperature, o.seed + 1337, &lg);
            int want_ckpt = o.out && step > start_step &&
                            (step == o.stop_at ||
                             (o.ckpt_every >= 0 && ((o.ckpt_every > 0 && step % o.ckpt_every == 0) || last)));
            if (want_ckpt) {
                ts.magic = TRAIN_STATE_MAGIC; ts.version = 1; ts.step = step; ts.total_params = model.lay.total;
                ts.B = B; ts.T = T; ts.grad_accum = accum; ts.has_loader = train != NULL; ts.seed = o.seed;
                if (train) loader_get_state(train, &ts.loader);
                ts.rng = rng;
                save_checkpoint(&model, &zero, &d, o.out, step, &ts, &tcfg, o.keep_last, &lg);
            }
            if (step == o.stop_at) { logger_printf(&lg, "stopping at step %d (--stop-at)\n", step); break; }
        }
        if (last) break;

        if (bench_em && step - start_step == 2 && energy_read(bench_em, &bench_j0) != 0) {  // the last step synchronised
            logger_printf(&lg, "bench: energy not measured (%s)\n", energy_last_error(bench_em));
            energy_close(bench_em);
            bench_em = NULL;
        }
        double t0 = sllm_time_s();
        // attached for the step only (not eval / sampling); --bench profiles every other step, so the median
        // of the steps without events shows that the events cost nothing
        model.prof = (want_prof && (!o.bench || (step - start_step) % 2 == 0)) ? &prof : NULL;
        const int profiled = model.prof != NULL;
        model_mark(&model, PH_ZERO);
        model_zero_grad(&model);
        // L1 warm-up: lambda ramps linearly from 0 over --l1-warmup steps
        const float lam_frac = o.l1_warmup > 0 && step < o.l1_warmup ? (float)(step + 1) / o.l1_warmup : 1.0f;
        for (int a = 0; a < accum; a++) {
            if (train) loader_next(train, in, tg);
            else {
                for (int i = 0; i < B * T; i++) in[i] = (int)rng_below(&data_rng, cfg.vocab_size);
                for (int i = 0; i < B * T; i++) tg[i] = (int)rng_below(&data_rng, cfg.vocab_size);
            }
            model_forward(&model, in, tg, B, T, MODEL_TRAIN, dloss);
            grad_reducer_begin(&red, a == accum - 1 && !o.no_reduce);  // reduce on the last micro-step only
            model_backward(&model, l1_coef * lam_frac);
        }
        grad_reducer_finish(&red, model.stream);  // the compute stream waits for the last buckets
        model_mark(&model, PH_GRAD_NORM);
        zero1_grad_norm(&zero, model.grads, model.scalars + SC_NORM, model.stream);
        float lr = lr_schedule(o.schedule, step, o.warmup, o.steps, o.lr, o.final_lr_frac);
        if (o.synthetic_nnz > 0) lr = 0.0f;  // keep the calibrated synthetic sparsity
        AdamWParams hp = {lr, o.beta1, o.beta2, o.eps, o.wd, o.grad_clip, step + 1};
        model_mark(&model, PH_ADAMW);
        zero1_step(&zero, model.params, model.grads, &hp, model.scalars + SC_NORM, model.stream);
        model_ffn_after_update(&model);
        model_mark(&model, PH_END);
        ModelStepStats st;
        model_read_step(&model, &st);  // synchronises
        const int n_sparse = sparse_ffn_num_sparse(&model.sp);  // the layers that ran sparse in this step
        if (model.sp.mode != FFN_PATH_DENSE) {
            model_ffn_step_counts(&model);
            if (d.world > 1) {  // the counts of every rank, so that every rank decides the same paths
                const size_t nc = (size_t)L * SPARSE_COUNTS_PER_LAYER;
                cudaCheck(cudaMemcpyAsync(sp_counts_dev, model.sp.counts, nc * sizeof(uint64_t), cudaMemcpyHostToDevice,
                                          model.stream));
                dist_allreduce_sum_u64(&d, sp_counts_dev, nc, model.stream);
                cudaCheck(cudaMemcpyAsync(model.sp.counts, sp_counts_dev, nc * sizeof(uint64_t), cudaMemcpyDeviceToHost,
                                          model.stream));
                cudaCheck(cudaStreamSynchronize(model.stream));
            }
            const int nsw = model_ffn_dispatch(&model, sw_ev);
            for (int i = 0; i < nsw; i++)
                logger_printf(&lg, "layer %d: %s at step %d (nnz %.1f/token, dense rows %.2f%%)\n", sw_ev[i].layer,
                              sw_ev[i].to_sparse ? "dense -> sparse" : "sparse -> dense", step + 1, sw_ev[i].nnz,
                              100 * sw_ev[i].dense_frac);
        }
        double dt = sllm_time_s() - t0;
        // profile: skip the first 2 steps (warm-up: cuBLASLt heuristics, first launches), as the median does
        if (model.prof) prof_end_step(&prof, dt * 1e3, step - start_step >= 2);
        if (o.bench) step_prof[step] = profiled;
        model.prof = NULL;
        step_ms[step] = dt * 1e3;
        double ce = st.ce_sum / (double)tokens_per_step;
        double l1 = st.l1_sum_all / ((double)L * tokens_per_step);
        double loss = ce + cfg.l1_lambda * lam_frac * l1;
        double tps = tokens_per_step / dt;
        char mfu[32];
        if (peak > 0) snprintf(mfu, sizeof mfu, "%.1f%%", 100.0 * flops_tok * tps / (peak * d.world));
        else snprintf(mfu, sizeof mfu, "n/a");
        char ffn_s[48] = "";
        if (model.sp.mode != FFN_PATH_DENSE) snprintf(ffn_s, sizeof ffn_s, " | ffn sparse %d/%d", n_sparse, L);
        logger_printf(&lg, "step %5d/%d | loss %.4f | ce %.4f | l1 %8.3f | lr %.2e | norm %7.3f | %7.1f ms | %8.0f tok/s "
                           "| MFU %s%s\n", step + 1, total_steps, loss, ce, l1, lr, st.grad_norm, dt * 1e3, tps, mfu, ffn_s);
        logger_metric(&lg, "s:%d loss:%.9g ce:%.9g l1:%.9g norm:%.9g lr:%.9g ms:%.3f\n", step + 1, loss, ce, l1,
                      st.grad_norm, lr, dt * 1e3);
        if (!isfinite(loss)) SLLM_FATAL("loss is %f at step %d: training diverged", loss, step + 1);
        if (o.log_stats_every > 0 && ((step + 1) % o.log_stats_every == 0 || step + 1 == total_steps)) {
            model_read_sparsity(&model, nnz, alive);
            double mn = 0, ma = 0;
            for (int l = 0; l < L; l++) { mn += nnz[l]; ma += alive[l]; }
            logger_printf(&lg, "  sparsity: mean non-zeros/token %.1f of %d (%.2f%%), neurons alive %.1f%% | per layer:",
                          mn / L, cfg.d_ff, 100.0 * mn / L / cfg.d_ff, 100.0 * ma / L);
            for (int l = 0; l < L; l++) logger_printf(&lg, " %.0f/%.0f%%", nnz[l], 100.0 * alive[l]);
            logger_printf(&lg, "\n");
            logger_metric(&lg, "s:%d nnz:%.6g alive:%.6g\n", step + 1, mn / L, ma / L);
            last_nnz_mean = mn / L;
            if (model.sp.mode != FFN_PATH_DENSE) {
                const SparseFFN *sp = &model.sp;
                for (int l = 0; l < L; l++) {
                    char ms[96] = "max -, dense rows -, overflow rows -";
                    if (sp->win_sparse_steps[l])
                        snprintf(ms, sizeof ms, "max %d, dense rows %.2f%%, overflow rows %llu", sp->win_max_nnz[l],
                                 sp->win_rows[l] ? 100.0 * sp->win_dense_rows[l] / sp->win_rows[l] : 0.0,
                                 (unsigned long long)sp->win_ovf_rows[l]);
                    logger_printf(&lg, "  ffn layer %2d: %-6s | nnz/token %.1f, %s (last forward of each sparse step) | "
                                       "fired %.1f%% (dead %.1f%%) | sparse %d of %d steps\n", l,
                                  sp->sparse[l] ? "sparse" : "dense", nnz[l], ms, 100 * alive[l], 100 * (1 - alive[l]),
                                  sp->win_sparse_steps[l], sp->win_steps);
                }
                const size_t dl = ((size_t)model.G + (o.recompute >= 1 ? 0 : 1)) * model.N * cfg.d_ff * 2;
                logger_printf(&lg, "  ffn memory: dense FFN activations %.1f MiB allocated (%d slot(s); %.1f MiB if every "
                                   "layer kept them), sparse path %.1f MiB; %d/%d layers sparse next step\n",
                              model.ffn_dense_slots * dl / 1048576.0, model.ffn_dense_slots, L * dl / 1048576.0,
                              model_sparse_bytes(&model) / 1048576.0, sparse_ffn_num_sparse(sp), L);
            }
            if (o.reinit_dead) {
                const uint64_t rs = o.seed + 7919ull * (step + 1);
                long nd = zero.moments_bf16 ? model_reinit_dead(&model, rs, dead, zero.master, zero.mb, zero.vb,
                                                                zero.shard.offset, zero.shard.count)
                                            : model_reinit_dead(&model, rs, dead, zero.master, zero.m, zero.v,
                                                                zero.shard.offset, zero.shard.count);
                logger_printf(&lg, "  dead units re-initialised: %ld (per layer:", nd);
                for (int l = 0; l < L; l++) logger_printf(&lg, " %d", dead[l]);
                logger_printf(&lg, ")\n");
                sparse_ffn_mark_stale(&model.sp);
            }
            model_reset_sparsity(&model);
            if (o.profile && !o.bench && prof.steps) {
                prof_print(&prof, stdout);
                if (lg.log) prof_print(&prof, lg.log);
                StepProfiler keep = prof;  // restart the averages, keep the event pool
                memset(keep.ms, 0, sizeof keep.ms);
                keep.span_ms = keep.wall_ms = 0;
                keep.steps = 0;
                prof = keep;
            }
        }
    }

    if (o.bench) {
        // median over the steps after 2 warm-up steps
        int n = total_steps > 3 ? total_steps - 2 : total_steps;
        // medians of the steps with and without profiling events (before sorting)
        double with_ev[64], without_ev[64];
        int nw = 0, nwo = 0;
        for (int i = total_steps - n; i < total_steps; i++) {
            if (step_prof[i] && nw < 64) with_ev[nw++] = step_ms[i];
            else if (!step_prof[i] && nwo < 64) without_ev[nwo++] = step_ms[i];
        }
        double *v = step_ms + (total_steps - n);
        for (int i = 1; i < n; i++)
            for (int j = i; j > 0 && v[j - 1] > v[j]; j--) { double t = v[j]; v[j] = v[j - 1]; v[j - 1] = t; }
        double med = v[n / 2];
        double tpms = tokens_per_step / med;
        char mfu[32];
        if (peak > 0) snprintf(mfu, sizeof mfu, "%.1f%%", 100.0 * flops_tok * tpms * 1e3 / (peak * d.world));
        else snprintf(mfu, sizeof mfu, "n/a");
        size_t fr, totm;
        cudaCheck(cudaMemGetInfo(&fr, &totm));
        logger_printf(&lg, "bench: %s L=%d D=%d F=%d V=%d B=%d T=%d recompute=%d world=%d%s: median step %.2f ms over %d "
                           "steps, %.1f tokens/ms, MFU %s, device memory used %.1f GiB (rank 0)\n",
                      o.preset, L, cfg.d_model, cfg.d_ff, cfg.vocab_size, B, T, o.recompute, d.world,
                      o.no_reduce ? " no-reduce" : "", med, n, tpms, mfu, (totm - fr) / 1073741824.0);
        if (o.synthetic_nnz > 0 || model.sp.mode != FFN_PATH_DENSE) {
            logger_printf(&lg, "bench: %sFFN path %s, %d/%d layers sparse, measured non-zeros/token %.1f (last statistics "
                               "window; -1: none, see --log-stats-every)\n",
                          o.synthetic_nnz > 0 ? "SYNTHETIC sparsity, " : "", ffn_path_name(model.sp.mode),
                          sparse_ffn_num_sparse(&model.sp), L, last_nnz_mean);
            g_bench_res.nnz_mean = last_nnz_mean;
        }
        g_bench_res.mj_per_token = NAN;
        snprintf(g_bench_res.energy_src, sizeof g_bench_res.energy_src, "none");
        double bench_j1 = 0;
        const int e_steps = total_steps - start_step - 2;
        if (bench_em && e_steps > 0 && energy_read(bench_em, &bench_j1) == 0) {
            g_bench_res.mj_per_token = 1e3 * (bench_j1 - bench_j0) / ((double)tokens_per_step * e_steps);
            snprintf(g_bench_res.energy_src, sizeof g_bench_res.energy_src, "%s",
                     energy_source(bench_em) == ENERGY_COUNTER ? "counter" : "power_samples");
            logger_printf(&lg, "bench: energy %.4f mJ/token over %d steps (%.1f J; %s)\n", g_bench_res.mj_per_token,
                          e_steps, bench_j1 - bench_j0, energy_describe(bench_em));
        }
        g_bench_res.done = 1;
        g_bench_res.synthetic_nnz = o.synthetic_nnz;
        g_bench_res.med_ms = med;
        g_bench_res.tok_per_ms = tpms;
        g_bench_res.mem_used_gib = (totm - fr) / 1073741824.0;
        g_bench_res.alloc_gib = (model.param_bytes + model.grad_bytes + model.opt_bytes + zero.opt_bytes +
                                 model.act_bytes + model_sparse_bytes(&model)) / 1073741824.0;
        logger_printf(&lg, "bench: median step without profiling events %.2f ms (%d steps), with events %.2f ms (%d steps)\n",
                      median_ms(without_ev, nwo), nwo, median_ms(with_ev, nw), nw);
        prof_print(&prof, stdout);
        if (lg.log) prof_print(&prof, lg.log);
    }
    energy_close(bench_em);
    model.prof = NULL;
    prof_free(&prof);
    free(step_ms); free(step_prof); free(nnz); free(alive); free(in); free(tg); free(sw_ev); free(dead);
    if (sp_counts_dev) cudaCheck(cudaFree(sp_counts_dev));
    if (mc_dev) cudaCheck(cudaFree(mc_dev));
    if (mc_set.n_items) mc_train_ctx_free(&mc_ctx);
    mc_free(&mc_set);
    if (tok) tokenizer_free(tok);
    if (train) loader_close(train);
    if (val) loader_close(val);
    grad_reducer_free(&red);
    zero1_free(&zero);
    model_free(&model);
    logger_close(&lg);
    dist_finalize(&d);
    return 0;
}

// --bench-compare: the benchmark with the dense FFN path, then with the sparse one, in this process (each phase
// creates and frees its own model); then both side by side.
int main(int argc, char **argv) {
    int compare = 0;
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--bench-compare")) compare = 1;
    if (!compare) return run_main(argc, argv);
    BenchResult r[2];
    const int paths[2] = {FFN_PATH_DENSE, FFN_PATH_SPARSE};
    for (int p = 0; p < 2; p++) {
        printf("==== bench-compare phase %d: FFN path %s ====\n", p + 1, ffn_path_name(paths[p]));
        fflush(stdout);
        g_force_path = paths[p];
        memset(&g_bench_res, 0, sizeof g_bench_res);
        int rc = run_main(argc, argv);
        if (rc != 0 || !g_bench_res.done) SLLM_FATAL("--bench-compare: phase %d did not finish (needs --bench N)", p + 1);
        r[p] = g_bench_res;
        cudaCheck(cudaDeviceSynchronize());
    }
    printf("bench-compare%s: dense FFN %.2f ms/step, %.1f tokens/ms, device memory used %.2f GiB (allocated %.2f GiB) | "
           "sparse FFN %.2f ms/step, %.1f tokens/ms, device memory used %.2f GiB (allocated %.2f GiB), non-zeros/token "
           "%.1f | speed-up %.3fx, memory %+.1f%% (used) %+.1f%% (allocated)\n",
           r[1].synthetic_nnz > 0 ? " (SYNTHETIC sparsity)" : "", r[0].med_ms, r[0].tok_per_ms, r[0].mem_used_gib,
           r[0].alloc_gib, r[1].med_ms, r[1].tok_per_ms, r[1].mem_used_gib, r[1].alloc_gib, r[1].nnz_mean,
           r[1].tok_per_ms / r[0].tok_per_ms, 100 * (r[1].mem_used_gib / r[0].mem_used_gib - 1),
           100 * (r[1].alloc_gib / r[0].alloc_gib - 1));
    if (!isnan(r[0].mj_per_token) && !isnan(r[1].mj_per_token))
        printf("bench-compare energy%s: dense FFN %.4f mJ/token | sparse FFN %.4f mJ/token | %+.1f%% (%s)\n",
               r[1].synthetic_nnz > 0 ? " (SYNTHETIC sparsity)" : "", r[0].mj_per_token, r[1].mj_per_token,
               100 * (r[1].mj_per_token / r[0].mj_per_token - 1), r[1].energy_src);
    else printf("bench-compare energy: not measured (see the phases' \"bench: energy\" lines)\n");
    return 0;
}
