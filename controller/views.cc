#include "controller/views.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"

namespace trainlet::controller {
namespace {

constexpr int kJsonSchema = 1;
// Bounds on what one string may take in a view (the reports' own limits are
// lower; these hold whatever the adapter passes).
constexpr size_t kMaxId = 256;
constexpr size_t kMaxText = 4096;
constexpr size_t kMaxLabel = 256;

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

void WriteNode(JsonWriter& w, const NodeView& node) {
  w.Open('{');
  w.Key("node_id");
  w.String(node.node_id, kMaxId);
  w.Key("node_rank");
  w.Int(node.node_rank);
  w.Key("incarnation");
  w.String(absl::StrFormat("%016x", node.incarnation));
  w.Key("up");
  w.Bool(node.up);
  w.Key("report_age_ms");
  w.Int(node.report_age_ms);
  w.Key("report_lag_ms");
  w.Int(node.report_lag_ms);
  w.Key("agent_state");
  w.String(AgentStateName(node.agent_state));
  w.Key("round");
  w.Uint(node.round);
  w.Key("restart_count");
  w.Int(node.restart_count);
  w.Key("last_failure");
  w.String(node.last_failure);
  w.Key("exit_code");
  w.Int(node.exit_code);
  w.Key("agent_rss_bytes");
  w.Uint(node.agent_rss_bytes);
  w.Key("workers");
  w.Open('[');
  for (const WorkerView& worker : node.workers) {
    w.Open('{');
    w.Key("local_rank");
    w.Int(worker.local_rank);
    w.Key("rank");
    w.Int(worker.rank);
    w.Key("pid");
    w.Int(worker.pid);
    w.Key("state");
    w.String(WorkerStateName(worker.state));
    w.Key("exit_code");
    w.Int(worker.exit_code);
    w.Key("restarts");
    w.Int(worker.restarts);
    w.Close('}');
  }
  w.Close(']');
  w.Key("progress");
  w.Open('{');
  w.Key("known");
  w.Bool(node.progress.known);
  w.Key("step");
  w.Int(node.progress.step);
  w.Key("steps_per_second");
  w.Double(node.progress.steps_per_second);
  w.Key("age_ms");
  w.Int(node.progress.age_ms);
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
    w.Key("index");
    w.Int(gpu.index);
    w.Key("uuid");
    w.String(gpu.uuid, kMaxId);
    w.Key("status");
    w.String(GpuStatusName(gpu.status));
    w.Key("reason");
    w.String(gpu.reason);
    w.Close('}');
  }
  w.Close(']');
  w.Close('}');
}

void WriteJob(JsonWriter& w, const JobView& job) {
  const JobTotals totals = TotalsOf(job);
  w.Open('{');
  w.Key("job_id");
  w.String(job.job_id, kMaxId);
  w.Key("state");
  w.String(JobStateName(job.state));
  w.Key("round");
  w.Uint(job.round);
  w.Key("rounds");
  w.Int(job.rounds);
  w.Key("nnodes");
  w.Int(job.nnodes);
  w.Key("world_size");
  w.Int(job.world_size);
  w.Key("last_report_unix_ms");
  w.Int(job.last_report_unix_ms);
  w.Key("restarts_total");
  w.Int(job.restarts_total);
  w.Key("hangs_total");
  w.Int(job.hangs_total);
  w.Key("failures_total");
  w.Int(job.failures_total);
  w.Key("lost_nodes");
  w.Open('[');
  for (const std::string& node : job.lost_nodes) w.String(node, kMaxId);
  w.Close(']');
  w.Key("totals");
  w.Open('{');
  w.Key("nodes");
  w.Int(totals.nodes);
  w.Key("nodes_up");
  w.Int(totals.nodes_up);
  w.Key("workers");
  w.Int(totals.workers);
  w.Key("workers_running");
  w.Int(totals.workers_running);
  w.Key("progress_step");
  w.Int(totals.progress_step);
  w.Key("steps_per_second");
  w.Double(totals.steps_per_second);
  w.Key("progress_age_ms");
  w.Int(totals.progress_age_ms);
  w.Key("report_lag_ms");
  w.Int(totals.report_lag_ms);
  w.Key("gpus_fatal");
  w.Int(totals.gpus_fatal);
  w.Key("gpus_degraded");
  w.Int(totals.gpus_degraded);
  w.Close('}');
  w.Key("nodes");
  w.Open('[');
  for (const NodeView& node : job.nodes) WriteNode(w, node);
  w.Close(']');
  w.Key("restarts");
  w.Open('[');
  for (const RestartView& restart : job.restarts) {
    w.Open('{');
    w.Key("round");
    w.Uint(restart.round);
    w.Key("at_unix_ms");
    w.Int(restart.at_unix_ms);
    w.Key("node_id");
    w.String(restart.node_id, kMaxId);
    w.Key("cause");
    w.String(restart.cause);
    w.Close('}');
  }
  w.Close(']');
  w.Key("hangs");
  w.Open('[');
  for (const HangView& hang : job.hangs) {
    w.Open('{');
    w.Key("round");
    w.Uint(hang.round);
    w.Key("at_unix_ms");
    w.Int(hang.at_unix_ms);
    w.Key("node_id");
    w.String(hang.node_id, kMaxId);
    w.Key("verdict");
    w.String(hang.verdict);
    w.Key("evidence_summary");
    w.String(hang.evidence_summary);
    w.Close('}');
  }
  w.Close(']');
  w.Close('}');
}

// ---- Prometheus.

class MetricsWriter {
 public:
  void Family(absl::string_view name, absl::string_view type, absl::string_view help) {
    absl::StrAppend(&out_, "# HELP ", name, " ", help, "\n# TYPE ", name, " ", type, "\n");
  }
  void Sample(absl::string_view name,
              std::initializer_list<std::pair<absl::string_view, absl::string_view>> labels,
              absl::string_view value) {
    out_ += std::string(name);
    if (labels.size() > 0) {
      out_ += "{";
      bool first = true;
      for (const auto& [key, label] : labels) {
        if (!first) out_ += ",";
        first = false;
        absl::StrAppend(&out_, key, "=\"", PrometheusLabelValue(label), "\"");
      }
      out_ += "}";
    }
    absl::StrAppend(&out_, " ", value, "\n");
  }
  std::string Take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string Seconds(int64_t ms) { return absl::StrFormat("%.3f", static_cast<double>(ms) / 1000); }

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

void AppendJobDetail(std::string& out, const JobView& job, bool full) {
  absl::StrAppend(&out, "\nJOB ", Cell(job.job_id), ": ", JobStateName(job.state), ", round ",
                  job.round, ", ", job.world_size, " ranks on ", job.nnodes, " nodes\n");
  std::vector<std::vector<std::string>> rows = {{"NODE", "RANK", "INCARNATION", "UP", "REPORT AGE",
                                                 "LAG", "AGENT", "RANKS", "WORKERS", "RESTARTS",
                                                 "STEP", "RATE/S", "PROGRESS AGE", "GPUS"}};
  for (const NodeView& node : job.nodes) {
    int worker_restarts = 0;
    for (const WorkerView& w : node.workers) worker_restarts += w.restarts;
    rows.push_back(
        {Cell(node.node_id), node.node_rank >= 0 ? absl::StrCat(node.node_rank) : "-",
         absl::StrFormat("%016x", node.incarnation), node.up ? "up" : "stale",
         Duration(node.report_age_ms), Duration(node.report_lag_ms),
         AgentStateName(node.agent_state), RankList(node.workers), WorkerSummary(node.workers),
         absl::StrCat(worker_restarts),
         node.progress.known && node.progress.step >= 0 ? absl::StrCat(node.progress.step) : "-",
         Rate(node.progress.steps_per_second),
         node.progress.known ? Duration(node.progress.age_ms) : "-", GpuSummary(node.gpus)});
  }
  out += Table(rows, "  ");
  if (!job.lost_nodes.empty()) {
    std::vector<std::string> lost;
    for (const std::string& n : job.lost_nodes) lost.push_back(Cell(n));
    absl::StrAppend(&out, "  lost nodes (not back): ", absl::StrJoin(lost, ", "), "\n");
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
  }
  const size_t limit = full ? job.restarts.size() : std::min<size_t>(job.restarts.size(), 5);
  if (job.restarts_total > 0 || !job.restarts.empty()) {
    absl::StrAppend(&out, "  restarts: ", job.restarts_total, " (", full ? "all kept" : "latest",
                    ")\n");
    for (size_t i = job.restarts.size() - limit; i < job.restarts.size(); ++i) {
      const RestartView& r = job.restarts[i];
      absl::StrAppend(&out, "    round ", r.round, "  ", UtcTime(r.at_unix_ms), "  ",
                      r.node_id.empty() ? "-" : Cell(r.node_id), "  ", Cell(r.cause, 512), "\n");
    }
  }
  if (job.hangs_total > 0 || !job.hangs.empty()) {
    absl::StrAppend(&out, "  hangs: ", job.hangs_total, "\n");
    for (const HangView& h : job.hangs) {
      absl::StrAppend(&out, "    round ", h.round, "  ", UtcTime(h.at_unix_ms), "  ",
                      Cell(h.node_id), "  ", Cell(h.verdict, 256), "\n");
      if (full && !h.evidence_summary.empty()) {
        absl::StrAppend(&out, "      evidence: ", Cell(h.evidence_summary, 1024), "\n");
      }
    }
  }
}

// ---- JSON back into a snapshot.

// As the report's bound (controller/report_limits.h's kMaxLostNodes).
constexpr size_t kMaxLostNodesShown = 64;

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

NodeView ParseNode(const Value& v) {
  NodeView node;
  node.node_id = StringField(v, "node_id");
  node.node_rank = static_cast<int>(IntField(v, "node_rank", -1));
  node.incarnation = std::strtoull(StringField(v, "incarnation").c_str(), nullptr, 16);
  node.up = BoolField(v, "up");
  node.report_age_ms = IntField(v, "report_age_ms", -1);
  node.report_lag_ms = IntField(v, "report_lag_ms", -1);
  node.agent_state = EnumByName(StringField(v, "agent_state"), kAgentStates, AgentStateName);
  node.round = static_cast<uint64_t>(IntField(v, "round"));
  node.restart_count = static_cast<int>(IntField(v, "restart_count"));
  node.last_failure = StringField(v, "last_failure");
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
    node.workers.push_back(worker);
  }
  if (const Value* p = Field(v, "progress"); p != nullptr) {
    node.progress.known = BoolField(*p, "known");
    node.progress.step = IntField(*p, "step", -1);
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
  job.last_report_unix_ms = IntField(v, "last_report_unix_ms");
  job.restarts_total = IntField(v, "restarts_total");
  job.hangs_total = IntField(v, "hangs_total");
  job.failures_total = IntField(v, "failures_total");
  for (const Value* n : ListField(v, "lost_nodes")) {
    if (n->kind_case() == Value::kStringValue && job.lost_nodes.size() < kMaxLostNodesShown) {
      job.lost_nodes.push_back(n->string_value());
    }
  }
  for (const Value* n : ListField(v, "nodes")) job.nodes.push_back(ParseNode(*n));
  for (const Value* r : ListField(v, "restarts")) {
    job.restarts.push_back({static_cast<uint64_t>(IntField(*r, "round")),
                            IntField(*r, "at_unix_ms"), StringField(*r, "node_id"),
                            StringField(*r, "cause")});
  }
  for (const Value* h : ListField(v, "hangs")) {
    job.hangs.push_back({static_cast<uint64_t>(IntField(*h, "round")), IntField(*h, "at_unix_ms"),
                         StringField(*h, "node_id"), StringField(*h, "verdict"),
                         StringField(*h, "evidence_summary")});
  }
  return job;
}

}  // namespace

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

JobTotals TotalsOf(const JobView& job) {
  JobTotals t;
  for (const NodeView& node : job.nodes) {
    ++t.nodes;
    if (node.up) {
      ++t.nodes_up;
      if (node.report_lag_ms >= 0) t.report_lag_ms = std::max(t.report_lag_ms, node.report_lag_ms);
    }
    for (const WorkerView& w : node.workers) {
      ++t.workers;
      t.workers_running += w.state == WorkerState::kRunning;
    }
    if (node.progress.known) {
      if (!t.progress_known || node.progress.step > t.progress_step) {
        t.progress_step = node.progress.step;
        t.steps_per_second = node.progress.steps_per_second;
      }
      if (node.progress.age_ms >= 0 &&
          (t.progress_age_ms < 0 || node.progress.age_ms < t.progress_age_ms)) {
        t.progress_age_ms = node.progress.age_ms;
      }
      t.progress_known = true;
    }
    for (const GpuView& g : node.gpus) {
      t.gpus_fatal += g.status == GpuStatus::kFatal;
      t.gpus_degraded += g.status == GpuStatus::kDegraded;
    }
  }
  return t;
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

std::string RenderJson(const ControllerSnapshot& snapshot) {
  JsonWriter w;
  w.Open('{');
  w.Key("schema");
  w.Int(kJsonSchema);
  w.Key("now_unix_ms");
  w.Int(snapshot.now_unix_ms);
  w.Key("uptime_ms");
  w.Int(snapshot.uptime_ms);
  w.Key("reports_received");
  w.Int(snapshot.reports_received);
  w.Key("reports_rejected");
  w.Int(snapshot.reports_rejected);
  w.Key("version");
  w.String(snapshot.version, kMaxId);
  w.Key("jobs");
  w.Open('[');
  for (const JobView& job : snapshot.jobs) WriteJob(w, job);
  w.Close(']');
  w.Close('}');
  std::string out = w.Take();
  out += "\n";
  return out;
}

std::string RenderPrometheus(const ControllerSnapshot& snapshot) {
  MetricsWriter m;
  m.Family("trainlet_controller_uptime_seconds", "gauge", "Seconds since the controller started.");
  m.Sample("trainlet_controller_uptime_seconds", {}, Seconds(snapshot.uptime_ms));
  m.Family("trainlet_controller_reports_received_total", "counter",
           "Health reports the controller applied.");
  m.Sample("trainlet_controller_reports_received_total", {},
           absl::StrCat(snapshot.reports_received));
  m.Family("trainlet_controller_reports_rejected_total", "counter",
           "Health reports the controller refused (invalid, fenced, over a cap).");
  m.Sample("trainlet_controller_reports_rejected_total", {},
           absl::StrCat(snapshot.reports_rejected));
  m.Family("trainlet_controller_jobs", "gauge", "Jobs the controller knows.");
  m.Sample("trainlet_controller_jobs", {}, absl::StrCat(snapshot.jobs.size()));

  // Labels job_id and node_id, not job and node: Prometheus sets `job` (the
  // scrape job) on every series, and Kubernetes discovery often `node`.
  std::vector<JobTotals> totals;
  for (const JobView& job : snapshot.jobs) totals.push_back(TotalsOf(job));
  // One family at a time (the format wants a family's samples together).
  auto per_job = [&](absl::string_view name, absl::string_view type, absl::string_view help,
                     auto value_of) {
    m.Family(name, type, help);
    for (size_t i = 0; i < snapshot.jobs.size(); ++i) {
      std::string value;
      if (value_of(snapshot.jobs[i], totals[i], &value)) {
        m.Sample(name, {{"job_id", snapshot.jobs[i].job_id}}, value);
      }
    }
  };
  m.Family("trainlet_job_info", "gauge", "1 per job; the label state is the job's state.");
  for (const JobView& job : snapshot.jobs) {
    m.Sample("trainlet_job_info", {{"job_id", job.job_id}, {"state", JobStateName(job.state)}},
             "1");
  }
  per_job("trainlet_job_nodes", "gauge", "Nodes the controller knows in the job.",
          [](const JobView&, const JobTotals& t, std::string* v) {
            *v = absl::StrCat(t.nodes);
            return true;
          });
  per_job("trainlet_job_nodes_up", "gauge", "Nodes that reported within their staleness window.",
          [](const JobView&, const JobTotals& t, std::string* v) {
            *v = absl::StrCat(t.nodes_up);
            return true;
          });
  per_job("trainlet_job_workers_running", "gauge", "Workers running, over the job's nodes.",
          [](const JobView&, const JobTotals& t, std::string* v) {
            *v = absl::StrCat(t.workers_running);
            return true;
          });
  per_job("trainlet_job_round", "gauge", "The job's current rendezvous round.",
          [](const JobView& j, const JobTotals&, std::string* v) {
            *v = absl::StrCat(j.round);
            return true;
          });
  per_job("trainlet_job_rounds_total", "counter", "Rendezvous rounds the job opened.",
          [](const JobView& j, const JobTotals&, std::string* v) {
            *v = absl::StrCat(j.rounds);
            return true;
          });
  per_job("trainlet_job_restarts_total", "counter", "Restarts of the job (rounds after the first).",
          [](const JobView& j, const JobTotals&, std::string* v) {
            *v = absl::StrCat(j.restarts_total);
            return true;
          });
  per_job("trainlet_job_hangs_total", "counter", "Workers the agents declared hung.",
          [](const JobView& j, const JobTotals&, std::string* v) {
            *v = absl::StrCat(j.hangs_total);
            return true;
          });
  per_job("trainlet_job_failures_total", "counter",
          "Failures that ended a round (each restart, and the job's own failure).",
          [](const JobView& j, const JobTotals&, std::string* v) {
            *v = absl::StrCat(j.failures_total);
            return true;
          });
  per_job("trainlet_job_progress_step", "gauge",
          "The highest step a worker reported (absent before any progress).",
          [](const JobView&, const JobTotals& t, std::string* v) {
            if (!t.progress_known || t.progress_step < 0) return false;
            *v = absl::StrCat(t.progress_step);
            return true;
          });
  per_job("trainlet_job_progress_steps_per_second", "gauge",
          "Steps per second of the node with the highest step (absent when unknown).",
          [](const JobView&, const JobTotals& t, std::string* v) {
            if (!(t.steps_per_second >= 0) || !std::isfinite(t.steps_per_second)) return false;
            *v = Number(t.steps_per_second);
            return true;
          });
  per_job("trainlet_job_progress_age_seconds", "gauge",
          "Seconds since the freshest progress line of the job (absent before any progress).",
          [](const JobView&, const JobTotals& t, std::string* v) {
            if (t.progress_age_ms < 0) return false;
            *v = Seconds(t.progress_age_ms);
            return true;
          });
  per_job("trainlet_job_report_lag_seconds", "gauge",
          "The largest report lag (received minus sent) of the nodes that are up.",
          [](const JobView&, const JobTotals& t, std::string* v) {
            if (t.report_lag_ms < 0) return false;
            *v = Seconds(t.report_lag_ms);
            return true;
          });
  per_job("trainlet_job_gpus_fatal", "gauge", "GPUs the agents judged fatal.",
          [](const JobView&, const JobTotals& t, std::string* v) {
            *v = absl::StrCat(t.gpus_fatal);
            return true;
          });

  m.Family("trainlet_node_up", "gauge", "1 when the node reported within its staleness window.");
  for (const JobView& job : snapshot.jobs) {
    for (const NodeView& node : job.nodes) {
      m.Sample("trainlet_node_up", {{"job_id", job.job_id}, {"node_id", node.node_id}},
               node.up ? "1" : "0");
    }
  }
  m.Family("trainlet_node_report_age_seconds", "gauge", "Seconds since the node's latest report.");
  for (const JobView& job : snapshot.jobs) {
    for (const NodeView& node : job.nodes) {
      if (node.report_age_ms < 0) continue;
      m.Sample("trainlet_node_report_age_seconds",
               {{"job_id", job.job_id}, {"node_id", node.node_id}}, Seconds(node.report_age_ms));
    }
  }
  m.Family("trainlet_node_progress_step", "gauge", "The node's latest progress step.");
  for (const JobView& job : snapshot.jobs) {
    for (const NodeView& node : job.nodes) {
      if (!node.progress.known || node.progress.step < 0) continue;
      m.Sample("trainlet_node_progress_step", {{"job_id", job.job_id}, {"node_id", node.node_id}},
               absl::StrCat(node.progress.step));
    }
  }
  return m.Take();
}

std::string RenderStatusTable(const ControllerSnapshot& snapshot, absl::string_view job_id) {
  std::string out =
      absl::StrCat("controller ", Cell(snapshot.version), ", up ", Duration(snapshot.uptime_ms),
                   ", ", snapshot.reports_received, " reports (", snapshot.reports_rejected,
                   " refused), at ", UtcTime(snapshot.now_unix_ms), "\n");
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
  std::vector<std::vector<std::string>> rows = {{"JOB", "STATE", "ROUND", "NODES UP", "WORKERS",
                                                 "STEP", "RATE/S", "PROGRESS AGE", "RESTARTS",
                                                 "HANGS", "FAILURES", "LAG", "GPUS"}};
  for (const JobView* job : jobs) {
    const JobTotals t = TotalsOf(*job);
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
                    absl::StrCat(t.nodes_up, "/", t.nodes),
                    absl::StrCat(t.workers_running, "/", t.workers),
                    t.progress_known && t.progress_step >= 0 ? absl::StrCat(t.progress_step) : "-",
                    Rate(t.steps_per_second), Duration(t.progress_age_ms),
                    absl::StrCat(job->restarts_total), absl::StrCat(job->hangs_total),
                    absl::StrCat(job->failures_total), Duration(t.report_lag_ms), gpus});
  }
  out += Table(rows, "");
  for (const JobView* job : jobs) AppendJobDetail(out, *job, !job_id.empty());
  return out;
}

absl::StatusOr<ControllerSnapshot> ParseSnapshotJson(absl::string_view json, size_t max_bytes) {
  if (json.size() > max_bytes) {
    return absl::InvalidArgumentError(absl::StrCat("the controller's /api/jobs answer is ",
                                                   json.size(), " bytes, over the limit of ",
                                                   max_bytes));
  }
  Value root;
  auto parsed = google::protobuf::util::JsonStringToMessage(std::string(json), &root);
  if (!parsed.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("the controller's /api/jobs answer is not JSON (",
                     SafeForLog(std::string(parsed.message()), 200),
                     "); is the address the controller's HTTP port?"));
  }
  if (root.kind_case() != Value::kStructValue || IntField(root, "schema") != kJsonSchema) {
    return absl::InvalidArgumentError(
        absl::StrCat("the controller's /api/jobs answer is not schema ", kJsonSchema,
                     " (a trainlet of another version?)"));
  }
  ControllerSnapshot snapshot;
  snapshot.now_unix_ms = IntField(root, "now_unix_ms");
  snapshot.uptime_ms = IntField(root, "uptime_ms");
  snapshot.reports_received = IntField(root, "reports_received");
  snapshot.reports_rejected = IntField(root, "reports_rejected");
  snapshot.version = StringField(root, "version");
  for (const Value* job : ListField(root, "jobs")) snapshot.jobs.push_back(ParseJob(*job));
  return snapshot;
}

}  // namespace trainlet::controller
