// core/rmsnorm.cuh: RMSNorm forward (optionally fused with the residual add) and backward.
//
//   x      [N, D] bf16   input rows (the residual stream)
//   w      [D]    bf16   gain
//   out    [N, D] bf16   out = w * x * rstd,  rstd = 1 / sqrt(mean(x^2) + eps)   (computed in fp32)
//   rstd   [N]    fp32   saved for backward
//
// Fused forward: res = a + b (rounded to bf16, written to `res`), then out = rmsnorm(res).
// Backward (per row, xhat = x * rstd):
//   dx = rstd * (dy*w - xhat * mean(dy*w*xhat));   dres = (accumulate ? dres : 0) + dx   (bf16, in place)
//   dw (+)= sum_rows dy * xhat                        (fp32, deterministic two-stage column reduction)
// Requirements: D % 8 == 0, 16-byte aligned rows. One warp per row; 8 bf16 per 16-byte access.
// A few rows (decoding: N <= RMSNORM_FEW_ROWS, D <= RMSNORM_FEW_MAX_D) run the forward one CTA per row instead, with
// the row held in registers: one 16-byte load per thread instead of a warp's 8 dependent round trips and a re-read,
// launched as a programmatic dependent launch (the gains are loaded before waiting for the kernel before it, and the
// next kernel may start its own weight loads meanwhile). The sum of squares is then added in a different order, so
// the result can differ from the warp kernel's in the last bit of rstd.
#ifndef SLLM_RMSNORM_CUH
#define SLLM_RMSNORM_CUH

#include "cuda_common.cuh"
#include "kernel_utils.cuh"

#define RMSNORM_WARPS 4  // rows per block in the row kernels

// a_plus_b: if b != NULL, x = round_bf16(a + b) is written to res and normalised; else x = a.
static __global__ void rmsnorm_forward_kernel(bf16 *out, float *rstd, bf16 *res, const bf16 *a, const bf16 *b,
                                       const bf16 *w, int N, int D, float eps) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int row = blockIdx.x * RMSNORM_WARPS + warp;
    if (row >= N) return;
    const bf16 *ar = a + (size_t)row * D;
    const bf16 *br = b ? b + (size_t)row * D : NULL;
    bf16 *rr = res ? res + (size_t)row * D : NULL;
    float ss = 0.0f;
    for (int c = lane * 8; c < D; c += 256) {
        float x[8];
        load8_bf16(ar + c, x);
        if (br) {
            float y[8];
            load8_bf16(br + c, y);
#pragma unroll
            for (int i = 0; i < 8; i++) x[i] = round_bf16(x[i] + y[i]);
            store8_bf16(rr + c, x);
        }
#pragma unroll
        for (int i = 0; i < 8; i++) ss += x[i] * x[i];
    }
    ss = warp_sum(ss);
    float r = rsqrtf(ss / (float)D + eps);
    const bf16 *xr = br ? rr : ar;  // re-read own writes (same thread) or the input
    bf16 *orow = out + (size_t)row * D;
    for (int c = lane * 8; c < D; c += 256) {
        float x[8], g[8];
        load8_bf16(xr + c, x);
        load8_bf16(w + c, g);
#pragma unroll
        for (int i = 0; i < 8; i++) x[i] = x[i] * r * g[i];
        store8_bf16(orow + c, x);
    }
    if (lane == 0 && rstd) rstd[row] = r;
}

#define RMSNORM_FEW_ROWS 64
#define RMSNORM_FEW_THREADS 256
#define RMSNORM_FEW_CHUNKS 4  // 16-byte chunks per thread: D <= 256 * 8 * 4
#define RMSNORM_FEW_MAX_D (RMSNORM_FEW_THREADS * 8 * RMSNORM_FEW_CHUNKS)

// One CTA per row; the same function as rmsnorm_forward_kernel (res = bf16(a + b) when b != NULL).
static __global__ void __launch_bounds__(RMSNORM_FEW_THREADS)
rmsnorm_few_rows_kernel(bf16 *out, float *rstd, bf16 *res, const bf16 *a, const bf16 *b, const bf16 *w, int D,
                        float eps) {
    constexpr int CH = RMSNORM_FEW_CHUNKS;
    __shared__ float sh[32];
    const size_t row = blockIdx.x;
    float g[CH][8], x[CH][8];
#pragma unroll
    for (int c = 0; c < CH; c++) {
        const int col = (threadIdx.x + c * RMSNORM_FEW_THREADS) * 8;
        if (col < D) load8_bf16(w + col, g[c]);  // gains: independent of the kernel before
    }
    pdl_launch_dependents();
    pdl_wait();
    float ss = 0.0f;
#pragma unroll
    for (int c = 0; c < CH; c++) {
        const int col = (threadIdx.x + c * RMSNORM_FEW_THREADS) * 8;
        if (col >= D) continue;
        load8_bf16(a + row * D + col, x[c]);
        if (b) {
            float y[8];
            load8_bf16(b + row * D + col, y);
#pragma unroll
            for (int i = 0; i < 8; i++) x[c][i] = round_bf16(x[c][i] + y[i]);
            store8_bf16(res + row * D + col, x[c]);
        }
#pragma unroll
        for (int i = 0; i < 8; i++) ss += x[c][i] * x[c][i];
    }
    ss = block_sum(ss, sh);
    const float r = rsqrtf(ss / (float)D + eps);
#pragma unroll
    for (int c = 0; c < CH; c++) {
        const int col = (threadIdx.x + c * RMSNORM_FEW_THREADS) * 8;
        if (col >= D) continue;
#pragma unroll
        for (int i = 0; i < 8; i++) x[c][i] = x[c][i] * r * g[c][i];
        store8_bf16(out + row * D + col, x[c]);
    }
    if (threadIdx.x == 0 && rstd) rstd[row] = r;
}

// The forward of N rows: the few-rows kernel (programmatic dependent launch) or the warp-per-row kernel.
static inline void rmsnorm_forward_launch(bf16 *out, float *rstd, bf16 *res, const bf16 *a, const bf16 *b,
                                          const bf16 *w, int N, int D, float eps, cudaStream_t stream) {
    if (N <= RMSNORM_FEW_ROWS && D <= RMSNORM_FEW_MAX_D) {
        cudaLaunchAttribute attr;
        const cudaLaunchConfig_t cfg =
            pdl_launch_config(dim3((unsigned)N), dim3(RMSNORM_FEW_THREADS), 0, 1, &attr, stream);
        if (N > 0) cudaCheck(cudaLaunchKernelEx(&cfg, rmsnorm_few_rows_kernel, out, rstd, res, a, b, w, D, eps));
        return;
    }
    rmsnorm_forward_kernel<<<CEIL_DIV(N, RMSNORM_WARPS), 32 * RMSNORM_WARPS, 0, stream>>>(out, rstd, res, a, b, w, N,
                                                                                          D, eps);
    cudaCheckLaunch();
}

// out = rmsnorm(x). rstd may be NULL (recompute in backward reuses the saved one... but it is cheap to redo).
static inline void rmsnorm_forward(bf16 *out, float *rstd, const bf16 *x, const bf16 *w, int N, int D, float eps,
                                   cudaStream_t stream) {
    if (D % 8) SLLM_FATAL("rmsnorm_forward: D=%d must be a multiple of 8", D);
    rmsnorm_forward_launch(out, rstd, NULL, x, NULL, w, N, D, eps, stream);
}
// res = a + b; out = rmsnorm(res).
static inline void fused_residual_rmsnorm_forward(bf16 *res, bf16 *out, float *rstd, const bf16 *a, const bf16 *b,
                                                  const bf16 *w, int N, int D, float eps, cudaStream_t stream) {
    if (D % 8) SLLM_FATAL("fused_residual_rmsnorm_forward: D=%d must be a multiple of 8", D);
    rmsnorm_forward_launch(out, rstd, res, a, b, w, N, D, eps, stream);
}

// Row part of the backward: dres = (accumulate ? dres : 0) + dx.
static __global__ void rmsnorm_backward_dx_kernel(bf16 *dres, const bf16 *dy, const bf16 *x, const bf16 *w,
                                           const float *rstd, int N, int D, int accumulate) {
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    int row = blockIdx.x * RMSNORM_WARPS + warp;
    if (row >= N) return;
    const bf16 *dyr = dy + (size_t)row * D, *xr = x + (size_t)row * D;
    bf16 *dr = dres + (size_t)row * D;
    float r = rstd[row];
    float dot = 0.0f;  // sum_d dy*w*xhat
    for (int c = lane * 8; c < D; c += 256) {
        float g[8], xv[8], gw[8];
        load8_bf16(dyr + c, g);
        load8_bf16(xr + c, xv);
        load8_bf16(w + c, gw);
#pragma unroll
        for (int i = 0; i < 8; i++) dot += g[i] * gw[i] * xv[i] * r;
    }
    dot = warp_sum(dot) / (float)D;
    for (int c = lane * 8; c < D; c += 256) {
        float g[8], xv[8], gw[8], o[8];
        load8_bf16(dyr + c, g);
        load8_bf16(xr + c, xv);
        load8_bf16(w + c, gw);
        if (accumulate) load8_bf16(dr + c, o);
        else {
#pragma unroll
            for (int i = 0; i < 8; i++) o[i] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < 8; i++) o[i] += r * (g[i] * gw[i] - xv[i] * r * dot);
        store8_bf16(dr + c, o);
    }
}

// Column part of the backward, stage 1: partial[s, d] = sum over rows of split s of dy*x*rstd.
// Block = 32 x 8 threads; threadIdx.x covers 2 adjacent columns (64 per block), threadIdx.y rows.
#define RMSNORM_DW_SPLITS 64
static __global__ void rmsnorm_backward_dw_partial_kernel(float *partial, const bf16 *dy, const bf16 *x, const float *rstd,
                                                   int N, int D) {
    __shared__ float sh[8][64];
    int c = blockIdx.x * 64 + threadIdx.x * 2;
    int split = blockIdx.y;
    int rows_per = CEIL_DIV(N, RMSNORM_DW_SPLITS);
    int r0 = split * rows_per, r1 = min(N, r0 + rows_per);
    float a0 = 0.0f, a1 = 0.0f;
    if (c < D) {
        for (int r = r0 + threadIdx.y; r < r1; r += 8) {
            float rs = rstd[r];
            float2 g = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(dy + (size_t)r * D + c));
            float2 xv = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162 *>(x + (size_t)r * D + c));
            a0 += g.x * xv.x * rs;
            a1 += g.y * xv.y * rs;
        }
    }
    sh[threadIdx.y][threadIdx.x * 2] = a0;
    sh[threadIdx.y][threadIdx.x * 2 + 1] = a1;
    __syncthreads();
    if (threadIdx.y == 0 && c < D) {
        float s0 = 0.0f, s1 = 0.0f;
        for (int y = 0; y < 8; y++) { s0 += sh[y][threadIdx.x * 2]; s1 += sh[y][threadIdx.x * 2 + 1]; }
        partial[(size_t)split * D + c] = s0;
        partial[(size_t)split * D + c + 1] = s1;
    }
}
// Stage 2: dw[d] (+)= sum_s partial[s, d] (fixed order); accumulate_dw = 0 overwrites dw.
static __global__ void rmsnorm_backward_dw_final_kernel(float *dw, const float *partial, int D, int accumulate_dw) {
    int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= D) return;
    float s = 0.0f;
    for (int k = 0; k < RMSNORM_DW_SPLITS; k++) s += partial[(size_t)k * D + c];
    dw[c] = accumulate_dw ? dw[c] + s : s;
}
static inline size_t rmsnorm_backward_scratch_floats(int D) { return (size_t)RMSNORM_DW_SPLITS * D; }

// dres (= or +=) dx; dw (= or +=) dW.  scratch: rmsnorm_backward_scratch_floats(D) floats.
static inline void rmsnorm_backward_ex(bf16 *dres, float *dw, float *scratch, const bf16 *dy, const bf16 *x,
                                       const bf16 *w, const float *rstd, int N, int D, int accumulate,
                                       int accumulate_dw, cudaStream_t stream) {
    if (D % 8) SLLM_FATAL("rmsnorm_backward: D=%d must be a multiple of 8", D);
    rmsnorm_backward_dx_kernel<<<CEIL_DIV(N, RMSNORM_WARPS), 32 * RMSNORM_WARPS, 0, stream>>>(dres, dy, x, w, rstd, N,
                                                                                              D, accumulate);
    cudaCheckLaunch();
    dim3 grid(CEIL_DIV(D, 64), RMSNORM_DW_SPLITS), block(32, 8);
    rmsnorm_backward_dw_partial_kernel<<<grid, block, 0, stream>>>(scratch, dy, x, rstd, N, D);
    cudaCheckLaunch();
    rmsnorm_backward_dw_final_kernel<<<CEIL_DIV(D, 256), 256, 0, stream>>>(dw, scratch, D, accumulate_dw);
    cudaCheckLaunch();
}
// dres (= or +=) dx; dw += dW.
static inline void rmsnorm_backward(bf16 *dres, float *dw, float *scratch, const bf16 *dy, const bf16 *x,
                                    const bf16 *w, const float *rstd, int N, int D, int accumulate,
                                    cudaStream_t stream) {
    rmsnorm_backward_ex(dres, dw, scratch, dy, x, w, rstd, N, D, accumulate, 1, stream);
}

#endif  // SLLM_RMSNORM_CUH
