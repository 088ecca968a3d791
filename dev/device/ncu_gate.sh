#!/usr/bin/env bash
# Nsight Compute look at the fused wgmma gate kernel at M=65536, nnz 29.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
make -j"$(nproc)" build/bench_ffn > /dev/null 2>&1 || { echo "build failed"; exit 1; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 200 "$NCU" --clock-control none -k "regex:gate_wgmma" -c 4 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section LaunchStats --section SchedulerStats --section ComputeWorkloadAnalysis \
  ./build/bench_ffn --M 65536 --nnz 29 --pattern uniform --reps 1 --no-cublas --no-calibrate > "$OUT/ncu_gate.txt" 2>&1
echo "ncu rc=$?"
grep -E "^  [a-zA-Z_].*\(|Duration|Throughput|Warp Cycles|Eligible|Issued|Occupancy|Registers|Shared Memory Config|Block Size|Grid Size|Cluster|L2 Hit|Stall" "$OUT/ncu_gate.txt" | head -120
