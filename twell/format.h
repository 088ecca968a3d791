// twell/format.h: the TwELL (tile-wise ELLPACK) layout of a ReLU'd gate activation, specified once,
// plus the CPU packer / unpacker / validator that every test uses as the oracle. Header-only C
// (static inline), usable from C and CUDA.
//
// Matrix: relu(A) for A [M, F] (the gate pre-activations, fp32 accumulators), stored as uint32
// [M, F/C] row-major, contiguous. F must be a multiple of TWELL_TILE = 256.
//
//   row r, tile t (columns [256 t, 256 t + 256)) occupies words [r*F/C + t*W, r*F/C + (t+1)*W),
//   W = 256/C words per tile (C in {2, 4, 8}; default 8 -> W = 32).
//
//   word 0 of a tile: the TRUE number of active columns of that 256-column slice, 0..256. NOT clamped.
//   words 1..W-1 ("slots", S = W-1 of them): entries in increasing column order (deterministic),
//     bits 16..31: bf16 bit pattern of the value = bf16 round-to-nearest-even of the fp32 accumulator,
//     bits  0..7 : TILE-LOCAL column index in [0, 256) (global column = 256 t + index),
//     bits  8..15: zero.
//     A column is active iff its ROUNDED bf16 value is > 0 (float compare: -0, 0 and NaN are not stored).
//   Slots past min(count, S) hold the word 0 (so two packings of the same data are equal bit for bit).
//
// Overflow: if count > S for any tile of a row, the row is an OVERFLOW row. Its tiles still hold the
// first min(count, S) entries in column order and the true count, but the row is INCOMPLETE: readers
// must not compute it from TwELL (test: count > S), and a dense fallback must compute it. Producers
// also list overflow rows explicitly (a device list + count) so the fallback needs no scan.
// Readers never read more than S slots of a tile.
//
// Index range: tile-local 8-bit, so F is not limited by the index width (only by int arithmetic).
#ifndef SLLM_TWELL_FORMAT_H
#define SLLM_TWELL_FORMAT_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

#define TWELL_TILE 256
#define TWELL_DEFAULT_C 8

// Error codes returned by TwELL functions (0 = OK).
enum {
    TWELL_OK = 0,
    TWELL_ERR_SHAPE = -1,      // a shape constraint is violated (message printed)
    TWELL_ERR_ARG = -2,        // a bad argument (NULL pointer, unknown mode, misaligned pointer)
    TWELL_ERR_WORKSPACE = -3,  // the workspace was created for smaller / different shapes
};

typedef struct {
    int M, F, C;
    int tiles;      // F / 256
    int words;      // words per tile W = 256 / C
    int slots;      // W - 1
    int row_words;  // F / C
} TwellShape;

// Fills *s; returns TWELL_OK or TWELL_ERR_SHAPE with a message on stderr naming the constraint.
static inline int twell_shape_init(TwellShape *s, int M, int F, int C) {
    memset(s, 0, sizeof(*s));
    if (C != 2 && C != 4 && C != 8) {
        fprintf(stderr, "error: twell: compression factor C=%d is not supported (expected 2, 4 or 8)\n", C);
        return TWELL_ERR_SHAPE;
    }
    if (F <= 0 || F % TWELL_TILE != 0) {
        fprintf(stderr, "error: twell: F (d_ff) = %d must be a positive multiple of the tile width %d\n", F,
                TWELL_TILE);
        return TWELL_ERR_SHAPE;
    }
    if (M < 0) {
        fprintf(stderr, "error: twell: M (tokens) = %d must be >= 0\n", M);
        return TWELL_ERR_SHAPE;
    }
    s->M = M; s->F = F; s->C = C;
    s->tiles = F / TWELL_TILE;
    s->words = TWELL_TILE / C;
    s->slots = s->words - 1;
    s->row_words = F / C;
    return TWELL_OK;
}

static inline uint32_t twell_make_word(uint16_t bf16_bits, int local_col) {
    return ((uint32_t)bf16_bits << 16) | (uint32_t)(local_col & 0xFF);
}
static inline int twell_word_col(uint32_t w) { return (int)(w & 0xFFu); }
static inline uint16_t twell_word_bits(uint32_t w) { return (uint16_t)(w >> 16); }

// Host bf16 rounding (round to nearest even; NaN stays NaN). Same rule as __float2bfloat16_rn.
static inline uint16_t twell_f32_to_bf16(float f) {
    uint32_t u; memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u);
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}
static inline float twell_bf16_to_f32(uint16_t h) {
    uint32_t u = (uint32_t)h << 16; float f; memcpy(&f, &u, 4); return f;
}

// CPU packer (the oracle). acc: [M, F] fp32 pre-activations (row stride ld >= F). Writes out [M, F/C].
// ovf_rows (may be NULL; capacity M): the overflow rows in increasing order; returns their number.
// *nnz_total (may be NULL): the sum of all true counts.
static inline int twell_pack_cpu(const TwellShape *s, const float *acc, size_t ld, uint32_t *out, int *ovf_rows,
                                 uint64_t *nnz_total) {
    int n_ovf = 0;
    uint64_t nnz = 0;
    for (int r = 0; r < s->M; r++) {
        int row_ovf = 0;
        for (int t = 0; t < s->tiles; t++) {
            uint32_t *tw = out + (size_t)r * s->row_words + (size_t)t * s->words;
            memset(tw, 0, sizeof(uint32_t) * s->words);
            int cnt = 0;
            for (int j = 0; j < TWELL_TILE; j++) {
                uint16_t b = twell_f32_to_bf16(acc[(size_t)r * ld + (size_t)t * TWELL_TILE + j]);
                if (twell_bf16_to_f32(b) > 0.0f) {
                    if (cnt < s->slots) tw[1 + cnt] = twell_make_word(b, j);
                    cnt++;
                }
            }
            tw[0] = (uint32_t)cnt;
            nnz += (uint64_t)cnt;
            if (cnt > s->slots) row_ovf = 1;
        }
        if (row_ovf) {
            if (ovf_rows) ovf_rows[n_ovf] = r;
            n_ovf++;
        }
    }
    if (nnz_total) *nnz_total = nnz;
    return n_ovf;
}

// 1 if row r of tw is an overflow row (some tile count > slots).
static inline int twell_row_overflows(const TwellShape *s, const uint32_t *tw, int r) {
    for (int t = 0; t < s->tiles; t++)
        if (tw[(size_t)r * s->row_words + (size_t)t * s->words] > (uint32_t)s->slots) return 1;
    return 0;
}

// CPU unpacker: dense [M, F] fp32 relu values (0 where not stored). Overflow rows get only the entries
// present (incomplete); row_incomplete[r] (may be NULL) is set to 1 for them. Returns their number.
static inline int twell_unpack_cpu(const TwellShape *s, const uint32_t *tw, float *dense, uint8_t *row_incomplete) {
    int n_ovf = 0;
    for (int r = 0; r < s->M; r++) {
        float *d = dense + (size_t)r * s->F;
        for (int j = 0; j < s->F; j++) d[j] = 0.0f;
        int ovf = 0;
        for (int t = 0; t < s->tiles; t++) {
            const uint32_t *w = tw + (size_t)r * s->row_words + (size_t)t * s->words;
            uint32_t cnt = w[0];
            if (cnt > (uint32_t)s->slots) ovf = 1;
            uint32_t n = cnt > (uint32_t)s->slots ? (uint32_t)s->slots : cnt;
            for (uint32_t k = 0; k < n; k++)
                d[t * TWELL_TILE + twell_word_col(w[1 + k])] = twell_bf16_to_f32(twell_word_bits(w[1 + k]));
        }
        if (row_incomplete) row_incomplete[r] = (uint8_t)ovf;
        n_ovf += ovf;
    }
    return n_ovf;
}

// Checks the invariants of a TwELL matrix (counts <= 256, slots in strictly increasing column order,
// values > 0, bits 8..15 zero, zero padding past the count). Returns 0 if valid, else -1 and writes
// the first violation into err.
static inline int twell_validate_cpu(const TwellShape *s, const uint32_t *tw, char *err, size_t errlen) {
    for (int r = 0; r < s->M; r++)
        for (int t = 0; t < s->tiles; t++) {
            const uint32_t *w = tw + (size_t)r * s->row_words + (size_t)t * s->words;
            if (w[0] > TWELL_TILE) {
                snprintf(err, errlen, "row %d tile %d: count %u > %d", r, t, w[0], TWELL_TILE);
                return -1;
            }
            int n = (int)w[0] > s->slots ? s->slots : (int)w[0];
            int prev = -1;
            for (int k = 0; k < s->slots; k++) {
                uint32_t x = w[1 + k];
                if (k >= n) {
                    if (x != 0) { snprintf(err, errlen, "row %d tile %d slot %d: padding not zero", r, t, k); return -1; }
                    continue;
                }
                int c = twell_word_col(x);
                float v = twell_bf16_to_f32(twell_word_bits(x));
                if ((x & 0xFF00u) != 0 || c <= prev || !(v > 0.0f)) {
                    snprintf(err, errlen, "row %d tile %d slot %d: bad entry 0x%08x (prev col %d)", r, t, k, x, prev);
                    return -1;
                }
                prev = c;
            }
        }
    return 0;
}

#ifdef __cplusplus
}
#endif
#endif  // SLLM_TWELL_FORMAT_H
