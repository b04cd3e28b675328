"""Rootful podman for the container image tests (e2e_podman.py): the images
that scripts/images.sh builds, and containers, networks and volumes named
with a per-test prefix and removed with the test.

    require_podman()                          # unittest.SkipTest with the reason
    refs = images(["trainlet", "torch"])      # {"trainlet": ref, "torch": ref}
    pm = Podman(self)                         # self: a unittest.TestCase
    net = pm.network("net")                   # "<prefix>-net", created
    c = pm.run_detached("node-0", ["--network", net], ref, ["python3", ...])
    code = pm.wait(c, 60)

podman runs with CONTAINERS_CONF=images/containers.conf (runc and pinned
ulimits, build-recipes.md section 10) unless the environment sets it. Every
object a test creates is named `tle2e-<6 hex>-<name>`; the test's cleanup
removes its containers (`podman rm -f -t 0`), networks and volumes by those
names. The images are kept on purpose (a cache: the torch image's apt layer
takes minutes to build); `scripts/images.sh --prune` removes those of other
binaries, `--remove-all` every one.

netavark leaves its global iptables chains (NETAVARK_FORWARD,
NETAVARK-HOSTPORT-*) after the last network is removed; restore_firewall()
removes them, and restores net.ipv4.ip_forward, when they were not there
before the module started (snapshot_firewall()) and no podman container or
network of anyone is left.

Stdlib only; not thread-safe (one test thread).
"""

import contextlib
import os
import random
import re
import shlex
import shutil
import subprocess
import time
import unittest

import debian_roots
from harness import TRAINLET

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(HERE)
IMAGES_SCRIPT = os.path.join(REPO, "scripts", "images.sh")
CONF = os.path.join(REPO, "images", "containers.conf")
PREFIX = "tle2e"
_IP_FORWARD = "/proc/sys/net/ipv4/ip_forward"


def env():
    """The environment podman runs with."""
    e = dict(os.environ)
    e.setdefault("CONTAINERS_CONF", CONF)
    e["TRAINLET_BIN"] = os.path.abspath(TRAINLET)
    return e


def podman(args, timeout=60, check=False):
    """Runs `podman ARGS`; returns the CompletedProcess (text, both streams)."""
    r = subprocess.run(["podman"] + list(args), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=timeout, env=env())
    if check and r.returncode != 0:
        raise AssertionError("podman %s: rc %d\n%s" % (
            " ".join(shlex.quote(a) for a in args), r.returncode, r.stderr[-2000:]))
    return r


_REASON = []


def unsupported_reason():
    """Why rootful podman cannot run here, or None (probed once)."""
    if not _REASON:
        _REASON.append(_probe())
    return _REASON[0]


def _probe():
    if os.geteuid() != 0:
        return "the image tests need root (rootful podman)"
    missing = [t for t in ("podman", "runc") if shutil.which(t) is None]
    if missing:
        return ("%s not installed: run scripts/images.sh --install-podman (apt-get install "
                "podman runc ..., about 1 minute)" % " and ".join(missing))
    try:
        r = podman(["info", "--format", "{{.Host.OCIRuntime.Name}}"], timeout=60)
    except subprocess.TimeoutExpired:
        return "podman info did not answer within 60 s"
    if r.returncode != 0:
        return "podman info failed: %s" % r.stderr.strip()[-500:]
    if r.stdout.strip() != "runc":
        return ("podman's OCI runtime is %r, not runc: check CONTAINERS_CONF (%s)"
                % (r.stdout.strip(), env()["CONTAINERS_CONF"]))
    return None


def require_podman():
    """unittest.SkipTest unless rootful podman with runc works and the binary
    under test is the static one (an image FROM scratch needs it)."""
    reason = unsupported_reason()
    if reason:
        raise unittest.SkipTest(reason)
    debian_roots.require_static(TRAINLET)


_BUILT = {}  # name -> reference, for this process


def images(names, timeout=900):
    """{name: reference} of the images `names` (base, trainlet, torch, mpi)
    for the binary under test, built by scripts/images.sh when missing (the
    base imports the bookworm root: scripts/debian_root.sh, cached).
    AssertionError with the script's output when a build fails."""
    wanted = [n for n in names if n not in _BUILT]
    if wanted:
        started = time.monotonic()
        r = subprocess.run([IMAGES_SCRIPT] + wanted, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=timeout, env=env())
        if r.returncode != 0:
            raise AssertionError("scripts/images.sh %s failed (rc %d):\n%s" % (
                " ".join(wanted), r.returncode, r.stdout[-4000:]))
        for m in re.finditer(r"^image (\S+) (\S+)$", r.stdout, re.M):
            _BUILT[m.group(1)] = m.group(2)
        elapsed = time.monotonic() - started
        if elapsed > 30:
            print("\n(images %s ready after %.0f s)" % (" ".join(wanted), elapsed))
    missing = [n for n in names if n not in _BUILT]
    if missing:
        raise AssertionError("scripts/images.sh did not report %s" % missing)
    return {n: _BUILT[n] for n in names}


class Podman:
    """One test's podman objects, named <prefix>-<name>, removed with the test."""

    def __init__(self, test):
        self.prefix = "%s-%06x" % (PREFIX, random.getrandbits(24))
        self.containers = []
        self.networks = []
        self.volumes = []
        test.addCleanup(self.cleanup)

    def name(self, name):
        return "%s-%s" % (self.prefix, name)

    def network(self, name):
        full = self.name(name)
        self.networks.append(full)
        podman(["network", "create", full], check=True)
        return full

    def volume(self, name):
        full = self.name(name)
        self.volumes.append(full)
        podman(["volume", "create", full], check=True)
        return full

    def run(self, name, options, image, command=(), timeout=120):
        """`podman run` in the foreground (--name <prefix>-<name>, removed
        at cleanup); returns the CompletedProcess."""
        full = self.name(name)
        self.containers.append(full)
        return podman(["run", "--name", full] + list(options) + [image] + list(command),
                      timeout=timeout)

    def run_detached(self, name, options, image, command=()):
        """`podman run -d`; returns the container's name."""
        full = self.name(name)
        self.containers.append(full)
        podman(["run", "-d", "--name", full] + list(options) + [image] + list(command),
               check=True)
        return full

    def wait(self, container, timeout):
        """The container's exit code; AssertionError (with its logs) when it
        is still running after `timeout` seconds."""
        try:
            r = podman(["wait", container], timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s still running after %.0f s\n%s" % (
                container, timeout, self.logs(container)[-3000:])) from None
        if r.returncode != 0:
            raise AssertionError("podman wait %s: %s" % (container, r.stderr))
        return int(r.stdout.strip().splitlines()[-1])

    def logs(self, container):
        r = podman(["logs", container])
        return r.stdout + r.stderr

    def inspect(self, container, fmt):
        return podman(["inspect", "-f", fmt, container], check=True).stdout.strip()

    def cleanup(self):
        if self.containers:
            podman(["rm", "-f", "-t", "0"] + self.containers, timeout=120)
        for n in self.networks:
            podman(["network", "rm", "-f", n])
        if self.volumes:
            podman(["volume", "rm", "-f"] + self.volumes)


# -- netavark's firewall leftovers ------------------------------------------------------

def _netavark_chains():
    """{table: [chain]} of NETAVARK chains in iptables (netavark 1.4 uses
    iptables, which on Debian 12 is iptables-nft)."""
    chains = {}
    if shutil.which("iptables-save") is None:
        return chains
    for table in ("filter", "nat"):
        r = subprocess.run(["iptables-save", "-t", table], stdout=subprocess.PIPE,
                           stderr=subprocess.DEVNULL, text=True, timeout=30)
        found = re.findall(r"^:(NETAVARK\S*)", r.stdout, re.M)
        if found:
            chains[table] = found
    return chains


_SNAPSHOT = {}


def snapshot_firewall():
    """Records whether netavark's chains exist and net.ipv4.ip_forward, before
    the module's first network (setUpModule)."""
    _SNAPSHOT["chains"] = _netavark_chains()
    with contextlib.suppress(OSError), open(_IP_FORWARD) as f:
        _SNAPSHOT["ip_forward"] = f.read().strip()


def restore_firewall():
    """Removes netavark's chains (and the jumps to them) and restores
    ip_forward, when snapshot_firewall found none and podman has no
    container and no network besides its default one (tearDownModule).
    Returns what it did, for the log."""
    if "chains" not in _SNAPSHOT or _SNAPSHOT["chains"]:
        return "netavark's chains were there before the tests: left alone"
    others = podman(["ps", "-aq"]).stdout.split()
    nets = [n for n in podman(["network", "ls", "--format", "{{.Name}}"]).stdout.split()
            if n != "podman"]
    if others or nets:
        return "podman containers or networks in use (%d, %s): firewall left alone" % (
            len(others), nets)
    removed = []
    for table, chains in _netavark_chains().items():
        rules = subprocess.run(["iptables-save", "-t", table], stdout=subprocess.PIPE,
                               text=True, timeout=30).stdout
        for line in rules.splitlines():
            # A jump into a netavark chain from a built-in chain.
            if line.startswith("-A ") and re.search(r"-j NETAVARK\S*", line) and \
                    not line.split()[1].startswith("NETAVARK"):
                args = shlex.split(line)
                args[0] = "-D"
                subprocess.run(["iptables", "-t", table] + args, timeout=30,
                               stderr=subprocess.DEVNULL)
        for chain in chains:
            subprocess.run(["iptables", "-t", table, "-F", chain], timeout=30,
                           stderr=subprocess.DEVNULL)
        for chain in chains:
            subprocess.run(["iptables", "-t", table, "-X", chain], timeout=30,
                           stderr=subprocess.DEVNULL)
            removed.append("%s/%s" % (table, chain))
    if _SNAPSHOT.get("ip_forward") is not None:
        with contextlib.suppress(OSError), open(_IP_FORWARD, "w") as f:
            f.write(_SNAPSHOT["ip_forward"])
    return "removed netavark chains: %s" % (", ".join(removed) or "none")
