#!/usr/bin/env bash
# Quick start, command 2: install, build, and run every test (unit,
# in-process gRPC, black-box e2e, real torch, fuzz replays), then the core's
# unit tests again under ASan + UBSan. CI (.ci/run) calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --with-tests
BUILD_DIR=${TRAINLET_BUILD_DIR:-build}
# The container image tests (label podman) need rootful podman and runc:
# installed once with apt (about 1 minute); TRAINLET_SKIP_PODMAN=1 skips it
# and the tests then skip themselves.
if [[ "${TRAINLET_SKIP_PODMAN:-0}" != 1 ]]; then
  scripts/images.sh --install-podman
fi
# The slow suites (label `slow`: Open MPI 5 in a trixie root, the Debian
# 11/12/13 roots) run with TRAINLET_SLOW=1; docs/testing.md.
if [[ "${TRAINLET_SLOW:-0}" == 1 ]]; then
  scripts/mpi5_root.sh
  scripts/debian_root.sh bullseye bookworm trixie
  # The images on the bookworm base (the static binary only: a dynamic one
  # cannot run FROM scratch, and the image tests skip).
  if file -L "$BUILD_DIR/trainlet" | grep -q "statically linked" &&
    [[ "${TRAINLET_SKIP_PODMAN:-0}" != 1 ]]; then
    TRAINLET_BIN=$BUILD_DIR/trainlet scripts/images.sh
  fi
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
