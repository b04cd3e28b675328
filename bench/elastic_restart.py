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
d = os.environ["E2E_DIR"]; r = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
p = os.path.join(d, "starts", "r%d-rank%s.json" % (r, os.environ["RANK"]))
os.makedirs(os.path.dirname(p), exist_ok=True)
json.dump({"t": time.time(), "world_size": int(os.environ["WORLD_SIZE"])}, open(p + ".tmp", "w"))
os.rename(p + ".tmp", p)
while not os.path.exists(os.path.join(d, "release")): time.sleep(0.02)
"""


def measure_torchrun(n, tuned):
    d = tempfile.mkdtemp(prefix="torchrun-bench-")
    script = os.path.join(d, "w.py")
    with open(script, "w") as f:
        f.write(TORCHRUN_WORKER)
    port = free_port()
    extra = (["--rdzv_conf=join_timeout=10,last_call_timeout=1,close_timeout=1,timeout=10"]
             if tuned else [])
    env = dict(os.environ, E2E_DIR=d)
    procs = []
    for i in range(n):
        argv = [PY, "-m", "torch.distributed.run", "--nnodes=2:%d" % n, "--nproc_per_node=1",
                "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:%d" % port,
                "--rdzv_id=bench", "--max_restarts=3", "--monitor_interval=%s" % (
                    "0.1" if tuned else "5")] + extra + [script]
        log = open(os.path.join(d, "n%d.log" % i), "wb")
        procs.append(subprocess.Popen(argv, env=env, stdout=log, stderr=log,
                                      start_new_session=True))
    starts = lambda r: glob.glob(os.path.join(d, "starts", "r*-rank*.json"))
    try:
        wait_for(lambda: len(starts(0)) == n, 120, "torchrun workers")
        before = set(starts(0))
        t0 = time.time()
        os.killpg(procs[n - 1].pid, signal.SIGKILL)
        def restarted():
            recs = []
            for p in set(starts(0)) - before:
                try:
                    recs.append(json.load(open(p)))
                except (OSError, ValueError):
                    return False
            return len(recs) >= n - 1 and all(r["world_size"] == n - 1 for r in recs)
        wait_for(restarted, 300, "torchrun restart")
        return max(json.load(open(p))["t"] for p in set(starts(0)) - before) - t0
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
