#!/usr/bin/env bash
# Greedy generation with --ffn dense, sparse and auto from each checkpoint given: the token ids must be the same.
#   bash dev/device/greedy_same.sh CKPT_DIR ...     (needs data/starter for the prompts; prints one line per case)
# Prompts: SAMPLES sequences of PROMPT_LEN token ids from the starter validation shard (the prefill runs the tile
# path at this length), then TOKENS greedy tokens (the decode path). Exit 1 if any case differs.
set -u
SAMPLES=${SAMPLES:-4}; PROMPT_LEN=${PROMPT_LEN:-400}; TOKENS=${TOKENS:-64}
ids=$(python3 - "$PROMPT_LEN" <<'PY'
import sys, numpy as np
n = int(sys.argv[1])
t = np.fromfile('data/starter/brown_val_000000.bin', dtype=np.uint16, offset=1024)
print(','.join(str(int(x)) for x in t[1000:1000 + n]))
PY
)
bad=0
for ck in "$@"; do
  for mode in dense sparse auto; do
    ./build/infer --ckpt "$ck" -q -T 0 -n "$TOKENS" --samples "$SAMPLES" --prompt-ids "$ids" --ffn "$mode" \
      --ignore-eos > "/tmp/greedy_$mode.txt" 2> "/tmp/greedy_$mode.err" || { echo "$ck $mode: infer failed"; cat "/tmp/greedy_$mode.err"; bad=1; }
  done
  for mode in sparse auto; do
    if cmp -s /tmp/greedy_dense.txt "/tmp/greedy_$mode.txt"; then
      echo "greedy $ck: $mode = dense ($SAMPLES x $TOKENS tokens after $PROMPT_LEN prompt tokens)"
    else
      n=$(paste -d'\n' /tmp/greedy_dense.txt "/tmp/greedy_$mode.txt" | awk 'NR%2{a=$0;next}{split(a,x,",");split($0,y,",");for(i=1;i<=length(x);i++)if(x[i]!=y[i]){print i;break}}' | head -1)
      echo "greedy $ck: $mode DIFFERS from dense (first differing token of a sample: ${n:-?})"; bad=1
    fi
  done
done
exit $bad
