"""End-to-end: what a new user meets in the first hour (issue 6, "the first hour";
issue 7, D5 and D11), black-box on the real binary.

ConfigurationTest: configuration mistakes fail at once with a message that says
what to do (a JobSet pod without a node count, a node rank without a
coordinator, torchrun's flags, a forgotten `--`, a PET_MASTER_ADDR with a port,
an empty token file), and the help texts.

DefaultsTest: the defaults of a run with nothing configured: one worker without
GPUs, a local coordinator address is hosted, two runs side by side, loopback
only. These depend on the agent honouring RunConfig's free ports (0), bind
address and hosting mode.
"""

import os
import re
import socket
import subprocess
import unittest

import harness
from harness import E2ETestCase, TRAINLET

# How long a configuration error may take: it must come before any network wait.
AT_ONCE = 5.0

_UTS = []


def uts_namespaces_supported():
    """Whether `unshare --uts` works here (root with CAP_SYS_ADMIN)."""
    if not _UTS:
        try:
            rc = subprocess.run(["unshare", "--uts", "true"], stdout=subprocess.DEVNULL,
                                stderr=subprocess.DEVNULL, timeout=10).returncode
        except (OSError, subprocess.TimeoutExpired):
            rc = 1
        _UTS.append(rc == 0)
    return _UTS[0]


class ConfigurationTest(E2ETestCase):

    def run_trainlet(self, args, env=None, name="trainlet", timeout=10):
        p = self.start(name, [TRAINLET] + list(args), env=env)
        rc = p.wait(timeout)
        return p, rc

    def assert_fails_at_once(self, args, code, must_name, env=None):
        p, rc = self.run_trainlet(args, env=env)
        self.assertEqual(rc, code, p.describe())
        self.assertLess(p.elapsed(), AT_ONCE, p.describe())
        for text in ([must_name] if isinstance(must_name, str) else must_name):
            self.assertIn(text, p.stderr, p.describe())
        self.assert_no_leftovers()
        return p

    # -- Kubernetes pods without a node count --

    def pod_env(self, **extra):
        return self.base_env(KUBERNETES_SERVICE_HOST="10.96.0.1", **extra)

    def test_jobset_pod_without_nnodes_exits_78_naming_TRAINLET_NNODES(self):
        p = self.assert_fails_at_once(
            ["run", "--", "true"], harness.EXIT_CONFIG,
            ["TRAINLET_NNODES", "--nnodes", "PET_NNODES", "JOB_COMPLETION_INDEX=1"],
            env=self.pod_env(JOB_COMPLETION_INDEX="1"))
        self.assertNotIn("job finished", p.stderr, p.describe())

    def test_kubeflow_pod_without_nnodes_exits_78(self):
        self.assert_fails_at_once(
            ["run", "--", "true"], harness.EXIT_CONFIG, ["TRAINLET_NNODES", "PET_MASTER_ADDR"],
            env=self.pod_env(PET_MASTER_ADDR="t-node-0-0.t", PET_NODE_RANK="0"))

    @unittest.skipUnless(uts_namespaces_supported(), "needs `unshare --uts` (CAP_SYS_ADMIN)")
    def test_jobset_hostname_alone_is_a_job_pod(self):
        # A private UTS namespace gives the agent a JobSet pod's hostname.
        script = 'hostname train-node-0-1 && exec "$@"'
        p = self.start("trainlet", ["unshare", "--uts", "sh", "-c", script, "sh", TRAINLET,
                                    "run", "--", "true"], env=self.pod_env())
        self.assertEqual(p.wait(10), harness.EXIT_CONFIG, p.describe())
        self.assertIn("JobSet hostname train-node-0-1", p.stderr, p.describe())
        self.assertIn("TRAINLET_NNODES", p.stderr, p.describe())

    def test_jobset_pod_with_nnodes_is_not_refused(self):
        # TRAINLET_NNODES=1 (a job of one pod) with index 0: it runs, even if the
        # run itself is the agent's business; only the 78 must be gone.
        p = self.start("trainlet", [TRAINLET, "run", "--health-port=0", "--", "true"],
                       env=self.pod_env(JOB_COMPLETION_INDEX="0", TRAINLET_NNODES="1",
                                        TRAINLET_JOIN_TIMEOUT="3s"))
        rc = p.wait(15)
        self.assertNotEqual(rc, harness.EXIT_CONFIG, p.describe())
        self.assertNotIn("TRAINLET_NNODES", p.stderr, p.describe())

    # -- a node rank with nowhere to go --

    def test_node_rank_1_without_coordinator_exits_64_at_once(self):
        for args in (["--node-rank=1"], ["--nnodes=2", "--node-rank=1"]):
            with self.subTest(args=args):
                self.assert_fails_at_once(["run"] + args + ["--", "true"], harness.EXIT_USAGE,
                                          ["cannot find the coordinator", "--coordinator"])

    def test_node_rank_from_env_without_coordinator(self):
        self.assert_fails_at_once(["run", "--", "true"], harness.EXIT_USAGE,
                                  ["cannot find the coordinator", "TRAINLET_NODE_RANK"],
                                  env=self.base_env(TRAINLET_NNODES="3", TRAINLET_NODE_RANK="2"))

    # -- torchrun spellings --

    def test_torchrun_flags_name_trainlets_equivalent(self):
        # (--rdzv-endpoint, --rdzv-id and --rdzv-backend work: e2e_env.)
        cases = [
            (["--master-addr=head"], "--coordinator"),
            (["--master_addr=head"], "--advertise-addr"),
            (["--rdzv-conf=join_timeout=9"], "--join-timeout"),
            (["--local-addr=10.0.0.1"], "--advertise-addr"),
            # torchrun's per-rank log files: what writes them instead.
            (["--redirects", "3"], "> DIR/rank$RANK.log 2>&1"),
            (["--tee=3"], "exec > >(tee DIR/rank$RANK.log) 2>&1"),
            (["--log-dir=/tmp"], "--prefix-output"),
            (["--monitor-interval=5"], "not needed"),
            (["--start-method=spawn"], "not needed"),
            (["--role=trainer"], "ROLE_NAME"),
            (["--run-path"], "-- python"),
            (["-m"], "-- python -m MODULE"),
            (["--no_python"], "COMMAND as given"),
        ]
        for args, hint in cases:
            with self.subTest(args=args):
                self.assert_fails_at_once(["run"] + args + ["--", "python", "train.py"],
                                          harness.EXIT_USAGE, ["is a torchrun flag", hint])

    def test_an_etcd_rendezvous_backend_is_refused_at_once(self):
        self.assert_fails_at_once(
            ["run", "--rdzv_backend=etcd-v2", "--rdzv_endpoint=etcd:2379", "--", "true"],
            harness.EXIT_USAGE, ["--rdzv-backend: expected c10d or static", "etcd"])

    def test_torchrun_underscore_spellings_parse(self):
        # Shape only: the same flags with underscores are accepted, so the run
        # gets as far as needing a coordinator for node rank 1.
        self.assert_fails_at_once(
            ["run", "--nproc_per_node=2", "--nnodes=2", "--node_rank=1", "--max_restarts=1",
             "--master_port=29600", "--", "true"], harness.EXIT_USAGE,
            "cannot find the coordinator")

    def test_standalone_conflicts_are_usage_errors(self):
        for args, name in ((["--standalone", "--nnodes=2"], "--nnodes=2"),
                           (["--standalone", "--coordinator=h:1"], "--coordinator=h:1")):
            with self.subTest(args=args):
                self.assert_fails_at_once(["run"] + args + ["--", "true"], harness.EXIT_USAGE,
                                          ["--standalone", name])

    def test_command_without_separator_hints_the_separator(self):
        p = self.assert_fails_at_once(["run", "train.py"], harness.EXIT_USAGE,
                                      'unexpected argument "train.py"')
        self.assertIn("-- python train.py", p.stderr, p.describe())

    # -- D11 and hosts --

    def test_pet_master_addr_with_a_port_is_refused_at_once(self):
        self.assert_fails_at_once(["run", "--", "true"], harness.EXIT_USAGE,
                                  ["PET_MASTER_ADDR", "host:1234", "PET_MASTER_PORT"],
                                  env=self.base_env(PET_NNODES="2", PET_NODE_RANK="1",
                                                    PET_MASTER_ADDR="host:1234"))

    def test_host_with_a_space_is_refused(self):
        self.assert_fails_at_once(["run", "--nnodes=2", "--coordinator=a b:29400", "--", "true"],
                                  harness.EXIT_USAGE, "--coordinator")
        self.assert_fails_at_once(["run", "--advertise-addr=head!", "--", "true"],
                                  harness.EXIT_USAGE, "--advertise-addr")

    # -- D5: tokens --

    def test_whitespace_only_token_file_exits_78(self):
        token = self.path("token")
        with open(token, "w") as f:
            f.write("  \n\t\n")
        for sub in (["run", "--token-file=" + token, "--", "true"],
                    ["coordinator", "--token-file=" + token]):
            with self.subTest(sub=sub[0]):
                self.assert_fails_at_once(sub, harness.EXIT_CONFIG, [token, "empty"])

    # -- help --

    def test_top_level_help_lists_every_exit_code(self):
        p, rc = self.run_trainlet(["--help"])
        self.assertEqual(rc, 0, p.describe())
        codes = set(re.findall(r"^\s+(\d+(?:\+N)?)\b", p.stdout, re.MULTILINE))
        for code in ("0", "64", "69", "70", "71", "75", "77", "78", "79", "80", "81", "126",
                     "127", "128+N"):
            self.assertIn(code, codes, p.stdout)
        self.assertIn("1-63, 83-125", p.stdout)  # 80-82 are trainlet's (docs/exit-codes.md)

    def test_coordinator_help_does_not_mention_kubernetes(self):
        p, rc = self.run_trainlet(["coordinator", "--help"])
        self.assertEqual(rc, 0, p.describe())
        self.assertNotIn("Kubernetes", p.stdout)
        self.assertNotIn("PET_", p.stdout)

    def test_run_help_shows_the_new_defaults(self):
        p, rc = self.run_trainlet(["run", "--help"])
        self.assertEqual(rc, 0, p.describe())
        self.assertIn("default: the visible GPUs, or 1 without any", p.stdout)
        self.assertIn("--bind-addr=ADDR", p.stdout)
        self.assertIn("--standalone", p.stdout)


def listening_sockets(pid):
    """(address, port) of every TCP socket in LISTEN state that process `pid` holds."""
    inodes = set()
    fd_dir = "/proc/%d/fd" % pid
    for fd in os.listdir(fd_dir):
        try:
            target = os.readlink(os.path.join(fd_dir, fd))
        except OSError:
            continue
        m = re.match(r"socket:\[(\d+)\]", target)
        if m:
            inodes.add(m.group(1))
    found = []
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        try:
            with open("/proc/%d/net/%s" % (pid, table)) as f:
                lines = f.read().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state != "0A" or inode not in inodes:  # 0A: TCP_LISTEN
                continue
            hex_addr, hex_port = local.split(":")
            raw = bytes.fromhex(hex_addr)
            # /proc prints each 32-bit word in host (little-endian) order.
            raw = b"".join(raw[i:i + 4][::-1] for i in range(0, len(raw), 4))
            found.append((socket.inet_ntop(family, raw), int(hex_port, 16)))
    return found


class DefaultsTest(E2ETestCase):
    """Needs the agent runtime to honour RunConfig's defaults (free ports,
    bind address, host-if-port-free)."""

    def unconfigured(self, command, name):
        # Nothing configured: no flags, no TRAINLET_*/PET_* (base_env drops them).
        return self.start_agent([], command, name=name)

    def test_one_worker_by_default_without_gpu(self):
        if any(re.fullmatch(r"nvidia\d+", d) for d in os.listdir("/dev")):
            self.skipTest("this machine has GPUs")
        agent = self.unconfigured(["sh", "-c", 'echo "world=$WORLD_SIZE"'], "agent")
        self.assertEqual(agent.wait(20), 0, agent.describe())
        self.assertEqual(agent.stdout.split(), ["world=1"], agent.describe())
        self.assert_no_leftovers()

    def test_local_coordinator_with_nnodes_1_is_hosted_promptly(self):
        for host in ("localhost", "127.0.0.1"):
            with self.subTest(host=host):
                port = harness.free_port()
                agent = self.start_agent(["--nnodes=1", "--coordinator=%s:%d" % (host, port)],
                                         ["true"], name="agent-" + host)
                self.assertEqual(agent.wait(15), 0, agent.describe())
                self.assertLess(agent.elapsed(), 10, agent.describe())
        self.assert_no_leftovers()

    def test_local_coordinator_without_rank_whoever_binds_the_port_hosts_it(self):
        port = harness.free_port()
        agents = [self.start_agent(["--nnodes=2", "--coordinator=127.0.0.1:%d" % port,
                                    "--node-id=a%d" % i, "--nproc-per-node=1",
                                    "--master-port=%d" % harness.free_port()],
                                   ["sh", "-c", 'echo "rank=$RANK of $WORLD_SIZE"'],
                                   name="agent%d" % i)
                  for i in range(2)]
        self.assert_codes(agents, [0, 0], 20)
        self.assertEqual(sorted(a.stdout.strip() for a in agents),
                         ["rank=0 of 2", "rank=1 of 2"], self.describe_all())
        self.assert_no_leftovers()

    def test_two_unconfigured_runs_side_by_side(self):
        command = ["sh", "-c", 'sleep 1; echo "ok port=$MASTER_PORT"']
        agents = [self.unconfigured(command, "run%d" % i) for i in range(2)]
        self.assert_codes(agents, [0, 0], 25)
        ports = [a.stdout.strip() for a in agents]
        for p in ports:
            self.assertRegex(p, r"^ok port=[1-9]\d*$", self.describe_all())
        self.assertNotEqual(ports[0], ports[1], self.describe_all())
        self.assert_no_leftovers()

    def test_unconfigured_run_listens_on_nothing(self):
        # A single-node run's coordinator runs inside the agent (no server):
        # nothing to reach from the network, not even on loopback.
        started = self.path("started")
        agent = self.unconfigured(["sh", "-c", 'touch "%s"; exec sleep 30' % started], "agent")
        try:
            harness.poll_until(lambda: os.path.exists(started) or not agent.running(), 20,
                               what="the worker to start")
        except AssertionError as e:
            raise AssertionError("%s\n%s" % (e, agent.describe())) from None
        self.assertTrue(agent.running(), agent.describe())
        self.assertEqual(listening_sockets(agent.pid), [],
                         "a single-node run listens\n" + agent.describe())
        agent.signal(15)
        agent.wait(40)
        self.assert_no_leftovers()

    def test_standalone_runs_a_trivial_command(self):
        agent = self.start_agent(["--standalone", "--nproc_per_node=2"],
                                 ["sh", "-c", 'echo "rank=$RANK of $WORLD_SIZE"'], name="agent")
        self.assertEqual(agent.wait(20), 0, agent.describe())
        self.assertEqual(sorted(agent.stdout.splitlines()), ["rank=0 of 2", "rank=1 of 2"],
                         agent.describe())
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
