"""End-to-end: the release binary (TRAINLET_STATIC, the default build).

`trainlet version` names its linkage and protocol; a static trainlet resolves
the coordinator's name with c-ares even where nsswitch.conf names modules a
static glibc cannot load (many training images list mdns, systemd, sss...):
glibc's own resolver would be asked to load them. The agent runs in a private
mount namespace with its own nsswitch.conf and /etc/hosts."""

import json
import os
import re
import shutil
import subprocess
import unittest

import harness
import topology_fixture
from harness import E2ETestCase

NAME = "coordinator.trainlet-static-e2e.invalid"
TESTDATA = os.path.join(os.path.dirname(harness.HERE), "topology", "testdata")
# Modules no Debian 12 root has, in front of the ones static glibc has built
# in: each lookup first asks for libnss_<module>.so.2.
NSSWITCH = ("passwd: trainletabsent files\n"
            "group: trainletabsent files\n"
            "hosts: mdns4_minimal [NOTFOUND=return] trainletabsent files dns\n")


def version_fields():
    out = subprocess.run([harness.TRAINLET, "version"], stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, timeout=10)
    fields = {}
    for line in out.stdout.splitlines()[1:]:
        key, _, value = line.partition(": ")
        fields[key] = value
    return out, fields


def is_static_build():
    return version_fields()[1].get("linkage") == "static"


def mount_namespaces_supported():
    try:
        return subprocess.run(["unshare", "--mount", "true"], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


class VersionTest(E2ETestCase):

    def test_version_names_commit_build_linkage_and_protocol(self):
        out, fields = version_fields()
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertRegex(out.stdout.splitlines()[0], r"^trainlet \d+\.\d+\.\d+$")
        self.assertRegex(fields.get("git commit", ""), r"^([0-9a-f]{7,40}|unknown)$")
        self.assertTrue(fields.get("build type"), out.stdout)
        self.assertIn(fields.get("linkage"), ("static", "dynamic"), out.stdout)
        self.assertRegex(fields.get("protocol version", ""), r"^[1-9]\d*$")


@unittest.skipUnless(is_static_build(), "TRAINLET_BIN is not a static build")
@unittest.skipUnless(mount_namespaces_supported(), "needs `unshare --mount` (root)")
class StaticResolverTest(E2ETestCase):

    def test_joins_by_name_when_nsswitch_names_modules_static_glibc_lacks(self):
        port, master_port = harness.free_ports(2)
        hosts = self.path("hosts")
        with open(hosts, "w") as f:
            f.write("127.0.0.1 localhost\n127.0.0.1 %s\n" % NAME)
        nsswitch = self.path("nsswitch.conf")
        with open(nsswitch, "w") as f:
            f.write(NSSWITCH)
        common = ["--nnodes=2", "--health-port=0", "--nproc-per-node=1",
                  "--master-port=%d" % master_port, "--job-id=static-dns", "--join-timeout=30s"]
        node0 = self.start_agent(
            common + ["--node-rank=0", "--node-id=n0", "--coordinator=127.0.0.1:%d" % port],
            ["true"], name="node0")
        # A user's GRPC_DNS_RESOLVER=native would send gRPC to glibc: the
        # static build says it ignores it.
        env = self.base_env(GRPC_DNS_RESOLVER="native")
        node1 = self.start_agent(
            common + ["--node-rank=1", "--node-id=n1", "--coordinator=%s:%d" % (NAME, port)],
            ["true"], name="node1", env=env,
            prefix=["unshare", "--mount", "sh", "-c",
                    'mount --bind "$0" /etc/hosts && mount --bind "$1" /etc/nsswitch.conf '
                    '&& shift && exec "$@"', hosts, nsswitch])
        self.assert_codes([node0, node1], [0, 0], timeout=60)
        self.assertIn("ignoring GRPC_DNS_RESOLVER=native", node1.stderr, node1.describe())
        self.assertTrue(re.search(r"joining job static-dns at %s:%d" % (re.escape(NAME), port),
                                  node1.stderr), node1.describe())


@unittest.skipUnless(is_static_build(), "TRAINLET_BIN is not a static build")
class StaticNvmlTest(E2ETestCase):
    """A static trainlet never dlopens NVML or NCCL (static glibc would crash
    in the loaded library): it reads NVML through the NVML reader it carries,
    run by this machine's dynamic loader (docs/topology.md, "NVML in the
    static build"), and says why NCCL's version is unknown. The Debian 11, 12
    and 13 roots: e2e_nvml_roots."""

    def fake(self):
        return os.environ.get("E2E_FAKE_NVML") or os.path.join(
            os.path.dirname(harness.TRAINLET), "topology", "fake_nvml", "libnvidia-ml.so.1")

    def test_probe_reads_nvml_through_the_reader(self):
        fixture = os.path.join(TESTDATA, "nvml_unhealthy.json")
        p = self.start("probe", [harness.TRAINLET, "probe", "--nvml-library=" + self.fake(),
                                 "--nccl-library=" + self.fake(), "--format=json"],
                       env=self.base_env(FAKE_NVML_FIXTURE=fixture))
        self.assertEqual(p.wait(30), 0, p.describe())
        probe = json.loads(p.stdout)
        self.assertEqual(probe["nvml"]["status"], "OK", p.stdout)
        self.assertEqual(probe["nvml"]["version"], "550.54.15")
        self.assertEqual(probe["cuda_driver_version"], "12040")
        gpus = probe["gpus"]
        self.assertEqual([g["source"] for g in gpus], ["nvml"] * 4, p.stdout)
        self.assertTrue(gpus[1]["health"]["remap_pending"], gpus[1])
        self.assertEqual(gpus[1]["health"]["ecc_dbe_volatile"], "1")
        self.assertTrue(gpus[2]["health"]["retired_pages_pending"], gpus[2])
        self.assertEqual(gpus[3]["health"]["processes"][0],
                         {"pid": 4242, "used_memory_bytes": str(20 << 30)})
        self.assertIn("static build", probe["nccl"]["reason"], p.stdout)

    def test_a_hung_driver_costs_the_reader_its_timeout_not_the_probe(self):
        fixture = os.path.join(TESTDATA, "nvml_hang.json")
        p = self.start("probe", [harness.TRAINLET, "probe", "--nvml-library=" + self.fake(),
                                 "--nccl-library=none", "--format=json", "--timeout=60s"],
                       env=self.base_env(FAKE_NVML_FIXTURE=fixture))
        self.assertEqual(p.wait(60), 0, p.describe())
        probe = json.loads(p.stdout)
        self.assertEqual(probe["nvml"]["status"], "ERROR", p.stdout)
        self.assertIn("did not answer within 5s and was killed", probe["nvml"]["reason"])
        # The killed reader is gone (it carries the test's tag in its
        # environment): nothing of the probe outlives it.
        self.assert_no_leftovers(timeout=1.0)


@unittest.skipUnless(is_static_build(), "TRAINLET_BIN is not a static build")
class StaticGpuPlacementTest(E2ETestCase):
    """Without NVML, a static trainlet takes the container's GPUs from the
    NVIDIA driver's procfs (/proc/driver/nvidia/gpus, which the container
    toolkit narrows to the pod's GPUs) and places workers on them. The node is
    a fixture: TRAINLET_PROBE_ROOT stands in for /, with sysfs for two GPUs
    on two NUMA nodes and the driver's procfs and device nodes for the GPUs
    the container was given."""

    def fixture(self, gpus):
        cpus = sorted(os.sched_getaffinity(0))
        if len(cpus) < 2:
            self.skipTest("needs 2 CPUs, has %s" % cpus)
        root = self.path("root")
        topology_fixture.two_gpu_node(root, cpus=(str(cpus[0]), str(cpus[1])))
        topology_fixture.driver_procfs(root, gpus)
        return root, cpus

    def run_job(self, root, *flags, **env):
        env = self.base_env(TRAINLET_PROBE_ROOT=root, **env)
        worker = [harness.PY, harness.worker("topology_env.py")]
        agent = self.start_agent(["--standalone"] + list(flags), worker, env=env)
        self.assertEqual(agent.wait(60), 0, agent.describe())
        records = {}
        for f in os.listdir(self.path("topo")):
            with open(self.path("topo", f)) as fh:
                r = json.load(fh)
            records[int(r["env"]["LOCAL_RANK"])] = r
        return agent, records

    def test_probe_lists_the_containers_gpus_from_the_drivers_procfs(self):
        root, _ = self.fixture(gpus=(1,))
        p = self.start("probe", [harness.TRAINLET, "probe", "--probe-root=" + root,
                                 "--format=json"])
        self.assertEqual(p.wait(30), 0, p.describe())
        probe = json.loads(p.stdout)
        # No libnvidia-ml.so.1 on this machine: the reader says so.
        self.assertEqual(probe["nvml"]["status"], "ABSENT", p.stdout)
        self.assertIn("dlopen libnvidia-ml.so.1", probe["nvml"]["reason"])
        self.assertEqual(probe["nvidia_procfs"]["status"], "OK", p.stdout)
        self.assertEqual(probe["nvidia_procfs"]["version"], topology_fixture.DRIVER_VERSION)
        gpus = probe["gpus"]
        self.assertEqual([g["pci_bus_id"] for g in gpus], [topology_fixture.GPU_BUS_IDS[1]])
        self.assertEqual(gpus[0]["uuid"], topology_fixture.GPU_UUIDS[1])
        self.assertEqual(gpus[0]["source"], "procfs+sysfs")
        self.assertEqual(gpus[0]["numa_node"], 1)
        self.assertEqual(probe["visible_gpu_count"], 1)
        self.assertIn("1 more NVIDIA GPUs on the node", probe["visibility_note"])

    def test_one_worker_per_gpu_with_cuda_visible_devices_and_numa(self):
        root, cpus = self.fixture(gpus=(0, 1))
        agent, records = self.run_job(root)
        self.assertEqual(sorted(records), [0, 1], "one worker per GPU by default")
        for r in records.values():
            self.assertEqual(r["env"]["CUDA_VISIBLE_DEVICES"], "0,1")
            self.assertEqual(r["env"]["CUDA_DEVICE_ORDER"], "PCI_BUS_ID")
        self.assertIn("node probe: 2 GPUs visible, NVIDIA H100 80GB HBM3", agent.stderr)
        self.assertIn("GPUs from the NVIDIA driver's procfs, driver 550.54.15", agent.stderr)
        self.assert_no_leftovers()
        # --gpu-binding=single names each worker's GPU by UUID, and
        # --bind-numa pins it to that GPU's NUMA node's CPUs.
        shutil.rmtree(self.path("topo"))
        _, records = self.run_job(root, "--bind-numa", "--gpu-binding=single")
        for rank in (0, 1):
            self.assertEqual(records[rank]["env"]["CUDA_VISIBLE_DEVICES"],
                             topology_fixture.GPU_UUIDS[rank])
            self.assertEqual(records[rank]["cpus"], str(cpus[rank]))
        self.assert_no_leftovers()

    def test_the_container_toolkits_narrowed_view_and_cuda_visible_devices(self):
        # The pod was given GPU 1 only: one worker, on it.
        root, cpus = self.fixture(gpus=(1,))
        _, records = self.run_job(root, "--bind-numa")
        self.assertEqual(sorted(records), [0])
        self.assertEqual(records[0]["env"]["CUDA_VISIBLE_DEVICES"], "0")
        self.assertEqual(records[0]["cpus"], str(cpus[1]), "GPU 1's NUMA node")
        # Both GPUs, but the user's CUDA_VISIBLE_DEVICES picks GPU 1 by UUID.
        shutil.rmtree(self.path("topo"))
        topology_fixture.driver_procfs(root, (0, 1))
        _, records = self.run_job(root, "--bind-numa",
                                  CUDA_VISIBLE_DEVICES=topology_fixture.GPU_UUIDS[1])
        self.assertEqual(sorted(records), [0])
        self.assertEqual(records[0]["env"]["CUDA_VISIBLE_DEVICES"],
                         topology_fixture.GPU_UUIDS[1], "the user's value is kept")
        self.assertEqual(records[0]["cpus"], str(cpus[1]))
        self.assert_no_leftovers()


@unittest.skipUnless(shutil.which("strace"), "needs strace")
class SingleNodeNoNetworkTest(E2ETestCase):
    """A single-node run (nothing configured) runs its coordinator inside the
    agent: no gRPC server or client, no IP or Unix socket at all. (The node
    probe's NIC listing and the MASTER_PORT pick, a sock_diag dump of the
    listening TCP sockets, read the kernel over netlink, which is not a
    network socket.)"""

    def run_traced(self, args, command):
        trace = self.path("strace.txt")
        p = self.start("traced", ["strace", "-f", "-qq", "-e", "trace=socket,socketpair,bind,"
                                  "connect,listen", "-o", trace, harness.TRAINLET, "run"] +
                       args + ["--"] + command)
        rc = p.wait(60)
        with open(trace) as f:
            return rc, p, f.read()

    def test_single_node_run_opens_no_socket_and_passes_the_exit_code(self):
        rc, p, trace = self.run_traced(["--nproc-per-node=2"], ["sh", "-c", "exit 3"])
        self.assertEqual(rc, 3, p.describe())
        calls = [line for line in trace.splitlines()
                 if re.search(r"\b(socket|socketpair|bind|connect|listen)\(", line)]
        network = [line for line in calls if "AF_NETLINK" not in line
                   and not re.search(r"\bbind\(\d+, \{sa_family=AF_NETLINK", line)]
        self.assertEqual(network, [], "a single-node run opened sockets:\n%s\n%s" %
                         ("\n".join(network), p.describe()))
        self.assertIn("running it inside this agent (no network)", p.stderr, p.describe())

    def test_a_configured_coordinator_still_uses_the_network(self):
        # The contrast that shows the trace sees sockets: the same run with a
        # coordinator address hosts a real gRPC coordinator.
        port, master_port = harness.free_ports(2)
        rc, p, trace = self.run_traced(["--nnodes=1", "--coordinator=127.0.0.1:%d" % port,
                                    "--master-port=%d" % master_port, "--health-port=0"],
                                   ["true"])
        self.assertEqual(rc, 0, p.describe())
        self.assertRegex(trace, r"socket\(AF_INET6?, SOCK_STREAM", p.describe())


@unittest.skipUnless(shutil.which("strace"), "needs strace")
@unittest.skipIf(any(n.startswith("nvidia") for n in os.listdir("/dev")),
                 "this machine has NVIDIA devices: its probe is waited for")
class SingleNodeProbeLaterTest(E2ETestCase):
    """In a single-node run on a node without GPUs the node probe's answer
    changes no worker's environment, so it starts only once the workers run
    and the agent first idles: it never delays their start or competes with
    it for a CPU, and a job that ends at once never probes. Its NIC listing
    (an RTM_GETLINK dump on a NETLINK_ROUTE socket) marks it in the trace."""

    def run_traced(self, command):
        trace = self.path("strace-%d.txt" % len(self.procs))
        p = self.start("traced", ["strace", "-f", "-qq", "-e", "trace=execve,socket", "-o", trace,
                                  harness.TRAINLET, "run", "--"] + command)
        rc = p.wait(60)
        with open(trace) as f:
            return rc, p, f.read().splitlines()

    def test_a_job_that_ends_at_once_never_probes(self):
        rc, p, trace = self.run_traced(["true"])
        self.assertEqual(rc, 0, p.describe())
        self.assertEqual([line for line in trace if "NETLINK_ROUTE" in line], [],
                         "\n".join(trace))
        self.assertNotIn("node probe:", p.stderr, p.describe())

    def test_the_probe_starts_after_the_worker_and_is_logged(self):
        rc, p, trace = self.run_traced(["sleep", "2"])
        self.assertEqual(rc, 0, p.describe())
        worker = [i for i, line in enumerate(trace) if re.search(r'execve\("[^"]*/sleep"', line)]
        probe = [i for i, line in enumerate(trace) if "NETLINK_ROUTE" in line]
        self.assertTrue(worker and probe, "\n".join(trace))
        self.assertGreater(probe[0], worker[0], "\n".join(trace))
        log = p.stderr
        self.assertIn("node probe: ", log, p.describe())
        self.assertGreater(log.index("node probe: "), log.index("started worker"), p.describe())


if __name__ == "__main__":
    unittest.main()
