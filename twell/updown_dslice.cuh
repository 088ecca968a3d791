// twell/updown_dslice.cuh: fused up + down from a TwELL gate, D-SLICED and WEIGHT-STATIONARY.
// Same maths and contract as twell/updown.cuh (design notes, bytes and predictions: twell/DSLICE.md):
//
//   gated:     y[m,:] = sum over active n of  g[m,n] * (x[m,:] . Wu[n,:]) * WdT[n,:]
//   non-gated: y[m,:] = sum over active n of  g[m,n] * WdT[n,:]          (Wu == NULL)
//
//   tw  uint32 [M, F/C] (twell/format.h)   X [M, D] bf16   Wu [F, D] bf16   WdT [F, D] bf16 (down weight
//   transposed)   Y [M, D] bf16.  Rows whose TwELL overflows are NOT written (the dense fallback writes them);
//   every other row is written fully (all-zero rows -> exact zeros). fp32 products and sums, h = g * u in
//   fp32 (never rounded), Y rounded to bf16 once. Deterministic (fixed summation orders, no atomics).
//
// Shapes: D % 64 == 0; F % 256 == 0; F <= 8 * units-per-group (about 11400 with 227 KB of shared memory,
// see twell_dslice_workspace_create); C in {2, 4, 8}. Else TWELL_ERR_SHAPE with a message naming the rule.
//
// The weights never move: each CTA holds a [UG units x 64 columns] block of one weight matrix in shared
// memory (128-byte rows: a warp's 16-byte loads of 4 rows hit all 32 banks once = conflict-free), and
// only per-(token, unit) records move. The grid is NS = D/64 column slices x NG unit groups (UG = F/NG
// units each, NG the smallest that fits: 4 at F 5632 -> 32 x 4 = 128 CTAs at D 2048, one per SM).
// Per chunk of at most ws->TK tokens (host loop; the buffers are sized for the worst case, no host sync):
//   0. compaction: count kernel (per row: overflow flag, per-group counts) -> cub::DeviceScan over
//      [NG x mc + 1] -> fill kernel: NG per-group pair lists, column order, record = {bf16 g << 16 | n, t}.
//   1. up (gated only): CTA (s, g) streams list g in pieces of ws->cap_up pairs; an 8-lane group does 8
//      pairs (lane l owns columns 8l..8l+7 of the slice: one 16-byte LDS of the unit's 128-byte row),
//      x[t] slice kept in registers (reloaded when t changes), partial dots reduced over the 8 lanes by a
//      transposing butterfly (7 shuffles per 8 pairs). Clusters of CL slices (CL = 8 at D 2048) add their
//      partials through distributed shared memory in rank order: part[NS/CL][pairs] fp32.
//   2. reduce (gated only): h[p] = g[p] * sum_c part[c][p] (fixed order, fp32).
//   3. down: CTA (g, s) (cluster = the NG groups of one slice): per piece of ws->tch tokens, each 8-lane
//      group accumulates one token's list-g pairs (h * WdT row, fp32) into shared memory; the cluster then
//      sums the NG group partials in rank order through distributed shared memory and writes Y (bf16).
// Cluster pieces are triple-buffered with split arrive / wait, so a barrier's latency hides behind the
// next piece's work.
#ifndef SLLM_TWELL_UPDOWN_DSLICE_CUH
#define SLLM_TWELL_UPDOWN_DSLICE_CUH

#include <cooperative_groups.h>
#include <cub/cub.cuh>

#include "cuda_common.cuh"
#include "twell/format.h"

#define TWELL_DS_W 64          // columns per slice (128-byte bf16 rows)
#define TWELL_DS_NT 512        // threads per CTA of the up / down kernels (64 groups of 8 lanes)
#define TWELL_DS_NBUF 3        // cluster piece buffers (split arrive / wait pipelining)
#define TWELL_DS_MAX_NG 8      // unit groups per slice (= down cluster size, portable limit 8)
#define TWELL_DS_MAX_TILES 64   // F <= 16384 (the group limit binds first)
#define TWELL_DS_SLACK 1024    // shared memory kept free (static shared, alignment)
#define TWELL_DS_DEFAULT_PAIR_BUDGET ((size_t)1 << 30)  // bytes for the per-chunk pair buffers

typedef struct {
    int max_M, D, F, C;
    int tiles, words, slots;
    int NS, NG, UG;          // slices, unit groups, units per group (last group may be shorter)
    int CLu;                 // up cluster size (slices per cluster); nsets = NS / CLu partial sets
    int nsets;
    int cap_up;              // pairs per up piece (per CTA, per cluster barrier)
    int tch;                 // tokens per down piece
    int TK;                  // tokens per host chunk
    size_t pcap;             // pair capacity per chunk = TK * tiles * slots
    size_t smem_up, smem_down;
    int up_active_clusters, down_active_clusters;  // cudaOccupancyMaxActiveClusters (reported by the bench)
    int sms;                 // multiprocessors (grid of the reduce kernel)
    int *cnt;                // [NG * TK + 1] per-group row counts (group-major), then 0
    int *rp;                 // [NG * TK + 1] exclusive scan of cnt: list g of row t starts at rp[g * mc + t]
    uint8_t *ovf;            // [TK] 1 = overflow row (not written)
    uint2 *rec;              // [pcap] {bf16 g << 16 | unit n, chunk-local token t}
    float *part;             // [nsets, pcap] up partial dots
    float *h;                // [pcap] g * u (gated)
    void *cub_tmp;
    size_t cub_bytes;
} TwellDsliceWS;

namespace twell_ds {

__device__ __forceinline__ void bf16x8_to_f32(const uint4 v, float f[8]) {
    const uint32_t w[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        f[2 * i] = __uint_as_float(w[i] << 16);
        f[2 * i + 1] = __uint_as_float(w[i] & 0xFFFF0000u);
    }
}

__device__ __forceinline__ void cluster_arrive() { asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }

// Step 0a: one warp per row. cnt[g * mc + r] = entries of row r in unit group g (0 for overflow rows),
// ovf[r]; thread 0 of block 0 writes cnt[NG * mc] = 0 (the scan's last element = total pairs).
__global__ void __launch_bounds__(256) count_kernel(const uint32_t *__restrict__ tw, int mc, int tiles, int words,
                                                    int NG, int UG, int *__restrict__ cnt, uint8_t *__restrict__ ovf) {
    const int lane = threadIdx.x & 31;
    const int r = blockIdx.x * 8 + (threadIdx.x >> 5);
    if (blockIdx.x == 0 && threadIdx.x == 0) cnt[(size_t)NG * mc] = 0;
    if (r >= mc) return;
    const int slots = words - 1, row_words = tiles * words;
    const uint32_t *trow = tw + (size_t)r * row_words;
    int o = 0;
    for (int t = lane; t < tiles; t += 32) o |= __ldcs(trow + (size_t)t * words) > (uint32_t)slots;
    const int is_ovf = __any_sync(0xffffffffu, o);
    int c[TWELL_DS_MAX_NG];
#pragma unroll
    for (int g = 0; g < TWELL_DS_MAX_NG; g++) c[g] = 0;
    if (!is_ovf) {
        for (int w = lane; w < row_words; w += 32) {
            const int t = w / words, k = w - t * words;
            if (k == 0) continue;
            const uint32_t cntw = __ldg(trow + (size_t)t * words);
            if ((uint32_t)k > cntw) continue;
            const int n = t * TWELL_TILE + (int)(__ldcs(trow + w) & 0xFFu);
            const int g = n / UG;
#pragma unroll
            for (int j = 0; j < TWELL_DS_MAX_NG; j++) c[j] += (j == g);
        }
    }
#pragma unroll
    for (int g = 0; g < TWELL_DS_MAX_NG; g++) {
        const int s = __reduce_add_sync(0xffffffffu, c[g]);
        if (lane == 0 && g < NG) cnt[(size_t)g * mc + r] = s;
    }
    if (lane == 0) ovf[r] = (uint8_t)is_ovf;
}

// Step 0c: one warp per row: writes the row's entries into the NG lists, column order.
// Position of an entry = rp[g*mc + r] + (its index in the row) - (entries of the row in groups < g).
__global__ void __launch_bounds__(256) fill_kernel(const uint32_t *__restrict__ tw, int mc, int tiles, int words,
                                                   int NG, int UG, const int *__restrict__ cnt,
                                                   const int *__restrict__ rp, const uint8_t *__restrict__ ovf,
                                                   uint2 *__restrict__ rec) {
    __shared__ int s_off[8][TWELL_DS_MAX_TILES];  // tile offsets within the row
    const int lane = threadIdx.x & 31, wid = threadIdx.x >> 5;
    const int r = blockIdx.x * 8 + wid;
    if (r >= mc || ovf[r]) return;
    const uint32_t *trow = tw + (size_t)r * tiles * words;
    int *off = s_off[wid];
    // Exclusive scan of the tile counts (not an overflow row: every count <= slots).
    int carry = 0;
    for (int base = 0; base < tiles; base += 32) {
        const int t = base + lane;
        const int c = t < tiles ? (int)__ldg(trow + (size_t)t * words) : 0;
        int incl = c;
#pragma unroll
        for (int o = 1; o < 32; o <<= 1) {
            const int n = __shfl_up_sync(0xffffffffu, incl, o);
            if (lane >= o) incl += n;
        }
        if (t < tiles) off[t] = carry + incl - c;
        carry += __shfl_sync(0xffffffffu, incl, 31);
    }
    int gstart[TWELL_DS_MAX_NG], gbase[TWELL_DS_MAX_NG];
    int acc = 0;
#pragma unroll
    for (int g = 0; g < TWELL_DS_MAX_NG; g++) {
        gstart[g] = acc;
        gbase[g] = g < NG ? rp[(size_t)g * mc + r] : 0;
        acc += g < NG ? cnt[(size_t)g * mc + r] : 0;
    }
    __syncwarp();
    const int row_words = tiles * words;
    for (int w = lane; w < row_words; w += 32) {
        const int t = w / words, k = w - t * words;
        if (k == 0) continue;
        const uint32_t cntw = __ldg(trow + (size_t)t * words);
        if ((uint32_t)k > cntw) continue;
        const uint32_t word = __ldcs(trow + w);
        const int n = t * TWELL_TILE + (int)(word & 0xFFu);
        const int g = n / UG;
        int pos = off[t] + k - 1;
#pragma unroll
        for (int j = 0; j < TWELL_DS_MAX_NG; j++)
            if (j == g) pos += gbase[j] - gstart[j];
        rec[pos] = make_uint2((word & 0xFFFF0000u) | (uint32_t)n, (uint32_t)r);
    }
}

// Loads the [UG x 64] block (units n0.., columns col0..) of W [F, D] into shared memory (zeros past F).
__device__ __forceinline__ void load_weight_block(uint4 *sW, const bf16 *__restrict__ W, int n0, int UG, int F, int D,
                                                  int col0) {
    for (int i = threadIdx.x; i < UG * 8; i += blockDim.x) {
        const int r = i >> 3, c = i & 7;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (n0 + r < F) v = __ldg(reinterpret_cast<const uint4 *>(W + (size_t)(n0 + r) * D + col0 + c * 8));
        sW[i] = v;
    }
}

// Step 1: grid (NS, NG), cluster (CL, 1, 1) over slices. Writes part[(s / CL) * pcap + p] for the pairs p
// of list g. Dynamic smem: UG * 128 B of weights + NBUF * cap floats.
__global__ void __launch_bounds__(TWELL_DS_NT, 1)
up_kernel(const bf16 *__restrict__ X, const bf16 *__restrict__ Wu, const uint2 *__restrict__ rec,
          const int *__restrict__ rp, float *__restrict__ part, int mc, int D, int F, int UG, int cap, size_t pcap) {
    namespace cg = cooperative_groups;
    extern __shared__ __align__(16) unsigned char ds_smem[];
    cg::cluster_group cluster = cg::this_cluster();
    const int s = blockIdx.x, g = blockIdx.y;
    const int CL = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    const int n0 = g * UG;
    uint4 *sW = reinterpret_cast<uint4 *>(ds_smem);
    float *s_part = reinterpret_cast<float *>(ds_smem + (size_t)UG * 128);
    load_weight_block(sW, Wu, n0, UG, F, D, s * TWELL_DS_W);
    __syncthreads();

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int k = lane >> 3, l = lane & 7;
    const int L0 = rp[(size_t)g * mc], L1 = rp[(size_t)(g + 1) * mc];
    const int total = L1 - L0;
    const int nch = (total + cap - 1) / cap;
    const size_t set = (size_t)(s / CL);
    int cur_t = -1;
    float xr[8];
#pragma unroll
    for (int e = 0; e < 8; e++) xr[e] = 0.0f;

    for (int c = 0; c <= nch; c++) {
        if (c < nch) {
            float *buf = s_part + (size_t)(c % TWELL_DS_NBUF) * cap;
            const int base = L0 + c * cap;
            const int cnt = min(cap, L1 - base);
            for (int q = warp; q * 32 < cnt; q += TWELL_DS_NT / 32) {
                float v[8];
#pragma unroll
                for (int j = 0; j < 8; j++) {
                    const int lp = q * 32 + 4 * j + k;
                    int n = n0, t = cur_t;
                    if (lp < cnt) {
                        const uint2 r = __ldg(rec + base + lp);
                        n = (int)(r.x & 0xFFFFu);
                        t = (int)r.y;
                    }
                    if (t != cur_t) {
                        bf16x8_to_f32(__ldg(reinterpret_cast<const uint4 *>(X + (size_t)t * D + s * TWELL_DS_W + l * 8)),
                                      xr);
                        cur_t = t;
                    }
                    float w[8];
                    bf16x8_to_f32(sW[(n - n0) * 8 + l], w);
                    float a = 0.0f;
#pragma unroll
                    for (int e = 0; e < 8; e++) a = fmaf(xr[e], w[e], a);
                    v[j] = a;
                }
                // Transposing butterfly over the 8 lanes of the group: lane l ends with pair j = l.
                const int b4 = (l >> 2) & 1, b2 = (l >> 1) & 1, b1 = l & 1;
                float w4[4], w2[2];
#pragma unroll
                for (int i = 0; i < 4; i++) {
                    const float send = b4 ? v[i] : v[i + 4], keep = b4 ? v[i + 4] : v[i];
                    w4[i] = keep + __shfl_xor_sync(0xffffffffu, send, 4);
                }
#pragma unroll
                for (int i = 0; i < 2; i++) {
                    const float send = b2 ? w4[i] : w4[i + 2], keep = b2 ? w4[i + 2] : w4[i];
                    w2[i] = keep + __shfl_xor_sync(0xffffffffu, send, 2);
                }
                const float send = b1 ? w2[0] : w2[1], keep = b1 ? w2[1] : w2[0];
                const float u = keep + __shfl_xor_sync(0xffffffffu, send, 1);
                const int lp = q * 32 + 4 * l + k;
                if (lp < cnt) buf[lp] = u;
            }
        }
        __syncwarp();
        if (c > 0) {
            cluster_wait();  // every CTA of the cluster has written piece c-1
            const int pc = c - 1;
            const int base = L0 + pc * cap;
            const int cnt = min(cap, L1 - base);
            const size_t boff = (size_t)(pc % TWELL_DS_NBUF) * cap;
            for (int i = rank * TWELL_DS_NT + threadIdx.x; i < cnt; i += CL * TWELL_DS_NT) {
                float a = 0.0f;
                for (int q = 0; q < CL; q++) a += cluster.map_shared_rank(s_part + boff, q)[i];
                part[set * pcap + base + i] = a;
            }
        }
        __syncwarp();
        cluster_arrive();
    }
    cluster_wait();  // no CTA exits while a peer may still read its shared memory
}

// Step 2: h[p] = g[p] * sum over the nsets partials (fixed order). P = rp[NG * mc] (device).
__global__ void reduce_kernel(const uint2 *__restrict__ rec, const float *__restrict__ part, const int *__restrict__ rp,
                              size_t rp_last, int nsets, size_t pcap, float *__restrict__ h) {
    const int P = rp[rp_last];
    for (int p = blockIdx.x * blockDim.x + threadIdx.x; p < P; p += gridDim.x * blockDim.x) {
        float a = 0.0f;
        for (int c = 0; c < nsets; c++) a += __ldcs(part + (size_t)c * pcap + p);
        h[p] = __uint_as_float(__ldg(&rec[p].x) & 0xFFFF0000u) * a;
    }
}

// Step 3: grid (NG, NS), cluster (NG, 1, 1) over groups. h == NULL: non-gated (h = g from the record).
// Dynamic smem: UG * 128 B of weights + NBUF * tch * 64 floats.
__global__ void __launch_bounds__(TWELL_DS_NT, 1)
down_kernel(const uint2 *__restrict__ rec, const float *__restrict__ h, const int *__restrict__ rp,
            const uint8_t *__restrict__ ovf, const bf16 *__restrict__ WdT, bf16 *__restrict__ Y, int mc, int D, int F,
            int UG, int tch) {
    namespace cg = cooperative_groups;
    extern __shared__ __align__(16) unsigned char ds_smem[];
    cg::cluster_group cluster = cg::this_cluster();
    const int g = blockIdx.x, s = blockIdx.y;
    const int NG = (int)cluster.num_blocks(), rank = (int)cluster.block_rank();
    const int n0 = g * UG;
    uint4 *sW = reinterpret_cast<uint4 *>(ds_smem);
    float *s_y = reinterpret_cast<float *>(ds_smem + (size_t)UG * 128);
    load_weight_block(sW, WdT, n0, UG, F, D, s * TWELL_DS_W);
    __syncthreads();

    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int l = lane & 7;
    const int grp = warp * 4 + (lane >> 3);  // 0..63
    const unsigned gmask = 0xFFu << (lane & 24);
    const int nch = (mc + tch - 1) / tch;
    const int *rpg = rp + (size_t)g * mc;

    for (int c = 0; c <= nch; c++) {
        if (c < nch) {
            float *buf = s_y + (size_t)(c % TWELL_DS_NBUF) * tch * TWELL_DS_W;
            const int t0 = c * tch;
            const int tn = min(tch, mc - t0);
            for (int tl = grp; tl < tn; tl += 64) {
                const int t = t0 + tl;
                const int a = rpg[t], b = rpg[t + 1];
                float acc[8];
#pragma unroll
                for (int e = 0; e < 8; e++) acc[e] = 0.0f;
                for (int p = a; p < b; p += 8) {
                    uint32_t rx = 0;
                    float hv = 0.0f;
                    if (p + l < b) {
                        rx = __ldg(&rec[p + l].x);
                        hv = h ? __ldg(h + p + l) : __uint_as_float(rx & 0xFFFF0000u);
                    }
                    const int m = min(8, b - p);
                    for (int j = 0; j < m; j++) {
                        const int n = (int)(__shfl_sync(gmask, rx, j, 8) & 0xFFFFu);
                        const float hj = __shfl_sync(gmask, hv, j, 8);
                        float w[8];
                        bf16x8_to_f32(sW[(n - n0) * 8 + l], w);
#pragma unroll
                        for (int e = 0; e < 8; e++) acc[e] = fmaf(hj, w[e], acc[e]);
                    }
                }
                float4 *dst = reinterpret_cast<float4 *>(buf + (size_t)tl * TWELL_DS_W + l * 8);
                dst[0] = make_float4(acc[0], acc[1], acc[2], acc[3]);
                dst[1] = make_float4(acc[4], acc[5], acc[6], acc[7]);
            }
        }
        __syncwarp();
        if (c > 0) {
            cluster_wait();
            const int pc = c - 1;
            const int t0 = pc * tch;
            const int tn = min(tch, mc - t0);
            const size_t boff = (size_t)(pc % TWELL_DS_NBUF) * tch * TWELL_DS_W;
            for (int i = rank * TWELL_DS_NT + threadIdx.x; i < tn * 16; i += NG * TWELL_DS_NT) {
                const int tl = i >> 4, c4 = i & 15;
                if (ovf[t0 + tl]) continue;
                float4 a = make_float4(0.f, 0.f, 0.f, 0.f);
                for (int q = 0; q < NG; q++) {
                    const float4 v =
                        reinterpret_cast<const float4 *>(cluster.map_shared_rank(s_y + boff, q))[(size_t)tl * 16 + c4];
                    a.x += v.x; a.y += v.y; a.z += v.z; a.w += v.w;
                }
                __nv_bfloat162 lo = __floats2bfloat162_rn(a.x, a.y), hi = __floats2bfloat162_rn(a.z, a.w);
                uint2 o = make_uint2(*reinterpret_cast<uint32_t *>(&lo), *reinterpret_cast<uint32_t *>(&hi));
                __stcs(reinterpret_cast<uint2 *>(Y + (size_t)(t0 + tl) * D + s * TWELL_DS_W + c4 * 4), o);
            }
        }
        __syncwarp();
        cluster_arrive();
    }
    cluster_wait();
}

static inline int max_smem_optin(void) {
    int dev = 0, v = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&v, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    return v;
}

static inline cudaLaunchConfig_t launch_cfg(dim3 grid, size_t smem, unsigned cluster_x, cudaLaunchAttribute *attr,
                                            cudaStream_t stream) {
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = dim3(TWELL_DS_NT);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = cluster_x;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
    return cfg;
}

}  // namespace twell_ds

// Creates the workspace for up to max_M tokens of shape (D, F, C). pair_budget: bytes for the per-chunk
// pair buffers (0 = TWELL_DS_DEFAULT_PAIR_BUDGET); tokens per chunk TK follow from the worst case of
// tiles * slots pairs per row. Returns TWELL_OK or TWELL_ERR_SHAPE / TWELL_ERR_ARG (message printed).
static inline int twell_dslice_workspace_create(TwellDsliceWS *ws, int max_M, int D, int F, int C,
                                                size_t pair_budget) {
    memset(ws, 0, sizeof(*ws));
    TwellShape sh;
    if (twell_shape_init(&sh, max_M, F, C) != TWELL_OK) return TWELL_ERR_SHAPE;
    if (max_M <= 0) {
        fprintf(stderr, "error: twell_dslice: max_M=%d must be > 0\n", max_M);
        return TWELL_ERR_SHAPE;
    }
    if (D <= 0 || D % TWELL_DS_W != 0) {
        fprintf(stderr, "error: twell_dslice: D=%d must be a positive multiple of %d (the column slice width)\n", D,
                TWELL_DS_W);
        return TWELL_ERR_SHAPE;
    }
    const int smem_max = twell_ds::max_smem_optin();
    {
        int dev = 0;
        cudaCheck(cudaGetDevice(&dev));
        cudaCheck(cudaDeviceGetAttribute(&ws->sms, cudaDevAttrMultiProcessorCount, dev));
    }
    const size_t down_buf = (size_t)TWELL_DS_NBUF * 64 * TWELL_DS_W * sizeof(float);  // tch >= 64
    const long long ug_max = ((long long)smem_max - TWELL_DS_SLACK - (long long)down_buf) / 128;
    if (ug_max < 256) {
        fprintf(stderr, "error: twell_dslice: the device's %d bytes of shared memory per block are too few\n",
                smem_max);
        return TWELL_ERR_SHAPE;
    }
    int NG = (int)((F + ug_max - 1) / ug_max);
    if (NG > TWELL_DS_MAX_NG || sh.tiles > TWELL_DS_MAX_TILES) {
        fprintf(stderr, "error: twell_dslice: F=%d needs %d unit groups of <= %lld units (shared memory); at most %d "
                        "groups (and F <= 16384) are supported: F <= %lld\n",
                F, NG, ug_max, TWELL_DS_MAX_NG, (long long)TWELL_DS_MAX_NG * ug_max < TWELL_DS_MAX_TILES * 256 ?
                (long long)TWELL_DS_MAX_NG * ug_max : (long long)TWELL_DS_MAX_TILES * 256);
        return TWELL_ERR_SHAPE;
    }
    ws->max_M = max_M; ws->D = D; ws->F = F; ws->C = C;
    ws->tiles = sh.tiles; ws->words = sh.words; ws->slots = sh.slots;
    ws->NG = NG;
    ws->UG = (F + NG - 1) / NG;
    ws->NS = D / TWELL_DS_W;
    ws->CLu = 1;
    for (int cl = 8; cl >= 1; cl >>= 1)
        if (ws->NS % cl == 0) { ws->CLu = cl; break; }
    const size_t wbytes = (size_t)ws->UG * 128;
    const size_t left = (size_t)smem_max - TWELL_DS_SLACK - wbytes;
    ws->cap_up = (int)(left / (TWELL_DS_NBUF * sizeof(float)) / 256 * 256);
    ws->tch = (int)(left / (TWELL_DS_NBUF * TWELL_DS_W * sizeof(float)) / 64 * 64);
    if (ws->tch > 256) ws->tch = 256;
    ws->smem_up = wbytes + (size_t)TWELL_DS_NBUF * ws->cap_up * sizeof(float);
    ws->smem_down = wbytes + (size_t)TWELL_DS_NBUF * ws->tch * TWELL_DS_W * sizeof(float);
    cudaCheck(cudaFuncSetAttribute(twell_ds::up_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)ws->smem_up));
    cudaCheck(cudaFuncSetAttribute(twell_ds::down_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)ws->smem_down));
    // Up cluster: the largest CL (dividing NS, <= 8) whose clusters can all be resident at once
    // (active clusters x CL >= NS x NG: one wave); else the largest that can be placed at all.
    cudaLaunchAttribute attr[1];
    {
        int best = 0, best_n = 0, first = 0, first_n = 0;
        for (int cl = ws->CLu; cl >= 1; cl >>= 1) {
            if (ws->NS % cl) continue;
            cudaLaunchConfig_t cfg = twell_ds::launch_cfg(dim3(ws->NS, NG), ws->smem_up, cl, attr, 0);
            int n = 0;
            if (cudaOccupancyMaxActiveClusters(&n, twell_ds::up_kernel, &cfg) != cudaSuccess || n <= 0) {
                (void)cudaGetLastError();
                continue;
            }
            if (!first) { first = cl; first_n = n; }
            if ((long long)n * cl >= (long long)ws->NS * NG) { best = cl; best_n = n; break; }
        }
        ws->CLu = best ? best : first;
        ws->up_active_clusters = best ? best_n : first_n;
    }
    {
        cudaLaunchConfig_t cfg = twell_ds::launch_cfg(dim3(NG, ws->NS), ws->smem_down, NG, attr, 0);
        int n = 0;
        if (cudaOccupancyMaxActiveClusters(&n, twell_ds::down_kernel, &cfg) != cudaSuccess || n <= 0) {
            (void)cudaGetLastError();
            fprintf(stderr, "error: twell_dslice: a cluster of %d CTAs with %zu bytes of shared memory each cannot "
                            "be placed on this device (F=%d)\n", NG, ws->smem_down, F);
            return TWELL_ERR_SHAPE;
        }
        ws->down_active_clusters = n;
    }
    if (ws->up_active_clusters <= 0) {
        fprintf(stderr, "error: twell_dslice: the up kernel (%zu bytes of shared memory) cannot be placed\n",
                ws->smem_up);
        return TWELL_ERR_SHAPE;
    }
    ws->nsets = ws->NS / ws->CLu;
    const size_t row_pairs = (size_t)ws->tiles * ws->slots;
    const size_t per_pair = sizeof(uint2) + sizeof(float) + sizeof(float) * (size_t)ws->nsets;
    if (!pair_budget) pair_budget = TWELL_DS_DEFAULT_PAIR_BUDGET;
    size_t tk = pair_budget / (row_pairs * per_pair);
    if (tk < 1) tk = 1;
    if (tk > (size_t)max_M) tk = (size_t)max_M;
    if (tk * row_pairs > (size_t)INT32_MAX) tk = (size_t)INT32_MAX / row_pairs;
    ws->TK = (int)tk;
    ws->pcap = tk * row_pairs;
    const size_t nrp = (size_t)NG * ws->TK + 1;
    cudaCheck(cudaMalloc(&ws->cnt, sizeof(int) * nrp));
    cudaCheck(cudaMalloc(&ws->rp, sizeof(int) * nrp));
    cudaCheck(cudaMalloc(&ws->ovf, (size_t)ws->TK));
    cudaCheck(cudaMalloc(&ws->rec, sizeof(uint2) * ws->pcap));
    cudaCheck(cudaMalloc(&ws->h, sizeof(float) * ws->pcap));
    cudaCheck(cudaMalloc(&ws->part, sizeof(float) * ws->pcap * ws->nsets));
    cudaCheck(cub::DeviceScan::ExclusiveSum(nullptr, ws->cub_bytes, ws->cnt, ws->rp, (int)nrp));
    cudaCheck(cudaMalloc(&ws->cub_tmp, ws->cub_bytes > 0 ? ws->cub_bytes : 1));
    return TWELL_OK;
}

static inline void twell_dslice_workspace_free(TwellDsliceWS *ws) {
    if (ws->cnt) cudaCheck(cudaFree(ws->cnt));
    if (ws->rp) cudaCheck(cudaFree(ws->rp));
    if (ws->ovf) cudaCheck(cudaFree(ws->ovf));
    if (ws->rec) cudaCheck(cudaFree(ws->rec));
    if (ws->h) cudaCheck(cudaFree(ws->h));
    if (ws->part) cudaCheck(cudaFree(ws->part));
    if (ws->cub_tmp) cudaCheck(cudaFree(ws->cub_tmp));
    memset(ws, 0, sizeof(*ws));
}

// The four steps on one chunk of mc <= ws->TK rows (tw, X, Y already offset to the chunk). Public so that
// the benchmark can time them one by one.
static inline void twell_dslice_compact(TwellDsliceWS *ws, const uint32_t *tw, int mc, cudaStream_t stream) {
    const int blocks = CEIL_DIV(mc, 8);
    twell_ds::count_kernel<<<blocks, 256, 0, stream>>>(tw, mc, ws->tiles, ws->words, ws->NG, ws->UG, ws->cnt, ws->ovf);
    cudaCheckLaunch();
    size_t bytes = ws->cub_bytes;
    cudaCheck(cub::DeviceScan::ExclusiveSum(ws->cub_tmp, bytes, ws->cnt, ws->rp, ws->NG * mc + 1, stream));
    twell_ds::fill_kernel<<<blocks, 256, 0, stream>>>(tw, mc, ws->tiles, ws->words, ws->NG, ws->UG, ws->cnt, ws->rp,
                                                      ws->ovf, ws->rec);
    cudaCheckLaunch();
}

static inline void twell_dslice_up(TwellDsliceWS *ws, const bf16 *X, const bf16 *Wu, int mc, cudaStream_t stream) {
    cudaLaunchAttribute attr[1];
    cudaLaunchConfig_t cfg = twell_ds::launch_cfg(dim3(ws->NS, ws->NG), ws->smem_up, ws->CLu, attr, stream);
    cudaCheck(cudaLaunchKernelEx(&cfg, twell_ds::up_kernel, X, Wu, (const uint2 *)ws->rec, (const int *)ws->rp,
                                 ws->part, mc, ws->D, ws->F, ws->UG, ws->cap_up, ws->pcap));
}

static inline void twell_dslice_reduce(TwellDsliceWS *ws, int mc, cudaStream_t stream) {
    twell_ds::reduce_kernel<<<ws->sms * 4, 512, 0, stream>>>(ws->rec, ws->part, ws->rp, (size_t)ws->NG * mc, ws->nsets,
                                                          ws->pcap, ws->h);
    cudaCheckLaunch();
}

static inline void twell_dslice_down(TwellDsliceWS *ws, int gated, const bf16 *WdT, bf16 *Y, int mc,
                                     cudaStream_t stream) {
    cudaLaunchAttribute attr[1];
    cudaLaunchConfig_t cfg = twell_ds::launch_cfg(dim3(ws->NG, ws->NS), ws->smem_down, ws->NG, attr, stream);
    cudaCheck(cudaLaunchKernelEx(&cfg, twell_ds::down_kernel, (const uint2 *)ws->rec,
                                 (const float *)(gated ? ws->h : nullptr), (const int *)ws->rp,
                                 (const uint8_t *)ws->ovf, WdT, Y, mc, ws->D, ws->F, ws->UG, ws->tch));
}

// The fused up + down (see the top of the file). Wu == NULL: non-gated. No host synchronization.
// Returns TWELL_OK, or TWELL_ERR_WORKSPACE / TWELL_ERR_ARG with a message.
static inline int twell_dslice_updown(TwellDsliceWS *ws, const uint32_t *tw, int C, const bf16 *X, const bf16 *Wu,
                                      const bf16 *WdT, bf16 *Y, int M, int D, int F, cudaStream_t stream) {
    if (!ws || !ws->rec) {
        fprintf(stderr, "error: twell_dslice_updown: workspace not created\n");
        return TWELL_ERR_ARG;
    }
    if (D != ws->D || F != ws->F || C != ws->C || M > ws->max_M || M < 0) {
        fprintf(stderr, "error: twell_dslice_updown: shapes M=%d D=%d F=%d C=%d do not match the workspace (max_M=%d "
                        "D=%d F=%d C=%d)\n", M, D, F, C, ws->max_M, ws->D, ws->F, ws->C);
        return TWELL_ERR_WORKSPACE;
    }
    if (M == 0) return TWELL_OK;
    if (!tw || !WdT || !Y || (Wu && !X) ||
        (((uintptr_t)X | (uintptr_t)Wu | (uintptr_t)WdT | (uintptr_t)Y | (uintptr_t)tw) & 15)) {
        fprintf(stderr, "error: twell_dslice_updown: tw, WdT, Y (and X, Wu when gated) must be non-NULL and 16-byte "
                        "aligned\n");
        return TWELL_ERR_ARG;
    }
    const int nchunks = CEIL_DIV(M, ws->TK);
    const int per = CEIL_DIV(M, nchunks);
    const size_t row_words = (size_t)F / C;
    for (int m0 = 0; m0 < M; m0 += per) {
        const int mc = M - m0 < per ? M - m0 : per;
        twell_dslice_compact(ws, tw + (size_t)m0 * row_words, mc, stream);
        if (Wu) {
            twell_dslice_up(ws, X + (size_t)m0 * D, Wu, mc, stream);
            twell_dslice_reduce(ws, mc, stream);
        }
        twell_dslice_down(ws, Wu != NULL, WdT, Y + (size_t)m0 * D, mc, stream);
    }
    return TWELL_OK;
}

#endif  // SLLM_TWELL_UPDOWN_DSLICE_CUH
