"""Worker: a torch DDP job (gloo) that checkpoints every step and resumes.

Trains a tiny linear model for E2E_STEPS steps in total. Rank 0 saves
{step, model, optimizer} to $E2E_DIR/ckpt.pt after every step (atomically, via
rename); every worker loads it at start, so a restarted round resumes where the
job was. Each step appends "<restart> <world> <step>" to
$E2E_DIR/progress.rank<RANK> (rank 0 also to $E2E_DIR/progress), and rank 0
writes $E2E_DIR/done.json at the end. E2E_STEP_SLEEP slows steps so that a test
can kill a node mid-training. Every step also all_reduces a one from each rank
and asserts the sum is the world size. With E2E_FAIL_RANK, that rank exits 1
in round 0 once $E2E_DIR/fail exists.
"""
import json
import os
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

d = os.environ["E2E_DIR"]
steps = int(os.environ.get("E2E_STEPS", "30"))
pause = float(os.environ.get("E2E_STEP_SLEEP", "0.05"))
restart = int(os.environ["TORCHELASTIC_RESTART_COUNT"])

dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=30))
rank, world = dist.get_rank(), dist.get_world_size()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
ckpt_path = os.path.join(d, "ckpt.pt")
start = 0
if os.path.exists(ckpt_path):
    ckpt = torch.load(ckpt_path)
    model.module.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    start = ckpt["step"]
resumed_from = start

fail_rank = os.environ.get("E2E_FAIL_RANK")
for step in range(start + 1, steps + 1):
    if restart == 0 and str(rank) == fail_rank and os.path.exists(os.path.join(d, "fail")):
        raise SystemExit(1)
    ones = torch.ones(1)
    dist.all_reduce(ones)
    assert ones.item() == world, "all_reduce sum %s in a world of %d" % (ones.item(), world)
    x = torch.full((8, 4), float(step))
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    if rank == 0:
        tmp = ckpt_path + ".tmp"
        torch.save({"step": step, "model": model.module.state_dict(),
                    "opt": opt.state_dict()}, tmp)
        os.rename(tmp, ckpt_path)
        with open(os.path.join(d, "progress"), "a") as f:
            f.write("%d %d %d\n" % (restart, world, step))
    with open(os.path.join(d, "progress.rank%d" % rank), "a") as f:
        f.write("%d %d %d\n" % (restart, world, step))
    time.sleep(pause)

dist.barrier()
if rank == 0:
    with open(os.path.join(d, "done.json"), "w") as f:
        json.dump({"steps": steps, "restart": restart, "world": world,
                   "resumed_from": resumed_from, "sums_checked": True,
                   "agent_store": os.environ.get("TORCHELASTIC_USE_AGENT_STORE"),
                   "master_port": os.environ["MASTER_PORT"]}, f)
dist.destroy_process_group()
