// trainlet: the in-pod agent for distributed training. A thin main: find
// the command in the table (cmd/command.h), prepare the process for it,
// parse, run, and map the result to the exit code and the termination
// message.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <iostream>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "cmd/command.h"
#include "cmd/env_check.h"
#include "common/code_pages.h"
#include "common/deadlock_detection.h"
#include "common/descriptors.h"
#include "common/exit_codes.h"
#include "common/logging.h"
#include "config/options.h"
#include "launcher/output_readers.h"
#include "launcher/signals.h"
#include "launcher/termination_log.h"
#include "rendezvous/grpc_log.h"
#include "rendezvous/grpc_memory.h"

extern char** environ;

namespace {

using trainlet::cmd::Command;

// The commands, in the order --help lists them.
const Command* const kCommands[] = {
    &trainlet::cmd::kRunCommand,        &trainlet::cmd::kMpiLauncherCommand,
    &trainlet::cmd::kMpiWorkerCommand,  &trainlet::cmd::kCoordinatorCommand,
    &trainlet::cmd::kControllerCommand, &trainlet::cmd::kStatusCommand,
    &trainlet::cmd::kHealthCommand,     &trainlet::cmd::kProbeCommand,
    &trainlet::cmd::kInstallCommand,    &trainlet::cmd::kSshConnectCommand,
    &trainlet::cmd::kVersionCommand,
};

const Command* FindCommand(absl::string_view name) {
  for (const Command* c : kCommands) {
    if (name == c->name) return c;
  }
  return nullptr;
}

std::string Usage() {
  std::string out = "Usage: trainlet <command> [options]\n\nCommands:\n";
  for (const Command* c : kCommands) {
    absl::StrAppend(&out, "  ", c->synopsis, "\n");
    for (absl::string_view line : absl::StrSplit(c->summary, '\n')) {
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
  for (const Command* c : kCommands) names.push_back(c->name);
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

// The end of a command: the termination message, and for a command that
// exits at once (Command::exits_at_once), the exit itself.
int End(const Command& command, int code) {
  if (command.exits_at_once) Leave(code);
  return Finish(code);
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
  const Command* known = FindCommand(command == "--version" ? "version" : command);
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
  // The workers' environment is the one trainlet was given: taken before
  // the resolver is forced below.
  const std::map<std::string, std::string> env = CurrentEnvironment();
  if (known->entrypoint) g_exit->log = trainlet::launcher::TerminationLog::FromEnv(env);
  auto usage_error = [&](const absl::Status& status) {
    std::cerr << trainlet::agent::UsageErrorText(known->name, status);
    g_exit->reason = std::string(status.message());
    return End(*known, trainlet::ExitCodeForConfigError(status));
  };
  if (known->reads_env) {
    // A misspelt TRAINLET_* variable, like a misspelt flag, is said at once.
    auto warnings = trainlet::agent::CheckTrainletEnvironment(&args, env);
    if (!warnings.ok()) return usage_error(warnings.status());
    for (const std::string& w : *warnings) TLOG(kWarning) << w;
  }
  ForceAresResolver(env);
  // Small TCP read buffers for the gRPC servers (rendezvous/grpc_memory.h).
  trainlet::rendezvous::DisableGrpcReadChunks();
  absl::StatusOr<trainlet::cmd::Invocation> invocation = known->parse(args, env);
  if (!invocation.ok()) return usage_error(invocation.status());
  if (invocation->help) {
    // Help ended nothing a pod's status should say.
    NoTerminationMessage();
    std::cout << known->help();
    return End(*known, trainlet::kExitSuccess);
  }
  g_exit->node = invocation->node;
  return End(*known, invocation->run(&g_exit->reason));
}

}  // namespace

int main(int argc, char** argv) {
  // The commands that return (usage errors, `coordinator`, `controller`,
  // `status`...) run their exit handlers after this; `run` leaves earlier.
  const int code = Main(argc, argv);
  FinishOutput();
  return code;
}
