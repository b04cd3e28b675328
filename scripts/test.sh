#!/usr/bin/env bash
# Quick start, command 2: install, build, and run every test (unit,
# in-process gRPC, black-box e2e, real torch, fuzz replays), then the core's
# unit tests again under ASan + UBSan. CI (.ci/run) calls this.
#
# The build has -Werror for the project's code (TRAINLET_WERROR). At the end
# it prints how long each stage took, and the 10 slowest build steps and
# the 10 slowest tests of this run (scripts/slowest.py), also when a test
# failed. docs/testing.md, "CI", says what runs and how to run the rest.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${TRAINLET_BUILD_DIR:-build}
JUNIT=$PWD/$BUILD_DIR/ctest-junit.xml
t0=$(date +%s)
since=$(date +%s.%N)  # build steps newer than this are this run's
scripts/setup.sh --with-tests
t_build=$(date +%s)
# The container image tests (label podman) need rootful podman and runc:
# installed once with apt (about 1 minute); TRAINLET_SKIP_PODMAN=1 skips it
# and the tests then skip themselves.
if [[ "${TRAINLET_SKIP_PODMAN:-0}" != 1 ]]; then
  scripts/images.sh --install-podman
fi
rm -f "$JUNIT"
rc=0
# The slow suites (label `slow`: Open MPI 5 in a trixie root, the Debian
# 11/12/13 roots, the torch and mpi images) run with TRAINLET_SLOW=1.
if [[ "${TRAINLET_SLOW:-0}" == 1 ]]; then
  scripts/mpi5_root.sh
  scripts/debian_root.sh bullseye bookworm trixie
  # The images on the bookworm base (the static binary only: a dynamic one
  # cannot run FROM scratch, and the image tests skip).
  if file -L "$BUILD_DIR/trainlet" | grep -q "statically linked" &&
    [[ "${TRAINLET_SKIP_PODMAN:-0}" != 1 ]]; then
    TRAINLET_BIN=$BUILD_DIR/trainlet scripts/images.sh
  fi
  t_tests=$(date +%s)
  ctest --test-dir "$BUILD_DIR" -j2 --output-on-failure --timeout 300 \
    --output-junit "$JUNIT" || rc=$?
else
  t_tests=$(date +%s)
  ctest --test-dir "$BUILD_DIR" -j2 --output-on-failure --timeout 300 -LE slow \
    --output-junit "$JUNIT" || rc=$?
fi
t_sanitize=$(date +%s)
# The short sanitizer stage: the gRPC-free core's unit tests and the fuzz
# replays under ASan + UBSan (the whole suite under sanitizers is
# scripts/sanitize.sh, docs/testing.md).
sanitized=0
if ((rc == 0)) && [[ "${TRAINLET_SKIP_SANITIZE:-0}" != 1 ]]; then
  sanitized=1
  scripts/sanitize.sh --short || rc=$?
fi
t_end=$(date +%s)
echo
scripts/slowest.py --ninja-log "$BUILD_DIR/.ninja_log" --since "$since" --junit "$JUNIT" || true
if ((sanitized)); then
  scripts/slowest.py --ninja-log "${TRAINLET_ASAN_BUILD_DIR:-build-asan-short}/.ninja_log" \
    --since "$since" || true
fi
echo "test: setup and build $((t_build - t0)) s, tests $((t_sanitize - t_tests)) s," \
  "sanitizer stage $((t_end - t_sanitize)) s, all $((t_end - t0)) s; exit $rc"
exit $rc
