"""Drives the link measurer of preflight/ on a set of hosts: one
`preflight_net_tool serve` per host (a netns host of e2e/netns.py, or
loopback), each told per round to take the round and measure its targets of
the ring plan, and the coordinator's analysis of what they measured; all
three through the real C++ code (preflight/testing/net_tool.cc). Used by
e2e_preflight_net.py and bench/preflight_network.py.

    ring = MeasurerRing(test, tool, [(name, addr, prefix), ...])
    links, done = ring.round(1)        # LinkResults (dicts), per-host "done" figures
    verdict = ring.analyze(links)      # {"flagged": [...], "unattributed": [...], ...}

`test` is an E2ETestCase or a bench harness (start-like process tracking,
`dir`, `base_env`, `procs`). Stdlib only; one thread drives it."""

import json
import os
import random
import select
import subprocess
import time

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
TOOL = os.environ.get("PREFLIGHT_NET_TOOL") or os.path.join(
    os.path.dirname(HERE), "build", "preflight", "preflight_net_tool")
PORT = 29510


def rate_limit(cluster, host, rate, burst, ingress=True):
    """A tbf qdisc of `rate` ("200mbit") on `host`'s eth0 (what it sends) and,
    with `ingress`, on its veth's other end in the switch (what it receives).
    `tc qdisc replace`, so calling it again changes the rate."""
    spec = ["root", "tbf", "rate", rate, "burst", burst, "latency", "50ms"]
    cmds = [(host.ns, "eth0")]
    if ingress:
        cmds.append((cluster.switch_ns, cluster._veth(host)))
    for ns, dev in cmds:
        r = subprocess.run(["ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev] + spec,
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, timeout=30)
        if r.returncode != 0:
            raise RuntimeError("tc on %s/%s: %s" % (ns, dev, r.stderr.strip()))


def tool_available():
    return os.path.isfile(TOOL) and os.access(TOOL, os.X_OK)


class MeasurerRing:
    def __init__(self, test, hosts, job="preflight-e2e", max_bytes=None, max_ms=None, tool=TOOL):
        """hosts: [(node id, address to listen on and be reached at, argv prefix)]."""
        self.test = test
        self.tool = tool
        self.hosts = hosts
        self.job = job
        self.procs = {}
        self.addrs = {}
        self._buffers = {}
        for name, addr, prefix in hosts:
            argv = [tool, "serve", "--job=" + job, "--node=" + name,
                    "--listen=%s:%d" % (addr, PORT if prefix else 0)]
            if max_bytes:
                argv.append("--max-bytes-per-link=%d" % max_bytes)
            if max_ms:
                argv.append("--max-ms-per-link=%d" % max_ms)
            p = harness.Proc("measurer-" + name, argv, test.base_env(), test.dir, prefix,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
            test.procs.append(p)
            self.procs[name] = p
        for name, addr, _ in hosts:
            line = self._readline(name, 30)
            if not line.startswith("listening "):
                raise AssertionError("measurer %s: %r\n%s" % (name, line,
                                                               self.procs[name].describe()))
            self.addrs[name] = "%s:%s" % (addr, line.split()[1])

    def _readline(self, name, timeout):
        """The next line `name` printed; its pipe is read with os.read into a
        buffer of ours, so that select() never misses lines a file object
        had already read ahead."""
        p = self.procs[name]
        fd = p.popen.stdout.fileno()
        buf = self._buffers.setdefault(name, b"")
        deadline = time.monotonic() + timeout
        while b"\n" not in buf:
            left = deadline - time.monotonic()
            ready, _, _ = select.select([fd], [], [], max(0.0, left))
            if not ready:
                raise AssertionError("measurer %s said nothing for %.1fs\n%s" % (
                    name, timeout, p.describe()))
            chunk = os.read(fd, 65536)
            if not chunk:
                raise AssertionError("measurer %s exited\n%s" % (name, p.describe()))
            buf += chunk
        line, _, rest = buf.partition(b"\n")
        self._buffers[name] = rest
        return line.decode().strip()

    def plan(self, rnd):
        out = subprocess.run([self.tool, "plan", "--round=%d" % rnd] + sorted(self.procs),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             timeout=30, check=True)
        return json.loads(out.stdout)

    def round(self, rnd, timeout=60):
        """Every host measures its targets of round `rnd` at once. Returns the
        LinkResults (dicts) and {host: {"seconds", "sent", "received"}}:
        sent this round, received in all so far. Round 0 measures nothing
        (for the totals at the end)."""
        plan = self.plan(rnd) if rnd > 0 else {}
        nonce = random.getrandbits(63)
        for name, p in self.procs.items():
            targets = " ".join("%s@%s" % (t, self.addrs[t]) for t in plan.get(name, []))
            p.popen.stdin.write(("measure %d %d %s\n" % (rnd, nonce, targets)).encode())
            p.popen.stdin.flush()
        links, done = [], {}
        deadline = time.monotonic() + timeout
        for name in self.procs:
            while True:
                line = self._readline(name, max(0.1, deadline - time.monotonic()))
                if line.startswith("done "):
                    fields = dict(f.split("=") for f in line.split()[2:])
                    done[name] = {"seconds": float(fields["seconds"]),
                                  "sent": int(fields["sent"]),
                                  "received": int(fields["received"])}
                    break
                if line.startswith("{"):
                    links.append(json.loads(line))
                    continue
                raise AssertionError("measurer %s: %r" % (name, line))
        return links, done

    def analyze(self, links, *args):
        out = subprocess.run([self.tool, "analyze"] + list(args),
                             input="".join(json.dumps(l) + "\n" for l in links),
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             timeout=30, check=True)
        return json.loads(out.stdout)

    def close(self):
        """Ends every measurer (the end of its stdin) and waits for it."""
        for p in self.procs.values():
            if p.popen.stdin and not p.popen.stdin.closed:
                p.popen.stdin.close()
        for p in self.procs.values():
            p.wait(30)
            p.popen.stdout.close()
