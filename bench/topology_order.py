#!/usr/bin/env python3
"""Rank order by topology (docs/topology.md, "Rank order"): 8 netns hosts on
two "switches" joined by one link rate-limited with tc tbf to a tenth of the
hosts' own links, pods interleaved so that pod index order alternates
switches; a real torch gloo all_reduce of a 64 MiB tensor under
--rank-order=index and --rank-order=topology, in the same run. Prints, for
each order, the bus bandwidth (nccl-tests' definition) and the ring's
inter-switch crossings, then one JSON line. Target: topology >= 2x index.

    /usr/bin/python3 bench/topology_order.py [--hosts 8] [--mib 64] [--iters 2]
        [--inter 200mbit] [--intra 2gbit]

Needs root (netns, tc) and Debian's python3-torch; TRAINLET_BIN or
build/trainlet. Exit 1 when the target is missed."""

import argparse
import json
import sys
import tempfile

import benchlib
import netns  # noqa: E402 (e2e/, on the path through benchlib)
import topology_order_support as topo  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--mib", type=float, default=64)
    ap.add_argument("--iters", type=int, default=2)
    ap.add_argument("--inter", default="200mbit", help="the link between the switches")
    ap.add_argument("--intra", default="2gbit", help="each host's own link")
    args = ap.parse_args()

    h = benchlib.BenchHarness(tempfile.mkdtemp(prefix="trainlet-bench-topology-"))
    results = {}
    try:
        cluster = netns.Cluster.create(h, ["h%d" % i for i in range(args.hosts)])
        topo.two_switches(cluster, inter=args.inter, intra=args.intra)
        for port, order in ((29400, "index"), (29410, "topology")):
            results[order] = topo.run_job(h, cluster, order, args.mib, args.iters, port)
    finally:
        h.close()

    print("rank order: %d hosts on 2 switches (link between them %s, hosts' links %s), "
          "gloo all_reduce of %g MiB, %d timed" % (args.hosts, args.inter, args.intra, args.mib,
                                                   args.iters))
    for order in ("index", "topology"):
        r = results[order]
        print("  %-9s busbw %7.1f MB/s  (%.2f s)  ring crossings %d  ranks: %s" %
              (order, r["busbw_bytes_per_s"] / 1e6, r["seconds"], r["crossings"],
               " ".join(r["hosts_by_rank"])))
    ratio = results["topology"]["busbw_bytes_per_s"] / results["index"]["busbw_bytes_per_s"]
    print("  topology / index: %.2fx (target >= 2x)" % ratio)
    print(json.dumps({
        "hosts": args.hosts, "mib": args.mib, "iters": args.iters, "inter": args.inter,
        "intra": args.intra,
        "index_busbw_mbps": round(results["index"]["busbw_bytes_per_s"] / 1e6, 1),
        "topology_busbw_mbps": round(results["topology"]["busbw_bytes_per_s"] / 1e6, 1),
        "index_crossings": results["index"]["crossings"],
        "topology_crossings": results["topology"]["crossings"], "ratio": round(ratio, 2)}))
    return 0 if ratio >= 2 else 1


if __name__ == "__main__":
    sys.exit(main())
