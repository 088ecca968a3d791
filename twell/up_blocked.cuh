// twell/up_blocked.cuh: the up of the split up/down for BLOCKS of T tokens that share weight rows (the "blocked
// up", ws->split_up = TWELL_SPLIT_UP_B256 / TWELL_SPLIT_UP_B512). Same result as the token-major up of
// twell/updown_split.cuh (the pairs {unit n, h = g * (x . Wu[n])} of every non-overflow row, in column order), with
// fp32 dots summed in another fixed order (deterministic, not bit-identical to the token-major up).
// OPT-IN, NOT THE DEFAULT: correct on every test, but slower than the token-major up (H200, M 65536, uniform nnz 29:
// whole up 1.62 ms (T 256) against 1.03; build 0.27 + up 1.23 + finish 0.07 ms; dev/RESULTS.md runs 47-51).
//
// Why: the token-major up reads a whole 4 KB Wu row from L2 per (token, unit) pair: 7.8 GB at nnz 29, M 65536, at
// ~9.8 TB/s (the measured floor of random 4 KB rows). T tokens of a block share units: at uniform nnz 29 of 5632
// units, each unit of a 512-token block's union serves ~2.8 of its tokens, so reading each union row once per
// block moves ~2.8x fewer Wu bytes. The dots are computed on tensor cores (mma.m16n8k16): 16 consecutive entries of
// the block's unit-major entry list against the (at most 16) units they span; only the (entry, own unit) products
// are kept (1 of 8 of each mma). Measured (ncu, run 50): the up kernel is bound by instruction issue, not by L2.
//
//   tw  uint32 [rows, F/C] (twell/format.h)   X [rows, D] bf16   Wu [F, D] bf16 (row n at Wu + n * ldw)
//   pairs uint2 [rows, P], cnt int [rows]: as written by twell_split_up_kernel (the down kernel reads them).
//
// Kernels, per chunk of rows (one stream, no host sync):
//  1. build (one CTA of 1024 threads per block b of T rows): the rows' totals (cnt[row]; -1 for an overflow row),
//     then every entry (token t, unit n, gate g, position i in the row) is placed in UNIT-MAJOR order in the block's
//     area of `cap` entries, cut into groups of 16 consecutive entries (group G = entries [16 G, 16 G + 16)):
//     ent[e] = t | rank << 16 (rank: the entry's unit among the group's units, ascending, 0..15),
//     aux[e] = i | bf16(g) << 16,  gunit[16 G + rank] = the unit (-1 past the group's units),
//     binfo[b] = number of entries. Within a unit the entries' order depends on shared-memory atomics; no result
//     does (every entry's dot is computed alone, by its own mma row).
//     A block with more than cap entries (heavy rows) is not built: binfo[b] = -1 and its rows are appended to
//     `rest` (count rest_n), which the token-major up kernel computes; their number is counted (bu_rows).
//  2. up (grid nblk x D/128, NW warps): CTA (b, p) copies x[block's rows, columns 128 p .. 128 p + 127] into shared
//     memory once (streamed; T x 256 B; 16-byte chunk c of token t at c ^ 4 (t & 1): rows of odd tokens use the
//     other half of the banks), then each warp takes groups (the metadata of group k + 2 and the weights of group
//     k + 1 in flight while group k computes): A = the 16 entries' x rows (one 16-byte shared load per lane per two
//     k-steps), B = Wu[the group's units, 128 columns] loaded straight into fragment registers (the k order inside
//     the part is permuted identically for A and B: lane q of a quad reads the chunk 4 s + q of both), 8 k-steps x
//     1 or 2 mma (<= 8 or <= 16 units). part[b, p, e] = the fp32 partial dot (streamed).
//  3. finish (one thread per entry): u = sum over the parts p = 0 .. D/128 - 1 in order, h = g * u,
//     pairs[row * P + i] = {n, h}.
// Shapes: D % 128 == 0, D <= 8192, F <= 65535, T x cap <= 65535 and the build kernel's shared memory within the
// device's limit (twell_bu_supports); anything else: the token-major up (AUTO) or a clear error (explicit setting).
#ifndef SLLM_TWELL_UP_BLOCKED_CUH
#define SLLM_TWELL_UP_BLOCKED_CUH

#include "cuda_common.cuh"
#include "tc_utils.cuh"
#include "twell/format.h"

#define TWELL_BU_PW 128           // columns per part (one CTA of the up kernel)
#define TWELL_BU_CAPR 80          // default entries per token of a block's area (ws->split_bu_capr)
#define TWELL_BU_BUILD_NT 1024    // threads of the build kernel

// Buffers of one chunk (the FFN keeps two, one per stream).
typedef struct {
    uint32_t *ent, *aux;  // [nblk * cap]
    float *part;          // [nblk, D / 128, cap]
    int *gunit;           // [nblk, cap]: group G's units in slots [16 G, 16 G + 16) (rank order), -1 past them
    int *binfo;           // [nblk]
    int *rest;            // [rows]: rows of blocks over capacity (token-major up), n_rest = rest_n[0]
    int *rest_n;          // [1]
    int T, cap, nblk, rows, D, F;  // what the buffers were sized for (cap: entries per block)
    int stage_mask;       // benchmarks: 0 = every kernel, else bits 1 build, 2 token-major rest, 4 up, 8 finish
} TwellBlockedUpBuf;

static inline size_t twell_bu_build_smem(int T, int F, int cap) {  // + the rows' tile counts, one byte each
    return sizeof(int) * (2 * (size_t)T + (size_t)F + 34 + (size_t)cap / 16 + 1) + sizeof(uint16_t) * (size_t)cap +
           (size_t)T * (F / TWELL_TILE);
}
static inline size_t twell_bu_up_smem(int T) { return (size_t)T * TWELL_BU_PW * sizeof(bf16); }

// 1 if the blocked up can run this shape with T tokens per block and capr entries per token of the area;
// else 0 and, when why != NULL, the reason (a constraint) in why.
static inline int twell_bu_supports(int D, int F, int T, int capr, char *why, size_t why_len) {
    int smem_max = 0, dev = 0;
    cudaCheck(cudaGetDevice(&dev));
    cudaCheck(cudaDeviceGetAttribute(&smem_max, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
    const long long cap = (long long)T * capr;
    const char *r = NULL;
    char buf[160];
    if (D % TWELL_BU_PW != 0 || D > 8192) r = "D must be a multiple of 128 and <= 8192";
    else if (F > 65535) r = "F must be <= 65535 (16-bit unit index)";
    else if (T != 256 && T != 512) r = "T (tokens per block) must be 256 or 512";
    else if (capr < 1 || cap > 65535) r = "entries per block (T x capr) must be in 1..65535";
    else if (twell_bu_build_smem(T, F, (int)cap) > (size_t)smem_max) {
        snprintf(buf, sizeof buf, "the build kernel needs %zu B of shared memory (> %d): F or T x capr too large",
                 twell_bu_build_smem(T, F, (int)cap), smem_max);
        r = buf;
    }
    if (r && why) snprintf(why, why_len, "%s", r);
    return r == NULL;
}

// Allocates b for chunks of up to `rows` rows (T tokens per block, capr entries per token).
static inline void twell_bu_alloc(TwellBlockedUpBuf *b, int rows, int D, int F, int T, int capr) {
    memset(b, 0, sizeof(*b));
    b->T = T; b->cap = T * capr; b->nblk = CEIL_DIV(rows, T); b->rows = rows; b->D = D; b->F = F;
    const size_t ne = (size_t)b->nblk * b->cap;
    cudaCheck(cudaMalloc(&b->ent, sizeof(uint32_t) * ne));
    cudaCheck(cudaMalloc(&b->aux, sizeof(uint32_t) * ne));
    cudaCheck(cudaMalloc(&b->part, sizeof(float) * ne * (D / TWELL_BU_PW)));
    cudaCheck(cudaMalloc(&b->gunit, sizeof(int) * ne));
    cudaCheck(cudaMalloc(&b->binfo, sizeof(int) * (size_t)b->nblk));
    cudaCheck(cudaMalloc(&b->rest, sizeof(int) * (size_t)rows));
    cudaCheck(cudaMalloc(&b->rest_n, sizeof(int)));
}
static inline void twell_bu_free(TwellBlockedUpBuf *b) {
    if (!b->ent) return;
    cudaCheck(cudaFree(b->ent)); cudaCheck(cudaFree(b->aux)); cudaCheck(cudaFree(b->part));
    cudaCheck(cudaFree(b->binfo)); cudaCheck(cudaFree(b->gunit)); cudaCheck(cudaFree(b->rest));
    cudaCheck(cudaFree(b->rest_n));
    memset(b, 0, sizeof(*b));
}

// 1. Build (see the header). Dynamic shared memory: twell_bu_build_smem(T, F, cap).
template <int T>
__global__ void __launch_bounds__(TWELL_BU_BUILD_NT)
twell_bu_build_kernel(const uint32_t *__restrict__ tw, int rows, int tiles, int words, int F, int cap,
                      int *__restrict__ cnt, uint32_t *__restrict__ ent, uint32_t *__restrict__ aux,
                      int *__restrict__ gunit, int *__restrict__ binfo, int *__restrict__ rest, int *__restrict__ rest_n,
                      int *__restrict__ n_heavy, int *__restrict__ bu_rows,
                      unsigned long long *__restrict__ nnz_sparse, int heavy_at) {
    constexpr int NT = TWELL_BU_BUILD_NT, NW = NT / 32;
    extern __shared__ __align__(16) unsigned char twell_smem[];
    int *s_tot = reinterpret_cast<int *>(twell_smem);  // [T] active units of the row; -1 overflow; -2 past the chunk
    int *s_base = s_tot + T;                            // [T] the row's first position in token-major order
    int *s_unit = s_base + T;                           // [F] count of unit n, then (offset | j << 16)
    int *s_warp = s_unit + F;                           // [34] scan scratch
    int *s_jfirst = s_warp + 34;                                   // [cap / 16 + 1] union index of group G's first unit
    uint16_t *s_pos = reinterpret_cast<uint16_t *>(s_jfirst + cap / 16 + 1);  // [cap] entry's position in its unit
    unsigned char *s_tc = reinterpret_cast<unsigned char *>(s_pos + cap);  // [T, tiles] tile counts (<= slots < 256)
    const int b = blockIdx.x, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    const int slots = words - 1, r0 = b * T;
    const int nvalid = rows - r0 < T ? rows - r0 : T;

    // Pass 0: row totals and overflow flags (warp per row, lane per tile).
    for (int t = warp; t < T; t += NW) {
        int tot = -2;
        if (t < nvalid) {
            const uint32_t *trow = tw + (size_t)(r0 + t) * tiles * words;
            int s = 0, ovf = 0;
            for (int tt = lane; tt < tiles; tt += 32) {
                const int c = (int)__ldcs(trow + (size_t)tt * words);
                s += c;
                ovf |= c > slots;
                s_tc[t * tiles + tt] = (unsigned char)(c > slots ? 0 : c);
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
            tot = __any_sync(0xffffffffu, ovf) ? -1 : s;
        }
        if (lane == 0) s_tot[t] = tot;
    }
    for (int n = tid; n < F; n += NT) s_unit[n] = 0;
    __syncthreads();
    // Exclusive scan of the totals (one row per thread; T <= NT).
    const int my_tot = tid < T ? s_tot[tid] : -2;
    int total = 0;
    const int my_base = block_scan_excl<NT>(my_tot > 0 ? my_tot : 0, s_warp, &total);
    if (tid < T) s_base[tid] = my_base;
    if (total > cap) {  // over capacity: the block's rows go to the token-major up
        if (tid == 0) {
            s_warp[0] = atomicAdd(rest_n, nvalid);
            binfo[b] = -1;
            if (bu_rows) atomicAdd(bu_rows, nvalid);
        }
        __syncthreads();
        const int at = s_warp[0];
        for (int t = tid; t < nvalid; t += NT) rest[at + t] = r0 + t;
        return;
    }
    if (tid < nvalid) cnt[r0 + tid] = my_tot;
    {   // statistics, one atomic per block each
        const int heavy = __syncthreads_count(tid < T && my_tot >= heavy_at);
        if (tid == 0) {
            binfo[b] = total;
            if (n_heavy && heavy) atomicAdd(n_heavy, heavy);
            if (nnz_sparse && total > 0) atomicAdd(nnz_sparse, (unsigned long long)total);
        }
    }
    __syncthreads();  // s_base visible

    // Pass 1: count the entries per unit; each entry's position within its unit (warp per row, lane per tile).
    for (int t = warp; t < T; t += NW) {
        if (s_tot[t] <= 0) continue;
        const uint32_t *trow = tw + (size_t)(r0 + t) * tiles * words;
        int k0 = s_base[t];
        for (int t0 = 0; t0 < tiles; t0 += 32) {
            const int tt = t0 + lane;
            const int c = tt < tiles ? (int)s_tc[t * tiles + tt] : 0;
            const int incl = warp_scan_incl(c);
            const int k = k0 + incl - c;
            for (int l = 0; l < c; l++) {
                const uint32_t w = __ldg(trow + (size_t)tt * words + 1 + l);
                const int n = tt * TWELL_TILE + (int)(w & 0xFFu);
                s_pos[k + l] = (uint16_t)atomicAdd(&s_unit[n], 1);
            }
            k0 += __shfl_sync(0xffffffffu, incl, 31);
        }
    }
    __syncthreads();
    // Units: exclusive scan of (count | nonzero << 16) over n -> s_unit[n] = first entry | union index j << 16 (both
    // < 65536: cap <= 65535, F <= 65535); s_jfirst[G] = j of the unit that holds entry 16 G.
    {
        const int per = (F + NT - 1) / NT, n0 = tid * per;
        int v = 0;
        for (int k = 0; k < per; k++) {
            const int n = n0 + k;
            if (n < F) { const int c = s_unit[n]; v += c | ((c > 0) << 16); }
        }
        int sum = 0;
        int ex = block_scan_excl<NT>(v, s_warp, &sum);
        for (int k = 0; k < per; k++) {
            const int n = n0 + k;
            if (n < F) {
                const int c = s_unit[n], o = ex & 0xFFFF;
                s_unit[n] = ex;
                for (int G = (o + 15) >> 4; 16 * G < o + c; G++) s_jfirst[G] = ex >> 16;
                ex += c | ((c > 0) << 16);
            }
        }
    }
    int *bgu = gunit + (size_t)b * cap;
    for (int k = tid; k < ((total + 15) & ~15); k += NT) bgu[k] = -1;  // slots past a group's units
    __syncthreads();
    // Pass 2: scatter the entries into unit-major order; each entry's rank in its group of 16; the groups' units.
    uint32_t *bent = ent + (size_t)b * cap, *baux = aux + (size_t)b * cap;
    for (int t = warp; t < T; t += NW) {
        if (s_tot[t] <= 0) continue;
        const uint32_t *trow = tw + (size_t)(r0 + t) * tiles * words;
        const int kb = s_base[t];
        int i0 = 0;
        for (int t0 = 0; t0 < tiles; t0 += 32) {
            const int tt = t0 + lane;
            const int c = tt < tiles ? (int)s_tc[t * tiles + tt] : 0;
            const int incl = warp_scan_incl(c);
            const int i = i0 + incl - c;  // the row's position of the tile's first entry (column order)
            for (int l = 0; l < c; l++) {
                const uint32_t w = __ldcs(trow + (size_t)tt * words + 1 + l);  // last read of the TwELL
                const int n = tt * TWELL_TILE + (int)(w & 0xFFu);
                const int v = s_unit[n];
                const int e = (v & 0xFFFF) + s_pos[kb + i + l];
                const int rank = (v >> 16) - s_jfirst[e >> 4];  // 0..15
                bent[e] = (uint32_t)t | ((uint32_t)rank << 16);
                baux[e] = (uint32_t)(i + l) | (w & 0xFFFF0000u);
                bgu[(e & ~15) + rank] = n;  // (every entry of unit n in the group writes the same value)
            }
            i0 += __shfl_sync(0xffffffffu, incl, 31);
        }
    }
}

// 2. Up: CTA (block b, part p), NW warps; warp w takes the groups w, w + NW, ... of 16 entries, software-pipelined:
// the entries of group k + 2 and the weight fragments of group k + 1 are loaded while group k is computed.
// Dynamic shared memory: twell_bu_up_smem(T).
template <int T, int NW>
__global__ void __launch_bounds__(NW * 32)
twell_bu_up_kernel(const bf16 *__restrict__ X, int D, const bf16 *__restrict__ Wu, int ldw,
                   const uint32_t *__restrict__ ent, const int *__restrict__ gunit, const int *__restrict__ binfo,
                   float *__restrict__ part, int rows, int cap) {
    extern __shared__ __align__(16) unsigned char twell_smem[];
    const int b = blockIdx.x, p = blockIdx.y, nparts = gridDim.y;
    const int total = binfo[b];
    if (total <= 0) return;  // nothing to do, or over capacity (token-major)
    const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, g = lane >> 2, q = lane & 3;
    const int r0 = b * T, nvalid = rows - r0 < T ? rows - r0 : T;
    // x[rows, part p] -> shared memory, swizzled; streamed (evict-first: X must not push Wu out of L2).
    constexpr int XPT = T * 16 / (NW * 32);  // 16-byte chunks per thread
    static_assert(T * 16 % (NW * 32) == 0, "chunks per thread");
    uint4 xv[XPT];
#pragma unroll
    for (int k = 0; k < XPT; k++) {
        const int idx = tid + k * NW * 32, t = idx >> 4, c = idx & 15;
        xv[k] = t < nvalid ? __ldcs(reinterpret_cast<const uint4 *>(X + (size_t)(r0 + t) * D +
                                                                     (size_t)p * TWELL_BU_PW) + c)
                           : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int k = 0; k < XPT; k++) {
        const int idx = tid + k * NW * 32, t = idx >> 4, c = idx & 15;
        *reinterpret_cast<uint4 *>(twell_smem + t * 256 + ((c ^ ((t & 1) << 2)) << 4)) = xv[k];
    }

    const uint32_t *be = ent + (size_t)b * cap;
    const int *bg = gunit + (size_t)b * cap;
    float *bp = part + ((size_t)b * nparts + p) * cap;
    const int ngroups = (total + 15) >> 4;
    const bf16 *wpart = Wu + (size_t)p * TWELL_BU_PW;
    // A group's metadata: the entries of rows g and g + 8 (t | rank << 16; rows past the last entry repeat it) and
    // the units of ranks g and g + 8 (-1: none).
    auto load_meta = [&](int grp, uint32_t &eA, uint32_t &eB, int &u0, int &u1) {
        const int gg = grp < ngroups ? grp : ngroups - 1;
        const int e0 = gg * 16, last = min(e0 + 15, total - 1);
        eA = __ldg(be + min(e0 + g, last));
        eB = __ldg(be + min(e0 + g + 8, last));
        u0 = __ldg(bg + e0 + g);
        u1 = __ldg(bg + e0 + g + 8);
    };
    // B fragments: Wu[unit, chunk 4 s + q of the part]. A column without a unit loads unit 0 (no row reads it).
    auto load_w = [&](int u0, int u1, bool two, uint4 w0[4], uint4 w1[4]) {
        const uint4 *p0 = reinterpret_cast<const uint4 *>(wpart + (size_t)(u0 > 0 ? u0 : 0) * ldw);
#pragma unroll
        for (int s = 0; s < 4; s++) w0[s] = __ldg(p0 + 4 * s + q);
        if (two) {
            const uint4 *p1 = reinterpret_cast<const uint4 *>(wpart + (size_t)(u1 > 0 ? u1 : 0) * ldw);
#pragma unroll
            for (int s = 0; s < 4; s++) w1[s] = __ldg(p1 + 4 * s + q);
        }
    };
    // Prologue: metadata of the first two groups, weights of the first.
    int grp = warp;
    uint32_t cA, cB, nA, nB;
    int cu0, cu1, nu0, nu1;
    load_meta(grp, cA, cB, cu0, cu1);
    load_meta(grp + NW, nA, nB, nu0, nu1);
    bool ctwo = __any_sync(0xffffffffu, cu1 >= 0);
    uint4 cw0[4], cw1[4];
    load_w(cu0, cu1, ctwo, cw0, cw1);
    __syncthreads();
    for (; grp < ngroups; grp += NW) {
        // Loads for later groups first (they fly while this group computes).
        uint32_t fA, fB;
        int fu0, fu1;
        load_meta(grp + 2 * NW, fA, fB, fu0, fu1);
        const bool ntwo = __any_sync(0xffffffffu, nu1 >= 0);
        uint4 nw0[4], nw1[4];
        load_w(nu0, nu1, ntwo, nw0, nw1);
        // This group: 8 k-steps of 16 columns, 1 or 2 mma each.
        const int tA = (int)(cA & 0xFFFFu), tB = (int)(cB & 0xFFFFu);
        const unsigned char *xa = twell_smem + tA * 256, *xb = twell_smem + tB * 256;
        const int swA = (tA & 1) << 2, swB = (tB & 1) << 2;
        float acc0[4] = {0.f, 0.f, 0.f, 0.f}, acc1[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int s = 0; s < 4; s++) {
            const uint4 a = *reinterpret_cast<const uint4 *>(xa + (((4 * s + q) ^ swA) << 4));
            const uint4 c = *reinterpret_cast<const uint4 *>(xb + (((4 * s + q) ^ swB) << 4));
            const uint32_t f0[4] = {a.x, c.x, a.y, c.y}, f1[4] = {a.z, c.z, a.w, c.w};
            tc_mma_bf16(acc0, f0, cw0[s].x, cw0[s].y);
            tc_mma_bf16(acc0, f1, cw0[s].z, cw0[s].w);
            if (ctwo) {
                tc_mma_bf16(acc1, f0, cw1[s].x, cw1[s].y);
                tc_mma_bf16(acc1, f1, cw1[s].z, cw1[s].w);
            }
        }
        // Row g holds entry e0 + g (D[g][c], c = its unit's rank), row g + 8 entry e0 + g + 8. Lane q holds columns
        // 2q and 2q + 1: d0 / d1 (row g), d2 / d3 (row g + 8).
        const int e0 = grp * 16, last = min(e0 + 15, total - 1);
        {
            const int c = (int)(cA >> 16);
            if (e0 + g <= last && ((c & 7) >> 1) == q) {
                const bool hi = c >= 8, odd = c & 1;
                __stcs(bp + e0 + g, hi ? (odd ? acc1[1] : acc1[0]) : (odd ? acc0[1] : acc0[0]));
            }
        }
        {
            const int c = (int)(cB >> 16);
            if (e0 + g + 8 <= last && ((c & 7) >> 1) == q) {
                const bool hi = c >= 8, odd = c & 1;
                __stcs(bp + e0 + g + 8, hi ? (odd ? acc1[3] : acc1[2]) : (odd ? acc0[3] : acc0[2]));
            }
        }
        cA = nA; cB = nB; cu0 = nu0; cu1 = nu1; ctwo = ntwo;
        nA = fA; nB = fB; nu0 = fu0; nu1 = fu1;
#pragma unroll
        for (int s = 0; s < 4; s++) { cw0[s] = nw0[s]; cw1[s] = nw1[s]; }
    }
}

// 3. Finish: h = g * (sum of the parts in order), scattered to the row-major pairs. Grid (cap / 256, nblk).
__global__ void __launch_bounds__(256)
twell_bu_finish_kernel(const uint32_t *__restrict__ ent, const uint32_t *__restrict__ aux,
                       const int *__restrict__ gunit, const int *__restrict__ binfo, const float *__restrict__ part, int nparts, int T, int cap, int P,
                       uint2 *__restrict__ pairs) {
    const int b = blockIdx.y, e = blockIdx.x * blockDim.x + threadIdx.x;
    if (e >= binfo[b]) return;  // (binfo -1: over capacity)
    const float *pp = part + (size_t)b * nparts * cap + e;
    float u = 0.0f;
    for (int p = 0; p < nparts; p++) u += __ldcs(pp + (size_t)p * cap);
    const uint32_t en = ent[(size_t)b * cap + e], a = aux[(size_t)b * cap + e];
    const int t = (int)(en & 0xFFFFu), i = (int)(a & 0xFFFFu);
    const int n = gunit[(size_t)b * cap + (e & ~15) + (int)(en >> 16)];
    const float gv = __uint_as_float(a & 0xFFFF0000u);
    pairs[((size_t)b * T + t) * P + i] = make_uint2((uint32_t)n, __float_as_uint(gv * u));
}

#endif  // SLLM_TWELL_UP_BLOCKED_CUH
