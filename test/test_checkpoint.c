// Safetensors reader/writer and checkpoint directories: exact round trips (F32, BF16), atomic
// replacement, and one test per bad input asserting the error message.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "checkpoint.h"
#include "common.h"
#include "rng.h"
#include "safetensors.h"
#include "test_util.h"

#define assert_err_contains(err, s) do { if (!strstr((err), (s))) fail_msg("error message \"%s\" does not contain \"%s\"", (err), (s)); } while (0)

static char g_root[256];  // per-run scratch directory (set up in main)

static void path_in(char *out, size_t sz, const char *name) { snprintf(out, sz, "%s/%s", g_root, name); }

static void write_bytes(const char *path, const void *data, size_t len) {
    FILE *f = sllm_fopen(path, "wb");
    if (len) sllm_fwrite(data, 1, len, f, path);
    fclose(f);
}

// A safetensors file from a raw header string and `data_len` bytes of zeros.
static void write_raw_st(const char *path, const char *header, size_t data_len) {
    size_t hl = strlen(header);
    unsigned char *buf = calloc(8 + hl + data_len + 1, 1);
    for (int i = 0; i < 8; i++) buf[i] = (unsigned char)(((uint64_t)hl >> (8 * i)) & 0xff);
    memcpy(buf + 8, header, hl);
    write_bytes(path, buf, 8 + hl + data_len);
    free(buf);
}

static void expect_st_error(const char *name, const char *header, size_t data_len, const char *needle) {
    char path[512], err[512];
    path_in(path, sizeof path, name);
    write_raw_st(path, header, data_len);
    StFile f;
    assert_int_equal(st_open(&f, path, err, sizeof err), -1);
    assert_err_contains(err, needle);
}

// ---- safetensors --------------------------------------------------------------------------------

static void test_st_round_trip(void **s) {
    (void)s;
    char path[512], err[512];
    path_in(path, sizeof path, "rt.safetensors");
    float a[6] = {1.5f, -2.25f, 3e-8f, 1e30f, -0.0f, 7.0f};
    float b[3] = {0.1f, 0.2f, 0.3f};     // stored as BF16 (rounded)
    int32_t c[2] = {-5, 123456789};
    float sc = 42.0f;
    StWriteTensor ts[4] = {
        {.name = "a", .dtype = ST_F32, .ndim = 2, .shape = {2, 3}, .data = a, .src_dtype = ST_F32},
        {.name = "b.bf16", .dtype = ST_BF16, .ndim = 1, .shape = {3}, .data = b, .src_dtype = ST_F32},
        {.name = "c", .dtype = ST_I32, .ndim = 1, .shape = {2}, .data = c, .src_dtype = ST_I32},
        {.name = "scalar", .dtype = ST_F32, .ndim = 0, .data = &sc, .src_dtype = ST_F32},
    };
    const char *mk[2] = {"format", "note"}, *mv[2] = {"pt", "hello \"json\""};
    assert_int_equal(st_write(path, ts, 4, mk, mv, 2, err, sizeof err), 0);
    StFile f;
    if (st_open(&f, path, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(f.n_tensors, 4);
    assert_string_equal(st_meta(&f, "format"), "pt");
    assert_string_equal(st_meta(&f, "note"), "hello \"json\"");
    assert_null(st_meta(&f, "missing"));
    assert_int_equal((8 + (f.data - (const unsigned char *)f.map - 8)) % 8, 0);  // data 8-byte aligned
    const StTensor *ta = st_find(&f, "a");
    assert_non_null(ta);
    assert_int_equal(ta->ndim, 2); assert_int_equal(ta->shape[0], 2); assert_int_equal(ta->shape[1], 3);
    float got[6];
    assert_int_equal(st_read_f32(&f, ta, got, err, sizeof err), 0);
    assert_memory_equal(got, a, sizeof a);  // bit-exact, including -0
    const StTensor *tb = st_find(&f, "b.bf16");
    assert_int_equal(tb->dtype, ST_BF16);
    assert_int_equal(tb->end - tb->begin, 6);
    assert_int_equal(st_read_f32(&f, tb, got, err, sizeof err), 0);
    // expected bf16 bits worked out by hand (round to nearest even), not by the writer's own rounding:
    // 0.1f = 0x3DCCCCCD -> 0x3DCD, 0.2f = 0x3E4CCCCD -> 0x3E4D, 0.3f = 0x3E99999A -> 0x3E9A (truncation would
    // give 0x3DCC, 0x3E4C, 0x3E99)
    const uint32_t want_b[3] = {0x3DCD0000u, 0x3E4D0000u, 0x3E9A0000u};
    for (int i = 0; i < 3; i++) { uint32_t u; memcpy(&u, &got[i], 4); assert_int_equal(u, want_b[i]); }
    const StTensor *tc = st_find(&f, "c");
    assert_memory_equal(st_tensor_data(&f, tc), c, sizeof c);
    assert_int_equal(st_read_f32(&f, tc, got, err, sizeof err), -1);
    assert_err_contains(err, "dtype I32");
    const StTensor *tsc = st_find(&f, "scalar");
    assert_int_equal(tsc->ndim, 0); assert_int_equal(tsc->numel, 1);
    st_close(&f);
    // duplicate names are refused by the writer
    ts[1].name = "a";
    assert_int_equal(st_write(path, ts, 2, NULL, NULL, 0, err, sizeof err), -1);
    assert_err_contains(err, "used twice");
}

static void test_st_bad_files(void **s) {
    (void)s;
    char path[512], err[512];
    StFile f;
    // shorter than the length field
    path_in(path, sizeof path, "tiny.safetensors");
    write_bytes(path, "abc", 3);
    assert_int_equal(st_open(&f, path, err, sizeof err), -1);
    assert_err_contains(err, "truncated file: 3 bytes");
    // missing file
    path_in(path, sizeof path, "does-not-exist.safetensors");
    assert_int_equal(st_open(&f, path, err, sizeof err), -1);
    assert_err_contains(err, "cannot open");
    // header length past EOF
    path_in(path, sizeof path, "hlen.safetensors");
    unsigned char buf[16] = {0xff, 0xff, 0, 0, 0, 0, 0, 0, '{', '}'};
    write_bytes(path, buf, 10);
    assert_int_equal(st_open(&f, path, err, sizeof err), -1);
    assert_err_contains(err, "header length 65535 runs past the end of the file (10 bytes)");
    const char *ok = "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}";
    expect_st_error("trunc.safetensors", ok, 5, "truncated file: tensor 'x' data_offsets [0, 8] run past the end");
    expect_st_error("json.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],", 8, "malformed JSON header");
    expect_st_error("notobj.safetensors", "[1, 2]", 0, "not an object");
    expect_st_error("dtype.safetensors", "{\"x\":{\"dtype\":\"Q8\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                    "tensor 'x' has unknown dtype 'Q8'");
    expect_st_error("size.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                    "hold 8 bytes but dtype F32 x shape needs 12 bytes");
    expect_st_error("bf16size.safetensors", "{\"x\":{\"dtype\":\"BF16\",\"shape\":[2,2],\"data_offsets\":[0,16]}}", 16,
                    "hold 16 bytes but dtype BF16 x shape needs 8 bytes");
    expect_st_error("overlap.safetensors",
                    "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                    "\"y\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}", 12, "tensors 'x' and 'y' overlap");
    expect_st_error("gap.safetensors",
                    "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"y\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[8,12]}}", 12, "gap of 4 bytes before tensor 'y'");
    expect_st_error("trail.safetensors", ok, 12, "4 bytes of data after the last tensor");
    expect_st_error("neg.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
                    "shape[0] is not a non-negative integer");
    expect_st_error("offs.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8]}}", 8,
                    "needs \"data_offsets\": [begin, end]");
    expect_st_error("rev.safetensors", "{\"x\":{\"dtype\":\"F32\",\"shape\":[0],\"data_offsets\":[8,0]}}", 8,
                    "end before begin");
    expect_st_error("dup.safetensors",
                    "{\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                    "\"x\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8, "tensor 'x' appears twice");
    expect_st_error("meta.safetensors", "{\"__metadata__\":{\"k\":3}}", 0, "__metadata__ value of 'k' is not a string");
    // found by fuzz_safetensors: a second __metadata__ wrote past the first one's key table
    expect_st_error("meta2.safetensors", "{\"__metadata__\":{\"format\":\"pt\"},\"__metadata__\":{\"format\":\"pt\"}}", 0,
                    "__metadata__ appears twice");
    expect_st_error("nodtype.safetensors", "{\"x\":{\"shape\":[1],\"data_offsets\":[0,4]}}", 4, "has no \"dtype\"");
    // an empty file with only metadata is valid
    char path2[512];
    path_in(path2, sizeof path2, "empty.safetensors");
    write_raw_st(path2, "{\"__metadata__\":{\"format\":\"pt\"}}", 0);
    assert_int_equal(st_open(&f, path2, err, sizeof err), 0);
    assert_int_equal(f.n_tensors, 0);
    st_close(&f);
}

// ---- checkpoints --------------------------------------------------------------------------------

// BF16 storage rounds to nearest, ties to even, and keeps NaN a NaN; expected bits are written out by hand.
static void test_st_bf16_rounding(void **s) {
    (void)s;
    const uint32_t in[] = {0x3F808000u,   // tie, even upper 0x3F80: stays
                           0x3F818000u,   // tie, odd upper 0x3F81: up to 0x3F82
                           0x3F80FFFFu,   // above half: up
                           0x3F807FFFu,   // below half: down
                           0xBF818000u,   // negative tie, odd: away from zero in magnitude (0xBF82)
                           0x7F7FFFFFu,   // FLT_MAX rounds up to infinity
                           0x00000001u};  // smallest subnormal: rounds to +0
    const uint16_t want[] = {0x3F80, 0x3F82, 0x3F81, 0x3F80, 0xBF82, 0x7F80, 0x0000};
    const int n = (int)(sizeof in / sizeof in[0]);
    float x[8];
    memcpy(x, in, sizeof in);
    char path[512], err[512];
    path_in(path, sizeof path, "bf16.safetensors");
    StWriteTensor t = {.name = "x", .dtype = ST_BF16, .ndim = 1, .shape = {n}, .data = x, .src_dtype = ST_F32};
    assert_int_equal(st_write(path, &t, 1, NULL, NULL, 0, err, sizeof err), 0);
    StFile f;
    if (st_open(&f, path, err, sizeof err) != 0) fail_msg("%s", err);
    const uint16_t *raw = (const uint16_t *)st_tensor_data(&f, st_find(&f, "x"));
    for (int i = 0; i < n; i++)
        if (raw[i] != want[i]) fail_msg("bf16 of 0x%08x: got 0x%04x, expected 0x%04x", in[i], raw[i], want[i]);
    st_close(&f);
}

static void test_model(ModelConfig *c, float **params, int bf16_exact, uint64_t seed) {
    assert_true(config_from_preset("test", c));
    c->n_kv_head = 2;          // GQA
    c->l1_lambda = 3e-4f;
    c->rope_theta = 12345.5f;  // not a default: must round-trip
    c->norm_eps = 2.5e-6f;     // neither the reader's default (1e-6) nor config_defaults': must round-trip
    ParamLayout lay;
    config_param_layout(c, &lay);
    *params = sllm_malloc(lay.total * sizeof(float));
    Rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < lay.total; i++) {
        float v = (float)rng_normal(&r);
        (*params)[i] = bf16_exact ? sllm_round_bf16(v) : v;
    }
}

static void assert_config_equal(const ModelConfig *a, const ModelConfig *b) {
    assert_int_equal(a->vocab_size, b->vocab_size); assert_int_equal(a->d_model, b->d_model);
    assert_int_equal(a->n_layer, b->n_layer); assert_int_equal(a->n_head, b->n_head);
    assert_int_equal(a->n_kv_head, b->n_kv_head); assert_int_equal(a->head_dim, b->head_dim);
    assert_int_equal(a->d_ff, b->d_ff); assert_int_equal(a->max_seq, b->max_seq);
    assert_true(a->rope_theta == b->rope_theta); assert_true(a->norm_eps == b->norm_eps);
    assert_int_equal(a->gated, b->gated); assert_int_equal(a->tied, b->tied);
    assert_true(a->l1_lambda == b->l1_lambda);
}

static int count_entries_with_prefix(const char *dir, const char *prefix) {
    DIR *d = opendir(dir);
    assert_non_null(d);
    int k = 0;
    struct dirent *e;
    while ((e = readdir(d))) if (!strncmp(e->d_name, prefix, strlen(prefix))) k++;
    closedir(d);
    return k;
}

static void round_trip(StDtype dtype, int gated) {
    ModelConfig c, c2;
    float *p, *q;
    test_model(&c, &p, dtype == ST_BF16, 1);
    if (!gated) { c.gated = 0; free(p); ParamLayout l; config_param_layout(&c, &l); p = sllm_malloc(l.total * 4); for (size_t i = 0; i < l.total; i++) p[i] = sllm_round_bf16((float)i * 0.25f - 3.0f); }
    ParamLayout lay;
    config_param_layout(&c, &lay);
    char dir[512], err[512];
    path_in(dir, sizeof dir, dtype == ST_BF16 ? "ckpt_bf16" : "ckpt_f32");
    if (ckpt_save_model(dir, &c, p, dtype, err, sizeof err) != 0) fail_msg("%s", err);
    StDtype got_dtype;
    if (ckpt_load(dir, &c2, &q, &got_dtype, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(got_dtype, dtype);
    assert_config_equal(&c, &c2);
    assert_memory_equal(p, q, lay.total * sizeof(float));  // exact
    // HF names and per-layer slices: layer 1's q_proj holds the second [Q, D] slice of WQ
    char path[600];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    StFile f;
    if (st_open(&f, path, err, sizeof err) != 0) fail_msg("%s", err);
    assert_string_equal(st_meta(&f, "format"), "pt");
    const StTensor *t = st_find(&f, "model.layers.1.self_attn.q_proj.weight");
    assert_non_null(t);
    assert_int_equal(t->ndim, 2); assert_int_equal(t->shape[0], c.n_head * c.head_dim); assert_int_equal(t->shape[1], c.d_model);
    float *slice = sllm_malloc(t->numel * sizeof(float));
    assert_int_equal(st_read_f32(&f, t, slice, err, sizeof err), 0);
    assert_memory_equal(slice, p + lay.t[PARAM_WQ].offset + t->numel, t->numel * sizeof(float));
    const StTensor *nrm = st_find(&f, "model.norm.weight");
    assert_int_equal(nrm->ndim, 1); assert_int_equal(nrm->shape[0], c.d_model);
    assert_true((st_find(&f, "model.layers.0.mlp.gate_proj.weight") != NULL) == gated);
    free(slice);
    st_close(&f);
    free(p); free(q);
}

static void test_ckpt_round_trip_f32(void **s) { (void)s; round_trip(ST_F32, 1); }
static void test_ckpt_round_trip_bf16(void **s) { (void)s; round_trip(ST_BF16, 1); }
static void test_ckpt_round_trip_nongated(void **s) { (void)s; round_trip(ST_BF16, 0); }

// config.json: every key looked up exactly at the top level (not found as a substring somewhere in the text),
// with its type and value; rope_parameters checked on its own.
static void test_ckpt_config_json_keys(void **s) {
    (void)s;
    ModelConfig c;
    float *p;
    test_model(&c, &p, 0, 2);
    char dir[512], err[512], path[600];
    path_in(dir, sizeof dir, "ckpt_keys");
    if (ckpt_save_model(dir, &c, p, ST_BF16, err, sizeof err) != 0) fail_msg("%s", err);
    snprintf(path, sizeof path, "%s/config.json", dir);
    char *txt = sllm_read_file(path, NULL, NULL);
    assert_non_null(txt);
    cJSON *j = cJSON_Parse(txt);
    assert_non_null(j);
    const struct { const char *key; double num; } nums[] = {
        {"hidden_size", 32}, {"intermediate_size", 64}, {"num_hidden_layers", 2}, {"num_attention_heads", 4},
        {"num_key_value_heads", 2}, {"head_dim", 8}, {"vocab_size", 96}, {"max_position_embeddings", 16},
        {"rope_theta", 12345.5}, {"rms_norm_eps", 2.5e-6f}, {"sparsellm_l1_lambda", 3e-4f}};
    for (size_t i = 0; i < sizeof nums / sizeof *nums; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, nums[i].key);
        if (!cJSON_IsNumber(v)) fail_msg("config.json: top-level \"%s\" missing or not a number:\n%s", nums[i].key, txt);
        if ((float)v->valuedouble != (float)nums[i].num)
            fail_msg("config.json: \"%s\" is %.9g, expected %.9g", nums[i].key, v->valuedouble, nums[i].num);
    }
    const struct { const char *key, *str; } strs[] = {{"model_type", "llama"}, {"hidden_act", "relu"}, {"torch_dtype", "bfloat16"}};
    for (size_t i = 0; i < sizeof strs / sizeof *strs; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, strs[i].key);
        if (!cJSON_IsString(v) || strcmp(v->valuestring, strs[i].str)) fail_msg("config.json: \"%s\" is not \"%s\"", strs[i].key, strs[i].str);
    }
    const struct { const char *key; int val; } bools[] = {{"tie_word_embeddings", 1}, {"attention_bias", 0}, {"mlp_bias", 0}, {"sparsellm_gated", 1}};
    for (size_t i = 0; i < sizeof bools / sizeof *bools; i++) {
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, bools[i].key);
        if (!cJSON_IsBool(v) || cJSON_IsTrue(v) != bools[i].val) fail_msg("config.json: \"%s\" is not %s", bools[i].key, bools[i].val ? "true" : "false");
    }
    const cJSON *arch = cJSON_GetObjectItemCaseSensitive(j, "architectures");
    assert_true(cJSON_IsArray(arch) && cJSON_GetArraySize(arch) == 1);
    assert_string_equal(cJSON_GetArrayItem(arch, 0)->valuestring, "LlamaForCausalLM");
    const cJSON *rp = cJSON_GetObjectItemCaseSensitive(j, "rope_parameters");
    assert_true(cJSON_IsObject(rp));
    assert_string_equal(cJSON_GetObjectItemCaseSensitive(rp, "rope_type")->valuestring, "default");
    assert_true((float)cJSON_GetObjectItemCaseSensitive(rp, "rope_theta")->valuedouble == 12345.5f);
    cJSON_Delete(j);
    free(txt);
    free(p);
}

// ckpt_find_latest: the newest ckpt_NNNNNNNN holding the marker file; temp dirs and other names never match.
static void test_ckpt_find_latest(void **s) {
    (void)s;
    char out[512], d[1024], f[1100], got[1100];
    path_in(out, sizeof out, "find_latest");
    assert_int_equal(mkdir(out, 0755), 0);
    assert_int_equal(ckpt_find_latest(out, "train_state.bin", got, sizeof got), -1);  // empty
    const char *dirs[] = {"ckpt_00000010", "ckpt_00000200", "ckpt_00000300.tmp-123", "ckpt_00000400", "ckpt_0000050",
                          "other_00000900"};
    const int has_state[] = {1, 1, 1, 0, 1, 1};
    for (int i = 0; i < 6; i++) {
        snprintf(d, sizeof d, "%s/%s", out, dirs[i]);
        assert_int_equal(mkdir(d, 0755), 0);
        snprintf(f, sizeof f, "%s/%s", d, CKPT_MODEL_FILE);
        write_bytes(f, "x", 1);
        if (has_state[i]) {
            snprintf(f, sizeof f, "%s/train_state.bin", d);
            write_bytes(f, "x", 1);
        }
    }
    assert_int_equal(ckpt_find_latest(out, "train_state.bin", got, sizeof got), 200);
    snprintf(d, sizeof d, "%s/ckpt_00000200", out);
    assert_string_equal(got, d);
    assert_int_equal(ckpt_find_latest(out, CKPT_MODEL_FILE, got, sizeof got), 400);  // weights only: the newest
    snprintf(d, sizeof d, "%s/nonexistent", out);
    assert_int_equal(ckpt_find_latest(d, CKPT_MODEL_FILE, got, sizeof got), -1);
}

static void test_ckpt_atomic_replace_and_abort(void **s) {
    (void)s;
    ModelConfig c, c2;
    float *p1, *p2, *q;
    test_model(&c, &p1, 0, 3);
    test_model(&c, &p2, 0, 4);
    ParamLayout lay;
    config_param_layout(&c, &lay);
    char dir[512], err[512], extra[4200];
    path_in(dir, sizeof dir, "ckpt_atomic");
    // first checkpoint with an extra caller file
    CkptWriter w;
    assert_int_equal(ckpt_begin(&w, dir, err, sizeof err), 0);
    assert_int_equal(ckpt_write_model(&w, &c, p1, ST_F32, err, sizeof err), 0);
    assert_int_equal(ckpt_path(&w, "train_state.bin", extra, sizeof extra), 0);
    write_bytes(extra, "step=1", 6);
    struct stat sb;
    assert_int_not_equal(stat(dir, &sb), 0);  // nothing visible before commit
    assert_int_equal(ckpt_commit(&w, err, sizeof err), 0);
    // second checkpoint, same name: replaces the first only at commit
    assert_int_equal(ckpt_begin(&w, dir, err, sizeof err), 0);
    assert_int_equal(ckpt_write_model(&w, &c, p2, ST_F32, err, sizeof err), 0);
    assert_int_equal(ckpt_load(dir, &c2, &q, NULL, err, sizeof err), 0);  // still the first one
    assert_memory_equal(q, p1, lay.total * sizeof(float));
    free(q);
    assert_int_equal(ckpt_commit(&w, err, sizeof err), 0);
    assert_int_equal(ckpt_load(dir, &c2, &q, NULL, err, sizeof err), 0);
    assert_memory_equal(q, p2, lay.total * sizeof(float));
    free(q);
    snprintf(extra, sizeof extra, "%s/train_state.bin", dir);
    assert_int_not_equal(stat(extra, &sb), 0);  // the old checkpoint's extra file went with it
    // an aborted write leaves the existing checkpoint untouched and removes its temp dir
    assert_int_equal(ckpt_begin(&w, dir, err, sizeof err), 0);
    assert_int_equal(ckpt_write_model(&w, &c, p1, ST_F32, err, sizeof err), 0);
    ckpt_abort(&w);
    assert_int_equal(ckpt_load(dir, &c2, &q, NULL, err, sizeof err), 0);
    assert_memory_equal(q, p2, lay.total * sizeof(float));
    free(q);
    assert_int_equal(count_entries_with_prefix(g_root, "ckpt_atomic.tmp-"), 0);
    assert_int_equal(count_entries_with_prefix(g_root, "ckpt_atomic.old-"), 0);
    // a plain file in the way is not replaced
    char fpath[512];
    path_in(fpath, sizeof fpath, "ckpt_is_a_file");
    write_bytes(fpath, "x", 1);
    assert_int_equal(ckpt_save_model(fpath, &c, p1, ST_F32, err, sizeof err), -1);
    assert_err_contains(err, "is not a directory");
    assert_int_equal(count_entries_with_prefix(g_root, "ckpt_is_a_file.tmp-"), 0);
    free(p1); free(p2);
}

// Rewrite <dir>/model.safetensors with a modified tensor list (mutate callback), via a temp file.
typedef void (*Mutator)(StWriteTensor *ts, int *n, float *scratch);

static void rewrite_model(const char *dir, Mutator mut) {
    char path[600], tmp[620], err[512];
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    snprintf(tmp, sizeof tmp, "%s/model.safetensors.new", dir);
    StFile f;
    if (st_open(&f, path, err, sizeof err) != 0) fail_msg("%s", err);
    StWriteTensor *ts = calloc(f.n_tensors + 1, sizeof(StWriteTensor));
    int n = f.n_tensors;
    for (int i = 0; i < n; i++) {
        const StTensor *t = &f.tensors[i];
        ts[i].name = t->name; ts[i].dtype = t->dtype; ts[i].src_dtype = t->dtype; ts[i].ndim = t->ndim;
        memcpy(ts[i].shape, t->shape, sizeof t->shape);
        ts[i].data = st_tensor_data(&f, t);
    }
    static float scratch[1 << 16];
    mut(ts, &n, scratch);
    const char *mk[1] = {"format"}, *mv[1] = {"pt"};
    if (st_write(tmp, ts, n, mk, mv, 1, err, sizeof err) != 0) fail_msg("%s", err);
    free(ts);
    st_close(&f);
    assert_int_equal(rename(tmp, path), 0);
}

static int find_idx(StWriteTensor *ts, int n, const char *name) {
    for (int i = 0; i < n; i++) if (!strcmp(ts[i].name, name)) return i;
    fail_msg("no tensor %s", name);
    return -1;
}
static void mut_drop_up1(StWriteTensor *ts, int *n, float *sc) {
    (void)sc;
    int i = find_idx(ts, *n, "model.layers.1.mlp.up_proj.weight");
    ts[i] = ts[--*n];
}
static void mut_extra(StWriteTensor *ts, int *n, float *sc) {
    ts[*n] = (StWriteTensor){.name = "model.layers.2.mlp.up_proj.weight", .dtype = ST_F32, .src_dtype = ST_F32, .ndim = 1, .shape = {4}, .data = sc};
    (*n)++;
}
static void mut_lm_head_diff(StWriteTensor *ts, int *n, float *sc) {
    int e = find_idx(ts, *n, "model.embed_tokens.weight");
    ts[*n] = ts[e];
    ts[*n].name = "lm_head.weight";
    ts[*n].data = sc;  // zeros: differs from the embedding
    ts[*n].src_dtype = ts[*n].dtype;
    (*n)++;
}
static void mut_lm_head_same(StWriteTensor *ts, int *n, float *sc) {
    (void)sc;
    int e = find_idx(ts, *n, "model.embed_tokens.weight");
    ts[*n] = ts[e];
    ts[*n].name = "lm_head.weight";
    (*n)++;
}
static void mut_f16(StWriteTensor *ts, int *n, float *sc) {
    int i = find_idx(ts, *n, "model.layers.0.self_attn.k_proj.weight");
    ts[i].dtype = ST_F16; ts[i].src_dtype = ST_F32; ts[i].data = sc;
}
static void mut_mixed(StWriteTensor *ts, int *n, float *sc) {
    int i = find_idx(ts, *n, "model.norm.weight");
    ts[i].dtype = ST_BF16; ts[i].src_dtype = ST_F32; ts[i].data = sc;
}
static void mut_shape(StWriteTensor *ts, int *n, float *sc) {
    (void)sc;
    int i = find_idx(ts, *n, "model.layers.0.mlp.down_proj.weight");  // [32, 64] -> [64, 32] (same bytes)
    ts[i].shape[0] = 64; ts[i].shape[1] = 32;
}

static void fresh_ckpt(const char *name, char *dir, size_t sz) {
    ModelConfig c;
    float *p;
    char err[512];
    test_model(&c, &p, 0, 5);
    path_in(dir, sz, name);
    if (ckpt_save_model(dir, &c, p, ST_F32, err, sizeof err) != 0) fail_msg("%s", err);
    free(p);
}

static void expect_load_error(const char *dir, const char *needle) {
    ModelConfig c;
    float *q = (float *)1;
    char err[512];
    assert_int_equal(ckpt_load(dir, &c, &q, NULL, err, sizeof err), -1);
    assert_null(q);
    assert_err_contains(err, needle);
}

static void test_ckpt_bad_tensors(void **s) {
    (void)s;
    char dir[512];
    fresh_ckpt("bad_missing", dir, sizeof dir);
    rewrite_model(dir, mut_drop_up1);
    expect_load_error(dir, "missing tensor 'model.layers.1.mlp.up_proj.weight'");
    fresh_ckpt("bad_extra", dir, sizeof dir);
    rewrite_model(dir, mut_extra);
    expect_load_error(dir, "unexpected tensor 'model.layers.2.mlp.up_proj.weight'");
    fresh_ckpt("bad_lm_head", dir, sizeof dir);
    rewrite_model(dir, mut_lm_head_diff);
    expect_load_error(dir, "'lm_head.weight' differs from the embedding");
    fresh_ckpt("ok_lm_head", dir, sizeof dir);  // an exact copy of the tied embedding is accepted
    rewrite_model(dir, mut_lm_head_same);
    ModelConfig c;
    float *q;
    char err[512];
    if (ckpt_load(dir, &c, &q, NULL, err, sizeof err) != 0) fail_msg("%s", err);
    free(q);
    fresh_ckpt("bad_dtype", dir, sizeof dir);
    rewrite_model(dir, mut_f16);
    expect_load_error(dir, "tensor 'model.layers.0.self_attn.k_proj.weight' has dtype F16; expected F32 or BF16");
    fresh_ckpt("bad_mixed", dir, sizeof dir);
    rewrite_model(dir, mut_mixed);
    expect_load_error(dir, "has dtype BF16 but");
    fresh_ckpt("bad_shape", dir, sizeof dir);
    rewrite_model(dir, mut_shape);
    expect_load_error(dir, "tensor 'model.layers.0.mlp.down_proj.weight' has shape [64, 32] but config.json implies [32, 64]");
}

static void replace_in_file(const char *path, const char *from, const char *to) {
    char *txt = sllm_read_file(path, NULL, NULL);
    assert_non_null(txt);
    char *at = strstr(txt, from);
    if (!at) fail_msg("%s not in %s", from, path);
    size_t len = strlen(txt) + strlen(to) + 1;
    char *out = malloc(len);
    snprintf(out, len, "%.*s%s%s", (int)(at - txt), txt, to, at + strlen(from));
    write_bytes(path, out, strlen(out));
    free(out);
    free(txt);
}

static void mut_nan(StWriteTensor *ts, int *n, float *sc) {
    int i = find_idx(ts, *n, "model.layers.1.mlp.up_proj.weight");
    size_t numel = (size_t)(ts[i].shape[0] * ts[i].shape[1]);
    memcpy(sc, ts[i].data, numel * 4);
    sc[7] = NAN;
    ts[i].data = sc;
}
static void mut_inf(StWriteTensor *ts, int *n, float *sc) {
    int i = find_idx(ts, *n, "model.norm.weight");
    memcpy(sc, ts[i].data, (size_t)ts[i].shape[0] * 4);
    sc[3] = -INFINITY;
    ts[i].data = sc;
}

// A checkpoint holding a NaN or an infinity does not load; the error names the tensor and the element.
static void test_ckpt_nonfinite_weights(void **s) {
    (void)s;
    char dir[512];
    fresh_ckpt("bad_nan", dir, sizeof dir);
    rewrite_model(dir, mut_nan);
    expect_load_error(dir, "tensor 'model.layers.1.mlp.up_proj.weight' holds a non-finite weight (nan at element 7");
    fresh_ckpt("bad_inf", dir, sizeof dir);
    rewrite_model(dir, mut_inf);
    expect_load_error(dir, "tensor 'model.norm.weight' holds a non-finite weight (-inf at element 3");
}

// ckpt_save: a failure at any step (here: an extra file that cannot be created) leaves no temp dir and no
// checkpoint; the extra files of a successful save are there, byte for byte.
static void test_ckpt_save_cleanup(void **s) {
    (void)s;
    ModelConfig c;
    float *p;
    test_model(&c, &p, 0, 6);
    char dir[512], err[512];
    path_in(dir, sizeof dir, "ckpt_fail");
    const char *payload = "hello";
    const void *b[1] = {payload};
    const size_t z[1] = {5};
    CkptFile bad[2] = {{"state.bin", b, z, 1}, {"no_such_dir/x.bin", b, z, 1}};
    assert_int_equal(ckpt_save(dir, &c, p, ST_F32, bad, 2, err, sizeof err), -1);
    assert_err_contains(err, "no_such_dir/x.bin");
    assert_int_equal(count_entries_with_prefix(g_root, "ckpt_fail"), 0);  // no temp dir, no checkpoint
    assert_int_equal(ckpt_save(dir, &c, p, ST_F32, bad, 1, err, sizeof err), 0);
    char got[8] = "";
    void *rb[1] = {got};
    const size_t rz[1] = {5};
    assert_int_equal(ckpt_read_file(dir, "state.bin", rb, rz, 1, err, sizeof err), 0);
    assert_memory_equal(got, payload, 5);
    const size_t rz2[1] = {6};
    assert_int_equal(ckpt_read_file(dir, "state.bin", rb, rz2, 1, err, sizeof err), -1);  // size is checked
    assert_err_contains(err, "expected 6");
    assert_int_equal(count_entries_with_prefix(g_root, "ckpt_fail"), 1);
    free(p);
}

// Retention keeps the newest N by step (not by name order of other entries), never touches other names.
static void test_ckpt_retain(void **s) {
    (void)s;
    char out[512], d[1024], err[512];
    path_in(out, sizeof out, "retain");
    assert_int_equal(mkdir(out, 0755), 0);
    const char *dirs[] = {"ckpt_00000100", "ckpt_00000020", "ckpt_00000003", "ckpt_00000300.tmp-9", "notes"};
    for (int i = 0; i < 5; i++) { snprintf(d, sizeof d, "%s/%s", out, dirs[i]); assert_int_equal(mkdir(d, 0755), 0); }
    assert_int_equal(ckpt_retain(out, 0, err, sizeof err), 0);   // 0: keep all
    assert_int_equal(ckpt_retain(out, 2, err, sizeof err), 1);
    assert_int_equal(count_entries_with_prefix(out, "ckpt_00000003"), 0);
    assert_int_equal(count_entries_with_prefix(out, "ckpt_00000020"), 1);
    assert_int_equal(count_entries_with_prefix(out, "ckpt_00000100"), 1);
    assert_int_equal(count_entries_with_prefix(out, "ckpt_00000300.tmp"), 1);
    assert_int_equal(count_entries_with_prefix(out, "notes"), 1);
    assert_int_equal(ckpt_retain(out, 1, err, sizeof err), 1);
    assert_int_equal(count_entries_with_prefix(out, "ckpt_00000020"), 0);
    assert_int_equal(count_entries_with_prefix(out, "ckpt_00000100"), 1);
}

// The output directory's lock: a second holder is refused with a clear message; closing releases it.
static void test_ckpt_out_lock(void **s) {
    (void)s;
    char out[512], err[512];
    path_in(out, sizeof out, "locked/out");
    int fd1, fd2;
    if (ckpt_out_lock(out, &fd1, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(ckpt_out_lock(out, &fd2, err, sizeof err), -1);
    assert_err_contains(err, "in use by another run");
    close(fd1);
    if (ckpt_out_lock(out, &fd2, err, sizeof err) != 0) fail_msg("%s", err);
    close(fd2);
}

static void test_ckpt_bad_config(void **s) {
    (void)s;
    char dir[512], path[600];
    struct { const char *name, *from, *to, *needle; } cases[] = {
        {"cfg_ff", "\"intermediate_size\": 64", "\"intermediate_size\": 128",
         "gate_proj.weight' has shape [64, 32] but config.json implies [128, 32]"},
        {"cfg_layers", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 3", "missing tensor 'model.layers.2."},
        {"cfg_layers1", "\"num_hidden_layers\": 2", "\"num_hidden_layers\": 1", "unexpected tensor 'model.layers.1."},
        {"cfg_kv", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 4", "config does not match the weights"},
        {"cfg_gated", "\"sparsellm_gated\": true", "\"sparsellm_gated\": false", "unexpected tensor 'model.layers.0.mlp.gate_proj.weight'"},
        {"cfg_vocab", "\"vocab_size\": 96", "\"vocab_size\": 97", "has shape [96, 32] but config.json implies [97, 32]"},
        {"cfg_kvdiv", "\"num_key_value_heads\": 2", "\"num_key_value_heads\": 3", "inconsistent config: n_kv_head (3)"},
        {"cfg_act", "\"hidden_act\": \"relu\"", "\"hidden_act\": \"silu\"", "hidden_act must be \"relu\" (got silu)"},
        {"cfg_tied", "\"tie_word_embeddings\": true", "\"tie_word_embeddings\": false", "tie_word_embeddings must be true"},
        {"cfg_missing", "\"hidden_size\": 32,", "", "missing required key \"hidden_size\""},
        {"cfg_type", "\"hidden_size\": 32", "\"hidden_size\": \"32\"", "key \"hidden_size\" must be a positive integer"},
        {"cfg_json", "\"hidden_size\": 32,", "\"hidden_size\": 32,,", "malformed JSON"},
        {"cfg_scaling", "\"use_cache\": true", "\"use_cache\": true, \"rope_scaling\": {\"factor\": 2.0}", "rope_scaling is set"},
        {"cfg_rope_type", "\"rope_type\": \"default\"", "\"rope_type\": \"yarn\"", "rope_type must be \"default\""},
        {"cfg_rope_top", "\"rope_theta\": 12345.5,", "\"rope_theta\": 999,", "rope_theta 999 disagrees with rope_parameters.rope_theta 12345.5"},
        {"cfg_rope_nan", "\"rope_theta\": 12345.5", "\"rope_theta\": 1e999", "\"rope_theta\" must be a finite number"},
        {"cfg_eps_neg", "\"rms_norm_eps\": 2.5e-06", "\"rms_norm_eps\": -2.5e-06", "must be positive"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        fresh_ckpt(cases[i].name, dir, sizeof dir);
        snprintf(path, sizeof path, "%s/config.json", dir);
        replace_in_file(path, cases[i].from, cases[i].to);
        expect_load_error(dir, cases[i].needle);
    }
}

static void test_ckpt_bad_files(void **s) {
    (void)s;
    char dir[512], path[600];
    // truncated model file (a crash mid-write of a non-atomic copy)
    fresh_ckpt("file_trunc", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    struct stat sb;
    assert_int_equal(stat(path, &sb), 0);
    assert_int_equal(truncate(path, sb.st_size - 100), 0);
    expect_load_error(dir, "truncated file: tensor 'model.norm.weight'");
    // malformed header
    fresh_ckpt("file_header", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    FILE *f = sllm_fopen(path, "r+b");
    fseek(f, 8, SEEK_SET);
    fputc('X', f);  // '{' -> 'X'
    fclose(f);
    expect_load_error(dir, "malformed JSON header");
    // missing files
    fresh_ckpt("file_nomodel", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    unlink(path);
    expect_load_error(dir, "missing model.safetensors");
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    write_bytes(path, "{}", 2);
    expect_load_error(dir, "sharded checkpoints");
    fresh_ckpt("file_noconfig", dir, sizeof dir);
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    expect_load_error(dir, "config.json: cannot open file");
    path_in(dir, sizeof dir, "no_such_checkpoint");
    expect_load_error(dir, "no_such_checkpoint/config.json");
}

static int setup_root(void **s) {
    (void)s;
    return test_tmpdir_make(g_root, sizeof g_root, "sllm_test_checkpoint.");
}
static int teardown_root(void **s) {
    (void)s;
    return test_tmpdir_remove(g_root);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_st_round_trip),
        cmocka_unit_test(test_st_bad_files),
        cmocka_unit_test(test_st_bf16_rounding),
        cmocka_unit_test(test_ckpt_nonfinite_weights),
        cmocka_unit_test(test_ckpt_save_cleanup),
        cmocka_unit_test(test_ckpt_retain),
        cmocka_unit_test(test_ckpt_out_lock),
        cmocka_unit_test(test_ckpt_round_trip_f32),
        cmocka_unit_test(test_ckpt_round_trip_bf16),
        cmocka_unit_test(test_ckpt_round_trip_nongated),
        cmocka_unit_test(test_ckpt_config_json_keys),
        cmocka_unit_test(test_ckpt_atomic_replace_and_abort),
        cmocka_unit_test(test_ckpt_find_latest),
        cmocka_unit_test(test_ckpt_bad_tensors),
        cmocka_unit_test(test_ckpt_bad_config),
        cmocka_unit_test(test_ckpt_bad_files),
    };
    return cmocka_run_group_tests_name("checkpoint", tests, setup_root, teardown_root);
}
