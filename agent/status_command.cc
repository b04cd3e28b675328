#include "agent/status_command.h"

#include <google/protobuf/util/json_util.h>
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "agent/options.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "rendezvous/grpc_auth.h"
#include "trainlet/v1/controller_service.grpc.pb.h"

namespace trainlet::agent {
namespace {

constexpr absl::string_view kStatusUsage = "trainlet status [OPTIONS] [JOB]";
constexpr absl::string_view kStatusDescription =
    "Prints what the thin controller knows: every job, or one JOB's nodes and\n"
    "history (rounds, restarts with their causes, hangs). See docs/controller.md.";
// A job of 4,096 nodes with large reports.
constexpr int kMaxStatusResponseBytes = 256 << 20;

const std::vector<OptionSpec>& StatusOptionTable() {
  static const std::vector<OptionSpec>* table = [] {
    auto* t = new std::vector<OptionSpec>{
        {"controller", OptionKind::kString, "HOST[:PORT]", "127.0.0.1:29600",
         "The controller to ask; port 29600 unless given."},
        {"token-file", OptionKind::kString, "PATH", "", "File holding the controller's token."},
        {"json", OptionKind::kBool, "", "false",
         "Print the controller's answer as JSON (proto3 JSON mapping).", false, true},
        {"timeout", OptionKind::kDuration, "DURATION", "5s", "How long to wait for the answer.",
         false, true},
    };
    for (OptionSpec& spec : TlsOptionSpecs(/*client=*/true)) t->push_back(std::move(spec));
    return t;
  }();
  return *table;
}

// "4s ago", "<1s ago".
std::string AgeText(absl::Duration age) {
  if (age < absl::Seconds(1)) return "<1s ago";
  return absl::StrCat(absl::FormatDuration(absl::Trunc(age, absl::Seconds(1))), " ago");
}

std::string Ago(int64_t unix_ms, absl::Time now) {
  if (unix_ms <= 0) return "-";
  return AgeText(now - absl::FromUnixMillis(unix_ms));
}

std::string Clean(const std::string& text, size_t max = 200) { return SafeForLog(text, max); }

absl::string_view JobState(v1::JobSummary::State s) {
  switch (s) {
    case v1::JobSummary::ACTIVE:
      return "ACTIVE";
    case v1::JobSummary::STALE:
      return "STALE";
    case v1::JobSummary::SUCCEEDED:
      return "SUCCEEDED";
    case v1::JobSummary::FAILED:
      return "FAILED";
    default:
      return "?";
  }
}

int ExitFor(const grpc::Status& s) {
  switch (s.error_code()) {
    case grpc::StatusCode::NOT_FOUND:
      return 1;
    case grpc::StatusCode::UNAUTHENTICATED:
      return kExitRejected;
    default:
      return kExitUnavailable;
  }
}

// The one positional word (JOB) out of `args`; a flag's separate value
// ("--controller HOST") is not one.
absl::Status SplitJob(const std::vector<std::string>& args, std::vector<std::string>* flags,
                      std::string* job) {
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a.rfind("-", 0) == 0) {
      flags->push_back(a);
      const bool takes_value =
          a.find('=') == std::string::npos && a != "--json" && a != "-h" && a != "--help";
      if (takes_value && i + 1 < args.size()) flags->push_back(args[++i]);
      continue;
    }
    if (!job->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "one JOB at most, got \"", SafeForLog(*job, 64), "\" and \"", SafeForLog(a, 64), "\""));
    }
    *job = a;
  }
  return absl::OkStatus();
}

}  // namespace

std::string FormatJobs(const v1::ListJobsResponse& jobs, absl::Time now) {
  std::string out = absl::StrFormat("%-32s %-9s %6s %7s %8s %5s %10s  %s\n", "JOB", "STATE",
                                    "ROUND", "NODES", "RESTARTS", "HANGS", "STEP", "LAST REPORT");
  for (const v1::JobSummary& j : jobs.jobs()) {
    absl::StrAppendFormat(
        &out, "%-32s %-9s %6d %7s %8d %5d %10s  %s\n", Clean(j.job_id(), 64), JobState(j.state()),
        j.round(), absl::StrCat(j.nodes_fresh(), "/", j.nodes()), j.restarts(), j.hangs(),
        j.progress_step() < 0 ? std::string("-") : absl::StrCat(j.progress_step()),
        Ago(j.last_report_unix_ms(), now));
  }
  if (jobs.jobs().empty()) out += "(no jobs have reported)\n";
  return out;
}

std::string FormatJobStatus(const v1::GetStatusResponse& status) {
  const v1::JobSummary& j = status.summary();
  std::string out =
      absl::StrFormat("job %s: %s, round %d, %d/%d nodes reporting, %d restarts, %d hangs\n\n",
                      Clean(j.job_id(), 64), JobState(j.state()), j.round(), j.nodes_fresh(),
                      j.nodes(), j.restarts(), j.hangs());
  absl::StrAppendFormat(&out, "%-5s %-32s %-17s %6s %8s %10s %12s %10s %6s  %s\n", "RANK", "NODE",
                        "STATE", "ROUND", "RESTARTS", "STEP", "STEP AGE", "REPORTED", "RSS",
                        "GPUS");
  for (const v1::NodeStatus& n : status.nodes()) {
    const v1::HealthReport& r = n.report();
    int fatal = 0;
    for (const v1::GpuReport& g : r.gpus()) fatal += g.fatal() ? 1 : 0;
    const std::string state =
        absl::StrCat(v1::HealthReport::AgentState_Name(r.state()), n.stale() ? " (stale)" : "");
    absl::StrAppendFormat(
        &out, "%-5s %-32s %-17s %6d %8d %10s %12s %10s %6s  %s\n",
        r.node_rank() < 0 ? std::string("-") : absl::StrCat(r.node_rank()), Clean(r.node_id(), 64),
        state, r.round(), r.restart_count(),
        r.progress().known() ? absl::StrCat(r.progress().step()) : std::string("-"),
        r.progress().known() ? absl::FormatDuration(absl::Milliseconds(r.progress().age_ms()))
                             : std::string("-"),
        AgeText(absl::Milliseconds(n.report_age_ms())),
        absl::StrCat(r.agent_rss_bytes() >> 20, "M"),
        r.gpus().empty()
            ? std::string("-")
            : absl::StrCat(r.gpus_size(),
                           fatal > 0 ? absl::StrCat(", ", fatal, " fatal") : std::string(" ok")));
  }
  if (status.history().empty()) return out;
  out += "\nHISTORY\n";
  for (const v1::HistoryEntry& e : status.history()) {
    absl::StrAppendFormat(
        &out, "%s  %-10s round %-4d %-24s %s\n",
        absl::FormatTime("%Y-%m-%dT%H:%M:%SZ", absl::FromUnixMillis(e.at_unix_ms()),
                         absl::UTCTimeZone()),
        v1::HistoryEntry::Kind_Name(e.kind()), e.round(), Clean(e.node_id(), 64), Clean(e.cause()));
    if (!e.verdict().empty()) absl::StrAppend(&out, "      verdict: ", Clean(e.verdict()), "\n");
    if (!e.evidence().empty()) {
      absl::StrAppend(&out, "      evidence: ", Clean(e.evidence(), 4096), "\n");
    }
  }
  return out;
}

int RunStatusCommand(const std::vector<std::string>& args,
                     const std::map<std::string, std::string>& env, std::ostream& out,
                     std::ostream& err) {
  const std::vector<OptionSpec>& table = StatusOptionTable();
  std::vector<std::string> flags;
  std::string job;
  auto usage_error = [&err](const absl::Status& s) {
    err << "trainlet status: " << s.message() << "\nRun 'trainlet status --help' for usage.\n";
    return ExitCodeForConfigError(s);
  };
  if (absl::Status s = SplitJob(args, &flags, &job); !s.ok()) return usage_error(s);
  absl::StatusOr<ParsedOptions> parsed = ParseOptions(table, flags, env, kStatusUsage);
  if (!parsed.ok()) return usage_error(parsed.status());
  if (parsed->help_requested) {
    out << HelpText(kStatusUsage, kStatusDescription, table, false);
    return kExitSuccess;
  }
  absl::StatusOr<HostPort> target =
      ParseHostPortValue(ValueOrDefault(*parsed, table, "controller"), 29600);
  if (!target.ok()) return usage_error(target.status());
  std::string token;
  if (const OptionValue* token_file = parsed->Find("token-file")) {
    absl::StatusOr<std::string> t = ReadTokenFile(*token_file);
    if (!t.ok()) return usage_error(t.status());
    token = *std::move(t);
  }
  absl::StatusOr<bool> json = ParseBoolValue(ValueOrDefault(*parsed, table, "json"));
  if (!json.ok()) return usage_error(json.status());
  absl::Duration timeout;
  if (absl::Status s =
          ParseDurationOptions(*parsed, table, {{"timeout", absl::Milliseconds(1), &timeout}});
      !s.ok()) {
    return usage_error(s);
  }
  std::vector<std::string> warnings;
  absl::StatusOr<rendezvous::TlsConfig> tls = ParseTlsOptions(*parsed, &warnings);
  if (!tls.ok()) return usage_error(tls.status());

  const std::string address = JoinHostPort(target->host, target->port);
  grpc::ChannelArguments channel_args;
  channel_args.SetMaxReceiveMessageSize(kMaxStatusResponseBytes);
  auto credentials = rendezvous::ClientCredentials(*tls, &channel_args);
  auto stub =
      v1::Controller::NewStub(grpc::CreateCustomChannel(address, credentials, channel_args));
  grpc::ClientContext ctx;
  if (!token.empty()) ctx.AddMetadata(rendezvous::kTokenMetadataKey, token);
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + timeout));
  google::protobuf::util::JsonPrintOptions json_options;
  json_options.add_whitespace = true;
  json_options.preserve_proto_field_names = true;
  std::string text;
  grpc::Status s;
  if (job.empty()) {
    v1::ListJobsResponse jobs;
    s = stub->ListJobs(&ctx, v1::ListJobsRequest(), &jobs);
    if (s.ok()) {
      if (*json) {
        (void)google::protobuf::util::MessageToJsonString(jobs, &text, json_options);
      } else {
        text = FormatJobs(jobs, absl::Now());
      }
    }
  } else {
    v1::GetStatusRequest request;
    request.set_job_id(job);
    v1::GetStatusResponse status;
    s = stub->GetStatus(&ctx, request, &status);
    if (s.ok()) {
      if (*json) {
        (void)google::protobuf::util::MessageToJsonString(status, &text, json_options);
      } else {
        text = FormatJobStatus(status);
      }
    }
  }
  if (!s.ok()) {
    err << "trainlet status: controller " << SafeForLog(address) << ": "
        << SafeForLog(s.error_message(), 512) << "\n";
    return ExitFor(s);
  }
  out << text;
  return kExitSuccess;
}

}  // namespace trainlet::agent
