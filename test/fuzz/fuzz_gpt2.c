// Fuzz target: GPT-2's encoder.json + vocab.bpe (dataloader/tokenizer.c load_gpt2). The input holds both files,
// split at the first NUL byte (encoder.json before it, vocab.bpe after; no NUL: an empty vocab.bpe).
#include "fuzz_util.h"
#include "dataloader/tokenizer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t a = nul ? (size_t)(nul - data) : size;
    char p1[512], p2[512], err[1024];
    fuzz_write("encoder.json", data, a, p1, sizeof p1);
    fuzz_write("vocab.bpe", nul ? nul + 1 : data + size, nul ? size - a - 1 : 0, p2, sizeof p2);
    Tokenizer *t = tokenizer_load(fuzz_dir(), err, sizeof err);
    if (t) {
        static const char *s = "Hello, world! it's 2024\n\n  \xe4\xb8\xad\xff";
        int32_t *ids; size_t n;
        if (tokenizer_encode(t, s, strlen(s), &ids, &n) != 0) abort();
        char *out; size_t ol;
        if (tokenizer_decode(t, ids, n, &out, &ol) != 0 || ol != strlen(s) || memcmp(out, s, ol)) abort();
        free(out); free(ids);
        tokenizer_free(t);
    }
    return 0;
}
