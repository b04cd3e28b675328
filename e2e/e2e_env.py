"""End-to-end: the worker environment of a multi-node job (docs/environment.md),
and the ways of configuring `trainlet run` (docs/configuration.md)."""

import glob
import json
import os
import subprocess
import unittest

import harness
from harness import E2ETestCase, PY

DUMP_ENV = [PY, harness.worker("dump_env.py")]


class WorkerEnvTest(E2ETestCase):

    def collect_envs(self, expected_count):
        files = sorted(glob.glob(self.path("env", "*.json")))
        self.assertEqual(len(files), expected_count,
                         "worker env files: %s\n%s" % (files, self.describe_all()))
        envs = []
        for f in files:
            with open(f) as fh:
                envs.append(json.load(fh)["env"])
        return envs

    def test_four_nodes_two_workers_full_environment(self):
        nnodes, nproc = 4, 2
        job_id = "e2e-env.v1"
        # Inherited values the agent must override or drop.
        env = self.base_env(RANK="999", TF_CONFIG='{"stale": true}', OMP_NUM_THREADS=None)
        agents = self.start_job(nnodes, nproc, DUMP_ENV, job_id=job_id, env=env)
        self.assert_codes(agents, [0] * nnodes, timeout=60)
        mp = self.master_port
        envs = self.collect_envs(nnodes * nproc)

        ranks = sorted(int(e["RANK"]) for e in envs)
        self.assertEqual(ranks, list(range(8)), "RANKs must be 0..7, unique")
        expected_workers = ["127.0.0.1:%d" % (mp + 1 + l)
                            for n in range(nnodes) for l in range(nproc)]
        for e in envs:
            node, local = int(e["GROUP_RANK"]), int(e["LOCAL_RANK"])
            rank = node * nproc + local
            ctx = "worker node %d local %d: %s" % (node, local, json.dumps(e, sort_keys=True))
            want = {
                "MASTER_ADDR": "127.0.0.1",
                "MASTER_PORT": str(mp),
                "RANK": str(rank),
                "WORLD_SIZE": "8",
                "LOCAL_RANK": str(local),
                "LOCAL_WORLD_SIZE": "2",
                "GROUP_RANK": str(node),
                "GROUP_WORLD_SIZE": "4",
                "ROLE_NAME": "default",
                "ROLE_RANK": str(rank),
                "ROLE_WORLD_SIZE": "8",
                "NODE_RANK": str(node),
                "TORCHELASTIC_RUN_ID": job_id,
                "TORCHELASTIC_RESTART_COUNT": "0",
                "TORCHELASTIC_MAX_RESTARTS": "0",
                "JAX_COORDINATOR_ADDRESS": "127.0.0.1:%d" % mp,
                "JAX_NUM_PROCESSES": "8",
                "JAX_PROCESS_ID": str(rank),
                "DMLC_TRACKER_URI": "127.0.0.1",
                "DMLC_TRACKER_PORT": str(mp),
                "DMLC_TASK_ID": str(rank),
                "DMLC_NUM_WORKER": "8",
                "PET_NNODES": "4",
                "PET_NODE_RANK": str(node),
                "PET_MASTER_ADDR": "127.0.0.1",
                "PET_MASTER_PORT": str(mp),
                "PET_NPROC_PER_NODE": "2",
                "OMP_NUM_THREADS": "1",
            }
            got = {k: e.get(k) for k in want}
            self.assertEqual(got, want, ctx)
            self.assertIn("TF_CONFIG", e, ctx)
            tf = json.loads(e["TF_CONFIG"])
            self.assertEqual(tf["cluster"], {"worker": expected_workers}, ctx)
            self.assertEqual(tf["task"], {"type": "worker", "index": rank}, ctx)
            # Inherited environment passes through.
            self.assertEqual(e.get(harness.TAG_VAR), self.tag, ctx)
            # trainlet's own gRPC settings (its resolver, its read buffers)
            # stay in trainlet: a worker's gRPC (TensorFlow, say) runs as
            # it would without it.
            self.assertNotIn("GRPC_EXPERIMENTS", e, ctx)
            self.assertNotIn("GRPC_DNS_RESOLVER", e, ctx)

    def test_rank_hints_out_of_launch_order(self):
        nnodes, nproc = 4, 2
        # Nodes 3 and 1 start before the coordinator (node 0) exists.
        agents = self.start_job(nnodes, nproc, DUMP_ENV, order=[3, 1, 0, 2])
        self.assert_codes(agents, [0] * nnodes, timeout=60)
        envs = self.collect_envs(nnodes * nproc)
        by_node = {}
        for e in envs:
            by_node.setdefault(e["GROUP_RANK"], []).append(int(e["RANK"]))
        # agents[k] was started with --node-rank=k (and --node-id=nk); the files
        # are named by the GROUP_RANK the agent gave its workers.
        self.assertEqual({k: sorted(v) for k, v in by_node.items()},
                         {"0": [0, 1], "1": [2, 3], "2": [4, 5], "3": [6, 7]})
        for k in range(nnodes):
            self.assertIn("node rank %d of 4" % k, agents[k].stderr + agents[k].stdout,
                          agents[k].describe())

    def test_trainlet_env_vars_as_options(self):
        port, mp = harness.free_ports(2)
        token = self.path("token")
        with open(token, "w") as f:
            f.write("s3cret\n")
        agents = []
        for rank in (1, 0):  # node 1 first: it waits for the coordinator
            env = self.base_env(
                TRAINLET_NNODES="2", TRAINLET_NODE_RANK=rank, TRAINLET_NODE_ID="env-n%d" % rank,
                TRAINLET_COORDINATOR="127.0.0.1:%d" % port, TRAINLET_HEALTH_PORT="0",
                TRAINLET_NPROC_PER_NODE="2", TRAINLET_MASTER_PORT=mp,
                TRAINLET_JOB_ID="env-job", TRAINLET_TOKEN_FILE=token,
                TRAINLET_MAX_RESTARTS="2", TRAINLET_JOIN_TIMEOUT="60s",
                TRAINLET_PREFIX_OUTPUT="true")
            agents.append(self.start_agent([], DUMP_ENV, name="node%d" % rank,
                                           env=env))
        self.assert_codes(agents, [0, 0], timeout=60)
        envs = self.collect_envs(4)
        self.assertEqual(sorted(int(e["RANK"]) for e in envs), [0, 1, 2, 3])
        for e in envs:
            self.assertEqual(e["WORLD_SIZE"], "4")
            self.assertEqual(e["GROUP_WORLD_SIZE"], "2")
            self.assertEqual(e["LOCAL_WORLD_SIZE"], "2")
            self.assertEqual(e["MASTER_PORT"], str(mp))
            self.assertEqual(e["TORCHELASTIC_RUN_ID"], "env-job")
            self.assertEqual(e["TORCHELASTIC_MAX_RESTARTS"], "2")
            self.assertEqual(int(e["RANK"]) // 2, int(e["GROUP_RANK"]))
        for rank, agent in zip((1, 0), agents):
            self.assertIn("node rank %d of 2" % rank, agent.stderr + agent.stdout,
                          agent.describe())

    def test_flag_beats_env_var(self):
        port, mp = harness.free_ports(2)
        agents = []
        for rank in (0, 1):
            # TRAINLET_NNODES=7 would leave the round open; the flag says 2.
            env = self.base_env(TRAINLET_NNODES="7", TRAINLET_JOB_ID="not-this-one")
            agents.append(self.start_agent(
                ["--nnodes=2", "--node-rank=%d" % rank, "--node-id=f%d" % rank,
                 "--coordinator=127.0.0.1:%d" % port, "--master-port=%d" % mp,
                 "--health-port=0", "--nproc-per-node=1", "--job-id=flag-job",
                 "--join-timeout=60s"],
                DUMP_ENV, name="node%d" % rank, env=env))
        self.assert_codes(agents, [0, 0], timeout=60)
        envs = self.collect_envs(2)
        self.assertEqual([e["TORCHELASTIC_RUN_ID"] for e in envs], ["flag-job"] * 2)
        self.assertEqual([e["WORLD_SIZE"] for e in envs], ["2"] * 2)

    def test_torchrun_rendezvous_flags_run_a_job(self):
        # A torchrun command line, unchanged but for `trainlet run` and `--`:
        # --rdzv_endpoint is the coordinator, --rdzv_id the job id, and
        # --rdzv_backend=c10d one INFO line.
        port, mp = harness.free_ports(2)
        agents = []
        for rank in (0, 1):
            agents.append(self.start_agent(
                ["--nnodes=2", "--nproc_per_node=1", "--node_rank=%d" % rank,
                 "--rdzv_backend=c10d", "--rdzv_endpoint=127.0.0.1:%d" % port,
                 "--rdzv_id=torch-job-7", "--master_port=%d" % mp, "--node-id=t%d" % rank],
                DUMP_ENV, name="node%d" % rank))
        self.assert_codes(agents, [0, 0], timeout=60)
        envs = self.collect_envs(2)
        self.assertEqual([e["TORCHELASTIC_RUN_ID"] for e in envs], ["torch-job-7"] * 2)
        for agent in agents:
            backend = [l for l in agent.stderr.splitlines() if "--rdzv-backend" in l]
            self.assertEqual(len(backend), 1, agent.describe())
            self.assertRegex(backend[0],
                             r" I trainlet(\[[^\]]*\])? --rdzv-backend=c10d \(torchrun's\)")
            self.assertIn("--rdzv-id=torch-job-7 (torchrun's): the job id", agent.stderr)
            self.assertIn("joining job torch-job-7 at 127.0.0.1:%d" % port, agent.stderr)

    def test_kubeflow_pet_env_with_trainlet_coordinator(self):
        # PET_* give nnodes, rank, master port and nproc; the coordinator port
        # can only come from TRAINLET_COORDINATOR (PET_MASTER_ADDR is a host,
        # and the coordinator port stays 29400), so it is set too.
        port, mp = harness.free_ports(2)
        agents = []
        for rank in (1, 0):
            env = self.base_env(
                PET_NNODES="2", PET_NODE_RANK=rank, PET_MASTER_ADDR="127.0.0.1",
                PET_MASTER_PORT=mp, PET_NPROC_PER_NODE="2",
                TRAINLET_NODE_ID="pet-n%d" % rank,
                TRAINLET_COORDINATOR="127.0.0.1:%d" % port, TRAINLET_HEALTH_PORT="0",
                TRAINLET_JOIN_TIMEOUT="60s")
            agents.append(self.start_agent([], DUMP_ENV, name="node%d" % rank, env=env))
        self.assert_codes(agents, [0, 0], timeout=60)
        envs = self.collect_envs(4)
        self.assertEqual(sorted(int(e["RANK"]) for e in envs), [0, 1, 2, 3])
        for e in envs:
            self.assertEqual(e["GROUP_WORLD_SIZE"], "2")
            self.assertEqual(e["WORLD_SIZE"], "4")
            self.assertEqual(e["MASTER_PORT"], str(mp))  # from PET_MASTER_PORT
            self.assertEqual(int(e["RANK"]) // 2, int(e["GROUP_RANK"]))
        for rank, agent in zip((1, 0), agents):
            log = agent.stderr + agent.stdout
            self.assertIn("nnodes 2 from PET_NNODES", log, agent.describe())
            self.assertIn("node rank %d from PET_NODE_RANK" % rank, log, agent.describe())

    @unittest.skipUnless(harness.namespaces_supported("net"),
                         "needs `unshare --net` (root with CAP_SYS_ADMIN)")
    def test_kubeflow_discovery_no_flags_in_network_namespace(self):
        # A private network namespace, so that the fixed default ports (29400
        # coordinator, 29401 health) are free; 10.9.9.9 on lo stands for the
        # master pod's address. Only TRAINLET_NODE_ID is set besides PET_*
        # (both agents share a hostname), and TRAINLET_HEALTH_PORT=0 (both share
        # a network namespace, hence the default health port).
        holder = self.start("netns", [
            "unshare", "--net", "sh", "-c",
            "ip link set lo up && ip addr add 10.9.9.9/32 dev lo && echo ready && exec sleep 300"])
        harness.poll_until(lambda: "ready" in holder.stdout or not holder.running(), 10,
                           what="network namespace")
        self.assertTrue(holder.running(), holder.describe())
        nsenter = ["nsenter", "--net=/proc/%d/ns/net" % holder.pid, "--"]
        agents = []
        for rank in (1, 0):
            env = self.base_env(PET_NNODES="2", PET_NODE_RANK=rank, PET_MASTER_ADDR="10.9.9.9",
                                PET_MASTER_PORT="23456", PET_NPROC_PER_NODE="1",
                                TRAINLET_NODE_ID="k8s-n%d" % rank, TRAINLET_HEALTH_PORT="0")
            agents.append(self.start_agent([], DUMP_ENV, name="node%d" % rank, env=env,
                                           prefix=nsenter))
        self.assert_codes(agents, [0, 0], timeout=60)
        envs = {e["GROUP_RANK"]: e for e in self.collect_envs(2)}
        self.assertEqual(sorted(envs), ["0", "1"])
        self.assertEqual(envs["1"]["RANK"], "1")
        self.assertEqual(envs["1"]["WORLD_SIZE"], "2")
        self.assertEqual(envs["1"]["MASTER_PORT"], "23456")
        # Node 1 dialed the coordinator at PET_MASTER_ADDR:29400, so that is
        # where it reaches rank 0.
        self.assertEqual(envs["1"]["MASTER_ADDR"], "10.9.9.9")
        self.assertIn("10.9.9.9:29400", agents[0].stderr + agents[0].stdout,
                      agents[0].describe())


if __name__ == "__main__":
    unittest.main()
