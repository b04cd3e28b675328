#include "agent/run_agent.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <memory>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "agent/agent.h"
#include "agent/coordinator_options.h"
#include "agent/options.h"
#include "common/exit_codes.h"
#include "common/host_names.h"
#include "common/logging.h"
#include "common/periodic.h"
#include "launcher/command_resolver.h"
#include "launcher/supervisor.h"
#include "rendezvous/coordinator.h"
#include "rendezvous/coordinator_client.h"
#include "rendezvous/coordinator_service.h"
#include "rendezvous/grpc_server.h"

namespace trainlet::agent {
namespace {

namespace v1 = ::trainlet::v1;

// How long node 0 keeps its coordinator up after the verdict, so that every
// agent hears it.
constexpr absl::Duration kDrainWait = absl::Seconds(10);

// TEMPORARY (until launcher::Supervisor implements WorkerGroup itself): the
// WorkerGroup view of today's Supervisor.
class SupervisorGroup : public launcher::WorkerGroup {
 public:
  explicit SupervisorGroup(launcher::Supervisor* s) : s_(s) {}
  absl::Status Start(const std::vector<launcher::ProcessSpec>& workers) override {
    gone_sent_ = false;
    return s_->Start(workers);
  }
  absl::Status StartHelper(const launcher::ProcessSpec&) override {
    return absl::UnimplementedError("helpers");
  }
  Event Wait(absl::Duration timeout) override {
    if (!gone_sent_ && started_ && s_->running_count() == 0) {
      gone_sent_ = true;
      return Event{EventType::kWorkersGone};
    }
    launcher::Supervisor::Event e = s_->Wait(timeout);
    Event out;
    out.exit = e.exit;
    out.signal = e.signal;
    switch (e.type) {
      case launcher::Supervisor::EventType::kWorkerExited:
        out.type = EventType::kWorkerExited;
        started_ = true;
        break;
      case launcher::Supervisor::EventType::kSignal:
        out.type = EventType::kSignal;
        break;
      case launcher::Supervisor::EventType::kWakeup:
        out.type = EventType::kWakeup;
        break;
      case launcher::Supervisor::EventType::kTimeout:
        out.type = EventType::kTimeout;
        break;
    }
    return out;
  }
  void Wake() override { s_->Wake(); }
  void SignalWorkers(int sig) override { s_->SignalAll(sig); }
  int running_workers() const override { return s_->running_count(); }

 private:
  launcher::Supervisor* s_;
  bool started_ = false;
  bool gone_sent_ = false;
};

// A free TCP port on this host (bound and released: the worker that listens
// on it, rank 0's torch store, binds it shortly after).
absl::StatusOr<int> PickFreePort() {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return absl::ResourceExhaustedError("cannot create a socket to pick a free port");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  socklen_t len = sizeof(addr);
  int port = -1;
  if (bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  close(fd);
  if (port <= 0) return absl::ResourceExhaustedError("cannot pick a free port for MASTER_PORT");
  return port;
}

// Where the hosting agent dials its own coordinator: the address it listens
// on, or loopback for a wildcard.
std::string DialAddressFor(const std::string& bind_addr) {
  if (bind_addr == "0.0.0.0" || bind_addr.empty()) return "127.0.0.1";
  if (bind_addr == "::") return "::1";
  return bind_addr;
}

// The coordinator this agent hosts (node 0, or a single-node run).
struct HostedCoordinator {
  std::unique_ptr<rendezvous::Coordinator> core;
  std::unique_ptr<rendezvous::CoordinatorService> service;
  std::unique_ptr<rendezvous::GrpcServer> server;
  std::unique_ptr<PeriodicThread> ticker;
};

}  // namespace

int RunAgent(const RunConfig& config, const std::map<std::string, std::string>& base_env) {
  const uint64_t incarnation = rendezvous::NewIncarnation();
  SetLogPrefix(absl::StrFormat("node=%s rank=? inc=%08x", config.node_id,
                               static_cast<uint32_t>(incarnation >> 32)));
  for (const std::string& note : config.discovery_notes) TLOG(kInfo) << "discovered " << note;
  for (const std::string& warning : config.warnings) TLOG(kWarning) << warning;

  auto supervisor = launcher::Supervisor::Create({});
  if (!supervisor.ok()) {
    TLOG(kError) << "cannot supervise workers: " << supervisor.status().message();
    return kExitOsError;
  }
  // Fail before any rendezvous when COMMAND cannot run, like tini.
  auto path = base_env.find("PATH");
  absl::StatusOr<std::string> resolved =
      launcher::ResolveCommand(config.command[0], path == base_env.end() ? "" : path->second);
  if (!resolved.ok()) {
    TLOG(kError) << resolved.status().message();
    return launcher::ExitCodeForSpawnError(resolved.status());
  }
  int master_port = config.master_port;
  if (master_port == 0) {
    absl::StatusOr<int> port = PickFreePort();
    if (!port.ok()) {
      TLOG(kError) << port.status().message();
      return kExitOsError;
    }
    master_port = *port;
  }

  // The health server: grpc.health.v1 only (kubelet probes).
  std::unique_ptr<rendezvous::GrpcServer> health;
  if (config.health_port > 0) {
    auto started = rendezvous::GrpcServer::Start(
        {JoinHostPort(config.health_bind_addr, config.health_port)}, {});
    if (!started.ok()) {
      TLOG(kError) << started.status().message() << " (--health-port)";
      return kExitOsError;
    }
    health = std::move(*started);
  }

  // The coordinator, when this agent hosts it. kIfPortFree: whoever binds
  // the port hosts it, the others join (torchrun's c10d semantics).
  HostedCoordinator hosted;
  std::unique_ptr<rendezvous::GrpcServer> server;
  bool host = config.host_coordinator != HostCoordinator::kNo;
  int coordinator_port = config.coordinator_port;
  if (host) {
    hosted.core = std::make_unique<rendezvous::Coordinator>(CoordinatorOptionsFrom(config));
    hosted.service =
        std::make_unique<rendezvous::CoordinatorService>(hosted.core.get(), config.token);
    auto started = rendezvous::GrpcServer::Start(
        {JoinHostPort(config.bind_addr, config.coordinator_port)}, {hosted.service.get()});
    if (started.ok()) {
      server = std::move(*started);
    } else if (config.host_coordinator == HostCoordinator::kIfPortFree) {
      TLOG(kInfo) << "another agent on this host holds the coordinator port "
                  << config.coordinator_port << ": joining it";
      host = false;
      hosted = HostedCoordinator{};
    } else {
      TLOG(kError) << started.status().message();
      return kExitOsError;
    }
  }
  if (host) {
    coordinator_port = server->port(0);
    rendezvous::Coordinator* core = hosted.core.get();
    hosted.ticker =
        std::make_unique<PeriodicThread>(absl::Milliseconds(20), [core] { core->Tick(); });
    TLOG(kInfo) << "coordinator for job " << config.job_id << " listening on "
                << JoinHostPort(config.bind_addr, coordinator_port) << " ("
                << NnodesToString(config.nnodes) << " nodes)";
  }

  // The hosting agent dials its own coordinator where it listens.
  const std::string dial_host = host ? DialAddressFor(config.bind_addr) : config.coordinator_host;
  rendezvous::ClientOptions client_options;
  client_options.target = JoinHostPort(dial_host, coordinator_port);
  client_options.token = config.token;
  auto client = std::make_unique<rendezvous::GrpcRendezvousClient>(client_options);
  TLOG(kInfo) << "joining job " << config.job_id << " at " << client_options.target << " as node "
              << config.node_id
              << (config.node_rank_hint >= 0
                      ? absl::StrCat(" (rank hint ", config.node_rank_hint, ")")
                      : "")
              << "; command: " << absl::StrJoin(config.command, " ");

  SupervisorGroup workers(supervisor->get());
  AgentSeams seams;
  seams.workers = &workers;
  seams.client = client.get();
  seams.clock = Clock::Monotonic();
  rendezvous::GrpcServer* serving[] = {health.get(), server.get()};
  seams.set_serving = [serving](bool on) {
    for (rendezvous::GrpcServer* s : serving) {
      if (s != nullptr) s->SetServing(on);
    }
  };
  Agent agent(config, base_env, RoundOptionsFrom(config, incarnation, master_port), seams);
  const int exit_code = agent.Run();
  // The client's callbacks refer to the agent: stop them first.
  client.reset();

  if (hosted.core) {
    const rendezvous::Phase phase = hosted.core->GetSnapshot().phase;
    if (phase == rendezvous::Phase::kSucceeded || phase == rendezvous::Phase::kFailed) {
      // Keep the coordinator up until every agent heard the verdict.
      if (!hosted.core->AwaitDrained(kDrainWait)) {
        TLOG(kWarning) << "not every agent acknowledged the verdict within "
                       << absl::FormatDuration(kDrainWait);
      }
    }
  }
  if (server) server->Shutdown(absl::Milliseconds(100));
  if (health) health->Shutdown(absl::ZeroDuration());
  hosted.ticker.reset();
  if (hosted.core) hosted.core->Shutdown("agent exiting");
  supervisor->reset();
  return exit_code;
}

}  // namespace trainlet::agent
