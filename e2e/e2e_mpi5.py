"""Open MPI 5 (PRRTE) for real (issue 8): a Debian trixie root filesystem
with openmpi-bin 5.0.x (scripts/mpi5_root.sh builds it once), used by every
pod-like host through a chroot (e2e/mpi_support.py: chroot_prefix). trainlet
itself runs outside the root; its workers' sshd and the launcher's mpirun run
inside it through small wrapper scripts, so every MPI process is Open MPI 5.

The silent single-node run: Open MPI 5 ignores OMPI_MCA_orte_* and, with a
small -np, runs every rank on the launcher and exits 0 (trainer #4028). trainlet
sets PRTE_MCA_* when it knows or cannot tell the flavour, and its placement
check catches the case where COMMAND still puts nothing on the workers.

ctest label `slow` (not in the default run): `scripts/mpi5_root.sh && ctest
--test-dir build -L slow`. Skipped when the root has not been built."""

import os
import shlex
import unittest

import mpi_support
from harness import E2ETestCase, TRAINLET

WORKERS = ["w0", "w1", "w2"]
SLOTS = 2


class OpenMpi5Test(E2ETestCase):

    def setUp(self):
        super().setUp()
        self.root = mpi_support.ompi5_root()
        self.token = self.path("token")
        with open(self.token, "w") as f:
            f.write("e2e-mpi5\n")

    def wrapper(self, host, name, inner):
        """A script that runs `inner "$@"` chrooted into the root on `host`."""
        path = self.path("%s-%s" % (name, host.name))
        prefix = mpi_support.chroot_prefix(host, self.root, [self.dir])
        with open(path, "w") as f:
            f.write("#!/bin/sh\nexec %s %s \"$@\"\n" % (" ".join(shlex.quote(a) for a in prefix),
                                                        shlex.quote(inner)))
        os.chmod(path, 0o755)
        return path

    def common(self, node):
        return ["--job-id", "mpi5", "--token-file", self.token,
                "--state-dir", self.path("state", node), "--heartbeat-timeout", "3s",
                "--grace-period", "3s"]

    def start_job(self, np, launcher_extra, sleep="0", domain=None, env=None):
        """Workers w0-w2 and the launcher; with `domain`, every host's FQDN is
        <name>.<domain> (a Kubernetes pod's: the name trainlet advertises,
        while the hostname stays short)."""
        self.c = self.netns_cluster(["launcher"] + WORKERS, domain=domain)
        workers = []
        for h in self.c.hosts[1:]:
            sshd = self.wrapper(h, "sshd", "/usr/sbin/sshd")
            workers.append(self.c.start(h, h.name, [
                TRAINLET, "mpi-worker", "--coordinator", "launcher", "--nproc-per-node",
                str(SLOTS), "--sshd", sshd] + self.common(h.name)))
        mpirun = self.wrapper(self.c.hosts[0], "mpirun", "mpirun")
        launcher = self.c.start(self.c.hosts[0], "launcher", [
            TRAINLET, "mpi-launcher", "--nnodes", str(len(WORKERS))] + self.common("launcher") +
            list(launcher_extra) + ["--", mpirun, "-np", str(np), mpi_support.MPI5_PROGRAM, sleep],
            env=env)
        return launcher, workers

    def test_unknown_flavour_sets_prte_variables_ranks_on_every_worker(self):
        launcher, workers = self.start_job(6, [])  # auto: a wrapper script, flavour unknown
        self.assertEqual(launcher.wait(90), 0, self.describe_all())
        problems = mpi_support.check_run(launcher.stdout, 6, hosts=WORKERS)
        self.assertEqual(problems, [], self.describe_all())
        for w in workers:
            self.assertEqual(w.wait(20), 0, self.describe_all())

    def test_launcher_as_node_runs_its_ranks_locally_and_never_sshes_to_itself(self):
        """Kubeflow Trainer #4028: with PRTE_MCA_prte_keep_fqdn_hostnames=1,
        PRRTE compares the hostfile's launcher line (its pod FQDN) with its
        own short hostname as strings (prte_do_not_resolve defaults to true),
        finds no match, and starts a daemon on the launcher over ssh: to a
        host without sshd. Every ssh PRRTE runs goes through a counting
        wrapper (PRTE_MCA_plm_ssh_agent): one per worker, by its FQDN, none
        to the launcher; and the launcher runs no sshd at all."""
        domain = "mpi5.default.svc.cluster.local"
        calls = self.path("ssh-calls")
        agent = self.path("counting-ssh")
        with open(agent, "w") as f:
            f.write('#!/bin/sh\necho "$*" >> %s\nexec /usr/bin/ssh "$@"\n' % shlex.quote(calls))
        os.chmod(agent, 0o755)
        launcher, workers = self.start_job(
            SLOTS + 6, ["--launcher-as-node", "--nproc-per-node", str(SLOTS)], domain=domain,
            env=self.base_env(PRTE_MCA_plm_ssh_agent=agent))
        self.assertEqual(launcher.wait(90), 0, self.describe_all())
        out = launcher.stdout
        self.assertEqual(mpi_support.check_run(out, SLOTS + 6, hosts=["launcher"] + WORKERS),
                         [], self.describe_all())
        ranks = mpi_support.parse_ranks(out)
        self.assertEqual([ranks[r] for r in range(SLOTS)], ["launcher"] * SLOTS, out)
        for w in WORKERS:
            self.assertEqual(len([r for r, h in ranks.items() if h == w]), SLOTS, out)
        with open(calls) as f:
            lines = f.read().splitlines()
        dests = sorted(next(a for a in line.split() if a.endswith(domain)) for line in lines)
        self.assertEqual(dests, sorted("%s.%s" % (w, domain) for w in WORKERS), lines)
        for w in workers:
            self.assertEqual(w.wait(20), 0, self.describe_all())

    def test_silent_single_node_run_is_caught(self):
        # --mpi=openmpi (4): only OMPI_MCA_orte_*, which Open MPI 5 ignores.
        launcher, workers = self.start_job(
            2, ["--mpi", "openmpi", "--placement-timeout", "2s", "--require-placement"],
            sleep="20")
        self.assertEqual(launcher.wait(60), 78, self.describe_all())
        self.assertIn("have seen no MPI session", launcher.stderr)
        for w in WORKERS:
            self.assertIn(w, launcher.stderr)
        for w in workers:
            self.assertNotEqual(w.wait(20), 0, self.describe_all())


if __name__ == "__main__":
    unittest.main()
