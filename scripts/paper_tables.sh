#!/usr/bin/env bash
# The paper's efficiency table on one GPU: per size, dense and sparse FFN side by side in one process each for
#   inference  build/infer --bench: prefill input tokens/ms over PT_SAMPLES x PT_PROMPT random tokens (one forward per
#              sequence batch, --chunk = prompt), energy per token (NVML, >= PT_ENERGY_MS per mode), engine memory;
#   training   build/train_gpt_relu --bench-compare: tokens/ms, device memory used, energy per token.
# Sparsity: a checkpoint's when given (SIZE=CKPT; inference only, training stays SYNTHETIC), else SYNTHETIC: random
# weights calibrated to the paper's mean non-zeros per token of that size (PAPER.md: 39 at 0.5B, 29 at 1.5B, 24 at
# 2B; 1B not given: 34, interpolated by depth) with the per-layer profile PT_PROFILE (default paper).
# Then scripts/paper_report.py writes PT_OUT/paper_tables.md (the paper's figures beside ours, ratios) and
# PT_OUT/paper_tables.json (every number, GPU, commit, date).
#
# usage: scripts/paper_tables.sh [SIZE[=CKPT_DIR] ...]        sizes: 0.5B 1B 1.5B 2B (default: all four)
# env:   PT_OUT (out/paper_tables)  PT_BUDGET seconds for all sizes (480): a size whose estimate does not fit what is
#        left is skipped and the table says so   PT_SAMPLES (16; the paper: 64, which with our KV cache for three FFN
#        engines does not fit 80 GB at 2B)   PT_PROMPT (2048)   PT_REPS (3)   PT_ENERGY_MS (1000)   PT_TRAIN_B (4)
#        PT_TRAIN_STEPS (6)   PT_PROFILE (paper | uniform)   PT_NNZ_<size with _ for .> (e.g. PT_NNZ_0_5B=39)
#        PT_SKIP_BUILD=1   COMMIT (when the tree has no .git)
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${PT_OUT:-out/paper_tables}
BUDGET=${PT_BUDGET:-480}
SAMPLES=${PT_SAMPLES:-16}; PROMPT=${PT_PROMPT:-2048}; REPS=${PT_REPS:-3}; EMS=${PT_ENERGY_MS:-1000}
TB=${PT_TRAIN_B:-4}; TSTEPS=${PT_TRAIN_STEPS:-6}; PROFILE=${PT_PROFILE:-paper}
mkdir -p "$OUT"
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
log() { echo "[paper_tables $(printf '%4d' "$(el)")s] $*"; }

declare -A NNZ=([0.5B]=39 [1B]=34 [1.5B]=29 [2B]=24)
# seconds per size on one H100 (infer + training bench), scaled by what the finished sizes took against theirs
declare -A EST=([0.5B]=45 [1B]=75 [1.5B]=105 [2B]=140)
sizes=(); declare -A CKPT=()
[ $# -eq 0 ] && set -- 0.5B 1B 1.5B 2B
for a in "$@"; do
  s=${a%%=*}
  [ -n "${NNZ[$s]:-}" ] || { echo "error: unknown size \"$s\" (0.5B, 1B, 1.5B or 2B)" >&2; exit 2; }
  if [ "$a" != "$s" ]; then
    CKPT[$s]=${a#*=}
    [ -d "${CKPT[$s]}" ] || { echo "error: checkpoint ${CKPT[$s]} for $s is not a directory" >&2; exit 2; }
  fi
  v=PT_NNZ_${s//./_}; [ -n "${!v:-}" ] && NNZ[$s]=${!v}
  sizes+=("$s")
done
if [ "${PT_SKIP_BUILD:-0}" != 1 ]; then
  log "building build/infer build/train_gpt_relu"
  [ -d .deps ] || [ -z "$(ls deps-debs/*.deb 2>/dev/null)" ] || bash scripts/deps_unpack.sh >/dev/null
  make -j"$(nproc)" build/infer build/train_gpt_relu > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "error: build failed ($OUT/build.log)" >&2; exit 1; }
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
commit=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
[ "$commit" != unknown ] && ! git diff --quiet HEAD -- 2>/dev/null && commit="$commit+dirty"
declare -A STATUS=()
write_meta() {
  {
    printf '{"gpu": "%s", "commit": "%s", "date": "%s", "budget_s": %s, "elapsed_s": %s,\n' \
      "${gpu:-unknown}" "$commit" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$BUDGET" "$(el)"
    printf ' "settings": {"samples": %s, "prompt": %s, "reps": %s, "energy_ms": %s, "train_batch": %s, "seq": 2048, "train_steps": %s, "profile": "%s"},\n' \
      "$SAMPLES" "$PROMPT" "$REPS" "$EMS" "$TB" "$TSTEPS" "$PROFILE"
    printf ' "sizes_requested": [%s],\n' "$(printf '"%s",' "${sizes[@]}" | sed 's/,$//')"
    printf ' "nnz_target": {%s},\n' "$(for s in "${sizes[@]}"; do printf '"%s": %s,' "$s" "${NNZ[$s]}"; done | sed 's/,$//')"
    printf ' "checkpoints": {%s},\n' "$(for s in "${!CKPT[@]}"; do printf '"%s": "%s",' "$s" "${CKPT[$s]}"; done | sed 's/,$//')"
    printf ' "status": {%s}}\n' "$(for s in "${!STATUS[@]}"; do printf '"%s": "%s",' "$s" "${STATUS[$s]}"; done | sed 's/,$//')"
  } > "$OUT/meta.json"
}
log "GPU: ${gpu:-none visible}; sizes: ${sizes[*]}; budget ${BUDGET}s; prefill ${SAMPLES} x ${PROMPT}; training B ${TB} x 2048"
scale_num=0; scale_den=0
scaled() { local e=$1; [ $scale_den -gt 0 ] && e=$(( e * scale_num / scale_den )); [ "$e" -lt 5 ] && e=5; echo "$e"; }
for i in "${!sizes[@]}"; do
  s=${sizes[$i]}
  est=$(scaled "${EST[$s]}")
  rest=0; for s2 in "${sizes[@]:$i}"; do rest=$(( rest + $(scaled "${EST[$s2]}") )); done
  left=$(( BUDGET - $(el) ))
  if [ "$est" -gt "$left" ]; then
    STATUS[$s]="skipped: estimated ${est}s, ${left}s of the ${BUDGET}s budget left"
    log "$s: SKIPPED (${STATUS[$s]})"; write_meta; continue
  fi
  log "$s: start (estimate ${est}s; ETA for the remaining sizes ${rest}s; ${left}s of budget left)"
  mkdir -p "$OUT/$s"; ts=$(date +%s); st=ok
  if [ -n "${CKPT[$s]:-}" ]; then src=(--ckpt "${CKPT[$s]}"); desc="checkpoint ${CKPT[$s]}"
  else src=(--preset "$s" --synthetic-nnz "${NNZ[$s]}" --synthetic-profile "$PROFILE"); desc="SYNTHETIC nnz ${NNZ[$s]} ($PROFILE)"; fi
  log "$s: inference ($desc): build/infer --bench ${SAMPLES} x ${PROMPT}"
  timeout $(( left > 60 ? left : 60 )) ./build/infer "${src[@]}" --bench --samples "$SAMPLES" --prompt-len "$PROMPT" \
    --chunk "$PROMPT" --tokens 2 --reps "$REPS" --energy-ms "$EMS" > "$OUT/$s/infer.txt" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then st="inference failed (exit $rc, $OUT/$s/infer.txt)"; tail -5 "$OUT/$s/infer.txt"; fi
  grep -E "sparse vs dense|energy per token|^(SYNTHETIC )?(dense|sparse|auto) +[0-9]" "$OUT/$s/infer.txt" | sed 's/^/    /'
  left=$(( BUDGET - $(el) ))
  log "$s: training bench-compare, SYNTHETIC nnz ${NNZ[$s]} ($PROFILE), B ${TB} x 2048, ${TSTEPS} steps"
  timeout $(( left > 90 ? left : 90 )) ./build/train_gpt_relu --preset "$s" --batch "$TB" --seq 2048 --bench "$TSTEPS" \
    --synthetic-nnz "${NNZ[$s]}" --synthetic-profile "$PROFILE" --bench-compare > "$OUT/$s/train.txt" 2>&1
  rc=$?
  if [ $rc -ne 0 ]; then
    msg="training failed (exit $rc, $OUT/$s/train.txt)"
    if [ "$st" = ok ]; then st=$msg; else st="$st; $msg"; fi
    tail -5 "$OUT/$s/train.txt"
  fi
  grep -E "^bench-compare" "$OUT/$s/train.txt" | sed 's/^/    /'
  took=$(( $(date +%s) - ts ))
  scale_num=$((scale_num + took)); scale_den=$((scale_den + EST[$s]))
  STATUS[$s]=$st
  log "$s: done in ${took}s ($st)"
  write_meta
done
write_meta
log "report: $OUT/paper_tables.md, $OUT/paper_tables.json"
python3 scripts/paper_report.py tables "$OUT" --md "$OUT/paper_tables.md" --json "$OUT/paper_tables.json"
rc=$?
log "finished in $(el)s"
exit $rc
