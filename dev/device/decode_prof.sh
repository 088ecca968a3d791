#!/usr/bin/env bash
# Where a batch-1 decoding step spends its time (issue 25), in one GPU call:
#   bash dev/device/decode_prof.sh        (carry deps-debs)
# 1. `infer --bench` at 1 sample on the 0.5B and 2B presets (SYNTHETIC 29): decode ms/step with the host's share, the
#    graph replay's GPU time, and the weight-read yardstick at the measured copy bandwidth.
# 2. Nsight Compute (NCU=0: skip) over one replayed decoding step of each FFN mode (0.5B): per kernel its duration and DRAM bytes
#    ($OUT/decode_kernels.md), so the step's time splits into weight streaming, small kernels and gaps.
# TESTS= (default gpu_test_kernels gpu_test_infer gpu_test_twell) run first; SAMPLES= sequence counts (default 1),
# PRESETS= (default 0.5B 2B), GEMV_M= bench_gemv row counts (default 1; 0: skip).
source dev/device/preamble.sh decode_prof.log
# carried binaries were linked on the dev box without .deps' rpath: they find cJSON / cmocka through this
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
TESTS=${TESTS-gpu_test_kernels gpu_test_infer gpu_test_twell}
targets="build/infer build/bench_gemv"; for t in $TESTS; do targets="$targets build/$t"; done
make -j"$(nproc)" $targets > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
el; echo "built"
for t in $TESTS; do
  timeout 200 "./build/$t" > "/tmp/$t.txt" 2>&1; rc=$?
  echo "$(el) $t rc=$rc: $(grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]' "/tmp/$t.txt" | tr '\n' ' ')"
  [ $rc -ne 0 ] && tail -40 "/tmp/$t.txt"
done
# 0. the GEMV's streaming variants per weight shape (bench_gemv), M = 1 (and GEMV_M, e.g. "1 4")
for Mg in ${GEMV_M:-1}; do
  [ "$Mg" = 0 ] && continue
  timeout 120 ./build/bench_gemv --M $Mg > "/tmp/bench_gemv_M$Mg.txt" 2>&1; echo "$(el) bench_gemv M=$Mg rc=$?"
  cat "/tmp/bench_gemv_M$Mg.txt"
done
# 1. this tree's infer, and build/infer_base (carried, another commit) beside it when present
for p in ${PRESETS:-0.5B 2B}; do
  for ns in ${SAMPLES:-1}; do
    for b in build/infer_base build/infer; do
      [ -x $b ] || continue
      f="/tmp/bench_$(basename $b)_${p}_s$ns.txt"
      timeout 200 $b --preset $p --synthetic-nnz 29 --bench --samples $ns --prompt-len 256 \
        --tokens ${TOKENS:-128} --reps 3 --energy-ms 0 > "$f" 2>&1; rc=$?
      echo "$(el) $b $p samples $ns rc=$rc"; sed -n '/bench:/,$p' "$f" | grep -v "bench-result\|energy"
    done
  done
done
tar czf "$OUT/bench_raw.tar.gz" /tmp/bench_*.txt /tmp/gpu_test_*.txt 2>/dev/null
[ "${NCU:-1}" = 1 ] || exit 0
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
timeout 300 "$NCU" --profile-from-start off --metrics gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum \
  --csv --print-units base ./build/infer --preset 0.5B --synthetic-nnz 29 --bench --samples 1 --prompt-len 64 --tokens 8 --reps 1 \
  --energy-ms 0 > /tmp/ncu_decode.csv 2> /tmp/ncu_decode.err; echo "$(el) ncu rc=$?"
tail -3 /tmp/ncu_decode.err
python3 - /tmp/ncu_decode.csv > "$OUT/decode_kernels.md" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(l for l in open(sys.argv[1]) if l.startswith('"'))]
hdr = rows[0]; data = rows[1:]
ix = {k: hdr.index(k) for k in ("ID", "Kernel Name", "Metric Name", "Metric Value")}
kern = collections.OrderedDict()
for r in data:
    try: v = float(r[ix["Metric Value"]].replace(",", ""))
    except ValueError: continue
    k = int(r[ix["ID"]]); d = kern.setdefault(k, {"name": r[ix["Kernel Name"]]})
    d[r[ix["Metric Name"]]] = v
# replays come in mode order (dense, sparse, auto); a step starts at the embedding kernel
steps, cur = [], None
for k, d in kern.items():
    if "embedding" in d["name"]:
        cur = []; steps.append(cur)
    if cur is not None: cur.append(d)
for mode, st in zip(("dense", "sparse", "auto"), steps):
    tot = sum(d.get("gpu__time_duration.sum", 0) for d in st) / 1e3
    by = sum(d.get("dram__bytes_read.sum", 0) for d in st)
    print(f"## {mode}: {len(st)} kernels, {tot:.1f} us of kernel time (each alone, caches flushed), {by/1e6:.0f} MB read\n")
    agg = collections.OrderedDict()
    for d in st:
        n = d["name"][:60]; a = agg.setdefault(n, [0, 0.0, 0.0])
        a[0] += 1; a[1] += d.get("gpu__time_duration.sum", 0) / 1e3; a[2] += d.get("dram__bytes_read.sum", 0)
    print("| kernel | count | us total | us each | MB read | GB/s |\n|---|---|---|---|---|---|")
    for n, (c, t, b) in sorted(agg.items(), key=lambda x: -x[1][1]):
        print(f"| {n} | {c} | {t:.1f} | {t/c:.2f} | {b/1e6:.1f} | {b/1e3/t if t else 0:.0f} |")
    print()
PY
cat "$OUT/decode_kernels.md" | head -80
el
