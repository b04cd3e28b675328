"""Worker for the elastic e2e tests and bench/elastic_restart.py.

At start it records its view of the job in $E2E_DIR/starts/r<RESTART>-rank<RANK>.json
(restart count, rank, world size, node id, pid, wall time), written atomically so
that a reader never sees half a file. Then it waits until $E2E_DIR/release exists
and exits 0. SIGTERM ends it at once (Python's default), as a restart needs.

E2E_FAIL_RANK=R (optional): the worker with RANK R exits 3 right after recording,
in every round; E2E_FAIL_ONLY_RESTART=N limits that to restart count N.
"""
import json
import os
import sys
import time

d = os.environ["E2E_DIR"]
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
rank = int(os.environ["RANK"])
info = {
    "t": time.time(),
    "restart": restart,
    "rank": rank,
    "world_size": int(os.environ["WORLD_SIZE"]),
    "group_rank": int(os.environ["GROUP_RANK"]),
    "nnodes": int(os.environ["PET_NNODES"]) if os.environ.get("PET_NNODES", "").isdigit() else None,
    "node": os.environ.get("E2E_NODE", ""),
    "pid": os.getpid(),
}
os.makedirs(os.path.join(d, "starts"), exist_ok=True)
path = os.path.join(d, "starts", "r%d-rank%d.json" % (restart, rank))
tmp = "%s.%d.tmp" % (path, os.getpid())
with open(tmp, "w") as f:
    json.dump(info, f)
os.rename(tmp, path)

fail_rank = os.environ.get("E2E_FAIL_RANK")
only = os.environ.get("E2E_FAIL_ONLY_RESTART")
if fail_rank is not None and int(fail_rank) == rank and (only is None or int(only) == restart):
    sys.exit(3)

release = os.path.join(d, "release")
while not os.path.exists(release):
    time.sleep(0.02)
sys.exit(0)
