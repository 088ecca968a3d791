// twell/dense_ffn.cuh: dense (cuBLASLt) ReLU FFN on all rows or on a list of rows; the baseline, the
// dispatch's dense path and the fallback for TwELL overflow rows.
//
//   gated:     Y = (relu(X Wg^T) * (X Wu^T)) WdT      non-gated: Y = relu(X Wu^T) WdT
//   X [M, D], Wg/Wu [F, D] (nn.Linear layout), WdT [F, D] (down weight transposed), Y [M, D]; bf16.
//   G and U are bf16 (cuBLASLt rounds the fp32 accumulator), H = bf16(relu(G) * U) like PyTorch bf16.
//
// Rows are processed in chunks of chunk_rows (scratch [chunk_rows, F] x 2). With rows != NULL, chunk
// rows are gathered from X by rows[i] and the results scattered to Y[rows[i]] (the overflow fallback);
// otherwise rows r0.. are used in place. The element-wise step is the model's dense FFN kernel
// (core/ffn.cuh, ffn_forward_split); it also counts active gates (bf16 > 0) into *nnz (may be NULL) so the
// dispatch learns the sparsity from the dense path too.
#ifndef SLLM_TWELL_DENSE_FFN_CUH
#define SLLM_TWELL_DENSE_FFN_CUH

#include "cuda_common.cuh"
#include "core/ffn.cuh"
#include "matmul.cuh"

// out[i, :] = in[rows[i], :] (copy 16 B per thread). D % 8 == 0.
static __global__ void twell_gather_rows_kernel(const bf16 *__restrict__ in, const int *__restrict__ rows, int n, int D,
                                         bf16 *__restrict__ out) {
    const int chunks = D / 8;
    long long total = (long long)n * chunks;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        int r = (int)(i / chunks), c = (int)(i - (long long)r * chunks);
        reinterpret_cast<uint4 *>(out)[(size_t)r * chunks + c] =
            reinterpret_cast<const uint4 *>(in)[(size_t)rows[r] * chunks + c];
    }
}
// out[rows[i], :] = in[i, :].
static __global__ void twell_scatter_rows_kernel(const bf16 *__restrict__ in, const int *__restrict__ rows, int n, int D,
                                          bf16 *__restrict__ out) {
    const int chunks = D / 8;
    long long total = (long long)n * chunks;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        int r = (int)(i / chunks), c = (int)(i - (long long)r * chunks);
        reinterpret_cast<uint4 *>(out)[(size_t)rows[r] * chunks + c] =
            reinterpret_cast<const uint4 *>(in)[(size_t)r * chunks + c];
    }
}

static inline int twell_grid_for(long long work, int threads) {
    long long b = CEIL_DIV(work, (long long)threads);
    if (b > 132LL * 32) b = 132LL * 32;
    return (int)(b < 1 ? 1 : b);
}

// Scratch for the dense FFN: xg [chunk, D], g [chunk, F], u [chunk, F], yg [chunk, D]. The workspace allocates g and u
// as one [2, chunk, F] buffer (u = g + chunk * F).
typedef struct {
    int chunk_rows;
    bf16 *xg, *g, *u, *yg;
} TwellDenseScratch;

// rows == NULL: all n rows in place. Otherwise the n rows listed (device array). Wg unused if !gated.
static inline void twell_dense_ffn(MatmulContext *mm, const TwellDenseScratch *sc, int gated, const bf16 *X,
                                   const bf16 *Wg, const bf16 *Wu, const bf16 *WdT, bf16 *Y, const int *rows, int n,
                                   int D, int F, unsigned long long *nnz, cudaStream_t stream) {
    for (int r0 = 0; r0 < n; r0 += sc->chunk_rows) {
        const int rc = n - r0 < sc->chunk_rows ? n - r0 : sc->chunk_rows;
        const bf16 *xin = X + (size_t)r0 * D;
        bf16 *yout = Y + (size_t)r0 * D;
        if (rows) {
            twell_gather_rows_kernel<<<twell_grid_for((long long)rc * D / 8, 256), 256, 0, stream>>>(X, rows + r0, rc,
                                                                                                   D, sc->xg);
            cudaCheckLaunch();
            xin = sc->xg;
            yout = sc->yg;
        }
        if (gated) {
            matmul(mm, sc->g, 0, xin, 0, Wg, 1, rc, F, D, 1.0f, 0.0f, stream);
            matmul(mm, sc->u, 0, xin, 0, Wu, 1, rc, F, D, 1.0f, 0.0f, stream);
        } else {
            matmul(mm, sc->g, 0, xin, 0, Wu, 1, rc, F, D, 1.0f, 0.0f, stream);
        }
        ffn_forward_split(sc->g, sc->g, sc->u, rc, F, gated, NULL, nnz, NULL, stream);  // g <- h in place
        matmul(mm, yout, 0, sc->g, 0, WdT, 0, rc, D, F, 1.0f, 0.0f, stream);
        if (rows) {
            twell_scatter_rows_kernel<<<twell_grid_for((long long)rc * D / 8, 256), 256, 0, stream>>>(sc->yg, rows + r0,
                                                                                                    rc, D, Y);
            cudaCheckLaunch();
        }
    }
}

#endif  // SLLM_TWELL_DENSE_FFN_CUH
