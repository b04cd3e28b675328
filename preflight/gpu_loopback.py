# The GPU loopback of --preflight-gpu (docs/preflight.md, "The GPU loopback"),
# embedded in trainlet and run by the agent with the COMMAND's Python, so that
# the image's own torch, CUDA and NCCL are loaded here and never by the agent.
#
#   python -c PROGRAM MEM_MIB ITERATIONS NCCL_MIB TIMEOUT_SECONDS
#
# Prints one JSON line on stdout:
#   {"status": "skipped", "reason": "..."}   no torch, no CUDA, no GPU
#   {"status": "ok", "torch": "2.3.0",
#    "gpus": [{"index": 0, "name": "...", "mem_gbps": 2900.5}, ...],
#    "nccl": {"ranks": 2, "bytes": N, "algbw_gbps": 180.2}
#          | {"skipped": "one GPU"} | {"error": "..."}}
# Memory bandwidth counts a device-to-device copy's read and write (2 x
# bytes / time, as CUDA's bandwidthTest does); algbw is the all-reduce's
# bytes / time; trainlet computes the bus bandwidth from it.
import json
import os
import sys
import time

# One process per GPU for the all-reduce: run as `python -c WORKER RANK
# WORLD PORT NCCL_MIB ITERATIONS TIMEOUT`. Rank 0 prints its algbw as one
# JSON line.
WORKER = r'''
import ctypes, datetime, json, sys, time
try:
    ctypes.CDLL(None).prctl(1, 9)  # PR_SET_PDEATHSIG, SIGKILL: dies with the loopback
except Exception:
    pass
rank, world, port, mib, iters, timeout = (int(a) for a in sys.argv[1:7])
import torch
import torch.distributed as dist
torch.cuda.set_device(rank)
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                        world_size=world, timeout=datetime.timedelta(seconds=timeout))
x = torch.ones(mib * (1 << 20) // 4, dtype=torch.float32, device="cuda")
for _ in range(2):
    dist.all_reduce(x)
torch.cuda.synchronize()
dist.barrier()
start = time.perf_counter()
for _ in range(iters):
    dist.all_reduce(x)
torch.cuda.synchronize()
seconds = (time.perf_counter() - start) / iters
if rank == 0:
    print(json.dumps({"bytes": x.numel() * 4, "seconds": seconds}), flush=True)
dist.destroy_process_group()
'''


def emit(doc):
    sys.stdout.write(json.dumps(doc) + "\n")
    sys.stdout.flush()


def memory_bandwidth(torch, index, mib, iters):
    torch.cuda.set_device(index)
    n = mib << 20
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)  # warm-up
    torch.cuda.synchronize()
    start = torch.cuda.Event(enable_timing=True)
    end = torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(iters):
        dst.copy_(src)
    end.record()
    torch.cuda.synchronize()
    seconds = start.elapsed_time(end) / 1000.0
    del src, dst
    torch.cuda.empty_cache()
    return 2.0 * n * iters / seconds / 1e9


def free_port():
    import socket
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def all_reduce(torch, world, mib, iters, timeout):
    import subprocess
    try:
        if not torch.distributed.is_available() or not torch.distributed.is_nccl_available():
            return {"skipped": "this torch has no NCCL backend"}
    except Exception as e:
        return {"skipped": "torch.distributed: %s: %s" % (type(e).__name__, e)}
    port = free_port()
    deadline = time.monotonic() + timeout
    procs = []
    for rank in range(world):
        procs.append(subprocess.Popen(
            [sys.executable, "-c", WORKER, str(rank), str(world), str(port), str(mib), str(iters),
             str(max(1, int(timeout)))],
            stdout=subprocess.PIPE if rank == 0 else subprocess.DEVNULL,
            stderr=subprocess.PIPE, stdin=subprocess.DEVNULL))
    errors = []
    out = b""
    for rank, p in enumerate(procs):
        try:
            o, e = p.communicate(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            for q in procs:
                q.wait()
            return {"error": "the all-reduce among %d GPUs did not finish within %ds" %
                    (world, timeout)}
        if rank == 0:
            out = o
        if p.returncode != 0:
            tail = e.decode("utf-8", "replace").strip().splitlines()[-3:]
            errors.append("rank %d exited %d: %s" % (rank, p.returncode, " | ".join(tail)))
    if errors:
        return {"error": "; ".join(errors)[:400]}
    try:
        doc = json.loads(out.decode("utf-8", "replace").strip().splitlines()[-1])
        return {"ranks": world, "bytes": int(doc["bytes"]),
                "algbw_gbps": doc["bytes"] / doc["seconds"] / 1e9}
    except Exception as e:
        return {"error": "rank 0 printed no result (%s)" % e}


def main():
    mib, iters, nccl_mib, timeout = (int(a) for a in sys.argv[1:5])
    try:
        import torch
    except Exception as e:
        emit({"status": "skipped",
              "reason": "torch is not importable by %s (%s: %s)" %
                        (sys.executable, type(e).__name__, e)})
        return
    try:
        available = torch.cuda.is_available()
    except Exception as e:
        available = False
    if not available:
        emit({"status": "skipped",
              "reason": "torch %s sees no CUDA device (torch.cuda.is_available() is False)" %
                        torch.__version__})
        return
    started = time.monotonic()
    gpus = []
    for i in range(torch.cuda.device_count()):
        gpus.append({"index": i, "name": torch.cuda.get_device_name(i),
                     "mem_gbps": memory_bandwidth(torch, i, mib, iters)})
    world = len(gpus)
    if world < 2:
        nccl = {"skipped": "one GPU: no all-reduce among GPUs"}
    else:
        nccl = all_reduce(torch, world, nccl_mib, iters, timeout - (time.monotonic() - started))
    emit({"status": "ok", "torch": torch.__version__, "gpus": gpus, "nccl": nccl})


if __name__ == "__main__":
    main()
