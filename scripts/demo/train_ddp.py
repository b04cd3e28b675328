"""A small DDP training job for the demo: a plain script, no torchrun.

trainlet sets MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE and LOCAL_RANK, so
init_process_group(init_method="env://") works unchanged. Each rank fits a
linear model to y = 3x + 2 on its own shard; DDP averages the gradients.
"""
import argparse
import os

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=30)
    args = parser.parse_args()

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    print(f"rank {rank}/{world} (local rank {os.environ['LOCAL_RANK']}, "
          f"node {os.environ['GROUP_RANK']}) up, master "
          f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}", flush=True)

    torch.manual_seed(1234 + rank)
    x = torch.randn(256, 1)
    y = 3 * x + 2 + 0.01 * torch.randn(256, 1)
    model = DDP(torch.nn.Linear(1, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    loss = None
    for step in range(args.steps):
        opt.zero_grad()
        loss = torch.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        if rank == 0 and (step % 10 == 0 or step == args.steps - 1):
            print(f"step {step:3d} loss {loss.item():.5f}", flush=True)

    # Every rank must hold the same weights after DDP.
    w = model.module.weight.detach().clone()
    ws = [torch.zeros_like(w) for _ in range(world)]
    dist.all_gather(ws, w)
    assert all(torch.allclose(w, o) for o in ws), "ranks diverged"
    if rank == 0:
        print(f"done: w={w.item():.3f} b={model.module.bias.item():.3f} "
              f"(target 3, 2), final loss {loss.item():.5f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
