#!/usr/bin/env bash
# A/B check of a restructuring on the GPU machine: the tree in OLD_DIR (e.g. `git archive <commit>` unpacked into
# an ignored folder and carried) against this tree, in one call on one GPU. Logs under $OUT.
#   bash dev/device/ab.sh OLD_DIR
# 1. clean builds of both trees, timed (old: `make -j N all`, which built everything; new: `make -j N` for the
#    product, then the tests and benchmarks)   2. `make test` on the new tree
# 3. bench_ffn at M 65536, nnz 8/29/64, and the trainer's 0.5B --bench, old and new binaries alternated twice.
set -u
OLD=${1:?usage: ab.sh OLD_DIR}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/ab.log") 2>&1
J=$(nproc)
echo "== ab.sh on $(nvidia-smi -L | head -1), $J cores"
[ -d .deps ] || bash scripts/deps_unpack.sh >/dev/null
[ -d "$OLD/.deps" ] || cp -r .deps "$OLD/.deps"
t=$(date +%s%N); make -C "$OLD" -j"$J" all > "$OUT/build_old.log" 2>&1 || { tail -20 "$OUT/build_old.log"; exit 1; }
echo "old: make -j$J all: $(( ($(date +%s%N) - t) / 1000000 )) ms"
make clean >/dev/null
t=$(date +%s%N); make -j"$J" > "$OUT/build_new.log" 2>&1 || { tail -20 "$OUT/build_new.log"; exit 1; }
echo "new: make -j$J (product): $(( ($(date +%s%N) - t) / 1000000 )) ms"
t=$(date +%s%N); make -j"$J" bench tests-cpu tests-gpu >> "$OUT/build_new.log" 2>&1 || { tail -20 "$OUT/build_new.log"; exit 1; }
echo "new: make -j$J bench tests-cpu tests-gpu (after the product): $(( ($(date +%s%N) - t) / 1000000 )) ms"

echo "== make test (new tree)"
make test > "$OUT/test_new.log" 2>&1; echo "make test rc=$?"; tail -3 "$OUT/test_new.log"

FFN_ARGS="--M 65536 --nnz 8,29,64 --pattern uniform --reps 10"
for round in 1 2; do
  for side in old new; do
    if [ $side = old ]; then b=$OLD/build; extra="--no-wgmma"; else b=build; extra="--no-cublas"; fi
    echo "== bench_ffn $side round $round"
    "$b/bench_ffn" $FFN_ARGS $extra 2>&1 | grep -E "^\| |nnz|uniform" | head -12
  done
done
for round in 1 2; do
  for side in old new; do
    if [ $side = old ]; then b=$OLD/build; else b=build; fi
    echo "== train_gpt_relu --preset 0.5B --bench 12 ($side, round $round)"
    "$b/train_gpt_relu" --preset 0.5B --batch 4 --seq 2048 --bench 12 2>&1 | grep -E "^bench:|tokens/ms|peak" | head -4
  done
done
echo "== done"
