// core/logger.c: see logger.h.
#include "logger.h"

#include <errno.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/types.h>

int make_dirs(const char *path, char *err, size_t n) {
    char buf[4096];
    size_t len = strlen(path);
    if (len == 0 || len >= sizeof buf) {
        snprintf(err, n, "make_dirs: bad path length %zu for \"%s\"", len, path);
        return -1;
    }
    memcpy(buf, path, len + 1);
    for (size_t i = 1; i <= len; i++) {
        if (buf[i] == '/' || buf[i] == 0) {
            char c = buf[i];
            buf[i] = 0;
            if (mkdir(buf, 0755) != 0 && errno != EEXIST) {
                snprintf(err, n, "cannot create directory \"%s\": %s", buf, strerror(errno));
                return -1;
            }
            buf[i] = c;
        }
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) {
        snprintf(err, n, "\"%s\" exists but is not a directory", path);
        return -1;
    }
    return 0;
}

int logger_open(Logger *lg, const char *dir, int append, char *err, size_t n) {
    memset(lg, 0, sizeof *lg);
    if (!dir) return 0;
    if (make_dirs(dir, err, n) != 0) return -1;
    char path[4200];
    snprintf(path, sizeof path, "%s/train.log", dir);
    lg->log = fopen(path, append ? "a" : "w");
    if (!lg->log) {
        snprintf(err, n, "cannot open log file \"%s\": %s", path, strerror(errno));
        return -1;
    }
    snprintf(path, sizeof path, "%s/metrics.log", dir);
    lg->metrics = fopen(path, append ? "a" : "w");
    if (!lg->metrics) {
        snprintf(err, n, "cannot open metrics file \"%s\": %s", path, strerror(errno));
        fclose(lg->log);
        lg->log = NULL;
        return -1;
    }
    return 0;
}

void logger_printf(Logger *lg, const char *fmt, ...) {
    va_list ap;
    if (!lg->quiet) {
        va_start(ap, fmt);
        vprintf(fmt, ap);
        va_end(ap);
        fflush(stdout);
    }
    if (lg->log) {
        va_start(ap, fmt);
        vfprintf(lg->log, fmt, ap);
        va_end(ap);
        fflush(lg->log);
    }
}

void logger_metric(Logger *lg, const char *fmt, ...) {
    if (!lg->metrics) return;
    va_list ap;
    va_start(ap, fmt);
    vfprintf(lg->metrics, fmt, ap);
    va_end(ap);
    fflush(lg->metrics);
}

void logger_close(Logger *lg) {
    if (lg->log) fclose(lg->log);
    if (lg->metrics) fclose(lg->metrics);
    memset(lg, 0, sizeof *lg);
}

int logger_truncate_metrics(const char *dir, int step, char *err, size_t n) {
    char path[4200], tmp[4300];
    snprintf(path, sizeof path, "%s/metrics.log", dir);
    FILE *in = fopen(path, "r");
    if (!in) {
        if (errno == ENOENT) return 0;
        snprintf(err, n, "cannot read %s: %s", path, strerror(errno));
        return -1;
    }
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *out = fopen(tmp, "w");
    if (!out) { snprintf(err, n, "cannot write %s: %s", tmp, strerror(errno)); fclose(in); return -1; }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    int dropped = 0, werr = 0;
    while ((len = getline(&line, &cap, in)) > 0) {
        int s;
        if (sscanf(line, "s:%d", &s) == 1 && s > step) { dropped++; continue; }
        if (fwrite(line, 1, (size_t)len, out) != (size_t)len) werr = 1;
    }
    free(line);
    fclose(in);
    if (fclose(out) != 0 || werr) { snprintf(err, n, "cannot write %s: %s", tmp, strerror(errno)); remove(tmp); return -1; }
    if (rename(tmp, path) != 0) { snprintf(err, n, "cannot replace %s: %s", path, strerror(errno)); remove(tmp); return -1; }
    return dropped;
}
