// dev/bench/bench_updown.cu: the fused TwELL up+down alone: twell_updown (twell/updown.cuh, default
// variant, token-major: one CTA per token gathering weight rows from L2) vs twell_dslice_updown
// (twell/updown_dslice.cuh, D-sliced weight-stationary), same process, same inputs.
//
//   build/bench_updown [--M 16384,65536,131072] [--nnz 8,16,29,64,128] [--D 2048] [--F 5632] [--C 8]
//                      [--reps 20] [--nongated] [--budget-mb 2048]
//
// Inputs (device hash RNG, fresh per configuration): 3 sets of (X, TwELL) rotated over the timed calls;
// TwELL built directly: column n of row m active with probability nnz/F (per-row nnz ~ Binomial), value
// in (0, 1]; Wu, WdT ~ U(-0.05, 0.05). Both kernels' outputs are compared before timing (relative error
// < 1e-2 on the non-overflow rows, else exit 1). Times: medians of --reps calls after 3 warm-up calls,
// CUDA events. Columns: old ms, dslice ms, old/dslice, then the dslice per-step split (medians of the
// per-step sums over host chunks): compaction (count + scan + fill), up (incl. cluster reduction), reduce
// (partials -> h), down; and the workspace's layout (NG x NS CTAs, up cluster, chunks).
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <algorithm>
#include <vector>

#include "cuda_common.cuh"
#include "twell/updown.cuh"
#include "twell/updown_dslice.cuh"

__device__ __forceinline__ uint32_t bu_hash(uint64_t x) {
    x ^= x >> 33; x *= 0xff51afd7ed558ccdull; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ull; x ^= x >> 33;
    return (uint32_t)x;
}
__global__ void bu_fill_uniform(bf16 *p, long long n, float scale, uint64_t seed) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        p[i] = __float2bfloat16_rn(scale * ((bu_hash(seed * 0x9E3779B97F4A7C15ull + (uint64_t)i) * 2.3283064e-10f) * 2 - 1));
}
// One warp per (row, tile): lane l owns columns 8l..8l+7 of the tile; slots in column order; padding 0.
__global__ void bu_make_twell(uint32_t *tw, int M, int F, int words, uint32_t thresh, uint64_t seed) {
    const int lane = threadIdx.x & 31;
    const long long wid = ((long long)blockIdx.x * blockDim.x + threadIdx.x) >> 5;
    const int tiles = F / TWELL_TILE, slots = words - 1;
    if (wid >= (long long)M * tiles) return;
    const int m = (int)(wid / tiles), t = (int)(wid % tiles);
    uint32_t *tw_t = tw + (size_t)m * tiles * words + (size_t)t * words;
    uint32_t act = 0;
    for (int j = 0; j < 8; j++) {
        const uint64_t key = ((uint64_t)m * F + (uint64_t)t * TWELL_TILE + lane * 8 + j) ^ (seed << 40);
        if (bu_hash(key) < thresh) act |= 1u << j;
    }
    const int c = __popc(act);
    int incl = c;
    for (int o = 1; o < 32; o <<= 1) {
        const int n = __shfl_up_sync(0xffffffffu, incl, o);
        if (lane >= o) incl += n;
    }
    const int total = __shfl_sync(0xffffffffu, incl, 31);
    for (int k = lane; k < slots; k += 32) tw_t[1 + k] = 0;
    __syncwarp();
    int pos = incl - c;
    for (int j = 0; j < 8; j++) {
        if (!(act >> j & 1)) continue;
        if (pos < slots) {
            const int col = lane * 8 + j;
            const float v = 1.0f - (bu_hash(((uint64_t)m * F + t * TWELL_TILE + col) * 3 + seed) >> 9) * 1.1920929e-7f;
            const uint16_t b = __bfloat16_as_ushort(__float2bfloat16_rn(fmaxf(v, 1e-3f)));
            tw_t[1 + pos] = ((uint32_t)b << 16) | (uint32_t)col;
        }
        pos++;
    }
    if (lane == 0) tw_t[0] = (uint32_t)total;
}

static std::vector<int> parse_list(const char *s) {
    std::vector<int> v;
    while (*s) { v.push_back(atoi(s)); const char *c = strchr(s, ','); if (!c) break; s = c + 1; }
    return v;
}
static float median(std::vector<float> v) { std::sort(v.begin(), v.end()); return v[v.size() / 2]; }

int main(int argc, char **argv) {
    std::vector<int> Ms = {16384, 65536, 131072}, nnzs = {8, 16, 29, 64, 128};
    int D = 2048, F = 5632, C = 8, reps = 20, gated = 1;
    size_t budget = (size_t)2048 << 20;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(a, "--M")) { Ms = parse_list(v); i++; }
        else if (!strcmp(a, "--nnz")) { nnzs = parse_list(v); i++; }
        else if (!strcmp(a, "--D")) { D = atoi(v); i++; }
        else if (!strcmp(a, "--F")) { F = atoi(v); i++; }
        else if (!strcmp(a, "--C")) { C = atoi(v); i++; }
        else if (!strcmp(a, "--reps")) { reps = atoi(v); i++; }
        else if (!strcmp(a, "--budget-mb")) { budget = (size_t)atoll(v) << 20; i++; }
        else if (!strcmp(a, "--nongated")) gated = 0;
        else {
            fprintf(stderr, "usage: bench_updown [--M list] [--nnz list] [--D 2048] [--F 5632] [--C 8] [--reps 20] "
                            "[--nongated] [--budget-mb 2048]\n(unknown option %s)\n", a);
            return 2;
        }
    }
    if (!cuda_device_available()) { fprintf(stderr, "error: bench_updown: no CUDA device\n"); return 1; }
    if (reps < 1) reps = 1;
    cudaDeviceProp prop;
    cudaCheck(cudaGetDeviceProperties(&prop, 0));
    printf("bench_updown: %s, %d SMs, L2 %d MB | D=%d F=%d C=%d %s, reps %d\n", prop.name, prop.multiProcessorCount,
           prop.l2CacheSize >> 20, D, F, C, gated ? "gated" : "non-gated", reps);
    const int words = TWELL_TILE / C;
    const size_t row_words = (size_t)F / C;
    int maxM = *std::max_element(Ms.begin(), Ms.end());
    TwellDsliceWS ws;
    if (twell_dslice_workspace_create(&ws, maxM, D, F, C, budget) != TWELL_OK) return 1;
    printf("dslice layout: NG %d groups x NS %d slices = %d CTAs (UG %d units, %d KB smem up / %d KB down), up "
           "cluster %d (%d partial sets, max active clusters %d), down cluster %d (max active %d), up piece %d "
           "pairs, down piece %d tokens, chunk %d tokens\n",
           ws.NG, ws.NS, ws.NG * ws.NS, ws.UG, (int)(ws.smem_up >> 10), (int)(ws.smem_down >> 10), ws.CLu, ws.nsets,
           ws.up_active_clusters, ws.NG, ws.down_active_clusters, ws.cap_up, ws.tch, ws.TK);
    const int NSET = 3;
    bf16 *X[NSET], *Y, *Y2, *Wu, *WdT;
    uint32_t *tw[NSET];
    for (int k = 0; k < NSET; k++) {
        cudaCheck(cudaMalloc(&X[k], sizeof(bf16) * (size_t)maxM * D));
        cudaCheck(cudaMalloc(&tw[k], sizeof(uint32_t) * (size_t)maxM * row_words));
    }
    cudaCheck(cudaMalloc(&Y, sizeof(bf16) * (size_t)maxM * D));
    cudaCheck(cudaMalloc(&Y2, sizeof(bf16) * (size_t)maxM * D));
    cudaCheck(cudaMalloc(&Wu, sizeof(bf16) * (size_t)F * D));
    cudaCheck(cudaMalloc(&WdT, sizeof(bf16) * (size_t)F * D));
    bu_fill_uniform<<<1024, 256>>>(Wu, (long long)F * D, 0.05f, 11);
    bu_fill_uniform<<<1024, 256>>>(WdT, (long long)F * D, 0.05f, 12);
    cudaCheckLaunch();
    cudaEvent_t e0, e1;
    cudaCheck(cudaEventCreate(&e0));
    cudaCheck(cudaEventCreate(&e1));
    const int MAXCH = 64;
    cudaEvent_t ev[MAXCH][5];
    for (int c = 0; c < MAXCH; c++)
        for (int j = 0; j < 5; j++) cudaCheck(cudaEventCreate(&ev[c][j]));
    printf("\n%7s %4s %7s %6s | %8s %8s %6s | %7s %7s %7s %7s | %s\n", "M", "nnz", "meannz", "ovf", "old", "dslice",
           "ratio", "compact", "up", "reduce", "down", "chunks");
    int status = 0;
    for (int M : Ms) {
        for (int nnz : nnzs) {
            const double p = (double)nnz / F;
            const uint32_t thresh = (uint32_t)std::min(4294967295.0, p * 4294967296.0);
            for (int k = 0; k < NSET; k++) {
                bu_fill_uniform<<<2048, 256>>>(X[k], (long long)M * D, 1.0f, 1000 + 10 * k + nnz);
                const long long warps = (long long)M * (F / TWELL_TILE);
                bu_make_twell<<<(unsigned)CEIL_DIV(warps * 32, 256LL), 256>>>(tw[k], M, F, words, thresh,
                                                                            (uint64_t)(77 + k + 3 * nnz));
                cudaCheckLaunch();
            }
            cudaCheck(cudaDeviceSynchronize());
            // Mean nnz and overflow rows of set 0 (host).
            std::vector<uint32_t> h_tw((size_t)M * row_words);
            cudaCheck(cudaMemcpy(h_tw.data(), tw[0], sizeof(uint32_t) * h_tw.size(), cudaMemcpyDeviceToHost));
            TwellShape sh;
            twell_shape_init(&sh, M, F, C);
            long long tot = 0;
            int novf = 0;
            std::vector<uint8_t> ovf(M);
            for (int m = 0; m < M; m++) {
                for (int t = 0; t < sh.tiles; t++) tot += h_tw[(size_t)m * row_words + (size_t)t * words];
                ovf[m] = (uint8_t)twell_row_overflows(&sh, h_tw.data(), m);
                novf += ovf[m];
            }
            // Agreement check before timing.
            const bf16 *wu = gated ? Wu : NULL;
            cudaCheck(cudaMemset(Y, 0, sizeof(bf16) * (size_t)M * D));
            cudaCheck(cudaMemset(Y2, 0, sizeof(bf16) * (size_t)M * D));
            if (twell_updown_launch(TWELL_UPDOWN_DEFAULT, gated, tw[0], X[0], Wu, WdT, D, Y, M, D, F, C, 0) != TWELL_OK)
                return 1;
            if (twell_dslice_updown(&ws, tw[0], C, X[0], wu, WdT, Y2, M, D, F, 0) != TWELL_OK) return 1;
            cudaCheck(cudaDeviceSynchronize());
            {
                std::vector<float> a((size_t)M * D), b((size_t)M * D);
                download_bf16(a.data(), Y, a.size());
                download_bf16(b.data(), Y2, b.size());
                double num = 0, den = 0;
                for (int m = 0; m < M; m++) {
                    if (ovf[m]) continue;
                    for (int d = 0; d < D; d++) {
                        const double x = a[(size_t)m * D + d], y = b[(size_t)m * D + d];
                        num += (x - y) * (x - y);
                        den += x * x;
                    }
                }
                const double rel = den > 0 ? sqrt(num / den) : sqrt(num);
                if (!(rel < 1e-2)) {
                    printf("MISMATCH M=%d nnz=%d: relative difference old vs dslice %.3e\n", M, nnz, rel);
                    status = 1;
                    continue;
                }
            }
            std::vector<float> t_old, t_ds, t_st[4];
            for (int r = -3; r < reps; r++) {
                const int k = (r + 3) % NSET;
                cudaCheck(cudaEventRecord(e0));
                twell_updown_launch(TWELL_UPDOWN_DEFAULT, gated, tw[k], X[k], Wu, WdT, D, Y, M, D, F, C, 0);
                cudaCheck(cudaEventRecord(e1));
                cudaCheck(cudaEventSynchronize(e1));
                float ms;
                cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
                if (r >= 0) t_old.push_back(ms);
                const int k2 = (k + 1) % NSET;
                cudaCheck(cudaEventRecord(e0));
                twell_dslice_updown(&ws, tw[k2], C, X[k2], wu, WdT, Y2, M, D, F, 0);
                cudaCheck(cudaEventRecord(e1));
                cudaCheck(cudaEventSynchronize(e1));
                cudaCheck(cudaEventElapsedTime(&ms, e0, e1));
                if (r >= 0) t_ds.push_back(ms);
            }
            // Per-step split: the same chunking as twell_dslice_updown, events between the steps.
            const int nch = CEIL_DIV(M, ws.TK), per = CEIL_DIV(M, nch);
            for (int r = 0; r < std::min(reps, 10) && nch <= MAXCH; r++) {
                const int k = r % NSET;
                int c = 0;
                for (int m0 = 0; m0 < M; m0 += per, c++) {
                    const int mc = std::min(per, M - m0);
                    cudaCheck(cudaEventRecord(ev[c][0]));
                    twell_dslice_compact(&ws, tw[k] + (size_t)m0 * row_words, mc, 0);
                    cudaCheck(cudaEventRecord(ev[c][1]));
                    if (gated) twell_dslice_up(&ws, X[k] + (size_t)m0 * D, Wu, mc, 0);
                    cudaCheck(cudaEventRecord(ev[c][2]));
                    if (gated) twell_dslice_reduce(&ws, mc, 0);
                    cudaCheck(cudaEventRecord(ev[c][3]));
                    twell_dslice_down(&ws, gated, WdT, Y2 + (size_t)m0 * D, mc, 0);
                    cudaCheck(cudaEventRecord(ev[c][4]));
                }
                cudaCheck(cudaEventSynchronize(ev[c - 1][4]));
                float s[4] = {0, 0, 0, 0};
                for (int cc = 0; cc < c; cc++)
                    for (int j = 0; j < 4; j++) {
                        float ms;
                        cudaCheck(cudaEventElapsedTime(&ms, ev[cc][j], ev[cc][j + 1]));
                        s[j] += ms;
                    }
                for (int j = 0; j < 4; j++) t_st[j].push_back(s[j]);
            }
            const float mo = median(t_old), md = median(t_ds);
            printf("%7d %4d %7.2f %6d | %8.3f %8.3f %6.2f | %7.3f %7.3f %7.3f %7.3f | %d\n", M, nnz, (double)tot / M,
                   novf, mo, md, mo / md, t_st[0].empty() ? 0.f : median(t_st[0]),
                   t_st[1].empty() ? 0.f : median(t_st[1]), t_st[2].empty() ? 0.f : median(t_st[2]),
                   t_st[3].empty() ? 0.f : median(t_st[3]), nch);
            fflush(stdout);
        }
    }
    cudaCheck(cudaGetLastError());
    twell_dslice_workspace_free(&ws);
    for (int k = 0; k < NSET; k++) { cudaCheck(cudaFree(X[k])); cudaCheck(cudaFree(tw[k])); }
    cudaCheck(cudaFree(Y)); cudaCheck(cudaFree(Y2)); cudaCheck(cudaFree(Wu)); cudaCheck(cudaFree(WdT));
    return status;
}
