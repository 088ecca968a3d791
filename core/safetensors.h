// core/safetensors.h: reader and writer of the safetensors format (Hugging Face).
//
// File layout: [u64 little-endian header length N][N bytes of JSON header][data]
//   header: {"<name>": {"dtype": "F32", "shape": [d0, d1, ...], "data_offsets": [begin, end]}, ...,
//            "__metadata__": {"<key>": "<string value>", ...}}   (metadata optional)
//   offsets are relative to the start of the data region; the writer pads the header with spaces to
//   a multiple of 8 bytes. The reader is strict (like the reference Rust library): every tensor's
//   byte size must equal numel * dtype size, tensors must not overlap and must cover the data region
//   exactly, and the data region must end at the end of the file.
// No function here exits the process: errors are returned (-1) with a message in err (size n).
#ifndef SLLM_SAFETENSORS_H
#define SLLM_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ST_F32 = 0, ST_BF16, ST_F16, ST_F64, ST_I64, ST_I32, ST_I16, ST_I8, ST_U8, ST_BOOL, ST_NUM_DTYPES } StDtype;

#define ST_MAX_DIMS 8

// Name ("F32", "BF16", ...) and element size in bytes of a dtype.
const char *st_dtype_name(StDtype d);
size_t st_dtype_size(StDtype d);
// Parse a dtype name; returns -1 if unknown.
int st_dtype_from_name(const char *name);

typedef struct {
    char *name;                  // tensor name (owned by the StFile)
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    size_t numel;
    size_t begin, end;           // byte offsets in the data region
} StTensor;

typedef struct {
    void *map;                   // the whole file, mmap'ed read-only
    size_t file_size;
    const unsigned char *data;   // start of the data region
    size_t data_size;
    int n_tensors;
    StTensor *tensors;           // in file order (sorted by begin)
    int n_meta;
    char **meta_keys, **meta_vals;
} StFile;

// Open and fully validate a file. On error returns -1, err says what and where, *f is left closed.
int st_open(StFile *f, const char *path, char *err, size_t n);
void st_close(StFile *f);
// Look up a tensor / a metadata value by name (NULL if absent).
const StTensor *st_find(const StFile *f, const char *name);
const char *st_meta(const StFile *f, const char *key);
// Raw bytes of a tensor (little-endian, dtype as stored).
const void *st_tensor_data(const StFile *f, const StTensor *t);
// Convert a F32, BF16, F16 or F64 tensor to float32 into dst [t->numel]. -1 (with err) for other dtypes.
int st_read_f32(const StFile *f, const StTensor *t, float *dst, char *err, size_t n);

// A tensor to write. data holds numel elements of src_dtype; src_dtype must equal dtype, or be
// ST_F32 with dtype ST_BF16 / ST_F16 / ST_F64 (converted while writing; bf16 rounds to nearest even).
typedef struct {
    const char *name;
    StDtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;
    StDtype src_dtype;
} StWriteTensor;

// Write a file (tensors in the given order). meta: n_meta key/value string pairs (or NULL, 0).
// The file is written with buffered stdio and fsync'ed before close. Names must be unique.
int st_write(const char *path, const StWriteTensor *ts, int n_tensors, const char *const *meta_keys,
             const char *const *meta_vals, int n_meta, char *err, size_t n);

#ifdef __cplusplus
}
#endif
#endif  // SLLM_SAFETENSORS_H
