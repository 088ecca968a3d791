// core/attention_sched.h: the order in which the Hopper attention kernels (core/attention_wgmma.cuh) take their
// work, as plain index arithmetic shared by the kernels and the CPU tests (test/test_attention_sched.c), which check
// that every tile or block is taken exactly once and the heaviest first. Header-only C, usable from C and CUDA.
//
// Forward: a persistent grid of G CTAs over tiles = nmb query blocks x H heads x B batches. Tile index i: query
// block mb = nmb - 1 - i / (H B) (the latest rows, with the most key blocks, first), then the head, then the batch.
// CTA x takes the tiles of rounds n = 0, 1, ... of G tiles each, in alternating directions (x, then G - 1 - x), so
// that the CTA with the heaviest tile of one round takes the lightest of the next.
//
// Backward: a grid (nx blocks per head, ny, nz) of one-block-per-work launches. Linear block L (x fastest) maps to
// chunks of hc (y, z) pairs; within a chunk by rank (0 = a head's heaviest block) and then pair. The hardware starts
// blocks in linear order, so the heaviest blocks start first and the grid ends on light ones, while the blocks
// running at once keep to ~hc heads (their operands stay in L2).
#ifndef SLLM_ATTENTION_SCHED_H
#define SLLM_ATTENTION_SCHED_H

#ifdef __CUDACC__
#define ATTN_SCHED_FN static inline __host__ __device__
#else
#define ATTN_SCHED_FN static inline
#endif

// The tile index of CTA x's n-th tile (G CTAs). Increasing in n for a fixed x, so a CTA stops at its first index
// >= the tile count.
ATTN_SCHED_FN int attn_fwd_tile_index(int n, int x, int G) { return n * G + ((n & 1) ? G - 1 - x : x); }

// Tile i -> query block mb, head h, batch b (nmb query blocks, H heads, B batches).
ATTN_SCHED_FN void attn_fwd_tile(int i, int nmb, int H, int B, int *mb, int *h, int *b) {
    const int hb = H * B, r = i % hb;
    *mb = nmb - 1 - i / hb;
    *h = r % H;
    *b = r / H;
}

// Block (x, y0, z0) of a grid (nx, ny, nz), linear index L = x + nx (y0 + ny z0) (x fastest) -> rank (0 .. nx - 1;
// 0 = the heaviest block of a head), y, z; hc pairs (y, z) per chunk (the last chunk may hold fewer).
ATTN_SCHED_FN void attn_bwd_block(int x, int y0, int z0, int nx, int ny, int nz, int hc, int *rank, int *y, int *z) {
    const int pairs = ny * nz;
    const int L = x + nx * (y0 + ny * z0);
    const int chunk = L / (nx * hc), r = L - chunk * nx * hc;
    const int left = pairs - chunk * hc, n = left < hc ? left : hc;  // pairs in this chunk
    const int p = chunk * hc + r % n;
    *rank = r / n;
    *y = p % ny;
    *z = p / ny;
}

#endif  // SLLM_ATTENTION_SCHED_H
