#!/usr/bin/env python3
"""PyTorch's scaled_dot_product_attention at our attention bench's shapes, per backend (issue 24's yardstick).

    python3 dev/bench/sdpa_bench.py [--reps 30] [--T 2048] [--H 32] [--hd 64]

For B in 4 and 8: causal forward, backward (of the forward's output, with a random upstream gradient) and
forward + backward, with the cuDNN and the flash backends (torch.nn.attention.sdpa_kernel), bf16, layout
[B, H, T, hd] (contiguous per head, as SDPA prefers). Median ms over `reps` runs timed with CUDA events after
warm-up, and TFLOP/s with bench_attention's causal FLOP counts (fwd 2 B H T^2 hd, bwd 2.5x). A backend this
PyTorch or GPU does not offer is printed as unavailable."""
import argparse
import statistics

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def timed(fn, reps):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--T", type=int, default=2048)
    ap.add_argument("--H", type=int, default=32)
    ap.add_argument("--hd", type=int, default=64)
    o = ap.parse_args()
    print(f"sdpa_bench: {torch.cuda.get_device_name()}, torch {torch.__version__}, T {o.T}, H {o.H}, hd {o.hd}, causal")
    print(f"{'backend':8s} {'B':>2s} | {'fwd ms':>8s} {'TFLOP/s':>8s} | {'bwd ms':>8s} {'TFLOP/s':>8s} | {'f+b ms':>8s}")
    for B in (4, 8):
        g = torch.Generator(device="cuda").manual_seed(1)
        q, k, v, dout = (torch.randn(B, o.H, o.T, o.hd, device="cuda", dtype=torch.bfloat16, generator=g)
                         for _ in range(4))
        for t in (q, k, v):
            t.requires_grad_(True)
        fwd_flop = 2.0 * B * o.H * o.T * o.T * o.hd
        for name, backend in (("cudnn", SDPBackend.CUDNN_ATTENTION), ("flash", SDPBackend.FLASH_ATTENTION)):
            try:
                with sdpa_kernel(backend):
                    fwd = lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True)
                    out = fwd()
                    bwd = lambda: torch.autograd.grad(out, (q, k, v), dout, retain_graph=True)
                    both = lambda: torch.autograd.grad(fwd(), (q, k, v), dout)
                    tf, tb, tfb = timed(fwd, o.reps), timed(bwd, o.reps), timed(both, o.reps)
            except RuntimeError as e:
                print(f"{name:8s} {B:2d} | unavailable: {str(e).splitlines()[0][:90]}")
                continue
            print(f"{name:8s} {B:2d} | {tf:8.3f} {fwd_flop / tf * 1e-9:8.1f} | {tb:8.3f} {2.5 * fwd_flop / tb * 1e-9:8.1f} "
                  f"| {tfb:8.3f}")


if __name__ == "__main__":
    main()
