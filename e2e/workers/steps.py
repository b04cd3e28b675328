"""A worker that reports steps through TRAINLET_PROGRESS_FILE: `steps.py N SECONDS` writes
`step=i total_steps=N loss=... lr=1e-4` for i = 1..N over SECONDS, then exits 0."""

import os
import sys
import time

steps, seconds = int(sys.argv[1]), float(sys.argv[2])
path = os.environ["TRAINLET_PROGRESS_FILE"]
for i in range(1, steps + 1):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write("step=%d total_steps=%d loss=%.4f lr=1e-4 pid=%d\n" %
                (i, steps, 2.0 / i, os.getpid()))
    os.rename(tmp, path)
    time.sleep(seconds / steps)
