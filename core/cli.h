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
// cli_parse_list() parses a comma-separated list option ("--M 16384,65536", "--nnz 8,29,50%") as strictly.
// A bad command line exits 2 (the usual code of a usage error) with a message naming the option.
#ifndef SLLM_CLI_H
#define SLLM_CLI_H

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
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
    fprintf(f, "usage: %s [options]\n%s\noptions:\n  %-28s %s\n", prog, intro ? intro : "", "-h, --help",
            "print this help and exit");
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

// A usage error found after parsing (a value the table cannot check alone, e.g. one option against another):
// "error: <message>", the hint to -h, exit 2, as for the errors the parser finds.
__attribute__((format(printf, 2, 3), noreturn)) static inline void cli_fail(const char *prog, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fprintf(stderr, "error: ");
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\n  (run %s -h for the list of options)\n", prog);
    exit(2);
}

static inline void cli_die(const CliOpt *opts, const char *prog, const char *fmt, const char *a, const char *b) {
    fprintf(stderr, "error: ");
    fprintf(stderr, fmt, a, b);
    fprintf(stderr, "\n  (run %s -h for the list of options)\n", prog);
    (void)opts;
    exit(2);
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
// when pos is NULL, are an error. -h/--help prints the help and exits 0. Any error exits 2 with a message.
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

// Parses a comma-separated list of numbers s ("16384,65536", "8,29,50%") into out[0..n) and returns n, or -1 with
// the reason in msg, naming the bad element. Each element is parsed as one option value (cli_parse_number): the
// whole element, an integer when `integer` ("1e3", "8x", "0.5" are not), finite, within [min, max] when min < max.
// No empty element ("", "8,,29", "8,"), at most cap elements. With pct non-NULL an element may also be a
// percentage "P%" with 0 <= P <= 100: out[i] = P / 100 and pct[i] = 1 (pct[i] = 0 for a plain number); with pct
// NULL a "%" is an error like any other stray character.
static inline int cli_parse_list(const char *s, int integer, double min, double max, double *out, int *pct, int cap,
                                 char *msg, size_t msgn) {
    int n = 0;
    const char *p = s;
    for (;;) {
        const char *comma = strchr(p, ',');
        const size_t len = comma ? (size_t)(comma - p) : strlen(p);
        char el[64], why[160];  // why: cli_parse_number's message about a 63-character element
        if (len == 0) { snprintf(msg, msgn, "element %d of \"%s\" is empty", n + 1, s); return -1; }
        if (len >= sizeof el) { snprintf(msg, msgn, "element %d of \"%s\" is too long", n + 1, s); return -1; }
        if (n >= cap) { snprintf(msg, msgn, "\"%s\" has more than %d elements", s, cap); return -1; }
        memcpy(el, p, len);
        el[len] = 0;
        const int is_pct = pct && el[len - 1] == '%';
        int iv = 0;
        float fv = 0;
        CliOpt o = {"", 0, CLI_FLOAT, &fv, "", min, max, 0};
        if (is_pct) {
            el[len - 1] = 0;
            o.min = 0, o.max = 100;
        } else if (integer) {
            o.type = CLI_INT, o.dst = &iv;
        }
        if (cli_parse_number(&o, el, why, sizeof why) != 0) {
            snprintf(msg, msgn, "element %d of \"%s\"%s: %s", n + 1, s, is_pct ? " (a percentage)" : "", why);
            return -1;
        }
        out[n] = is_pct ? fv / 100.0 : o.type == CLI_INT ? (double)iv : (double)fv;
        if (pct) pct[n] = is_pct;
        n++;
        if (!comma) return n;
        p = comma + 1;
    }
}

// A positional argument parsed as the number o describes (o->name names it in the message); exits 2 when bad.
static inline void cli_parse_arg(CliOpt *o, const char *val, const char *prog) {
    char msg[256];
    if (cli_parse_number(o, val, msg, sizeof msg) != 0) cli_fail(prog, "%s: %s", o->name, msg);
    o->given = 1;
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
