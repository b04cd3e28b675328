"""End-to-end: agents reporting to a real `trainlet controller` process. The
history it keeps in SQLite (--db) is read back with Python's sqlite3 after the
controller stopped, and after it was killed and restarted; a controller that
is down changes nothing for the job."""

import json
import os
import signal
import sqlite3
import subprocess
import unittest
import urllib.request

import harness
from harness import E2ETestCase, PY

# HistoryEntry.Kind numbers (proto/trainlet/v1/controller.proto).
ROUND, RESTART, HANG, NODE_STALE, FINISHED = 1, 2, 3, 4, 5


class ControllerTest(E2ETestCase):

    def start_controller(self, port, db, name="controller", http_port=None):
        self.http_port = http_port or harness.free_port()
        ctl = self.start(name, [harness.TRAINLET, "controller", "--listen=127.0.0.1:%d" % port,
                                "--http=127.0.0.1:%d" % self.http_port, "--db=" + db,
                                "--token-file=" + self.token])
        harness.poll_until(lambda: subprocess.run(
            [harness.TRAINLET, "health", "127.0.0.1:%d" % port, "--timeout-ms=500"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            timeout=10).returncode == 0 or not ctl.running(), 20, interval=0.1,
            what="the controller to serve")
        self.assertTrue(ctl.running(), ctl.describe())
        return ctl

    def history(self, db):
        with sqlite3.connect(db) as conn:
            return conn.execute(
                "select job_id, kind, round, node_id, cause from history order by id").fetchall()

    def setUp(self):
        super().setUp()
        self.token = self.path("token")
        with open(self.token, "w") as f:
            f.write("e2e-secret\n")

    def run_job(self, controller_port, job, command, extra=()):
        coord, mp = harness.free_ports(2)
        agents = [self.start_agent(
            ["--nnodes=2", "--node-rank=%d" % i, "--node-id=%s-n%d" % (job, i),
             "--coordinator=127.0.0.1:%d" % coord, "--master-port=%d" % mp, "--job-id=" + job,
             "--token-file=" + self.token, "--join-timeout=60s",
             "--controller=127.0.0.1:%d" % controller_port, "--report-interval=200ms"]
            + list(extra), command, name="%s-n%d" % (job, i)) for i in range(2)]
        return agents

    def run_elastic_job(self, controller_port, job, script):
        """Three agents of an elastic job (--nnodes=2:3), one worker each
        running the Python `script`, reporting every 200 ms."""
        coord, mp = harness.free_ports(2)
        return [self.start_agent(
            ["--nnodes=2:3", "--node-rank=%d" % i, "--node-id=%s-n%d" % (job, i),
             "--coordinator=127.0.0.1:%d" % coord, "--master-port=%d" % mp, "--job-id=" + job,
             "--token-file=" + self.token, "--join-timeout=60s", "--max-restarts=2",
             "--nproc-per-node=1", "--grace-period=5s",
             "--controller=127.0.0.1:%d" % controller_port, "--report-interval=200ms"],
            [PY, "-c", script], name="%s-n%d" % (job, i)) for i in range(3)]

    def test_job_rounds_restart_cause_and_history_survive_a_restart(self):
        port = harness.free_port()
        db = self.path("history.db")
        ctl = self.start_controller(port, db)
        # Round 1: rank 1 fails once (marker file), the elastic job restarts;
        # round 2 succeeds.
        script = ("import os,sys\n"
                  "m=os.path.join(%r,'failed-once')\n"
                  "if os.environ['RANK']=='1' and not os.path.exists(m):\n"
                  "  open(m,'w').close(); sys.exit(3)\n" % self.path())
        agents = self.run_job(port, "jobA", [PY, "-c", script],
                              ["--max-restarts=2", "--nproc-per-node=1"])
        self.assertEqual(self.wait_all(agents, 90), [0, 0], self.describe_all())
        # `trainlet status` reads the controller's views (--http).
        status = subprocess.run(
            [harness.TRAINLET, "status", "--controller=127.0.0.1:%d" % self.http_port, "jobA"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        self.assertEqual(status.returncode, 0, status.stderr.decode())
        text = status.stdout.decode()
        self.assertIn("JOB jobA: succeeded, round 2", text)
        self.assertIn("restarts: 1", text)
        self.assertIn("exited with code 3", text)
        listing = subprocess.run(
            [harness.TRAINLET, "status", "--json"], stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, timeout=20,
            env=dict(os.environ, TRAINLET_CONTROLLER_HTTP="127.0.0.1:%d" % self.http_port))
        self.assertEqual(listing.returncode, 0, listing.stderr.decode())
        jobs = json.loads(listing.stdout)["jobs"]
        self.assertEqual(jobs[0]["job_id"], "jobA")
        # Both agents' workers, with their exit codes, as the page shows them.
        workers = [w for n in jobs[0]["nodes"] for w in n["workers"]]
        self.assertEqual(len(workers), 2, jobs[0])
        self.assertTrue(all(w["state"] == "succeeded" for w in workers), jobs[0])
        unknown = subprocess.run(
            [harness.TRAINLET, "status", "--controller=127.0.0.1:%d" % self.http_port, "nope"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        self.assertEqual(unknown.returncode, 1, unknown.stderr.decode())
        ctl.signal(signal.SIGKILL)
        ctl.wait(10)
        rows = self.history(db)
        kinds = [r[1] for r in rows if r[0] == "jobA"]
        self.assertIn(ROUND, kinds, rows)
        restarts = [r for r in rows if r[1] == RESTART]
        self.assertEqual(len(restarts), 1, rows)
        self.assertEqual(restarts[0][2], 2, rows)
        self.assertTrue(restarts[0][4], rows)  # a cause
        self.assertGreaterEqual(kinds.count(FINISHED), 1, rows)
        self.assertIn("exited with code 3", restarts[0][4], rows)

        # Restarted on the same file: the history is there and not repeated.
        ctl2 = self.start_controller(port, db, name="controller2")
        ctl2.signal(signal.SIGTERM)
        self.assertEqual(ctl2.wait(10), 128 + signal.SIGTERM, ctl2.describe())
        self.assertEqual(self.history(db), rows)
        self.assertIn("entries of 1 jobs reloaded", ctl2.stderr)

    def test_hung_worker_is_recorded_with_its_evidence_and_the_restart(self):
        port = harness.free_port()
        db = self.path("history.db")
        ctl = self.start_controller(port, db)
        # Round 1: the worker reports progress, then hangs; --hang-timeout
        # declares it, the elastic job restarts, round 2 finishes.
        agents = self.run_job(port, "jobH",
                              [PY, harness.worker("progress_hang.py"), "5", "0.2"],
                              ["--max-restarts=1", "--nproc-per-node=1", "--hang-timeout=3s",
                               "--prefix-output", "--grace-period=5s"])
        self.assertEqual(self.wait_all(agents, 90), [0, 0], self.describe_all())
        status = subprocess.run(
            [harness.TRAINLET, "status", "--controller=127.0.0.1:%d" % self.http_port, "--json",
             "jobH"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        self.assertEqual(status.returncode, 0, status.stderr.decode())
        job = json.loads(status.stdout)["jobs"][0]
        self.assertGreaterEqual(job["hangs_total"], 1, job)
        self.assertEqual(job["restarts_total"], 1, job)
        ctl.signal(signal.SIGTERM)
        ctl.wait(10)
        with sqlite3.connect(db) as conn:
            hangs = conn.execute("select node_id, cause, evidence, verdict from history "
                                 "where job_id = 'jobH' and kind = ?", (HANG,)).fetchall()
        self.assertGreaterEqual(len(hangs), 1, hangs)
        node, cause, evidence, verdict = hangs[0]
        # The verdict too: the suspect, not "declared by the agent of" the
        # reporting node.
        self.assertRegex(verdict, r"^hang: suspect rank \d+ on jobH-n\d ")
        # The job's verdict names the suspect first (docs/progress.md, "Who
        # hung"), in the cause and in the evidence, whose first worker is it.
        self.assertRegex(cause, r"^hang: suspect rank \d+ on jobH-n\d \(not in a collective")
        self.assertRegex(evidence, r"^hang: suspect rank (\d+) .*\nworker rank \1 ")
        # The evidence the agent collected: its last progress line and its
        # threads from /proc.
        self.assertIn("last progress: step=", evidence)
        self.assertIn("wchan=", evidence)

    def status_json(self, job):
        """`trainlet status --json JOB`'s job, or None while it is unknown."""
        out = subprocess.run(
            [harness.TRAINLET, "status", "--controller=127.0.0.1:%d" % self.http_port, "--json",
             job], stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20)
        return json.loads(out.stdout)["jobs"][0] if out.returncode == 0 else None

    def test_lost_node_named_by_node_0_and_in_the_restart_cause(self):
        port = harness.free_port()
        db = self.path("history.db")
        ctl = self.start_controller(port, db)
        done = self.path("done")
        script = "import os,time\nwhile not os.path.exists(%r): time.sleep(0.1)\n" % done
        agents = self.run_elastic_job(port, "jobL", script)
        # All three running round 1 (a node reports while it still joins, and
        # one killed then is no member of a running round: no restart).
        def running_round_1():
            nodes = (self.status_json("jobL") or {}).get("nodes", [])
            return len(nodes) == 3 and all(
                n["agent_state"] == "running" and n["round"] == 1 for n in nodes)
        harness.poll_until(running_round_1, 30,
                           what="3 nodes running round 1\n" + self.describe_all())
        os.kill(agents[2].pid, signal.SIGKILL)
        # The survivors restart without it; node 0's coordinator view names it.
        # The restart is listed once a report gives its cause: the first
        # report of round 2 may come from node 1, which was only told to
        # re-join, and the controller holds the restart (counted, not yet
        # listed) until node 0's next report says why.
        def lost_and_restarted():
            job = self.status_json("jobL") or {}
            return (job.get("lost_nodes") == ["jobL-n2"] and job.get("round") == 2 and
                    len(job.get("restarts", [])) == 1)
        harness.poll_until(lost_and_restarted, 30,
                           what="jobL-n2 shown lost in round 2, its restart listed\n" +
                           self.describe_all())
        job = self.status_json("jobL")
        self.assertEqual(job["restarts_total"], 1, job)
        self.assertIn("jobL-n2", job["restarts"][0]["cause"], job)
        table = subprocess.run(
            [harness.TRAINLET, "status", "--controller=127.0.0.1:%d" % self.http_port, "jobL"],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=20).stdout.decode()
        self.assertIn("lost nodes (not back): jobL-n2", table)
        with open(done, "w"):
            pass
        self.assertEqual(self.wait_all(agents[:2], 60), [0, 0], self.describe_all())
        self.assertEqual(agents[2].wait(5), -signal.SIGKILL)
        ctl.signal(signal.SIGTERM)
        ctl.wait(10)
        restarts = [r for r in self.history(db) if r[0] == "jobL" and r[1] == RESTART]
        self.assertEqual(len(restarts), 1, restarts)
        self.assertIn("jobL-n2", restarts[0][4], restarts)

    def metrics(self):
        with urllib.request.urlopen("http://127.0.0.1:%d/metrics" % self.http_port,
                                    timeout=10) as r:
            return r.read().decode()

    def test_elastic_job_with_a_killed_agent_succeeds_and_a_restart_keeps_it(self):
        """Issue 26: an elastic 3-agent job whose agent 2 is killed (kill -9)
        ends succeeded (the survivors finish; the lost node never says
        goodbye), the lost node is shown lost and counted nowhere, and a
        controller restarted on the same --db brings back the verdict, the
        failure, the steps and the times."""
        port = harness.free_port()
        db = self.path("history.db")
        ctl = self.start_controller(port, db)
        done = self.path("done")
        # Each worker reports step=N loss=... until `done` appears.
        script = ("import os,time\n"
                  "p=os.environ['TRAINLET_PROGRESS_FILE']\n"
                  "step=0\n"
                  "while not os.path.exists(%r):\n"
                  "  step+=1\n"
                  "  open(p+'.tmp','w').write('step=%%d loss=%%.4f\\n' %% (step, 1.0/step))\n"
                  "  os.rename(p+'.tmp',p)\n"
                  "  time.sleep(0.05)\n" % done)
        agents = self.run_elastic_job(port, "jobE", script)

        def running_round_1_with_progress():
            nodes = (self.status_json("jobE") or {}).get("nodes", [])
            return len(nodes) == 3 and all(
                n["agent_state"] == "running" and n["round"] == 1 and n["progress"]["known"]
                for n in nodes)
        harness.poll_until(running_round_1_with_progress, 30,
                           what="3 nodes running round 1 with progress\n" + self.describe_all())
        os.kill(agents[2].pid, signal.SIGKILL)

        def lost_and_running_round_2():
            job = self.status_json("jobE") or {}
            survivors = [n for n in job.get("nodes", []) if n["node_id"] != "jobE-n2"]
            return (job.get("lost_nodes") == ["jobE-n2"] and job.get("round") == 2 and
                    len(survivors) == 2 and
                    all(n["agent_state"] == "running" and n["round"] == 2 for n in survivors))
        harness.poll_until(lost_and_running_round_2, 30,
                           what="jobE-n2 lost, the others running round 2\n" +
                           self.describe_all())
        # Shown lost at once: not up, though it reported a moment ago.
        job = self.status_json("jobE")
        lost = [n for n in job["nodes"] if n["node_id"] == "jobE-n2"]
        self.assertEqual(len(lost), 1, job)
        self.assertFalse(lost[0]["up"], job)
        self.assertEqual(job["totals"]["nodes_up"], 2, job)
        with open(done, "w"):
            pass
        self.assertEqual(self.wait_all(agents[:2], 60), [0, 0], self.describe_all())
        self.assertEqual(agents[2].wait(5), -signal.SIGKILL)

        def succeeded():
            job = self.status_json("jobE") or {}
            return job.get("state") == "succeeded"
        harness.poll_until(succeeded, 20, what="jobE succeeded\n" + self.describe_all())
        job = self.status_json("jobE")
        self.assertEqual(job["restarts_total"], 1, job)
        self.assertEqual(job["failures_total"], 1, job)
        self.assertEqual(job["lost_nodes"], ["jobE-n2"], job)
        self.assertEqual(job["totals"]["nodes_up"], 2, job)
        survivors = [n for n in job["nodes"] if n["node_id"] != "jobE-n2"]
        self.assertTrue(all(n["agent_state"] == "done" and n["exit_code"] == 0
                            for n in survivors), job)
        step = job["totals"]["progress_step"]
        self.assertGreater(step, 0, job)
        metrics = self.metrics()
        self.assertIn('trainlet_job_info{job_id="jobE",state="succeeded"} 1', metrics)
        self.assertIn('trainlet_job_nodes_up{job_id="jobE"} 2', metrics)
        self.assertIn('trainlet_node_up{job_id="jobE",node_id="jobE-n2"} 0', metrics)

        # The controller restarts on the same --db: the verdict, the failure,
        # the steps and the times come back (no agent reports any more).
        ctl.signal(signal.SIGTERM)
        self.assertEqual(ctl.wait(10), 128 + signal.SIGTERM, ctl.describe())
        with sqlite3.connect(db) as conn:
            summaries = conn.execute("select job_id from jobs").fetchall()
        self.assertEqual(summaries, [("jobE",)])
        self.assertEqual(os.stat(db).st_mode & 0o777, 0o600)
        ctl2 = self.start_controller(port, db, name="controller2")
        again = self.status_json("jobE")
        self.assertIsNotNone(again, ctl2.describe())
        self.assertEqual(again["state"], "succeeded", again)
        for key in ("restarts_total", "failures_total", "round", "last_report_unix_ms",
                    "lost_nodes"):
            self.assertEqual(again[key], job[key], key)
        self.assertEqual(again["totals"]["progress_step"], step, again)
        self.assertEqual(sorted(n["node_id"] for n in again["nodes"]),
                         ["jobE-n0", "jobE-n1", "jobE-n2"], again)
        self.assertIn('trainlet_job_info{job_id="jobE",state="succeeded"} 1', self.metrics())
        ctl2.signal(signal.SIGTERM)
        self.assertEqual(ctl2.wait(10), 128 + signal.SIGTERM, ctl2.describe())

    def test_controller_down_changes_nothing(self):
        port = harness.free_port()  # nobody listens there
        agents = self.run_job(port, "jobB", [PY, "-c", "import sys; sys.exit(0)"])
        self.assertEqual(self.wait_all(agents, 60), [0, 0], self.describe_all())
        failing = self.run_job(port, "jobC", [PY, "-c", "import sys; sys.exit(5)"])
        codes = self.wait_all(failing, 60)
        self.assertIn(5, codes, self.describe_all())
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
