#!/usr/bin/env bash
# Builds and runs the CPU emulations of the tensor-core kernels (no GPU needed; dev/emu/emu_core.h):
#   attention (core/attention.cuh) and the sliced TwELL up/down (twell/sliced.cuh).
# Usage: bash dev/emu/run.sh [attn|sliced|all] [quick]      (default: all)
set -e
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
what=${1:-all}; [ "$what" = quick ] && { what=all; set -- all quick; }
shift || true
mkdir -p build
CXX="g++ -std=c++20 -O2 -g -Wall -Wno-unused-function -Wno-attributes -Wno-unknown-pragmas -I$CUDA_INC -I. -Icore"
if [ "$what" = attn ] || [ "$what" = all ]; then
  $CXX dev/emu/attn_emu.cpp -o build/attn_emu -lpthread
  ./build/attn_emu "$@"
fi
if [ "$what" = sliced ] || [ "$what" = all ]; then
  $CXX dev/emu/sliced_emu.cpp -o build/sliced_emu -lpthread
  ./build/sliced_emu "$@"
fi
