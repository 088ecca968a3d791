#!/usr/bin/env python3
"""Multiple-choice scores of sparsellm.c against Hugging Face transformers, choice by choice.

Usage:
  python3 dev/mc_eval_hf.py CKPT_DIR --ours NAME=FILE.jsonl [--ours NAME=FILE.jsonl ...] [--check NAME ...]
                            [--tol 1e-3] [--device cuda|cpu] [--pure] [--max-items N] [--json OUT.json]

Each FILE.jsonl is a `build/infer --mc-eval ... --mc-eval-out FILE.jsonl` output (model/mc_eval.h): per item the
label and per choice its token ids, the index `start` of the continuation and our log-likelihood `ll`. The token ids
are read from the first file (every file must hold the same ids), so the tokenizers cannot differ. The checkpoint is
loaded as transformers.LlamaForCausalLM (config.json: LlamaConfig keys, hidden_act "relu": LlamaMLP computes
down(relu(gate(x)) * up(x)), the gated ReLU FFN; eager attention; tied embeddings) in float64 and in float32 (TF32
off), and each choice's log-likelihood is computed the same way as ours:
    ll = sum_{i=start}^{n-1} log_softmax(logits[i-1])[tokens[i]],  logits = model(tokens[0 .. n-2])
(log-softmax in float64 on the model's logits). For every file it prints max_choice |ll_ours - ll_hf| against HF
float64 and float32, the worst choices, and acc / acc_norm recomputed from each set of scores.
The files named by --check (default: every file) must be within --tol (default 1e-3) of HF float64 AND float32 on
every choice; the exit status is 1 otherwise. The others (e.g. the bf16 GPU engine) are reported only.
--pure: no torch: the pure-Python transcription of HF's Llama forward in dev/hf_interop.py (float64; slow, tiny
models only; use --max-items).
"""
import argparse
import json
import math
import os
import sys
import time


def read_ours(path):
    items = []
    with open(path) as f:
        for ln, line in enumerate(f, 1):
            if line.strip():
                try:
                    items.append(json.loads(line))
                except json.JSONDecodeError as e:
                    sys.exit(f"{path}:{ln}: not valid JSON ({e})")
    if not items:
        sys.exit(f"{path}: no items")
    return items


def same_tokens(a, b):
    if len(a) != len(b):
        return False
    for x, y in zip(a, b):
        if x["line"] != y["line"] or len(x["choices"]) != len(y["choices"]):
            return False
        for c, d in zip(x["choices"], y["choices"]):
            if c["tokens"] != d["tokens"] or c["start"] != d["start"]:
                return False
    return True


def acc_of(items, lls):
    """acc, acc_norm (first argmax on ties, as the C core and numpy.argmax) of per-choice lls [[...], ...]."""
    acc = accn = 0
    for it, ll in zip(items, lls):
        norm = [v / c["n_chars"] for v, c in zip(ll, it["choices"])]
        acc += max(range(len(ll)), key=lambda k: (ll[k], -k)) == it["label"]
        accn += max(range(len(norm)), key=lambda k: (norm[k], -k)) == it["label"]
    return acc / len(items), accn / len(items)


def hf_scores(ckpt, items, dtype_name, device):
    import torch
    import transformers
    from transformers import LlamaForCausalLM

    dtype = {"float64": torch.float64, "float32": torch.float32}[dtype_name]
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    kw = {"attn_implementation": "eager", "output_loading_info": True}
    kw["dtype" if int(transformers.__version__.split(".")[0]) >= 5 else "torch_dtype"] = dtype
    model, info = LlamaForCausalLM.from_pretrained(ckpt, **kw)
    bad = {}
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):  # as dev/hf_interop.py
        v = [x for x in (info.get(k) or []) if not (k == "missing_keys" and x == "lm_head.weight")]  # tied: below
        if v:
            bad[k] = v
    if bad:
        sys.exit(f"transformers reported problems loading {ckpt}: {bad}")
    model = model.to(dtype).to(device).eval()
    if not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight):
        sys.exit("lm_head is not tied to embed_tokens")
    out = []
    with torch.no_grad():
        for it in items:
            row = []
            for c in it["choices"]:
                t, s = c["tokens"], c["start"]
                inp = torch.tensor([t[:-1]], dtype=torch.long, device=device)
                logits = model(inp).logits[0].to(torch.float64)
                lp = torch.log_softmax(logits, dim=-1)
                tgt = torch.tensor(t[s:], dtype=torch.long, device=device)
                row.append(lp[s - 1:, :].gather(1, tgt.unsqueeze(1)).sum().item())
            out.append(row)
    return out, f"transformers {transformers.__version__}, torch {torch.__version__}, {device}"


def pure_scores(ckpt, items):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from hf_interop import pure_forward

    out = []
    for it in items:
        row = []
        for c in it["choices"]:
            t, s = c["tokens"], c["start"]
            logits = pure_forward(ckpt, t[:-1])
            ll = 0.0
            for i in range(s, len(t)):
                r = logits[i - 1]
                m = max(r)
                ll += r[t[i]] - m - math.log(sum(math.exp(v - m) for v in r))
            row.append(ll)
        out.append(row)
    return out, "pure-Python transcription of HF Llama (dev/hf_interop.py)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("ckpt")
    ap.add_argument("--ours", action="append", required=True, help="NAME=FILE.jsonl (build/infer --mc-eval-out)")
    ap.add_argument("--check", action="append", help="names held to --tol (default: all)")
    ap.add_argument("--tol", type=float, default=1e-3)
    ap.add_argument("--device", default=None, help="cuda or cpu (default: cuda when available)")
    ap.add_argument("--pure", action="store_true")
    ap.add_argument("--max-items", type=int, default=0)
    ap.add_argument("--json", help="write every score and difference here")
    a = ap.parse_args()

    cfg = json.load(open(os.path.join(a.ckpt, "config.json")))
    if cfg.get("sparsellm_gated", True) is not True or cfg.get("hidden_act") != "relu":
        sys.exit(f"{a.ckpt}: transformers' LlamaMLP is the gated FFN with hidden_act; this checkpoint has "
                 f"sparsellm_gated={cfg.get('sparsellm_gated')}, hidden_act={cfg.get('hidden_act')}")
    ours = {}
    for spec in a.ours:
        if "=" not in spec:
            sys.exit(f"--ours {spec}: expected NAME=FILE")
        name, path = spec.split("=", 1)
        ours[name] = read_ours(path)
    names = list(ours)
    base = ours[names[0]]
    for n in names[1:]:
        if not same_tokens(base, ours[n]):
            sys.exit(f"--ours {n}: its items or token ids differ from {names[0]}'s")
    check = a.check or names
    for n in check:
        if n not in ours:
            sys.exit(f"--check {n}: no --ours of that name")
    items = base[:a.max_items] if a.max_items > 0 else base
    nch = sum(len(it["choices"]) for it in items)
    ntok = sum(len(c["tokens"]) - c["start"] for it in items for c in it["choices"])
    print(f"mc_eval_hf: {a.ckpt}: {len(items)} items, {nch} choices, {ntok} continuation tokens; ours: {', '.join(names)}")

    refs = {}
    t0 = time.time()
    if a.pure:
        refs["hf_f64"], how = pure_scores(a.ckpt, items)
    else:
        import torch
        dev = a.device or ("cuda" if torch.cuda.is_available() else "cpu")
        for dt in ("float64", "float32"):
            refs["hf_" + dt.replace("float", "f")], how = hf_scores(a.ckpt, items, dt, dev)
    print(f"mc_eval_hf: reference scores from {how} ({time.time() - t0:.1f} s)")
    for r, v in refs.items():
        acc, accn = acc_of(items, v)
        print(f"  {r:<14} acc {acc:.4f}  acc_norm {accn:.4f}")

    ok = True
    report = {"ckpt": a.ckpt, "tol": a.tol, "reference": how, "items": len(items), "choices": nch, "results": {}}
    for n in names:
        mine = [[c["ll"] for c in it["choices"]] for it in ours[n][:len(items)]]
        acc, accn = acc_of(items, mine)
        line = f"  {n:<14} acc {acc:.4f}  acc_norm {accn:.4f}"
        res = {"acc": acc, "acc_norm": accn}
        for r, v in refs.items():
            diffs = [(abs(x - y), it["line"], k, x, y) for it, mr, vr in zip(items, mine, v)
                     for k, (x, y) in enumerate(zip(mr, vr))]
            worst = max(diffs)
            same_pred = sum(max(range(len(mr)), key=lambda k: (mr[k], -k)) == max(range(len(vr)), key=lambda k: (vr[k], -k))
                            for mr, vr in zip(mine, v))
            held = n in check
            good = worst[0] <= a.tol
            if held and not good:
                ok = False
            line += (f" | vs {r}: max|d ll| {worst[0]:.3e} (line {worst[1]} choice {worst[2]}), same argmax "
                     f"{same_pred}/{len(items)}{' ' + ('PASS' if good else 'FAIL') if held else ' (reported)'}")
            res[r] = {"max_abs_diff": worst[0], "worst_line": worst[1], "worst_choice": worst[2],
                      "same_pred": same_pred, "held_to_tol": held, "pass": good,
                      "per_choice": [[it["line"], k, x, y] for it, mr, vr in zip(items, mine, v)
                                     for k, (x, y) in enumerate(zip(mr, vr))]}
        print(line)
        report["results"][n] = res
    print("  worst choices of each file against the first reference:")
    r0 = next(iter(refs))
    for n in names:
        pc = sorted(report["results"][n][r0]["per_choice"], key=lambda e: -abs(e[2] - e[3]))[:3]
        for ln, k, x, y in pc:
            print(f"    {n:<12} line {ln:3d} choice {k}: ours {x:.10f}  {r0} {y:.10f}  diff {x - y:+.3e}")
    if a.json:
        with open(a.json, "w") as f:
            json.dump(report, f, indent=1)
    print(f"mc_eval_hf: {'PASS' if ok else 'FAIL'}: {', '.join(check)} within {a.tol:g} of "
          f"{' and '.join(refs)} on every choice" + ("" if ok else " (see above)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
