// dev/bench/train_problem.cuh: synthetic FFN training problems for test/gpu/test_twell_train.cu and
// dev/bench/bench_ffn_train.cu: inputs with a controlled gate sparsity, the trainer's dense FFN forward + backward
// (twtrain_dense_*) and the sparse one (twell/train_ffn.cuh) on the same inputs, and their comparison.
//
// Sparsity control (as dev/bench/bench_gen.cuh): X [M, D] ~ N(0, 1), gate weight [F, D] ~ N(0, 1/D) with column 0 set
// to 1, X[m, 0] = -sigma_m z(p_m): each gate of row m is positive with probability p_m. Patterns:
//   TP_UNIFORM  p_m = nnz / F (nnz >= F/2 gives the "50%" pattern)
//   TP_HEAVY    the first tokens of every 2048-token sequence fire ~30x more (bench_gen's profile), mean ~nnz
//   TP_MIX      uniform nnz, plus all-zero rows (X row = 0: no unit active; m % 7 == 3) and fully dense rows
//               (every gate positive; m % 11 == 5)
// The up weight has some all-zero rows (units n % 17 == 3): pairs with g > 0 and u = 0 (their du still counts).
#ifndef SLLM_TRAIN_PROBLEM_CUH
#define SLLM_TRAIN_PROBLEM_CUH

#include "dev/bench/bench_gen.cuh"
#include "twell/train_ffn.cuh"

enum { TP_UNIFORM = 0, TP_HEAVY = 1, TP_MIX = 2 };

static __global__ void tp_bias_kernel(bf16 *X, int M, int D, int F, float nnz, int pattern) {
    const int m = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x & 31;
    if (m >= M) return;
    if (pattern == TP_MIX && m % 7 == 3) {
        for (int d = lane; d < D; d += 32) X[(size_t)m * D + d] = __float2bfloat16_rn(0.0f);
        return;
    }
    float s = 0;
    for (int d = 1 + lane; d < D; d += 32) { const float v = __bfloat162float(X[(size_t)m * D + d]); s += v * v; }
    s = warp_sum(s);
    float p = nnz / F;
    if (pattern == TP_HEAVY) {
        const float mean_w = 1.0f + 40.0f * (1.0f - expf(-2048.0f / 8)) / (1.0f - expf(-1.0f / 8)) / 2048.0f;
        p = fminf(0.95f, p * (1.0f + 40.0f * expf(-(float)(m % 2048) / 8.0f)) / mean_w);
    }
    if (pattern == TP_MIX && m % 11 == 5) p = 1.0f;
    if (lane == 0) {
        const float z = p >= 1.0f ? -30.0f : (p <= 0.0f ? 30.0f : sqrtf(2.0f) * erfcinvf(2.0f * p));
        X[(size_t)m * D] = __float2bfloat16_rn(-sqrtf(s / D) * z);
    }
}
static __global__ void tp_zero_rows_kernel(bf16 *W, int F, int D) {  // W rows n % 17 == 3 = 0
    const long long n = (long long)F * D;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        if ((i / D) % 17 == 3) W[i] = __float2bfloat16_rn(0.0f);
}
static __global__ void tp_transpose_kernel(const bf16 *in, bf16 *out, int R, int C) {  // out [C, R] = in [R, C]^T
    const long long n = (long long)R * C;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        const long long r = i / C, c = i % C;
        out[c * R + r] = in[i];
    }
}
static __global__ void tp_fill_f32(float *p, long long n, float scale, uint64_t seed) {
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x)
        p[i] = scale * bench_normal(seed, (uint64_t)i);
}
// sum (a - b)^2, sum b^2, non-finite a (bf16 or fp32 inputs)
template <typename T>
static __global__ void tp_diff_kernel(const T *a, const T *b, const float *a_base, long long n, double *out) {
    double s0 = 0, s1 = 0, bad = 0;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (long long)gridDim.x * blockDim.x) {
        float x = (float)a[i], y = (float)b[i];
        if (a_base) x -= a_base[i];
        if (!isfinite(x)) bad += 1;
        s0 += (double)(x - y) * (x - y);
        s1 += (double)y * y;
    }
    atomicAdd(&out[0], s0); atomicAdd(&out[1], s1); atomicAdd(&out[2], bad);
}

typedef struct {
    int M, D, F, gated;
    bf16 *X, *dY, *Wgu, *WdT, *Wd;  // Wgu [2, F, D]: gate then up (non-gated: the up is Wgu[0])
    // dense outputs
    bf16 *Yd, *dXd, *gu, *h, *dh;
    float *dWgu_d, *dWd_d, *l1_part;
    unsigned long long *nnz_d;
    uint8_t *fired_d;
    // sparse outputs
    bf16 *Ys, *dXs;
    float *dWg_s, *dWu_s, *dWd_s, *l1_s;
    unsigned long long *nnz_s;
    uint8_t *fired_s;
    double *diff;
} TProblem;

static void tp_alloc(TProblem *P, int M, int D, int F, int gated, int with_dense) {
    memset(P, 0, sizeof(*P));
    P->M = M; P->D = D; P->F = F; P->gated = gated;
    const size_t MD = (size_t)M * D, FD = (size_t)F * D, MF = (size_t)M * F;
    cudaCheck(cudaMalloc(&P->X, MD * 2)); cudaCheck(cudaMalloc(&P->dY, MD * 2));
    cudaCheck(cudaMalloc(&P->Wgu, 2 * FD * 2)); cudaCheck(cudaMalloc(&P->WdT, FD * 2)); cudaCheck(cudaMalloc(&P->Wd, FD * 2));
    if (with_dense) {
        cudaCheck(cudaMalloc(&P->Yd, MD * 2)); cudaCheck(cudaMalloc(&P->dXd, MD * 2));
        cudaCheck(cudaMalloc(&P->gu, 2 * MF * 2)); cudaCheck(cudaMalloc(&P->h, MF * 2)); cudaCheck(cudaMalloc(&P->dh, MF * 2));
        cudaCheck(cudaMalloc(&P->dWgu_d, 2 * FD * 4)); cudaCheck(cudaMalloc(&P->dWd_d, FD * 4));
        cudaCheck(cudaMalloc(&P->l1_part, FFN_STAT_BLOCKS * 4)); cudaCheck(cudaMalloc(&P->nnz_d, 8));
        cudaCheck(cudaMalloc(&P->fired_d, F));
    }
    cudaCheck(cudaMalloc(&P->Ys, MD * 2)); cudaCheck(cudaMalloc(&P->dXs, MD * 2));
    cudaCheck(cudaMalloc(&P->dWg_s, FD * 4)); cudaCheck(cudaMalloc(&P->dWu_s, FD * 4)); cudaCheck(cudaMalloc(&P->dWd_s, FD * 4));
    cudaCheck(cudaMalloc(&P->l1_s, 4)); cudaCheck(cudaMalloc(&P->nnz_s, 8)); cudaCheck(cudaMalloc(&P->fired_s, F));
    cudaCheck(cudaMalloc(&P->diff, 3 * sizeof(double)));
}
static void tp_free(TProblem *P) {
    void *p[] = {P->X, P->dY, P->Wgu, P->WdT, P->Wd, P->Yd, P->dXd, P->gu, P->h, P->dh, P->dWgu_d, P->dWd_d, P->l1_part,
                 P->nnz_d, P->fired_d, P->Ys, P->dXs, P->dWg_s, P->dWu_s, P->dWd_s, P->l1_s, P->nnz_s, P->fired_s, P->diff};
    for (size_t i = 0; i < sizeof(p) / sizeof(p[0]); i++)
        if (p[i]) cudaCheck(cudaFree(p[i]));
    memset(P, 0, sizeof(*P));
}
static const bf16 *tp_wg(const TProblem *P) { return P->gated ? P->Wgu : NULL; }
static const bf16 *tp_wu(const TProblem *P) { return P->gated ? P->Wgu + (size_t)P->F * P->D : P->Wgu; }

static void tp_generate(TProblem *P, uint64_t seed, int pattern, float nnz) {
    const int M = P->M, D = P->D, F = P->F;
    const size_t FD = (size_t)F * D;
    bench_fill_normal<<<1024, 256>>>(P->X, (long long)M * D, 1.0f, seed + 1);
    bench_fill_normal<<<1024, 256>>>(P->dY, (long long)M * D, 1.0f, seed + 2);
    bench_fill_normal<<<1024, 256>>>(P->Wgu, 2LL * FD, 1.0f / sqrtf((float)D), seed + 3);
    bench_fill_normal<<<1024, 256>>>(P->WdT, (long long)FD, 1.0f / sqrtf((float)F), seed + 4);
    cudaCheckLaunch();
    bench_set_col0<<<CEIL_DIV(F, 256), 256>>>(P->Wgu, F, D, 1.0f);  // the gate weight (non-gated: the up)
    tp_bias_kernel<<<CEIL_DIV(M, 8), 256>>>(P->X, M, D, F, nnz, pattern);
    if (P->gated) tp_zero_rows_kernel<<<1024, 256>>>(P->Wgu + FD, F, D);
    tp_transpose_kernel<<<1024, 256>>>(P->WdT, P->Wd, F, D);
    cudaCheckLaunch();
    cudaCheck(cudaDeviceSynchronize());
}

static void tp_dense(TProblem *P, MatmulContext *mm, float l1_coef, cudaStream_t s) {
    cudaCheck(cudaMemsetAsync(P->l1_part, 0, FFN_STAT_BLOCKS * 4, s));
    cudaCheck(cudaMemsetAsync(P->nnz_d, 0, 8, s));
    cudaCheck(cudaMemsetAsync(P->fired_d, 0, P->F, s));
    twtrain_dense_forward(mm, P->X, P->Wgu, P->Wd, P->Yd, P->gu, P->h, P->M, P->D, P->F, P->gated, P->l1_part, P->nnz_d,
                          P->fired_d, s);
    twtrain_dense_backward(mm, P->X, P->dY, P->Wgu, P->Wd, P->dXd, P->dWgu_d, P->dWd_d, P->gu, P->h, P->dh, P->M, P->D,
                           P->F, P->gated, 0, l1_coef, s);
}
static int tp_sparse(TProblem *P, TwTrainWS *ws, TwTrainState *st, float l1_coef, int accumulate, cudaStream_t s) {
    cudaCheck(cudaMemsetAsync(P->l1_s, 0, 4, s));
    cudaCheck(cudaMemsetAsync(P->nnz_s, 0, 8, s));
    cudaCheck(cudaMemsetAsync(P->fired_s, 0, P->F, s));
    int e = twtrain_forward(ws, st, P->X, tp_wg(P), tp_wu(P), P->WdT, P->Ys, P->M, P->l1_s, P->nnz_s, P->fired_s, s);
    if (e) return e;
    return twtrain_backward(ws, st, P->X, P->dY, tp_wg(P), tp_wu(P), P->WdT, P->dXs, P->gated ? P->dWg_s : NULL,
                            P->dWu_s, P->dWd_s, accumulate, l1_coef, s);
}

// Relative Frobenius error of a (minus a_base, may be NULL) against b; *bad = non-finite values of a.
template <typename T>
static double tp_rel(const TProblem *P, const T *a, const T *b, const float *a_base, long long n, double *bad) {
    double h[3];
    cudaCheck(cudaMemset(P->diff, 0, 3 * sizeof(double)));
    tp_diff_kernel<T><<<1024, 256>>>(a, b, a_base, n, P->diff);
    cudaCheckLaunch();
    cudaCheck(cudaMemcpy(h, P->diff, sizeof(h), cudaMemcpyDeviceToHost));
    if (bad) *bad = h[2];
    return h[2] > 0 ? INFINITY : sqrt(h[0] / (h[1] > 0 ? h[1] : 1e-30));
}

// Errors of the sparse outputs against the dense ones: Y, dX, dWg, dWu, dWd, L1.
typedef struct { double y, dx, dwg, dwu, dwd, l1, nnz_rel; int fired_diff; } TErrors;
static TErrors tp_compare(const TProblem *P) {
    TErrors e;
    memset(&e, 0, sizeof(e));
    const long long MD = (long long)P->M * P->D, FD = (long long)P->F * P->D;
    e.y = tp_rel<bf16>(P, P->Ys, P->Yd, NULL, MD, NULL);
    e.dx = tp_rel<bf16>(P, P->dXs, P->dXd, NULL, MD, NULL);
    if (P->gated) {
        e.dwg = tp_rel<float>(P, P->dWg_s, P->dWgu_d, NULL, FD, NULL);
        e.dwu = tp_rel<float>(P, P->dWu_s, P->dWgu_d + FD, NULL, FD, NULL);
    } else {
        e.dwu = tp_rel<float>(P, P->dWu_s, P->dWgu_d, NULL, FD, NULL);
    }
    e.dwd = tp_rel<float>(P, P->dWd_s, P->dWd_d, NULL, FD, NULL);
    std::vector<float> lp(FFN_STAT_BLOCKS);
    float l1s = 0;
    unsigned long long nd = 0, ns = 0;
    cudaCheck(cudaMemcpy(lp.data(), P->l1_part, FFN_STAT_BLOCKS * 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&l1s, P->l1_s, 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&nd, P->nnz_d, 8, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(&ns, P->nnz_s, 8, cudaMemcpyDeviceToHost));
    double l1d = 0;
    for (float v : lp) l1d += v;
    e.l1 = fabs(l1s - l1d) / (fabs(l1d) > 0 ? fabs(l1d) : 1.0);
    e.nnz_rel = fabs((double)ns - (double)nd) / (nd ? (double)nd : 1.0);
    std::vector<uint8_t> fd(P->F), fs(P->F);
    cudaCheck(cudaMemcpy(fd.data(), P->fired_d, P->F, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(fs.data(), P->fired_s, P->F, cudaMemcpyDeviceToHost));
    for (int i = 0; i < P->F; i++) e.fired_diff += fd[i] != fs[i];
    return e;
}
static double tp_max_err(const TErrors *e) {
    double m = e->y;
    const double v[] = {e->dx, e->dwg, e->dwu, e->dwd, e->l1};
    for (double x : v) m = x > m || std::isnan(x) ? x : m;
    return m;
}

#endif  // SLLM_TRAIN_PROBLEM_CUH
