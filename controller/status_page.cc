// The status page at `/`: one self-contained HTML document (no external
// assets), read-only. Its script polls /api/jobs every second and rebuilds
// the jobs' DOM with createElement and textContent only (never innerHTML),
// so that no string from an agent is ever parsed as HTML.
//
// Test hooks (e2e_controller_views.py): each job is a <section data-job=ID>,
// each node a <tr data-node=ID>, cells carry a class per column; #polls
// counts the answers applied since the page loaded.
#include <string>

#include "controller/http_server.h"

namespace trainlet::controller {

const std::string& StatusPageHtml() {
  static const std::string* const kPage = new std::string(R"HTML(<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>trainlet controller</title>
<style>
  :root { --fg: #1d2330; --muted: #667085; --line: #e4e7ec; --ok: #067647; --warn: #b54708;
          --bad: #b42318; --bg: #f8f9fb; }
  body { font: 14px/1.4 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
         background: var(--bg); margin: 0; }
  header { background: #101828; color: #fff; padding: 10px 20px; display: flex; gap: 24px;
           align-items: baseline; flex-wrap: wrap; }
  header h1 { font-size: 18px; margin: 0; }
  header span { color: #d0d5dd; }
  #conn.down { color: #fda29b; font-weight: 600; }
  main { padding: 12px 20px; }
  section.job { background: #fff; border: 1px solid var(--line); border-radius: 6px;
                margin: 0 0 16px; padding: 10px 14px; }
  section.job h2 { font-size: 16px; margin: 0 0 6px; display: flex; gap: 10px;
                   align-items: baseline; }
  .badge { font-size: 12px; padding: 1px 8px; border-radius: 10px; background: #eef2f6; }
  .badge.active, .badge.up, .badge.running, .badge.healthy, .badge.succeeded { color: var(--ok);
    background: #ecfdf3; }
  .badge.stale, .badge.degraded, .badge.stopping, .badge.stopped { color: var(--warn);
    background: #fffaeb; }
  .badge.failed, .badge.hung, .badge.fatal { color: var(--bad); background: #fef3f2; }
  .summary { display: flex; gap: 18px; flex-wrap: wrap; color: var(--muted); margin-bottom: 8px; }
  .summary b { color: var(--fg); font-weight: 600; }
  table { border-collapse: collapse; width: 100%; font-size: 13px; }
  th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line);
           vertical-align: top; white-space: nowrap; }
  th { color: var(--muted); font-weight: 500; }
  .worker { display: block; white-space: nowrap; }
  td.last-failure, td.progress { white-space: normal; min-width: 10em; overflow-wrap: anywhere; }
  .scroll { overflow-x: auto; }
  td.gpus .badge { display: inline-block; margin: 0 4px 2px 0; white-space: nowrap; }
  tr.stale td { color: var(--muted); }
  .mono { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
  h3 { font-size: 13px; margin: 10px 0 4px; color: var(--muted); font-weight: 600; }
  ul.events { margin: 0; padding-left: 18px; }
  ul.events li { margin: 2px 0; }
  .evidence { color: var(--muted); white-space: pre-wrap; }
  #empty { color: var(--muted); }
</style>
</head>
<body>
<header>
  <h1>trainlet controller</h1>
  <span id="version"></span>
  <span>up <b id="uptime">-</b></span>
  <span><b id="reports">-</b> reports</span>
  <span>updated <b id="updated">-</b></span>
  <span id="conn">connecting</span>
  <span hidden id="polls">0</span>
</header>
<main>
  <p id="empty">Waiting for the controller...</p>
  <div id="jobs"></div>
</main>
<script>
"use strict";
(function () {
  var polls = 0;
  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function dur(ms) {
    if (typeof ms !== "number" || ms < 0) return "-";
    if (ms < 1000) return ms + "ms";
    if (ms < 60000) return (ms / 1000).toFixed(1) + "s";
    var s = Math.floor(ms / 1000);
    if (s < 3600) return Math.floor(s / 60) + "m" + String(s % 60).padStart(2, "0") + "s";
    if (s < 86400) return Math.floor(s / 3600) + "h" + String(Math.floor(s / 60) % 60).padStart(2, "0") + "m";
    return Math.floor(s / 86400) + "d" + String(Math.floor(s / 3600) % 24).padStart(2, "0") + "h";
  }
  function rate(r) { return (typeof r === "number" && r >= 0) ? r.toFixed(2) + "/s" : "-"; }
  function when(ms) { return ms > 0 ? new Date(ms).toISOString().replace(".000", "") : "-"; }
  function badge(text) { return el("span", "badge " + text, text); }
  function cell(tr, cls, content) {
    var td = el("td", cls);
    if (content instanceof Node) td.appendChild(content); else td.textContent = String(content);
    tr.appendChild(td);
    return td;
  }
  function ranks(workers) {
    var r = workers.map(function (w) { return w.rank; }).filter(function (x) { return x >= 0; });
    r.sort(function (a, b) { return a - b; });
    if (!r.length) return "-";
    if (r[r.length - 1] - r[0] + 1 === r.length) return r.length === 1 ? String(r[0]) : r[0] + "-" + r[r.length - 1];
    return r.join(",");
  }
  function workersCell(workers) {
    var span = el("span");
    workers.forEach(function (w, i) {
      if (i) span.appendChild(document.createTextNode(" "));
      var label = "r" + (w.rank >= 0 ? w.rank : "?") + (w.pid > 0 ? " pid " + w.pid : "") + " ";
      var item = el("span", "worker");
      item.appendChild(document.createTextNode(label));
      item.appendChild(badge(w.state));
      if (w.state === "failed" || w.state === "stopped" || w.state === "succeeded") {
        item.appendChild(document.createTextNode(" exit " + w.exit_code));
      }
      if (w.restarts > 0) item.appendChild(document.createTextNode(" (" + w.restarts + " restarts)"));
      span.appendChild(item);
    });
    if (!workers.length) span.textContent = "-";
    return span;
  }
  function gpusCell(gpus) {
    var span = el("span");
    gpus.forEach(function (g, i) {
      if (i) span.appendChild(document.createTextNode(" "));
      var b = badge(g.status);
      b.textContent = g.index + ": " + g.status;
      b.title = (g.uuid || "") + (g.reason ? " - " + g.reason : "");
      span.appendChild(b);
    });
    if (!gpus.length) span.textContent = "-";
    return span;
  }
  function fields(p) {
    return (p.fields || []).map(function (f) { return f[0] + "=" + f[1]; }).join(" ");
  }
  function renderJob(job) {
    var sec = el("section", "job");
    sec.setAttribute("data-job", job.job_id);
    var h = el("h2");
    h.appendChild(el("span", "job-id", job.job_id));
    h.appendChild(badge(job.state));
    h.appendChild(el("span", "round", "round " + job.round));
    sec.appendChild(h);
    var t = job.totals;
    var sum = el("div", "summary");
    [["nodes up", t.nodes_up + "/" + t.nodes, "nodes-up"],
     ["ranks", job.world_size, "world-size"],
     ["workers running", t.workers_running + "/" + t.workers, "workers-running"],
     ["step", t.progress_step >= 0 ? t.progress_step : "-", "job-step"],
     ["rate", rate(t.steps_per_second), "job-rate"],
     ["progress age", dur(t.progress_age_ms), "job-progress-age"],
     ["restarts", job.restarts_total, "restarts-total"],
     ["hangs", job.hangs_total, "hangs-total"],
     ["failures", job.failures_total, "failures-total"],
     ["report lag", dur(t.report_lag_ms), "report-lag"],
     ["GPUs fatal", t.gpus_fatal, "gpus-fatal"]].forEach(function (kv) {
      var s = el("span", kv[2], kv[0] + " ");
      s.appendChild(el("b", null, kv[1]));
      sum.appendChild(s);
    });
    sec.appendChild(sum);
    var table = el("table", "nodes");
    var head = el("tr");
    ["node", "rank", "incarnation", "up", "report age", "lag", "agent", "ranks", "workers",
     "step", "rate", "progress age", "progress", "GPUs", "last failure"].forEach(function (c) {
      head.appendChild(el("th", null, c));
    });
    table.appendChild(head);
    job.nodes.forEach(function (n) {
      var tr = el("tr", n.up ? "up" : "stale");
      tr.setAttribute("data-node", n.node_id);
      cell(tr, "node-id", n.node_id);
      cell(tr, "node-rank", n.node_rank >= 0 ? n.node_rank : "-");
      cell(tr, "incarnation mono", n.incarnation);
      cell(tr, "up", badge(n.up ? "up" : "stale"));
      cell(tr, "report-age", dur(n.report_age_ms));
      cell(tr, "lag", dur(n.report_lag_ms));
      cell(tr, "agent", badge(n.agent_state));
      cell(tr, "ranks", ranks(n.workers));
      cell(tr, "workers", workersCell(n.workers));
      cell(tr, "step", n.progress.known && n.progress.step >= 0 ? n.progress.step : "-");
      cell(tr, "rate", rate(n.progress.steps_per_second));
      cell(tr, "progress-age", n.progress.known ? dur(n.progress.age_ms) : "-");
      cell(tr, "progress mono", fields(n.progress));
      cell(tr, "gpus", gpusCell(n.gpus));
      cell(tr, "last-failure", n.last_failure || "");
      table.appendChild(tr);
    });
    var scroll = el("div", "scroll");
    scroll.appendChild(table);
    sec.appendChild(scroll);
    if (job.lost_nodes && job.lost_nodes.length) {
      var lost = el("div", "lost-nodes", "lost nodes (not back): ");
      lost.appendChild(el("b", null, job.lost_nodes.join(", ")));
      sec.appendChild(lost);
    }
    if (job.restarts.length) {
      sec.appendChild(el("h3", null, "Restarts (" + job.restarts_total + ")"));
      var ul = el("ul", "events restarts");
      job.restarts.slice().reverse().forEach(function (r) {
        var li = el("li", "restart");
        li.textContent = "round " + r.round + " at " + when(r.at_unix_ms) +
            (r.node_id ? " (" + r.node_id + ")" : "") + ": " + r.cause;
        ul.appendChild(li);
      });
      sec.appendChild(ul);
    }
    if (job.hangs.length) {
      sec.appendChild(el("h3", null, "Hangs (" + job.hangs_total + ")"));
      var uh = el("ul", "events hangs");
      job.hangs.slice().reverse().forEach(function (x) {
        var li = el("li", "hang");
        li.appendChild(document.createTextNode("round " + x.round + " at " + when(x.at_unix_ms) +
            " (" + x.node_id + "): " + x.verdict));
        if (x.evidence_summary) li.appendChild(el("div", "evidence mono", x.evidence_summary));
        uh.appendChild(li);
      });
      sec.appendChild(uh);
    }
    return sec;
  }
  function render(s) {
    document.getElementById("version").textContent = s.version ? "v" + s.version : "";
    document.getElementById("uptime").textContent = dur(s.uptime_ms);
    document.getElementById("reports").textContent = s.reports_received;
    document.getElementById("updated").textContent = when(s.now_unix_ms);
    var jobs = document.getElementById("jobs");
    var next = document.createDocumentFragment();
    s.jobs.forEach(function (j) { next.appendChild(renderJob(j)); });
    jobs.replaceChildren(next);
    document.getElementById("empty").hidden = s.jobs.length > 0;
    if (!s.jobs.length) document.getElementById("empty").textContent = "No jobs reported yet.";
  }
  function poll() {
    fetch("/api/jobs", {cache: "no-store"}).then(function (r) {
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    }).then(function (s) {
      render(s);
      polls += 1;
      document.getElementById("polls").textContent = String(polls);
      var c = document.getElementById("conn");
      c.textContent = "live";
      c.className = "";
    }).catch(function (e) {
      var c = document.getElementById("conn");
      c.textContent = "controller unreachable (" + e.message + "), retrying";
      c.className = "down";
    }).finally(function () { setTimeout(poll, 1000); });
  }
  poll();
})();
</script>
</body>
</html>
)HTML");
  return *kPage;
}

}  // namespace trainlet::controller
