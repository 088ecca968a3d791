#!/usr/bin/env bash
# TwELL on the GPU machine: build the twell targets, run the GPU tests, then the FFN benchmark
# (--quick at M=65536, then the M=65536 rows of the full sweep with the up/down variants timed).
# Logs to $OUT/twell.log. Runtime target: < 3 minutes on an H100.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/twell.log"
{
  [ -d .deps ] || bash scripts/deps_unpack.sh
  nvidia-smi -L
  echo "== build"
  make -j"$(nproc)" build/test_twell_format build/gpu_test_twell build/bench_ffn 2>&1 | grep -E "error|warning" | head -30
  echo "== CPU format test"; ./build/test_twell_format 2>&1 | tail -3
  echo "== GPU tests"; timeout 300 ./build/gpu_test_twell 2>&1; echo "gpu_test_twell rc=$?"
  echo "== bench --quick"; timeout 200 ./build/bench_ffn --quick 2>&1; echo "bench quick rc=$?"
  echo "== bench M=65536, all nnz, both patterns, up/down variants"
  timeout 300 ./build/bench_ffn --M 65536 --variants 2>&1; echo "bench M=65536 rc=$?"
} > "$LOG" 2>&1
grep -E "PASSED|FAILED|SKIPPED|rc=|FAILURE|crossover|^[0-9]+ +(uniform|heavy)" "$LOG" | tail -60
