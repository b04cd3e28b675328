"""Two "switches" of netns hosts and a real torch gloo all_reduce over them,
for the rank order by topology (docs/topology.md, "Rank order"): shared by
bench/topology_order.py and e2e/e2e_topology_order.py.

    cluster = netns.Cluster.create(test, ["h0", ..., "h7"])
    two_switches(cluster, inter="100mbit", intra="1gbit")
    result = run_job(test, cluster, "topology", mib=64, iters=2)

Layout: netns.Cluster puts every host's veth on one bridge (br0) in the
switch namespace; two_switches moves the odd hosts' veths to a second bridge
(br1) and joins br0 and br1 by one veth pair, so host i sits on switch i % 2
and pod index order alternates switches. tc tbf caps the link between the
switches (both directions: each end's egress) at `inter`, and every host's
own link (eth0's egress and its bridge port's egress) at `intra`: veth is
otherwise as fast as the CPU, and the ratio between the two is the point.

A job: one agent per host (`trainlet run --nproc-per-node=1`), its pod index
in JOB_COMPLETION_INDEX (a discovered hint, which the topology order may
move), `--topology=switch=sN`, `--rank-order=ORDER`; each worker
(workers/topology_allreduce.py) writes its rank, host and the seconds of each
timed all_reduce. run_job returns the ranks' hosts, the ring's inter-switch
crossings and the bus bandwidth (nccl-tests' definition: bytes x 2(n-1)/n
over the slowest rank's median time).
"""

import json
import os
import statistics
import subprocess

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "workers", "topology_allreduce.py")
PYTHON = "/usr/bin/python3"


def switch_of(host_index):
    return host_index % 2


def _tc(ns, dev, rate, burst):
    r = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root",
                        "tbf", "rate", rate, "burst", burst, "latency", "100ms"],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError("tc on %s/%s: %s" % (ns, dev, r.stderr.strip()))


def _ip(ns, script):
    r = subprocess.run(["ip", "-n", ns, "-b", "-"], input=script, stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError("ip -n %s: %s" % (ns, r.stderr.strip()))


def two_switches(cluster, inter, intra, inter_burst="256kb", intra_burst="1mb"):
    """Splits the cluster's bridge in two joined by one rate-limited link."""
    a, b = cluster.id + "x0", cluster.id + "x1"
    script = ["link add br1 type bridge", "link set br1 up",
              "link add %s type veth peer name %s" % (a, b),
              "link set %s master br0 up" % a, "link set %s master br1 up" % b]
    script += ["link set %s master br1" % cluster._veth(h)
               for h in cluster.hosts if switch_of(h.index) == 1]
    _ip(cluster.switch_ns, "\n".join(script) + "\n")
    _tc(cluster.switch_ns, a, inter, inter_burst)
    _tc(cluster.switch_ns, b, inter, inter_burst)
    for h in cluster.hosts:
        _tc(h.ns, "eth0", intra, intra_burst)
        _tc(cluster.switch_ns, cluster._veth(h), intra, intra_burst)


def crossings(hosts_by_rank, index_of):
    """Ring hops (rank r to r+1, the last back to 0) between switches."""
    n = len(hosts_by_rank)
    if n < 2:
        return 0
    hops = n if n > 2 else 1
    return sum(1 for r in range(hops)
               if switch_of(index_of[hosts_by_rank[r]]) !=
               switch_of(index_of[hosts_by_rank[(r + 1) % n]]))


LEAF_LABEL = "network.topology.nvidia.com/leaf"


def topology_arg(test, host, labels_file):
    if not labels_file:
        return "--topology=switch=s%d" % switch_of(host.index)
    path = test.path("labels-%s" % host.name)
    with open(path, "w") as f:  # what the kubelet writes: sorted key="value" lines
        f.write('app="trainer"\n%s="s%d"' % (LEAF_LABEL, switch_of(host.index)))
    return "--topology-file=" + path


def run_job(test, cluster, order, mib, iters, port, timeout=600, labels_file=False):
    """Runs one job over every host with --rank-order=`order`; returns a dict
    (see the module docstring). `test` is an E2ETestCase or a BenchHarness.
    With `labels_file`, each host's switch comes as Topograph's leaf label in a
    downward API labels file (--topology-file, the default --topology-keys)
    instead of --topology."""
    result_dir = test.path("result-%s" % order)
    os.makedirs(result_dir, exist_ok=True)
    coordinator = "%s:%d" % (cluster.hosts[0].name, port)
    agents = []
    for h in cluster.hosts:
        env = test.base_env(JOB_COMPLETION_INDEX=h.index, TOPO_MIB=mib, TOPO_ITERS=iters,
                            TOPO_RESULT_DIR=result_dir, OMP_NUM_THREADS=1)
        argv = [harness.TRAINLET, "run", "--nnodes=%d" % len(cluster.hosts),
                "--nproc-per-node=1", "--coordinator=" + coordinator,
                "--master-port=%d" % (port + 1), "--job-id=topo-" + order,
                topology_arg(test, h, labels_file), "--rank-order=" + order,
                "--join-timeout=2m", "--", PYTHON, WORKER]
        agents.append(cluster.start(h, "%s-%s" % (order, h.name), argv, env=env))
    for a in agents:
        rc = a.wait(timeout)
        if rc != 0:
            raise AssertionError("agent exited %d\n%s" % (rc, a.describe()))
    ranks = []
    for name in sorted(os.listdir(result_dir)):
        with open(os.path.join(result_dir, name)) as f:
            ranks.append(json.load(f))
    ranks.sort(key=lambda r: r["rank"])
    n = len(cluster.hosts)
    if len(ranks) != n or not all(r["ok"] for r in ranks):
        raise AssertionError("results: %s" % ranks)
    index_of = {h.name: h.index for h in cluster.hosts}
    hosts_by_rank = [r["host"] for r in ranks]
    slowest = max(statistics.median(r["seconds"]) for r in ranks)
    busbw = ranks[0]["bytes"] * 2 * (n - 1) / n / slowest
    logs = "\n".join(a.stderr for a in agents)
    return {"order": order, "hosts_by_rank": hosts_by_rank,
            "crossings": crossings(hosts_by_rank, index_of), "seconds": slowest,
            "busbw_bytes_per_s": busbw, "agent_logs": logs}
