#!/usr/bin/env bash
# The Hopper wgmma attention forward (core/attention_wgmma.cuh, variant wg) on a GPU, in one call:
#   bash dev/device/wg_check.sh        (carry deps-debs)
# 1. gpu_test_attention (every shape against float64 with each variant, wg included; the KV-cache output) and
#    bench_attention + PyTorch's SDPA (dev/device/attn.sh);
# 2. the same binaries with SLLM_ATTN_FWD=wg against the default (v2): infer's prefill of 8 x 2048 tokens (0.5B and
#    2B, SYNTHETIC 29: the sparse / dense ratio of issue 25) and the dense training step (0.5B, B 4 x 2048).
# Logs: $OUT/wg_check.log, $OUT/attn.log.
source dev/device/preamble.sh wg_check.log
make -j"$(nproc)" build/infer build/train_gpt_relu build/gpu_test_attention build/bench_attention > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
el; echo built
bash dev/device/attn.sh > /dev/null 2>&1
grep -E "PASSED|FAILED|rc=|^wg|^v2 |wgmma forward|^cudnn|^flash" "$OUT/attn.log"
el
for p in 0.5B 2B; do
  for f in v2 wg; do
    SLLM_ATTN_FWD=$f timeout 200 ./build/infer --preset $p --synthetic-nnz 29 --bench --samples 8 --prompt-len 2048 \
      --chunk 2048 --tokens 8 --reps 3 --energy-ms 0 > "/tmp/wg_infer_${p}_$f.txt" 2>&1
    echo "$(el) infer $p SLLM_ATTN_FWD=$f rc=$?: $(grep bench-result "/tmp/wg_infer_${p}_$f.txt" | \
      sed -E 's/.*ffn=([a-z]+).*prefill_ms=([0-9.]+).*/\1 \2/' | tr '\n' ' ')"
  done
done
for f in v2 wg; do
  SLLM_ATTN_FWD=$f timeout 200 ./build/train_gpt_relu --preset 0.5B --batch 4 --seq 2048 --bench 12 \
    > "/tmp/wg_train_$f.txt" 2>&1
  echo "$(el) train 0.5B SLLM_ATTN_FWD=$f rc=$?: $(grep -iE "tokens/ms" "/tmp/wg_train_$f.txt" | tail -1)"
done
