"""The controller's views in real clients (docs/controller-views.md).

A test-only server (controller/testing/fake_controller_http.cc: the real
HttpServer over a sample snapshot that changes every second) is:
  - loaded in headless Chromium (Debian's `chromium`), driven over the DevTools
    protocol: the rendered DOM shows the jobs, the node rows, the workers, the
    restarts with their causes, GPU health; a value changes after the page's
    own poll, in the same document (no reload); strings from the network stay
    text; a screenshot is saved (E2E_UPDATE_SCREENSHOT=1 writes
    docs/controller-page.png);
  - scraped for `promtool check metrics`, and by a real `prometheus`, whose
    query API then answers with the series;
  - asked by `trainlet status` (TRAINLET_BIN), table and JSON.
Each part skips, saying why, when its program is missing.
"""

import base64
import json
import os
import shutil
import socket
import struct
import subprocess
import tempfile
import time
import unittest
import signal
import urllib.parse
import urllib.request

import harness

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
FAKE = os.environ.get("E2E_FAKE_CONTROLLER_HTTP") or os.path.join(
    ROOT, "build", "controller", "fake_controller_http")
TRAINLET = os.environ.get("TRAINLET_BIN") or os.path.join(ROOT, "build", "trainlet")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
PROMTOOL = shutil.which("promtool")
PROMETHEUS = shutil.which("prometheus")


def get(url, timeout=5):
    with urllib.request.urlopen(url, timeout=timeout) as r:
        return r.status, r.headers, r.read()


def get_ok(url):
    try:
        return get(url, timeout=2)[0] == 200
    except OSError:
        return False


def poll_until(predicate, timeout, what):
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError("timed out after %.0fs waiting for %s" % (timeout, what))
        time.sleep(0.1)


class FakeController:
    """fake_controller_http on a free port; stopped by pid."""

    def __init__(self):
        self.proc = subprocess.Popen([FAKE], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True)
        line = self.proc.stdout.readline()
        if not line.startswith("port "):
            # No port line: it exited (stdout closed), so stderr can be read.
            err = self.proc.stderr.read() if self.proc.wait(10) is not None else ""
            self.stop()
            raise AssertionError("fake_controller_http did not start: %r %s" % (line, err))
        self.port = int(line.split()[1])
        self.url = "http://127.0.0.1:%d" % self.port

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()
        self.proc.stderr.close()


class DevTools:
    """The DevTools protocol over a minimal WebSocket client (RFC 6455, text
    frames; Debian's python3 has no websocket module)."""

    def __init__(self, ws_url):
        u = urllib.parse.urlparse(ws_url)
        self.sock = socket.create_connection((u.hostname, u.port), timeout=30)
        key = base64.b64encode(os.urandom(16)).decode()
        self.sock.sendall((
            "GET %s HTTP/1.1\r\nHost: %s:%d\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
            "Sec-WebSocket-Key: %s\r\nSec-WebSocket-Version: 13\r\n\r\n" %
            (u.path, u.hostname, u.port, key)).encode())
        head = b""
        while b"\r\n\r\n" not in head:
            chunk = self.sock.recv(1)
            if not chunk:
                raise AssertionError("DevTools closed the WebSocket handshake")
            head += chunk
        if b" 101 " not in head.split(b"\r\n")[0]:
            raise AssertionError("DevTools refused the WebSocket: %r" % head)
        self.next_id = 0

    def close(self):
        self.sock.close()

    def _recv_exact(self, n):
        data = b""
        while len(data) < n:
            chunk = self.sock.recv(n - len(data))
            if not chunk:
                raise AssertionError("DevTools closed the WebSocket")
            data += chunk
        return data

    def _send(self, text):
        payload = text.encode()
        header = bytes([0x81])
        n = len(payload)
        if n < 126:
            header += bytes([0x80 | n])
        elif n < 65536:
            header += bytes([0x80 | 126]) + struct.pack(">H", n)
        else:
            header += bytes([0x80 | 127]) + struct.pack(">Q", n)
        mask = os.urandom(4)
        masked = bytes(b ^ mask[i % 4] for i, b in enumerate(payload))
        self.sock.sendall(header + mask + masked)

    def _recv_message(self):
        message = b""
        while True:
            b0, b1 = self._recv_exact(2)
            n = b1 & 0x7F
            if n == 126:
                n = struct.unpack(">H", self._recv_exact(2))[0]
            elif n == 127:
                n = struct.unpack(">Q", self._recv_exact(8))[0]
            payload = self._recv_exact(n)
            opcode = b0 & 0x0F
            if opcode == 0x8:
                raise AssertionError("DevTools closed the WebSocket")
            if opcode in (0x9, 0xA):  # ping/pong: ignore
                continue
            message += payload
            if b0 & 0x80:
                return message.decode()

    def call(self, method, **params):
        self.next_id += 1
        self._send(json.dumps({"id": self.next_id, "method": method, "params": params}))
        while True:
            msg = json.loads(self._recv_message())
            if msg.get("id") == self.next_id:
                if "error" in msg:
                    raise AssertionError("%s: %s" % (method, msg["error"]))
                return msg["result"]

    def eval(self, expression):
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise AssertionError("page script failed: %s" % result["exceptionDetails"])
        return result["result"].get("value")


def open_browser(test, tmp, start_process):
    """Headless Chromium (Debian's) on about:blank, stopped by pid at the
    test's cleanup; its first page's DevTools connection."""
    profile = os.path.join(tmp, "chromium")
    browser = start_process([
        CHROMIUM, "--headless=new", "--no-sandbox", "--disable-gpu",
        "--disable-dev-shm-usage", "--no-first-run", "--no-default-browser-check",
        "--disable-extensions", "--disable-background-networking",
        "--remote-debugging-address=127.0.0.1", "--remote-debugging-port=0",
        "--user-data-dir=" + profile, "--window-size=1800,900", "about:blank"])
    port_file = os.path.join(profile, "DevToolsActivePort")

    def read(path):
        with open(path, errors="replace") as f:
            return f.read()
    poll_until(lambda: (os.path.exists(port_file) and "\n" in read(port_file))
               or browser.poll() is not None, 60, "chromium's DevToolsActivePort")
    if browser.poll() is not None:
        test.fail("chromium exited: %s" % read(browser.log_path)[-2000:])
    devtools_port = int(read(port_file).split("\n")[0])
    _, _, body = get("http://127.0.0.1:%d/json/list" % devtools_port)
    page = [t for t in json.loads(body) if t["type"] == "page"][0]
    cdp = DevTools(page["webSocketDebuggerUrl"])
    test.addCleanup(cdp.close)
    return cdp


@unittest.skipUnless(os.path.exists(FAKE), "no fake_controller_http at %s (ninja fake_controller_http)"
                     % FAKE)
class ControllerViewsTest(unittest.TestCase):

    def setUp(self):
        self.fake = FakeController()
        self.addCleanup(self.fake.stop)
        self.tmp = tempfile.mkdtemp(prefix="e2e_views_")
        self.addCleanup(shutil.rmtree, self.tmp, True)

    def start_process(self, args):
        """Starts `args` with its output in a log file (a pipe nobody reads
        could fill and stall it); stopped by pid at cleanup."""
        log_path = os.path.join(self.tmp, os.path.basename(args[0]) + ".log")
        log = open(log_path, "wb")
        proc = subprocess.Popen(args, stdout=log, stderr=subprocess.STDOUT)
        proc.log_path = log_path

        def stop():
            if proc.poll() is None:
                proc.terminate()
                try:
                    proc.wait(10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
            log.close()
        self.addCleanup(stop)
        return proc

    # ---- The page, in a real browser.

    @unittest.skipUnless(CHROMIUM, "chromium is not installed (apt-get install chromium)")
    def test_page_in_headless_chromium_updates_live(self):
        cdp = open_browser(self, self.tmp, self.start_process)
        cdp.call("Page.enable")
        cdp.call("Page.navigate", url=self.fake.url + "/")
        poll_until(lambda: (cdp.eval("document.getElementById('polls') ? "
                                     "Number(document.getElementById('polls').textContent) : 0")
                            or 0) >= 1, 20, "the page's first poll of /api/jobs")
        # A mark in this document: a reload would lose it.
        cdp.eval("window.__e2eMark = 'same-document'; 1")

        jobs = cdp.eval("Array.from(document.querySelectorAll('section[data-job]'))"
                        ".map(s => s.getAttribute('data-job'))")
        self.assertEqual(jobs, ["demo", "done", "odd\"job\\<b>&\n", "wait"])
        # The open job's first poll of its detail may land after the first
        # summary: wait for its node rows.
        poll_until(lambda: cdp.eval("document.querySelectorAll('section[data-job=\"demo\"] "
                                    "tr[data-node]').length") == 4, 20, "demo's node rows")
        nodes = cdp.eval("Array.from(document.querySelectorAll('section[data-job=\"demo\"] "
                         "tr[data-node]')).map(r => [r.getAttribute('data-node'), "
                         "r.querySelector('.node-rank').textContent, "
                         "r.querySelector('.up').textContent, "
                         "r.querySelector('.ranks').textContent, r.className])")
        # The lost node: its last state greyed, no rank, counted nowhere.
        self.assertEqual(nodes, [["demo-node-0", "0", "up", "0-1", "up"],
                                 ["demo-node-1", "1", "up", "2-3", "up"],
                                 ["demo-node-2", "2", "stale", "4-5", "stale"],
                                 ["demo-node-3", "-", "lost", "-", "lost"]])
        self.assertLess(float(cdp.eval(
            "getComputedStyle(document.querySelector('tr[data-node=\"demo-node-3\"] td'))"
            ".opacity")), 1)
        self.assertEqual(cdp.eval("document.querySelector('section[data-job=\"demo\"] "
                                  ".nodes-up b').textContent"), "2/3 (1 lost)")
        text = cdp.eval("document.querySelector('section[data-job=\"demo\"]').innerText")
        for expected in ["r0 pid 4100", "hung", "exit 1", "worker 0 (rank 4) exited with code 1",
                         "hung: no progress for 60s", "1: fatal", "loss=0.31", "5.00/s",
                         "thread 5201 state D", "suspect: round 3"]:
            self.assertIn(expected, text)
        # A worker the agent stopped shows as stopped, not as a failure.
        demo2 = cdp.eval("document.querySelector('tr[data-node=\"demo-node-2\"] .workers')"
                         ".innerText")
        self.assertIn("stopped", demo2)
        self.assertNotIn("exit 143", demo2)
        # The job's headline is its root cause; its start, duration, command.
        self.assertTrue(cdp.eval("document.querySelector('section[data-job=\"demo\"] .headline')"
                                 ".textContent").startswith(
            "rank 3 on demo-node-1 hung: no progress for 60s at "))
        self.assertRegex(cdp.eval("document.querySelector('section[data-job=\"demo\"] .started')"
                                  ".textContent"), r"^started 1h00m ago$")
        self.assertEqual(cdp.eval("document.querySelector('section[data-job=\"demo\"] .command')"
                                  ".textContent"), "python train.py --epochs 10")
        self.assertRegex(cdp.eval("document.querySelector('section[data-job=\"demo\"] .duration')"
                                  ".textContent"), r"^running for 1h00m$")
        # Sparklines of the step rate and the loss, drawn in the page.
        for kind in ("rate", "loss"):
            points = cdp.eval("document.querySelector('section[data-job=\"demo\"] "
                              "svg.sparkline.%s polyline').getAttribute('points')" % kind)
            self.assertGreaterEqual(len(points.split()), 20, kind)
        # The rounds, with the restarts' causes.
        rounds = cdp.eval("Array.from(document.querySelectorAll('section[data-job=\"demo\"] "
                          "ol.timeline li.round')).map(r => r.innerText)")
        self.assertEqual(len(rounds), 3)
        self.assertIn("restarted after: worker 0 (rank 4) exited with code 1", rounds[1])
        self.assertIn("ended by: rank 3 on demo-node-1 hung", rounds[1])
        # The job's goodput (docs/goodput.md): its ETTR and a bar whose
        # segments are the phases, each as wide as its share of the wall time.
        self.assertEqual(cdp.eval("document.querySelector('section[data-job=\"demo\"] "
                                  ".goodput .ettr').textContent"), "ETTR 94.9%")
        segs = cdp.eval("Array.from(document.querySelectorAll('section[data-job=\"demo\"] "
                        ".goodput .bar .seg')).map(s => [s.getAttribute('data-phase'), "
                        "Number(s.getAttribute('data-ms')), s.getBoundingClientRect().width])")
        self.assertEqual([s[0] for s in segs],
                         ["productive", "startup", "detection", "restart", "rewarm", "redone"])
        wall = sum(s[1] for s in segs)
        width = sum(s[2] for s in segs)
        self.assertGreater(width, 100)
        for phase, ms, w in segs:
            self.assertAlmostEqual(w / width, ms / wall, delta=0.01, msg=phase)
        # Each restart: who failed, and what it cost, the job's numbers.
        costs = cdp.eval("Array.from(document.querySelectorAll('section[data-job=\"demo\"] "
                         "li.restart .restart-cost')).map(c => [c.getAttribute('data-node'), "
                         "c.getAttribute('data-rank'), c.getAttribute('data-detection-ms'), "
                         "c.getAttribute('data-redone-steps'), c.innerText])")
        self.assertEqual([c[:4] for c in costs], [["demo-node-1", "3", "60000", "-1"],
                                                  ["demo-node-2", "4", "2000", "40"]])
        self.assertIn("lost 50.0s: detection 2.0s, restart 9.0s, re-warm 21.0s, redone 18.0s "
                      "(40 steps)", costs[1][4])
        self.assertIn("restart-cost", cdp.eval(
            "document.querySelector('section[data-job=\"demo\"] ol.timeline li.round"
            "[data-round=\"2\"]').innerHTML"))
        # The finished job is collapsed, and its nodes are not fetched.
        self.assertFalse(cdp.eval("document.querySelector('section[data-job=\"done\"] details')"
                                  ".open"))
        self.assertEqual(cdp.eval("performance.getEntriesByType('resource').filter(e => "
                                  "e.name.includes('/api/jobs/done')).length"), 0)
        self.assertGreater(cdp.eval("performance.getEntriesByType('resource').filter(e => "
                                    "e.name.includes('/api/jobs/demo')).length"), 0)
        self.assertIn("ran 59m00s", cdp.eval("document.querySelector('section[data-job=\"done\"]')"
                                             ".innerText"))
        # A job waiting for nodes says so.
        self.assertRegex(cdp.eval("document.querySelector('section[data-job=\"wait\"] .waiting')"
                                  ".textContent"),
                         r"^waiting for 1 more node \(min 2\), giving up in 4m\d\ds$")
        self.assertEqual(cdp.eval("document.querySelector('section[data-job=\"demo\"] "
                                  ".lost-nodes b').textContent"), "demo-node-3")
        gpu_title = cdp.eval("Array.from(document.querySelectorAll('section[data-job=\"demo\"] "
                             ".gpus .badge.fatal')).map(b => b.title)")
        self.assertEqual(gpu_title, ["GPU-2 - uncorrectable ECC error (Xid 48)"])
        # Preflight: the job names its bad node; each node has a badge, its
        # failed checks with their reasons, every check on hover.
        self.assertEqual(cdp.eval("document.querySelector('section[data-job=\"demo\"] "
                                  ".preflight-bad').textContent"),
                         "preflight failed on demo-node-1")
        badges = cdp.eval("Array.from(document.querySelectorAll('section[data-job=\"demo\"] "
                          "tr[data-node]')).map(r => [r.getAttribute('data-node'), "
                          "r.querySelector('td.preflight').innerText.split('\\n')[0], "
                          "(r.querySelector('td.preflight .badge') || {className: ''}).className])")
        self.assertEqual(badges, [["demo-node-0", "passed", "badge passed"],
                                  ["demo-node-1", "2 failed", "badge failed"],
                                  ["demo-node-2", "-", ""],
                                  ["demo-node-3", "1 failed", "badge failed"]])
        failed = cdp.eval("Array.from(document.querySelectorAll('tr[data-node=\"demo-node-1\"] "
                          ".check-failed')).map(d => [d.getAttribute('data-check'), d.textContent])")
        self.assertEqual(failed, [
            ["gpu_ecc", "gpu_ecc: GPU 1 (GPU-2) has 1 uncorrectable ECC error"],
            ["dns", "dns: 1 of 3 names do not resolve: demo-node-2 (Domain name not found)"]])
        self.assertEqual(cdp.eval("getComputedStyle(document.querySelector("
                                  "'tr[data-node=\"demo-node-1\"] .check-failed')).color"),
                         "rgb(180, 35, 24)")  # --bad
        hover = cdp.eval("document.querySelector('tr[data-node=\"demo-node-0\"] td.preflight "
                         ".badge').title")
        self.assertIn("round 3, 118ms", hover)
        self.assertIn("path_round_trip: skipped - no --preflight-path", hover)
        self.assertIn("gpu_ecc: pass - no uncorrectable ECC errors on 2 GPUs", hover)
        self.assertIn("link to demo-node-1: 1.25 GB/s, rtt 0.120 ms", hover)

        # A node id with markup in it stays text: no element was made of it.
        poll_until(lambda: cdp.eval("document.querySelectorAll('section[data-job^=\"odd\"] "
                                    "tr[data-node]').length") == 1, 20, "odd's node row")
        self.assertEqual(cdp.eval("document.querySelectorAll('script').length"), 1)
        self.assertIn("<script>alert(1)</script>",
                      cdp.eval("document.querySelector('section[data-job^=\"odd\"] .node-id')"
                               ".textContent"))
        # So does a preflight reason with markup, and the bad node's name.
        self.assertEqual(cdp.eval("document.querySelectorAll('img').length"), 0)
        self.assertIn("<img src=x onerror=alert(2)>",
                      cdp.eval("document.querySelector('section[data-job^=\"odd\"] "
                               ".check-failed').textContent"))
        self.assertIn("<script>alert(1)</script>",
                      cdp.eval("document.querySelector('section[data-job^=\"odd\"] "
                               ".preflight-bad').textContent"))

        step_js = ("document.querySelector('tr[data-node=\"demo-node-0\"] .step').textContent")
        # The poll count first: a poll that lands between the two reads then
        # moves the step past `first` and counts as a later poll, as it is.
        polls = int(cdp.eval("document.getElementById('polls').textContent"))
        first = int(cdp.eval(step_js))
        later = poll_until(lambda: (lambda v: v if v > first else None)(int(cdp.eval(step_js))),
                           10, "the step of demo-node-0 to move past %d" % first)
        self.assertGreater(later, first)
        self.assertGreater(int(cdp.eval("document.getElementById('polls').textContent")), polls)
        self.assertEqual(cdp.eval("window.__e2eMark"), "same-document",
                         "the page reloaded instead of updating its DOM")
        self.assertEqual(cdp.eval("document.getElementById('conn').textContent"), "live")

        shot = base64.b64decode(cdp.call("Page.captureScreenshot", format="png")["data"])
        self.assertEqual(shot[:8], b"\x89PNG\r\n\x1a\n")
        with open(os.path.join(self.tmp, "controller-page.png"), "wb") as f:
            f.write(shot)
        if os.environ.get("E2E_UPDATE_SCREENSHOT"):
            with open(os.path.join(ROOT, "docs", "controller-page.png"), "wb") as f:
                f.write(shot)

        # The controller goes away: the page says so and keeps what it showed.
        self.fake.stop()
        poll_until(lambda: "unreachable" in cdp.eval(
            "document.getElementById('conn').textContent"), 10, "the page to notice")
        self.assertEqual(cdp.eval("document.querySelectorAll('section[data-job]').length"), 4)

    # ---- /metrics, checked by Prometheus's own tools.

    @unittest.skipUnless(PROMTOOL, "promtool is not installed (apt-get install prometheus)")
    def test_metrics_pass_promtool_check(self):
        status, headers, body = get(self.fake.url + "/metrics")
        self.assertEqual(status, 200)
        self.assertEqual(headers["Content-Type"], "text/plain; version=0.0.4; charset=utf-8")
        check = subprocess.run([PROMTOOL, "check", "metrics"], input=body,
                               capture_output=True, timeout=60)
        self.assertEqual(check.returncode, 0, (check.stdout + check.stderr).decode())
        self.assertIn(b'trainlet_job_nodes_up{job_id="demo"} 2\n', body)
        self.assertIn(b'trainlet_preflight_check{job_id="demo",node_id="demo-node-1",check="dns",'
                      b'outcome="fail"} 1\n', body)
        self.assertIn(b'trainlet_preflight_failed_checks{job_id="demo",node_id="demo-node-1"} 2\n',
                      body)

    def test_grafana_panels_use_metrics_the_controller_serves(self):
        import re
        with open(os.path.join(ROOT, "docs", "grafana-trainlet.json")) as f:
            dashboard = json.load(f)
        _, _, body = get(self.fake.url + "/metrics")
        served = set(re.findall(r"^# TYPE (\S+) ", body.decode(), re.M))
        titles = [p["title"] for p in dashboard["panels"]]
        for wanted in ("Job state", "Failures", "Loss", "Restarts"):
            self.assertTrue(any(t.startswith(wanted) for t in titles), (wanted, titles))
        for panel in dashboard["panels"]:
            for target in panel["targets"]:
                names = re.findall(r"trainlet_[a-z_]+", target["expr"])
                self.assertTrue(names, target["expr"])
                for name in names:
                    self.assertIn(name, served, "%s in panel %r" % (name, panel["title"]))
                # Rates of gauges with deriv(); rate() and increase() of counters only.
                for fn, name in re.findall(r"\b(rate|increase)\((trainlet_[a-z_]+)", target["expr"]):
                    self.assertTrue(name.endswith("_total"), "%s(%s) in %r" % (fn, name, panel["title"]))

    @unittest.skipUnless(PROMETHEUS, "prometheus is not installed (apt-get install prometheus)")
    def test_real_prometheus_scrapes_and_answers_queries(self):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            prom_port = s.getsockname()[1]
        config = os.path.join(self.tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\n"
                    "scrape_configs:\n  - job_name: trainlet-controller\n"
                    "    static_configs:\n      - targets: ['127.0.0.1:%d']\n" % self.fake.port)
        prom = self.start_process([
            PROMETHEUS, "--config.file=" + config,
            "--storage.tsdb.path=" + os.path.join(self.tmp, "tsdb"),
            "--web.listen-address=127.0.0.1:%d" % prom_port, "--log.level=warn"])
        api = "http://127.0.0.1:%d/api/v1/" % prom_port

        def query(q):
            try:
                _, _, body = get(api + "query?" + urllib.parse.urlencode({"query": q}))
            except OSError:
                return None
            return json.loads(body)["data"]["result"]

        result = poll_until(lambda: query('trainlet_job_nodes_up{job_id="demo"}'), 60,
                            "prometheus to scrape the controller (log: %s)" % prom.log_path)
        self.assertEqual(result[0]["metric"]["job"], "trainlet-controller")
        self.assertEqual(result[0]["value"][1], "2")
        up = query('up{job="trainlet-controller"}')
        self.assertEqual(up[0]["value"][1], "1")
        escaped = query('trainlet_job_info{state="stale"}')
        self.assertEqual(escaped[0]["metric"]["job_id"], "odd\"job\\<b>&\n")
        # Two scrapes a second apart: the step moved, so deriv() has a value.
        poll_until(lambda: query('deriv(trainlet_job_progress_step{job_id="demo"}[10s]) > 0'), 30,
                   "a positive step rate in prometheus")
        loss = query('trainlet_node_progress_value{job_id="demo",field="loss"}')
        self.assertEqual(sorted(r["metric"]["node_id"] for r in loss), ["demo-node-0", "demo-node-1"])
        # The failing preflight checks, and the Grafana panel's expression.
        failing = query('trainlet_preflight_check{job_id="demo",outcome="fail"}')
        self.assertEqual(sorted((r["metric"]["node_id"], r["metric"]["check"]) for r in failing),
                         [("demo-node-1", "dns"), ("demo-node-1", "gpu_ecc")])
        bad = query('trainlet_preflight_failed_checks{job_id=~"demo"} > 0')
        self.assertEqual([(r["metric"]["node_id"], r["value"][1]) for r in bad],
                         [("demo-node-1", "2")])
        # A finished job has no progress age: an alert on it cannot fire.
        self.assertEqual(query('trainlet_job_progress_age_seconds{job_id="done"}'), [])
        self.assertEqual(query('trainlet_job_info{job_id="done"}')[0]["metric"]["state"], "succeeded")

    # ---- trainlet status against the same server.

    @unittest.skipUnless(os.path.exists(TRAINLET), "no trainlet at %s" % TRAINLET)
    def test_trainlet_status_table_and_json(self):
        env = dict(os.environ, TRAINLET_CONTROLLER_HTTP="127.0.0.1:%d" % self.fake.port)
        table = subprocess.run([TRAINLET, "status"], env=env, capture_output=True, text=True,
                               timeout=30)
        self.assertEqual(table.returncode, 0, table.stderr)
        self.assertIn("demo-node-2  2     ffffffff     stale", table.stdout)
        self.assertIn("demo-node-3  -     00000033     lost", table.stdout)
        js = subprocess.run([TRAINLET, "status", "--json", "demo"], env=env, capture_output=True,
                            text=True, timeout=30)
        self.assertEqual(js.returncode, 0, js.stderr)
        doc = json.loads(js.stdout)
        self.assertEqual([j["job_id"] for j in doc["jobs"]], ["demo"])
        self.assertEqual(doc["jobs"][0]["totals"]["nodes_up"], 2)
        port = self.fake.port
        self.fake.stop()
        down = subprocess.run([TRAINLET, "status", "--controller=127.0.0.1:%d" % port,
                               "--timeout=2s"], capture_output=True, text=True, timeout=30)
        self.assertEqual(down.returncode, 69)
        self.assertIn("cannot reach the controller", down.stderr)


@unittest.skipUnless(os.path.exists(TRAINLET), "no trainlet at %s" % TRAINLET)
class StatusSignalsTest(unittest.TestCase):
    """`trainlet status` is a foreground command: Ctrl-C (SIGINT) and SIGTERM
    end it at once, even while it waits on a controller that says nothing
    (the agent's commands block those signals for their signalfd; status
    must not inherit that)."""

    def test_sigint_and_sigterm_end_a_waiting_status(self):
        with socket.socket() as silent:
            silent.bind(("127.0.0.1", 0))
            silent.listen(8)  # accepted by the kernel, never answered.
            port = silent.getsockname()[1]
            for sig in (signal.SIGINT, signal.SIGTERM):
                proc = subprocess.Popen(
                    [TRAINLET, "status", "--controller=127.0.0.1:%d" % port, "--timeout=60s"],
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                try:
                    time.sleep(1)  # connected and waiting for an answer.
                    self.assertIsNone(proc.poll())
                    proc.send_signal(sig)
                    # At once; 10 s is room for a loaded machine (it waited
                    # out its 60 s before).
                    self.assertEqual(proc.wait(10), -sig)
                finally:
                    if proc.poll() is None:
                        proc.kill()
                        proc.wait()


# The worker of the elastic job: a step and a loss every 0.1 s on
# TRAINLET_PROGRESS_FILE (docs/progress.md's way: whole lines, replaced
# atomically), until $E2E_DIR/done exists.
ELASTIC_WORKER = """
import os, time
p = os.environ["TRAINLET_PROGRESS_FILE"]
done = os.path.join(os.environ["E2E_DIR"], "done")
step = 0
while not os.path.exists(done):
    step += 1
    with open(p + ".tmp", "w") as f:
        f.write("step=%d loss=%.4f\\n" % (step, 2.0 / step))
    os.replace(p + ".tmp", p)
    time.sleep(0.1)
"""


@unittest.skipUnless(os.path.exists(harness.TRAINLET), "no trainlet at %s" % harness.TRAINLET)
class RealControllerViewsTest(harness.E2ETestCase):
    """A real `trainlet controller` and three real agents of an elastic job
    (2:3) with `kill -9` of one: the job ends succeeded, and every view says
    so, with the lost node shown lost and not counted."""

    def start_process(self, args):
        proc = self.start(os.path.basename(args[0]), args)
        proc.log_path = proc.err_path
        return proc

    def status_json(self, job):
        out = subprocess.run(
            [harness.TRAINLET, "status", "--controller=127.0.0.1:%d" % self.grpc_port,
             "--token-file=" + self.token, "--json", job],
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
        return json.loads(out.stdout)["jobs"][0] if out.returncode == 0 else None

    def test_elastic_job_that_lost_a_node_succeeds_in_every_view(self):
        self.token = self.path("token")
        with open(self.token, "w") as f:
            f.write("e2e-views-secret\n")
        self.grpc_port, self.http_port, coord, mp = harness.free_ports(4)
        ctl = self.start("controller", [
            harness.TRAINLET, "controller", "--listen=127.0.0.1:%d" % self.grpc_port,
            "--http=127.0.0.1:%d" % self.http_port, "--token-file=" + self.token])
        poll_until(lambda: not ctl.running() or get_ok(
            "http://127.0.0.1:%d/healthz" % self.http_port), 20, "the controller's views")
        self.assertTrue(ctl.running(), ctl.describe())
        command = [harness.PY, "-c", ELASTIC_WORKER]
        agents = [self.start_agent(
            ["--nnodes=2:3", "--node-rank=%d" % i, "--node-id=jobE-n%d" % i,
             "--coordinator=127.0.0.1:%d" % coord, "--master-port=%d" % mp, "--job-id=jobE",
             "--token-file=" + self.token, "--join-timeout=60s", "--max-restarts=2",
             "--nproc-per-node=1", "--grace-period=5s", "--health-port=0",
             "--controller=127.0.0.1:%d" % self.grpc_port, "--report-interval=200ms"],
            command, name="jobE-n%d" % i) for i in range(3)]

        # `trainlet status` on the gRPC address the agents were given.
        def running_round_1():
            nodes = (self.status_json("jobE") or {}).get("nodes", [])
            return len(nodes) == 3 and all(
                n["agent_state"] == "running" and n["round"] == 1 and n["progress"]["known"]
                for n in nodes)
        poll_until(running_round_1, 60, "3 nodes running round 1\n" + self.describe_all())
        os.kill(agents[2].pid, signal.SIGKILL)

        def round_2_running():
            job = self.status_json("jobE") or {}
            nodes = [n for n in job.get("nodes", []) if not n["lost"]]
            return (job.get("round") == 2 and len(nodes) == 2 and
                    all(n["round"] == 2 and n["progress"]["known"] for n in nodes))
        poll_until(round_2_running, 60, "the survivors running round 2\n" + self.describe_all())
        # The controller samples the job's series every 5 s: wait for a few
        # points with a rate and a loss, for the sparklines.
        def series_drawn():
            points = ((self.status_json("jobE") or {}).get("series") or {}).get("points", [])
            return sum(1 for p in points if p[2] is not None and len(p) > 3
                       and p[3] is not None) >= 2
        poll_until(series_drawn, 60, "two points of jobE's series with a rate and a loss")
        with open(self.path("done"), "w"):
            pass
        self.assertEqual(self.wait_all(agents[:2], 60), [0, 0], self.describe_all())
        poll_until(lambda: (self.status_json("jobE") or {}).get("state") == "succeeded", 30,
                   "jobE succeeded at the controller")

        job = self.status_json("jobE")
        self.assertEqual(job["totals"]["nodes"], 2, job["totals"])
        self.assertEqual(job["totals"]["nodes_lost"], 1, job["totals"])
        lost = [n for n in job["nodes"] if n["lost"]]
        self.assertEqual([n["node_id"] for n in lost], ["jobE-n2"])
        self.assertGreater(job["started_unix_ms"], 0)
        self.assertGreater(job["ended_unix_ms"], job["started_unix_ms"])
        self.assertIn("-c", job["command"])
        self.assertTrue(any("jobE-n2" in r["restart_cause"] for r in job["rounds_timeline"]),
                        job["rounds_timeline"])

        # /metrics: succeeded, one node lost, no progress age.
        _, _, metrics = get("http://127.0.0.1:%d/metrics" % self.http_port)
        metrics = metrics.decode()
        self.assertIn('trainlet_job_info{job_id="jobE",state="succeeded"} 1\n', metrics)
        self.assertIn('trainlet_job_nodes_lost{job_id="jobE"} 1\n', metrics)
        self.assertIn('trainlet_node_lost{job_id="jobE",node_id="jobE-n2"} 1\n', metrics)
        self.assertNotIn('trainlet_job_progress_age_seconds{job_id="jobE"}', metrics)

        if not CHROMIUM:
            self.skipTest("chromium is not installed (apt-get install chromium): the page "
                          "part is skipped")
        # The page, rendered in headless Chromium.
        cdp = open_browser(self, self.dir, self.start_process)
        cdp.call("Page.enable")
        cdp.call("Page.navigate", url="http://127.0.0.1:%d/" % self.http_port)
        sec = "section[data-job=\"jobE\"]"
        poll_until(lambda: cdp.eval("document.querySelector('%s') !== null" % sec), 20,
                   "jobE on the page")
        self.assertEqual(cdp.eval("document.querySelector('%s .badge').textContent" % sec),
                         "succeeded")
        # Finished: collapsed until opened.
        self.assertFalse(cdp.eval("document.querySelector('%s details').open" % sec))
        cdp.eval("document.querySelector('%s summary').click(); 1" % sec)
        poll_until(lambda: cdp.eval("document.querySelectorAll('%s tr[data-node]').length" % sec)
                   == 3, 20, "jobE's node rows")
        rows = cdp.eval("Array.from(document.querySelectorAll('%s tr[data-node]')).map(r => "
                        "[r.getAttribute('data-node'), r.className, "
                        "r.querySelector('.node-rank').textContent])" % sec)
        self.assertEqual(rows[2], ["jobE-n2", "lost", "-"], rows)
        # The survivors are members (up until their last report ages out).
        self.assertTrue(all(r[1] in ("up", "stale") for r in rows[:2]), rows)
        self.assertRegex(cdp.eval("document.querySelector('%s .nodes-up b').textContent" % sec),
                         r"^[0-2]/2 \(1 lost\)$")
        self.assertRegex(cdp.eval("document.querySelector('%s .started').textContent" % sec),
                         r"^started \S+ ago$")
        self.assertRegex(cdp.eval("document.querySelector('%s .duration').textContent" % sec),
                         r"^ran \S+$")
        self.assertIn("-c", cdp.eval("document.querySelector('%s .command').textContent" % sec))
        self.assertGreaterEqual(len(cdp.eval(
            "(document.querySelector('%s svg.sparkline.rate polyline') || "
            "{getAttribute: () => ''}).getAttribute('points')" % sec).split()), 2)
        self.assertGreaterEqual(len(cdp.eval(
            "(document.querySelector('%s svg.sparkline.loss polyline') || "
            "{getAttribute: () => ''}).getAttribute('points')" % sec).split()), 2)
        rounds = cdp.eval("Array.from(document.querySelectorAll('%s ol.timeline li.round'))"
                          ".map(r => r.innerText)" % sec)
        self.assertEqual(len(rounds), 2, rounds)
        self.assertIn("jobE-n2", rounds[1])
        self.assertIn("restarted after:", rounds[1])


if __name__ == "__main__":
    unittest.main()
