// core/logger.h: training log to stdout and to a file, plus a machine-readable metrics file.
//   logger_printf: formatted line(s) to stdout and (if open) <dir>/train.log, flushed at once.
//   logger_metric: one line "key:value ..." to <dir>/metrics.log only (full float precision, for tools
//                  and the resume bit-exactness test).
// No globals: the caller owns the Logger. Files are opened in append mode when resuming.
#ifndef SLLM_LOGGER_H
#define SLLM_LOGGER_H

#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    FILE *log;      // <dir>/train.log or NULL
    FILE *metrics;  // <dir>/metrics.log or NULL
    int quiet;      // 1: nothing to stdout
} Logger;

// dir may be NULL (stdout only). append: 1 keeps existing files (resume), 0 truncates.
// Returns 0, or -1 with a message in err.
int logger_open(Logger *lg, const char *dir, int append, char *err, size_t n);
void logger_printf(Logger *lg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void logger_metric(Logger *lg, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void logger_close(Logger *lg);
// Resume: drops the lines of <dir>/metrics.log that belong to steps after `step` (lines "s:N ..." with N > step,
// written after the checkpoint the run resumes from), so the file never holds a step twice. The file is
// rewritten through a temp file and a rename. A missing file is not an error. Returns the number of lines
// dropped, or -1 with a message in err.
int logger_truncate_metrics(const char *dir, int step, char *err, size_t n);

// mkdir -p. Returns 0, or -1 with a message in err.
int make_dirs(const char *path, char *err, size_t n);

#ifdef __cplusplus
}
#endif
#endif  // SLLM_LOGGER_H
