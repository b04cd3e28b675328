#!/usr/bin/env python3
"""What --progress-from-output costs a whole agent (docs/progress.md,
"Progress from output"; docs/benchmarks.md): `trainlet run --prefix-output`
with one worker that prints --rate lines a second (100 lines per write,
paced) for --seconds, the agent's stdout and stderr to files as in a pod.
Each scenario runs with --progress-from-output=off (the peer: the agent
relays the same output and reads nothing in it) and with auto (or --value),
interleaved, --repeat times. Measured: the agent's CPU (every thread's run time
from /proc/PID/task/*/schedstat) while the worker prints, as a share of one
core, and whether the agent's stdout is, prefixes aside, exactly what the
worker printed (the output is never changed). The issue's bound: auto adds
at most 1% of a core at 10,000 lines a second.

With --relay unchanged there is no --prefix-output: the peer, `off`, is the
worker writing straight to the agent's stdout (the file), and the value is
set explicitly, so that the agent relays the output unchanged to read it
(docs/progress.md): the figure is what asking for progress from output costs
a job that does not prefix its output, relay included, and the agent's stdout
must be byte for byte what the worker printed.

Scenarios: `noise`, log lines no format matches (auto's worst case: every
matcher looks at every line, forever); `hf`, Hugging Face Trainer's logged
dicts with 9 other lines between them and the tqdm bar redrawn on stderr
every 10 lines (auto picks hf at once).

usage: /usr/bin/python3 bench/progress_output.py [--trainlet build/trainlet]
           [--rate 10000] [--seconds 10] [--repeat 3] [--scenarios noise,hf]
           [--value auto] [--relay prefixed|unchanged]"""

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

# The worker: argv SCENARIO RATE SECONDS DIR. Deterministic output, so that
# the bench can rebuild what it printed.
WORKER = r'''
import os, sys, time
scenario, rate, seconds, d = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
def line(i):
    if scenario == "hf" and i % 10 == 0:
        return "{'loss': %.4f, 'grad_norm': 1.5, 'learning_rate': 5e-05, 'epoch': %.2f}\n" % (
            1.0 / (i + 1), i / 1e6)
    return ("2026-11-29 12:00:00,123 INFO data.loader: prefetched shard %05d of 00512 "
            "(1048576 samples, 12.3 MiB/s)\n" % (i % 100000))
open(os.path.join(d, "started"), "w").close()
start = time.monotonic()
i = 0
while time.monotonic() - start < seconds:
    sys.stdout.write("".join(line(i + k) for k in range(100)))
    sys.stdout.flush()
    if scenario == "hf":
        for k in range(10):
            n = (i + k * 10) // 10
            sys.stderr.write("\r %d%%|#    | %d/1000000 [00:01<00:02,  9.50it/s]" % (n // 10000, n))
        sys.stderr.flush()
    i += 100
    delay = start + i / rate - time.monotonic()
    if delay > 0:
        time.sleep(delay)
open(os.path.join(d, "lines"), "w").write(str(i))
open(os.path.join(d, "finished"), "w").close()
while not os.path.exists(os.path.join(d, "exit")):
    time.sleep(0.01)
'''


def cpu_seconds(pid):
    """The CPU time of every thread of `pid` so far, in ns from each
    /proc/PID/task/TID/schedstat (the clock ticks of /proc/PID/stat are too
    coarse for a few ms a second). A thread that exited is not counted: the
    agent's threads here live as long as it does."""
    total = 0
    for tid in os.listdir("/proc/%d/task" % pid):
        try:
            with open("/proc/%d/task/%s/schedstat" % (pid, tid)) as f:
                total += int(f.read().split()[0])
        except OSError:
            pass
    return total / 1e9


def wait_for(path, proc, timeout):
    deadline = time.monotonic() + timeout
    while not os.path.exists(path):
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("no %s (agent exit %s)" % (path, proc.poll()))
        time.sleep(0.005)


def expected_stdout(scenario, lines):
    out = []
    for i in range(lines):
        if scenario == "hf" and i % 10 == 0:
            out.append("{'loss': %.4f, 'grad_norm': 1.5, 'learning_rate': 5e-05, 'epoch': %.2f}\n"
                       % (1.0 / (i + 1), i / 1e6))
        else:
            out.append("2026-11-29 12:00:00,123 INFO data.loader: prefetched shard %05d of 00512 "
                       "(1048576 samples, 12.3 MiB/s)\n" % (i % 100000))
    return "".join(out)


def run_once(args, scenario, value):
    with tempfile.TemporaryDirectory(prefix="trainlet-bench-") as d:
        worker = os.path.join(d, "worker.py")
        with open(worker, "w") as f:
            f.write(WORKER)
        out_path, err_path = os.path.join(d, "out"), os.path.join(d, "err")
        with open(out_path, "w") as out, open(err_path, "w") as err:
            prefixed = args.relay == "prefixed"
            agent = subprocess.Popen(
                [args.trainlet, "run", "--nnodes=1"] + (["--prefix-output"] if prefixed else []) +
                ["--progress-from-output=" + value, "--", sys.executable, worker, scenario,
                 str(args.rate), str(args.seconds), d],
                stdout=out, stderr=err, stdin=subprocess.DEVNULL)
            try:
                wait_for(os.path.join(d, "started"), agent, 30)
                c0, t0 = cpu_seconds(agent.pid), time.monotonic()
                wait_for(os.path.join(d, "finished"), agent, args.seconds + 30)
                c1, t1 = cpu_seconds(agent.pid), time.monotonic()
                open(os.path.join(d, "exit"), "w").close()
                code = agent.wait(30)
            finally:
                if agent.poll() is None:
                    agent.kill()
                    agent.wait()
        if code != 0:
            raise RuntimeError("agent exited %d: %s" % (code, open(err_path).read()[-2000:]))
        with open(os.path.join(d, "lines")) as f:
            lines = int(f.read())
        with open(out_path) as f:
            relayed = f.read()
        if prefixed:
            relayed = "".join(l[len("[rank 0] "):] if l.startswith("[rank 0] ") else l
                              for l in relayed.splitlines(True))
        unchanged = relayed == expected_stdout(scenario, lines)
        return 100.0 * (c1 - c0) / (t1 - t0), lines / (t1 - t0), unchanged


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--trainlet", default=os.path.join(ROOT, "build", "trainlet"))
    p.add_argument("--rate", type=int, default=10000)
    p.add_argument("--seconds", type=float, default=10)
    p.add_argument("--repeat", type=int, default=3)
    p.add_argument("--scenarios", default="noise,hf")
    p.add_argument("--value", default="auto")
    p.add_argument("--relay", choices=("prefixed", "unchanged"), default="prefixed")
    args = p.parse_args()
    if args.relay == "unchanged" and args.value == "off":
        p.error("--relay unchanged compares off (no relay) with a value that relays: not off")
    print("relay: %s (%s)" % (args.relay, "--prefix-output" if args.relay == "prefixed" else
                              "no --prefix-output; off: the worker writes the file directly"))
    print("scenario  value  agent CPU % of a core (median, min..max)  lines/s  output unchanged")
    for scenario in args.scenarios.split(","):
        results = {"off": [], args.value: []}
        for _ in range(args.repeat):
            for value in ("off", args.value):
                results[value].append(run_once(args, scenario, value))
        for value, runs in results.items():
            cpu = [r[0] for r in runs]
            print("%-8s  %-5s  %6.2f (%.2f..%.2f)  %8.0f  %s" % (
                scenario, value, statistics.median(cpu), min(cpu), max(cpu),
                statistics.median(r[1] for r in runs), all(r[2] for r in runs)))
        added = statistics.median(r[0] for r in results[args.value]) - statistics.median(
            r[0] for r in results["off"])
        print("%-8s  %s adds %.2f%% of a core" % (scenario, args.value, added))


if __name__ == "__main__":
    main()
