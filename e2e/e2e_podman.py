"""The container images of images/, built and run for real with rootful
podman (issue 10, item 5). scripts/images.sh builds them from a Debian
bookworm base made by debootstrap (no registry is reachable here) and the
static binary under test (TRAINLET_BIN); e2e/podman_support.py names every
container, network and volume per test and removes them.

ScratchImageTest (the default run; only the FROM scratch image, seconds to
build): trainlet is PID 1 of the container, `podman stop` reaches its worker
and the container stops before podman's timeout, and the worker's exit code
comes back through `podman run`.

ImagesTest (labels podman and slow: the torch image's apt layer takes a few
minutes the first time, then is cached): the torch image's ENTRYPOINT with
options from TRAINLET_* variables, exit code and `podman stop` reaching every
worker's trap; a 2-container torch DDP job over a podman network; a
1 + 2-container Open MPI job; the init-container pattern (the binary
installed from the trainlet image into a volume and run from the bare
bookworm base as an unprivileged user).

Skipped with the reason when podman or runc is missing (scripts/images.sh
--install-podman), when not root, or when the binary is not static.
"""

import os
import re
import shutil
import time
import unittest

import mpi_support
import podman_support
from harness import E2ETestCase

# podman stop's timeout: longer than the grace period the containers get, so
# a stop that takes it all means trainlet did not stop its workers itself.
STOP_TIMEOUT = 20
GRACE = "5s"


def setUpModule():
    if podman_support.unsupported_reason() is None:
        podman_support.snapshot_firewall()


def tearDownModule():
    if podman_support.unsupported_reason() is None:
        print("\n(podman firewall: %s)" % podman_support.restore_firewall())


def ns_pids(pid):
    """The NSpid line of /proc/<pid>/status: the pid in each PID namespace,
    outermost first."""
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("NSpid:"):
                return [int(p) for p in line.split()[1:]]
    raise AssertionError("no NSpid line for pid %d" % pid)


def cmdline(pid):
    with open("/proc/%d/cmdline" % pid, "rb") as f:
        return [a.decode(errors="replace") for a in f.read().split(b"\0") if a]


def children(pid):
    with open("/proc/%d/task/%d/children" % (pid, pid)) as f:
        return [int(p) for p in f.read().split()]


def fail_after_both_printed(code):
    """Shell for the end of a 2-worker command: rank 1 exits 0, rank 0 exits
    `code` once rank 1 has printed (at most 10 s later), so that trainlet's
    fail-fast stop cannot cut rank 1's line off."""
    return ('if [ "$RANK" = 0 ]; then i=0; while [ ! -e /tmp/printed-1 ] && [ $i -lt 100 ]; '
            'do sleep 0.1; i=$((i+1)); done; exit %d; fi; : > /tmp/printed-1' % code)


class PodmanCase(E2ETestCase):

    def setUp(self):
        super().setUp()
        podman_support.require_podman()
        self.pm = podman_support.Podman(self)

    def assert_stops_in_time(self, container):
        """podman stop -t STOP_TIMEOUT; returns (seconds it took, exit code)."""
        started = time.monotonic()
        r = podman_support.podman(["stop", "-t", str(STOP_TIMEOUT), container],
                                  timeout=STOP_TIMEOUT + 30)
        took = time.monotonic() - started
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertLess(took, STOP_TIMEOUT - 5,
                        "podman stop took %.1f s: trainlet did not stop its workers within "
                        "its grace period, podman's SIGKILL did\n%s"
                        % (took, self.pm.logs(container)[-3000:]))
        return took, int(self.pm.inspect(container, "{{.State.ExitCode}}"))


class ScratchImageTest(PodmanCase):
    """The FROM scratch image: /trainlet only, its own worker."""

    def setUp(self):
        super().setUp()
        self.image = podman_support.images(["trainlet"], timeout=300)["trainlet"]

    def test_trainlet_is_pid1_and_podman_stop_reaches_the_worker(self):
        # The worker: a standalone coordinator (a server that runs until
        # signalled; the image has no other program).
        c = self.pm.run_detached(
            "pid1", ["--network=none", "-e", "TRAINLET_GRACE_PERIOD=" + GRACE], self.image,
            ["run", "--", "/trainlet", "coordinator", "--port=29555"])
        pid = int(self.pm.inspect(c, "{{.State.Pid}}"))
        self.assertEqual(ns_pids(pid)[-1], 1, "trainlet is not PID 1 in its container")
        self.assertEqual(cmdline(pid)[:2], ["/trainlet", "run"])
        workers = []
        deadline = time.monotonic() + 15
        while not workers and time.monotonic() < deadline:
            workers = [w for w in children(pid) if "coordinator" in cmdline(w)]
            time.sleep(0.05)
        self.assertEqual(len(workers), 1, "no worker under trainlet\n" + self.pm.logs(c))
        worker = workers[0]
        self.assertNotEqual(ns_pids(worker)[-1], 1)
        took, code = self.assert_stops_in_time(c)
        logs = self.pm.logs(c)
        self.assertFalse(os.path.exists("/proc/%d" % worker), "the worker outlived the stop")
        # The worker (the coordinator) exits 0 on SIGTERM: the stop is clean.
        self.assertIn("stopping 1 worker(s)", logs)
        self.assertEqual(code, 143, "trainlet stopped by SIGTERM exits 128+15\n" + logs)

    def test_worker_exit_code_passes_through_podman_run(self):
        cases = [
            (["run", "--", "/trainlet", "version"], 0),
            # `trainlet health` of a closed port exits 1: the worker's code.
            (["run", "--", "/trainlet", "health", "127.0.0.1:1"], 1),
            (["run", "--", "/no/such/worker"], 127),
        ]
        for i, (command, want) in enumerate(cases):
            r = self.pm.run("code%d" % i, ["--rm", "--network=none"], self.image, command)
            self.assertEqual(r.returncode, want, "%s\n%s%s" % (command, r.stdout, r.stderr))


class ImagesTest(PodmanCase):
    """The torch, mpi and trainlet images on the debootstrap base."""

    def setUp(self):
        super().setUp()
        self.images = podman_support.images(["base", "trainlet", "torch", "mpi"], timeout=1500)
        os.makedirs(self.path("out"))

    def test_torch_entrypoint_options_from_env_pid1_and_exit_code(self):
        # ENTRYPOINT ["trainlet", "run", "--"]: the command is the worker,
        # options come from TRAINLET_* variables.
        r = self.pm.run("entry", ["--rm", "--network=none", "-e", "TRAINLET_NPROC_PER_NODE=2"],
                        self.images["torch"],
                        ["sh", "-c", 'echo "rank $RANK/$WORLD_SIZE pid1=$(tr "\\0" " " '
                         '</proc/1/cmdline)"; ' + fail_after_both_printed(7)])
        self.assertEqual(r.returncode, 7, r.stdout + r.stderr)
        lines = sorted(re.findall(r"^rank (\d)/(\d) pid1=(.*)$", r.stdout, re.M))
        self.assertEqual([(a, b) for a, b, _ in lines], [("0", "2"), ("1", "2")], r.stdout)
        self.assertTrue(lines[0][2].startswith("/usr/local/bin/trainlet run -- sh -c"), lines)

    def test_podman_stop_reaches_every_worker_of_the_torch_image(self):
        worker = ('trap "echo TERM > /out/term-$RANK; exit 0" TERM; : > /out/ready-$RANK; '
                  'while :; do sleep 0.1; done')
        c = self.pm.run_detached(
            "stop", ["--network=none", "-v", "%s:/out" % self.path("out"),
                     "-e", "TRAINLET_NPROC_PER_NODE=2", "-e", "TRAINLET_GRACE_PERIOD=" + GRACE],
            self.images["torch"], ["sh", "-c", worker])
        self.wait_for_files(["out/ready-0", "out/ready-1"], 30)
        took, code = self.assert_stops_in_time(c)
        for rank in (0, 1):
            self.assertTrue(os.path.exists(self.path("out", "term-%d" % rank)),
                            "worker %d got no SIGTERM\n%s" % (rank, self.pm.logs(c)))
        self.assertEqual(code, 143, self.pm.logs(c))

    def test_torch_ddp_two_containers_over_a_podman_network(self):
        net = self.pm.network("net")
        nodes = [self.pm.name("node-%d" % i) for i in range(2)]
        containers = []
        for i, name in enumerate(nodes):
            containers.append(self.pm.run_detached(
                "node-%d" % i,
                ["--network", net, "--hostname", name, "--shm-size=256m",
                 "-e", "TRAINLET_NNODES=2", "-e", "TRAINLET_NODE_RANK=%d" % i,
                 "-e", "TRAINLET_NPROC_PER_NODE=2", "-e", "TRAINLET_JOB_ID=ddp",
                 "-e", "TRAINLET_COORDINATOR=%s:29400" % nodes[0],
                 "-e", "TRAINLET_JOIN_TIMEOUT=60s"],
                self.images["torch"], ["python3", "/app/train.py", "--steps=5"]))
        codes = [self.pm.wait(c, 180) for c in containers]
        logs = [self.pm.logs(c) for c in containers]
        self.assertEqual(codes, [0, 0], "\n".join(logs)[-6000:])
        ranks = sorted(int(m) for text in logs for m in re.findall(r"^rank (\d)/4 ", text, re.M))
        self.assertEqual(ranks, [0, 1, 2, 3], "\n".join(logs)[-6000:])
        self.assertIn("done: w=", logs[0])
        self.assertIn("master %s:" % nodes[0], logs[1])

    def test_mpi_one_launcher_two_worker_containers(self):
        program = mpi_support.build_mpi_program("openmpi")  # Debian 12's = the image's
        shared = self.path("mpi")
        os.makedirs(shared)
        shutil.copy2(program, os.path.join(shared, "mpi_allreduce"))
        with open(os.path.join(shared, "token"), "w") as f:
            f.write("e2e-podman-mpi\n")
        net = self.pm.network("net")
        launcher = self.pm.name("launcher")
        workers = [self.pm.name("w%d" % i) for i in range(2)]
        common = ["--network", net, "-v", "%s:/e2e:ro" % shared, "--shm-size=256m"]
        flags = ["--job-id=mpi", "--token-file=/e2e/token", "--grace-period=" + GRACE]
        started = [self.pm.run_detached(
            "w%d" % i, common + ["--hostname", w], self.images["mpi"],
            ["mpi-worker", "--coordinator=" + launcher, "--nproc-per-node=2"] + flags)
            for i, w in enumerate(workers)]
        started.insert(0, self.pm.run_detached(
            "launcher", common + ["--hostname", launcher], self.images["mpi"],
            ["mpi-launcher", "--nnodes=2"] + flags +
            ["--", "mpirun", "-np", "4", "/e2e/mpi_allreduce"]))
        codes = [self.pm.wait(c, 180) for c in started]
        logs = {c: self.pm.logs(c) for c in started}
        everything = "\n".join("=== %s\n%s" % (c, t[-3000:]) for c, t in logs.items())
        self.assertEqual(codes, [0, 0, 0], everything)
        problems = mpi_support.check_run(logs[started[0]], 4, hosts=workers)
        self.assertEqual(problems, [], everything)

    def test_init_container_pattern_binary_from_a_volume_in_another_image(self):
        vol = self.pm.volume("bin")
        r = self.pm.run("install", ["--rm", "--network=none", "-v", vol + ":/opt/trainlet"],
                        self.images["trainlet"], ["install", "/opt/trainlet/trainlet"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("installed /opt/trainlet/trainlet", r.stdout)
        # The bare debootstrap base, which has no trainlet, as nobody.
        base = self.images["base"]
        probe = self.pm.run("probe", ["--rm", "--network=none"], base,
                            ["sh", "-c", "command -v trainlet || echo none"])
        self.assertEqual(probe.stdout.strip(), "none", probe.stdout + probe.stderr)
        r = self.pm.run("train", ["--rm", "--network=none", "--user=65534:65534",
                                  "-v", vol + ":/trainlet:ro", "-e", "TRAINLET_NPROC_PER_NODE=2"],
                        base, ["/trainlet/trainlet", "run", "--", "sh", "-c",
                               'echo "rank $RANK/$WORLD_SIZE uid $(id -u)"; ' +
                               fail_after_both_printed(3)])
        self.assertEqual(r.returncode, 3, r.stdout + r.stderr)
        self.assertEqual(sorted(re.findall(r"^rank (\d/\d) uid (\d+)$", r.stdout, re.M)),
                         [("0/2", "65534"), ("1/2", "65534")], r.stdout + r.stderr)


if __name__ == "__main__":
    unittest.main()
