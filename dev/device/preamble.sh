# Sourced first by the device scripts (run from the repository root):
#   source dev/device/preamble.sh NAME.log
# $OUT (default /tmp/out) made; stdout and stderr also appended to $OUT/NAME.log; el prints the elapsed seconds as
# "[N s]"; the unpacked dependencies (.deps) in place; the GPU's name, clocks and memory printed.
# (A script that sources this must never call a bare `wait`: it would also wait for the tee, which never ends.)
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
exec > >(tee -a "$OUT/$1") 2>&1
t0=$(date +%s)
el() { echo "[$(( $(date +%s) - t0 )) s]"; }
[ -d .deps ] || bash scripts/deps_unpack.sh > /dev/null
nvidia-smi --query-gpu=name,clocks.max.sm,memory.total --format=csv,noheader
# Building -D variants of a file beside the default build (wg_variant.sh, ffn_variant.sh), after build/libsllm.a:
#   nvcc $VARIANT_NVCC $flags SRC -o OUT $VARIANT_LINK [-lcmocka]
VARIANT_NVCC="-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -Icore -Itest -I.deps/usr/include --expt-relaxed-constexpr"
VARIANT_LINK="build/libsllm.a -L.deps/usr/lib/x86_64-linux-gnu -Xlinker -rpath -Xlinker $PWD/.deps/usr/lib/x86_64-linux-gnu \
  -lcjson -lpcre2-8 -lm -lpthread -ldl -lcublasLt -lcublas -lcuda"
# The scripts' name=flags arguments built beside the default build, all at once in the background, then waited for:
#   variant_builds "SRC|NAME|EXTRA LINK FLAGS" ... -- "$@"      (each SRC to build/NAME_<variant>; names in $VARIANT_NAMES)
variant_builds() {
  local specs=() a sp src out extra n fl pids=""
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do specs+=("$1"); shift; done
  shift
  VARIANT_NAMES=""
  for a in "$@"; do
    n=${a%%=*}; fl=${a#*=}; VARIANT_NAMES="$VARIANT_NAMES $n"
    for sp in "${specs[@]}"; do
      IFS='|' read -r src out extra <<< "$sp"
      nvcc $VARIANT_NVCC $fl "$src" -o "build/${out}_$n" $VARIANT_LINK $extra >> "$OUT/build.log" 2>&1 & pids="$pids $!"
    done
  done
  for a in $pids; do wait "$a" || echo "a variant build failed (see build.log)"; done  # (a bare wait also waits for tee)
}
test_specs() { local t; for t in "$@"; do echo "test/gpu/${t#gpu_}.cu|$t|-lcmocka"; done; }  # TESTS as specs
