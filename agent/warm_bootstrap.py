# trainlet's warm standby worker (docs/warm-workers.md). The agent starts
#   PYTHON [OPTIONS] -c LOADER --script PATH PRELOAD ARGS...   or
#   PYTHON [OPTIONS] -c LOADER --module NAME PRELOAD ARGS...
# with the round's static environment, stdout and stderr on /dev/null and a
# Unix stream socket at fd 3 that already holds this program, which LOADER
# reads and runs. It then:
#   1. sets sys.argv, sys.path[0] and __main__ as `PYTHON [OPTIONS] PATH|-m
#      NAME ARGS...` would, before anything is imported from the script's
#      directory;
#   2. imports the modules PRELOAD names (comma-separated; "auto": torch if
#      it can be found, else nothing) on a thread at nice 19, with its output
#      kept in memory; the main thread keeps its priority, so the worker it
#      becomes does too (an unprivileged process cannot raise its nice again);
#   3. writes "READY <what>\n" (or "UNFIT <why>\n" and exits 0) to fd 3, and
#      blocks in recv: no CPU, no port, no device;
#   4. takes the handover: b"TLH1", the payload length (u64 little endian),
#      the count of variables (u32), with stdout and stderr as SCM_RIGHTS,
#      then the worker's environment, "K=V\0" each. EOF instead: exits 0;
#   5. becomes the worker: the environment replaced, fds 1 and 2 the ones
#      handed, the preload's output written to them, fd 3 closed, and the
#      script run in __main__ (or the module by runpy, as -m does).
# Uncaught exceptions are printed without this program's frames and exit as
# Python's own would (1; 130 for KeyboardInterrupt).


def _trainlet_standby():
    import os
    import sys

    ctl_fd = 3
    kind, target, preload, args = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
    main = sys.modules["__main__"]

    def say(line):
        data = (line.replace("\n", " ")[:2000] + "\n").encode("utf-8", "replace")
        while data:
            data = data[os.write(ctl_fd, data):]

    def unfit(why):
        say("UNFIT " + why)
        os._exit(0)

    # 1. What `PYTHON [OPTIONS] PATH` or `-m NAME` sets before running code.
    # sys.path[0] is "" for -c unless -I or -P kept it out: then the script's
    # run keeps it out too.
    add_path0 = bool(sys.path) and sys.path[0] == ""
    if kind == "--script":
        if not os.path.isfile(target):
            unfit("%s is not a file (a directory or zip with __main__.py, or missing)" % target)
        path0 = os.path.dirname(os.path.realpath(target))
        # CPython makes the name absolute without normalizing it.
        file = target if os.path.isabs(target) else os.getcwd() + "/" + target
        sys.argv[:] = [target] + args
    elif kind == "--module":
        path0 = os.getcwd()
        sys.argv[:] = ["-m"] + args
    else:
        unfit("bad standby arguments")
    if add_path0:
        sys.path[0] = path0
    elif sys.path and sys.path[0] == "":
        del sys.path[0]

    # 2. The preload, on a thread of low priority, its output kept.
    if preload == "auto":
        import importlib.util
        preload = ["torch"] if importlib.util.find_spec("torch") is not None else []
    else:
        preload = [m for m in preload.split(",") if m]
    captured = []
    for fd in (1, 2):
        memfd = os.memfd_create("trainlet-standby-%d" % fd)
        os.dup2(memfd, fd)
        os.close(memfd)
    import threading
    import time

    loaded, failed = [], []

    def load():
        try:
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
        except OSError:
            pass
        import importlib
        for name in preload:
            try:
                importlib.import_module(name)
                loaded.append(name)
            except BaseException as e:  # noqa: BLE001 (a module may exit)
                failed.append("%s (%s: %s)" % (name, type(e).__name__, e))

    start = time.monotonic()
    thread = threading.Thread(target=load, name="trainlet-preload", daemon=True)
    thread.start()
    thread.join()
    seconds = time.monotonic() - start
    sys.stdout.flush()
    sys.stderr.flush()
    for fd in (1, 2):
        os.lseek(fd, 0, os.SEEK_SET)
        out = b""
        while len(out) < (1 << 20):
            chunk = os.read(fd, 65536)
            if not chunk:
                break
            out += chunk
        captured.append(out)
    rss_kib = 0
    with open("/proc/self/statm") as f:
        rss_kib = int(f.read().split()[1]) * (os.sysconf("SC_PAGE_SIZE") // 1024)
    if failed:
        unfit("preloading %s failed" % "; ".join(failed))
    say("READY preloaded %s in %.2f s, RSS %d MiB" %
        (",".join(loaded) or "nothing", seconds, rss_kib // 1024))

    # 3-4. Wait for the round (blocking: no CPU) and take the handover.
    import socket
    import struct
    ctl = socket.socket(fileno=ctl_fd)
    try:
        head, fds, _, _ = socket.recv_fds(ctl, 16, 2)
    except OSError:
        os._exit(0)
    if not head:
        os._exit(0)  # dropped: the agent closed its end.
    while len(head) < 16:
        more = ctl.recv(16 - len(head))
        if not more:
            os._exit(1)
        head += more
    if head[:4] != b"TLH1" or len(fds) != 2:
        os._exit(1)
    size, count = struct.unpack("<QI", head[4:16])
    payload = bytearray()
    while len(payload) < size:
        more = ctl.recv(min(size - len(payload), 1 << 20))
        if not more:
            os._exit(1)
        payload += more
    ctl.close()
    env = bytes(payload).split(b"\0")[:count]

    # 5. Become the worker.
    for key in list(os.environ):
        del os.environ[key]
    for entry in env:
        key, sep, value = entry.partition(b"=")
        if sep and key:
            os.environb[key] = value
    sys.stdout.flush()
    sys.stderr.flush()
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in fds:
        if fd > 2:
            os.close(fd)
    # Line buffering as the interpreter would have chosen for these fds.
    try:
        if not sys.flags.unbuffered:
            sys.stdout.reconfigure(line_buffering=os.isatty(1))
    except (AttributeError, ValueError, OSError):
        pass
    for fd, data in zip((1, 2), captured):
        while data:
            try:
                data = data[os.write(fd, data):]
            except OSError:
                break

    g = main.__dict__
    for key in list(g):
        if key not in ("__builtins__", "__name__", "__doc__", "__package__", "__spec__",
                       "__annotations__", "__loader__"):
            del g[key]
    g["__annotations__"] = {}
    try:
        if kind == "--script":
            import importlib.machinery
            g["__file__"] = file
            g["__cached__"] = None
            g["__loader__"] = importlib.machinery.SourceFileLoader("__main__", file)
            with open(target, "rb") as f:
                source = f.read()
            code = compile(source, file, "exec", dont_inherit=True)
            del source
            exec(code, g)
        else:
            import runpy
            runpy._run_module_as_main(target)
    except SystemExit:
        raise
    except BaseException as e:  # noqa: BLE001 (printed as Python would)
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        # The hook prints the exception's own traceback (3.11): trim it there.
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        sys.exit(130 if isinstance(e, KeyboardInterrupt) else 1)


_trainlet_standby()
