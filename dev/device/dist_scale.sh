#!/usr/bin/env bash
# Data-parallel scaling of the 0.5B preset (issue 22) in one call on a 4-GPU machine: world 1 (before and after,
# for the baseline's noise), then 2 and 4 ranks with the default (reduce-to-owner) and NCCL's CTAs capped at 4, 8,
# 16, all-reduce, and no reduction at all (--debug-no-reduce: the step without communication). Same per-GPU batch
# (B 4 x T 2048). Logs under $OUT: scale.txt (every bench line), build.log. MEM15=1: instead, 1.5B at B 8 on all
# GPUs, forced dense vs SYNTHETIC sparse (29 non-zeros per token): speed and peak memory per GPU (mem15.txt).
# COOP=1: instead, 0.5B with SYNTHETIC 29 non-zeros, --ffn-path dense and sparse, on 1 rank, all ranks and all ranks
# without reduction: does the sparse FFN's cooperative dense-row kernel (which starts only when all its CTAs fit on
# the GPU) wait for NCCL's kernels and lose the overlap of communication and compute? (coop.txt)
set -u
OUT=${OUT:-/tmp/scale_out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
[ -d .deps ] || bash scripts/deps_unpack.sh > /dev/null 2>&1
make -j32 build/train_gpt_relu > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; tail "$OUT/build.log"; exit 1; }
NG=$(nvidia-smi -L | grep -c '^GPU'); nvidia-smi -L | head -1; echo "GPUs: $NG"
BIN=$PWD/build/train_gpt_relu
. dev/device/gpu_mem.sh
B05="--preset 0.5B --batch 4 --seq 2048 --bench ${BENCH_STEPS:-24}"
one() {  # label, ranks, extra flags
  local lab=$1 n=$2; shift 2
  local line
  if [ "$n" = 1 ]; then line=$($BIN $B05 "$@" 2>&1 | grep -E '^bench: .*median step [0-9.]+ ms over|^error' | head -2)
  else line=$(bash scripts/run_dist.sh "$n" $BIN $B05 "$@" 2>&1 | grep -E '^bench: .*median step [0-9.]+ ms over|^error' | head -2); fi
  printf '%-34s %s\n' "$lab" "$(echo "$line" | sed -E 's/.*median step ([0-9.]+) ms over ([0-9]+) steps, ([0-9.]+) tokens\/ms.*memory used ([0-9.]+) GiB.*/\1 ms  \3 tokens\/ms  \4 GiB/')"
}
if [ -n "${COOP:-}" ]; then
  for p in dense sparse; do
    one "1 rank, $p" 1 --synthetic-nnz 29 --ffn-path $p
    one "$NG ranks, $p" "$NG" --synthetic-nnz 29 --ffn-path $p
    one "$NG ranks, $p, --debug-no-reduce" "$NG" --synthetic-nnz 29 --ffn-path $p --debug-no-reduce
  done 2>&1 | tee "$OUT/coop.txt"
  exit 0
fi
if [ -n "${MEM15:-}" ]; then  # 1.5B at the paper's micro-batch (8 x 2048 per GPU) on every GPU: dense vs sparse
  B15="--preset 1.5B --batch 8 --seq 2048 --bench 6 --synthetic-nnz 29"
  for p in dense sparse; do
    echo "-- 1.5B, B 8, $NG ranks, SYNTHETIC 29 nnz, --ffn-path $p"
    gpu_mem_start
    bash scripts/run_dist.sh $NG $BIN $B15 --ffn-path $p 2>&1 | grep -E '^bench: |^error' | grep -v 'without profiling'
    gpu_mem_stop
  done 2>&1 | tee "$OUT/mem15.txt"
  exit 0
fi
{
  one "1 rank" 1
  for n in 2 4; do
    [ "$n" -gt "$NG" ] && continue
    one "$n ranks (default: owner)" $n
    for c in 4 8 16; do one "$n ranks, --dist-max-ctas $c" $n --dist-max-ctas $c; done
    one "$n ranks, --grad-reduce allreduce" $n --grad-reduce allreduce
    one "$n ranks, --debug-no-reduce" $n --debug-no-reduce
  done
  one "1 rank (again)" 1
  [ -n "${SPARSE:-}" ] && { one "1 rank, SYNTHETIC 29 nnz" 1 --synthetic-nnz 29; one "4 ranks, SYNTHETIC 29 nnz" 4 --synthetic-nnz 29; }
} 2>&1 | tee "$OUT/scale.txt"
