#!/usr/bin/env bash
# train_gpt_relu --matmul-tune (cuBLASLt algorithms timed per GEMM shape at its first call) in one call:
#   bash dev/device/tune_check.sh        (carry deps-debs)
# gpu_test_kernels (the autotuned GEMMs exact on integer inputs, beta 0 and 1, plain and batched), then the 0.5B step
# with --moments bf16 --master none, --matmul-tune 0 and 3 interleaved twice, and the 1.5B step once each.
# Log: $OUT/tune_check.log.
source dev/device/preamble.sh tune_check.log
make -j"$(nproc)" build/train_gpt_relu build/gpu_test_kernels > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
el; echo built
timeout 120 ./build/gpu_test_kernels > "$OUT/gpu_test_kernels.txt" 2>&1
echo "$(el) gpu_test_kernels rc=$?: $(grep -E "PASSED|FAILED|autotune round" "$OUT/gpu_test_kernels.txt" | tr '\n' ' ')"
run() {  # preset tune
  timeout 150 ./build/train_gpt_relu --preset $1 --batch 4 --seq 2048 --bench 12 --moments bf16 --master none \
    --matmul-tune $2 > /tmp/tune_$1_$2.txt 2>&1
  echo "$(el) $1 --matmul-tune $2 rc=$?: $(grep -E "^bench:.*tokens/ms" /tmp/tune_$1_$2.txt | tail -1 | sed 's/.*median/median/')"
  grep -E "^matmul autotune" /tmp/tune_$1_$2.txt
}
for r in 1 2; do run 0.5B 0; run 0.5B 3; done
sed -n '/^profile:/,/GPU span/p' /tmp/tune_0.5B_3.txt | head -30
run 1.5B 0; run 1.5B 3
