#!/usr/bin/env bash
# The whole test suite on a GPU machine (every GPU it has: the multi-rank tests need 2+), in one call:
#   bash dev/device/maketest.sh            (carry deps-debs and data: the tokenizer goldens and the transformers
#                                           comparison of test_mc_eval need data/starter and data/npm)
# $OUT/maketest.txt  make test's whole output       $OUT/main.log  this script's summary and timings
set -u
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s]"; }
exec > >(tee "$OUT/main.log") 2>&1
export NCCL_NVLS_ENABLE=0
nvidia-smi --query-gpu=index,name,driver_version,memory.total --format=csv,noheader
[ -d .deps ] || bash scripts/deps_unpack.sh > /dev/null
source dev/device/nccl_env.sh
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__)" 2>&1 | tail -1
timeout -k 5 "${MT_TIMEOUT:-560}" make -j"$(nproc)" "${extra[@]}" test > "$OUT/maketest.txt" 2>&1
echo "make test rc=$?"; el
grep -E "^tests:|^failing|^\[  FAILED  \]|^\[  SKIPPED \]|  <-- FAIL" "$OUT/maketest.txt" | head -40
