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
    int m, n, k, trans_a, trans_b, out_f32, beta_nonzero, batch, valid, found, epi;
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

// Epilogues (MatmulCacheEntry.epi).
enum { MATMUL_EPI_NONE = 0, MATMUL_EPI_RELU_MASK = 1 };

// The cache entry of a call shape (key: every field but valid, found and algo), or NULL.
static inline MatmulCacheEntry *matmul_cache_find(MatmulContext *ctx, const MatmulCacheEntry *key) {
    for (int i = 0; i < MATMUL_CACHE_SIZE; i++) {
        MatmulCacheEntry *e = &ctx->cache[i];
        if (e->valid && e->m == key->m && e->n == key->n && e->k == key->k && e->trans_a == key->trans_a &&
            e->trans_b == key->trans_b && e->out_f32 == key->out_f32 && e->beta_nonzero == key->beta_nonzero &&
            e->batch == key->batch && e->stride_a == key->stride_a && e->stride_b == key->stride_b &&
            e->stride_out == key->stride_out && e->epi == key->epi)
            return e;
    }
    return NULL;
}
// A new entry for key (round-robin over the cache), found = 0 until the caller sets the algorithm.
static inline MatmulCacheEntry *matmul_cache_add(MatmulContext *ctx, const MatmulCacheEntry *key) {
    MatmulCacheEntry *e = &ctx->cache[ctx->cache_next];
    ctx->cache_next = (ctx->cache_next + 1) % MATMUL_CACHE_SIZE;
    *e = *key;
    e->valid = 1;
    e->found = 0;
    return e;
}

static inline int matmul_lt(MatmulContext *ctx, void *out, int out_f32, long long stride_out, const bf16 *A, int trans_a,
                            long long stride_a, const bf16 *B, int trans_b, long long stride_b, int batch, int M, int N,
                            int K, float alpha, float beta, int epi, void *mask, cudaStream_t stream);

// The cuBLASLt descriptors of one call. Column-major view: out^T [N, M] = op(B)^T [N, K] x op(A)^T [K, M].
typedef struct {
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t lb, la, lc;
} MatmulDescs;

static inline void matmul_descs_create(MatmulDescs *d, int M, int N, int K, int trans_a, int trans_b, int out_f32,
                                       int batch, long long stride_a, long long stride_b, long long stride_out, int epi,
                                       void *mask) {
    cublasOperation_t opB = trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    cublasOperation_t opA = trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const int ldb = trans_b ? K : N, lda = trans_a ? M : K;  // leading dims of the buffers viewed column-major
    cublasCheck(cublasLtMatmulDescCreate(&d->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    cublasCheck(cublasLtMatmulDescSetAttribute(d->desc, CUBLASLT_MATMUL_DESC_TRANSA, &opB, sizeof(opB)));
    cublasCheck(cublasLtMatmulDescSetAttribute(d->desc, CUBLASLT_MATMUL_DESC_TRANSB, &opA, sizeof(opA)));
    if (epi == MATMUL_EPI_RELU_MASK) {
        // D^T is [N, M] column-major: the mask's leading dimension is N bits, so row m of out owns bits
        // [m N, m N + N) (LSB first).
        cublasLtEpilogue_t e = CUBLASLT_EPILOGUE_RELU_AUX;
        int64_t ld = N;
        cublasCheck(cublasLtMatmulDescSetAttribute(d->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &e, sizeof(e)));
        cublasCheck(cublasLtMatmulDescSetAttribute(d->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &mask,
                                                   sizeof(mask)));
        cublasCheck(cublasLtMatmulDescSetAttribute(d->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &ld, sizeof(ld)));
    }
    cublasCheck(cublasLtMatrixLayoutCreate(&d->lb, CUDA_R_16BF, trans_b ? K : N, trans_b ? N : K, ldb));
    cublasCheck(cublasLtMatrixLayoutCreate(&d->la, CUDA_R_16BF, trans_a ? M : K, trans_a ? K : M, lda));
    cublasCheck(cublasLtMatrixLayoutCreate(&d->lc, out_f32 ? CUDA_R_32F : CUDA_R_16BF, N, M, N));
    if (batch > 1) {
        int32_t bc = batch;
        cublasLtMatrixLayout_t lays[3] = {d->lb, d->la, d->lc};
        int64_t strides[3] = {stride_b, stride_a, stride_out};
        for (int i = 0; i < 3; i++) {
            cublasCheck(cublasLtMatrixLayoutSetAttribute(lays[i], CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &bc, sizeof(bc)));
            cublasCheck(cublasLtMatrixLayoutSetAttribute(lays[i], CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                                         &strides[i], sizeof(strides[i])));
        }
    }
}
static inline void matmul_descs_destroy(MatmulDescs *d) {
    cublasCheck(cublasLtMatrixLayoutDestroy(d->lb));
    cublasCheck(cublasLtMatrixLayoutDestroy(d->la));
    cublasCheck(cublasLtMatrixLayoutDestroy(d->lc));
    cublasCheck(cublasLtMatmulDescDestroy(d->desc));
}

// Up to `want` (<= 16) candidate algorithms from cuBLASLt's heuristic for the call described by md, within the
// context's workspace, best first (*found of them).
static inline cublasStatus_t matmul_heuristic(MatmulContext *ctx, const MatmulDescs *md, int want,
                                              cublasLtMatmulHeuristicResult_t *cand, int *found) {
    cublasLtMatmulPreference_t pref;
    cublasCheck(cublasLtMatmulPreferenceCreate(&pref));
    cublasCheck(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                     &ctx->workspace_size, sizeof(ctx->workspace_size)));
    *found = 0;
    const cublasStatus_t st = cublasLtMatmulAlgoGetHeuristic(ctx->handle, md->desc, md->lb, md->la, md->lc, md->lc,
                                                             pref, want, cand, found);
    cublasCheck(cublasLtMatmulPreferenceDestroy(pref));
    return st;
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
    (void)matmul_lt(ctx, out, out_f32, stride_out, A, trans_a, stride_a, B, trans_b, stride_b, batch, M, N, K, alpha,
                    beta, MATMUL_EPI_NONE, NULL, stream);
}

// The implementation. epi = MATMUL_EPI_RELU_MASK (batch 1, bf16 out, beta 0): out = relu(A op(B)) and the ReLU
// bit-mask of cuBLASLt's RELU_AUX epilogue in `mask`: bit (m * N + n) (LSB first, 32-bit little-endian words)
// is set where the product was positive; N % 128 == 0. Returns 0, or 1 when cuBLASLt has no algorithm for
// an epilogue GEMM (plain GEMMs without an algorithm are fatal, as before).
static inline int matmul_lt(MatmulContext *ctx, void *out, int out_f32, long long stride_out, const bf16 *A, int trans_a,
                            long long stride_a, const bf16 *B, int trans_b, long long stride_b, int batch, int M, int N,
                            int K, float alpha, float beta, int epi, void *mask, cudaStream_t stream) {
    if (epi != MATMUL_EPI_NONE && (batch != 1 || out_f32 || beta != 0.0f || N % 128 != 0 || !mask))
        SLLM_FATAL("matmul: the ReLU bit-mask epilogue takes batch 1, bf16 out, beta 0, N %% 128 == 0 and a mask "
                   "(batch %d out_f32 %d beta %g N %d mask %p)", batch, out_f32, beta, N, mask);
    if (batch <= 0) SLLM_FATAL("matmul: batch=%d must be > 0", batch);
    if (M <= 0 || N <= 0 || K <= 0) SLLM_FATAL("matmul: bad shape M=%d N=%d K=%d", M, N, K);
    if (batch == 1) stride_a = stride_b = stride_out = 0;
    const size_t osz = out_f32 ? 4 : 2;
    if (((uintptr_t)out | (uintptr_t)A | (uintptr_t)B | (uintptr_t)(stride_out * osz) | (uintptr_t)(stride_a * 2) |
         (uintptr_t)(stride_b * 2)) & 15)
        SLLM_FATAL("matmul: cuBLASLt needs 16-byte aligned pointers and strides (out=%p A=%p B=%p, strides %lld %lld "
                   "%lld)", out, (const void *)A, (const void *)B, stride_out, stride_a, stride_b);
    MatmulCacheEntry key;
    memset(&key, 0, sizeof(key));
    key.m = M; key.n = N; key.k = K; key.trans_a = trans_a; key.trans_b = trans_b; key.out_f32 = out_f32;
    key.beta_nonzero = beta != 0.0f; key.batch = batch; key.stride_a = stride_a; key.stride_b = stride_b;
    key.stride_out = stride_out; key.epi = epi;
    MatmulCacheEntry *hit = matmul_cache_find(ctx, &key);
    if (hit && !hit->found && epi == MATMUL_EPI_NONE) {  // known to be unsupported as one batched call
        for (int b = 0; b < batch; b++)
            matmul_strided_batched(ctx, (char *)out + (size_t)b * stride_out * osz, out_f32, 0,
                                   A + (size_t)b * stride_a, trans_a, 0, B + (size_t)b * stride_b, trans_b, 0, 1, M,
                                   N, K, alpha, beta, stream);
        return 0;
    }
    if (hit && !hit->found && epi != MATMUL_EPI_NONE) return 1;
    MatmulDescs md;
    matmul_descs_create(&md, M, N, K, trans_a, trans_b, out_f32, batch, stride_a, stride_b, stride_out, epi, mask);
    cublasLtMatmulDesc_t desc = md.desc;
    cublasLtMatrixLayout_t lb = md.lb, la = md.la, lc = md.lc;
    if (!hit) {
        // The heuristic's first algorithm, except for the ReLU bit-mask epilogue: there its first pick (192x192
        // tiles on the H200 at the gate's shapes) is 12-20% slower than its 128x128 candidate (0.56-0.59 vs
        // 0.49-0.50 ms per 16384 x 5632 x 2048 chunk, 2.47 vs 2.17 ms at M 65536, measured on the H200),
        // so a 128x128 candidate is preferred when the heuristic offers one. Deterministic (no timing).
        cublasLtMatmulHeuristicResult_t cand[16];
        int found = 0;
        const cublasStatus_t st = matmul_heuristic(ctx, &md, epi == MATMUL_EPI_RELU_MASK ? 16 : 1, cand, &found);
        int pick = 0;
        for (int a = 0; epi == MATMUL_EPI_RELU_MASK && st == CUBLAS_STATUS_SUCCESS && a < found; a++) {
            uint32_t tile = 0;
            size_t written = 0;
            if (cublasLtMatmulAlgoConfigGetAttribute(&cand[a].algo, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile),
                                                     &written) == CUBLAS_STATUS_SUCCESS &&
                tile == CUBLASLT_MATMUL_TILE_128x128) {
                pick = a;
                break;
            }
        }
        const cublasLtMatmulHeuristicResult_t &res = cand[pick];
        if (batch == 1 && epi == MATMUL_EPI_NONE && (st != CUBLAS_STATUS_SUCCESS || found == 0))
            SLLM_FATAL("matmul: cuBLASLt has no algorithm for M=%d N=%d K=%d trans_a=%d trans_b=%d out_f32=%d (%s)", M,
                       N, K, trans_a, trans_b, out_f32, cublasGetStatusString(st));
        hit = matmul_cache_add(ctx, &key);
        hit->found = (st == CUBLAS_STATUS_SUCCESS && found > 0);
        if (hit->found) hit->algo = res.algo;
    }
    if (hit->found)
        cublasCheck(cublasLtMatmul(ctx->handle, desc, &alpha, B, lb, A, la, &beta, out, lc, out, lc, &hit->algo,
                                   ctx->workspace, ctx->workspace_size, stream));
    matmul_descs_destroy(&md);
    if (!hit->found && epi != MATMUL_EPI_NONE) return 1;
    if (!hit->found)  // batched layout unsupported: plain calls (cached as such for next time)
        for (int b = 0; b < batch; b++)
            matmul_strided_batched(ctx, (char *)out + (size_t)b * stride_out * osz, out_f32, 0,
                                   A + (size_t)b * stride_a, trans_a, 0, B + (size_t)b * stride_b, trans_b, 0, 1, M,
                                   N, K, alpha, beta, stream);
    return 0;
}

// Plain GEMM (see the top of the file).
static inline void matmul(MatmulContext *ctx, void *out, int out_f32, const bf16 *A, int trans_a, const bf16 *B,
                          int trans_b, int M, int N, int K, float alpha, float beta, cudaStream_t stream) {
    matmul_strided_batched(ctx, out, out_f32, 0, A, trans_a, 0, B, trans_b, 0, 1, M, N, K, alpha, beta, stream);
}

// out[M, N] = relu(A[M, K] @ W^T) (W [N, K], an nn.Linear weight) in bf16 plus the ReLU bit-mask (see matmul_lt;
// mask holds M * N / 8 bytes). Returns 0, or 1 if cuBLASLt offers no algorithm for this epilogue (nothing ran).
static inline int matmul_relu_mask(MatmulContext *ctx, bf16 *out, uint32_t *mask, const bf16 *A, const bf16 *W, int M,
                                   int N, int K, cudaStream_t stream) {
    return matmul_lt(ctx, out, 0, 0, A, 0, 0, W, 1, 0, 1, M, N, K, 1.0f, 0.0f, MATMUL_EPI_RELU_MASK, mask, stream);
}

// One line describing a cuBLASLt algorithm (its configuration attributes) and its time: matmul_tune's
// SLLM_MATMUL_TUNE_VERBOSE=1 report.
static inline void matmul_algo_print(const cublasLtMatmulAlgo_t *algo, int index, float ms) {
    const cublasLtMatmulAlgoConfigAttributes_t attrs[] = {
        CUBLASLT_ALGO_CONFIG_ID, CUBLASLT_ALGO_CONFIG_TILE_ID, CUBLASLT_ALGO_CONFIG_STAGES_ID,
        CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING,
        CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID};
    const char *names[] = {"id", "tile", "stages", "cluster", "splitk", "swizzle", "inner"};
    printf("  candidate %2d: %.3f ms", index, ms);
    for (int i = 0; i < 7; i++) {
        size_t size = 0;  // the attribute's own size (cuBLASLt wants the buffer size to match)
        cublasStatus_t st = cublasLtMatmulAlgoConfigGetAttribute(algo, attrs[i], NULL, 0, &size);
        if (st != CUBLAS_STATUS_SUCCESS || size == 0 || size > 8) continue;
        unsigned char buf[8] = {0};
        if (cublasLtMatmulAlgoConfigGetAttribute(algo, attrs[i], buf, size, &size) != CUBLAS_STATUS_SUCCESS) continue;
        uint64_t v = 0;
        for (size_t b = 0; b < size; b++) v |= (uint64_t)buf[b] << (8 * b);  // little-endian
        printf(" %s %llu", names[i], (unsigned long long)v);
    }
    printf("\n");
}

// Opt-in autotuning of one batch-1 GEMM  out[M, N] = A[M, K] @ W^T (W [N, K]) with epilogue epi: times up to 16
// algorithms that cuBLASLt's heuristic offers (one warm-up, then the median of `reps` runs each, on the caller's
// buffers, which it overwrites) and caches the fastest, so later matmul / matmul_relu_mask calls of this shape use
// it. Returns the number of algorithms timed (0: none, nothing changed); *first_ms = the heuristic's first choice,
// *best_ms = the fastest. NOT called by default: the fastest algorithm can differ from run to run and two
// algorithms may round differently, so tuned runs are reproducible only within one process.
// SLLM_MATMUL_TUNE_VERBOSE=1 prints every candidate's configuration (tile, stages, cluster ids) and time.
static inline int matmul_tune(MatmulContext *ctx, bf16 *out, const bf16 *A, const bf16 *W, int M, int N, int K, int epi,
                              void *mask, int reps, cudaStream_t stream, float *first_ms, float *best_ms) {
    if (reps < 1) reps = 1;
    if (reps > 32) reps = 32;
    MatmulDescs md;
    matmul_descs_create(&md, M, N, K, 0, 1, 0, 1, 0, 0, 0, epi, mask);
    cublasLtMatmulHeuristicResult_t res[16];
    int found = 0;
    const cublasStatus_t st = matmul_heuristic(ctx, &md, 16, res, &found);
    int timed = 0, best = -1;
    float bms = 0.0f;
    const char *venv = getenv("SLLM_MATMUL_TUNE_VERBOSE");
    const int verbose = venv && venv[0] == '1';
    if (verbose) printf("matmul_tune M=%d N=%d K=%d epilogue %d: %d candidates\n", M, N, K, epi, found);
    if (st == CUBLAS_STATUS_SUCCESS && found > 0) {
        cudaEvent_t e0, e1;
        cudaCheck(cudaEventCreate(&e0));
        cudaCheck(cudaEventCreate(&e1));
        const float alpha = 1.0f, beta = 0.0f;
        for (int a = 0; a < found; a++) {
            float t[32];
            int ok = 1;
            for (int r = -1; r < reps && ok; r++) {
                cudaCheck(cudaEventRecord(e0, stream));
                cublasStatus_t s2 = cublasLtMatmul(ctx->handle, md.desc, &alpha, W, md.lb, A, md.la, &beta, out, md.lc,
                                                   out, md.lc, &res[a].algo, ctx->workspace, ctx->workspace_size, stream);
                if (s2 != CUBLAS_STATUS_SUCCESS) { ok = 0; break; }  // this algorithm does not run here: skip it
                cudaCheck(cudaEventRecord(e1, stream));
                cudaCheck(cudaEventSynchronize(e1));
                if (r >= 0) cudaCheck(cudaEventElapsedTime(&t[r], e0, e1));
            }
            if (!ok) continue;
            for (int i = 1; i < reps; i++)  // insertion sort for the median
                for (int j = i; j > 0 && t[j] < t[j - 1]; j--) { float x = t[j]; t[j] = t[j - 1]; t[j - 1] = x; }
            const float med = t[reps / 2];
            if (verbose) matmul_algo_print(&res[a].algo, a, med);
            if (timed == 0 && first_ms) *first_ms = med;
            if (best < 0 || med < bms) { best = a; bms = med; }
            timed++;
        }
        cudaCheck(cudaEventDestroy(e0));
        cudaCheck(cudaEventDestroy(e1));
    }
    matmul_descs_destroy(&md);
    if (best >= 0) {
        MatmulCacheEntry key;  // the key matmul / matmul_relu_mask use for this call (batch 1: strides 0)
        memset(&key, 0, sizeof(key));
        key.m = M; key.n = N; key.k = K; key.trans_b = 1; key.batch = 1; key.epi = epi;
        MatmulCacheEntry *hit = matmul_cache_find(ctx, &key);
        if (!hit) hit = matmul_cache_add(ctx, &key);
        hit->found = 1;
        hit->algo = res[best].algo;
        if (best_ms) *best_ms = bms;
    }
    return timed;
}

#endif  // SLLM_MATMUL_CUH
