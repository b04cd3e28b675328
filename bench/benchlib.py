"""Small helpers the bench programs share."""

import os
import signal


def kill_groups(procs):
    """SIGKILLs each Popen's process group (started with start_new_session)
    and reaps the leader."""
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()
