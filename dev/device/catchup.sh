#!/usr/bin/env bash
# One call that re-measures, on whatever GPU it runs, the figures the open issues compare (~7 minutes on an H100):
#   attention against PyTorch SDPA (issue 24; gpu_test_attention first), the sparse training FFN against our dense
#   one (issue 21; its two test binaries first), the whole-model prefill at SYNTHETIC 29 non-zeros (issue 25), and
#   the 0.5B training step beside Hugging Face eager and torch.compile (issue 24).
#   bash dev/device/catchup.sh        (carry deps-debs)
# Logs: $OUT/catchup.log (the summary), and each part's own log under $OUT.
source dev/device/preamble.sh catchup.log
make -j"$(nproc)" build/libsllm.a build/bench_attention build/gpu_test_attention build/bench_ffn_train \
  build/gpu_test_twell_train build/gpu_test_train_sparse build/infer build/train_gpt_relu > "$OUT/build.log" 2>&1 \
  || { tail -30 "$OUT/build.log"; echo "BUILD FAILED"; exit 1; }
echo "$(el) built"
for t in gpu_test_attention gpu_test_twell_train gpu_test_train_sparse; do
  timeout 150 ./build/$t > "$OUT/$t.txt" 2>&1
  echo "$(el) $t rc=$?: $(grep -E "^\[  (PASSED|FAILED)|fallbacks" "$OUT/$t.txt" | tr '\n' ' ')"
done
echo "== attention (ms | TFLOP/s: forward, backward, both), then PyTorch SDPA"
timeout 90 ./build/bench_attention 30 2>&1 | grep -E "^(wg|wgbwd) "
timeout 120 python3 dev/bench/sdpa_bench.py --reps 30 2>&1 | grep -E "^(cudnn|flash)"
echo "== sparse training FFN (dense / sparse)"
for a in "--M 16384 --nnz 29 --reps 10 --prof" "--M 65536 --nnz 29 --reps 4"; do
  timeout 120 ./build/bench_ffn_train $a 2>&1 | grep -E "^ +[0-9]+ +[0-9]+ \||stages"
done
echo "== prefill of 8 x 2048 tokens, SYNTHETIC 29 (ms)"
for p in 0.5B 2B; do
  timeout 200 ./build/infer --preset $p --synthetic-nnz 29 --bench --samples 8 --prompt-len 2048 --chunk 2048 \
    --tokens 8 --reps 3 --energy-ms 0 > "$OUT/infer_$p.txt" 2>&1
  echo "$(el) $p rc=$?: $(grep bench-result "$OUT/infer_$p.txt" | sed -E 's/.*ffn=([a-z]+).*prefill_ms=([0-9.]+).*/\1 \2/' | tr '\n' ' ')"
done
echo "== issue 24, 0.5B"
OUT=$OUT/issue24 bash dev/device/issue24.sh 0.5B > /dev/null 2>&1
grep -E "ours|hf_llama" "$OUT/issue24/issue24.log"
el
