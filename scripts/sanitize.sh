#!/usr/bin/env bash
# Builds with AddressSanitizer + UndefinedBehaviorSanitizer (gcc) and runs the
# tests there.
#
#   scripts/sanitize.sh [CTEST_ARGS...]   everything, in ./build-asan: unit,
#                                         in-process gRPC, e2e (the real binary
#                                         under ASan), the fuzz replays
#   scripts/sanitize.sh --short           the short version scripts/test.sh (and
#                                         so CI) runs, in ./build-asan-short: the
#                                         gRPC-free core's unit tests (the
#                                         agent's round, the coordinator core,
#                                         the TCP listener, the launcher with
#                                         real processes, config) and the fuzz
#                                         targets' replay runs: it builds only
#                                         those (about 600 CPU-s with no
#                                         ccache), and runs them in about 50 s
#
# Any ASan report or UB aborts the process (halt_on_error), so it fails the
# test that ran it. Environment: TRAINLET_ASAN_BUILD_DIR overrides the folder.
set -euo pipefail
cd "$(dirname "$0")/.."
SHORT=0
if [[ "${1:-}" == "--short" ]]; then
  SHORT=1
  shift
fi
BUILD=${TRAINLET_ASAN_BUILD_DIR:-build-asan}
((SHORT)) && BUILD=${TRAINLET_ASAN_BUILD_DIR:-build-asan-short}
# -fno-sanitize=vptr: UBSan's vptr check probes memory through a pipe, so in a
# process that is out of descriptors (the tests exhaust them on purpose:
# tcp_listener_test, e2e_server) every virtual call is reported as "invalid
# vptr". Every other UBSan check stays on.
SANITIZE="-fsanitize=address,undefined -fno-sanitize=vptr -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}

# -O1 -g1, as the sanitizers' documentation suggests: stacks keep their
# file:line, and the tree compiles in about half the time of -O2 -g
# (rendezvous/coordinator.cc 20 CPU-s instead of 40, agent/round.cc 12
# instead of 28). The test code is at TRAINLET_TEST_OPT (-Og -g1) as in the
# main tree.
OPT="-O1 -g1 -DNDEBUG"

start=$(date +%s)
# Sanitizer runtimes need a dynamic binary: TRAINLET_STATIC off.
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DTRAINLET_BUILD_TESTS=ON \
  -DCMAKE_C_FLAGS_RELWITHDEBINFO="$OPT" -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="$OPT" \
  -DTRAINLET_WERROR=ON -DTRAINLET_STATIC=OFF \
  -DTRAINLET_FUZZ=ON -DTRAINLET_FUZZ_ENGINE=replay \
  -DCMAKE_C_FLAGS="$SANITIZE" -DCMAKE_CXX_FLAGS="$SANITIZE" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=address,undefined" >/dev/null
SHORT_TESTS=(common/common_test launcher/launcher_test config/config_test agent/agent_env_test
  agent/agent_test progress/progress_test
  rendezvous/rendezvous_core_test topology/topology_test topology/nvml_test
  topology/probe_nvml_test)
if ((SHORT)); then
  ninja -C "$BUILD" -j"$(nproc)" $(for t in "${SHORT_TESTS[@]}"; do basename "$t"; done) \
    fuzz_targets
else
  ninja -C "$BUILD" -j"$(nproc)"
fi
built=$(date +%s)

# Inherited by every binary the tests start (the e2e agents too).
export ASAN_OPTIONS=${ASAN_OPTIONS:-abort_on_error=1:halt_on_error=1:detect_leaks=1:strict_string_checks=1:detect_stack_use_after_return=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
set +e
rc=0
if ((SHORT)); then
  for t in "${SHORT_TESTS[@]}"; do
    "$BUILD/$t" --gtest_brief=1 >"$BUILD/$(basename "$t").log" 2>&1 || {
      rc=1
      echo "sanitize: $t FAILED"
      tail -40 "$BUILD/$(basename "$t").log"
    }
  done
  ctest --test-dir "$BUILD" -L fuzz --output-on-failure --timeout 300 || rc=1
else
  ctest --test-dir "$BUILD" -j2 --output-on-failure --timeout 600 "$@"
  rc=$?
fi
set -e
echo "sanitize: build $((built - start)) s, tests $(($(date +%s) - built)) s, exit $rc"
exit $rc
