#!/usr/bin/env bash
# Device-machine script for the distributed layer (2+ GPUs): finds NCCL (CUDA toolkit, else the PyTorch
# venv's nvidia-nccl wheel; header from the wheel or from $NCCL_HEADER_DIR), builds the dist tests, runs them:
# the CPU rendezvous test, gpu_test_dist (one process; it re-launches itself as 2 ranks and kills one),
# gpu_test_dist launched by scripts/run_dist.sh (file rendezvous) and by hand with MASTER_ADDR (TCP), and
# under mpirun when present. Usage: bash dev/device_dist.sh [OUTDIR]
set -u
out=${1:-.}
cd "$(dirname "$0")/.."
nvidia-smi -L
[ -d deps-debs ] && bash scripts/deps_unpack.sh >/dev/null
CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
extra=()
if [ ! -f "$CUDA_HOME/include/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
  lib=$(find / -xdev -name 'libnccl.so.2*' 2>/dev/null | head -1)
  echo "NCCL not in the toolkit; library: ${lib:-none}"
  if [ -n "$lib" ]; then
    nh=/tmp/nccl_home; mkdir -p $nh/lib $nh/include
    ln -sf "$lib" $nh/lib/libnccl.so; ln -sf "$lib" $nh/lib/libnccl.so.2
    hdr=$(find "$(dirname "$(dirname "$lib")")" -name nccl.h 2>/dev/null | head -1)
    [ -z "$hdr" ] && hdr=${NCCL_HEADER_DIR:-/nonexistent}/nccl.h
    echo "NCCL header: $hdr"; cp "$hdr" $nh/include/ || echo "no nccl.h found"
    extra=(NCCL_HOME=$nh)
  fi
fi
make -j16 "${extra[@]}" build/gpu_test_dist build/test_rendezvous 2>&1 | grep -E 'error|Error' 
echo "== test_rendezvous"; ./build/test_rendezvous 2>&1 | tail -3
echo "== gpu_test_dist (one process, self-launched ranks)"; NCCL_DEBUG=WARN ./build/gpu_test_dist; echo "rc=$?"
echo "== run_dist.sh 2 gpu_test_dist (file rendezvous)"; bash scripts/run_dist.sh 2 ./build/gpu_test_dist; echo "rc=$?"
echo "== TCP rendezvous (MASTER_ADDR/MASTER_PORT)"
for r in 0 1; do
  RANK=$r LOCAL_RANK=$r WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29517 ./build/gpu_test_dist >"$out/tcp_rank$r.log" 2>&1 &
done
wait; tail -n 4 "$out/tcp_rank0.log" "$out/tcp_rank1.log"
if command -v mpirun >/dev/null; then
  echo "== mpirun -np 2"; mpirun --allow-run-as-root -np 2 -x NCCL_NVLS_ENABLE=0 ./build/gpu_test_dist 2>&1 | tail -8
else echo "== mpirun: not installed here"; fi
