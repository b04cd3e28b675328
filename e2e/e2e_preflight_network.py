"""End-to-end: --preflight's network measurement inside real rounds
(docs/preflight.md, "The network"), through `trainlet run` agents on five
pod-like hosts (e2e/netns.py). Every host's veth is capped with a tc tbf
qdisc; h2's is then capped to a tenth, both ways:
  - warn: the job runs on all five; every node logs the coordinator's line
    naming h2 (and no other) for its network;
  - exclude (elastic 4:5): the round closes without h2 before any worker
    starts, h2 never starts one while it is slow, and once its limit is
    lifted it comes back at the next check (--quarantine) and joins by a
    scale-up;
  - fail: every node exits 82, naming h2 and the network.

Skipped where network namespaces or tc are not available (needs root)."""

import os
import re
import shutil
import unittest

import harness
import preflight_ring
from harness import E2ETestCase, PY, poll_until

NAMES = ["h0", "h1", "h2", "h3", "h4"]
GOOD = ("200mbit", "64kb")
SLOW = ("20mbit", "16kb")  # a tenth
COORDINATOR_PORT = 29400
MASTER_PORT = 29500

# Runs until $E2E_DIR/release exists (at most 90 s), then exits 0.
HOLD = [PY, "-c", "import os, time\n"
        "d = os.environ['E2E_DIR']\n"
        "end = time.time() + 90\n"
        "while time.time() < end and not os.path.exists(os.path.join(d, 'release')):\n"
        "    time.sleep(0.05)\n"]

NAMED_H2 = re.compile(r"preflight \(the coordinator\): node h2: network: ")
NAMED_ANY = re.compile(r"preflight \(the coordinator\): node (\S+): network: ")


@unittest.skipUnless(shutil.which("tc"), "needs tc (iproute2)")
class PreflightNetworkRoundTest(E2ETestCase):

    def cluster(self):
        cluster = self.netns_cluster(NAMES)
        for h in cluster.hosts:
            preflight_ring.rate_limit(cluster, h, *GOOD, ingress=False)
        preflight_ring.rate_limit(cluster, cluster.hosts[2], *SLOW)
        return cluster

    def job(self, cluster, policy, nnodes="5", extra=(), per_host=None):
        agents = []
        for i, h in enumerate(cluster.hosts):
            args = ["--nnodes=%s" % nnodes, "--node-id=%s" % h.name,
                    "--coordinator=%s:%d" % (NAMES[0], COORDINATOR_PORT),
                    "--master-port=%d" % MASTER_PORT, "--nproc-per-node=1",
                    "--job-id=net", "--join-timeout=60s", "--preflight=%s" % policy]
            if ":" not in nnodes:
                args.append("--node-rank=%d" % i)
            args += list(extra) + list((per_host or {}).get(h.name, ()))
            agents.append(cluster.start(h, h.name, [harness.TRAINLET, "run"] + args + ["--"]
                                        + HOLD))
        return agents

    def release(self):
        with open(self.path("release"), "w"):
            pass

    def test_warn_every_node_names_the_slow_host_and_only_it(self):
        cluster = self.cluster()
        agents = self.job(cluster, "warn")
        poll_until(lambda: all(NAMED_H2.search(a.stderr) for a in agents), 60,
                   what="every node names h2\n" + self.describe_all())
        for a in agents:
            self.assertIn("started worker", a.stderr, a.describe())
            self.assertEqual(set(NAMED_ANY.findall(a.stderr)), {"h2"}, a.describe())
        self.assertRegex(agents[0].stderr, r"4 of its 4 measured links are bad")
        self.release()
        self.assert_codes(agents, [0] * 5, timeout=60)
        self.assert_no_leftovers()

    def test_exclude_runs_on_four_and_the_host_rejoins_once_its_link_is_fixed(self):
        cluster = self.cluster()
        agents = self.job(cluster, "exclude", nnodes="4:5",
                          extra=["--quarantine=2s", "--last-call=3s"])
        slow = agents[2]
        others = agents[:2] + agents[3:]
        poll_until(lambda: all("started worker" in a.stderr for a in others), 60,
                   what="the four good hosts running\n" + self.describe_all())
        poll_until(lambda: "left out of the round" in slow.stderr, 30,
                   what="h2 left out\n" + slow.describe())
        self.assertRegex(slow.stderr, r"left out of the round \(--preflight=exclude\): network: ")
        self.assertNotIn("started worker", slow.stderr, slow.describe())
        for a in others:
            self.assertRegex(a.stderr, r"world size 4|WORLD_SIZE=4|nnodes=4|4 nodes",
                             a.describe())
        # Back after its quarantine, still slow: measured against the running
        # hosts before it may scale the job up, and left out again. The four
        # never restart for it.
        poll_until(lambda: slow.stderr.count("left out of the round") >= 3, 60,
                   what="h2 left out again after its quarantines\n" + slow.describe())
        for a in others:
            self.assertEqual(a.stderr.count("started worker"), 1, a.describe())
        # Fixed: at its next check it passes and joins the job (a scale-up).
        preflight_ring.rate_limit(cluster, cluster.hosts[2], *GOOD)
        poll_until(lambda: "started worker" in slow.stderr, 60,
                   what="h2 back in the job\n" + self.describe_all())
        self.release()
        self.assert_codes(agents, [0] * 5, timeout=60)
        self.assert_no_leftovers()

    def test_fail_every_node_exits_82_naming_the_host_and_the_network(self):
        cluster = self.cluster()
        agents = self.job(cluster, "fail")
        self.assert_codes(agents, [82] * 5, timeout=60)
        for a in agents:
            self.assertIn("preflight: node h2 failed network", a.stderr, a.describe())
            self.assertNotIn("started worker", a.stderr, a.describe())
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
