"""End-to-end: the agent's round as a user meets it (issues 6 and 7).

- A job never dies because node 0's workers finished first (issue 7, D1): the
  old agent gave up 10 s after its own workers succeeded, took the coordinator
  down, and the other node exited 69.
- A second Ctrl-C kills the workers at once instead of waiting out the grace
  period.
- After SIGTERM the agent does not flood its log with failed heartbeats while
  its workers take a few seconds to exit.
"""

import signal
import time
import unittest

import harness
from harness import E2ETestCase


class RoundTest(E2ETestCase):

    def test_node0_finishing_first_keeps_serving_until_the_job_is_done(self):
        # Node 0's worker exits at once; node 1's runs 12 s, longer than the
        # 10 s the old agent waited for a verdict before giving up.
        agents = self.start_job(2, 1, ["sh", "-c",
                                       'if [ "$RANK" = 1 ]; then sleep 12; fi; exit 0'])
        codes = self.wait_all(agents, 60)
        self.assertEqual(codes, [0, 0], self.describe_all())
        self.assertNotIn("no verdict", agents[0].stderr)
        self.assert_no_leftovers()

    def test_second_sigint_kills_the_workers_at_once(self):
        # A worker that ignores SIGINT and SIGTERM would keep the agent for
        # the whole 30 s grace period; the second Ctrl-C must end it now.
        agent = self.start_agent(
            ["--nnodes=1", "--node-rank=0", "--health-port=0", "--grace-period=30s",
             "--coordinator=127.0.0.1:%d" % harness.free_port(), "--nproc-per-node=1",
             "--master-port=%d" % harness.free_port()],
            [harness.PY, harness.worker("sig_worker.py"), "INT:ignore", "TERM:ignore"])
        self.wait_for_files(["ready-0"], 30, what="the worker")
        agent.signal(signal.SIGINT)
        time.sleep(0.5)
        self.assertTrue(agent.running(), "the first SIGINT must not end the agent at once")
        sent = time.monotonic()
        agent.signal(signal.SIGINT)
        code = agent.wait(10)
        self.assertEqual(code, 128 + signal.SIGKILL, agent.describe())
        self.assertLess(time.monotonic() - sent, 5, agent.describe())
        self.assertIn("killing the workers now", agent.stderr)
        self.assert_no_leftovers()

    def test_no_heartbeat_warnings_while_workers_stop_after_sigterm(self):
        # Node 1's worker takes 3 s to exit after SIGTERM. The old agent kept
        # heartbeating after it had left the job and logged "report to the
        # coordinator failed: ... is fenced" every 500 ms meanwhile.
        script = ('trap "sleep 3; exit 0" TERM; touch "$E2E_DIR/started-$RANK"; '
                  'while :; do sleep 0.1; done')
        agents = self.start_job(2, 1, ["sh", "-c", script],
                                extra_args=["--grace-period=20s", "--heartbeat-timeout=2s"])
        self.wait_for_files(["started-0", "started-1"], 30)
        time.sleep(1)
        agents[1].signal(signal.SIGTERM)
        codes = self.wait_all(agents, 30)
        self.assertEqual(codes[1], 128 + signal.SIGTERM, self.describe_all())
        log = agents[1].stderr
        self.assertEqual(log.count("report to the coordinator failed"), 0, log)
        self.assertEqual(log.count("stopping "), 1, log)
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
