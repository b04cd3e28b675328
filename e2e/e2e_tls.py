"""End-to-end: mutual TLS between agents and the coordinator (--tls-cert,
--tls-key, --tls-ca, --tls-dir, TRAINLET_TLS_*), with certificates generated
by the openssl command line in the test's temporary directory (no key is ever
committed).

A 2-node job with TLS succeeds, on loopback and on pod-like hosts that dial
the coordinator by name; a node with a certificate from another CA, a
node with the wrong token are refused (exit 77) and a plaintext node gives up
at its join timeout (exit 69, with a hint), while the job goes on; a partial or unreadable TLS configuration is exit 78 naming the
input; the standalone coordinator serves TLS with a plaintext health port."""

import os
import subprocess
import unittest

import harness
from harness import E2ETestCase, TRAINLET

OK = ["sh", "-c", 'echo "rank=$RANK of $WORLD_SIZE"']


class Pki:
    """Two CAs ("ca", "other-ca") and certificates issued by them, each in
    cert-manager's Secret layout: <dir>/tls.crt, tls.key, ca.crt."""

    KEY = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]

    def __init__(self, root):
        self.root = root
        for ca in ("ca", "other-ca"):
            d = os.path.join(root, ca)
            os.makedirs(d, mode=0o700)
            self._openssl(["req", "-x509"] + self.KEY +
                          ["-keyout", os.path.join(d, "ca.key"), "-out",
                           os.path.join(d, "ca.crt"), "-days", "2", "-subj", "/CN=e2e-" + ca])

    def _openssl(self, args):
        r = subprocess.run(["openssl"] + args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if r.returncode != 0:
            raise AssertionError("openssl %s failed:\n%s" % (" ".join(args), r.stdout))

    def issue(self, name, sans, ca="ca", trust=None):
        """A certificate for `sans` ("DNS:x", "IP:1.2.3.4") signed by `ca`, in
        <root>/<name>/; its ca.crt is `trust` (default: `ca`)."""
        d = os.path.join(self.root, name)
        os.makedirs(d, mode=0o700)
        ca_dir = os.path.join(self.root, ca)
        ext = os.path.join(d, "ext.cnf")
        with open(ext, "w") as f:
            f.write("extendedKeyUsage=serverAuth,clientAuth\nsubjectAltName=%s\n"
                    % ",".join(sans))
        self._openssl(["req"] + self.KEY + ["-keyout", os.path.join(d, "tls.key"), "-out",
                                            os.path.join(d, "tls.csr"), "-subj", "/CN=" + name])
        self._openssl(["x509", "-req", "-in", os.path.join(d, "tls.csr"), "-CA",
                       os.path.join(ca_dir, "ca.crt"), "-CAkey", os.path.join(ca_dir, "ca.key"),
                       "-CAcreateserial", "-days", "2", "-out", os.path.join(d, "tls.crt"),
                       "-extfile", ext])
        with open(os.path.join(self.root, trust or ca, "ca.crt")) as src, \
                open(os.path.join(d, "ca.crt"), "w") as dst:
            dst.write(src.read())
        return d


class TlsTest(E2ETestCase):

    def setUp(self):
        super().setUp()
        self.pki = Pki(self.path("pki"))
        self.good = self.pki.issue("node", ["DNS:localhost", "IP:127.0.0.1"])

    def test_two_node_job_with_mutual_tls_succeeds(self):
        # Node 0 by --tls-dir, node 1 by TRAINLET_TLS_* variables.
        env1 = self.base_env(TRAINLET_TLS_CERT=os.path.join(self.good, "tls.crt"),
                             TRAINLET_TLS_KEY=os.path.join(self.good, "tls.key"),
                             TRAINLET_TLS_CA=os.path.join(self.good, "ca.crt"))
        agents = self.start_job(2, 1, OK, order=[0],
                                extra_args=["--tls-dir=%s" % self.good, "--token-file=%s"
                                            % self.token("right")])
        agents += self.start_job(2, 1, OK, order=[1], extra_args=[
            "--token-file=%s" % self.token("right")], env=env1,
            coordinator_port=self.coordinator_port, master_port=self.master_port,
            job_id=self.job_id)
        self.assert_codes(agents, [0, 0], 60)
        self.assertEqual(sorted(a.stdout.strip() for a in agents),
                         ["rank=0 of 2", "rank=1 of 2"])
        self.assertIn("mutual TLS", agents[0].stderr)
        self.assert_no_leftovers()

    def token(self, text):
        path = self.path("token-" + text)
        with open(path, "w") as f:
            f.write(text + "\n")
        return path

    def refused_then_job_goes_on(self, bad_args, bad_env=None, expect_in_stderr=(),
                                 code=harness.EXIT_REJECTED):
        """Node 0 (TLS) waits for a second node; a bad node is refused with
        `code`; a good node 1 then completes the job."""
        tok = "--token-file=%s" % self.token("right")
        node0 = self.start_job(2, 1, OK, order=[0],
                               extra_args=["--tls-dir=%s" % self.good, tok])[0]
        common = dict(coordinator_port=self.coordinator_port, master_port=self.master_port,
                      job_id=self.job_id)
        bad = self.start_agent(
            ["--nnodes=2", "--node-rank=1", "--node-id=bad",
             "--coordinator=127.0.0.1:%d" % self.coordinator_port,
             "--master-port=%d" % self.master_port, "--health-port=0", "--nproc-per-node=1",
             "--job-id=%s" % self.job_id, "--join-timeout=60s"] + list(bad_args),
            OK, name="bad", env=bad_env)
        self.assertEqual(bad.wait(30), code, bad.describe())
        for text in expect_in_stderr:
            self.assertIn(text, bad.stderr, bad.describe())
        good = self.start_job(2, 1, OK, order=[1],
                              extra_args=["--tls-dir=%s" % self.good, tok], **common)[0]
        self.assert_codes([node0, good], [0, 0], 60)
        self.assert_no_leftovers()

    def test_node_with_certificate_from_another_ca_is_refused(self):
        # It trusts the job's CA (so it accepts the coordinator), but the
        # coordinator does not accept its certificate.
        stranger = self.pki.issue("stranger", ["DNS:localhost"], ca="other-ca", trust="ca")
        self.refused_then_job_goes_on(
            ["--tls-dir=%s" % stranger, "--token-file=%s" % self.token("right")],
            expect_in_stderr=["the client certificate (/CN=stranger) is not accepted",
                              "--tls-ca",
                              # The start-up warning about its certificate.
                              "does not verify against the CA"])
        self.assertIn("rejected Join from", self.procs[0].stderr, "the coordinator's log")
        self.assertIn("(/CN=stranger) is not accepted", self.procs[0].stderr)

    def test_plaintext_node_is_refused(self):
        # The TLS coordinator closes its connections before HTTP/2, which a
        # client cannot tell from a coordinator not up yet: it retries until
        # its join timeout, then says what to check.
        self.refused_then_job_goes_on(
            ["--token-file=%s" % self.token("right"), "--join-timeout=4s"],
            expect_in_stderr=["closes plaintext connections", "--tls-cert"],
            code=harness.EXIT_UNAVAILABLE)

    def test_right_certificate_wrong_token_is_refused(self):
        self.refused_then_job_goes_on(
            ["--tls-dir=%s" % self.good, "--token-file=%s" % self.token("wrong")],
            expect_in_stderr=["wrong job token"])

    def test_partial_configuration_is_exit_78_naming_the_missing_option(self):
        p = self.start_agent(["--nnodes=1", "--tls-cert=%s" % os.path.join(self.good, "tls.crt"),
                              "--tls-ca=%s" % os.path.join(self.good, "ca.crt")], OK)
        self.assertEqual(p.wait(15), harness.EXIT_CONFIG, p.describe())
        self.assertIn("--tls-key (TRAINLET_TLS_KEY)", p.stderr)
        self.assertEqual(p.stdout, "", "no worker may start")

    def test_unreadable_file_is_exit_78_naming_the_path(self):
        missing = self.path("nowhere", "ca.crt")
        p = self.start_agent(["--nnodes=1", "--tls-dir=%s" % self.good, "--tls-ca=%s" % missing],
                             OK)
        self.assertEqual(p.wait(15), harness.EXIT_CONFIG, p.describe())
        self.assertIn("--tls-ca: cannot read %s" % missing, p.stderr)
        c = self.start("coordinator", [TRAINLET, "coordinator", "--tls-dir=%s" % self.path("no")])
        self.assertEqual(c.wait(15), harness.EXIT_CONFIG, c.describe())
        self.assertIn("--tls-dir's tls.crt: cannot read", c.stderr)

    def test_standalone_coordinator_with_tls_and_plaintext_health(self):
        port, health_port, master_port = harness.free_ports(3)
        job = "tls-" + self.tag[:8]
        coord = self.start("coordinator", [
            TRAINLET, "coordinator", "--nnodes=2", "--port=%d" % port,
            "--bind-addr=127.0.0.1", "--job-id=%s" % job, "--tls-dir=%s" % self.good,
            "--health-port=%d" % health_port])
        harness.poll_until(lambda: "listening" in coord.stderr, 15, what="coordinator up")
        probe = subprocess.run([TRAINLET, "health", "127.0.0.1:%d" % health_port],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=15)
        self.assertEqual((probe.returncode, probe.stdout.strip()), (0, "SERVING"), probe.stderr)
        # The coordinator port itself wants TLS: a plaintext health check fails.
        plain = subprocess.run([TRAINLET, "health", "127.0.0.1:%d" % port],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               timeout=15)
        self.assertEqual(plain.returncode, 1, plain.stdout + plain.stderr)
        agents = [self.start_agent(harness.standalone_agent_args(i, 2, port, job, master_port)
                                   + ["--tls-dir=%s" % self.good], OK, name="agent%d" % i)
                  for i in range(2)]
        self.assert_codes(agents, [0, 0], 60)
        self.assertEqual(coord.wait(15), 0, coord.describe())
        self.assertIn("mutual TLS", coord.stderr)
        self.assert_no_leftovers()


class TlsMultiHostTest(E2ETestCase):
    """Pod-like hosts: agents dial the coordinator by its DNS name, and the
    certificate (one for the whole job, as a cert-manager Certificate with the
    coordinator's name) must carry that name."""

    def test_two_hosts_dial_the_coordinator_by_name(self):
        cluster = self.netns_cluster(["tls-node-0", "tls-node-1"], domain="tls-job")
        coordinator = cluster.hosts[0].fqdn
        pki = Pki(self.path("pki"))
        certs = pki.issue("job", ["DNS:" + coordinator])
        port, master_port = harness.free_ports(2)
        agents = []
        for i, h in enumerate(cluster.hosts):
            agents.append(cluster.start(h, "node%d" % i, [
                TRAINLET, "run", "--nnodes=2", "--node-rank=%d" % i, "--nproc-per-node=1",
                "--coordinator=%s:%d" % (coordinator, port), "--master-port=%d" % master_port,
                "--health-port=0", "--join-timeout=60s", "--tls-dir=%s" % certs,
                "--", "sh", "-c", 'echo "rank=$RANK of $WORLD_SIZE"']))
        self.assert_codes(agents, [0, 0], 90)
        self.assertEqual(sorted(a.stdout.strip() for a in agents),
                         ["rank=0 of 2", "rank=1 of 2"])
        # A certificate without the coordinator's name is refused by the
        # client: the name it dials is checked.
        wrong = pki.issue("wrong-name", ["DNS:elsewhere." + "tls-job"])
        port2 = harness.free_port()
        node0 = cluster.start(cluster.hosts[0], "wrong0", [
            TRAINLET, "run", "--nnodes=2", "--node-rank=0", "--nproc-per-node=1",
            "--coordinator=%s:%d" % (coordinator, port2), "--master-port=%d" % master_port,
            "--health-port=0", "--join-timeout=60s", "--tls-dir=%s" % wrong, "--", "true"])
        self.assertEqual(node0.wait(30), harness.EXIT_REJECTED, node0.describe())
        self.assertIn("names %s" % coordinator, node0.stderr)
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
