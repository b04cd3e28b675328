"""End-to-end: --preflight's policy (docs/preflight.md, "The policy").

Agents on loopback, one of them given a --preflight-path that does not exist
(its path checks fail; the others pass):
  - warn: the job runs with it, and every node logs the coordinator's line
    naming it and the check;
  - fail: every node exits 82, naming the node and the check;
  - exclude (elastic 2:3): the round closes without it, no worker ever starts
    there, it is checked again each --quarantine and turned away while the
    round runs, and the job finishes without it;
  - a healthy job, checked at every round, never excludes anyone.
"""

import os
import re
import unittest

from harness import E2ETestCase, PY, poll_until

# Runs until $E2E_DIR/release exists (at most 60 s), then exits 0.
HOLD = [PY, "-c", "import os, time\n"
        "d = os.environ['E2E_DIR']\n"
        "end = time.time() + 60\n"
        "while time.time() < end and not os.path.exists(os.path.join(d, 'release')):\n"
        "    time.sleep(0.05)\n"]


class PreflightPolicyTest(E2ETestCase):

    def release(self):
        with open(self.path("release"), "w"):
            pass

    def job(self, nnodes, policy, bad_rank, extra=(), bad_extra=()):
        missing = self.path("no-such-checkpoint-dir")
        args = ["--preflight=%s" % policy, "--preflight-path=%s" % self.dir] + list(extra)
        bad = ["--preflight-path=%s" % missing] + list(bad_extra)
        return self.start_job(nnodes, 1, HOLD, extra_args=args, per_node_args={bad_rank: bad})

    def test_warn_runs_the_bad_node_and_every_node_names_it(self):
        agents = self.job(2, "warn", bad_rank=1)
        line = re.compile(r"preflight \(the coordinator\): node n1: path_free_space: .*"
                          r"does not exist")
        poll_until(lambda: all(line.search(a.stderr) for a in agents), 60,
                   what="every node names n1\n" + self.describe_all())
        self.assertRegex(agents[1].stderr, r"preflight round 1: .*failed")
        self.release()
        self.assert_codes(agents, [0, 0], timeout=60)
        self.assert_no_leftovers()

    def test_fail_every_node_exits_82_naming_the_node_and_the_check(self):
        agents = self.job(2, "fail", bad_rank=1)
        self.assert_codes(agents, [82, 82], timeout=60)
        for a in agents:
            self.assertIn("preflight: node n1 failed path_free_space", a.stderr, a.describe())
            self.assertNotIn("started worker", a.stderr, a.describe())
        self.assert_no_leftovers()

    def test_exclude_runs_the_job_without_the_bad_node_which_never_starts_a_worker(self):
        agents = self.job(3, "exclude", bad_rank=2,
                          extra=["--nnodes=2:3", "--quarantine=1s", "--last-call=2s"],
                          bad_extra=["--join-timeout=3s"])
        poll_until(lambda: all("started worker" in a.stderr for a in agents[:2]), 60,
                   what="n0 and n1 running\n" + self.describe_all())
        bad = agents[2]
        # Left out at the close, then turned away again while the round runs.
        poll_until(lambda: bad.stderr.count("left out of the round") >= 2, 30,
                   what="n2 left out twice\n" + bad.describe())
        self.assertIn("tries to join again in 1s", bad.stderr)
        self.release()
        self.assert_codes(agents[:2], [0, 0], timeout=60)
        for a in agents[:2]:
            self.assertRegex(a.stderr, r"round 1 .*2 nodes|nnodes=2|world size 2", a.describe())
        # Once the job is over (node 0's coordinator gone with it), its next
        # join finds nobody: it gives up at its --join-timeout (69), or it
        # heard the verdict first (0).
        self.assertIn(bad.wait(30), (0, 69), bad.describe())
        self.assertNotIn("started worker", bad.stderr, bad.describe())
        self.assert_no_leftovers()

    def test_a_healthy_job_checked_every_round_excludes_nobody(self):
        # --max-restarts: a worker that fails restarts the round, which
        # checks again (--preflight-interval=0s).
        fail_once = [PY, "-c", "import os, sys\n"
                     "n = int(os.environ['TORCHELASTIC_RESTART_COUNT'])\n"
                     "sys.exit(3 if n < 5 and os.environ['RANK'] == '1' else 0)\n"]
        agents = self.start_job(2, 1, fail_once, extra_args=[
            "--nnodes=2:3", "--max-restarts=10", "--preflight=exclude",
            "--preflight-interval=0s", "--preflight-path=%s" % self.dir])
        self.assert_codes(agents, [0, 0], timeout=120)
        for a in agents:
            self.assertEqual(len(re.findall(r"preflight round \d+: ", a.stderr)), 6,
                             a.describe())
            self.assertNotIn("left out", a.stderr)
            for summary in re.findall(r"preflight round \d+: ([^\n]*)", a.stderr):
                self.assertNotIn("FAILED", summary)
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
