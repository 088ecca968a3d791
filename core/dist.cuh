// core/dist.cuh: one process per GPU; the NCCL communicator, its stream, small collectives and the watchdog.
//
// Start-up (dist_init):
//   launched by mpirun (OMPI_COMM_WORLD_SIZE / PMI_SIZE set) and MPI compiled in: MPI_Init_thread, rank and world
//     from MPI_COMM_WORLD, local rank from OMPI_COMM_WORLD_LOCAL_RANK (else an MPI shared-memory split), and rank 0's
//     ncclUniqueId by MPI_Bcast. Without MPI compiled in, rank/world/local rank still come from OMPI_COMM_WORLD_*
//     and the id from --dist-init.
//   otherwise: rank / world / local rank from the options, else RANK / WORLD_SIZE / LOCAL_RANK (local rank
//     default: rank mod visible GPUs); the id through core/rendezvous.h: DistOptions.init (--dist-init), else
//     $SLLM_DIST_INIT (scripts/run_dist.sh), else "env" = tcp://$MASTER_ADDR:$MASTER_PORT when MASTER_ADDR is set.
//   world 1: no NCCL, no MPI, no thread: every collective below is a no-op (the data already is the sum).
// The communicator is created NON-BLOCKING (ncclConfig_t.blocking = 0): every NCCL call may return
// ncclInProgress and is then polled to completion with a deadline, and a hung collective can be ncclCommAbort-ed
// from the watchdog. NCCL_NVLS_ENABLE is set to 0 unless already set (NVLink multicast stays off; this code never
// calls cuMulticastCreate).
//
// Streams: every collective runs on ONE communication stream (d->comm_stream), in the order the host issues it
// (NCCL needs the same order on every rank). dist_comm_wait(d, s) makes the comm stream wait for work already
// queued on stream s (an event); dist_comm_join(d, s) makes s wait for the comm stream. So gradient buckets can
// be reduced while the compute stream runs the rest of the backward (core/zero1.cuh).
//
// Faults: each collective is followed by an event on the comm stream and entered in a table with a deadline
// (--dist-timeout, default 120 s, or the call's own). A watchdog thread (every 50 ms) retires completed events,
// and ends the process when the oldest one is past its deadline (a peer died, hangs, or issued another
// collective) or when ncclCommGetAsyncError reports an error: it prints "error: rank R of W (host, GPU g): ...",
// ncclCommAbort-s the communicator (so NCCL kernels stop spinning), MPI_Abort-s under mpirun (the launcher ends
// the other ranks), and _exit(1). SIGALRM (default action: terminate) bounds the abort itself to 15 s.
// Every error of this file goes through dist_die and names the rank.
#ifndef SLLM_DIST_CUH
#define SLLM_DIST_CUH

#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cuda_common.cuh"
#include "rendezvous.h"

// NCCL: present when the Makefile found it (USE_NCCL) or the header is on the include path; NO_NCCL turns it off.
#if !defined(NO_NCCL) && (defined(USE_NCCL) || __has_include(<nccl.h>))
#define SLLM_HAVE_NCCL 1
#include <nccl.h>
#endif
// MPI: only the Makefile's MPI block puts mpi.h on the include path (and links -lmpi); NO_MPI turns it off.
#if defined(SLLM_HAVE_NCCL) && !defined(NO_MPI) && (defined(USE_MPI) || __has_include(<mpi.h>))
#define SLLM_HAVE_MPI 1
#define OMPI_SKIP_MPICXX 1  // the C API only (the C++ bindings pull in <iostream>)
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#define DIST_DEFAULT_TIMEOUT_S 120.0
#define DIST_MAX_PENDING 512     // collectives in flight tracked by the watchdog
#define DIST_SCRATCH_BYTES 8192  // device scratch of the small collectives (scalars, strings)
#define DIST_ABORT_GRACE_S 15

typedef struct {
    int rank, world, local_rank;  // < 0 (world <= 0): from the launcher's environment (see above)
    const char *init;             // --dist-init; NULL: $SLLM_DIST_INIT, else mpi under mpirun, else "env" when
                                  // MASTER_ADDR is set
    double timeout_s;             // --dist-timeout; <= 0: DIST_DEFAULT_TIMEOUT_S
    int max_ctas;                 // --dist-max-ctas: NCCL's CTAs (SMs) per collective, 0: NCCL's default. The
                                  // gradient reduction runs beside the backward: fewer CTAs take fewer SMs from it
} DistOptions;

typedef struct {
    cudaEvent_t ev;
    double issued, deadline;
    unsigned long long seq;
    char what[48];
} DistPending;

typedef struct {
    int rank, world, local_rank, device;
    int use_mpi;        // MPI initialised by dist_init
    double timeout_s;   // default per-collective deadline
    int max_ctas;       // NCCL CTAs per collective (0: NCCL's default)
    char host[64];
    char method[32];    // "single", "mpi", "file", "tcp"
#ifdef SLLM_HAVE_NCCL
    ncclComm_t comm;
#endif
    cudaStream_t comm_stream;
    cudaEvent_t ev_wait, ev_join;
    void *scratch;      // DIST_SCRATCH_BYTES of device memory
    // watchdog
    pthread_t watchdog;
    int watchdog_on;
    volatile int stop;
    pthread_mutex_t mu;
    DistPending pend[DIST_MAX_PENDING];
    cudaEvent_t pool[DIST_MAX_PENDING];
    int head, count;
    unsigned long long seq;  // collectives issued
} Dist;

// ---- errors ---------------------------------------------------------------------------------------------
static volatile int g_dist_dying = 0;

// Ends this rank: message naming the rank, abort of the communicator (bounded by SIGALRM), MPI_Abort under mpirun,
// _exit(1). Safe from the watchdog thread; a second caller waits for the first.
static void dist_die(Dist *d, const char *fmt, ...) __attribute__((noreturn, format(printf, 2, 3)));
static void dist_die(Dist *d, const char *fmt, ...) {
    if (__sync_lock_test_and_set(&g_dist_dying, 1)) for (;;) pause();
    fflush(stdout);
    va_list ap;
    va_start(ap, fmt);
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (d) fprintf(stderr, "error: rank %d of %d (host %s, GPU %d): %s\n", d->rank, d->world, d->host, d->device, msg);
    else fprintf(stderr, "error: %s\n", msg);
    fflush(stderr);
    signal(SIGALRM, SIG_DFL);
    alarm(DIST_ABORT_GRACE_S);
#ifdef SLLM_HAVE_NCCL
    if (d && d->comm) ncclCommAbort(d->comm);
#endif
#ifdef SLLM_HAVE_MPI
    if (d && d->use_mpi) MPI_Abort(MPI_COMM_WORLD, 1);
#endif
    _exit(1);
}
#define DIST_CHECK(d, cond, ...) do { if (!(cond)) dist_die((d), __VA_ARGS__); } while (0)
static inline void dist_cuda_check(Dist *d, cudaError_t e, const char *what) {
    if (e != cudaSuccess) dist_die(d, "CUDA call %s failed: %s (%s)", what, cudaGetErrorString(e), cudaGetErrorName(e));
}
#define distCuda(d, call) dist_cuda_check((d), (call), #call)

// Rank 0 only (everyone else is quiet); stdout, flushed.
static void dist_log0(const Dist *d, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void dist_log0(const Dist *d, const char *fmt, ...) {
    if (d && d->rank != 0) return;
    va_list ap;
    va_start(ap, fmt);
    vprintf(fmt, ap);
    va_end(ap);
    fflush(stdout);
}

// ---- NCCL calls on a non-blocking communicator ------------------------------------------------------------
#ifdef SLLM_HAVE_NCCL
// Polls the communicator until an in-progress call settles (or the deadline passes); returns the final state.
static ncclResult_t dist_nccl_settle(Dist *d, ncclResult_t r, double timeout_s, const char *what) {
    const double t0 = sllm_time_s();
    while (r == ncclInProgress) {
        if (sllm_time_s() - t0 > timeout_s) dist_die(d, "%s did not finish within %.0f s", what, timeout_s);
        usleep(200);
        if (ncclCommGetAsyncError(d->comm, &r) != ncclSuccess) break;
    }
    return r;
}
static void dist_nccl_check_at(Dist *d, ncclResult_t r, const char *what, const char *file, int line) {
    r = dist_nccl_settle(d, r, d->timeout_s, what);
    if (r != ncclSuccess)
        dist_die(d, "NCCL %s failed: %s (%s) at %s:%d", what, ncclGetErrorString(r),
                 d->comm ? ncclGetLastError(d->comm) : "", file, line);
}
#define distNccl(d, call) dist_nccl_check_at((d), (call), #call, __FILE__, __LINE__)
#endif

// ---- watchdog -----------------------------------------------------------------------------------------------
// Retire completed collectives from the front of the table (caller holds d->mu). Returns the oldest pending
// entry or NULL.
static DistPending *dist_retire_locked(Dist *d) {
    while (d->count > 0) {
        DistPending *p = &d->pend[d->head];
        cudaError_t e = cudaEventQuery(p->ev);
        if (e == cudaErrorNotReady) return p;
        if (e != cudaSuccess) {
            pthread_mutex_unlock(&d->mu);
            dist_die(d, "CUDA error while collective '%s' #%llu ran: %s", p->what, p->seq, cudaGetErrorString(e));
        }
        d->head = (d->head + 1) % DIST_MAX_PENDING;
        d->count--;
    }
    return NULL;
}

// Enters the collective just enqueued on the comm stream into the watchdog's table (deadline now + timeout_s).
static void dist_track(Dist *d, const char *what, double timeout_s) {
    d->seq++;
    for (;;) {
        pthread_mutex_lock(&d->mu);
        dist_retire_locked(d);
        if (d->count < DIST_MAX_PENDING) break;
        pthread_mutex_unlock(&d->mu);
        usleep(100);  // table full: the GPU is far behind; the watchdog still times out the oldest one
    }
    int slot = (d->head + d->count) % DIST_MAX_PENDING;
    DistPending *p = &d->pend[slot];
    p->ev = d->pool[slot];
    p->issued = sllm_time_s();
    p->deadline = p->issued + (timeout_s > 0 ? timeout_s : d->timeout_s);
    p->seq = d->seq;
    snprintf(p->what, sizeof p->what, "%s", what);
    distCuda(d, cudaEventRecord(p->ev, d->comm_stream));
    d->count++;
    pthread_mutex_unlock(&d->mu);
}

static void *dist_watchdog_main(void *arg) {
    Dist *d = (Dist *)arg;
    cudaSetDevice(d->device);
    while (!d->stop) {
        usleep(50000);
        pthread_mutex_lock(&d->mu);
        DistPending *p = dist_retire_locked(d);
        if (p && sllm_time_s() > p->deadline) {
            char what[48];
            unsigned long long seq = p->seq;
            snprintf(what, sizeof what, "%s", p->what);
            pthread_mutex_unlock(&d->mu);
            dist_die(d, "collective '%s' (#%llu) did not complete within its deadline (--dist-timeout %.0f s): a peer "
                        "rank died, hangs, or called another collective; aborting the communicator", what, seq,
                     d->timeout_s);
        }
        pthread_mutex_unlock(&d->mu);
#ifdef SLLM_HAVE_NCCL
        ncclResult_t ae = ncclSuccess;
        if (d->comm && ncclCommGetAsyncError(d->comm, &ae) == ncclSuccess && ae != ncclSuccess && ae != ncclInProgress)
            dist_die(d, "NCCL asynchronous error: %s (%s)", ncclGetErrorString(ae), ncclGetLastError(d->comm));
#endif
    }
    return NULL;
}

// A failed CUDA call anywhere in a multi-rank process (cudaCheck) ends it through dist_die: the message names the
// rank and the oldest collective still in flight. A peer that dies while a collective runs can take with it the
// memory NCCL mapped from it into this process, and the NCCL kernel here then faults (cudaErrorIllegalAddress)
// before the deadline: the message says so, rather than leaving a bare CUDA error.
static Dist *g_dist_for_cuda_errors = NULL;
static void dist_cuda_error_handler(const char *msg) {
    Dist *d = g_dist_for_cuda_errors;
    char pend[160] = "no collective in flight";
    if (d && pthread_mutex_trylock(&d->mu) == 0) {  // the watchdog may hold it; then without this detail
        if (d->count > 0) {
            const DistPending *p = &d->pend[d->head];
            snprintf(pend, sizeof pend, "collective '%s' (#%llu) in flight for %.1f s", p->what, p->seq,
                     sllm_time_s() - p->issued);
        }
        pthread_mutex_unlock(&d->mu);
    }
    dist_die(d, "%s\n  %s; in a multi-GPU run a CUDA fault during a collective usually means a peer rank died "
                "(see the other ranks' first error); ending every rank", msg, pend);
}

// ---- stream ordering ------------------------------------------------------------------------------------------
// The comm stream waits for everything queued so far on `s`.
static inline void dist_comm_wait(Dist *d, cudaStream_t s) {
    distCuda(d, cudaEventRecord(d->ev_wait, s));
    distCuda(d, cudaStreamWaitEvent(d->comm_stream, d->ev_wait, 0));
}
// `s` waits for everything queued so far on the comm stream.
static inline void dist_comm_join(Dist *d, cudaStream_t s) {
    distCuda(d, cudaEventRecord(d->ev_join, d->comm_stream));
    distCuda(d, cudaStreamWaitEvent(s, d->ev_join, 0));
}
// While one thread ends the process (dist_die), no other may carry on or exit with status 0: a host wait that
// returns because the watchdog aborted the communicator parks here until the dying thread's _exit(1).
static inline void dist_park_if_dying(void) {
    if (g_dist_dying) for (;;) pause();
}
// Host waits for the comm stream (the watchdog ends the process if a collective hangs).
static inline void dist_comm_sync(Dist *d) {
    cudaError_t e = cudaStreamSynchronize(d->comm_stream);
    dist_park_if_dying();
    distCuda(d, e);
}

// ---- start-up and shutdown ----------------------------------------------------------------------------------
static inline int dist_launched_by_mpirun(void) {
    return getenv("OMPI_COMM_WORLD_SIZE") || getenv("PMI_SIZE") || getenv("PMIX_RANK");
}

static void dist_env_or(Dist *d, const char *name, int *v) {
    char err[256];
    int r = dist_env_int(name, v, err, sizeof err);
    if (r < 0) dist_die(d, "%s", err);
}

static void dist_init(Dist *d, const DistOptions *o) {
    memset(d, 0, sizeof *d);
    d->rank = 0; d->world = 1; d->local_rank = -1; d->device = -1;
    d->timeout_s = o && o->timeout_s > 0 ? o->timeout_s : DIST_DEFAULT_TIMEOUT_S;
    if (gethostname(d->host, sizeof d->host - 1) != 0) snprintf(d->host, sizeof d->host, "?");
    const char *init = o && o->init ? o->init : getenv("SLLM_DIST_INIT");  // scripts/run_dist.sh sets it
    if (init && !*init) init = NULL;
    const int mpirun = dist_launched_by_mpirun();
    char err[512];
    DistInitSpec spec;
    memset(&spec, 0, sizeof spec);
    int want_mpi = mpirun && (!init || strcmp(init, "mpi") == 0);
    if (init && dist_parse_init(init, &spec, err, sizeof err) != 0) dist_die(NULL, "%s", err);
    if (init && spec.kind == DIST_INIT_MPI && !mpirun) dist_die(NULL, "--dist-init mpi: not launched by mpirun");

    if (want_mpi) {
#ifdef SLLM_HAVE_MPI
        int provided = 0;
        if (MPI_Init_thread(NULL, NULL, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
            dist_die(NULL, "MPI_Init_thread failed");
        d->use_mpi = 1;
        MPI_Comm_rank(MPI_COMM_WORLD, &d->rank);
        MPI_Comm_size(MPI_COMM_WORLD, &d->world);
        int lr = -1;
        dist_env_or(d, "OMPI_COMM_WORLD_LOCAL_RANK", &lr);
        if (lr < 0) {
            MPI_Comm node;
            MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, d->rank, MPI_INFO_NULL, &node);
            MPI_Comm_rank(node, &lr);
            MPI_Comm_free(&node);
        }
        d->local_rank = lr;
        snprintf(d->method, sizeof d->method, "mpi");
#else
        dist_die(NULL, "launched by mpirun, but this binary was built without MPI: rebuild with MPI (the Makefile "
                       "finds OpenMPI), or pass --dist-init file:///shared/path or tcp://host:port (rank and world "
                       "are then read from OMPI_COMM_WORLD_RANK / _SIZE)");
#endif
    } else {
        int r = -1, w = -1, lr = -1;
        if (mpirun) {  // no MPI library, but the launcher's variables are there (OpenMPI, or MPICH's hydra: PMI_*)
            dist_env_or(d, "PMI_RANK", &r);
            dist_env_or(d, "PMI_SIZE", &w);
            dist_env_or(d, "MPI_LOCALRANKID", &lr);
            dist_env_or(d, "OMPI_COMM_WORLD_RANK", &r);
            dist_env_or(d, "OMPI_COMM_WORLD_SIZE", &w);
            dist_env_or(d, "OMPI_COMM_WORLD_LOCAL_RANK", &lr);
        }
        dist_env_or(d, "RANK", &r);
        dist_env_or(d, "WORLD_SIZE", &w);
        dist_env_or(d, "LOCAL_RANK", &lr);
        if (o && o->rank >= 0) r = o->rank;
        if (o && o->world > 0) w = o->world;
        if (o && o->local_rank >= 0) lr = o->local_rank;
        d->world = w > 0 ? w : 1;
        d->rank = r >= 0 ? r : 0;
        d->local_rank = lr;
        if (d->rank >= d->world)
            dist_die(d, "rank %d is outside the world of %d ranks (--rank / RANK, --world / WORLD_SIZE)", d->rank,
                     d->world);
        if (d->world > 1 && !init) {
            if (getenv("MASTER_ADDR")) {
                if (dist_parse_init("env", &spec, err, sizeof err) != 0) dist_die(d, "%s", err);
            } else
                dist_die(d, "world size %d needs a rendezvous: --dist-init file:///shared/path or tcp://host:port "
                            "(or MASTER_ADDR/MASTER_PORT, or launch with mpirun)", d->world);
        }
        snprintf(d->method, sizeof d->method, "%s",
                 d->world == 1 ? "single" : spec.kind == DIST_INIT_FILE ? "file" : "tcp");
    }

    int ndev = 0;
    cudaError_t ce = cudaGetDeviceCount(&ndev);
    if (ce != cudaSuccess || ndev < 1) dist_die(d, "no CUDA device visible (%s)", cudaGetErrorString(ce));
    if (d->local_rank < 0) d->local_rank = d->world > 1 ? d->rank % ndev : 0;
    if (d->local_rank >= ndev)
        dist_die(d, "local rank %d needs GPU %d, but only %d GPU(s) are visible (more ranks per node than GPUs?)",
                 d->local_rank, d->local_rank, ndev);
    d->device = d->local_rank;
    distCuda(d, cudaSetDevice(d->device));
    distCuda(d, cudaStreamCreateWithFlags(&d->comm_stream, cudaStreamNonBlocking));
    distCuda(d, cudaEventCreateWithFlags(&d->ev_wait, cudaEventDisableTiming));
    distCuda(d, cudaEventCreateWithFlags(&d->ev_join, cudaEventDisableTiming));
    distCuda(d, cudaMalloc(&d->scratch, DIST_SCRATCH_BYTES));
    pthread_mutex_init(&d->mu, NULL);
    if (d->world == 1) return;

#ifndef SLLM_HAVE_NCCL
    dist_die(d, "world size %d needs NCCL, and this binary was built without it (install NCCL; the Makefile finds "
                "it in the CUDA toolkit or under NCCL_HOME)", d->world);
#else
    setenv("NCCL_NVLS_ENABLE", "0", 0);  // NVLink multicast off unless the user set it explicitly
    for (int i = 0; i < DIST_MAX_PENDING; i++)
        distCuda(d, cudaEventCreateWithFlags(&d->pool[i], cudaEventDisableTiming));
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (d->rank == 0) distNccl(d, ncclGetUniqueId(&id));
    int rc = 0;
    if (d->use_mpi) {
#ifdef SLLM_HAVE_MPI
        if (MPI_Bcast(&id, sizeof id, MPI_BYTE, 0, MPI_COMM_WORLD) != MPI_SUCCESS) dist_die(d, "MPI_Bcast of the NCCL id failed");
#endif
    } else if (spec.kind == DIST_INIT_FILE) {
        rc = d->rank == 0 ? rdv_file_publish(spec.path, d->world, &id, sizeof id, err, sizeof err)
                          : rdv_file_fetch(spec.path, d->world, &id, sizeof id, d->timeout_s, err, sizeof err);
    } else if (spec.kind == DIST_INIT_TCP) {
        rc = d->rank == 0 ? rdv_tcp_publish(spec.port, d->world, &id, sizeof id, d->timeout_s, err, sizeof err)
                          : rdv_tcp_fetch(spec.host, spec.port, d->rank, d->world, &id, sizeof id, d->timeout_s, err,
                                          sizeof err);
    } else
        dist_die(d, "--dist-init %s cannot start %d ranks", init ? init : "(none)", d->world);
    if (rc != 0) dist_die(d, "rendezvous failed: %s", err);

    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;  // non-blocking: every call can be polled and aborted
    if (o->max_ctas > 0) {
        cfg.minCTAs = 1;
        cfg.maxCTAs = o->max_ctas;
    }
    d->max_ctas = o->max_ctas;
    ncclResult_t r = ncclCommInitRankConfig(&d->comm, d->world, id, d->rank, &cfg);
    if (r == ncclInProgress) {
        const double t0 = sllm_time_s();
        do {
            if (sllm_time_s() - t0 > d->timeout_s)
                dist_die(d, "NCCL communicator init did not finish within %.0f s (a rank did not start, or %s)",
                         d->timeout_s, spec.kind == DIST_INIT_FILE ? "a stale rendezvous file from another job" :
                                                                     "the network between the ranks is blocked");
            usleep(1000);
            if (ncclCommGetAsyncError(d->comm, &r) != ncclSuccess) break;
        } while (r == ncclInProgress);
    }
    if (r != ncclSuccess)
        dist_die(d, "NCCL communicator init failed: %s (%s)", ncclGetErrorString(r),
                 d->comm ? ncclGetLastError(d->comm) : "");
    // exit() from any thread (e.g. main returning after a host wait that the abort released) waits for dist_die
    atexit(dist_park_if_dying);
    g_dist_for_cuda_errors = d;
    g_cuda_error_handler = dist_cuda_error_handler;
    if (pthread_create(&d->watchdog, NULL, dist_watchdog_main, d) != 0) dist_die(d, "cannot start the watchdog thread");
    d->watchdog_on = 1;
    // Everyone has read the id: the rendezvous file is no longer needed (a leftover would only mislead a later job).
    {
        distNccl(d, ncclAllReduce(d->scratch, d->scratch, 1, ncclInt, ncclSum, d->comm, d->comm_stream));
        dist_track(d, "init barrier", 0);
        dist_comm_sync(d);
        if (d->rank == 0 && spec.kind == DIST_INIT_FILE) unlink(spec.path);
    }
    int ver = 0;
    ncclGetVersion(&ver);
    char ctas[48] = "NCCL's default CTAs";
    if (d->max_ctas > 0) snprintf(ctas, sizeof ctas, "at most %d CTAs per collective", d->max_ctas);
    dist_log0(d, "dist: %d ranks (%s rendezvous), NCCL %d.%d.%d, non-blocking communicator, collective deadline %.0f s, "
                 "%s\n", d->world, d->method, ver / 10000, (ver / 100) % 100, ver % 100, d->timeout_s, ctas);
#endif
}

static void dist_finalize(Dist *d) {
    if (d->watchdog_on) {
        dist_comm_sync(d);
        d->stop = 1;
        pthread_join(d->watchdog, NULL);
        d->watchdog_on = 0;
    }
#ifdef SLLM_HAVE_NCCL
    if (d->comm) {
        ncclResult_t r = ncclCommFinalize(d->comm);
        r = dist_nccl_settle(d, r, d->timeout_s, "ncclCommFinalize");
        if (r != ncclSuccess) dist_die(d, "ncclCommFinalize failed: %s", ncclGetErrorString(r));
        ncclCommDestroy(d->comm);
        d->comm = NULL;
    }
    for (int i = 0; i < DIST_MAX_PENDING; i++)
        if (d->pool[i]) cudaEventDestroy(d->pool[i]);
#endif
#ifdef SLLM_HAVE_MPI
    if (d->use_mpi) MPI_Finalize();
#endif
    if (d->scratch) cudaFree(d->scratch);
    if (d->comm_stream) cudaStreamDestroy(d->comm_stream);
    if (d->ev_wait) cudaEventDestroy(d->ev_wait);
    if (d->ev_join) cudaEventDestroy(d->ev_join);
    pthread_mutex_destroy(&d->mu);
    memset(d, 0, sizeof *d);
}

// ---- collectives ---------------------------------------------------------------------------------------------
// In-place sums over all ranks of small or large device arrays, ordered after the work queued on `s` and before
// the work queued on `s` afterwards. No-ops for world 1.
#ifdef SLLM_HAVE_NCCL
static void dist_allreduce_sum(Dist *d, void *buf, size_t n, ncclDataType_t t, cudaStream_t s, const char *what) {
    if (d->world == 1 || n == 0) return;
    dist_comm_wait(d, s);
    distNccl(d, ncclAllReduce(buf, buf, n, t, ncclSum, d->comm, d->comm_stream));
    dist_track(d, what, 0);
    dist_comm_join(d, s);
}
#endif
static inline void dist_allreduce_sum_f32(Dist *d, float *dev, size_t n, cudaStream_t s) {
#ifdef SLLM_HAVE_NCCL
    dist_allreduce_sum(d, dev, n, ncclFloat, s, "allreduce f32");
#endif
}
static inline void dist_allreduce_sum_u64(Dist *d, unsigned long long *dev, size_t n, cudaStream_t s) {
#ifdef SLLM_HAVE_NCCL
    dist_allreduce_sum(d, dev, n, ncclUint64, s, "allreduce u64");
#endif
}

// Element-wise maximum over all ranks of a byte array (e.g. "did this unit fire on any rank"), as above.
static inline void dist_allreduce_max_u8(Dist *d, uint8_t *dev, size_t n, cudaStream_t s) {
#ifdef SLLM_HAVE_NCCL
    if (d->world == 1 || n == 0) return;
    dist_comm_wait(d, s);
    distNccl(d, ncclAllReduce(dev, dev, n, ncclUint8, ncclMax, d->comm, d->comm_stream));
    dist_track(d, "allreduce max u8", 0);
    dist_comm_join(d, s);
#endif
}

// Every rank waits for every other (host-side return). timeout_s <= 0: the default deadline; pass a long one
// where a rank may legitimately be busy for a while (e.g. rank 0 writing a checkpoint).
static void dist_barrier(Dist *d, double timeout_s) {
    if (d->world == 1) return;
#ifdef SLLM_HAVE_NCCL
    distNccl(d, ncclAllReduce(d->scratch, d->scratch, 1, ncclInt, ncclSum, d->comm, d->comm_stream));
    dist_track(d, "barrier", timeout_s);
    dist_comm_sync(d);
#endif
}

// 1 when `ok` is non-zero on every rank (a collective: every rank must call it). E.g. "did every rank write its
// checkpoint shard". timeout_s as in dist_barrier.
static int dist_all_ok(Dist *d, int ok, double timeout_s) {
    if (d->world == 1) return ok != 0;
#ifdef SLLM_HAVE_NCCL
    int bad = ok ? 0 : 1;
    distCuda(d, cudaMemcpyAsync(d->scratch, &bad, sizeof bad, cudaMemcpyHostToDevice, d->comm_stream));
    distNccl(d, ncclAllReduce(d->scratch, d->scratch, 1, ncclInt, ncclSum, d->comm, d->comm_stream));
    dist_track(d, "all_ok", timeout_s);
    distCuda(d, cudaMemcpyAsync(&bad, d->scratch, sizeof bad, cudaMemcpyDeviceToHost, d->comm_stream));
    dist_comm_sync(d);
    return bad == 0;
#else
    return ok != 0;
#endif
}

// Rank root's n host bytes to every rank (in place), e.g. a checkpoint's temp directory name or a resume decision.
static void dist_broadcast_bytes(Dist *d, void *host, size_t n, int root, double timeout_s) {
    if (d->world == 1) return;
#ifdef SLLM_HAVE_NCCL
    for (size_t off = 0; off < n; off += DIST_SCRATCH_BYTES) {
        size_t c = n - off < DIST_SCRATCH_BYTES ? n - off : DIST_SCRATCH_BYTES;
        if (d->rank == root)
            distCuda(d, cudaMemcpyAsync(d->scratch, (char *)host + off, c, cudaMemcpyHostToDevice, d->comm_stream));
        distNccl(d, ncclBroadcast(d->scratch, d->scratch, c, ncclChar, root, d->comm, d->comm_stream));
        dist_track(d, "broadcast", timeout_s);
        distCuda(d, cudaMemcpyAsync((char *)host + off, d->scratch, c, cudaMemcpyDeviceToHost, d->comm_stream));
        dist_comm_sync(d);
    }
#endif
}

#endif  // SLLM_DIST_CUH
