#include "controller/report_limits.h"

#include <algorithm>
#include <limits>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_format.h"
#include "preflight/check_result.h"

namespace trainlet::controller {
namespace {

absl::Status TooLong(absl::string_view field, size_t max, size_t got) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: at most %d bytes, got %d", field, max, got));
}

absl::Status TooMany(absl::string_view field, int max, int got) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: at most %d entries, got %d", field, max, got));
}

absl::Status CheckRange(absl::string_view field, int64_t value, int64_t lo, int64_t hi) {
  if (value >= lo && value <= hi) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: expected %d..%d, got %d", field, lo, hi, value));
}

absl::Status CheckText(absl::string_view field, const std::string& text, size_t max) {
  if (text.size() > max) return TooLong(field, max, text.size());
  return absl::OkStatus();
}

// --slow-nodes (docs/slow-nodes.md): the coordinator's slow nodes; their
// ids and causes become /metrics labels.
absl::Status CheckSlowNodes(const v1::CoordinatorView& c) {
  if (c.slow_nodes_size() > kMaxSlowNodes) {
    return TooMany("coordinator.slow_nodes", kMaxSlowNodes, c.slow_nodes_size());
  }
  for (int i = 0; i < c.slow_nodes_size(); ++i) {
    const v1::SlowNodeView& n = c.slow_nodes(i);
    if (n.node_id().empty()) {
      return absl::InvalidArgumentError("coordinator.slow_nodes.node_id: empty");
    }
    // The coordinator names a node once; twice would be the same
    // trainlet_slow_node series twice in one scrape, an exposition error
    // (Prometheus keeps the first and counts it in
    // prometheus_target_scrapes_sample_duplicate_timestamp_total, which
    // kube-prometheus alerts on). At most kMaxSlowNodes of them: a scan.
    if (std::any_of(c.slow_nodes().begin(), c.slow_nodes().begin() + i,
                    [&](const v1::SlowNodeView& o) { return o.node_id() == n.node_id(); })) {
      return absl::InvalidArgumentError(
          absl::StrFormat("coordinator.slow_nodes.node_id: entry %d names the node of an "
                          "earlier one (a node is named once)",
                          i));
    }
    if (absl::Status s = CheckText("coordinator.slow_nodes.node_id", n.node_id(), kMaxNodeIdLength);
        !s.ok()) {
      return s;
    }
    if (n.cause() != "cpu" && n.cause() != "network" && n.cause() != "progress" &&
        n.cause() != "gpu") {
      return absl::InvalidArgumentError(
          "coordinator.slow_nodes.cause: expected cpu, network, progress or gpu");
    }
    if (absl::Status s = CheckText("coordinator.slow_nodes.evidence", n.evidence(), kMaxTextLength);
        !s.ok()) {
      return s;
    }
    for (absl::Status s : {CheckRange("coordinator.slow_nodes.since_unix_ms", n.since_unix_ms(), 0,
                                      std::numeric_limits<int64_t>::max()),
                           CheckRange("coordinator.slow_nodes.slowdown_percent",
                                      n.slowdown_percent(), 0, kMaxSlowdownPercent)}) {
      if (!s.ok()) return s;
    }
  }
  return absl::OkStatus();
}

bool IsPrintableNoSpace(absl::string_view s) {
  for (char c : s) {
    if (c <= ' ' || c > '~') return false;
  }
  return true;
}

bool IsProgressKey(absl::string_view key) {
  if (key.empty() || key.size() > kMaxProgressKeyLength) return false;
  for (char c : key) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '.' && c != '-') {
      return false;
    }
  }
  return true;
}

// Length of the valid UTF-8 sequence at s[i], 0 when it is not one.
size_t Utf8SequenceLength(const std::string& s, size_t i) {
  const unsigned char c = s[i];
  size_t n;
  if (c < 0x80) return 1;
  if (c >= 0xc2 && c <= 0xdf) {
    n = 2;
  } else if (c >= 0xe0 && c <= 0xef) {
    n = 3;
  } else if (c >= 0xf0 && c <= 0xf4) {
    n = 4;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  for (size_t k = 1; k < n; ++k) {
    if ((static_cast<unsigned char>(s[i + k]) & 0xc0) != 0x80) return 0;
  }
  const unsigned char c1 = s[i + 1];
  if ((c == 0xe0 && c1 < 0xa0) || (c == 0xed && c1 > 0x9f) || (c == 0xf0 && c1 < 0x90) ||
      (c == 0xf4 && c1 > 0x8f)) {
    return 0;  // overlong, surrogate or above U+10FFFF.
  }
  return n;
}

// The node's preflight: within preflight.proto's caps (the one validation
// every receiver of a PreflightReport runs), and the report's own node.
absl::Status CheckPreflight(const v1::HealthReport& r) {
  if (!r.has_preflight()) return absl::OkStatus();
  const v1::PreflightReport& p = r.preflight();
  if (absl::Status s = preflight::ValidateReport(p); !s.ok()) return s;
  if (p.node_id() != r.node_id() || p.incarnation() != r.incarnation()) {
    return absl::InvalidArgumentError(
        "preflight report: node_id and incarnation must be the health report's own (a node "
        "reports its own preflight)");
  }
  if (p.round() > kMaxRound)
    return absl::InvalidArgumentError("preflight report: round out of range");
  return absl::OkStatus();
}

}  // namespace

void FitText(std::string* text, size_t max) {
  std::string out;
  out.reserve(std::min(text->size(), max));
  for (size_t i = 0; i < text->size();) {
    size_t n = Utf8SequenceLength(*text, i);
    if (out.size() + std::max<size_t>(n, 1) > max) break;
    if (n == 0) {
      out.push_back('?');
      ++i;
    } else {
      out.append(*text, i, n);
      i += n;
    }
  }
  *text = std::move(out);
}

bool IsValidJobId(absl::string_view job_id) {
  if (job_id.empty() || job_id.size() > kMaxJobIdLength) return false;
  for (char c : job_id) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '_' && c != '-') {
      return false;
    }
  }
  return true;
}

absl::Status ValidateHealthReport(const v1::HealthReport& r) {
  if (const size_t size = r.ByteSizeLong(); size > kMaxReportBytes) {
    return absl::ResourceExhaustedError(
        absl::StrFormat("report: at most %d bytes, got %d (the agent trims its reports to this)",
                        kMaxReportBytes, size));
  }
  if (!IsValidJobId(r.job_id())) {
    return absl::InvalidArgumentError(
        "job_id: expected [A-Za-z0-9._-]{1,128} (the job's --job-id)");
  }
  if (r.node_id().empty() || r.node_id().size() > kMaxNodeIdLength ||
      !IsPrintableNoSpace(r.node_id())) {
    return absl::InvalidArgumentError(
        "node_id: expected 1..253 bytes of printable ASCII without spaces (the pod's host name)");
  }
  if (r.incarnation() == 0) return absl::InvalidArgumentError("incarnation: must not be zero");
  if (r.sequence() == 0) return absl::InvalidArgumentError("sequence: must start at 1");
  if (r.round() > kMaxRound) return absl::InvalidArgumentError("round: out of range");
  if (r.node_rank() < -1 || r.node_rank() >= kMaxRank || r.nnodes() < 0 || r.nnodes() > kMaxRank ||
      r.world_size() < 0 || r.world_size() > kMaxRank) {
    return absl::InvalidArgumentError("node_rank, nnodes or world_size: out of range");
  }
  if (r.restart_count() < 0 || r.restart_count() > kMaxRank) {
    return absl::InvalidArgumentError("restart_count: out of range");
  }
  if (absl::Status s = CheckText("last_failure", r.last_failure(), kMaxTextLength); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckText("command", r.command(), kMaxCommandTextLength); !s.ok()) {
    return s;
  }
  if (absl::Status s = CheckText("topology", r.topology(), kMaxTextLength); !s.ok()) return s;
  for (absl::Status s : {CheckRange("min_nodes", r.min_nodes(), 0, kMaxRank),
                         CheckRange("max_nodes", r.max_nodes(), 0, kMaxRank),
                         CheckRange("join_deadline_unix_ms", r.join_deadline_unix_ms(), 0,
                                    std::numeric_limits<int64_t>::max())}) {
    if (!s.ok()) return s;
  }
  if (r.workers_size() > kMaxWorkers) return TooMany("workers", kMaxWorkers, r.workers_size());
  for (const v1::WorkerHealth& w : r.workers()) {
    if (w.local_rank() < 0 || w.local_rank() >= kMaxWorkers || w.rank() < -1 ||
        w.rank() >= kMaxRank || w.pid() < 0 || w.restarts() < 0 || w.exited_unix_ms() < 0) {
      return absl::InvalidArgumentError(absl::StrFormat(
          "workers[local_rank=%d]: local_rank, rank, pid, restarts or exited_unix_ms out of range",
          w.local_rank()));
    }
  }
  const v1::Progress& p = r.progress();
  if (p.fields_size() > kMaxProgressFields) {
    return TooMany("progress.fields", kMaxProgressFields, p.fields_size());
  }
  for (const v1::ProgressField& f : p.fields()) {
    if (!IsProgressKey(f.key())) {
      return absl::InvalidArgumentError("progress.fields.key: expected [A-Za-z0-9_.-]{1,64}");
    }
    if (absl::Status s = CheckText("progress.fields.value", f.value(), kMaxProgressValueLength);
        !s.ok()) {
      return s;
    }
  }
  if (p.age_ms() < 0) return absl::InvalidArgumentError("progress.age_ms: must not be negative");
  if (p.first_age_ms() < 0) {
    return absl::InvalidArgumentError("progress.first_age_ms: must not be negative");
  }
  if (r.gpus_size() > kMaxGpus) return TooMany("gpus", kMaxGpus, r.gpus_size());
  for (const v1::GpuReport& g : r.gpus()) {
    if (absl::Status s = CheckText("gpus.uuid", g.uuid(), kMaxGpuUuidLength); !s.ok()) return s;
    if (absl::Status s = CheckText("gpus.reason", g.reason(), kMaxGpuReasonLength); !s.ok()) {
      return s;
    }
  }
  const v1::CoordinatorView& c = r.coordinator();
  for (absl::Status s : {CheckRange("coordinator.members", c.members(), 0, kMaxRank),
                         CheckRange("coordinator.gathering", c.gathering(), 0, kMaxRank),
                         CheckRange("coordinator.min_nodes", c.min_nodes(), 0, kMaxRank),
                         CheckRange("coordinator.max_nodes", c.max_nodes(), 0, kMaxRank),
                         CheckRange("coordinator.gives_up_unix_ms", c.gives_up_unix_ms(), 0,
                                    std::numeric_limits<int64_t>::max())}) {
    if (!s.ok()) return s;
  }
  if (c.rounds() > kMaxRound) return absl::InvalidArgumentError("coordinator.rounds: out of range");
  if (absl::Status s = CheckText("coordinator.verdict", c.verdict(), kMaxTextLength); !s.ok()) {
    return s;
  }
  if (c.lost_nodes_size() > kMaxLostNodes) {
    return TooMany("coordinator.lost_nodes", kMaxLostNodes, c.lost_nodes_size());
  }
  for (const std::string& n : c.lost_nodes()) {
    if (absl::Status s = CheckText("coordinator.lost_nodes", n, kMaxNodeIdLength); !s.ok()) {
      return s;
    }
  }
  if (c.restarts_size() > kMaxRestartReasons) {
    return TooMany("coordinator.restarts", kMaxRestartReasons, c.restarts_size());
  }
  for (const v1::RestartReason& rr : c.restarts()) {
    if (absl::Status s = CheckText("coordinator.restarts.reason", rr.reason(), kMaxTextLength);
        !s.ok()) {
      return s;
    }
  }
  if (absl::Status s = CheckSlowNodes(c); !s.ok()) return s;
  if (absl::Status s = CheckText("hang_evidence", r.hang_evidence(), kMaxHangEvidenceLength);
      !s.ok()) {
    return s;
  }
  if (r.events_size() > kMaxEvents) return TooMany("events", kMaxEvents, r.events_size());
  for (const v1::ReportEvent& e : r.events()) {
    if (absl::Status s = CheckText("events.cause", e.cause(), kMaxTextLength); !s.ok()) return s;
    if (e.round() > kMaxRound) return absl::InvalidArgumentError("events.round: out of range");
    if (e.has_failed_rank() && (e.failed_rank() < 0 || e.failed_rank() > kMaxRank)) {
      return absl::InvalidArgumentError("events.failed_rank: out of range");
    }
    if (e.failed_unix_ms() < 0) {
      return absl::InvalidArgumentError("events.failed_unix_ms: must not be negative");
    }
  }
  if (absl::Status s = CheckPreflight(r); !s.ok()) return s;
  if (r.report_interval_ms() != 0 &&
      (r.report_interval_ms() < absl::ToInt64Milliseconds(kMinReportInterval) ||
       r.report_interval_ms() > absl::ToInt64Milliseconds(kMaxReportInterval))) {
    return absl::InvalidArgumentError(
        absl::StrFormat("report_interval_ms: expected 0 or %d..%d, got %d",
                        absl::ToInt64Milliseconds(kMinReportInterval),
                        absl::ToInt64Milliseconds(kMaxReportInterval), r.report_interval_ms()));
  }
  return absl::OkStatus();
}

void TrimToLimits(v1::HealthReport* r) {
  FitText(r->mutable_last_failure(), kMaxTextLength);
  FitText(r->mutable_command(), kMaxCommandTextLength);
  FitText(r->mutable_topology(), kMaxTextLength);
  if (r->workers_size() > kMaxWorkers) {
    r->mutable_workers()->DeleteSubrange(kMaxWorkers, r->workers_size() - kMaxWorkers);
  }
  v1::Progress* p = r->mutable_progress();
  if (p->fields_size() > kMaxProgressFields) {
    p->mutable_fields()->DeleteSubrange(kMaxProgressFields, p->fields_size() - kMaxProgressFields);
  }
  for (v1::ProgressField& f : *p->mutable_fields()) {
    if (!IsProgressKey(f.key())) f.set_key("invalid_key");
    FitText(f.mutable_value(), kMaxProgressValueLength);
  }
  if (r->gpus_size() > kMaxGpus)
    r->mutable_gpus()->DeleteSubrange(kMaxGpus, r->gpus_size() - kMaxGpus);
  for (v1::GpuReport& g : *r->mutable_gpus()) {
    FitText(g.mutable_uuid(), kMaxGpuUuidLength);
    FitText(g.mutable_reason(), kMaxGpuReasonLength);
  }
  // Only the agent that hosts the coordinator sends a view (mutable_ would
  // give every report an empty one).
  if (r->has_coordinator()) {
    v1::CoordinatorView* c = r->mutable_coordinator();
    // The latest are the last in both lists: drop the oldest.
    if (c->lost_nodes_size() > kMaxLostNodes) {
      c->mutable_lost_nodes()->DeleteSubrange(0, c->lost_nodes_size() - kMaxLostNodes);
    }
    for (std::string& n : *c->mutable_lost_nodes()) FitText(&n, kMaxNodeIdLength);
    if (c->restarts_size() > kMaxRestartReasons) {
      c->mutable_restarts()->DeleteSubrange(0, c->restarts_size() - kMaxRestartReasons);
    }
    for (v1::RestartReason& rr : *c->mutable_restarts()) {
      FitText(rr.mutable_reason(), kMaxTextLength);
    }
    FitText(c->mutable_verdict(), kMaxTextLength);
    if (c->slow_nodes_size() > kMaxSlowNodes) {
      c->mutable_slow_nodes()->DeleteSubrange(kMaxSlowNodes, c->slow_nodes_size() - kMaxSlowNodes);
    }
    for (v1::SlowNodeView& n : *c->mutable_slow_nodes()) {
      FitText(n.mutable_evidence(), kMaxTextLength);
    }
  }
  FitText(r->mutable_hang_evidence(), kMaxHangEvidenceLength);
  if (r->events_size() > kMaxEvents) {
    r->mutable_events()->DeleteSubrange(0, r->events_size() - kMaxEvents);
  }
  for (v1::ReportEvent& e : *r->mutable_events()) FitText(e.mutable_cause(), kMaxTextLength);
  // A preflight the controller would refuse (and the whole report with it)
  // is not sent: it is built within its caps (preflight::MakeReport), so
  // this is a bug, and the health report matters more.
  if (!CheckPreflight(*r).ok()) r->clear_preflight();
  // Still too large (1,024 workers with long texts): the evidence goes
  // first, then the command, the preflight's links, then workers from the
  // highest local rank; the preflight's checks last (at most ~20 KiB).
  if (r->ByteSizeLong() > kMaxReportBytes) r->clear_hang_evidence();
  if (r->ByteSizeLong() > kMaxReportBytes) r->clear_command();
  if (r->ByteSizeLong() > kMaxReportBytes && r->has_preflight()) {
    r->mutable_preflight()->clear_links();
  }
  while (r->ByteSizeLong() > kMaxReportBytes && r->workers_size() > 0) {
    r->mutable_workers()->RemoveLast();
  }
  if (r->ByteSizeLong() > kMaxReportBytes) r->clear_preflight();
}

}  // namespace trainlet::controller
