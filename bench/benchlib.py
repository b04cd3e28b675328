"""Small helpers the bench programs share."""

import os
import signal
import socket

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
