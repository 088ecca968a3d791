// End-to-end tests of build/train_cpu's run management (the same core/ code the GPU trainer uses):
//   - resume is exact: 8 steps straight == 5 steps (--stop-at) + --resume, metrics.log identical byte for byte,
//     also after a "crash" that lost the newest checkpoint (metrics.log is cut back to the resumed step);
//   - --keep-last N deletes the older checkpoints; a re-run into an --out with checkpoints needs --resume;
//   - a changed training configuration is refused on resume (the error names the key and the flag), and accepted
//     with --allow-config-change; an --out locked by another run is refused;
//   - a bad --val or --tokenizer fails before the first step (nothing trained, nothing lost).
// Shards of random tokens are written by the test (seed printed; SLLM_TEST_SEED repeats it).
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "checkpoint.h"
#include "common.h"
#include "dataloader/shard.h"
#include "rng.h"
#include "test_util.h"

static char dir[256];
static uint64_t g_seed;

static int run(const char *args, const char *log) {
    char cmd[4096];
    snprintf(cmd, sizeof cmd,
             "./build/train_cpu --train '%s/t_train_*.bin' --vocab 64 --d-model 16 --layers 1 --heads 2 --d-ff 32 "
             "--seq 16 --batch 2 --steps 8 --warmup 2 --sample-tokens 0 %s > %s/%s 2>&1", dir, args, dir, log);
    int rc = system(cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}
static char *slurp(const char *name) {
    char p[512]; snprintf(p, sizeof p, "%s/%s", dir, name);
    char *s = sllm_read_file(p, NULL, NULL);
    if (!s) fail_msg("cannot read %s", p);
    return s;
}
static int exists(const char *name) { char p[512]; snprintf(p, sizeof p, "%s/%s", dir, name); struct stat st; return stat(p, &st) == 0; }
#define RUN_OK(args, log) do { if (run(args, log) != 0) { char *o_ = slurp(log); fail_msg("train_cpu %s failed:\n%s", args, o_); } } while (0)
#define RUN_FAILS(args, log, needle) do { if (run(args, log) == 0) fail_msg("train_cpu %s succeeded", args); \
        char *o_ = slurp(log); if (!strstr(o_, needle)) fail_msg("train_cpu %s: error lacks \"%s\":\n%s", args, needle, o_); free(o_); } while (0)

static void test_resume_exact(void **state) {
    (void)state;
    char a[600];
    snprintf(a, sizeof a, "--out %s/a", dir);
    RUN_OK(a, "a.txt");
    snprintf(a, sizeof a, "--out %s/b --stop-at 5 --ckpt-every 2", dir);
    RUN_OK(a, "b1.txt");
    assert_true(exists("b/ckpt_00000004") && exists("b/ckpt_00000005"));
    snprintf(a, sizeof a, "--out %s/b --resume --ckpt-every 2", dir);
    RUN_OK(a, "b2.txt");
    char *ma = slurp("a/metrics.log"), *mb = slurp("b/metrics.log");
    assert_string_equal(ma, mb);
    free(mb);
    // a crash after step 5 that lost ckpt 5 (written last): resume from 4, metrics.log cut back to step 4
    snprintf(a, sizeof a, "--out %s/c --stop-at 5 --ckpt-every 2", dir);
    RUN_OK(a, "c1.txt");
    char rm[600]; snprintf(rm, sizeof rm, "rm -rf %s/c/ckpt_00000005", dir);
    assert_int_equal(system(rm), 0);
    snprintf(a, sizeof a, "--out %s/c --resume --ckpt-every 2", dir);
    RUN_OK(a, "c2.txt");
    char *mc = slurp("c/metrics.log");
    assert_string_equal(ma, mc);
    free(ma); free(mc);
    // a re-run into an --out that holds checkpoints needs --resume
    snprintf(a, sizeof a, "--out %s/a", dir);
    RUN_FAILS(a, "a2.txt", "already holds checkpoints");
}

static void test_keep_last(void **state) {
    (void)state;
    char a[600];
    snprintf(a, sizeof a, "--out %s/k --ckpt-every 2 --keep-last 2", dir);
    RUN_OK(a, "k.txt");
    assert_false(exists("k/ckpt_00000002"));
    assert_false(exists("k/ckpt_00000004"));
    assert_true(exists("k/ckpt_00000006"));
    assert_true(exists("k/ckpt_00000008"));
    snprintf(a, sizeof a, "--out %s/k1 --ckpt-every 3 --keep-last 1", dir);
    RUN_OK(a, "k1.txt");
    assert_false(exists("k1/ckpt_00000003"));
    assert_false(exists("k1/ckpt_00000006"));
    assert_true(exists("k1/ckpt_00000008"));
}

static void test_config_change(void **state) {
    (void)state;
    char a[600];
    snprintf(a, sizeof a, "--out %s/m --stop-at 4", dir);
    RUN_OK(a, "m1.txt");
    const char *changes[][2] = {{"--lr 0.002", "lr "},      {"--wd 0.05", "wd "},   {"--warmup 3", "warmup "},
                                {"--steps 9", "steps "},    {"--schedule linear", "schedule "},
                                {"--grad-clip 0.5", "grad_clip "}, {"--batch 3", "batch "}, {"--l1 0.01", "l1 "},
                                {"--final-lr-frac 0.2", "final_lr_frac "}, {"--seed 7", "seed "}};
    for (size_t i = 0; i < sizeof changes / sizeof changes[0]; i++) {
        snprintf(a, sizeof a, "--out %s/m --resume %s", dir, changes[i][0]);
        RUN_FAILS(a, "m2.txt", changes[i][1]);
        char *o = slurp("m2.txt");
        assert_non_null(strstr(o, "--allow-config-change"));
        free(o);
    }
    snprintf(a, sizeof a, "--out %s/m --resume --lr 0.002 --allow-config-change", dir);
    RUN_OK(a, "m3.txt");
    assert_true(exists("m/ckpt_00000008"));
}

static void test_out_locked(void **state) {
    (void)state;
    char out[400], err[512], a[600];
    snprintf(out, sizeof out, "%s/l", dir);
    int fd;
    if (ckpt_out_lock(out, &fd, err, sizeof err) != 0) fail_msg("%s", err);
    snprintf(a, sizeof a, "--out %s", out);
    RUN_FAILS(a, "l.txt", "in use by another run");
    close(fd);  // lock released: the run goes
    RUN_OK(a, "l2.txt");
}

static void test_inputs_checked_first(void **state) {
    (void)state;
    char a[600];
    snprintf(a, sizeof a, "--out %s/v --val '%s/nothing_*.bin'", dir, dir);
    RUN_FAILS(a, "v.txt", "validation data");
    assert_false(exists("v/metrics.log") && strlen(slurp("v/metrics.log")) > 0);
    snprintf(a, sizeof a, "--out %s/v2 --tokenizer %s/no_tokenizer.json", dir, dir);
    RUN_FAILS(a, "v2.txt", "no_tokenizer.json");
    char *o = slurp("v2.txt");
    assert_null(strstr(o, "step    1"));
    free(o);
}

static int setup(void **state) {
    (void)state;
    g_seed = test_seed("test_train_cpu");
    if (access("build/train_cpu", X_OK) != 0) { fprintf(stderr, "build/train_cpu missing (run make)\n"); return -1; }
    if (test_tmpdir_make(dir, sizeof dir, "sllm_test_train_cpu_") != 0) return -1;
    Rng r;
    rng_seed(&r, g_seed);
    size_t n = 4000;
    int32_t *tok = malloc(n * sizeof(int32_t));
    for (size_t i = 0; i < n; i++) tok[i] = (int32_t)rng_below(&r, 64);
    char p[400], err[256];
    snprintf(p, sizeof p, "%s/t_train_000000.bin", dir);
    int rc = shard_write(p, tok, n, 2, err, sizeof err);
    free(tok);
    if (rc != 0) { fprintf(stderr, "%s\n", err); return -1; }
    return 0;
}
static int teardown(void **state) { (void)state; return test_tmpdir_remove(dir); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resume_exact),      cmocka_unit_test(test_keep_last),
        cmocka_unit_test(test_config_change),     cmocka_unit_test(test_out_locked),
        cmocka_unit_test(test_inputs_checked_first),
    };
    return cmocka_run_group_tests_name("train_cpu", tests, setup, teardown);
}
