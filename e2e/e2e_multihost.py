"""End-to-end across pod-like hosts: each agent runs in its own network and UTS
namespace (e2e/netns.py), with its own address, hostname and /etc/hosts, so
loopback is no longer shared and an address that only works on one node shows.

The address contract (issue 6, "One address contract"; docs/environment.md):
MASTER_ADDR, PET_MASTER_ADDR, JAX_COORDINATOR_ADDRESS, DMLC_TRACKER_URI and
TF_CONFIG's cluster are byte-identical on every node and every worker, and the
master address resolves and is reachable from every host. A nested static
torchrun, as docs/environment.md documents it, depends on exactly that.

Skipped where network namespaces are not allowed (needs root)."""

import glob
import ipaddress
import json
import os
import subprocess
import sys
import time
import unittest

import harness
import netns
from harness import E2ETestCase, PY

COORDINATOR_PORT = 29400  # the defaults: every host has its own ports
MASTER_PORT = 29500
ADDR_CONTRACT = [PY, harness.worker("addr_contract.py")]
TORCHRUN = "/usr/bin/torchrun"

# The variables every worker of a job must see byte for byte the same.
CONTRACT_VARS = ["MASTER_ADDR", "MASTER_PORT", "PET_MASTER_ADDR", "PET_MASTER_PORT",
                 "JAX_COORDINATOR_ADDRESS", "DMLC_TRACKER_URI", "DMLC_TRACKER_PORT",
                 "TF_CONFIG.cluster"]


def contract_values(env):
    """The contract variables of one worker's environment (None when unset)."""
    values = {k: env.get(k) for k in CONTRACT_VARS if "." not in k}
    cluster = None
    if env.get("TF_CONFIG") is not None:
        try:
            cluster = json.dumps(json.loads(env["TF_CONFIG"]).get("cluster"),
                                 separators=(",", ":"), sort_keys=True)
        except ValueError:
            cluster = "unparsable: " + env["TF_CONFIG"][:200]
    values["TF_CONFIG.cluster"] = cluster
    return values


def side_by_side(rows):
    """rows: [(label, {var: value})] -> a table, one row per worker, one column
    per variable (TF_CONFIG's cluster below, one line per worker), then the
    variables whose values differ."""
    short = [v for v in CONTRACT_VARS if v != "TF_CONFIG.cluster"]
    cells = [["worker"] + short] + [[label] + [str(vals.get(v)) for v in short]
                                    for label, vals in rows]
    widths = [max(len(r[i]) for r in cells) for i in range(len(cells[0]))]
    lines = [" | ".join(c.ljust(w) for c, w in zip(r, widths)) for r in cells]
    lines.append("TF_CONFIG.cluster:")
    lines += ["  %s %s" % (label.ljust(widths[0]), vals.get("TF_CONFIG.cluster"))
              for label, vals in rows]
    differ = [v for v in CONTRACT_VARS if len({vals.get(v) for _, vals in rows}) > 1]
    lines.append("differ across workers: %s" % (", ".join(differ) or "none"))
    return "\n".join(lines)


def is_loopback(host):
    if host in (None, "", "localhost") or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


class MultiHostTest(E2ETestCase):

    def make_cluster(self, names, domain=None):
        cluster = self.netns_cluster(names, domain=domain)
        sys.stderr.write("\n%s: %s, set up in %.3fs\n"
                         % (self.id(), cluster.describe(), cluster.setup_seconds))
        return cluster

    def read_contract_files(self, expected):
        files = sorted(glob.glob(self.path("contract", "*.json")))
        self.assertEqual(len(files), expected,
                         "worker result files: %s\n%s" % (files, self.describe_all()))
        records = []
        for f in files:
            with open(f) as fh:
                records.append(json.load(fh))
        records.sort(key=lambda r: int(r["env"]["RANK"]))
        return records

    def assert_address_contract(self, cluster, records):
        """Byte-identical contract variables on every worker, a master address
        that is not loopback, that resolves and that reaches rank 0's listener
        from every host, and TF_CONFIG hosts that resolve to their node."""
        rows = []
        for r in records:
            e = r["env"]
            label = "rank %s (node %s/%s on %s)" % (e.get("RANK"), e.get("GROUP_RANK"),
                                                    e.get("LOCAL_RANK"), r["hostname"])
            rows.append((label, contract_values(e)))
        table = side_by_side(rows)
        for var in CONTRACT_VARS:
            values = {vals[var] for _, vals in rows}
            self.assertEqual(len(values), 1, "%s differs across workers:\n%s"
                             % (var, table))
        master = rows[0][1]["MASTER_ADDR"]
        self.assertFalse(is_loopback(master),
                         "MASTER_ADDR is a loopback address, which other hosts cannot reach:\n"
                         + table)
        by_name = {h.name: h for h in cluster.hosts}
        host0_addr = by_name[records[0]["hostname"]].addr
        reach = ["  %s: resolved %s, %s" % (label, r["resolved"], r["reach"])
                 for (label, _), r in zip(rows, records)]
        for r in records:
            self.assertEqual(r["resolved"], [host0_addr],
                             "MASTER_ADDR %r must resolve to rank 0's host %s on every host:\n%s"
                             % (master, host0_addr, "\n".join(reach)))
            self.assertTrue(r["reach"]["ok"], "MASTER_ADDR:MASTER_PORT not reachable from "
                            "every host:\n%s" % "\n".join(reach))
        self.assertEqual(records[0]["rank0_heard"], list(range(len(records))),
                         "ranks rank 0's listener heard from\n" + "\n".join(reach))
        # TF_CONFIG: the entries of node n name an address of node n's host.
        nproc = int(records[0]["env"]["LOCAL_WORLD_SIZE"])
        node_host = {int(r["env"]["GROUP_RANK"]): by_name[r["hostname"]] for r in records}
        for r in records:
            cluster_json = json.loads(r["env"]["TF_CONFIG"])["cluster"]["worker"]
            for i, entry in enumerate(cluster_json):
                host = entry.rsplit(":", 1)[0].strip("[]")
                self.assertEqual(r["tf_hosts_resolved"].get(host), [node_host[i // nproc].addr],
                                 "TF_CONFIG worker %d (%s) seen from %s must resolve to node "
                                 "%d's host %s" % (i, entry, r["hostname"], i // nproc,
                                                   node_host[i // nproc]))
        sys.stderr.write("address contract holds:\n%s\n" % table)

    # -- the harness itself --

    def test_netns_hosts_have_own_names_addresses_and_teardown(self):
        names = ["pod-a", "pod-b", "pod-c", "pod-d"]
        cluster = self.make_cluster(names, domain="sub.default.svc.cluster.local")
        self.assertLess(cluster.setup_seconds, 10.0, cluster.describe())
        listener = cluster.start(cluster.hosts[0], "listener", [
            PY, "-c", "import socket, time\n"
            "s = socket.socket(); s.bind(('0.0.0.0', 7000)); s.listen(8)\n"
            "open('%s', 'w').close()\n"
            "while True: c, _ = s.accept(); c.sendall(socket.gethostname().encode()); c.close()"
            % self.path("listening")])
        self.wait_for_files(["listening"], 10)
        probe = ("import socket, sys\n"
                 "print(socket.gethostname())\n"
                 "for n in sys.argv[1:]: print(n, socket.gethostbyname(n))\n"
                 "c = socket.create_connection(('pod-a', 7000), timeout=5)\n"
                 "print('reached', c.recv(64).decode())\n")
        fqdns = [h.fqdn for h in cluster.hosts]
        for h in cluster.hosts:
            r = cluster.run(h, [PY, "-c", probe] + names + fqdns)
            self.assertEqual(r.returncode, 0, r.stderr)
            want = [h.name] + ["%s %s" % (x.name, x.addr) for x in cluster.hosts] + \
                ["%s %s" % (x.fqdn, x.addr) for x in cluster.hosts] + ["reached pod-a"]
            self.assertEqual(r.stdout.split("\n")[:-1], want, "on " + h.name)
        # A name that resolves late, seen by a process that is already running.
        late = cluster.start(cluster.hosts[3], "late", [
            PY, "-c", "import socket, time\n"
            "while True:\n"
            "  try: print(socket.gethostbyname('late-name.example'), flush=True); break\n"
            "  except OSError: time.sleep(0.05)\n"])
        time.sleep(0.3)
        self.assertTrue(late.running(), late.describe())
        cluster.add_name("late-name.example", cluster.hosts[1])
        self.assertEqual(late.wait(10), 0, late.describe())
        self.assertEqual(late.stdout.strip(), cluster.hosts[1].addr)
        # The loopback of one host is not the loopback of another.
        r = cluster.run(cluster.hosts[1], [PY, "-c", "import socket\n"
                                           "socket.create_connection(('127.0.0.1', 7000), 2)"])
        self.assertNotEqual(r.returncode, 0, "host 1 reached host 0's listener on 127.0.0.1")
        self.assertTrue(listener.running(), listener.describe())
        started = time.monotonic()
        cluster.destroy()
        teardown = time.monotonic() - started
        sys.stderr.write("netns: 4 hosts set up in %.3fs, torn down in %.3fs\n"
                         % (cluster.setup_seconds, teardown))
        listed = subprocess.run(["ip", "netns", "list"], stdout=subprocess.PIPE,
                                text=True).stdout
        self.assertNotIn(cluster.id, listed)
        for ns in cluster.namespaces:
            self.assertFalse(os.path.exists(os.path.join(netns.NETNS_ETC, ns)), ns)
        self.assertFalse(listener.running())
        self.assert_no_leftovers()

    # -- the address contract --

    def test_env_contract_byte_identical_across_four_hosts(self):
        names = ["host-0", "host-1", "host-2", "host-3"]
        cluster = self.make_cluster(names)
        agents = []
        for i, h in enumerate(cluster.hosts):
            args = ["--nnodes=4", "--node-rank=%d" % i, "--node-id=%s" % h.name,
                    "--coordinator=%s:%d" % (names[0], COORDINATOR_PORT),
                    "--master-port=%d" % MASTER_PORT, "--nproc-per-node=2",
                    "--job-id=contract", "--join-timeout=60s"]
            agents.append(cluster.start(h, "node%d" % i,
                                        [harness.TRAINLET, "run"] + args + ["--"] + ADDR_CONTRACT))
        self.assert_codes(agents, [0] * 4, timeout=60)
        self.assert_address_contract(cluster, self.read_contract_files(8))
        self.assert_no_leftovers()

    def test_env_contract_kubeflow_jobset_pods_without_flags(self):
        # JobSet pods <jobset>-<replicatedJob>-<jobIdx>-<podIdx> in subdomain
        # <jobset>, as Kubeflow Trainer creates them; /etc/hosts lists each
        # pod's FQDN first, as kubelet writes it. No flags: discovery only.
        jobset = "tj"
        names = ["%s-node-0-%d" % (jobset, i) for i in range(4)]
        cluster = self.make_cluster(names, domain="%s.default.svc.cluster.local" % jobset)
        agents = []
        for i, h in enumerate(cluster.hosts):
            env = self.base_env(KUBERNETES_SERVICE_HOST="10.96.0.1",
                                KUBERNETES_SERVICE_PORT="443", JOB_COMPLETION_INDEX=i,
                                PET_NNODES=4)
            agents.append(cluster.start(h, h.name, [harness.TRAINLET, "run", "--"]
                                        + ADDR_CONTRACT, env=env))
        self.assert_codes(agents, [0] * 4, timeout=60)
        files = glob.glob(self.path("contract", "*.json"))
        records = self.read_contract_files(len(files))
        self.assertEqual(len(records), int(records[0]["env"]["WORLD_SIZE"]))
        self.assertEqual(sorted({r["hostname"] for r in records}), names)
        self.assert_address_contract(cluster, records)
        self.assert_no_leftovers()

    # -- a real client: nested torchrun --

    @unittest.skipUnless(os.access(TORCHRUN, os.X_OK), "needs Debian's torchrun (python3-torch)")
    def test_nested_torchrun_two_hosts_two_workers_each_allreduce(self):
        # docs/environment.md, "Using a nested torchrun": trainlet starts one
        # torchrun per host, whose static rendezvous reads PET_NNODES,
        # PET_NODE_RANK, PET_MASTER_ADDR and PET_MASTER_PORT. torchrun 1.13 on
        # Python 3.11 needs explicit --redirects/--tee (docs/benchmarks-history.md, section 1).
        names = ["tr-0", "tr-1"]
        cluster = self.make_cluster(names)
        env = self.base_env(E2E_INIT_TIMEOUT=25)
        agents = []
        for i, h in enumerate(cluster.hosts):
            torchrun = [TORCHRUN, "--nproc_per_node=2", "--monitor_interval=0.5",
                        "--redirects=9:1", "--tee=9:1",
                        "--log_dir=%s" % self.path("torchrun-logs-%d" % i),
                        harness.worker("torchrun_allreduce.py")]
            args = ["--nnodes=2", "--node-rank=%d" % i, "--node-id=%s" % h.name,
                    "--coordinator=%s:%d" % (names[0], COORDINATOR_PORT),
                    "--master-port=%d" % MASTER_PORT, "--nproc-per-node=1",
                    "--job-id=nested", "--join-timeout=60s"]
            agents.append(cluster.start(h, "node%d" % i,
                                        [harness.TRAINLET, "run"] + args + ["--"] + torchrun,
                                        env=env))
        codes = self.wait_all(agents, timeout=90)
        results = {}
        for f in glob.glob(self.path("allreduce", "*.json")):
            with open(f) as fh:
                r = json.load(fh)
            results[r["rank"]] = r
        summary = "\n".join("  rank %d on %s: sum %g (expected %g), MASTER_ADDR=%s"
                            % (k, v["hostname"], v["sum"], v["expected"],
                               v["env"]["MASTER_ADDR"]) for k, v in sorted(results.items()))
        self.assertEqual(codes, [0, 0], "exit codes (every process's output follows); "
                         "all_reduce results:\n%s" % (summary or "  none"))
        self.assertEqual(sorted(results), [0, 1, 2, 3], summary)
        for rank, r in results.items():
            self.assertEqual((r["world"], r["sum"]), (4, 10.0), summary)
            self.assertEqual(r["hostname"], names[rank // 2], summary)
        self.assert_no_leftovers()


if __name__ == "__main__":
    unittest.main()
