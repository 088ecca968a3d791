// test/fuzz/fuzz_util.h: helpers of the libFuzzer targets (make fuzz; test/fuzz/run.sh). The loaders under test
// take file paths, so each input is written to a private file of this process first.
#ifndef SLLM_FUZZ_UTIL_H
#define SLLM_FUZZ_UTIL_H

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

// A private directory for this process's files (created once).
static inline const char *fuzz_dir(void) {
    static char dir[256];
    if (!dir[0]) {
        struct stat st;  // in memory when /dev/shm exists: the loaders read files, the disk is not under test
        snprintf(dir, sizeof dir, "%s/sllm_fuzz_%ld", stat("/dev/shm", &st) == 0 ? "/dev/shm" : "/tmp", (long)getpid());
        mkdir(dir, 0700);
    }
    return dir;
}

// Writes data to <fuzz_dir>/<name>; returns the path (static buffer per call site is the caller's business).
static inline void fuzz_write(const char *name, const uint8_t *data, size_t size, char *path, size_t n) {
    snprintf(path, n, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "wb");
    if (!f) abort();
    if (size && fwrite(data, 1, size, f) != size) abort();
    fclose(f);
}

#endif  // SLLM_FUZZ_UTIL_H
