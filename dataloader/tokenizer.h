// dataloader/tokenizer.h: byte-level BPE tokenizer (GPT-2 style), encode and decode.
//
// Loads either
//   * a Hugging Face tokenizer.json (model.type "BPE", byte-level; merges as "a b" strings or [a, b] pairs;
//     added_tokens; pre_tokenizer ByteLevel / Split / Digits / Sequence; normalizer null), or
//   * GPT-2's encoder.json + vocab.bpe (path = the directory holding them, or the encoder.json path).
// Pre-tokenisation runs the tokenizer's own regex through PCRE2 (UTF + UCP, JIT). Merges are applied by rank
// (hash map pair -> rank; a per-encoder cache word -> tokens).
//
// Guarantees: ANY byte string encodes without error (invalid UTF-8 included: each maximal run of bytes that
// is not valid UTF-8 becomes its own pre-token and is BPE-merged as raw bytes) and decoding the ids gives back
// exactly the input bytes. Special tokens (e.g. "<|endoftext|>") in the text are matched only when
// TOK_ALLOW_SPECIAL is passed; otherwise they are encoded as plain text.
//
// Thread safety: a loaded Tokenizer is immutable. tokenizer_encode() is thread-safe (it uses a temporary
// scratch state); for throughput, each thread creates its own TokEncoder (cache + PCRE2 match data).
#ifndef SLLM_TOKENIZER_H
#define SLLM_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct Tokenizer Tokenizer;
typedef struct TokEncoder TokEncoder;

// Encode flags.
#define TOK_ALLOW_SPECIAL 1  // recognise added/special tokens (e.g. "<|endoftext|>") written in the text

// Load a tokenizer. Returns NULL and writes a clear message (what, where, expected) into err on failure.
Tokenizer *tokenizer_load(const char *path, char *err, size_t errn);
void tokenizer_free(Tokenizer *t);

// Encode len bytes of text (need not be NUL-terminated, may contain NUL and invalid UTF-8).
// *ids_out is malloc'd (free with free() or tokenizer_ids_free()); returns 0 on success, -1 on failure
// (only out of memory or a PCRE2 internal error; never for any input bytes).
int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int32_t **ids_out, size_t *n_out);
int tokenizer_encode_flags(const Tokenizer *t, const char *text, size_t len, int flags,
                           int32_t **ids_out, size_t *n_out);
void tokenizer_ids_free(int32_t *ids);

// Reusable per-thread encoder state (word cache, match data, buffers) for fast repeated encoding.
TokEncoder *tok_encoder_new(const Tokenizer *t);
void tok_encoder_free(TokEncoder *e);
// Appends the ids of text to *ids (a growable buffer: *cap elements allocated, *n used). Returns 0 / -1.
int tok_encoder_encode(TokEncoder *e, const char *text, size_t len, int flags,
                       int32_t **ids, size_t *n, size_t *cap);

// Decoding. The bytes of one token (not NUL-terminated; NULL with *len 0 for an id out of range).
const uint8_t *tokenizer_token_bytes(const Tokenizer *t, int32_t id, size_t *len);
// Decode a sequence into a malloc'd, NUL-terminated byte buffer; *len_out = number of bytes (without NUL).
// Ids out of range are an error: returns -1 (and writes nothing); 0 on success.
int tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len_out);

// Vocabulary. vocab_size = 1 + the largest id (model vocab and added tokens).
int tokenizer_vocab_size(const Tokenizer *t);
int tokenizer_eot_id(const Tokenizer *t);   // end-of-text / document separator id ("<|endoftext|>", "</s>"...); -1 if none
int tokenizer_bos_id(const Tokenizer *t);   // beginning-of-sequence id if the tokenizer has a distinct one, else eot; -1 if none
int tokenizer_token_id(const Tokenizer *t, const char *token); // id of an exact vocab/added token string, -1 if absent
const char *tokenizer_describe(const Tokenizer *t);            // one line: kind, vocab, merges, pre-tokenizer

#ifdef __cplusplus
}
#endif
#endif  // SLLM_TOKENIZER_H
