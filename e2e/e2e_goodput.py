"""End-to-end: a job's goodput (docs/goodput.md) on a real torch gloo job.

Two pod-like netns hosts (e2e/netns.py), each running `trainlet run` with one
DDP worker (e2e/workers/goodput_ddp.py: a checkpoint every 10 steps, resumed
at start, `step=N` progress lines), and a `trainlet controller` on the first
host. In the first attempt the workers pause before each step from step 17
on; in that quiet window the test kills pod1's worker with SIGKILL. The job
restarts, resumes from the checkpoint at step 10, redoes steps 11-17 and
finishes. Then, from the controller's /api/jobs:
  - the phases add up to the job's wall time (exactly, by construction) and
    that wall time is within 1% of the job's life as the test saw it;
  - the restart's record names pod1 and rank 1, and its redone steps are
    what the progress lines show: the failed attempt's last step (17, the
    workers' step logs) minus the step the next attempt resumed from (10);
    its durations are the job's detection, restart, re-warm and redone
    time (one restart);
  - /metrics' trainlet_job_seconds add up to the same wall time, and
    `trainlet status` shows the goodput and the restart's cost.

Skipped where netns hosts or torch are missing.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
import unittest

import harness
from harness import E2ETestCase, poll_until

COORDINATOR_PORT = 29400
MASTER_PORT = 29500
CONTROLLER_PORT = 29600
HTTP_PORT = 29601
PAUSE_AT = 17       # the failed attempt's last step
CKPT_EVERY = 10     # so the next attempt resumes from 10
STEPS = 150         # about 10 s of steps: 1% of the job is 0.2 s
LOG_TIME = re.compile(r"^(\d{4}-\d\d-\d\dT\S+Z) [DIWE] trainlet", re.M)
EXIT_LINE = re.compile(r"^(\d{4}-\d\d-\d\dT\S+Z) I trainlet\[[^\]\n]*\] exiting with code 0",
                       re.M)
FETCH = ("import sys, urllib.request; "
         "sys.stdout.write(urllib.request.urlopen(sys.argv[1], timeout=10).read().decode())")


class GoodputTest(E2ETestCase):

    def setUp(self):
        super().setUp()
        if subprocess.run([harness.PY, "-c", "import torch.distributed"],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode != 0:
            self.skipTest("needs torch in %s" % harness.PY)
        self.cluster = self.netns_cluster(["pod0", "pod1"])
        self.token = self.path("token")
        with open(self.token, "w") as f:
            f.write("goodput-e2e-token-0123456789abcdef\n")

    def fetch(self, what):
        host = self.cluster.hosts[0]
        r = self.cluster.run(host, [harness.PY, "-c", FETCH,
                                    "http://%s:%d%s" % (host.addr, HTTP_PORT, what)])
        self.assertEqual(r.returncode, 0, r.stderr)
        return r.stdout

    def steps(self, tag):
        try:
            with open(self.path("steps", tag)) as f:
                return [(int(a), float(b)) for a, b in
                        (line.split() for line in f if line.count(" ") == 1)]
        except FileNotFoundError:
            return []

    def test_kill9_restart_phases_add_up_and_redone_steps_match_progress(self):
        pod0, pod1 = self.cluster.hosts
        ctl = self.cluster.start(pod0, "controller", [
            harness.TRAINLET, "controller", "--listen=0.0.0.0:%d" % CONTROLLER_PORT,
            "--http=%s:%d" % (pod0.addr, HTTP_PORT), "--token-file=" + self.token])
        poll_until(lambda: self.cluster.run(pod0, [harness.PY, "-c", FETCH, "http://%s:%d/api/jobs"
                                                   % (pod0.addr, HTTP_PORT)]).returncode == 0
                   or not ctl.running(), 30, interval=0.2, what="the controller to serve")
        self.assertTrue(ctl.running(), ctl.describe())

        env = self.base_env(GLOO_SOCKET_IFNAME="eth0", OMP_NUM_THREADS=1, E2E_STEPS=STEPS,
                            E2E_CKPT_EVERY=CKPT_EVERY, E2E_PAUSE_AT=PAUSE_AT, E2E_PAUSE=4)
        agents = []
        for h in (pod0, pod1):
            agents.append(self.cluster.start(h, h.name, [
                harness.TRAINLET, "run", "--nnodes=2", "--node-rank=%d" % h.index,
                "--node-id=%s" % h.name, "--coordinator=pod0:%d" % COORDINATOR_PORT,
                "--master-port=%d" % MASTER_PORT, "--nproc-per-node=1", "--job-id=ettr",
                "--join-timeout=60s", "--grace-period=5s", "--max-restarts=2",
                "--token-file=" + self.token, "--controller=pod0:%d" % CONTROLLER_PORT,
                "--report-interval=500ms", "--",
                harness.PY, harness.worker("goodput_ddp.py")], env=env))

        # The quiet window: pod1's worker wrote step 17 and sleeps; 1 s in
        # (every line before it read by the agents), SIGKILL.
        poll_until(lambda: any(s == PAUSE_AT for s, _ in self.steps("pod1.r0"))
                   or not all(a.running() for a in agents), 120, interval=0.05,
                   what="step %d of the first attempt" % PAUSE_AT)
        self.assertTrue(all(a.running() for a in agents), self.describe_all(agents))
        time.sleep(1.0)
        with open(self.path("pids", "pod1.r0")) as f:
            os.kill(int(f.read()), signal.SIGKILL)

        self.assert_codes(agents, [0, 0], 150)
        # The job's life as its agents saw it: the first agent's first line
        # to the last one's exit line (one clock: the hosts share a kernel).
        stamps = [[harness.log_time(m) for m in LOG_TIME.findall(a.stderr)] for a in agents]
        exits = [harness.log_time(m) for a in agents for m in EXIT_LINE.findall(a.stderr)]
        self.assertEqual(len(exits), 2, self.describe_all(agents))
        life = max(exits) - min(s[0] for s in stamps)

        job = json.loads(self.fetch("/api/jobs/ettr"))["job"]
        g = job["goodput"]
        phases = ["productive", "startup", "waiting", "detection", "restart", "rewarm", "redone"]
        total = sum(g[p + "_ms"] for p in phases)
        sys_report = "goodput %s, life %.3fs\n%s" % (g, life, self.describe_all(agents))
        sys.stderr.write("\n%s: wall %.3fs (life %.3fs), ETTR %.3f, %s\n" % (
            self.id(), g["wall_ms"] / 1000.0, life, g["ettr"],
            ", ".join("%s %.3fs" % (p, g[p + "_ms"] / 1000.0) for p in phases)))
        # Exactly a partition of the job's wall time, its first report to
        # its verdict; and that is the job's life as the test saw it, from
        # launching the agents to the last one's exit (within 1%).
        self.assertEqual(g["phase"], "ended", sys_report)
        self.assertEqual(total, g["wall_ms"], sys_report)
        self.assertEqual(g["wall_ms"], job["ended_unix_ms"] - job["started_unix_ms"], sys_report)
        self.assertLessEqual(abs(g["wall_ms"] / 1000.0 - life), 0.01 * life, sys_report)
        self.assertGreater(g["productive_ms"], 0, sys_report)
        self.assertGreater(g["startup_ms"], 0, sys_report)
        self.assertGreater(g["rewarm_ms"], 0, sys_report)
        self.assertAlmostEqual(g["ettr"], g["productive_ms"] / g["wall_ms"], places=4)

        # The restart: who, and the steps the progress lines show.
        self.assertEqual(job["restarts_total"], 1, sys_report)
        failed_at = max(s for tag in ("pod0.r0", "pod1.r0") for s, _ in self.steps(tag))
        resumed = set()
        for tag in ("pod0.r1", "pod1.r1"):
            with open(self.path("resumed", tag)) as f:
                resumed.add(int(f.read()))
        self.assertEqual((failed_at, resumed), (PAUSE_AT, {CKPT_EVERY}))
        t = job["restarts"][0]["times"]
        self.assertTrue(t["known"] and t["done"], t)
        self.assertEqual((t["node_id"], t["rank"]), ("pod1", 1), t)
        self.assertEqual(t["failed_at_step"], failed_at, t)
        self.assertEqual(t["resumed_from_step"], min(resumed), t)
        self.assertEqual(t["redone_steps"], failed_at - min(resumed), t)
        # One restart: its durations are the job's failure phases (the
        # job's waiting also has the wait for its first round's nodes).
        for p in ("detection", "restart", "rewarm", "redone"):
            self.assertEqual(t[p + "_ms"], g[p + "_ms"], p)
        self.assertLessEqual(t["waiting_ms"], g["waiting_ms"])
        self.assertEqual(job["rounds_timeline"][1]["restart"], t)
        # The redone time is the second attempt's steps 11 to 17 as its
        # workers logged them, within what report times blur (a report
        # every 0.5 s).
        second = dict(self.steps("pod0.r1"))
        logged = (second[failed_at] - second[min(resumed) + 1]) * 1000
        self.assertLess(abs(t["redone_ms"] - logged), 1500, (t, logged))

        # /metrics: the same phases; `trainlet status`: the goodput line.
        metrics = self.fetch("/metrics")
        secs = re.findall(r'^trainlet_job_seconds\{job_id="ettr",phase="(\w+)"\} ([0-9.]+)$',
                          metrics, re.M)
        self.assertEqual(sorted(p for p, _ in secs), sorted(phases))
        self.assertAlmostEqual(sum(float(v) for _, v in secs), g["wall_ms"] / 1000.0, places=2)
        self.assertRegex(metrics, r'(?m)^trainlet_job_ettr\{job_id="ettr"\} 0\.\d+$')
        status = self.cluster.run(pod0, [harness.TRAINLET, "status",
                                         "--controller=%s:%d" % (pod0.addr, HTTP_PORT), "ettr"])
        self.assertEqual(status.returncode, 0, status.stderr)
        self.assertIn("goodput: ETTR ", status.stdout)
        self.assertIn("failed: pod1 rank 1; lost ", status.stdout)
        self.assertIn("(%d steps: %d back to %d)" % (failed_at - min(resumed), failed_at,
                                                    min(resumed)), status.stdout)


if __name__ == "__main__":
    unittest.main()
