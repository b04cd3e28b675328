"""What the slow-node e2e tests and bench share (docs/slow-nodes.md):
4 pod-like netns hosts (e2e/netns.py), each in a cgroup v1 `cpu` cgroup of
its own (a pod's), each running `trainlet run` with one real torch gloo DDP
worker (e2e/workers/slow_ddp.py); a host is slowed while the job runs by a
CPU quota on its cgroup (`cpu.cfs_quota_us`) or by `tc tbf` on both ends of
its veth; and the raw signals the agents sample, read from outside
(/proc/PID/task/*/schedstat, the cgroup's cpu.stat, `ss -tin`), for the
validation in bench/slow_nodes.py.

    job = SlowJob(test, names=["pod0", ..., "pod3"])  # test: E2ETestCase or BenchHarness
    agents = job.start(["--slow-node-window=15s"])
    job.limit_cpu(job.hosts[3], 0.1)                    # the slowdown starts now
    job.limit_rate(job.hosts[3], "24mbit")

Cleanup is registered on `test` before anything is created, so it runs after
the cluster's own teardown (which kills every process in the namespaces, by
pid): the cgroups are removed then (rmdir needs them empty), and a cgroup
left by a killed run (its owner pid, in the name, is gone) is removed by the
next SlowJob. The qdiscs go with the namespaces' veths.

Needs root, cgroup v1's `cpu` controller at /sys/fs/cgroup/cpu (this test
machine; v2's `cpu.max` is not driven here), `tc` with the tbf qdisc, `ss`,
and torch in /usr/bin/python3; `unsupported_reason()` says what is missing.
Stdlib only.
"""

import contextlib
import glob
import os
import random
import re
import shutil
import subprocess
import time

import harness
import netns

CGROUP_CPU = "/sys/fs/cgroup/cpu"
_CG_PREFIX = "trainlet-e2e-"
DDP = [harness.PY, harness.worker("slow_ddp.py")]
COORDINATOR_PORT = 29400
MASTER_PORT = 29500


def unsupported_reason():
    """Why these jobs cannot run here, or None."""
    reason = netns.unsupported_reason()
    if reason:
        return reason
    if not os.path.exists(os.path.join(CGROUP_CPU, "cpu.cfs_quota_us")):
        return "needs cgroup v1's cpu controller at %s" % CGROUP_CPU
    for tool in ("tc", "ss"):
        if shutil.which(tool) is None:
            return "needs `%s` on PATH" % tool
    if subprocess.run([harness.PY, "-c", "import torch.distributed"],
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
        return "needs torch in %s" % harness.PY
    return None


def sweep_stale_cgroups():
    """Removes cgroups of runs whose owner (the pid in the name) is gone."""
    for path in glob.glob(os.path.join(CGROUP_CPU, _CG_PREFIX + "*")):
        m = re.match(r"^%s(\d+)-" % _CG_PREFIX, os.path.basename(path))
        if m and not netns._pid_alive(int(m.group(1))):
            with contextlib.suppress(OSError):
                os.rmdir(path)


class CpuCgroup:
    """A cgroup v1 `cpu` cgroup, a pod's: processes started through prefix()
    join it before they exec, so their children inherit it."""

    def __init__(self, name):
        self.path = os.path.join(CGROUP_CPU, "%s%d-%s" % (_CG_PREFIX, os.getpid(), name))
        os.mkdir(self.path)

    def prefix(self):
        """argv prefix, inside `ip netns exec` (which mounts a fresh /sys
        without the cgroup mounts): mount the cpu hierarchy at
        /sys/fs/cgroup/cpu, as a pod sees it, join this cgroup, then exec the
        rest. The mounts stay in that command's own mount namespace."""
        script = ("mount -t tmpfs cgroup /sys/fs/cgroup && mkdir /sys/fs/cgroup/cpu && "
                  "mount -t cgroup -o cpu cgroup /sys/fs/cgroup/cpu && "
                  'echo $$ > "$0" && exec "$@"')
        return ["sh", "-c", script, os.path.join(self.path, "cgroup.procs")]

    def _write(self, name, value):
        with open(os.path.join(self.path, name), "w") as f:
            f.write("%s\n" % value)

    def limit(self, cpus, period_us=100000):
        """Holds the cgroup to `cpus` CPUs (0.1: a tenth of one)."""
        self._write("cpu.cfs_period_us", period_us)
        self._write("cpu.cfs_quota_us", max(1000, int(cpus * period_us)))

    def unlimit(self):
        self._write("cpu.cfs_quota_us", -1)

    def throttled_ns(self):
        with open(os.path.join(self.path, "cpu.stat")) as f:
            stat = dict(line.split() for line in f if line.strip())
        return int(stat.get("throttled_time", 0))

    def pids(self):
        with open(os.path.join(self.path, "cgroup.procs")) as f:
            return [int(p) for p in f.read().split()]

    def destroy(self):
        """Removes the cgroup once it is empty (its processes killed first)."""
        deadline = time.monotonic() + 10
        while os.path.exists(self.path):
            try:
                os.rmdir(self.path)
            except OSError:
                if time.monotonic() > deadline:
                    raise AssertionError("cgroup %s still holds %s" % (self.path, self.pids()))
                time.sleep(0.05)


class SlowJob:
    """4 (or len(names)) netns hosts, each in a cpu cgroup of its own, and a
    static (or elastic) `trainlet run` job of one slow_ddp.py worker per host.
    """

    def __init__(self, test, names=("pod0", "pod1", "pod2", "pod3"), job_id="slow",
                 trainlet=None):
        self.test = test
        self.trainlet = trainlet or harness.TRAINLET
        sweep_stale_cgroups()
        self.cgroups = {}
        # Before the cluster: cleanups run last first, so this runs after the
        # cluster's teardown killed every process in it.
        test.addCleanup(self._destroy_cgroups)
        self.cluster = netns.Cluster.create(test, list(names))
        self.hosts = self.cluster.hosts
        tag = "%06x" % random.getrandbits(24)
        for h in self.hosts:
            self.cgroups[h.name] = CpuCgroup("%s-%s" % (tag, h.name))
        self.job_id = job_id
        self.agents = {}

    def _destroy_cgroups(self):
        for cg in self.cgroups.values():
            cg.destroy()

    def agent_argv(self, host, nnodes, extra=()):
        return [self.trainlet, "run", "--nnodes=%s" % nnodes,
                "--node-rank=%d" % host.index, "--node-id=%s" % host.name,
                "--coordinator=%s:%d" % (self.hosts[0].name, COORDINATOR_PORT),
                "--master-port=%d" % MASTER_PORT, "--nproc-per-node=1",
                "--job-id=%s" % self.job_id, "--join-timeout=60s",
                "--grace-period=5s"] + list(extra) + ["--"] + DDP

    def start_host(self, host, nnodes, extra=(), env=None):
        env = dict(env or {})
        env.setdefault("GLOO_SOCKET_IFNAME", "eth0")
        env.setdefault("OMP_NUM_THREADS", "1")
        env.setdefault("E2E_DIR", self.test.dir)
        argv = self.cgroups[host.name].prefix() + self.agent_argv(host, nnodes, extra)
        agent = self.cluster.start(host, host.name, argv, env=self.test.base_env(**env))
        self.agents[host.name] = agent
        return agent

    def start(self, extra=(), nnodes=None, env=None, per_host=None):
        """One agent per host; `per_host`: {host name: (extra args, extra env)}."""
        nnodes = nnodes or len(self.hosts)
        agents = []
        for h in self.hosts:
            more_args, more_env = (per_host or {}).get(h.name, ((), {}))
            agents.append(self.start_host(h, nnodes, list(extra) + list(more_args),
                                          dict(env or {}, **more_env)))
        return agents

    def stop(self):
        """Asks every worker to stop at the same step (the stop file)."""
        with open(self.test.path("stop"), "w"):
            pass

    def steps(self, host, restart=0):
        """[(step, monotonic seconds)] of `host`'s worker, every 10th step."""
        try:
            with open(self.test.path("steps", "%s.r%d" % (host.name, restart))) as f:
                return [(int(a), float(b)) for a, b in
                        (line.split() for line in f if line.count(" ") == 1)]
        except FileNotFoundError:
            return []

    def step_time(self, host, since, restart=0):
        """Mean seconds per step of `host`'s worker after monotonic `since`."""
        rows = [r for r in self.steps(host, restart) if r[1] >= since]
        if len(rows) < 2:
            return None
        return (rows[-1][1] - rows[0][1]) / (rows[-1][0] - rows[0][0])

    def worker_pid(self, host, restart=0):
        files = glob.glob(self.test.path("pids", "%s.r%d.rank*" % (host.name, restart)))
        if not files:
            return None
        return harness.read_pid_file(files[0])

    def wait_training(self, timeout, restart=0, steps=20):
        """Waits until every host's worker did `steps` steps."""
        def ready():
            for a in self.agents.values():
                if not a.running():
                    raise AssertionError("%s exited (rc %s) before training\n%s"
                                         % (a.name, a.poll(), a.describe()))
            return all(len(self.steps(h, restart)) * 10 >= steps for h in self.hosts)

        harness.poll_until(
            ready,
            timeout, interval=0.2,
            what="every worker at step %d\n%s" % (steps, self.test.describe_all()
                                                  if hasattr(self.test, "describe_all")
                                                  else ""))

    # -- slowing a host --

    def limit_cpu(self, host, cpus, period_us=100000):
        self.cgroups[host.name].limit(cpus, period_us)

    def _veths(self, host):
        """(namespace, device) of both ends of host's veth: eth0 in the host
        (what it sends) and the bridge port in the switch (what it receives)."""
        return [(host.ns, "eth0"), (self.cluster.switch_ns, self.cluster._veth(host))]

    def limit_rate(self, host, rate, burst="32kb", latency="50ms", both=True):
        """tc tbf on both ends of host's veth (this kernel has no netem), or
        with both=False only on what it sends."""
        for ns, dev in self._veths(host)[:2 if both else 1]:
            netns._run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root",
                        "tbf", "rate", rate, "burst", burst, "latency", latency])

    def unlimit_rate(self, host):
        for ns, dev in self._veths(host):
            netns._run(["ip", "netns", "exec", ns, "tc", "qdisc", "del", "dev", dev, "root"],
                       check=False)


# -- the raw signals, read from outside (the validation) ---------------------------

def schedstat(pid):
    """(ns on a CPU, ns runnable on a run queue) of pid's threads, summed."""
    ran = waited = 0
    for path in glob.glob("/proc/%d/task/*/schedstat" % pid):
        with contextlib.suppress(OSError, ValueError):
            with open(path) as f:
                a, b, _ = f.read().split()
            ran += int(a)
            waited += int(b)
    return ran, waited


_UNITS = {"bps": 1, "Kbps": 1e3, "Mbps": 1e6, "Gbps": 1e9}


def tcp_sockets(ns, pid):
    """{(local, peer): tcp_info figures} of pid's established TCP sockets in
    namespace ns, from `ss -tinpH`: rtt_ms, bytes_acked, delivery_bps,
    retrans (total), app_limited."""
    r = netns._run(["ip", "netns", "exec", ns, "ss", "-tinpH", "state", "established"],
                   check=False)
    sockets = {}
    lines = r.stdout.split("\n")
    for i in range(0, len(lines) - 1):
        head, info = lines[i], lines[i + 1]
        if not head or head[0].isspace() or "pid=%d," % pid not in head:
            continue
        fields = head.split()
        key = (fields[2], fields[3])
        s = {"rtt_ms": 0.0, "bytes_acked": 0, "delivery_bps": 0.0, "retrans": 0, "busy_ms": 0,
             "app_limited": "app_limited" in info}
        if m := re.search(r"\brtt:([\d.]+)/", info):
            s["rtt_ms"] = float(m.group(1))
        if m := re.search(r"\bbytes_acked:(\d+)", info):
            s["bytes_acked"] = int(m.group(1))
        if m := re.search(r"\bdelivery_rate ([\d.]+)(\w+)", info):
            s["delivery_bps"] = float(m.group(1)) * _UNITS.get(m.group(2), 1)
        if m := re.search(r"\bretrans:\d+/(\d+)", info):
            s["retrans"] = int(m.group(1))
        if m := re.search(r"\bbusy:(\d+)ms", info):
            s["busy_ms"] = int(m.group(1))
        sockets[key] = s
    return sockets


class RawSample:
    """One host's raw signals at one moment."""

    def __init__(self, job, host, pid):
        self.t = time.monotonic()
        self.ran, self.waited = schedstat(pid)
        self.throttled = job.cgroups[host.name].throttled_ns()
        self.sockets = tcp_sockets(host.ns, pid)


def window(a, b):
    """The figures of one host between two RawSamples: per mille of the
    window ran / waited / throttled, the highest RTT among the sockets that
    sent, bytes acked, retransmits, and the lowest delivery rate among the
    sockets that sent at least 64 KiB (what the agent sends,
    docs/protocol.md SlowSignals)."""
    span = (b.t - a.t) * 1e9
    acked = retrans = 0
    rtt = 0.0
    rates = []
    busy = 0
    for key, s in b.sockets.items():
        before = a.sockets.get(key, {"bytes_acked": 0, "retrans": 0, "busy_ms": 0})
        busy = max(busy, s["busy_ms"] - before["busy_ms"])
        sent = s["bytes_acked"] - before["bytes_acked"]
        acked += sent
        retrans += s["retrans"] - before["retrans"]
        if sent > 0:
            rtt = max(rtt, s["rtt_ms"])
        if sent >= 64 * 1024:
            rates.append(s["delivery_bps"])
    return {"ran": 1000 * (b.ran - a.ran) / span, "waited": 1000 * (b.waited - a.waited) / span,
            "throttled": 1000 * (b.throttled - a.throttled) / span,
            "rtt_ms": rtt, "acked_MBps": acked / (b.t - a.t) / 1e6, "retrans": retrans,
            "rate_min_Mbps": min(rates) / 1e6 if rates else 0.0,
            "busy": busy / (b.t - a.t), "sockets": len(b.sockets)}
