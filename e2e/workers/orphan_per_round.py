"""Worker for the round-end orphan test. In restart 0 it starts `sleep 300`
in a new session (so no process-group signal reaches it), records its pid in
$E2E_DIR/orphan and exits 1, which orphans the sleep (the agent adopts it) and
makes the job restart. In restart 1 it writes to $E2E_DIR/orphan-state the
sleep's state in the new round ("gone", or its /proc state letter) and exits 0."""
import os
import subprocess
import sys

d = os.environ["E2E_DIR"]
if os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
    p = subprocess.Popen(["sleep", "300"], start_new_session=True)
    tmp = os.path.join(d, ".orphan")
    with open(tmp, "w") as f:
        f.write(str(p.pid))
    os.rename(tmp, os.path.join(d, "orphan"))
    sys.exit(1)

with open(os.path.join(d, "orphan")) as f:
    pid = int(f.read())
try:
    with open("/proc/%d/stat" % pid) as f:
        state = f.read().rsplit(")", 1)[1].split()[0]
except OSError:
    state = "gone"
tmp = os.path.join(d, ".orphan-state")
with open(tmp, "w") as f:
    f.write(state)
os.rename(tmp, os.path.join(d, "orphan-state"))
