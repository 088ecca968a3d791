// GPU test of the wgmma kernels' hang guard (twg_mbar_wait in twell/gate_wgmma.cuh): an mbarrier wait that never
// completes must fail the launch with an error after TWELL_WGMMA_TIMEOUT_NS, never hang the process. The guard
// kills the launch with a store to address 0 (cudaErrorIllegalAddress), since a `trap` would make ptxas ignore the
// kernels' setmaxnreg register split.
//
// Each case runs in a forked child (a failed launch leaves the CUDA context unusable; the parent never touches
// CUDA), which reports through its exit code: 0 = as expected, 77 = no GPU (the test is skipped), else a failure
// with a message. The parent kills a child that takes more than 60 s (a hang = a failed test).
//   - control: the barrier completes (one arrive): the kernel returns cudaSuccess;
//   - no arrive: the wait must fail the launch with cudaErrorIllegalAddress after ~0.1 s (the timeout below).
#define TWELL_WGMMA_TIMEOUT_NS 100000000ull  // 0.1 s instead of 4 s
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "twell/gate_wgmma.cuh"
#include "gpu_harness.h"

// One CTA of 128 threads waits on one mbarrier (count 1); thread 0 arrives on it iff `arrive`.
__global__ void hang_guard_kernel(int arrive) {
    __shared__ uint64_t bar;
    const uint32_t a = hp_smem_addr(&bar);
    if (threadIdx.x == 0) {
        hp_mbar_init(a, 1);
        hp_fence_barrier_init();
    }
    __syncthreads();
    if (arrive && threadIdx.x == 0) hp_mbar_arrive(a);
    twg_mbar_wait(a, 0);
}

// The child: launches the kernel and checks the launch's result and time. Never returns.
static void child_case(int arrive) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n < 1) _exit(77);
    const double t0 = sllm_time_s();
    hang_guard_kernel<<<1, 128>>>(arrive);
    cudaError_t launch = cudaGetLastError();
    cudaError_t sync = cudaDeviceSynchronize();
    const double dt = sllm_time_s() - t0;
    printf("    %s: launch %s, synchronize %s after %.3f s\n", arrive ? "control (one arrive)" : "no arrive",
           cudaGetErrorName(launch), cudaGetErrorName(sync), dt);
    fflush(stdout);
    if (launch != cudaSuccess) _exit(2);
    if (arrive) _exit(sync == cudaSuccess ? 0 : 3);
    if (sync != cudaErrorIllegalAddress) _exit(4);  // the guard's deliberate fault, nothing else
    if (dt < 0.09) _exit(5);                         // it must have waited its timeout first
    _exit(0);
}

// Runs child_case(arrive) in a child process with a 60 s limit; returns its exit code (-1: killed / crashed).
static int run_child(int arrive) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0) fail_msg("fork failed");
    if (pid == 0) child_case(arrive);
    const double t0 = sllm_time_s();
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid) break;
        if (sllm_time_s() - t0 > 60.0) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            fail_msg("the kernel (arrive=%d) still ran after 60 s: the hang guard did not fire", arrive);
        }
        usleep(10000);
    }
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void test_guard_control(void **state) {
    (void)state;
    const int rc = run_child(1);
    if (rc == 77) skip();
    if (rc != 0) fail_msg("control case: child exit %d (expected 0: a completed barrier must not fail)", rc);
}

static void test_guard_fires(void **state) {
    (void)state;
    const int rc = run_child(0);
    if (rc == 77) skip();
    if (rc != 0)
        fail_msg("no-arrive case: child exit %d (2: launch error, 4: not cudaErrorIllegalAddress, 5: failed before the "
                 "timeout, -1: crashed)", rc);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_guard_control),
        cmocka_unit_test(test_guard_fires),
    };
    GPU_TEST_PREFLIGHT("test_hang_guard", tests);
    return cmocka_run_group_tests_name("hang_guard", tests, NULL, NULL);
}
