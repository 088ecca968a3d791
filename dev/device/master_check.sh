#!/usr/bin/env bash
# train_gpt_relu --master none (no fp32 master weights: AdamW updates the bf16 weights with stochastic rounding), in
# one call on one GPU:
#   bash dev/device/master_check.sh        (carry deps-debs, data)
# 1. gpu_test_kernels (AdamW without master weights against the host reference; no stall below half a bf16 step),
#    gpu_test_dist (world 1: ZeRO-1 steps without master weights bit for bit against the unsharded update; shard
#    files), gpu_test_attention (the wgmma kernels), gpu_test_train;
# 2. 200 steps on the starter data (preset small, seed 1337): fp32 master + fp32 moments against --master none
#    --moments bf16 (validation loss every 50 steps);
# 3. resume with --master none --moments bf16 (stop at 10, resume to 20) against the straight run: the same losses;
#    and a checkpoint written with fp32 master weights resumed with --master none (it must load and go on).
# Log: $OUT/master_check.log.
source dev/device/preamble.sh master_check.log
make -j"$(nproc)" build/train_gpt_relu build/gpu_test_kernels build/gpu_test_dist build/gpu_test_train \
  build/gpu_test_attention > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
el; echo built
for t in gpu_test_kernels gpu_test_dist gpu_test_attention gpu_test_train; do
  timeout 150 ./build/$t > "$OUT/$t.txt" 2>&1
  echo "$(el) $t rc=$?: $(grep -E "PASSED|FAILED|no master|zero1 steps|without master|fallbacks|FAIL rank" "$OUT/$t.txt" | tr '\n' ' ' | cut -c1-900)"
done
S="--train data/starter/brown_train_*.bin --val data/starter/brown_val_*.bin --preset small --vocab 50304 --batch 8 \
--seq 512 --lr 6e-4 --l1 5e-5 --sample-every 0 --seed 1337"
for cfg in "--moments fp32 --master fp32" "--moments bf16 --master none"; do
  n=$(echo "$cfg" | tr -d ' -')
  timeout 60 ./build/train_gpt_relu $S --steps 200 --eval-every 50 --ckpt-every -1 $cfg > /tmp/ma_loss_$n.txt 2>&1
  echo "$(el) 200 steps $cfg rc=$?: $(grep -E "val loss" /tmp/ma_loss_$n.txt | tr '\n' ' ')"
  grep -E "optimizer shard|^step +200/" /tmp/ma_loss_$n.txt | cut -c1-140
done
R="--moments bf16 --master none"
rm -rf /tmp/ma_r1 /tmp/ma_r2 /tmp/ma_r3
timeout 60 ./build/train_gpt_relu $S --steps 20 --eval-every 0 $R --out /tmp/ma_r1 > /tmp/ma_r1.txt 2>&1
timeout 60 ./build/train_gpt_relu $S --steps 20 --eval-every 0 $R --out /tmp/ma_r2 --stop-at 10 > /tmp/ma_r2a.txt 2>&1
timeout 60 ./build/train_gpt_relu $S --steps 20 --eval-every 0 $R --out /tmp/ma_r2 --resume > /tmp/ma_r2b.txt 2>&1
echo "$(el) resume rc=$?: straight / resumed, steps 11-20:"
diff <(grep -E "^step +(1[1-9]|20)/" /tmp/ma_r1.txt | cut -d'|' -f1-4) <(grep -E "^step +(1[1-9]|20)/" /tmp/ma_r2b.txt | cut -d'|' -f1-4) \
  && echo "resume: losses of steps 11-20 identical ($(grep -cE "^step +(1[1-9]|20)/" /tmp/ma_r2b.txt) lines)" || { echo "resume: DIFFERENT"; tail -5 /tmp/ma_r2b.txt; }
grep -E "^step +20/" /tmp/ma_r1.txt /tmp/ma_r2b.txt | cut -c1-120
timeout 60 ./build/train_gpt_relu $S --steps 20 --eval-every 0 --out /tmp/ma_r3 --stop-at 10 > /tmp/ma_r3a.txt 2>&1
timeout 60 ./build/train_gpt_relu $S --steps 20 --eval-every 0 $R --out /tmp/ma_r3 --resume > /tmp/ma_r3b.txt 2>&1
echo "$(el) fp32-master checkpoint resumed with $R rc=$?: $(grep -E "resumed from|^step +20/" /tmp/ma_r3b.txt | cut -c1-100 | tr '\n' ' ')"
