// model/mc_eval.c: multiple-choice evaluation; see mc_eval.h for the format and the scoring rules.
#include "model/mc_eval.h"

#include <math.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "common.h"

// ---- parsing -------------------------------------------------------------------------------------------

int mc_utf8_chars(const char *s, size_t len) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    long long n = 0;
    while (i < len) {
        const unsigned c = p[i];
        int k;
        unsigned cp;
        if (c < 0x80) { i++; n++; continue; }
        if (c >= 0xc2 && c <= 0xdf) { k = 1; cp = c & 0x1f; }
        else if (c >= 0xe0 && c <= 0xef) { k = 2; cp = c & 0x0f; }
        else if (c >= 0xf0 && c <= 0xf4) { k = 3; cp = c & 0x07; }
        else return -1;
        for (int j = 1; j <= k; j++) {
            if (i + j >= len || (p[i + j] & 0xc0) != 0x80) return -1;
            cp = (cp << 6) | (p[i + j] & 0x3f);
        }
        if ((k == 2 && cp < 0x800) || (k == 3 && cp < 0x10000) || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
            return -1;
        i += k + 1;
        n++;
    }
    return n > 0x7fffffff ? -1 : (int)n;
}

static char *dup_str(const char *s) {
    size_t n = strlen(s);
    char *d = sllm_malloc(n + 1);
    memcpy(d, s, n + 1);
    return d;
}

// The one child of o named by any of names[0..n), NULL if none; -1 (with err) if two of them are present.
static int find_one(const cJSON *o, const char *const *names, int n, const char *what, const cJSON **out, char *err,
                    size_t errn) {
    *out = NULL;
    const char *found = NULL;
    for (const cJSON *c = o->child; c; c = c->next)
        for (int i = 0; i < n; i++)
            if (c->string && !strcmp(c->string, names[i])) {
                if (found) {
                    snprintf(err, errn, "both \"%s\" and \"%s\" given for the %s", found, c->string, what);
                    return -1;
                }
                found = c->string;
                *out = c;
            }
    return 0;
}

static void names_list(char *buf, size_t n, const char *const *names, int k) {
    size_t off = 0;
    buf[0] = 0;
    for (int i = 0; i < k && off < n; i++)
        off += (size_t)snprintf(buf + off, n - off, "%s\"%s\"", i ? (i + 1 == k ? " or " : ", ") : "", names[i]);
}

// A JSON string value as a checked UTF-8 string; what names it in messages.
static int get_text(const cJSON *v, const char *what, int allow_empty, char **out, int *n_chars, char *err, size_t errn) {
    if (!cJSON_IsString(v) || !v->valuestring) {
        snprintf(err, errn, "%s is not a string", what);
        return -1;
    }
    const size_t len = strlen(v->valuestring);
    const int nc = mc_utf8_chars(v->valuestring, len);
    if (nc < 0) {
        snprintf(err, errn, "%s is not valid UTF-8", what);
        return -1;
    }
    if (!allow_empty && nc == 0) {
        snprintf(err, errn, "%s is an empty string", what);
        return -1;
    }
    *out = dup_str(v->valuestring);
    if (n_chars) *n_chars = nc;
    return 0;
}

static const char *const CTX_NAMES[] = {"context", "ctx", "query", "question", "goal"};
static const char *const CHOICE_NAMES[] = {"choices", "endings"};
static const char *const LABEL_NAMES[] = {"label", "gold", "answer", "answerKey"};
#define NAMES_N(a) ((int)(sizeof(a) / sizeof((a)[0])))

void mc_item_free(McItem *it) {
    free(it->context);
    for (int k = 0; k < it->n_choices && it->choices; k++) {
        free(it->choices[k].text);
        free(it->choices[k].tokens);
    }
    free(it->choices);
    memset(it, 0, sizeof *it);
}

// Fills it->choices from an array of strings; labels (ARC) get the label strings when non-NULL.
static int take_choices(McItem *it, const cJSON *arr, const char *what, char err[], size_t errn) {
    const int n = cJSON_GetArraySize(arr);
    if (n < 2) {
        snprintf(err, errn, "\"%s\" has %d choice%s; a multiple-choice item needs at least 2", what, n, n == 1 ? "" : "s");
        return -1;
    }
    it->choices = sllm_calloc((size_t)n, sizeof(McChoice));
    it->n_choices = n;
    int k = 0;
    for (const cJSON *c = arr->child; c; c = c->next, k++) {
        char w[96];
        snprintf(w, sizeof w, "choice %d", k);
        if (get_text(c, w, 0, &it->choices[k].text, &it->choices[k].n_chars, err, errn) != 0) return -1;
    }
    return 0;
}

int mc_parse_item(const char *json, size_t len, McItem *it, char *err, size_t errn) {
    memset(it, 0, sizeof *it);
    it->pred = it->pred_norm = -1;
    const char *end = NULL;
    cJSON *o = cJSON_ParseWithLengthOpts(json, len, &end, 0);
    if (!o) {
        const char *at = cJSON_GetErrorPtr();
        long col = at && at >= json && at <= json + len ? (long)(at - json) + 1 : 0;
        if (col > 0) snprintf(err, errn, "not valid JSON (at column %ld)", col);
        else snprintf(err, errn, "not valid JSON");
        return -1;
    }
    int rc = -1;
    const cJSON *ctx, *ch, *lab;
    const cJSON *arc_labels = NULL;
    char names[160];
    if (end) {  // only whitespace may follow the object
        while (end < json + len && (*end == ' ' || *end == '\t' || *end == '\r')) end++;
        if (end < json + len) {
            snprintf(err, errn, "text after the JSON value (at column %ld)", (long)(end - json) + 1);
            goto done;
        }
    }
    if (!cJSON_IsObject(o)) { snprintf(err, errn, "not a JSON object"); goto done; }
    for (const cJSON *a = o->child; a; a = a->next)
        for (const cJSON *b = a->next; b; b = b->next)
            if (a->string && b->string && !strcmp(a->string, b->string)) {
                snprintf(err, errn, "key \"%s\" appears twice", a->string);
                goto done;
            }
    // context
    if (find_one(o, CTX_NAMES, NAMES_N(CTX_NAMES), "context", &ctx, err, errn) != 0) goto done;
    if (!ctx) {
        names_list(names, sizeof names, CTX_NAMES, NAMES_N(CTX_NAMES));
        snprintf(err, errn, "no context (a string under %s)", names);
        goto done;
    }
    if (get_text(ctx, "the context", 1, &it->context, NULL, err, errn) != 0) goto done;
    // choices
    if (find_one(o, CHOICE_NAMES, NAMES_N(CHOICE_NAMES), "choices", &ch, err, errn) != 0) goto done;
    if (ch && cJSON_GetObjectItemCaseSensitive(o, "sol1")) {
        snprintf(err, errn, "both \"%s\" and \"sol1\" given for the choices", ch->string);
        goto done;
    }
    if (ch && cJSON_IsArray(ch)) {
        if (take_choices(it, ch, ch->string, err, errn) != 0) goto done;
    } else if (ch && cJSON_IsObject(ch)) {  // ARC: {"text": [...], "label": [...]}
        const cJSON *tx = cJSON_GetObjectItemCaseSensitive(ch, "text");
        arc_labels = cJSON_GetObjectItemCaseSensitive(ch, "label");
        if (!cJSON_IsArray(tx) || !cJSON_IsArray(arc_labels)) {
            snprintf(err, errn, "\"%s\" is an object but not {\"text\": [...], \"label\": [...]}", ch->string);
            goto done;
        }
        if (take_choices(it, tx, "text", err, errn) != 0) goto done;
        if (cJSON_GetArraySize(arc_labels) != it->n_choices) {
            snprintf(err, errn, "%d choice labels for %d choice texts", cJSON_GetArraySize(arc_labels), it->n_choices);
            goto done;
        }
        for (const cJSON *l = arc_labels->child; l; l = l->next)
            if (!cJSON_IsString(l)) { snprintf(err, errn, "a choice label is not a string"); goto done; }
    } else if (ch) {
        snprintf(err, errn, "\"%s\" is not an array of strings", ch->string);
        goto done;
    } else if (cJSON_GetObjectItemCaseSensitive(o, "sol1")) {  // PIQA: sol1, sol2, ...
        int n = 0;
        char key[32];
        for (;; n++) {
            snprintf(key, sizeof key, "sol%d", n + 1);
            if (!cJSON_GetObjectItemCaseSensitive(o, key)) break;
        }
        if (n < 2) { snprintf(err, errn, "\"sol1\" without \"sol2\": a multiple-choice item needs at least 2 choices"); goto done; }
        it->choices = sllm_calloc((size_t)n, sizeof(McChoice));
        it->n_choices = n;
        for (int k = 0; k < n; k++) {
            snprintf(key, sizeof key, "sol%d", k + 1);
            char w[40];
            snprintf(w, sizeof w, "\"%s\"", key);
            if (get_text(cJSON_GetObjectItemCaseSensitive(o, key), w, 0, &it->choices[k].text, &it->choices[k].n_chars,
                         err, errn) != 0)
                goto done;
        }
    } else {
        names_list(names, sizeof names, CHOICE_NAMES, NAMES_N(CHOICE_NAMES));
        snprintf(err, errn, "no choices (an array of strings under %s, or \"sol1\", \"sol2\", ...)", names);
        goto done;
    }
    // label
    if (find_one(o, LABEL_NAMES, NAMES_N(LABEL_NAMES), "label", &lab, err, errn) != 0) goto done;
    if (!lab) {
        names_list(names, sizeof names, LABEL_NAMES, NAMES_N(LABEL_NAMES));
        snprintf(err, errn, "no label (the index of the right choice under %s)", names);
        goto done;
    }
    long long y = -1;
    if (cJSON_IsNumber(lab)) {
        const double v = lab->valuedouble;
        if (!(v == floor(v)) || fabs(v) > 2e9) {
            snprintf(err, errn, "label %.17g is not an integer", v);
            goto done;
        }
        y = (long long)v;
    } else if (cJSON_IsString(lab)) {
        const char *s = lab->valuestring;
        int digits = *s != 0 && strlen(s) <= 9;
        for (const char *p = s; *p && digits; p++) digits = *p >= '0' && *p <= '9';
        int found = -1, k = 0;
        if (arc_labels)
            for (const cJSON *l = arc_labels->child; l; l = l->next, k++)
                if (!strcmp(l->valuestring, s)) { found = k; break; }
        if (found >= 0) y = found;  // an ARC label ("A", or "1" when the labels are digits)
        else if (digits) y = atoll(s);
        else {
            snprintf(err, errn, "label \"%.40s\" is neither an index nor one of the choice labels", s);
            goto done;
        }
    } else {
        snprintf(err, errn, "label is neither an integer nor a string");
        goto done;
    }
    if (y < 0 || y >= it->n_choices) {
        snprintf(err, errn, "label %lld out of range for %d choices (0 .. %d)", y, it->n_choices, it->n_choices - 1);
        goto done;
    }
    it->label = (int)y;
    rc = 0;
done:
    cJSON_Delete(o);
    if (rc != 0) mc_item_free(it);
    return rc;
}

int mc_parse_text(const char *text, size_t len, const char *name, McSet *s, char *err, size_t errn) {
    memset(s, 0, sizeof *s);
    s->name = dup_str(name);
    int cap = 0, line = 0;
    size_t i = 0;
    while (i < len) {
        size_t j = i;
        while (j < len && text[j] != '\n') j++;
        line++;
        size_t e = j;
        if (e > i && text[e - 1] == '\r') e--;
        int blank = 1;
        for (size_t k = i; k < e && blank; k++) blank = text[k] == ' ' || text[k] == '\t';
        if (!blank) {
            if (s->n_items == cap) {
                cap = cap ? 2 * cap : 64;
                McItem *ni = realloc(s->items, (size_t)cap * sizeof(McItem));
                if (!ni) SLLM_FATAL("out of memory reading %s", name);
                s->items = ni;
            }
            char why[512];
            McItem *it = &s->items[s->n_items];
            if (memchr(text + i, 0, e - i)) {
                snprintf(err, errn, "%s:%d: a NUL byte in the line", name, line);
                mc_free(s);
                return -1;
            }
            if (mc_parse_item(text + i, e - i, it, why, sizeof why) != 0) {
                snprintf(err, errn, "%s:%d: %s", name, line, why);
                mc_free(s);
                return -1;
            }
            it->line = line;
            s->n_items++;
            s->n_choices += it->n_choices;
        }
        i = j + 1;
    }
    if (s->n_items == 0) {
        snprintf(err, errn, "%s: no items (expected one JSON object per line)", name);
        mc_free(s);
        return -1;
    }
    return 0;
}

int mc_load(const char *path, McSet *s, char *err, size_t errn) {
    size_t n = 0;
    const char *why = NULL;
    char *text = sllm_read_file(path, &n, &why);
    if (!text) {
        memset(s, 0, sizeof *s);
        snprintf(err, errn, "%s: cannot read: %s", path, why ? why : "?");
        return -1;
    }
    const int rc = mc_parse_text(text, n, path, s, err, errn);
    free(text);
    return rc;
}

void mc_free(McSet *s) {
    for (int i = 0; i < s->n_items; i++) mc_item_free(&s->items[i]);
    free(s->items);
    free(s->name);
    memset(s, 0, sizeof *s);
}

// ---- tokenization ----------------------------------------------------------------------------------------

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' || c == '\f'; }

int mc_tokenize(McSet *s, const Tokenizer *tok, int bos, int max_len, char *err, size_t errn) {
    for (int i = 0; i < s->n_items; i++) {
        McItem *it = &s->items[i];
        const char *ctx = it->context;
        size_t cl = strlen(ctx);
        size_t ws = 0;  // trailing whitespace of the context: moves to the continuation
        while (ws < cl && is_ws(ctx[cl - 1 - ws])) ws++;
        const size_t cl_kept = cl - ws;
        int32_t *cids = NULL;
        size_t nc = 0;
        if (tokenizer_encode(tok, ctx, cl_kept, &cids, &nc) != 0) {
            snprintf(err, errn, "%s:%d: the tokenizer failed on the context", s->name, it->line);
            return -1;
        }
        const size_t pre = (bos >= 0 ? 1 : 0) + nc;  // tokens before the continuation
        if (pre == 0) {
            snprintf(err, errn, "%s:%d: empty context and no beginning token: the first choice token has nothing to "
                     "follow (keep the end-of-text token)", s->name, it->line);
            free(cids);
            return -1;
        }
        for (int k = 0; k < it->n_choices; k++) {
            McChoice *c = &it->choices[k];
            const int delim = cl > 0 && ws == 0 && !is_ws(c->text[0]);
            const size_t tl = strlen(c->text);
            char *whole_text = sllm_malloc(cl + delim + tl + 1);
            memcpy(whole_text, ctx, cl);  // the context with its trailing whitespace, then the choice
            if (delim) whole_text[cl] = ' ';
            memcpy(whole_text + cl + delim, c->text, tl);
            int32_t *wids = NULL;
            size_t nw = 0;
            const int e = tokenizer_encode(tok, whole_text, cl + delim + tl, &wids, &nw);
            free(whole_text);
            if (e != 0) {
                snprintf(err, errn, "%s:%d: choice %d: the tokenizer failed", s->name, it->line, k);
                free(cids);
                return -1;
            }
            if (nw <= nc) {
                snprintf(err, errn, "%s:%d: choice %d: no continuation tokens (the context's %zu tokens cover the "
                         "whole text)", s->name, it->line, k, nc);
                free(wids);
                free(cids);
                return -1;
            }
            const size_t ncont = nw - nc;
            size_t n = pre + ncont, drop = 0;
            if (max_len > 0 && n - 1 > (size_t)max_len) {
                drop = n - 1 - (size_t)max_len;
                if (drop >= pre) {
                    snprintf(err, errn, "%s:%d: choice %d: its %zu tokens do not fit the model's context of %d "
                             "(at least one token must come before them)", s->name, it->line, k, ncont, max_len);
                    free(wids);
                    free(cids);
                    return -1;
                }
            }
            free(c->tokens);
            c->tokens = sllm_malloc((n - drop) * sizeof(int32_t));
            size_t o = 0;
            for (size_t t = drop; t < n; t++) {
                int32_t id;
                if (t < pre) id = bos >= 0 ? (t == 0 ? bos : cids[t - 1]) : cids[t];
                else id = wids[nc + (t - pre)];
                c->tokens[o++] = id;
            }
            c->n_tokens = (int)(n - drop);
            c->start = (int)(pre - drop);
            c->n_dropped = (int)drop;
            free(wids);
        }
        free(cids);
    }
    s->tokenized = 1;
    return 0;
}

// ---- scoring -----------------------------------------------------------------------------------------

typedef struct {
    McSet *s;
    McLoglikFn fn;
    void *ctx;
    const McScoreOpts *o;
    long long (*ref)[2];      // [n_requests] (item, choice)
    long long n_req, next, done;
    long long bad;            // first request with a non-finite result, -1 if none
    pthread_mutex_t mu;
    double t0;
} ScoreJob;

static void *score_worker(void *arg) {
    ScoreJob *j = arg;
    for (;;) {
        pthread_mutex_lock(&j->mu);
        const long long r = j->bad >= 0 ? j->n_req : j->next++;
        pthread_mutex_unlock(&j->mu);
        if (r >= j->n_req) return NULL;
        McItem *it = &j->s->items[j->ref[r][0]];
        McChoice *c = &it->choices[j->ref[r][1]];
        const double ll = j->fn(j->ctx, c->tokens, c->n_tokens, c->start);
        c->ll = ll;
        c->ll_norm = ll / c->n_chars;
        pthread_mutex_lock(&j->mu);
        if (!isfinite(ll) && (j->bad < 0 || r < j->bad)) j->bad = r;
        const long long d = ++j->done;
        if (j->o->progress && j->n_req >= 20 && d % ((j->n_req + 9) / 10) == 0)
            fprintf(j->o->progress, "mc-eval: %lld/%lld choices scored (%.0f%%), %.1f s\n", d, j->n_req,
                    100.0 * d / j->n_req, sllm_time_s() - j->t0);
        pthread_mutex_unlock(&j->mu);
    }
}

int mc_score(McSet *s, McLoglikFn fn, void *ctx, const McScoreOpts *opts, McResult *r, char *err, size_t errn) {
    McScoreOpts o = {1, 0, 1, NULL};
    if (opts) o = *opts;
    if (o.threads < 1) o.threads = 1;
    if (o.n_shards < 1) o.n_shards = 1, o.shard = 0;
    memset(r, 0, sizeof *r);
    if (!s->tokenized) {
        snprintf(err, errn, "%s: mc_score before mc_tokenize", s->name);
        return -1;
    }
    if (o.shard < 0 || o.shard >= o.n_shards) {
        snprintf(err, errn, "mc_score: shard %d of %d", o.shard, o.n_shards);
        return -1;
    }
    ScoreJob j;
    memset(&j, 0, sizeof j);
    j.s = s; j.fn = fn; j.ctx = ctx; j.o = &o; j.bad = -1; j.t0 = sllm_time_s();
    j.ref = sllm_malloc((size_t)(s->n_choices > 0 ? s->n_choices : 1) * sizeof *j.ref);
    for (int i = 0; i < s->n_items; i++) {
        s->items[i].pred = s->items[i].pred_norm = -1;
        if (i % o.n_shards != o.shard) continue;
        for (int k = 0; k < s->items[i].n_choices; k++) {
            j.ref[j.n_req][0] = i;
            j.ref[j.n_req][1] = k;
            j.n_req++;
        }
    }
    pthread_mutex_init(&j.mu, NULL);
    int nt = o.threads < j.n_req ? o.threads : (int)(j.n_req > 0 ? j.n_req : 1);
    if (nt <= 1) score_worker(&j);
    else {
        pthread_t *th = sllm_malloc((size_t)nt * sizeof(pthread_t));
        for (int t = 0; t < nt; t++)
            if (pthread_create(&th[t], NULL, score_worker, &j) != 0) SLLM_FATAL("mc_score: cannot start thread %d", t);
        for (int t = 0; t < nt; t++) pthread_join(th[t], NULL);
        free(th);
    }
    pthread_mutex_destroy(&j.mu);
    if (j.bad >= 0) {
        const McItem *it = &s->items[j.ref[j.bad][0]];
        const int k = (int)j.ref[j.bad][1];
        snprintf(err, errn, "%s:%d: choice %d: the log-likelihood is %g (the model's scoring failed)", s->name, it->line,
                 k, it->choices[k].ll);
        free(j.ref);
        return -1;
    }
    free(j.ref);
    for (int i = 0; i < s->n_items; i++) {
        if (i % o.n_shards != o.shard) continue;
        McItem *it = &s->items[i];
        int p = 0, q = 0;
        for (int k = 0; k < it->n_choices; k++) {
            const McChoice *c = &it->choices[k];
            if (c->ll > it->choices[p].ll) p = k;
            if (c->ll_norm > it->choices[q].ll_norm) q = k;
            r->n_tokens += c->n_tokens - c->start;
            r->n_truncated += c->n_dropped > 0;
            r->n_choices++;
        }
        it->pred = p;
        it->pred_norm = q;
        r->n_items++;
        r->correct += p == it->label;
        r->correct_norm += q == it->label;
    }
    r->acc = r->n_items ? (double)r->correct / r->n_items : 0;
    r->acc_norm = r->n_items ? (double)r->correct_norm / r->n_items : 0;
    r->seconds = sllm_time_s() - j.t0;
    return 0;
}

// ---- output -------------------------------------------------------------------------------------------

static int ends_with(const char *s, const char *suf) {
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

int mc_write_results(const McSet *s, const char *path, char *err, size_t errn) {
    FILE *f = fopen(path, "wb");
    if (!f) {
        snprintf(err, errn, "%s: cannot create the file", path);
        return -1;
    }
    const int csv = ends_with(path, ".csv");
    if (csv) fprintf(f, "item,line,choice,label,pred,pred_norm,n_tokens,start,n_chars,ll,ll_norm\n");
    for (int i = 0; i < s->n_items; i++) {
        const McItem *it = &s->items[i];
        if (it->pred < 0) continue;
        if (csv) {
            for (int k = 0; k < it->n_choices; k++) {
                const McChoice *c = &it->choices[k];
                fprintf(f, "%d,%d,%d,%d,%d,%d,%d,%d,%d,%.17g,%.17g\n", i, it->line, k, it->label, it->pred,
                        it->pred_norm, c->n_tokens, c->start, c->n_chars, c->ll, c->ll_norm);
            }
            continue;
        }
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "item", i);
        cJSON_AddNumberToObject(o, "line", it->line);
        cJSON_AddNumberToObject(o, "label", it->label);
        cJSON_AddNumberToObject(o, "pred", it->pred);
        cJSON_AddNumberToObject(o, "pred_norm", it->pred_norm);
        cJSON *arr = cJSON_AddArrayToObject(o, "choices");
        for (int k = 0; k < it->n_choices; k++) {
            const McChoice *c = &it->choices[k];
            cJSON *co = cJSON_CreateObject();
            cJSON_AddStringToObject(co, "text", c->text);
            cJSON_AddNumberToObject(co, "n_chars", c->n_chars);
            cJSON *tk = cJSON_AddArrayToObject(co, "tokens");
            for (int t = 0; t < c->n_tokens; t++) cJSON_AddItemToArray(tk, cJSON_CreateNumber(c->tokens[t]));
            cJSON_AddNumberToObject(co, "start", c->start);
            char num[40];  // 17 significant digits: the double back bit for bit (cJSON's own printing may use 15)
            snprintf(num, sizeof num, "%.17g", c->ll);
            cJSON_AddRawToObject(co, "ll", num);
            snprintf(num, sizeof num, "%.17g", c->ll_norm);
            cJSON_AddRawToObject(co, "ll_norm", num);
            cJSON_AddItemToArray(arr, co);
        }
        char *txt = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
        if (!txt) {
            fclose(f);
            snprintf(err, errn, "%s: out of memory printing item %d", path, i);
            return -1;
        }
        fprintf(f, "%s\n", txt);
        free(txt);
    }
    if (ferror(f) | (fclose(f) != 0)) {
        snprintf(err, errn, "%s: write failed (disk full?)", path);
        return -1;
    }
    return 0;
}

// ---- log-likelihood helpers ----------------------------------------------------------------------------

#define LOGPROB_ROWS(T)                                                                                   \
    double sum = 0;                                                                                       \
    for (int r = 0; r < rows; r++) {                                                                      \
        const T *x = logits + (size_t)r * V;                                                              \
        if (targets[r] < 0 || targets[r] >= V) return NAN;                                                \
        double mx = -INFINITY;                                                                            \
        for (int v = 0; v < V; v++) {                                                                     \
            if (!isfinite((double)x[v])) return NAN;                                                      \
            if (x[v] > mx) mx = x[v];                                                                     \
        }                                                                                                 \
        double se = 0;                                                                                    \
        for (int v = 0; v < V; v++) se += exp((double)x[v] - mx);                                         \
        sum += (double)x[targets[r]] - mx - log(se);                                                      \
    }                                                                                                     \
    return sum;

double mc_logprob_rows_f32(const float *logits, int V, const int32_t *targets, int rows) { LOGPROB_ROWS(float) }
double mc_logprob_rows_f64(const double *logits, int V, const int32_t *targets, int rows) { LOGPROB_ROWS(double) }

double mc_loglik_ref(void *ctx, const int32_t *tokens, int n, int start) {
    const RefModel *m = ctx;
    const int V = m->cfg.vocab_size, T = n - 1;
    if (n < 2 || start < 1 || start >= n || T > m->cfg.max_seq) return NAN;
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= V) return NAN;
    int *in = sllm_malloc((size_t)T * sizeof(int)), *tg = sllm_malloc((size_t)T * sizeof(int));
    for (int t = 0; t < T; t++) {
        in[t] = tokens[t];
        tg[t] = tokens[t + 1];
    }
    double *logits = sllm_malloc((size_t)T * V * sizeof(double));
    ref_forward_backward(m, in, tg, 1, T, logits, NULL, NULL);
    // row t predicts tokens[t + 1]: the continuation tokens[start ..] are predicted by rows start-1 .. T-1
    const double ll = mc_logprob_rows_f64(logits + (size_t)(start - 1) * V, V, tokens + start, n - start);
    free(in);
    free(tg);
    free(logits);
    return ll;
}
