"""The static binary and the plain Debian roots, for the tests that run
trainlet where nothing of this machine's Debian 12 is around it: the
portability test (e2e_portability.py: Debian 11, 12 and 13 roots, and an
empty one) and the container image tests (e2e_podman.py).

    reason = debian_roots.not_static_reason(harness.TRAINLET)   # None when static
    root = debian_roots.root("bookworm")       # its path, or unittest.SkipTest
    argv = debian_roots.chroot_prefix(host, root, [test.dir]) + [...]

The roots are `debootstrap --variant=minbase` with nothing added, built and
cached under /var/cache/trainlet by scripts/debian_root.sh (TRAINLET_ROOTS_DIR
overrides the directory). A test never writes into a root: every process runs
chrooted in a private mount namespace (chroot_prefix: /proc, /dev, /sys, the
netns host's /etc/hosts, a per-host tmpfs on /tmp, shared directories under
/tmp), all of which goes away with the process.

Stdlib only.
"""

import os
import shlex
import shutil
import struct
import subprocess
import unittest


HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "scripts", "debian_root.sh")
RELEASES = {"bullseye": "11", "bookworm": "12", "trixie": "13"}
REQUIRE_ROOTS_VAR = "E2E_REQUIRE_ROOTS"  # "1": a missing root fails instead of skipping

_PT_INTERP = 3


def elf_interpreter(path):
    """The ELF program interpreter (PT_INTERP) `path` names, "" when it has
    none (a statically linked executable), or None when it is not a 64-bit
    little-endian ELF file."""
    with open(path, "rb") as f:
        header = f.read(64)
        if len(header) < 64 or header[:4] != b"\x7fELF" or header[4] != 2 or header[5] != 1:
            return None
        phoff, = struct.unpack_from("<Q", header, 32)
        phentsize, phnum = struct.unpack_from("<HH", header, 54)
        for i in range(phnum):
            f.seek(phoff + i * phentsize)
            ptype, = struct.unpack("<I", f.read(4))
            if ptype == _PT_INTERP:
                f.seek(phoff + i * phentsize + 8)
                offset, = struct.unpack("<Q", f.read(8))
                f.seek(phoff + i * phentsize + 32)
                size, = struct.unpack("<Q", f.read(8))
                f.seek(offset)
                return f.read(size).rstrip(b"\0").decode(errors="replace")
    return ""


def not_static_reason(path):
    """Why `path` cannot run in a root without this machine's libraries, or
    None when it is statically linked (no ELF interpreter)."""
    try:
        interp = elf_interpreter(path)
    except OSError as e:
        return "cannot read %s: %s" % (path, e)
    if interp is None:
        return "%s is not an x86-64 ELF executable" % path
    if interp:
        described = ""
        if shutil.which("file"):
            r = subprocess.run(["file", "-L", "-b", path], stdout=subprocess.PIPE, text=True,
                               timeout=30)
            described = " (file: %s)" % r.stdout.strip()[:100]
        return ("%s is dynamically linked (interpreter %s)%s: these tests need the static "
                "binary; set TRAINLET_BIN to it" % (path, interp, described))
    return None


def require_static(path):
    """unittest.SkipTest unless `path` is statically linked."""
    reason = not_static_reason(path)
    if reason:
        raise unittest.SkipTest(reason)


def root_dir():
    return os.environ.get("TRAINLET_ROOTS_DIR") or "/var/cache/trainlet"


def root_path(release):
    """Where scripts/debian_root.sh keeps `release`'s root (built or not)."""
    if release not in RELEASES:
        raise ValueError("release %r: use one of %s" % (release, sorted(RELEASES)))
    return os.path.join(root_dir(), "debian-%s-minbase" % release)


def root(release):
    """The path of `release`'s built root; unittest.SkipTest naming the
    command that builds it when it is missing (AssertionError instead when
    E2E_REQUIRE_ROOTS=1: the slow label, where the roots are built first)."""
    path = root_path(release)
    if os.path.isfile(os.path.join(path, ".ready")):
        return path
    message = ("no Debian %s (%s) root at %s: run scripts/debian_root.sh %s first (as root; "
               "debootstrap, about 2 minutes)" % (RELEASES[release], release, path, release))
    if os.environ.get(REQUIRE_ROOTS_VAR) == "1":
        raise AssertionError(message)
    raise unittest.SkipTest(message)


def chroot_prefix(host, root_path_, shared_dirs=()):
    """argv prefix that runs a command on netns `host` with its hostname,
    chrooted into `root_path_`, in a private mount namespace that mounts
    /proc, /dev, /sys, the host's hosts file over ROOT/etc/hosts (a chroot
    does not see /etc/netns/<ns>/hosts), a fresh tmpfs on ROOT/tmp, and
    `shared_dirs` (host directories under /tmp) at their own paths on that
    tmpfs. Nothing is created in the root: it must have /proc, /dev, /sys,
    /tmp and an /etc/hosts to mount over (scripts/debian_root.sh leaves an
    empty one). Everything goes away with the host's last process."""
    lines = ["set -e", "R=%s" % shlex.quote(root_path_),
             'mount -t proc proc "$R/proc"',
             'mount --rbind /dev "$R/dev"',
             'mount --rbind /sys "$R/sys"',
             'mount --bind /etc/hosts "$R/etc/hosts"',
             'mount -t tmpfs -o mode=1777 tmpfs "$R/tmp"']
    for d in shared_dirs:
        d = os.path.abspath(d)
        if not d.startswith("/tmp/"):
            raise ValueError("shared dir %s is not under /tmp: its mount point would be "
                             "created in the root" % d)
        lines += ['mkdir -p "$R"%s' % shlex.quote(d),
                  'mount --bind %s "$R"%s' % (shlex.quote(d), shlex.quote(d))]
    lines += ["hostname %s" % shlex.quote(host.name), 'exec chroot "$R" "$@"']
    return ["ip", "netns", "exec", host.ns, "unshare", "--uts", "--mount",
            "--propagation", "private", "sh", "-c", "; ".join(lines), "chroot-host"]


def make_empty_root(path):
    """Creates at `path` a root with nothing but the mount points that
    chroot_prefix needs (proc, dev, sys, tmp, an empty etc/hosts)."""
    for d in ("proc", "dev", "sys", "tmp", "etc"):
        os.makedirs(os.path.join(path, d), exist_ok=True)
    open(os.path.join(path, "etc", "hosts"), "w").close()
    return path
