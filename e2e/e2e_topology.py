"""The node probe end to end (issue 9): `trainlet probe` on this machine and on
a sysfs fixture with the fake NVML, the agent's GPU/NUMA placement of real
worker processes, and NCCL_HOSTID for pods that share a machine, across
network-namespace hosts.

The fake libnvidia-ml.so.1 is built with the tests (topology/nvml.cmake) next
to the trainlet binary's build tree; the sysfs fixture is written by
topology_fixture.py. Nothing here needs a GPU.
"""

import glob
import json
import os
import subprocess
import unittest

import harness
import topology_fixture
from harness import E2ETestCase, PY, TRAINLET

BUILD = os.path.dirname(TRAINLET)
# Set by ctest; by hand, the build tree next to TRAINLET_BIN.
FAKE_NVML = os.environ.get("E2E_FAKE_NVML") or os.path.join(
    BUILD, "topology", "fake_nvml", "libnvidia-ml.so.1")
TOPO_ENV = [PY, harness.worker("topology_env.py")]
BOOT_ID = "/proc/sys/kernel/random/boot_id"
# The release build links trainlet fully static: it loads no NCCL (NVML it reads
# through its NVML reader).
STATIC = "linkage: static" in subprocess.run([TRAINLET, "version"], stdout=subprocess.PIPE,
                                             text=True, timeout=10).stdout
# The tests with the fake NVML hold for both builds: a dynamic trainlet
# reads it in-process, a static one through its NVML reader
# (docs/topology.md, "NVML in the static build").


def read_boot_id():
    with open(BOOT_ID) as f:
        return f.read().strip()


def allowed_cpus():
    return sorted(os.sched_getaffinity(0))


class ProbeCommandTest(E2ETestCase):

    def probe(self, *args, env=None):
        return subprocess.run([TRAINLET, "probe"] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True, timeout=30,
                              env=env if env is not None else self.base_env())

    def fixture(self):
        sysfs = topology_fixture.two_gpu_node(self.path("root"))
        nvml = topology_fixture.nvml_json(self.path("nvml.json"))
        return sysfs, nvml

    def test_this_machine_probes_cleanly_without_a_gpu(self):
        r = self.probe()
        self.assertEqual(r.returncode, 0, r.stderr)
        p = json.loads(r.stdout)
        self.assertEqual(p["boot_id"], read_boot_id())
        self.assertEqual(p["ipc_namespace"], os.readlink("/proc/self/ns/ipc"))
        self.assertGreaterEqual(len(p["numa_nodes"]), 1)
        self.assertEqual(p["sysfs"]["status"], "OK")
        if not os.path.exists("/dev/nvidiactl"):
            self.assertIn(p["nvml"]["status"], ("ABSENT", "ERROR"), p["nvml"])
            self.assertEqual(p["visible_gpu_count"], 0)
        # The real libnccl.so.2 where this machine has one (Debian has none;
        # this machine carries NCCL 2.28.9 under /usr/local/cuda).
        has_nccl = "libnccl.so.2" in subprocess.run(["ldconfig", "-p"], stdout=subprocess.PIPE,
                                                    text=True).stdout
        if STATIC:
            # A static trainlet never dlopens (docs/topology.md, "Static build").
            self.assertEqual(p["nccl"]["status"], "ABSENT", p["nccl"])
            self.assertIn("static build", p["nccl"]["reason"])
        elif has_nccl:
            self.assertEqual(p["nccl"]["status"], "OK", p["nccl"])
            self.assertRegex(p["nccl"]["version"], r"^2\.\d+\.\d+$")
        else:
            self.assertEqual(p["nccl"]["status"], "ABSENT", p["nccl"])
        xml = self.probe("--format=nccl-topo")
        self.assertEqual(xml.returncode, 0, xml.stderr)
        self.assertTrue(xml.stdout.startswith('<system version="1">'), xml.stdout[:200])
        self.assertNotIn("\t", xml.stdout)
        env = self.probe("--format=env")
        self.assertEqual(env.returncode, 0, env.stderr)
        for line in env.stdout.splitlines():
            self.assertTrue(line.startswith(("export ", "# ")), line)

    def test_fixture_with_fake_nvml_json_topology_and_env(self):
        if not os.path.exists(FAKE_NVML):
            self.skipTest("the fake NVML is built with the tests: %s" % FAKE_NVML)
        sysfs, nvml = self.fixture()
        env = self.base_env(FAKE_NVML_FIXTURE=nvml)
        args = ["--sysfs-root=" + sysfs, "--nvml-library=" + FAKE_NVML, "--nccl-library=none"]
        r = self.probe(*args, env=env)
        self.assertEqual(r.returncode, 0, r.stderr)
        p = json.loads(r.stdout)
        self.assertEqual(p["nvml"]["status"], "OK", p["nvml"])
        self.assertEqual(p["nccl"]["status"], "SKIPPED")
        self.assertEqual(p["visible_gpu_count"], 2)
        gpus = p["gpus"]
        self.assertEqual([g["pci_bus_id"] for g in gpus], topology_fixture.GPU_BUS_IDS)
        self.assertEqual([g["uuid"] for g in gpus], topology_fixture.GPU_UUIDS)
        self.assertEqual([g["numa_node"] for g in gpus], [0, 1])
        self.assertEqual([g["sm"] for g in gpus], [90, 90])
        self.assertTrue(all(g["visible"] for g in gpus))
        nics = {n["name"]: n for n in p["nics"]}
        self.assertEqual(nics["mlx5_0"]["pci_bus_id"], "0000:19:00.0")
        self.assertEqual(nics["mlx5_0"]["ports"][0]["state"], "ACTIVE")
        # CUDA_VISIBLE_DEVICES narrows the visible set, by UUID too.
        narrowed = self.probe(*args, env=dict(env, CUDA_VISIBLE_DEVICES=topology_fixture.GPU_UUIDS[1]))
        self.assertEqual(json.loads(narrowed.stdout)["visible_gpu_count"], 1, narrowed.stdout)
        xml = self.probe("--format=nccl-topo", *args, env=env)
        self.assertEqual(xml.returncode, 0, xml.stderr)
        for bus in topology_fixture.GPU_BUS_IDS + ["0000:19:00.0"]:
            self.assertIn('busid="%s"' % bus, xml.stdout)
        self.assertFalse(xml.stdout.startswith("<?xml"))
        advice = self.probe("--format=env", *args, env=env)
        self.assertEqual(advice.returncode, 0, advice.stderr)
        self.assertIn("export NCCL_IB_HCA='=mlx5_0:1'", advice.stdout)
        self.assertIn("export CUDA_DEVICE_ORDER='PCI_BUS_ID'", advice.stdout)
        # What the user set is never advised.
        mine = self.probe("--format=env", *args, env=dict(env, NCCL_IB_HCA="mlx5_1"))
        self.assertNotIn("export NCCL_IB_HCA", mine.stdout)

    def test_bad_input_is_a_usage_error_and_a_missing_library_is_data(self):
        r = self.probe("--format=xml")
        self.assertEqual(r.returncode, harness.EXIT_USAGE)
        self.assertIn("--format", r.stderr)
        r = self.probe("--timeout=soon")
        self.assertEqual(r.returncode, harness.EXIT_USAGE)
        self.assertIn("--timeout", r.stderr)
        r = self.probe("--nvml-library=/nonexistent/libnvidia-ml.so.1",
                       "--nccl-library=/nonexistent/libnccl.so.2")
        self.assertEqual(r.returncode, 0, r.stderr)
        p = json.loads(r.stdout)
        self.assertEqual(p["nvml"]["status"], "ABSENT")
        self.assertEqual(p["nccl"]["status"], "ABSENT")
        r = self.probe("--sysfs-root=" + self.path("no-such-dir"))
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(json.loads(r.stdout)["gpus"], [])


class HungDriverTest(E2ETestCase):
    """A driver whose nvmlInit never returns: the probe is bounded, the agent
    goes on without it, and no process is left behind."""

    def setUp(self):
        super().setUp()
        if not os.path.exists(FAKE_NVML):
            self.skipTest("the fake NVML is built with the tests: %s" % FAKE_NVML)
        self.fixture = self.path("hung.json")
        with open(self.fixture, "w") as f:
            json.dump({"hangInit": True, "devices": []}, f)

    def test_probe_command_gives_up_with_69(self):
        env = self.base_env(FAKE_NVML_FIXTURE=self.fixture)
        p = self.start("probe", [TRAINLET, "probe", "--timeout=300ms",
                                 "--nvml-library=" + FAKE_NVML, "--nccl-library=none"], env=env)
        self.assertEqual(p.wait(10), harness.EXIT_UNAVAILABLE, p.describe())
        self.assertLess(p.elapsed(), 5.0)
        self.assertIn("did not finish within 300ms", p.stderr)
        self.assert_no_leftovers()

    def test_agent_goes_on_without_the_probe(self):
        env = self.base_env(FAKE_NVML_FIXTURE=self.fixture, TRAINLET_NVML_LIBRARY=FAKE_NVML)
        agent = self.start_agent(["--standalone", "--probe-timeout=300ms"], ["true"], env=env)
        self.assertEqual(agent.wait(20), 0, agent.describe())
        self.assertIn("node probe: did not finish within 300ms", agent.stderr)
        self.assertIn("going on without it", agent.stderr)
        self.assert_no_leftovers()


class PlacementTest(E2ETestCase):

    def run_fixture_job(self, *flags):
        if not os.path.exists(FAKE_NVML):
            self.skipTest("the fake NVML is built with the tests: %s" % FAKE_NVML)
        cpus = allowed_cpus()
        if len(cpus) < 2:
            self.skipTest("needs 2 CPUs, has %s" % cpus)
        sysfs = topology_fixture.two_gpu_node(self.path("root"),
                                              cpus=(str(cpus[0]), str(cpus[1])))
        nvml = topology_fixture.nvml_json(self.path("nvml.json"))
        env = self.base_env(TRAINLET_SYSFS_ROOT=sysfs, TRAINLET_NVML_LIBRARY=FAKE_NVML,
                            FAKE_NVML_FIXTURE=nvml)
        agent = self.start_agent(["--standalone"] + list(flags), TOPO_ENV, env=env)
        self.assertEqual(agent.wait(60), 0, agent.describe())
        records = {}
        for f in glob.glob(self.path("topo", "*.json")):
            with open(f) as fh:
                r = json.load(fh)
            records[int(r["env"]["LOCAL_RANK"])] = r
        return agent, cpus, records

    def test_one_worker_per_gpu_sees_every_gpu_in_pci_order(self):
        agent, _, records = self.run_fixture_job()
        self.assertEqual(sorted(records), [0, 1], "one worker per GPU by default")
        for r in records.values():
            self.assertEqual(r["env"]["CUDA_VISIBLE_DEVICES"], "0,1")
            self.assertEqual(r["env"]["CUDA_DEVICE_ORDER"], "PCI_BUS_ID")
            self.assertEqual(r["policy"], "default", "no binding without --bind-numa")
        self.assertIn("node probe: 2 GPUs visible", agent.stderr)
        self.assert_no_leftovers()

    def test_bind_numa_and_single_gpu_binding(self):
        _, cpus, records = self.run_fixture_job("--bind-numa", "--gpu-binding=single")
        self.assertEqual(sorted(records), [0, 1])
        for rank in (0, 1):
            r = records[rank]
            self.assertEqual(r["env"]["CUDA_VISIBLE_DEVICES"], topology_fixture.GPU_UUIDS[rank])
            self.assertEqual(r["cpus"], str(cpus[rank]), "bound to its GPU's NUMA node's CPUs")
        # The memory policy follows where the kernel has the node (this
        # machine has node 0 only; node 1's preference is refused by the
        # kernel, which the agent treats as best effort).
        self.assertEqual(records[0]["policy"], "prefer:0")
        self.assert_no_leftovers()


class NodeHealthTest(E2ETestCase):
    """A node whose GPU health is fatal leaves an elastic job with 81
    (docs/progress.md); a static job, which has no other node, runs."""

    def run_agent(self, *flags):
        if not os.path.exists(FAKE_NVML):
            self.skipTest("the fake NVML is built with the tests: %s" % FAKE_NVML)
        sysfs = topology_fixture.two_gpu_node(self.path("root"))
        nvml = topology_fixture.nvml_json(self.path("nvml.json"))
        with open(nvml) as f:
            fixture = json.load(f)
        # GPU 1: two uncorrectable ECC errors since the driver loaded.
        fixture["devices"][1]["ecc"] = {"current": True, "pending": True, "sbeVolatile": 5,
                                        "dbeVolatile": 2}
        with open(nvml, "w") as f:
            json.dump(fixture, f)
        env = self.base_env(TRAINLET_SYSFS_ROOT=sysfs, TRAINLET_NVML_LIBRARY=FAKE_NVML,
                            FAKE_NVML_FIXTURE=nvml)
        agent = self.start_agent(["--standalone", "--nproc-per-node=1"] + list(flags),
                                 ["sh", "-c", "touch \"$E2E_DIR/ran\""], env=env)
        agent.wait(60)
        return agent

    def test_elastic_agent_exits_81_before_joining(self):
        agent = self.run_agent("--max-restarts=2")
        self.assertEqual(agent.popen.returncode, 81, agent.describe())
        self.assertRegex(agent.stderr, r"GPU health: GPU 1 \(0000:[0-9a-f:.]+\): 2 uncorrectable "
                                       r"ECC error\(s\) since the driver loaded")
        self.assertIn("exiting with code 81", agent.stderr)
        self.assertFalse(os.path.exists(self.path("ran")), "no worker started")
        self.assert_no_leftovers()

    def test_static_job_runs_anyway(self):
        agent = self.run_agent()
        self.assertEqual(agent.popen.returncode, 0, agent.describe())
        self.assertTrue(os.path.exists(self.path("ran")))
        self.assert_no_leftovers()


class ColocationTest(E2ETestCase):

    def test_pods_on_one_machine_get_one_nccl_hostid(self):
        # Four pod-like hosts on this one kernel: h0 and h1 share its boot id
        # and IPC namespace (NCCL_HOSTID = the boot id); h2 sees another boot
        # id (another machine: none); h3 shares the boot id but has its own IPC
        # namespace (co-located, but NCCL could not use SHM/P2P: none). Each
        # sees two GPUs (NCCL advice is for jobs with GPUs): a fixture root
        # whose proc/sys and proc/self are this machine's, so the boot id
        # and IPC namespace are still each host's own.
        root = self.path("gpu-root")
        topology_fixture.two_gpu_node(root)
        topology_fixture.driver_procfs(root)
        for name in ("sys", "self"):
            os.symlink("/proc/" + name, os.path.join(root, "proc", name))
        names = ["co-0", "co-1", "co-2", "co-3"]
        cluster = self.netns_cluster(names)
        other_boot = self.path("other-boot-id")
        with open(other_boot, "w") as f:
            f.write("11111111-2222-3333-4444-555555555555\n")
        wrappers = {
            2: ["unshare", "--mount", "sh", "-c",
                'mount --bind "$0" %s && exec "$@"' % BOOT_ID, other_boot],
            3: ["unshare", "--ipc"],
        }
        agents = []
        for i, h in enumerate(cluster.hosts):
            args = ["--nnodes=4", "--node-rank=%d" % i, "--node-id=%s" % h.name,
                    "--coordinator=%s:29400" % names[0], "--nproc-per-node=1",
                    "--job-id=coloc", "--join-timeout=60s"]
            argv = wrappers.get(i, []) + [TRAINLET, "run"] + args + ["--"] + TOPO_ENV
            agents.append(cluster.start(h, h.name, argv,
                                        env=self.base_env(TRAINLET_PROBE_ROOT=root)))
        self.assert_codes(agents, [0] * 4, timeout=90)
        records = {}
        for f in glob.glob(self.path("topo", "*.json")):
            with open(f) as fh:
                r = json.load(fh)
            records[r["hostname"]] = r["env"]
        self.assertEqual(sorted(records), names)
        boot = read_boot_id()
        self.assertEqual(records["co-0"].get("NCCL_HOSTID"), boot)
        self.assertEqual(records["co-1"].get("NCCL_HOSTID"), boot)
        self.assertNotIn("NCCL_HOSTID", records["co-2"])
        self.assertNotIn("NCCL_HOSTID", records["co-3"])
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
