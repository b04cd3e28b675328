#!/usr/bin/env bash
# A Debian trixie root filesystem with Open MPI 5 (PRRTE), for the e2e tests
# that run the real Open MPI 5 `mpirun` (Debian 12 has only 4.1). As root:
#
#   scripts/mpi5_root.sh            build the root once (idempotent), then
#                                   (re)compile e2e/workers/mpi_allreduce.c in it
#   scripts/mpi5_root.sh --mount    mount /proc, /dev and /sys in the root (idempotent)
#   scripts/mpi5_root.sh --umount   unmount what --mount mounted (idempotent)
#   scripts/mpi5_root.sh --path     print the root's path
#
# The root lives at /var/cache/trainlet/trixie-ompi5 (TRAINLET_MPI5_ROOT
# overrides). It is built in ROOT.partial and renamed when complete, so a build
# that is interrupted is started over rather than used half-done; ROOT/.ready
# marks a complete root. The first build runs debootstrap (installed with apt
# when missing) and takes a few minutes; later runs only recompile the program
# when its source changed. The program is at ROOT/opt/trainlet-e2e/mpi_allreduce.
#
# The e2e helpers (e2e/mpi_support.py) do not need --mount: every host process
# they start mounts /proc, /dev, /sys and its own hosts file inside a private
# mount namespace that goes away with it. --mount is for running the root by
# hand: `chroot ROOT mpirun --version`. (build-recipes.md, section 9.)
set -euo pipefail
cd "$(dirname "$0")/.."

ROOT=${TRAINLET_MPI5_ROOT:-/var/cache/trainlet/trixie-ompi5}
MIRROR=${TRAINLET_MPI5_MIRROR:-http://deb.debian.org/debian}
PACKAGES=(openmpi-bin libopenmpi-dev gcc libc6-dev openssh-server openssh-client)
SRC=e2e/workers/mpi_allreduce.c
PARTIAL=$ROOT.partial

die() { echo "mpi5_root: $*" >&2; exit 1; }

[[ $(id -u) -eq 0 ]] || die "must run as root (debootstrap, chroot, mount)"

# mount_all DIR: /proc, /dev (bind) and /sys (recursive bind, made a slave so
# that unmounting its submounts later never propagates back to the host's /sys).
mount_all() {
  local dir=$1
  mountpoint -q "$dir/proc" || mount -t proc proc "$dir/proc"
  mountpoint -q "$dir/dev" || mount --bind /dev "$dir/dev"
  if ! mountpoint -q "$dir/sys"; then
    mount --rbind /sys "$dir/sys"
    mount --make-rslave "$dir/sys"
  fi
}

umount_all() {
  local dir=$1 m
  for m in sys dev proc; do
    if mountpoint -q "$dir/$m"; then
      umount -R "$dir/$m" || umount -R -l "$dir/$m"
    fi
  done
}

# compile DIR: builds the MPI program inside the root when its source changed.
compile() {
  local dir=$1 out=$1/opt/trainlet-e2e
  mkdir -p "$out"
  if [[ -x $out/mpi_allreduce ]] && cmp -s "$SRC" "$out/mpi_allreduce.c"; then
    return 0
  fi
  cp "$SRC" "$out/mpi_allreduce.new.c"
  chroot "$dir" mpicc -O2 -Wall -o /opt/trainlet-e2e/mpi_allreduce.new \
    /opt/trainlet-e2e/mpi_allreduce.new.c
  mv "$out/mpi_allreduce.new" "$out/mpi_allreduce"
  mv "$out/mpi_allreduce.new.c" "$out/mpi_allreduce.c"
  echo "mpi5_root: compiled $out/mpi_allreduce"
}

build() {
  if [[ ! -f $ROOT/.ready ]]; then
    if [[ -d $PARTIAL ]]; then
      umount_all "$PARTIAL"
      rm -rf --one-file-system "$PARTIAL"
    fi
    if ! command -v debootstrap >/dev/null; then
      echo "mpi5_root: installing debootstrap"
      DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
    fi
    mkdir -p "$(dirname "$ROOT")"
    echo "mpi5_root: debootstrap trixie into $PARTIAL (a few minutes)"
    debootstrap --variant=minbase trixie "$PARTIAL" "$MIRROR"
    trap 'umount_all "$PARTIAL"' EXIT  # also when a step fails
    mount_all "$PARTIAL"
    chroot "$PARTIAL" sh -c "apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
      apt-get install -y -qq --no-install-recommends ${PACKAGES[*]} && apt-get clean"
    mkdir -p "$PARTIAL/run/sshd"
    [[ -e $PARTIAL/etc/hosts ]] || : >"$PARTIAL/etc/hosts"  # a bind-mount target
    compile "$PARTIAL"
    umount_all "$PARTIAL"
    trap - EXIT
    touch "$PARTIAL/.ready"
    mv "$PARTIAL" "$ROOT"
  fi
  mkdir -p "$ROOT/run/sshd"
  compile "$ROOT"
  local version
  version=$(chroot "$ROOT" mpirun --version 2>&1 | head -1)
  [[ $version == *" 5."* ]] || die "$ROOT: mpirun --version says '$version', expected 5.x"
  echo "mpi5_root: $ROOT ready: $version"
}

case "${1:-}" in
  "") build ;;
  --mount)
    [[ -f $ROOT/.ready ]] || die "$ROOT is not built: run scripts/mpi5_root.sh first"
    mount_all "$ROOT"
    ;;
  --umount) [[ -d $ROOT ]] && umount_all "$ROOT" ;;
  --path) echo "$ROOT" ;;
  *) die "unknown option '$1' (use no option, --mount, --umount or --path)" ;;
esac
