"""Worker for the signal tests.

  sig_worker.py [SIG:ACTION ...]

ACTION is `exit=N` (write a marker, exit N), `note` (write a marker, keep
running) or `ignore` (SIG_IGN). Markers are $E2E_DIR/<SIG>-<RANK>. Once the
handlers are installed it writes $E2E_DIR/ready-<RANK> containing its pid,
then runs until $E2E_DIR/go exists (exit 0) or a handler exits.
"""
import os
import signal
import sys
import time

d = os.environ["E2E_DIR"]
rank = os.environ["RANK"]


def marker(name):
    with open(os.path.join(d, "%s-%s" % (name, rank)), "w") as f:
        f.write(str(os.getpid()))


def handler_for(name, action):
    def handler(signum, frame):
        marker(name)
        if action.startswith("exit="):
            sys.stdout.flush()
            os._exit(int(action[5:]))
    return handler


for spec in sys.argv[1:]:
    name, action = spec.split(":", 1)
    sig = getattr(signal, "SIG" + name)
    if action == "ignore":
        signal.signal(sig, signal.SIG_IGN)
    else:
        signal.signal(sig, handler_for(name, action))

tmp = os.path.join(d, ".ready-%s.tmp" % rank)
with open(tmp, "w") as f:
    f.write(str(os.getpid()))
os.rename(tmp, os.path.join(d, "ready-%s" % rank))

go = os.path.join(d, "go")
deadline = time.monotonic() + 120
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.02)
sys.exit(0 if os.path.exists(go) else 99)
