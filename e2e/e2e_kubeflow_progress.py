"""End-to-end: Kubeflow Trainer's TrainJob progress (docs/kubernetes.md, "TrainJob progress").
The real binary, with the variables Trainer's TrainJobStatus plugin injects, against a test
HTTPS server that checks what Trainer's status server checks (kubeflow/trainer v2.3.0,
658725bdae5c7e3a0854d93ac6ff492e109a22ab: pkg/statusserver/server.go, auth.go,
middleware.go; pkg/apis/trainer/v1alpha1/trainjob_types.go): POST to
/apis/trainer.kubeflow.org/v1alpha1/namespaces/NS/trainjobs/NAME/status, TLS with the CA
given, "Authorization: Bearer <token>", a body of at most 64 KiB that decodes as
UpdateTrainJobStatusRequest and passes the CRD's validation. Cases: accepted (and at most one
request per 5 s), a Hugging Face-style worker with no progress file, only node 0 sends, no
variables, a refused endpoint, a silent one, 403, a certificate from another CA."""

import http.server
import json
import os
import re
import signal
import socket
import ssl
import subprocess
import threading
import time
import unittest

import harness
from harness import E2ETestCase, PY

NS, NAME = "team-a", "llama"
PATH = "/apis/trainer.kubeflow.org/v1alpha1/namespaces/%s/trainjobs/%s/status" % (NS, NAME)
WARNING = "cannot send the job's progress to Kubeflow Trainer"
RFC3339 = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)$")


def steps_worker(steps, seconds):
    return [PY, harness.worker("steps.py"), str(steps), str(seconds)]


def body_error(raw):
    """Why Trainer would answer 422 (its json decoder, then the CRD), or ""."""
    try:
        doc = json.loads(raw)
    except ValueError as e:
        return "Invalid payload: %s" % e
    if not isinstance(doc, dict):
        return "Invalid payload: not an object"
    ts = doc.get("trainerStatus")
    if ts is None:
        return ""
    if not isinstance(ts, dict):
        return "Invalid payload: trainerStatus"
    for key, top in (("progressPercentage", 100), ("estimatedRemainingSeconds", 2**31 - 1)):
        v = ts.get(key)
        if v is None:
            continue
        if type(v) is not int:  # Go's int32: 45.0 does not decode.
            return "Invalid payload: %s is not an int32" % key
        if not 0 <= v <= top:
            return "%s out of range" % key
    metrics = ts.get("metrics")
    if metrics is not None:
        if not isinstance(metrics, list) or len(metrics) > 256:
            return "metrics"
        for m in metrics:
            for f in ("name", "value"):
                if not isinstance(m, dict) or not isinstance(m.get(f), str) \
                        or not 1 <= len(m[f]) <= 64:
                    return "metrics.%s" % f
    t = ts.get("lastUpdatedTime")
    if not isinstance(t, str) or not RFC3339.match(t):
        return "lastUpdatedTime is required (RFC 3339)"
    return ""


class TrainerServer:
    """Trainer's status server as a client sees it. mode: "trainer", "silent" (never answers),
    or an HTTP status to answer always."""

    def __init__(self, cert, key, tokens, mode="trainer"):
        self.requests = []
        self.release = threading.Event()
        outer = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def answer(self, code, body):
                data = (json.dumps(body) + "\n").encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Connection", "close")
                self.end_headers()
                self.wfile.write(data)

            def refuse(self, code, message, reason):
                self.answer(code, {"kind": "Status", "apiVersion": "v1", "status": "Failure",
                                   "message": message, "reason": reason, "code": code})

            def handle_any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if 0 < length <= 65536 else b""
                r = {"method": self.command, "path": self.path, "headers": dict(self.headers),
                     "body": body.decode("utf-8", "replace"), "at": time.monotonic()}
                outer.requests.append(r)
                if mode == "silent":
                    outer.release.wait(60)
                    return
                if mode != "trainer":
                    r["code"] = mode
                    return self.refuse(mode, "scripted", "InternalError")
                auth = (self.headers.get("Authorization") or "").split()
                if length > 65536:
                    r["code"] = 413
                elif self.command != "POST" or self.path != PATH:
                    r["code"] = 404
                elif len(auth) != 2 or auth[0].lower() != "bearer" or auth[1] not in tokens:
                    r["code"] = 403
                else:
                    r["error"] = body_error(r["body"])
                    r["code"] = 422 if r["error"] else 200
                if r["code"] == 200:
                    self.answer(200, json.loads(r["body"]))
                else:
                    self.refuse(r["code"], r.get("error") or "refused", "Refused")

            do_POST = do_GET = do_PUT = handle_any

        self.httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(cert, key)
        self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.port = self.httpd.server_address[1]
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def close(self):
        self.release.set()
        self.httpd.shutdown()
        self.httpd.server_close()


class KubeflowProgressTest(E2ETestCase):

    def setUp(self):
        super().setUp()
        # A CA and the server's certificate for localhost (Trainer's is its webhook
        # certificate for <service>.<namespace>.svc), and another CA.
        d = self.path("pki")
        os.mkdir(d)

        def sh(cmd):
            subprocess.run(cmd, shell=True, cwd=d, check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL, timeout=60)

        key = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes"
        for ca in ("ca", "other-ca"):
            sh("openssl req -x509 %s -keyout %s.key -out %s.crt -days 2 -subj /CN=%s" %
               (key, ca, ca, ca))
        sh("openssl req %s -keyout server.key -out server.csr -subj /CN=localhost" % key)
        with open(os.path.join(d, "ext.cnf"), "w") as f:
            f.write("subjectAltName=DNS:localhost\nextendedKeyUsage=serverAuth\n")
        sh("openssl x509 -req -in server.csr -CA ca.crt -CAkey ca.key -CAcreateserial "
           "-days 2 -out server.crt -extfile ext.cnf")
        self.pki = d
        self.servers = []
        self.addCleanup(lambda: [s.close() for s in self.servers])

    def serve(self, mode="trainer", tokens=("token-node-0",)):
        s = TrainerServer(os.path.join(self.pki, "server.crt"),
                          os.path.join(self.pki, "server.key"), set(tokens), mode)
        self.servers.append(s)
        return s

    def trainer_env(self, port, token="token-node-0", ca="ca.crt"):
        token_file = self.path("token-%s" % token)
        with open(token_file, "w") as f:
            f.write(token + "\n")
        return self.base_env(
            KUBEFLOW_TRAINER_SERVER_URL="https://localhost:%d%s" % (port, PATH),
            KUBEFLOW_TRAINER_SERVER_CA_CERT=os.path.join(self.pki, ca),
            KUBEFLOW_TRAINER_SERVER_TOKEN=token_file)

    def run_one(self, env, steps, seconds, timeout=120):
        start = time.monotonic()
        agent = self.start_agent(["--nproc-per-node=1", "--health-port=0"],
                                 steps_worker(steps, seconds), env=env)
        self.assertEqual(agent.wait(timeout), 0, agent.describe())
        return agent, time.monotonic() - start

    def test_accepted_at_most_one_request_per_5s(self):
        server = self.serve()
        agent, wall = self.run_one(self.trainer_env(server.port), 120, 12)
        reqs = server.requests
        self.assertGreaterEqual(len(reqs), 2, agent.describe())
        # Two requests never start within 5 s of each other: in `wall` seconds, at most
        # 1 + wall/5 of them (a bound that no load can break).
        self.assertLessEqual(len(reqs), 1 + int(wall / 5), (wall, [r["at"] for r in reqs]))
        last_pct = -1
        for r in reqs:
            self.assertEqual((r["method"], r["path"], r["code"]), ("POST", PATH, 200),
                             (r, agent.describe()))
            self.assertEqual(r["headers"]["Authorization"], "Bearer token-node-0")
            self.assertEqual(r["headers"]["Content-Type"], "application/json")
            ts = json.loads(r["body"])["trainerStatus"]
            names = [m["name"] for m in ts["metrics"]]
            self.assertEqual(names, ["step", "total_steps", "loss", "lr"], r)  # no pid.
            pct = ts["progressPercentage"]
            self.assertGreaterEqual(pct, last_pct, reqs)
            last_pct = pct
        # The job succeeded: its last request is the 100%, sent after the rest of the gap.
        final = json.loads(reqs[-1]["body"])["trainerStatus"]
        self.assertEqual((final["progressPercentage"], final["estimatedRemainingSeconds"]),
                         (100, 0), reqs[-1])
        self.assertIn("the job's progress goes to Kubeflow Trainer at https://localhost:%d%s"
                      % (server.port, PATH), agent.stderr)
        self.assertNotIn(WARNING, agent.stderr)

    def test_hf_output_percentage_and_loss_together(self):
        # No progress file: a worker that prints what Hugging Face Trainer prints, read with
        # --progress-from-output (auto): its bar gives the step and total, the dict logged
        # every 5 steps the loss. Every request replaces Trainer's whole trainerStatus, so
        # each must carry both once both were printed.
        server = self.serve()
        agent = self.start_agent(["--nproc-per-node=1", "--health-port=0", "--prefix-output"],
                                 [PY, harness.worker("hf_trainer_log.py"), "150", "0.1"],
                                 env=self.trainer_env(server.port))

        def with_loss():
            return [r for r in server.requests
                    if "loss" in [m["name"] for m in
                                  json.loads(r["body"])["trainerStatus"].get("metrics", [])]]
        harness.poll_until(lambda: len(with_loss()) >= 2 or not agent.running(), 60,
                           interval=0.2, what="two requests with the loss")
        agent.signal(signal.SIGTERM)
        agent.wait(60)
        reqs = server.requests
        first = reqs.index(with_loss()[0]) if with_loss() else len(reqs)
        self.assertGreaterEqual(len(reqs) - first, 2, agent.describe())
        for r in reqs[first:]:
            self.assertEqual(r["code"], 200, r)
            ts = json.loads(r["body"])["trainerStatus"]
            names = [m["name"] for m in ts.get("metrics", [])]
            self.assertIn("progressPercentage", ts, r)
            self.assertIn("loss", names, r)
            self.assertIn("step", names, r)

    def test_only_node_0_sends(self):
        server = self.serve(tokens=("token-node-0", "token-node-1"))
        envs = {r: self.trainer_env(server.port, token="token-node-%d" % r) for r in (0, 1)}
        # Each node its own token: the server sees who sent.
        coord, mp = harness.free_ports(2)
        common = ["--nnodes=2", "--coordinator=127.0.0.1:%d" % coord, "--master-port=%d" % mp,
                  "--nproc-per-node=1", "--health-port=0", "--join-timeout=60s"]
        n = [self.start_agent(common + ["--node-rank=%d" % r, "--node-id=n%d" % r],
                              steps_worker(60, 6), name="node%d" % r, env=envs[r])
             for r in (0, 1)]
        self.assertEqual(self.wait_all(n, 120), [0, 0], self.describe_all())
        tokens = {r["headers"]["Authorization"] for r in server.requests}
        self.assertEqual(tokens, {"Bearer token-node-0"}, self.describe_all())

    def test_no_variables_nothing_sent_nothing_said(self):
        agent, _ = self.run_one(self.base_env(), 10, 1)
        self.assertNotIn("Kubeflow", agent.stderr)

    def assert_one_warning(self, agent, what):
        self.assertEqual(agent.stderr.count(WARNING), 1, agent.describe())
        self.assertIn(what, agent.stderr)

    def test_refused_one_warning(self):
        port = harness.free_port()  # nothing listens there.
        agent, _ = self.run_one(self.trainer_env(port), 30, 3)
        self.assert_one_warning(agent, "Connection refused")

    def test_403_one_warning_then_backoff(self):
        server = self.serve(mode=403)
        agent, _ = self.run_one(self.trainer_env(server.port), 120, 12)
        # Tried at once and again after 10 s: one warning for both.
        self.assertEqual(len(server.requests), 2, agent.describe())
        self.assert_one_warning(agent, "answered HTTP 403")

    def test_other_ca_one_warning(self):
        server = self.serve()
        agent, _ = self.run_one(self.trainer_env(server.port, ca="other-ca.crt"), 30, 3)
        self.assert_one_warning(agent, "does not verify against")
        self.assertEqual(server.requests, [])

    def test_silent_endpoint_never_holds_the_job(self):
        server = self.serve(mode="silent")
        agent, wall = self.run_one(self.trainer_env(server.port), 70, 7)
        # The first request times out after 5 s (one warning); the job runs and exits on its
        # own time: the agent waits for no request at exit (a bound with room for load).
        self.assertLessEqual(agent.stderr.count(WARNING), 1, agent.describe())
        self.assertIn("no answer within 5s", agent.stderr)
        self.assertLess(wall, 60, agent.describe())


if __name__ == "__main__":
    unittest.main()
