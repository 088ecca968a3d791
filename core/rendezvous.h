// core/rendezvous.h: hand a small blob (the NCCL unique id) from rank 0 to every other rank without MPI.
//
// Init specs (the trainer's --dist-init, or the environment):
//   file:///abs/path  (or file://rel/path)  shared-file rendezvous: rank 0 writes <path>.tmp-<pid>, fsyncs and
//                     renames it to <path> (atomic: a reader never sees half a file); the others poll for <path>.
//                     Use a fresh path per job (scripts/run_dist.sh makes one): a file left by a crashed job with
//                     the same world size would hand out a dead id (the NCCL init then times out with a hint).
//   tcp://host:port   rank 0 listens on port (all interfaces); the others connect to host:port (retrying until
//                     the timeout: rank 0 may start later) and receive the blob. Multi-node without a shared file
//                     system.
//   env               tcp://$MASTER_ADDR:$MASTER_PORT (torchrun's variables).
//   mpi               MPI_Bcast (only when launched by mpirun and MPI is compiled in; handled in core/dist.cuh).
// Wire/file format: RdvHeader {magic "SLRV", version 1, world, blob length}, then the blob. Every reader checks
// the world size, so ranks of different jobs never pair up silently.
// No function here exits: errors return -1 with a message in err (size n); the caller adds its rank.
#ifndef SLLM_RENDEZVOUS_H
#define SLLM_RENDEZVOUS_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { DIST_INIT_NONE = 0, DIST_INIT_FILE, DIST_INIT_TCP, DIST_INIT_MPI } DistInitKind;

typedef struct {
    DistInitKind kind;
    char path[4096];  // DIST_INIT_FILE
    char host[256];   // DIST_INIT_TCP
    int port;         // DIST_INIT_TCP, 1..65535
} DistInitSpec;

#define RDV_BLOB_MAX 1024

// Parse an init spec (see above). "env" reads MASTER_ADDR and MASTER_PORT. Returns 0, or -1 with err.
int dist_parse_init(const char *spec, DistInitSpec *out, char *err, size_t n);

// Integer from the environment: 1 and *out set when `name` holds a whole decimal number, 0 when unset or
// empty, -1 (with err) when set to something else.
int dist_env_int(const char *name, int *out, char *err, size_t n);

// Shared file: rank 0 publishes, every other rank fetches (polling every 20 ms until timeout_s).
int rdv_file_publish(const char *path, int world, const void *blob, size_t len, char *err, size_t n);
int rdv_file_fetch(const char *path, int world, void *blob, size_t len, double timeout_s, char *err, size_t n);

// TCP: rank 0 serves the blob to world-1 peers (each once, by rank) and returns when all have it, or fails at
// timeout_s naming the ranks that never came; a peer connects (retrying while refused) and reads the blob.
int rdv_tcp_publish(int port, int world, const void *blob, size_t len, double timeout_s, char *err, size_t n);
int rdv_tcp_fetch(const char *host, int port, int rank, int world, void *blob, size_t len, double timeout_s,
                  char *err, size_t n);

#ifdef __cplusplus
}
#endif
#endif  // SLLM_RENDEZVOUS_H
