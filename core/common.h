// core/common.h: plain C helpers shared by every binary and test.
// Fatal errors print what went wrong, where (file:line) and a hint, then exit(1). Nothing here
// allocates hidden global state.
#ifndef SLLM_COMMON_H
#define SLLM_COMMON_H

#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

// Print "error: <message>" plus the source location and exit(1).
void sllm_fatal_at(const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4), noreturn));
// Prefix of every SLLM_FATAL message after "error: " (e.g. "rank 1 of 4: " in a multi-process run; "" by default).
void sllm_set_fatal_tag(const char *tag);
#define SLLM_FATAL(...) sllm_fatal_at(__FILE__, __LINE__, __VA_ARGS__)
#define SLLM_CHECK(cond, ...) do { if (!(cond)) sllm_fatal_at(__FILE__, __LINE__, __VA_ARGS__); } while (0)

// Allocation and file wrappers that die with a clear message (file:line, size or path, errno text).
void *sllm_malloc_at(size_t n, const char *file, int line);
void *sllm_calloc_at(size_t n, size_t size, const char *file, int line);
FILE *sllm_fopen_at(const char *path, const char *mode, const char *file, int line);
void sllm_fread_at(void *dst, size_t size, size_t n, FILE *f, const char *what, const char *file, int line);
void sllm_fwrite_at(const void *src, size_t size, size_t n, FILE *f, const char *what, const char *file, int line);
#define sllm_malloc(n) sllm_malloc_at((n), __FILE__, __LINE__)
#define sllm_calloc(n, s) sllm_calloc_at((n), (s), __FILE__, __LINE__)
#define sllm_fopen(p, m) sllm_fopen_at((p), (m), __FILE__, __LINE__)
#define sllm_fread(d, s, n, f, what) sllm_fread_at((d), (s), (n), (f), (what), __FILE__, __LINE__)
#define sllm_fwrite(d, s, n, f, what) sllm_fwrite_at((d), (s), (n), (f), (what), __FILE__, __LINE__)

// Read a whole file into a malloc'd buffer (NUL-terminated for convenience). Returns NULL and sets
// *err (static string) instead of exiting, so callers can report their own context.
char *sllm_read_file(const char *path, size_t *size_out, const char **err);

// Wall-clock seconds (CLOCK_MONOTONIC).
double sllm_time_s(void);

// bf16 <-> fp32 on the host. Round to nearest even, NaN kept quiet.
static inline uint16_t sllm_f32_to_bf16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);  // quiet NaN
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float sllm_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
}
static inline float sllm_round_bf16(float f) { return sllm_bf16_to_f32(sllm_f32_to_bf16(f)); }

#ifdef __cplusplus
}
#endif
#endif  // SLLM_COMMON_H
