#include "agent/agent_store.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <optional>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/logging.h"
#include "config/python_command.h"
#include "launcher/signals.h"

namespace trainlet::agent {
namespace {

// The store: torch's own TCPStore server (so the wire protocol is always the
// installed torch's), listening on every address; then it waits, using no
// CPU. "127.0.0.1" is only where the master's own client connects.
constexpr char kStoreProgram[] = R"PY(import sys
port = int(sys.argv[1])
try:
    import datetime, signal
    from torch.distributed import TCPStore
except Exception as e:
    sys.stderr.write("cannot import torch.distributed.TCPStore with %s (%s: %s); make torch "
                     "importable by it or drop --agent-store\n" % (sys.executable, type(e).__name__, e))
    sys.exit(78)
try:
    store = TCPStore("127.0.0.1", port, None, True, datetime.timedelta(seconds=60),
                     wait_for_workers=False)
except Exception as e:
    sys.stderr.write("cannot listen on port %d (%s); pick another --agent-store-port\n" % (port, e))
    sys.exit(1)
while True:
    signal.pause()
)PY";

constexpr absl::Duration kPollInterval = absl::Milliseconds(20);

}  // namespace

int AgentStorePort(const RunConfig& config, int master_port) {
  if (config.agent_store_port > 0) return config.agent_store_port;
  return master_port > 1 ? master_port - 1 : 0;
}

std::vector<std::string> PythonInterpreterArgv(const RunConfig& config) {
  std::optional<PythonCommand> python = ParsePythonCommand(config.command);
  if (!python.has_value()) return {"python3"};
  std::vector<std::string> argv = python->launcher;
  argv.insert(argv.end(), python->options.begin(), python->options.end());
  return argv;
}

launcher::ProcessSpec AgentStoreSpec(const RunConfig& config,
                                     const std::map<std::string, std::string>& base_env, int port) {
  launcher::ProcessSpec spec;
  spec.role = launcher::ProcessRole::kHelper;
  spec.name = kAgentStoreHelper;
  spec.restart = launcher::RestartPolicy::kAlways;
  spec.output = launcher::OutputMode::kPrefix;
  spec.leaves_orphans = false;
  spec.argv = PythonInterpreterArgv(config);
  spec.argv.insert(spec.argv.end(), {"-c", kStoreProgram, absl::StrCat(port)});
  for (const auto& [k, v] : base_env) spec.env.push_back(absl::StrCat(k, "=", v));
  return spec;
}

bool AcceptsOnLoopback(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return false;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  // A blocking connect on loopback is answered at once: accepted or refused.
  const bool ok = connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

absl::Status AgentStore::Launch(const launcher::ProcessSpec& spec) {
  return supervisor_->StartHelper(spec);
}

absl::Status AgentStore::AwaitListening(absl::Duration timeout, int* signal) {
  const absl::Time start = Clock::Monotonic()->Now();
  const absl::Time deadline = start + timeout;
  while (!AcceptsOnLoopback(port_)) {
    const absl::Time now = Clock::Monotonic()->Now();
    if (now >= deadline) {
      return absl::DeadlineExceededError(absl::StrFormat(
          "--agent-store: the store is not listening on port %d after %s; start without "
          "--agent-store, or check what its output says",
          port_, absl::FormatDuration(timeout)));
    }
    const launcher::WorkerGroup::Event ev =
        supervisor_->Wait(std::min(kPollInterval, deadline - now));
    if (ev.type == launcher::WorkerGroup::EventType::kSignal &&
        launcher::IsTerminatingSignal(ev.signal)) {
      *signal = ev.signal;
      return absl::CancelledError(absl::StrCat("signal ", ev.signal, " while starting the store"));
    }
    if (ev.type == launcher::WorkerGroup::EventType::kHelperExited &&
        ev.exit.name == kAgentStoreHelper) {
      return absl::FailedPreconditionError(absl::StrFormat(
          "--agent-store: the store exited with code %d before it listened on port %d (%s)",
          ev.exit.exit_code, port_,
          ev.exit.exit_code == kAgentStoreNoTorch
              ? "torch.distributed is not importable by the COMMAND's Python; see its line above"
              : "see its lines above"));
    }
  }
  TLOG(kInfo) << "agent store listening on port " << port_ << " after "
              << absl::StrFormat("%.0f ms",
                                 absl::ToDoubleMilliseconds(Clock::Monotonic()->Now() - start));
  return absl::OkStatus();
}

bool AgentStore::OnRound(const v1::Assignment& assignment) {
  if (assignment.node_rank() != 0 || assignment.agent_store_port() != port_) return false;
  const int count = assignment.restart_count();
  const pid_t pid = supervisor_->helper_pid(kAgentStoreHelper);
  if (pid <= 0) {  // being restarted: the store that comes up serves it.
    TLOG(kWarning) << "agent store on port " << port_
                   << " is being restarted; this round's workers wait for it (torch's clients "
                      "retry until their timeout)";
    carried_.insert(count);
    return false;
  }
  if (pid != served_pid_) {  // a fresh store: it has served what was carried.
    served_pid_ = pid;
    served_ = std::move(carried_);
    carried_.clear();
  }
  if (served_.insert(count).second) return false;
  TLOG(kInfo) << "agent store: restart count " << count
              << " was served by this store already (a new coordinator counts again); "
                 "starting a fresh store so that the workers do not meet that round's keys";
  kill(pid, SIGKILL);
  carried_ = {count};
  return true;
}

}  // namespace trainlet::agent
