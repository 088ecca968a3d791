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
