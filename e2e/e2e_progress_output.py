"""End-to-end: progress with no code (--progress-from-output, docs/progress.md).
A real Python worker prints Hugging Face Trainer's lines (its tqdm bar on
stderr, its logged dicts on stdout) and writes no progress file; with
--prefix-output and the default --progress-from-output=auto, or with no
--prefix-output and --progress-from-output=hf asked for, the agent reads its
steps from them: the controller's views show them, and --hang-timeout
declares the worker hung once the lines stop. The output itself is relayed
unchanged: prefixed with --prefix-output, else byte for byte as printed."""


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

    def run_hf_trainer(self, job, output_args, env=None):
        """Runs hf_trainer_log.py under an agent with `output_args` until it
        is declared hung; checks the controller and the hang detector saw its
        steps. Returns the agent (exited)."""
        port = harness.free_port()
        ctl = self.start_controller(port, self.path("history-%s.db" % job))
        agent = self.start_agent(
            ["--nnodes=1", "--node-id=pn0", "--job-id=" + job, "--token-file=" + self.token,
             "--controller=127.0.0.1:%d" % port, "--report-interval=200ms",
             "--hang-timeout=%gs" % HANG_TIMEOUT, "--grace-period=5s"] + output_args,
            [PY, harness.worker("hf_trainer_log.py"), str(STEPS), "0.1"], name="agent-" + job,
            env=env)

        # The controller sees the steps while the worker prints them.
        seen = {}

        def stepping():
            status = self.status_json(job) or {}
            nodes = status.get("nodes", [])
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
        if "--progress-from-output=hf" not in output_args:  # auto says what it picked
            self.assertIn("progress from output: local rank 0 prints hf progress lines", err)
        match = DECLARED.search(err)
        self.assertIsNotNone(match, agent.describe())
        self.assertGreaterEqual(float(match.group(1)), HANG_TIMEOUT * 0.9, agent.describe())
        self.assertIn("hang evidence: last progress: step=%d total=%d loss=0.025 lr=5e-05 "
                      "epoch=1.0" % (STEPS, STEPS), err)
        # The bar's redraws are relayed as printed (on stderr, whole).
        self.assertIn("\r 50%|#####     | 20/40 [00:01<00:02,  9.50it/s]", err)
        ctl.signal(signal.SIGTERM)
        ctl.wait(10)
        return agent

    def test_hf_trainer_lines_are_progress_for_the_page_and_the_hang_detector(self):
        agent = self.run_hf_trainer("jobP", ["--prefix-output"])
        # The output is relayed as printed, prefixed.
        self.assertIn("[rank 0] {'loss': 0.2, 'grad_norm': 1.5, 'learning_rate': 5e-05, "
                      "'epoch': 0.12}\n", agent.stdout)
        self.assertIn("[rank 0] about to hang after step %d\n" % STEPS, agent.stdout)
        self.assert_no_leftovers()

    def test_without_prefix_output_asking_for_hf_relays_the_output_byte_for_byte(self):
        # No --prefix-output: asking for a format has the agent relay the
        # output, unprefixed, to read it (it was a usage error before).
        copy = self.path("printed")
        agent = self.run_hf_trainer("jobU", ["--progress-from-output=hf"],
                                    env=self.base_env(COPY_STDOUT=copy))
        with open(copy) as f:
            printed = f.read()
        self.assertIn("about to hang after step %d\n" % STEPS, printed)
        # The agent's stdout is the worker's, byte for byte: no prefix, no
        # line added, dropped or cut.
        self.assertEqual(agent.stdout, printed)
        # The hang report has its last lines: the agent read them.
        self.assertIn("last output (", agent.stderr)
        self.assert_no_leftovers()

    def test_a_bad_regex_is_a_usage_error_naming_the_flag(self):
        agent = self.start_agent(["--prefix-output", "--progress-from-output=it (?P<step>\\d+"],
                                 ["true"], name="agent")
        self.assertEqual(agent.wait(30), EXIT_USAGE, agent.describe())
        self.assertIn("--progress-from-output", agent.stderr)
        self.assertIn("missing )", agent.stderr)


if __name__ == "__main__":
    unittest.main()
