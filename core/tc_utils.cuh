// core/tc_utils.cuh: thin wrappers over the sm_80+ warp-level tensor-core and async-copy instructions
// (ldmatrix, mma.m16n8k16 bf16 -> fp32, cp.async with zero fill). One place for the inline PTX.
//
// Fragment layouts of mma.m16n8k16.row.col (PTX ISA), g = lane / 4, t = lane % 4:
//   A (16x16, row-major):  a0 = (row g,   cols 2t, 2t+1)   a1 = (row g+8, cols 2t, 2t+1)
//                          a2 = (row g,   cols 2t+8, +9)   a3 = (row g+8, cols 2t+8, +9)
//   B (16x8, k x n):       b0 = (k 2t, 2t+1; n g)          b1 = (k 2t+8, 2t+9; n g)
//   C (16x8, fp32):        c0, c1 = (row g, cols 2t, 2t+1) c2, c3 = (row g+8, cols 2t, 2t+1)
// ldmatrix .x4: lanes 8i..8i+7 give the row addresses (16 bytes each) of 8x8 matrix i; register i of
// lane (g, t) receives elements (row g, cols 2t, 2t+1) of matrix i (with .trans: (rows 2t, 2t+1; col g)).
#ifndef SLLM_TC_UTILS_CUH
#define SLLM_TC_UTILS_CUH

#include <cuda_bf16.h>
#include <stdint.h>
#include <string.h>

// 2^x (ex2.approx.ftz: the flash-attention kernels' softmax in the log2 domain).
__device__ __forceinline__ float tc_exp2(float x) {
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
}
// Two floats -> bf16x2 (lo in the low half = the lower column index).
__device__ __forceinline__ uint32_t tc_pack_bf16x2(float lo, float hi) {
    __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
    uint32_t u;
    memcpy(&u, &v, sizeof u);
    return u;
}
__device__ __forceinline__ uint32_t tc_smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

// 16-byte async copy global -> shared; src_bytes 0 zero-fills the 16 bytes without reading gmem.
__device__ __forceinline__ void tc_cp_async16(void *smem, const void *gmem, int src_bytes) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(tc_smem_u32(smem)), "l"(gmem), "r"(src_bytes)
                 : "memory");
}
__device__ __forceinline__ void tc_cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::: "memory"); }
// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void tc_cp_async_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}

__device__ __forceinline__ void tc_ldsm_x4(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tc_smem_u32(p))
                 : "memory");
}
__device__ __forceinline__ void tc_ldsm_x4_trans(uint32_t r[4], const void *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(tc_smem_u32(p))
                 : "memory");
}
// c += a * b (bf16 inputs, fp32 accumulation)
__device__ __forceinline__ void tc_mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
        "{%0, %1, %2, %3};\n"
        : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

#endif  // SLLM_TC_UTILS_CUH
