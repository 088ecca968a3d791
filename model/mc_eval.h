// model/mc_eval.h: multiple-choice evaluation (the format of HellaSwag, ARC, PIQA and the like), pure C, no CUDA.
// Each choice is scored by the log-likelihood of its tokens as the continuation of the context, summed (acc) and
// divided by the choice's length in characters (acc_norm), as lm-evaluation-harness does. The log-likelihood comes
// from a callback, so one core serves the float64 CPU reference (mc_loglik_ref below), the inference engine
// (model/mc_eval_gpu.cuh) and the trainer's model.
//
// Data: JSONL, one item per line (blank lines are skipped; other keys are ignored):
//     {"context": "The cat sat on the", "choices": [" mat", " moon"], "label": 0}
//   accepted names (exactly one of each group per line; two of a group, or a key given twice, is an error):
//     context  "context" | "ctx" | "query" | "question" | "goal"          a string (may be empty)
//     choices  "choices" | "endings"                                      an array of >= 2 non-empty strings, or
//              "choices": {"text": [...], "label": [...]}                 ARC's layout (labels: strings, one per text)
//              "sol1", "sol2", ...                                        PIQA's layout (consecutive, >= 2)
//     label    "label" | "gold" | "answer" | "answerKey"                  an integer index, a string of digits
//              ("3", HellaSwag's export), or a string equal to one of the ARC choice labels ("B")
//   Strings must be valid UTF-8. No task template is applied: the context is used as written (export the exact
//   text a harness would score, e.g. "Question: ...\nAnswer:").
//   Errors name the file and line ("data.jsonl:12: label 4 out of range for 4 choices") and stop the load.
//
// Continuation (mc_tokenize), lm-evaluation-harness' rules:
//   cont = delim + choice, delim = " " when the context is not empty, does not end with whitespace and the choice
//          does not start with whitespace (the harness's target_delimiter); else delim = "";
//   whitespace at the end of the context moves to the front of cont;
//   whole = encode(ctx + cont), ctx_ids = encode(ctx), cont_ids = whole[len(ctx_ids):];
//   tokens = [bos] + ctx_ids + cont_ids (bos: the end-of-text token, as before every training document; none with
//   bos < 0, which needs a non-empty context), start = len(tokens) - len(cont_ids) >= 1.
//   The model reads tokens[0 .. n-2]; when n - 1 > max_len, context tokens are dropped from the left (the harness's
//   truncation); a continuation that does not fit alone is an error.
// Scores: ll = sum_{i=start}^{n-1} log p(tokens[i] | tokens[0 .. i-1]); ll_norm = ll / n_chars(choice) (Unicode code
//   points of the choice as written, without the delimiter: Python's len()); pred = the first argmax of ll,
//   pred_norm of ll_norm; acc = mean(pred == label), acc_norm = mean(pred_norm == label).
#ifndef SLLM_MC_EVAL_H
#define SLLM_MC_EVAL_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "dataloader/tokenizer.h"
#include "model/ref_model.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    char *text;          // the choice as written in the file (UTF-8)
    int n_chars;         // Unicode code points of text (acc_norm's divisor)
    int32_t *tokens;     // [n_tokens] after mc_tokenize: [bos] + context ids + continuation ids
    int n_tokens, start; // continuation = tokens[start .. n_tokens), start >= 1
    int n_dropped;       // context tokens dropped on the left to fit max_len
    double ll, ll_norm;  // after mc_score
} McChoice;

typedef struct {
    int line;            // 1-based line of the file
    char *context;
    McChoice *choices;   // [n_choices]
    int n_choices, label;
    int pred, pred_norm; // after mc_score (-1: not scored, e.g. another shard's item)
} McItem;

typedef struct {
    char *name;          // the file name (error messages, output)
    McItem *items;       // [n_items]
    int n_items;
    long long n_choices; // over all items
    int tokenized;
} McSet;

// One item from one JSON text (a line, without the newline). 0, or -1 with the reason in err (no file or line in it).
int mc_parse_item(const char *json, size_t len, McItem *it, char *err, size_t errn);
void mc_item_free(McItem *it);
// A whole JSONL text (name: for messages); every line is validated before this returns. 0, or -1 with
// "name:line: reason" in err (nothing is kept). An input without items is an error.
int mc_parse_text(const char *text, size_t len, const char *name, McSet *s, char *err, size_t errn);
// mc_parse_text on a file's contents; a file that cannot be read is an error naming it.
int mc_load(const char *path, McSet *s, char *err, size_t errn);
void mc_free(McSet *s);

// Token ids of every choice (rules above). bos < 0: no beginning token. max_len: the longest input the model takes
// (its context); 0: no limit. 0, or -1 with "name:line: choice k: reason" in err.
int mc_tokenize(McSet *s, const Tokenizer *tok, int bos, int max_len, char *err, size_t errn);

// The summed log-likelihood of tokens[start .. n) given the tokens before each (n >= 2, 1 <= start < n); NaN (or
// any non-finite value) reports a failure. Called concurrently from `threads` threads when threads > 1.
typedef double (*McLoglikFn)(void *ctx, const int32_t *tokens, int n, int start);

typedef struct {
    int threads;            // callers of fn at once (>= 1; 1 for a GPU callback)
    int shard, n_shards;    // score the items i with i % n_shards == shard (n_shards <= 1: all)
    FILE *progress;         // NULL, or where a line goes every ~10% of the choices
} McScoreOpts;

typedef struct {
    int n_items, correct, correct_norm;   // over the items scored
    double acc, acc_norm;                 // correct / n_items (0 when none)
    long long n_choices, n_tokens;        // choices scored, continuation tokens scored
    int n_truncated;                      // choices whose context was cut to fit max_len
    double seconds;
} McResult;

// Scores the (tokenized) set: fills ll, ll_norm of every choice and pred, pred_norm of every item it scores.
// 0, or -1 with "name:line: choice k: ..." in err when fn returns a non-finite value.
int mc_score(McSet *s, McLoglikFn fn, void *ctx, const McScoreOpts *opts, McResult *r, char *err, size_t errn);

// Per-item details of the scored items: path ending in ".csv": one row per choice (item, line, choice, label, pred,
// pred_norm, n_tokens, start, n_chars, ll, ll_norm); otherwise JSONL, one object per item:
//   {"item": i, "line": L, "label": y, "pred": p, "pred_norm": q, "choices": [{"text": ..., "n_chars": c,
//    "tokens": [...], "start": s, "ll": x, "ll_norm": z}, ...]}        (doubles with 17 significant digits)
int mc_write_results(const McSet *s, const char *path, char *err, size_t errn);

// ---- log-likelihood helpers ---------------------------------------------------------------------------

// sum_r log_softmax(logits[r, :])[targets[r]] in double, logits [rows, V] (float or double). NaN when a logit is
// not finite or a target is outside [0, V).
double mc_logprob_rows_f32(const float *logits, int V, const int32_t *targets, int rows);
double mc_logprob_rows_f64(const double *logits, int V, const int32_t *targets, int rows);

// The float64 CPU reference as an McLoglikFn: ctx is a const RefModel *; one ref_forward_backward over
// tokens[0 .. n-2] (n - 1 <= max_seq), the rows start-1 .. n-2 of its logits. Thread-safe.
double mc_loglik_ref(void *ctx, const int32_t *tokens, int n, int start);

// Unicode code points of a UTF-8 string, or -1 when it is not valid UTF-8 (overlong forms, surrogates and code
// points above U+10FFFF are invalid).
int mc_utf8_chars(const char *s, size_t len);

#ifdef __cplusplus
}
#endif
#endif  // SLLM_MC_EVAL_H
