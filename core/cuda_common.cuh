// core/cuda_common.cuh: CUDA error checks, bf16 helpers, small device utilities.
// Every CUDA/cuBLAS call is checked; a failure names the call, the error and file:line, then exits.
#ifndef SLLM_CUDA_COMMON_CUH
#define SLLM_CUDA_COMMON_CUH

#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

#include "common.h"

typedef __nv_bfloat16 bf16;

// A multi-GPU run installs a handler (core/dist.cuh) through which a failed CUDA call names the rank, says what
// the other ranks were doing, and ends every rank; it does not return. NULL: print and exit(1).
static void (*g_cuda_error_handler)(const char *msg) = NULL;

static inline void cuda_check_at(cudaError_t e, const char *what, const char *file, int line) {
    if (e != cudaSuccess) {
        fflush(stdout);
        char msg[768];
        snprintf(msg, sizeof msg, "CUDA call failed: %s\n  -> %s (%s)\n  (at %s:%d)", what, cudaGetErrorString(e),
                 cudaGetErrorName(e), file, line);
        if (g_cuda_error_handler) g_cuda_error_handler(msg);
        fprintf(stderr, "error: %s\n", msg);
        exit(1);
    }
}
#define cudaCheck(call) cuda_check_at((call), #call, __FILE__, __LINE__)
// After a kernel launch: catches bad launch configurations at once.
#define cudaCheckLaunch() cuda_check_at(cudaGetLastError(), "kernel launch", __FILE__, __LINE__)

static inline void cublas_check_at(cublasStatus_t s, const char *what, const char *file, int line) {
    if (s != CUBLAS_STATUS_SUCCESS) {
        fflush(stdout);
        fprintf(stderr, "error: cuBLAS call failed: %s\n  -> status %d (%s)\n  (at %s:%d)\n", what, (int)s,
                cublasGetStatusString(s), file, line);
        exit(1);
    }
}
#define cublasCheck(call) cublas_check_at((call), #call, __FILE__, __LINE__)

static inline size_t ceil_div_sz(size_t a, size_t b) { return (a + b - 1) / b; }
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))

// True when a CUDA device is usable (used by tests to skip cleanly on machines without a GPU).
static inline int cuda_device_available(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    return n > 0;
}

// For a program that cannot run without a GPU: exits with a clear message (what is missing, CUDA's own reason)
// instead of failing at its first kernel with a driver message.
static inline void cuda_require_device(const char *prog) {
    int n = 0;
    const cudaError_t e = cudaGetDeviceCount(&n);
    if (e == cudaSuccess && n > 0) return;
    fprintf(stderr, "error: %s needs an NVIDIA GPU, and CUDA sees none (%s)\n", prog,
            e == cudaSuccess ? "no device" : cudaGetErrorString(e));
    exit(1);
}

// Number of SMs of the current device (for persistent and grid-stride launches).
static inline int cuda_sm_count(void) {
    int dev = 0, sms = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    return sms;
}

// Host-side bf16 buffers: upload fp32 -> bf16 and download bf16 -> fp32.
static inline void upload_bf16(bf16 *dst, const float *src, size_t n) {
    uint16_t *tmp = (uint16_t *)sllm_malloc(n * sizeof(uint16_t));
    for (size_t i = 0; i < n; i++) tmp[i] = sllm_f32_to_bf16(src[i]);
    cudaCheck(cudaMemcpy(dst, tmp, n * sizeof(uint16_t), cudaMemcpyHostToDevice));
    free(tmp);
}
static inline void download_bf16(float *dst, const bf16 *src, size_t n) {
    uint16_t *tmp = (uint16_t *)sllm_malloc(n * sizeof(uint16_t));
    cudaCheck(cudaMemcpy(tmp, src, n * sizeof(uint16_t), cudaMemcpyDeviceToHost));
    for (size_t i = 0; i < n; i++) dst[i] = sllm_bf16_to_f32(tmp[i]);
    free(tmp);
}

// A table of named device buffers carved out of ONE cudaMalloc (llm.c style): each slice starts on a 256-byte
// boundary, everything is zeroed, and every entry's pointer is set (a 0-byte entry gets a valid, unused address).
// Returns the cudaMalloc status (nothing is assigned on failure); *total receives the bytes asked for.
typedef struct { const char *name; void **ptr; size_t bytes; } DeviceBufSpec;
static inline cudaError_t device_bufs_alloc(DeviceBufSpec *spec, int n, void **mem, size_t *total) {
    size_t off = 0;
    for (int i = 0; i < n; i++) off += (spec[i].bytes + 255) & ~(size_t)255;
    *total = off;
    cudaError_t e = cudaMalloc(mem, off);
    if (e != cudaSuccess) return e;
    cudaCheck(cudaMemset(*mem, 0, off));
    off = 0;
    for (int i = 0; i < n; i++) {
        *spec[i].ptr = (char *)*mem + off;
        off += (spec[i].bytes + 255) & ~(size_t)255;
    }
    return cudaSuccess;
}

// The sum of the 8 products of two 16-byte chunks of bf16, added to acc in element order.
__device__ __forceinline__ float dot8_bf16(uint4 a, uint4 b, float acc) {
    const __nv_bfloat162 *pa = reinterpret_cast<const __nv_bfloat162 *>(&a);
    const __nv_bfloat162 *pb = reinterpret_cast<const __nv_bfloat162 *>(&b);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 fa = __bfloat1622float2(pa[i]), fb = __bfloat1622float2(pb[i]);
        acc = fmaf(fa.x, fb.x, acc);
        acc = fmaf(fa.y, fb.y, acc);
    }
    return acc;
}

// Warp reductions.
__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// Inclusive prefix sum of one int per lane over the whole warp (every lane calls it): lane i gets v_0 + ... + v_i.
__device__ __forceinline__ int warp_scan_incl(int v) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += y;
    }
    return v;
}

// Block-wide exclusive scan of one int per thread (NT threads); s_warp: NT / 32 + 1 ints of shared memory. Returns
// the thread's exclusive prefix; *total = the sum. Every thread must call it.
template <int NT>
__device__ __forceinline__ int block_scan_excl(int v, int *s_warp, int *total) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int incl = warp_scan_incl(v);
    if (lane == 31) s_warp[warp] = incl;
    __syncthreads();
    if (warp == 0) {
        const int w = lane < NT / 32 ? s_warp[lane] : 0, wi = warp_scan_incl(w);
        if (lane < NT / 32) s_warp[lane] = wi - w;  // exclusive prefix of the warp
        if (lane == 31) s_warp[NT / 32] = wi;
    }
    __syncthreads();
    const int r = s_warp[warp] + incl - v;
    *total = s_warp[NT / 32];
    __syncthreads();  // s_warp may be reused right after
    return r;
}

// Device-to-device copy bandwidth in bytes/s, counting the bytes read and the bytes written (what HBM moves): one
// 512 MiB buffer copied 10 times after a warm-up copy, timed with events. The yardstick of a decoding step, which
// reads its weights.
static inline double device_copy_bandwidth(cudaStream_t s) {
    const size_t bytes = (size_t)512 << 20;
    void *a = NULL, *b = NULL;
    cudaCheck(cudaMalloc(&a, bytes));
    cudaCheck(cudaMalloc(&b, bytes));
    cudaCheck(cudaMemsetAsync(a, 0, bytes, s));
    cudaCheck(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    cudaCheck(cudaEventRecord(e0, s));
    for (int i = 0; i < 10; i++) cudaCheck(cudaMemcpyAsync(b, a, bytes, cudaMemcpyDeviceToDevice, s));
    cudaCheck(cudaEventRecord(e1, s));
    cudaCheck(cudaEventSynchronize(e1));
    float ms = 0.0f;
    cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
    cudaCheck(cudaEventDestroy(e0));
    cudaCheck(cudaEventDestroy(e1));
    cudaCheck(cudaFree(a));
    cudaCheck(cudaFree(b));
    return 2.0 * 10.0 * bytes / (ms * 1e-3);
}

// Programmatic dependent launch (Hopper, sm_90+; no-ops when compiled for older GPUs). A kernel launched with the
// cudaLaunchAttributeProgrammaticStreamSerialization attribute may start while the kernel before it on the stream is
// still running, once every CTA of that kernel has called pdl_launch_dependents() (or exited):
//   pdl_wait()               blocks until the previous kernel has COMPLETED and its writes are visible; call it before
//                            reading anything the previous kernel writes and before writing anything it reads. Returns
//                            at once when the launch had no programmatic dependency.
//   pdl_launch_dependents()  lets the next kernel on the stream (if launched with the attribute) start; it changes
//                            nothing about what that kernel may read: it still waits with pdl_wait().
__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
// A launch configuration for cudaLaunchKernelEx, as a programmatic dependent launch when pdl is 1 (the attribute is
// written to *attr, which must live until the launch).
static inline cudaLaunchConfig_t pdl_launch_config(dim3 grid, dim3 block, size_t smem, int pdl,
                                                   cudaLaunchAttribute *attr, cudaStream_t stream) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr->id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr->val.programmaticStreamSerializationAllowed = 1;
    cfg.attrs = attr;
    cfg.numAttrs = pdl ? 1 : 0;
    return cfg;
}
#endif  // SLLM_CUDA_COMMON_CUH
