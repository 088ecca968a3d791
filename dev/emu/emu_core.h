// dev/emu/emu_core.h: runs CUDA kernels of this project on the CPU, to check their indexing, fragment
// layouts, swizzles and warp logic on a machine without a GPU (the GPU tests are the real check).
//
// Each CUDA thread is an OS thread; the CTAs of a launch run one after another. Warp-collective operations
// (shuffles, ldmatrix, mma.m16n8k16, __syncwarp) go through a per-warp exchange area and a 32-thread
// barrier, following the PTX ISA fragment layouts (core/tc_utils.cuh states them). cp.async copies at once
// (a legal schedule). Shared memory is one static buffer, poisoned with 0xFF before each CTA so that reads
// of unwritten shared memory show up as NaN / garbage. Every warp-collective call must be reached by all
// 32 lanes (as on the GPU with full masks), else the emulation deadlocks.
//
// A kernel file is included after this header with TC_EMU defined; it must declare its dynamic shared
// memory as `extern __shared__ unsigned char NAME[]` with NAME = EMU_SMEM_NAME (defined before including).
#ifndef SLLM_EMU_CORE_H
#define SLLM_EMU_CORE_H

#include <cuda_bf16.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <barrier>
#include <mutex>
#include <thread>
#include <vector>

#undef __global__
#undef __host__
#undef __device__
#undef __forceinline__
#undef __launch_bounds__
#undef __shared__
#undef __align__
#undef __restrict__
#define __global__
#define __host__
#define __device__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__
#define __align__(n) __attribute__((aligned(n)))
#define __restrict__

#define TC_EMU 1
typedef __nv_bfloat16 bf16;
#ifndef CEIL_DIV
#define CEIL_DIV(a, b) (((a) + (b) - 1) / (b))
#endif

#define EMU_SMEM_BYTES (232448)
#define EMU_MAX_WARPS 32

struct EmuDim { unsigned x, y, z; };
static thread_local EmuDim threadIdx, blockIdx;
static EmuDim gridDim, blockDim;

static std::barrier<> *g_emu_cta_bar;
static std::barrier<> *g_emu_warp_bar[EMU_MAX_WARPS];
struct EmuWarpX {
    const void *addr[32];
    uint32_t a[32][4];
    uint32_t b[32][2];
    uint32_t v[32];
};
static EmuWarpX g_emu_wx[EMU_MAX_WARPS];
static std::mutex g_emu_atomic_mu;

static inline int emu_lane() { return threadIdx.x & 31; }
static inline int emu_warp() { return threadIdx.x >> 5; }
static inline void emu_warp_sync() { g_emu_warp_bar[emu_warp()]->arrive_and_wait(); }
static inline void __syncthreads() { g_emu_cta_bar->arrive_and_wait(); }
static inline void __syncwarp(unsigned = 0xffffffffu) { emu_warp_sync(); }

// Shuffles of any 4-byte type.
template <typename T>
static inline T emu_shfl_idx(T v, int src_lane) {
    static_assert(sizeof(T) == 4, "4-byte shuffles only");
    EmuWarpX &x = g_emu_wx[emu_warp()];
    uint32_t u;
    memcpy(&u, &v, 4);
    x.v[emu_lane()] = u;
    emu_warp_sync();
    uint32_t r = x.v[src_lane & 31];
    emu_warp_sync();
    T out;
    memcpy(&out, &r, 4);
    return out;
}
template <typename T>
static inline T __shfl_sync(unsigned, T v, int src) { return emu_shfl_idx(v, src); }
template <typename T>
static inline T __shfl_xor_sync(unsigned, T v, int m) { return emu_shfl_idx(v, emu_lane() ^ m); }
template <typename T>
static inline T __shfl_up_sync(unsigned, T v, unsigned d) {
    int l = emu_lane();
    return emu_shfl_idx(v, (int)d <= l ? l - (int)d : l);
}

// core/cuda_common.cuh's warp scan, on the emulated shuffles (kernel files do not include cuda_common.cuh here).
static inline int warp_scan_incl(int v) {
    const int lane = emu_lane();
    for (int o = 1; o < 32; o <<= 1) {
        const int y = __shfl_up_sync(0xffffffffu, v, o);
        if (lane >= o) v += y;
    }
    return v;
}

static inline unsigned __ballot_sync(unsigned, int pred) {
    EmuWarpX &x = g_emu_wx[emu_warp()];
    x.v[emu_lane()] = pred ? 1u : 0u;
    emu_warp_sync();
    unsigned r = 0;
    for (int l = 0; l < 32; l++) r |= x.v[l] << l;
    emu_warp_sync();
    return r;
}
static inline unsigned __match_any_sync(unsigned, int value) {
    EmuWarpX &x = g_emu_wx[emu_warp()];
    x.v[emu_lane()] = (uint32_t)value;
    emu_warp_sync();
    unsigned r = 0;
    for (int l = 0; l < 32; l++) r |= (x.v[l] == (uint32_t)value ? 1u : 0u) << l;
    emu_warp_sync();
    return r;
}
static inline int __popc(unsigned x) { return __builtin_popcount(x); }
static inline int __ffs(unsigned x) { return __builtin_ffs((int)x); }
static inline int __clz(unsigned x) { return x ? __builtin_clz(x) : 32; }
static inline unsigned __byte_perm(unsigned x, unsigned y, unsigned s) {
    const uint64_t v = ((uint64_t)y << 32) | x;
    unsigned r = 0;
    for (int i = 0; i < 4; i++) r |= (unsigned)((v >> (8 * ((s >> (4 * i)) & 7))) & 0xFF) << (8 * i);
    return r;
}
template <typename T>
static inline T __ldg(const T *p) { return *p; }
static inline float __uint_as_float(uint32_t u) { float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t __float_as_uint(float f) { uint32_t u; memcpy(&u, &f, 4); return u; }
static inline int atomicAdd(int *p, int v) { std::lock_guard<std::mutex> lk(g_emu_atomic_mu); int o = *p; *p += v; return o; }
static inline float atomicAdd(float *p, float v) { std::lock_guard<std::mutex> lk(g_emu_atomic_mu); float o = *p; *p += v; return o; }
static inline int atomicExch(int *p, int v) { std::lock_guard<std::mutex> lk(g_emu_atomic_mu); int o = *p; *p = v; return o; }
using std::max;
using std::min;

// ---- tensor-core and async-copy primitives (core/tc_utils.cuh) -------------------------------------------
extern unsigned char EMU_SMEM_NAME[];

static inline void emu_check_smem(const void *p, size_t n, const char *what) {
    uintptr_t b = (uintptr_t)EMU_SMEM_NAME;
    if ((uintptr_t)p < b || (uintptr_t)p + n > b + EMU_SMEM_BYTES || ((uintptr_t)p & 15)) {
        fprintf(stderr, "emu: %s address %p outside shared memory or not 16-byte aligned\n", what, p);
        abort();
    }
}
static inline void tc_cp_async16(void *smem, const void *gmem, int src_bytes) {
    emu_check_smem(smem, 16, "cp.async");
    memset(smem, 0, 16);
    if (src_bytes > 0) memcpy(smem, gmem, (size_t)src_bytes);
}
static inline void tc_cp_async_commit() {}
template <int N>
static inline void tc_cp_async_wait() {}

static inline uint16_t emu_bits(const void *p) { uint16_t u; memcpy(&u, p, 2); return u; }
static inline float emu_bf(uint16_t h) { uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f; }
static inline uint32_t emu_pack2(uint16_t lo, uint16_t hi) { return (uint32_t)lo | ((uint32_t)hi << 16); }

// ldmatrix .x4: lanes 8i..8i+7 give the row addresses of matrix i (8 bf16 per row).
static inline void emu_ldsm(uint32_t r[4], const void *p, bool trans) {
    emu_check_smem(p, 16, "ldmatrix");
    EmuWarpX &x = g_emu_wx[emu_warp()];
    int lane = emu_lane(), g = lane >> 2, t = lane & 3;
    x.addr[lane] = p;
    emu_warp_sync();
    for (int i = 0; i < 4; i++) {
        if (!trans) {
            const unsigned char *row = (const unsigned char *)x.addr[8 * i + g];
            r[i] = emu_pack2(emu_bits(row + 4 * t), emu_bits(row + 4 * t + 2));
        } else {
            const unsigned char *r0 = (const unsigned char *)x.addr[8 * i + 2 * t];
            const unsigned char *r1 = (const unsigned char *)x.addr[8 * i + 2 * t + 1];
            r[i] = emu_pack2(emu_bits(r0 + 2 * g), emu_bits(r1 + 2 * g));
        }
    }
    emu_warp_sync();
}
static inline void tc_ldsm_x4(uint32_t r[4], const void *p) { emu_ldsm(r, p, false); }
static inline void tc_ldsm_x4_trans(uint32_t r[4], const void *p) { emu_ldsm(r, p, true); }

// mma.m16n8k16 row.col bf16 -> f32.
static inline float emu_a_elem(const EmuWarpX &x, int r, int c) {
    int lane = (r % 8) * 4 + (c % 8) / 2, reg = (r >= 8) + 2 * (c >= 8);
    uint32_t w = x.a[lane][reg];
    return emu_bf((c & 1) ? (uint16_t)(w >> 16) : (uint16_t)(w & 0xffff));
}
static inline float emu_b_elem(const EmuWarpX &x, int k, int n) {
    int lane = n * 4 + (k % 8) / 2, reg = k >= 8;
    uint32_t w = x.b[lane][reg];
    return emu_bf((k & 1) ? (uint16_t)(w >> 16) : (uint16_t)(w & 0xffff));
}
static inline void tc_mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    EmuWarpX &x = g_emu_wx[emu_warp()];
    int lane = emu_lane(), g = lane >> 2, t = lane & 3;
    for (int i = 0; i < 4; i++) x.a[lane][i] = a[i];
    x.b[lane][0] = b0;
    x.b[lane][1] = b1;
    emu_warp_sync();
    for (int e = 0; e < 4; e++) {
        int row = g + (e >= 2 ? 8 : 0), col = 2 * t + (e & 1);
        float s = 0;
        for (int kk = 0; kk < 16; kk++) s += emu_a_elem(x, row, kk) * emu_b_elem(x, kk, col);
        c[e] += s;
    }
    emu_warp_sync();
}

// ---- launch ----------------------------------------------------------------------------------------------
// Runs body() for every thread of every CTA of grid (CTAs in order, threads of one CTA concurrently).
template <typename F>
static void emu_launch(EmuDim grid, unsigned threads, F body) {
    if (threads % 32 != 0 || threads / 32 > EMU_MAX_WARPS) {
        fprintf(stderr, "emu: block of %u threads not supported\n", threads);
        abort();
    }
    gridDim = grid;
    blockDim = {threads, 1, 1};
    std::barrier<> cta(threads);
    std::vector<std::barrier<> *> wb;
    for (unsigned w = 0; w < threads / 32; w++) {
        wb.push_back(new std::barrier<>(32));
        g_emu_warp_bar[w] = wb.back();
    }
    g_emu_cta_bar = &cta;
    for (unsigned z = 0; z < grid.z; z++)
        for (unsigned y = 0; y < grid.y; y++)
            for (unsigned xb = 0; xb < grid.x; xb++) {
                memset(EMU_SMEM_NAME, 0xff, EMU_SMEM_BYTES);
                std::vector<std::thread> th;
                for (unsigned t = 0; t < threads; t++)
                    th.emplace_back([=] {
                        threadIdx = {t, 0, 0};
                        blockIdx = {xb, y, z};
                        body();
                    });
                for (auto &x : th) x.join();
            }
    for (auto *b : wb) delete b;
}

#endif  // SLLM_EMU_CORE_H
