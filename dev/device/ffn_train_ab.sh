#!/usr/bin/env bash
# The sparse training FFN on a GPU, in one call: build, GPU tests, then bench_ffn_train of this tree beside a
# baseline binary (build/bench_ffn_train_base, built from another commit and carried), each one interleaving dense
# and sparse in its own process. Usage (repo root on the GPU machine):
#   TESTS="gpu_test_twell_train gpu_test_train_sparse" BENCH_ARGS="--M 16384 --nnz 29" bash dev/device/ffn_train_ab.sh
# Logs: $OUT/ab.log (summary), $OUT/<test>.txt, $OUT/bench_<name>.txt.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/ab.log") 2>&1
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
[ -d .deps ] || bash scripts/deps_unpack.sh > /dev/null
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
TESTS=${TESTS:-gpu_test_twell_train}
targets="build/bench_ffn_train"; for t in $TESTS; do targets="$targets build/$t"; done
make -j"$(nproc)" $targets > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
echo "$(el) built $targets"
for t in $TESTS; do
  timeout "${TEST_TIMEOUT:-150}" "./build/$t" > "$OUT/$t.txt" 2>&1; echo "$(el) $t rc=$?"
  grep -E "^\[  (PASSED|FAILED|SKIPPED)  \]|tests:" "$OUT/$t.txt" | head -8
done
IFS=';' read -ra sets <<< "${BENCH_ARGS:---M 16384 --nnz 29 --reps 10 --prof}"
for s in "${sets[@]}"; do
  for b in build/bench_ffn_train_base build/bench_ffn_train; do
    [ -x "$b" ] || continue
    name=$(basename "$b")_$(echo "$s" | tr -c 'A-Za-z0-9' '_' | cut -c1-40)
    timeout 120 "$b" $s > "$OUT/bench_$name.txt" 2>&1; echo "$(el) $b $s rc=$?"
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
