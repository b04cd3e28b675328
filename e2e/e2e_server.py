"""End-to-end: the coordinator's server under hostile conditions, on the real
binary. Descriptor exhaustion by a connection flood (issue 7, D2) must not stop
it from accepting for good; a too-low `ulimit -n` fails at once with exit 71
and the real reason (D9); a taken port is one clear line, without gRPC's raw
error dump; and the line other nodes log when one is lost names it (D8)."""

import os
import re
import resource
import signal
import socket
import subprocess
import time
import unittest

import harness
from harness import E2ETestCase, TRAINLET


def ulimit(n):
    """A prefix that runs the command under `ulimit -n n` (soft and hard)."""
    return ("sh", "-c", 'ulimit -n %d && exec "$@"' % n, "sh")


# gRPC's own log format: "E1123 09:06:11.120608427   24141 tcp_server_posix.cc:205] ..."
GRPC_LOG_LINE = re.compile(r"^[EWID]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]", re.M)


def setUpModule():
    # The floods below hold over a thousand sockets in this process.
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 4096 if hard == resource.RLIM_INFINITY else min(hard, 4096)
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))


def flood(port, count, hold):
    """Opens `count` TCP connections to 127.0.0.1:port (each sends nothing),
    holds them `hold` seconds, closes them. Returns how many connected."""
    socks = []
    try:
        for _ in range(count):
            s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            s.settimeout(2)
            try:
                s.connect(("127.0.0.1", port))
            except OSError:
                s.close()
                continue
            socks.append(s)
        time.sleep(hold)
        return len(socks)
    finally:
        for s in socks:
            s.close()


class ServerTest(E2ETestCase):

    def health(self, port):
        r = subprocess.run([TRAINLET, "health", "127.0.0.1:%d" % port], capture_output=True,
                           timeout=30, env=self.base_env())
        return r.returncode == 0 and b"SERVING" in r.stdout

    def start_coordinator(self, nnodes, prefix=(), port=None, name="coordinator"):
        self.port = port or harness.free_port()
        self.job = "server-" + self.tag[:8]
        return self.start(name, [TRAINLET, "coordinator", "--nnodes=%d" % nnodes,
                                 "--port=%d" % self.port, "--bind-addr=127.0.0.1",
                                 "--job-id=%s" % self.job], prefix=prefix)

    def start_agents(self, nnodes, command, join_timeout="30s"):
        master_port = harness.free_port()
        return [self.start_agent(harness.standalone_agent_args(i, nnodes, self.port, self.job,
                                                               master_port, join_timeout),
                                 command, name="agent%d" % i)
                for i in range(nnodes)]

    # -- D2 -------------------------------------------------------------------------

    def test_coordinator_accepts_again_after_descriptor_exhaustion(self):
        coord = self.start_coordinator(2, prefix=ulimit(128))
        harness.poll_until(lambda: "listening" in coord.stderr, 10, what="the coordinator")
        self.assertTrue(self.health(self.port), coord.describe())
        connected = flood(self.port, 200, hold=1.0)
        self.assertGreater(connected, 100)
        # Accepting again within a few seconds of the flood's end.
        harness.poll_until(lambda: self.health(self.port), 10,
                           what="health SERVING after the flood\n" + coord.describe())
        agents = self.start_agents(2, ["true"], join_timeout="20s")
        self.assert_codes(agents, [0, 0], 40)
        self.assertEqual(coord.wait(15), 0, coord.describe())
        self.assertIn("cannot accept connections", coord.stderr)
        self.assertIn("accepting connections on 127.0.0.1:%d again" % self.port, coord.stderr)
        self.assertIsNone(GRPC_LOG_LINE.search(coord.stderr), coord.describe())

    def test_node0_agent_keeps_serving_after_1100_connections(self):
        port = harness.free_port()
        master_port = harness.free_port()
        job = "flood-" + self.tag[:8]
        common = ["--nnodes=2", "--coordinator=127.0.0.1:%d" % port,
                  "--master-port=%d" % master_port, "--health-port=0", "--nproc-per-node=1",
                  "--job-id=%s" % job, "--join-timeout=30s"]
        node0 = self.start_agent(common + ["--node-rank=0", "--node-id=f0"], ["true"],
                                 name="node0", prefix=ulimit(1024))
        harness.poll_until(lambda: "listening" in node0.stderr, 10, what="node 0 to listen")
        self.assertGreater(flood(port, 1100, hold=1.0), 1000)
        node1 = self.start_agent(common + ["--node-rank=1", "--node-id=f1"], ["true"],
                                 name="node1")
        self.assert_codes([node0, node1], [0, 0], 60)

    # -- D9 -------------------------------------------------------------------------

    def test_too_few_descriptors_exit_71_at_once_naming_the_limit(self):
        port = harness.free_port()
        for limit in (8, 10, 12):
            p = self.start_agent(["--nnodes=2", "--node-rank=0", "--node-id=d%d" % limit,
                                  "--coordinator=127.0.0.1:%d" % port, "--health-port=0",
                                  "--nproc-per-node=1", "--join-timeout=5s"], ["true"],
                                 name="run-ulimit-%d" % limit, prefix=ulimit(limit))
            self.assertEqual(p.wait(10), harness.EXIT_OS_ERROR, p.describe())
            self.assertLess(p.elapsed(), 3.0, p.describe())
            self.assertIn("the open-file limit is %d descriptors" % limit, p.stderr, p.describe())
            self.assertIn("ulimit -n", p.stderr)
            self.assertNotIn("in use", p.stderr)
        coord = self.start_coordinator(2, prefix=ulimit(12), name="coordinator-ulimit-12")
        self.assertEqual(coord.wait(10), harness.EXIT_OS_ERROR, coord.describe())
        self.assertIn("the open-file limit is 12 descriptors", coord.stderr)

    # -- bind errors, gRPC's log lines ----------------------------------------------

    def test_port_in_use_is_one_clear_line_without_grpc_dump(self):
        first = self.start_coordinator(2)
        harness.poll_until(lambda: "listening" in first.stderr, 10, what="the coordinator")
        second = self.start_coordinator(2, port=self.port, name="second")
        self.assertEqual(second.wait(10), harness.EXIT_OS_ERROR, second.describe())
        self.assertIn("cannot listen on 127.0.0.1:%d: the port is in use" % self.port,
                      second.stderr)
        self.assertIsNone(GRPC_LOG_LINE.search(second.stderr), second.describe())
        first.signal(signal.SIGTERM)
        first.wait(10)

    # -- D8 -------------------------------------------------------------------------

    def test_lost_node_is_named_on_the_other_nodes(self):
        agents = self.start_job(2, 1, ["sleep", "30"])
        harness.poll_until(lambda: "round 1" in agents[1].stderr, 20, what="the round")
        time.sleep(0.3)  # node 1's Watch stream is open, most likely.
        agents[1].kill()
        code = agents[0].wait(20)
        self.assertEqual(code, harness.EXIT_PEER_FAILED, agents[0].describe())
        # Killed with its stream open, node 1 is lost at once (disconnected);
        # if its agent was slower to open the stream than the sleep above,
        # its silence names it at the heartbeat timeout instead. Either way
        # node 0 names it.
        self.assertRegex(agents[0].stderr,
                         r"node n1 \(rank 1\) lost: (its agent disconnected|no heartbeat or liveness)",
                         agents[0].describe())


if __name__ == "__main__":
    unittest.main()
