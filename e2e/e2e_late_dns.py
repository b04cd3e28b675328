"""End-to-end: the coordinator's name resolves late. In Kubernetes a pod's DNS
record can appear tens of seconds after the pod starts; the agent must notice
the name within about a second of it appearing, not after gRPC's resolver
backoff (which grows to minutes). The agent runs in a private mount namespace
with its own /etc/hosts, to which the test adds the name later."""

import subprocess
import time
import unittest

import harness
from harness import E2ETestCase

NAME = "late-coordinator.trainlet-e2e.invalid"


def mount_namespaces_supported():
    try:
        return subprocess.run(["unshare", "--mount", "true"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


@unittest.skipUnless(mount_namespaces_supported(), "needs `unshare --mount` (root)")
class LateDnsTest(E2ETestCase):

    def test_joins_within_a_second_of_the_name_appearing(self):
        port, master_port = harness.free_ports(2)
        hosts = self.path("hosts")
        with open(hosts, "w") as f:
            f.write("127.0.0.1 localhost\n")
        common = ["--nnodes=2", "--health-port=0", "--nproc-per-node=1",
                  "--master-port=%d" % master_port, "--job-id=late-dns", "--join-timeout=60s"]
        # Node 1 sees only our hosts file; the name does not resolve yet.
        node1 = self.start_agent(
            common + ["--node-rank=1", "--node-id=n1", "--coordinator=%s:%d" % (NAME, port)],
            ["true"], name="node1",
            prefix=["unshare", "--mount", "sh", "-c",
                    'mount --bind "$0" /etc/hosts && exec "$@"', hosts])
        harness.poll_until(lambda: "not reachable yet" in node1.stderr or not node1.running(),
                           10, what="node 1 to report the name does not resolve")
        self.assertIn("DNS", node1.stderr, node1.describe())
        # Let gRPC's resolver back off for a while, as it would in a pod.
        time.sleep(10)
        node0 = self.start_agent(
            common + ["--node-rank=0", "--node-id=n0", "--coordinator=127.0.0.1:%d" % port],
            ["true"], name="node0")
        harness.poll_until(lambda: "listening" in node0.stderr, 10, what="the coordinator")
        with open(hosts, "a") as f:
            f.write("127.0.0.1 %s\n" % NAME)
        appeared = time.monotonic()
        self.assert_codes([node0, node1], [0, 0], timeout=30)
        joined = node1.ended - appeared
        self.assertLess(joined, 2.5, "node 1 finished %.1fs after its coordinator's name "
                        "appeared\n%s" % (joined, self.describe_all()))


if __name__ == "__main__":
    unittest.main()
