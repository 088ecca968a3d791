// core/zero1.cuh: data-parallel gradient reduction overlapped with the backward, and the ZeRO-1 AdamW step.
//
// Layout (core/shard_range.h): the flat fp32 gradient buffer and the flat bf16 parameter buffer ([total], in
// core/config.h order) are cut into `world` contiguous ranges; rank r owns range r. Each rank keeps fp32 master
// weights and AdamW m, v ONLY for its range: 12 B/param / world (Zero1.opt), instead of 12 B/param; 8 B/param / world
// with the moments in bf16 (ZERO1_MOMENTS_BF16: stochastic rounding, core/adamw.cuh). ZERO1_NO_MASTER keeps no
// master weights: AdamW updates the own range of the bf16 parameters in place with stochastic rounding (4 B/param
// / world less; 4 B/param in all with bf16 moments).
//
// Gradient reduction (GradReducer): the backward registers buckets, each a list of (offset, count) pieces of the
// flat buffer (per-layer gradients are not contiguous: tensors of one kind are stacked over layers); the model's
// buckets are those of core/grad_buckets.h, its embedding lookup part through grad_reducer_embed_lookup. On the last
// micro-step of an optimizer step the trainer calls grad_reducer_ready(bucket) right after enqueuing the backward
// work that finishes that bucket: an event on the compute stream, the comm stream waits on it and reduces the
// bucket's pieces (one NCCL group) while the compute stream goes on with the next layer. grad_reducer_finish
// makes the compute stream wait for all reductions. Two modes, same downstream code:
//   GRAD_REDUCE_TO_OWNER          (the trainer's default) each piece cut at shard boundaries, each part
//                                 ncclReduce-d to the rank owning it (grouped): the reduce-scatter's traffic for
//                                 pieces that do not line up with the shards; only the own range is valid after.
//   GRAD_ALLREDUCE                ncclAllReduce of every piece: every rank ends with the full summed gradient
//                                 (for debugging); 2x the bytes, and the NCCL kernels running beside the backward
//                                 take that much more of the GPU from it.
// The ZeRO-1 step reads only the own range, so both modes give the same result.
// Gradients are summed, not averaged: the trainer's loss scale is 1/(tokens of the GLOBAL step), so the sum is
// the gradient of the mean over all ranks' tokens. Gradient accumulation: grad_reducer_begin(r, reduce = last
// micro-step); on the other micro-steps ready/finish do nothing.
//
// ZeRO-1 step (Zero1): zero1_grad_norm = the norm of the full reduced gradient (each rank's fixed-grid partial
// sums of its range, summed across ranks, then the same final kernel as core/global_norm.cuh: with world 1 the
// very same bits as global_norm); zero1_step = AdamW (core/adamw.cuh, the same kernel and per-tensor weight decay)
// on the own range, then the bf16 weights gathered back in place: ncclAllGather into the flat parameter buffer
// when it has room for world * stride elements (zero1_params_capacity; pad the allocation), else one grouped
// ncclBroadcast per rank of exactly its range (no padding needed).
//
// Checkpoints: zero1_write_shard writes "opt_rank%05d.bin" (header, master, m, v of the own range, fp32 whatever the
// moments' type: bf16 moments widen exactly and narrow back exactly, so files resume in either mode; without master
// weights the bf16 weights widened, and on reading the master part is skipped: the weights come from the
// checkpoint's model.safetensors, which holds the same values) into the
// checkpoint's temp dir; zero1_read_shards reads the overlap of the own range with every saved shard, so resuming
// on another world size re-shards (the shard files concatenate to the full state). Protocol for the trainer:
//   rank 0: ckpt_begin -> dist_broadcast_bytes(temp dir) -> every rank zero1_write_shard (fsync'ed) ->
//   ok = dist_all_ok(wrote, long timeout) -> rank 0: ok ? ckpt_commit : ckpt_abort -> dist_barrier.
// A checkpoint is complete only when every rank wrote its shard and rank 0 renamed the temp dir.
#ifndef SLLM_ZERO1_CUH
#define SLLM_ZERO1_CUH

#include <cuda.h>
#include <errno.h>
#include <stdint.h>

#include "adamw.cuh"
#include "config.h"
#include "dist.cuh"
#include "embedding.cuh"
#include "global_norm.cuh"
#include "grad_buckets.h"
#include "shard_range.h"

// ---- bucketed gradient reduction ------------------------------------------------------------------------------
typedef enum { GRAD_ALLREDUCE = 0, GRAD_REDUCE_TO_OWNER = 1 } GradReduceMode;

typedef struct {
    size_t offset, count;
} GradPiece;

#define GRAD_MAX_BUCKETS 1024

typedef struct {
    Dist *d;
    float *grads;
    size_t total;
    GradReduceMode mode;
    int nb;                               // buckets
    int first[GRAD_MAX_BUCKETS + 1];      // bucket b = pieces [first[b], first[b+1])
    GradPiece *pieces;
    int np, cap;
    unsigned char done[GRAD_MAX_BUCKETS];
    int active;                           // reducing this backward (last micro-step)
    bf16 *emb_dout;                       // grad_reducer_embed_lookup: world x [N, D], then world x [3N+2] ints
    int *emb_table;
    int emb_N, emb_D;
    unsigned long long reductions;        // buckets reduced since init (statistics)
} GradReducer;

static void grad_reducer_init(GradReducer *r, Dist *d, float *grads, size_t total, GradReduceMode mode) {
    memset(r, 0, sizeof *r);
    r->d = d; r->grads = grads; r->total = total; r->mode = mode;
}
static void grad_reducer_free(GradReducer *r) {
    free(r->pieces);
    if (r->emb_dout) cudaFree(r->emb_dout);
    memset(r, 0, sizeof *r);
}

// Registers a bucket of n pieces; returns its id (0, 1, ... in registration order).
static int grad_reducer_add_bucket(GradReducer *r, const GradPiece *p, int n) {
    DIST_CHECK(r->d, r->nb < GRAD_MAX_BUCKETS, "grad_reducer: more than %d buckets", GRAD_MAX_BUCKETS);
    for (int i = 0; i < n; i++) {
        DIST_CHECK(r->d, p[i].offset <= r->total && p[i].count <= r->total - p[i].offset,
                   "grad_reducer: bucket %d piece %d [%zu, +%zu) outside the buffer of %zu", r->nb, i, p[i].offset,
                   p[i].count, r->total);
        if (p[i].count == 0) continue;
        if (r->np == r->cap) {
            r->cap = r->cap ? 2 * r->cap : 64;
            r->pieces = (GradPiece *)realloc(r->pieces, (size_t)r->cap * sizeof(GradPiece));
            DIST_CHECK(r->d, r->pieces, "grad_reducer: out of host memory");
        }
        GradPiece *last = r->np > r->first[r->nb] ? &r->pieces[r->np - 1] : NULL;
        if (last && last->offset + last->count == p[i].offset) last->count += p[i].count;  // merge contiguous
        else r->pieces[r->np++] = p[i];
    }
    r->first[++r->nb] = r->np;
    return r->nb - 1;
}

static int grad_piece_cmp(const void *a, const void *b) {
    size_t x = ((const GradPiece *)a)->offset, y = ((const GradPiece *)b)->offset;
    return x < y ? -1 : x > y;
}
// Every element of the buffer must be in exactly one bucket: a gap would leave a gradient unreduced (ranks
// silently diverge), an overlap would sum it twice. Dies with the first offending element.
static void grad_reducer_validate(GradReducer *r) {
    GradPiece *s = (GradPiece *)malloc((size_t)(r->np ? r->np : 1) * sizeof(GradPiece));
    DIST_CHECK(r->d, s, "grad_reducer: out of host memory");
    memcpy(s, r->pieces, (size_t)r->np * sizeof(GradPiece));
    qsort(s, (size_t)r->np, sizeof(GradPiece), grad_piece_cmp);
    size_t at = 0;
    for (int i = 0; i < r->np; i++) {
        DIST_CHECK(r->d, s[i].offset == at, "grad_reducer: buckets %s element %zu (pieces must tile [0, %zu) exactly)",
                   s[i].offset > at ? "miss" : "repeat", s[i].offset > at ? at : s[i].offset, r->total);
        at += s[i].count;
    }
    DIST_CHECK(r->d, at == r->total, "grad_reducer: buckets cover [0, %zu) of a buffer of %zu", at, r->total);
    free(s);
}

// The model's buckets (core/grad_buckets.h): bucket 0 the embedding and other whole tensors, then per layer l from
// L-1 down to 0 its FFN bucket and its attention bucket.
static void grad_reducer_add_layer_buckets(GradReducer *r, const ParamLayout *lay, int n_layer) {
    GradPiece p[NUM_PARAM_KINDS + 1];
    int n = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        const ParamTensor *t = &lay->t[k];
        if (!t->numel || t->per_layer || k == PARAM_FINAL_NORM) continue;
        p[n].offset = t->offset;
        p[n++].count = t->numel;
    }
    DIST_CHECK(r->d, grad_reducer_add_bucket(r, p, n) == grad_bucket_embed(), "grad_reducer: bucket order");
    for (int l = n_layer - 1; l >= 0; l--) {
        for (int ffn = 1; ffn >= 0; ffn--) {
            n = 0;
            for (int k = 0; k < NUM_PARAM_KINDS; k++) {
                const ParamTensor *t = &lay->t[k];
                if (!t->numel || !t->per_layer || grad_bucket_kind_is_ffn(k) != ffn) continue;
                p[n].offset = t->offset + (size_t)l * t->rows * t->cols;
                p[n++].count = t->rows * t->cols;
            }
            if (ffn && l == n_layer - 1 && lay->t[PARAM_FINAL_NORM].numel)
                p[n].offset = lay->t[PARAM_FINAL_NORM].offset, p[n++].count = lay->t[PARAM_FINAL_NORM].numel;
            const int want = ffn ? grad_bucket_ffn(n_layer, l) : grad_bucket_attn(n_layer, l);
            DIST_CHECK(r->d, grad_reducer_add_bucket(r, p, n) == want, "grad_reducer: bucket order");
        }
    }
    DIST_CHECK(r->d, r->nb == grad_bucket_count(n_layer), "grad_reducer: %d buckets, expected %d", r->nb,
               grad_bucket_count(n_layer));
    grad_reducer_validate(r);
}

// The token lookup's part of the embedding gradient on a reducing micro-step (core/grad_buckets.h, bucket 0):
// instead of reducing the [V, D] table a second time, every rank's lookup gradient dout [N, D] bf16 and its
// bucket table (core/embedding.cuh, 3N+2 ints) are all-gathered, and each rank adds all of them into its dE with
// the embedding's own backward kernel, rank 0's first: the same sums in the same order on every rank. Buffers:
// world * (2ND + 4(3N+2)) bytes, allocated here (grad_reducer_embed_bytes to report them).
static size_t grad_reducer_embed_bytes(int world, int N, int D) {
    return world > 1 ? (size_t)world * ((size_t)N * D * 2 + (3 * (size_t)N + 2) * 4) : 0;
}
static void grad_reducer_init_embed(GradReducer *r, int N, int D) {
    r->emb_N = N;
    r->emb_D = D;
    const size_t bytes = grad_reducer_embed_bytes(r->d->world, N, D);
    if (!bytes) return;
    distCuda(r->d, cudaMalloc((void **)&r->emb_dout, bytes));
    r->emb_table = (int *)(r->emb_dout + (size_t)r->d->world * N * D);
}
// Returns 1 when it added the lookup gradient (a reducing micro-step with world > 1), 0 when the caller adds it
// locally (embedding_backward; it is then reduced with bucket 0 on the reducing micro-step).
static int grad_reducer_embed_lookup(GradReducer *r, float *dE, const bf16 *dout, const int *table, int N, int D,
                                     cudaStream_t compute) {
    Dist *d = r->d;
    if (!r->active || d->world == 1) return 0;
    DIST_CHECK(d, r->emb_dout && N == r->emb_N && D == r->emb_D, "grad_reducer_embed_lookup: N %d D %d, buffers for "
               "N %d D %d (grad_reducer_init_embed)", N, D, r->emb_N, r->emb_D);
    DIST_CHECK(d, r->done[grad_bucket_embed()], "grad_reducer_embed_lookup before bucket 0 was reduced: the lookup "
               "gradient would be summed twice");
#ifdef SLLM_HAVE_NCCL
    const size_t tab = 3 * (size_t)N + 2;
    dist_comm_wait(d, compute);
    distNccl(d, ncclGroupStart());
    distNccl(d, ncclAllGather(dout, r->emb_dout, (size_t)N * D, ncclBfloat16, d->comm, d->comm_stream));
    distNccl(d, ncclAllGather(table, r->emb_table, tab, ncclInt32, d->comm, d->comm_stream));
    distNccl(d, ncclGroupEnd());
    dist_track(d, "embedding lookup gradients", 0);
    dist_comm_join(d, compute);  // also after bucket 0's reduction, which reads and writes dE
    for (int q = 0; q < d->world; q++)  // N blocks: an upper bound of each rank's distinct tokens
        embedding_backward(dE, r->emb_dout + (size_t)q * N * D, r->emb_table + (size_t)q * tab, N, D, compute);
    return 1;
#else
    (void)dE; (void)dout; (void)table; (void)compute;
    dist_die(d, "grad_reducer_embed_lookup: world %d without NCCL", d->world);
#endif
}

// Start of a backward: reduce = 1 on the last micro-step of the optimizer step.
static void grad_reducer_begin(GradReducer *r, int reduce) {
    r->active = reduce;
    memset(r->done, 0, sizeof r->done);
}

// The backward work that finishes bucket b has been enqueued on `compute`: reduce it on the comm stream once that
// work is done (no host wait).
static void grad_reducer_ready(GradReducer *r, int b, cudaStream_t compute) {
    Dist *d = r->d;
    DIST_CHECK(d, b >= 0 && b < r->nb, "grad_reducer_ready: bucket %d of %d", b, r->nb);
    if (!r->active) return;
    DIST_CHECK(d, !r->done[b], "grad_reducer_ready: bucket %d reduced twice in one step", b);
    r->done[b] = 1;
    r->reductions++;
    if (d->world == 1) return;
#ifdef SLLM_HAVE_NCCL
    dist_comm_wait(d, compute);
    const size_t S = shard_stride(r->total, d->world);
    distNccl(d, ncclGroupStart());
    for (int i = r->first[b]; i < r->first[b + 1]; i++) {
        float *g = r->grads + r->pieces[i].offset;
        const size_t a0 = r->pieces[i].offset, a1 = a0 + r->pieces[i].count;
        if (r->mode == GRAD_ALLREDUCE) {
            distNccl(d, ncclAllReduce(g, g, a1 - a0, ncclFloat, ncclSum, d->comm, d->comm_stream));
            continue;
        }
        for (size_t a = a0; a < a1;) {  // cut at shard boundaries: each part to its owner
            int owner = (int)(a / S);
            size_t e = (size_t)(owner + 1) * S < a1 ? (size_t)(owner + 1) * S : a1;
            distNccl(d, ncclReduce(r->grads + a, r->grads + a, e - a, ncclFloat, ncclSum, owner, d->comm,
                                   d->comm_stream));
            a = e;
        }
    }
    distNccl(d, ncclGroupEnd());
    char what[48];
    snprintf(what, sizeof what, "gradient bucket %d", b);
    dist_track(d, what, 0);
#endif
}

// After the backward: every bucket must have been reduced exactly once; the compute stream waits for the
// reductions (the gradient norm and the update read them).
static void grad_reducer_finish(GradReducer *r, cudaStream_t compute) {
    if (!r->active) return;
    for (int b = 0; b < r->nb; b++)
        DIST_CHECK(r->d, r->done[b], "grad_reducer_finish: bucket %d of %d was never reduced this step (missing "
                                     "grad_reducer_ready call in the backward)", b, r->nb);
    if (r->d->world > 1) dist_comm_join(r->d, compute);
    r->active = 0;
}

// ---- ZeRO-1 optimizer -----------------------------------------------------------------------------------------
#define ZERO1_SHARD_MAGIC 0x315a4c53u  // "SLZ1"

typedef struct {
    uint32_t magic, version;
    int32_t world, rank;
    uint64_t total, offset, count;
} Zero1ShardHeader;

typedef struct {
    Dist *d;
    size_t total, stride;   // elements; stride = shard_stride(total, world)
    ShardRange shard;       // the own range
    int moments_bf16;       // AdamW m, v in bf16 (else fp32)
    int no_master;          // no fp32 master weights: `params` (the full bf16 buffer) is updated in place
    float *opt;             // one cudaMalloc: master fp32 [shard.count] (absent with no_master) | m | v (fp32
                            // [3 * count] without padding; bf16 moments each start on a 256-byte boundary)
    float *master, *m, *v;  // master NULL with no_master; fp32 moments; with moments_bf16 m, v are NULL and mb, vb
    bf16 *mb, *vb;          // point into opt
    bf16 *params;           // the flat bf16 parameter buffer [total] (no_master: what the checkpoints read)
    size_t opt_bytes;
    int nseg;               // tensors of the full buffer: [seg_end[s-1], seg_end[s]) decays iff seg_wd[s]
    size_t seg_end[ADAMW_MAX_SEGMENTS];
    int seg_wd[ADAMW_MAX_SEGMENTS];
    float *norm_partial;    // [GLOBAL_NORM_BLOCKS]
} Zero1;

// Options of zero1_init (bits).
#define ZERO1_MOMENTS_BF16 1  // AdamW m, v in bf16
#define ZERO1_NO_MASTER 2     // no fp32 master weights (zero1_init's params required)

// Segments: ascending ends of the tensors of the full buffer (the last = total) and their weight-decay flags.
// opts: ZERO1_* bits; params: the flat bf16 parameter buffer [total] (required with ZERO1_NO_MASTER).
static void zero1_init(Zero1 *z, Dist *d, size_t total, const size_t *seg_end, const int *seg_wd, int nseg,
                       int opts = 0, bf16 *params = NULL) {
    memset(z, 0, sizeof *z);
    DIST_CHECK(d, (opts & ~(ZERO1_MOMENTS_BF16 | ZERO1_NO_MASTER)) == 0, "zero1_init: unknown options %#x", opts);
    DIST_CHECK(d, !(opts & ZERO1_NO_MASTER) || params, "zero1_init: no master weights needs the parameter buffer");
    z->moments_bf16 = (opts & ZERO1_MOMENTS_BF16) != 0;
    z->no_master = (opts & ZERO1_NO_MASTER) != 0;
    z->params = params;
    z->d = d;
    z->total = total;
    z->stride = shard_stride(total, d->world);
    z->shard = shard_range(total, d->world, d->rank);
    DIST_CHECK(d, nseg >= 1 && nseg <= ADAMW_MAX_SEGMENTS, "zero1_init: %d segments (1..%d)", nseg, ADAMW_MAX_SEGMENTS);
    DIST_CHECK(d, seg_end[nseg - 1] == total, "zero1_init: segments end at %zu, buffer has %zu", seg_end[nseg - 1], total);
    for (int s = 0; s < nseg; s++) {
        DIST_CHECK(d, s == 0 || seg_end[s] >= seg_end[s - 1], "zero1_init: segment ends must ascend");
        z->seg_end[s] = seg_end[s];
        z->seg_wd[s] = seg_wd[s];
    }
    z->nseg = nseg;
    const size_t c = z->shard.count;
    const size_t mom_bytes = z->moments_bf16 ? (c * sizeof(bf16) + 255) & ~(size_t)255 : c * sizeof(float);
    const size_t m_at = z->no_master ? 0 : z->moments_bf16 ? (c * sizeof(float) + 255) & ~(size_t)255 : c * sizeof(float);
    z->opt_bytes = m_at + 2 * mom_bytes;
    distCuda(d, cudaMalloc((void **)&z->opt, z->opt_bytes ? z->opt_bytes : 16));
    distCuda(d, cudaMemset(z->opt, 0, z->opt_bytes ? z->opt_bytes : 16));
    unsigned char *base = (unsigned char *)z->opt;
    z->master = z->no_master ? NULL : z->opt;
    if (z->moments_bf16) {
        z->mb = (bf16 *)(base + m_at);
        z->vb = (bf16 *)(base + m_at + mom_bytes);
    } else {
        z->m = (float *)(base + m_at);
        z->v = (float *)(base + m_at + mom_bytes);
    }
    distCuda(d, cudaMalloc((void **)&z->norm_partial, GLOBAL_NORM_BLOCKS * sizeof(float)));
}

// From the model's parameter table: one segment per tensor, decay where ParamTensor.weight_decay (as model_adamw).
static void zero1_init_layout(Zero1 *z, Dist *d, const ParamLayout *lay, int opts = 0, bf16 *params = NULL) {
    size_t end[ADAMW_MAX_SEGMENTS];
    int wd[ADAMW_MAX_SEGMENTS], n = 0;
    size_t at = 0;
    for (int k = 0; k < NUM_PARAM_KINDS; k++) {
        const ParamTensor *t = &lay->t[k];
        if (!t->numel) continue;
        DIST_CHECK(d, t->offset == at, "zero1_init_layout: tensor %s at %zu, expected %zu", t->name, t->offset, at);
        at += t->numel;
        end[n] = at;
        wd[n++] = t->weight_decay;
    }
    zero1_init(z, d, lay->total, end, wd, n, opts, params);
}

static void zero1_free(Zero1 *z) {
    if (z->opt) cudaFree(z->opt);
    if (z->norm_partial) cudaFree(z->norm_partial);
    memset(z, 0, sizeof *z);
}

// m and v of the own range set to 0.
static void zero1_zero_moments(Zero1 *z) {
    const size_t c = z->shard.count;
    if (!c) return;
    if (z->moments_bf16) {
        distCuda(z->d, cudaMemset(z->mb, 0, c * sizeof(bf16)));
        distCuda(z->d, cudaMemset(z->vb, 0, c * sizeof(bf16)));
    } else {
        distCuda(z->d, cudaMemset(z->m, 0, 2 * c * sizeof(float)));
    }
}

// The own range's state as fp32 host arrays h [3 * count] = master | m | v (bf16 moments widened exactly; without
// master weights, the bf16 weights of the range widened), and back (bf16 moments narrowed to the nearest: exact for
// values that came from bf16; without master weights the master part is not read, see the file comment).
// cudaError_t of the copies.
static cudaError_t zero1_bf16_to_host(float *h, const bf16 *dev, size_t n) {
    uint16_t *t = (uint16_t *)malloc(n * sizeof(uint16_t));
    if (!t) return cudaErrorMemoryAllocation;
    cudaError_t e = cudaMemcpy(t, dev, n * sizeof(uint16_t), cudaMemcpyDeviceToHost);
    for (size_t i = 0; e == cudaSuccess && i < n; i++) h[i] = adamw_bf16_bits_to_float(t[i]);
    free(t);
    return e;
}
static cudaError_t zero1_bf16_from_host(bf16 *dev, const float *h, size_t n) {
    bf16 *t = (bf16 *)malloc(n * sizeof(bf16));
    if (!t) return cudaErrorMemoryAllocation;
    for (size_t i = 0; i < n; i++) t[i] = __float2bfloat16_rn(h[i]);
    cudaError_t e = cudaMemcpy(dev, t, n * sizeof(bf16), cudaMemcpyHostToDevice);
    free(t);
    return e;
}
static cudaError_t zero1_state_to_host(const Zero1 *z, float *h) {
    const size_t c = z->shard.count;
    if (!c) return cudaSuccess;
    cudaError_t e = z->no_master ? zero1_bf16_to_host(h, z->params + z->shard.offset, c)
                                 : cudaMemcpy(h, z->master, c * sizeof(float), cudaMemcpyDeviceToHost);
    if (e == cudaSuccess && z->moments_bf16) e = zero1_bf16_to_host(h + c, z->mb, c);
    if (e == cudaSuccess && z->moments_bf16) e = zero1_bf16_to_host(h + 2 * c, z->vb, c);
    if (e == cudaSuccess && !z->moments_bf16) e = cudaMemcpy(h + c, z->m, 2 * c * sizeof(float), cudaMemcpyDeviceToHost);
    return e;
}
static cudaError_t zero1_state_from_host(Zero1 *z, const float *h) {
    const size_t c = z->shard.count;
    if (!c) return cudaSuccess;
    cudaError_t e = z->no_master ? cudaSuccess : cudaMemcpy(z->master, h, c * sizeof(float), cudaMemcpyHostToDevice);
    if (e == cudaSuccess && z->moments_bf16) e = zero1_bf16_from_host(z->mb, h + c, c);
    if (e == cudaSuccess && z->moments_bf16) e = zero1_bf16_from_host(z->vb, h + 2 * c, c);
    if (e == cudaSuccess && !z->moments_bf16) e = cudaMemcpy(z->m, h + c, 2 * c * sizeof(float), cudaMemcpyHostToDevice);
    return e;
}

// Master weights of the own range from a full fp32 buffer [total] (host or device); m and v are zeroed. (Without
// master weights only the moments: the bf16 weights are the caller's.)
static void zero1_set_master(Zero1 *z, const float *full, int full_on_device) {
    const size_t c = z->shard.count;
    if (!c) return;
    if (!z->no_master)
        distCuda(z->d, cudaMemcpy(z->master, full + z->shard.offset, c * sizeof(float),
                                  full_on_device ? cudaMemcpyDeviceToDevice : cudaMemcpyHostToDevice));
    zero1_zero_moments(z);
}

// Elements the flat bf16 parameter buffer can hold from `params` to the end of its allocation (0 when unknown).
// cuMemGetAddressRange comes through the runtime's driver entry point, so no binary links libcuda directly and the
// test binaries still start (and count their tests) on a machine without a driver.
static size_t zero1_params_capacity(const bf16 *params) {
    typedef CUresult (*AddrRangeFn)(CUdeviceptr *, size_t *, CUdeviceptr);
    static AddrRangeFn fn = NULL;
    if (!fn) {
        void *p = NULL;
        cudaDriverEntryPointQueryResult qr = cudaDriverEntryPointSymbolNotFound;
        if (cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &p, 12000, cudaEnableDefault, &qr) != cudaSuccess ||
            qr != cudaDriverEntryPointSuccess || !p)
            return 0;
        fn = (AddrRangeFn)p;
    }
    CUdeviceptr base = 0;
    size_t size = 0;
    if (fn(&base, &size, (CUdeviceptr)params) != CUDA_SUCCESS) return 0;
    return (size_t)(base + size - (CUdeviceptr)params) / sizeof(bf16);
}
// Allocation size (elements) of a parameter buffer that lets zero1_step gather with one ncclAllGather.
static inline size_t zero1_padded_total(size_t total, int world) { return shard_stride(total, world) * (size_t)world; }

// norm_out[0] (device) = L2 norm of the full reduced gradient (every rank gets the same value).
static void zero1_grad_norm(Zero1 *z, const float *grads, float *norm_out, cudaStream_t s) {
    global_norm_partial_kernel<<<GLOBAL_NORM_BLOCKS, 256, 0, s>>>(z->norm_partial, grads + z->shard.offset,
                                                                  z->shard.count);
    cudaCheckLaunch();
    dist_allreduce_sum_f32(z->d, z->norm_partial, GLOBAL_NORM_BLOCKS, s);
    global_norm_final_kernel<<<1, 1024, 0, s>>>(norm_out, z->norm_partial, GLOBAL_NORM_BLOCKS);
    cudaCheckLaunch();
}

// bf16 parameters of every rank's range to every rank, in place (after the shard update).
static void zero1_gather_params(Zero1 *z, bf16 *params, cudaStream_t s) {
    Dist *d = z->d;
    if (d->world == 1) return;
#ifdef SLLM_HAVE_NCCL
    dist_comm_wait(d, s);
    if (zero1_params_capacity(params) >= zero1_padded_total(z->total, d->world)) {
        distNccl(d, ncclAllGather(params + (size_t)d->rank * z->stride, params, z->stride, ncclBfloat16, d->comm,
                                  d->comm_stream));
    } else {
        distNccl(d, ncclGroupStart());
        for (int r = 0; r < d->world; r++) {
            ShardRange sr = shard_range(z->total, d->world, r);
            if (sr.count)
                distNccl(d, ncclBroadcast(params + sr.offset, params + sr.offset, sr.count, ncclBfloat16, r, d->comm,
                                          d->comm_stream));
        }
        distNccl(d, ncclGroupEnd());
    }
    dist_track(d, "parameter all-gather", 0);
    dist_comm_join(d, s);
#endif
}

// AdamW on the own range (core/adamw.cuh, clipping by norm_dev as adamw_update_multi), then the bf16 gather.
// params: the flat bf16 buffer [total] (written: own range by the update, the rest by the gather); grads: the
// reduced fp32 gradients (own range read).
static void zero1_step(Zero1 *z, bf16 *params, const float *grads, const AdamWParams *hp, const float *norm_dev,
                       cudaStream_t s) {
    const size_t off = z->shard.offset, c = z->shard.count;
    DIST_CHECK(z->d, !z->no_master || params == z->params, "zero1_step: not the parameter buffer given to zero1_init");
    if (c) {
        AdamWSegments seg;
        memset(&seg, 0, sizeof seg);
        int aligned = 1;
        size_t start = 0;  // full-buffer start of segment i
        for (int i = 0; i < z->nseg; start = z->seg_end[i], i++) {
            size_t a = start > off ? start : off, b = z->seg_end[i] < off + c ? z->seg_end[i] : off + c;
            if (b <= a) continue;
            seg.end[seg.count] = b - off;
            seg.wd[seg.count] = z->seg_wd[i] ? hp->weight_decay : 0.0f;
            aligned &= (b - off) % 4 == 0;
            seg.count++;
        }
        if (aligned && z->moments_bf16) {
            adamw_update_multi(params + off, z->master, z->mb, z->vb, grads + off, &seg, hp, norm_dev, s, off);
        } else if (aligned) {
            adamw_update_multi(params + off, z->master, z->m, z->v, grads + off, &seg, hp, norm_dev, s, off);
        } else {  // a shard ending on an unaligned total: per-segment launches (same element math, same bits)
            size_t a = 0;
            for (int i = 0; i < seg.count; a = seg.end[i], i++) {
                float *ma = z->master ? z->master + a : NULL;
                if (z->moments_bf16)
                    adamw_update(params + off + a, ma, z->mb + a, z->vb + a, grads + off + a, seg.end[i] - a, hp,
                                 seg.wd[i], norm_dev, s, off + a);
                else
                    adamw_update(params + off + a, ma, z->m + a, z->v + a, grads + off + a, seg.end[i] - a, hp,
                                 seg.wd[i], norm_dev, s, off + a);
            }
        }
    }
    zero1_gather_params(z, params, s);
}

// Full fp32 master weights into full_dev [total] on every rank (e.g. into the gradient buffer, which is free after
// the step), for a checkpoint's model.safetensors.
// Without master weights: the bf16 weights (whole on every rank after zero1_step) widened, no communication.
static void zero1_gather_master(Zero1 *z, float *full_dev, cudaStream_t s) {
    Dist *d = z->d;
    if (z->no_master) {
        bf16_to_f32(full_dev, z->params, z->total, s);
        return;
    }
    if (d->world == 1) {
        if (z->shard.count)
            distCuda(d, cudaMemcpyAsync(full_dev, z->master, z->shard.count * 4, cudaMemcpyDeviceToDevice, s));
        return;
    }
#ifdef SLLM_HAVE_NCCL
    dist_comm_wait(d, s);
    distNccl(d, ncclGroupStart());
    for (int r = 0; r < d->world; r++) {
        ShardRange sr = shard_range(z->total, d->world, r);
        if (!sr.count) continue;
        float *dst = full_dev + sr.offset;
        distNccl(d, ncclBroadcast(r == d->rank ? z->master : dst, dst, sr.count, ncclFloat, r, d->comm, d->comm_stream));
    }
    distNccl(d, ncclGroupEnd());
    dist_track(d, "master all-gather", 0);
    dist_comm_join(d, s);
#endif
}

// ---- sharded optimizer state files ------------------------------------------------------------------------------
static void zero1_shard_path(char *out, size_t n, const char *dir, int rank) {
    snprintf(out, n, "%s/opt_rank%05d.bin", dir, rank);
}

// Writes this rank's opt_rank<r>.bin (header, master, m, v of the own range) into dir and fsyncs it. 0, or -1
// with err (no exit: the caller agrees with the other ranks through dist_all_ok).
static int zero1_write_shard(Zero1 *z, const char *dir, char *err, size_t n) {
    char path[4200];
    zero1_shard_path(path, sizeof path, dir, z->d->rank);
    const size_t c = z->shard.count;
    float *h = (float *)malloc(3 * c * sizeof(float) + 16);
    if (!h) { snprintf(err, n, "out of host memory for the optimizer shard (%zu floats)", 3 * c); return -1; }
    cudaError_t ce = cudaDeviceSynchronize();
    if (ce == cudaSuccess) ce = zero1_state_to_host(z, h);
    if (ce != cudaSuccess) { free(h); snprintf(err, n, "reading the optimizer shard: %s", cudaGetErrorString(ce)); return -1; }
    FILE *f = fopen(path, "wb");
    if (!f) { free(h); snprintf(err, n, "cannot create %s: %s", path, strerror(errno)); return -1; }
    Zero1ShardHeader hd = {ZERO1_SHARD_MAGIC, 1, z->d->world, z->d->rank, z->total, z->shard.offset, c};
    int ok = fwrite(&hd, sizeof hd, 1, f) == 1 && fwrite(h, sizeof(float), 3 * c, f) == 3 * c;
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = (fclose(f) == 0) && ok;
    free(h);
    if (!ok) { snprintf(err, n, "cannot write %s: %s", path, strerror(errno)); return -1; }
    return 0;
}

// Reads the own range's master, m, v from the shard files in dir, whatever world size wrote them (re-sharding):
// the saved shards must tile [0, total) exactly as shard_range cut them. 0, or -1 with err.
static int zero1_read_shards(Zero1 *z, const char *dir, char *err, size_t n) {
    char path[4200];
    const size_t off = z->shard.offset, c = z->shard.count;
    float *h = (float *)malloc(3 * c * sizeof(float) + 16);
    if (!h) { snprintf(err, n, "out of host memory for the optimizer shard"); return -1; }
    int saved_world = -1, rc = -1;
    for (int q = 0; saved_world < 0 || q < saved_world; q++) {
        zero1_shard_path(path, sizeof path, dir, q);
        FILE *f = fopen(path, "rb");
        if (!f) { snprintf(err, n, "cannot open %s: %s (optimizer shard %d missing)", path, strerror(errno), q); goto out; }
        Zero1ShardHeader hd;
        if (fread(&hd, sizeof hd, 1, f) != 1 || hd.magic != ZERO1_SHARD_MAGIC || hd.version != 1) {
            fclose(f);
            snprintf(err, n, "%s is not an optimizer shard file (bad header)", path);
            goto out;
        }
        if (q == 0) saved_world = hd.world;
        ShardRange want = shard_range(z->total, saved_world, q);
        if (hd.world != saved_world || hd.rank != q || hd.total != z->total || hd.offset != want.offset ||
            hd.count != want.count) {
            fclose(f);
            snprintf(err, n, "%s: shard %d of world %d, %llu params, range [%llu, +%llu); expected shard %d of world %d, "
                     "%zu params, range [%zu, +%zu)", path, hd.rank, hd.world, (unsigned long long)hd.total,
                     (unsigned long long)hd.offset, (unsigned long long)hd.count, q, saved_world, z->total, want.offset,
                     want.count);
            goto out;
        }
        size_t a = want.offset > off ? want.offset : off;
        size_t b = want.offset + want.count < off + c ? want.offset + want.count : off + c;
        for (int part = 0; part < 3 && b > a; part++) {  // master, m, v
            long pos = (long)(sizeof hd + ((size_t)part * want.count + (a - want.offset)) * sizeof(float));
            if (fseek(f, pos, SEEK_SET) != 0 || fread(h + (size_t)part * c + (a - off), sizeof(float), b - a, f) != b - a) {
                fclose(f);
                snprintf(err, n, "%s: truncated (reading elements [%zu, %zu))", path, a, b);
                goto out;
            }
        }
        fclose(f);
    }
    zero1_shard_path(path, sizeof path, dir, saved_world);
    if (access(path, F_OK) == 0) {
        snprintf(err, n, "%s exists, but shard 0 says the state was saved by %d ranks (mixed checkpoints?)", path,
                 saved_world);
        goto out;
    }
    {
        cudaError_t ce = zero1_state_from_host(z, h);
        if (ce != cudaSuccess) { snprintf(err, n, "uploading the optimizer shard: %s", cudaGetErrorString(ce)); goto out; }
    }
    rc = 0;
out:
    free(h);
    return rc;
}

#endif  // SLLM_ZERO1_CUH
