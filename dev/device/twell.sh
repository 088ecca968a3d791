#!/usr/bin/env bash
# TwELL on the GPU machine: build the twell targets, run the GPU tests, then the FFN benchmark:
#   1. M=65536, every nnz, both patterns, default options (dense / sparse / auto, crossover, fitted model);
#   2. M=65536, nnz 8 29 64, both patterns, --variants: gate variants x chunk rows, chunked GEMM alone,
#      every up/down variant, interleaved weights / L2 window, side by side;
#   3. M=16384 and 131072, uniform nnz 8 29 64 128 (reps 5).
# Logs to $OUT/twell.log. Runtime target: < 3 minutes on an H100 / H200.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/twell.log"
{
  [ -d .deps ] || bash scripts/deps_unpack.sh
  nvidia-smi -L
  echo "== build"
  make -j"$(nproc)" build/test_twell_format build/gpu_test_twell build/bench_ffn 2>&1 | grep -E "error|warning" | head -30
  echo "== CPU format test"; ./build/test_twell_format 2>&1 | tail -3
  echo "== GPU tests"; t0=$(date +%s); timeout 300 ./build/gpu_test_twell 2>&1; echo "gpu_test_twell rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench M=65536, all nnz, both patterns"; t0=$(date +%s)
  timeout 200 ./build/bench_ffn --M 65536 2>&1; echo "bench M=65536 rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench M=65536, nnz 8 29 64, all variants and options"; t0=$(date +%s)
  timeout 200 ./build/bench_ffn --M 65536 --nnz 8,29,64 --variants 2>&1; echo "bench variants rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench M=16384,131072, uniform nnz 8 29 64 128"; t0=$(date +%s)
  timeout 90 ./build/bench_ffn --M 16384,131072 --nnz 8,29,64,128 --pattern uniform --reps 5 2>&1
  echo "bench other M rc=$? ($(( $(date +%s) - t0 )) s)"
} > "$LOG" 2>&1
grep -E "PASSED|FAILED|SKIPPED|rc=|FAILURE|crossover|calibrated|fitted|^[0-9]+ +(uniform|heavy)|^    (gate|gemm|updown|options)" "$LOG" | tail -80
