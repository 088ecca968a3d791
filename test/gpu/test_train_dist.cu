// Multi-GPU test of the train_gpt_relu binary (data parallel + ZeRO-1), run when 2 or more GPUs are visible.
//
// On a synthetic shard, a tiny model trains 30 steps with the SAME global batch (512 tokens: B 2 x T 64 x
// accum) on 1 rank (accum 4), 2 ranks (accum 2) and, with 4 GPUs, 4 ranks (accum 1), the ranks launched through
// scripts/run_dist.sh (file rendezvous). Every rank reads its stripe of each global batch, so all runs see the
// same tokens per step; only the order of the fp32 gradient sums differs. Checked:
//   1. the loss and the gradient norm of every step agree with the 1-rank run: |loss difference| <= 0.02 at every
//      step and <= 0.005 on average; norm within 3% (bf16 weights: an fp32 rounding difference can flip one bf16
//      rounding of a weight). A missing or doubled reduction, a wrong loss scale (the norm doubles) or a rank
//      training on the wrong stripe gives differences of 0.1 or more.
//   2. resume on 2 ranks: 10 steps, checkpoint (2 optimizer shards), --resume for the rest: every metrics line
//      identical to the straight 2-rank run (same float32 bits).
//   3. re-sharding: the 2-rank checkpoint resumed on 1 rank continues the 2-rank curve (tolerances of 1.).
// Skipped (counted) when fewer than 2 GPUs are visible or build/train_gpt_relu is missing.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
extern "C" {
#include <cmocka.h>
}
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common.h"
#include "cuda_common.cuh"
#include "dataloader/shard.h"
#include "gpu_harness.h"
#include "rng.h"
#include "test_util.h"

#define MAXL 128

static int visible_gpus(void) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) { cudaGetLastError(); return 0; }
    return n;
}


// Step lines of metrics.log: "s:N loss:X ce:.. l1:.. norm:Y lr:.. ms:.."; text without the timing field in
// lines[], and step, loss, norm parsed. Returns the number of step lines (all lines in *nall).
typedef struct {
    int step;
    double loss, norm;
} StepRec;
static int read_metrics(const char *path, char lines[][256], int *nall, StepRec *rec) {
    FILE *f = fopen(path, "r");
    if (!f) return -1;
    int n = 0, ns = 0;
    char buf[512];
    while (fgets(buf, sizeof buf, f) && n < MAXL) {
        char *ms = strstr(buf, " ms:");
        if (ms) *ms = 0;
        buf[strcspn(buf, "\n")] = 0;
        snprintf(lines[n++], 256, "%.255s", buf);
        const char *lo = strstr(buf, " loss:"), *no = strstr(buf, " norm:");
        if (lo && no) {
            rec[ns].step = atoi(buf + 2);
            rec[ns].loss = atof(lo + 6);
            rec[ns].norm = atof(no + 6);
            ns++;
        }
    }
    fclose(f);
    *nall = n;
    return ns;
}

// Compares the step records of b against a (same steps); returns the number of violations.
static int compare_curves(const char *what, const StepRec *a, int na, const StepRec *b, int nb) {
    int bad = 0;
    double sum = 0, worst = 0, worst_norm = 0;
    if (na != nb) { printf("  %s: %d steps vs %d\n", what, na, nb); return 1; }
    for (int i = 0; i < na; i++) {
        if (a[i].step != b[i].step) { printf("  %s: step %d vs %d\n", what, a[i].step, b[i].step); return 1; }
        double dl = fabs(a[i].loss - b[i].loss), dn = fabs(a[i].norm - b[i].norm) / fmax(a[i].norm, 1e-6);
        sum += dl;
        if (dl > worst) worst = dl;
        if (dn > worst_norm) worst_norm = dn;
        if (dl > 0.02 || dn > 0.03) {
            printf("  %s: step %d loss %.6f vs %.6f, norm %.5f vs %.5f\n", what, a[i].step, a[i].loss, b[i].loss,
                   a[i].norm, b[i].norm);
            bad++;
        }
    }
    double mean = na ? sum / na : 0;
    printf("  %s: %d steps, loss |diff| max %.5f mean %.5f, norm rel diff max %.4f; last loss %.5f vs %.5f\n", what,
           na, worst, mean, worst_norm, na ? a[na - 1].loss : 0, na ? b[na - 1].loss : 0);
    if (mean > 0.005) bad++;
    return bad;
}

static void test_dist_loss_curves(void **state) {
    const int ngpu = visible_gpus();
    if (ngpu < 2) {
        printf("    SKIPPED: %d GPU(s) visible; the multi-rank trainer test needs 2\n", ngpu);
        skip();
    }
    const char *bin = "build/train_gpt_relu";
    if (access(bin, X_OK) != 0) { printf("    SKIPPED: %s not built\n", bin); skip(); }
    char dir[] = "/tmp/sllm_tdist_XXXXXX";
    assert_non_null(mkdtemp(dir));
    Rng rng;
    rng_seed(&rng, 20240611);
    const int V = 512;
    char shard[512], err[256];
    snprintf(shard, sizeof shard, "%s/syn_train_000000.bin", dir);
    assert_int_equal(test_write_pattern_shard(shard, 80000, V, &rng, err, sizeof err), 0);
    char common[2048], cmd[4096];
    snprintf(common, sizeof common,
             "%s --train %s --preset test --vocab %d --d-model 64 --heads 2 --layers 2 --d-ff 128 --max-seq 64 "
             "--batch 2 --seq 64 --total-batch 512 --steps 30 --warmup 3 --lr 3e-3 --l1 0.01 --eval-every 0 "
             "--sample-every 0 --log-stats-every 5 --ckpt-every -1 --dist-timeout 60",
             bin, shard, V);
    const char *launch = "DIST_GRACE_S=5 bash scripts/run_dist.sh";
    static char l1[MAXL][256], l2[MAXL][256], l4[MAXL][256], lr2[MAXL][256], lx[MAXL][256];
    static StepRec r1[MAXL], r2[MAXL], r4[MAXL], rr2[MAXL], rx[MAXL];
    char p[700];
    int n1, n2, n4, nr2, nx, a1, a2, a4, ar2, ax;
    // 1 rank (accum 4), 2 ranks (accum 2), 4 ranks (accum 1)
    snprintf(cmd, sizeof cmd, "%s --out %s/w1 > %s/w1.txt 2>&1", common, dir, dir);
    assert_int_equal(test_run_cmd(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s 2 %s --out %s/w2 > %s/w2.txt 2>&1", launch, common, dir, dir);
    assert_int_equal(test_run_cmd(cmd), 0);
    snprintf(p, sizeof p, "%s/w1/metrics.log", dir);
    n1 = read_metrics(p, l1, &a1, r1);
    snprintf(p, sizeof p, "%s/w2/metrics.log", dir);
    n2 = read_metrics(p, l2, &a2, r2);
    assert_int_equal(n1, 30);
    int bad = compare_curves("1 vs 2 ranks", r1, n1, r2, n2);
    if (ngpu >= 4) {
        snprintf(cmd, sizeof cmd, "%s 4 %s --out %s/w4 > %s/w4.txt 2>&1", launch, common, dir, dir);
        assert_int_equal(test_run_cmd(cmd), 0);
        snprintf(p, sizeof p, "%s/w4/metrics.log", dir);
        n4 = read_metrics(p, l4, &a4, r4);
        bad += compare_curves("1 vs 4 ranks", r1, n1, r4, n4);
    } else printf("  4 ranks: %d GPUs visible, not run\n", ngpu);
    assert_true(r1[n1 - 1].loss < r1[0].loss - 0.5);  // it trained

    // resume on 2 ranks: bit-exact continuation
    snprintf(cmd, sizeof cmd, "%s 2 %s --out %s/r2 --stop-at 10 > %s/r2a.txt 2>&1", launch, common, dir, dir);
    assert_int_equal(test_run_cmd(cmd), 0);
    snprintf(cmd, sizeof cmd, "ls %s/r2/ckpt_00000010/", dir);
    test_run_cmd(cmd);
    snprintf(p, sizeof p, "%s/r2/ckpt_00000010/opt_rank00001.bin", dir);
    assert_int_equal(access(p, F_OK), 0);
    snprintf(cmd, sizeof cmd, "cp -r %s/r2 %s/rx", dir, dir);  // for the re-sharding run
    assert_int_equal(test_run_cmd(cmd), 0);
    snprintf(cmd, sizeof cmd, "%s 2 %s --out %s/r2 --resume > %s/r2b.txt 2>&1", launch, common, dir, dir);
    assert_int_equal(test_run_cmd(cmd), 0);
    snprintf(p, sizeof p, "%s/r2/metrics.log", dir);
    nr2 = read_metrics(p, lr2, &ar2, rr2);
    printf("  2-rank straight: %d metric lines, 2-rank resumed: %d\n", a2, ar2);
    int diff = ar2 == a2 ? 0 : 1;
    for (int i = 0; i < a2 && i < ar2; i++)
        if (strcmp(l2[i], lr2[i]) != 0) { printf("  DIFF\n    %s\n    %s\n", l2[i], lr2[i]); diff++; }
    if (!diff) printf("  resume on 2 ranks: all %d lines identical; last: %s\n", a2, l2[a2 - 1]);
    assert_int_equal(nr2, 30);
    assert_int_equal(diff, 0);

    // the 2-rank checkpoint resumed on 1 rank (optimizer shards re-cut)
    snprintf(cmd, sizeof cmd, "%s --out %s/rx --resume > %s/rx.txt 2>&1", common, dir, dir);
    assert_int_equal(test_run_cmd(cmd), 0);
    snprintf(p, sizeof p, "%s/rx/metrics.log", dir);
    nx = read_metrics(p, lx, &ax, rx);
    bad += compare_curves("2 ranks, resumed on 1 rank at step 10", r2, n2, rx, nx);
    assert_int_equal(bad, 0);
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    test_run_cmd(cmd);
}

int main(int argc, char **argv) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dist_loss_curves),
    };
    GPU_TEST_PREFLIGHT("test_train_dist", tests);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
