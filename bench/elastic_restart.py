#!/usr/bin/python3
"""Elastic restart latency of trainlet and torchrun on one machine.

trainlet, N agents on loopback (--nnodes=2:N, one worker each,
e2e/workers/elastic_worker.py, default settings except as noted):

  restart   time from `kill -9` of the last node's agent to every survivor's
            worker running again with WORLD_SIZE N-1 (the worker records
            time.time() as its first statement; Python start-up, ~30 ms, is
            included).
  silent    time from SIGSTOP of the last node's agent to the same, with
            --heartbeat-timeout=T: detection (should be ~T) plus the restart.
            Detection alone is also printed: SIGSTOP -> the coordinator's
            (node 0's) `lost node` log line (ms resolution).

torchrun (--torchrun; torch 1.13 `python3 -m torch.distributed.run`, c10d
backend, --nnodes=2:N, --nproc_per_node=1, --max_restarts=3, N=4 by default):

  time from `kill -9` of the last agent's process group (the torchrun process
  and its worker, which torchrun starts in its own group) to every survivor's
  new worker started with WORLD_SIZE N-1. The worker also records time.time()
  as its first statement, then joins a gloo process group and all-reduces a
  scalar every 20 ms: torchrun's agent only watches its own workers, so it
  learns of a lost node when its worker's collective fails (as in a real
  job), then re-rendezvouses. The kill comes once all N workers have done
  their first all-reduce in a world of N.
  Settings: "default" = torchrun's defaults (--monitor_interval=5,
  last_call_timeout 30 s); "tuned" = --monitor_interval=0.1 and
  --rdzv_conf=join_timeout=60,last_call_timeout=1,close_timeout=1. The keep-
  alive that evicts the dead node from the c10d rendezvous state (5 s interval
  x 3 attempts) is hard-coded in torch 1.13 (DynamicRendezvousHandler.
  from_backend), so no setting shortens that part.
  Two torchrun 1.13 pitfalls, worked around here:
  - On Python 3.11 torchrun crashes with its default --redirects/--tee of "0"
    (see bench/rendezvous_launch.py); we pass --redirects 9:1 --tee 9:1.
  - With --rdzv_endpoint=127.0.0.1:PORT every agent on this machine thinks it
    should host the TCPStore (the endpoint "matches" this host) and relies on
    a failed bind to fall back to a client; we pass rdzv_conf is_host=1 to the
    first agent and is_host=0 to the others.
  (The script's first version had neither, and every agent died at once, so
  "the first round" never came up.)

Usage:
  /usr/bin/python3 bench/elastic_restart.py [--agents 4,32] [--repeat 3]
      [--modes restart,silent] [--heartbeat-timeout 2]
      [--trainlet build-bench/trainlet] [--flags '--preflight=exclude ...']
      [--torchrun [--torchrun-agents 4] [--torchrun-repeat 2]
                  [--torchrun-settings default,tuned] [--keep-logs DIR]]

Today's figures: docs/benchmarks.md; every run and the machine it came from:
docs/benchmarks-history.md, "Elastic restart".
"""
import argparse
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

import benchlib

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "e2e"))
import harness  # noqa: E402 (e2e helpers: logged_at)

WORKER = os.path.join(ROOT, "e2e", "workers", "elastic_worker.py")
PY = "/usr/bin/python3"



def wait_for(pred, timeout, what):
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise RuntimeError("timed out waiting for " + what)
        time.sleep(0.005)


class Job:
    def __init__(self, trainlet, n, extra=()):
        self.dir = tempfile.mkdtemp(prefix="trainlet-bench-")
        self.n = n
        port, mport = benchlib.free_port(), benchlib.free_port()
        env = dict(os.environ, E2E_DIR=self.dir, PYTHONDONTWRITEBYTECODE="1")
        self.procs = []
        for i in range(n):
            argv = [trainlet, "run", "--nnodes=2:%d" % n, "--node-rank=%d" % i,
                    "--node-id=n%d" % i, "--coordinator=127.0.0.1:%d" % port,
                    "--master-port=%d" % mport, "--health-port=0", "--nproc-per-node=1",
                    # All n agents in the first round even when starting them
                    # takes longer than the default 500 ms last call (32 at
                    # once on 2 CPUs); a restart does not pay the last call.
                    "--last-call=5s",
                    "--log-level=warning"] + list(extra) + ["--", PY, WORKER]
            log = open(os.path.join(self.dir, "n%d.log" % i), "wb")
            self.procs.append(subprocess.Popen(argv, env=dict(env, E2E_NODE="n%d" % i),
                                               stdout=log, stderr=log,
                                               start_new_session=True))

    def starts(self, restart):
        return records(self.dir, "starts", "r%d-rank*.json" % restart)

    def close(self):
        open(os.path.join(self.dir, "release"), "w").close()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def detected_at(job, node):
    """Wall time (s) of the coordinator's (node 0's) `node <node> (rank R) lost:` line:
    the moment the heartbeat timeout fired (the log has ms resolution)."""
    with open(os.path.join(job.dir, "n0.log"), errors="replace") as f:
        at = harness.logged_at(f.read(), r"node %s (\(ranks? [0-9-]+\) )?lost:" % re.escape(node))
    return float("nan") if at is None else at


def measure(trainlet, n, how, hb, flags=()):
    extra = (["--heartbeat-timeout=%gs" % hb] if how == "silent" else []) + list(flags)
    job = Job(trainlet, n, extra)
    try:
        wait_for(lambda: len(job.starts(0)) == n, 60, "%d workers" % n)
        victim = job.procs[n - 1]
        t0 = time.time()
        os.kill(victim.pid, signal.SIGKILL if how == "restart" else signal.SIGSTOP)
        wait_for(lambda: len(job.starts(1)) == n - 1, 60, "%d restarted workers" % (n - 1))
        recs = job.starts(1)
        assert all(r["world_size"] == n - 1 for r in recs), recs
        took = max(r["t"] for r in recs) - t0
        if how == "silent":
            os.kill(victim.pid, signal.SIGCONT)
            return took, detected_at(job, "n%d" % (n - 1)) - t0
        return took, None
    finally:
        job.close()


TORCHRUN_WORKER = r"""
import json, os, time
t = time.time()  # first statement, like e2e/workers/elastic_worker.py
d = os.environ["E2E_DIR"]
rec = {"t": t, "restart": int(os.environ["TORCHELASTIC_RESTART_COUNT"]),
       "rank": int(os.environ["RANK"]), "world_size": int(os.environ["WORLD_SIZE"]),
       "pid": os.getpid()}
def put(kind):
    p = os.path.join(d, kind, "%d.json" % os.getpid())
    os.makedirs(os.path.dirname(p), exist_ok=True)
    with open(p + ".tmp", "w") as f:
        json.dump(rec, f)
    os.rename(p + ".tmp", p)
put("starts")
# A real job's workers are in a collective with the lost node's workers; that is
# how torchrun learns of the loss (its agent only watches its own workers).
from datetime import timedelta
import torch, torch.distributed as dist
dist.init_process_group("gloo", timeout=timedelta(seconds=60))
x = torch.zeros(1)
dist.all_reduce(x)
put("ready")
while not os.path.exists(os.path.join(d, "release")):
    dist.all_reduce(x)  # raises once a peer's worker is gone
    time.sleep(0.02)
"""

TORCHRUN_TUNED = ["--monitor_interval=0.1",
                  "--rdzv_conf=join_timeout=60,last_call_timeout=1,close_timeout=1"]


def records(d, kind, pattern="*.json"):
    """The JSON records workers wrote under d/kind (half-written ones skipped)."""
    out = []
    for p in glob.glob(os.path.join(d, kind, pattern)):
        try:
            with open(p) as f:
                out.append(json.load(f))
        except (OSError, ValueError):
            pass
    return out


def measure_torchrun(n, tuned, keep_logs=None):
    """kill -9 of one torchrun agent (and its worker: same process group) ->
    every survivor's new worker started with WORLD_SIZE n-1."""
    d = tempfile.mkdtemp(prefix="torchrun-bench-")
    script = os.path.join(d, "w.py")
    with open(script, "w") as f:
        f.write(TORCHRUN_WORKER)
    port = benchlib.free_port()
    env = dict(os.environ, E2E_DIR=d, OMP_NUM_THREADS="1")
    env.pop("LOGLEVEL", None)
    procs = []
    for i in range(n):
        # The endpoint is 127.0.0.1, which every agent here "matches", so each
        # would try to host the TCPStore (and fall back to a client when the bind
        # fails); say explicitly which one hosts it.
        conf = "is_host=%d" % (1 if i == 0 else 0)
        argv = [PY, "-m", "torch.distributed.run", "--nnodes=2:%d" % n, "--nproc_per_node=1",
                "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:%d" % port,
                "--rdzv_id=bench", "--max_restarts=3",
                # torchrun 1.13 on Python 3.11 crashes with the default "0" here
                # (see bench/rendezvous_launch.py); local rank 9 does not exist.
                "--redirects", "9:1", "--tee", "9:1"]
        if tuned:
            argv += [TORCHRUN_TUNED[0], TORCHRUN_TUNED[1] + "," + conf]
        else:
            argv += ["--rdzv_conf=" + conf]
        argv.append(script)
        log = open(os.path.join(d, "n%d.log" % i), "wb")
        procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=log,
                                      start_new_session=True))
    try:
        def all_ready():
            rs = [r for r in records(d, "ready") if r["world_size"] == n]
            return len({r["rank"] for r in rs}) == n
        wait_for(all_ready, 180, "torchrun's first round (%d workers ready)" % n)
        t0 = time.time()
        os.killpg(procs[n - 1].pid, signal.SIGKILL)
        new = lambda: [r for r in records(d, "starts") if r["t"] > t0]
        def restarted():
            rs = [r for r in new() if r["world_size"] == n - 1]
            return len({r["rank"] for r in rs}) == n - 1
        wait_for(restarted, 180, "torchrun restart")
        rs = [r for r in new() if r["world_size"] == n - 1]
        return max(r["t"] for r in rs) - t0
    except Exception:
        if keep_logs:
            shutil.copytree(d, keep_logs, dirs_exist_ok=True)
        raise
    finally:
        open(os.path.join(d, "release"), "w").close()
        benchlib.kill_groups(procs)
        shutil.rmtree(d, ignore_errors=True)


def summary(xs):
    return "median %.3fs  (min %.3f, max %.3f, n=%d)" % (statistics.median(xs), min(xs),
                                                        max(xs), len(xs))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", default="4,32")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--modes", default="restart,silent",
                    help="trainlet scenarios: restart (kill -9), silent (SIGSTOP)")
    ap.add_argument("--heartbeat-timeout", type=float, default=2.0)
    ap.add_argument("--trainlet", default=os.path.join(ROOT, "build-bench", "trainlet"))
    ap.add_argument("--torchrun", action="store_true",
                    help="also measure torchrun, 4 agents only (slow: ~45 s a default run)")
    ap.add_argument("--torchrun-agents", type=int, default=4)
    ap.add_argument("--torchrun-repeat", type=int, default=2)
    ap.add_argument("--torchrun-settings", default="default,tuned")
    ap.add_argument("--keep-logs", default=None, help="copy a failed torchrun run's dir here")
    ap.add_argument("--flags", default="",
                    help="more `trainlet run` flags for every agent, space separated "
                         "(e.g. '--preflight=exclude --preflight-interval=0s')")
    a = ap.parse_args()
    print("machine: %s, %d CPUs" % (os.uname().release, os.cpu_count()), flush=True)
    modes = [m for m in a.modes.split(",") if m]
    for n in [int(x) for x in a.agents.split(",") if x]:
        for how in modes:
            xs, ds = [], []
            for i in range(a.repeat):
                took, det = measure(a.trainlet, n, how, a.heartbeat_timeout, a.flags.split())
                xs.append(took)
                if det is not None:
                    ds.append(det)
                print("  trainlet %d agents %s run %d: %.3fs%s" % (
                    n, how, i, took, "" if det is None else
                    " (heartbeat timeout fired after %.3fs)" % det), flush=True)
            label = ("kill -9 -> restarted" if how == "restart" else
                     "SIGSTOP -> restarted (heartbeat timeout %gs)" % a.heartbeat_timeout)
            print("trainlet %3d agents  %-45s %s" % (n, label, summary(xs)), flush=True)
            if ds:
                print("trainlet %3d agents  %-45s %s" % (
                    n, "SIGSTOP -> coordinator declares it lost", summary(ds)), flush=True)
    if a.torchrun:
        n = a.torchrun_agents
        for setting in a.torchrun_settings.split(","):
            xs = []
            for i in range(a.torchrun_repeat):
                xs.append(measure_torchrun(n, setting == "tuned", a.keep_logs))
                print("  torchrun %d agents %s run %d: %.3fs" % (n, setting, i, xs[-1]),
                      flush=True)
            print("torchrun %3d agents  %-45s %s" % (
                n, "kill -9 -> restarted (%s)" % setting, summary(xs)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
