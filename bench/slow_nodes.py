#!/usr/bin/python3
"""Slow nodes (docs/slow-nodes.md): how soon a slow node is named, how often a
healthy job names one, and what the raw signals look like.

The job: 4 pod-like hosts (e2e/netns.py, hostnames pod0..pod3), each in a
cgroup v1 `cpu` cgroup of its own, each running `trainlet run --nnodes=4
--nproc-per-node=1` with one torch 1.13 gloo DDP worker
(e2e/workers/slow_ddp.py: a Linear(--dim, --dim) on a batch of --batch rows,
its gradient all_reduce, a sleep of --step-sleep; torch threads 1). The
sleep keeps the 4 healthy workers well below the machine's 2 CPUs.

Modes (--modes, comma-separated; default detect,healthy):
  detect   --repeat jobs with --slow-nodes=warn --slow-node-window=--window
           (default 30s, trainlet's default):
           once every worker stepped and --settle seconds passed, pod3's
           cgroup is held to --cpu-quota of a CPU (about 2x its step time;
           printed). Timed from that write to the first "slow node ... is slow
           (cpu)" line of any agent's log (their wall clock stamps, one
           kernel's clock); a job that names nothing in --detect-timeout s, or
           names another node first, counts as a miss.
  healthy  one job with --slow-nodes=warn for --minutes, no slowdown: every
           "is slow" line in any agent's log is a false alarm (must be 0).
  raw      no judge at all (--slow-nodes=off): the raw signals the agents
           sample, read from outside every 10 s (/proc/PID/task/*/schedstat of
           each worker, its cgroup's cpu.stat throttled_time, `ss -tin` of its
           sockets), over --windows windows each of: healthy, pod3 held to
           --cpu-quota, then (quota lifted) pod3's veth limited by tc tbf to
           --rate on what it sends, then both ways. Prints one row per host
           and window: per mille of the window on a CPU, runnable waiting,
           throttled; the highest RTT, the bytes acked per second, the lowest
           delivery rate of the sockets that sent 64 KiB; the busiest
           socket's busy time (tcp_info, per mille); retransmits; the host's
           step time. docs/slow-nodes.md has one such run.

Usage (as root: network namespaces, cgroups, tc):
  /usr/bin/python3 bench/slow_nodes.py [--trainlet build/trainlet]
      [--modes detect,healthy,raw] [--repeat 3] [--minutes 10] [--window 30s]
      [--cpu-quota 0.05] [--rate 40mbit] [--dim 256] [--batch 64] [--step-sleep 0.05]
Exit status: 0; 1 when a slowdown was missed or a healthy job named a node;
77 when the hosts cannot be built here (the reason is printed).

Today's figures: docs/benchmarks.md ("Slow nodes").
"""

import argparse
import json
import os
import re
import statistics
import sys
import tempfile
import time

import benchlib
from benchlib import ROOT, harness
import slow_support  # noqa: E402 (e2e/, on the path through benchlib)

EXIT_SKIP = 77
SLOW_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\S+Z) [DIWE] trainlet\[[^\]\n]*\] .*?"
                       r"slow node.*?node (\S+) is slow \((\w+)\)", re.M)


def named(agents):
    """[(wall time, node, cause)] of every "is slow" line in the agents' logs."""
    found = []
    for a in agents:
        for stamp, node, cause in SLOW_LINE.findall(a.stderr):
            found.append((harness.log_time(stamp), node, cause))
    return sorted(found)


def job_env(args):
    return {"E2E_DIM": args.dim, "E2E_BATCH": args.batch, "E2E_STEP_SLEEP": args.step_sleep}


def new_job(h, args, tag):
    job = slow_support.SlowJob(h, job_id="bench-%s" % tag, trainlet=args.trainlet)
    return job


def settle(job, args, agents):
    job.wait_training(120)
    time.sleep(args.settle)
    for a in agents:
        if not a.running():
            raise RuntimeError("an agent exited early:\n%s" % a.describe())


def detect_once(args, index):
    h = benchlib.BenchHarness(tempfile.mkdtemp(prefix="trainlet-bench-slow-"))
    try:
        job = new_job(h, args, "d%d" % index)
        agents = job.start(["--slow-nodes=warn", "--slow-node-window=%s" % args.window],
                           env=job_env(args))
        settle(job, args, agents)
        victim = job.hosts[-1]
        before = time.monotonic()
        healthy = {x.name: job.step_time(x, before - args.settle) for x in job.hosts}
        started = time.time()
        job.limit_cpu(victim, args.cpu_quota)
        deadline = time.monotonic() + args.detect_timeout
        result = None
        while time.monotonic() < deadline:
            lines = named(agents)
            if lines:
                result = lines[0]
                break
            time.sleep(0.2)
        slowed = job.step_time(victim, before + 5)
        job.stop()
        early = [x for x in named(agents) if x[0] < started]
        return {"named": result, "seconds": result[0] - started if result else None,
                "victim": victim.name, "early": early,
                "step_s_before": healthy, "step_s_after": slowed}
    finally:
        h.close()


def healthy_once(args):
    h = benchlib.BenchHarness(tempfile.mkdtemp(prefix="trainlet-bench-slow-"))
    try:
        job = new_job(h, args, "healthy")
        agents = job.start(["--slow-nodes=warn", "--slow-node-window=%s" % args.window],
                           env=dict(job_env(args), E2E_SECONDS=args.minutes * 60 + 600))
        settle(job, args, agents)
        started = time.monotonic()
        end = started + args.minutes * 60
        while time.monotonic() < end:
            for a in agents:
                if not a.running():
                    raise RuntimeError("an agent exited:\n%s" % a.describe())
            time.sleep(1)
        steps = {x.name: job.step_time(x, started) for x in job.hosts}
        alarms = named(agents)
        job.stop()
        return {"minutes": args.minutes, "false_alarms": alarms, "step_s": steps}
    finally:
        h.close()


def raw(args):
    h = benchlib.BenchHarness(tempfile.mkdtemp(prefix="trainlet-bench-slow-"))
    rows = []
    try:
        job = new_job(h, args, "raw")
        agents = job.start(["--slow-nodes=off"], env=job_env(args))
        settle(job, args, agents)
        pids = {x.name: job.worker_pid(x) for x in job.hosts}
        victim = job.hosts[-1]
        phases = [("healthy", lambda: None),
                  ("cpu %.2f" % args.cpu_quota, lambda: job.limit_cpu(victim, args.cpu_quota)),
                  ("out %s" % args.rate, lambda: (job.cgroups[victim.name].unlimit(),
                                                  job.limit_rate(victim, args.rate, both=False))),
                  ("both %s" % args.rate, lambda: job.limit_rate(victim, args.rate))]
        for phase, action in phases:
            action()
            time.sleep(3)  # let the step time follow
            samples = {x.name: slow_support.RawSample(job, x, pids[x.name]) for x in job.hosts}
            for w in range(args.windows):
                time.sleep(args.window_seconds)
                now = {x.name: slow_support.RawSample(job, x, pids[x.name]) for x in job.hosts}
                for x in job.hosts:
                    fig = slow_support.window(samples[x.name], now[x.name])
                    fig.update(phase=phase, window=w, host=x.name,
                               step_ms=1000 * (job.step_time(x, samples[x.name].t) or 0))
                    rows.append(fig)
                    print("%-12s w%d %-5s ran %4.0f waited %4.0f throttled %4.0f  rtt %6.2f ms  "
                          "acked %6.2f MB/s  rate_min %8.1f Mbit/s  busy %4.0f  retrans %3d  "
                          "step %6.1f ms"
                          % (phase, w, x.name, fig["ran"], fig["waited"], fig["throttled"],
                             fig["rtt_ms"], fig["acked_MBps"], fig["rate_min_Mbps"], fig["busy"],
                             fig["retrans"], fig["step_ms"]), flush=True)
                samples = now
        job.stop()
    finally:
        h.close()
    print(json.dumps({"raw": rows}))
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainlet", default=os.path.join(ROOT, "build", "trainlet"))
    ap.add_argument("--modes", default="detect,healthy")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--minutes", type=float, default=10)
    ap.add_argument("--window", default="30s", help="--slow-node-window of the jobs (default: "
                    "trainlet's default)")
    ap.add_argument("--detect-timeout", type=float, default=120)
    ap.add_argument("--settle", type=float, default=5)
    ap.add_argument("--cpu-quota", type=float, default=0.05,
                    help="of one CPU; the worker uses about 0.1 (its step time about doubles)")
    ap.add_argument("--rate", default="40mbit", help="tbf rate (about 2x the step time)")
    ap.add_argument("--dim", type=int, default=256)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--step-sleep", type=float, default=0.05)
    ap.add_argument("--windows", type=int, default=3, help="raw: windows per phase")
    ap.add_argument("--window-seconds", type=float, default=10, help="raw: seconds per window")
    args = ap.parse_args()
    args.trainlet = os.path.abspath(args.trainlet)
    modes = args.modes.split(",")
    if not set(modes) <= {"detect", "healthy", "raw"}:
        ap.error("--modes: detect, healthy or raw")
    reason = slow_support.unsupported_reason()
    if reason:
        print("skipped: %s" % reason)
        return EXIT_SKIP
    failed = False
    summary = {"commit": benchlib_commit(), "window": args.window, "cpu_quota": args.cpu_quota}
    if "raw" in modes:
        raw(args)
    if "detect" in modes:
        runs = []
        for i in range(args.repeat):
            r = detect_once(args, i)
            runs.append(r)
            ok = r["named"] and r["named"][1:] == (r["victim"], "cpu") and not r["early"]
            failed |= not ok
            print("detect %d: %s after %s s; step time before %s, after %s s%s" % (
                i, r["named"], "%.1f" % r["seconds"] if r["seconds"] is not None else "-",
                {k: round(v, 4) if v else v for k, v in r["step_s_before"].items()},
                round(r["step_s_after"], 4) if r["step_s_after"] else None,
                "" if ok else "  MISS"), flush=True)
        times = [r["seconds"] for r in runs if r["seconds"] is not None]
        summary["detect_s"] = [round(t, 1) for t in times]
        summary["detect_median_s"] = round(statistics.median(times), 1) if times else None
    if "healthy" in modes:
        r = healthy_once(args)
        failed |= bool(r["false_alarms"])
        print("healthy %.1f min: %d false alarm(s) %s; step times %s" % (
            r["minutes"], len(r["false_alarms"]), r["false_alarms"],
            {k: round(v, 4) if v else v for k, v in r["step_s"].items()}), flush=True)
        summary["healthy_minutes"] = r["minutes"]
        summary["false_alarms"] = len(r["false_alarms"])
    print(json.dumps(summary))
    return 1 if failed else 0


def benchlib_commit():
    try:
        import subprocess
        return subprocess.run(["git", "-C", ROOT, "rev-parse", "--short", "HEAD"],
                              stdout=subprocess.PIPE, text=True).stdout.strip()
    except OSError:
        return None


if __name__ == "__main__":
    sys.exit(main())
