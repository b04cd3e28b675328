"""Worker: dumps its environment as JSON to $E2E_DIR/env/<GROUP_RANK>-<LOCAL_RANK>.json
(named by what the agent set, so duplicate RANKs show up as a collision-free
set of files with equal RANK values), plus its pid and ppid."""
import json
import os

out_dir = os.path.join(os.environ["E2E_DIR"], "env")
os.makedirs(out_dir, exist_ok=True)
name = "%s-%s" % (os.environ.get("GROUP_RANK", "none"), os.environ.get("LOCAL_RANK", "none"))
data = {"env": dict(os.environ), "pid": os.getpid(), "ppid": os.getppid()}
tmp = os.path.join(out_dir, ".%s.%d.tmp" % (name, os.getpid()))
with open(tmp, "w") as f:
    json.dump(data, f)
os.rename(tmp, os.path.join(out_dir, name + ".json"))
