#!/usr/bin/env bash
# Issue 27 on an 8-GPU machine (nvidia-h100-x8), in two calls of under 10 minutes each. Run from the repo root.
#   PART=scale  (default) 0.5B and 1.5B, B 4 x T 2048 per GPU, on 1, 2, 4 and 8 GPUs (as many as are visible), dense
#               FFN and SYNTHETIC sparse FFN (29 non-zeros per token, --ffn-path sparse): tokens/ms, scaling efficiency
#               (tokens/ms on n GPUs / (n x on 1 GPU)), device memory of rank 0. -> $OUT/scale8.txt
#   PART=recipe the paper's 1.5B recipe (scripts/run_paper.sh: 1M-token batches by gradient accumulation, lambda 2e-5,
#               sequence 2048, FFN path auto) on the starter data for 100 steps: stopped at step 60 (checkpoint), then
#               resumed to 100; peak memory per GPU sampled by nvidia-smi. -> $OUT/recipe.txt (needs data/starter:
#               carry "data")
set -u
OUT=${OUT:-/tmp/scale8_out}; mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0
[ -d .deps ] || bash scripts/deps_unpack.sh > /dev/null 2>&1
make -j32 build/train_gpt_relu > "$OUT/build.log" 2>&1 || { echo "BUILD FAILED"; tail "$OUT/build.log"; exit 1; }
NG=$(nvidia-smi -L | grep -c '^GPU'); nvidia-smi -L | head -1; echo "GPUs: $NG"
BIN=$PWD/build/train_gpt_relu
t0=$(date +%s)
. dev/device/gpu_mem.sh

if [ "${PART:-scale}" = scale ]; then
  {
    printf '%-6s %-7s %5s %10s %11s %10s %9s\n' preset ffn ranks "step ms" "tokens/ms" efficiency "mem GiB"
    for preset in 0.5B 1.5B; do
      for ffn in dense sparse; do
        extra=(); [ $ffn = sparse ] && extra=(--synthetic-nnz 29 --ffn-path sparse)
        base=
        for n in 1 2 4 8; do
          [ "$n" -gt "$NG" ] && continue
          args=(--preset $preset --batch 4 --seq 2048 --bench 12 "${extra[@]}")
          if [ "$n" = 1 ]; then line=$($BIN "${args[@]}" 2>&1 | grep -E '^bench: .*median step [0-9.]+ ms over' | head -1)
          else line=$(bash scripts/run_dist.sh $n $BIN "${args[@]}" 2>&1 | grep -E '^bench: .*median step [0-9.]+ ms over' | head -1); fi
          read -r ms tpms mem < <(echo "$line" | sed -E 's/.*median step ([0-9.]+) ms over [0-9]+ steps, ([0-9.]+) tokens\/ms.*memory used ([0-9.]+) GiB.*/\1 \2 \3/')
          [ -z "${ms:-}" ] && { printf '%-6s %-7s %5d  FAILED\n' $preset $ffn $n; continue; }
          [ -z "$base" ] && base=$tpms
          eff=$(python3 -c "print('%.1f%%' % (100 * $tpms / ($n * $base)))")
          printf '%-6s %-7s %5d %10s %11s %10s %9s\n' $preset $ffn $n "$ms" "$tpms" "$eff" "$mem"
        done
      done
    done
    [ "$ffn" = sparse ] && echo "(sparse: SYNTHETIC sparsity, 29 non-zeros per token in every layer)"
    echo "elapsed $(( $(date +%s) - t0 )) s"
  } 2>&1 | tee "$OUT/scale8.txt"
else
  {
    rm -rf /tmp/recipe
    common=(NGPU=$NG DATA=data/starter OUT=/tmp/recipe STEPS=100 CKPT_EVERY=50)
    gpu_mem_start 500
    echo "== 1.5B recipe on $NG GPUs, steps 1-60 (then stop: checkpoint)"
    env "${common[@]}" EXTRA="--vocab 50304 --ffn-path auto --stop-at 60" bash scripts/run_paper.sh 1.5B > /tmp/recipe_a.txt 2>&1
    echo "rc=$?"; grep -E 'run_paper|data parallel|^step +(1|10|20|30|40|50|60)/|checkpoint|error' /tmp/recipe_a.txt | head -20
    echo "== resume to step 100"
    env "${common[@]}" EXTRA="--vocab 50304 --ffn-path auto" bash scripts/run_paper.sh 1.5B > /tmp/recipe_b.txt 2>&1
    echo "rc=$?"; grep -E 'resumed|^step +(61|70|80|90|100)/|val loss|checkpoint|error' /tmp/recipe_b.txt | head -20
    grep -E 'ffn layer' /tmp/recipe_b.txt | tail -28
    gpu_mem_stop
    echo "elapsed $(( $(date +%s) - t0 )) s"
  } 2>&1 | tee "$OUT/recipe.txt"
  cp /tmp/recipe/metrics.log "$OUT/metrics.log" 2>/dev/null
fi
