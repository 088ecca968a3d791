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
