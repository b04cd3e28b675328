"""End-to-end: bad flags, bad jobs and rejected agents, with their exit codes
(common/exit_codes.h, docs/configuration.md) and no processes left behind."""

import socket
import unittest

import harness
from harness import E2ETestCase

SLEEP = ["sleep", "60"]


class UsageErrorTest(E2ETestCase):

    def run_usage(self, args, must_name, code=harness.EXIT_USAGE, command=("true",),
                  separator=True):
        argv = [harness.TRAINLET, "run"] + list(args)
        if separator:
            argv += ["--"] + list(command)
        p = self.start("trainlet", argv)
        rc = p.wait(10)
        self.assertEqual(rc, code, p.describe())
        self.assertIn(must_name, p.stderr, p.describe())
        self.assert_no_leftovers()
        return p

    def test_nnodes_zero(self):
        self.run_usage(["--nnodes=0"], "--nnodes")

    def test_nnodes_not_a_number(self):
        self.run_usage(["--nnodes=abc"], "--nnodes")

    def test_nnodes_min_above_max(self):
        p = self.run_usage(["--nnodes=3:2"], "--nnodes")
        self.assertIn('"3:2"', p.stderr)

    def test_nproc_per_node_not_a_number(self):
        self.run_usage(["--nproc-per-node=x"], "--nproc-per-node")

    def test_bad_env_value_names_the_variable(self):
        p = self.start("trainlet", [harness.TRAINLET, "run", "--", "true"],
                       env=self.base_env(TRAINLET_NNODES="many"))
        self.assertEqual(p.wait(10), harness.EXIT_USAGE, p.describe())
        self.assertIn("TRAINLET_NNODES", p.stderr, p.describe())

    def test_missing_command_after_separator(self):
        self.run_usage(["--nnodes=1", "--"], "COMMAND", separator=False)

    def test_missing_separator(self):
        self.run_usage(["--nnodes=1"], "COMMAND", separator=False)

    def test_unknown_flag(self):
        p = self.run_usage(["--nproc-per-nod=2"], "--nproc-per-nod")
        self.assertIn("--nproc-per-node", p.stderr)  # the suggestion

    def test_forgotten_separator_is_caught(self):
        p = self.run_usage(["--nnodes=1", "python", "train.py"], "python", separator=False)
        self.assertIn("--", p.stderr)

    def test_unbracketed_ipv6_coordinator(self):
        self.run_usage(["--coordinator=::1:29400"], "--coordinator")

    def test_help_wins_over_bad_flags(self):
        p = self.start("trainlet", [harness.TRAINLET, "run", "--nnodes=abc", "--help"])
        self.assertEqual(p.wait(10), 0, p.describe())
        self.assertIn("--nproc-per-node", p.stdout, p.describe())

    def test_rank_hint_not_below_nnodes(self):
        port = harness.free_port()
        p = self.run_usage(["--nnodes=2", "--node-rank=2", "--coordinator=127.0.0.1:%d" % port,
                            "--health-port=0"], "--node-rank", code=harness.EXIT_CONFIG)
        self.assertIn("2", p.stderr)


class UnknownVariableTest(E2ETestCase):
    """A misspelt TRAINLET_* variable gets a did-you-mean, as a misspelt
    flag does; --strict-env or TRAINLET_STRICT_ENV=1 make it exit 64."""

    TYPOS = {"TRAINLET_NPROC_PER_NODES": "2", "TRAINLET_HANG_TIMOUT": "5s",
             "TRAINLET_LOGLEVEL": "debug"}

    def test_typos_are_warned_about_and_ignored(self):
        p = self.start("trainlet", [harness.TRAINLET, "run", "--", "true"],
                       env=self.base_env(**self.TYPOS))
        self.assertEqual(p.wait(30), 0, p.describe())
        for typo, meant in (("TRAINLET_NPROC_PER_NODES", "TRAINLET_NPROC_PER_NODE"),
                            ("TRAINLET_HANG_TIMOUT", "TRAINLET_HANG_TIMEOUT"),
                            ("TRAINLET_LOGLEVEL", "TRAINLET_LOG_LEVEL")):
            self.assertRegex(p.stderr, r" W trainlet(\[[^\]]*\])? unknown environment variable %s "
                                       r"\(did you mean %s\?\)" % (typo, meant))
        self.assertIn("starting 1 worker(s)", p.stderr, "the typo set nothing")
        self.assertNotIn(" D trainlet", p.stderr, "TRAINLET_LOGLEVEL set nothing")

    def test_strict_flag_or_variable_exits_64_for_every_command(self):
        commands = [["run", "--", "true"], ["mpi-worker", "--coordinator=127.0.0.1"],
                    ["coordinator"], ["controller"], ["probe"], ["status"]]
        for argv in commands:
            for strict_flag, extra in ((True, {}), (False, {"TRAINLET_STRICT_ENV": "1"})):
                with self.subTest(argv=argv, flag=strict_flag):
                    args = [argv[0]] + (["--strict-env"] if strict_flag else []) + argv[1:]
                    p = self.start(argv[0], [harness.TRAINLET] + args,
                                   env=self.base_env(TRAINLET_HANG_TIMOUT="5s", **extra))
                    self.assertEqual(p.wait(30), harness.EXIT_USAGE, p.describe())
                    self.assertIn("TRAINLET_HANG_TIMOUT (did you mean TRAINLET_HANG_TIMEOUT?)",
                                  p.stderr, p.describe())
                    self.assertIn("--strict-env", p.stderr, p.describe())
        self.assert_no_leftovers()

    def test_what_trainlet_sets_for_workers_is_known(self):
        # A worker that runs trainlet again (a nested probe) inherits these.
        p = self.start("probe", [harness.TRAINLET, "probe", "--strict-env"],
                       env=self.base_env(TRAINLET_PROGRESS_FILE="/tmp/p",
                                         TRAINLET_TRACEBACK_FILE="/tmp/t",
                                         TRAINLET_HOSTFILE="/tmp/h", TRAINLET_NP="4"))
        self.assertEqual(p.wait(30), 0, p.describe())
        self.assertNotIn("unknown environment variable", p.stderr)


class HelpTest(E2ETestCase):

    def test_top_level_help_lists_each_command_once_and_every_code(self):
        p = self.start("help", [harness.TRAINLET, "--help"])
        self.assertEqual(p.wait(10), 0, p.describe())
        commands = [l.split()[0] for l in p.stdout.splitlines() if l.startswith("  ") and
                    not l.startswith("   ") and l.split()[0].isalpha()]
        self.assertEqual(commands.count("status"), 1, p.stdout)
        for code in ("80", "81"):
            self.assertRegex(p.stdout, r"\n  %s +\S" % code)
        self.assertIn("1-63, 83-125", p.stdout)
        self.assertNotIn("80-125", p.stdout)

    def test_a_misspelt_command_gets_a_did_you_mean_not_the_whole_help(self):
        p = self.start("runn", [harness.TRAINLET, "runn", "--", "true"])
        self.assertEqual(p.wait(10), harness.EXIT_USAGE, p.describe())
        self.assertIn('unknown command "runn" (did you mean run?)', p.stderr)
        self.assertNotIn("Exit codes", p.stderr + p.stdout)
        self.assertLess(len(p.stderr.splitlines()), 4, p.stderr)


class RendezvousErrorTest(E2ETestCase):

    def agent_args(self, port, rank, node_id, nnodes=2, extra=()):
        return ["--nnodes=%d" % nnodes, "--node-rank=%d" % rank, "--node-id=%s" % node_id,
                "--coordinator=127.0.0.1:%d" % port, "--health-port=0",
                "--master-port=%d" % harness.free_port(), "--nproc-per-node=1",
                "--join-timeout=30s"] + list(extra)

    def wait_joined(self, coordinator_agent, node_id):
        """Until the coordinator (at --log-level=debug) has registered node_id's join."""
        harness.poll_until(
            lambda: "join %s/" % node_id in coordinator_agent.stderr
            or not coordinator_agent.running(), 20, what="node %s to join" % node_id)
        self.assertTrue(coordinator_agent.running(), coordinator_agent.describe())

    def test_unresolvable_coordinator(self):
        p = self.start_agent(["--nnodes=2", "--node-rank=1", "--node-id=lost",
                              "--coordinator=no-such-host.invalid:1", "--health-port=0",
                              "--nproc-per-node=1", "--join-timeout=2s"], SLEEP)
        rc = p.wait(15)
        self.assertEqual(rc, harness.EXIT_UNAVAILABLE, p.describe())
        self.assertLess(p.elapsed(), 5.5, p.describe())
        self.assertIn("no-such-host.invalid", p.stderr, p.describe())
        self.assert_no_leftovers()

    def test_join_timeout_on_coordinator_node(self):
        # Node 0 of 2 alone: no round closes within --join-timeout.
        port = harness.free_port()
        p = self.start_agent(self.agent_args(port, 0, "n0")[:-1] + ["--join-timeout=2s"], SLEEP)
        self.assertEqual(p.wait(20), harness.EXIT_UNAVAILABLE, p.describe())
        # Known bug: exits ~10s late (Finish() waits for a verdict drain).
        self.assertLess(p.elapsed(), 5, p.describe())
        self.assert_no_leftovers()

    def test_join_timeout_without_coordinator(self):
        port = harness.free_port()  # nothing listens there
        p = self.start_agent(self.agent_args(port, 1, "n1")[:-1] + ["--join-timeout=2s"], SLEEP)
        self.assertEqual(p.wait(20), harness.EXIT_UNAVAILABLE, p.describe())
        self.assertLess(p.elapsed(), 5, p.describe())
        self.assertIn("127.0.0.1:%d" % port, p.stderr, p.describe())

    def test_coordinator_port_in_use(self):
        port = harness.free_port()
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("0.0.0.0", port))
            s.listen(1)
            p = self.start_agent(self.agent_args(port, 0, "n0"), SLEEP)
            rc = p.wait(15)
        self.assertEqual(rc, harness.EXIT_OS_ERROR, p.describe())
        self.assertIn(str(port), p.stderr, p.describe())
        # Nothing to wait for: no agent ever joined the coordinator that could
        # not listen. (Known bug: Finish() waits 10s for a verdict drain.)
        self.assertLess(p.elapsed(), 3, p.describe())
        self.assert_no_leftovers()

    def test_health_port_in_use(self):
        port, health = harness.free_ports(2)
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("0.0.0.0", health))
            s.listen(1)
            p = self.start_agent(self.agent_args(port, 1, "n1") + ["--health-port=%d" % health],
                                 SLEEP)
            rc = p.wait(15)
        self.assertEqual(rc, harness.EXIT_OS_ERROR, p.describe())
        self.assertIn(str(health), p.stderr, p.describe())
        self.assert_no_leftovers()

    def token(self, name, value):
        path = self.path(name)
        with open(path, "w") as f:
            f.write(value + "\n")
        return path

    def test_wrong_token(self):
        port = harness.free_port()
        good, bad = self.token("good", "right-secret"), self.token("bad", "wrong-secret")
        n0 = self.start_agent(self.agent_args(port, 0, "n0", extra=["--token-file=" + good]),
                              ["true"], name="node0")
        n1 = self.start_agent(self.agent_args(port, 1, "n1", extra=["--token-file=" + bad]),
                              SLEEP, name="node1")
        self.assertEqual(n1.wait(20), harness.EXIT_REJECTED, n1.describe())
        self.assertTrue(n0.running(), n0.describe())
        # The right token still gets in, and the job runs to the end.
        n1b = self.start_agent(self.agent_args(port, 1, "n1", extra=["--token-file=" + good]),
                               ["true"], name="node1b")
        self.assertEqual(self.wait_all([n0, n1b], 30), [0, 0], self.describe_all())
        self.assert_no_leftovers()

    def test_no_token_against_a_token(self):
        port = harness.free_port()
        good = self.token("good", "right-secret")
        n0 = self.start_agent(self.agent_args(port, 0, "n0", extra=["--token-file=" + good]),
                              SLEEP, name="node0")
        n1 = self.start_agent(self.agent_args(port, 1, "n1"), SLEEP, name="node1")
        self.assertEqual(n1.wait(20), harness.EXIT_REJECTED, n1.describe())
        self.assertTrue(n0.running(), n0.describe())

    def test_job_id_mismatch(self):
        port = harness.free_port()
        n0 = self.start_agent(self.agent_args(port, 0, "n0", extra=["--job-id=job-a"]), SLEEP,
                              name="node0")
        n1 = self.start_agent(self.agent_args(port, 1, "n1", extra=["--job-id=job-b"]), SLEEP,
                              name="node1")
        self.assertEqual(n1.wait(20), harness.EXIT_REJECTED, n1.describe())
        self.assertIn("job-b", n1.stderr, n1.describe())
        self.assertTrue(n0.running(), n0.describe())

    def test_duplicate_node_id(self):
        port = harness.free_port()
        n0 = self.start_agent(self.agent_args(port, 0, "same-id", extra=["--log-level=debug"]),
                              SLEEP, name="node0")
        self.wait_joined(n0, "same-id")
        dup = self.start_agent(self.agent_args(port, 1, "same-id"), SLEEP, name="dup")
        self.assertEqual(dup.wait(20), harness.EXIT_CONFIG, dup.describe())
        self.assertIn("same-id", dup.stderr, dup.describe())
        self.assertTrue(n0.running(), n0.describe())

    def test_duplicate_rank_hint(self):
        port = harness.free_port()
        n0 = self.start_agent(self.agent_args(port, 0, "n0", nnodes=3, extra=["--log-level=debug"]),
                              SLEEP, name="node0")
        n1 = self.start_agent(self.agent_args(port, 1, "n1", nnodes=3), SLEEP, name="node1")
        self.wait_joined(n0, "n1")
        dup = self.start_agent(self.agent_args(port, 1, "n2", nnodes=3), SLEEP, name="dup")
        self.assertEqual(dup.wait(20), harness.EXIT_CONFIG, dup.describe())
        self.assertTrue(n0.running() and n1.running(), self.describe_all())

    def test_round_full(self):
        agents = self.start_job(2, 1, ["sleep", "60"])
        # Wait until the job runs (both agents started their worker).
        harness.poll_until(
            lambda: all("started worker" in a.stderr for a in agents)
            or not all(a.running() for a in agents), 30, what="the job to start")
        self.assertTrue(all(a.running() for a in agents), self.describe_all())
        third = self.start_agent(
            ["--nnodes=2", "--node-id=third", "--job-id=" + self.job_id,
             "--coordinator=127.0.0.1:%d" % self.coordinator_port, "--health-port=0",
             "--nproc-per-node=1", "--join-timeout=30s"], SLEEP, name="third")
        self.assertEqual(third.wait(20), harness.EXIT_CONFIG, third.describe())
        self.assertIn("full", third.stderr, third.describe())
        self.assertTrue(all(a.running() for a in agents), self.describe_all())
        # The running job is unaffected; stop it.
        for a in agents:
            a.signal(15)
        self.wait_all(agents, 40)
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
