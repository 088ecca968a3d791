// build/tokenize: text files or JSONL (a "text" field), from files or stdin, to llm.c token shards.
//
// Threads: the main thread reads documents into jobs (~1 MB each); worker threads encode jobs (each with its
// own TokEncoder); a writer thread takes finished jobs in input order and appends "EOT + document tokens" to
// the current train or val shard. Document i goes to val when floor((i+1)*f) > floor(i*f), f = val fraction
// (deterministic, exactly a fraction f of the documents, spread evenly). Shards fill to the shard size; a
// document may continue in the next shard (as in llm.c).
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "cli.h"
#include "common.h"
#include "dataloader/shard.h"
#include "dataloader/tokenizer.h"

static const char *INTRO =
"Writes OUTDIR/<prefix>_train_000000.bin, ..._val_000000.bin (llm.c format; uint16 tokens, uint32 when the\n"
"vocab exceeds 65536). Every document is preceded by the end-of-text token.\n"
"Positional arguments: input FILEs (none or '-': read stdin).";

// ---- jobs
typedef struct {
    char *buf; size_t len, cap;          // concatenated document texts
    size_t *doc_off; size_t ndocs, doc_cap; // doc i = buf[doc_off[i], doc_off[i+1])
    int32_t *ids; size_t nids, ids_cap;
    size_t *doc_ntok;                     // tokens per document (without separator)
    uint64_t first_doc;
    int state;                            // 0 empty, 1 filled, 2 encoding, 3 done
    uint64_t seq;
} Job;

typedef struct {
    Tokenizer *tok;
    int flags, nthreads, quiet;
    Job *jobs; int njobs;
    pthread_mutex_t mu; pthread_cond_t cv;
    uint64_t next_fill, next_write;
    int eof;
    atomic_int stop;
    // writer
    const char *outdir, *prefix;
    uint64_t shard_size, max_tokens;
    double val_frac;
    int token_bytes; int32_t sep;
    ShardWriter *w[2]; int shard_idx[2]; uint64_t tokens[2], docs[2]; int nshards[2];
    uint64_t bytes_in, total_bytes;
    double t0, last_print;
    int failed; char err[1024];
} Ctx;

static void job_add_doc(Job *j, const char *p, size_t n) {
    if (j->len + n > j->cap) { j->cap = (j->len + n) * 2; j->buf = realloc(j->buf, j->cap); SLLM_CHECK(j->buf, "out of memory"); }
    if (j->ndocs + 2 > j->doc_cap) { j->doc_cap = (j->ndocs + 2) * 2; j->doc_off = realloc(j->doc_off, j->doc_cap * sizeof(size_t)); SLLM_CHECK(j->doc_off, "out of memory"); }
    if (j->ndocs == 0) j->doc_off[0] = 0;
    memcpy(j->buf + j->len, p, n); j->len += n;
    j->ndocs++; j->doc_off[j->ndocs] = j->len;
}

static void *worker(void *arg) {
    Ctx *c = arg;
    TokEncoder *e = tok_encoder_new(c->tok);
    pthread_mutex_lock(&c->mu);
    for (;;) {
        Job *j = NULL;
        for (int k = 0; k < c->njobs; k++) if (c->jobs[k].state == 1 && (!j || c->jobs[k].seq < j->seq)) j = &c->jobs[k];
        if (!j) { if (c->eof || c->stop) break; pthread_cond_wait(&c->cv, &c->mu); continue; }
        j->state = 2;
        pthread_mutex_unlock(&c->mu);
        j->nids = 0;
        j->doc_ntok = realloc(j->doc_ntok, (j->ndocs + 1) * sizeof(size_t));
        for (size_t d = 0; d < j->ndocs; d++) {
            size_t before = j->nids;
            if (tok_encoder_encode(e, j->buf + j->doc_off[d], j->doc_off[d + 1] - j->doc_off[d], c->flags, &j->ids, &j->nids, &j->ids_cap) != 0)
                SLLM_FATAL("tokenizer failed (out of memory?) on document %llu", (unsigned long long)(j->first_doc + d));
            j->doc_ntok[d] = j->nids - before;
        }
        pthread_mutex_lock(&c->mu);
        j->state = 3;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    tok_encoder_free(e);
    return NULL;
}

static int split_of(double f, uint64_t i) { return (uint64_t)((double)(i + 1) * f) > (uint64_t)((double)i * f); }

static int write_tokens(Ctx *c, int s, const int32_t *ids, size_t n) {
    static const char *names[2] = {"train", "val"};
    while (n > 0) {
        if (!c->w[s]) {
            char path[2048];
            snprintf(path, sizeof path, "%s/%s_%s_%06d.bin", c->outdir, c->prefix, names[s], c->shard_idx[s]);
            c->w[s] = shard_writer_open(path, c->token_bytes, c->err, sizeof c->err);
            if (!c->w[s]) return -1;
        }
        uint64_t room = c->shard_size - shard_writer_count(c->w[s]);
        size_t k = n < room ? n : (size_t)room;
        if (shard_writer_write(c->w[s], ids, k, c->err, sizeof c->err) != 0) return -1;
        ids += k; n -= k; c->tokens[s] += k;
        if (shard_writer_count(c->w[s]) >= c->shard_size) {
            if (shard_writer_close(c->w[s], c->err, sizeof c->err) != 0) { c->w[s] = NULL; return -1; }
            c->w[s] = NULL; c->shard_idx[s]++; c->nshards[s]++;
        }
    }
    return 0;
}

static void progress(Ctx *c, int final) {
    double now = sllm_time_s();
    if (c->quiet || (!final && now - c->last_print < 1.0)) return;
    c->last_print = now;
    double dt = now - c->t0, mbs = dt > 0 ? (double)c->bytes_in / dt / 1e6 : 0;
    char eta[64] = "";
    if (c->total_bytes > 0 && c->bytes_in > 0 && !final) {
        double left = (double)(c->total_bytes > c->bytes_in ? c->total_bytes - c->bytes_in : 0) / ((double)c->bytes_in / dt);
        snprintf(eta, sizeof eta, ", ETA %.0f s (%.1f%%)", left, 100.0 * (double)c->bytes_in / (double)c->total_bytes);
    }
    fprintf(stderr, "\rtokenize: %.1f MB, %llu docs, %llu tokens (%llu train, %llu val), %.2f MB/s%s   %s",
            (double)c->bytes_in / 1e6, (unsigned long long)(c->docs[0] + c->docs[1]), (unsigned long long)(c->tokens[0] + c->tokens[1]),
            (unsigned long long)c->tokens[0], (unsigned long long)c->tokens[1], mbs, eta, final ? "\n" : "");
    fflush(stderr);
}

static void *writer(void *arg) {
    Ctx *c = arg;
    pthread_mutex_lock(&c->mu);
    for (;;) {
        Job *j = NULL;
        for (int k = 0; k < c->njobs; k++) if (c->jobs[k].state == 3 && c->jobs[k].seq == c->next_write) j = &c->jobs[k];
        if (!j) {
            if (c->eof && c->next_write == c->next_fill) break;
            pthread_cond_wait(&c->cv, &c->mu); continue;
        }
        pthread_mutex_unlock(&c->mu);
        size_t off = 0;
        for (size_t d = 0; d < j->ndocs && !c->failed && !c->stop; d++) {
            uint64_t di = j->first_doc + d;
            int s = split_of(c->val_frac, di);
            if (write_tokens(c, s, &c->sep, 1) != 0 || write_tokens(c, s, j->ids + off, j->doc_ntok[d]) != 0) c->failed = 1;
            off += j->doc_ntok[d]; c->docs[s]++;
            if (c->max_tokens && c->tokens[0] + c->tokens[1] >= c->max_tokens) c->stop = 1;
        }
        c->bytes_in += j->len;
        progress(c, 0);
        pthread_mutex_lock(&c->mu);
        if (c->failed) c->stop = 1;
        j->state = 0; j->len = 0; j->ndocs = 0;
        c->next_write++;
        pthread_cond_broadcast(&c->cv);
    }
    pthread_mutex_unlock(&c->mu);
    return NULL;
}

// ---- reader side
typedef struct { Ctx *c; Job *cur; uint64_t ndocs; size_t job_bytes; } Reader;

static Job *get_empty_job(Ctx *c) {
    pthread_mutex_lock(&c->mu);
    Job *j = NULL;
    while (!c->stop) {
        for (int k = 0; k < c->njobs && !j; k++) if (c->jobs[k].state == 0) j = &c->jobs[k];
        if (j) break;
        pthread_cond_wait(&c->cv, &c->mu);
    }
    pthread_mutex_unlock(&c->mu);
    return j;
}
static void submit(Reader *r) {
    Ctx *c = r->c;
    if (!r->cur) return;
    if (r->cur->ndocs == 0) return;
    pthread_mutex_lock(&c->mu);
    r->cur->seq = c->next_fill++; r->cur->state = 1;
    pthread_cond_broadcast(&c->cv);
    pthread_mutex_unlock(&c->mu);
    r->cur = NULL;
}
static int add_doc(Reader *r, const char *p, size_t n) {
    if (r->c->stop) return -1;
    if (!r->cur) { r->cur = get_empty_job(r->c); if (!r->cur) return -1; r->cur->first_doc = r->ndocs; }
    job_add_doc(r->cur, p, n);
    r->ndocs++;
    if (r->cur->len >= r->job_bytes) submit(r);
    return 0;
}

static char *unescape(const char *s) {
    char *o = sllm_malloc(strlen(s) + 1), *q = o;
    for (; *s; s++) {
        if (*s == '\\' && s[1]) { s++; *q++ = *s == 'n' ? '\n' : *s == 't' ? '\t' : *s == 'r' ? '\r' : *s == '0' ? '\0' : *s; }
        else *q++ = *s;
    }
    *q = 0;
    return o;
}

// Reads a whole stream (text format) into memory then splits into documents.
static int read_text(Reader *r, FILE *f, const char *name, const char *delim) {
    size_t cap = 1 << 20, len = 0, got; char *d = sllm_malloc(cap);
    while ((got = fread(d + len, 1, cap - len, f)) > 0) { len += got; if (len == cap) { cap *= 2; d = realloc(d, cap); SLLM_CHECK(d, "out of memory reading %s", name); } }
    if (ferror(f)) SLLM_FATAL("read error on %s: %s", name, strerror(errno));
    int rc = 0;
    if (!delim || !*delim) rc = add_doc(r, d, len);
    else {
        size_t dl = strlen(delim), p = 0;
        while (p <= len && rc == 0) {
            char *hit = dl <= len - p ? memmem(d + p, len - p, delim, dl) : NULL;
            size_t e = hit ? (size_t)(hit - d) : len;
            if (e > p) rc = add_doc(r, d + p, e - p);  // empty documents are skipped
            if (!hit) break;
            p = e + dl;
        }
    }
    free(d);
    return rc;
}

static int read_jsonl(Reader *r, FILE *f, const char *name, const char *field, int skip_bad) {
    char *line = NULL; size_t cap = 0; ssize_t n; uint64_t lineno = 0; uint64_t bad = 0;
    int rc = 0;
    while (rc == 0 && (n = getline(&line, &cap, f)) != -1) {
        lineno++;
        size_t len = (size_t)n;
        while (len > 0 && (line[len - 1] == '\n' || line[len - 1] == '\r')) len--;
        size_t sp = 0; while (sp < len && (line[sp] == ' ' || line[sp] == '\t')) sp++;
        if (sp == len) continue;  // blank line
        cJSON *o = cJSON_ParseWithLength(line, len);
        const char *why = NULL;
        const cJSON *tx = NULL;
        if (!o) why = "not valid JSON";
        else if (!cJSON_IsObject(o)) why = "not a JSON object";
        else if (!(tx = cJSON_GetObjectItem(o, field))) why = "no such field";
        else if (!cJSON_IsString(tx)) why = "field is not a string";
        if (why) {
            bad++;
            fprintf(stderr, "%stokenize: %s:%llu: bad JSONL line (%s: field \"%s\")%s\n", r->c->quiet ? "" : "\n", name,
                    (unsigned long long)lineno, why, field, skip_bad ? "; skipped" : "");
            cJSON_Delete(o);
            if (!skip_bad) { free(line); fprintf(stderr, "tokenize: stopping (use --skip-bad-lines to skip bad lines)\n"); return -2; }
            continue;
        }
        rc = add_doc(r, tx->valuestring, strlen(tx->valuestring));
        cJSON_Delete(o);
    }
    if (bad) fprintf(stderr, "tokenize: %s: %llu bad line(s) skipped\n", name, (unsigned long long)bad);
    free(line);
    return rc;
}

static int ends_with(const char *s, const char *suf) { size_t a = strlen(s), b = strlen(suf); return a >= b && !strcmp(s + a - b, suf); }

int main(int argc, char **argv) {
    const char *tok_path = NULL, *outdir = NULL, *prefix = "data", *format = NULL, *field = "text", *sep_tok = NULL;
    const char *delim_arg = NULL;
    char *delim = NULL;
    unsigned long long shard_size = 100000000, max_tokens = 0, total_bytes = 0;
    float val_frac = 0.01f;
    int skip_bad = 0, special = 0, quiet = 0;
    int nthreads = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (nthreads < 1) nthreads = 1;
    CliOpt opts[] = {
        {"tokenizer", 't', CLI_STRING, &tok_path, "tokenizer.json, or GPT-2 encoder.json / a directory with encoder.json + vocab.bpe", 0, 0, 0},
        {"out", 'o', CLI_STRING, &outdir, "output directory (created if missing)", 0, 0, 0},
        {"prefix", 0, CLI_STRING, &prefix, "shard name prefix", 0, 0, 0},
        {"format", 'f', CLI_STRING, &format, "text | jsonl (default: jsonl for *.jsonl / *.json files, text otherwise; stdin: text)", 0, 0, 0},
        {"field", 0, CLI_STRING, &field, "JSONL field holding the document text", 0, 0, 0},
        {"delimiter", 0, CLI_STRING, &delim_arg, "text format: split the input into documents at S (C escapes \\n \\t allowed); default: each file (or all of stdin) is one document", 0, 0, 0},
        {"shard-size", 0, CLI_U64, &shard_size, "tokens per shard; the last shard of each split may be shorter", 1, 2147483647.0, 0},
        {"val-frac", 'v', CLI_FLOAT, &val_frac, "fraction of documents for the val split, 0..1; deterministic", 0, 1, 0},
        {"skip-bad-lines", 0, CLI_FLAG, &skip_bad, "JSONL: report a bad line (file:line and why) and skip it (default: stop with an error)", 0, 0, 0},
        {"sep-token", 0, CLI_STRING, &sep_tok, "document separator token string (default: the tokenizer's end-of-text token)", 0, 0, 0},
        {"allow-special", 0, CLI_FLAG, &special, "recognise special tokens written in the text (default: encode them as plain text)", 0, 0, 0},
        {"threads", 0, CLI_INT, &nthreads, "encoding threads (default: number of online CPUs)", 1, 4096, 0},
        {"max-tokens", 0, CLI_U64, &max_tokens, "stop after about N tokens in total (whole documents; 0: no limit)", 0, 0, 0},
        {"total-bytes", 0, CLI_U64, &total_bytes, "input size for the ETA when reading stdin", 0, 0, 0},
        {"quiet", 'q', CLI_FLAG, &quiet, "no progress line", 0, 0, 0},
        {NULL, 0, CLI_INT, NULL, NULL, 0, 0, 0},
    };
    const char **files = calloc((size_t)argc + 1, sizeof(char *)); int nfiles = 0;
    cli_parse_pos(argc, argv, opts, "tokenize", INTRO, files, &nfiles);
    if (delim_arg) delim = unescape(delim_arg);
    for (int i = 0; i < nfiles; i++) {  // every input readable before the first shard is written
        if (!strcmp(files[i], "-")) continue;
        FILE *f = fopen(files[i], "rb");
        if (!f) { fprintf(stderr, "error: cannot open input %s: %s\n", files[i], strerror(errno)); return 1; }
        fclose(f);
    }
    if (!tok_path || !outdir) { fprintf(stderr, "tokenize: -t TOKENIZER and -o OUTDIR are required (see -h)\n"); return 2; }
    if (format && strcmp(format, "text") && strcmp(format, "jsonl")) { fprintf(stderr, "tokenize: --format must be text or jsonl, got '%s'\n", format); return 2; }
    char err[1024];
    Ctx c; memset(&c, 0, sizeof c);
    c.tok = tokenizer_load(tok_path, err, sizeof err);
    if (!c.tok) { fprintf(stderr, "error: %s\n", err); return 1; }
    c.sep = sep_tok ? tokenizer_token_id(c.tok, sep_tok) : tokenizer_eot_id(c.tok);
    if (c.sep < 0) { fprintf(stderr, "error: tokenizer %s has no %s token; pass --sep-token\n", tok_path, sep_tok ? sep_tok : "end-of-text"); return 1; }
    if (mkdir(outdir, 0755) != 0 && errno != EEXIST) { fprintf(stderr, "error: cannot create output directory %s: %s\n", outdir, strerror(errno)); return 1; }
    c.flags = special ? TOK_ALLOW_SPECIAL : 0;
    c.nthreads = (int)nthreads; c.quiet = quiet; c.outdir = outdir; c.prefix = prefix;
    c.shard_size = shard_size; c.max_tokens = max_tokens; c.val_frac = val_frac;
    c.token_bytes = shard_token_bytes_for_vocab(tokenizer_vocab_size(c.tok));
    c.total_bytes = total_bytes;
    if (nfiles > 0) for (int i = 0; i < nfiles; i++) { struct stat st; if (strcmp(files[i], "-") && stat(files[i], &st) == 0) c.total_bytes += (uint64_t)st.st_size; }
    c.njobs = 2 * c.nthreads + 2;
    c.jobs = sllm_calloc((size_t)c.njobs, sizeof(Job));
    pthread_mutex_init(&c.mu, NULL); pthread_cond_init(&c.cv, NULL);
    c.t0 = c.last_print = sllm_time_s();
    pthread_t *th = sllm_malloc(sizeof(pthread_t) * (size_t)(c.nthreads + 1));
    for (int i = 0; i < c.nthreads; i++) pthread_create(&th[i], NULL, worker, &c);
    pthread_create(&th[c.nthreads], NULL, writer, &c);

    Reader r = {&c, NULL, 0, 1 << 20};
    int rc = 0;
    if (nfiles == 0) files[nfiles++] = "-";
    for (int i = 0; i < nfiles && rc == 0 && !c.stop; i++) {
        const char *name = strcmp(files[i], "-") ? files[i] : "stdin";
        FILE *f = strcmp(files[i], "-") ? fopen(files[i], "rb") : stdin;
        if (!f) { fprintf(stderr, "error: cannot open input %s: %s\n", files[i], strerror(errno)); rc = -2; break; }
        const char *fmt = format ? format : (ends_with(files[i], ".jsonl") || ends_with(files[i], ".json")) ? "jsonl" : "text";
        rc = !strcmp(fmt, "jsonl") ? read_jsonl(&r, f, name, field, skip_bad) : read_text(&r, f, name, delim);
        if (f != stdin) fclose(f);
        if (rc == -1 && c.stop) rc = 0;  // stopped by --max-tokens or by a writer error (reported below)
    }
    submit(&r);
    pthread_mutex_lock(&c.mu); c.eof = 1; if (rc != 0) c.stop = 1; pthread_cond_broadcast(&c.cv); pthread_mutex_unlock(&c.mu);
    for (int i = 0; i <= c.nthreads; i++) pthread_join(th[i], NULL);
    // writer may have stopped early; the remaining jobs are dropped
    if (!c.failed && rc == 0) {
        for (int s = 0; s < 2; s++) if (c.w[s]) {
            if (shard_writer_close(c.w[s], c.err, sizeof c.err) != 0) c.failed = 1;
            else c.nshards[s]++;
            c.w[s] = NULL;
        }
    } else {
        for (int s = 0; s < 2; s++) if (c.w[s]) { shard_writer_abort(c.w[s]); c.w[s] = NULL; }
    }
    progress(&c, 1);
    if (c.failed) { fprintf(stderr, "error: %s\n", c.err); return 1; }
    if (rc != 0) { fprintf(stderr, "error: tokenize stopped; the shards completed so far are kept, the unfinished ones removed\n"); return 1; }
    printf("tokenize: %s\n", tokenizer_describe(c.tok));
    printf("tokenize: train: %llu docs, %llu tokens in %d shard(s); val: %llu docs, %llu tokens in %d shard(s); %d-byte tokens -> %s/%s_{train,val}_*.bin\n",
           (unsigned long long)c.docs[0], (unsigned long long)c.tokens[0], c.nshards[0],
           (unsigned long long)c.docs[1], (unsigned long long)c.tokens[1], c.nshards[1], c.token_bytes, outdir, prefix);
    for (int i = 0; i < c.njobs; i++) { free(c.jobs[i].buf); free(c.jobs[i].doc_off); free(c.jobs[i].ids); free(c.jobs[i].doc_ntok); }
    free(c.jobs); free(th); free(files); free(delim); tokenizer_free(c.tok);
    return 0;
}
