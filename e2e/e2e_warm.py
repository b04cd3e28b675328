"""End-to-end: warm standby workers (`--warm-workers`, docs/warm-workers.md).

A warm worker sees what a cold one does, variable by variable; standbys are
READY with their RSS, use no CPU while waiting, never outlive the agent, and
a dead one means that rank starts cold; a COMMAND that cannot be warmed runs
cold with one line why; SIGTERM around a warm handover stops everything
within the grace period; and real torch DDP (gloo) on netns hosts resumes
warm from its checkpoint after a kill -9 of a pod and after a worker failure.

Workers: e2e/workers/warm_worker.py (records what it sees in
$E2E_DIR/dump-r<RESTART>-rank<RANK>.json) and elastic_ddp.py.
"""

import glob
import os
import re
import signal
import time
import unittest

import harness
from harness import E2ETestCase, PY, free_port, free_ports, poll_until

WARM_WORKER = harness.worker("warm_worker.py")
DDP = harness.worker("elastic_ddp.py")
READY = re.compile(r"warm workers: standby for local rank (\d+) \(pid (\d+)\) ready: "
                   r"preloaded (\S+) in [\d.]+ s, RSS (\d+) MiB")


def cpu_ticks(pid):
    with open("/proc/%d/stat" % pid) as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return int(fields[11]) + int(fields[12])  # utime + stime


class WarmTest(E2ETestCase):

    def single_node(self, command, warm=True, nproc=2, extra_args=(), env=None, name=None):
        if not getattr(self, "master_port", None):
            self.master_port = free_ports(2)[1]
        args = ["--nproc-per-node=%d" % nproc, "--max-restarts=3", "--health-port=0",
                "--master-port=%d" % self.master_port, "--job-id=warm-" + self.tag[:8],
                "--grace-period=5s"]
        if warm:
            args.append("--warm-workers")
        return self.start_agent(args + list(extra_args), command, name=name,
                                env=env or self.base_env(E2E_FAIL_RANK="1", E2E_HOLD="1"))

    def ready_standbys(self, agent, count, timeout=60):
        """{local rank: pid} once `count` standbys said READY."""
        poll_until(lambda: len(READY.findall(agent.stderr)) >= count, timeout,
                   what="%d standbys ready\n%s" % (count, agent.describe()))
        return {int(m[0]): int(m[1]) for m in READY.findall(agent.stderr)}

    def dumps(self, restart, count, prefix=""):
        pattern = self.path(prefix + "dump-r%d-rank*.json" % restart)
        poll_until(lambda: len(glob.glob(pattern)) >= count, 60,
                   what="%d dumps of round %d\n%s" % (count, restart, self.describe_all()))
        return {int(re.search(r"rank(\d+)", p).group(1)): self.read_json(os.path.relpath(p, self.dir))
                for p in glob.glob(pattern)}

    def fail_and_release(self):
        with open(self.path("fail"), "w"):
            pass

    def run_to_second_round(self, command, warm, dump_prefix):
        """A 2-worker job whose rank 1 fails in round 0: the dumps of round 1."""
        agent = self.single_node(command, warm=warm, name="warm" if warm else "cold")
        self.dumps(0, 2)
        if warm:
            self.ready_standbys(agent, 2)
        self.fail_and_release()
        second = self.dumps(1, 2)
        with open(self.path("release"), "w"):
            pass
        self.assertEqual(agent.wait(60), 0, agent.describe())
        for rank, dump in second.items():
            os.rename(self.path("dump-r1-rank%d.json" % rank),
                      self.path("%sdump-r1-rank%d.json" % (dump_prefix, rank)))
        for name in glob.glob(self.path("dump-*")) + [self.path("fail"), self.path("release")]:
            os.unlink(name)
        return agent, second

    def check_warm_equals_cold(self, command):
        cold_agent, cold = self.run_to_second_round(command, warm=False, dump_prefix="cold-")
        warm_agent, warm = self.run_to_second_round(command, warm=True, dump_prefix="warm-")
        standbys = {int(m[1]) for m in READY.findall(warm_agent.stderr)}
        self.assertEqual(len(re.findall(r"\(warm: its standby\)", warm_agent.stderr)), 2,
                         warm_agent.describe())
        for rank in (0, 1):
            c, w = cold[rank], warm[rank]
            # Each agent has a progress directory of its own: compare the rest.
            for dump in (c, w):
                for name in ("TRAINLET_PROGRESS_FILE", "TRAINLET_TRACEBACK_FILE"):
                    dump["environ"][name] = re.sub(r"trainlet-progress-[^/]+/", "DIR/",
                                                   dump["environ"][name])
            self.assertIn(w.pop("pid"), standbys, "round 1's worker is a standby")
            c.pop("pid")
            # The preload (torch when importable) is the one difference a
            # script can see before it imports anything.
            self.assertTrue(w.pop("torch_preloaded"))
            self.assertFalse(c.pop("torch_preloaded"))
            for key in sorted(c):
                self.assertEqual(w[key], c[key], "rank %d: %s differs" % (rank, key))
            self.assertEqual(sorted(w), sorted(c))
        self.assertNotIn("warm workers", cold_agent.stderr)
        self.assert_no_leftovers()

    # --- tests ---

    def test_a_warm_script_worker_sees_what_a_cold_one_does(self):
        self.check_warm_equals_cold([PY, "-u", WARM_WORKER, "--flag", "value"])

    def test_a_warm_module_worker_sees_what_a_cold_one_does(self):
        # -m with the worker's directory as cwd: sys.path[0] is the cwd.
        workers = os.path.dirname(WARM_WORKER)
        self.check_warm_equals_cold(["env", "-C", workers, PY, "-m", "warm_worker", "x"])

    def test_standbys_report_rss_use_no_cpu_and_never_outlive_the_agent(self):
        agent = self.single_node([PY, WARM_WORKER])
        standbys = self.ready_standbys(agent, 2)
        for m in READY.findall(agent.stderr):
            self.assertEqual(m[2], "torch")
            self.assertGreater(int(m[3]), 20, "RSS of a standby with torch imported")
        before = {pid: cpu_ticks(pid) for pid in standbys.values()}
        time.sleep(1.5)
        for pid, ticks in before.items():
            self.assertLessEqual(cpu_ticks(pid) - ticks, 1, "standby %d used CPU waiting" % pid)
            with open("/proc/%d/stat" % pid) as f:
                self.assertEqual(f.read().rsplit(")", 1)[1].split()[0], "S")
        # kill -9 of the agent: PDEATHSIG takes the standbys with it.
        os.kill(agent.pid, signal.SIGKILL)
        agent.wait(10)
        poll_until(lambda: not any(os.path.exists("/proc/%d" % p) for p in standbys.values()), 10,
                   what="standbys gone with their agent")
        self.assert_no_leftovers()

    def test_a_dead_standby_means_its_rank_starts_cold_and_the_other_warm(self):
        agent = self.single_node([PY, WARM_WORKER])
        self.dumps(0, 2)
        standbys = self.ready_standbys(agent, 2)
        os.kill(standbys[0], signal.SIGKILL)
        poll_until(lambda: "standby for local rank 0 (pid %d) exited with 137" % standbys[0]
                   in agent.stderr, 10, what="the dead standby noticed\n" + agent.describe())
        self.fail_and_release()
        second = self.dumps(1, 2)
        with open(self.path("release"), "w"):
            pass
        self.assertEqual(agent.wait(60), 0, agent.describe())
        self.assertNotEqual(second[0]["pid"], standbys[0])
        self.assertEqual(second[1]["pid"], standbys[1])
        self.assertIn("warm workers: local rank 0 starts cold: no standby", agent.stderr)
        self.assert_no_leftovers()

    def test_an_agent_store_without_torch_exits_78_saying_why(self):
        # python3 -S: no site-packages, so no torch for the store either.
        agent = self.single_node([PY, "-S", WARM_WORKER], warm=False,
                                 extra_args=["--agent-store"])
        self.assertEqual(agent.wait(60), 78, agent.describe())
        self.assertIn("cannot import torch.distributed.TCPStore", agent.stderr)
        self.assertIn("--agent-store: the store exited with code 78 before it listened on port %d"
                      % (self.master_port - 1), agent.stderr)
        self.assertNotIn("started worker", agent.stderr)
        self.assert_no_leftovers()

    def test_an_agent_store_port_already_listened_on_exits_78(self):
        # Whatever answers there would be taken for the store (another job's,
        # with the host network): refused before anything starts.
        import socket
        s = socket.socket()
        self.addCleanup(s.close)
        s.bind(("127.0.0.1", 0))
        s.listen(1)
        agent = self.single_node([PY, WARM_WORKER], warm=False,
                                 extra_args=["--agent-store", "--agent-store-port=%d"
                                             % s.getsockname()[1]])
        self.assertEqual(agent.wait(30), 78, agent.describe())
        self.assertIn("port %d already has a listener" % s.getsockname()[1], agent.stderr)
        self.assertNotIn("started helper agent-store", agent.stderr)
        self.assert_no_leftovers()

    def test_a_command_that_cannot_be_warmed_runs_cold_saying_why(self):
        for command, why in (
                (["sh", "-c", "exit 0"], "COMMAND is not a Python interpreter"),
                ([PY, "-c", "pass"], "COMMAND runs `python -c CODE`")):
            agent = self.single_node(command, nproc=1, name=command[0])
            self.assertEqual(agent.wait(30), 0, agent.describe())
            self.assertEqual(agent.stderr.count("warm workers: off: " + why), 1, agent.describe())
            self.assertNotIn("standby", agent.stderr)
        self.assert_no_leftovers()

    def test_a_failing_preload_runs_cold_saying_why(self):
        agent = self.single_node([PY, WARM_WORKER], extra_args=["--preload=no_such_module_x"])
        self.dumps(0, 2)
        poll_until(lambda: agent.stderr.count("cannot become the worker: preloading "
                                              "no_such_module_x") == 2, 30,
                   what="the standbys say why\n" + agent.describe())
        self.fail_and_release()
        self.dumps(1, 2)
        with open(self.path("release"), "w"):
            pass
        self.assertEqual(agent.wait(60), 0, agent.describe())
        self.assertNotIn("(warm: its standby)", agent.stderr)
        self.assert_no_leftovers()

    def test_sigterm_around_a_warm_handover_stops_everything_within_the_grace_period(self):
        # The failure starts a restart (stop, re-join, handover); SIGTERM at
        # different moments of it. Everything is gone within --grace-period.
        for delay in (0.0, 0.03, 0.08, 0.2):
            agent = self.single_node([PY, WARM_WORKER], name="agent-%g" % delay)
            self.dumps(0, 2)
            self.ready_standbys(agent, 2)
            self.fail_and_release()
            time.sleep(delay)
            sent = time.monotonic()
            agent.signal(signal.SIGTERM)
            code = agent.wait(30)
            self.assertLess(time.monotonic() - sent, 5.0, agent.describe())
            self.assertIn(code, (0, 143), agent.describe())
            self.assert_no_leftovers()
            for name in glob.glob(self.path("dump-*")) + [self.path("fail")]:
                os.unlink(name)

    # --- real torch DDP on pod-like hosts ---

    def ddp_on_hosts(self, count, nnodes, env_extra, agent_store=False):
        names = ["warm-%d" % i for i in range(count)]
        cluster = self.netns_cluster(names)
        env = self.base_env(GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1",
                            E2E_STEPS=40, E2E_STEP_SLEEP=0.1, **env_extra)
        agents = []
        for i, h in enumerate(cluster.hosts):
            args = ["--nnodes=%s" % nnodes, "--node-rank=%d" % i, "--node-id=%s" % h.name,
                    "--coordinator=%s:29400" % names[0], "--nproc-per-node=1",
                    "--job-id=warmddp", "--join-timeout=60s", "--grace-period=5s",
                    "--max-restarts=2", "--warm-workers"]
            if agent_store:
                args.append("--agent-store")
            agents.append(cluster.start(h, h.name, [harness.TRAINLET, "run"] + args +
                                        ["--", PY, DDP], env=env))
        return agents

    def step_reached(self):
        progress = self.path("progress")
        if not os.path.exists(progress):
            return 0
        with open(progress) as f:
            lines = f.read().split()
        return int(lines[-1]) if lines and len(lines) % 3 == 0 else 0

    def check_resumed(self, survivors, world, agent_store=False):
        done = self.read_json("done.json")
        # torch's env:// made every rank a client of rank 0's agent store
        # (MASTER_PORT = --master-port - 1), or rank 0 hosted it.
        self.assertEqual(done["agent_store"], "True" if agent_store else None)
        self.assertEqual(done["master_port"], "29499" if agent_store else "29500")
        self.assertEqual(done["restart"], 1)
        self.assertEqual(done["world"], world)
        self.assertGreaterEqual(done["resumed_from"], 8, "resumed from the checkpoint")
        with open(self.path("progress")) as f:
            rows = [tuple(map(int, l.split())) for l in f if l.strip()]
        after = [s for (r, w, s) in rows if r == 1]
        self.assertEqual(after, list(range(done["resumed_from"] + 1, 41)),
                         "restart 1 trains each remaining step exactly once")
        # elastic_ddp.py asserts every step's all_reduce sum (= the world).
        self.assertTrue(done["sums_checked"])
        for a in survivors:
            self.assertIn("(warm: its standby)", a.stderr, a.describe())
        self.assert_no_leftovers()

    def test_kill9_of_a_pod_the_survivors_resume_warm_from_the_checkpoint(self):
        # With --agent-store: rank 0's store listens across the restart.
        agents = self.ddp_on_hosts(3, "2:3", {}, agent_store=True)
        poll_until(lambda: self.step_reached() >= 8 and
                   all(len(READY.findall(a.stderr)) >= 1 for a in agents), 120,
                   what="DDP at step 8 with standbys ready\n" + self.describe_all())
        os.kill(agents[2].pid, signal.SIGKILL)  # the pod: its workers go by PDEATHSIG
        self.assert_codes(agents[:2], [0, 0], timeout=120)
        self.check_resumed(agents[:2], world=2, agent_store=True)
        for a in agents[:2]:
            self.assertIn("agent store listening on port 29499", a.stderr, a.describe())

    def test_a_worker_failure_restarts_every_pod_warm_from_the_checkpoint(self):
        agents = self.ddp_on_hosts(2, "2", {"E2E_FAIL_RANK": 1})
        poll_until(lambda: self.step_reached() >= 8 and
                   all(len(READY.findall(a.stderr)) >= 1 for a in agents), 120,
                   what="DDP at step 8 with standbys ready\n" + self.describe_all())
        self.fail_and_release()
        self.assert_codes(agents, [0, 0], timeout=120)
        self.check_resumed(agents, world=2)


if __name__ == "__main__":
    unittest.main()
