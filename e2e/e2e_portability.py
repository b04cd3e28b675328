"""Portability, proven (issue 10, item 3): the same statically linked trainlet
runs a 2-node job inside Debian 11 (bullseye), 12 (bookworm) and 13 (trixie)
root filesystems made by `debootstrap --variant=minbase` with no package
added, and inside a root that holds nothing but trainlet and its worker.

Each node is a pod-like netns host (e2e/netns.py: its own network and UTS
namespace, address and hostname) whose processes run chrooted into the root
(debian_roots.chroot_prefix: a private mount namespace with /proc, /dev,
/sys, the host's /etc/hosts and a tmpfs /tmp). trainlet is the binary under
test, seen inside the root on the test's shared directory; nothing from this
machine's Debian 12 is visible to it except the kernel.

The workers print the rendezvous variables they got: `/bin/sh` from the root
in the Debian roots (with the root's /etc/debian_version, which proves the
shell is the root's), a `cc -static` program in the empty root. Each job has
2 nodes x 2 workers; the test checks that every worker saw RANK 0..3 once,
WORLD_SIZE 4, LOCAL_RANK and GROUP_RANK matching its node, and one MASTER_ADDR
and MASTER_PORT everywhere, naming node 0's host.

Needs the static binary (skips with the reason otherwise) and root with
network namespaces. The Debian roots come from scripts/debian_root.sh
(cached in /var/cache/trainlet; debootstrap takes 2-10 minutes per release
the first time): a missing root is skipped with the command that builds it,
except under E2E_REQUIRE_ROOTS=1 (the `slow` ctest entry, run after the
roots are built: TRAINLET_SLOW=1 scripts/test.sh), where it fails. The empty
root needs only gcc and the static libc (libc6-dev), so it runs everywhere.
"""

import os
import re
import shutil
import subprocess
import unittest

import debian_roots
from harness import E2ETestCase, TRAINLET, WORKERS

COORDINATOR_PORT = 29400
MASTER_PORT = 29500
NPROC = 2
NNODES = 2
VARS = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT"]

# The Debian roots' worker: the same line as workers/env_line.c, plus the
# root's Debian version; the hostname is read from /proc (minbase need not
# have hostname(1)). One printf: one write, so that the node's two workers'
# lines cannot interleave on the agent's stdout.
SHELL_WORKER = ('l=worker; for v in %s; do eval "x=\\${$v:--}"; l="$l $v=$x"; done; '
                'printf "%%s host=%%s debian=%%s\\n" "$l" "$(cat /proc/sys/kernel/hostname)" '
                '"$(cat /etc/debian_version)"' % " ".join(VARS))

_LINE_RE = re.compile(r"worker ((?:[A-Z_]+=\S+ )+)host=(\S+)(?: debian=(\S+))?")


def parse_worker_lines(text):
    """[{var: value, "host": h, "debian": version or None}] from the
    workers' lines in `text` (an agent's output)."""
    rows = []
    for m in _LINE_RE.finditer(text):
        row = dict(kv.split("=", 1) for kv in m.group(1).split())
        row["host"] = m.group(2)
        row["debian"] = m.group(3)
        rows.append(row)
    return rows


class PortabilityCase(E2ETestCase):

    def setUp(self):
        super().setUp()
        debian_roots.require_static(TRAINLET)
        # The binary as the root sees it: on the test's directory, which
        # chroot_prefix mounts on each host's /tmp (a hard link where the
        # filesystem allows it, else a copy).
        os.makedirs(self.path("bin"))
        self.bin = self.path("bin", "trainlet")
        try:
            os.link(os.path.realpath(TRAINLET), self.bin)
        except OSError:
            shutil.copy2(TRAINLET, self.bin)

    def run_job(self, root, worker_argv, timeout=60):
        """Runs a 2-node job with `worker_argv` as COMMAND, every node on its
        own netns host chrooted into `root`; returns {node: rows}."""
        cluster = self.netns_cluster(["node-0", "node-1"])
        agents = []
        for i, h in enumerate(cluster.hosts):
            argv = [self.bin, "run", "--nnodes=%d" % NNODES, "--node-rank=%d" % i,
                    "--node-id=%s" % h.name,
                    "--coordinator=%s:%d" % (cluster.hosts[0].name, COORDINATOR_PORT),
                    "--master-port=%d" % MASTER_PORT, "--nproc-per-node=%d" % NPROC,
                    "--job-id=portability", "--join-timeout=%ds" % timeout, "--"]
            argv += list(worker_argv)
            agents.append(self.start(
                "node%d" % i, argv,
                prefix=debian_roots.chroot_prefix(h, root, [self.dir])))
            cluster.procs.append(agents[-1])
        self.assert_codes(agents, [0] * NNODES, timeout=timeout)
        rows = {i: parse_worker_lines(a.stdout) for i, a in enumerate(agents)}
        self.check_contract(cluster, rows)
        self.assert_no_leftovers()
        return rows

    def check_contract(self, cluster, rows):
        listing = "\n".join("node %d: %s" % (n, r) for n in sorted(rows) for r in rows[n])
        everyone = [r for n in sorted(rows) for r in rows[n]]
        self.assertEqual(len(everyone), NNODES * NPROC,
                         "expected %d worker lines\n%s\n%s" % (
                             NNODES * NPROC, listing, self.describe_all()))
        self.assertEqual(sorted(int(r["RANK"]) for r in everyone),
                         list(range(NNODES * NPROC)), listing)
        for node, node_rows in rows.items():
            self.assertEqual(sorted(int(r["LOCAL_RANK"]) for r in node_rows),
                             list(range(NPROC)), listing)
            for r in node_rows:
                self.assertEqual(r["WORLD_SIZE"], str(NNODES * NPROC), listing)
                self.assertEqual(r["GROUP_RANK"], str(node), listing)
                self.assertEqual(r["host"], cluster.hosts[node].name, listing)
                self.assertEqual(int(r["RANK"]), node * NPROC + int(r["LOCAL_RANK"]), listing)
        masters = {(r["MASTER_ADDR"], r["MASTER_PORT"]) for r in everyone}
        self.assertEqual(len(masters), 1, "workers disagree on the master:\n" + listing)
        addr, port = masters.pop()
        self.assertEqual(port, str(MASTER_PORT), listing)
        self.assertIn(addr, (cluster.hosts[0].name, cluster.hosts[0].addr),
                      "MASTER_ADDR must name node 0's host:\n" + listing)


class EmptyRootTest(PortabilityCase):
    """The short version (default run): no library and no file at all."""

    def test_two_nodes_in_a_root_with_nothing_but_trainlet(self):
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            raise unittest.SkipTest("no C compiler (apt-get install gcc libc6-dev)")
        worker = self.path("bin", "env_line")
        r = subprocess.run([cc, "-static", "-O2", "-o", worker,
                            os.path.join(WORKERS, "env_line.c")],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                           timeout=120)
        if r.returncode != 0:
            raise unittest.SkipTest("cannot build a static worker (libc6-dev's libc.a?): "
                                    + r.stdout[-500:])
        root = debian_roots.make_empty_root(self.path("root"))
        self.assertEqual(sorted(os.listdir(root)), ["dev", "etc", "proc", "sys", "tmp"])
        self.run_job(root, [worker])


class DebianRootsTest(PortabilityCase):
    """Debian 11, 12 and 13 minbase roots, each with the same binary."""

    def check_release(self, release):
        root = debian_roots.root(release)
        rows = self.run_job(root, ["/bin/sh", "-c", SHELL_WORKER])
        versions = {r["debian"] for n in rows for r in rows[n]}
        self.assertEqual(len(versions), 1, versions)
        version = versions.pop()
        want = debian_roots.RELEASES[release]
        # A release's /etc/debian_version is "12.8" once released, and
        # "trixie/sid" while it is testing.
        self.assertTrue(version.split(".")[0] == want or version.startswith(release),
                        "the workers' shell is not %s's: /etc/debian_version says %r"
                        % (release, version))

    def test_debian_11_bullseye(self):
        self.check_release("bullseye")

    def test_debian_12_bookworm(self):
        self.check_release("bookworm")

    def test_debian_13_trixie(self):
        self.check_release("trixie")


if __name__ == "__main__":
    unittest.main()
