#!/usr/bin/env python3
"""Figures (PNG, matplotlib) from the trainer's logs and the sweep / table JSON of scripts/paper_report.py.

  python3 dev/plots.py --out dev/figures [--run DIR ...] [--sweep l1_sweep.json] [--tables paper_tables.json]
                       [--ffn CSV ...]

  --run DIR       a training output directory (metrics.log, train.log), e.g. out/quickstart or out/l1_sweep/l1_2e-5;
                  label: the directory name, or LABEL=DIR. Gives loss.png (training loss and CE per step, validation
                  loss; all runs on one figure) and nnz_layers_<label>.png (per-layer non-zeros per token over
                  training, from train.log's "sparsity:" lines).
  --sweep JSON    l1_sweep.json: sweep.png (final validation loss against mean non-zeros per token, and the sparse/dense
                  prefill and decode speed-ups against it; one point per lambda, labelled).
  --tables JSON   paper_tables.json: tables.png (sparse vs dense change per size and metric, ours beside the paper's).
  --ffn CSV       nnz,speedup,series rows (header line; e.g. dev/ffn_speedup.csv with the dev/RESULTS.md numbers of
                  bench_ffn / bench_ffn_train): ffn_speedup.png, FFN speed-up against non-zeros per token; the sweep's
                  checkpoints are added when --sweep is given.
Each figure is written only when its inputs are given and hold data; the script says what it wrote and what it skipped.
"""
import argparse
import csv
import json
import os
import re
import sys

try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit("plots.py: matplotlib is missing (Debian/Ubuntu: apt-get install python3-matplotlib; or pip install "
             "matplotlib); the JSON/CSV inputs can be plotted on another machine")

METRIC = re.compile(r"^s:(\d+) (.*)$")
SPARS = re.compile(r"sparsity: mean non-zeros/token ([\d.]+) of (\d+) .*\| per layer:(.*)$")
STEP = re.compile(r"^step\s+(\d+)/\d+ \|")


def read_metrics(path):
    train, val, nnz = [], [], []
    with open(path) as f:
        for line in f:
            m = METRIC.match(line.strip())
            if not m:
                continue
            step = int(m[1])
            kv = dict(p.split(":", 1) for p in m[2].split() if ":" in p)
            if "loss" in kv:
                train.append((step, float(kv["loss"]), float(kv.get("ce", "nan"))))
            if "val" in kv:
                val.append((step, float(kv["val"])))
            if "nnz" in kv:
                nnz.append((step, float(kv["nnz"])))
    return train, val, nnz


def read_layer_nnz(path):
    """train.log -> [(step, [nnz per layer])], d_ff; the step is the last 'step N/M' line before the statistics."""
    rows, step, d_ff = [], 0, None
    with open(path, errors="replace") as f:
        for line in f:
            m = STEP.match(line)
            if m:
                step = int(m[1])
            m = SPARS.search(line)
            if m:
                d_ff = int(m[2])
                rows.append((step, [float(p.split("/")[0]) for p in m[3].split()]))
    return rows, d_ff


def save(fig, out, name, wrote):
    path = os.path.join(out, name)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    wrote.append(path)


def plot_runs(runs, out, wrote, skipped):
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    any_loss = False
    for label, d in runs:
        mp = os.path.join(d, "metrics.log")
        if not os.path.exists(mp):
            skipped.append("{}: no metrics.log".format(d))
            continue
        train, val, _ = read_metrics(mp)
        if train:
            any_loss = True
            a1.plot([t[0] for t in train], [t[1] for t in train], lw=1, label=label + " loss")
            a1.plot([t[0] for t in train], [t[2] for t in train], lw=1, ls="--", label=label + " CE")
        if val:
            a2.plot([v[0] for v in val], [v[1] for v in val], marker="o", ms=3, label=label)
    if any_loss:
        a1.set_xlabel("step"); a1.set_ylabel("training loss (CE + lambda L1) / CE"); a1.set_title("training loss")
        a1.legend(fontsize=7); a1.grid(alpha=0.3)
        a2.set_xlabel("step"); a2.set_ylabel("validation loss"); a2.set_title("validation loss"); a2.grid(alpha=0.3)
        a2.legend(fontsize=7)
        save(fig, out, "loss.png", wrote)
    else:
        plt.close(fig)
        skipped.append("loss.png: no training steps in the runs' metrics.log")
    for label, d in runs:
        lp = os.path.join(d, "train.log")
        rows, d_ff = read_layer_nnz(lp) if os.path.exists(lp) else ([], None)
        if not rows:
            skipped.append("nnz_layers_{}.png: no 'sparsity:' lines in {}".format(label, lp))
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        L = len(rows[-1][1])
        cmap = plt.get_cmap("viridis")
        for l in range(L):
            pts = [(s, v[l]) for s, v in rows if len(v) == L]
            ax.plot([p[0] for p in pts], [max(p[1], 0.5) for p in pts], color=cmap(l / max(L - 1, 1)), lw=1.2,
                    label="layer {}".format(l))
        ax.set_yscale("log")
        ax.set_xlabel("step"); ax.set_ylabel("non-zeros per token (of {})".format(d_ff))
        ax.set_title("per-layer FFN non-zeros over training: " + label)
        ax.grid(alpha=0.3, which="both")
        ax.legend(fontsize=6, ncol=2)
        save(fig, out, "nnz_layers_{}.png".format(re.sub(r"[^\w.+-]", "_", label)), wrote)


def plot_sweep(path, out, wrote, skipped):
    with open(path) as f:
        data = json.load(f)
    rows = [r for r in data.get("table", []) if r.get("mean_nnz") is not None and r.get("final_val_loss") is not None]
    if not rows:
        skipped.append("sweep.png: no finished runs in " + path)
        return rows
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(12, 4.5))
    x = [r["mean_nnz"] for r in rows]
    a1.plot(x, [r["final_val_loss"] for r in rows], "o-")
    for r in rows:
        a1.annotate("lambda " + r["lambda"], (r["mean_nnz"], r["final_val_loss"]), fontsize=7,
                    textcoords="offset points", xytext=(4, 4))
    a1.set_xscale("log"); a1.set_xlabel("mean non-zeros per token per layer"); a1.set_ylabel("final validation loss")
    a1.set_title("L1 sweep: loss vs sparsity"); a1.grid(alpha=0.3, which="both")
    for key, lab in (("prefill_speedup", "prefill"), ("decode_speedup", "decode")):
        pts = [(r["mean_nnz"], r[key]) for r in rows if r.get(key)]
        if pts:
            a2.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=lab)
    a2.axhline(1.0, color="gray", lw=0.8)
    a2.set_xscale("log"); a2.set_xlabel("mean non-zeros per token per layer")
    a2.set_ylabel("sparse / dense FFN throughput (infer --bench)"); a2.set_title("speed-up of each checkpoint")
    a2.grid(alpha=0.3, which="both"); a2.legend(fontsize=8)
    fig.suptitle(data.get("meta", {}).get("preset_desc", ""), fontsize=8)
    save(fig, out, "sweep.png", wrote)
    return rows


def plot_ffn(paths, sweep_rows, out, wrote, skipped):
    series = {}
    for p in paths:
        with open(p) as f:
            for r in csv.DictReader(f):
                series.setdefault(r.get("series") or os.path.basename(p), []).append(
                    (float(r["nnz"]), float(r["speedup"])))
    if sweep_rows:
        pts = [(r["mean_nnz"], r["prefill_speedup"]) for r in sweep_rows if r.get("prefill_speedup")]
        if pts:
            series["L1 sweep checkpoints, whole-model prefill (d_ff 2048)"] = pts
    if not series:
        skipped.append("ffn_speedup.png: no --ffn CSV rows")
        return
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, pts in series.items():
        pts.sort()
        ax.plot([p[0] for p in pts], [p[1] for p in pts], "o-", label=name)
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set_xscale("log"); ax.set_xlabel("non-zeros per token"); ax.set_ylabel("sparse / dense speed-up")
    ax.set_title("FFN speed-up vs sparsity"); ax.grid(alpha=0.3, which="both"); ax.legend(fontsize=7)
    save(fig, out, "ffn_speedup.png", wrote)


def plot_tables(path, out, wrote, skipped):
    with open(path) as f:
        data = json.load(f)
    rows = data.get("rows", [])
    metrics = ["prefill tokens/ms", "energy mJ/token (prefill)", "training tokens/ms", "training memory GiB (device used)"]
    sizes = [s for s in data.get("sizes", {})]
    if not any(r.get("ours_change_pct") is not None for r in rows):
        skipped.append("tables.png: no measured changes in " + path)
        return
    fig, axes = plt.subplots(1, len(metrics), figsize=(4 * len(metrics), 4))
    for ax, met in zip(axes, metrics):
        xs = range(len(sizes))
        get = lambda s, k: next((r.get(k) for r in rows if r["size"] == s and r["metric"] == met), None)
        paper = [get(s, "paper_change_pct") for s in sizes]
        ours = [get(s, "ours_change_pct") for s in sizes]
        ax.bar([x - 0.2 for x in xs], [v if v is not None else 0 for v in paper], 0.4, label="paper", color="#999")
        ax.bar([x + 0.2 for x in xs], [v if v is not None else 0 for v in ours], 0.4, label="ours", color="#1f77b4")
        for x, v in zip(xs, ours):
            if v is None:
                ax.annotate("n/a", (x + 0.2, 0), ha="center", fontsize=7)
        ax.set_xticks(list(xs)); ax.set_xticklabels(sizes); ax.axhline(0, color="black", lw=0.6)
        ax.set_title(met, fontsize=9); ax.set_ylabel("sparse vs dense, %"); ax.grid(alpha=0.3, axis="y")
    axes[0].legend(fontsize=8)
    m = data.get("meta", {})
    fig.suptitle("{} | commit {} | {}".format(m.get("gpu", "?"), m.get("commit", "?"), m.get("date", "?")), fontsize=8)
    save(fig, out, "tables.png", wrote)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", required=True)
    ap.add_argument("--run", action="append", default=[])
    ap.add_argument("--sweep")
    ap.add_argument("--tables")
    ap.add_argument("--ffn", action="append", default=[])
    a = ap.parse_args(argv)
    os.makedirs(a.out, exist_ok=True)
    wrote, skipped = [], []
    runs = []
    for r in a.run:
        label, d = r.split("=", 1) if "=" in r and not os.path.isdir(r) else (os.path.basename(r.rstrip("/")), r)
        if not os.path.isdir(d):
            sys.exit("plots.py: --run {}: not a directory".format(d))
        runs.append((label, d))
    if runs:
        plot_runs(runs, a.out, wrote, skipped)
    sweep_rows = plot_sweep(a.sweep, a.out, wrote, skipped) if a.sweep else []
    if a.ffn or sweep_rows:
        plot_ffn(a.ffn, sweep_rows, a.out, wrote, skipped)
    if a.tables:
        plot_tables(a.tables, a.out, wrote, skipped)
    for p in wrote:
        print("plots.py: wrote " + p)
    for s in skipped:
        print("plots.py: skipped " + s)
    if not wrote:
        print("plots.py: nothing written (no input held data)", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
