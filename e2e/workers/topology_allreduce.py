"""Worker for the rank-order benchmark (bench/topology_order.py,
e2e/e2e_topology_order.py): a gloo all_reduce of TOPO_MIB MiB of float32,
once to warm up (connections), then TOPO_ITERS timed; writes
TOPO_RESULT_DIR/rank-<RANK>.json with its host name and the seconds of each
timed all_reduce, and checks the sum."""
import json
import os
import socket
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=300))
rank = dist.get_rank()
world = dist.get_world_size()
n = int(float(os.environ["TOPO_MIB"]) * (1 << 20)) // 4
iters = int(os.environ["TOPO_ITERS"])
t = torch.ones(n, dtype=torch.float32)
dist.all_reduce(t)
ok = t[0].item() == world
seconds = []
for _ in range(iters):
    t.fill_(1.0)
    dist.barrier()
    start = time.monotonic()
    dist.all_reduce(t)
    seconds.append(time.monotonic() - start)
    ok = ok and t[-1].item() == world
with open(os.path.join(os.environ["TOPO_RESULT_DIR"], "rank-%d.json" % rank), "w") as f:
    json.dump({"rank": rank, "world": world, "host": socket.gethostname(),
               "node_rank": int(os.environ["GROUP_RANK"]), "seconds": seconds,
               "bytes": n * 4, "ok": ok}, f)
dist.barrier()
dist.destroy_process_group()
sys.exit(0 if ok else 1)
