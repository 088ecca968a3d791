#!/usr/bin/env bash
# The persistent decoding step (core/decode_persistent.cuh) in one call:
#   bash dev/device/persistent.sh        (carry deps-debs; PRESETS default "0.5B 2B")
# builds infer and gpu_test_infer, runs gpu_test_infer (its test 5: the persistent step against the separate GEMV
# kernels, bit for bit), then `infer --bench` (1 sample, prompt 256, 128 steps, SYNTHETIC 29) per preset: the dense
# step as one persistent kernel and on the separate kernels in one process, sparse and auto. Log: $OUT/persistent.log.
source dev/device/preamble.sh persistent.log
make -j"$(nproc)" build/libsllm.a build/infer build/gpu_test_infer > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
echo "$(el) built"
timeout 300 ./build/gpu_test_infer > "$OUT/gpu_test_infer.txt" 2>&1
echo "$(el) gpu_test_infer rc=$?: $(grep -E "^\[  (PASSED|FAILED)|^\[  FAILED|B=[0-9]:" "$OUT/gpu_test_infer.txt" | tr '\n' ' ' | cut -c1-1500)"
for p in ${PRESETS:-0.5B 2B}; do
  timeout 200 ./build/infer --preset $p --synthetic-nnz 29 --bench --samples ${SAMPLES:-1} --prompt-len 256 --tokens 128 \
    --reps 3 --energy-ms 0 > "$OUT/infer_$p.txt" 2>&1
  echo "$(el) infer $p rc=$?"
  grep -E "ms/step on the GPU|decode step on the GPU|^SYNTHETIC (dense|sparse|auto) " "$OUT/infer_$p.txt" | sed 's/^SYNTHETIC //'
done
if [ -n "$TRACE" ]; then  # the per-phase timeline of one replayed persistent step (-DDP_TRACE)
  nvcc $VARIANT_NVCC -DDP_TRACE infer.cu -o build/infer_dptrace $VARIANT_LINK >> "$OUT/build.log" 2>&1 || { echo "TRACE BUILD FAILED"; exit 1; }
  for p in ${PRESETS:-0.5B 2B}; do
    timeout 200 ./build/infer_dptrace --preset $p --synthetic-nnz 29 --bench --samples ${SAMPLES:-1} --prompt-len 256 \
      --tokens 128 --reps 1 --energy-ms 0 > "$OUT/infer_dptrace_$p.txt" 2>&1
    echo "$(el) infer_dptrace $p rc=$?"
    sed -n '/persistent step trace/,/step .* us/p' "$OUT/infer_dptrace_$p.txt" | sed 's/^SYNTHETIC //'
  done
fi
