#!/usr/bin/env bash
# One GPU-machine call for the whole team: build everything, then run each area's script.
# Usage (on the GPU machine, from the repo root): bash dev/device/all.sh [area ...]
# Areas: ref data twell attn train (default: all that exist). Logs under $OUT.
# AREA_TIMEOUT (seconds, default 300) caps each area so one hang cannot eat the whole call.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
export OUT
[ -d .deps ] || bash scripts/deps_unpack.sh
start=$(date +%s)
echo "== build ($(nproc) cores)"
make -k -j"$(nproc)" all tests-cpu tests-gpu bench > "$OUT/build.log" 2>&1; rc=$?
tail -5 "$OUT/build.log"; echo "build rc=$rc ($(( $(date +%s) - start )) s)"
areas=("$@"); [ ${#areas[@]} -gt 0 ] || areas=(ref data attn twell train)
for a in "${areas[@]}"; do
  s=dev/device/$a.sh
  [ -f "$s" ] || { echo "== $a: no script"; continue; }
  t0=$(date +%s)
  echo "== $a"
  # Only 8 files come back from the machine: each area gets a private OUT, folded into one log.
  lim=${AREA_TIMEOUT:-300}
  sub=$(mktemp -d); OUT=$sub timeout -k 5 "$lim" bash "$s" > "$sub/stdout.txt" 2>&1; r=$?
  { for f in "$sub"/*; do echo "##### $(basename "$f")"; cat "$f"; done; } > "$OUT/$a.log"
  rm -rf "$sub"
  grep -v '^#####' "$OUT/$a.log" | tail -25
  echo "== $a rc=$r ($(( $(date +%s) - t0 )) s)"
done
echo "== total $(( $(date +%s) - start )) s"
