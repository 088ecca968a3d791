#!/usr/bin/env bash
# AUTO against the faster of dense and sparse (issue 25), prefill and decode, in one GPU call:
#   bash dev/device/auto_check.sh        (carry deps-debs and data: the quick start and the sweep train on the starter data)
# Cases: the quick start's checkpoint; the L1 sweep's lambda 0, 1e-4 and 3e-4 checkpoints (scripts/l1_sweep.sh); the
# 0.5B and 2B presets at SYNTHETIC 8, 29, 64 and 128 non-zeros per token and with random weights (about half the gates
# active). Each case is one `build/infer --bench` (dense, sparse and auto in one process); $OUT/auto.md is the table
# (auto / the faster path, per phase), $OUT/auto_raw.tar.gz every infer output. Also runs gpu_test_twell,
# gpu_test_infer and gpu_test_mc_eval first, and greedy_same.sh on the sweep's checkpoints.
# AC_PRESETS_ONLY=1: the preset cases alone (no tests, no training: ~3 min on an H200); AC_REPS (3), AC_TOKENS (16).
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
exec > >(tee "$OUT/auto_main.log") 2>&1
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader
[ -d .deps ] || bash scripts/deps_unpack.sh > /dev/null
targets="build/infer"
[ "${AC_PRESETS_ONLY:-0}" = 1 ] || targets="$targets build/train_gpt_relu build/gpu_test_twell build/gpu_test_infer build/gpu_test_mc_eval"
make -j"$(nproc)" $targets > /tmp/auto_build.log 2>&1 || { tail -30 /tmp/auto_build.log; exit 1; }
el; echo "built"
W=/tmp/auto; rm -rf $W; mkdir -p $W
if [ "${AC_PRESETS_ONLY:-0}" != 1 ]; then
for t in gpu_test_twell gpu_test_infer gpu_test_mc_eval; do
  ./build/$t > "/tmp/$t.txt" 2>&1; echo "$t rc=$?: $(grep -E '^\[  (PASSED|FAILED) ' /tmp/$t.txt | tr '\n' ' ')"
done
grep -E "calibrated|FAILED|ERROR" /tmp/gpu_test_twell.txt | head
QS_OUT=$W/quickstart QS_SKIP_INFER=1 bash scripts/quickstart.sh > $W/quickstart.train.txt 2>&1; echo "quickstart rc=$?"; el
./build/infer --ckpt $W/quickstart --bench --samples 8 --prompt-len 448 --tokens 32 --reps 3 --energy-ms 0 --stats \
  > $W/case_quickstart.txt 2>&1
SW_OUT=$W/sweep SW_SKIP_BUILD=1 SW_BUDGET=200 bash scripts/l1_sweep.sh 0 1e-4 3e-4 > $W/sweep.txt 2>&1; echo "sweep rc=$?"; el
for l in 0 1e-4 3e-4; do cp $W/sweep/l1_$l/infer.txt $W/case_sweep_l1_$l.txt; done
bash dev/device/greedy_same.sh $W/sweep/l1_0/ckpt_00000400 $W/sweep/l1_1e-4/ckpt_00000400 $W/sweep/l1_3e-4/ckpt_00000400 \
  $W/quickstart
fi
for p in 0.5B 2B; do
  for nz in 8 29 64 128 random; do
    syn=(--synthetic-nnz "$nz"); [ "$nz" = random ] && syn=()
    ./build/infer --preset $p "${syn[@]}" --bench --samples 8 --prompt-len 2048 --chunk 2048 --tokens "${AC_TOKENS:-16}" \
      --reps "${AC_REPS:-3}" \
      --energy-ms 0 --stats > $W/case_${p}_nnz_$nz.txt 2>&1 || echo "$p nnz $nz: infer failed"
  done
  el; echo "$p done"
done
python3 - "$W" > "$OUT/auto.md" <<'PY'
import glob, os, re, sys
w = sys.argv[1]
print("| case | dense prefill ms | sparse | auto | auto / faster | dense decode ms/step (GPU) | sparse | auto | auto / faster |")
print("|---|---|---|---|---|---|---|---|---|")
for f in sorted(glob.glob(os.path.join(w, "case_*.txt"))):
    r, gpu = {}, {}
    for line in open(f, errors="replace"):
        m = re.search(r"bench-result ffn=(\w+) .*prefill_ms=([\d.]+) .*decode_ms_per_step=([\d.]+)", line)
        if m: r[m.group(1)] = [float(m.group(2)), float(m.group(3))]
        # the replayed decoding step on the GPU: the steady state (the host's share above also holds AUTO's one-time
        # measurement of both decoding paths, and with AC_TOKENS 16 at 8 x 2048 there are only 2 steps to average)
        m = re.search(r"^(?:SYNTHETIC )?\s+(dense|sparse|auto)\s+([\d.]+) ms/step on the GPU", line)
        if m: gpu[m.group(1)] = float(m.group(2))
    name = os.path.basename(f)[5:-4]
    if len(r) < 3:
        print(f"| {name} | failed | | | | | | | |"); continue
    if len(gpu) == 3:
        for k in r: r[k][1] = gpu[k]
    cells = []
    for i in (0, 1):
        d, s, a = r["dense"][i], r["sparse"][i], r["auto"][i]
        cells += [f"{d:.3f}", f"{s:.3f}", f"{a:.3f}", f"**{a / min(d, s):.3f}**"]
    print(f"| {name} | " + " | ".join(cells) + " |")
PY
cat "$OUT/auto.md"
(cd $W && tar czf "$OUT/auto_raw.tar.gz" case_*.txt $(ls quickstart.train.txt sweep.txt 2>/dev/null))
el; echo done
