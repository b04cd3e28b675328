#!/usr/bin/python3
"""Start-up of `trainlet run --nnodes=1 -- true` against `tini -s -- true`,
side by side in one run (issue 10: within 5 ms, median).

Each repeat runs every command once, in turn (tini, trainlet, and any
--compare binary), so a machine that slows down slows all of them alike.
What is timed: fork+exec of the command by this script to its reaping
(time.perf_counter around subprocess.run), its output thrown away. Also
printed: `trainlet version` (the binary's own start-up), the binary's size and
whether it is static.

  /usr/bin/python3 bench/startup.py [--trainlet build/trainlet] [--runs 200]
      [--compare OTHER_TRAINLET] [--budget-ms 5] [--container]

--container runs every command (tini too) as PID 1 of a new PID namespace
with its own /proc (`unshare --pid --fork --mount-proc`), as in a pod: the
agent's exit sweep for adopted orphans reads every process in /proc, which on
a shared host holds hundreds of them and in a pod a handful.

Exit status 0 when trainlet's median is within --budget-ms of tini's, 1
otherwise, 2 when a command fails.
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import time


def timed(argv, env):
    start = time.perf_counter()
    rc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL, env=env).returncode
    elapsed = (time.perf_counter() - start) * 1000.0
    if rc != 0:
        sys.exit("startup: %s exited %d" % (" ".join(argv), rc))
    return elapsed


def linkage(path):
    out = subprocess.run([path, "version"], stdout=subprocess.PIPE, text=True).stdout
    for line in out.splitlines():
        if line.startswith("linkage: "):
            return line[len("linkage: "):]
    return "unknown (no linkage line: an older build)"


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--trainlet", default=os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "build", "trainlet"))
    ap.add_argument("--compare", action="append", default=[],
                    help="another trainlet binary to time beside it (e.g. a dynamic build)")
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--budget-ms", type=float, default=5.0)
    ap.add_argument("--container", action="store_true",
                    help="each command as PID 1 of its own PID namespace and /proc (root)")
    args = ap.parse_args()
    tini = shutil.which("tini")
    if tini is None:
        sys.exit("startup: tini not found (apt-get install tini; scripts/setup.sh installs it)")
    env = dict(os.environ, TRAINLET_LOG_LEVEL="warning")
    binaries = [args.trainlet] + args.compare
    commands = [("tini -s -- true", [tini, "-s", "--", "true"])]
    for b in binaries:
        commands.append(("%s run --nnodes=1 -- true" % b, [b, "run", "--nnodes=1", "--", "true"]))
    for b in binaries:
        commands.append(("%s version" % b, [b, "version"]))
    if args.container:
        prefix = ["unshare", "--pid", "--fork", "--mount-proc", "--"]
        commands = [(name, prefix + argv) for name, argv in commands]
    times = {name: [] for name, _ in commands}
    for _ in range(3):  # warm-up: page cache, lazily bound symbols
        for _, argv in commands:
            timed(argv, env)
    for _ in range(args.runs):
        for name, argv in commands:
            times[name].append(timed(argv, env))

    print("machine: %d CPUs, load average %s; %d runs each, interleaved%s" %
          (os.cpu_count(), " ".join("%.2f" % x for x in os.getloadavg()), args.runs,
           "; each as PID 1 of its own PID namespace" if args.container else ""))
    for b in binaries:
        print("binary: %s: %s, %.1f MB (%s)" % (b, linkage(b), os.path.getsize(b) / 1e6,
                                                 subprocess.run([b, "version"],
                                                                stdout=subprocess.PIPE,
                                                                text=True).stdout.split("\n")[1]))
    print("%-60s %9s %9s %9s" % ("command", "median", "p10", "p90"))
    for name, _ in commands:
        t = sorted(times[name])
        print("%-60s %7.2fms %7.2fms %7.2fms" % (name, statistics.median(t),
                                                 t[len(t) // 10], t[(len(t) * 9) // 10]))
    tini_median = statistics.median(times[commands[0][0]])
    run_median = statistics.median(times[commands[1][0]])
    gap = run_median - tini_median
    ok = gap <= args.budget_ms
    print("trainlet run - tini: %+.2f ms (budget %.1f ms): %s" %
          (gap, args.budget_ms, "within" if ok else "OVER"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
