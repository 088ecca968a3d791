#!/usr/bin/env bash
# Nsight Compute: where one kernel's warps stall, instruction by instruction (SASS with its stall samples), plus
# the warp-state summary. Usage: bash dev/device/ncu_hot.sh KERNEL_REGEX BINARY [ARGS...]
#   e.g. bash dev/device/ncu_hot.sh gate_wgmma build/bench_ffn --M 65536 --nnz 29 --pattern uniform --reps 1 \
#        --no-cublas --no-calibrate
# Writes $OUT/ncu_<regex>_details.txt (sections) and $OUT/ncu_<regex>_hot.txt (the 60 SASS lines with the most
# stall samples, with their stall reasons).
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
re=$1; shift
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
rep=/tmp/ncu_hot_$$
timeout 300 "$NCU" --clock-control none -k "regex:$re" -c 1 --section SpeedOfLight --section WarpStateStats \
  --section SourceCounters --section SchedulerStats -o "$rep" "$@" > "$OUT/ncu_${re}_run.txt" 2>&1
echo "ncu rc=$?"
"$NCU" -i "$rep.ncu-rep" --page details > "$OUT/ncu_${re}_details.txt" 2>&1
"$NCU" -i "$rep.ncu-rep" --page source --print-source sass --csv > "$rep.csv" 2>&1
python3 - "$rep.csv" > "$OUT/ncu_${re}_hot.txt" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr = next((i for i, r in enumerate(rows) if any("Source" == c or "Address" in c for c in r)), None)
if hdr is None:
    print("no source table"); print("\n".join(",".join(r) for r in rows[:20])); sys.exit()
h = rows[hdr]
def col(name):
    return next((i for i, c in enumerate(h) if c.startswith(name)), None)
cs = col("Warp Stall Sampling (All")
src = col("Source")
reasons = [i for i, c in enumerate(h) if c.startswith("stall_") or "Stall" in c and i != cs]
body = [r for r in rows[hdr + 1:] if len(r) == len(h)]
def num(x):
    try: return float(x.replace(",", ""))
    except: return 0.0
tot = sum(num(r[cs]) for r in body) or 1
print("columns:", h)
print("total samples", tot)
# where the samples are along the kernel (buckets of 250 SASS lines: main loop vs epilogue)
B = 250
for b in range(0, len(body), B):
    part = sum(num(r[cs]) for r in body[b:b + B])
    if part / tot >= 0.005:
        print(f"lines {b:5d}-{min(b + B, len(body)) - 1:5d}: {100 * part / tot:5.1f}% of the samples")
for i, r in sorted(enumerate(body), key=lambda t: -num(t[1][cs]))[:60]:
    print(f"{i:6d} {100*num(r[cs])/tot:5.1f}%  {r[src][:90]}")
PY
head -5 "$OUT/ncu_${re}_hot.txt" | cut -c1-300
grep -E "Duration|Warp Cycles Per Issued|Eligible|Issued Warp|No Eligible|Stall" "$OUT/ncu_${re}_details.txt" | head -30
