// GPU tests of the inference engine (model/infer_engine.cuh) and its kernels, against float64 CPU references.
//
// 1. kv_attention (core/kv_attention.cuh) against a float64 attention over the cache: decode rows (T = 1) and prefill
//    chunks after the first (T > 1, causal inside the chunk), GQA, head dims 24 / 32 / 64 / 96 / 128, one key, ~3000
//    keys; fresh random inputs; the output poisoned (NaN) first. Relative error < 1e-2 (bf16 output: ~2e-3). At T = 1
//    also kv_decode_attention (keys split in blocks of kvd_keys(hd) over CTAs: one block, several, 16, partial blocks): the
//    reference, the same bits twice (host and device position), its tickets back at zero.
// 2. rope_forward_qk_at (row positions pos0 + t, pos0 given on the host or read on the device) gives the same bits as
//    the training RoPE over whole sequences. kv_attention with the position on the device: the same bits as given.
// 3. The whole engine against the float64 CPU model (model/ref_model.h) on the same bf16-rounded weights: B = 2
//    sequences of 40 tokens, fed as prompt chunks of <= 8 tokens (the first through the training attention, later
//    ones through the cache) and then one token at a time (decoding). Every call's logits (every row) must match
//    the reference logits of the same positions to 2e-2 relative (test_train's tolerance for the trainer's logits:
//    bf16 activations, ~10 roundings per layer). Decoding steps (B = 2 <= GEMV_MAX_M) run their products on
//    core/gemv.cuh, and once more on cuBLASLt (use_gemv = 0, the path of more sequences). Run for the dense FFN, the TwELL FFN (sparse: the decode path at
//    these row counts), the TwELL tile path (decode path off: with random weights every row overflows its tiles and
//    goes to the counted dense fallback) and AUTO; gated MHA and non-gated GQA. The sparse runs must report their
//    paths (decode calls, tile calls with overflow rows counted).
// 4. The same sequences again from an empty cache through infer_decode, whose decoding steps run as a CUDA graph
//    (captured at the second step, replayed with the position read on the device): bit-identical logits (so also
//    deterministic), graph replays counted, and the replays' FFN calls counted in the statistics.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "model/infer_engine.cuh"
#include "model/ref_model.h"
#include "rng.h"
#include "gpu_harness.h"
#include "test_util.h"

static uint64_t g_seed;
static Rng g_rng;

static void fill_bf16(bf16 *h, size_t n, float scale) {
    for (size_t i = 0; i < n; i++) h[i] = __float2bfloat16_rn((float)(rng_normal(&g_rng) * scale));
}

// ---- 1. kv_attention ----
static int check_kv_attention(int B, int T, int pos0, int S, int H, int KVH, int hd) {
    const int n_keys = pos0 + T;
    const size_t nq = (size_t)B * T * H * hd, nc = (size_t)B * S * KVH * hd;
    bf16 *hq = (bf16 *)sllm_malloc(nq * 2), *hk = (bf16 *)sllm_malloc(nc * 2), *hv = (bf16 *)sllm_malloc(nc * 2);
    bf16 *ho = (bf16 *)sllm_malloc(nq * 2);
    fill_bf16(hq, nq, 1.0f);
    fill_bf16(hk, nc, 1.0f);
    fill_bf16(hv, nc, 1.0f);
    bf16 *dq, *dk, *dv, *dout;
    cudaCheck(cudaMalloc(&dq, nq * 2));
    cudaCheck(cudaMalloc(&dk, nc * 2));
    cudaCheck(cudaMalloc(&dv, nc * 2));
    cudaCheck(cudaMalloc(&dout, nq * 2));
    cudaCheck(cudaMemcpy(dq, hq, nq * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dk, hk, nc * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(dv, hv, nc * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(dout, 0xff, nq * 2));  // NaN
    kv_attention(dout, dq, dk, dv, B, T, pos0, NULL, S, H, KVH, hd, 0);
    cudaCheck(cudaDeviceSynchronize());
    cudaCheck(cudaMemcpy(ho, dout, nq * 2, cudaMemcpyDeviceToHost));
    // the position read on the device (as in a replayed graph; shared memory sized for the whole cache): same bits
    int *dpos;
    cudaCheck(cudaMalloc(&dpos, sizeof(int)));
    cudaCheck(cudaMemcpy(dpos, &pos0, sizeof(int), cudaMemcpyHostToDevice));
    cudaCheck(cudaMemset(dout, 0xff, nq * 2));
    kv_attention(dout, dq, dk, dv, B, T, 12345, dpos, S, H, KVH, hd, 0);  // the host value is ignored
    cudaCheck(cudaDeviceSynchronize());
    bf16 *ho2 = (bf16 *)sllm_malloc(nq * 2);
    cudaCheck(cudaMemcpy(ho2, dout, nq * 2, cudaMemcpyDeviceToHost));
    const int same_dev = memcmp(ho, ho2, nq * 2) == 0;
    cudaCheck(cudaFree(dpos));
    free(ho2);
    double *ref = (double *)sllm_malloc(nq * 8), *sc = (double *)sllm_malloc((size_t)n_keys * 8);
    float *got = (float *)sllm_malloc(nq * 4);
    const double scale = 1.0 / sqrt((double)hd);
    for (int b = 0; b < B; b++)
        for (int t = 0; t < T; t++)
            for (int h = 0; h < H; h++) {
                const int kvh = h / (H / KVH), n = pos0 + t + 1;
                const bf16 *qr = hq + (((size_t)b * T + t) * H + h) * hd;
                double mx = -INFINITY, sum = 0;
                for (int j = 0; j < n; j++) {
                    const bf16 *kr = hk + (((size_t)b * S + j) * KVH + kvh) * hd;
                    double s = 0;
                    for (int d = 0; d < hd; d++) s += (double)__bfloat162float(qr[d]) * __bfloat162float(kr[d]);
                    sc[j] = s * scale;
                    mx = fmax(mx, sc[j]);
                }
                for (int j = 0; j < n; j++) { sc[j] = exp(sc[j] - mx); sum += sc[j]; }
                double *o = ref + (((size_t)b * T + t) * H + h) * hd;
                for (int d = 0; d < hd; d++) {
                    double a = 0;
                    for (int j = 0; j < n; j++) a += sc[j] * __bfloat162float(hv[(((size_t)b * S + j) * KVH + kvh) * hd + d]);
                    o[d] = a / sum;
                }
            }
    for (size_t i = 0; i < nq; i++) got[i] = __bfloat162float(ho[i]);
    double e = rel_err_f32(got, ref, nq);
    int fail = !(e < 1e-2) || !same_dev;
    printf("  kv_attention B=%d T=%d pos0=%d S=%d H=%d KVH=%d hd=%d: rel err %.3e, device position %s%s\n", B, T, pos0,
           S, H, KVH, hd, e, same_dev ? "same bits" : "DIFFERS", fail ? "  <-- FAIL" : "");
    if (T == 1) {  // the decoding kernel (keys split over CTAs): the reference, twice the same bits, device position
        KvDecodeWork w;
        kv_decode_work_alloc(&w, B, H, S, hd);
        bf16 *o1 = (bf16 *)sllm_malloc(nq * 2), *o2 = (bf16 *)sllm_malloc(nq * 2);
        cudaCheck(cudaMalloc(&dpos, sizeof(int)));
        cudaCheck(cudaMemcpy(dpos, &pos0, sizeof(int), cudaMemcpyHostToDevice));
        for (int rep = 0; rep < 2; rep++) {
            cudaCheck(cudaMemset(dout, 0xff, nq * 2));
            kv_decode_attention(dout, dq, dk, dv, B, rep ? 0 : pos0, rep ? dpos : NULL, S, H, KVH, hd, &w, 0);
            cudaCheck(cudaDeviceSynchronize());
            cudaCheck(cudaMemcpy(rep ? o2 : o1, dout, nq * 2, cudaMemcpyDeviceToHost));
        }
        for (size_t i = 0; i < nq; i++) got[i] = __bfloat162float(o1[i]);
        const double e2 = rel_err_f32(got, ref, nq);
        const int same = memcmp(o1, o2, nq * 2) == 0;
        int tickets_zero = 1, tk[64];
        cudaCheck(cudaMemcpy(tk, w.ticket, sizeof(int) * B * H, cudaMemcpyDeviceToHost));
        for (int i = 0; i < B * H; i++) tickets_zero &= tk[i] == 0;
        const int f2 = !(e2 < 1e-2) || !same || !tickets_zero;
        printf("  kv_decode_attention (%d key blocks): rel err %.3e, again with the device position: %s, tickets %s%s\n",
               (pos0 + kvd_keys(hd)) / kvd_keys(hd), e2, same ? "same bits" : "DIFFER", tickets_zero ? "reset" : "NOT RESET",
               f2 ? "  <-- FAIL" : "");
        fail |= f2;
        cudaCheck(cudaFree(dpos));
        kv_decode_work_free(&w);
        free(o1); free(o2);
    }
    cudaCheck(cudaFree(dq)); cudaCheck(cudaFree(dk)); cudaCheck(cudaFree(dv)); cudaCheck(cudaFree(dout));
    free(hq); free(hk); free(hv); free(ho); free(ref); free(sc); free(got);
    return fail;
}

static void test_kv_attention(void **state) {
    if (!cuda_device_available()) skip();
    int f = 0;
    f += check_kv_attention(1, 1, 0, 8, 2, 2, 64);        // a single key
    f += check_kv_attention(2, 1, 37, 64, 4, 2, 64);      // decode, GQA
    f += check_kv_attention(1, 5, 100, 128, 4, 4, 128);   // a chunk after the first, hd 128
    f += check_kv_attention(3, 3, 10, 20, 6, 3, 24);      // hd 24 (3 chunks of 8: idle threads), odd sizes
    f += check_kv_attention(1, 2, 3000, 3100, 2, 1, 32);  // ~3000 keys (more shared memory than the default 48 KB)
    f += check_kv_attention(2, 1, 129, 131, 32, 32, 64);  // the paper's heads, just past one pass of 128 threads
    f += check_kv_attention(1, 1, 127, 300, 32, 32, 64);  // decoding: 128 keys (half a block)
    f += check_kv_attention(2, 1, 383, 384, 32, 8, 64);   // a block and a half, GQA, the last cache position
    f += check_kv_attention(1, 1, 4000, 4096, 2, 1, 128); // 16 blocks, hd 128
    f += check_kv_attention(2, 1, 200, 256, 6, 3, 24);    // hd 24, a partial second block
    f += check_kv_attention(1, 1, 255, 300, 32, 32, 64);  // 256 keys (one block at hd <= 128)
    f += check_kv_attention(2, 1, 511, 512, 8, 8, 128);   // two full blocks of 256, hd 128
    f += check_kv_attention(2, 1, 250, 256, 4, 2, 96);    // hd 96: 12 chunks, 10 key groups (13 keys per p v thread)
    f += check_kv_attention(1, 1, 1, 8, 2, 2, 128);       // two keys: the newest one's value in the second group
    f += check_kv_attention(1, 1, 511, 600, 32, 32, 64);  // 512 keys: one full block at hd <= 64
    f += check_kv_attention(2, 1, 700, 1100, 4, 2, 64);   // a full block of 512 and a partial one
    assert_int_equal(f, 0);
    // argument checks
    char err[256];
    assert_int_equal(kv_attention_check(1, 4, 10, 12, 2, 2, 64, err, sizeof err), -1);  // past the cache
    assert_int_equal(kv_attention_check(1, 1, 0, 8, 3, 2, 64, err, sizeof err), -1);   // H % KVH
    assert_int_equal(kv_attention_check(1, 1, 0, 8, 2, 2, 12, err, sizeof err), -1);   // hd % 8
}

// ---- 2. RoPE at an offset ----
static void test_rope_at(void **state) {
    if (!cuda_device_available()) skip();
    const int B = 2, T = 12, H = 3, KVH = 1, hd = 32, N = B * T;
    float *tab = (float *)sllm_malloc((size_t)T * hd * 4);
    rope_build_table(tab, T, hd, 10000.0);
    float *dtab;
    cudaCheck(cudaMalloc(&dtab, (size_t)T * hd * 4));
    cudaCheck(cudaMemcpy(dtab, tab, (size_t)T * hd * 4, cudaMemcpyHostToDevice));
    const size_t nq = (size_t)N * H * hd, nk = (size_t)N * KVH * hd;
    bf16 *hq = (bf16 *)sllm_malloc(nq * 2), *hk = (bf16 *)sllm_malloc(nk * 2);
    fill_bf16(hq, nq, 1.0f);
    fill_bf16(hk, nk, 1.0f);
    bf16 *q1, *k1, *q2, *k2;
    cudaCheck(cudaMalloc(&q1, nq * 2)); cudaCheck(cudaMalloc(&q2, nq * 2));
    cudaCheck(cudaMalloc(&k1, nk * 2)); cudaCheck(cudaMalloc(&k2, nk * 2));
    cudaCheck(cudaMemcpy(q1, hq, nq * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(k1, hk, nk * 2, cudaMemcpyHostToDevice));
    rope_forward_qk(q1, H, k1, KVH, dtab, N, T, hd, 0);  // the training RoPE: whole sequences
    // the same rows as 2 sequences continuing at pos0 = 5 with 7 new rows each: positions 5..11
    const int pos0 = 5, Tn = T - pos0;
    bf16 *sq = (bf16 *)sllm_malloc(nq * 2), *sk = (bf16 *)sllm_malloc(nk * 2);
    for (int b = 0; b < B; b++) {
        memcpy(sq + (size_t)b * Tn * H * hd, hq + ((size_t)b * T + pos0) * H * hd, (size_t)Tn * H * hd * 2);
        memcpy(sk + (size_t)b * Tn * KVH * hd, hk + ((size_t)b * T + pos0) * KVH * hd, (size_t)Tn * KVH * hd * 2);
    }
    cudaCheck(cudaMemcpy(q2, sq, (size_t)B * Tn * H * hd * 2, cudaMemcpyHostToDevice));
    cudaCheck(cudaMemcpy(k2, sk, (size_t)B * Tn * KVH * hd * 2, cudaMemcpyHostToDevice));
    rope_forward_qk_at(q2, H, k2, KVH, dtab, B * Tn, Tn, pos0, NULL, hd, 0);
    cudaCheck(cudaDeviceSynchronize());
    bf16 *r1 = (bf16 *)sllm_malloc(nq * 2), *r2 = (bf16 *)sllm_malloc(nq * 2);
    bf16 *s1 = (bf16 *)sllm_malloc(nk * 2), *s2 = (bf16 *)sllm_malloc(nk * 2);
    cudaCheck(cudaMemcpy(r1, q1, nq * 2, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(r2, q2, (size_t)B * Tn * H * hd * 2, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(s1, k1, nk * 2, cudaMemcpyDeviceToHost));
    cudaCheck(cudaMemcpy(s2, k2, (size_t)B * Tn * KVH * hd * 2, cudaMemcpyDeviceToHost));
    // the position read on the device: same bits
    {
        bf16 *q3, *k3;
        int *dpos;
        cudaCheck(cudaMalloc(&q3, nq * 2)); cudaCheck(cudaMalloc(&k3, nk * 2)); cudaCheck(cudaMalloc(&dpos, 4));
        cudaCheck(cudaMemcpy(q3, sq, (size_t)B * Tn * H * hd * 2, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(k3, sk, (size_t)B * Tn * KVH * hd * 2, cudaMemcpyHostToDevice));
        cudaCheck(cudaMemcpy(dpos, &pos0, 4, cudaMemcpyHostToDevice));
        rope_forward_qk_at(q3, H, k3, KVH, dtab, B * Tn, Tn, 0, dpos, hd, 0);
        cudaCheck(cudaDeviceSynchronize());
        bf16 *r3 = (bf16 *)sllm_malloc(nq * 2), *s3 = (bf16 *)sllm_malloc(nk * 2);
        cudaCheck(cudaMemcpy(r3, q3, (size_t)B * Tn * H * hd * 2, cudaMemcpyDeviceToHost));
        cudaCheck(cudaMemcpy(s3, k3, (size_t)B * Tn * KVH * hd * 2, cudaMemcpyDeviceToHost));
        assert_memory_equal(r3, r2, (size_t)B * Tn * H * hd * 2);
        assert_memory_equal(s3, s2, (size_t)B * Tn * KVH * hd * 2);
        cudaCheck(cudaFree(q3)); cudaCheck(cudaFree(k3)); cudaCheck(cudaFree(dpos));
        free(r3); free(s3);
    }
    for (int b = 0; b < B; b++) {
        assert_memory_equal(r2 + (size_t)b * Tn * H * hd, r1 + ((size_t)b * T + pos0) * H * hd, (size_t)Tn * H * hd * 2);
        assert_memory_equal(s2 + (size_t)b * Tn * KVH * hd, s1 + ((size_t)b * T + pos0) * KVH * hd,
                            (size_t)Tn * KVH * hd * 2);
    }
    // and the rotation did something (the test can fail): row 11 of q changed
    assert_true(memcmp(r1 + (size_t)11 * H * hd, hq + (size_t)11 * H * hd, (size_t)H * hd * 2) != 0);
    cudaCheck(cudaFree(q1)); cudaCheck(cudaFree(q2)); cudaCheck(cudaFree(k1)); cudaCheck(cudaFree(k2));
    cudaCheck(cudaFree(dtab));
    free(tab); free(hq); free(hk); free(sq); free(sk); free(r1); free(r2); free(s1); free(s2);
}

// ---- 3. the engine against the float64 model ----
static void tiny_config(ModelConfig *c, int gated, int V, int D, int L, int H, int KVH, int F, int T) {
    config_defaults(c);
    c->vocab_size = V; c->d_model = D; c->n_layer = L; c->n_head = H; c->n_kv_head = KVH; c->head_dim = D / H;
    c->d_ff = F; c->max_seq = T; c->gated = gated;
}

typedef enum { RUN_DENSE, RUN_DENSE_CUBLAS, RUN_SPARSE, RUN_TILE, RUN_AUTO } RunKind;
static const char *run_name(RunKind k) {
    return k == RUN_DENSE ? "dense" : k == RUN_DENSE_CUBLAS ? "dense, no GEMV" : k == RUN_SPARSE ? "sparse"
         : k == RUN_TILE ? "sparse, tile path" : "auto";
}

// Feeds the sequences in the given steps (tokens per sequence per call) from an empty cache; the logits of every call
// go to out (call after call, B * steps[s] rows each). decode: the steps of 1 token go through infer_decode (the first
// eagerly, then a CUDA graph when the mode allows it), else through infer_forward.
static void feed(Infer *m, const int *tok, int B, int T, const int *steps, int nsteps, int decode, float *out) {
    const int V = m->cfg.vocab_size;
    int *buf = (int *)sllm_malloc((size_t)B * m->chunk * 4);
    infer_reset(m);
    int pos = 0;
    size_t off = 0;
    for (int s = 0; s < nsteps; s++) {
        const int Tn = steps[s];
        for (int b = 0; b < B; b++)
            for (int t = 0; t < Tn; t++) buf[b * Tn + t] = tok[b * T + pos + t];
        cudaCheck(cudaMemsetAsync(m->logits, 0xff, (size_t)B * Tn * V * 4, m->stream));  // NaN: every row must be written
        if (decode && Tn == 1 && pos > 0) infer_decode(m, buf);
        else infer_forward(m, buf, Tn);
        infer_get_logits(m, out + off, B * Tn);
        off += (size_t)B * Tn * V;
        pos += Tn;
    }
    free(buf);
}

// Every call's logits against the reference rows of the same positions (2e-2), then the same sequences again through
// infer_decode (CUDA graphs where the mode allows): bit-identical logits, graphs replayed where expected. Returns
// failures.
static int run_engine(const ModelConfig *c, const float *pf, const int *tok, const double *ref, int B, int T,
                      RunKind kind, const int *steps, int nsteps) {
    const int V = c->vocab_size, chunk = 8;
    Infer m;
    const int dense = kind == RUN_DENSE || kind == RUN_DENSE_CUBLAS;
    infer_create(&m, c, B, T, chunk, dense ? INFER_FFN_DENSE : kind == RUN_AUTO ? INFER_FFN_AUTO : INFER_FFN_SPARSE, 1, 0);
    m.use_gemv = kind != RUN_DENSE_CUBLAS;  // decoding steps on core/gemv.cuh (B <= GEMV_MAX_M) or on cuBLASLt
    infer_set_params(&m, pf);
    if (kind == RUN_TILE)
        for (int l = 0; l < c->n_layer; l++) assert_int_equal(twell_ffn_set_decode_rows(&m.ws[l], 0), 0);
    const size_t total = (size_t)B * T * V;
    float *lg = (float *)sllm_malloc(total * 4), *lg2 = (float *)sllm_malloc(total * 4);
    double *rr = (double *)sllm_malloc((size_t)B * chunk * V * 8);
    feed(&m, tok, B, T, steps, nsteps, 0, lg);
    int failures = 0, pos = 0;
    double worst = 0;
    size_t off = 0;
    for (int s = 0; s < nsteps; s++) {
        const int Tn = steps[s];
        for (int b = 0; b < B; b++)
            memcpy(rr + (size_t)b * Tn * V, ref + ((size_t)b * T + pos) * V, (size_t)Tn * V * 8);
        double e = rel_err_f32(lg + off, rr, (size_t)B * Tn * V);
        worst = fmax(worst, e);
        if (!(e < 2e-2)) {
            printf("    step %d (positions %d..%d): rel err %.3e  <-- FAIL\n", s, pos, pos + Tn - 1, e);
            failures++;
        }
        off += (size_t)B * Tn * V;
        pos += Tn;
    }
    assert_int_equal(m.pos, T);
    long long dec = 0, tile = 0, dns = 0, ovf = 0;
    for (int l = 0; l < c->n_layer; l++) {
        dec += m.stats[l].calls_decode; tile += m.stats[l].calls_tile; dns += m.stats[l].calls_dense;
        if (m.ws) {  // the TwELL modes: the tile calls' counts come back without a sync (tile_sync 0)
            twell_ffn_read_tile_stats(&m.ws[l]);
            ovf += m.ws[l].tile_ovf_rows;
        }
    }
    printf("  %-18s %d calls: worst rel err %.3e (tol 2e-2); FFN calls decode %lld, tile %lld (overflow rows %lld), "
           "dense %lld%s\n", run_name(kind), nsteps, worst, dec, tile, ovf, dns, failures ? "  <-- FAIL" : "");
    const long long calls = (long long)nsteps * c->n_layer;
    if (kind == RUN_SPARSE && dec != calls) { printf("    expected every call on the decode path\n"); failures++; }
    if (kind == RUN_TILE && (tile != calls || ovf == 0)) { printf("    expected tile calls with overflow rows\n"); failures++; }
    if (kind == RUN_AUTO && dec + tile + dns != calls) failures++;
    if (kind == RUN_AUTO)  // decoding steps: AUTO measured both paths on every layer
        for (int l = 0; l < c->n_layer; l++)
            if (m.dec_path[l] != 1 && m.dec_path[l] != 2) {
                printf("    layer %d: no measured decode path (%d)  <-- FAIL\n", l, m.dec_path[l]);
                failures++;
            }
    // the same again with infer_decode: graphs (dense, sparse) or eager (tile path: B > decode rows 0), same bits
    if (kind != RUN_AUTO) {
        feed(&m, tok, B, T, steps, nsteps, 1, lg2);
        const int want_graph = kind != RUN_TILE;
        const int same = memcmp(lg, lg2, total * 4) == 0;
        printf("  %-18s again through infer_decode: %lld graph replays, logits %s%s\n", run_name(kind),
               m.graph_replays, same ? "bit-identical" : "DIFFER",
               same && (m.graph_replays > 0) == want_graph ? "" : "  <-- FAIL");
        if (!same || (m.graph_replays > 0) != want_graph) failures++;
        long long dec2 = 0;
        for (int l = 0; l < c->n_layer; l++) dec2 += m.stats[l].calls_decode;
        if (kind == RUN_SPARSE && dec2 != 2 * calls) {  // replays counted like eager calls
            printf("    decode calls after both passes %lld, expected %lld  <-- FAIL\n", dec2, 2 * calls);
            failures++;
        }
    }
    // greedy_dev: the decoding steps pick the greedy token on the GPU (argmax fused into the LM head). The tokens must
    // be the host sampler's argmax of the same logits, and the logits the same bits as without it.
    if (kind == RUN_DENSE || kind == RUN_DENSE_CUBLAS || kind == RUN_SPARSE) {
        m.greedy_dev = 1;
        int *buf = (int *)sllm_malloc((size_t)B * 4), *got = (int *)sllm_malloc((size_t)B * 4);
        float *row = (float *)sllm_malloc((size_t)B * V * 4);
        int checked = 0, bad = 0, differ = 0;
        long long replays0 = m.graph_replays;
        infer_reset(&m);
        size_t off = 0;
        int pos = 0;
        for (int st = 0; st < nsteps; st++) {
            const int Tn = steps[st];
            if (Tn == 1 && pos > 0) {
                for (int b = 0; b < B; b++) buf[b] = tok[b * T + pos];
                infer_decode(&m, buf);
                infer_get_greedy(&m, got);
                infer_get_logits(&m, row, B);
                checked += m.argmax_ready;
                for (int b = 0; b < B; b++) bad += got[b] != sampler_argmax(row + (size_t)b * V, V);
                for (int b = 0; b < B; b++) differ += memcmp(row + (size_t)b * V, lg2 + off + (size_t)b * V, 4 * V) != 0;
            } else {  // a prompt chunk: the keys of each sequence's last row (argmax_rows after the LM head)
                int *chunk = (int *)sllm_malloc((size_t)B * Tn * 4);
                float *rows = (float *)sllm_malloc((size_t)B * Tn * V * 4);
                for (int b = 0; b < B; b++)
                    for (int t = 0; t < Tn; t++) chunk[b * Tn + t] = tok[b * T + pos + t];
                infer_forward(&m, chunk, Tn);
                infer_get_greedy(&m, got);
                infer_get_logits(&m, rows, B * Tn);
                checked += m.argmax_ready;
                for (int b = 0; b < B; b++)
                    bad += got[b] != sampler_argmax(rows + ((size_t)b * Tn + Tn - 1) * V, V);
                free(chunk); free(rows);
            }
            off += (size_t)B * Tn * V;
            pos += Tn;
        }
        const int ok = checked > 0 && bad == 0 && differ == 0 && m.graph_replays > replays0;
        printf("  %-18s greedy on the GPU: %d calls with argmax keys, %d tokens differ from the host argmax, logits "
               "%s, %lld graph replays%s\n", run_name(kind), checked, bad, differ ? "DIFFER" : "bit-identical",
               m.graph_replays - replays0, ok ? "" : "  <-- FAIL");
        if (!ok) failures++;
        free(buf); free(got); free(row);
    }
    free(lg); free(lg2); free(rr);
    infer_free(&m);
    return failures;
}

static int compare_engine(const ModelConfig *c, int B, int T) {
    const int N = B * T, V = c->vocab_size;
    printf("config: V=%d D=%d L=%d H=%d KVH=%d hd=%d F=%d gated=%d, B=%d T=%d\n", V, c->d_model, c->n_layer, c->n_head,
           c->n_kv_head, c->head_dim, c->d_ff, c->gated, B, T);
    RefModel rm;
    ref_model_init(&rm, c, g_seed);
    const size_t total = rm.lay.total;
    float *pf = (float *)sllm_malloc(total * 4);
    ref_model_to_f32(&rm, pf);
    for (size_t i = 0; i < total; i++) pf[i] = sllm_round_bf16(pf[i]);  // both sides use the bf16 weights
    ref_model_from_f32(&rm, pf);
    int *tok = (int *)sllm_malloc(N * 4), *tgt = (int *)sllm_malloc(N * 4);
    for (int i = 0; i < N; i++) { tok[i] = (int)rng_below(&g_rng, V); tgt[i] = (int)rng_below(&g_rng, V); }
    double *ref = (double *)sllm_malloc((size_t)N * V * 8);
    ref_forward_backward(&rm, tok, tgt, B, T, ref, NULL, NULL);
    // prompt chunks 8 + 8 + 1 + 5 (the first through the training attention, then the cache), then decoding
    int steps[64], ns = 0, p = 0;
    const int pre[4] = {8, 8, 1, 5};
    for (int i = 0; i < 4; i++) { steps[ns++] = pre[i]; p += pre[i]; }
    while (p < T) { steps[ns++] = 1; p++; }
    int f = 0;
    const RunKind kinds[5] = {RUN_DENSE, RUN_DENSE_CUBLAS, RUN_SPARSE, RUN_TILE, RUN_AUTO};
    for (int k = 0; k < 5; k++) f += run_engine(c, pf, tok, ref, B, T, kinds[k], steps, ns);
    free(pf); free(tok); free(tgt); free(ref);
    ref_model_free(&rm);
    return f;
}

static void test_engine_gated(void **state) {
    if (!cuda_device_available()) skip();
    ModelConfig c;
    tiny_config(&c, 1, 512, 128, 2, 4, 4, 512, 40);
    assert_int_equal(compare_engine(&c, 2, 40), 0);
}

static void test_engine_nongated_gqa(void **state) {
    if (!cuda_device_available()) skip();
    ModelConfig c;
    tiny_config(&c, 0, 384, 128, 2, 4, 2, 256, 40);
    assert_int_equal(compare_engine(&c, 2, 40), 0);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kv_attention),
        cmocka_unit_test(test_rope_at),
        cmocka_unit_test(test_engine_gated),
        cmocka_unit_test(test_engine_nongated_gqa),
    };
    GPU_TEST_PREFLIGHT("test_infer", tests);
    g_seed = gpu_test_seed("test_infer");
    rng_seed(&g_rng, g_seed);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
