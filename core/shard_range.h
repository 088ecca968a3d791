// core/shard_range.h: the ZeRO-1 shard layout of a flat parameter buffer (host-only, C and CUDA).
//
// A flat buffer of `total` elements is cut into `world` contiguous ranges, one per rank, in rank order:
//   S = round_up(ceil(total / world), SHARD_ALIGN)
//   rank r owns [min(r*S, total), min((r+1)*S, total))
// Every element is owned by exactly one rank; a shard starts on a multiple of SHARD_ALIGN elements (8: the
// shard's fp32 and bf16 pointers stay 16-byte aligned, as adamw_update_multi and global_norm need), so only the last
// non-empty shard can end on an unaligned element (when total itself is unaligned). With awkward sizes the
// trailing ranks may own fewer elements or none (total 10, world 8: 8, 2, 0, 0, 0, 0, 0, 0).
// Contiguous ranges (not per-tensor slices as in llm.c) keep the shard independent of the tensor shapes: no
// tensor needs to be divisible by the world size, and re-sharding for another world size is a re-cut of one
// array (checkpoint shard files concatenate to the full optimizer state).
#ifndef SLLM_SHARD_RANGE_H
#define SLLM_SHARD_RANGE_H

#include <stddef.h>

#define SHARD_ALIGN 8

typedef struct {
    size_t offset;  // first element owned
    size_t count;   // elements owned (may be 0)
} ShardRange;

static inline size_t shard_stride(size_t total, int world) {
    if (world < 1) world = 1;
    size_t s = (total + (size_t)world - 1) / (size_t)world;
    return (s + SHARD_ALIGN - 1) / SHARD_ALIGN * SHARD_ALIGN;
}
static inline ShardRange shard_range(size_t total, int world, int rank) {
    size_t s = shard_stride(total, world);
    size_t a = (size_t)rank * s, b = a + s;
    if (a > total) a = total;
    if (b > total) b = total;
    ShardRange r = {a, b - a};
    return r;
}
// Rank that owns element i (i < total).
static inline int shard_owner(size_t total, int world, size_t i) {
    size_t s = shard_stride(total, world);
    return s ? (int)(i / s) : 0;
}

#endif  // SLLM_SHARD_RANGE_H
