"""End-to-end: `trainlet coordinator`, the standalone coordinator. Agents
without a node-rank-0 hint join it; it exits 0 when the job succeeded, 75 when
it failed, 128+N on a signal, 64 on a bad flag."""

import signal
import unittest

import harness
from harness import E2ETestCase, TRAINLET


class StandaloneCoordinatorTest(E2ETestCase):

    def start_coordinator(self, nnodes, *extra):
        self.port = harness.free_port()
        self.job = "standalone-" + self.tag[:8]
        return self.start("coordinator", [TRAINLET, "coordinator", "--nnodes=%d" % nnodes,
                                          "--port=%d" % self.port, "--bind-addr=127.0.0.1",
                                          "--job-id=%s" % self.job] + list(extra))

    def start_agents(self, nnodes, command):
        master_port = harness.free_port()
        return [self.start_agent(harness.standalone_agent_args(i, nnodes, self.port, self.job,
                                                               master_port),
                                 command, name="agent%d" % i)
                for i in range(nnodes)]

    def test_job_succeeds_coordinator_exits_0(self):
        coord = self.start_coordinator(3)
        agents = self.start_agents(3, ["sh", "-c", 'echo "rank=$RANK of $WORLD_SIZE"'])
        self.assert_codes(agents, [0, 0, 0], 30)
        self.assertEqual(coord.wait(15), 0, coord.describe())
        ranks = sorted(a.stdout.strip() for a in agents)
        self.assertEqual(ranks, ["rank=0 of 3", "rank=1 of 3", "rank=2 of 3"])
        self.assert_no_leftovers()

    def test_job_fails_coordinator_exits_75(self):
        coord = self.start_coordinator(2)
        agents = self.start_agents(
            2, ["sh", "-c", 'if [ "$RANK" = 1 ]; then exit 5; fi; exec sleep 30'])
        codes = sorted(self.wait_all(agents, 30))
        self.assertEqual(codes, [5, harness.EXIT_PEER_FAILED], self.describe_all())
        self.assertEqual(coord.wait(15), harness.EXIT_PEER_FAILED, coord.describe())
        self.assert_no_leftovers()

    def test_rank0_hint_with_host_coordinator_no_joins_the_standalone_one(self):
        # In Kubernetes the pod with JOB_COMPLETION_INDEX=0 has rank hint 0 and
        # would host a coordinator; --host-coordinator=no makes it join ours.
        coord = self.start_coordinator(2)
        master_port = harness.free_port()
        agents = [self.start_agent(["--nnodes=2", "--node-rank=%d" % i, "--node-id=h%d" % i,
                                    "--host-coordinator=no",
                                    "--coordinator=127.0.0.1:%d" % self.port,
                                    "--master-port=%d" % master_port, "--health-port=0",
                                    "--nproc-per-node=1", "--job-id=%s" % self.job,
                                    "--join-timeout=30s"],
                                   ["sh", "-c", 'echo "rank=$RANK"'], name="agent%d" % i)
                  for i in range(2)]
        self.assert_codes(agents, [0, 0], 30)
        self.assertEqual(coord.wait(15), 0, coord.describe())
        self.assertEqual([a.stdout.strip() for a in agents], ["rank=0", "rank=1"])
        self.assertNotIn("listening", agents[0].stderr, agents[0].describe())

    def test_sigterm_while_gathering_exits_143(self):
        coord = self.start_coordinator(2)
        harness.poll_until(lambda: "listening" in coord.stderr, 10,
                           what="the coordinator to listen")
        coord.signal(signal.SIGTERM)
        self.assertEqual(coord.wait(10), 128 + signal.SIGTERM, coord.describe())

    def test_bad_flag_exits_64_naming_it(self):
        p = self.start("coordinator", [TRAINLET, "coordinator", "--port=abc"])
        self.assertEqual(p.wait(10), harness.EXIT_USAGE, p.describe())
        self.assertIn("--port", p.stderr)


if __name__ == "__main__":
    unittest.main()
