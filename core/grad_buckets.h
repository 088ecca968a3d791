// core/grad_buckets.h: the buckets of the data-parallel gradient reduction, numbered in the order the backward
// completes them. The model (model/train_model.cuh) says when a bucket is final; core/zero1.cuh reduces it.
//
//   bucket 0               the embedding (and any other whole tensor but the final norm). The classifier's part of
//                          the tied embedding gradient is written by the forward, so on a reducing micro-step this
//                          bucket is reduced at the START of the backward, overlapped with every layer. The part of
//                          the last micro-step's token lookup is added after that reduction by
//                          grad_reducer_embed_lookup (every rank's [N, D] lookup gradient all-gathered, far fewer
//                          bytes than the [V, D] table).
//   bucket 1 + 2(L-1-l)    layer l's FFN: Wg, Wu, Wd and the FFN norm (layer L-1's also holds the final norm),
//                          final after the FFN norm backward of layer l
//   bucket 2 + 2(L-1-l)    layer l's attention: Wq, Wk, Wv, Wo and the attention norm, final after layer l
// Two buckets per layer keep the reduction that cannot overlap (the last one, of layer 0's attention) small.
#ifndef SLLM_GRAD_BUCKETS_H
#define SLLM_GRAD_BUCKETS_H

#include "config.h"

static inline int grad_bucket_count(int n_layer) { return 1 + 2 * n_layer; }
static inline int grad_bucket_embed(void) { return 0; }
static inline int grad_bucket_ffn(int n_layer, int l) { return 1 + 2 * (n_layer - 1 - l); }
static inline int grad_bucket_attn(int n_layer, int l) { return 2 + 2 * (n_layer - 1 - l); }
// The per-layer parameter kinds of the FFN bucket (the others of a layer go to the attention bucket).
static inline int grad_bucket_kind_is_ffn(int kind) {
    return kind == PARAM_FFN_NORM || kind == PARAM_WG || kind == PARAM_WU || kind == PARAM_WD;
}

#endif  // SLLM_GRAD_BUCKETS_H
