#!/usr/bin/env bash
# Quick start, command 2: install, build, and run every test (unit,
# in-process gRPC, black-box e2e, real torch). CI (.ci/run) calls this.
set -euo pipefail
cd "$(dirname "$0")/.."
scripts/setup.sh --with-tests
BUILD_DIR=${TRAINLET_BUILD_DIR:-build}
ctest --test-dir "$BUILD_DIR" -j2 --output-on-failure --timeout 300
