// core/embedding.cuh: token embedding lookup and its deterministic backward.
//
//   tokens [N] int32 (N = B*T), E [V, D] bf16, out [N, D] bf16:  out[n, :] = E[tokens[n], :]
//   Backward: dE[v, :] += sum over positions n with tokens[n] == v of dout[n, :]   (dE fp32 [V, D])
//
// Deterministic backward without atomics (llm.c style): the host, which has the tokens anyway, groups
// positions by token into buckets (embedding_build_buckets); one block per distinct token then sums its
// positions in a fixed order. The bucket table is one int32 array:
//   [0]            number of distinct tokens U
//   [1 .. U]       the distinct token ids
//   [U+1 .. 2U+1]  bucket offsets into the position list (U+1 entries)
//   [2U+2 .. ]     positions, N entries, grouped by bucket, ascending inside a bucket
// Size: at most 3N + 2 ints. Requires D % 8 == 0.
#ifndef SLLM_EMBEDDING_CUH
#define SLLM_EMBEDDING_CUH

#include "kernel_utils.cuh"

static __global__ void embedding_forward_kernel(bf16 *out, const int *tokens, const bf16 *E, int N, int D) {
    size_t idx = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * 8;
    if (idx >= (size_t)N * D) return;
    int n = (int)(idx / D), c = (int)(idx % D);
    int tok = tokens[n];
    *reinterpret_cast<int4 *>(out + idx) = *reinterpret_cast<const int4 *>(E + (size_t)tok * D + c);
}
static inline void embedding_forward(bf16 *out, const int *tokens, const bf16 *E, int N, int D, cudaStream_t stream) {
    if (D % 8) SLLM_FATAL("embedding_forward: D=%d must be a multiple of 8", D);
    size_t n8 = (size_t)N * D / 8;
    embedding_forward_kernel<<<(unsigned)ceil_div_sz(n8, 256), 256, 0, stream>>>(out, tokens, E, N, D);
    cudaCheckLaunch();
}

// Host: build the bucket table for tokens[0..N) into `table` (capacity 3N + 2 ints). Returns the number
// of ints used. `pairs` must hold N uint64. Distinct tokens are listed in ascending id order and positions
// ascend inside each bucket: (token, position) pairs packed in 64 bits are sorted by an LSD radix sort on the
// token (11-bit digits, only as many passes as the largest id needs; stable, so positions stay ascending).
// O(N): ~50 us for N = 8192 (a qsort takes ~0.5 ms of host time per micro-step, with the GPU idle at a step start).
static inline int embedding_build_buckets(int *table, uint64_t *pairs, const int *tokens, int N) {
    uint32_t maxtok = 0;
    for (int n = 0; n < N; n++) {
        pairs[n] = ((uint64_t)(uint32_t)tokens[n] << 32) | (uint32_t)n;
        if ((uint32_t)tokens[n] > maxtok) maxtok = (uint32_t)tokens[n];
    }
    uint64_t *tmp = N > 0 ? (uint64_t *)sllm_malloc((size_t)N * sizeof(uint64_t)) : NULL;
    uint64_t *src = pairs, *dst = tmp;
    for (int shift = 0; shift < 32 && (shift == 0 || (maxtok >> shift) != 0); shift += 11) {
        int cnt[2048 + 1];
        memset(cnt, 0, sizeof cnt);
        for (int n = 0; n < N; n++) cnt[((src[n] >> (32 + shift)) & 2047) + 1]++;
        for (int d = 0; d < 2048; d++) cnt[d + 1] += cnt[d];
        for (int n = 0; n < N; n++) dst[cnt[(src[n] >> (32 + shift)) & 2047]++] = src[n];
        uint64_t *t = src; src = dst; dst = t;
    }
    // src holds the sorted pairs (pairs or tmp)
    int U = 0;
    for (int n = 0; n < N; n++)
        if (n == 0 || (src[n] >> 32) != (src[n - 1] >> 32)) U++;
    int *ids = table + 1, *offs = table + 1 + U, *pos = table + 2 + 2 * U;
    int u = -1;
    for (int n = 0; n < N; n++) {
        if (n == 0 || (src[n] >> 32) != (src[n - 1] >> 32)) { u++; ids[u] = (int)(src[n] >> 32); offs[u] = n; }
        pos[n] = (int)(src[n] & 0xffffffffu);
    }
    offs[U] = N;
    table[0] = U;
    free(tmp);
    return 2 + 2 * U + N;
}

// One block per distinct token; threads over D (8 channels each).
static __global__ void embedding_backward_kernel(float *dE, const bf16 *dout, const int *table, int D) {
    int U = table[0];
    int u = blockIdx.x;
    if (u >= U) return;
    const int *ids = table + 1, *offs = table + 1 + U, *pos = table + 2 + 2 * U;
    int tok = ids[u], p0 = offs[u], p1 = offs[u + 1];
    for (int c = threadIdx.x * 8; c < D; c += blockDim.x * 8) {
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        for (int p = p0; p < p1; p++) {
            float g[8];
            load8_bf16(dout + (size_t)pos[p] * D + c, g);
#pragma unroll
            for (int i = 0; i < 8; i++) acc[i] += g[i];
        }
        float *dst = dE + (size_t)tok * D + c;
#pragma unroll
        for (int i = 0; i < 8; i++) dst[i] += acc[i];
    }
}
// table_dev: the bucket table on the device; num_distinct: its U (known on the host).
static inline void embedding_backward(float *dE, const bf16 *dout, const int *table_dev, int num_distinct, int D,
                                      cudaStream_t stream) {
    if (D % 8) SLLM_FATAL("embedding_backward: D=%d must be a multiple of 8", D);
    if (num_distinct <= 0) return;
    int threads = D / 8 < 256 ? ((D / 8 + 31) / 32) * 32 : 256;
    embedding_backward_kernel<<<num_distinct, threads, 0, stream>>>(dE, dout, table_dev, D);
    cudaCheckLaunch();
}

#endif  // SLLM_EMBEDDING_CUH
