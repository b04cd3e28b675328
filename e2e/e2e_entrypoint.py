"""End-to-end: what an entrypoint started before `exec trainlet` is the
entrypoint's, not the workers' (issue 25, docs/pid1.md): its `tee` and its
sidecars are never killed, a `tee` reading the agent's output finishes before
the agent exits, also as PID 1 of a PID namespace; and a worker's own output
helpers get time to finish writing when the worker exits."""

import os
import shlex
import textwrap
import unittest

import harness
from harness import E2ETestCase


# A worker that fails once, printing lines, then succeeds, printing more.
FAILS_ONCE = textwrap.dedent("""\
    if [ ! -e "$E2E_DIR/failed" ]; then
      touch "$E2E_DIR/failed"
      for i in $(seq 200); do echo "round 1 line $i"; done
      exit 3
    fi
    for i in $(seq 200); do echo "round 2 line $i"; done
    echo "round 2 done"
""")


def expected_worker_lines():
    return (["round 1 line %d" % i for i in range(1, 201)] +
            ["round 2 line %d" % i for i in range(1, 201)] + ["round 2 done"])


class EntrypointTestCase(E2ETestCase):

    def entrypoint(self, body):
        """An entrypoint script (bash) whose last line is `exec trainlet ...`."""
        path = self.path("entrypoint.sh")
        with open(path, "w") as f:
            f.write("#!/bin/bash\nset -e\n" + textwrap.dedent(body))
        os.chmod(path, 0o755)
        return path

    def run_entrypoint(self, body, prefix=(), timeout=60, env=None):
        """Runs the entrypoint to its end: (exit code, seconds, Proc)."""
        p = self.start("entrypoint", ["/bin/bash", self.entrypoint(body)],
                       env=self.base_env(TRAINLET=harness.TRAINLET, **(env or {})),
                       prefix=prefix)
        rc = p.wait(timeout)
        return rc, p.elapsed(), p

    def read(self, name):
        with open(self.path(name)) as f:
            return f.read()


class TeedEntrypointTest(EntrypointTestCase):
    """`exec > >(tee LOG)`, then `exec trainlet run --max-restarts=2` with a
    worker that fails once: the restart succeeds, every line is in LOG."""

    def test_restart_succeeds_and_every_line_is_in_the_log(self):
        rc, _, p = self.run_entrypoint("""\
            exec > >(tee "$E2E_DIR/train.log") 2>&1
            exec "$TRAINLET" run --max-restarts=2 -- bash -c %s
            """ % shlex.quote(FAILS_ONCE))
        log = self.read("train.log")
        self.assertEqual(rc, 0, log[-3000:] + p.describe())
        lines = log.splitlines()
        worker_lines = [line for line in lines if not line.startswith("20")]
        self.assertEqual(worker_lines, expected_worker_lines(), log[-3000:])
        # The agent's log too, to its last line: the tee outlived the agent's
        # last write (it finished before the agent exited).
        self.assertRegex(lines[-1], r"exiting with code 0\b")
        self.assertNotIn("adopted process", log)
        self.assertIn("child process(es) of the entrypoint", log)
        self.assertEqual(p.stdout, log, "tee's own stdout, the same lines")

    def test_as_pid1_a_slow_reader_finishes_before_the_namespace_goes(self):
        # The reader writes its file only after EOF, 0.5 s later: when the
        # agent is PID 1, its exit would kill it first.
        if not harness.namespaces_supported("pid"):
            self.skipTest("unshare --pid is not allowed here")
        # /proc is the parent namespace's: the agent maps pids through NSpid.
        rc, _, p = self.run_entrypoint("""\
            exec > >(sh -c 'cat > "$E2E_DIR/train.part"; sleep 0.5;
                            mv "$E2E_DIR/train.part" "$E2E_DIR/train.log"') 2>&1
            exec "$TRAINLET" run --max-restarts=2 -- bash -c %s
            """ % shlex.quote(FAILS_ONCE),
            prefix=["unshare", "--pid", "--fork", "--kill-child"])
        self.assertEqual(rc, 0, p.describe())
        self.assertTrue(os.path.exists(self.path("train.log")),
                        "the reader was killed with the namespace\n" + p.describe())
        log = self.read("train.log")
        self.assertEqual([line for line in log.splitlines() if not line.startswith("20")],
                         expected_worker_lines())
        self.assertRegex(log.splitlines()[-1], r"exiting with code 0\b")

    def test_as_pid1_a_reader_that_never_exits_is_waited_for_at_most_2s(self):
        if not harness.namespaces_supported("pid"):
            self.skipTest("unshare --pid is not allowed here")
        rc, elapsed, p = self.run_entrypoint("""\
            exec > >(sh -c 'cat > "$E2E_DIR/train.log"; exec sleep 300') 2>&1
            exec "$TRAINLET" run -- bash -c 'echo hello'
            """, prefix=["unshare", "--pid", "--fork", "--kill-child", "--mount-proc"])
        self.assertEqual(rc, 0, p.describe())
        # 2 s of waiting, with room for a loaded machine.
        self.assertLess(elapsed, 12, p.describe())
        log = self.read("train.log")
        self.assertIn("hello\n", log)
        self.assertRegex(log.splitlines()[-1], r"exiting with code 0\b")


class ExitPathsTest(EntrypointTestCase):
    """Every way out of the binary lets a reader of its output finish, as
    PID 1 too: the usage errors of a mistyped entrypoint, and the commands
    that run as a pod's entrypoint besides `run` (coordinator, controller)."""

    def test_as_pid1_an_error_reaches_the_teed_log(self):
        if not harness.namespaces_supported("pid"):
            self.skipTest("unshare --pid is not allowed here")
        for args, expected in (("runn", 'unknown command "runn"'),
                               ("coordinator --bogus", "trainlet coordinator: unknown flag"),
                               ("controller --bogus", "trainlet controller: unknown flag")):
            with self.subTest(args=args):
                for name in ("out.log", "out.part"):
                    if os.path.exists(self.path(name)):
                        os.remove(self.path(name))
                # The reader writes its file only 0.5 s after EOF: the
                # namespace's end would kill it first.
                rc, _, p = self.run_entrypoint("""\
                    exec > >(sh -c 'cat > "$E2E_DIR/out.part"; sleep 0.5
                                    mv "$E2E_DIR/out.part" "$E2E_DIR/out.log"') 2>&1
                    exec "$TRAINLET" %s
                    """ % args, prefix=["unshare", "--pid", "--fork", "--kill-child"])
                self.assertEqual(rc, harness.EXIT_USAGE, p.describe())
                self.assertTrue(os.path.exists(self.path("out.log")),
                                "the reader was killed with the namespace\n" + p.describe())
                self.assertIn(expected, self.read("out.log"))


class SidecarTest(EntrypointTestCase):
    """A sidecar started with `&` before `exec trainlet`, and an orphan a
    sidecar leaves once the agent runs, live until the agent exits (and on:
    the agent is not PID 1 here), across a round that fails."""

    def run_with_sidecars(self, prefix=()):
        worker = textwrap.dedent("""\
            touch "$E2E_DIR/go"
            while [ ! -e "$E2E_DIR/orphan" ]; do sleep 0.01; done
            if [ ! -e "$E2E_DIR/failed" ]; then touch "$E2E_DIR/failed"; exit 3; fi
            kill -0 "$(cat "$E2E_DIR/sidecar")" && kill -0 "$(cat "$E2E_DIR/orphan")" &&
              echo alive > "$E2E_DIR/alive-in-round-2"
        """)
        rc, _, p = self.run_entrypoint("""\
            sleep 300 &
            echo $! > "$E2E_DIR/sidecar"
            sh -c 'while [ ! -e "$E2E_DIR/go" ]; do sleep 0.01; done
                   sleep 300 & echo $! > "$E2E_DIR/orphan.tmp"
                   mv "$E2E_DIR/orphan.tmp" "$E2E_DIR/orphan"' &
            exec "$TRAINLET" run --max-restarts=1 -- bash -c %s
            """ % shlex.quote(worker), prefix=prefix)
        self.assertEqual(rc, 0, p.describe())
        self.assertEqual(self.read("alive-in-round-2"), "alive\n", p.describe())
        self.assertNotIn("adopted process", p.stderr)
        self.assertIn("child process(es) of the entrypoint", p.stderr)
        return p

    def test_sidecars_are_alive_until_the_agent_exits(self):
        p = self.run_with_sidecars()
        sidecar = harness.read_pid_file(self.path("sidecar"))
        orphan = harness.read_pid_file(self.path("orphan"))
        self.assertTrue(harness.is_alive(sidecar), "the sidecar was killed\n" + p.describe())
        self.assertTrue(harness.is_alive(orphan), "the sidecar's orphan was killed\n" +
                        p.describe())
        # (The test's cleanup kills both by their tag.)

    def test_as_pid1_in_a_group_outside_its_namespace(self):
        # `unshare --pid --fork` makes no new session: the agent, PID 1, and
        # the entrypoint's background jobs stay in a process group whose
        # leader is outside the namespace, which getpgid() gives as 0.
        if not harness.namespaces_supported("pid"):
            self.skipTest("unshare --pid is not allowed here")
        self.run_with_sidecars(prefix=["unshare", "--pid", "--fork", "--kill-child"])


class DaemonTest(EntrypointTestCase):
    """A daemon the entrypoint started (`sshd &`): in a session of its own,
    its parent exiting only once the workers run, so that it comes to the
    agent then. It started before any worker: it outlives a failed round."""

    def test_a_daemon_that_detaches_late_is_not_killed(self):
        worker = textwrap.dedent("""\
            touch "$E2E_DIR/go"
            d=$(cat "$E2E_DIR/daemon")
            if [ ! -e "$E2E_DIR/failed" ]; then
              # Fails once the daemon is the agent's.
              while [ "$(cut -d' ' -f4 /proc/$d/stat)" != "$PPID" ]; do sleep 0.01; done
              touch "$E2E_DIR/failed"
              exit 3
            fi
            kill -0 "$d" && echo alive > "$E2E_DIR/alive-in-round-2"
        """)
        # (Start times count in clock ticks of 10 ms: the agent starts its
        # first worker later than that anyway; the sleep makes sure.)
        rc, _, p = self.run_entrypoint("""\
            sh -c 'setsid sleep 300 & echo $! > "$E2E_DIR/daemon.tmp"
                   mv "$E2E_DIR/daemon.tmp" "$E2E_DIR/daemon"
                   while [ ! -e "$E2E_DIR/go" ]; do sleep 0.01; done' &
            while [ ! -e "$E2E_DIR/daemon" ]; do sleep 0.01; done
            sleep 0.05
            exec "$TRAINLET" run --max-restarts=1 -- bash -c %s
            """ % shlex.quote(worker))
        self.assertEqual(rc, 0, p.describe())
        self.assertEqual(self.read("alive-in-round-2"), "alive\n", p.describe())
        self.assertTrue(harness.is_alive(harness.read_pid_file(self.path("daemon"))),
                        p.describe())
        self.assertNotIn("adopted process", p.stderr)
        # (The test's cleanup kills it by its tag.)


class WorkerOutputHelperTest(EntrypointTestCase):
    """A worker's own `exec > >(tee f)` finishes writing after the worker
    exits; a process it leaves in its group that keeps running is killed
    2 s after the worker exited."""

    def test_worker_tee_keeps_all_2000_lines_20_of_20(self):
        script = 'exec > >(tee "$F"); for ((i = 1; i <= 2000; i++)); do echo "line $i"; done'
        expected = "".join("line %d\n" % i for i in range(1, 2001))
        for run in range(20):
            f = self.path("tee-%d.txt" % run)
            p = self.start("agent%d" % run, [harness.TRAINLET, "run", "--", "bash", "-c", script],
                           env=self.base_env(F=f))
            self.assertEqual(p.wait(30), 0, p.describe())
            with open(f) as out:
                self.assertEqual(out.read(), expected, "run %d\n%s" % (run, p.describe()))

    def test_a_stray_in_the_workers_group_is_killed_after_the_drain_time(self):
        # It reads a pipe (like a `tee`) whose writer keeps running too.
        p = self.start("agent", [harness.TRAINLET, "run", "--", "bash", "-c",
                                 'sleep 300 | sleep 300 & echo $! > "$E2E_DIR/stray"; exit 0'])
        self.assertEqual(p.wait(30), 0, p.describe())
        stray = harness.read_pid_file(self.path("stray"))
        self.assertFalse(harness.is_alive(stray), p.describe())
        self.assertRegex(p.stderr, r"exited 2s ago and its process group \d+ still has "
                                   r"processes: sending SIGTERM")
        # 2 s of drain time, with room for a loaded machine.
        self.assertLess(p.elapsed(), 12)


# Round 1: a DataLoader with 2 worker processes, then killed by SIGKILL (as by
# the OOM killer), its DataLoader workers left behind in its group (they
# notice within 5 s). Round 2 succeeds.
DATALOADER_KILLED_ONCE = textwrap.dedent("""\
    import os, signal, time
    import torch
    from torch.utils.data import DataLoader, Dataset

    class Data(Dataset):
        def __len__(self):
            return 1000
        def __getitem__(self, i):
            return torch.zeros(1)

    if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        it = iter(DataLoader(Data(), num_workers=2))
        next(it)
        time.sleep(1.5)  # training; a process younger than 1 s may be a `tee`
        with open(os.path.join(os.environ["E2E_DIR"], "loaders"), "w") as f:
            f.write(" ".join(str(w.pid) for w in it._workers))
        os.kill(os.getpid(), signal.SIGKILL)
    print("round 2 done", flush=True)
""")


class DataLoaderRestartTest(EntrypointTestCase):
    """A PyTorch worker killed by a signal leaves its DataLoader workers in
    its group. They read no pipe (multiprocessing points their stdin at
    /dev/null), so they are not output helpers: the restart stops them at
    once instead of after the 2 s drain time."""

    def test_a_killed_workers_dataloader_workers_do_not_hold_the_restart(self):
        p = self.start("agent", [harness.TRAINLET, "run", "--max-restarts=1", "--",
                                 harness.PY, "-c", DATALOADER_KILLED_ONCE])
        self.assertEqual(p.wait(120), 0, p.describe())
        self.assertIn("round 2 done", p.stdout)
        loaders = [int(pid) for pid in self.read("loaders").split()]
        self.assertEqual(len(loaders), 2)
        for pid in loaders:
            self.assertFalse(harness.is_alive(pid), p.describe())
        self.assertNotRegex(p.stderr, r"still has processes: sending", p.describe())
        failed = harness.logged_at(p.stderr, r"failed: killed by signal 9")
        restarted = harness.logged_at(p.stderr, r"round 2: node rank 0")
        print("\n[measure] worker killed by SIGKILL with 2 DataLoader workers -> round 2: "
              "%.3fs" % (restarted - failed))


if __name__ == "__main__":
    unittest.main()
