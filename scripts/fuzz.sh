#!/usr/bin/env bash
# Runs each fuzz target (fuzz/) for a number of executions and prints the
# counts (docs/testing.md, "Fuzzing").
#
#   scripts/fuzz.sh [RUNS [TARGET...]]
#   scripts/fuzz.sh 1000000                 # the 1M executions per target issue 7 asks for
#   scripts/fuzz.sh 100000 coordinator options
#
# Builds ./build-fuzz first: clang + libFuzzer + ASan + UBSan when clang++ can
# link -fsanitize=fuzzer (Debian: clang-14 and libclang-rt-14-dev), otherwise
# the replay executables with the default compiler (seed corpus plus random
# and mutated inputs, no coverage feedback). What a target finds goes to
# build-fuzz/fuzz/found/<target>/ (new corpus entries, libFuzzer only) and
# build-fuzz/fuzz/artifacts/ (crash inputs; rerun the target with the file as
# its only argument to reproduce). Logs: build-fuzz/fuzz/logs/<target>.log.
# Exit status: 0 when no target crashed.
#
# Environment: FUZZ_BUILD_DIR (default build-fuzz), FUZZ_SEED (default 1),
# FUZZ_MAX_LEN (default 4096), FUZZ_SECONDS (a time cap per target; default
# none), FUZZ_ENGINE (auto, libfuzzer or replay; default auto).
set -euo pipefail
cd "$(dirname "$0")/.."

RUNS=${1:-100000}
shift || true
BUILD=${FUZZ_BUILD_DIR:-build-fuzz}
SEED=${FUZZ_SEED:-1}
MAX_LEN=${FUZZ_MAX_LEN:-4096}
ENGINE=${FUZZ_ENGINE:-auto}

compilers=()
if command -v clang++ >/dev/null && [[ "$ENGINE" != replay ]]; then
  compilers=(-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++)
fi
if [[ ! -f "$BUILD/build.ninja" ]]; then
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo "${compilers[@]}" \
    -DTRAINLET_BUILD_TESTS=OFF -DTRAINLET_STATIC=OFF -DTRAINLET_FUZZ=ON \
    -DTRAINLET_FUZZ_ENGINE="$ENGINE" >/dev/null
fi
ninja -C "$BUILD" fuzz_targets >/dev/null

root=$PWD
mkdir -p "$BUILD/fuzz/artifacts" "$BUILD/fuzz/logs"
dir=$(cd "$BUILD/fuzz" && pwd)
if (($# == 0)); then
  set -- $(cd fuzz && ls ./*_fuzz.cc | sed 's|^\./||; s|_fuzz\.cc$||')
fi

failed=0
printf '%-14s %12s %9s  %s\n' target executions seconds result
for name in "$@"; do
  target="$dir/${name}_fuzz"
  [[ -x "$target" ]] || { echo "fuzz: no target $name" >&2; exit 2; }
  mkdir -p "$dir/found/$name"
  log="$dir/logs/$name.log"
  args=(-runs="$RUNS" -seed="$SEED" -max_len="$MAX_LEN")
  [[ -n "${FUZZ_SECONDS:-}" ]] && args+=(-max_total_time="$FUZZ_SECONDS")
  start=$(date +%s%N)
  set +e
  # libFuzzer options; the replay driver ignores the ones it does not know
  # and writes its crash input to the working directory.
  (cd "$dir/artifacts" && "$target" "${args[@]}" -artifact_prefix="$dir/artifacts/$name-" \
    -print_final_stats=1 "$dir/found/$name" "$root/fuzz/corpus/$name") >"$log" 2>&1
  rc=$?
  set -e
  ms=$((($(date +%s%N) - start) / 1000000))
  # libFuzzer: "Done N runs in S second(s)"; replay: "replay: Done N runs ...";
  # on a crash libFuzzer's final stats still say how far it got.
  runs=$(grep -oE 'Done [0-9]+ runs' "$log" | tail -1 | grep -oE '[0-9]+' ||
         grep -oE 'stat::number_of_executed_units: *[0-9]+' "$log" | grep -oE '[0-9]+$' || echo '?')
  if ((rc == 0)); then
    result=ok
  else
    failed=1
    result="FAILED (rc $rc): $(grep -m1 -E 'invariant failed|runtime error|ERROR: (Address|Undefined|libFuzzer)' "$log" | cut -c1-160)"
  fi
  printf '%-14s %12s %5d.%03d  %s\n' "$name" "$runs" $((ms / 1000)) $((ms % 1000)) "$result"
done
((failed == 0)) || echo "fuzz: crash inputs in $dir/artifacts, logs in $dir/logs" >&2
exit $failed
