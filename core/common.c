// core/common.c: see common.h.
#define _POSIX_C_SOURCE 200809L
#include "common.h"

#include <errno.h>
#include <time.h>

static char g_fatal_tag[96];
void sllm_set_fatal_tag(const char *tag) { snprintf(g_fatal_tag, sizeof g_fatal_tag, "%s", tag ? tag : ""); }

void sllm_fatal_at(const char *file, int line, const char *fmt, ...) {
    fflush(stdout);
    fprintf(stderr, "error: %s", g_fatal_tag);
    va_list ap;
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  (at %s:%d)\n", file, line);
    exit(1);
}

void *sllm_malloc_at(size_t n, const char *file, int line) {
    void *p = malloc(n ? n : 1);
    if (!p) sllm_fatal_at(file, line, "out of host memory allocating %zu bytes", n);
    return p;
}

void *sllm_calloc_at(size_t n, size_t size, const char *file, int line) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) sllm_fatal_at(file, line, "out of host memory allocating %zu x %zu bytes", n, size);
    return p;
}

FILE *sllm_fopen_at(const char *path, const char *mode, const char *file, int line) {
    FILE *f = fopen(path, mode);
    if (!f) sllm_fatal_at(file, line, "cannot open '%s' (mode %s): %s", path, mode, strerror(errno));
    return f;
}

void sllm_fread_at(void *dst, size_t size, size_t n, FILE *f, const char *what, const char *file, int line) {
    size_t got = fread(dst, size, n, f);
    if (got != n)
        sllm_fatal_at(file, line, "short read of %s: wanted %zu items of %zu bytes, got %zu (%s)", what, n,
                      size, got, ferror(f) ? strerror(errno) : "unexpected end of file");
}

void sllm_fwrite_at(const void *src, size_t size, size_t n, FILE *f, const char *what, const char *file, int line) {
    size_t put = fwrite(src, size, n, f);
    if (put != n)
        sllm_fatal_at(file, line, "short write of %s: wanted %zu items of %zu bytes, wrote %zu (%s)", what, n,
                      size, put, strerror(errno));
}

char *sllm_read_file(const char *path, size_t *size_out, const char **err) {
    FILE *f = fopen(path, "rb");
    if (!f) { if (err) *err = "cannot open file"; return NULL; }
    if (fseeko(f, 0, SEEK_END) != 0) { fclose(f); if (err) *err = "cannot seek"; return NULL; }
    off_t sz = ftello(f);
    if (sz < 0 || fseeko(f, 0, SEEK_SET) != 0) { fclose(f); if (err) *err = "cannot tell size"; return NULL; }
    char *buf = malloc((size_t)sz + 1);
    if (!buf) { fclose(f); if (err) *err = "out of memory"; return NULL; }
    if (sz > 0 && fread(buf, 1, (size_t)sz, f) != (size_t)sz) {
        free(buf); fclose(f); if (err) *err = "short read"; return NULL;
    }
    fclose(f);
    buf[sz] = 0;
    if (size_out) *size_out = (size_t)sz;
    return buf;
}

double sllm_time_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
