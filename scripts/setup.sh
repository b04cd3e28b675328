#!/usr/bin/env bash
# Installs what trainlet needs on Debian 12 (as root) and builds it.
#   scripts/setup.sh [--with-tests]     build dir: ./build (TRAINLET_BUILD_DIR overrides)
# build/trainlet is linked fully static (TRAINLET_STATIC=OFF in the
# environment builds it dynamic); the tests stay dynamic.
# Packages are installed only when missing, so a second run is offline-safe.
set -euo pipefail
cd "$(dirname "$0")/.."

PACKAGES=(
  build-essential cmake ninja-build pkg-config ccache
  lld                                   # links 3-4x faster than GNU ld (CMakeLists.txt)
  libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc libabsl-dev
  libgtest-dev libgmock-dev
  python3 python3-torch python3-numpy   # the demo and the real-client tests
  python3-xgboost                       # e2e_frameworks: XGBoost 1.7's collective (Rabit)
  iproute2 procps
  python3-jsonschema python3-yaml           # deploy/: the manifests checked against the CRD schemas
  tini strace                           # bench/startup.py (against tini); e2e_static (no socket)
  libssh-dev openssh-server openssh-client   # MPI: job keys, sshd on workers, readiness
  openmpi-bin libopenmpi-dev mpich libmpich-dev  # MPI: the real-client e2e tests
  libsqlite3-dev                        # the controller's history (--db)
  curl dpkg-dev                         # scripts/fetch_httplib.sh: cpp-httplib from Debian's source package
  chromium prometheus                   # e2e_controller_views: the page in a real browser, promtool on /metrics
)
missing=()
for p in "${PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  if [[ $(id -u) -ne 0 ]]; then
    echo "setup: missing packages: ${missing[*]}; run as root (or install them) first" >&2
    exit 1
  fi
  echo "setup: installing ${missing[*]}"
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

# The controller's HTTP views: header-only cpp-httplib from Debian's source
# package (the binary package ships only a shared library).
scripts/fetch_httplib.sh

BUILD_DIR=${TRAINLET_BUILD_DIR:-build}
TESTS=OFF
[[ "${1:-}" == "--with-tests" ]] && TESTS=ON
export CCACHE_DIR=${CCACHE_DIR:-$HOME/.cache/ccache}
# With the tests (CI: scripts/test.sh) a warning in the project's code is an
# error (TRAINLET_WERROR); the plain build only warns, so that a newer
# compiler's new warnings never stop a user's build.
cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DTRAINLET_BUILD_TESTS=$TESTS -DTRAINLET_WERROR=$TESTS -DTRAINLET_SKIP_DIRS= \
  -DTRAINLET_STATIC="${TRAINLET_STATIC:-ON}" >/dev/null
ninja -C "$BUILD_DIR" -j"$(nproc)"
echo "setup: built $BUILD_DIR/trainlet"
