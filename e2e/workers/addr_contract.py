"""Worker for the address contract (e2e_multihost): writes its environment and
what it found when it tried the master address to
$E2E_DIR/contract/<GROUP_RANK>-<LOCAL_RANK>.json.

RANK 0 listens on all interfaces at MASTER_PORT (as torch's TCPStore does) and
answers each connection with a greeting naming its host, until every rank of
WORLD_SIZE has connected or E2E_REACH_TIMEOUT passes. Every worker (rank 0
too) resolves MASTER_ADDR, connects to MASTER_ADDR:MASTER_PORT (retrying until
the deadline, since rank 0 may start later), sends its rank and records the
greeting, which proves it reached rank 0's listener and not something else on
that port. It also resolves each host named in TF_CONFIG's cluster. Always
exits 0: the test judges the files."""
import json
import os
import socket
import threading
import time

GREETING = b"addr-contract rank0 "
env = os.environ
deadline = time.monotonic() + float(env.get("E2E_REACH_TIMEOUT", "15"))
rank = int(env["RANK"])
world = int(env["WORLD_SIZE"])
addr = env.get("MASTER_ADDR", "")
port = int(env.get("MASTER_PORT", "0"))
result = {"env": dict(env), "hostname": socket.gethostname(), "pid": os.getpid()}


def resolve(host):
    try:
        return sorted({i[4][0] for i in socket.getaddrinfo(host, None, type=socket.SOCK_STREAM)})
    except OSError as e:
        return "error: %s" % e


heard = set()
listener = None
if rank == 0:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.bind(("", port))
    listener.listen(64)
    listener.settimeout(0.2)

    def serve():
        while len(heard) < world and time.monotonic() < deadline + 2:
            try:
                conn, _ = listener.accept()
            except socket.timeout:
                continue
            with conn:
                conn.settimeout(2)
                try:
                    data = conn.recv(64)
                    heard.add(int(data.split()[0]))
                    conn.sendall(GREETING + socket.gethostname().encode() + b"\n")
                except (OSError, ValueError, IndexError):
                    pass

    server = threading.Thread(target=serve)
    server.start()

result["resolved"] = resolve(addr)
reach = {"ok": False, "attempts": 0, "error": None, "greeting": None}
started = time.monotonic()
while time.monotonic() < deadline:
    reach["attempts"] += 1
    try:
        with socket.create_connection((addr, port), timeout=2) as s:
            s.sendall(b"%d\n" % rank)
            s.settimeout(2)
            reply = s.recv(256)
        if reply.startswith(GREETING):
            reach.update(ok=True, error=None, greeting=reply.decode("utf-8", "replace").strip())
            break
        reach["error"] = "unexpected reply %r" % reply[:64]
    except OSError as e:
        reach["error"] = "%s: %s" % (type(e).__name__, e)
    time.sleep(0.1)
reach["seconds"] = round(time.monotonic() - started, 3)
result["reach"] = reach

cluster_hosts = set()
try:
    for entry in json.loads(env.get("TF_CONFIG", "{}")).get("cluster", {}).get("worker", []):
        cluster_hosts.add(entry.rsplit(":", 1)[0].strip("[]"))
except ValueError:
    pass
result["tf_hosts_resolved"] = {h: resolve(h) for h in sorted(cluster_hosts)}

if listener is not None:
    server.join()
    listener.close()
    result["rank0_heard"] = sorted(heard)

out_dir = os.path.join(env["E2E_DIR"], "contract")
os.makedirs(out_dir, exist_ok=True)
name = "%s-%s" % (env.get("GROUP_RANK", "none"), env.get("LOCAL_RANK", "none"))
tmp = os.path.join(out_dir, ".%s.%d.tmp" % (name, os.getpid()))
with open(tmp, "w") as f:
    json.dump(result, f)
os.rename(tmp, os.path.join(out_dir, name + ".json"))
