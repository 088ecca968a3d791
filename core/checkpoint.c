// core/checkpoint.c: see checkpoint.h.
#include "checkpoint.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <unistd.h>

#include "common.h"
#include "logger.h"

// ---- file system helpers ------------------------------------------------------------------------

// Remove a file or a directory tree (like rm -rf). Returns 0 or -1 with errno set.
static int remove_tree(const char *path) {
    struct stat sb;
    if (lstat(path, &sb) != 0) return errno == ENOENT ? 0 : -1;
    if (!S_ISDIR(sb.st_mode)) return unlink(path);
    DIR *d = opendir(path);
    if (!d) return -1;
    struct dirent *e;
    char sub[CKPT_PATH_MAX];
    int rc = 0;
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        if (snprintf(sub, sizeof sub, "%s/%s", path, e->d_name) >= (int)sizeof sub) { rc = -1; errno = ENAMETOOLONG; break; }
        if (remove_tree(sub) != 0) { rc = -1; break; }
    }
    closedir(d);
    return rc == 0 ? rmdir(path) : rc;
}

static int fsync_path(const char *path, int is_dir) {
    int fd = open(path, is_dir ? (O_RDONLY | O_DIRECTORY) : O_RDONLY);
    if (fd < 0) return -1;
    int rc = fsync(fd);
    int saved = errno;
    close(fd);
    errno = saved;
    return rc;
}

// fsync every file and directory under path (and path itself, last).
static int fsync_tree(const char *path, char *err, size_t n) {
    DIR *d = opendir(path);
    if (!d) { snprintf(err, n, "checkpoint: cannot open directory %s: %s", path, strerror(errno)); return -1; }
    struct dirent *e;
    char sub[CKPT_PATH_MAX];
    while ((e = readdir(d))) {
        if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..")) continue;
        snprintf(sub, sizeof sub, "%s/%s", path, e->d_name);
        struct stat sb;
        if (lstat(sub, &sb) != 0) { snprintf(err, n, "checkpoint: cannot stat %s: %s", sub, strerror(errno)); closedir(d); return -1; }
        if (S_ISDIR(sb.st_mode)) { if (fsync_tree(sub, err, n) != 0) { closedir(d); return -1; } }
        else if (S_ISREG(sb.st_mode) && fsync_path(sub, 0) != 0) {
            snprintf(err, n, "checkpoint: fsync of %s failed: %s", sub, strerror(errno));
            closedir(d);
            return -1;
        }
    }
    closedir(d);
    if (fsync_path(path, 1) != 0) { snprintf(err, n, "checkpoint: fsync of directory %s failed: %s", path, strerror(errno)); return -1; }
    return 0;
}

static void parent_of(const char *path, char *out, size_t sz) {
    snprintf(out, sz, "%s", path);
    size_t len = strlen(out);
    while (len > 1 && out[len - 1] == '/') out[--len] = 0;  // trailing slashes
    char *slash = strrchr(out, '/');
    if (!slash) snprintf(out, sz, ".");
    else if (slash == out) out[1] = 0;
    else *slash = 0;
}

// ---- writer -------------------------------------------------------------------------------------

int ckpt_begin(CkptWriter *w, const char *dir, char *err, size_t n) {
    memset(w, 0, sizeof(*w));
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    if (len == 0 || len + 32 >= CKPT_PATH_MAX) { snprintf(err, n, "checkpoint: bad directory name '%s'", dir); return -1; }
    memcpy(w->dir, dir, len);
    w->dir[len] = 0;
    snprintf(w->tmp, sizeof w->tmp, "%s.tmp-%ld", w->dir, (long)getpid());
    if (remove_tree(w->tmp) != 0) {
        snprintf(err, n, "checkpoint: cannot remove stale temp dir %s: %s", w->tmp, strerror(errno));
        return -1;
    }
    if (mkdir(w->tmp, 0755) != 0) {
        snprintf(err, n, "checkpoint: cannot create temp dir %s: %s", w->tmp, strerror(errno));
        return -1;
    }
    w->active = 1;
    return 0;
}

int ckpt_path(const CkptWriter *w, const char *name, char *out, size_t out_size) {
    return snprintf(out, out_size, "%s/%s", w->tmp, name) < (int)out_size ? 0 : -1;
}

// Shortest decimal that reads back as the same float, always with a '.' or exponent (a JSON float).
static cJSON *json_float(float v) {
    char buf[48];
    for (int prec = 6; prec <= 9; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, (double)v);
        if (strtof(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0");
    return cJSON_CreateRaw(buf);
}

// Hugging Face style layout of a compact JSON object: one top-level key per line, 2-space indent,
// ": " after keys and ", " inside nested values.
static char *pretty_json(const char *in) {
    size_t len = strlen(in);
    char *out = malloc(len * 4 + 8);
    if (!out) return NULL;
    size_t k = 0;
    int depth = 0, in_str = 0;
    for (size_t i = 0; i < len; i++) {
        char ch = in[i];
        if (in_str) {
            out[k++] = ch;
            if (ch == '\\' && i + 1 < len) out[k++] = in[++i];
            else if (ch == '"') in_str = 0;
            continue;
        }
        if (ch == '"') { in_str = 1; out[k++] = ch; }
        else if (ch == '{' || ch == '[') { out[k++] = ch; if (depth++ == 0) { memcpy(out + k, "\n  ", 3); k += 3; } }
        else if (ch == '}' || ch == ']') { if (--depth == 0) out[k++] = '\n'; out[k++] = ch; }
        else if (ch == ',') { if (depth == 1) { memcpy(out + k, ",\n  ", 4); k += 4; } else { memcpy(out + k, ", ", 2); k += 2; } }
        else if (ch == ':') { memcpy(out + k, ": ", 2); k += 2; }
        else out[k++] = ch;
    }
    out[k] = 0;
    return out;
}

int ckpt_write_config_json(const char *path, const ModelConfig *c, StDtype dtype, char *err, size_t n) {
    cJSON *j = cJSON_CreateObject();
    const char *arch[1] = {"LlamaForCausalLM"};
    cJSON_AddItemToObject(j, "architectures", cJSON_CreateStringArray(arch, 1));
    cJSON_AddStringToObject(j, "model_type", "llama");
    cJSON_AddStringToObject(j, "hidden_act", "relu");
    cJSON_AddNumberToObject(j, "hidden_size", c->d_model);
    cJSON_AddNumberToObject(j, "intermediate_size", c->d_ff);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->n_layer);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->n_head);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->n_kv_head);
    cJSON_AddNumberToObject(j, "head_dim", c->head_dim);
    cJSON_AddNumberToObject(j, "vocab_size", c->vocab_size);
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->max_seq);
    cJSON_AddItemToObject(j, "rope_theta", json_float(c->rope_theta));  // transformers 4.x
    cJSON *rp = cJSON_AddObjectToObject(j, "rope_parameters");            // transformers 5.x
    cJSON_AddStringToObject(rp, "rope_type", "default");
    cJSON_AddItemToObject(rp, "rope_theta", json_float(c->rope_theta));
    cJSON_AddItemToObject(j, "rms_norm_eps", json_float(c->norm_eps));
    cJSON_AddBoolToObject(j, "tie_word_embeddings", 1);
    cJSON_AddBoolToObject(j, "attention_bias", 0);
    cJSON_AddBoolToObject(j, "mlp_bias", 0);
    cJSON_AddItemToObject(j, "attention_dropout", json_float(0.0f));
    cJSON_AddItemToObject(j, "initializer_range", json_float(0.02f));
    const char *dt = dtype == ST_BF16 ? "bfloat16" : dtype == ST_F16 ? "float16" : "float32";
    cJSON_AddStringToObject(j, "torch_dtype", dt);  // transformers 4.x name
    cJSON_AddStringToObject(j, "dtype", dt);        // transformers 5.x name
    cJSON_AddBoolToObject(j, "use_cache", 1);
    cJSON_AddBoolToObject(j, "sparsellm_gated", c->gated);
    cJSON_AddItemToObject(j, "sparsellm_l1_lambda", json_float(c->l1_lambda));
    char *compact = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    char *txt = compact ? pretty_json(compact) : NULL;
    free(compact);
    if (!txt) { snprintf(err, n, "%s: out of memory printing config.json", path); return -1; }
    FILE *fp = fopen(path, "wb");
    if (!fp) { snprintf(err, n, "%s: cannot create: %s", path, strerror(errno)); free(txt); return -1; }
    size_t len = strlen(txt);
    int ok = fwrite(txt, 1, len, fp) == len && fputc('\n', fp) != EOF && fflush(fp) == 0 && fsync(fileno(fp)) == 0;
    ok = (fclose(fp) == 0) && ok;
    free(txt);
    if (!ok) { snprintf(err, n, "%s: write failed: %s", path, strerror(errno)); return -1; }
    return 0;
}

// One StWriteTensor per Hugging Face tensor (per-layer tensors split into L slices), in HF order:
// embedding, layer 0 (all its tensors), layer 1, ..., final norm. Returns the count.
static int hf_tensor_list(const ModelConfig *c, const ParamLayout *lay, StWriteTensor *out, char (*names)[128],
                          const float *params, StDtype dtype) {
    int k = 0;
    for (int pass = 0; pass < 3; pass++) {            // 0: non-layer before layers, 1: layers, 2: after
        for (int l = 0; l < (pass == 1 ? c->n_layer : 1); l++) {
            for (int p = 0; p < NUM_PARAM_KINDS; p++) {
                const ParamTensor *t = &lay->t[p];
                if (t->numel == 0) continue;
                if (pass == 1 ? !t->per_layer : t->per_layer) continue;
                if (pass == 0 && p != PARAM_EMBED) continue;
                if (pass == 2 && p == PARAM_EMBED) continue;
                StWriteTensor *w = &out[k];
                if (t->per_layer) snprintf(names[k], 128, t->hf_name, l);
                else snprintf(names[k], 128, "%s", t->hf_name);
                w->name = names[k];
                w->dtype = dtype;
                w->src_dtype = ST_F32;
                if (t->rows == 1) { w->ndim = 1; w->shape[0] = (int64_t)t->cols; }
                else { w->ndim = 2; w->shape[0] = (int64_t)t->rows; w->shape[1] = (int64_t)t->cols; }
                w->data = params ? params + t->offset + (t->per_layer ? (size_t)l * t->rows * t->cols : 0) : NULL;
                k++;
            }
        }
    }
    return k;
}

static int hf_tensor_count(const ModelConfig *c, const ParamLayout *lay) {
    int k = 0;
    for (int p = 0; p < NUM_PARAM_KINDS; p++)
        if (lay->t[p].numel) k += lay->t[p].per_layer ? c->n_layer : 1;
    return k;
}

int ckpt_write_model(CkptWriter *w, const ModelConfig *c, const float *params, StDtype dtype, char *err, size_t n) {
    if (!w->active) { snprintf(err, n, "checkpoint: ckpt_write_model called without ckpt_begin"); return -1; }
    if (dtype != ST_F32 && dtype != ST_BF16) { snprintf(err, n, "checkpoint: model dtype must be F32 or BF16 (got %s)", st_dtype_name(dtype)); return -1; }
    char cerr[256];
    if (config_validate(c, cerr, sizeof cerr) != 0) { snprintf(err, n, "checkpoint: invalid config: %s", cerr); return -1; }
    ParamLayout lay;
    config_param_layout(c, &lay);
    int count = hf_tensor_count(c, &lay);
    StWriteTensor *ts = calloc(count, sizeof(StWriteTensor));
    char (*names)[128] = calloc(count, 128);
    if (!ts || !names) { free(ts); free(names); snprintf(err, n, "checkpoint: out of memory"); return -1; }
    hf_tensor_list(c, &lay, ts, names, params, dtype);
    char path[CKPT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", w->tmp, CKPT_MODEL_FILE);
    const char *mk[1] = {"format"}, *mv[1] = {"pt"};  // transformers requires format "pt"
    int rc = st_write(path, ts, count, mk, mv, 1, err, n);
    free(ts);
    free(names);
    if (rc != 0) return -1;
    snprintf(path, sizeof path, "%s/%s", w->tmp, CKPT_CONFIG_FILE);
    return ckpt_write_config_json(path, c, dtype, err, n);
}

int ckpt_commit(CkptWriter *w, char *err, size_t n) {
    if (!w->active) { snprintf(err, n, "checkpoint: ckpt_commit called without ckpt_begin"); return -1; }
    if (fsync_tree(w->tmp, err, n) != 0) return -1;
    char parent[CKPT_PATH_MAX];
    parent_of(w->dir, parent, sizeof parent);
    struct stat sb;
    if (lstat(w->dir, &sb) == 0) {
        if (!S_ISDIR(sb.st_mode)) {
            snprintf(err, n, "checkpoint: %s exists and is not a directory; not replacing it", w->dir);
            return -1;
        }
        // Atomic swap: <dir> always holds a complete checkpoint; the old one ends up at the temp path.
        if (renameat2(AT_FDCWD, w->tmp, AT_FDCWD, w->dir, RENAME_EXCHANGE) != 0) {
            if (errno != EINVAL && errno != ENOSYS && errno != EOPNOTSUPP) {
                snprintf(err, n, "checkpoint: cannot swap %s into %s: %s", w->tmp, w->dir, strerror(errno));
                return -1;
            }
            // File system without RENAME_EXCHANGE: move the old one aside first (brief window).
            char old[CKPT_PATH_MAX + 32];
            snprintf(old, sizeof old, "%s.old-%ld", w->dir, (long)getpid());
            remove_tree(old);
            if (rename(w->dir, old) != 0) {
                snprintf(err, n, "checkpoint: cannot move old checkpoint %s aside: %s", w->dir, strerror(errno));
                return -1;
            }
            if (rename(w->tmp, w->dir) != 0) {
                int e = errno;
                rename(old, w->dir);  // put the old one back
                snprintf(err, n, "checkpoint: cannot rename %s to %s: %s", w->tmp, w->dir, strerror(e));
                return -1;
            }
            fsync_path(parent, 1);
            remove_tree(old);
        } else {
            fsync_path(parent, 1);
            remove_tree(w->tmp);  // the old checkpoint
        }
    } else {
        if (rename(w->tmp, w->dir) != 0) {
            snprintf(err, n, "checkpoint: cannot rename %s to %s: %s", w->tmp, w->dir, strerror(errno));
            return -1;
        }
    }
    if (fsync_path(parent, 1) != 0) {
        snprintf(err, n, "checkpoint: fsync of parent directory %s failed: %s", parent, strerror(errno));
        return -1;
    }
    w->active = 0;
    return 0;
}

void ckpt_abort(CkptWriter *w) {
    if (w->active) remove_tree(w->tmp);
    w->active = 0;
}

int ckpt_save_model(const char *dir, const ModelConfig *c, const float *params, StDtype dtype, char *err, size_t n) {
    CkptWriter w;
    if (ckpt_begin(&w, dir, err, n) != 0) return -1;
    if (ckpt_write_model(&w, c, params, dtype, err, n) != 0 || ckpt_commit(&w, err, n) != 0) {
        ckpt_abort(&w);
        return -1;
    }
    return 0;
}

// ---- config.json reader -------------------------------------------------------------------------

#define CFAIL(...) do { snprintf(err, n, __VA_ARGS__); cJSON_Delete(j); return -1; } while (0)

// Positive integer key; required or default.
static int get_int(const cJSON *j, const char *key, int required, int def, int *out, const char *path, char *err, size_t n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) {
        if (required) { snprintf(err, n, "%s: missing required key \"%s\"", path, key); return -1; }
        *out = def;
        return 0;
    }
    if (!cJSON_IsNumber(v) || v->valuedouble != floor(v->valuedouble) || v->valuedouble < 1 || v->valuedouble > 1e9) {
        snprintf(err, n, "%s: key \"%s\" must be a positive integer", path, key);
        return -1;
    }
    *out = (int)v->valuedouble;
    return 0;
}

static int get_float(const cJSON *j, const char *key, float def, float *out, const char *path, char *err, size_t n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) { *out = def; return 0; }
    if (!cJSON_IsNumber(v) || !isfinite((float)v->valuedouble)) {
        snprintf(err, n, "%s: key \"%s\" must be a finite number", path, key);
        return -1;
    }
    *out = (float)v->valuedouble;
    return 0;
}

// Boolean key (JSON true/false; 0/1 accepted).
static int get_bool(const cJSON *j, const char *key, int def, int *out, const char *path, char *err, size_t n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    if (!v || cJSON_IsNull(v)) { *out = def; return 0; }
    if (cJSON_IsBool(v)) { *out = cJSON_IsTrue(v); return 0; }
    if (cJSON_IsNumber(v) && (v->valuedouble == 0 || v->valuedouble == 1)) { *out = (int)v->valuedouble; return 0; }
    snprintf(err, n, "%s: key \"%s\" must be true or false", path, key);
    return -1;
}

int ckpt_read_config_json(const char *path, ModelConfig *c, char *err, size_t n) {
    size_t size;
    const char *rerr = NULL;
    char *txt = sllm_read_file(path, &size, &rerr);
    if (!txt) { snprintf(err, n, "%s: %s: %s", path, rerr, strerror(errno)); return -1; }
    cJSON *j = cJSON_ParseWithLength(txt, size);
    free(txt);
    if (!j) CFAIL("%s: malformed JSON", path);
    if (!cJSON_IsObject(j)) CFAIL("%s: malformed config: not a JSON object", path);
    config_defaults(c);
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(j, "model_type");
    if (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "llama")))
        CFAIL("%s: model_type must be \"llama\" (got %s)", path, cJSON_IsString(mt) ? mt->valuestring : "a non-string");
    const cJSON *act = cJSON_GetObjectItemCaseSensitive(j, "hidden_act");
    if (!cJSON_IsString(act) || strcmp(act->valuestring, "relu"))
        CFAIL("%s: hidden_act must be \"relu\" (got %s): only ReLU-gated models are supported", path,
              cJSON_IsString(act) ? act->valuestring : "none; Hugging Face's default is silu");
    if (get_int(j, "hidden_size", 1, 0, &c->d_model, path, err, n) ||
        get_int(j, "intermediate_size", 1, 0, &c->d_ff, path, err, n) ||
        get_int(j, "num_hidden_layers", 1, 0, &c->n_layer, path, err, n) ||
        get_int(j, "num_attention_heads", 1, 0, &c->n_head, path, err, n) ||
        get_int(j, "vocab_size", 1, 0, &c->vocab_size, path, err, n) ||
        get_int(j, "num_key_value_heads", 0, c->n_head, &c->n_kv_head, path, err, n) ||
        get_int(j, "head_dim", 0, c->d_model / c->n_head, &c->head_dim, path, err, n) ||
        get_int(j, "max_position_embeddings", 0, 2048, &c->max_seq, path, err, n)) {
        cJSON_Delete(j);
        return -1;
    }
    // Hugging Face defaults for absent keys: rope_theta 10000, rms_norm_eps 1e-6.
    if (get_float(j, "rope_theta", 10000.0f, &c->rope_theta, path, err, n) ||
        get_float(j, "rms_norm_eps", 1e-6f, &c->norm_eps, path, err, n) ||
        get_float(j, "sparsellm_l1_lambda", c->l1_lambda, &c->l1_lambda, path, err, n)) {
        cJSON_Delete(j);
        return -1;
    }
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    if (rp && !cJSON_IsNull(rp)) {
        if (!cJSON_IsObject(rp)) CFAIL("%s: rope_parameters must be an object", path);
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(rp, "rope_type");
        if (ty && (!cJSON_IsString(ty) || strcmp(ty->valuestring, "default")))
            CFAIL("%s: rope_parameters.rope_type must be \"default\" (no RoPE scaling is supported)", path);
        float rt;
        if (get_float(rp, "rope_theta", c->rope_theta, &rt, path, err, n)) { cJSON_Delete(j); return -1; }
        if (cJSON_GetObjectItemCaseSensitive(j, "rope_theta") && rt != c->rope_theta)
            CFAIL("%s: rope_theta %.9g disagrees with rope_parameters.rope_theta %.9g", path, c->rope_theta, rt);
        c->rope_theta = rt;
    }
    if (!(c->rope_theta > 0) || !(c->norm_eps > 0) || !(c->l1_lambda >= 0))
        CFAIL("%s: rope_theta (%g) and rms_norm_eps (%g) must be positive, sparsellm_l1_lambda (%g) non-negative", path,
              c->rope_theta, c->norm_eps, c->l1_lambda);
    const cJSON *rs = cJSON_GetObjectItemCaseSensitive(j, "rope_scaling");
    if (rs && !cJSON_IsNull(rs)) CFAIL("%s: rope_scaling is set; RoPE scaling is not supported", path);
    int tied, abias, mbias;
    if (get_bool(j, "tie_word_embeddings", 0, &tied, path, err, n) || get_bool(j, "attention_bias", 0, &abias, path, err, n) ||
        get_bool(j, "mlp_bias", 0, &mbias, path, err, n) || get_bool(j, "sparsellm_gated", 1, &c->gated, path, err, n)) {
        cJSON_Delete(j);
        return -1;
    }
    if (!tied) CFAIL("%s: tie_word_embeddings must be true (only tied input/output embeddings are supported)", path);
    if (abias || mbias) CFAIL("%s: attention_bias and mlp_bias must be false (the model has no biases)", path);
    cJSON_Delete(j);
    char verr[256];
    if (config_validate(c, verr, sizeof verr) != 0) { snprintf(err, n, "%s: inconsistent config: %s", path, verr); return -1; }
    return 0;
}

// ---- loader -------------------------------------------------------------------------------------

static void shape_str(char *buf, size_t sz, int ndim, const int64_t *shape) {
    size_t k = (size_t)snprintf(buf, sz, "[");
    for (int d = 0; d < ndim && k < sz; d++) k += (size_t)snprintf(buf + k, sz - k, d ? ", %lld" : "%lld", (long long)shape[d]);
    if (k < sz) snprintf(buf + k, sz - k, "]");
}

int ckpt_load(const char *dir, ModelConfig *c, float **params_out, StDtype *dtype_out, char *err, size_t n) {
    *params_out = NULL;
    char path[CKPT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_CONFIG_FILE);
    if (ckpt_read_config_json(path, c, err, n) != 0) return -1;
    snprintf(path, sizeof path, "%s/%s", dir, CKPT_MODEL_FILE);
    struct stat sb;
    if (stat(path, &sb) != 0) {
        char idx[CKPT_PATH_MAX + 64];
        snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
        if (stat(idx, &sb) == 0) snprintf(err, n, "%s: sharded checkpoints (model.safetensors.index.json) are not supported", dir);
        else snprintf(err, n, "%s: missing %s", dir, CKPT_MODEL_FILE);
        return -1;
    }
    StFile f;
    if (st_open(&f, path, err, n) != 0) return -1;
    ParamLayout lay;
    config_param_layout(c, &lay);
    const int count = hf_tensor_count(c, &lay);
    StWriteTensor *want = calloc(count, sizeof(StWriteTensor));
    char (*names)[128] = calloc(count, 128);
    char *used = calloc(f.n_tensors ? f.n_tensors : 1, 1);
    float *params = malloc((lay.total ? lay.total : 1) * sizeof(float));
    int rc = -1;
    if (!want || !names || !used || !params) { snprintf(err, n, "%s: out of memory (%zu parameters)", path, lay.total); goto done; }
    hf_tensor_list(c, &lay, want, names, params, ST_F32);
    int dtype = -1;
    const StTensor *first = NULL;
    for (int i = 0; i < count; i++) {
        const StTensor *t = st_find(&f, want[i].name);
        if (!t) {
            snprintf(err, n, "%s: missing tensor '%s' (expected by config.json: %d layers, %s FFN)", path, want[i].name,
                     c->n_layer, c->gated ? "gated" : "non-gated");
            goto done;
        }
        used[t - f.tensors] = 1;
        if (t->dtype != ST_F32 && t->dtype != ST_BF16) {
            snprintf(err, n, "%s: tensor '%s' has dtype %s; expected F32 or BF16", path, t->name, st_dtype_name(t->dtype));
            goto done;
        }
        if (dtype < 0) { dtype = t->dtype; first = t; }
        else if ((int)t->dtype != dtype) {
            snprintf(err, n, "%s: tensor '%s' has dtype %s but '%s' has %s; all weights must share one dtype", path,
                     t->name, st_dtype_name(t->dtype), first->name, st_dtype_name(first->dtype));
            goto done;
        }
        int same = t->ndim == want[i].ndim;
        for (int d = 0; same && d < t->ndim; d++) same = t->shape[d] == want[i].shape[d];
        if (!same) {
            char got[96], exp[96];
            shape_str(got, sizeof got, t->ndim, t->shape);
            shape_str(exp, sizeof exp, want[i].ndim, want[i].shape);
            snprintf(err, n, "%s: tensor '%s' has shape %s but config.json implies %s (hidden_size %d, "
                     "intermediate_size %d, heads %d, kv heads %d, head_dim %d, vocab %d): config does not match the weights",
                     path, t->name, got, exp, c->d_model, c->d_ff, c->n_head, c->n_kv_head, c->head_dim, c->vocab_size);
            goto done;
        }
        if (st_read_f32(&f, t, (float *)want[i].data, err, n) != 0) goto done;
        const float *w = (const float *)want[i].data;
        for (size_t k = 0; k < (size_t)t->numel; k++)
            if (!isfinite(w[k])) {
                snprintf(err, n, "%s: tensor '%s' holds a non-finite weight (%g at element %lld of %lld): a diverged or "
                         "corrupted checkpoint", path, t->name, w[k], (long long)k, (long long)t->numel);
                goto done;
            }
    }
    for (int i = 0; i < f.n_tensors; i++) {
        if (used[i]) continue;
        const StTensor *t = &f.tensors[i];
        if (!strcmp(t->name, "lm_head.weight")) {  // tolerated only as an exact copy of the tied embedding
            const StTensor *e = st_find(&f, "model.embed_tokens.weight");
            if (e && e->dtype == t->dtype && e->end - e->begin == t->end - t->begin &&
                !memcmp(st_tensor_data(&f, e), st_tensor_data(&f, t), t->end - t->begin))
                continue;
            snprintf(err, n, "%s: tensor 'lm_head.weight' differs from the embedding: untied LM heads are not supported", path);
            goto done;
        }
        snprintf(err, n, "%s: unexpected tensor '%s' (not part of the model described by config.json: %d layers, %s FFN)",
                 path, t->name, c->n_layer, c->gated ? "gated" : "non-gated");
        goto done;
    }
    if (dtype_out) *dtype_out = (StDtype)dtype;
    *params_out = params;
    params = NULL;
    rc = 0;
done:
    free(params);
    free(want);
    free(names);
    free(used);
    st_close(&f);
    return rc;
}

int ckpt_find_latest(const char *out, const char *marker, char *dir, size_t n) {
    DIR *d = opendir(out);
    if (!d) return -1;
    int best = -1;
    struct dirent *e;
    while ((e = readdir(d))) {
        int step;
        char tail;
        if (strlen(e->d_name) != 13 || sscanf(e->d_name, "ckpt_%8d%c", &step, &tail) != 1) continue;
        char p[CKPT_PATH_MAX];
        if (snprintf(p, sizeof p, "%s/%s/%s", out, e->d_name, marker) >= (int)sizeof p) continue;
        struct stat st;
        if (stat(p, &st) == 0 && step > best) best = step;
    }
    closedir(d);
    if (best >= 0) snprintf(dir, n, "%s/ckpt_%08d", out, best);
    return best;
}

// ---- extra files, the output directory's lock, retention ---------------------------------------

int ckpt_write_file(CkptWriter *w, const char *name, const void *const *bufs, const size_t *sizes, int nbuf,
                    char *err, size_t n) {
    char path[CKPT_PATH_MAX + 64];
    if (!w->active) { snprintf(err, n, "checkpoint: ckpt_write_file(%s) without ckpt_begin", name); return -1; }
    if (ckpt_path(w, name, path, sizeof path) != 0) { snprintf(err, n, "checkpoint: path of %s too long", name); return -1; }
    FILE *f = fopen(path, "wb");
    if (!f) { snprintf(err, n, "checkpoint: cannot create %s: %s", path, strerror(errno)); return -1; }
    for (int i = 0; i < nbuf; i++)
        if (sizes[i] && fwrite(bufs[i], 1, sizes[i], f) != sizes[i]) {
            snprintf(err, n, "checkpoint: short write to %s: %s", path, strerror(errno));
            fclose(f);
            return -1;
        }
    if (fclose(f) != 0) { snprintf(err, n, "checkpoint: cannot close %s: %s", path, strerror(errno)); return -1; }
    return 0;
}

int ckpt_read_file(const char *dir, const char *name, void *const *bufs, const size_t *sizes, int nbuf, char *err,
                   size_t n) {
    char path[CKPT_PATH_MAX + 64];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "rb");
    if (!f) { snprintf(err, n, "cannot open %s: %s", path, strerror(errno)); return -1; }
    size_t want = 0;
    for (int i = 0; i < nbuf; i++) want += sizes[i];
    struct stat sb;
    if (fstat(fileno(f), &sb) != 0 || (size_t)sb.st_size != want) {
        snprintf(err, n, "%s: %lld bytes, expected %zu (truncated or from another run shape)", path,
                 (long long)sb.st_size, want);
        fclose(f);
        return -1;
    }
    for (int i = 0; i < nbuf; i++)
        if (sizes[i] && fread(bufs[i], 1, sizes[i], f) != sizes[i]) {
            snprintf(err, n, "%s: read failed", path);
            fclose(f);
            return -1;
        }
    fclose(f);
    return 0;
}

int ckpt_out_lock(const char *out, int *fd_out, char *err, size_t n) {
    *fd_out = -1;
    if (make_dirs(out, err, n) != 0) return -1;
    char path[CKPT_PATH_MAX + 16];
    snprintf(path, sizeof path, "%s/.lock", out);
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0) { snprintf(err, n, "cannot open the lock file %s: %s", path, strerror(errno)); return -1; }
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        int e = errno;
        char holder[32] = "";
        ssize_t k = pread(fd, holder, sizeof holder - 1, 0);
        holder[k > 0 ? k : 0] = 0;
        holder[strcspn(holder, "\n")] = 0;
        if (e == EWOULDBLOCK)
            snprintf(err, n, "output directory %s is in use by another run (%s is locked; pid %s took it); wait for it "
                     "or choose another --out", out, path, *holder ? holder : "?");
        else snprintf(err, n, "cannot lock %s: %s", path, strerror(e));
        close(fd);
        return -1;
    }
    char pid[32];
    int len = snprintf(pid, sizeof pid, "%ld\n", (long)getpid());
    if (ftruncate(fd, 0) != 0 || pwrite(fd, pid, (size_t)len, 0) != len) {
        snprintf(err, n, "cannot write the lock file %s: %s", path, strerror(errno));
        close(fd);
        return -1;
    }
    *fd_out = fd;
    return 0;
}

static int cmp_int(const void *a, const void *b) { int x = *(const int *)a, y = *(const int *)b; return (x > y) - (x < y); }

int ckpt_retain(const char *out, int keep_last, char *err, size_t n) {
    if (keep_last <= 0) return 0;
    DIR *d = opendir(out);
    if (!d) { snprintf(err, n, "retention: cannot read %s: %s", out, strerror(errno)); return -1; }
    int *steps = NULL, count = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        int step;
        char tail;
        if (strlen(e->d_name) != 13 || sscanf(e->d_name, "ckpt_%8d%c", &step, &tail) != 1) continue;
        if (count == cap) {
            cap = cap ? cap * 2 : 16;
            int *g = realloc(steps, (size_t)cap * sizeof(int));
            if (!g) { free(steps); closedir(d); snprintf(err, n, "retention: out of memory"); return -1; }
            steps = g;
        }
        steps[count++] = step;
    }
    closedir(d);
    qsort(steps, (size_t)count, sizeof(int), cmp_int);
    int removed = 0;
    for (int i = 0; i + keep_last < count; i++) {
        char p[CKPT_PATH_MAX];
        snprintf(p, sizeof p, "%s/ckpt_%08d", out, steps[i]);
        if (remove_tree(p) != 0) {
            snprintf(err, n, "retention: cannot delete old checkpoint %s: %s", p, strerror(errno));
            free(steps);
            return -1;
        }
        removed++;
    }
    free(steps);
    if (removed) fsync_path(out, 1);
    return removed;
}

int ckpt_save(const char *dir, const ModelConfig *c, const float *params, StDtype dtype, const CkptFile *files,
              int nfiles, char *err, size_t n) {
    CkptWriter w;
    if (ckpt_begin(&w, dir, err, n) != 0) return -1;
    int rc = ckpt_write_model(&w, c, params, dtype, err, n);
    for (int i = 0; rc == 0 && i < nfiles; i++)
        rc = ckpt_write_file(&w, files[i].name, files[i].bufs, files[i].sizes, files[i].nbuf, err, n);
    if (rc == 0) rc = ckpt_commit(&w, err, n);
    if (rc != 0) ckpt_abort(&w);
    return rc;
}
