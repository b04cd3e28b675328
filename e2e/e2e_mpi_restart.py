"""An MPI job restarted in place (docs/mpi.md, "Failure and in-place
restart"; issue 33), short: launcher + 3 workers on pod-like hosts
(e2e/netns.py), Open MPI 4, `--max-restarts=1`. Worker w1's pod goes (kill -9
of every process in its namespace) and a replacement pod starts on the same
host, as a JobSet would: same hostname, new state directory, new host key.

Checked: the job is relaunched (TRAINLET_RESTART_COUNT 1) with its ranks on
every worker, the replacement included; while it runs, each worker has
exactly one SSH connection from the launcher (mpirun's sessions ride on the
readiness check's connection, mpi/ssh_master.h), and the surviving workers'
connections are those of the first round (only the replacement needed a new
login); when it ends, no process is left on any host. How fast: bench/mpi_launch.py --modes
restart."""

import os
import signal
import subprocess
import time
import unittest

import harness
import mpi_support
from harness import E2ETestCase, TRAINLET

WORKERS = ["w0", "w1", "w2"]
SLOTS = 2
NP = SLOTS * len(WORKERS)
SSH_PORT = 2222


def ns_pids(ns):
    r = subprocess.run(["ip", "netns", "pids", ns], stdout=subprocess.PIPE, text=True)
    return [int(p) for p in r.stdout.split()]


def cmdline(pid):
    try:
        with open("/proc/%d/cmdline" % pid, "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def sshd_connections(host):
    """Established TCP connections to the worker's sshd, in its namespace."""
    r = subprocess.run(["ip", "netns", "exec", host.ns, "ss", "-Htn", "state", "established",
                        "( sport = :%d )" % SSH_PORT], stdout=subprocess.PIPE, text=True)
    return len([ln for ln in r.stdout.splitlines() if ln.strip()])


class MpiRestartTest(E2ETestCase):

    def setUp(self):
        super().setUp()
        if not os.access("/usr/sbin/sshd", os.X_OK):
            self.skipTest("needs openssh-server (/usr/sbin/sshd)")
        self.program = mpi_support.build_mpi_program("openmpi")
        self.token = self.path("token")
        with open(self.token, "w") as f:
            f.write("e2e-mpi-restart\n")
        self.c = self.netns_cluster(["launcher"] + WORKERS)
        self.hosts = {h.name: h for h in self.c.hosts}

    def common(self, state):
        return ["--job-id", "restart", "--token-file", self.token,
                "--state-dir", self.path("state", state), "--heartbeat-timeout", "2s",
                "--grace-period", "3s"]

    def worker(self, host, state, extra=()):
        return self.c.start(self.hosts[host], state, [
            TRAINLET, "mpi-worker", "--coordinator", "launcher", "--nproc-per-node",
            str(SLOTS)] + self.common(state) + list(extra))

    def masters(self):
        """The pids of the launcher's ssh multiplexing masters."""
        mux = self.path("state", "launcher", "mux") + "/"
        return {p for p in ns_pids(self.hosts["launcher"].ns)
                if cmdline(p).startswith("ssh: " + mux)}

    def test_replaced_worker_pod_rejoins_and_the_job_is_relaunched_over_one_connection(self):
        workers = {w: self.worker(w, w) for w in WORKERS}
        script = self.path("job.sh")
        with open(script, "w") as f:
            # Round 0's ranks wait to be killed; the restarted job's live 4 s.
            f.write('#!/bin/sh\necho "RESTART $TRAINLET_RESTART_COUNT"\n'
                    'if [ "$TRAINLET_RESTART_COUNT" = 0 ]; then exec mpirun -np %d %s 60; fi\n'
                    'exec mpirun -np %d %s 4\n' % (NP, self.program, NP, self.program))
        os.chmod(script, 0o755)
        launcher = self.c.start(self.hosts["launcher"], "launcher", [
            TRAINLET, "mpi-launcher", "--nnodes", str(len(WORKERS)), "--max-restarts", "1",
            "--placement-timeout", "0"] + self.common("launcher") + ["--", script])
        harness.poll_until(lambda: launcher.stdout.count("rank ") >= NP, 60,
                           what="round 0's ranks running")
        first = self.masters()
        self.assertEqual(len(first), len(WORKERS), self.describe_all())

        for pid in ns_pids(self.hosts["w1"].ns):  # the pod goes
            os.kill(pid, signal.SIGKILL)
        workers["w1"].wait(10)
        # A new pod on the same host: same hostname, new state (a new host key).
        workers["w1b"] = self.worker("w1", "w1b", ["--node-id", "w1"])

        def relaunched():
            out = launcher.stdout
            return "RESTART 1" in out and out.split("RESTART 1", 1)[1].count("rank ") >= NP
        harness.poll_until(relaunched, 60, what="the relaunched job's ranks running")
        after = launcher.stdout.split("RESTART 1", 1)[1]
        ranks = mpi_support.parse_ranks(after)
        self.assertEqual(sorted(set(ranks.values())), WORKERS, after)
        # mpirun's sessions on each worker share the readiness check's
        # connection: one connection per worker, not two.
        for w in WORKERS:
            self.assertEqual(sshd_connections(self.hosts[w]), 1, "%s\n%s" % (
                w, self.describe_all()))
        # The survivors' connections were reused; the replacement has a new one.
        second = self.masters()
        self.assertEqual(len(second), len(WORKERS), self.describe_all())
        self.assertEqual(len(first & second), len(WORKERS) - 1, self.describe_all())

        self.assertEqual(launcher.wait(60), 0, self.describe_all())
        self.assertIn("RESTART 0", launcher.stdout)
        after = launcher.stdout.split("RESTART 1", 1)[1]  # now with the sum rank 0 printed last
        self.assertEqual(mpi_support.check_run(after, NP, hosts=WORKERS), [],
                         self.describe_all())
        for name in ("w0", "w2", "w1b"):
            self.assertEqual(workers[name].wait(20), 0, self.describe_all())

        def leftovers():
            return {h.name: ["%d:%s" % (p, cmdline(p)[:60]) for p in ns_pids(h.ns)]
                    for h in self.c.hosts}
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and any(leftovers().values()):
            time.sleep(0.05)
        self.assertFalse(any(leftovers().values()), leftovers())


if __name__ == "__main__":
    unittest.main()
