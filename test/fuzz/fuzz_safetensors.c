// Fuzz target: a safetensors file (core/safetensors.c st_open: header JSON, dtypes, shapes, offsets). A file that
// opens must have every tensor's bytes inside the data region and float tensors convertible.
#include "fuzz_util.h"
#include "safetensors.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512], err[1024];
    fuzz_write("model.safetensors", data, size, path, sizeof path);
    StFile f;
    if (st_open(&f, path, err, sizeof err) != 0) return 0;
    for (int i = 0; i < f.n_tensors; i++) {
        const StTensor *t = &f.tensors[i];
        if (st_find(&f, t->name) == NULL) abort();
        if (t->numel > (1u << 20)) continue;
        float *dst = malloc((t->numel ? t->numel : 1) * sizeof(float));
        (void)st_read_f32(&f, t, dst, err, sizeof err);
        free(dst);
    }
    (void)st_meta(&f, "format");
    st_close(&f);
    return 0;
}
