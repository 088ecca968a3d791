// core/cli.h: a small table-driven command-line parser. The same table drives parsing, validation
// and the -h/--help text, so the help can never drift from the parser (llm.c's weak point).
//
//   CliOpt opts[] = { {"batch", 'b', CLI_INT, &B, "micro-batch size per GPU", 1, 1e6}, ..., {0} };
//   cli_parse(argc, argv, opts, "train_gpt_relu", "usage text");   // exits with a clear error on bad input
// Accepted forms: --name VALUE, --name=VALUE, -x VALUE, and for CLI_FLAG: --name (sets 1).
// Numbers are checked fully (no trailing garbage) and against [min, max] when min < max.
#ifndef SLLM_CLI_H
#define SLLM_CLI_H

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { CLI_INT = 0, CLI_FLOAT, CLI_STRING, CLI_FLAG, CLI_U64 } CliType;

typedef struct {
    const char *name;   // long name without "--"
    char letter;        // short letter or 0
    CliType type;
    void *dst;          // int*, float*, const char**, int* (flag), unsigned long long*
    const char *help;
    double min, max;    // numeric range when min < max
    int given;          // set by the parser
} CliOpt;

static inline void cli_print_help(const CliOpt *o, const char *prog, const char *intro, FILE *f) {
    fprintf(f, "usage: %s [options]\n%s\noptions:\n", prog, intro ? intro : "");
    for (; o->name; o++) {
        char left[64];
        const char *arg = o->type == CLI_INT ? " N" : o->type == CLI_U64 ? " N" : o->type == CLI_FLOAT ? " X"
                          : o->type == CLI_STRING ? " S" : "";
        if (o->letter) snprintf(left, sizeof left, "-%c, --%s%s", o->letter, o->name, arg);
        else snprintf(left, sizeof left, "    --%s%s", o->name, arg);
        char def[96] = "";
        double cur = o->type == CLI_INT ? *(int *)o->dst : o->type == CLI_FLOAT ? *(float *)o->dst
                     : o->type == CLI_U64 ? (double)*(unsigned long long *)o->dst : 0;
        int unset = (o->type == CLI_INT || o->type == CLI_FLOAT) && o->min < o->max && (cur < o->min || cur > o->max);
        if (unset) snprintf(def, sizeof def, " (default: unset)");
        else switch (o->type) {
            case CLI_INT: snprintf(def, sizeof def, " (default %d)", *(int *)o->dst); break;
            case CLI_U64: snprintf(def, sizeof def, " (default %llu)", *(unsigned long long *)o->dst); break;
            case CLI_FLOAT: snprintf(def, sizeof def, " (default %g)", *(float *)o->dst); break;
            case CLI_STRING:
                if (*(const char **)o->dst) snprintf(def, sizeof def, " (default %s)", *(const char **)o->dst);
                break;
            case CLI_FLAG: break;
        }
        fprintf(f, "  %-28s %s%s\n", left, o->help, def);
    }
}

static inline void cli_die(const CliOpt *opts, const char *prog, const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "error: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n  (run %s -h for the list of options)\n", prog);
    (void)opts;
    exit(1);
}

// Parses argv into the table. -h/--help prints the help and exits 0. Any error exits 1 with a message.
static inline void cli_parse(int argc, char **argv, CliOpt *opts, const char *prog, const char *intro) {
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { cli_print_help(opts, prog, intro, stdout); exit(0); }
        CliOpt *o = NULL;
        const char *val = NULL;
        char name[128];
        if (a[0] == '-' && a[1] == '-') {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
            if (len >= sizeof name) cli_die(opts, prog, "option too long: %s%s", a, "");
            memcpy(name, a + 2, len);
            name[len] = 0;
            for (CliOpt *p = opts; p->name; p++) if (!strcmp(p->name, name)) o = p;
            if (eq) val = eq + 1;
        } else if (a[0] == '-' && a[1] && !a[2]) {
            for (CliOpt *p = opts; p->name; p++) if (p->letter == a[1]) o = p;
        } else {
            cli_die(opts, prog, "unexpected argument \"%s\"%s: options start with - or --", a, "");
        }
        if (!o) cli_die(opts, prog, "unknown option \"%s\"%s", a, "");
        if (o->type == CLI_FLAG) {
            if (val) {
                if (!strcmp(val, "1") || !strcmp(val, "true")) *(int *)o->dst = 1;
                else if (!strcmp(val, "0") || !strcmp(val, "false")) *(int *)o->dst = 0;
                else cli_die(opts, prog, "option %s takes no value or 0/1 (got \"%s\")", a, val);
            } else *(int *)o->dst = 1;
            o->given = 1;
            continue;
        }
        if (!val) {
            if (i + 1 >= argc) cli_die(opts, prog, "option %s needs a value%s", a, "");
            val = argv[++i];
        }
        char *end = NULL;
        errno = 0;
        if (o->type == CLI_INT || o->type == CLI_U64 || o->type == CLI_FLOAT) {
            double d;
            if (o->type == CLI_FLOAT) d = strtod(val, &end);
            else if (o->type == CLI_U64) {
                if (val[0] == '-') cli_die(opts, prog, "option --%s expects a non-negative integer, got \"%s\"", o->name, val);
                d = (double)strtoull(val, &end, 10);
            } else d = (double)strtoll(val, &end, 10);
            if (end == val || *end || errno)
                cli_die(opts, prog, "option --%s expects a number, got \"%s\"", o->name, val);
            if (o->min < o->max && (d < o->min || d > o->max)) {
                char msg[160];
                snprintf(msg, sizeof msg, "%g outside the allowed range [%g, %g]", d, o->min, o->max);
                cli_die(opts, prog, "option --%s: %s", o->name, msg);
            }
            if (o->type == CLI_INT) *(int *)o->dst = (int)strtoll(val, NULL, 10);
            else if (o->type == CLI_U64) *(unsigned long long *)o->dst = strtoull(val, NULL, 10);
            else *(float *)o->dst = (float)d;
        } else {
            *(const char **)o->dst = val;
        }
        o->given = 1;
    }
}

static inline int cli_given(const CliOpt *opts, const char *name) {
    for (; opts->name; opts++) if (!strcmp(opts->name, name)) return opts->given;
    return 0;
}

#ifdef __cplusplus
}
#endif
#endif  // SLLM_CLI_H
