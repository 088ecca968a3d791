#!/usr/bin/env bash
# A/B of the decoding path in one call: this tree's infer beside build/infer_base (a binary of another commit built on
# the dev box, carried: timed beside it when present), and beside -D variants given as name=flags pairs, e.g.
#   bash dev/device/gemv_variant.sh                                   (carry deps-debs and build/infer_base)
#   bash dev/device/gemv_variant.sh v1="-DFLAG=1" v2="-DFLAG=2"       (flags a branch adds; c49ea1b's GEMV_CTAS_PER_SM)
# builds infer and the tests (TESTS, default "gpu_test_infer gpu_test_kernels") with those flags beside the default
# build, runs the tests of every build, then `infer --bench` (1 sample, prompt 256, 128 steps, SYNTHETIC 29) of every
# binary on PRESETS (default 0.5B 2B), twice in turn, printing the replayed step's GPU time per FFN mode.
# Log: $OUT/gemv_variant.log.
source dev/device/preamble.sh gemv_variant.log
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
TESTS=${TESTS:-gpu_test_infer gpu_test_kernels}
make -j"$(nproc)" build/libsllm.a build/infer $(for t in $TESTS; do echo build/$t; done) > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
mapfile -t specs < <(test_specs $TESTS)
variant_builds "infer.cu|infer|" "${specs[@]}" -- "$@"; names=$VARIANT_NAMES
echo "$(el) built"
for n in "" $names; do
  for t in $TESTS; do
    b=${t}${n:+_$n}
    timeout 200 ./build/$b > "$OUT/$b.txt" 2>&1
    echo "$(el) $b rc=$?: $(grep -E "^\[  (PASSED|FAILED)" "$OUT/$b.txt" | tr '\n' ' ')"
  done
done
bins=""; [ -x build/infer_base ] && bins="infer_base"; bins="$bins infer"; for n in $names; do bins="$bins infer_$n"; done
for p in ${PRESETS:-0.5B 2B}; do
  for rep in 1 2; do
    for b in $bins; do
      timeout 120 ./build/$b --preset $p --synthetic-nnz 29 --bench --samples 1 --prompt-len 256 --tokens 128 --reps 3 \
        --energy-ms 0 > "$OUT/g.txt" 2>&1
      echo "$(el) $b $p rc=$?: $(grep -E "^SYNTHETIC +(dense|sparse|auto) +[0-9.]+ ms/step on the GPU" "$OUT/g.txt" | awk '{print $2, $3}' | tr '\n' ' ')"
    done
  done
done
