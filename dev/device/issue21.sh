#!/usr/bin/env bash
# Issue 21's closing measurements in one call (~6 minutes on an H200):
#   bash dev/device/issue21.sh        (carry deps-debs)
# 1. the sparse training FFN's GPU tests (float64 reference, dense path, determinism, the trainer's sparse steps);
# 2. bench_ffn_train's sweep, D 2048, F 5632, M 16384 and 65536, nnz 8-512 (every point checked against the dense
#    FFN), the heavy-first-tokens and mixed patterns at nnz 29, and M 16384 nnz 29 three more times with its stages;
# 3. the whole training step, dense vs sparse FFN in one process, SYNTHETIC 29, 0.5B and 1.5B at B 4 x 2048.
# DECODE_NCU=1: then dev/device/decode_prof.sh's Nsight Compute look at a 0.5B decoding step (issue 25).
# Log: $OUT/issue21.log.
source dev/device/preamble.sh issue21.log
make -j"$(nproc)" build/libsllm.a build/bench_ffn_train build/gpu_test_twell_train build/gpu_test_train_sparse \
  build/gpu_test_train build/train_gpt_relu > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
echo "$(el) built"
for t in gpu_test_twell_train gpu_test_train_sparse gpu_test_train; do
  timeout 200 ./build/$t > "$OUT/$t.txt" 2>&1
  echo "$(el) $t rc=$?: $(grep -E "^\[  (PASSED|FAILED)" "$OUT/$t.txt" | tr '\n' ' ')"
done
echo "== bench_ffn_train sweep (ms: dense, sparse, ratio | sparse fwd, bwd, gate | nnz/tok maxrow dense ovf pool | err)"
timeout 200 ./build/bench_ffn_train --reps 6 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ \||FAIL"
for p in heavy mix; do
  timeout 60 ./build/bench_ffn_train --M 16384 --nnz 29 --reps 10 --pattern $p 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ \||FAIL" | sed "s/^/$p /"
done
for r in 1 2 3; do
  timeout 60 ./build/bench_ffn_train --M 16384 --nnz 29 --reps 10 --prof 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ \||stages|FAIL"
done
for p in 0.5B 1.5B; do
  echo "== $(el) whole step $p, B 4 x 2048, SYNTHETIC 29"
  timeout 150 ./build/train_gpt_relu --preset $p --batch 4 --seq 2048 --bench 8 --synthetic-nnz 29 --bench-compare \
    > "$OUT/step_$p.txt" 2>&1; echo "rc=$?"
  grep -E "bench-compare|^bench:|device memory|error" "$OUT/step_$p.txt" | grep -v "synthetic sparsity: iter"
done
if [ "${DECODE_NCU:-0}" = 1 ]; then
  echo "== $(el) decode_prof (0.5B)"
  OUT=$OUT/decode TESTS= GEMV_M=0 PRESETS=0.5B bash dev/device/decode_prof.sh > /dev/null 2>&1
  grep -v "^\[" "$OUT/decode/decode_prof.log" | tail -30; cat "$OUT/decode/decode_kernels.md" 2>/dev/null | head -80
fi
el
