#!/usr/bin/python3
"""MPI launch benchmark: time from starting the launcher command to the first
MPI rank running, and to its exit, 1 launcher + 3 worker hosts over network
namespaces (e2e/netns.py), workers already up. Run as root.

Hosts: `launcher`, `w0`, `w1`, `w2`, each its own network and UTS namespace
(own address, hostname and /etc/hosts). The MPI program is
e2e/workers/mpi_allreduce.c (built with the flavor's mpicc, cached in
/var/tmp/trainlet-e2e-cache): each rank prints the CLOCK_MONOTONIC time at
the start of main, before MPI_Init, and rank 0 checks an allreduce. Every run
is checked: np ranks, the right sum, ranks on all 3 workers.

What is timed, per run (both on CLOCK_MONOTONIC, which every netns host
shares):
  first rank   from just before Popen of the launcher command on the launcher
               host (`ip netns exec ... unshare --uts ...` included, a few ms)
               to the earliest rank's start-of-main timestamp;
  exit         from the same start to the launcher command's exit (the whole
               6-rank allreduce job, MPI_Init/Finalize and teardown included).

Modes (--modes, comma separated; runs alternate between modes, so a shared
machine's load hits all of them alike):
  bare      Debian's OpenSSH sshd on port 2222 in each worker, and the user's
            own `mpirun -np 6 --hostfile H` (Open MPI 4), `mpiexec.hydra -f H`
            (MPICH) or Open MPI 5's mpirun with PRTE_MCA_prte_default_hostfile
            (in the trixie root of scripts/mpi5_root.sh), with a hand-written
            hostfile (3 workers x --slots) and ssh options in the environment.
            The workers' sshd sessions get an empty home directory
            (mpi_support.clean_home_prefix; --host-home turns that off): bash
            sources ~/.bashrc for every ssh command, and a developer's
            (pyenv init) added 0.55 s to each session here. A trainlet mode
            must start its worker side the same way to compare fairly.
  trainlet  `trainlet mpi-worker` on the workers and `trainlet mpi-launcher --
            mpirun -np N PROGRAM` (no hostfile, no ssh options): the readiness
            check leaves OpenSSH masters that mpirun's ssh reuses.
  trainlet-libssh  the same with --ssh-multiplex=false: the libssh check, and
            mpirun's ssh logging in by itself.
  trainlet-late  the same with --early-command=false: mpirun starts after the
            readiness check, not beside it.
  trainlet-base  trainlet with the binary of --base-bin on both sides (another
            build: a before/after comparison, interleaved).
A mode is a class with `name`, `prepare(bench)` (starts the worker side once;
sshd, or `trainlet mpi-worker`) and `launcher_argv(bench, run)` returning
(argv, env) to run on the launcher host; add it to MODES.

Usage (from the repository root, as root):
  /usr/bin/python3 bench/mpi_launch.py [--flavor openmpi|mpich|openmpi5]
      [--repeats 5] [--modes bare] [--np 6] [--slots 2] [--keep]
"""

import argparse
import calendar
import os
import signal
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "e2e"))

import harness  # noqa: E402 (e2e helpers: the trainlet binary)
import mpi_support as ms  # noqa: E402
import netns  # noqa: E402
from benchlib import BenchHarness  # noqa: E402
from rendezvous_launch import wait_quiet  # noqa: E402

WORKERS = ["w0", "w1", "w2"]
BARE_SSHD_PORT = 2222


class Bench:
    """One cluster shared by every mode and run."""

    def __init__(self, args, directory):
        self.args = args
        self.h = BenchHarness(directory)
        self.root = ms.ompi5_root() if args.flavor == "openmpi5" else None
        self.program = ([ms.MPI5_PROGRAM] if self.root
                        else [ms.build_mpi_program(args.flavor)])
        self.cluster = netns.Cluster.create(self.h, ["launcher"] + WORKERS)
        self.launcher = self.cluster.hosts[0]
        self.workers = self.cluster.hosts[1:]
        self.state = self.h.path("ssh")
        self.keys = ms.ssh_keys(self.state)

    def start_on_launcher(self, name, argv, env):
        """Starts argv on the launcher host (chrooted for openmpi5)."""
        env = self.h.base_env(**env)
        if self.root:
            return ms.run_in_root(self.cluster, self.launcher, self.root, name, argv, env=env,
                                  shared_dirs=[self.state])
        return self.cluster.start(self.launcher, name, argv, env=env)


class BareMode:
    """Bare sshd on the workers and the MPI's own launcher: the baseline."""

    name = "bare"

    def prepare(self, bench):
        sshds = [ms.start_bare_sshd(bench.cluster, h, bench.state, BARE_SSHD_PORT,
                                    root=bench.root, clean_home=bench.args.clean_home
                                    and not bench.root) for h in bench.workers]
        ms.wait_sshd(sshds, 15)
        self.hostfile = ms.write_hostfile(bench.h.path("hostfile-bare"), bench.args.flavor,
                                          [(h.name, bench.args.slots) for h in bench.workers])

    def launcher_argv(self, bench, run):
        return ms.bare_mpirun_argv(bench.args.flavor, self.hostfile, bench.args.np,
                                   bench.keys["key"], bench.program, port=BARE_SSHD_PORT)


class TrainletMode:
    """`trainlet mpi-worker` on the workers (already up: sshd listening, the
    join waiting for the launcher's coordinator) and `trainlet mpi-launcher
    -- mpirun -np N PROGRAM` (no hostfile, no ssh options: trainlet's) on
    the launcher. The workers of one run exit with its job; each run starts
    new ones before the clock starts."""

    name = "trainlet"
    PORT = 2223  # the bare mode's sshd keeps 2222
    EXTRA = []  # more mpi-launcher flags

    def prepare(self, bench):
        if bench.root:
            raise SystemExit("the trainlet mode does not run in the Open MPI 5 root")
        self.token = bench.h.path("token")
        with open(self.token, "w") as f:
            f.write("bench-secret\n")
        self.home = bench.h.path("empty-home")
        os.makedirs(self.home, exist_ok=True)
        self.workers = []

    def binary(self, bench):
        return harness.TRAINLET

    def common(self, bench, run):
        return ["--job-id", "%s-%d" % (self.name, run), "--token-file", self.token,
                "--log-level", bench.args.log_level]

    def start_worker(self, bench, run, host, name=None, node_id=None):
        """`trainlet mpi-worker` on `host` (a new pod: its own state directory)."""
        name = name or host.name
        prefix = (ms.clean_home_prefix(host, self.home) if bench.args.clean_home
                  else bench.cluster.prefix(host))
        return bench.h.start(
            "%s-%s-%d" % (self.name, name, run),
            [self.binary(bench), "mpi-worker", "--coordinator", "launcher",
             "--nproc-per-node", str(bench.args.slots), "--ssh-port", str(self.PORT),
             "--state-dir", bench.h.path("state-%s-%d" % (self.name, run), name),
             "--log-level", bench.args.worker_log_level] + self.common(bench, run)[:4] +
            (["--node-id", node_id] if node_id else []), prefix=prefix)

    def start_workers(self, bench, run):
        for w in self.workers:  # the previous run's, done with its job
            w.wait(30)
        self.workers = [self.start_worker(bench, run, h) for h in bench.workers]
        deadline = time.monotonic() + 15
        while not all("sshd listening" in w.stderr for w in self.workers):
            if time.monotonic() > deadline:
                raise SystemExit("trainlet workers not up:\n" +
                                 "\n".join(w.describe() for w in self.workers))
            time.sleep(0.02)
        time.sleep(0.3)  # their joins are now retrying against the launcher's address

    def launcher_flags(self, bench, run):
        return (["mpi-launcher", "--nnodes", str(len(bench.workers)), "--state-dir",
                 bench.h.path("state-%s-%d" % (self.name, run), "launcher"),
                 "--placement-timeout", "0"] + self.EXTRA + self.common(bench, run))

    def launcher_argv(self, bench, run):
        self.start_workers(bench, run)
        launcher = {"openmpi": ["mpirun"], "mpich": ["mpiexec.hydra"]}[bench.args.flavor]
        return ([self.binary(bench)] + self.launcher_flags(bench, run) + ["--"] + launcher +
                ["-np", str(bench.args.np)] + bench.program, {})


class TrainletLibsshMode(TrainletMode):
    """As trainlet, with --ssh-multiplex=false: the readiness check with
    libssh, and mpirun's ssh logging in to every worker by itself (the
    product before issue 33)."""

    name = "trainlet-libssh"
    EXTRA = ["--ssh-multiplex=false"]


class TrainletLateMode(TrainletMode):
    """As trainlet, with --early-command=false: COMMAND (mpirun) starts only
    after the readiness check, instead of beside it with its ssh held at the
    gate (the product before the early start)."""

    name = "trainlet-late"
    EXTRA = ["--early-command=false"]


class TrainletBaseMode(TrainletMode):
    """As trainlet, with another build's binary on both sides (--base-bin):
    a before/after comparison interleaved in one run."""
    name = "trainlet-base"

    def prepare(self, bench):
        if not bench.args.base_bin:
            raise SystemExit("mode trainlet-base needs --base-bin PATH (the other build)")
        TrainletMode.prepare(self, bench)

    def binary(self, bench):
        return bench.args.base_bin


def descendants(pid):
    """Every live descendant of `pid`, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % entry) as f:
                ppid = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for c in children.get(todo.pop(), []):
            out.append(c)
            todo.append(c)
    return out


def log_wall(line):
    """The wall-clock time (s since the epoch) of a trainlet log line."""
    stamp = line.split(" ", 1)[0]  # 2026-11-29T12:16:24.055Z
    return calendar.timegm(time.strptime(stamp[:19], "%Y-%m-%dT%H:%M:%S")) + \
        float("0" + stamp[19:-1])


class RestartMode(TrainletMode):
    """In-place restart (issue 33): `trainlet mpi-launcher --max-restarts=1`,
    whose COMMAND runs `mpirun -np N PROGRAM 60` (ranks that sleep) in round
    0 and `mpirun -np N PROGRAM` after a restart. Once every rank runs, the
    pod of worker w1 goes as a kill -9 of its agent and every process below it,
    and a replacement pod starts at once on the same host (same hostname,
    new state directory, new host key), as a JobSet would. Timed:
      restart   from the kill to the relaunched job's first rank on every
                worker (the latest of each worker's earliest rank);
      pod       the replacement's own start: its Popen to its log's
                "sshd listening" (what trainlet cannot make faster);
      restart - pod   the target: <= 1 s."""

    name = "restart"
    EXTRA = ["--max-restarts", "1"]

    def run_once(self, bench, run):
        self.start_workers(bench, run)
        script = bench.h.path("restart-job-%d.sh" % run)
        launcher = {"openmpi": "mpirun", "mpich": "mpiexec.hydra"}[bench.args.flavor]
        program = " ".join(bench.program)
        with open(script, "w") as f:
            f.write('#!/bin/sh\necho "RESTART $TRAINLET_RESTART_COUNT"\n'
                    'if [ "$TRAINLET_RESTART_COUNT" = 0 ]; then exec %s -np %d %s 60; fi\n'
                    'exec %s -np %d %s\n' % (launcher, bench.args.np, program, launcher,
                                             bench.args.np, program))
        os.chmod(script, 0o755)
        p = bench.start_on_launcher("%s-%d" % (self.name, run),
                                    [self.binary(bench)] + self.launcher_flags(bench, run) +
                                    ["--", script], {})
        deadline = time.monotonic() + bench.args.timeout
        while p.stdout.count("rank ") < bench.args.np:
            if time.monotonic() > deadline or not p.running():
                p.kill()
                return None, "round 0's ranks not all running (output in %s)" % p.out_path
            time.sleep(0.02)
        victim = bench.workers[1]
        # The pod: the worker's agent and everything below it (not the bare
        # mode's sshd, which shares the host in this benchmark).
        pids = [self.workers[1].pid] + descendants(self.workers[1].pid)
        wall_kill, t_kill = time.time(), time.monotonic()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        old = self.workers[1]
        self.workers[1] = self.start_worker(bench, run, victim, name="w1b", node_id="w1")
        replacement = self.workers[1]
        old.wait(10)
        try:
            rc = p.wait(bench.args.timeout)
        except AssertionError:
            p.kill()
            return None, "no exit within %.0fs (output in %s)" % (bench.args.timeout, p.out_path)
        out = p.stdout
        if rc != 0 or "RESTART 1" not in out:
            return None, "exit code %d, restarted: %s (output in %s, %s)" % (
                rc, "RESTART 1" in out, p.out_path, p.err_path)
        after = out.split("RESTART 1", 1)[1]
        problems = ms.check_run(after, bench.args.np, WORKERS)
        if problems:
            return None, "; ".join(problems) + " (output in %s)" % p.out_path
        ranks, times = ms.parse_ranks(after), ms.parse_rank_times(after)
        first = {}
        for r, host in ranks.items():
            first[host] = min(first.get(host, times[r]), times[r])
        listening = [ln for ln in replacement.stderr.splitlines() if "sshd listening" in ln]
        if not listening:
            return None, "the replacement logged no 'sshd listening' (%s)" % replacement.err_path
        pod_ready = t_kill + (log_wall(listening[0]) - wall_kill)
        restart_ms = (max(first.values()) - t_kill) * 1e3
        pod_ms = (pod_ready - replacement.started) * 1e3
        return {"first_ms": restart_ms, "last_ms": pod_ms, "exit_ms": restart_ms - pod_ms}, None


MODES = {"bare": BareMode, "trainlet": TrainletMode, "trainlet-libssh": TrainletLibsshMode,
         "trainlet-late": TrainletLateMode, "trainlet-base": TrainletBaseMode, "restart": RestartMode}


def run_once(bench, mode, run):
    """One launch; returns ({"first_ms", "exit_ms"}, None) or (None, error)."""
    if hasattr(mode, "run_once"):
        return mode.run_once(bench, run)
    argv, env = mode.launcher_argv(bench, run)
    p = bench.start_on_launcher("%s-%d" % (mode.name, run), argv, env)
    try:
        rc = p.wait(bench.args.timeout)
    except AssertionError:
        p.kill()
        return None, "no exit within %.0fs (output in %s)" % (bench.args.timeout, p.out_path)
    exit_ms = (p.ended - p.started) * 1e3
    out = p.stdout
    problems = ms.check_run(out, bench.args.np, WORKERS)
    if rc != 0:
        problems.insert(0, "exit code %d" % rc)
    if problems:
        return None, "; ".join(problems) + " (output in %s, %s)" % (p.out_path, p.err_path)
    times = ms.parse_rank_times(out)
    return {"first_ms": (min(times.values()) - p.started) * 1e3,
            "last_ms": (max(times.values()) - p.started) * 1e3, "exit_ms": exit_ms}, None


def fmt(values):
    if not values:
        return "n/a"
    return "median %7.1f  min %7.1f  max %7.1f" % (statistics.median(values), min(values),
                                                   max(values))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--flavor", default="openmpi", choices=ms.FLAVORS)
    p.add_argument("--modes", default="bare", help="comma separated: %s" % ", ".join(MODES))
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--np", type=int, default=6)
    p.add_argument("--slots", type=int, default=2, help="slots per worker in the hostfile")
    p.add_argument("--timeout", type=float, default=60.0, help="per run, seconds")
    p.add_argument("--host-home", dest="clean_home", action="store_false",
                   help="let ssh sessions on the workers use the real home directory (by "
                        "default an empty one: a developer's ~/.bashrc, sourced by every "
                        "ssh session's shell, can cost more than the launch itself)")
    p.add_argument("--base-bin", help="the trainlet binary of mode trainlet-base (another "
                   "build, e.g. main's, to compare with this one in the same run)")
    p.add_argument("--keep", action="store_true", help="keep the run directory (logs)")
    p.add_argument("--worker-log-level", default="info", help="the workers' --log-level")
    p.add_argument("--log-level", default="warning",
                   help="trainlet's --log-level (debug: timestamps of every step, to profile; "
                        "the logs are in the run directory, with --keep)")
    p.add_argument("--quiet", type=float, default=0.15,
                   help="before each run wait (up to --quiet-wait s) until the CPUs are less "
                        "than this fraction busy (the machine may be shared)")
    p.add_argument("--quiet-wait", type=float, default=30.0)
    args = p.parse_args()
    modes = []
    for name in args.modes.split(","):
        if name not in MODES:
            p.error("unknown mode %r (use %s)" % (name, ", ".join(MODES)))
        modes.append(MODES[name]())

    print("machine: %d CPUs, load average %.2f at start; flavor %s, %d ranks over %d workers"
          " x %d slots" % (os.cpu_count(), os.getloadavg()[0], args.flavor, args.np,
                           len(WORKERS), args.slots), flush=True)
    directory = tempfile.mkdtemp(prefix="trainlet-bench-mpi-")
    bench = None
    results = {m.name: [] for m in modes}
    failed = False
    try:
        bench = Bench(args, directory)
        print(bench.cluster.describe(), flush=True)
        for m in modes:
            m.prepare(bench)
        for run in range(args.repeats):
            for m in modes:
                busy = wait_quiet(args.quiet, args.quiet_wait)
                r, err = run_once(bench, m, run)
                if err:
                    failed = True
                    print("%-15s run %d: FAILED: %s" % (m.name, run, err), flush=True)
                    continue
                results[m.name].append(r)
                if m.name == "restart":
                    print("%-15s run %d: kill -> every worker's first rank %7.1f ms, the "
                          "replacement pod's own start %7.1f ms, difference %7.1f ms (CPUs "
                          "%.0f%% busy before)" % (m.name, run, r["first_ms"], r["last_ms"],
                                                   r["exit_ms"], busy * 100), flush=True)
                    continue
                print("%-15s run %d: first rank %7.1f ms, last rank %7.1f ms, exit %7.1f ms "
                      "(CPUs %.0f%% busy before)" % (m.name, run, r["first_ms"], r["last_ms"],
                                                     r["exit_ms"], busy * 100), flush=True)
    finally:
        if bench is not None:
            bench.h.close()
        if args.keep or failed:
            print("run directory kept: %s" % directory)
        else:
            import shutil
            shutil.rmtree(directory, ignore_errors=True)

    print("\nFrom the launcher command's start (ms), %d runs per mode, flavor %s:"
          % (args.repeats, args.flavor))
    launches = [m for m in modes if m.name != "restart"]
    for m in modes:
        rs = results[m.name]
        if m.name == "restart":
            print("  restart: kill -> every worker's first rank  %s" % fmt(
                [r["first_ms"] for r in rs]))
            print("  restart: the replacement pod's own start    %s" % fmt(
                [r["last_ms"] for r in rs]))
            print("  restart: the difference (target <= 1000)    %s" % fmt(
                [r["exit_ms"] for r in rs]))
            continue
        print("  %-15s first rank  %s" % (m.name, fmt([r["first_ms"] for r in rs])))
        print("  %-15s exit        %s" % (m.name, fmt([r["exit_ms"] for r in rs])))
    if len(launches) > 1 and all(results[m.name] for m in launches):
        base = statistics.median(r["first_ms"] for r in results[launches[0].name])
        for m in launches[1:]:
            d = statistics.median(r["first_ms"] for r in results[m.name]) - base
            print("  %s - %s, median first rank: %+.1f ms" % (m.name, launches[0].name, d))
    return 1 if failed else 0


if __name__ == "__main__":
    if os.geteuid() != 0:
        sys.exit("mpi_launch.py: run as root (network namespaces, sshd)")
    sys.exit(main())
