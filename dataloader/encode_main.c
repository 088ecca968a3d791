// build/encode: encode a file (or stdin) with a tokenizer and print the ids, or decode ids back to bytes.
// Used by the tokenizer comparisons (dev/tokenizer/) and for benchmarks.
//   encode -t TOKENIZER [-s] [-l] [-o ids.bin] [-b REPEAT] [FILE|-]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "dataloader/tokenizer.h"

static void usage(void) {
    printf("usage: encode -t TOKENIZER [options] [FILE]   (FILE '-' or absent: stdin)\n"
           "  -t PATH   tokenizer.json, GPT-2 encoder.json (vocab.bpe beside it) or a directory holding them\n"
           "  -s        recognise special tokens (e.g. <|endoftext|>) written in the text\n"
           "  -l        each input line (without its newline) is a separate text; one line of ids per input line\n"
           "  -o FILE   write ids as int32 little-endian to FILE instead of printing them\n"
           "  -J        input is a JSON array of strings; one line of ids per string\n"
           "  -d        decode: read whitespace-separated ids and write the bytes to stdout\n"
           "  -b N      benchmark: encode the whole input N times on one core, print MB/s (no ids output)\n"
           "  -h        this help\n");
}

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

int main(int argc, char **argv) {
    const char *tok_path = NULL, *out_path = NULL, *in_path = NULL;
    int special = 0, lines = 0, decode = 0, bench = 0, json = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(argv[i], "-o") && i + 1 < argc) out_path = argv[++i];
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) bench = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-s")) special = 1;
        else if (!strcmp(argv[i], "-l")) lines = 1;
        else if (!strcmp(argv[i], "-d")) decode = 1;
        else if (!strcmp(argv[i], "-J")) json = 1;
        else if (!strcmp(argv[i], "-h") || !strcmp(argv[i], "--help")) { usage(); return 0; }
        else if (argv[i][0] == '-' && argv[i][1]) { fprintf(stderr, "encode: unknown option %s\n", argv[i]); usage(); return 2; }
        else in_path = argv[i];
    }
    if (!tok_path) { fprintf(stderr, "encode: -t TOKENIZER is required\n"); usage(); return 2; }
    char err[1024];
    Tokenizer *t = tokenizer_load(tok_path, err, sizeof err);
    if (!t) { fprintf(stderr, "error: %s\n", err); return 1; }
    size_t n; char *text = read_all(in_path, &n);
    int flags = special ? TOK_ALLOW_SPECIAL : 0;
    if (decode) {
        size_t cap = 1024, k = 0; int32_t *ids = sllm_malloc(cap * 4);
        char *p = text, *end;
        for (;;) {
            long v = strtol(p, &end, 10);
            if (end == p) break;
            if (k == cap) { cap *= 2; ids = realloc(ids, cap * 4); }
            ids[k++] = (int32_t)v; p = end;
        }
        char *out; size_t ol;
        if (tokenizer_decode(t, ids, k, &out, &ol) != 0) { fprintf(stderr, "error: an id is outside the vocab (size %d)\n", tokenizer_vocab_size(t)); return 1; }
        fwrite(out, 1, ol, stdout);
        free(out); free(ids); free(text); tokenizer_free(t);
        return 0;
    }
    TokEncoder *e = tok_encoder_new(t);
    int32_t *ids = NULL; size_t nids = 0, cap = 0;
    if (json) {
        cJSON *root = cJSON_ParseWithLength(text, n), *it;
        if (!cJSON_IsArray(root)) SLLM_FATAL("-J: input is not a JSON array of strings");
        cJSON_ArrayForEach(it, root) {
            if (!cJSON_IsString(it)) SLLM_FATAL("-J: array element is not a string");
            nids = 0;
            if (tok_encoder_encode(e, it->valuestring, strlen(it->valuestring), flags, &ids, &nids, &cap) != 0) SLLM_FATAL("encode failed");
            for (size_t i = 0; i < nids; i++) printf(i ? " %d" : "%d", ids[i]);
            printf("\n");
        }
        cJSON_Delete(root);
        return 0;
    }
    if (bench > 0) {
        double t0 = sllm_time_s();
        for (int r = 0; r < bench; r++) {
            nids = 0;
            TokEncoder *fresh = tok_encoder_new(t);  // cold cache every round, like a fresh process
            if (tok_encoder_encode(fresh, text, n, flags, &ids, &nids, &cap) != 0) SLLM_FATAL("encode failed");
            tok_encoder_free(fresh);
        }
        double dt = sllm_time_s() - t0;
        printf("encode: %zu bytes x %d rounds in %.3f s = %.2f MB/s, %zu tokens per round\n", n, bench, dt, (double)n * bench / dt / 1e6, nids);
        return 0;
    }
    FILE *of = out_path ? sllm_fopen(out_path, "wb") : NULL;
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
    if (of) fclose(of);
    free(ids); tok_encoder_free(e); free(text); tokenizer_free(t);
    return 0;
}
