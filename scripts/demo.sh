#!/usr/bin/env bash
# Quick start, command 1: install, build, and run the demo: a 3-node job on
# this machine (3 agents on loopback, 2 workers each) training a small
# PyTorch model with DDP on gloo. Every agent must exit 0.
#
# stdout is the training: every rank's "up" line, rank 0's loss and its
# result, each line prefixed "[rank N] " by its agent (--prefix-output),
# then whether every agent exited 0. It reads the same on a terminal, through
# `| head -50` and in a file. The build's output goes to stderr, and each
# agent's own log to a file the first line names (its last lines are
# printed to stderr when it fails).
#
# Environment: TRAINLET_BIN=path runs that binary and skips the install and
# the build; TRAINLET_BUILD_DIR (default build); DEMO_NNODES (3);
# DEMO_PORT (29400, the coordinator's); DEMO_MASTER_PORT (torch's, default
# the agents' 29500); DEMO_STEPS (30).
set -euo pipefail
cd "$(dirname "$0")/.."
if [[ -z "${TRAINLET_BIN:-}" ]]; then
  scripts/setup.sh >&2
fi
BIN=${TRAINLET_BIN:-${TRAINLET_BUILD_DIR:-build}/trainlet}
NNODES=${DEMO_NNODES:-3}
PORT=${DEMO_PORT:-29400}
STEPS=${DEMO_STEPS:-30}
MASTER_PORT_ARGS=()
[[ -n "${DEMO_MASTER_PORT:-}" ]] && MASTER_PORT_ARGS=(--master-port="$DEMO_MASTER_PORT")
LOGS=$(mktemp -d -t trainlet-demo.XXXXXX)
# A reader that went away (`| head`) must not end the demo halfway: the job
# runs to its end and the exit status is still the job's.
trap '' PIPE
say() { echo "demo: $*" 2>/dev/null || true; }
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; }
trap cleanup EXIT

say "$NNODES agents x 2 workers, coordinator on 127.0.0.1:$PORT; agent logs: $LOGS/agent-N.log"
for ((i = 0; i < NNODES; i++)); do
  # On one machine the agents share a hostname, so each gets a --node-id;
  # in Kubernetes the pod hostname is the node id and no flags are needed.
  "$BIN" run --nnodes="$NNODES" --node-rank="$i" --node-id="demo-node-$i" \
    --coordinator="127.0.0.1:$PORT" --health-port=0 --nproc-per-node=2 \
    --job-id=demo --prefix-output "${MASTER_PORT_ARGS[@]}" \
    -- /usr/bin/python3 scripts/demo/train_ddp.py --steps "$STEPS" \
    2>"$LOGS/agent-$i.log" &
  pids+=($!)
done
status=0
codes=()
for i in "${!pids[@]}"; do
  if wait "${pids[$i]}"; then rc=0; else rc=$?; fi
  codes+=("$rc")
  if ((rc != 0)); then
    status=1
    {
      echo "demo: agent $i exited $rc; the last lines of $LOGS/agent-$i.log:"
      tail -n 20 "$LOGS/agent-$i.log"
    } >&2
  fi
done
pids=()
if ((status == 0)); then
  say "OK, every agent exited 0"
else
  echo "demo: FAILED: the agents exited ${codes[*]}" >&2
fi
exit $status
