#!/usr/bin/env bash
# Builds the container images of images/ with rootful podman, from a Debian
# base made by debootstrap (no registry is reachable here). As root:
#
#   scripts/images.sh [IMAGE...]        build base, trainlet, torch, mpi (default: all)
#   scripts/images.sh --install-podman  install podman and its tools with apt (once)
#   scripts/images.sh --prune           remove this script's images of other binaries
#   scripts/images.sh --remove-all      remove every image this script made
#
# The binary is TRAINLET_BIN (default build/trainlet) and must be statically
# linked. Images, all under localhost/trainlet-e2e/:
#   debian:bookworm  the debootstrap --variant=minbase root of
#                    scripts/debian_root.sh, imported (`podman import`); kept
#                    and reused until that root is rebuilt
#   trainlet:HASH    images/trainlet (FROM scratch, /trainlet), HASH = the
#                    first 12 hex digits of the binary's sha256
#   torch:HASH       images/torch: python3-torch, ENTRYPOINT trainlet run --
#   mpi:HASH         images/mpi: openmpi-bin, openssh-server, ENTRYPOINT trainlet
# torch and mpi use podman's layer cache: their apt layer is built once (a few
# minutes for torch) and a new binary only adds its COPY layer. Each image is
# built only when its tag is missing. The last lines of the output are
# `image NAME REFERENCE`, one per image built or found (the e2e tests read them).
#
# podman runs with CONTAINERS_CONF=images/containers.conf (runc, pinned
# ulimits; build-recipes.md section 10) unless CONTAINERS_CONF is set. Builds
# use the host's network (no podman network, so no netavark rules). Each image
# is built under its own lock (/var/cache/trainlet/images-NAME.lock).
set -euo pipefail
BIN=${TRAINLET_BIN:-}
[[ -z $BIN || $BIN == /* ]] || BIN=$PWD/$BIN # relative to where it was called from
cd "$(dirname "$0")/.."
REPO=$PWD
BIN=${BIN:-$REPO/build/trainlet}

PREFIX=localhost/trainlet-e2e
PODMAN_PACKAGES=(podman buildah skopeo runc uidmap slirp4netns fuse-overlayfs)
export CONTAINERS_CONF=${CONTAINERS_CONF:-$REPO/images/containers.conf}

die() { echo "images: $*" >&2; exit 1; }

install_podman() {
  if [[ $(id -u) -ne 0 ]]; then
    echo "images: not root: podman not installed (the image tests will skip)"
    return 0
  fi
  if command -v podman >/dev/null && command -v runc >/dev/null; then
    echo "images: podman $(podman --version | awk '{print $3}') and runc already installed"
    return 0
  fi
  echo "images: apt-get install ${PODMAN_PACKAGES[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${PODMAN_PACKAGES[@]}"
}

require_podman() {
  if ! command -v podman >/dev/null || ! command -v runc >/dev/null; then
    die "podman or runc missing: run scripts/images.sh --install-podman"
  fi
}

# The binary's hash (image tags) after checking that it is static: a
# dynamic trainlet cannot run FROM scratch.
binary_hash() {
  [[ -f $BIN && -x $BIN ]] || die "no trainlet binary at $BIN (set TRAINLET_BIN)"
  if ! file -L "$BIN" | grep -q "statically linked"; then
    die "$BIN is not statically linked ($(file -L -b "$BIN" | cut -c1-80)); build the static binary"
  fi
  sha256sum "$BIN" | cut -c1-12
}

image_exists() { podman image exists "$1"; }

build_base() {
  local root ref=$PREFIX/debian:bookworm built have
  root=$(scripts/debian_root.sh --path bookworm)
  scripts/debian_root.sh bookworm >&2
  built=$(sed -n 's/^built=//p' "$root/.ready")
  if image_exists "$ref"; then
    have=$(podman image inspect -f '{{index .Labels "trainlet.root.built"}}' "$ref")
    if [[ $have == "$built" ]]; then
      echo "image base $ref"
      return 0
    fi
    podman rmi -f "$ref" >/dev/null
  fi
  local started=$SECONDS
  tar -C "$root" --numeric-owner --exclude=./.ready -c . |
    podman import --change "LABEL trainlet.root.built=$built" --change 'CMD ["/bin/bash"]' \
      - "$ref" >/dev/null
  echo "images: imported $root as $ref ($((SECONDS - started)) s)" >&2
  echo "image base $ref"
}

build_trainlet() {
  local hash=$1 ref=$PREFIX/trainlet:$1 ctx
  if ! image_exists "$ref"; then
    ctx=$(mktemp -d /tmp/trainlet-image-XXXXXX)
    # The image gets the binary without its debug sections (a RelWithDebInfo
    # build carries about 10x the code in DWARF).
    strip --strip-debug -o "$ctx/trainlet" "$BIN"
    podman build --pull=never -q -f images/trainlet/Containerfile -t "$ref" "$ctx" >/dev/null ||
      { rm -rf "$ctx"; die "podman build of $ref failed"; }
    rm -rf "$ctx"
    echo "images: built $ref" >&2
  fi
  echo "image trainlet $ref"
}

# build_on_base NAME HASH CONTEXT: images/NAME/Containerfile on the base and
# the trainlet image of HASH.
build_on_base() {
  local name=$1 hash=$2 context=$3 ref=$PREFIX/$1:$2 started=$SECONDS
  if ! image_exists "$ref"; then
    podman build --pull=never --network=host --layers -f "images/$name/Containerfile" \
      --build-arg "BASE=$PREFIX/debian:bookworm" \
      --build-arg "TRAINLET_IMAGE=$PREFIX/trainlet:$hash" -t "$ref" "$context" >&2 ||
      die "podman build of $ref failed"
    echo "images: built $ref ($((SECONDS - started)) s)" >&2
  fi
  echo "image $name $ref"
}

# Removes this script's images of binaries other than HASH, leaving the base;
# an image a container still uses is kept. `podman rmi` also removes the
# intermediate layers only those images used (never anyone else's).
prune() {
  local keep=$1 ref
  for ref in $(podman images --format '{{.Repository}}:{{.Tag}}' | grep "^$PREFIX/" || true); do
    case $ref in
      "$PREFIX/debian:"*) ;;
      *":$keep") ;;
      *) if podman rmi "$ref" >/dev/null 2>&1; then echo "images: removed $ref"; fi ;;
    esac
  done
}

# locked NAME FUNCTION ARGS...: FUNCTION under an exclusive lock per image, so
# that concurrent runs (ctest -j2) build each image once, and a run that
# needs only the trainlet image does not wait for a torch build.
locked() {
  local name=$1
  shift
  (
    flock 9
    "$@"
  ) 9>"/var/cache/trainlet/images-$name.lock"
}

main() {
  case "${1:-}" in
    --install-podman) install_podman; return ;;
  esac
  [[ $(id -u) -eq 0 ]] || die "must run as root (rootful podman, debootstrap)"
  case "${1:-}" in
    --remove-all)
      require_podman
      podman images --format '{{.Repository}}:{{.Tag}}' | { grep "^$PREFIX/" || true; } |
        xargs -r podman rmi -f
      return
      ;;
  esac
  require_podman
  local hash wanted=("$@")
  mkdir -p /var/cache/trainlet
  if [[ ${1:-} == --prune ]]; then
    hash=$(binary_hash)
    prune "$hash"
    return
  fi
  [[ ${#wanted[@]} -gt 0 ]] || wanted=(base trainlet torch mpi)
  local name need_base=0
  for name in "${wanted[@]}"; do
    case $name in
      base | torch | mpi) need_base=1 ;;
      trainlet) ;;
      *) die "unknown image '$name' (use base, trainlet, torch or mpi)" ;;
    esac
  done
  local out=() base_line
  if [[ $need_base == 1 ]]; then
    base_line=$(locked base build_base)
    if [[ " ${wanted[*]} " == *" base "* ]]; then out+=("$base_line"); fi
  fi
  if [[ " ${wanted[*]} " == " base " ]]; then
    printf '%s\n' "${out[@]}"
    return
  fi
  local line
  hash=$(binary_hash)
  line=$(locked trainlet build_trainlet "$hash")
  out+=("$line")
  if [[ " ${wanted[*]} " == *" torch "* ]]; then
    line=$(locked torch build_on_base torch "$hash" scripts/demo)
    out+=("$line")
  fi
  if [[ " ${wanted[*]} " == *" mpi "* ]]; then
    line=$(locked mpi build_on_base mpi "$hash" images/mpi)
    out+=("$line")
  fi
  printf '%s\n' "${out[@]}"
}

main "$@"
