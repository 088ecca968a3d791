#!/usr/bin/env python3
"""Streams FineWeb-Edu (deduplicated) documents as JSONL {"text": ...} lines to stdout, for build/tokenize.

Default source: the Hugging Face dataset HuggingFaceTB/smollm-corpus, config fineweb-edu-dedup (the
deduplicated FineWeb-Edu used for SmolLM), read through the hub's datasets-server-free path: the parquet
files of the config, streamed with pyarrow (pip: huggingface_hub pyarrow). The network part fails fast with a
clear message when the hub is unreachable (short timeout). --local-jsonl FILE replays a local JSONL file
through the same filtering/limits with the standard library only (used by the tests).

usage: fineweb_stream.py [--local-jsonl FILE] [--max-docs N] [--dataset ID] [--config NAME] [--field text]
                         [--timeout S] [--check-hub]
"""
import argparse
import json
import socket
import sys
import urllib.error
import urllib.request

HUB = "https://huggingface.co"


def hub_reachable(timeout):
    try:
        urllib.request.urlopen(HUB + "/api/datasets/HuggingFaceTB/smollm-corpus", timeout=timeout).close()
        return None
    except (urllib.error.URLError, socket.timeout, OSError) as e:
        return str(getattr(e, "reason", e))


def emit(text, out):
    out.write(json.dumps({"text": text}, ensure_ascii=False))
    out.write("\n")


def stream_local(path, field, max_docs, out):
    n = 0
    with open(path, encoding="utf-8", errors="surrogateescape") as f:
        for lineno, line in enumerate(f, 1):
            if max_docs and n >= max_docs:
                break
            if not line.strip():
                continue
            try:
                obj = json.loads(line)
                text = obj[field]
                if not isinstance(text, str):
                    raise TypeError(f"field {field!r} is not a string")
            except (ValueError, KeyError, TypeError) as e:
                # pass the bad line through unchanged: build/tokenize reports it with its line number
                sys.stderr.write(f"fineweb_stream: {path}:{lineno}: bad line ({type(e).__name__}), passed on\n")
                out.write(line if line.endswith("\n") else line + "\n")
                n += 1
                continue
            if text:
                emit(text, out)
                n += 1
    return n


def stream_hub(dataset, config, field, max_docs, timeout, out):
    try:
        from huggingface_hub import HfFileSystem
        import pyarrow.parquet as pq
    except ImportError as e:
        sys.exit(f"error: streaming from the hub needs the python packages huggingface_hub and pyarrow ({e}); "
                 "pip install huggingface_hub pyarrow")
    fs = HfFileSystem()
    files = sorted(fs.glob(f"datasets/{dataset}/{config}/*.parquet"))
    if not files:
        sys.exit(f"error: no parquet files under datasets/{dataset}/{config} on the hub")
    n = 0
    for path in files:
        with fs.open(path, "rb", block_size=16 << 20) as fh:
            pf = pq.ParquetFile(fh)
            for batch in pf.iter_batches(columns=[field], batch_size=1024):
                for text in batch.column(0).to_pylist():
                    if text:
                        emit(text, out)
                        n += 1
                        if max_docs and n >= max_docs:
                            return n
    return n


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--local-jsonl", help="read this JSONL file instead of the hub (no network)")
    ap.add_argument("--dataset", default="HuggingFaceTB/smollm-corpus")
    ap.add_argument("--config", default="fineweb-edu-dedup")
    ap.add_argument("--field", default="text")
    ap.add_argument("--max-docs", type=int, default=0, help="stop after N documents (0: all)")
    ap.add_argument("--timeout", type=float, default=10.0, help="seconds for the hub reachability check")
    ap.add_argument("--check-hub", action="store_true", help="only check that the hub is reachable")
    a = ap.parse_args()
    out = sys.stdout
    try:
        if a.local_jsonl:
            n = stream_local(a.local_jsonl, a.field, a.max_docs, out)
        else:
            why = hub_reachable(a.timeout)
            if why is not None:
                sys.exit(f"error: the Hugging Face hub ({HUB}) is unreachable within {a.timeout:g} s: {why}. "
                         "FineWeb-Edu must be streamed from a machine with internet access; "
                         "use scripts/starter_data.sh for offline starter data.")
            if a.check_hub:
                print("fineweb_stream: hub reachable", file=sys.stderr)
                return
            n = stream_hub(a.dataset, a.config, a.field, a.max_docs, a.timeout, out)
        out.flush()
        print(f"fineweb_stream: {n} documents", file=sys.stderr)
    except BrokenPipeError:
        pass  # the tokenizer stopped early (--max-tokens)


if __name__ == "__main__":
    main()
