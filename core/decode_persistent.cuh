// core/decode_persistent.cuh: a whole dense decoding step (every layer, the final norm, the LM head and the greedy
// pick) as ONE persistent kernel whose weight stream never stops at a kernel boundary.
//
// Why: at one token per sequence the step reads every weight once. As separate kernels (core/gemv.cuh) the stream
// stops at each of the ~5 boundaries per layer: only the CTAs of the next kernel that are already resident can load
// ahead, the attention and the norms add dependent round trips with no weight bytes in flight, and an H200 spends
// 1.7x the weights' read time on a 0.5B step. Here one CTA per SM runs all phases, and its weight bytes come from a
// producer that is never blocked by the phases' data dependencies:
//   - warp DP_WARPS (the producer; lane 0) walks the CTA's share of every phase's weight rows in step order and copies
//     each unit (the R weight rows one warp's dot products read) into a ring of shared-memory slots with bulk copies
//     (cp.async.bulk, one mbarrier per slot for full and one for empty). It waits only for a free slot, so it runs up
//     to nslot units (~170 KB per SM) ahead, across phase boundaries and through the attention;
//   - warps 0 .. DP_WARPS-1 (the consumers) run the phases: per phase they stage the input rows in shared memory
//     (x, or x = rmsnorm(a + b) * gain as core/gemv.cuh's fused norm), then unit j of the CTA (counted over the whole
//     step) goes to warp j % DP_WARPS and slot j % nslot; the warp waits for the slot, computes the unit's M x R dot
//     products from shared memory, frees the slot and stores through core/gemv.cuh's epilogue ops;
//   - phases are separated by a grid-wide barrier (every CTA resident: one per SM, launched at the SM count): a phase
//     reads what the phase before wrote, from L2 (ld.global.cg: L1 is not coherent within a kernel).
// Phases per layer: q/k/v with RoPE and the cache write (GemvQKVRopeOp), attention over the cache (kv_decode_attention's
// split-key function, two 128-thread workers per CTA), Wo (GemvRowsOp), the FFN's up side with h = relu(g) * u and its
// counters (GemvFFNUpOp), the down product (GemvRowsOp, one row per unit); then the LM head (fp32 logits and, for
// greedy decoding, the argmax keys of core/argmax.cuh). Each dot product sums lane by lane in chunk order and then by
// the same butterfly as core/gemv.cuh, the norms and the attention reduce in the same orders with the same thread
// counts: the step gives the same bits as the separate kernels (gpu_test_infer checks it).
//
// Layouts: x, xm, y [M, D] bf16; q [M, Q]; att [M, Q]; h [M, F]; logits [M, V] fp32; the caches [M, S, KVH, hd] per
// layer; weights in nn.Linear layout (rows of K bf16), 16-byte aligned. 1 <= M <= GEMV_MAX_M.
#ifndef SLLM_DECODE_PERSISTENT_CUH
#define SLLM_DECODE_PERSISTENT_CUH

#include <stdint.h>

#include "cuda_common.cuh"
#include "gemv.cuh"
#include "hopper.cuh"
#include "kv_attention.cuh"

#define DP_WARPS 8                          // consumer warps per CTA (256 threads: core/gemv.cuh's norm order)
#ifndef DP_WAIT_SLEEP
#define DP_WAIT_SLEEP 0                     // ns the consumers sleep between polls of a full slot (0: hp_mbar_wait)
#endif
// A consumer's wait for a full slot.
#define DP_WAIT_FULL(bar, parity)                                                                          \
    do {                                                                                                   \
        if (DP_WAIT_SLEEP == 0) hp_mbar_wait((bar), (parity), DP_TIMEOUT_NS);                              \
        else {                                                                                             \
            const uint64_t tw0_ = hp_globaltimer();                                                        \
            while (!hp_mbar_try_wait((bar), (parity))) {                                                   \
                __nanosleep(DP_WAIT_SLEEP);                                                                \
                if (hp_globaltimer() - tw0_ > DP_TIMEOUT_NS) hp_fail_launch();                             \
            }                                                                                              \
        }                                                                                                  \
    } while (0)
#ifndef DP_LDGSTS
#define DP_LDGSTS 0                         // 1: the producer warp's 32 lanes copy with cp.async instead of bulk copies
#endif
#ifndef DP_PF_UNITS
#define DP_PF_UNITS 16                      // the L2 prefetcher runs this many units ahead of the slot producer
#endif
#define DP_THREADS (32 * (DP_WARPS + 1 + (DP_PF_UNITS > 0)))  // + the producer warp (+ the L2 prefetcher warp)
#define DP_MAX_SLOTS 32
#define DP_TIMEOUT_NS 4000000000ull         // watchdog of every wait: a bug fails the launch, never hangs it
#define DP_ATT_FLOATS (128 + KVD_KEYS + 32 + KVA_PART_FLOATS + 4)  // one attention worker's scratch

enum { DP_QKV = 0, DP_ATT, DP_WO, DP_UP, DP_DOWN, DP_PHASES_PER_LAYER };

// One layer's tensors (device pointers; wk, wv already resolved for MHA's fused layout).
typedef struct {
    const bf16 *attn_norm, *ffn_norm, *wq, *wk, *wv, *wo, *wg, *wu, *wd;
    bf16 *kc, *vc;               // this layer's cache [M, S, KVH, hd]
    unsigned long long *nnz;     // GemvFFNUpOp's counters (may be NULL)
    uint8_t *fired;
} DpLayer;

typedef struct {
    const DpLayer *layers;       // [L] on the device
    int L, D, Q, KV, H, KVH, hd, F, V, S, gated;
    float eps, scale;
    const int *pos;              // the step's position (on the device: a graph replays at every position)
    const float *rope;           // [positions, hd/2, 2]
    bf16 *x, *xm, *y, *q, *att, *h;
    const bf16 *final_norm, *E;  // tied LM head: E [V, D]
    float *logits;               // [M, V]
    unsigned long long *best;    // [M] argmax keys (zero before the launch), or NULL
    float *part;                 // kv_decode_work's partials and tickets
    int *ticket, splits;
    unsigned int *bar;           // the grid barrier's word (zero at allocation; every barrier leaves it as it was)
    int slot_bytes, nslot, xs_bytes, grid;  // grid: CTAs = SMs
#ifdef DP_TRACE
    unsigned long long *trace;   // dev builds: [G, phases, DP_TRACE_FIELDS] %globaltimer stamps (dp_trace_dump)
#endif
} DpParams;

#ifdef DP_TRACE
// Per CTA and phase: the consumers' start (after the barrier before it), input staged, last unit done, barrier after
// it released; the producer's first and last issue of the phase; warp 0's ns waiting for full slots.
#define DP_TRACE_FIELDS 8
#define DP_STAMP(ph, k, v) (p.trace[((size_t)blockIdx.x * (DP_PHASES_PER_LAYER * p.L + 1) + (ph)) * DP_TRACE_FIELDS + (k)] = (v))
#else
#define DP_STAMP(ph, k, v) ((void)0)
#endif

// ---- device helpers ----

__device__ __forceinline__ void dp_sync_consumers() { asm volatile("barrier.sync 1, 256;" ::: "memory"); }
__device__ __forceinline__ void dp_sync_half(int half) { asm volatile("barrier.sync %0, 128;" ::"r"(2 + half) : "memory"); }

__device__ __forceinline__ void dp_load8_cg(const bf16 *p, float out[8]) {
    const uint4 raw = __ldcg(reinterpret_cast<const uint4 *>(p));
    const __nv_bfloat162 *h2 = reinterpret_cast<const __nv_bfloat162 *>(&raw);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const float2 f = __bfloat1622float2(h2[i]);
        out[2 * i] = f.x; out[2 * i + 1] = f.y;
    }
}

// block_sum / block_max of core/kernel_utils.cuh over the 256 consumer threads (8 warps), the same order.
__device__ __forceinline__ float dp_consumer_sum(float v, float *red) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    v = warp_sum(v);
    dp_sync_consumers();
    if (lane == 0) red[warp] = v;
    dp_sync_consumers();
    return warp_sum(lane < DP_WARPS ? red[lane] : 0.0f);
}
// The same over one 128-thread attention worker (4 warps), as kv_decode_attention_kernel's block of KVD_KEYS threads.
__device__ __forceinline__ float dp_half_sum(float v, float *red, int half) {
    const int lane = threadIdx.x & 31, wh = (threadIdx.x >> 5) & 3;
    v = warp_sum(v);
    dp_sync_half(half);
    if (lane == 0) red[wh] = v;
    dp_sync_half(half);
    return warp_sum(lane < 4 ? red[lane] : 0.0f);
}
__device__ __forceinline__ float dp_half_max(float v, float *red, int half) {
    const int lane = threadIdx.x & 31, wh = (threadIdx.x >> 5) & 3;
    v = warp_max(v);
    dp_sync_half(half);
    if (lane == 0) red[wh] = v;
    dp_sync_half(half);
    return warp_max(lane < 4 ? red[lane] : -INFINITY);
}

// Every CTA's consumers (one thread each, after dp_sync_consumers) meet here; the sense is the word's top bit, which
// flips once all G CTAs have added (CTA 0 adds 2^31 - (G - 1), the others 1), so the word returns to its value.
__device__ __forceinline__ void dp_grid_barrier(unsigned int *bar) {
    __threadfence();
    const unsigned int G = gridDim.x, add = blockIdx.x == 0 ? 0x80000000u - (G - 1) : 1u;
    const unsigned int old = atomicAdd(bar, add);
    const uint64_t t0 = hp_globaltimer();
    for (unsigned int n = 1;; n++) {
        unsigned int now;
        asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(now) : "l"(bar) : "memory");
        if ((now ^ old) & 0x80000000u) break;
        if ((n & 1023u) == 0 && hp_globaltimer() - t0 > DP_TIMEOUT_NS) hp_fail_launch();
    }
    __threadfence();
}

// The phase's units, rows per unit and row length (K).
__device__ __forceinline__ void dp_phase_shape(const DpParams &p, int kind, int &units, int &R, int &K) {
    switch (kind) {
        case DP_QKV: units = (p.Q + 2 * p.KV) / 2; R = 2; K = p.D; break;
        case DP_WO: units = p.D / 2; R = 2; K = p.Q; break;
        case DP_UP: units = p.F; R = p.gated ? 2 : 1; K = p.D; break;
        case DP_DOWN: units = p.D; R = 1; K = p.F; break;
        case DP_PHASES_PER_LAYER: units = p.V / 2; R = 2; K = p.D; break;  // the LM head
        default: units = 0; R = 0; K = 0; break;                           // attention: no weights
    }
}
// This CTA's units of a phase: [lo, hi), a balanced contiguous share.
__device__ __forceinline__ void dp_share(int units, int &lo, int &hi) {
    lo = (int)((long long)units * blockIdx.x / gridDim.x);
    hi = (int)((long long)units * (blockIdx.x + 1) / gridDim.x);
}

// The epilogue ops of core/gemv.cuh for layer `ly`.
__device__ __forceinline__ GemvQKVRopeOp dp_qkv_op(const DpParams &p, const DpLayer &ly) {
    GemvQKVRopeOp op;
    op.wq = ly.wq; op.wk = ly.wk; op.wv = ly.wv;
    op.q = p.q; op.kc = ly.kc; op.vc = ly.vc; op.rope = p.rope; op.pos = p.pos;
    op.Q = p.Q; op.KV = p.KV; op.hd = p.hd; op.S = p.S; op.K = p.D;
    return op;
}
__device__ __forceinline__ const bf16 *dp_row(const DpParams &p, const DpLayer &ly, int kind, int u, int r) {
    switch (kind) {
        case DP_QKV: return dp_qkv_op(p, ly).row(u, r);
        case DP_WO: return ly.wo + (size_t)(2 * u + r) * p.Q;
        case DP_UP: return (p.gated && r == 0 ? ly.wg : ly.wu) + (size_t)u * p.D;
        case DP_DOWN: return ly.wd + (size_t)u * p.F;
        default: return p.E + (size_t)(2 * u + r) * p.D;
    }
}

// The phase's input rows into xs [M, K] (16-byte chunks): x = a, or x = bf16(s * rstd * gain) with s = bf16(a + b)
// (b may be NULL), CTA 0 writing s to res: core/gemv.cuh's gemv_kernel prologue, the same arithmetic and order.
template <int M>
__device__ void dp_stage(uint4 *xs, const bf16 *a, const bf16 *b, const bf16 *gain, bf16 *res, float eps, int K,
                         float *red) {
    const int KC = K >> 3, t = threadIdx.x;
    if (gain) {
        for (int m = 0; m < M; m++) {
            float ss = 0.0f;
            for (int c = t; c < KC; c += 32 * DP_WARPS) {
                float v[8];
                dp_load8_cg(a + (size_t)m * K + 8 * c, v);
                if (b) {
                    float y[8];
                    dp_load8_cg(b + (size_t)m * K + 8 * c, y);
#pragma unroll
                    for (int i = 0; i < 8; i++) v[i] = round_bf16(v[i] + y[i]);
                    if (res && blockIdx.x == 0) store8_bf16(res + (size_t)m * K + 8 * c, v);
                }
#pragma unroll
                for (int i = 0; i < 8; i++) ss += v[i] * v[i];
                store8_bf16(reinterpret_cast<bf16 *>(xs + m * KC + c), v);
            }
            ss = dp_consumer_sum(ss, red);
            const float rs = rsqrtf(ss / (float)K + eps);
            for (int c = t; c < KC; c += 32 * DP_WARPS) {
                float v[8], g[8];
                bf16 *p = reinterpret_cast<bf16 *>(xs + m * KC + c);
                load8_bf16(p, v);
                load8_bf16(gain + 8 * c, g);
#pragma unroll
                for (int i = 0; i < 8; i++) v[i] = v[i] * rs * g[i];
                store8_bf16(p, v);
            }
        }
    } else {
        const uint4 *xg = reinterpret_cast<const uint4 *>(a);
        for (int i = t; i < M * KC; i += 32 * DP_WARPS) xs[i] = __ldcg(xg + i);
    }
    dp_sync_consumers();
}

// One unit's M x R dot products from the slot (R rows of KC chunks) and xs, then the butterfly: core/gemv.cuh's order.
template <int M, int R>
__device__ __forceinline__ void dp_dot(const uint4 *w, const uint4 *xs, int KC, int lane, float (&acc)[M][R]) {
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int r = 0; r < R; r++) acc[m][r] = 0.0f;
#pragma unroll 4
    for (int c = lane; c < KC; c += 32) {
        uint4 wv[R];
#pragma unroll
        for (int r = 0; r < R; r++) wv[r] = w[r * KC + c];
#pragma unroll
        for (int m = 0; m < M; m++) {
            const uint4 xv = xs[m * KC + c];
#pragma unroll
            for (int r = 0; r < R; r++) acc[m][r] = dot8_bf16(xv, wv[r], acc[m][r]);
        }
    }
#pragma unroll
    for (int m = 0; m < M; m++)
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) acc[m][r] += __shfl_xor_sync(0xffffffffu, acc[m][r], o);
}

// The slot pipeline's view for the consumers.
struct DpRing {
    uint32_t slots, full, empty;  // shared-window addresses: the slots, then nslot full and nslot empty mbarriers
    const uint4 *slots_ptr;
    int slot_bytes, nslot;
};

// The consumers' side of one weight phase: units j (CTA-wide count, from jbase) with j % DP_WARPS == warp. Each unit:
// wait for its slot, the dot products, free the slot, then op(u, acc) stores. Returns the units of the phase.
template <int M, int R, class Store>
__device__ __forceinline__ int dp_consume(const DpRing &ring, uint32_t jbase, int lo, int hi, int K, const uint4 *xs,
                                          Store store, unsigned long long *wait_ns = NULL) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, KC = K >> 3, n = hi - lo;
    for (uint32_t j = jbase + ((uint32_t)(warp - (int)jbase) & (DP_WARPS - 1)); j < jbase + (uint32_t)n; j += DP_WARPS) {
        const uint32_t slot = j % (uint32_t)ring.nslot, round = j / (uint32_t)ring.nslot;
#ifdef DP_TRACE
        const unsigned long long tw = hp_globaltimer();
        DP_WAIT_FULL(ring.full + 8 * slot, round & 1u);
        if (wait_ns) *wait_ns += hp_globaltimer() - tw;
#else
        (void)wait_ns;
        DP_WAIT_FULL(ring.full + 8 * slot, round & 1u);
#endif
        float acc[M][R];
        dp_dot<M, R>(ring.slots_ptr + (size_t)slot * (ring.slot_bytes >> 4), xs, KC, lane, acc);
        __syncwarp();
        if (lane == 0) hp_mbar_arrive(ring.empty + 8 * slot);
        store(lo + (int)(j - jbase), lane, acc);
    }
    return n;
}

// One split of keys of one (sequence, head): kv_decode_attention_kernel's function, by a 128-thread worker (half of
// the consumers; ht its thread). The newest key and value and q come from this step's q/k/v phase (read through L2).
__device__ void dp_attention_item(const DpParams &p, const DpLayer &ly, int b, int h, int split, int n, float *scr,
                                  int half, int ht) {
    float *qs = scr, *ps = qs + 128, *red = ps + KVD_KEYS, *acc_s = red + 32;
    int *s_last = reinterpret_cast<int *>(acc_s + KVA_PART_FLOATS);
    const int H = p.H, hd = p.hd, S = p.S, KVH = p.KVH, splits = p.splits;
    const int live = (n + KVD_KEYS - 1) / KVD_KEYS, C = hd / 8, kvh = h / (H / KVH), j0 = split * KVD_KEYS,
              j = j0 + ht;
    const size_t kstride = (size_t)KVH * hd;
    const bf16 *kbase = ly.kc + ((size_t)b * S * KVH + kvh) * hd, *vbase = ly.vc + ((size_t)b * S * KVH + kvh) * hd;
    uint4 kr[KVD_MAX_CHUNKS];
    const uint4 *krow = reinterpret_cast<const uint4 *>(kbase + (size_t)j * kstride);
    if (j < n) {
#pragma unroll
        for (int c = 0; c < KVD_MAX_CHUNKS; c++)
            if (c < C) kr[c] = j < n - 1 ? __ldg(krow + c) : __ldcg(krow + c);
    }
    dp_sync_half(half);  // the worker's previous item is done with its scratch
    const bf16 *qr = p.q + ((size_t)b * H + h) * hd;
    for (int d = ht; d < hd; d += KVD_KEYS) qs[d] = __bfloat162float(__ldcg(qr + d));
    dp_sync_half(half);
    float sc = -INFINITY;
    if (j < n) {
        float a = 0.0f;
#pragma unroll
        for (int c = 0; c < KVD_MAX_CHUNKS; c++)
            if (c < C) {
                const __nv_bfloat162 *p2 = reinterpret_cast<const __nv_bfloat162 *>(&kr[c]);
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    const float2 f = __bfloat1622float2(p2[e]);
                    a += qs[8 * c + 2 * e] * f.x;
                    a += qs[8 * c + 2 * e + 1] * f.y;
                }
            }
        sc = a * p.scale;
    }
    const float mx = dp_half_max(sc, red, half);
    const float pr = j < n ? __expf(sc - mx) : 0.0f;
    const float sum = dp_half_sum(pr, red, half);
    ps[ht] = pr;
    dp_sync_half(half);
    const int G = KVD_KEYS / C, c = ht % C, g = ht / C, nk = min(KVD_KEYS, n - j0);
    if (g < G) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
#pragma unroll 4
        for (int jj = g; jj < nk; jj += G) {
            float vv[8];
            dp_load8_cg(vbase + (size_t)(j0 + jj) * kstride + 8 * c, vv);
            const float pj = ps[jj];
#pragma unroll
            for (int e = 0; e < 8; e++) acc[e] += pj * vv[e];
        }
#pragma unroll
        for (int e = 0; e < 8; e++) acc_s[g * hd + 8 * c + e] = acc[e];
    }
    dp_sync_half(half);
    bf16 *orow = p.att + ((size_t)b * H + h) * hd;
    if (live == 1) {
        const float inv = 1.0f / sum;
        for (int d = ht; d < hd; d += KVD_KEYS) {
            float o = 0.0f;
            for (int gg = 0; gg < G; gg++) o += acc_s[gg * hd + d];
            orow[d] = __float2bfloat16_rn(o * inv);
        }
        return;
    }
    float *pp = p.part + ((size_t)b * H + h) * splits * (hd + 2);
    for (int d = ht; d < hd; d += KVD_KEYS) {
        float o = 0.0f;
        for (int gg = 0; gg < G; gg++) o += acc_s[gg * hd + d];
        pp[(size_t)split * (hd + 2) + 2 + d] = o;
    }
    if (ht == 0) { pp[(size_t)split * (hd + 2)] = mx; pp[(size_t)split * (hd + 2) + 1] = sum; }
    __threadfence();
    dp_sync_half(half);
    if (ht == 0) *s_last = atomicAdd(p.ticket + (size_t)b * H + h, 1) == live - 1;
    dp_sync_half(half);
    if (!*s_last) return;
    __threadfence();
    float Mx = -INFINITY;
    for (int s2 = 0; s2 < live; s2++) Mx = fmaxf(Mx, __ldcg(pp + (size_t)s2 * (hd + 2)));
    for (int d = ht; d < hd; d += KVD_KEYS) {
        float L = 0.0f, o = 0.0f;
        for (int s2 = 0; s2 < live; s2++) {
            const float *ps2 = pp + (size_t)s2 * (hd + 2);
            const float wgt = __expf(__ldcg(ps2) - Mx);
            L += __ldcg(ps2 + 1) * wgt;
            o += __ldcg(ps2 + 2 + d) * wgt;
        }
        orow[d] = __float2bfloat16_rn(o / L);
    }
    if (ht == 0) p.ticket[(size_t)b * H + h] = 0;
}

template <int M>
static __global__ void __launch_bounds__(DP_THREADS, 1) decode_persistent_kernel(const DpParams p) {
    extern __shared__ __align__(128) unsigned char dp_smem[];
    __shared__ float s_red[32];
    __shared__ int s_count[DP_WARPS];
    __shared__ unsigned long long s_keys[DP_WARPS][GEMV_MAX_M];
    __shared__ volatile uint32_t s_issued;  // units the producer has issued (the prefetcher's leash)
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    DpRing ring;
    ring.slot_bytes = p.slot_bytes;
    ring.nslot = p.nslot;
    ring.slots_ptr = reinterpret_cast<const uint4 *>(dp_smem);
    ring.slots = hp_smem_addr(dp_smem);
    uint4 *xs = reinterpret_cast<uint4 *>(dp_smem + (size_t)p.nslot * p.slot_bytes);
    ring.full = ring.slots + (uint32_t)(p.nslot * p.slot_bytes + p.xs_bytes);
    ring.empty = ring.full + 8 * (uint32_t)p.nslot;
    if (threadIdx.x == 0) {
        for (int i = 0; i < p.nslot; i++) {
            hp_mbar_init(ring.full + 8 * i, DP_LDGSTS ? 32 : 1);
            hp_mbar_init(ring.empty + 8 * i, 1);
        }
        hp_fence_barrier_init();
        s_issued = 0;
    }
    __syncthreads();
    const int phases = DP_PHASES_PER_LAYER * p.L + 1;

    if (warp == DP_WARPS + 1) {  // the L2 prefetcher: the same units, up to DP_PF_UNITS ahead of the producer, so HBM
                                 // keeps streaming while the slots are full (attention, barriers, norms)
        if (lane) return;
        uint32_t j = 0;
        const uint64_t t0 = hp_globaltimer();
        for (int ph = 0; ph < phases; ph++) {
            const int kind = ph < DP_PHASES_PER_LAYER * p.L ? ph % DP_PHASES_PER_LAYER : DP_PHASES_PER_LAYER;
            const DpLayer *ly = p.layers + (ph < DP_PHASES_PER_LAYER * p.L ? ph / DP_PHASES_PER_LAYER : 0);
            int units, R, K, lo, hi;
            dp_phase_shape(p, kind, units, R, K);
            if (!units) continue;
            dp_share(units, lo, hi);
            for (int u = lo; u < hi; u++, j++) {
                for (uint32_t n = 1; j >= s_issued + DP_PF_UNITS; n++) {
                    __nanosleep(64);
                    if ((n & 1023u) == 0 && hp_globaltimer() - t0 > DP_TIMEOUT_NS) hp_fail_launch();
                }
                for (int r = 0; r < R; r++)
                    asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(dp_row(p, *ly, kind, u, r)),
                                 "r"((uint32_t)K * 2) : "memory");
            }
        }
        return;
    }

    if (warp == DP_WARPS) {  // the producer: every weight unit of this CTA, in step order
#if DP_LDGSTS
        // every lane copies 16-byte chunks (cp.async) and arrives on the slot's full barrier when its copies land
#else
        if (lane) return;
#endif
        uint32_t j = 0;
        for (int ph = 0; ph < phases; ph++) {
            const int kind = ph < DP_PHASES_PER_LAYER * p.L ? ph % DP_PHASES_PER_LAYER : DP_PHASES_PER_LAYER;
            const DpLayer *ly = p.layers + (ph < DP_PHASES_PER_LAYER * p.L ? ph / DP_PHASES_PER_LAYER : 0);
            int units, R, K, lo, hi;
            dp_phase_shape(p, kind, units, R, K);
            if (!units) continue;
            dp_share(units, lo, hi);
            const uint32_t row_bytes = (uint32_t)K * 2;
            for (int u = lo; u < hi; u++, j++) {
                const uint32_t slot = j % (uint32_t)p.nslot;
                hp_mbar_wait(ring.empty + 8 * slot, ((j / (uint32_t)p.nslot) & 1u) ^ 1u, DP_TIMEOUT_NS);
                if (lane == 0 && u == lo) DP_STAMP(ph, 4, hp_globaltimer());
                if (lane == 0 && u == hi - 1) DP_STAMP(ph, 5, hp_globaltimer());
#if DP_LDGSTS
                for (int r = 0; r < R; r++) {
                    const char *src = reinterpret_cast<const char *>(dp_row(p, *ly, kind, u, r));
                    const uint32_t dst = ring.slots + slot * (uint32_t)p.slot_bytes + r * row_bytes;
                    for (uint32_t off = 16 * lane; off < row_bytes; off += 512)
                        asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst + off), "l"(src + off)
                                     : "memory");
                }
                asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" ::"r"(ring.full + 8 * slot) : "memory");
#else
                hp_mbar_arrive_expect_tx(ring.full + 8 * slot, row_bytes * R);
                for (int r = 0; r < R; r++)
                    hp_bulk_copy(ring.slots + slot * (uint32_t)p.slot_bytes + r * row_bytes, dp_row(p, *ly, kind, u, r),
                                 row_bytes, ring.full + 8 * slot);
#endif
                if (lane == 0) s_issued = j + 1;
            }
        }
        return;
    }

    // the consumers
    uint32_t jbase = 0;
    for (int ph = 0; ph < phases; ph++) {
        const bool head = ph == DP_PHASES_PER_LAYER * p.L;
        const int kind = head ? DP_PHASES_PER_LAYER : ph % DP_PHASES_PER_LAYER, l = head ? 0 : ph / DP_PHASES_PER_LAYER;
        const DpLayer &ly = p.layers[l];
        int units, R, K, lo, hi;
        dp_phase_shape(p, kind, units, R, K);
        dp_share(units, lo, hi);
        unsigned long long wns = 0;
        if (threadIdx.x == 0) DP_STAMP(ph, 0, hp_globaltimer());
        if (kind == DP_QKV) {
            // layer 0: norm(x); later layers: x = xm + y of the layer before, then its norm
            dp_stage<M>(xs, l == 0 ? p.x : p.xm, l == 0 ? NULL : p.y, ly.attn_norm, l == 0 ? NULL : p.x, p.eps, K,
                        s_red);
            if (threadIdx.x == 0) DP_STAMP(ph, 1, hp_globaltimer());
            const GemvQKVRopeOp op = dp_qkv_op(p, ly);
            jbase += dp_consume<M, 2>(ring, jbase, lo, hi, K, xs, [&](int u, int ln, const float (&acc)[M][2]) {
                op.template store<M>(u, ln, acc, xs, K >> 3, NULL);
            }, threadIdx.x == 0 ? &wns : NULL);
        } else if (kind == DP_ATT) {
            const int n = __ldcg(p.pos) + 1, live = (n + KVD_KEYS - 1) / KVD_KEYS, half = warp >> 2,
                      ht = threadIdx.x & 127;
            float *scr = reinterpret_cast<float *>(xs) + half * DP_ATT_FLOATS;
            const int items = M * p.H * live;
            for (int i = 2 * blockIdx.x + half; i < items; i += 2 * gridDim.x)
                dp_attention_item(p, ly, i / (p.H * live), (i / live) % p.H, i % live, n, scr, half, ht);
            dp_sync_consumers();  // xs (the attention scratch) is free again
        } else if (kind == DP_WO) {
            dp_stage<M>(xs, p.att, NULL, NULL, NULL, p.eps, K, s_red);
            if (threadIdx.x == 0) DP_STAMP(ph, 1, hp_globaltimer());
            const GemvRowsOp<bf16, 2> op = {ly.wo, p.y, p.D, p.Q};
            jbase += dp_consume<M, 2>(ring, jbase, lo, hi, K, xs, [&](int u, int ln, const float (&acc)[M][2]) {
                op.template store<M>(u, ln, acc, xs, K >> 3, NULL);
            }, threadIdx.x == 0 ? &wns : NULL);
        } else if (kind == DP_UP) {
            // xm = x + y and its norm
            dp_stage<M>(xs, p.x, p.y, ly.ffn_norm, p.xm, p.eps, K, s_red);
            if (threadIdx.x == 0) DP_STAMP(ph, 1, hp_globaltimer());
            int on = 0;
            if (p.gated) {
                const GemvFFNUpOp<true> op = {ly.wg, ly.wu, p.h, p.F, p.D, ly.nnz, ly.fired};
                jbase += dp_consume<M, 2>(ring, jbase, lo, hi, K, xs, [&](int u, int ln, const float (&acc)[M][2]) {
                    on += op.template store<M>(u, ln, acc, xs, K >> 3, NULL);
                }, threadIdx.x == 0 ? &wns : NULL);
            } else {
                const GemvFFNUpOp<false> op = {NULL, ly.wu, p.h, p.F, p.D, ly.nnz, ly.fired};
                jbase += dp_consume<M, 1>(ring, jbase, lo, hi, K, xs, [&](int u, int ln, const float (&acc)[M][1]) {
                    on += op.template store<M>(u, ln, acc, xs, K >> 3, NULL);
                }, threadIdx.x == 0 ? &wns : NULL);
            }
            if (lane == 0) s_count[warp] = on;
            dp_sync_consumers();
            if (threadIdx.x == 0 && ly.nnz) {
                int total = 0;
                for (int w = 0; w < DP_WARPS; w++) total += s_count[w];
                if (total) atomicAdd(ly.nnz, (unsigned long long)total);
            }
        } else if (kind == DP_DOWN) {
            dp_stage<M>(xs, p.h, NULL, NULL, NULL, p.eps, K, s_red);
            if (threadIdx.x == 0) DP_STAMP(ph, 1, hp_globaltimer());
            const GemvRowsOp<bf16, 1> op = {ly.wd, p.y, p.D, p.F};
            jbase += dp_consume<M, 1>(ring, jbase, lo, hi, K, xs, [&](int u, int ln, const float (&acc)[M][1]) {
                op.template store<M>(u, ln, acc, xs, K >> 3, NULL);
            }, threadIdx.x == 0 ? &wns : NULL);
        } else {  // the LM head: x = xm + y of the last layer, the final norm, fp32 logits (and the argmax keys)
            dp_stage<M>(xs, p.xm, p.y, p.final_norm, p.x, p.eps, K, s_red);
            if (threadIdx.x == 0) DP_STAMP(ph, 1, hp_globaltimer());
            unsigned long long kb[M];
#pragma unroll
            for (int m = 0; m < M; m++) kb[m] = 0ull;
            float *logits = p.logits;
            const int V = p.V;
            jbase += dp_consume<M, 2>(ring, jbase, lo, hi, K, xs, [&](int u, int ln, const float (&acc)[M][2]) {
                if (ln) return;
#pragma unroll
                for (int m = 0; m < M; m++)
#pragma unroll
                    for (int r = 0; r < 2; r++) {
                        logits[(size_t)m * V + 2 * u + r] = acc[m][r];
                        const unsigned long long k = argmax_key(acc[m][r], 2 * u + r);
                        kb[m] = k > kb[m] ? k : kb[m];
                    }
            }, threadIdx.x == 0 ? &wns : NULL);
            if (threadIdx.x == 0) { DP_STAMP(ph, 2, hp_globaltimer()); DP_STAMP(ph, 6, wns); }
            if (p.best) {
                if (lane == 0)
                    for (int m = 0; m < M; m++) s_keys[warp][m] = kb[m];
                dp_sync_consumers();
                if (threadIdx.x < M) {
                    unsigned long long k = 0ull;
                    for (int w = 0; w < DP_WARPS; w++) k = s_keys[w][threadIdx.x] > k ? s_keys[w][threadIdx.x] : k;
                    if (k) atomicMax(p.best + threadIdx.x, k);
                }
            }
            return;
        }
        dp_sync_consumers();  // this CTA's phase is written
        if (threadIdx.x == 0) {
            DP_STAMP(ph, 2, hp_globaltimer());
            DP_STAMP(ph, 6, wns);
            dp_grid_barrier(p.bar);
            DP_STAMP(ph, 3, hp_globaltimer());
        }
        dp_sync_consumers();
    }
}

// ---- host side ----

// Shared memory of one CTA: the slots, xs (the input rows, or the two attention workers' scratch), the mbarriers.
static inline size_t dp_smem_bytes(const DpParams *p) {
    return (size_t)p->nslot * p->slot_bytes + p->xs_bytes + 16 * (size_t)p->nslot;
}

// Sizes the ring for M rows on this device: slot = the largest unit (2 rows of D or of Q, one row of F), xs = M rows
// of the longest input, as many slots (a multiple of DP_WARPS, at most DP_MAX_SLOTS) as the shared memory takes.
// Returns 0 (and why, in err) when the step cannot run persistent: the caller keeps the separate kernels.
static inline int decode_persistent_plan(DpParams *p, int M, char *err, size_t errlen) {
    int dev, smem_optin = 0, sms = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&smem_optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    cudaCheck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    int cc = 0;
    cudaCheck(cudaDeviceGetAttribute(&cc, cudaDevAttrComputeCapabilityMajor, dev));
    const int kmax = p->D > p->Q ? (p->D > p->F ? p->D : p->F) : (p->Q > p->F ? p->Q : p->F);
    if (cc < 9) return snprintf(err, errlen, "needs a Hopper GPU (bulk copies, mbarriers)"), 0;
    if (M < 1 || M > GEMV_MAX_M) return snprintf(err, errlen, "M=%d rows (1..%d)", M, GEMV_MAX_M), 0;
    if (p->D % 8 || p->Q % 8 || p->F % 8 || p->D % 2 || p->V % 2 || p->hd % 8 || p->hd > 128 || p->Q % p->hd)
        return snprintf(err, errlen, "shape D=%d Q=%d F=%d V=%d hd=%d", p->D, p->Q, p->F, p->V, p->hd), 0;
    if (p->L < 1) return snprintf(err, errlen, "no layers"), 0;
    int slot = 4 * p->D;
    if (4 * p->Q > slot) slot = 4 * p->Q;
    if (2 * p->F > slot) slot = 2 * p->F;
    slot = (slot + 127) & ~127;
    int xs = M * kmax * 2;
    if (xs < 2 * DP_ATT_FLOATS * 4) xs = 2 * DP_ATT_FLOATS * 4;
    xs = (xs + 127) & ~127;
    const int static_bytes = 1024;  // the kernel's own __shared__ arrays, rounded up
    int nslot = (smem_optin - static_bytes - xs - 16 * DP_MAX_SLOTS) / slot;
    if (nslot > DP_MAX_SLOTS) nslot = DP_MAX_SLOTS;
    nslot &= ~(DP_WARPS - 1);
    if (nslot < DP_WARPS)
        return snprintf(err, errlen, "%d-byte units and %d bytes of input rows leave no room for %d slots", slot, xs,
                        DP_WARPS), 0;
    p->slot_bytes = slot;
    p->nslot = nslot;
    p->xs_bytes = xs;
    p->grid = sms;
    return 1;
}

template <int M>
static inline void decode_persistent_launch_m(const DpParams *p, cudaStream_t s) {
    const size_t smem = dp_smem_bytes(p);
    static size_t smem_set = 0;  // per instantiation: the limit raised and residency checked once per size
    if (smem > smem_set) {
        cudaCheck(cudaFuncSetAttribute(decode_persistent_kernel<M>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       (int)smem));
        int per_sm = 0;  // every CTA must be resident at once (the grid barrier): one per SM
        cudaCheck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, decode_persistent_kernel<M>, DP_THREADS, smem));
        if (per_sm < 1) SLLM_FATAL("decode_persistent: %zu bytes of shared memory do not fit one CTA per SM", smem);
        smem_set = smem;
    }
    decode_persistent_kernel<M><<<p->grid, DP_THREADS, smem, s>>>(*p);
    cudaCheckLaunch();
}

// One dense decoding step of M sequences (p from decode_persistent_plan, its pointers set; best zeroed when set).
static inline void decode_persistent(const DpParams *p, int M, cudaStream_t s) {
    switch (M) {
        case 1: decode_persistent_launch_m<1>(p, s); break;
        case 2: decode_persistent_launch_m<2>(p, s); break;
        case 3: decode_persistent_launch_m<3>(p, s); break;
        case 4: decode_persistent_launch_m<4>(p, s); break;
        default: SLLM_FATAL("decode_persistent: M=%d rows (1..%d)", M, GEMV_MAX_M);
    }
}

#endif  // SLLM_DECODE_PERSISTENT_CUH
