"""Worker that reads one line from stdin (as pdb or input() would) and writes
it to $E2E_DIR/line-<RANK>. Writes $E2E_DIR/reading-<RANK> (its pid) first."""
import os
import sys

d = os.environ["E2E_DIR"]
rank = os.environ["RANK"]
tmp = os.path.join(d, ".reading-%s" % rank)
with open(tmp, "w") as f:
    f.write(str(os.getpid()))
os.rename(tmp, os.path.join(d, "reading-%s" % rank))
line = sys.stdin.readline()
tmp = os.path.join(d, ".line-%s" % rank)
with open(tmp, "w") as f:
    f.write(line)
os.rename(tmp, os.path.join(d, "line-%s" % rank))
