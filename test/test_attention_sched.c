// The work orders of the Hopper attention kernels (core/attention_sched.h): every forward tile and backward block
// is taken exactly once, the heaviest first, and the orders balance the SMs at least as well as the plain ones they
// replaced (a round-robin forward; a backward grid taken one head after another).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "core/attention_sched.h"

#define FWD_BM 192  // the forward's query rows per tile (AWG_FWD_BM)
#define KEY_BN 128  // keys per block (AWG_BN)

// Key blocks of the forward tile at query block mb: up to its last row < T (the tile's work).
static int fwd_tile_blocks(int mb, int T) {
    const int q0 = mb * FWD_BM, last = q0 + FWD_BM < T ? q0 + FWD_BM : T;
    return (last - 1) / KEY_BN + 1;
}

// Per-CTA work of the persistent forward (G CTAs, the grid the launcher picks: min(tiles, G)); every tile checked
// to be taken once, a CTA's indices increasing. snake 0: the plain round-robin x, x + G, ... Returns the largest
// CTA load; *mean the mean.
static int fwd_loads(int B, int H, int T, int G, int snake, double *mean) {
    const int nmb = (T + FWD_BM - 1) / FWD_BM, nt = nmb * H * B;
    if (G > nt) G = nt;
    char *seen = (char *)calloc((size_t)nt, 1);
    long total = 0;
    int maxl = 0;
    for (int x = 0; x < G; x++) {
        int load = 0, prev = -1;
        for (int n = 0;; n++) {
            const int i = snake ? attn_fwd_tile_index(n, x, G) : n * G + x;
            if (i >= nt) break;
            assert_true(i > prev);
            prev = i;
            assert_int_equal(seen[i], 0);
            seen[i] = 1;
            int mb, h, b;
            attn_fwd_tile(i, nmb, H, B, &mb, &h, &b);
            load += fwd_tile_blocks(mb, T);
        }
        total += load;
        if (load > maxl) maxl = load;
    }
    for (int i = 0; i < nt; i++) assert_int_equal(seen[i], 1);
    free(seen);
    *mean = (double)total / G;
    return maxl;
}

static void test_fwd_tiles_once(void **state) {
    (void)state;
    const int Ts[] = {1, 100, 191, 192, 193, 1000, 2048, 4096}, Hs[] = {1, 8, 32}, Bs[] = {1, 3, 8},
              Gs[] = {1, 7, 132, 100000};
    for (size_t a = 0; a < sizeof Ts / sizeof *Ts; a++)
        for (size_t c = 0; c < sizeof Hs / sizeof *Hs; c++)
            for (size_t d = 0; d < sizeof Bs / sizeof *Bs; d++)
                for (size_t e = 0; e < sizeof Gs / sizeof *Gs; e++) {
                    double mean;
                    fwd_loads(Bs[d], Hs[c], Ts[a], Gs[e], 1, &mean);
                }
}

// Tile order: every (mb, h, b) once, the query blocks non-increasing (the latest, heaviest, first).
static void test_fwd_tile_map(void **state) {
    (void)state;
    const int nmb = 11, H = 32, B = 4, nt = nmb * H * B;
    char *seen = (char *)calloc((size_t)nt, 1);
    int prev_mb = nmb;
    for (int i = 0; i < nt; i++) {
        int mb, h, b;
        attn_fwd_tile(i, nmb, H, B, &mb, &h, &b);
        assert_true(mb >= 0 && mb < nmb && h >= 0 && h < H && b >= 0 && b < B);
        assert_true(mb <= prev_mb);
        prev_mb = mb;
        const int k = (mb * B + b) * H + h;
        assert_int_equal(seen[k], 0);
        seen[k] = 1;
    }
    assert_int_equal(prev_mb, 0);
    free(seen);
}

// Alternating rounds balance at least as well as the round-robin at the paper's shapes and at a short prompt.
static void test_fwd_balance(void **state) {
    (void)state;
    const int shapes[][3] = {{1, 32, 2048}, {4, 32, 2048}, {8, 32, 2048}, {1, 32, 1000}, {4, 32, 4096}, {8, 32, 4096}};
    for (size_t s = 0; s < sizeof shapes / sizeof *shapes; s++) {
        double mean_rr, mean_sn;
        const int rr = fwd_loads(shapes[s][0], shapes[s][1], shapes[s][2], 132, 0, &mean_rr);
        const int sn = fwd_loads(shapes[s][0], shapes[s][1], shapes[s][2], 132, 1, &mean_sn);
        assert_true(sn <= rr);
        assert_true(sn <= 1.11 * mean_sn);  // B 1, T 2048: 27 key blocks against a mean of 24.5 (round-robin: 32)
    }
}

// The backward order: a bijection of the linear blocks onto (rank, y, z); within a chunk the ranks never decrease;
// with one pair per chunk it is the grid's own order (rank = x).
static void check_bwd_order(int nx, int ny, int nz, int hc) {
    const int n = nx * ny * nz;
    char *seen = (char *)calloc((size_t)n, 1);
    int prev_rank = 0, prev_chunk = 0;
    for (int L = 0; L < n; L++) {
        int rank, y, z;
        attn_bwd_block(L % nx, (L / nx) % ny, L / (nx * ny), nx, ny, nz, hc, &rank, &y, &z);
        assert_true(rank >= 0 && rank < nx && y >= 0 && y < ny && z >= 0 && z < nz);
        const int k = (z * ny + y) * nx + rank;
        assert_int_equal(seen[k], 0);
        seen[k] = 1;
        const int chunk = L / (nx * hc);
        if (chunk == prev_chunk) assert_true(rank >= prev_rank);
        prev_rank = rank;
        prev_chunk = chunk;
        if (hc == 1) {
            assert_int_equal(rank, L % nx);
            assert_int_equal(y, (L / nx) % ny);
            assert_int_equal(z, L / (nx * ny));
        }
    }
    free(seen);
}

static void test_bwd_blocks_once(void **state) {
    (void)state;
    const int nxs[] = {1, 2, 16, 17}, nys[] = {1, 8, 32}, nzs[] = {1, 3, 8}, hcs[] = {1, 3, 16, 64, 1000};
    for (size_t a = 0; a < sizeof nxs / sizeof *nxs; a++)
        for (size_t b = 0; b < sizeof nys / sizeof *nys; b++)
            for (size_t c = 0; c < sizeof nzs / sizeof *nzs; c++)
                for (size_t d = 0; d < sizeof hcs / sizeof *hcs; d++) check_bwd_order(nxs[a], nys[b], nzs[c], hcs[d]);
}

// List scheduling of the dK/dV grid as the hardware runs it (blocks in linear order, each to the first free SM; a
// block's time = its query blocks + 1 for its K, V load and epilogue): the chunked order ends no later than one head
// after another.
static long bwd_makespan(int nx, int ny, int nz, int hc, int sms) {
    long *t = (long *)calloc((size_t)sms, sizeof(long));
    for (int L = 0; L < nx * ny * nz; L++) {
        int rank, y, z, s = 0;
        attn_bwd_block(L % nx, (L / nx) % ny, L / (nx * ny), nx, ny, nz, hc, &rank, &y, &z);
        for (int i = 1; i < sms; i++)
            if (t[i] < t[s]) s = i;
        t[s] += nx - rank + 1;
    }
    long m = 0;
    for (int i = 0; i < sms; i++)
        if (t[i] > m) m = t[i];
    free(t);
    return m;
}

static void test_bwd_balance(void **state) {
    (void)state;
    const int Bs[] = {1, 4, 8};
    for (size_t i = 0; i < sizeof Bs / sizeof *Bs; i++) {
        const long plain = bwd_makespan(16, 32, Bs[i], 1, 132), chunked = bwd_makespan(16, 32, Bs[i], 16, 132);
        assert_true(chunked <= plain);
        if (Bs[i] == 1) assert_true(chunked < plain);  // 38 against 47 (model units)
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fwd_tiles_once), cmocka_unit_test(test_fwd_tile_map),
        cmocka_unit_test(test_fwd_balance),    cmocka_unit_test(test_bwd_blocks_once),
        cmocka_unit_test(test_bwd_balance),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
