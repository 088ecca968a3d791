// test/gpu_harness.h: the accounting rules every GPU test binary follows (header-only, CUDA).
//
//   gpu_test_preflight(argc, argv, name, n_tests) at the top of main(), before any other CUDA call:
//   --count              prints "tests: N" and exits 0, so test/run_tests.sh counts the tests of a binary it
//                        does not run (no GPU) as skipped instead of dropping them from the summary;
//   SLLM_GPU_REQUIRED=1  (set by run_tests.sh when nvidia-smi lists a GPU): a GPU that CUDA cannot start
//                        (cudaGetDeviceCount / cudaSetDevice / a context fails) reports all N tests as failed
//                        in cmocka's format and exits 1, instead of letting every test skip.
// The CUDA probe runs in a forked child, so the parent stays free of CUDA state (test_hang_guard forks its
// own children later, which CUDA forbids after the parent initialised the driver).
#ifndef SLLM_GPU_HARNESS_H
#define SLLM_GPU_HARNESS_H

#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

// 0 when CUDA starts on device 0, else a non-zero code; the reason is printed by the child.
static inline int gpu_harness_probe(void) {
    fflush(stdout);
    fflush(stderr);
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        int n = 0;
        cudaError_t e = cudaGetDeviceCount(&n);
        if (e != cudaSuccess) { fprintf(stderr, "gpu: cudaGetDeviceCount: %s\n", cudaGetErrorString(e)); _exit(2); }
        if (n < 1) { fprintf(stderr, "gpu: cudaGetDeviceCount found no device\n"); _exit(3); }
        e = cudaSetDevice(0);
        if (e == cudaSuccess) e = cudaFree(0);  // creates the context
        if (e != cudaSuccess) { fprintf(stderr, "gpu: cudaSetDevice(0)/context: %s\n", cudaGetErrorString(e)); _exit(4); }
        _exit(0);
    }
    int st = 0;
    if (waitpid(pid, &st, 0) != pid) return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

// Returns -1 when main() should go on and run its tests, else the exit code main() must return.
static inline int gpu_test_preflight(int argc, char **argv, const char *name, int n_tests) {
    for (int i = 1; i < argc; i++)
        if (!strcmp(argv[i], "--count")) { printf("tests: %d\n", n_tests); return 0; }
    const char *req = getenv("SLLM_GPU_REQUIRED");
    if (req && !strcmp(req, "1")) {
        int rc = gpu_harness_probe();
        if (rc != 0) {
            printf("%s: a GPU is listed (SLLM_GPU_REQUIRED=1) but CUDA cannot use it (probe exit %d): "
                   "all %d tests fail\n", name, rc, n_tests);
            printf("[  FAILED  ] %d test(s), listed below:\n", n_tests);
            return 1;
        }
    }
    return -1;
}
// SLLM_TEST_FILTER=<cmocka pattern> runs only the matching tests (for repeating one case, dev/device/seed_ab.sh).
#define GPU_TEST_PREFLIGHT(name, tests)                                                             \
    do {                                                                                            \
        int pre_rc_ = gpu_test_preflight(argc, argv, name, (int)(sizeof(tests) / sizeof(tests[0]))); \
        if (pre_rc_ >= 0) return pre_rc_;                                                           \
        if (getenv("SLLM_TEST_FILTER")) cmocka_set_test_filter(getenv("SLLM_TEST_FILTER"));         \
    } while (0)

// The test seed: SLLM_TEST_SEED when set, else one from the clock and the pid; printed either way.
static inline unsigned long long gpu_test_seed(const char *name) {
    const char *s = getenv("SLLM_TEST_SEED");
    unsigned long long seed;
    if (s && *s) {
        char *end = NULL;
        seed = strtoull(s, &end, 10);
        if (*end) { fprintf(stderr, "%s: SLLM_TEST_SEED=\"%s\" is not an integer\n", name, s); exit(1); }
    } else {
        seed = ((unsigned long long)time(NULL) * 2654435761ull) ^ (unsigned long long)getpid();
    }
    printf("%s: seed %llu (SLLM_TEST_SEED=%llu repeats this run)\n", name, seed, seed);
    return seed;
}

#endif  // SLLM_GPU_HARNESS_H
