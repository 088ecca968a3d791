// core/energy.h without a GPU: the trapezoid rule, the sampling meter on a fake power source (constant and a step,
// integrated while the "work" runs), reads between samples, failed reads, and a clear reason when NVML is absent.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>
#include <math.h>
#include <time.h>

#include "energy.h"

static void sleep_ms(int ms) {
    struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000L};
    nanosleep(&ts, NULL);
}
static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void test_trapezoid(void **state) {
    (void)state;
    const double t[4] = {0.0, 0.5, 1.0, 3.0};
    const double c[4] = {100, 100, 100, 100};
    assert_true(energy_trapezoid(t, c, 4) > 299.999 && energy_trapezoid(t, c, 4) < 300.001);
    const double ramp[4] = {0, 50, 100, 300};  // w = 100 t: integral 0..3 = 450 J, exact for a linear ramp
    assert_true(energy_trapezoid(t, ramp, 4) > 449.999 && energy_trapezoid(t, ramp, 4) < 450.001);
    const double step[3] = {0, 1, 2}, w[3] = {200, 200, 0};  // 200 W for 1 s, then a linear fall to 0: 300 J
    assert_true(energy_trapezoid(step, w, 3) > 299.999 && energy_trapezoid(step, w, 3) < 300.001);
    assert_true(energy_trapezoid(t, c, 1) == 0.0);
    assert_true(energy_trapezoid(t, c, 0) == 0.0);
}

typedef struct { double t0, before, after, switch_s; int fail_every, calls; } Fake;
static int fake_power(void *ctx, double *w) {
    Fake *f = (Fake *)ctx;
    f->calls++;
    if (f->fail_every && f->calls % f->fail_every == 0) return -1;
    *w = now_s() - f->t0 < f->switch_s ? f->before : f->after;
    return 0;
}

// 150 W constant: a 300 ms region reads 45 J (within the sampling period's worth at each end).
static void test_constant_power(void **state) {
    (void)state;
    Fake f = {now_s(), 150, 150, 1e9, 0, 0};
    EnergyMeter *em = energy_open_source(fake_power, &f, 5, "fake 150 W");
    assert_non_null(em);
    assert_int_equal(energy_source(em), ENERGY_POWER_SAMPLES);
    assert_non_null(strstr(energy_describe(em), "every 5 ms"));
    double j0, j1;
    assert_int_equal(energy_read(em, &j0), 0);
    const double t0 = now_s();
    sleep_ms(300);
    assert_int_equal(energy_read(em, &j1), 0);
    const double dt = now_s() - t0;
    print_message("constant: %.3f J over %.3f s (expected %.3f)\n", j1 - j0, dt, 150 * dt);
    assert_true(j1 - j0 > 150 * dt * 0.97 && j1 - j0 < 150 * dt * 1.03);
    long n, bad;
    energy_sample_counts(em, &n, &bad);
    assert_true(n >= 20);  // ~60 expected; a loaded CI machine may be slower
    assert_int_equal(bad, 0);
    energy_close(em);
}

// 300 W for 150 ms, then 100 W: the region [0, 400 ms] reads ~ 300*0.15 + 100*0.25 = 70 J; reads are monotone.
static void test_power_step(void **state) {
    (void)state;
    Fake f = {now_s(), 300, 100, 0.150, 0, 0};
    EnergyMeter *em = energy_open_source(fake_power, &f, 5, "fake step");
    assert_non_null(em);
    double j0, prev, j;
    energy_read(em, &j0);
    prev = j0;
    for (int i = 0; i < 40; i++) {
        sleep_ms(10);
        energy_read(em, &j);
        assert_true(j >= prev);
        prev = j;
    }
    const double dt = now_s() - f.t0;
    const double expect = 300 * 0.150 + 100 * (dt - 0.150);
    print_message("step: %.3f J, expected %.3f over %.3f s\n", prev - j0, expect, dt);
    assert_true(fabs(prev - j0 - expect) < 0.06 * expect);
    energy_close(em);
}

// Every 3rd reading fails: skipped and counted, the integral still bridges the gap.
static void test_failed_reads(void **state) {
    (void)state;
    Fake f = {now_s(), 80, 80, 1e9, 3, 0};
    EnergyMeter *em = energy_open_source(fake_power, &f, 5, "fake flaky");
    assert_non_null(em);
    double j0, j1;
    energy_read(em, &j0);
    const double t0 = now_s();
    sleep_ms(200);
    energy_read(em, &j1);
    const double dt = now_s() - t0;
    long n, bad;
    energy_sample_counts(em, &n, &bad);
    assert_true(bad >= 5);
    assert_true(j1 - j0 > 80 * dt * 0.95 && j1 - j0 < 80 * dt * 1.05);
    energy_close(em);
}

static int always_fails(void *ctx, double *w) { (void)ctx; (void)w; return -1; }

static void test_open_failures(void **state) {
    (void)state;
    assert_null(energy_open_source(always_fails, NULL, 5, "broken"));
    char why[256] = "";
    setenv("SLLM_NVML_LIB", "/nonexistent/libnvidia-ml.so.1", 1);
    assert_null(energy_open(NULL, 20, why, sizeof why));
    assert_non_null(strstr(why, "cannot load NVML"));
    assert_non_null(strstr(why, "/nonexistent/libnvidia-ml.so.1"));
    unsetenv("SLLM_NVML_LIB");
    setenv("SLLM_ENERGY", "off", 1);
    assert_null(energy_open(NULL, 20, why, sizeof why));
    assert_string_equal(why, "SLLM_ENERGY=off");
    setenv("SLLM_ENERGY", "bogus", 1);
    assert_null(energy_open(NULL, 20, why, sizeof why));
    assert_non_null(strstr(why, "auto, samples or off"));
    unsetenv("SLLM_ENERGY");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trapezoid),
        cmocka_unit_test(test_constant_power),
        cmocka_unit_test(test_power_step),
        cmocka_unit_test(test_failed_reads),
        cmocka_unit_test(test_open_failures),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
