#!/usr/bin/env bash
# Regenerates test/golden/gpt2_hard.json: hard strings (dev/tokenizer/hard_strings.py) encoded by the
# npm reference gpt-3-encoder. Needs scripts/starter_data.sh to have fetched the npm packages.
set -euo pipefail
cd "$(dirname "$0")/../.."
python3 dev/tokenizer/hard_strings.py > /tmp/sllm_hard_strings.json
node dev/tokenizer/gpt2_ref.js golden /tmp/sllm_hard_strings.json test/golden/gpt2_hard.json
echo "wrote test/golden/gpt2_hard.json ($(wc -c < test/golden/gpt2_hard.json) bytes)"
