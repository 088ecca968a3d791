#!/usr/bin/env python3
"""Turns the raw outputs of scripts/paper_tables.sh and scripts/l1_sweep.sh into tables (Python standard library only:
it runs on the GPU machine).

  python3 scripts/paper_report.py tables RUN_DIR [--md OUT.md] [--json OUT.json]
      RUN_DIR/meta.json (written by paper_tables.sh: gpu, commit, date, settings, sizes run / skipped and why) and per
      size RUN_DIR/<size>/infer.txt (build/infer --bench) and RUN_DIR/<size>/train.txt (train_gpt_relu --bench-compare).
      Writes a markdown table with the paper's published figures beside ours and the ratios, and a JSON of every number.
  python3 scripts/paper_report.py sweep RUN_DIR [--csv OUT.csv] [--json OUT.json] [--md OUT.md]
      RUN_DIR/meta.json and per lambda RUN_DIR/l1_<lambda>/train.log (the trainer's log) and .../infer.txt.

Every number comes from a line our binaries print; a missing line is reported (null in the JSON, "-" in the table),
never guessed. Exit status 1 when nothing at all could be parsed.
"""
import argparse
import json
import math
import os
import re
import sys

# ../shared/PAPER.md, "Published results (H100 PCIe, 8 GPUs, sequence 2048, lambda 2e-5)". Relative changes of sparse
# against dense in percent; absolute numbers where the paper gives them.
PAPER = {
    "source": "PAPER.md (Sakana AI / NVIDIA 2026), H100 PCIe, 8 GPUs, sequence 2048, lambda 2e-5",
    "mean_nnz": {"0.5B": 39, "1B": None, "1.5B": 29, "2B": 24},
    "sizes": {
        "0.5B": {"inference_pct": 17.0, "energy_pct": -11.8, "training_pct": -1.5, "memory_pct": -19.2,
                 "memory_gb": [26.2, 21.2]},
        "1B": {"inference_pct": 18.1, "energy_pct": -14.6, "training_pct": 7.1, "memory_pct": -25.5,
               "memory_gb": [44.5, 33.1]},
        "1.5B": {"inference_pct": 18.8, "energy_pct": -15.0, "training_pct": 11.6, "memory_pct": -28.1,
                 "memory_gb": [62.8, 45.1]},
        "2B": {"inference_pct": 20.5, "energy_pct": -17.0, "training_pct": 21.9, "memory_pct": 22.3,
               "memory_note": "bigger micro-batch", "prefill_tok_per_ms": [87.8, 106.0],
               "train_tok_per_ms": [22.4, 27.3], "energy_mj_per_tok": [7.85, 6.51]},
    },
}
SIZES = ["0.5B", "1B", "1.5B", "2B"]

KV = re.compile(r"(\w+)=(\S+)")


def strip_prefix(line):
    return line[len("SYNTHETIC "):] if line.startswith("SYNTHETIC ") else line


def num(s):
    try:
        v = float(s)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(v) else v


def read_lines(path):
    if not os.path.exists(path):
        return None
    with open(path, errors="replace") as f:
        return f.read().splitlines()


def parse_infer(lines):
    """build/infer --bench output -> dict (modes: dense/sparse/auto with their bench-result fields)."""
    out = {"modes": {}, "synthetic": False, "synthetic_sparsity": None, "energy_source": None, "errors": []}
    for raw in lines:
        if raw.startswith("SYNTHETIC "):
            out["synthetic"] = True
        line = strip_prefix(raw)
        if line.startswith("bench-result "):
            kv = dict(KV.findall(line))
            mode = kv.pop("ffn", "?")
            out["modes"][mode] = {k: (v if k == "energy_source" else num(v)) for k, v in kv.items()}
        elif line.startswith("synthetic-sparsity "):
            kv = dict(KV.findall(line))
            out["synthetic_sparsity"] = {
                "profile": kv.get("profile"), "target_mean": num(kv.get("target_mean")),
                "measured_mean": num(kv.get("measured_mean")), "worst_layer_err": num(kv.get("worst_layer_err")),
                "per_layer": [num(x) for x in kv.get("per_layer", "").split(",") if x],
            }
        elif line.startswith("energy: "):
            out["energy_source"] = line[len("energy: "):].split(";")[0]
        elif line.startswith("checkpoint "):
            out["checkpoint"] = line.split()[1]
        elif line.startswith("error:"):
            out["errors"].append(line)
    d, s = out["modes"].get("dense"), out["modes"].get("sparse")
    if d and s:
        out["prefill_speedup"] = ratio(s.get("prefill_tok_per_ms"), d.get("prefill_tok_per_ms"))
        out["prefill_energy_ratio"] = ratio(s.get("prefill_mJ_per_tok"), d.get("prefill_mJ_per_tok"))
        out["decode_speedup"] = ratio(s.get("decode_tok_per_ms"), d.get("decode_tok_per_ms"))
    return out


BC = re.compile(r"^bench-compare(?P<syn> \(SYNTHETIC sparsity\))?: dense FFN (?P<dms>[\d.]+) ms/step, (?P<dtok>[\d.]+) "
                r"tokens/ms, device memory used (?P<dused>[\d.]+) GiB \(allocated (?P<dalloc>[\d.]+) GiB\) \| sparse FFN "
                r"(?P<sms>[\d.]+) ms/step, (?P<stok>[\d.]+) tokens/ms, device memory used (?P<sused>[\d.]+) GiB "
                r"\(allocated (?P<salloc>[\d.]+) GiB\), non-zeros/token (?P<nnz>-?[\d.]+)")
BCE = re.compile(r"^bench-compare energy(?: \(SYNTHETIC sparsity\))?: dense FFN (?P<d>[\d.]+) mJ/token \| sparse FFN "
                 r"(?P<s>[\d.]+) mJ/token \| (?P<pct>[-+\d.]+)% \((?P<src>\w+)\)")


def parse_train(lines):
    """train_gpt_relu --bench-compare output -> dict."""
    out = {"synthetic": False, "errors": []}
    for line in lines:
        line = strip_prefix(line)
        m = BC.match(line)
        if m:
            g = m.groupdict()
            out["synthetic"] = bool(g["syn"])
            out["dense"] = {"ms_per_step": num(g["dms"]), "tok_per_ms": num(g["dtok"]), "mem_used_GiB": num(g["dused"]),
                            "mem_alloc_GiB": num(g["dalloc"])}
            out["sparse"] = {"ms_per_step": num(g["sms"]), "tok_per_ms": num(g["stok"]), "mem_used_GiB": num(g["sused"]),
                             "mem_alloc_GiB": num(g["salloc"]), "nnz_per_token": num(g["nnz"])}
        m = BCE.match(line)
        if m:
            out.setdefault("dense", {})["mJ_per_tok"] = num(m["d"])
            out.setdefault("sparse", {})["mJ_per_tok"] = num(m["s"])
            out["energy_source"] = m["src"]
        if line.startswith("device: ") and "gpu" not in out:
            out["gpu"] = line[len("device: "):].split(",")[0]
        if line.startswith("error:"):
            out["errors"].append(line)
    if "dense" in out and "sparse" in out:
        d, s = out["dense"], out["sparse"]
        out["speedup"] = ratio(s.get("tok_per_ms"), d.get("tok_per_ms"))
        out["mem_used_ratio"] = ratio(s.get("mem_used_GiB"), d.get("mem_used_GiB"))
        out["mem_alloc_ratio"] = ratio(s.get("mem_alloc_GiB"), d.get("mem_alloc_GiB"))
        out["energy_ratio"] = ratio(s.get("mJ_per_tok"), d.get("mJ_per_tok"))
    return out


def ratio(a, b):
    return a / b if a is not None and b not in (None, 0) else None


def pct(r):
    return None if r is None else 100.0 * (r - 1.0)


def fmt(v, spec="{:.1f}"):
    return "-" if v is None else spec.format(v)


def fmt_pct(p):
    return "-" if p is None else "{:+.1f}%".format(p)


def tables(run_dir, md_path, json_path):
    meta = load_json(os.path.join(run_dir, "meta.json"))
    result = {"meta": meta, "paper": PAPER, "sizes": {}}
    parsed_any = False
    for size in meta.get("sizes_requested", SIZES):
        entry = {"status": meta.get("status", {}).get(size, "not run")}
        il = read_lines(os.path.join(run_dir, size, "infer.txt"))
        tl = read_lines(os.path.join(run_dir, size, "train.txt"))
        if il is not None:
            entry["inference"] = parse_infer(il)
            parsed_any |= bool(entry["inference"]["modes"])
        if tl is not None:
            entry["training"] = parse_train(tl)
            parsed_any |= "speedup" in entry["training"]
        result["sizes"][size] = entry

    rows = []
    for size, e in result["sizes"].items():
        p = PAPER["sizes"].get(size, {})
        inf, tr = e.get("inference", {}), e.get("training", {})
        d, s = inf.get("modes", {}).get("dense", {}), inf.get("modes", {}).get("sparse", {})
        syn = inf.get("synthetic_sparsity")
        if syn:
            src = "SYNTHETIC {} nnz {} (measured {})".format(syn["profile"], fmt(syn["target_mean"]),
                                                            fmt(syn["measured_mean"]))
        elif inf.get("checkpoint"):
            src = "checkpoint"
        else:
            src = "-"
        pi = p.get("prefill_tok_per_ms", [None, None])
        pe = p.get("energy_mj_per_tok", [None, None])
        pt = p.get("train_tok_per_ms", [None, None])
        pm = p.get("memory_gb", [None, None])
        td, ts = tr.get("dense", {}), tr.get("sparse", {})
        rows.append([size, "prefill tokens/ms", src, pi[0], pi[1], p.get("inference_pct"),
                     d.get("prefill_tok_per_ms"), s.get("prefill_tok_per_ms"), pct(inf.get("prefill_speedup"))])
        rows.append([size, "energy mJ/token (prefill)", src, pe[0], pe[1], p.get("energy_pct"),
                     d.get("prefill_mJ_per_tok"), s.get("prefill_mJ_per_tok"), pct(inf.get("prefill_energy_ratio"))])
        tsrc = "SYNTHETIC nnz {}".format(fmt(ts.get("nnz_per_token"))) if tr.get("synthetic") else "-"
        rows.append([size, "training tokens/ms", tsrc, pt[0], pt[1], p.get("training_pct"),
                     td.get("tok_per_ms"), ts.get("tok_per_ms"), pct(tr.get("speedup"))])
        rows.append([size, "training memory GiB (device used)", tsrc, pm[0], pm[1], p.get("memory_pct"),
                     td.get("mem_used_GiB"), ts.get("mem_used_GiB"), pct(tr.get("mem_used_ratio"))])
        if tr.get("energy_ratio") is not None:
            rows.append([size, "training energy mJ/token", tsrc, None, None, None, td.get("mJ_per_tok"),
                         ts.get("mJ_per_tok"), pct(tr.get("energy_ratio"))])
    result["rows"] = [dict(zip(["size", "metric", "sparsity", "paper_dense", "paper_sparse", "paper_change_pct",
                                "ours_dense", "ours_sparse", "ours_change_pct"], r)) for r in rows]

    st = meta.get("settings", {})
    md = ["# Efficiency: dense vs sparse FFN, one GPU", "",
          "GPU: {} | commit {} | {} | paper: {}".format(meta.get("gpu", "?"), meta.get("commit", "?"),
                                                        meta.get("date", "?"), PAPER["source"]), "",
          "Ours: one process per size, dense and sparse side by side. Prefill: `build/infer --bench` over {} x {} random "
          "tokens (the paper: 64 x 2048, model without LM head; ours adds the last row's logits), median of {} rounds; "
          "energy: NVML over >= {} ms of each mode's prefill. Training: `train_gpt_relu --bench-compare`, B {} x T {}, "
          "median of {} steps; memory: device memory used (the paper: 8 GPUs with ZeRO-1 and micro-batch 8, so only the "
          "change compares). Change: sparse / dense - 1; ratio: our sparse/dense over the paper's.".format(
              st.get("samples", "?"), st.get("prompt", "?"), st.get("reps", "?"), st.get("energy_ms", "?"),
              st.get("train_batch", "?"), st.get("seq", "?"), st.get("train_steps", "?")), "",
          "| size | metric | sparsity (ours) | paper dense | paper sparse | paper change | ours dense | ours sparse "
          "| our change | ratio ours/paper |",
          "|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        size, metric, src, pd, ps, pc, od, os_, oc = r
        rr = None
        if pc is not None and oc is not None:
            rr = (1 + oc / 100.0) / (1 + pc / 100.0)
        spec = "{:.3f}" if "mJ" in metric else "{:.1f}"
        md.append("| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |".format(
            size, metric, src, fmt(pd, spec), fmt(ps, spec), fmt_pct(pc), fmt(od, spec), fmt(os_, spec), fmt_pct(oc),
            fmt(rr, "{:.3f}")))
    md.append("")
    for size, e in result["sizes"].items():
        if e["status"] != "ok":
            md.append("- {}: {}".format(size, e["status"]))
        for part in ("inference", "training"):
            for err in e.get(part, {}).get("errors", []):
                md.append("- {} {}: {}".format(size, part, err))
    if PAPER["sizes"]["2B"].get("memory_note"):
        md.append("- paper 2B memory: +22.3% because its sparse run used a bigger micro-batch.")
    md.append("- SYNTHETIC: random weights calibrated to the paper's mean non-zeros per token (1B: not in PAPER.md, "
              "interpolated); the per-layer shape is assumed (PAPER.md gives it only in words); no position decay imposed.")
    text = "\n".join(md) + "\n"
    if md_path:
        with open(md_path, "w") as f:
            f.write(text)
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    sys.stdout.write(text)
    return 0 if parsed_any else 1


# ---- L1 sweep -------------------------------------------------------------------------------------------------------
STEP = re.compile(r"^step\s+(\d+)/(\d+) \| loss ([\d.]+) \| ce ([\d.]+)")
VAL = re.compile(r"^step (\d+) \| val loss ([\d.]+)")
SPARS = re.compile(r"^\s*sparsity: mean non-zeros/token ([\d.]+) of (\d+) \(([\d.]+)%\), neurons alive ([\d.]+)% \| "
                   r"per layer:(.*)$")


def parse_train_log(lines):
    out = {"val": [], "steps": 0, "last_loss": None, "last_ce": None, "sparsity": None}
    for line in lines:
        m = STEP.match(line)
        if m:
            out["steps"] = int(m[1])
            out["total_steps"] = int(m[2])
            out["last_loss"], out["last_ce"] = float(m[3]), float(m[4])
        m = VAL.match(line)
        if m:
            out["val"].append([int(m[1]), float(m[2])])
        m = SPARS.match(line)
        if m:
            per = [p.split("/") for p in m[5].split()]
            out["sparsity"] = {"mean_nnz": float(m[1]), "d_ff": int(m[2]), "alive_pct": float(m[4]),
                               "per_layer_nnz": [float(a) for a, _ in per],
                               "per_layer_alive_pct": [float(b.rstrip("%")) for _, b in per]}
    out["final_val_loss"] = out["val"][-1][1] if out["val"] else None
    return out


def sweep(run_dir, csv_path, json_path, md_path):
    meta = load_json(os.path.join(run_dir, "meta.json"))
    runs = []
    for lam in meta.get("lambdas", []):
        d = os.path.join(run_dir, "l1_" + lam)
        r = {"lambda": float(lam), "lambda_str": lam, "status": meta.get("status", {}).get(lam, "not run")}
        tl = read_lines(os.path.join(d, "train.log"))
        if tl is not None:
            r["train"] = parse_train_log(tl)
        il = read_lines(os.path.join(d, "infer.txt"))
        if il is not None:
            r["infer"] = parse_infer(il)
        runs.append(r)
    cols = ["lambda", "status", "steps", "final_val_loss", "final_ce", "mean_nnz", "d_ff", "dead_pct", "per_layer_nnz",
            "per_layer_dead_pct", "prefill_speedup", "decode_speedup", "dense_prefill_tok_per_ms",
            "sparse_prefill_tok_per_ms"]
    table = []
    for r in runs:
        t, i = r.get("train", {}), r.get("infer", {})
        sp = t.get("sparsity") or {}
        modes = i.get("modes", {})
        row = {"lambda": r["lambda_str"], "status": r["status"], "steps": t.get("steps"),
               "final_val_loss": t.get("final_val_loss"), "final_ce": t.get("last_ce"), "mean_nnz": sp.get("mean_nnz"),
               "d_ff": sp.get("d_ff"),
               "dead_pct": None if sp.get("alive_pct") is None else 100.0 - sp["alive_pct"],
               "per_layer_nnz": sp.get("per_layer_nnz"),
               "per_layer_dead_pct": [100.0 - a for a in sp.get("per_layer_alive_pct", [])] or None,
               "prefill_speedup": i.get("prefill_speedup"), "decode_speedup": i.get("decode_speedup"),
               "dense_prefill_tok_per_ms": modes.get("dense", {}).get("prefill_tok_per_ms"),
               "sparse_prefill_tok_per_ms": modes.get("sparse", {}).get("prefill_tok_per_ms")}
        table.append(row)
    result = {"meta": meta, "runs": runs, "table": table}
    if csv_path:
        with open(csv_path, "w") as f:
            f.write(",".join(cols) + "\n")
            for row in table:
                vals = []
                for c in cols:
                    v = row[c]
                    if isinstance(v, list):
                        v = ";".join("{:.1f}".format(x) for x in v)
                    vals.append("" if v is None else str(v))
                f.write(",".join(vals) + "\n")
    if json_path:
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
    md = ["# L1 sweep: {} | {} | commit {} | {}".format(meta.get("preset_desc", "?"), meta.get("gpu", "?"),
                                                        meta.get("commit", "?"), meta.get("date", "?")), "",
          "| lambda | steps | final val loss | mean non-zeros/token | dead units | sparse/dense prefill | "
          "sparse/dense decode | status |", "|---|---|---|---|---|---|---|---|"]
    for row in table:
        md.append("| {} | {} | {} | {} | {} | {} | {} | {} |".format(
            row["lambda"], fmt(row["steps"], "{}"), fmt(row["final_val_loss"], "{:.4f}"),
            "-" if row["mean_nnz"] is None else "{:.1f} of {}".format(row["mean_nnz"], row["d_ff"]),
            fmt(row["dead_pct"], "{:.1f}%"), fmt(row["prefill_speedup"], "{:.2f}x"),
            fmt(row["decode_speedup"], "{:.2f}x"), row["status"]))
    text = "\n".join(md) + "\n"
    if md_path:
        with open(md_path, "w") as f:
            f.write(text)
    sys.stdout.write(text)
    return 0 if any(r.get("train", {}).get("steps") for r in runs) else 1


def load_json(path):
    if not os.path.exists(path):
        sys.exit("paper_report: {} is missing (written by the driving script)".format(path))
    with open(path) as f:
        return json.load(f)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("tables")
    t.add_argument("run_dir")
    t.add_argument("--md")
    t.add_argument("--json")
    s = sub.add_parser("sweep")
    s.add_argument("run_dir")
    s.add_argument("--csv")
    s.add_argument("--json")
    s.add_argument("--md")
    a = ap.parse_args(argv)
    if a.cmd == "tables":
        return tables(a.run_dir, a.md, a.json)
    return sweep(a.run_dir, a.csv, a.json, a.md)


if __name__ == "__main__":
    sys.exit(main())
