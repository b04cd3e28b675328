"""End-to-end: the release binary (TRAINLET_STATIC, the default build).

`trainlet version` names its linkage and protocol; a static trainlet resolves
the coordinator's name with c-ares even where nsswitch.conf names modules a
static glibc cannot load (many training images list mdns, systemd, sss...):
glibc's own resolver would be asked to load them. The agent runs in a private
mount namespace with its own nsswitch.conf and /etc/hosts."""

import re
import subprocess
import unittest

import harness
from harness import E2ETestCase

NAME = "coordinator.trainlet-static-e2e.invalid"
# Modules no Debian 12 root has, in front of the ones static glibc has built
# in: each lookup first asks for libnss_<module>.so.2.
NSSWITCH = ("passwd: trainletabsent files\n"
            "group: trainletabsent files\n"
            "hosts: mdns4_minimal [NOTFOUND=return] trainletabsent files dns\n")


def version_fields():
    out = subprocess.run([harness.TRAINLET, "version"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=10)
    fields = {}
    for line in out.stdout.splitlines()[1:]:
        key, _, value = line.partition(": ")
        fields[key] = value
    return out, fields


def is_static_build():
    return version_fields()[1].get("linkage") == "static"


def mount_namespaces_supported():
    try:
        return subprocess.run(["unshare", "--mount", "true"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class VersionTest(E2ETestCase):

    def test_version_names_commit_build_linkage_and_protocol(self):
        out, fields = version_fields()
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertRegex(out.stdout.splitlines()[0], r"^trainlet \d+\.\d+\.\d+$")
        self.assertRegex(fields.get("git commit", ""), r"^([0-9a-f]{7,40}|unknown)$")
        self.assertTrue(fields.get("build type"), out.stdout)
        self.assertIn(fields.get("linkage"), ("static", "dynamic"), out.stdout)
        self.assertRegex(fields.get("protocol version", ""), r"^[1-9]\d*$")


@unittest.skipUnless(is_static_build(), "TRAINLET_BIN is not a static build")
@unittest.skipUnless(mount_namespaces_supported(), "needs `unshare --mount` (root)")
class StaticResolverTest(E2ETestCase):

    def test_joins_by_name_when_nsswitch_names_modules_static_glibc_lacks(self):
        port, master_port = harness.free_ports(2)
        hosts = self.path("hosts")
        with open(hosts, "w") as f:
            f.write("127.0.0.1 localhost\n127.0.0.1 %s\n" % NAME)
        nsswitch = self.path("nsswitch.conf")
        with open(nsswitch, "w") as f:
            f.write(NSSWITCH)
        common = ["--nnodes=2", "--health-port=0", "--nproc-per-node=1",
                  "--master-port=%d" % master_port, "--job-id=static-dns", "--join-timeout=30s"]
        node0 = self.start_agent(
            common + ["--node-rank=0", "--node-id=n0", "--coordinator=127.0.0.1:%d" % port],
            ["true"], name="node0")
        # A user's GRPC_DNS_RESOLVER=native would send gRPC to glibc: the
        # static build says it ignores it.
        env = self.base_env(GRPC_DNS_RESOLVER="native")
        node1 = self.start_agent(
            common + ["--node-rank=1", "--node-id=n1", "--coordinator=%s:%d" % (NAME, port)],
            ["true"], name="node1", env=env,
            prefix=["unshare", "--mount", "sh", "-c",
                    'mount --bind "$0" /etc/hosts && mount --bind "$1" /etc/nsswitch.conf '
                    '&& shift && exec "$@"', hosts, nsswitch])
        self.assert_codes([node0, node1], [0, 0], timeout=60)
        self.assertIn("ignoring GRPC_DNS_RESOLVER=native", node1.stderr, node1.describe())
        self.assertTrue(re.search(r"joining job static-dns at %s:%d" % (re.escape(NAME), port),
                                  node1.stderr), node1.describe())


if __name__ == "__main__":
    unittest.main()
