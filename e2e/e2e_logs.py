"""End-to-end: what a person reads (issue 25). A CPU job's log has no NCCL
advice, and with GPUs every node derives the same; each outcome is one line
on each node, with counts and timings at DEBUG; the termination message a
pod leaves for `kubectl describe` (docs/kubernetes.md); two agents of one job
racing for its coordinator port are told what happened."""

import glob
import json
import os
import re
import unittest

import harness
import topology_fixture
from harness import E2ETestCase, PY, TRAINLET, free_port, poll_until

DUMP_ENV = [PY, harness.worker("dump_env.py")]
# Local rank 1 of node 1 (global rank 3) fails; the others wait to be stopped.
RANK3_FAILS = ["sh", "-c", 'if [ "$RANK" = 3 ]; then exit 3; fi; exec sleep 30']
LOG_LINE = re.compile(r"^\S+Z ([DIWE]) trainlet(\[[^\]]*\])? (.*)$", re.M)


def messages(text, levels="DIWE"):
    """The messages of the trainlet log lines in `text` at `levels`."""
    return [m.group(3) for m in LOG_LINE.finditer(text) if m.group(1) in levels]


class LogTest(E2ETestCase):

    def test_cpu_job_has_no_nccl_lines_or_variables(self):
        agents = self.start_job(2, 2, DUMP_ENV)
        self.assert_codes(agents, [0, 0], timeout=60)
        for a in agents:
            self.assertNotIn("NCCL", a.stderr, a.describe())
        envs = glob.glob(self.path("env", "*.json"))
        self.assertEqual(len(envs), 4, self.describe_all())
        for f in envs:
            with open(f) as fh:
                env = json.load(fh)["env"]
            self.assertEqual([k for k in env if k.startswith("NCCL_")], [], f)
        self.assert_no_leftovers()

    def test_with_gpus_every_node_derives_the_same_nccl_advice(self):
        # Two GPUs per node (a fixture: sysfs, the driver's procfs and device
        # nodes under TRAINLET_PROBE_ROOT, which a static trainlet reads).
        cpus = sorted(os.sched_getaffinity(0))
        root = self.path("root")
        topology_fixture.two_gpu_node(root, cpus=(str(cpus[0]), str(cpus[-1])))
        topology_fixture.driver_procfs(root)
        agents = self.start_job(2, 1, DUMP_ENV, env=self.base_env(TRAINLET_PROBE_ROOT=root))
        self.assert_codes(agents, [0, 0], timeout=60)
        advice = [[m for m in messages(a.stderr) if m.startswith("NCCL advice: NCCL_SOCKET_IFNAME")]
                  for a in agents]
        self.assertEqual(advice[0], ["NCCL advice: NCCL_SOCKET_IFNAME==lo"], self.describe_all())
        self.assertEqual(advice[1], advice[0], self.describe_all())
        ifnames = set()
        for f in glob.glob(self.path("env", "*.json")):
            with open(f) as fh:
                ifnames.add(json.load(fh)["env"].get("NCCL_SOCKET_IFNAME"))
        self.assertEqual(ifnames, {"=lo"}, self.describe_all())
        self.assert_no_leftovers()

    def test_a_failure_is_one_line_on_the_node_that_did_not_fail(self):
        agents = self.start_job(2, 2, RANK3_FAILS)
        self.assert_codes(agents, [harness.EXIT_PEER_FAILED, 3], timeout=60)
        # (Before issue 25 node 0 said it 4 times: the coordinator's report,
        # its verdict, the agent's verdict and its exit.)
        node0 = [m for m in messages(agents[0].stderr) if "exited with code 3" in m]
        self.assertEqual(len(node0), 1, agents[0].describe())
        self.assertRegex(node0[0], r"^exiting with code 75: job failed: .*global rank 3\) on node "
                                   r"n1 exited with code 3")
        # Node 1: its worker's exit when it happened, and the verdict once.
        node1 = [m for m in messages(agents[1].stderr) if "exited with code 3" in m]
        self.assertEqual(len(node1), 2, agents[1].describe())
        self.assertRegex(node1[0], r"^worker rank 3 .* failed: exited with code 3")
        self.assertRegex(node1[1], r"^exiting with code 3: job failed: ")
        self.assert_no_leftovers()

    def test_a_restart_is_one_line_on_each_node(self):
        # Rank 1 (node 1) fails once; the job restarts. Node 0 hosts the
        # coordinator: its agent says why once, as node 1's does (before,
        # the coordinator's "opening round 2: ..." said it a second time).
        once = self.path("failed-once")
        fail_once = ["sh", "-c", 'if [ "$RANK" = 1 ] && [ ! -e "$0" ]; then : > "$0"; exit 3; fi',
                     once]
        agents = self.start_job(2, 1, fail_once, extra_args=["--max-restarts=1"])
        self.assert_codes(agents, [0, 0], timeout=60)
        for a in agents:
            said = [m for m in messages(a.stderr) if "(global rank 1) on node n1 exited with code 3"
                    in m]
            self.assertEqual(len(said), 1, a.describe())
            self.assertRegex(said[0], r"^restart: worker local rank 0 \(global rank 1\) on node n1 "
                                      r"exited with code 3.*; re-joining for round 2")
        self.assert_no_leftovers()

    def test_a_lost_node_is_one_line_on_each_node(self):
        # An elastic job of 3; node 2's agent is killed. Node 0 (the
        # coordinator's) and node 1 each say once that n2 was lost, in the
        # restart line (before, node 0 said it twice more: the coordinator's
        # "round 1: ... lost" and "opening round 2: ... lost").
        first_round_sleeps = ["sh", "-c", '[ "$TORCHELASTIC_RESTART_COUNT" = 0 ] || exit 0; '
                                          ': > "$E2E_DIR/up-$RANK"; exec sleep 30']
        agents = self.start_job(3, 1, first_round_sleeps,
                                extra_args=["--nnodes=2:3", "--max-restarts=1",
                                            "--grace-period=5s"])
        self.wait_for_files(["up-0", "up-1", "up-2"], 30)
        agents[2].kill()
        self.assert_codes(agents[:2], [0, 0], timeout=60)
        for a in agents[:2]:
            said = [m for m in messages(a.stderr) if "node n2 (rank 2) lost" in m]
            self.assertEqual(len(said), 1, a.describe())
            self.assertRegex(said[0], r"^restart: node n2 \(rank 2\) lost: ")
        self.assert_no_leftovers()

    def test_a_hang_declared_is_one_line_on_each_node(self):
        # Node 1's worker reports progress once and goes silent: node 1
        # declares it hung, and node 0 (which hosts the coordinator) takes
        # its own evidence. Each says so once.
        silent = ["sh", "-c", 'if [ "$RANK" = 1 ]; then echo step=1 > "$TRAINLET_PROGRESS_FILE"; '
                              'fi; exec sleep 30']
        agents = self.start_job(2, 1, silent, extra_args=["--hang-timeout=1s", "--grace-period=5s"])
        self.assert_codes(agents, [harness.EXIT_PEER_FAILED, 80], timeout=60)
        node0 = [m for m in messages(agents[0].stderr)
                 if "declared worker rank 1 hung" in m and "evidence:" not in m]
        self.assertEqual(len(node0), 1, agents[0].describe())
        self.assertRegex(node0[0], r"^node n1 declared worker rank 1 hung; taking this node's "
                                   r"evidence")
        node1 = [m for m in messages(agents[1].stderr) if "hung" in m and "evidence:" not in m
                 and "exiting with code" not in m]
        self.assertEqual(len(node1), 1, agents[1].describe())
        self.assertRegex(node1[0], r"^worker rank 1 \(local rank 0\) is hung: ")
        self.assert_no_leftovers()

    def test_a_hang_ended_by_a_failure_is_one_line_on_each_node(self):
        # Node 1's worker goes silent and is declared hung; node 0's worker,
        # asked for its stacks (SIGUSR1), fails instead: the failure decides
        # the round, and the hang has no verdict. Node 0 (the coordinator's)
        # says so once.
        command = ["sh", "-c", 'if [ "$RANK" = 1 ]; then echo step=1 > "$TRAINLET_PROGRESS_FILE"; '
                               'exec sleep 30; fi; trap "exit 3" USR1; '
                               ': > "$TRAINLET_TRACEBACK_FILE"; while :; do sleep 0.05; done']
        agents = self.start_job(2, 1, command, extra_args=["--hang-timeout=1s", "--grace-period=5s"])
        self.assert_codes(agents, [3, harness.EXIT_PEER_FAILED], timeout=60)
        node0 = [m for m in messages(agents[0].stderr) if "without a verdict" in m]
        self.assertEqual(len(node0), 1, agents[0].describe())
        self.assertRegex(node0[0], r"^the hang investigation of round 1 ended without a verdict")
        self.assert_no_leftovers()

    def test_a_success_is_one_line_and_internals_are_debug(self):
        agents = self.start_job(2, 1, ["true"], extra_args=["--log-level=info"])
        self.assert_codes(agents, [0, 0], timeout=60)
        for a in agents:
            said = messages(a.stderr)
            self.assertEqual(len([m for m in said if "job finished" in m or "succeeded" in m]), 1,
                             a.describe())
            self.assertIn("exiting with code 0: job finished: every worker on every node exited 0",
                          said, a.describe())
            for internal in ("connections", "answers sent", "round 1 closed"):
                self.assertFalse([m for m in said if internal in m], a.describe())
        # The counts and timings are still there, at DEBUG.
        debug = self.start_job(2, 1, ["true"], extra_args=["--log-level=debug"])
        self.assert_codes(debug, [0, 0], timeout=60)
        said = messages(debug[0].stderr, "D")
        for internal in ("connections", "answers sent", "round 1 closed",
                         "the job succeeded"):
            self.assertTrue([m for m in said if internal in m], internal + "\n" + debug[0].describe())
        self.assert_no_leftovers()


class TerminationMessageTest(E2ETestCase):

    def read(self, path):
        with open(path, "rb") as f:
            return f.read()

    def test_each_node_writes_the_root_cause(self):
        logs = [self.path("termination-log-%d" % r) for r in range(2)]
        for p in logs:
            open(p, "w").close()  # the kubelet's file: there, empty
        coordinator_port, master_port = free_port(), free_port()
        agents = []
        for r in range(2):
            args = ["--nnodes=2", "--node-rank=%d" % r, "--node-id=n%d" % r,
                    "--coordinator=127.0.0.1:%d" % coordinator_port,
                    "--master-port=%d" % master_port, "--nproc-per-node=2", "--job-id=tm"]
            agents.append(self.start_agent(
                args, RANK3_FAILS, name="node%d" % r,
                env=self.base_env(TRAINLET_TERMINATION_LOG=logs[r])))
        self.assert_codes(agents, [harness.EXIT_PEER_FAILED, 3], timeout=60)
        m0, m1 = self.read(logs[0]).decode(), self.read(logs[1]).decode()
        self.assertRegex(m0, r"^exit code 75 on node n0: job failed: worker local rank 1 "
                             r"\(global rank 3\) on node n1 exited with code 3.*\n$")
        self.assertRegex(m1, r"^exit code 3 on node n1: job failed: worker local rank 1 "
                             r"\(global rank 3\) on node n1 exited with code 3.*\n$")
        for m in (m0, m1):
            self.assertEqual(m.count("\n"), 1, m)
        self.assert_no_leftovers()

    def test_bounded_and_escaped(self):
        # COMMAND not found, with a name of 6000 bytes and a newline in it:
        # the reason names it; the message stays one line of at most 4096.
        log = self.path("msg")
        name = "no-such\ncommand-" + "x" * 6000
        p = self.start_agent([], [name], env=self.base_env(TRAINLET_TERMINATION_LOG=log))
        self.assertEqual(p.wait(30), harness.EXIT_NOT_FOUND, p.describe())
        m = self.read(log)
        self.assertLessEqual(len(m), 4096)
        self.assertGreater(len(m), 3000, m[:200])
        self.assertTrue(m.startswith(b"exit code 127 on node "), m[:200])
        self.assertIn(b"no-such\\ncommand-xxx", m)
        self.assertEqual(m.count(b"\n"), 1)
        self.assertTrue(m.endswith(b"bytes)\n"), m[-100:])  # says how much was cut
        self.assertTrue(all(0x20 <= c < 0x7f for c in m[:-1]), "printable ASCII only")

    def test_a_configuration_error_is_the_message(self):
        log = self.path("msg")
        p = self.start_agent(["--nnodes=abc"], ["true"],
                             env=self.base_env(TRAINLET_TERMINATION_LOG=log))
        self.assertEqual(p.wait(30), harness.EXIT_USAGE, p.describe())
        self.assertEqual(self.read(log).decode(),
                         'exit code 64: --nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX <= '
                         '100000, got "abc"\n')

    def test_not_written_where_not_writable(self):
        missing = self.path("no", "such", "dir", "msg")
        p = self.start_agent([], ["true"], env=self.base_env(TRAINLET_TERMINATION_LOG=missing))
        self.assertEqual(p.wait(30), 0, p.describe())
        self.assertFalse(os.path.exists(self.path("no")))
        self.assertIn("termination message not written: cannot open %s" % missing, p.stderr)
        # The default file is never created where the kubelet made none.
        if not os.path.exists("/dev/termination-log"):
            p = self.start_agent([], ["true"])
            self.assertEqual(p.wait(30), 0, p.describe())
            self.assertFalse(os.path.exists("/dev/termination-log"))
            self.assertNotIn("termination message", p.stderr)

    def test_a_workers_own_message_is_kept(self):
        log = self.path("msg")
        open(log, "w").close()
        worker = ["sh", "-c", 'echo "loss diverged at step 12" > "$TRAINLET_TERMINATION_LOG"; '
                              'exit 1']
        p = self.start_agent([], worker, env=self.base_env(TRAINLET_TERMINATION_LOG=log))
        self.assertEqual(p.wait(30), 1, p.describe())
        self.assertEqual(self.read(log), b"loss diverged at step 12\n")

    def test_short_lived_commands_leave_the_file_alone(self):
        log = self.path("msg")
        for argv in ([TRAINLET, "probe"], [TRAINLET, "run", "--help"],
                     [TRAINLET, "status", "--controller=127.0.0.1:%d" % free_port()]):
            p = self.start("cli", argv, env=self.base_env(TRAINLET_TERMINATION_LOG=log))
            p.wait(30)
            self.assertFalse(os.path.exists(log), argv)


class PortRaceTest(E2ETestCase):

    def start_rank0(self, name, port, job="race"):
        args = ["--nnodes=2", "--node-rank=0", "--node-id=%s" % name,
                "--coordinator=127.0.0.1:%d" % port, "--job-id=%s" % job,
                "--master-port=%d" % free_port()]
        return self.start_agent(args, ["sleep", "60"], name=name)

    def test_second_host_of_one_job_is_told_what_to_pass(self):
        port = free_port()
        first = self.start_rank0("a", port)
        poll_until(lambda: "listening on 127.0.0.1:%d" % port in first.stderr, 20,
                   what="the first agent's coordinator\n" + first.describe())
        second = self.start_rank0("b", port)
        self.assertEqual(second.wait(30), harness.EXIT_CONFIG, second.describe())
        self.assertIn("another agent of job race already hosts the coordinator at "
                      "127.0.0.1:%d" % port, second.stderr)
        self.assertIn("--node-rank", second.stderr)
        self.assertNotIn("pick another port", second.stderr)
        # Another job's agent on the same port: the port is simply taken.
        other = self.start_rank0("c", port, job="other")
        self.assertEqual(other.wait(30), harness.EXIT_OS_ERROR, other.describe())
        self.assertIn("the port is in use", other.stderr)
        first.kill()
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
