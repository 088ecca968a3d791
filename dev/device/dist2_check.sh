#!/usr/bin/env bash
# On a 2-GPU machine, in one call: the ZeRO-1 paths with bf16 moments and without master weights across ranks, and
# (GPU 0) the whole-model prefill of issue 25 at the paper's sparsity:
#   bash dev/device/dist2_check.sh        (kind nvidia-h100-x2; carry deps-debs, data)
# 1. gpu_test_dist: its multi-rank checks (ZeRO-1 steps equal to one rank's update bit for bit, fp32 / bf16
#    moments / no master weights; shard files) on 2 ranks;
# 2. starter data, --moments bf16 --master none: 20 steps on 1 and on 2 ranks (same global batch), and 2 ranks
#    stopped at 10 then resumed on 1 rank (the shards re-cut) against the 1-rank run;
# 3. build/infer --bench, 8 x 2048 prefill, SYNTHETIC 29 non-zeros per token, dense and sparse, 0.5B and 2B.
# Log: $OUT/dist2_check.log.
source dev/device/preamble.sh dist2_check.log
export NCCL_NVLS_ENABLE=0
source dev/device/nccl_env.sh
make -j"$(nproc)" "${extra[@]}" build/train_gpt_relu build/gpu_test_dist build/infer > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
el; echo built
timeout 200 ./build/gpu_test_dist > "$OUT/gpu_test_dist.txt" 2>&1
echo "$(el) gpu_test_dist rc=$?: $(grep -E "PASSED|FAILED|SKIPPED|zero1 steps|shard files|FAIL rank" "$OUT/gpu_test_dist.txt" | tr '\n' ' ' | cut -c1-1500)"
S="--train data/starter/brown_train_*.bin --val data/starter/brown_val_*.bin --preset small --vocab 50304 --batch 8 \
--seq 512 --total-batch 8192 --lr 6e-4 --l1 5e-5 --sample-every 0 --seed 1337 --steps 20 --eval-every 0 \
--moments bf16 --master none"
rm -rf /tmp/d2_*
timeout 90 ./build/train_gpt_relu $S --out /tmp/d2_w1 > /tmp/d2_w1.txt 2>&1; echo "$(el) 1 rank rc=$?"
timeout 90 bash scripts/run_dist.sh 2 ./build/train_gpt_relu $S --out /tmp/d2_w2 > /tmp/d2_w2.txt 2>&1; echo "$(el) 2 ranks rc=$?"
timeout 90 bash scripts/run_dist.sh 2 ./build/train_gpt_relu $S --out /tmp/d2_r --stop-at 10 > /tmp/d2_ra.txt 2>&1
timeout 90 ./build/train_gpt_relu $S --out /tmp/d2_r --resume > /tmp/d2_rb.txt 2>&1; echo "$(el) 2 ranks -> resume on 1 rc=$?"
for f in w1 w2 rb; do echo "$f: $(grep -E "^step +(10|15|20)/" /tmp/d2_$f.txt | cut -d'|' -f1-3 | tr '\n' ' ')"; done
grep -E "error|optimizer shard" /tmp/d2_w2.txt /tmp/d2_rb.txt | head -5
for p in 0.5B 2B; do
  timeout 150 ./build/infer --preset $p --synthetic-nnz 29 --bench --samples 8 --prompt-len 2048 --chunk 2048 --tokens 8 \
    --reps 3 --energy-ms 0 > /tmp/d2_infer_$p.txt 2>&1
  echo "$(el) infer $p prefill rc=$?: $(grep bench-result /tmp/d2_infer_$p.txt | sed -E 's/.*ffn=([a-z]+).*prefill_ms=([0-9.]+).*/\1 \2/' | tr '\n' ' ')"
done
