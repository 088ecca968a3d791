// dataloader/loader.h: distributed, shuffled, resumable loader of B x T token batches from .bin shards.
//
// Sequences: inside each shard, windows of T+1 tokens with stride T (sequence j = tokens [j*T, j*T+T]):
// inputs = first T tokens, targets = the last T. A shard of n tokens has (n-1)/T sequences (a shorter tail
// is not used). One epoch = the list of all sequences of all shards matched by the glob, in order
//   shuffle=1: shard order permuted, and sequence order inside each shard permuted (seeded by seed, epoch,
//              shard; the same permutation on every rank), reshuffled at every epoch;
//   shuffle=0: shards in sorted path order, sequences in file order (use for validation).
// The epoch list is cut into global batches of world*B consecutive sequences; rank r takes sequences
// [r*B, r*B+B) of each global batch. So every sequence is used exactly once per epoch across all ranks,
// except the epoch tail of (num_sequences mod world*B) sequences, which is dropped on every rank alike
// (loader_dropped_sequences(); loader_summary() reports it). After the last full global batch the next
// epoch starts automatically.
// Shards are mmap'd once; a batch reads only its B windows.
#ifndef SLLM_LOADER_H
#define SLLM_LOADER_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct DataLoader DataLoader;

// Position for resume: plain data, save it as bytes in a checkpoint.
typedef struct {
    uint32_t magic;          // LOADER_STATE_MAGIC
    uint32_t shuffle;
    uint64_t seed;
    uint64_t num_sequences;  // of the data set when saved (checked on restore)
    uint64_t epoch;          // 0-based
    uint64_t next_seq;       // global index (in the epoch's order) of the next global batch's first sequence
} LoaderState;
#define LOADER_STATE_MAGIC 0x4c445331u  // "LDS1"

// Opens every shard matched by glob_pattern (sorted), validates headers and sizes. Returns NULL with a
// clear message in err when nothing matches, a shard is bad, B/T/rank/world are invalid, or there are fewer
// than world*B sequences in total (not even one global batch).
DataLoader *loader_open(const char *glob_pattern, int B, int T, int rank, int world, uint64_t seed,
                        int shuffle, char *err, size_t errn);
void loader_close(DataLoader *dl);

// Fills inputs[B*T] and targets[B*T] with this rank's next batch; rolls over into the next epoch.
void loader_next(DataLoader *dl, int32_t *inputs, int32_t *targets);
// Back to the start of epoch 0 (e.g. to evaluate the validation split again).
void loader_reset(DataLoader *dl);

void loader_get_state(const DataLoader *dl, LoaderState *st);
// Restores a saved position; -1 with err if it belongs to different data / seed / shuffle mode.
// B and world may differ from when it was saved (the position is in sequences).
int loader_set_state(DataLoader *dl, const LoaderState *st, char *err, size_t errn);

uint64_t loader_num_sequences(const DataLoader *dl);    // all sequences of all shards (one epoch)
uint64_t loader_batches_per_epoch(const DataLoader *dl); // loader_next calls per epoch (per rank)
uint64_t loader_dropped_sequences(const DataLoader *dl); // epoch tail dropped on every rank
uint64_t loader_num_tokens(const DataLoader *dl);        // tokens in all shards
uint64_t loader_epoch(const DataLoader *dl);
int loader_num_shards(const DataLoader *dl);
// Checks every token of every shard is < vocab_size (scans all shards once); -1 with err naming shard
// and index otherwise. The trainer calls it once at start-up with the model's vocab size.
int loader_check_vocab(const DataLoader *dl, int vocab_size, char *err, size_t errn);
// One line: shards, tokens, sequences, batches per epoch, dropped tail. The trainer prints it.
void loader_summary(const DataLoader *dl, char *buf, size_t n);

#ifdef __cplusplus
}
#endif
#endif  // SLLM_LOADER_H
