#!/usr/bin/env bash
# A/B of the wgmma attention kernels' issue order (SLLM_AWG_OV=0|1, core/attention_wgmma.cuh) in one call:
#   bash dev/device/wg_ov.sh        (carry deps-debs)
# gpu_test_attention under each setting, bench_attention under each, the 0.5B and 1.5B training step under each.
# Log: $OUT/wg_ov.log.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/wg_ov.log") 2>&1
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
[ -d .deps ] || bash scripts/deps_unpack.sh > /dev/null
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
make -j"$(nproc)" build/train_gpt_relu build/gpu_test_attention build/bench_attention > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
el; echo built
for ov in 0 1; do
  SLLM_AWG_OV=$ov timeout 120 ./build/gpu_test_attention > "$OUT/test_ov$ov.txt" 2>&1
  echo "$(el) gpu_test_attention SLLM_AWG_OV=$ov rc=$?: $(grep -E "PASSED|FAILED|fallbacks" "$OUT/test_ov$ov.txt" | tr '\n' ' ')"
done
for ov in 0 1 0 1; do
  SLLM_AWG_OV=$ov timeout 60 ./build/bench_attention 30 > /tmp/bench_ov$ov.txt 2>&1
  echo "$(el) bench SLLM_AWG_OV=$ov:"; grep -E "^(v2|wg|wgbwd) " /tmp/bench_ov$ov.txt
done
for p in 0.5B 1.5B; do
  for ov in 0 1; do
    SLLM_AWG_OV=$ov timeout 150 ./build/train_gpt_relu --preset $p --batch 4 --seq 2048 --bench 12 > "/tmp/ov_train_${p}_$ov.txt" 2>&1
    echo "$(el) train $p SLLM_AWG_OV=$ov rc=$?: $(grep -E "^bench:.*tokens/ms" "/tmp/ov_train_${p}_$ov.txt" | tail -1)"
    grep -E "attn (fwd|bwd): attention kernel" "/tmp/ov_train_${p}_$ov.txt"
  done
done
