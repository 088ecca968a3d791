#!/usr/bin/env bash
# Environment probe of the GPU machine: tools, libraries, GPU, Python packages. Logs to $OUT/probe.log.
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
{
  set -x
  nvidia-smi; nvcc --version | tail -1; uname -a; nproc; free -g | head -2
  which gcc make mpicc mpirun python3; gcc --version | head -1
  ls /usr/lib/x86_64-linux-gnu/openmpi/include/mpi.h /usr/include/openmpi* /usr/include/x86_64-linux-gnu/openmpi* 2>&1 | head
  mpicc --showme:compile 2>&1; mpicc --showme:link 2>&1
  ls /usr/local/cuda/include/nccl.h /usr/include/nccl.h 2>&1; ls /usr/local/cuda/lib64/ | grep -E "nccl|cublas" 2>&1
  ls /usr/local/nvidia/lib* 2>&1 | grep -i nvidia-ml; ldconfig -p | grep -E "nvidia-ml|libcuda.so" 
  python3 -c 'import torch, transformers, tokenizers, safetensors; print(torch.__version__, transformers.__version__, tokenizers.__version__, safetensors.__version__, torch.cuda.get_device_name(0))'
  ldconfig -p | grep -E "cjson|pcre2|cmocka"
  set +x
  time make -j16 all tests-cpu tests-gpu bench 2>&1 | tail -20
  make test 2>&1 | tail -30
} > "$OUT/probe.log" 2>&1
tail -60 "$OUT/probe.log"
