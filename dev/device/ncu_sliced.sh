#!/usr/bin/env bash
# Nsight Compute look at the sliced up/down kernels (twell/sliced.cuh: fill, up, down) at M=65536, nnz 29,
# uniform, plus the SASS of their main loops. Logs to $OUT/ncu_sliced.txt and $OUT/sass_sliced.txt.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
[ -d .deps ] || bash scripts/deps_unpack.sh > /dev/null
make -j"$(nproc)" build/bench_ffn > /dev/null 2>&1 || { echo "build failed"; exit 1; }
cuobjdump -sass -fun '_Z20twell_sl_down_kernelPKjPKiPK13__nv_bfloat16S2_PS3_iiiiim' build/bench_ffn > "$OUT/sass_sliced.txt" 2>&1
cuobjdump -sass build/bench_ffn 2>/dev/null | awk '/Function : .*twell_sl_(down|up)_kernel/{f=1; print; next} /Function :/{f=0} f' > "$OUT/sass_sliced.txt"
echo "sass lines: $(wc -l < "$OUT/sass_sliced.txt")"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 240 "$NCU" --clock-control none -k "regex:twell_sl_(down|up|compact)" -c 3 \
  --section SpeedOfLight --section MemoryWorkloadAnalysis --section MemoryWorkloadAnalysis_Tables \
  --section WarpStateStats --section Occupancy --section LaunchStats --section SchedulerStats \
  --section ComputeWorkloadAnalysis --section InstructionStats --section SourceCounters \
  ./build/bench_ffn --M 65536 --nnz 29 --pattern uniform --reps 1 --no-wgmma --no-calibrate > "$OUT/ncu_sliced.txt" 2>&1
echo "ncu rc=$?"
grep -E "^  [a-zA-Z_].*\(|Duration|Throughput|Warp Cycles|Eligible|Issued Ipc|No Eligible|Executed Ipc|Bank|stall|Stall" "$OUT/ncu_sliced.txt" | head -120
