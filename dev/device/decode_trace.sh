#!/usr/bin/env bash
# An in-stream timeline of one replayed decoding step (core/ktrace.cuh), in one call:
#   bash dev/device/decode_trace.sh        (carry deps-debs; PRESETS default "0.5B 2B")
# builds infer with -DSLLM_KTRACE beside the plain build, then `infer --bench` (1 sample, prompt 256, 128 steps,
# SYNTHETIC 29) of both: the plain binary's step times (the trace's own cost: compare them) and the traced binary's
# tables for the dense and the sparse FFN: each kernel's entry, return from its wait and exit, in launch order.
# TRACE_FLAGS (e.g. "-DFLAG=1") are added to the traced build only. Log: $OUT/decode_trace.log.
source dev/device/preamble.sh decode_trace.log
make -j"$(nproc)" build/libsllm.a build/infer > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
nvcc $VARIANT_NVCC -DSLLM_KTRACE $TRACE_FLAGS infer.cu -o build/infer_trace $VARIANT_LINK >> "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; echo "TRACE BUILD FAILED"; exit 1; }
echo "$(el) built"
for p in ${PRESETS:-0.5B 2B}; do
  for b in infer infer_trace; do
    timeout 150 ./build/$b --preset $p --synthetic-nnz 29 --bench --samples 1 --prompt-len 256 --tokens 128 --reps 3 \
      --energy-ms 0 > "$OUT/${b}_$p.txt" 2>&1
    echo "$(el) $b $p rc=$?: $(grep -E "^SYNTHETIC +(dense|sparse|auto) +[0-9.]+ ms/step on the GPU" "$OUT/${b}_$p.txt" | awk '{print $2, $3}' | tr '\n' ' ')"
  done
  for mode in dense sparse; do
    sed -n "/ktrace ($mode/,/head start: the previous/p" "$OUT/infer_trace_$p.txt" | sed 's/^SYNTHETIC //' | head -${TRACE_LINES:-60}
  done
done
