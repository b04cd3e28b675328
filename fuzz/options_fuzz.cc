// Fuzz target: ParseOptions over a fixed option table, with fuzzed arguments
// and environment, then the typed value parsers on whatever it accepted.
// Input: lines; "E:NAME=VALUE" lines go to the environment, every other line
// is one argument.
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "config/options.h"
#include "fuzz/fuzz_util.h"

namespace agent = trainlet::agent;
using agent::OptionKind;

namespace {

std::vector<agent::OptionSpec> Table() {
  std::vector<agent::OptionSpec> t = {
      {"nnodes", OptionKind::kString, "N|MIN:MAX", "1", "nodes"},
      {"node-rank", OptionKind::kInt, "N", "", "rank hint"},
      {"coordinator", OptionKind::kString, "HOST[:PORT]", "", "coordinator"},
      {"advertise-addr", OptionKind::kString, "ADDR", "", "address"},
      {"join-timeout", OptionKind::kDuration, "DURATION", "10m", "join timeout"},
      {"prefix-output", OptionKind::kBool, "", "false", "prefix"},
      {"log-level", OptionKind::kString, "LEVEL", "info", "log level"},
      {"job-id", OptionKind::kString, "ID", "trainlet", "job id"}};
  for (auto& spec : agent::RoundPolicyOptionSpecs()) t.push_back(spec);
  return t;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const std::vector<agent::OptionSpec> table = Table();
  std::vector<std::string> args;
  std::map<std::string, std::string> env;
  for (std::string& line : trainlet::fuzz::SplitLines(trainlet::fuzz::AsText(data, size))) {
    size_t eq = line.find('=');
    if (absl::StartsWith(line, "E:") && eq != std::string::npos) {
      env[line.substr(2, eq - 2)] = line.substr(eq + 1);
    } else {
      args.push_back(std::move(line));
    }
  }
  auto parsed = agent::ParseOptions(table, args, env, "fuzz [OPTIONS] -- COMMAND");
  if (!parsed.ok() || parsed->help_requested) return 0;
  FUZZ_CHECK(parsed->saw_separator || parsed->command.empty(), "a command without `--`");
  for (const auto& [name, value] : parsed->values) {
    const agent::OptionSpec& spec = agent::FindSpec(table, name);  // aborts if unknown
    FUZZ_CHECK(value.origin == "--" + name || value.origin == agent::EnvNameFor(name),
               value.origin);
    if (spec.kind == OptionKind::kInt) (void)agent::ParseIntValue(value, -1, 100000);
    if (spec.kind == OptionKind::kDuration) (void)agent::ParseDurationValue(value);
    if (spec.kind == OptionKind::kBool) (void)agent::ParseBoolValue(value);
  }
  if (const agent::OptionValue* v = parsed->Find("coordinator")) {
    (void)agent::ParseHostPortValue(*v, 29400);
  }
  if (const agent::OptionValue* v = parsed->Find("advertise-addr")) (void)agent::ParseHostValue(*v);
  if (const agent::OptionValue* v = parsed->Find("log-level")) (void)agent::ParseLogLevelValue(*v);
  if (const agent::OptionValue* v = parsed->Find("job-id")) (void)agent::ValidateJobId(*v);
  auto nnodes = agent::ParseNnodesValue(agent::ValueOrDefault(*parsed, table, "nnodes"));
  if (nnodes.ok()) {
    auto policy = agent::ParseRoundPolicy(*parsed, table, *nnodes, std::nullopt);
    if (policy.ok()) {
      FUZZ_CHECK(policy->max_restarts >= 0, "negative max restarts");
      FUZZ_CHECK(policy->heartbeat_timeout > absl::ZeroDuration(), "heartbeat timeout <= 0");
    }
  }
  return 0;
}
