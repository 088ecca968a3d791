// core/cli.h: a small table-driven command-line parser. The same table drives parsing, validation
// and the -h/--help text, so the help can never drift from the parser (llm.c's weak point).
//
//   CliOpt opts[] = { {"batch", 'b', CLI_INT, &B, "micro-batch size per GPU", 1, 1e6}, ..., {0} };
//   cli_parse(argc, argv, opts, "train_gpt_relu", "usage text");   // exits with a clear error on bad input
// Accepted forms: --name VALUE, --name=VALUE, -x VALUE, and for CLI_FLAG: --name (sets 1).
// Numbers are parsed strictly: the whole string (no trailing garbage: "1e6" or "0.5x" is not an integer),
// finite (no nan / inf), within the type (int, unsigned 64-bit) and within [min, max] when min < max.
// Short letters mean the same option in every binary: cli_letters below is the one list; an option table that
// gives a letter to another long name is a programming error reported on the first run (even with -h).
// cli_parse_pos() also collects positional arguments ("-" is one; "--" ends the options).
#ifndef SLLM_CLI_H
#define SLLM_CLI_H

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
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

// The short letters of all sparsellm.c binaries and the long option each one stands for.
static const struct { char letter; const char *name; } cli_letters[] = {
    {'b', "batch"},     {'c', "wd"},         {'d', "decode"},        {'e', "init-from"}, {'f', "format"},
    {'g', "sample-tokens"}, {'i', "train"},  {'j', "val"},           {'J', "json"},      {'k', "schedule"},
    {'l', "lr"},        {'m', "eval-batches"}, {'n', "tokens"},      {'o', "out"},       {'p', "preset"},
    {'q', "quiet"},     {'r', "recompute"},  {'s', "seed"},          {'t', "tokenizer"}, {'T', "temperature"},
    {'u', "warmup"},    {'v', "val-frac"},   {'x', "steps"},         {'y', "resume"},
};

// NULL when o's letter agrees with cli_letters, else the long name the letter belongs to ("" if none).
static inline const char *cli_letter_conflict(const CliOpt *o) {
    if (!o->letter) return NULL;
    for (size_t i = 0; i < sizeof cli_letters / sizeof cli_letters[0]; i++)
        if (cli_letters[i].letter == o->letter) return strcmp(cli_letters[i].name, o->name) ? cli_letters[i].name : NULL;
    return "";
}

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

// Parses one number for option o from val into its destination; 0 on success, else writes why into msg.
static inline int cli_parse_number(CliOpt *o, const char *val, char *msg, size_t msgn) {
    char *end = NULL;
    errno = 0;
    if (!*val || isspace((unsigned char)val[0])) { snprintf(msg, msgn, "expects a number, got \"%s\"", val); return -1; }
    if (o->type == CLI_FLOAT) {
        double d = strtod(val, &end);
        if (end == val || *end) { snprintf(msg, msgn, "expects a number, got \"%s\"", val); return -1; }
        if (!isfinite(d) || errno == ERANGE || fabs(d) > 3.4e38) { snprintf(msg, msgn, "expects a finite number, got \"%s\"", val); return -1; }
        if (o->min < o->max && (d < o->min || d > o->max)) {
            snprintf(msg, msgn, "%g outside the allowed range [%g, %g]", d, o->min, o->max); return -1;
        }
        *(float *)o->dst = (float)d;
        return 0;
    }
    if (o->type == CLI_U64) {
        if (val[0] == '-' || val[0] == '+') { snprintf(msg, msgn, "expects a non-negative integer, got \"%s\"", val); return -1; }
        unsigned long long u = strtoull(val, &end, 10);
        if (end == val || *end) { snprintf(msg, msgn, "expects an integer, got \"%s\"", val); return -1; }
        if (errno == ERANGE) { snprintf(msg, msgn, "\"%s\" does not fit in 64 bits", val); return -1; }
        if (o->min < o->max && ((double)u < o->min || (double)u > o->max)) {
            snprintf(msg, msgn, "%llu outside the allowed range [%.17g, %.17g]", u, o->min, o->max); return -1;
        }
        *(unsigned long long *)o->dst = u;
        return 0;
    }
    long long v = strtoll(val, &end, 10);
    if (end == val || *end) { snprintf(msg, msgn, "expects an integer, got \"%s\"", val); return -1; }
    if (errno == ERANGE || v < INT_MIN || v > INT_MAX) { snprintf(msg, msgn, "\"%s\" does not fit in an int", val); return -1; }
    if (o->min < o->max && ((double)v < o->min || (double)v > o->max)) {
        snprintf(msg, msgn, "%lld outside the allowed range [%.17g, %.17g]", v, o->min, o->max); return -1;
    }
    *(int *)o->dst = (int)v;
    return 0;
}

// Parses argv into the table; positional arguments go to pos[0..*npos) (pos has room for argc entries) or,
// when pos is NULL, are an error. -h/--help prints the help and exits 0. Any error exits 1 with a message.
static inline void cli_parse_pos(int argc, char **argv, CliOpt *opts, const char *prog, const char *intro,
                                 const char **pos, int *npos) {
    for (CliOpt *p = opts; p->name; p++) {
        const char *other = cli_letter_conflict(p);
        if (other) {
            fprintf(stderr, "internal error: %s gives -%c to --%s, but -%c %s%s in every sparsellm.c binary "
                    "(core/cli.h cli_letters)\n", prog, p->letter, p->name, p->letter, *other ? "means --" : "is not listed",
                    other);
            exit(2);
        }
    }
    if (npos) *npos = 0;
    int only_pos = 0;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (only_pos || !strcmp(a, "-") || a[0] != '-') {
            if (!pos) cli_die(opts, prog, "unexpected argument \"%s\"%s: options start with - or --", a, "");
            pos[(*npos)++] = a;
            continue;
        }
        if (!strcmp(a, "--")) { only_pos = 1; continue; }
        if (!strcmp(a, "-h") || !strcmp(a, "--help")) { cli_print_help(opts, prog, intro, stdout); exit(0); }
        CliOpt *o = NULL;
        const char *val = NULL;
        char name[128];
        if (a[1] == '-') {
            const char *eq = strchr(a + 2, '=');
            size_t len = eq ? (size_t)(eq - (a + 2)) : strlen(a + 2);
            if (len >= sizeof name) cli_die(opts, prog, "option too long: %s%s", a, "");
            memcpy(name, a + 2, len);
            name[len] = 0;
            for (CliOpt *p = opts; p->name; p++) if (!strcmp(p->name, name)) o = p;
            if (eq) val = eq + 1;
        } else if (!a[2]) {
            for (CliOpt *p = opts; p->name; p++) if (p->letter == a[1]) o = p;
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
        if (o->type == CLI_INT || o->type == CLI_U64 || o->type == CLI_FLOAT) {
            char msg[256];
            if (cli_parse_number(o, val, msg, sizeof msg) != 0) cli_die(opts, prog, "option --%s: %s", o->name, msg);
        } else {
            *(const char **)o->dst = val;
        }
        o->given = 1;
    }
}

static inline void cli_parse(int argc, char **argv, CliOpt *opts, const char *prog, const char *intro) {
    cli_parse_pos(argc, argv, opts, prog, intro, NULL, NULL);
}

static inline int cli_given(const CliOpt *opts, const char *name) {
    for (; opts->name; opts++) if (!strcmp(opts->name, name)) return opts->given;
    return 0;
}

#ifdef __cplusplus
}
#endif
#endif  // SLLM_CLI_H
