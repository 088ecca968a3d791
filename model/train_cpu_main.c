// model/train_cpu_main.c -> build/train_cpu: a small CPU trainer on the float64 reference model
// (model/ref_model.h), for the quick start on machines without a GPU. Same data loader, LR schedule,
// AdamW and checkpoint format as the GPU trainer; slow (plain C, one thread), so keep models tiny.
// Checkpoints (--out; every --ckpt-every steps and at the end; --keep-last N of them) hold model.safetensors +
// config.json, train_state.bin (step, loader position, the float64 weights and AdamW moments, so resume is
// exact) and train_config.json; --resume continues from the newest one and refuses a changed configuration
// unless --allow-config-change. The output directory is locked while the run lasts.
//
//   build/train_cpu --train 'data/starter/brown_train_*.bin' --steps 30 --out out/cpu_quickstart
//   build/train_cpu -h
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "checkpoint.h"
#include "cli.h"
#include "train_config.h"
#include "common.h"
#include "config.h"
#include "dataloader/loader.h"
#include "dataloader/tokenizer.h"
#include "logger.h"
#include "lr_schedule.h"
#include "model/ref_model.h"

#define CPU_STATE_MAGIC 0x43544c53u  // "SLTC"
typedef struct {
    uint32_t magic, version;
    int64_t step;            // optimizer steps completed
    uint64_t total_params;
    LoaderState loader;
} CpuTrainState;             // followed in train_state.bin by params, AdamW m, AdamW v (float64 each)

static int save_state(const char *out, int step, const ModelConfig *c, const RefModel *m, const double *am,
                      const double *av, const DataLoader *dl, const TrainConfig *tc, char *err, size_t errn) {
    char dir[4200];
    snprintf(dir, sizeof dir, "%s/ckpt_%08d", out, step);
    size_t n = m->lay.total;
    CpuTrainState st;
    memset(&st, 0, sizeof st);
    st.magic = CPU_STATE_MAGIC; st.version = 1; st.step = step; st.total_params = n;
    loader_get_state(dl, &st.loader);
    float *pf = (float *)sllm_malloc(n * 4);
    ref_model_to_f32(m, pf);
    char *js = train_config_json(tc);
    SLLM_CHECK(js, "out of memory");
    const void *sb[4] = {&st, m->params, am, av};
    const size_t ss[4] = {sizeof st, n * 8, n * 8, n * 8};
    const void *cb[1] = {js};
    const size_t cs[1] = {strlen(js)};
    const CkptFile files[2] = {{"train_state.bin", sb, ss, 4}, {TRAIN_CONFIG_FILE, cb, cs, 1}};
    int rc = ckpt_save(dir, c, pf, ST_F32, files, 2, err, errn);
    free(pf); free(js);
    return rc;
}

int main(int argc, char **argv) {
    const char *train = NULL, *val = NULL, *out = NULL, *tokenizer = NULL, *schedule = "cosine";
    int vocab = 50304, d_model = 64, layers = 2, heads = 2, d_ff = 256, seq = 64, batch = 4, steps = 30, warmup = 3,
        sample_tokens = 16, nongated = 0, ckpt_every = 0, keep_last = 0, resume = 0, allow_change = 0, stop_at = 0;
    float lr = 3e-3f, l1 = 1e-3f, wd = 0.1f, clip = 1.0f, final_frac = 0.1f;
    unsigned long long seed = 1337;
    CliOpt opts[] = {
        {"train", 'i', CLI_STRING, &train, "glob of training shards (.bin)", 0, 0, 0},
        {"val", 'j', CLI_STRING, &val, "glob of validation shards: val loss at the end", 0, 0, 0},
        {"vocab", 0, CLI_INT, &vocab, "vocab size (50304 for GPT-2 tokens)", 1, 1 << 24, 0},
        {"d-model", 0, CLI_INT, &d_model, "d_model", 8, 4096, 0},
        {"layers", 0, CLI_INT, &layers, "layers", 1, 64, 0},
        {"heads", 0, CLI_INT, &heads, "attention heads (head_dim = d_model/heads)", 1, 64, 0},
        {"d-ff", 0, CLI_INT, &d_ff, "FFN width", 8, 65536, 0},
        {"nongated", 0, CLI_FLAG, &nongated, "non-gated FFN", 0, 0, 0},
        {"seq", 0, CLI_INT, &seq, "sequence length T", 1, 4096, 0},
        {"batch", 'b', CLI_INT, &batch, "sequences per step", 1, 4096, 0},
        {"steps", 'x', CLI_INT, &steps, "optimizer steps", 1, 1000000, 0},
        {"schedule", 'k', CLI_STRING, &schedule, "LR schedule: cosine, linear, constant", 0, 0, 0},
        {"lr", 'l', CLI_FLOAT, &lr, "peak learning rate", 0, 10, 0},
        {"warmup", 'u', CLI_INT, &warmup, "warm-up steps", 0, 1000000, 0},
        {"final-lr-frac", 0, CLI_FLOAT, &final_frac, "final LR fraction", 0, 1, 0},
        {"wd", 'c', CLI_FLOAT, &wd, "weight decay (2-D weights)", 0, 10, 0},
        {"grad-clip", 0, CLI_FLOAT, &clip, "gradient-norm clip (0: off)", 0, 1e9, 0},
        {"l1", 0, CLI_FLOAT, &l1, "L1 activation penalty lambda", 0, 1e3, 0},
        {"sample-tokens", 'g', CLI_INT, &sample_tokens, "greedy sample length at the end (0: none)", 0, 4096, 0},
        {"tokenizer", 't', CLI_STRING, &tokenizer, "tokenizer to decode the sample", 0, 0, 0},
        {"out", 'o', CLI_STRING, &out, "output directory: train.log, metrics.log, final checkpoint", 0, 0, 0},
        {"seed", 's', CLI_U64, &seed, "seed", 0, 0, 0},
        {"ckpt-every", 0, CLI_INT, &ckpt_every, "checkpoint every N steps (0: only at the end)", 0, 1000000, 0},
        {"keep-last", 0, CLI_INT, &keep_last, "keep only the newest N checkpoints (0: all)", 0, 1000000, 0},
        {"resume", 'y', CLI_FLAG, &resume, "resume from the newest checkpoint in --out", 0, 0, 0},
        {"allow-config-change", 0, CLI_FLAG, &allow_change, "resume even if the training configuration differs from the checkpoint's", 0, 0, 0},
        {"stop-at", 0, CLI_INT, &stop_at, "write a checkpoint and exit after this step (resume testing)", 1, 1000000, 0},
        {NULL, 0, CLI_INT, NULL, NULL, 0, 0, 0},
    };
    cli_parse(argc, argv, opts, "train_cpu", "Trains a tiny model on the CPU with the float64 reference (no GPU needed).");
    if (!train) SLLM_FATAL("--train is required (a glob of .bin shards, e.g. from scripts/starter_data.sh)");
    char err[1024];
    ModelConfig c;
    config_defaults(&c);
    c.vocab_size = vocab; c.d_model = d_model; c.n_layer = layers; c.n_head = heads; c.n_kv_head = heads;
    c.head_dim = d_model / heads; c.d_ff = d_ff; c.max_seq = seq; c.gated = !nongated; c.l1_lambda = l1;
    if (config_validate(&c, err, sizeof err) != 0) SLLM_FATAL("invalid model: %s", err);
    if (lr_schedule_check(schedule, warmup, steps, lr, final_frac, err, sizeof err) != 0) SLLM_FATAL("%s", err);
    if (!out && (resume || ckpt_every || stop_at || keep_last)) SLLM_FATAL("--resume, --ckpt-every, --stop-at and --keep-last need --out");
    const float beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f;
    const TrainConfig tc = {schedule, steps, warmup, lr, final_frac, wd, beta1, beta2, eps, clip, batch, seq, batch * seq, 1,
                            l1, c.rope_theta, seed};
    int lock_fd = -1, start_step = 0;
    char resume_dir[4200] = "";
    if (out) {
        if (ckpt_out_lock(out, &lock_fd, err, sizeof err) != 0) SLLM_FATAL("%s", err);
        if (resume) {
            start_step = ckpt_find_latest(out, "train_state.bin", resume_dir, sizeof resume_dir);
            if (start_step < 0) { printf("resume: no checkpoint in %s, starting from scratch\n", out); start_step = 0; resume_dir[0] = 0; }
        } else if (ckpt_find_latest(out, CKPT_MODEL_FILE, resume_dir, sizeof resume_dir) >= 0) {
            SLLM_FATAL("%s already holds checkpoints (%s): pass --resume to continue that run, or choose a new --out", out, resume_dir);
        }
    }
    if (resume_dir[0]) {
        char layout[512];
        int rc = train_config_check(resume_dir, &tc, allow_change, err, sizeof err, layout, sizeof layout);
        if (rc < 0) SLLM_FATAL("%s", err);
        if (rc > 0) printf("resume: configuration changed (%s): %s\n", TRAIN_CONFIG_ALLOW_FLAG, err);
        if (layout[0]) printf("resume: batch layout changed (%s); same global batch, not bit-exact\n", layout);
        if (logger_truncate_metrics(out, start_step, err, sizeof err) < 0) SLLM_FATAL("%s", err);
    }
    Logger lg;
    if (logger_open(&lg, out, resume_dir[0] != 0, err, sizeof err) != 0) SLLM_FATAL("%s", err);
    config_print(&c, stdout);
    DataLoader *dl = loader_open(train, batch, seq, 0, 1, seed, 1, err, sizeof err);
    if (!dl) SLLM_FATAL("training data: %s", err);
    if (loader_check_vocab(dl, vocab, err, sizeof err) != 0) SLLM_FATAL("training data: %s", err);
    char sum[512];
    loader_summary(dl, sum, sizeof sum);
    logger_printf(&lg, "train: %s\n", sum);
    // every input opened before the first step: a typo must not cost the run
    DataLoader *vl = NULL;
    if (val) {
        vl = loader_open(val, batch, seq, 0, 1, seed, 0, err, sizeof err);
        if (!vl) SLLM_FATAL("validation data: %s", err);
        if (loader_check_vocab(vl, vocab, err, sizeof err) != 0) SLLM_FATAL("validation data: %s", err);
    }
    Tokenizer *tok = NULL;
    if (tokenizer) {
        tok = tokenizer_load(tokenizer, err, sizeof err);
        if (!tok) SLLM_FATAL("tokenizer: %s", err);
    }

    RefModel m;
    ref_model_init(&m, &c, seed);
    size_t n = m.lay.total;
    double *g = (double *)sllm_malloc(n * 8), *am = (double *)sllm_calloc(n, 8), *av = (double *)sllm_calloc(n, 8);
    int N = batch * seq, L = c.n_layer;
    int *in = (int *)sllm_malloc(N * 4), *tg = (int *)sllm_malloc(N * 4);
    double *nnz = (double *)sllm_malloc(L * 8), *fired = (double *)sllm_malloc(L * 8);
    if (resume_dir[0]) {
        CpuTrainState st;
        void *rb[4] = {&st, m.params, am, av};
        const size_t rs[4] = {sizeof st, n * 8, n * 8, n * 8};
        if (ckpt_read_file(resume_dir, "train_state.bin", rb, rs, 4, err, sizeof err) != 0) SLLM_FATAL("resume: %s", err);
        if (st.magic != CPU_STATE_MAGIC || st.version != 1 || st.total_params != n || st.step != start_step)
            SLLM_FATAL("resume: %s/train_state.bin is not a train_cpu state of this model (magic %08x, %llu params, step %lld)",
                       resume_dir, st.magic, (unsigned long long)st.total_params, (long long)st.step);
        if (loader_set_state(dl, &st.loader, err, sizeof err) != 0) SLLM_FATAL("resume: %s", err);
        logger_printf(&lg, "resumed from %s at step %d\n", resume_dir, start_step);
    }
    logger_printf(&lg, "%zu parameters, %d tokens/step, lambda %g\n", n, N, l1);
    double first_nnz = -1, last_nnz = 0;
    for (int step = start_step; step < steps; step++) {
        double t0 = sllm_time_s();
        loader_next(dl, in, tg);
        RefStats st;
        memset(&st, 0, sizeof st);
        st.layer_nnz = nnz; st.layer_fired = fired;
        double loss = ref_forward_backward(&m, in, tg, batch, seq, NULL, g, &st);
        double norm = ref_clip_grad_norm(g, n, clip);
        float cur = lr_schedule(schedule, step, warmup, steps, lr, final_frac);
        ref_adamw_step(m.params, g, am, av, &m.lay, cur, beta1, beta2, eps, wd, step + 1);
        double mn = 0;
        for (int l = 0; l < L; l++) mn += nnz[l];
        mn /= L;
        if (first_nnz < 0) first_nnz = mn;
        last_nnz = mn;
        logger_printf(&lg, "step %4d/%d | loss %.4f | ce %.4f | l1 %7.3f | lr %.2e | norm %6.3f | nnz/token %6.1f of %d | %.0f ms\n",
                      step + 1, steps, loss, st.ce, st.l1, cur, norm, mn, c.d_ff, (sllm_time_s() - t0) * 1e3);
        logger_metric(&lg, "s:%d loss:%.9g ce:%.9g l1:%.9g norm:%.9g nnz:%.6g\n", step + 1, loss, st.ce, st.l1, norm, mn);
        if (out && (step + 1 == stop_at || (ckpt_every > 0 && (step + 1) % ckpt_every == 0) || step + 1 == steps)) {
            if (save_state(out, step + 1, &c, &m, am, av, dl, &tc, err, sizeof err) != 0) SLLM_FATAL("checkpoint: %s", err);
            logger_printf(&lg, "checkpoint: wrote %s/ckpt_%08d\n", out, step + 1);
            int del = ckpt_retain(out, keep_last, err, sizeof err);
            if (del < 0) SLLM_FATAL("%s", err);
            if (del > 0) logger_printf(&lg, "checkpoint: deleted %d old checkpoint(s) (--keep-last %d)\n", del, keep_last);
        }
        if (step + 1 == stop_at) { logger_printf(&lg, "stopping at step %d (--stop-at)\n", stop_at); break; }
    }
    logger_printf(&lg, "mean non-zeros per token: %.1f -> %.1f (of %d)\n", first_nnz, last_nnz, c.d_ff);
    if (vl) {
        loader_next(vl, in, tg);
        RefStats st;
        memset(&st, 0, sizeof st);
        ref_forward_backward(&m, in, tg, batch, seq, NULL, NULL, &st);
        logger_printf(&lg, "val CE (one batch): %.4f\n", st.ce);
        loader_close(vl);
    }
    if (sample_tokens > 0) {
        int eot = tok ? tokenizer_eot_id(tok) : 0;
        if (eot < 0 || eot >= vocab) eot = 0;
        int len = sample_tokens + 1 < seq ? sample_tokens + 1 : seq;
        int *ids = (int *)sllm_malloc(len * 4), *dummy = (int *)sllm_calloc(len, 4);
        double *logits = (double *)sllm_malloc((size_t)len * vocab * 8);
        ids[0] = eot;
        for (int t = 1; t < len; t++) {  // greedy, full recompute over the prefix
            ref_forward_backward(&m, ids, dummy, 1, t, logits, NULL, NULL);
            const double *row = logits + (size_t)(t - 1) * vocab;
            int best = 0;
            for (int v = 1; v < vocab; v++) if (row[v] > row[best]) best = v;
            ids[t] = best;
        }
        logger_printf(&lg, "---- greedy sample ----\n");
        if (tok) {
            char *text = NULL;
            size_t tl;
            if (tokenizer_decode(tok, ids + 1, len - 1, &text, &tl) == 0) { logger_printf(&lg, "%s\n", text); free(text); }
            tokenizer_free(tok);
        } else {
            for (int t = 1; t < len; t++) logger_printf(&lg, "%d ", ids[t]);
            logger_printf(&lg, "\n");
        }
        logger_printf(&lg, "----\n");
        free(ids); free(dummy); free(logits);
    }
    free(g); free(am); free(av); free(in); free(tg); free(nnz); free(fired);
    ref_model_free(&m);
    loader_close(dl);
    logger_close(&lg);
    return 0;
}
