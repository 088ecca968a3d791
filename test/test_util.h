// test/test_util.h: helpers shared by the tests (header-only).
#ifndef SLLM_TEST_UTIL_H
#define SLLM_TEST_UTIL_H

#include <ftw.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dataloader/shard.h"
#include "rng.h"

// A synthetic training shard of ntok tokens in [0, V): a noisy repeating pattern (learnable, so a loss moves: token
// i is (7 i + (i / 13) % 5) mod V, one in ten replaced by a random offset from rng). 0 on success, else -1 with err.
static inline int test_write_pattern_shard(const char *path, int ntok, int V, Rng *rng, char *err, size_t n) {
    int32_t *t = (int32_t *)malloc((size_t)ntok * sizeof(int32_t));
    if (!t) { snprintf(err, n, "out of memory"); return -1; }
    for (int i = 0; i < ntok; i++)
        t[i] = (int32_t)((i * 7 + (i / 13) % 5 + (rng_below(rng, 10) == 0 ? (int)rng_below(rng, V) : 0)) % V);
    const int rc = shard_write(path, t, ntok, 2, err, n);
    free(t);
    return rc;
}

// Relative Frobenius error ||x - ref|| / ||ref|| of a float result against a float64 reference;
// infinity if x holds a NaN or an infinity (an unwritten or poisoned element).
static inline double rel_err_f32(const float *x, const double *ref, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(x[i])) return INFINITY;
        double d = x[i] - ref[i];
        num += d * d;
        den += ref[i] * ref[i];
    }
    return sqrt(num) / fmax(sqrt(den), 1e-30);
}

// A fresh private directory /tmp/<prefix>XXXXXX for a test's files; 0 on success.
static inline int test_tmpdir_make(char *buf, size_t n, const char *prefix) {
    if (snprintf(buf, n, "/tmp/%sXXXXXX", prefix) >= (int)n) return -1;
    return mkdtemp(buf) ? 0 : -1;
}

static inline int test_tmpdir_rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw) {
    (void)st; (void)flag; (void)ftw;
    return remove(path);
}
// Remove a test directory and everything below it; 0 on success.
static inline int test_tmpdir_remove(const char *dir) {
    return nftw(dir, test_tmpdir_rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

// The seed of a random test: SLLM_TEST_SEED when set (an unsigned integer), else one from the clock and the pid.
// Printed either way, so any failure can be repeated. Each test binary calls it once and derives its streams.
static inline uint64_t test_seed(const char *name) {
    static int printed = 0;
    static uint64_t seed;
    if (printed) return seed;
    const char *s = getenv("SLLM_TEST_SEED");
    if (s && *s) {
        char *end = NULL;
        seed = strtoull(s, &end, 10);
        if (*end) { fprintf(stderr, "%s: SLLM_TEST_SEED=\"%s\" is not an unsigned integer\n", name, s); exit(1); }
    } else {
        seed = ((uint64_t)time(NULL) * 2654435761ull) ^ (uint64_t)getpid();
    }
    printf("%s: seed %llu (SLLM_TEST_SEED=%llu repeats this run)\n", name, (unsigned long long)seed, (unsigned long long)seed);
    fflush(stdout);
    printed = 1;
    return seed;
}

// Runs a shell command, echoing it. When it fails and redirects its output ("> file"), the last lines of that
// file are printed, so the test log shows why. Returns system()'s status.
static inline int test_run_cmd(const char *cmd) {
    printf("  $ %s\n", cmd);
    fflush(stdout);
    int rc = system(cmd);
    const char *r = strstr(cmd, "> ");
    if (rc != 0 && r) {
        char log[512], tail[600];
        if (sscanf(r + 2, "%511s", log) == 1) {
            printf("  (exit status %d; the last lines of %s:)\n", rc, log);
            fflush(stdout);
            snprintf(tail, sizeof tail, "tail -n 15 '%s' | sed 's/^/    | /'", log);
            if (system(tail) != 0) printf("    (cannot read it)\n");
        }
    }
    return rc;
}

#endif  // SLLM_TEST_UTIL_H
