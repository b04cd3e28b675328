// trainlet: the in-pod agent for distributed training. A thin main: parse
// the subcommand's options, build the config, run, map to an exit code.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "agent/controller_command.h"
#include "agent/coordinator_config.h"
#include "agent/health_probe.h"
#include "agent/install_command.h"
#include "agent/mpi_config.h"
#include "agent/node_probe.h"
#include "agent/options.h"
#include "agent/probe_command.h"
#include "agent/run_agent.h"
#include "agent/run_config.h"
#include "agent/run_mpi.h"
#include "agent/standalone_coordinator.h"
#include "agent/status_command.h"
#include "agent/system_probe.h"
#include "common/code_pages.h"
#include "common/deadlock_detection.h"
#include "common/descriptors.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "launcher/output_readers.h"
#include "launcher/signals.h"
#include "rendezvous/grpc_log.h"
#include "rendezvous/grpc_memory.h"
#include "rendezvous/protocol_version.h"

extern char** environ;

namespace {

constexpr char kUsage[] =
    "Usage: trainlet <command> [options]\n"
    "\n"
    "Commands:\n"
    "  run [options] -- COMMAND [ARGS...]\n"
    "        Join the job's rendezvous and run COMMAND as the local workers, with\n"
    "        the environment torchrun, JAX, TensorFlow, XGBoost and Paddle expect.\n"
    "  mpi-launcher [options] -- COMMAND [ARGS...]\n"
    "        The MPI launcher pod: host the rendezvous, wait until every worker's\n"
    "        sshd is really reachable, write hostfiles, run mpirun, deepspeed, ...\n"
    "  mpi-worker [options]\n"
    "        An MPI worker pod: supervise sshd with the job's key, give SSH\n"
    "        sessions the pod's environment, exit with the job.\n"
    "  coordinator [options]\n"
    "        Run the rendezvous coordinator on its own (normally node rank 0's\n"
    "        agent hosts it).\n"
    "  controller [options]\n"
    "        Run the thin controller agents report health and progress to\n"
    "        (--controller=HOST:PORT); keeps each job's history (docs/controller.md).\n"
    "  status [--controller=HOST:PORT] [JOB] [--json]\n"
    "        Print what the controller knows: every job, or one job's nodes and history.\n"
    "  health [HOST:]PORT\n"
    "        Probe an agent's readiness (grpc.health.v1).\n"
    "  probe [options]\n"
    "        Print what this node has (GPUs, NICs, NUMA, /dev/shm, NVML, NCCL) as\n"
    "        JSON, an NCCL topology file, or NCCL environment advice.\n"
    "  status [--controller=HOST:PORT] [--json] [JOB]\n"
    "        Show the jobs the trainlet controller sees (its HTTP port, default\n"
    "        127.0.0.1:29680): nodes, workers, progress, restarts, hangs, GPUs.\n"
    "  install DEST\n"
    "        Copy this binary to DEST (the init-container pattern: an image\n"
    "        without a shell puts trainlet into a shared volume).\n"
    "  version\n"
    "        Print the version.\n"
    "\n"
    "Run 'trainlet <command> --help' for a command's options.\n"
    "\n"
    "Exit codes of 'trainlet run' (docs/exit-codes.md):\n"
    "  0        every worker on every node exited 0\n"
    "  1-63, 80-125\n"
    "           a local worker's own exit code (the first local failure)\n"
    "  64       usage: bad flag or environment value, torchrun flag, no COMMAND\n"
    "  69       coordinator unreachable, join timeout, coordinator lost, fenced\n"
    "  70       internal error in trainlet (please report it)\n"
    "  71       OS resource: port in use, fork failed, descriptor limit\n"
    "  75       a worker on another node failed (or a node was lost)\n"
    "  77       rejected by the coordinator: wrong token or job id, or the TLS\n"
    "           handshake refused (certificate, CA, server name, TLS on one side)\n"
    "  78       inconsistent configuration: rank >= nnodes, no node count in a\n"
    "           JobSet pod, empty or unreadable token file, duplicate node,\n"
    "           TLS options given in part or naming unusable files\n"
    "  79       elastic job gave up: restarts used up or too few nodes\n"
    "  126      COMMAND cannot be executed\n"
    "  127      COMMAND not found\n"
    "  128+N    a worker (or the agent) was killed by signal N\n";

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

// Leaves without running exit handlers: after the node probe started, its
// thread may still be inside NVML (a hung driver), where library destructors
// must not run under it. An entrypoint's `tee` reading our output gets to
// finish first (launcher/output_readers.h: as PID 1, our exit kills it).
[[noreturn]] void Leave(int code) {
  std::cout.flush();
  std::fflush(nullptr);
  trainlet::launcher::FinishOutputReaders();
  std::_Exit(code);
}

int ConfigError(const char* command, const absl::Status& status) {
  std::cerr << "trainlet " << command << ": " << status.message() << "\n"
            << "Run 'trainlet " << command << " --help' for usage.\n";
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

}  // namespace

int main(int argc, char** argv) {
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
  // Before any thread exists: signals to the signalfd, subreaper.
  if (absl::Status s = trainlet::launcher::PrepareProcessForSupervision(); !s.ok()) {
    std::cerr << "trainlet: " << s.message() << "\n";
    return trainlet::kExitOsError;
  }
  std::vector<std::string> args(argv + 1, argv + argc);
  if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
    std::cout << kUsage;
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
  if (command == "install") {
    return trainlet::agent::RunInstall(args, "/proc/self/exe", std::cout, std::cerr);
  }
  // The workers' environment is the one trainlet was given: taken before
  // the resolver is forced below.
  const std::map<std::string, std::string> env = CurrentEnvironment();
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
      std::cout << trainlet::agent::RunHelpText();
      Leave(trainlet::kExitSuccess);
    }
    trainlet::SetLogLevel(config->log_level);
    // [server] The descriptor budget, before any gRPC object exists.
    const int hosted =
        config->host_coordinator != trainlet::agent::HostCoordinator::kNo ? config->nnodes.max : 0;
    if (absl::Status s = trainlet::CheckDescriptorBudget(
            trainlet::DescriptorsForAgent(config->nproc_per_node, hosted));
        !s.ok()) {
      std::cerr << "trainlet run: " << s.message() << "\n";
      Leave(trainlet::kExitOsError);
    }
    Leave(trainlet::agent::RunAgent(*config, env));
  }
  if (command == "mpi-launcher" || command == "mpi-worker") {
    const trainlet::agent::MpiRole role = command == "mpi-launcher"
                                              ? trainlet::agent::MpiRole::kLauncher
                                              : trainlet::agent::MpiRole::kWorker;
    auto config = trainlet::agent::ParseMpiConfig(role, args, env, ProbeMachine(env));
    if (!config.ok()) Leave(ConfigError(command.c_str(), config.status()));
    if (config->run.help_requested) {
      std::cout << trainlet::agent::MpiHelpText(role);
      Leave(trainlet::kExitSuccess);
    }
    trainlet::SetLogLevel(config->run.log_level);
    const int hosted = config->run.host_coordinator != trainlet::agent::HostCoordinator::kNo
                           ? config->run.nnodes.max
                           : 0;
    if (absl::Status s = trainlet::CheckDescriptorBudget(trainlet::DescriptorsForAgent(1, hosted));
        !s.ok()) {
      std::cerr << "trainlet " << command << ": " << s.message() << "\n";
      Leave(trainlet::kExitOsError);
    }
    // A readiness probe cancelled by a stop may still be inside libssh on a
    // detached thread (bounded by its attempt timeout), like the node probe
    // in NVML: no atexit handlers (OpenSSL's) under it.
    Leave(trainlet::agent::RunMpi(*config, env));
  }
  if (command == "coordinator") {
    auto config = trainlet::agent::ParseCoordinatorConfig(args, env);
    if (!config.ok()) return ConfigError("coordinator", config.status());
    if (config->help_requested) {
      std::cout << trainlet::agent::CoordinatorHelpText();
      return trainlet::kExitSuccess;
    }
    trainlet::SetLogLevel(config->log_level);
    return trainlet::agent::RunStandaloneCoordinator(*config);
  }
  if (command == "controller") {
    auto config = trainlet::agent::ParseControllerConfig(args, env);
    if (!config.ok()) return ConfigError("controller", config.status());
    if (config->help_requested) {
      std::cout << trainlet::agent::ControllerHelpText();
      return trainlet::kExitSuccess;
    }
    trainlet::SetLogLevel(config->log_level);
    config->version = TRAINLET_VERSION;
    return trainlet::agent::RunController(*config);
  }
  std::cerr << "trainlet: unknown command \"" << command << "\"\n\n" << kUsage;
  return trainlet::kExitUsage;
}
