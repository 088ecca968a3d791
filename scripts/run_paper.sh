#!/usr/bin/env bash
# The paper's training recipe for one preset (PAPER.md): AdamW lr 1e-3, betas (0.9, 0.95), wd 0.1, clip 1.0,
# cosine with 600 warm-up steps, 1M-token batches (here: gradient accumulation on one GPU; multi-GPU is a later
# issue), sequence 2048, lambda 2e-5, chinchilla-optimal tokens (0.5B: 10B ... 2B: 40B), FineWeb-Edu shards
# from scripts/fineweb.sh. Resumable: re-running continues from the newest checkpoint in the output dir.
#   usage: scripts/run_paper.sh 0.5B|1B|1.5B|2B      env: DATA (shard dir), MICRO (micro-batch), TOKENIZER
set -euo pipefail
cd "$(dirname "$0")/.."
PRESET=${1:?usage: scripts/run_paper.sh 0.5B|1B|1.5B|2B}
case $PRESET in
  0.5B) STEPS=9537; MICRO=${MICRO:-8}; RC=0 ;;
  1B)   STEPS=19073; MICRO=${MICRO:-8}; RC=1 ;;
  1.5B) STEPS=28610; MICRO=${MICRO:-4}; RC=1 ;;
  2B)   STEPS=38147; MICRO=${MICRO:-4}; RC=2 ;;
  *) echo "error: unknown preset $PRESET (expected 0.5B, 1B, 1.5B or 2B)" >&2; exit 1 ;;
esac
DATA=${DATA:-data/fineweb}
ls "$DATA"/*_train_*.bin >/dev/null 2>&1 || { echo "error: no shards in $DATA (run scripts/fineweb.sh)" >&2; exit 1; }
make -j"$(nproc)" build/train_gpt_relu >/dev/null
tok=(); [ -n "${TOKENIZER:-}" ] && tok=(--tokenizer "$TOKENIZER")
exec ./build/train_gpt_relu --train "$DATA/*_train_*.bin" --val "$DATA/*_val_*.bin" --preset "$PRESET" \
  --batch "$MICRO" --seq 2048 --total-batch 1048576 --steps $STEPS --warmup 600 --lr 1e-3 --final-lr-frac 0.1 \
  --wd 0.1 --grad-clip 1.0 --l1 2e-5 --recompute $RC --eval-every 250 --eval-batches 20 --sample-every 2000 \
  --ckpt-every 500 --log-stats-every 25 --out "log_$PRESET" --resume "${tok[@]}"
