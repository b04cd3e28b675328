"""A worker that prints what Hugging Face Trainer prints and writes no
progress file (--progress-from-output, docs/progress.md): a tqdm bar on
stderr, redrawn after '\\r' (tqdm's default format with no description, as
transformers' ProgressCallback makes it), and every 5 steps the logged dict
on stdout. After STEPS steps, STEP_SECONDS apart, it prints a last line and
hangs in time.sleep without printing anything more. With COPY_STDOUT set,
it also writes every byte it prints on stdout to that file, for a test to
compare with what reached the agent's stdout.

usage: hf_trainer_log.py STEPS STEP_SECONDS"""

import os
import sys
import time

steps = int(sys.argv[1])
step_seconds = float(sys.argv[2])
copy = open(os.environ["COPY_STDOUT"], "w") if os.environ.get("COPY_STDOUT") else None


def out(line):
    print(line, flush=True)
    if copy:
        copy.write(line + "\n")
        copy.flush()


def bar(n):
    filled = n * 10 // steps
    return "\r%3d%%|%s| %d/%d [00:01<00:02,  9.50it/s]" % (
        n * 100 // steps, "#" * filled + " " * (10 - filled), n, steps)


sys.stderr.write(bar(0))
sys.stderr.flush()
for step in range(1, steps + 1):
    time.sleep(step_seconds)
    if step % 5 == 0:
        # tqdm.write: clears the bar, prints the line, redraws the bar.
        sys.stderr.write("\r" + " " * 50 + "\r")
        sys.stderr.flush()
        out(str({"loss": round(1.0 / step, 4), "grad_norm": 1.5, "learning_rate": 5e-05,
                 "epoch": round(step / steps, 2)}))
    sys.stderr.write(bar(step))
    sys.stderr.flush()
out("about to hang after step %d" % steps)
time.sleep(3600)
