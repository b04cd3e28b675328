# torch.distributed for the fake torch (see __init__.py).
import os
import sys
import time


def is_available():
    return True


def is_nccl_available():
    return True


def init_process_group(backend, init_method=None, rank=0, world_size=1, timeout=None):
    if str(rank) == os.environ.get("FAKE_TORCH_FAIL_RANK"):
        sys.stderr.write("NCCL error: fake failure on rank %d\n" % rank)
        sys.exit(1)


def all_reduce(x):
    time.sleep(0.001)  # algbw in a plausible range (256 MiB in 1 ms: 268 GB/s)


def barrier():
    pass


def destroy_process_group():
    pass
