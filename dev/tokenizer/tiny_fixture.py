#!/usr/bin/env python3
"""Writes a tiny byte-level BPE (all 256 byte tokens + a few dozen merges) in both of the loader's formats:
  OUT/tiny_gpt2/encoder.json + vocab.bpe   (GPT-2 files, also what the npm reference encoder reads)
  OUT/tiny_tokenizer.json                   (Hugging Face tokenizer.json, same vocab, merges and regex)
and prints the test strings as a JSON array to stdout (make_tiny_golden.sh encodes them with the reference).
The merges are chosen so that each classic encoder bug changes some string's ids:
  reversed merge priority ("a b" before "b c": "abc" -> ab c, not a bc), the tie-break among equal pairs
  ("aaa" -> aa a, not a aa; long runs take the heap path), each contraction of the regex ("'s", "'ll"...),
  and the whitespace class (tab, newline, NBSP, U+3000, U+2028, U+FEFF are whitespace; U+0085 is not)."""
import json
import os
import sys

def bytes_to_unicode():
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + list(range(ord("®"), ord("ÿ") + 1))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b); cs.append(256 + n); n += 1
    return dict(zip(bs, map(chr, cs)))

B = bytes_to_unicode()
def bl(s):  # byte-level string of a text
    return "".join(B[b] for b in s.encode("utf-8"))

# Merges as pairs of texts (each side must already be a token); order = priority.
PAIRS = [
    ("a", "b"), ("b", "c"),                       # reversed priority: "abc"
    ("a", "a"), ("aa", "aa"), ("aa", "a"),        # tie-break: "aaa", long runs
    ("'", "s"), ("'", "t"), ("'", "r"), ("'r", "e"), ("'", "v"), ("'v", "e"), ("'", "m"),
    ("'", "l"), ("'l", "l"), ("'", "d"),          # contractions
    ("s", "s"), ("l", "l"), (" ", "s"),           # competitors of the contractions
    (" ", " "), ("  ", "  "), ("  ", " "), ("\n", "\n"), ("\t", "\t"), (" ", "\n"), ("\n", " "),
    ("\u3000", "\u3000"), ("\u2028", "\u2028"), ("\ufeff", "\ufeff"), ("\u0085", "\u0085"),
    ("1", "2"), (" ", "1"), (" ", "t"), ("h", "e"), (" t", "he"), ("i", "t"), (" ", "i"), (" i", "t"),
    ("d", "o"), ("n", "'t"), ("do", "n't"), ("x", "y"), (" ", "x"), (" x", "y"),
]

def main():
    out = sys.argv[1]
    vocab = {B[b]: i for i, b in enumerate(range(256))}
    merges = []
    def tok(text):
        s = bl(text) if isinstance(text, str) else "".join(B[b] for b in text)
        return s
    # multi-byte characters first merge their own bytes into one token (NBSP: C2 A0, U+3000: E3 80 80, ...)
    pairs = []
    for ch in ["\u00a0", "\u3000", "\u2028", "\ufeff", "\u0085"]:
        b = ch.encode("utf-8")
        acc = b[:1]
        for k in range(1, len(b)):
            pairs.append((acc, b[k:k + 1])); acc = acc + b[k:k + 1]
    pairs.append(("\u00a0", "\u00a0"))
    pairs += PAIRS
    for a, b in pairs:
        ta, tb = tok(a), tok(b)
        assert ta in vocab and tb in vocab, (a, b)
        merges.append((ta, tb))
        if ta + tb not in vocab: vocab[ta + tb] = len(vocab)
    eot = len(vocab)
    vocab["<|endoftext|>"] = eot
    os.makedirs(os.path.join(out, "tiny_gpt2"), exist_ok=True)
    with open(os.path.join(out, "tiny_gpt2", "encoder.json"), "w") as f:
        json.dump(vocab, f, ensure_ascii=False)
    with open(os.path.join(out, "tiny_gpt2", "vocab.bpe"), "w", encoding="utf-8") as f:
        f.write("#version: 0.2\n" + "".join(f"{a} {b}\n" for a, b in merges))
    hf = {
        "version": "1.0", "truncation": None, "padding": None,
        "added_tokens": [{"id": eot, "content": "<|endoftext|>", "single_word": False, "lstrip": False,
                          "rstrip": False, "normalized": False, "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True},
        "post_processor": None, "decoder": {"type": "ByteLevel"},
        "model": {"type": "BPE", "dropout": None, "unk_token": None, "continuing_subword_prefix": "",
                  "end_of_word_suffix": "", "fuse_unk": False, "vocab": {k: v for k, v in vocab.items() if v != eot},
                  "merges": [f"{a} {b}" for a, b in merges]},
    }
    with open(os.path.join(out, "tiny_tokenizer.json"), "w") as f:
        json.dump(hf, f, ensure_ascii=False)
    ws = [" ", "\t", "\n", "\r", "\x0b", "\x0c", "\u00a0", "\u1680", "\u2000", "\u2009", "\u200a", "\u2028",
          "\u2029", "\u202f", "\u205f", "\u3000", "\ufeff", "\u0085", "\u200b"]
    strings = ["", "abc", "abcabc", " abc", "aaa", "aaaa", "aaaaa", "a" * 7, "a" * 64, "a" * 65, "a" * 67,
               "b" + "a" * 65 + "b", "ab" * 40, "aab" * 30, "abc" * 30 + "a",
               "it's", "it't", "you're", "we've", "I'm", "he'll", "she'd", "don't", "'s 't 're 've 'm 'll 'd",
               "x's", "'ss", "'ll'll", "IT'S", "it’s", "''s",
               "the", " the", "the the  the   the", "12 123 1212", " x xy  xy", "x\ny", "xy\n\nxy",
               "x<|endoftext|>y"]
    for w in ws:
        strings += [f"x{w}y", f"x{w}{w}y", f"x {w}y", f"x{w} y", f"{w}{w}{w}", f"x{w}", f"{w}x", f"x{w}{w} {w}y"]
    strings += ["  \t\n \n\n  x", "x  \n  y", "\t\t x", " \u00a0 \u00a0x", "a\u3000\u3000 b", "\n\n\n\n\n"]
    json.dump(strings, sys.stdout, ensure_ascii=False)

main()
