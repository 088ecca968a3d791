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

// One cached heuristic answer per call shape (batch 1 for plain GEMMs; found = 0 remembers that cuBLASLt
// has no algorithm for a batched layout, which then runs as `batch` plain calls).
typedef struct {
    int m, n, k, trans_a, trans_b, out_f32, beta_nonzero, batch, valid, found;
    long long stride_a, stride_b, stride_out;
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

// Strided-batched GEMM: for b < batch,
//   out + b*stride_out = alpha * op(A + b*stride_a) @ op(B + b*stride_b) + beta * out(b)
// Strides are in elements; a stride of 0 broadcasts that operand (e.g. the same activations against the gate
// and up weights of one layer, which lie L*F*D elements apart in the flat parameter buffer). batch == 1 is a
// plain GEMM. If cuBLASLt offers no algorithm for a batched layout, it runs as `batch` plain calls.
static inline void matmul_strided_batched(MatmulContext *ctx, void *out, int out_f32, long long stride_out,
                                          const bf16 *A, int trans_a, long long stride_a, const bf16 *B, int trans_b,
                                          long long stride_b, int batch, int M, int N, int K, float alpha,
                                          float beta, cudaStream_t stream) {
    if (batch <= 0) SLLM_FATAL("matmul: batch=%d must be > 0", batch);
    if (M <= 0 || N <= 0 || K <= 0) SLLM_FATAL("matmul: bad shape M=%d N=%d K=%d", M, N, K);
    if (batch == 1) stride_a = stride_b = stride_out = 0;
    const size_t osz = out_f32 ? 4 : 2;
    if (((uintptr_t)out | (uintptr_t)A | (uintptr_t)B | (uintptr_t)(stride_out * osz) | (uintptr_t)(stride_a * 2) |
         (uintptr_t)(stride_b * 2)) & 15)
        SLLM_FATAL("matmul: cuBLASLt needs 16-byte aligned pointers and strides (out=%p A=%p B=%p, strides %lld %lld "
                   "%lld)", out, (const void *)A, (const void *)B, stride_out, stride_a, stride_b);
    const int beta_nz = beta != 0.0f;
    MatmulCacheEntry *hit = NULL;
    for (int i = 0; i < MATMUL_CACHE_SIZE; i++) {
        MatmulCacheEntry *e = &ctx->cache[i];
        if (e->valid && e->m == M && e->n == N && e->k == K && e->trans_a == trans_a && e->trans_b == trans_b &&
            e->out_f32 == out_f32 && e->beta_nonzero == beta_nz && e->batch == batch && e->stride_a == stride_a &&
            e->stride_b == stride_b && e->stride_out == stride_out) { hit = e; break; }
    }
    if (hit && !hit->found) {  // known to be unsupported as one batched call
        for (int b = 0; b < batch; b++)
            matmul_strided_batched(ctx, (char *)out + (size_t)b * stride_out * osz, out_f32, 0,
                                   A + (size_t)b * stride_a, trans_a, 0, B + (size_t)b * stride_b, trans_b, 0, 1, M,
                                   N, K, alpha, beta, stream);
        return;
    }
    // Column-major view: out^T [N, M] = op(B)^T [N, K] x op(A)^T [K, M].
    cublasOperation_t opB = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opA = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int ldb = trans_b ? K : N, lda = trans_a ? M : K;  // leading dims of the buffers viewed column-major
    cublasLtMatmulDesc_t desc;
    cublasCheck(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof(opB)));
    cublasCheck(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof(opA)));
    cublasLtMatrixLayout_t lb, la, lc;
    cublasCheck(cublasLtMatrixLayoutCreate(&lb, CUDA_R_16BF, trans_b ? K : N, trans_b ? N : K, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&la, CUDA_R_16BF, trans_a ? M : K, trans_a ? K : M, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&lc, out_f32 ? CUDA_R_32F : CUDA_R_16BF, N, M, N));
    if (batch > 1) {
        int32_t bc = batch;
        int64_t sb = stride_b, sa = stride_a, so = stride_out;
        cublasLtMatrixLayout_t lays[3] = {lb, la, lc};
        int64_t strides[3] = {sb, sa, so};
        for (int i = 0; i < 3; i++) {
            cublasCheck(cublasLtMatrixLayoutSetAttribute(lays[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof(bc)));
            cublasCheck(cublasLtMatrixLayoutSetAttribute(lays[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                         &strides[i], sizeof(strides[i])));
        }
    }
    if (!hit) {
        cublasLtMatmulPreference_t pref;
        cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
        cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                         &ctx->workspace_size, sizeof(ctx->workspace_size)));
        cublasLtMatmulHeuristicResult_t res;
        int found = 0;
        cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx->handle, desc, lb, la, lc, lc, pref, 1, &res, &found);
        cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
        if (batch == 1 && (st != CUBLAS_STATUS_SUCCESS || found == 0))
            SLLM_FATAL("matmul: cuBLASLt has no algorithm for M=%d N=%d K=%d trans_a=%d trans_b=%d out_f32=%d (%s)", M,
                       N, K, trans_a, trans_b, out_f32, cublasGetStatusString(st));
        hit = &ctx->cache[ctx->cache_next];
        ctx->cache_next = (ctx->cache_next + 1) % MATMUL_CACHE_SIZE;
        hit->m = M; hit->n = N; hit->k = K; hit->trans_a = trans_a; hit->trans_b = trans_b; hit->out_f32 = out_f32;
        hit->beta_nonzero = beta_nz; hit->batch = batch; hit->stride_a = stride_a; hit->stride_b = stride_b;
        hit->stride_out = stride_out; hit->valid = 1;
        hit->found = (st == CUBLAS_STATUS_SUCCESS && found > 0);
        if (hit->found) hit->algo = res.algo;
    }
    if (hit->found)
        cublasCheck(cublasLtMatmul(ctx->handle, desc, &alpha, B, lb, A, la, &beta, out, lc, out, lc, &hit->algo,
                                   ctx->workspace, ctx->workspace_size, stream));
    cublasCheck(cublasLtMatrixLayoutDestroy(lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(la));
    cublasCheck(cublasLtMatrixLayoutDestroy(lc));
    cublasCheck(cublasLtMatmulDescDestroy(desc));
    if (!hit->found)  // batched layout unsupported: plain calls (cached as such for next time)
        for (int b = 0; b < batch; b++)
            matmul_strided_batched(ctx, (char *)out + (size_t)b * stride_out * osz, out_f32, 0,
                                   A + (size_t)b * stride_a, trans_a, 0, B + (size_t)b * stride_b, trans_b, 0, 1, M,
                                   N, K, alpha, beta, stream);
}

// Plain GEMM (see the top of the file).
static inline void matmul(MatmulContext *ctx, void *out, int out_f32, const bf16 *A, int trans_a, const bf16 *B,
                          int trans_b, int M, int N, int K, float alpha, float beta, cudaStream_t stream) {
    matmul_strided_batched(ctx, out, out_f32, 0, A, trans_a, 0, B, trans_b, 0, 1, M, N, K, alpha, beta, stream);
}

#endif  // SLLM_MATMUL_CUH
