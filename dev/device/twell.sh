#!/usr/bin/env bash
# TwELL on the GPU machine (target < 4 minutes, build included). Logs to $OUT/twell.log.
#   0. build the twell targets; ptxas resource report of the gate, pack and up/down kernels;
#   1. GPU tests (test/gpu/test_twell.cu: both gates bit for bit vs the CPU packer, the FFN on every path vs
#      float64, overflow rows, the decode path);
#   2. bench M=65536, nnz 8 16 29 64 128, uniform + heavy: gate GEMM / dense / sparse (default path) / auto / the
#      other gate, interleaved rounds, medians;
#   3. bench M=16384 and 131072 at nnz 29, uniform, with the L2 gather probe;
#   4. bench_decode: the decode path at 1-64 rows over 8 layers from HBM (dense, graphs, tile, auto, fit).
# TWELL_BENCH_ARGS adds options to every bench_ffn call (e.g. "--no-cublas").
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/twell.log"
{
  [ -d .deps ] || bash scripts/deps_unpack.sh
  nvidia-smi -L
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  echo "== build"; t0=$(date +%s)
  printf '#include "twell/ffn.cuh"\nint main(){return 0;}\n' > /tmp/tw_ptxas.cu
  ( nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -Icore --expt-relaxed-constexpr -Xptxas -v \
      -c /tmp/tw_ptxas.cu -o /tmp/tw_ptxas.o > /tmp/tw_ptxas.log 2>&1 ) &
  rm -f build/gpu_test_twell build/bench_ffn build/bench_decode
  make -j"$(nproc)" build/test_twell_format build/gpu_test_twell build/bench_ffn build/bench_decode 2>&1 | grep -E "error|warning" | head -30
  wait
  grep -A2 "Compiling entry function '_Z[0-9]*twell_" /tmp/tw_ptxas.log | grep -E "Compiling|registers|spill" \
    | sed -e 's/ptxas info    : //' -e "s/Compiling entry function '_Z[0-9]*\([a-z_]*\).*/\1:/"
  echo "build $(( $(date +%s) - t0 )) s"
  echo "== CPU format test"; ./build/test_twell_format 2>&1 | tail -2
  echo "== GPU tests"; t0=$(date +%s); timeout 150 ./build/gpu_test_twell 2>&1; echo "gpu_test_twell rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench M=65536, nnz 8 16 29 64 128, both patterns"; t0=$(date +%s)
  timeout 150 ./build/bench_ffn --M 65536 --nnz 8,16,29,64,128 --reps 10 $TWELL_BENCH_ARGS 2>&1
  echo "bench M=65536 rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench M=16384,131072, nnz 29, uniform, gather probe"; t0=$(date +%s)
  timeout 90 ./build/bench_ffn --M 16384,131072 --nnz 29 --pattern uniform --reps 10 --gather $TWELL_BENCH_ARGS 2>&1
  echo "bench other M rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench_decode, M 1-64, nnz 8 29 64 256 50%"; t0=$(date +%s)
  timeout 120 ./build/bench_decode --nnz 8,29,64,256,50% 2>&1
  echo "bench_decode rc=$? ($(( $(date +%s) - t0 )) s)"
} > "$LOG" 2>&1
grep -E "PASSED|FAILED|SKIPPED|rc=|FAIL|HANG|error|registers|spill|warning|crossover|calibrated|fitted|gather|^[0-9]+ +(uniform|heavy)|^M |^[0-9]+ +[0-9]|note" "$LOG" | grep -v "^error: twell" | tail -80
