"""End-to-end: a real PyTorch job. 4 agents x 2 workers initialise a gloo
process group from the environment trainlet sets (env://) and all_reduce."""

import re
import unittest

import harness
from harness import E2ETestCase, PY

NNODES, NPROC = 4, 2


class TorchAllReduceTest(E2ETestCase):

    def test_gloo_all_reduce_over_env_init(self):
        env = self.base_env(OMP_NUM_THREADS="1", GLOO_SOCKET_IFNAME="lo",
                            PYTHONUNBUFFERED="1")
        agents = self.start_job(NNODES, NPROC, [PY, harness.worker("torch_allreduce.py")],
                                env=env, extra_args=["--prefix-output", "--grace-period=5s"])
        self.assert_codes(agents, [0] * NNODES, timeout=150)
        world = NNODES * NPROC
        sums = {}
        for a in agents:
            for m in re.finditer(r"^\[rank (\d+)\] rank (\d+) of (\d+): all_reduce sum (\S+)",
                                 a.stdout, re.M):
                self.assertEqual(m.group(1), m.group(2), a.describe())
                self.assertEqual(int(m.group(3)), world)
                sums[int(m.group(1))] = float(m.group(4))
        self.assertEqual(sums, {r: 36.0 for r in range(world)}, self.describe_all())
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
