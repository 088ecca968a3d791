#!/usr/bin/env bash
# The sparse training FFN on a GPU, in one call: build, GPU tests, then bench_ffn_train of this tree beside a
# baseline binary (build/bench_ffn_train_base, built from another commit and carried), each one interleaving dense
# and sparse in its own process. Usage (repo root on the GPU machine):
#   TESTS="gpu_test_twell_train gpu_test_train_sparse" BENCH_ARGS="--M 16384 --nnz 29" bash dev/device/ffn_train_ab.sh
# Logs: $OUT/ab.log (summary), $OUT/<test>.txt, $OUT/bench_<name>.txt.
source dev/device/preamble.sh ab.log
# carried baselines were linked on the dev box without .deps' rpath: they find cJSON / cmocka through this
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
TESTS=${TESTS:-gpu_test_twell_train}
targets="build/bench_ffn_train"; for t in $TESTS; do targets="$targets build/$t"; done
make -j"$(nproc)" $targets > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
echo "$(el) built $targets"
for t in $TESTS; do
  timeout "${TEST_TIMEOUT:-150}" "./build/$t" > "$OUT/$t.txt" 2>&1; rc=$?; echo "$(el) $t rc=$rc"
  grep -E "^\[  (PASSED|FAILED|SKIPPED)  \]|tests:" "$OUT/$t.txt" | head -8
done
IFS=';' read -ra sets <<< "${BENCH_ARGS:---M 16384 --nnz 29 --reps 10 --prof}"
for s in "${sets[@]}"; do
  for b in build/bench_ffn_train_base build/bench_ffn_train; do
    [ -x "$b" ] || continue
    name=$(basename "$b")_$(echo "$s" | tr -c 'A-Za-z0-9' '_' | cut -c1-40)
    timeout 120 "$b" $s > "$OUT/bench_$name.txt" 2>&1; rc=$?; echo "$(el) $b $s rc=$rc"
    grep -vE "^\s*$" "$OUT/bench_$name.txt" | tail -${BENCH_TAIL:-14}
  done
done
if [ -n "${NCU:-}" ]; then  # speed of light of the sparse kernels, this tree's binary
  NCUB=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  timeout 200 "$NCUB" --clock-control none --section SpeedOfLight -k "regex:tt_|twell" \
    build/bench_ffn_train --M 16384 --nnz 29 --reps 1 > "$OUT/ncu_sol.txt" 2>&1; echo "$(el) ncu rc=$?"
  python3 - "$OUT/ncu_sol.txt" <<'PY'
import re, sys
name = None
for line in open(sys.argv[1], errors="replace"):
    m = re.match(r"\s{2}(\w[^(]*?)\(", line)
    if m and "Context" in line: name = m.group(1)
    for key in ("Duration", "Memory Throughput", "Compute (SM) Throughput"):
        if line.strip().startswith(key) and name: print(f"{name[:40]:40s} {line.strip()}")
PY
fi
if [ -n "${NCU_MEM:-}" ]; then  # memory metrics of the sparse kernels (this tree's binary): where the bytes come from
  NCUB=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
  m=gpu__time_duration.sum,lts__t_sector_hit_rate.pct,l1tex__t_sector_hit_rate.pct,lts__throughput.avg.pct_of_peak_sustained_elapsed
  m=$m,l1tex__throughput.avg.pct_of_peak_sustained_active,dram__throughput.avg.pct_of_peak_sustained_elapsed
  m=$m,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sectors_srcunit_tex_op_read.sum,dram__bytes_read.sum
  timeout 200 "$NCUB" --clock-control none --csv --metrics "$m" -k "regex:${NCU_MEM_RE:-tt_wgrad_kernel|tt_fwd_down|tt_pair_dot|tt_assign|tt_bwd_dx}" \
    build/bench_ffn_train --M 16384 --nnz 29 --reps 1 > "$OUT/ncu_mem.csv" 2>&1; echo "$(el) ncu mem rc=$?"
  python3 - "$OUT/ncu_mem.csv" <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1], errors="replace")) if len(r) > 10]
if not rows: print(open(sys.argv[1]).read()[-2000:]); sys.exit()
h = rows[0]; ki, mi, vi = h.index("Kernel Name"), h.index("Metric Name"), h.index("Metric Value")
seen = collections.OrderedDict()
for r in rows[1:]:
    seen.setdefault(r[ki][:34], {})[r[mi]] = r[vi]
short = {"gpu__time_duration.sum": "us", "lts__t_sector_hit_rate.pct": "L2hit%", "l1tex__t_sector_hit_rate.pct": "L1hit%",
         "lts__throughput.avg.pct_of_peak_sustained_elapsed": "L2thr%", "l1tex__throughput.avg.pct_of_peak_sustained_active": "L1thr%",
         "dram__throughput.avg.pct_of_peak_sustained_elapsed": "DRAM%", "sm__warps_active.avg.pct_of_peak_sustained_active": "occ%",
         "lts__t_sectors_srcunit_tex_op_read.sum": "L2rdSect", "dram__bytes_read.sum": "DRAMrd"}
print("kernel".ljust(36) + " ".join(v.rjust(10) for v in short.values()))
for k, d in seen.items():
    print(k.ljust(36) + " ".join(d.get(m, "-").rjust(10)[:10] for m in short))
PY
fi
