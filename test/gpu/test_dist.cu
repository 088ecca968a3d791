// GPU tests of the distributed layer (core/dist.cuh, core/zero1.cuh).
//
// One process (any GPU count):
//   - world 1: the collectives are no-ops, the bucket bookkeeping catches nothing missing, and the ZeRO-1 step is
//     bit-identical to adamw_update_multi + global_norm on the full buffer (several steps, clipping on and off);
//   - the model's layer buckets tile the flat buffer (grad_reducer_validate) in backward order;
//   - sharded optimizer files written by 3 (virtual) ranks read back exactly by 1, 2, 3 and 5 ranks (re-sharding).
// Several ranks (2 GPUs visible: the test re-executes itself as 2 ranks with a file rendezvous; or launched
// by scripts/run_dist.sh / mpirun, then every rank runs the checks itself):
//   - allreduce sums (f32, u64), all_ok, broadcast of a string longer than the scratch buffer;
//   - the embedding lookup's gradient all-gathered after the reduction of the embedding bucket, exactly;
//   - the model's bucketed gradient reduction in both modes, overlapped with a compute stream that writes each
//     bucket just before marking it ready (a missing event dependency would reduce stale values);
//   - ZeRO-1 steps equal a single-rank AdamW on the summed gradient (bit-identical without clipping; with
//     clipping within fp32 rounding of the norm), the bf16 all-gather, the master gather, and the shard files;
//   - a killed peer (only in the self-launched mode): rank 1 SIGKILLs itself, rank 0 must end within the
//     deadline (5 s here) with exit code 1 and a message naming its rank.
// Gradient values are small dyadic numbers, so sums over ranks are exact in any order.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vector>

#include "config.h"
#include "gpu_harness.h"
#include "test_util.h"
#include "zero1.cuh"

#define SKIP_IF_NO_GPU() do { if (!cuda_device_available()) { skip(); } } while (0)

// ---- helpers ---------------------------------------------------------------------------------------------
static uint64_t mix64(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
// Rank r's local gradient: multiples of 1/64 in [-0.5, 0.5]: sums of a few are exact in fp32.
static float grad_val(size_t i, int r) { return (float)((int)(mix64(i * 16 + (uint64_t)r) % 65) - 32) / 64.0f; }
static float param_val(size_t i) { return (float)((int)(mix64(i ^ 0xabcdefull) % 2001) - 1000) * 1e-4f; }

static __global__ void spin_kernel(unsigned long long ns) {
    unsigned long long t0, t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
    do { asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)); } while (t - t0 < ns);
}

static int g_fail;
#define CHECK(d, cond, ...) do { if (!(cond)) { g_fail++; fprintf(stderr, "FAIL rank %d: ", (d)->rank); \
    fprintf(stderr, __VA_ARGS__); fprintf(stderr, "  (%s:%d)\n", __FILE__, __LINE__); } } while (0)

// Segments of a synthetic "model": awkward sizes, alternating weight decay; total = 10004 (multiple of 4).
static const size_t k_seg_end[] = {4000, 4008, 9000, 10004};
static const int k_seg_wd[] = {1, 0, 1, 0};
#define K_NSEG 4
#define K_TOTAL 10004

// Reference: full-buffer AdamW (core/adamw.cuh) on gradient G, as model_adamw does it.
typedef struct {
    bf16 *p;
    float *master, *m, *v, *g, *norm, *partial;
    bf16 *mb, *vb;  // the moments when bf16m (core/adamw.cuh's stochastic rounding, global indices from 0)
    int bf16m, no_master;  // no_master: p updated in place (stochastic rounding), master unused
} RefOpt;
static void ref_init(RefOpt *r, const float *master0, int bf16m, int no_master) {
    r->bf16m = bf16m;
    r->no_master = no_master;
    cudaCheck(cudaMalloc((void **)&r->mb, K_TOTAL * 2));
    cudaCheck(cudaMalloc((void **)&r->vb, K_TOTAL * 2));
    cudaCheck(cudaMemset(r->mb, 0, K_TOTAL * 2));
    cudaCheck(cudaMemset(r->vb, 0, K_TOTAL * 2));
    cudaCheck(cudaMalloc((void **)&r->p, K_TOTAL * 2));
    cudaCheck(cudaMalloc((void **)&r->master, K_TOTAL * 4));
    cudaCheck(cudaMalloc((void **)&r->m, K_TOTAL * 4));
    cudaCheck(cudaMalloc((void **)&r->v, K_TOTAL * 4));
    cudaCheck(cudaMalloc((void **)&r->g, K_TOTAL * 4));
    cudaCheck(cudaMalloc((void **)&r->norm, 4));
    cudaCheck(cudaMalloc((void **)&r->partial, GLOBAL_NORM_BLOCKS * 4));
    cudaCheck(cudaMemcpy(r->master, master0, K_TOTAL * 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(r->m, 0, K_TOTAL * 4));
    cudaCheck(cudaMemset(r->v, 0, K_TOTAL * 4));
    f32_to_bf16(r->p, r->master, K_TOTAL, 0);
}
static void ref_step(RefOpt *r, const float *G, const AdamWParams *hp) {
    cudaCheck(cudaMemcpy(r->g, G, K_TOTAL * 4, cudaMemcpyHostToDevice));
    global_norm(r->norm, r->partial, r->g, K_TOTAL, 0);
    AdamWSegments seg;
    memset(&seg, 0, sizeof seg);
    for (int s = 0; s < K_NSEG; s++) { seg.end[s] = k_seg_end[s]; seg.wd[s] = k_seg_wd[s] ? hp->weight_decay : 0.0f; }
    seg.count = K_NSEG;
    float *master = r->no_master ? NULL : r->master;
    if (r->bf16m) adamw_update_multi(r->p, master, r->mb, r->vb, r->g, &seg, hp, r->norm, 0, 0);
    else adamw_update_multi(r->p, master, r->m, r->v, r->g, &seg, hp, r->norm, 0, 0);
    cudaCheck(cudaDeviceSynchronize());
}
static void ref_free(RefOpt *r) {
    cudaFree(r->p); cudaFree(r->master); cudaFree(r->m); cudaFree(r->v); cudaFree(r->g); cudaFree(r->norm);
    cudaFree(r->partial); cudaFree(r->mb); cudaFree(r->vb);
}

// ---- the ZeRO-1 step against the reference (any world) -------------------------------------------------------
// Each rank contributes its grad_val(., rank); the reference sees their sum. Buckets: 3 with scattered pieces.
// Steps 1-3 without clipping (bit-identical), steps 4-5 with clipping (within fp32 rounding of the norm).
// opts (ZERO1_* bits, the same on both sides): bf16 moments and/or no master weights (the same bits whatever the
// sharding: the stochastic rounding hash takes the global index; without master weights the "master" compared is
// the bf16 weights widened, as zero1_gather_master gives them).
static void check_zero1_steps(Dist *d, GradReduceMode mode, int padded, int opts = 0) {
    const int bf16m = (opts & ZERO1_MOMENTS_BF16) != 0, no_master = (opts & ZERO1_NO_MASTER) != 0;
    const size_t total = K_TOTAL;
    float *master0 = (float *)sllm_malloc(total * 4), *G = (float *)sllm_malloc(total * 4);
    float *gl = NULL;
    cudaCheck(cudaMallocHost((void **)&gl, total * 4));
    for (size_t i = 0; i < total; i++) {
        master0[i] = param_val(i);
        gl[i] = grad_val(i, d->rank);
        float s = 0;
        for (int r = 0; r < d->world; r++) s += grad_val(i, r);
        G[i] = s;
    }
    RefOpt ref;
    ref_init(&ref, master0, bf16m, no_master);
    size_t cap = padded ? zero1_padded_total(total, d->world) + 64 : total;
    bf16 *params;
    float *grads, *norm, *full;
    cudaCheck(cudaMalloc((void **)&params, cap * 2));
    Zero1 z;
    zero1_init(&z, d, total, k_seg_end, k_seg_wd, K_NSEG, opts, params);
    zero1_set_master(&z, master0, 0);
    cudaCheck(cudaMalloc((void **)&grads, total * 4));
    cudaCheck(cudaMalloc((void **)&norm, 4));
    cudaCheck(cudaMalloc((void **)&full, total * 4));
    cudaCheck(cudaMemcpy(params, ref.p, total * 2, cudaMemcpyDeviceToDevice));
    const int allgather = zero1_params_capacity(params) >= zero1_padded_total(total, d->world);
    GradReducer red;
    grad_reducer_init(&red, d, grads, total, mode);
    GradPiece b0[] = {{9000, 1004}, {4000, 8}}, b1[] = {{4008, 4992}}, b2[] = {{0, 4000}};
    grad_reducer_add_bucket(&red, b0, 2);
    grad_reducer_add_bucket(&red, b1, 1);
    grad_reducer_add_bucket(&red, b2, 1);
    grad_reducer_validate(&red);
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    uint16_t *pz = (uint16_t *)sllm_malloc(total * 2), *pr = (uint16_t *)sllm_malloc(total * 2);
    float *mz = (float *)sllm_malloc(total * 4), *mr = (float *)sllm_malloc(total * 4);
    for (int step = 1; step <= 5; step++) {
        const int clip = step >= 4;
        AdamWParams hp = {1e-2f, 0.9f, 0.95f, 1e-8f, 0.1f, clip ? 2.0f : 0.0f, step};
        ref_step(&ref, G, &hp);
        // backward order: each bucket's values land on the compute stream right before it is marked ready
        cudaCheck(cudaMemsetAsync(grads, 0xff, total * 4, s));  // NaN poison
        grad_reducer_begin(&red, 1);
        for (int b = 0; b < red.nb; b++) {
            spin_kernel<<<1, 1, 0, s>>>(200000);
            for (int i = red.first[b]; i < red.first[b + 1]; i++)
                cudaCheck(cudaMemcpyAsync(grads + red.pieces[i].offset, gl + red.pieces[i].offset,
                                          red.pieces[i].count * 4, cudaMemcpyHostToDevice, s));
            grad_reducer_ready(&red, b, s);
        }
        grad_reducer_finish(&red, s);
        zero1_grad_norm(&z, grads, norm, s);
        zero1_step(&z, params, grads, &hp, norm, s);
        cudaCheck(cudaStreamSynchronize(s));
        float nz, nr;
        cudaCheck(cudaMemcpy(&nz, norm, 4, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(&nr, ref.norm, 4, cudaMemcpyDeviceToHost));
        CHECK(d, fabsf(nz - nr) <= 1e-5f * nr, "step %d: norm %.9g, reference %.9g", step, nz, nr);
        if (d->world == 1) CHECK(d, nz == nr, "world 1: norm %.9g differs from global_norm %.9g", nz, nr);
        cudaCheck(cudaMemcpy(pz, params, total * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(pr, ref.p, total * 2, cudaMemcpyDeviceToHost));
        zero1_gather_master(&z, full, s);
        cudaCheck(cudaStreamSynchronize(s));
        cudaCheck(cudaMemcpy(mz, full, total * 4, cudaMemcpyDeviceToHost));
        if (no_master)
            for (size_t i = 0; i < total; i++) mr[i] = adamw_bf16_bits_to_float(pr[i]);
        else cudaCheck(cudaMemcpy(mr, ref.master, total * 4, cudaMemcpyDeviceToHost));
        size_t pdiff = 0, mdiff = 0;
        double merr = 0;
        for (size_t i = 0; i < total; i++) {
            pdiff += pz[i] != pr[i];
            mdiff += memcmp(&mz[i], &mr[i], 4) != 0;
            merr = fmax(merr, fabs((double)mz[i] - mr[i]) / fmax(fabs((double)mr[i]), 1e-3));
        }
        if (!clip || d->world == 1) {
            CHECK(d, pdiff == 0 && mdiff == 0, "step %d (%s, %s): %zu bf16 weights and %zu master weights differ from "
                  "the single-rank AdamW (expected bit-identical)", step, mode ? "reduce-to-owner" : "allreduce",
                  allgather ? "allgather" : "broadcast", pdiff, mdiff);
        } else {
            // (without master weights an element whose rounding flipped is one bf16 step off)
            CHECK(d, merr < (no_master ? 1e-2 : 1e-5) && pdiff <= total / 100, "step %d (clipped): master rel err %.3g, "
                  "%zu bf16 weights differ", step, merr, pdiff);
        }
    }
    if (d->rank == 0)
        printf("    zero1 steps: world %d, %s, bf16 gather by %s, moments %s, master %s: %s\n", d->world,
               mode ? "reduce-to-owner" : "allreduce", allgather ? "ncclAllGather (padded buffer)" : "grouped broadcast",
               bf16m ? "bf16" : "fp32", no_master ? "none" : "fp32", g_fail ? "FAILED" : "ok");
    free(pz); free(pr); free(mz); free(mr); free(master0); free(G);
    cudaFreeHost(gl);
    cudaFree(params); cudaFree(grads); cudaFree(norm); cudaFree(full);
    cudaStreamDestroy(s);
    grad_reducer_free(&red);
    zero1_free(&z);
    ref_free(&ref);
}

// No master weights: the shard file's master part is the bf16 weights of the range widened; read into a shard with
// fp32 master weights it gives them exactly, read into a master-less one it leaves the weights alone (they come
// from model.safetensors) and restores the moments.
static void check_shard_files_no_master(Dist *d) {
    char dir[512] = {0};
    if (d->rank == 0 && test_tmpdir_make(dir, sizeof dir, "sllm_dist_ckpt_") != 0) CHECK(d, 0, "mkdtemp");
    dist_broadcast_bytes(d, dir, sizeof dir, 0, 0);
    bf16 *params, *params2;
    cudaCheck(cudaMalloc((void **)&params, K_TOTAL * 2));
    cudaCheck(cudaMalloc((void **)&params2, K_TOTAL * 2));
    float *w = (float *)sllm_malloc(K_TOTAL * 4);
    for (size_t i = 0; i < K_TOTAL; i++) w[i] = param_val(i);
    float *wd_;
    cudaCheck(cudaMalloc((void **)&wd_, K_TOTAL * 4));
    cudaCheck(cudaMemcpy(wd_, w, K_TOTAL * 4, cudaMemcpyHostToDevice));
    f32_to_bf16(params, wd_, K_TOTAL, 0);
    cudaCheck(cudaDeviceSynchronize());
    cudaFree(wd_);
    cudaCheck(cudaMemset(params2, 0, K_TOTAL * 2));
    Zero1 z, y, x;
    zero1_init(&z, d, K_TOTAL, k_seg_end, k_seg_wd, K_NSEG, ZERO1_NO_MASTER | ZERO1_MOMENTS_BF16, params);
    const size_t c = z.shard.count, off = z.shard.offset;
    float *h = (float *)sllm_malloc(3 * c * 4 + 4), *back = (float *)sllm_malloc(3 * c * 4 + 4);
    for (size_t i = 0; i < 3 * c; i++) h[i] = __bfloat162float(__float2bfloat16_rn(param_val(i * 5 + (size_t)d->rank)));
    cudaCheck(zero1_state_from_host(&z, h));  // the moments (the master part is not read)
    for (size_t i = 0; i < c; i++) h[i] = __bfloat162float(__float2bfloat16_rn(w[off + i]));  // what the file holds
    char err[5000];
    int ok = zero1_write_shard(&z, dir, err, sizeof err) == 0;
    if (!ok) fprintf(stderr, "rank %d: %s\n", d->rank, err);
    CHECK(d, dist_all_ok(d, ok, 60), "a rank failed to write its master-less shard");
    zero1_init(&x, d, K_TOTAL, k_seg_end, k_seg_wd, K_NSEG, 0);
    CHECK(d, zero1_read_shards(&x, dir, err, sizeof err) == 0, "read shards (into fp32 master): %s", err);
    if (c) cudaCheck(cudaMemcpy(back, x.opt, 3 * c * 4, cudaMemcpyDeviceToHost));
    CHECK(d, memcmp(back, h, 3 * c * 4) == 0, "master-less shard read into fp32 master and moments differs");
    zero1_init(&y, d, K_TOTAL, k_seg_end, k_seg_wd, K_NSEG, ZERO1_NO_MASTER | ZERO1_MOMENTS_BF16, params2);
    CHECK(d, zero1_read_shards(&y, dir, err, sizeof err) == 0, "read shards (master-less): %s", err);
    cudaCheck(zero1_state_to_host(&y, back));
    CHECK(d, memcmp(back + c, h + c, 2 * c * 4) == 0, "master-less shard: moments read back differ");
    size_t nz = 0;
    for (size_t i = 0; i < c; i++) nz += back[i] != 0.0f;
    CHECK(d, nz == 0, "master-less read wrote %zu weights (they come from model.safetensors)", nz);
    CHECK(d, z.opt_bytes <= 2 * ((c * 2 + 255) & ~(size_t)255), "master-less bf16 state takes %zu bytes for %zu params",
          z.opt_bytes, c);
    dist_barrier(d, 0);
    if (d->rank == 0) {
        test_tmpdir_remove(dir);
        printf("    optimizer shard files without master weights (world %d): %s\n", d->world, g_fail ? "FAILED" : "ok");
    }
    free(h); free(back); free(w); zero1_free(&z); zero1_free(&y); zero1_free(&x);
    cudaFree(params); cudaFree(params2);
}

// ---- multi-rank checks (each rank runs them; collective calls in the same order everywhere) -------------------
static void check_collectives(Dist *d) {
    const int W = d->world, n = 1000;
    float *hf = (float *)sllm_malloc(n * 4);
    unsigned long long *hu = (unsigned long long *)sllm_malloc(n * 8);
    for (int i = 0; i < n; i++) { hf[i] = (float)(d->rank + 1 + i); hu[i] = ((unsigned long long)(d->rank + 1) << 40) + i; }
    float *df;
    unsigned long long *du;
    cudaCheck(cudaMalloc((void **)&df, n * 4));
    cudaCheck(cudaMalloc((void **)&du, n * 8));
    cudaCheck(cudaMemcpy(df, hf, n * 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(du, hu, n * 8, cudaMemcpyHostToDevice));
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    dist_allreduce_sum_f32(d, df, n, s);
    dist_allreduce_sum_u64(d, du, n, s);
    cudaCheck(cudaStreamSynchronize(s));
    cudaCheck(cudaMemcpy(hf, df, n * 4, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(hu, du, n * 8, cudaMemcpyDeviceToHost));
    int bad_f = 0, bad_u = 0;
    for (int i = 0; i < n; i++) {
        bad_f += hf[i] != (float)(W * (W + 1) / 2 + W * i);
        bad_u += hu[i] != ((unsigned long long)(W * (W + 1) / 2) << 40) + (unsigned long long)W * i;
    }
    CHECK(d, !bad_f && !bad_u, "allreduce: %d f32 and %d u64 sums wrong", bad_f, bad_u);
    dist_barrier(d, 0);
    CHECK(d, dist_all_ok(d, 1, 0) == 1, "all_ok(1 everywhere) != 1");
    CHECK(d, dist_all_ok(d, d->rank != W - 1, 0) == 0, "all_ok with the last rank failing != 0");
    char str[DIST_SCRATCH_BYTES + 1000];
    for (size_t i = 0; i < sizeof str; i++) str[i] = d->rank == 0 ? (char)('a' + i % 26) : 0;
    dist_broadcast_bytes(d, str, sizeof str, 0, 0);
    int bad_b = 0;
    for (size_t i = 0; i < sizeof str; i++) bad_b += str[i] != (char)('a' + i % 26);
    CHECK(d, !bad_b, "broadcast: %d bytes wrong", bad_b);
    free(hf); free(hu); cudaFree(df); cudaFree(du); cudaStreamDestroy(s);
}

// The model's layer buckets (preset "test") reduced in backward order, overlapped with a compute stream.
static void check_model_buckets(Dist *d, GradReduceMode mode) {
    ModelConfig cfg;
    if (!config_from_preset("test", &cfg)) { CHECK(d, 0, "no preset 'test'"); return; }
    ParamLayout lay;
    config_param_layout(&cfg, &lay);
    const size_t total = lay.total;
    const int L = cfg.n_layer;
    float *gl, *out = (float *)sllm_malloc(total * 4), *grads;
    cudaCheck(cudaMallocHost((void **)&gl, total * 4));
    for (size_t i = 0; i < total; i++) gl[i] = grad_val(i, d->rank);
    cudaCheck(cudaMalloc((void **)&grads, total * 4));
    GradReducer red;
    grad_reducer_init(&red, d, grads, total, mode);
    grad_reducer_add_layer_buckets(&red, &lay, L);
    CHECK(d, red.nb == grad_bucket_count(L), "%d buckets for %d layers", red.nb, L);
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    // a micro-step that does not reduce: gradients stay local
    cudaCheck(cudaMemcpyAsync(grads, gl, total * 4, cudaMemcpyHostToDevice, s));
    grad_reducer_begin(&red, 0);
    for (int b = red.nb - 1; b >= 0; b--) grad_reducer_ready(&red, b, s);
    grad_reducer_finish(&red, s);
    cudaCheck(cudaStreamSynchronize(s));
    cudaCheck(cudaMemcpy(out, grads, total * 4, cudaMemcpyDeviceToHost));
    CHECK(d, memcmp(out, gl, total * 4) == 0, "a non-reducing micro-step changed the gradients");
    // the last micro-step: the embedding, then per layer L-1 .. 0 its FFN and its attention bucket
    cudaCheck(cudaMemsetAsync(grads, 0xff, total * 4, s));
    grad_reducer_begin(&red, 1);
    for (int b = 0; b < red.nb; b++) {
        spin_kernel<<<1, 1, 0, s>>>(300000);
        for (int i = red.first[b]; i < red.first[b + 1]; i++)
            cudaCheck(cudaMemcpyAsync(grads + red.pieces[i].offset, gl + red.pieces[i].offset, red.pieces[i].count * 4,
                                      cudaMemcpyHostToDevice, s));
        grad_reducer_ready(&red, b, s);
    }
    grad_reducer_finish(&red, s);
    cudaCheck(cudaStreamSynchronize(s));
    cudaCheck(cudaMemcpy(out, grads, total * 4, cudaMemcpyDeviceToHost));
    ShardRange own = shard_range(total, d->world, d->rank);
    size_t bad = 0, first_bad = 0;
    for (size_t i = 0; i < total; i++) {
        if (mode == GRAD_REDUCE_TO_OWNER && (i < own.offset || i >= own.offset + own.count)) continue;
        float want = 0;
        for (int r = 0; r < d->world; r++) want += grad_val(i, r);
        if (memcmp(&out[i], &want, 4) != 0 && !bad++) first_bad = i;
    }
    CHECK(d, bad == 0, "bucketed %s of %zu gradients: %zu wrong (first at %zu: %g)",
          mode ? "reduce-to-owner" : "allreduce", total, bad, first_bad, bad ? out[first_bad] : 0.0f);
    if (d->rank == 0)
        printf("    model buckets (%d layers, %zu params, %s): %s\n", L, total, mode ? "reduce-to-owner" : "allreduce",
               bad ? "FAILED" : "ok");
    cudaFreeHost(gl); free(out); cudaFree(grads); cudaStreamDestroy(s); grad_reducer_free(&red);
}

// The embedding lookup's gradient on a reducing micro-step (grad_reducer_embed_lookup): bucket 0 (the [V, D] table,
// rank-independent base values) is reduced first, then every rank's lookup gradient (its own tokens and dout,
// repeated tokens included) is all-gathered and added. Every rank must hold W * base + the lookups of all ranks,
// exactly (dyadic values). World 1: the call declines (returns 0), the caller adds its own lookup.
static void check_embed_lookup(Dist *d) {
    const int N = 96, D = 24, V = 40, W = d->world;
    const size_t tab = 3 * (size_t)N + 2, total = (size_t)V * D;
    std::vector<int> toks((size_t)W * N), table(tab);
    std::vector<float> dout_f((size_t)W * N * D), want(total), base(total), out(total);
    for (int r = 0; r < W; r++)
        for (int n = 0; n < N; n++) {
            toks[(size_t)r * N + n] = (int)(mix64((uint64_t)n * 131 + (uint64_t)r * 7919) % (n < N / 2 ? 6 : V));
            for (int c = 0; c < D; c++)
                dout_f[((size_t)r * N + n) * D + c] = (float)((int)(mix64(((uint64_t)r * N + n) * D + c + 99) % 33) - 16) / 16.0f;
        }
    for (size_t i = 0; i < total; i++) base[i] = grad_val(i, 7), want[i] = (float)W * base[i];
    for (int r = 0; r < W; r++)
        for (int n = 0; n < N; n++)
            for (int c = 0; c < D; c++) want[(size_t)toks[(size_t)r * N + n] * D + c] += dout_f[((size_t)r * N + n) * D + c];
    std::vector<uint64_t> pairs(N);
    embedding_build_buckets(table.data(), pairs.data(), toks.data() + (size_t)d->rank * N, N);
    std::vector<bf16> dout_h((size_t)N * D);
    for (size_t i = 0; i < dout_h.size(); i++) dout_h[i] = __float2bfloat16(dout_f[(size_t)d->rank * N * D + i]);
    float *dE;
    bf16 *dout;
    int *table_d;
    cudaCheck(cudaMalloc((void **)&dE, total * 4));
    cudaCheck(cudaMalloc((void **)&dout, (size_t)N * D * 2));
    cudaCheck(cudaMalloc((void **)&table_d, tab * 4));
    cudaCheck(cudaMemcpy(dE, base.data(), total * 4, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dout, dout_h.data(), (size_t)N * D * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(table_d, table.data(), tab * 4, cudaMemcpyHostToDevice));
    cudaStream_t s;
    cudaCheck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
    GradReducer red;
    grad_reducer_init(&red, d, dE, total, GRAD_ALLREDUCE);
    GradPiece all = {0, total};
    grad_reducer_add_bucket(&red, &all, 1);
    grad_reducer_validate(&red);
    grad_reducer_init_embed(&red, N, D);
    grad_reducer_begin(&red, 0);  // a micro-step that does not reduce: always declined
    CHECK(d, grad_reducer_embed_lookup(&red, dE, dout, table_d, N, D, s) == 0, "lookup taken on a non-reducing step");
    grad_reducer_begin(&red, 1);
    spin_kernel<<<1, 1, 0, s>>>(300000);  // a missing dependency on the compute stream would show
    grad_reducer_ready(&red, grad_bucket_embed(), s);
    const int took = grad_reducer_embed_lookup(&red, dE, dout, table_d, N, D, s);
    CHECK(d, took == (W > 1), "world %d: embed_lookup returned %d", W, took);
    if (!took) embedding_backward(dE, dout, table_d, table[0], D, s);  // what the model does then
    grad_reducer_finish(&red, s);
    cudaCheck(cudaStreamSynchronize(s));
    cudaCheck(cudaMemcpy(out.data(), dE, total * 4, cudaMemcpyDeviceToHost));
    size_t bad = 0, first = 0;
    for (size_t i = 0; i < total; i++)
        if (out[i] != want[i] && !bad++) first = i;
    CHECK(d, bad == 0, "embedding lookup gradient (world %d): %zu of %zu wrong (first at %zu: %g, want %g)", W, bad,
          total, first, bad ? out[first] : 0.0f, bad ? want[first] : 0.0f);
    if (d->rank == 0) printf("    embedding lookup gradient, world %d (%s): %s\n", W, took ? "all-gathered" : "local",
                             bad ? "FAILED" : "ok");
    cudaFree(dE); cudaFree(dout); cudaFree(table_d); cudaStreamDestroy(s); grad_reducer_free(&red);
}

// Every rank writes its shard into rank 0's directory, then reads it back into a fresh Zero1.
static void check_shard_files(Dist *d) {
    char dir[512] = {0};
    if (d->rank == 0 && test_tmpdir_make(dir, sizeof dir, "sllm_dist_ckpt_") != 0) CHECK(d, 0, "mkdtemp");
    dist_broadcast_bytes(d, dir, sizeof dir, 0, 0);
    Zero1 z, y;
    zero1_init(&z, d, K_TOTAL, k_seg_end, k_seg_wd, K_NSEG);
    float *h = (float *)sllm_malloc(3 * K_TOTAL * 4);
    for (size_t i = 0; i < 3 * (size_t)K_TOTAL; i++) h[i] = param_val(i * 3 + (size_t)d->rank);
    if (z.shard.count) cudaCheck(cudaMemcpy(z.opt, h, 3 * z.shard.count * 4, cudaMemcpyHostToDevice));
    char err[5000];
    int ok = zero1_write_shard(&z, dir, err, sizeof err) == 0;
    if (!ok) fprintf(stderr, "rank %d: %s\n", d->rank, err);
    CHECK(d, dist_all_ok(d, ok, 60), "a rank failed to write its shard");
    zero1_init(&y, d, K_TOTAL, k_seg_end, k_seg_wd, K_NSEG);
    ok = zero1_read_shards(&y, dir, err, sizeof err) == 0;
    CHECK(d, ok, "read shards: %s", err);
    float *back = (float *)sllm_malloc(3 * K_TOTAL * 4 + 4);
    if (y.shard.count) cudaCheck(cudaMemcpy(back, y.opt, 3 * y.shard.count * 4, cudaMemcpyDeviceToHost));
    CHECK(d, memcmp(back, h, 3 * y.shard.count * 4) == 0, "shard read back differs");
    dist_barrier(d, 0);
    if (d->rank == 0) test_tmpdir_remove(dir);
    free(h); free(back); zero1_free(&z); zero1_free(&y);
}

// bf16 moments: written as fp32 (exactly), read back into a bf16-moment shard and into an fp32 one, both exact.
static void check_shard_files_bf16(Dist *d) {
    char dir[512] = {0};
    if (d->rank == 0 && test_tmpdir_make(dir, sizeof dir, "sllm_dist_ckpt_") != 0) CHECK(d, 0, "mkdtemp");
    dist_broadcast_bytes(d, dir, sizeof dir, 0, 0);
    Zero1 z, y, x;
    zero1_init(&z, d, K_TOTAL, k_seg_end, k_seg_wd, K_NSEG, 1);
    const size_t c = z.shard.count;
    float *h = (float *)sllm_malloc(3 * c * 4 + 4), *back = (float *)sllm_malloc(3 * c * 4 + 4);
    for (size_t i = 0; i < 3 * c; i++) {
        const float v = param_val(i * 7 + (size_t)d->rank);
        h[i] = i < c ? v : __bfloat162float(__float2bfloat16_rn(v));  // the moments bf16-representable
    }
    cudaCheck(zero1_state_from_host(&z, h));
    char err[5000];
    int ok = zero1_write_shard(&z, dir, err, sizeof err) == 0;
    if (!ok) fprintf(stderr, "rank %d: %s\n", d->rank, err);
    CHECK(d, dist_all_ok(d, ok, 60), "a rank failed to write its bf16-moment shard");
    zero1_init(&y, d, K_TOTAL, k_seg_end, k_seg_wd, K_NSEG, 1);
    zero1_init(&x, d, K_TOTAL, k_seg_end, k_seg_wd, K_NSEG, 0);
    CHECK(d, zero1_read_shards(&y, dir, err, sizeof err) == 0, "read shards (bf16 moments): %s", err);
    cudaCheck(zero1_state_to_host(&y, back));
    CHECK(d, memcmp(back, h, 3 * c * 4) == 0, "bf16-moment shard read back into bf16 moments differs");
    CHECK(d, zero1_read_shards(&x, dir, err, sizeof err) == 0, "read shards (into fp32 moments): %s", err);
    if (c) cudaCheck(cudaMemcpy(back, x.opt, 3 * c * 4, cudaMemcpyDeviceToHost));
    CHECK(d, memcmp(back, h, 3 * c * 4) == 0, "bf16-moment shard read back into fp32 moments differs");
    CHECK(d, z.opt_bytes < 3 * c * 4 || c == 0, "bf16 moments take %zu bytes, fp32 ones %zu", z.opt_bytes, 3 * c * 4);
    dist_barrier(d, 0);
    if (d->rank == 0) {
        test_tmpdir_remove(dir);
        printf("    optimizer shard files with bf16 moments (world %d): %s\n", d->world, g_fail ? "FAILED" : "ok");
    }
    free(h); free(back); zero1_free(&z); zero1_free(&y); zero1_free(&x);
}

static int run_rank_checks(Dist *d) {
    g_fail = 0;
    check_collectives(d);
    check_model_buckets(d, GRAD_ALLREDUCE);
    check_model_buckets(d, GRAD_REDUCE_TO_OWNER);
    check_embed_lookup(d);
    check_zero1_steps(d, GRAD_ALLREDUCE, 1);
    check_zero1_steps(d, GRAD_REDUCE_TO_OWNER, 0);
    check_zero1_steps(d, GRAD_REDUCE_TO_OWNER, 1, ZERO1_MOMENTS_BF16);
    check_zero1_steps(d, GRAD_REDUCE_TO_OWNER, 1, ZERO1_NO_MASTER);
    check_zero1_steps(d, GRAD_REDUCE_TO_OWNER, 0, ZERO1_NO_MASTER | ZERO1_MOMENTS_BF16);
    check_shard_files(d);
    check_shard_files_bf16(d);
    check_shard_files_no_master(d);
    return g_fail;
}

static void dist_from_env(Dist *d) {
    DistOptions o = {-1, -1, -1, NULL, 0};
    const char *t = getenv("SLLM_DIST_TIMEOUT");
    if (t) o.timeout_s = atof(t);
    dist_init(d, &o);
}

// Child roles of the self-launched mode; exit code = result.
static int child_main(const char *role) {
    Dist d;
    dist_from_env(&d);
    if (strcmp(role, "kill") == 0) {
        dist_barrier(&d, 0);
        if (d.rank == 1) { fflush(stdout); raise(SIGKILL); }
        usleep(500000);
        dist_barrier(&d, 0);  // rank 1 is gone: the watchdog must end this process
        fprintf(stderr, "rank %d: the barrier with a dead peer returned\n", d.rank);
        return 0;             // the parent expects exit code 1 from the watchdog
    }
    int f = run_rank_checks(&d);
    dist_barrier(&d, 0);
    dist_finalize(&d);
    printf("rank %s: %d failure(s)\n", getenv("RANK"), f);
    return f ? 3 : 0;
}

// ---- self-launched 2-rank runs --------------------------------------------------------------------------------
static int visible_gpus(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    return n;
}

// Starts `world` copies of this binary as ranks (file rendezvous in a fresh directory), waits at most limit_s,
// prints their logs; status[r] = waitpid status; returns the elapsed seconds. rank logs stay in dir.
static double launch_ranks(const char *role, int world, double timeout_s, double limit_s, int *status, char *dir,
                           size_t dirn) {
    if (test_tmpdir_make(dir, dirn, "sllm_dist_") != 0) fail_msg("mkdtemp failed");
    char init[600], tmo[32];
    snprintf(init, sizeof init, "file://%s/nccl_id", dir);
    snprintf(tmo, sizeof tmo, "%g", timeout_s);
    pid_t pid[8];
    fflush(stdout);
    fflush(stderr);
    const double t0 = sllm_time_s();
    for (int r = 0; r < world; r++) {
        pid[r] = fork();
        if (pid[r] == 0) {
            char v[16], log[700];
            snprintf(v, sizeof v, "%d", r);
            setenv("RANK", v, 1);
            setenv("LOCAL_RANK", v, 1);
            snprintf(v, sizeof v, "%d", world);
            setenv("WORLD_SIZE", v, 1);
            setenv("SLLM_DIST_INIT", init, 1);
            setenv("SLLM_DIST_TIMEOUT", tmo, 1);
            setenv("SLLM_DIST_TEST_ROLE", role, 1);
            snprintf(log, sizeof log, "%s/rank%d.log", dir, r);
            int fd = open(log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (fd >= 0) { dup2(fd, 1); dup2(fd, 2); close(fd); }
            execl("/proc/self/exe", "gpu_test_dist", (char *)NULL);
            _exit(127);
        }
    }
    int left = world;
    for (int r = 0; r < world; r++) status[r] = -1;
    while (left > 0) {
        for (int r = 0; r < world; r++) {
            if (status[r] != -1) continue;
            int st;
            if (waitpid(pid[r], &st, WNOHANG) == pid[r]) { status[r] = st; left--; }
        }
        if (left && sllm_time_s() - t0 > limit_s) {
            for (int r = 0; r < world; r++)
                if (status[r] == -1) { kill(pid[r], SIGKILL); waitpid(pid[r], &status[r], 0); status[r] = -2; left--; }
        }
        usleep(20000);
    }
    const double dt = sllm_time_s() - t0;
    for (int r = 0; r < world; r++) {
        char log[700];
        snprintf(log, sizeof log, "%s/rank%d.log", dir, r);
        size_t n = 0;
        const char *e = NULL;
        char *text = sllm_read_file(log, &n, &e);
        printf("    ---- rank %d (%s %d) ----\n%s", r, status[r] == -2 ? "killed after" : "status",
               status[r] == -2 ? (int)limit_s : status[r], text ? text : "(no log)\n");
        free(text);
    }
    return dt;
}

static void test_two_ranks(void **state) {
    (void)state;
    int n = visible_gpus();
    if (n < 2) {
        printf("    SKIPPED: %d GPU(s) visible, the multi-rank checks need 2 (run scripts/run_dist.sh on a multi-GPU "
               "machine)\n", n);
        skip();
    }
    char dir[256];
    int st[2];
    launch_ranks("check", 2, 60, 240, st, dir, sizeof dir);
    test_tmpdir_remove(dir);
    for (int r = 0; r < 2; r++)
        if (!(WIFEXITED(st[r]) && WEXITSTATUS(st[r]) == 0)) fail_msg("rank %d failed (status %d)", r, st[r]);
}

static void test_killed_peer(void **state) {
    (void)state;
    int n = visible_gpus();
    if (n < 2) {
        printf("    SKIPPED: %d GPU(s) visible, the killed-peer test needs 2\n", n);
        skip();
    }
    char dir[256];
    int st[2];
    const double timeout = 5.0;
    double dt = launch_ranks("kill", 2, timeout, 120, st, dir, sizeof dir);
    char log[400];
    snprintf(log, sizeof log, "%s/rank0.log", dir);
    size_t len = 0;
    const char *e = NULL;
    char *text = sllm_read_file(log, &len, &e);
    test_tmpdir_remove(dir);
    printf("    killed peer: rank 0 ended after %.1f s (deadline %.0f s)\n", dt, timeout);
    if (!(WIFSIGNALED(st[1]) && WTERMSIG(st[1]) == SIGKILL)) fail_msg("rank 1 did not die by SIGKILL (status %d)", st[1]);
    if (!(WIFEXITED(st[0]) && WEXITSTATUS(st[0]) == 1)) fail_msg("rank 0: status %d, expected exit code 1", st[0]);
    if (!text || !strstr(text, "error: rank 0 of 2")) fail_msg("rank 0's message does not name its rank");
    if (dt > timeout + 30) fail_msg("rank 0 took %.1f s to end (deadline %.0f s)", dt, timeout);
    free(text);
}

// ---- one-process tests --------------------------------------------------------------------------------------
static void world1(Dist *d) {
    DistOptions o = {0, 1, 0, NULL, 0};
    dist_init(d, &o);
}

static void test_world1_collectives(void **state) {
    (void)state;
    SKIP_IF_NO_GPU();
    Dist d;
    world1(&d);
    assert_int_equal(d.world, 1);
    g_fail = 0;
    check_collectives(&d);  // sums over one rank: unchanged values
    check_model_buckets(&d, GRAD_ALLREDUCE);
    check_model_buckets(&d, GRAD_REDUCE_TO_OWNER);
    check_embed_lookup(&d);
    dist_finalize(&d);
    assert_int_equal(g_fail, 0);
}

static void test_world1_zero1_bit_identical(void **state) {
    (void)state;
    SKIP_IF_NO_GPU();
    Dist d;
    world1(&d);
    g_fail = 0;
    check_zero1_steps(&d, GRAD_ALLREDUCE, 0);
    check_zero1_steps(&d, GRAD_ALLREDUCE, 0, ZERO1_NO_MASTER | ZERO1_MOMENTS_BF16);
    check_shard_files(&d);
    check_shard_files_no_master(&d);
    dist_finalize(&d);
    assert_int_equal(g_fail, 0);
}

// Shard files of 3 virtual ranks (no communicator: only rank, world and the shard range matter) read back by
// 1, 2, 3 and 5 ranks: every element of master, m and v arrives where it belongs.
static void test_reshard_files(void **state) {
    (void)state;
    SKIP_IF_NO_GPU();
    char dir[256], err[5000];
    assert_int_equal(test_tmpdir_make(dir, sizeof dir, "sllm_reshard_"), 0);
    const size_t total = K_TOTAL;
    float *full = (float *)sllm_malloc(3 * total * 4);  // [part][i]
    for (size_t i = 0; i < 3 * total; i++) full[i] = param_val(i);
    for (int r = 0; r < 3; r++) {
        Dist d;
        memset(&d, 0, sizeof d);
        d.rank = r; d.world = 3;
        Zero1 z;
        zero1_init(&z, &d, total, k_seg_end, k_seg_wd, K_NSEG);
        const size_t c = z.shard.count;
        for (int part = 0; part < 3; part++)
            if (c) cudaCheck(cudaMemcpy(z.opt + part * c, full + part * total + z.shard.offset, c * 4, cudaMemcpyHostToDevice));
        if (zero1_write_shard(&z, dir, err, sizeof err) != 0) fail_msg("write: %s", err);
        zero1_free(&z);
    }
    const int worlds[] = {1, 2, 3, 5};
    for (int wi = 0; wi < 4; wi++) {
        for (int r = 0; r < worlds[wi]; r++) {
            Dist d;
            memset(&d, 0, sizeof d);
            d.rank = r; d.world = worlds[wi];
            Zero1 z;
            zero1_init(&z, &d, total, k_seg_end, k_seg_wd, K_NSEG);
            if (zero1_read_shards(&z, dir, err, sizeof err) != 0) fail_msg("world %d rank %d: %s", worlds[wi], r, err);
            const size_t c = z.shard.count;
            float *h = (float *)sllm_malloc(3 * c * 4 + 4);
            if (c) cudaCheck(cudaMemcpy(h, z.opt, 3 * c * 4, cudaMemcpyDeviceToHost));
            for (int part = 0; part < 3; part++)
                if (memcmp(h + part * c, full + part * total + z.shard.offset, c * 4) != 0)
                    fail_msg("world %d rank %d: part %d differs after re-sharding", worlds[wi], r, part);
            free(h);
            zero1_free(&z);
        }
    }
    // a missing shard and a foreign file are errors, not silent zeros
    char path[600];
    snprintf(path, sizeof path, "%s/opt_rank00001.bin", dir);
    char moved[620];
    snprintf(moved, sizeof moved, "%s.away", path);
    assert_int_equal(rename(path, moved), 0);
    Dist d;
    memset(&d, 0, sizeof d);
    d.world = 1;
    Zero1 z;
    zero1_init(&z, &d, total, k_seg_end, k_seg_wd, K_NSEG);
    assert_int_equal(zero1_read_shards(&z, dir, err, sizeof err), -1);
    if (!strstr(err, "optimizer shard 1 missing")) fail_msg("unexpected message: %s", err);
    assert_int_equal(rename(moved, path), 0);
    Zero1 other;
    const size_t other_end[1] = {total - 8};
    const int other_wd[1] = {1};
    zero1_init(&other, &d, total - 8, other_end, other_wd, 1);  // a different model size
    assert_int_equal(zero1_read_shards(&other, dir, err, sizeof err), -1);
    if (!strstr(err, "expected shard 0")) fail_msg("unexpected message: %s", err);
    zero1_free(&z);
    zero1_free(&other);
    free(full);
    test_tmpdir_remove(dir);
}

static void test_external_ranks(void **state) {
    (void)state;
    Dist d;
    dist_from_env(&d);
    int f = run_rank_checks(&d);
    dist_barrier(&d, 0);
    dist_finalize(&d);
    assert_int_equal(f, 0);
}

int main(int argc, char **argv) {
    const char *role = getenv("SLLM_DIST_TEST_ROLE");
    if (role && *role) return child_main(role);
    int world = 0;
    char err[256];
    if (dist_env_int("WORLD_SIZE", &world, err, sizeof err) < 0) world = 0;
    if (world > 1 || dist_launched_by_mpirun()) {  // scripts/run_dist.sh or mpirun: this process is one rank
        const struct CMUnitTest tests[] = {cmocka_unit_test(test_external_ranks)};
        return cmocka_run_group_tests_name("dist (launched ranks)", tests, NULL, NULL);
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_world1_collectives),
        cmocka_unit_test(test_world1_zero1_bit_identical),
        cmocka_unit_test(test_reshard_files),
        cmocka_unit_test(test_two_ranks),
        cmocka_unit_test(test_killed_peer),
    };
    GPU_TEST_PREFLIGHT("test_dist", tests);
    return cmocka_run_group_tests_name("dist", tests, NULL, NULL);
}
