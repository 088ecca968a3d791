// dev/emu/attn_emu.cpp: runs the tensor-core attention kernels of core/attention.cuh on the CPU, to check their
// indexing, fragment layouts, masking and synchronization logic on a machine without a GPU.
//
// The emulation itself (threads as OS threads, warp-collective instructions, cp.async) is dev/emu/emu_core.h,
// shared with dev/emu/sliced_emu.cpp. Compares against a float64 reference.
// Build + run (no GPU needed):  bash dev/emu/run.sh
#define EMU_SMEM_NAME attn_smem
#include "emu_core.h"

alignas(16) unsigned char attn_smem[EMU_SMEM_BYTES];

// The one attention primitive that is not in core/tc_utils.cuh (core/attention.cuh, ATTN_EMU).
static inline float attn_exp2(float x) { return exp2f(x); }  // ex2.approx.ftz on the GPU

#define ATTN_EMU 1
#include "attention.cuh"

// ---- driver ----------------------------------------------------------------------------------------------
template <typename F>
static void launch(EmuDim grid, F body) { emu_launch(grid, 128, body); }

static uint64_t rs = 88172645463325252ull;
static double urand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (rs >> 11) * 0x1.0p-53; }
static double nrand() { return sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }
static float rb(float f) { return __bfloat162float(__float2bfloat16(f)); }

static double relerr(const std::vector<float> &x, const std::vector<double> &r) {
    double n = 0, d = 0;
    for (size_t i = 0; i < x.size(); i++) {
        if (!isfinite(x[i])) return INFINITY;
        n += (x[i] - r[i]) * (x[i] - r[i]);
        d += r[i] * r[i];
    }
    return sqrt(n) / fmax(sqrt(d), 1e-2 * sqrt((double)x.size()));
}

// FMT: forward m-tiles per warp (1: v1, 2: v2). DET: 0 = atomic dq (v1), 1 = dk/dv kernel + dq kernel with DQMT.
// KV2: deterministic dk/dv by attn_bwd_kv2_kernel (128 keys per CTA; SLLM_ATTN_BWD=det2).
template <int HD, int FMT, int DET, int DQMT, int KV2 = 0>
static int run_case(int B, int T, int H, int KVH) {
    const int hd = HD;
    size_t nq = (size_t)B * T * H * hd, nkv = (size_t)B * T * KVH * hd, nl = (size_t)B * H * T;
    std::vector<float> q(nq), k(nkv), v(nkv), dout(nq);
    for (auto &x : q) x = rb((float)(1.5 * nrand()));
    for (auto &x : k) x = rb((float)nrand());
    for (auto &x : v) x = rb((float)nrand());
    for (auto &x : dout) x = rb((float)nrand());
    // float64 reference
    std::vector<double> ro(nq, 0), rl(nl), rdq(nq, 0), rdk(nkv, 0), rdv(nkv, 0);
    double scale = 1 / sqrt((double)hd);
    int group = H / KVH;
    std::vector<double> p(T), dp(T);
    for (int b = 0; b < B; b++)
        for (int h = 0; h < H; h++)
            for (int i = 0; i < T; i++) {
                int kvh = h / group;
                size_t qi = (((size_t)b * T + i) * H + h) * hd;
                double mx = -INFINITY;
                for (int j = 0; j <= i; j++) {
                    size_t kj = (((size_t)b * T + j) * KVH + kvh) * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += (double)q[qi + d] * k[kj + d];
                    p[j] = s * scale;
                    mx = fmax(mx, p[j]);
                }
                double sum = 0;
                for (int j = 0; j <= i; j++) { p[j] = exp(p[j] - mx); sum += p[j]; }
                rl[((size_t)b * H + h) * T + i] = mx + log(sum);
                double D = 0;
                for (int j = 0; j <= i; j++) {
                    p[j] /= sum;
                    size_t vj = (((size_t)b * T + j) * KVH + kvh) * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) { ro[qi + d] += p[j] * v[vj + d]; s += (double)dout[qi + d] * v[vj + d]; }
                    dp[j] = s;
                    D += p[j] * s;
                }
                for (int j = 0; j <= i; j++) {
                    size_t kj = (((size_t)b * T + j) * KVH + kvh) * hd;
                    double ds = p[j] * (dp[j] - D) * scale;
                    for (int d = 0; d < hd; d++) {
                        rdq[qi + d] += ds * k[kj + d];
                        rdk[kj + d] += ds * q[qi + d];
                        rdv[kj + d] += p[j] * dout[qi + d];
                    }
                }
            }
    auto tobf = [](const std::vector<float> &x) {
        std::vector<bf16> y(x.size());
        for (size_t i = 0; i < x.size(); i++) y[i] = __float2bfloat16(x[i]);
        return y;
    };
    auto tof = [](const std::vector<bf16> &x) {
        std::vector<float> y(x.size());
        for (size_t i = 0; i < x.size(); i++) y[i] = __bfloat162float(x[i]);
        return y;
    };
    std::vector<bf16> bq = tobf(q), bk = tobf(k), bv = tobf(v), bdo = tobf(dout);
    std::vector<bf16> bo(nq), bdq(nq), bdk(nkv), bdv(nkv);
    std::vector<float> lse(nl, NAN);
    for (auto &x : bo) x = __float2bfloat16(NAN);
    for (auto &x : bdk) x = __float2bfloat16(NAN);
    for (auto &x : bdv) x = __float2bfloat16(NAN);
    float scale_log2 = ATTN_LOG2E / sqrtf((float)hd);
    launch({(unsigned)CEIL_DIV(T, 64 * FMT), (unsigned)H, (unsigned)B}, [&] {
        attn_fwd_kernel<HD, FMT>(bo.data(), lse.data(), bq.data(), bk.data(), bv.data(), T, H, KVH, scale_log2);
    });
    // preprocess (as attn_bwd_preprocess_kernel) on the host
    std::vector<float> dsum(nl), dq_acc(nq, NAN);
    for (int b = 0; b < B; b++)
        for (int i = 0; i < T; i++)
            for (int h = 0; h < H; h++) {
                size_t w = ((size_t)b * T + i) * H + h;
                float s = 0;
                for (int d = 0; d < hd; d++) {
                    s += __bfloat162float(bdo[w * hd + d]) * __bfloat162float(bo[w * hd + d]);
                    dq_acc[w * hd + d] = 0;
                }
                dsum[((size_t)b * H + h) * T + i] = s;
            }
    float sc = 1.0f / sqrtf((float)hd);
    std::vector<float> dqf(nq);
    if constexpr (KV2) {
        launch({(unsigned)CEIL_DIV(T, ATTN_KV2_BN), (unsigned)KVH, (unsigned)B}, [&] {
            attn_bwd_kv2_kernel<HD>(bdk.data(), bdv.data(), bdo.data(), lse.data(), dsum.data(), bq.data(), bk.data(),
                                    bv.data(), T, H, KVH, sc, sc * ATTN_LOG2E);
        });
    } else {
        launch({(unsigned)CEIL_DIV(T, ATTN_BN), (unsigned)KVH, (unsigned)B}, [&] {
            attn_bwd_kernel<HD, !DET>(DET ? NULL : dq_acc.data(), bdk.data(), bdv.data(), bdo.data(), lse.data(),
                                      dsum.data(), bq.data(), bk.data(), bv.data(), T, H, KVH, sc, sc * ATTN_LOG2E);
        });
    }
    if (DET) {
        for (auto &x : bdq) x = __float2bfloat16(NAN);
        launch({(unsigned)CEIL_DIV(T, 64 * DQMT), (unsigned)H, (unsigned)B}, [&] {
            attn_bwd_dq_kernel<HD, DQMT>(bdq.data(), bdo.data(), lse.data(), dsum.data(), bq.data(), bk.data(),
                                         bv.data(), T, H, KVH, sc, sc * ATTN_LOG2E);
        });
        dqf = tof(bdq);
    } else {
        for (size_t i = 0; i < nq; i++) dqf[i] = rb(dq_acc[i] * sc);
    }
    double lerr = 0;
    for (size_t i = 0; i < nl; i++) lerr = isfinite(lse[i]) ? fmax(lerr, fabs(lse[i] - rl[i])) : INFINITY;
    double eo = relerr(tof(bo), ro), eq = relerr(dqf, rdq), ek = relerr(tof(bdk), rdk), ev = relerr(tof(bdv), rdv);
    int ok = eo < 1e-2 && eq < 1e-2 && ek < 1e-2 && ev < 1e-2 && lerr < 2e-3;
    printf("emu fwd v%d bwd %-9s hd=%3d B=%d T=%3d H=%d KVH=%d: out %.2e lse %.2e dq %.2e dk %.2e dv %.2e  %s\n",
           FMT, DET ? (KV2 ? (DQMT == 2 ? "det2" : "det2/dq1") : (DQMT == 2 ? "det" : "det/dq1")) : "atomic", HD, B, T, H, KVH, eo, lerr, eq, ek, ev,
           ok ? "ok" : "FAIL");
    fflush(stdout);
    return ok;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    int ok = 1;
    // defaults (fwd v2 = 128 rows per CTA, deterministic bwd with the 128-row dq kernel)
    ok &= run_case<64, 2, 1, 2>(1, 17, 1, 1);
    ok &= run_case<64, 2, 1, 2>(1, 300, 2, 1);
    // det2: 128-key dk/dv CTAs (T not a multiple of 128 / 32, GQA, T < 32, several CTAs)
    ok &= run_case<64, 2, 1, 2, 1>(1, 300, 2, 1);
    ok &= run_case<64, 2, 1, 2, 1>(1, 17, 1, 1);
    if (!quick) {
        ok &= run_case<64, 2, 1, 2, 1>(2, 129, 2, 2);
        ok &= run_case<64, 2, 1, 2, 1>(1, 1, 1, 1);
        ok &= run_case<32, 2, 1, 2, 1>(1, 270, 4, 2);
        ok &= run_case<64, 1, 1, 1, 1>(1, 256, 2, 1);
        ok &= run_case<64, 2, 1, 2>(2, 129, 2, 2);
        ok &= run_case<64, 2, 1, 2>(1, 1, 1, 1);
        ok &= run_case<32, 2, 1, 2>(1, 70, 2, 2);
        ok &= run_case<128, 1, 1, 1>(1, 80, 2, 1);  // hd 128 runs MT = 1 kernels
        ok &= run_case<64, 1, 1, 1>(1, 200, 2, 1);  // det with the 64-row dq kernel
        // version 1 kernels (fwd 64 rows, atomic dq)
        ok &= run_case<64, 1, 0, 1>(1, 100, 2, 1);
        ok &= run_case<64, 1, 0, 1>(2, 129, 2, 2);
        ok &= run_case<32, 1, 0, 1>(1, 70, 2, 2);
        ok &= run_case<128, 1, 0, 1>(1, 80, 2, 1);
        ok &= run_case<64, 1, 0, 1>(1, 1, 1, 1);
    }
    printf("emu: %s\n", ok ? "ALL OK" : "FAILURES");
    return ok ? 0 : 1;
}
