"""End-to-end: the agent's readiness probe (`trainlet health PORT`, grpc.health.v1):
NOT_SERVING (exit 1) until the round closes, SERVING (exit 0) while the workers
run."""

import subprocess
import unittest

import harness
from harness import E2ETestCase, PY

SIG_WORKER = [PY, harness.worker("sig_worker.py")]


class HealthTest(E2ETestCase):

    def probe(self, port):
        """(exit code, stdout) of `trainlet health PORT`."""
        p = subprocess.run([harness.TRAINLET, "health", str(port), "--timeout-ms=2000"],
                           stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=20, env=self.base_env())
        return p.returncode, p.stdout.decode().strip()

    def wait_probe(self, port, want, agents, timeout=20):
        last = []

        def check():
            last[:] = [self.probe(port)]
            return last[0] == want or not all(a.running() for a in agents)

        harness.poll_until(check, timeout, interval=0.1,
                           what="health %d to answer %s (last: %s)" % (port, want, last))
        self.assertEqual(last[0], want, self.describe_all())

    def test_not_serving_until_round_closes_then_serving(self):
        coord, mp, h0, h1 = harness.free_ports(4)
        common = ["--nnodes=2", "--coordinator=127.0.0.1:%d" % coord, "--master-port=%d" % mp,
                  "--nproc-per-node=2", "--join-timeout=60s"]
        # Nothing listens yet: unreachable is also exit 1, but says nothing.
        rc, out = self.probe(h1)
        self.assertEqual((rc, out), (1, ""))

        n1 = self.start_agent(common + ["--node-rank=1", "--node-id=h1",
                                        "--health-port=%d" % h1], SIG_WORKER, name="node1")
        # Node 1 alone: its round cannot close.
        self.wait_probe(h1, (1, "NOT_SERVING"), [n1])

        n0 = self.start_agent(common + ["--node-rank=0", "--node-id=h0",
                                        "--health-port=%d" % h0], SIG_WORKER, name="node0")
        # Every worker up (ready-<rank> files): both agents serve.
        self.wait_for_files(["ready-%d" % r for r in range(4)], 30)
        self.wait_probe(h1, (0, "SERVING"), [n0, n1])
        self.wait_probe(h0, (0, "SERVING"), [n0, n1])

        open(self.path("go"), "w").close()
        self.assertEqual(self.wait_all([n0, n1], 30), [0, 0], self.describe_all())
        # Gone with the agent.
        self.assertEqual(self.probe(h1), (1, ""))
        self.assert_no_leftovers()

    def test_probe_usage(self):
        p = subprocess.run([harness.TRAINLET, "health", "--bogus"], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=20)
        self.assertEqual(p.returncode, harness.EXIT_USAGE)
        self.assertIn("--bogus", p.stderr.decode())


if __name__ == "__main__":
    unittest.main()
