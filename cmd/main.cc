// trainlet: the in-pod agent for distributed training. A thin main: parse
// the subcommand's options, build the config, run, map to an exit code.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "agent/node_probe.h"
#include "agent/run_agent.h"
#include "agent/run_mpi.h"
#include "cmd/controller_command.h"
#include "cmd/env_check.h"
#include "cmd/health_probe.h"
#include "cmd/install_command.h"
#include "cmd/probe_command.h"
#include "cmd/standalone_coordinator.h"
#include "cmd/status_command.h"
#include "common/code_pages.h"
#include "common/deadlock_detection.h"
#include "common/descriptors.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "config/coordinator_config.h"
#include "config/mpi_config.h"
#include "config/options.h"
#include "config/run_config.h"
#include "config/system_probe.h"
#include "launcher/output_readers.h"
#include "launcher/signals.h"
#include "launcher/termination_log.h"
#include "rendezvous/grpc_log.h"
#include "rendezvous/grpc_memory.h"
#include "rendezvous/protocol_version.h"

extern char** environ;

namespace {

// The commands, in the order --help lists them.
struct Command {
  const char* name;
  const char* synopsis;  // after "trainlet ".
  const char* summary;   // lines of at most 70 columns.
  // Reads TRAINLET_* variables: unknown ones are checked (cmd/env_check.h).
  bool reads_env;
  // A pod's entrypoint: supervises (signals to a signalfd, subreaper) and
  // writes the termination message as it exits (launcher/termination_log.h).
  bool entrypoint;
};

constexpr Command kCommands[] = {
    {"run", "run [options] -- COMMAND [ARGS...]",
     "Join the job's rendezvous and run COMMAND as the local workers, with\n"
     "the environment torchrun, JAX, TensorFlow, XGBoost and Paddle expect.",
     true, true},
    {"mpi-launcher", "mpi-launcher [options] -- COMMAND [ARGS...]",
     "The MPI launcher pod: host the rendezvous, wait until every worker's\n"
     "sshd is really reachable, write hostfiles, run mpirun, deepspeed, ...",
     true, true},
    {"mpi-worker", "mpi-worker [options]",
     "An MPI worker pod: supervise sshd with the job's key, give SSH\n"
     "sessions the pod's environment, exit with the job.",
     true, true},
    {"coordinator", "coordinator [options]",
     "Run the rendezvous coordinator on its own (normally node rank 0's\n"
     "agent hosts it).",
     true, true},
    {"controller", "controller [options]",
     "Run the thin controller agents report health and progress to\n"
     "(--controller=HOST:PORT); keeps each job's history (docs/controller.md).",
     true, true},
    {"status", "status [--controller=HOST:PORT] [--json] [JOB]",
     "Show the jobs the trainlet controller sees (its HTTP port, default\n"
     "127.0.0.1:29680): nodes, workers, progress, restarts, hangs, GPUs.",
     true, false},
    {"health", "health [HOST:]PORT", "Probe an agent's readiness (grpc.health.v1).", false, false},
    {"probe", "probe [options]",
     "Print what this node has (GPUs, NICs, NUMA, /dev/shm, NVML, NCCL) as\n"
     "JSON, an NCCL topology file, or NCCL environment advice.",
     true, false},
    {"install", "install DEST",
     "Copy this binary to DEST (the init-container pattern: an image\n"
     "without a shell puts trainlet into a shared volume).",
     false, false},
    {"version", "version", "Print the version.", false, false},
};

const Command* FindCommand(absl::string_view name) {
  for (const Command& c : kCommands) {
    if (name == c.name) return &c;
  }
  return nullptr;
}

std::string Usage() {
  std::string out = "Usage: trainlet <command> [options]\n\nCommands:\n";
  for (const Command& c : kCommands) {
    absl::StrAppend(&out, "  ", c.synopsis, "\n");
    for (absl::string_view line : absl::StrSplit(c.summary, '\n')) {
      absl::StrAppend(&out, "        ", line, "\n");
    }
  }
  absl::StrAppend(&out,
                  "\nRun 'trainlet <command> --help' for a command's options.\n"
                  "\nExit codes of 'trainlet run' (docs/exit-codes.md):\n",
                  trainlet::FormatExitCodeTable());
  return out;
}

// `trainlet runn`: the command meant, not the whole help.
int UnknownCommand(const std::string& command) {
  std::vector<std::string> names;
  for (const Command& c : kCommands) names.push_back(c.name);
  const std::string best = trainlet::agent::ClosestName(command, names);
  std::cerr << "trainlet: unknown command \"" << trainlet::SafeForLog(command, 64) << "\""
            << (best.empty() ? "" : absl::StrCat(" (did you mean ", best, "?)"))
            << "; commands: " << absl::StrJoin(names, ", ")
            << "\nRun 'trainlet --help' for usage.\n";
  return trainlet::kExitUsage;
}

std::map<std::string, std::string> CurrentEnvironment() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    std::string kv(*e);
    size_t eq = kv.find('=');
    if (eq == std::string::npos) continue;
    env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

// What every agent command probes at start (SystemInfo::probe_node): the
// node probe starts on its own thread when the options first ask for it
// (agent/node_probe.h). Where it reads no GPU driver and this machine's own
// /sys, /proc and /dev, it may also be left unwaited (when_node_probed): a
// single-node run without GPUs starts it once its workers run.
trainlet::agent::SystemInfo ProbeMachine(const std::map<std::string, std::string>& env) {
  const trainlet::topology::ProbeOptions options = trainlet::agent::AgentProbeOptions(env);
  auto probe = std::make_shared<trainlet::agent::LazyNodeProbe>(options);
  trainlet::agent::SystemInfo sys = trainlet::agent::ProbeSystem(env);
  sys.probe_node = [probe](absl::Duration timeout, std::string* note) {
    return trainlet::agent::AwaitNodeProbe(probe->Run(), timeout, note);
  };
  if (!trainlet::agent::ProbeLoadsNvml(options) &&
      trainlet::agent::ProbeReadsThisMachine(options)) {
    sys.when_node_probed = [probe](trainlet::agent::NodeProbeCallback done) {
      trainlet::agent::WhenNodeProbeDone(probe->Run(), std::move(done));
    };
  }
  return sys;
}

// What an entrypoint command leaves for `kubectl describe` as it exits
// (launcher/termination_log.h).
struct ExitMessage {
  std::optional<trainlet::launcher::TerminationLog> log;  // entrypoint commands only.
  std::string node;                                       // this node's id, once known.
  std::string reason;  // a configuration error's; else RunAgent's, else the last ERROR line.
};
ExitMessage* const g_exit = new ExitMessage();

// Writes the termination message (once) and returns `code`.
int Finish(int code) {
  if (!g_exit->log.has_value()) return code;
  std::string reason = g_exit->reason;
  if (reason.empty()) reason = trainlet::launcher::TerminationReason();
  if (reason.empty() && code != trainlet::kExitSuccess) reason = trainlet::LastErrorMessage();
  const absl::Status s =
      g_exit->log->Write(trainlet::launcher::TerminationMessage(code, g_exit->node, reason));
  if (absl::IsAlreadyExists(s)) {
    TLOG(kInfo) << "termination message: " << s.message();
  } else if (!s.ok() && (g_exit->log->explicit_path() || !absl::IsNotFound(s))) {
    TLOG(kWarning) << "termination message not written: " << s.message() << " ("
                   << trainlet::launcher::kTerminationLogVariable << " names the file, none: off)";
  } else if (!s.ok()) {
    TLOG(kDebug) << "termination message not written: " << s.message();
  }
  g_exit->log.reset();
  return code;
}

// A run that prints help or the version exits without a message: it ended
// nothing a pod's status should say.
void NoTerminationMessage() { g_exit->log.reset(); }

// Last thing before any exit: an entrypoint's `tee` reading our output gets
// to finish (launcher/output_readers.h: as PID 1, our exit kills it).
void FinishOutput() {
  std::cout.flush();
  std::fflush(nullptr);
  trainlet::launcher::FinishOutputReaders();
}

// Leaves without running exit handlers: after the node probe started, its
// thread may still be inside NVML (a hung driver), where library destructors
// must not run under it.
[[noreturn]] void Leave(int code) {
  code = Finish(code);
  FinishOutput();
  std::_Exit(code);
}

int Fail(const std::string& command, int code, absl::string_view message) {
  std::cerr << "trainlet " << command << ": " << message << "\n";
  g_exit->reason = std::string(message);
  return code;
}

int ConfigError(const std::string& command, const absl::Status& status) {
  Fail(command, 0, status.message());
  std::cerr << "Run 'trainlet " << command << " --help' for usage.\n";
  return trainlet::agent::ExitCodeForConfigError(status);
}

// gRPC resolves names with c-ares (which reads /etc/hosts and resolv.conf
// itself), never with getaddrinfo: in a static binary glibc's resolver aborts
// when nsswitch.conf names a module the static libc lacks (mdns, systemd,
// sss...), as many training images' do. gRPC reads GRPC_DNS_RESOLVER when it
// first resolves, after this. A dynamic build keeps gRPC's default (also
// c-ares) and honours the user's choice.
void ForceAresResolver(const std::map<std::string, std::string>& env) {
#ifdef TRAINLET_STATIC_BUILD
  auto set = env.find("GRPC_DNS_RESOLVER");
  if (set != env.end() && set->second != "ares") {
    std::cerr << "trainlet: ignoring GRPC_DNS_RESOLVER=" << trainlet::SafeForLog(set->second, 32)
              << ": this static build resolves with c-ares only\n";
  }
  setenv("GRPC_DNS_RESOLVER", "ares", 1);
#endif
}

// Before the static initialisers (gRPC's, protobuf's, OpenSSL's...): the
// pages they and the run write, mapped in one call each instead of one page
// fault each (common/code_pages.h). Only an executable has .preinit_array.
// Not under LD_PRELOAD (a dynamic build only): a preloaded allocator or heap
// profiler (heaptrack) must see the first malloc after its own start-up, and
// the blocks held here would be its, not glibc's.
void PrefaultBeforeStaticInitialisers(int, char**, char** envp) {
  for (char** e = envp; e != nullptr && *e != nullptr; ++e) {
    if (std::strncmp(*e, "LD_PRELOAD=", 11) == 0) return;
  }
  trainlet::PrefaultStartupMemory();
}
[[gnu::section(".preinit_array"),
  gnu::used]] void (*const prefault_entry)(int, char**, char**) = PrefaultBeforeStaticInitialisers;

int Main(int argc, char** argv) {
  // The heap blocks held since .preinit_array: the static initialisers'
  // allocations sit above them, mapped; main's reuse them.
  trainlet::ReleaseStartupHeap();
  // [server] Process-wide, before anything else: the soft descriptor limit
  // up to the hard one (docs/security.md), gRPC's own log lines to our
  // logger at DEBUG, absl::Mutex deadlock detection off in release builds
  // (common/deadlock_detection.h: ~10% of the coordinator's CPU at scale).
  trainlet::ConfigureDeadlockDetection();
  trainlet::RaiseDescriptorLimit();
  trainlet::rendezvous::InstallGrpcLogSink();
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << Usage();
    return args.empty() ? trainlet::kExitUsage : trainlet::kExitSuccess;
  }
  const std::string command = args[0];
  args.erase(args.begin());
  if (command == "version" || command == "--version") {
    std::cout << "trainlet " << TRAINLET_VERSION << "\n"
              << "git commit: " << TRAINLET_GIT_COMMIT << "\n"
              << "build type: " << TRAINLET_BUILD_TYPE << "\n"
              << "linkage: " << TRAINLET_LINKAGE << "\n"
              << "protocol version: " << trainlet::rendezvous::kProtocolVersion << "\n";
    Leave(trainlet::kExitSuccess);  // no static destructors to run (they fault in ~10 code pages)
  }
  const Command* known = FindCommand(command);
  if (known == nullptr) return UnknownCommand(command);
  // Before any thread exists: signals to the signalfd, subreaper. Only the
  // commands that supervise (the entrypoints): a foreground command such as
  // `status` or `probe` keeps the default dispositions, so Ctrl-C and
  // SIGTERM end it at once.
  if (known->entrypoint) {
    if (absl::Status s = trainlet::launcher::PrepareProcessForSupervision(); !s.ok()) {
      std::cerr << "trainlet: " << s.message() << "\n";
      return trainlet::kExitOsError;
    }
  }
  if (command == "install") {
    return trainlet::agent::RunInstall(args, "/proc/self/exe", std::cout, std::cerr);
  }
  // The workers' environment is the one trainlet was given: taken before
  // the resolver is forced below.
  const std::map<std::string, std::string> env = CurrentEnvironment();
  if (known->entrypoint) g_exit->log = trainlet::launcher::TerminationLog::FromEnv(env);
  if (known->reads_env) {
    // A misspelt TRAINLET_* variable, like a misspelt flag, is said at once.
    auto warnings = trainlet::agent::CheckTrainletEnvironment(&args, env);
    if (!warnings.ok()) Leave(ConfigError(command, warnings.status()));
    for (const std::string& w : *warnings) TLOG(kWarning) << w;
  }
  ForceAresResolver(env);
  // Small TCP read buffers for the gRPC servers (rendezvous/grpc_memory.h).
  trainlet::rendezvous::DisableGrpcReadChunks();
  if (command == "health") return trainlet::agent::RunHealthProbe(args);
  if (command == "status")
    return trainlet::agent::RunStatusCommand(args, env, std::cout, std::cerr);
  if (command == "probe") {
    // A probe past its timeout may still be inside NVML on its thread.
    Leave(trainlet::agent::RunProbeCommand(args, env, std::cout, std::cerr));
  }
  if (command == "run") {
    auto config = trainlet::agent::ParseRunConfig(args, env, ProbeMachine(env));
    if (!config.ok()) Leave(ConfigError("run", config.status()));
    if (config->help_requested) {
      NoTerminationMessage();
      std::cout << trainlet::agent::RunHelpText();
      Leave(trainlet::kExitSuccess);
    }
    g_exit->node = config->node_id;
    trainlet::SetLogLevel(config->log_level);
    // [server] The descriptor budget, before any gRPC object exists.
    const int hosted =
        config->host_coordinator != trainlet::agent::HostCoordinator::kNo ? config->nnodes.max : 0;
    if (absl::Status s = trainlet::CheckDescriptorBudget(
            trainlet::DescriptorsForAgent(config->nproc_per_node, hosted));
        !s.ok()) {
      Leave(Fail("run", trainlet::kExitOsError, s.message()));
    }
    Leave(trainlet::agent::RunAgent(*config, env));
  }
  if (command == "mpi-launcher" || command == "mpi-worker") {
    const trainlet::agent::MpiRole role = command == "mpi-launcher"
                                              ? trainlet::agent::MpiRole::kLauncher
                                              : trainlet::agent::MpiRole::kWorker;
    auto config = trainlet::agent::ParseMpiConfig(role, args, env, ProbeMachine(env));
    if (!config.ok()) Leave(ConfigError(command, config.status()));
    if (config->run.help_requested) {
      NoTerminationMessage();
      std::cout << trainlet::agent::MpiHelpText(role);
      Leave(trainlet::kExitSuccess);
    }
    g_exit->node = config->run.node_id;
    trainlet::SetLogLevel(config->run.log_level);
    const int hosted = config->run.host_coordinator != trainlet::agent::HostCoordinator::kNo
                           ? config->run.nnodes.max
                           : 0;
    if (absl::Status s = trainlet::CheckDescriptorBudget(trainlet::DescriptorsForAgent(1, hosted));
        !s.ok()) {
      Leave(Fail(command, trainlet::kExitOsError, s.message()));
    }
    // A readiness probe cancelled by a stop may still be inside libssh on a
    // detached thread (bounded by its attempt timeout), like the node probe
    // in NVML: no atexit handlers (OpenSSL's) under it.
    Leave(trainlet::agent::RunMpi(*config, env));
  }
  if (command == "coordinator") {
    auto config = trainlet::agent::ParseCoordinatorConfig(args, env);
    if (!config.ok()) return Finish(ConfigError("coordinator", config.status()));
    if (config->help_requested) {
      NoTerminationMessage();
      std::cout << trainlet::agent::CoordinatorHelpText();
      return trainlet::kExitSuccess;
    }
    trainlet::SetLogLevel(config->log_level);
    return Finish(trainlet::agent::RunStandaloneCoordinator(*config));
  }
  if (command == "controller") {
    auto config = trainlet::agent::ParseControllerConfig(args, env);
    if (!config.ok()) return Finish(ConfigError("controller", config.status()));
    if (config->help_requested) {
      NoTerminationMessage();
      std::cout << trainlet::agent::ControllerHelpText();
      return trainlet::kExitSuccess;
    }
    trainlet::SetLogLevel(config->log_level);
    config->version = TRAINLET_VERSION;
    return Finish(trainlet::agent::RunController(*config));
  }
  return UnknownCommand(command);  // (every command of kCommands is handled above)
}

}  // namespace

int main(int argc, char** argv) {
  // The commands that return (usage errors, `coordinator`, `controller`,
  // `status`...) run their exit handlers after this; `run` leaves earlier.
  const int code = Main(argc, argv);
  FinishOutput();
  return code;
}
