"""Worker: a paced torch DDP job (gloo) for the slow-node tests and bench.

Each step: a forward/backward of Linear(E2E_DIM, E2E_DIM) on a batch of
E2E_BATCH rows (its gradient all_reduce: E2E_DIM^2 floats), an all_reduce of
[1, stop] whose first element it checks against the world size and whose
second, the sum of the ranks' "$E2E_DIR/stop exists", ends the loop on every
rank at the same step, then a sleep of E2E_STEP_SLEEP seconds. The sleep keeps
4 healthy workers from saturating a 2-core machine: a healthy rank spends most
of a step asleep, and the one whose CPU or network is held back makes the
others wait in the collective.

Round 0 runs until the stop file appears (at most E2E_SECONDS, default 600);
a later round (TORCHELASTIC_RESTART_COUNT > 0) runs E2E_STEPS_AFTER_RESTART
steps (default 20), so that an elastic job finishes once it restarted.

With E2E_PROGRESS=1 the worker writes `step=N` progress lines to
TRAINLET_PROGRESS_FILE (docs/progress.md) every step; otherwise it writes
none. It records its pid in $E2E_DIR/pids/<hostname>.r<restart>.rank<rank>,
every 10th step's CLOCK_MONOTONIC time in
$E2E_DIR/steps/<hostname>.r<restart> ("<step> <seconds>" lines, the netns
hosts share one kernel and so one monotonic clock), and on a normal end
$E2E_DIR/done/<hostname>.r<restart> with its step count.
"""
import os
import socket
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

torch.set_num_threads(1)
d = os.environ["E2E_DIR"]
dim = int(os.environ.get("E2E_DIM", "256"))
batch = int(os.environ.get("E2E_BATCH", "64"))
pause = float(os.environ.get("E2E_STEP_SLEEP", "0.05"))
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
limit = (int(os.environ.get("E2E_STEPS_AFTER_RESTART", "20")) if restart > 0
         else 1 << 62)
deadline = time.monotonic() + float(os.environ.get("E2E_SECONDS", "600"))
progress = os.environ.get("TRAINLET_PROGRESS_FILE") \
    if os.environ.get("E2E_PROGRESS") == "1" else None
host = socket.gethostname()

dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=60))
rank, world = dist.get_rank(), dist.get_world_size()
tag = "%s.r%d" % (host, restart)
for sub in ("pids", "steps", "done"):
    os.makedirs(os.path.join(d, sub), exist_ok=True)
with open(os.path.join(d, "pids", "%s.rank%d" % (tag, rank)), "w") as f:
    f.write("%d\n" % os.getpid())

torch.manual_seed(0)
model = DDP(torch.nn.Linear(dim, dim))
opt = torch.optim.SGD(model.parameters(), lr=1e-4)
x = torch.randn(batch, dim)
stop_path = os.path.join(d, "stop")
steps_file = open(os.path.join(d, "steps", tag), "a", buffering=1)
step = 0
while step < limit:
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    flags = torch.tensor([1.0, float(os.path.exists(stop_path) or
                                     time.monotonic() > deadline)])
    dist.all_reduce(flags)
    assert flags[0].item() == world, "all_reduce sum %s in a world of %d" % (flags[0], world)
    step += 1
    if step % 10 == 0:
        steps_file.write("%d %.6f\n" % (step, time.monotonic()))
    if progress:
        tmp = progress + ".tmp"
        with open(tmp, "w") as f:
            f.write("step=%d loss=%.4g\n" % (step, loss.item()))
        os.rename(tmp, progress)
    if flags[1].item() > 0:
        break
    time.sleep(pause)

dist.barrier()
with open(os.path.join(d, "done", tag), "w") as f:
    f.write("%d\n" % step)
dist.destroy_process_group()
