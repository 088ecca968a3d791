#!/usr/bin/env python3
"""dev/plots.py on fabricated inputs: a training run (metrics.log, train.log), the sweep and table JSON made by
scripts/paper_report.py from test/paper_report/, and dev/ffn_speedup.csv. Every figure is written as a PNG of real
size; inputs without data are skipped with a message, not an exception. Skipped when matplotlib is missing."""
import os
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
try:
    import matplotlib  # noqa: F401
    HAVE_MPL = True
except ImportError:
    HAVE_MPL = False


def fabricate_run(d, L=8, steps=400):
    os.makedirs(d)
    with open(os.path.join(d, "metrics.log"), "w") as m, open(os.path.join(d, "train.log"), "w") as t:
        for s in range(1, steps + 1):
            loss = 10.9 * (0.5 + 0.5 * 2.0 ** (-s / 60.0))
            m.write("s:{} loss:{:.6f} ce:{:.6f} l1:1.0 norm:0.5 lr:0.001 ms:40.0\n".format(s, loss + 0.05, loss))
            t.write("step {:5d}/{} | loss {:.4f} | ce {:.4f} | l1 1.000 | lr 1.00e-03 | norm 0.500 | 40.0 ms\n".format(
                s, steps, loss + 0.05, loss))
            if s % 50 == 0:
                nnz = [max(1.0, 1000.0 * 2.0 ** (-s / (40.0 + 5 * l))) for l in range(L)]
                mean = sum(nnz) / L
                m.write("s:{} nnz:{:.3f} alive:0.8\n".format(s, mean))
                t.write("  sparsity: mean non-zeros/token {:.1f} of 2048 ({:.2f}%), neurons alive 80.0% | per layer:{}\n"
                        .format(mean, 100 * mean / 2048, "".join(" {:.0f}/80%".format(v) for v in nnz)))
            if s % 100 == 0:
                m.write("s:{} val:{:.6f}\n".format(s, loss + 0.1))


@unittest.skipUnless(HAVE_MPL, "matplotlib missing (apt-get install python3-matplotlib)")
class Plots(unittest.TestCase):
    def test_all_figures(self):
        with tempfile.TemporaryDirectory() as tmp:
            run = os.path.join(tmp, "l1_2e-5")
            fabricate_run(run)
            empty = os.path.join(tmp, "empty_run")
            os.makedirs(empty)
            sj, tj = os.path.join(tmp, "sweep.json"), os.path.join(tmp, "tables.json")
            rep = os.path.join(ROOT, "scripts", "paper_report.py")
            fx = os.path.join(ROOT, "test", "paper_report")
            for args in (["sweep", os.path.join(fx, "sweep"), "--json", sj],
                         ["tables", os.path.join(fx, "tables"), "--json", tj]):
                p = subprocess.run([sys.executable, rep] + args, capture_output=True, text=True)
                self.assertEqual(p.returncode, 0, p.stderr)
            out = os.path.join(tmp, "figures")
            p = subprocess.run([sys.executable, os.path.join(ROOT, "dev", "plots.py"), "--out", out, "--run", run,
                                "--run", "nothing=" + empty, "--sweep", sj, "--tables", tj,
                                "--ffn", os.path.join(ROOT, "dev", "ffn_speedup.csv")],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 0, p.stdout + p.stderr)
            for name in ("loss.png", "nnz_layers_l1_2e-5.png", "sweep.png", "ffn_speedup.png", "tables.png"):
                path = os.path.join(out, name)
                self.assertTrue(os.path.exists(path), name + " missing; output:\n" + p.stdout)
                with open(path, "rb") as f:
                    self.assertEqual(f.read(8), b"\x89PNG\r\n\x1a\n")
                self.assertGreater(os.path.getsize(path), 10000, name)
            self.assertIn("skipped " + empty + ": no metrics.log", p.stdout)
            self.assertIn("skipped nnz_layers_nothing.png", p.stdout)

    def test_nothing_to_plot(self):
        with tempfile.TemporaryDirectory() as tmp:
            p = subprocess.run([sys.executable, os.path.join(ROOT, "dev", "plots.py"), "--out", tmp],
                               capture_output=True, text=True)
            self.assertEqual(p.returncode, 1)
            self.assertIn("nothing written", p.stderr)


if __name__ == "__main__":
    unittest.main(verbosity=1)
