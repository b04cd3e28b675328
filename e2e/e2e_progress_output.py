"""End-to-end: progress with no code (--progress-from-output, docs/progress.md).
A real Python worker prints Hugging Face Trainer's lines (its tqdm bar on
stderr, its logged dicts on stdout) and writes no progress file; with
--prefix-output and the default --progress-from-output=auto the agent reads
its steps from them: the controller's views show them, and --hang-timeout
declares the worker hung once the lines stop. The output itself is relayed
unchanged."""

import re
import signal
import unittest

import e2e_controller
import harness
from harness import E2ETestCase, PY

EXIT_USAGE = 64
EXIT_WORKER_HUNG = 80
HANG_TIMEOUT = 3.0
STEPS = 40
DECLARED = re.compile(r"worker rank 0 \(local rank 0\) is hung: no progress for ([0-9.]+)s")


class ProgressFromOutputTest(E2ETestCase):

    def setUp(self):
        super().setUp()
        self.token = self.path("token")
        with open(self.token, "w") as f:
            f.write("e2e-secret\n")

    # The controller and `trainlet status --json`, as e2e_controller runs them.
    start_controller = e2e_controller.ControllerTest.start_controller
    status_json = e2e_controller.ControllerTest.status_json

    def test_hf_trainer_lines_are_progress_for_the_page_and_the_hang_detector(self):
        port = harness.free_port()
        ctl = self.start_controller(port, self.path("history.db"))
        agent = self.start_agent(
            ["--nnodes=1", "--node-id=pn0", "--job-id=jobP", "--token-file=" + self.token,
             "--controller=127.0.0.1:%d" % port, "--report-interval=200ms", "--prefix-output",
             "--hang-timeout=%gs" % HANG_TIMEOUT, "--grace-period=5s"],
            [PY, harness.worker("hf_trainer_log.py"), str(STEPS), "0.1"], name="agent")

        # The controller sees the steps while the worker prints them.
        seen = {}

        def stepping():
            job = self.status_json("jobP") or {}
            nodes = job.get("nodes", [])
            if nodes and nodes[0]["progress"]["known"] and nodes[0]["progress"]["step"] > 0:
                seen.update(nodes[0]["progress"])
                return True
            return not agent.running()
        harness.poll_until(stepping, 30, interval=0.2,
                           what="the controller to show the worker's steps\n" + agent.describe())
        self.assertTrue(seen, agent.describe())
        self.assertIn(["total", str(STEPS)], seen["fields"], seen)

        # The prints stop: declared hung after --hang-timeout.
        self.assertEqual(agent.wait(60), EXIT_WORKER_HUNG, agent.describe())
        err = agent.stderr
        self.assertIn("progress from output: local rank 0 prints hf progress lines", err)
        match = DECLARED.search(err)
        self.assertIsNotNone(match, agent.describe())
        self.assertGreaterEqual(float(match.group(1)), HANG_TIMEOUT * 0.9, agent.describe())
        self.assertIn("hang evidence: last progress: step=%d total=%d loss=0.025 lr=5e-05 "
                      "epoch=1.0" % (STEPS, STEPS), err)
        # The output is relayed as printed (prefixed), the logged dicts and
        # the bar's redraws.
        self.assertIn("[rank 0] {'loss': 0.2, 'grad_norm': 1.5, 'learning_rate': 5e-05, "
                      "'epoch': 0.12}\n", agent.stdout)
        self.assertIn("\r 50%|#####     | 20/40 [00:01<00:02,  9.50it/s]", err)
        ctl.signal(signal.SIGTERM)
        ctl.wait(10)
        self.assert_no_leftovers()

    def test_a_bad_regex_is_a_usage_error_naming_the_flag(self):
        agent = self.start_agent(["--prefix-output", "--progress-from-output=it (?P<step>\\d+"],
                                 ["true"], name="agent")
        self.assertEqual(agent.wait(30), EXIT_USAGE, agent.describe())
        self.assertIn("--progress-from-output", agent.stderr)
        self.assertIn("missing )", agent.stderr)


if __name__ == "__main__":
    unittest.main()
