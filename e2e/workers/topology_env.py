"""Records what a worker got from the node probe: its GPU and NCCL variables and
where it runs (CPU affinity, memory policy), as
$E2E_DIR/topo/<hostname>-<RANK>.json."""

import json
import os
import socket

VARS = ["RANK", "LOCAL_RANK", "CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "NCCL_HOSTID",
        "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"]


def status_field(name):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(name + ":"):
                return line.split(":", 1)[1].strip()
    return None


def memory_policy():
    # The first mapping's policy: "default", "prefer:1", ...
    with open("/proc/self/numa_maps") as f:
        return f.readline().split()[1]


record = {
    "hostname": socket.gethostname(),
    "env": {k: os.environ[k] for k in VARS if k in os.environ},
    "cpus": status_field("Cpus_allowed_list"),
    "policy": memory_policy(),
}
out = os.path.join(os.environ["E2E_DIR"], "topo")
os.makedirs(out, exist_ok=True)
tmp = os.path.join(out, ".%s-%s.tmp" % (record["hostname"], os.environ["RANK"]))
with open(tmp, "w") as f:
    json.dump(record, f)
os.rename(tmp, os.path.join(out, "%s-%s.json" % (record["hostname"], os.environ["RANK"])))
