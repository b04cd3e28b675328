"""Small helpers the bench programs share."""

import contextlib
import os
import signal
import socket
import sys
import time
import uuid

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(ROOT, "e2e"))
import harness  # noqa: E402 (e2e helpers: Proc, the process tag)

# Ports handed out by free_port(): the kernel may offer a port again as soon as its probe socket
# closes, and two calls in a row (coordinator port, master port) must not return the same one.
_handed_out = set()


def kill_groups(procs):
    """SIGKILLs each Popen's process group (started with start_new_session)
    and reaps the leader."""
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()


def free_port():
    """A free TCP port on 127.0.0.1, never one this process was handed before."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(('127.0.0.1', 0))
            port = s.getsockname()[1]
        if port not in _handed_out:
            _handed_out.add(port)
            return port


class BenchHarness:
    """The part of harness.E2ETestCase that netns.Cluster and mpi_support use
    (start, base_env, addCleanup, dir), for a program that is not a test:
    processes' output goes to files under `dir`, each carries this harness's
    tag (E2E_TAG) in its environment. close() kills what was started, runs the
    cleanups (a cluster's teardown) last first, then SIGKILLs, by pid, any
    process still carrying the tag (workers live in process groups of their
    own, and a killed agent's workers may outlive it)."""

    # Variables of the caller that would change what an agent or worker does.
    STRIPPED_PREFIXES = ("TRAINLET_", "PET_", "TORCHELASTIC_", "OMPI_", "PRTE_", "HYDRA_",
                         "I_MPI_")
    STRIPPED = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT",
                "JOB_COMPLETION_INDEX", "KUBERNETES_SERVICE_HOST", "TF_CONFIG")

    def __init__(self, directory):
        self.dir = directory
        self.tag = uuid.uuid4().hex
        self.procs = []
        self._cleanups = []

    def addCleanup(self, fn, *args, **kwargs):  # noqa: N802 (unittest's name)
        self._cleanups.append((fn, args, kwargs))

    def base_env(self, **extra):
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(self.STRIPPED_PREFIXES) and k not in self.STRIPPED}
        env[harness.TAG_VAR] = self.tag
        env.update({k: str(v) for k, v in extra.items()})
        return env

    def start(self, name, argv, env=None, prefix=()):
        p = harness.Proc(name, argv, env if env is not None else self.base_env(), self.dir,
                         prefix)
        self.procs.append(p)
        return p

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def close(self):
        for p in self.procs:
            if p.running():
                p.kill()
        while self._cleanups:
            fn, args, kwargs = self._cleanups.pop()
            try:
                fn(*args, **kwargs)
            except Exception as e:  # keep tearing down the rest
                print("cleanup %s failed: %s" % (getattr(fn, "__name__", fn), e),
                      file=sys.stderr)
        left = kill_tagged(self.tag)
        if left:
            print("processes tagged %s survived SIGKILL: %s" % (self.tag, left), file=sys.stderr)
        for p in self.procs:
            p.close()


def kill_tagged(tag, timeout=5.0):
    """SIGKILLs, by pid, every process whose environment carries E2E_TAG=tag,
    until none is left or `timeout`; returns the pids still alive."""
    deadline = time.monotonic() + timeout
    while True:
        left = harness.pids_with_tag(tag)
        if not left or time.monotonic() >= deadline:
            return left
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.02)
