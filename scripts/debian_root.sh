#!/usr/bin/env bash
# Plain Debian root filesystems, `debootstrap --variant=minbase` and nothing
# else, for the portability e2e test (e2e/e2e_portability.py: the same static
# trainlet runs a 2-node job in Debian 11, 12 and 13) and as the base image of
# the container images (scripts/images.sh imports bookworm's). As root:
#
#   scripts/debian_root.sh RELEASE...          build each root once (idempotent)
#   scripts/debian_root.sh --path RELEASE      print the root's path (built or not)
#
# RELEASE is bullseye (11), bookworm (12) or trixie (13). A root lives at
# /var/cache/trainlet/debian-RELEASE-minbase (TRAINLET_ROOTS_DIR overrides
# the directory). It is built in ROOT.partial and renamed when complete, so an
# interrupted build is started over rather than used half-done; ROOT/.ready
# marks a complete root and records the release and the build time. Nothing
# is added to what debootstrap installs except an empty /etc/hosts (a mount
# point), and a root is never modified after it is built: tests mount what
# they need in private mount namespaces (e2e/debian_roots.py, chroot_prefix). The first build of
# each root runs debootstrap (installed with apt when missing): about 2 min and
# 150-200 MB per release here. All three releases come from
# http://deb.debian.org/debian (TRAINLET_DEBIAN_MIRROR overrides).
set -euo pipefail

DIR=${TRAINLET_ROOTS_DIR:-/var/cache/trainlet}
MIRROR=${TRAINLET_DEBIAN_MIRROR:-http://deb.debian.org/debian}
RELEASES=(bullseye bookworm trixie)

die() { echo "debian_root: $*" >&2; exit 1; }

root_of() {
  local r
  for r in "${RELEASES[@]}"; do
    [[ $1 == "$r" ]] && { echo "$DIR/debian-$1-minbase"; return 0; }
  done
  die "unknown release '$1' (use one of: ${RELEASES[*]})"
}

# A failed or interrupted debootstrap may leave its /proc and /sys mounts.
umount_below() {
  local dir=$1 m
  for m in sys proc dev/pts dev; do
    if mountpoint -q "$dir/$m"; then
      umount -R "$dir/$m" || umount -R -l "$dir/$m"
    fi
  done
}

build() {
  local release=$1 root partial started
  root=$(root_of "$release")
  partial=$root.partial
  if [[ -f $root/.ready ]]; then
    [[ -e $root/etc/hosts ]] || : >"$root/etc/hosts"  # roots built before it was added
    echo "debian_root: $root ready"
    return 0
  fi
  [[ $(id -u) -eq 0 ]] || die "must run as root (debootstrap)"
  if [[ -d $partial ]]; then
    umount_below "$partial"
    rm -rf --one-file-system "$partial"
  fi
  if ! command -v debootstrap >/dev/null; then
    echo "debian_root: installing debootstrap"
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends debootstrap
  fi
  mkdir -p "$DIR"
  started=$(date +%s)
  echo "debian_root: debootstrap --variant=minbase $release into $partial (about 2 min)"
  trap 'umount_below "$partial"' EXIT
  debootstrap --variant=minbase "$release" "$partial" "$MIRROR"
  umount_below "$partial"
  trap - EXIT
  # debootstrap leaves its package cache; the root keeps only what it installed.
  rm -rf "$partial"/var/cache/apt/archives/*.deb "$partial"/var/lib/apt/lists/*_Packages
  # The one file added: an empty /etc/hosts, for tests to bind-mount a netns
  # host's hosts file over (debootstrap writes none).
  [[ -e $partial/etc/hosts ]] || : >"$partial/etc/hosts"
  printf 'release=%s\nbuilt=%s\nseconds=%s\n' "$release" "$(date -u +%FT%TZ)" \
    "$(($(date +%s) - started))" >"$partial/.ready"
  mv "$partial" "$root"
  echo "debian_root: $root ready ($(($(date +%s) - started)) s)"
}

case "${1:-}" in
  "") die "usage: $0 RELEASE... | --path RELEASE (releases: ${RELEASES[*]})" ;;
  --path)
    [[ $# -eq 2 ]] || die "usage: $0 --path RELEASE"
    root_of "$2"
    ;;
  *)
    for release in "$@"; do build "$release"; done
    ;;
esac
