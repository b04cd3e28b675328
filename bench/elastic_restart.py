#!/usr/bin/python3
"""Elastic restart latency of trainlet (and optionally torchrun) on one machine.

For N agents on loopback (--nnodes=2:N, one worker each, default settings):

  restart   time from `kill -9` of one non-zero node's agent to every
            survivor's worker running again with WORLD_SIZE N-1 (the worker
            records time.time() as its first statement; python start-up is
            included, ~30 ms).
  silent    time from SIGSTOP of one agent to the same, with
            --heartbeat-timeout=T: detection (should be ~T) plus the restart.

Usage:
  /usr/bin/python3 bench/elastic_restart.py [--agents 4,32] [--repeat 3]
      [--heartbeat-timeout 2] [--torchrun] [--trainlet build-elastic/trainlet]

Figures and the machine they came from: docs/elastic.md, "Benchmarks".
"""
import argparse
import glob
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
WORKER = os.path.join(ROOT, "e2e", "workers", "elastic_worker.py")
PY = "/usr/bin/python3"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


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
        port, mport = free_port(), free_port()
        env = dict(os.environ, E2E_DIR=self.dir, PYTHONDONTWRITEBYTECODE="1")
        self.procs = []
        for i in range(n):
            argv = [trainlet, "run", "--nnodes=2:%d" % n, "--node-rank=%d" % i,
                    "--node-id=n%d" % i, "--coordinator=127.0.0.1:%d" % port,
                    "--master-port=%d" % mport, "--health-port=0", "--nproc-per-node=1",
                    "--log-level=warning"] + list(extra) + ["--", PY, WORKER]
            log = open(os.path.join(self.dir, "n%d.log" % i), "wb")
            self.procs.append(subprocess.Popen(argv, env=dict(env, E2E_NODE="n%d" % i),
                                               stdout=log, stderr=log,
                                               start_new_session=True))

    def starts(self, restart):
        out = []
        for p in glob.glob(os.path.join(self.dir, "starts", "r%d-rank*.json" % restart)):
            try:
                with open(p) as f:
                    out.append(json.load(f))
            except (OSError, ValueError):
                pass
        return out

    def close(self):
        open(os.path.join(self.dir, "release"), "w").close()
        for p in self.procs:
            try:
                p.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait()
        shutil.rmtree(self.dir, ignore_errors=True)


def measure(trainlet, n, how, hb):
    extra = ["--heartbeat-timeout=%gs" % hb] if how == "silent" else []
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
        return took
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


def records(d, kind):
    out = []
    for p in glob.glob(os.path.join(d, kind, "*.json")):
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
    port = free_port()
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
        for p in procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()
        shutil.rmtree(d, ignore_errors=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", default="4,32")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--heartbeat-timeout", type=float, default=2.0)
    ap.add_argument("--trainlet", default=os.path.join(ROOT, "build-elastic", "trainlet"))
    ap.add_argument("--torchrun", action="store_true", help="also measure torchrun (slow)")
    a = ap.parse_args()
    print("machine: %s, %d CPUs" % (os.uname().release, os.cpu_count()))
    for n in [int(x) for x in a.agents.split(",")]:
        for how in ("restart", "silent"):
            xs = [measure(a.trainlet, n, how, a.heartbeat_timeout) for _ in range(a.repeat)]
            label = ("kill -9 -> restarted" if how == "restart" else
                     "SIGSTOP -> restarted (heartbeat timeout %gs)" % a.heartbeat_timeout)
            print("trainlet %3d agents  %-45s median %.3fs  (min %.3f, max %.3f)" %
                  (n, label, statistics.median(xs), min(xs), max(xs)), flush=True)
        if a.torchrun and n <= 4:
            for tuned in (False, True):
                t = measure_torchrun(n, tuned)
                print("torchrun %3d agents  kill -9 -> restarted (%s)  %.3fs" %
                      (n, "tuned" if tuned else "default", t), flush=True)


if __name__ == "__main__":
    sys.exit(main())
