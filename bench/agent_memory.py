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

Usage (repository root, after building build-bench/trainlet):
  /usr/bin/python3 bench/agent_memory.py [--trainlet build-bench/trainlet]
      [--torchrun /usr/bin/torchrun] [--sleep 5]
"""

import argparse
import os
import socket
import subprocess
import sys
import tempfile
import time

import benchlib

FIELDS = ['VmRSS', 'RssAnon', 'RssFile', 'RssShmem', 'VmHWM', 'Threads']


def free_port():
    with socket.socket() as s:
        s.bind(('127.0.0.1', 0))
        return s.getsockname()[1]


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


def measure(system, args):
    d = tempfile.mkdtemp(prefix=f'trainlet-mem-{system}-')
    port, master_port = free_port(), free_port()
    worker = ['/bin/sh', '-c', f'date +%s%N > "$BENCH_DIR/started.$RANK"; exec sleep {args.sleep}']
    env = dict(os.environ, BENCH_DIR=d)
    procs = []
    for rank in range(2):
        if system == 'trainlet':
            argv = [args.trainlet, 'run', '--nnodes=2', f'--node-rank={rank}',
                    f'--node-id=n{rank}', f'--coordinator=127.0.0.1:{port}', '--health-port=0',
                    '--nproc-per-node=2', f'--master-port={master_port}', '--'] + worker
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
        time.sleep(min(1.0, args.sleep / 2))  # workers are running; agents settled
        return [read_status(p.pid) for p in procs]
    finally:
        benchlib.kill_groups(procs)


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    ap = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    ap.add_argument('--trainlet', default=os.path.join(here, '..', 'build-bench', 'trainlet'))
    ap.add_argument('--torchrun', default='/usr/bin/torchrun')
    ap.add_argument('--systems', default='trainlet,torchrun')
    ap.add_argument('--sleep', type=float, default=5.0)
    args = ap.parse_args()
    args.trainlet = os.path.abspath(args.trainlet)
    cols = FIELDS + ['Pss']
    print(f'{"agent":22s} ' + ' '.join(f'{c:>9s}' for c in cols) + '   (kB; Threads = count)')
    for system in args.systems.split(','):
        for rank, st in enumerate(measure(system, args)):
            print(f'{system + " node " + str(rank):22s} ' +
                  ' '.join(f'{st.get(c, 0):9d}' for c in cols), flush=True)
    return 0


if __name__ == '__main__':
    sys.exit(main())
