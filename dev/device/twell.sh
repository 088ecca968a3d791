#!/usr/bin/env bash
# TwELL on the GPU machine (target < 4 minutes, build included). Logs to $OUT/twell.log.
#   0. build the twell targets; ptxas resource report of the sliced up/down and mask-pack kernels;
#   1. GPU tests (test/gpu/test_twell.cu: every gate variant bit for bit vs the CPU packer, the FFN on every
#      path vs float64, the sliced up/down alone incl. overflow rows and blocks that do not fit);
#   2. bench M=65536, nnz 8 16 29 64 128, uniform + heavy: gate GEMM / dense / sparse (default path) / auto /
#      the previous default path (sp.old), interleaved rounds, medians;
#   3. the same at nnz 8 and 29 with --tune (the gate GEMMs' fastest cuBLASLt algorithms) and --sliced;
#   4. bench M=16384 and 131072 at nnz 29, uniform; 5. the --variants sweep at nnz 29;
#   6. bench_decode: the decode path at 1-64 rows over 8 layers from HBM (dense, graphs, tile, auto, fit).
# TWELL_BENCH_ARGS adds options to every bench call (e.g. "--variants").
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/twell.log"
{
  [ -d .deps ] || bash scripts/deps_unpack.sh
  nvidia-smi -L
  nvidia-smi --query-gpu=name,clocks.sm,clocks.max.sm,power.draw,temperature.gpu --format=csv
  echo "== build"; t0=$(date +%s)
  printf '#include "twell/ffn.cuh"\nint main(){TwellSlicedWS w; return twell_sliced_create(&w,64,2048,5632,8,1,0);}\n' > /tmp/sl_ptxas.cu
  ( nvcc -O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -Icore --expt-relaxed-constexpr -Xptxas -v \
      -c /tmp/sl_ptxas.cu -o /tmp/sl_ptxas.o > /tmp/sl_ptxas.log 2>&1 ) &
  rm -f build/gpu_test_twell build/bench_ffn build/bench_decode
  make -j"$(nproc)" build/test_twell_format build/gpu_test_twell build/bench_ffn build/bench_decode 2>&1 | grep -E "error|warning" | head -30
  wait
  grep -A2 "Compiling entry function '_Z[0-9]*twell_\(sl_\|pack_mask\)" /tmp/sl_ptxas.log | grep -E "Compiling|registers|spill" \
    | sed -e 's/ptxas info    : //' -e "s/Compiling entry function '_Z[0-9]*\([a-z_]*\).*/\1:/"
  echo "build $(( $(date +%s) - t0 )) s"
  echo "== CPU format test"; ./build/test_twell_format 2>&1 | tail -2
  echo "== GPU tests"; t0=$(date +%s); timeout 150 ./build/gpu_test_twell 2>&1; echo "gpu_test_twell rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench M=65536, nnz 8 16 29 64 128, both patterns (defaults, untuned)"; t0=$(date +%s)
  timeout 150 ./build/bench_ffn --M 65536 --nnz 8,16,29,64,128 --reps 10 --no-wgmma $TWELL_BENCH_ARGS 2>&1
  echo "bench M=65536 rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench M=65536, nnz 8 29 uniform, --tune (gate GEMMs tuned) --sliced (sliced up/down line)"; t0=$(date +%s)
  timeout 120 ./build/bench_ffn --M 65536 --nnz 8,29 --pattern uniform --reps 10 --no-wgmma --tune --sliced 2>&1
  echo "bench tuned rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench M=16384,131072, nnz 29, uniform"; t0=$(date +%s)
  timeout 90 ./build/bench_ffn --M 16384,131072 --nnz 29 --pattern uniform --reps 10 --no-wgmma $TWELL_BENCH_ARGS 2>&1
  echo "bench other M rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench variants (gate chunks, GEMM with / without the mask epilogue, tuning, packs, every up/down), M=65536 nnz 29"
  t0=$(date +%s)
  timeout 120 ./build/bench_ffn --M 65536 --nnz 29 --pattern uniform --reps 5 --no-wgmma --variants 2>&1
  echo "bench variants rc=$? ($(( $(date +%s) - t0 )) s)"
  echo "== bench_decode, M 1-64, nnz 8 29 64 256 50%"; t0=$(date +%s)
  timeout 120 ./build/bench_decode --nnz 8,29,64,256,50% 2>&1
  echo "bench_decode rc=$? ($(( $(date +%s) - t0 )) s)"
} > "$LOG" 2>&1
grep -E "PASSED|FAILED|SKIPPED|rc=|FAIL|HANG|error|registers|spill|sl_|pack_mask|warning|crossover|calibrated|fitted|tuned|sliced:|^[0-9]+ +(uniform|heavy)|^M |^[0-9]+ +[0-9]|note|^    (gate|gemm|tune|updown|options)" "$LOG" | grep -v "^error: twell" | tail -80
