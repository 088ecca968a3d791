#!/usr/bin/env bash
# A/B of compile-time variants of the sparse training FFN kernels (twell/train_ffn.cuh) in one call: each argument
# is a name=flags pair,
#   BENCH_ARGS="--M 16384 --nnz 29 --reps 10 --prof;--M 65536 --nnz 29 --reps 6" \
#     bash dev/device/ffn_variant.sh s2="-DTT_WG_STEP=2" s8="-DTT_WG_STEP=8"          (carry deps-debs)
# builds bench_ffn_train, gpu_test_twell_train and gpu_test_train_sparse with those flags beside the default build,
# runs every test binary (float64 reference, the dense path, determinism), then each BENCH_ARGS set with the benches
# interleaved twice (default, variants, default, variants), each one timing dense and sparse in its own process.
# Log: $OUT/ffn_variant.log.
source dev/device/preamble.sh ffn_variant.log
TESTS="gpu_test_twell_train gpu_test_train_sparse"
make -j"$(nproc)" build/libsllm.a build/bench_ffn_train build/gpu_test_twell_train build/gpu_test_train_sparse \
  > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
mapfile -t specs < <(test_specs $TESTS)
variant_builds "dev/bench/bench_ffn_train.cu|bench_ffn_train|" "${specs[@]}" -- "$@"; names=$VARIANT_NAMES
el; echo built
for n in "" $names; do
  for t in $TESTS; do
    b=${t}${n:+_$n}
    timeout 150 ./build/$b > "$OUT/t.txt" 2>&1
    echo "$(el) $b rc=$?: $(grep -E "^\[  (PASSED|FAILED)" "$OUT/t.txt" | tr '\n' ' ')"
  done
done
IFS=';' read -ra sets <<< "${BENCH_ARGS:---M 16384 --nnz 29 --reps 10 --prof}"
for s in "${sets[@]}"; do
  for rep in 1 2; do
    for n in "" $names; do
      b=bench_ffn_train${n:+_$n}
      timeout 120 ./build/$b $s > /tmp/b.txt 2>&1
      echo "$(el) $b $s rc=$?:"; grep -E "^ +[0-9]+ +[0-9]+ \||stages" /tmp/b.txt
    done
  done
done
