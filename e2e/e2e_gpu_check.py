"""End-to-end: scripts/gpu_check.sh (docs/testing.md, "On a GPU").

Without a GPU (this project's CI) the script must still run the probe and the
GPU preflight (SKIPPED, the job runs) and exit 77; with a GPU and torch with
CUDA it must pass every check (exit 0).
"""

import glob
import os
import re
import subprocess
import unittest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SCRIPT = os.path.join(ROOT, "scripts", "gpu_check.sh")
PY = os.environ.get("E2E_PYTHON", "/usr/bin/python3")


def have_cuda():
    if not glob.glob("/dev/nvidia[0-9]*"):
        return False
    r = subprocess.run([PY, "-c", "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"],
                       capture_output=True, timeout=120)
    return r.returncode == 0


class GpuCheckScriptTest(unittest.TestCase):

    def run_script(self):
        env = dict(os.environ, PYTHON=PY)
        r = subprocess.run(["bash", SCRIPT], env=env, capture_output=True, text=True, timeout=170)
        return r.returncode, r.stdout + r.stderr

    def test_script(self):
        rc, out = self.run_script()
        if have_cuda():
            self.assertEqual(rc, 0, out)
            for line in ("PASS: probe:", "PASS: NCCL read trainlet's topology file",
                         "PASS: GPU preflight", "PASS: DDP on NCCL"):
                self.assertIn(line, out)
            return
        self.assertEqual(rc, 77, out)
        self.assertIn("1. trainlet probe", out)
        self.assertIn('"hostname"', out, "the probe's JSON is printed")
        self.assertIn("PASS: trainlet probe", out)
        self.assertIn("PASS: GPU preflight without a GPU: skipped, not failed", out)
        self.assertIn("SKIPPED NCCL topology file", out)
        self.assertIn("exit 77 (skip)", out)

    def test_preflight_gpu_adds_its_two_checks(self):
        """The agent runs the loopback with --preflight-gpu: two more results
        in the round's report (SKIPPED here without CUDA), none without it."""
        if have_cuda():
            self.skipTest("counts SKIPPED results: a machine without CUDA")
        binary = os.environ.get("TRAINLET_BIN", os.path.join(ROOT, "build", "trainlet"))

        def skipped(extra):
            r = subprocess.run([binary, "run", "--preflight=fail"] + extra + ["--", PY, "-c", "pass"],
                               capture_output=True, text=True, timeout=120)
            self.assertEqual(r.returncode, 0, r.stderr)
            m = re.search(r"preflight round 1: (\d+) passed, 0 failed, (\d+) skipped", r.stderr)
            self.assertIsNotNone(m, r.stderr)
            return int(m.group(1)) + int(m.group(2)), int(m.group(2))

        total_off, skipped_off = skipped([])
        total_on, skipped_on = skipped(["--preflight-gpu"])
        self.assertEqual(total_on, total_off + 2)
        self.assertEqual(skipped_on, skipped_off + 2)


if __name__ == "__main__":
    unittest.main()
