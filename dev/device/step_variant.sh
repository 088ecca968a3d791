#!/usr/bin/env bash
# A/B of compile-time variants in the training step in one call: each argument is a name=flags pair,
#   bash dev/device/step_variant.sh base="" pipe="-DADAMW_PIPE=1"     (carry deps-debs)
# (base="": the default built the variants' way, without NCCL, so that the binaries differ only in the flags)
# builds train_gpt_relu and gpu_test_kernels with those flags beside the default build, runs every gpu_test_kernels,
# then `train_gpt_relu --preset P --batch 4 --seq 2048 --bench 12 --moments bf16 --master none` (issue 24's
# configuration) for every binary on PRESETS (default 0.5B), twice in turn: the median step and the AdamW phase.
# Log: $OUT/step_variant.log.
source dev/device/preamble.sh step_variant.log
make -j"$(nproc)" build/libsllm.a build/train_gpt_relu build/gpu_test_kernels > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
variant_builds "train_gpt_relu.cu|train_gpt_relu|-lnccl" "test/gpu/test_kernels.cu|gpu_test_kernels|-lcmocka" -- "$@"
names=$VARIANT_NAMES
echo "$(el) built"
for n in "" $names; do
  b=gpu_test_kernels${n:+_$n}
  timeout 200 ./build/$b > "$OUT/$b.txt" 2>&1
  echo "$(el) $b rc=$?: $(grep -E "^\[  (PASSED|FAILED)" "$OUT/$b.txt" | tr '\n' ' ')"
done
for p in ${PRESETS:-0.5B}; do
  for rep in 1 2; do
    for n in "" $names; do
      b=train_gpt_relu${n:+_$n}
      timeout 150 ./build/$b --preset $p --batch 4 --seq 2048 --bench 12 --moments bf16 --master none > /tmp/s.txt 2>&1
      echo "$(el) $b $p rc=$?: $(grep -E "^bench:.*tokens/ms" /tmp/s.txt | tail -1 | grep -oE "median step [0-9.]+ ms|[0-9.]+ tokens/ms|MFU [0-9.]+%" | tr '\n' ' ')$(grep -E "^bench: median step without" /tmp/s.txt | tail -1 | grep -oE "without profiling events [0-9.]+ ms")"
      grep -iE "^ *adamw " /tmp/s.txt | tail -1
    done
  done
done
