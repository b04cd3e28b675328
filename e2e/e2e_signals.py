"""End-to-end: one node, two workers; signal forwarding, grace period, exit code
passthrough, COMMAND errors, cleanup when the agent dies, zombie reaping
(docs/pid1.md)."""

import os
import signal
import stat
import time
import unittest

import harness
from harness import E2ETestCase, PY

SIG_WORKER = [PY, harness.worker("sig_worker.py")]


class SingleNodeTestCase(E2ETestCase):

    def start_single(self, command, extra_args=(), env=None, prefix=(), nproc=2):
        port, mp = harness.free_ports(2)
        args = ["--nnodes=1", "--node-rank=0", "--node-id=solo",
                "--coordinator=127.0.0.1:%d" % port, "--master-port=%d" % mp,
                "--health-port=0", "--nproc-per-node=%d" % nproc, "--join-timeout=30s"]
        return self.start_agent(args + list(extra_args), command, name="agent", env=env,
                                prefix=prefix)

    def wait_ready(self, agent, nworkers=2, timeout=30):
        """Pids of the sig_worker.py workers, once their handlers are installed."""
        names = ["ready-%d" % r for r in range(nworkers)]
        try:
            self.wait_for_files(names, timeout)
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, agent.describe())) from None
        return [harness.read_pid_file(self.path(n)) for n in names]

    def markers(self, name, nworkers=2):
        return [os.path.exists(self.path("%s-%d" % (name, r))) for r in range(nworkers)]


class SignalForwardingTest(SingleNodeTestCase):

    def test_sigterm_forwarded_agent_exits_with_worker_code(self):
        agent = self.start_single(SIG_WORKER + ["TERM:exit=7"], ["--grace-period=20s"])
        self.wait_ready(agent)
        agent.signal(signal.SIGTERM)
        rc = agent.wait(10)
        self.assertEqual(self.markers("TERM"), [True, True], agent.describe())
        self.assertEqual(rc, 7, agent.describe())
        self.assert_no_leftovers()

    def test_sigterm_workers_exit_zero_agent_reports_signal(self):
        # Workers that exit 0 on SIGTERM: no worker failed, so the agent exits
        # 128+SIGTERM (agent.cc: local failure, else 128 + terminating signal).
        agent = self.start_single(SIG_WORKER + ["TERM:exit=0"], ["--grace-period=20s"])
        self.wait_ready(agent)
        agent.signal(signal.SIGTERM)
        rc = agent.wait(10)
        self.assertEqual(self.markers("TERM"), [True, True], agent.describe())
        self.assertEqual(rc, 128 + signal.SIGTERM, agent.describe())
        self.assert_no_leftovers()

    def test_term_ignoring_workers_killed_after_grace_period(self):
        grace = 1.0
        agent = self.start_single(SIG_WORKER + ["TERM:ignore"], ["--grace-period=1s"])
        pids = self.wait_ready(agent)
        sent = time.monotonic()
        agent.signal(signal.SIGTERM)
        rc = agent.wait(grace + 10)
        took = time.monotonic() - sent
        self.assertEqual(rc, 128 + signal.SIGKILL, agent.describe())
        self.assertGreaterEqual(took, grace * 0.9, "workers were killed before the grace period")
        self.assertLess(took, grace + 3, agent.describe())
        for pid in pids:
            self.assertFalse(harness.is_alive(pid), "worker %d survived" % pid)
        self.assert_no_leftovers()

    def test_sigusr1_forwarded_without_stopping(self):
        agent = self.start_single(SIG_WORKER + ["USR1:note", "USR2:note"])
        pids = self.wait_ready(agent)
        agent.signal(signal.SIGUSR1)
        self.wait_for_files(["USR1-0", "USR1-1"], 10)
        agent.signal(signal.SIGUSR2)
        self.wait_for_files(["USR2-0", "USR2-1"], 10)
        # Still running, agent and workers.
        time.sleep(0.3)
        self.assertTrue(agent.running(), agent.describe())
        for pid in pids:
            self.assertTrue(harness.is_alive(pid), "worker %d stopped" % pid)
        open(self.path("go"), "w").close()
        self.assertEqual(agent.wait(20), 0, agent.describe())
        self.assert_no_leftovers()

    def check_terminating_signal(self, sig, name, code):
        agent = self.start_single(SIG_WORKER + ["%s:exit=%d" % (name, code)],
                                  ["--grace-period=20s"])
        self.wait_ready(agent)
        agent.signal(sig)
        rc = agent.wait(10)
        self.assertEqual(self.markers(name), [True, True], agent.describe())
        self.assertEqual(rc, code, agent.describe())
        self.assert_no_leftovers()

    def test_sigint_forwarded(self):
        self.check_terminating_signal(signal.SIGINT, "INT", 21)

    def test_sighup_forwarded(self):
        self.check_terminating_signal(signal.SIGHUP, "HUP", 22)

    def test_sigquit_forwarded(self):
        self.check_terminating_signal(signal.SIGQUIT, "QUIT", 23)


    def test_sigterm_during_rendezvous(self):
        # Node 1 of 2 waits for a coordinator that never comes; SIGTERM makes it
        # leave at once with 128+SIGTERM, without starting workers.
        port = harness.free_port()
        agent = self.start_agent(
            ["--nnodes=2", "--node-rank=1", "--node-id=waiter",
             "--coordinator=127.0.0.1:%d" % port, "--health-port=0", "--nproc-per-node=1",
             "--join-timeout=60s"], SIG_WORKER, name="waiter")
        harness.poll_until(lambda: "joining job" in agent.stderr or not agent.running(), 10,
                           what="the agent to start joining")
        self.assertTrue(agent.running(), agent.describe())
        sent = time.monotonic()
        agent.signal(signal.SIGTERM)
        self.assertEqual(agent.wait(5), 128 + signal.SIGTERM, agent.describe())
        self.assertLess(time.monotonic() - sent, 3, agent.describe())
        self.assertFalse(os.path.exists(self.path("ready-0")), "a worker was started")


    def test_sigterm_during_rendezvous_on_coordinator_node(self):
        # Node 0 of 2 hosts the coordinator and waits for node 1, which never
        # comes. There is no verdict to hand anyone: SIGTERM should end it
        # promptly, as on any other node.
        port, mp = harness.free_ports(2)
        agent = self.start_agent(
            ["--nnodes=2", "--node-rank=0", "--node-id=host",
             "--coordinator=127.0.0.1:%d" % port, "--master-port=%d" % mp, "--health-port=0",
             "--nproc-per-node=1", "--join-timeout=60s"], SIG_WORKER, name="host")
        harness.poll_until(lambda: "joining job" in agent.stderr or not agent.running(), 10,
                           what="the agent to start joining")
        self.assertTrue(agent.running(), agent.describe())
        sent = time.monotonic()
        agent.signal(signal.SIGTERM)
        self.assertEqual(agent.wait(15), 128 + signal.SIGTERM, agent.describe())
        self.assertLess(time.monotonic() - sent, 5,
                        "node 0 took %.1fs to exit after SIGTERM during rendezvous\n%s"
                        % (time.monotonic() - sent, agent.describe()))


class ExitCodeTest(SingleNodeTestCase):

    def test_worker_exit_code_passthrough(self):
        agent = self.start_single(["sh", "-c", "exit 3"])
        self.assertEqual(agent.wait(20), 3, agent.describe())

    def test_one_failing_worker_stops_the_other(self):
        # Local rank 1 exits 3; local rank 0 would sleep for a minute.
        agent = self.start_single(
            ["sh", "-c", 'if [ "$LOCAL_RANK" = 1 ]; then exit 3; fi; exec sleep 60'])
        self.assertEqual(agent.wait(15), 3, agent.describe())
        self.assert_no_leftovers()

    def test_worker_killed_by_signal(self):
        agent = self.start_single(["sh", "-c", "kill -9 $$"])
        self.assertEqual(agent.wait(20), 128 + signal.SIGKILL, agent.describe())

    def test_command_not_found(self):
        agent = self.start_single(["no-such-command-e2e"])
        self.assertEqual(agent.wait(20), harness.EXIT_NOT_FOUND, agent.describe())
        self.assertIn("no-such-command-e2e", agent.stderr, agent.describe())

    def test_command_path_not_found(self):
        missing = self.path("missing", "train.sh")
        agent = self.start_single([missing])
        self.assertEqual(agent.wait(20), harness.EXIT_NOT_FOUND, agent.describe())
        self.assertIn(missing, agent.stderr, agent.describe())

    def test_command_not_executable(self):
        script = self.path("train.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\nexit 0\n")
        os.chmod(script, stat.S_IRUSR | stat.S_IWUSR)  # no +x
        agent = self.start_single([script])
        self.assertEqual(agent.wait(20), harness.EXIT_NOT_EXECUTABLE, agent.describe())
        self.assertIn(script, agent.stderr, agent.describe())


class AgentDeathAndReapingTest(SingleNodeTestCase):

    def start_with_grandchildren(self, prefix=()):
        agent = self.start_single([PY, harness.worker("grandchild.py")], prefix=prefix)
        try:
            self.wait_for_files(["worker-0", "worker-1", "grandchild-0", "grandchild-1"], 30)
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, agent.describe())) from None
        workers = [harness.read_pid_file(self.path("worker-%d" % r)) for r in range(2)]
        grandchildren = [harness.read_pid_file(self.path("grandchild-%d" % r))
                         for r in range(2)]
        for w, g in zip(workers, grandchildren):
            self.assertTrue(harness.is_alive(w))
            self.assertTrue(harness.is_alive(g))
            # The grandchild is in its worker's process group.
            self.assertEqual(harness.proc_stat(g)[2], w)
        return agent, workers, grandchildren

    def test_workers_die_with_sigkilled_agent(self):
        agent, workers, grandchildren = self.start_with_grandchildren()
        for w in workers:
            self.assertEqual(harness.proc_stat(w)[1], agent.pid)
        agent.signal(signal.SIGKILL)
        agent.wait(5)
        harness.poll_until(lambda: not any(harness.is_alive(w) for w in workers), 2,
                           what="workers to die after the agent was SIGKILLed")
        # Grandchildren survive this (the agent is not PID 1): documented in
        # docs/pid1.md, "If the agent itself dies". Cleanup kills them.

    @unittest.skipUnless(harness.namespaces_supported("pid"),
                         "needs `unshare --pid` (root with CAP_SYS_ADMIN)")
    def test_workers_and_grandchildren_die_with_sigkilled_agent_as_pid1(self):
        # The container case: trainlet is PID 1 of its PID namespace.
        agent, workers, grandchildren = self.start_with_grandchildren(
            prefix=["unshare", "--pid", "--fork", "--kill-child"])
        kids = harness.children_of(agent.pid)  # agent.pid is unshare's
        self.assertEqual(len(kids), 1, kids)
        trainlet_pid = kids[0]
        with open("/proc/%d/cmdline" % trainlet_pid, "rb") as f:
            self.assertIn(b"trainlet", f.read())
        os.kill(trainlet_pid, signal.SIGKILL)
        everyone = workers + grandchildren
        harness.poll_until(lambda: not any(harness.is_alive(p) for p in everyone), 2,
                           what="workers and grandchildren to die with PID 1")
        agent.wait(5)

    def test_orphans_are_reaped(self):
        agent = self.start_single([PY, harness.worker("double_fork.py")])
        self.wait_for_files(["orphan-0", "orphan-1"], 30)
        for r in range(2):
            with open(self.path("orphan-%d" % r)) as f:
                orphan, adopter = map(int, f.read().split())
            # trainlet is a child subreaper: it adopted the orphan ...
            self.assertEqual(adopter, agent.pid, "orphan %d adopted by %d, not the agent %d"
                             % (orphan, adopter, agent.pid))
            # ... and reaps it once it exits: no zombie stays behind.
            harness.poll_until(lambda: harness.proc_stat(orphan) is None, 5,
                               what="orphan %d to be reaped (state %s)"
                               % (orphan, harness.proc_stat(orphan)))
        self.assertEqual(harness.zombie_children(agent.pid), [])
        self.assertTrue(agent.running(), agent.describe())
        open(self.path("go"), "w").close()
        self.assertEqual(agent.wait(20), 0, agent.describe())


if __name__ == "__main__":
    unittest.main()
