#!/usr/bin/python3
"""Launch-to-workers-started benchmark: trainlet vs torchrun (c10d rendezvous).

Runs N agents on this machine (loopback), each with --nproc-per-node=1, and
measures the time from the moment the LAST agent is launched to the moment
EVERY worker has started. The worker is the same for both systems:

    /bin/sh -c 'exec date +%s%N > "$BENCH_DIR/started.$RANK"'

so "worker started" is the CLOCK_REALTIME timestamp taken by `date` inside the
worker process (one exec after the agent's fork; identical for both systems).
The launch time is taken with time.time_ns() just before the last agent's
subprocess.Popen(), so the agent's own exec and start-up are included.

Scenarios (--scenarios, comma separated):
  8s, 32s   N agents launched one after another ("staggered"): agent i+1 is
            launched once agent i is waiting at the rendezvous, i.e. once it
            printed the line it logs right before joining (trainlet: "joining
            job"; torchrun with LOGLEVEL=INFO: "Rendezvous'ing worker group").
            Node rank 0 (the coordinator / TCPStore host) is launched first.
            --stagger=SECONDS uses a fixed gap instead.
  32a       N agents launched at once (Popen in a tight loop, rank 0 first).
  Any <N>s / <N>a works.

Each scenario runs --repeats times per system (alternating systems); median,
min and max are printed, with the speedup (torchrun median / trainlet median).
Every agent is started in its own session and its process group is killed
after the measurement, so nothing leaks between runs.

torchrun 1.13 on Python 3.11 (Debian 12) crashes with its default
--redirects/--tee of "0" (Std.from_str("0") returns None because Python 3.11's
enum no longer iterates the zero flag). The bench passes
`--redirects 9:1 --tee 9:1`: a mapping for local rank 9, which never exists
with --nproc_per_node=1, so local rank 0 gets Std.NONE, i.e. the default
behaviour (output not redirected).

Usage (from the repository root, after building build-bench/trainlet):
  /usr/bin/python3 bench/rendezvous_launch.py
  /usr/bin/python3 bench/rendezvous_launch.py --scenarios 8s,32s,32a --repeats 3 \
      --trainlet build-bench/trainlet --torchrun /usr/bin/torchrun
  /usr/bin/python3 bench/rendezvous_launch.py --systems trainlet --scenarios 32a
"""

import argparse
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import benchlib

WORKER = ['/bin/sh', '-c', 'exec date +%s%N > "$BENCH_DIR/started.$RANK"']
READY_MARKER = {
    'trainlet': 'joining job',
    'torchrun': "Rendezvous'ing worker group",
}



def agent_argv(system, args, n, rank, port, master_port):
    if system == 'trainlet':
        return [args.trainlet, 'run', f'--nnodes={n}', f'--node-rank={rank}',
                f'--node-id=n{rank}', f'--coordinator=127.0.0.1:{port}', '--health-port=0',
                '--nproc-per-node=1', '--job-id=bench', f'--master-port={master_port}',
                '--'] + WORKER
    return [args.torchrun, f'--nnodes={n}', '--nproc_per_node=1', '--rdzv_backend=c10d',
            f'--rdzv_endpoint=127.0.0.1:{port}', '--rdzv_id=bench',
            '--redirects', '9:1', '--tee', '9:1', '--no_python'] + WORKER


class Agent:
    """One agent process; a thread copies its output to a log and spots the ready line."""

    def __init__(self, argv, env, log_path, marker):
        self.ready = threading.Event()
        self.log = open(log_path, 'wb')
        self.proc = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     start_new_session=True)
        self.marker = marker.encode()
        self.thread = threading.Thread(target=self._pump, daemon=True)
        self.thread.start()

    def _pump(self):
        for line in self.proc.stdout:
            self.log.write(line)
            if not self.ready.is_set() and self.marker in line:
                self.ready.set()
        self.ready.set()  # exited: never block the launcher

    def kill(self):
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)  # the agent's own session
        except ProcessLookupError:
            pass
        self.proc.wait()
        self.thread.join(timeout=5)
        self.log.close()


def run_once(system, args, n, at_once, run_dir):
    os.makedirs(run_dir)
    port, master_port = benchlib.free_port(), benchlib.free_port()
    env = dict(os.environ, BENCH_DIR=run_dir, LOGLEVEL='INFO')
    agents = []
    t_last = None
    failure = None
    try:
        for rank in range(n):
            if rank == n - 1:
                t_last = time.time_ns()
            agents.append(Agent(agent_argv(system, args, n, rank, port, master_port), env,
                                os.path.join(run_dir, f'agent.{rank}.log'), READY_MARKER[system]))
            if not at_once and rank < n - 1:
                if args.stagger == 'ready':
                    if not agents[-1].ready.wait(args.timeout):
                        raise RuntimeError(f'agent {rank} not ready after {args.timeout}s')
                else:
                    time.sleep(float(args.stagger))
        deadline = time.monotonic() + args.timeout
        stamps = {}
        while len(stamps) < n:
            for rank in range(n):
                if rank in stamps:
                    continue
                try:
                    with open(os.path.join(run_dir, f'started.{rank}')) as f:
                        text = f.read().strip()
                    if text:
                        stamps[rank] = int(text)
                except FileNotFoundError:
                    pass
            if len(stamps) == n:
                break
            if time.monotonic() > deadline:
                failure = f'only {len(stamps)}/{n} workers started within {args.timeout}s'
                break
            if all(a.proc.poll() is not None for a in agents):
                failure = f'all agents exited; {len(stamps)}/{n} workers started'
                break
            time.sleep(0.01)
        if failure:
            return None, failure
        last = max(stamps.values())
        first = min(stamps.values())
        # Let the job end by itself (agents finish quickly); then kill leftovers.
        end = time.monotonic() + args.exit_wait
        while time.monotonic() < end and any(a.proc.poll() is None for a in agents):
            time.sleep(0.05)
        codes = [a.proc.poll() for a in agents]
        return {'last_ms': (last - t_last) / 1e6, 'first_ms': (first - t_last) / 1e6,
                'exit_codes': codes}, None
    finally:
        for a in agents:
            a.kill()


def cpu_busy(interval=0.5):
    """Fraction of all CPUs busy over `interval` seconds (from /proc/stat)."""
    def snap():
        with open('/proc/stat') as f:
            v = [int(x) for x in f.readline().split()[1:]]
        return sum(v), v[3] + v[4]  # total, idle + iowait
    t0, i0 = snap()
    time.sleep(interval)
    t1, i1 = snap()
    return 1.0 - (i1 - i0) / max(1, t1 - t0)


def wait_quiet(limit, max_wait):
    """Waits (up to max_wait s) until other work on the machine uses < limit of the CPUs."""
    end = time.monotonic() + max_wait
    busy = cpu_busy()
    while busy >= limit and time.monotonic() < end:
        busy = cpu_busy()
    return busy


def parse_scenario(s):
    mode = s[-1]
    if mode not in 'sa' or not s[:-1].isdigit():
        raise argparse.ArgumentTypeError(f'bad scenario {s!r}: expected <N>s or <N>a')
    return int(s[:-1]), mode == 'a'


def fmt(values):
    if not values:
        return 'n/a'
    return (f'median {statistics.median(values):9.1f}  min {min(values):9.1f}  '
            f'max {max(values):9.1f}')


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    p.add_argument('--trainlet', default=os.path.join(here, '..', 'build-bench', 'trainlet'))
    p.add_argument('--torchrun', default='/usr/bin/torchrun')
    p.add_argument('--systems', default='trainlet,torchrun')
    p.add_argument('--scenarios', default='8s,32s,32a')
    p.add_argument('--repeats', type=int, default=3)
    p.add_argument('--stagger', default='ready',
                   help='"ready" (default: next agent once the previous is joining) or SECONDS')
    p.add_argument('--timeout', type=float, default=120.0, help='per run, seconds')
    p.add_argument('--exit-wait', type=float, default=15.0,
                   help='seconds to let agents exit by themselves before killing them')
    p.add_argument('--keep', action='store_true', help='keep the run directories (logs)')
    p.add_argument('--quiet', type=float, default=0.15,
                   help='before each run wait (up to --quiet-wait s) until the CPUs are less '
                        'than this fraction busy (the machine may be shared)')
    p.add_argument('--quiet-wait', type=float, default=60.0)
    args = p.parse_args()
    systems = args.systems.split(',')
    scenarios = [parse_scenario(s) for s in args.scenarios.split(',')]
    args.trainlet = os.path.abspath(args.trainlet)

    print(f'machine: {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f} at start',
          flush=True)
    root = tempfile.mkdtemp(prefix='trainlet-bench-')
    results = {}
    for n, at_once in scenarios:
        label = f'{n} agents {"at once" if at_once else "staggered"}'
        for rep in range(args.repeats):
            for system in systems:
                run_dir = os.path.join(root, f'{system}-{n}{"a" if at_once else "s"}-{rep}')
                busy = wait_quiet(args.quiet, args.quiet_wait)
                r, err = run_once(system, args, n, at_once, run_dir)
                key = (label, system)
                results.setdefault(key, [])
                if err:
                    print(f'{label:22s} {system:8s} run {rep}: FAILED: {err} (logs in {run_dir})',
                          flush=True)
                    args.keep = True
                    continue
                results[key].append(r['last_ms'])
                bad = [c for c in r['exit_codes'] if c not in (0, None)]
                note = f'; agent exit codes {sorted(set(r["exit_codes"]), key=str)}' if bad else ''
                print(f'{label:22s} {system:8s} run {rep}: last worker {r["last_ms"]:9.1f} ms, '
                      f'first worker {r["first_ms"]:9.1f} ms after the last launch '
                      f'(CPUs {busy:.0%} busy before){note}',
                      flush=True)
                time.sleep(1.0)

    print('\nTime from the last agent launch to every worker started (ms), '
          f'{args.repeats} runs each:')
    for n, at_once in scenarios:
        label = f'{n} agents {"at once" if at_once else "staggered"}'
        for system in systems:
            print(f'  {label:22s} {system:8s} {fmt(results.get((label, system), []))}')
        if 'trainlet' in systems and 'torchrun' in systems:
            a = results.get((label, 'trainlet'), [])
            b = results.get((label, 'torchrun'), [])
            if a and b:
                print(f'  {label:22s} speedup  {statistics.median(b) / statistics.median(a):.1f}x '
                      '(torchrun median / trainlet median)')
    print(f'load average {os.getloadavg()[0]:.2f} at end')
    if args.keep:
        print(f'run directories kept in {root}')
    else:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == '__main__':
    sys.exit(main())
