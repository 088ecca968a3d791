#!/usr/bin/env bash
# A change to the wgmma gate (twell/gate_wgmma.cuh) on the GPU, in one call: the GPU tests that run the gate (bit for
# bit against the CPU packer, the hang guard, the FFN, training and inference paths), then this tree's binaries beside
# baseline binaries built from another commit on the dev box and carried (build/bench_ffn_base,
# build/bench_ffn_train_base, build/infer_base; each missing one is skipped):
#   bench_ffn at M 65536 and 16384, nnz 29 (the gate against the cuBLASLt GEMM, the FFN against gate + L2 gather),
#   bench_ffn_train at M 16384, nnz 29, and the whole-model prefill of 8 x 2048 tokens (infer --bench) of the 0.5B
#   and 2B presets at SYNTHETIC 29 non-zeros per token.
#   bash dev/device/gate_ab.sh          (carry deps-debs and the *_base binaries)
# Logs: $OUT/gate_ab.log (summary), $OUT/<name>.txt.
source dev/device/preamble.sh gate_ab.log
# carried binaries were linked on the dev box without .deps' rpath: they find cJSON / cmocka through this
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
TESTS=${TESTS:-gpu_test_twell gpu_test_hang_guard gpu_test_twell_train gpu_test_train_sparse gpu_test_infer}
targets="build/bench_ffn build/bench_ffn_train build/infer"; for t in $TESTS; do targets="$targets build/$t"; done
make -j"$(nproc)" $targets > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
el; echo "built"
for t in $TESTS; do
  timeout 200 "./build/$t" > "$OUT/$t.txt" 2>&1; rc=$?; echo "$(el) $t rc=$rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]' "$OUT/$t.txt" | tr '\n' ' ')"
done
for b in build/bench_ffn_base build/bench_ffn; do
  [ -x "$b" ] || continue
  timeout 150 "$b" --M 65536,16384 --nnz 29 --pattern uniform --reps 8 --gather --no-cublas > "$OUT/$(basename "$b").txt" 2>&1
  rc=$?; echo "$(el) $b rc=$rc"; grep -E "clusters|^(65536|16384) |gather" "$OUT/$(basename "$b").txt"
done
for b in build/bench_ffn_train_base build/bench_ffn_train; do
  [ -x "$b" ] || continue
  timeout 100 "$b" --M 16384 --nnz 29 --reps 10 > "$OUT/$(basename "$b").txt" 2>&1
  rc=$?; echo "$(el) $b rc=$rc"; grep -E "^ +16384 " "$OUT/$(basename "$b").txt"
done
for p in ${PRESETS:-0.5B 2B}; do
  for b in build/infer_base build/infer; do
    [ -x "$b" ] || continue
    timeout 200 "$b" --preset "$p" --synthetic-nnz 29 --bench --samples 8 --prompt-len 2048 --chunk 2048 --tokens 8 \
      --reps 3 --energy-ms 0 > "$OUT/$(basename "$b")_$p.txt" 2>&1
    rc=$?; echo "$(el) $b $p rc=$rc"; grep -E "bench-result" "$OUT/$(basename "$b")_$p.txt" | sed -E 's/ (energy|tokens_per)[^ ]*//g'
  done
done
