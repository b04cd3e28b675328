#!/usr/bin/env bash
# Fetches cpp-httplib's header-only httplib.h from Debian 12's own source
# package (the same patched version as libcpp-httplib-dev, whose binary
# package ships only a shared library, unusable in our fully static
# trainlet) into third_party/cpp-httplib/ (gitignored). scripts/setup.sh runs
# it; CMake stops with a message naming it when the header is missing.
#   scripts/fetch_httplib.sh            fetch once (no-op when present)
# Like dget: the .dsc, then the tarballs it names, each checked against the
# .dsc's sha256; dpkg-source -x applies Debian's patches (the deb12u1
# security fix included, checked below).
set -euo pipefail
cd "$(dirname "$0")/.."

VERSION=0.11.4+ds-1+deb12u1
# Debian's version plus our own patches (third_party/patches/: a cap on the
# number of header lines, which 0.11.4 lacks); a change re-fetches.
STAMP=$VERSION+trainlet1
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
POOL=$MIRROR/pool/main/c/cpp-httplib
DSC=cpp-httplib_${VERSION}.dsc
# The .dsc's own sha256, pinned here: the tarballs are checked against it.
DSC_SHA256=a4dde747bbde7cc9fa62cdf50d61140a0eaefb7f1383497ef2d48daf3bf5f9ec
DEST=third_party/cpp-httplib

if [[ -f $DEST/httplib.h && -f $DEST/VERSION ]] && grep -qx "$STAMP" "$DEST/VERSION"; then
  exit 0
fi
for tool in curl dpkg-source sha256sum patch; do
  command -v "$tool" >/dev/null || { echo "fetch_httplib: $tool is missing (apt-get install curl dpkg-dev)" >&2; exit 1; }
done

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
echo "fetch_httplib: $POOL/$DSC"
curl -fsSL --retry 3 -o "$work/$DSC" "$POOL/$DSC"
echo "$DSC_SHA256  $work/$DSC" | sha256sum -c --quiet - || { echo "fetch_httplib: $DSC does not match its pinned sha256" >&2; exit 1; }
# The Checksums-Sha256 block: " <sha256> <size> <name>" lines.
mapfile -t files < <(awk '/^Checksums-Sha256:/{on=1;next} /^[^ ]/{on=0} on&&NF==3{print $1" "$3}' "$work/$DSC")
if ((${#files[@]} != 2)); then
  echo "fetch_httplib: $DSC names ${#files[@]} files, expected 2 (orig and debian tarballs)" >&2
  exit 1
fi
for entry in "${files[@]}"; do
  sum=${entry%% *}
  name=${entry#* }
  [[ $name =~ ^cpp-httplib_[A-Za-z0-9.+~-]+\.tar\.xz$ ]] || { echo "fetch_httplib: unexpected file name in $DSC: $name" >&2; exit 1; }
  curl -fsSL --retry 3 -o "$work/$name" "$POOL/$name"
  echo "$sum  $work/$name" | sha256sum -c --quiet - || { echo "fetch_httplib: $name does not match its sha256 in $DSC" >&2; exit 1; }
done
(cd "$work" && dpkg-source --no-check -x "$DSC" src >/dev/null)
# Debian's security patch for CVE-2023-26130 (CRLF injection) must be there
# and applied.
if ! grep -qi 'CVE-2023-26130\|crlf' "$work/src/debian/patches/series" "$work"/src/debian/patches/*.patch 2>/dev/null; then
  echo "fetch_httplib: Debian's security patch is not in debian/patches" >&2
  exit 1
fi
# ... and applied: the patch adds detail::has_crlf to the header setters.
grep -q 'has_crlf(' "$work/src/httplib.h" || { echo "fetch_httplib: the CVE-2023-26130 patch is not applied to httplib.h" >&2; exit 1; }
for p in third_party/patches/cpp-httplib-*.patch; do
  patch --quiet -p1 -d "$work/src" < "$p" || { echo "fetch_httplib: $p does not apply" >&2; exit 1; }
done
mkdir -p "$DEST"
cp "$work/src/httplib.h" "$DEST/httplib.h"
cp "$work/src/LICENSE" "$DEST/LICENSE"
cp "$work/src/debian/patches/series" "$DEST/debian-patches-series"
echo "$STAMP" > "$DEST/VERSION"
echo "fetch_httplib: $DEST/httplib.h ($STAMP)"
