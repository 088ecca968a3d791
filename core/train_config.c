// core/train_config.c: see train_config.h.
#include "train_config.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common.h"

// kind: 0 int, 1 float, 2 string, 3 u64. layout: how the global batch is laid out over ranks and micro-steps
// (world size, per-rank batch); a change there keeps the run (same global batch, the optimizer shards re-cut) and
// is reported, not refused.
typedef struct { const char *key; int kind; size_t off; int layout; } Field;
#define F_INT(k) {#k, 0, offsetof(TrainConfig, k), 0}
#define F_FLT(k) {#k, 1, offsetof(TrainConfig, k), 0}
#define F_LAYOUT(k) {#k, 0, offsetof(TrainConfig, k), 1}
static const Field FIELDS[] = {
    {"schedule", 2, offsetof(TrainConfig, schedule), 0}, F_INT(steps), F_INT(warmup), F_FLT(lr), F_FLT(final_lr_frac),
    F_FLT(wd), F_FLT(beta1), F_FLT(beta2), F_FLT(eps), F_FLT(grad_clip), F_LAYOUT(batch), F_INT(seq),
    F_INT(total_batch), F_LAYOUT(world), F_FLT(l1), F_FLT(rope_theta), {"seed", 3, offsetof(TrainConfig, seed), 0},
};
#define N_FIELDS (sizeof FIELDS / sizeof FIELDS[0])

char *train_config_json(const TrainConfig *tc) {
    cJSON *o = cJSON_CreateObject();
    if (!o) return NULL;
    char u[32];
    for (size_t i = 0; i < N_FIELDS; i++) {
        const char *p = (const char *)tc + FIELDS[i].off;
        switch (FIELDS[i].kind) {
            case 0: cJSON_AddNumberToObject(o, FIELDS[i].key, *(const int *)p); break;
            case 1: cJSON_AddNumberToObject(o, FIELDS[i].key, (double)*(const float *)p); break;
            case 2: cJSON_AddStringToObject(o, FIELDS[i].key, *(const char *const *)p ? *(const char *const *)p : ""); break;
            case 3:  // as a string: a double cannot hold every 64-bit seed
                snprintf(u, sizeof u, "%llu", *(const unsigned long long *)p);
                cJSON_AddStringToObject(o, FIELDS[i].key, u);
                break;
        }
    }
    char *s = cJSON_Print(o);
    cJSON_Delete(o);
    return s;
}

int train_config_diff(const char *saved_json, const TrainConfig *tc, char *diff, size_t n, char *layout, size_t ln) {
    cJSON *o = cJSON_Parse(saved_json);
    if (!cJSON_IsObject(o)) { cJSON_Delete(o); snprintf(diff, n, "not a JSON object"); return -1; }
    int count = 0, nlayout = 0;
    size_t len = 0, llen = 0;
    diff[0] = 0;
    if (layout && ln) layout[0] = 0;
    for (size_t i = 0; i < N_FIELDS; i++) {
        const char *p = (const char *)tc + FIELDS[i].off;
        const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, FIELDS[i].key);
        char saved[64], cur[64];
        int same;
        switch (FIELDS[i].kind) {
            case 0:
            case 1: {
                double now = FIELDS[i].kind ? (double)*(const float *)p : (double)*(const int *)p;
                snprintf(cur, sizeof cur, "%.9g", now);
                if (!cJSON_IsNumber(v)) { snprintf(saved, sizeof saved, "(missing)"); same = 0; break; }
                snprintf(saved, sizeof saved, "%.9g", v->valuedouble);
                same = FIELDS[i].kind ? (float)v->valuedouble == *(const float *)p : v->valuedouble == now;
                break;
            }
            default: {
                char u[32];
                const char *now = FIELDS[i].kind == 2 ? *(const char *const *)p : u;
                if (FIELDS[i].kind == 3) snprintf(u, sizeof u, "%llu", *(const unsigned long long *)p);
                snprintf(cur, sizeof cur, "%s", now ? now : "");
                snprintf(saved, sizeof saved, "%s", cJSON_IsString(v) ? v->valuestring : "(missing)");
                same = cJSON_IsString(v) && !strcmp(v->valuestring, cur);
            }
        }
        if (same) continue;
        if (FIELDS[i].layout && cJSON_IsNumber(v)) {
            if (layout && llen < ln)
                llen += (size_t)snprintf(layout + llen, ln - llen, "%s%s %s -> %s", nlayout ? ", " : "", FIELDS[i].key, saved, cur);
            nlayout++;
            continue;
        }
        if (len < n) len += (size_t)snprintf(diff + len, n - len, "%s%s %s -> %s", count ? ", " : "", FIELDS[i].key, saved, cur);
        count++;
    }
    cJSON_Delete(o);
    return count;
}

int train_config_check(const char *ckpt_dir, const TrainConfig *tc, int allow_change, char *err, size_t n,
                       char *layout, size_t ln) {
    char path[4200];
    snprintf(path, sizeof path, "%s/%s", ckpt_dir, TRAIN_CONFIG_FILE);
    size_t size;
    const char *rerr = NULL;
    char *txt = sllm_read_file(path, &size, &rerr);
    if (!txt) {
        if (layout && ln) layout[0] = 0;
        if (allow_change) { snprintf(err, n, "%s missing (%s): configuration not checked", path, rerr); return 1; }
        snprintf(err, n, "resume: %s missing (%s), so the run configuration cannot be checked; pass %s to resume anyway",
                 path, rerr, TRAIN_CONFIG_ALLOW_FLAG);
        return -1;
    }
    char diff[2048];
    int k = train_config_diff(txt, tc, diff, sizeof diff, layout, ln);
    free(txt);
    if (k < 0) { snprintf(err, n, "resume: %s: %s", path, diff); return -1; }
    if (k == 0) return 0;
    if (allow_change) { snprintf(err, n, "%s", diff); return 1; }
    snprintf(err, n, "resume: the run configuration differs from the checkpoint's (%s): %s; pass %s to resume with the "
             "new values (the run is then no longer the same as one without the interruption)", path, diff,
             TRAIN_CONFIG_ALLOW_FLAG);
    return -1;
}
