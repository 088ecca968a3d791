// Fuzz target: a token shard (dataloader/shard.c shard_open): header checks, size, token range. A shard that
// opens must have every token readable and within the vocab.
#include "fuzz_util.h"
#include "dataloader/shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char path[512], err[1024];
    fuzz_write("x_train_000000.bin", data, size, path, sizeof path);
    const int vocabs[2] = {0, 50304};
    for (int v = 0; v < 2; v++) {
        Shard s;
        if (shard_open(&s, path, vocabs[v], err, sizeof err) != 0) continue;
        int32_t buf[64];
        uint64_t n = s.num_tokens;
        for (uint64_t i = 0; i < n; i += 64) {
            size_t k = n - i < 64 ? (size_t)(n - i) : 64;
            shard_read_tokens(&s, i, k, buf);
            if (vocabs[v]) for (size_t j = 0; j < k; j++) if ((uint32_t)buf[j] >= (uint32_t)vocabs[v]) abort();
        }
        shard_close(&s);
    }
    return 0;
}
