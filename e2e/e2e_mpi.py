"""MPI jobs end to end (docs/mpi.md, issue 8), with real components on pod-like
hosts (network + UTS namespaces, e2e/netns.py): one host runs `trainlet
mpi-launcher -- mpirun ...`, three run `trainlet mpi-worker` with Debian's
OpenSSH sshd, and an mpicc-built MPI_Allreduce (e2e/workers/mpi_allreduce.c)
checks its result and where its ranks ran.

Open MPI 5 needs a Debian trixie root (scripts/mpi5_root.sh): that test is in
e2e_mpi5 (ctest label `slow`). Skipped where network namespaces, sshd or the
MPI compilers are missing."""

import os
import pwd
import re
import shutil
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
EXPECTED_SUM = NP * (NP + 1) // 2


def ns_pids(ns):
    r = subprocess.run(["ip", "netns", "pids", ns], stdout=subprocess.PIPE, text=True)
    return [int(p) for p in r.stdout.split()]


def comm(pid):
    try:
        with open("/proc/%d/comm" % pid) as f:
            return f.read().strip()
    except OSError:
        return "?"


class MpiJobTest(E2ETestCase):

    def setUp(self):
        super().setUp()
        if not os.access("/usr/sbin/sshd", os.X_OK):
            self.skipTest("needs openssh-server (/usr/sbin/sshd)")
        self.token = self.path("token")
        with open(self.token, "w") as f:
            f.write("e2e-mpi-secret\n")
        os.chmod(self.token, 0o644)
        self.job = "mpi-e2e"

    # -- helpers --

    def cluster(self, names=None):
        self.c = self.netns_cluster(names or ["launcher"] + WORKERS)
        self.launcher_host = self.c.hosts[0]
        self.worker_hosts = {h.name: h for h in self.c.hosts[1:]}
        return self.c

    def common_args(self, node):
        return ["--job-id", self.job, "--token-file", self.token,
                "--state-dir", self.path("state", node), "--heartbeat-timeout", "2s",
                "--grace-period", "3s"]

    def start_worker(self, name, extra=(), env=None, user_prefix=()):
        host = self.worker_hosts[name]
        argv = list(user_prefix) + [TRAINLET, "mpi-worker", "--coordinator", "launcher",
                                    "--nproc-per-node", str(SLOTS)] + \
            self.common_args(name) + list(extra)
        return self.c.start(host, name, argv, env=env)

    def start_launcher(self, command, extra=(), env=None, user_prefix=()):
        argv = list(user_prefix) + [TRAINLET, "mpi-launcher", "--nnodes", str(len(WORKERS))] + \
            self.common_args("launcher") + list(extra) + ["--"] + list(command)
        return self.c.start(self.launcher_host, "launcher", argv, env=env)

    def assert_ranks_on_every_worker(self, out):
        ranks = mpi_support.parse_ranks(out)
        self.assertEqual(sorted(ranks), list(range(NP)), out)
        per_host = {}
        for rank, host in ranks.items():
            per_host[host] = per_host.get(host, 0) + 1
        self.assertEqual(per_host, {w: SLOTS for w in WORKERS}, out)
        self.assertIn("allreduce sum=%d expected=%d" % (EXPECTED_SUM, EXPECTED_SUM), out)

    def assert_nothing_left(self, hosts):
        """No process at all is left on `hosts` (the agents exited; no sshd,
        orted, hydra proxy or rank survived them)."""
        def leftovers():
            return {h.name: ["%d:%s" % (p, comm(p)) for p in ns_pids(h.ns)] for h in hosts}
        deadline = time.monotonic() + 5
        while time.monotonic() < deadline and any(leftovers().values()):
            time.sleep(0.05)
        self.assertFalse(any(leftovers().values()), leftovers())

    def run_job(self, flavor, command_for, timeout=60, launcher_extra=()):
        program = mpi_support.build_mpi_program(flavor)
        self.cluster()
        workers = [self.start_worker(w) for w in WORKERS]
        launcher = self.start_launcher(command_for(program),
                                       extra=["--placement-timeout", "3s"] + list(launcher_extra))
        self.assertEqual(launcher.wait(timeout), 0, self.describe_all())
        for w in workers:
            self.assertEqual(w.wait(15), 0, self.describe_all())
        return launcher

    # -- tests --

    def test_openmpi4_allreduce_on_every_worker(self):
        launcher = self.run_job("openmpi", lambda p: ["mpirun", "-np", str(NP), p, "6"])
        self.assert_ranks_on_every_worker(launcher.stdout)
        self.assertIn("MPI: openmpi", launcher.stderr)
        # Verified at the 3 s deadline, or (a machine loaded enough that a
        # session took longer) after a warning, while the ranks still ran.
        self.assertIn("placement verified", launcher.stderr)
        self.assert_nothing_left(self.c.hosts)
        # The pinned host keys: known_hosts names every worker, no "no" anywhere.
        with open(self.path("state", "launcher", "known_hosts")) as f:
            known = f.read()
        for w in WORKERS:
            self.assertRegex(known, r"(?m)^\[%s[^\]]*\]:2222 ssh-ed25519 " % w)
        with open(self.path("state", "launcher", "ssh_config")) as f:
            self.assertIn("StrictHostKeyChecking yes", f.read())

    def test_mpich_hydra_allreduce_on_every_worker(self):
        if shutil.which("mpiexec.hydra") is None:
            self.skipTest("needs MPICH (mpiexec.hydra)")
        # The job key from a mounted Secret, as mpi-operator mounts it: ECDSA
        # P-521 in PEM, mode 0644 (OpenSSH itself would refuse it).
        secret = self.path("secret")
        os.makedirs(secret)
        subprocess.run(["ssh-keygen", "-q", "-t", "ecdsa", "-b", "521", "-m", "PEM", "-N", "",
                        "-f", os.path.join(secret, "ssh-privatekey")], check=True)
        os.chmod(os.path.join(secret, "ssh-privatekey"), 0o644)
        launcher = self.run_job("mpich", lambda p: ["mpiexec.hydra", "-np", str(NP), p],
                                launcher_extra=["--ssh-key-dir", secret])
        self.assert_ranks_on_every_worker(launcher.stdout)
        self.assertIn("MPI: mpich", launcher.stderr)
        self.assertIn("job key: the one mounted in", launcher.stderr)
        with open(os.path.join(secret, "ssh-privatekey.pub")) as f:
            pub = " ".join(f.read().split()[:2])
        with open(self.path("state", "w0", "authorized_keys")) as f:
            self.assertEqual(f.read().strip(), pub)

    def test_session_sees_pod_environment(self):
        """orted: command not found (trainer #3427): a session gets the pod's
        PATH and variables, not sshd's defaults."""
        mpi_support.build_mpi_program("openmpi")
        self.cluster()
        env = self.base_env(NCCL_DEBUG="INFO", E2E_POD_VAR="it's \"quoted\" $x",
                            PATH="/opt/e2e-pod-bin:" + os.environ.get("PATH", "/usr/bin:/bin"))
        workers = [self.start_worker(w, env=env) for w in WORKERS]
        launcher = self.start_launcher(
            ["mpirun", "-np", str(NP), "sh", "-c",
             'echo "ENV $(hostname) $NCCL_DEBUG|$E2E_POD_VAR|${PATH%%:*}"'])
        self.assertEqual(launcher.wait(60), 0, self.describe_all())
        lines = [l for l in launcher.stdout.splitlines() if l.startswith("ENV ")]
        self.assertEqual(len(lines), NP, launcher.stdout)
        for line in lines:
            self.assertTrue(line.endswith("INFO|it's \"quoted\" $x|/opt/e2e-pod-bin"), line)
        for w in workers:
            self.assertEqual(w.wait(15), 0, self.describe_all())

    def test_dead_sshd_is_restarted(self):
        program = mpi_support.build_mpi_program("openmpi")
        self.cluster()
        workers = [self.start_worker(w) for w in WORKERS]
        pid_file = self.path("state", "w0", "sshd.pid")
        harness.poll_until(lambda: os.path.exists(pid_file) and
                           open(pid_file).read().strip().isdigit(), 15, what="sshd of w0")
        with open(pid_file) as f:
            os.kill(int(f.read()), signal.SIGKILL)
        launcher = self.start_launcher(["mpirun", "-np", str(NP), program])
        self.assertEqual(launcher.wait(60), 0, self.describe_all())
        self.assert_ranks_on_every_worker(launcher.stdout)
        self.assertIn("helper sshd", workers[0].stderr)
        for w in workers:
            self.assertEqual(w.wait(15), 0, self.describe_all())

    def test_launcher_as_node_hosts_ranks_first(self):
        program = mpi_support.build_mpi_program("openmpi")
        self.cluster()
        workers = [self.start_worker(w) for w in WORKERS]
        launcher = self.start_launcher(["mpirun", "-np", str(NP + 2), program],
                                       extra=["--launcher-as-node", "--nproc-per-node", "2"])
        self.assertEqual(launcher.wait(60), 0, self.describe_all())
        ranks = mpi_support.parse_ranks(launcher.stdout)
        self.assertEqual(sorted(ranks), list(range(NP + 2)), launcher.stdout)
        self.assertEqual([ranks[0], ranks[1]], ["launcher", "launcher"], launcher.stdout)
        self.assertEqual(sorted(set(ranks.values())), ["launcher"] + WORKERS)
        for w in workers:
            self.assertEqual(w.wait(15), 0, self.describe_all())

    def test_late_worker_is_waited_for(self):
        program = mpi_support.build_mpi_program("openmpi")
        self.cluster()
        workers = [self.start_worker(w) for w in WORKERS[:2]]
        launcher = self.start_launcher(["mpirun", "-np", str(NP), program])
        time.sleep(6)
        self.assertTrue(launcher.running(), self.describe_all())
        workers.append(self.start_worker(WORKERS[2]))
        self.assertEqual(launcher.wait(60), 0, self.describe_all())
        self.assert_ranks_on_every_worker(launcher.stdout)
        for w in workers:
            self.assertEqual(w.wait(15), 0, self.describe_all())
        # --early-command=auto: mpirun ran from the start, its ssh held at
        # the gate while w2 was missing (else its ssh to w2 had failed).
        self.assertIn("starting COMMAND while checking", launcher.stderr)
        self.assertIn("COMMAND's ssh goes on", launcher.stderr)

    def test_worker_with_another_host_key_is_refused(self):
        """A host answering on a worker's name and port with a key other than
        the one that worker sent (a stale DNS record, a man in the middle) is
        refused: readiness fails with the reason, COMMAND never runs."""
        program = mpi_support.build_mpi_program("openmpi")
        self.cluster()
        impostor = mpi_support.start_bare_sshd(self.c, self.worker_hosts["w1"],
                                               self.path("impostor"), 2222)
        mpi_support.wait_sshd([impostor])
        workers = [self.start_worker(w) for w in WORKERS]
        launcher = self.start_launcher(["mpirun", "-np", str(NP), program],
                                       extra=["--ready-timeout", "4s"])
        self.assertEqual(launcher.wait(30), 69, self.describe_all())
        self.assertIn("host key mismatch", launcher.stderr)
        self.assertIn("w1", launcher.stderr)
        # mpirun started early and its ssh waited at the gate: no session
        # ever reached a worker, and mpirun went with the launcher.
        self.assertIn("starting COMMAND while checking", launcher.stderr)
        self.assertNotIn("allreduce", launcher.stdout)
        for w in workers:
            self.assertNotEqual(w.wait(20), 0, self.describe_all())
        for w in WORKERS:
            with open(self.path("state", w, "sessions")) as f:
                self.assertEqual(f.read(), "", w)
        impostor.kill()
        self.assert_nothing_left([self.launcher_host] + list(self.worker_hosts.values()))

    def test_failed_check_with_command_after_it_fails_the_job_at_once(self):
        """COMMAND a script (it starts after the check): a check that fails
        fails the round as an early one does, so every worker hears the
        verdict at once (not, minutes later, that the launcher's coordinator
        is gone), and with --max-restarts the round is tried again first."""
        self.cluster()
        impostor = mpi_support.start_bare_sshd(self.c, self.worker_hosts["w1"],
                                               self.path("impostor"), 2222)
        mpi_support.wait_sshd([impostor])
        script = self.path("job.sh")
        with open(script, "w") as f:
            f.write("#!/bin/sh\necho COMMAND ran\n")
        os.chmod(script, 0o755)
        # No restart left: 69; one: the round is tried again, then 79.
        for restarts, code in (("0", 69), ("1", 79)):
            self.job = "mpi-e2e-r" + restarts
            workers = [self.start_worker(w) for w in WORKERS]
            launcher = self.start_launcher([script], extra=["--ready-timeout", "3s",
                                                            "--max-restarts", restarts])
            self.assertEqual(launcher.wait(60), code, self.describe_all())
            ended = time.monotonic()
            self.assertIn("waiting until every worker is reachable", launcher.stderr)
            self.assertIn("host key mismatch", launcher.stderr)
            self.assertNotIn("COMMAND ran", launcher.stdout)
            for w in workers:  # the job's verdict, not a lost coordinator
                self.assertEqual(w.wait(20), 75 if code == 69 else 79, self.describe_all())
            self.assertLess(time.monotonic() - ended, 15, self.describe_all())
        impostor.kill()
        self.assert_nothing_left([self.launcher_host] + list(self.worker_hosts.values()))

    def test_command_with_its_own_ssh_agent_starts_after_the_check(self):
        """--early-command=auto holds back when COMMAND's MPI may start its
        daemons with another agent than trainlet's ssh wrapper (here
        OMPI_MCA_plm_rsh_agent): COMMAND starts once every worker passed."""
        program = mpi_support.build_mpi_program("openmpi")
        self.cluster()
        workers = [self.start_worker(w) for w in WORKERS]
        launcher = self.start_launcher(["mpirun", "-np", str(NP), program],
                                       env=self.base_env(OMPI_MCA_plm_rsh_agent="ssh"))
        self.assertEqual(launcher.wait(60), 0, self.describe_all())
        self.assert_ranks_on_every_worker(launcher.stdout)
        self.assertIn("waiting until every worker is reachable", launcher.stderr)
        self.assertNotIn("starting COMMAND while checking", launcher.stderr)
        for w in workers:
            self.assertEqual(w.wait(15), 0, self.describe_all())

    def test_worker_pod_killed_mid_job(self):
        program = mpi_support.build_mpi_program("openmpi")
        self.cluster()
        workers = {w: self.start_worker(w) for w in WORKERS}
        launcher = self.start_launcher(["mpirun", "-np", str(NP), program, "60"])
        harness.poll_until(lambda: launcher.stdout.count("rank ") >= NP, 30,
                           what="every rank running")
        # The pod goes: every process in its namespace at once.
        victim = self.worker_hosts["w1"]
        for pid in ns_pids(victim.ns):
            os.kill(pid, signal.SIGKILL)
        killed_at = time.monotonic()
        self.assertNotEqual(launcher.wait(20), 0, self.describe_all())
        for name in ("w0", "w2"):
            self.assertNotEqual(workers[name].wait(20), 0, self.describe_all())
        # Within the grace period (3 s) plus detection (heartbeat timeout 2 s).
        self.assertLess(time.monotonic() - killed_at, 12, self.describe_all())
        self.assert_nothing_left(self.c.hosts)

    def test_in_place_restart_after_worker_pod_replaced(self):
        program = mpi_support.build_mpi_program("openmpi")
        self.cluster()
        workers = {w: self.start_worker(w) for w in WORKERS}
        script = self.path("job.sh")
        with open(script, "w") as f:
            f.write('#!/bin/sh\necho "RESTART $TRAINLET_RESTART_COUNT"\n'
                    'if [ "$TRAINLET_RESTART_COUNT" = 0 ]; then exec mpirun -np %d %s 60; fi\n'
                    'exec mpirun -np %d %s\n' % (NP, program, NP, program))
        os.chmod(script, 0o755)
        launcher = self.start_launcher([script], extra=["--max-restarts", "1"])
        harness.poll_until(lambda: launcher.stdout.count("rank ") >= NP, 30,
                           what="every rank running")
        victim = self.worker_hosts["w1"]
        for pid in ns_pids(victim.ns):
            os.kill(pid, signal.SIGKILL)
        workers["w1"].wait(10)
        # Kubernetes starts a replacement pod: a new incarnation, a new host key.
        workers["w1b"] = self.c.start(victim, "w1b", [
            TRAINLET, "mpi-worker", "--coordinator", "launcher", "--nproc-per-node",
            str(SLOTS), "--node-id", "w1"] + self.common_args("w1"))
        self.assertEqual(launcher.wait(60), 0, self.describe_all())
        self.assertIn("RESTART 0", launcher.stdout)
        self.assertIn("RESTART 1", launcher.stdout)
        self.assertIn("allreduce sum=%d" % EXPECTED_SUM, launcher.stdout)
        for name in ("w0", "w2", "w1b"):
            self.assertEqual(workers[name].wait(15), 0, self.describe_all())

    def test_whole_job_as_non_root(self):
        user = "tl-e2e-mpi"
        try:
            pw = pwd.getpwnam(user)
        except KeyError:
            r = subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", user],
                               stderr=subprocess.PIPE, text=True)
            if r.returncode != 0:
                self.skipTest("cannot create a test user: %s" % r.stderr.strip())
            self.addCleanup(subprocess.run, ["userdel", "--remove", user],
                            stderr=subprocess.DEVNULL)
            pw = pwd.getpwnam(user)
        program = mpi_support.build_mpi_program("openmpi", self.path("bin"))
        # The user's own copies (the test dir is root's).
        for path in (self.dir, self.path("bin")):
            os.chmod(path, 0o755)
        os.makedirs(self.path("state"), exist_ok=True)
        shutil.chown(self.path("state"), pw.pw_uid, pw.pw_gid)
        as_user = ["setpriv", "--reuid", str(pw.pw_uid), "--regid", str(pw.pw_gid),
                   "--init-groups", "env", "HOME=" + pw.pw_dir, "USER=" + user]
        self.cluster()
        workers = [self.start_worker(w, user_prefix=as_user) for w in WORKERS]
        launcher = self.start_launcher(["mpirun", "-np", str(NP), program],
                                       user_prefix=as_user)
        self.assertEqual(launcher.wait(60), 0, self.describe_all())
        self.assert_ranks_on_every_worker(launcher.stdout)
        for w in workers:
            self.assertEqual(w.wait(15), 0, self.describe_all())
        st = os.stat(self.path("state", "launcher", "id_job"))
        self.assertEqual((st.st_uid, st.st_mode & 0o777), (pw.pw_uid, 0o600))


if __name__ == "__main__":
    unittest.main()
