#!/usr/bin/env bash
# A/B of compile-time variants of the wgmma attention kernels in one call: each argument is a name=flags pair,
#   bash dev/device/wg_variant.sh s2="-DAWG_STAGES=2" s4="-DAWG_STAGES=4"        (carry deps-debs)
# builds bench_attention and gpu_test_attention with those flags beside the default build, runs every test binary
# (float64 reference, determinism, wgmma launched), then the benches interleaved twice (default, variants,
# default, variants), then PyTorch's SDPA. Log: $OUT/wg_variant.log.
source dev/device/preamble.sh wg_variant.log
make -j"$(nproc)" build/libsllm.a build/gpu_test_attention build/bench_attention > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
variant_builds "dev/bench/bench_attention.cu|bench_attention|" "test/gpu/test_attention.cu|gpu_test_attention|-lcmocka" -- "$@"
names=$VARIANT_NAMES
el; echo built
for n in "" $names; do
  t=gpu_test_attention${n:+_$n}
  timeout 120 ./build/$t > "$OUT/t.txt" 2>&1
  echo "$(el) $t rc=$?: $(grep -E "PASSED|FAILED|fallbacks|differs" "$OUT/t.txt" | tr '\n' ' ')"
done
for rep in 1 2; do
  for n in "" $names; do
    b=bench_attention${n:+_$n}
    timeout 60 ./build/$b 20 > /tmp/b.txt 2>&1
    echo "$(el) $b:"; grep -E "^(wg|wgbwd) " /tmp/b.txt
  done
done
python3 dev/bench/sdpa_bench.py --reps 30 2>&1 | grep -E "^(cudnn|flash)"
