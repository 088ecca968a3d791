// dataloader/shard.h: llm.c-compatible token shard files (.bin).
//
// Layout: a header of 256 x int32 (1024 bytes), then the tokens, little-endian:
//   header[0] = magic, header[1] = version, header[2] = number of tokens (the rest is zero)
//   magic 20240520, version 1: uint16 tokens (vocab <= 65536, GPT-2 / SmolLM2)
//   magic 20240801, version 7: uint32 tokens (vocab  > 65536, Llama 3)
// Names: <prefix>_train_NNNNNN.bin, <prefix>_val_NNNNNN.bin. Each document is preceded by the EOT token.
//
// The reader memory-maps the file and validates magic, version, file size against the token count, and
// (when a vocab size is given) that every token is < vocab; errors name the file and the offset / index.
#ifndef SLLM_SHARD_H
#define SLLM_SHARD_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHARD_HEADER_INTS 256
#define SHARD_HEADER_BYTES (SHARD_HEADER_INTS * 4)
#define SHARD_MAGIC_U16 20240520
#define SHARD_VERSION_U16 1
#define SHARD_MAGIC_U32 20240801
#define SHARD_VERSION_U32 7

// Bytes per token for a vocabulary: 2 when vocab_size <= 65536, else 4.
int shard_token_bytes_for_vocab(int vocab_size);

// ---- writer: streams tokens into "<path>.tmp", patches the count, fsyncs and renames on close.
typedef struct ShardWriter ShardWriter;
ShardWriter *shard_writer_open(const char *path, int token_bytes, char *err, size_t errn);
// Returns 0, or -1 with err (I/O error, or a token that does not fit the token width, naming its index).
int shard_writer_write(ShardWriter *w, const int32_t *tokens, size_t n, char *err, size_t errn);
uint64_t shard_writer_count(const ShardWriter *w);
int shard_writer_close(ShardWriter *w, char *err, size_t errn);   // commits the file; frees w
void shard_writer_abort(ShardWriter *w);                           // removes the temp file; frees w
// One-shot helper.
int shard_write(const char *path, const int32_t *tokens, size_t n, int token_bytes, char *err, size_t errn);

// ---- reader (mmap).
typedef struct {
    char path[1024];
    int token_bytes;          // 2 or 4
    uint64_t num_tokens;
    const uint8_t *tokens;    // points into the mapping, after the header
    void *map;                // whole-file mapping
    size_t map_len;
} Shard;

// vocab_size > 0: check every token < vocab_size (scans the file); <= 0: skip the range check.
// Returns 0, or -1 with a message naming the file and what is wrong (and where); *s is then zeroed.
int shard_open(Shard *s, const char *path, int vocab_size, char *err, size_t errn);
void shard_close(Shard *s);
static inline uint32_t shard_token(const Shard *s, uint64_t i) {
    if (s->token_bytes == 2) { uint16_t v; __builtin_memcpy(&v, s->tokens + 2 * i, 2); return v; }
    uint32_t v; __builtin_memcpy(&v, s->tokens + 4 * i, 4); return v;
}
// Copy tokens [start, start+n) as int32 (caller guarantees the range is inside the shard).
void shard_read_tokens(const Shard *s, uint64_t start, size_t n, int32_t *out);
// Largest token id in the shard (scans); 0 for an empty shard.
uint32_t shard_max_token(const Shard *s);

#ifdef __cplusplus
}
#endif
#endif  // SLLM_SHARD_H
