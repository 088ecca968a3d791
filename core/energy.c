// core/energy.c: see energy.h.
#include "energy.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

// ---- the few NVML entry points used (the ABI of nvml.h; no header needed) ----
typedef int nvmlReturn_t;  // NVML_SUCCESS = 0, NVML_ERROR_NOT_SUPPORTED = 3
typedef struct nvmlDevice_st *nvmlDevice_t;
typedef struct {
    void *lib;
    nvmlReturn_t (*init)(void);
    nvmlReturn_t (*shutdown)(void);
    nvmlReturn_t (*by_bus)(const char *, nvmlDevice_t *);
    nvmlReturn_t (*by_index)(unsigned, nvmlDevice_t *);
    nvmlReturn_t (*energy)(nvmlDevice_t, unsigned long long *);
    nvmlReturn_t (*power)(nvmlDevice_t, unsigned *);
    nvmlReturn_t (*name)(nvmlDevice_t, char *, unsigned);
    const char *(*error_string)(nvmlReturn_t);
    nvmlDevice_t dev;
} Nvml;

struct EnergyMeter {
    EnergySource source;
    char desc[256];
    char err[256];
    Nvml nvml;                 // lib == NULL for energy_open_source meters
    unsigned long long mj0;    // counter at open
    // sampling
    EnergyPowerFn fn;
    void *ctx;
    int sample_ms;
    pthread_t thread;
    int running;
    pthread_mutex_t mu;
    double joules, last_t, last_w;
    long samples, failures;
    int stop;
};

static double mono_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

double energy_trapezoid(const double *t, const double *w, int n) {
    double j = 0;
    for (int i = 1; i < n; i++) j += 0.5 * (w[i] + w[i - 1]) * (t[i] - t[i - 1]);
    return j;
}

static const char *nv_err(const Nvml *nv, nvmlReturn_t r) {
    static char buf[32];
    if (nv->error_string) return nv->error_string(r);
    snprintf(buf, sizeof buf, "NVML error %d", r);
    return buf;
}

static int nvml_power(void *ctx, double *watts) {
    Nvml *nv = (Nvml *)ctx;
    unsigned mw = 0;
    if (nv->power(nv->dev, &mw) != 0) return -1;
    *watts = mw * 1e-3;
    return 0;
}

static void *sampler_main(void *arg) {
    EnergyMeter *em = (EnergyMeter *)arg;
    struct timespec ts = {em->sample_ms / 1000, (long)(em->sample_ms % 1000) * 1000000L};
    for (;;) {
        nanosleep(&ts, NULL);
        double w = 0;
        const int bad = em->fn(em->ctx, &w);
        const double t = mono_s();
        pthread_mutex_lock(&em->mu);
        if (bad) em->failures++;
        else {
            em->joules += 0.5 * (w + em->last_w) * (t - em->last_t);
            em->last_t = t;
            em->last_w = w;
            em->samples++;
        }
        const int stop = em->stop;
        pthread_mutex_unlock(&em->mu);
        if (stop) break;
    }
    return NULL;
}

// Starts the sampling thread on em->fn (first sample taken here, so a read right after open is valid).
static int start_sampler(EnergyMeter *em, int sample_ms) {
    em->sample_ms = sample_ms > 0 ? sample_ms : 20;
    double w = 0;
    if (em->fn(em->ctx, &w) != 0) {
        snprintf(em->err, sizeof em->err, "the first power reading failed");
        return -1;
    }
    em->last_t = mono_s();
    em->last_w = w;
    em->samples = 1;
    pthread_mutex_init(&em->mu, NULL);
    if (pthread_create(&em->thread, NULL, sampler_main, em) != 0) {
        snprintf(em->err, sizeof em->err, "cannot start the power sampling thread");
        pthread_mutex_destroy(&em->mu);
        return -1;
    }
    em->running = 1;
    em->source = ENERGY_POWER_SAMPLES;
    return 0;
}

EnergyMeter *energy_open_source(EnergyPowerFn fn, void *ctx, int sample_ms, const char *name) {
    EnergyMeter *em = (EnergyMeter *)calloc(1, sizeof *em);
    if (!em) return NULL;
    em->fn = fn;
    em->ctx = ctx;
    if (start_sampler(em, sample_ms) != 0) { free(em); return NULL; }
    snprintf(em->desc, sizeof em->desc, "power samples every %d ms, trapezoid rule (%s)", em->sample_ms,
             name ? name : "caller's source");
    return em;
}

#define WHY(...) do { if (why && why_len) snprintf(why, why_len, __VA_ARGS__); } while (0)

EnergyMeter *energy_open(const char *pci_bus_id, int sample_ms, char *why, size_t why_len) {
    const char *mode = getenv("SLLM_ENERGY");
    if (mode && !strcmp(mode, "off")) { WHY("SLLM_ENERGY=off"); return NULL; }
    const int force_samples = mode && !strcmp(mode, "samples");
    if (mode && *mode && !force_samples && strcmp(mode, "auto")) {
        WHY("SLLM_ENERGY must be auto, samples or off (got \"%s\")", mode);
        return NULL;
    }
    const char *path = getenv("SLLM_NVML_LIB");
    if (!path || !*path) path = "libnvidia-ml.so.1";
    Nvml nv;
    memset(&nv, 0, sizeof nv);
    nv.lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!nv.lib) { WHY("cannot load NVML (%s): %s; it comes with the NVIDIA driver", path, dlerror()); return NULL; }
#define SYM(field, name) *(void **)&nv.field = dlsym(nv.lib, name)
    SYM(init, "nvmlInit_v2");
    SYM(shutdown, "nvmlShutdown");
    SYM(by_bus, "nvmlDeviceGetHandleByPciBusId_v2");
    SYM(by_index, "nvmlDeviceGetHandleByIndex_v2");
    SYM(energy, "nvmlDeviceGetTotalEnergyConsumption");
    SYM(power, "nvmlDeviceGetPowerUsage");
    SYM(name, "nvmlDeviceGetName");
    SYM(error_string, "nvmlErrorString");
#undef SYM
    if (!nv.init || !nv.shutdown || !nv.by_bus || !nv.by_index || !nv.power) {
        WHY("%s lacks the NVML functions needed (nvmlInit_v2, nvmlDeviceGetPowerUsage, ...)", path);
        dlclose(nv.lib);
        return NULL;
    }
    nvmlReturn_t r = nv.init();
    if (r != 0) { WHY("nvmlInit failed: %s", nv_err(&nv, r)); dlclose(nv.lib); return NULL; }
    r = pci_bus_id ? nv.by_bus(pci_bus_id, &nv.dev) : nv.by_index(0, &nv.dev);
    if (r != 0) {
        WHY("NVML has no device %s: %s", pci_bus_id ? pci_bus_id : "0", nv_err(&nv, r));
        nv.shutdown(); dlclose(nv.lib);
        return NULL;
    }
    char gpu[96] = "GPU";
    if (nv.name) nv.name(nv.dev, gpu, sizeof gpu);
    EnergyMeter *em = (EnergyMeter *)calloc(1, sizeof *em);
    if (!em) { WHY("out of host memory"); nv.shutdown(); dlclose(nv.lib); return NULL; }
    em->nvml = nv;
    unsigned long long mj = 0;
    nvmlReturn_t re = nv.energy ? nv.energy(nv.dev, &mj) : 3;
    if (!force_samples && re == 0) {
        em->source = ENERGY_COUNTER;
        em->mj0 = mj;
        snprintf(em->desc, sizeof em->desc, "NVML total-energy counter (%s)", gpu);
        return em;
    }
    em->fn = nvml_power;
    em->ctx = &em->nvml;
    if (start_sampler(em, sample_ms) != 0) {
        WHY("NVML: the energy counter %s and the power reading failed on %s",
            force_samples ? "is off (SLLM_ENERGY=samples)" : nv_err(&nv, re), gpu);
        nv.shutdown(); dlclose(nv.lib); free(em);
        return NULL;
    }
    snprintf(em->desc, sizeof em->desc, "NVML power samples every %d ms, trapezoid rule (%s; energy counter %s)",
             em->sample_ms, gpu, force_samples ? "not used: SLLM_ENERGY=samples" : nv_err(&nv, re));
    return em;
}

void energy_close(EnergyMeter *em) {
    if (!em) return;
    if (em->running) {
        pthread_mutex_lock(&em->mu);
        em->stop = 1;
        pthread_mutex_unlock(&em->mu);
        pthread_join(em->thread, NULL);
        pthread_mutex_destroy(&em->mu);
    }
    if (em->nvml.lib) {
        em->nvml.shutdown();
        dlclose(em->nvml.lib);
    }
    free(em);
}

EnergySource energy_source(const EnergyMeter *em) { return em->source; }
const char *energy_describe(const EnergyMeter *em) { return em->desc; }
const char *energy_last_error(const EnergyMeter *em) { return em->err; }

int energy_read(EnergyMeter *em, double *joules) {
    if (em->source == ENERGY_COUNTER) {
        unsigned long long mj = 0;
        nvmlReturn_t r = em->nvml.energy(em->nvml.dev, &mj);
        if (r != 0) {
            snprintf(em->err, sizeof em->err, "nvmlDeviceGetTotalEnergyConsumption: %s", nv_err(&em->nvml, r));
            return -1;
        }
        *joules = (double)(mj - em->mj0) * 1e-3;
        return 0;
    }
    pthread_mutex_lock(&em->mu);
    *joules = em->joules + em->last_w * (mono_s() - em->last_t);
    pthread_mutex_unlock(&em->mu);
    return 0;
}

void energy_sample_counts(const EnergyMeter *em, long *samples, long *failures) {
    if (em->source == ENERGY_COUNTER) { *samples = 0; *failures = 0; return; }
    pthread_mutex_lock((pthread_mutex_t *)&em->mu);
    *samples = em->samples;
    *failures = em->failures;
    pthread_mutex_unlock((pthread_mutex_t *)&em->mu);
}
