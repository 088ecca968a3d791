#!/usr/bin/env bash
# The paper's training recipe for one size (PAPER.md): AdamW lr 1e-3, betas (0.9, 0.95), wd 0.1, clip 1.0,
# cosine with 600 warm-up steps, 1M-token batches (2^20 tokens = NGPU x MICRO x 2048 x gradient-accumulation
# steps), sequence 2048, lambda 2e-5, chinchilla-optimal tokens (0.5B: 10B ... 2B: 40B), FineWeb-Edu shards from
# scripts/fineweb.sh. Resumable: re-running continues from the newest checkpoint in the output dir (on the same or
# another GPU count: the ZeRO-1 optimizer shards are re-cut).
#   usage: scripts/run_paper.sh 0.5B|1B|1.5B|2B
#   env:   NGPU (GPUs on this node, default: all visible), MICRO (sequences per GPU per micro-step), DATA (shard
#          dir), OUT (default log_<size>), TOKENIZER; LAUNCH=mpirun|script to force a launcher (default: mpirun when
#          the binary is linked with MPI and mpirun exists, else scripts/run_dist.sh); STEPS, CKPT_EVERY (default
#          500) and EXTRA (more trainer options, e.g. "--vocab 50304 --stop-at 60") for short test runs
# NGPU x MICRO must divide 512 (powers of two), so that 2^20 tokens split into whole micro-steps on every GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
SIZE=${1:?usage: scripts/run_paper.sh 0.5B|1B|1.5B|2B}
case $SIZE in
  0.5B) STEPS=${STEPS:-9537}; MICRO=${MICRO:-8}; RC=0 ;;
  1B)   STEPS=${STEPS:-19073}; MICRO=${MICRO:-8}; RC=1 ;;
  1.5B) STEPS=${STEPS:-28610}; MICRO=${MICRO:-4}; RC=1 ;;
  2B)   STEPS=${STEPS:-38147}; MICRO=${MICRO:-4}; RC=2 ;;
  *) echo "error: unknown size $SIZE (expected 0.5B, 1B, 1.5B or 2B)" >&2; exit 1 ;;
esac
if [ -z "${NGPU:-}" ]; then
  NGPU=$(nvidia-smi -L 2>/dev/null | grep -c '^GPU' || true)
  [ "$NGPU" -ge 1 ] 2>/dev/null || NGPU=1
fi
TOTAL=1048576
if [ $((TOTAL % (MICRO * 2048 * NGPU))) -ne 0 ]; then
  echo "error: 1M-token batch ($TOTAL) is not a multiple of NGPU x MICRO x 2048 = $NGPU x $MICRO x 2048;" \
       "use powers of two for NGPU and MICRO" >&2
  exit 1
fi
DATA=${DATA:-data/fineweb}
ls "$DATA"/*_train_*.bin >/dev/null 2>&1 || { echo "error: no shards in $DATA (run scripts/fineweb.sh)" >&2; exit 1; }
make -j"$(nproc)" build/train_gpt_relu >/dev/null
tok=(); [ -n "${TOKENIZER:-}" ] && tok=(--tokenizer "$TOKENIZER")
args=(--train "$DATA/*_train_*.bin" --val "$DATA/*_val_*.bin" --preset "$SIZE"
  --batch "$MICRO" --seq 2048 --total-batch $TOTAL --steps $STEPS --warmup 600 --lr 1e-3 --final-lr-frac 0.1
  --beta1 0.9 --beta2 0.95 --wd 0.1 --grad-clip 1.0 --l1 2e-5 --recompute $RC --eval-every 250 --eval-batches 20
  --sample-every 2000 --ckpt-every "${CKPT_EVERY:-500}" --log-stats-every 25 --out "${OUT:-log_$SIZE}" --resume
  "${tok[@]}")
read -r -a extra <<< "${EXTRA:-}"
args+=("${extra[@]}")
echo "run_paper: $SIZE on $NGPU GPU(s), $MICRO x 2048 tokens per GPU per micro-step," \
     "$((TOTAL / (MICRO * 2048 * NGPU))) micro-steps per step"
export NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
if [ "$NGPU" -eq 1 ]; then exec ./build/train_gpt_relu "${args[@]}"; fi
launch=${LAUNCH:-}
if [ -z "$launch" ]; then
  if command -v mpirun >/dev/null && ldd build/train_gpt_relu | grep -q libmpi; then launch=mpirun; else launch=script; fi
fi
if [ "$launch" = mpirun ]; then
  exec mpirun -np "$NGPU" -x NCCL_NVLS_ENABLE ./build/train_gpt_relu "${args[@]}"
else
  exec bash scripts/run_dist.sh "$NGPU" ./build/train_gpt_relu "${args[@]}"
fi
