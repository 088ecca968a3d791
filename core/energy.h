// core/energy.h: GPU energy over a timed region, from NVML (loaded at run time with dlopen, so nothing links against
// it and the build needs no NVML header; without a driver the meter just reports why it is off).
//
// Source, in this order:
//   1. the GPU's total-energy counter (nvmlDeviceGetTotalEnergyConsumption, millijoules since the driver loaded;
//      Volta and newer): the energy of a region is the difference of two reads;
//   2. if the counter is not supported: a background thread samples nvmlDeviceGetPowerUsage (milliwatts) every
//      sample_ms and integrates it with the trapezoid rule (the paper's method: 50 ms polling); a read between two
//      samples adds the last sample's power times the time since it.
// energy_describe says which one is in use; every report should print it. SLLM_ENERGY=samples forces the sampler
// (to compare the two on one GPU), SLLM_ENERGY=off turns the meter off; SLLM_NVML_LIB names another library file.
//
// Usage:  char why[256]; EnergyMeter *em = energy_open(pci_bus_id, 20, why, sizeof why);   // NULL: why says why
//         double j0, j1; energy_read(em, &j0); ...work, synchronised...; energy_read(em, &j1);  // joules: j1 - j0
//         energy_close(em);
// The region must end with a device synchronisation: the meter sees what the GPU did, not what was queued.
#ifndef SLLM_ENERGY_H
#define SLLM_ENERGY_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ENERGY_COUNTER = 1, ENERGY_POWER_SAMPLES = 2 } EnergySource;

typedef struct EnergyMeter EnergyMeter;

// Power source of the sampling thread: watts now; returns 0 on success, non-zero on a failed read (the sample is
// skipped and counted). Tests pass their own; energy_open passes NVML's.
typedef int (*EnergyPowerFn)(void *ctx, double *watts);

// The meter of the GPU with this PCI bus id (as cudaDeviceGetPCIBusId writes it; NULL: NVML device 0). sample_ms: the
// sampling period if the fallback is used (<= 0: 20 ms). Returns NULL, with the reason in why, when there is no NVML,
// no such device, or neither the counter nor the power reading works.
EnergyMeter *energy_open(const char *pci_bus_id, int sample_ms, char *why, size_t why_len);
// A sampling meter on any power source (tests; or a caller's own). sample_ms <= 0: 20 ms. NULL if the first read
// fails or the thread cannot start.
EnergyMeter *energy_open_source(EnergyPowerFn fn, void *ctx, int sample_ms, const char *name);
void energy_close(EnergyMeter *em);

EnergySource energy_source(const EnergyMeter *em);
// e.g. "NVML total-energy counter (NVIDIA H100 80GB HBM3)" or "NVML power samples every 20 ms, trapezoid rule (...)".
const char *energy_describe(const EnergyMeter *em);
// Joules since the meter opened. Returns 0, or -1 when the read failed (the reason in energy_last_error).
int energy_read(EnergyMeter *em, double *joules);
const char *energy_last_error(const EnergyMeter *em);
// Sampling meters: samples taken and failed reads so far (0, 0 for the counter).
void energy_sample_counts(const EnergyMeter *em, long *samples, long *failures);

// Trapezoid integral of power samples w [W] at times t [s] (n >= 2, t ascending): joules. 0 for n < 2.
double energy_trapezoid(const double *t, const double *w, int n);

#ifdef __cplusplus
}
#endif
#endif  // SLLM_ENERGY_H
