#!/usr/bin/env bash
# Runs the CPU test binaries, then the GPU test binaries when a GPU is visible, and prints one
# closing summary line. Usage: test/run_tests.sh CPU_TEST... -- GPU_TEST...
# Every binary is a cmocka runner; its "[  PASSED  ] N test(s)." and "[  FAILED  ] N test(s)" lines
# are added up. A binary that exits non-zero without a cmocka FAILED line counts as one failure.
# Without a GPU, each GPU binary's tests are counted (its --count mode) and reported as skipped.
set -u
cpu=(); gpu=(); side=cpu
for a in "$@"; do
  if [ "$a" = "--" ]; then side=gpu; continue; fi
  if [ $side = cpu ]; then cpu+=("$a"); else gpu+=("$a"); fi
done

passed=0; failed=0; skipped=0; broken=()
run_one() {
  local bin=$1 out rc p f s
  echo "=== $bin"
  out=$("$bin" 2>&1); rc=$?
  printf '%s\n' "$out"
  p=$(printf '%s\n' "$out" | sed -n 's/^\[  PASSED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
  f=$(printf '%s\n' "$out" | sed -n 's/^\[  FAILED  \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
  s=$(printf '%s\n' "$out" | sed -n 's/^\[  SKIPPED \] \([0-9]*\) test.*/\1/p' | awk '{s+=$1} END {print s+0}')
  if [ "$rc" -ne 0 ] && [ "$f" -eq 0 ]; then f=1; fi
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  if [ "$rc" -ne 0 ]; then broken+=("$bin (exit $rc)"); fi
}

for t in "${cpu[@]}"; do run_one "$t"; done

# A GPU listed by nvidia-smi must be usable: SLLM_GPU_REQUIRED=1 makes each GPU binary fail all its tests
# when CUDA cannot start on it (test/gpu_harness.h), instead of skipping them.
gpu_visible=0
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then gpu_visible=1; fi
if [ ${#gpu[@]} -gt 0 ]; then
  if [ $gpu_visible = 1 ]; then
    export SLLM_GPU_REQUIRED=1
    for t in "${gpu[@]}"; do run_one "$t"; done
  else
    echo "=== GPU tests SKIPPED: no GPU visible (nvidia-smi lists none); counting their tests as skipped"
    for t in "${gpu[@]}"; do
      n=$("$t" --count 2>/dev/null | sed -n 's/^tests: \([0-9][0-9]*\)$/\1/p')
      if [ -z "$n" ]; then echo "=== $t: --count gave no count"; failed=$((failed + 1)); broken+=("$t (--count)"); continue; fi
      echo "    $t: $n tests not run"
      skipped=$((skipped + n))
    done
  fi
fi

echo
if [ ${#broken[@]} -gt 0 ]; then echo "failing binaries: ${broken[*]}"; fi
echo "tests: $passed passed, $failed failed, $skipped skipped"
[ "$failed" -eq 0 ]
