// core/matmul.cuh: dense bf16 GEMMs through cuBLASLt (fp32 accumulation).
//
//   out[M, N] (row-major, bf16 or fp32) = alpha * op(A)[M, K] @ op(B)[K, N] + beta * out
//
//   A is stored row-major as [M, K] (trans_a = 0) or [K, M] (trans_a = 1).
//   B is stored row-major as [K, N] (trans_b = 0) or [N, K] (trans_b = 1; an nn.Linear weight W
//   gives x W^T with trans_b = 1).
//   beta = 1 accumulates into out (weight gradients across micro-steps).
//
// The context owns the cuBLASLt handle, a 32 MiB workspace and a small cache of the heuristic's
// algorithm per shape, so repeated calls do not re-query the heuristic. No globals.
#ifndef SLLM_MATMUL_CUH
#define SLLM_MATMUL_CUH

#include "cuda_common.cuh"

#define MATMUL_CACHE_SIZE 128

typedef struct {
    int m, n, k, trans_a, trans_b, out_f32, beta_nonzero, valid;
    cublasLtMatmulAlgo_t algo;
} MatmulCacheEntry;

typedef struct {
    cublasLtHandle_t handle;
    void *workspace;
    size_t workspace_size;
    MatmulCacheEntry cache[MATMUL_CACHE_SIZE];
    int cache_next;
} MatmulContext;

static inline void matmul_context_init(MatmulContext *ctx) {
    memset(ctx, 0, sizeof(*ctx));
    cublasCheck(cublasLtCreate(&ctx->handle));
    ctx->workspace_size = 32u << 20;
    cudaCheck(cudaMalloc(&ctx->workspace, ctx->workspace_size));
}

static inline void matmul_context_free(MatmulContext *ctx) {
    cudaCheck(cudaFree(ctx->workspace));
    cublasCheck(cublasLtDestroy(ctx->handle));
    memset(ctx, 0, sizeof(*ctx));
}

static inline void matmul(MatmulContext *ctx, void *out, int out_f32, const bf16 *A, int trans_a, const bf16 *B,
                          int trans_b, int M, int N, int K, float alpha, float beta, cudaStream_t stream) {
    if (M <= 0 || N <= 0 || K <= 0) SLLM_FATAL("matmul: bad shape M=%d N=%d K=%d", M, N, K);
    if (((uintptr_t)out | (uintptr_t)A | (uintptr_t)B) & 15)
        SLLM_FATAL("matmul: cuBLASLt needs 16-byte aligned pointers (out=%p A=%p B=%p)", out, (const void *)A,
                   (const void *)B);
    // Column-major view: out^T [N, M] = op(B)^T [N, K] x op(A)^T [K, M].
    cublasOperation_t opB = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opA = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    int ldb = trans_b ? K : N;  // leading dim of B's buffer viewed column-major
    int lda = trans_a ? M : K;
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof(opB)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof(opA)));
    cublasLtMatrixLayout_t lb, la, lc;
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, trans_b ? K : N, trans_b ? N : K, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, trans_a ? M : K, trans_a ? K : M, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, out_f32 ? CUDA_R_32F : CUDA_R_16BF, N, M, N));

    MatmulCacheEntry *hit = NULL;
    int beta_nz = beta != 0.0f;
    for (int i = 0; i < MATMUL_CACHE_SIZE; i++) {
        MatmulCacheEntry *e = &ctx->cache[i];
        if (e->valid && e->m == M && e->n == N && e->k == K && e->trans_a == trans_a && e->trans_b == trans_b &&
            e->out_f32 == out_f32 && e->beta_nonzero == beta_nz) { hit = e; break; }
    }
    if (!hit) {
        cublasLtMatmulPreference_t pref;
        cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &ctx->workspace_size, sizeof(ctx->workspace_size)));
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        cublasCheck(cublasLtMatmulAlgoGetHeuristic(ctx->handle, desc, lb, la, lc, lc, pref, 1, &res, &found));
        cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
        if (found == 0)
            SLLM_FATAL("matmul: cuBLASLt has no algorithm for M=%d N=%d K=%d trans_a=%d trans_b=%d out_f32=%d", M,
                       N, K, trans_a, trans_b, out_f32);
        hit = &ctx->cache[ctx->cache_next];
        ctx->cache_next = (ctx->cache_next + 1) % MATMUL_CACHE_SIZE;
        hit->m = M; hit->n = N; hit->k = K; hit->trans_a = trans_a; hit->trans_b = trans_b;
        hit->out_f32 = out_f32; hit->beta_nonzero = beta_nz; hit->valid = 1; hit->algo = res.algo;
    }
    cublasCheck(cublasLtMatmul(ctx->handle, desc, &alpha, B, lb, A, la, &beta, out, lc, out, lc, &hit->algo,
                               ctx->workspace, ctx->workspace_size, stream));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lc));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
}

#endif  // SLLM_MATMUL_CUH
