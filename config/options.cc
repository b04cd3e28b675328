#include "config/options.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/exit_codes.h"
#include "common/host_names.h"
#include "rendezvous/token.h"

namespace trainlet::agent {
namespace {

absl::Status Expected(const OptionValue& v, absl::string_view what) {
  return absl::InvalidArgumentError(
      absl::StrFormat("%s: expected %s, got \"%s\"", v.origin, what, absl::CEscape(v.text)));
}

const OptionSpec* LookupSpec(const std::vector<OptionSpec>& table, absl::string_view name) {
  for (const OptionSpec& spec : table) {
    if (spec.name == name) return &spec;
  }
  return nullptr;
}

// The spec whose name or alias is `name`; *as_alias tells which.
const OptionSpec* LookupFlag(const std::vector<OptionSpec>& table, absl::string_view name,
                             bool* as_alias) {
  *as_alias = false;
  if (const OptionSpec* spec = LookupSpec(table, name)) return spec;
  for (const OptionSpec& spec : table) {
    if (std::find(spec.aliases.begin(), spec.aliases.end(), name) != spec.aliases.end()) {
      *as_alias = true;
      return &spec;
    }
  }
  return nullptr;
}

// Whether a command with this table reads TRAINLET_* variables (and so
// takes --strict-env).
bool ReadsEnvironment(const std::vector<OptionSpec>& table) {
  return std::any_of(table.begin(), table.end(),
                     [](const OptionSpec& spec) { return !spec.flag_only; });
}

std::string UnknownFlagError(const std::vector<OptionSpec>& table, absl::string_view name,
                             absl::string_view usage) {
  std::vector<std::string> names;
  for (const OptionSpec& spec : table) names.push_back(spec.name);
  if (ReadsEnvironment(table)) names.push_back(std::string(kStrictEnvFlag).substr(2));
  const std::string best = ClosestName(name, names);
  std::string hint = best.empty() ? "" : absl::StrCat(" (did you mean --", best, "?)");
  return absl::StrCat("unknown flag --", name, hint, "; usage: ", usage, " (see --help)");
}

// "prefix-output" and "PREFIX_OUTPUT" compare equal.
std::string Folded(absl::string_view name) {
  std::string out;
  for (char c : name) {
    if (c == '_' || c == '-') continue;
    out.push_back(absl::ascii_tolower(static_cast<unsigned char>(c)));
  }
  return out;
}

const ForeignFlag* LookupForeign(const std::vector<ForeignFlag>& foreign, absl::string_view name) {
  for (const ForeignFlag& f : foreign) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

absl::Status ForeignFlagError(absl::string_view as_typed, const ForeignFlag& f) {
  return absl::InvalidArgumentError(
      absl::StrCat(as_typed, " is a torchrun flag; ", f.hint, " (see --help)"));
}

// "--rdzv_endpoint=h:1" -> "rdzv-endpoint".
std::string NormalizedName(absl::string_view word) {
  word = word.substr(0, word.find('='));
  return absl::StrReplaceAll(word, {{"_", "-"}});
}

// The known variable `name` (an unknown TRAINLET_* one) was likely meant
// for, or "": within ClosestName's two edits, and fewer than half the bytes
// after the prefix (TRAINLET_JOB is not TRAINLET_DB, TRAINLET_X nothing). A
// name longer than kMaxNearName is near no known one, and never compared
// edit by edit (16 names of 120 KiB took 3.3 s).
std::string NearVariable(const std::string& name, const std::vector<std::string>& known) {
  constexpr size_t kMaxNearName = 128;
  constexpr size_t kPrefix = 9;  // "TRAINLET_"
  if (name.size() > kMaxNearName) return "";
  const std::string best = ClosestName(name, known);
  if (best.empty() || Folded(best) == Folded(name)) return best;
  const size_t suffix = name.size() > kPrefix ? name.size() - kPrefix : 0;
  return 2 * static_cast<size_t>(EditDistance(name, best)) < suffix ? best : "";
}

std::string PositionalError(absl::string_view arg, absl::string_view usage) {
  std::string shown = absl::CEscape(arg.substr(0, 128));
  if (!absl::StrContains(usage, " -- ")) {
    return absl::StrCat("unexpected argument \"", shown, "\"; usage: ", usage);
  }
  // `trainlet run train.py`, as one would write `torchrun train.py`.
  std::string example = absl::EndsWith(arg, ".py") ? absl::StrCat("-- python ", shown)
                                                   : absl::StrCat("-- ", shown, " ...");
  return absl::StrCat("unexpected argument \"", shown,
                      "\": put the command and its arguments after --, as in `", example,
                      "` (trainlet runs COMMAND as given); usage: ", usage);
}

// Whether `host` (brackets removed) is a host trainlet accepts; IPv6
// literals only where they were bracketed or cannot be mistaken for a port.
bool IsHostText(absl::string_view host, bool bracketed) {
  if (bracketed) return IsIpLiteral(host) && absl::StrContains(host, ":");
  return IsValidHost(host);
}

}  // namespace

const OptionValue* ParsedOptions::Find(absl::string_view name) const {
  auto it = values.find(std::string(name));
  return it == values.end() ? nullptr : &it->second;
}

std::string EnvNameFor(absl::string_view option_name) {
  return absl::StrCat("TRAINLET_",
                      absl::AsciiStrToUpper(absl::StrReplaceAll(option_name, {{"-", "_"}})));
}

int EditDistance(absl::string_view a, absl::string_view b) {
  std::vector<int> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = static_cast<int>(j);
  for (size_t i = 1; i <= a.size(); ++i) {
    int diagonal = row[0];
    row[0] = static_cast<int>(i);
    for (size_t j = 1; j <= b.size(); ++j) {
      int above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string ClosestName(absl::string_view word, const std::vector<std::string>& candidates) {
  const std::string folded = Folded(word);
  const std::string* best = nullptr;
  int best_distance = 3;
  for (const std::string& c : candidates) {
    const int d = Folded(c) == folded ? 0 : EditDistance(word, c);
    if (d < best_distance) {
      best_distance = d;
      best = &c;
    }
  }
  return best != nullptr ? *best : "";
}

absl::StatusOr<bool> TakeStrictEnvOption(std::vector<std::string>* args,
                                         const std::map<std::string, std::string>& env) {
  std::optional<OptionValue> value;
  if (auto it = env.find(kStrictEnvVariable); it != env.end() && !it->second.empty()) {
    value = OptionValue{it->second, kStrictEnvVariable, ValueSource::kEnv};
  }
  const std::string flag_name = std::string(kStrictEnvFlag).substr(2);
  for (auto it = args->begin(); it != args->end() && *it != "--";) {
    absl::string_view word = *it;
    if (!absl::ConsumePrefix(&word, "--")) {
      ++it;
      continue;
    }
    const size_t eq = word.find('=');
    if (NormalizedName(word) != flag_name) {
      ++it;
      continue;
    }
    value = OptionValue{eq == absl::string_view::npos ? "true" : std::string(word.substr(eq + 1)),
                        kStrictEnvFlag, ValueSource::kFlag};
    it = args->erase(it);  // The last occurrence wins, as for every flag.
  }
  if (!value.has_value()) return false;
  return ParseBoolValue(*value);
}

std::vector<std::string> UnknownTrainletVariables(const std::map<std::string, std::string>& env,
                                                  const std::vector<std::string>& known,
                                                  size_t max_named) {
  std::vector<std::string> out;
  size_t unknown = 0;
  for (const auto& [name, value] : env) {
    if (!absl::StartsWith(absl::AsciiStrToUpper(name.substr(0, 9)), "TRAINLET_")) continue;
    if (std::find(known.begin(), known.end(), name) != known.end()) continue;
    if (++unknown > max_named) continue;
    const std::string upper = absl::AsciiStrToUpper(name);
    std::string hint;
    if (upper != name && std::find(known.begin(), known.end(), upper) != known.end()) {
      hint = absl::StrCat(" (did you mean ", upper, "? variable names are case-sensitive)");
    } else if (std::string best = NearVariable(name, known); !best.empty()) {
      hint = absl::StrCat(" (did you mean ", best, "?)");
    }
    out.push_back(absl::StrCat("unknown environment variable ", SafeForLog(name, 64), hint));
  }
  if (unknown > max_named) {
    out.push_back(absl::StrCat("and ", unknown - max_named,
                               " more unknown TRAINLET_* variable(s) not named here"));
  }
  return out;
}

absl::StatusOr<ParsedOptions> ParseOptions(const std::vector<OptionSpec>& table,
                                           const std::vector<std::string>& args,
                                           const std::map<std::string, std::string>& env,
                                           absl::string_view usage,
                                           const std::vector<ForeignFlag>& foreign,
                                           bool takes_words) {
  ParsedOptions out;
  // Help wins over every other problem, so that `--help` always works.
  for (const std::string& arg : args) {
    if (arg == "--") break;
    if (arg == "--help" || arg == "-h") {
      out.help_requested = true;
      return out;
    }
  }

  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& arg = args[i];
    if (arg == "--") {
      out.saw_separator = true;
      out.command.assign(args.begin() + i + 1, args.end());
      break;
    }
    absl::string_view word = arg;
    if (!absl::ConsumePrefix(&word, "--")) {
      if (absl::StartsWith(arg, "-") && arg.size() > 1) {
        absl::string_view short_flag = absl::string_view(arg).substr(1);
        if (const ForeignFlag* f = LookupForeign(foreign, NormalizedName(short_flag))) {
          return ForeignFlagError(arg.substr(0, arg.find('=')), *f);
        }
        return absl::InvalidArgumentError(absl::StrCat("unknown flag ",
                                                       absl::CEscape(arg.substr(0, 128)),
                                                       "; usage: ", usage, " (see --help)"));
      }
      if (!takes_words) return absl::InvalidArgumentError(PositionalError(arg, usage));
      out.words.push_back(arg);
      continue;
    }
    std::optional<std::string> inline_value;
    std::string name;
    if (size_t eq = word.find('='); eq != absl::string_view::npos) {
      name = std::string(word.substr(0, eq));
      inline_value = std::string(word.substr(eq + 1));
    } else {
      name = std::string(word);
    }
    // torchrun accepts --nproc_per_node as well as --nproc-per-node.
    absl::StrReplaceAll({{"_", "-"}}, &name);
    bool as_alias = false;
    const OptionSpec* spec = LookupFlag(table, name, &as_alias);
    if (spec == nullptr) {
      if (const ForeignFlag* f = LookupForeign(foreign, name)) {
        return ForeignFlagError(arg.substr(0, arg.find('=')), *f);
      }
      return absl::InvalidArgumentError(UnknownFlagError(table, name, usage));
    }

    OptionValue value;
    value.origin = absl::StrCat("--", as_alias ? name : spec->name);
    value.source = ValueSource::kFlag;
    if (spec->kind == OptionKind::kBool) {
      // A bare bool never takes the next word: `--prefix-output python` must
      // not read "python" as its value.
      value.text = inline_value.value_or("true");
      if (absl::StatusOr<bool> b = ParseBoolValue(value); !b.ok()) return b.status();
    } else if (inline_value.has_value()) {
      value.text = *inline_value;
    } else {
      if (i + 1 >= args.size() || args[i + 1] == "--" || absl::StartsWith(args[i + 1], "--")) {
        return absl::InvalidArgumentError(absl::StrCat(
            value.origin, ": expected a value (", spec->value_name, ") after the flag (",
            value.origin, " needs a value: ", value.origin, "=", spec->value_name, ")"));
      }
      value.text = args[++i];
    }
    out.values[spec->name] = std::move(value);  // The last occurrence wins.
  }

  for (const OptionSpec& spec : table) {
    if (out.values.count(spec.name) != 0 || spec.flag_only) continue;
    std::string env_name = EnvNameFor(spec.name);
    auto it = env.find(env_name);
    if (it == env.end() || it->second.empty()) continue;
    OptionValue value{it->second, env_name, ValueSource::kEnv};
    if (spec.kind == OptionKind::kBool) {
      if (absl::StatusOr<bool> b = ParseBoolValue(value); !b.ok()) return b.status();
    }
    out.values[spec.name] = std::move(value);
  }
  return out;
}

std::string HelpText(absl::string_view usage, absl::string_view description,
                     const std::vector<OptionSpec>& table, bool kubernetes_discovery) {
  std::string out = absl::StrCat("Usage: ", usage, "\n\n", description, "\n\nOptions:\n");
  for (const OptionSpec& spec : table) {
    if (spec.hidden) continue;
    std::string flag = absl::StrCat("--", spec.name);
    if (spec.kind != OptionKind::kBool) absl::StrAppend(&flag, "=", spec.value_name);
    for (const std::string& alias : spec.aliases) {
      absl::StrAppend(&flag, ", --", alias);
      if (spec.kind != OptionKind::kBool) absl::StrAppend(&flag, "=", spec.value_name);
    }
    absl::StrAppend(&out, "  ", flag, "\n      ", spec.help, "\n      ",
                    spec.flag_only ? "" : absl::StrCat("env ", EnvNameFor(spec.name), ", "),
                    "default: ", spec.default_text.empty() ? "none" : spec.default_text, "\n");
  }
  const bool reads_env = ReadsEnvironment(table);
  if (reads_env) {
    absl::StrAppend(&out, "  ", kStrictEnvFlag,
                    "\n      An unknown TRAINLET_* variable (a typo such as TRAINLET_HANG_TIMOUT) "
                    "is an error (exit 64) instead of a warning.\n      env ",
                    kStrictEnvVariable, ", default: false\n");
  }
  absl::StrAppend(&out, "  -h, --help\n      Print this help and exit.\n");
  if (reads_env) {
    absl::StrAppend(&out, "\n",
                    kubernetes_discovery
                        ? "Precedence: flag > TRAINLET_* environment variable > Kubernetes "
                          "discovery > default.\n"
                        : "Precedence: flag > TRAINLET_* environment variable > default.\n");
  }
  if (std::any_of(table.begin(), table.end(),
                  [](const OptionSpec& spec) { return spec.kind == OptionKind::kDuration; })) {
    absl::StrAppend(&out, reads_env ? "" : "\n",
                    "Durations accept 30s, 500ms, 2m, 1h30m or plain seconds.\n");
  }
  return out;
}

const OptionSpec& FindSpec(const std::vector<OptionSpec>& table, absl::string_view name) {
  const OptionSpec* spec = LookupSpec(table, name);
  if (spec == nullptr) {
    std::fprintf(stderr, "trainlet: internal error: no option named %s\n",
                 std::string(name).c_str());
    std::abort();
  }
  return *spec;
}

OptionValue ValueOrDefault(const ParsedOptions& parsed, const std::vector<OptionSpec>& table,
                           absl::string_view name) {
  if (const OptionValue* v = parsed.Find(name)) return *v;
  return OptionValue{FindSpec(table, name).default_text, "default", ValueSource::kDefault};
}

absl::StatusOr<int> ParseIntValue(const OptionValue& v, int min, int max) {
  int n = 0;
  absl::string_view text = absl::StripAsciiWhitespace(v.text);
  bool digits_only = !text.empty() && std::all_of(text.begin(), text.end(), [](char c) {
    return absl::ascii_isdigit(static_cast<unsigned char>(c)) || c == '-' || c == '+';
  });
  if (!digits_only || !absl::SimpleAtoi(text, &n) || n < min || n > max) {
    return Expected(v, absl::StrFormat("an integer in %d..%d", min, max));
  }
  return n;
}

absl::StatusOr<absl::Duration> ParseDurationValue(const OptionValue& v, absl::Duration min) {
  absl::string_view text = absl::StripAsciiWhitespace(v.text);
  absl::Duration d;
  bool ok = false;
  double seconds = 0;
  if (absl::SimpleAtod(text, &seconds)) {
    ok = std::isfinite(seconds) && text.find_first_not_of("0123456789.+-") == text.npos;
    d = absl::Seconds(seconds);
  } else {
    ok = absl::ParseDuration(text, &d);
  }
  std::string what = absl::StrCat("a duration such as 30s, 500ms, 2m or plain seconds, at least ",
                                  absl::FormatDuration(min));
  if (!ok || d == absl::InfiniteDuration() || d < min) return Expected(v, what);
  return d;
}

std::vector<OptionSpec> RoundPolicyOptionSpecs() {
  return {
      {"max-restarts", OptionKind::kInt, "N",
       absl::StrCat("0, or ", kElasticMaxRestarts, " when --nnodes is MIN:MAX"),
       "Restarts of the whole job (new rounds) before it fails."},
      {"last-call", OptionKind::kDuration, "DURATION", "500ms",
       "How long a round stays open for more nodes once MIN have joined."},
      {"heartbeat-timeout", OptionKind::kDuration, "DURATION", "5s",
       "A node silent for this long is declared dead."},
      {"min-nodes-timeout", OptionKind::kDuration, "DURATION", "5m",
       "Elastic: how long to wait for replacements when fewer than MIN nodes survive."},
      // 2000: a round this large holds about 400 MB of gRPC connection state
      // on node 0 with its streams open; below it a killed agent is still
      // found by its stream closing and a probe over UDP (docs/protocol.md,
      // "Stream loss").
      {"release-streams-from", OptionKind::kInt, "N", "2000",
       "Rounds of N or more nodes run without a gRPC stream per node once its UDP liveness is "
       "acknowledged (node 0 keeps ~40 KiB less per node; a killed agent is then found at the "
       "heartbeat timeout); 0: never. Off with TLS."},
      {"preflight", OptionKind::kString, "off|warn|exclude|fail", "warn",
       "Check every node before each round (GPU health, /dev/shm, memlock, DNS, "
       "--preflight-path, clock, and the network between pods): warn = log bad nodes, never "
       "delaying a round; exclude = an "
       "elastic round closes without them while MIN good nodes remain (they are re-checked "
       "every --quarantine); fail = the job fails with exit 82 naming the node and the check "
       "(docs/preflight.md)."},
      {"quarantine", OptionKind::kDuration, "DURATION", "5m",
       "--preflight=exclude: how long an excluded node waits before it is checked again and "
       "re-joins."},
      {"preflight-interval", OptionKind::kDuration, "DURATION", "10m",
       "--preflight=exclude|fail: a restart round re-checks a node only when its last check "
       "is older than this, or the node failed since."},
      {"preflight-min-bandwidth", OptionKind::kInt, "MB/s", "0 (none)",
       "--preflight's network measurement: a link between two pods under this many megabytes "
       "a second is bad (besides any link under a quarter of the job's median); a node at "
       "the common end of bad links is the one named."},
      {"slow-nodes", OptionKind::kString, "off|warn|exclude", "warn",
       "Name a node whose workers the others wait for (CPU starved or throttled, a slow "
       "network, slow steps), sampled with no code in the training script: warn = log it on "
       "every node, the controller's page, /metrics and `trainlet status`; exclude = an "
       "elastic round restarts without it while MIN nodes remain (it waits --quarantine) "
       "(docs/slow-nodes.md)."},
      {"slow-node-threshold", OptionKind::kString, "PERCENT", "10%",
       "--slow-nodes: how much slower a node must make the job, beyond the job's own noise, "
       "to be named (1% to 1000%)."},
      {"slow-node-window", OptionKind::kDuration, "DURATION", "30s",
       "--slow-nodes: the window a node must be slow through to be named (10s to 30m); "
       "agents send their signals a third of it apart."},
      {"log-level", OptionKind::kString, "LEVEL", "info", "debug, info, warning or error."},
  };
}

absl::string_view PreflightPolicyName(v1::PreflightPolicy policy) {
  switch (policy) {
    case v1::PREFLIGHT_OFF:
      return "off";
    case v1::PREFLIGHT_EXCLUDE:
      return "exclude";
    case v1::PREFLIGHT_FAIL:
      return "fail";
    default:
      return "warn";
  }
}

absl::string_view SlowNodePolicyName(v1::SlowNodePolicy policy) {
  switch (policy) {
    case v1::SLOW_NODES_OFF:
      return "off";
    case v1::SLOW_NODES_EXCLUDE:
      return "exclude";
    default:
      return "warn";
  }
}

absl::StatusOr<RoundPolicy> ParseRoundPolicy(
    const ParsedOptions& parsed, const std::vector<OptionSpec>& table, const NnodesRange& nnodes,
    const std::optional<OptionValue>& discovered_max_restarts) {
  RoundPolicy p;
  std::optional<OptionValue> restarts_value = discovered_max_restarts;
  if (const OptionValue* v = parsed.Find("max-restarts")) restarts_value = *v;
  if (restarts_value.has_value()) {
    absl::StatusOr<int> restarts = ParseIntValue(*restarts_value, 0, 1000000);
    if (!restarts.ok()) return restarts.status();
    p.max_restarts = *restarts;
  } else {
    p.max_restarts = nnodes.elastic() ? kElasticMaxRestarts : 0;
  }
  absl::StatusOr<int> release =
      ParseIntValue(ValueOrDefault(parsed, table, "release-streams-from"), 0, kMaxNodes);
  if (!release.ok()) return release.status();
  p.release_streams_from = *release;
  if (absl::Status s = ParseDurationOptions(
          parsed, table,
          {
              {"last-call", absl::ZeroDuration(), &p.last_call},
              {"heartbeat-timeout", absl::Milliseconds(1), &p.heartbeat_timeout},
              {"min-nodes-timeout", absl::ZeroDuration(), &p.min_nodes_timeout},
              {"quarantine", absl::Seconds(1), &p.quarantine},
              {"preflight-interval", absl::ZeroDuration(), &p.preflight_interval},
              {"slow-node-window", absl::Seconds(10), &p.slow_node_window},
          });
      !s.ok()) {
    return s;
  }
  if (const OptionValue* v = parsed.Find("preflight-min-bandwidth")) {
    absl::StatusOr<int> mbps = ParseIntValue(*v, 0, 10000000);
    if (!mbps.ok()) return mbps.status();
    p.preflight_min_bandwidth = *mbps * 1e6;
  }
  const OptionValue mode = ValueOrDefault(parsed, table, "preflight");
  const std::string text = absl::AsciiStrToLower(absl::StripAsciiWhitespace(mode.text));
  if (text == "off") {
    p.preflight = v1::PREFLIGHT_OFF;
  } else if (text == "warn") {
    p.preflight = v1::PREFLIGHT_WARN;
  } else if (text == "exclude") {
    p.preflight = v1::PREFLIGHT_EXCLUDE;
  } else if (text == "fail") {
    p.preflight = v1::PREFLIGHT_FAIL;
  } else {
    return Expected(mode, "off, warn, exclude or fail");
  }
  const OptionValue slow = ValueOrDefault(parsed, table, "slow-nodes");
  const std::string slow_text = absl::AsciiStrToLower(absl::StripAsciiWhitespace(slow.text));
  if (slow_text == "off") {
    p.slow_nodes = v1::SLOW_NODES_OFF;
  } else if (slow_text == "warn") {
    p.slow_nodes = v1::SLOW_NODES_WARN;
  } else if (slow_text == "exclude") {
    p.slow_nodes = v1::SLOW_NODES_EXCLUDE;
  } else {
    return Expected(slow, "off, warn or exclude");
  }
  // At most 30m: a summary covers at most 10 minutes (kMaxSlowIntervalMs),
  // a third of the window.
  if (p.slow_node_window > absl::Minutes(30)) {
    return Expected(ValueOrDefault(parsed, table, "slow-node-window"),
                    "a duration from 10s to 30m");
  }
  const OptionValue threshold = ValueOrDefault(parsed, table, "slow-node-threshold");
  absl::string_view t = absl::StripAsciiWhitespace(threshold.text);
  absl::ConsumeSuffix(&t, "%");
  int percent = 0;
  if (!absl::SimpleAtoi(t, &percent) || percent < 1 || percent > 1000) {
    return Expected(threshold, "a percentage from 1% to 1000%, such as 10%");
  }
  p.slow_node_threshold = percent / 100.0;
  return p;
}

absl::Status ParseDurationOptions(const ParsedOptions& parsed, const std::vector<OptionSpec>& table,
                                  const std::vector<DurationOption>& options) {
  for (const DurationOption& d : options) {
    absl::StatusOr<absl::Duration> value =
        ParseDurationValue(ValueOrDefault(parsed, table, d.name), d.min);
    if (!value.ok()) return value.status();
    *d.out = *value;
  }
  return absl::OkStatus();
}

absl::StatusOr<bool> ParseBoolValue(const OptionValue& v) {
  std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(v.text));
  if (t == "true" || t == "1" || t == "yes") return true;
  if (t == "false" || t == "0" || t == "no") return false;
  return Expected(v, "true or false");
}

absl::StatusOr<LogLevel> ParseLogLevelValue(const OptionValue& v) {
  LogLevel level;
  if (!ParseLogLevel(absl::AsciiStrToLower(absl::StripAsciiWhitespace(v.text)), &level)) {
    return Expected(v, "debug, info, warning or error");
  }
  return level;
}

absl::StatusOr<GpuBinding> ParseGpuBinding(absl::string_view text, absl::string_view origin) {
  std::string t = absl::AsciiStrToLower(absl::StripAsciiWhitespace(text));
  if (t == "list") return GpuBinding::kList;
  if (t == "single") return GpuBinding::kSingle;
  if (t == "none") return GpuBinding::kNone;
  return absl::InvalidArgumentError(absl::StrCat(origin, ": expected list, single or none, got '",
                                                 std::string(text.substr(0, 32)), "'"));
}

absl::StatusOr<NnodesRange> ParseNnodesValue(const OptionValue& v) {
  std::string what = absl::StrFormat("N or MIN:MAX with 1 <= MIN <= MAX <= %d", kMaxNodes);
  std::vector<absl::string_view> parts = absl::StrSplit(v.text, ':');
  if (parts.size() > 2) return Expected(v, what);
  auto parse_one = [](absl::string_view s, int* out) {
    s = absl::StripAsciiWhitespace(s);
    return !s.empty() &&
           std::all_of(s.begin(), s.end(), [](char c) { return c >= '0' && c <= '9'; }) &&
           absl::SimpleAtoi(s, out);
  };
  NnodesRange r;
  if (!parse_one(parts[0], &r.min)) return Expected(v, what);
  r.max = r.min;
  if (parts.size() == 2 && !parse_one(parts[1], &r.max)) return Expected(v, what);
  if (r.min < 1 || r.min > r.max || r.max > kMaxNodes) return Expected(v, what);
  return r;
}

std::string NnodesToString(const NnodesRange& n) {
  return n.elastic() ? absl::StrCat(n.min, ":", n.max) : absl::StrCat(n.min);
}

absl::Status ValidateJobId(const OptionValue& v) {
  bool ok = !v.text.empty() && v.text.size() <= 128 &&
            std::all_of(v.text.begin(), v.text.end(), [](char c) {
              return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' ||
                     c == '-';
            });
  if (!ok) return Expected(v, "1 to 128 characters from [A-Za-z0-9._-]");
  return absl::OkStatus();
}

absl::StatusOr<std::string> ParseHostValue(const OptionValue& v) {
  absl::string_view host = v.text;
  bool bracketed = absl::StartsWith(host, "[") && absl::EndsWith(host, "]");
  if (bracketed) host = host.substr(1, host.size() - 2);
  if (IsHostText(host, bracketed)) return std::string(host);
  if (absl::StatusOr<HostPort> hp = ParseHostPortValue(v, 1); hp.ok()) {
    return Expected(v, "a host name or IP address without a port");
  }
  return Expected(v, "a host name or IP address");
}

absl::StatusOr<std::string> ParseIpAddressValue(const OptionValue& v) {
  absl::string_view addr = v.text;
  if (absl::StartsWith(addr, "[") && absl::EndsWith(addr, "]")) {
    addr = addr.substr(1, addr.size() - 2);
  }
  if (!IsIpLiteral(addr)) {
    return Expected(v, "an IP address such as 127.0.0.1, 0.0.0.0 or :: (not a name)");
  }
  return std::string(addr);
}

absl::StatusOr<HostPort> ParseHostPortValue(const OptionValue& v, int default_port) {
  constexpr absl::string_view kWhat = "HOST[:PORT] with PORT in 1..65535 (IPv6 as [::1]:29400)";
  absl::string_view text = v.text;
  absl::string_view host;
  absl::string_view port_text;
  bool has_port = false;
  const bool bracketed = absl::StartsWith(text, "[");
  if (bracketed) {
    size_t close = text.find(']');
    if (close == text.npos) return Expected(v, kWhat);
    host = text.substr(1, close - 1);
    absl::string_view rest = text.substr(close + 1);
    if (!rest.empty()) {
      if (!absl::ConsumePrefix(&rest, ":")) return Expected(v, kWhat);
      port_text = rest;
      has_port = true;
    }
  } else {
    size_t colon = text.find(':');
    if (colon != text.npos && text.find(':', colon + 1) != text.npos) {
      return Expected(v, kWhat);  // Bare IPv6: brackets required.
    }
    host = text.substr(0, colon);
    if (colon != text.npos) {
      port_text = text.substr(colon + 1);
      has_port = true;
    }
  }
  HostPort out;
  out.port = default_port;
  int port = 0;
  if (has_port) {
    if (port_text.empty() || port_text.find_first_not_of("0123456789") != absl::string_view::npos ||
        !absl::SimpleAtoi(port_text, &port) || port < 1 || port > 65535) {
      return Expected(v, kWhat);
    }
    out.port = port;
  }
  if (!IsHostText(host, bracketed)) return Expected(v, kWhat);
  out.host = std::string(host);
  return out;
}

std::string JoinHostPort(absl::string_view host, int port) {
  if (absl::StrContains(host, ":")) return absl::StrCat("[", host, "]:", port);
  return absl::StrCat(host, ":", port);
}

absl::StatusOr<std::string> ReadTokenFile(const OptionValue& path) {
  constexpr size_t kMaxTokenBytes = 4096;
  // Room for trailing whitespace after a token of the largest size.
  absl::StatusOr<std::string> read =
      rendezvous::ReadBoundedFile(path.text, kMaxTokenBytes + 1024, path.origin, "token file");
  if (!read.ok()) return read.status();
  std::string data = *std::move(read);
  absl::StripTrailingAsciiWhitespace(&data);
  if (data.empty()) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: token file %s is empty or only whitespace, which would turn authentication off; "
        "put the job's shared secret in it (the same on every node)",
        path.origin, path.text));
  }
  if (data.size() > kMaxTokenBytes) {
    return absl::FailedPreconditionError(absl::StrFormat(
        "%s: token file %s is larger than %d bytes", path.origin, path.text, kMaxTokenBytes));
  }
  for (size_t i = 0; i < data.size(); ++i) {
    unsigned char c = static_cast<unsigned char>(data[i]);
    if (c < 0x20 || c > 0x7e) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "%s: token file %s has byte 0x%02x at offset %d; a token must be printable ASCII "
          "(gRPC metadata carries 0x20-0x7E only)",
          path.origin, path.text, c, i));
    }
  }
  return data;
}

std::vector<OptionSpec> TlsOptionSpecs(bool client) {
  std::vector<OptionSpec> t = {
      {"tls-cert", OptionKind::kString, "PATH", "",
       "This side's certificate (PEM, leaf first; a cert-manager Secret's tls.crt) for mutual "
       "TLS on the coordinator port; needs --tls-key and --tls-ca. None: plaintext."},
      {"tls-key", OptionKind::kString, "PATH", "",
       "The private key of --tls-cert (PEM, unencrypted; tls.key)."},
      {"tls-ca", OptionKind::kString, "PATH", "",
       "The CA certificate(s) (PEM; ca.crt) a peer's certificate must be signed by."},
      {"tls-dir", OptionKind::kString, "DIR", "",
       "A mounted cert-manager Secret: DIR/tls.crt, DIR/tls.key and DIR/ca.crt, for any of the "
       "three not given by its own option."},
  };
  if (client) {
    t.push_back({"tls-server-name", OptionKind::kString, "NAME",
                 "the coordinator host dialled (on the node that hosts it, its advertised address)",
                 "Name (DNS or IP) the coordinator's certificate must carry as a subject "
                 "alternative name."});
  }
  return t;
}

absl::StatusOr<rendezvous::TlsConfig> ParseTlsOptions(const ParsedOptions& parsed,
                                                      std::vector<std::string>* warnings,
                                                      absl::string_view owner) {
  const OptionValue* dir = parsed.Find("tls-dir");
  const OptionValue* server_name = parsed.Find("tls-server-name");
  struct Part {
    const char* option;
    const char* file;  // in --tls-dir.
    rendezvous::TlsFile* out;
  };
  rendezvous::TlsFiles files;
  files.owner = std::string(owner);
  const Part parts[] = {{"tls-cert", "tls.crt", &files.cert},
                        {"tls-key", "tls.key", &files.key},
                        {"tls-ca", "ca.crt", &files.ca}};
  std::vector<std::string> given, missing;
  for (const Part& p : parts) {
    if (const OptionValue* v = parsed.Find(p.option)) {
      *p.out = {v->text, v->origin};
      given.push_back(v->origin);
    } else if (dir != nullptr) {
      std::string base = dir->text;
      while (base.size() > 1 && base.back() == '/') base.pop_back();
      *p.out = {absl::StrCat(base, "/", p.file), absl::StrCat(dir->origin, "'s ", p.file)};
    } else {
      missing.push_back(absl::StrCat("--", p.option, " (", EnvNameFor(p.option), ")"));
    }
  }
  if (dir == nullptr && given.empty()) {
    if (server_name != nullptr) {
      return absl::FailedPreconditionError(absl::StrCat(
          server_name->origin,
          " is set but TLS is not: give --tls-cert, --tls-key and --tls-ca (or --tls-dir), or "
          "drop it"));
    }
    return rendezvous::TlsConfig{};
  }
  if (!missing.empty()) {
    return absl::FailedPreconditionError(absl::StrCat(
        absl::StrJoin(given, " and "), given.size() == 1 ? " is" : " are", " set but not ",
        absl::StrJoin(missing, " or "),
        ": mutual TLS needs all three files (or --tls-dir=DIR holding tls.crt, tls.key and "
        "ca.crt), none for plaintext"));
  }
  absl::StatusOr<rendezvous::TlsConfig> tls = rendezvous::LoadTlsFiles(files, warnings);
  if (!tls.ok()) return tls.status();
  if (server_name != nullptr) {
    absl::StatusOr<std::string> name = ParseHostValue(*server_name);
    if (!name.ok()) return name.status();
    tls->server_name = *name;
  }
  return tls;
}

std::string UsageErrorText(absl::string_view command, const absl::Status& status) {
  return absl::StrCat("trainlet ", command, ": ", status.message(), "\nRun 'trainlet ", command,
                      " --help' for usage.\n");
}

}  // namespace trainlet::agent
