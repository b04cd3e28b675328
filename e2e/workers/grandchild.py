"""Worker that leaves a grandchild in its own process group (like a dataloader
process), records both pids (as seen in /proc of the test's PID namespace: the
/proc/self link resolves in the proc mount's namespace) and sleeps."""
import os
import subprocess
import sys
import time

d = os.environ["E2E_DIR"]
rank = os.environ["RANK"]


def host_pid():
    return int(os.readlink("/proc/self"))


child = subprocess.Popen(
    [sys.executable, "-c",
     "import os,time\n"
     "p=os.readlink('/proc/self')\n"
     "open(os.path.join(os.environ['E2E_DIR'],'.gc-%s'),'w').write(p)\n"
     "os.rename(os.path.join(os.environ['E2E_DIR'],'.gc-%s'),"
     "os.path.join(os.environ['E2E_DIR'],'grandchild-%s'))\n"
     "time.sleep(120)\n" % (rank, rank, rank)])
deadline = time.monotonic() + 30
while not os.path.exists(os.path.join(d, "grandchild-%s" % rank)):
    if time.monotonic() > deadline:
        sys.exit(98)
    time.sleep(0.01)
tmp = os.path.join(d, ".worker-%s" % rank)
with open(tmp, "w") as f:
    f.write(str(host_pid()))
os.rename(tmp, os.path.join(d, "worker-%s" % rank))
time.sleep(120)
