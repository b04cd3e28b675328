#!/bin/bash
# scripts/gpu_check.sh: what trainlet does with real NVIDIA GPUs, in one
# command that takes a few minutes on a machine with a GPU, its driver and
# PyTorch with CUDA (docs/testing.md, "On a GPU"):
#
#   1. `trainlet probe` (the static binary: NVML through its reader) finds the
#      GPUs and reads NVML;
#   2. the NCCL topology file `trainlet probe --format=nccl-topo` writes is
#      loaded by real NCCL (NCCL_TOPO_FILE, NCCL_DEBUG=INFO, a one-process
#      all_reduce; NCCL's log must say it read the file);
#   3. the GPU preflight (--preflight=fail --preflight-gpu) passes, and the
#      loopback's own figures are printed;
#   4. a one-node `trainlet run` of torch DDP with the NCCL backend.
#
# Prints what it checked; exits 1 when any check failed, 0 when all passed,
# and 77 (skip) on a machine without a usable GPU, after what it can run
# there (the probe, and the GPU preflight, which must then say SKIPPED).
#
# Environment: TRAINLET_BIN (default build/trainlet), PYTHON (default
# python3), GPU_CHECK_MIN_BUSBW (GB/s for --preflight-min-gpu-busbw, default 0).
set -u
ROOT=$(cd "$(dirname "$0")/.." && pwd)
BIN=${TRAINLET_BIN:-$ROOT/build/trainlet}
PY=${PYTHON:-python3}
MIN_BUSBW=${GPU_CHECK_MIN_BUSBW:-0}
WORK=$(mktemp -d /tmp/gpu_check.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
RESULTS=()
FAILED=0

say() { printf '\n== %s\n' "$*"; }
pass() { RESULTS+=("PASS    $*"); echo "PASS: $*"; }
fail() { RESULTS+=("FAIL    $*"); echo "FAIL: $*"; FAILED=1; }
skip() { RESULTS+=("SKIPPED $*"); echo "SKIPPED: $*"; }
summary() {
  say "gpu_check summary"
  printf '%s\n' "${RESULTS[@]}"
}

if [ ! -x "$BIN" ]; then
  echo "gpu_check: no trainlet binary at $BIN; build it (ninja -C build trainlet) or set TRAINLET_BIN" >&2
  exit 2
fi
"$BIN" version || true

# --- 1. The probe ----------------------------------------------------------
say "1. trainlet probe (NVML through the static binary's reader)"
if "$BIN" probe >"$WORK/probe.json" 2>"$WORK/probe.err"; then
  cat "$WORK/probe.json"
  pass "trainlet probe"
else
  cat "$WORK/probe.err" "$WORK/probe.json"
  fail "trainlet probe exited non-zero"
fi
# The probe's GPU count and NVML's status (proto3 JSON: gpus[], nvml.status).
read -r PROBE_GPUS NVML_STATUS < <("$PY" - "$WORK/probe.json" <<'EOF' 2>/dev/null || echo "0 UNKNOWN"
import json, sys
try:
    p = json.load(open(sys.argv[1]))
except Exception:
    print("0 UNKNOWN"); sys.exit(0)
nvml = p.get("nvml") or {}
print(len(p.get("gpus") or []), nvml.get("status", "UNKNOWN"))
EOF
)
echo "probe: ${PROBE_GPUS} GPU(s), NVML ${NVML_STATUS}"

HAVE_GPU=1
WHY_NOT=""
if ! ls /dev/nvidia[0-9]* >/dev/null 2>&1; then
  HAVE_GPU=0
  WHY_NOT="no /dev/nvidia[0-9]* device"
elif ! "$PY" -c 'import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
  HAVE_GPU=0
  WHY_NOT="$PY has no torch with CUDA (torch.cuda.is_available() is not True)"
fi

# --- 3 (without a GPU). The GPU preflight must say SKIPPED, not fail -------
run_preflight() {
  "$BIN" run --preflight=fail --preflight-gpu --preflight-min-gpu-busbw="$MIN_BUSBW" \
    -- "$PY" -c 'print("preflight passed: the worker ran")' >"$WORK/preflight.log" 2>&1
  local rc=$?
  grep -E "preflight round|preflight passed|gpu_" "$WORK/preflight.log"
  return $rc
}

if [ "$HAVE_GPU" = 0 ]; then
  say "3. GPU preflight without a GPU (must be SKIPPED, the job runs)"
  if run_preflight && grep -q "preflight round 1: .* 0 failed" "$WORK/preflight.log"; then
    pass "GPU preflight without a GPU: skipped, not failed"
  else
    cat "$WORK/preflight.log"
    fail "GPU preflight without a GPU"
  fi
  skip "NCCL topology file, GPU preflight figures, DDP on NCCL: $WHY_NOT"
  summary
  [ "$FAILED" = 0 ] || exit 1
  echo "gpu_check: no GPU here ($WHY_NOT): exit 77 (skip)"
  exit 77
fi

if [ "$NVML_STATUS" = "OK" ] && [ "$PROBE_GPUS" -gt 0 ]; then
  pass "probe: $PROBE_GPUS GPU(s) with NVML"
else
  fail "probe: $PROBE_GPUS GPU(s), NVML $NVML_STATUS on a machine with a GPU"
fi

# --- 2. The NCCL topology file --------------------------------------------
say "2. NCCL_TOPO_FILE from trainlet probe --format=nccl-topo, loaded by NCCL"
if "$BIN" probe --format=nccl-topo >"$WORK/topo.xml" 2>"$WORK/topo.err"; then
  cat "$WORK/topo.xml"
  NCCL_TOPO_FILE="$WORK/topo.xml" NCCL_TOPO_DUMP_FILE="$WORK/topo-dump.xml" \
    NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,ENV,GRAPH \
    "$PY" - >"$WORK/nccl.log" 2>&1 <<'EOF'
import datetime, socket, torch, torch.distributed as dist
s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
torch.cuda.set_device(0)
dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % port, rank=0, world_size=1,
                        timeout=datetime.timedelta(seconds=60))
x = torch.ones(1 << 20, device="cuda")
dist.all_reduce(x)
torch.cuda.synchronize()
assert x[0].item() == 1.0
print("all_reduce ok")
dist.destroy_process_group()
EOF
  rc=$?
  grep -E "NCCL_TOPO_FILE|all_reduce ok|WARN" "$WORK/nccl.log"
  if [ $rc = 0 ] && grep -q "NCCL_TOPO_FILE set by environment to $WORK/topo.xml" "$WORK/nccl.log" &&
    grep -q "all_reduce ok" "$WORK/nccl.log"; then
    pass "NCCL read trainlet's topology file and ran an all_reduce"
  else
    tail -40 "$WORK/nccl.log"
    fail "NCCL with trainlet's topology file (rc $rc; see the log above)"
  fi
  [ -s "$WORK/topo-dump.xml" ] && { echo "NCCL's fused topology:"; cat "$WORK/topo-dump.xml"; }
else
  cat "$WORK/topo.err"
  fail "trainlet probe --format=nccl-topo"
fi

# --- 3. The GPU preflight --------------------------------------------------
say "3. GPU preflight (--preflight=fail --preflight-gpu, min busbw ${MIN_BUSBW} GB/s)"
echo "the loopback's own figures:"
"$PY" "$ROOT/preflight/gpu_loopback.py" 256 5 256 120 || true
if run_preflight; then
  pass "GPU preflight"
else
  cat "$WORK/preflight.log"
  fail "GPU preflight (exit 82: a check failed; see the FAILED line above)"
fi

# --- 4. DDP on NCCL through trainlet run -----------------------------------
say "4. trainlet run: torch DDP on the NCCL backend, one worker per GPU"
cat >"$WORK/ddp.py" <<'EOF'
import os, torch, torch.distributed as dist
dist.init_process_group("nccl")
rank, local = dist.get_rank(), int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(64, 64).cuda(), device_ids=[local])
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(20):
    loss = model(torch.randn(32, 64, device="cuda")).pow(2).mean()
    opt.zero_grad(); loss.backward(); opt.step()
print("ddp ok rank %d of %d loss %.4f" % (rank, dist.get_world_size(), loss.item()), flush=True)
dist.destroy_process_group()
EOF
if timeout 300 "$BIN" run -- "$PY" "$WORK/ddp.py" >"$WORK/ddp.log" 2>&1 &&
  grep -q "ddp ok rank 0" "$WORK/ddp.log"; then
  grep "ddp ok" "$WORK/ddp.log"
  pass "DDP on NCCL under trainlet run"
else
  tail -40 "$WORK/ddp.log"
  fail "DDP on NCCL under trainlet run"
fi

summary
exit "$FAILED"
