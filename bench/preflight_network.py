#!/usr/bin/env python3
"""The preflight link measurer's figures (preflight/, docs/preflight.md): N
hosts, each a network namespace of its own (e2e/netns.py) or all on
loopback, each running `preflight_net_tool serve`; every round, every host
measures its two targets of the ring plan at once, as agents do before a
round. Prints, over the rounds: the wall time of a round (the driver's
clock, from telling every host to the last host done), the bytes each node
sent (acknowledged by its peers) and took in, the links' bandwidth and round
trip, and how often the analysis named a node (a healthy set: never).

    /usr/bin/python3 bench/preflight_network.py [--hosts 8] [--rounds 50]
        [--loopback] [--tool build/preflight/preflight_net_tool]
        [--max-bytes N] [--max-ms MS] [--record FILE]

--record writes every round's LinkResults (a line "round N", then one JSON
LinkResult a line): preflight/testdata/healthy_links.jsonl is such a file.
Needs root for the netns hosts (--loopback does not). Prints a table and one
JSON line."""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time

import benchlib
from benchlib import ROOT
import netns  # noqa: E402 (e2e/, on the path through benchlib)
import preflight_ring  # noqa: E402


def pct(values, q):
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=50)
    ap.add_argument("--loopback", action="store_true", help="every host on 127.0.0.1 (no root)")
    ap.add_argument("--tool", default=os.path.join(ROOT, "build", "preflight",
                                                   "preflight_net_tool"))
    ap.add_argument("--max-bytes", type=int, default=None, help="per link (default 16 MiB)")
    ap.add_argument("--max-ms", type=int, default=None, help="per link (default 250)")
    ap.add_argument("--record", default=None)
    args = ap.parse_args()
    if not os.access(args.tool, os.X_OK):
        sys.exit("no measurer at %s (ninja -C build preflight_net_tool)" % args.tool)

    h = benchlib.BenchHarness(tempfile.mkdtemp(prefix="trainlet-bench-preflight-"))
    names = ["h%d" % i for i in range(args.hosts)]
    record = open(args.record, "w") if args.record else None
    try:
        if args.loopback:
            hosts = [(n, "127.0.0.1", ()) for n in names]
            where = "loopback"
        else:
            cluster = netns.Cluster.create(h, names)
            hosts = [(x.name, x.addr, cluster.prefix(x)) for x in cluster.hosts]
            where = "netns hosts (veth, no rate limit)"
        ring = preflight_ring.MeasurerRing(h, hosts, job="bench", max_bytes=args.max_bytes,
                                           max_ms=args.max_ms, tool=args.tool)
        walls, sent, rates, rtts, link_secs = [], [], [], [], []
        flagged_rounds = 0
        unattributed = 0
        errors = 0
        for rnd in range(1, args.rounds + 1):
            start = time.monotonic()
            links, done = ring.round(rnd)
            walls.append(time.monotonic() - start)
            for d in done.values():
                sent.append(d["sent"])
            for l in links:
                if l.get("error"):
                    errors += 1
                    continue
                rates.append(l["bandwidth_bytes_per_second"])
                rtts.append(l.get("rtt_seconds", 0))
                link_secs.append(l["seconds"])
            verdict = ring.analyze(links)
            flagged_rounds += 1 if verdict["flagged"] else 0
            unattributed += len(verdict["unattributed"])
            if record:
                record.write("round %d\n" % rnd)
                for l in links:
                    record.write(json.dumps(l, sort_keys=True) + "\n")
        # What each server took in all, once every transfer has ended.
        time.sleep(1)
        _, totals = ring.round(0)
        received = [d["received"] / args.rounds for d in totals.values()]
        ring.close()
    finally:
        if record:
            record.close()
        h.close()

    mib = 1 << 20
    print("preflight link measurer: %d hosts on %s, %d rounds, 2 links a node" %
          (args.hosts, where, args.rounds))
    print("  round wall time      median %.0f ms, p90 %.0f ms, max %.0f ms" %
          (statistics.median(walls) * 1e3, pct(walls, 0.9) * 1e3, max(walls) * 1e3))
    print("  sent per node        max %.1f MiB a round (median %.1f MiB)" %
          (max(sent) / mib, statistics.median(sent) / mib))
    print("  taken in per node    max %.1f MiB a round on average over the rounds" %
          (max(received) / mib))
    print("  link bandwidth       median %.2f GB/s, min %.2f GB/s, max %.2f GB/s" %
          (statistics.median(rates) / 1e9, min(rates) / 1e9, max(rates) / 1e9))
    print("  link time (best)     median %.1f ms, max %.1f ms" %
          (statistics.median(link_secs) * 1e3, max(link_secs) * 1e3))
    print("  round trip           median %.0f us, p90 %.0f us" %
          (statistics.median(rtts) * 1e6, pct(rtts, 0.9) * 1e6))
    print("  rounds naming a node %d of %d (unattributed slow links: %d, failed links: %d)" %
          (flagged_rounds, args.rounds, unattributed, errors))
    print(json.dumps({
        "hosts": args.hosts, "where": where, "rounds": args.rounds,
        "round_wall_ms_median": round(statistics.median(walls) * 1e3, 1),
        "round_wall_ms_max": round(max(walls) * 1e3, 1),
        "sent_mib_max": round(max(sent) / mib, 2),
        "received_mib_mean_max": round(max(received) / mib, 2),
        "bandwidth_gbps_median": round(statistics.median(rates) * 8 / 1e9, 2),
        "rtt_us_median": round(statistics.median(rtts) * 1e6, 1),
        "rounds_naming_a_node": flagged_rounds, "failed_links": errors}))
    return 1 if flagged_rounds or errors else 0


if __name__ == "__main__":
    sys.exit(main())
