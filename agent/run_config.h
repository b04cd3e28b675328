// The configuration of `trainlet run [OPTIONS] -- COMMAND [ARGS...]`: one
// agent per node that joins the job's coordinator (hosting it when it is node
// rank 0), starts nproc-per-node workers and supervises them.
//
// ParseRunConfig() turns the words after "run", the process environment and
// the probed SystemInfo into a validated RunConfig. Each value comes from, in
// order: its flag, its TRAINLET_* variable, Kubernetes discovery
// (k8s_discovery.h), its default. With nothing set at all the result is a
// local single-node run, like plain torchrun: nnodes 1, node rank 0, hosting
// the coordinator on 127.0.0.1:29400. docs/configuration.md is the user copy.
//
// Errors: InvalidArgument for a malformed or unknown flag or value (exit 64),
// FailedPrecondition for values that are well-formed but cannot make a job:
// rank hint >= nnodes, unreadable token file, gpu workers without GPUs,
// no hostname for the node id (exit 78; see ExitCodeForConfigError()).
//
// Pure function except for reading the token file; thread-compatible.
#ifndef TRAINLET_AGENT_RUN_CONFIG_H_
#define TRAINLET_AGENT_RUN_CONFIG_H_

#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "agent/options.h"
#include "agent/system_probe.h"
#include "common/logging.h"

namespace trainlet::agent {

enum class NprocKind { kFixed, kAuto, kGpu, kCpu };

inline constexpr int kDefaultCoordinatorPort = 29400;
inline constexpr int kMaxNprocPerNode = 1024;

// Whether this agent runs the job's coordinator.
enum class HostCoordinator {
  kNo,   // join the one at coordinator_host:coordinator_port.
  kYes,  // host it (node rank 0, or a single-node run); fail if the port is taken.
  // Host it if this agent can bind the port, else join the agent that did:
  // a local coordinator address and no node rank (several agents on one
  // host), as torchrun's c10d rendezvous does.
  kIfPortFree,
};

struct RunConfig {
  bool help_requested = false;  // -h/--help: print RunHelpText(), exit 0.
  NnodesRange nnodes;           // --nnodes N | MIN:MAX
  // --nproc-per-node N|auto|gpu|cpu, resolved to nproc_per_node with
  // SystemInfo: auto = GPUs if any, else CPUs; gpu = GPUs (error if none);
  // cpu = CPUs; N in 1..1024.
  NprocKind nproc_kind = NprocKind::kAuto;
  int nproc_per_node = 1;
  int node_rank_hint = -1;       // --node-rank; -1 = none (the coordinator picks).
  std::string coordinator_host;  // --coordinator HOST[:PORT]; unbracketed IPv6.
  // 0: any free port (a single-node run with nothing configured); the agent
  // hosting the coordinator then dials the port it bound.
  int coordinator_port = kDefaultCoordinatorPort;
  HostCoordinator host_coordinator = HostCoordinator::kNo;  // --host-coordinator
  // Where the coordinator and health servers listen: 127.0.0.1 for a
  // single-node run, else 0.0.0.0 (--bind-addr overrides). Unbracketed IPv6.
  std::string bind_addr = "0.0.0.0";
  std::string job_id;       // --job-id
  std::string token_file;   // --token-file; empty = no authentication.
  std::string token;        // its content minus trailing whitespace.
  int master_port = 29500;  // --master-port; 0: a free port picked at start.
  absl::Duration grace_period = absl::Seconds(30);  // --grace-period
  absl::Duration join_timeout = absl::Minutes(10);  // --join-timeout
  std::string node_id;                              // --node-id, default hostname.
  // --advertise-addr, or the default: the address every peer can reach this
  // node at (MASTER_ADDR when it is node rank 0). Empty: the address the
  // coordinator sees the join come from.
  std::string advertise_addr;
  int health_port = 29401;               // --health-port; 0 = no health server.
  bool prefix_output = false;            // --prefix-output
  LogLevel log_level = LogLevel::kInfo;  // --log-level
  RoundPolicy policy;  // --max-restarts, --last-call, --heartbeat-timeout, --min-nodes-timeout
  std::vector<std::string> command;  // after `--`; never empty unless help.
  // "node rank 2 from JOB_COMPLETION_INDEX", ... one per value that did not
  // come from a flag or TRAINLET_* variable, for a startup log line.
  std::vector<std::string> discovery_notes;
  // Configuration the agent should warn about once at start (a multi-node
  // job without a token, ...).
  std::vector<std::string> warnings;
};

// `args` are the words after "run"; `env` the agent's environment.
absl::StatusOr<RunConfig> ParseRunConfig(const std::vector<std::string>& args,
                                         const std::map<std::string, std::string>& env,
                                         const SystemInfo& sys);

// The option table of `trainlet run` (drives parsing, env names and help).
const std::vector<OptionSpec>& RunOptionTable();
std::string RunHelpText();

}  // namespace trainlet::agent

#endif  // TRAINLET_AGENT_RUN_CONFIG_H_
