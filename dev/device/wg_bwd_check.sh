#!/usr/bin/env bash
# The Hopper wgmma attention backward (core/attention_wgmma.cuh, SLLM_ATTN_BWD=wg) on a GPU, in one call:
#   bash dev/device/wg_bwd_check.sh        (carry deps-debs, data)
# 1. gpu_test_attention (every shape against float64 with each variant, wg's forward and backward included;
#    bitwise determinism), gpu_test_train with SLLM_ATTN_BWD=wg;
# 2. bench_attention + PyTorch's SDPA (cuDNN, flash) at the same shapes (dev/device/attn.sh);
# 3. the training step (0.5B and 1.5B, B 4 x 2048): the previous kernels (SLLM_ATTN_FWD=v2 SLLM_ATTN_BWD=det), the
#    default, and SLLM_ATTN_BWD=wg;
# 4. 200 steps on the starter data (preset small, same seed): the loss curve of the previous kernels and of wg.
# Logs: $OUT/wg_bwd_check.log, $OUT/attn.log.
source dev/device/preamble.sh wg_bwd_check.log
make -j"$(nproc)" build/train_gpt_relu build/gpu_test_attention build/bench_attention build/gpu_test_train \
  > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
el; echo built
bash dev/device/attn.sh > /dev/null 2>&1
grep -E "PASSED|FAILED|rc=|^wg|^v2 |wgmma|^cudnn|^flash|differs|fallbacks|error" "$OUT/attn.log" | head -40
el
SLLM_ATTN_BWD=wg timeout 150 ./build/gpu_test_train > "$OUT/test_train_wg.txt" 2>&1
echo "$(el) gpu_test_train SLLM_ATTN_BWD=wg rc=$?: $(grep -E "PASSED|FAILED" "$OUT/test_train_wg.txt" | tr '\n' ' ')"
for p in 0.5B 1.5B; do
  for cfg in "v2 det" "wg det" "wg wg"; do
    set -- $cfg
    SLLM_ATTN_FWD=$1 SLLM_ATTN_BWD=$2 timeout 150 ./build/train_gpt_relu --preset $p --batch 4 --seq 2048 --bench 12 \
      > "/tmp/wgb_train_${p}_$1_$2.txt" 2>&1
    echo "$(el) train $p fwd=$1 bwd=$2 rc=$?: $(grep -E "^bench:" "/tmp/wgb_train_${p}_$1_$2.txt" | tail -1)"
  done
done
sed -n '/^bench:/,$p' /tmp/wgb_train_0.5B_wg_wg.txt | head -40
for cfg in "v2 det" "wg wg"; do
  set -- $cfg
  SLLM_ATTN_FWD=$1 SLLM_ATTN_BWD=$2 timeout 200 ./build/train_gpt_relu --train "data/starter/brown_train_*.bin" \
    --val "data/starter/brown_val_*.bin" --preset small --vocab 50304 --batch 8 --seq 512 --steps 200 --lr 6e-4 \
    --l1 5e-5 --eval-every 50 --sample-every 0 --ckpt-every -1 --seed 1337 > "/tmp/wgb_loss_$1_$2.txt" 2>&1
  echo "$(el) 200 steps fwd=$1 bwd=$2 rc=$?"
done
paste <(grep -E "^step +[0-9]+/" /tmp/wgb_loss_v2_det.txt | awk 'NR%20==0 || NR<=2') \
      <(grep -E "^step +[0-9]+/" /tmp/wgb_loss_wg_wg.txt | awk 'NR%20==0 || NR<=2') | cut -c1-220
grep -h "val loss" /tmp/wgb_loss_v2_det.txt /tmp/wgb_loss_wg_wg.txt
cp /tmp/wgb_loss_v2_det.txt /tmp/wgb_loss_wg_wg.txt "$OUT/" 2>/dev/null
el
