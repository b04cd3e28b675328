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


class SidecarTest(EntrypointTestCase):
    """A sidecar started with `&` before `exec trainlet`, and an orphan a
    sidecar leaves once the agent runs, live until the agent exits (and on:
    the agent is not PID 1 here), across a round that fails."""

    def test_sidecars_are_alive_until_the_agent_exits(self):
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
            """ % shlex.quote(worker))
        self.assertEqual(rc, 0, p.describe())
        sidecar = harness.read_pid_file(self.path("sidecar"))
        orphan = harness.read_pid_file(self.path("orphan"))
        self.assertEqual(self.read("alive-in-round-2"), "alive\n", p.describe())
        self.assertTrue(harness.is_alive(sidecar), "the sidecar was killed\n" + p.describe())
        self.assertTrue(harness.is_alive(orphan), "the sidecar's orphan was killed\n" +
                        p.describe())
        self.assertNotIn("adopted process", p.stderr)
        self.assertIn("child process(es) of the entrypoint", p.stderr)
        # (The test's cleanup kills both by their tag.)


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
        p = self.start("agent", [harness.TRAINLET, "run", "--", "bash", "-c",
                                 'sleep 300 & echo $! > "$E2E_DIR/stray"; exit 0'])
        self.assertEqual(p.wait(30), 0, p.describe())
        stray = harness.read_pid_file(self.path("stray"))
        self.assertFalse(harness.is_alive(stray), p.describe())
        self.assertRegex(p.stderr, r"exited 2s ago and its process group \d+ still has "
                                   r"processes: sending SIGTERM")
        # 2 s of drain time, with room for a loaded machine.
        self.assertLess(p.elapsed(), 12)


if __name__ == "__main__":
    unittest.main()
