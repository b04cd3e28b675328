"""End-to-end: the preflight link measurer (preflight/) between five
pod-like hosts (e2e/netns.py), one of them behind a slower link.

Every host's veth is capped with a tc tbf qdisc (what it sends), so the
figures come from the links and not from how busy this machine's CPUs are;
the slow host's veth is capped to a tenth, both ways. The measurer, the
ring plan and the analysis are the real C++ code, driven through
preflight_net_tool (e2e/preflight_ring.py).

Skipped where network namespaces or tc are not available (needs root)."""

import shutil
import unittest

import harness
import preflight_ring
from harness import E2ETestCase

HOSTS = ["h0", "h1", "h2", "h3", "h4"]
GOOD = ("200mbit", "64kb")
SLOW = ("20mbit", "16kb")  # a tenth


@unittest.skipUnless(preflight_ring.tool_available(),
                     "no preflight_net_tool (set PREFLIGHT_NET_TOOL)")
@unittest.skipUnless(shutil.which("tc"), "needs tc (iproute2)")
class PreflightNetworkTest(E2ETestCase):

    def ring(self, max_ms):
        cluster = self.netns_cluster(HOSTS)
        for h in cluster.hosts:
            preflight_ring.rate_limit(cluster, h, *GOOD, ingress=False)
        ring = preflight_ring.MeasurerRing(
            self, [(h.name, h.addr, cluster.prefix(h)) for h in cluster.hosts], max_ms=max_ms)
        self.addCleanup(ring.close)
        return cluster, ring

    def test_only_the_rate_limited_host_is_named_and_a_healthy_ring_never(self):
        cluster, ring = self.ring(max_ms=100)
        # Healthy: 50 rounds, each a new ring order; nobody is ever named.
        for rnd in range(1, 51):
            links, done = ring.round(rnd)
            self.assertEqual(len(links), 10, links)
            self.assertTrue(all(not l.get("error") for l in links), links)
            verdict = ring.analyze(links)
            self.assertEqual(verdict["flagged"], [], "round %d: %s" % (rnd, verdict))
        # h2's veth at a tenth of the others', both ways: h2 and only h2.
        slow = cluster.hosts[2]
        preflight_ring.rate_limit(cluster, slow, *SLOW)
        for rnd in range(51, 56):
            links, _ = ring.round(rnd)
            verdict = ring.analyze(links)
            named = [f["node"] for f in verdict["flagged"]]
            self.assertEqual(named, ["h2"], "round %d: %s\n%s" % (rnd, verdict, links))
            self.assertEqual(verdict["unattributed"], [], verdict)
            self.assertIn("4 of its 4 measured links are bad", verdict["flagged"][0]["reason"])

    def test_bytes_per_node_stay_within_the_budget(self):
        _, ring = self.ring(max_ms=None)  # the defaults: 16 MiB, 250 ms a link.
        links, done = ring.round(1)
        for l in links:
            self.assertLessEqual(int(l["total_bytes"]), 16 << 20, l)
            self.assertEqual(l["samples"], 3, l)
            self.assertLessEqual(l["seconds"], 0.25 + 1.0, l)  # a late wake-up, not more.
        _, totals = ring.round(0)  # measures nothing: what each server took in all.
        for name in done:
            # 64 MiB a node: two links out, two in.
            self.assertLessEqual(done[name]["sent"], 32 << 20, (name, done[name]))
            self.assertLessEqual(totals[name]["received"], 32 << 20, (name, totals[name]))
            self.assertGreater(totals[name]["received"], 0, (name, totals[name]))


if __name__ == "__main__":
    unittest.main()
