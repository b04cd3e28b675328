"""End-to-end: elastic jobs (docs/elastic.md) with real agents on loopback.

kill -9 of an agent, kill and restart of node 0's agent (its coordinator dies
with it), a frozen agent (SIGSTOP) caught by the heartbeat timeout, a worker
failure, the restart budget, scale-up, and a torch DDP job that resumes from
its checkpoint after losing a node.

Workers (e2e/workers/elastic_worker.py) record each start in
$E2E_DIR/starts/r<RESTART>-rank<RANK>.json and wait for $E2E_DIR/release, so
every wait here is on a file or an exit, with a deadline.
"""

import glob
import json
import os
import signal
import time
import unittest

import harness
from harness import E2ETestCase, PY, free_port, free_ports, poll_until

WORKER = [PY, harness.worker("elastic_worker.py")]
DDP = [PY, harness.worker("elastic_ddp.py")]
EXIT_RESTARTS_EXHAUSTED = 79


class ElasticTest(E2ETestCase):

    def start_elastic(self, count, nnodes, command=WORKER, extra_args=(), env=None, ranks=None):
        """Agents n0..n<count-1> (node rank hint = index) of an elastic job."""
        self.coordinator_port = getattr(self, "fixed_coordinator_port", None) or free_port()
        self.master_port = free_ports(2)[1]
        self.job_id = "e2e-el-" + self.tag[:8]
        self.common_args = ["--nnodes=%s" % nnodes,
                            "--coordinator=127.0.0.1:%d" % self.coordinator_port,
                            "--master-port=%d" % self.master_port, "--health-port=0",
                            "--nproc-per-node=1", "--job-id=%s" % self.job_id,
                            "--join-timeout=60s", "--grace-period=5s"] + list(extra_args)
        self.command = command
        self.extra_env = env or {}
        return [self.start_node(i) for i in (ranks if ranks is not None else range(count))]

    def start_node(self, i, name=None):
        args = ["--node-rank=%d" % i, "--node-id=n%d" % i] + self.common_args
        return self.start_agent(args, self.command, name=name or "n%d" % i,
                                env=self.base_env(E2E_NODE="n%d" % i, **self.extra_env),
                                prefix=getattr(self, "node_prefix", ()))

    def starts(self, restart, count, timeout=20):
        """The `count` worker start records of restart `restart`, by rank."""
        pattern = self.path("starts", "r%d-rank*.json" % restart)
        poll_until(lambda: len(glob.glob(pattern)) >= count, timeout,
                   what="%d workers started with restart count %d\n%s" %
                   (count, restart, self.describe_all()))
        recs = [self.read_json(os.path.relpath(p, self.dir)) for p in glob.glob(pattern)]
        return sorted(recs, key=lambda r: r["rank"])

    def release(self):
        with open(self.path("release"), "w"):
            pass

    def assert_ranks(self, recs, nodes):
        self.assertEqual([r["rank"] for r in recs], list(range(len(nodes))))
        self.assertEqual([r["node"] for r in recs], nodes, "node of each rank")
        for r in recs:
            self.assertEqual(r["world_size"], len(nodes))

    # --- tests ---

    def test_kill9_one_of_four_survivors_restart_with_world_size_3(self):
        agents = self.start_elastic(4, "2:4")
        first = self.starts(0, 4)
        self.assert_ranks(first, ["n0", "n1", "n2", "n3"])
        # n2 sent its first liveness datagram before it started its worker;
        # half a second more for the coordinator to have read it on a loaded
        # host, so that it knows where to probe (docs/protocol.md, "Stream
        # loss").
        time.sleep(0.5)
        killed_at = time.monotonic()
        os.kill(agents[2].pid, signal.SIGKILL)
        second = self.starts(1, 3)
        took = time.monotonic() - killed_at
        self.assert_ranks(second, ["n0", "n1", "n3"])
        self.assertEqual({r["restart"] for r in second}, {1})
        print("\n[measure] kill -9 of 1 of 4 agents -> survivors' workers restarted: %.3fs" % took)
        # Re-joined with a READY datagram, the assignment on the kept stream
        # (docs/protocol.md, "Re-join on the stream"), not a Join call.
        for a in (agents[0], agents[1], agents[3]):
            self.assertIn("re-joining round 2 by datagram", a.stderr, a.name)
            self.assertNotIn("with a Join call", a.stderr, a.name)
            # ... told so by a datagram (the Rejoin with its reason), which
            # woke its loop: no stream write for the Rejoin either. Every
            # node's log says why, naming the node and its rank: found dead
            # at once, its port refusing the coordinator's probe.
            self.assertIn("restart: node n2 (rank 2) lost: its agent disconnected (watch stream "
                          "closed; its liveness port refused a probe) (restart 1 of ",
                          a.stderr, a.name)
            self.assertNotIn("told by a REJOIN datagram", a.stderr, a.name)
        self.release()
        self.assert_codes([agents[0], agents[1], agents[3]], [0, 0, 0], timeout=20)
        self.assertEqual(agents[2].wait(5), -signal.SIGKILL)
        self.assertFalse(glob.glob(self.path("starts", "r2-*")), "exactly one restart")
        self.assert_no_leftovers()

    def test_released_streams_restart_and_finish_by_datagram(self):
        # Streams released from 2 nodes on (the product's default is 2000) in
        # a job of up to 300 (above 256 no member list is asked for, which a
        # datagram could not carry): every agent runs without its stream;
        # a kill -9 is found at the heartbeat timeout (no stream to close),
        # the survivors re-join and get their assignment by datagram, and
        # the verdict comes by datagram, confirmed, so node 0 exits 0 too.
        agents = self.start_elastic(
            3, "2:300", extra_args=["--release-streams-from=2", "--heartbeat-timeout=2s",
                                    "--last-call=1s", "--max-restarts=2", "--log-level=debug"])
        self.assert_ranks(self.starts(0, 3), ["n0", "n1", "n2"])
        poll_until(lambda: all("released this node's directive stream" in a.stderr
                               for a in agents), 15,
                   what="every stream released\n" + self.describe_all())
        # Its connection idle, the coordinator closes it within a minute;
        # what matters here is that nothing depends on it.
        killed_at = time.monotonic()
        os.kill(agents[2].pid, signal.SIGKILL)
        second = self.starts(1, 2)
        took = time.monotonic() - killed_at
        self.assert_ranks(second, ["n0", "n1"])
        # Found by its silence: about the heartbeat timeout, not the 150 ms a
        # closed stream takes.
        self.assertGreaterEqual(took, 1.8, self.describe_all())
        print("\n[measure] released streams: kill -9 -> survivors restarted: %.3fs" % took)
        for a in agents[:2]:
            self.assertIn("restart: node n2 (rank 2) lost: no heartbeat or liveness datagram",
                          a.stderr, a.name)
            self.assertIn("re-joining round 2 by datagram", a.stderr, a.name)
            self.assertNotIn("with a Join call", a.stderr, a.name)
            self.assertNotIn("opening the directive stream again", a.stderr, a.name)
        self.release()
        self.assert_codes(agents[:2], [0, 0], timeout=20)
        for a in agents[:2]:
            self.assertIn("the job's verdict came by datagram", a.stderr, a.name)
        self.assertEqual(agents[2].wait(5), -signal.SIGKILL)
        self.assert_no_leftovers()

    def test_node0_killed_and_restarted_job_continues(self):
        agents = self.start_elastic(3, "2:3")
        self.assert_ranks(self.starts(0, 3), ["n0", "n1", "n2"])
        os.kill(agents[0].pid, signal.SIGKILL)
        agents[0].wait(10)
        # The survivors lose the coordinator, stop their workers and keep
        # re-joining; Kubernetes restarts node 0's container: same node id
        # and rank hint, a new incarnation, a new coordinator.
        poll_until(lambda: all("re-joining" in a.stderr for a in agents[1:]), 10,
                   what="survivors noticing the coordinator loss\n" + self.describe_all())
        n0b = self.start_node(0, name="n0-restarted")
        second = self.starts(1, 3)
        self.assert_ranks(second, ["n0", "n1", "n2"])
        self.assertEqual({r["restart"] for r in second}, {1})
        self.assertIn("round 2: node rank 0 of 3", n0b.stderr,
                      "round numbers continue above round 1")
        self.release()
        self.assert_codes([n0b, agents[1], agents[2]], [0, 0, 0], timeout=20)
        self.assert_no_leftovers()

    def test_frozen_agent_lost_at_heartbeat_timeout_then_fenced_and_exits(self):
        agents = self.start_elastic(3, "2:3", extra_args=["--heartbeat-timeout=1s"])
        self.assert_ranks(self.starts(0, 3), ["n0", "n1", "n2"])
        stopped_at = time.monotonic()
        os.kill(agents[2].pid, signal.SIGSTOP)  # its TCP streams stay open
        second = self.starts(1, 2, timeout=10)
        took = time.monotonic() - stopped_at
        self.assert_ranks(second, ["n0", "n1"])
        # Its UDP liveness datagrams and its Reports stop (docs/protocol.md,
        # "Liveness").
        self.assertIn("no heartbeat or liveness datagram", agents[0].stderr)
        print("\n[measure] SIGSTOP -> survivors' workers restarted, heartbeat timeout 1s: %.3fs"
              % took)
        self.assertGreaterEqual(took, 0.9)
        # Thawed, n2 learns it was fenced, stops its stale worker and exits 69
        # (so that Kubernetes restarts it as a new incarnation).
        os.kill(agents[2].pid, signal.SIGCONT)
        self.assertEqual(agents[2].wait(15), harness.EXIT_UNAVAILABLE, agents[2].describe())
        self.assertIn("fenced", agents[2].stderr)
        self.release()
        self.assert_codes(agents[:2], [0, 0], timeout=20)
        self.assert_no_leftovers()

    def check_frozen_node_lost_in_time(self, agents, timeout, what=""):
        """Freezes n2 (SIGSTOP) and checks node 0 declares it lost within
        +-5% of `timeout` (rendezvous/protocol.h, the budget), and the
        survivors' workers restart after that."""
        stopped_wall, stopped_at = time.time(), time.monotonic()
        os.kill(agents[2].pid, signal.SIGSTOP)
        self.starts(1, 2, timeout=20)
        took = time.monotonic() - stopped_at
        lost = harness.logged_at(agents[0].stderr,
                                 r"node n2 \(rank 2\) lost: no heartbeat or liveness datagram")
        self.assertIsNotNone(lost, self.describe_all())
        detected = lost - stopped_wall  # both this host's wall clock; the log has ms
        print("\n[measure] %sSIGSTOP -> n2 declared lost %.3fs, survivors' workers restarted "
              "%.3fs (heartbeat timeout %gs)" % (what, detected, took, timeout))
        # The silence starts at n2's last heartbeat, which came up to one send
        # interval (T/10) before the SIGSTOP, later still when this loaded
        # host delayed its sender (0.1 s allowed): the lower bound counts from
        # there. Early losses of the kind D4 is about (keepalive closing the
        # streams at T/2) stay far below it. The restart only adds to the
        # detection, so `took` has the lower bound too.
        earliest = timeout * 0.95 - timeout / 10 - 0.1
        self.assertGreaterEqual(took, earliest, self.describe_all())
        # The declaration: +5%, and 0.3 s for this loaded host's scheduling
        # (the exact arithmetic is proven on a fake clock, UdpLivenessTest).
        self.assertGreaterEqual(detected, earliest - 0.002, self.describe_all())
        self.assertLessEqual(detected, timeout * 1.05 + 0.3, self.describe_all())
        # The whole path: REJOIN, old workers stopped, round closed, Python
        # workers started and their files written.
        self.assertLessEqual(took, timeout * 1.05 + 2.0, self.describe_all())

    def test_freeze_is_declared_lost_at_the_heartbeat_timeout_not_before(self):
        # Issue 7, D4: gRPC keepalive (2 s + 2 s) used to close a frozen
        # agent's streams long before --heartbeat-timeout, and a closed stream
        # counted as a lost node. The timeout must mean what it says (+-5%).
        # Protocol 3: the agents' UDP liveness datagrams decide, within the
        # same window (rendezvous/protocol.h, the +-5% budget).
        agents = self.start_elastic(3, "2:3", extra_args=["--heartbeat-timeout=8s"])
        self.assert_ranks(self.starts(0, 3), ["n0", "n1", "n2"])
        self.check_frozen_node_lost_in_time(agents, 8.0)
        os.kill(agents[2].pid, signal.SIGCONT)
        self.assertEqual(agents[2].wait(20), harness.EXIT_UNAVAILABLE, agents[2].describe())
        self.release()
        self.assert_codes(agents[:2], [0, 0], timeout=20)
        self.assert_no_leftovers()

    def test_udp_to_the_coordinator_dropped_reports_keep_members_alive_freeze_still_caught(self):
        # A network that drops UDP (a NetworkPolicy without the UDP port):
        # the agents hear udp_heard=false and send a Report every interval
        # instead; nobody is lost for it, and a frozen agent is still lost
        # within +-5% of the timeout. The job runs in a network namespace of
        # its own, whose firewall (nft) drops UDP to the coordinator port.
        import netns
        cluster = netns.Cluster.create(self, ["h0"])
        host = cluster.hosts[0]
        self.node_prefix = cluster.prefix(host)
        port = free_port()
        for rule in (["nft", "add", "table", "inet", "e2e"],
                     ["nft", "add", "chain", "inet", "e2e", "in",
                      "{ type filter hook input priority 0 ; }"],
                     ["nft", "add", "rule", "inet", "e2e", "in", "udp", "dport", str(port),
                      "counter", "drop"]):
            r = cluster.run(host, rule)
            if r.returncode != 0:
                self.skipTest("nft in a network namespace: %s" % r.stderr.strip())
        timeout = 2.0
        self.fixed_coordinator_port = port
        agents = self.start_elastic(3, "2:3", extra_args=["--heartbeat-timeout=2s"])
        self.assert_ranks(self.starts(0, 3), ["n0", "n1", "n2"])
        poll_until(lambda: "does not hear this node's UDP liveness datagrams" in agents[1].stderr,
                   10, what="n1 noticing its datagrams are not heard\n" + self.describe_all())
        time.sleep(3 * timeout)  # 30 Report intervals: nobody is lost for the dropped UDP
        self.assertFalse(glob.glob(self.path("starts", "r1-*")), self.describe_all())
        dropped = cluster.run(host, ["nft", "list", "chain", "inet", "e2e", "in"]).stdout
        self.assertRegex(dropped, r"counter packets [1-9]", "datagrams were sent and dropped")
        self.check_frozen_node_lost_in_time(agents, timeout, "UDP dropped, ")
        os.kill(agents[2].pid, signal.SIGCONT)
        self.assertEqual(agents[2].wait(20), harness.EXIT_UNAVAILABLE, agents[2].describe())
        self.release()
        self.assert_codes(agents[:2], [0, 0], timeout=20)

    def test_freeze_shorter_than_the_heartbeat_timeout_is_not_a_loss(self):
        # Issue 7, D4: with the default 5 s, a 4.6 s freeze was declared lost
        # at 3.85 s (and a static job failed with 69 on any ~4 s blip).
        agents = self.start_job(2, 1, WORKER, extra_args=["--heartbeat-timeout=5s"])
        self.starts(0, 2)
        os.kill(agents[1].pid, signal.SIGSTOP)
        # 4.0 s: the bug declared a loss at 3.85 s; a longer freeze leaves too
        # little room for the last datagram's phase (up to one 470 ms
        # interval before the stop) and the thaw under load.
        time.sleep(4.0)
        os.kill(agents[1].pid, signal.SIGCONT)
        time.sleep(1.5)
        self.release()
        self.assert_codes(agents, [0, 0], timeout=20)
        self.assertNotIn("lost", agents[0].stderr)
        self.assert_no_leftovers()

    def test_worker_failure_restarts_every_node_with_count_1(self):
        agents = self.start_elastic(3, "2:3", env={"E2E_FAIL_RANK": 1,
                                                   "E2E_FAIL_ONLY_RESTART": 0})
        # Restart 0's other workers may be stopped before they record their
        # start (rank 1 fails at once), so only restart 1 is counted.
        second = self.starts(1, 3)
        self.assert_ranks(second, ["n0", "n1", "n2"])
        self.assertIn("exited with code 3", agents[0].stderr)
        self.release()
        self.assert_codes(agents, [0, 0, 0], timeout=20)

    def test_restart_budget_exhausted_fails_every_node_with_79(self):
        agents = self.start_elastic(3, "2:3", extra_args=["--max-restarts=1"],
                                    env={"E2E_FAIL_RANK": 1})
        self.assert_codes(agents, [EXIT_RESTARTS_EXHAUSTED] * 3, timeout=30)
        self.assertTrue(os.path.exists(self.path("starts", "r1-rank1.json")),
                        "rank 1 failed again after the one restart")
        self.assertFalse(glob.glob(self.path("starts", "r2-*")))
        for a in agents:
            self.assertIn("restart budget exhausted", a.stderr)
        self.assert_no_leftovers()

    def test_scale_up_new_agent_below_max_triggers_a_new_round(self):
        agents = self.start_elastic(2, "2:3")
        self.assert_ranks(self.starts(0, 2), ["n0", "n1"])
        agents.append(self.start_node(2))
        second = self.starts(1, 3)
        self.assert_ranks(second, ["n0", "n1", "n2"])
        self.assertIn("scale-up", agents[0].stderr)
        self.release()
        self.assert_codes(agents, [0, 0, 0], timeout=20)

    def test_torch_ddp_resumes_from_checkpoint_after_a_node_is_killed(self):
        steps = 40
        agents = self.start_elastic(3, "2:3", command=DDP,
                                    env={"E2E_STEPS": steps, "E2E_STEP_SLEEP": 0.1})
        progress = self.path("progress")

        def step_reached():
            if not os.path.exists(progress):
                return 0
            with open(progress) as f:
                lines = f.read().split()
            return int(lines[-1]) if lines and len(lines) % 3 == 0 else 0

        poll_until(lambda: step_reached() >= 8, 90,
                   what="DDP training to reach step 8\n" + self.describe_all())
        os.kill(agents[2].pid, signal.SIGKILL)
        self.assert_codes(agents[:2], [0, 0], timeout=90)
        done = self.read_json("done.json")
        self.assertEqual(done["steps"], steps)
        self.assertEqual(done["restart"], 1)
        self.assertEqual(done["world"], 2)
        self.assertGreaterEqual(done["resumed_from"], 8, "resumed from the checkpoint")
        with open(progress) as f:
            rows = [tuple(map(int, l.split())) for l in f if l.strip()]
        after = [s for (r, w, s) in rows if r == 1]
        self.assertEqual(after, list(range(done["resumed_from"] + 1, steps + 1)),
                         "restart 1 trains each remaining step exactly once")
        self.assertTrue(all(w == 2 for (r, w, s) in rows if r == 1))
        self.assertEqual({s for (r, w, s) in rows}, set(range(1, steps + 1)))
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
