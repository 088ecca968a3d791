// End-to-end tests of build/tokenize (and scripts/fineweb_stream.py --local-jsonl when python3 exists):
// text and JSONL inputs to shards, EOT before each document, train/val split, shard size, bad JSONL lines
// (fatal by default with the line number, skipped with --skip-bad-lines). Uses a byte-only tokenizer.json
// written by the test, so no downloaded data is needed; decoding the shards must give back the documents.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common.h"
#include "dataloader/shard.h"
#include "dataloader/tokenizer.h"
#include "test_util.h"

static char dir[256], tokp[512];

static void write_file(const char *path, const char *s) { FILE *f = fopen(path, "wb"); assert_non_null(f); fputs(s, f); fclose(f); }

// Byte-level vocab (byte b -> id b+1), merge "t h" -> 257, eot "<|endoftext|>" = 0.
static void write_tokenizer(void) {
    FILE *f = fopen(tokp, "w");
    fprintf(f, "{\"model\":{\"type\":\"BPE\",\"vocab\":{");
    int n = 0;
    for (int b = 0; b < 256; b++) {
        int keep = (b >= '!' && b <= '~') || (b >= 0xa1 && b <= 0xac) || (b >= 0xae && b <= 0xff);
        int cp = keep ? b : 256 + n++;
        fprintf(f, "\"\\u%04x\":%d,", cp, b + 1);
    }
    fprintf(f, "\"th\":257},\"merges\":[\"t h\"]},\"added_tokens\":[{\"id\":0,\"content\":\"<|endoftext|>\",\"special\":true}],"
               "\"pre_tokenizer\":{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"use_regex\":true}}");
    fclose(f);
}

static int run(const char *cmd) {
    char full[4096]; snprintf(full, sizeof full, "%s > %s/out.txt 2> %s/err.txt", cmd, dir, dir);
    int rc = system(full);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}
static char *read_txt(const char *name) {
    char p[512]; snprintf(p, sizeof p, "%s/%s", dir, name);
    size_t n; const char *e; char *s = sllm_read_file(p, &n, &e);
    assert_non_null(s);
    return s;
}

// Decodes a shard; returns the bytes (documents each preceded by "<|endoftext|>").
static char *decode_shard(const char *name, const Tokenizer *t, uint64_t *ntok) {
    char p[512], err[512]; snprintf(p, sizeof p, "%s/%s", dir, name);
    Shard s;
    if (shard_open(&s, p, tokenizer_vocab_size(t), err, sizeof err) != 0) fail_msg("%s", err);
    int32_t *ids = malloc(s.num_tokens * 4 + 4);
    shard_read_tokens(&s, 0, s.num_tokens, ids);
    char *out; size_t ol;
    assert_int_equal(tokenizer_decode(t, ids, s.num_tokens, &out, &ol), 0);
    *ntok = s.num_tokens;
    free(ids); shard_close(&s);
    return out;
}

static void test_text_files(void **state) {
    (void)state;
    char a[512], b[512], cmd[2048], err[512];
    snprintf(a, sizeof a, "%s/a.txt", dir); snprintf(b, sizeof b, "%s/b.txt", dir);
    write_file(a, "the first document\nwith two lines\n");
    write_file(b, "doc one||doc two||||doc three");
    Tokenizer *t = tokenizer_load(tokp, err, sizeof err);
    assert_non_null(t);
    // two files, one document each, val every 2nd document
    snprintf(cmd, sizeof cmd, "./build/tokenize -q -t %s -o %s/o1 --prefix x -v 0.5 %s %s", tokp, dir, a, b);
    assert_int_equal(run(cmd), 0);
    uint64_t n1, n2;
    char *tr = decode_shard("o1/x_train_000000.bin", t, &n1), *va = decode_shard("o1/x_val_000000.bin", t, &n2);
    assert_string_equal(tr, "<|endoftext|>the first document\nwith two lines\n");
    assert_string_equal(va, "<|endoftext|>doc one||doc two||||doc three");
    free(tr); free(va);
    // delimiter: 3 documents from b.txt (the empty one skipped), no val, shards of 8 tokens
    snprintf(cmd, sizeof cmd, "./build/tokenize -q -t %s -o %s/o2 --prefix y -v 0 --delimiter '||' --shard-size 8 %s", tokp, dir, b);
    assert_int_equal(run(cmd), 0);
    char *out = read_txt("out.txt");
    assert_non_null(strstr(out, "train: 3 docs"));
    free(out);
    // "<eot>doc one<eot>doc two<eot>doc three" = 1+7 + 1+7 + 1+8 ("th" merges) = 25 tokens -> shards 8, 8, 8, 1
    char all[256] = ""; uint64_t total = 0;
    for (int i = 0; i < 4; i++) {
        char name[64]; snprintf(name, sizeof name, "o2/y_train_%06d.bin", i);
        uint64_t k; char *s = decode_shard(name, t, &k);
        assert_int_equal(k, i < 3 ? 8 : 1);
        strcat(all, s); total += k; free(s);
    }
    assert_int_equal(total, 25);
    assert_string_equal(all, "<|endoftext|>doc one<|endoftext|>doc two<|endoftext|>doc three");
    char p5[512]; snprintf(p5, sizeof p5, "%s/o2/y_train_000004.bin", dir);
    assert_int_equal(access(p5, F_OK), -1);
    tokenizer_free(t);
    assert_int_equal(run("./build/tokenize -h"), 0);
    out = read_txt("out.txt");
    const char *flags[] = {"--tokenizer", "--out", "--prefix", "--format", "--field", "--delimiter", "--shard-size", "--val-frac",
                           "--skip-bad-lines", "--sep-token", "--allow-special", "--threads", "--max-tokens", "--total-bytes", "--quiet"};
    for (size_t i = 0; i < sizeof flags / sizeof *flags; i++) assert_non_null(strstr(out, flags[i]));
    free(out);
}

static void test_jsonl_and_bad_lines(void **state) {
    (void)state;
    char j[512], cmd[2048], err[512];
    snprintf(j, sizeof j, "%s/in.jsonl", dir);
    write_file(j, "{\"text\": \"alpha \\u00e9\\ud83d\\ude00\"}\n{\"text\": \"beta\"}\n\n{\"text\": 5}\n{\"text\": \"gamma\", \"id\": 1}\n{broken\n{\"text\": \"delta\"}\n");
    Tokenizer *t = tokenizer_load(tokp, err, sizeof err);
    // default: the first bad line is fatal, named by its line number
    snprintf(cmd, sizeof cmd, "./build/tokenize -q -t %s -o %s/o3 --prefix z -v 0 %s", tokp, dir, j);
    assert_int_not_equal(run(cmd), 0);
    char *e = read_txt("err.txt");
    assert_non_null(strstr(e, "in.jsonl:4: bad JSONL line (field is not a string"));
    free(e);
    // --skip-bad-lines: lines 4 and 6 reported and skipped, from stdin
    snprintf(cmd, sizeof cmd, "./build/tokenize -q -t %s -o %s/o4 --prefix z -v 0 -f jsonl --skip-bad-lines - < %s", tokp, dir, j);
    assert_int_equal(run(cmd), 0);
    e = read_txt("err.txt");
    assert_non_null(strstr(e, "stdin:4:")); assert_non_null(strstr(e, "stdin:6: bad JSONL line (not valid JSON"));
    free(e);
    uint64_t n; char *s = decode_shard("o4/z_train_000000.bin", t, &n);
    assert_string_equal(s, "<|endoftext|>alpha \xc3\xa9\xf0\x9f\x98\x80<|endoftext|>beta<|endoftext|>gamma<|endoftext|>delta");
    free(s);
    // the fineweb helper's local mode feeds the same pipeline (python3 standard library only)
    if (system("python3 -c 'import json' >/dev/null 2>&1") == 0) {
        snprintf(cmd, sizeof cmd, "python3 scripts/fineweb_stream.py --local-jsonl %s --max-docs 3 | ./build/tokenize -q -t %s -o %s/o5 --prefix fw -v 0 -f jsonl --skip-bad-lines -", j, tokp, dir);
        assert_int_equal(run(cmd), 0);
        s = decode_shard("o5/fw_train_000000.bin", t, &n);
        assert_string_equal(s, "<|endoftext|>alpha \xc3\xa9\xf0\x9f\x98\x80<|endoftext|>beta");  // doc 3 = bad line 4, skipped
        free(s);
    } else {
        print_message("python3 missing: fineweb_stream.py --local-jsonl part not run\n");
    }
    tokenizer_free(t);
}

// Strict numbers and inputs: each bad value is an error (non-zero exit, a message naming the option), and
// nothing is written; a missing input file is found before the first shard.
static void test_strict_args(void **state) {
    (void)state;
    char a[512], cmd[2048];
    snprintf(a, sizeof a, "%s/s.txt", dir);
    write_file(a, "some text");
    const char *bad[][2] = {
        {"--max-tokens 1e6", "max-tokens"}, {"--shard-size 1e8", "shard-size"}, {"--val-frac 0.5x", "val-frac"},
        {"--val-frac nan", "val-frac"},     {"--val-frac inf", "val-frac"},     {"--shard-size 0", "shard-size"},
        {"--shard-size 2147483648", "shard-size"}, {"--threads 2.5", "threads"}, {"--max-tokens -1", "max-tokens"},
        {"--max-tokens ''", "max-tokens"},  {"--threads 99999999999", "threads"}, {"-s 8", "-s"}, {"-p x", "-p"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, "./build/tokenize -q -t %s -o %s/bad%zu %s %s", tokp, dir, i, bad[i][0], a);
        int rc = run(cmd);
        char *e = read_txt("err.txt");
        if (rc == 0 || !strstr(e, bad[i][1])) fail_msg("%s: exit %d, stderr: %s", bad[i][0], rc, e);
        free(e);
        char p[600]; snprintf(p, sizeof p, "%s/bad%zu", dir, i);
        assert_int_equal(access(p, F_OK), -1);  // stopped before creating the output
    }
    // a missing second input: an error before anything is written
    snprintf(cmd, sizeof cmd, "./build/tokenize -q -t %s -o %s/miss %s %s/nonexistent.txt", tokp, dir, a, dir);
    assert_int_not_equal(run(cmd), 0);
    char *e = read_txt("err.txt");
    assert_non_null(strstr(e, "nonexistent.txt"));
    free(e);
    char p[600]; snprintf(p, sizeof p, "%s/miss", dir);
    assert_int_equal(access(p, F_OK), -1);
    // --max-tokens 6 with whole documents: stops after the first document that reaches 6 tokens
    snprintf(cmd, sizeof cmd, "./build/tokenize -q -t %s -o %s/mt --prefix m -v 0 --max-tokens 6 %s %s", tokp, dir, a, a);
    assert_int_equal(run(cmd), 0);
    char *out = read_txt("out.txt");
    assert_non_null(strstr(out, "train: 1 docs"));
    free(out);
}

// build/encode: ids separated by commas or spaces all decode; several files all encode, in order.
static void test_encode_tool(void **state) {
    (void)state;
    char a[512], b[512], cmd[2048];
    snprintf(a, sizeof a, "%s/ea.txt", dir); snprintf(b, sizeof b, "%s/eb.txt", dir);
    write_file(a, "ab"); write_file(b, "the");
    snprintf(cmd, sizeof cmd, "./build/encode -t %s %s %s", tokp, a, b);
    assert_int_equal(run(cmd), 0);
    char *out = read_txt("out.txt");
    assert_string_equal(out, "98 99\n257 102\n");   // byte b -> b+1; "th" -> 257
    free(out);
    snprintf(cmd, sizeof cmd, "printf '98,99, 257 102\\n' | ./build/encode -t %s -d", tokp);
    assert_int_equal(run(cmd), 0);
    out = read_txt("out.txt");
    assert_string_equal(out, "abthe");
    free(out);
    const char *bad[] = {"printf '98;99' | ./build/encode -t %s -d", "printf '98 258' | ./build/encode -t %s -d",
                         "printf '98 -1' | ./build/encode -t %s -d", "./build/encode -t %s /nonexistent/x.txt",
                         "./build/encode -t %s --bench 1e3 /dev/null", "./build/encode -t %s -b 3 /dev/null"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        snprintf(cmd, sizeof cmd, bad[i], tokp);
        if (run(cmd) == 0) fail_msg("accepted: %s", cmd);
    }
}

static int setup(void **state) {
    (void)state;
    if (test_tmpdir_make(dir, sizeof dir, "sllm_test_tool_") != 0) return -1;
    snprintf(tokp, sizeof tokp, "%s/tokenizer.json", dir);
    write_tokenizer();
    if (access("build/tokenize", X_OK) != 0 || access("build/encode", X_OK) != 0) { fprintf(stderr, "build/tokenize or build/encode missing (run make)\n"); return -1; }
    return 0;
}
static int teardown(void **state) {
    (void)state;
    return test_tmpdir_remove(dir);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_files),
        cmocka_unit_test(test_jsonl_and_bad_lines),
        cmocka_unit_test(test_strict_args),
        cmocka_unit_test(test_encode_tool),
    };
    return cmocka_run_group_tests_name("tokenizer_tool", tests, setup, teardown);
}
