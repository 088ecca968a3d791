// The multi-process bootstrap without MPI (core/rendezvous.h) and the ZeRO-1 shard layout (core/shard_range.h):
// init-spec parsing, the file and TCP hand-over of a blob between two processes (fork), their timeouts and
// mismatch errors; every element owned exactly once for world 1..8 and awkward sizes.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "common.h"
#include "rendezvous.h"
#include "shard_range.h"
#include "test_util.h"

#define assert_err_contains(err, s) do { if (!strstr((err), (s))) fail_msg("error message \"%s\" does not contain \"%s\"", (err), (s)); } while (0)

static char g_dir[256];

// ---- parsing ---------------------------------------------------------------------------------------------
static void test_parse_ok(void **state) {
    (void)state;
    DistInitSpec s;
    char err[512];
    assert_int_equal(dist_parse_init("file:///tmp/x/id", &s, err, sizeof err), 0);
    assert_int_equal(s.kind, DIST_INIT_FILE);
    assert_string_equal(s.path, "/tmp/x/id");
    assert_int_equal(dist_parse_init("file://rel/id", &s, err, sizeof err), 0);
    assert_string_equal(s.path, "rel/id");
    assert_int_equal(dist_parse_init("tcp://node-01.cluster:29500", &s, err, sizeof err), 0);
    assert_int_equal(s.kind, DIST_INIT_TCP);
    assert_string_equal(s.host, "node-01.cluster");
    assert_int_equal(s.port, 29500);
    assert_int_equal(dist_parse_init("tcp://[::1]:1", &s, err, sizeof err), 0);
    assert_string_equal(s.host, "::1");
    assert_int_equal(s.port, 1);
    assert_int_equal(dist_parse_init("mpi", &s, err, sizeof err), 0);
    assert_int_equal(s.kind, DIST_INIT_MPI);
    setenv("MASTER_ADDR", "10.0.0.7", 1);
    setenv("MASTER_PORT", "65535", 1);
    assert_int_equal(dist_parse_init("env", &s, err, sizeof err), 0);
    assert_int_equal(s.kind, DIST_INIT_TCP);
    assert_string_equal(s.host, "10.0.0.7");
    assert_int_equal(s.port, 65535);
    unsetenv("MASTER_ADDR");
    unsetenv("MASTER_PORT");
}

static void test_parse_errors(void **state) {
    (void)state;
    DistInitSpec s;
    char err[512];
    const struct { const char *spec, *msg; } bad[] = {
        {"", "empty"},
        {"file://", "no path"},
        {"file:///tmp/dir/", "directory"},
        {"tcp://host", "tcp://host:port"},
        {"tcp://:80", "tcp://host:port"},
        {"tcp://host:0", "1..65535"},
        {"tcp://host:65536", "1..65535"},
        {"tcp://host:12ab", "1..65535"},
        {"tcp://host:", "1..65535"},
        {"nfs://x", "unknown method"},
        {"env", "MASTER_ADDR"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        if (dist_parse_init(bad[i].spec, &s, err, sizeof err) != -1) fail_msg("'%s' was accepted", bad[i].spec);
        assert_err_contains(err, bad[i].msg);
    }
    assert_int_equal(dist_parse_init(NULL, &s, err, sizeof err), -1);
}

static void test_env_int(void **state) {
    (void)state;
    char err[256];
    int v = -7;
    unsetenv("SLLM_T_X");
    assert_int_equal(dist_env_int("SLLM_T_X", &v, err, sizeof err), 0);
    assert_int_equal(v, -7);
    setenv("SLLM_T_X", "12", 1);
    assert_int_equal(dist_env_int("SLLM_T_X", &v, err, sizeof err), 1);
    assert_int_equal(v, 12);
    setenv("SLLM_T_X", "3x", 1);
    assert_int_equal(dist_env_int("SLLM_T_X", &v, err, sizeof err), -1);
    assert_err_contains(err, "SLLM_T_X='3x'");
    setenv("SLLM_T_X", "-1", 1);
    assert_int_equal(dist_env_int("SLLM_T_X", &v, err, sizeof err), -1);
    unsetenv("SLLM_T_X");
}

// ---- file rendezvous ---------------------------------------------------------------------------------------
static void fill_blob(unsigned char *b, size_t n, unsigned seed) {
    for (size_t i = 0; i < n; i++) b[i] = (unsigned char)((i * 131u + seed * 7u + (i >> 3)) & 0xff);
}

// Child = rank 1 fetching; it exits 0 when it got exactly the parent's blob.
static pid_t spawn_file_fetcher(const char *path, int world, double timeout_s) {
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        unsigned char want[128], got[128];
        char err[512];
        fill_blob(want, sizeof want, 5);
        if (rdv_file_fetch(path, world, got, sizeof got, timeout_s, err, sizeof err) != 0) {
            fprintf(stderr, "fetcher: %s\n", err);
            _exit(2);
        }
        _exit(memcmp(want, got, sizeof got) == 0 ? 0 : 3);
    }
    return pid;
}

static void test_file_rendezvous(void **state) {
    (void)state;
    char path[512], err[512];
    snprintf(path, sizeof path, "%s/id_file", g_dir);
    unlink(path);
    pid_t pid = spawn_file_fetcher(path, 2, 20.0);  // starts polling before the file exists
    usleep(200000);
    unsigned char blob[128];
    fill_blob(blob, sizeof blob, 5);
    assert_int_equal(rdv_file_publish(path, 2, blob, sizeof blob, err, sizeof err), 0);
    int st = 0;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
    // no temp file left behind
    char tmp[600];
    snprintf(tmp, sizeof tmp, "%s.tmp-%d", path, (int)getpid());
    assert_int_not_equal(access(tmp, F_OK), 0);
    // another job's file (world 4) is refused by name
    unsigned char got[128];
    assert_int_equal(rdv_file_publish(path, 4, blob, sizeof blob, err, sizeof err), 0);
    assert_int_equal(rdv_file_fetch(path, 2, got, sizeof got, 1.0, err, sizeof err), -1);
    assert_err_contains(err, "world size 4");
    // wrong length, garbage
    assert_int_equal(rdv_file_fetch(path, 4, got, 64, 1.0, err, sizeof err), -1);
    assert_err_contains(err, "expected 64");
    FILE *f = fopen(path, "wb");
    fputs("garbage that is long enough to hold a header", f);
    fclose(f);
    assert_int_equal(rdv_file_fetch(path, 2, got, sizeof got, 1.0, err, sizeof err), -1);
    assert_err_contains(err, "not a rendezvous file");
    unlink(path);
}

static void test_file_rendezvous_timeout(void **state) {
    (void)state;
    char path[512], err[512];
    unsigned char got[128];
    snprintf(path, sizeof path, "%s/never_written", g_dir);
    double t0 = sllm_time_s();
    assert_int_equal(rdv_file_fetch(path, 2, got, sizeof got, 0.5, err, sizeof err), -1);
    double dt = sllm_time_s() - t0;
    assert_true(dt >= 0.5 && dt < 5.0);
    assert_err_contains(err, "did not appear within");
    snprintf(path, sizeof path, "%s/no_such_dir/id", g_dir);
    unsigned char blob[16] = {0};
    assert_int_equal(rdv_file_publish(path, 2, blob, sizeof blob, err, sizeof err), -1);
    assert_err_contains(err, "cannot create rendezvous file");
}

// ---- TCP rendezvous ----------------------------------------------------------------------------------------
static int pick_port(void) { return 20000 + (int)((getpid() * 7919u + (unsigned)time(NULL)) % 30000u); }

static void test_tcp_rendezvous(void **state) {
    (void)state;
    const int world = 3;
    int port = pick_port();
    unsigned char blob[128];
    fill_blob(blob, sizeof blob, 9);
    pid_t kids[2];
    for (int r = 1; r < world; r++) {  // ranks 1 and 2 start first and retry until rank 0 listens
        fflush(stdout);
        kids[r - 1] = fork();
        if (kids[r - 1] == 0) {
            unsigned char got[128];
            char err[512];
            if (rdv_tcp_fetch("127.0.0.1", port, r, world, got, sizeof got, 20.0, err, sizeof err) != 0) {
                fprintf(stderr, "rank %d: %s\n", r, err);
                _exit(2);
            }
            _exit(memcmp(got, blob, sizeof got) == 0 ? 0 : 3);
        }
    }
    usleep(300000);
    char err[512];
    int rc = rdv_tcp_publish(port, world, blob, sizeof blob, 20.0, err, sizeof err);
    if (rc != 0) fail_msg("publish: %s", err);
    for (int i = 0; i < world - 1; i++) {
        int st = 0;
        waitpid(kids[i], &st, 0);
        assert_true(WIFEXITED(st));
        assert_int_equal(WEXITSTATUS(st), 0);
    }
}

static void test_tcp_rendezvous_timeouts(void **state) {
    (void)state;
    char err[512];
    unsigned char blob[32] = {1};
    int port = pick_port() + 1;
    // nobody comes: rank 0 names the missing ranks
    double t0 = sllm_time_s();
    assert_int_equal(rdv_tcp_publish(port, 3, blob, sizeof blob, 0.5, err, sizeof err), -1);
    assert_true(sllm_time_s() - t0 < 5.0);
    assert_err_contains(err, "missing: 1 2");
    // nobody listens: the peer gives up at its timeout
    t0 = sllm_time_s();
    assert_int_equal(rdv_tcp_fetch("127.0.0.1", port, 1, 2, blob, sizeof blob, 0.5, err, sizeof err), -1);
    assert_true(sllm_time_s() - t0 < 5.0);
    assert_err_contains(err, "failed within");
    // a peer of another world size is refused and reports the mismatch
    fflush(stdout);
    pid_t pid = fork();
    if (pid == 0) {
        char e2[512];
        unsigned char b2[32];
        int r = rdv_tcp_fetch("127.0.0.1", port, 1, 4, b2, sizeof b2, 10.0, e2, sizeof e2);
        _exit(r == -1 && strstr(e2, "world size 2") ? 0 : 4);
    }
    assert_int_equal(rdv_tcp_publish(port, 2, blob, sizeof blob, 1.5, err, sizeof err), -1);
    int st = 0;
    waitpid(pid, &st, 0);
    assert_true(WIFEXITED(st));
    assert_int_equal(WEXITSTATUS(st), 0);
}

// ---- shard layout ------------------------------------------------------------------------------------------
static void test_shard_ranges(void **state) {
    (void)state;
    const size_t totals[] = {0, 1, 3, 7, 8, 9, 10, 17, 63, 64, 65, 1000, 1001, 1023, 4097, 123457, (1u << 20) + 3};
    for (int world = 1; world <= 8; world++) {
        for (size_t ti = 0; ti < sizeof totals / sizeof totals[0]; ti++) {
            const size_t total = totals[ti];
            unsigned char *own = (unsigned char *)calloc(total + 1, 1);
            size_t next = 0;
            for (int r = 0; r < world; r++) {
                ShardRange s = shard_range(total, world, r);
                if (s.offset != next) fail_msg("total %zu world %d rank %d starts at %zu, expected %zu", total, world, r, s.offset, next);
                if (s.count && s.offset % SHARD_ALIGN) fail_msg("total %zu world %d rank %d: unaligned start %zu", total, world, r, s.offset);
                if (s.offset + s.count < total && s.count && (s.offset + s.count) % SHARD_ALIGN)
                    fail_msg("total %zu world %d rank %d: inner shard ends unaligned", total, world, r);
                if (s.count > shard_stride(total, world)) fail_msg("shard larger than the stride");
                for (size_t i = s.offset; i < s.offset + s.count; i++) {
                    own[i]++;
                    if (shard_owner(total, world, i) != r) fail_msg("shard_owner(%zu) != %d", i, r);
                }
                next = s.offset + s.count;
            }
            for (size_t i = 0; i < total; i++)
                if (own[i] != 1) fail_msg("total %zu world %d: element %zu owned %d times", total, world, i, own[i]);
            assert_int_equal(next, total);
            // the padded buffer of an in-place all-gather holds every rank's stride
            assert_true(shard_stride(total, world) * (size_t)world >= total);
            free(own);
        }
    }
    // the layout stated in the header: total 10, world 8 -> 8, 2, 0, ...
    assert_int_equal(shard_range(10, 8, 0).count, 8);
    assert_int_equal(shard_range(10, 8, 1).count, 2);
    assert_int_equal(shard_range(10, 8, 2).count, 0);
    assert_int_equal(shard_range(10, 8, 7).offset, 10);
}

static int setup(void **state) {
    (void)state;
    return test_tmpdir_make(g_dir, sizeof g_dir, "sllm_rdv_");
}
static int teardown(void **state) {
    (void)state;
    return test_tmpdir_remove(g_dir);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_ok),
        cmocka_unit_test(test_parse_errors),
        cmocka_unit_test(test_env_int),
        cmocka_unit_test(test_file_rendezvous),
        cmocka_unit_test(test_file_rendezvous_timeout),
        cmocka_unit_test(test_tcp_rendezvous),
        cmocka_unit_test(test_tcp_rendezvous_timeouts),
        cmocka_unit_test(test_shard_ranges),
    };
    return cmocka_run_group_tests_name("rendezvous", tests, setup, teardown);
}
