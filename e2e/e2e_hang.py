"""End-to-end: hang detection (--hang-timeout, docs/progress.md). A real Python
worker reports progress through TRAINLET_PROGRESS_FILE, then stops and hangs:
the agent declares it hung within --hang-timeout +-10%, logs its evidence
(output tail, /proc threads with wchan, the faulthandler stacks it asked for
with SIGUSR1), then fails the round: exit 80 without restarts, a new round
with them.

Who hung (docs/progress.md): on three pod-like hosts (e2e/netns.py, needs
root) a real torch job on gloo where one rank sleeps in Python while the
others block in its all_reduce; every node takes its evidence, and the
verdict on every node names the sleeper, whose stack is in its evidence."""

import os
import re
import unittest

import harness
from harness import E2ETestCase, PY

EXIT_WORKER_HUNG = 80
HANG_TIMEOUT = 3.0
# The log line that declares it (agent/round.cc), with its timestamp.
DECLARED = re.compile(r"^(\S+Z) E .*worker rank (\d+) \(local rank \d+\) is hung: no progress "
                      r"for ([0-9.]+)s", re.M)


class HangTest(E2ETestCase):

    def start_single_node(self, extra_args=()):
        return self.start_job(1, 1, [harness.PY, harness.worker("progress_hang.py"), "5", "0.2"],
                              extra_args=["--hang-timeout=%gs" % HANG_TIMEOUT,
                                          "--prefix-output", "--grace-period=5s"]
                              + list(extra_args))[0]

    def check_declared_in_time(self, agent, rank=0):
        match = DECLARED.search(agent.stderr)
        self.assertIsNotNone(match, agent.describe())
        self.assertEqual(match.group(2), str(rank))
        with open(self.path("last-progress-%d-0" % rank)) as f:  # the first round's
            last_progress = float(f.read())
        # The agent's own measure, from the progress it saw to its verdict:
        # within +-10%.
        silent = float(match.group(3))
        self.assertGreaterEqual(silent, HANG_TIMEOUT * 0.9, agent.describe())
        self.assertLessEqual(silent, HANG_TIMEOUT * 1.1, agent.describe())
        # From the worker's last progress line to the declaration (both wall
        # clocks of this host; the log has ms): the same, plus the agent's
        # wake-ups on this loaded host (inotify, then its timer), 0.5 s.
        took = harness.log_time(match.group(1)) - last_progress
        self.assertGreaterEqual(took, HANG_TIMEOUT * 0.9, agent.describe())
        self.assertLessEqual(took, HANG_TIMEOUT * 1.1 + 0.5, agent.describe())

    def test_hung_worker_without_restarts_exits_80_with_evidence(self):
        agent = self.start_single_node()
        code = agent.wait(60)
        self.assertEqual(code, EXIT_WORKER_HUNG, agent.describe())
        self.check_declared_in_time(agent)
        err = agent.stderr
        # Its last progress, threads from /proc and its last output.
        self.assertRegex(err, r"hang evidence: last progress: step=4 loss=0\.200 restart=0 pid=\d+")
        self.assertRegex(err, r"hang evidence: +pid \d+ \(python3\) state S, \d+ thread\(s\)")
        self.assertRegex(err, r"hang evidence: +tid \d+ \(python3\) S wchan=")
        self.assertIn("hang evidence:   | about to hang in the data loader", err)
        # The Python stacks: the worker opted in (it created its traceback file).
        self.assertRegex(err, r"hang evidence: python traceback: sent SIGUSR1 to pid \d+")
        self.assertRegex(err, r"hang evidence:   \|   File \".*progress_hang\.py\", line \d+ in "
                              r"hang_forever")
        self.assertIn("exiting with code 80", err)
        self.assert_no_leftovers()

    def test_hung_worker_with_restarts_gets_a_new_round(self):
        agent = self.start_single_node(["--max-restarts=1"])
        code = agent.wait(60)
        self.assertEqual(code, 0, agent.describe())
        self.check_declared_in_time(agent)
        err = agent.stderr
        self.assertIn("hang evidence:", err)
        self.assertRegex(err, r"round 2: node rank 0 of 1")
        self.assertIn("[rank 0] finished after the restart", agent.stdout)
        self.assert_no_leftovers()

    def test_three_hosts_gloo_the_rank_that_sleeps_is_named_not_its_victims(self):
        # Rank 1 of 3 (one worker per host) sleeps in Python at step 6; ranks
        # 0 and 2 block in step 6's all_reduce. Rank 1 reports progress once
        # more 2.5 s into its sleep, so its victims go silent first and are
        # declared hung (the oldest progress is theirs): every node takes its
        # evidence before anything is stopped, and the verdict names rank 1,
        # the one whose stack is not in a collective.
        names = ["hang-0", "hang-1", "hang-2"]
        cluster = self.netns_cluster(names)
        env = self.base_env(GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS="1",
                            PYTHONUNBUFFERED="1")
        agents = []
        for i, h in enumerate(cluster.hosts):
            args = ["--nnodes=3", "--node-rank=%d" % i, "--node-id=%s" % h.name,
                    "--coordinator=%s:29400" % names[0], "--nproc-per-node=1",
                    "--job-id=hang3", "--join-timeout=60s", "--hang-timeout=5s",
                    "--prefix-output", "--grace-period=5s"]
            agents.append(cluster.start(h, h.name, [harness.TRAINLET, "run"] + args + [
                "--", PY, harness.worker("torch_hang.py"), "1", "6", "2.5"], env=env))
        # The sleeper's node exits 80; the others, whose workers waited for
        # it, 75 (docs/exit-codes.md).
        self.assert_codes(agents, [75, EXIT_WORKER_HUNG, 75], timeout=120)
        verdict = re.compile(r"job failed: hang: suspect rank 1 on hang-1 \(not in a collective: "
                             r"torch_hang\.py:\d+ in sleep_in_the_data_loader; main thread S"
                             r".*\); declared by node hang-[02] \(rank [02]: ")
        self.assertRegex(agents[0].stderr + agents[2].stderr,
                         r"worker rank [02] \(local rank 0\) is hung", self.describe_all())
        for a in agents:
            self.assertRegex(a.stderr, verdict, a.describe())
            # Every node's evidence, every worker's stack, before any stop.
            evidence = a.stderr.index("hang evidence: python traceback: sent SIGUSR1")
            self.assertLess(evidence, a.stderr.index("stopping 1 worker(s)"), a.name)
            self.assertIn("evidence from 3 of 3 nodes", a.stderr, a.name)
            self.assertIn("this node's evidence: the 'hang evidence:' lines of its log", a.stderr)
        # The sleeper's stack is in its node's evidence; the others wait in
        # all_reduce.
        self.assertRegex(agents[1].stderr, r"hang evidence:   \|   File \".*torch_hang\.py\", "
                                           r"line \d+ in sleep_in_the_data_loader")
        for a in (agents[0], agents[2]):
            self.assertRegex(a.stderr, r"hang evidence: python stack: in a collective: "
                                       r"all_reduce \(distributed_c10d\.py:\d+\) from "
                                       r"torch_hang\.py:\d+ in main", a.name)
        self.assert_no_leftovers()

    def test_worker_that_never_reports_is_not_watched(self):
        # Progress off (no report at all): a long quiet worker is fine.
        agent = self.start_job(1, 1, ["sh", "-c", "sleep 4.5; echo quiet-done"],
                               extra_args=["--hang-timeout=1s", "--prefix-output"])[0]
        self.assertEqual(agent.wait(60), 0, agent.describe())
        self.assertNotIn("is hung", agent.stderr)
        self.assertIn("quiet-done", agent.stdout)


if __name__ == "__main__":
    unittest.main()
