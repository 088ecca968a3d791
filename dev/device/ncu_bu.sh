#!/usr/bin/env bash
# Nsight Compute look at the blocked up's kernels (twell/up_blocked.cuh: build, up) at M=65536, nnz 29, uniform,
# plus the SASS of the up kernel. Logs to $OUT/ncu_bu.txt and $OUT/sass_bu.txt.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d .deps ] || bash scripts/deps_unpack.sh > /dev/null
make -j"$(nproc)" build/bench_ffn > /dev/null 2>&1 || { echo "build failed"; exit 1; }
cuobjdump -sass build/bench_ffn 2>/dev/null | awk '/Function : .*twell_bu_up_kernel/{f=1; print; next} /Function :/{f=0} f' > "$OUT/sass_bu.txt"
echo "sass lines: $(wc -l < "$OUT/sass_bu.txt")"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 240 "$NCU" --clock-control none -k "regex:twell_bu_(up|build)" -c 2 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section Occupancy \
  --section LaunchStats --section SchedulerStats --section ComputeWorkloadAnalysis --section InstructionStats \
  --section SourceCounters \
  ./build/bench_ffn --M 65536 --nnz 29 --pattern uniform --reps 1 --no-wgmma --no-calibrate --split-up > "$OUT/ncu_bu.txt" 2>&1
echo "ncu rc=$?"
grep -E "^  [a-zA-Z_].*\(|Duration|Throughput|Warp Cycles|Eligible|Issued Ipc|No Eligible|Executed Ipc|Bank|stall|Stall|Executed Instructions|Registers|Achieved Occupancy" "$OUT/ncu_bu.txt" | head -90
