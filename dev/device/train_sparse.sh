#!/usr/bin/env bash
# GPU checks of the sparse FFN inside the trainer (issue 21). Run from the repo root on the GPU machine:
#   bash dev/device/train_sparse.sh        (logs under $OUT, default /tmp/out; budget ~6 minutes)
# 1. build  2. gpu_test_train_sparse (sparse vs dense training steps)  3. whole-step bench, dense vs sparse FFN in one
# process, SYNTHETIC sparsity 29/token, 0.5B  4. the same at 1.5B  5. the quick start (needs data/starter and the
# GPT-2 encoder) and build/infer --bench on its checkpoint, if time is left. CURVES=1: instead, the quick start's run
# twice, FFN forced dense and auto (with infer --bench), same seed, validation losses side by side. MEM_B8=1: also
# 1.5B at B 8 (the paper's micro-batch), dense vs sparse memory.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/train_sparse.log") 2>&1
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
[ -d .deps ] || bash scripts/deps_unpack.sh >/dev/null
echo "== train_sparse.sh on $(nvidia-smi -L 2>/dev/null | head -1)"
make -j16 build/train_gpt_relu build/gpu_test_train_sparse build/infer build/test_sparse_dispatch > "$OUT/build.log" 2>&1 \
  || { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
echo "== [$(el)s] test_sparse_dispatch (CPU)"; ./build/test_sparse_dispatch 2>&1 | tail -2
echo "== [$(el)s] gpu_test_train_sparse"
timeout 60 ./build/gpu_test_train_sparse > "$OUT/test_train_sparse.txt" 2>&1; echo "gpu_test_train_sparse rc=$?"
grep -E "case:|step [0-9]|FAIL|PASSED|FAILED|grad Wg|grad Wd|synthetic" "$OUT/test_train_sparse.txt" | head -60
echo "== [$(el)s] bench-compare 0.5B, SYNTHETIC 29 non-zeros/token"
timeout 80 ./build/train_gpt_relu --preset 0.5B --batch 4 --seq 2048 --bench 10 --synthetic-nnz 29 --bench-compare \
  > "$OUT/bench_0.5B.txt" 2>&1; echo "rc=$?"
grep -E "bench-compare|^bench:|FFN path|sparse FFN:|activations total|SYNTHETIC|error" "$OUT/bench_0.5B.txt" | grep -v "^synthetic sparsity: iter"
if [ "$(el)" -lt 200 ]; then
  echo "== [$(el)s] bench-compare 1.5B, SYNTHETIC 29 non-zeros/token"
  timeout 110 ./build/train_gpt_relu --preset 1.5B --batch 4 --seq 2048 --bench 8 --synthetic-nnz 29 \
    --bench-compare > "$OUT/bench_1.5B.txt" 2>&1; echo "rc=$?"
  grep -E "bench-compare|^bench:|FFN path|sparse FFN:|activations total|SYNTHETIC|error" "$OUT/bench_1.5B.txt" | grep -v "^synthetic sparsity: iter"
else echo "skipping 1.5B (time)"; fi
if [ "${MEM_B8:-0}" = 1 ]; then  # memory at the paper's micro-batch (8 x 2048 per GPU), 1.5B
  echo "== [$(el)s] bench-compare 1.5B, B 8, SYNTHETIC 29 non-zeros/token"
  timeout 150 ./build/train_gpt_relu --preset 1.5B --batch 8 --seq 2048 --bench 6 --synthetic-nnz 29 \
    --bench-compare > "$OUT/bench_1.5B_b8.txt" 2>&1; echo "rc=$?"
  grep -E "bench-compare|^bench:|FFN path|sparse FFN:|activations total|SYNTHETIC|error" "$OUT/bench_1.5B_b8.txt" | grep -v "^synthetic sparsity: iter"
fi
if [ "${CURVES:-0}" != 1 ] && [ "$(el)" -lt 250 ]; then
echo "== [$(el)s] quick start"
QS_SECONDS=${QS_SECONDS:-45} QS_OUT=/tmp/qs timeout $(( 345 - $(el) )) bash scripts/quickstart.sh > "$OUT/quickstart.txt" 2>&1; echo "quickstart rc=$?"
grep -E "val loss|-> sparse|-> dense|ffn memory|time limit|error|checkpoint|dense FFN|sparse FFN|speed" "$OUT/quickstart.txt" | head -60
grep -E "^step +[0-9]+/" "$OUT/quickstart.txt" | awk 'NR%100==0' | tail -8
grep -E "ffn layer" "$OUT/quickstart.txt" | tail -8
else echo "skipping the quick start (time)"; fi
if [ "${CURVES:-0}" = 1 ]; then  # issue 21: the quick start's run forced dense vs auto, same seed, val loss side by side
  echo "== [$(el)s] loss curves: --ffn-path dense vs auto (same seed)"
  for p in dense auto; do  # the auto run is the quick start itself: its infer --bench runs too
    QS_FFN_PATH=$p QS_SKIP_INFER=$([ $p = dense ] && echo 1 || echo 0) QS_SECONDS=${QS_SECONDS:-45} QS_OUT=/tmp/qs_$p \
      timeout 150 bash scripts/quickstart.sh > "$OUT/curve_$p.txt" 2>&1; echo "$p rc=$?"
  done
  grep -E -- "-> sparse|-> dense|ffn memory|dense FFN|sparse FFN|speed|prefill|decod" "$OUT/curve_auto.txt" | head -30
  paste <(grep -E "val loss" "$OUT/curve_dense.txt") <(grep -E "val loss" "$OUT/curve_auto.txt" | sed 's/^/   auto: /')
  paste <(grep -E "^step +[0-9]+/" "$OUT/curve_dense.txt" | awk 'NR%100==0' | cut -c1-40) \
        <(grep -E "^step +[0-9]+/" "$OUT/curve_auto.txt" | awk 'NR%100==0' | cut -c1-80)
fi
echo "== [$(el)s] done"
