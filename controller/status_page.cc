// The status page at `/`: one self-contained HTML document (no external
// assets), read-only. Its script builds the DOM with createElement,
// createElementNS (the SVG sparklines) and textContent only (never
// innerHTML), so that no string from an agent is ever parsed as markup.
//
// What it costs the controller, bounded: one `/api/jobs` (every job's
// summary, no nodes) per poll, plus one `/api/jobs/JOB?limit=N` for each
// job that is open on the page (at most kMaxDetails a poll, N nodes each,
// 50 unless "more nodes" is pressed); finished jobs start collapsed. The
// next poll starts a second after the last answer, or three times as long
// as that poll took when the controller is slow, and none while the tab is
// hidden. With a token (--http-token-file) the page asks for it once and
// keeps it in the tab's sessionStorage.
//
// Test hooks (e2e_controller_views.py): each job is a <section data-job=ID>
// (its <details> open or not), its headline .headline, start .started,
// duration .duration, command .command; each node a <tr data-node=ID>
// (class lost when lost), cells a class per column (the node's preflight:
// td.preflight, its badge, and a .check-failed[data-check] per failed
// check; the job's bad nodes: .preflight-bad in its head); sparklines
// svg.sparkline.rate and svg.sparkline.loss; the rounds ol.timeline with
// li.round and .cause; the job's goodput (docs/goodput.md) div.goodput in
// its head, .ettr and a span.seg[data-phase][data-ms] per phase; each
// restart's cost li.restart .restart-cost (data-detection-ms,
// data-restart-ms, data-waiting-ms, data-rewarm-ms, data-redone-ms,
// data-redone-steps, data-node, data-rank), also in li.round; #polls counts
// the summaries applied since the page loaded.
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
          --bad: #b42318; --bg: #f8f9fb; --idle: #475467; }
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
  section.job > details > summary { cursor: pointer; list-style: none; }
  section.job > details > summary::-webkit-details-marker { display: none; }
  .title { font-size: 16px; margin: 0 0 4px; display: flex; gap: 10px; align-items: baseline;
           flex-wrap: wrap; }
  .title .job-id { font-weight: 600; }
  .title .toggle { color: var(--muted); font-size: 12px; }
  .headline { color: var(--bad); font-weight: 600; }
  .waiting { color: var(--warn); font-weight: 600; }
  .when { color: var(--muted); font-size: 13px; display: flex; gap: 16px; flex-wrap: wrap; }
  .command { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px;
             color: var(--fg); overflow-wrap: anywhere; }
  .badge { font-size: 12px; padding: 1px 8px; border-radius: 10px; background: #eef2f6; }
  .badge.active, .badge.up, .badge.running, .badge.healthy, .badge.succeeded { color: var(--ok);
    background: #ecfdf3; }
  .badge.stale, .badge.degraded, .badge.stopping { color: var(--warn); background: #fffaeb; }
  .badge.stopped, .badge.lost, .badge.done { color: var(--idle); background: #f2f4f7; }
  .badge.failed, .badge.hung, .badge.fatal { color: var(--bad); background: #fef3f2; }
  .badge.passed { color: var(--ok); background: #ecfdf3; }
  .badge.skipped { color: var(--idle); background: #f2f4f7; }
  .preflight-bad { color: var(--bad); font-weight: 600; }
  td.preflight { white-space: normal; min-width: 12em; }
  .check-failed { color: var(--bad); overflow-wrap: anywhere; }
  .summary { display: flex; gap: 18px; flex-wrap: wrap; color: var(--muted); margin: 6px 0; }
  .summary b { color: var(--fg); font-weight: 600; }
  .charts { display: flex; gap: 24px; flex-wrap: wrap; margin: 6px 0; color: var(--muted);
            font-size: 12px; }
  svg.sparkline { display: block; background: #f9fafb; border: 1px solid var(--line); }
  svg.sparkline polyline { fill: none; stroke-width: 1.5; }
  svg.sparkline.rate polyline { stroke: #1570ef; }
  svg.sparkline.loss polyline { stroke: #c11574; }
  table { border-collapse: collapse; width: 100%; font-size: 13px; }
  th, td { text-align: left; padding: 3px 8px; border-bottom: 1px solid var(--line);
           vertical-align: top; white-space: nowrap; }
  th { color: var(--muted); font-weight: 500; }
  .worker { display: block; white-space: nowrap; }
  td.last-failure, td.progress { white-space: normal; min-width: 10em; overflow-wrap: anywhere; }
  .scroll { overflow-x: auto; }
  td.gpus .badge { display: inline-block; margin: 0 4px 2px 0; white-space: nowrap; }
  tr.stale td { color: var(--muted); }
  tr.lost td { color: #98a2b3; opacity: 0.6; }
  .mono { font-family: ui-monospace, Menlo, Consolas, monospace; font-size: 12px; }
  h3 { font-size: 13px; margin: 10px 0 4px; color: var(--muted); font-weight: 600; }
  ul.events, ol.timeline { margin: 0; padding-left: 18px; }
  ul.events li, ol.timeline li { margin: 2px 0; }
  ol.timeline .cause { color: var(--bad); }
  .goodput { display: flex; gap: 10px; align-items: center; margin: 6px 0; font-size: 12px;
             color: var(--muted); flex-wrap: wrap; }
  .goodput .ettr b { color: var(--fg); font-size: 14px; }
  .bar { display: flex; width: 320px; height: 12px; border: 1px solid var(--line);
         border-radius: 3px; overflow: hidden; background: #f2f4f7; }
  .bar.small { width: 160px; height: 8px; }
  .bar .seg { display: block; height: 100%; }
  .seg.productive { background: #12b76a; } .seg.startup { background: #84adff; }
  .seg.waiting { background: #fdb022; } .seg.detection { background: #f04438; }
  .seg.restart { background: #f97066; } .seg.rewarm { background: #fda29b; }
  .seg.redone { background: #c11574; }
  .legend span { margin-right: 8px; white-space: nowrap; }
  .legend i { display: inline-block; width: 9px; height: 9px; margin-right: 3px;
              vertical-align: baseline; }
  .restart-cost { color: var(--muted); display: flex; gap: 8px; align-items: center;
                  flex-wrap: wrap; }
  .evidence { color: var(--muted); white-space: pre-wrap; }
  .suspect { color: var(--bad); font-weight: 600; }
  button { font: inherit; font-size: 12px; }
  #empty { color: var(--muted); }
  #login { background: #fff; border: 1px solid var(--line); padding: 12px; border-radius: 6px; }
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
  <form id="login" hidden>
    This controller's views want a token (its <code>--http-token-file</code>):
    <input id="token" type="password" autocomplete="off" size="40">
    <button type="submit">Show</button>
  </form>
  <p id="empty">Waiting for the controller...</p>
  <div id="jobs"></div>
</main>
<script>
"use strict";
(function () {
  var kPage = 50;        // nodes of an open job fetched a poll.
  var kMaxDetails = 4;   // open jobs fetched a poll.
  var polls = 0;
  var open = {};         // job id -> true/false, once the user toggled it.
  var shown = {};        // job id -> nodes to fetch.
  var details = {};      // job id -> its latest detail.
  var now = 0;           // the controller's clock at the latest answer.
  var token = null;
  try { token = sessionStorage.getItem("trainlet-token"); } catch (e) {}

  function el(tag, cls, text) {
    var e = document.createElement(tag);
    if (cls) e.className = cls;
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function svg(tag, attrs) {
    var e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (var k in attrs) e.setAttribute(k, String(attrs[k]));
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
  function ago(ms) { return ms > 0 && now > 0 ? dur(Math.max(0, now - ms)) + " ago" : "-"; }
  function rate(r) { return (typeof r === "number" && r >= 0) ? r.toFixed(2) + "/s" : "-"; }
  function when(ms) { return ms > 0 ? new Date(ms).toISOString().replace(".000", "") : "-"; }
  function clock(ms) { return ms > 0 ? new Date(ms).toLocaleTimeString() : "-"; }
  function badge(text) { return el("span", "badge " + text, text); }
  function finished(job) { return job.state === "succeeded" || job.state === "failed"; }
  function isOpen(job) { return job.job_id in open ? open[job.job_id] : !finished(job); }
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
      // A worker the agent stopped ended because of another: no failure.
      if (w.state === "failed" || w.state === "succeeded") {
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
  // The node's latest preflight: a badge (passed, N failed, skipped), every
  // check with its reason on hover, and each failed check with its reason.
  function preflightCell(p) {
    var span = el("span");
    if (!p || !p.known) {
      span.textContent = "-";
      return span;
    }
    var kind = p.failed > 0 ? "failed" : (p.passed > 0 ? "passed" : "skipped");
    var b = el("span", "badge " + kind, p.failed > 0 ? p.failed + " failed" : kind);
    b.title = "round " + p.round + (p.duration_ms >= 0 ? ", " + dur(p.duration_ms) : "") + "\n" +
        (p.checks || []).map(function (c) {
          return c.check + ": " + c.outcome + (c.reason ? " - " + c.reason : "");
        }).concat((p.links || []).map(function (l) {
          return "link to " + l.to_node + ": " + (l.error ? l.error :
              (l.bandwidth_bytes_per_second / 1e9).toFixed(2) + " GB/s, rtt " +
              (l.rtt_seconds * 1000).toFixed(3) + " ms");
        })).join("\n");
    span.appendChild(b);
    (p.checks || []).forEach(function (c) {
      if (c.outcome !== "fail") return;
      var d = el("div", "check-failed", c.check + ": " + c.reason);
      d.setAttribute("data-check", c.check);
      span.appendChild(d);
    });
    return span;
  }
  function badNodes(tt) {
    var names = tt.preflight_failed_nodes || [];
    var more = tt.nodes_preflight_failed - names.length;
    return names.join(", ") + (more > 0 ? (names.length ? " " : "") + "and " + more + " more" : "");
  }
  function fields(p) {
    return (p.fields || []).map(function (f) { return f[0] + "=" + f[1]; }).join(" ");
  }
  // A line chart of `values` (numbers or null), drawn in the page.
  function sparkline(cls, label, values) {
    var box = el("div", "chart");
    var w = 180, h = 36;
    var pts = [];
    values.forEach(function (v, i) { if (typeof v === "number" && isFinite(v)) pts.push([i, v]); });
    var last = pts.length ? pts[pts.length - 1][1] : null;
    box.appendChild(el("div", null, label + (last === null ? " -" : " " + Number(last.toPrecision(4)))));
    var s = svg("svg", {"class": "sparkline " + cls, width: w, height: h, viewBox: "0 0 " + w + " " + h});
    if (pts.length > 1) {
      var lo = Math.min.apply(null, pts.map(function (p) { return p[1]; }));
      var hi = Math.max.apply(null, pts.map(function (p) { return p[1]; }));
      var span = hi - lo || 1, n = Math.max(1, values.length - 1);
      s.appendChild(svg("polyline", {points: pts.map(function (p) {
        return (p[0] / n * (w - 4) + 2).toFixed(1) + "," + (h - 3 - (p[1] - lo) / span * (h - 6)).toFixed(1);
      }).join(" ")}));
    }
    box.appendChild(s);
    return box;
  }
  function headline(c) {
    if (!c || !c.known) return "";
    if (!c.text) return c.headline || "";  // built by the controller, with its time.
    return c.text + (c.at_unix_ms > 0 ? " at " + clock(c.at_unix_ms) : "");
  }
  function waitingText(wt) {
    if (!wt || !wt.waiting) return "";
    var t = "waiting for ";
    if (wt.min_nodes > 0 && wt.nodes < wt.min_nodes) {
      var more = wt.min_nodes - wt.nodes;
      t += more + " more node" + (more === 1 ? "" : "s") + " (min " + wt.min_nodes + ")";
    } else {
      t += "the round to start (" + wt.nodes + " waiting)";
    }
    if (wt.gives_up_unix_ms > 0) {
      var left = wt.gives_up_unix_ms - now;
      t += left > 0 ? ", giving up in " + dur(left) : ", giving up now";
    }
    return t;
  }

  // The phases of docs/goodput.md, in the order /api/jobs gives them.
  var PHASES = ["productive", "startup", "waiting", "detection", "restart", "rewarm", "redone"];
  function bar(cls, parts) {
    var b = el("div", "bar " + cls), total = 0;
    parts.forEach(function (p) { total += Math.max(0, p[1]); });
    parts.forEach(function (p) {
      if (!(p[1] > 0) || !(total > 0)) return;
      var seg = el("span", "seg " + p[0]);
      seg.style.width = (100 * p[1] / total).toFixed(3) + "%";
      seg.title = p[0] + " " + dur(p[1]);
      seg.setAttribute("data-phase", p[0]);
      seg.setAttribute("data-ms", String(p[1]));
      b.appendChild(seg);
    });
    return b;
  }
  // The job's wall time by phase: ETTR, a bar, a legend.
  function goodput(g) {
    var box = el("div", "goodput");
    var e = el("span", "ettr", "ETTR ");
    e.appendChild(el("b", null, g.ettr >= 0 ? (100 * g.ettr).toFixed(1) + "%" : "-"));
    box.appendChild(e);
    box.appendChild(bar("wall", PHASES.map(function (p) { return [p, g[p + "_ms"] || 0]; })));
    var legend = el("span", "legend");
    PHASES.forEach(function (p) {
      if (p !== "productive" && !(g[p + "_ms"] > 0)) return;
      var x = el("span", null);
      x.appendChild(el("i", "seg " + p));
      x.appendChild(document.createTextNode(p + " " + dur(g[p + "_ms"])));
      legend.appendChild(x);
    });
    box.appendChild(legend);
    box.appendChild(el("span", "phase", "now " + g.phase));
    return box;
  }
  // What one restart cost (the same numbers as the job's phases).
  function restartCost(t) {
    var d = el("div", "restart-cost");
    [["detection", t.detection_ms], ["restart", t.restart_ms], ["waiting", t.waiting_ms],
     ["rewarm", t.rewarm_ms], ["redone", t.redone_ms]].forEach(function (kv) {
      d.setAttribute("data-" + kv[0] + "-ms", String(kv[1]));
    });
    d.setAttribute("data-redone-steps", String(t.redone_steps));
    d.setAttribute("data-node", t.node_id || "");
    d.setAttribute("data-rank", String(t.rank));
    d.appendChild(bar("small", [["detection", t.detection_ms], ["restart", t.restart_ms],
        ["waiting", t.waiting_ms], ["rewarm", t.rewarm_ms], ["redone", t.redone_ms]]));
    d.appendChild(document.createTextNode(
        "failed: " + (t.node_id || "-") + (t.rank >= 0 ? " rank " + t.rank : "") +
        "; lost " + dur(t.lost_ms) + ": detection " + dur(t.detection_ms) +
        ", restart " + dur(t.restart_ms) + (t.waiting_ms > 0 ? ", waiting " + dur(t.waiting_ms) : "") +
        ", re-warm " + dur(t.rewarm_ms) + ", redone " + dur(t.redone_ms) +
        (t.redone_steps >= 0 ? " (" + t.redone_steps + " steps)" : "") + (t.done ? "" : ", so far")));
    return d;
  }

  function renderHead(job) {
    var s = el("summary");
    var title = el("div", "title");
    title.appendChild(el("span", "job-id", job.job_id));
    title.appendChild(badge(job.state));
    title.appendChild(el("span", "round", "round " + job.round));
    title.appendChild(el("span", "toggle", isOpen(job) ? "(click to collapse)" : "(click for nodes)"));
    s.appendChild(title);
    var hl = headline(job.root_cause);
    if (hl) s.appendChild(el("div", "headline", hl));
    var wt = waitingText(job.waiting);
    if (wt) s.appendChild(el("div", "waiting", wt));
    if (job.totals.nodes_preflight_failed > 0) {
      s.appendChild(el("div", "preflight-bad", "preflight failed on " + badNodes(job.totals)));
    }
    var t = el("div", "when");
    var started = el("span", "started", "started " + ago(job.started_unix_ms));
    started.title = when(job.started_unix_ms);
    t.appendChild(started);
    t.appendChild(el("span", "duration",
        (job.ended_unix_ms > 0 ? "ran " : "running for ") + dur(job.duration_ms)));
    if (job.ended_unix_ms > 0) {
      var ended = el("span", "ended", "ended " + ago(job.ended_unix_ms));
      ended.title = when(job.ended_unix_ms);
      t.appendChild(ended);
    }
    if (job.command) t.appendChild(el("span", "command", job.command));
    s.appendChild(t);
    if (job.goodput && job.goodput.known) s.appendChild(goodput(job.goodput));
    var tt = job.totals;
    var sum = el("div", "summary");
    [["nodes up", tt.nodes_up + "/" + tt.nodes + (tt.nodes_lost ? " (" + tt.nodes_lost + " lost)" : ""), "nodes-up"],
     ["ranks", job.world_size, "world-size"],
     ["workers running", tt.workers_running + "/" + tt.workers, "workers-running"],
     ["step", tt.progress_step >= 0 ? tt.progress_step : "-", "job-step"],
     ["rate", rate(tt.steps_per_second), "job-rate"],
     ["progress age", dur(tt.progress_age_ms), "job-progress-age"],
     ["restarts", job.restarts_total, "restarts-total"],
     ["hangs", job.hangs_total, "hangs-total"],
     ["failures", job.failures_total, "failures-total"],
     ["report lag", dur(tt.report_lag_ms), "report-lag"],
     ["GPUs fatal", tt.gpus_fatal, "gpus-fatal"]].forEach(function (kv) {
      var x = el("span", kv[2], kv[0] + " ");
      x.appendChild(el("b", null, kv[1]));
      sum.appendChild(x);
    });
    s.appendChild(sum);
    return s;
  }

  function renderBody(job, d) {
    var body = el("div", "body");
    if (!d) {
      body.appendChild(el("p", "loading", "loading nodes..."));
      return body;
    }
    var pts = (d.series && d.series.points) || [];
    var charts = el("div", "charts");
    charts.appendChild(sparkline("rate", "steps/s", pts.map(function (p) { return p[2]; })));
    var keys = (d.series && d.series.keys) || [];
    var li = keys.indexOf("loss");
    if (li < 0 && keys.length) li = 0;
    if (li >= 0) charts.appendChild(sparkline("loss", keys[li], pts.map(function (p) { return p[3 + li]; })));
    body.appendChild(charts);

    if (d.rounds_timeline && d.rounds_timeline.length) {
      body.appendChild(el("h3", null, "Rounds"));
      var ol = el("ol", "timeline");
      d.rounds_timeline.forEach(function (r) {
        var item = el("li", "round");
        item.setAttribute("data-round", String(r.round));
        item.appendChild(document.createTextNode("round " + r.round + ": started " + ago(r.started_unix_ms) +
            (r.ended_unix_ms > 0 ? ", ran " + dur(r.ended_unix_ms - r.started_unix_ms)
                                 : ", running for " + dur(now - r.started_unix_ms)) +
            ", " + r.nodes + " nodes"));
        if (r.restart_cause) item.appendChild(el("div", "cause", "restarted after: " + r.restart_cause));
        if (r.restart && r.restart.known) item.appendChild(restartCost(r.restart));
        if (r.ended_by && r.ended_by.known) item.appendChild(el("div", "ended-by", "ended by: " + headline(r.ended_by)));
        ol.appendChild(item);
      });
      body.appendChild(ol);
    }

    var table = el("table", "nodes");
    var head = el("tr");
    ["node", "rank", "incarnation", "up", "report age", "lag", "agent", "ranks", "workers",
     "step", "rate", "progress age", "progress", "GPUs", "preflight", "topology", "last failure"].forEach(function (c) {
      head.appendChild(el("th", null, c));
    });
    table.appendChild(head);
    d.nodes.forEach(function (n) {
      var state = n.lost ? "lost" : (n.up ? "up" : "stale");
      var tr = el("tr", state);
      tr.setAttribute("data-node", n.node_id);
      if (n.lost) tr.title = "lost" + (n.lost_at_unix_ms > 0 ? " " + ago(n.lost_at_unix_ms) : "") +
          (n.lost_reason ? ": " + n.lost_reason : "") + "; its last state, counted nowhere";
      cell(tr, "node-id", n.node_id);
      cell(tr, "node-rank", !n.lost && n.node_rank >= 0 ? n.node_rank : "-");
      cell(tr, "incarnation mono", n.incarnation);
      cell(tr, "up", badge(state));
      cell(tr, "report-age", dur(n.report_age_ms));
      cell(tr, "lag", dur(n.report_lag_ms));
      cell(tr, "agent", badge(n.agent_state));
      cell(tr, "ranks", n.lost ? "-" : ranks(n.workers));
      cell(tr, "workers", workersCell(n.workers));
      cell(tr, "step", n.progress.known && n.progress.step >= 0 ? n.progress.step : "-");
      cell(tr, "rate", rate(n.progress.steps_per_second));
      cell(tr, "progress-age", n.progress.known ? dur(n.progress.age_ms) : "-");
      cell(tr, "progress mono", fields(n.progress));
      cell(tr, "gpus", gpusCell(n.gpus));
      cell(tr, "preflight", preflightCell(n.preflight));
      cell(tr, "topology mono", n.topology || "");
      cell(tr, "last-failure", n.last_failure || "");
      table.appendChild(tr);
    });
    var scroll = el("div", "scroll");
    scroll.appendChild(table);
    body.appendChild(scroll);
    if (d.next_from >= 0) {
      var more = el("button", "more-nodes", "more nodes (" + d.nodes.length + " of " + d.nodes_total + " shown)");
      more.type = "button";
      more.addEventListener("click", function () {
        shown[job.job_id] = (shown[job.job_id] || kPage) + kPage;
        schedule(0);
      });
      body.appendChild(more);
    }
    if (d.lost_nodes && d.lost_nodes.length) {
      var lost = el("div", "lost-nodes", "lost nodes (not back): ");
      lost.appendChild(el("b", null, d.lost_nodes.join(", ")));
      body.appendChild(lost);
    }
    (d.slow_nodes || []).forEach(function (n) {
      var slow = el("div", "slow-node", "slow node (" + n.cause + ", about " +
          n.slowdown_percent + "% slower): ");
      slow.appendChild(el("b", null, n.node_id));
      slow.appendChild(document.createTextNode(" " + n.evidence));
      body.appendChild(slow);
    });
    if (d.restarts.length) {
      body.appendChild(el("h3", null, "Restarts (" + d.restarts_total + ")"));
      var ul = el("ul", "events restarts");
      d.restarts.slice().reverse().forEach(function (r) {
        var li = el("li", "restart", "round " + r.round + ", " + ago(r.at_unix_ms) +
            (r.node_id ? " (" + r.node_id + ")" : "") + ": " + r.cause);
        if (r.times && r.times.known) li.appendChild(restartCost(r.times));
        ul.appendChild(li);
      });
      body.appendChild(ul);
    }
    if (d.hangs.length) {
      body.appendChild(el("h3", null, "Hangs (" + d.hangs_total + ")"));
      var uh = el("ul", "events hangs");
      // The suspect (the root cause's hang) first, then the newest.
      var hangs = d.hangs.slice().reverse();
      hangs.sort(function (a, b) { return (b.suspect ? 1 : 0) - (a.suspect ? 1 : 0); });
      hangs.forEach(function (x) {
        var item = el("li", x.suspect ? "hang suspect" : "hang");
        item.appendChild(document.createTextNode((x.suspect ? "suspect: " : "") + "round " + x.round +
            ", " + ago(x.at_unix_ms) + " (" + x.node_id + "): " + x.verdict));
        if (x.evidence_summary) {
          item.appendChild(el("div", "evidence mono", x.evidence_summary +
              (x.evidence_bytes > x.evidence_summary.length ? " ..." : "")));
        }
        uh.appendChild(item);
      });
      body.appendChild(uh);
      var all = el("button", "show-evidence", "all the evidence");
      all.type = "button";
      var pre = el("pre", "evidence-all mono");
      pre.hidden = true;
      all.addEventListener("click", function () {
        get("/api/jobs/" + encodeURIComponent(job.job_id) + "/evidence").then(function (e) {
          pre.textContent = e.hangs.map(function (h) {
            return "== hang " + h.seq + ", round " + h.round + ", " + when(h.at_unix_ms) + ", " +
                h.node_id + ": " + h.verdict + "\n" + h.evidence;
          }).join("\n");
          pre.hidden = false;
        });
      });
      body.appendChild(all);
      body.appendChild(pre);
    }
    return body;
  }

  function renderJob(job) {
    var sec = el("section", "job");
    sec.setAttribute("data-job", job.job_id);
    var det = el("details");
    det.open = isOpen(job);
    det.appendChild(renderHead(job));
    if (det.open) det.appendChild(renderBody(job, details[job.job_id]));
    det.addEventListener("toggle", function () {
      if (open[job.job_id] === det.open || det.open === isOpen(job) && !(job.job_id in open)) return;
      open[job.job_id] = det.open;
      schedule(0);
    });
    sec.appendChild(det);
    return sec;
  }

  function render(s) {
    now = s.now_unix_ms;
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

  function get(path) {
    var headers = {};
    if (token) headers["Authorization"] = "Bearer " + token;
    return fetch(path, {cache: "no-store", headers: headers}).then(function (r) {
      if (r.status === 401) {
        document.getElementById("login").hidden = false;
        throw new Error("a token is needed");
      }
      if (!r.ok) throw new Error("HTTP " + r.status);
      return r.json();
    });
  }

  var timer = null;
  function schedule(ms) {
    if (timer !== null) clearTimeout(timer);
    timer = setTimeout(poll, ms);
  }
  function poll() {
    timer = null;
    if (document.hidden) return;  // visibilitychange polls again.
    var began = Date.now();
    get("/api/jobs").then(function (s) {
      now = s.now_unix_ms;
      var wanted = s.jobs.filter(isOpen).slice(0, kMaxDetails);
      return Promise.all(wanted.map(function (j) {
        return get("/api/jobs/" + encodeURIComponent(j.job_id) + "?limit=" + (shown[j.job_id] || kPage))
            .then(function (d) { details[j.job_id] = d.job; }, function () {});
      })).then(function () { return s; });
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
    }).finally(function () {
      if (timer === null) schedule(Math.max(1000, 3 * (Date.now() - began)));
    });
  }
  document.addEventListener("visibilitychange", function () { if (!document.hidden) schedule(0); });
  document.getElementById("login").addEventListener("submit", function (ev) {
    ev.preventDefault();
    token = document.getElementById("token").value.trim();
    try { sessionStorage.setItem("trainlet-token", token); } catch (e) {}
    document.getElementById("login").hidden = true;
    schedule(0);
  });
  poll();
})();
</script>
</body>
</html>
)HTML");
  return *kPage;
}

}  // namespace trainlet::controller
