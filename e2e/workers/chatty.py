"""Worker that prints a lot to stdout, fast: `chatty.py BYTES` prints about
BYTES bytes in 200-byte lines and exits 0; `chatty.py forever` never stops.
Writes $E2E_DIR/chatty-<RANK> (its pid) after the first lines."""
import os
import sys

d = os.environ["E2E_DIR"]
rank = os.environ["RANK"]
line = ("rank %s " % rank + "x" * 200)[:199] + "\n"
block = line * 50
total = None if sys.argv[1] == "forever" else int(sys.argv[1])
written = 0
marked = False
out = sys.stdout
while total is None or written < total:
    out.write(block)
    written += len(block)
    if not marked:
        out.flush()
        tmp = os.path.join(d, ".chatty-%s" % rank)
        with open(tmp, "w") as f:
            f.write(str(os.getpid()))
        os.rename(tmp, os.path.join(d, "chatty-%s" % rank))
        marked = True
out.flush()
