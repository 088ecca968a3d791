// dev/emu/sliced_emu.cpp: runs the sliced (D-sliced, tensor-core) TwELL up/down kernels of twell/sliced.cuh
// on the CPU (dev/emu/emu_core.h) against a float64 reference: slot layout, class interleaving, fragment
// layouts, swizzles, overflow rows, capacity overflow. Build + run: bash dev/emu/run.sh sliced [quick]
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
static uint16_t bits(float f) { return __bfloat16_as_ushort(__float2bfloat16(f)); }

static const int kOptin = 232448;  // sm_90 opt-in shared memory per block

// Row kinds of the gate pre-activations: uniform nnz k, zero, full (overflow), heavy, "exactly slots in one tile".
static int run_case(int M, int D, int F, int C, int gated, double nnz, size_t cap_per_token, int mix) {
    const int tiles = F / TWELL_TILE, words = TWELL_TILE / C, slots = words - 1;
    std::vector<float> acc((size_t)M * F);
    for (int m = 0; m < M; m++) {
        int kind = mix ? (m < 2 ? 3 : (int)(urand() * 12)) : 0;
        double p = nnz / F;
        if (kind == 1) p = 0;                     // zero row
        else if (kind == 2) p = 1;                // every unit active: overflow
        else if (kind == 3) p = 0.05 + 0.2 * urand();  // heavy (may overflow)
        for (int n = 0; n < F; n++) {
            double v = fabs(nrand()) + 0.01;
            acc[(size_t)m * F + n] = (float)(urand() < p ? v : -v);
        }
        if (kind == 4) {  // exactly `slots` actives in tile 0, nothing else (largest non-overflow tile)
            for (int n = 0; n < F; n++) acc[(size_t)m * F + n] = -1.0f;
            for (int k = 0; k < slots; k++) acc[(size_t)m * F + (k * 7) % 256] = 0.5f + (float)k;
        }
    }
    TwellShape s;
    twell_shape_init(&s, M, F, C);
    std::vector<uint32_t> tw((size_t)M * s.row_words);
    std::vector<int> ovf_rows(M);
    uint64_t nnz_tot = 0;
    const int n_ovf = twell_pack_cpu(&s, acc.data(), (size_t)F, tw.data(), ovf_rows.data(), &nnz_tot);
    std::vector<int> ovf_flag(M, 0);
    for (int i = 0; i < n_ovf; i++) ovf_flag[ovf_rows[i]] = 1;
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
    // float64 references: exact, and with h rounded to bf16 (what the kernels compute, up to fp32 sums).
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
    // Workspace shapes as twell_sliced_create computes them.
    int UG = 0, NG = 1;
    if (gated) NG = twell_sl_groups(F, kOptin, &UG);
    else UG = (F + 7) & ~7;
    if (NG == 0) { printf("emu: no group split for F=%d\n", F); return 0; }
    const int nblocks = (M + TWELL_SL_TOK - 1) / TWELL_SL_TOK, NSU = D / TWELL_SL_UCOLS, NSD = D / TWELL_SL_DCOLS;
    const size_t cap = (size_t)M * cap_per_token;
    const size_t nseg = (size_t)nblocks * (NG + 1) + 1;
    std::vector<int> cnt(nseg, -7), seg(nseg, -7);
    std::vector<uint32_t> rec(cap, 0xDEADBEEFu);
    std::vector<float> part(gated ? cap * NSU : 1, NAN);
    TwellSlGroupWalk w;
    w.tw = tw.data(); w.ovf_flag = ovf_flag.data(); w.M = M; w.F = F; w.words = words; w.slots = slots;
    w.row_words = s.row_words; w.UG = UG;
    const unsigned cblocks = (unsigned)CEIL_DIV(nblocks, TWELL_SL_CMP_WARPS);
    cnt[nseg - 1] = 0;
    emu_launch({cblocks, 1, 1}, TWELL_SL_CMP_WARPS * 32, [&] { twell_sl_count_kernel(w, NG, cnt.data()); });
    long long run = 0;
    for (size_t i = 0; i < nseg; i++) { seg[i] = (int)run; run += cnt[i]; }
    int status = 0;
    long long slots_out = -1;
    emu_launch({cblocks, 1, 1}, TWELL_SL_CMP_WARPS * 32,
               [&] { twell_sl_fill_kernel(w, NG, seg.data(), cap, rec.data(), &status, &slots_out); });
    const long long total = seg[nseg - 1];
    int ok = 1;
#define fail(...) do { printf("  FAIL: "); printf(__VA_ARGS__); printf("\n"); ok = 0; } while (0)
    if (slots_out != total) fail("slots_out %lld != total %lld", slots_out, total);
    const bool over = (size_t)total > cap;
    if (over != (status == 1)) fail("status %d for total %lld", status, total);
    // Layout checks: sizes, every pair exactly once in its group segment, padding value 0, conflicts.
    long long phases = 0, conflict_phases = 0, pad_slots = 0;
    if (!over) {
        for (int b = 0; b < nblocks; b++) {
            const int bs = seg[(size_t)b * (NG + 1)], be = seg[(size_t)(b + 1) * (NG + 1)];
            if ((be - bs) % 16) fail("block %d size %d not a multiple of 16", b, be - bs);
            std::vector<std::pair<int, int>> got, want;  // (row j, unit n)
            for (int g = 0; g < NG; g++) {
                const int gb = seg[(size_t)b * (NG + 1) + g], ge = seg[(size_t)b * (NG + 1) + g + 1];
                if ((ge - gb) % 8) fail("group segment size %d at block %d", ge - gb, b);
                for (int q = gb; q < ge; q++) {
                    const uint32_t r = rec[q];
                    const int n = TWELL_SL_REC_N(r), j = TWELL_SL_REC_J(r);
                    if (n < g * UG || n >= std::min((g + 1) * UG, F)) fail("unit %d outside its group (slot %d)", n, q);
                    if ((r >> 16) == 0) { pad_slots++; continue; }
                    got.push_back({j, n});
                    const int row = b * 8 + j;
                    const uint32_t *tile = &tw[(size_t)row * s.row_words + (size_t)(n / 256) * words];
                    bool found = false;
                    for (uint32_t k = 1; k <= tile[0] && (int)k <= slots; k++)
                        if (twell_word_col(tile[k]) == n % 256 && twell_word_bits(tile[k]) == (r >> 16)) found = true;
                    if (!found || ovf_flag[row]) fail("record of row %d unit %d not in the TwELL", row, n);
                }
                for (int q = gb; q < ge; q += 8) {
                    unsigned used = 0;
                    bool dup = false;
                    for (int i = 0; i < 8; i++) {
                        int c = TWELL_SL_REC_N(rec[q + i]) & 7;
                        if (used & (1u << c)) dup = true;
                        used |= 1u << c;
                    }
                    phases++;
                    conflict_phases += dup;
                }
            }
            for (int q = seg[(size_t)b * (NG + 1) + NG]; q < be; q++)
                if ((rec[q] >> 16) != 0 || TWELL_SL_REC_N(rec[q]) >= F) fail("block padding slot %d value %u", q, rec[q] >> 16);
            for (int j = 0; j < 8 && b * 8 + j < M; j++)
                if (!ovf_flag[b * 8 + j])
                    for (int t = 0; t < tiles; t++) {
                        const uint32_t *tile = &tw[(size_t)(b * 8 + j) * s.row_words + (size_t)t * words];
                        for (uint32_t k = 1; k <= tile[0]; k++) want.push_back({j, t * 256 + twell_word_col(tile[k])});
                    }
            std::sort(got.begin(), got.end());
            std::sort(want.begin(), want.end());
            if (got != want) fail("block %d: %zu records differ from the TwELL pairs (%zu)", b, got.size(), want.size());
        }
    }
    // Up, reduce, down.
    std::vector<bf16> Y((size_t)M * D);
    for (auto &v : Y) v = __float2bfloat16(NAN);
    if (gated) {
        emu_launch({(unsigned)(NSU * NG), 1, 1}, TWELL_SL_UP_WARPS * 32, [&] {
            twell_sl_up_kernel(bX.data(), bWu.data(), rec.data(), seg.data(), part.data(), M, D, F, NG, UG, cap);
        });
        emu_launch({2, 1, 1}, 64, [&] { twell_sl_reduce_kernel(rec.data(), part.data(), &seg[nseg - 1], NSU, cap); });
    }
    emu_launch({(unsigned)NSD, 1, 1}, TWELL_SL_DOWN_WARPS * 32, [&] {
        twell_sl_down_kernel(rec.data(), seg.data(), bWdT.data(), ovf_flag.data(), Y.data(), M, D, F, NG, cap);
    });
    double num = 0, den = 0, numh = 0, denh = 0;
    long long unwritten = 0, touched_ovf = 0, nonzero_empty = 0;
    for (int m = 0; m < M; m++)
        for (int d = 0; d < D; d++) {
            const float v = __bfloat162float(Y[(size_t)m * D + d]);
            if (over || ovf_flag[m]) { touched_ovf += !std::isnan(v); continue; }
            if (!std::isfinite(v)) { unwritten++; continue; }
            if (row_nnz[m] == 0 && v != 0.0f) nonzero_empty++;
            const double r = ref[(size_t)m * D + d], rh = refh[(size_t)m * D + d];
            num += (v - r) * (v - r); den += r * r;
            numh += (v - rh) * (v - rh); denh += rh * rh;
        }
    const double rel = den > 0 ? sqrt(num / den) : sqrt(num), relh = denh > 0 ? sqrt(numh / denh) : sqrt(numh);
    if (unwritten) fail("%lld outputs not written (of %lld)", unwritten, (long long)M * D);
    if (touched_ovf) fail("%lld outputs of overflow rows (or of a capacity overflow) written", touched_ovf);
    if (nonzero_empty) fail("%lld outputs of rows without active units are not exactly 0", nonzero_empty);
    if (!over && !(rel < 1e-2)) fail("rel err vs float64 %.3e", rel);
    // bf16 output rounding alone is ~2e-3 relative; anything wrong in the sums shows far above it.
    if (!over && !(relh < 5e-3)) fail("rel err vs the bf16-h reference %.3e too large", relh);
    printf("emu sliced %s M=%4d D=%4d F=%4d C=%d NG=%d nnz %5.1f%s: slots %lld (pairs %llu, padding %lld), ovf rows %d,"
           " phases with a repeated class %.1f%%, rel err %.2e (vs bf16-h %.2e)%s  %s\n",
           gated ? "gated   " : "nongated", M, D, F, C, NG, mix ? -1.0 : nnz, mix ? " mix" : "", total,
           (unsigned long long)nnz_tot, pad_slots, n_ovf, phases ? 100.0 * conflict_phases / phases : 0.0, rel, relh,
           over ? " [capacity exceeded: fallback]" : "", ok ? "ok" : "FAIL");
    fflush(stdout);
    return ok;
}

int main(int argc, char **argv) {
    int quick = argc > 1 && strcmp(argv[1], "quick") == 0;
    int ok = 1;
    ok &= run_case(77, 128, 1024, 8, 1, 29, 96, 1);     // mixed rows, M not a multiple of 8
    ok &= run_case(64, 64, 256, 8, 1, 29, 96, 0);       // one tile, one slice
    ok &= run_case(40, 128, 512, 4, 0, 20, 96, 1);      // non-gated, C 4
    ok &= run_case(50, 64, 1024, 8, 1, 29, 2, 0);       // capacity exceeded -> status, nothing written
    if (!quick) {
        ok &= run_case(200, 128, 5632, 8, 1, 29, 96, 0);  // the paper's F: 4 unit groups, boundary tiles
        ok &= run_case(120, 128, 5632, 2, 1, 8, 96, 1);   // C 2, mixed
        ok &= run_case(33, 192, 2048, 8, 1, 128, 300, 0); // dense-ish rows
        ok &= run_case(9, 64, 768, 8, 0, 64, 96, 1);
    }
    printf("emu sliced: %s\n", ok ? "ALL OK" : "FAILURES");
    return ok ? 0 : 1;
}
