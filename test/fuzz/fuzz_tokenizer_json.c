// Fuzz target: a Hugging Face tokenizer.json (dataloader/tokenizer.c load_hf_json). A tokenizer that loads must
// encode and decode a few strings (including its own added tokens) without error, and decoding gives the bytes.
#include "fuzz_util.h"
#include "dataloader/tokenizer.h"

static void exercise(const Tokenizer *t) {
    static const char *texts[] = {"", "hello world", "it's  \t\n x<|endoftext|>y", "\xff\xfe caf\xc3\xa9 12345"};
    for (size_t k = 0; k < sizeof texts / sizeof *texts; k++) {
        for (int flags = 0; flags < 2; flags++) {
            int32_t *ids; size_t n;
            if (tokenizer_encode_flags(t, texts[k], strlen(texts[k]), flags, &ids, &n) != 0) abort();
            for (size_t i = 0; i < n; i++) if (ids[i] < 0 || ids[i] >= tokenizer_vocab_size(t)) abort();
            char *out; size_t ol;
            if (tokenizer_decode(t, ids, n, &out, &ol) != 0) abort();
            if (!flags && (ol != strlen(texts[k]) || memcmp(out, texts[k], ol))) abort();  // byte round trip
            free(out); free(ids);
        }
    }
    for (int32_t id = 0; id < tokenizer_vocab_size(t) && id < 4096; id++) { size_t l; (void)tokenizer_token_bytes(t, id, &l); }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512], err[1024];
    fuzz_write("tokenizer.json", data, size, path, sizeof path);
    Tokenizer *t = tokenizer_load(path, err, sizeof err);
    if (t) { exercise(t); tokenizer_free(t); }
    return 0;
}
