"""Worker: a torch DDP job (gloo) that checkpoints and resumes, for the
goodput e2e test (e2e/e2e_goodput.py, docs/goodput.md).

Each step: a forward/backward of a small Linear on a fixed batch (its
gradient all_reduce across the ranks), then a sleep of E2E_STEP_SLEEP
seconds; after the step, rank 0 saves a checkpoint every E2E_CKPT_EVERY
steps ($E2E_DIR/ckpt.pt, written and renamed), and every rank writes
`step=N loss=X` to TRAINLET_PROGRESS_FILE (docs/progress.md). At start it
loads the checkpoint when there is one and goes on from its step, so a
restarted round redoes the steps done since it. It ends after E2E_STEPS
steps.

In the first attempt (TORCHELASTIC_RESTART_COUNT 0), from step
E2E_PAUSE_AT on, each step first sleeps E2E_PAUSE seconds: a quiet window
in which the test kills a worker, after every line before it was read.

It records for the test, per host and attempt (tag <hostname>.r<restart>):
its pid in $E2E_DIR/pids/<tag>, every step in $E2E_DIR/steps/<tag>
("<step> <unix seconds>" lines), the step it resumed from in
$E2E_DIR/resumed/<tag>, and on a normal end $E2E_DIR/done/<tag>.
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
steps_total = int(os.environ.get("E2E_STEPS", "40"))
every = int(os.environ.get("E2E_CKPT_EVERY", "10"))
pause_step = float(os.environ.get("E2E_STEP_SLEEP", "0.05"))
pause_at = int(os.environ.get("E2E_PAUSE_AT", "0"))
pause = float(os.environ.get("E2E_PAUSE", "0"))
restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
progress = os.environ["TRAINLET_PROGRESS_FILE"]
host = socket.gethostname()
tag = "%s.r%d" % (host, restart)
for sub in ("pids", "steps", "resumed", "done"):
    os.makedirs(os.path.join(d, sub), exist_ok=True)
with open(os.path.join(d, "pids", tag), "w") as f:
    f.write("%d\n" % os.getpid())

dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=60))
rank = dist.get_rank()
torch.manual_seed(0)
model = DDP(torch.nn.Linear(64, 64))
opt = torch.optim.SGD(model.parameters(), lr=1e-3)
x = torch.randn(32, 64)
ckpt = os.path.join(d, "ckpt.pt")
step = 0
if os.path.exists(ckpt):
    state = torch.load(ckpt)
    model.module.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    step = state["step"]
with open(os.path.join(d, "resumed", tag), "w") as f:
    f.write("%d\n" % step)
steps_file = open(os.path.join(d, "steps", tag), "a", buffering=1)
while step < steps_total:
    if restart == 0 and pause_at and step >= pause_at:
        time.sleep(pause)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    if rank == 0 and step % every == 0:
        torch.save({"model": model.module.state_dict(), "opt": opt.state_dict(), "step": step},
                   ckpt + ".tmp")
        os.rename(ckpt + ".tmp", ckpt)
    with open(progress + ".tmp", "w") as f:
        f.write("step=%d loss=%.4g\n" % (step, loss.item()))
    os.rename(progress + ".tmp", progress)
    steps_file.write("%d %.6f\n" % (step, time.time()))
    time.sleep(pause_step)

dist.barrier()
with open(os.path.join(d, "done", tag), "w") as f:
    f.write("%d\n" % step)
dist.destroy_process_group()
