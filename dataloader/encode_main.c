// build/encode: encode a file (or stdin) with a tokenizer and print the ids, or decode ids back to bytes.
// Used by the tokenizer comparisons (dev/tokenizer/) and for benchmarks.
//   encode -t TOKENIZER [--special] [--lines] [-J] [-d] [-o ids.bin] [--bench REPEAT] [FILE|-]...
// Each input (a FILE, or stdin for '-' or none) is one text, processed in the order given.
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "common.h"
#include "dataloader/tokenizer.h"

static const char *INTRO =
"Encodes text to token ids (one line of ids per input) or, with -d, decodes ids to bytes.\n"
"Positional arguments: input FILEs, each one text, in order (none or '-': stdin).";

static char *read_all(const char *path, size_t *n) {
    if (path && strcmp(path, "-") != 0) {
        const char *e; char *d = sllm_read_file(path, n, &e);
        if (!d) SLLM_FATAL("cannot read %s: %s", path, e);
        return d;
    }
    size_t cap = 1 << 20, len = 0; char *d = sllm_malloc(cap);
    size_t r;
    while ((r = fread(d + len, 1, cap - len, stdin)) > 0) { len += r; if (len == cap) { cap *= 2; d = realloc(d, cap); SLLM_CHECK(d, "out of memory"); } }
    *n = len;
    return d;
}

// Parses the ids of a decode input: integers separated by whitespace and/or commas. Anything else, or an id
// outside [0, vocab), is an error naming the byte offset. Returns the number of ids (*ids malloc'd).
static size_t parse_ids(const char *name, const char *text, size_t n, int vocab, int32_t **ids_out) {
    size_t cap = 1024, k = 0;
    int32_t *ids = sllm_malloc(cap * 4);
    size_t i = 0;
    while (i < n) {
        char c = text[i];
        if (c == ',' || c == ' ' || c == '\t' || c == '\n' || c == '\r') { i++; continue; }
        if (c < '0' || c > '9') SLLM_FATAL("-d: %s byte %zu: expected a token id (digits, separated by spaces or commas), got '%c'", name, i, c);
        long long v = 0;
        size_t s0 = i;
        while (i < n && text[i] >= '0' && text[i] <= '9') {
            v = v * 10 + (text[i] - '0');
            if (v >= vocab) SLLM_FATAL("-d: %s byte %zu: id %.*s is outside the vocab [0, %d)", name, s0, (int)(i + 1 - s0), text + s0, vocab);
            i++;
        }
        if (k == cap) { cap *= 2; ids = realloc(ids, cap * 4); SLLM_CHECK(ids, "out of memory"); }
        ids[k++] = (int32_t)v;
    }
    *ids_out = ids;
    return k;
}

int main(int argc, char **argv) {
    const char *tok_path = NULL, *out_path = NULL;
    int special = 0, lines = 0, decode = 0, bench = 0, json = 0;
    CliOpt opts[] = {
        {"tokenizer", 't', CLI_STRING, &tok_path, "tokenizer.json, GPT-2 encoder.json (vocab.bpe beside it) or a directory holding them", 0, 0, 0},
        {"special", 0, CLI_FLAG, &special, "recognise special tokens (e.g. <|endoftext|>) written in the text", 0, 0, 0},
        {"lines", 0, CLI_FLAG, &lines, "each input line (without its newline) is a separate text; one line of ids per input line", 0, 0, 0},
        {"out", 'o', CLI_STRING, &out_path, "write ids as int32 little-endian to FILE instead of printing them", 0, 0, 0},
        {"json", 'J', CLI_FLAG, &json, "input is a JSON array of strings; one line of ids per string", 0, 0, 0},
        {"decode", 'd', CLI_FLAG, &decode, "decode: read token ids (separated by spaces or commas) and write the bytes to stdout", 0, 0, 0},
        {"bench", 0, CLI_INT, &bench, "benchmark: encode the whole input N times on one core, print MB/s (no ids output)", 1, 1 << 20, 0},
        {NULL, 0, CLI_INT, NULL, NULL, 0, 0, 0},
    };
    const char **inputs = sllm_calloc((size_t)argc + 1, sizeof(char *));
    int ninputs = 0;
    cli_parse_pos(argc, argv, opts, "encode", INTRO, inputs, &ninputs);
    if (!tok_path) SLLM_FATAL("encode: -t TOKENIZER is required (see -h)");
    if (decode + json + (bench > 0) > 1) SLLM_FATAL("encode: give at most one of -d, -J, --bench");
    if (ninputs == 0) inputs[ninputs++] = "-";
    int nstdin = 0;
    for (int i = 0; i < ninputs; i++) {  // every input readable before any output
        if (!strcmp(inputs[i], "-")) { nstdin++; continue; }
        FILE *f = fopen(inputs[i], "rb");
        if (!f) SLLM_FATAL("encode: cannot open input %s: %s", inputs[i], strerror(errno));
        fclose(f);
    }
    if (nstdin > 1) SLLM_FATAL("encode: stdin ('-') given %d times", nstdin);
    char err[1024];
    Tokenizer *t = tokenizer_load(tok_path, err, sizeof err);
    if (!t) { fprintf(stderr, "error: %s\n", err); return 1; }
    int flags = special ? TOK_ALLOW_SPECIAL : 0;
    FILE *of = out_path ? sllm_fopen(out_path, "wb") : NULL;
    TokEncoder *e = tok_encoder_new(t);
    int32_t *ids = NULL; size_t nids = 0, cap = 0;
    for (int in = 0; in < ninputs; in++) {
        const char *name = strcmp(inputs[in], "-") ? inputs[in] : "stdin";
        size_t n; char *text = read_all(inputs[in], &n);
        if (decode) {
            int32_t *dids;
            size_t k = parse_ids(name, text, n, tokenizer_vocab_size(t), &dids);
            char *out; size_t ol;
            if (tokenizer_decode(t, dids, k, &out, &ol) != 0) SLLM_FATAL("-d: %s: an id is outside the vocab (size %d)", name, tokenizer_vocab_size(t));
            fwrite(out, 1, ol, stdout);
            free(out); free(dids);
        } else if (json) {
            cJSON *root = cJSON_ParseWithLength(text, n), *it;
            if (!cJSON_IsArray(root)) SLLM_FATAL("-J: %s is not a JSON array of strings", name);
            cJSON_ArrayForEach(it, root) {
                if (!cJSON_IsString(it)) SLLM_FATAL("-J: %s: array element is not a string", name);
                nids = 0;
                if (tok_encoder_encode(e, it->valuestring, strlen(it->valuestring), flags, &ids, &nids, &cap) != 0) SLLM_FATAL("encode failed");
                for (size_t i = 0; i < nids; i++) printf(i ? " %d" : "%d", ids[i]);
                printf("\n");
            }
            cJSON_Delete(root);
        } else if (bench > 0) {
            double t0 = sllm_time_s();
            for (int r = 0; r < bench; r++) {
                nids = 0;
                TokEncoder *fresh = tok_encoder_new(t);  // cold cache every round, like a fresh process
                if (tok_encoder_encode(fresh, text, n, flags, &ids, &nids, &cap) != 0) SLLM_FATAL("encode failed");
                tok_encoder_free(fresh);
            }
            double dt = sllm_time_s() - t0;
            printf("encode: %s: %zu bytes x %d rounds in %.3f s = %.2f MB/s, %zu tokens per round\n", name, n, bench, dt, (double)n * bench / dt / 1e6, nids);
        } else {
            char *p = text, *end = text + n;
            while (p < end || (!lines && p == end)) {
                char *le = end;
                if (lines) { char *nl = memchr(p, '\n', (size_t)(end - p)); if (nl) le = nl; }
                nids = 0;
                if (tok_encoder_encode(e, p, (size_t)(le - p), flags, &ids, &nids, &cap) != 0) SLLM_FATAL("encode failed");
                if (of) sllm_fwrite(ids, 4, nids, of, "ids");
                else { for (size_t i = 0; i < nids; i++) printf(i ? " %d" : "%d", ids[i]); printf("\n"); }
                if (!lines) break;
                p = le + 1;
            }
        }
        free(text);
    }
    if (of && fclose(of) != 0) SLLM_FATAL("encode: cannot write %s: %s", out_path, strerror(errno));
    free(ids); free(inputs); tok_encoder_free(e); tokenizer_free(t);
    return 0;
}
