#!/usr/bin/env python3
"""What --preflight adds to a job's first round (docs/preflight.md, "Cost"):
N pod-like hosts (network namespaces, e2e/netns.py; veths without a rate
limit), one `trainlet run` agent each, a static job of N nodes whose
workers exit at once. For each policy (off, warn, exclude), alternated,
--repeat jobs; for each job the time from the last agent's "joining job"
line to node 0's "round 1:" line (the round closed and node 0 has its
assignment), on the agents' own log clocks (one kernel: the same clock).
exclude checks every node and measures the ring before the round closes;
warn and off close it at once.

    /usr/bin/python3 bench/preflight_round.py [--hosts 8] [--repeat 7]
        [--trainlet build/trainlet]

Needs root (network namespaces). Prints a table and one JSON line."""

import argparse
import datetime
import json
import os
import re
import statistics
import sys
import tempfile
import time

import benchlib
from benchlib import ROOT
import netns  # noqa: E402 (e2e/, on the path through benchlib)

STAMP = r"^(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3})Z "
JOINING = re.compile(STAMP + r".*joining job ", re.M)
CLOSED = re.compile(STAMP + r".*\] round 1: node rank 0 of ", re.M)
MEASURED = re.compile(r"preflight: measured \d+ link\(s\) in ([0-9.]+)(ms|s|us)")


def stamp(text):
    return datetime.datetime.strptime(text, "%Y-%m-%dT%H:%M:%S.%f").timestamp()


def one_job(h, cluster, policy, index, trainlet):
    port = 29400 + (index % 50) * 2
    procs = []
    for i, host in enumerate(cluster.hosts):
        args = ["--nnodes=%d" % len(cluster.hosts), "--node-rank=%d" % i,
                "--node-id=%s" % host.name,
                "--coordinator=%s:%d" % (cluster.hosts[0].name, port),
                "--master-port=%d" % (port + 1000), "--nproc-per-node=1",
                "--job-id=bench-%d" % index, "--join-timeout=60s",
                "--preflight=%s" % policy]
        procs.append(cluster.start(host, "%s-%d-%s" % (policy, index, host.name),
                                   [trainlet, "run"] + args + ["--", "true"]))
    codes = [p.wait(120) for p in procs]
    if codes != [0] * len(procs):
        raise RuntimeError("%s job %d: exit codes %s\n%s" % (
            policy, index, codes, "\n".join(p.describe() for p in procs)))
    joins = [stamp(JOINING.search(p.stderr).group(1)) for p in procs]
    closed = stamp(CLOSED.search(procs[0].stderr).group(1))
    link_ms = []
    for p in procs:
        for value, unit in MEASURED.findall(p.stderr):
            link_ms.append(float(value) * {"ms": 1, "s": 1e3, "us": 1e-3}[unit])
    return (closed - max(joins)) * 1e3, link_ms


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--hosts", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--trainlet", default=os.path.join(ROOT, "build", "trainlet"))
    args = ap.parse_args()
    policies = ["off", "warn", "exclude"]
    h = benchlib.BenchHarness(tempfile.mkdtemp(prefix="trainlet-bench-preflight-round-"))
    close_ms = {p: [] for p in policies}
    measure_ms = []
    try:
        cluster = netns.Cluster.create(h, ["h%d" % i for i in range(args.hosts)])
        index = 0
        for _ in range(args.repeat):
            for policy in policies:
                ms, links = one_job(h, cluster, policy, index, args.trainlet)
                index += 1
                close_ms[policy].append(ms)
                if policy == "exclude":
                    measure_ms.extend(links)
                time.sleep(0.2)
    finally:
        h.close()

    med = {p: statistics.median(v) for p, v in close_ms.items()}
    print("first round's close after the last join: %d netns hosts, %d jobs per policy" %
          (args.hosts, args.repeat))
    for p in policies:
        v = close_ms[p]
        print("  --preflight=%-8s median %6.1f ms  (min %6.1f, max %6.1f)  added %+6.1f ms" %
              (p, med[p], min(v), max(v), med[p] - med["off"]))
    if measure_ms:
        print("  exclude: each node's links measured in median %.1f ms, max %.1f ms" %
              (statistics.median(measure_ms), max(measure_ms)))
    print(json.dumps({
        "hosts": args.hosts, "repeat": args.repeat,
        "close_ms_median": {p: round(med[p], 1) for p in policies},
        "added_ms": {p: round(med[p] - med["off"], 1) for p in policies},
        "measure_ms_median": round(statistics.median(measure_ms), 1) if measure_ms else None,
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
