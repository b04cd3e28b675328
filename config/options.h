// A small table-driven parser for the command line and TRAINLET_* environment
// of every trainlet subcommand, and the value parsers they share.
//
// Each subcommand describes its options once (name, kind, default, help) in an
// OptionSpec table; the same table drives parsing, the environment variable
// names (TRAINLET_<NAME>, upper case, '-' -> '_') and the --help text.
// ParseOptions() only checks the shape of the command line (known flag,
// value present, `--` separator); typed parsing happens afterwards through the
// Parse*Value() helpers, which name the input the value came from (flag, env
// var or Kubernetes variable) in their error messages:
//
//   --nnodes: expected N or MIN:MAX with 1 <= MIN <= MAX <= 100000, got "3:2"
//
// Precedence, applied by the subcommand config layers: flag > TRAINLET_* env
// > Kubernetes discovery > default. Empty environment values count as unset.
//
// Pure functions over plain types; thread-compatible; no I/O except
// ReadTokenFile().
#ifndef TRAINLET_CONFIG_OPTIONS_H_
#define TRAINLET_CONFIG_OPTIONS_H_

#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/logging.h"
#include "rendezvous/tls_files.h"
#include "trainlet/v1/rendezvous.pb.h"

namespace trainlet::agent {

enum class OptionKind { kString, kInt, kDuration, kBool };

struct OptionSpec {
  std::string name;  // "nproc-per-node"; the flag is --nproc-per-node.
  OptionKind kind = OptionKind::kString;
  std::string value_name;    // shown in help: "N|auto|gpu|cpu"; empty for bools.
  std::string default_text;  // shown in help; empty: "none".
  std::string help;          // one line.
  // Parsed (flag and env) but left out of --help: an option a command
  // shares with `run` for its config layer but that means nothing there.
  bool hidden = false;
  // Only a flag, no TRAINLET_* variable: for generic names (`trainlet probe
  // --format`) whose variable would mean nothing on its own.
  bool flag_only = false;
  // Other spellings of the flag (torchrun's: "rdzv-endpoint" for
  // "coordinator"); a value given so names the alias as its origin
  // ("--rdzv-endpoint") in errors. Flags only, no variables.
  std::vector<std::string> aliases = {};
};

// The options every host of a coordinator shares (`run` and `coordinator`):
// restart policy and round timeouts. Appended to both option tables; their
// help says nothing of Kubernetes (`run` adds its discovery sources).
std::vector<OptionSpec> RoundPolicyOptionSpecs();

// A flag of another launcher (torchrun) that trainlet does not take, and
// what to do instead; ParseOptions() answers it with that hint rather than
// "unknown flag".
struct ForeignFlag {
  std::string name;  // with dashes, without the leading ones: "rdzv-endpoint", "m".
  std::string hint;  // "use --coordinator=HOST:PORT (...)".
};

// Where a value came from; later entries win.
enum class ValueSource { kDefault, kDiscovery, kEnv, kFlag };

struct OptionValue {
  std::string text;
  // The input to name in errors: "--nnodes", "TRAINLET_NNODES", "PET_NNODES",
  // "default".
  std::string origin;
  ValueSource source = ValueSource::kDefault;
};

struct ParsedOptions {
  bool help_requested = false;
  // Options set by a flag or a non-empty TRAINLET_* variable, by option name.
  std::map<std::string, OptionValue> values;
  bool saw_separator = false;        // a `--` was present.
  std::vector<std::string> command;  // everything after `--`.
  // The words before `--` that are no flag's, in order, for a command that
  // takes them (`trainlet status JOB`); see ParseOptions' `takes_words`.
  std::vector<std::string> words;

  // The flag or env value of `name`, or nullptr when neither is set.
  const OptionValue* Find(absl::string_view name) const;
};

// "nproc-per-node" -> "TRAINLET_NPROC_PER_NODE".
std::string EnvNameFor(absl::string_view option_name);

// Parses `args` (the words after the subcommand) against `table`, then fills
// in TRAINLET_* values from `env` for options no flag set. Accepts
// --name=value, --name value, bare --flag and --flag=true|false for bools,
// --name_with_underscores as an alias of --name-with-dashes, and -h/--help
// (which sets help_requested and skips all other checks). Errors
// (InvalidArgument): a `foreign` flag (with its hint), unknown flag (with the
// closest known name when it is within edit distance 2), missing value,
// value on a bool flag that is not a boolean, a positional word before `--`
// (with a hint to put the command after `--`) unless `takes_words`, when
// such words go to ParsedOptions::words for the command to check. `usage`
// is the one-line synopsis quoted in errors, e.g.
// "trainlet run [OPTIONS] -- COMMAND [ARGS...]".
absl::StatusOr<ParsedOptions> ParseOptions(const std::vector<OptionSpec>& table,
                                           const std::vector<std::string>& args,
                                           const std::map<std::string, std::string>& env,
                                           absl::string_view usage,
                                           const std::vector<ForeignFlag>& foreign = {},
                                           bool takes_words = false);

// The help text for `table`: usage line, description paragraph, then one
// entry per option with its env var and default, then the precedence rule
// (which names Kubernetes discovery only when the subcommand does it). A
// table whose options are all flag_only reads no TRAINLET_* variable: its
// help names neither --strict-env nor the precedence.
std::string HelpText(absl::string_view usage, absl::string_view description,
                     const std::vector<OptionSpec>& table, bool kubernetes_discovery);

// The spec named `name`; the table must contain it (programmer error).
const OptionSpec& FindSpec(const std::vector<OptionSpec>& table, absl::string_view name);

// The flag or env value of `name`, else an OptionValue holding the table's
// default text with origin "default".
OptionValue ValueOrDefault(const ParsedOptions& parsed, const std::vector<OptionSpec>& table,
                           absl::string_view name);

// Edit (Levenshtein) distance, for "did you mean" hints.
int EditDistance(absl::string_view a, absl::string_view b);

// The candidate closest to `word` by edit distance, when it is within 2
// edits (or equal once case and '_'/'-' are ignored); "" otherwise.
std::string ClosestName(absl::string_view word, const std::vector<std::string>& candidates);

// ---- Strict environment (docs/configuration.md, "Unknown variables").

// The variable that turns unknown TRAINLET_* variables into an error, and
// the flag every command that reads TRAINLET_* variables takes for it.
inline constexpr char kStrictEnvVariable[] = "TRAINLET_STRICT_ENV";
inline constexpr char kStrictEnvFlag[] = "--strict-env";

// Removes --strict-env / --strict_env (bare, or =true|false, ...) from the
// words before `--` in `args` and returns whether unknown variables are an
// error: the flag's value, else TRAINLET_STRICT_ENV's (empty: unset), else
// false. InvalidArgument (exit 64) for a value that is not a boolean,
// naming the flag or the variable.
absl::StatusOr<bool> TakeStrictEnvOption(std::vector<std::string>* args,
                                         const std::map<std::string, std::string>& env);

// One sentence per TRAINLET_* variable of `env` that is not in `known`
// (names compared exactly; a name that is known once upper-cased says so),
// with the closest known name as a did-you-mean, in name order. At most
// `max_named` variables are named; one more sentence counts the rest.
// Names are escaped and bounded; values are never shown (a token may hide
// in a misspelt variable).
std::vector<std::string> UnknownTrainletVariables(const std::map<std::string, std::string>& env,
                                                  const std::vector<std::string>& known,
                                                  size_t max_named = 10);

// ---- Typed value parsers. Each error is InvalidArgument and reads
// `<origin>: expected <what>, got "<text>"`.

// A decimal integer in [min, max].
absl::StatusOr<int> ParseIntValue(const OptionValue& v, int min, int max);
// "30s", "500ms", "2m", "1h30m" (absl forms) or plain seconds ("30", "1.5");
// finite and >= min.
absl::StatusOr<absl::Duration> ParseDurationValue(const OptionValue& v,
                                                  absl::Duration min = absl::ZeroDuration());
// true/false, 1/0, yes/no (case-insensitive).
// Parses several duration options at once: for each, the value given (or
// the table default), checked against its minimum, stored in *out.
struct DurationOption {
  const char* name;
  absl::Duration min;
  absl::Duration* out;
};
absl::Status ParseDurationOptions(const ParsedOptions& parsed, const std::vector<OptionSpec>& table,
                                  const std::vector<DurationOption>& options);

absl::StatusOr<bool> ParseBoolValue(const OptionValue& v);

// debug|info|warning|error.
absl::StatusOr<LogLevel> ParseLogLevelValue(const OptionValue& v);

// How a worker sees its GPU (--gpu-binding; agent/gpu_placement.h).
enum class GpuBinding { kList, kSingle, kNone };

// "list", "single", "none" (case-insensitive); an error naming `origin` otherwise.
absl::StatusOr<GpuBinding> ParseGpuBinding(absl::string_view text, absl::string_view origin);

// The coordinator's port: `coordinator --port`'s default, and `run
// --coordinator`'s when the address has none.
inline constexpr int kDefaultCoordinatorPort = 29400;

// Number of nodes: N, or MIN:MAX for an elastic job.
inline constexpr int kMaxNodes = 100000;
struct NnodesRange {
  int min = 1;
  int max = 1;
  bool elastic() const { return min != max; }
};
// "N" or "MIN:MAX" with 1 <= MIN <= MAX <= kMaxNodes.
absl::StatusOr<NnodesRange> ParseNnodesValue(const OptionValue& v);
std::string NnodesToString(const NnodesRange& n);  // "4" or "2:4".

// The round policy every host of a coordinator applies (the options of
// RoundPolicyOptionSpecs()), parsed in one place for `run` and `coordinator`.
// No defaults here: ParseRoundPolicy() takes them from the option table.
// --preflight's value ("off", "warn", "exclude", "fail").
absl::string_view PreflightPolicyName(v1::PreflightPolicy policy);
// --slow-nodes' value ("off", "warn", "exclude").
absl::string_view SlowNodePolicyName(v1::SlowNodePolicy policy);

struct RoundPolicy {
  int max_restarts = 0;              // --max-restarts; kElasticMaxRestarts when elastic.
  absl::Duration last_call;          // --last-call
  absl::Duration heartbeat_timeout;  // --heartbeat-timeout
  absl::Duration min_nodes_timeout;  // --min-nodes-timeout
  // --release-streams-from (rendezvous::CoordinatorOptions; 0: never).
  int release_streams_from = 0;
  v1::PreflightPolicy preflight = v1::PREFLIGHT_WARN;  // --preflight
  absl::Duration quarantine;                           // --quarantine
  absl::Duration preflight_interval;                   // --preflight-interval
  double preflight_min_bandwidth = 0;  // --preflight-min-bandwidth, bytes/s; 0: none
  v1::SlowNodePolicy slow_nodes = v1::SLOW_NODES_WARN;  // --slow-nodes
  double slow_node_threshold = 0.10;  // --slow-node-threshold, a fraction (10% = 0.10)
  absl::Duration slow_node_window;    // --slow-node-window
};
// --max-restarts when --nnodes is MIN:MAX and nothing says otherwise.
inline constexpr int kElasticMaxRestarts = 3;
// Parses the RoundPolicyOptionSpecs() values from `parsed` (flag or env),
// falling back to `discovered_max_restarts` (Kubernetes) and then the
// defaults; max_restarts defaults to 3 for an elastic `nnodes`.
absl::StatusOr<RoundPolicy> ParseRoundPolicy(
    const ParsedOptions& parsed, const std::vector<OptionSpec>& table, const NnodesRange& nnodes,
    const std::optional<OptionValue>& discovered_max_restarts);

// [A-Za-z0-9._-]{1,128}.
absl::Status ValidateJobId(const OptionValue& v);

// A host name or address as trainlet::IsValidHost() accepts it
// (common/host_names.h). Brackets around an IPv6 address are removed; a
// HOST:PORT is refused with "without a port".
absl::StatusOr<std::string> ParseHostValue(const OptionValue& v);

// An IP address literal (IPv4, or IPv6 with or without brackets), for a
// listening address: "0.0.0.0", "::", "127.0.0.1".
absl::StatusOr<std::string> ParseIpAddressValue(const OptionValue& v);

struct HostPort {
  std::string host;  // without brackets: "::1", "10.0.0.1", "job-node-0-0.job".
  int port = 0;
};
// HOST[:PORT], IPv6 as [ADDR] or [ADDR]:PORT; `default_port` when no port is
// given; port in 1..65535; HOST as trainlet::IsValidHost() accepts it (an
// IPv6 literal only inside brackets). A bare IPv6 address without brackets
// is rejected (is "::1:29400" a port or not?).
absl::StatusOr<HostPort> ParseHostPortValue(const OptionValue& v, int default_port);
// "host:port", "[v6::addr]:port".
std::string JoinHostPort(absl::string_view host, int port);

// The mutual TLS options: --tls-cert, --tls-key, --tls-ca and --tls-dir (a
// mounted cert-manager Secret holding tls.crt, tls.key and ca.crt), plus
// --tls-server-name when `client` (an agent: the name the coordinator's
// certificate must carry). Appended to the tables of `run`, the MPI
// commands and `coordinator`.
std::vector<OptionSpec> TlsOptionSpecs(bool client);

// The TLS material from the TlsOptionSpecs() values in `parsed`: disabled
// (an empty TlsConfig) when none is set; else each file from its own flag or
// variable, else from --tls-dir, read and checked by
// rendezvous::LoadTlsFiles (its warnings appended to `warnings`).
// FailedPrecondition (exit 78): some but not all of the three files given
// (naming the missing flag and variable), --tls-server-name without them, or
// a file that cannot be read or is not what it should be (naming the input
// and path). InvalidArgument: a --tls-server-name that is not a host name or
// IP address.
// `owner` names the server in the messages ("controller": "the controller's
// --tls-key ..."); empty for the agent.
absl::StatusOr<rendezvous::TlsConfig> ParseTlsOptions(const ParsedOptions& parsed,
                                                      std::vector<std::string>* warnings,
                                                      absl::string_view owner = "");

// Reads a token file: the whole file with trailing whitespace removed.
// FailedPrecondition naming the flag and path when the file cannot be read,
// is empty or only whitespace (which would silently turn authentication
// off), is larger than 4 KiB, or holds a byte gRPC metadata cannot carry
// (outside printable ASCII 0x20-0x7E).
absl::StatusOr<std::string> ReadTokenFile(const OptionValue& path);

// What every command prints for an error in its options or configuration:
// "trainlet COMMAND: MESSAGE\nRun 'trainlet COMMAND --help' for usage.\n".
std::string UsageErrorText(absl::string_view command, const absl::Status& status);

}  // namespace trainlet::agent

#endif  // TRAINLET_CONFIG_OPTIONS_H_
