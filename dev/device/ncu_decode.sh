#!/usr/bin/env bash
# Nsight Compute look at the decode path's kernels (gate GEMV with the up fused, down) at M=1 and M=16, nnz 29, D 2048,
# F 5632 (each kernel profiled alone: caches flushed, W1 from HBM).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
make -j"$(nproc)" build/bench_decode > /dev/null 2>&1 || { echo "build failed"; exit 1; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
for M in 1 16; do
  timeout 200 "$NCU" --clock-control none -k "regex:twell_decode_(gate|down)" --launch-skip 40 -c 4 \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
    --section LaunchStats --section SchedulerStats \
    ./build/bench_decode --M $M --nnz 29 --reps 1 --layers 2 > "$OUT/ncu_decode_M$M.txt" 2>&1
  echo "ncu M=$M rc=$?"
  grep -E "^  [a-zA-Z_].*\(|Duration|DRAM Throughput|Memory Throughput|Warp Cycles Per Issued|Eligible Warps|Achieved Occupancy|Theoretical Occupancy|Registers Per|Grid Size|Stall|L2 Hit|Elapsed Cycles" "$OUT/ncu_decode_M$M.txt" | head -60
done
