// dataloader/loader.c: distributed, shuffled, resumable B x T batch loader over mmap'd .bin shards.
// See loader.h for the ordering contract. The epoch order is never materialised: the position of a
// sequence in the epoch is mapped to (shard, sequence) through the permuted shard order and prefix sums,
// and the within-shard permutation of the current shard is generated on demand (cached).
#include "loader.h"

#include <glob.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "rng.h"
#include "shard.h"

struct DataLoader {
    int B, T, rank, world, shuffle;
    uint64_t seed;
    int nshards;
    Shard *shards;
    uint64_t *seqs;          // sequences per shard [nshards]
    uint64_t total_seqs, total_tokens;
    // epoch order
    uint64_t epoch, next_seq;
    uint32_t *shard_order;   // [nshards] permuted shard indices for the current epoch
    uint64_t *prefix;        // [nshards+1] prefix sums of seqs in shard_order
    // cached within-shard permutation
    int perm_shard;          // shard index whose permutation is in perm (-1 none)
    uint64_t perm_epoch;
    uint32_t *perm;
    uint64_t perm_cap;
};

static int fail(char *err, size_t errn, const char *fmt, ...) {
    if (err && errn) { va_list ap; va_start(ap, fmt); vsnprintf(err, errn, fmt, ap); va_end(ap); }
    return -1;
}

static uint64_t mix(uint64_t a, uint64_t b, uint64_t c) {
    uint64_t x = a ^ 0x5eed5eed12345678ull;
    uint64_t h = rng_splitmix64(&x);
    x = h ^ (b * 0x9e3779b97f4a7c15ull);
    h = rng_splitmix64(&x);
    x = h ^ (c * 0xc2b2ae3d27d4eb4full);
    return rng_splitmix64(&x);
}

static void build_epoch(DataLoader *dl) {
    for (int i = 0; i < dl->nshards; i++) dl->shard_order[i] = (uint32_t)i;
    if (dl->shuffle) {
        Rng r; rng_seed(&r, mix(dl->seed, dl->epoch, 0xffffffffull));
        rng_shuffle_u32(&r, dl->shard_order, (uint64_t)dl->nshards);
    }
    dl->prefix[0] = 0;
    for (int i = 0; i < dl->nshards; i++) dl->prefix[i + 1] = dl->prefix[i] + dl->seqs[dl->shard_order[i]];
    dl->perm_shard = -1;
}

DataLoader *loader_open(const char *pattern, int B, int T, int rank, int world, uint64_t seed, int shuffle,
                        char *err, size_t errn) {
    if (B <= 0 || T <= 0) { fail(err, errn, "loader: B=%d and T=%d must be positive", B, T); return NULL; }
    if (world <= 0 || rank < 0 || rank >= world) { fail(err, errn, "loader: rank %d of world %d is invalid (need 0 <= rank < world)", rank, world); return NULL; }
    glob_t g;
    int grc = glob(pattern, 0, NULL, &g);
    if (grc != 0 || g.gl_pathc == 0) {
        if (grc == 0) globfree(&g);
        fail(err, errn, "loader: no shard files match '%s' (run scripts/starter_data.sh or the tokenize tool first)", pattern);
        return NULL;
    }
    DataLoader *dl = calloc(1, sizeof *dl);
    dl->B = B; dl->T = T; dl->rank = rank; dl->world = world; dl->seed = seed; dl->shuffle = shuffle ? 1 : 0;
    dl->nshards = (int)g.gl_pathc;
    dl->shards = calloc((size_t)dl->nshards, sizeof(Shard));
    dl->seqs = calloc((size_t)dl->nshards, sizeof(uint64_t));
    dl->shard_order = calloc((size_t)dl->nshards, sizeof(uint32_t));
    dl->prefix = calloc((size_t)dl->nshards + 1, sizeof(uint64_t));
    int tb = 0;
    for (int i = 0; i < dl->nshards; i++) {  // glob() output is sorted
        if (shard_open(&dl->shards[i], g.gl_pathv[i], 0, err, errn) != 0) { globfree(&g); loader_close(dl); return NULL; }
        if (tb && dl->shards[i].token_bytes != tb) {
            fail(err, errn, "loader: shard %s has %d-byte tokens but %s has %d-byte tokens; all shards of a split must match",
                 g.gl_pathv[i], dl->shards[i].token_bytes, g.gl_pathv[0], tb);
            globfree(&g); loader_close(dl); return NULL;
        }
        tb = dl->shards[i].token_bytes;
        uint64_t n = dl->shards[i].num_tokens;
        dl->seqs[i] = n > 0 ? (n - 1) / (uint64_t)T : 0;
        if (dl->seqs[i] > 0xffffffffull) { fail(err, errn, "loader: shard %s has more than 2^32 sequences", g.gl_pathv[i]); globfree(&g); loader_close(dl); return NULL; }
        dl->total_seqs += dl->seqs[i];
        dl->total_tokens += n;
    }
    globfree(&g);
    uint64_t gb = (uint64_t)world * (uint64_t)B;
    if (dl->total_seqs < gb) {
        fail(err, errn, "loader: '%s' has %llu tokens = %llu sequences of T+1=%d tokens, fewer than one global batch of world*B = %d*%d = %llu sequences",
             pattern, (unsigned long long)dl->total_tokens, (unsigned long long)dl->total_seqs, T + 1, world, B, (unsigned long long)gb);
        loader_close(dl);
        return NULL;
    }
    build_epoch(dl);
    return dl;
}

void loader_close(DataLoader *dl) {
    if (!dl) return;
    if (dl->shards) for (int i = 0; i < dl->nshards; i++) shard_close(&dl->shards[i]);
    free(dl->shards); free(dl->seqs); free(dl->shard_order); free(dl->prefix); free(dl->perm);
    free(dl);
}

// Sequence at epoch position p -> (shard, start token).
static void locate(DataLoader *dl, uint64_t p, int *shard_out, uint64_t *start_out) {
    int lo = 0, hi = dl->nshards - 1;  // find k with prefix[k] <= p < prefix[k+1]
    while (lo < hi) {
        int mid = (lo + hi + 1) / 2;
        if (dl->prefix[mid] <= p) lo = mid; else hi = mid - 1;
    }
    int k = lo;
    int s = (int)dl->shard_order[k];
    uint64_t j = p - dl->prefix[k];
    if (dl->shuffle) {
        if (dl->perm_shard != s || dl->perm_epoch != dl->epoch) {
            uint64_t n = dl->seqs[s];
            if (n > dl->perm_cap) { free(dl->perm); dl->perm = malloc(n * sizeof(uint32_t)); dl->perm_cap = n; }
            for (uint64_t i = 0; i < n; i++) dl->perm[i] = (uint32_t)i;
            Rng r; rng_seed(&r, mix(dl->seed, dl->epoch, (uint64_t)s));
            rng_shuffle_u32(&r, dl->perm, n);
            dl->perm_shard = s; dl->perm_epoch = dl->epoch;
        }
        j = dl->perm[j];
    }
    *shard_out = s;
    *start_out = j * (uint64_t)dl->T;
}

void loader_next(DataLoader *dl, int32_t *inputs, int32_t *targets) {
    uint64_t gb = (uint64_t)dl->world * (uint64_t)dl->B;
    if (dl->next_seq + gb > dl->total_seqs) {  // epoch tail dropped on every rank alike
        dl->epoch++; dl->next_seq = 0;
        build_epoch(dl);
    }
    uint64_t base = dl->next_seq + (uint64_t)dl->rank * (uint64_t)dl->B;
    int T = dl->T;
    for (int b = 0; b < dl->B; b++) {
        int s; uint64_t start;
        locate(dl, base + (uint64_t)b, &s, &start);
        const Shard *sh = &dl->shards[s];
        int32_t *in = inputs + (size_t)b * T, *tg = targets + (size_t)b * T;
        shard_read_tokens(sh, start, (size_t)T, in);
        memcpy(tg, in + 1, (size_t)(T - 1) * sizeof(int32_t));
        tg[T - 1] = (int32_t)shard_token(sh, start + (uint64_t)T);
    }
    dl->next_seq += gb;
}

void loader_reset(DataLoader *dl) { dl->epoch = 0; dl->next_seq = 0; build_epoch(dl); }

void loader_get_state(const DataLoader *dl, LoaderState *st) {
    memset(st, 0, sizeof *st);
    st->magic = LOADER_STATE_MAGIC; st->shuffle = (uint32_t)dl->shuffle; st->seed = dl->seed;
    st->num_sequences = dl->total_seqs; st->epoch = dl->epoch; st->next_seq = dl->next_seq;
}

int loader_set_state(DataLoader *dl, const LoaderState *st, char *err, size_t errn) {
    if (st->magic != LOADER_STATE_MAGIC) return fail(err, errn, "loader state: bad magic 0x%08x (expected 0x%08x)", st->magic, LOADER_STATE_MAGIC);
    if (st->num_sequences != dl->total_seqs)
        return fail(err, errn, "loader state was saved for %llu sequences but the data now has %llu (different shards or T?)",
                    (unsigned long long)st->num_sequences, (unsigned long long)dl->total_seqs);
    if (st->seed != dl->seed || (int)st->shuffle != dl->shuffle)
        return fail(err, errn, "loader state was saved with seed %llu shuffle %u, the loader has seed %llu shuffle %d",
                    (unsigned long long)st->seed, st->shuffle, (unsigned long long)dl->seed, dl->shuffle);
    if (st->next_seq > dl->total_seqs) return fail(err, errn, "loader state: position %llu beyond %llu sequences", (unsigned long long)st->next_seq, (unsigned long long)dl->total_seqs);
    dl->epoch = st->epoch; dl->next_seq = st->next_seq;
    build_epoch(dl);
    return 0;
}

uint64_t loader_num_sequences(const DataLoader *dl) { return dl->total_seqs; }
uint64_t loader_batches_per_epoch(const DataLoader *dl) { return dl->total_seqs / ((uint64_t)dl->world * (uint64_t)dl->B); }
uint64_t loader_dropped_sequences(const DataLoader *dl) { return dl->total_seqs % ((uint64_t)dl->world * (uint64_t)dl->B); }
uint64_t loader_num_tokens(const DataLoader *dl) { return dl->total_tokens; }
uint64_t loader_epoch(const DataLoader *dl) { return dl->epoch; }
int loader_num_shards(const DataLoader *dl) { return dl->nshards; }

int loader_check_vocab(const DataLoader *dl, int vocab_size, char *err, size_t errn) {
    for (int i = 0; i < dl->nshards; i++) {
        const Shard *s = &dl->shards[i];
        for (uint64_t j = 0; j < s->num_tokens; j++) {
            uint32_t t = shard_token(s, j);
            if (t >= (uint32_t)vocab_size)
                return fail(err, errn, "shard %s: token %u at index %llu is out of range: the model's vocab size is %d",
                            s->path, t, (unsigned long long)j, vocab_size);
        }
    }
    return 0;
}

void loader_summary(const DataLoader *dl, char *buf, size_t n) {
    snprintf(buf, n, "%d shard(s) (%s...), %llu tokens, %llu sequences of T+1=%d, %llu batches/epoch of %dx%d per rank (world %d, %s), epoch tail dropped: %llu sequences",
             dl->nshards, dl->shards[0].path, (unsigned long long)dl->total_tokens, (unsigned long long)dl->total_seqs,
             dl->T + 1, (unsigned long long)loader_batches_per_epoch(dl), dl->B, dl->T, dl->world,
             dl->shuffle ? "shuffled" : "in order", (unsigned long long)loader_dropped_sequences(dl));
}
