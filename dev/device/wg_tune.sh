#!/usr/bin/env bash
# Tuning of the wgmma attention kernels' ring depth in one call: the default build (forward 2 stages, backward 4)
# and -D builds of bench_attention and gpu_test_attention with AWG_STAGES = AWG_BWD_STAGES = each of $STAGES, each
# tested against float64 and timed, then PyTorch's SDPA (cuDNN, flash) and the 0.5B training step.
#   STAGES="3 4" REPS=2 bash dev/device/wg_tune.sh        (carry deps-debs)
# Log: $OUT/wg_tune.log.
source dev/device/preamble.sh wg_tune.log
STAGES=${STAGES:-3 4}; REPS=${REPS:-2}
make -j"$(nproc)" build/libsllm.a build/gpu_test_attention build/bench_attention build/train_gpt_relu > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
D=.deps/usr/lib/x86_64-linux-gnu
F="-O3 -std=c++17 -gencode=arch=compute_90a,code=sm_90a -I. -Icore -Itest -I.deps/usr/include --expt-relaxed-constexpr"
L="build/libsllm.a -L$D -Xlinker -rpath -Xlinker $PWD/$D -lcjson -lpcre2-8 -lm -lpthread -ldl -lcublasLt -lcublas -lcuda"
pids=""
for st in $STAGES; do
  nvcc $F -DAWG_STAGES=$st -DAWG_BWD_STAGES=$st dev/bench/bench_attention.cu -o build/bench_attention_st$st $L >> "$OUT/build.log" 2>&1 &
  pids="$pids $!"
  nvcc $F -DAWG_STAGES=$st -DAWG_BWD_STAGES=$st test/gpu/test_attention.cu -o build/gpu_test_attention_st$st $L -lcmocka >> "$OUT/build.log" 2>&1 &
  pids="$pids $!"
done
for p in $pids; do wait $p || echo "a -D build failed (see build.log)"; done  # (a bare wait would also wait for tee)
el; echo built
for t in gpu_test_attention $(for st in $STAGES; do echo gpu_test_attention_st$st; done); do
  timeout 120 ./build/$t > "$OUT/t.txt" 2>&1
  echo "$(el) $t rc=$?: $(grep -E "PASSED|FAILED|fallbacks|differs" "$OUT/t.txt" | tr '\n' ' ')"
done
for rep in $(seq "$REPS"); do
  for b in bench_attention $(for st in $STAGES; do echo bench_attention_st$st; done); do
    timeout 60 ./build/$b 20 > /tmp/b.txt 2>&1
    echo "$(el) $b:"; grep -E "^(wg|wgbwd) " /tmp/b.txt
  done
done
python3 dev/bench/sdpa_bench.py --reps 30 2>&1 | grep -E "^(cudnn|flash)"
timeout 150 ./build/train_gpt_relu --preset 0.5B --batch 4 --seq 2048 --bench 12 > /tmp/tr.txt 2>&1
echo "$(el) train 0.5B: $(grep -E "^bench:.*tokens/ms" /tmp/tr.txt | tail -1)"
grep -E "attn (fwd|bwd): attention kernel" /tmp/tr.txt
