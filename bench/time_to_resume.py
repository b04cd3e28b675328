#!/usr/bin/python3
"""Time to resume: from a lost pod (or a failed worker) to every survivor
training again, trainlet (cold and --warm-workers) against torchrun, on real
torch DDP, with the cold start of one worker alone as the yardstick.

The job: 4 pod-like hosts (e2e/netns.py: a network and UTS namespace each,
hostnames pod0..pod3 on one bridge) x 2 workers of torch 1.13 DDP on gloo
(GLOO_SOCKET_IFNAME=eth0, OMP_NUM_THREADS=1). The training script (TRAIN
below, written to the run directory) loads the checkpoint if there is one,
then steps for ever: a DDP forward/backward (its gradient all_reduce), an
all_reduce of ones whose sum it checks against WORLD_SIZE, rank 0 saves
{step, model, optimizer} (atomically), and every rank appends one JSON line
(CLOCK_MONOTONIC, which every netns host shares: one kernel) to
events/<pid>.jsonl, then sleeps --step-sleep. Each world is known by its
rank 0's pid (broadcast at start), so "the new world" needs no restart count
(torchrun's differs between agents).

Scenarios (--scenarios), each from a fresh cluster once all 8 ranks have
stepped in a world of 8 and --settle seconds more (with --warm-workers: from
the moment every pod has NPROC standbys, i.e. processes that are neither its
agent nor a worker, all idle (no CPU tick in 0.5 s: torch imported), whose
CPU over the settle time, in % of one core, and RSS are printed):
  kill   kill -9 of pod3 as a pod dies: every process in its namespace
         (`ip netns pids`, listed before the clock starts; the agent first).
         Timed from the kill to the moment every one of the 6 survivors has
         completed a step in a new world of 6.
  fail   the worker of rank 7 exits 1 (sys.exit) at a step the bench picks (3
         steps ahead, through the file fail.json). Timed from its last record
         before the exit to every one of the 8 ranks having completed a step in
         a new world of 8.
Also recorded, each from the kill/fail to the last rank of the new world
getting there: `script`, the training script's first statement; `init`,
init_process_group done; `ddp`, the checkpoint loaded and DDP built (its
first collectives); and for trainlet `agent`, the agent's part: the last
survivor's worker exec'd (the agents' `started worker` INFO lines, which come
after the exec, or after the handover with --warm-workers; wall clock, ms).

Systems (--systems):
  worker          one cold worker alone, in the root namespace: from Popen to
                  `python3` having imported torch, initialised a gloo process
                  group of a world of 1 (tcp://127.0.0.1) and completed one
                  all_reduce. Once per repeat, while nothing else runs; every
                  figure's ratio is to the median of these.
  trainlet        `trainlet run --nnodes=3:4 --nproc-per-node=2 --node-rank=I
                  --node-id=podI --coordinator=pod0:PORT --master-port=MPORT
                  --job-id=ttr --last-call=5s -- python3 TRAIN`, everything
                  else default (max restarts 3 for MIN:MAX, 500 ms last call is
                  not paid on a restart; 5 s only makes sure 4 pods on 2 loaded
                  CPUs make the first round).
  trainlet-store  the same with --agent-store --agent-store-port=PORT+2
                  (torch's store in the agent, listening across rounds).
  trainlet-warm   the same with --warm-workers and --agent-store, when
                  `trainlet run --help` lists them (else reported as n/a).
  torchrun        `python3 -m torch.distributed.run --nnodes=3:4
                  --nproc_per_node=2 --rdzv_backend=c10d
                  --rdzv_endpoint=pod0:PORT --rdzv_id=ttr --max_restarts=3
                  --redirects 9:1 --tee 9:1 TRAIN`: torchrun 1.13's defaults
                  (--monitor_interval=5, join_timeout 600 s, last_call_timeout
                  30 s, close_timeout 30 s) but --max_restarts (default 0: no
                  restart at all) and the --redirects/--tee workaround for
                  Python 3.11 (bench/rendezvous_launch.py).
  torchrun-tuned  plus --monitor_interval=0.1 and --rdzv_conf=join_timeout=60,
                  last_call_timeout=1,close_timeout=1 (whole seconds: torch
                  1.13 reads them with get_as_int, and 0 is refused). The c10d
                  keep-alive (5 s x 3 before a dead node leaves the rendezvous
                  state) is hard-coded in 1.13 (DynamicRendezvousHandler.
                  from_backend): no option shortens it.
Runs are interleaved: each repeat runs every system and scenario once, so the
load of a shared machine falls on all alike. Before each run the bench waits
(up to --quiet-wait s) for the CPUs to be less than --quiet busy and prints
how busy they were, and the load average.

Usage (as root: network namespaces):
  /usr/bin/python3 bench/time_to_resume.py [--trainlet build/trainlet]
      [--repeat 3 | --quick] [--systems worker,trainlet,trainlet-warm,torchrun,torchrun-tuned]
      [--scenarios kill,fail] [--settle 3] [--step-sleep 0.05] [--keep]
Exit status: 0, 1 when a run failed (its figure is missing), 2 on bad usage,
77 when network namespaces are not available here (the reason is printed).

Today's figures: docs/benchmarks.md; how they were taken:
docs/benchmarks-history.md, "Time to resume".
"""

import argparse
import contextlib
import glob
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import unittest

import benchlib
from benchlib import ROOT, harness
import netns  # noqa: E402 (e2e/, on the path through benchlib)
from rendezvous_launch import wait_quiet  # noqa: E402

PY = "/usr/bin/python3"
PODS, NPROC = 4, 2
VICTIM = PODS - 1  # never pod0: it hosts trainlet's coordinator and torchrun's store
EXIT_SKIP = 77
SYSTEMS = ("worker", "trainlet", "trainlet-store", "trainlet-warm", "torchrun", "torchrun-tuned")
SCENARIOS = ("kill", "fail")
TORCHRUN_TUNED = ["--monitor_interval=0.1",
                  "--rdzv_conf=join_timeout=60,last_call_timeout=1,close_timeout=1"]

TRAIN = r'''
import time
T0 = time.monotonic()  # the script's first statement
import json, os, sys
D = os.environ["TTR_DIR"]
RESTART = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
RANK, WORLD = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
_fd = os.open(os.path.join(D, "events", "%d.jsonl" % os.getpid()),
              os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)


def record(kind, t=None, **kw):
    """One JSON line, one write(2): a reader never sees half a line but the last."""
    kw.update(kind=kind, t=time.monotonic() if t is None else t, wall=time.time(),
              restart=RESTART, rank=RANK, world=WORLD, pid=os.getpid())
    os.write(_fd, (json.dumps(kw) + "\n").encode())


record("start", t=T0)
from datetime import timedelta
import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

dist.init_process_group("gloo", timeout=timedelta(seconds=60))
wid = torch.tensor([float(os.getpid())], dtype=torch.float64)
dist.broadcast(wid, 0)  # the world's identity: its rank 0's pid
WORLD_ID = int(wid.item())
record("init", world_id=WORLD_ID)
torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.001)
ckpt = os.path.join(D, "ckpt.pt")
step = 0
if os.path.exists(ckpt):  # every rank loads it before DDP's first collective
    state = torch.load(ckpt)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    step = state["step"]
ddp = DDP(model)
record("resumed", world_id=WORLD_ID, step=step)
pause = float(os.environ.get("TTR_STEP_SLEEP", "0.05"))
fail_path, fail = os.path.join(D, "fail.json"), None
while True:
    step += 1
    loss = ddp(torch.full((8, 16), float(step % 7))).pow(2).mean()
    opt.zero_grad()
    loss.backward()  # DDP all-reduces the gradients
    opt.step()
    ones = torch.ones(1)
    dist.all_reduce(ones)
    if ones.item() != WORLD:
        record("bad_sum", world_id=WORLD_ID, step=step, sum=ones.item())
        sys.exit(2)
    if RANK == 0:
        torch.save({"step": step, "model": model.state_dict(), "opt": opt.state_dict()},
                   ckpt + ".tmp")
        os.replace(ckpt + ".tmp", ckpt)
    record("step", world_id=WORLD_ID, step=step)
    if fail is None and os.path.exists(fail_path):
        with open(fail_path) as f:
            fail = json.load(f)
    if (fail and fail["rank"] == RANK and fail["world_id"] == WORLD_ID
            and step >= fail["step"]):
        record("fail", world_id=WORLD_ID, step=step)
        os._exit(1)  # at once: sys.exit's interpreter teardown took 1.1 s here
    time.sleep(pause)
'''

COLD = r'''
import time
T0 = time.monotonic()
import sys
import torch
import torch.distributed as dist
dist.init_process_group("gloo", init_method="tcp://127.0.0.1:" + sys.argv[1], rank=0,
                        world_size=1)
x = torch.ones(1)
dist.all_reduce(x)
assert x.item() == 1.0, x
print("%.6f %.6f" % (T0, time.monotonic()), flush=True)
'''


class RunFailed(Exception):
    """One run gave no figure; the message says why and where its logs are."""


class Events:
    """The workers' JSON lines under events/, read incrementally (each file
    from where the last call stopped; a line without its newline yet waits)."""

    def __init__(self, directory):
        self.dir = directory
        self.offsets = {}
        self.partial = {}
        self.all = []

    def poll(self):
        for path in glob.glob(os.path.join(self.dir, "*.jsonl")):
            with open(path, "rb") as f:
                f.seek(self.offsets.get(path, 0))
                data = f.read()
            if not data:
                continue
            self.offsets[path] = self.offsets.get(path, 0) + len(data)
            data = self.partial.pop(path, b"") + data
            lines = data.split(b"\n")
            if lines[-1]:
                self.partial[path] = lines[-1]
            for line in lines[:-1]:
                self.all.append(json.loads(line))
        return self.all


def complete_world(events, world, after, exclude=()):
    """The first world (by rank 0's pid) of `world` ranks, not in `exclude`,
    in which every rank completed a step after monotonic time `after`:
    (world_id, the time the last rank completed its first step there, {rank:
    first step time}) or None."""
    firsts = {}
    for e in events:
        if e["kind"] == "step" and e["world"] == world and e["t"] > after \
                and e["world_id"] not in exclude:
            ranks = firsts.setdefault(e["world_id"], {})
            if e["rank"] not in ranks or e["t"] < ranks[e["rank"]]:
                ranks[e["rank"]] = e["t"]
    done = [(max(r.values()), wid, r) for wid, r in firsts.items() if len(r) == world]
    if not done:
        return None
    at, wid, ranks = min(done)
    return wid, at, ranks


def steady_world(events, world, steps):
    """The world of `world` ranks in which every rank has done `steps` steps, or None."""
    counts = {}
    for e in events:
        if e["kind"] == "step" and e["world"] == world:
            per = counts.setdefault(e["world_id"], {})
            per[e["rank"]] = per.get(e["rank"], 0) + 1
    for wid, per in counts.items():
        if len(per) == world and min(per.values()) >= steps:
            return wid
    return None


def log_times(text, pattern):
    """Wall times (s) of the trainlet log lines of `text` whose message matches `pattern`."""
    return [harness.log_time(m.group(1)) for m in re.finditer(
        r"^(\d{4}-\d\d-\d\dT\S+Z) [DIWE] trainlet\[[^\]\n]*\] .*?" + pattern, text, re.M)]


class Job:
    """One job on a fresh cluster of PODS netns hosts: the agents, the run
    directory, the workers' events. close() kills every process in the
    cluster's namespaces and every tagged process, by pid, and removes the
    namespaces."""

    def __init__(self, args, system, run_dir, port):
        self.args, self.system, self.dir = args, system, run_dir
        os.makedirs(os.path.join(run_dir, "events"))
        self.h = benchlib.BenchHarness(run_dir)
        self.events = Events(os.path.join(run_dir, "events"))
        self.script = os.path.join(run_dir, "train.py")
        with open(self.script, "w") as f:
            f.write(TRAIN)
        try:
            self.cluster = netns.Cluster.create(self.h, ["pod%d" % i for i in range(PODS)])
        except BaseException:
            self.h.close()
            raise
        env = self.h.base_env(TTR_DIR=run_dir, TTR_STEP_SLEEP=args.step_sleep,
                              GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS=1,
                              PYTHONDONTWRITEBYTECODE=1)
        env.pop("LOGLEVEL", None)  # torchrun's
        self.agents = [self.cluster.start(h, h.name, self.argv(i, port), env=env)
                       for i, h in enumerate(self.cluster.hosts)]

    def argv(self, i, port):
        if self.system.startswith("trainlet"):
            argv = [self.args.trainlet, "run", "--nnodes=3:%d" % PODS,
                    "--nproc-per-node=%d" % NPROC, "--node-rank=%d" % i, "--node-id=pod%d" % i,
                    "--coordinator=pod0:%d" % port, "--master-port=%d" % (port + 1),
                    "--job-id=ttr", "--last-call=5s", "--log-level=info"]
            if self.system == "trainlet-warm":
                argv.append("--warm-workers")
            if self.system in ("trainlet-store", "trainlet-warm"):
                argv += ["--agent-store", "--agent-store-port=%d" % (port + 2)]
            return argv + ["--", PY, self.script]
        argv = [PY, "-m", "torch.distributed.run", "--nnodes=3:%d" % PODS,
                "--nproc_per_node=%d" % NPROC, "--rdzv_backend=c10d",
                "--rdzv_endpoint=pod0:%d" % port, "--rdzv_id=ttr", "--max_restarts=3",
                "--redirects", "9:1", "--tee", "9:1"]
        if self.system == "torchrun-tuned":
            argv += TORCHRUN_TUNED
        return argv + [self.script]

    def wait(self, what, timeout, pred):
        """Polls the events (and the agents) until pred() returns a value."""
        deadline = time.monotonic() + timeout
        while True:
            self.events.poll()
            value = pred()
            if value is not None:
                return value
            dead = [a.name for a in self.agents if not a.running() and a.name != self.victim]
            if dead or time.monotonic() > deadline:
                raise RunFailed("%s: %s (%s)" % (
                    what, "agents exited: %s" % ", ".join(dead) if dead
                    else "no result within %.0fs" % timeout, self.dir))
            time.sleep(0.05)

    victim = None

    def standbys(self, workers):
        """The pids of each pod that are neither its agent nor in `workers`
        (with --warm-workers: its standbys), by pod."""
        out = []
        for agent, host in zip(self.agents, self.cluster.hosts):
            r = netns._run(["ip", "netns", "pids", host.ns], check=False)
            out.append([int(p) for p in r.stdout.split()
                        if int(p) != agent.pid and int(p) not in workers])
        return out

    def idle_standbys(self, workers):
        """{pid: CPU ticks} of every pod's standbys once each pod has NPROC of
        them and none used the CPU for 0.5 s (they have imported what they
        preload and wait), else None."""
        per_pod = self.standbys(workers)
        if any(len(pids) < NPROC for pids in per_pod):
            return None
        ticks = {p: cpu_ticks(p) for pids in per_pod for p in pids}
        time.sleep(0.5)
        return ticks if all(cpu_ticks(p) == t for p, t in ticks.items()) else None

    def close(self):
        self.h.close()


def cpu_ticks(pid):
    """utime + stime of pid in clock ticks, or -1 when it is gone."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            rest = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return -1
    return int(rest[11]) + int(rest[12])


def rss_kb(pid):
    """VmRSS of pid in kB (0 when it is gone)."""
    with contextlib.suppress(OSError):
        with open("/proc/%d/status" % pid) as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1])
    return 0


def kill_pod(cluster, host, agent_pid):
    """kill -9 of every process of `host`, as a pod dies. The pids are listed
    before the clock starts; returns (monotonic, wall) of the kill."""
    pids = [int(p) for p in netns._run(["ip", "netns", "pids", host.ns]).stdout.split()]
    pids.sort(key=lambda p: p != agent_pid)  # the agent first: it starts no more
    t, wall = time.monotonic(), time.time()
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    netns._kill_namespace_pids([host.ns])  # anything started meanwhile
    return t, wall


def measure(args, system, scenario, run_dir, port):
    """One run: returns a dict of seconds (resume, script, agent) or raises RunFailed."""
    job = Job(args, system, run_dir, port)
    try:
        world = PODS * NPROC
        old = job.wait("every rank stepping in a world of %d" % world, args.timeout,
                       lambda: steady_world(job.events.all, world, 3))
        standby_ticks = None
        if system == "trainlet-warm":
            workers = {e["pid"] for e in job.events.all if e["kind"] == "start"}
            standby_ticks = job.wait("%d idle standbys in every pod" % NPROC, args.timeout,
                                     lambda: job.idle_standbys(workers))
        settle_start = time.monotonic()
        job.wait("settle", args.settle + 5,
                 lambda: True if time.monotonic() >= settle_start + args.settle else None)
        standby = None
        if standby_ticks:
            # Their CPU while the job trains (% of one core, all standbys
            # together per standby) and their RSS, just before the kill.
            used = sum(cpu_ticks(p) - t for p, t in standby_ticks.items())
            elapsed = time.monotonic() - settle_start
            standby = {"cpu_pct": 100.0 * used / os.sysconf("SC_CLK_TCK") / elapsed
                       / len(standby_ticks),
                       "rss_mb": [rss_kb(p) / 1024.0 for p in standby_ticks]}
        if scenario == "kill":
            job.victim = job.agents[VICTIM].name
            t0, wall0 = kill_pod(job.cluster, job.cluster.hosts[VICTIM], job.agents[VICTIM].pid)
            new_world = world - NPROC
            survivors = [a for i, a in enumerate(job.agents) if i != VICTIM]
        else:
            steps = [e["step"] for e in job.events.poll() if e["kind"] == "step"
                     and e["world_id"] == old]
            with open(os.path.join(run_dir, "fail.json.tmp"), "w") as f:
                json.dump({"rank": world - 1, "world_id": old, "step": max(steps) + 3}, f)
            os.replace(os.path.join(run_dir, "fail.json.tmp"), os.path.join(run_dir, "fail.json"))
            failed = job.wait("rank %d to fail" % (world - 1), 30, lambda: next(
                (e for e in job.events.all if e["kind"] == "fail"), None))
            t0, wall0 = failed["t"], failed["wall"]
            new_world = world
            survivors = job.agents
        wid, at, _ = job.wait("every survivor stepping in a new world of %d" % new_world,
                              args.timeout_resume,
                              lambda: complete_world(job.events.all, new_world, t0, (old,)))
        starts = {e["pid"]: e["t"] for e in job.events.all if e["kind"] == "start"}
        new_pids = [e["pid"] for e in job.events.all
                    if e["kind"] == "resumed" and e["world_id"] == wid]
        resumed = {e["step"] for e in job.events.all
                   if e["kind"] == "resumed" and e["world_id"] == wid}
        # Where the time went in the new world: the last rank to reach each point.
        def last(kind):
            return max(e["t"] for e in job.events.all
                       if e["kind"] == kind and e["world_id"] == wid) - t0
        out = {"resume": at - t0, "script": max(starts[p] for p in new_pids) - t0,
               "init": last("init"), "ddp": last("resumed"), "resumed_from": sorted(resumed)}
        if standby:
            out["standby"] = standby
        if system.startswith("trainlet"):
            # The agent's part: each survivor's first NPROC workers after t0
            # exec'd (or handed over), by its log's wall clock (ms).
            last = []
            for a in survivors:
                ts = [t for t in log_times(a.stderr, args.worker_started) if t >= wall0 - 0.001]
                if len(ts) < NPROC:
                    raise RunFailed("%s logged %d of %d `%s` lines after the %s (%s)" % (
                        a.name, len(ts), NPROC, args.worker_started, scenario, run_dir))
                last.append(sorted(ts)[NPROC - 1])
            out["agent"] = max(last) - wall0
        return out
    finally:
        job.close()


def cold_worker(args, run_dir):
    """Seconds from Popen of the one-worker script to its all_reduce done."""
    script = os.path.join(run_dir, "cold.py")
    with open(script, "w") as f:
        f.write(COLD)
    h = benchlib.BenchHarness(run_dir)
    try:
        env = h.base_env(OMP_NUM_THREADS=1, GLOO_SOCKET_IFNAME="lo", PYTHONDONTWRITEBYTECODE=1)
        p = h.start("cold", [PY, script, str(benchlib.free_port())], env=env)
        rc = p.wait(args.timeout)
        if rc != 0:
            raise RunFailed("the cold worker exited %d:\n%s" % (rc, p.describe()))
        return float(p.stdout.split()[1]) - p.started
    finally:
        h.close()


def has_agent_store(trainlet):
    r = subprocess.run([trainlet, "run", "--help"], capture_output=True, text=True)
    return "--agent-store" in r.stdout


def has_warm_workers(trainlet):
    r = subprocess.run([trainlet, "run", "--help"], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=30)
    return "--warm-workers" in r.stdout


def stats(xs):
    return statistics.median(xs), min(xs), max(xs)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trainlet", default=os.environ.get("TRAINLET_BIN")
                   or os.path.join(ROOT, "build", "trainlet"))
    p.add_argument("--systems", default=",".join(SYSTEMS),
                   help="comma separated: %s" % ", ".join(SYSTEMS))
    p.add_argument("--scenarios", default=",".join(SCENARIOS),
                   help="comma separated: kill (kill -9 of a pod), fail (a worker exits 1)")
    p.add_argument("--repeat", type=int, default=3, help="runs of each system and scenario")
    p.add_argument("--quick", action="store_true",
                   help="one repeat and a 1 s settle: a check that everything runs")
    p.add_argument("--settle", type=float, default=3.0,
                   help="seconds of training in the full world before the kill or failure")
    p.add_argument("--step-sleep", type=float, default=0.05,
                   help="the training script's sleep after each step (s)")
    p.add_argument("--timeout", type=float, default=120.0,
                   help="seconds for a job to be training in its first world")
    p.add_argument("--timeout-resume", type=float, default=120.0,
                   help="seconds from the kill or failure to every survivor stepping")
    p.add_argument("--worker-started", default=r"started worker |handed over|standby .*became",
                   help="regex of the agent's log line for a worker exec'd or handed over")
    p.add_argument("--quiet", type=float, default=0.15,
                   help="before each run wait (up to --quiet-wait s) until the CPUs are less "
                        "than this fraction busy (the machine may be shared)")
    p.add_argument("--quiet-wait", type=float, default=20.0)
    p.add_argument("--keep", action="store_true", help="keep the run directories (logs)")
    args = p.parse_args()
    systems = [s for s in args.systems.split(",") if s]
    scenarios = [s for s in args.scenarios.split(",") if s]
    for s in systems:
        if s not in SYSTEMS:
            p.error("--systems: unknown system %r (use %s)" % (s, ", ".join(SYSTEMS)))
    for s in scenarios:
        if s not in SCENARIOS:
            p.error("--scenarios: unknown scenario %r (use %s)" % (s, ", ".join(SCENARIOS)))
    if args.quick:
        args.repeat, args.settle = 1, 1.0
    if args.repeat < 1:
        p.error("--repeat: at least 1")
    args.trainlet = os.path.abspath(args.trainlet)  # started from the netns hosts
    uses_trainlet = any(s.startswith("trainlet") for s in systems)
    if uses_trainlet and not os.access(args.trainlet, os.X_OK):
        p.error("--trainlet: %s is not an executable (build it: ninja -C build trainlet)"
                % args.trainlet)
    reason = netns.unsupported_reason()
    if reason and systems != ["worker"]:
        print("time_to_resume: skipped: %s" % reason)
        return EXIT_SKIP
    notes = []
    for s in ("trainlet-store", "trainlet-warm"):
        if s in systems and not has_agent_store(args.trainlet):
            systems.remove(s)
            notes.append("%s: n/a (this binary has no --agent-store)" % s)
    if "trainlet-warm" in systems and not has_warm_workers(args.trainlet):
        systems.remove("trainlet-warm")
        notes.append("warm: n/a (this binary has no --warm-workers)")

    print("machine: %s, %d CPUs, load average %.2f %.2f %.2f at start; trainlet %s"
          % (os.uname().release, os.cpu_count(), *os.getloadavg(), args.trainlet), flush=True)
    for n in notes:
        print(n, flush=True)
    top = tempfile.mkdtemp(prefix="trainlet-bench-ttr-")
    results, failures = {}, []
    port = 31000
    netns.sweep_stale()
    try:
        for rep in range(args.repeat):
            runs = [("worker", None)] if "worker" in systems else []
            runs += [(s, sc) for s in systems if s != "worker" for sc in scenarios]
            for system, scenario in runs:
                busy = wait_quiet(args.quiet, args.quiet_wait)
                load = os.getloadavg()[0]
                label = system if scenario is None else "%s %s" % (system, scenario)
                run_dir = os.path.join(top, "%s-%d" % (label.replace(" ", "-"), rep))
                os.makedirs(run_dir)
                port += 10
                try:
                    if scenario is None:
                        r = {"resume": cold_worker(args, run_dir)}
                    else:
                        r = measure(args, system, scenario, run_dir, port)
                except (RunFailed, AssertionError, RuntimeError, unittest.SkipTest) as e:
                    failures.append("%s run %d: %s" % (label, rep, e))
                    print("  %-22s run %d: FAILED: %s" % (label, rep, e), flush=True)
                    continue
                results.setdefault(label, []).append(r)
                extra = "".join("  %s %.3fs" % (k, r[k]) for k in ("agent", "script", "init", "ddp")
                                if k in r)
                if "resumed_from" in r:
                    extra += "  resumed from step %s" % ",".join(map(str, r["resumed_from"]))
                if "standby" in r:
                    sb = r["standby"]
                    extra += "  standbys: CPU %.2f%% of a core each, RSS %.0f-%.0f MB" % (
                        sb["cpu_pct"], min(sb["rss_mb"]), max(sb["rss_mb"]))
                print("  %-22s run %d: %.3fs%s  (CPUs %.0f%% busy before, load %.2f)"
                      % (label, rep, r["resume"], extra, busy * 100, load), flush=True)
                if not args.keep:
                    shutil.rmtree(run_dir, ignore_errors=True)
    finally:
        netns.sweep_stale()
        if args.keep or failures:
            print("run directories kept: %s" % top)
        else:
            shutil.rmtree(top, ignore_errors=True)

    report(results, systems, scenarios, notes, args)
    for f in failures:
        print("FAILED: " + f)
    return 1 if failures else 0


WHAT = {
    "kill": "kill -9 of 1 of 4 pods -> every survivor stepping in the new world",
    "fail": "a worker exits 1 -> every worker stepping in the new world",
}


PHASES = [("agent", "agent's part: last worker exec'd"),
          ("script", "last new worker's script running"),
          ("init", "last init_process_group done"),
          ("ddp", "last checkpoint loaded, DDP built")]


def report(results, systems, scenarios, notes, args):
    cold = [r["resume"] for r in results.get("worker", [])]
    base = statistics.median(cold) if cold else None

    def row(name, xs):
        m, lo, hi = stats(xs)
        ratio = ("  %5.2fx (%.2f-%.2f)" % (m / base, lo / base, hi / base)) if base else ""
        print("  %-48s %7.3f %7.3f %7.3f%s" % (name, m, lo, hi, ratio))

    print("\nSeconds, median / min / max of %d run(s) each; x = ratio to the one cold "
          "worker's median" % args.repeat)
    print("  %-48s %7s %7s %7s  %s" % ("", "median", "min", "max", "x cold worker"))
    if cold:
        row("one cold worker (import torch, init, all_reduce)", cold)
    for sc in scenarios:
        print(WHAT[sc] + ":")
        for s in systems:
            rs = results.get("%s %s" % (s, sc))
            if s == "worker" or not rs:
                continue
            row(s, [r["resume"] for r in rs])
            for key, what in PHASES:
                if key in rs[0]:
                    row("  " + what, [r[key] for r in rs])
    for n in notes:
        print(n)
    summary = {label: {k: [r[k] for r in rs if k in r]
                       for k in ["resume", "standby"] + [k for k, _ in PHASES]}
               for label, rs in results.items()}
    print(json.dumps({"time_to_resume": summary, "repeat": args.repeat, "notes": notes}))


if __name__ == "__main__":
    sys.exit(main())
