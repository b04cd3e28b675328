"""Rank order by topology (docs/topology.md, "Rank order"), end to end: the
benchmark's layout (bench/topology_order.py) at a small size. 8 netns hosts
on two switches joined by one tc-limited link (a tenth of the hosts' own),
pod indices interleaved so that index order alternates switches; a real
torch gloo all_reduce under --rank-order=index and then under the default
order with each pod's switch in a downward API labels file.

What is asserted, and why: the ring's inter-switch crossings are exact (8 in
index order, 2 in topology order: the ranks the coordinator gave), and every
node's log states the order and the neighbours sharing the switch. The
bandwidth only has to be 1.3x better (theory: 4x, the four flows that shared
the slow link in index order get it one each): on a loaded 2-core machine
eight torch workers' CPU time is noise in the timings, and a figure that
failed once under load would be a flaky test. The benchmark holds the 2x
target."""

import shutil
import unittest

import harness
import topology_order_support as topo


@unittest.skipUnless(shutil.which("tc"), "needs tc (iproute2)")
class TopologyOrderTest(harness.E2ETestCase):
    def test_topology_order_keeps_the_ring_in_its_switch(self):
        cluster = self.netns_cluster(["h%d" % i for i in range(8)])
        topo.two_switches(cluster, inter="50mbit", intra="500mbit")
        index = topo.run_job(self, cluster, "index", mib=4, iters=1, port=29400, timeout=120)
        auto = topo.run_job(self, cluster, "auto", mib=4, iters=1, port=29410, timeout=120,
                            labels_file=True)
        self.assertEqual(index["hosts_by_rank"], ["h%d" % i for i in range(8)])
        self.assertEqual(index["crossings"], 8)
        self.assertEqual(auto["hosts_by_rank"], ["h0", "h2", "h4", "h6", "h1", "h3", "h5", "h7"])
        self.assertEqual(auto["crossings"], 2)
        self.assertIn("ranks in index order: 8 node(s) ask for --rank-order=index",
                      index["agent_logs"])
        self.assertIn("ranks by topology: 8 node(s) sent their domains", auto["agent_logs"])
        self.assertIn(topo.LEAF_LABEL + " 6/8", auto["agent_logs"])
        self.assertIn("switch 0/8", index["agent_logs"])
        ratio = auto["busbw_bytes_per_s"] / index["busbw_bytes_per_s"]
        self.assertGreaterEqual(ratio, 1.3, "topology %.1f MB/s, index %.1f MB/s" % (
            auto["busbw_bytes_per_s"] / 1e6, index["busbw_bytes_per_s"] / 1e6))


if __name__ == "__main__":
    unittest.main()
