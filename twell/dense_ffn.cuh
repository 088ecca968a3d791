// twell/dense_ffn.cuh: dense (cuBLASLt) ReLU FFN on all rows or on a list of rows; the baseline, the
// dispatch's dense path and the fallback for TwELL overflow rows.
//
//   gated:     Y = (relu(X Wg^T) * (X Wu^T)) WdT      non-gated: Y = relu(X Wu^T) WdT
//   X [M, D], Wg/Wu [F, D] (nn.Linear layout), WdT [F, D] (down weight transposed), Y [M, D]; bf16.
//   G and U are bf16 (cuBLASLt rounds the fp32 accumulator), H = bf16(relu(G) * U) like PyTorch bf16.
//
// Rows are processed in chunks of chunk_rows (scratch [chunk_rows, F] x 2). With rows != NULL, chunk
// rows are gathered from X by rows[i] and the results scattered to Y[rows[i]] (the overflow fallback);
// otherwise rows r0.. are used in place. The relu-mul kernel also counts active gates (bf16 > 0) into
// *nnz (may be NULL) so the dispatch learns the sparsity from the dense path too.
#ifndef SLLM_TWELL_DENSE_FFN_CUH
#define SLLM_TWELL_DENSE_FFN_CUH

#include "cuda_common.cuh"
#include "matmul.cuh"

// out[i, :] = in[rows[i], :] (copy 16 B per thread). D % 8 == 0.
__global__ void twell_gather_rows_kernel(const bf16 *__restrict__ in, const int *__restrict__ rows, int n, int D,
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
__global__ void twell_scatter_rows_kernel(const bf16 *__restrict__ in, const int *__restrict__ rows, int n, int D,
                                          bf16 *__restrict__ out) {
    const int chunks = D / 8;
    long long total = (long long)n * chunks;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long long)gridDim.x * blockDim.x) {
        int r = (int)(i / chunks), c = (int)(i - (long long)r * chunks);
        reinterpret_cast<uint4 *>(out)[(size_t)rows[r] * chunks + c] =
            reinterpret_cast<const uint4 *>(in)[(size_t)r * chunks + c];
    }
}

// gated: G <- bf16(relu(G) * U); non-gated: G <- relu(G) (U unused). n elements, n % 8 == 0.
// Counts elements with bf16 G > 0 into *nnz (one atomic per block).
__global__ void __launch_bounds__(256) twell_relu_mul_kernel(bf16 *__restrict__ G, const bf16 *__restrict__ U,
                                                             long long n, int gated, unsigned long long *nnz) {
    unsigned long long cnt = 0;
    const long long n8 = n / 8;
    for (long long i = (long long)blockIdx.x * blockDim.x + threadIdx.x; i < n8; i += (long long)gridDim.x * blockDim.x) {
        uint4 gv = reinterpret_cast<uint4 *>(G)[i];
        uint4 uv = gated ? reinterpret_cast<const uint4 *>(U)[i] : make_uint4(0, 0, 0, 0);
        __nv_bfloat162 *g2 = reinterpret_cast<__nv_bfloat162 *>(&gv);
        const __nv_bfloat162 *u2 = reinterpret_cast<const __nv_bfloat162 *>(&uv);
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2 gf = __bfloat1622float2(g2[k]);
            cnt += (gf.x > 0.0f) + (gf.y > 0.0f);
            float a = gf.x > 0.0f ? gf.x : 0.0f, b = gf.y > 0.0f ? gf.y : 0.0f;
            if (gated) {
                float2 uf = __bfloat1622float2(u2[k]);
                a *= uf.x; b *= uf.y;
            }
            g2[k] = __floats2bfloat162_rn(a, b);
        }
        reinterpret_cast<uint4 *>(G)[i] = gv;
    }
    if (nnz) {
        __shared__ unsigned long long s[8];
        for (int o = 16; o > 0; o >>= 1) cnt += __shfl_xor_sync(0xffffffffu, cnt, o);
        if ((threadIdx.x & 31) == 0) s[threadIdx.x >> 5] = cnt;
        __syncthreads();
        if (threadIdx.x == 0) {
            unsigned long long t = 0;
            for (int i = 0; i < (int)(blockDim.x >> 5); i++) t += s[i];
            if (t) atomicAdd(nnz, t);
        }
    }
}

static inline int twell_grid_for(long long work, int threads) {
    long long b = CEIL_DIV(work, (long long)threads);
    if (b > 132LL * 32) b = 132LL * 32;
    return (int)(b < 1 ? 1 : b);
}

// Scratch for the dense FFN: xg [chunk, D], g [chunk, F], u [chunk, F], yg [chunk, D].
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
        long long ne = (long long)rc * F;
        twell_relu_mul_kernel<<<twell_grid_for(ne / 8, 256), 256, 0, stream>>>(sc->g, sc->u, ne, gated, nnz);
        cudaCheckLaunch();
        matmul(mm, yout, 0, sc->g, 0, WdT, 0, rc, D, F, 1.0f, 0.0f, stream);
        if (rows) {
            twell_scatter_rows_kernel<<<twell_grid_for((long long)rc * D / 8, 256), 256, 0, stream>>>(sc->yg, rows + r0,
                                                                                                    rc, D, Y);
            cudaCheckLaunch();
        }
    }
}

#endif  // SLLM_TWELL_DENSE_FFN_CUH
