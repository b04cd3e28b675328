#!/usr/bin/env bash
# Quick start, command 2: install, build, and run every test (unit,
# in-process gRPC, black-box e2e, real torch, fuzz replays), then the core's
# unit tests again under ASan + UBSan. CI (.ci/run) calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --with-tests
BUILD_DIR=${TRAINLET_BUILD_DIR:-build}
# The slow suites (label `slow`: Open MPI 5 in a trixie root, the Debian
# 11/12/13 roots) run with TRAINLET_SLOW=1; docs/testing.md.
if [[ "${TRAINLET_SLOW:-0}" == 1 ]]; then
  scripts/mpi5_root.sh
  scripts/debian_root.sh bullseye bookworm trixie
  ctest --test-dir "$BUILD_DIR" -j2 --output-on-failure --timeout 300
else
  ctest --test-dir "$BUILD_DIR" -j2 --output-on-failure --timeout 300 -LE slow
fi
# The short sanitizer stage: the gRPC-free core's unit tests and the fuzz
# replays under ASan + UBSan (about 5 minutes from scratch; the whole suite
# under sanitizers is scripts/sanitize.sh, docs/testing.md).
if [[ "${TRAINLET_SKIP_SANITIZE:-0}" != 1 ]]; then
  scripts/sanitize.sh --short
fi
