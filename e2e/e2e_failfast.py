"""End-to-end: fail fast across nodes. One worker failing stops the whole job
quickly; its node exits with the worker's code, every other node with 75
(EX_TEMPFAIL: a worker on another node failed)."""

import os
import signal
import time
import unittest

import harness
from harness import E2ETestCase

NNODES, NPROC = 4, 2
FAILING_NODE = 2


class FailFastTest(E2ETestCase):

    def test_one_worker_fails_every_agent_stops(self):
        # Node 2, local rank 1 exits 3 once every worker of the job has started
        # (each worker drops a file; the failing one waits for all 8); every
        # other worker would sleep for a minute.
        script = (
            'touch "$E2E_DIR/started-$RANK"; '
            'if [ "$GROUP_RANK" = %d ] && [ "$LOCAL_RANK" = 1 ]; then '
            '  i=0; while [ "$(ls "$E2E_DIR" | grep -c "^started-")" -lt %d ] && [ $i -lt 300 ];'
            '  do sleep 0.05; i=$((i+1)); done; '
            '  sleep 0.5; touch "$E2E_DIR/failing"; exit 3; '
            'fi; exec sleep 60' % (FAILING_NODE, NNODES * NPROC))
        agents = self.start_job(NNODES, NPROC, ["sh", "-c", script],
                                extra_args=["--grace-period=5s"])
        self.wait_for_files(["failing"], 60, what="the failing worker")
        failed_at = time.monotonic()
        codes = self.wait_all(agents, 30)
        took = max(a.ended for a in agents) - failed_at
        expected = [harness.EXIT_PEER_FAILED] * NNODES
        expected[FAILING_NODE] = 3
        self.assertEqual(codes, expected, self.describe_all())
        self.assertLess(took, 10, "agents took %.1fs to stop after the failure\n%s"
                        % (took, self.describe_all()))
        self.assert_no_leftovers()

    def start_sleeping_job(self, extra_args=()):
        """4 x 2 workers that each drop started-<RANK> and sleep; returns once
        every worker runs."""
        agents = self.start_job(NNODES, NPROC,
                                ["sh", "-c", 'touch "$E2E_DIR/started-$RANK"; exec sleep 60'],
                                extra_args=["--grace-period=5s"] + list(extra_args))
        try:
            self.wait_for_files(["started-%d" % r for r in range(NNODES * NPROC)], 60)
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, self.describe_all())) from None
        return agents

    def test_worker_killed_by_signal_stops_the_job(self):
        agents = self.start_sleeping_job()
        # SIGKILL one worker (node 2, local rank 0) behind the agent's back.
        victim = [p for p in harness.children_of(agents[FAILING_NODE].pid)
                  if harness.is_alive(p)]
        self.assertEqual(len(victim), NPROC, victim)
        killed_at = time.monotonic()
        os.kill(min(victim), signal.SIGKILL)
        codes = self.wait_all(agents, 30)
        expected = [harness.EXIT_PEER_FAILED] * NNODES
        expected[FAILING_NODE] = 128 + signal.SIGKILL
        self.assertEqual(codes, expected, self.describe_all())
        self.assertLess(max(a.ended for a in agents) - killed_at, 10, self.describe_all())
        self.assert_no_leftovers()

    def test_sigterm_to_one_agent_stops_the_job(self):
        self.check_sigterm_to_agent(FAILING_NODE)

    def test_sigterm_to_coordinator_agent_stops_the_job(self):
        self.check_sigterm_to_agent(0)

    def check_sigterm_to_agent(self, node):
        agents = self.start_sleeping_job()
        sent = time.monotonic()
        agents[node].signal(signal.SIGTERM)
        codes = self.wait_all(agents, 30)
        # The signalled node reports the signal (its workers died of the
        # forwarded SIGTERM: 143 either way); the others were stopped: 75.
        expected = [harness.EXIT_PEER_FAILED] * NNODES
        expected[node] = 128 + signal.SIGTERM
        self.assertEqual(codes, expected, self.describe_all())
        self.assertLess(max(a.ended for a in agents) - sent, 10, self.describe_all())
        self.assert_no_leftovers()

    def test_sigkilled_agent_detected_by_heartbeat(self):
        # Node 2's agent dies without a word; its workers die with it
        # (PDEATHSIG). The coordinator declares it dead after the heartbeat
        # timeout and stops the job.
        agents = self.start_sleeping_job(extra_args=["--heartbeat-timeout=2s"])
        agents[FAILING_NODE].signal(signal.SIGKILL)
        killed_at = time.monotonic()
        codes = self.wait_all(agents, 40)
        expected = [harness.EXIT_PEER_FAILED] * NNODES
        expected[FAILING_NODE] = -signal.SIGKILL
        self.assertEqual(codes, expected, self.describe_all())
        self.assertLess(max(a.ended for a in agents) - killed_at, 2 + 8, self.describe_all())
        self.assert_no_leftovers()

    def test_sigkilled_coordinator_agent(self):
        # Node 0 hosts the coordinator; when it dies the others lose it, stop
        # their workers and exit 69 (no restarts allowed).
        agents = self.start_sleeping_job()
        agents[0].signal(signal.SIGKILL)
        killed_at = time.monotonic()
        codes = self.wait_all(agents, 40)
        self.assertEqual(codes, [-signal.SIGKILL] + [harness.EXIT_UNAVAILABLE] * (NNODES - 1),
                         self.describe_all())
        self.assertLess(max(a.ended for a in agents) - killed_at, 10, self.describe_all())
        self.assert_no_leftovers()

    def test_acked_agents_lose_a_frozen_coordinator_at_the_timeout(self):
        # The coordinator acks the agents' liveness datagrams (docs/protocol.md,
        # "Acks"): they stop their periodic Reports. When its host freezes
        # (SIGSTOP: its connections stay open, so only silence tells), the
        # acks stop, the agents go back to Reports, which time out, and they
        # lose it about 1.05 heartbeat timeouts after the last ack.
        agents = self.start_sleeping_job(extra_args=["--heartbeat-timeout=2s",
                                                     "--log-level=debug"])
        for a in agents[1:]:
            harness.poll_until(lambda a=a: "acknowledges this node's liveness datagrams"
                               in a.stderr, 10, what="acks at " + a.name)
        agents[0].signal(signal.SIGSTOP)
        stopped_at = time.monotonic()
        try:
            codes = self.wait_all(agents[1:], 30)
        finally:
            agents[0].signal(signal.SIGKILL)
        took = max(a.ended for a in agents[1:]) - stopped_at
        print("\n[measure] coordinator frozen -> every agent lost it: %.2fs (timeout 2s)" % took)
        self.assertEqual(codes, [harness.EXIT_UNAVAILABLE] * (NNODES - 1), self.describe_all())
        for a in agents[1:]:
            self.assertIn("no liveness ack from the coordinator", a.stderr, a.describe())
        # 2.1 s after the last ack (at most 0.5 s + a loop turn before the
        # stop), then stopping the workers and a Leave nobody answers (4.1 s
        # in all here); not the 5 min Report interval of an acked agent.
        self.assertLess(took, 8, self.describe_all())
        agents[0].wait(10)
        self.assert_no_leftovers()

    def test_all_workers_succeed(self):
        agents = self.start_job(NNODES, NPROC, ["sh", "-c", "sleep 0.2"])
        self.assert_codes(agents, [0] * NNODES, timeout=60)
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
