"""End-to-end: the launcher's PID-1 duties that only show on the real binary
(docs/pid1.md): a stalled stdout reader never freezes the agent (issue 7 D6),
no adopted orphan outlives its round or the agent, as a normal process, as
PID 1 and as PID 2 of a PID namespace (D10), and one local worker on a
terminal gets the terminal (issue 6)."""

import contextlib
import fcntl
import os
import shlex
import signal
import subprocess
import time
import unittest

import harness
from harness import E2ETestCase, PY

F_SETPIPE_SZ = 1031


def tagged(tag, cmdline):
    """Live processes with the test's tag whose command line is `cmdline`."""
    found = []
    for pid in harness.pids_with_tag(tag):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")[:-1]
        except OSError:
            continue
        if [a.decode(errors="replace") for a in argv] == cmdline:
            found.append(pid)
    return found


class LauncherTestCase(E2ETestCase):

    def single_node_args(self, nproc=1, extra=()):
        port, mp = harness.free_ports(2)
        return ["--nnodes=1", "--node-rank=0", "--node-id=solo",
                "--coordinator=127.0.0.1:%d" % port, "--master-port=%d" % mp,
                "--health-port=0", "--nproc-per-node=%d" % nproc,
                "--join-timeout=30s"] + list(extra)

    def agent_argv(self, command, nproc=1, extra=()):
        return [harness.TRAINLET, "run"] + self.single_node_args(nproc, extra) + ["--"] + command

    def start_custom(self, name, argv, **kwargs):
        p = harness.Proc(name, argv, self.base_env(), self.dir, **kwargs)
        self.procs.append(p)
        return p

    def stalled_pipe(self):
        """The write end of a pipe whose read end stays open, unread, until
        the test ends. Its buffer is one page."""
        r, w = os.pipe()
        with contextlib.suppress(OSError):
            fcntl.fcntl(w, F_SETPIPE_SZ, 4096)
        # Closed after the processes are gone (cleanups run last-in first-out).
        self.addCleanup(os.close, r)
        self.addCleanup(os.close, w)
        return w

    def wait_file(self, name, agent, timeout=30):
        try:
            return self.wait_for_files([name], timeout)[0]
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, agent.describe())) from None


class StalledStdoutTest(LauncherTestCase):
    """D6: with --prefix-output, stdout is a pipe that nobody reads."""

    def test_sigterm_still_handled_promptly(self):
        agent = self.start_custom(
            "agent", self.agent_argv([PY, harness.worker("chatty.py"), "forever"],
                                     extra=["--prefix-output", "--grace-period=3s"]),
            stdout=self.stalled_pipe())
        self.wait_file("chatty-0", agent)
        time.sleep(1.0)  # the pipe, the worker's pipe and the agent's buffer fill up
        self.assertTrue(agent.running(), agent.describe())
        sent = time.monotonic()
        agent.signal(signal.SIGTERM)
        # Before the fix the agent sat in write(2) and never saw the signal.
        rc = agent.wait(15)
        took = time.monotonic() - sent
        self.assertEqual(rc, 128 + signal.SIGTERM, agent.describe())
        # SIGTERM ends the worker at once; at most ~2 s go to the output flush.
        self.assertLess(took, 6, agent.describe())
        self.assertIn("of worker stdout at exit: the reader is not keeping up", agent.stderr)
        self.assert_no_leftovers()

    def test_worker_exit_still_handled_promptly(self):
        agent = self.start_custom(
            "agent", self.agent_argv([PY, harness.worker("chatty.py"), str(20 << 20)],
                                     extra=["--prefix-output"]),
            stdout=self.stalled_pipe())
        self.wait_file("chatty-0", agent)
        # The worker writes 20 MiB and exits 0 whether or not anyone reads.
        rc = agent.wait(30)
        self.assertEqual(rc, 0, agent.describe())
        self.assertIn("exited with code 0", agent.stderr)
        self.assertIn("of worker stdout at exit: the reader is not keeping up", agent.stderr)
        self.assert_no_leftovers()


class OrphanTest(LauncherTestCase):
    """D10: `sh -c 'setsid sleep 300 & sleep 0.3'` as the worker."""

    SETSID_WORKER = ["sh", "-c", "setsid sleep 300 & sleep 0.3"]

    def check_no_sleep_left(self, agent, prefix=()):
        rc = agent.wait(30)
        self.assertEqual(rc, 0, agent.describe())
        self.assertEqual(tagged(self.tag, ["sleep", "300"]), [],
                         "the setsid'd sleep outlived the agent\n" + agent.describe())
        self.assert_no_leftovers()

    def test_setsid_grandchild_does_not_outlive_the_agent(self):
        agent = self.start_agent(self.single_node_args(), self.SETSID_WORKER, name="agent")
        self.check_no_sleep_left(agent)
        self.assertIn("killing 1 adopted process(es)", agent.stderr)

    def test_as_pid1_of_a_pid_namespace(self):
        if not harness.namespaces_supported("pid"):
            self.skipTest("unshare --pid is not allowed here")
        # /proc is the parent namespace's: the agent maps pids through NSpid.
        agent = self.start_agent(self.single_node_args(), self.SETSID_WORKER, name="agent",
                                 prefix=["unshare", "--pid", "--fork", "--kill-child"])
        self.check_no_sleep_left(agent)

    def test_as_pid1_with_its_own_proc(self):
        if not harness.namespaces_supported("pid"):
            self.skipTest("unshare --pid is not allowed here")
        agent = self.start_agent(self.single_node_args(), self.SETSID_WORKER, name="agent",
                                 prefix=["unshare", "--pid", "--fork", "--kill-child",
                                         "--mount-proc"])
        self.check_no_sleep_left(agent)

    def test_as_pid2_of_a_pid_namespace(self):
        # PID 1 of the namespace is a shell that outlives the agent, so the
        # kernel does not clean up for us; /proc has other numbers for every
        # process than the agent's own namespace.
        if not harness.namespaces_supported("pid"):
            self.skipTest("unshare --pid is not allowed here")
        rc_file = self.path("agent-rc")
        script = '"$@"; echo $? > %s; exec sleep 60' % shlex.quote(rc_file)
        init = self.start(
            "init", ["unshare", "--pid", "--fork", "--kill-child", "sh", "-c", script, "sh"] +
            self.agent_argv(self.SETSID_WORKER))
        def rc_written():  # the shell creates the file, then writes it.
            return os.path.exists(rc_file) and open(rc_file).read().endswith("\n")
        harness.poll_until(lambda: rc_written() or not init.running(), 30,
                           what="the agent to exit")
        self.assertTrue(init.running(), init.describe())
        with open(rc_file) as f:
            self.assertEqual(f.read().strip(), "0", init.describe())
        # The agent has exited; its orphan would now be the shell's.
        time.sleep(0.2)
        self.assertEqual(tagged(self.tag, ["sleep", "300"]), [],
                         "the setsid'd sleep outlived the agent\n" + init.describe())
        self.assertIn("killing 1 adopted process(es)", init.stderr)

    def test_orphan_of_a_round_is_gone_before_the_next_round(self):
        agent = self.start_agent(self.single_node_args(extra=["--max-restarts=1"]),
                                 [PY, harness.worker("orphan_per_round.py")], name="agent")
        self.assertEqual(agent.wait(60), 0, agent.describe())
        with open(self.path("orphan-state")) as f:
            self.assertEqual(f.read(), "gone",
                             "the orphan of round 1 was alive in round 2\n" + agent.describe())
        self.assert_no_leftovers()


@unittest.skipUnless(os.path.exists("/usr/bin/script"), "util-linux script is not installed")
class TerminalTest(LauncherTestCase):
    """Issue 6: one local worker on a terminal can read it (pdb, input())."""

    def test_single_worker_reads_the_terminal(self):
        command = shlex.join(self.agent_argv([PY, harness.worker("read_stdin.py")]))
        env = self.base_env(SHELL="/bin/sh")
        # `script` runs the agent on a fresh pseudo-terminal, as a shell would.
        p = harness.Proc("agent", ["script", "-qec", command, "/dev/null"], env, self.dir,
                       stdin=subprocess.PIPE)
        self.procs.append(p)
        self.addCleanup(p.popen.stdin.close)
        self.wait_file("reading-0", p)
        p.popen.stdin.write(b"hello from the terminal\n")
        p.popen.stdin.flush()
        try:
            # Before: the worker, in a background process group, is stopped
            # by SIGTTIN and never reads the line.
            self.wait_for_files(["line-0"], 10)
        except AssertionError:
            pid = harness.read_pid_file(self.path("reading-0"))
            st = harness.proc_stat(pid)
            self.fail("the worker did not read the terminal (state %s)\n%s" %
                      (st[0] if st else "gone", p.describe()))
        with open(self.path("line-0")) as f:
            self.assertEqual(f.read(), "hello from the terminal\n")
        self.assertEqual(p.wait(20), 0, p.describe())
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
