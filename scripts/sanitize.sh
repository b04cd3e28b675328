#!/usr/bin/env bash
# Builds everything with AddressSanitizer + UndefinedBehaviorSanitizer (gcc)
# in ./build-asan and runs the whole ctest suite there: unit, in-process
# gRPC, e2e (the real binary under ASan) and the fuzz targets' short replay
# runs. Not part of scripts/test.sh (docs/testing.md says how long it takes).
#
#   scripts/sanitize.sh [CTEST_ARGS...]     e.g. scripts/sanitize.sh -L e2e
#
# Any ASan report or UB aborts the process (halt_on_error), so it fails the
# test that ran it. Environment: TRAINLET_ASAN_BUILD_DIR (default build-asan).
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD=${TRAINLET_ASAN_BUILD_DIR:-build-asan}
SANITIZE="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"

start=$(date +%s)
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINLET_BUILD_TESTS=ON \
  -DTRAINLET_FUZZ=ON -DTRAINLET_FUZZ_ENGINE=replay \
  -DCMAKE_C_FLAGS="$SANITIZE" -DCMAKE_CXX_FLAGS="$SANITIZE" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
ninja -C "$BUILD" -j"$(nproc)"
built=$(date +%s)

# Inherited by every binary the tests start (the e2e agents too).
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:halt_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
set +e
ctest --test-dir "$BUILD" -j2 --output-on-failure --timeout 600 "$@"
rc=$?
set -e
echo "sanitize: build $((built - start)) s, ctest $(($(date +%s) - built)) s, exit $rc"
exit $rc
