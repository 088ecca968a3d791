#!/usr/bin/env bash
# Hugging Face interop check of the CPU reference + checkpoint format (issue 2), for the GPU machine
# (needs python3 with torch, transformers and safetensors; no GPU is used). Run from the repo root
# after scripts/deps_unpack.sh. Writes $OUT/ref.log; exit status non-zero on failure.
set -uo pipefail
OUT=${OUT:-/tmp/out}
mkdir -p "$OUT"
LOG="$OUT/ref.log"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/ref_interop.XXXXXX")
{
  echo "== ref.sh $(date -u +%FT%TZ) commit $(git rev-parse --short HEAD 2>/dev/null || echo '?')"
  make -j"$(nproc)" build/ref_export build/test_ref_model build/test_ref_gradcheck build/test_checkpoint || exit 1
  build/test_ref_model && build/test_ref_gradcheck && build/test_checkpoint || exit 1
  build/ref_export "$WORK" || exit 1
  python3 dev/hf_interop.py --pure "$WORK/mha" "$WORK/gqa" || exit 1
  python3 -c "import torch, transformers, safetensors; print('python', __import__('sys').version.split()[0], 'torch', torch.__version__, 'transformers', transformers.__version__, 'safetensors', safetensors.__version__)"
  python3 dev/hf_interop.py "$WORK/mha" "$WORK/gqa"
} 2>&1 | tee "$LOG"
rc=${PIPESTATUS[0]}
cp "$WORK/mha/config.json" "$OUT/ref_config_example.json" 2>/dev/null
rm -rf "$WORK"
echo "ref.sh: exit $rc" | tee -a "$LOG"
exit "$rc"
