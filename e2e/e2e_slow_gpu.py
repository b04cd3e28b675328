"""End-to-end: the slow-node GPU signal (docs/slow-nodes.md) with real agents
on loopback and the fake libnvidia-ml.so.1 (no GPU on this machine).

Four nodes, each reading its own fixture: two at full clock (one
power-capped), one whose GPU runs at half its maximum SM clock with HW
slowdown and HW thermal set, one at a low clock with no slowdown reason (an
idle GPU, whose clock the agent leaves out). Only the throttled one is named, with cause gpu, in every node's
log. Workers wait for $E2E_DIR/release, so every wait has a deadline.
"""

import json
import os
import unittest

import harness
from harness import E2ETestCase, PY, free_port, free_ports, poll_until

WAIT_FOR_RELEASE = [PY, "-c",
                    "import os, time\n"
                    "d = os.environ['E2E_DIR']\n"
                    "end = time.time() + 120\n"
                    "while time.time() < end and not os.path.exists(os.path.join(d, 'release')):\n"
                    "    time.sleep(0.05)\n"]


def device(i, clock, reasons):
    return {"uuid": "GPU-e2e-%d" % i, "name": "NVIDIA H100 80GB HBM3",
            "busId": "0000:%02x:00.0" % (0x18 + i), "cc": [9, 0], "smClock": clock,
            "smClockMax": 1980, "clockReasons": reasons}


# Per node: its two GPUs' (clock, reasons).
NODES = [
    [(1980, 0), (1980, 0)],
    [(1980, 0x4), (1960, 0x4)],  # power-capped, a hair lower: healthy
    [(1980, 0), (990, 0x48)],    # HW slowdown and HW thermal at half clock: slow
    [(1980, 0x1), (300, 0x1)],   # idle: low, but no slowdown reason
]


class SlowGpuTest(E2ETestCase):

    def fake(self):
        return os.environ.get("E2E_FAKE_NVML") or os.path.join(
            os.path.dirname(harness.TRAINLET), "topology", "fake_nvml", "libnvidia-ml.so.1")

    def test_throttled_gpu_node_is_named_with_cause_gpu_and_no_other(self):
        if not os.path.exists(self.fake()):
            self.skipTest("no fake libnvidia-ml.so.1 (build trainlet_fake_nvml)")
        coordinator_port = free_port()
        master_port = free_ports(2)[1]
        agents = []
        for rank, gpus in enumerate(NODES):
            fixture = self.path("nvml_n%d.json" % rank)
            with open(fixture, "w") as f:
                json.dump({"driverVersion": "550.54.15", "cudaDriverVersion": 12040,
                           "devices": [device(i, c, r) for i, (c, r) in enumerate(gpus)]}, f)
            args = ["--nnodes=%d" % len(NODES), "--node-rank=%d" % rank, "--node-id=n%d" % rank,
                    "--coordinator=127.0.0.1:%d" % coordinator_port,
                    "--master-port=%d" % master_port, "--health-port=0", "--nproc-per-node=1",
                    "--job-id=e2e-gpu-" + self.tag[:8], "--join-timeout=60s",
                    "--slow-node-window=10s", "--log-level=debug"]
            env = self.base_env(TRAINLET_NVML_LIBRARY=self.fake(), FAKE_NVML_FIXTURE=fixture)
            agents.append(self.start_agent(args, WAIT_FOR_RELEASE, name="n%d" % rank, env=env))

        named = "slow node (the coordinator): node n2 is slow (gpu): its slowest GPU ran at 50%"
        # A window (10 s) and an interval after the workers start, on a loaded
        # machine with room to spare.
        poll_until(lambda: all(named in a.stderr for a in agents), 90,
                   what="n2 named slow (gpu) in every node's log\n" + self.describe_all())
        for a in agents:
            self.assertIn("(HW slowdown, HW thermal), the others' median 100%", a.stderr)
            # The GPU figures went out with the node's summaries.
            self.assertIn("gpus=2 sm_clock=", a.stderr)
        self.assertIn("gpus=2 sm_clock=500 (permille) reasons=0x48", agents[2].stderr)
        self.assertIn("gpus=2 sm_clock=0 (permille) reasons=0x0", agents[3].stderr)
        with open(self.path("release"), "w"):
            pass
        self.assert_codes(agents, [0] * len(NODES), 60)
        for a in agents:
            for other in ("n0", "n1", "n3"):
                self.assertNotIn("node %s is slow" % other, a.stderr)
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
