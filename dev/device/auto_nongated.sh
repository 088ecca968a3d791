#!/usr/bin/env bash
# AUTO on a non-gated model (issue 25), in one GPU call: a non-gated model (h = relu(x Wu^T)) trained on the starter
# data with the quick start's recipe and --nongated, then `infer --bench` on its checkpoint (dense, sparse and auto in
# one process: prefill of 8 x 448 tokens and decoding steps at 1 and 8 sequences) and greedy_same.sh (the same tokens
# with --ffn dense, sparse and auto, at 4 and at 1 sequences).
#   bash dev/device/auto_nongated.sh      (carry deps-debs and data)
# Logs: $OUT/auto_nongated.log, $OUT/train.log. NG_SECONDS (default 90) bounds the training.
set -u
source dev/device/preamble.sh auto_nongated.log
# a carried binary was linked on the dev box without .deps' rpath: it finds cJSON through this
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
make -j"$(nproc)" build/train_gpt_relu build/infer > /tmp/ng_build.log 2>&1 || { tail -30 /tmp/ng_build.log; exit 1; }
el; echo built
W=/tmp/nongated; rm -rf $W
DATA=data/starter
./build/train_gpt_relu --train "$DATA/brown_train_*.bin" --val "$DATA/brown_val_*.bin" \
  --preset small --vocab 50304 --d-model 512 --layers 8 --heads 8 --d-ff 2048 --max-seq 512 --nongated \
  --batch 8 --seq 512 --steps 800 --warmup 100 --lr 1e-3 --final-lr-frac 0.1 \
  --l1 2e-4 --l1-warmup 100 --ffn-path auto --sparse-on 30 --sparse-off 45 --eval-every 200 --eval-batches 8 \
  --log-stats-every 200 --ckpt-every 0 --time-limit "${NG_SECONDS:-90}" --out $W > "$OUT/train.log" 2>&1
echo "$(el) train rc=$?"; grep -iE "step +800|switch|val" "$OUT/train.log" | tail -6
ck=$(ls -d $W/ckpt_* | tail -1)
for s in 8 1; do
  for b in build/infer_base build/infer; do  # build/infer_base: another commit's binary, carried (optional)
    [ -x $b ] || continue
    $b --ckpt "$ck" --bench --samples $s --prompt-len 448 --tokens 32 --reps 3 --energy-ms 0 --stats \
      > /tmp/ng_bench_$s.txt 2>&1; echo "$(el) $b bench samples $s rc=$?"
    sed -n '/^bench:/,/^greedy tokens/p' /tmp/ng_bench_$s.txt; grep "ms/step on the GPU" /tmp/ng_bench_$s.txt
    sed -n '/^FFN per layer (auto)/,$p' /tmp/ng_bench_$s.txt | head -14
  done
done
SAMPLES=4 bash dev/device/greedy_same.sh "$ck"; SAMPLES=1 bash dev/device/greedy_same.sh "$ck"
el
