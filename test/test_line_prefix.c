// core/line_prefix.h: a child process prefixes its output; every line it writes (printf, stderr, raw write, a long
// line, a last line without a newline (given one), lines written just before exit(1)) arrives with the prefix, none lost.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "line_prefix.h"

// Runs child_body in a child whose stdout and stderr both go into one pipe; returns its output (malloc'd) and status.
static char *run_child(void (*child_body)(void), int *status) {
    int p[2];
    assert_int_equal(pipe(p), 0);
    fflush(stdout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        close(p[0]);
        dup2(p[1], 1);
        dup2(p[1], 2);
        close(p[1]);
        child_body();
        _exit(99);  // not reached
    }
    close(p[1]);
    size_t cap = 1 << 16, len = 0;
    char *out = (char *)malloc(cap);
    ssize_t n;
    while ((n = read(p[0], out + len, cap - len - 1)) > 0) {
        len += (size_t)n;
        if (cap - len < 4096) out = (char *)realloc(out, cap *= 2);
    }
    out[len] = 0;
    close(p[0]);
    waitpid(pid, status, 0);
    return out;
}

static void body_mixed(void) {
    char err[128];
    printf("before the prefix\n");
    if (line_prefix_start("SYNTHETIC ", err, sizeof err) != 0) { fprintf(stderr, "start: %s\n", err); exit(3); }
    printf("line one\n");
    printf("two ");
    printf("parts\n");
    fprintf(stderr, "an error line\n");
    if (write(1, "raw\nraw2\n", 9) != 9) exit(4);
    for (int i = 0; i < 3000; i++) putchar('x');  // a line longer than the copier's buffer
    putchar('\n');
    for (int i = 0; i < 200; i++) printf("numbered %d\n", i);
    printf("no newline at the end");
    exit(1);  // as SLLM_FATAL does
}

static void test_every_line_prefixed(void **state) {
    (void)state;
    int status = 0;
    char *out = run_child(body_mixed, &status);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 1);
    int lines = 0, numbered = 0;
    char *save = NULL;
    for (char *l = strtok_r(out, "\n", &save); l; l = strtok_r(NULL, "\n", &save)) {
        lines++;
        if (lines == 1) { assert_string_equal(l, "before the prefix"); continue; }
        if (strncmp(l, "SYNTHETIC ", 10) != 0) fail_msg("line without the prefix: \"%.80s\"", l);
        if (!strncmp(l + 10, "numbered ", 9)) numbered++;
        if (!strncmp(l + 10, "xxx", 3)) assert_int_equal(strlen(l), 10 + 3000);
    }
    assert_int_equal(numbered, 200);
    assert_int_equal(lines, 1 + 1 + 1 + 1 + 2 + 1 + 200 + 1);
    assert_non_null(strstr(out + 0, "before the prefix"));
    free(out);
    // the pieces, in place (strtok cut the first copy); the two lines of one raw write stay together however the
    // two copier threads interleave, so this runs many times (each copier emits the complete lines of a read at once)
    for (int rep = 0; rep < 100; rep++) {
        out = run_child(body_mixed, &status);
        assert_non_null(strstr(out, "SYNTHETIC two parts\n"));
        assert_non_null(strstr(out, "SYNTHETIC an error line\n"));
        if (!strstr(out, "SYNTHETIC raw\nSYNTHETIC raw2\n")) fail_msg("run %d: the raw write's lines were split", rep);
        assert_non_null(strstr(out, "SYNTHETIC no newline at the end\n"));  // ended by the copier
        free(out);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_every_line_prefixed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
