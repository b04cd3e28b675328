"""Worker that double-forks an orphan: the child exits at once, so the
grandchild is reparented (to the agent, a child subreaper), records its pid and
its new parent, then exits. The worker then waits for $E2E_DIR/go and exits 0."""
import os
import sys
import time

d = os.environ["E2E_DIR"]
rank = os.environ["RANK"]

pid = os.fork()
if pid == 0:
    if os.fork() == 0:
        # Grandchild: wait to be orphaned, then report who adopted us.
        parent = os.getppid()
        deadline = time.monotonic() + 10
        while os.getppid() == parent and time.monotonic() < deadline:
            time.sleep(0.01)
        tmp = os.path.join(d, ".orphan-%s" % rank)
        with open(tmp, "w") as f:
            f.write("%d %d" % (os.getpid(), os.getppid()))
        os.rename(tmp, os.path.join(d, "orphan-%s" % rank))
        os._exit(0)
    os._exit(0)
os.waitpid(pid, 0)

go = os.path.join(d, "go")
deadline = time.monotonic() + 120
while not os.path.exists(go) and time.monotonic() < deadline:
    time.sleep(0.02)
sys.exit(0 if os.path.exists(go) else 99)
