#!/usr/bin/env bash
# TwELL on the GPU machine (target < 2.5 minutes in all, build included):
#   0. build the twell targets; ptxas resource report of the wgmma gate kernel (registers, spills; no
#      C7507/C7510 line = setmaxnreg honoured and wgmmas not serialized);
#   1. GPU tests (test_gate_wgmma runs first: the wgmma gate bit for bit vs the CPU packer on 10 shapes; a
#      hang is caught by a device-side mbarrier timeout trap and a host watchdog, both exit non-zero);
#   2. bench M=65536, nnz 8 16 29 64 128 256 50%, uniform + heavy: dense / sparse / auto timed interleaved
#      (15 rounds, medians), the wgmma gate columns (g.wgmma, sp.wgmma) beside the default gate's;
#   3. bench M=16384 and 131072 at nnz 29, uniform + heavy.
# If test_gate_wgmma did not pass, the benches run with --no-wgmma (a trapping kernel would end them).
# Logs to $OUT/twell.log.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/twell.log"
{
  [ -d .deps ] || bash scripts/deps_unpack.sh
  nvidia-smi -L
  echo "== build"; t0=$(date +%s)
  printf '#include "twell/ffn.cuh"\nint main(){return twell_gate_wgmma_launch(0,0,1,64,256,8,0,0,0,0,0);}\n' > /tmp/twg_ptxas.cu
  ( nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -Icore --expt-relaxed-constexpr -Xptxas -v \
      -c /tmp/twg_ptxas.cu -o /tmp/twg_ptxas.o > /tmp/twg_ptxas.log 2>&1 ) &
  make -j"$(nproc)" build/test_twell_format build/gpu_test_twell build/bench_ffn 2>&1 | grep -E "error|warning" | head -30
  wait
  grep -E "C75[0-9]+" /tmp/twg_ptxas.log
  grep -A2 "Function properties for _Z23twell_gate_wgmma" /tmp/twg_ptxas.log | sed 's/ptxas info    : //'
  echo "build $(( $(date +%s) - t0 )) s"
  echo "== CPU format test"; ./build/test_twell_format 2>&1 | tail -3
  echo "== GPU tests"; t0=$(date +%s); timeout 150 ./build/gpu_test_twell 2>&1; echo "gpu_test_twell rc=$? ($(( $(date +%s) - t0 )) s)"
} > "$LOG" 2>&1
WG=""
grep -q "OK \] test_gate_wgmma" "$LOG" || { WG="--no-wgmma"; echo "test_gate_wgmma did not pass: benches run with --no-wgmma" >> "$LOG"; }
{
  echo "== bench M=65536, all nnz, both patterns (interleaved, 15 rounds)"; t0=$(date +%s)
  timeout 150 ./build/bench_ffn --M 65536 --reps 15 $WG 2>&1; echo "bench M=65536 rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench M=16384,131072, nnz 29, both patterns"; t0=$(date +%s)
  timeout 90 ./build/bench_ffn --M 16384,131072 --nnz 29 --reps 15 $WG 2>&1
  echo "bench other M rc=$? ($(( $(date +%s) - t0 )) s)"
} >> "$LOG" 2>&1
grep -E "PASSED|FAILED|SKIPPED|rc=|FAILURE|HANG|error|C75|registers|spill|no-wgmma|crossover|calibrated|fitted|^[0-9]+ +(uniform|heavy)|^M " "$LOG" | tail -80
