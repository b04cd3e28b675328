"""End-to-end tests of the framework conventions of issue 12 across pod-like
hosts (e2e/netns.py): XGBoost 1.7's real collective (Rabit) configured only by
trainlet's DMLC_* variables; a Volcano job's pods discovered with no flags
from VK_TASK_INDEX, their hostnames and the svc plugin's /etc/volcano files
(staged as Kubernetes mounts a ConfigMap: keys are links into ..data); and a
Volcano job of two tasks, refused without TRAINLET_NNODES/TRAINLET_COORDINATOR
and one job with them.

Skipped where network namespaces are not allowed (needs root); the XGBoost test
also needs Debian's python3-xgboost."""

import glob
import json
import os
import subprocess
import sys
import unittest

import e2e_multihost
import harness
from harness import E2ETestCase, PY

COORDINATOR_PORT = 29400
MASTER_PORT = 29500


def have_xgboost():
    r = subprocess.run([PY, "-c", "import xgboost.collective, xgboost.tracker"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return r.returncode == 0


# Runs "$@" in a private mount namespace whose /etc is the real one with
# volcano/ (copied from $2) added by an overlay on a tmpfs at $1, and
# /etc/hosts the host's own again (the overlay hides the bind mount that `ip
# netns exec` made). Nothing outside the namespace changes; it goes with its
# last process.
WITH_ETC_VOLCANO = r'''set -e
d="$1"; stage="$2"; ns="$3"; shift 3
mount -t tmpfs -o size=1m trainlet-e2e "$d"
mkdir -p "$d/upper/volcano" "$d/work"
cp -a "$stage"/. "$d/upper/volcano/"
mount -t overlay overlay -o "lowerdir=/etc,upperdir=$d/upper,workdir=$d/work" /etc
mount --bind "/etc/netns/$ns/hosts" /etc/hosts
exec "$@"'''


def stage_volcano_configmap(stage, files):
    """Writes `files` ({name: text}) as Kubernetes mounts a ConfigMap: each
    key a link <name> -> ..data/<name>, ..data a link to a timestamped
    directory holding the files."""
    stamp = "..2026_11_23_10_00_00.123456789"
    os.makedirs(os.path.join(stage, stamp))
    os.symlink(stamp, os.path.join(stage, "..data"))
    for name, text in files.items():
        with open(os.path.join(stage, stamp, name), "w") as f:
            f.write(text)
        os.symlink(os.path.join("..data", name), os.path.join(stage, name))


class FrameworksTest(E2ETestCase):

    make_cluster = e2e_multihost.MultiHostTest.make_cluster
    read_contract_files = e2e_multihost.MultiHostTest.read_contract_files
    assert_address_contract = e2e_multihost.MultiHostTest.assert_address_contract

    # -- XGBoost: a real client --

    @unittest.skipUnless(have_xgboost(), "needs Debian's python3-xgboost (1.7)")
    def test_xgboost_rabit_tracker_on_task0_two_hosts_two_workers_each(self):
        # Task 0 hosts the Rabit tracker at DMLC_TRACKER_URI:DMLC_TRACKER_PORT
        # (trainlet's MASTER_ADDR:MASTER_PORT); every task connects to it and
        # allreduces. That works only if the address is the same on every
        # worker and reaches task 0's host from every host.
        names = ["xg-0", "xg-1"]
        cluster = self.make_cluster(names)
        agents = []
        for i, h in enumerate(cluster.hosts):
            args = ["--nnodes=2", "--node-rank=%d" % i, "--node-id=%s" % h.name,
                    "--coordinator=%s:%d" % (names[0], COORDINATOR_PORT),
                    "--master-port=%d" % MASTER_PORT, "--nproc-per-node=2",
                    "--job-id=xgb", "--join-timeout=60s"]
            agents.append(cluster.start(
                h, "node%d" % i, [harness.TRAINLET, "run"] + args + ["--", PY,
                                                                      harness.worker(
                                                                          "xgboost_allreduce.py")]))
        codes = self.wait_all(agents, timeout=90)
        results = {}
        for f in glob.glob(self.path("xgboost", "*.json")):
            with open(f) as fh:
                r = json.load(fh)
            results[r["task"]] = r
        summary = "\n".join(
            "  task %d (rabit rank %d) on %s: sum %g (expected %g), tracker %s:%s -> %s"
            % (k, v["rank"], v["hostname"], v["sum"], v["expected"],
               v["env"]["DMLC_TRACKER_URI"], v["env"]["DMLC_TRACKER_PORT"],
               v["tracker_resolved"]) for k, v in sorted(results.items()))
        self.assertEqual(codes, [0, 0], "exit codes (every process's output follows); "
                         "allreduce results:\n%s" % (summary or "  none"))
        self.assertEqual(sorted(results), [0, 1, 2, 3], summary)
        host0 = cluster.hosts[0]
        trackers = {(r["env"]["DMLC_TRACKER_URI"], r["env"]["DMLC_TRACKER_PORT"])
                    for r in results.values()}
        self.assertEqual(trackers, {(results[0]["env"]["MASTER_ADDR"], str(MASTER_PORT))},
                         "DMLC_TRACKER_URI:PORT must be MASTER_ADDR:MASTER_PORT on every "
                         "worker:\n" + summary)
        for task, r in results.items():
            self.assertEqual((r["rank"], r["world"], r["sum"]), (task, 4, 10.0), summary)
            self.assertEqual(r["env"]["DMLC_TASK_ID"], r["env"]["RANK"], summary)
            self.assertEqual(r["hostname"], names[task // 2], summary)
            self.assertEqual(r["tracker_resolved"], [host0.addr],
                             "the tracker address must resolve to task 0's host %s on every "
                             "host:\n%s" % (host0, summary))
        sys.stderr.write("xgboost collective across hosts:\n%s\n" % summary)
        self.assert_no_leftovers()

    # -- Volcano: discovery with no flags --

    def start_volcano_pods(self, cluster, stage, envs, args=(), tag=""):
        agents = []
        for i, h in enumerate(cluster.hosts):
            mnt = self.path("etc-overlay%s-%d" % (tag, i))
            os.makedirs(mnt)
            wrapped = ["unshare", "--mount", "sh", "-c", WITH_ETC_VOLCANO, "with-etc-volcano", mnt,
                       stage, h.ns,
                       harness.TRAINLET, "run"] + list(args) + ["--"] + e2e_multihost.ADDR_CONTRACT
            agents.append(cluster.start(h, h.name + tag, wrapped, env=self.base_env(**envs[i])))
        return agents

    def test_volcano_pods_without_flags(self):
        # A Volcano job "vj" with one task, "worker" (3 pods): each pod's
        # hostname is <job>-<task>-<index> in subdomain <job>, its env has
        # VK_TASK_INDEX/VC_TASK_INDEX and the svc plugin's
        # VC_<TASK>_NUM/_HOSTS, and /etc/volcano is the svc plugin's
        # ConfigMap as Kubernetes mounts it (keys are links into ..data). No
        # flags, and nothing that names a count or a master.
        job, n = "vj", 3
        names = ["%s-worker-%d" % (job, i) for i in range(n)]
        cluster = self.make_cluster(names, domain="%s.default.svc.cluster.local" % job)
        stage = self.path("volcano-stage")
        os.makedirs(stage)
        hosts = ["%s.%s" % (name, job) for name in names]
        stage_volcano_configmap(stage, {"worker.host": "".join(h + "\n" for h in hosts)})
        envs = [dict(KUBERNETES_SERVICE_HOST="10.96.0.1", KUBERNETES_SERVICE_PORT="443",
                     VK_TASK_INDEX=i, VC_TASK_INDEX=i, VC_WORKER_NUM=n,
                     VC_WORKER_HOSTS=",".join(hosts)) for i in range(n)]
        agents = self.start_volcano_pods(cluster, stage, envs)
        self.assert_codes(agents, [0] * n, timeout=60)
        records = self.read_contract_files(n)
        self.assertEqual(sorted(r["hostname"] for r in records), names)
        for r in records:
            e = r["env"]
            # The node rank is the pod's index; the job is <job>-<task>; the
            # master is the host file's first line; Volcano's own variables
            # pass through.
            self.assertEqual(e["GROUP_RANK"], e["VK_TASK_INDEX"], r["hostname"])
            self.assertEqual(r["hostname"], names[int(e["VK_TASK_INDEX"])])
            self.assertEqual(e["WORLD_SIZE"], str(n))
            self.assertEqual(e["MASTER_ADDR"], hosts[0])
            self.assertEqual(e["TORCHELASTIC_RUN_ID"], "%s-worker" % job)
            self.assertEqual(e["PADDLE_JOB_ID"], "%s-worker" % job)
            self.assertEqual(e["VC_WORKER_HOSTS"], ",".join(hosts))
        self.assert_address_contract(cluster, records)
        for a in agents:
            # Read through the ConfigMap's links, not skipped.
            self.assertIn("nnodes 3 from /etc/volcano/worker.host", a.stderr, a.describe())
            self.assertNotIn("Volcano host file, skipped", a.stderr, a.describe())
            self.assertNotIn("host file that does not list this pod, skipped", a.stderr)
        self.assert_no_leftovers()

    def test_volcano_job_of_two_tasks_is_refused_then_runs_as_one_job(self):
        # Volcano's pytorch plugin layout: task "master" (1 pod) and task
        # "worker" (2 pods). Each task's index starts at 0, so neither task
        # alone is the job: without TRAINLET_NNODES/TRAINLET_COORDINATOR
        # every pod refuses (exit 78) instead of the master training alone
        # and the workers forming a second job. With them, the three pods are
        # one job, hosted by the master (its own host-file line is the
        # coordinator).
        job = "pj"
        names = ["pj-master-0", "pj-worker-0", "pj-worker-1"]
        cluster = self.make_cluster(names, domain="%s.default.svc.cluster.local" % job)
        stage = self.path("volcano-stage")
        os.makedirs(stage)
        stage_volcano_configmap(stage, {"master.host": "pj-master-0.pj\n",
                                        "worker.host": "pj-worker-0.pj\npj-worker-1.pj\n"})
        common = dict(KUBERNETES_SERVICE_HOST="10.96.0.1", KUBERNETES_SERVICE_PORT="443",
                      VC_MASTER_NUM=1, VC_MASTER_HOSTS="pj-master-0.pj", VC_WORKER_NUM=2,
                      VC_WORKER_HOSTS="pj-worker-0.pj,pj-worker-1.pj")
        envs = [dict(common, VK_TASK_INDEX=i, VC_TASK_INDEX=i) for i in (0, 0, 1)]
        refused = self.start_volcano_pods(cluster, stage, envs, args=["--join-timeout=20s"],
                                          tag="-refused")
        self.assert_codes(refused, [78, 78, 78], timeout=30)
        for a in refused:
            self.assertIn("Volcano job has several tasks with pods", a.stderr, a.describe())
            self.assertIn("TRAINLET_COORDINATOR", a.stderr, a.describe())
        self.assertEqual(glob.glob(self.path("contract", "*.json")), [])

        for e in envs:
            e.update(TRAINLET_NNODES=3, TRAINLET_COORDINATOR="pj-master-0.pj")
        agents = self.start_volcano_pods(cluster, stage, envs, args=["--join-timeout=60s"])
        self.assert_codes(agents, [0, 0, 0], timeout=60)
        records = self.read_contract_files(3)
        self.assertEqual(records[0]["hostname"], "pj-master-0")  # RANK 0: it hosts.
        for r in records:
            e = r["env"]
            self.assertEqual(e["WORLD_SIZE"], "3", r["hostname"])
            self.assertEqual(e["MASTER_ADDR"], "pj-master-0.pj", r["hostname"])
            self.assertEqual(e["TORCHELASTIC_RUN_ID"], job, r["hostname"])
        self.assertEqual(sorted(r["hostname"] for r in records), names)
        self.assert_address_contract(cluster, records)
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
