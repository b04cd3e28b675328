"""Worker for e2e_warm: records what it sees, then fails, waits or exits.

Writes $E2E_DIR/dump-r<RESTART>-rank<RANK>.json: os.environ, sys.argv,
sys.path, sys.flags, the cwd, whether it leads its process group, __main__'s
names and __file__, signal dispositions, umask, nice, stdout's buffering,
open fds, its pid and whether torch was already imported (a warm worker's
preload). Then, in round 0: the rank named by E2E_FAIL_RANK exits 1 once
$E2E_DIR/fail exists; the others wait to be stopped. In later rounds: waits
for $E2E_DIR/release when E2E_HOLD is set, then exits 0.
"""
import json
import os
import signal
import sys
import time

import __main__

preloaded = "json" in sys.modules and "E2E_EXPECT_JSON_PRELOADED" in os.environ
torch_preloaded = "torch" in sys.modules


def dispositions():
    out = {}
    for s in range(1, signal.NSIG):
        try:
            h = signal.getsignal(s)
        except (ValueError, OSError):
            continue
        out[str(s)] = h if isinstance(h, int) else getattr(h, "__name__", repr(h))
    return out


umask = os.umask(0o22)
os.umask(umask)
d = os.environ["E2E_DIR"]
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
dump = {
    "environ": dict(os.environ), "argv": sys.argv, "path": sys.path, "flags": list(sys.flags),
    "cwd": os.getcwd(), "group_leader": os.getpgrp() == os.getpid(),
    "main": sorted(k for k in vars(__main__)), "file": getattr(__main__, "__file__", None),
    "spec": getattr(getattr(__main__, "__spec__", None), "name", None),
    "signals": dispositions(), "umask": umask, "nice": os.getpriority(os.PRIO_PROCESS, 0),
    "line_buffering": sys.stdout.line_buffering, "stdout_tty": sys.stdout.isatty(),
    "fds": sorted(int(x) for x in os.listdir("/proc/self/fd")),
    "pid": os.getpid(), "torch_preloaded": torch_preloaded,
}
tmp = os.path.join(d, ".dump-r%d-rank%d.tmp" % (restart, rank))
with open(tmp, "w") as f:
    json.dump(dump, f, indent=1, sort_keys=True)
os.rename(tmp, os.path.join(d, "dump-r%d-rank%d.json" % (restart, rank)))
print("rank %d round %d pid %d" % (rank, restart, os.getpid()), flush=True)

if restart == 0:
    if str(rank) == os.environ.get("E2E_FAIL_RANK"):
        while not os.path.exists(os.path.join(d, "fail")):
            time.sleep(0.02)
        sys.exit(1)
    while True:
        time.sleep(1)
if os.environ.get("E2E_HOLD"):
    while not os.path.exists(os.path.join(d, "release")):
        time.sleep(0.05)
