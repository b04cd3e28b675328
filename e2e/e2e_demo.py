"""End-to-end: the README's demo (`scripts/demo.sh`: 3 agents x 2 workers,
DDP on gloo with Debian's python3-torch) shows the training when its output
is piped (issue 25): every rank's "up" line, rank 0's loss lines and its
result, through `| head -n 50`. TRAINLET_BIN skips the demo's install and
build; free ports keep it apart from other tests."""

import os
import re
import unittest

import harness
from harness import E2ETestCase

REPO = os.path.dirname(harness.HERE)


class DemoTest(E2ETestCase):

    def test_piped_through_head_shows_every_rank_the_loss_and_the_result(self):
        port, master_port = harness.free_ports(2)
        # TMPDIR: the agents' logs go with the test's directory.
        env = self.base_env(TRAINLET_BIN=harness.TRAINLET, DEMO_PORT=port,
                            DEMO_MASTER_PORT=master_port, TMPDIR=self.dir)
        p = self.start("demo", ["/bin/bash", "-o", "pipefail", "-c",
                                'cd "$1" && scripts/demo.sh | head -n 50', "demo", REPO], env=env)
        self.assertEqual(p.wait(150), 0, p.describe())
        out = p.stdout
        lines = out.splitlines()
        self.assertRegex(lines[0], r"^demo: 3 agents x 2 workers, coordinator on "
                                   r"127\.0\.0\.1:%d; agent logs: \S+/agent-N\.log$" % port)
        for rank in range(6):
            self.assertRegex(out, r"(?m)^\[rank %d\] rank %d/6 \(local rank %d, node %d\) up, "
                                  r"master 127\.0\.0\.1:%d$"
                             % (rank, rank, rank % 2, rank // 2, master_port))
        steps = [int(s) for s in re.findall(r"(?m)^\[rank 0\] step +(\d+) loss \d+\.\d+$", out)]
        self.assertEqual(steps, [0, 10, 20, 29], out)
        done = re.search(r"(?m)^\[rank 0\] done: w=(\S+) b=(\S+) \(target 3, 2\), "
                         r"final loss \d+\.\d+$", out)
        self.assertIsNotNone(done, out)
        self.assertAlmostEqual(float(done.group(1)), 3.0, delta=0.1)
        self.assertAlmostEqual(float(done.group(2)), 2.0, delta=0.1)
        self.assertEqual(lines[-1], "demo: OK, every agent exited 0")
        # Only the training and the demo's own lines: the agents' logs are in files.
        self.assertEqual(len(lines), 1 + 6 + 4 + 1 + 1, out)
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
