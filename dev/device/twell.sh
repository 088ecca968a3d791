#!/usr/bin/env bash
# TwELL on the GPU machine (target < 2.5 minutes in all, build included):
#   0. build the twell targets; ptxas resource report of the four wgmma gate kernels (registers, spills; no
#      C7507/C7510 line = setmaxnreg honoured and wgmmas not serialized);
#   1. GPU tests: the wgmma gates first, one cmocka test per variant (test_gate_wgmma, _pk, _c2, _c2pk: bit for
#      bit vs the CPU packer on 13 shapes, full grid and a 4-CTA grid; a hang is caught by a device-side
#      mbarrier timeout trap and a host watchdog, both exit non-zero), then the FFN tests (every gate variant);
#   2. bench M=65536, nnz 8 29 64 128, uniform + heavy: dense / sparse / auto timed interleaved (15 rounds,
#      medians), and under each row a "gates" line: every wgmma variant that PASSED its test (gate alone,
#      x cuBLASLt GEMM, sparse FFN through it, TwELL rows differing from the default gate's);
#   3. bench M=16384 and 131072 at nnz 29, uniform.
# A variant whose test did not pass is left out of the benches (a trapping kernel would end them).
# Logs to $OUT/twell.log.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/twell.log"
{
  [ -d .deps ] || bash scripts/deps_unpack.sh
  nvidia-smi -L
  echo "== build"; t0=$(date +%s)
  printf '#include "twell/ffn.cuh"\nint main(){int r=twell_gate_wgmma_launch(0,0,1,64,256,8,0,0,0,0,0);for(int v=3;v<6;v++)r|=twell_gate_wgmma2_launch(v,0,0,1,64,256,8,0,0,0,0,0);return r;}\n' > /tmp/twg_ptxas.cu
  ( nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -Icore --expt-relaxed-constexpr -Xptxas -v \
      -c /tmp/twg_ptxas.cu -o /tmp/twg_ptxas.o > /tmp/twg_ptxas.log 2>&1 ) &
  # the Makefile has no header dependencies: force the twell binaries (twell/*.cuh may have changed alone)
  rm -f build/test_twell_format build/gpu_test_twell build/bench_ffn
  make -j"$(nproc)" build/test_twell_format build/gpu_test_twell build/bench_ffn 2>&1 | grep -E "error|warning" | head -30
  wait
  grep -E "C75[0-9]+" /tmp/twg_ptxas.log
  # kernel name (demangled template args: <CM, PK>), then its registers / spills
  grep -A2 "Function properties for _Z2[34]twell_gate_wgmma" /tmp/twg_ptxas.log | sed 's/ptxas info    : //'
  echo "build $(( $(date +%s) - t0 )) s"
  echo "== CPU format test"; ./build/test_twell_format 2>&1 | tail -3
  echo "== GPU tests"; t0=$(date +%s); timeout 120 ./build/gpu_test_twell 2>&1; echo "gpu_test_twell rc=$? ($(( $(date +%s) - t0 )) s)"
} > "$LOG" 2>&1
GATES=""
for v in "2 test_gate_wgmma" "3 test_gate_wgmma_c2" "4 test_gate_wgmma_pk" "5 test_gate_wgmma_c2pk"; do
  set -- $v
  if grep -qE "OK \] $2\$" "$LOG"; then GATES="${GATES:+$GATES,}$1"; else echo "$2 did not pass: gate variant $1 left out of the benches" >> "$LOG"; fi
done
if [ -n "$GATES" ]; then WG="--gates $GATES"; else WG="--no-wgmma"; fi
{
  echo "== bench M=65536, nnz 8 29 64 128, both patterns (interleaved, 15 rounds), $WG"; t0=$(date +%s)
  timeout 150 ./build/bench_ffn --M 65536 --nnz 8,29,64,128 --reps 15 $WG 2>&1; echo "bench M=65536 rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench M=16384,131072, nnz 29, uniform"; t0=$(date +%s)
  timeout 90 ./build/bench_ffn --M 16384,131072 --nnz 29 --pattern uniform --reps 15 $WG 2>&1
  echo "bench other M rc=$? ($(( $(date +%s) - t0 )) s)"
} >> "$LOG" 2>&1
grep -E "PASSED|FAILED|SKIPPED|rc=|FAILURE|HANG|error|C75|registers|spill|Function prop|left out|no-wgmma|--gates|crossover|calibrated|fitted|^[0-9]+ +(uniform|heavy)|^    gates|^M " "$LOG" | tail -90
