// core/line_prefix.h: every line a process writes to stdout and stderr from now on starts with a fixed prefix (e.g.
// "SYNTHETIC " for runs on calibrated synthetic sparsity, so that no line of their output can be mistaken for a
// measurement of a trained model). File descriptors 1 and 2 are redirected into pipes; a thread per stream copies
// them to the original descriptors, putting the prefix before each line. Works for printf, fprintf(stderr), puts and
// raw write(1, ...) alike, from any library code.
// At exit (an atexit handler, so SLLM_FATAL's exit(1) included) stdio is flushed, the pipes closed and the threads
// joined, so nothing is lost (a last line without a newline gets one); only a crash (abort, signal) can lose the last unflushed lines.
#ifndef SLLM_LINE_PREFIX_H
#define SLLM_LINE_PREFIX_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// Starts prefixing stdout and stderr with prefix (copied; at most 63 bytes). Returns 0, or -1 with the reason in
// err. Call once, before any output that must carry the prefix (earlier output is flushed first, unprefixed).
int line_prefix_start(const char *prefix, char *err, size_t err_len);
// Flushes stdout / stderr, closes the pipes and waits for the copying threads; afterwards the streams go nowhere.
// Idempotent; registered with atexit by line_prefix_start.
void line_prefix_finish(void);

#ifdef __cplusplus
}
#endif
#endif  // SLLM_LINE_PREFIX_H
