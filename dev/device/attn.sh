#!/usr/bin/env bash
# GPU run for core/attention.cuh (helper ATTN): build + correctness test (both paths vs a float64 CPU reference)
# + benchmark at the paper's shapes. Log: $OUT/attn.log. Expected runtime < 2 min.
# If the fast path fails, the trainer can run with SLLM_ATTN=simple.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/attn.log"
[ -d .deps ] || bash scripts/deps_unpack.sh > /dev/null 2>&1
{
  echo "== attn: $(date -u) $(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null)"
  t0=$(date +%s)
  make -j"$(nproc)" build/gpu_test_attention build/bench_attention 2>&1 | grep -v '^nvcc\|^gcc\|^ar\|^mkdir' | tail -20
  echo "== build $(( $(date +%s) - t0 )) s; kernel resources:"
  cuobjdump --dump-resource-usage build/bench_attention 2>&1 | grep -A1 'attn_' | grep -v '^--' | cut -c1-160
  echo
  echo "== test"
  timeout 150 ./build/gpu_test_attention; echo "test rc=$?"
  echo "== bench"
  timeout 90 ./build/bench_attention 30; echo "bench rc=$?"
  echo "== attn total $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$LOG"
