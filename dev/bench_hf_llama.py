#!/usr/bin/env python3
"""PyTorch baseline for the trainer's throughput: Hugging Face LlamaForCausalLM (eager, SDPA attention), bf16
weights, ReLU-gated MLP (hidden_act "relu"), tied embeddings, torch AdamW, one training step = forward +
backward + optimizer step on B x T random tokens. Prints training-step tokens/ms (median of timed steps, CUDA
events) and peak memory, in the same shapes as ../shared/BENCHMARKS.md (4 x 2048 tokens per step).

    python3 dev/bench_hf_llama.py --preset 0.5B --batch 4 --seq 2048 --steps 10
    python3 dev/bench_hf_llama.py --preset 0.5B --compile     # the model under torch.compile (compiled in warm-up)
The matching run of our trainer (same shapes, random tokens):
    build/train_gpt_relu --preset 0.5B --batch 4 --seq 2048 --bench 12
"""
import argparse
import statistics
import sys

LAYERS = {"0.5B": 8, "1B": 18, "1.5B": 28, "2B": 38}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="0.5B", choices=sorted(LAYERS))
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--seq", type=int, default=2048)
    ap.add_argument("--steps", type=int, default=10, help="timed steps (after 3 warm-up steps)")
    ap.add_argument("--vocab", type=int, default=49152)
    ap.add_argument("--compile", action="store_true", help="torch.compile the model (default mode); the warm-up "
                    "steps compile it, the timed steps do not")
    args = ap.parse_args()
    try:
        import torch
        from transformers import LlamaConfig, LlamaForCausalLM
    except Exception as e:  # noqa: BLE001
        print(f"bench_hf_llama: PyTorch/transformers not available ({e}); no baseline measured")
        return 2
    if not torch.cuda.is_available():
        print("bench_hf_llama: no CUDA device; no baseline measured")
        return 2
    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=args.vocab, hidden_size=2048, intermediate_size=5632,
                      num_hidden_layers=LAYERS[args.preset], num_attention_heads=32, num_key_value_heads=32,
                      head_dim=64, max_position_embeddings=max(2048, args.seq), rope_theta=100000.0,
                      rms_norm_eps=1e-5, tie_word_embeddings=True, hidden_act="relu", attention_bias=False,
                      mlp_bias=False)
    cfg._attn_implementation = "sdpa"
    model = LlamaForCausalLM(cfg).to(device="cuda", dtype=torch.bfloat16)
    model.train()
    nparams = sum(p.numel() for p in model.parameters())
    fwd = torch.compile(model) if args.compile else model
    try:
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1, fused=True)
    except Exception:  # noqa: BLE001
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1)
    B, T = args.batch, args.seq
    gen = torch.Generator(device="cuda").manual_seed(0)
    batches = [torch.randint(0, args.vocab, (B, T), device="cuda", generator=gen) for _ in range(4)]

    def step(i):
        x = batches[i % len(batches)]
        out = fwd(input_ids=x, labels=x)
        out.loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)

    for i in range(3):
        step(i)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(args.steps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        step(i)
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    med = statistics.median(times)
    mode = "torch.compile" if args.compile else "eager"
    print(f"hf_llama {args.preset} ({mode}): {nparams / 1e9:.3f} B params, {torch.cuda.get_device_name(0)}, "
          f"torch {torch.__version__}, B={B} T={T}: median step {med:.2f} ms over {args.steps}, "
          f"{B * T / med:.1f} tokens/ms, peak memory {torch.cuda.max_memory_allocated() / 2**30:.1f} GiB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
