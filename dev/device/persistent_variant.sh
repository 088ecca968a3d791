#!/usr/bin/env bash
# A/B of compile-time variants of the persistent decoding step (core/decode_persistent.cuh) in one call:
#   bash dev/device/persistent_variant.sh pf8="-DDP_PF_UNITS=8" pf32="-DDP_PF_UNITS=32"     (carry deps-debs)
# builds infer per variant beside the default build, then per preset (PRESETS, default "0.5B 2B") `infer --bench`
# (1 sample, prompt 256, 128 steps, SYNTHETIC 29) of every binary: the dense step as the persistent kernel and on the
# separate GEMV kernels (one process), sparse and auto. TRACE=1 (or TRACE="flags") adds the -DDP_TRACE timeline of the default build (or of those flags); TESTS=1
# builds and runs gpu_test_infer per variant first.
# Log: $OUT/persistent_variant.log.
source dev/device/preamble.sh persistent_variant.log
make -j"$(nproc)" build/libsllm.a build/infer > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
names=""; pids=""
for a in "$@"; do
  n=${a%%=*}; fl=${a#*=}; names="$names $n"
  nvcc $VARIANT_NVCC $fl infer.cu -o build/infer_$n $VARIANT_LINK >> "$OUT/build.log" 2>&1 & pids="$pids $!"
  [ -n "$TESTS" ] && { nvcc $VARIANT_NVCC $fl test/gpu/test_infer.cu -o build/gpu_test_infer_$n $VARIANT_LINK -lcmocka \
    >> "$OUT/build.log" 2>&1 & pids="$pids $!"; }
done
if [ -n "$TRACE" ]; then
  nvcc $VARIANT_NVCC -DDP_TRACE $([ "$TRACE" != 1 ] && echo "$TRACE") infer.cu -o build/infer_dptrace $VARIANT_LINK >> "$OUT/build.log" 2>&1 & pids="$pids $!"
fi
for p in $pids; do wait $p || echo "a variant build failed (see build.log)"; done
echo "$(el) built"
if [ -n "$TESTS" ]; then  # gpu_test_infer per variant (its test 5: the persistent step bit for bit against the GEMV)
  for n in $names; do
    timeout 300 ./build/gpu_test_infer_$n > "$OUT/gpu_test_infer_$n.txt" 2>&1
    echo "$(el) gpu_test_infer_$n rc=$?: $(grep -E "^\[  (PASSED|FAILED)|<-- FAIL" "$OUT/gpu_test_infer_$n.txt" | head -5 | tr '\n' ' ')"
  done
fi
for p in ${PRESETS:-0.5B 2B}; do
  for n in "" $names; do
    b=infer${n:+_$n}
    timeout 200 ./build/$b --preset $p --synthetic-nnz 29 --bench --samples ${SAMPLES:-1} --prompt-len 256 --tokens 128 \
      --reps 3 --energy-ms 0 > "$OUT/${b}_$p.txt" 2>&1
    echo "$(el) $b $p rc=$?"
    grep -E "ms/step on the GPU" "$OUT/${b}_$p.txt" | sed 's/^SYNTHETIC //'
  done
  if [ -n "$TRACE" ]; then
    timeout 200 ./build/infer_dptrace --preset $p --synthetic-nnz 29 --bench --samples ${SAMPLES:-1} --prompt-len 256 \
      --tokens 128 --reps 1 --energy-ms 0 > "$OUT/infer_dptrace_$p.txt" 2>&1
    echo "$(el) infer_dptrace $p rc=$?"
    sed -n '/persistent step trace/,/step .* us/p' "$OUT/infer_dptrace_$p.txt" | sed 's/^SYNTHETIC //'
  fi
done
