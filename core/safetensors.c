// core/safetensors.c: see safetensors.h. Strict reader (mmap) and buffered writer.
#include "safetensors.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"

#define ST_MAX_HEADER (100u << 20)  // 100 MB, the reference library's limit

static const char *const DTYPE_NAMES[ST_NUM_DTYPES] = {"F32", "BF16", "F16", "F64", "I64", "I32", "I16", "I8", "U8", "BOOL"};
static const size_t DTYPE_SIZES[ST_NUM_DTYPES] = {4, 2, 2, 8, 8, 4, 2, 1, 1, 1};

const char *st_dtype_name(StDtype d) { return (unsigned)d < ST_NUM_DTYPES ? DTYPE_NAMES[d] : "?"; }
size_t st_dtype_size(StDtype d) { return (unsigned)d < ST_NUM_DTYPES ? DTYPE_SIZES[d] : 0; }
int st_dtype_from_name(const char *name) {
    for (int i = 0; i < ST_NUM_DTYPES; i++) if (!strcmp(name, DTYPE_NAMES[i])) return i;
    return -1;
}

// ---- reader --------------------------------------------------------------------------------------

void st_close(StFile *f) {
    if (f->map) munmap(f->map, f->file_size);
    for (int i = 0; i < f->n_tensors; i++) free(f->tensors[i].name);
    free(f->tensors);
    for (int i = 0; i < f->n_meta; i++) { free(f->meta_keys[i]); free(f->meta_vals[i]); }
    free(f->meta_keys);
    free(f->meta_vals);
    memset(f, 0, sizeof(*f));
}

// A JSON number that is a non-negative integer representable exactly (< 2^53).
static int json_uint(const cJSON *j, uint64_t *out) {
    if (!cJSON_IsNumber(j)) return 0;
    double d = j->valuedouble;
    if (!(d >= 0 && d < 9007199254740992.0) || floor(d) != d) return 0;
    *out = (uint64_t)d;
    return 1;
}

static int cmp_begin(const void *a, const void *b) {
    const StTensor *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end < y->end ? -1 : x->end > y->end);
}

#define FAIL(...) do { snprintf(err, n, __VA_ARGS__); goto fail; } while (0)

int st_open(StFile *f, const char *path, char *err, size_t n) {
    memset(f, 0, sizeof(*f));
    cJSON *root = NULL;
    int fd = open(path, O_RDONLY);
    if (fd < 0) { snprintf(err, n, "%s: cannot open: %s", path, strerror(errno)); return -1; }
    struct stat sb;
    if (fstat(fd, &sb) != 0) { snprintf(err, n, "%s: cannot stat: %s", path, strerror(errno)); close(fd); return -1; }
    f->file_size = (size_t)sb.st_size;
    if (f->file_size < 8) {
        snprintf(err, n, "%s: truncated file: %zu bytes, shorter than the 8-byte header length field", path, f->file_size);
        close(fd);
        return -1;
    }
    f->map = mmap(NULL, f->file_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (f->map == MAP_FAILED) { f->map = NULL; snprintf(err, n, "%s: cannot mmap: %s", path, strerror(errno)); return -1; }
    const unsigned char *bytes = f->map;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = (hlen << 8) | bytes[i];  // little-endian
    if (hlen > f->file_size - 8)
        FAIL("%s: truncated file or bad header: header length %llu runs past the end of the file (%zu bytes)", path,
             (unsigned long long)hlen, f->file_size);
    if (hlen > ST_MAX_HEADER) FAIL("%s: header length %llu exceeds the 100 MB limit", path, (unsigned long long)hlen);
    if (hlen < 2) FAIL("%s: malformed header: %llu bytes cannot hold a JSON object", path, (unsigned long long)hlen);
    f->data = bytes + 8 + hlen;
    f->data_size = f->file_size - 8 - hlen;

    const char *hdr = (const char *)bytes + 8;
    const char *end_ptr = NULL;
    root = cJSON_ParseWithLengthOpts(hdr, (size_t)hlen, &end_ptr, 0);
    if (!root) {
        size_t at = end_ptr ? (size_t)(end_ptr - hdr) : 0;
        const char *ep = cJSON_GetErrorPtr();
        if (ep && ep >= hdr && ep <= hdr + hlen) at = (size_t)(ep - hdr);
        FAIL("%s: malformed JSON header (%llu bytes): parse error at byte %zu", path, (unsigned long long)hlen, at);
    }
    for (const char *p = end_ptr; p && p < hdr + hlen; p++)
        if (*p != ' ' && *p != '\t' && *p != '\n' && *p != '\r')
            FAIL("%s: malformed header: unexpected data after the JSON object at byte %zu", path, (size_t)(p - hdr));
    if (!cJSON_IsObject(root)) FAIL("%s: malformed header: the JSON header is not an object", path);

    int count = cJSON_GetArraySize(root);
    f->tensors = calloc(count ? count : 1, sizeof(StTensor));
    if (!f->tensors) FAIL("%s: out of memory", path);
    for (const cJSON *e = root->child; e; e = e->next) {
        if (!e->string) FAIL("%s: malformed header: entry without a name", path);
        if (!strcmp(e->string, "__metadata__")) {
            if (f->meta_keys) FAIL("%s: malformed header: __metadata__ appears twice", path);
            if (!cJSON_IsObject(e)) FAIL("%s: malformed header: __metadata__ must be an object of strings", path);
            int nm = cJSON_GetArraySize(e);
            f->meta_keys = calloc(nm ? nm : 1, sizeof(char *));
            f->meta_vals = calloc(nm ? nm : 1, sizeof(char *));
            if (!f->meta_keys || !f->meta_vals) FAIL("%s: out of memory", path);
            for (const cJSON *m = e->child; m; m = m->next) {
                if (!cJSON_IsString(m)) FAIL("%s: malformed header: __metadata__ value of '%s' is not a string", path, m->string);
                f->meta_keys[f->n_meta] = strdup(m->string);
                f->meta_vals[f->n_meta] = strdup(m->valuestring);
                f->n_meta++;
            }
            continue;
        }
        for (int i = 0; i < f->n_tensors; i++)
            if (!strcmp(f->tensors[i].name, e->string)) FAIL("%s: malformed header: tensor '%s' appears twice", path, e->string);
        StTensor *t = &f->tensors[f->n_tensors];
        t->name = strdup(e->string);
        if (!t->name) FAIL("%s: out of memory", path);
        f->n_tensors++;
        if (!cJSON_IsObject(e)) FAIL("%s: malformed header: entry of tensor '%s' is not an object", path, t->name);
        const cJSON *jd = cJSON_GetObjectItemCaseSensitive(e, "dtype");
        const cJSON *js = cJSON_GetObjectItemCaseSensitive(e, "shape");
        const cJSON *jo = cJSON_GetObjectItemCaseSensitive(e, "data_offsets");
        if (!cJSON_IsString(jd)) FAIL("%s: malformed header: tensor '%s' has no \"dtype\" string", path, t->name);
        int dt = st_dtype_from_name(jd->valuestring);
        if (dt < 0) FAIL("%s: tensor '%s' has unknown dtype '%s' (known: F32 BF16 F16 F64 I64 I32 I16 I8 U8 BOOL)", path, t->name, jd->valuestring);
        t->dtype = (StDtype)dt;
        if (!cJSON_IsArray(js)) FAIL("%s: malformed header: tensor '%s' has no \"shape\" array", path, t->name);
        t->ndim = cJSON_GetArraySize(js);
        if (t->ndim > ST_MAX_DIMS) FAIL("%s: tensor '%s' has %d dimensions (at most %d supported)", path, t->name, t->ndim, ST_MAX_DIMS);
        t->numel = 1;
        int d = 0;
        for (const cJSON *x = js->child; x; x = x->next, d++) {
            uint64_t v;
            if (!json_uint(x, &v)) FAIL("%s: malformed header: tensor '%s' shape[%d] is not a non-negative integer", path, t->name, d);
            t->shape[d] = (int64_t)v;
            if (v && t->numel > SIZE_MAX / 16 / v) FAIL("%s: tensor '%s' shape is too large", path, t->name);
            t->numel *= v;
        }
        uint64_t b, en;
        if (!cJSON_IsArray(jo) || cJSON_GetArraySize(jo) != 2 || !json_uint(jo->child, &b) || !json_uint(jo->child->next, &en))
            FAIL("%s: malformed header: tensor '%s' needs \"data_offsets\": [begin, end] of non-negative integers", path, t->name);
        if (en < b) FAIL("%s: tensor '%s' data_offsets [%llu, %llu]: end before begin", path, t->name, (unsigned long long)b, (unsigned long long)en);
        t->begin = b; t->end = en;
        if (en - b != t->numel * st_dtype_size(t->dtype))
            FAIL("%s: tensor '%s' data_offsets [%llu, %llu] hold %llu bytes but dtype %s x shape needs %zu bytes", path,
                 t->name, (unsigned long long)b, (unsigned long long)en, (unsigned long long)(en - b),
                 st_dtype_name(t->dtype), t->numel * st_dtype_size(t->dtype));
        if (en > f->data_size)
            FAIL("%s: truncated file: tensor '%s' data_offsets [%llu, %llu] run past the end of the data region "
                 "(%zu bytes after the header)", path, t->name, (unsigned long long)b, (unsigned long long)en, f->data_size);
    }
    // Tensors must tile the data region exactly: no overlap, no gap, nothing after the last one.
    qsort(f->tensors, f->n_tensors, sizeof(StTensor), cmp_begin);
    size_t pos = 0;
    for (int i = 0; i < f->n_tensors; i++) {
        const StTensor *t = &f->tensors[i];
        if (t->begin < pos)
            FAIL("%s: tensors '%s' and '%s' overlap (data_offsets [%zu, %zu] and [%zu, %zu])", path,
                 f->tensors[i - 1].name, t->name, f->tensors[i - 1].begin, f->tensors[i - 1].end, t->begin, t->end);
        if (t->begin > pos)
            FAIL("%s: gap of %zu bytes before tensor '%s' (data_offsets begin %zu, previous tensor ends at %zu)", path,
                 t->begin - pos, t->name, t->begin, pos);
        pos = t->end;
    }
    if (pos != f->data_size)
        FAIL("%s: %zu bytes of data after the last tensor (tensors end at %zu, data region is %zu bytes)", path,
             f->data_size - pos, pos, f->data_size);
    cJSON_Delete(root);
    return 0;
fail:
    cJSON_Delete(root);
    st_close(f);
    return -1;
}

const StTensor *st_find(const StFile *f, const char *name) {
    for (int i = 0; i < f->n_tensors; i++) if (!strcmp(f->tensors[i].name, name)) return &f->tensors[i];
    return NULL;
}

const char *st_meta(const StFile *f, const char *key) {
    for (int i = 0; i < f->n_meta; i++) if (!strcmp(f->meta_keys[i], key)) return f->meta_vals[i];
    return NULL;
}

const void *st_tensor_data(const StFile *f, const StTensor *t) { return f->data + t->begin; }

static float f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h >> 15) << 31, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
    float v;
    if (exp == 0) v = ldexpf((float)man, -24);                             // zero / subnormal
    else if (exp == 31) v = man ? NAN : INFINITY;
    else v = ldexpf((float)(man | 0x400), (int)exp - 25);
    uint32_t u; memcpy(&u, &v, 4); u |= sign; memcpy(&v, &u, 4);
    return v;
}

static uint16_t f32_to_f16(float f) {  // round to nearest even
    uint32_t u; memcpy(&u, &f, 4);
    uint32_t sign = (u >> 16) & 0x8000;
    float a = fabsf(f);
    if (isnan(f)) return (uint16_t)(sign | 0x7e00);
    if (a >= 65520.0f) return (uint16_t)(sign | 0x7c00);
    if (a < 6.103515625e-05f) return (uint16_t)(sign | (uint16_t)lrintf(a * 16777216.0f));  // subnormal: units of 2^-24
    int e;
    float m = frexpf(a, &e);                           // a = m * 2^e, m in [0.5, 1)
    uint32_t mant = (uint32_t)lrintf(m * 2048.0f);     // 11 bits incl. the implicit one
    if (mant == 2048) { mant = 1024; e++; }
    return (uint16_t)(sign | ((uint32_t)(e + 14) << 10) | (mant - 1024));
}

int st_read_f32(const StFile *f, const StTensor *t, float *dst, char *err, size_t n) {
    const unsigned char *src = st_tensor_data(f, t);
    switch (t->dtype) {
    case ST_F32: memcpy(dst, src, t->numel * 4); return 0;
    case ST_BF16:
        for (size_t i = 0; i < t->numel; i++) { uint16_t h; memcpy(&h, src + 2 * i, 2); dst[i] = sllm_bf16_to_f32(h); }
        return 0;
    case ST_F16:
        for (size_t i = 0; i < t->numel; i++) { uint16_t h; memcpy(&h, src + 2 * i, 2); dst[i] = f16_to_f32(h); }
        return 0;
    case ST_F64:
        for (size_t i = 0; i < t->numel; i++) { double d; memcpy(&d, src + 8 * i, 8); dst[i] = (float)d; }
        return 0;
    default:
        snprintf(err, n, "tensor '%s' has dtype %s; only F32, BF16, F16 and F64 convert to float32", t->name, st_dtype_name(t->dtype));
        return -1;
    }
}

// ---- writer --------------------------------------------------------------------------------------

static size_t tw_numel(const StWriteTensor *t) {
    size_t k = 1;
    for (int d = 0; d < t->ndim; d++) k *= (size_t)t->shape[d];
    return k;
}

#undef FAIL
#define FAIL(...) do { snprintf(err, n, __VA_ARGS__); goto fail; } while (0)

int st_write(const char *path, const StWriteTensor *ts, int n_tensors, const char *const *meta_keys,
             const char *const *meta_vals, int n_meta, char *err, size_t n) {
    cJSON *root = cJSON_CreateObject();
    char *json = NULL;
    FILE *fp = NULL;
    unsigned char *chunk = NULL;
    if (!root) FAIL("%s: out of memory", path);
    if (n_meta > 0) {
        cJSON *meta = cJSON_AddObjectToObject(root, "__metadata__");
        for (int i = 0; i < n_meta; i++) cJSON_AddStringToObject(meta, meta_keys[i], meta_vals[i]);
    }
    size_t off = 0;
    for (int i = 0; i < n_tensors; i++) {
        const StWriteTensor *t = &ts[i];
        if ((unsigned)t->dtype >= ST_NUM_DTYPES) FAIL("%s: tensor '%s': invalid dtype %d", path, t->name, (int)t->dtype);
        if (t->ndim < 0 || t->ndim > ST_MAX_DIMS) FAIL("%s: tensor '%s': ndim %d not in [0, %d]", path, t->name, t->ndim, ST_MAX_DIMS);
        if (!(t->src_dtype == t->dtype || (t->src_dtype == ST_F32 && (t->dtype == ST_BF16 || t->dtype == ST_F16 || t->dtype == ST_F64))))
            FAIL("%s: tensor '%s': cannot convert %s data to %s", path, t->name, st_dtype_name(t->src_dtype), st_dtype_name(t->dtype));
        if (!strcmp(t->name, "__metadata__") || cJSON_GetObjectItemCaseSensitive(root, t->name))
            FAIL("%s: tensor name '%s' used twice (or reserved)", path, t->name);
        cJSON *e = cJSON_AddObjectToObject(root, t->name);
        cJSON_AddStringToObject(e, "dtype", st_dtype_name(t->dtype));
        cJSON *shape = cJSON_AddArrayToObject(e, "shape");
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0) FAIL("%s: tensor '%s': negative shape[%d]", path, t->name, d);
            cJSON_AddItemToArray(shape, cJSON_CreateNumber((double)t->shape[d]));
        }
        size_t bytes = tw_numel(t) * st_dtype_size(t->dtype);
        cJSON *offs = cJSON_AddArrayToObject(e, "data_offsets");
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)off));
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)(off + bytes)));
        off += bytes;
    }
    json = cJSON_PrintUnformatted(root);
    if (!json) FAIL("%s: out of memory printing the header", path);
    size_t jlen = strlen(json), hlen = (jlen + 7) / 8 * 8;  // pad with spaces: data starts 8-byte aligned
    fp = fopen(path, "wb");
    if (!fp) FAIL("%s: cannot create: %s", path, strerror(errno));
    unsigned char lenbuf[8];
    for (int i = 0; i < 8; i++) lenbuf[i] = (unsigned char)(((uint64_t)hlen >> (8 * i)) & 0xff);
    if (fwrite(lenbuf, 1, 8, fp) != 8 || fwrite(json, 1, jlen, fp) != jlen) FAIL("%s: write failed: %s", path, strerror(errno));
    for (size_t i = jlen; i < hlen; i++) if (fputc(' ', fp) == EOF) FAIL("%s: write failed: %s", path, strerror(errno));
    enum { CHUNK = 1 << 16 };
    chunk = malloc(CHUNK * 8);
    if (!chunk) FAIL("%s: out of memory", path);
    for (int i = 0; i < n_tensors; i++) {
        const StWriteTensor *t = &ts[i];
        size_t k = tw_numel(t), es = st_dtype_size(t->dtype);
        if (t->src_dtype == t->dtype) {
            if (k && fwrite(t->data, es, k, fp) != k) FAIL("%s: write of tensor '%s' failed: %s", path, t->name, strerror(errno));
            continue;
        }
        const float *src = t->data;
        for (size_t s = 0; s < k; s += CHUNK) {
            size_t m = k - s < CHUNK ? k - s : CHUNK;
            for (size_t j = 0; j < m; j++) {
                float v = src[s + j];
                if (t->dtype == ST_BF16) { uint16_t h = sllm_f32_to_bf16(v); memcpy(chunk + 2 * j, &h, 2); }
                else if (t->dtype == ST_F16) { uint16_t h = f32_to_f16(v); memcpy(chunk + 2 * j, &h, 2); }
                else { double d = v; memcpy(chunk + 8 * j, &d, 8); }
            }
            if (fwrite(chunk, es, m, fp) != m) FAIL("%s: write of tensor '%s' failed: %s", path, t->name, strerror(errno));
        }
    }
    if (fflush(fp) != 0 || fsync(fileno(fp)) != 0) FAIL("%s: flush/fsync failed: %s", path, strerror(errno));
    if (fclose(fp) != 0) { fp = NULL; FAIL("%s: close failed: %s", path, strerror(errno)); }
    free(chunk);
    free(json);
    cJSON_Delete(root);
    return 0;
fail:
    if (fp) fclose(fp);
    free(chunk);
    free(json);
    cJSON_Delete(root);
    return -1;
}
