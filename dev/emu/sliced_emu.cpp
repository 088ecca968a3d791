// dev/emu/sliced_emu.cpp: runs the sliced (D-sliced, tensor-core) TwELL up/down kernels of twell/sliced.cuh on
// the CPU (dev/emu/emu_core.h) against a float64 reference: both slot orders (every pair exactly once, token of a
// down slot = its position, classes per ldmatrix phase), dpos, blocks that do not fit (dense fallback rows),
// fragment layouts and swizzles (through the results). Build + run: bash dev/emu/run.sh sliced [quick]
#define EMU_SMEM_NAME twell_sl_smem
#include "emu_core.h"

#include <cmath>

#include "twell/format.h"
#include "twell/sliced.cuh"

alignas(128) unsigned char twell_sl_smem[EMU_SMEM_BYTES];

static uint64_t rs = 88172645463325252ull;
static double urand() { rs ^= rs << 13; rs ^= rs >> 7; rs ^= rs << 17; return (rs >> 11) * 0x1.0p-53; }
static double nrand() { return sqrt(-2 * log(urand() + 1e-300)) * cos(6.283185307179586 * urand()); }
static float rb(float f) { return __bfloat162float(__float2bfloat16(f)); }

static const int kOptin = 232448;  // sm_90 opt-in shared memory per block

#define fail(...) do { printf("  FAIL: "); printf(__VA_ARGS__); printf("\n"); ok = 0; } while (0)

// Gate pre-activations: uniform nnz per row, or (mix) zero rows, full rows (TwELL overflow), heavy rows, rows with
// exactly `slots` actives in one tile.
static int run_case(int M, int D, int F, int C, int gated, double nnz, int slots_per_token, int mix) {
    const int tiles = F / TWELL_TILE, words = TWELL_TILE / C, slots = words - 1;
    std::vector<float> acc((size_t)M * F);
    for (int m = 0; m < M; m++) {
        int kind = mix ? (m < 2 ? 3 : (int)(urand() * 12)) : 0;
        double p = nnz / F;
        if (kind == 1) p = 0;
        else if (kind == 2) p = 1;
        else if (kind == 3) p = 0.05 + 0.2 * urand();
        for (int n = 0; n < F; n++) {
            double v = fabs(nrand()) + 0.01;
            acc[(size_t)m * F + n] = (float)(urand() < p ? v : -v);
        }
        if (kind == 4) {
            for (int n = 0; n < F; n++) acc[(size_t)m * F + n] = -1.0f;
            for (int k = 0; k < slots; k++) acc[(size_t)m * F + (k * 7) % 256] = 0.5f + (float)k;
        }
    }
    TwellShape s;
    twell_shape_init(&s, M, F, C);
    std::vector<uint32_t> tw((size_t)M * s.row_words);
    std::vector<int> ovf_rows(M);
    uint64_t nnz_tot = 0;
    const int n_tw_ovf = twell_pack_cpu(&s, acc.data(), (size_t)F, tw.data(), ovf_rows.data(), &nnz_tot);
    std::vector<int> ovf_flag(M, 0), ovf_list(M + 8, -1);
    for (int i = 0; i < n_tw_ovf; i++) { ovf_flag[ovf_rows[i]] = 1; ovf_list[i] = ovf_rows[i]; }
    std::vector<float> X((size_t)M * D), Wu((size_t)F * D), WdT((size_t)F * D);
    for (auto &v : X) v = rb((float)nrand());
    for (auto &v : Wu) v = rb((float)(0.05 * nrand()));
    for (auto &v : WdT) v = rb((float)(0.05 * nrand()));
    auto tobf = [](const std::vector<float> &x) {
        std::vector<bf16> y(x.size());
        for (size_t i = 0; i < x.size(); i++) y[i] = __float2bfloat16(x[i]);
        return y;
    };
    std::vector<bf16> bX = tobf(X), bWu = tobf(Wu), bWdT = tobf(WdT);
    // Workspace shapes as twell_sliced_create computes them.
    int UG = 0, NG = 1, rsu = 0;
    if (gated) NG = twell_sl_up_config(F, kOptin, &UG, &rsu);
    else UG = (F + 7) & ~7;
    const int rsd = twell_sl_down_config(F, kOptin);
    if (NG == 0 || rsd == 0) { printf("emu: no configuration for F=%d\n", F); return 0; }
    const int SB = twell_sl_block_slots(slots_per_token);
    const int nblocks = (M + TWELL_SL_TOK - 1) / TWELL_SL_TOK, NSU = D / TWELL_SL_UCOLS, NSD = D / TWELL_SL_DCOLS;
    const size_t cap = (size_t)nblocks * SB;
    std::vector<uint32_t> rec(cap, 0xDEADBEEFu), recd(cap, 0xDEADBEEFu);
    std::vector<int> dpos(cap, -1);
    std::vector<SlBlockInfo> info(nblocks);
    std::vector<float> part(gated ? cap * NSU : 1, NAN);
    int n_ovf = n_tw_ovf, sl_rows = 0;
    TwellSlGroupWalk w;
    w.tw = tw.data(); w.ovf_flag = ovf_flag.data(); w.M = M; w.F = F; w.words = words; w.slots = slots;
    w.row_words = s.row_words; w.UG = UG;
    const std::vector<int> ovf_before = ovf_flag;
    emu_launch({(unsigned)CEIL_DIV(nblocks, TWELL_SL_CMP_WARPS), 1, 1}, TWELL_SL_CMP_WARPS * 32, [&] {
        twell_sl_compact_kernel(w, NG, SB, gated, rec.data(), dpos.data(), recd.data(), info.data(), ovf_list.data(),
                                &n_ovf, &sl_rows);
    });
    int ok = 1;
    if (getenv("EMU_INFO"))
        for (int b = 0; b < nblocks; b++) {
            printf("block %d: ustart", b);
            for (int g = 0; g <= NG; g++) printf(" %d", info[b].ustart[g]);
            printf(" dsize %d rows", info[b].dsize);
            for (int j = 0; j < 8 && b * 8 + j < M; j++) printf(" %d%s", b * 8 + j, ovf_flag[b * 8 + j] ? (ovf_before[b * 8 + j] ? "T" : "S") : "");
            printf("\n");
        }
    // float64 references over the rows that stay sparse: exact, and with h rounded to bf16 (as the kernels).
    std::vector<double> ref((size_t)M * D, 0.0), refh((size_t)M * D, 0.0);
    std::vector<int> row_nnz(M, 0);
    for (int m = 0; m < M; m++) {
        if (ovf_flag[m]) continue;
        for (int t = 0; t < tiles; t++) {
            const uint32_t *tile = &tw[(size_t)m * s.row_words + (size_t)t * words];
            for (uint32_t k = 1; k <= tile[0]; k++) {
                const int n = t * TWELL_TILE + twell_word_col(tile[k]);
                const double gv = twell_bf16_to_f32(twell_word_bits(tile[k]));
                double h = gv;
                if (gated) {
                    double u = 0;
                    for (int d = 0; d < D; d++) u += (double)X[(size_t)m * D + d] * Wu[(size_t)n * D + d];
                    h = gv * u;
                }
                const double hb = rb((float)h);
                for (int d = 0; d < D; d++) {
                    ref[(size_t)m * D + d] += h * WdT[(size_t)n * D + d];
                    refh[(size_t)m * D + d] += hb * WdT[(size_t)n * D + d];
                }
                row_nnz[m]++;
            }
        }
    }
    // Dense-fallback rows: exactly the rows of blocks that did not fit, each listed once.
    int new_rows = 0;
    for (int m = 0; m < M; m++) new_rows += ovf_flag[m] && !ovf_before[m];
    if (new_rows != sl_rows || n_ovf != n_tw_ovf + sl_rows) fail("fallback rows %d, counted %d, list %d", new_rows, sl_rows, n_ovf);
    {
        std::vector<int> l(ovf_list.begin(), ovf_list.begin() + n_ovf);
        std::sort(l.begin(), l.end());
        for (size_t i = 1; i < l.size(); i++)
            if (l[i] == l[i - 1]) fail("row %d listed twice", l[i]);
    }
    // Layout checks per fitting block.
    long long uphases = 0, uconf = 0, dphases = 0, dwave = 0, upad = 0, dslots = 0, pairs = 0;
    for (int b = 0; b < nblocks; b++) {
        const SlBlockInfo &bi = info[b];
        const size_t bb = (size_t)b * SB;
        bool fits = true;
        for (int j = 0; j < 8 && b * 8 + j < M; j++)
            if (ovf_flag[b * 8 + j] && !ovf_before[b * 8 + j]) fits = false;
        if (!fits) {
            if (bi.ustart[NG] != 0 || bi.dsize != 0) fail("block %d did not fit but has sizes %d %d", b, bi.ustart[NG], bi.dsize);
            continue;
        }
        if (bi.ustart[NG] > SB || bi.dsize > SB || bi.dsize % 16) fail("block %d sizes %d %d (SB %d)", b, bi.ustart[NG], bi.dsize, SB);
        std::vector<std::pair<int, int>> got, want;  // (token j, unit n)
        std::vector<int> seen(bi.dsize, 0);
        for (int g = 0; g < NG; g++) {
            const int gb = bi.ustart[g], ge = bi.ustart[g + 1];
            if ((ge - gb) % 8) fail("block %d group %d segment size %d", b, g, ge - gb);
            for (int q = gb; q < ge; q++) {
                const uint32_t r = rec[bb + q];
                const int n = TWELL_SL_REC_N(r), j = TWELL_SL_REC_J(r);
                if (n < g * UG || n >= std::min((g + 1) * UG, F)) fail("block %d: unit %d outside group %d", b, n, g);
                if ((r >> 16) == 0) { upad++; continue; }
                got.push_back({j, n});
                const int row = b * 8 + j;
                const uint32_t *tile = &tw[(size_t)row * s.row_words + (size_t)(n / 256) * words];
                bool found = false;
                for (uint32_t k = 1; k <= tile[0] && (int)k <= slots; k++)
                    if (twell_word_col(tile[k]) == n % 256 && twell_word_bits(tile[k]) == (r >> 16)) found = true;
                if (!found || ovf_flag[row]) fail("record of row %d unit %d not in the TwELL", row, n);
                const int dp = dpos[bb + q] - (int)bb;
                if (dp < 0 || dp >= bi.dsize) { fail("dpos of block %d slot %d = %d outside [0, %d)", b, q, dp, bi.dsize); continue; }
                if (seen[dp]++) fail("block %d: two up slots map to down slot %d", b, dp);
                // the down slot's token (logical slot s & 7) is the pair's token
                const int wd = dp & 15, lo = 2 * (wd >> 2) + (wd & 1) + 8 * ((wd >> 1) & 1);
                if ((lo & 7) != j) fail("block %d: down slot %d (logical %d) holds token %d", b, dp, lo, j);
                if (!gated && recd[bb + dp] != TWELL_SL_DREC(r >> 16, n)) fail("block %d: down record %d wrong", b, dp);
            }
            const int pim = bi.pim[g];
            for (int q = gb; q < ge; q += 8) {
                unsigned used = 0;
                bool dup = false;
                for (int i = 0; i < 8; i++) {
                    const uint32_t r = rec[bb + q + i];
                    const int c = (TWELL_SL_REC_N(r) & 7) ^ ((pim >> (3 * TWELL_SL_REC_J(r))) & 7);
                    if (used & (1u << c)) dup = true;
                    used |= 1u << c;
                }
                uphases++;
                uconf += dup;
            }
        }
        for (int j = 0; j < 8 && b * 8 + j < M; j++)
            if (!ovf_flag[b * 8 + j])
                for (int t = 0; t < tiles; t++) {
                    const uint32_t *tile = &tw[(size_t)(b * 8 + j) * s.row_words + (size_t)t * words];
                    for (uint32_t k = 1; k <= tile[0]; k++) want.push_back({j, t * 256 + twell_word_col(tile[k])});
                }
        std::sort(got.begin(), got.end());
        std::sort(want.begin(), want.end());
        if (got != want) fail("block %d: %zu records differ from the TwELL pairs (%zu)", b, got.size(), want.size());
        pairs += got.size();
        dslots += bi.dsize;
    }
    // Up, reduce, down.
    std::vector<bf16> Y((size_t)M * D);
    for (auto &v : Y) v = __float2bfloat16(NAN);
    if (gated) {
        emu_launch({(unsigned)(NSU * NG), 1, 1}, TWELL_SL_UP_WARPS * 32, [&] {
            twell_sl_up_kernel(bX.data(), bWu.data(), rec.data(), info.data(), part.data(), M, D, F, NG, UG, SB, rsu, cap);
        });
        emu_launch({2, 1, 1}, 64, [&] {
            twell_sl_reduce_kernel(rec.data(), dpos.data(), part.data(), recd.data(), info.data(), nblocks, NG, SB, NSU, cap);
        });
    }
    // Down order: every slot written; per phase (8 slots, tokens 0..7) the largest class multiplicity = the
    // ldmatrix wavefronts of that phase (1 = conflict-free).
    for (int b = 0; b < nblocks; b++) {
        const size_t bb = (size_t)b * SB;
        for (int k0 = 0; k0 < info[b].dsize; k0 += 16)
            for (int h = 0; h < 2; h++) {
                int mult[8] = {0}, mx = 0;
                for (int e = 0; e < 8; e++) {
                    const uint32_t r = recd[bb + k0 + 4 * (e >> 1) + 2 * h + (e & 1)];
                    if (r == 0xDEADBEEFu) { fail("block %d down slot %d never written", b, k0 + 4 * (e >> 1) + 2 * h + (e & 1)); continue; }
                    const int f = (int)(r & 0x3FFFu), n = f >> 1;
                    if ((f & 1) != ((n >> 2) & 1) || n >= F) fail("block %d: bad down record f %d", b, f);
                    mult[n & 7]++;
                }
                for (int c = 0; c < 8; c++) mx = std::max(mx, mult[c]);
                dphases++;
                dwave += mx;
            }
    }
    emu_launch({(unsigned)NSD, 1, 1}, TWELL_SL_DOWN_WARPS * 32, [&] {
        twell_sl_down_kernel(recd.data(), info.data(), bWdT.data(), ovf_flag.data(), Y.data(), M, D, F, SB, rsd);
    });
    double num = 0, den = 0, numh = 0, denh = 0;
    long long unwritten = 0, touched_ovf = 0, nonzero_empty = 0;
    for (int m = 0; m < M; m++)
        for (int d = 0; d < D; d++) {
            const float v = __bfloat162float(Y[(size_t)m * D + d]);
            if (ovf_flag[m]) { touched_ovf += !std::isnan(v); continue; }
            if (!std::isfinite(v)) { unwritten++; continue; }
            if (row_nnz[m] == 0 && v != 0.0f) nonzero_empty++;
            const double r = ref[(size_t)m * D + d], rh = refh[(size_t)m * D + d];
            num += (v - r) * (v - r); den += r * r;
            numh += (v - rh) * (v - rh); denh += rh * rh;
        }
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num), relh = denh > 0 ? sqrt(numh / denh) : sqrt(numh);
    if (unwritten) fail("%lld outputs not written (of %lld)", unwritten, (long long)M * D);
    if (touched_ovf) fail("%lld outputs of dense-fallback rows written", touched_ovf);
    if (nonzero_empty) fail("%lld outputs of rows without active units are not exactly 0", nonzero_empty);
    if (!(rel < 1e-2)) fail("rel err vs float64 %.3e", rel);
    // bf16 output rounding alone is ~2e-3 relative; anything wrong in the sums shows far above it.
    if (!(relh < 5e-3)) fail("rel err vs the bf16-h reference %.3e too large", relh);
    printf("emu sliced %s M=%4d D=%4d F=%4d C=%d NG=%d SB=%4d nnz %5.1f%s: pairs %lld, up padding %lld, down slots x%.2f"
           " of pairs, repeated class: up %.1f%% of phases, down wavefronts x%.2f, ovf rows %d + %d from blocks, rel err "
           "%.2e (vs bf16-h %.2e)  %s\n",
           gated ? "gated   " : "nongated", M, D, F, C, NG, SB, mix ? -1.0 : nnz, mix ? " mix" : "", pairs, upad,
           pairs ? (double)dslots / pairs : 0.0, uphases ? 100.0 * uconf / uphases : 0.0,
           dphases ? (double)dwave / dphases : 0.0, n_tw_ovf, sl_rows, rel, relh, ok ? "ok" : "FAIL");
    fflush(stdout);
    return ok;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    int ok = 1;
    ok &= run_case(77, 128, 1024, 8, 1, 29, 1024, 1);   // mixed rows, M not a multiple of 8, large blocks
    ok &= run_case(64, 64, 256, 8, 1, 29, 0, 0);        // one tile, one slice, default blocks
    ok &= run_case(40, 128, 512, 4, 0, 20, 1024, 1);    // non-gated, C 4
    ok &= run_case(50, 64, 1024, 8, 1, 60, 8, 0);       // blocks of 256 slots: too small, all rows dense
    ok &= run_case(61, 128, 1024, 8, 1, 40, 0, 1);      // mixed, default blocks: some do not fit
    if (!quick) {
        ok &= run_case(200, 128, 5632, 8, 1, 29, 0, 0);   // the paper's F: 4 unit groups, boundary tiles
        ok &= run_case(120, 128, 5632, 2, 1, 8, 1024, 1); // C 2, mixed
        ok &= run_case(33, 192, 2048, 8, 1, 128, 1024, 0); // dense-ish rows
        ok &= run_case(9, 64, 768, 8, 0, 64, 0, 1);
        ok &= run_case(100, 64, 5632, 8, 0, 29, 0, 0);
    }
    printf("emu sliced: %s\n", ok ? "ALL OK" : "FAILURES");
    return ok ? 0 : 1;
}
