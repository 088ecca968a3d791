#!/usr/bin/env bash
# Nsight Compute look at the D-sliced up/down kernels (dev/bench/bench_updown.cu, one config, M=65536 nnz 29).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
make -j"$(nproc)" build/bench_updown > /dev/null 2>&1 || { echo "build failed"; exit 1; }
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
echo "ncu: $NCU"
timeout 150 "$NCU" --clock-control none -k "regex:dslice|up_kernel|down_kernel|updown" -c 6 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section LaunchStats --section SchedulerStats \
  ./build/bench_updown --M 65536 --nnz 29 --reps 1 > "$OUT/ncu.txt" 2>&1
echo "ncu rc=$?"
grep -E "^  [a-z_]+.*\(|Duration|Throughput|Warp Cycles|Stall|Occupancy|Registers|Shared Memory|Bank|L2 Hit|Issued|Eligible|No Eligible|Block Size|Grid Size" "$OUT/ncu.txt" | head -150
