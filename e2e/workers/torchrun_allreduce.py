"""Worker under a nested torchrun (e2e_multihost): gloo init over env:// (the
variables torchrun set), all_reduce of [RANK+1], and a result file
$E2E_DIR/allreduce/<RANK>.json with the sum, the expected sum and what the
worker saw. Exits 1 when the sum is wrong; an init failure (torch's
"Socket Timeout") raises, which also fails the job."""
import json
import os
import socket
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

env = os.environ
timeout = timedelta(seconds=float(env.get("E2E_INIT_TIMEOUT", "30")))
dist.init_process_group("gloo", init_method="env://", timeout=timeout)
rank = dist.get_rank()
world = dist.get_world_size()
t = torch.tensor([rank + 1.0])
dist.all_reduce(t, op=dist.ReduceOp.SUM)
total = t.item()
expected = world * (world + 1) / 2
dist.barrier()
dist.destroy_process_group()
result = {
    "rank": rank, "world": world, "sum": total, "expected": expected,
    "hostname": socket.gethostname(),
    "env": {k: env.get(k) for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "GROUP_RANK",
                                    "MASTER_ADDR", "MASTER_PORT")},
}
out_dir = os.path.join(env["E2E_DIR"], "allreduce")
os.makedirs(out_dir, exist_ok=True)
tmp = os.path.join(out_dir, ".%d.%d.tmp" % (rank, os.getpid()))
with open(tmp, "w") as f:
    json.dump(result, f)
os.rename(tmp, os.path.join(out_dir, "%d.json" % rank))
print("rank %d of %d on %s: all_reduce sum %g (expected %g)"
      % (rank, world, result["hostname"], total, expected), flush=True)
sys.exit(0 if total == expected else 1)
