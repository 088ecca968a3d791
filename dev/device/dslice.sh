#!/usr/bin/env bash
# D-sliced weight-stationary TwELL up/down (twell/updown_dslice.cuh) on the GPU machine:
#   1. build the test and the benchmark (ptxas resource report of the dslice kernels kept in the log);
#   2. GPU tests vs the float64 CPU reference and vs twell/updown.cuh (test/gpu/test_updown_dslice.cu);
#   3. bench_updown: old token-major kernel vs dslice, D 2048 F 5632, M 65536 nnz 8 16 29 64 128 (reps 20),
#      M 16384 and 131072 at nnz 29 (reps 10), and the non-gated variant at M 65536 nnz 29.
# Logs to $OUT/dslice.log. Runtime target: < 90 s (build excluded).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/dslice.log"
{
  [ -d .deps ] || bash scripts/deps_unpack.sh
  nvidia-smi -L
  echo "== build"
  make -j"$(nproc)" build/gpu_test_updown_dslice build/bench_updown 2>&1 | grep -E "error|warning" | head -30
  printf '#include "twell/updown_dslice.cuh"\nint main(){TwellDsliceWS w; twell_dslice_workspace_create(&w,1,64,256,8,0); twell_dslice_updown(&w,0,8,0,0,0,0,1,64,256,0);}\n' > /tmp/dslice_ptxas.cu
  nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -Icore --expt-relaxed-constexpr -Xptxas -v \
       -c /tmp/dslice_ptxas.cu -o /tmp/dslice_ptxas.o 2>&1 | grep -A2 "twell_ds" | grep -E "Compiling|registers|spill" | sed 's/ptxas info    : //'
  echo "== GPU tests"; t0=$(date +%s)
  timeout 120 ./build/gpu_test_updown_dslice 2>&1; echo "gpu_test_updown_dslice rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench M=65536"; t0=$(date +%s)
  timeout 120 ./build/bench_updown --M 65536 --nnz 8,16,29,64,128 --reps 20 2>&1; echo "bench M=65536 rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench M=16384,131072 nnz 29"; t0=$(date +%s)
  timeout 90 ./build/bench_updown --M 16384,131072 --nnz 29 --reps 10 2>&1; echo "bench other M rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench non-gated M=65536 nnz 29"; t0=$(date +%s)
  timeout 60 ./build/bench_updown --M 65536 --nnz 29 --reps 10 --nongated 2>&1; echo "bench nongated rc=$? ($(( $(date +%s) - t0 )) s)"
} > "$LOG" 2>&1
grep -E "PASSED|FAILED|SKIPPED|rc=|FAILURE|MISMATCH|error|layout|^ *[0-9]+ +[0-9]+ " "$LOG" | tail -60
