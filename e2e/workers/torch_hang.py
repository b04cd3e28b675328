"""A worker for e2e_hang's multi-host test: a gloo process group over env://
and an all_reduce every step, progress reported before each step through the
helper of docs/progress.md (progress_hang.py's copy). Rank SLEEPER stops at
step STEP in a Python sleep, not in a collective, so every other rank blocks
in that step's all_reduce waiting for it. It reports progress once more, LEAD seconds
into its sleep (a last batch loaded), so that its victims go silent first and
are the ones declared hung, as in a real hang.

argv: SLEEPER STEP LEAD. Writes $E2E_DIR/hanging-<RANK> once it sleeps."""

import os
import sys
import time
from datetime import timedelta

import torch
import torch.distributed as dist

# The helper of docs/progress.md, as progress_hang.py copies it verbatim
# (importing it registers the SIGUSR1 handler: this worker opts in too).
from progress_hang import report_progress


def sleep_in_the_data_loader():
    while True:
        time.sleep(3600)


def main():
    sleeper, hang_step, lead = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    # Longer than the test: the others must wait in the all_reduce, not fail.
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=600))
    rank = dist.get_rank()
    for step in range(1000):
        report_progress(step=step)
        if rank == sleeper and step == hang_step:
            print("rank %d sleeps at step %d" % (rank, step), flush=True)
            open(os.path.join(os.environ["E2E_DIR"], "hanging-%d" % rank), "w").close()
            time.sleep(lead)
            report_progress(step=step, loading=1)
            sleep_in_the_data_loader()
        t = torch.ones(1)
        dist.all_reduce(t)
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
