#!/usr/bin/env bash
# Issue 26 on one GPU in one call (~9 minutes on an H100): build, scripts/paper_tables.sh on the sizes that fit its
# budget, scripts/l1_sweep.sh on the starter data, outputs bundled under $OUT (at most 8 files):
#   paper.log           this script's console (progress, ETA, each size's and lambda's result lines)
#   paper_tables.md     the efficiency table beside the paper's      paper_tables.json   every number, GPU, commit, date
#   l1_sweep.md / .csv / .json                                       the sweep's summary
#   raw.tar.gz          every raw output (infer/trainer outputs per size, each lambda's train.log, metrics.log,
#                       infer.txt): dev/plots.py reads them on another machine
# Run from the repo root:  bash dev/device/paper.sh      (carry data/ for the sweep: data/starter + the GPT-2 encoder)
# env: PARTS ("tables sweep"; "tables" alone runs all four sizes in PT_BUDGET 480 s)  T_TOTAL (530 s for everything)
#      PT_BUDGET (tables' share; default: 250 with the sweep, 470 without)  SIZES ("0.5B 1B 1.5B 2B")  SW_STEPS, SW_*,
#      PT_* (see the two scripts)  COMMIT (the tree's commit, when it has no .git)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/paper.log") 2>&1
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
PARTS=${PARTS:-tables sweep}
T_TOTAL=${T_TOTAL:-530}
case " $PARTS " in *" sweep "*) def_pt=250 ;; *) def_pt=470 ;; esac
export PT_BUDGET=${PT_BUDGET:-$def_pt}
export COMMIT=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
W=out/paper_device; rm -rf "$W"; mkdir -p "$W"
echo "== paper.sh on $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); parts: $PARTS; commit $COMMIT"
[ -d .deps ] || [ -z "$(ls deps-debs/*.deb 2>/dev/null)" ] || bash scripts/deps_unpack.sh >/dev/null
echo "== [$(el)s] build"
make -j"$(nproc)" build/infer build/train_gpt_relu build/test_energy build/test_line_prefix > "$OUT/build.log" 2>&1 \
  || { tail -40 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
rm -f "$OUT/build.log"
./build/test_energy 2>&1 | tail -1; ./build/test_line_prefix 2>&1 | tail -1
if [[ " $PARTS " == *" tables "* ]]; then
  echo "== [$(el)s] paper_tables.sh (budget ${PT_BUDGET}s): ${SIZES:-0.5B 1B 1.5B 2B}"
  PT_OUT=$W/tables PT_SKIP_BUILD=1 timeout $(( PT_BUDGET + 60 )) bash scripts/paper_tables.sh ${SIZES:-0.5B 1B 1.5B 2B}
  echo "paper_tables rc=$?"
  cp "$W/tables/paper_tables.md" "$W/tables/paper_tables.json" "$OUT/" 2>/dev/null
fi
if [[ " $PARTS " == *" sweep "* ]]; then
  left=$(( T_TOTAL - $(el) - 15 ))
  if [ ! -f data/starter/brown_train_000000.bin ]; then
    echo "== sweep SKIPPED: data/starter missing (carry data/ into the call)"
  elif [ "$left" -lt 60 ]; then
    echo "== sweep SKIPPED: ${left}s left"
  else
    echo "== [$(el)s] l1_sweep.sh (budget ${left}s)"
    SW_OUT=$W/sweep SW_BUDGET=$(( left - 10 )) SW_SKIP_BUILD=1 timeout $(( left + 20 )) bash scripts/l1_sweep.sh
    echo "l1_sweep rc=$?"
    cp "$W/sweep/l1_sweep.md" "$W/sweep/l1_sweep.csv" "$W/sweep/l1_sweep.json" "$OUT/" 2>/dev/null
  fi
fi
# raw outputs without checkpoints
(cd "$W" && find . -type f \( -name '*.txt' -o -name '*.log' -o -name '*.out' -o -name 'meta.json' \) -print0 \
  | tar --null -czf "$OUT/raw.tar.gz" -T -)
echo "== [$(el)s] done; under \$OUT: $(cd "$OUT" && ls | tr '\n' ' ')"
