#!/usr/bin/python3
"""Agent resident memory while its workers run: trainlet vs torchrun.

Starts a 2-node job on loopback (2 agents, --nproc-per-node=2, workers that
record a timestamp and sleep --sleep seconds), waits until all 4 workers run,
then reads each AGENT process's /proc/<pid>/status (VmRSS, RssAnon, RssFile,
RssShmem, VmHWM, Threads) and /proc/<pid>/smaps_rollup (Pss). The agent is the
process the bench started: the `trainlet run` process, or the torchrun Python
interpreter (/usr/bin/torchrun is a Python script); workers are not counted.
Node rank 0 hosts the coordinator (trainlet) or the TCPStore (torchrun).

torchrun gets `--redirects 9:1 --tee 9:1` for the reason given in
rendezvous_launch.py (torchrun 1.13 + Python 3.11 crash with the default "0").

--reporting (issue 11: "an agent's RSS grows by at most 1 MB with reporting
on") measures trainlet twice, interleaved --repeat times: as above, and with
`--controller=127.0.0.1:P --report-interval=1s` pointing at a real
`trainlet controller` process started here (the same token for both), and
prints each agent's figures side by side with the difference. The agents are
measured --settle seconds after their workers started (default 3 s with
--reporting: two reports or more sent), and the controller's
trainlet_controller_reports_received_total is printed to show the reports
arrived.

Usage (repository root, after building build-bench/trainlet):
  /usr/bin/python3 bench/agent_memory.py [--trainlet build-bench/trainlet]
      [--torchrun /usr/bin/torchrun] [--sleep 5] [--settle SECONDS]
  /usr/bin/python3 bench/agent_memory.py --reporting [--repeat 3]
"""

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request

import benchlib

FIELDS = ['VmRSS', 'RssAnon', 'RssFile', 'RssShmem', 'VmHWM', 'Threads']



def read_status(pid):
    out = {}
    with open(f'/proc/{pid}/status') as f:
        for line in f:
            key, _, value = line.partition(':')
            if key in FIELDS:
                out[key] = int(value.split()[0])  # kB, or a count for Threads
    try:
        with open(f'/proc/{pid}/smaps_rollup') as f:
            for line in f:
                if line.startswith('Pss:'):
                    out['Pss'] = int(line.split()[1])
    except OSError:
        pass
    return out


def measure(system, args, extra=()):
    """Each agent's figures; `extra`: more `trainlet run` flags."""
    d = tempfile.mkdtemp(prefix=f'trainlet-mem-{system}-')
    port, master_port = benchlib.free_port(), benchlib.free_port()
    worker = ['/bin/sh', '-c', f'date +%s%N > "$BENCH_DIR/started.$RANK"; exec sleep {args.sleep}']
    env = dict(os.environ, BENCH_DIR=d)
    procs = []
    for rank in range(2):
        if system == 'trainlet':
            argv = [args.trainlet, 'run', '--nnodes=2', f'--node-rank={rank}',
                    f'--node-id=n{rank}', f'--coordinator=127.0.0.1:{port}', '--health-port=0',
                    '--nproc-per-node=2', f'--master-port={master_port}'] + list(extra) + \
                ['--'] + worker
        else:
            argv = [args.torchrun, '--nnodes=2', '--nproc_per_node=2', '--rdzv_backend=c10d',
                    f'--rdzv_endpoint=127.0.0.1:{port}', '--rdzv_id=mem',
                    '--redirects', '9:1', '--tee', '9:1', '--no_python'] + worker
        log = open(os.path.join(d, f'agent.{rank}.log'), 'wb')
        procs.append(subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL, stdout=log,
                                      stderr=subprocess.STDOUT, start_new_session=True))
        if rank == 0:
            time.sleep(0.5)  # the coordinator / store host first
    try:
        deadline = time.monotonic() + 120
        while sum(os.path.exists(os.path.join(d, f'started.{r}')) for r in range(4)) < 4:
            if time.monotonic() > deadline:
                raise RuntimeError(f'{system}: workers did not start; logs in {d}')
            time.sleep(0.05)
        time.sleep(args.settle)  # workers are running; agents settled
        figures = [read_status(p.pid) for p in procs]
    finally:
        benchlib.kill_groups(procs)
    shutil.rmtree(d, ignore_errors=True)  # kept (logs) only when the run failed
    return figures


def start_controller(trainlet, d):
    """A `trainlet controller` on free ports; (Popen, grpc port, http port)."""
    port, http = benchlib.free_port(), benchlib.free_port()
    with open(os.path.join(d, 'token'), 'w') as f:
        f.write('agent-memory-bench-token\n')
    os.chmod(os.path.join(d, 'token'), 0o600)
    log = open(os.path.join(d, 'controller.log'), 'wb')
    p = subprocess.Popen([trainlet, 'controller', f'--listen=127.0.0.1:{port}',
                          f'--http=127.0.0.1:{http}', f'--db={d}/c.db',
                          f'--token-file={d}/token'],
                         stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                         start_new_session=True)
    deadline = time.monotonic() + 30
    while True:
        try:
            with urllib.request.urlopen(f'http://127.0.0.1:{http}/healthz', timeout=1):
                return p, port, http
        except OSError:
            if p.poll() is not None or time.monotonic() > deadline:
                benchlib.kill_groups([p])
                raise RuntimeError(f'the controller did not start; log in {d}')
            time.sleep(0.05)


def reports_received(http):
    with urllib.request.urlopen(f'http://127.0.0.1:{http}/metrics', timeout=5) as r:
        for line in r.read().decode().splitlines():
            if line.startswith('trainlet_controller_reports_received_total '):
                return int(float(line.split()[1]))
    return -1


def main_reporting(args):
    """trainlet without and with reporting, interleaved, side by side."""
    d = tempfile.mkdtemp(prefix='trainlet-mem-controller-')
    ctl, port, http = start_controller(args.trainlet, d)
    token = ['--token-file=' + os.path.join(d, 'token')]
    variants = [('off', token),
                ('on', token + [f'--controller=127.0.0.1:{port}', '--report-interval=1s'])]
    keys = ['VmRSS', 'RssAnon', 'VmHWM', 'Threads']
    try:
        rows = {name: [] for name, _ in variants}  # per run: [node0, node1]
        before = reports_received(http)
        for _ in range(args.repeat):
            for name, extra in variants:
                rows[name].append(measure('trainlet', args, extra))
        after = reports_received(http)
    finally:
        benchlib.kill_groups([ctl])
    shutil.rmtree(d, ignore_errors=True)
    print(f'{args.repeat} run(s) each, measured {args.settle:g} s after the workers started; '
          f'the controller received {after - before} reports (1 s interval)')
    print(f'{"agent":12s} ' + ' '.join(f'{k + " off":>12s} {k + " on":>12s} {"diff":>7s}'
                                       for k in keys) + '   (kB; Threads = count; median of runs)')
    for rank in range(2):
        cells = []
        for k in keys:
            off = sorted(r[rank].get(k, 0) for r in rows['off'])[args.repeat // 2]
            on = sorted(r[rank].get(k, 0) for r in rows['on'])[args.repeat // 2]
            cells.append(f'{off:12d} {on:12d} {on - off:+7d}')
        print(f'{"node " + str(rank):12s} ' + ' '.join(cells), flush=True)
    for name, _ in variants:
        for i, run in enumerate(rows[name]):
            print(f'  run {i} reporting {name:3s}: ' +
                  '  '.join(f'node {r}: ' + ' '.join(f'{k}={run[r].get(k, 0)}' for k in keys)
                            for r in range(2)))
    return 0 if after - before > 0 else 1


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--trainlet', default=os.path.join(here, '..', 'build-bench', 'trainlet'))
    ap.add_argument('--torchrun', default='/usr/bin/torchrun')
    ap.add_argument('--systems', default='trainlet,torchrun')
    ap.add_argument('--sleep', type=float, default=None,
                    help='how long workers run (default 5 s; 8 s with --reporting)')
    ap.add_argument('--settle', type=float, default=None,
                    help='seconds from the workers\' start to the measurement '
                         '(default min(1, sleep/2); 3 s with --reporting)')
    ap.add_argument('--reporting', action='store_true',
                    help='trainlet without and with --controller, side by side')
    ap.add_argument('--repeat', type=int, default=3, help='runs of each, with --reporting')
    args = ap.parse_args()
    args.trainlet = os.path.abspath(args.trainlet)
    if args.sleep is None:
        args.sleep = 8.0 if args.reporting else 5.0
    if args.settle is None:
        args.settle = 3.0 if args.reporting else min(1.0, args.sleep / 2)
    if args.settle >= args.sleep:
        ap.error('--settle must be shorter than --sleep')
    if args.reporting:
        return main_reporting(args)
    cols = FIELDS + ['Pss']
    print(f'{"agent":22s} ' + ' '.join(f'{c:>9s}' for c in cols) + '   (kB; Threads = count)')
    for system in args.systems.split(','):
        for rank, st in enumerate(measure(system, args)):
            print(f'{system + " node " + str(rank):22s} ' +
                  ' '.join(f'{st.get(c, 0):9d}' for c in cols), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
