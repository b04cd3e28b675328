"""Pod-like hosts for multi-host e2e tests: one network namespace and one UTS
namespace (own hostname) per host, all on one private switch.

    cluster = netns.Cluster.create(self, ["h0", "h1"])      # self: an E2ETestCase
    agent = cluster.start(cluster.hosts[0], "node0", [harness.TRAINLET, "run", ...])

Layout (build-recipes.md, section 5.1): a switch namespace `<id>-sw` holds a
bridge; each host `<id>-h<i>` has `lo` and `eth0`, a veth whose other end is a
bridge port in the switch namespace. Nothing is added to the root namespace, so
clusters of tests running in parallel (ctest -j2) cannot see each other; names
still carry a random id (`tl<id>`), because namespace names are global. Each
host gets `/etc/netns/<ns>/hosts` (which `ip netns exec` bind-mounts over
/etc/hosts for what it starts) listing localhost and every host, Kubernetes
style (`addr fqdn short`); `add_name` appends to those files in place, so a name
can start resolving while processes run (a late DNS record).

Processes start through the test's harness (E2ETestCase.start), wrapped in
`ip netns exec NS unshare --uts sh -c 'hostname H; exec "$@"'`: every wrapper
execs the next, so the pid the harness records is the process itself, its
output goes to files, and its E2E_TAG environment marks it for the leak check.

Teardown (registered as a test cleanup before anything is created, so it runs
even when setup or the test fails): SIGKILL, by pid, every process inside the
cluster's namespaces (`ip netns pids`), then `ip netns del` and remove
/etc/netns/<ns>. A record under /run/trainlet-e2e-netns/ names each cluster's
owner pid, so a cluster left behind by a killed test run is removed by the next
Cluster.create.

Needs root with CAP_SYS_ADMIN and CAP_NET_ADMIN, `ip` (iproute2), `unshare` and
`hostname`; Cluster.create raises unittest.SkipTest with the reason elsewhere.
Stdlib only; not thread-safe (one test thread drives a cluster).
"""

import contextlib
import ipaddress
import os
import random
import re
import shutil
import signal
import subprocess
import time
import unittest

RECORDS = "/run/trainlet-e2e-netns"
NETNS_ETC = "/etc/netns"
_PREFIX = "tl"  # namespace and veth names: tl<6 hex>-sw, tl<6 hex>-h<i>, tl<6 hex>v<i>.
_ID_RE = re.compile(r"^tl[0-9a-f]{6}$")


class Host:
    """One pod-like host: a hostname, an optional FQDN, a namespace, an address."""

    def __init__(self, index, name, fqdn, ns, addr):
        self.index = index
        self.name = name
        self.fqdn = fqdn
        self.ns = ns
        self.addr = addr

    def names(self):
        """Every name of the host, FQDN first (as kubelet writes /etc/hosts).
        With an FQDN <name>.<subdomain>.<ns>.svc.<zone>, also the shorter
        forms a pod's DNS search path (<ns>.svc.<zone> svc.<zone> <zone>)
        resolves: <name>.<subdomain>, <name>.<subdomain>.<ns>, ..."""
        if not self.fqdn:
            return [self.name]
        labels = self.fqdn.split(".")
        partial = [".".join(labels[:i]) for i in range(2, len(labels) - 1)]
        return [self.fqdn] + partial + [self.name]

    def __repr__(self):
        return "Host(%s %s ns=%s)" % (self.name, self.addr, self.ns)


def _run(argv, stdin=None, check=True):
    r = subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       text=True, timeout=30)
    if check and r.returncode != 0:
        raise RuntimeError("%s failed (rc %d): %s" % (" ".join(argv), r.returncode,
                                                      r.stderr.strip()))
    return r


def _pid_alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


_UNSUPPORTED = []  # the cached answer of unsupported_reason()


def unsupported_reason():
    """Why network-namespace hosts cannot be built here, or None."""
    if not _UNSUPPORTED:
        _UNSUPPORTED.append(_probe())
    return _UNSUPPORTED[0]


def _probe():
    if os.geteuid() != 0:
        return "netns hosts need root (ip netns add)"
    for tool in ("ip", "unshare", "hostname"):
        if shutil.which(tool) is None:
            return "netns hosts need `%s` on PATH" % tool
    try:
        r = subprocess.run(["unshare", "--net", "--uts", "true"], stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return "unshare --net --uts failed: %s" % e
    if r.returncode != 0:
        return "unshare --net --uts is not allowed here: %s" % r.stderr.strip()
    return None


def sweep_stale():
    """Removes clusters whose owning test process is gone (a run killed with
    SIGKILL cannot clean up after itself)."""
    with contextlib.suppress(FileNotFoundError):
        for name in os.listdir(RECORDS):
            path = os.path.join(RECORDS, name)
            try:
                with open(path) as f:
                    owner = int(f.readline())
                    namespaces = f.read().split()
            except (OSError, ValueError):
                continue
            if _ID_RE.match(name) and not _pid_alive(owner):
                _destroy(namespaces)
                with contextlib.suppress(FileNotFoundError):
                    os.unlink(path)


def _kill_namespace_pids(namespaces, timeout=10.0):
    """SIGKILLs every process in the namespaces, by pid, until none is left."""
    deadline = time.monotonic() + timeout
    while True:
        pids = set()
        for ns in namespaces:
            r = _run(["ip", "netns", "pids", ns], check=False)
            if r.returncode == 0:
                pids.update(int(p) for p in r.stdout.split())
        pids.discard(os.getpid())
        if not pids or time.monotonic() >= deadline:
            return sorted(pids)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)


def _destroy(namespaces):
    """Best-effort removal of namespaces and their /etc/netns entries."""
    left = _kill_namespace_pids(namespaces)
    existing = set(_run(["ip", "netns", "list"], check=False).stdout.split())
    batch = "".join("netns del %s\n" % ns for ns in namespaces if ns in existing)
    if batch:
        _run(["ip", "-force", "-b", "-"], stdin=batch, check=False)
    for ns in namespaces:
        shutil.rmtree(os.path.join(NETNS_ETC, ns), ignore_errors=True)
    with contextlib.suppress(OSError):
        os.rmdir(NETNS_ETC)  # only when no other cluster uses it
    return left


def _used_subnets():
    r = _run(["ip", "-4", "-o", "addr", "show"], check=False)
    nets = set()
    for m in re.finditer(r"inet (\S+)", r.stdout):
        with contextlib.suppress(ValueError):
            nets.add(ipaddress.ip_interface(m.group(1)).network)
    return nets


def _pick_subnet(rng):
    """A random 10.x.y.0/24 that no root-namespace interface overlaps. The
    hosts live behind their own bridge, so the subnet only has to be distinct
    from what this machine routes to, which makes addresses unambiguous in logs."""
    used = _used_subnets()
    for _ in range(100):
        net = ipaddress.ip_network("10.%d.%d.0/24" % (rng.randint(128, 254), rng.randint(0, 255)))
        if not any(net.overlaps(u) for u in used):
            return net
    raise RuntimeError("no free 10.x.y.0/24 subnet for netns hosts")


class Cluster:
    """N hosts on one switch; see the module docstring."""

    def __init__(self, test, names, domain=None):
        self.test = test
        rng = random.Random()
        self.id = "%s%06x" % (_PREFIX, rng.getrandbits(24))
        self.subnet = _pick_subnet(rng)
        addrs = list(self.subnet.hosts())
        self.switch_ns = self.id + "-sw"
        self.hosts = [
            Host(i, name, "%s.%s" % (name, domain) if domain else None,
                 "%s-h%d" % (self.id, i), str(addrs[10 + i]))
            for i, name in enumerate(names)]
        self.namespaces = [self.switch_ns] + [h.ns for h in self.hosts]
        self.extra_names = []  # (addr, name) added later by add_name
        self.procs = []
        self.setup_seconds = None
        self._record = os.path.join(RECORDS, self.id)

    @classmethod
    def create(cls, test, names, domain=None):
        """Builds the hosts named `names` (hostnames; with `domain`, each host's
        FQDN is <name>.<domain>) and registers their teardown on `test`.
        Raises unittest.SkipTest where network namespaces are not allowed."""
        reason = unsupported_reason()
        if reason:
            raise unittest.SkipTest(reason)
        sweep_stale()
        cluster = cls(test, names, domain)
        test.addCleanup(cluster.destroy)
        cluster._build()
        return cluster

    # -- setup / teardown --

    def _build(self):
        started = time.monotonic()
        os.makedirs(RECORDS, exist_ok=True)
        with open(self._record, "w") as f:
            f.write("%d\n%s\n" % (os.getpid(), " ".join(self.namespaces)))
        # Namespaces first, on their own: the first failure is the one that
        # tells whether namespaces are allowed at all.
        r = _run(["ip", "netns", "add", self.switch_ns], check=False)
        if r.returncode != 0:
            raise unittest.SkipTest("ip netns add failed: %s" % r.stderr.strip())
        root = ["netns add %s" % h.ns for h in self.hosts]
        root.append("link add br0 netns %s type bridge" % self.switch_ns)
        for h in self.hosts:
            root.append("link add %s netns %s type veth peer name eth0 netns %s"
                        % (self._veth(h), self.switch_ns, h.ns))
        _run(["ip", "-b", "-"], stdin="\n".join(root) + "\n")
        switch = ["link set lo up", "link set br0 up"]
        switch += ["link set %s master br0 up" % self._veth(h) for h in self.hosts]
        _run(["ip", "-n", self.switch_ns, "-b", "-"], stdin="\n".join(switch) + "\n")
        for h in self.hosts:
            for attempt in range(5):
                try:  # another cluster's teardown may remove an empty /etc/netns meanwhile
                    os.makedirs(os.path.join(NETNS_ETC, h.ns), exist_ok=True)
                    break
                except FileNotFoundError:
                    if attempt == 4:
                        raise
            self._write_hosts(h)
            _run(["ip", "-n", h.ns, "-b", "-"],
                 stdin="link set lo up\naddr add %s/%d dev eth0\nlink set eth0 up\n"
                 % (h.addr, self.subnet.prefixlen))
        self.setup_seconds = time.monotonic() - started

    def _veth(self, host):
        name = "%sv%d" % (self.id, host.index)
        assert len(name) <= 15, name  # IFNAMSIZ - 1
        return name

    def hosts_file(self, host):
        return os.path.join(NETNS_ETC, host.ns, "hosts")

    def _write_hosts(self, host):
        lines = ["127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback"]
        for h in self.hosts:
            lines.append("%s\t%s" % (h.addr, " ".join(h.names())))
        lines += ["%s\t%s" % (a, n) for a, n in self.extra_names]
        with open(self.hosts_file(host), "w") as f:
            f.write("\n".join(lines) + "\n")

    def add_name(self, name, host):
        """Makes `name` resolve to `host`'s address on every host from now on
        (appended in place: running processes see the bind-mounted file change)."""
        self.extra_names.append((host.addr, name))
        for h in self.hosts:
            with open(self.hosts_file(h), "a") as f:
                f.write("%s\t%s\n" % (host.addr, name))

    def destroy(self):
        """Kills every process in the cluster and removes it; idempotent."""
        left = _destroy(self.namespaces)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self._record)
        if left:
            raise AssertionError("processes in %s survived SIGKILL: %s" % (self.id, left))

    # -- processes --

    def prefix(self, host):
        """argv prefix that runs a command inside `host` with its hostname."""
        return ["ip", "netns", "exec", host.ns, "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', host.name]

    def start(self, host, name, argv, env=None):
        """Starts argv on `host` through the harness (output in files, tagged)."""
        p = self.test.start(name, argv, env=env, prefix=self.prefix(host))
        self.procs.append(p)
        return p

    def run(self, host, argv, timeout=30):
        """Runs a short command on `host` and returns its CompletedProcess."""
        return subprocess.run(self.prefix(host) + list(argv), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=timeout,
                              env=self.test.base_env())

    def describe(self):
        return "cluster %s (%s): %s" % (self.id, self.subnet, ", ".join(
            "%s=%s%s" % (h.name, h.addr, " (%s)" % h.fqdn if h.fqdn else "")
            for h in self.hosts))
