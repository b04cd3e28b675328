"""Worker: gloo process group over env://, all_reduce of [rank+1]; prints the
sum and exits 0 only when it equals WORLD_SIZE*(WORLD_SIZE+1)/2."""
import os
import sys
from datetime import timedelta

import torch
import torch.distributed as dist

dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=90))
rank = dist.get_rank()
world = dist.get_world_size()
assert rank == int(os.environ["RANK"]), (rank, os.environ["RANK"])
assert world == int(os.environ["WORLD_SIZE"]), (world, os.environ["WORLD_SIZE"])
t = torch.tensor([rank + 1.0])
dist.all_reduce(t, op=dist.ReduceOp.SUM)
total = t.item()
expected = world * (world + 1) / 2
print("rank %d of %d: all_reduce sum %g (expected %g)" % (rank, world, total, expected),
      flush=True)
dist.barrier()
dist.destroy_process_group()
sys.exit(0 if total == expected else 1)
