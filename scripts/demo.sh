#!/usr/bin/env bash
# Quick start, command 1: install, build, and run the demo: a 3-node job on
# this machine (3 agents on loopback, 2 workers each) training a small
# PyTorch model with DDP on gloo. Every agent must exit 0.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh
BIN=${TRAINLET_BUILD_DIR:-build}/trainlet
NNODES=${DEMO_NNODES:-3}
PORT=${DEMO_PORT:-29400}
LOGS=$(mktemp -d)
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

echo "demo: starting $NNODES agents x 2 workers, coordinator on 127.0.0.1:$PORT"
for ((i = 0; i < NNODES; i++)); do
  # On one machine the agents share a hostname, so each gets a --node-id;
  # in Kubernetes the pod hostname is the node id and no flags are needed.
  "$BIN" run --nnodes="$NNODES" --node-rank="$i" --node-id="demo-node-$i" \
    --coordinator="127.0.0.1:$PORT" --health-port=0 --nproc-per-node=2 \
    --job-id=demo --prefix-output \
    -- /usr/bin/python3 scripts/demo/train_ddp.py --steps 30 \
    > >(sed "s/^/[agent $i] /") 2> >(sed "s/^/[agent $i] /" >&2) &
  pids+=($!)
done
status=0
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then rc=0; else rc=$?; fi
  echo "demo: agent $i exited $rc"
  ((rc == 0)) || status=1
done
pids=()
if ((status == 0)); then echo "demo: OK, every agent exited 0"; else echo "demo: FAILED" >&2; fi
exit $status
