#!/usr/bin/env bash
# Runs each libFuzzer target for SECONDS seconds on a fresh corpus seeded from test/fuzz/seeds/<name>/ and the
# committed tokenizer fixtures (test/golden/tiny_*), and prints per target: run time, executions, crashes.
# A crash, a leak or a sanitizer report fails the run (exit 1); the input is kept under build/fuzz/artifacts/.
# usage: test/fuzz/run.sh SECONDS build/fuzz/fuzz_NAME...   (env FUZZ_SEED=N: libFuzzer's -seed, so that a run is
# reproducible, as CI's; unset: a new random exploration each run)
set -u
secs=$1; shift
art=build/fuzz/artifacts; mkdir -p "$art"
failed=0; summary=()
for bin in "$@"; do
  name=$(basename "$bin"); name=${name#fuzz_}
  corpus=$(mktemp -d)
  [ -d "test/fuzz/seeds/$name" ] && cp test/fuzz/seeds/"$name"/* "$corpus"/
  case $name in
    tokenizer_json) cp test/golden/tiny_tokenizer.json "$corpus"/ ;;
    gpt2) { cat test/golden/tiny_gpt2/encoder.json; printf '\0'; cat test/golden/tiny_gpt2/vocab.bpe; } > "$corpus/tiny" ;;
  esac
  log=$(mktemp)
  seed=(); [ -n "${FUZZ_SEED:-}" ] && seed=(-seed="$FUZZ_SEED")
  "$bin" "${seed[@]}" -max_total_time="$secs" -timeout=10 -rss_limit_mb=2048 -print_final_stats=1 -artifact_prefix="$art/$name-" \
         "$corpus" > "$log" 2>&1
  rc=$?
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
  t=$(sed -n 's/^stat::.*//p' "$log" >/dev/null; grep -o 'Done [0-9]* runs in [0-9]* second(s)' "$log" | tail -1)
  if [ $rc -ne 0 ]; then
    failed=1
    echo "=== fuzz_$name FAILED (exit $rc); log tail:"; tail -40 "$log"
    summary+=("fuzz_$name: FAILED (exit $rc), artifacts in $art/")
  else
    summary+=("fuzz_$name: ${execs:-?} executions, $t, corpus $(ls "$corpus" | wc -l) inputs, no crash")
  fi
  rm -rf "$corpus" "$log"
done
echo "fuzz summary (${secs} s per target):"
for s in "${summary[@]}"; do echo "  $s"; done
[ $failed = 0 ]
