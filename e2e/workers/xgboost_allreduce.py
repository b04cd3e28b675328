"""Worker for the XGBoost real-client test (e2e_frameworks): XGBoost 1.7's
collective (Rabit) across hosts, configured only by the DMLC_* variables that
trainlet sets.

DMLC_TASK_ID 0 hosts the Rabit tracker at DMLC_TRACKER_URI:DMLC_TRACKER_PORT,
as a Kubeflow XGBoostJob's master does (xgboost's Python RabitTracker is not
started by the workers themselves); ranks are sorted by task id, so the Rabit
rank is DMLC_TASK_ID. Every worker allreduces [DMLC_TASK_ID + 1] and writes
$E2E_DIR/xgboost/<rank>.json with the sum, the expected sum, its hostname,
the DMLC_* variables and what DMLC_TRACKER_URI resolves to here. Exits 1 when
the sum or the rank is wrong; a tracker that cannot be reached fails init."""
import json
import os
import socket
import sys

import numpy as np
from xgboost import collective
from xgboost.tracker import RabitTracker

env = os.environ
task = int(env["DMLC_TASK_ID"])
world = int(env["DMLC_NUM_WORKER"])
tracker = None
if task == 0:
    tracker = RabitTracker(host_ip=env["DMLC_TRACKER_URI"], n_workers=world,
                           port=int(env["DMLC_TRACKER_PORT"]), sortby="task")
    tracker.start(world)
collective.init()
rank = collective.get_rank()
total = float(collective.allreduce(np.array([task + 1.0]), collective.Op.SUM)[0])
expected = world * (world + 1) / 2
seen_world = collective.get_world_size()
collective.finalize()
if tracker is not None:
    tracker.join()


def resolve(host):
    try:
        return sorted({i[4][0] for i in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)})
    except OSError as e:
        return "error: %s" % e


result = {
    "rank": rank, "task": task, "world": seen_world, "sum": total, "expected": expected,
    "hostname": socket.gethostname(),
    "tracker_resolved": resolve(env["DMLC_TRACKER_URI"]),
    "env": {k: env.get(k) for k in ("DMLC_TRACKER_URI", "DMLC_TRACKER_PORT", "DMLC_TASK_ID",
                                    "DMLC_NUM_WORKER", "RANK", "GROUP_RANK", "LOCAL_RANK",
                                    "MASTER_ADDR", "MASTER_PORT")},
}
out_dir = os.path.join(env["E2E_DIR"], "xgboost")
os.makedirs(out_dir, exist_ok=True)
tmp = os.path.join(out_dir, ".%d.%d.tmp" % (task, os.getpid()))
with open(tmp, "w") as f:
    json.dump(result, f)
os.rename(tmp, os.path.join(out_dir, "%d.json" % task))
print("task %d (rabit rank %d of %d) on %s: allreduce sum %g (expected %g)"
      % (task, rank, seen_world, result["hostname"], total, expected), flush=True)
sys.exit(0 if total == expected and rank == task and seen_world == world else 1)
