#!/usr/bin/env bash
# Is a seed-dependent GPU test failure the change's or the test's? One test binary of this tree beside a baseline
# binaries (build/<TEST>_base*: built from other commits on the dev box and carried), at one seed and then at REPEAT
# fresh seeds (the same seeds for all), counting failures. SLLM_TEST_FILTER (a cmocka pattern) runs one case only.
# Usage (repo root on the GPU machine):
#   SEED=4766894076138517680 TEST=gpu_test_train_sparse REPEAT=20 SLLM_TEST_FILTER=test_synth bash dev/device/seed_ab.sh
# Logs: $OUT/seed_ab.log (summary), $OUT/<binary>_<seed>.txt for the runs that failed.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/seed_ab.log") 2>&1
TEST=${TEST:-gpu_test_train_sparse}; REPEAT=${REPEAT:-20}
[ -d .deps ] || bash scripts/deps_unpack.sh > /dev/null
# carried baselines were linked on the dev box without .deps' rpath: they find cJSON / cmocka through this
export LD_LIBRARY_PATH=$PWD/.deps/usr/lib/x86_64-linux-gnu${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}
make -j"$(nproc)" "build/$TEST" > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
seeds="${SEED:-}"
for i in $(seq 1 "$REPEAT"); do seeds="$seeds $(( (RANDOM << 30) ^ (RANDOM << 15) ^ RANDOM ))"; done
for b in build/"${TEST}"_base* "build/$TEST"; do
  [ -x "$b" ] || { echo "$b: missing"; continue; }
  fails=0; runs=0
  for s in $seeds; do
    runs=$((runs + 1))
    if ! SLLM_TEST_SEED=$s timeout 120 "$b" > "$OUT/cur.txt" 2>&1; then
      fails=$((fails + 1)); cp "$OUT/cur.txt" "$OUT/$(basename "$b")_$s.txt"
      echo "$b seed $s: FAILED"; grep -E "<-- FAIL|^\[  FAILED  \] test" "$OUT/cur.txt" | head -6
    fi
  done
  echo "== $b: $fails of $runs runs failed"
done
