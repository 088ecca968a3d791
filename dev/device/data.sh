#!/usr/bin/env bash
# GPU-machine checks for the data pipeline (CPU only; needs python3 with the HF `tokenizers` package):
# tokenizer.json path vs Hugging Face tokenizers (dev/tokenizer/hf_compare.py) and the CPU data tests.
# Carry data/starter/brown (6 MB) to compare on the Brown corpus; otherwise repository sources are used.
# Writes $OUT/data.log.
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
LOG="$OUT/data.log"
{
  echo "== data.sh $(date -u) $(hostname) commit $(git rev-parse --short HEAD 2>/dev/null)"
  make -j"$(nproc)" build/encode build/tokenize build/test_shard_loader build/test_tokenizer build/test_tokenizer_tool >/dev/null || echo "BUILD FAILED"
  python3 -c 'import tokenizers; print("tokenizers", tokenizers.__version__)' || echo "tokenizers not installed"
  timeout 300 python3 dev/tokenizer/hf_compare.py; echo "hf_compare exit $?"
  for t in build/test_shard_loader build/test_tokenizer build/test_tokenizer_tool; do timeout 120 ./$t 2>&1 | tail -4; done
} 2>&1 | tee "$LOG"
