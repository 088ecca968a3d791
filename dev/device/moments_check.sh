#!/usr/bin/env bash
# train_gpt_relu --moments bf16 on one GPU, in one call:
#   bash dev/device/moments_check.sh        (carry deps-debs, data)
# 1. gpu_test_kernels (bf16-moment AdamW against the host reference; v under beta2 0.999), gpu_test_dist (ZeRO-1
#    steps and shard files with bf16 moments), gpu_test_train;
# 2. the training step, --moments fp32 against bf16: 0.5B and 1.5B, B 4 x 2048 (step time, AdamW time, memory);
# 3. 200 steps on the starter data (preset small, seed 1337) with each, and a bf16 resume (stop at 10, resume to
#    20) against the straight run: the same losses.
# 4. (for issue 25) infer's prefill of 8 x 2048 at 2B, SYNTHETIC 29, dense and sparse, with the wgmma attention.
# Log: $OUT/moments_check.log.
source dev/device/preamble.sh moments_check.log
make -j"$(nproc)" build/train_gpt_relu build/gpu_test_kernels build/gpu_test_dist build/gpu_test_train build/infer \
  > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
el; echo built
for t in gpu_test_kernels gpu_test_dist gpu_test_train; do
  timeout 120 ./build/$t > "$OUT/$t.txt" 2>&1
  echo "$(el) $t rc=$?: $(grep -E "PASSED|FAILED|bf16 moments|bf16 v under|moments bf16|FAIL rank" "$OUT/$t.txt" | tr '\n' ' ' | cut -c1-600)"
done
for p in 0.5B 1.5B; do
  for mo in fp32 bf16; do
    timeout 120 ./build/train_gpt_relu --preset $p --batch 4 --seq 2048 --bench 12 --moments $mo > /tmp/mo_${p}_${mo}.txt 2>&1
    echo "$(el) train $p --moments $mo rc=$?: $(grep -E "^bench:.*tokens/ms" /tmp/mo_${p}_${mo}.txt | tail -1)"
    grep -E "optimizer shard|^  adamw" /tmp/mo_${p}_${mo}.txt
  done
done
S="--train data/starter/brown_train_*.bin --val data/starter/brown_val_*.bin --preset small --vocab 50304 --batch 8 \
--seq 512 --lr 6e-4 --l1 5e-5 --sample-every 0 --seed 1337"
for mo in fp32 bf16; do
  timeout 60 ./build/train_gpt_relu $S --steps 200 --eval-every 50 --ckpt-every -1 --moments $mo > /tmp/mo_loss_$mo.txt 2>&1
  echo "$(el) 200 steps --moments $mo rc=$?: $(grep -E "val loss" /tmp/mo_loss_$mo.txt | tr '\n' ' ')"
done
rm -rf /tmp/mo_r1 /tmp/mo_r2
timeout 60 ./build/train_gpt_relu $S --steps 20 --eval-every 0 --moments bf16 --out /tmp/mo_r1 > /tmp/mo_r1.txt 2>&1
timeout 60 ./build/train_gpt_relu $S --steps 20 --eval-every 0 --moments bf16 --out /tmp/mo_r2 --stop-at 10 > /tmp/mo_r2a.txt 2>&1
timeout 60 ./build/train_gpt_relu $S --steps 20 --eval-every 0 --moments bf16 --out /tmp/mo_r2 --resume > /tmp/mo_r2b.txt 2>&1
echo "$(el) resume rc=$?: straight / resumed, steps 11-20:"
diff <(grep -E "^step +(1[1-9]|20)/" /tmp/mo_r1.txt | cut -d'|' -f1-4) <(grep -E "^step +(1[1-9]|20)/" /tmp/mo_r2b.txt | cut -d'|' -f1-4) \
  && echo "resume: losses of steps 11-20 identical ($(grep -cE "^step +(1[1-9]|20)/" /tmp/mo_r2b.txt) lines)" || { echo "resume: DIFFERENT"; tail -5 /tmp/mo_r2b.txt; }
grep -E "^step +20/" /tmp/mo_r1.txt /tmp/mo_r2b.txt | cut -c1-120
timeout 100 ./build/infer --preset 2B --synthetic-nnz 29 --bench --samples 8 --prompt-len 2048 --chunk 2048 --tokens 8 \
  --reps 3 --energy-ms 0 > /tmp/mo_infer.txt 2>&1
echo "$(el) infer 2B prefill rc=$?: $(grep bench-result /tmp/mo_infer.txt | sed -E 's/.*ffn=([a-z]+).*prefill_ms=([0-9.]+).*/\1 \2/' | tr '\n' ' ')"
