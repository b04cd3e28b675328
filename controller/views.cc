#include "controller/views.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace trainlet::controller {
namespace {

// Bounds on what one string may take in a view (the reports' own limits are
// lower; these hold whatever the adapter passes).
constexpr size_t kMaxId = 256;
constexpr size_t kMaxText = 4096;
constexpr size_t kMaxLabel = 256;
// Preflight checks and links a node shows (the report's own caps,
// preflight.proto), whatever the adapter passes.
constexpr size_t kMaxPreflightChecks = 32;
constexpr size_t kMaxPreflightLinks = 8;

// A check's name as /metrics labels it: [a-z0-9_]{1,32} (the report's cap,
// checked again here: a label's values must stay few).
bool IsCheckLabel(absl::string_view check) {
  if (check.empty() || check.size() > 32) return false;
  return std::all_of(check.begin(), check.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '_';
  });
}

// A node's checks as /metrics has them: one series per check name (a
// name the agent sent twice is one, its worst outcome), names that are
// not labels left out.
std::vector<std::pair<std::string, CheckOutcome>> PreflightSeriesOf(const PreflightView& p) {
  auto rank = [](CheckOutcome o) {
    return o == CheckOutcome::kFail ? 3 : o == CheckOutcome::kSkipped ? 2 : 1;
  };
  std::vector<std::pair<std::string, CheckOutcome>> out;
  for (size_t i = 0; i < p.checks.size() && i < kMaxPreflightChecks; ++i) {
    const PreflightCheckView& c = p.checks[i];
    if (!IsCheckLabel(c.check) || c.outcome == CheckOutcome::kUnknown) continue;
    auto same =
        std::find_if(out.begin(), out.end(), [&](const auto& e) { return e.first == c.check; });
    if (same == out.end()) {
      out.emplace_back(c.check, c.outcome);
    } else if (rank(c.outcome) > rank(same->second)) {
      same->second = c.outcome;
    }
  }
  return out;
}

// The page's and the table's word for a node's preflight: "passed",
// "2 failed", "skipped" (every check skipped), "-" (none).
std::string PreflightWord(const PreflightView& p) {
  if (!p.known) return "-";
  if (p.failed() > 0) return absl::StrCat(p.failed(), " failed");
  if (p.passed() > 0) return "passed";
  return "skipped";
}

// `text` as valid UTF-8: at most `max` bytes of input, every invalid or
// truncated sequence replaced by U+FFFD.
std::string ValidUtf8(absl::string_view text, size_t max) {
  if (text.size() > max) text = text.substr(0, max);
  std::string out;
  out.reserve(text.size());
  const auto* s = reinterpret_cast<const unsigned char*>(text.data());
  const size_t n = text.size();
  size_t i = 0;
  while (i < n) {
    const unsigned char c = s[i];
    int len = 0;
    uint32_t min = 0;
    if (c < 0x80) {
      out.push_back(static_cast<char>(c));
      ++i;
      continue;
    } else if ((c & 0xE0) == 0xC0) {
      len = 2;
      min = 0x80;
    } else if ((c & 0xF0) == 0xE0) {
      len = 3;
      min = 0x800;
    } else if ((c & 0xF8) == 0xF0) {
      len = 4;
      min = 0x10000;
    }
    bool ok = len > 0 && i + len <= n;
    uint32_t cp = len > 0 ? (c & (0xFF >> (len + 1))) : 0;
    for (int k = 1; ok && k < len; ++k) {
      if ((s[i + k] & 0xC0) != 0x80) {
        ok = false;
      } else {
        cp = (cp << 6) | (s[i + k] & 0x3F);
      }
    }
    if (ok && (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))) ok = false;
    if (ok) {
      out.append(text.data() + i, len);
      i += len;
    } else {
      out.append("\xEF\xBF\xBD");
      ++i;
    }
  }
  return out;
}

std::string Number(double value) {
  if (!std::isfinite(value)) return "-1";
  return absl::StrFormat("%.6g", value);
}

// How long the job ran (or runs), -1 unknown.
int64_t DurationOf(const JobView& job, int64_t now_unix_ms) {
  if (job.started_unix_ms <= 0) return -1;
  const int64_t end = job.ended_unix_ms > 0 ? job.ended_unix_ms : now_unix_ms;
  return std::max<int64_t>(0, end - job.started_unix_ms);
}

// ---- JSON.

class JsonWriter {
 public:
  void Key(absl::string_view key) {
    Comma();
    absl::StrAppend(&out_, "\"", key, "\":");
    pending_value_ = true;
  }
  void String(absl::string_view value, size_t max = kMaxText) {
    Comma();
    out_ += JsonQuoteBounded(value, max);
  }
  void Int(int64_t value) {
    Comma();
    absl::StrAppend(&out_, value);
  }
  void Uint(uint64_t value) {
    Comma();
    absl::StrAppend(&out_, value);
  }
  void Double(double value) {
    Comma();
    out_ += Number(value);
  }
  void Bool(bool value) {
    Comma();
    out_ += value ? "true" : "false";
  }
  // Key and value at once: w.Int("step", 12).
  void String(absl::string_view key, absl::string_view value, size_t max = kMaxText) {
    Key(key);
    String(value, max);
  }
  void Int(absl::string_view key, int64_t value) {
    Key(key);
    Int(value);
  }
  void Uint(absl::string_view key, uint64_t value) {
    Key(key);
    Uint(value);
  }
  void Double(absl::string_view key, double value) {
    Key(key);
    Double(value);
  }
  void Bool(absl::string_view key, bool value) {
    Key(key);
    Bool(value);
  }
  // A number, or null when it is not finite (a series value not reported).
  void DoubleOrNull(double value) {
    Comma();
    out_ += std::isfinite(value) ? absl::StrFormat("%.6g", value) : "null";
  }
  size_t size() const { return out_.size(); }
  void Open(char c) {
    Comma();
    out_.push_back(c);
    first_ = true;
  }
  void Close(char c) {
    out_.push_back(c);
    first_ = false;
  }
  std::string Take() { return std::move(out_); }

  static std::string JsonQuoteBounded(absl::string_view text, size_t max) {
    const std::string valid = ValidUtf8(text, max);
    std::string out = "\"";
    for (char ch : valid) {
      const unsigned char c = static_cast<unsigned char>(ch);
      switch (c) {
        case '"':
          out += "\\\"";
          break;
        case '\\':
          out += "\\\\";
          break;
        case '\n':
          out += "\\n";
          break;
        case '\r':
          out += "\\r";
          break;
        case '\t':
          out += "\\t";
          break;
        case '<':
        case '>':
        case '&':
          absl::StrAppendFormat(&out, "\\u%04x", c);
          break;
        default:
          if (c < 0x20 || c == 0x7F) {
            absl::StrAppendFormat(&out, "\\u%04x", c);
          } else {
            out.push_back(ch);
          }
      }
    }
    out += "\"";
    return out;
  }

 private:
  void Comma() {
    if (pending_value_) {
      pending_value_ = false;
      first_ = false;
      return;
    }
    if (!first_) out_.push_back(',');
    first_ = false;
  }
  std::string out_;
  bool first_ = true;
  bool pending_value_ = false;
};

void WriteRootCause(JsonWriter& w, const RootCauseView& c) {
  w.Open('{');
  w.Bool("known", c.known);
  w.String("kind", c.kind, kMaxId);
  w.String("node_id", c.node_id, kMaxId);
  w.Int("rank", c.rank);
  w.Int("local_rank", c.local_rank);
  w.Int("exit_code", c.exit_code);
  w.Int("at_unix_ms", c.at_unix_ms);
  w.Uint("round", c.round);
  w.String("text", c.text);
  w.String("headline", c.known ? HeadlineOf(c) : "");
  w.Close('}');
}

// A restart's cost (docs/goodput.md); "known": false where there is none.
void WriteRestartTimes(JsonWriter& w, const RestartTimesView& t) {
  w.Open('{');
  w.Bool("known", t.known);
  if (t.known) {
    w.String("node_id", t.node_id, kMaxId);
    w.Int("rank", t.rank);
    w.Int("failed_unix_ms", t.failed_unix_ms);
    w.Int("detection_ms", t.detection_ms);
    w.Int("restart_ms", t.restart_ms);
    w.Int("waiting_ms", t.waiting_ms);
    w.Int("rewarm_ms", t.rewarm_ms);
    w.Int("redone_ms", t.redone_ms);
    w.Int("lost_ms", t.lost_ms());
    w.Int("failed_at_step", t.failed_at_step);
    w.Int("resumed_from_step", t.resumed_from_step);
    w.Int("redone_steps", t.redone_steps);
    w.Bool("done", t.done);
  }
  w.Close('}');
}

// A job's wall time by phase: "<phase>_ms" for each, adding up to wall_ms.
void WriteGoodput(JsonWriter& w, const GoodputView& g) {
  w.Open('{');
  w.Bool("known", g.known);
  w.Int("wall_ms", g.wall_ms);
  for (int p = 0; p < kGoodputPhases; ++p) {
    w.Int(absl::StrCat(GoodputPhaseName(p), "_ms"), g.ms[p]);
  }
  w.Double("ettr", g.ettr);
  w.String("phase", g.phase, kMaxId);
  w.Int("phase_since_unix_ms", g.phase_since_unix_ms);
  w.Close('}');
}

void WriteNode(JsonWriter& w, const NodeView& node) {
  w.Open('{');
  w.String("node_id", node.node_id, kMaxId);
  w.Int("node_rank", node.node_rank);
  w.String("incarnation", absl::StrFormat("%016x", node.incarnation));
  w.Bool("up", node.up);
  w.Bool("lost", node.lost);
  w.Int("lost_at_unix_ms", node.lost_at_unix_ms);
  w.String("lost_reason", node.lost_reason);
  w.Bool("restored", node.restored);
  w.Int("report_age_ms", node.report_age_ms);
  w.Int("report_lag_ms", node.report_lag_ms);
  w.String("agent_state", AgentStateName(node.agent_state));
  w.Uint("round", node.round);
  w.Int("restart_count", node.restart_count);
  w.String("last_failure", node.last_failure);
  if (!node.topology.empty()) w.String("topology", node.topology);
  w.Int("exit_code", node.exit_code);
  w.Uint("agent_rss_bytes", node.agent_rss_bytes);
  w.Key("workers");
  w.Open('[');
  for (const WorkerView& worker : node.workers) {
    w.Open('{');
    w.Int("local_rank", worker.local_rank);
    w.Int("rank", worker.rank);
    w.Int("pid", worker.pid);
    w.String("state", WorkerStateName(worker.state));
    w.Int("exit_code", worker.exit_code);
    w.Int("restarts", worker.restarts);
    w.Int("exited_unix_ms", worker.exited_unix_ms);
    w.Close('}');
  }
  w.Close(']');
  w.Key("progress");
  w.Open('{');
  w.Bool("known", node.progress.known);
  w.Int("step", node.progress.step);
  w.Int("local_rank", node.progress.local_rank);
  w.Double("steps_per_second", node.progress.steps_per_second);
  w.Int("age_ms", node.progress.age_ms);
  w.Key("fields");
  w.Open('[');
  for (const auto& [key, value] : node.progress.fields) {
    w.Open('[');
    w.String(key, kMaxId);
    w.String(value, kMaxId);
    w.Close(']');
  }
  w.Close(']');
  w.Close('}');
  w.Key("gpus");
  w.Open('[');
  for (const GpuView& gpu : node.gpus) {
    w.Open('{');
    w.Int("index", gpu.index);
    w.String("uuid", gpu.uuid, kMaxId);
    w.String("status", GpuStatusName(gpu.status));
    w.String("reason", gpu.reason);
    w.Close('}');
  }
  w.Close(']');
  const PreflightView& p = node.preflight;
  w.Key("preflight");
  w.Open('{');
  w.Bool("known", p.known);
  w.Uint("round", p.round);
  w.Int("started_unix_ms", p.started_unix_ms);
  w.Int("duration_ms", p.duration_ms);
  w.Int("passed", p.passed());
  w.Int("failed", p.failed());
  w.Int("skipped", p.skipped());
  w.Key("checks");
  w.Open('[');
  for (size_t i = 0; i < p.checks.size() && i < kMaxPreflightChecks; ++i) {
    const PreflightCheckView& c = p.checks[i];
    w.Open('{');
    w.String("check", c.check, kMaxId);
    w.String("outcome", CheckOutcomeName(c.outcome));
    w.String("reason", c.reason);
    w.Double("value", c.value);
    w.String("unit", c.unit, kMaxId);
    w.Double("threshold", c.threshold);
    w.Close('}');
  }
  w.Close(']');
  w.Key("links");
  w.Open('[');
  for (size_t i = 0; i < p.links.size() && i < kMaxPreflightLinks; ++i) {
    const PreflightLinkView& l = p.links[i];
    w.Open('{');
    w.String("to_node", l.to_node, kMaxId);
    w.Double("bandwidth_bytes_per_second", l.bandwidth_bytes_per_second);
    w.Double("rtt_seconds", l.rtt_seconds);
    w.String("error", l.error);
    w.Close('}');
  }
  w.Close(']');
  w.Close('}');
  w.Close('}');
}

// The controller's figures, the members of every document.
void WriteFigures(JsonWriter& w, const ControllerSnapshot& snapshot) {
  w.Int("schema", kViewsJsonSchema);
  w.Int("now_unix_ms", snapshot.now_unix_ms);
  w.Int("uptime_ms", snapshot.uptime_ms);
  w.Int("reports_received", snapshot.reports_received);
  w.Int("reports_rejected", snapshot.reports_rejected);
  w.String("version", snapshot.version, kMaxId);
}

// What a job's summary says (`/api/jobs`), also the start of its detail.
void WriteJobSummaryFields(JsonWriter& w, const JobView& job, int64_t now_unix_ms) {
  const JobTotals& totals = job.totals;
  w.String("job_id", job.job_id, kMaxId);
  w.String("state", JobStateName(job.state));
  w.Uint("round", job.round);
  w.Int("rounds", job.rounds);
  w.Int("nnodes", job.nnodes);
  w.Int("world_size", job.world_size);
  w.Int("min_nodes", job.min_nodes);
  w.Int("max_nodes", job.max_nodes);
  w.Int("last_report_unix_ms", job.last_report_unix_ms);
  w.Int("started_unix_ms", job.started_unix_ms);
  w.Int("ended_unix_ms", job.ended_unix_ms);
  w.Int("duration_ms", DurationOf(job, now_unix_ms));
  w.String("command", job.command);
  w.Bool("restored", job.restored);
  w.Int("restarts_total", job.restarts_total);
  w.Int("hangs_total", job.hangs_total);
  w.Int("failures_total", job.failures_total);
  w.Key("root_cause");
  WriteRootCause(w, job.root_cause);
  w.Key("goodput");
  WriteGoodput(w, job.goodput);
  w.Key("waiting");
  w.Open('{');
  w.Bool("waiting", job.waiting.waiting);
  w.Int("nodes", job.waiting.nodes);
  w.Int("min_nodes", job.waiting.min_nodes);
  w.Int("max_nodes", job.waiting.max_nodes);
  w.Int("gives_up_unix_ms", job.waiting.gives_up_unix_ms);
  w.Uint("round", job.waiting.round);
  w.String("text", WaitingText(job.waiting, now_unix_ms));
  w.Close('}');
  w.Key("lost_nodes");
  w.Open('[');
  for (const std::string& node : job.lost_nodes) w.String(node, kMaxId);
  w.Close(']');
  w.Key("slow_nodes");
  w.Open('[');
  for (const SlowNodeView& n : job.slow_nodes) {
    w.Open('{');
    w.String("node_id", n.node_id, kMaxId);
    w.String("cause", n.cause, kMaxId);
    w.String("evidence", n.evidence);
    w.Int("since_unix_ms", n.since_unix_ms);
    w.Int("slowdown_percent", n.slowdown_percent);
    w.Close('}');
  }
  w.Close(']');
  w.Key("totals");
  w.Open('{');
  w.Int("nodes", totals.nodes);
  w.Int("nodes_up", totals.nodes_up);
  w.Int("nodes_lost", totals.nodes_lost);
  w.Int("workers", totals.workers);
  w.Int("workers_running", totals.workers_running);
  w.Int("progress_step", totals.progress_step);
  w.Double("steps_per_second", totals.steps_per_second);
  w.Int("progress_age_ms", totals.progress_age_ms);
  w.Int("report_lag_ms", totals.report_lag_ms);
  w.Int("gpus_fatal", totals.gpus_fatal);
  w.Int("gpus_degraded", totals.gpus_degraded);
  w.Int("nodes_preflight_failed", totals.nodes_preflight_failed);
  w.Key("preflight_failed_nodes");
  w.Open('[');
  for (size_t i = 0; i < totals.preflight_failed_nodes.size() && i < kPreflightNodesNamed; ++i) {
    w.String(totals.preflight_failed_nodes[i], kMaxId);
  }
  w.Close(']');
  w.Close('}');
}

// A job's detail: the summary, a page of its nodes from `job.nodes_from`
// (until the writer holds `max_bytes`), then everything else.
void WriteJobDetail(JsonWriter& w, const JobView& job, int64_t now_unix_ms, size_t max_bytes,
                    size_t* nodes_written) {
  w.Open('{');
  WriteJobSummaryFields(w, job, now_unix_ms);
  w.Key("nodes_total");
  w.Int(
      std::max<int64_t>(job.nodes_total, job.nodes_from + static_cast<int64_t>(job.nodes.size())));
  w.Int("nodes_from", job.nodes_from);
  w.Key("nodes");
  w.Open('[');
  size_t written = 0;
  for (const NodeView& node : job.nodes) {
    if (written > 0 && w.size() >= max_bytes) break;
    WriteNode(w, node);
    ++written;
  }
  w.Close(']');
  const int64_t end = job.nodes_from + static_cast<int64_t>(written);
  w.Int("next_from",
        end < std::max<int64_t>(job.nodes_total, job.nodes_from + job.nodes.size()) ? end : -1);
  if (nodes_written != nullptr) *nodes_written = written;
  w.Key("restarts");
  w.Open('[');
  for (const RestartView& restart : job.restarts) {
    w.Open('{');
    w.Uint("round", restart.round);
    w.Int("at_unix_ms", restart.at_unix_ms);
    w.String("node_id", restart.node_id, kMaxId);
    w.String("cause", restart.cause);
    w.Key("times");
    WriteRestartTimes(w, restart.times);
    w.Close('}');
  }
  w.Close(']');
  w.Key("hangs");
  w.Open('[');
  for (const HangView& hang : job.hangs) {
    w.Open('{');
    w.Uint("round", hang.round);
    w.Int("at_unix_ms", hang.at_unix_ms);
    w.String("node_id", hang.node_id, kMaxId);
    w.String("verdict", hang.verdict);
    w.String("evidence_summary", hang.evidence_summary);
    w.Int("seq", hang.seq);
    w.Int("evidence_bytes", hang.evidence_bytes);
    w.Bool("suspect", hang.suspect);
    w.Close('}');
  }
  w.Close(']');
  w.Key("rounds_timeline");
  w.Open('[');
  for (const RoundView& r : job.rounds_timeline) {
    w.Open('{');
    w.Uint("round", r.round);
    w.Int("started_unix_ms", r.started_unix_ms);
    w.Int("ended_unix_ms", r.ended_unix_ms);
    w.Int("nodes", r.nodes);
    w.Int("world_size", r.world_size);
    w.String("restart_cause", r.restart_cause);
    w.Key("ended_by");
    WriteRootCause(w, r.ended_by);
    w.Key("restart");
    WriteRestartTimes(w, r.restart);
    w.Close('}');
  }
  w.Close(']');
  w.Key("series");
  w.Open('{');
  w.Int("every_ms", job.series.every_ms);
  w.Key("keys");
  w.Open('[');
  for (const std::string& key : job.series.keys) w.String(key, kMaxId);
  w.Close(']');
  w.Key("points");
  w.Open('[');
  for (const SeriesPointView& p : job.series.points) {
    // [at, step, rate, value...]: compact, a job has up to a few hundred.
    w.Open('[');
    w.Int(p.at_unix_ms);
    w.Int(p.step);
    w.DoubleOrNull(p.steps_per_second >= 0 ? p.steps_per_second : NAN);
    for (double v : p.values) w.DoubleOrNull(v);
    w.Close(']');
  }
  w.Close(']');
  w.Close('}');
  w.Close('}');
}

// ---- Prometheus.

std::string Seconds(int64_t ms) { return absl::StrFormat("%.3f", static_cast<double>(ms) / 1000); }

bool Finished(const JobView& job) {
  return job.state == JobState::kSucceeded || job.state == JobState::kFailed;
}

// ---- Table.

std::string Duration(int64_t ms) {
  if (ms < 0) return "-";
  if (ms < 1000) return absl::StrCat(ms, "ms");
  if (ms < 60'000) return absl::StrFormat("%.1fs", ms / 1000.0);
  const int64_t s = ms / 1000;
  if (s < 3600) return absl::StrFormat("%dm%02ds", s / 60, s % 60);
  if (s < 86400) return absl::StrFormat("%dh%02dm", s / 3600, (s / 60) % 60);
  return absl::StrFormat("%dd%02dh", s / 86400, (s / 3600) % 24);
}

std::string Ettr(const GoodputView& g) {
  return g.known && g.ettr >= 0 ? absl::StrFormat("%.1f%%", g.ettr * 100) : std::string("-");
}

// "detection 2.0s, restart 3.0s, re-warm 3.0s, redone 9.8s (10 steps)".
std::string RestartCost(const RestartTimesView& t) {
  std::string out =
      absl::StrCat("detection ", Duration(t.detection_ms), ", restart ", Duration(t.restart_ms));
  if (t.waiting_ms > 0) absl::StrAppend(&out, ", waiting ", Duration(t.waiting_ms));
  absl::StrAppend(&out, ", re-warm ", Duration(t.rewarm_ms), ", redone ", Duration(t.redone_ms));
  if (t.redone_steps >= 0) {
    absl::StrAppend(&out, " (", t.redone_steps, " steps: ", t.failed_at_step, " back to ",
                    t.resumed_from_step, ")");
  }
  if (!t.done) out += ", so far";
  return out;
}

std::string Rate(double steps_per_second) {
  if (!(steps_per_second >= 0) || !std::isfinite(steps_per_second)) return "-";
  return absl::StrFormat("%.2f", steps_per_second);
}

std::string UtcTime(int64_t unix_ms) {
  if (unix_ms <= 0) return "-";
  return absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(unix_ms), absl::UTCTimeZone());
}

// Cells for a terminal: printable ASCII only (SafeForLog escapes the rest).
std::string Cell(absl::string_view text, size_t max = 64) { return SafeForLog(text, max); }

std::string Table(const std::vector<std::vector<std::string>>& rows, absl::string_view indent) {
  std::vector<size_t> widths;
  for (const auto& row : rows) {
    if (widths.size() < row.size()) widths.resize(row.size(), 0);
    for (size_t i = 0; i < row.size(); ++i) widths[i] = std::max(widths[i], row[i].size());
  }
  std::string out;
  for (const auto& row : rows) {
    std::string line(indent);
    for (size_t i = 0; i < row.size(); ++i) {
      line += row[i];
      if (i + 1 < row.size()) line.append(widths[i] - row[i].size() + 2, ' ');
    }
    while (!line.empty() && line.back() == ' ') line.pop_back();
    absl::StrAppend(&out, line, "\n");
  }
  return out;
}

// "0-3" for consecutive ranks, else "0,2,5"; "-" when none is known.
std::string RankList(const std::vector<WorkerView>& workers) {
  std::vector<int> ranks;
  for (const WorkerView& w : workers) {
    if (w.rank >= 0) ranks.push_back(w.rank);
  }
  if (ranks.empty()) return "-";
  std::sort(ranks.begin(), ranks.end());
  if (ranks.back() - ranks.front() + 1 == static_cast<int>(ranks.size())) {
    return ranks.size() == 1 ? absl::StrCat(ranks[0])
                             : absl::StrCat(ranks.front(), "-", ranks.back());
  }
  return absl::StrJoin(ranks, ",");
}

// "3 running, 1 failed" (states in a fixed order).
std::string WorkerSummary(const std::vector<WorkerView>& workers) {
  if (workers.empty()) return "-";
  std::map<int, int> counts;
  for (const WorkerView& w : workers) ++counts[static_cast<int>(w.state)];
  std::vector<std::string> parts;
  for (const auto& [state, count] : counts) {
    parts.push_back(absl::StrCat(count, " ", WorkerStateName(static_cast<WorkerState>(state))));
  }
  return absl::StrJoin(parts, ", ");
}

std::string GpuSummary(const std::vector<GpuView>& gpus) {
  if (gpus.empty()) return "-";
  int fatal = 0, degraded = 0, healthy = 0;
  for (const GpuView& g : gpus) {
    fatal += g.status == GpuStatus::kFatal;
    degraded += g.status == GpuStatus::kDegraded;
    healthy += g.status == GpuStatus::kHealthy;
  }
  if (fatal > 0) return absl::StrCat(fatal, "/", gpus.size(), " fatal");
  if (degraded > 0) return absl::StrCat(degraded, "/", gpus.size(), " degraded");
  if (healthy == static_cast<int>(gpus.size())) return absl::StrCat(gpus.size(), " ok");
  return absl::StrCat(healthy, "/", gpus.size(), " ok");
}

// "node-b, node-c" and "and 3 more" past the names the totals hold.
std::string BadNodes(const JobTotals& t) {
  std::vector<std::string> names;
  for (const std::string& n : t.preflight_failed_nodes) names.push_back(Cell(n));
  std::string out = absl::StrJoin(names, ", ");
  const int more = t.nodes_preflight_failed - static_cast<int>(names.size());
  if (more > 0) absl::StrAppend(&out, names.empty() ? "" : " ", "and ", more, " more");
  return out;
}

// "1.25 GB/s", "95.3 MB/s" (decimal, as link rates are quoted); "-" unknown.
std::string LinkRate(double bytes_per_second) {
  if (!(bytes_per_second > 0) || !std::isfinite(bytes_per_second)) return "-";
  if (bytes_per_second >= 1e9) return absl::StrFormat("%.2f GB/s", bytes_per_second / 1e9);
  if (bytes_per_second >= 1e6) return absl::StrFormat("%.1f MB/s", bytes_per_second / 1e6);
  return absl::StrFormat("%.1f kB/s", bytes_per_second / 1e3);
}

const char* UpCell(const NodeView& node) {
  if (node.lost) return "lost";
  return node.up ? "up" : "stale";
}

void AppendJobDetail(std::string& out, const JobView& job, bool full, int64_t now_unix_ms) {
  absl::StrAppend(&out, "\nJOB ", Cell(job.job_id), ": ", JobStateName(job.state), ", round ",
                  job.round, ", ", job.world_size, " ranks on ", job.nnodes, " nodes\n");
  if (job.started_unix_ms > 0) {
    absl::StrAppend(&out, "  started ", UtcTime(job.started_unix_ms),
                    job.ended_unix_ms > 0
                        ? absl::StrCat(", ended ", UtcTime(job.ended_unix_ms), ", ran ")
                        : std::string(", running for "),
                    Duration(DurationOf(job, now_unix_ms)), "\n");
  }
  if (!job.command.empty()) absl::StrAppend(&out, "  command: ", Cell(job.command, 1024), "\n");
  if (job.goodput.known) {
    const GoodputView& g = job.goodput;
    std::vector<std::string> phases;
    for (int p = 0; p < kGoodputPhases; ++p) {
      if (p == kPhaseProductive || g.ms[p] > 0) {
        phases.push_back(absl::StrCat(GoodputPhaseName(p), " ", Duration(g.ms[p])));
      }
    }
    absl::StrAppend(&out, "  goodput: ETTR ", Ettr(g), " of ", Duration(g.wall_ms), ": ",
                    absl::StrJoin(phases, ", "), " (now ", Cell(g.phase, 32), ")\n");
  }
  if (job.root_cause.known) {
    absl::StrAppend(&out, "  cause: ", Cell(HeadlineOf(job.root_cause), 1024), "\n");
  }
  if (job.waiting.waiting) {
    absl::StrAppend(&out, "  ", Cell(WaitingText(job.waiting, now_unix_ms), 256), "\n");
  }
  if (job.totals.nodes_preflight_failed > 0) {
    absl::StrAppend(&out, "  preflight failed on: ", BadNodes(job.totals), "\n");
  }
  std::vector<std::vector<std::string>> rows = {
      {"NODE", "RANK", "INCARNATION", "UP", "REPORT AGE", "LAG", "AGENT", "RANKS", "WORKERS",
       "RESTARTS", "STEP", "RATE/S", "PROGRESS AGE", "GPUS", "PREFLIGHT"}};
  for (const NodeView& node : job.nodes) {
    int worker_restarts = 0;
    for (const WorkerView& w : node.workers) worker_restarts += w.restarts;
    rows.push_back(
        {Cell(node.node_id), node.node_rank >= 0 && !node.lost ? absl::StrCat(node.node_rank) : "-",
         // As the agent's log prefix says it (inc=1a2b3c4d): the high half,
         // all the views are given (ShownIncarnation).
         absl::StrFormat("%08x", static_cast<uint32_t>(node.incarnation >> 32)), UpCell(node),
         Duration(node.report_age_ms), Duration(node.report_lag_ms),
         AgentStateName(node.agent_state), node.lost ? "-" : RankList(node.workers),
         WorkerSummary(node.workers), absl::StrCat(worker_restarts),
         node.progress.known && node.progress.step >= 0 ? absl::StrCat(node.progress.step) : "-",
         Rate(node.progress.steps_per_second),
         node.progress.known ? Duration(node.progress.age_ms) : "-", GpuSummary(node.gpus),
         PreflightWord(node.preflight)});
  }
  out += Table(rows, "  ");
  const int64_t shown_to = job.nodes_from + static_cast<int64_t>(job.nodes.size());
  if (job.nodes_from > 0 || job.nodes_total > shown_to) {
    absl::StrAppend(&out, "  (nodes ", job.nodes_from + 1, "-", shown_to, " of ", job.nodes_total,
                    ")\n");
  }
  // Where each node sits (docs/topology.md, "Rank order"), for the nodes that said.
  for (const NodeView& node : job.nodes) {
    if (node.topology.empty()) continue;
    absl::StrAppend(&out, "  ", Cell(node.node_id), " topology: ", Cell(node.topology, 1024), "\n");
  }
  for (const NodeView& node : job.nodes) {
    if (!node.lost) continue;
    absl::StrAppend(
        &out, "  ", Cell(node.node_id), " lost",
        node.lost_at_unix_ms > 0 ? absl::StrCat(" at ", UtcTime(node.lost_at_unix_ms))
                                 : std::string(),
        node.lost_reason.empty() ? std::string() : absl::StrCat(": ", Cell(node.lost_reason, 256)),
        " (its last state; counted nowhere)\n");
  }
  if (!job.lost_nodes.empty()) {
    std::vector<std::string> lost;
    for (const std::string& n : job.lost_nodes) lost.push_back(Cell(n));
    absl::StrAppend(&out, "  lost nodes (not back): ", absl::StrJoin(lost, ", "), "\n");
  }
  for (const SlowNodeView& n : job.slow_nodes) {
    absl::StrAppend(&out, "  slow node: ", Cell(n.evidence, 1024), "\n");
  }
  // Each node's failed checks with their reasons (with the job named, its
  // skipped ones and links too, below).
  if (!full) {
    for (const NodeView& node : job.nodes) {
      if (node.preflight.failed() == 0) continue;
      absl::StrAppend(&out, "  ", Cell(node.node_id), " preflight round ", node.preflight.round,
                      ": ", node.preflight.failed(), " failed\n");
      for (const PreflightCheckView& c : node.preflight.checks) {
        if (c.outcome != CheckOutcome::kFail) continue;
        absl::StrAppend(&out, "    ", Cell(c.check, 32), ": ", Cell(c.reason, 512), "\n");
      }
    }
  }
  if (full) {
    std::vector<std::vector<std::string>> workers = {
        {"NODE", "LOCAL", "RANK", "PID", "STATE", "EXIT", "RESTARTS"}};
    for (const NodeView& node : job.nodes) {
      for (const WorkerView& w : node.workers) {
        const bool exited = w.state == WorkerState::kSucceeded || w.state == WorkerState::kFailed ||
                            w.state == WorkerState::kStopped;
        workers.push_back({Cell(node.node_id), absl::StrCat(w.local_rank),
                           w.rank >= 0 ? absl::StrCat(w.rank) : "-",
                           w.pid > 0 ? absl::StrCat(w.pid) : "-", WorkerStateName(w.state),
                           exited ? absl::StrCat(w.exit_code) : "-", absl::StrCat(w.restarts)});
      }
    }
    if (workers.size() > 1) {
      out += "  workers:\n";
      out += Table(workers, "    ");
    }
    std::vector<std::vector<std::string>> gpus = {{"NODE", "GPU", "UUID", "STATUS", "REASON"}};
    for (const NodeView& node : job.nodes) {
      for (const GpuView& g : node.gpus) {
        gpus.push_back({Cell(node.node_id), absl::StrCat(g.index), Cell(g.uuid, 96),
                        GpuStatusName(g.status), g.reason.empty() ? "-" : Cell(g.reason, 256)});
      }
    }
    if (gpus.size() > 1) {
      out += "  gpus:\n";
      out += Table(gpus, "    ");
    }
    // Every check that did not pass, with why; then the links.
    std::vector<std::vector<std::string>> checks = {
        {"NODE", "ROUND", "CHECK", "OUTCOME", "REASON"}};
    std::vector<std::vector<std::string>> links = {{"NODE", "TO", "BANDWIDTH", "RTT", "ERROR"}};
    int passed = 0;
    for (const NodeView& node : job.nodes) {
      const PreflightView& p = node.preflight;
      passed += p.passed();
      for (size_t i = 0; i < p.checks.size() && i < kMaxPreflightChecks; ++i) {
        const PreflightCheckView& c = p.checks[i];
        if (c.outcome == CheckOutcome::kPass) continue;
        checks.push_back({Cell(node.node_id), absl::StrCat(p.round), Cell(c.check, 32),
                          CheckOutcomeName(c.outcome),
                          c.reason.empty() ? "-" : Cell(c.reason, 512)});
      }
      for (size_t i = 0; i < p.links.size() && i < kMaxPreflightLinks; ++i) {
        const PreflightLinkView& l = p.links[i];
        links.push_back({Cell(node.node_id), Cell(l.to_node),
                         LinkRate(l.bandwidth_bytes_per_second),
                         l.rtt_seconds > 0 ? absl::StrFormat("%.3fms", l.rtt_seconds * 1000) : "-",
                         l.error.empty() ? "-" : Cell(l.error, 256)});
      }
    }
    if (checks.size() > 1) {
      absl::StrAppend(&out, "  preflight checks that did not pass (", passed, " passed):\n");
      out += Table(checks, "    ");
    } else if (passed > 0) {
      absl::StrAppend(&out, "  preflight: all ", passed, " checks passed\n");
    }
    if (links.size() > 1) {
      out += "  preflight links:\n";
      out += Table(links, "    ");
    }
    if (!job.rounds_timeline.empty()) {
      out += "  rounds:\n";
      for (const RoundView& r : job.rounds_timeline) {
        absl::StrAppend(&out, "    round ", r.round, "  ", UtcTime(r.started_unix_ms), " - ",
                        r.ended_unix_ms > 0 ? UtcTime(r.ended_unix_ms) : std::string("now"), "  ",
                        r.nodes, " nodes");
        if (!r.restart_cause.empty()) {
          absl::StrAppend(&out, "  after: ", Cell(r.restart_cause, 512));
        }
        if (r.ended_by.known) {
          absl::StrAppend(&out, "  ended by: ", Cell(HeadlineOf(r.ended_by), 512));
        }
        out += "\n";
      }
    }
  }
  const size_t limit = full ? job.restarts.size() : std::min<size_t>(job.restarts.size(), 5);
  if (job.restarts_total > 0 || !job.restarts.empty()) {
    absl::StrAppend(&out, "  restarts: ", job.restarts_total, " (", full ? "all kept" : "latest",
                    ")\n");
    for (size_t i = job.restarts.size() - limit; i < job.restarts.size(); ++i) {
      const RestartView& r = job.restarts[i];
      absl::StrAppend(&out, "    round ", r.round, "  ", UtcTime(r.at_unix_ms), "  ",
                      r.node_id.empty() ? "-" : Cell(r.node_id), "  ", Cell(r.cause, 512), "\n");
      if (r.times.known) {
        absl::StrAppend(&out, "      failed: ",
                        r.times.node_id.empty() ? std::string("-") : Cell(r.times.node_id),
                        r.times.rank >= 0 ? absl::StrCat(" rank ", r.times.rank) : std::string(),
                        "; lost ", Duration(r.times.lost_ms()), ": ", RestartCost(r.times), "\n");
      }
    }
  }
  if (job.hangs_total > 0 || !job.hangs.empty()) {
    absl::StrAppend(&out, "  hangs: ", job.hangs_total, "\n");
    for (const HangView& h : job.hangs) {
      absl::StrAppend(&out, "    round ", h.round, "  ", UtcTime(h.at_unix_ms), "  ",
                      Cell(h.node_id), "  ", Cell(h.verdict, 256), h.suspect ? "  (suspect)" : "",
                      "\n");
      if (full && !h.evidence_summary.empty()) {
        absl::StrAppend(
            &out, "      evidence: ", Cell(h.evidence_summary, 1024),
            h.evidence_bytes > static_cast<int64_t>(h.evidence_summary.size())
                ? absl::StrCat(" ... (", h.evidence_bytes, " bytes: trainlet status --evidence)")
                : std::string(),
            "\n");
      }
    }
  }
}

// ---- JSON back into a snapshot.

// As the report's bound (controller/report_limits.h's kMaxLostNodes).
constexpr size_t kMaxLostNodesShown = 64;
constexpr size_t kMaxSlowNodesShown = 16;

using google::protobuf::Value;

const Value* Field(const Value& object, const char* name) {
  if (object.kind_case() != Value::kStructValue) return nullptr;
  const auto& fields = object.struct_value().fields();
  auto it = fields.find(name);
  return it == fields.end() ? nullptr : &it->second;
}
int64_t IntField(const Value& object, const char* name, int64_t fallback = 0) {
  const Value* v = Field(object, name);
  if (v == nullptr || v->kind_case() != Value::kNumberValue) return fallback;
  const double d = v->number_value();
  if (!std::isfinite(d) || d > 9.0e18 || d < -9.0e18) return fallback;
  return static_cast<int64_t>(d);
}
double DoubleField(const Value& object, const char* name, double fallback = -1) {
  const Value* v = Field(object, name);
  return v != nullptr && v->kind_case() == Value::kNumberValue ? v->number_value() : fallback;
}
std::string StringField(const Value& object, const char* name) {
  const Value* v = Field(object, name);
  return v != nullptr && v->kind_case() == Value::kStringValue ? v->string_value() : "";
}
bool BoolField(const Value& object, const char* name) {
  const Value* v = Field(object, name);
  return v != nullptr && v->kind_case() == Value::kBoolValue && v->bool_value();
}
std::vector<const Value*> ListField(const Value& object, const char* name) {
  std::vector<const Value*> out;
  const Value* v = Field(object, name);
  if (v == nullptr || v->kind_case() != Value::kListValue) return out;
  for (const Value& item : v->list_value().values()) out.push_back(&item);
  return out;
}

template <typename Enum, size_t N>
Enum EnumByName(const std::string& name, const Enum (&values)[N], const char* (*name_of)(Enum)) {
  for (Enum e : values) {
    if (name == name_of(e)) return e;
  }
  return values[0];
}

constexpr JobState kJobStates[] = {JobState::kUnknown, JobState::kActive, JobState::kStale,
                                   JobState::kSucceeded, JobState::kFailed};
constexpr WorkerState kWorkerStates[] = {WorkerState::kUnknown,   WorkerState::kRunning,
                                         WorkerState::kSucceeded, WorkerState::kFailed,
                                         WorkerState::kHung,      WorkerState::kStopped};
constexpr AgentState kAgentStates[] = {AgentState::kUnknown,  AgentState::kJoining,
                                       AgentState::kRunning,  AgentState::kAwaitingVerdict,
                                       AgentState::kStopping, AgentState::kDone};
constexpr GpuStatus kGpuStatuses[] = {GpuStatus::kUnknown, GpuStatus::kHealthy,
                                      GpuStatus::kDegraded, GpuStatus::kFatal};
constexpr CheckOutcome kCheckOutcomes[] = {CheckOutcome::kUnknown, CheckOutcome::kPass,
                                           CheckOutcome::kFail, CheckOutcome::kSkipped};

RootCauseView ParseRootCause(const Value* v) {
  RootCauseView c;
  if (v == nullptr) return c;
  c.known = BoolField(*v, "known");
  c.kind = StringField(*v, "kind");
  c.node_id = StringField(*v, "node_id");
  c.rank = static_cast<int>(IntField(*v, "rank", -1));
  c.local_rank = static_cast<int>(IntField(*v, "local_rank", -1));
  c.exit_code = static_cast<int>(IntField(*v, "exit_code", -1));
  c.at_unix_ms = IntField(*v, "at_unix_ms");
  c.round = static_cast<uint64_t>(IntField(*v, "round"));
  c.text = StringField(*v, "text");
  return c;
}

RestartTimesView ParseRestartTimes(const Value* v) {
  RestartTimesView t;
  if (v == nullptr || !BoolField(*v, "known")) return t;
  t.known = true;
  t.node_id = StringField(*v, "node_id");
  t.rank = static_cast<int>(IntField(*v, "rank", -1));
  t.failed_unix_ms = IntField(*v, "failed_unix_ms");
  t.detection_ms = IntField(*v, "detection_ms");
  t.restart_ms = IntField(*v, "restart_ms");
  t.waiting_ms = IntField(*v, "waiting_ms");
  t.rewarm_ms = IntField(*v, "rewarm_ms");
  t.redone_ms = IntField(*v, "redone_ms");
  t.failed_at_step = IntField(*v, "failed_at_step", -1);
  t.resumed_from_step = IntField(*v, "resumed_from_step", -1);
  t.redone_steps = IntField(*v, "redone_steps", -1);
  t.done = BoolField(*v, "done");
  return t;
}

GoodputView ParseGoodput(const Value* v) {
  GoodputView g;
  if (v == nullptr || !BoolField(*v, "known")) return g;
  g.known = true;
  g.wall_ms = IntField(*v, "wall_ms");
  for (int p = 0; p < kGoodputPhases; ++p) {
    g.ms[p] = IntField(*v, absl::StrCat(GoodputPhaseName(p), "_ms").c_str());
  }
  g.ettr = DoubleField(*v, "ettr");
  g.phase = StringField(*v, "phase");
  g.phase_since_unix_ms = IntField(*v, "phase_since_unix_ms");
  return g;
}

NodeView ParseNode(const Value& v) {
  NodeView node;
  node.node_id = StringField(v, "node_id");
  node.node_rank = static_cast<int>(IntField(v, "node_rank", -1));
  node.incarnation = std::strtoull(StringField(v, "incarnation").c_str(), nullptr, 16);
  node.up = BoolField(v, "up");
  node.lost = BoolField(v, "lost");
  node.lost_at_unix_ms = IntField(v, "lost_at_unix_ms");
  node.lost_reason = StringField(v, "lost_reason");
  node.restored = BoolField(v, "restored");
  node.report_age_ms = IntField(v, "report_age_ms", -1);
  node.report_lag_ms = IntField(v, "report_lag_ms", -1);
  node.agent_state = EnumByName(StringField(v, "agent_state"), kAgentStates, AgentStateName);
  node.round = static_cast<uint64_t>(IntField(v, "round"));
  node.restart_count = static_cast<int>(IntField(v, "restart_count"));
  node.last_failure = StringField(v, "last_failure");
  node.topology = StringField(v, "topology");
  node.exit_code = static_cast<int>(IntField(v, "exit_code", -1));
  node.agent_rss_bytes = static_cast<uint64_t>(IntField(v, "agent_rss_bytes"));
  for (const Value* w : ListField(v, "workers")) {
    WorkerView worker;
    worker.local_rank = static_cast<int>(IntField(*w, "local_rank"));
    worker.rank = static_cast<int>(IntField(*w, "rank", -1));
    worker.pid = static_cast<int>(IntField(*w, "pid"));
    worker.state = EnumByName(StringField(*w, "state"), kWorkerStates, WorkerStateName);
    worker.exit_code = static_cast<int>(IntField(*w, "exit_code"));
    worker.restarts = static_cast<int>(IntField(*w, "restarts"));
    worker.exited_unix_ms = IntField(*w, "exited_unix_ms");
    node.workers.push_back(worker);
  }
  if (const Value* p = Field(v, "progress"); p != nullptr) {
    node.progress.known = BoolField(*p, "known");
    node.progress.step = IntField(*p, "step", -1);
    node.progress.local_rank = static_cast<int>(IntField(*p, "local_rank", -1));
    node.progress.steps_per_second = DoubleField(*p, "steps_per_second");
    node.progress.age_ms = IntField(*p, "age_ms", -1);
    for (const Value* f : ListField(*p, "fields")) {
      if (f->kind_case() != Value::kListValue || f->list_value().values_size() != 2) continue;
      node.progress.fields.emplace_back(f->list_value().values(0).string_value(),
                                        f->list_value().values(1).string_value());
    }
  }
  for (const Value* g : ListField(v, "gpus")) {
    GpuView gpu;
    gpu.index = static_cast<int>(IntField(*g, "index"));
    gpu.uuid = StringField(*g, "uuid");
    gpu.status = EnumByName(StringField(*g, "status"), kGpuStatuses, GpuStatusName);
    gpu.reason = StringField(*g, "reason");
    node.gpus.push_back(gpu);
  }
  if (const Value* p = Field(v, "preflight"); p != nullptr) {
    PreflightView& pf = node.preflight;
    pf.known = BoolField(*p, "known");
    pf.round = static_cast<uint64_t>(IntField(*p, "round"));
    pf.started_unix_ms = IntField(*p, "started_unix_ms");
    pf.duration_ms = IntField(*p, "duration_ms");
    for (const Value* c : ListField(*p, "checks")) {
      if (pf.checks.size() >= kMaxPreflightChecks) break;
      PreflightCheckView check;
      check.check = StringField(*c, "check");
      check.outcome = EnumByName(StringField(*c, "outcome"), kCheckOutcomes, CheckOutcomeName);
      check.reason = StringField(*c, "reason");
      check.value = DoubleField(*c, "value", 0);
      check.unit = StringField(*c, "unit");
      check.threshold = DoubleField(*c, "threshold", 0);
      pf.checks.push_back(std::move(check));
    }
    for (const Value* l : ListField(*p, "links")) {
      if (pf.links.size() >= kMaxPreflightLinks) break;
      pf.links.push_back({StringField(*l, "to_node"),
                          DoubleField(*l, "bandwidth_bytes_per_second", 0),
                          DoubleField(*l, "rtt_seconds", 0), StringField(*l, "error")});
    }
  }
  return node;
}

JobView ParseJob(const Value& v) {
  JobView job;
  job.job_id = StringField(v, "job_id");
  job.state = EnumByName(StringField(v, "state"), kJobStates, JobStateName);
  job.round = static_cast<uint64_t>(IntField(v, "round"));
  job.rounds = IntField(v, "rounds");
  job.nnodes = static_cast<int>(IntField(v, "nnodes"));
  job.world_size = static_cast<int>(IntField(v, "world_size"));
  job.min_nodes = static_cast<int>(IntField(v, "min_nodes"));
  job.max_nodes = static_cast<int>(IntField(v, "max_nodes"));
  job.last_report_unix_ms = IntField(v, "last_report_unix_ms");
  job.started_unix_ms = IntField(v, "started_unix_ms");
  job.ended_unix_ms = IntField(v, "ended_unix_ms");
  job.command = StringField(v, "command");
  job.restored = BoolField(v, "restored");
  job.restarts_total = IntField(v, "restarts_total");
  job.hangs_total = IntField(v, "hangs_total");
  job.failures_total = IntField(v, "failures_total");
  job.root_cause = ParseRootCause(Field(v, "root_cause"));
  job.goodput = ParseGoodput(Field(v, "goodput"));
  if (const Value* w = Field(v, "waiting"); w != nullptr) {
    job.waiting.waiting = BoolField(*w, "waiting");
    job.waiting.nodes = static_cast<int>(IntField(*w, "nodes"));
    job.waiting.min_nodes = static_cast<int>(IntField(*w, "min_nodes"));
    job.waiting.max_nodes = static_cast<int>(IntField(*w, "max_nodes"));
    job.waiting.gives_up_unix_ms = IntField(*w, "gives_up_unix_ms");
    job.waiting.round = static_cast<uint64_t>(IntField(*w, "round"));
  }
  for (const Value* n : ListField(v, "lost_nodes")) {
    if (n->kind_case() == Value::kStringValue && job.lost_nodes.size() < kMaxLostNodesShown) {
      job.lost_nodes.push_back(n->string_value());
    }
  }
  for (const Value* n : ListField(v, "slow_nodes")) {
    if (n->kind_case() != Value::kStructValue || job.slow_nodes.size() >= kMaxSlowNodesShown) {
      continue;
    }
    job.slow_nodes.push_back({StringField(*n, "node_id"), StringField(*n, "cause"),
                              StringField(*n, "evidence"), IntField(*n, "since_unix_ms"),
                              static_cast<int>(IntField(*n, "slowdown_percent"))});
  }
  if (const Value* t = Field(v, "totals"); t != nullptr) {
    JobTotals& totals = job.totals;
    totals.nodes = static_cast<int>(IntField(*t, "nodes"));
    totals.nodes_up = static_cast<int>(IntField(*t, "nodes_up"));
    totals.nodes_lost = static_cast<int>(IntField(*t, "nodes_lost"));
    totals.workers = static_cast<int>(IntField(*t, "workers"));
    totals.workers_running = static_cast<int>(IntField(*t, "workers_running"));
    totals.progress_step = IntField(*t, "progress_step", -1);
    totals.progress_known = totals.progress_step >= 0;
    totals.steps_per_second = DoubleField(*t, "steps_per_second");
    totals.progress_age_ms = IntField(*t, "progress_age_ms", -1);
    totals.report_lag_ms = IntField(*t, "report_lag_ms", -1);
    totals.gpus_fatal = static_cast<int>(IntField(*t, "gpus_fatal"));
    totals.gpus_degraded = static_cast<int>(IntField(*t, "gpus_degraded"));
    totals.nodes_preflight_failed = static_cast<int>(IntField(*t, "nodes_preflight_failed"));
    for (const Value* n : ListField(*t, "preflight_failed_nodes")) {
      if (n->kind_case() == Value::kStringValue &&
          totals.preflight_failed_nodes.size() < kPreflightNodesNamed) {
        totals.preflight_failed_nodes.push_back(n->string_value());
      }
    }
  }
  for (const Value* n : ListField(v, "nodes")) job.nodes.push_back(ParseNode(*n));
  job.nodes_from = IntField(v, "nodes_from");
  job.nodes_total = IntField(v, "nodes_total", static_cast<int64_t>(job.nodes.size()));
  for (const Value* r : ListField(v, "restarts")) {
    job.restarts.push_back({static_cast<uint64_t>(IntField(*r, "round")),
                            IntField(*r, "at_unix_ms"), StringField(*r, "node_id"),
                            StringField(*r, "cause"), ParseRestartTimes(Field(*r, "times"))});
  }
  for (const Value* h : ListField(v, "hangs")) {
    HangView hang;
    hang.round = static_cast<uint64_t>(IntField(*h, "round"));
    hang.at_unix_ms = IntField(*h, "at_unix_ms");
    hang.node_id = StringField(*h, "node_id");
    hang.verdict = StringField(*h, "verdict");
    hang.evidence_summary = StringField(*h, "evidence_summary");
    hang.seq = IntField(*h, "seq");
    hang.evidence_bytes = IntField(*h, "evidence_bytes");
    hang.suspect = BoolField(*h, "suspect");
    job.hangs.push_back(std::move(hang));
  }
  for (const Value* r : ListField(v, "rounds_timeline")) {
    RoundView round;
    round.round = static_cast<uint64_t>(IntField(*r, "round"));
    round.started_unix_ms = IntField(*r, "started_unix_ms");
    round.ended_unix_ms = IntField(*r, "ended_unix_ms");
    round.nodes = static_cast<int>(IntField(*r, "nodes"));
    round.world_size = static_cast<int>(IntField(*r, "world_size"));
    round.restart_cause = StringField(*r, "restart_cause");
    round.ended_by = ParseRootCause(Field(*r, "ended_by"));
    round.restart = ParseRestartTimes(Field(*r, "restart"));
    job.rounds_timeline.push_back(std::move(round));
  }
  if (const Value* series = Field(v, "series"); series != nullptr) {
    job.series.every_ms = IntField(*series, "every_ms");
    for (const Value* k : ListField(*series, "keys")) {
      if (k->kind_case() == Value::kStringValue) job.series.keys.push_back(k->string_value());
    }
    for (const Value* p : ListField(*series, "points")) {
      if (p->kind_case() != Value::kListValue || p->list_value().values_size() < 3) continue;
      const auto& values = p->list_value().values();
      auto number = [](const Value& x) {
        return x.kind_case() == Value::kNumberValue ? x.number_value() : NAN;
      };
      SeriesPointView point;
      point.at_unix_ms = static_cast<int64_t>(number(values[0]));
      point.step = static_cast<int64_t>(number(values[1]));
      const double rate = number(values[2]);
      point.steps_per_second = std::isfinite(rate) ? rate : -1;
      for (int i = 3; i < values.size(); ++i) point.values.push_back(number(values[i]));
      job.series.points.push_back(std::move(point));
    }
  }
  return job;
}

// `json` as a JSON object of our schema, or why not.
absl::StatusOr<Value> ParseDocument(absl::string_view json, size_t max_bytes,
                                    absl::string_view what) {
  if (json.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the controller's ", what, " answer is ",
                                                   json.size(), " bytes, over the limit of ",
                                                   max_bytes));
  }
  Value root;
  auto parsed = google::protobuf::util::JsonStringToMessage(std::string(json), &root);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("the controller's ", what,
                                                   " answer is not JSON (",
                                                   SafeForLog(std::string(parsed.message()), 200),
                                                   "); is the address a trainlet controller?"));
  }
  if (root.kind_case() != Value::kStructValue || IntField(root, "schema") != kViewsJsonSchema) {
    return absl::InvalidArgumentError(absl::StrCat("the controller's ", what,
                                                   " answer is not schema ", kViewsJsonSchema,
                                                   " (a trainlet of another version?)"));
  }
  return root;
}

void ParseFigures(const Value& root, ControllerSnapshot* snapshot) {
  snapshot->now_unix_ms = IntField(root, "now_unix_ms");
  snapshot->uptime_ms = IntField(root, "uptime_ms");
  snapshot->reports_received = IntField(root, "reports_received");
  snapshot->reports_rejected = IntField(root, "reports_rejected");
  snapshot->version = StringField(root, "version");
}

}  // namespace

const char* GoodputPhaseName(int phase) {
  static constexpr const char* kNames[kGoodputPhases] = {
      "productive", "startup", "waiting", "detection", "restart", "rewarm", "redone"};
  return phase >= 0 && phase < kGoodputPhases ? kNames[phase] : "unknown";
}

const char* JobStateName(JobState state) {
  switch (state) {
    case JobState::kActive:
      return "active";
    case JobState::kStale:
      return "stale";
    case JobState::kSucceeded:
      return "succeeded";
    case JobState::kFailed:
      return "failed";
    case JobState::kUnknown:
      break;
  }
  return "unknown";
}

const char* WorkerStateName(WorkerState state) {
  switch (state) {
    case WorkerState::kRunning:
      return "running";
    case WorkerState::kSucceeded:
      return "succeeded";
    case WorkerState::kFailed:
      return "failed";
    case WorkerState::kHung:
      return "hung";
    case WorkerState::kStopped:
      return "stopped";
    case WorkerState::kUnknown:
      break;
  }
  return "unknown";
}

const char* AgentStateName(AgentState state) {
  switch (state) {
    case AgentState::kJoining:
      return "joining";
    case AgentState::kRunning:
      return "running";
    case AgentState::kAwaitingVerdict:
      return "awaiting-verdict";
    case AgentState::kStopping:
      return "stopping";
    case AgentState::kDone:
      return "done";
    case AgentState::kUnknown:
      break;
  }
  return "unknown";
}

const char* GpuStatusName(GpuStatus status) {
  switch (status) {
    case GpuStatus::kHealthy:
      return "healthy";
    case GpuStatus::kDegraded:
      return "degraded";
    case GpuStatus::kFatal:
      return "fatal";
    case GpuStatus::kUnknown:
      break;
  }
  return "unknown";
}

const char* CheckOutcomeName(CheckOutcome outcome) {
  switch (outcome) {
    case CheckOutcome::kPass:
      return "pass";
    case CheckOutcome::kFail:
      return "fail";
    case CheckOutcome::kSkipped:
      return "skipped";
    case CheckOutcome::kUnknown:
      break;
  }
  return "unknown";
}

void AddToTotals(const NodeView& node, JobTotals* t) {
  if (node.lost) {
    ++t->nodes_lost;
    return;
  }
  ++t->nodes;
  if (node.up) {
    ++t->nodes_up;
    if (node.report_lag_ms >= 0) t->report_lag_ms = std::max(t->report_lag_ms, node.report_lag_ms);
  }
  for (const WorkerView& w : node.workers) {
    ++t->workers;
    t->workers_running += w.state == WorkerState::kRunning;
  }
  if (node.progress.known) {
    if (!t->progress_known || node.progress.step > t->progress_step) {
      t->progress_step = node.progress.step;
      t->steps_per_second = node.progress.steps_per_second;
    }
    if (node.progress.age_ms >= 0 &&
        (t->progress_age_ms < 0 || node.progress.age_ms < t->progress_age_ms)) {
      t->progress_age_ms = node.progress.age_ms;
    }
    t->progress_known = true;
  }
  for (const GpuView& g : node.gpus) {
    t->gpus_fatal += g.status == GpuStatus::kFatal;
    t->gpus_degraded += g.status == GpuStatus::kDegraded;
  }
  if (node.preflight.failed() > 0) {
    ++t->nodes_preflight_failed;
    if (t->preflight_failed_nodes.size() < kPreflightNodesNamed) {
      t->preflight_failed_nodes.push_back(node.node_id);
    }
  }
}

JobTotals TotalsOf(const JobView& job) {
  JobTotals t;
  for (const NodeView& node : job.nodes) AddToTotals(node, &t);
  // A finished job makes no progress: it has no age that could alarm.
  if (Finished(job)) t.progress_age_ms = -1;
  return t;
}

std::string HeadlineOf(const RootCauseView& c) {
  std::string text = c.text;
  if (text.empty()) {
    const std::string who =
        c.rank >= 0 ? absl::StrCat("rank ", c.rank, " on ", c.node_id) : c.node_id;
    if (c.kind == "worker-failed") {
      text = absl::StrCat(who, " exited ", c.exit_code);
    } else if (c.kind == "worker-hung") {
      text = absl::StrCat(who, " hung");
    } else if (c.kind == "node-lost") {
      text = absl::StrCat(c.node_id, " was lost");
    } else if (c.kind == "agent-failed") {
      text = absl::StrCat("the agent on ", c.node_id, " exited ", c.exit_code);
    } else {
      text = who.empty() ? "unknown" : who;
    }
  }
  if (c.at_unix_ms > 0) {
    absl::StrAppend(
        &text, " at ",
        absl::FormatTime("%H:%M:%S UTC", absl::FromUnixMillis(c.at_unix_ms), absl::UTCTimeZone()));
  }
  return text;
}

std::string WaitingText(const WaitingView& w, int64_t now_unix_ms) {
  if (!w.waiting) return "";
  std::string text = "waiting for ";
  if (w.min_nodes > 0 && w.nodes < w.min_nodes) {
    const int more = w.min_nodes - w.nodes;
    absl::StrAppend(&text, more, " more node", more == 1 ? "" : "s", " (min ", w.min_nodes, ")");
  } else {
    absl::StrAppend(&text, "the round to start (", w.nodes, " node", w.nodes == 1 ? "" : "s",
                    " waiting)");
  }
  if (w.gives_up_unix_ms > 0) {
    const int64_t left = w.gives_up_unix_ms - now_unix_ms;
    absl::StrAppend(&text, left > 0 ? absl::StrCat(", giving up in ", Duration(left))
                                    : std::string(", giving up now"));
  }
  return text;
}

std::string JsonQuote(absl::string_view text) {
  return JsonWriter::JsonQuoteBounded(text, kMaxText);
}

std::string PrometheusLabelValue(absl::string_view text) {
  const std::string valid = ValidUtf8(text, kMaxLabel);
  std::string out;
  out.reserve(valid.size());
  for (char c : valid) {
    switch (c) {
      case '\\':
        out += "\\\\";
        break;
      case '"':
        out += "\\\"";
        break;
      case '\n':
        out += "\\n";
        break;
      default:
        out.push_back(c);
    }
  }
  return out;
}

std::string RenderJobsJson(const ControllerSnapshot& snapshot) {
  JsonWriter w;
  w.Open('{');
  WriteFigures(w, snapshot);
  w.Key("jobs");
  w.Open('[');
  for (const JobView& job : snapshot.jobs) {
    w.Open('{');
    WriteJobSummaryFields(w, job, snapshot.now_unix_ms);
    w.Close('}');
  }
  w.Close(']');
  w.Close('}');
  std::string out = w.Take();
  out += "\n";
  return out;
}

std::string RenderJobJson(const ControllerSnapshot& snapshot, const JobView& job, size_t max_bytes,
                          size_t* nodes_written) {
  JsonWriter w;
  w.Open('{');
  WriteFigures(w, snapshot);
  w.Key("job");
  WriteJobDetail(w, job, snapshot.now_unix_ms, max_bytes, nodes_written);
  w.Close('}');
  std::string out = w.Take();
  out += "\n";
  return out;
}

std::string RenderJson(const ControllerSnapshot& snapshot) {
  JsonWriter w;
  w.Open('{');
  WriteFigures(w, snapshot);
  w.Key("jobs");
  w.Open('[');
  for (const JobView& job : snapshot.jobs) {
    WriteJobDetail(w, job, snapshot.now_unix_ms, SIZE_MAX, nullptr);
  }
  w.Close(']');
  w.Close('}');
  std::string out = w.Take();
  out += "\n";
  return out;
}

std::string RenderEvidenceJson(absl::string_view job_id, const std::vector<EvidenceView>& hangs) {
  JsonWriter w;
  w.Open('{');
  w.Int("schema", kViewsJsonSchema);
  w.String("job_id", job_id, kMaxId);
  w.Key("hangs");
  w.Open('[');
  for (const EvidenceView& h : hangs) {
    w.Open('{');
    w.Int("seq", h.seq);
    w.Uint("round", h.round);
    w.Int("at_unix_ms", h.at_unix_ms);
    w.String("node_id", h.node_id, kMaxId);
    w.String("verdict", h.verdict);
    w.Key("evidence");
    // Every line: the agent bounds one hang's evidence (16 KiB).
    w.String(h.evidence, 1 << 20);
    w.Close('}');
  }
  w.Close(']');
  w.Close('}');
  std::string out = w.Take();
  out += "\n";
  return out;
}

// ---- Prometheus.

PrometheusRenderer::PrometheusRenderer(const ControllerSnapshot& s) {
  auto head = [&](absl::string_view name, absl::string_view type, absl::string_view help,
                  absl::string_view sample) {
    absl::StrAppend(&head_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n", sample,
                    "\n");
  };
  head("trainlet_build_info", "gauge", "1; the label version is the controller's trainlet version.",
       absl::StrCat("trainlet_build_info{version=\"", PrometheusLabelValue(s.version), "\"} 1"));
  head("trainlet_controller_uptime_seconds", "gauge", "Seconds since the controller started.",
       absl::StrCat("trainlet_controller_uptime_seconds ", Seconds(s.uptime_ms)));
  head("trainlet_controller_reports_received_total", "counter",
       "Health reports the controller applied.",
       absl::StrCat("trainlet_controller_reports_received_total ", s.reports_received));
  head("trainlet_controller_reports_rejected_total", "counter",
       "Health reports the controller refused (invalid, fenced, over a cap).",
       absl::StrCat("trainlet_controller_reports_rejected_total ", s.reports_rejected));
  // The families, in the order they are written (each family's samples
  // together, as the format wants).
  Of("trainlet_job_info", "gauge", "1 per job; the label state is the job's state.");
  Of("trainlet_job_start_time_seconds", "gauge", "When the job's first report came (Unix time).");
  Of("trainlet_job_end_time_seconds", "gauge",
     "When the job succeeded or failed (Unix time); absent while it runs.");
  Of("trainlet_job_nodes", "gauge", "Member nodes of the job (lost nodes are not members).");
  Of("trainlet_job_nodes_up", "gauge", "Member nodes that reported within their staleness window.");
  Of("trainlet_job_nodes_lost", "gauge", "Nodes the coordinator lost (their last state is kept).");
  Of("trainlet_job_workers_running", "gauge", "Workers running, over the job's member nodes.");
  Of("trainlet_job_waiting", "gauge", "1 while the job waits for nodes.");
  Of("trainlet_job_round", "gauge", "The job's current rendezvous round.");
  Of("trainlet_job_rounds_total", "counter", "Rendezvous rounds the job opened.");
  Of("trainlet_job_restarts_total", "counter", "Restarts of the job (rounds after the first).");
  Of("trainlet_job_hangs_total", "counter", "Workers the agents declared hung.");
  Of("trainlet_job_failures_total", "counter",
     "Failures that ended a round (each restart, and the job's own failure).");
  Of("trainlet_job_progress_step", "gauge",
     "The highest step a worker reported (absent before any progress).");
  Of("trainlet_job_progress_steps_per_second", "gauge",
     "Steps per second of the node with the highest step (absent when unknown).");
  Of("trainlet_job_progress_age_seconds", "gauge",
     "Seconds since the freshest progress line of the job (absent before any progress, and once "
     "the job finished).");
  Of("trainlet_job_report_lag_seconds", "gauge",
     "The largest report lag (received minus sent) of the nodes that are up.");
  Of("trainlet_job_gpus_fatal", "gauge", "GPUs the agents judged fatal.");
  Of("trainlet_job_seconds", "gauge",
     "The job's wall time by phase (docs/goodput.md): productive, startup, waiting, detection, "
     "restart, rewarm, redone; they add up to its wall time.");
  Of("trainlet_job_ettr", "gauge",
     "Effective training time ratio: productive seconds over wall seconds (docs/goodput.md).");
  Of("trainlet_job_nodes_preflight_failed", "gauge",
     "Member nodes whose latest preflight failed a check.");
  Of("trainlet_node_up", "gauge",
     "1 when the node reported within its staleness window (0 once lost).");
  Of("trainlet_node_lost", "gauge", "1 when the coordinator lost the node.");
  Of("trainlet_node_report_age_seconds", "gauge", "Seconds since the node's latest report.");
  Of("trainlet_node_progress_step", "gauge", "The node's latest progress step.");
  Of("trainlet_node_progress_value", "gauge",
     "The numeric fields of the node's latest progress line (label field: loss, lr, ...).");
  Of("trainlet_worker_progress_step", "gauge",
     "The step of the progress line the node reported, on the worker that wrote it.");
  Of("trainlet_worker_restarts_total", "counter",
     "Restarts of the worker slot (node, local rank) in its agent's life.");
  Of("trainlet_preflight_check", "gauge",
     "1 per check of the node's latest preflight; the label outcome is its outcome (pass, fail, "
     "skipped).");
  Of("trainlet_preflight_failed_checks", "gauge", "Checks the node's latest preflight failed.");
  Of("trainlet_slow_node", "gauge",
     "1 per node the coordinator named slow in the current round (--slow-nodes); the label "
     "cause is cpu, network, progress or gpu.");
  Of("trainlet_controller_metrics_workers_omitted", "gauge",
     "Worker series left out of this scrape (over the per-family cap).");
  Of("trainlet_controller_metrics_preflight_omitted", "gauge",
     "Passed or skipped preflight check series left out of this scrape (over the cap; a failed "
     "check is never left out).");
}

PrometheusRenderer::Family& PrometheusRenderer::Of(absl::string_view name, absl::string_view type,
                                                   absl::string_view help) {
  auto it = families_.find(name);
  if (it != families_.end()) return it->second;
  order_.emplace_back(name);
  return families_.emplace(std::string(name), Family{std::string(type), std::string(help), ""})
      .first->second;
}

void PrometheusRenderer::Sample(
    Family& family, absl::string_view name,
    std::initializer_list<std::pair<absl::string_view, absl::string_view>> labels,
    absl::string_view value) {
  std::string& out = family.samples;
  out += std::string(name);
  if (labels.size() > 0) {
    out += "{";
    bool first = true;
    for (const auto& [key, label] : labels) {
      if (!first) out += ",";
      first = false;
      absl::StrAppend(&out, key, "=\"", PrometheusLabelValue(label), "\"");
    }
    out += "}";
  }
  absl::StrAppend(&out, " ", value, "\n");
}

void PrometheusRenderer::AddJob(const JobView& job) {
  ++jobs_;
  const JobTotals& t = job.totals;
  const absl::string_view id = job.job_id;
  // Labels job_id and node_id, not job and node: Prometheus sets `job` (the
  // scrape job) on every series, and Kubernetes discovery often `node`.
  auto job_sample = [&](absl::string_view name, const std::string& value) {
    Sample(families_.find(name)->second, name, {{"job_id", id}}, value);
  };
  Sample(families_.find("trainlet_job_info")->second, "trainlet_job_info",
         {{"job_id", id}, {"state", JobStateName(job.state)}}, "1");
  if (job.started_unix_ms > 0) {
    job_sample("trainlet_job_start_time_seconds", Seconds(job.started_unix_ms));
  }
  if (job.ended_unix_ms > 0)
    job_sample("trainlet_job_end_time_seconds", Seconds(job.ended_unix_ms));
  job_sample("trainlet_job_nodes", absl::StrCat(t.nodes));
  job_sample("trainlet_job_nodes_up", absl::StrCat(t.nodes_up));
  job_sample("trainlet_job_nodes_lost", absl::StrCat(t.nodes_lost));
  job_sample("trainlet_job_workers_running", absl::StrCat(t.workers_running));
  job_sample("trainlet_job_waiting", job.waiting.waiting ? "1" : "0");
  job_sample("trainlet_job_round", absl::StrCat(job.round));
  job_sample("trainlet_job_rounds_total", absl::StrCat(job.rounds));
  job_sample("trainlet_job_restarts_total", absl::StrCat(job.restarts_total));
  job_sample("trainlet_job_hangs_total", absl::StrCat(job.hangs_total));
  job_sample("trainlet_job_failures_total", absl::StrCat(job.failures_total));
  if (t.progress_known && t.progress_step >= 0) {
    job_sample("trainlet_job_progress_step", absl::StrCat(t.progress_step));
  }
  if (t.steps_per_second >= 0 && std::isfinite(t.steps_per_second)) {
    job_sample("trainlet_job_progress_steps_per_second", Number(t.steps_per_second));
  }
  // A finished job has no progress age: an alert on it must not fire.
  if (t.progress_age_ms >= 0 && !Finished(job)) {
    job_sample("trainlet_job_progress_age_seconds", Seconds(t.progress_age_ms));
  }
  if (t.report_lag_ms >= 0) job_sample("trainlet_job_report_lag_seconds", Seconds(t.report_lag_ms));
  job_sample("trainlet_job_gpus_fatal", absl::StrCat(t.gpus_fatal));
  if (job.goodput.known) {
    for (int p = 0; p < kGoodputPhases; ++p) {
      Sample(families_.find("trainlet_job_seconds")->second, "trainlet_job_seconds",
             {{"job_id", id}, {"phase", GoodputPhaseName(p)}}, Seconds(job.goodput.ms[p]));
    }
    if (job.goodput.ettr >= 0) job_sample("trainlet_job_ettr", Number(job.goodput.ettr));
  }
  job_sample("trainlet_job_nodes_preflight_failed", absl::StrCat(t.nodes_preflight_failed));
  // A finished job keeps its slow nodes on the page (what slowed it), but an
  // alert on them must not fire.
  Family& slow = families_.find("trainlet_slow_node")->second;
  for (size_t i = 0; !Finished(job) && i < job.slow_nodes.size(); ++i) {
    const SlowNodeView& n = job.slow_nodes[i];
    Sample(slow, "trainlet_slow_node", {{"job_id", id}, {"node_id", n.node_id}, {"cause", n.cause}},
           "1");
  }

  Family& up = families_.find("trainlet_node_up")->second;
  Family& lost = families_.find("trainlet_node_lost")->second;
  Family& age = families_.find("trainlet_node_report_age_seconds")->second;
  Family& step = families_.find("trainlet_node_progress_step")->second;
  Family& value = families_.find("trainlet_node_progress_value")->second;
  Family& worker_step = families_.find("trainlet_worker_progress_step")->second;
  Family& worker_restarts = families_.find("trainlet_worker_restarts_total")->second;
  Family& check = families_.find("trainlet_preflight_check")->second;
  Family& failed_checks = families_.find("trainlet_preflight_failed_checks")->second;
  for (const NodeView& node : job.nodes) {
    const absl::string_view n = node.node_id;
    Sample(up, "trainlet_node_up", {{"job_id", id}, {"node_id", n}},
           node.up && !node.lost ? "1" : "0");
    Sample(lost, "trainlet_node_lost", {{"job_id", id}, {"node_id", n}}, node.lost ? "1" : "0");
    if (node.report_age_ms >= 0) {
      Sample(age, "trainlet_node_report_age_seconds", {{"job_id", id}, {"node_id", n}},
             Seconds(node.report_age_ms));
    }
    // A lost node's progress, workers and preflight are history, not the job's.
    if (node.lost) continue;
    if (node.preflight.known) {
      Sample(failed_checks, "trainlet_preflight_failed_checks", {{"job_id", id}, {"node_id", n}},
             absl::StrCat(node.preflight.failed()));
      for (const auto& [name, outcome] : PreflightSeriesOf(node.preflight)) {
        if (outcome != CheckOutcome::kFail) {
          if (preflight_series_ >= kMaxPreflightSeries) {
            ++preflight_series_omitted_;
            continue;
          }
          ++preflight_series_;
        }
        Sample(check, "trainlet_preflight_check",
               {{"job_id", id},
                {"node_id", n},
                {"check", name},
                {"outcome", CheckOutcomeName(outcome)}},
               "1");
      }
    }
    if (node.progress.known && node.progress.step >= 0) {
      Sample(step, "trainlet_node_progress_step", {{"job_id", id}, {"node_id", n}},
             absl::StrCat(node.progress.step));
    }
    if (node.progress.known) {
      for (const auto& [key, text] : node.progress.fields) {
        double v = 0;
        if (!absl::SimpleAtod(text, &v) || !std::isfinite(v)) continue;
        Sample(value, "trainlet_node_progress_value",
               {{"job_id", id}, {"node_id", n}, {"field", key}}, Number(v));
      }
    }
    if (node.progress.known && node.progress.step >= 0 && node.progress.local_rank >= 0) {
      if (worker_series_ < kMaxWorkerSeries) {
        Sample(worker_step, "trainlet_worker_progress_step",
               {{"job_id", id},
                {"node_id", n},
                {"local_rank", absl::StrCat(node.progress.local_rank)}},
               absl::StrCat(node.progress.step));
      } else {
        ++worker_series_omitted_;
      }
    }
    for (const WorkerView& w : node.workers) {
      if (worker_series_ >= kMaxWorkerSeries) {
        ++worker_series_omitted_;
        continue;
      }
      ++worker_series_;
      Sample(worker_restarts, "trainlet_worker_restarts_total",
             {{"job_id", id}, {"node_id", n}, {"local_rank", absl::StrCat(w.local_rank)}},
             absl::StrCat(w.restarts));
    }
  }
}

std::string PrometheusRenderer::Finish() {
  std::string out = std::move(head_);
  absl::StrAppend(&out,
                  "# HELP trainlet_controller_jobs Jobs the controller knows.\n"
                  "# TYPE trainlet_controller_jobs gauge\n"
                  "trainlet_controller_jobs ",
                  jobs_, "\n");
  Sample(families_.find("trainlet_controller_metrics_workers_omitted")->second,
         "trainlet_controller_metrics_workers_omitted", {}, absl::StrCat(worker_series_omitted_));
  Sample(families_.find("trainlet_controller_metrics_preflight_omitted")->second,
         "trainlet_controller_metrics_preflight_omitted", {},
         absl::StrCat(preflight_series_omitted_));
  for (const std::string& name : order_) {
    Family& f = families_.find(name)->second;
    absl::StrAppend(&out, "# HELP ", name, " ", f.help, "\n# TYPE ", name, " ", f.type, "\n",
                    f.samples);
  }
  return out;
}

std::string RenderPrometheus(const ControllerSnapshot& snapshot) {
  PrometheusRenderer renderer(snapshot);
  for (JobView job : snapshot.jobs) {
    job.totals = TotalsOf(job);
    renderer.AddJob(job);
  }
  return renderer.Finish();
}

// ---- Table.

std::string RenderStatusTable(const ControllerSnapshot& snapshot, absl::string_view job_id) {
  // Over gRPC the controller's own figures are not known (uptime < 0).
  std::string out =
      snapshot.uptime_ms < 0
          ? absl::StrCat("controller (read over gRPC), at ", UtcTime(snapshot.now_unix_ms), "\n")
          : absl::StrCat("controller ", Cell(snapshot.version), ", up ",
                         Duration(snapshot.uptime_ms), ", ", snapshot.reports_received,
                         " reports (", snapshot.reports_rejected, " refused), at ",
                         UtcTime(snapshot.now_unix_ms), "\n");
  std::vector<const JobView*> jobs;
  for (const JobView& job : snapshot.jobs) {
    if (job_id.empty() || job.job_id == job_id) jobs.push_back(&job);
  }
  if (jobs.empty()) {
    absl::StrAppend(&out,
                    job_id.empty() ? "no jobs\n" : absl::StrCat("no job ", Cell(job_id), "\n"));
    return out;
  }
  out += "\n";
  std::vector<std::vector<std::string>> rows = {
      {"JOB", "STATE", "ROUND", "NODES UP", "WORKERS", "STEP", "RATE/S", "PROGRESS AGE", "RESTARTS",
       "HANGS", "FAILURES", "LAG", "GPUS", "DURATION", "ETTR", "PREFLIGHT"}};
  for (const JobView* job : jobs) {
    const JobTotals& t = job->totals;
    std::string gpus = "-";
    if (t.gpus_fatal > 0) {
      gpus = absl::StrCat(t.gpus_fatal, " fatal");
    } else if (t.gpus_degraded > 0) {
      gpus = absl::StrCat(t.gpus_degraded, " degraded");
    } else {
      for (const NodeView& n : job->nodes) {
        if (!n.gpus.empty()) gpus = "ok";
      }
    }
    rows.push_back({Cell(job->job_id), JobStateName(job->state), absl::StrCat(job->round),
                    absl::StrCat(t.nodes_up, "/", t.nodes,
                                 t.nodes_lost > 0 ? absl::StrCat(" (", t.nodes_lost, " lost)")
                                                  : std::string()),
                    absl::StrCat(t.workers_running, "/", t.workers),
                    t.progress_known && t.progress_step >= 0 ? absl::StrCat(t.progress_step) : "-",
                    Rate(t.steps_per_second), Duration(t.progress_age_ms),
                    absl::StrCat(job->restarts_total), absl::StrCat(job->hangs_total),
                    absl::StrCat(job->failures_total), Duration(t.report_lag_ms), gpus,
                    Duration(DurationOf(*job, snapshot.now_unix_ms)), Ettr(job->goodput),
                    t.nodes_preflight_failed > 0
                        ? absl::StrCat(t.nodes_preflight_failed, " node",
                                       t.nodes_preflight_failed == 1 ? "" : "s", " failed")
                        : "-"});
  }
  out += Table(rows, "");
  for (const JobView* job : jobs) {
    AppendJobDetail(out, *job, !job_id.empty(), snapshot.now_unix_ms);
  }
  return out;
}

std::string RenderEvidenceText(absl::string_view job_id, const std::vector<EvidenceView>& hangs) {
  std::string out;
  if (hangs.empty()) {
    return absl::StrCat("job ", Cell(job_id), ": no hang evidence\n");
  }
  for (const EvidenceView& h : hangs) {
    absl::StrAppend(&out, "== job ", Cell(job_id), ", hang ", h.seq, ": round ", h.round, ", ",
                    UtcTime(h.at_unix_ms), ", node ", Cell(h.node_id), ": ", Cell(h.verdict, 512),
                    "\n");
    // Every line, each made safe for a terminal (tabs kept).
    for (absl::string_view line : absl::StrSplit(h.evidence, '\n')) {
      std::string safe;
      for (absl::string_view part : absl::StrSplit(line, '\t')) {
        if (!safe.empty() || part.data() != line.data()) safe += "\t";
        safe += SafeForLog(part, part.size() + 1);
      }
      absl::StrAppend(&out, safe, "\n");
    }
  }
  return out;
}

// ---- JSON back.

absl::StatusOr<ControllerSnapshot> ParseSnapshotJson(absl::string_view json, size_t max_bytes) {
  absl::StatusOr<Value> root = ParseDocument(json, max_bytes, "/api/jobs");
  if (!root.ok()) return root.status();
  ControllerSnapshot snapshot;
  ParseFigures(*root, &snapshot);
  for (const Value* job : ListField(*root, "jobs")) snapshot.jobs.push_back(ParseJob(*job));
  return snapshot;
}

absl::Status ParseJobJson(absl::string_view json, ControllerSnapshot* snapshot, JobView* job,
                          int64_t* next_from, size_t max_bytes) {
  absl::StatusOr<Value> root = ParseDocument(json, max_bytes, "/api/jobs/JOB");
  if (!root.ok()) return root.status();
  const Value* j = Field(*root, "job");
  if (j == nullptr || j->kind_case() != Value::kStructValue) {
    return absl::InvalidArgumentError("the controller's /api/jobs/JOB answer has no job");
  }
  ParseFigures(*root, snapshot);
  *job = ParseJob(*j);
  *next_from = IntField(*j, "next_from", -1);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<EvidenceView>> ParseEvidenceJson(absl::string_view json,
                                                            size_t max_bytes) {
  absl::StatusOr<Value> root = ParseDocument(json, max_bytes, "/api/jobs/JOB/evidence");
  if (!root.ok()) return root.status();
  std::vector<EvidenceView> out;
  for (const Value* h : ListField(*root, "hangs")) {
    EvidenceView e;
    e.seq = IntField(*h, "seq");
    e.round = static_cast<uint64_t>(IntField(*h, "round"));
    e.at_unix_ms = IntField(*h, "at_unix_ms");
    e.node_id = StringField(*h, "node_id");
    e.verdict = StringField(*h, "verdict");
    e.evidence = StringField(*h, "evidence");
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace trainlet::controller
