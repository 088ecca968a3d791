#!/usr/bin/env python3
"""scripts/paper_report.py on saved example outputs (test/paper_report/): the parsed numbers, the markdown table's
rows and ratios, the JSON's metadata, failures and skips reported, the sweep's CSV. Standard library only."""
import csv
import json
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "paper_report.py")
FIX = os.path.join(ROOT, "test", "paper_report")
sys.path.insert(0, os.path.join(ROOT, "scripts"))
import paper_report  # noqa: E402


def run(*args):
    return subprocess.run([sys.executable, SCRIPT] + list(args), capture_output=True, text=True)


class Tables(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp()
        cls.md, cls.js = os.path.join(cls.tmp, "t.md"), os.path.join(cls.tmp, "t.json")
        cls.proc = run("tables", os.path.join(FIX, "tables"), "--md", cls.md, "--json", cls.js)
        with open(cls.md) as f:
            cls.mdtext = f.read()
        with open(cls.js) as f:
            cls.data = json.load(f)

    def test_exit_and_meta(self):
        self.assertEqual(self.proc.returncode, 0, self.proc.stderr)
        m = self.data["meta"]
        self.assertEqual(m["gpu"], "NVIDIA H100 80GB HBM3, 580.159")
        self.assertEqual(m["commit"], "abc1234")
        self.assertEqual(m["date"], "2026-11-28T10:00:00Z")
        self.assertIn("GPU: NVIDIA H100 80GB HBM3, 580.159 | commit abc1234", self.mdtext)

    def test_inference_numbers(self):
        inf = self.data["sizes"]["0.5B"]["inference"]
        self.assertTrue(inf["synthetic"])
        self.assertAlmostEqual(inf["modes"]["dense"]["prefill_tok_per_ms"], 520.292)
        self.assertAlmostEqual(inf["modes"]["sparse"]["prefill_mJ_per_tok"], 1.08)
        self.assertIsNone(inf["modes"]["sparse"]["decode_mJ_per_tok"])  # nan -> null
        self.assertEqual(inf["modes"]["sparse"]["energy_source"], "counter")
        self.assertAlmostEqual(inf["prefill_speedup"], 600.147 / 520.292)
        self.assertAlmostEqual(inf["prefill_energy_ratio"], 1.08 / 1.25)
        self.assertEqual(inf["synthetic_sparsity"]["per_layer"][2], 54.8)
        self.assertAlmostEqual(inf["synthetic_sparsity"]["measured_mean"], 38.88)
        self.assertIn("NVML total-energy counter", inf["energy_source"])

    def test_training_numbers(self):
        tr = self.data["sizes"]["0.5B"]["training"]
        self.assertAlmostEqual(tr["dense"]["tok_per_ms"], 143.5)
        self.assertAlmostEqual(tr["sparse"]["mem_used_GiB"], 12.64)
        self.assertAlmostEqual(tr["sparse"]["nnz_per_token"], 38.9)
        self.assertAlmostEqual(tr["energy_ratio"], 3.7 / 4.1)
        self.assertEqual(tr["energy_source"], "counter")
        self.assertEqual(tr["gpu"], "NVIDIA H100 80GB HBM3")

    def test_markdown_rows(self):
        rows = [l for l in self.mdtext.splitlines() if l.startswith("| 0.5B | prefill")]
        self.assertEqual(len(rows), 1)
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        # size, metric, sparsity, paper dense, paper sparse, paper change, ours dense, ours sparse, change, ratio
        self.assertEqual(cells[5], "+17.0%")
        self.assertEqual(cells[6], "520.3")
        self.assertEqual(cells[7], "600.1")
        self.assertEqual(cells[8], "+15.3%")
        self.assertEqual(cells[9], "{:.3f}".format((600.147 / 520.292) / 1.17))
        self.assertIn("SYNTHETIC paper nnz 39.0 (measured 38.9)", cells[2])
        energy = [l for l in self.mdtext.splitlines() if l.startswith("| 2B | energy")][0]
        self.assertIn("| 7.850 | 6.510 | -17.0% | - | - | - | - |", energy)  # not measured: dashes, no guess
        self.assertIn("| 2B | prefill tokens/ms | SYNTHETIC paper nnz 24.0 (measured 24.1) | 87.8 | 106.0 | +20.5% | 88.1 "
                      "| 105.7 | +20.0% |", self.mdtext)

    def test_failures_and_skips_reported(self):
        self.assertIn("- 1B: skipped: estimated 75s", self.mdtext)
        self.assertIn("- 2B training: error: model_create: cannot allocate", self.mdtext)
        self.assertEqual(self.data["sizes"]["1B"]["status"][:7], "skipped")
        self.assertNotIn("training", self.data["sizes"]["1B"])
        self.assertNotIn("speedup", self.data["sizes"]["2B"]["training"])
        rows = [r for r in self.data["rows"] if r["size"] == "2B" and r["metric"] == "training tokens/ms"]
        self.assertIsNone(rows[0]["ours_dense"])
        self.assertEqual(rows[0]["paper_dense"], 22.4)

    def test_nothing_parsed_fails(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "meta.json"), "w") as f:
                json.dump({"sizes_requested": ["0.5B"], "status": {}}, f)
            p = run("tables", d)
            self.assertEqual(p.returncode, 1)
            p = run("tables", os.path.join(d, "missing"))
            self.assertNotEqual(p.returncode, 0)
            self.assertIn("meta.json is missing", p.stderr)


class Sweep(unittest.TestCase):
    def test_sweep(self):
        with tempfile.TemporaryDirectory() as d:
            c, j = os.path.join(d, "s.csv"), os.path.join(d, "s.json")
            p = run("sweep", os.path.join(FIX, "sweep"), "--csv", c, "--json", j)
            self.assertEqual(p.returncode, 0, p.stderr)
            with open(c) as f:
                rows = list(csv.DictReader(f))
            self.assertEqual([r["lambda"] for r in rows], ["0", "2e-5", "3e-4"])
            r0, r1, r2 = rows
            self.assertEqual(r0["final_val_loss"], "5.6")      # the last val line, not the first
            self.assertEqual(r0["mean_nnz"], "800.0")         # the last sparsity line
            self.assertAlmostEqual(float(r0["dead_pct"]), 0.5)
            self.assertEqual(r1["per_layer_nnz"], "10.0;20.0;40.0;35.0;30.0;25.0;22.0;19.0")
            self.assertEqual(r1["per_layer_dead_pct"].split(";")[0], "60.0")
            self.assertAlmostEqual(float(r1["prefill_speedup"]), 256.0 / 213.333, places=5)
            self.assertAlmostEqual(float(r1["decode_speedup"]), 1.6667 / 1.1111, places=4)
            self.assertEqual(r2["status"], "not run (time budget)")
            self.assertEqual(r2["final_val_loss"], "")
            with open(j) as f:
                data = json.load(f)
            self.assertEqual(data["runs"][0]["train"]["val"], [[0, 10.9512], [300, 6.2], [600, 5.6]])
            self.assertIn("| 2e-5 | 600 | 5.8000 | 25.2 of 2048 | 37.5% | 1.20x | 1.50x | done |", p.stdout)


class Parsers(unittest.TestCase):
    def test_prefix_stripped_and_nan(self):
        out = paper_report.parse_infer(["SYNTHETIC bench-result ffn=dense prefill_tok_per_ms=nan prefill_ms=2.5"])
        self.assertIsNone(out["modes"]["dense"]["prefill_tok_per_ms"])
        self.assertEqual(out["modes"]["dense"]["prefill_ms"], 2.5)
        self.assertTrue(out["synthetic"])
        self.assertNotIn("prefill_speedup", out)


if __name__ == "__main__":
    unittest.main(verbosity=1)
