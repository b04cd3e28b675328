"""A worker for e2e_hang: reports progress through TRAINLET_PROGRESS_FILE with
the helper of docs/progress.md (copied verbatim), then, in the first round
only (TORCHELASTIC_RESTART_COUNT=0), stops reporting and hangs in a sleep.
Later rounds report a few steps and exit 0.

argv: STEPS INTERVAL_S. Writes $E2E_DIR/last-progress-<RANK>-<RESTART> (the wall time of
its last progress line) and $E2E_DIR/hanging-<RANK> once it hangs."""

import os
import sys
import time

# ---- the helper of docs/progress.md ----
import faulthandler
import os
import signal
import time

_progress = os.environ.get("TRAINLET_PROGRESS_FILE")
_traceback = os.environ.get("TRAINLET_TRACEBACK_FILE")
if _traceback:
    # Creating the file opts in: on a hang the agent sends SIGUSR1 and
    # keeps what faulthandler writes here as evidence.
    _traceback_file = open(_traceback, "w")
    faulthandler.register(signal.SIGUSR1, file=_traceback_file, all_threads=True)


def report_progress(**fields):
    """One line of key=value tokens, e.g. report_progress(step=12, loss=0.5)."""
    if not _progress:
        return
    fields.setdefault("pid", os.getpid())  # where the agent sends SIGUSR1
    line = " ".join("%s=%s" % (k, str(v).replace(" ", "_")) for k, v in fields.items())
    with open(_progress + ".tmp", "w") as f:
        f.write(line + "\n")
    os.replace(_progress + ".tmp", _progress)  # atomic: never half a line
# ---- end of the helper ----


def main():
    steps, interval = int(sys.argv[1]), float(sys.argv[2])
    rank = os.environ.get("RANK", "0")
    restart = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    for step in range(steps):
        report_progress(step=step, loss="%.3f" % (1.0 / (step + 1)), restart=restart)
        with open(os.path.join(os.environ["E2E_DIR"],
                               "last-progress-%s-%d" % (rank, restart)), "w") as f:
            f.write("%.3f\n" % time.time())
        print("step %d done" % step, flush=True)
        time.sleep(interval)
    if restart > 0:
        print("finished after the restart", flush=True)
        return 0
    print("about to hang in the data loader", flush=True)
    open(os.path.join(os.environ["E2E_DIR"], "hanging-%s" % rank), "w").close()
    hang_forever()


def hang_forever():
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
