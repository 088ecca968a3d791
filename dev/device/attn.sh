#!/usr/bin/env bash
# GPU run for core/attention.cuh (helper ATTN): build + correctness test (every variant vs a float64 CPU reference,
# bitwise determinism of the default backward) + benchmark of the old (v1: 64-row forward, atomic dq) and new
# (v2: 128-row forward, deterministic dq kernel; the default) kernels side by side at the paper's shapes, the wgmma
# forward (wg), and PyTorch's scaled_dot_product_attention (cuDNN, flash) right after in the same call.
# Log: $OUT/attn.log. Expected runtime < 90 s (build ~40 s, test ~25 s, bench ~20 s).
# If a new variant fails: SLLM_ATTN_FWD=v1 / SLLM_ATTN_BWD=atomic select the previous kernels; SLLM_ATTN=simple
# the reference kernels.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/attn.log"
[ -d .deps ] || bash scripts/deps_unpack.sh > /dev/null 2>&1
{
  echo "== attn: $(date -u) $(nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm --format=csv,noheader 2>/dev/null)"
  t0=$(date +%s)
  make -j"$(nproc)" build/gpu_test_attention build/bench_attention 2>&1 | grep -v '^nvcc\|^gcc\|^ar\|^mkdir' | tail -20
  echo "== build $(( $(date +%s) - t0 )) s; kernel resources (fwd<HD,MT>, bwd<HD,atomic dq>, bwd_dq<HD,MT>):"
  cuobjdump --dump-resource-usage build/bench_attention 2>&1 | grep -A1 'attn_' | grep -v '^--' | cut -c1-160
  echo
  echo "== test"
  timeout 60 ./build/gpu_test_attention; echo "test rc=$?"
  echo "== bench (v1 = 64-row forward + atomic dq, v2 = default)"
  timeout 40 ./build/bench_attention 30; echo "bench rc=$?"
  echo "== PyTorch scaled_dot_product_attention, cuDNN and flash backends (dev/bench/sdpa_bench.py), same shapes"
  if python3 -c "import torch" 2>/dev/null; then timeout 120 python3 dev/bench/sdpa_bench.py --reps 30; echo "sdpa rc=$?"
  else echo "no torch: skipped"; fi
  echo "== attn total $(( $(date +%s) - t0 )) s"
} 2>&1 | tee "$LOG"
