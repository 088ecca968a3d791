#!/usr/bin/env bash
# Installs what sparsellm.c needs on a Debian/Ubuntu machine and checks the CUDA toolkit.
# Idempotent: only missing packages are installed. Run as root or with sudo available.
#   bash scripts/setup.sh
set -euo pipefail

PKGS=(build-essential make pkg-config libcjson-dev libpcre2-dev libcmocka-dev libopenmpi-dev openmpi-bin python3 clang)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
# Node.js + npm run the reference GPT-2 tokenizer and fetch the starter data; keep an existing install.
command -v node >/dev/null 2>&1 || missing+=(nodejs)
command -v npm >/dev/null 2>&1 || missing+=(npm)

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO=sudo; fi
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
else
  echo "setup: system packages already installed"
fi

# CUDA toolkit: nvcc, cuBLAS(Lt), NCCL. NVML is loaded at run time (dlopen), so only the driver has it.
problems=0
NVCC=$(command -v nvcc || true)
if [ -z "$NVCC" ] && [ -x /usr/local/cuda/bin/nvcc ]; then NVCC=/usr/local/cuda/bin/nvcc; fi
if [ -z "$NVCC" ]; then
  echo "setup: MISSING nvcc (CUDA toolkit). Install CUDA 12.4+ and put its bin/ on PATH; CUDA targets will be skipped."
  problems=1
else
  CUDA_HOME=$(dirname "$(dirname "$(readlink -f "$NVCC")")")  # nvcc may be a symlink
  echo "setup: nvcc: $($NVCC --version | tail -1)"
  for lib in cublasLt cublas nccl; do
    # found if ANY of the places has it (ls over several globs fails when one of them matches nothing)
    if compgen -G "$CUDA_HOME/lib64/lib$lib.so*" >/dev/null || compgen -G "$CUDA_HOME/targets/*/lib/lib$lib.so*" >/dev/null \
       || compgen -G "/usr/lib/x86_64-linux-gnu/lib$lib.so*" >/dev/null || ldconfig -p 2>/dev/null | grep -q "lib$lib\.so"; then
      echo "setup: found lib$lib"
    else
      echo "setup: MISSING lib$lib (part of the CUDA toolkit / NCCL package)"; problems=1
    fi
  done
  if ls /usr/lib/x86_64-linux-gnu/libnvidia-ml.so* /usr/local/nvidia/lib*/libnvidia-ml.so* >/dev/null 2>&1; then
    echo "setup: found libnvidia-ml (NVML, energy measurements)"
  else
    echo "setup: note: libnvidia-ml (NVML) not found; it comes with the GPU driver. Energy readings are off without it."
  fi
fi
if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q '^GPU'; then
  echo "setup: GPU visible: $(nvidia-smi -L | head -1)"
else
  echo "setup: no GPU visible: 'make test' will build the CUDA targets and skip the GPU tests"
fi
[ $problems -eq 0 ] || echo "setup: finished with the problems listed above"
echo "setup: done"
