#!/usr/bin/env bash
# Builds and runs the CPU emulation of the tensor-core attention kernels (no GPU needed). Usage: bash dev/emu/run.sh [quick]
set -e
CUDA_INC=${CUDA_INC:-/usr/local/cuda/include}
mkdir -p build
g++ -std=c++20 -O2 -g -Wall -Wno-unused-function -Wno-attributes -Wno-unknown-pragmas -I"$CUDA_INC" -Icore dev/emu/attn_emu.cpp -o build/attn_emu -lpthread
./build/attn_emu "$@"
