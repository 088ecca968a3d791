#!/usr/bin/env bash
# Issue 24's training measurement in one call (one GPU): ours (fp32 master and moments; --moments bf16; --moments
# bf16 --master none, the precision of the PyTorch baseline's state) beside Hugging Face LlamaForCausalLM eager and
# under torch.compile, B 4 x 2048: tokens/ms, MFU, memory; our step profile at 0.5B.
#   bash dev/device/issue24.sh [presets, default "0.5B 1.5B"]   (carry deps-debs)   ~4 minutes a preset
# Log: $OUT/issue24.log.
source dev/device/preamble.sh issue24.log
make -j"$(nproc)" build/train_gpt_relu > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
el; echo built
for p in ${@:-0.5B 1.5B}; do
  for cfg in "--moments fp32" "--moments bf16" "--moments bf16 --master none"; do
    timeout 150 ./build/train_gpt_relu --preset $p --batch 4 --seq 2048 --bench 12 $cfg > /tmp/i24.txt 2>&1
    echo "$(el) ours $p $cfg rc=$?: $(grep -E "^bench:.*tokens/ms" /tmp/i24.txt | tail -1)"
    grep -E "device memory|optimizer shard" /tmp/i24.txt | head -3
    [ "$p" = 0.5B ] && [ "$cfg" != "--moments bf16" ] && sed -n '/^profile:/,$p' /tmp/i24.txt | head -34
  done
  timeout 200 python3 dev/bench_hf_llama.py --preset $p --batch 4 --seq 2048 --steps 8 2>&1 | tail -1
  el
  timeout 400 python3 dev/bench_hf_llama.py --preset $p --batch 4 --seq 2048 --steps 8 --compile 2>&1 | tail -1
  el
done
