# Sourced by the device scripts that build the NCCL programs: NCCL from the CUDA toolkit, else the PyTorch venv's
# nvidia-nccl wheel (header from the wheel or ./.nccl_hdr), linked into /tmp/nccl_home. Sets the array extra=()
# (NCCL_HOME=... for make when needed) and prints what it found, and whether mpirun and mpi.h are there.
CUDA_HOME=$(dirname "$(dirname "$(command -v nvcc)")")
extra=()
if [ ! -f "$CUDA_HOME/include/nccl.h" ] && [ ! -f /usr/include/nccl.h ]; then
  lib=$(find / -xdev -name 'libnccl.so.2*' 2>/dev/null | head -1)
  echo "NCCL library: ${lib:-none}"
  if [ -n "$lib" ]; then
    nh=/tmp/nccl_home; mkdir -p $nh/lib $nh/include
    ln -sf "$lib" $nh/lib/libnccl.so; ln -sf "$lib" $nh/lib/libnccl.so.2
    hdr=$(find "$(dirname "$(dirname "$lib")")" -name nccl.h 2>/dev/null | head -1)
    [ -z "$hdr" ] && hdr=$PWD/.nccl_hdr/nccl.h
    echo "NCCL header: $hdr"; cp "$hdr" $nh/include/
    extra=(NCCL_HOME=$nh)
  fi
fi
echo "mpirun: $(command -v mpirun || echo none); mpi.h: $(ls /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h /usr/include/openmpi/mpi.h 2>/dev/null || echo none)"

