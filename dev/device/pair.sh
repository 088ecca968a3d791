#!/usr/bin/env bash
# Two device scripts at once on a 2-GPU machine (nvidia-h200-x2), one per GPU, so that one call holds two A/Bs:
#   bash dev/device/pair.sh "CMD_ON_GPU0" "CMD_ON_GPU1" [make targets built first, once, for both]
# e.g. bash dev/device/pair.sh "bash dev/device/gemv_variant.sh v=-DX=1" "bash dev/device/step_variant.sh base= pipe=-DY=1"
# The shared build runs first (the scripts' own make is then a no-op, so they never build into build/ at once); each
# command gets OUT=$OUT/gpuN and CUDA_VISIBLE_DEVICES=N; its log is printed after both end, and the test outputs of
# passing runs are removed from $OUT so that the files worth reading come back.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d .deps ] || bash scripts/deps_unpack.sh > /dev/null
make -j"$(nproc)" build/libsllm.a ${3:-build/infer build/train_gpt_relu build/gpu_test_infer build/gpu_test_kernels} \
  > "$OUT/make.log" 2>&1 || { tail -30 "$OUT/make.log"; echo "BUILD FAILED"; exit 1; }
for g in 0 1; do
  cmd=$1; [ $g = 1 ] && cmd=$2
  mkdir -p "$OUT/gpu$g"
  log=$OUT/gpu$g.log
  (export OUT=$OUT/gpu$g CUDA_VISIBLE_DEVICES=$g; bash -c "$cmd" > "$log" 2>&1) & eval "p$g=$!"
done
wait $p0; wait $p1
for g in 0 1; do echo "=== GPU $g: $([ $g = 0 ] && echo "$1" || echo "$2")"; cat "$OUT/gpu$g.log"; done
for f in "$OUT"/gpu*/*.txt; do grep -qE "FAILED|FAIL" "$f" || rm -f "$f"; done
