// core/checkpoint.h: checkpoint directories (Hugging Face Llama compatible) written atomically.
//
// A checkpoint is a directory:
//   model.safetensors   weights under Hugging Face Llama names (ParamLayout.hf_name, one tensor per
//                       layer slice), dtype F32 or BF16
//   config.json         Hugging Face LlamaConfig keys (hidden_act "relu", tie_word_embeddings true, ...)
//                       plus "sparsellm_gated" and "sparsellm_l1_lambda"
//   <extra files>       whatever the caller writes into the temp dir before commit (optimizer state
//                       per rank, training state, ...)
// Writing: ckpt_begin creates "<dir>.tmp-<pid>"; the caller writes files into it (ckpt_write_model,
// and its own files at ckpt_path(...)); ckpt_commit fsyncs every file and the temp dir, then puts it
// in place of <dir> with an atomic rename (renameat2 RENAME_EXCHANGE when <dir> exists, so a complete
// checkpoint exists under <dir> at every instant), fsyncs the parent and deletes the old one.
// ckpt_abort removes the temp dir. An existing checkpoint is never touched before commit.
// Loading validates everything (see ckpt_load). No function here exits the process: errors return -1
// with a message in err (size n).
#ifndef SLLM_CHECKPOINT_H
#define SLLM_CHECKPOINT_H

#include <stddef.h>

#include "config.h"
#include "safetensors.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CKPT_PATH_MAX 4096
#define CKPT_MODEL_FILE "model.safetensors"
#define CKPT_CONFIG_FILE "config.json"

typedef struct {
    char dir[CKPT_PATH_MAX];  // final checkpoint directory
    char tmp[CKPT_PATH_MAX + 32];  // temp directory being written ("<dir>.tmp-<pid>")
    int active;               // 1 between begin and commit/abort
} CkptWriter;

// Create the temp dir "<dir>.tmp-<pid>" (a stale one from an earlier crash with the same pid is removed).
int ckpt_begin(CkptWriter *w, const char *dir, char *err, size_t n);
// Path of file `name` inside the temp dir (for the caller's extra files). Returns -1 if it does not fit.
int ckpt_path(const CkptWriter *w, const char *name, char *out, size_t out_size);
// Write model.safetensors (params: float32 flat buffer in config.h layout; dtype ST_F32 or ST_BF16)
// and config.json into the temp dir.
int ckpt_write_model(CkptWriter *w, const ModelConfig *c, const float *params, StDtype dtype, char *err,
                     size_t n);
// fsync all files + temp dir, atomically replace <dir>, fsync parent, remove the old checkpoint.
int ckpt_commit(CkptWriter *w, char *err, size_t n);
// Remove the temp dir and everything in it.
void ckpt_abort(CkptWriter *w);
// Convenience: begin + write_model + commit (abort on failure).
int ckpt_save_model(const char *dir, const ModelConfig *c, const float *params, StDtype dtype, char *err,
                    size_t n);

// Write / read config.json (the file path itself, not the directory).
int ckpt_write_config_json(const char *path, const ModelConfig *c, StDtype dtype, char *err, size_t n);
// Reads the LlamaConfig keys into *c (defaults from config_defaults for optional keys: rope_theta,
// rms_norm_eps, head_dim (= hidden/heads), num_key_value_heads (= heads), sparsellm_gated (1),
// sparsellm_l1_lambda, max_position_embeddings); rejects hidden_act other than "relu", a top-level rope_theta
// that disagrees with rope_parameters.rope_theta, non-finite or non-positive rope_theta / rms_norm_eps,
// tie_word_embeddings false, attention_bias/mlp_bias true, and configs that fail config_validate.
int ckpt_read_config_json(const char *path, ModelConfig *c, char *err, size_t n);

// Load <dir>/config.json and <dir>/model.safetensors into *c and a malloc'ed float32 flat buffer
// *params_out [layout.total] (caller frees). Validates: truncated or malformed file, missing or extra
// tensor, unsupported dtype, wrong shape, config inconsistent with the weights, a non-finite weight (NaN or
// infinity: the error names the tensor and the element). If dtype_out != NULL
// it receives the dtype of the weights (all tensors must share one of F32, BF16).
int ckpt_load(const char *dir, ModelConfig *c, float **params_out, StDtype *dtype_out, char *err, size_t n);

// One extra file of a checkpoint: nbuf buffers written one after the other.
typedef struct {
    const char *name;
    const void *const *bufs;
    const size_t *sizes;
    int nbuf;
} CkptFile;
// A whole checkpoint: begin, model + config.json, the extra files, commit. On any failure the temp dir is
// removed (ckpt_abort) and -1 returned with a message; <dir> is then untouched.
int ckpt_save(const char *dir, const ModelConfig *c, const float *params, StDtype dtype, const CkptFile *files,
              int nfiles, char *err, size_t n);

// Write file `name` into the temp dir: the nbuf buffers one after the other, checked (short write, close).
// Returns -1 with a message on failure; the caller then calls ckpt_abort (which removes the temp dir).
int ckpt_write_file(CkptWriter *w, const char *name, const void *const *bufs, const size_t *sizes, int nbuf,
                    char *err, size_t n);
// Read <dir>/<name> into the nbuf buffers; the file must hold exactly sum(sizes) bytes.
int ckpt_read_file(const char *dir, const char *name, void *const *bufs, const size_t *sizes, int nbuf, char *err,
                   size_t n);

// The output directory of a run: created if missing, then locked with flock on "<out>/.lock" (the holder's pid
// written into it), so a second run into the same --out fails with a clear message instead of interleaving
// checkpoints and logs. *fd_out stays open for the life of the process (the lock goes with it).
int ckpt_out_lock(const char *out, int *fd_out, char *err, size_t n);
// Retention: keeps the newest keep_last checkpoints "<out>/ckpt_NNNNNNNN" (keep_last <= 0: keeps all) and
// deletes the older ones. Returns the number deleted, or -1 with a message.
int ckpt_retain(const char *out, int keep_last, char *err, size_t n);

// Newest complete checkpoint "<out>/ckpt_NNNNNNNN" (8-digit step) that holds the file `marker` (e.g.
// "train_state.bin" to resume training, CKPT_MODEL_FILE to load weights): its path in dir, and its step; -1 if none
// (or out cannot be read). Temp dirs of unfinished writes ("ckpt_NNNNNNNN.tmp-<pid>") never match.
int ckpt_find_latest(const char *out, const char *marker, char *dir, size_t n);

#ifdef __cplusplus
}
#endif
#endif  // SLLM_CHECKPOINT_H
