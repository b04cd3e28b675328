"""Shared helpers for trainlet's black-box end-to-end tests.

The tests run the real `trainlet` binary (TRAINLET_BIN, set by ctest) as separate
processes on loopback. Every process a test starts carries a unique marker in its
environment (E2E_TAG), which workers and their descendants inherit; cleanup kills
every process that carries the test's marker, so nothing outlives a test even when
trainlet itself leaks workers (and `assert_no_leftovers` turns such a leak into a
failure).

Run with /usr/bin/python3 (Debian's, which has torch); worker commands use
the same interpreter via harness.PY.
"""

import contextlib
import datetime
import errno
import json
import os
import random
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
WORKERS = os.path.join(HERE, "workers")
PY = "/usr/bin/python3"
TRAINLET = os.environ.get("TRAINLET_BIN") or os.path.join(
    os.path.dirname(HERE), "build-e2e", "trainlet")

TAG_VAR = "E2E_TAG"

# Exit codes (common/exit_codes.h).
EXIT_USAGE = 64
EXIT_UNAVAILABLE = 69
EXIT_OS_ERROR = 71
EXIT_PEER_FAILED = 75
EXIT_REJECTED = 77
EXIT_CONFIG = 78
EXIT_NOT_EXECUTABLE = 126
EXIT_NOT_FOUND = 127


def worker(name):
    """Path of a worker script under e2e/workers/."""
    return os.path.join(WORKERS, name)


# Every port handed out by this test process. The kernel may offer a port again as soon as its
# probe socket closes, so two separate free_port() calls (a coordinator port, then a master port)
# could return the same number and the agent would rightly refuse to listen on it twice.
_handed_out = set()


def _ephemeral_low():
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            return int(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _bindable(port):
    """Whether `port` can be bound now for TCP and UDP on 0.0.0.0 (the
    coordinator's liveness datagrams use its port number too)."""
    for kind in (socket.SOCK_STREAM, socket.SOCK_DGRAM):
        s = socket.socket(socket.AF_INET, kind)
        try:
            s.bind(("0.0.0.0", port))
        except OSError:
            return False
        finally:
            s.close()
    return True


def free_ports(n):
    """n distinct free TCP ports (bindable for TCP and UDP on 0.0.0.0 at the time of the call),
    none of them handed out before by this process. Chosen at random below the kernel's
    ephemeral range: a port from bind(0) is an ephemeral one, which any process's next outgoing
    connection may take as its local port before the agent binds it (seen as both agents of
    e2e_first_hour finding their coordinator port taken under a loaded ctest -j2)."""
    high = min(_ephemeral_low(), 32768) - 1
    low = max(1024, high - 12000)
    ports = []
    for _ in range(10000):
        if len(ports) == n:
            break
        # TF_CONFIG uses MASTER_PORT+1..; keep a little room above each port.
        port = random.randrange(low, high - 8)
        if port in ports or port in _handed_out or not _bindable(port):
            continue
        ports.append(port)
    if len(ports) < n:
        raise RuntimeError("no %d free ports in %d..%d" % (n, low, high))
    _handed_out.update(ports)
    return ports


def free_port():
    return free_ports(1)[0]


def log_time(stamp):
    """Seconds since the epoch of a log timestamp "2026-11-23T22:42:07.478Z"."""
    return datetime.datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S.%fZ").replace(
        tzinfo=datetime.timezone.utc).timestamp()


def logged_at(text, pattern):
    """Seconds since the epoch of the first trainlet log line in `text` whose
    message matches the regex `pattern`, or None."""
    match = re.search(r"^(\d{4}-\d\d-\d\dT\S+Z) [DIWE] trainlet\[[^\]\n]*\] .*?" + pattern, text,
                      re.M)
    return log_time(match.group(1)) if match else None


def poll_until(predicate, timeout, interval=0.02, what="condition"):
    """Calls predicate() until it returns a truthy value (returned) or timeout."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() >= deadline:
            raise AssertionError("timed out after %.1fs waiting for %s" % (timeout, what))
        time.sleep(interval)


# --- /proc helpers -----------------------------------------------------------------

def proc_stat(pid):
    """(state, ppid, pgid) of pid, or None if there is no such process."""
    try:
        with open("/proc/%d/stat" % pid, "rb") as f:
            data = f.read().decode("ascii", "replace")
    except (FileNotFoundError, ProcessLookupError):
        return None
    # comm may contain spaces and parentheses: split after the last ')'.
    rest = data[data.rindex(")") + 2:].split()
    return rest[0], int(rest[1]), int(rest[2])


def is_alive(pid):
    """True if pid exists and is not a zombie."""
    st = proc_stat(pid)
    return st is not None and st[0] not in ("Z", "X")


def all_pids():
    return [int(d) for d in os.listdir("/proc") if d.isdigit()]


def pids_with_tag(tag):
    """Pids (not zombies) whose initial environment has E2E_TAG=tag."""
    needle = ("%s=%s" % (TAG_VAR, tag)).encode()
    found = []
    for pid in all_pids():
        if pid == os.getpid():
            continue
        try:
            with open("/proc/%d/environ" % pid, "rb") as f:
                env = f.read().split(b"\0")
        except OSError:
            continue
        if needle in env and is_alive(pid):
            found.append(pid)
    return found


def zombie_children(ppid):
    return [pid for pid in all_pids()
            if (st := proc_stat(pid)) is not None and st[1] == ppid and st[0] == "Z"]


def children_of(ppid):
    try:
        with open("/proc/%d/task/%d/children" % (ppid, ppid)) as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return [pid for pid in all_pids() if (st := proc_stat(pid)) and st[1] == ppid]


def read_pid_file(path):
    with open(path) as f:
        return int(f.read().strip())


# --- namespaces (optional) ---------------------------------------------------------

_NS_SUPPORT = {}


def namespaces_supported(kind):
    """Whether `unshare --net` / `unshare --pid --fork` work here (root in a
    permissive container); tests that need them skip otherwise."""
    if kind not in _NS_SUPPORT:
        flags = {"net": ["--net"], "pid": ["--pid", "--fork"]}[kind]
        try:
            rc = subprocess.run(["unshare"] + flags + ["true"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, timeout=10).returncode
        except (OSError, subprocess.TimeoutExpired):
            rc = 1
        _NS_SUPPORT[kind] = rc == 0
    return _NS_SUPPORT[kind]


# --- agents ------------------------------------------------------------------------

def standalone_agent_args(i, nnodes, port, job, master_port, join_timeout="30s"):
    """`trainlet run` options of agent i of a job whose coordinator is a
    standalone `trainlet coordinator` on 127.0.0.1:port. --host-coordinator=no:
    a loopback coordinator address with no rank hint would otherwise let an
    agent that starts first host it."""
    return ["--nnodes=%d" % nnodes, "--node-id=s%d" % i,
            "--coordinator=127.0.0.1:%d" % port, "--host-coordinator=no",
            "--master-port=%d" % master_port, "--health-port=0", "--nproc-per-node=1",
            "--job-id=%s" % job, "--join-timeout=%s" % join_timeout]


class Proc:
    """A started process (an agent, or a `trainlet health` probe) with its output
    in files (no pipe can fill up and block it)."""

    def __init__(self, name, argv, env, workdir, prefix=(), stdin=subprocess.DEVNULL,
                 stdout=None):
        # stdin/stdout: the caller's (a pipe nobody reads, a pipe the test
        # writes to) instead of /dev/null and a file; stderr is always a file.
        self.name = name
        self.argv = list(prefix) + list(argv)
        self.out_path = os.path.join(workdir, "%s.stdout" % name)
        self.err_path = os.path.join(workdir, "%s.stderr" % name)
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.started = time.monotonic()
        self.ended = None
        self.popen = subprocess.Popen(self.argv, env=env, stdin=stdin,
                                      stdout=stdout if stdout is not None else self._out,
                                      stderr=self._err,
                                      start_new_session=True)
        self.pid = self.popen.pid

    def poll(self):
        rc = self.popen.poll()
        if rc is not None and self.ended is None:
            self.ended = time.monotonic()
        return rc

    def running(self):
        return self.poll() is None

    def wait(self, timeout):
        """The exit code; fails the test (AssertionError) on timeout."""
        try:
            rc = self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            raise AssertionError("%s did not exit within %.1fs\n%s" %
                                 (self.name, timeout, self.describe())) from None
        self.poll()
        return rc

    def elapsed(self):
        return (self.ended or time.monotonic()) - self.started

    def signal(self, sig):
        if self.running():
            os.kill(self.pid, sig)

    def kill(self):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(timeout=10)
        self.poll()

    def close(self):
        self._out.close()
        self._err.close()

    @property
    def stdout(self):
        with open(self.out_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    @property
    def stderr(self):
        with open(self.err_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def describe(self, tail=3000):
        rc = self.popen.returncode
        return ("--- %s (pid %d, rc %s): %s\n--- stdout:\n%s\n--- stderr:\n%s" %
                (self.name, self.pid, rc, " ".join(self.argv), self.stdout[-tail:],
                 self.stderr[-tail:]))


class E2ETestCase(unittest.TestCase):
    """Per-test temp dir, process tracking and leak-proof cleanup."""

    maxDiff = None
    _e2e_failed = False

    def _callTestMethod(self, method):
        # Remember a failure so that cleanup can print every process's output.
        try:
            return super()._callTestMethod(method)
        except unittest.SkipTest:
            raise
        except BaseException:
            self._e2e_failed = True
            raise

    def setUp(self):
        if not (os.path.isfile(TRAINLET) and os.access(TRAINLET, os.X_OK)):
            self.fail("trainlet binary not found: set TRAINLET_BIN (got %r)" % TRAINLET)
        self.tag = uuid.uuid4().hex
        self.dir = tempfile.mkdtemp(prefix="trainlet-e2e-")
        self.procs = []
        self.addCleanup(self._cleanup_dir)
        # Cleanups run last-in first-out: processes die before the dir goes.
        self.addCleanup(self._cleanup_procs)

    # -- environment --

    def base_env(self, **extra):
        """A clean environment for an agent: no inherited TRAINLET_*/PET_*/rank
        variables from the caller, the test's tag, and `extra` on top (a value of
        None removes the variable)."""
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TRAINLET_", "PET_", "TORCHELASTIC_"))
               and k not in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                             "JOB_COMPLETION_INDEX", "KUBERNETES_SERVICE_HOST", "TF_CONFIG")}
        env[TAG_VAR] = self.tag
        env["E2E_DIR"] = self.dir
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        for k, v in extra.items():
            if v is None:
                env.pop(k, None)
            else:
                env[k] = str(v)
        return env

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def netns_cluster(self, names, domain=None):
        """Pod-like hosts for this test (e2e/netns.py): one network and UTS
        namespace per name, each with its own address, hostname and
        /etc/hosts; `cluster.start(host, name, argv)` runs a process there
        like `start` does. Torn down with the test; skips the test where
        network namespaces are not allowed."""
        import netns  # only tests that use it need root and iproute2
        return netns.Cluster.create(self, names, domain=domain)

    # -- processes --

    def start(self, name, argv, env=None, prefix=()):
        p = Proc(name, argv, env if env is not None else self.base_env(), self.dir, prefix)
        self.procs.append(p)
        return p

    def start_agent(self, args, command, name=None, env=None, prefix=()):
        """`trainlet run ARGS -- COMMAND`."""
        name = name or "agent%d" % len(self.procs)
        return self.start(name, [TRAINLET, "run"] + list(args) + ["--"] + list(command),
                          env=env, prefix=prefix)

    def start_job(self, nnodes, nproc, command, order=None, job_id=None, extra_args=(),
                  env=None, per_node_args=None, coordinator_port=None, master_port=None):
        """Starts one agent per node rank hint in `order` (default 0..nnodes-1) on
        loopback; returns the agents indexed by node rank hint."""
        coordinator_port = coordinator_port or free_port()
        master_port = master_port or free_ports(2)[1]
        self.coordinator_port = coordinator_port
        self.master_port = master_port
        job_id = job_id or "e2e-" + self.tag[:8]
        self.job_id = job_id
        agents = {}
        for rank in (order if order is not None else range(nnodes)):
            args = ["--nnodes=%d" % nnodes, "--node-rank=%d" % rank,
                    "--node-id=n%d" % rank,
                    "--coordinator=127.0.0.1:%d" % coordinator_port,
                    "--master-port=%d" % master_port, "--health-port=0",
                    "--nproc-per-node=%d" % nproc, "--job-id=%s" % job_id,
                    "--join-timeout=60s"]
            args += list(extra_args) + list((per_node_args or {}).get(rank, ()))
            agents[rank] = self.start_agent(args, command, name="node%d" % rank, env=env)
        return [agents[r] for r in sorted(agents)]

    def wait_all(self, procs, timeout):
        """Exit codes of procs, all waited for within one shared deadline."""
        deadline = time.monotonic() + timeout
        return [p.wait(max(0.0, deadline - time.monotonic())) for p in procs]

    def describe_all(self, procs=None):
        return "\n".join(p.describe() for p in (procs if procs is not None else self.procs))

    def assert_codes(self, procs, expected, timeout):
        codes = self.wait_all(procs, timeout)
        self.assertEqual(codes, expected, "exit codes\n" + self.describe_all(procs))
        return codes

    def assert_no_leftovers(self, timeout=5.0):
        """Fails if any process started by this test (agents, workers, their
        descendants) is still alive after `timeout`."""
        deadline = time.monotonic() + timeout
        while True:
            left = pids_with_tag(self.tag)
            if not left or time.monotonic() >= deadline:
                break
            time.sleep(0.05)
        if left:
            desc = []
            for pid in left:
                try:
                    with open("/proc/%d/cmdline" % pid, "rb") as f:
                        desc.append("%d: %s" % (pid, f.read().replace(b"\0", b" ").decode()))
                except OSError:
                    pass
            self.fail("processes left behind:\n  " + "\n  ".join(desc))

    def _cleanup_procs(self):
        for p in self.procs:
            if p.running():
                p.kill()
        # Workers live in their own process groups: find them by tag.
        for _ in range(50):
            left = pids_with_tag(self.tag)
            if not left:
                break
            for pid in left:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
            time.sleep(0.02)
        for p in self.procs:
            p.close()
        if (self._e2e_failed or os.environ.get("E2E_VERBOSE")) and self.procs:
            sys.stderr.write("\n=== %s: output of every process it started\n%s\n"
                             % (self.id(), self.describe_all()))

    def _cleanup_dir(self):
        if os.environ.get("E2E_KEEP_DIRS"):
            sys.stderr.write("kept %s\n" % self.dir)
            return
        shutil.rmtree(self.dir, ignore_errors=True)

    # -- files written by workers --

    def wait_for_files(self, names, timeout, what=None):
        paths = [self.path(n) for n in names]
        poll_until(lambda: all(os.path.exists(p) for p in paths), timeout,
                   what=what or "files %s" % names)
        return paths

    def read_json(self, name):
        with open(self.path(name)) as f:
            return json.load(f)
