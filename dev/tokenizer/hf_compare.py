#!/usr/bin/env python3
"""Token-for-token comparison of our C encoder (build/encode) with Hugging Face `tokenizers` on tokenizer.json
files that library writes. Runs where `tokenizers` is installed (the GPU machine); no network needed.

Three byte-level BPE pipelines are trained on the corpus (vocab 8000) and saved as tokenizer.json:
  gpt2:    ByteLevel(add_prefix_space=False, use_regex=True)                      (GPT-2 pre-tokenizer)
  smollm2: Sequence[Digits(individual_digits=True), ByteLevel(use_regex=True)]    (SmolLM2's pipeline)
  llama3:  Sequence[Split(Llama-3 regex, isolated), ByteLevel(use_regex=False)]   (Llama-3 style)
with special tokens <|endoftext|>, <|im_start|>, <|im_end|>. Each encodes every corpus document and every hard
string (dev/tokenizer/hard_strings.py) with add_special_tokens=False; special tokens in text are matched, so
build/encode runs with --special. Prints counts, exits 1 on any mismatch.
usage: hf_compare.py [--corpus DIR_OF_TXT] [--encode build/encode] [--work DIR]
"""
import argparse
import glob
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
import hard_strings  # noqa: E402

LLAMA3_PAT = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|"
              r"\s*[\r\n]+|\s+(?!\S)|\s+")


def build(kind, texts, path):
    from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers, Regex
    tok = Tokenizer(models.BPE())
    bl = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    if kind == "gpt2":
        tok.pre_tokenizer = bl
    elif kind == "smollm2":
        tok.pre_tokenizer = pre_tokenizers.Sequence([pre_tokenizers.Digits(individual_digits=True), bl])
    else:
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_PAT), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(vocab_size=8000, special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>"],
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False)
    tok.train_from_iterator(texts, trainer=trainer)
    tok.save(path)
    return tok


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="data/starter/brown")
    ap.add_argument("--encode", default="build/encode")
    ap.add_argument("--work", default="/tmp/sllm_hf_compare")
    a = ap.parse_args()
    os.makedirs(a.work, exist_ok=True)
    files = sorted(glob.glob(os.path.join(a.corpus, "*.txt")))
    if files:
        docs = [open(f, encoding="utf-8").read() for f in files]
        src = f"{len(docs)} documents from {a.corpus}"
    else:  # no starter corpus carried: use this repository's sources as text
        files = sorted(glob.glob("**/*.[ch]", recursive=True) + glob.glob("**/*.md", recursive=True) + glob.glob("**/*.py", recursive=True))
        docs = [open(f, encoding="utf-8", errors="replace").read() for f in files if ".deps" not in f]
        src = f"{len(docs)} repository source files ({a.corpus} not found)"
    hard = json.loads(json.dumps(hard_strings.FIXED + hard_strings.rand_strings(400)))
    hard += ["a<|endoftext|>b", "<|im_start|>user\nhi<|im_end|>\n", "x <|endoftext|> y"]
    texts = docs + hard
    total_bad = 0
    for kind in ("gpt2", "smollm2", "llama3"):
        path = os.path.join(a.work, f"{kind}_tokenizer.json")
        t0 = time.time()
        tok = build(kind, docs, path)
        ref = [e.ids for e in tok.encode_batch(texts, add_special_tokens=False)]
        inp = os.path.join(a.work, "texts.json")
        with open(inp, "w", encoding="utf-8") as f:
            json.dump(texts, f)
        out = subprocess.run([a.encode, "-t", path, "--special", "-J", inp], capture_output=True, text=True)
        if out.returncode != 0:
            print(f"{kind}: build/encode failed: {out.stderr}")
            total_bad += 1
            continue
        got = [[int(x) for x in line.split()] for line in out.stdout.split("\n")[:len(texts)]]
        bad = [i for i in range(len(texts)) if got[i] != ref[i]]
        bad_docs = sum(1 for i in bad if i < len(docs))
        ntok = sum(len(r) for r in ref)
        print(f"{kind}: {src} + {len(hard)} hard strings, {ntok} tokens: {len(bad)} mismatching texts "
              f"({bad_docs} documents, {len(bad) - bad_docs} hard strings) [{time.time() - t0:.1f} s]")
        for i in bad[:5]:
            print(f"  mismatch: text {json.dumps(texts[i][:200])}\n    hf:  {ref[i][:40]}\n    ours: {got[i][:40]}")
        total_bad += len(bad)
    print("hf_compare: " + ("ALL EQUAL" if total_bad == 0 else f"{total_bad} MISMATCHES"))
    sys.exit(1 if total_bad else 0)


if __name__ == "__main__":
    main()
