// core/hopper.cuh: Hopper (sm_90a) building blocks of the TMA + wgmma kernels (twell/gate_wgmma.cuh,
// core/attention_wgmma.cuh): mbarriers (with a watchdog wait), TMA tile loads, bulk copies, cluster helpers, the
// 128-byte-swizzle shared-memory matrix descriptor, wgmma fences, and the driver's cuTensorMapEncodeTiled looked up
// through the runtime. Each device helper is one instruction or a short loop; addresses are 32-bit shared-window ones.
#ifndef SLLM_HOPPER_CUH
#define SLLM_HOPPER_CUH

#include <cuda.h>  // CUtensorMap, cuTensorMapEncodeTiled's types (the function comes from the runtime's entry point)
#include <stdint.h>
#include <stdio.h>

#include "cuda_common.cuh"

// ---------------------------------------------------------------------------------------------------
// Small PTX helpers (each one instruction; addresses are 32-bit shared-window addresses).
// ---------------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t hp_smem_addr(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

__device__ __forceinline__ void hp_mbar_init(uint32_t bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
// Makes the barrier inits visible to the other threads and to the async (TMA) proxy.
__device__ __forceinline__ void hp_fence_barrier_init() {
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
}
// Producer: arrive (count 1) and add tx_bytes to the transaction count the phase waits for.
__device__ __forceinline__ void hp_mbar_arrive_expect_tx(uint32_t bar, uint32_t tx_bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(tx_bytes) : "memory");
}
__device__ __forceinline__ void hp_mbar_arrive(uint32_t bar) {
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
// 1 when the phase with parity `parity` has completed. A fresh barrier is in phase 0 (incomplete), and
// waiting for parity 1 returns at once (the "previous" phase counts as complete): the producer's first
// pass over the empty barriers waits for parity 1.
__device__ __forceinline__ uint32_t hp_mbar_try_wait(uint32_t bar, uint32_t parity) {
    uint32_t ok;
    asm volatile(
        "{\n.reg .pred p;\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2;\n"
        "selp.u32 %0, 1, 0, p;\n}\n"
        : "=r"(ok)
        : "r"(bar), "r"(parity)
        : "memory");
    return ok;
}
__device__ __forceinline__ uint64_t hp_globaltimer() {
    uint64_t t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
// Kills the launch on purpose: a store to global address 0, so the launch fails with cudaErrorIllegalAddress and
// the host reports it. Not `trap`: a trap (or __trap()) anywhere in the kernel makes ptxas ignore setmaxnreg and
// compile every region at the launch bound (168 registers for 384 threads; checked with ptxas -v, CUDA 13.0), and
// no printf: a function call between wgmmas makes ptxas serialize them (warning C7510).
__device__ __forceinline__ void hp_fail_launch() {
    asm volatile("st.volatile.global.u32 [%0], %1;" ::"l"(0ull), "r"(0xDEADu) : "memory");
}
// Wait with a watchdog: fails the launch (hp_fail_launch) after timeout_ns: a pipeline bug must fail, never hang.
__device__ __forceinline__ void hp_mbar_wait(uint32_t bar, uint32_t parity, uint64_t timeout_ns) {
    if (hp_mbar_try_wait(bar, parity)) return;
    const uint64_t t0 = hp_globaltimer();
    uint32_t n = 0;
    while (!hp_mbar_try_wait(bar, parity)) {
        if ((++n & 255u) == 0 && hp_globaltimer() - t0 > timeout_ns) hp_fail_launch();
    }
}

// TMA: 2-D tile (box from the tensor map) at coordinates (c0 = inner/k element, c1 = row) into smem dst,
// completing `box bytes` of transactions on mbarrier bar. Rows past the tensor's extent are zero-filled
// (and still counted in the transaction bytes).
__device__ __forceinline__ void hp_tma_load_2d(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0, int c1) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];"
        ::"r"(dst), "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1)
        : "memory");
}

// The same, multicast: the tile lands at the same smem offset dst in every CTA of cta_mask (bit r = cluster rank r)
// and completes its bytes on the mbarrier at offset bar in each of them.
__device__ __forceinline__ void hp_tma_load_2d_mc(uint32_t dst, const CUtensorMap *map, uint32_t bar, int c0, int c1,
                                                   uint16_t cta_mask) {
    asm volatile(
        "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes.multicast::cluster"
        " [%0], [%1, {%3, %4}], [%2], %5;"
        ::"r"(dst), "l"((uint64_t)map), "r"(bar), "r"(c0), "r"(c1), "h"(cta_mask)
        : "memory");
}
// Arrive (count 1) on the mbarrier at offset bar in the shared memory of cluster rank cta. Default semantics (release
// at CTA scope), as CUTLASS's ClusterBarrier::arrive: it only has to order this warpgroup's finished wgmma reads of
// the stage before the peer's next TMA write. `.release.cluster` would also wait for the epilogue's global TwELL
// stores to become visible cluster-wide: that stalled the consumers and made the gate 1.40x slower (H100).
__device__ __forceinline__ void hp_mbar_arrive_cluster(uint32_t bar, uint32_t cta) {
    asm volatile(
        "{\n.reg .b32 ra;\nmapa.shared::cluster.u32 ra, %0, %1;\n"
        "mbarrier.arrive.shared::cluster.b64 _, [ra];\n}\n" ::"r"(bar), "r"(cta)
        : "memory");
}
// Every thread of every CTA of the cluster (warp-aligned).
__device__ __forceinline__ void hp_cluster_sync() {
    asm volatile("barrier.cluster.arrive.release.aligned;\nbarrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__device__ __forceinline__ uint32_t hp_cluster_rank() {
    uint32_t r;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(r));
    return r;
}

// Bulk copy (no tensor map) of `bytes` (a multiple of 16, 16-byte aligned ends) from global src into smem dst,
// completing `bytes` of transactions on mbarrier bar (the caller's arrive.expect_tx announces them).
__device__ __forceinline__ void hp_bulk_copy(uint32_t dst, const void *src, uint32_t bytes, uint32_t bar) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(dst), "l"(src), "r"(bytes), "r"(bar) : "memory");
}

// wgmma shared-memory matrix descriptor (PTX ISA "matrix descriptor format", sm_90):
//   bits  0..13  start address >> 4 (smem byte address, 16-byte units)
//   bits 16..29  leading-dimension byte offset >> 4: unused for K-major swizzled layouts; 16 B -> 1 by convention
//   bits 32..45  stride-dimension byte offset >> 4: distance between consecutive 8-row core-matrix groups =
//                8 rows x 128 B (one 128B-swizzle atom) = 1024 B -> 64
//   bits 49..51  base offset: 0 (every operand tile starts 1024-byte aligned, so the swizzle phase is 0)
//   bits 62..63  layout: 1 = 128-byte swizzle
// The tile is K-major, 128 B (64 bf16) per row, rows at 128 B, 16-byte chunks XOR-swizzled by (row % 8):
// exactly what TMA writes with CU_TENSOR_MAP_SWIZZLE_128B for a 64-element inner box. The k16 step kk
// inside the 64-wide row starts 32 B further (16 bf16): start address + 32 kk (the hardware applies the
// swizzle to the computed address bits, so an unaligned-to-128 start inside the atom is legal).
// An MN-major operand (core/attention_wgmma.cuh's V: rows along k, 128 B = 64 elements of N per row) uses the same
// descriptor with lbo 1024: its k groups of 8 rows are 1024 B apart, and at N = 64 the tile is one swizzle atom wide
// (the offset between atoms along N is never used), so both byte offsets are 1024 B whichever of them the hardware
// takes for the k stride. Its k16 step starts 16 rows (2048 B) further.
__device__ __forceinline__ uint64_t hp_desc_sw128(uint32_t smem_byte_addr, uint32_t lbo = 16) {
    uint64_t d = 0;
    d |= (uint64_t)((smem_byte_addr & 0x3FFFFu) >> 4);
    d |= (uint64_t)(lbo >> 4) << 16;
    d |= (uint64_t)(1024u >> 4) << 32;
    d |= (uint64_t)1 << 62;
    return d;
}

__device__ __forceinline__ void hp_wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void hp_wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void hp_wgmma_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

typedef CUresult (*HpEncodeTiledFn)(CUtensorMap *, CUtensorMapDataType, cuuint32_t, void *, const cuuint64_t *,
                                     const cuuint64_t *, const cuuint32_t *, const cuuint32_t *, CUtensorMapInterleave,
                                     CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

// The driver's cuTensorMapEncodeTiled (ABI of CUDA 12.0), looked up once (a cached function pointer).
static inline HpEncodeTiledFn hp_encode_fn(void) {
    static HpEncodeTiledFn fn = NULL;
    if (!fn) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult qr = cudaDriverEntryPointSymbolNotFound;
        cudaError_t e = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &qr);
        if (e != cudaSuccess || qr != cudaDriverEntryPointSuccess || !p) {
            fprintf(stderr, "error: cuTensorMapEncodeTiled not found in the driver (%s, query %d)\n",
                    cudaGetErrorString(e), (int)qr);
            (void)cudaGetLastError();
            return NULL;
        }
        fn = (HpEncodeTiledFn)p;
    }
    return fn;
}

#endif  // SLLM_HOPPER_CUH
