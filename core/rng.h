// core/rng.h: deterministic host random numbers (splitmix64 seeding + xoshiro256**).
// Used for weight init, data shuffling and sampling; the same seed gives the same stream on every
// machine. The state is a plain struct so it can be saved in a checkpoint and restored.
#ifndef SLLM_RNG_H
#define SLLM_RNG_H

#include <math.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct { uint64_t s[4]; } Rng;

static inline uint64_t rng_splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static inline void rng_seed(Rng *r, uint64_t seed) {
    uint64_t x = seed;
    for (int i = 0; i < 4; i++) r->s[i] = rng_splitmix64(&x);
}
static inline uint64_t rng_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }
static inline uint64_t rng_u64(Rng *r) {
    uint64_t *s = r->s;
    uint64_t result = rng_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t; s[3] = rng_rotl(s[3], 45);
    return result;
}
// Uniform in [0, 1) with 53 random bits.
static inline double rng_uniform(Rng *r) { return (double)(rng_u64(r) >> 11) * 0x1.0p-53; }
// Uniform integer in [0, n) without modulo bias (n > 0).
static inline uint64_t rng_below(Rng *r, uint64_t n) {
    uint64_t lim = UINT64_MAX - UINT64_MAX % n, x;
    do { x = rng_u64(r); } while (x >= lim);
    return x % n;
}
// Standard normal (Box-Muller; one value per call, the pair's second value is discarded for simplicity).
static inline double rng_normal(Rng *r) {
    double u1 = rng_uniform(r), u2 = rng_uniform(r);
    if (u1 < 1e-300) u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
// Fisher-Yates shuffle of an index array.
static inline void rng_shuffle_u32(Rng *r, uint32_t *a, uint64_t n) {
    for (uint64_t i = n; i > 1; i--) {
        uint64_t j = rng_below(r, i);
        uint32_t t = a[i - 1]; a[i - 1] = a[j]; a[j] = t;
    }
}

#ifdef __cplusplus
}
#endif
#endif  // SLLM_RNG_H
