// core/ktrace.cuh: an in-stream timeline of a decoding step's kernels, for dev builds compiled with -DSLLM_KTRACE
// (every macro is empty otherwise). Each traced launch takes a slot on the host (kt_take, in launch order, with its
// name); its kernel records, per warp, the %globaltimer at entry, after pdl_wait and at exit into one of slot's places
// (earliest entry, earliest return from the wait, latest exit; reductions without a return value, so the kernels do
// not wait on them). A captured graph keeps its slots: reset the table (kt_reset_device), replay once, read it
// (kt_read). What it shows: how far each kernel starts ahead of the one before it, how long after that one's end its
// wait returns, and how long it runs after that.
#ifndef SLLM_KTRACE_CUH
#define SLLM_KTRACE_CUH

#ifdef SLLM_KTRACE
#include <string.h>

#define KT_MAX 256
#define KT_SPREAD 64  // each slot is recorded in 64 places (CTA index mod 64), reduced on the host: the atomics of a
                      // kernel's thousands of warps do not queue on one address (that made a traced step 1.5x slower)
typedef struct {
    unsigned long long start, wait, end;  // ns (%globaltimer); start and wait: minimum over warps, end: maximum
} KtSlot;
static __device__ KtSlot kt_slots[KT_MAX * KT_SPREAD];
static int kt_next;                  // host: the next slot of this enqueue
static const char *kt_names[KT_MAX]; // host: the launch of each slot

static inline int kt_take(const char *name) {
    if (kt_next >= KT_MAX) return -1;
    kt_names[kt_next] = name;
    return kt_next++;
}
static inline void kt_reset_device(cudaStream_t s) {
    static KtSlot init[KT_MAX * KT_SPREAD];
    for (int i = 0; i < KT_MAX * KT_SPREAD; i++) { init[i].start = init[i].wait = ~0ull; init[i].end = 0; }
    cudaCheck(cudaMemcpyToSymbolAsync(kt_slots, init, sizeof init, 0, cudaMemcpyHostToDevice, s));
}
// out[KT_MAX]: each slot's places reduced (earliest start and wait, latest end).
static inline void kt_read(KtSlot *out, cudaStream_t s) {
    static KtSlot all[KT_MAX * KT_SPREAD];
    cudaCheck(cudaMemcpyFromSymbolAsync(all, kt_slots, sizeof all, 0, cudaMemcpyDeviceToHost, s));
    cudaCheck(cudaStreamSynchronize(s));
    for (int i = 0; i < KT_MAX; i++) {
        out[i] = all[(size_t)i * KT_SPREAD];
        for (int j = 1; j < KT_SPREAD; j++) {
            const KtSlot *a = &all[(size_t)i * KT_SPREAD + j];
            if (a->start < out[i].start) out[i].start = a->start;
            if (a->wait < out[i].wait) out[i].wait = a->wait;
            if (a->end > out[i].end) out[i].end = a->end;
        }
    }
}

__device__ __forceinline__ unsigned long long kt_now() {
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
    return t;
}
struct KtScope {
    int slot;
    unsigned long long t0, t1;
    __device__ explicit KtScope(int s) : slot(s), t0(kt_now()), t1(0) {}
    __device__ void waited() { t1 = kt_now(); }
    __device__ ~KtScope() {
        if (slot < 0 || (threadIdx.x & 31)) return;
        const unsigned cta = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
        KtSlot *k = &kt_slots[(size_t)slot * KT_SPREAD + cta % KT_SPREAD];
        atomicMin(&k->start, t0);
        if (t1) atomicMin(&k->wait, t1);
        atomicMax(&k->end, kt_now());
    }
};
#define KT_SCOPE(slot) KtScope kt_scope_(slot)
#define KT_WAITED() kt_scope_.waited()
#define KT_PARAM , int kt_slot
#define KT_ARG(x) , (x)
#else
#define KT_SCOPE(slot) ((void)0)
#define KT_WAITED() ((void)0)
#define KT_PARAM
#define KT_ARG(x)
#endif

#endif  // SLLM_KTRACE_CUH
