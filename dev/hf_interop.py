#!/usr/bin/env python3
"""Hugging Face interop check for sparsellm.c checkpoints.

Usage: python3 dev/hf_interop.py CKPT_DIR [CKPT_DIR ...]
Each CKPT_DIR is written by build/ref_export: a checkpoint (model.safetensors + config.json) and
reference.json with a token sequence and the float64 CPU reference logits. The checkpoint is loaded
with transformers.LlamaForCausalLM in float64 (hidden_act "relu" makes LlamaMLP compute
down(relu(gate(x)) * up(x))), run on the tokens, and compared with the reference:
    rel = max|hf - ref| / max|ref|   must be < 1e-4.
A negative control (position ids doubled: RoPE is relative, so a mere shift would not change the
logits) must differ by > 1e-3, showing the check can fail.
Exit code 0 only if every directory passes. Needs torch, transformers (4.x or 5.x), safetensors.

--pure: instead of transformers, run an independent pure-Python (no numpy) transcription of Hugging
Face's Llama forward (rotate_half RoPE, repeat_kv, eager attention, RMSNorm, relu-gated MLP, tied
head), reading model.safetensors and config.json directly. Slow but dependency-free: it lets a machine
without PyTorch check the file format, the config keys and the model definition.
"""
import json
import sys

TOL = 1e-4


def check(d):
    import torch
    import transformers
    from transformers import LlamaForCausalLM

    with open(f"{d}/reference.json") as f:
        ref = json.load(f)
    T, V = ref["T"], ref["V"]
    kw = {"attn_implementation": "eager", "output_loading_info": True}
    if int(transformers.__version__.split(".")[0]) >= 5:
        kw["dtype"] = torch.float64
    else:
        kw["torch_dtype"] = torch.float64
    model, info = LlamaForCausalLM.from_pretrained(d, **kw)
    model = model.double().eval()
    problems = {}
    for k in ("missing_keys", "unexpected_keys", "mismatched_keys", "error_msgs"):
        v = [x for x in (info.get(k) or []) if not (k == "missing_keys" and x == "lm_head.weight")]  # tied: checked below
        if v:
            problems[k] = v
    if problems:
        print(f"[{ref['config']}] FAIL: loading reported {problems}")
        return False
    if not torch.equal(model.lm_head.weight, model.model.embed_tokens.weight):
        print(f"[{ref['config']}] FAIL: lm_head is not tied to embed_tokens")
        return False
    cfg = model.config
    print(f"[{ref['config']}] transformers {transformers.__version__}, torch {torch.__version__}: hidden {cfg.hidden_size}, "
          f"heads {cfg.num_attention_heads}/{cfg.num_key_value_heads}, head_dim {cfg.head_dim}, ffn {cfg.intermediate_size}, "
          f"layers {cfg.num_hidden_layers}, act {cfg.hidden_act}")
    tokens = torch.tensor([ref["tokens"]], dtype=torch.long)
    ref_logits = torch.tensor(ref["logits"], dtype=torch.float64).view(T, V)
    with torch.no_grad():
        hf = model(tokens).logits[0].to(torch.float64)
        shifted = model(tokens, position_ids=2 * torch.arange(T).unsqueeze(0)).logits[0].to(torch.float64)
    scale = ref_logits.abs().max().item()
    rel = (hf - ref_logits).abs().max().item() / scale
    rel_ctrl = (shifted - ref_logits).abs().max().item() / scale
    big = ref_logits.abs() > 1e-2 * scale
    elem = ((hf - ref_logits).abs()[big] / ref_logits.abs()[big]).max().item()
    ok = rel < TOL and rel_ctrl > 1e-3
    print(f"[{ref['config']}] max|hf-ref|/max|ref| = {rel:.3e} (tol {TOL:g}); worst elementwise rel (|ref| > 1% of max) "
          f"= {elem:.3e}; negative control (positions x2) = {rel_ctrl:.3e} (must be > 1e-3): {'PASS' if ok else 'FAIL'}")
    return ok


def load_safetensors(path):
    import struct
    with open(path, "rb") as f:
        buf = f.read()
    (hlen,) = struct.unpack_from("<Q", buf, 0)
    header = json.loads(buf[8:8 + hlen])
    base = 8 + hlen
    tensors = {}
    for name, e in header.items():
        if name == "__metadata__":
            continue
        b, en = e["data_offsets"]
        raw = buf[base + b:base + en]
        if e["dtype"] == "F32":
            vals = list(struct.unpack(f"<{len(raw) // 4}f", raw))
        elif e["dtype"] == "BF16":
            vals = [struct.unpack("<f", b"\0\0" + raw[i:i + 2])[0] for i in range(0, len(raw), 2)]
        else:
            raise ValueError(f"{name}: dtype {e['dtype']}")
        shape = e["shape"]
        if len(shape) == 2:
            vals = [vals[r * shape[1]:(r + 1) * shape[1]] for r in range(shape[0])]
        tensors[name] = vals
    return header.get("__metadata__", {}), tensors


def pure_forward(d, tokens, pos_scale=1):
    import math
    with open(f"{d}/config.json") as f:
        cfg = json.load(f)
    meta, W = load_safetensors(f"{d}/model.safetensors")
    assert meta.get("format") == "pt", "transformers needs __metadata__.format == 'pt'"
    assert cfg["hidden_act"] == "relu" and cfg["tie_word_embeddings"] is True
    D, H, KVH, hd = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    L, eps = cfg["num_hidden_layers"], cfg["rms_norm_eps"]
    theta = cfg.get("rope_parameters", {}).get("rope_theta", cfg.get("rope_theta", 10000.0))
    T = len(tokens)

    def linear(x, w):  # x [T][in], w [out][in] -> x w^T
        return [[sum(a * b for a, b in zip(row, wr)) for wr in w] for row in x]

    def rmsnorm(x, w):
        out = []
        for row in x:
            r = 1.0 / math.sqrt(sum(v * v for v in row) / len(row) + eps)
            out.append([wi * v * r for wi, v in zip(w, row)])
        return out

    inv_freq = [theta ** (-(2 * i) / hd) for i in range(hd // 2)]

    def rope(x, nh):  # x [T][nh*hd], HF rotate_half convention
        out = []
        for t, row in enumerate(x):
            pos = t * pos_scale
            new = []
            for h in range(nh):
                v = row[h * hd:(h + 1) * hd]
                ang = [pos * f for f in inv_freq] * 2
                rot = [-a for a in v[hd // 2:]] + v[:hd // 2]
                new += [v[j] * math.cos(ang[j]) + rot[j] * math.sin(ang[j]) for j in range(hd)]
            out.append(new)
        return out

    E = W["model.embed_tokens.weight"]
    x = [list(E[t]) for t in tokens]
    for l in range(L):
        p = f"model.layers.{l}."
        a = rmsnorm(x, W[p + "input_layernorm.weight"])
        q = rope(linear(a, W[p + "self_attn.q_proj.weight"]), H)
        k = rope(linear(a, W[p + "self_attn.k_proj.weight"]), KVH)
        v = linear(a, W[p + "self_attn.v_proj.weight"])
        o = [[0.0] * (H * hd) for _ in range(T)]
        for h in range(H):
            kh = h // (H // KVH)  # repeat_kv
            for t in range(T):
                qv = q[t][h * hd:(h + 1) * hd]
                s = [sum(qa * kb for qa, kb in zip(qv, k[j][kh * hd:(kh + 1) * hd])) / math.sqrt(hd) for j in range(t + 1)]
                m = max(s)
                e = [math.exp(z - m) for z in s]
                tot = sum(e)
                for j in range(t + 1):
                    pj = e[j] / tot
                    vv = v[j][kh * hd:(kh + 1) * hd]
                    for dd in range(hd):
                        o[t][h * hd + dd] += pj * vv[dd]
        y = linear(o, W[p + "self_attn.o_proj.weight"])
        x = [[a1 + b1 for a1, b1 in zip(r1, r2)] for r1, r2 in zip(x, y)]
        f = rmsnorm(x, W[p + "post_attention_layernorm.weight"])
        g = linear(f, W[p + "mlp.gate_proj.weight"])
        u = linear(f, W[p + "mlp.up_proj.weight"])
        hmid = [[max(gi, 0.0) * ui for gi, ui in zip(gr, ur)] for gr, ur in zip(g, u)]
        y = linear(hmid, W[p + "mlp.down_proj.weight"])
        x = [[a1 + b1 for a1, b1 in zip(r1, r2)] for r1, r2 in zip(x, y)]
    x = rmsnorm(x, W["model.norm.weight"])
    return linear(x, E)


def check_pure(d):
    with open(f"{d}/reference.json") as f:
        ref = json.load(f)
    T, V = ref["T"], ref["V"]
    refl = ref["logits"]
    out = pure_forward(d, ref["tokens"])
    ctrl = pure_forward(d, ref["tokens"], pos_scale=2)
    scale = max(abs(z) for z in refl)
    rel = max(abs(out[i // V][i % V] - refl[i]) for i in range(T * V)) / scale
    rel_ctrl = max(abs(ctrl[i // V][i % V] - refl[i]) for i in range(T * V)) / scale
    ok = rel < TOL and rel_ctrl > 1e-3
    print(f"[{ref['config']}] pure-Python HF transcription: max|py-ref|/max|ref| = {rel:.3e} (tol {TOL:g}); "
          f"negative control (positions x2) = {rel_ctrl:.3e}: {'PASS' if ok else 'FAIL'}")
    return ok


def main():
    args = sys.argv[1:]
    pure = "--pure" in args
    args = [a for a in args if a != "--pure"]
    if not args:
        print(__doc__)
        return 2
    results = [(check_pure if pure else check)(d) for d in args]
    print(f"hf_interop: {sum(results)}/{len(results)} passed")
    return 0 if all(results) else 1


if __name__ == "__main__":
    sys.exit(main())
